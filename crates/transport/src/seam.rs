//! The network seam: the one trait the RPC layer (`crates/remote`) is
//! written against, with three implementations — [`crate::UcxTransport`]
//! (real UCX over TCP, shared memory or verbs), [`crate::InProcTransport`]
//! (deterministic, in one process) and [`crate::sim::SimTransport`] (a
//! seeded simulated network with a virtual clock and faults).
//!
//! # Model
//! A transport is one event loop's view of the network: it owns
//! connections ([`ConnId`]), registered local memory ([`LocalRegionId`]) and
//! the peer regions attached on each connection ([`RemoteRegionId`]). It is
//! driven by two calls, the way raft-rs's `RawNode` is driven by `ready`:
//!
//! - [`Transport::poll`] makes progress without blocking and hands back
//!   [`Event`]s: accepted and lost connections, incoming [`Request`]s, and a
//!   [`Completion`] for every operation the caller started.
//! - [`Transport::wait`] blocks (on the worker's event fd, or a condvar for
//!   the in-process transport) until something may be ready or a timeout
//!   passes. An idle loop sleeps here instead of spinning. In the simulator
//!   it never blocks: virtual time passes only when the driver advances it
//!   ([`crate::sim::SimNetwork::advance_to`]).
//!
//! ```text
//! loop {
//!     t.poll(&mut events, 64);
//!     for e in events.drain(..) { /* feed the I/O-free core, start ops */ }
//!     if nothing_to_do { t.wait(Duration::from_millis(100))?; }
//! }
//! ```
//!
//! # Operations and tokens
//! Every operation that completes later takes a caller-chosen `token: u64`
//! and produces exactly one [`Completion`] with that token, success or
//! failure — including when the connection fails (then with
//! [`OpError::Disconnected`], before the [`Event::Disconnected`] for it).
//! Operations whose start fails return the error at once and produce no
//! completion. Tokens need not be unique; the transport only echoes them.
//!
//! - [`Transport::call`]: an RPC request (header + payload) to the peer; the
//!   completion carries the peer's response ([`Output::Response`]).
//! - [`Transport::reply`]: answers a [`Request`] received; no completion (the
//!   transport owns the buffers until UCX is done with them).
//! - [`Transport::send`]: a one-way message (header + payload), handed to the
//!   peer as [`Event::Message`]; no token, no completion, no answer. For
//!   protocols whose messages do not pair with replies (Raft).
//! - [`Transport::put`], [`Transport::get`], [`Transport::atomic`]: one-sided
//!   access to a region the peer exported and we attached. A put completes
//!   when its buffer may be reused (*local* completion: the bytes may still
//!   be in flight); a get or atomic completes when its result is here.
//! - [`Transport::flush`]: completes when every put/get/atomic issued before
//!   it on the connection is complete *at the target* (visible there; not
//!   persistent — persistence is the server's business, see issue 3).
//! - [`Transport::fence`]: orders later one-sided operations after earlier
//!   ones, without waiting.
//!
//! # Order
//! The messages of one connection reach the other end in the order they
//! were sent, whatever their sizes and kinds: requests ([`Event::Request`])
//! and one-way messages ([`Event::Message`]) are handed to the service in
//! the order the peer called [`Transport::call`] and [`Transport::send`],
//! interleaved as it called them, and responses complete calls in the order
//! the peer replied (a response comes after every message the peer sent
//! before replying). A message is never lost or duplicated while its
//! connection stays up: one that cannot be delivered ends the connection.
//! (The simulator, [`crate::sim`], drops, duplicates and reorders one-way
//! messages when told to: a harsher network than this contract.) (Over UCX a
//! small eager message can arrive while an earlier large one is still being
//! received by rendezvous; the transport numbers every message and holds
//! the later one back.) So pipelined requests to the same bytes take effect
//! in the order they were sent. Completions of one-sided operations carry
//! no such promise beyond [`Transport::flush`] and [`Transport::fence`].
//!
//! # Bounds
//! Each connection allows at most [`Limits::window`] operations in flight
//! (calls awaiting responses, one-sided operations, and unsettled sends);
//! the next one fails with [`OpError::WindowFull`] until a completion is
//! polled or a send settles. A send holds its slot until it is *settled*:
//! - over UCX, once it and every message sent before it on the connection
//!   have completed locally (UCX is done with their buffers: a small, eager
//!   message at once, a rendezvous one once the peer has fetched its data).
//!   So a sender has at most `window` sends behind a large message the peer
//!   is still receiving, which bounds what the peer holds back to keep the
//!   order;
//! - in process ([`crate::InProcTransport`], [`crate::sim`]), once the
//!   peer's [`Transport::poll`] has handed it out (or the simulator dropped
//!   it), so a peer that does not poll holds at most `window` sends from
//!   each connection.
//!
//! A send settles without an event: a caller refused with `WindowFull`
//! polls or waits and tries again, or, if its protocol tolerates loss (Raft
//! resends), drops the message. Headers are at
//! most [`Limits::max_header_bytes`], payloads [`Limits::max_payload_bytes`];
//! connections, registrations and attachments are bounded too. A message
//! that breaks the receiver's bounds or the protocol ends its connection
//! there (its later messages could not be kept in order), so the caller's
//! calls fail with [`OpError::Disconnected`]; both ends should use the same
//! limits.
//!
//! # One-sided access
//! What registering memory exposes depends on the transport
//! ([`Transport::reach`]): the in-process transport checks every access
//! against a registration; UCX over tcp and shared memory serves a peer's
//! put, get or atomic in software at whatever address it names, so there
//! one-sided access is off unless the transport was made with it
//! ([`crate::UcxConfig::with_one_sided`]), and then a peer reaches the whole
//! process.
//!
//! # Buffers
//! Payloads and put/get buffers are passed by value (`Vec<u8>`) so the
//! transport can keep them alive while UCX uses them without copying; put
//! and get completions hand them back ([`Output::Put`], [`Output::Get`]) for
//! reuse. A get reads exactly `buf.len()` bytes. Payload buffers circulate:
//! [`Transport::take_buffer`] lends an empty one (a kept one when it has
//! one), sent payloads go back to the transport once it is done with them,
//! and a caller hands received payloads back with [`Transport::recycle`]
//! once handled, so a steady stream of large messages allocates nothing
//! (receives go into kept buffers too).

