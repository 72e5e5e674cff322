//! The transactional heap: a fixed-size data area updated only through
//! failure-atomic transactions, with a redo log (docs/FORMAT.md,
//! "Transactional heap").
//!
//! A transaction's writes are encoded as epoch records in a DRAM image of
//! the log; each epoch boundary seals the open epoch (header, CRC) and
//! copies it into the log on media without a drain, and hands it to the
//! transaction's [`EpochSink`]. Commit: seal the last epoch, drain (the log
//! is durable), `sink.commit`, persist the commit record (the commit
//! point), apply every write to the data area in order, drain, persist the
//! applied word. The data area therefore only ever changes between a
//! durable commit record and the durable applied word, and what it changes
//! to is fully described by the durable log: recovery replays the log
//! whenever the commit record names a transaction past the applied word.
//!
//! Invariants: the data area holds exactly the transactions up to the
//! applied word, or (between the commit record and the applied word) those
//! and a part of the committed one, which recovery completes; the log is
//! only written while the commit record names the applied transaction (or
//! none), so a committed transaction's records are never overwritten
//! before they are applied.

use pmem::Media;

use crate::format::{
    begin_epoch, decode_commit, decode_super, encode_commit, encode_super, parse_epoch, push_write, seal_epoch,
    write_entry_bytes, CommitRecord, EpochHeader, Geometry, SuperError, WriteRef, APPLIED_AT, COMMIT_AT, COMMIT_BYTES,
    EPOCH_HEADER_BYTES, HISTORY_AT, RESYNC_AT, RESYNC_BASE_AT, SUPER_AT, SUPER_BYTES,
};
use crate::history::{Generation, History, HISTORY_BYTES};
use crate::sink::{Committed, Epoch, EpochSink, NoMirror, SinkError};
use crate::tracking::WriteTracker;

/// Planted bugs for the crash-state checker; all off in real use.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Persist the commit record before the last epoch is logged and drained.
    pub commit_before_log: bool,
    /// Apply the writes to the data area before the commit record is durable.
    pub apply_before_commit: bool,
    /// Recovery replays a transaction's epochs last to first.
    pub reverse_replay: bool,
    /// The applied word is stored but never flushed.
    pub applied_unflushed: bool,
    /// A promotion writes its new history over the slot in use instead of
    /// the other one.
    pub history_in_place: bool,
}

/// Why `create` refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CreateError {
    /// The geometry is not allowed.
    #[error("bad heap geometry: {0}")]
    BadGeometry(String),
    /// The medium is smaller than the heap.
    #[error("medium of {have} B is smaller than the heap's end at {need} B")]
    MediaTooSmall {
        /// Bytes needed from offset 0.
        need: u64,
        /// Bytes the medium has.
        have: u64,
    },
}

/// Why `open` refused; the medium is left as it was.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OpenError {
    /// The medium ends before the heap does.
    #[error("medium of {have} B is smaller than the heap's end at {need} B")]
    MediaTooSmall {
        /// Bytes needed from offset 0.
        need: u64,
        /// Bytes the medium has.
        have: u64,
    },
    /// No heap here (or an unfinished `create`).
    #[error("no transactional heap at {base} (bad magic)")]
    BadMagic {
        /// The base tried.
        base: u64,
    },
    /// The superblock's CRC fails.
    #[error("heap superblock checksum mismatch")]
    HeaderChecksum,
    /// Another format version.
    #[error("heap format version {0} is not supported")]
    UnsupportedVersion(u32),
    /// The superblock's sizes are not allowed.
    #[error("bad heap geometry: {0}")]
    BadGeometry(String),
    /// A backup's full copy from its primary was cut short: the data area
    /// may be torn, so the heap cannot be opened (nor promoted) until a
    /// backup finishes the copy.
    #[error("heap is an unfinished resynchronisation copy toward transaction {target}: restart the backup to finish it; it cannot be opened or promoted")]
    Resyncing {
        /// The transaction the copy was bringing the data area to.
        target: u64,
    },
    /// Neither history slot holds a valid history (both torn or never
    /// written): corruption, or a protocol bug.
    #[error("heap history unreadable: {0}")]
    History(String),
    /// A committed transaction's log is unreadable: corruption or a
    /// protocol bug. Nothing was applied.
    #[error("committed transaction {tx} cannot be replayed: {reason}")]
    Corrupt {
        /// The transaction the commit record names.
        tx: u64,
        /// What is wrong.
        reason: String,
    },
}

/// A data-area range that does not fit.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone, Copy)]
#[error("range [{offset}, +{len}) is outside the data area of {data_bytes} B")]
pub struct OutOfBounds {
    /// Offset asked for.
    pub offset: u64,
    /// Length asked for.
    pub len: u64,
    /// The data area's size.
    pub data_bytes: u64,
}

/// Why a transaction step failed. After `OutOfBounds` or `LogFull` the
/// transaction is unchanged and can go on; after `Sink` it has been
/// abandoned (the sink was told), and every later step is `Abandoned`.
#[derive(Debug, thiserror::Error)]
pub enum TxError {
    /// The write is outside the data area; nothing was written.
    #[error(transparent)]
    OutOfBounds(#[from] OutOfBounds),
    /// The write does not fit in what is left of the log; nothing was written.
    #[error("transaction too large: the write needs {needed} B of log, {free} B are free of {capacity} B")]
    LogFull {
        /// Log bytes the write needs.
        needed: u64,
        /// Log bytes left.
        free: u64,
        /// The log's size.
        capacity: u64,
    },
    /// The sink (the mirror) failed; the transaction is abandoned.
    #[error("mirror failed, transaction abandoned: {0}")]
    Sink(SinkError),
    /// An earlier step's sink error abandoned this transaction.
    #[error("transaction {tx} was abandoned after a mirror error")]
    Abandoned {
        /// The transaction.
        tx: u64,
    },
}

/// What `open` found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The last committed transaction (0 if none).
    pub last_committed: u64,
    /// A committed transaction whose writes recovery (re)applied.
    pub replayed: Option<u64>,
}

/// What [`Heap::promote`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Promotion {
    /// The recovery of the pool it opened.
    pub recovery: Recovery,
    /// The generation the pool was in.
    pub previous: Generation,
    /// The new generation: it forks at the pool's last committed
    /// transaction (its `start`), the fork point.
    pub generation: Generation,
}

