//! Crash checks of what Raft storage asks of an [`AppendLog`]: batch
//! append, suffix truncation, restart at another LSN, mixed with single
//! appends and prefix truncation over several laps of a small ring.
//!
//! Each step is marked once it has returned. An image passes only if
//! `open` succeeds and:
//! - the recovered `(head, next)` is the acknowledged state or the state
//!   after the step in flight; a batch in flight may also leave any prefix
//!   of itself, and a restart inside the log its intermediate state (the
//!   suffix dropped, the head not yet moved);
//! - every recovered entry is, byte for byte, the payload its LSN held in
//!   the acknowledged state (or, at LSNs the step in flight appends, in the
//!   state after it): a dropped entry that came back has an older payload.
//!
//! Payloads are unique per write, so a re-appended LSN never matches its
//! dropped predecessor. Those of 16 B and more are laid out as the Raft
//! store's extent-form entries are: a first word unique per write, then a
//! body sealed by its own CRC-32C. Before format version 3 this check used
//! unsealed payloads only, so a torn re-append that mixed the new header
//! and first word with the dropped entry's sealed body failed the plain
//! CRC-32C by chance, and the check missed what the zero-copy member's
//! check found: with a sealed body that mix validated (`docs/FORMAT.md`,
//! "Entry checksum"). After a suffix truncation the next step re-appends
//! entries of the dropped sizes, which land where the dropped ones were:
//! a torn re-append over an unscrubbed dropped entry would revive it.
//! Phase two reopens images where a torn append or batch left entries past
//! the recovered tail, appends the same sizes again, and explores again.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pmem::trace::TracedMedia;
use pmem::{Media, Padding};
use pmwire_crashcheck::{explore, Config, CrashImage, Report};

use crate::{AppendError, AppendLog, Faults, LogConfig, Lsn, TailStrategy};

/// Where the log starts in its media.
const BASE: u64 = 256;
/// Payload lengths, in turn (multi-line, non-temporal, empty).
const LENS: [usize; 9] = [24, 130, 8, 200, 0, 60, 270, 40, 100];
/// Phase-two runs per phase-one run.
const PHASE_TWO_RUNS: usize = 8;

/// A step's effect on `(head, next)`.
type State = (u64, u64);

/// What recovery may produce after each number of acknowledged steps.
#[derive(Default)]
struct History {
    /// `(head, next)` after each number of completed steps.
    states: Vec<State>,
    /// Per step: outcomes allowed while it is in flight besides before/after.
    extra: Vec<Vec<State>>,
    /// Per step: whether it may leave a prefix of itself (a batch).
    prefix: Vec<bool>,
    /// Per LSN: `(first state holding it, payload)`, oldest first.
    values: BTreeMap<Lsn, Vec<(usize, Vec<u8>)>>,
    /// Per step: the length/CRC word `(offset, value)` and payload length
    /// of each entry it appended.
    written: Vec<Vec<(u64, u64, usize)>>,
}

impl History {
    fn new(log: &AppendLog, media: &impl Media) -> History {
        let mut history = History { states: vec![(log.head(), log.next_lsn())], ..History::default() };
        for (lsn, payload) in log.read_all(media) {
            history.values.insert(lsn, vec![(0, payload)]);
        }
        history
    }

    /// Records a completed step.
    fn push(&mut self, log: &AppendLog, extra: Vec<State>, prefix: bool, written: Vec<(u64, u64, usize)>) {
        self.states.push((log.head(), log.next_lsn()));
        self.extra.push(extra);
        self.prefix.push(prefix);
        self.written.push(written);
    }

    /// The payload `lsn` holds in state `state`.
    fn value(&self, lsn: Lsn, state: usize) -> Option<&Vec<u8>> {
        self.values.get(&lsn)?.iter().rev().find(|(from, _)| *from <= state).map(|(_, v)| v)
    }

    /// Judges a recovered `(head, entries)` after `acked` completed steps.
    fn judge(&self, acked: usize, head: u64, entries: &[(Lsn, Vec<u8>)]) -> Result<(), String> {
        let before = self.states[acked];
        let after = self.states.get(acked + 1).copied().unwrap_or(before);
        let found = (head, head + entries.len() as u64);
        let in_flight = acked < self.extra.len();
        let extra = in_flight && self.extra[acked].contains(&found);
        let prefix = in_flight && self.prefix[acked] && head == after.0 && (before.1..=after.1).contains(&found.1);
        if found != before && found != after && !extra && !prefix {
            return Err(format!("recovered (head, next) {found:?}: acked {before:?} or in flight {after:?}"));
        }
        for (i, (lsn, payload)) in entries.iter().enumerate() {
            if *lsn != head + i as u64 {
                return Err(format!("entry {i} numbered {lsn}, expected {}", head + i as u64));
            }
            let state = if *lsn < before.1 { acked } else { acked + 1 };
            if self.value(*lsn, state) != Some(payload) {
                return Err(format!("entry {lsn} recovered as {payload:?}, held {:?}", self.value(*lsn, state)));
            }
        }
        Ok(())
    }
}

