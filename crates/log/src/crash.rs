//! Crash-state checks of both logs, and the planted bugs they must catch.
//!
//! Each check runs a workload on a [`TracedMedia`] (appends of 0–270 B
//! entries or of extent groups of 1–10, truncations, several laps of the
//! ring), marking step `k` once it has returned. [`explore`] then builds
//! every crash image the hardware could leave and each is recovered with
//! `open` and judged against a model. An image passes only if:
//! - the recovered head is the acknowledged head or the in-flight one;
//! - the recovered entries are exactly `head .. next`, in order, each byte
//!   for byte what was appended with that number, and `next` is the
//!   acknowledged end or includes the one append in flight (so nothing
//!   acknowledged is lost, nothing torn or never written is accepted).
//!
//! Phase two catches the stale-bytes pitfall: from phase one it keeps
//! images where an append was in flight, torn, and left its last word
//! past the recovered tail; it opens each, appends more (shorter) entries
//! under a new trace started from that image, and explores again.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pmem::trace::TracedMedia;
use pmem::{Media, MemMedia, Padding};
use pmwire_crashcheck::{explore, Check, Config, CrashImage, Report};

use crate::{AppendError, AppendLog, Extent, ExtentLog, Faults, LogConfig, TailStrategy};

mod storage;

pub use storage::check_storage_ops;

/// Where each log under test starts in its media (not 0, to test `base`).
const BASE: u64 = 256;
/// Images of phase one that seed a phase-two exploration.
const PHASE_TWO_RUNS: usize = 12;
/// Payload lengths of phase one, in turn (multi-line, NT-sized, empty).
const PHASE_ONE_LENS: [usize; 11] = [24, 130, 8, 200, 0, 60, 270, 40, 100, 16, 180];
/// Payload lengths of phase two: shorter, so they end inside stale bytes.
const PHASE_TWO_LENS: [usize; 6] = [0, 8, 16, 24, 8, 40];
/// Extent group sizes, in turn (up to 10: groups that span two lines).
const GROUP_LENS: [usize; 13] = [1, 3, 1, 2, 8, 1, 10, 4, 1, 1, 6, 9, 5];

/// Every crash check of this crate: the correct logs, then the planted bugs.
pub fn checks() -> Vec<Check> {
    let check = |name, planted, run| Check { name, planted, run };
    vec![
        check("append log, naive tail", false, |c| check_append_log(TailStrategy::Naive, Faults::default(), c)),
        check("append log, rotating tail 10 x 256 B", false, |c| {
            check_append_log(TailStrategy::ROTATING_PAPER, Faults::default(), c)
        }),
        check("append log, self-validating", false, |c| {
            check_append_log(TailStrategy::SelfValidating, Faults::default(), c)
        }),
        check("extent log", false, check_extent_log),
        check("storage ops (batch, suffix truncation, restart), naive tail", false, |c| {
            check_storage_ops(TailStrategy::Naive, Faults::default(), c)
        }),
        check("storage ops (batch, suffix truncation, restart), rotating tail", false, |c| {
            check_storage_ops(TailStrategy::ROTATING_PAPER, Faults::default(), c)
        }),
        check("storage ops (batch, suffix truncation, restart), self-validating", false, |c| {
            check_storage_ops(TailStrategy::SelfValidating, Faults::default(), c)
        }),
        check("planted: naive tail never flushed", true, |c| {
            let faults = Faults { skip_tail_flush: true, ..Faults::default() };
            check_append_log(TailStrategy::Naive, faults, c)
        }),
        check("planted: rotating tail never flushed", true, |c| {
            let faults = Faults { skip_tail_flush: true, ..Faults::default() };
            check_append_log(TailStrategy::ROTATING_PAPER, faults, c)
        }),
        check("planted: naive tail persisted before entry", true, |c| {
            let faults = Faults { tail_before_entry: true, ..Faults::default() };
            check_append_log(TailStrategy::Naive, faults, c)
        }),
        check("planted: self-validating without checksum", true, |c| {
            let faults = Faults { skip_checksum: true, ..Faults::default() };
            check_append_log(TailStrategy::SelfValidating, faults, c)
        }),
        check("planted: self-validating without scrub", true, |c| {
            let faults = Faults { skip_scrub: true, ..Faults::default() };
            check_append_log(TailStrategy::SelfValidating, faults, c)
        }),
        check("planted: extent log without scrub", true, |c| {
            check_extent_log_with(Faults { skip_scrub: true, ..Faults::default() }, c)
        }),
        check("planted: naive suffix truncation not durable", true, |c| {
            check_storage_ops(TailStrategy::Naive, Faults { suffix_not_durable: true, ..Faults::default() }, c)
        }),
        check("planted: rotating suffix truncation not durable", true, |c| {
            check_storage_ops(TailStrategy::ROTATING_PAPER, Faults { suffix_not_durable: true, ..Faults::default() }, c)
        }),
        check("planted: self-validating suffix truncation not durable", true, |c| {
            check_storage_ops(TailStrategy::SelfValidating, Faults { suffix_not_durable: true, ..Faults::default() }, c)
        }),
        check("planted: self-validating scrub before its truncation record", true, |c| {
            let faults = Faults { scrub_before_record: true, ..Faults::default() };
            check_storage_ops(TailStrategy::SelfValidating, faults, c)
        }),
    ]
}

