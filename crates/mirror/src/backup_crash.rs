//! Crash-state checks of the backup, under each strategy, and the planted
//! bugs they must catch.
//!
//! A primary heap (on a plain medium) runs the workload of [`crate::crash`]
//! (transactions of 1–4 epochs, each epoch's first write overwriting part
//! of the one before, aborts, mid-transaction `dfence`s, refused bad
//! input) with a `Loopback` sink: the [`StreamCore`] plans each event's
//! messages, they are encoded and decoded through the wire format, and a
//! [`Backup`] on a [`TracedMedia`] acts on them. Each answer the backup
//! gives is a promise, marked in the trace where it was given:
//! - a commit's answer: every crash image from there on holds that
//!   transaction;
//! - a durability fence's answer (`Flush`, `Dfence`, `Sentinel`): until the
//!   transaction commits or aborts, every image's log holds its epochs so
//!   far, intact and in order;
//! - an abort (no answer, marked when handled): the fence promise ends.
//!
//! [`explore`] builds every crash image of the backup's medium; each is
//! opened as a promoted backup would be ([`Backup::open`]) and must hold,
//! byte for byte, the primary's data after the transactions it promised
//! or after those and the one in flight, with the matching last committed
//! number, and keep the fence promise in force.
//!
//! The stream cut at any message: the same run with the backup receiving
//! only the first `k` messages (the primary or the network gone there),
//! for every `k` from 0 to the whole stream; the backup is told the stream
//! ended, then its medium as it stands and [`CUT_DRAWS`] crash images of
//! it are judged the same way.
//!
//! The resynchronisation ([`check_resync`]): a backup one transaction in,
//! a primary several further on with other bytes everywhere; the primary's
//! hello, a full copy in chunks and its `CopyDone`, whose answer is a
//! promise. Every crash image must either open ([`Heap::open`]) as the
//! backup's old state (before the promise) or as the primary's (always
//! after it), or refuse to open as an unfinished copy
//! ([`OpenError::Resyncing`], only before the promise) and then, opened
//! by a [`Backup`], be finished by a new copy into the primary's state.
//!
//! [`OpenError::Resyncing`]: crate::OpenError::Resyncing

use std::panic::{catch_unwind, AssertUnwindSafe};

use pmem::trace::TracedMedia;
use pmem::{Media, MemMedia};
use pmwire_crashcheck::{explore, Config, CrashImage, CrashState, Failure, Report};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_xoshiro::rand_core::RngCore;
use rand_xoshiro::SplitMix64;

use crate::backup::{Backup, BackupFaults};
use crate::crash::{first_difference, run_tx, Shape, BASE, DATA_BYTES, LOG_BYTES, PHASE_ONE_TXS};
use crate::format::parse_epoch;
use crate::sink::{Committed, Epoch, EpochSink, SinkError};
use crate::stream::{Planned, StreamCore};
use crate::wire::{decode, encode, Hello, Kind, Strategy};
use crate::Heap;

/// Crash images drawn at each cut of the stream.
pub const CUT_DRAWS: u64 = 8;

/// What the backup promised when it answered.
#[derive(Clone, Copy, Debug)]
enum Promise {
    /// The `k`-th committed transaction of the run is durable.
    Committed(usize),
    /// Transaction `tx`'s first `epochs` epochs (`log_bytes` of log) are
    /// durable; `k` transactions had committed.
    Durable { tx: u64, epochs: u32, log_bytes: u64, k: usize },
    /// An abort was handled (ends a `Durable` promise); `k` had committed.
    Forgotten(usize),
}

/// A sink that feeds the backup directly, through the wire format.
struct Loopback<'a> {
    core: StreamCore,
    backup: &'a mut Backup,
    media: &'a mut TracedMedia,
    promises: &'a mut Vec<Promise>,
    plan: Vec<Planned>,
    commits: usize,
    log_end: u64,
    /// Messages delivered before the stream is cut (all, if `None`).
    cut: Option<usize>,
    delivered: usize,
}

