//! `pmwire bench kv` (seed 001 Fig 8, 9): `pmwire kv` over RESP beside
//! `redis-server` in the same run — `appendfsync always`, `everysec` and no
//! persistence, each with its files on the same filesystem as our pool
//! (tmpfs), plus `appendfsync always` on the disk as users run it.
//!
//! Each server in turn, fresh: `redis-benchmark -t set,get -d 1024 -c 50
//! -r <keys>`, then YCSB A and B (scrambled Zipfian, θ = 0.99, 1 KB values)
//! with the closed-loop driver of [`super::ycsb`]. Every server, ours and
//! Redis's, runs one thread; the load generator shares the 2 cores.

use anyhow::Result;
use pmwire_resp::ycsb::Workload;
use std::path::{Path, PathBuf};

use super::child::{KvChild, KvMode};
use super::redis::{self, BenchmarkConfig, Persistence, RedisServer};
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
    /// redis-benchmark requests per test.
    pub requests: u64,
    /// YCSB records loaded.
    pub records: u64,
    /// YCSB operations timed per workload.
    pub ycsb_ops: u64,
    /// YCSB connections.
    pub ycsb_connections: usize,
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
            records: 100_000,
            ycsb_ops: 200_000,
            ycsb_connections: 16,
            out_dir,
        }
    }

    /// The tour's run.
    pub fn quick(exe: PathBuf, out_dir: PathBuf) -> KvOptions {
        KvOptions { requests: 30_000, records: 10_000, ycsb_ops: 20_000, pool_size: "512M".into(), ..KvOptions::full(exe, out_dir) }
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
    fn resp(&self) -> std::net::SocketAddr {
        match self {
            Running::Ours(child) => child.resp,
            Running::Redis(server) => format!("127.0.0.1:{}", server.port()).parse().unwrap(),
        }
    }
}

/// Runs the suite, writes its JSON and prints its table and headlines.
pub fn run(options: &KvOptions) -> Result<SuiteReport> {
    let shm_dir = options.pool.parent().unwrap_or(Path::new("/dev/shm")).to_path_buf();
    let peers = [
        Peer::Ours(KvMode::ZeroCopy),
        Peer::Ours(KvMode::Copy),
        Peer::Redis(Persistence::AppendFsyncAlways, "shm"),
        Peer::Redis(Persistence::AppendFsyncEverysec, "shm"),
        Peer::Redis(Persistence::Off, "shm"),
        Peer::Redis(Persistence::AppendFsyncAlways, "disk"),
    ];
    let progress = Progress::new(peers.len() as u64 * 3, true);
    let (mut results, mut skipped) = (Vec::new(), Vec::new());
    let redis_ready = redis::server_version().and(redis::benchmark_available());
    for peer in &peers {
        let variant = peer.variant();
        progress.stage(&variant);
        let started = match peer {
            Peer::Ours(mode) => KvChild::start(&options.exe, &options.pool, &options.pool_size, *mode).map(Running::Ours),
            Peer::Redis(_, _) if redis_ready.is_err() => Err(anyhow::anyhow!(redis_ready.clone().unwrap_err())),
            Peer::Redis(p, place) => {
                let dir = if *place == "disk" { options.disk_dir.clone() } else { shm_dir.clone() };
                RedisServer::start(*p, &dir).map(Running::Redis)
            }
        };
        let server = match started {
            Ok(server) => server,
            Err(e) => {
                skipped.push(Skipped::new(SUITE, &variant, &format!("{e:#}")));
                (0..3).for_each(|_| progress.step());
                continue;
            }
        };
        measure(options, &server, &variant, &progress, &mut results, &mut skipped);
        drop(server);
    }
    let _ = std::fs::remove_file(&options.pool);
    progress.finish();
    let headlines = headlines(&results);
    let parameters = serde_json::json!({
        "requests": options.requests, "records": options.records, "ycsb_ops": options.ycsb_ops,
        "ycsb_connections": options.ycsb_connections, "value_bytes": 1024, "redis_benchmark_clients": 50,
        "pool": options.pool, "disk_dir": options.disk_dir,
        "redis": redis::server_version().unwrap_or_else(|e| e),
    });
    finish(SUITE, &options.out_dir, parameters, results, skipped, headlines)
}

fn measure(
    options: &KvOptions,
    server: &Running,
    variant: &str,
    progress: &Progress,
    results: &mut Vec<BenchResult>,
    skipped: &mut Vec<Skipped>,
) {
    let port = server.resp().port();
    let config = BenchmarkConfig {
        tests: "set,get".into(),
        value_bytes: 1024,
        clients: 50,
        requests: options.requests,
        keyspace: Some(options.records),
        pipeline: 1,
    };
    match redis::run_benchmark(port, &config) {
        Ok(rows) => results.extend(rows.into_iter().map(|row| {
            BenchResult::new(SUITE, variant)
                .size(1024)
                .param("test", format!("redis-benchmark {}", row.test))
                .metric(&format!("{}_rps", row.test.to_lowercase()), row.rps)
                .metric("latency_ms_mean", row.latency_ms_mean)
                .metric("latency_ms_p50", row.latency_ms_p50)
                .metric("latency_ms_p99", row.latency_ms_p99)
        })),
        Err(e) => skipped.push(Skipped::new(SUITE, variant, &format!("redis-benchmark: {e:#}"))),
    }
    progress.step();
    for (name, workload) in [("a", Workload::a(options.records, 7)), ("b", Workload::b(options.records, 7))] {
        let config = YcsbConfig {
            workload,
            connections: options.ycsb_connections,
            ops: options.ycsb_ops,
            warmup_ops: options.ycsb_ops / 10,
            load_pipeline: 16,
        };
        match ycsb::run(server.resp(), &config) {
            Ok(r) => results.push(
                BenchResult::new(SUITE, variant)
                    .size(1024)
                    .param("test", format!("ycsb-{name}"))
                    .metric(&format!("ycsb_{name}_ops_per_s"), r.throughput_ops_per_s)
                    .metric("latency_us_mean", r.latency_us_mean)
                    .metric("latency_us_p50", r.latency_us_p50)
                    .metric("latency_us_p99", r.latency_us_p99)
                    .metric("error_replies", r.errors as f64),
            ),
            Err(e) => skipped.push(Skipped::new(SUITE, variant, &format!("ycsb-{name}: {e:#}"))),
        }
        progress.step();
    }
}

fn metric(results: &[BenchResult], variant: &str, name: &str) -> Option<f64> {
    results.iter().filter(|r| r.variant == variant).find_map(|r| r.get(name))
}

/// The ratios, ours (zero-copy) against each peer.
pub fn headlines(results: &[BenchResult]) -> Vec<Headline> {
    let ours = KvMode::ZeroCopy.variant();
    let versus = |name: &str, metric_name: &str, peer: &str, target: f64| {
        let value = metric(results, ours, metric_name).zip(metric(results, peer, metric_name)).map(|(a, b)| a / b);
        ratio(name, value, target, true, peer)
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
    ]
}