/// Crash-checks an [`AppendLog`] with `tail` (and planted `faults`):
/// unpadded and line-padded runs, each with a phase two.
pub fn check_append_log(tail: TailStrategy, faults: Faults, config: &Config) -> Report {
    let mut report = Report { seed: config.seed, ..Report::default() };
    for (padding, capacity, steps) in [(Padding::None, 1024, 240), (Padding::Line, 2048, 90)] {
        let mut log_config = LogConfig::new(capacity, tail).with_padding(padding);
        log_config.faults = faults;
        report.merge(append_log_run(log_config, steps, config));
    }
    report
}

/// Crash-checks an [`ExtentLog`] of 16 slots, groups up to 10 long.
pub fn check_extent_log(config: &Config) -> Report {
    check_extent_log_with(Faults::default(), config)
}

/// [`check_extent_log`] with planted bugs.
#[doc(hidden)]
pub fn check_extent_log_with(faults: Faults, config: &Config) -> Report {
    let mut media = TracedMedia::new((BASE + ExtentLog::required_size(16)) as usize);
    let mut log = ExtentLog::create(&mut media, BASE, 16).expect("create");
    media.checkpoint();
    let mut model = Model::new(0, 0, Vec::new());
    drive_extents(&mut media, &mut log, &mut model, 500, &GROUP_LENS, 1);
    let recover = |media: &mut MemMedia| {
        let log = ExtentLog::open_with_faults(media, BASE, faults).map_err(|e| e.to_string())?;
        Ok((log.head(), log.read_all(media)))
    };
    let (mut report, seeds) = explore_model(&media, &model, config, recover, true);
    for (run, seed) in seeds.into_iter().enumerate() {
        let mut media = TracedMedia::from_image(seed.image);
        let mut log = ExtentLog::open_with_faults(&mut media, BASE, faults).expect("image passed phase one");
        let mut model = Model::new(log.head(), log.next_index(), log.read_all(&media));
        let lens = [seed.size, 1, 1, 1, 2, 1, 1, 3];
        drive_extents(&mut media, &mut log, &mut model, 40, &lens, 2 + run as u32);
        report.merge(explore_model(&media, &model, config, recover, false).0);
    }
    report
}

/// One phase-one run of the append log and its phase-two runs.
fn append_log_run(log_config: LogConfig, steps: usize, config: &Config) -> Report {
    let faults = log_config.faults;
    let size = BASE + AppendLog::required_size(&log_config);
    let mut media = TracedMedia::new(size as usize);
    let mut log = AppendLog::create(&mut media, BASE, log_config).expect("create");
    media.checkpoint();
    let mut model = Model::new(0, 0, Vec::new());
    drive_appends(&mut media, &mut log, &mut model, steps, &PHASE_ONE_LENS, 1);
    let recover = |media: &mut MemMedia| {
        let log = AppendLog::open_with_faults(media, BASE, faults).map_err(|e| e.to_string())?;
        Ok((log.head(), log.read_all(media)))
    };
    let (mut report, seeds) = explore_model(&media, &model, config, recover, true);
    for (run, seed) in seeds.into_iter().enumerate() {
        let mut media = TracedMedia::from_image(seed.image);
        let mut log = AppendLog::open_with_faults(&mut media, BASE, faults).expect("image passed phase one");
        let mut model = Model::new(log.head(), log.next_lsn(), log.read_all(&media));
        let mut lens = vec![seed.size];
        lens.extend(PHASE_TWO_LENS);
        drive_appends(&mut media, &mut log, &mut model, 30, &lens, 2 + run as u32);
        report.merge(explore_model(&media, &model, config, recover, false).0);
    }
    report
}

