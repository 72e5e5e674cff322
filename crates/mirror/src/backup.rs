//! The backup's core: what the backup's CPU does with the mirror stream,
//! in software, because today's NICs cannot (seed 002 §4–§5). No I/O: the
//! caller hands it each decoded message and the medium, and sends the
//! answer it returns.
//!
//! The backup holds a [`Heap`] of the primary's geometry. An
//! epoch is written into the backup's redo log at the place the primary's
//! log has it, byte for byte, the way the strategy says the NIC would:
//! - **SM-RC**: ordinary stores (they land in the cache, as a DDIO write
//!   does); a `Flush` call writes back the epoch's lines and drains before
//!   it is answered (the remote commit);
//! - **SM-OB**: write-through, store + flush of each line as it lands, no
//!   drain; an `Ofence` (`rofence`) is a drain, unanswered, so everything
//!   before it is durable before anything after it; a `Dfence`
//!   (`rdfence`) drains, then answers "all durable";
//! - **SM-DD**: non-temporal stores, in arrival order (one ordered queue),
//!   no markers; a `Sentinel` read drains, then answers with the number of
//!   epochs applied, which the primary compares with what it sent.
//!
//! `Commit` runs the heap's own commit on the backup: drain (the epochs are
//! durable), persist the commit record, apply the writes to the data area
//! in order, drain, persist the applied word, and only then answer. So a
//! crash of the backup at any instant leaves a heap that [`Heap::open`]
//! recovers to a prefix of the committed transactions, never a torn epoch
//! (docs/FORMAT.md, "Mirror stream").
//!
//! The hello's answer carries the rejoin plan ([`rejoin_plan`], which the
//! primary runs too) and the backup's state. A backup that is behind its
//! primary, diverged from it, or torn by a copy cut short gets a copy:
//! `CopyChunk`s in order (the whole data area, or the blocks written since
//! its transaction), then `CopyDone`, which checks the area's CRC and makes
//! the copy the heap's committed state and the primary's history its own.
//! The resync words (the copy's kind and base) are durable before the
//! copy's first byte lands and cleared last, so a heap cut mid-copy
//! refuses [`Heap::open`] (it cannot be promoted) and its next stream
//! resumes the copy.
//!
//! Invariants: messages are acted on in arrival order; an epoch is checked
//! (its CRC, its transaction, its index, its place in the log, each write
//! inside the data area) before a byte of it is stored; a stream error
//! abandons the open transaction (it was never committed) and changes
//! nothing committed; an answer is returned only once what it promises is
//! durable.
//!
//! [`Heap::open`]: crate::Heap::open

use pmem::crc::crc32c_append;
use pmem::Media;

use crate::format::{
    encode_commit, parse_epoch, CommitRecord, Geometry, WriteRef, APPLIED_AT, COMMIT_AT, RESYNC_AT, RESYNC_BASE_AT,
};
use crate::heap::{persist_applied, persist_history, read_geometry, read_history};
use crate::history::{rejoin_plan, BackupState, History, Plan, PrimaryState, Resync};
use crate::wire::{Header, Hello, Kind, Strategy, WireError};
use crate::{CreateError, Faults, Heap, OpenError, Recovery};

/// Planted bugs for the crash-state checker; all off in real use.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackupFaults {
    /// Epoch 0 of a transaction is held back and stored after epoch 1.
    pub reorder_epochs: bool,
    /// `Flush`, `Dfence` and `Sentinel` answer without draining.
    pub fence_before_drain: bool,
    /// `Commit` answers before its commit record and data are durable
    /// (they are made durable when the next message arrives).
    pub ack_before_durable: bool,
    /// A copy stores its chunks without first setting the resync word.
    pub copy_unmarked: bool,
    /// A copy's chunks are stored without write-back, and `CopyDone`
    /// clears the resync word (after the commit record and the applied
    /// word) before it writes them back and drains.
    pub copy_cleared_early: bool,
}

/// What an acknowledgement says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The transaction asked about (0 for a hello).
    pub tx: u64,
    /// Hello: the backup's last committed transaction; commit: the
    /// committed transaction; sentinel: the epochs applied; else 0.
    pub value: u64,
    /// The epochs of `tx` the backup holds; a hello's: the rejoin plan's code.
    pub count: u32,
    /// A hello's: the backup's state, for the primary's decision.
    pub state: Option<BackupState>,
}

/// Why the backup refused a hello: it cannot mirror this primary.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    /// NO-SM needs no backup.
    #[error("strategy NO-SM needs no backup")]
    NoMirror,
    /// The heaps differ in shape.
    #[error("backup heap has a log of {backup_log} B and a data area of {backup_data} B, the primary's has {primary_log} B and {primary_data} B")]
    Geometry {
        /// The backup's log.
        backup_log: u64,
        /// The backup's data area.
        backup_data: u64,
        /// The primary's log.
        primary_log: u64,
        /// The primary's data area.
        primary_data: u64,
    },
    /// The backup holds transactions the primary does not.
    #[error(
        "backup is ahead: at transaction {backup}, the primary at {primary}: the backup holds transactions the primary never committed durably and does not know it abandoned (was the primary restored from elsewhere, or restarted after a commit it abandoned?), so copying the primary over it could silently drop acknowledged writes; if the primary's pool is the one to keep, start this backup on a new pool (move this one aside)"
    )]
    Ahead {
        /// The backup's last committed transaction.
        backup: u64,
        /// The primary's.
        primary: u64,
    },
    /// Another history: the pool of another heap.
    #[error("backup pool has history {backup:#018x}, the primary's is {primary:#018x}: the backup's pool belongs to another heap (format a new backup pool, or point at the right one)")]
    OtherHeap {
        /// The backup's history id.
        backup: u64,
        /// The primary's.
        primary: u64,
    },
    /// Same history and transaction, other bytes.
    #[error("backup data (CRC {backup:#010x}) differs from the primary's ({primary:#010x}) at the same transaction {tx} of the same history: the backup's pool belongs to another heap (a copy of the pool that went its own way?)")]
    OtherData {
        /// The transaction both are at.
        tx: u64,
        /// CRC-32C of the backup's data area.
        backup: u32,
        /// The primary's.
        primary: u32,
    },
    /// The backup's pool was promoted past the primary: the primary is stale.
    #[error("backup pool is in a newer generation ({backup}) than the primary's ({primary}): it was promoted after this primary, so this primary is stale and must rejoin as a backup instead")]
    StalePrimary {
        /// The backup's current generation.
        backup: u64,
        /// The primary's.
        primary: u64,
    },
    /// A pool with no history that holds transactions.
    #[error("backup pool has no history but is at transaction {last}: not a pool this code formatted")]
    BlankWithData {
        /// Its last committed transaction.
        last: u64,
    },
}

