//! [`UcxTransport`]: the [`Transport`] seam over UCX. One transport is one
//! UCP context and one worker (single-thread mode), owned by the thread of
//! one event loop.
//!
//! How the pieces map onto UCP:
//! - connections are client-server endpoints (`ucp_ep_create` with a socket
//!   address, or with a connection request from `ucp_listener_create`), with
//!   peer error handling so that a lost peer surfaces as an error callback;
//! - RPCs and one-way messages are active messages on one id
//!   ([`wire::AM_ID`]): the AM header is our 24-byte framing plus the
//!   caller's header, the AM data is the payload. Data that arrives as rendezvous (`UCP_AM_RECV_ATTR_FLAG_RNDV`)
//!   is fetched with `ucp_am_recv_data_nbx` into a buffer of the announced
//!   size (bounded by [`Limits::max_payload_bytes`]);
//! - one-sided operations are `ucp_put_nbx`, `ucp_get_nbx`,
//!   `ucp_atomic_op_nbx` (64-bit) and `ucp_ep_flush_nbx`, against regions
//!   mapped with `ucp_mem_map` and keys packed with `ucp_rkey_pack`;
//! - `wait` is `ucp_worker_arm` + `poll(2)` on `ucp_worker_get_efd`.
//!
//! Invariants:
//! - Callbacks (connection request, endpoint error, active message) only
//!   append to the `Callbacks` queues behind a `RefCell` in a `Box` whose
//!   address is stable for the transport's life; everything else happens in
//!   `poll`, outside any callback. No borrow of it is held across a UCX call.
//! - A buffer handed to UCX lives in a `Pending` entry until its request
//!   completes; nothing is freed while UCX may still touch it (on drop the
//!   transport force-closes its endpoints, drains requests for a bounded
//!   number of progress rounds, and leaks whatever is still in flight).
//! - Every operation that took a window slot gives it back exactly once:
//!   at completion, at failure, or when its connection fails (then the late
//!   UCX completion finds a newer generation and is dropped).
//! - A send's slot is given back when it settles: once it and every message
//!   sent before it on the connection have completed locally
//!   (`UcxConn::unsettled` lists, in `seq` order, the messages not yet
//!   complete and the sends waiting behind them). Calls, replies and sends
//!   that complete at once with nothing unsettled record nothing.
//! - Over transports without native RMA or atomics (TCP; shared memory with
//!   memory UCX did not allocate) UCX emulates them with active messages, so
//!   the *target* must progress its worker for them to complete.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use ucx_sys as sys;

use crate::error::{
    AttachError, ConnectError, OpError, RegisterError, SetupError, Status, WaitError,
};
use crate::inproc::check_sizes;
use crate::seam::{
    check_range, AtomicOp, Completion, ConnId, Event, EventFd, Limits, LocalRegionId, Output, Reach,
    RegionDescriptor, RemoteRegionId, Request as RpcRequest, RequestId, Transport,
};
use crate::ucx::{
    Armed, Context, ContextConfig, Endpoint, Listener, MemRegion, Peer, Request, Rkey, Worker,
};
use crate::wire::{self, Answering, InOrder, Kind, OrderViolation, Window};

/// Progress rounds one `poll` makes at most (each handles a batch of events).
const PROGRESS_ROUNDS: usize = 64;

/// Consecutive `UCS_ERR_BUSY` from `ucp_worker_arm` after which `wait`
/// returns `true` and lets the caller poll.
const ARM_BUSY_ROUNDS: usize = 16;

/// Progress rounds, and time, `Drop` spends draining requests before
/// leaving closes to the worker's destruction and leaking the rest.
const DROP_DRAIN_ROUNDS: usize = 100_000;
const DROP_DRAIN_WAIT: Duration = Duration::from_millis(200);

/// Arrivals queued by the AM callback beyond which a message's connection
/// is ended (a peer that ignores its window cannot make us allocate
/// without bound).
const MAX_ARRIVALS: usize = 65_536;

/// Payload buffers kept for reuse at most: how many, and their bytes of
/// capacity together.
const SPARE_BUFFERS: usize = 64;
const SPARE_BYTES: usize = 32 << 20;

/// How a [`UcxTransport`] is set up.
#[derive(Clone, Debug)]
pub struct UcxConfig {
    /// UCX variables for this transport's context (`UCX_TLS` and others).
    pub context: ContextConfig,
    /// Bounds (both ends of a connection should use the same).
    pub limits: Limits,
    /// Ask UCX to detect peer failure (`UCP_ERR_HANDLING_MODE_PEER`), so a
    /// crashed peer surfaces as [`Event::Disconnected`]. UCX 1.13 cannot do
    /// this over shared memory and then refuses to connect, so it must be
    /// off there; a peer that vanishes is then noticed only if the
    /// connection manager reports it.
    pub peer_failure_detection: bool,
}

impl Default for UcxConfig {
    fn default() -> UcxConfig {
        UcxConfig {
            context: ContextConfig::default(),
            limits: Limits::default(),
            peer_failure_detection: true,
        }
    }
}

impl UcxConfig {
    /// Default limits over the given `UCX_TLS` (e.g. `"tcp"`, `"rc,ud"`),
    /// with peer failure detection on.
    pub fn tls(tls: &str) -> UcxConfig {
        UcxConfig {
            context: ContextConfig::tls(tls),
            ..UcxConfig::default()
        }
    }

    /// Shared memory between processes (or workers) of one host: `UCX_TLS=sm,tcp`
    /// without peer failure detection. In UCX 1.13 client-server connection
    /// set-up needs the TCP connection manager, which needs `tcp` in
    /// `UCX_TLS`; the data lanes still come out as shared memory (sysv/posix
    /// active messages; with one-sided access on, cma zero-copy RMA;
    /// [`UcxTransport::describe`] shows them). Peer failure detection must
    /// be off: UCX 1.13 offers it on no shared-memory transport and would
    /// fall back to TCP lanes.
    pub fn shared_memory() -> UcxConfig {
        UcxConfig {
            context: ContextConfig::tls("sm,tcp"),
            peer_failure_detection: false,
            ..UcxConfig::default()
        }
    }

    /// Turns one-sided access on: UCX's RMA and atomic features, and its
    /// zero-copy transports (cma, knem, xpmem over shared memory; tcp's
    /// put). Over UCX 1.13 a peer's one-sided operation is then served at
    /// whatever address it names, unchecked against any registration
    /// (software RMA, tcp's put, cma), so a peer can reach the whole process
    /// ([`Reach::Process`]). Off by default: then nothing can be registered,
    /// and UCX serves no peer's put, get or atomic.
    pub fn with_one_sided(mut self) -> UcxConfig {
        self.context.rma = true;
        self
    }

    /// Adds a `UCX_*` variable (named without the prefix) for this context.
    pub fn with_var(mut self, name: &str, value: &str) -> UcxConfig {
        self.context
            .vars
            .push((name.to_string(), value.to_string()));
        self
    }
}

/// The context configuration actually used: with one-sided access off,
/// the transports that let a peer write our memory at an address of its
/// choosing are left out. UCX still serves them when the RMA feature is
/// off, since they sit below it: cma (`process_vm_writev` into our pid),
/// knem and xpmem over shared memory, and tcp's zero-copy put (whose
/// receive side `uct_tcp_ep_handle_put_req` writes wherever the header
/// says). Data then moves by active messages alone.
fn effective_context(config: &ContextConfig) -> ContextConfig {
    let mut context = config.clone();
    if context.rma {
        return context;
    }
    context.tls = Some(match &context.tls {
        Some(tls) => without_zero_copy(tls),
        None => "^cma,knem,xpmem".to_string(),
    });
    // Transport variables go by their field name (tcp's is `PUT_ENABLE`;
    // `UCX_TCP_PUT_ENABLE` in the environment).
    context.vars.push(("PUT_ENABLE".to_string(), "n".to_string()));
    context
}