use std::fmt;
use std::time::Duration;

use crate::error::{AttachError, ConnectError, OpError, RegisterError, Status, WaitError};
use crate::rx::{Payload, RxArena};

/// One connection of a transport. Ids are small integers, reused after a
/// connection is gone and its [`Event::Disconnected`] was polled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u32);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn#{}", self.0)
    }
}

/// A region of local memory registered with [`Transport::register`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LocalRegionId(pub u32);

/// A peer's region attached on one connection with [`Transport::attach`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteRegionId(pub u32);

/// Names a received request so it can be answered with [`Transport::reply`].
/// Opaque; valid until replied to or until its connection is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestId {
    pub(crate) conn: ConnId,
    pub(crate) call: u64,
}

impl RequestId {
    /// The connection the request arrived on.
    pub fn conn(&self) -> ConnId {
        self.conn
    }
}

/// What a peer needs to access a registered region: its address in the
/// owner's address space, its length, and the transport's packed remote key.
/// Send it to the peer (e.g. in an RPC response) with [`RegionDescriptor::encode`];
/// the byte layout is in `docs/FORMAT.md` ("pmwire-transport wire formats").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionDescriptor {
    /// Start address in the owner's address space.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// The packed remote key (opaque; `ucp_rkey_pack` output for UCX).
    pub rkey: Vec<u8>,
}

/// A 64-bit atomic on 8-byte aligned remote memory. The completion carries
/// the value before the operation ([`Output::Atomic`]; 0 for `Add`, which
/// does not fetch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// `*p += x`, no fetch.
    Add(u64),
    /// `old = *p; *p += x`.
    FetchAdd(u64),
    /// `old = *p; *p = x`.
    Swap(u64),
    /// `old = *p; if old == expected { *p = new }`.
    CompareSwap {
        /// The value compared with.
        expected: u64,
        /// The value stored on a match.
        new: u64,
    },
}

/// How far a peer's one-sided operations reach into this process, which
/// is what registering memory exposes ([`Transport::reach`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// One-sided access is off: nothing can be registered or attached, and
    /// the transport serves no peer's put, get or atomic.
    Off,
    /// Confined: every access is checked against a registration's range
    /// (the in-process transport).
    Registered,
    /// Unconfined: the transport serves a peer's one-sided operation at
    /// whatever address it names, in software (UCX over tcp and shared
    /// memory: its software RMA, tcp's put, cma), so a peer that can
    /// connect reaches the whole process, not just what was registered.
    Process,
}