/// Why a message was refused. The open transaction (if any) is abandoned;
/// nothing committed changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// The message does not decode.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The hello was refused.
    #[error(transparent)]
    Hello(#[from] HelloError),
    /// A message before the hello, or a second hello.
    #[error("{0:?} out of place: a stream starts with one hello")]
    OutOfPlace(Kind),
    /// An answer kind sent to the backup, or a call kind sent one-way (or
    /// the reverse).
    #[error("{kind:?} arrived as a {arrived}, it is a {want}")]
    WrongDelivery {
        /// The kind.
        kind: Kind,
        /// How it arrived.
        arrived: &'static str,
        /// How it must arrive.
        want: &'static str,
    },
    /// The kind is not part of the stream's strategy.
    #[error("{kind:?} is not part of {strategy}")]
    WrongStrategy {
        /// The kind.
        kind: Kind,
        /// The stream's strategy.
        strategy: Strategy,
    },
    /// A transaction number out of sequence.
    #[error("transaction {got} out of sequence: {want}")]
    Transaction {
        /// The message's transaction.
        got: u64,
        /// What was expected.
        want: String,
    },
    /// An epoch out of order in its transaction.
    #[error("transaction {tx}: epoch {got} arrived, epoch {want} was next")]
    OutOfOrder {
        /// The transaction.
        tx: u64,
        /// The index expected.
        want: u32,
        /// The index that came.
        got: u32,
    },
    /// An epoch not where the log's next free byte is.
    #[error("transaction {tx}: epoch at log offset {got}, the log's next byte is {want}")]
    LogOffset {
        /// The transaction.
        tx: u64,
        /// The offset expected.
        want: u64,
        /// The offset named.
        got: u64,
    },
    /// The epoch does not fit the backup's log.
    #[error("transaction {tx}: an epoch of {bytes} B at log offset {at} overflows the log of {log_bytes} B")]
    LogFull {
        /// The transaction.
        tx: u64,
        /// Where it would go.
        at: u64,
        /// Its size.
        bytes: u64,
        /// The log's size.
        log_bytes: u64,
    },
    /// The epoch record is bad (checksum, writes outside the data area…).
    #[error("transaction {tx}: bad epoch record: {reason}")]
    BadRecord {
        /// The transaction.
        tx: u64,
        /// What is wrong.
        reason: String,
    },
    /// A full copy's chunk not where the copy is.
    #[error("copy toward transaction {tx}: chunk at data offset {got}, the copy is at {want}")]
    CopyOffset {
        /// The copy's transaction.
        tx: u64,
        /// The offset expected.
        want: u64,
        /// The offset named.
        got: u64,
    },
    /// A chunk past the data area's end.
    #[error("copy toward transaction {tx}: a chunk of {bytes} B at {at} overflows the data area of {data_bytes} B")]
    CopyOverflow {
        /// The copy's transaction.
        tx: u64,
        /// Where it would go.
        at: u64,
        /// Its size.
        bytes: u64,
        /// The data area's size.
        data_bytes: u64,
    },
    /// The end of a copy that is not whole or does not check.
    #[error("copy toward transaction {tx}: {reason}")]
    CopyIncomplete {
        /// The copy's transaction.
        tx: u64,
        /// What is wrong.
        reason: String,
    },
    /// A fence or commit counts other epochs (or log bytes) than arrived.
    #[error("transaction {tx}: {kind:?} says {said}, the backup holds {held}")]
    Count {
        /// The transaction.
        tx: u64,
        /// The message.
        kind: Kind,
        /// What it said.
        said: u64,
        /// What the backup holds.
        held: u64,
    },
}

/// The transaction whose epochs are arriving.
#[derive(Debug)]
struct Open {
    tx: u64,
    epochs: u32,
    /// Log bytes used (where the next epoch goes).
    cursor: u64,
    /// Log bytes written back so far (SM-RC).
    flushed: u64,
    /// The records, back to back, as in the log.
    image: Vec<u8>,
    /// Every write, in order (positions in `image`).
    writes: Vec<WriteRef>,
    /// A record held back by the planted reordering bug.
    held: Option<Vec<u8>>,
}

/// The backup's state: its heap's geometry, its last committed
/// transaction, the stream's strategy and the open transaction.
#[derive(Debug)]
pub struct Backup {
    geometry: Geometry,
    last_committed: u64,
    strategy: Option<Strategy>,
    open: Option<Open>,
    /// A commit answered before it was durable (planted bug).
    undurable: Option<u64>,
    faults: BackupFaults,
    /// The copy this stream is receiving.
    copy: Option<Copy>,
    /// What the resync words say: a copy began and has not finished, so
    /// the data area may be torn and only a finished copy makes it current.
    resync: Resync,
    /// The heap's durable history, and the slot and serial it is in.
    history: History,
    history_slot: usize,
    history_serial: u64,
}

/// A copy under way.
#[derive(Clone, Debug)]
struct Copy {
    /// The primary's transaction it brings the data area to.
    target: u64,
    /// The lowest data offset the next chunk may start at.
    next: u64,
    /// The transaction an incremental copy starts from (`None`: a full copy).
    base: Option<u64>,
    /// The primary's history, the heap's once the copy is done.
    history: History,
    /// The resync words name this copy (each copy marks them anew: a
    /// resumed one may be of another kind or toward another transaction).
    marked: bool,
}

impl Backup {
    /// Opens (and recovers) the backup's heap at `base` of `media`.
    /// A heap whose full copy was cut short opens as torn: its next
    /// stream must finish a full copy before anything else.
    pub fn open(media: &mut impl Media, base: u64) -> Result<(Backup, Recovery), OpenError> {
        let geometry = read_geometry(media, base)?;
        let history = read_history(media, base)?;
        if media.read_u64(base + RESYNC_AT) != 0 {
            let applied = media.read_u64(base + APPLIED_AT);
            let resync = match media.read_u64(base + RESYNC_BASE_AT) {
                0 => Resync::Full,
                base_plus_one => Resync::Incremental { base: base_plus_one - 1 },
            };
            let mut backup = Backup::over(geometry, applied, history);
            backup.resync = resync;
            return Ok((backup, Recovery { last_committed: applied, replayed: None }));
        }
        let (heap, recovery) = Heap::open_with_faults(media, base, Faults::default())?;
        Ok((Backup::over(heap.geometry(), heap.last_committed(), history), recovery))
    }

    /// Formats a backup heap at `base` of `media` (see [`Heap::create`]),
    /// with a blank history: it adopts its first primary's.
    pub fn create(media: &mut impl Media, base: u64, log_bytes: u64, data_bytes: u64) -> Result<Backup, CreateError> {
        let heap = Heap::create_with_history(media, base, log_bytes, data_bytes, History::blank())?;
        Ok(Backup::over(heap.geometry(), 0, (History::blank(), 0, 1)))
    }

    fn over(geometry: Geometry, last_committed: u64, history: (History, usize, u64)) -> Backup {
        Backup {
            geometry,
            last_committed,
            strategy: None,
            open: None,
            undurable: None,
            faults: BackupFaults::default(),
            copy: None,
            resync: Resync::None,
            history: history.0,
            history_slot: history.1,
            history_serial: history.2,
        }
    }

    /// Whether a copy began here and has not finished (the heap then
    /// refuses [`Heap::open`] and cannot be promoted).
    pub fn torn(&self) -> bool {
        self.resync != Resync::None
    }

    /// What the resync words say of an unfinished copy.
    pub fn resync(&self) -> Resync {
        self.resync
    }

    /// The heap's durable history.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Sets planted bugs (crash checks only).
    #[doc(hidden)]
    pub fn set_faults(&mut self, faults: BackupFaults) {
        self.faults = faults;
    }