/// `UCX_TLS` without the shared-memory zero-copy transports: the aliases
/// that include them (`sm`, `shm`, `mm`) become the transports that only
/// carry messages (`posix`, `sysv`); `all` and a negated list (`^…`) get
/// them added to the negation.
fn without_zero_copy(tls: &str) -> String {
    const ZERO_COPY: [&str; 3] = ["cma", "knem", "xpmem"];
    let tls = tls.trim();
    let (negated, list) = match tls.strip_prefix('^') {
        Some(list) => (true, list),
        None if tls == "all" => (true, ""),
        None => (false, tls),
    };
    let mut out: Vec<&str> = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match name {
            "sm" | "shm" | "mm" if !negated => out.extend(["posix", "sysv"]),
            zero_copy if !negated && ZERO_COPY.contains(&zero_copy) => {}
            other => out.push(other),
        }
    }
    if negated {
        out.extend(ZERO_COPY);
    }
    let mut unique: Vec<&str> = Vec::with_capacity(out.len());
    for name in out {
        if !unique.contains(&name) {
            unique.push(name);
        }
    }
    let list = unique.join(",");
    if negated {
        format!("^{list}")
    } else {
        list
    }
}

/// What the UCX callbacks hand to `poll`.
#[derive(Default)]
struct Callbacks {
    accepts: Vec<sys::ucp_conn_request_h>,
    failures: Vec<(usize, Status)>,
    arrivals: VecDeque<Arrival>,
    dropped: u64,
    /// Buffers to receive into (the AM callback copies eager data into one).
    spare: Spare,
}

/// Payload buffers for reuse: sent payloads UCX has released and buffers
/// callers [`recycle`](Transport::recycle)d. Receiving into a warm buffer
/// instead of a fresh allocation saves, per 64 KB message, a `brk`/`mmap`,
/// 16 page faults and a zero fill (measured: 14% of a bulk client's and 9%
/// of the server's CPU). Bounded by [`SPARE_BUFFERS`] and [`SPARE_BYTES`].
#[derive(Default)]
pub(crate) struct Spare {
    bufs: Vec<Vec<u8>>,
    bytes: usize,
}

impl Spare {
    /// An empty buffer with room for `len` bytes: a kept one that fits, or new.
    pub(crate) fn take(&mut self, len: usize) -> Vec<u8> {
        match self.bufs.iter().rposition(|b| b.capacity() >= len) {
            Some(at) => {
                let buf = self.bufs.swap_remove(at);
                self.bytes -= buf.capacity();
                buf
            }
            None => Vec::with_capacity(len),
        }
    }

    /// Keeps `buf` (emptied) unless the bounds say no; when full, a larger
    /// buffer displaces the smallest kept one.
    pub(crate) fn give(&mut self, mut buf: Vec<u8>) {
        let cap = buf.capacity();
        if cap == 0 || cap > SPARE_BYTES {
            return;
        }
        if self.bufs.len() >= SPARE_BUFFERS || self.bytes + cap > SPARE_BYTES {
            let smallest = (0..self.bufs.len()).min_by_key(|&i| self.bufs[i].capacity());
            match smallest {
                Some(i) if self.bufs[i].capacity() < cap => {
                    self.bytes -= self.bufs.swap_remove(i).capacity();
                }
                _ => return,
            }
            if self.bytes + cap > SPARE_BYTES {
                return;
            }
        }
        buf.clear();
        self.bytes += cap;
        self.bufs.push(buf);
    }
}

struct Arrival {
    ep: usize,
    header: Vec<u8>,
    data: ArrivalData,
}

enum ArrivalData {
    Eager(Vec<u8>),
    Rndv { desc: *mut c_void, len: usize },
}

struct UcxConn {
    // Field order is drop order: keys before the endpoint they were unpacked on.
    remotes: Vec<Remote>,
    ep: Option<Rc<Endpoint>>,
    window: Window,
    answering: Answering,
    /// The number of the next message we send on this connection.
    send_seq: u32,
    /// The peer's messages, handed on in the order it sent them.
    received: InOrder<Message>,
    /// Our messages not yet complete locally, and the sends behind them, in
    /// `seq` order. At most `window` calls and sends plus [`wire::MAX_WINDOW`]
    /// replies.
    unsettled: VecDeque<Unsettled>,
    /// Unique per transport: tells this connection from a later one that
    /// reuses its id, for receives that complete after it ended.
    epoch: u64,
    gone: bool,
}

/// A message we sent that holds back the settling of later sends.
struct Unsettled {
    seq: u32,
    /// Complete locally (only a send waits in the list once complete).
    done: bool,
    /// A send's slot in the window, given back when it settles.
    send: Option<u64>,
}

/// A whole received message waiting for its turn in [`UcxConn::received`].
struct Message {
    kind: Kind,
    call: u64,
    header: Vec<u8>,
    /// `None`: its rendezvous data could not be received.
    payload: Option<Vec<u8>>,
}

struct Remote {
    rkey: Rkey,
    addr: u64,
    len: u64,
}

struct Registered {
    mem: MemRegion,
    packed_rkey: Vec<u8>,
}

/// Buffers an atomic needs until completion (stable heap address).
struct AtomicBufs {
    operand: u64,
    reply: u64,
}

enum Pending {
    Op {
        conn: u32,
        call: u64,
        kind: OpKind,
    },
    /// A request, response or message UCX has not finished sending: the
    /// payload goes back to the spare buffers once UCX is done with it, and
    /// message `seq` of the connection of `epoch` is then complete locally.
    Sent {
        conn: u32,
        epoch: u64,
        seq: u32,
        /// The call's id for a request (its call fails if the send does).
        call: Option<u64>,
        _header: Vec<u8>,
        payload: Vec<u8>,
    },
    /// `buf` is empty until the receive completes: UCX fills its first
    /// `len` bytes of capacity. The message waits in its connection's
    /// `received` under `seq` (if the connection of `epoch` is still there).
    Recv {
        conn: u32,
        epoch: u64,
        seq: u32,
        kind: Kind,
        call: u64,
        header: Vec<u8>,
        buf: Vec<u8>,
        len: usize,
    },
    Close,
}

/// What starting a one-sided op needs: the endpoint, the call id of its
/// window slot, and (remote key index, absolute address) unless a flush.
type OneSided = (Rc<Endpoint>, u64, Option<(usize, u64)>);

enum OpKind {
    Put(Vec<u8>),
    Get(Vec<u8>),
    Atomic(Box<AtomicBufs>, bool),
    Flush,
}

/// The [`Transport`] over UCX. See the module docs.
pub struct UcxTransport {
    // Field order is drop order (after `Drop::drop` has closed endpoints and
    // drained requests): connections, pending buffers, registrations, the
    // listener, the worker, the context, and last the callback state the
    // worker's handlers point to.
    conns: Vec<Option<UcxConn>>,
    pending: Vec<(Request, Pending)>,
    regions: Vec<Option<Registered>>,
    listener: Option<Listener>,
    worker: Rc<Worker>,
    context: Rc<Context>,
    events: VecDeque<Event>,
    ep_conn: HashMap<usize, u32>,
    limits: Limits,
    peer_errors: bool,
    /// One-sided access is on ([`UcxConfig::with_one_sided`]).
    one_sided: bool,
    /// The last progress call did work (see [`Transport::progressed`]).
    progressed: bool,
    /// The epoch the next connection gets.
    next_epoch: u64,
    callbacks: Box<RefCell<Callbacks>>,
}