/// What an append step wrote: its 8 B words (offset, value), first to
/// last, and its size (payload bytes or extents).
#[derive(Clone, Debug)]
struct Written {
    words: Vec<(u64, u64)>,
    size: usize,
    /// The append crossed the end of the ring (a skip word, or a group
    /// that continues at slot 0).
    wrapped: bool,
}

/// A phase-one image that seeds a phase-two run: an append was in flight,
/// was not recovered, and left words of itself past the tail.
struct Seed {
    point: usize,
    /// 2: the lost append wrapped and all its words but perhaps the first
    /// are on the media (its skip word is not); 1: the same, not wrapped;
    /// 0: its last word.
    rank: u8,
    image: Vec<u8>,
    size: usize,
}

/// What recovery must produce after `k` acknowledged steps.
struct Model<T> {
    /// `(head, next)` after each number of completed steps.
    states: Vec<(u64, u64)>,
    /// Every value ever appended, by number.
    values: BTreeMap<u64, T>,
    /// For each step: what it wrote, if it was an append.
    written: Vec<Option<Written>>,
}

impl<T: PartialEq + std::fmt::Debug> Model<T> {
    fn new(head: u64, next: u64, retained: Vec<(u64, T)>) -> Model<T> {
        Model { states: vec![(head, next)], values: retained.into_iter().collect(), written: Vec::new() }
    }

    fn push(&mut self, head: u64, next: u64, written: Option<Written>) {
        self.states.push((head, next));
        self.written.push(written);
    }

    /// Judges a recovered `(head, entries)` after `acked` steps completed.
    fn judge(&self, acked: usize, head: u64, entries: &[(u64, T)]) -> Result<(), String> {
        let before = self.states[acked];
        let after = self.states.get(acked + 1).copied().unwrap_or(before);
        let next = head + entries.len() as u64;
        if head != before.0 && head != after.0 {
            return Err(format!("head {head}: acked {} or in flight {}", before.0, after.0));
        }
        if next != before.1 && next != after.1 {
            return Err(format!("recovered up to {next}: acked {} or in flight {}", before.1, after.1));
        }
        for (i, (number, value)) in entries.iter().enumerate() {
            if *number != head + i as u64 {
                return Err(format!("entry {i} numbered {number}, expected {}", head + i as u64));
            }
            if self.values.get(number) != Some(value) {
                return Err(format!("entry {number} recovered as {value:?}, written {:?}", self.values.get(number)));
            }
        }
        Ok(())
    }
}

/// Explores `media` and judges each image against `model`. With
/// `keep_seeds`, also returns up to [`PHASE_TWO_RUNS`] seeds for phase
/// two (at most one per crash point; whole remnants first).
fn explore_model<T: PartialEq + std::fmt::Debug>(
    media: &TracedMedia,
    model: &Model<T>,
    config: &Config,
    recover: impl Fn(&mut MemMedia) -> Result<(u64, Vec<(u64, T)>), String>,
    keep_seeds: bool,
) -> (Report, Vec<Seed>) {
    let mut seeds: Vec<Seed> = Vec::new();
    let report = explore(media, config, |image: &mut CrashImage| {
        let acked = image.acked.len();
        assert_eq!(image.acked.last().copied(), acked.checked_sub(1).map(|k| k as u64), "marks are step numbers");
        let on_media = |(at, value): (u64, u64)| image.media.read_u64(at) == value;
        let written = model.written.get(acked).and_then(|w| w.as_ref());
        let written = written.filter(|w| keep_seeds && on_media(*w.words.last().expect("an append writes")));
        let candidate = written.map(|w| {
            let rank = if w.words[1..].iter().all(|&word| on_media(word)) { 1 + w.wrapped as u8 } else { 0 };
            (w.size, rank, image.media.bytes().to_vec())
        });
        let (head, entries) = match catch_unwind(AssertUnwindSafe(|| recover(&mut image.media))) {
            Ok(result) => result?,
            Err(_) => return Err("recovery panicked".to_string()),
        };
        model.judge(acked, head, &entries)?;
        let lost = head + entries.len() as u64 == model.states[acked].1;
        if let (Some((size, rank, bytes)), true) = (candidate, lost) {
            offer_seed(&mut seeds, Seed { point: image.point, rank, image: bytes, size });
        }
        Ok(())
    });
    (report, pick_seeds(seeds))
}

