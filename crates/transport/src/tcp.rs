//! [`TcpTransport`]: the [`Transport`] seam over TCP sockets driven by one
//! io_uring, beside UCX (issue 26, item 9): for messages and calls between
//! members, where UCX's tcp lane and its worker cost more than the
//! messages (`docs/bench.md`, "Replication over io_uring TCP"). UCX stays
//! for shared memory, verbs and one-sided access; this transport offers no
//! one-sided access ([`Reach::Off`]).
//!
//! How the pieces map onto the kernel:
//! - a listener is a `std` socket with one multishot accept on the ring;
//!   a connect is an `IORING_OP_CONNECT` linked to a timeout, so a peer
//!   that never answers fails the connection in
//!   [`TcpConfig::connect_timeout`], not in TCP's minutes of SYN retries;
//! - every message is one frame on the stream: the same 24-byte prefix
//!   as over UCX ([`wire::encode_header`]: magic, version, kind, header
//!   length, payload length, `seq`, call id), the user header, then the
//!   payload (`docs/FORMAT.md`, "io_uring TCP framing");
//! - each connection has one receive in flight at a time, into its 64 KiB
//!   receive buffer, or, for a frame larger than that buffer, straight into
//!   the payload's own buffer once its header is in; and at most one
//!   `sendmsg` in flight, gathering every queued frame (header and payload
//!   as separate iovecs, up to [`MAX_IOV`]), so what one turn sends goes
//!   out in one system call per connection;
//! - a frame on a connection with no send in flight is submitted at once
//!   (the kernel usually copies it to the socket inline, so a leader's
//!   appends leave before it persists, as over UCX); frames queued behind a
//!   send in flight are gathered into the next `sendmsg` once its
//!   completion is reaped; other entries (receives re-armed, accepts) are
//!   submitted by `poll`, `wait` and `event_fd`, one `io_uring_enter` for all;
//! - an eventfd registered with the ring is signalled at every completion,
//!   so another loop can wait on it ([`Transport::event_fd`]).
//!
//! Invariants:
//! - the stream carries whole frames in send order, so a connection's
//!   requests, responses and messages arrive in the order they were sent;
//!   the receiver still checks each frame's `seq` is the next one;
//! - nothing from the wire is trusted: a frame whose prefix is malformed,
//!   whose lengths pass [`Limits`], whose `seq` is not the next, whose
//!   request slot is busy or out of range, or whose response names no call
//!   in flight ends its connection, counted by reason in
//!   [`TcpStats::bad_frames`]; lengths are checked before anything is
//!   allocated or read for them;
//! - a buffer the kernel may write or read (receive buffer, a large
//!   payload being received, queued frames being sent, the msghdr and its
//!   iovecs) lives in its connection until the operation's completion; a
//!   connection's slot is freed only when none of its operations is in
//!   flight and its `Disconnected` was polled, so no completion names a
//!   freed or reused slot (asserted through a generation in each
//!   operation's user data);
//! - every operation with a token completes once: by its response, or
//!   with [`OpError::Disconnected`] when its connection ends (before the
//!   `Disconnected` event);
//! - a send holds its window slot until its frame is written to the socket
//!   (whole: the kernel has it), which happens in send order, so a send
//!   settles once it and everything before it has;
//! - the queue of events waiting for `poll` is bounded: past
//!   [`MAX_QUEUED_EVENTS`] no receive is re-armed until it drains (the
//!   kernel holds the bytes, TCP pushes back on the peer).

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use bytes::Bytes;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use ucx_sys as sys;

use crate::error::{AttachError, ConnectError, OpError, RegisterError, SetupError, Status, WaitError};
use crate::inproc::check_sizes;
use crate::rx::{Payload, RxArea, RxArena};
use crate::seam::{
    AtomicOp, Completion, ConnId, Event, EventFd, Limits, LocalRegionId, Output, Reach,
    RegionDescriptor, RemoteRegionId, Request, RequestId, Transport,
};
use crate::ucx::sockaddr_from;
use crate::ucx_transport::Spare;
use crate::wire::{self, Answering, DecodeError, Kind, Window, FRAMING_BYTES};

/// Bytes of each connection's receive buffer. A frame larger than this is
/// received into its payload's own buffer once its header is in.
pub const RX_BYTES: usize = 64 << 10;

/// Least bytes of a lent area asked for ([`Transport::lend_rx`]).
pub const LENT_MIN_BYTES: usize = 256 << 10;

/// A connection moves to a fresh lent area between frames once less than
/// this is left of its current one (so receives stay large).
pub const LENT_MIN_RECV: usize = 16 << 10;

/// Most iovecs in one `sendmsg` (two per frame: header, payload).
pub const MAX_IOV: usize = 64;

/// Events waiting for `poll` beyond which receives are not re-armed.
pub const MAX_QUEUED_EVENTS: usize = 4096;

/// Submission queue entries (the completion queue has four times as many).
const RING_ENTRIES: u32 = 256;

/// How long a closed connection may take to send what was queued before
/// its socket is shut down regardless (a peer that reads nothing).
const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// How long after a failed accept (out of fds) the listener accepts again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// How long `Drop` waits for cancelled operations to complete.
const DROP_DRAIN_WAIT: Duration = Duration::from_millis(200);

const OP_CONNECT: u64 = 1;
const OP_TIMEOUT: u64 = 2;
const OP_ACCEPT: u64 = 3;
const OP_RECV: u64 = 4;
const OP_SEND: u64 = 5;
const OP_CANCEL: u64 = 6;

/// `IORING_RECVSEND_POLL_FIRST` (Linux 5.19), which io-uring 0.7 does not
/// re-export.
const RECVSEND_POLL_FIRST: u16 = 1;

fn user_data(op: u64, slot: u32, gen: u32) -> u64 {
    (op << 56) | ((gen as u64 & 0xff_ffff) << 32) | slot as u64
}

fn unpack(ud: u64) -> (u64, u32, u32) {
    (ud >> 56, ud as u32, ((ud >> 32) & 0xff_ffff) as u32)
}

/// How a [`TcpTransport`] is set up.
#[derive(Clone, Copy, Debug)]
pub struct TcpConfig {
    /// Bounds (both ends of a connection should use the same).
    pub limits: Limits,
    /// A connect that has not completed by then fails its connection.
    pub connect_timeout: Duration,
}

impl Default for TcpConfig {
    fn default() -> TcpConfig {
        TcpConfig { limits: Limits::default(), connect_timeout: Duration::from_secs(2) }
    }
}

/// Why a frame from the wire ended its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// The first byte is not [`wire::MAGIC`].
    Magic,
    /// A version this code does not read.
    Version,
    /// An unknown kind (or a message in a version-2 frame).
    Kind,
    /// A reserved byte is not zero, or a message carries a call id.
    Reserved,
    /// The header or payload length passes [`Limits`].
    TooLarge,
    /// The frame's `seq` is not the connection's next.
    Order,
    /// A request for a slot already awaiting a reply, or out of range.
    Window,
    /// A response naming no call in flight.
    UnknownResponse,
}

