//! Crash-state checks of the pool under PASTE's event loop (seed 001
//! Figure 4 and appendix A.1), and the planted bugs they must catch.
//!
//! The workload keeps a receive ring of pool buffers and a plog (an
//! [`ExtentLog`] in a pool section). Each *receive* step: the "kernel"
//! stores packets into ring buffers with ordinary stores (in the cache,
//! like DMA with DDIO); the application flushes the write requests' lines,
//! drains, appends their extents as one group, takes the log's reference on
//! each buffer and swaps it out of the ring for a fresh one (releasing the
//! ring's reference); read requests stay in the ring and are overwritten
//! later. Each *truncate* step persists a new log head, releases the
//! dropped entries' buffers, and the kernel at once reuses freed buffers
//! for new (unlogged) packets. Step `k` is marked when it returned.
//!
//! An image passes only if, after `Pool::open`, `ExtentLog::open` and one
//! `recover_ref` per retained extent:
//! - the log holds exactly the entries acknowledged, or those and the step
//!   in flight, and every entry's bytes are exactly what was received;
//! - every buffer's count equals the log's references to it and the free
//!   list is exactly the unreferenced buffers (`Pool::check`);
//! - every 16th image runs more receive and truncate steps on the
//!   recovered pool and the surviving entries' bytes are still intact
//!   (the rebuilt free list hands out only unreferenced buffers).

use std::panic::{catch_unwind, AssertUnwindSafe};

use pmem::trace::TracedMedia;
use pmem::{Media, MemMedia};
use pmwire_crashcheck::{explore, Check, Config, CrashImage, Report};
use pmwire_log::{Extent, ExtentLog};
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

use crate::{Pool, PoolConfig};

const BASE: u64 = 4096;
const BUF_SIZE: u32 = 256;
const BUFFERS: u32 = 24;
const RING: usize = 6;
const LOG_SLOTS: u64 = 64;
const PLOG: u32 = 1;
const STEPS: usize = 220;
const CONTINUE_EVERY: u64 = 16;

/// Planted bugs (tests only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Append the extents without draining the buffers' flushes first.
    pub log_before_drain: bool,
    /// Release truncated entries' buffers (and let the kernel reuse them)
    /// before the new log head is durable.
    pub free_before_truncate: bool,
    /// Recovery does not count the log's references (every buffer free).
    pub forget_log_refs: bool,
}

/// Every crash check of this crate: the correct loop, then the planted bugs.
pub fn checks() -> Vec<Check> {
    let check = |name, planted, run| Check { name, planted, run };
    vec![
        check("pool: PASTE receive, persist, swap and truncate loop", false, |c| check_pool(Faults::default(), STEPS, c)),
        check("planted: pool extent logged before the data drain", true, |c| {
            check_pool(Faults { log_before_drain: true, ..Faults::default() }, 60, c)
        }),
        check("planted: pool buffer freed before its truncation is durable", true, |c| {
            check_pool(Faults { free_before_truncate: true, ..Faults::default() }, 60, c)
        }),
        check("planted: pool recovery ignores the log's references", true, |c| {
            check_pool(Faults { forget_log_refs: true, ..Faults::default() }, 60, c)
        }),
    ]
}

/// A retained log entry and the bytes it names.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    index: u64,
    extent: Extent,
    bytes: Vec<u8>,
}

/// The event loop under test.
struct Loop {
    pool: Pool,
    log: ExtentLog,
    ring: Vec<u32>,
    cur: usize,
    rng: SplitMix64,
    entries: Vec<Entry>,
    faults: Faults,
}

impl Loop {
    fn below(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n
    }

    /// The kernel stores a packet into buffer `buf` (cached stores); returns its extent and bytes.
    fn receive_into<M: Media>(&mut self, media: &mut M, buf: u32) -> (Extent, Vec<u8>) {
        let len = 1 + self.below(BUF_SIZE as u64 - 1) as u16;
        let offset = self.below((BUF_SIZE - len as u32) as u64 + 1) as u16;
        let fill = self.below(256) as u8;
        let bytes: Vec<u8> = (0..len).map(|i| fill ^ (i as u8).wrapping_mul(31)).collect();
        let extent = Extent { buf_idx: buf, offset, len };
        media.write(self.pool.extent_offset(extent), &bytes);
        (extent, bytes)
    }