/// What an event loop outside the transport waits on to learn that the
/// transport has something to poll ([`Transport::event_fd`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventFd {
    /// There is something to poll already: poll, do not block.
    Ready,
    /// Armed: the fd becomes readable when there may be something to poll.
    /// Wait for it (with `poll(2)`, or an io_uring poll request) together
    /// with the loop's own fds, then poll the transport and arm again.
    Armed(std::os::fd::RawFd),
    /// The transport has no fd to wait on (in process, simulated): drive it
    /// with [`Transport::wait`].
    Unsupported,
}

/// An incoming RPC request. Answer it with [`Transport::reply`] using `id`.
#[derive(Debug)]
pub struct Request {
    /// Names the request for the reply.
    pub id: RequestId,
    /// The caller's header bytes.
    pub header: Vec<u8>,
    /// The caller's payload bytes.
    pub payload: Vec<u8>,
}

/// What a successful operation produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Output {
    /// The peer's response to a [`Transport::call`].
    Response {
        /// The responder's header bytes.
        header: Vec<u8>,
        /// The responder's payload bytes.
        payload: Vec<u8>,
    },
    /// A put's buffer, handed back for reuse.
    Put {
        /// The buffer passed to `put`.
        buf: Vec<u8>,
    },
    /// A get's buffer, now holding the remote bytes.
    Get {
        /// The buffer passed to `get`, filled.
        buf: Vec<u8>,
    },
    /// An atomic's fetched value (0 for a non-fetching `Add`).
    Atomic {
        /// The remote value before the operation.
        old: u64,
    },
    /// A flush completed: everything issued before it is done at the target.
    Flush,
}

/// The single completion of an operation started with a token.
#[derive(Debug)]
pub struct Completion {
    /// The connection the operation ran on.
    pub conn: ConnId,
    /// The caller's token.
    pub token: u64,
    /// What it produced, or why it failed.
    pub result: Result<Output, OpError>,
}

/// Something [`Transport::poll`] reports.
#[derive(Debug)]
pub enum Event {
    /// A peer connected to our listener (server side).
    Accepted(ConnId),
    /// The connection is gone (peer closed, failed, or we closed it). All of
    /// its operations have completed (with errors) before this event.
    Disconnected {
        /// The connection.
        conn: ConnId,
        /// The UCX status that ended it, if it failed rather than closed.
        cause: Option<Status>,
    },
    /// An RPC request arrived.
    Request(Request),
    /// A one-way message arrived ([`Transport::send`]). Hand an owned
    /// payload back with [`Transport::recycle`] once handled.
    Message {
        /// The connection it arrived on.
        conn: ConnId,
        /// The sender's header bytes.
        header: Vec<u8>,
        /// The sender's payload bytes: the transport's buffer, or memory
        /// the embedder lent ([`Transport::lend_rx`]).
        payload: Payload,
    },
    /// An operation we started has completed.
    Completion(Completion),
}

/// The bounds a transport enforces. Both ends of a connection should agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Operations in flight per connection (calls awaiting a response,
    /// put/get/atomic/flush, and unsettled sends); at most
    /// [`crate::wire::MAX_WINDOW`].
    pub window: usize,
    /// Largest RPC or message header in bytes.
    pub max_header_bytes: usize,
    /// Largest RPC or message payload in bytes.
    pub max_payload_bytes: usize,
    /// Open connections.
    pub max_conns: usize,
    /// Registered local regions.
    pub max_regions: usize,
    /// Attached remote regions per connection.
    pub max_remote_regions: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            window: 32,
            max_header_bytes: 128,
            max_payload_bytes: 4 << 20,
            max_conns: 64,
            max_regions: 16,
            max_remote_regions: 16,
        }
    }
}

impl Limits {
    /// Asserts the limits are usable (called by every constructor).
    pub(crate) fn check(&self) {
        assert!(self.window >= 1);
        assert!(self.window <= crate::wire::MAX_WINDOW);
        assert!(self.max_header_bytes <= crate::wire::MAX_USER_HEADER);
        assert!(self.max_payload_bytes >= 1);
        assert!(self.max_conns >= 1);
        assert!(self.max_regions >= 1);
        assert!(self.max_remote_regions >= 1);
    }
}