/// A transactional heap's volatile state; the medium is passed to each call.
#[derive(Debug)]
pub struct Heap {
    geometry: Geometry,
    next_tx: u64,
    last_committed: u64,
    /// The durable history, and the slot and serial it was read from (or written to).
    history: History,
    history_slot: usize,
    history_serial: u64,
    /// Which blocks each transaction since the open wrote.
    tracker: WriteTracker,
    /// The highest transaction whose commit went to the sink and failed
    /// there (0: none since the open): the backup may hold it committed,
    /// though this heap abandoned it and its caller was told so.
    abandoned_to: u64,
    /// The open transaction's log image: its epoch records, back to back.
    image: Vec<u8>,
    /// The open transaction's writes, in order (positions in `image`).
    writes: Vec<WriteRef>,
    faults: Faults,
}

impl Heap {
    /// Bytes of medium a heap of `log_bytes` of log and `data_bytes` of data
    /// needs from its base.
    pub fn required_size(log_bytes: u64, data_bytes: u64) -> u64 {
        Geometry { base: 0, log_bytes, data_bytes }.required_size()
    }

    /// Formats a heap at `base` of `media`: the data area zeroed, no
    /// transaction, a new random history in generation 0. A crash during
    /// `create` leaves no heap (`BadMagic`).
    pub fn create(media: &mut impl Media, base: u64, log_bytes: u64, data_bytes: u64) -> Result<Heap, CreateError> {
        Heap::create_with_history(media, base, log_bytes, data_bytes, History::random())
    }

    /// [`create`](Heap::create) with the given history (a blank one for a backup).
    pub(crate) fn create_with_history(
        media: &mut impl Media,
        base: u64,
        log_bytes: u64,
        data_bytes: u64,
        history: History,
    ) -> Result<Heap, CreateError> {
        let geometry = Geometry { base, log_bytes, data_bytes };
        geometry.validate().map_err(CreateError::BadGeometry)?;
        let need = geometry.end().expect("validated");
        if need > media.len() {
            return Err(CreateError::MediaTooSmall { need, have: media.len() });
        }
        media.persist_u64(base + SUPER_AT, 0);
        media.memset_nodrain(geometry.data_at(), 0, data_bytes);
        media.memset_nodrain(base + COMMIT_AT, 0, COMMIT_BYTES as u64);
        media.write_u64(base + APPLIED_AT, 0);
        media.flush(base + APPLIED_AT, 8);
        media.write_u64(base + RESYNC_AT, 0);
        media.write_u64(base + RESYNC_BASE_AT, 0);
        media.flush(base + RESYNC_AT, 16);
        media.memcpy_nodrain(base + HISTORY_AT[0], &history.encode(1));
        media.memset_nodrain(base + HISTORY_AT[1], 0, HISTORY_BYTES as u64);
        media.drain();
        media.memcpy_persist(base + SUPER_AT, &encode_super(&geometry));
        let mut heap = Heap::with_geometry(geometry, 0, history);
        heap.history_serial = 1;
        Ok(heap)
    }

    /// Opens the heap at `base`, replaying a committed transaction whose
    /// writes may not all be in the data area.
    pub fn open(media: &mut impl Media, base: u64) -> Result<(Heap, Recovery), OpenError> {
        Heap::open_with_faults(media, base, Faults::default())
    }

    /// [`open`](Heap::open) with planted bugs.
    #[doc(hidden)]
    pub fn open_with_faults(media: &mut impl Media, base: u64, faults: Faults) -> Result<(Heap, Recovery), OpenError> {
        let geometry = read_geometry(media, base)?;
        let resync = media.read_u64(base + RESYNC_AT);
        if resync != 0 {
            return Err(OpenError::Resyncing { target: resync });
        }
        let (history, history_slot, history_serial) = read_history(media, base)?;
        let mut commit_bytes = [0u8; COMMIT_BYTES];
        media.read(base + COMMIT_AT, &mut commit_bytes);
        let applied = media.read_u64(base + APPLIED_AT);
        let mut recovery = Recovery { last_committed: applied, replayed: None };
        // The last transaction's records, if the log still holds them.
        let mut last_log = None;
        match decode_commit(&commit_bytes) {
            Some(commit) if commit.tx > applied => {
                let image = read_committed_log(media, &geometry, &commit)?;
                replay(media, &geometry, &image, faults);
                persist_applied(media, base, commit.tx, faults);
                recovery = Recovery { last_committed: commit.tx, replayed: Some(commit.tx) };
                last_log = Some((commit.tx, image));
            }
            Some(commit) if commit.tx < applied => {
                let reason = format!("applied word {applied} is past the commit record");
                return Err(OpenError::Corrupt { tx: commit.tx, reason });
            }
            Some(commit) if commit.epochs > 0 => {
                // A later transaction that was abandoned may have written
                // over the records: then they do not check, and are not used.
                last_log = read_committed_log(media, &geometry, &commit).ok().map(|image| (commit.tx, image));
            }
            _ => {}
        }
        let mut heap = Heap::with_geometry(geometry, recovery.last_committed, history);
        if let Some((tx, image)) = last_log {
            // The record of written blocks reaches back one transaction: a
            // backup one behind (a primary that died before its own commit
            // record) can still rejoin incrementally.
            heap.tracker = WriteTracker::new(geometry.data_bytes, tx - 1);
            let mut at = 0;
            while at < image.len() {
                let (header, writes) = parse_epoch(&image[at..], geometry.data_bytes).expect("checked");
                for w in writes {
                    heap.tracker.mark(w.offset, w.len as u64, tx);
                }
                at += header.record_bytes;
            }
        }
        heap.history_slot = history_slot;
        heap.history_serial = history_serial;
        heap.faults = faults;
        Ok((heap, recovery))
    }

