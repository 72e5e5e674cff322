//! Small persists: latency of one 8 B store + flush + fence, and update
//! rates of the persistent counters and the register (seed 000 §6).
//!
//! `persist_latency`: `same_line` persists the same 8 B word again and
//! again; `rotate_NxS` persists word `i % N` of `N` words `S` bytes apart.
//! Each round first times a batch (no clock per operation: `mops_per_s`),
//! then times every operation alone for the percentiles
//! (`latency_ns_p50`, `_p99`, `_p999`), which therefore include one
//! `Instant` pair; that cost is recorded as the `timer_overhead_ns`
//! parameter. Variants are interleaved round by round.
//!
//! `counter`: updates per second of `pmem::NaiveCounter` (`naive`),
//! `pmem::RotatingCounter` (`rotating_NxS`) and `pmem::RotatingRegister`
//! (`register_NxS`). On Optane, rotation spared the DIMM's repeated-line
//! penalty (7.6× in seed 000 §6.2); on DRAM-backed emulation there may be
//! no such penalty. Controls `naive_at_1..7` run the naive counter on
//! other lines: on this kind of machine a single line's persist rate
//! differs by up to 1.5× with where the line lives (the LLC slice it
//! hashes to, most likely), which a rotation over many lines averages
//! out. The suite reports what it measures, controls included.

use crate::local::Ctx;
use crate::measure::{median, percentile, round_order, timer_overhead_ns, Spread};
use crate::schema::BenchResult;
use pmem::{Media, NaiveCounter, Region, RotatingCounter, RotatingRegister, Rotation};
use std::time::Instant;

/// The latency benchmark.
pub const LATENCY: &str = "persist_latency";
/// The counter benchmark.
pub const COUNTER: &str = "counter";
/// The naive counter's variant name.
pub const NAIVE: &str = "naive";
/// One word persisted again and again.
pub const SAME_LINE: &str = "same_line";
/// Prefix of the control variants: a `NaiveCounter` on another line.
pub const NAIVE_AT: &str = "naive_at_";
/// How many other lines the naive counter is also measured on.
pub const NAIVE_CONTROLS: usize = 7;

/// Block counts swept (seed 000 §6.2 used 10; public code uses 16).
pub const BLOCKS: [u32; 6] = [1, 2, 4, 8, 10, 16];
/// Strides swept: a cache line and an XPLine.
pub const STRIDES: [u32; 2] = [64, 256];

/// Where the structures live: each variant gets its own 8 KiB slot here.
const AREA: u64 = 1 << 20;
const SLOT: u64 = 8 << 10;

fn slot(index: usize) -> u64 {
    AREA + index as u64 * SLOT
}

/// `rotating_{blocks}x{stride}` and friends.
pub fn shape_name(prefix: &str, blocks: u32, stride: u32) -> String {
    format!("{prefix}_{blocks}x{stride}")
}

/// Persists `count` words at `base + (i % blocks) * stride`.
#[inline(always)]
fn persist_loop(region: &mut Region, base: u64, blocks: u64, stride: u64, count: u64, seq: &mut u64) {
    let mut index = 0;
    for _ in 0..count {
        *seq += 1;
        region.persist_u64(base + index * stride, *seq);
        index += 1;
        if index == blocks {
            index = 0;
        }
    }
}

/// As `persist_loop`, timing each persist into `samples`.
fn persist_timed(region: &mut Region, base: u64, blocks: u64, stride: u64, samples: &mut Vec<u64>, seq: &mut u64) {
    let mut index = 0;
    for _ in 0..samples.capacity() - samples.len() {
        *seq += 1;
        let start = Instant::now();
        region.persist_u64(base + index * stride, *seq);
        samples.push(start.elapsed().as_nanos() as u64);
        index += 1;
        if index == blocks {
            index = 0;
        }
    }
}

/// The `persist_latency` benchmark.
pub(crate) fn run_latency(ctx: &mut Ctx<'_>) {
    ctx.progress.stage("persist latency");
    let plan = ctx.plan;
    let mut shapes = vec![(SAME_LINE.to_string(), 1u32, 8u32)];
    for stride in STRIDES {
        for blocks in BLOCKS.into_iter().filter(|&b| b > 1) {
            shapes.push((shape_name("rotate", blocks, stride), blocks, stride));
        }
    }
    let overhead = timer_overhead_ns();
    let per_round = plan.latency_samples.div_ceil(plan.latency_rounds) as u64;
    let mut samples: Vec<Vec<u64>> = shapes.iter().map(|_| Vec::with_capacity(plan.latency_samples)).collect();
    let mut rates: Vec<Vec<f64>> = shapes.iter().map(|_| Vec::with_capacity(plan.latency_rounds)).collect();
    let mut scratch = Vec::with_capacity(per_round as usize);
    let mut seq = 0u64;
    for round in 0..plan.warmup_rounds + plan.latency_rounds {
        for i in round_order(round, shapes.len()) {
            let (_, blocks, stride) = shapes[i];
            let base = slot(i);
            let start = Instant::now();
            persist_loop(ctx.region, base, blocks as u64, stride as u64, per_round, &mut seq);
            let secs = start.elapsed().as_secs_f64();
            scratch.clear();
            persist_timed(ctx.region, base, blocks as u64, stride as u64, &mut scratch, &mut seq);
            if round >= plan.warmup_rounds {
                rates[i].push(per_round as f64 / secs / 1e6);
                samples[i].extend_from_slice(&scratch);
                ctx.progress.step();
            }
        }
    }
    for (i, (name, blocks, stride)) in shapes.iter().enumerate() {
        let sorted = &mut samples[i];
        sorted.sort_unstable();
        let mops = median(&mut rates[i]);
        ctx.results.push(
            BenchResult::new(LATENCY, name)
                .metric("latency_ns_p50", percentile(sorted, 50.0) as f64)
                .metric("latency_ns_p99", percentile(sorted, 99.0) as f64)
                .metric("latency_ns_p999", percentile(sorted, 99.9) as f64)
                .metric("mops_per_s", mops)
                .metric("ns_per_op", 1e3 / mops)
                .param("blocks", *blocks)
                .param("stride_bytes", *stride)
                .param("timer_overhead_ns", overhead)
                .param("samples", sorted.len()),
        );
    }
}

