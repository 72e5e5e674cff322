//! `pmwire bench http-wal` (seed 001 Table 2, Fig 5): `POST /log` of 64 B
//! to 2560 B bodies to `pmwire kv` over 1 to 100 connections, in its three
//! modes — zero-copy (the body is received into a pool buffer, flushed in
//! place, its extent logged), copy (received into DRAM, copied into the
//! pool and persisted) and no-persist (acknowledged, not persisted) — with
//! the built-in closed-loop generator (`netio::loadgen`), and `wrk` at 50
//! connections if it is installed. One server thread, as in PASTE.
//!
//! Method: the three servers run side by side (each on its own pool), all
//! pinned to one CPU and the generator to another ([`Placement::split`]).
//! Each trial visits every cell (size × connections) and, inside a cell,
//! the three modes back to back in an order rotated per cell and trial,
//! so that a change in the machine's load falls on all modes alike.
//! Results are medians over the trials with min, max and every trial's
//! value ([`super::trials`]); the server's CPU per request is estimated
//! from its CPU time over the cell (warm-up included) and the measured
//! rate; `other_processes_cpu_share` is the share of the machine other
//! processes took meanwhile. The generator's CPU per request and busy
//! share (the loadgen thread's CPU clock over its call, or `wrk`'s `wait4`
//! rusage), the server's busy share and the verdict of what bounds each
//! row ([`super::bound`]) go beside them, and into the headlines' peer
//! text. The headlines use the built-in generator, as
//! the issue asks; the same ratios measured with `wrk` follow as
//! information.

use anyhow::{Context, Result};
use pmwire_netio::loadgen::{self, LoadConfig, StopAfter};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::bound::{on_thread, output_with_usage, with_usage, Usage};
use super::child::{KvChild, KvMode};
use super::placement::{CpuClock, LoadProbe, Placement};
use super::trials::{aggregate, describe_peer_bound, paired_ratios_where, spread_table, TRIAL};
use crate::measure::Progress;
use crate::remote::common::{finish, ratio};
use crate::schema::{BenchResult, Skipped};
use crate::{Headline, SuiteReport};

/// The suite's name.
pub const SUITE: &str = "http-wal";

/// How the suite runs.
#[derive(Clone, Debug)]
pub struct HttpWalOptions {
    /// The `pmwire` executable.
    pub exe: PathBuf,
    /// Our pool file; each mode's server gets its own, named after it.
    pub pool: PathBuf,
    /// Its size.
    pub pool_size: String,
    /// Body sizes.
    pub sizes: Vec<usize>,
    /// Connection counts.
    pub connections: Vec<u32>,
    /// Timed seconds per cell and trial.
    pub seconds: f64,
    /// Untimed warm-up per cell and trial.
    pub warmup: Duration,
    /// Trials.
    pub trials: usize,
    /// Where servers and load generator run.
    pub placement: Placement,
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
            seconds: 2.0,
            warmup: Duration::from_millis(300),
            trials: 3,
            placement: Placement::split(),
            out_dir,
        }
    }

    /// The tour's run.
    pub fn quick(exe: PathBuf, out_dir: PathBuf) -> HttpWalOptions {
        HttpWalOptions {
            sizes: vec![64, 1280],
            connections: vec![1, 50],
            seconds: 1.0,
            warmup: Duration::from_millis(200),
            trials: 3,
            pool_size: "1G".into(),
            ..HttpWalOptions::full(exe, out_dir)
        }
    }
}

const MODES: [KvMode; 3] = [KvMode::ZeroCopy, KvMode::Copy, KvMode::NoPersist];

fn pool_for(pool: &Path, mode: KvMode) -> PathBuf {
    let stem = pool.file_stem().and_then(|s| s.to_str()).unwrap_or("pmwire-bench-http");
    pool.with_file_name(format!("{stem}-{}.pool", mode.arg()))
}

