//! `pmwire check smr`: the replication simulation (`pmwire_smr::sim`) over
//! many seeds, for 3 and 5 replicas, on DRAM stores and on persistent
//! stores whose crashes leave crash images, with the key-value map
//! (`KvMap`) or the Redis machine (`pmwire_kv_cluster::sim::SimRedis`) or
//! both, then every planted bug, which some seed must catch (with the
//! Redis machine also a member drawing its own randomness, and on the
//! persistent store, whose runs put the Redis machine on the engine over a
//! traced medium, a keyspace committing writes apart from the applied
//! index). Then the follower-forwarding simulation
//! (`pmwire_smr::sim_forward`: embedder clients on the leader and on
//! followers, proposals and reads forwarded by raft-rs, histories checked
//! per key), over the same seeds and sizes, and its planted bug (no
//! exactly-once table for forwarded proposals); `--forward` runs it alone,
//! `--no-forward` leaves it out. Prints a progress bar on a terminal, a
//! table, and for a failure its seed and the command that replays it.

use std::io::IsTerminal;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pmwire_smr::node::Faults;
use pmwire_smr::pmem_store::StoreFaults;
use pmwire_kv_cluster::sim::SimRedis;
use pmwire_kv_server::sim::PmemKeyspace;
use pmwire_smr::kvmap::KvMap;
use pmwire_smr::sim::{run_with, SimConfig, SimReport, SimStore};

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
    /// Durable stores: DRAM (a crash keeps what the store persisted),
    /// persistent memory (a crash leaves a crash image), or both.
    #[arg(long, default_value = "both", value_parser = ["mem", "pmem", "both"])]
    pub store: String,
    /// Seeds each planted bug may take to be caught.
    #[arg(long, default_value_t = 2000)]
    pub planted_seeds: u64,
    /// The replicated machine: the key-value map, Redis, or both.
    #[arg(long, default_value = "both", value_parser = ["kv", "redis", "both"])]
    pub machine: String,
    /// Only the follower-forwarding simulation (`sim_forward`).
    #[arg(long, conflicts_with = "no_forward")]
    pub forward: bool,
    /// Leave the follower-forwarding simulation out.
    #[arg(long)]
    pub no_forward: bool,
}

/// Which machine a run simulates.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Machine {
    Kv,
    Redis,
    /// Redis whose members draw their own randomness (planted).
    RedisLocalRandom,
    /// Redis whose persistent keyspace commits each write apart from the
    /// applied index (planted; needs the persistent store).
    RedisCommitEachWrite,
}

impl Machine {
    fn name(self) -> &'static str {
        match self {
            Machine::Kv => "kv",
            Machine::Redis | Machine::RedisLocalRandom | Machine::RedisCommitEachWrite => "redis",
        }
    }

    /// One seed. With the persistent store, the Redis machine runs on the
    /// engine over a traced medium too (`PmemKeyspace`): a crash leaves an
    /// image of the machine's pool as well as of the Raft store.
    fn simulate(self, seed: u64, cfg: &SimConfig) -> SimReport {
        let pmem = cfg.store == SimStore::Pmem;
        match self {
            Machine::Kv => run_with::<KvMap>(seed, cfg),
            Machine::Redis if pmem => run_with::<SimRedis<false, PmemKeyspace>>(seed, cfg),
            Machine::Redis => run_with::<SimRedis>(seed, cfg),
            Machine::RedisLocalRandom if pmem => run_with::<SimRedis<true, PmemKeyspace>>(seed, cfg),
            Machine::RedisLocalRandom => run_with::<SimRedis<true>>(seed, cfg),
            Machine::RedisCommitEachWrite => run_with::<SimRedis<false, PmemKeyspace<true>>>(seed, cfg),
        }
    }
}

impl SmrCheckArgs {
    /// A short run for the tour.
    pub fn tour() -> SmrCheckArgs {
        SmrCheckArgs {
            seeds: 100,
            first: 0,
            replicas: "both".into(),
            store: "both".into(),
            planted_seeds: 2000,
            machine: "both".into(),
            forward: false,
            no_forward: false,
        }
    }
}

fn store_name(store: SimStore) -> &'static str {
    match store {
        SimStore::Mem => "mem",
        SimStore::Pmem => "pmem",
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
    chunked: u64,
    snapshot_turns: u64,
    entries_held: u64,
    sends_held: u64,
    partitions: u64,
}

pub(crate) fn progress(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if std::io::stderr().is_terminal() {
        bar.set_style(ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} seeds {eta}").expect("template").progress_chars("=> "));
        bar.set_prefix(what.to_string());
    } else {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar
}

fn sizes(args: &SmrCheckArgs) -> &'static [u64] {
    match args.replicas.as_str() {
        "3" => &[3],
        "5" => &[5],
        _ => &[3, 5],
    }
}

/// Runs the check; true if every run passed and every planted bug was caught.
pub fn run(args: &SmrCheckArgs) -> Result<bool> {
    let mut all_ok = true;
    if !args.forward {
        all_ok &= run_replication(args);
    }
    if !args.no_forward {
        all_ok &= crate::smr_check_forward::run(args, sizes(args));
    }
    Ok(all_ok)
}

