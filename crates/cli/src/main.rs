//! `pmwire`: the command-line front door.
//!
//! - `pmwire doctor [PATH]`: what this machine and a pool path offer.
//! - `pmwire bench local`: the local persistence suite (JSON + table).
//! - `pmwire check`: the crash-state checker over every persistent structure;
//!   `pmwire check fuzz`: the fuzzer against the remote server core and `pmwire serve`.
//! - `pmwire report FILES --out DIR`: plots of benchmark results.
//! - `pmwire serve`: export a pool; `pmwire remote status`: Auto's choice
//!   per size class against a running server, with its evidence.
//! - `pmwire mirror-backup`: the backup of a mirrored transactional heap;
//!   `pmwire mirror-primary`: its primary; `pmwire mirror-promote`: failover.
//! - `pmwire tour`: the newcomer's tour, a short version of everything.


/// mimalloc for every allocation: a loaded cluster member spent 10-18% of
/// its CPU in glibc's malloc and free (raft-rs messages, B+tree batches,
/// per-command buffers); see docs/ARCHITECTURE.md, "Dependencies".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod check;
mod doctor;
mod fuzz_cmd;
mod kv_cmd;
mod kv_bench_cmd;
mod mirror_cmd;
mod mirror_primary;
mod remote_cmd;
mod secret_args;
mod kvrep_cmd;
mod smr_check;
mod smr_check_forward;
mod smr_cmd;
mod size;

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand};
use pmwire_bench::Tally;
use pmem::{CopyIsa, FlushInstruction, PersistenceDomain, RegionKind, RegionOptions};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "pmwire", version, about = "Fast, durable access to persistent memory, locally and over the network")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the flush instruction, copy ISA, and what a pool path is.
    Doctor(doctor::DoctorArgs),
    /// Run a benchmark suite.
    Bench {
        #[command(subcommand)]
        suite: Suite,
    },
    /// Run the crash-state checker over every persistent structure.
    Check(check::CheckArgs),
    /// Turn benchmark results (JSON) into an HTML page with plots.
    Report {
        /// Result files written by `pmwire bench`.
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// Where to write index.html and the plots.
        #[arg(long, default_value = "report")]
        out: PathBuf,
    },
    /// Run the hardware model (Optane, DDIO/DCA, memory controller, RDMA NIC)
    /// and print each finding beside the paper's.
    Model {
        /// ddio, dma, counter, small-writes, mirror, trace, or all.
        #[arg(default_value = "all", value_parser = parse_experiment)]
        experiment: String,
        /// Where to write the JSON results.
        #[arg(long, default_value = "results")]
        out: PathBuf,
    },
    /// Export a pool over UCX (tcp or shared memory) until killed.
    Serve(remote_cmd::ServeArgs),
    /// Talk to a running `pmwire serve`: `status` shows Auto's choice per size class and its evidence.
    Remote {
        #[command(subcommand)]
        command: remote_cmd::RemoteCommand,
    },
    /// Serve a persistent key-value store over RESP and HTTP (PASTE) until SIGTERM/SIGINT.
    Kv(kv_cmd::KvArgs),
    /// Run one replica of a replicated key-value cluster (Raft; its log in persistent memory) until killed.
    Replica(smr_cmd::ReplicaArgs),
    /// Talk to a replicated cluster: put, get, del, status.
    Smr(smr_cmd::SmrArgs),
    /// Serve as the backup of a mirrored transactional heap (SM-RC, SM-OB, SM-DD) over UCX until killed.
    MirrorBackup(mirror_cmd::MirrorBackupArgs),
    /// Serve as the primary of a mirrored transactional heap: transactions (from stdin or a seed), each mirrored to
    /// a backup before it is acknowledged; a returning backup is resynchronised.
    MirrorPrimary(mirror_primary::MirrorPrimaryArgs),
    /// Promote a stopped backup's pool to a primary's (refused for an unfinished copy); prints what it holds.
    MirrorPromote(mirror_primary::MirrorPromoteArgs),
    /// The newcomer's tour: a short run of every suite on an emulated pool,
    /// the crash checker, and the headline ratios against the peers.
    Tour(TourArgs),
}

