//! Persistent log appends per second: pmwire-log's `AppendLog` with each
//! tail strategy, against PMDK's `pmemlog_append` (seed 000 §6.1, §6.4).
//!
//! Every variant appends the same payload bytes; logs of equal capacity
//! live side by side (the `AppendLog`s in the region, libpmemlog in a pool
//! file next to the region's, on the same tmpfs, with
//! `PMEM_IS_PMEM_FORCE=1`). A full log is emptied inside the timed loop,
//! as a real user would: `AppendLog::truncate` up to the next LSN,
//! `pmemlog_rewind` for PMDK. Variants are interleaved round by round;
//! the median round is reported.
//!
//! A round is timed on the measuring thread's CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`: user + system time, so page faults and the
//! stalls of every flush and drain count, time spent preempted does not)
//! as well as on the wall clock. On a shared machine another process's
//! time slice lands in whichever rounds it hits, whole: on this 2-core
//! guest it moved one quick run's log/floor ratio by up to 9% (docs/bench.md,
//! "Local log"). The rates come from the CPU clock; `wall_mops_per_s` is
//! the wall clock's median and `on_cpu_share` the CPU time over the wall
//! time of all the variant's rounds (1.0 on an idle machine).

use crate::kv::bound::on_thread;
use crate::local::Ctx;
use crate::measure::{median, round_order, AlignedBuf};
use crate::pmdk::{self, LogPool};
use crate::schema::{BenchResult, Skipped};
use pmem::{Media, Padding, Region};
use pmwire_log::{prefetch_entry, store_entry_nodrain, AppendError, AppendLog, LogConfig, TailStrategy, ENTRY_HEADER_BYTES};

/// The benchmark.
pub const LOG: &str = "log";
/// `TailStrategy::Naive`: payload persist, then an 8 B tail persist.
pub const TAIL_NAIVE: &str = "appendlog_naive";
/// `TailStrategy::Rotating` in the paper's shape (10 × 256 B).
pub const TAIL_ROTATING: &str = "appendlog_rotating_10x256";
/// `TailStrategy::SelfValidating`: one persist per append.
pub const TAIL_SELF_VALIDATING: &str = "appendlog_self_validating";
/// The naive tail with entries padded to 64 B lines (seed 004 H7).
pub const TAIL_NAIVE_PAD64: &str = "appendlog_naive_pad64";
/// The self-validating log with entries padded to 64 B lines.
pub const TAIL_SELF_VALIDATING_PAD64: &str = "appendlog_self_validating_pad64";
/// PMDK's libpmemlog.
pub const PMEMLOG: &str = "pmemlog_append";
/// No log: the bytes of one entry (header + payload), laid out as the
/// default log lays them out (padded to 64 B) and stored the way it stores
/// them (`store_entry_nodrain`, `prefetch_entry`), then one drain. The
/// floor of any log that needs one persist per append.
pub const PERSIST_FLOOR: &str = "persist_floor";

/// Variants per entry size: the `AppendLog`s, `pmemlog_append` and the floor.
pub(crate) const VARIANTS: usize = STRATEGIES.len() + 2;

/// The tail strategies and paddings measured, with their variant names.
const STRATEGIES: [(&str, TailStrategy, Padding); 5] = [
    (TAIL_NAIVE, TailStrategy::Naive, Padding::None),
    (TAIL_ROTATING, TailStrategy::ROTATING_PAPER, Padding::None),
    (TAIL_SELF_VALIDATING, TailStrategy::SelfValidating, Padding::None),
    (TAIL_NAIVE_PAD64, TailStrategy::Naive, Padding::Line),
    (TAIL_SELF_VALIDATING_PAD64, TailStrategy::SelfValidating, Padding::Line),
];

enum Variant<'a> {
    Append { name: &'static str, log: AppendLog },
    Pmemlog(LogPool<'a>),
    /// A ring of `capacity` bytes at `base`; `pos` is the next write.
    Floor { base: u64, capacity: u64, pos: u64 },
}

impl Variant<'_> {
    fn name(&self) -> &'static str {
        match self {
            Variant::Append { name, .. } => name,
            Variant::Pmemlog(_) => PMEMLOG,
            Variant::Floor { .. } => PERSIST_FLOOR,
        }
    }

    /// Appends `payload` `count` times, emptying the log when full.
    fn append(&mut self, region: &mut Region, payload: &[u8], count: u64) {
        match self {
            Variant::Append { log, .. } => {
                for _ in 0..count {
                    match log.append(region, payload) {
                        Ok(_) => {}
                        Err(AppendError::Full { .. }) => {
                            log.truncate(region, log.next_lsn()).expect("truncating to the tail");
                            log.append(region, payload).expect("an empty log takes an entry");
                        }
                        Err(e) => panic!("append of {} B: {e}", payload.len()),
                    }
                }
            }
            Variant::Pmemlog(pool) => {
                for _ in 0..count {
                    if !pool.append(payload) {
                        pool.rewind();
                        assert!(pool.append(payload), "pmemlog refused an entry after a rewind");
                    }
                }
            }
            Variant::Floor { base, capacity, pos } => {
                // The entry as the default log (entries padded to 64 B)
                // lays it out and writes it (the log's own store path and
                // prefetch), with a constant header: no checksum, no tail,
                // no bookkeeping.
                let size = Padding::Line.padded(ENTRY_HEADER_BYTES as usize + payload.len()) as u64;
                for _ in 0..count {
                    if *pos + size > *capacity {
                        *pos = 0;
                    }
                    store_entry_nodrain(region, *base + *pos, payload, || [0x5a; ENTRY_HEADER_BYTES as usize]);
                    let next = *pos + size;
                    if next + size <= *capacity {
                        prefetch_entry(region, *base + next, size);
                    }
                    region.drain();
                    *pos = next;
                }
            }
        }
    }
}

