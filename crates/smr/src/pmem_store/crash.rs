//! Crash-state checks of [`PmemDurable`], and the planted bug they must catch.
//!
//! [`check_store`] drives a store on a [`TracedMedia`] through a scripted
//! Raft-like history (batch and single appends, conflicting appends that
//! drop a suffix and write over it, hard-state stores after a lazily noted
//! commit, membership stores, compactions and snapshot installs, over
//! several laps of a small log ring), running a [`MemDurable`] beside it:
//! after each step both must show the same state, and step `k` is marked
//! once it returned. [`explore`] then recovers every crash image with
//! `open`, twice (the second `open` sees what the first one finished),
//! and accepts an image only if:
//! - `open` succeeds, and both opens show the same state;
//! - that state (entries with their terms, types and bytes, first and last
//!   index, hard state, membership, snapshot with its data) is the
//!   acknowledged state or the state after the step in flight; an append
//!   in flight may also leave the acknowledged log up to its first index
//!   followed by a prefix of its entries (the conflicting suffix is
//!   dropped first, and a self-validating log recovers a prefix of a batch).
//!
//! So nothing acknowledged is lost, and no dropped entry comes back.
//! [`check_format`] checks that a format a crash interrupted is refused,
//! also over an older store on the same media.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pmem::trace::TracedMedia;
use pmem::MemMedia;
use pmwire_crashcheck::{explore, Check, Config, CrashImage, Report};
use pmwire_log::{LogConfig, TailStrategy};
use raft::eraftpb::{ConfState, Entry, EntryType, HardState, SnapshotMetadata};

use super::{OpenError, PmemDurable, StoreFaults};
use crate::store::{Durable, MemDurable};

mod staging;
pub use staging::check_staging;

/// The cluster and replica every checked store belongs to.
const CLUSTER: u64 = 0x005e_edc1;
const REPLICA: u64 = 2;
/// Entry space of the checked log: small, so the script laps it.
const LOG_BYTES: u64 = 4096;
/// Largest snapshot the script takes.
const SNAP_BYTES: u64 = 400;
/// Rounds of the script.
const ROUNDS: u64 = 30;

/// The crash checks of the replica store, correct ones first, then the
/// planted bugs (for `pmwire check`).
pub fn checks() -> Vec<Check> {
    vec![
        Check { name: "replica store, naive log tail", planted: false, run: |c| check_store(TailStrategy::Naive, StoreFaults::default(), c) },
        Check { name: "replica store, rotating log tail", planted: false, run: |c| check_store(TailStrategy::ROTATING_PAPER, StoreFaults::default(), c) },
        Check { name: "replica store, self-validating log", planted: false, run: |c| check_store(TailStrategy::SelfValidating, StoreFaults::default(), c) },
        Check { name: "replica store, interrupted format", planted: false, run: check_format },
        Check { name: "replica store: suffix truncation not durable (naive)", planted: true, run: |c| check_store(TailStrategy::Naive, planted(), c) },
        Check {
            name: "replica store: suffix truncation not durable (self-validating)",
            planted: true,
            run: |c| check_store(TailStrategy::SelfValidating, planted(), c),
        },
        Check {
            name: "replica store: hard state durable before its entries",
            planted: true,
            run: |c| check_store(TailStrategy::SelfValidating, hard_state_first(), c),
        },
        Check {
            name: "replica store: vote never flushed",
            planted: true,
            run: |c| check_store(TailStrategy::SelfValidating, unflushed_vote(), c),
        },
        Check { name: "replica store, snapshot staging area", planted: false, run: |c| check_staging(StoreFaults::default(), c) },
        Check {
            name: "replica store: staging record before its bytes",
            planted: true,
            run: |c| check_staging(StoreFaults { staging_record_before_data: true, ..StoreFaults::default() }, c),
        },
        Check {
            name: "replica store: staging area installed unread",
            planted: true,
            run: |c| check_staging(StoreFaults { unverified_staging: true, ..StoreFaults::default() }, c),
        },
    ]
}

fn planted() -> StoreFaults {
    StoreFaults { unflushed_suffix_truncation: true, ..StoreFaults::default() }
}

