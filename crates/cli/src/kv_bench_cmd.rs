//! `pmwire bench kv | http-wal | btree`: the key-value suites of issue 4.

use anyhow::Result;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

use pmwire_bench::kv::btree::{self, BtreeOptions};
use pmwire_bench::kv::collections::{self, CollectionsOptions};
use pmwire_bench::kv::scripts::{self, ScriptsOptions};
use pmwire_bench::kv::http_wal::{self, HttpWalOptions};
use pmwire_bench::kv::resp_suite::{self, KvOptions};

/// The key-value suites.
#[derive(Subcommand)]
pub enum KvSuite {
    /// pmwire kv over RESP beside redis-server (AOF always / everysec / off):
    /// redis-benchmark SET/GET and YCSB A and B, 1 KB values
    /// (`--only collections`: durable HSET/SADD/ZADD/LPUSH into 1 M vs 10 members).
    Kv(SuiteArgs),
    /// POST /log to pmwire kv's HTTP WAL: zero-copy vs copy vs no-persist,
    /// 64 B to 2560 B, 1 to 100 connections.
    HttpWal(SuiteArgs),
    /// Durable inserts of random keys into the KV engine, zero-copy vs copy,
    /// beside the copy-on-write B+tree alone.
    Btree(BtreeArgs),
    /// kill -9 `pmwire kv` under RESP and HTTP load, restart it on the same
    /// pool, check every acknowledged SET/POST and collection write byte for byte.
    KvCrash(KvCrashArgs),
}

/// Arguments of the kv crash campaign.
#[derive(Args)]
pub struct KvCrashArgs {
    /// Kill -9 runs.
    #[arg(long, default_value_t = 100)]
    pub runs: usize,
    /// Seed of keys, sizes and kill moments (default: from the process id; printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Longest a run loads before the kill, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub max_load_ms: u64,
}

/// Arguments of the kv and http-wal suites.
#[derive(Args)]
pub struct SuiteArgs {
    /// A short run (the tour's).
    #[arg(long)]
    pub quick: bool,
    /// Where to write the JSON results.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// kv only: run one part instead of the suite (`collections`: the cost of a durable
    /// write into a collection of 1 M members against one of 10, beside redis-server;
    /// `scripts`: EVALSHA of a small script, and `streams`: XADD of a small entry, server CPU
    /// per call beside redis-server).
    #[arg(long)]
    pub only: Option<String>,
}

/// Arguments of the btree suite.
#[derive(Args)]
pub struct BtreeArgs {
    /// A short run (the tour's: 50 K keys instead of 1 M).
    #[arg(long)]
    pub quick: bool,
    /// Pool file (a tmpfs path is emulated persistent memory).
    #[arg(long, default_value = "/dev/shm/pmwire-bench-btree.pool")]
    pub pool: PathBuf,
    /// Where to write the JSON results.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
}

/// Runs one suite and names its JSON.
pub fn bench(suite: &KvSuite) -> Result<()> {
    if let KvSuite::KvCrash(args) = suite {
        let seed = args.seed.unwrap_or_else(|| std::process::id() as u64 ^ 0x6b76);
        println!("kv crash campaign: {} kill -9 runs of pmwire kv, seed {seed}", args.runs);
        let report = crash_campaign(args.runs, seed, Duration::from_millis(args.max_load_ms))?;
        println!(
            "{} runs: {} acknowledged writes ({} SET PX 1, {} transactions), {} keys checked after restarts, {} lost, {} torn, {} expired served",
            report.runs,
            report.acknowledged,
            report.expiring_acknowledged,
            report.transactions,
            report.keys_checked,
            report.lost,
            report.torn,
            report.expired_served
        );
        println!(
            "collections: {} HSET/HDEL/HINCRBY, {} ZADD/ZREM/ZINCRBY/ZPOPMIN/ZREMRANGEBYSCORE, \
             {} RPUSH/LPUSH/LPOP, {} SADD/SREM, {} XADD/XDEL/XTRIM, {} to streams with a consumer group \
             ({} of them XREADGROUP/XACK) acknowledged, {} read back whole (a group's entries, \
             last delivered ID and pending entries)",
            report.hash_acknowledged,
            report.zset_acknowledged,
            report.list_acknowledged,
            report.set_acknowledged,
            report.stream_acknowledged,
            report.group_acknowledged,
            report.group_reads_acks,
            report.collections_checked
        );
        println!("{} transactions ({} of them EVAL scripts) acknowledged, {} half-applied", report.transactions, report.scripts, report.half_applied);
        return Ok(());
    }
    let report = run(suite)?;
    println!("results: {}", report.json_path.display());
    Ok(())
}

