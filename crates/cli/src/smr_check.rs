//! `pmwire check smr`: the replication simulation (`pmwire_smr::sim`) over
//! many seeds, for 3 and 5 replicas, then every planted bug, which some
//! seed must catch. Prints a progress bar on a terminal, a table, and for
//! a failure its seed and the command that replays it.

use std::io::IsTerminal;

use anyhow::Result;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pmwire_smr::node::Faults;
use pmwire_smr::sim::{run as simulate, SimConfig, SimReport};

/// `pmwire check smr`.
#[derive(Args, Clone)]
pub struct SmrCheckArgs {
    /// Seeded runs per cluster size.
    #[arg(long, default_value_t = 1000)]
    pub seeds: u64,
    /// The first seed (runs use first, first + 1, ...).
    #[arg(long, default_value_t = 0)]
    pub first: u64,
    /// Cluster sizes: 3, 5 or both.
    #[arg(long, default_value = "both", value_parser = ["3", "5", "both"])]
    pub replicas: String,
    /// Seeds each planted bug may take to be caught.
    #[arg(long, default_value_t = 2000)]
    pub planted_seeds: u64,
}

impl SmrCheckArgs {
    /// A short run for the tour.
    pub fn tour() -> SmrCheckArgs {
        SmrCheckArgs { seeds: 100, first: 0, replicas: "both".into(), planted_seeds: 2000 }
    }
}

/// Totals over the runs of one configuration.
#[derive(Default)]
struct Totals {
    runs: u64,
    failed: Vec<SimReport>,
    ops: u64,
    acknowledged: u64,
    crashes: u64,
    partitions: u64,
}

fn progress(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if std::io::stderr().is_terminal() {
        bar.set_style(ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} seeds {eta}").expect("template").progress_chars("=> "));
        bar.set_prefix(what.to_string());
    } else {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar
}

/// Runs the check; true if every run passed and every planted bug was caught.
pub fn run(args: &SmrCheckArgs) -> Result<bool> {
    let sizes: &[u64] = match args.replicas.as_str() {
        "3" => &[3],
        "5" => &[5],
        _ => &[3, 5],
    };
    println!("smr simulation: seeds {}..{} per cluster size; every fault on (loss, duplication, reordering, partitions, crashes in and between store writes)", args.first, args.first + args.seeds);
    println!("{:<28} {:>6} {:>6} {:>9} {:>9} {:>8} {:>10}  verdict", "configuration", "runs", "failed", "ops", "acked", "crashes", "partitions");
    let mut all_ok = true;
    for &n in sizes {
        let cfg = SimConfig::standard(n);
        let bar = progress(args.seeds, &format!("{n} replicas"));
        let mut t = Totals::default();
        for seed in args.first..args.first + args.seeds {
            let r = simulate(seed, &cfg);
            t.runs += 1;
            t.ops += r.ops as u64;
            t.acknowledged += r.acknowledged as u64;
            t.crashes += r.crashes;
            t.partitions += r.partitions;
            if !r.passed() {
                t.failed.push(r);
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        let ok = t.failed.is_empty();
        all_ok &= ok;
        let name = format!("{n} replicas, 4 clients");
        println!("{name:<28} {:>6} {:>6} {:>9} {:>9} {:>8} {:>10}  {}", t.runs, t.failed.len(), t.ops, t.acknowledged, t.crashes, t.partitions, if ok { "ok" } else { "FAILED" });
        for r in t.failed.iter().take(5) {
            println!("    seed {}: {}", r.seed, r.violations.join("; "));
            println!("    replay: pmwire check smr --replicas {n} --first {} --seeds 1", r.seed);
        }
    }
    let planted = [
        ("planted: ack before persist", Faults { ack_before_persist: true, ..Faults::default() }),
        ("planted: vote not persisted", Faults { forget_vote: true, ..Faults::default() }),
        ("planted: commit on a minority", Faults { answer_before_commit: true, ..Faults::default() }),
    ];
    for (name, faults) in planted {
        let cfg = SimConfig { planted: faults, ..SimConfig::standard(3) };
        let found = (0..args.planted_seeds).map(|seed| simulate(seed, &cfg)).find(|r| !r.passed());
        match found {
            Some(r) => println!("{name:<28} caught at seed {}: {}", r.seed, r.violations.first().map(|v| v.chars().take(100).collect::<String>()).unwrap_or_default()),
            None => {
                all_ok = false;
                println!("{name:<28} PLANTED BUG MISSED in {} seeds", args.planted_seeds);
            }
        }
    }
    Ok(all_ok)
}
