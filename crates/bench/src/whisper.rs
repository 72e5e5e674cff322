//! The WHISPER-like part of `pmwire bench mirror` (seed 002 §7.2, Fig 5):
//! four applications written on the transaction API
//! (`pmwire_mirror::whisper`), each run with NO-SM and mirrored with
//! SM-RC, SM-OB and SM-DD over UCX tcp or sm:
//! - `hashmap`: transactions of 6 inserts or deletes on a persistent
//!   chained hash map (4096 keys, half present in the steady state; 6,
//!   so that a transaction has about the 10 epochs seed 002 reports for
//!   WHISPER's hashmap);
//! - `ctree`: transactions of 2 inserts or deletes on a crit-bit tree;
//! - `echo`: a master thread owns a hash map and applies, in one
//!   transaction, every update its two client threads queued (up to
//!   [`ECHO_BATCH`]); clients block when the queue is full, the master
//!   when it is empty;
//! - `ycsb`: transactions of 10 YCSB-A operations (half reads, half
//!   updates of a field and the record's version; 80 % on a fifth of the
//!   rows) on a table of records.
//!
//! Each runs a fixed number of operations per round; execution time and
//! throughput are normalised to NO-SM (for a fixed amount of work one is
//! the inverse of the other, as in the seed's Fig 5), and writes per
//! epoch and epochs per transaction are counted as each application ran
//! under NO-SM. Rounds interleave the strategies as the Transact part does;
//! a strategy's time is the median of its rounds'.

use std::sync::mpsc;
use std::time::Instant;

use anyhow::{Context, Result};
use pmwire_mirror::whisper::{transaction, Counts, CritBitTree, HashMap, Snapshot, Table, Value, VALUE_BYTES};
use pmwire_mirror::{Mirror, Strategy};
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;
use link::{LinkConfig, LinkTransport};
use transport::UcxTransport;

use crate::kv::placement::Placement;
use crate::measure::median;
use crate::mirror::{BackupThread, Primary};
use crate::remote::server::ucx_config;
use crate::schema::BenchResult;
use crate::{table, Headline};

/// The bench name in results (one per transport: `mirror_whisper_tcp`).
pub const BENCH: &str = "mirror_whisper";
/// Keys the hash maps and the tree draw from.
pub const KEYS: u64 = 4096;
/// The most client updates the echo master applies in one transaction.
pub const ECHO_BATCH: usize = 256;
/// Echo's client threads (2 cores: a master and two clients).
pub const ECHO_CLIENTS: u64 = 2;
const BUCKETS: u64 = 4096;
const CAPACITY: u64 = 2 * KEYS;
const MAP_BASE: u64 = 0;
const TREE_BASE: u64 = 1 << 20;
const ECHO_BASE: u64 = 3 << 20;
const TABLE_BASE: u64 = 4 << 20;
const ROWS: u64 = 10_000;
const FIELDS: u64 = 5;
const YCSB_OPS_PER_TX: u64 = 10;
const MIRRORED: [Strategy; 3] = [Strategy::SmRc, Strategy::SmOb, Strategy::SmDd];

/// A WHISPER-like application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Inserts and deletes on a persistent hash map.
    HashMap,
    /// Inserts and deletes on a crit-bit tree.
    CTree,
    /// A master applying its clients' updates.
    Echo,
    /// YCSB-A transactions on a table.
    Ycsb,
}

impl Workload {
    /// Every workload, in the order a round runs them.
    pub const ALL: [Workload; 4] = [Workload::HashMap, Workload::CTree, Workload::Echo, Workload::Ycsb];

    /// The name in results.
    pub fn name(self) -> &'static str {
        match self {
            Workload::HashMap => "hashmap",
            Workload::CTree => "ctree",
            Workload::Echo => "echo",
            Workload::Ycsb => "ycsb",
        }
    }

    /// Operations per round of one strategy.
    pub fn operations(self, quick: bool) -> u64 {
        let quick_ops = match self {
            Workload::HashMap | Workload::CTree => 3_000,
            Workload::Echo => 6_000,
            Workload::Ycsb => 5_000,
        };
        if quick {
            quick_ops
        } else {
            10 * quick_ops
        }
    }
}

/// Rounds of the WHISPER-like part.
pub fn rounds(quick: bool) -> u64 {
    if quick {
        3
    } else {
        5
    }
}

/// The structures of one heap.
#[derive(Clone, Copy)]
struct Layout {
    map: HashMap,
    tree: CritBitTree,
    echo: HashMap,
    table: Table,
}

