//! The server's run-to-completion event loop over the network seam
//! ([`transport::Transport`]): the same loop serves over
//! [`transport::UcxTransport`] (tcp, shared memory) and
//! [`transport::InProcTransport`] (deterministic tests).
//!
//! Each pass drains the transport's events — accepted and lost connections
//! go to [`Server::connect`]/[`Server::disconnect`], each request (header and
//! payload as they arrived) to [`Server::handle_owned`], whose reply is sent
//! at once (the payload buffer goes back to the transport, or to the copy
//! engine for an offloaded write and back to the transport after) — then collects the copy engine's completions and sends the
//! replies of offloaded writes. When a pass finds nothing it first keeps
//! polling for a **bounded** while after the last activity
//! ([`PollBudget`]: at most `spin` and at most `max_empty_polls` empty
//! passes), so a ping-pong client's next request is caught without a
//! wake-up; then it **blocks**: on UCX, `poll(2)` on the worker's event fd
//! (armed) and the engine's eventfd together; in process, the network's
//! condvar (bounded to [`INPROC_ENGINE_SLICE`] while copies are outstanding,
//! since a condvar and an fd cannot be waited on together). An idle loop
//! never spins: with no activity it blocks at once.
//!
//! Invariants:
//! - Every request gets exactly one reply, from the server core: at once, or
//!   when its copy completes. Replies to a connection that is gone are dropped
//!   (the copy itself still completes: the region stays consistent).
//! - The loop stops when `stop` is set, after every offloaded write has
//!   completed; it notices `stop` within [`IDLE_WAIT`].
//! - [`register_data_area`] registers exactly the pool's data area, and only
//!   where the transport's one-sided access is on. Where the transport
//!   confines accesses to registrations, a one-sided peer cannot reach the
//!   superblock (with the access key), the directory or the logs; where it
//!   does not (UCX over tcp and sm), HELLO says the whole process is
//!   reachable, and one-sided access is on only if the operator asked.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use transport::{
    ConnId, Event, InProcTransport, LocalRegionId, Reach, RegisterError, RequestId, Transport, UcxTransport,
};

use crate::copy_engine::Ticket;
use crate::proto::{OneSidedReach, RESPONSE_HEADER_BYTES};
use crate::server::{Action, ClientId, Completed, OneSided, Server};

/// Longest the loop sleeps when idle before looking at `stop` again.
pub const IDLE_WAIT: Duration = Duration::from_millis(50);

/// In process, the slice the loop waits on the network while copies are
/// outstanding, before it looks at the engine again.
pub const INPROC_ENGINE_SLICE: Duration = Duration::from_micros(200);

/// The poll budget lives in the reactor (the loop below `smr` too);
/// re-exported here for the client and `pmwire serve`.
pub use reactor::PollBudget;

/// Events taken from the transport per poll.
const EVENTS_PER_POLL: usize = 256;

/// A transport the loop can sleep on together with another descriptor.
pub trait ServeTransport: Transport {
    /// Blocks until the transport may have events, `extra` (the copy
    /// engine's eventfd) is readable, or `timeout` passes. Never spins.
    fn block_with(&mut self, extra: Option<RawFd>, timeout: Duration);
}

impl ServeTransport for UcxTransport {
    fn block_with(&mut self, extra: Option<RawFd>, timeout: Duration) {
        let Some(extra) = extra else {
            // A failed wait is reported again by the next poll.
            let _ = self.wait(timeout);
            return;
        };
        // A zero wait progresses and arms the worker (or finds events).
        if self.wait(Duration::ZERO).unwrap_or(true) {
            return;
        }
        let mut fds = [
            libc::pollfd { fd: self.worker().event_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: extra, events: libc::POLLIN, revents: 0 },
        ];
        if let Err(error) = transport::ucx::poll_fds(&mut fds, timeout) {
            panic!("poll failed: {error}");
        }
    }
}

impl ServeTransport for InProcTransport {
    fn block_with(&mut self, extra: Option<RawFd>, timeout: Duration) {
        let timeout = if extra.is_some() { timeout.min(INPROC_ENGINE_SLICE) } else { timeout };
        let _ = self.wait(timeout);
    }
}

/// Registers the server's data area with `transport` and records the
/// exported descriptor in the server, so HELLO carries the rkey, address
/// and how far one-sided access reaches; registers nothing (and returns
/// `None`: HELLO says one-sided access is off) where the transport's
/// one-sided access is off. Remote writes are CPU stores on tcp and sm
/// (`writes_bypass_cache: false`).
pub fn register_data_area<T: Transport>(server: &mut Server, transport: &mut T) -> Result<Option<LocalRegionId>, RegisterError> {
    let reach = match transport.reach() {
        Reach::Off => {
            server.set_one_sided(None);
            return Ok(None);
        }
        Reach::Registered => OneSidedReach::DataArea,
        Reach::Process => OneSidedReach::Process,
    };
    let (base, bytes) = server.data_area();
    assert!(base + bytes <= pmem::Media::len(server.region()), "data area inside the region");
    // SAFETY: base + bytes is inside the mapping (asserted); `base` fits usize
    // because the region is mapped.
    let start = unsafe { server.region().as_ptr().add(base as usize) };
    // SAFETY: the caller keeps the server (and its mapping) alive as long as
    // the transport; peers may only write the data area, which the server
    // core treats as client-owned bytes.
    let region = unsafe { transport.register(start, bytes as usize) }?;
    let desc = transport.export(region)?;
    assert!(desc.len == bytes, "the exported length is the data area");
    server.set_one_sided(Some(OneSided { rkey: desc.rkey, remote_addr: desc.addr, writes_bypass_cache: false, reach }));
    Ok(Some(region))
}

