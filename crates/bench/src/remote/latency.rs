//! `pmwire bench remote-latency`: one write outstanding, 64 B to 1 KB, over
//! UCX tcp and sm (seed 000 Fig 3). Variants: a non-durable put (put +
//! transport flush: the put is complete at the target), read-after-write in
//! one and two round trips (visibility on these transports), put + FLUSH,
//! Rpc, RpcOffload, Auto, and DISCARD (a non-durable RPC: the network
//! floor). Peer floor in the same invocation: `ucx_perftest -t ucp_put_lat`
//! next to our put ping-pong with the same semantics (transport::probe),
//! into UCX-allocated memory and into a registered existing mapping.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use pmwire_remote::client::Client;
use pmwire_remote::proto::{Guarantee, Method};
use transport::probe::{put_pingpong, ucx_perftest, PingPong};
use transport::UcxTransport;

use super::common::{finish_with_peers, latency_result, perftest_peer, ratio, ServerThread, CORES_NOTE, TRANSPORTS};
use super::server::ucx_config;
use crate::schema::{BenchResult, Skipped};
use crate::{Headline, SuiteReport};

/// The bench name in results.
pub const BENCH: &str = "remote_latency";
/// The peer-floor bench name.
pub const PEER: &str = "put_pingpong";

/// How the suite runs.
#[derive(Clone, Debug)]
pub struct LatencyOptions {
    /// Short run.
    pub quick: bool,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
}

const SIZES: [u64; 3] = [64, 256, 1024];
const VARIANTS: [&str; 8] = ["discard_floor", "put", "raw_1rtt", "raw_2rtt", "put_flush", "rpc", "rpc_offload", "auto"];

/// Runs the suite.
pub fn run(options: &LatencyOptions) -> Result<SuiteReport> {
    let iters = if options.quick { 2_000 } else { 20_000 };
    let mut results = Vec::new();
    let mut skipped = Vec::new();
    let mut headlines = Vec::new();
    println!("remote-latency: {iters} writes per cell; {CORES_NOTE}");
    for tls in TRANSPORTS {
        let server = ServerThread::start(tls, 64 << 20, 8, 4 << 20)?;
        let mut durable = server.client(tls, Guarantee::Persistence, 32)?;
        let mut visible = server.client(tls, Guarantee::Visibility, 32)?;
        let calibration_rounds = if options.quick { 100 } else { 500 };
        durable.calibrate(1 << 20, &SIZES, calibration_rounds, tls)?;
        let mut cell = Vec::new();
        for size in SIZES {
            for variant in VARIANTS {
                let mut samples = measure(&mut durable, &mut visible, variant, size, iters)?;
                let r = latency_result(&format!("{BENCH}_{tls}"), variant, size, &mut samples).param("transport", tls);
                cell.push(if variant == "auto" { with_auto_evidence(r, &durable, size) } else { r });
            }
        }
        headlines.extend(latency_headlines(tls, &cell));
        results.extend(cell);
        drop((durable, visible, server));
        results.extend(rpc_one_sided_off(tls, iters)?);
        peer_floor(tls, options.quick, &mut results, &mut skipped, &mut headlines);
    }
    let parameters = serde_json::json!({
        "command": if options.quick { "pmwire bench remote-latency --quick" } else { "pmwire bench remote-latency" },
        "iters": iters, "sizes": SIZES, "transports": TRANSPORTS, "note": CORES_NOTE,
        "put": "put + transport flush (complete at the target, not persistent)",
        "raw_2rtt": "put + transport flush, then the get",
    });
    finish_with_peers("remote-latency", &options.out_dir, parameters, perftest_peer(), results, skipped, headlines)
}

/// Auto's choice for `size` and its evidence (the selector's class: each
/// method's calibrated and online estimates, paired ratios, probes,
/// switches) as parameters of the `auto` result.
fn with_auto_evidence(r: BenchResult, durable: &Client<UcxTransport>, size: u64) -> BenchResult {
    let Some(status) = durable.auto_status() else { return r };
    let Some(class) = status.classes.iter().find(|c| c.size_bytes >= size).or(status.classes.last()) else { return r };
    println!(
        "  auto {size} B: {:?} (calibrated {:?}), {} writes, {} probes, {} switches",
        class.chosen, class.calibrated_choice, class.writes, class.probes, class.switches
    );
    r.param("auto_chosen", format!("{:?}", class.chosen))
        .param("auto_calibrated_choice", format!("{:?}", class.calibrated_choice))
        .param("auto_evidence", serde_json::to_value(class).expect("a status serializes"))
}

/// Rpc against a server and client with one-sided access off, as
/// `pmwire serve` runs by default (no cma, no tcp zero-copy put, no RMA
/// feature): what the safe default costs beside the `rpc` row.
fn rpc_one_sided_off(tls: &str, iters: usize) -> Result<Vec<BenchResult>> {
    let server = ServerThread::start_with(tls, 64 << 20, 8, 4 << 20, false)?;
    let mut client = server.client(tls, Guarantee::Persistence, 32)?;
    let mut out = Vec::new();
    for size in SIZES {
        let bytes = vec![0x5au8; size as usize];
        let mut samples = Vec::with_capacity(iters);
        for i in 0..iters + iters / 10 {
            let start = Instant::now();
            client.write_persistent(4096, &bytes, Method::Rpc)?;
            if i >= iters / 10 {
                samples.push(start.elapsed().as_nanos() as u64);
            }
        }
        let r = latency_result(&format!("{BENCH}_{tls}"), "rpc_one_sided_off", size, &mut samples).param("transport", tls);
        out.push(r.param("one_sided", "off"));
    }
    Ok(out)
}