    /// Opens a backup's pool as a primary's: recovers it as
    /// [`open`](Heap::open) does (so it refuses an unfinished
    /// resynchronisation copy, `OpenError::Resyncing`, with the reason),
    /// then starts a new generation of its history forked at its last
    /// committed transaction, durably, before it returns. Every
    /// transaction from then on is in the new generation, so a pool that
    /// went on in the old one (the old primary) is told apart when it
    /// rejoins ([`crate::history::rejoin_plan`]).
    ///
    /// Crash-consistent: the new history goes into the history slot not in
    /// use, with a higher serial and its own CRC, and is persisted in one
    /// step; a crash leaves the old slot (the old identity, and the pool
    /// can be promoted again) or the new one, never a torn history.
    pub fn promote(media: &mut impl Media, base: u64) -> Result<(Heap, Promotion), OpenError> {
        Heap::promote_with_faults(media, base, Faults::default())
    }

    /// [`promote`](Heap::promote) with planted bugs.
    #[doc(hidden)]
    pub fn promote_with_faults(
        media: &mut impl Media,
        base: u64,
        faults: Faults,
    ) -> Result<(Heap, Promotion), OpenError> {
        let (mut heap, recovery) = Heap::open_with_faults(media, base, faults)?;
        let previous = heap.history.current();
        let forked = heap.history.fork(heap.last_committed, rand::random::<u64>());
        heap.write_history(media, forked);
        let generation = heap.history.current();
        Ok((heap, Promotion { recovery, previous, generation }))
    }

    /// Makes `history` the heap's, durably: into the slot not in use (the
    /// one in use, with the planted bug), with the next serial.
    pub(crate) fn write_history(&mut self, media: &mut impl Media, history: History) {
        let slot = if self.faults.history_in_place { self.history_slot } else { 1 - self.history_slot };
        let serial = self.history_serial + 1;
        persist_history(media, self.geometry.base, slot, serial, &history);
        self.history = history;
        self.history_slot = slot;
        self.history_serial = serial;
    }

    fn with_geometry(geometry: Geometry, last_committed: u64, history: History) -> Heap {
        Heap {
            geometry,
            next_tx: last_committed + 1,
            last_committed,
            history,
            history_slot: 0,
            history_serial: 0,
            tracker: WriteTracker::new(geometry.data_bytes, last_committed),
            abandoned_to: 0,
            image: Vec::new(),
            writes: Vec::new(),
            faults: Faults::default(),
        }
    }

    /// Sets planted bugs (crash checks only).
    #[doc(hidden)]
    pub fn set_faults(&mut self, faults: Faults) {
        self.faults = faults;
    }

    /// The heap's layout.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Bytes of the data area.
    pub fn data_bytes(&self) -> u64 {
        self.geometry.data_bytes
    }

    /// Bytes of the redo log: the most one transaction can use.
    pub fn log_bytes(&self) -> u64 {
        self.geometry.log_bytes
    }

    /// The last committed transaction's number (0 if none).
    pub fn last_committed(&self) -> u64 {
        self.last_committed
    }

    /// The highest transaction whose commit the sink failed since the heap
    /// was opened (0: none): one a backup may hold committed though this
    /// heap abandoned it (`history::rejoin_plan`).
    pub fn abandoned_to(&self) -> u64 {
        self.abandoned_to
    }

    /// Carries over what an earlier `Heap` of this process on the same
    /// pool abandoned ([`Heap::abandoned_to`]), for a caller that reopens
    /// the pool after a failed commit (to number its next transaction as
    /// the abandoned one was). Only this process knows it: a restarted
    /// primary starts from 0.
    pub fn note_abandoned(&mut self, tx: u64) {
        self.abandoned_to = self.abandoned_to.max(tx);
    }

    /// The heap's durable history: its id and generations.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The DRAM record of the blocks each transaction since the heap was
    /// created or opened wrote (for incremental resynchronisation).
    pub fn tracker(&self) -> &WriteTracker {
        &self.tracker
    }

    /// The last transaction that wrote something and is durable, as
    /// recovery would find it (the applied word on `media`): a
    /// transaction that wrote nothing commits without touching the medium
    /// (and no mirror hears of it), so it counts in
    /// [`last_committed`](Heap::last_committed) only.
    pub fn last_durable(&self, media: &impl Media) -> u64 {
        media.read_u64(self.geometry.base + APPLIED_AT)
    }

    /// Copies committed data at data-area `offset` into `dst`.
    pub fn read(&self, media: &impl Media, offset: u64, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        let at = self.data_range(offset, dst.len() as u64)?;
        media.read(at, dst);
        Ok(())
    }

    /// Begins a transaction that nobody mirrors (NO-SM).
    pub fn begin<'a, M: Media>(&'a mut self, media: &'a mut M) -> Tx<'a, M, NoMirror> {
        self.begin_with(media, NoMirror)
    }

    /// Begins a transaction whose epochs go to `sink` (a mirror).
    pub fn begin_with<'a, M: Media, S: EpochSink>(&'a mut self, media: &'a mut M, sink: S) -> Tx<'a, M, S> {
        self.image.clear();
        self.writes.clear();
        let tx = self.next_tx;
        self.next_tx += 1;
        Tx { heap: self, media, sink, tx, epoch_start: None, epoch_writes: 0, epochs: 0, done: false }
    }

    /// The medium offset of data-area `[offset, offset + len)`, if it fits.
    fn data_range(&self, offset: u64, len: u64) -> Result<u64, OutOfBounds> {
        let data_bytes = self.geometry.data_bytes;
        match offset.checked_add(len) {
            Some(end) if end <= data_bytes => Ok(self.geometry.data_at() + offset),
            _ => Err(OutOfBounds { offset, len, data_bytes }),
        }
    }
}

/// Reads and checks the superblock at `base`.
pub(crate) fn read_geometry(media: &impl Media, base: u64) -> Result<Geometry, OpenError> {
    let header_end = base.saturating_add(crate::format::HEADER_BYTES);
    if header_end > media.len() {
        return Err(OpenError::MediaTooSmall { need: header_end, have: media.len() });
    }
    let mut line = [0u8; SUPER_BYTES];
    media.read(base + SUPER_AT, &mut line);
    let geometry = decode_super(&line, base).map_err(|e| match e {
        SuperError::BadMagic => OpenError::BadMagic { base },
        SuperError::Checksum => OpenError::HeaderChecksum,
        SuperError::Version(v) => OpenError::UnsupportedVersion(v),
    })?;
    geometry.validate().map_err(OpenError::BadGeometry)?;
    let need = geometry.end().expect("validated");
    if need > media.len() {
        return Err(OpenError::MediaTooSmall { need, have: media.len() });
    }
    Ok(geometry)
}