    /// The heap's layout.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// The last transaction committed durably here.
    pub fn last_committed(&self) -> u64 {
        self.last_committed
    }

    /// The strategy of the stream being served, once greeted.
    pub fn strategy(&self) -> Option<Strategy> {
        self.strategy
    }

    /// The stream ended (the primary is gone): its open transaction is
    /// abandoned; the next stream starts with a hello.
    pub fn disconnected(&mut self, media: &mut impl Media) {
        self.make_durable(media);
        self.open = None;
        self.copy = None;
        self.strategy = None;
    }

    /// Acts on one message that decoded to `header` with `payload`;
    /// `call` says whether it came as a call (it then gets an answer).
    /// On `Err` the open transaction is abandoned.
    pub fn handle(
        &mut self,
        media: &mut impl Media,
        header: &Header,
        payload: &[u8],
        call: bool,
    ) -> Result<Option<Answer>, StreamError> {
        self.make_durable(media);
        let result = self.dispatch(media, header, payload, call);
        if result.is_err() {
            self.open = None;
            self.copy = None;
        }
        result
    }

    fn dispatch(
        &mut self,
        media: &mut impl Media,
        h: &Header,
        payload: &[u8],
        call: bool,
    ) -> Result<Option<Answer>, StreamError> {
        if matches!(h.kind, Kind::Ack | Kind::Refused) {
            return Err(StreamError::WrongDelivery { kind: h.kind, arrived: "request", want: "answer" });
        }
        if h.kind.is_call() != call {
            let (arrived, want) = if call { ("call", "one-way message") } else { ("one-way message", "call") };
            return Err(StreamError::WrongDelivery { kind: h.kind, arrived, want });
        }
        let Some(strategy) = self.strategy else {
            if h.kind != Kind::Hello {
                return Err(StreamError::OutOfPlace(h.kind));
            }
            return self.hello(media, h, payload).map(Some);
        };
        let copying = matches!(h.kind, Kind::CopyChunk | Kind::CopyDone);
        if copying != self.copy.is_some() {
            return Err(StreamError::OutOfPlace(h.kind));
        }
        let allowed = match h.kind {
            Kind::Hello => return Err(StreamError::OutOfPlace(h.kind)),
            Kind::Ofence | Kind::Dfence => strategy == Strategy::SmOb,
            Kind::Flush => strategy == Strategy::SmRc,
            Kind::Sentinel => strategy == Strategy::SmDd,
            _ => true,
        };
        if !allowed {
            return Err(StreamError::WrongStrategy { kind: h.kind, strategy });
        }
        match h.kind {
            Kind::Epoch => self.epoch(media, strategy, h, payload).map(|()| None),
            Kind::Ofence => {
                self.fence(h)?;
                media.drain();
                Ok(None)
            }
            Kind::Flush | Kind::Dfence | Kind::Sentinel => self.durability_fence(media, h).map(Some),
            Kind::Commit => self.commit(media, h).map(Some),
            Kind::Abort => self.abort(h).map(|()| None),
            Kind::CopyChunk => self.copy_chunk(media, h, payload).map(|()| None),
            Kind::CopyDone => self.copy_done(media, h).map(Some),
            Kind::Hello | Kind::Ack | Kind::Refused => unreachable!("handled above"),
        }
    }

    /// Checks the primary's heap against this one and decides the rejoin
    /// plan ([`rejoin_plan`], as the primary does); the answer carries the
    /// backup's last committed transaction, the plan's code and the
    /// backup's state. A stream that starts at once makes the primary's
    /// history this heap's (a blank pool adopts it; an older table gets
    /// the primary's newer generations): the heap is a prefix of it. A
    /// copy must follow any other plan, and adopts the history at its end.
    fn hello(&mut self, media: &mut impl Media, h: &Header, payload: &[u8]) -> Result<Answer, StreamError> {
        let (plan, state, hello) = self.check_hello(media, h, payload)?;
        self.strategy = Some(h.strategy);
        self.open = None;
        self.copy = match plan {
            Plan::Stream => {
                if hello.history != self.history {
                    self.adopt(media, hello.history);
                }
                None
            }
            Plan::Incremental { from } => {
                Some(Copy { target: h.value, next: 0, base: Some(from), history: hello.history, marked: false })
            }
            Plan::FullCopy => {
                Some(Copy { target: h.value, next: 0, base: None, history: hello.history, marked: false })
            }
            Plan::Refuse(e) => unreachable!("check_hello refuses: {e}"),
        };
        Ok(Answer { tx: 0, value: self.last_committed, count: plan.code(), state: Some(state) })
    }

    /// Makes `history` this heap's, durably (into the slot not in use).
    fn adopt(&mut self, media: &mut impl Media, history: History) {
        let slot = 1 - self.history_slot;
        persist_history(media, self.geometry.base, slot, self.history_serial + 1, &history);
        self.history = history;
        self.history_slot = slot;
        self.history_serial += 1;
    }

    /// Marks the heap torn, durably, before a copy's first byte lands: the
    /// base word first (0: full copy; `base + 1`: incremental from `base`),
    /// then the resync word (the target; nonzero even toward transaction 0,
    /// as the word means "torn"). A pool torn already is marked again for
    /// this copy: an incremental copy cut short may resume as a full one.
    fn mark_torn(&mut self, media: &mut impl Media, copy: &mut Copy) {
        copy.marked = true;
        if self.faults.copy_unmarked {
            return;
        }
        let base = self.geometry.base;
        media.persist_u64(base + RESYNC_BASE_AT, copy.base.map_or(0, |b| b + 1));
        media.persist_u64(base + RESYNC_AT, copy.target.max(1));
        self.resync = match copy.base {
            Some(base) => Resync::Incremental { base },
            None => Resync::Full,
        };
    }

    /// A chunk of a copy: checked (the copy's transaction; a full copy's
    /// next offset, an incremental copy's past the last chunk; inside the
    /// data area), then stored and written back (not drained: `CopyDone`
    /// drains). Before the first byte lands the heap is marked torn, so a
    /// crash from here leaves a heap that refuses to open until a copy
    /// finishes.
    fn copy_chunk(&mut self, media: &mut impl Media, h: &Header, payload: &[u8]) -> Result<(), StreamError> {
        let mut copy = self.copy.take().expect("checked by dispatch");
        let data_bytes = self.geometry.data_bytes;
        let target = copy.target;
        if h.tx != target {
            return Err(StreamError::Transaction { got: h.tx, want: format!("{target} (the copy's)") });
        }
        let in_place = if copy.base.is_some() { h.value >= copy.next } else { h.value == copy.next };
        if !in_place {
            return Err(StreamError::CopyOffset { tx: target, want: copy.next, got: h.value });
        }
        let bytes = payload.len() as u64;
        let end = h.value.checked_add(bytes).filter(|&end| end <= data_bytes);
        let Some(end) = end else {
            return Err(StreamError::CopyOverflow { tx: target, at: h.value, bytes, data_bytes });
        };
        if !copy.marked {
            self.mark_torn(media, &mut copy);
        }
        let at = self.geometry.data_at() + h.value;
        if self.faults.copy_cleared_early {
            media.write(at, payload);
        } else {
            media.memcpy_nodrain(at, payload);
        }
        self.copy = Some(Copy { next: end, ..copy });
        Ok(())
    }

