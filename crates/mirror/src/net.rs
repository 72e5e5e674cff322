//! The mirror over the network: [`Mirror`], the primary's [`EpochSink`]
//! that streams to a backup over the [`Transport`] seam, and
//! [`BackupService`], the backup as a [`reactor::Service`] (the loop that
//! `pmwire mirror-backup` runs).
//!
//! The primary's side is a blocking client, as `SmrClient` is: one-way
//! messages (`Transport::send`) for what it does not wait for, a call for
//! what it does, polling as [`PollBudget`] allows and then blocking in
//! `Transport::wait`, never spinning. A connection carries its messages in
//! order (the seam's contract), which is the ordered stream the backup
//! needs. After any error the mirror is broken: every later step fails
//! (the heap then abandons its transactions; nothing is committed
//! unmirrored), unless [`Mirror::allow_unmirrored`] lets the primary go on
//! alone.

use std::time::{Duration, Instant};

use pmem::Media;
use reactor::{PollBudget, Service};
use transport::{ConnId, Event, OpError, Output, RequestId, Transport};

use crate::backup::{data_crc, Answer, Backup, StreamError};
use crate::history::{rejoin_plan, PrimaryState};
use crate::sink::{Committed, Epoch, EpochSink, SinkError};
use crate::stream::{AnswerError, Planned, StreamCore};
use crate::wire::{
    decode, decode_backup_state, encode, encode_backup_state, reason_bytes, Header, Hello, Kind, Strategy, WireError,
    MAX_COPY_CHUNK, MAX_RECORD_BYTES,
};
use crate::{Heap, Plan};