/// Persists `history` with `serial` into history slot `slot` (0 or 1).
pub(crate) fn persist_history(media: &mut impl Media, base: u64, slot: usize, serial: u64, history: &History) {
    media.memcpy_persist(base + HISTORY_AT[slot], &history.encode(serial));
}

/// Reads the heap's history: the valid slot with the higher serial; its
/// slot and serial.
pub(crate) fn read_history(media: &impl Media, base: u64) -> Result<(History, usize, u64), OpenError> {
    let mut best: Option<(History, usize, u64)> = None;
    let mut why = Vec::new();
    for (slot, at) in HISTORY_AT.iter().enumerate() {
        let mut bytes = [0u8; HISTORY_BYTES];
        media.read(base + at, &mut bytes);
        match History::decode(&bytes) {
            Ok((history, serial)) if best.as_ref().is_none_or(|b| serial > b.2) => best = Some((history, slot, serial)),
            Ok(_) => {}
            Err(e) => why.push(format!("slot {slot}: {e}")),
        }
    }
    best.ok_or_else(|| OpenError::History(why.join("; ")))
}

/// Reads the committed transaction's log and checks every record before
/// anything is applied: each epoch's CRC, its transaction and index, its
/// writes inside the data area, and that the records fill exactly the
/// bytes the commit record names.
fn read_committed_log(media: &impl Media, geometry: &Geometry, commit: &CommitRecord) -> Result<Vec<u8>, OpenError> {
    let corrupt = |reason: String| OpenError::Corrupt { tx: commit.tx, reason };
    if commit.log_bytes > geometry.log_bytes {
        return Err(corrupt(format!("{} B of log named, the log holds {}", commit.log_bytes, geometry.log_bytes)));
    }
    let mut image = vec![0u8; commit.log_bytes as usize];
    media.read(geometry.log_at(), &mut image);
    let mut at = 0;
    for index in 0..commit.epochs {
        let (header, _) =
            parse_epoch(&image[at..], geometry.data_bytes).map_err(|e| corrupt(format!("epoch {index}: {e}")))?;
        if header.tx != commit.tx || header.index != index {
            return Err(corrupt(format!("epoch {index} is tx {} epoch {}", header.tx, header.index)));
        }
        at += header.record_bytes;
    }
    if at != image.len() {
        return Err(corrupt(format!(
            "{} epochs end at {at} B, the commit record says {} B",
            commit.epochs,
            image.len()
        )));
    }
    Ok(image)
}

/// Applies a validated log image's writes to the data area, in order (or
/// reversed, with the planted bug), and drains.
fn replay(media: &mut impl Media, geometry: &Geometry, image: &[u8], faults: Faults) {
    let mut epochs = Vec::new();
    let mut at = 0;
    while at < image.len() {
        let (header, writes) = parse_epoch(&image[at..], geometry.data_bytes).expect("validated before replay");
        epochs.push((at, writes));
        at += header.record_bytes;
    }
    if faults.reverse_replay {
        epochs.reverse();
    }
    for (start, writes) in &epochs {
        for w in writes {
            media.memcpy_nodrain(geometry.data_at() + w.offset, &image[start + w.at..start + w.at + w.len]);
        }
    }
    media.drain();
}

/// Makes `tx` the applied transaction: from here the log may be reused.
pub(crate) fn persist_applied(media: &mut impl Media, base: u64, tx: u64, faults: Faults) {
    if faults.applied_unflushed {
        media.write_u64(base + APPLIED_AT, tx);
    } else {
        media.persist_u64(base + APPLIED_AT, tx);
    }
}

/// An open transaction. Drop it (or call [`abort`](Tx::abort)) to abandon
/// it: nothing of it reaches the data area.
pub struct Tx<'a, M: Media, S: EpochSink> {
    heap: &'a mut Heap,
    media: &'a mut M,
    sink: S,
    tx: u64,
    /// Where the open epoch starts in the image, if one is open.
    epoch_start: Option<usize>,
    epoch_writes: u32,
    epochs: u32,
    done: bool,
}