    /// The end of a copy: a full copy whole, the data area's CRC the
    /// primary's, then durable; then the commit record and the applied
    /// word name the copy's transaction, the primary's history becomes the
    /// heap's, and last the resync word is cleared. An incremental copy
    /// whose CRC fails turns the resync into a full one (its base did not
    /// hold what the primary thought), so the next hello asks for that.
    fn copy_done(&mut self, media: &mut impl Media, h: &Header) -> Result<Answer, StreamError> {
        let mut copy = self.copy.take().expect("checked by dispatch");
        let g = self.geometry;
        if h.tx != copy.target {
            return Err(StreamError::Transaction { got: h.tx, want: format!("{} (the copy's)", copy.target) });
        }
        if h.value != g.data_bytes || (copy.base.is_none() && copy.next != g.data_bytes) {
            let reason =
                format!("the primary says {} B, {} B arrived, the data area is {} B", h.value, copy.next, g.data_bytes);
            return Err(StreamError::CopyIncomplete { tx: copy.target, reason });
        }
        if !copy.marked {
            self.mark_torn(media, &mut copy);
        }
        if !self.faults.copy_cleared_early {
            media.drain();
        }
        let crc = data_crc(media, &g);
        if crc != h.count {
            if copy.base.is_some() && self.resync != Resync::None {
                media.persist_u64(g.base + RESYNC_BASE_AT, 0);
                self.resync = Resync::Full;
            }
            let reason = format!("data CRC {crc:#010x}, the primary's is {:#010x}", h.count);
            return Err(StreamError::CopyIncomplete { tx: copy.target, reason });
        }
        let record = CommitRecord { tx: copy.target, log_bytes: 0, epochs: 0 };
        media.memcpy_persist(g.base + COMMIT_AT, &encode_commit(&record));
        persist_applied(media, g.base, copy.target, Faults::default());
        if copy.history != self.history {
            self.adopt(media, copy.history);
        }
        media.persist_u64(g.base + RESYNC_AT, 0);
        if self.faults.copy_cleared_early {
            media.flush(g.data_at(), g.data_bytes);
            media.drain();
        }
        self.resync = Resync::None;
        self.last_committed = copy.target;
        Ok(Answer { tx: copy.target, value: copy.target, count: crc, state: None })
    }

    /// Whether a hello (decoded `h`, `payload`) could start a stream here:
    /// its strategy mirrors, its heap has this one's geometry, and
    /// [`rejoin_plan`] does not refuse it. Changes nothing (the stream
    /// being served, if any, goes on). Returns the plan, this backup's
    /// state as the answer tells it, and the hello.
    pub fn check_hello(
        &self,
        media: &impl Media,
        h: &Header,
        payload: &[u8],
    ) -> Result<(Plan, BackupState, Hello), StreamError> {
        if h.kind != Kind::Hello {
            return Err(StreamError::OutOfPlace(h.kind));
        }
        let hello = Hello::decode(payload)?;
        if h.strategy == Strategy::NoSm {
            return Err(HelloError::NoMirror.into());
        }
        let g = self.geometry;
        if hello.log_bytes != g.log_bytes || hello.data_bytes != g.data_bytes {
            return Err(HelloError::Geometry {
                backup_log: g.log_bytes,
                backup_data: g.data_bytes,
                primary_log: hello.log_bytes,
                primary_data: hello.data_bytes,
            }
            .into());
        }
        // The data's CRC matters only where the plan may stream.
        let crc = if !self.torn() && self.last_committed == h.value { data_crc(media, &g) } else { 0 };
        let state = BackupState::of(&self.history, self.last_committed, self.resync, crc);
        let primary = PrimaryState {
            history: &hello.history,
            last: h.value,
            tracked_since: hello.tracked_since,
            data_crc: hello.data_crc,
            abandoned_to: hello.abandoned_to,
        };
        match rejoin_plan(&primary, &state) {
            Plan::Refuse(e) => Err(e.into()),
            plan => Ok((plan, state, hello)),
        }
    }

    /// The open transaction for a message of `tx`, opening it if `start`.
    fn open_for(&mut self, tx: u64, start: bool) -> Result<Option<&mut Open>, StreamError> {
        let last = self.last_committed;
        match &self.open {
            Some(open) if open.tx != tx => {
                let want = format!("transaction {} is open", open.tx);
                return Err(StreamError::Transaction { got: tx, want });
            }
            Some(_) => {}
            None if tx <= last => {
                return Err(StreamError::Transaction { got: tx, want: format!("past the last committed, {last}") });
            }
            None if start => {
                let open =
                    Open { tx, epochs: 0, cursor: 0, flushed: 0, image: Vec::new(), writes: Vec::new(), held: None };
                self.open = Some(open);
            }
            None => return Ok(None),
        }
        Ok(self.open.as_mut())
    }

    /// Checks an epoch, then stores it in the log as the strategy says.
    fn epoch(
        &mut self,
        media: &mut impl Media,
        strategy: Strategy,
        h: &Header,
        record: &[u8],
    ) -> Result<(), StreamError> {
        let geometry = self.geometry;
        let faults = self.faults;
        let open = self.open_for(h.tx, true)?.expect("opened");
        let tx = open.tx;
        if h.count != open.epochs {
            return Err(StreamError::OutOfOrder { tx, want: open.epochs, got: h.count });
        }
        let next = open.cursor + open.held.as_ref().map_or(0, |held| held.len() as u64);
        if h.value != next {
            return Err(StreamError::LogOffset { tx, want: next, got: h.value });
        }
        let bytes = record.len() as u64;
        if bytes > geometry.log_bytes - next {
            return Err(StreamError::LogFull { tx, at: next, bytes, log_bytes: geometry.log_bytes });
        }
        let bad = |reason: String| StreamError::BadRecord { tx, reason };
        let (header, _) = parse_epoch(record, geometry.data_bytes).map_err(bad)?;
        if header.record_bytes != record.len() {
            return Err(bad(format!("{} B after the record", record.len() - header.record_bytes)));
        }
        if header.tx != tx || header.index != h.count {
            return Err(bad(format!("the record is transaction {} epoch {}", header.tx, header.index)));
        }
        open.epochs += 1;
        if faults.reorder_epochs && header.index == 0 {
            open.held = Some(record.to_vec());
            return Ok(());
        }
        store(media, strategy, &geometry, open, record);
        if let Some(held) = open.held.take() {
            store(media, strategy, &geometry, open, &held);
        }
        Ok(())
    }

    /// An ordering marker: checks its count.
    fn fence(&mut self, h: &Header) -> Result<(), StreamError> {
        let held = self.open_for(h.tx, false)?.map_or(0, |open| open.epochs);
        if h.count != held {
            return Err(StreamError::Count { tx: h.tx, kind: h.kind, said: h.count.into(), held: held.into() });
        }
        Ok(())
    }

    /// Flush (SM-RC), Dfence (SM-OB), Sentinel (SM-DD): every epoch of the
    /// transaction durable, then the answer.
    fn durability_fence(&mut self, media: &mut impl Media, h: &Header) -> Result<Answer, StreamError> {
        self.fence(h)?;
        let log_at = self.geometry.log_at();
        let epochs = match self.open.as_mut() {
            Some(open) => {
                if open.flushed < open.cursor {
                    media.flush(log_at + open.flushed, open.cursor - open.flushed);
                    open.flushed = open.cursor;
                }
                open.epochs
            }
            None => 0,
        };
        if !self.faults.fence_before_drain {
            media.drain();
        }
        let value = if h.kind == Kind::Sentinel { u64::from(epochs) } else { 0 };
        Ok(Answer { tx: h.tx, value, count: epochs, state: None })
    }