fn hard_state_first() -> StoreFaults {
    StoreFaults { hard_state_before_entries: true, ..StoreFaults::default() }
}

fn unflushed_vote() -> StoreFaults {
    StoreFaults { unflushed_vote: true, ..StoreFaults::default() }
}

/// An entry as compared: index, term, type, context, data.
type EntryView = (u64, u64, i32, Vec<u8>, Vec<u8>);
/// A membership as compared: voters, learners, outgoing voters, next learners, auto-leave.
type ConfView = (Vec<u64>, Vec<u64>, Vec<u64>, Vec<u64>, bool);

/// Everything a [`Durable`] shows, as plain values.
#[derive(Clone, Debug, PartialEq, Eq)]
struct View {
    first: u64,
    last: u64,
    entries: Vec<EntryView>,
    hard: (u64, u64, u64),
    conf: ConfView,
    snap: (u64, u64, ConfView, Vec<u8>),
}

fn conf_view(c: &ConfState) -> ConfView {
    (c.voters.clone(), c.learners.clone(), c.voters_outgoing.clone(), c.learners_next.clone(), c.auto_leave)
}

fn view(d: &impl Durable) -> View {
    let entries = (d.first_index()..=d.last_index())
        .map(|i| {
            let e = d.entry(i).expect("a held entry");
            assert_eq!(d.term(i), Some(e.term), "term({i}) agrees with entry({i})");
            (e.index, e.term, e.entry_type as i32, e.context.to_vec(), e.data.to_vec())
        })
        .collect();
    let hs = d.hard_state();
    let (meta, data) = d.snapshot();
    assert_eq!(d.term(meta.index), Some(meta.term), "the snapshot's index has its term");
    View {
        first: d.first_index(),
        last: d.last_index(),
        entries,
        hard: (hs.term, hs.vote, hs.commit),
        conf: conf_view(&d.conf_state()),
        snap: (meta.index, meta.term, conf_view(meta.get_conf_state()), data),
    }
}

/// What recovery may show after each number of acknowledged steps.
#[derive(Default)]
struct History {
    /// The state after each number of completed steps.
    states: Vec<View>,
    /// Per step: states allowed while it is in flight besides before/after.
    extra: Vec<Vec<View>>,
    /// Per step: what it was (for messages).
    kinds: Vec<&'static str>,
}

impl History {
    fn judge(&self, acked: usize, found: &View) -> Result<(), String> {
        let before = &self.states[acked];
        if found == before || self.states.get(acked + 1) == Some(found) {
            return Ok(());
        }
        if self.extra.get(acked).is_some_and(|extra| extra.contains(found)) {
            return Ok(());
        }
        let kind = self.kinds.get(acked).copied().unwrap_or("nothing");
        let differs = found.entries.iter().zip(&before.entries).find(|(f, b)| f != b).map(|(f, _)| f.0);
        Err(format!(
            "after {acked} steps ({kind} in flight) recovered first {} last {} hard {:?} snapshot at {}; acknowledged: first {} last {} hard {:?} snapshot at {}; first entry unlike the acknowledged one: {differs:?}",
            found.first, found.last, found.hard, found.snap.0, before.first, before.last, before.hard, before.snap.0
        ))
    }
}

/// Drives the store and its DRAM model through the script.
struct Driver {
    store: PmemDurable<TracedMedia>,
    model: MemDurable,
    history: History,
    writes: u64,
}

impl Driver {
    /// Runs one step on both, checks they agree, and marks it acknowledged.
    fn step(&mut self, kind: &'static str, extra: Vec<View>, op: impl Fn(&mut dyn DurableDyn)) {
        op(&mut self.store);
        op(&mut self.model);
        let after = view(&self.store);
        assert_eq!(after, view(&self.model), "the store and its DRAM model agree after {kind}");
        self.history.states.push(after);
        self.history.extra.push(extra);
        self.history.kinds.push(kind);
        self.store.media.mark(self.history.kinds.len() as u64 - 1);
    }

