//! `pmwire bench remote-offload`: the copy engine's latency and where
//! offloading starts to pay (issue 13: no cliffs in the copy engine), over
//! UCX tcp and/or sm. Three servers run in the process, alike but for
//! [`ServerConfig::copy_inline_max_bytes`]: the default
//! ([`INLINE_MAX_BYTES`]: small RpcOffload writes are copied on the event
//! loop while the engine is idle), `handoff` (0: every copy goes to the
//! helper thread, as before issue 13) and `inline` (every write that finds
//! the engine idle is copied on the loop).
//!
//! - Latency, one write outstanding, 64 B to 64 KiB: Rpc, RpcOffload on the
//!   default server, and RpcOffload on `handoff`. Each cell runs in
//!   [`ROUNDS`] rounds, the variants taking turns within a round so that
//!   they see the same machine; p50 and p99 are over every round's samples.
//! - The crossover, window 8, 4 KiB to 128 KiB: RpcOffload GB/s on `inline`
//!   against `handoff`, rounds alternating, median round. Above the size
//!   where `handoff` wins, writes should go to the helper.
//!
//! Headlines: the worst RpcOffload/Rpc p50 at 64 B–4 KiB (target ≤ 1.3×)
//! and the worst RpcOffload p99/p50 there (target ≤ 3×).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use pmwire_remote::client::Client;
use pmwire_remote::copy_engine::INLINE_MAX_BYTES;
use pmwire_remote::proto::{Guarantee, Method};
use pmwire_remote::server::ServerConfig;
use transport::UcxTransport;

use super::common::{finish, latency_result, ratio, ServerThread, CORES_NOTE};
use crate::measure::median;
use crate::schema::BenchResult;
use crate::{Headline, SuiteReport};

/// The bench name in results.
pub const BENCH: &str = "remote_offload";

/// Latency sizes; the headlines cover those up to [`HEADLINE_MAX_BYTES`].
const SIZES: [u64; 6] = [64, 256, 1024, 4096, 16 << 10, 64 << 10];
/// Largest size the headlines judge (the bound).
const HEADLINE_MAX_BYTES: u64 = 4096;
/// Sizes of the crossover measurement.
const BULK_SIZES: [u64; 6] = [4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10];
/// Writes in flight in the crossover measurement.
const BULK_WINDOW: u64 = 8;
/// Rounds per cell; the variants alternate within each.
const ROUNDS: usize = 5;

/// How the suite runs.
#[derive(Clone, Debug)]
pub struct OffloadOptions {
    /// Short run.
    pub quick: bool,
    /// Transports to run over (`tcp`, `sm`).
    pub transports: Vec<String>,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
}

/// The three servers of one transport and a client of each.
struct Servers {
    /// Kept alive for the clients; dropped last.
    _servers: Vec<ServerThread>,
    default: Client<UcxTransport>,
    handoff: Client<UcxTransport>,
    inline: Client<UcxTransport>,
}

impl Servers {
    fn start(tls: &str) -> Result<Servers> {
        let mut servers = Vec::new();
        let mut clients = Vec::new();
        for (name, inline_max) in [("offload-default", INLINE_MAX_BYTES), ("offload-handoff", 0), ("offload-inline", 1 << 20)] {
            let config = ServerConfig { copy_depth: 8, copy_threads: 1, copy_inline_max_bytes: inline_max, ..ServerConfig::default() };
            let server = ServerThread::start_configured(tls, 64 << 20, 1 << 20, false, config, name)?;
            clients.push(server.client(tls, Guarantee::Persistence, 32)?);
            servers.push(server);
        }
        let inline = clients.pop().expect("three");
        let handoff = clients.pop().expect("three");
        let default = clients.pop().expect("three");
        Ok(Servers { _servers: servers, default, handoff, inline })
    }
}