    /// The heap's commit, on the backup; the answer once it is durable.
    fn commit(&mut self, media: &mut impl Media, h: &Header) -> Result<Answer, StreamError> {
        let geometry = self.geometry;
        let faults = self.faults;
        let strategy = self.strategy.expect("greeted");
        let Some(open) = self.open_for(h.tx, false)? else {
            let want = "a transaction with epochs (an empty one is not mirrored)".to_string();
            return Err(StreamError::Transaction { got: h.tx, want });
        };
        if let Some(held) = open.held.take() {
            store(media, strategy, &geometry, open, &held);
        }
        if h.count != open.epochs {
            return Err(StreamError::Count {
                tx: open.tx,
                kind: h.kind,
                said: h.count.into(),
                held: open.epochs.into(),
            });
        }
        if h.value != open.cursor {
            return Err(StreamError::Count { tx: open.tx, kind: h.kind, said: h.value, held: open.cursor });
        }
        let open = self.open.take().expect("checked");
        if open.flushed < open.cursor {
            media.flush(geometry.log_at() + open.flushed, open.cursor - open.flushed);
        }
        media.drain();
        let record = CommitRecord { tx: open.tx, log_bytes: open.cursor, epochs: open.epochs };
        let commit_at = geometry.base + COMMIT_AT;
        if faults.ack_before_durable {
            media.write(commit_at, &encode_commit(&record));
        } else {
            media.memcpy_persist(commit_at, &encode_commit(&record));
        }
        let data_at = geometry.data_at();
        for w in &open.writes {
            media.memcpy_nodrain(data_at + w.offset, &open.image[w.at..w.at + w.len]);
        }
        self.last_committed = open.tx;
        if faults.ack_before_durable {
            self.undurable = Some(open.tx);
        } else {
            media.drain();
            persist_applied(media, geometry.base, open.tx, Faults::default());
        }
        Ok(Answer { tx: open.tx, value: open.tx, count: open.epochs, state: None })
    }

    /// The transaction is abandoned: its records stay in the log, unreferenced.
    fn abort(&mut self, h: &Header) -> Result<(), StreamError> {
        self.open_for(h.tx, false)?;
        self.open = None;
        Ok(())
    }

    /// Finishes a commit the planted bug answered early.
    fn make_durable(&mut self, media: &mut impl Media) {
        if let Some(tx) = self.undurable.take() {
            let base = self.geometry.base;
            media.flush(base + COMMIT_AT, crate::format::COMMIT_BYTES as u64);
            media.drain();
            persist_applied(media, base, tx, Faults::default());
        }
    }
}

/// Stores an accepted record at the open transaction's log cursor, as the
/// strategy's NIC would, and keeps it for the commit.
fn store(media: &mut impl Media, strategy: Strategy, geometry: &Geometry, open: &mut Open, record: &[u8]) {
    let at = geometry.log_at() + open.cursor;
    match strategy {
        Strategy::SmRc => media.write(at, record),
        Strategy::SmOb => {
            media.write(at, record);
            media.flush(at, record.len() as u64);
        }
        Strategy::SmDd => media.write_nt(at, record),
        Strategy::NoSm => unreachable!("a NO-SM stream is refused at its hello"),
    }
    if strategy != Strategy::SmRc {
        open.flushed = open.cursor + record.len() as u64;
    }
    let base = open.image.len();
    let (_, writes) = parse_epoch(record, geometry.data_bytes).expect("checked before it was accepted");
    open.writes.extend(writes.into_iter().map(|w| WriteRef { at: base + w.at, ..w }));
    open.image.extend_from_slice(record);
    open.cursor += record.len() as u64;
    assert_eq!(open.image.len() as u64, open.cursor);
}

/// CRC-32C of a heap's whole data area.
pub fn data_crc(media: &impl Media, geometry: &Geometry) -> u32 {
    let mut crc = 0;
    let mut chunk = vec![0u8; 64 << 10];
    let mut done = 0;
    while done < geometry.data_bytes {
        let n = (geometry.data_bytes - done).min(chunk.len() as u64) as usize;
        media.read(geometry.data_at() + done, &mut chunk[..n]);
        crc = crc32c_append(crc, &chunk[..n]);
        done += n as u64;
    }
    crc
}

#[cfg(test)]
mod tests {
    use pmem::MemMedia;

    use super::*;
    use crate::sink::{Recorder, SinkEvent};
    use crate::stream::{Planned, StreamCore};
    use crate::wire::{decode, encode};

    const LOG: u64 = 4096;
    const DATA: u64 = 8192;

    /// The hello of `heap` (with its write tracking if `tracked`).
    fn hello_of(heap: &Heap, media: &MemMedia, tracked: bool) -> Hello {
        Hello {
            log_bytes: LOG,
            data_bytes: DATA,
            data_crc: data_crc(media, &heap.geometry()),
            tracked_since: tracked.then(|| heap.tracker().since()),
            abandoned_to: heap.abandoned_to(),
            history: heap.history().clone(),
        }
    }

    /// A primary and a greeted backup under `strategy`.
    fn pair(strategy: Strategy) -> (MemMedia, Heap, MemMedia, Backup) {
        let mut primary = MemMedia::new(Heap::required_size(LOG, DATA) as usize);
        let heap = Heap::create(&mut primary, 0, LOG, DATA).unwrap();
        let mut media = MemMedia::new(Heap::required_size(LOG, DATA) as usize);
        let mut backup = Backup::create(&mut media, 0, LOG, DATA).unwrap();
        assert!(backup.history().is_blank());
        let (header, payload) = StreamCore::new(strategy).hello(0, &hello_of(&heap, &primary, true));
        let h = decode(&header, &payload).unwrap();
        let answer = backup.handle(&mut media, &h, &payload, true).unwrap().unwrap();
        assert_eq!((answer.value, answer.count), (0, Plan::Stream.code()));
        assert_eq!(backup.history(), heap.history(), "a blank backup adopts its primary's history");
        assert_eq!(Backup::open(&mut media, 0).unwrap().0.history(), heap.history(), "durably");
        (primary, heap, media, backup)
    }

    /// One transaction's messages: (planned, payload), in order.
    fn messages(strategy: Strategy, heap: &mut Heap, primary: &mut MemMedia, fill: u8) -> Vec<(Planned, Vec<u8>)> {
        let mut sink = Recorder::default();
        let mut tx = heap.begin_with(primary, &mut sink);
        tx.write(0, &[fill; 100]).unwrap();
        tx.ofence().unwrap();
        tx.write(50, &[fill + 1; 10]).unwrap();
        tx.dfence().unwrap();
        tx.write(4000, &[fill + 2; 300]).unwrap();
        tx.commit().unwrap();
        let mut core = StreamCore::new(strategy);
        let mut out = Vec::new();
        for event in &sink.events {
            let mut plan = Vec::new();
            let mut record = Vec::new();
            match event {
                SinkEvent::Epoch { record: r, log_offset, .. } => {
                    core.epoch(&Epoch::parse(r, *log_offset, DATA).unwrap(), &mut plan);
                    record = r.clone();
                }
                SinkEvent::Dfence(tx) => core.dfence(*tx, &mut plan),
                SinkEvent::Commit(c) => core.commit(c, &mut plan),
                SinkEvent::Abort(tx) => core.abort(*tx, &mut plan),
            }
            for p in plan {
                out.push((p, if p.with_record { record.clone() } else { Vec::new() }));
            }
        }
        out
    }