    /// One poll: 1–4 packets, each a write request with probability 3/5.
    fn receive_step<M: Media>(&mut self, media: &mut M) {
        let mut logged = Vec::new();
        for _ in 0..1 + self.below(4) {
            let slot = self.cur % RING;
            self.cur += 1;
            let (extent, bytes) = self.receive_into(media, self.ring[slot]);
            if self.below(5) < 3 {
                self.pool.flush_extent(media, extent);
                logged.push((slot, extent, bytes));
            }
        }
        if logged.is_empty() {
            return;
        }
        if !self.faults.log_before_drain {
            media.drain();
        }
        let extents: Vec<Extent> = logged.iter().map(|&(_, e, _)| e).collect();
        let first = self.log.append_group(media, &extents).expect("log has room");
        for (i, (slot, extent, bytes)) in logged.into_iter().enumerate() {
            self.pool.retain(extent.buf_idx);
            self.entries.push(Entry { index: first + i as u64, extent, bytes });
            let fresh = self.pool.alloc().expect("a free buffer for the ring");
            let old = std::mem::replace(&mut self.ring[slot], fresh);
            self.pool.release(old);
        }
    }

    /// Drops the older half of the log; the kernel reuses freed buffers at once.
    fn truncate_step<M: Media>(&mut self, media: &mut M) {
        let drop = self.entries.len().div_ceil(2);
        let keep_from = self.entries.get(drop).map_or(self.log.next_index(), |e| e.index);
        let dropped: Vec<Entry> = self.entries.drain(..drop).collect();
        if !self.faults.free_before_truncate {
            self.log.truncate(media, keep_from).expect("truncate");
        }
        let freed: Vec<u32> = dropped.iter().filter(|e| self.pool.release(e.extent.buf_idx)).map(|e| e.extent.buf_idx).collect();
        for _ in &freed {
            let buf = self.pool.alloc().expect("just freed");
            self.receive_into(media, buf);
            self.pool.flush_extent(media, Extent { buf_idx: buf, offset: 0, len: BUF_SIZE as u16 });
            self.pool.release(buf);
        }
        if self.faults.free_before_truncate {
            self.log.truncate(media, keep_from).expect("truncate");
        }
    }

    /// Runs step `k` of the workload.
    fn step<M: Media>(&mut self, media: &mut M, k: usize) {
        if k % 5 == 4 || self.log.free() < 8 || self.pool.free_count() < 4 {
            self.truncate_step(media);
        } else {
            self.receive_step(media);
        }
    }
}

fn config() -> PoolConfig {
    PoolConfig { buf_size: BUF_SIZE, buffers: BUFFERS, sections: vec![(PLOG, ExtentLog::required_size(LOG_SLOTS))] }
}

/// Runs `steps` steps on a traced medium; returns it and the retained
/// entries after each number of completed steps.
fn run(faults: Faults, steps: usize) -> (TracedMedia, Vec<Vec<Entry>>) {
    let config = config();
    let mut media = TracedMedia::new((BASE + Pool::required_size(&config).unwrap()) as usize);
    let layout = Pool::begin_create(&mut media, BASE, &config).expect("layout");
    let section = layout.sections[0];
    let log = ExtentLog::create(&mut media, section.offset, LOG_SLOTS).expect("plog");
    let mut pool = Pool::finish_create(&mut media, layout);
    let ring = (0..RING).map(|_| pool.alloc().unwrap()).collect();
    media.checkpoint();
    let mut state = Loop { pool, log, ring, cur: 0, rng: SplitMix64::seed_from_u64(0x9a57e), entries: Vec::new(), faults };
    let mut states = vec![Vec::new()];
    for k in 0..steps {
        state.step(&mut media, k);
        states.push(state.entries.clone());
        media.mark(k as u64);
    }
    (media, states)
}

/// Crash-checks the loop (with planted `faults`) over `steps` steps.
pub fn check_pool(faults: Faults, steps: usize, config: &Config) -> Report {
    let (media, states) = run(faults, steps);
    let mut number = 0u64;
    explore(&media, config, |image: &mut CrashImage| {
        number += 1;
        let acked = image.acked.len();
        let continue_after = number.is_multiple_of(CONTINUE_EVERY);
        let judged = catch_unwind(AssertUnwindSafe(|| judge(&mut image.media, faults, &states, acked, continue_after)));
        judged.unwrap_or_else(|_| Err("recovery panicked".to_string()))
    })
}

