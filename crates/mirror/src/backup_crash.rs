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
//! The resynchronisation ([`check_resync`]): a heap one transaction in is
//! promoted and goes on six transactions as the primary (in three of the
//! data area's eight 1 KiB blocks); the backup is either that heap as it
//! was (behind in the primary's history: an incremental copy of the three
//! blocks) or an old primary that committed two transactions of its own
//! (diverged: a full copy). The primary's hello, the copy in 300 B chunks
//! and its `CopyDone`, whose answer is a promise. Every crash image must
//! either open ([`Heap::open`]) as the backup's old state (history, last
//! transaction, data; before the promise) or as the primary's (always
//! after it), or refuse to open as an unfinished copy
//! ([`OpenError::Resyncing`], only before the promise, recording the
//! copy's kind and base) and then, opened by a [`Backup`], be finished by
//! the plan its next hello gets (incremental again from the same base)
//! into the primary's state. Then the same with the stream cut after each
//! message: the medium as it stands and [`CUT_DRAWS`] crash images of it.
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
use crate::history::Resync;
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
        tracked_since: Some(heap.tracker().since()),
        abandoned_to: 0,
        history: heap.history().clone(),
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

/// Chunk size of the copy in [`check_resync`]: not a divisor of a block
/// nor of the data area, so chunks end mid-block and the last is partial.
const RESYNC_CHUNK: usize = 300;
/// The data area of [`check_resync`]'s heaps: eight 1 KiB tracking blocks.
const RESYNC_DATA_BYTES: u64 = 8192;

/// How [`check_resync`]'s copy goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyMode {
    /// The backup is an old primary that went on alone in a generation
    /// the promoted primary never had: a full copy.
    Full,
    /// The backup is behind in the primary's history: only the blocks
    /// written since.
    Incremental,
}

/// A pool's history, last transaction and data, as the resync check compares them.
type PoolState = (crate::History, u64, Vec<u8>);

/// The two sides of [`check_resync`].
struct ResyncCase {
    /// The backup's image before the copy.
    image: Vec<u8>,
    /// Its state.
    old: PoolState,
    /// The primary.
    primary: Heap,
    primary_media: MemMedia,
    /// Its state.
    new: PoolState,
    /// The copy's messages, in order: (header, payload).
    messages: Vec<([u8; crate::wire::HEADER_BYTES], Vec<u8>)>,
}

fn pool_state(media: &MemMedia) -> Result<PoolState, crate::OpenError> {
    let mut probe = media.clone();
    let (heap, _) = Heap::open(&mut probe, BASE)?;
    Ok((heap.history().clone(), heap.last_committed(), read_data_of(&probe, RESYNC_DATA_BYTES)))
}

fn commit_fill(heap: &mut Heap, media: &mut MemMedia, writes: &[(u64, usize, u8)]) {
    let mut tx = heap.begin(media);
    for &(at, len, fill) in writes {
        tx.write(at, &vec![fill; len]).expect("write");
        tx.ofence().expect("no sink");
    }
    tx.commit().expect("commit");
}

/// A heap one transaction in; the backup (`mode` says which) and the
/// primary, promoted from it, six transactions further on in three of the
/// eight blocks.
fn resync_case(mode: CopyMode) -> ResyncCase {
    let size = (BASE + Heap::required_size(LOG_BYTES, RESYNC_DATA_BYTES)) as usize;
    let mut start = MemMedia::new(size);
    let mut heap = Heap::create(&mut start, BASE, LOG_BYTES, RESYNC_DATA_BYTES).expect("create");
    commit_fill(&mut heap, &mut start, &[(100, 200, 0x11), (5000, 100, 0x12)]);
    let mut backup = start.clone();
    if mode == CopyMode::Full {
        // The old primary commits two transactions nobody mirrored.
        let (mut old, _) = Heap::open(&mut backup, BASE).expect("open");
        commit_fill(&mut old, &mut backup, &[(10, 50, 0x21)]);
        commit_fill(&mut old, &mut backup, &[(6500, 700, 0x22)]);
    }
    let mut primary_media = start;
    let (mut primary, _) = Heap::promote(&mut primary_media, BASE).expect("promote");
    for i in 0..6u8 {
        let at = [2100, 5200, 7300][i as usize % 3] + u64::from(i) * 37;
        commit_fill(&mut primary, &mut primary_media, &[(at, 333, 0x30 + i), (2048 + u64::from(i), 5, i)]);
    }
    let old = pool_state(&backup).expect("the backup's pool opens");
    let new = pool_state(&primary_media).expect("the primary's pool opens");
    let mut case =
        ResyncCase { image: backup.bytes().to_vec(), old, primary, primary_media, new, messages: Vec::new() };
    case.messages = copy_messages(&case, mode, case.old.1);
    case
}