impl UcxTransport {
    /// Creates a transport (context + worker) configured by `config`.
    pub fn new(config: &UcxConfig) -> Result<UcxTransport, SetupError> {
        config.limits.check();
        let context = Context::new(&effective_context(&config.context))?;
        let worker = Worker::new(&context)?;
        let need = wire::FRAMING_BYTES + config.limits.max_header_bytes;
        if need > worker.max_am_header() {
            return Err(SetupError::Unsupported(format!(
                "headers of {} B need {need} B of AM header; the worker allows {}",
                config.limits.max_header_bytes,
                worker.max_am_header()
            )));
        }
        let callbacks = Box::new(RefCell::new(Callbacks::default()));
        let arg = &*callbacks as *const RefCell<Callbacks> as *mut c_void;
        // SAFETY: `arg` points into the boxed callbacks, which the transport
        // drops after the worker (field order), so it outlives the handler.
        unsafe { worker.set_am_handler(wire::AM_ID, Some(on_am), arg) }.map_err(|status| {
            SetupError::Ucx {
                call: "ucp_worker_set_am_recv_handler",
                status,
            }
        })?;
        Ok(UcxTransport {
            conns: Vec::new(),
            pending: Vec::new(),
            regions: Vec::new(),
            listener: None,
            worker,
            context,
            events: VecDeque::new(),
            ep_conn: HashMap::new(),
            limits: config.limits,
            peer_errors: config.peer_failure_detection,
            one_sided: config.context.rma,
            progressed: false,
            next_epoch: 0,
            callbacks,
        })
    }

    /// Listens on `addr` (port 0 picks one); returns the bound address.
    /// Connections arrive as [`Event::Accepted`].
    pub fn listen(&mut self, addr: SocketAddr) -> Result<SocketAddr, SetupError> {
        assert!(self.listener.is_none(), "one listener per transport");
        let arg = self.callbacks_arg();
        // SAFETY: as for the AM handler: the callbacks box outlives the listener.
        let listener = unsafe { Listener::new(&self.worker, addr, Some(on_conn_request), arg) }?;
        let bound = listener.local_addr();
        self.listener = Some(listener);
        Ok(bound)
    }

