//! Crash-state checks of the transactional heap, and the planted bugs they
//! must catch.
//!
//! The workload runs on a [`TracedMedia`] that starts as an *old* heap with
//! committed data: it re-creates a heap over it (step 0), then runs
//! transactions of 1–4 epochs of 1–3 writes each (1–300 B, at any
//! alignment, the first write of each epoch overwriting part of the
//! epoch before, so the order of epochs matters), with aborts after
//! sealed epochs, mid-transaction `dfence`s, and bad input (writes outside
//! the data area, writes the log has no room for) that must be refused
//! and change nothing. Step `k` is marked once it returned. [`explore`]
//! builds every crash image the hardware could leave and each is opened
//! with [`Heap::open`] and judged. An image passes only if:
//! - before `create` returned: `open` finds no heap (`BadMagic`) or the new
//!   empty heap; after: `open` succeeds;
//! - the data area equals, byte for byte, the model after the acknowledged
//!   transactions or after those and the one in flight (every committed
//!   transaction whose commit returned is there, an uncommitted one leaves
//!   no trace, no epoch is torn or replayed out of order), and the heap's
//!   last committed number is that state's.
//!
//! Phase two: from phase one it keeps up to [`PHASE_TWO_RUNS`] images,
//! those that needed a replay first (a crash between the commit record and
//! the applied word), opens each on a new trace (so recovery itself is
//! crashed at every point), runs more transactions, and explores again.
//!
//! Promotion ([`check_promote`]): a pool already promoted once (both
//! history slots written) and holding a committed transaction that
//! recovery must replay is promoted on a traced medium, commits a
//! transaction, and is promoted again. Every crash image must open with
//! the history, last transaction and data of the state after the
//! acknowledged steps or of the step in flight (never a torn history),
//! and must promote again.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pmem::trace::TracedMedia;
use pmem::{Media, MemMedia};
use pmwire_crashcheck::{explore, Check, Config, CrashImage, Report};
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

use crate::backup::BackupFaults;
use crate::backup_crash::{check_backup, check_resync, CopyMode};
use crate::{Faults, Heap, OpenError, Strategy, TxError};

/// Where the heap under test starts in its media (not 0, to test `base`).
pub(crate) const BASE: u64 = 256;
/// Its log: small, so some transactions meet `LogFull`.
pub(crate) const LOG_BYTES: u64 = 1024;
/// Its data area.
pub(crate) const DATA_BYTES: u64 = 1280;
/// Write lengths, drawn in turn (1 B to non-temporal-sized).
const LENS: [usize; 9] = [8, 1, 24, 64, 13, 100, 300, 40, 7];
/// Transactions of phase one and of each phase-two run.
pub(crate) const PHASE_ONE_TXS: usize = 60;
const PHASE_TWO_TXS: usize = 14;
/// Images of phase one that seed a phase-two run.
pub const PHASE_TWO_RUNS: usize = 10;