enum Structure {
    Naive(NaiveCounter),
    Rotating(RotatingCounter),
    Register(RotatingRegister),
}

impl Structure {
    fn get(&self) -> u64 {
        match self {
            Structure::Naive(c) => c.get(),
            Structure::Rotating(c) => c.get(),
            Structure::Register(r) => r.get(),
        }
    }

    #[inline(always)]
    fn run(&mut self, region: &mut Region, updates: u64) {
        match self {
            Structure::Naive(c) => {
                for _ in 0..updates {
                    c.add(region, 1);
                }
            }
            Structure::Rotating(c) => {
                for _ in 0..updates {
                    c.add(region, 1);
                }
            }
            Structure::Register(r) => {
                for i in 0..updates {
                    // Arbitrary values, up and down: what a register is for.
                    r.set(region, r.get() ^ (i | 1));
                }
            }
        }
    }
}

/// The `counter` benchmark.
pub(crate) fn run_counters(ctx: &mut Ctx<'_>) {
    ctx.progress.stage("counters");
    let plan = ctx.plan;
    let mut variants: Vec<(String, Structure, u32, u32)> = Vec::new();
    let naive = NaiveCounter::create(ctx.region, slot(0));
    variants.push((NAIVE.to_string(), Structure::Naive(naive), 1, 8));
    // Controls: the same naive counter on other lines (other pages). On a
    // mesh CPU a line's persist cost depends on where it lives; a rotation
    // "effect" smaller than this spread is placement, not rotation.
    for k in 1..=NAIVE_CONTROLS {
        let counter = NaiveCounter::create(ctx.region, slot(variants.len()));
        variants.push((format!("{NAIVE_AT}{k}"), Structure::Naive(counter), 1, 8));
    }
    for stride in STRIDES {
        for blocks in BLOCKS {
            let rotation = Rotation::new(slot(variants.len()), blocks, stride);
            let counter = RotatingCounter::create(ctx.region, rotation);
            variants.push((shape_name("rotating", blocks, stride), Structure::Rotating(counter), blocks, stride));
        }
    }
    for stride in STRIDES {
        for blocks in BLOCKS {
            let rotation = Rotation::new(slot(variants.len()), blocks, stride);
            let register = RotatingRegister::create(ctx.region, rotation);
            variants.push((shape_name("register", blocks, stride), Structure::Register(register), blocks, stride));
        }
    }
    let updates = plan.counter_updates as u64;
    let mut rates: Vec<Vec<f64>> = variants.iter().map(|_| Vec::with_capacity(plan.counter_rounds)).collect();
    for round in 0..plan.warmup_rounds + plan.counter_rounds {
        for i in round_order(round, variants.len()) {
            let start = Instant::now();
            variants[i].1.run(ctx.region, updates);
            let secs = start.elapsed().as_secs_f64();
            if round >= plan.warmup_rounds {
                rates[i].push(updates as f64 / secs / 1e6);
                ctx.progress.step();
            }
        }
    }
    for (i, (name, _, blocks, stride)) in variants.iter().enumerate() {
        let spread = Spread::of(&mut rates[i]);
        let mops = spread.median;
        ctx.results.push(
            BenchResult::new(COUNTER, name)
                .metric("mops_per_s", mops)
                .metric("mops_per_s_min", spread.min)
                .metric("mops_per_s_max", spread.max)
                .metric("ns_per_update", 1e3 / mops)
                .param("mops_per_s_q1", spread.q1)
                .param("mops_per_s_q3", spread.q3)
                .param("blocks", *blocks)
                .param("stride_bytes", *stride)
                .param("updates_per_round", updates),
        );
    }
    verify_counters(ctx.region, &variants);
}

/// Recovers every structure from the region and checks it against the
/// in-memory value: what was measured were correct persists.
fn verify_counters(region: &Region, variants: &[(String, Structure, u32, u32)]) {
    for (index, (name, structure, blocks, stride)) in variants.iter().enumerate() {
        let rotation = || Rotation::new(slot(index), *blocks, *stride);
        let recovered = match structure {
            Structure::Naive(_) => NaiveCounter::recover(region, slot(index)).get(),
            Structure::Rotating(_) => RotatingCounter::recover(region, rotation()).get(),
            Structure::Register(_) => RotatingRegister::recover(region, rotation()).get(),
        };
        assert_eq!(recovered, structure.get(), "{name} recovered a different value");
    }
}