#[derive(Subcommand)]
enum Suite {
    /// Local persistence: copies, persist latency and counters, logs; against PMDK.
    Local(LocalArgs),
    #[command(flatten)]
    Remote(remote_cmd::RemoteSuite),
    #[command(flatten)]
    Kv(kv_bench_cmd::KvSuite),
    /// Replication: 3 `pmwire replica` processes, PUT latency and throughput (log in DRAM vs pmem, the tails, tcp and sm) beside etcd and Redis + WAIT.
    Smr(smr_cmd::SmrBenchArgs),
    /// Replication under kill -9: replicas killed and restarted under load (optionally in network namespaces with
    /// partitions and netem); no acknowledged write lost, every history linearizable.
    SmrCrash(smr_cmd::SmrCrashArgs),
    /// Redis replicated on Raft: 3 `pmwire kv --cluster` members beside Redis + WAIT, etcd, single-node `pmwire kv`
    /// and the raw-socket floor; SET/GET latency, throughput, YCSB, failover.
    KvReplicated(kvrep_cmd::KvReplicatedArgs),
    /// `pmwire kv --cluster` under kill -9: members killed and restarted under RESP load; no acknowledged write lost,
    /// INCR counts exact, no EXEC half-applied, histories linearizable.
    KvReplicatedCrash(kvrep_cmd::KvReplicatedCrashArgs),
    /// Mirrored transactions (seed 002 Transact): SM-RC, SM-OB, SM-DD slowdown over NO-SM, over tcp and sm.
    Mirror(mirror_cmd::MirrorBenchArgs),
    /// Mirrored transactions under kill -9 of the primary or the backup: no acknowledged transaction lost, none torn.
    MirrorCrash(mirror_cmd::MirrorCrashArgs),
}

/// Where the pool lives and what to take it for.
#[derive(Args, Clone)]
struct PoolArgs {
    /// Pool file (a tmpfs path is emulated persistent memory).
    #[arg(long, default_value = "/dev/shm/pmwire-bench.pool")]
    pool: PathBuf,
    /// Pool size (bytes; K, M, G suffixes).
    #[arg(long, default_value = "1G", value_parser = size::parse)]
    size: u64,
    /// Override the detected kind: fsdax, devdax, file, emulated.
    #[arg(long, value_parser = parse_kind)]
    kind: Option<RegionKind>,
    /// Override the persistence domain: cpu_cache, memory_controller, page_cache, process_only.
    #[arg(long, value_parser = parse_domain)]
    domain: Option<PersistenceDomain>,
    /// Override the flush instruction: clwb, clflushopt, clflush, none.
    #[arg(long, value_parser = parse_flush)]
    flush: Option<FlushInstruction>,
    /// Override the copy instruction set: avx512, avx2, sse2.
    #[arg(long, value_parser = parse_isa)]
    isa: Option<CopyIsa>,
    /// Copies at or above this size use non-temporal stores (default 256 B).
    #[arg(long, value_parser = size::parse)]
    nt_threshold: Option<u64>,
}

impl PoolArgs {
    fn region_options(&self) -> RegionOptions {
        RegionOptions {
            size: Some(self.size),
            create: true,
            kind: self.kind,
            domain: self.domain,
            flush: self.flush,
            isa: self.isa,
            nt_threshold: self.nt_threshold.map(|t| t as usize),
        }
    }
}

#[derive(Args)]
struct LocalArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// A short run (the tour's).
    #[arg(long)]
    quick: bool,
    /// Run only these benchmarks (comma-separated; all by default).
    #[arg(long, value_delimiter = ',', value_parser = pmwire_bench::local::LocalBench::parse)]
    only: Vec<pmwire_bench::local::LocalBench>,
    /// Where to write the JSON results.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Run the suite N times and report each headline's worst value across
    /// the runs (each run's value beside it, in the table and the JSON).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    repeat: u64,
}