/// Every crash check of this crate: the correct heap, then the planted bugs.
pub fn checks() -> Vec<Check> {
    let check = |name, planted, run| Check { name, planted, run };
    vec![
        check("mirror heap: multi-epoch transactions, aborts, bad input", false, |c| check_heap(Faults::default(), c)),
        check("mirror WHISPER-like hash map: inserts and removes, every crash", false, |c| {
            crate::whisper::check_hash_map(Faults::default(), c)
        }),
        check("planted: mirror hash map over a heap that applies before the commit", true, |c| {
            crate::whisper::check_hash_map(Faults { apply_before_commit: true, ..Faults::default() }, c)
        }),
        check("planted: mirror commit record before its log", true, |c| {
            check_heap(Faults { commit_before_log: true, ..Faults::default() }, c)
        }),
        check("planted: mirror data applied before the commit is durable", true, |c| {
            check_heap(Faults { apply_before_commit: true, ..Faults::default() }, c)
        }),
        check("planted: mirror recovery replays epochs out of order", true, |c| {
            check_heap(Faults { reverse_replay: true, ..Faults::default() }, c)
        }),
        check("planted: mirror applied word never flushed", true, |c| {
            check_heap(Faults { applied_unflushed: true, ..Faults::default() }, c)
        }),
        check("mirror heap promotion: a new generation, any instant", false, |c| check_promote(Faults::default(), c)),
        check("planted: mirror promotion writes its history over the slot in use", true, |c| {
            check_promote(Faults { history_in_place: true, ..Faults::default() }, c)
        }),
        check("mirror backup under SM-RC: any instant, stream cut at any message", false, |c| {
            check_backup(Strategy::SmRc, BackupFaults::default(), c)
        }),
        check("mirror backup under SM-OB: any instant, stream cut at any message", false, |c| {
            check_backup(Strategy::SmOb, BackupFaults::default(), c)
        }),
        check("mirror backup under SM-DD: any instant, stream cut at any message", false, |c| {
            check_backup(Strategy::SmDd, BackupFaults::default(), c)
        }),
        check("planted: mirror backup applies an epoch out of order", true, |c| {
            check_backup(Strategy::SmOb, BackupFaults { reorder_epochs: true, ..BackupFaults::default() }, c)
        }),
        check("planted: mirror backup answers a dfence before its drain", true, |c| {
            check_backup(Strategy::SmDd, BackupFaults { fence_before_drain: true, ..BackupFaults::default() }, c)
        }),
        check("planted: mirror backup acknowledges a commit before it is durable", true, |c| {
            check_backup(Strategy::SmRc, BackupFaults { ack_before_durable: true, ..BackupFaults::default() }, c)
        }),
        check("mirror backup resynchronised by a full copy: any instant, stream cut at any message", false, |c| {
            check_resync(CopyMode::Full, BackupFaults::default(), c)
        }),
        check("mirror backup resynchronised incrementally: any instant, stream cut at any message", false, |c| {
            check_resync(CopyMode::Incremental, BackupFaults::default(), c)
        }),
        check("planted: mirror backup copies without setting the resync word", true, |c| {
            check_resync(CopyMode::Full, BackupFaults { copy_unmarked: true, ..BackupFaults::default() }, c)
        }),
        check("planted: mirror backup clears the resync word before the copy is durable", true, |c| {
            let faults = BackupFaults { copy_cleared_early: true, ..BackupFaults::default() };
            check_resync(CopyMode::Incremental, faults, c)
        }),
    ]
}

/// A pool's identity and contents, as [`check_promote`] compares them.
type PoolState = (crate::History, u64, Vec<u8>);

fn pool_state(heap: &Heap, media: &impl Media) -> PoolState {
    let mut data = vec![0u8; DATA_BYTES as usize];
    heap.read(media, 0, &mut data).expect("the whole data area");
    (heap.history().clone(), heap.last_committed(), data)
}

/// Crash-checks [`Heap::promote`] (with planted `faults`; see the module's notes).
pub fn check_promote(faults: Faults, config: &Config) -> Report {
    let size = (BASE + Heap::required_size(LOG_BYTES, DATA_BYTES)) as usize;
    let mut image = MemMedia::new(size);
    let mut heap = Heap::create(&mut image, BASE, LOG_BYTES, DATA_BYTES).expect("create");
    let mut rng = SplitMix64::seed_from_u64(0x7072_6f6d);
    let mut write_tx = |heap: &mut Heap, media: &mut MemMedia| {
        let mut tx = heap.begin(media);
        for _ in 0..3 {
            let at = rng.next_u64() % (DATA_BYTES - 64);
            tx.write(at, &[rng.next_u32() as u8; 64]).expect("fits");
            tx.ofence().expect("no sink");
        }
        tx.commit().expect("commit");
    };
    write_tx(&mut heap, &mut image);
    let (mut heap, _) = Heap::promote(&mut image, BASE).expect("a first promotion");
    write_tx(&mut heap, &mut image);
    write_tx(&mut heap, &mut image);
    // Undo the last applied word: recovery (inside the promotion) replays.
    let applied = BASE + crate::format::APPLIED_AT;
    image.write_u64(applied, heap.last_committed() - 1);
    let before = {
        let mut probe = image.clone();
        let (heap, _) = Heap::open(&mut probe, BASE).expect("the pool opens");
        pool_state(&heap, &probe)
    };

    let mut media = TracedMedia::from_image(image.bytes().to_vec());
    let mut states = vec![before];
    let (mut heap, promotion) = Heap::promote_with_faults(&mut media, BASE, faults).expect("promote");
    assert_eq!(promotion.generation.start, heap.last_committed(), "the fork point is the last transaction");
    media.mark(0);
    states.push(pool_state(&heap, &media));
    let mut tx = heap.begin(&mut media);
    tx.write(7, &[0x5a; 300]).expect("fits");
    tx.commit().expect("commit");
    media.mark(1);
    states.push(pool_state(&heap, &media));
    let (heap, _) = Heap::promote_with_faults(&mut media, BASE, faults).expect("promote again");
    media.mark(2);
    states.push(pool_state(&heap, &media));

    explore(&media, config, |image: &mut CrashImage| {
        let acked = image.acked.len();
        let mut recovered = image.media.clone();
        let opened = catch_unwind(AssertUnwindSafe(|| Heap::open(&mut recovered, BASE)))
            .map_err(|_| "recovery panicked".to_string())?;
        let (heap, _) = opened.map_err(|e| format!("after {acked} acknowledged steps the pool does not open: {e}"))?;
        let state = pool_state(&heap, &recovered);
        let Some(k) = [acked, acked + 1].into_iter().find(|&k| states.get(k) == Some(&state)) else {
            let (history, last, _) = &state;
            return Err(format!(
                "after {acked} acknowledged steps the pool is at transaction {last} in generation {:?}, \
                 neither the acknowledged state nor the one in flight",
                history.current()
            ));
        };
        let mut again = recovered.clone();
        let (_, promotion) =
            Heap::promote(&mut again, BASE).map_err(|e| format!("state {k} cannot be promoted: {e}"))?;
        if promotion.previous != states[k].0.current() {
            return Err(format!("state {k} promoted from {:?}", promotion.previous));
        }
        Ok(())
    })
}

