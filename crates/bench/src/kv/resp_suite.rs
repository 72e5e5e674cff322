//! `pmwire bench kv` (seed 001 Fig 8, 9): `pmwire kv` over RESP beside
//! `redis-server` in the same run — `appendfsync always`, `everysec` and no
//! persistence, each with its files on the same filesystem as our pool
//! (tmpfs), plus `appendfsync always` on the disk as users run it.
//!
//! Method (for ratios that mean something on a 2-core machine):
//! - **Trials, interleaved.** Each trial starts every server in turn,
//!   fresh (our pool recreated, Redis in an empty directory), in an order
//!   rotated from trial to trial, so drift in the machine's load touches
//!   every server alike. A trial: a warm-up `redis-benchmark -t set` (not
//!   recorded), then `-t set` and `-t get` (`-d 1024 -c 50 -r <keys>`),
//!   then, in the first `ycsb_trials` trials, YCSB A and B (scrambled
//!   Zipfian, θ = 0.99, 1 KB values) with the closed-loop driver of
//!   [`super::ycsb`].
//! - **Placement.** Every server (ours and Redis's, all their threads) is
//!   pinned to one CPU and the load generator to another
//!   ([`Placement::split`], recorded in the JSON parameters).
//! - **Reported**: per server and test the median over trials (the
//!   metric the headlines use), the minimum and maximum, every trial's
//!   value, the server's CPU time per request (user + system, from
//!   `/proc`), which depends less on the machine's other load than
//!   throughput does, and the share of the machine that other processes
//!   took during the measurement (`other_processes_cpu_share`: when it is
//!   not near 0, the throughputs and their ratios are not to be trusted).
//! - **What bounds each rate** ([`super::bound`]): the load generator's
//!   own CPU per request (redis-benchmark's `wait4` rusage; the YCSB
//!   driver thread's CPU clock over its timed operations), its busy share
//!   (CPU / wall) and the server's, and the verdict of the median trial:
//!   generator-bound, server-bound, both busy or neither. Two servers that
//!   are both generator-bound give a ratio of redis-benchmark's costs, not
//!   of theirs.
//!   A headline is the ratio of medians; its peer text gives the range of
//!   the per-trial ratios and what bounds the two sides. Information
//!   headlines give the peers' server CPU per SET over ours.

use anyhow::Result;
use pmwire_resp::ycsb::Workload;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::bound::{with_usage, Usage};
use super::child::{KvChild, KvMode};
use super::placement::{CpuClock, LoadProbe, Placement};
use super::redis::{self, BenchmarkConfig, Persistence, RedisServer};
use super::trials::{aggregate, describe_peer_bound, paired_ratios, spread_table};
use super::ycsb::{self, YcsbConfig};
use crate::measure::Progress;
use crate::remote::common::{finish, ratio};
use crate::schema::{BenchResult, Skipped};
use crate::{Headline, SuiteReport};

/// The suite's name.
pub const SUITE: &str = "kv";

/// How the suite runs.
#[derive(Clone, Debug)]
pub struct KvOptions {
    /// The `pmwire` executable (started as `pmwire kv`).
    pub exe: PathBuf,
    /// Our pool file; Redis's tmpfs peers put their files in its directory.
    pub pool: PathBuf,
    /// Our pool size (`--size`).
    pub pool_size: String,
    /// Where the on-disk Redis peer keeps its files.
    pub disk_dir: PathBuf,
    /// redis-benchmark requests per test and trial.
    pub requests: u64,
    /// redis-benchmark SET requests run first in each trial, not recorded.
    pub warmup_requests: u64,
    /// Trials (every server measured once per trial).
    pub trials: usize,
    /// Trials that also run YCSB (the first ones).
    pub ycsb_trials: usize,
    /// YCSB records loaded.
    pub records: u64,
    /// YCSB operations timed per workload.
    pub ycsb_ops: u64,
    /// YCSB connections.
    pub ycsb_connections: usize,
    /// Where servers and load generator run.
    pub placement: Placement,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
}

impl KvOptions {
    /// The full run.
    pub fn full(exe: PathBuf, out_dir: PathBuf) -> KvOptions {
        KvOptions {
            exe,
            pool: "/dev/shm/pmwire-bench-kv.pool".into(),
            pool_size: "2G".into(),
            disk_dir: "/var/tmp".into(),
            requests: 200_000,
            warmup_requests: 50_000,
            trials: 5,
            ycsb_trials: 3,
            records: 100_000,
            ycsb_ops: 200_000,
            ycsb_connections: 16,
            placement: Placement::split(),
            out_dir,
        }
    }