/// Runs the suite, writes its JSON and prints its table and headlines.
pub fn run(options: &HttpWalOptions) -> Result<SuiteReport> {
    assert!(options.trials >= 1, "at least one trial");
    let cells = options.trials * MODES.len() * (options.sizes.len() * options.connections.len() + 1);
    let progress = Progress::new(cells as u64, true);
    let (mut trials, mut skipped) = (Vec::new(), Vec::new());
    let mut servers = Vec::new();
    for mode in MODES {
        let pool = pool_for(&options.pool, mode);
        match KvChild::start(&options.exe, &pool, &options.pool_size, mode, &options.placement) {
            Ok(server) => servers.push((mode, server)),
            Err(e) => skipped.push(Skipped::new(SUITE, mode.variant(), &format!("{e:#}"))),
        }
    }
    for trial in 0..options.trials {
        let mut cell = 0;
        for &size in &options.sizes {
            for &connections in &options.connections {
                for i in 0..servers.len() {
                    let (mode, server) = &servers[(i + cell + trial) % servers.len()];
                    progress.stage(&format!("trial {}/{}: {} {size} B x {connections}", trial + 1, options.trials, mode.arg()));
                    match measure_cell(options, server, size, connections) {
                        Ok(result) => trials.push(result_of(*mode, size, connections, trial, result)),
                        Err(e) => skipped.push(Skipped::new(SUITE, mode.variant(), &format!("{size} B x {connections}: {e}"))),
                    }
                    progress.step();
                }
                cell += 1;
            }
        }
        for (mode, server) in &servers {
            progress.stage(&format!("trial {}/{}: {} wrk", trial + 1, options.trials, mode.arg()));
            let variant = format!("{}_wrk", mode.variant());
            let clock = CpuClock::of(server.pid());
            let (cpu_before, started, probe) = (clock.seconds(), Instant::now(), LoadProbe::start(clock));
            match wrk(server.http, 1280, 50, options.seconds, &options.placement) {
                Ok((rps, generator)) => {
                    let mut result = BenchResult::new(SUITE, &variant)
                        .size(1280)
                        .param("connections", 50u64)
                        .param("generator", "wrk -t1")
                        .param(TRIAL, trial as u64)
                        .metric("requests_per_s", rps)
                        .metric("gb_per_s", rps * 1280.0 / 1e9);
                    let wall_s = started.elapsed().as_secs_f64();
                    let requests = rps * wall_s;
                    let mut server = None;
                    if let (Ok(before), Ok(after)) = (cpu_before, clock.seconds()) {
                        result = result.metric("server_cpu_us_per_request", (after - before) * 1e6 / requests.max(1.0));
                        server = Some(Usage { cpu_s: after - before, wall_s });
                    }
                    result = with_usage(result, generator, rps * generator.wall_s, server);
                    if let Ok(share) = probe.and_then(|p| p.other_share()) {
                        result = result.metric("other_processes_cpu_share", share);
                    }
                    trials.push(result);
                }
                Err(e) if trial == 0 => skipped.push(Skipped::new(SUITE, &variant, &format!("{e:#}"))),
                Err(_) => {}
            }
            progress.step();
        }
    }
    drop(servers);
    MODES.iter().for_each(|&mode| _ = std::fs::remove_file(pool_for(&options.pool, mode)));
    progress.finish();
    let results = aggregate(&trials);
    print!("{}", spread_table(&results, "connections"));
    let headlines = headlines(&results, &trials);
    let parameters = serde_json::json!({
        "seconds": options.seconds, "warmup_ms": options.warmup.as_millis() as u64, "trials": options.trials,
        "pool": options.pool, "server_threads": 1, "placement": options.placement.describe(),
        "order": "the three servers run side by side; each cell measures them back to back, in an order rotated per cell and trial",
        "statistic": "metrics are medians over trials; requests_per_s_min / _max and params requests_per_s_per_trial give the spread",
    });
    finish(SUITE, &options.out_dir, parameters, results, skipped, headlines)
}

/// The two ratios at 1280 B × 50 connections with the built-in
/// generator, then the same with `wrk` (if it ran) as information.
fn headlines(results: &[BenchResult], trials: &[BenchResult]) -> Vec<Headline> {
    let cell = |r: &BenchResult| r.size_bytes == Some(1280) && r.params.get("connections") == Some(&50u64.into());
    let variant = |mode: KvMode, wrk: bool| {
        if wrk {
            format!("{}_wrk", mode.variant())
        } else {
            mode.variant().to_string()
        }
    };
    let row = |v: &str| results.iter().find(|r| r.variant == v && cell(r));
    let rps = |v: &str| row(v).and_then(|r| r.get("requests_per_s"));
    let versus = |wrk: bool, peer: KvMode, target: f64, what: &str| {
        let (ours, theirs) = (variant(KvMode::ZeroCopy, wrk), variant(peer, wrk));
        let generator = if wrk { "wrk -t1" } else { "pmwire loadgen" };
        let name = format!("HTTP WAL 1280 B, 50 conns ({generator}): zero-copy / {what}");
        let value = rps(&ours).zip(rps(&theirs)).map(|(a, b)| a / b);
        let peer_name = format!("pmwire {what} mode");
        let mut headline = ratio(&name, value, target, true, &peer_name);
        if value.is_some() {
            let paired = paired_ratios_where(trials, &ours, &theirs, "requests_per_s", cell);
            headline.peer = describe_peer_bound(&peer_name, &paired, (row(&ours), row(&theirs)), generator);
        }
        headline
    };
    let wrk_ran = rps(&variant(KvMode::ZeroCopy, true)).is_some();
    let pair = |wrk: bool| [versus(wrk, KvMode::Copy, 1.2, "copy"), versus(wrk, KvMode::NoPersist, 0.85, "no-persist")];
    let information = if wrk_ran { pair(true).to_vec() } else { Vec::new() };
    pair(false).into_iter().chain(information.into_iter().map(Headline::for_information)).collect()
}