/// The replication simulation and its planted bugs.
fn run_replication(args: &SmrCheckArgs) -> bool {
    let sizes = sizes(args);
    let stores: &[SimStore] = match args.store.as_str() {
        "mem" => &[SimStore::Mem],
        "pmem" => &[SimStore::Pmem],
        _ => &[SimStore::Mem, SimStore::Pmem],
    };
    let machines: &[Machine] = match args.machine.as_str() {
        "kv" => &[Machine::Kv],
        "redis" => &[Machine::Redis],
        _ => &[Machine::Kv, Machine::Redis],
    };
    println!("smr simulation: seeds {}..{} per cluster size and store; every fault on (loss, duplication, reordering, partitions, crashes in and between store writes; on pmem a crash leaves a crash image)", args.first, args.first + args.seeds);
    println!("{:<34} {:>6} {:>6} {:>9} {:>9} {:>8} {:>10} {:>8} {:>10} {:>7} {:>10} {:>7}  verdict", "configuration", "runs", "failed", "ops", "acked", "crashes", "partitions", "chunked", "snap-turns", "held", "sends held", "runs/s");
    let mut all_ok = true;
    let configs = machines.iter().flat_map(|m| stores.iter().flat_map(move |s| sizes.iter().map(move |n| (*m, *s, *n))));
    for (machine, store, n) in configs {
        let cfg = SimConfig { store, ..SimConfig::standard(n) };
        let bar = progress(args.seeds, &format!("{}, {n} replicas, {}", machine.name(), store_name(store)));
        let started = Instant::now();
        let mut t = Totals::default();
        for seed in args.first..args.first + args.seeds {
            let r = machine.simulate(seed, &cfg);
            t.runs += 1;
            t.ops += r.ops as u64;
            t.acknowledged += r.acknowledged as u64;
            t.crashes += r.crashes;
            t.chunked += r.chunked_messages;
            t.snapshot_turns += r.snapshot_turns;
            t.entries_held += r.entries_held;
            t.sends_held += r.sends_held;
            t.partitions += r.partitions;
            if !r.passed() {
                t.failed.push(r);
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        let runs_per_s = t.runs as f64 / started.elapsed().as_secs_f64().max(1e-9);
        let ok = t.failed.is_empty();
        all_ok &= ok;
        let name = format!("{}, {n} replicas, 4 clients, {}", machine.name(), store_name(store));
        println!("{name:<34} {:>6} {:>6} {:>9} {:>9} {:>8} {:>10} {:>8} {:>10} {:>7} {:>10} {runs_per_s:>7.1}  {}", t.runs, t.failed.len(), t.ops, t.acknowledged, t.crashes, t.partitions, t.chunked, t.snapshot_turns, t.entries_held, t.sends_held, if ok { "ok" } else { "FAILED" });
        for r in t.failed.iter().take(5) {
            println!("    seed {}: {}", r.seed, r.violations.join("; "));
            println!("    replay: pmwire check smr --machine {} --replicas {n} --store {} --first {} --seeds 1", machine.name(), store_name(store), r.seed);
        }
    }
    for &machine in machines {
        all_ok &= planted_caught(args, stores, machine);
    }
    all_ok
}

/// Runs every planted bug until a seed catches it; true if all were caught.
/// The replica's planted bugs run on the first store asked for; the
/// store's own planted bug needs the persistent store.
fn planted_caught(args: &SmrCheckArgs, stores: &[SimStore], machine: Machine) -> bool {
    let mut all_ok = true;
    let node_store = stores[0];
    let mut planted = vec![
        ("planted: ack before persist", SimConfig { planted: Faults { ack_before_persist: true, ..Faults::default() }, ..SimConfig::standard(3) }),
        ("planted: vote not persisted", SimConfig { planted: Faults { forget_vote: true, ..Faults::default() }, ..SimConfig::standard(3) }),
        ("planted: commit on a minority", SimConfig { planted: Faults { answer_before_commit: true, ..Faults::default() }, ..SimConfig::standard(3) }),
        ("planted: chunks joined unchecked", SimConfig { planted: Faults { unchecked_chunks: true, ..Faults::default() }, ..SimConfig::standard(3) }),
    ];
    for (_, cfg) in &mut planted {
        cfg.store = node_store;
    }
    if stores.contains(&SimStore::Pmem) {
        let store_faults = StoreFaults { unflushed_suffix_truncation: true, ..StoreFaults::default() };
        planted.push(("planted: truncation not persisted", SimConfig { planted_store: store_faults, ..SimConfig::pmem(3) }));
    }
    let mut planted: Vec<(&str, SimConfig, Machine)> = planted.into_iter().map(|(name, cfg)| (name, cfg, machine)).collect();
    if machine == Machine::Redis {
        planted.push(("planted: member's own randomness", SimConfig { store: node_store, ..SimConfig::standard(3) }, Machine::RedisLocalRandom));
        if stores.contains(&SimStore::Pmem) {
            planted.push(("planted: writes apart from applied index", SimConfig::pmem(3), Machine::RedisCommitEachWrite));
        }
    }
    for (name, cfg, machine) in planted {
        let found = (0..args.planted_seeds).map(|seed| machine.simulate(seed, &cfg)).find(|r| !r.passed());
        let name = format!("{}: {name}", machine.name());
        match found {
            Some(r) => println!("{name:<40} caught at seed {}: {}", r.seed, r.violations.first().map(|v| v.chars().take(100).collect::<String>()).unwrap_or_default()),
            None => {
                all_ok = false;
                println!("{name:<40} PLANTED BUG MISSED in {} seeds", args.planted_seeds);
            }
        }
    }
    all_ok
}