/// Crash-checks the storage operations on a log with `tail` (and planted
/// `faults`): unpadded and line-padded runs, each with a phase two.
pub fn check_storage_ops(tail: TailStrategy, faults: Faults, config: &Config) -> Report {
    let mut report = Report { seed: config.seed, ..Report::default() };
    for (padding, capacity, steps) in [(Padding::None, 1024, 170), (Padding::Line, 2048, 80)] {
        let mut log_config = LogConfig::new(capacity, tail).with_padding(padding);
        log_config.faults = faults;
        report.merge(storage_run(log_config, steps, config));
    }
    report
}

/// One phase-one run and its phase-two runs.
fn storage_run(log_config: LogConfig, steps: usize, config: &Config) -> Report {
    let faults = log_config.faults;
    let mut media = TracedMedia::new((BASE + AppendLog::required_size(&log_config)) as usize);
    let mut log = AppendLog::create_at(&mut media, BASE, log_config, 1).expect("create");
    media.checkpoint();
    let mut history = History::new(&log, &media);
    let mut driver = Driver { salt: 1, writes: 0, pending: Vec::new() };
    driver.run(&mut media, &mut log, &mut history, steps);
    let (mut report, seeds) = explore_history(&media, &history, faults, config, true);
    for (run, seed) in seeds.into_iter().enumerate() {
        let mut media = TracedMedia::from_image(seed.image);
        let mut log = AppendLog::open_with_faults(&mut media, BASE, faults).expect("image passed phase one");
        let mut history = History::new(&log, &media);
        let mut driver = Driver { salt: 2 + run as u64, writes: 0, pending: seed.lens };
        driver.run(&mut media, &mut log, &mut history, 25);
        report.merge(explore_history(&media, &history, faults, config, false).0);
    }
    report
}

/// A phase-one image that seeds a phase two: an append or batch was in
/// flight, recovery lost some of its entries, and the length/CRC words of
/// `present` of them are on the media.
struct Seed {
    point: usize,
    present: usize,
    image: Vec<u8>,
    /// Payload lengths of the lost entries, to append again first.
    lens: Vec<usize>,
}

/// Explores `media` against `history`; with `keep_seeds`, also returns
/// up to [`PHASE_TWO_RUNS`] seeds, spread over the run.
fn explore_history(
    media: &TracedMedia,
    history: &History,
    faults: Faults,
    config: &Config,
    keep_seeds: bool,
) -> (Report, Vec<Seed>) {
    let mut seeds: Vec<Seed> = Vec::new();
    let report = explore(media, config, |image: &mut CrashImage| {
        let acked = image.acked.len();
        let before = image.media.bytes().to_vec();
        let recovered = catch_unwind(AssertUnwindSafe(|| {
            let log = AppendLog::open_with_faults(&mut image.media, BASE, faults).map_err(|e| format!("open: {e}"))?;
            Ok::<_, String>((log.head(), log.read_all(&image.media)))
        }));
        let (head, entries) = recovered.map_err(|_| "recovery panicked".to_string())??;
        history.judge(acked, head, &entries)?;
        if keep_seeds {
            offer_seed(&mut seeds, history, acked, head + entries.len() as u64, image.point, before);
        }
        Ok(())
    });
    (report, spread(seeds, PHASE_TWO_RUNS))
}

/// Keeps `image` as a seed if the step in flight appended entries that
/// recovery lost and some of them left their length/CRC word behind (one
/// seed per crash point, the one with the most words).
fn offer_seed(seeds: &mut Vec<Seed>, history: &History, acked: usize, next: u64, point: usize, image: Vec<u8>) {
    let Some(written) = history.written.get(acked).filter(|w| !w.is_empty()) else { return };
    let first = history.states[acked].1;
    let lost = &written[next.saturating_sub(first).min(written.len() as u64) as usize..];
    let word = |at: u64| u64::from_le_bytes(image[at as usize..at as usize + 8].try_into().expect("8 bytes"));
    let present = lost.iter().filter(|&&(at, value, _)| word(at) == value).count();
    if present == 0 {
        return;
    }
    let lens = lost.iter().map(|&(_, _, len)| len).collect();
    let seed = Seed { point, present, image, lens };
    match seeds.last_mut() {
        Some(last) if last.point == point => {
            if seed.present > last.present {
                *last = seed;
            }
        }
        _ => seeds.push(seed),
    }
}