/// Formats every structure, one transaction each, through `mirror`.
fn format(p: &mut Primary, mirror: &mut Mirror<LinkTransport<UcxTransport>>) -> Result<Layout> {
    let mut c = Counts::default();
    let (heap, region) = (&mut p.heap, &mut p.region);
    let map = transaction(heap, region, &mut *mirror, &mut c, |o| HashMap::format(o, MAP_BASE, BUCKETS, CAPACITY))?;
    let tree = transaction(heap, region, &mut *mirror, &mut c, |o| CritBitTree::format(o, TREE_BASE, CAPACITY))?;
    let echo = transaction(heap, region, &mut *mirror, &mut c, |o| HashMap::format(o, ECHO_BASE, BUCKETS, CAPACITY))?;
    let table = transaction(heap, region, &mut *mirror, &mut c, |o| Table::format(o, TABLE_BASE, ROWS, FIELDS))?;
    assert!(TABLE_BASE + Table::required_bytes(ROWS, FIELDS) <= p.heap.data_bytes(), "the table fits");
    Ok(Layout { map, tree, echo, table })
}

/// What one run of a workload did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Run {
    /// Wall time, ns.
    pub ns: f64,
    /// Operations (updates, reads, inserts, deletes, client requests).
    pub operations: u64,
    /// Transactions, epochs and writes.
    pub counts: Counts,
}