    /// Bytes no other write of the run has.
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        self.writes += 1;
        let seed = self.writes.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (0..len).map(|i| (seed >> (8 * (i % 8))) as u8 ^ (i / 8) as u8).collect()
    }

    /// Appends `count` entries of `term` from `from`; in flight, the log up
    /// to `from` and any prefix of the new entries may be recovered.
    fn append(&mut self, from: u64, count: u64, term: u64) {
        let entries: Vec<Entry> = (0..count)
            .map(|k| {
                let len = [24usize, 130, 0, 200, 60, 8][((from + k) % 6) as usize];
                let kind = if (from + k).is_multiple_of(11) { EntryType::EntryConfChange } else { EntryType::EntryNormal };
                let (data, context) = (self.bytes(len), self.bytes(((from + k) % 3) as usize * 4));
                Entry { entry_type: kind, term, index: from + k, data: data.into(), context: context.into(), ..Default::default() }
            })
            .collect();
        let before = view(&self.store);
        let kept: Vec<EntryView> = before.entries.iter().filter(|e| e.0 < from).cloned().collect();
        let extra = (0..count)
            .map(|k| {
                let mut v = before.clone();
                v.entries = kept.clone();
                v.entries.extend(entries[..k as usize].iter().map(|e| (e.index, e.term, e.entry_type as i32, e.context.to_vec(), e.data.to_vec())));
                v.last = from - 1 + k;
                v
            })
            .collect();
        let kind = if from <= before.last { "conflicting append" } else { "append" };
        self.step(kind, extra, |d| d.append_dyn(&entries));
    }

    fn hard_state(&mut self, term: u64, vote: u64, commit: u64) {
        self.store.note_commit(commit);
        self.model.note_commit(commit);
        let hs = HardState { term, vote, commit, ..Default::default() };
        self.step("hard state", Vec::new(), |d| d.hard_dyn(&hs));
    }

    /// A compaction at `index`, its record written in one go or (`parts`)
    /// in parts of 37 bytes, as a replica takes a large snapshot over
    /// several turns: a crash anywhere among the parts leaves the store
    /// as before.
    fn compact(&mut self, index: u64, conf: &ConfState, parts: bool) {
        let mut meta = SnapshotMetadata { index, term: self.store.term(index).expect("held"), ..Default::default() };
        meta.set_conf_state(conf.clone());
        let data = self.bytes(100 + (index % 3) as usize * 100);
        if parts {
            self.step("compaction in parts", Vec::new(), |d| d.compact_in_parts_dyn(&meta, &data));
        } else {
            self.step("compaction", Vec::new(), |d| d.compact_dyn(&meta, &data));
        }
    }

    fn install(&mut self, index: u64, term: u64, conf: &ConfState) {
        let mut meta = SnapshotMetadata { index, term, ..Default::default() };
        meta.set_conf_state(conf.clone());
        let data = self.bytes(SNAP_BYTES as usize - (index % 2) as usize * 150);
        self.step("snapshot install", Vec::new(), |d| d.install_dyn(&meta, &data));
    }
}

/// The mutating calls, object-safe, so one closure drives store and model.
trait DurableDyn {
    fn append_dyn(&mut self, entries: &[Entry]);
    fn hard_dyn(&mut self, hs: &HardState);
    fn conf_dyn(&mut self, cs: &ConfState);
    fn compact_dyn(&mut self, meta: &SnapshotMetadata, data: &[u8]);
    fn compact_in_parts_dyn(&mut self, meta: &SnapshotMetadata, data: &[u8]);
    fn install_dyn(&mut self, meta: &SnapshotMetadata, data: &[u8]);
}

impl<D: Durable> DurableDyn for D {
    fn append_dyn(&mut self, entries: &[Entry]) {
        self.append(entries).expect("append");
    }
    fn hard_dyn(&mut self, hs: &HardState) {
        self.set_hard_state(hs).expect("hard state");
    }
    fn conf_dyn(&mut self, cs: &ConfState) {
        self.set_conf_state(cs).expect("membership");
    }
    fn compact_dyn(&mut self, meta: &SnapshotMetadata, data: &[u8]) {
        self.compact(meta, data).expect("compact");
    }
    /// In parts where the store takes them (the DRAM model: in one go).
    fn compact_in_parts_dyn(&mut self, meta: &SnapshotMetadata, data: &[u8]) {
        if !self.compacts_in_parts() {
            return self.compact_dyn(meta, data);
        }
        for (i, part) in data.chunks(37).enumerate() {
            self.compact_part(i as u64 * 37, part).expect("compaction part");
        }
        self.compact_parts(meta, data.len() as u64).expect("compaction in parts");
    }
    fn install_dyn(&mut self, meta: &SnapshotMetadata, data: &[u8]) {
        self.install_snapshot(meta, data).expect("install");
    }
}