/// What recovery must produce after `k` acknowledged steps.
struct Model {
    /// The data area after each number of acknowledged steps.
    states: Vec<Vec<u8>>,
    /// The last committed transaction after each number of acknowledged steps.
    ids: Vec<u64>,
    /// Whether step 0 is the heap's `create` (its images may hold no heap).
    create_first: bool,
}

impl Model {
    fn push(&mut self, data: Vec<u8>, id: u64) {
        self.states.push(data);
        self.ids.push(id);
    }

    /// Judges a recovered heap after `acked` acknowledged steps.
    fn judge(&self, acked: usize, opened: Result<(Heap, MemMedia), OpenError>) -> Result<Recovered, String> {
        let (heap, media) = match opened {
            Ok(opened) => opened,
            Err(OpenError::BadMagic { .. }) if self.create_first && acked == 0 => return Ok(Recovered::NoHeap),
            Err(e) => return Err(format!("recovery failed after {acked} acknowledged steps: {e}")),
        };
        let mut data = vec![0u8; DATA_BYTES as usize];
        heap.read(&media, 0, &mut data).expect("the whole data area");
        let candidates = [acked, acked + 1];
        let matched = candidates.into_iter().find(|&k| self.states.get(k) == Some(&data));
        let Some(k) = matched else {
            let diff = first_difference(&data, &self.states[acked]);
            return Err(format!("data area is neither the state after {acked} steps nor the one in flight ({diff})"));
        };
        if heap.last_committed() != self.ids[k] {
            return Err(format!("last committed {} after state {k}, want {}", heap.last_committed(), self.ids[k]));
        }
        Ok(Recovered::Heap)
    }
}

/// What a passing image held.
enum Recovered {
    /// No heap (a crash during `create`).
    NoHeap,
    /// A heap in a state of the model.
    Heap,
}

pub(crate) fn first_difference(got: &[u8], want: &[u8]) -> String {
    match got.iter().zip(want).position(|(a, b)| a != b) {
        Some(i) => format!("first difference at byte {i}: {} vs acknowledged {}", got[i], want[i]),
        None => "same bytes".to_string(),
    }
}