    fn feed(
        backup: &mut Backup,
        media: &mut MemMedia,
        p: &Planned,
        payload: &[u8],
    ) -> Result<Option<Answer>, StreamError> {
        let h = decode(&p.header, payload)?;
        backup.handle(media, &h, payload, p.kind.is_call())
    }

    fn data(media: &MemMedia) -> Vec<u8> {
        let at = (crate::format::HEADER_BYTES + LOG) as usize;
        media.bytes()[at..at + DATA as usize].to_vec()
    }

    use crate::sink::Epoch;

    #[test]
    fn every_strategy_commits_what_the_primary_commits() {
        for strategy in [Strategy::SmRc, Strategy::SmOb, Strategy::SmDd] {
            let (mut primary, mut heap, mut media, mut backup) = pair(strategy);
            for fill in [1u8, 20, 40] {
                let mut answers = 0;
                for (p, payload) in messages(strategy, &mut heap, &mut primary, fill) {
                    let answer = feed(&mut backup, &mut media, &p, &payload).unwrap();
                    assert_eq!(answer.is_some(), p.kind.is_call(), "{strategy}: {:?}", p.kind);
                    if let Some(a) = answer {
                        let ack = encode(Kind::Ack, Strategy::NoSm, a.tx, a.value, a.count, &[]);
                        StreamCore::check(&p, &decode(&ack, &[]).unwrap(), &[]).unwrap();
                        answers += 1;
                    }
                }
                let want = match strategy {
                    Strategy::SmRc => 4, // a flush per epoch, the commit
                    _ => 2,              // the dfence (or sentinel), the commit
                };
                assert_eq!(answers, want, "{strategy}: round trips per transaction");
            }
            let (reopened, _) = Backup::open(&mut media, 0).unwrap();
            assert_eq!(reopened.last_committed(), heap.last_committed());
            assert_eq!(data(&media), data(&primary), "{strategy}");
        }
    }

    #[test]
    fn bad_streams_are_refused_and_lose_nothing() {
        let strategy = Strategy::SmDd;
        let (mut primary, mut heap, mut media, mut backup) = pair(strategy);
        for (p, payload) in messages(strategy, &mut heap, &mut primary, 7) {
            feed(&mut backup, &mut media, &p, &payload).unwrap();
        }
        let committed = data(&media);
        let msgs = messages(strategy, &mut heap, &mut primary, 9);
        let epoch0 = msgs[0].clone();
        let refuse = |backup: &mut Backup, media: &mut MemMedia, header: [u8; 40], payload: &[u8], call: bool| {
            let h = match decode(&header, payload) {
                Ok(h) => h,
                Err(e) => return StreamError::from(e),
            };
            let err = backup.handle(media, &h, payload, call).unwrap_err();
            assert!(backup.open.is_none(), "a refusal abandons the open transaction");
            err
        };
        let tx = epoch0.0.tx;
        let mut flipped = epoch0.1.clone();
        flipped[30] ^= 1;
        let e = refuse(&mut backup, &mut media, epoch0.0.header, &flipped, false);
        assert!(matches!(e, StreamError::BadRecord { .. }), "{e}");
        let skip = encode(Kind::Epoch, Strategy::NoSm, tx, 0, 1, &epoch0.1);
        assert!(matches!(refuse(&mut backup, &mut media, skip, &epoch0.1, false), StreamError::OutOfOrder { .. }));
        let moved = encode(Kind::Epoch, Strategy::NoSm, tx, 8, 0, &epoch0.1);
        assert!(matches!(refuse(&mut backup, &mut media, moved, &epoch0.1, false), StreamError::LogOffset { .. }));
        let past = encode(Kind::Epoch, Strategy::NoSm, tx, LOG - 8, 0, &epoch0.1);
        assert!(matches!(refuse(&mut backup, &mut media, past, &epoch0.1, false), StreamError::LogOffset { .. }));
        let old = encode(Kind::Epoch, Strategy::NoSm, 1, 0, 0, &epoch0.1);
        assert!(matches!(refuse(&mut backup, &mut media, old, &epoch0.1, false), StreamError::Transaction { .. }));
        let marker = encode(Kind::Ofence, Strategy::NoSm, tx, 0, 0, &[]);
        assert!(matches!(refuse(&mut backup, &mut media, marker, &[], false), StreamError::WrongStrategy { .. }));
        let sentinel = encode(Kind::Sentinel, Strategy::NoSm, tx, 0, 0, &[]);
        assert!(matches!(refuse(&mut backup, &mut media, sentinel, &[], false), StreamError::WrongDelivery { .. }));
        let zeros = [0; crate::wire::HELLO_BYTES];
        let hello = encode(Kind::Hello, Strategy::SmDd, 0, 1, 0, &zeros);
        assert!(matches!(refuse(&mut backup, &mut media, hello, &zeros, true), StreamError::OutOfPlace(Kind::Hello)));
        feed(&mut backup, &mut media, &epoch0.0, &epoch0.1).unwrap();
        let commit = encode(Kind::Commit, Strategy::NoSm, tx, epoch0.1.len() as u64, 2, &[]);
        assert!(matches!(refuse(&mut backup, &mut media, commit, &[], true), StreamError::Count { .. }));
        let mut header = epoch0.0.header;
        header[9] ^= 1;
        assert!(matches!(refuse(&mut backup, &mut media, header, &epoch0.1, false), StreamError::Wire(_)));
        assert_eq!(data(&media), committed, "nothing committed changed");
        assert_eq!(backup.last_committed(), tx - 1);
        // The same transaction, sent whole, still commits.
        for (p, payload) in &msgs {
            feed(&mut backup, &mut media, p, payload).unwrap();
        }
        assert_eq!(data(&media), data(&primary));
    }

