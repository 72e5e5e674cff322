//! `Server`: a single-threaded io_uring TCP event loop that receives into a provided-buffer
//! ring of [`BufferSource`] buffers and calls a [`Service`] once per wake-up.
//!
//! One iteration: block in `io_uring_enter` until at least one completion arrives; drain every
//! completion (accepts, receives, sends); refill the buffer ring; hand all connections with new
//! bytes to the service in one [`Batch`]; apply the replies (consume input, queue output,
//! retain zero-copy parts); refill again; then settle every touched connection (start a send,
//! arm, pause or resume receiving, progress a close). Nothing spins: when idle the thread sleeps
//! in the kernel.
//!
//! Invariants (asserted where cheap):
//! - every received byte is either in its connection's receive queue (`rx`, in stream order),
//!   or consumed; a receive queue entry holds one reference on its buffer, released when the
//!   service has consumed all of its bytes or the connection closes;
//! - each output buffer part holds one reference from when the reply is taken until the send
//!   containing it completes (or the connection closes);
//! - at most one send per connection is in flight (keeps order); `inflight` is never modified
//!   while the kernel may read it;
//! - a connection slot is freed only when neither a receive nor a send is in flight on it, so
//!   no completion ever names a freed slot;
//! - reading pauses when a connection holds `max_rx_bytes` unconsumed (or, with a receive grant
//!   from the service, [`Reply::wanted`], that many) or `max_tx_bytes` unsent bytes, and resumes
//!   when below; a connection is handed to the service only once it holds what the service
//!   last said it wants, so a request of 512 MB in 2 KB buffers costs one parse, not one per
//!   receive; ENOBUFS (ring empty) parks the connection until the ring
//!   has buffers again. The kernel leaves unread bytes in the socket, so none is lost. Progress
//!   needs the pool to be larger than what connections may hold unconsumed (`max_rx_bytes`
//!   each) plus the ring: buffers held by half-received requests are not reusable. A small
//!   receive (a quarter of a buffer at most) is copied onto the tail of the previous receive's
//!   buffer when it fits, and its own buffer returned at once, so a peer that sends a byte at a
//!   time holds about one buffer per buffer's worth of bytes, not one per receive.
//!
//! Wake-ups and the timer: after every `handle` the loop asks the service for connections to
//! show again with no new bytes (a parked request now answerable) and runs the service again
//! for them in the same turn, until it names none; it also asks for the service's next
//! deadline and keeps one io_uring timeout armed for the earliest (`OP_TIMER`, replaced by a
//! `TimeoutRemove` when an earlier one is wanted), so a sleeping loop wakes at that instant
//! and asks again. A stale timer firing early costs one empty turn.
//!
//! Watching: last before it blocks, the loop asks the service for an fd of another event
//! source to wait on too ([`Service::watch`]: a transport's armed event fd, so one thread serves
//! its clients and its peers). It keeps one `IORING_OP_POLL_ADD` armed on it (`OP_WATCH`,
//! replaced by a `PollRemove` when the service names another fd, re-armed after it fires),
//! and does not block at all when the service says it has work already. The service does that
//! work in `wakeups`, which every wake-up calls.
//!
//! Closing: a service's `close` (or the peer's EOF) is graceful: queued output is sent, then
//! the socket is half-closed (FIN) and further input is read and discarded until the peer
//! closes or two linger ticks of 500 ms pass, so a peer still sending (the body of a refused
//! request) reads the response rather than a reset. Errors and `stop` close hard
//! (`shutdown(SHUT_RDWR)`, unsent output dropped). The service's `closed` is called once all
//! of the connection's buffers are returned.
//!
//! Waiting: `busy_poll_us` (default 0) polls for completions that long before blocking.
//! Measured on 2 cores with the client on the same machine it did not help (the poller takes
//! the CPU the client needs), so it is off by default; an idle loop sleeps either way.
//! `batch_wait_us` (default 0) makes a turn that sent replies wait for the completions they
//! make likely — each send's own and, from closed-loop clients, one request per connection
//! answered — for at most that long (`IORING_ENTER_EXT_ARG` with `min_wait_usec`, Linux 6.12):
//! it returns as soon as they all arrived, or when the time is up and anything arrived, else
//! sleeps until the first completion. With deferred task-run the kernel does not wake the
//! thread for each arrival meanwhile, so fewer, fuller turns cost both sides fewer wake-ups.
//! Kernel features: multishot accept (5.19), provided buffer rings (5.19), multishot receive
//! (6.0; falls back to single-shot receive with buffer select on `EINVAL`), and the
//! single-issuer + deferred task-run setup flags (6.1; falls back to a plain ring).

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::batch::{Batch, ConnId, Entry, Output, Part, Reply, Segment, Service, Watch};
use crate::buffers::BufferSource;
use crate::ring::BufRing;

/// How connections receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvMode {
    /// One multishot receive per connection (Linux 6.0+); falls back to single-shot if the
    /// kernel refuses it.
    Multishot,
    /// One single-shot receive with buffer select at a time, re-armed after each completion.
    SingleShot,
}

/// Server limits and options. Every queue is bounded by one of these.
#[derive(Clone, Debug)]
pub struct Config {
    /// Entries in the provided-buffer ring (a power of two, at most 32768).
    pub ring_entries: u16,
    /// Most connection slots (a hard bound: the loop's queues are sized by it); more are
    /// accepted and closed at once. The service may set a lower limit at run time
    /// ([`crate::Service::limits`]: Redis's `maxclients`).
    pub max_connections: u32,
    /// What a connection refused over `max_connections` is sent before it
    /// is closed, per listener (Redis's `-ERR max number of clients
    /// reached`); a listener without bytes here closes it silently. One
    /// non-blocking send into the fresh socket's empty buffer: never waits.
    pub reject_reply: Vec<Vec<u8>>,
    /// Reading pauses while a connection holds this many unconsumed bytes; a connection still
    /// at or above it after the service saw it is closed (the service cannot make progress),
    /// unless the service holds its input ([`crate::Reply::held`]).
    pub max_rx_bytes: usize,
    /// Reading pauses while a connection has this many bytes queued to send.
    pub max_tx_bytes: usize,
    /// Most buffers all connections together may hold as unconsumed input (half-received
    /// requests pin theirs). Past it, the connection holding the most is closed at once
    /// (Redis 7.0's client eviction, `maxmemory-clients`), until the rest fit: so a pool that
    /// cannot give every one of many connections `max_rx_bytes` still always has buffers to
    /// receive with. `u32::MAX`: no bound.
    pub rx_budget_buffers: u32,
    /// How to receive.
    pub recv_mode: RecvMode,
    /// Set `TCP_NODELAY` on accepted sockets.
    pub tcp_nodelay: bool,
    /// How long `run` waits for connections to finish closing after a stop.
    pub shutdown_timeout_ms: u32,
    /// Before blocking, poll for completions this long (0: block at once). Bounded so that an
    /// idle loop still sleeps; costs CPU the peer may need on a small machine.
    pub busy_poll_us: u32,
    /// Batch wait: after a turn that sent replies, wait up to this long for the completions
    /// those replies make likely (each send's own, and the next request of each connection
    /// answered, as closed-loop clients do), returning early once they all arrived; when it
    /// expires, return at once if anything arrived, else sleep until something does. 0: wake
    /// on the first completion. Needs Linux 6.12 (`IORING_FEAT_MIN_TIMEOUT`); ignored before.
    pub batch_wait_us: u32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            ring_entries: 1024,
            max_connections: 1024,
            reject_reply: Vec::new(),
            max_rx_bytes: (1 << 20) + (16 << 10),
            max_tx_bytes: 4 << 20,
            rx_budget_buffers: u32::MAX,
            recv_mode: RecvMode::Multishot,
            tcp_nodelay: true,
            shutdown_timeout_ms: 2000,
            busy_poll_us: 0,
            batch_wait_us: 0,
        }
    }
}