/// Runs the suite.
pub fn run(options: &OffloadOptions) -> Result<SuiteReport> {
    let per_round = if options.quick { 400 } else { 4_000 };
    let bulk_bytes: u64 = if options.quick { 8 << 20 } else { 64 << 20 };
    let mut results = Vec::new();
    let mut headlines = Vec::new();
    println!("remote-offload: {ROUNDS} rounds x {per_round} writes per latency cell; inline limit {INLINE_MAX_BYTES} B; {CORES_NOTE}");
    for tls in &options.transports {
        let mut s = Servers::start(tls)?;
        let mut cell = Vec::new();
        for size in SIZES {
            let mut samples = [Vec::new(), Vec::new(), Vec::new()];
            for _ in 0..ROUNDS {
                samples[0].extend(measure(&mut s.default, Method::Rpc, size, per_round)?);
                samples[1].extend(measure(&mut s.default, Method::RpcOffload, size, per_round)?);
                samples[2].extend(measure(&mut s.handoff, Method::RpcOffload, size, per_round)?);
            }
            for (v, name) in ["rpc", "rpc_offload", "rpc_offload_handoff"].iter().enumerate() {
                cell.push(latency_result(&format!("{BENCH}_{tls}"), name, size, &mut samples[v]).param("transport", tls.as_str()));
            }
        }
        for size in BULK_SIZES {
            let mut gbps = [[0.0f64; ROUNDS]; 2];
            let writes = (bulk_bytes / size).max(BULK_WINDOW);
            for round in 0..ROUNDS {
                for (v, client) in [&mut s.inline, &mut s.handoff].into_iter().enumerate() {
                    let start = Instant::now();
                    windowed(client, size, writes)?;
                    gbps[v][round] = (writes * size) as f64 / start.elapsed().as_secs_f64() / 1e9;
                }
            }
            for (v, name) in ["window8_inline", "window8_handoff"].iter().enumerate() {
                let r = BenchResult::new(&format!("{BENCH}_bulk_{tls}"), name).size(size).param("transport", tls.as_str());
                cell.push(r.param("window", BULK_WINDOW).metric("gb_per_s", median(&mut gbps[v])));
            }
        }
        drop(s);
        headlines.extend(offload_headlines(tls, &cell));
        results.extend(cell);
    }
    let parameters = serde_json::json!({
        "command": if options.quick { "pmwire bench remote-offload --quick" } else { "pmwire bench remote-offload" },
        "writes_per_round": per_round, "rounds": ROUNDS, "sizes": SIZES, "transports": options.transports,
        "bulk_sizes": BULK_SIZES, "bulk_window": BULK_WINDOW, "bulk_bytes_per_round": bulk_bytes,
        "inline_max_bytes": INLINE_MAX_BYTES, "copy_depth": 8, "copy_threads": 1, "payload_crc": false, "note": CORES_NOTE,
    });
    finish("remote-offload", &options.out_dir, parameters, results, Vec::new(), headlines)
}

/// `iters` writes of `size` B at one offset, after a tenth as warm-up: ns each.
fn measure(client: &mut Client<UcxTransport>, method: Method, size: u64, iters: usize) -> Result<Vec<u64>> {
    let bytes = vec![0xa5u8; size as usize];
    let mut samples = Vec::with_capacity(iters);
    for i in 0..iters + iters / 10 {
        let start = Instant::now();
        client.write_persistent(4096, &bytes, method)?;
        if i >= iters / 10 {
            samples.push(start.elapsed().as_nanos() as u64);
        }
    }
    Ok(samples)
}

/// `writes` RpcOffload writes of `size` B over 16 MiB, [`BULK_WINDOW`] in flight.
fn windowed(client: &mut Client<UcxTransport>, size: u64, writes: u64) -> Result<()> {
    let bytes = vec![0x3cu8; size as usize];
    let slots = (16 << 20) / size;
    let (mut issued, mut acked) = (0u64, 0u64);
    while acked < writes {
        while issued < writes && issued - acked < BULK_WINDOW {
            client.submit_rpc_write((issued % slots) * size, &bytes, true)?;
            issued += 1;
        }
        client.wait_any()?.1?;
        acked += 1;
    }
    Ok(())
}

fn metric(cell: &[BenchResult], variant: &str, size: u64, name: &str) -> Option<f64> {
    cell.iter().find(|r| r.variant == variant && r.size_bytes == Some(size)).and_then(|r| r.get(name))
}

fn offload_headlines(tls: &str, cell: &[BenchResult]) -> Vec<Headline> {
    let judged = SIZES.iter().copied().filter(|&s| s <= HEADLINE_MAX_BYTES);
    let worst = |f: &dyn Fn(u64) -> Option<f64>| judged.clone().map(f).try_fold(0.0f64, |m, v| v.map(|v| m.max(v)));
    let p50_ratio = worst(&|s| Some(metric(cell, "rpc_offload", s, "latency_ns_p50")? / metric(cell, "rpc", s, "latency_ns_p50")?));
    let tail = worst(&|s| Some(metric(cell, "rpc_offload", s, "latency_ns_p99")? / metric(cell, "rpc_offload", s, "latency_ns_p50")?));
    vec![
        ratio(&format!("{tls}: RpcOffload p50 / Rpc p50 (worst size, 64 B-4 KiB)"), p50_ratio, 1.3, false, "Rpc, same run, alternating"),
        ratio(&format!("{tls}: RpcOffload p99 / its p50 (worst size, 64 B-4 KiB)"), tail, 3.0, false, "itself"),
    ]
}