    #[test]
    fn bad_copies_are_refused_and_leave_the_heap_refusing_to_open() {
        let (mut primary, mut heap, mut media, _) = pair(Strategy::SmDd);
        for fill in [3u8, 9] {
            messages(Strategy::SmDd, &mut heap, &mut primary, fill);
        }
        let last = heap.last_committed();
        let want = data(&primary);
        let crc = data_crc(&primary, &heap.geometry());
        // Without its write tracking: a full copy.
        let hello = hello_of(&heap, &primary, false);
        // Greets a reopened backup as a primary at `last`: a copy is asked for.
        let greet = |media: &mut MemMedia| {
            let mut backup = Backup::open(media, 0).unwrap().0;
            let (header, payload) = StreamCore::new(Strategy::SmRc).hello(last, &hello);
            let h = decode(&header, &payload).unwrap();
            let a = backup.handle(media, &h, &payload, true).unwrap().unwrap();
            assert_eq!((a.value, a.count), (backup.last_committed(), crate::wire::COPY_NEEDED));
            backup
        };
        let send =
            |backup: &mut Backup, media: &mut MemMedia, kind: Kind, tx: u64, value: u64, count: u32, p: &[u8]| {
                let header = encode(kind, Strategy::NoSm, tx, value, count, p);
                let h = decode(&header, p)?;
                backup.handle(media, &h, p, kind.is_call())
            };
        let half = DATA as usize / 2;
        let mut backup = greet(&mut media);
        // Only a copy may follow such a hello.
        let e = send(&mut backup, &mut media, Kind::Abort, last, 0, 0, &[]).unwrap_err();
        assert_eq!(e, StreamError::OutOfPlace(Kind::Abort));
        let mut backup = greet(&mut media);
        let e = send(&mut backup, &mut media, Kind::CopyChunk, last, 8, 0, &want[..8]).unwrap_err();
        assert!(matches!(e, StreamError::CopyOffset { want: 0, got: 8, .. }), "{e}");
        let mut backup = greet(&mut media);
        let e = send(&mut backup, &mut media, Kind::CopyChunk, last + 1, 0, 0, &want[..8]).unwrap_err();
        assert!(matches!(e, StreamError::Transaction { .. }), "{e}");
        // Half a copy, then a chunk past the end: refused; the heap is torn.
        let mut backup = greet(&mut media);
        send(&mut backup, &mut media, Kind::CopyChunk, last, 0, 0, &want[..half]).unwrap();
        let past = vec![1u8; half + 8];
        let e = send(&mut backup, &mut media, Kind::CopyChunk, last, half as u64, 0, &past).unwrap_err();
        assert!(matches!(e, StreamError::CopyOverflow { .. }), "{e}");
        assert!(matches!(Heap::open(&mut media, 0), Err(OpenError::Resyncing { target }) if target == last));
        // A copy whole in length but not in bytes (its CRC fails), then one
        // that ends early: refused, still torn.
        let mut backup = greet(&mut media);
        assert!(backup.torn());
        send(&mut backup, &mut media, Kind::CopyChunk, last, 0, 0, &vec![0u8; DATA as usize]).unwrap();
        let e = send(&mut backup, &mut media, Kind::CopyDone, last, DATA, crc, &[]).unwrap_err();
        assert!(matches!(e, StreamError::CopyIncomplete { .. }), "{e}");
        let mut backup = greet(&mut media);
        send(&mut backup, &mut media, Kind::CopyChunk, last, 0, 0, &want[..half]).unwrap();
        let e = send(&mut backup, &mut media, Kind::CopyDone, last, DATA, crc, &[]).unwrap_err();
        assert!(matches!(e, StreamError::CopyIncomplete { .. }), "{e}");
        assert!(Heap::open(&mut media, 0).is_err(), "an unfinished copy never opens");
        // A whole copy ends it: the heap opens as the primary's.
        let mut backup = greet(&mut media);
        send(&mut backup, &mut media, Kind::CopyChunk, last, 0, 0, &want[..half]).unwrap();
        send(&mut backup, &mut media, Kind::CopyChunk, last, half as u64, 0, &want[half..]).unwrap();
        let a = send(&mut backup, &mut media, Kind::CopyDone, last, DATA, crc, &[]).unwrap().unwrap();
        assert_eq!((a.tx, a.value, a.count), (last, last, crc));
        assert!(!backup.torn());
        let (opened, _) = Heap::open(&mut media, 0).unwrap();
        assert_eq!(opened.last_committed(), last);
        assert_eq!(data(&media), want);
        // The stream goes on with the primary's next transaction.
        for (p, payload) in messages(Strategy::SmRc, &mut heap, &mut primary, 30) {
            feed(&mut backup, &mut media, &p, &payload).unwrap();
        }
        assert_eq!(data(&media), data(&primary));
    }

