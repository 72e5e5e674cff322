//! Replays a trace and enumerates or samples crash images.
//!
//! Invariant of [`Replay`]: for every word `w`, `floor[w]` is durable, and
//! `pending[w]` holds, in store order, every value stored to `w` since its
//! floor (`(seq, value)`, `seq` increasing). `captured[w] = k` means a flush
//! has covered the first `k` of them and the next fence makes the `k`-th the
//! floor.

use pmem::layout::LINE;
use pmem::trace::{Op, TracedMedia};
use pmem::MemMedia;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

const WORD: usize = 8;
const WORDS_PER_LINE: usize = LINE / WORD;
/// Failures kept in a report (all are counted).
const FAILURES_KEPT: usize = 8;

/// How hard to explore.
#[derive(Clone, Debug)]
pub struct Config {
    /// Seed of the sampler; printed with every failure.
    pub seed: u64,
    /// Enumerate a crash point when it has at most this many images.
    pub exhaustive_limit: u64,
    /// Images drawn at a crash point with more than `exhaustive_limit`.
    pub samples: u64,
    /// Stop after this many images in all.
    pub max_images: u64,
}

impl Default for Config {
    /// Seed from `PMWIRE_CRASH_SEED` if set, else from the clock.
    fn default() -> Config {
        let seed = std::env::var("PMWIRE_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                now.as_nanos() as u64
            });
        Config::with_seed(seed)
    }
}

impl Config {
    /// The default exploration with a given seed.
    pub fn with_seed(seed: u64) -> Config {
        Config { seed, exhaustive_limit: 256, samples: 64, max_images: 1_000_000 }
    }
}

/// One possible post-crash state.
pub struct CrashImage<'a> {
    /// The medium as recovery would find it.
    pub media: MemMedia,
    /// The crash happened just before `ops[point]` (or at the end).
    pub point: usize,
    /// The markers recorded before the crash, in order.
    pub acked: &'a [u64],
}

/// A checker's complaint about one image.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The crash point (index into the trace).
    pub point: usize,
    /// Which image of that point (enumeration index or sample number).
    pub image: u64,
    /// How the image was made.
    pub strategy: &'static str,
    /// What the checker said.
    pub message: String,
}

/// What an exploration covered and found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The seed used.
    pub seed: u64,
    /// Crash points visited.
    pub crash_points: u64,
    /// Images checked.
    pub images: u64,
    /// Images the checker rejected.
    pub failure_count: u64,
    /// The first few failures.
    pub failures: Vec<Failure>,
}

impl Report {
    /// Whether every image passed.
    pub fn is_ok(&self) -> bool {
        self.failure_count == 0
    }

    /// Adds another report's counts (same seed assumed).
    pub fn merge(&mut self, other: Report) {
        self.crash_points += other.crash_points;
        self.images += other.images;
        self.failure_count += other.failure_count;
        let room = FAILURES_KEPT.saturating_sub(self.failures.len());
        self.failures.extend(other.failures.into_iter().take(room));
    }

    /// Panics, naming the seed and the first failures, unless every image passed.
    #[track_caller]
    pub fn assert_ok(&self) {
        assert!(self.is_ok(), "{}", self.describe());
    }

    /// Panics unless every image passed and there were at least `images`.
    #[track_caller]
    pub fn assert_passes_at_least(&self, images: u64) {
        self.assert_ok();
        assert!(self.images >= images, "only {} images (want {images}): {}", self.images, self.describe());
    }

    /// Panics unless the checker rejected some image: for planted bugs.
    #[track_caller]
    pub fn assert_caught(&self) {
        assert!(!self.is_ok(), "planted bug missed: {}", self.describe());
    }

    /// A human-readable summary.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "{} crash points, {} images, {} failures (seed {}; replay with PMWIRE_CRASH_SEED={})",
            self.crash_points, self.images, self.failure_count, self.seed, self.seed
        );
        for failure in &self.failures {
            text.push_str(&format!(
                "\n  point {} image {} ({}): {}",
                failure.point, failure.image, failure.strategy, failure.message
            ));
        }
        text
    }
}

/// Explores every crash point of `trace`, calling `check` on each image.
pub fn explore(
    trace: &TracedMedia,
    config: &Config,
    mut check: impl FnMut(&mut CrashImage) -> Result<(), String>,
) -> Report {
    let mut replay = Replay::new(trace.initial());
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut report = Report { seed: config.seed, ..Report::default() };
    let mut acked: Vec<u64> = Vec::new();
    let ops = trace.ops();
    for point in 0..=ops.len() {
        let at_crash_point = point == ops.len() || matches!(ops[point], Op::Fence);
        if at_crash_point && report.images < config.max_images {
            report.crash_points += 1;
            replay.visit(point, &acked, config, &mut rng, &mut report, &mut check);
        }
        if let Some(op) = ops.get(point) {
            if let Op::Mark(id) = op {
                acked.push(*id);
            }
            replay.apply(op);
        }
    }
    report
}

