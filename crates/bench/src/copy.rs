//! Persistent copy bandwidth (seed 004 §4.2 H4) and the non-temporal
//! threshold sweep.
//!
//! Every variant copies the same 4096-aligned DRAM source to successive
//! offsets of the region, continuing one cursor that sweeps the whole
//! region, so each copy lands on lines that were last written a full sweep
//! (≥ 1 GiB by default) ago: the destination is never cache-warm. Variants
//! are interleaved: in round `r` they run in the order rotated by `r`, so
//! no variant always follows the one whose dirty lines it must evict. The
//! reported rate is the median of the rounds; min and max are kept.
//!
//! Variants of `copy`:
//! - `memcpy`: ordinary stores, no flush (volatile; the ceiling).
//! - `memcpy_clwb_sfence`: `Region::write` then `Region::persist`.
//! - `pmwire_nt_persist`: `Media::memcpy_persist` on the region (ours).
//! - `pmdk_memcpy_persist`: libpmem's `pmem_memcpy_persist`, same mapping.
//!
//! `nt_threshold` compares `write_nt` + drain with `write` + flush + drain
//! from 64 B to 2 KiB, each copy starting on a cache line; `nt_crossover`
//! records the smallest size from which non-temporal stores win at every
//! larger size, next to PMDK's fixed 256 B.

use crate::local::Ctx;
use crate::measure::{round_order, AlignedBuf, Spread};
use crate::pmdk::{self, Libpmem};
use crate::schema::{BenchResult, Skipped};
use pmem::{Media, Region};
use std::time::Instant;

/// Benchmark names.
pub const COPY: &str = "copy";
/// The threshold sweep.
pub const NT_THRESHOLD_BENCH: &str = "nt_threshold";
/// The measured crossover next to PMDK's.
pub const NT_CROSSOVER: &str = "nt_crossover";

/// Variant names.
pub const MEMCPY: &str = "memcpy";
/// Ordinary stores + clwb + sfence.
pub const MEMCPY_CLWB: &str = "memcpy_clwb_sfence";
/// Our persistent copy.
pub const OURS: &str = "pmwire_nt_persist";
/// PMDK's persistent copy.
pub const PMDK: &str = "pmdk_memcpy_persist";
/// Non-temporal stores + drain, whatever the size.
pub const NT: &str = "nt_store_sfence";
/// Ordinary stores + clwb + sfence (threshold sweep).
pub const STORE: &str = "store_clwb_sfence";

#[derive(Clone, Copy)]
enum Variant {
    Memcpy,
    MemcpyClwb,
    Ours,
    Pmdk(&'static Libpmem),
    Nt,
    Store,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Memcpy => MEMCPY,
            Variant::MemcpyClwb => MEMCPY_CLWB,
            Variant::Ours => OURS,
            Variant::Pmdk(_) => PMDK,
            Variant::Nt => NT,
            Variant::Store => STORE,
        }
    }
}

/// Calls `f` at `count` successive offsets `stride` apart from `offset`,
/// wrapping to 0 before running past `len`. Returns the next offset.
#[inline(always)]
fn sweep(len: u64, stride: u64, count: u64, mut offset: u64, mut f: impl FnMut(u64)) -> u64 {
    for _ in 0..count {
        if offset + stride > len {
            offset = 0;
        }
        f(offset);
        offset += stride;
    }
    offset
}

/// Copies `src` `count` times, `stride` apart, from `offset`; returns the next offset.
fn run_variant(region: &mut Region, variant: Variant, src: &[u8], stride: u64, count: u64, offset: u64) -> u64 {
    let len = region.len();
    match variant {
        Variant::Memcpy => sweep(len, stride, count, offset, |at| region.write(at, src)),
        Variant::MemcpyClwb | Variant::Store => sweep(len, stride, count, offset, |at| {
            region.write(at, src);
            region.persist(at, src.len() as u64);
        }),
        Variant::Ours => sweep(len, stride, count, offset, |at| region.memcpy_persist(at, src)),
        Variant::Nt => sweep(len, stride, count, offset, |at| {
            region.write_nt(at, src);
            region.drain();
        }),
        Variant::Pmdk(lib) => {
            let base = region.as_ptr();
            sweep(len, stride, count, offset, |at| {
                // SAFETY: sweep keeps [at, at + stride) inside the region and
                // src.len() <= stride; src is a separate heap buffer.
                unsafe { lib.memcpy_persist(base.add(at as usize), src.as_ptr(), src.len()) }
            })
        }
    }
}

/// Runs `variants` on one size for the plan's rounds; returns the GB/s
/// spread and ns per copy (median) of each.
fn measure_size(
    ctx: &mut Ctx<'_>,
    variants: &[Variant],
    src: &[u8],
    stride: u64,
    window: u64,
    rounds: usize,
) -> Vec<(Spread, f64)> {
    let count = (window / stride).max(1);
    let bytes = count * src.len() as u64;
    let mut rates = vec![Vec::with_capacity(rounds); variants.len()];
    let mut ns_per_op = vec![Vec::with_capacity(rounds); variants.len()];
    for round in 0..ctx.plan.warmup_rounds + rounds {
        for i in round_order(round, variants.len()) {
            let start = Instant::now();
            ctx.cursor = run_variant(ctx.region, variants[i], src, stride, count, ctx.cursor);
            let secs = start.elapsed().as_secs_f64();
            if round >= ctx.plan.warmup_rounds {
                rates[i].push(bytes as f64 / secs / 1e9);
                ns_per_op[i].push(secs * 1e9 / count as f64);
                ctx.progress.step();
            }
        }
    }
    rates
        .iter_mut()
        .zip(ns_per_op.iter_mut())
        .map(|(r, n)| (Spread::of(r), crate::measure::median(n)))
        .collect()
}