    #[test]
    fn an_incremental_copy_must_be_ordered_and_whole_or_falls_back_to_a_full_one() {
        let (mut primary, mut heap, mut media, mut backup) = pair(Strategy::SmDd);
        for (p, payload) in messages(Strategy::SmDd, &mut heap, &mut primary, 3) {
            feed(&mut backup, &mut media, &p, &payload).unwrap();
        }
        let from = backup.last_committed();
        // Two transactions the backup never sees.
        messages(Strategy::SmDd, &mut heap, &mut primary, 9);
        messages(Strategy::SmDd, &mut heap, &mut primary, 20);
        let last = heap.last_committed();
        let hello = hello_of(&heap, &primary, true);
        let ranges = heap.tracker().written_after(from).unwrap();
        assert_eq!(ranges, [(0, 1024), (3072, 2048)]);
        let greet = |media: &mut MemMedia, want: u32| {
            let mut backup = Backup::open(media, 0).unwrap().0;
            let (header, payload) = StreamCore::new(Strategy::SmDd).hello(last, &hello);
            let a = backup.handle(media, &decode(&header, &payload).unwrap(), &payload, true).unwrap().unwrap();
            assert_eq!((a.value, a.count), (from, want));
            backup
        };
        let chunk = |media: &mut MemMedia, backup: &mut Backup, (at, len): (u64, u64)| {
            let bytes = &data(&primary)[at as usize..(at + len) as usize];
            let header = encode(Kind::CopyChunk, Strategy::NoSm, last, at, 0, bytes);
            backup.handle(media, &decode(&header, bytes).unwrap(), bytes, false)
        };
        let done = |media: &mut MemMedia, backup: &mut Backup| {
            let header = encode(Kind::CopyDone, Strategy::NoSm, last, DATA, hello.data_crc, &[]);
            backup.handle(media, &decode(&header, &[]).unwrap(), &[], true)
        };
        // Chunks out of order are refused; the heap is then torn, and its
        // next hello resumes the incremental copy from the same base.
        let mut backup = greet(&mut media, crate::wire::INCREMENTAL_NEEDED);
        chunk(&mut media, &mut backup, ranges[1]).unwrap();
        let e = chunk(&mut media, &mut backup, ranges[0]).unwrap_err();
        assert!(matches!(e, StreamError::CopyOffset { want: 5120, got: 0, .. }), "{e}");
        assert_eq!(Backup::open(&mut media, 0).unwrap().0.resync(), Resync::Incremental { base: from });
        assert!(matches!(Heap::promote(&mut media, 0), Err(OpenError::Resyncing { target }) if target == last));
        // A copy that skips a dirty block fails the CRC at CopyDone: still
        // torn, and the next hello asks for a full copy.
        let mut backup = greet(&mut media, crate::wire::INCREMENTAL_NEEDED);
        chunk(&mut media, &mut backup, ranges[1]).unwrap();
        let e = done(&mut media, &mut backup).unwrap_err();
        assert!(matches!(&e, StreamError::CopyIncomplete { reason, .. } if reason.contains("CRC")), "{e}");
        assert_eq!(Backup::open(&mut media, 0).unwrap().0.resync(), Resync::Full);
        assert!(Heap::open(&mut media, 0).is_err());
        let mut backup = greet(&mut media, crate::wire::COPY_NEEDED);
        chunk(&mut media, &mut backup, (0, DATA)).unwrap();
        done(&mut media, &mut backup).unwrap();
        let (opened, _) = Heap::open(&mut media, 0).unwrap();
        assert_eq!((opened.last_committed(), data(&media)), (last, data(&primary)));
        // An incremental copy whole and in order ends as the primary.
        for fill in [40u8, 50] {
            messages(Strategy::SmDd, &mut heap, &mut primary, fill);
        }
        let (from, last) = (last, heap.last_committed());
        let hello = hello_of(&heap, &primary, true);
        let mut backup = Backup::open(&mut media, 0).unwrap().0;
        let (header, payload) = StreamCore::new(Strategy::SmDd).hello(last, &hello);
        let a = backup.handle(&mut media, &decode(&header, &payload).unwrap(), &payload, true).unwrap().unwrap();
        assert_eq!(a.count, crate::wire::INCREMENTAL_NEEDED);
        for (at, len) in heap.tracker().written_after(from).unwrap() {
            let bytes = &data(&primary)[at as usize..(at + len) as usize];
            let header = encode(Kind::CopyChunk, Strategy::NoSm, last, at, 0, bytes);
            backup.handle(&mut media, &decode(&header, bytes).unwrap(), bytes, false).unwrap();
        }
        let header = encode(Kind::CopyDone, Strategy::NoSm, last, DATA, hello.data_crc, &[]);
        backup.handle(&mut media, &decode(&header, &[]).unwrap(), &[], true).unwrap();
        let (opened, _) = Heap::open(&mut media, 0).unwrap();
        assert_eq!((opened.last_committed(), data(&media)), (last, data(&primary)));
        // An incremental copy cut short, resumed as a full one (the
        // primary lost its tracking) and cut short again: the pool now
        // says "full copy", and gets one.
        messages(Strategy::SmDd, &mut heap, &mut primary, 60);
        let last = heap.last_committed();
        let greet = |media: &mut MemMedia, tracked: bool, want: u32| {
            let hello = hello_of(&heap, &primary, tracked);
            let mut backup = Backup::open(media, 0).unwrap().0;
            let (header, payload) = StreamCore::new(Strategy::SmDd).hello(last, &hello);
            let a = backup.handle(media, &decode(&header, &payload).unwrap(), &payload, true).unwrap().unwrap();
            assert_eq!(a.count, want);
            backup
        };
        let mut backup = greet(&mut media, true, crate::wire::INCREMENTAL_NEEDED);
        let bytes = &data(&primary)[..1024];
        let header = encode(Kind::CopyChunk, Strategy::NoSm, last, 0, 0, bytes);
        backup.handle(&mut media, &decode(&header, bytes).unwrap(), bytes, false).unwrap();
        assert_eq!(Backup::open(&mut media, 0).unwrap().0.resync(), Resync::Incremental { base: last - 1 });
        let mut backup = greet(&mut media, false, crate::wire::COPY_NEEDED);
        let bytes = &data(&primary)[..2048];
        let header = encode(Kind::CopyChunk, Strategy::NoSm, last, 0, 0, bytes);
        backup.handle(&mut media, &decode(&header, bytes).unwrap(), bytes, false).unwrap();
        assert_eq!(Backup::open(&mut media, 0).unwrap().0.resync(), Resync::Full);
        let mut backup = greet(&mut media, true, crate::wire::COPY_NEEDED);
        let bytes = data(&primary);
        let header = encode(Kind::CopyChunk, Strategy::NoSm, last, 0, 0, &bytes);
        backup.handle(&mut media, &decode(&header, &bytes).unwrap(), &bytes, false).unwrap();
        let header = encode(Kind::CopyDone, Strategy::NoSm, last, DATA, data_crc(&primary, &heap.geometry()), &[]);
        backup.handle(&mut media, &decode(&header, &[]).unwrap(), &[], true).unwrap();
        let (opened, _) = Heap::open(&mut media, 0).unwrap();
        assert_eq!((opened.last_committed(), data(&media)), (last, data(&primary)));
    }

    #[test]
    fn hellos_that_cannot_be_mirrored_are_refused() {
        let (mut primary, mut heap, mut media, mut backup) = pair(Strategy::SmOb);
        for (p, payload) in messages(Strategy::SmOb, &mut heap, &mut primary, 7) {
            feed(&mut backup, &mut media, &p, &payload).unwrap();
        }
        let last = heap.last_committed();
        let crc = data_crc(&primary, &heap.geometry());
        fn greet(media: &mut MemMedia, strategy: Strategy, last: u64, hello: Hello) -> HelloError {
            let mut backup = Backup::open(media, 0).unwrap().0;
            let (header, payload) = if strategy == Strategy::NoSm {
                let payload = hello.encode();
                (encode(Kind::Hello, Strategy::NoSm, 0, last, 0, &payload), payload)
            } else {
                StreamCore::new(strategy).hello(last, &hello)
            };
            let h = decode(&header, &payload).unwrap();
            match backup.handle(media, &h, &payload, true) {
                Err(StreamError::Hello(e)) => e,
                other => panic!("{other:?}"),
            }
        }
        let good = hello_of(&heap, &primary, true);
        let other_geometry = Hello { log_bytes: 2 * LOG, ..good.clone() };
        assert!(matches!(greet(&mut media, Strategy::SmRc, last, other_geometry), HelloError::Geometry { .. }));
        let other_data = Hello { data_crc: crc ^ 1, ..good.clone() };
        assert!(matches!(greet(&mut media, Strategy::SmDd, last, other_data), HelloError::OtherData { .. }));
        let other_heap = Hello { history: History::new(heap.history().id() ^ 1), ..good.clone() };
        assert!(matches!(greet(&mut media, Strategy::SmDd, last, other_heap), HelloError::OtherHeap { .. }));
        let newer = Hello { history: heap.history().fork(last, 5), ..good.clone() };
        let older_primary = Hello { history: History::new(heap.history().id()), ..good.clone() };
        {
            // The backup adopts a newer generation at a stream's hello…
            let mut backup = Backup::open(&mut media, 0).unwrap().0;
            let (header, payload) = StreamCore::new(Strategy::SmRc).hello(last, &newer);
            backup.handle(&mut media, &decode(&header, &payload).unwrap(), &payload, true).unwrap();
            assert_eq!(Backup::open(&mut media, 0).unwrap().0.history(), &newer.history);
        }
        // …and a primary still in the older one is then stale.
        assert!(matches!(
            greet(&mut media, Strategy::SmOb, last, older_primary),
            HelloError::StalePrimary { backup: 1, primary: 0 }
        ));
        let good = newer;
        assert_eq!(greet(&mut media, Strategy::NoSm, last, good.clone()), HelloError::NoMirror);
        let text = HelloError::OtherData { tx: 3, backup: 1, primary: 2 }.to_string();
        assert!(text.contains("another heap"), "{text}");
        let ahead = {
            let mut backup = Backup::open(&mut media, 0).unwrap().0;
            backup.last_committed = last + 4;
            let (header, payload) = StreamCore::new(Strategy::SmRc).hello(last, &good);
            let h = decode(&header, &payload).unwrap();
            backup.handle(&mut media, &h, &payload, true).unwrap_err()
        };
        assert_eq!(ahead, StreamError::Hello(HelloError::Ahead { backup: last + 4, primary: last }));
        assert!(ahead.to_string().contains("never committed durably"), "{ahead}");
    }
}