    /// The listener's bound address, if listening.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().map(Listener::local_addr)
    }

    /// The worker, for code that drives UCX directly (probes, benchmarks).
    pub fn worker(&self) -> &Rc<Worker> {
        &self.worker
    }

    /// UCX's description of a connection's endpoint: lanes and the
    /// transports they use (`ucp_ep_print_info`).
    pub fn describe(&self, conn: ConnId) -> Option<String> {
        let ep = self.conns.get(conn.0 as usize)?.as_ref()?.ep.as_ref()?;
        Some(ep.describe())
    }

    /// Lets UCX allocate and register `len` bytes (see [`MemRegion::allocate`]):
    /// the fastest target for peers' puts over shared memory. Returns the
    /// region and its start; the memory lives until `deregister` or drop.
    pub fn allocate(&mut self, len: usize) -> Result<(LocalRegionId, *mut u8), RegisterError> {
        if !self.one_sided {
            return Err(RegisterError::OneSidedOff);
        }
        let slot = self.free_region_slot()?;
        let mem = MemRegion::allocate(&self.context, len)?;
        let packed_rkey = mem.pack_rkey()?;
        let addr = mem.addr();
        self.regions[slot] = Some(Registered { mem, packed_rkey });
        Ok((LocalRegionId(slot as u32), addr))
    }

    fn free_region_slot(&mut self) -> Result<usize, RegisterError> {
        match self.regions.iter().position(Option::is_none) {
            Some(i) => Ok(i),
            None if self.regions.len() < self.limits.max_regions => {
                self.regions.push(None);
                Ok(self.regions.len() - 1)
            }
            None => Err(RegisterError::TooMany(self.limits.max_regions)),
        }
    }

    /// Messages dropped because they broke the protocol or the bounds.
    pub fn dropped_messages(&self) -> u64 {
        self.callbacks.borrow().dropped
    }

    fn callbacks_arg(&self) -> *mut c_void {
        &*self.callbacks as *const RefCell<Callbacks> as *mut c_void
    }

    fn open_conn(&mut self, conn: ConnId) -> Result<&mut UcxConn, OpError> {
        match self.conns.get_mut(conn.0 as usize) {
            Some(Some(c)) if !c.gone && c.ep.is_some() => Ok(c),
            _ => Err(OpError::Disconnected(conn.0)),
        }
    }

    fn add_conn(&mut self, ep: Endpoint) -> Result<ConnId, Endpoint> {
        let slot = match self.conns.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.conns.len() < self.limits.max_conns => {
                self.conns.push(None);
                self.conns.len() - 1
            }
            None => return Err(ep),
        };
        self.ep_conn.insert(ep.raw() as usize, slot as u32);
        self.next_epoch += 1;
        self.conns[slot] = Some(UcxConn {
            remotes: Vec::new(),
            ep: Some(Rc::new(ep)),
            window: Window::new(self.limits.window),
            answering: Answering::new(),
            send_seq: 0,
            received: InOrder::new(),
            unsettled: VecDeque::new(),
            epoch: self.next_epoch,
            gone: false,
        });
        Ok(ConnId(slot as u32))
    }

    /// Ends a connection: fails its window, releases keys and endpoint
    /// (gracefully unless it already failed), and queues `Disconnected`.
    fn end_conn(&mut self, conn: u32, cause: Option<Status>) {
        let Some(Some(c)) = self.conns.get_mut(conn as usize) else {
            return;
        };
        if c.gone {
            return;
        }
        c.gone = true;
        c.unsettled.clear();
        for (_, token) in c.window.drain() {
            let completion = Completion {
                conn: ConnId(conn),
                token,
                result: Err(OpError::Disconnected(conn)),
            };
            self.events.push_back(Event::Completion(completion));
        }
        c.remotes.clear();
        let ep = c.ep.take().expect("an open connection has an endpoint");
        self.ep_conn.remove(&(ep.raw() as usize));
        // Queued arrivals of this endpoint go while it still exists:
        // releasing a rendezvous descriptor answers its sender through the
        // endpoint, which a close may destroy at once.
        self.release_arrivals(Some(ep.raw() as usize));
        match Rc::try_unwrap(ep) {
            Ok(ep) => {
                // A failed endpoint can only be force-closed; a healthy one
                // flushes first so that posted puts still land.
                if let Ok(Some(req)) = ep.close(cause.is_some()) {
                    self.pending.push((req, Pending::Close));
                }
            }
            Err(_) => unreachable!("only remote keys share the endpoint, and they were dropped"),
        }
        self.events.push_back(Event::Disconnected {
            conn: ConnId(conn),
            cause,
        });
    }

    /// Progresses the worker until it reports nothing done (bounded);
    /// remembers whether it did anything.
    fn progress(&mut self) {
        let mut done = 0;
        for _ in 0..PROGRESS_ROUNDS {
            let n = self.worker.progress();
            if n == 0 {
                break;
            }
            done += n as usize;
        }
        self.progressed = done > 0;
    }

    /// Handles what the callbacks queued, then reaps completed requests.
    /// The idle case of a spin-poll (nothing queued, nothing in flight)
    /// returns before the work's stack frame is set up: inlined into
    /// `poll`, it is a borrow and four length checks.
    #[inline]
    fn process(&mut self) {
        let queued = {
            let cb = self.callbacks.borrow();
            !(cb.accepts.is_empty() && cb.failures.is_empty() && cb.arrivals.is_empty())
        };
        if queued || !self.pending.is_empty() {
            self.process_queued();
        }
    }

    #[inline(never)]
    fn process_queued(&mut self) {
        let (accepts, failures) = {
            let mut cb = self.callbacks.borrow_mut();
            (
                std::mem::take(&mut cb.accepts),
                std::mem::take(&mut cb.failures),
            )
        };
        for request in accepts {
            self.accept(request);
        }
        for (ep, status) in failures {
            if let Some(&conn) = self.ep_conn.get(&ep) {
                self.end_conn(conn, Some(status));
            }
        }
        loop {
            let next = self.callbacks.borrow_mut().arrivals.pop_front();
            let Some(arrival) = next else { break };
            self.arrive(arrival);
        }
        self.reap();
    }

    fn accept(&mut self, request: sys::ucp_conn_request_h) {
        let open = self.conns.iter().filter(|c| c.is_some()).count();
        if open >= self.limits.max_conns {
            if let Some(listener) = &self.listener {
                // SAFETY: the request came from this listener's callback and
                // is consumed once, here.
                unsafe { listener.reject(request) };
            }
            return;
        }
        let arg = self.callbacks_arg();
        // SAFETY: the request came from our listener's callback; the error
        // handler's arg is the callbacks box, which outlives the endpoint.
        match unsafe {
            Endpoint::new(
                &self.worker,
                Peer::Accept(request),
                self.peer_errors,
                Some(on_ep_error),
                arg,
            )
        } {
            Ok(ep) => match self.add_conn(ep) {
                Ok(conn) => self.events.push_back(Event::Accepted(conn)),
                Err(ep) => drop(ep), // unreachable: the bound was checked above
            },
            Err(_) => {
                // UCX consumed the request; the client sees its connection fail.
            }
        }
    }

    /// Handles one arrived message (outside the callback): checks it, then
    /// queues it in its connection's order (receiving rendezvous data
    /// first). A message that breaks the protocol or the bounds ends its
    /// connection: the peer's later messages could not be put in order.
    fn arrive(&mut self, arrival: Arrival) {
        let data_len = match &arrival.data {
            ArrivalData::Eager(v) => v.len(),
            ArrivalData::Rndv { len, .. } => *len,
        };
        let Some(conn) = self.ep_conn.get(&arrival.ep).copied() else {
            self.drop_arrival(arrival.data);
            return;
        };
        let eager = matches!(arrival.data, ArrivalData::Eager(_));
        let (prefix, now) = match self.admit(conn, &arrival.header, data_len, eager) {
            Ok(admitted) => admitted,
            Err(violation) => {
                self.drop_arrival(arrival.data);
                self.end_conn(conn, Some(violation));
                return;
            }
        };
        let mut header = arrival.header;
        header.drain(..wire::FRAMING_BYTES);
        match arrival.data {
            ArrivalData::Eager(payload) if now => self.deliver(conn, prefix.kind, prefix.call, header, payload),
            ArrivalData::Eager(payload) => {
                let message = Message {
                    kind: prefix.kind,
                    call: prefix.call,
                    header,
                    payload: Some(payload),
                };
                self.ready(conn, prefix.seq, message);
            }
            ArrivalData::Rndv { desc, len } => self.start_recv(conn, prefix, header, desc, len),
        }
    }

    /// Checks an arrival against the framing, the bounds, the request
    /// window and the connection's order, and records it there; the status
    /// to end the connection with if it breaks them. A whole (`eager`)
    /// message that is next in order, with nothing waiting, is not recorded:
    /// `true` says to hand it on at once.
    fn admit(&mut self, conn: u32, am_header: &[u8], data_len: usize, eager: bool) -> Result<(wire::Prefix, bool), Status> {
        let invalid = Status(sys::UCS_ERR_INVALID_PARAM);
        let too_large = Status(sys::UCS_ERR_EXCEEDS_LIMIT);
        let (prefix, user) = wire::decode_header(am_header, data_len).map_err(|_| invalid)?;
        if user.len() > self.limits.max_header_bytes || data_len > self.limits.max_payload_bytes {
            return Err(too_large);
        }
        let Some(Some(c)) = self.conns.get_mut(conn as usize) else {
            return Err(invalid);
        };
        if c.gone {
            return Err(invalid);
        }
        if prefix.kind == Kind::Request && !c.answering.arrive(prefix.call) {
            return Err(too_large); // beyond the window, or a slot reused unanswered
        }
        let order = if eager { c.received.pass(prefix.seq) } else { c.received.arrive(prefix.seq).map(|()| false) };
        let now = order.map_err(|v| match v {
            OrderViolation::OutOfRange => too_large,
            OrderViolation::Duplicate => invalid,
        })?;
        Ok((prefix, now))
    }

    /// Message `seq` of `conn` is whole (or failed): hands on every message
    /// of the connection that is now next in the peer's order.
    fn ready(&mut self, conn: u32, seq: u32, message: Message) {
        let Some(Some(c)) = self.conns.get_mut(conn as usize) else {
            return;
        };
        c.received.ready(seq, message);
        loop {
            let Some(Some(c)) = self.conns.get_mut(conn as usize) else {
                return;
            };
            if c.gone {
                return;
            }
            let Some(message) = c.received.pop() else {
                return;
            };
            match message.payload {
                Some(payload) => self.deliver(conn, message.kind, message.call, message.header, payload),
                None => self.fail_arrival(conn, message.kind, message.call),
            }
        }
    }

    fn deliver(&mut self, conn: u32, kind: Kind, call: u64, header: Vec<u8>, payload: Vec<u8>) {
        match kind {
            Kind::Request => {
                let id = RequestId {
                    conn: ConnId(conn),
                    call,
                };
                self.events.push_back(Event::Request(RpcRequest {
                    id,
                    header,
                    payload,
                }));
            }
            Kind::Response => {
                let Some(Some(c)) = self.conns.get_mut(conn as usize) else {
                    return;
                };
                match c.window.finish(call) {
                    Some(token) => {
                        let result = Ok(Output::Response { header, payload });
                        self.events.push_back(Event::Completion(Completion {
                            conn: ConnId(conn),
                            token,
                            result,
                        }));
                    }
                    None => self.callbacks.borrow_mut().dropped += 1,
                }
            }
            Kind::Message => self.events.push_back(Event::Message {
                conn: ConnId(conn),
                header,
                payload: payload.into(),
            }),
        }
    }

    fn start_recv(&mut self, conn: u32, prefix: wire::Prefix, header: Vec<u8>, desc: *mut c_void, len: usize) {
        // A kept buffer, not a fresh zeroed one: UCX writes all `len` bytes.
        let mut buf = self.callbacks.borrow_mut().spare.take(len);
        assert!(buf.is_empty() && buf.capacity() >= len);
        let param = zeroed_param();
        // SAFETY: desc came from the AM callback (which returned
        // UCS_INPROGRESS), is used once, and UCX owns it from here on; buf
        // has `len` bytes of capacity and lives in the Pending entry until
        // the request completes.
        let ptr = unsafe {
            sys::ucp_am_recv_data_nbx(
                self.worker.raw(),
                desc,
                buf.as_mut_ptr() as *mut c_void,
                len,
                &param,
            )
        };
        let (kind, call, seq) = (prefix.kind, prefix.call, prefix.seq);
        match request_of(ptr) {
            Ok(None) => {
                // SAFETY: the receive completed: UCX wrote `len` bytes.
                unsafe { buf.set_len(len) };
                self.ready(conn, seq, Message { kind, call, header, payload: Some(buf) });
            }
            Ok(Some(req)) => {
                let epoch = self.conns[conn as usize].as_ref().expect("admitted").epoch;
                let pending = Pending::Recv { conn, epoch, seq, kind, call, header, buf, len };
                self.pending.push((req, pending));
            }
            Err(_) => {
                self.callbacks.borrow_mut().spare.give(buf);
                self.ready(conn, seq, Message { kind, call, header, payload: None });
            }
        }
    }

    /// A message we admitted could not be received: a response fails its
    /// call; a request is forgotten (its caller's call fails when the
    /// connection does); a one-way message ends the connection (the service
    /// never sees a gap in a connection's messages).
    fn fail_arrival(&mut self, conn: u32, kind: Kind, call: u64) {
        let Some(Some(c)) = self.conns.get_mut(conn as usize) else {
            return;
        };
        match kind {
            Kind::Request => {
                c.answering.answer(call);
            }
            Kind::Response => {
                if let Some(token) = c.window.finish(call) {
                    let status = Status(sys::UCS_ERR_IO_ERROR);
                    let result = Err(OpError::Ucx {
                        call: "ucp_am_recv_data_nbx",
                        status,
                    });
                    self.events.push_back(Event::Completion(Completion {
                        conn: ConnId(conn),
                        token,
                        result,
                    }));
                }
            }
            Kind::Message => {
                self.callbacks.borrow_mut().dropped += 1;
                self.end_conn(conn, Some(Status(sys::UCS_ERR_IO_ERROR)));
            }
        }
    }

    /// Drops the queued arrivals of `ep` (of every endpoint: `None`),
    /// releasing their rendezvous descriptors.
    fn release_arrivals(&mut self, ep: Option<usize>) {
        let queued = std::mem::take(&mut self.callbacks.borrow_mut().arrivals);
        let (gone, kept): (VecDeque<Arrival>, VecDeque<Arrival>) =
            queued.into_iter().partition(|a| ep.is_none_or(|ep| a.ep == ep));
        self.callbacks.borrow_mut().arrivals = kept;
        for arrival in gone {
            self.drop_arrival(arrival.data);
        }
    }

    fn drop_arrival(&mut self, data: ArrivalData) {
        self.callbacks.borrow_mut().dropped += 1;
        if let ArrivalData::Rndv { desc, .. } = data {
            // SAFETY: desc is a rendezvous descriptor we kept (INPROGRESS)
            // and never passed to ucp_am_recv_data_nbx.
            unsafe { sys::ucp_am_data_release(self.worker.raw(), desc) };
        }
    }

    /// Turns completed requests into completions.
    fn reap(&mut self) {
        let mut i = 0;
        while i < self.pending.len() {
            let Some(result) = self.pending[i].0.check() else {
                i += 1;
                continue;
            };
            let (_req, pending) = self.pending.swap_remove(i);
            self.complete(pending, result);
        }
    }

    fn complete(&mut self, pending: Pending, result: Result<(), Status>) {
        match pending {
            Pending::Op { conn, call, kind } => self.finish_op(
                conn,
                call,
                kind,
                result.map_err(|s| ucx_err("completion", s)),
            ),
            Pending::Sent {
                conn,
                epoch,
                seq,
                call,
                payload,
                ..
            } => {
                self.callbacks.borrow_mut().spare.give(payload);
                self.settle(conn, epoch, seq);
                if let (Err(status), Some(call)) = (result, call) {
                    self.finish_call(conn, call, Err(ucx_err("ucp_am_send_nbx", status)));
                }
            }
            Pending::Close => {}
            Pending::Recv {
                conn,
                epoch,
                seq,
                kind,
                call,
                header,
                mut buf,
                len,
            } => {
                let payload = match result {
                    Ok(()) => {
                        // SAFETY: the receive completed: UCX wrote `len` bytes
                        // into the capacity reserved for it.
                        unsafe { buf.set_len(len) };
                        Some(buf)
                    }
                    Err(_) => {
                        self.callbacks.borrow_mut().spare.give(buf);
                        None
                    }
                };
                let same = matches!(self.conns.get(conn as usize), Some(Some(c)) if c.epoch == epoch && !c.gone);
                match payload {
                    Some(payload) if !same => self.callbacks.borrow_mut().spare.give(payload),
                    None if !same => {}
                    payload => self.ready(conn, seq, Message { kind, call, header, payload }),
                }
            }
        }
    }

    fn finish_call(&mut self, conn: u32, call: u64, result: Result<Output, OpError>) {
        let Some(Some(c)) = self.conns.get_mut(conn as usize) else {
            return;
        };
        if let Some(token) = c.window.finish(call) {
            self.events.push_back(Event::Completion(Completion {
                conn: ConnId(conn),
                token,
                result,
            }));
        }
    }

    fn finish_op(&mut self, conn: u32, call: u64, kind: OpKind, result: Result<(), OpError>) {
        let output = result.map(|()| match kind {
            OpKind::Put(buf) => Output::Put { buf },
            OpKind::Get(buf) => Output::Get { buf },
            OpKind::Atomic(bufs, fetch) => Output::Atomic {
                old: if fetch { bufs.reply } else { 0 },
            },
            OpKind::Flush => Output::Flush,
        });
        self.finish_call(conn, call, output);
    }

    /// Common start of a one-sided op: the endpoint, a window slot, and the
    /// key and absolute address of `offset..offset+len` (None for flush).
    fn begin_one_sided(
        &mut self,
        conn: ConnId,
        target: Option<(RemoteRegionId, u64, u64)>,
        token: u64,
    ) -> Result<OneSided, OpError> {
        let c = self.open_conn(conn)?;
        let at = match target {
            None => None,
            Some((region, offset, len)) => {
                let r = c
                    .remotes
                    .get(region.0 as usize)
                    .ok_or(OpError::UnknownRegion(region.0))?;
                check_range(offset, len, r.len)?;
                Some((region.0 as usize, r.addr + offset))
            }
        };
        let cap = c.window.capacity();
        let call = c.window.take(token).ok_or(OpError::WindowFull(cap))?;
        Ok((c.ep.clone().expect("open"), call, at))
    }

    /// Records the outcome of starting a one-sided op.
    fn started(
        &mut self,
        conn: ConnId,
        call: u64,
        kind: OpKind,
        started: Result<Option<Request>, Status>,
        what: &'static str,
    ) -> Result<(), OpError> {
        match started {
            Ok(None) => {
                self.finish_op(conn.0, call, kind, Ok(()));
                Ok(())
            }
            Ok(Some(req)) => {
                self.pending.push((
                    req,
                    Pending::Op {
                        conn: conn.0,
                        call,
                        kind,
                    },
                ));
                Ok(())
            }
            Err(status) => {
                if let Some(Some(c)) = self.conns.get_mut(conn.0 as usize) {
                    c.window.finish(call);
                }
                Err(ucx_err(what, status))
            }
        }
    }

    /// Sends one message on `conn` (open: the caller checked) with the
    /// connection's next `seq`: a request (`call` is its slot), a response
    /// (`call` echoes the request's) or a one-way message (`send` is the
    /// slot it holds until it settles). Records it in the connection's
    /// unsettled list unless it completed at once with nothing before it.
    fn send_message(
        &mut self,
        conn: u32,
        kind: Kind,
        call: u64,
        send: Option<u64>,
        header: &[u8],
        payload: Vec<u8>,
    ) -> Result<(), Status> {
        let c = self.conns[conn as usize].as_mut().expect("sent on an open connection");
        let ep = c.ep.clone().expect("open");
        let (seq, epoch) = (c.send_seq, c.epoch);
        let wire_call = if kind == Kind::Message { 0 } else { call };
        let mut am_header = Vec::with_capacity(wire::FRAMING_BYTES + header.len());
        wire::encode_header(&mut am_header, kind, seq, wire_call, header, payload.len());
        // SAFETY: am_header and payload move into the Pending entry (their
        // heap storage does not move) and live until the request completes.
        let sent = unsafe { ep.am_send(wire::AM_ID, &am_header, &payload) }?;
        let c = self.conns[conn as usize].as_mut().expect("still open");
        c.send_seq = c.send_seq.wrapping_add(1);
        let Some(req) = sent else {
            self.callbacks.borrow_mut().spare.give(payload);
            match send {
                Some(id) if c.unsettled.is_empty() => assert!(c.window.finish_send(id)),
                Some(_) => c.unsettled.push_back(Unsettled { seq, done: true, send }),
                None => {}
            }
            return Ok(());
        };
        c.unsettled.push_back(Unsettled { seq, done: false, send });
        let call = (kind == Kind::Request).then_some(call);
        self.pending.push((req, Pending::Sent { conn, epoch, seq, call, _header: am_header, payload }));
        Ok(())
    }

    /// Message `seq` of the connection of `epoch` completed locally: gives
    /// back the slots of the sends that are now settled.
    fn settle(&mut self, conn: u32, epoch: u64, seq: u32) {
        let Some(Some(c)) = self.conns.get_mut(conn as usize) else {
            return;
        };
        if c.epoch != epoch || c.gone {
            return;
        }
        let entry = c.unsettled.iter_mut().find(|u| u.seq == seq).expect("an unfinished message is listed");
        assert!(!entry.done, "message {seq} completed twice");
        entry.done = true;
        while c.unsettled.front().is_some_and(|u| u.done) {
            let settled = c.unsettled.pop_front().expect("checked");
            if let Some(id) = settled.send {
                assert!(c.window.finish_send(id), "a send's slot is given back once");
            }
        }
    }

    fn rkey(&self, conn: ConnId, index: usize) -> &Rkey {
        &self.conns[conn.0 as usize].as_ref().expect("open").remotes[index].rkey
    }
}

