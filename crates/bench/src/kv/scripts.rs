//! `pmwire bench kv --only scripts` and `--only streams` (issue 27): what a
//! small script, or a stream append, costs the server, beside redis-server
//! with `appendfsync always`.
//!
//! The script is the shape job queues run (a write and a counter):
//! `redis.call('set', KEYS[1], ARGV[1]) return redis.call('incr', KEYS[2])`,
//! loaded once with SCRIPT LOAD and called by EVALSHA over 1,000 keys. The
//! append is `XADD stream:<k> * f <value>` over 100 streams (a result or an
//! event, as queues write them), each growing by a few thousand entries.
//! For each server (`pmwire kv` zero-copy, and `redis-server` with AOF
//! `always` on the same tmpfs, as [`super::resp_suite`] runs it): one
//! connection, one request in flight (closed loop: latency p50 and p99,
//! each call durable before its reply), then pipelines of 32 (throughput).
//! Both phases report the server's CPU time per EVALSHA
//! (`clock_getcpuclockid`), the fair figure on a machine whose two cores
//! the client shares: the headline is ours over Redis's, pipelined, target
//! at most 1x.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::collections::{Conn, Running};
use super::placement::{CpuClock, Placement};
use super::redis;
use crate::measure::{percentile, Progress};
use crate::remote::common::{finish, ratio};
use crate::schema::{BenchResult, Skipped};
use crate::SuiteReport;

/// The suite's name (the scripts workload; [`Workload::suite`]).
pub const SUITE: &str = "kv_scripts";

/// What each call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// EVALSHA of [`SCRIPT`].
    Evalsha,
    /// XADD of one small entry with an ID from the clock.
    Xadd,
}

impl Workload {
    /// The suite's name.
    pub fn suite(self) -> &'static str {
        match self {
            Workload::Evalsha => SUITE,
            Workload::Xadd => "kv_streams",
        }
    }

    /// The call, as the headline and JSON name it.
    fn name(self) -> &'static str {
        match self {
            Workload::Evalsha => "EVALSHA (SET + INCR)",
            Workload::Xadd => "XADD (one field)",
        }
    }

    /// Call `i`'s arguments (`sha`: the loaded script's).
    fn call(self, sha: &[u8], i: usize) -> Vec<Vec<u8>> {
        match self {
            Workload::Evalsha => call(sha, i),
            Workload::Xadd => vec![b"XADD".to_vec(), format!("stream:{}", i % 100).into_bytes(), b"*".to_vec(), b"f".to_vec(), format!("value-{i:08}").into_bytes()],
        }
    }

    /// Whether `reply` is the call's success.
    fn answered(self, reply: &[u8]) -> bool {
        match self {
            Workload::Evalsha => reply.first() == Some(&b':'),
            Workload::Xadd => reply.first() == Some(&b'$'),
        }
    }
}

/// The script every call runs.
pub const SCRIPT: &str = "redis.call('set', KEYS[1], ARGV[1]) return redis.call('incr', KEYS[2])";

/// How the suite runs.
#[derive(Clone, Debug)]
pub struct ScriptsOptions {
    /// The `pmwire` executable (started as `pmwire kv`).
    pub exe: PathBuf,
    /// Our pool file; Redis keeps its AOF in the same directory.
    pub pool: PathBuf,
    /// Our pool size (`--size`).
    pub pool_size: String,
    /// Closed-loop calls per server.
    pub closed: usize,
    /// Pipelined calls per server.
    pub pipelined: usize,
    /// Calls per pipeline.
    pub depth: usize,
    /// Where servers and client run.
    pub placement: Placement,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
    /// What each call is.
    pub workload: Workload,
}

impl ScriptsOptions {
    /// The full run.
    pub fn full(exe: PathBuf, out_dir: PathBuf) -> ScriptsOptions {
        ScriptsOptions {
            exe,
            pool: "/dev/shm/pmwire-bench-kv-scripts.pool".into(),
            pool_size: "1G".into(),
            closed: 20_000,
            pipelined: 200_000,
            depth: 32,
            placement: Placement::split(),
            out_dir,
            workload: Workload::Evalsha,
        }
    }

    /// The tour's run.
    pub fn quick(exe: PathBuf, out_dir: PathBuf) -> ScriptsOptions {
        ScriptsOptions { closed: 3_000, pipelined: 32_000, ..ScriptsOptions::full(exe, out_dir) }
    }
}

/// What one server measured.
#[derive(Clone, Copy, Debug)]
struct Cost {
    p50_us: f64,
    p99_us: f64,
    closed_cpu_us: f64,
    pipelined_cpu_us: f64,
    pipelined_per_s: f64,
}

fn call(sha: &[u8], i: usize) -> Vec<Vec<u8>> {
    let k = i % 1000;
    vec![b"EVALSHA".to_vec(), sha.to_vec(), b"2".to_vec(), format!("script:v:{k}").into_bytes(), format!("script:n:{k}").into_bytes(), format!("value-{i:08}").into_bytes()]
}