impl FrameError {
    /// Every reason, in [`TcpStats::bad_frames`] order.
    pub const ALL: [FrameError; 8] = [
        FrameError::Magic,
        FrameError::Version,
        FrameError::Kind,
        FrameError::Reserved,
        FrameError::TooLarge,
        FrameError::Order,
        FrameError::Window,
        FrameError::UnknownResponse,
    ];

    fn index(self) -> usize {
        FrameError::ALL.iter().position(|&e| e == self).expect("listed")
    }

    /// The status the connection's `Disconnected` carries.
    fn status(self) -> Status {
        match self {
            FrameError::TooLarge | FrameError::Window => Status(sys::UCS_ERR_EXCEEDS_LIMIT),
            _ => Status(sys::UCS_ERR_INVALID_PARAM),
        }
    }

    fn from_decode(e: DecodeError) -> FrameError {
        match e {
            DecodeError::Magic => FrameError::Magic,
            DecodeError::Version => FrameError::Version,
            DecodeError::Kind => FrameError::Kind,
            DecodeError::Reserved | DecodeError::Truncated | DecodeError::Length => FrameError::Reserved,
        }
    }
}

/// The transport's counters.
#[derive(Clone, Debug, Default)]
pub struct TcpStats {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections refused at accept (the bound on connections).
    pub rejected: u64,
    /// Connects that failed or timed out.
    pub connects_failed: u64,
    /// Receive completions that carried bytes.
    pub recvs: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// `sendmsg` completions.
    pub sends: u64,
    /// Sends that wrote less than asked (the rest went in the next one).
    pub partial_sends: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Times a receive was held back because `poll` had not taken the events.
    pub paused_recvs: u64,
    /// Bytes received into lent memory ([`Transport::lend_rx`]).
    pub lent_bytes: u64,
    /// Messages delivered in lent memory.
    pub lent_payloads: u64,
    /// Bytes of unfinished frames moved to a new lent area or to the
    /// connection's own buffer (a frame that did not fit the rest of its
    /// area): the only bytes copied on the lent path.
    pub carried_bytes: u64,
    /// Connections ended by a bad frame, by [`FrameError`] (in
    /// [`FrameError::ALL`] order).
    pub bad_frames: [u64; 8],
}

impl TcpStats {
    /// Connections ended for `reason`.
    pub fn bad_frames(&self, reason: FrameError) -> u64 {
        self.bad_frames[reason.index()]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Connecting,
    Open,
    Gone,
}

/// One queued frame: prefix and user header, then payload.
struct OutFrame {
    head: Vec<u8>,
    payload: Vec<u8>,
    /// A send's window slot, given back once the frame is written.
    send: Option<u64>,
}

impl OutFrame {
    fn len(&self) -> usize {
        self.head.len() + self.payload.len()
    }
}

/// A whole frame off the wire.
struct Frame {
    kind: Kind,
    seq: u32,
    call: u64,
    header: Vec<u8>,
    payload: Vec<u8>,
    /// A message's payload in lent memory (then `payload` is empty).
    lent: Option<Bytes>,
}

/// Lent memory a connection receives into ([`Transport::lend_rx`]).
struct Lent {
    area: RxArea,
    /// The whole area, shared: a message's payload is a slice of it.
    shared: Bytes,
}

/// A frame larger than the receive buffer, whose payload is being received
/// into its own buffer (`payload.len()` bytes of `want` so far).
struct LargeRx {
    frame: Frame,
    want: usize,
}

struct Conn {
    fd: RawFd,
    gen: u32,
    state: State,
    /// Its `Disconnected` was handed out by `poll`.
    reported: bool,
    connecting: bool,
    recv_inflight: bool,
    /// Bytes the receive in flight asked for.
    recv_len: u32,
    /// The last receive left room in its buffer: the socket was drained, so
    /// the next one waits for data before it tries (`IORING_RECVSEND_POLL_FIRST`)
    /// instead of failing once with `EAGAIN` and then arming its poll.
    drained: bool,
    send_inflight: bool,
    /// The socket is shut down: nothing more is sent.
    shut: bool,
    window: Window,
    answering: Answering,
    send_seq: u32,
    recv_seq: u32,
    rx: Box<[u8]>,
    /// Lent memory received into instead of `rx`, if the embedder lent
    /// some; `rx_start` and `rx_end` are then offsets in it.
    lent: Option<Lent>,
    /// A frame of this many bytes does not fit in what is left of the
    /// lent area: the transport moves the connection's bytes first.
    want_area: Option<usize>,
    rx_start: usize,
    rx_end: usize,
    large: Option<LargeRx>,
    paused: bool,
    out: VecDeque<OutFrame>,
    /// Bytes of `out[0]` already written.
    out_off: usize,
    /// Frames of `out` the `sendmsg` in flight points into.
    in_send: usize,
    listed: bool,
    /// A closed connection still sending what was queued, since when.
    lingering: Option<Instant>,
    msg: Box<libc::msghdr>,
    iov: Vec<libc::iovec>,
    addr: Box<(libc::sockaddr_storage, libc::socklen_t)>,
}

impl Conn {
    fn new(fd: RawFd, gen: u32, state: State, window: usize) -> Conn {
        Conn {
            fd,
            gen,
            state,
            reported: false,
            connecting: false,
            recv_inflight: false,
            recv_len: 0,
            drained: false,
            send_inflight: false,
            shut: false,
            window: Window::new(window),
            answering: Answering::new(),
            send_seq: 0,
            recv_seq: 0,
            rx: vec![0u8; RX_BYTES].into_boxed_slice(),
            lent: None,
            want_area: None,
            rx_start: 0,
            rx_end: 0,
            large: None,
            paused: false,
            out: VecDeque::new(),
            out_off: 0,
            in_send: 0,
            listed: false,
            lingering: None,
            // SAFETY: msghdr is plain data; all-zero is an empty header.
            msg: Box::new(unsafe { std::mem::zeroed() }),
            iov: Vec::with_capacity(MAX_IOV),
            // SAFETY: as above, for sockaddr_storage.
            addr: Box::new((unsafe { std::mem::zeroed() }, 0)),
        }
    }

    fn busy(&self) -> bool {
        self.connecting || self.recv_inflight || self.send_inflight
    }

    /// Bytes the connection receives into: its own buffer or the area.
    fn rx_cap(&self) -> usize {
        self.lent.as_ref().map_or(self.rx.len(), |l| l.area.len())
    }

    /// What the connection received so far (up to `rx_end`).
    fn rx_bytes(&self) -> &[u8] {
        match &self.lent {
            Some(l) => &l.shared[..self.rx_end],
            None => &self.rx[..self.rx_end],
        }
    }

