//! Put and RPC latency through pmwire-transport, next to `ucx_perftest` on
//! the same transport, measured in the same run.
//!
//! ```text
//! cargo run --release -p pmwire-transport --example put_latency -- [tcp|sm] [SIZE] [ITERS] [put-only]
//! ```
//!
//! `put-only` runs our put ping-pong into UCX-allocated memory and nothing
//! else, for a profiler (`perf record -g`). `poll-cost` times ITERS idle
//! polls of one listening transport: `ucp_worker_progress` alone (UCX's
//! part of a spin-poll) against `Transport::poll` (UCX's plus ours), in
//! interleaved rounds.
//!
//! Prints one line per measurement (half round trip, µs) and the ratios
//! ours / ucx_perftest. Both sides busy-poll while measuring, as
//! ucx_perftest does: on a 2-core machine under load the numbers include
//! scheduling noise, so compare ratios from one run, not absolute values.

use std::time::Duration;

use transport::probe::{put_pingpong, rpc_pingpong, ucx_perftest, PingPong};
use transport::UcxConfig;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which = args.first().map(String::as_str).unwrap_or("tcp");
    let size: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    let iters: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let warmup = (iters / 10).max(100);
    // Ours needs `tcp` next to `sm` for the connection manager (see
    // UcxConfig::shared_memory); ucx_perftest exchanges addresses itself,
    // so plain `sm` is the same data path for it.
    let (config, perftest_tls) = match which {
        "sm" => (UcxConfig::shared_memory(), "sm"),
        _ => (UcxConfig::tls("tcp"), "tcp"),
    };
    // One-sided access is opt-in (put and get need it on both ends).
    let config = config.with_var("NET_DEVICES", "lo").with_one_sided();
    let timeout = Duration::from_secs(120);
    let mut p = PingPong {
        config,
        size,
        iters,
        warmup,
        timeout,
        ucx_allocated: true,
    };
    let port = free_port();
    if args.get(3).map(String::as_str) == Some("poll-cost") {
        poll_cost(&p.config, iters);
        return;
    }

    println!("transport {which}, {size} B, {iters} iterations (+{warmup} warm-up); half round trip in µs");
    println!(
        "{:<28} {:>10} {:>10} {:>10}",
        "measurement", "p50", "mean", "p99/overall"
    );
    // Into UCX-allocated memory: the same data path as ucx_perftest.
    let ours_put = put_pingpong(&p).expect("our put ping-pong");
    println!(
        "{:<28} {:>10.3} {:>10.3} {:>10.3}",
        "pmwire put, UCX-allocated", ours_put.p50_us, ours_put.mean_us, ours_put.p99_us
    );
    if args.get(3).map(String::as_str) == Some("put-only") {
        return;
    }
    // Into a registered existing mapping, as a pmem region is exported.
    p.ucx_allocated = false;
    let ours_reg = put_pingpong(&p).expect("our put ping-pong (registered)");
    println!(
        "{:<28} {:>10.3} {:>10.3} {:>10.3}",
        "pmwire put, registered map", ours_reg.p50_us, ours_reg.mean_us, ours_reg.p99_us
    );
    let peer_put = ucx_perftest(
        "ucp_put_lat",
        perftest_tls,
        size,
        iters,
        warmup,
        port,
        timeout,
    );
    match &peer_put {
        Ok(r) => println!(
            "{:<28} {:>10.3} {:>10.3} {:>10.3}",
            "ucx_perftest ucp_put_lat", r.p50_us, r.avg_us, r.overall_us
        ),
        Err(e) => println!("ucx_perftest ucp_put_lat: {e}"),
    }
    let ours_rpc = rpc_pingpong(&p).expect("our RPC ping-pong");
    println!(
        "{:<28} {:>10.3} {:>10.3} {:>10.3}",
        "pmwire call+reply (AM)", ours_rpc.p50_us, ours_rpc.mean_us, ours_rpc.p99_us
    );
    let peer_am = ucx_perftest(
        "ucp_am_lat",
        perftest_tls,
        size,
        iters,
        warmup,
        port + 1,
        timeout,
    );
    match &peer_am {
        Ok(r) => println!(
            "{:<28} {:>10.3} {:>10.3} {:>10.3}",
            "ucx_perftest ucp_am_lat", r.p50_us, r.avg_us, r.overall_us
        ),
        Err(e) => println!("ucx_perftest ucp_am_lat: {e}"),
    }
    if let Ok(r) = peer_put {
        println!(
            "put p50 ratio ours/ucx_perftest: {:.2} (same memory kind); registered map: {:.2}",
            ours_put.p50_us / r.p50_us,
            ours_reg.p50_us / r.p50_us
        );
    }
    if let Ok(r) = peer_am {
        println!(
            "AM  p50 ratio ours/ucx_perftest: {:.2}",
            ours_rpc.p50_us / r.p50_us
        );
    }
}

/// ns per idle poll: `ucp_worker_progress` alone, then `Transport::poll`,
/// in 5 interleaved rounds; prints each round and the medians.
fn poll_cost(config: &UcxConfig, iters: usize) {
    use transport::{Transport, UcxTransport};
    let mut t = UcxTransport::new(config).expect("transport");
    t.listen("127.0.0.1:0".parse().unwrap()).expect("listen");
    let mut events = Vec::with_capacity(64);
    let (mut progress_ns, mut poll_ns) = (Vec::new(), Vec::new());
    for round in 0..5 {
        let worker = t.worker().clone();
        let start = std::time::Instant::now();
        for _ in 0..iters {
            std::hint::black_box(worker.progress());
        }
        progress_ns.push(start.elapsed().as_nanos() as f64 / iters as f64);
        let start = std::time::Instant::now();
        for _ in 0..iters {
            std::hint::black_box(t.poll(&mut events, 64));
        }
        poll_ns.push(start.elapsed().as_nanos() as f64 / iters as f64);
        assert!(events.is_empty(), "an idle transport has no events");
        println!("round {round}: ucp_worker_progress {:.1} ns, Transport::poll {:.1} ns", progress_ns[round], poll_ns[round]);
    }
    progress_ns.sort_by(f64::total_cmp);
    poll_ns.sort_by(f64::total_cmp);
    println!("median: ucp_worker_progress {:.1} ns, Transport::poll {:.1} ns (ours: {:.1} ns)", progress_ns[2], poll_ns[2], poll_ns[2] - progress_ns[2]);
    // The probe reads the clock twice per round trip (Instant::now).
    let start = std::time::Instant::now();
    for _ in 0..iters {
        std::hint::black_box(std::time::Instant::now());
    }
    println!("Instant::now: {:.1} ns", start.elapsed().as_nanos() as f64 / iters as f64);
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}