impl Transport for UcxTransport {
    type Addr = SocketAddr;

    fn connect(&mut self, addr: &SocketAddr) -> Result<ConnId, ConnectError> {
        if self.conns.iter().filter(|c| c.is_some()).count() >= self.limits.max_conns {
            return Err(ConnectError::TooMany(self.limits.max_conns));
        }
        let arg = self.callbacks_arg();
        // SAFETY: the error handler's arg is the callbacks box, which outlives
        // every endpoint.
        let ep = unsafe {
            Endpoint::new(
                &self.worker,
                Peer::Connect(*addr),
                self.peer_errors,
                Some(on_ep_error),
                arg,
            )
        }
        .map_err(|status| ConnectError::Ucx {
            addr: addr.to_string(),
            status,
        })?;
        self.add_conn(ep)
            .map_err(|_| ConnectError::TooMany(self.limits.max_conns))
    }

    fn close(&mut self, conn: ConnId) {
        self.end_conn(conn.0, None);
    }

    fn call(
        &mut self,
        conn: ConnId,
        header: &[u8],
        payload: Vec<u8>,
        token: u64,
    ) -> Result<(), OpError> {
        check_sizes(&self.limits, header.len(), payload.len())?;
        let c = self.open_conn(conn)?;
        let cap = c.window.capacity();
        let call = c.window.take(token).ok_or(OpError::WindowFull(cap))?;
        self.send_message(conn.0, Kind::Request, call, None, header, payload).map_err(|status| {
            self.open_conn(conn).map(|c| c.window.finish(call)).ok();
            ucx_err("ucp_am_send_nbx", status)
        })
    }