    /// The next whole frame in the receive buffer, if any; a frame larger
    /// than the buffer moves to `large` once its header is in. Checks the
    /// prefix and the bounds before anything is taken for them.
    fn next_frame(&mut self, limits: &Limits, spare: &mut Spare) -> Result<Option<Frame>, FrameError> {
        let avail = self.rx_end - self.rx_start;
        if avail < FRAMING_BYTES {
            if self.lent.as_ref().is_some_and(|l| self.rx_start + FRAMING_BYTES > l.area.len()) {
                self.want_area = Some(FRAMING_BYTES);
            }
            self.compact();
            return Ok(None);
        }
        let at = self.rx_start;
        let bytes = &self.rx_bytes()[at..at + FRAMING_BYTES];
        let prefix = wire::decode_prefix(bytes).map_err(FrameError::from_decode)?;
        if bytes[3] != 0 || bytes[6] != 0 || bytes[7] != 0 {
            return Err(FrameError::Reserved);
        }
        let (header_len, payload_len) = (prefix.header_len as usize, prefix.payload_len as usize);
        if header_len > limits.max_header_bytes || payload_len > limits.max_payload_bytes {
            return Err(FrameError::TooLarge);
        }
        let head_end = FRAMING_BYTES + header_len;
        let total = head_end + payload_len;
        if let Some(l) = &self.lent {
            if avail < total {
                // Lent memory is never moved within: delivered payloads
                // may still point into it.
                if at + total > l.area.len() {
                    self.want_area = Some(total);
                }
                return Ok(None);
            }
            let header = l.shared[at + FRAMING_BYTES..at + head_end].to_vec();
            let (payload, lent) = match prefix.kind {
                Kind::Message => (Vec::new(), Some(l.shared.slice(at + head_end..at + total))),
                _ => (l.shared[at + head_end..at + total].to_vec(), None),
            };
            self.rx_start += total;
            return Ok(Some(Frame { kind: prefix.kind, seq: prefix.seq, call: prefix.call, header, payload, lent }));
        }
        if avail < head_end || (avail < total && total <= self.rx.len()) {
            self.compact();
            return Ok(None);
        }
        let header = self.rx[at + FRAMING_BYTES..at + head_end].to_vec();
        let mut payload = spare.take(payload_len);
        let have = (avail - head_end).min(payload_len);
        payload.extend_from_slice(&self.rx[at + head_end..at + head_end + have]);
        self.rx_start += head_end + have;
        let frame = Frame { kind: prefix.kind, seq: prefix.seq, call: prefix.call, header, payload, lent: None };
        if have < payload_len {
            assert!(self.rx_start == self.rx_end, "a large frame takes the rest of the buffer");
            self.rx_start = 0;
            self.rx_end = 0;
            self.large = Some(LargeRx { frame, want: payload_len });
            return Ok(None);
        }
        Ok(Some(frame))
    }

    /// Moves the unparsed bytes to the start of the receive buffer.
    fn compact(&mut self) {
        if self.rx_start == 0 || self.lent.is_some() {
            return;
        }
        self.rx.copy_within(self.rx_start..self.rx_end, 0);
        self.rx_end -= self.rx_start;
        self.rx_start = 0;
    }
}

/// The [`Transport`] over io_uring TCP sockets. See the module docs.
pub struct TcpTransport {
    // Field order is drop order: `Drop::drop` cancels and drains every
    // operation first, and leaks the connections if the kernel might
    // still use their buffers.
    conns: Vec<Option<Conn>>,
    ring: IoUring,
    efd: OwnedFd,
    listener: Option<TcpListener>,
    accept_armed: bool,
    /// When to arm the accept again after it failed (out of fds).
    accept_retry: Option<Instant>,
    pub(crate) events: VecDeque<Event>,
    limits: Limits,
    connect_ts: Box<types::Timespec>,
    spare: Spare,
    stats: TcpStats,
    /// Connections with frames to send (submitted at the next submit).
    to_send: Vec<u32>,
    /// Connections whose receive waits for `poll` to take events.
    paused: Vec<u32>,
    /// Closed connections still sending.
    lingering: usize,
    next_gen: u32,
    cqes: Vec<(u64, i32, u32)>,
    progressed: bool,
    /// Whether completions signal the eventfd: only between `event_fd`
    /// and the next `progress` (`IORING_CQ_EVENTFD_DISABLED` otherwise).
    efd_armed: bool,
    /// The eventfd may hold a count: a completion was in the queue while
    /// the eventfd was enabled (seen by `reap` or by `progress` as it
    /// disables it). `event_fd` clears the fd only then: otherwise its
    /// count is 0, and the read would be a syscall for nothing (0.7 per
    /// SET on a one-client cluster leader, `docs/bench.md`).
    efd_dirty: bool,
    /// The kernel takes `IORING_RECVSEND_POLL_FIRST` (Linux 5.19).
    poll_first: bool,
    /// Memory lent for messages ([`Transport::lend_rx`]).
    arena: Option<Box<dyn RxArena>>,
}

impl TcpTransport {
    /// Creates a transport: its ring, and the eventfd the ring signals.
    pub fn new(config: &TcpConfig) -> Result<TcpTransport, SetupError> {
        config.limits.check();
        assert!(FRAMING_BYTES + config.limits.max_header_bytes <= RX_BYTES / 2, "a frame's head must fit the receive buffer");
        // Cooperative task running (Linux 5.19): a completion does not
        // interrupt this thread with an inter-processor interrupt while it
        // runs; it is handled at its next entry into the kernel (a sleeping
        // thread is still woken). Older kernels get a ring without it.
        // `IORING_RECVSEND_POLL_FIRST` came with it: older kernels refuse a
        // receive whose `ioprio` is not 0.
        let (mut ring, poll_first) = match IoUring::builder().setup_cqsize(RING_ENTRIES * 4).setup_coop_taskrun().build(RING_ENTRIES) {
            Ok(ring) => (ring, true),
            Err(_) => (
                IoUring::builder().setup_cqsize(RING_ENTRIES * 4).build(RING_ENTRIES).map_err(|source| SetupError::Io { call: "io_uring_setup", source })?,
                false,
            ),
        };
        // SAFETY: plain syscall; the result is checked.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(SetupError::Io { call: "eventfd", source: io::Error::last_os_error() });
        }
        // SAFETY: a fresh fd we own.
        let efd = unsafe { OwnedFd::from_raw_fd(efd) };
        ring.submitter()
            .register_eventfd(efd.as_raw_fd())
            .map_err(|source| SetupError::Io { call: "io_uring_register(EVENTFD)", source })?;
        ring.completion().disable_eventfd();
        let timeout = config.connect_timeout;
        Ok(TcpTransport {
            conns: Vec::new(),
            ring,
            efd,
            listener: None,
            accept_armed: false,
            accept_retry: None,
            events: VecDeque::new(),
            limits: config.limits,
            connect_ts: Box::new(types::Timespec::new().sec(timeout.as_secs()).nsec(timeout.subsec_nanos())),
            spare: Spare::default(),
            stats: TcpStats::default(),
            to_send: Vec::new(),
            paused: Vec::new(),
            lingering: 0,
            next_gen: 0,
            cqes: Vec::with_capacity(RING_ENTRIES as usize * 4),
            progressed: false,
            efd_armed: false,
            efd_dirty: false,
            poll_first,
            arena: None,
        })
    }