impl Loopback<'_> {
    fn deliver(&mut self, record: &[u8]) -> Result<(), SinkError> {
        for planned in std::mem::take(&mut self.plan) {
            if self.cut.is_some_and(|cut| self.delivered >= cut) {
                return Ok(());
            }
            self.delivered += 1;
            let payload = if planned.with_record { record } else { &[][..] };
            let header = decode(&planned.header, payload)?;
            let answer = self.backup.handle(self.media, &header, payload, planned.kind.is_call())?;
            let promise = match planned.kind {
                crate::wire::Kind::Commit => {
                    self.commits += 1;
                    Some(Promise::Committed(self.commits))
                }
                crate::wire::Kind::Flush | crate::wire::Kind::Dfence | crate::wire::Kind::Sentinel => {
                    let (tx, epochs, log_bytes, k) = (planned.tx, planned.count, self.log_end, self.commits);
                    Some(Promise::Durable { tx, epochs, log_bytes, k })
                }
                crate::wire::Kind::Abort => Some(Promise::Forgotten(self.commits)),
                _ => None,
            };
            if let Some(answer) = answer {
                let ack = crate::wire::encode(
                    crate::wire::Kind::Ack,
                    Strategy::NoSm,
                    answer.tx,
                    answer.value,
                    answer.count,
                    &[],
                );
                StreamCore::check(&planned, &decode(&ack, &[])?, &[])?;
            }
            if let Some(promise) = promise {
                self.promises.push(promise);
                self.media.mark(self.promises.len() as u64 - 1);
            }
        }
        Ok(())
    }
}

impl EpochSink for Loopback<'_> {
    fn epoch(&mut self, epoch: &Epoch<'_>) -> Result<(), SinkError> {
        self.log_end = epoch.log_offset() + epoch.record().len() as u64;
        self.core.epoch(epoch, &mut self.plan);
        self.deliver(epoch.record())
    }
    fn dfence(&mut self, tx: u64) -> Result<(), SinkError> {
        self.core.dfence(tx, &mut self.plan);
        self.deliver(&[])
    }
    fn commit(&mut self, commit: &Committed) -> Result<(), SinkError> {
        self.core.commit(commit, &mut self.plan);
        self.deliver(&[])
    }
    fn abort(&mut self, tx: u64) {
        self.core.abort(tx, &mut self.plan);
        self.deliver(&[]).expect("an abort is never refused");
        self.log_end = 0;
    }
}

/// The primary's data after each committed transaction, and their numbers.
struct Model {
    states: Vec<Vec<u8>>,
    ids: Vec<u64>,
}

/// One run of the workload against a backup on a traced medium.
struct Run {
    media: TracedMedia,
    backup: Backup,
    promises: Vec<Promise>,
    model: Model,
    delivered: usize,
}

/// The backup's check under `strategy` with planted `faults`.
pub fn check_backup(strategy: Strategy, faults: BackupFaults, config: &Config) -> Report {
    let full = run(strategy, faults, None);
    let mut report = explore(&full.media, config, |image: &mut CrashImage| {
        let acked: Vec<usize> = image.acked.iter().map(|&m| m as usize).collect();
        judge(&full, &acked, image.media.clone())
    });
    let mut rng = StdRng::seed_from_u64(config.seed ^ 0x6375_7473);
    let cuts = full.delivered;
    for cut in 0..=cuts {
        report.merge(check_cut(strategy, faults, cut, &mut rng, config.seed));
    }
    report
}

/// The stream cut after `cut` messages: the backup's medium as it stands
/// and [`CUT_DRAWS`] crash images of it.
fn check_cut(strategy: Strategy, faults: BackupFaults, cut: usize, rng: &mut StdRng, seed: u64) -> Report {
    let mut cut_run = run(strategy, faults, Some(cut));
    cut_run.backup.disconnected(&mut cut_run.media);
    let acked: Vec<usize> = (0..cut_run.promises.len()).collect();
    let mut state = CrashState::new(cut_run.media.initial());
    let mut media = cut_run.media.clone();
    state.fold(&mut media);
    let mut report = Report { seed, crash_points: 1, ..Report::default() };
    let mut images = vec![(MemMedia::from_bytes(cut_run.media.current().to_vec()), "as it stands")];
    images.extend((0..CUT_DRAWS).map(|_| state.draw(rng)));
    for (n, (image, strategy_name)) in images.into_iter().enumerate() {
        report.images += 1;
        if let Err(message) = judge(&cut_run, &acked, image) {
            report.failure_count += 1;
            let message = format!("stream cut after {cut} messages: {message}");
            if report.failures.len() < 8 {
                report.failures.push(Failure { point: cut, image: n as u64, strategy: strategy_name, message });
            }
        }
    }
    report
}

