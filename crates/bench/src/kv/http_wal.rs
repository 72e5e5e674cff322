//! `pmwire bench http-wal` (seed 001 Table 2, Fig 5): `POST /log` of 64 B
//! to 2560 B bodies to `pmwire kv` over 1 to 100 connections, in its three
//! modes — zero-copy (the body is received into a pool buffer, flushed in
//! place, its extent logged), copy (received into DRAM, copied into the
//! pool and persisted) and no-persist (acknowledged, not persisted) — with
//! the built-in closed-loop generator (`netio::loadgen`), and `wrk` at 50
//! connections if it is installed. One server thread, as in PASTE.

use anyhow::{Context, Result};
use pmwire_netio::loadgen::{self, LoadConfig, StopAfter};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::child::{KvChild, KvMode};
use crate::measure::Progress;
use crate::remote::common::{finish, ratio};
use crate::schema::{BenchResult, Skipped};
use crate::SuiteReport;

/// The suite's name.
pub const SUITE: &str = "http-wal";

/// How the suite runs.
#[derive(Clone, Debug)]
pub struct HttpWalOptions {
    /// The `pmwire` executable.
    pub exe: PathBuf,
    /// Our pool file.
    pub pool: PathBuf,
    /// Its size.
    pub pool_size: String,
    /// Body sizes.
    pub sizes: Vec<usize>,
    /// Connection counts.
    pub connections: Vec<u32>,
    /// Timed seconds per cell.
    pub seconds: f64,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
}

impl HttpWalOptions {
    /// The full run.
    pub fn full(exe: PathBuf, out_dir: PathBuf) -> HttpWalOptions {
        HttpWalOptions {
            exe,
            pool: "/dev/shm/pmwire-bench-http.pool".into(),
            pool_size: "2G".into(),
            sizes: vec![64, 256, 1280, 2560],
            connections: vec![1, 10, 50, 100],
            seconds: 3.0,
            out_dir,
        }
    }

    /// The tour's run.
    pub fn quick(exe: PathBuf, out_dir: PathBuf) -> HttpWalOptions {
        HttpWalOptions { sizes: vec![64, 1280], connections: vec![1, 50], seconds: 1.0, pool_size: "1G".into(), ..HttpWalOptions::full(exe, out_dir) }
    }
}

const MODES: [KvMode; 3] = [KvMode::ZeroCopy, KvMode::Copy, KvMode::NoPersist];

/// Runs the suite, writes its JSON and prints its table and headlines.
pub fn run(options: &HttpWalOptions) -> Result<SuiteReport> {
    let cells = MODES.len() * (options.sizes.len() * options.connections.len() + 1);
    let progress = Progress::new(cells as u64, true);
    let (mut results, mut skipped) = (Vec::new(), Vec::new());
    for mode in MODES {
        let server = match KvChild::start(&options.exe, &options.pool, &options.pool_size, mode) {
            Ok(server) => server,
            Err(e) => {
                skipped.push(Skipped::new(SUITE, mode.variant(), &format!("{e:#}")));
                continue;
            }
        };
        for &size in &options.sizes {
            for &connections in &options.connections {
                progress.stage(&format!("{} {size} B x {connections}", mode.arg()));
                let config = LoadConfig {
                    connections,
                    method: "POST".into(),
                    path: "/log".into(),
                    body_bytes: size,
                    stop: StopAfter::Duration(Duration::from_secs_f64(options.seconds)),
                    warmup: Duration::from_millis(200),
                    timeout: Duration::from_secs_f64(options.seconds * 4.0 + 30.0),
                };
                match loadgen::run(server.http, &config) {
                    Ok(r) => results.push(
                        BenchResult::new(SUITE, mode.variant())
                            .size(size as u64)
                            .param("connections", connections as u64)
                            .param("generator", "pmwire loadgen")
                            .metric("requests_per_s", r.throughput_rps)
                            .metric("gb_per_s", r.throughput_rps * size as f64 / 1e9)
                            .metric("latency_us_mean", r.latency_us_mean)
                            .metric("latency_us_p99", r.latency_us_p99 as f64)
                            .metric("errors", r.errors as f64),
                    ),
                    Err(e) => skipped.push(Skipped::new(SUITE, mode.variant(), &format!("{size} B x {connections}: {e}"))),
                }
                progress.step();
            }
        }
        progress.stage(&format!("{} wrk", mode.arg()));
        match wrk(server.http, 1280, 50, options.seconds) {
            Ok(rps) => results.push(
                BenchResult::new(SUITE, &format!("{}_wrk", mode.variant()))
                    .size(1280)
                    .param("connections", 50u64)
                    .param("generator", "wrk -t1")
                    .metric("requests_per_s", rps)
                    .metric("gb_per_s", rps * 1280.0 / 1e9),
            ),
            Err(e) => skipped.push(Skipped::new(SUITE, &format!("{}_wrk", mode.variant()), &format!("{e:#}"))),
        }
        progress.step();
    }
    let _ = std::fs::remove_file(&options.pool);
    progress.finish();
    let rps = |mode: KvMode| {
        results
            .iter()
            .find(|r| r.variant == mode.variant() && r.size_bytes == Some(1280) && r.params.get("connections") == Some(&50.into()))
            .and_then(|r| r.get("requests_per_s"))
    };
    let (zero, copy, none) = (rps(KvMode::ZeroCopy), rps(KvMode::Copy), rps(KvMode::NoPersist));
    let headlines = vec![
        ratio("HTTP WAL 1280 B, 50 conns: zero-copy / copy", zero.zip(copy).map(|(a, b)| a / b), 1.2, true, "pmwire copy mode"),
        ratio("HTTP WAL 1280 B, 50 conns: zero-copy / no-persist", zero.zip(none).map(|(a, b)| a / b), 0.85, true, "pmwire no-persist mode"),
    ];
    let parameters = serde_json::json!({ "seconds": options.seconds, "pool": options.pool, "server_threads": 1 });
    finish(SUITE, &options.out_dir, parameters, results, skipped, headlines)
}

/// `wrk -t1 -c<connections>` POSTing `size` B bodies; requests/s.
fn wrk(addr: std::net::SocketAddr, size: usize, connections: u32, seconds: f64) -> Result<f64> {
    let script = std::env::temp_dir().join(format!("pmwire-wrk-{}-{size}.lua", std::process::id()));
    std::fs::write(&script, format!("wrk.method = \"POST\"\nwrk.body = string.rep(\"x\", {size})\n"))?;
    let out = Command::new("wrk")
        .args(["-t1", &format!("-c{connections}"), &format!("-d{}s", seconds.ceil() as u64), "-s"])
        .arg(&script)
        .arg(format!("http://{addr}/log"))
        .output();
    let _ = std::fs::remove_file(&script);
    let out = out.context("wrk not found (scripts/setup installs it)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        anyhow::bail!("wrk failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    if let Some(line) = text.lines().find(|l| l.contains("Non-2xx") || l.contains("Socket errors")) {
        anyhow::bail!("wrk saw errors: {}", line.trim());
    }
    let line = text.lines().find(|l| l.starts_with("Requests/sec:")).context("no Requests/sec in wrk's output")?;
    line.trim_start_matches("Requests/sec:").trim().parse().context("wrk's Requests/sec")
}