pub(crate) fn measure(
    durable: &mut Client<UcxTransport>,
    visible: &mut Client<UcxTransport>,
    variant: &str,
    size: u64,
    iters: usize,
) -> Result<Vec<u64>> {
    let bytes = vec![0x5au8; size as usize];
    let offset = 4096;
    let mut samples = Vec::with_capacity(iters);
    for i in 0..iters + iters / 10 {
        let start = Instant::now();
        match variant {
            "discard_floor" => durable.discard(&bytes)?,
            "put" => {
                let put = durable.submit_put(offset, &bytes)?;
                let flush = durable.submit_transport_flush()?;
                wait_for(durable, &[put, flush])?;
            }
            "raw_1rtt" => drop(visible.write_persistent(offset, &bytes, Method::OneSidedReadAfterWrite)?),
            "raw_2rtt" => drop(visible.write_persistent(offset, &bytes, Method::ReadAfterWriteTwoTrips)?),
            "put_flush" => drop(durable.write_persistent(offset, &bytes, Method::OneSidedFlush)?),
            "rpc" => drop(durable.write_persistent(offset, &bytes, Method::Rpc)?),
            "rpc_offload" => drop(durable.write_persistent(offset, &bytes, Method::RpcOffload)?),
            "auto" => drop(durable.write_persistent(offset, &bytes, Method::Auto)?),
            other => unreachable!("variant {other}"),
        }
        if i >= iters / 10 {
            samples.push(start.elapsed().as_nanos() as u64);
        }
    }
    Ok(samples)
}

/// Waits until every token in `tokens` completed.
pub fn wait_for(client: &mut Client<UcxTransport>, tokens: &[u64]) -> Result<()> {
    let mut left = tokens.len();
    while left > 0 {
        let (token, result) = client.wait_any()?;
        result?;
        if tokens.contains(&token) {
            left -= 1;
        }
    }
    Ok(())
}

fn p50(cell: &[BenchResult], variant: &str, size: u64) -> Option<f64> {
    cell.iter().find(|r| r.variant == variant && r.size_bytes == Some(size)).and_then(|r| r.get("latency_ns_p50"))
}

fn latency_headlines(tls: &str, cell: &[BenchResult]) -> Vec<Headline> {
    let div = |a: Option<f64>, b: Option<f64>| Some(a? / b?);
    let mut h = vec![
        ratio(
            &format!("{tls}: Rpc 64 B p50 / DISCARD floor p50"),
            div(p50(cell, "rpc", 64), p50(cell, "discard_floor", 64)),
            1.25,
            false,
            "non-durable RPC (DISCARD), same run",
        ),
        ratio(
            &format!("{tls}: read-after-write 1-RTT p50 / 2-RTT p50 (64 B)"),
            div(p50(cell, "raw_1rtt", 64), p50(cell, "raw_2rtt", 64)),
            0.7,
            false,
            "two-round-trip strawman, same run",
        ),
    ];
    let worst = SIZES
        .iter()
        .filter_map(|&s| {
            let best = ["rpc", "rpc_offload", "put_flush"].iter().filter_map(|v| p50(cell, v, s)).fold(f64::INFINITY, f64::min);
            Some(p50(cell, "auto", s)? / best)
        })
        .fold(0.0, f64::max);
    h.push(ratio(&format!("{tls}: Auto p50 / best durable fixed method p50 (worst size)"), Some(worst), 1.1, false, "Rpc, RpcOffload, put+FLUSH"));
    h
}

fn peer_floor(tls: &str, quick: bool, results: &mut Vec<BenchResult>, skipped: &mut Vec<Skipped>, headlines: &mut Vec<Headline>) {
    let iters = if quick { 5_000 } else { 20_000 };
    let config = ucx_config(tls, true, true).expect("known transport");
    let mut p = PingPong { config, size: 64, iters, warmup: iters / 10, timeout: Duration::from_secs(60), ucx_allocated: true };
    let ours_alloc = put_pingpong(&p);
    p.ucx_allocated = false;
    let ours_reg = put_pingpong(&p);
    let port = 20_000 + (std::process::id() % 20_000) as u16;
    let peer = ucx_perftest("ucp_put_lat", tls, 64, iters, iters / 10, port, Duration::from_secs(60));
    let mut push = |variant: &str, r: Result<f64, String>| match r {
        Ok(us) => results.push(BenchResult::new(&format!("{PEER}_{tls}"), variant).size(64).param("transport", tls).metric("latency_ns_p50", us * 1e3)),
        Err(e) => skipped.push(Skipped::new(PEER, variant, &e)),
    };
    push("pmwire_put_ucx_allocated", ours_alloc.as_ref().map(|l| l.p50_us).map_err(|e| e.to_string()));
    push("pmwire_put_registered_map", ours_reg.as_ref().map(|l| l.p50_us).map_err(|e| e.to_string()));
    push("ucx_perftest_put_lat", peer.as_ref().map(|l| l.p50_us).map_err(|e| e.to_string()));
    let peer_p50 = peer.as_ref().ok().map(|l| l.p50_us);
    let name = format!("{tls}: our put p50 / ucx_perftest ucp_put_lat p50 (64 B, UCX-allocated, both busy-poll)");
    let value = ours_alloc.as_ref().ok().zip(peer_p50).map(|(o, p)| o.p50_us / p);
    headlines.push(ratio(&name, value, 1.2, false, "ucx_perftest (UCX 1.13), same invocation"));
    let name = format!("{tls}: our put p50 into a registered mapping / ucx_perftest (UCX-allocated) (information: the pmem data path)");
    let value = ours_reg.as_ref().ok().zip(peer_p50).map(|(o, p)| o.p50_us / p);
    headlines.push(ratio(&name, value, 1.2, false, "ucx_perftest (UCX 1.13), same invocation").for_information());
}
