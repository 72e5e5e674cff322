//! `pmwire bench remote-bulk`: pipelined writes of 1 KB to 128 KB with
//! windows of 1, 8 and 32 over UCX tcp and sm (seed 000 Fig 4 and 7):
//! one-sided puts with one FLUSH per window (the window's puts, a transport
//! flush, then one FLUSH RPC over the window's range), Rpc (the server
//! copies with ordinary stores + clwb + sfence), and RpcOffload (the copy
//! engine's non-temporal copy, 8 in flight). GB/s of durable bytes.
//!
//! Each cell is measured in [`ROUNDS`] rounds, the three variants taking
//! turns within a round so that they see the same machine, and reports the
//! median round. Peer floor in the same invocation: `ucx_perftest -t
//! ucp_put_bw` and `ucp_am_bw` at 64 KB on the same transport.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use pmwire_remote::client::Client;
use pmwire_remote::proto::Guarantee;
use transport::probe::ucx_perftest;
use transport::UcxTransport;

use super::common::{finish_with_peers, perftest_peer, ratio, ServerThread, CORES_NOTE, TRANSPORTS};
use super::latency::wait_for;
use crate::schema::{BenchResult, Skipped};
use crate::{Headline, SuiteReport};

/// The bench name in results.
pub const BENCH: &str = "remote_bulk";
/// The peer-floor bench name.
pub const PEER: &str = "bulk_peer";

/// How the suite runs.
#[derive(Clone, Debug)]
pub struct BulkOptions {
    /// Short run.
    pub quick: bool,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
}

const SIZES: [u64; 4] = [1 << 10, 8 << 10, 64 << 10, 128 << 10];
const WINDOWS: [usize; 3] = [1, 8, 32];
const VARIANTS: [&str; 3] = ["put_flush_per_window", "rpc", "rpc_offload"];
/// Rounds per cell; the median is reported.
const ROUNDS: usize = 3;
/// Bytes of the data area the writes cycle through.
const SPAN: u64 = 32 << 20;
/// The size of the peer-floor runs.
const PEER_SIZE: u64 = 64 << 10;

/// Runs the suite.
pub fn run(options: &BulkOptions) -> Result<SuiteReport> {
    // Full mode moves ≥ 256 MiB per cell over its rounds; quick mode 48 MiB.
    let per_round: u64 = if options.quick { 16 << 20 } else { 96 << 20 };
    let mut results = Vec::new();
    let mut skipped = Vec::new();
    let mut headlines = Vec::new();
    println!("remote-bulk: {} MiB per cell in {ROUNDS} rounds (median); {CORES_NOTE}", (per_round * ROUNDS as u64) >> 20);
    for tls in TRANSPORTS {
        let server = ServerThread::start(tls, 64 << 20, 8, 1 << 20)?;
        let mut client = server.client(tls, Guarantee::Persistence, 64)?;
        let mut cell = Vec::new();
        for size in SIZES {
            for window in WINDOWS {
                let mut gbps = [[0.0f64; ROUNDS]; VARIANTS.len()];
                for round in 0..ROUNDS {
                    for (v, variant) in VARIANTS.iter().enumerate() {
                        let writes = (per_round / size).max(window as u64);
                        let start = Instant::now();
                        move_bytes(&mut client, variant, size, window, writes)?;
                        gbps[v][round] = (writes * size) as f64 / start.elapsed().as_secs_f64() / 1e9;
                    }
                }
                for (v, variant) in VARIANTS.iter().enumerate() {
                    let r = BenchResult::new(&format!("{BENCH}_{tls}"), variant).size(size).param("transport", tls).param("window", window as u64);
                    cell.push(r.metric("gb_per_s", median(gbps[v])));
                }
            }
        }
        drop((client, server));
        headlines.push(offload_headline(tls, &cell));
        let peers = peer_floor(tls, options.quick, &mut results, &mut skipped);
        headlines.extend(peer_headlines(tls, &cell, peers));
        results.extend(cell);
    }
    let parameters = serde_json::json!({
        "command": if options.quick { "pmwire bench remote-bulk --quick" } else { "pmwire bench remote-bulk" },
        "bytes_per_round": per_round, "rounds": ROUNDS, "sizes": SIZES, "windows": WINDOWS, "transports": TRANSPORTS,
        "payload_crc": false, "note": CORES_NOTE,
        "rpc": "the server copies the received payload with ordinary stores, clwb over the range, one sfence",
        "rpc_offload": "the copy engine (1 helper thread, 8 in flight) copies from the receive buffer with non-temporal stores + sfence",
        "put_flush_per_window": "window puts into the registered pool mapping, a transport flush, one FLUSH RPC over the window's range",
    });
    finish_with_peers("remote-bulk", &options.out_dir, parameters, perftest_peer(), results, skipped, headlines)
}