    /// Listens on `addr` (port 0 picks one); returns the bound address.
    /// Connections arrive as [`Event::Accepted`].
    pub fn listen(&mut self, addr: SocketAddr) -> Result<SocketAddr, SetupError> {
        assert!(self.listener.is_none(), "one listener per transport");
        let listener = crate::listen::bind_listener(addr).map_err(|source| SetupError::Io { call: "bind", source })?;
        let bound = listener.local_addr().map_err(|source| SetupError::Io { call: "getsockname", source })?;
        self.listener = Some(listener);
        self.arm_accept();
        Ok(bound)
    }

    /// The listener's bound address, if listening.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The counters.
    pub fn stats(&self) -> &TcpStats {
        &self.stats
    }

    fn push(&mut self, entry: squeue::Entry) {
        loop {
            // SAFETY: every entry's pointers (buffers, msghdr, iovecs,
            // sockaddr, timespec) live in a connection or in the transport
            // until the entry's completion (module docs).
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return;
            }
            // The submission queue is full: hand it to the kernel.
            if let Err(e) = self.ring.submit() {
                assert!(matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EINTR)), "io_uring_enter: {e}");
                self.reap();
            }
        }
    }

    fn arm_accept(&mut self) {
        if let Some(l) = &self.listener {
            let fd = l.as_raw_fd();
            let e = opcode::AcceptMulti::new(types::Fd(fd)).flags(libc::SOCK_CLOEXEC).build().user_data(user_data(OP_ACCEPT, 0, 0));
            self.push(e);
            self.accept_armed = true;
        }
    }

    fn open_count(&self) -> usize {
        self.conns.iter().filter(|c| c.as_ref().is_some_and(|c| c.state != State::Gone)).count()
    }

    /// A free slot for a new connection (slots of ended connections count
    /// until they are freed).
    fn add_conn(&mut self, fd: RawFd, state: State) -> Option<u32> {
        let slot = match self.conns.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.conns.len() < self.limits.max_conns => {
                self.conns.push(None);
                self.conns.len() - 1
            }
            None => return None,
        };
        self.next_gen = self.next_gen.wrapping_add(1);
        self.conns[slot] = Some(Conn::new(fd, self.next_gen & 0xff_ffff, state, self.limits.window));
        Some(slot as u32)
    }

    fn conn(&mut self, slot: u32) -> &mut Conn {
        self.conns[slot as usize].as_mut().expect("a live slot")
    }

    fn open_conn(&mut self, conn: ConnId) -> Result<&mut Conn, OpError> {
        match self.conns.get_mut(conn.0 as usize) {
            Some(Some(c)) if c.state != State::Gone => Ok(c),
            _ => Err(OpError::Disconnected(conn.0)),
        }
    }

    fn arm_recv(&mut self, slot: u32) {
        self.refresh_rx(slot);
        let poll_first = self.poll_first;
        let c = self.conn(slot);
        assert!(!c.recv_inflight && c.state == State::Open);
        let (ptr, len) = match &mut c.large {
            Some(large) => {
                let have = large.frame.payload.len();
                assert!(have < large.want && large.frame.payload.capacity() >= large.want);
                // SAFETY: within the payload's capacity.
                (unsafe { large.frame.payload.as_mut_ptr().add(have) }, large.want - have)
            }
            None => {
                let cap = c.rx_cap();
                assert!(c.rx_end < cap, "a full receive buffer holds a whole frame");
                let base = match &c.lent {
                    Some(l) => l.area.as_ptr(),
                    None => c.rx.as_mut_ptr(),
                };
                // SAFETY: within the receive buffer, or within the lent area
                // past every byte delivered from it.
                (unsafe { base.add(c.rx_end) }, cap - c.rx_end)
            }
        };
        let len = u32::try_from(len).expect("bounded by max_payload_bytes");
        c.recv_inflight = true;
        c.recv_len = len;
        let ioprio = if c.drained && poll_first { RECVSEND_POLL_FIRST } else { 0 };
        let e = opcode::Recv::new(types::Fd(c.fd), ptr, len).ioprio(ioprio).build().user_data(user_data(OP_RECV, slot, c.gen));
        self.push(e);
    }

    /// Re-arms a receive unless `poll` is behind (then later, from `poll`).
    fn rearm_recv(&mut self, slot: u32) {
        if self.events.len() >= MAX_QUEUED_EVENTS {
            let c = self.conn(slot);
            if !c.paused {
                c.paused = true;
                self.paused.push(slot);
                self.stats.paused_recvs += 1;
            }
            return;
        }
        self.arm_recv(slot);
    }

    fn resume_paused(&mut self) {
        while self.events.len() < MAX_QUEUED_EVENTS {
            let Some(slot) = self.paused.pop() else { return };
            if let Some(Some(c)) = self.conns.get_mut(slot as usize) {
                c.paused = false;
                if c.state == State::Open && !c.recv_inflight {
                    self.arm_recv(slot);
                }
            }
        }
    }

    /// Queues one frame on `slot` (open or connecting) with its next `seq`.
    /// On an open connection with no send in flight it goes out at once (a
    /// leader's appends leave before it persists, as over UCX); behind a
    /// send in flight it waits to be gathered into the next one.
    fn queue_frame(&mut self, slot: u32, kind: Kind, call: u64, send: Option<u64>, header: &[u8], payload: Vec<u8>) {
        let c = self.conns[slot as usize].as_mut().expect("a live slot");
        let mut head = Vec::with_capacity(FRAMING_BYTES + header.len());
        let wire_call = if kind == Kind::Message { 0 } else { call };
        wire::encode_header(&mut head, kind, c.send_seq, wire_call, header, payload.len());
        c.send_seq = c.send_seq.wrapping_add(1);
        c.out.push_back(OutFrame { head, payload, send });
        if c.state == State::Open && !c.send_inflight && !c.shut {
            self.submit_send(slot);
            self.enter();
        } else if !c.listed {
            c.listed = true;
            self.to_send.push(slot);
        }
    }

    /// Starts a `sendmsg` on every connection with frames queued and none
    /// in flight.
    fn start_sends(&mut self) {
        let mut listed = std::mem::take(&mut self.to_send);
        for &slot in &listed {
            let Some(Some(c)) = self.conns.get_mut(slot as usize) else { continue };
            c.listed = false;
            let sending = c.state == State::Open || (c.state == State::Gone && c.lingering.is_some());
            if sending && !c.shut && !c.send_inflight && !c.out.is_empty() {
                self.submit_send(slot);
            }
        }
        listed.clear();
        self.to_send = listed;
    }

    fn submit_send(&mut self, slot: u32) {
        let c = self.conns[slot as usize].as_mut().expect("a live slot");
        c.iov.clear();
        let mut skip = c.out_off;
        let mut frames = 0;
        for f in &c.out {
            if c.iov.len() + 2 > MAX_IOV {
                break;
            }
            frames += 1;
            for part in [&f.head, &f.payload] {
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                c.iov.push(libc::iovec { iov_base: part[skip..].as_ptr() as *mut libc::c_void, iov_len: part.len() - skip });
                skip = 0;
            }
        }
        assert!(!c.iov.is_empty(), "a send with nothing to send");
        c.msg.msg_iov = c.iov.as_mut_ptr();
        c.msg.msg_iovlen = c.iov.len();
        c.in_send = frames;
        c.send_inflight = true;
        let e = opcode::SendMsg::new(types::Fd(c.fd), &*c.msg).flags(libc::MSG_NOSIGNAL as u32).build().user_data(user_data(OP_SEND, slot, c.gen));
        self.push(e);
    }

    /// Submits what is queued (sends first), without waiting.
    fn submit(&mut self) {
        self.start_sends();
        if !self.ring.submission().is_empty() {
            self.enter();
        }
    }

    /// Hands the submission queue to the kernel.
    fn enter(&mut self) {
        if let Err(e) = self.ring.submit() {
            assert!(matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EINTR | libc::EAGAIN)), "io_uring_enter: {e}");
        }
    }

    /// Handles every completion the ring holds; whether there were any.
    fn reap(&mut self) -> bool {
        let mut any = false;
        if self.efd_armed && !self.ring.completion().is_empty() {
            self.efd_dirty = true;
        }
        loop {
            let mut cqes = std::mem::take(&mut self.cqes);
            cqes.clear();
            cqes.extend(self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            if cqes.is_empty() {
                self.cqes = cqes;
                self.progressed = any;
                return any;
            }
            any = true;
            for &(ud, res, flags) in &cqes {
                self.on_cqe(ud, res, flags);
            }
            self.cqes = cqes;
        }
    }

    fn on_cqe(&mut self, ud: u64, res: i32, flags: u32) {
        let (op, slot, gen) = unpack(ud);
        match op {
            OP_ACCEPT => self.on_accept(res, flags),
            OP_TIMEOUT | OP_CANCEL => {}
            OP_CONNECT | OP_RECV | OP_SEND => {
                let c = self.conns.get(slot as usize).and_then(Option::as_ref).expect("a completion names a live slot");
                assert_eq!(c.gen, gen, "a completion of an older connection in slot {slot}");
                match op {
                    OP_CONNECT => self.on_connect(slot, res),
                    OP_RECV => self.on_recv(slot, res),
                    _ => self.on_send(slot, res),
                }
                self.try_free(slot);
            }
            _ => panic!("completion with unknown user data {ud:#x}"),
        }
    }

    fn on_accept(&mut self, res: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.accept_armed = false;
            if res < 0 {
                // Out of fds or memory: try again a little later, not in a loop.
                self.accept_retry = Some(Instant::now() + ACCEPT_RETRY);
            } else if self.listener.is_some() {
                self.arm_accept();
            }
        }
        if res < 0 {
            return;
        }
        let fd = res;
        set_nodelay(fd);
        if self.open_count() >= self.limits.max_conns {
            self.stats.rejected += 1;
            // SAFETY: a fresh fd the kernel gave us.
            unsafe { libc::close(fd) };
            return;
        }
        let Some(slot) = self.add_conn(fd, State::Open) else {
            self.stats.rejected += 1;
            // SAFETY: as above.
            unsafe { libc::close(fd) };
            return;
        };
        self.stats.accepted += 1;
        self.events.push_back(Event::Accepted(ConnId(slot)));
        self.arm_recv(slot);
    }

    fn on_connect(&mut self, slot: u32, res: i32) {
        let c = self.conn(slot);
        c.connecting = false;
        if c.state != State::Connecting {
            return; // closed meanwhile
        }
        if res < 0 {
            self.stats.connects_failed += 1;
            self.end_conn(slot, Some(errno_status(-res)));
            return;
        }
        c.state = State::Open;
        if !c.out.is_empty() && !c.listed {
            c.listed = true;
            self.to_send.push(slot);
        }
        self.arm_recv(slot);
    }

    fn on_recv(&mut self, slot: u32, res: i32) {
        let c = self.conn(slot);
        c.recv_inflight = false;
        if c.state != State::Open {
            return;
        }
        if res <= 0 {
            let cause = if res == 0 { Status(sys::UCS_ERR_CONNECTION_RESET) } else { errno_status(-res) };
            self.end_conn(slot, Some(cause));
            return;
        }
        let n = res as usize;
        self.stats.recvs += 1;
        self.stats.bytes_received += n as u64;
        let c = self.conns[slot as usize].as_mut().expect("a live slot");
        c.drained = n < c.recv_len as usize;
        if c.lent.is_some() && c.large.is_none() {
            self.stats.lent_bytes += n as u64;
        }
        let whole = match &mut c.large {
            Some(large) => {
                let have = large.frame.payload.len();
                assert!(have + n <= large.want, "received past the frame");
                // SAFETY: the kernel wrote `n` bytes into the capacity after `have`.
                unsafe { large.frame.payload.set_len(have + n) };
                have + n == large.want
            }
            None => {
                assert!(c.rx_end + n <= c.rx_cap());
                c.rx_end += n;
                false
            }
        };
        if whole {
            let frame = c.large.take().expect("checked").frame;
            if let Err(e) = self.deliver(slot, frame) {
                self.violation(slot, e);
                return;
            }
        }
        if !self.parse(slot) {
            return;
        }
        self.rearm_recv(slot);
    }

    /// Delivers every whole frame in the receive buffer; false if a bad
    /// frame ended the connection.
    fn parse(&mut self, slot: u32) -> bool {
        loop {
            let c = self.conns[slot as usize].as_mut().expect("a live slot");
            if c.large.is_some() {
                return true;
            }
            let next = c.next_frame(&self.limits, &mut self.spare);
            let result = match next {
                Ok(Some(frame)) => self.deliver(slot, frame),
                Ok(None) => {
                    // Fresh lent memory, if due, is taken when the next
                    // receive is armed (`refresh_rx`).
                    let c = self.conns[slot as usize].as_mut().expect("a live slot");
                    let Some(total) = c.want_area.take() else { return true };
                    self.move_rx(slot, total);
                    continue;
                }
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                self.violation(slot, e);
                return false;
            }
        }
    }

    /// A frame of `total` bytes does not fit in what is left of the
    /// connection's lent area: moves its received bytes to the start of a
    /// new area, or of the connection's own buffer if the arena has none.
    fn move_rx(&mut self, slot: u32, total: usize) {
        let fresh = self.arena.as_mut().and_then(|a| a.area(total.max(LENT_MIN_BYTES))).filter(|a| a.len() >= total);
        let c = self.conns[slot as usize].as_mut().expect("a live slot");
        assert!(!c.recv_inflight, "moved between receives");
        let old = c.lent.take().expect("only lent memory is moved");
        let pending = &old.shared[c.rx_start..c.rx_end];
        let n = pending.len();
        match fresh {
            Some(area) => {
                // SAFETY: the new area is lent to us alone and holds `total`
                // bytes, more than `n`; the old one is still held.
                unsafe { std::ptr::copy_nonoverlapping(pending.as_ptr(), area.as_ptr(), n) };
                c.lent = Some(Lent { shared: area.share(), area });
            }
            None => {
                if c.rx.len() < n {
                    c.rx = vec![0u8; n.next_power_of_two()].into_boxed_slice();
                }
                c.rx[..n].copy_from_slice(pending);
            }
        }
        c.rx_start = 0;
        c.rx_end = n;
        self.stats.carried_bytes += n as u64;
        if let Some(a) = self.arena.as_mut() {
            a.carried(n);
        }
    }

    /// Between frames: receives into lent memory when the arena has some,
    /// on a fresh area once what is left of the current one is short.
    fn refresh_rx(&mut self, slot: u32) {
        let Some(arena) = self.arena.as_mut() else { return };
        let c = self.conns[slot as usize].as_mut().expect("a live slot");
        if c.rx_start != c.rx_end || c.recv_inflight || c.large.is_some() {
            return;
        }
        if c.lent.as_ref().is_some_and(|l| l.area.len() - c.rx_end >= LENT_MIN_RECV) {
            return;
        }
        let fresh = arena.area(LENT_MIN_BYTES);
        c.rx_start = 0;
        c.rx_end = 0;
        c.lent = fresh.map(|area| Lent { shared: area.share(), area });
        if c.lent.is_none() && c.rx.len() > RX_BYTES {
            c.rx = vec![0u8; RX_BYTES].into_boxed_slice();
        }
    }

    /// Hands one frame on: checks its `seq` and its call against the
    /// connection's window.
    fn deliver(&mut self, slot: u32, frame: Frame) -> Result<(), FrameError> {
        let c = self.conns[slot as usize].as_mut().expect("a live slot");
        let checked = if frame.seq != c.recv_seq {
            Err(FrameError::Order)
        } else {
            match frame.kind {
                Kind::Request if !c.answering.arrive(frame.call) => Err(FrameError::Window),
                Kind::Response => c.window.finish(frame.call).map(Some).ok_or(FrameError::UnknownResponse),
                _ => Ok(None),
            }
        };
        let token = match checked {
            Ok(token) => token,
            Err(e) => {
                self.spare.give(frame.payload);
                return Err(e);
            }
        };
        c.recv_seq = c.recv_seq.wrapping_add(1);
        let conn = ConnId(slot);
        let event = match frame.kind {
            Kind::Request => Event::Request(Request { id: RequestId { conn, call: frame.call }, header: frame.header, payload: frame.payload }),
            Kind::Response => {
                let result = Ok(Output::Response { header: frame.header, payload: frame.payload });
                Event::Completion(Completion { conn, token: token.expect("a response's token"), result })
            }
            Kind::Message => {
                let payload = match frame.lent {
                    Some(b) => {
                        self.stats.lent_payloads += 1;
                        Payload::Lent(b)
                    }
                    None => Payload::Owned(frame.payload),
                };
                Event::Message { conn, header: frame.header, payload }
            }
        };
        self.events.push_back(event);
        Ok(())
    }

    fn violation(&mut self, slot: u32, e: FrameError) {
        self.stats.bad_frames[e.index()] += 1;
        self.end_conn(slot, Some(e.status()));
    }

    fn on_send(&mut self, slot: u32, res: i32) {
        let c = self.conns[slot as usize].as_mut().expect("a live slot");
        c.send_inflight = false;
        c.in_send = 0;
        if res < 0 {
            self.drop_output(slot);
            if self.conn(slot).state != State::Gone {
                self.end_conn(slot, Some(errno_status(-res)));
            }
            return;
        }
        self.stats.sends += 1;
        self.stats.bytes_sent += res as u64;
        let gone = c.state == State::Gone;
        let mut left = res as usize;
        while let Some(front) = c.out.front() {
            let rest = front.len() - c.out_off;
            if left < rest {
                c.out_off += left;
                left = 0;
                break;
            }
            left -= rest;
            c.out_off = 0;
            let done = c.out.pop_front().expect("checked");
            if let (Some(id), false) = (done.send, gone) {
                assert!(c.window.finish_send(id), "a send's slot is given back once");
            }
            self.spare.give(done.payload);
        }
        assert_eq!(left, 0, "the kernel wrote more than was queued");
        if !c.out.is_empty() {
            self.stats.partial_sends += u64::from(c.out_off > 0);
            if !c.listed {
                c.listed = true;
                self.to_send.push(slot);
            }
        } else if gone && c.lingering.is_some() {
            self.finish_linger(slot);
        }
    }

    /// Drops every queued frame the kernel no longer points into.
    fn drop_output(&mut self, slot: u32) {
        let c = self.conns[slot as usize].as_mut().expect("a live slot");
        let keep = if c.send_inflight { c.in_send } else { 0 };
        while c.out.len() > keep {
            let f = c.out.pop_back().expect("checked");
            self.spare.give(f.payload);
        }
        if keep == 0 {
            c.out_off = 0;
        }
    }

    /// A closed connection sent what was queued (or gave up): half-close.
    fn finish_linger(&mut self, slot: u32) {
        let c = self.conns[slot as usize].as_mut().expect("a live slot");
        if c.lingering.take().is_some() {
            self.lingering -= 1;
        }
        if !c.shut {
            c.shut = true;
            // SAFETY: our socket; the FIN follows what was written.
            unsafe { libc::shutdown(c.fd, libc::SHUT_WR) };
        }
    }

    /// Ends a connection: fails its window, queues `Disconnected`, and
    /// stops its I/O: at once for a failure (`cause`), after sending what
    /// was queued (bounded by [`CLOSE_LINGER`]) for a local close.
    fn end_conn(&mut self, slot: u32, cause: Option<Status>) {
        let c = self.conns[slot as usize].as_mut().expect("a live slot");
        if c.state == State::Gone {
            return;
        }
        let was_connecting = c.state == State::Connecting;
        c.state = State::Gone;
        for (_, token) in c.window.drain() {
            let completion = Completion { conn: ConnId(slot), token, result: Err(OpError::Disconnected(slot)) };
            self.events.push_back(Event::Completion(completion));
        }
        self.events.push_back(Event::Disconnected { conn: ConnId(slot), cause });
        let (fd, gen) = (c.fd, c.gen);
        if let Some(large) = c.large.take() {
            self.spare.give(large.frame.payload);
        }
        let c = self.conns[slot as usize].as_mut().expect("a live slot");
        if was_connecting {
            c.shut = true;
            let target = user_data(OP_CONNECT, slot, gen);
            self.push(opcode::AsyncCancel::new(target).build().user_data(user_data(OP_CANCEL, slot, 0)));
            self.drop_output(slot);
            return;
        }
        if cause.is_some() || c.out.is_empty() {
            c.shut = true;
            // SAFETY: our socket; in-flight operations on it complete.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
            self.drop_output(slot);
            return;
        }
        // A local close with frames queued: send them, then half-close.
        c.lingering = Some(Instant::now());
        self.lingering += 1;
        let receiving = c.recv_inflight;
        if !c.listed {
            c.listed = true;
            self.to_send.push(slot);
        }
        if receiving {
            let target = user_data(OP_RECV, slot, gen);
            self.push(opcode::AsyncCancel::new(target).build().user_data(user_data(OP_CANCEL, slot, 0)));
        }
    }

    /// Shuts down closed connections that have lingered past [`CLOSE_LINGER`].
    fn expire_lingering(&mut self) {
        if self.lingering == 0 {
            return;
        }
        for slot in 0..self.conns.len() as u32 {
            let expired = matches!(&self.conns[slot as usize], Some(c) if c.lingering.is_some_and(|t| t.elapsed() >= CLOSE_LINGER));
            if expired {
                self.finish_linger(slot);
                let c = self.conn(slot);
                // SAFETY: our socket; the send in flight completes.
                unsafe { libc::shutdown(c.fd, libc::SHUT_RDWR) };
                self.drop_output(slot);
                self.try_free(slot);
            }
        }
    }

    /// Frees an ended connection's slot once its end was polled and none
    /// of its operations is in flight.
    fn try_free(&mut self, slot: u32) {
        let Some(c) = self.conns[slot as usize].as_mut() else { return };
        if c.state != State::Gone || !c.reported || c.busy() || c.lingering.is_some() {
            return;
        }
        let c = self.conns[slot as usize].take().expect("checked");
        // SAFETY: our socket; nothing is in flight on it.
        unsafe { libc::close(c.fd) };
        for f in c.out {
            self.spare.give(f.payload);
        }
    }

    /// Submits, reaps and moves on what can move (lingering closes, paused
    /// receives).
    fn progress(&mut self) {
        // The owner is running: completions need not wake it through the
        // eventfd until `event_fd` arms it again. Without this, the sends of
        // a turn (completed inline) signalled the eventfd, and a loop woken
        // by something else found its poll on the fd fired and ran a turn
        // for nothing before it could sleep.
        if self.efd_armed {
            // A completion posted while enabled signalled the fd; one posted
            // after this does not.
            self.ring.completion().disable_eventfd();
            self.efd_dirty |= !self.ring.completion().is_empty();
            self.efd_armed = false;
        }
        if self.accept_retry.is_some_and(|at| Instant::now() >= at) {
            self.accept_retry = None;
            self.arm_accept();
        }
        self.submit();
        self.reap();
        self.expire_lingering();
        self.resume_paused();
    }
}