    fn reply(
        &mut self,
        request: RequestId,
        header: &[u8],
        payload: Vec<u8>,
    ) -> Result<(), OpError> {
        check_sizes(&self.limits, header.len(), payload.len())?;
        let c = self.open_conn(request.conn)?;
        if !c.answering.answer(request.call) {
            return Err(OpError::UnknownRequest);
        }
        self.send_message(request.conn.0, Kind::Response, request.call, None, header, payload)
            .map_err(|status| ucx_err("ucp_am_send_nbx", status))
    }

    fn send(&mut self, conn: ConnId, header: &[u8], payload: Vec<u8>) -> Result<(), OpError> {
        check_sizes(&self.limits, header.len(), payload.len())?;
        let c = self.open_conn(conn)?;
        let cap = c.window.capacity();
        let id = c.window.take_send().ok_or(OpError::WindowFull(cap))?;
        self.send_message(conn.0, Kind::Message, 0, Some(id), header, payload).map_err(|status| {
            self.open_conn(conn).map(|c| c.window.finish_send(id)).ok();
            ucx_err("ucp_am_send_nbx", status)
        })
    }

    fn reach(&self) -> Reach {
        if self.one_sided {
            Reach::Process
        } else {
            Reach::Off
        }
    }

    unsafe fn register(
        &mut self,
        addr: *mut u8,
        len: usize,
    ) -> Result<LocalRegionId, RegisterError> {
        if !self.one_sided {
            return Err(RegisterError::OneSidedOff);
        }
        let slot = self.free_region_slot()?;
        // SAFETY: forwarded under the caller's contract.
        let mem = unsafe { MemRegion::register(&self.context, addr, len) }?;
        let packed_rkey = mem.pack_rkey()?;
        self.regions[slot] = Some(Registered { mem, packed_rkey });
        Ok(LocalRegionId(slot as u32))
    }

    fn deregister(&mut self, region: LocalRegionId) {
        if let Some(r) = self.regions.get_mut(region.0 as usize) {
            *r = None;
        }
    }