/// Recovers the pool and its plog from `media`.
fn recover(media: &mut MemMedia, faults: Faults) -> Result<(Pool, ExtentLog), String> {
    let mut pool = Pool::open(media, BASE).map_err(|e| format!("pool open: {e}"))?;
    let section = pool.section(PLOG).ok_or("no plog section")?;
    let log = ExtentLog::open(media, section.offset).map_err(|e| format!("plog open: {e}"))?;
    for (_, extent) in log.read_all(media) {
        pool.check_extent(extent).map_err(|e| format!("logged extent: {e}"))?;
        if !faults.forget_log_refs {
            pool.recover_ref(extent.buf_idx).map_err(|e| e.to_string())?;
        }
    }
    pool.finish_recovery();
    Ok((pool, log))
}

fn judge(media: &mut MemMedia, faults: Faults, states: &[Vec<Entry>], acked: usize, continue_after: bool) -> Result<(), String> {
    let (pool, log) = recover(media, faults)?;
    let found: Vec<(u64, Extent)> = log.read_all(media);
    let matches = |entries: &[Entry]| entries.iter().map(|e| (e.index, e.extent)).eq(found.iter().copied());
    let before = &states[acked];
    let after = states.get(acked + 1).unwrap_or(before);
    let entries = if matches(after) {
        after
    } else if matches(before) {
        before
    } else {
        return Err(format!("after {acked} steps: log holds {} extents, expected {} or {}", found.len(), before.len(), after.len()));
    };
    check_entries(media, &pool, entries)?;
    if continue_after {
        continue_from(media, pool, log, entries.to_vec(), acked)?;
    }
    Ok(())
}

/// Every entry's bytes are intact, and the counts are exactly the log's references.
fn check_entries(media: &MemMedia, pool: &Pool, entries: &[Entry]) -> Result<(), String> {
    let mut expected = vec![0u32; pool.buffers() as usize];
    for entry in entries {
        let mut bytes = Vec::new();
        pool.gather(media, &[entry.extent], &mut bytes);
        if bytes != entry.bytes {
            return Err(format!("entry {} ({:?}): bytes differ", entry.index, entry.extent));
        }
        expected[entry.extent.buf_idx as usize] += 1;
    }
    for (buf, &count) in expected.iter().enumerate() {
        if pool.refcount(buf as u32) != count {
            return Err(format!("buffer {buf}: count {}, the log references it {count} times", pool.refcount(buf as u32)));
        }
    }
    pool.check()
}

/// Runs more steps on the recovered pool; the surviving entries must stay intact.
fn continue_from(media: &mut MemMedia, mut pool: Pool, log: ExtentLog, entries: Vec<Entry>, acked: usize) -> Result<(), String> {
    let ring = (0..RING).map(|_| pool.alloc().ok_or("no buffer for the ring")).collect::<Result<_, _>>()?;
    let rng = SplitMix64::seed_from_u64(0xc0ff_ee00 ^ acked as u64);
    let mut state = Loop { pool, log, ring, cur: 0, rng, entries, faults: Faults::default() };
    for k in 0..6 {
        state.step(media, k);
    }
    for &buf in &state.ring {
        state.pool.release(buf);
    }
    check_entries(media, &state.pool, &state.entries).map_err(|e| format!("after recovery: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receive_loop_survives_every_crash() {
        check_pool(Faults::default(), STEPS, &Config::default()).assert_passes_at_least(10_000);
    }

    #[test]
    fn canary_log_before_drain_is_caught() {
        check_pool(Faults { log_before_drain: true, ..Faults::default() }, 60, &Config::default()).assert_caught();
    }

    #[test]
    fn canary_free_before_truncate_is_caught() {
        check_pool(Faults { free_before_truncate: true, ..Faults::default() }, 60, &Config::default()).assert_caught();
    }

    #[test]
    fn canary_forgotten_log_refs_are_caught() {
        check_pool(Faults { forget_log_refs: true, ..Faults::default() }, 60, &Config::default()).assert_caught();
    }

    #[test]
    fn registry_lists_every_check_once() {
        pmwire_crashcheck::assert_registry(&checks(), 3);
    }
}