/// A trace folded as it runs, for a harness that wants one crash image now
/// and then rather than every image of every point (the replication
/// simulation): the durable image and, per 8 B word, the values stored
/// since, exactly as [`explore`] keeps them at a crash point. Only the
/// pending tail is kept, so its cost does not grow with the trace.
pub struct CrashState {
    replay: Replay,
}

impl CrashState {
    /// A medium whose contents `initial` are durable.
    pub fn new(initial: &[u8]) -> CrashState {
        CrashState { replay: Replay::new(initial) }
    }

    /// Folds one more operation in.
    pub fn apply(&mut self, op: &Op) {
        self.replay.apply(op);
    }

    /// Folds in every operation `media` recorded since the last fold, and
    /// clears them from its trace.
    pub fn fold(&mut self, media: &mut TracedMedia) {
        for op in &media.take_ops() {
            self.replay.apply(op);
        }
    }

    /// Words with a store that may not have reached the medium.
    pub fn pending_words(&self) -> usize {
        self.replay.pending.len()
    }

    /// The image if nothing pending reached the medium.
    pub fn durable(&self) -> &[u8] {
        &self.replay.floor
    }

    /// Draws one image a crash now could leave, and how it was drawn:
    /// every durable word, and each pending word at its floor or one of
    /// its stored values, chosen by [`explore`]'s sampling strategies
    /// (nothing or everything pending, independent words, whole lines at
    /// a moment of their history, a program-order prefix).
    pub fn draw<R: Rng + ?Sized>(&self, rng: &mut R) -> (MemMedia, &'static str) {
        if self.replay.pending.is_empty() {
            return (MemMedia::from_bytes(self.replay.floor.clone()), "nothing pending");
        }
        let radices: Vec<usize> = self.replay.pending.values().map(|h| h.len() + 1).collect();
        let (choices, strategy) = self.replay.sample(rng.gen_range(0..6), &radices, rng);
        (self.replay.image(&choices), strategy)
    }
}

struct Replay {
    floor: Vec<u8>,
    pending: BTreeMap<usize, Vec<(u64, u64)>>,
    captured: BTreeMap<usize, usize>,
    seq: u64,
}

impl Replay {
    fn new(initial: &[u8]) -> Replay {
        Replay { floor: initial.to_vec(), pending: BTreeMap::new(), captured: BTreeMap::new(), seq: 0 }
    }

    fn word(&self, index: usize) -> u64 {
        let start = index * WORD;
        let mut bytes = [0u8; WORD];
        let end = (start + WORD).min(self.floor.len());
        bytes[..end - start].copy_from_slice(&self.floor[start..end]);
        u64::from_le_bytes(bytes)
    }