impl<M: Media, S: EpochSink> Tx<'_, M, S> {
    /// The transaction's number.
    pub fn id(&self) -> u64 {
        self.tx
    }

    /// Log bytes this transaction has used so far.
    pub fn log_used(&self) -> u64 {
        self.heap.image.len() as u64
    }

    /// Writes `bytes` at data-area `offset`, visible to [`read`](Tx::read)
    /// at once and to everyone after commit. A write outside the data area
    /// or one the log has no room for is refused and changes nothing.
    pub fn write(&mut self, offset: u64, bytes: &[u8]) -> Result<(), TxError> {
        self.live()?;
        self.heap.data_range(offset, bytes.len() as u64)?;
        if bytes.is_empty() {
            return Ok(());
        }
        let capacity = self.heap.geometry.log_bytes;
        let free = capacity - self.heap.image.len() as u64;
        let opening = if self.epoch_start.is_none() { EPOCH_HEADER_BYTES as u64 } else { 0 };
        let needed = write_entry_bytes(bytes.len() as u64).map(|n| n + opening);
        if needed.is_none_or(|n| n > free) {
            return Err(TxError::LogFull { needed: needed.unwrap_or(u64::MAX), free, capacity });
        }
        if self.epoch_start.is_none() {
            self.epoch_start = Some(self.heap.image.len());
            begin_epoch(&mut self.heap.image);
        }
        let at = push_write(&mut self.heap.image, offset, bytes);
        self.heap.writes.push(WriteRef { offset, at, len: bytes.len() });
        self.epoch_writes += 1;
        Ok(())
    }

    /// Reads data-area bytes as this transaction sees them: committed data
    /// with this transaction's writes over it, in order.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        self.heap.read(&*self.media, offset, dst)?;
        let end = offset + dst.len() as u64;
        for w in &self.heap.writes {
            let (w_start, w_end) = (w.offset, w.offset + w.len as u64);
            let (lo, hi) = (offset.max(w_start), end.min(w_end));
            if lo < hi {
                let src = w.at + (lo - w_start) as usize;
                dst[(lo - offset) as usize..(hi - offset) as usize]
                    .copy_from_slice(&self.heap.image[src..src + (hi - lo) as usize]);
            }
        }
        Ok(())
    }

    /// Ordering fence: ends the current epoch. Locally the epoch's redo
    /// record goes to the log without a drain (a redo log needs its
    /// records ordered only before the commit record, which commit's drain
    /// does); the sink receives the epoch, and must keep it before every
    /// later one. An ofence with no write since the last is a no-op.
    pub fn ofence(&mut self) -> Result<(), TxError> {
        self.live()?;
        let sealed = self.seal();
        self.abandon_on_error(sealed)
    }

    /// Durability fence: ends the current epoch and waits until everything
    /// this transaction logged is durable, locally and on the sink.
    /// Locally this is not a commit: a crash still discards the transaction.
    pub fn dfence(&mut self) -> Result<(), TxError> {
        self.live()?;
        let sealed = self.seal();
        self.abandon_on_error(sealed)?;
        self.media.drain();
        let fenced = self.sink.dfence(self.tx).map_err(TxError::Sink);
        self.abandon_on_error(fenced)
    }

    /// Commits: on `Ok`, the transaction is durable and in the data area.
    /// On `Err` (the sink failed, now or at an earlier step) it is
    /// abandoned and nothing of it is applied locally.
    pub fn commit(mut self) -> Result<Committed, TxError> {
        self.live()?;
        self.done = true;
        let faults = self.heap.faults;
        let epochs = self.epochs + self.epoch_start.is_some() as u32;
        let committed = Committed {
            tx: self.tx,
            epochs,
            writes: self.heap.writes.len() as u32,
            log_bytes: self.heap.image.len() as u64,
        };
        if epochs == 0 {
            self.heap.last_committed = self.tx;
            return Ok(committed);
        }
        if faults.commit_before_log {
            self.persist_commit(&committed);
        }
        if let Err(e) = self.seal() {
            self.sink.abort(self.tx);
            return Err(e);
        }
        self.media.drain();
        if let Err(e) = self.sink.commit(&committed) {
            // The sink may have committed it before failing (an answer
            // lost): a backup's rejoin may then discard it (`abandoned_to`).
            self.heap.abandoned_to = self.heap.abandoned_to.max(self.tx);
            self.sink.abort(self.tx);
            return Err(TxError::Sink(e));
        }
        if faults.apply_before_commit {
            self.apply();
        }
        self.persist_commit(&committed);
        self.apply();
        self.media.drain();
        persist_applied(self.media, self.heap.geometry.base, self.tx, faults);
        self.heap.last_committed = self.tx;
        let heap = &mut *self.heap;
        for w in &heap.writes {
            heap.tracker.mark(w.offset, w.len as u64, self.tx);
        }
        Ok(committed)
    }

    /// Abandons the transaction (as dropping it does).
    pub fn abort(mut self) {
        if !self.done {
            self.done = true;
            self.sink.abort(self.tx);
        }
    }

    /// `Abandoned` once a sink error ended the transaction.
    fn live(&self) -> Result<(), TxError> {
        if self.done {
            return Err(TxError::Abandoned { tx: self.tx });
        }
        Ok(())
    }

    /// Abandons the transaction if `result` is an error (the sink failed).
    fn abandon_on_error(&mut self, result: Result<(), TxError>) -> Result<(), TxError> {
        if result.is_err() {
            self.done = true;
            self.sink.abort(self.tx);
        }
        result
    }

    /// Seals the open epoch, if any: header and CRC, copied into the log
    /// (no drain), handed to the sink.
    fn seal(&mut self) -> Result<(), TxError> {
        let Some(start) = self.epoch_start.take() else {
            return Ok(());
        };
        let index = self.epochs;
        self.epochs += 1;
        let record = &mut self.heap.image[start..];
        seal_epoch(record, self.tx, index, self.epoch_writes);
        let log_at = self.heap.geometry.log_at();
        self.media.memcpy_nodrain(log_at + start as u64, record);
        let header = EpochHeader { tx: self.tx, index, writes: self.epoch_writes, record_bytes: record.len() };
        self.epoch_writes = 0;
        let epoch = Epoch::sealed(header, start as u64, record);
        self.sink.epoch(&epoch).map_err(TxError::Sink)
    }

    /// Persists the commit record: the commit point.
    fn persist_commit(&mut self, committed: &Committed) {
        let record = CommitRecord { tx: committed.tx, log_bytes: committed.log_bytes, epochs: committed.epochs };
        self.media.memcpy_persist(self.heap.geometry.base + COMMIT_AT, &encode_commit(&record));
    }

    /// Copies every write into the data area, in order (no drain).
    fn apply(&mut self) {
        let data_at = self.heap.geometry.data_at();
        for w in &self.heap.writes {
            self.media.memcpy_nodrain(data_at + w.offset, &self.heap.image[w.at..w.at + w.len]);
        }
    }
}

impl<M: Media, S: EpochSink> Drop for Tx<'_, M, S> {
    fn drop(&mut self) {
        if !self.done {
            self.sink.abort(self.tx);
        }
    }
}

#[cfg(test)]
mod tests {
    use pmem::{MemMedia, Region};

    use super::*;
    use crate::format::{encode_commit, HEADER_BYTES};
    use crate::sink::{Recorder, SinkEvent};

    const LOG: u64 = 4096;
    const DATA: u64 = 8192;

    fn fresh() -> (MemMedia, Heap) {
        let mut media = MemMedia::new(Heap::required_size(LOG, DATA) as usize);
        let heap = Heap::create(&mut media, 0, LOG, DATA).unwrap();
        (media, heap)
    }

    fn data(heap: &Heap, media: &impl Media) -> Vec<u8> {
        let mut buf = vec![0u8; heap.data_bytes() as usize];
        heap.read(media, 0, &mut buf).unwrap();
        buf
    }