/// The primary's hello, then (for the plan `mode` leads to, from the
/// backup's transaction `from`) its chunks and its `CopyDone`.
fn copy_messages(case: &ResyncCase, mode: CopyMode, from: u64) -> Vec<([u8; crate::wire::HEADER_BYTES], Vec<u8>)> {
    let (primary, media) = (&case.primary, &case.primary_media);
    let crc = crate::backup::data_crc(media, &primary.geometry());
    let hello = Hello {
        log_bytes: LOG_BYTES,
        data_bytes: RESYNC_DATA_BYTES,
        data_crc: crc,
        tracked_since: Some(primary.tracker().since()),
        abandoned_to: 0,
        history: primary.history().clone(),
    };
    let last = primary.last_committed();
    let (header, payload) = StreamCore::new(Strategy::SmOb).hello(last, &hello);
    let mut out = vec![(header, payload.to_vec())];
    let ranges = match mode {
        CopyMode::Full => vec![(0, RESYNC_DATA_BYTES)],
        CopyMode::Incremental => primary.tracker().written_after(from).expect("tracked"),
    };
    for (start, len) in ranges {
        let mut data = vec![0u8; len as usize];
        primary.read(media, start, &mut data).expect("inside");
        for (n, chunk) in data.chunks(RESYNC_CHUNK).enumerate() {
            let at = start + (n * RESYNC_CHUNK) as u64;
            out.push((encode(Kind::CopyChunk, Strategy::NoSm, last, at, 0, chunk), chunk.to_vec()));
        }
    }
    out.push((encode(Kind::CopyDone, Strategy::NoSm, last, RESYNC_DATA_BYTES, crc, &[]), Vec::new()));
    out
}

/// Delivers the first `count` of `messages` to `backup`; checks the
/// hello's plan is `want` and that `CopyDone`, if delivered, answered the
/// primary's transaction. Returns whether `CopyDone` was answered.
fn deliver(
    backup: &mut Backup,
    media: &mut impl Media,
    messages: &[([u8; crate::wire::HEADER_BYTES], Vec<u8>)],
    count: usize,
    want: &crate::Plan,
) -> Result<bool, String> {
    for (n, (header, payload)) in messages.iter().take(count).enumerate() {
        let h = decode(header, payload).map_err(|e| e.to_string())?;
        let answer = backup.handle(media, &h, payload, h.kind.is_call()).map_err(|e| format!("{:?}: {e}", h.kind))?;
        match h.kind {
            Kind::Hello => {
                let answer = answer.ok_or("no answer")?;
                if answer.count != want.code() {
                    return Err(format!("the backup chose plan {}, want {want:?}", answer.count));
                }
            }
            Kind::CopyDone => {
                let answer = answer.ok_or("no answer")?;
                if (answer.tx, answer.value, answer.count) != (h.tx, h.tx, h.count) {
                    return Err(format!("CopyDone answered {answer:?}"));
                }
                return Ok(n + 1 == messages.len());
            }
            _ => {}
        }
    }
    Ok(false)
}

/// The plan a backup in `mode`'s case gets (the first time, or resuming).
fn plan_of(case: &ResyncCase, mode: CopyMode) -> crate::Plan {
    match mode {
        CopyMode::Full => crate::Plan::FullCopy,
        CopyMode::Incremental => crate::Plan::Incremental { from: case.old.1 },
    }
}

/// Judges one image of the backup's medium during the copy: the old
/// state (before `CopyDone` was answered), the primary's (always after),
/// or refused as an unfinished copy toward the primary's transaction
/// (before), of the right kind, which a restarted backup's next hello
/// resumes (incremental again from the same base) into the primary's.
fn judge_resync(case: &ResyncCase, mode: CopyMode, promised: bool, image: MemMedia) -> Result<(), String> {
    let opened = catch_unwind(AssertUnwindSafe(|| pool_state(&image))).map_err(|_| "recovery panicked".to_string())?;
    match opened {
        Ok(state) if state == case.new => Ok(()),
        Ok(state) if promised => Err(format!("copy answered, but the pool opens at transaction {}", state.1)),
        Ok(state) if state == case.old => Ok(()),
        Ok(state) => {
            let diff = first_difference(&state.2, &case.old.2);
            Err(format!("pool opens at transaction {} with neither state's history and data ({diff})", state.1))
        }
        Err(crate::OpenError::Resyncing { target }) if !promised => {
            if target != case.new.1 {
                return Err(format!("resync word names {target}, the copy was toward {}", case.new.1));
            }
            let mut media = image;
            let (mut again, _) = Backup::open(&mut media, BASE).map_err(|e| e.to_string())?;
            let want = match mode {
                CopyMode::Full => Resync::Full,
                CopyMode::Incremental => Resync::Incremental { base: case.old.1 },
            };
            if again.resync() != want {
                return Err(format!("a torn pool says {:?}, want {want:?}", again.resync()));
            }
            let messages = copy_messages(case, mode, case.old.1);
            if !deliver(&mut again, &mut media, &messages, messages.len(), &plan_of(case, mode))? {
                return Err("the resumed copy was not answered".to_string());
            }
            let state = pool_state(&media).map_err(|e| format!("after a resumed copy: {e}"))?;
            if state != case.new {
                return Err(format!("a resumed copy ends at transaction {}, not as the primary", state.1));
            }
            Ok(())
        }
        Err(e) => Err(format!("promised: {promised}: {e}")),
    }
}