    fn latest(&self, index: usize) -> u64 {
        self.pending.get(&index).and_then(|h| h.last()).map_or_else(|| self.word(index), |&(_, v)| v)
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Store { offset, bytes } => self.store(*offset as usize, bytes, false),
            Op::NtStore { offset, bytes } => self.store(*offset as usize, bytes, true),
            Op::Flush { offset, len } => self.flush(*offset as usize, *len as usize),
            Op::Fence => self.fence(),
            Op::Mark(_) => {}
        }
    }

    fn store(&mut self, offset: usize, bytes: &[u8], non_temporal: bool) {
        let first = offset / WORD;
        let last = (offset + bytes.len()).div_ceil(WORD);
        for index in first..last {
            let mut word = self.latest(index).to_le_bytes();
            for (k, byte) in word.iter_mut().enumerate() {
                let at = index * WORD + k;
                if at >= offset && at < offset + bytes.len() {
                    *byte = bytes[at - offset];
                }
            }
            self.seq += 1;
            let history = self.pending.entry(index).or_default();
            history.push((self.seq, u64::from_le_bytes(word)));
            if non_temporal {
                self.captured.insert(index, history.len());
            }
        }
    }

    fn flush(&mut self, offset: usize, len: usize) {
        if len == 0 {
            return;
        }
        let first_line = offset / LINE;
        let last_line = (offset + len).div_ceil(LINE);
        let first = first_line * WORDS_PER_LINE;
        let last = last_line * WORDS_PER_LINE;
        for (&index, history) in self.pending.range(first..last) {
            self.captured.insert(index, history.len());
        }
    }

    fn fence(&mut self) {
        for (index, count) in std::mem::take(&mut self.captured) {
            let history = self.pending.get_mut(&index).expect("captured word has a history");
            let (_, value) = history[count - 1];
            history.drain(..count);
            if history.is_empty() {
                self.pending.remove(&index);
            }
            let start = index * WORD;
            let end = (start + WORD).min(self.floor.len());
            self.floor[start..end].copy_from_slice(&value.to_le_bytes()[..end - start]);
        }
    }

    /// The image where word `pending[i]` takes choice `choices[i]`
    /// (0 = floor, k = k-th stored value).
    fn image(&self, choices: &[usize]) -> MemMedia {
        let mut bytes = self.floor.clone();
        for ((&index, history), &choice) in self.pending.iter().zip(choices) {
            if choice == 0 {
                continue;
            }
            let value = history[choice - 1].1.to_le_bytes();
            let start = index * WORD;
            let end = (start + WORD).min(bytes.len());
            bytes[start..end].copy_from_slice(&value[..end - start]);
        }
        MemMedia::from_bytes(bytes)
    }

    fn image_count(&self) -> Option<u64> {
        self.pending.values().try_fold(1u64, |acc, h| acc.checked_mul(h.len() as u64 + 1))
    }

    fn visit(
        &self,
        point: usize,
        acked: &[u64],
        config: &Config,
        rng: &mut StdRng,
        report: &mut Report,
        check: &mut impl FnMut(&mut CrashImage) -> Result<(), String>,
    ) {
        let radices: Vec<usize> = self.pending.values().map(|h| h.len() + 1).collect();
        let exhaustive = self.image_count().is_some_and(|n| n <= config.exhaustive_limit);
        let count = if exhaustive { self.image_count().unwrap() } else { config.samples.max(2) };
        for image in 0..count {
            if report.images >= config.max_images {
                return;
            }
            let (choices, strategy) = if exhaustive {
                (mixed_radix(image, &radices), "exhaustive")
            } else {
                self.sample(image, &radices, rng)
            };
            let mut crash = CrashImage { media: self.image(&choices), point, acked };
            report.images += 1;
            if let Err(message) = check(&mut crash) {
                report.failure_count += 1;
                if report.failures.len() < FAILURES_KEPT {
                    report.failures.push(Failure { point, image, strategy, message });
                }
            }
        }
    }

    fn sample<R: Rng + ?Sized>(&self, image: u64, radices: &[usize], rng: &mut R) -> (Vec<usize>, &'static str) {
        match image {
            0 => (vec![0; radices.len()], "nothing pending reached media"),
            1 => (radices.iter().map(|r| r - 1).collect(), "everything pending reached media"),
            _ => match rng.gen_range(0..3) {
                0 => (radices.iter().map(|&r| rng.gen_range(0..r)).collect(), "independent words"),
                1 => (self.line_moments(rng), "whole lines at random moments"),
                _ => (self.global_prefix(rng), "program-order prefix"),
            },
        }
    }

    /// Each line is caught at a random moment of its own history.
    fn line_moments<R: Rng + ?Sized>(&self, rng: &mut R) -> Vec<usize> {
        let mut moment_of_line: BTreeMap<usize, u64> = BTreeMap::new();
        let mut seqs_of_line: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        for (&index, history) in &self.pending {
            seqs_of_line.entry(index / WORDS_PER_LINE).or_default().extend(history.iter().map(|&(s, _)| s));
        }
        for (line, seqs) in seqs_of_line {
            let pick = rng.gen_range(0..=seqs.len());
            let moment = if pick == 0 { 0 } else { seqs[pick - 1] };
            moment_of_line.insert(line, moment);
        }
        self.pending
            .iter()
            .map(|(&index, history)| prefix_len(history, moment_of_line[&(index / WORDS_PER_LINE)]))
            .collect()
    }

    /// Everything stored up to a random moment reached media, nothing after.
    fn global_prefix<R: Rng + ?Sized>(&self, rng: &mut R) -> Vec<usize> {
        let min_seq = self.pending.values().filter_map(|h| h.first()).map(|&(s, _)| s).min().unwrap_or(0);
        let moment = rng.gen_range(min_seq.saturating_sub(1)..=self.seq);
        self.pending.values().map(|history| prefix_len(history, moment)).collect()
    }
}

fn prefix_len(history: &[(u64, u64)], moment: u64) -> usize {
    history.iter().take_while(|&&(seq, _)| seq <= moment).count()
}