#[derive(Args)]
struct TourArgs {
    #[command(flatten)]
    pool: PoolArgs,
    /// Where to write the JSON results and the report.
    #[arg(long, default_value = "results")]
    out: PathBuf,
}

fn parse_kind(s: &str) -> Result<RegionKind, String> {
    RegionKind::parse(s).ok_or_else(|| format!("unknown region kind '{s}' (fsdax, devdax, file, emulated)"))
}

fn parse_domain(s: &str) -> Result<PersistenceDomain, String> {
    PersistenceDomain::parse(s)
        .ok_or_else(|| format!("unknown domain '{s}' (cpu_cache, memory_controller, page_cache, process_only)"))
}

fn parse_flush(s: &str) -> Result<FlushInstruction, String> {
    FlushInstruction::parse(s).ok_or_else(|| format!("unknown flush '{s}' (clwb, clflushopt, clflush, none)"))
}

fn parse_experiment(s: &str) -> Result<String, String> {
    if s == "all" || pmwire_model::experiments::NAMES.contains(&s) {
        Ok(s.to_string())
    } else {
        Err(format!("unknown experiment '{s}' (all, {})", pmwire_model::experiments::NAMES.join(", ")))
    }
}

fn parse_isa(s: &str) -> Result<CopyIsa, String> {
    CopyIsa::parse(s).ok_or_else(|| format!("unknown copy ISA '{s}' (avx512, avx2, sse2)"))
}