/// The network seam: connections, RPC request/response, and one-sided access
/// to registered peer memory, driven by [`poll`](Transport::poll) and
/// [`wait`](Transport::wait). See the module docs for the model.
pub trait Transport {
    /// How a peer is addressed for [`Transport::connect`]: a socket address
    /// for UCX, a node number for the in-process transport.
    type Addr: ?Sized;

    /// Opens a connection. Operations may be started on it at once; if the
    /// peer is unreachable they complete with errors and an
    /// [`Event::Disconnected`] follows.
    fn connect(&mut self, addr: &Self::Addr) -> Result<ConnId, ConnectError>;

    /// Closes a connection; its operations complete with
    /// [`OpError::Disconnected`] and an [`Event::Disconnected`] follows here
    /// (and at the peer). Closing an unknown or closed connection does nothing.
    /// Over UCX the close flushes first and completes in the background: keep
    /// polling (or waiting) for it to reach the peer.
    fn close(&mut self, conn: ConnId);

    /// Sends an RPC request; its completion carries the response.
    fn call(
        &mut self,
        conn: ConnId,
        header: &[u8],
        payload: Vec<u8>,
        token: u64,
    ) -> Result<(), OpError>;

    /// Answers a received request (once).
    fn reply(&mut self, request: RequestId, header: &[u8], payload: Vec<u8>)
        -> Result<(), OpError>;

    /// Sends a one-way message, handed to the peer as [`Event::Message`] in
    /// the connection's order among calls and replies (module docs, "Order").
    /// No completion: the payload goes back to the transport's kept buffers.
    /// Holds a window slot until it settles (module docs, "Bounds"); fails
    /// with [`OpError::WindowFull`] while the window is full,
    /// [`OpError::TooLarge`] past the size bounds, and
    /// [`OpError::Disconnected`] on a closed connection. `Ok` means it is on
    /// its way, not that it arrived: if the connection fails first, it is
    /// lost with it.
    fn send(&mut self, conn: ConnId, header: &[u8], payload: Vec<u8>) -> Result<(), OpError>;

    /// How far a peer's one-sided operations reach (see [`Reach`]).
    fn reach(&self) -> Reach;

    /// Registers `len` bytes at `addr` for remote access by peers; fails
    /// with [`RegisterError::OneSidedOff`] where [`reach`](Transport::reach)
    /// is [`Reach::Off`].
    ///
    /// # Safety
    /// The memory must stay mapped (and not be reused for anything a peer
    /// must not see) until [`Transport::deregister`] or the transport drops;
    /// peers may write it at any time in between.
    unsafe fn register(
        &mut self,
        addr: *mut u8,
        len: usize,
    ) -> Result<LocalRegionId, RegisterError>;

    /// Unregisters a region; peers' later accesses fail. Unknown ids are ignored.
    fn deregister(&mut self, region: LocalRegionId);

    /// The descriptor a peer needs to [`attach`](Transport::attach) the region.
    fn export(&self, region: LocalRegionId) -> Result<RegionDescriptor, RegisterError>;

    /// Makes a peer's exported region accessible on `conn`.
    fn attach(
        &mut self,
        conn: ConnId,
        desc: &RegionDescriptor,
    ) -> Result<RemoteRegionId, AttachError>;

    /// Writes `buf` at `offset` of the remote region.
    fn put(
        &mut self,
        conn: ConnId,
        region: RemoteRegionId,
        offset: u64,
        buf: Vec<u8>,
        token: u64,
    ) -> Result<(), OpError>;

    /// Reads `buf.len()` bytes at `offset` of the remote region into `buf`.
    fn get(
        &mut self,
        conn: ConnId,
        region: RemoteRegionId,
        offset: u64,
        buf: Vec<u8>,
        token: u64,
    ) -> Result<(), OpError>;

    /// A 64-bit atomic at the 8-byte aligned `offset` of the remote region.
    fn atomic(
        &mut self,
        conn: ConnId,
        region: RemoteRegionId,
        offset: u64,
        op: AtomicOp,
        token: u64,
    ) -> Result<(), OpError>;