/// Runs the workload; the backup gets the first `cut` messages (or all).
fn run(strategy: Strategy, faults: BackupFaults, cut: Option<usize>) -> Run {
    let size = (BASE + Heap::required_size(LOG_BYTES, DATA_BYTES)) as usize;
    let mut primary_media = MemMedia::new(size);
    let mut heap = Heap::create(&mut primary_media, BASE, LOG_BYTES, DATA_BYTES).expect("create");
    let mut backup_image = MemMedia::new(size);
    Backup::create(&mut backup_image, BASE, LOG_BYTES, DATA_BYTES).expect("create");
    let mut media = TracedMedia::from_image(backup_image.bytes().to_vec());
    let (mut backup, _) = Backup::open(&mut media, BASE).expect("a fresh heap");
    backup.set_faults(faults);
    let core = StreamCore::new(strategy);
    let hello = Hello {
        log_bytes: LOG_BYTES,
        data_bytes: DATA_BYTES,
        data_crc: crate::backup::data_crc(&primary_media, &heap.geometry()),
    };
    let (header, payload) = core.hello(0, &hello);
    let h = decode(&header, &payload).expect("a hello decodes");
    backup.handle(&mut media, &h, &payload, true).expect("the backup greets its primary");
    let mut promises = Vec::new();
    let mut model = Model { states: vec![vec![0; DATA_BYTES as usize]], ids: vec![0] };
    let mut rng = SplitMix64::seed_from_u64(0x6261_636b ^ strategy as u64);
    let mut data = model.states[0].clone();
    let mut delivered = 0;
    let mut commits = 0;
    for i in 0..PHASE_ONE_TXS {
        let shape = Shape { epochs: 1 + rng.next_u32() % 4, abort: i % 6 == 5, dfence: i % 4 == 2, bad: i % 7 == 3 };
        let mut sink = Loopback {
            core: core.clone(),
            backup: &mut backup,
            media: &mut media,
            promises: &mut promises,
            plan: Vec::new(),
            commits,
            log_end: 0,
            cut: cut.map(|c| c.saturating_sub(delivered)),
            delivered: 0,
        };
        let mut tx = heap.begin_with(&mut primary_media, &mut sink);
        let mut pending = data.clone();
        run_tx(&mut tx, &mut rng, &mut pending, shape, i);
        if shape.abort {
            tx.abort();
        } else {
            let committed = tx.commit().expect("the loopback never fails");
            data = pending;
            model.states.push(data.clone());
            model.ids.push(committed.tx);
        }
        delivered += sink.delivered;
        commits = sink.commits;
    }
    Run { media, backup, promises, model, delivered }
}

/// Judges one image of the backup's medium after the promises `acked`.
fn judge(run: &Run, acked: &[usize], mut image: MemMedia) -> Result<(), String> {
    let last = acked.last().map(|&i| run.promises[i]);
    let k = match last {
        None => 0,
        Some(Promise::Committed(k) | Promise::Durable { k, .. } | Promise::Forgotten(k)) => k,
    };
    let opened = catch_unwind(AssertUnwindSafe(|| Backup::open(&mut image, BASE)));
    let (backup, _) = opened
        .map_err(|_| "recovery panicked".to_string())?
        .map_err(|e| format!("promotion failed after {k} promised commits: {e}"))?;
    let heap_data = read_data(&image);
    let candidates = [k, k + 1];
    let Some(state) = candidates.into_iter().find(|&s| run.model.states.get(s) == Some(&heap_data)) else {
        let diff = first_difference(&heap_data, &run.model.states[k]);
        return Err(format!("data is neither the state after {k} promised commits nor the one in flight ({diff})"));
    };
    if backup.last_committed() != run.model.ids[state] {
        return Err(format!(
            "last committed {} for state {state}, want {}",
            backup.last_committed(),
            run.model.ids[state]
        ));
    }
    if let Some(Promise::Durable { tx, epochs, log_bytes, .. }) = last {
        if state == k {
            check_log(&image, tx, epochs, log_bytes)?;
        }
    }
    Ok(())
}