/// Counters kept by the loop (cumulative over `run` calls).
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Returns from the blocking wait.
    pub wakeups: u64,
    /// Waits that used the batch wait (`Config::batch_wait_us`).
    pub batch_waits: u64,
    /// Completions processed.
    pub cqes: u64,
    /// Most completions drained in one wake-up.
    pub max_cqes_per_wakeup: u64,
    /// Calls to `Service::handle`.
    pub batches: u64,
    /// Connection entries over all batches.
    pub batch_entries: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed at once because `max_connections` were open.
    pub rejected: u64,
    /// Connections closed.
    pub closed: u64,
    /// Receive completions that carried data.
    pub recvs: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Send completions.
    pub sends: u64,
    /// Sends that sent less than asked (re-submitted for the rest).
    pub partial_sends: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Buffers attached to the ring after the kernel consumed the previous one.
    pub ring_refills: u64,
    /// Receives that found the buffer ring empty.
    pub enobufs: u64,
    /// Small receives copied onto the tail of the previous receive's buffer, or (incremental
    /// consumption) joined to the previous receive they continue in the same buffer.
    pub coalesced: u64,
    /// Receives armed (multishot arms once per connection unless paused or starved).
    pub recv_arms: u64,
    /// Times reading was paused for back-pressure.
    pub read_pauses: u64,
    /// Connections closed because their unconsumed input reached `max_rx_bytes`.
    pub rx_overflow_closes: u64,
    /// Connections closed because all connections' unconsumed input passed
    /// `rx_budget_buffers` and theirs was the largest (Redis's `evicted_clients`).
    pub rx_evictions: u64,
    /// Connections closed for having been idle past the service's idle timeout.
    pub idle_closes: u64,
    /// Graceful closes whose peer had not closed within the linger time (then reset).
    pub linger_timeouts: u64,
    /// The kernel refused multishot receive and the loop switched to single-shot.
    pub multishot_fallback: bool,
    /// The ring was set up with `SINGLE_ISSUER | DEFER_TASKRUN`.
    pub defer_taskrun: bool,
    /// Receives consume the provided buffers incrementally (`IOU_PBUF_RING_INC`, Linux 6.12):
    /// small receives share buffers ([`crate::ring`]).
    pub incremental_buffers: bool,
    /// The kernel takes a minimum wait (`IORING_FEAT_MIN_TIMEOUT`), so `batch_wait_us` applies.
    pub min_wait_supported: bool,
    /// Times the service's watched fd woke the loop ([`Service::watch`]).
    pub watch_wakeups: u64,
    /// Turns that did not block because the service had work ([`Watch::Ready`]).
    pub watch_ready: u64,
}

impl Stats {
    /// Mean completions per wake-up.
    pub fn cqes_per_wakeup(&self) -> f64 {
        self.cqes as f64 / self.wakeups.max(1) as f64
    }
}

/// Errors of [`Server::bind`] and [`Server::run`].
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listening socket could not be bound.
    #[error("bind {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// The cause.
        source: io::Error,
    },
    /// Invalid configuration.
    #[error("config: {0}")]
    Config(&'static str),
    /// The io_uring or eventfd could not be created.
    #[error("io_uring setup: {0}")]
    Setup(io::Error),
    /// The provided-buffer ring could not be registered (needs Linux 5.19+).
    #[error("provided buffer ring registration (needs Linux 5.19+): {0}")]
    BufRing(io::Error),
    /// The buffer source had no free buffer to fill the ring with.
    #[error("the buffer source has no free buffer")]
    NoBuffers,
    /// `io_uring_enter` failed.
    #[error("io_uring_enter: {0}")]
    Enter(io::Error),
    /// Connections were still busy when the shutdown timeout expired.
    #[error("{0} connections still had operations in flight at shutdown")]
    ShutdownTimeout(usize),
}

/// Stops a running server from any thread.
#[derive(Clone, Debug)]
pub struct StopHandle {
    fd: Arc<OwnedFd>,
}

impl StopHandle {
    /// Asks the loop to stop; `run` then closes every connection and returns.
    pub fn stop(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to an eventfd we own.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        assert_eq!(n, 8, "eventfd write failed: {}", io::Error::last_os_error());
    }
}

/// A TCP server on one thread. `bind` only binds; `run` sets up io_uring (on the calling
/// thread, as `SINGLE_ISSUER` requires) and serves until stopped.
///
/// One server may listen on several addresses ([`Server::bind_all`]): every connection is
/// served by the same loop and service, and each [`crate::Input`] says which listener (index
/// into the address list) its connection was accepted on, so one thread can speak several
/// protocols (e.g. RESP on one port and HTTP on another).
pub struct Server<S: BufferSource, V: Service<S>> {
    listeners: Vec<TcpListener>,
    config: Config,
    source: S,
    service: V,
    stats: Stats,
    stop_fd: Arc<OwnedFd>,
}

impl<S: BufferSource, V: Service<S>> Server<S, V> {
    /// Binds a listening socket at `addr` (use port 0 for any free port).
    pub fn bind(
        addr: impl ToSocketAddrs + std::fmt::Debug,
        config: Config,
        source: S,
        service: V,
    ) -> Result<Self, ServerError> {
        Server::bind_all(&[addr], config, source, service)
    }

    /// Binds one listening socket per address; connections accepted on `addrs[i]` carry
    /// listener index `i` in their [`crate::Input`]s.
    pub fn bind_all<A: ToSocketAddrs + std::fmt::Debug>(
        addrs: &[A],
        config: Config,
        source: S,
        service: V,
    ) -> Result<Self, ServerError> {
        if addrs.is_empty() || addrs.len() > MAX_LISTENERS {
            return Err(ServerError::Config("between 1 and 16 listen addresses"));
        }
        if !config.ring_entries.is_power_of_two() || config.ring_entries > 32768 {
            return Err(ServerError::Config("ring_entries must be a power of two <= 32768"));
        }
        if config.max_connections == 0 || config.max_connections > (1 << 20) {
            return Err(ServerError::Config("max_connections must be in 1..=1048576"));
        }
        if config.max_rx_bytes == 0 || config.max_tx_bytes == 0 {
            return Err(ServerError::Config("max_rx_bytes and max_tx_bytes must be above 0"));
        }
        let mut listeners = Vec::with_capacity(addrs.len());
        for addr in addrs {
            let name = format!("{addr:?}");
            listeners.push(transport::listen::bind_listener(addr).map_err(|source| ServerError::Bind { addr: name, source })?);
        }
        // SAFETY: plain syscall; the result is checked.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(ServerError::Setup(io::Error::last_os_error()));
        }
        // SAFETY: a fresh fd we own.
        let stop_fd = Arc::new(unsafe { OwnedFd::from_raw_fd(efd) });
        Ok(Server { listeners, config, source, service, stats: Stats::default(), stop_fd })
    }

    /// The bound address (of the first listener).
    pub fn local_addr(&self) -> SocketAddr {
        self.listeners[0].local_addr().expect("listener has an address")
    }

    /// The bound addresses, in the order given to [`Server::bind_all`].
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().map(|l| l.local_addr().expect("listener has an address")).collect()
    }

    /// A handle that stops `run` from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle { fd: self.stop_fd.clone() }
    }

    /// Serves until a [`StopHandle`] fires; then closes every connection, returns every buffer
    /// the loop holds to the source, and returns.
    pub fn run(&mut self) -> Result<(), ServerError> {
        let listen_fds: Vec<RawFd> = self.listeners.iter().map(|l| l.as_raw_fd()).collect();
        let mut lp = Loop::new(
            &self.config,
            listen_fds,
            self.stop_fd.as_raw_fd(),
            &mut self.source,
            &mut self.service,
            &mut self.stats,
        )?;
        let served = lp.serve();
        let closed = lp.shutdown();
        served.and(closed)
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The buffer source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The service.
    pub fn service(&self) -> &V {
        &self.service
    }

    /// The service, to change it between runs.
    pub fn service_mut(&mut self) -> &mut V {
        &mut self.service
    }

    /// The buffer source and the service.
    pub fn into_parts(self) -> (S, V) {
        (self.source, self.service)
    }
}