    #[test]
    fn commits_survive_reopen_and_aborts_leave_nothing() {
        let (mut media, mut heap) = fresh();
        let mut tx = heap.begin(&mut media);
        tx.write(10, b"small").unwrap();
        tx.ofence().unwrap();
        tx.write(1000, &[7u8; 3000]).unwrap();
        let committed = tx.commit().unwrap();
        assert_eq!((committed.tx, committed.epochs, committed.writes), (1, 2, 2));
        let mut tx = heap.begin(&mut media);
        tx.write(10, b"LOST!").unwrap();
        tx.ofence().unwrap();
        tx.write(0, &[9u8; 2000]).unwrap();
        tx.abort();
        {
            let mut tx = heap.begin(&mut media);
            tx.write(20, b"dropped").unwrap();
        }
        let before = data(&heap, &media);
        assert_eq!(&before[10..15], b"small");
        assert_eq!(before[1000..4000], [7u8; 3000]);
        assert_eq!(before[0], 0);
        let (heap, recovery) = Heap::open(&mut media, 0).unwrap();
        assert_eq!(recovery, Recovery { last_committed: 1, replayed: None });
        assert_eq!(data(&heap, &media), before);
    }

    #[test]
    fn later_epochs_and_writes_win() {
        let (mut media, mut heap) = fresh();
        let mut tx = heap.begin(&mut media);
        tx.write(0, b"aaaaaaaa").unwrap();
        tx.write(2, b"bb").unwrap();
        tx.ofence().unwrap();
        tx.write(4, b"cc").unwrap();
        tx.ofence().unwrap();
        tx.ofence().unwrap();
        let mut seen = [0u8; 8];
        tx.read(0, &mut seen).unwrap();
        assert_eq!(&seen, b"aabbccaa");
        assert_eq!(tx.commit().unwrap().epochs, 2, "an empty epoch is not logged");
        let mut buf = [0u8; 8];
        heap.read(&media, 0, &mut buf).unwrap();
        assert_eq!(&buf, b"aabbccaa");
    }

    #[test]
    fn bad_input_is_refused_and_loses_nothing() {
        let (mut media, mut heap) = fresh();
        let mut tx = heap.begin(&mut media);
        tx.write(0, b"kept").unwrap();
        let used = tx.log_used();
        for (offset, len) in [(DATA - 3, 4), (DATA, 1), (u64::MAX, 2), (u64::MAX - 1, 4)] {
            let err = tx.write(offset, &vec![1; len]).unwrap_err();
            assert!(matches!(err, TxError::OutOfBounds(OutOfBounds { data_bytes: DATA, .. })), "{err}");
        }
        let err = tx.write(0, &vec![1; LOG as usize]).unwrap_err();
        assert!(matches!(err, TxError::LogFull { capacity: LOG, .. }), "{err}");
        assert_eq!(tx.log_used(), used, "a refused write uses no log");
        tx.write(DATA - 4, b"last").unwrap();
        tx.commit().unwrap();
        let mut buf = [0u8; 4];
        heap.read(&media, 0, &mut buf).unwrap();
        assert_eq!(&buf, b"kept");
        heap.read(&media, DATA - 4, &mut buf).unwrap();
        assert_eq!(&buf, b"last");
        assert!(heap.read(&media, DATA - 3, &mut buf).is_err());
    }

    #[test]
    fn a_transaction_fills_the_log_exactly() {
        let (mut media, mut heap) = fresh();
        let mut tx = heap.begin(&mut media);
        let most = LOG as usize - EPOCH_HEADER_BYTES - 16;
        tx.write(0, &vec![3; most + 1]).unwrap_err();
        tx.write(0, &vec![3; most]).unwrap();
        assert_eq!(tx.log_used(), LOG);
        tx.write(0, &[1]).unwrap_err();
        tx.commit().unwrap();
        let (heap, _) = Heap::open(&mut media, 0).unwrap();
        assert_eq!(data(&heap, &media)[..most], vec![3; most][..]);
    }

    #[test]
    fn many_transactions_reuse_the_log() {
        let (mut media, mut heap) = fresh();
        let mut model = vec![0u8; DATA as usize];
        for i in 0..200u64 {
            let mut tx = heap.begin(&mut media);
            for e in 0..(1 + i % 5) {
                let len = [1usize, 8, 64, 100, 700][(i + e) as usize % 5];
                let at = (i * 977 + e * 131) % (DATA - len as u64);
                let bytes = vec![(i + e) as u8; len];
                tx.write(at, &bytes).unwrap();
                model[at as usize..at as usize + len].copy_from_slice(&bytes);
                tx.ofence().unwrap();
            }
            tx.commit().unwrap();
        }
        assert_eq!(data(&heap, &media), model);
        let (heap, recovery) = Heap::open(&mut media, 0).unwrap();
        assert_eq!(recovery.last_committed, 200);
        assert_eq!(data(&heap, &media), model);
    }

    #[test]
    fn recovery_replays_a_committed_transaction_not_yet_applied() {
        let (mut media, mut heap) = fresh();
        let mut tx = heap.begin(&mut media);
        tx.write(0, b"first").unwrap();
        tx.ofence().unwrap();
        tx.write(2, b"XY").unwrap();
        tx.commit().unwrap();
        // Undo the apply and the applied word: as if the crash came right
        // after the commit record.
        media.write(HEADER_BYTES + LOG, &[0; 8]);
        media.write_u64(128, 0);
        let (heap, recovery) = Heap::open(&mut media, 0).unwrap();
        assert_eq!(recovery, Recovery { last_committed: 1, replayed: Some(1) });
        let mut buf = [0u8; 5];
        heap.read(&media, 0, &mut buf).unwrap();
        assert_eq!(&buf, b"fiXYt");
        assert_eq!(media.read_u64(128), 1, "the applied word is persisted");
    }

    #[test]
    fn a_corrupt_committed_log_is_an_error_that_changes_nothing() {
        let (mut media, mut heap) = fresh();
        let mut tx = heap.begin(&mut media);
        tx.write(0, b"aaaa").unwrap();
        tx.ofence().unwrap();
        tx.write(8, b"bbbb").unwrap();
        tx.commit().unwrap();
        media.write_u64(128, 0);
        media.write(HEADER_BYTES + LOG, &[0; 16]);
        let mut flipped = media.clone();
        let second_epoch = HEADER_BYTES + 24 + 16 + 8;
        flipped.write(second_epoch + 30, &[0x55]);
        let image = flipped.bytes().to_vec();
        let err = Heap::open(&mut flipped, 0).unwrap_err();
        assert!(matches!(&err, OpenError::Corrupt { tx: 1, reason } if reason.contains("epoch 1")), "{err}");
        assert_eq!(flipped.bytes(), image, "nothing applied from a log that does not check");
        let mut lying = media.clone();
        lying.write(64, &encode_commit(&CommitRecord { tx: 1, log_bytes: 96, epochs: 3 }));
        assert!(matches!(Heap::open(&mut lying, 0), Err(OpenError::Corrupt { .. })));
        let mut huge = media.clone();
        huge.write(64, &encode_commit(&CommitRecord { tx: 1, log_bytes: u64::MAX, epochs: 1 }));
        assert!(matches!(Heap::open(&mut huge, 0), Err(OpenError::Corrupt { .. })));
    }