/// Chunk size of the copy in [`check_resync`]: not a divisor of the data
/// area, so the last chunk is partial.
const RESYNC_CHUNK: usize = 300;

/// Feeds `backup` a hello from a primary at `primary_tx` with `data`, and
/// (the backup asking for one) a full copy; returns whether a copy was
/// asked for.
fn resync(backup: &mut Backup, media: &mut impl Media, primary_tx: u64, data: &[u8]) -> Result<bool, String> {
    let crc = pmem::crc::crc32c_append(0, data);
    let hello = Hello { log_bytes: LOG_BYTES, data_bytes: DATA_BYTES, data_crc: crc };
    let (header, payload) = StreamCore::new(Strategy::SmOb).hello(primary_tx, &hello);
    let h = decode(&header, &payload).map_err(|e| e.to_string())?;
    let answer = backup.handle(media, &h, &payload, true).map_err(|e| e.to_string())?.ok_or("no answer")?;
    if answer.count != crate::wire::COPY_NEEDED {
        return Ok(false);
    }
    for (n, chunk) in data.chunks(RESYNC_CHUNK).enumerate() {
        let at = (n * RESYNC_CHUNK) as u64;
        let header = encode(Kind::CopyChunk, Strategy::NoSm, primary_tx, at, 0, chunk);
        let h = decode(&header, chunk).map_err(|e| e.to_string())?;
        backup.handle(media, &h, chunk, false).map_err(|e| e.to_string())?;
    }
    let header = encode(Kind::CopyDone, Strategy::NoSm, primary_tx, DATA_BYTES, crc, &[]);
    let h = decode(&header, &[]).map_err(|e| e.to_string())?;
    let answer = backup.handle(media, &h, &[], true).map_err(|e| e.to_string())?.ok_or("no answer")?;
    if (answer.tx, answer.value, answer.count) != (primary_tx, primary_tx, crc) {
        return Err(format!("CopyDone answered {answer:?}"));
    }
    Ok(true)
}

/// The resynchronisation's crash check (see the module's notes).
pub fn check_resync(faults: BackupFaults, config: &Config) -> Report {
    let size = (BASE + Heap::required_size(LOG_BYTES, DATA_BYTES)) as usize;
    // The backup: one transaction in.
    let mut image = MemMedia::new(size);
    let mut old = Heap::create(&mut image, BASE, LOG_BYTES, DATA_BYTES).expect("create");
    let mut tx = old.begin(&mut image);
    tx.write(100, &[0x11; 200]).expect("write");
    let old_tx = tx.commit().expect("commit").tx;
    let old_data = read_data(&image);
    // The primary: six transactions, other bytes everywhere.
    let mut primary_media = MemMedia::new(size);
    let mut primary = Heap::create(&mut primary_media, BASE, LOG_BYTES, DATA_BYTES).expect("create");
    for i in 0..6u64 {
        let mut tx = primary.begin(&mut primary_media);
        let bytes: Vec<u8> = (0..DATA_BYTES / 6).map(|b| (b as u8).wrapping_mul(7) ^ i as u8).collect();
        tx.write(i * (DATA_BYTES / 6), &bytes).expect("write");
        tx.commit().expect("commit");
    }
    let primary_tx = primary.last_committed();
    let primary_data = read_data(&primary_media);

    let mut media = TracedMedia::from_image(image.bytes().to_vec());
    let (mut backup, _) = Backup::open(&mut media, BASE).expect("the backup's heap");
    backup.set_faults(faults);
    let copied = resync(&mut backup, &mut media, primary_tx, &primary_data).expect("the copy is accepted");
    assert!(copied, "a backup behind asks for a full copy");
    media.mark(0);

    explore(&media, config, |image: &mut CrashImage| {
        let promised = !image.acked.is_empty();
        let mut media = image.media.clone();
        let opened = catch_unwind(AssertUnwindSafe(|| Heap::open(&mut media, BASE)))
            .map_err(|_| "recovery panicked".to_string())?;
        match opened {
            Ok((heap, _)) => {
                let state = (heap.last_committed(), read_data(&media));
                if state == (primary_tx, primary_data.clone()) {
                    return Ok(());
                }
                if promised {
                    return Err(format!("copy answered, but the heap opens at transaction {}", state.0));
                }
                if state != (old_tx, old_data.clone()) {
                    let diff = first_difference(&state.1, &old_data);
                    return Err(format!("heap opens at transaction {} with neither state's data ({diff})", state.0));
                }
                Ok(())
            }
            Err(crate::OpenError::Resyncing { target }) if !promised => {
                if target != primary_tx {
                    return Err(format!("resync word names {target}, the copy was toward {primary_tx}"));
                }
                let mut media = image.media.clone();
                let (mut again, _) = Backup::open(&mut media, BASE).map_err(|e| e.to_string())?;
                if !again.torn() {
                    return Err("a heap with the resync word set opens as a current backup".to_string());
                }
                if !resync(&mut again, &mut media, primary_tx, &primary_data)? {
                    return Err("a torn backup did not ask for a full copy".to_string());
                }
                let (heap, _) = Heap::open(&mut media, BASE).map_err(|e| format!("after a resumed copy: {e}"))?;
                if (heap.last_committed(), read_data(&media)) != (primary_tx, primary_data.clone()) {
                    return Err("a resumed copy does not end as the primary".to_string());
                }
                Ok(())
            }
            Err(e) => Err(format!("promised: {promised}: {e}")),
        }
    })
}