    /// Completes when every one-sided operation issued before it on `conn`
    /// is complete at the target.
    fn flush(&mut self, conn: ConnId, token: u64) -> Result<(), OpError>;

    /// Orders one-sided operations issued after it after those issued before
    /// it (on every connection of this transport). Does not wait.
    fn fence(&mut self) -> Result<(), OpError>;

    /// Makes progress without blocking and appends at most `max` events to
    /// `events`; returns how many it appended.
    fn poll(&mut self, events: &mut Vec<Event>, max: usize) -> usize;

    /// Blocks until an event may be ready (then `true`: call
    /// [`poll`](Transport::poll)) or `timeout` passes (`false`). Returns at
    /// once if events are already queued. Never spins.
    fn wait(&mut self, timeout: Duration) -> Result<bool, WaitError>;

    /// Arms the transport for a wait that happens outside it, in another
    /// event loop (one io_uring loop serving sockets and this transport
    /// from one thread): submits what is queued, then returns
    /// [`EventFd::Ready`] if there is something to poll now, else an fd
    /// that becomes readable once there may be ([`EventFd::Armed`]). Call it
    /// last before the loop blocks, and poll the transport after the fd was
    /// readable (or after any wake-up: a spurious poll is cheap). What is
    /// started after the call may wait for the next `poll`, `wait` or
    /// `event_fd` to be submitted, so call it last before blocking.
    fn event_fd(&mut self) -> EventFd {
        EventFd::Unsupported
    }

    /// Whether the last [`poll`](Transport::poll) or
    /// [`wait`](Transport::wait) did work inside the transport, events or
    /// not: over UCX, the worker's progress reported something done (a
    /// peer's emulated put or get served, a rendezvous fragment moved). A
    /// loop counts it as activity and polls again before it blocks: such
    /// work produces no event, and arming a busy worker only fails.
    fn progressed(&self) -> bool {
        false
    }

    /// Whether a one-way [`send`](Transport::send) on `conn` would be taken
    /// now: false while the connection's window of unsettled operations is
    /// full (the send would fail with [`OpError::WindowFull`] and its
    /// payload would be lost), so a caller can hold a message back until
    /// the window drains instead of dropping it. True for a connection that
    /// is gone (the send reports that).
    fn send_room(&self, conn: ConnId) -> bool {
        self.window_free(conn) > 0
    }

    /// Slots of `conn`'s window that a send or call may take now, less any
    /// the transport keeps for itself (a link keeps one for its pings).
    /// `usize::MAX` for a connection that is gone (its operations report
    /// that), and by default (a transport whose operations are not
    /// windowed).
    fn window_free(&self, _conn: ConnId) -> usize {
        usize::MAX
    }

    /// An empty buffer with capacity for at least `len` bytes, to fill and
    /// pass as a payload or put buffer: one the transport kept (see
    /// [`recycle`](Transport::recycle)), or a new one.
    fn take_buffer(&mut self, len: usize) -> Vec<u8> {
        Vec::with_capacity(len)
    }

    /// Lends memory to receive one-way messages into (`crate::rx`): their
    /// payloads then arrive as [`Payload::Lent`] slices of it, whenever the
    /// arena has an area. Returns whether this transport uses it; by
    /// default it does not (its payloads stay its own).
    fn lend_rx(&mut self, arena: Box<dyn RxArena>) -> bool {
        let _ = arena;
        false
    }

    /// Hands back a buffer the caller is done with (a received payload once
    /// handled, a completed put's buffer), for later receives and
    /// [`take_buffer`](Transport::take_buffer). The transport keeps a bounded
    /// number and drops the rest.
    fn recycle(&mut self, buf: Vec<u8>) {
        drop(buf);
    }

    /// Hands back a received payload once handled: an owned one is
    /// recycled, a lent one dropped (giving its area back).
    fn recycle_payload(&mut self, payload: Payload) {
        if let Payload::Owned(buf) = payload {
            self.recycle(buf);
        }
    }
}

/// Checks a one-sided access against the attached region's length.
pub(crate) fn check_range(offset: u64, len: u64, region_len: u64) -> Result<(), OpError> {
    let end = offset.checked_add(len);
    match end {
        Some(end) if end <= region_len => Ok(()),
        _ => Err(OpError::OutOfBounds {
            offset,
            len,
            region_len,
        }),
    }
}