const OP_ACCEPT: u64 = 1;
const OP_RECV: u64 = 2;
const OP_SEND: u64 = 3;
const OP_CANCEL: u64 = 4;
const OP_STOP: u64 = 5;
const OP_TICK: u64 = 6;
const OP_TIMER: u64 = 7;
const OP_WATCH: u64 = 8;

/// Most listening sockets one server has.
const MAX_LISTENERS: usize = 16;

/// Period of the linger timer; a lingering connection is closed after two ticks (0.5–1 s).
const LINGER_TICK_MS: u32 = 500;

/// The general timeout of a batch wait: only bounds a sleep that a completion ends anyway.
const BATCH_GENERAL_TIMEOUT_S: u64 = 1;

/// Most iovecs in one `sendmsg` (well under `IOV_MAX`).
const MAX_IOV: usize = 64;
const BGID: u16 = 7;
/// `io_uring_enter` flag: reap completions (the io-uring crate keeps its `sys` private).
const IORING_ENTER_GETEVENTS: u32 = 1;

fn user_data(op: u64, slot: u32, gen: u32) -> u64 {
    (op << 56) | ((gen as u64 & 0xff_ffff) << 32) | slot as u64
}

fn gen_of(ud: u64) -> u32 {
    unpack(ud).2
}

fn unpack(ud: u64) -> (u64, u32, u32) {
    (ud >> 56, ud as u32, ((ud >> 32) & 0xff_ffff) as u32)
}

/// A receive of at most `buf_size / COALESCE_DIVISOR` bytes is copied onto
/// the previous receive's buffer when it fits there (not when the ring
/// consumes buffers incrementally: the kernel then packs receives into
/// shared buffers itself, and the previous buffer's tail may be the kernel's).
const COALESCE_DIVISOR: u32 = 4;

#[derive(Clone, Copy, Debug)]
struct RxSeg {
    buf: u32,
    off: u32,
    len: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecvState {
    Idle,
    Armed,
    Cancelling,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Closing {
    No,
    /// Stop reading; close once all output is sent.
    Graceful,
    /// Shut the socket down now; drop unsent output.
    Hard,
}

struct Conn {
    fd: RawFd,
    gen: u32,
    /// Index of the listener the connection was accepted on.
    listener: u32,
    /// The peer's address is a loopback one.
    peer_loopback: bool,
    /// Its addresses, read at accept.
    addrs: crate::batch::ConnAddrs,
    open: bool,
    rx: VecDeque<RxSeg>,
    rx_bytes: usize,
    /// When bytes last arrived or were sent (or it was accepted), to the loop's turn.
    active: Instant,
    /// The service's last [`Reply::wanted`]: bytes to hold before it sees the connection again.
    rx_wanted: usize,
    recv: RecvState,
    starved: bool,
    peer_eof: bool,
    closing: Closing,
    shut: bool,
    /// Ticks seen since the half-close of a graceful close (`None`: not lingering).
    linger_ticks: Option<u8>,
    touched: bool,
    /// The service asked to see the connection although no new bytes came.
    forced: bool,
    dirty: bool,
    pending: Output,
    inflight: Output,
    /// Send cursor in `inflight`: part index and offset inside it.
    cur_part: usize,
    cur_off: u32,
    send_inflight: bool,
    msg: Box<libc::msghdr>,
    iov: Vec<libc::iovec>,
}

impl Conn {
    fn new() -> Conn {
        // SAFETY: msghdr is plain data; all-zero is a valid empty header.
        let msg: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        Conn {
            fd: -1,
            gen: 0,
            listener: 0,
            peer_loopback: false,
            addrs: crate::batch::ConnAddrs::default(),
            open: false,
            rx: VecDeque::new(),
            rx_bytes: 0,
            active: Instant::now(),
            rx_wanted: 0,
            recv: RecvState::Idle,
            starved: false,
            peer_eof: false,
            closing: Closing::No,
            shut: false,
            linger_ticks: None,
            touched: false,
            forced: false,
            dirty: false,
            pending: Output::new(),
            inflight: Output::new(),
            cur_part: 0,
            cur_off: 0,
            send_inflight: false,
            msg,
            iov: Vec::with_capacity(MAX_IOV),
        }
    }

    fn id(&self, slot: u32) -> ConnId {
        ConnId { slot, generation: self.gen }
    }

    fn tx_bytes(&self) -> usize {
        self.pending.len_bytes() + self.inflight.len_bytes()
    }

    /// Unconsumed bytes the connection may hold: the configured bound, or the service's grant.
    fn rx_bound(&self, max_rx_bytes: usize) -> usize {
        max_rx_bytes.max(self.rx_wanted)
    }
}

struct Loop<'a, S: BufferSource, V: Service<S>> {
    cfg: &'a Config,
    src: &'a mut S,
    svc: &'a mut V,
    stats: &'a mut Stats,
    uring: IoUring,
    bufring: BufRing,
    listen_fds: Vec<RawFd>,
    stop_fd: RawFd,
    stop_buf: Box<u64>,
    mode: RecvMode,
    conns: Vec<Conn>,
    free_slots: Vec<u32>,
    touched: Vec<u32>,
    dirty: Vec<u32>,
    starved: Vec<u32>,
    batch: Batch,
    cqes: Vec<(u64, i32, u32)>,
    /// Whether listener `i`'s multishot accept is armed.
    accept_armed: Vec<bool>,
    tick_armed: bool,
    /// Buffers held by all receive queues (one per segment).
    rx_buffers: u64,
    /// The time of this turn's completions (read once per drain).
    now: Instant,
    tick_ts: Box<types::Timespec>,
    /// The service's timer: the deadline armed and the generation in its user data.
    timer: Option<(Instant, u32)>,
    timer_gen: u32,
    timer_ts: Box<types::Timespec>,
    /// Connections the service asked to see again (scratch).
    wakes: Vec<ConnId>,
    stopping: bool,
    fatal: Option<io::Error>,
    /// Sends submitted since the last wait (each a completion to come, and, from a closed-loop
    /// client, a request).
    sends_since_wait: u32,
    /// The kernel supports `min_wait_usec` (Linux 6.12).
    min_wait: bool,
    /// The fd a poll request is armed on for the service ([`Service::watch`]), and that
    /// request's generation.
    watch: Option<(RawFd, u32)>,
    watch_gen: u32,
}

fn build_uring(sq_entries: u32) -> Result<(IoUring, bool), ServerError> {
    // The kernel takes at most 65,536 completion entries (`IORING_MAX_CQ_ENTRIES`); more
    // completions than that wait in its overflow list (`IORING_FEAT_NODROP`).
    let cq = (sq_entries * 4).min(65_536);
    let fast = IoUring::builder().setup_cqsize(cq).setup_single_issuer().setup_defer_taskrun().build(sq_entries);
    match fast {
        Ok(r) => Ok((r, true)),
        Err(_) => {
            let r = IoUring::builder().setup_cqsize(cq).build(sq_entries).map_err(ServerError::Setup)?;
            Ok((r, false))
        }
    }
}

impl<'a, S: BufferSource, V: Service<S>> Loop<'a, S, V> {
    fn new(
        cfg: &'a Config,
        listen_fds: Vec<RawFd>,
        stop_fd: RawFd,
        src: &'a mut S,
        svc: &'a mut V,
        stats: &'a mut Stats,
    ) -> Result<Self, ServerError> {
        // Per connection and iteration at most a receive, a cancel and a send are queued.
        let sq = (3 * cfg.max_connections as u64 + 16).next_power_of_two().clamp(256, 32768) as u32;
        let (uring, defer) = build_uring(sq)?;
        stats.defer_taskrun = defer;
        let mut bufring = BufRing::new(cfg.ring_entries, BGID).map_err(ServerError::Setup)?;
        bufring.register(&uring).map_err(ServerError::BufRing)?;
        stats.incremental_buffers = bufring.incremental();
        let mut lp = Loop {
            cfg,
            src,
            svc,
            stats,
            uring,
            bufring,
            accept_armed: vec![false; listen_fds.len()],
            listen_fds,
            stop_fd,
            stop_buf: Box::new(0),
            mode: cfg.recv_mode,
            conns: Vec::with_capacity(cfg.max_connections as usize),
            free_slots: Vec::new(),
            touched: Vec::new(),
            dirty: Vec::new(),
            starved: Vec::new(),
            batch: Batch::new(),
            cqes: Vec::with_capacity(sq as usize * 4),
            tick_armed: false,
            rx_buffers: 0,
            now: Instant::now(),
            tick_ts: Box::new(types::Timespec::new().nsec(LINGER_TICK_MS * 1_000_000)),
            timer: None,
            timer_gen: 0,
            timer_ts: Box::new(types::Timespec::new()),
            wakes: Vec::new(),
            stopping: false,
            fatal: None,
            sends_since_wait: 0,
            min_wait: false,
            watch: None,
            watch_gen: 0,
        };
        lp.min_wait = lp.uring.params().is_feature_min_timeout();
        lp.stats.min_wait_supported = lp.min_wait;
        if lp.bufring.refill(lp.src) == 0 {
            lp.bufring.unregister(&lp.uring).map_err(ServerError::BufRing)?;
            return Err(ServerError::NoBuffers);
        }
        Ok(lp)
    }