/// The kill -9 campaign against `pmwire kv` (fails if anything acknowledged is lost or torn).
pub fn crash_campaign(runs: usize, seed: u64, max_load: Duration) -> Result<pmwire_kv_server::crash::CrashReport> {
    let options = pmwire_kv_server::crash::CrashOptions { runs, seed, exe: std::env::current_exe()?, max_load };
    pmwire_kv_server::crash::run(&options)
}

/// Runs one suite.
pub fn run(suite: &KvSuite) -> Result<pmwire_bench::SuiteReport> {
    let exe = std::env::current_exe()?;
    match suite {
        KvSuite::Kv(args) if args.only.as_deref() == Some("collections") => {
            let (exe, out) = (exe, args.out.clone());
            let options =
                if args.quick { CollectionsOptions::quick(exe, out) } else { CollectionsOptions::full(exe, out) };
            collections::run(&options)
        }
        KvSuite::Kv(args) if matches!(args.only.as_deref(), Some("scripts" | "streams")) => {
            let (exe, out) = (exe, args.out.clone());
            let mut options = if args.quick { ScriptsOptions::quick(exe, out) } else { ScriptsOptions::full(exe, out) };
            if args.only.as_deref() == Some("streams") {
                options.workload = scripts::Workload::Xadd;
                options.pool = "/dev/shm/pmwire-bench-kv-streams.pool".into();
            }
            scripts::run(&options)
        }
        KvSuite::Kv(SuiteArgs { only: Some(other), .. }) | KvSuite::HttpWal(SuiteArgs { only: Some(other), .. }) => {
            anyhow::bail!("--only {other}: the parts are `collections`, `scripts` and `streams` (of kv)")
        }
        KvSuite::Kv(args) => {
            let options = if args.quick {
                KvOptions::quick(exe, args.out.clone())
            } else {
                KvOptions::full(exe, args.out.clone())
            };
            resp_suite::run(&options)
        }
        KvSuite::HttpWal(args) => {
            let out = args.out.clone();
            let options = if args.quick { HttpWalOptions::quick(exe, out) } else { HttpWalOptions::full(exe, out) };
            http_wal::run(&options)
        }
        KvSuite::Btree(args) => {
            let (pool, out) = (args.pool.clone(), args.out.clone());
            let options = if args.quick { BtreeOptions::quick(pool, out) } else { BtreeOptions::full(pool, out) };
            btree::run(&options)
        }
        KvSuite::KvCrash(_) => anyhow::bail!("kv-crash writes no suite results; call crash_campaign"),
    }
}

/// The tour's part: each suite short, and a 5-run kill -9 campaign; the headlines.
pub fn tour(out: &std::path::Path) -> Result<Vec<pmwire_bench::Headline>> {
    let quick = |out: &std::path::Path| SuiteArgs { quick: true, out: out.to_path_buf(), only: None };
    println!("\n== bench kv (quick): pmwire kv beside redis-server ==");
    let kv = run(&KvSuite::Kv(quick(out)))?;
    println!("\n== bench http-wal (quick) ==");
    let http = run(&KvSuite::HttpWal(quick(out)))?;
    println!("\n== bench btree (quick) ==");
    let pool = "/dev/shm/pmwire-bench-btree.pool".into();
    let tree = run(&KvSuite::Btree(BtreeArgs { quick: true, pool, out: out.to_path_buf() }))?;
    println!("\n== bench kv --only collections (quick): 100 K vs 10 members ==");
    let coll = run(&KvSuite::Kv(SuiteArgs { only: Some("collections".into()), ..quick(out) }))?;
    println!("\n== bench kv --only scripts (quick): EVALSHA beside redis-server ==");
    let scr = run(&KvSuite::Kv(SuiteArgs { only: Some("scripts".into()), ..quick(out) }))?;
    println!("\n== bench kv --only streams (quick): XADD beside redis-server ==");
    let streams = run(&KvSuite::Kv(SuiteArgs { only: Some("streams".into()), ..quick(out) }))?;
    println!("\n== bench kv-crash (5 kill -9 runs of pmwire kv) ==");
    let seed = std::process::id() as u64;
    let report = crash_campaign(5, seed, Duration::from_millis(60))?;
    println!(
        "{} runs (seed {seed}): {} acknowledged writes, {} lost, {} torn",
        report.runs, report.acknowledged, report.lost, report.torn
    );
    let all = kv.headlines.into_iter().chain(http.headlines).chain(tree.headlines).chain(coll.headlines).chain(scr.headlines).chain(streams.headlines);
    Ok(all.collect())
}