/// Crash-checks the heap (with planted `faults`): phase one from
/// `create` over an old heap, then phase two from chosen crash images.
pub fn check_heap(faults: Faults, config: &Config) -> Report {
    let size = (BASE + Heap::required_size(LOG_BYTES, DATA_BYTES)) as usize;
    let (old, old_id) = old_heap(size);
    let mut media = TracedMedia::from_image(old);
    let mut heap = Heap::create(&mut media, BASE, LOG_BYTES, DATA_BYTES).expect("create");
    heap.set_faults(faults);
    media.mark(0);
    let mut model = Model { states: vec![vec![0xee; DATA_BYTES as usize]], ids: vec![old_id], create_first: true };
    model.push(vec![0; DATA_BYTES as usize], 0);
    drive(&mut media, &mut heap, &mut model, PHASE_ONE_TXS, 1);
    let (mut report, seeds) = explore_model(&media, &model, faults, config, true);
    for (run, image) in seeds.into_iter().enumerate() {
        let mut media = TracedMedia::from_image(image);
        let (mut heap, _) = Heap::open_with_faults(&mut media, BASE, faults).expect("the image passed phase one");
        let mut data = vec![0u8; DATA_BYTES as usize];
        heap.read(&media, 0, &mut data).expect("the whole data area");
        let mut model = Model { states: vec![data], ids: vec![heap.last_committed()], create_first: false };
        drive(&mut media, &mut heap, &mut model, PHASE_TWO_TXS, 2 + run as u64);
        report.merge(explore_model(&media, &model, faults, config, false).0);
    }
    report
}

/// An image holding a heap with committed data (all 0xee), for `create`
/// to format over, and its last committed transaction.
fn old_heap(size: usize) -> (Vec<u8>, u64) {
    let mut media = MemMedia::new(size);
    let mut heap = Heap::create(&mut media, BASE, LOG_BYTES, DATA_BYTES).expect("create");
    for offset in (0..DATA_BYTES).step_by(256) {
        let mut tx = heap.begin(&mut media);
        tx.write(offset, &[0xee; 256]).expect("fits");
        tx.commit().expect("commit");
    }
    (media.bytes().to_vec(), heap.last_committed())
}

/// Explores `media` and judges each image against `model`. With
/// `keep_seeds`, also returns up to [`PHASE_TWO_RUNS`] pre-recovery images
/// for phase two, those that needed a replay first.
fn explore_model(
    media: &TracedMedia,
    model: &Model,
    faults: Faults,
    config: &Config,
    keep_seeds: bool,
) -> (Report, Vec<Vec<u8>>) {
    let mut replayed = Vec::new();
    let mut plain = Vec::new();
    let report = explore(media, config, |image: &mut CrashImage| {
        let acked = image.acked.len();
        let before = keep_seeds.then(|| image.media.bytes().to_vec());
        let mut recovered = image.media.clone();
        let opened = catch_unwind(AssertUnwindSafe(|| Heap::open_with_faults(&mut recovered, BASE, faults)));
        let opened = opened.map_err(|_| "recovery panicked".to_string())?;
        let replay = opened.as_ref().is_ok_and(|(_, r)| r.replayed.is_some());
        let verdict = model.judge(acked, opened.map(|(heap, _)| (heap, recovered)))?;
        if let (Some(before), Recovered::Heap) = (before, verdict) {
            let seeds = if replay { &mut replayed } else { &mut plain };
            if seeds.last().is_none_or(|&(point, _)| point != image.point) {
                seeds.push((image.point, before));
            }
        }
        Ok(())
    });
    let mut seeds = spread(replayed, PHASE_TWO_RUNS * 2 / 3);
    seeds.extend(spread(plain, PHASE_TWO_RUNS - seeds.len()));
    (report, seeds)
}

/// `count` items evenly spaced over `items`.
fn spread(items: Vec<(usize, Vec<u8>)>, count: usize) -> Vec<Vec<u8>> {
    let (found, count) = (items.len(), count.min(items.len()));
    let chosen: Vec<usize> = (0..count).map(|i| i * found / count).collect();
    items.into_iter().enumerate().filter(|(i, _)| chosen.contains(i)).map(|(_, (_, image))| image).collect()
}