/// What one cell measured: the generator's report, the server's CPU
/// seconds and wall seconds over the whole call, and the share of the
/// machine other processes took meanwhile.
struct Cell {
    report: loadgen::LoadReport,
    server_cpu_s: f64,
    wall_s: f64,
    other_share: f64,
    /// The generator thread's CPU time over its whole call.
    generator: Usage,
}

fn measure_cell(options: &HttpWalOptions, server: &KvChild, size: usize, connections: u32) -> Result<Cell> {
    let config = LoadConfig {
        connections,
        method: "POST".into(),
        path: "/log".into(),
        body_bytes: size,
        stop: StopAfter::Duration(Duration::from_secs_f64(options.seconds)),
        warmup: options.warmup,
        timeout: Duration::from_secs_f64(options.seconds * 4.0 + 30.0),
    };
    let clock = CpuClock::of(server.pid());
    let (cpu_before, started, probe) = (clock.seconds()?, Instant::now(), LoadProbe::start(clock)?);
    let (report, generator) = options.placement.as_load(|| on_thread(|| loadgen::run(server.http, &config)));
    let report = report?;
    let other_share = probe.other_share()?;
    let (server_cpu_s, wall_s) = (clock.seconds()? - cpu_before, started.elapsed().as_secs_f64());
    Ok(Cell { report, server_cpu_s, wall_s, other_share, generator })
}

fn result_of(mode: KvMode, size: usize, connections: u32, trial: usize, cell: Cell) -> BenchResult {
    let r = &cell.report;
    // Requests over the whole call, estimated from the measured rate (the warm-up is not counted).
    let cpu_us_per_request = cell.server_cpu_s * 1e6 / (r.throughput_rps * cell.wall_s).max(1.0);
    let result = BenchResult::new(SUITE, mode.variant())
        .size(size as u64)
        .param("connections", connections as u64)
        .param("generator", "pmwire loadgen")
        .param(TRIAL, trial as u64)
        .metric("requests_per_s", r.throughput_rps)
        .metric("gb_per_s", r.throughput_rps * size as f64 / 1e9)
        .metric("latency_us_mean", r.latency_us_mean)
        .metric("latency_us_p99", r.latency_us_p99 as f64)
        .metric("errors", r.errors as f64)
        .metric("server_cpu_us_per_request", cpu_us_per_request)
        .metric("other_processes_cpu_share", cell.other_share);
    // The generator's requests over its call, estimated the same way.
    let requests = r.throughput_rps * cell.generator.wall_s;
    with_usage(result, cell.generator, requests, Some(Usage { cpu_s: cell.server_cpu_s, wall_s: cell.wall_s }))
}

/// `wrk -t1 -c<connections>` POSTing `size` B bodies, on the load CPU;
/// requests/s, and wrk's own CPU time over its life.
fn wrk(addr: std::net::SocketAddr, size: usize, connections: u32, seconds: f64, placement: &Placement) -> Result<(f64, Usage)> {
    let script = std::env::temp_dir().join(format!("pmwire-wrk-{}-{size}.lua", std::process::id()));
    std::fs::write(&script, format!("wrk.method = \"POST\"\nwrk.body = string.rep(\"x\", {size})\n"))?;
    let mut command = Command::new("wrk");
    placement.pin_load(&mut command);
    command
        .args(["-t1", &format!("-c{connections}"), &format!("-d{}s", seconds.ceil() as u64), "-s"])
        .arg(&script)
        .arg(format!("http://{addr}/log"));
    let out = output_with_usage(&mut command);
    let _ = std::fs::remove_file(&script);
    let (out, usage) = out.context("wrk not found (scripts/setup installs it)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        anyhow::bail!("wrk failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    if let Some(line) = text.lines().find(|l| l.contains("Non-2xx") || l.contains("Socket errors")) {
        anyhow::bail!("wrk saw errors: {}", line.trim());
    }
    let line = text.lines().find(|l| l.starts_with("Requests/sec:")).context("no Requests/sec in wrk's output")?;
    let rps = line.trim_start_matches("Requests/sec:").trim().parse().context("wrk's Requests/sec")?;
    Ok((rps, usage))
}