/// The resynchronisation's crash check (see the module's notes): every
/// crash image of the whole copy, then the stream cut after each message.
pub fn check_resync(mode: CopyMode, faults: BackupFaults, config: &Config) -> Report {
    let case = resync_case(mode);
    let plan = plan_of(&case, mode);
    let total = case.messages.len();
    let mut media = TracedMedia::from_image(case.image.clone());
    let (mut backup, _) = Backup::open(&mut media, BASE).expect("the backup's heap");
    backup.set_faults(faults);
    let answered = deliver(&mut backup, &mut media, &case.messages, total, &plan).expect("the copy is accepted");
    assert!(answered, "the copy is answered");
    media.mark(0);
    let mut report = explore(&media, config, |image: &mut CrashImage| {
        judge_resync(&case, mode, !image.acked.is_empty(), image.media.clone())
    });
    let mut rng = StdRng::seed_from_u64(config.seed ^ 0x7265_7379);
    for cut in 0..=total {
        let mut media = TracedMedia::from_image(case.image.clone());
        let (mut backup, _) = Backup::open(&mut media, BASE).expect("the backup's heap");
        backup.set_faults(faults);
        let promised = match deliver(&mut backup, &mut media, &case.messages, cut, &plan) {
            Ok(promised) => promised,
            Err(e) => {
                report.failure_count += 1;
                report.failures.push(Failure { point: cut, image: 0, strategy: "cut", message: e });
                continue;
            }
        };
        backup.disconnected(&mut media);
        let mut state = CrashState::new(media.initial());
        let mut folded = media.clone();
        state.fold(&mut folded);
        report.crash_points += 1;
        let mut images = vec![(MemMedia::from_bytes(media.current().to_vec()), "as it stands")];
        images.extend((0..CUT_DRAWS).map(|_| state.draw(&mut rng)));
        for (n, (image, strategy)) in images.into_iter().enumerate() {
            report.images += 1;
            if let Err(message) = judge_resync(&case, mode, promised, image) {
                report.failure_count += 1;
                if report.failures.len() < 8 {
                    let message = format!("stream cut after {cut} of {total} messages: {message}");
                    report.failures.push(Failure { point: cut, image: n as u64, strategy, message });
                }
            }
        }
    }
    report
}

fn read_data_of(media: &MemMedia, data_bytes: u64) -> Vec<u8> {
    let data_at = (BASE + crate::format::HEADER_BYTES + LOG_BYTES) as usize;
    media.bytes()[data_at..data_at + data_bytes as usize].to_vec()
}

fn read_data(media: &MemMedia) -> Vec<u8> {
    read_data_of(media, DATA_BYTES)
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

    fn resync(mode: CopyMode, faults: BackupFaults) -> Report {
        let report = check_resync(mode, faults, &Config::default());
        println!("resync {mode:?} {faults:?}: {}", report.describe());
        report
    }

    #[test]
    fn a_backup_crashed_during_a_full_copy_is_old_current_or_refused_and_resumable() {
        let report = resync(CopyMode::Full, BackupFaults::default());
        // Crash points: the base word, the resync word, the copy's drain,
        // the commit record, the applied word, the history, the cleared
        // word (each chunk is written back, undrained, in between), and
        // each cut of the stream.
        assert!(report.crash_points >= 7 + 29, "{}", report.describe());
        report.assert_passes_at_least(300);
    }

    #[test]
    fn a_backup_crashed_during_an_incremental_copy_is_old_current_or_refused_and_resumable() {
        let report = resync(CopyMode::Incremental, BackupFaults::default());
        assert!(report.crash_points >= 7 + 12, "{}", report.describe());
        report.assert_passes_at_least(150);
    }

    #[test]
    fn canary_copy_without_the_resync_word_is_caught() {
        for mode in [CopyMode::Full, CopyMode::Incremental] {
            resync(mode, BackupFaults { copy_unmarked: true, ..BackupFaults::default() }).assert_caught();
        }
    }

    #[test]
    fn canary_resync_word_cleared_before_the_chunks_are_durable_is_caught() {
        resync(CopyMode::Incremental, BackupFaults { copy_cleared_early: true, ..BackupFaults::default() })
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
