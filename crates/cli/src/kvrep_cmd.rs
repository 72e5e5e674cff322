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
    let options = pmwire_bench::kvrep::suite::Options { quick: args.quick, out_dir: args.out.clone(), exe, peers: !args.no_peers, transport: args.peer_transport.clone() };
    pmwire_bench::kvrep::suite::run(&options)
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