fn read_data(media: &MemMedia) -> Vec<u8> {
    let data_at = (BASE + crate::format::HEADER_BYTES + LOG_BYTES) as usize;
    media.bytes()[data_at..data_at + DATA_BYTES as usize].to_vec()
}

/// The log holds `epochs` intact records of `tx`, in order, in `log_bytes`.
fn check_log(media: &MemMedia, tx: u64, epochs: u32, log_bytes: u64) -> Result<(), String> {
    let mut log = vec![0u8; log_bytes as usize];
    media.read(BASE + crate::format::HEADER_BYTES, &mut log);
    let mut at = 0;
    for index in 0..epochs {
        let (header, _) = parse_epoch(&log[at..], DATA_BYTES)
            .map_err(|e| format!("transaction {tx} epoch {index}, promised durable, is not: {e}"))?;
        if header.tx != tx || header.index != index {
            return Err(format!("promised epoch {tx}.{index} is {}.{} in the log", header.tx, header.index));
        }
        at += header.record_bytes;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(strategy: Strategy, faults: BackupFaults) -> Report {
        let report = check_backup(strategy, faults, &Config::default());
        println!("{strategy} {faults:?}: {}", report.describe());
        report
    }

    #[test]
    fn backup_survives_every_crash_under_sm_rc() {
        check(Strategy::SmRc, BackupFaults::default()).assert_passes_at_least(8_000);
    }

    #[test]
    fn backup_survives_every_crash_under_sm_ob() {
        check(Strategy::SmOb, BackupFaults::default()).assert_passes_at_least(8_000);
    }

    #[test]
    fn backup_survives_every_crash_under_sm_dd() {
        check(Strategy::SmDd, BackupFaults::default()).assert_passes_at_least(8_000);
    }

    #[test]
    fn a_backup_crashed_during_a_full_copy_is_old_current_or_refused_and_resumable() {
        let report = check_resync(BackupFaults::default(), &Config::default());
        println!("resync: {}", report.describe());
        // Crash points: the resync word, the copy's drain, the commit
        // record, the applied word, the cleared word (each chunk is
        // written back, undrained, in between).
        assert!(report.crash_points >= 5, "{}", report.describe());
        report.assert_passes_at_least(60);
    }

    #[test]
    fn canary_copy_without_the_resync_word_is_caught() {
        check_resync(BackupFaults { copy_unmarked: true, ..BackupFaults::default() }, &Config::default())
            .assert_caught();
    }

    #[test]
    fn canary_epochs_out_of_order_is_caught() {
        check(Strategy::SmOb, BackupFaults { reorder_epochs: true, ..BackupFaults::default() }).assert_caught();
    }

    #[test]
    fn canary_dfence_before_drain_is_caught() {
        check(Strategy::SmDd, BackupFaults { fence_before_drain: true, ..BackupFaults::default() }).assert_caught();
    }

    #[test]
    fn canary_commit_acked_before_durable_is_caught() {
        check(Strategy::SmRc, BackupFaults { ack_before_durable: true, ..BackupFaults::default() }).assert_caught();
    }
}