/// Keeps one seed per crash point, the highest ranked.
fn offer_seed(seeds: &mut Vec<Seed>, seed: Seed) {
    match seeds.last_mut() {
        Some(last) if last.point == seed.point => {
            if seed.rank > last.rank {
                *last = seed;
            }
        }
        _ => seeds.push(seed),
    }
}

/// Up to [`PHASE_TWO_RUNS`] seeds spread over the run: a third of each
/// rank, the highest first, unused room passed down.
fn pick_seeds(mut seeds: Vec<Seed>) -> Vec<Seed> {
    let mut picked = Vec::new();
    for rank in [2, 1, 0] {
        let (this, rest): (Vec<Seed>, Vec<Seed>) = seeds.into_iter().partition(|s| s.rank == rank);
        seeds = rest;
        let room = if rank == 0 { PHASE_TWO_RUNS - picked.len() } else { PHASE_TWO_RUNS / 3 };
        picked.extend(spread(this, room));
    }
    picked
}

/// `count` items evenly spaced over `items`.
fn spread(items: Vec<Seed>, count: usize) -> Vec<Seed> {
    let (found, count) = (items.len(), count.min(items.len()));
    let chosen: Vec<usize> = (0..count).map(|i| i * found / count).collect();
    items.into_iter().enumerate().filter(|(i, _)| chosen.contains(i)).map(|(_, s)| s).collect()
}

