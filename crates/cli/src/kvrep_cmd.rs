//! `pmwire bench kv-replicated` and `kv-replicated-crash` (issue 26): the
//! arguments, and the calls into `pmwire_bench::kvrep`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

/// `pmwire bench kv-replicated`.
#[derive(Args, Clone)]
pub struct KvReplicatedArgs {
    /// A short run (~1-2 minutes: 3 rounds, 1 s per throughput point).
    #[arg(long)]
    pub quick: bool,
    /// Where to write the JSON results.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Leave out Redis + WAIT and etcd.
    #[arg(long)]
    pub no_peers: bool,
    /// The members' peer transport.
    #[arg(long, default_value = "uring", value_parser = ["uring", "tcp", "sm"])]
    pub peer_transport: String,
    /// MiB of keyspace a new member catches up from (default 32 with --quick, else 256; 0 leaves it out).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=65_536))]
    pub catch_up_mib: Option<u64>,
    /// Leader kills of the failover-under-load measurement (default 3 with --quick, else 7; 0 leaves it out).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub failover_kills: Option<u64>,
    /// Only the failover and catch-up measurements (no latency rounds, no peers).
    #[arg(long)]
    pub membership_only: bool,
}

/// `pmwire bench kv-replicated-crash`.
#[derive(Args, Clone)]
pub struct KvReplicatedCrashArgs {
    /// Kill -9 runs (each a fresh 3-member group).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub runs: u64,
    /// Load per run, in milliseconds.
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u64).range(300..=600_000))]
    pub load_ms: u64,
    /// Where to write the JSON results.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Seed of the campaign, decimal or 0x-hex (default: from the clock; printed).
    #[arg(long, value_parser = parse_seed)]
    pub seed: Option<u64>,
    /// The members' peer transport.
    #[arg(long, default_value = "uring", value_parser = ["uring", "tcp", "sm"])]
    pub peer_transport: String,
    /// Run the members in network namespaces on a bridge (root), with
    /// partitions, delay and loss besides the kill -9.
    #[arg(long)]
    pub netns: bool,
}

fn parse_seed(s: &str) -> Result<u64, String> {
    let parsed = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|e| format!("'{s}': {e} (a decimal or 0x-prefixed hex u64)"))
}

/// Runs `pmwire bench kv-replicated`.
pub fn bench(args: &KvReplicatedArgs) -> Result<pmwire_bench::SuiteReport> {
    let exe = std::env::current_exe().context("the pmwire binary")?;
    let options = pmwire_bench::kvrep::suite::Options { quick: args.quick, out_dir: args.out.clone(), exe, peers: !args.no_peers && !args.membership_only, transport: args.peer_transport.clone() };
    let mut run = if args.quick { pmwire_bench::kvrep::suite::RunPlan::quick() } else { pmwire_bench::kvrep::suite::RunPlan::full() };
    run.catchup_mib = args.catch_up_mib.unwrap_or(run.catchup_mib);
    run.failover_kills = args.failover_kills.map_or(run.failover_kills, |k| k as usize);
    if args.membership_only {
        run.rounds = 0;
    }
    pmwire_bench::kvrep::suite::run_suite(&options, &run)
}

/// Runs `pmwire bench kv-replicated-crash`; false if a run failed its checks or the canary was not caught.
pub fn crash(args: &KvReplicatedCrashArgs) -> Result<bool> {
    let seed = args.seed.unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        nanos ^ u64::from(std::process::id()).rotate_left(40)
    });
    let network = if args.netns { "in network namespaces, with partitions, delay and loss" } else { "on loopback" };
    println!("kv-replicated-crash: {} kill -9 runs {network}, seed {seed:#x}", args.runs);
    let options = pmwire_bench::kvrep::crash::CrashOptions {
        runs: args.runs as usize,
        load: Duration::from_millis(args.load_ms),
        out_dir: args.out.clone(),
        exe: std::env::current_exe().context("the pmwire binary")?,
        seed,
        transport: args.peer_transport.clone(),
        netns: args.netns,
    };
    let (report, passed) = pmwire_bench::kvrep::crash::run(&options)?;
    println!("results: {}", report.json_path.display());
    println!("{}", if passed { "PASS: no acknowledged write lost, INCR counts exact, no EXEC half-applied, no history found non-linearizable (undecided keys counted in the table); the canary was caught" } else { "FAIL" });
    Ok(passed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Crash {
        #[command(flatten)]
        args: KvReplicatedCrashArgs,
    }

    #[derive(Parser)]
    struct Bench {
        #[command(flatten)]
        args: KvReplicatedArgs,
    }

    #[test]
    fn arguments_parse_and_bad_ones_are_refused() {
        let c = Crash::try_parse_from(["x", "--runs", "5", "--seed", "7"]).unwrap();
        assert_eq!((c.args.runs, c.args.seed, c.args.load_ms), (5, Some(7), 3000));
        assert!(Crash::try_parse_from(["x", "--runs", "0"]).is_err());
        assert_eq!(Crash::try_parse_from(["x", "--seed", "0x10"]).unwrap().args.seed, Some(16));
        assert!(Crash::try_parse_from(["x", "--seed", "0xzz"]).is_err());
        assert!(Crash::try_parse_from(["x", "--load-ms", "10"]).is_err());
        let b = Bench::try_parse_from(["x", "--quick", "--no-peers"]).unwrap();
        assert!(b.args.quick && b.args.no_peers);
        assert_eq!(b.args.peer_transport, "uring");
        assert!(Bench::try_parse_from(["x", "--peer-transport", "carrier-pigeon"]).is_err());
    }
}