/// Turns transparent huge pages off for this process, as redis-server does
/// (`disable-thp yes`, its default): the allocator asks for them on its
/// arenas, and the first write to a fresh 2 MiB page zeroes all of it in
/// the fault. A member's key index growing past 900 K keys took ~80 such
/// faults in one apply, 400 ms of the loop, and the members elected a new
/// leader (`docs/bench.md`, "A turn's apply, bounded"). Small pages fault
/// the same bytes a little at a time. A kernel without the call keeps
/// them; nothing else depends on it.
fn disable_thp() {
    // SAFETY: plain prctl on this process; the result is ignored (an old
    // kernel refuses it, and then the process keeps huge pages).
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

fn main() -> Result<()> {
    // Every server this binary runs (`serve`, `replica`) may be restarted on
    // its port after a kill -9, while its old connections sit in TIME_WAIT:
    // let UCX's listeners reuse the address. UCX reads this setting from the
    // environment only; set it before any thread starts.
    if std::env::var_os("UCX_TCP_CM_REUSEADDR").is_none() {
        std::env::set_var("UCX_TCP_CM_REUSEADDR", "y");
    }
    disable_thp();
    let cli = Cli::parse();
    match cli.command {
        Command::Doctor(args) => doctor::run(&args),
        Command::Bench { suite: Suite::Local(args) } => {
            let report = pmwire_bench::repeat::run("local", args.repeat as usize, &args.out, |_| {
                run_local(&args.pool, args.quick, &args.only, &args.out)
            })?;
            println!("results: {}", report.json_path.display());
            Ok(())
        }
        Command::Check(check::CheckArgs { command: Some(check::CheckCommand::Fuzz(fuzz)), .. }) => {
            if !fuzz_cmd::run(&fuzz)? {
                eprintln!("pmwire: the fuzzer found a failure (see above)");
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Check(check::CheckArgs { command: Some(check::CheckCommand::Smr(smr)), .. }) => {
            if !smr_check::run(&smr)? {
                eprintln!("pmwire: the replication simulation found a failure (see above)");
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Check(args) => {
            if !check::run(&args)? {
                eprintln!("pmwire: the crash-state checker found failures (see the table above)");
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Report { inputs, out } => {
            let index = pmwire_bench::report::write(&inputs, &out)?;
            println!("report: {}", index.display());
            Ok(())
        }
        Command::Model { experiment, out } => {
            pmwire_model::experiments::run(&experiment, &out)?;
            Ok(())
        }
        Command::Tour(args) => tour(&args),
        Command::Serve(args) => remote_cmd::serve_cmd(&args),
        Command::Remote { command } => remote_cmd::remote(&command),
        Command::Kv(args) => kv_cmd::run(&args),
        Command::Replica(args) => smr_cmd::replica(&args),
        Command::Smr(args) => smr_cmd::smr(&args),
        Command::MirrorBackup(args) => mirror_cmd::mirror_backup(&args),
        Command::MirrorPrimary(args) => mirror_primary::mirror_primary(args),
        Command::MirrorPromote(args) => mirror_primary::mirror_promote(&args),
        Command::Bench { suite: Suite::Remote(suite) } => remote_cmd::bench(&suite),
        Command::Bench { suite: Suite::Kv(suite) } => kv_bench_cmd::bench(&suite),
        Command::Bench { suite: Suite::Mirror(args) } => mirror_cmd::bench(&args),
        Command::Bench { suite: Suite::MirrorCrash(args) } => mirror_cmd::crash(&args),
        Command::Bench { suite: Suite::KvReplicated(args) } => {
            kvrep_cmd::bench(&args).map(drop)
        }
        Command::Bench { suite: Suite::KvReplicatedCrash(args) } => {
            if !kvrep_cmd::crash(&args)? {
                bail!("kv-replicated-crash found lost writes, wrong counts, half EXECs or non-linearizable histories (see above)");
            }
            Ok(())
        }
        Command::Bench { suite: Suite::SmrCrash(args) } => {
            if !smr_cmd::crash(&args)? {
                eprintln!("pmwire: smr-crash found lost writes, non-linearizable histories or failed replicas (see above)");
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Bench { suite: Suite::Smr(args) } => {
            let report = smr_cmd::bench(&args)?;
            println!("results: {}", report.json_path.display());
            Ok(())
        }
    }
}

fn run_local(
    pool: &PoolArgs,
    quick: bool,
    only: &[pmwire_bench::local::LocalBench],
    out: &std::path::Path,
) -> Result<pmwire_bench::SuiteReport> {
    let options = pmwire_bench::local::LocalOptions {
        pool: pool.pool.clone(),
        size_bytes: pool.size,
        quick,
        out_dir: out.to_path_buf(),
        region: pool.region_options(),
        only: only.to_vec(),
    };
    pmwire_bench::local::run(&options)
}

fn tour(args: &TourArgs) -> Result<()> {
    let started = std::time::SystemTime::now();
    println!("== pmwire tour: every suite, short, on an emulated pool ==\n");
    doctor::run(&doctor::DoctorArgs { path: Some(args.pool.pool.clone()) })?;
    println!("\n== crash-state checker ==");
    let checks_ok = check::run(&check::CheckArgs { command: None, seed: None, quick: false })?;
    println!("\n== fuzz: the remote server core and pmwire serve over tcp and sm, every reply checked against a model (pmwire check fuzz, 2 s per phase) ==");
    let fuzz_ok = fuzz_cmd::run(&fuzz_cmd::FuzzArgs::tour(2))?;
    println!("\n== replication: seeded simulations of 3 and 5 replicas under faults, the key-value map and the Redis machine, and follower forwarding; histories checked for linearizability (pmwire check smr, 100 seeds each) ==");
    let smr_ok = smr_check::run(&smr_check::SmrCheckArgs::tour())?;
    println!("\n== bench local (quick; headline ratios against the peers at the end) ==");
    let local = run_local(&args.pool, true, &[], &args.out)?;
    let remote = tour_remote(&args.out)?;
    let kv = kv_bench_cmd::tour(&args.out)?;
    println!("\n== bench smr (quick): 3 pmwire replica processes beside etcd and Redis + WAIT ==");
    let smr_args = smr_cmd::SmrBenchArgs { quick: true, out: args.out.clone(), no_peers: false, tls: "tcp".into(), repeat: 1 };
    let smr = smr_cmd::bench(&smr_args)?.headlines;
    println!("\n== bench smr-crash (quick): 5 runs, each kill -9 of a replica under load, restarted on its pool; histories checked for lost writes and linearizability ==");
    // In a process of its own: its client threads each run a UCX worker, and
    // UCX 1.13 can abort a process whose workers in several threads reuse a
    // closed socket's fd while an event for it is pending (async.c:643,
    // `handler->async == async`; seen once, in a tour that had run every
    // suite before; fixed upstream by UCX pull request 9942). A child's
    // abort is then a failed step, not the end of the tour.
    let status = std::process::Command::new(std::env::current_exe()?)
        .args(["bench", "smr-crash", "--runs", "5", "--quick", "--out"])
        .arg(&args.out)
        .status()?;
    let smr_crash_ok = status.success();
    println!("\n== bench kv-replicated (quick): 3 pmwire kv --cluster members beside Redis + WAIT, etcd, single-node pmwire kv and the raw-socket floor ==");
    let kvrep_args = kvrep_cmd::KvReplicatedArgs { quick: true, out: args.out.clone(), no_peers: false, peer_transport: "uring".into(), catch_up_mib: None, failover_kills: None, membership_only: false };
    let kvrep = kvrep_cmd::bench(&kvrep_args)?.headlines;
    println!("\n== bench kv-replicated-crash: 5 runs, each kill -9 of a member under RESP load, restarted on its pool; lost writes, INCR counts, EXECs and linearizability checked ==");
    let status = std::process::Command::new(std::env::current_exe()?)
        .args(["bench", "kv-replicated-crash", "--runs", "5", "--load-ms", "2000", "--out"])
        .arg(&args.out)
        .status()?;
    let kvrep_crash_ok = status.success();
    let (mirror, mirror_crash_ok) = tour_mirror(&args.out)?;
    println!("\n== hardware model: the seeds' Optane/DDIO/RDMA findings, modelled ==");
    let findings = pmwire_model::experiments::run("all", &args.out)?;
    let results = results_since(&args.out, started)?;
    let index = pmwire_bench::report::write(&results, &args.out.join("report"))?;
    println!("\n== summary ==");
    // Each suite's targets: met, bound by a floor measured in the same run
    // (this machine cannot meet them), missed, not run.
    for (suite, headlines) in [("local suite", &local.headlines), ("remote suites", &remote), ("key-value suites", &kv), ("replication suite", &smr), ("replicated kv suite", &kvrep), ("mirroring suite", &mirror)] {
        println!("{suite}: {} in this run", Tally::of(headlines).text());
    }
    let reproduced = findings.iter().filter(|f| f.within_tolerance).count();
    println!("model: {reproduced} of {} published findings reproduced within tolerance", findings.len());
    println!("fuzz: {}", if fuzz_ok { "PASS" } else { "FAIL (see above)" });
    println!("replication simulation: {}", if smr_ok { "PASS" } else { "FAIL (see above)" });
    println!("replication under kill -9: {}", if smr_crash_ok { "PASS" } else { "FAIL (see above)" });
    println!("replicated kv under kill -9: {}", if kvrep_crash_ok { "PASS" } else { "FAIL (see above)" });
    println!("mirroring under kill -9: {}", if mirror_crash_ok { "PASS" } else { "FAIL (see above)" });
    println!("results: {}\nreport:  {}", args.out.display(), index.display());
    if !checks_ok {
        bail!("the crash-state checker found failures");
    }
    if !fuzz_ok {
        bail!("the fuzzer found failures");
    }
    if !smr_ok {
        bail!("the replication simulation found failures");
    }
    if !smr_crash_ok {
        bail!("smr-crash found lost writes, non-linearizable histories or failed replicas");
    }
    if !kvrep_crash_ok {
        bail!("kv-replicated-crash found lost writes, wrong counts, half EXECs or non-linearizable histories");
    }
    if !mirror_crash_ok {
        bail!("mirror-crash found lost or torn transactions, or a run that could not be checked");
    }
    Ok(())
}

/// The remote suites, short: latency and bulk over tcp and shared memory,
/// and a few kill -9 runs of `pmwire serve`. Returns their headlines.
fn tour_remote(out: &std::path::Path) -> Result<Vec<pmwire_bench::Headline>> {
    use pmwire_bench::remote::{bulk, crash, latency, logserver};
    println!("\n== bench remote-latency (quick) ==");
    let latency = latency::run(&latency::LatencyOptions { quick: true, out_dir: out.to_path_buf() })?;
    println!("\n== bench remote-bulk (quick) ==");
    let bulk = bulk::run(&bulk::BulkOptions { quick: true, out_dir: out.to_path_buf() })?;
    println!("\n== bench log-server (quick) ==");
    let transports = ["tcp", "sm"].map(String::from).to_vec();
    let options = logserver::LogServerOptions {
        quick: true,
        transports,
        out_dir: out.to_path_buf(),
        appends_per_cell: None,
        rounds: None,
    };
    let log_server = logserver::run(&options)?;
    println!("\n== bench crash (5 kill -9 runs of pmwire serve) ==");
    let options = crash::CrashOptions {
        runs: 5,
        max_load: std::time::Duration::from_millis(60),
        seed: std::process::id() as u64,
        exe: std::env::current_exe()?,
    };
    let report = crash::run(&options)?;
    println!(
        "{} runs (seed {}): {} acknowledged writes and appends, {} lost; {}",
        report.runs,
        options.seed,
        report.acknowledged,
        report.lost,
        crash::phases_text(&report)
    );
    Ok(latency.headlines.into_iter().chain(bulk.headlines).chain(log_server.headlines).collect())
}

/// Mirroring, short: seed 002's Transact with every strategy over tcp and
/// shared memory, and 6 kill -9 runs (primary or backup, each strategy
/// twice, each followed by its failover) over tcp. Returns the suite's
/// headlines and whether the campaign lost or tore nothing.
fn tour_mirror(out: &std::path::Path) -> Result<(Vec<pmwire_bench::Headline>, bool)> {
    use pmwire_bench::{mirror, mirror_crash};
    println!("\n== bench mirror (quick): seed 002's Transact and WHISPER-like applications, NO-SM against SM-RC, SM-OB and SM-DD over tcp and sm; NO-SM beside libpmemobj ==");
    let transports = ["tcp", "sm"].map(String::from).to_vec();
    let options = mirror::MirrorOptions { quick: true, transports, out_dir: out.to_path_buf(), only: None };
    let report = mirror::run(&options)?;
    println!("\n== bench mirror-crash (6 kill -9 runs over tcp: the primary killed, its backup promoted and served; or the backup killed, restarted and resynchronised) ==");
    let options = mirror_crash::MirrorCrashOptions {
        runs: 6,
        tls: "tcp".into(),
        seed: std::process::id() as u64,
        exe: std::env::current_exe()?,
        out_dir: out.to_path_buf(),
    };
    let crash_ok = match mirror_crash::run(&options) {
        Ok(_) => true,
        Err(e) => {
            println!("mirror-crash: {e:#}");
            false
        }
    };
    Ok((report.headlines, crash_ok))
}

/// The JSON results written in `dir` since `since`.
fn results_since(dir: &std::path::Path, since: std::time::SystemTime) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let fresh = entry.metadata()?.modified()? >= since;
        if fresh && entry.path().extension().is_some_and(|e| e == "json") {
            paths.push(entry.path());
        }
    }
    paths.sort();
    Ok(paths)
}