/// Runs `txs` transactions (their shapes drawn from `salt`), marking each
/// commit that returned with the next step number and recording its state.
fn drive(media: &mut TracedMedia, heap: &mut Heap, model: &mut Model, txs: usize, salt: u64) {
    let mut rng = SplitMix64::seed_from_u64(0x6d69_7272_6f72 ^ salt);
    let mut data = model.states.last().expect("a first state").clone();
    for i in 0..txs {
        let shape = Shape { epochs: 1 + rng.next_u32() % 4, abort: i % 6 == 5, dfence: i % 4 == 2, bad: i % 7 == 3 };
        let mut tx = heap.begin(media);
        let mut pending = data.clone();
        run_tx(&mut tx, &mut rng, &mut pending, shape, i);
        if shape.abort {
            tx.abort();
            continue;
        }
        let committed = tx.commit().expect("NoMirror never fails");
        data = pending;
        model.push(data.clone(), committed.tx);
        media.mark(model.states.len() as u64 - 2);
    }
}

/// How one transaction of the workload goes.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) epochs: u32,
    pub(crate) abort: bool,
    pub(crate) dfence: bool,
    pub(crate) bad: bool,
}

/// Writes the epochs of one transaction, applying each accepted write to
/// `data` (the model), and checks that bad input is refused.
pub(crate) fn run_tx<M: Media, S: crate::EpochSink>(
    tx: &mut crate::Tx<'_, M, S>,
    rng: &mut SplitMix64,
    data: &mut [u8],
    shape: Shape,
    i: usize,
) {
    let mut previous: Option<(u64, usize)> = None;
    for epoch in 0..shape.epochs {
        let writes = 1 + rng.next_u32() % 3;
        for w in 0..writes {
            let len = LENS[(i * 5 + epoch as usize * 3 + w as usize) % LENS.len()];
            let offset = match (w, previous) {
                (0, Some((at, prev_len))) => (at, prev_len.min(len)),
                _ => (rng.next_u64() % (DATA_BYTES - len as u64 + 1), len),
            };
            let bytes: Vec<u8> = (0..offset.1).map(|_| rng.next_u32() as u8).collect();
            match tx.write(offset.0, &bytes) {
                Ok(()) => data[offset.0 as usize..offset.0 as usize + bytes.len()].copy_from_slice(&bytes),
                Err(TxError::LogFull { .. }) => continue,
                Err(e) => panic!("write: {e}"),
            }
            if w == 0 {
                previous = Some(offset);
            }
        }
        if shape.bad && epoch == 0 {
            let err = tx.write(DATA_BYTES - 4, &[1; 8]).expect_err("past the data area");
            assert!(matches!(err, TxError::OutOfBounds(_)), "{err}");
            let err = tx.write(0, &[2; LOG_BYTES as usize + 76]).expect_err("larger than the log");
            assert!(matches!(err, TxError::LogFull { .. }), "{err}");
        }
        if shape.dfence && epoch == 0 {
            tx.dfence().expect("the sink never fails");
        } else {
            tx.ofence().expect("the sink never fails");
        }
        let mut seen = vec![0u8; DATA_BYTES as usize];
        tx.read(0, &mut seen).expect("the whole data area");
        assert!(seen == data, "a transaction reads its own writes");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::default()
    }

    #[test]
    fn heap_survives_every_crash() {
        check_heap(Faults::default(), &config()).assert_passes_at_least(10_000);
    }

    #[test]
    fn canary_commit_before_log_is_caught() {
        check_heap(Faults { commit_before_log: true, ..Faults::default() }, &config()).assert_caught();
    }

    #[test]
    fn canary_apply_before_commit_is_caught() {
        check_heap(Faults { apply_before_commit: true, ..Faults::default() }, &config()).assert_caught();
    }

    #[test]
    fn canary_reverse_replay_is_caught() {
        check_heap(Faults { reverse_replay: true, ..Faults::default() }, &config()).assert_caught();
    }

    #[test]
    fn canary_unflushed_applied_word_is_caught() {
        check_heap(Faults { applied_unflushed: true, ..Faults::default() }, &config()).assert_caught();
    }

    #[test]
    fn promotion_survives_every_crash() {
        let report = check_promote(Faults::default(), &config());
        println!("promote: {}", report.describe());
        report.assert_passes_at_least(100);
    }

    #[test]
    fn canary_history_written_in_place_is_caught() {
        let report = check_promote(Faults { history_in_place: true, ..Faults::default() }, &config());
        println!("{:?}", report.failures.first().map(|f| &f.message));
        report.assert_caught();
    }

    #[test]
    fn registry_lists_every_check_once() {
        pmwire_crashcheck::assert_registry(&checks(), 11);
    }
}