/// What a [`serve`] run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServeStats {
    /// Requests handled.
    pub requests: u64,
    /// Of which offloaded to the copy engine.
    pub offloaded: u64,
    /// RpcOffload writes copied inline on the loop instead (small, engine
    /// idle: [`crate::server::ServerConfig::copy_inline_max_bytes`]).
    pub inlined: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Replies the transport refused (their connection was gone).
    pub replies_dropped: u64,
    /// Passes of the loop (each polls the transport once).
    pub passes: u64,
    /// Times the loop blocked.
    pub blocks: u64,
}

/// Serves until `stop` is set and every offloaded write has been answered,
/// polling after activity as [`PollBudget::default`] allows.
pub fn serve<T: ServeTransport>(server: &mut Server, transport: &mut T, stop: &AtomicBool) -> ServeStats {
    serve_with(server, transport, stop, PollBudget::default())
}

/// [`serve`] with a chosen [`PollBudget`].
pub fn serve_with<T: ServeTransport>(server: &mut Server, transport: &mut T, stop: &AtomicBool, budget: PollBudget) -> ServeStats {
    let mut state = Loop::default();
    let inlined_before = server.offloads_inlined();
    // No activity yet (the empty-poll budget is spent): an idle loop blocks at once.
    let (mut last_activity, mut empty) = (Instant::now(), budget.max_empty_polls);
    loop {
        state.stats.passes += 1;
        let (handled, more) = state.drain(server, transport);
        let finished = state.finish_copies(server, transport);
        if stop.load(Ordering::Acquire) && server.pending() == 0 {
            state.stats.inlined = server.offloads_inlined() - inlined_before;
            return state.stats;
        }
        if handled + finished > 0 || transport.progressed() {
            (last_activity, empty) = (Instant::now(), 0);
        } else {
            empty = empty.saturating_add(1);
        }
        if more || budget.keep_polling(last_activity, empty) {
            std::hint::spin_loop();
            continue;
        }
        let engine = if server.pending() > 0 {
            if server.arm_completions() {
                continue; // a copy finished since the last look
            }
            server.completion_fd()
        } else {
            None
        };
        state.stats.blocks += 1;
        transport.block_with(engine, IDLE_WAIT);
        // The wake-up is activity only if the next pass finds some.
        empty = budget.max_empty_polls;
    }
}

#[derive(Default)]
struct Loop {
    events: Vec<Event>,
    reply: Vec<u8>,
    done: Vec<Completed>,
    /// Offloaded writes awaiting their copy: whom to answer.
    offloaded: Vec<(Ticket, RequestId)>,
    stats: ServeStats,
}

impl Loop {
    /// Handles one batch of events: how many, and whether the batch was
    /// full (more may wait).
    fn drain<T: Transport>(&mut self, server: &mut Server, transport: &mut T) -> (usize, bool) {
        let n = transport.poll(&mut self.events, EVENTS_PER_POLL);
        for event in std::mem::take(&mut self.events) {
            match event {
                Event::Accepted(conn) => {
                    self.stats.accepted += 1;
                    server.connect(client_id(conn));
                }
                Event::Disconnected { conn, .. } => {
                    server.disconnect(client_id(conn));
                    self.offloaded.retain(|(_, request)| request.conn() != conn);
                }
                Event::Request(request) => {
                    self.stats.requests += 1;
                    let client = client_id(request.id.conn());
                    let (action, payload) = server.handle_owned(client, &request.header, request.payload, &mut self.reply);
                    if let Some(payload) = payload {
                        transport.recycle(payload);
                    }
                    match action {
                        Action::Reply => {
                            let payload = self.reply.split_off(RESPONSE_HEADER_BYTES);
                            self.send(transport, request.id, payload);
                        }
                        Action::Offloaded(ticket) => {
                            self.stats.offloaded += 1;
                            self.offloaded.push((ticket, request.id));
                        }
                    }
                }
                // The remote protocol is calls only: a peer sending one-way
                // messages speaks something else, and is closed.
                Event::Message { conn, payload, .. } => {
                    transport.recycle_payload(payload);
                    transport.close(conn);
                }
                // The server starts no operations of its own.
                Event::Completion(_) => {}
            }
        }
        (n, n == EVENTS_PER_POLL)
    }

    /// Sends the replies of completed copies; how many copies completed.
    fn finish_copies<T: Transport>(&mut self, server: &mut Server, transport: &mut T) -> usize {
        server.poll_completions(&mut self.done);
        let completed = self.done.len();
        // Taken out and put back, so the list keeps its capacity: no
        // allocation per completion on the offload path.
        let mut done = std::mem::take(&mut self.done);
        for completed in done.drain(..) {
            let Some(at) = self.offloaded.iter().position(|(t, _)| *t == completed.ticket) else {
                continue; // its connection is gone
            };
            let (_, request) = self.offloaded.swap_remove(at);
            debug_assert_eq!(client_id(request.conn()), completed.client);
            self.reply.clear();
            self.reply.extend_from_slice(&completed.reply);
            self.send(transport, request, Vec::new());
        }
        self.done = done;
        while let Some(buffer) = server.take_released() {
            transport.recycle(buffer);
        }
        completed
    }

    fn send<T: Transport>(&mut self, transport: &mut T, request: RequestId, payload: Vec<u8>) {
        if transport.reply(request, &self.reply[..RESPONSE_HEADER_BYTES], payload).is_err() {
            self.stats.replies_dropped += 1;
        }
    }
}

/// The server core's name for a transport connection.
pub fn client_id(conn: ConnId) -> ClientId {
    conn.0 as ClientId
}