fn key(rng: &mut SplitMix64) -> u64 {
    // Spread over all 64 bits, so the tree's critical bits vary.
    (rng.next_u64() % KEYS).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn value(rng: &mut SplitMix64) -> Value {
    let mut v = [0u8; VALUE_BYTES];
    v[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
    v
}

/// Runs `operations` operations of `workload` (drawn from `seed`).
fn run(
    workload: Workload,
    p: &mut Primary,
    layout: Layout,
    mirror: &mut Mirror<LinkTransport<UcxTransport>>,
    operations: u64,
    seed: u64,
) -> Result<Run> {
    let per_tx = match workload {
        Workload::HashMap => 6,
        Workload::CTree => 2,
        Workload::Ycsb => YCSB_OPS_PER_TX,
        Workload::Echo => return echo(p, layout, mirror, operations, seed),
    };
    let mut rng = SplitMix64::seed_from_u64(seed);
    let mut counts = Counts::default();
    let start = Instant::now();
    let (heap, region) = (&mut p.heap, &mut p.region);
    let mut done = 0;
    while done < operations {
        let n = per_tx.min(operations - done);
        transaction(heap, region, &mut *mirror, &mut counts, |o| {
            for _ in 0..n {
                let (k, insert) = (key(&mut rng), rng.next_u32() % 2 == 0);
                match workload {
                    Workload::HashMap if insert => drop(layout.map.insert(o, k, &value(&mut rng))?),
                    Workload::HashMap => drop(layout.map.remove(o, k)?),
                    Workload::CTree if insert => drop(layout.tree.insert(o, k, &value(&mut rng))?),
                    Workload::CTree => drop(layout.tree.remove(o, k)?),
                    Workload::Ycsb => ycsb_op(o, layout.table, &mut rng)?,
                    Workload::Echo => unreachable!("echo has its own loop"),
                }
            }
            Ok(())
        })?;
        done += n;
    }
    Ok(Run { ns: start.elapsed().as_nanos() as f64, operations, counts })
}

/// One YCSB-A operation: a read or an update of a random field, 80 % on
/// the first fifth of the rows.
fn ycsb_op<M: pmem::Media, S: pmwire_mirror::EpochSink>(
    o: &mut pmwire_mirror::whisper::Ops<'_, '_, M, S>,
    table: Table,
    rng: &mut SplitMix64,
) -> Result<(), pmwire_mirror::whisper::WhisperError> {
    let hot = rng.next_u32() % 10 < 8;
    let row = rng.next_u64() % if hot { ROWS / 5 } else { ROWS };
    let field = 1 + rng.next_u64() % (FIELDS - 1);
    let mut bytes = [0u8; 64];
    if rng.next_u32() % 2 == 0 {
        table.read(o, row, field, &mut bytes)
    } else {
        bytes[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
        table.update(o, row, field, &bytes)
    }
}

/// Echo: [`ECHO_CLIENTS`] client threads queue `operations` updates in
/// all; this thread, the master, applies what is queued (up to
/// [`ECHO_BATCH`]) in one transaction, blocking when the queue is empty.
fn echo(p: &mut Primary, layout: Layout, mirror: &mut Mirror<LinkTransport<UcxTransport>>, operations: u64, seed: u64) -> Result<Run> {
    let (to_master, requests) = mpsc::sync_channel::<(u64, Value)>(ECHO_BATCH);
    let mut counts = Counts::default();
    let mut applied = 0u64;
    let start = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        // Owned here, so a failing master drops it and unblocks its clients.
        let requests = requests;
        for c in 0..ECHO_CLIENTS {
            let to_master = to_master.clone();
            let share = operations / ECHO_CLIENTS + u64::from(c < operations % ECHO_CLIENTS);
            s.spawn(move || {
                let mut rng = SplitMix64::seed_from_u64(seed ^ (c + 1) << 40);
                for _ in 0..share {
                    if to_master.send((key(&mut rng), value(&mut rng))).is_err() {
                        return; // the master failed
                    }
                }
            });
        }
        drop(to_master);
        let mut batch = Vec::with_capacity(ECHO_BATCH);
        while let Ok(first) = requests.recv() {
            batch.clear();
            batch.push(first);
            while batch.len() < ECHO_BATCH {
                let Ok(next) = requests.try_recv() else { break };
                batch.push(next);
            }
            transaction(&mut p.heap, &mut p.region, &mut *mirror, &mut counts, |o| {
                batch.iter().try_for_each(|(k, v)| layout.echo.insert(o, *k, v).map(drop))
            })?;
            applied += batch.len() as u64;
        }
        Ok(())
    })?;
    assert_eq!(applied, operations, "the master applied every request");
    Ok(Run { ns: start.elapsed().as_nanos() as f64, operations, counts })
}

/// The model's slowdown of `strategy` for transactions shaped as `counts`
/// (its epochs per transaction; its writes per epoch as a mix of the two
/// nearest whole numbers), with seed 002's WHISPER application work per
/// write (`pmwire model mirror`'s `whisper_like`).
fn model_slowdown(strategy: Strategy, counts: &Counts) -> f64 {
    use pmwire_model::mirror::{slowdown, Shape, Strategy as Modelled};
    let modelled = match strategy {
        Strategy::NoSm => Modelled::NoSm,
        Strategy::SmRc => Modelled::SmRc,
        Strategy::SmOb => Modelled::SmOb,
        Strategy::SmDd => Modelled::SmDd,
    };
    let p = pmwire_model::params::Params::published();
    let epochs = (counts.epochs_per_transaction().round() as usize).clamp(1, 256);
    let per_epoch = counts.writes_per_epoch().clamp(1.0, 8.0);
    let (low, share_high) = (per_epoch.floor(), per_epoch - per_epoch.floor());
    let mut sum = 0.0;
    for (writes, weight) in [(low, 1.0 - share_high), (low + 1.0, share_high)] {
        if weight > 0.0 && writes <= 8.0 {
            let shape = Shape { epochs, writes: writes as usize, app_ns: p.whisper.app_ns_per_persistent_write };
            sum += weight * slowdown(&p, modelled, shape);
        }
    }
    sum
}

fn key_of(strategy: Strategy) -> String {
    strategy.name().to_ascii_lowercase().replace('-', "_")
}

/// Runs the WHISPER-like part over `tls`; its results and headline.
pub(crate) fn run_transport(
    tls: &str,
    quick: bool,
    placement: &Placement,
    bar: &indicatif::ProgressBar,
    other_cpu_share: impl FnOnce() -> Result<f64>,
) -> Result<(Vec<BenchResult>, Vec<Headline>)> {
    let backup = BackupThread::start("mirror-whisper-backup", tls, placement)
        .with_context(|| format!("whisper backup over {tls}"))?;
    let mut local = Primary::create(&format!("mirror-whisper-local-{tls}.pool"))?;
    let mut mirrored = Primary::create(&format!("mirror-whisper-primary-{tls}.pool"))?;
    let (mut local_layout, mut mirrored_layout) = (None, None);
    // runs[workload][strategy]: one per round.
    let mut runs: Vec<Vec<Vec<Run>>> = vec![vec![Vec::new(); 4]; Workload::ALL.len()];
    let rounds = rounds(quick);
    for round in 0..rounds {
        for (s, strategy) in Strategy::ALL.into_iter().enumerate() {
            bar.set_message(format!("{tls} whisper {strategy} (round {}/{rounds})", round + 1));
            let (target, layout) = if strategy == Strategy::NoSm {
                (&mut local, &mut local_layout)
            } else {
                (&mut mirrored, &mut mirrored_layout)
            };
            let t = LinkTransport::real(UcxTransport::new(&ucx_config(tls, true, false)?)?, backup.secret.clone(), LinkConfig::mirror_primary());
            let mut mirror = Mirror::open(&target.heap, &target.region, t, &backup.addr, strategy)
                .with_context(|| format!("{strategy} over {tls}"))?;
            let layout = match *layout {
                Some(l) => l,
                None => *layout.insert(format(target, &mut mirror)?),
            };
            for (w, workload) in Workload::ALL.into_iter().enumerate() {
                let seed = 0x7768_6973 ^ ((w as u64) << 8) ^ (round << 32);
                runs[w][s].push(run(workload, target, layout, &mut mirror, workload.operations(quick), seed)?);
            }
            bar.inc(1);
        }
    }
    check_layouts(&local, &mirrored)?;
    let other = other_cpu_share()?;
    let results = results(tls, quick, &mut runs, other);
    let headline = average_headline(tls, &results);
    Ok((results, vec![headline]))
}

/// After the runs, each heap's structures open and pass their invariants.
fn check_layouts(local: &Primary, mirrored: &Primary) -> Result<()> {
    for p in [local, mirrored] {
        let view = Snapshot { heap: &p.heap, media: &p.region };
        HashMap::open(&view, MAP_BASE)?.entries(&view)?;
        CritBitTree::open(&view, TREE_BASE)?.entries(&view)?;
        HashMap::open(&view, ECHO_BASE)?.entries(&view)?;
        Table::open(&view, TABLE_BASE)?;
    }
    Ok(())
}

fn results(tls: &str, quick: bool, runs: &mut [Vec<Vec<Run>>], other: f64) -> Vec<BenchResult> {
    let mut out = Vec::new();
    let mut sums = [0.0f64; 3];
    let mut model_sums = [0.0f64; 3];
    for (w, workload) in Workload::ALL.into_iter().enumerate() {
        let times: Vec<f64> = runs[w].iter().map(|r| median(&mut r.iter().map(|r| r.ns).collect::<Vec<_>>())).collect();
        let no_sm = runs[w][0].iter().fold(Counts::default(), |a, r| Counts {
            transactions: a.transactions + r.counts.transactions,
            epochs: a.epochs + r.counts.epochs,
            writes: a.writes + r.counts.writes,
        });
        let operations = workload.operations(quick);
        let mut r = BenchResult::new(&format!("{BENCH}_{tls}"), workload.name())
            .param("transport", tls)
            .param("operations_per_round", operations)
            .metric("no_sm_ms", times[0] / 1e6)
            .metric("no_sm_ops_per_s", operations as f64 / (times[0] / 1e9))
            .metric("writes_per_epoch", no_sm.writes_per_epoch())
            .metric("epochs_per_tx", no_sm.epochs_per_transaction())
            .metric("other_processes_cpu_share", other);
        for (i, strategy) in MIRRORED.into_iter().enumerate() {
            let key = key_of(strategy);
            let time_x = times[i + 1] / times[0];
            let model = model_slowdown(strategy, &no_sm);
            sums[i] += time_x;
            model_sums[i] += model;
            r = r.metric(&format!("{key}_time_x"), time_x);
            r = r.metric(&format!("{key}_throughput_x"), 1.0 / time_x);
            r = r.metric(&format!("model_{key}_time_x"), model);
        }
        out.push(r);
    }
    let n = Workload::ALL.len() as f64;
    let mut avg = BenchResult::new(&format!("{BENCH}_{tls}"), "average")
        .param("transport", tls)
        .metric("other_processes_cpu_share", other);
    for (i, strategy) in MIRRORED.into_iter().enumerate() {
        let key = key_of(strategy);
        avg = avg.metric(&format!("{key}_time_x"), sums[i] / n);
        avg = avg.metric(&format!("{key}_throughput_x"), n / sums[i]);
        avg = avg.metric(&format!("model_{key}_time_x"), model_sums[i] / n);
    }
    out.push(avg);
    out
}

/// SM-RC / SM-DD in execution time on the WHISPER-like average (seed 002: 2.9x).
fn average_headline(tls: &str, results: &[BenchResult]) -> Headline {
    let avg = results.iter().find(|r| r.variant == "average");
    let value = avg.and_then(|a| Some(a.get("sm_rc_time_x")? / a.get("sm_dd_time_x")?));
    crate::remote::common::ratio(
        &format!("{tls}: WHISPER-like average SM-RC / SM-DD execution time (seed 002: 2.9x)"),
        value,
        1.5,
        true,
        "SM-DD, same run",
    )
}

/// The seed's Fig 5 as text.
pub(crate) fn table(results: &[BenchResult]) -> String {
    let mut rows = vec![[
        "transport",
        "workload",
        "w/epoch",
        "epochs/tx",
        "NO-SM ms",
        "SM-RC",
        "SM-OB",
        "SM-DD",
        "model: SM-RC",
        "SM-OB",
        "SM-DD",
    ]
    .map(String::from)
    .to_vec()];
    for r in results.iter().filter(|r| r.bench.starts_with(BENCH)) {
        let x = |k: &str| r.get(k).map_or("-".to_string(), |v| format!("{}x", table::num(v)));
        let n = |k: &str| r.get(k).map_or("-".to_string(), table::num);
        rows.push(vec![
            r.params.get("transport").and_then(|t| t.as_str()).unwrap_or("?").to_string(),
            r.variant.clone(),
            n("writes_per_epoch"),
            n("epochs_per_tx"),
            n("no_sm_ms"),
            x("sm_rc_time_x"),
            x("sm_ob_time_x"),
            x("sm_dd_time_x"),
            x("model_sm_rc_time_x"),
            x("model_sm_ob_time_x"),
            x("model_sm_dd_time_x"),
        ]);
    }
    format!(
        "\nWHISPER-like execution time over NO-SM (seed 002 Fig 5; throughput is its inverse), median of rounds; model: seed 002's RDMA testbed\n{}",
        table::render(&rows)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_predicts_for_whisper_shapes() {
        let shape = Counts { transactions: 10, epochs: 100, writes: 140 };
        let rc = model_slowdown(Strategy::SmRc, &shape);
        let dd = model_slowdown(Strategy::SmDd, &shape);
        assert!(rc > dd, "SM-RC {rc} vs SM-DD {dd}");
        assert!(dd > 1.0, "mirroring costs something: {dd}");
    }

    /// The suite writes its JSON: one result per workload and transport
    /// plus the average, each with every strategy's normalised time, the
    /// counts, and the headline.
    #[test]
    fn the_whisper_part_writes_its_json() {
        let dir = tempfile::tempdir().unwrap();
        let options = crate::mirror::MirrorOptions {
            quick: true,
            transports: vec!["tcp".to_string()],
            out_dir: dir.path().to_path_buf(),
            only: Some(crate::mirror::Part::Whisper),
        };
        let report = crate::mirror::run(&options).unwrap();
        let file: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&report.json_path).unwrap()).unwrap();
        let results = file["results"].as_array().unwrap();
        let variants: Vec<&str> = results.iter().map(|r| r["variant"].as_str().unwrap()).collect();
        assert_eq!(variants, ["hashmap", "ctree", "echo", "ycsb", "average"]);
        for r in results {
            assert_eq!(r["bench"], "mirror_whisper_tcp");
            for key in ["sm_rc_time_x", "sm_ob_time_x", "sm_dd_time_x", "model_sm_dd_time_x"] {
                let v = r[key].as_f64().unwrap_or_else(|| panic!("{key} in {r}"));
                assert!(v.is_finite() && v > 0.0, "{key} = {v}");
            }
        }
        for r in &results[..4] {
            assert!(r["writes_per_epoch"].as_f64().unwrap() >= 1.0, "{r}");
            assert!(r["epochs_per_tx"].as_f64().unwrap() >= 1.0, "{r}");
        }
        assert_eq!(file["parameters"]["command"], "pmwire bench mirror --quick --only whisper");
        assert_eq!(report.headlines.len(), 1, "{:?}", report.headlines);
        assert!(report.headlines[0].name.contains("WHISPER-like average SM-RC / SM-DD"));
    }

    #[test]
    fn the_structures_fit_the_heap_without_overlap() {
        assert!(MAP_BASE + HashMap::required_bytes(BUCKETS, CAPACITY) <= TREE_BASE);
        assert!(TREE_BASE + CritBitTree::required_bytes(CAPACITY) <= ECHO_BASE);
        assert!(ECHO_BASE + HashMap::required_bytes(BUCKETS, CAPACITY) <= TABLE_BASE);
        assert!(TABLE_BASE + Table::required_bytes(ROWS, FIELDS) <= crate::mirror::DATA_BYTES);
    }
}