    fn push(&mut self, e: squeue::Entry) {
        loop {
            // SAFETY: every entry's pointers (msghdr, iovecs, stop buffer) stay valid until its
            // completion: they live in `Conn`s or boxes freed only after that completion.
            if unsafe { self.uring.submission().push(&e) }.is_ok() {
                return;
            }
            if let Err(err) = self.uring.submit() {
                if err.raw_os_error() != Some(libc::EBUSY) && err.raw_os_error() != Some(libc::EINTR) {
                    self.fatal = Some(err);
                    return;
                }
            }
        }
    }

    fn serve(&mut self) -> Result<(), ServerError> {
        self.arm_accepts();
        self.arm_stop();
        // Ask the service once before the first wait: a service with work of its own (a
        // replica's ticks) arms its first deadline here.
        self.run_wakeups();
        while !self.stopping {
            if self.arm_watch() {
                self.stats.watch_ready += 1;
                self.wait(Some(Duration::ZERO))?;
            } else {
                self.wait(None)?;
            }
            self.drain_cqes();
            if self.stopping {
                break;
            }
            self.refill();
            self.run_service();
            self.run_wakeups();
            self.refill();
            self.wake_starved();
            self.enforce_rx_budget();
            self.settle_dirty();
            self.arm_accepts();
            if !self.tick_armed && self.svc.limits().idle_timeout.is_some() {
                self.arm_tick();
            }
            if let Some(e) = self.fatal.take() {
                return Err(ServerError::Enter(e));
            }
        }
        Ok(())
    }