/// The script: per round a new term, a batch, a single append, a
/// conflicting append over the last two entries, a hard-state store, a
/// compaction (every other one written in parts); every third a membership change,
/// every fourth a snapshot install past the end.
fn script(d: &mut Driver) {
    let voters = vec![1, 2, 3];
    let mut conf = ConfState { voters: voters.clone(), ..Default::default() };
    let mut term = 1;
    for round in 0..ROUNDS {
        term += 1;
        let commit = d.store.hard_state().commit;
        d.hard_state(term, 1 + round % 3, commit);
        d.append(d.store.last_index() + 1, 3 + round % 2, term);
        d.append(d.store.last_index() + 1, 1, term);
        let last = d.store.last_index();
        d.append(last - 1, 1 + round % 3, term + 1);
        term += 1;
        let commit = d.store.last_index() - 1;
        d.hard_state(term, 1 + round % 3, commit);
        let first = d.store.first_index();
        d.compact(first + (commit - first) / 2, &conf, round % 2 == 1);
        if round % 3 == 2 {
            conf.learners = vec![4 + round % 2];
            d.step("membership", Vec::new(), |s| s.conf_dyn(&conf));
        }
        if round % 4 == 3 {
            conf.voters = if round % 8 == 3 { vec![1, 2, 3, 4, 5] } else { voters.clone() };
            d.install(d.store.last_index() + 5, term, &conf);
        }
    }
}

/// Crash-checks the store with a log of `tail` and planted `faults`.
pub fn check_store(tail: TailStrategy, faults: StoreFaults, config: &Config) -> Report {
    let log = LogConfig::new(LOG_BYTES, tail);
    let media = TracedMedia::new(PmemDurable::<TracedMedia>::required_size(&log, SNAP_BYTES) as usize);
    let store = PmemDurable::format(media, CLUSTER, REPLICA, &[1, 2, 3], log).expect("format");
    let mut media = store.into_media();
    media.checkpoint();
    let store = PmemDurable::open_with_faults(media, CLUSTER, REPLICA, faults).expect("open");
    let mut driver = Driver { model: MemDurable::new(&[1, 2, 3]), history: History::default(), writes: 0, store };
    driver.history.states.push(view(&driver.store));
    assert_eq!(driver.history.states[0], view(&driver.model), "a new store is an empty MemDurable");
    script(&mut driver);
    let history = driver.history;
    explore(&driver.store.media, config, |image: &mut CrashImage| {
        let found = recover(image.media.clone())?;
        history.judge(image.acked.len(), &found)
    })
}

/// Opens an image twice and returns what both show.
fn recover(media: MemMedia) -> Result<View, String> {
    let opened = catch_unwind(AssertUnwindSafe(|| {
        let store = PmemDurable::open(media, CLUSTER, REPLICA).map_err(|e| format!("open: {e}"))?;
        let first = view(&store);
        let again = PmemDurable::open(store.into_media(), CLUSTER, REPLICA).map_err(|e| format!("second open: {e}"))?;
        Ok::<_, String>((first, view(&again)))
    }));
    let (first, second) = opened.map_err(|_| "recovery panicked".to_string())??;
    if first != second {
        return Err("a second open shows another state than the first".into());
    }
    Ok(first)
}