/// libpmem if it loaded and honours the forced flag on this region.
fn pmdk_peer(region: &Region) -> Result<&'static Libpmem, String> {
    let lib = pmdk::libpmem()?;
    if !lib.is_pmem(region.as_ptr(), region.len() as usize) {
        return Err(format!("{}=1 was not honoured: pmem_is_pmem() returned 0", pmdk::FORCE_VAR));
    }
    Ok(lib)
}

/// The `copy` benchmark.
pub(crate) fn run_copy(ctx: &mut Ctx<'_>) {
    ctx.progress.stage("copy");
    let mut variants = vec![Variant::Memcpy, Variant::MemcpyClwb, Variant::Ours];
    match pmdk_peer(ctx.region) {
        Ok(lib) => variants.push(Variant::Pmdk(lib)),
        Err(reason) => ctx.skipped.push(Skipped::new(COPY, PMDK, &reason)),
    }
    let plan = ctx.plan;
    let largest = plan.copy_sizes.iter().copied().max().unwrap();
    let src = AlignedBuf::new(largest);
    let window = plan.copy_window_bytes.min(ctx.region.len());
    for &size in &plan.copy_sizes {
        ctx.progress.stage(&format!("copy {size} B"));
        let spreads = measure_size(ctx, &variants, &src.as_slice()[..size], size as u64, window, plan.copy_rounds);
        for (variant, (spread, ns)) in variants.iter().zip(spreads) {
            ctx.results.push(
                BenchResult::new(COPY, variant.name())
                    .size(size as u64)
                    .metric("gb_per_s", spread.median)
                    .metric("gb_per_s_min", spread.min)
                    .metric("gb_per_s_max", spread.max)
                    .metric("ns_per_copy", ns)
                    .param("window_bytes", window)
                    .param("rounds", plan.copy_rounds),
            );
        }
    }
}

/// The `nt_threshold` sweep and its `nt_crossover` summary.
pub(crate) fn run_nt_threshold(ctx: &mut Ctx<'_>) {
    ctx.progress.stage("nt threshold");
    let variants = [Variant::Nt, Variant::Store];
    let src = AlignedBuf::new(4096);
    let plan = ctx.plan;
    let window = plan.nt_window_bytes.min(ctx.region.len());
    let mut points = Vec::new();
    for &size in &plan.nt_sizes {
        let stride = size.next_multiple_of(pmem::LINE) as u64;
        let spreads = measure_size(ctx, &variants, &src.as_slice()[..size], stride, window, plan.nt_rounds);
        for (variant, (spread, ns)) in variants.iter().zip(&spreads) {
            ctx.results.push(
                BenchResult::new(NT_THRESHOLD_BENCH, variant.name())
                    .size(size as u64)
                    .metric("gb_per_s", spread.median)
                    .metric("ns_per_copy", *ns)
                    .param("window_bytes", window),
            );
        }
        points.push((size as u64, spreads[0].0.median, spreads[1].0.median));
    }
    let measured = BenchResult::new(NT_CROSSOVER, "measured");
    let measured = match crossover(&points) {
        Some(bytes) => measured.metric("crossover_bytes", bytes as f64),
        None => measured.param("note", "non-temporal stores never won at every larger size in the sweep"),
    };
    ctx.results.push(measured);
    ctx.results.push(
        BenchResult::new(NT_CROSSOVER, "pmdk_default")
            .metric("crossover_bytes", 256.0)
            .param("note", "PMDK's MOVNT_THRESHOLD"),
    );
    ctx.results.push(
        BenchResult::new(NT_CROSSOVER, "pmwire_nt_threshold")
            .metric("crossover_bytes", ctx.region.nt_threshold() as f64)
            .param("note", "the region's threshold, used by Media::memcpy_persist (default pmem::NT_THRESHOLD)"),
    );
}

/// The smallest size from which non-temporal stores are at least as fast
/// as store + flush at that size and every larger one. `points` holds
/// (size, nt rate, store rate) in increasing size.
pub fn crossover(points: &[(u64, f64, f64)]) -> Option<u64> {
    let mut answer = None;
    for &(size, nt, store) in points.iter().rev() {
        if nt >= store {
            answer = Some(size);
        } else {
            break;
        }
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossover_is_where_nt_wins_from_then_on() {
        let points = [(64, 1.0, 2.0), (128, 2.1, 2.0), (256, 1.9, 2.0), (512, 3.0, 2.0), (1024, 4.0, 2.0)];
        assert_eq!(crossover(&points), Some(512));
        assert_eq!(crossover(&[(64, 1.0, 2.0), (128, 1.0, 2.0)]), None);
        assert_eq!(crossover(&[(64, 3.0, 2.0)]), Some(64));
    }

    #[test]
    fn sweep_wraps_before_the_end() {
        let mut seen = Vec::new();
        let next = sweep(1000, 300, 5, 600, |at| seen.push(at));
        assert_eq!(seen, vec![600, 0, 300, 600, 0]);
        assert_eq!(next, 300);
    }
}