fn set_nodelay(fd: RawFd) {
    let one: libc::c_int = 1;
    // SAFETY: valid fd and option pointer; a failure only leaves Nagle on.
    unsafe { libc::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, (&one as *const libc::c_int).cast(), 4) };
}

/// The status a connection's end carries for an errno.
fn errno_status(errno: i32) -> Status {
    Status(match errno {
        libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH => sys::UCS_ERR_UNREACHABLE,
        libc::ECANCELED | libc::ETIMEDOUT | libc::ETIME => sys::UCS_ERR_ENDPOINT_TIMEOUT,
        libc::ECONNRESET | libc::EPIPE => sys::UCS_ERR_CONNECTION_RESET,
        _ => sys::UCS_ERR_IO_ERROR,
    })
}

impl Transport for TcpTransport {
    type Addr = SocketAddr;

    fn connect(&mut self, addr: &SocketAddr) -> Result<ConnId, ConnectError> {
        if self.open_count() >= self.limits.max_conns {
            return Err(ConnectError::TooMany(self.limits.max_conns));
        }
        let family = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(ConnectError::Io { addr: addr.to_string(), source: io::Error::last_os_error() });
        }
        set_nodelay(fd);
        let Some(slot) = self.add_conn(fd, State::Connecting) else {
            // SAFETY: the socket we just made.
            unsafe { libc::close(fd) };
            return Err(ConnectError::TooMany(self.limits.max_conns));
        };
        let ts: *const types::Timespec = &*self.connect_ts;
        let c = self.conn(slot);
        *c.addr = sockaddr_from(*addr);
        c.connecting = true;
        let sa = (&c.addr.0 as *const libc::sockaddr_storage).cast::<libc::sockaddr>();
        let connect = opcode::Connect::new(types::Fd(fd), sa, c.addr.1).build().flags(squeue::Flags::IO_LINK).user_data(user_data(OP_CONNECT, slot, c.gen));
        let timeout = opcode::LinkTimeout::new(ts).build().user_data(user_data(OP_TIMEOUT, slot, 0));
        // Both in one go: a link must not be split by a full queue.
        let room = {
            let sq = self.ring.submission();
            sq.capacity() - sq.len()
        };
        if room < 2 {
            self.submit();
        }
        self.push(connect);
        self.push(timeout);
        Ok(ConnId(slot))
    }

    fn close(&mut self, conn: ConnId) {
        if matches!(self.conns.get(conn.0 as usize), Some(Some(c)) if c.state != State::Gone) {
            self.end_conn(conn.0, None);
        }
    }

    fn call(&mut self, conn: ConnId, header: &[u8], payload: Vec<u8>, token: u64) -> Result<(), OpError> {
        check_sizes(&self.limits, header.len(), payload.len())?;
        let c = self.open_conn(conn)?;
        let cap = c.window.capacity();
        let call = c.window.take(token).ok_or(OpError::WindowFull(cap))?;
        self.queue_frame(conn.0, Kind::Request, call, None, header, payload);
        Ok(())
    }

    fn reply(&mut self, request: RequestId, header: &[u8], payload: Vec<u8>) -> Result<(), OpError> {
        check_sizes(&self.limits, header.len(), payload.len())?;
        let c = self.open_conn(request.conn)?;
        if !c.answering.answer(request.call) {
            return Err(OpError::UnknownRequest);
        }
        self.queue_frame(request.conn.0, Kind::Response, request.call, None, header, payload);
        Ok(())
    }

    fn send(&mut self, conn: ConnId, header: &[u8], payload: Vec<u8>) -> Result<(), OpError> {
        check_sizes(&self.limits, header.len(), payload.len())?;
        let c = self.open_conn(conn)?;
        let cap = c.window.capacity();
        let id = c.window.take_send().ok_or(OpError::WindowFull(cap))?;
        self.queue_frame(conn.0, Kind::Message, 0, Some(id), header, payload);
        Ok(())
    }

    fn window_free(&self, conn: ConnId) -> usize {
        match self.conns.get(conn.0 as usize) {
            Some(Some(c)) if c.state != State::Gone => c.window.free(),
            _ => usize::MAX,
        }
    }

    fn reach(&self) -> Reach {
        Reach::Off
    }

    unsafe fn register(&mut self, _addr: *mut u8, _len: usize) -> Result<LocalRegionId, RegisterError> {
        Err(RegisterError::OneSidedOff)
    }

    fn deregister(&mut self, _region: LocalRegionId) {}

    fn export(&self, _region: LocalRegionId) -> Result<RegionDescriptor, RegisterError> {
        Err(RegisterError::OneSidedOff)
    }

    fn attach(&mut self, _conn: ConnId, _desc: &RegionDescriptor) -> Result<RemoteRegionId, AttachError> {
        Err(AttachError::OneSidedOff)
    }

    fn put(&mut self, _conn: ConnId, _region: RemoteRegionId, _offset: u64, _buf: Vec<u8>, _token: u64) -> Result<(), OpError> {
        Err(OpError::Unsupported("one-sided put: the io_uring TCP transport carries messages only"))
    }

    fn get(&mut self, _conn: ConnId, _region: RemoteRegionId, _offset: u64, _buf: Vec<u8>, _token: u64) -> Result<(), OpError> {
        Err(OpError::Unsupported("one-sided get: the io_uring TCP transport carries messages only"))
    }

    fn atomic(&mut self, _conn: ConnId, _region: RemoteRegionId, _offset: u64, _op: AtomicOp, _token: u64) -> Result<(), OpError> {
        Err(OpError::Unsupported("one-sided atomic: the io_uring TCP transport carries messages only"))
    }

    fn flush(&mut self, _conn: ConnId, _token: u64) -> Result<(), OpError> {
        Err(OpError::Unsupported("flush of one-sided operations: the io_uring TCP transport carries messages only"))
    }

    fn fence(&mut self) -> Result<(), OpError> {
        Err(OpError::Unsupported("fence of one-sided operations: the io_uring TCP transport carries messages only"))
    }

    fn poll(&mut self, events: &mut Vec<Event>, max: usize) -> usize {
        self.progress();
        let mut n = 0;
        while n < max {
            let Some(event) = self.events.pop_front() else { break };
            if let Event::Disconnected { conn, .. } = &event {
                // The id may be reused only once the caller has seen it end.
                let slot = conn.0;
                self.conn(slot).reported = true;
                self.try_free(slot);
            }
            events.push(event);
            n += 1;
        }
        self.resume_paused();
        n
    }

    fn wait(&mut self, timeout: Duration) -> Result<bool, WaitError> {
        if !self.events.is_empty() {
            return Ok(true);
        }
        self.progress();
        if !self.events.is_empty() || self.progressed {
            return Ok(true);
        }
        if timeout.is_zero() {
            return Ok(false);
        }
        // Bounded by the earliest lingering close and a retry of the accept.
        let timeout = if self.lingering > 0 { timeout.min(CLOSE_LINGER) } else { timeout };
        let timeout = match self.accept_retry {
            Some(at) => timeout.min(at.saturating_duration_since(Instant::now())),
            None => timeout,
        };
        let ts = types::Timespec::new().sec(timeout.as_secs()).nsec(timeout.subsec_nanos());
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => {}
            Err(e) => return Err(WaitError::Enter(e)),
        }
        let any = self.reap();
        self.expire_lingering();
        Ok(any || !self.events.is_empty())
    }

    fn event_fd(&mut self) -> EventFd {
        self.progress();
        if !self.events.is_empty() {
            return EventFd::Ready;
        }
        // What the reap queued (receives re-armed, frames behind a finished
        // send) must be with the kernel before anyone sleeps on the fd.
        self.submit();
        // Let completions signal the eventfd, clear it if it may have been
        // signalled, then look again: a completion posted after the clear
        // signals it anew.
        self.ring.completion().enable_eventfd();
        self.efd_armed = true;
        if std::mem::take(&mut self.efd_dirty) {
            let mut count = 0u64;
            // SAFETY: reads 8 bytes into a u64 from our non-blocking eventfd.
            unsafe { libc::read(self.efd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        }
        if !self.ring.completion().is_empty() {
            return EventFd::Ready;
        }
        EventFd::Armed(self.efd.as_raw_fd())
    }

    fn progressed(&self) -> bool {
        self.progressed
    }

    fn take_buffer(&mut self, len: usize) -> Vec<u8> {
        self.spare.take(len)
    }

    fn lend_rx(&mut self, arena: Box<dyn RxArena>) -> bool {
        self.arena = Some(arena);
        true
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        self.spare.give(buf);
    }
}

impl Drop for TcpTransport {
    fn drop(&mut self) {
        for c in self.conns.iter_mut().flatten() {
            if !c.connecting {
                // SAFETY: our socket; its operations complete.
                unsafe { libc::shutdown(c.fd, libc::SHUT_RDWR) };
            }
        }
        self.listener = None;
        self.push(opcode::AsyncCancel2::new(types::CancelBuilder::any()).build().user_data(user_data(OP_CANCEL, 0, 0)));
        let deadline = Instant::now() + DROP_DRAIN_WAIT;
        let busy = |t: &TcpTransport| t.conns.iter().flatten().any(Conn::busy) || t.accept_armed;
        while busy(self) && Instant::now() < deadline {
            let ts = types::Timespec::new().nsec(10_000_000);
            let args = types::SubmitArgs::new().timespec(&ts);
            let _ = self.ring.submitter().submit_with_args(1, &args);
            let cqes: Vec<(u64, i32, u32)> = self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())).collect();
            for (ud, _, flags) in cqes {
                let (op, slot, _) = unpack(ud);
                if op == OP_ACCEPT {
                    self.accept_armed &= cqueue::more(flags);
                    continue;
                }
                let Some(Some(c)) = self.conns.get_mut(slot as usize) else { continue };
                match op {
                    OP_CONNECT => c.connecting = false,
                    OP_RECV => c.recv_inflight = false,
                    OP_SEND => c.send_inflight = false,
                    _ => {}
                }
            }
        }
        let stuck = self.conns.iter().flatten().any(Conn::busy);
        for c in self.conns.iter().flatten() {
            // SAFETY: our sockets, closed once.
            unsafe { libc::close(c.fd) };
        }
        if stuck {
            // The kernel may still use their buffers: leak them.
            std::mem::forget(std::mem::take(&mut self.conns));
        }
    }
}