    #[test]
    fn open_and_create_refuse_what_does_not_fit() {
        let mut small = MemMedia::new(1024);
        assert_eq!(
            Heap::create(&mut small, 0, LOG, DATA).unwrap_err(),
            CreateError::MediaTooSmall { need: Heap::required_size(LOG, DATA), have: 1024 }
        );
        assert!(matches!(Heap::create(&mut small, 0, 100, 256), Err(CreateError::BadGeometry(_))));
        assert!(matches!(Heap::create(&mut small, 8, 256, 256), Err(CreateError::BadGeometry(_))));
        assert!(matches!(Heap::create(&mut small, 0, 256, u64::MAX - 255), Err(CreateError::BadGeometry(_))));
        assert_eq!(Heap::open(&mut small, 0).unwrap_err(), OpenError::BadMagic { base: 0 });
        assert!(matches!(Heap::open(&mut small, 900), Err(OpenError::MediaTooSmall { .. })));
        assert!(matches!(Heap::open(&mut small, u64::MAX - 10), Err(OpenError::MediaTooSmall { .. })));
        let (media, _) = fresh();
        let mut cut = MemMedia::from_bytes(media.bytes()[..2048].to_vec());
        assert!(matches!(Heap::open(&mut cut, 0), Err(OpenError::MediaTooSmall { .. })));
        let mut flipped = media.clone();
        flipped.write(20, &[1]);
        assert_eq!(Heap::open(&mut flipped, 0).unwrap_err(), OpenError::HeaderChecksum);
    }

    #[test]
    fn the_sink_sees_each_epoch_in_order_then_the_commit() {
        let (mut media, mut heap) = fresh();
        let mut sink = Recorder::default();
        let mut tx = heap.begin_with(&mut media, &mut sink);
        tx.write(0, b"one").unwrap();
        tx.ofence().unwrap();
        tx.write(100, b"two").unwrap();
        tx.write(200, b"three").unwrap();
        tx.dfence().unwrap();
        tx.write(300, b"four").unwrap();
        let committed = tx.commit().unwrap();
        let mut tx = heap.begin_with(&mut media, &mut sink);
        tx.write(0, b"gone").unwrap();
        drop(tx);
        let kinds: Vec<String> = sink
            .events
            .iter()
            .map(|e| match e {
                SinkEvent::Epoch { tx, index, .. } => format!("epoch {tx}.{index}"),
                SinkEvent::Dfence(tx) => format!("dfence {tx}"),
                SinkEvent::Commit(c) => format!("commit {}", c.tx),
                SinkEvent::Abort(tx) => format!("abort {tx}"),
            })
            .collect();
        assert_eq!(kinds, ["epoch 1.0", "epoch 1.1", "dfence 1", "epoch 1.2", "commit 1", "abort 2"]);
        assert_eq!(sink.events[4], SinkEvent::Commit(committed));
        let SinkEvent::Epoch { record, log_offset, .. } = &sink.events[1] else { unreachable!() };
        let epoch = Epoch::parse(record, *log_offset, DATA).unwrap();
        let writes: Vec<(u64, &[u8])> = epoch.writes().collect();
        assert_eq!(writes, [(100, &b"two"[..]), (200, &b"three"[..])]);
        let mut logged = vec![0u8; record.len()];
        media.read(HEADER_BYTES + log_offset, &mut logged);
        assert_eq!(&logged, record, "the sink gets the bytes the log holds");
    }

    /// The seam is enough for a mirror: a backup that applies each
    /// committed transaction's epochs, in order, holds the primary's data.
    #[test]
    fn a_backup_fed_by_the_sink_matches_the_primary() {
        let (mut media, mut heap) = fresh();
        let (mut backup_media, mut backup) = fresh();
        let mut sink = Recorder::default();
        for i in 0..50u64 {
            let mut tx = heap.begin_with(&mut media, &mut sink);
            for e in 0..(1 + i % 4) {
                tx.write((i * 61 + e * 17) % 8000, &[(i * 3 + e) as u8; 150]).unwrap();
                tx.ofence().unwrap();
            }
            if i % 5 == 4 {
                tx.abort();
            } else {
                tx.commit().unwrap();
            }
        }
        let mut epochs: Vec<Vec<u8>> = Vec::new();
        for event in &sink.events {
            match event {
                SinkEvent::Epoch { record, .. } => epochs.push(record.clone()),
                SinkEvent::Abort(_) => epochs.clear(),
                SinkEvent::Commit(_) => {
                    let mut tx = backup.begin(&mut backup_media);
                    for record in epochs.drain(..) {
                        for (offset, bytes) in Epoch::parse(&record, 0, DATA).unwrap().writes() {
                            tx.write(offset, bytes).unwrap();
                        }
                        tx.ofence().unwrap();
                    }
                    tx.commit().unwrap();
                }
                SinkEvent::Dfence(_) => {}
            }
        }
        assert_eq!(data(&backup, &backup_media), data(&heap, &media));
    }

    #[test]
    fn a_failed_mirror_commit_abandons_the_transaction() {
        let (mut media, mut heap) = fresh();
        let mut sink = Recorder { fail_commits: true, ..Recorder::default() };
        let mut tx = heap.begin_with(&mut media, &mut sink);
        tx.write(0, b"unmirrored").unwrap();
        let err = tx.commit().unwrap_err();
        assert!(matches!(err, TxError::Sink(_)), "{err}");
        assert_eq!(sink.events.last(), Some(&SinkEvent::Abort(1)));
        assert_eq!(heap.last_committed(), 0);
        let (heap, recovery) = Heap::open(&mut media, 0).unwrap();
        assert_eq!(recovery.last_committed, 0);
        assert!(data(&heap, &media).iter().all(|&b| b == 0));
    }