    /// The tour's run.
    pub fn quick(exe: PathBuf, out_dir: PathBuf) -> KvOptions {
        KvOptions {
            requests: 50_000,
            warmup_requests: 10_000,
            trials: 3,
            ycsb_trials: 1,
            records: 10_000,
            ycsb_ops: 20_000,
            pool_size: "512M".into(),
            ..KvOptions::full(exe, out_dir)
        }
    }
}

/// A server measured by the suite.
enum Peer {
    Ours(KvMode),
    Redis(Persistence, &'static str),
}

impl Peer {
    fn variant(&self) -> String {
        match self {
            Peer::Ours(mode) => mode.variant().to_string(),
            Peer::Redis(p, "disk") => format!("{}_disk", p.name()),
            Peer::Redis(p, _) => p.name().to_string(),
        }
    }
}

enum Running {
    Ours(KvChild),
    Redis(RedisServer),
}

impl Running {
    fn pid(&self) -> u32 {
        match self {
            Running::Ours(child) => child.pid(),
            Running::Redis(server) => server.pid(),
        }
    }

    fn resp(&self) -> std::net::SocketAddr {
        match self {
            Running::Ours(child) => child.resp,
            Running::Redis(server) => format!("127.0.0.1:{}", server.port()).parse().unwrap(),
        }
    }
}

/// Runs the suite, writes its JSON and prints its table and headlines.
pub fn run(options: &KvOptions) -> Result<SuiteReport> {
    assert!(options.trials >= 1, "at least one trial");
    let shm_dir = options.pool.parent().unwrap_or(Path::new("/dev/shm")).to_path_buf();
    let peers = [
        Peer::Ours(KvMode::ZeroCopy),
        Peer::Ours(KvMode::Copy),
        Peer::Redis(Persistence::AppendFsyncAlways, "shm"),
        Peer::Redis(Persistence::AppendFsyncEverysec, "shm"),
        Peer::Redis(Persistence::Off, "shm"),
        Peer::Redis(Persistence::AppendFsyncAlways, "disk"),
    ];
    let steps_per_trial = |t: usize| if t < options.ycsb_trials { 3 } else { 1 };
    let steps: usize = (0..options.trials).map(|t| peers.len() * steps_per_trial(t)).sum();
    let progress = Progress::new(steps as u64, true);
    let (mut trials, mut skipped) = (Vec::new(), Vec::new());
    let redis_ready = redis::server_version().and(redis::benchmark_available());
    for trial in 0..options.trials {
        for p in 0..peers.len() {
            // Rotated order: no server always runs first (or right after the same one).
            let peer = &peers[(p + trial) % peers.len()];
            let variant = peer.variant();
            progress.stage(&format!("trial {}/{}: {variant}", trial + 1, options.trials));
            let started = match peer {
                Peer::Ours(mode) => {
                    KvChild::start(&options.exe, &options.pool, &options.pool_size, *mode, &options.placement)
                        .map(Running::Ours)
                }
                Peer::Redis(_, _) if redis_ready.is_err() => Err(anyhow::anyhow!(redis_ready.clone().unwrap_err())),
                Peer::Redis(p, place) => {
                    let dir = if *place == "disk" { options.disk_dir.clone() } else { shm_dir.clone() };
                    RedisServer::start(*p, &dir, &options.placement).map(Running::Redis)
                }
            };
            let server = match started {
                Ok(server) => server,
                Err(e) => {
                    if trial == 0 {
                        skipped.push(Skipped::new(SUITE, &variant, &format!("{e:#}")));
                    }
                    (0..steps_per_trial(trial)).for_each(|_| progress.step());
                    continue;
                }
            };
            let ycsb = trial < options.ycsb_trials;
            measure(options, &server, &variant, (trial, ycsb), &progress, &mut trials, &mut skipped);
            drop(server);
        }
    }
    let _ = std::fs::remove_file(&options.pool);
    progress.finish();
    let mut results = aggregate(&trials);
    results.sort_by_key(|r| variant_rank(&r.variant));
    print!("{}", spread_table(&results, "test"));
    let headlines = headlines(&results, &trials);
    let parameters = serde_json::json!({
        "trials": options.trials, "ycsb_trials": options.ycsb_trials,
        "requests": options.requests, "warmup_requests": options.warmup_requests,
        "records": options.records, "ycsb_ops": options.ycsb_ops,
        "ycsb_connections": options.ycsb_connections, "value_bytes": 1024, "redis_benchmark_clients": 50,
        "pool": options.pool, "disk_dir": options.disk_dir,
        "placement": options.placement.describe(),
        "order": "every trial starts each server fresh, in an order rotated by one per trial",
        "statistic": "metrics are medians over trials; *_min / *_max and params *_per_trial give the spread",
        "redis": redis::server_version().unwrap_or_else(|e| e),
        "redis_config": "--save '' --io-threads 1, otherwise defaults (automatic AOF rewrite on)",
    });
    finish(SUITE, &options.out_dir, parameters, results, skipped, headlines)
}

/// Measures one server in trial `trial`, adding one result per test
/// (parameter `trial`) to `trials`; YCSB too if `ycsb`.
fn measure(
    options: &KvOptions,
    server: &Running,
    variant: &str,
    (trial_index, ycsb): (usize, bool),
    progress: &Progress,
    trials: &mut Vec<BenchResult>,
    skipped: &mut Vec<Skipped>,
) {
    let port = server.resp().port();
    let clock = CpuClock::of(server.pid());
    let config = |tests: &str, requests: u64| BenchmarkConfig {
        tests: tests.into(),
        value_bytes: 1024,
        clients: 50,
        requests,
        keyspace: Some(options.records),
        pipeline: 1,
    };
    let mut trial: Vec<BenchResult> = Vec::new();
    let warm = redis::run_benchmark(port, &config("set", options.warmup_requests), &options.placement);
    if let Err(e) = warm {
        skipped.push(Skipped::new(SUITE, variant, &format!("redis-benchmark warm-up: {e:#}")));
    }
    for test in ["set", "get"] {
        let (before, wall) = (clock.seconds(), Instant::now());
        let probe = LoadProbe::start(clock);
        let run = redis::run_benchmark(port, &config(test, options.requests), &options.placement);
        let server_cpu_s = before.and_then(|b| Ok(clock.seconds()? - b));
        let server = server_cpu_s.as_ref().ok().map(|&cpu_s| Usage { cpu_s, wall_s: wall.elapsed().as_secs_f64() });
        let cpu_us = server_cpu_s.map(|s| s * 1e6 / options.requests as f64);
        let other = probe.and_then(|p| p.other_share());
        match run {
            Ok(run) => trial.extend(run.rows.into_iter().map(|row| {
                let mut result = BenchResult::new(SUITE, variant)
                    .size(1024)
                    .param("test", format!("redis-benchmark {}", row.test))
                    .metric(&format!("{}_rps", row.test.to_lowercase()), row.rps)
                    .metric("latency_ms_mean", row.latency_ms_mean)
                    .metric("latency_ms_p50", row.latency_ms_p50)
                    .metric("latency_ms_p99", row.latency_ms_p99);
                if let Ok(us) = cpu_us {
                    result = result.metric("server_cpu_us_per_request", us);
                }
                if let Ok(share) = other {
                    result = result.metric("other_processes_cpu_share", share);
                }
                with_usage(result, run.generator, options.requests as f64, server)
            })),
            Err(e) => skipped.push(Skipped::new(SUITE, variant, &format!("redis-benchmark {test}: {e:#}"))),
        }
    }
    progress.step();
    if ycsb {
        for (name, workload) in [("a", Workload::a(options.records, 7)), ("b", Workload::b(options.records, 7))] {
            let config = YcsbConfig {
                workload,
                connections: options.ycsb_connections,
                ops: options.ycsb_ops,
                warmup_ops: options.ycsb_ops / 10,
                load_pipeline: 16,
            };
            let probe = LoadProbe::start(clock);
            let report = options.placement.as_load(|| ycsb::run_measured(server.resp(), &config, Some(clock)));
            let other = probe.and_then(|p| p.other_share()).unwrap_or(f64::NAN);
            match report {
                Ok(r) => trial.push(ycsb_result(variant, name, &r, other)),
                Err(e) => skipped.push(Skipped::new(SUITE, variant, &format!("ycsb-{name}: {e:#}"))),
            }
            progress.step();
        }
    }
    trials.extend(trial.into_iter().map(|r| r.param("trial", trial_index as u64)));
}

/// One YCSB trial's result; CPU figures over its timed operations.
fn ycsb_result(variant: &str, name: &str, r: &ycsb::YcsbReport, other_share: f64) -> BenchResult {
    let mut result = BenchResult::new(SUITE, variant)
        .metric("other_processes_cpu_share", other_share)
        .size(1024)
        .param("test", format!("ycsb-{name}"))
        .metric(&format!("ycsb_{name}_ops_per_s"), r.throughput_ops_per_s)
        .metric("latency_us_mean", r.latency_us_mean)
        .metric("latency_us_p50", r.latency_us_p50)
        .metric("latency_us_p99", r.latency_us_p99)
        .metric("error_replies", r.errors as f64);
    if let Some(cpu_s) = r.server_cpu_s {
        result = result.metric("server_cpu_us_per_request", cpu_s * 1e6 / r.ops as f64);
    }
    let generator = Usage { cpu_s: r.generator_cpu_s, wall_s: r.elapsed_s };
    let server = r.server_cpu_s.map(|cpu_s| Usage { cpu_s, wall_s: r.elapsed_s });
    with_usage(result, generator, r.ops as f64, server)
}

/// The suite's peers in the order the table lists them.
fn variant_rank(variant: &str) -> usize {
    let order = [
        KvMode::ZeroCopy.variant().to_string(),
        KvMode::Copy.variant().to_string(),
        Persistence::AppendFsyncAlways.name().to_string(),
        Persistence::AppendFsyncEverysec.name().to_string(),
        Persistence::Off.name().to_string(),
        format!("{}_disk", Persistence::AppendFsyncAlways.name()),
    ];
    order.iter().position(|v| v == variant).unwrap_or(order.len())
}

fn metric(results: &[BenchResult], variant: &str, name: &str) -> Option<f64> {
    row(results, variant, name).and_then(|r| r.get(name))
}

/// The row of `variant` that has metric `name`.
fn row<'a>(results: &'a [BenchResult], variant: &str, name: &str) -> Option<&'a BenchResult> {
    results.iter().find(|r| r.variant == variant && r.get(name).is_some())
}