fn median(mut rounds: [f64; ROUNDS]) -> f64 {
    rounds.sort_by(f64::total_cmp);
    rounds[ROUNDS / 2]
}

/// The best window's GB/s of `variant` at `size` in `cell`.
fn best(cell: &[BenchResult], variant: &str, size: u64) -> f64 {
    cell.iter().filter(|r| r.variant == variant && r.size_bytes == Some(size)).filter_map(|r| r.get("gb_per_s")).fold(0.0, f64::max)
}

fn offload_headline(tls: &str, cell: &[BenchResult]) -> Headline {
    let worst = [64u64 << 10, 128 << 10].iter().map(|&s| best(cell, "rpc_offload", s) / best(cell, "rpc", s)).fold(f64::INFINITY, f64::min);
    if tls == "sm" {
        ratio("sm: RpcOffload / Rpc GB/s, 64 KB+ (best window each, worst size)", Some(worst), 1.5, true, "Rpc, same run")
    } else {
        ratio("tcp: RpcOffload / Rpc GB/s, 64 KB+ (information)", Some(worst), 1.5, true, "Rpc, same run").for_information()
    }
}

/// `ucx_perftest` put and AM bandwidth at [`PEER_SIZE`]: (put, am) bytes/s.
fn peer_floor(tls: &str, quick: bool, results: &mut Vec<BenchResult>, skipped: &mut Vec<Skipped>) -> (Option<f64>, Option<f64>) {
    let iters = if quick { 2_000 } else { 20_000 };
    let port = 20_000 + (std::process::id() % 20_000) as u16 + 1;
    let mut run = |test: &str| match ucx_perftest(test, tls, PEER_SIZE as usize, iters, iters / 10, port, Duration::from_secs(60)) {
        Ok(p) => {
            let variant = format!("ucx_perftest_{test}");
            let r = BenchResult::new(&format!("{PEER}_{tls}"), &variant).size(PEER_SIZE).param("transport", tls);
            results.push(r.metric("gb_per_s", p.bw_overall_bytes_per_s / 1e9));
            Some(p.bw_overall_bytes_per_s / 1e9)
        }
        Err(e) => {
            skipped.push(Skipped::new(PEER, &format!("ucx_perftest_{test}"), &e.to_string()));
            None
        }
    };
    (run("ucp_put_bw"), run("ucp_am_bw"))
}

fn peer_headlines(tls: &str, cell: &[BenchResult], (put, am): (Option<f64>, Option<f64>)) -> Vec<Headline> {
    let ours = |variant: &str| Some(best(cell, variant, PEER_SIZE)).filter(|v| *v > 0.0);
    let div = |a: Option<f64>, b: Option<f64>| Some(a? / b?);
    let peer = "ucx_perftest (UCX 1.13), same invocation";
    vec![
        ratio(
            &format!("{tls}: our put + FLUSH GB/s / ucx_perftest ucp_put_bw (64 KB; ours into the registered pool mapping, durable; perftest into UCX-allocated memory)"),
            div(ours("put_flush_per_window"), put),
            1.0,
            true,
            peer,
        )
        .for_information(),
        ratio(
            &format!("{tls}: our Rpc GB/s / ucx_perftest ucp_am_bw (64 KB; ours durable, with a reply per write)"),
            div(ours("rpc"), am),
            1.0,
            true,
            peer,
        )
        .for_information(),
    ]
}

fn move_bytes(client: &mut Client<UcxTransport>, variant: &str, size: u64, window: usize, writes: u64) -> Result<()> {
    let bytes = vec![0x3cu8; size as usize];
    let slots = SPAN / size;
    if variant != "put_flush_per_window" {
        // Keep `window` writes in flight, refilling as replies arrive.
        let offload = variant == "rpc_offload";
        let (mut issued, mut acked) = (0u64, 0u64);
        while acked < writes {
            while issued < writes && issued - acked < window as u64 {
                client.submit_rpc_write((issued % slots) * size, &bytes, offload)?;
                issued += 1;
            }
            let (_, result) = client.wait_any()?;
            result?;
            acked += 1;
        }
        return Ok(());
    }
    let mut done = 0u64;
    let mut tokens = Vec::with_capacity(window + 1);
    while done < writes {
        let first = done % slots;
        let batch = (writes - done).min(window as u64).min(slots - first);
        tokens.clear();
        for i in 0..batch {
            tokens.push(client.submit_put((first + i) * size, &bytes)?);
        }
        tokens.push(client.submit_transport_flush()?);
        wait_for(client, &tokens)?;
        client.flush(first * size, batch * size)?;
        done += batch;
    }
    Ok(())
}