/// Why [`Mirror::open`] failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenMirrorError {
    /// The heap's log is larger than one message can carry.
    #[error("the heap's log of {0} B is larger than a mirrored epoch may be ({MAX_RECORD_BYTES} B)")]
    LogTooLarge(u64),
    /// No connection.
    #[error("cannot connect to the backup: {0}")]
    Connect(#[from] transport::ConnectError),
    /// The hello failed on the way.
    #[error("mirror hello: {0}")]
    Link(#[from] MirrorError),
}

/// Why a mirror step failed. The mirror is broken from then on.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// The backup refused, or answered something else than was asked.
    #[error(transparent)]
    Answer(#[from] AnswerError),
    /// The answer does not decode.
    #[error("undecodable answer from the backup: {0}")]
    Wire(#[from] WireError),
    /// The transport failed.
    #[error("mirror transport: {0}")]
    Transport(#[from] OpError),
    /// The connection is gone.
    #[error("the backup's connection is gone")]
    Disconnected,
    /// No answer in time.
    #[error("no answer from the backup within {0:?}")]
    Timeout(Duration),
    /// An earlier step failed.
    #[error("the mirror is broken since: {0}")]
    Broken(String),
}

/// Longest a sender blocks at a time while the window is full.
pub const WINDOW_WAIT: Duration = Duration::from_micros(100);

/// A sender's wait for a window slot: its deadline and poll budget so far.
struct WindowWait {
    deadline: Instant,
    since: Instant,
    empty: u32,
}

impl WindowWait {
    fn new(timeout: Duration) -> WindowWait {
        let now = Instant::now();
        WindowWait { deadline: now + timeout, since: now, empty: 0 }
    }
}

/// An answer's header and payload.
type Answered = (Vec<u8>, Vec<u8>);

/// The live connection of a mirror.
struct Link<T: Transport> {
    transport: T,
    conn: ConnId,
    token: u64,
    events: Vec<Event>,
}

/// `payload` in one of the transport's kept buffers (no allocation once
/// the transport has buffers to hand back).
fn staged<T: Transport>(transport: &mut T, payload: &[u8]) -> Vec<u8> {
    let mut buf = transport.take_buffer(payload.len());
    buf.extend_from_slice(payload);
    buf
}

/// A primary's network mirror: an [`EpochSink`] that sends each epoch,
/// fence and commit to a backup under its [`Strategy`], and returns from
/// `commit` only once the backup holds the transaction durably.
pub struct Mirror<T: Transport> {
    strategy: Strategy,
    link: Option<Link<T>>,
    core: Option<StreamCore>,
    plan: Vec<Planned>,
    broken: Option<String>,
    allow_unmirrored: bool,
    unmirrored: Option<String>,
    /// Longest a call waits for its answer.
    pub timeout: Duration,
    /// How long to poll before blocking.
    pub poll: PollBudget,
    /// Round trips waited for so far.
    pub round_trips: u64,
    /// How the backup rejoined at open ([`crate::history::rejoin_plan`]).
    pub rejoin: Plan,
    /// Bytes of data area sent by the copy at open (0: the backup was
    /// current).
    pub resync_bytes: u64,
    /// Messages of the copy at open (its chunks and its `CopyDone`).
    pub resync_messages: u64,
    /// The last answer's payload (a hello's: the backup's state).
    answer_payload: Vec<u8>,
}

impl<T: Transport> Mirror<T> {
    /// Connects to the backup at `backup`, greets it with the heap's
    /// geometry, last durable transaction, data CRC, write tracking and
    /// history, decides with [`rejoin_plan`] (which the backup ran too, and
    /// must agree with) how it rejoins, brings it up to date by an
    /// incremental or a full copy if it must ([`Mirror::rejoin`],
    /// [`Mirror::resync_bytes`]), and starts a stream under `strategy`. A
    /// backup of another heap, ahead of this one, newer than it (this
    /// primary is stale) or at its transaction with other data is refused
    /// with the reason. NO-SM connects to nothing.
    pub fn open(
        heap: &Heap,
        media: &impl Media,
        mut transport: T,
        backup: &T::Addr,
        strategy: Strategy,
    ) -> Result<Mirror<T>, OpenMirrorError> {
        let mut mirror = Mirror {
            strategy,
            link: None,
            core: None,
            plan: Vec::with_capacity(4),
            broken: None,
            allow_unmirrored: false,
            unmirrored: None,
            timeout: Duration::from_secs(10),
            poll: PollBudget::default(),
            round_trips: 0,
            rejoin: Plan::Stream,
            resync_bytes: 0,
            resync_messages: 0,
            answer_payload: Vec::new(),
        };
        if strategy == Strategy::NoSm {
            return Ok(mirror);
        }
        let geometry = heap.geometry();
        if geometry.log_bytes > MAX_RECORD_BYTES {
            return Err(OpenMirrorError::LogTooLarge(geometry.log_bytes));
        }
        let conn = transport.connect(backup)?;
        mirror.link = Some(Link { transport, conn, token: 0, events: Vec::with_capacity(64) });
        let core = StreamCore::new(strategy);
        let hello = Hello {
            log_bytes: geometry.log_bytes,
            data_bytes: geometry.data_bytes,
            data_crc: data_crc(media, &geometry),
            tracked_since: Some(heap.tracker().since()),
            abandoned_to: heap.abandoned_to(),
            history: heap.history().clone(),
        };
        let last = heap.last_durable(media);
        let (header, payload) = core.hello(last, &hello);
        let planned = Planned { header, kind: Kind::Hello, tx: 0, count: 0, with_record: false };
        mirror.core = Some(core);
        let answer = mirror.call(&planned, &payload)?;
        let state = decode_backup_state(&mirror.answer_payload).map_err(MirrorError::from)?;
        let primary = PrimaryState {
            history: heap.history(),
            last,
            tracked_since: hello.tracked_since,
            data_crc: hello.data_crc,
            abandoned_to: hello.abandoned_to,
        };
        let plan = rejoin_plan(&primary, &state);
        if plan.code() != answer.count {
            let got = format!("plan {} for its state {state:?}, the primary's is {plan:?}", answer.count);
            return Err(MirrorError::Answer(AnswerError::Mismatch { kind: Kind::Hello, tx: 0, got }).into());
        }
        match &plan {
            Plan::Stream => {}
            Plan::FullCopy => mirror.copy(media, &geometry, last, hello.data_crc, &[(0, geometry.data_bytes)])?,
            Plan::Incremental { from } => {
                let ranges = heap.tracker().written_after(*from).expect("the plan checked the tracking covers it");
                mirror.copy(media, &geometry, last, hello.data_crc, &ranges)?;
            }
            Plan::Refuse(e) => unreachable!("the backup refuses before it answers: {e}"),
        }
        mirror.rejoin = plan;
        Ok(mirror)
    }

    /// Resynchronises a backup that is behind (or whose earlier copy was
    /// cut short): the data area's `ranges` (all of it, for a full copy;
    /// the blocks written since the backup's transaction, for an
    /// incremental one) as of transaction `last`, in order, in chunks of
    /// at most [`MAX_COPY_CHUNK`], then a `CopyDone` call with the area's
    /// size and CRC, answered once the backup's copy is durable, checks,
    /// and its heap names `last`.
    fn copy(
        &mut self,
        media: &impl Media,
        geometry: &crate::format::Geometry,
        last: u64,
        data_crc: u32,
        ranges: &[(u64, u64)],
    ) -> Result<(), MirrorError> {
        let mut chunk = vec![0u8; (geometry.data_bytes.min(MAX_COPY_CHUNK as u64)) as usize];
        for &(start, len) in ranges {
            let mut at = start;
            while at < start + len {
                let n = (start + len - at).min(chunk.len() as u64) as usize;
                media.read(geometry.data_at() + at, &mut chunk[..n]);
                let header = encode(Kind::CopyChunk, Strategy::NoSm, last, at, 0, &chunk[..n]);
                let planned = Planned { header, kind: Kind::CopyChunk, tx: last, count: 0, with_record: true };
                self.send(&planned, &chunk[..n])?;
                at += n as u64;
                self.resync_bytes += n as u64;
                self.resync_messages += 1;
            }
        }
        let header = encode(Kind::CopyDone, Strategy::NoSm, last, geometry.data_bytes, data_crc, &[]);
        let planned = Planned { header, kind: Kind::CopyDone, tx: last, count: data_crc, with_record: false };
        self.call(&planned, &[])?;
        self.resync_messages += 1;
        Ok(())
    }

    /// The strategy.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// Why the mirror is broken, if it is.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Sends what the core planned; `record` is the epoch's, if any.
    fn run_plan(&mut self, record: &[u8]) -> Result<(), MirrorError> {
        if let Some(reason) = &self.broken {
            self.plan.clear();
            return Err(MirrorError::Broken(reason.clone()));
        }
        if self.unmirrored.is_some() {
            self.plan.clear();
            return Ok(());
        }
        let plan = std::mem::take(&mut self.plan);
        let mut result = Ok(());
        for planned in &plan {
            let payload = if planned.with_record { record } else { &[][..] };
            result = if planned.kind.is_call() {
                self.call(planned, payload).map(|_| ())
            } else {
                self.send(planned, payload)
            };
            if result.is_err() {
                break;
            }
        }
        self.plan = plan;
        self.plan.clear();
        match result {
            Err(e) if self.allow_unmirrored => {
                self.go_unmirrored(e.to_string());
                Ok(())
            }
            other => other,
        }
    }

    /// Lets the primary go on alone if the backup is lost (off by
    /// default: then a lost backup fails every later step). Once lost, the
    /// mirror sends nothing more, every step succeeds, and
    /// [`unmirrored`](Mirror::unmirrored) says why; the backup then misses
    /// transactions, and a new stream to it begins with a full copy.
    pub fn allow_unmirrored(&mut self, allow: bool) {
        self.allow_unmirrored = allow;
    }

    /// Why the primary goes on without its backup, if it does.
    pub fn unmirrored(&self) -> Option<&str> {
        self.unmirrored.as_deref()
    }

    /// Drops the stream: the backup abandons its open transaction.
    fn go_unmirrored(&mut self, reason: String) {
        self.broken = None;
        self.unmirrored = Some(reason);
        if let Some(mut link) = self.link.take() {
            link.transport.close(link.conn);
        }
    }

    /// Marks the mirror broken by `result`'s error.
    fn note(&mut self, result: Result<(), MirrorError>) -> Result<(), MirrorError> {
        if let Err(e) = &result {
            if self.broken.is_none() {
                self.broken = Some(e.to_string());
            }
        }
        result
    }

    fn send(&mut self, planned: &Planned, payload: &[u8]) -> Result<(), MirrorError> {
        let mut window = WindowWait::new(self.timeout);
        loop {
            let link = self.link.as_mut().expect("a stream has a link");
            let buf = staged(&mut link.transport, payload);
            match link.transport.send(link.conn, &planned.header, buf) {
                Ok(()) => return Ok(()),
                Err(OpError::WindowFull(_)) => self.await_window(&mut window)?,
                Err(e) => return self.note(Err(e.into())),
            }
        }
    }

    /// Sends the call `planned` and waits for its answer, which must pass
    /// [`StreamCore::check`]; returns the answer's header.
    fn call(&mut self, planned: &Planned, payload: &[u8]) -> Result<Header, MirrorError> {
        let mut window = WindowWait::new(self.timeout);
        let token = loop {
            let link = self.link.as_mut().expect("a stream has a link");
            link.token += 1;
            let token = link.token;
            let buf = staged(&mut link.transport, payload);
            match link.transport.call(link.conn, &planned.header, buf, token) {
                Ok(()) => break token,
                Err(OpError::WindowFull(_)) => self.await_window(&mut window)?,
                Err(e) => return self.note(Err(e.into())).map(|()| unreachable!("an error")),
            }
        };
        let answer = self.pump(token, Instant::now() + self.timeout);
        let result = match answer {
            Ok((header, payload)) => {
                let checked = decode(&header, &payload)
                    .map_err(MirrorError::from)
                    .and_then(|h| StreamCore::check(planned, &h, &payload).map(|()| h).map_err(MirrorError::from));
                self.answer_payload.clear();
                self.answer_payload.extend_from_slice(&payload);
                self.link.as_mut().expect("a stream has a link").transport.recycle(payload);
                checked
            }
            Err(e) => Err(e),
        };
        self.round_trips += 1;
        match result {
            Ok(h) => Ok(h),
            Err(e) => self.note(Err(e)).map(|()| unreachable!("an error")),
        }
    }

    /// Polls (then blocks) until the call `token` is answered: its header
    /// and payload.
    fn pump(&mut self, token: u64, deadline: Instant) -> Result<Answered, MirrorError> {
        let (timeout, budget) = (self.timeout, self.poll);
        let mut since = Instant::now();
        let mut empty = 0u32;
        loop {
            match self.take_events(Some(token)) {
                Err(e) => return self.fail(e),
                Ok(Some(answer)) => return Ok(answer),
                Ok(None) => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return self.fail(MirrorError::Timeout(timeout));
            }
            empty += 1;
            if budget.keep_polling(since, empty) {
                continue;
            }
            let link = self.link.as_mut().expect("a stream has a link");
            let _ = link.transport.wait(deadline - now);
            since = Instant::now();
            empty = 0;
        }
    }

    /// The window is full: takes the events there are (a poll is what
    /// settles a send over UCX), polling again as the [`PollBudget`]
    /// allows, then blocks for at most [`WINDOW_WAIT`] (a slot frees when
    /// the peer takes a message, with no event here), so the caller tries
    /// again.
    fn await_window(&mut self, window: &mut WindowWait) -> Result<(), MirrorError> {
        if let Err(e) = self.take_events(None) {
            return self.fail(e);
        }
        let now = Instant::now();
        if now >= window.deadline {
            let timeout = self.timeout;
            return self.fail(MirrorError::Timeout(timeout));
        }
        window.empty += 1;
        if self.poll.keep_polling(window.since, window.empty) {
            return Ok(());
        }
        let link = self.link.as_mut().expect("a stream has a link");
        let _ = link.transport.wait((window.deadline - now).min(WINDOW_WAIT));
        window.since = Instant::now();
        window.empty = 0;
        Ok(())
    }

    /// One poll: the answer to `token` if it came; an error if the
    /// connection is gone or the call failed.
    fn take_events(&mut self, token: Option<u64>) -> Result<Option<Answered>, MirrorError> {
        let link = self.link.as_mut().expect("a stream has a link");
        link.events.clear();
        link.transport.poll(&mut link.events, 64);
        let mut found = None;
        let mut gone = false;
        for event in link.events.drain(..) {
            match event {
                Event::Completion(c) if Some(c.token) == token => found = Some(c.result),
                Event::Message { payload, .. } => link.transport.recycle_payload(payload),
                Event::Disconnected { conn, .. } if conn == link.conn => gone = true,
                _ => {}
            }
        }
        match found {
            Some(Ok(Output::Response { header, payload })) => Ok(Some((header, payload))),
            Some(Ok(other)) => Err(MirrorError::Broken(format!("unexpected completion {other:?}"))),
            Some(Err(e)) => Err(e.into()),
            None if gone => Err(MirrorError::Disconnected),
            None => Ok(None),
        }
    }

    fn fail<X>(&mut self, e: MirrorError) -> Result<X, MirrorError> {
        if self.broken.is_none() {
            self.broken = Some(e.to_string());
        }
        Err(e)
    }

    fn core(&mut self) -> Option<&mut StreamCore> {
        self.core.as_mut()
    }
}

impl<T: Transport> Drop for Mirror<T> {
    /// Closes the stream (the backup abandons an open transaction) and
    /// waits, at most a second, for the close to complete.
    fn drop(&mut self) {
        let Some(link) = self.link.as_mut() else {
            return;
        };
        link.transport.close(link.conn);
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            link.events.clear();
            link.transport.poll(&mut link.events, 64);
            let closed =
                link.events.drain(..).any(|e| matches!(e, Event::Disconnected { conn, .. } if conn == link.conn));
            let now = Instant::now();
            if closed || now >= deadline {
                return;
            }
            let _ = link.transport.wait(deadline - now);
        }
    }
}

impl<T: Transport> EpochSink for Mirror<T> {
    fn epoch(&mut self, epoch: &Epoch<'_>) -> Result<(), SinkError> {
        let mut plan = std::mem::take(&mut self.plan);
        let Some(core) = self.core() else {
            return Ok(());
        };
        core.epoch(epoch, &mut plan);
        self.plan = plan;
        Ok(self.run_plan(epoch.record())?)
    }

    fn dfence(&mut self, tx: u64) -> Result<(), SinkError> {
        let mut plan = std::mem::take(&mut self.plan);
        let Some(core) = self.core() else {
            return Ok(());
        };
        core.dfence(tx, &mut plan);
        self.plan = plan;
        Ok(self.run_plan(&[])?)
    }

    fn commit(&mut self, commit: &Committed) -> Result<(), SinkError> {
        let mut plan = std::mem::take(&mut self.plan);
        let Some(core) = self.core() else {
            return Ok(());
        };
        core.commit(commit, &mut plan);
        self.plan = plan;
        Ok(self.run_plan(&[])?)
    }

    fn abort(&mut self, tx: u64) {
        let mut plan = std::mem::take(&mut self.plan);
        let Some(core) = self.core() else { return };
        core.abort(tx, &mut plan);
        self.plan = plan;
        // A broken mirror has nothing to tell; a failed abort breaks it.
        let _ = self.run_plan(&[]);
    }
}

/// Counts of what a backup served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackupStats {
    /// Streams greeted.
    pub streams: u64,
    /// Transactions committed.
    pub commits: u64,
    /// Messages refused (their stream then ended).
    pub refused: u64,
    /// Streams taken over by a new primary's hello.
    pub takeovers: u64,
    /// Copies finished (`CopyDone` answered), full or incremental.
    pub copies: u64,
    /// Bytes of data area received in copy chunks.
    pub copy_bytes: u64,
}

/// The backup as a [`reactor::Service`]: one primary's stream at a time,
/// each message handed to the [`Backup`] core in arrival order, each call
/// answered once the core says so. A hello on another connection whose
/// heap matches takes the stream over (the old connection is closed, its
/// open transaction abandoned); one that does not match is refused and
/// the stream goes on.
pub struct BackupService<M: Media> {
    media: M,
    backup: Backup,
    primary: Option<ConnId>,
    /// A stream whose message was refused: why (its later one-way messages
    /// are dropped and its calls refused with this, until it closes).
    poisoned: Option<(ConnId, String)>,
    stats: BackupStats,
    /// A primary's connection replaced by another's hello, to close.
    closing: Option<ConnId>,
    /// The last refusal, for the operator.
    pub last_refusal: Option<String>,
}

impl<M: Media> BackupService<M> {
    /// Serves `backup`, whose heap is on `media`.
    pub fn new(media: M, backup: Backup) -> BackupService<M> {
        BackupService {
            media,
            backup,
            primary: None,
            poisoned: None,
            stats: BackupStats::default(),
            closing: None,
            last_refusal: None,
        }
    }

    /// The core.
    pub fn backup(&self) -> &Backup {
        &self.backup
    }

    /// The medium.
    pub fn media(&self) -> &M {
        &self.media
    }

    /// What was served.
    pub fn stats(&self) -> BackupStats {
        self.stats
    }

    /// Hands the medium back.
    pub fn into_media(self) -> M {
        self.media
    }

    /// Acts on one message; `Err` is the reason to refuse it.
    fn serve(&mut self, conn: ConnId, header: &[u8], payload: &[u8], call: bool) -> Result<Option<Answer>, String> {
        if let Some((poisoned, reason)) = &self.poisoned {
            if *poisoned == conn {
                return Err(format!("an earlier message was refused: {reason}"));
            }
        }
        let h = decode(header, payload).map_err(|e| e.to_string())?;
        match self.primary {
            Some(primary) if primary != conn => {
                if h.kind != Kind::Hello {
                    return Err(format!("{:?} from a connection that is not the primary's", h.kind));
                }
                // A primary whose heap matches takes the stream over (the
                // one connected may be dead: over shared memory UCX does
                // not detect a peer that died); any other is refused and
                // the stream goes on.
                self.backup.check_hello(&self.media, &h, payload).map_err(|e| e.to_string())?;
                self.backup.disconnected(&mut self.media);
                self.primary = None;
                self.stats.takeovers += 1;
                self.closing = Some(primary);
            }
            None if h.kind != Kind::Hello => return Err(StreamError::OutOfPlace(h.kind).to_string()),
            _ => {}
        }
        let answer = self.backup.handle(&mut self.media, &h, payload, call).map_err(|e| e.to_string())?;
        match h.kind {
            Kind::Hello => {
                self.primary = Some(conn);
                self.stats.streams += 1;
            }
            Kind::Commit => self.stats.commits += 1,
            Kind::CopyChunk => self.stats.copy_bytes += payload.len() as u64,
            Kind::CopyDone => self.stats.copies += 1,
            _ => {}
        }
        Ok(answer)
    }

    fn refused(&mut self, conn: ConnId, reason: &str) {
        self.stats.refused += 1;
        self.last_refusal = Some(reason.to_string());
        if self.primary == Some(conn) && self.poisoned.is_none() {
            self.poisoned = Some((conn, reason.to_string()));
        }
    }

    fn answer<T: Transport>(transport: &mut T, id: RequestId, result: &Result<Option<Answer>, String>) {
        let (header, payload) = match result {
            Ok(Some(a)) => {
                let payload = a.state.map(|s| encode_backup_state(&s).to_vec()).unwrap_or_default();
                (encode(Kind::Ack, Strategy::NoSm, a.tx, a.value, a.count, &payload), payload)
            }
            Ok(None) => unreachable!("every call is answered by the core"),
            Err(reason) => {
                let text = reason_bytes(reason);
                (encode(Kind::Refused, Strategy::NoSm, 0, 0, 0, text), text.to_vec())
            }
        };
        let buf = staged(transport, &payload);
        // A reply fails only on a connection that is gone; its
        // disconnect event ends the stream.
        let _ = transport.reply(id, &header, buf);
    }
}

impl<T: Transport, M: Media> Service<T> for BackupService<M> {
    fn on_event(&mut self, transport: &mut T, event: Event, _now: Duration) {
        match event {
            Event::Request(req) => {
                let conn = req.id.conn();
                let result = self.serve(conn, &req.header, &req.payload, true);
                if let Err(reason) = &result {
                    self.refused(conn, reason);
                }
                Self::answer(transport, req.id, &result);
                transport.recycle(req.payload);
                if let Some(old) = self.closing.take() {
                    transport.close(old);
                }
            }
            Event::Message { conn, header, payload } => {
                if let Err(reason) = self.serve(conn, &header, &payload, false) {
                    self.refused(conn, &reason);
                }
                transport.recycle_payload(payload);
            }
            Event::Disconnected { conn, .. } => {
                if self.primary == Some(conn) {
                    self.primary = None;
                    self.backup.disconnected(&mut self.media);
                }
                if self.poisoned.as_ref().is_some_and(|(c, _)| *c == conn) {
                    self.poisoned = None;
                }
            }
            Event::Accepted(_) | Event::Completion(_) => {}
        }
    }

    fn poll_work(&mut self, _transport: &mut T, _now: Duration) -> bool {
        false
    }

    fn next_deadline(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use pmem::MemMedia;
    use reactor::{Reactor, RealClock};
    use transport::{InProcNetwork, InProcTransport, Limits, NodeId};

    use super::*;
    use crate::wire::Hello;
    use crate::TxError;

    const LOG: u64 = 64 << 10;
    const DATA: u64 = 256 << 10;

    /// A backup served on its own thread; `finish` stops it and hands its
    /// medium back.
    struct Served {
        stop: Arc<AtomicBool>,
        handle: std::thread::JoinHandle<(MemMedia, BackupStats)>,
        addr: NodeId,
    }

    impl Served {
        fn start(net: &InProcNetwork, media: MemMedia) -> Served {
            let mut media = media;
            let (backup, _) = Backup::open(&mut media, 0).unwrap();
            let transport = net.node();
            let addr = transport.id();
            let stop = Arc::new(AtomicBool::new(false));
            let flag = stop.clone();
            let handle = std::thread::spawn(move || {
                let mut reactor = Reactor::new(transport, BackupService::new(media, backup));
                reactor.run(&RealClock::new(), &flag, PollBudget::BLOCK);
                let stats = reactor.service.stats();
                (reactor.service.into_media(), stats)
            });
            Served { stop, handle, addr }
        }

        fn finish(self) -> MemMedia {
            self.finish_with_stats().0
        }

        fn finish_with_stats(self) -> (MemMedia, BackupStats) {
            self.stop.store(true, Ordering::Relaxed);
            self.handle.join().unwrap()
        }
    }

    fn heap_media() -> (MemMedia, Heap) {
        let mut media = MemMedia::new(Heap::required_size(LOG, DATA) as usize);
        let heap = Heap::create(&mut media, 0, LOG, DATA).unwrap();
        (media, heap)
    }

    fn data(heap: &Heap, media: &MemMedia) -> Vec<u8> {
        let mut buf = vec![0u8; DATA as usize];
        heap.read(media, 0, &mut buf).unwrap();
        buf
    }

    /// Transactions of 1-40 epochs of 1-8 writes of 64 B at random
    /// 64 B-aligned places, some aborted, some with a dfence.
    fn workload(heap: &mut Heap, media: &mut MemMedia, mirror: &mut Mirror<InProcTransport>, txs: u64) -> u64 {
        let mut state = 0x5eed_u64;
        let mut next = move |n: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        let mut epochs_sent = 0;
        for i in 0..txs {
            let mut tx = heap.begin_with(media, &mut *mirror);
            let epochs = 1 + next(40);
            for e in 0..epochs {
                for _ in 0..1 + next(8) {
                    let at = next(DATA / 64) * 64;
                    tx.write(at, &[(i * 7 + e) as u8; 64]).unwrap();
                }
                if e == 1 {
                    tx.dfence().unwrap();
                } else {
                    tx.ofence().unwrap();
                }
            }
            epochs_sent += epochs;
            if i % 9 == 8 {
                tx.abort();
            } else {
                tx.commit().unwrap();
            }
        }
        epochs_sent
    }

    #[test]
    fn each_strategy_mirrors_every_committed_transaction() {
        for strategy in [Strategy::SmRc, Strategy::SmOb, Strategy::SmDd] {
            let net = InProcNetwork::new(Limits::default());
            let (mut media, mut heap) = heap_media();
            let served = Served::start(&net, heap_media().0);
            let mut mirror = Mirror::open(&heap, &media, net.node(), &served.addr, strategy).unwrap();
            let epochs = workload(&mut heap, &mut media, &mut mirror, 30);
            let round_trips = mirror.round_trips;
            drop(mirror);
            let mut backup = served.finish();
            let (opened, _) = Heap::open(&mut backup, 0).unwrap();
            assert_eq!(opened.last_committed(), heap.last_committed(), "{strategy}");
            assert_eq!(data(&opened, &backup), data(&heap, &media), "{strategy}");
            let commits = 30 - 30 / 9;
            let want = match strategy {
                Strategy::SmRc => 1 + epochs + commits as u64,
                _ => 1 + 30 + commits as u64, // hello, one dfence per transaction, the commits
            };
            assert_eq!(round_trips, want, "{strategy}: round trips");
        }
    }

    #[test]
    fn a_second_stream_resumes_where_the_first_ended() {
        let net = InProcNetwork::new(Limits::default());
        let (mut media, mut heap) = heap_media();
        let served = Served::start(&net, heap_media().0);
        for strategy in [Strategy::SmOb, Strategy::SmDd, Strategy::SmRc] {
            let mut mirror = Mirror::open(&heap, &media, net.node(), &served.addr, strategy).unwrap();
            workload(&mut heap, &mut media, &mut mirror, 5);
            // A transaction that writes nothing reaches neither medium, and
            // a new stream on the same heap still matches the backup.
            heap.begin_with(&mut media, &mut mirror).commit().unwrap();
            drop(mirror);
            let mut mirror = Mirror::open(&heap, &media, net.node(), &served.addr, strategy).unwrap();
            // An open transaction's epochs reach the backup, then the
            // primary goes away: nothing of it may be applied.
            let mut tx = heap.begin_with(&mut media, &mut mirror);
            tx.write(0, &[0xff; 64]).unwrap();
            tx.ofence().unwrap();
            std::mem::forget(tx);
            drop(mirror);
            heap = Heap::open(&mut media, 0).unwrap().0;
        }
        let backup = served.finish();
        let mut backup = backup;
        let (opened, _) = Heap::open(&mut backup, 0).unwrap();
        assert_eq!(data(&opened, &backup), data(&heap, &media));
    }

    #[test]
    fn a_primary_allowed_to_go_on_unmirrored_does_and_says_why() {
        let net = InProcNetwork::new(Limits::default());
        let (mut media, mut heap) = heap_media();
        let served = Served::start(&net, heap_media().0);
        let backup_id = served.addr;
        let mut mirror = Mirror::open(&heap, &media, net.node(), &backup_id, Strategy::SmRc).unwrap();
        mirror.allow_unmirrored(true);
        workload(&mut heap, &mut media, &mut mirror, 3);
        assert!(mirror.unmirrored().is_none());
        net.crash(backup_id);
        let mut tx = heap.begin_with(&mut media, &mut mirror);
        tx.write(0, &[5; 64]).unwrap();
        tx.ofence().unwrap();
        tx.write(64, &[6; 64]).unwrap();
        tx.commit().expect("allowed to go on alone");
        assert!(mirror.unmirrored().is_some_and(|why| !why.is_empty()));
        assert!(mirror.broken().is_none());
        let mut buf = [0u8; 128];
        heap.read(&media, 0, &mut buf).unwrap();
        assert_eq!((buf[0], buf[64]), (5, 6), "committed locally");
        drop(mirror);
        served.finish();
    }

    #[test]
    fn a_restarted_backup_that_is_behind_resynchronises_by_a_full_copy() {
        // 600 KiB of data: two whole chunks and a partial one.
        const BIG: u64 = 600 << 10;
        let fresh = || {
            let mut media = MemMedia::new(Heap::required_size(LOG, BIG) as usize);
            let heap = Heap::create(&mut media, 0, LOG, BIG).unwrap();
            (media, heap)
        };
        let whole = |heap: &Heap, media: &MemMedia| {
            let mut buf = vec![0u8; BIG as usize];
            heap.read(media, 0, &mut buf).unwrap();
            buf
        };
        for strategy in [Strategy::SmRc, Strategy::SmOb, Strategy::SmDd] {
            let net = InProcNetwork::new(Limits::default());
            let (mut media, mut heap) = fresh();
            let served = Served::start(&net, fresh().0);
            let mut mirror = Mirror::open(&heap, &media, net.node(), &served.addr, strategy).unwrap();
            assert_eq!(mirror.resync_bytes, 0, "a current backup needs no copy");
            for i in 0..4u64 {
                let mut tx = heap.begin_with(&mut media, &mut mirror);
                tx.write(i * 1000, &[i as u8 + 1; 100]).unwrap();
                tx.commit().unwrap();
            }
            drop(mirror);
            // The backup stops; the primary commits more without it,
            // in every chunk of the data area.
            let stopped = served.finish();
            for i in 0..6u64 {
                let mut tx = heap.begin(&mut media);
                tx.write(i * 100_000 + 13, &[0xa0 + i as u8; 300]).unwrap();
                tx.ofence().unwrap();
                tx.write(BIG - 64 - i, &[i as u8; 64]).unwrap();
                tx.commit().unwrap();
            }
            let behind = Backup::open(&mut stopped.clone(), 0).unwrap().0.last_committed();
            assert_eq!(behind, 4);
            assert_eq!(heap.last_committed(), 10);
            // The primary restarts: its record of written blocks begins
            // again at 10, so it cannot tell what the backup lacks.
            heap = Heap::open(&mut media, 0).unwrap().0;
            let served = Served::start(&net, stopped);
            let mut mirror = Mirror::open(&heap, &media, net.node(), &served.addr, strategy).unwrap();
            assert_eq!(mirror.rejoin, Plan::FullCopy, "{strategy}");
            assert_eq!(mirror.resync_bytes, BIG, "{strategy}: a full copy");
            assert_eq!(mirror.resync_messages, 4, "{strategy}: three chunks and CopyDone");
            // The stream goes on with new transactions after the copy.
            for i in 0..3u64 {
                let mut tx = heap.begin_with(&mut media, &mut mirror);
                tx.write(i * 200_000 + 7, &[0x55 ^ i as u8; 200]).unwrap();
                tx.ofence().unwrap();
                tx.write(0, &[i as u8; 8]).unwrap();
                tx.commit().unwrap();
            }
            drop(mirror);
            let mut backup = served.finish();
            let (opened, _) = Heap::open(&mut backup, 0).unwrap();
            assert_eq!(opened.last_committed(), 13, "{strategy}");
            assert_eq!(whole(&opened, &backup), whole(&heap, &media), "{strategy}: byte for byte");
            // Restarted again, now current: no copy.
            let served = Served::start(&net, backup);
            let mirror = Mirror::open(&heap, &media, net.node(), &served.addr, strategy).unwrap();
            assert_eq!((&mirror.rejoin, mirror.resync_bytes), (&Plan::Stream, 0), "{strategy}");
            drop(mirror);
            served.finish();
        }
    }

    /// A raw call on `conn`; the answer's kind and payload.
    fn raw_call(t: &mut InProcTransport, conn: ConnId, header: &[u8], payload: &[u8]) -> (Kind, String) {
        t.call(conn, header, payload.to_vec(), 99).unwrap();
        let mut events = Vec::new();
        loop {
            assert!(t.wait(Duration::from_secs(10)).unwrap(), "no answer");
            t.poll(&mut events, 16);
            for e in events.drain(..) {
                if let Event::Completion(c) = e {
                    let Ok(Output::Response { header, payload }) = c.result else { panic!("{:?}", c.result) };
                    let h = decode(&header, &payload).unwrap();
                    return (h.kind, String::from_utf8_lossy(&payload).into_owned());
                }
            }
        }
    }

    #[test]
    fn garbage_and_strangers_are_refused_and_a_matching_primary_takes_over() {
        let net = InProcNetwork::new(Limits::default());
        let (mut media, mut heap) = heap_media();
        let served = Served::start(&net, heap_media().0);
        let mut intruder = net.node();
        let conn = intruder.connect(&served.addr).unwrap();
        let (kind, why) = raw_call(&mut intruder, conn, b"not a mirror header", &[]);
        assert_eq!(kind, Kind::Refused);
        assert!(why.contains("40"), "{why}");
        let commit = encode(Kind::Commit, Strategy::NoSm, 1, 64, 1, &[]);
        let (kind, why) = raw_call(&mut intruder, conn, &commit, &[]);
        assert_eq!(kind, Kind::Refused);
        assert!(why.contains("hello"), "{why}");
        let mut mirror = Mirror::open(&heap, &media, net.node(), &served.addr, Strategy::SmDd).unwrap();
        workload(&mut heap, &mut media, &mut mirror, 4);
        // A second primary whose heap does not match is refused while the
        // first is connected, and its one-way garbage changes nothing.
        let crc = data_crc(&media, &heap.geometry());
        let other = Hello {
            log_bytes: LOG,
            data_bytes: DATA,
            data_crc: crc ^ 1,
            tracked_since: None,
            abandoned_to: 0,
            history: heap.history().clone(),
        };
        let (header, payload) = StreamCore::new(Strategy::SmOb).hello(heap.last_durable(&media), &other);
        let (kind, why) = raw_call(&mut intruder, conn, &header, &payload);
        assert_eq!(kind, Kind::Refused);
        assert!(why.contains("another heap"), "{why}");
        let epoch = encode(Kind::Epoch, Strategy::NoSm, heap.last_committed() + 1, 0, 0, &[0; 64]);
        intruder.send(conn, &epoch, vec![0; 64]).unwrap();
        workload(&mut heap, &mut media, &mut mirror, 4);
        // One whose heap matches takes the stream over (the first primary
        // might be dead): the first's next step fails, the new one mirrors.
        let mut second = Mirror::open(&heap, &media, net.node(), &served.addr, Strategy::SmOb).unwrap();
        let mut tx = heap.begin_with(&mut media, &mut mirror);
        tx.write(0, &[9; 64]).unwrap();
        let err = tx.commit().unwrap_err();
        assert!(matches!(err, TxError::Sink(_)), "{err}");
        drop(mirror);
        workload(&mut heap, &mut media, &mut second, 4);
        drop(second);
        let mut backup = served.finish();
        let (opened, _) = Heap::open(&mut backup, 0).unwrap();
        assert_eq!(data(&opened, &backup), data(&heap, &media));
    }

    #[test]
    fn a_backup_of_another_heap_is_refused_with_the_reason() {
        let net = InProcNetwork::new(Limits::default());
        let (mut other, mut other_heap) = heap_media();
        let mut tx = other_heap.begin(&mut other);
        tx.write(0, b"not yours").unwrap();
        tx.commit().unwrap();
        let served = Served::start(&net, other.clone());
        let (mut media, mut heap) = heap_media();
        let mut tx = heap.begin(&mut media);
        tx.write(0, b"mine").unwrap();
        tx.commit().unwrap();
        let err = Mirror::open(&heap, &media, net.node(), &served.addr, Strategy::SmDd).err().unwrap();
        assert!(err.to_string().contains("another heap"), "{err}");
        let (fresh_media, fresh) = heap_media();
        let err = Mirror::open(&fresh, &fresh_media, net.node(), &served.addr, Strategy::SmOb).err().unwrap();
        assert!(err.to_string().contains("another heap"), "{err}");
        served.finish();
        // Its own heap, restored from an older copy: the backup is ahead.
        let mut restored = other.clone();
        let mut tx = other_heap.begin(&mut other);
        tx.write(64, b"lost by the restore").unwrap();
        tx.commit().unwrap();
        let served = Served::start(&net, other);
        let (restored_heap, _) = Heap::open(&mut restored, 0).unwrap();
        let err = Mirror::open(&restored_heap, &restored, net.node(), &served.addr, Strategy::SmRc).err().unwrap();
        assert!(err.to_string().contains("ahead"), "{err}");
        served.finish();
    }

    /// A 600 KiB heap whose backup stopped after 4 mirrored transactions
    /// while the primary went on alone for `txs` more, each writing 64 B
    /// at two places.
    fn behind(net: &InProcNetwork, strategy: Strategy, txs: u64) -> (MemMedia, Heap, MemMedia) {
        let (mut media, mut heap) = big();
        let served = Served::start(net, big().0);
        let mut mirror = Mirror::open(&heap, &media, net.node(), &served.addr, strategy).unwrap();
        mirror.allow_unmirrored(true);
        for i in 0..4u64 {
            let mut tx = heap.begin_with(&mut media, &mut mirror);
            tx.write(i * 1000, &[i as u8 + 1; 100]).unwrap();
            tx.commit().unwrap();
        }
        net.crash(served.addr);
        let backup = served.finish();
        // The backup is gone: the primary goes on unmirrored.
        for i in 0..txs {
            let mut tx = heap.begin_with(&mut media, &mut mirror);
            tx.write((i * 7919 * 64) % (BIG - 64), &[0xa0 ^ i as u8; 64]).unwrap();
            tx.ofence().unwrap();
            tx.write(BIG - 64, &[i as u8; 64]).unwrap();
            tx.commit().unwrap();
        }
        assert_eq!(mirror.unmirrored().is_some(), txs > 0, "{strategy}: the primary went on alone");
        drop(mirror);
        (media, heap, backup)
    }

    const BIG: u64 = 600 << 10;

    fn big() -> (MemMedia, Heap) {
        let mut media = MemMedia::new(Heap::required_size(LOG, BIG) as usize);
        let heap = Heap::create(&mut media, 0, LOG, BIG).unwrap();
        (media, heap)
    }

    fn whole(heap: &Heap, media: &MemMedia) -> Vec<u8> {
        let mut buf = vec![0u8; heap.data_bytes() as usize];
        heap.read(media, 0, &mut buf).unwrap();
        buf
    }

    #[test]
    fn a_restarted_backup_that_is_behind_resynchronises_incrementally() {
        for strategy in [Strategy::SmRc, Strategy::SmOb, Strategy::SmDd] {
            let net = InProcNetwork::new(Limits::default());
            let (mut media, mut heap, backup) = behind(&net, strategy, 40);
            assert_eq!(Backup::open(&mut backup.clone(), 0).unwrap().0.last_committed(), 4);
            let served = Served::start(&net, backup);
            let mut mirror = Mirror::open(&heap, &media, net.node(), &served.addr, strategy).unwrap();
            assert_eq!(mirror.rejoin, Plan::Incremental { from: 4 }, "{strategy}");
            // 40 transactions wrote 41 distinct 1 KiB blocks at most.
            assert!(mirror.resync_bytes <= 41 * 1024, "{strategy}: {} B", mirror.resync_bytes);
            assert!(mirror.resync_bytes * 10 < BIG, "{strategy}: far less than a full copy");
            assert!(mirror.resync_messages >= 2, "{strategy}");
            // The stream goes on after the copy.
            let mut tx = heap.begin_with(&mut media, &mut mirror);
            tx.write(500, &[0x77; 100]).unwrap();
            tx.commit().unwrap();
            let sent = mirror.resync_bytes;
            drop(mirror);
            let (mut backup, stats) = served.finish_with_stats();
            assert_eq!((stats.copies, stats.copy_bytes, stats.commits), (1, sent, 1), "{strategy}");
            let (opened, _) = Heap::open(&mut backup, 0).unwrap();
            assert_eq!(opened.last_committed(), heap.last_committed(), "{strategy}");
            assert_eq!(opened.history(), heap.history(), "{strategy}");
            assert_eq!(whole(&opened, &backup), whole(&heap, &media), "{strategy}: byte for byte");
        }
    }

    #[test]
    fn an_old_primary_rejoins_the_promoted_backup_by_a_full_copy() {
        let net = InProcNetwork::new(Limits::default());
        // The old primary committed 3 transactions the backup never had.
        let (old_media, old_heap, mut backup) = behind(&net, Strategy::SmOb, 3);
        assert_eq!(old_heap.last_committed(), 7);
        // The backup is promoted at 4 and commits as the primary.
        let (mut promoted, promotion) = Heap::promote(&mut backup, 0).unwrap();
        assert_eq!((promotion.generation.number, promotion.generation.start), (1, 4));
        for i in 0..5u64 {
            let mut tx = promoted.begin(&mut backup);
            tx.write(i * 4096, &[0x60 + i as u8; 64]).unwrap();
            tx.commit().unwrap();
        }
        // The old primary, still a primary, is stale to it.
        let served = Served::start(&net, backup.clone());
        let err = Mirror::open(&old_heap, &old_media, net.node(), &served.addr, Strategy::SmDd).err().unwrap();
        assert!(err.to_string().contains("newer generation"), "{err}");
        served.finish();
        // The old primary's pool rejoins as the backup: its transactions
        // 5-7 are not the promoted pool's, so it gets a full copy although
        // the promoted primary tracks every block since the fork.
        let served = Served::start(&net, old_media);
        let mut mirror = Mirror::open(&promoted, &backup, net.node(), &served.addr, Strategy::SmDd).unwrap();
        assert_eq!((&mirror.rejoin, mirror.resync_bytes), (&Plan::FullCopy, BIG));
        let mut tx = promoted.begin_with(&mut backup, &mut mirror);
        tx.write(3, &[1; 3]).unwrap();
        tx.commit().unwrap();
        drop(mirror);
        let mut rejoined = served.finish();
        let (opened, _) = Heap::open(&mut rejoined, 0).unwrap();
        assert_eq!(opened.last_committed(), 10);
        assert_eq!(opened.history(), promoted.history(), "it adopted the promoted pool's history");
        assert_eq!(whole(&opened, &rejoined), whole(&promoted, &backup));
    }

    #[test]
    fn a_primary_that_died_before_its_commit_record_rejoins_the_promoted_backup_incrementally() {
        for strategy in [Strategy::SmRc, Strategy::SmOb, Strategy::SmDd] {
            let net = InProcNetwork::new(Limits::default());
            let (mut media, mut heap) = big();
            let served = Served::start(&net, big().0);
            let mut mirror = Mirror::open(&heap, &media, net.node(), &served.addr, strategy).unwrap();
            for i in 0..5u64 {
                let mut tx = heap.begin_with(&mut media, &mut mirror);
                tx.write(i * 10_000, &[i as u8 + 1; 64]).unwrap();
                tx.commit().unwrap();
            }
            // The primary's pool as it was when it died in the commit of
            // transaction 6, after the backup answered, before its own
            // commit record: at 5.
            let dead = media.clone();
            let mut tx = heap.begin_with(&mut media, &mut mirror);
            tx.write(293 * 1024, &[0xee; 64]).unwrap();
            tx.commit().unwrap();
            drop(mirror);
            let mut backup = served.finish();
            // The backup, at 6, is promoted; its log still holds 6's
            // records, so its record of written blocks reaches back to 5.
            let (mut promoted, promotion) = Heap::promote(&mut backup, 0).unwrap();
            assert_eq!((promotion.generation.start, promoted.tracker().since()), (6, 5), "{strategy}");
            let mut tx = promoted.begin(&mut backup);
            tx.write(64, &[0x42; 64]).unwrap();
            tx.commit().unwrap();
            let served = Served::start(&net, dead);
            let mirror = Mirror::open(&promoted, &backup, net.node(), &served.addr, strategy).unwrap();
            assert_eq!((&mirror.rejoin, mirror.resync_bytes), (&Plan::Incremental { from: 5 }, 2048), "{strategy}");
            drop(mirror);
            let mut rejoined = served.finish();
            let (opened, _) = Heap::open(&mut rejoined, 0).unwrap();
            assert_eq!((opened.last_committed(), opened.history()), (7, promoted.history()), "{strategy}");
            assert_eq!(whole(&opened, &rejoined), whole(&promoted, &backup), "{strategy}");
        }
    }

    #[test]
    fn an_old_primary_that_committed_nothing_alone_rejoins_incrementally() {
        let net = InProcNetwork::new(Limits::default());
        let (old_media, old_heap, mut backup) = behind(&net, Strategy::SmRc, 0);
        assert_eq!(old_heap.last_committed(), 4);
        let (mut promoted, _) = Heap::promote(&mut backup, 0).unwrap();
        for i in 0..3u64 {
            let mut tx = promoted.begin(&mut backup);
            tx.write(i * 64, &[9; 64]).unwrap();
            tx.commit().unwrap();
        }
        let served = Served::start(&net, old_media);
        let mirror = Mirror::open(&promoted, &backup, net.node(), &served.addr, Strategy::SmRc).unwrap();
        assert_eq!((&mirror.rejoin, mirror.resync_bytes), (&Plan::Incremental { from: 4 }, 1024));
        drop(mirror);
        let mut rejoined = served.finish();
        let (opened, _) = Heap::open(&mut rejoined, 0).unwrap();
        assert_eq!((opened.last_committed(), opened.history()), (7, promoted.history()));
        assert_eq!(whole(&opened, &rejoined), whole(&promoted, &backup));
    }

    /// A commit the backup made durable but whose answer never reached the
    /// primary (the backup killed between the two): as a sink error.
    struct AnswerLost<'a>(&'a mut Mirror<InProcTransport>);

    impl EpochSink for AnswerLost<'_> {
        fn epoch(&mut self, epoch: &Epoch<'_>) -> Result<(), SinkError> {
            self.0.epoch(epoch)
        }
        fn dfence(&mut self, tx: u64) -> Result<(), SinkError> {
            self.0.dfence(tx)
        }
        fn commit(&mut self, commit: &Committed) -> Result<(), SinkError> {
            self.0.commit(commit)?;
            Err("the answer was lost".into())
        }
        fn abort(&mut self, tx: u64) {
            self.0.abort(tx)
        }
    }

    /// The primary abandons a transaction the backup committed (its answer
    /// lost); the next hello finds the backup ahead by it and replaces it by
    /// a full copy (before, it was refused as ahead, and the primary, which
    /// may not commit unmirrored, stopped until an operator blanked the
    /// backup's pool). Ahead past what it abandoned is still refused.
    #[test]
    fn a_backup_ahead_by_a_transaction_the_primary_abandoned_is_copied_over() {
        for strategy in [Strategy::SmRc, Strategy::SmOb, Strategy::SmDd] {
            let net = InProcNetwork::new(Limits::default());
            let (mut media, mut heap) = heap_media();
            let served = Served::start(&net, heap_media().0);
            let mut mirror = Mirror::open(&heap, &media, net.node(), &served.addr, strategy).unwrap();
            workload(&mut heap, &mut media, &mut mirror, 3);
            let before = data(&heap, &media);
            let mut tx = heap.begin_with(&mut media, AnswerLost(&mut mirror));
            tx.write(64, &[0xab; 64]).unwrap();
            assert!(matches!(tx.commit(), Err(TxError::Sink(_))), "{strategy}");
            assert_eq!((heap.last_committed(), heap.abandoned_to(), data(&heap, &media)), (3, 4, before.clone()), "{strategy}");
            // As `mirror-primary` does: reopen (the next transaction takes
            // the abandoned one's number), carrying what it abandoned.
            heap = Heap::open(&mut media, 0).unwrap().0;
            heap.note_abandoned(4);
            drop(mirror);
            let mut mirror = Mirror::open(&heap, &media, net.node(), &served.addr, strategy).unwrap();
            assert_eq!(mirror.rejoin, Plan::FullCopy, "{strategy}");
            let mut tx = heap.begin_with(&mut media, &mut mirror);
            tx.write(128, &[0xcd; 64]).unwrap();
            tx.commit().unwrap();
            drop(mirror);
            let backup = served.finish();
            let (opened, _) = Heap::open(&mut backup.clone(), 0).unwrap();
            assert_eq!(opened.last_committed(), heap.last_committed(), "{strategy}");
            assert_eq!(data(&opened, &backup), data(&heap, &media), "{strategy}: the abandoned write is gone");
            // A primary that restarted knows of nothing it abandoned: a
            // backup ahead of it is refused, as before.
            let served = Served::start(&net, backup);
            let mut mirror = Mirror::open(&heap, &media, net.node(), &served.addr, strategy).unwrap();
            let mut tx = heap.begin_with(&mut media, AnswerLost(&mut mirror));
            tx.write(0, &[1; 64]).unwrap();
            assert!(tx.commit().is_err());
            drop(mirror);
            let (restarted, _) = Heap::open(&mut media, 0).unwrap();
            let refused = Mirror::open(&restarted, &media, net.node(), &served.addr, strategy).err().expect("refused");
            assert!(refused.to_string().contains("ahead"), "{strategy}: {refused}");
            served.finish();
        }
    }

    #[test]
    fn a_lost_backup_fails_the_commit_and_the_primary_keeps_nothing_of_it() {
        let net = InProcNetwork::new(Limits::default());
        let (mut media, mut heap) = heap_media();
        let served = Served::start(&net, heap_media().0);
        let backup_id = served.addr;
        let mut mirror = Mirror::open(&heap, &media, net.node(), &backup_id, Strategy::SmOb).unwrap();
        mirror.timeout = Duration::from_secs(5);
        workload(&mut heap, &mut media, &mut mirror, 3);
        let before = data(&heap, &media);
        net.crash(backup_id);
        let mut tx = heap.begin_with(&mut media, &mut mirror);
        tx.write(0, &[1; 64]).unwrap();
        let err = tx.commit().unwrap_err();
        assert!(matches!(err, TxError::Sink(_)), "{err}");
        assert!(mirror.broken().is_some());
        let mut tx = heap.begin_with(&mut media, &mut mirror);
        tx.write(0, &[2; 64]).unwrap();
        let err = tx.commit().unwrap_err();
        assert!(err.to_string().contains("broken"), "{err}");
        assert_eq!(data(&heap, &media), before, "no commit without the mirror");
        served.finish();
    }
}