/// `count` seeds evenly spaced over `seeds`.
fn spread(seeds: Vec<Seed>, count: usize) -> Vec<Seed> {
    let (found, count) = (seeds.len(), count.min(seeds.len()));
    let chosen: Vec<usize> = (0..count).map(|i| i * found / count).collect();
    seeds.into_iter().enumerate().filter(|(i, _)| chosen.contains(i)).map(|(_, s)| s).collect()
}

/// Drives a log through a deterministic mix of steps.
struct Driver {
    salt: u64,
    /// Entries written so far: every payload is unique.
    writes: u64,
    /// Payload lengths the next step appends as one batch (the sizes of
    /// entries just dropped or lost, so they land where those were).
    pending: Vec<usize>,
}

impl Driver {
    fn run(&mut self, media: &mut TracedMedia, log: &mut AppendLog, history: &mut History, steps: usize) {
        for i in 0..steps {
            let low = log.free_bytes() < log.config().entry_size(300) * 2;
            if !self.pending.is_empty() && !low {
                let lens = std::mem::take(&mut self.pending);
                self.append(media, log, history, &lens);
            } else if low || i % 13 == 12 {
                let keep = log.head() + log.len().div_ceil(2);
                log.truncate(media, keep).expect("truncate within the log");
                history.push(log, Vec::new(), false, Vec::new());
            } else if i % 9 == 5 && log.len() >= 2 {
                self.truncate_suffix(media, log, history, 1 + (i / 9) % 3);
            } else if i % 29 == 28 {
                self.restart(media, log, history, i);
            } else {
                let count = if i % 4 == 1 { 2 + i % 3 } else { 1 };
                let lens: Vec<usize> = (0..count).map(|k| LENS[(i + k * 5) % LENS.len()]).collect();
                self.append(media, log, history, &lens);
            }
            media.mark(history.extra.len() as u64 - 1);
        }
    }

    /// Appends entries of `lens` (a batch if more than one); a full log
    /// drops its older half first, as a step of its own.
    fn append(&mut self, media: &mut TracedMedia, log: &mut AppendLog, history: &mut History, lens: &[usize]) {
        let payloads: Vec<Vec<u8>> = lens.iter().map(|&len| self.payload(len)).collect();
        let refs: Vec<&[u8]> = payloads.iter().map(|p| &p[..]).collect();
        let lsns = match log.append_batch(media, &refs) {
            Ok(lsns) => lsns,
            Err(AppendError::Full { .. }) => {
                let keep = log.head() + log.len().div_ceil(2);
                log.truncate(media, keep).expect("truncate within the log");
                return history.push(log, Vec::new(), false, Vec::new());
            }
            Err(e) => panic!("append: {e}"),
        };
        let state = history.states.len();
        let mut written = Vec::new();
        for (lsn, payload) in lsns.zip(payloads) {
            let at = log.payload_range(media, lsn).expect("just appended").start - 8;
            written.push((at, media.read_u64(at), payload.len()));
            history.values.entry(lsn).or_default().push((state, payload));
        }
        history.push(log, Vec::new(), lens.len() > 1, written);
    }

    /// Drops the last `count` entries (at most all) and queues their sizes.
    fn truncate_suffix(&mut self, media: &mut TracedMedia, log: &mut AppendLog, history: &mut History, count: usize) {
        let from = log.next_lsn() - (count as u64).min(log.len());
        self.pending = log.iter_from(media, from).map(|(_, payload)| payload.len()).collect();
        log.truncate_suffix(media, from).expect("truncate within the log");
        history.push(log, Vec::new(), false, Vec::new());
    }

    /// Restarts past the end, or one entry before it (then the state with
    /// the suffix dropped and the head not yet moved may be recovered).
    fn restart(&mut self, media: &mut TracedMedia, log: &mut AppendLog, history: &mut History, i: usize) {
        let inside = i % 2 == 1 && log.len() >= 2;
        let first = if inside { log.next_lsn() - 1 } else { log.next_lsn() + 3 };
        let extra = if inside { vec![(log.head(), first)] } else { Vec::new() };
        log.restart_at(media, first).expect("restart within bounds");
        history.push(log, extra, false, Vec::new());
    }

    /// A payload no other write of this run has; from 16 B on, its bytes
    /// after the first word are sealed by their own CRC-32C (the last 4).
    fn payload(&mut self, len: usize) -> Vec<u8> {
        self.writes += 1;
        let seed = self.salt.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ self.writes.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let mut p: Vec<u8> = (0..len).map(|i| (seed >> (8 * (i % 8))) as u8 ^ (i / 8) as u8).collect();
        if len >= 16 {
            let crc = pmem::crc::crc32c(&p[8..len - 4]);
            p[len - 4..].copy_from_slice(&crc.to_le_bytes());
        }
        p
    }
}