/// The load generator behind metric `name`.
fn generator_of(name: &str) -> &'static str {
    if name.starts_with("ycsb") {
        "the YCSB driver"
    } else {
        "redis-benchmark"
    }
}

/// Information: the peer's server CPU per SET over ours (above 1: we spend
/// less per request), a ratio that depends far less than throughput on
/// what else the machine runs.
fn cheaper(name: &str, results: &[BenchResult], peer: &str) -> Headline {
    let cpu = |variant: &str| {
        results
            .iter()
            .filter(|r| r.variant == variant && r.get("set_rps").is_some())
            .find_map(|r| r.get("server_cpu_us_per_request"))
    };
    let value = cpu(peer).zip(cpu(KvMode::ZeroCopy.variant())).map(|(a, b)| a / b);
    ratio(name, value, 1.0, true, peer).for_information()
}

/// The ratios, ours (zero-copy) against each peer: ratios of the
/// medians over trials; the peer text gives the per-trial ratios' range.
pub fn headlines(results: &[BenchResult], trials: &[BenchResult]) -> Vec<Headline> {
    let ours = KvMode::ZeroCopy.variant();
    let versus = |name: &str, metric_name: &str, peer: &str, target: f64| {
        let value = metric(results, ours, metric_name).zip(metric(results, peer, metric_name)).map(|(a, b)| a / b);
        let mut headline = ratio(name, value, target, true, peer);
        if value.is_some() {
            let rows = (row(results, ours, metric_name), row(results, peer, metric_name));
            let paired = paired_ratios(trials, ours, peer, metric_name);
            headline.peer = describe_peer_bound(peer, &paired, rows, generator_of(metric_name));
        }
        headline
    };
    let always = Persistence::AppendFsyncAlways.name();
    let off = Persistence::Off.name();
    vec![
        versus("durable SET 1 KB, 50 clients: pmwire / redis AOF always (tmpfs)", "set_rps", always, 1.1),
        versus("durable SET 1 KB, 50 clients: pmwire / redis without persistence", "set_rps", off, 1.1),
        versus("YCSB-A: pmwire / redis AOF always (tmpfs)", "ycsb_a_ops_per_s", always, 1.0),
        versus("YCSB-B: pmwire / redis AOF always (tmpfs)", "ycsb_b_ops_per_s", always, 1.0),
        versus("durable SET 1 KB: pmwire / redis AOF always on disk", "set_rps", &format!("{always}_disk"), 1.0)
            .for_information(),
        versus("durable SET 1 KB: pmwire zero-copy / pmwire copy", "set_rps", KvMode::Copy.variant(), 1.0).for_information(),
        cheaper("server CPU per SET: redis AOF always / pmwire", results, always),
        cheaper("server CPU per SET: redis without persistence / pmwire", results, off),
    ]
}