    fn export(&self, region: LocalRegionId) -> Result<RegionDescriptor, RegisterError> {
        let r = self
            .regions
            .get(region.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(RegisterError::Empty)?;
        Ok(RegionDescriptor {
            addr: r.mem.addr() as u64,
            len: r.mem.len() as u64,
            rkey: r.packed_rkey.clone(),
        })
    }

    fn attach(
        &mut self,
        conn: ConnId,
        desc: &RegionDescriptor,
    ) -> Result<RemoteRegionId, AttachError> {
        if !self.one_sided {
            return Err(AttachError::OneSidedOff);
        }
        if desc.rkey.is_empty() || desc.rkey.len() > wire::MAX_RKEY_BYTES {
            return Err(AttachError::Malformed("rkey length"));
        }
        if desc.addr.checked_add(desc.len).is_none() {
            return Err(AttachError::Malformed("address range overflows"));
        }
        let max = self.limits.max_remote_regions;
        let c = self
            .open_conn(conn)
            .map_err(|_| AttachError::NotConnected(conn.0))?;
        if c.remotes.len() >= max {
            return Err(AttachError::TooMany(max));
        }
        let rkey =
            c.ep.as_ref()
                .expect("open")
                .unpack_rkey(&desc.rkey)
                .map_err(AttachError::Ucx)?;
        c.remotes.push(Remote {
            rkey,
            addr: desc.addr,
            len: desc.len,
        });
        Ok(RemoteRegionId(c.remotes.len() as u32 - 1))
    }

    fn put(
        &mut self,
        conn: ConnId,
        region: RemoteRegionId,
        offset: u64,
        buf: Vec<u8>,
        token: u64,
    ) -> Result<(), OpError> {
        let (ep, call, at) =
            self.begin_one_sided(conn, Some((region, offset, buf.len() as u64)), token)?;
        let (index, addr) = at.expect("a put has a target");
        // SAFETY: buf moves into the Pending entry (its heap storage stays
        // put) and lives until the request completes.
        let started = unsafe { ep.put(buf.as_ptr(), buf.len(), addr, self.rkey(conn, index)) };
        self.started(conn, call, OpKind::Put(buf), started, "ucp_put_nbx")
    }

    fn get(
        &mut self,
        conn: ConnId,
        region: RemoteRegionId,
        offset: u64,
        mut buf: Vec<u8>,
        token: u64,
    ) -> Result<(), OpError> {
        let (ep, call, at) =
            self.begin_one_sided(conn, Some((region, offset, buf.len() as u64)), token)?;
        let (index, addr) = at.expect("a get has a target");
        // SAFETY: as in put; nothing else touches buf until completion.
        let started = unsafe { ep.get(buf.as_mut_ptr(), buf.len(), addr, self.rkey(conn, index)) };
        self.started(conn, call, OpKind::Get(buf), started, "ucp_get_nbx")
    }

    fn atomic(
        &mut self,
        conn: ConnId,
        region: RemoteRegionId,
        offset: u64,
        op: AtomicOp,
        token: u64,
    ) -> Result<(), OpError> {
        if !offset.is_multiple_of(8) {
            return Err(OpError::Misaligned(offset));
        }
        let (ep, call, at) = self.begin_one_sided(conn, Some((region, offset, 8)), token)?;
        let (index, addr) = at.expect("an atomic has a target");
        let (opcode, operand, reply_in, fetch) = match op {
            AtomicOp::Add(x) => (sys::UCP_ATOMIC_OP_ADD, x, 0, false),
            AtomicOp::FetchAdd(x) => (sys::UCP_ATOMIC_OP_ADD, x, 0, true),
            AtomicOp::Swap(x) => (sys::UCP_ATOMIC_OP_SWAP, x, 0, true),
            AtomicOp::CompareSwap { expected, new } => {
                (sys::UCP_ATOMIC_OP_CSWAP, expected, new, true)
            }
        };
        let mut bufs = Box::new(AtomicBufs {
            operand,
            reply: reply_in,
        });
        let reply = if fetch {
            Some(&mut bufs.reply as *mut u64)
        } else {
            None
        };
        // SAFETY: bufs is boxed (stable address) and moves into the Pending
        // entry until completion.
        let started =
            unsafe { ep.atomic(opcode, &bufs.operand, reply, addr, self.rkey(conn, index)) };
        self.started(
            conn,
            call,
            OpKind::Atomic(bufs, fetch),
            started,
            "ucp_atomic_op_nbx",
        )
    }

    fn flush(&mut self, conn: ConnId, token: u64) -> Result<(), OpError> {
        let (ep, call, _) = self.begin_one_sided(conn, None, token)?;
        let started = ep.flush();
        self.started(conn, call, OpKind::Flush, started, "ucp_ep_flush_nbx")
    }

    fn fence(&mut self) -> Result<(), OpError> {
        self.worker
            .fence()
            .map_err(|s| ucx_err("ucp_worker_fence", s))
    }

    fn poll(&mut self, events: &mut Vec<Event>, max: usize) -> usize {
        self.progress();
        self.process();
        let mut n = 0;
        while n < max {
            let Some(event) = self.events.pop_front() else {
                break;
            };
            if let Event::Disconnected { conn, .. } = &event {
                // The id may be reused only once the caller has seen it end.
                self.conns[conn.0 as usize] = None;
            }
            events.push(event);
            n += 1;
        }
        n
    }

    fn wait(&mut self, timeout: Duration) -> Result<bool, WaitError> {
        let deadline = Instant::now() + timeout;
        let mut busy = 0;
        loop {
            if !self.events.is_empty() {
                return Ok(true);
            }
            self.progress();
            self.process();
            if !self.events.is_empty() {
                return Ok(true);
            }
            match self.worker.arm()? {
                Armed::Busy if self.progressed => {
                    // The worker is busy with work of its own (a peer's
                    // emulated put, a rendezvous): let the caller poll,
                    // rather than arm again (each arm drains fds: syscalls).
                    return Ok(true);
                }
                Armed::Busy => {
                    // Events arrived between progress and arm: progress again,
                    // a bounded number of times.
                    busy += 1;
                    if busy >= ARM_BUSY_ROUNDS {
                        return Ok(true);
                    }
                    continue;
                }
                Armed::Armed => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            if self.worker.sleep(deadline - now)? {
                return Ok(true);
            }
            return Ok(false);
        }
    }

    fn progressed(&self) -> bool {
        self.progressed
    }

    /// Progresses, then arms the worker (`ucp_worker_arm`) and returns its
    /// event fd; `Ready` when events are queued or the worker is busy.
    fn event_fd(&mut self) -> EventFd {
        if self.events.is_empty() {
            self.progress();
            self.process();
        }
        if !self.events.is_empty() {
            return EventFd::Ready;
        }
        match self.worker.arm() {
            Ok(Armed::Armed) => EventFd::Armed(self.worker.event_fd()),
            // Busy: events arrived meanwhile; an error: poll, which reports it.
            Ok(Armed::Busy) | Err(_) => EventFd::Ready,
        }
    }

    fn take_buffer(&mut self, len: usize) -> Vec<u8> {
        self.callbacks.borrow_mut().spare.take(len)
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        self.callbacks.borrow_mut().spare.give(buf);
    }
}

impl Drop for UcxTransport {
    fn drop(&mut self) {
        // Arrivals first, while their endpoints exist (see end_conn).
        self.release_arrivals(None);
        // Force-close every endpoint (keys first): operations in flight fail.
        for c in self.conns.iter_mut().flatten() {
            c.remotes.clear();
            c.ep = None;
        }
        self.listener = None;
        // Drain: progress while it does something, else sleep on the event
        // fd a little (a graceful close waits for the peer's answer), for
        // a bounded number of rounds and at most DROP_DRAIN_WAIT.
        let deadline = Instant::now() + DROP_DRAIN_WAIT;
        for _ in 0..DROP_DRAIN_ROUNDS {
            self.pending.retain(|(req, _)| req.check().is_none());
            if self.pending.is_empty() || Instant::now() >= deadline {
                break;
            }
            if self.worker.progress() == 0 && matches!(self.worker.arm(), Ok(Armed::Armed)) {
                let _ = self.worker.sleep(Duration::from_millis(1));
            }
        }
        // Closes still under way are left to the worker's destruction (it
        // closes its remaining endpoints); no buffer of ours is in them.
        self.pending.retain(|(_, p)| !matches!(p, Pending::Close));
        if !self.pending.is_empty() {
            // UCX may still write these buffers: leak them rather than free.
            // Their endpoints still have operations in UCX (a peer that
            // never answered a get or a flush), and destroying the worker
            // would abort in UCX's own assertion on them: the worker and
            // context are leaked too. Only a peer that stops answering
            // mid-operation gets here.
            std::mem::forget(std::mem::take(&mut self.pending));
            std::mem::forget(self.worker.clone());
        }
    }
}

fn ucx_err(call: &'static str, status: Status) -> OpError {
    OpError::Ucx { call, status }
}

fn zeroed_param() -> sys::ucp_request_param_t {
    // SAFETY: all-zero is a valid ucp_request_param_t (op_attr_mask 0).
    unsafe { std::mem::zeroed() }
}

fn request_of(ptr: sys::ucs_status_ptr_t) -> Result<Option<Request>, Status> {
    crate::ucx::request_from_ptr(ptr)
}

/// `ucp_listener_conn_callback_t`: queue the request for `poll`.
unsafe extern "C" fn on_conn_request(request: sys::ucp_conn_request_h, arg: *mut c_void) {
    // SAFETY: arg is the transport's callbacks box (see UcxTransport::listen).
    let callbacks = unsafe { &*(arg as *const RefCell<Callbacks>) };
    callbacks.borrow_mut().accepts.push(request);
}

/// `ucp_err_handler_cb_t`: queue the failure for `poll`.
unsafe extern "C" fn on_ep_error(arg: *mut c_void, ep: sys::ucp_ep_h, status: sys::ucs_status_t) {
    // SAFETY: arg is the transport's callbacks box (see connect/accept).
    let callbacks = unsafe { &*(arg as *const RefCell<Callbacks>) };
    callbacks
        .borrow_mut()
        .failures
        .push((ep as usize, Status(status)));
}

/// `ucp_am_recv_callback_t`: copy eager data out, keep rendezvous
/// descriptors (`UCS_INPROGRESS`) for `poll` to receive.
unsafe extern "C" fn on_am(
    arg: *mut c_void,
    header: *const c_void,
    header_length: usize,
    data: *mut c_void,
    length: usize,
    param: *const sys::ucp_am_recv_param_t,
) -> sys::ucs_status_t {
    // SAFETY: arg is the transport's callbacks box (see UcxTransport::new);
    // UCX passes a valid param and header_length readable header bytes.
    let (callbacks, param) = unsafe { (&*(arg as *const RefCell<Callbacks>), &*param) };
    let mut cb = callbacks.borrow_mut();
    let has_ep = param.recv_attr & sys::UCP_AM_RECV_ATTR_FIELD_REPLY_EP as u64 != 0;
    let is_rndv = param.recv_attr & sys::UCP_AM_RECV_ATTR_FLAG_RNDV as u64 != 0;
    if !has_ep {
        // Not attributable to a connection (our peers always send REPLY).
        cb.dropped += 1;
        // For rendezvous, UCS_OK tells UCX we do not want the data.
        return sys::UCS_OK;
    }
    if cb.arrivals.len() >= MAX_ARRIVALS
        || header_length > wire::FRAMING_BYTES + wire::MAX_USER_HEADER
    {
        // A peer past every bound: its connection ends (`poll` handles the
        // failure), since its later messages could no longer be in order.
        cb.dropped += 1;
        let status = Status(sys::UCS_ERR_EXCEEDS_LIMIT);
        cb.failures.push((param.reply_ep as usize, status));
        return sys::UCS_OK;
    }
    let header = if header_length == 0 {
        Vec::new()
    } else {
        // SAFETY: UCX passes header_length readable bytes at header.
        unsafe { std::slice::from_raw_parts(header as *const u8, header_length) }.to_vec()
    };
    let ep = param.reply_ep as usize;
    if is_rndv {
        cb.arrivals.push_back(Arrival {
            ep,
            header,
            data: ArrivalData::Rndv {
                desc: data,
                len: length,
            },
        });
        return sys::UCS_INPROGRESS;
    }
    let payload = if length == 0 {
        Vec::new()
    } else {
        let mut payload = cb.spare.take(length);
        // SAFETY: eager data: `length` readable bytes valid during the callback.
        payload.extend_from_slice(unsafe { std::slice::from_raw_parts(data as *const u8, length) });
        payload
    };
    cb.arrivals.push_back(Arrival {
        ep,
        header,
        data: ArrivalData::Eager(payload),
    });
    sys::UCS_OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sided_off_leaves_out_the_zero_copy_transports() {
        assert_eq!(without_zero_copy("sm,tcp"), "posix,sysv,tcp");
        assert_eq!(without_zero_copy("posix,cma,self"), "posix,self");
        assert_eq!(without_zero_copy("shm,mm,tcp"), "posix,sysv,tcp");
        assert_eq!(without_zero_copy("rc,ud"), "rc,ud");
        assert_eq!(without_zero_copy("all"), "^cma,knem,xpmem");
        assert_eq!(without_zero_copy("^tcp,cma"), "^tcp,cma,knem,xpmem");
        let off = effective_context(&ContextConfig::tls("sm,tcp"));
        assert_eq!(off.tls.as_deref(), Some("posix,sysv,tcp"));
        assert!(off.vars.contains(&("PUT_ENABLE".to_string(), "n".to_string())));
        assert_eq!(effective_context(&ContextConfig::default()).tls.as_deref(), Some("^cma,knem,xpmem"));
        let on = ContextConfig { rma: true, ..ContextConfig::tls("sm,tcp") };
        assert_eq!(effective_context(&on).tls.as_deref(), Some("sm,tcp"), "on: as given");
    }

    #[test]
    fn spare_buffers_are_bounded_and_keep_the_larger_ones() {
        let mut spare = Spare::default();
        for _ in 0..SPARE_BUFFERS + 10 {
            spare.give(Vec::with_capacity(1024));
        }
        assert_eq!(spare.bufs.len(), SPARE_BUFFERS, "count bound");
        // A larger buffer displaces a smaller one; an equal one is dropped.
        spare.give(Vec::with_capacity(1 << 20));
        spare.give(Vec::with_capacity(1024));
        assert_eq!(spare.bufs.len(), SPARE_BUFFERS);
        assert_eq!(spare.bytes, (SPARE_BUFFERS - 1) * 1024 + (1 << 20));
        // Byte bound: buffers that would pass SPARE_BYTES are not kept.
        for _ in 0..64 {
            spare.give(Vec::with_capacity(4 << 20));
        }
        assert!(spare.bytes <= SPARE_BYTES, "{} kept bytes", spare.bytes);
        assert_eq!(
            spare.bytes,
            spare.bufs.iter().map(Vec::capacity).sum::<usize>()
        );
        spare.give(Vec::new());
        spare.give(Vec::with_capacity(SPARE_BYTES + 1));
        assert!(spare.bytes <= SPARE_BYTES);
    }

    #[test]
    fn a_taken_buffer_is_empty_and_fits() {
        let mut spare = Spare::default();
        let mut used = Vec::with_capacity(65536);
        used.extend_from_slice(&[7u8; 65536]);
        spare.give(used);
        spare.give(Vec::with_capacity(100));
        let big = spare.take(60_000);
        assert!(big.is_empty());
        assert!(big.capacity() >= 60_000);
        assert_eq!(spare.bufs.len(), 1, "the small one stays");
        let fresh = spare.take(1000);
        assert!(
            fresh.is_empty() && fresh.capacity() >= 1000,
            "none fits: a new one"
        );
        assert_eq!(spare.bytes, 100);
    }
}
