//! `pmwire check smr`'s follower-forwarding part: the deterministic
//! simulation `pmwire_smr::sim_forward` (embedder-style clients on the
//! leader and on followers, whose proposals and reads raft-rs forwards;
//! loss, duplication, reordering, partitions and crashes; every history
//! checked per key) over `--seeds` seeds from `--first` for each cluster
//! size, then its planted bug (forwarded proposals without the
//! exactly-once table), which some seed within `--planted-seeds` must
//! catch. A run is a pure function of its seed: a failure prints the
//! command that replays it.

use std::time::Instant;

use pmwire_smr::node::Faults;
use pmwire_smr::sim_forward::{run_forward, ForwardSimConfig, ForwardSimReport};

use crate::smr_check::{progress, SmrCheckArgs};

/// Totals over the runs of one cluster size.
#[derive(Default)]
struct Totals {
    runs: u64,
    failed: Vec<ForwardSimReport>,
    acked_follower: u64,
    acked_leader: u64,
    reads_follower: u64,
    reads_leader: u64,
    crashes: u64,
    sends_held: u64,
}

impl Totals {
    fn add(&mut self, r: ForwardSimReport) {
        self.runs += 1;
        self.acked_follower += r.acked_follower;
        self.acked_leader += r.acked_leader;
        self.reads_follower += r.reads_follower;
        self.reads_leader += r.reads_leader;
        self.crashes += r.crashes;
        self.sends_held += r.sends_held;
        if !r.passed() {
            self.failed.push(r);
        }
    }

    /// Every run passed, and (over 10 runs or more) the runs did what they
    /// are for: appends and reads through followers and through the
    /// leader, crashes injected.
    fn ok(&self) -> bool {
        let exercised = self.acked_follower > 0 && self.acked_leader > 0 && self.reads_follower > 0 && self.reads_leader > 0;
        self.failed.is_empty() && (exercised && self.crashes > 0 || self.runs < 10)
    }
}

/// Runs the forwarding simulation for each size in `sizes`, then its
/// planted bug; true if every run passed and the bug was caught.
pub fn run(args: &SmrCheckArgs, sizes: &[u64]) -> bool {
    println!("\nfollower forwarding (sim_forward): seeds {}..{} per cluster size; clients on the leader and on followers, every fault on", args.first, args.first + args.seeds);
    println!("{:<34} {:>6} {:>6} {:>12} {:>12} {:>12} {:>12} {:>8} {:>10} {:>7}  verdict", "configuration", "runs", "failed", "acked (fol.)", "acked (ldr)", "reads (fol.)", "reads (ldr)", "crashes", "sends held", "runs/s");
    let mut all_ok = true;
    for &n in sizes {
        let cfg = ForwardSimConfig::standard(n);
        let bar = progress(args.seeds, &format!("forward, {n} replicas"));
        let started = Instant::now();
        let mut t = Totals::default();
        for seed in args.first..args.first + args.seeds {
            t.add(run_forward(seed, &cfg));
            bar.inc(1);
        }
        bar.finish_and_clear();
        let runs_per_s = t.runs as f64 / started.elapsed().as_secs_f64().max(1e-9);
        let ok = t.ok();
        all_ok &= ok;
        let name = format!("forward, {n} replicas, {} clients", cfg.clients);
        println!(
            "{name:<34} {:>6} {:>6} {:>12} {:>12} {:>12} {:>12} {:>8} {:>10} {runs_per_s:>7.1}  {}",
            t.runs,
            t.failed.len(),
            t.acked_follower,
            t.acked_leader,
            t.reads_follower,
            t.reads_leader,
            t.crashes,
            t.sends_held,
            if ok { "ok" } else { "FAILED" }
        );
        if t.failed.is_empty() && !ok {
            println!("    the runs acknowledged no append or served no read through a follower or the leader, or injected no crash");
        }
        for r in t.failed.iter().take(5) {
            println!("    seed {}: {}", r.seed, r.violations.join("; "));
            println!("    replay: pmwire check smr --forward --replicas {n} --first {} --seeds 1", r.seed);
        }
    }
    all_ok & planted_caught(args.planted_seeds)
}

/// The planted bug: forwarded proposals without the exactly-once table
/// (a duplicated forward applied twice); true if a seed caught it.
fn planted_caught(seeds: u64) -> bool {
    let cfg = ForwardSimConfig { planted: Faults { forward_without_dedup: true, ..Faults::default() }, ..ForwardSimConfig::standard(3) };
    let found = (0..seeds).map(|seed| run_forward(seed, &cfg)).find(|r| !r.passed());
    let name = "forward: planted: forwards not deduplicated";
    match found {
        Some(r) => {
            let first = r.violations.first().map(|v| v.chars().take(100).collect::<String>()).unwrap_or_default();
            println!("{name:<40} caught at seed {}: {first}", r.seed);
            true
        }
        None => {
            println!("{name:<40} PLANTED BUG MISSED in {seeds} seeds");
            false
        }
    }
}