/// The `log` benchmark.
pub(crate) fn run_log(ctx: &mut Ctx<'_>) {
    ctx.progress.stage("log");
    let plan = ctx.plan;
    let mut variants = append_logs(ctx);
    let pmemlog_path = ctx.scratch_dir.join(format!("pmwire-bench-{}.pmemlog", std::process::id()));
    let pmemlog = pmdk::libpmemlog().and_then(|lib| lib.create(&pmemlog_path, plan.log_capacity_bytes));
    match pmemlog {
        Ok(pool) => variants.push(Variant::Pmemlog(pool)),
        Err(reason) => ctx.skipped.push(Skipped::new(LOG, PMEMLOG, &reason)),
    }
    if variants.is_empty() {
        return;
    }
    let largest = plan.log_sizes.iter().copied().max().unwrap();
    let src = AlignedBuf::new(largest);
    for &size in &plan.log_sizes {
        ctx.progress.stage(&format!("log {size} B"));
        let payload = &src.as_slice()[..size];
        let count = plan.log_appends as u64;
        let rounds = plan.log_rounds_at(size);
        let mut rates = vec![Vec::with_capacity(rounds); variants.len()];
        let mut wall_rates = vec![Vec::with_capacity(rounds); variants.len()];
        let mut spent = vec![(0.0, 0.0); variants.len()];
        for round in 0..plan.warmup_rounds + rounds {
            for i in round_order(round, variants.len()) {
                let ((), usage) = on_thread(|| variants[i].append(ctx.region, payload, count));
                if round >= plan.warmup_rounds {
                    assert!(usage.cpu_s > 0.0, "a round of {count} appends took no CPU time");
                    rates[i].push(count as f64 / usage.cpu_s / 1e6);
                    wall_rates[i].push(count as f64 / usage.wall_s / 1e6);
                    spent[i].0 += usage.cpu_s;
                    spent[i].1 += usage.wall_s;
                    ctx.progress.step();
                }
            }
        }
        for (i, variant) in variants.iter().enumerate() {
            let mops = median(&mut rates[i]);
            let (cpu_s, wall_s) = spent[i];
            ctx.results.push(
                BenchResult::new(LOG, variant.name())
                    .size(size as u64)
                    .metric("mops_per_s", mops)
                    .metric("gb_per_s", mops * 1e6 * size as f64 / 1e9)
                    .metric("ns_per_append", 1e3 / mops)
                    .metric("wall_mops_per_s", median(&mut wall_rates[i]))
                    .metric("on_cpu_share", (cpu_s / wall_s).min(1.0))
                    .param("capacity_bytes", plan.log_capacity_bytes)
                    .param("appends_per_round", count)
                    .param("rounds", rounds as u64)
                    .param("clock", "thread_cpu"),
            );
        }
    }
}

/// One `AppendLog` per tail strategy, side by side at the start of the
/// region (which the earlier benchmarks no longer need).
fn append_logs(ctx: &mut Ctx<'_>) -> Vec<Variant<'static>> {
    let capacity = ctx.plan.log_capacity_bytes;
    let stride = STRATEGIES
        .iter()
        .map(|(_, tail, padding)| AppendLog::required_size(&LogConfig::new(capacity, *tail).with_padding(*padding)))
        .max()
        .unwrap()
        .next_multiple_of(64 << 10);
    let mut variants = Vec::new();
    let floor_base = STRATEGIES.len() as u64 * stride;
    let floor_capacity = capacity.min(ctx.region.len().saturating_sub(floor_base));
    if floor_capacity >= 64 << 10 {
        variants.push(Variant::Floor { base: floor_base, capacity: floor_capacity, pos: 0 });
    } else {
        let why = format!("the region ({} B) has no room after the logs", ctx.region.len());
        ctx.skipped.push(Skipped::new(LOG, PERSIST_FLOOR, &why));
    }
    for (i, (name, tail, padding)) in STRATEGIES.into_iter().enumerate() {
        let base = i as u64 * stride;
        if base + stride > ctx.region.len() {
            let why = format!("the region ({} B) cannot hold {} logs of {capacity} B", ctx.region.len(), STRATEGIES.len());
            ctx.skipped.push(Skipped::new(LOG, name, &why));
            continue;
        }
        match AppendLog::create(ctx.region, base, LogConfig::new(capacity, tail).with_padding(padding)) {
            Ok(log) => variants.push(Variant::Append { name, log }),
            Err(e) => ctx.skipped.push(Skipped::new(LOG, name, &e.to_string())),
        }
    }
    variants
}