/// Crash-checks `format`: over zeroed media, and over an older store of
/// another cluster on the same media. An image must open as the new empty
/// store or be refused as not formatted (or, before the old superblock is
/// cleared, still be the old store, whole).
pub fn check_format(config: &Config) -> Report {
    let log = LogConfig::new(LOG_BYTES, TailStrategy::SelfValidating);
    let size = PmemDurable::<TracedMedia>::required_size(&log, SNAP_BYTES) as usize;
    let empty = view(&MemDurable::new(&[1, 2, 3]));
    let mut report = Report { seed: config.seed, ..Report::default() };
    let mut old = PmemDurable::format(MemMedia::new(size), CLUSTER + 1, REPLICA, &[1, 2], log).expect("format");
    let entry = Entry { term: 1, index: 1, data: b"old".to_vec().into(), ..Default::default() };
    old.append(&[entry]).expect("append");
    let old_view = view(&old);
    for initial in [vec![0u8; size], old.media().bytes().to_vec()] {
        let media = TracedMedia::from_image(initial);
        let store = PmemDurable::format(media, CLUSTER, REPLICA, &[1, 2, 3], log).expect("format");
        let mut media = store.into_media();
        media.mark(0);
        report.merge(explore(&media, config, |image: &mut CrashImage| {
            let formatted = !image.acked.is_empty();
            match PmemDurable::open(image.media.clone(), CLUSTER, REPLICA) {
                Ok(store) if view(&store) == empty => Ok(()),
                Ok(store) => Err(format!("a new store opens with entries up to {}", store.last_index())),
                Err(OpenError::NotFormatted(_)) if !formatted => Ok(()),
                Err(OpenError::WrongCluster { .. }) if !formatted => {
                    let old = PmemDurable::open(image.media.clone(), CLUSTER + 1, REPLICA).map_err(|e| format!("old store: {e}"))?;
                    (view(&old) == old_view).then_some(()).ok_or_else(|| "the old store opens changed".to_string())
                }
                Err(e) => Err(format!("open after {} acknowledged formats: {e}", image.acked.len())),
            }
        }));
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::default()
    }

    /// The store over `tail` passes every crash image.
    fn survives(tail: TailStrategy, label: &str) {
        let report = check_store(tail, StoreFaults::default(), &config());
        eprintln!("{label}: {}", report.describe());
        report.assert_passes_at_least(1000);
    }

    /// The planted `faults` are caught over `tail`.
    fn caught(tail: TailStrategy, faults: StoreFaults, label: &str) {
        let report = check_store(tail, faults, &config());
        eprintln!("planted, {label}: {}", report.describe());
        report.assert_caught();
    }

    #[test]
    fn naive_tail_store_survives_every_crash() {
        survives(TailStrategy::Naive, "naive");
    }

    #[test]
    fn rotating_tail_store_survives_every_crash() {
        survives(TailStrategy::ROTATING_PAPER, "rotating");
    }

    #[test]
    fn self_validating_store_survives_every_crash() {
        survives(TailStrategy::SelfValidating, "self-validating");
    }

    #[test]
    fn interrupted_format_is_refused() {
        let report = check_format(&config());
        eprintln!("format: {}", report.describe());
        report.assert_passes_at_least(50);
    }

    #[test]
    fn planted_unflushed_suffix_truncation_is_caught_naive() {
        caught(TailStrategy::Naive, planted(), "naive");
    }

    #[test]
    fn planted_unflushed_suffix_truncation_is_caught_self_validating() {
        caught(TailStrategy::SelfValidating, planted(), "self-validating");
    }

    #[test]
    fn planted_hard_state_before_entries_is_caught() {
        caught(TailStrategy::SelfValidating, hard_state_first(), "hard state first");
    }

    #[test]
    fn planted_unflushed_vote_is_caught() {
        caught(TailStrategy::SelfValidating, unflushed_vote(), "unflushed vote");
    }

    #[test]
    fn staging_area_survives_every_crash() {
        let report = check_staging(StoreFaults::default(), &config());
        eprintln!("staging: {}", report.describe());
        report.assert_passes_at_least(100);
    }

    #[test]
    fn planted_staging_record_before_its_bytes_is_caught() {
        let report = check_staging(StoreFaults { staging_record_before_data: true, ..StoreFaults::default() }, &config());
        eprintln!("planted, staging record first: {}", report.describe());
        report.assert_caught();
    }

    #[test]
    fn planted_staging_area_installed_unread_is_caught() {
        let report = check_staging(StoreFaults { unverified_staging: true, ..StoreFaults::default() }, &config());
        eprintln!("planted, staging unread: {}", report.describe());
        report.assert_caught();
    }

    #[test]
    fn registry_lists_each_check_once() {
        pmwire_crashcheck::assert_registry(&checks(), 6);
    }
}