fn measure(running: &Running, o: &ScriptsOptions, progress: &Progress) -> Result<Cost> {
    let mut conn = Conn::connect(running.addr())?;
    let clock = CpuClock::of(running.pid());
    let reply = conn.call(&[b"SCRIPT".to_vec(), b"LOAD".to_vec(), SCRIPT.as_bytes().to_vec()])?;
    let sha = reply.split(|&b| b == b'\n').nth(1).map(|l| l.strip_suffix(b"\r").unwrap_or(l).to_vec()).unwrap_or_default();
    if sha.len() != 40 {
        bail!("SCRIPT LOAD answered {:?}", String::from_utf8_lossy(&reply));
    }
    progress.stage("closed loop");
    let mut lat = Vec::with_capacity(o.closed);
    let cpu0 = clock.seconds()?;
    for i in 0..o.closed {
        let started = Instant::now();
        let r = conn.call(&o.workload.call(&sha, i))?;
        lat.push(started.elapsed().as_nanos() as u64);
        if !o.workload.answered(&r) {
            bail!("{} answered {:?}", o.workload.name(), String::from_utf8_lossy(&r));
        }
    }
    let closed_cpu_us = (clock.seconds()? - cpu0) / o.closed as f64 * 1e6;
    progress.step();
    progress.stage("pipelined");
    let cpu0 = clock.seconds()?;
    let started = Instant::now();
    let mut done = 0;
    while done < o.pipelined {
        let batch: Vec<Vec<Vec<u8>>> = (done..(done + o.depth).min(o.pipelined)).map(|i| o.workload.call(&sha, i)).collect();
        conn.pipeline(&batch)?;
        done += batch.len();
    }
    let secs = started.elapsed().as_secs_f64();
    let pipelined_cpu_us = (clock.seconds()? - cpu0) / o.pipelined as f64 * 1e6;
    progress.step();
    lat.sort_unstable();
    Ok(Cost {
        p50_us: percentile(&lat, 50.0) as f64 / 1e3,
        p99_us: percentile(&lat, 99.0) as f64 / 1e3,
        closed_cpu_us,
        pipelined_cpu_us,
        pipelined_per_s: o.pipelined as f64 / secs,
    })
}

/// Runs the suite, writes its JSON and prints its table and headlines.
pub fn run(o: &ScriptsOptions) -> Result<SuiteReport> {
    let shm_dir = o.pool.parent().unwrap_or(Path::new("/dev/shm")).to_path_buf();
    let progress = Progress::new(4, true);
    let (mut results, mut skipped) = (Vec::new(), Vec::new());
    let mut costs: Vec<(&str, Cost)> = Vec::new();
    for variant in ["pmwire_zero_copy", "redis_aof_always"] {
        progress.stage(&format!("starting {variant}"));
        let started = Running::start(variant, (&o.exe, &o.pool, &o.pool_size), &shm_dir, &o.placement);
        match started.and_then(|server| measure(&server, o, &progress)) {
            Ok(c) => costs.push((variant, c)),
            Err(e) => {
                skipped.push(Skipped::new(o.workload.suite(), variant, &format!("{e:#}")));
                progress.step();
                progress.step();
            }
        }
    }
    let _ = std::fs::remove_file(&o.pool);
    progress.finish();
    println!("{:<18} {:>10} {:>10} {:>16} {:>18} {:>14}", "server", "p50 us", "p99 us", "cpu us/call (1)", "cpu us/call (32)", "calls/s (32)");
    for (variant, c) in &costs {
        println!("{variant:<18} {:>10.1} {:>10.1} {:>16.2} {:>18.2} {:>14.0}", c.p50_us, c.p99_us, c.closed_cpu_us, c.pipelined_cpu_us, c.pipelined_per_s);
        let mut r = BenchResult::new(o.workload.suite(), variant)
            .metric("latency_us_p50", c.p50_us)
            .metric("latency_us_p99", c.p99_us)
            .metric("server_cpu_us_per_call_closed", c.closed_cpu_us)
            .metric("server_cpu_us_per_call_pipelined", c.pipelined_cpu_us)
            .metric("calls_per_s_pipelined", c.pipelined_per_s);
        r.params.insert("command".into(), o.workload.name().into());
        results.push(r);
    }
    let of = |v: &str| costs.iter().find(|c| c.0 == v).map(|c| c.1);
    let div = |f: fn(&Cost) -> f64| Some(f(&of("pmwire_zero_copy")?) / f(&of("redis_aof_always")?));
    let peer = "redis-server, AOF always";
    let name = o.workload.name();
    let headlines = vec![
        ratio(&format!("kv {name}, pipelined {}: server CPU per call, pmwire / redis-server", o.depth), div(|c| c.pipelined_cpu_us), 1.0, false, peer),
        ratio(&format!("kv {name}, one in flight: server CPU per call, pmwire / redis-server"), div(|c| c.closed_cpu_us), 1.0, false, peer).for_information(),
        ratio(&format!("kv {name}, one in flight: p50, pmwire / redis-server"), div(|c| c.p50_us), 1.0, false, peer).for_information(),
    ];
    let (what, keys) = match o.workload {
        Workload::Evalsha => (SCRIPT, 1000),
        Workload::Xadd => ("XADD stream:<i mod 100> * f value-<i>", 100),
    };
    let parameters = serde_json::json!({
        "command": what, "keys": keys, "closed_calls": o.closed, "pipelined_calls": o.pipelined, "depth": o.depth,
        "pool": o.pool, "placement": o.placement.describe(),
        "method": "SCRIPT LOAD once; the command closed loop (one in flight), then pipelines of `depth`; server CPU from clock_getcpuclockid",
        "redis": redis::server_version().unwrap_or_else(|e| e),
        "redis_config": "--appendonly yes --appendfsync always, files on the pool's tmpfs, --save '' --io-threads 1",
    });
    finish(o.workload.suite(), &o.out_dir, parameters, results, skipped, headlines)
}