    #[test]
    fn a_mirror_error_mid_transaction_abandons_it() {
        let (mut media, mut heap) = fresh();
        let mut sink = Recorder { fail_after_epochs: Some(1), ..Recorder::default() };
        let mut tx = heap.begin_with(&mut media, &mut sink);
        tx.write(0, b"one").unwrap();
        tx.ofence().unwrap();
        tx.write(8, b"two").unwrap();
        assert!(matches!(tx.ofence(), Err(TxError::Sink(_))));
        assert!(matches!(tx.write(16, b"three"), Err(TxError::Abandoned { tx: 1 })));
        assert!(matches!(tx.dfence(), Err(TxError::Abandoned { tx: 1 })));
        assert!(matches!(tx.commit(), Err(TxError::Abandoned { tx: 1 })));
        let aborts = sink.events.iter().filter(|e| matches!(e, SinkEvent::Abort(1))).count();
        assert_eq!(aborts, 1, "the sink is told once");
        let (heap, recovery) = Heap::open(&mut media, 0).unwrap();
        assert_eq!(recovery.last_committed, 0);
        assert!(data(&heap, &media).iter().all(|&b| b == 0));
    }

    #[test]
    fn promotion_forks_a_new_generation_durably() {
        let (mut media, mut heap) = fresh();
        let id = heap.history().id();
        assert_ne!(id, 0, "a primary's heap has a history");
        assert_eq!(heap.history().current().number, 0);
        for i in 0..3u8 {
            let mut tx = heap.begin(&mut media);
            tx.write(u64::from(i) * 100, &[i + 1; 10]).unwrap();
            tx.commit().unwrap();
        }
        let before = data(&heap, &media);
        let (heap, promotion) = Heap::promote(&mut media, 0).unwrap();
        assert_eq!(promotion.recovery.last_committed, 3);
        assert_eq!(promotion.previous.number, 0);
        assert_eq!((promotion.generation.number, promotion.generation.start), (1, 3));
        assert_eq!(heap.history().id(), id, "the same history, a new generation");
        assert_eq!(data(&heap, &media), before);
        let (reopened, _) = Heap::open(&mut media, 0).unwrap();
        assert_eq!(reopened.history(), heap.history(), "durable");
        // Promoted again: each promotion writes the other slot.
        let (again, p2) = Heap::promote(&mut media, 0).unwrap();
        assert_eq!((p2.previous, p2.generation.number, p2.generation.start), (promotion.generation, 2, 3));
        assert_eq!(Heap::open(&mut media, 0).unwrap().0.history(), again.history());
        // A torn slot in use falls back to the other (the one before).
        let mut torn = media.clone();
        let slot = crate::format::HISTORY_AT[again.history_slot];
        torn.write(slot + 40, &[0xff]);
        assert_eq!(Heap::open(&mut torn, 0).unwrap().0.history(), heap.history());
        // Both torn: refused with the reason.
        let other = crate::format::HISTORY_AT[1 - again.history_slot];
        torn.write(other + 40, &[0xff]);
        assert!(matches!(Heap::open(&mut torn, 0), Err(OpenError::History(why)) if why.contains("checksum")));
    }

    #[test]
    fn an_unfinished_copy_cannot_be_promoted() {
        let (mut media, _) = fresh();
        media.write_u64(RESYNC_AT, 5);
        let err = Heap::promote(&mut media, 0).unwrap_err();
        assert_eq!(err, OpenError::Resyncing { target: 5 });
        assert!(err.to_string().contains("cannot be opened or promoted"), "{err}");
    }

    #[test]
    fn the_heap_tracks_the_blocks_each_transaction_wrote() {
        let (mut media, mut heap) = fresh();
        assert_eq!(heap.tracker().since(), 0);
        let mut tx = heap.begin(&mut media);
        tx.write(5000, &[1; 10]).unwrap();
        tx.commit().unwrap();
        let mut tx = heap.begin(&mut media);
        tx.write(100, &[2; 2000]).unwrap();
        tx.abort();
        let mut tx = heap.begin(&mut media);
        tx.write(8000, &[3; 100]).unwrap();
        tx.commit().unwrap();
        assert_eq!(heap.tracker().written_after(0).unwrap(), [(4096, 1024), (7168, 1024)]);
        assert_eq!(heap.tracker().written_after(1).unwrap(), [(7168, 1024)]);
        let (heap, _) = Heap::open(&mut media, 0).unwrap();
        assert_eq!(heap.tracker().since(), 2, "a restart loses the record but the last transaction's, in the log");
        assert_eq!(heap.tracker().written_after(2).unwrap(), [(7168, 1024)]);
        assert_eq!(heap.tracker().written_after(1), None);
        // A transaction abandoned after its epochs reached the log: the
        // last committed one's records are gone, so is its part.
        let mut heap = heap;
        let mut tx = heap.begin(&mut media);
        tx.write(0, &[4; 100]).unwrap();
        tx.dfence().unwrap();
        tx.abort();
        let (heap, _) = Heap::open(&mut media, 0).unwrap();
        assert_eq!(heap.tracker().since(), 3);
    }

    #[test]
    fn works_on_a_region_at_a_base() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let path = dir.path().join("heap");
        let base = 4096;
        {
            let mut region = Region::create(&path, base + Heap::required_size(LOG, DATA)).unwrap();
            let mut heap = Heap::create(&mut region, base, LOG, DATA).unwrap();
            let mut tx = heap.begin(&mut region);
            tx.write(5, &[0xab; 1000]).unwrap();
            tx.ofence().unwrap();
            tx.write(6, b"z").unwrap();
            tx.commit().unwrap();
        }
        let mut region = Region::open(&path, Default::default()).unwrap();
        let (heap, recovery) = Heap::open(&mut region, base).unwrap();
        assert_eq!(recovery.last_committed, 1);
        let mut buf = [0u8; 3];
        heap.read(&region, 5, &mut buf).unwrap();
        assert_eq!(&buf, &[0xab, b'z', 0xab]);
    }
}