/// The payload of entry `lsn` in phase `salt`: distinct across entries and phases.
fn payload(salt: u32, lsn: u64, len: usize) -> Vec<u8> {
    let seed = (salt as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ lsn.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (0..len).map(|i| (seed >> (8 * (i % 8))) as u8 ^ (i / 8) as u8).collect()
}

/// Runs `steps` appends (lengths from `lens` in turn) and truncations,
/// marking each step.
fn drive_appends(
    media: &mut TracedMedia,
    log: &mut AppendLog,
    model: &mut Model<Vec<u8>>,
    steps: usize,
    lens: &[usize],
    salt: u32,
) {
    for i in 0..steps {
        if i % 9 == 8 || log.free_bytes() < log.config().entry_size(300) * 2 / 3 {
            let keep = log.head() + log.len().div_ceil(2);
            log.truncate(media, keep).expect("truncate within the log");
            model.push(log.head(), log.next_lsn(), None);
        } else {
            let data = payload(salt, log.next_lsn(), lens[i % lens.len()]);
            let tail_before = log.positions().1;
            match log.append(media, &data) {
                Ok(lsn) => {
                    let written = append_written(media, log, data.len(), tail_before);
                    model.values.insert(lsn, data);
                    model.push(log.head(), log.next_lsn(), Some(written));
                }
                Err(AppendError::Full { .. }) => continue,
                Err(e) => panic!("append: {e}"),
            }
        }
        media.mark(model.written.len() as u64 - 1);
    }
}

/// The words the latest append of `len` payload bytes wrote (the entry,
/// not its skip word); it began with the tail at `tail_before`.
fn append_written(media: &TracedMedia, log: &AppendLog, len: usize, tail_before: u64) -> Written {
    let size = log.config().entry_size(len as u64);
    let entry_pos = log.positions().1 - size;
    let start = log.entries_offset() + entry_pos % log.config().capacity;
    let end = start + crate::ENTRY_HEADER_BYTES + len as u64;
    let words = (start..end).step_by(8).map(|at| (at, media.read_u64(at))).collect();
    Written { words, size: len, wrapped: entry_pos != tail_before }
}

/// The `n`-th extent of phase `salt`.
fn extent(salt: u32, n: u64) -> Extent {
    Extent { buf_idx: salt << 24 | n as u32, offset: (n * 131 % 8192) as u16, len: (n * 37 % 2049) as u16 }
}

/// Runs `steps` extent appends (group sizes from `lens` in turn; single
/// extents alternate between `append` and `append_group`) and truncations.
fn drive_extents(
    media: &mut TracedMedia,
    log: &mut ExtentLog,
    model: &mut Model<Extent>,
    steps: usize,
    lens: &[usize],
    salt: u32,
) {
    for i in 0..steps {
        let group_len = lens[i % lens.len()];
        if i % 7 == 6 || log.free() < group_len as u64 {
            let keep = log.head() + log.len().div_ceil(2);
            log.truncate(media, keep).expect("truncate within the log");
            model.push(log.head(), log.next_index(), None);
        } else {
            let first = log.next_index();
            let group: Vec<Extent> = (0..group_len as u64).map(|k| extent(salt, first + k)).collect();
            let result = if group_len == 1 && i.is_multiple_of(2) {
                log.append(media, group[0])
            } else {
                log.append_group(media, &group)
            };
            assert_eq!(result, Ok(first));
            model.values.extend(group.iter().enumerate().map(|(k, e)| (first + k as u64, *e)));
            let last = first + group_len as u64 - 1;
            let words = (first..=last).map(|n| (log.slot(n), media.read_u64(log.slot(n)))).collect();
            let wrapped = first / log.capacity() != last / log.capacity();
            let written = Written { words, size: group_len, wrapped };
            model.push(log.head(), log.next_index(), Some(written));
        }
        media.mark(model.written.len() as u64 - 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::default()
    }

    #[test]
    fn naive_tail_survives_every_crash() {
        check_append_log(TailStrategy::Naive, Faults::default(), &config()).assert_passes_at_least(10_000);
    }

    #[test]
    fn rotating_tail_survives_every_crash() {
        check_append_log(TailStrategy::ROTATING_PAPER, Faults::default(), &config()).assert_passes_at_least(10_000);
    }

    #[test]
    fn self_validating_log_survives_every_crash() {
        check_append_log(TailStrategy::SelfValidating, Faults::default(), &config()).assert_passes_at_least(10_000);
    }

    #[test]
    fn extent_log_survives_every_crash() {
        check_extent_log(&config()).assert_passes_at_least(10_000);
    }

    #[test]
    fn canary_unflushed_tail_is_caught() {
        let faults = Faults { skip_tail_flush: true, ..Faults::default() };
        check_append_log(TailStrategy::Naive, faults, &config()).assert_caught();
        check_append_log(TailStrategy::ROTATING_PAPER, faults, &config()).assert_caught();
    }

    #[test]
    fn canary_tail_before_entry_is_caught() {
        let faults = Faults { tail_before_entry: true, ..Faults::default() };
        check_append_log(TailStrategy::Naive, faults, &config()).assert_caught();
        check_append_log(TailStrategy::ROTATING_PAPER, faults, &config()).assert_caught();
    }

    #[test]
    fn canary_unchecked_entry_is_caught() {
        let faults = Faults { skip_checksum: true, ..Faults::default() };
        check_append_log(TailStrategy::SelfValidating, faults, &config()).assert_caught();
    }

    #[test]
    fn canary_unscrubbed_entry_is_caught() {
        let faults = Faults { skip_scrub: true, ..Faults::default() };
        check_append_log(TailStrategy::SelfValidating, faults, &config()).assert_caught();
    }

    #[test]
    fn canary_unscrubbed_extent_group_is_caught() {
        check_extent_log_with(Faults { skip_scrub: true, ..Faults::default() }, &config()).assert_caught();
    }

    #[test]
    fn storage_ops_survive_every_crash() {
        for tail in [TailStrategy::Naive, TailStrategy::ROTATING_PAPER, TailStrategy::SelfValidating] {
            check_storage_ops(tail, Faults::default(), &config()).assert_passes_at_least(10_000);
        }
    }

    #[test]
    fn canary_suffix_truncation_not_durable_is_caught() {
        let faults = Faults { suffix_not_durable: true, ..Faults::default() };
        for tail in [TailStrategy::Naive, TailStrategy::ROTATING_PAPER, TailStrategy::SelfValidating] {
            check_storage_ops(tail, faults, &config()).assert_caught();
        }
    }

    #[test]
    fn canary_scrub_before_truncation_record_is_caught() {
        let faults = Faults { scrub_before_record: true, ..Faults::default() };
        check_storage_ops(TailStrategy::SelfValidating, faults, &config()).assert_caught();
    }

    #[test]
    fn registry_lists_every_check_once() {
        pmwire_crashcheck::assert_registry(&checks(), 10);
    }
}