    /// Blocks until a completion arrives (or `timeout` passes); with a batch wait, see
    /// [`Config::batch_wait_us`].
    fn wait(&mut self, timeout: Option<Duration>) -> Result<(), ServerError> {
        let expected = std::mem::take(&mut self.sends_since_wait) as usize;
        if timeout.is_none() && self.cfg.busy_poll_us > 0 && self.poll_once()? {
            return Ok(());
        }
        let batch = timeout.is_none() && self.cfg.batch_wait_us > 0 && self.min_wait && expected > 0;
        // A general timeout is what makes the kernel, once the batch wait expired with nothing
        // arrived, sleep until the first completion rather than return empty-handed.
        let long = types::Timespec::new().sec(BATCH_GENERAL_TIMEOUT_S);
        let r = match timeout {
            None if batch => {
                self.stats.batch_waits += 1;
                let want = (2 * expected).min(self.uring.params().cq_entries() as usize / 2);
                let args = types::SubmitArgs::new().timespec(&long).min_wait_usec(self.cfg.batch_wait_us);
                self.uring.submitter().submit_with_args(want, &args)
            }
            None => self.uring.submit_and_wait(1),
            Some(t) => {
                let ts = types::Timespec::new().sec(t.as_secs()).nsec(t.subsec_nanos());
                let args = types::SubmitArgs::new().timespec(&ts);
                self.uring.submitter().submit_with_args(1, &args)
            }
        };
        self.stats.wakeups += 1;
        match r {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY | libc::ETIME)) => Ok(()),
            Err(e) => Err(ServerError::Enter(e)),
        }
    }

    /// Polls for completions for at most `busy_poll_us` without sleeping; true if some came.
    fn poll_once(&mut self) -> Result<bool, ServerError> {
        let budget = Duration::from_micros(self.cfg.busy_poll_us as u64);
        let start = Instant::now();
        let fd = self.uring.as_raw_fd();
        loop {
            // Submits what is queued and runs deferred task work, without waiting.
            let to_submit = self.uring.submission().len() as u32;
            // SAFETY: io_uring_enter on our ring with no argument pointer.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_uring_enter,
                    fd,
                    to_submit,
                    0u32,
                    IORING_ENTER_GETEVENTS,
                    std::ptr::null::<libc::c_void>(),
                    0usize,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if !matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY | libc::EAGAIN)) {
                    return Err(ServerError::Enter(e));
                }
            }
            if !self.uring.completion().is_empty() {
                self.stats.wakeups += 1;
                return Ok(true);
            }
            if start.elapsed() >= budget {
                return Ok(false);
            }
            std::hint::spin_loop();
        }
    }

    fn drain_cqes(&mut self) {
        let mut n = 0u64;
        self.now = Instant::now();
        loop {
            self.cqes.clear();
            self.cqes.extend(self.uring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            if self.cqes.is_empty() {
                break;
            }
            n += self.cqes.len() as u64;
            for i in 0..self.cqes.len() {
                let (ud, res, flags) = self.cqes[i];
                self.on_cqe(ud, res, flags);
            }
        }
        self.stats.cqes += n;
        self.stats.max_cqes_per_wakeup = self.stats.max_cqes_per_wakeup.max(n);
    }

    fn on_cqe(&mut self, ud: u64, res: i32, flags: u32) {
        let (op, slot, gen) = unpack(ud);
        match op {
            OP_ACCEPT => self.on_accept(slot, res, flags),
            OP_RECV => self.on_recv(slot, gen, res, flags),
            OP_SEND => self.on_send(slot, gen, res),
            OP_CANCEL => {}
            OP_STOP => self.stopping = true,
            OP_TICK => self.on_tick(),
            OP_TIMER => {
                if self.timer.is_some_and(|(_, gen)| gen & 0xff_ffff == gen_of(ud)) {
                    self.timer = None;
                }
            }
            OP_WATCH => {
                if self.watch.is_some_and(|(_, gen)| gen & 0xff_ffff == gen_of(ud)) {
                    self.watch = None;
                    self.stats.watch_wakeups += 1;
                }
            }
            _ => panic!("completion with unknown user_data {ud:#x}"),
        }
    }

    /// Arms the multishot accept of every listener that has none armed.
    fn arm_accepts(&mut self) {
        for i in 0..self.listen_fds.len() {
            if self.accept_armed[i] {
                continue;
            }
            let e = opcode::AcceptMulti::new(types::Fd(self.listen_fds[i]))
                .flags(libc::SOCK_CLOEXEC)
                .build()
                .user_data(user_data(OP_ACCEPT, i as u32, 0));
            self.push(e);
            self.accept_armed[i] = true;
        }
    }

    fn arm_stop(&mut self) {
        let buf: *mut u64 = &mut *self.stop_buf;
        let e = opcode::Read::new(types::Fd(self.stop_fd), buf.cast(), 8).build().user_data(user_data(OP_STOP, 0, 0));
        self.push(e);
    }

    fn on_accept(&mut self, listener: u32, res: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.accept_armed[listener as usize] = false;
        }
        if res < 0 {
            return; // e.g. ECANCELED at shutdown, or EMFILE: re-armed after this iteration.
        }
        let fd = res;
        if self.stopping {
            // SAFETY: a fresh fd the kernel gave us.
            unsafe { libc::close(fd) };
            return;
        }
        let open = self.conns.len() - self.free_slots.len();
        let limit = self.svc.limits().max_clients.min(self.cfg.max_connections);
        let slot = if open >= limit as usize {
            None
        } else if let Some(s) = self.free_slots.pop() {
            Some(s)
        } else if self.conns.len() < self.cfg.max_connections as usize {
            self.conns.push(Conn::new());
            Some(self.conns.len() as u32 - 1)
        } else {
            None
        };
        let slot = match slot {
            Some(s) => s,
            None => {
                self.stats.rejected += 1;
                if let Some(bytes) = self.cfg.reject_reply.get(listener as usize).filter(|b| !b.is_empty()) {
                    // SAFETY: a fresh fd the kernel gave us; `bytes` outlives the call.
                    unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
                }
                // SAFETY: as above.
                unsafe { libc::close(fd) };
                return;
            }
        };
        if self.cfg.tcp_nodelay {
            let one: libc::c_int = 1;
            // SAFETY: valid fd and option pointer; failure is harmless (not a TCP socket).
            unsafe {
                libc::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, (&one as *const libc::c_int).cast(), 4)
            };
        }
        let c = &mut self.conns[slot as usize];
        assert!(!c.open, "accept into an open slot {slot}");
        assert!(c.rx.is_empty() && c.pending.is_empty() && c.inflight.is_empty());
        c.fd = fd;
        c.listener = listener;
        c.addrs = conn_addrs(fd);
        c.peer_loopback = c.addrs.peer.is_some_and(|a| is_loopback(a.ip()));
        c.open = true;
        c.rx_bytes = 0;
        c.active = self.now;
        c.rx_wanted = 0;
        c.recv = RecvState::Idle;
        c.starved = false;
        c.peer_eof = false;
        c.closing = Closing::No;
        c.shut = false;
        c.linger_ticks = None;
        c.cur_part = 0;
        c.cur_off = 0;
        c.send_inflight = false;
        self.stats.accepted += 1;
        self.mark_dirty(slot);
    }

    fn mark_dirty(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        if !c.dirty {
            c.dirty = true;
            self.dirty.push(slot);
        }
    }

    fn mark_touched(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        if !c.touched {
            c.touched = true;
            self.touched.push(slot);
        }
    }

    fn arm_recv(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        assert_eq!(c.recv, RecvState::Idle);
        let ud = user_data(OP_RECV, slot, c.gen);
        let fd = types::Fd(c.fd);
        let e = match self.mode {
            RecvMode::Multishot => opcode::RecvMulti::new(fd, self.bufring.bgid()).build(),
            RecvMode::SingleShot => opcode::Recv::new(fd, std::ptr::null_mut(), self.src.buf_size())
                .buf_group(self.bufring.bgid())
                .build()
                .flags(squeue::Flags::BUFFER_SELECT),
        };
        c.recv = RecvState::Armed;
        self.stats.recv_arms += 1;
        self.push(e.user_data(ud));
    }

    fn cancel_recv(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        assert_eq!(c.recv, RecvState::Armed);
        c.recv = RecvState::Cancelling;
        let target = user_data(OP_RECV, slot, c.gen);
        self.push(opcode::AsyncCancel::new(target).build().user_data(user_data(OP_CANCEL, slot, 0)));
    }

    fn on_recv(&mut self, slot: u32, gen: u32, res: i32, flags: u32) {
        let c = &mut self.conns[slot as usize];
        assert!(c.open, "receive completion on closed slot {slot}");
        assert_eq!(c.gen & 0xff_ffff, gen, "receive completion of an older connection");
        if !cqueue::more(flags) {
            c.recv = RecvState::Idle;
        }
        // The buffer, the offset the bytes start at, and whether this completion hands over a
        // reference on it (the ring's). Incremental consumption: a buffer the kernel keeps
        // (`buffer_more`) stays the ring's, and the bytes take a reference only if they become a
        // segment of their own; a completion with no bytes consumed none of the buffer, which
        // stays in the ring.
        let incremental = self.bufring.incremental();
        let buf = match cqueue::buffer_select(flags) {
            Some(bid) if incremental => (res > 0).then(|| {
                let more = cqueue::buffer_more(flags);
                let (id, off) = self.bufring.part(bid, res as u32, more);
                (id, off, !more)
            }),
            Some(bid) => Some((self.bufring.take(bid), 0, true)),
            None => None,
        };
        if res > 0 {
            c.active = self.now;
            let (id, off, owned) = buf.expect("receive completion with data but no buffer");
            assert!(off + res as u32 <= self.src.buf_size(), "receive past its buffer's end");
            self.stats.recvs += 1;
            self.stats.bytes_received += res as u64;
            let len = res as u32;
            let size = self.src.buf_size();
            // Whether this receive joins the connection's last segment. Incremental: when it
            // goes on where that one ended, in the same buffer (no other receive came between),
            // with no copy. Otherwise a small receive is copied onto the tail of the previous
            // one's buffer. Either way a peer sending a few bytes at a time leaves one segment,
            // not one per receive (each holding a buffer, without incremental consumption, and
            // draining the ring: every half-received request pins its buffers).
            let joins = |l: &RxSeg| {
                if incremental {
                    l.buf == id && l.off + l.len == off
                } else {
                    len <= size / COALESCE_DIVISOR && l.off + l.len + len <= size
                }
            };
            if c.closing != Closing::No {
                if owned {
                    self.src.release(id); // unread input of a closing connection is discarded
                }
            } else if let Some(last) = c.rx.back_mut().filter(|l| joins(l)) {
                if !incremental {
                    // The tail past `off + len` was never handed out: the kernel wrote this
                    // buffer only up to there, and the buffer is held by this receive queue.
                    // SAFETY: both buffers are held (the new one by this completion, the old
                    // one by `rx`), distinct, and the copy stays within each (`off + len + len
                    // ≤ size` checked by `joins`).
                    unsafe {
                        std::ptr::copy_nonoverlapping(self.src.ptr(id), self.src.ptr(last.buf).add((last.off + last.len) as usize), len as usize);
                    }
                }
                last.len += len;
                c.rx_bytes += res as usize;
                if owned {
                    self.src.release(id); // the segment holds the buffer it joined
                }
                self.stats.coalesced += 1;
                self.mark_touched(slot);
            } else {
                if !owned {
                    self.src.retain(id);
                }
                c.rx.push_back(RxSeg { buf: id, off, len });
                c.rx_bytes += res as usize;
                self.rx_buffers += 1;
                self.mark_touched(slot);
            }
        } else {
            if let Some((id, _, true)) = buf {
                self.src.release(id);
            }
            match -res {
                0 => {
                    c.peer_eof = true;
                    self.mark_touched(slot);
                }
                libc::ENOBUFS => {
                    self.stats.enobufs += 1;
                    if !c.starved {
                        c.starved = true;
                        self.starved.push(slot);
                    }
                }
                libc::ECANCELED => {}
                libc::EINVAL if self.mode == RecvMode::Multishot => {
                    self.mode = RecvMode::SingleShot;
                    self.stats.multishot_fallback = true;
                }
                _ => {
                    if c.closing != Closing::Hard {
                        c.closing = Closing::Hard;
                    }
                }
            }
        }
        self.mark_dirty(slot);
    }

    fn on_send(&mut self, slot: u32, gen: u32, res: i32) {
        let c = &mut self.conns[slot as usize];
        assert!(c.open, "send completion on closed slot {slot}");
        assert_eq!(c.gen & 0xff_ffff, gen, "send completion of an older connection");
        assert!(c.send_inflight);
        c.send_inflight = false;
        self.stats.sends += 1;
        self.mark_dirty(slot);
        let c = &mut self.conns[slot as usize];
        if res < 0 {
            c.closing = Closing::Hard;
            return;
        }
        self.stats.bytes_sent += res as u64;
        c.active = self.now;
        let mut left = res as u32;
        let parts = c.inflight.parts();
        while left > 0 {
            let plen = parts[c.cur_part].len() - c.cur_off;
            if left >= plen {
                left -= plen;
                c.cur_part += 1;
                c.cur_off = 0;
            } else {
                c.cur_off += left;
                left = 0;
            }
        }
        if c.cur_part == parts.len() {
            release_parts(self.src, &c.inflight, 0);
            c.inflight.clear();
            c.cur_part = 0;
            c.cur_off = 0;
        } else {
            self.stats.partial_sends += 1;
        }
    }

    fn submit_send(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        assert!(!c.send_inflight);
        c.iov.clear();
        let mut off = c.cur_off;
        for p in &c.inflight.parts()[c.cur_part..] {
            if c.iov.len() == MAX_IOV {
                break;
            }
            let (base, len) = match *p {
                Part::Inline { start, len } => (c.inflight.inline_bytes(start, len).as_ptr(), len),
                Part::Buf { buf, offset, len } => (self.src.ptr(buf).cast_const().wrapping_add(offset as usize), len),
            };
            c.iov.push(libc::iovec {
                iov_base: base.wrapping_add(off as usize) as *mut libc::c_void,
                iov_len: (len - off) as usize,
            });
            off = 0;
        }
        assert!(!c.iov.is_empty());
        c.msg.msg_iov = c.iov.as_mut_ptr();
        c.msg.msg_iovlen = c.iov.len();
        c.send_inflight = true;
        self.sends_since_wait += 1;
        let e = opcode::SendMsg::new(types::Fd(c.fd), &*c.msg)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
            .user_data(user_data(OP_SEND, slot, c.gen));
        self.push(e);
    }

    fn refill(&mut self) {
        self.stats.ring_refills += self.bufring.refill(self.src) as u64;
    }

    fn wake_starved(&mut self) {
        if self.bufring.available() == 0 || self.starved.is_empty() {
            return;
        }
        let mut starved = std::mem::take(&mut self.starved);
        for slot in starved.drain(..) {
            self.conns[slot as usize].starved = false;
            self.mark_dirty(slot);
        }
        self.starved = starved;
    }

    fn run_service(&mut self) {
        let mut touched = std::mem::take(&mut self.touched);
        let batch = &mut self.batch;
        batch.used = 0;
        batch.segs.clear();
        for &slot in &touched {
            let c = &mut self.conns[slot as usize];
            c.touched = false;
            let forced = std::mem::take(&mut c.forced);
            if !c.open || c.closing != Closing::No || (c.rx_bytes == 0 && !forced) {
                continue;
            }
            if c.rx_bytes < c.rx_wanted && !c.peer_eof {
                continue; // the service cannot progress yet: not worth a parse
            }
            let seg_start = batch.segs.len();
            // One allocation for a long request's many segments (a 512 MiB
            // value arrives in 262,144 buffers), not a doubling series.
            batch.segs.reserve(c.rx.len());
            for s in &c.rx {
                // SAFETY: the loop holds a reference on `s.buf` (the receive queue's) until
                // after `handle` returns and `segs` is cleared; the range is inside the buffer.
                let bytes: &'static [u8] =
                    unsafe { std::slice::from_raw_parts(self.src.ptr(s.buf).add(s.off as usize), s.len as usize) };
                batch.segs.push(Segment { buf: s.buf, offset: s.off, bytes });
            }
            if batch.entries.len() == batch.used {
                batch.entries.push(Entry {
                    conn: c.id(slot),
                    listener: 0,
                    peer_loopback: false,
                    seg_start: 0,
                    seg_end: 0,
                    peer_closed: false,
                    unsent_bytes: 0,
                    addrs: crate::batch::ConnAddrs::default(),
                    len_bytes: 0,
                    parts_before: 0,
                    reply: Reply::default(),
                });
            }
            let e = &mut batch.entries[batch.used];
            e.conn = c.id(slot);
            e.listener = c.listener;
            e.peer_loopback = c.peer_loopback;
            e.unsent_bytes = c.tx_bytes();
            e.addrs = c.addrs;
            e.seg_start = seg_start;
            e.seg_end = batch.segs.len();
            e.peer_closed = c.peer_eof;
            e.len_bytes = c.rx_bytes;
            e.reply.consumed = 0;
            e.reply.close = false;
            e.reply.abort = false;
            e.reply.wanted = 0;
            e.reply.held = false;
            std::mem::swap(&mut e.reply.output, &mut c.pending);
            e.parts_before = e.reply.output.parts().len();
            batch.used += 1;
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(slot);
            }
        }
        touched.clear();
        self.touched = touched;
        if self.batch.used == 0 {
            return;
        }
        self.svc.handle(&mut self.batch, self.src);
        self.stats.batches += 1;
        self.stats.batch_entries += self.batch.used as u64;
        // No segment slice may survive past this point: consumed buffers are released below.
        self.batch.segs.clear();
        for i in 0..self.batch.used {
            self.apply_reply(i);
        }
    }

    fn apply_reply(&mut self, i: usize) {
        let e = &mut self.batch.entries[i];
        let slot = e.conn.slot;
        let c = &mut self.conns[slot as usize];
        assert_eq!(c.gen, e.conn.generation);
        let buf_size = self.src.buf_size();
        // The service may only append: earlier parts hold references taken in earlier batches.
        assert!(e.reply.output.parts().len() >= e.parts_before, "service replaced queued output");
        for p in &e.reply.output.parts()[e.parts_before..] {
            if let Part::Buf { buf, offset, len } = *p {
                assert!(offset as u64 + len as u64 <= buf_size as u64, "output part past buffer end");
                self.src.retain(buf);
            }
        }
        std::mem::swap(&mut e.reply.output, &mut c.pending);
        assert!(e.reply.output.is_empty(), "the batch's spare output was written to");
        assert!(e.reply.consumed <= e.len_bytes, "service consumed {} of {} bytes", e.reply.consumed, e.len_bytes);
        let mut left = e.reply.consumed;
        c.rx_bytes -= left;
        while left > 0 {
            let s = c.rx.front_mut().expect("consumed past the receive queue");
            if left >= s.len as usize {
                left -= s.len as usize;
                let id = s.buf;
                c.rx.pop_front();
                self.rx_buffers -= 1;
                self.src.release(id);
            } else {
                s.off += left as u32;
                s.len -= left as u32;
                left = 0;
            }
        }
        if e.reply.abort {
            c.closing = Closing::Hard;
        }
        if e.reply.close && c.closing == Closing::No {
            c.closing = Closing::Graceful;
        }
        c.rx_wanted = e.reply.wanted;
        if c.closing == Closing::No && !e.reply.held && c.rx_bytes >= c.rx_bound(self.cfg.max_rx_bytes) {
            c.closing = Closing::Hard;
            self.stats.rx_overflow_closes += 1;
        }
    }

    fn settle_dirty(&mut self) {
        let mut dirty = std::mem::take(&mut self.dirty);
        // `settle` may dirty other slots only through completions, which are not read here.
        for &slot in &dirty {
            self.conns[slot as usize].dirty = false;
            self.settle(slot);
        }
        dirty.clear();
        self.dirty = dirty;
    }

    fn settle(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        if !c.open {
            return;
        }
        if c.closing == Closing::No && c.peer_eof {
            c.closing = Closing::Graceful;
        }
        if c.closing == Closing::Hard {
            if !c.shut {
                c.shut = true;
                // SAFETY: our open socket; makes in-flight operations complete.
                unsafe { libc::shutdown(c.fd, libc::SHUT_RDWR) };
            }
            release_parts(self.src, &c.pending, 0);
            c.pending.clear();
        }
        if !c.send_inflight && c.closing != Closing::Hard {
            if c.inflight.is_empty() && !c.pending.is_empty() {
                std::mem::swap(&mut c.inflight, &mut c.pending);
                c.cur_part = 0;
                c.cur_off = 0;
            }
            if !c.inflight.is_empty() {
                self.submit_send(slot);
            }
        }
        let c = &mut self.conns[slot as usize];
        match c.closing {
            Closing::Hard => {
                if c.recv == RecvState::Armed && self.mode == RecvMode::Multishot {
                    self.cancel_recv(slot);
                }
                let c = &self.conns[slot as usize];
                if c.recv == RecvState::Idle && !c.send_inflight {
                    self.finish_close(slot);
                }
                return;
            }
            Closing::Graceful => {
                self.settle_graceful(slot);
                return;
            }
            Closing::No => {}
        }
        let want_read = c.rx_bytes < c.rx_bound(self.cfg.max_rx_bytes) && c.tx_bytes() < self.cfg.max_tx_bytes;
        match (want_read, c.recv) {
            (true, RecvState::Idle) if !c.starved => self.arm_recv(slot),
            (false, RecvState::Armed) if self.mode == RecvMode::Multishot => {
                self.stats.read_pauses += 1;
                self.cancel_recv(slot);
            }
            _ => {}
        }
    }

    /// A graceful close: send everything queued, then half-close (FIN) and keep reading,
    /// discarding, until the peer closes too or the linger time passes, so that a peer still
    /// sending (e.g. the body of a refused request) reads the response instead of a reset.
    fn settle_graceful(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        let drained = c.tx_bytes() == 0 && !c.send_inflight;
        if drained && c.peer_eof {
            if c.recv == RecvState::Idle {
                self.finish_close(slot);
            } else if c.recv == RecvState::Armed && self.mode == RecvMode::Multishot {
                self.cancel_recv(slot);
            }
            return;
        }
        if drained && c.linger_ticks.is_none() {
            c.linger_ticks = Some(0);
            // SAFETY: our open socket; all output is sent, so the FIN follows it.
            unsafe { libc::shutdown(c.fd, libc::SHUT_WR) };
            if !self.tick_armed {
                self.arm_tick();
            }
        }
        let c = &self.conns[slot as usize];
        if !c.peer_eof && c.recv == RecvState::Idle && !c.starved {
            self.arm_recv(slot);
        }
    }

    /// Shows the service the connections it asks for, again until it asks for none, then
    /// arms the timer for its deadline.
    fn run_wakeups(&mut self) {
        loop {
            let mut wakes = std::mem::take(&mut self.wakes);
            wakes.clear();
            let deadline = self.svc.wakeups(&mut wakes);
            let mut any = false;
            for id in &wakes {
                let Some(c) = self.conns.get_mut(id.slot as usize) else { continue };
                if !c.open || c.gen != id.generation || c.closing != Closing::No {
                    continue;
                }
                c.forced = true;
                any = true;
                self.mark_touched(id.slot);
            }
            self.wakes = wakes;
            if !any {
                self.arm_timer(deadline);
                return;
            }
            self.run_service();
        }
    }

    /// Asks the service what else to wait on and keeps a poll request armed on it; true if the
    /// service has work now (the loop must not block).
    fn arm_watch(&mut self) -> bool {
        let want = match self.svc.watch() {
            Watch::Ready => return true,
            Watch::Nothing => None,
            Watch::Fd(fd) => Some(fd),
        };
        if self.watch.map(|(fd, _)| fd) == want {
            return false;
        }
        if let Some((_, gen)) = self.watch.take() {
            let target = user_data(OP_WATCH, 0, gen);
            self.push(opcode::PollRemove::new(target).build().user_data(user_data(OP_CANCEL, 0, 0)));
        }
        if let Some(fd) = want {
            self.watch_gen = self.watch_gen.wrapping_add(1);
            let gen = self.watch_gen;
            let e = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32).build().user_data(user_data(OP_WATCH, 0, gen));
            self.push(e);
            self.watch = Some((fd, gen));
        }
        false
    }

    /// Keeps a timeout armed for `deadline` unless one is armed for no later.
    fn arm_timer(&mut self, deadline: Option<Instant>) {
        let Some(deadline) = deadline else { return };
        if self.timer.is_some_and(|(armed, _)| armed <= deadline) {
            return;
        }
        if let Some((_, gen)) = self.timer.take() {
            let target = user_data(OP_TIMER, 0, gen);
            self.push(opcode::TimeoutRemove::new(target).build().user_data(user_data(OP_CANCEL, 0, 0)));
        }
        self.timer_gen = self.timer_gen.wrapping_add(1);
        let gen = self.timer_gen;
        let wait = deadline.saturating_duration_since(Instant::now());
        *self.timer_ts = types::Timespec::new().sec(wait.as_secs()).nsec(wait.subsec_nanos());
        let ts: *const types::Timespec = &*self.timer_ts;
        self.push(opcode::Timeout::new(ts).build().user_data(user_data(OP_TIMER, 0, gen)));
        self.timer = Some((deadline, gen));
    }

    fn arm_tick(&mut self) {
        self.tick_armed = true;
        let ts: *const types::Timespec = &*self.tick_ts;
        self.push(opcode::Timeout::new(ts).build().user_data(user_data(OP_TICK, 0, 0)));
    }

    /// Every `LINGER_TICK_MS` while connections linger: those that saw two ticks are closed.
    fn on_tick(&mut self) {
        self.tick_armed = false;
        let mut lingering = false;
        for slot in 0..self.conns.len() as u32 {
            let c = &mut self.conns[slot as usize];
            if !c.open || c.closing != Closing::Graceful {
                continue;
            }
            if let Some(t) = c.linger_ticks.as_mut() {
                *t += 1;
                if *t >= 2 {
                    c.closing = Closing::Hard;
                    self.stats.linger_timeouts += 1;
                } else {
                    lingering = true;
                }
                self.mark_dirty(slot);
            }
        }
        self.close_idle();
        if (lingering || self.svc.limits().idle_timeout.is_some()) && !self.stopping {
            self.arm_tick();
        }
    }

    /// Closes (gracefully) the connections that neither received nor sent a byte for longer
    /// than the service's idle timeout, where the service agrees ([`Service::idle_closable`]:
    /// Redis spares blocked clients and subscribers). Checked every tick.
    fn close_idle(&mut self) {
        let Some(idle) = self.svc.limits().idle_timeout else { return };
        let now = Instant::now();
        for slot in 0..self.conns.len() {
            let c = &self.conns[slot];
            if !c.open || c.closing != Closing::No || now.saturating_duration_since(c.active) <= idle {
                continue;
            }
            if !self.svc.idle_closable(c.id(slot as u32)) {
                continue;
            }
            self.conns[slot].closing = Closing::Graceful;
            self.stats.idle_closes += 1;
            self.mark_dirty(slot as u32);
        }
    }

    /// While all receive queues together hold more than `rx_budget_buffers` (not counting
    /// connections already closing, whose buffers return as they close), closes the open
    /// connection that holds the most, at once (Redis 7.0's client eviction). A pool that
    /// cannot give every connection `max_rx_bytes` so keeps buffers to receive with: otherwise
    /// half-received requests could pin every buffer and no request could complete.
    fn enforce_rx_budget(&mut self) {
        let budget = u64::from(self.cfg.rx_budget_buffers);
        if self.rx_buffers <= budget {
            return;
        }
        let closing: u64 = self.conns.iter().filter(|c| c.open && c.closing != Closing::No).map(|c| c.rx.len() as u64).sum();
        let mut held = self.rx_buffers - closing;
        while held > budget {
            let largest = (0..self.conns.len())
                .filter(|&i| self.conns[i].open && self.conns[i].closing == Closing::No && !self.conns[i].rx.is_empty())
                .max_by_key(|&i| self.conns[i].rx.len());
            let Some(slot) = largest else { break };
            let c = &mut self.conns[slot];
            held -= c.rx.len() as u64;
            c.closing = Closing::Hard;
            self.stats.rx_evictions += 1;
            self.mark_dirty(slot as u32);
        }
    }

    fn finish_close(&mut self, slot: u32) {
        let c = &mut self.conns[slot as usize];
        assert!(c.open && c.recv == RecvState::Idle && !c.send_inflight);
        // SAFETY: our socket; no operation is in flight on it.
        unsafe { libc::close(c.fd) };
        c.fd = -1;
        while let Some(s) = c.rx.pop_front() {
            self.rx_buffers -= 1;
            self.src.release(s.buf);
        }
        c.rx_bytes = 0;
        release_parts(self.src, &c.pending, 0);
        c.pending.clear();
        release_parts(self.src, &c.inflight, 0);
        c.inflight.clear();
        c.open = false;
        let id = c.id(slot);
        c.gen = c.gen.wrapping_add(1);
        self.free_slots.push(slot);
        self.stats.closed += 1;
        self.svc.closed(id, self.src);
    }

    /// Closes every connection, waits for their operations, and returns all ring buffers.
    fn shutdown(&mut self) -> Result<(), ServerError> {
        self.stopping = true;
        for i in 0..self.listen_fds.len() {
            if self.accept_armed[i] {
                let target = user_data(OP_ACCEPT, i as u32, 0);
                self.push(opcode::AsyncCancel::new(target).build().user_data(user_data(OP_CANCEL, 0, 0)));
            }
        }
        for slot in 0..self.conns.len() as u32 {
            if self.conns[slot as usize].open {
                self.conns[slot as usize].closing = Closing::Hard;
                self.settle(slot);
            }
        }
        let deadline = Instant::now() + Duration::from_millis(self.cfg.shutdown_timeout_ms as u64);
        let mut busy = self.conns.iter().filter(|c| c.open).count();
        while (busy > 0 || self.accept_armed.contains(&true)) && Instant::now() < deadline {
            self.wait(Some(Duration::from_millis(50)))?;
            self.drain_cqes();
            self.settle_dirty();
            busy = self.conns.iter().filter(|c| c.open).count();
        }
        self.bufring.unregister(&self.uring).map_err(ServerError::BufRing)?;
        if busy > 0 {
            return Err(ServerError::ShutdownTimeout(busy));
        }
        self.bufring.release_all(self.src);
        Ok(())
    }
}

fn release_parts<S: BufferSource>(src: &mut S, out: &Output, from: usize) {
    for p in &out.parts()[from..] {
        if let Part::Buf { buf, .. } = *p {
            src.release(buf);
        }
    }
}

/// Whether the peer of connected socket `fd` has a loopback address (false
/// if it cannot be read).
/// The socket's peer and local addresses (through `std`'s view of the descriptor, not closed).
fn conn_addrs(fd: RawFd) -> crate::batch::ConnAddrs {
    // SAFETY: `fd` is our open socket; the stream is never dropped, so it does not close it.
    let stream = std::mem::ManuallyDrop::new(unsafe { <std::net::TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd) });
    crate::batch::ConnAddrs { peer: stream.peer_addr().ok(), local: stream.local_addr().ok(), fd }
}

/// A loopback address (127.0.0.0/8, ::1, or a v4-mapped loopback): what Redis's protected
/// mode asks of the peer.
fn is_loopback(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
        std::net::IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}