fn mixed_radix(mut n: u64, radices: &[usize]) -> Vec<usize> {
    radices
        .iter()
        .map(|&r| {
            let digit = (n % r as u64) as usize;
            n /= r as u64;
            digit
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem::Media;

    fn config() -> Config {
        Config::with_seed(7)
    }

    #[test]
    fn persisted_word_survives_every_image() {
        let mut media = TracedMedia::new(256);
        media.persist_u64(0, 11);
        media.mark(1);
        media.write_u64(64, 22);
        let report = explore(&media, &config(), |image| {
            if image.acked.contains(&1) && image.media.read_u64(0) != 11 {
                return Err("acked word lost".into());
            }
            Ok(())
        });
        report.assert_ok();
        // Points: before the fence, and the end.
        assert_eq!(report.crash_points, 2);
        // Before the fence: word 0 pending (2 images); at the end: word 64 pending (2).
        assert_eq!(report.images, 4);
    }

    #[test]
    fn store_after_flush_is_not_covered_by_it() {
        let mut media = TracedMedia::new(128);
        media.write_u64(0, 1);
        media.flush(0, 8);
        media.write_u64(8, 2); // same line, after the flush
        media.drain();
        media.mark(1);
        let mut saw_lost = false;
        let report = explore(&media, &config(), |image| {
            if image.acked.contains(&1) {
                assert_eq!(image.media.read_u64(0), 1, "flushed and fenced");
                saw_lost |= image.media.read_u64(8) == 0;
            }
            Ok(())
        });
        report.assert_ok();
        assert!(saw_lost, "the unflushed store must be allowed to be lost");
    }

    #[test]
    fn canary_missing_flush_is_caught() {
        // A "structure" that fences but forgets to flush: the checker must fail it.
        let mut media = TracedMedia::new(128);
        for i in 1..=4u64 {
            media.write_u64(0, i);
            media.drain();
            media.mark(i);
        }
        let report = explore(&media, &config(), |image| {
            let last = image.acked.last().copied().unwrap_or(0);
            if image.media.read_u64(0) < last {
                return Err(format!("acked {last}, found {}", image.media.read_u64(0)));
            }
            Ok(())
        });
        assert!(!report.is_ok(), "{}", report.describe());
    }

    #[test]
    fn torn_multiword_write_is_produced() {
        let mut media = TracedMedia::new(256);
        media.write(0, &[0xAB; 64]);
        media.persist(0, 64);
        let mut torn = 0;
        explore(&media, &config(), |image| {
            let mut bytes = [0u8; 64];
            image.media.read(0, &mut bytes);
            let written = bytes.chunks(8).filter(|w| w[0] == 0xAB).count();
            if written > 0 && written < 8 {
                torn += 1;
            }
            Ok(())
        });
        assert!(torn > 0);
    }

    #[test]
    fn non_temporal_store_needs_only_a_fence() {
        let mut media = TracedMedia::new(1024);
        media.write_nt(0, &[5; 512]);
        media.drain();
        media.mark(1);
        media.write_u64(512, 9);
        let report = explore(&media, &config(), |image| {
            if image.acked.contains(&1) && image.media.bytes()[..512].iter().any(|&b| b != 5) {
                return Err("nt store lost after fence".into());
            }
            Ok(())
        });
        report.assert_ok();
    }

    #[test]
    fn crash_state_draws_only_what_the_hardware_could_leave() {
        let mut media = TracedMedia::new(256);
        let mut state = CrashState::new(media.initial());
        media.persist_u64(0, 11);
        media.write(64, &[0xAB; 64]);
        state.fold(&mut media);
        assert!(media.ops().is_empty(), "folding empties the trace");
        assert_eq!(state.pending_words(), 8, "the unflushed line");
        let mut rng = StdRng::seed_from_u64(5);
        let (mut lost, mut landed, mut torn) = (0, 0, 0);
        for _ in 0..200 {
            let (image, _) = state.draw(&mut rng);
            assert_eq!(image.read_u64(0), 11, "a persisted word is always there");
            let mut line = [0u8; 64];
            image.read(64, &mut line);
            match line.chunks(8).filter(|w| w[0] == 0xAB).count() {
                0 => lost += 1,
                8 => landed += 1,
                _ => torn += 1,
            }
        }
        assert!(lost > 0 && landed > 0 && torn > 0, "lost {lost}, landed {landed}, torn {torn}");
        media.flush(64, 64);
        media.drain();
        state.fold(&mut media);
        assert_eq!(state.pending_words(), 0, "flushed and fenced");
        assert_eq!(state.durable(), media.current());
    }

    #[test]
    fn same_seed_replays_the_same_images() {
        let mut media = TracedMedia::new(4096);
        media.write(0, &[1; 4096]);
        media.persist(0, 4096);
        let fingerprint = |seed| {
            let mut sums = Vec::new();
            explore(&media, &Config::with_seed(seed), |image| {
                sums.push(image.media.bytes().iter().map(|&b| b as u64).sum::<u64>());
                Ok(())
            });
            sums
        };
        assert_eq!(fingerprint(3), fingerprint(3));
        assert_ne!(fingerprint(3), fingerprint(4));
    }
}
