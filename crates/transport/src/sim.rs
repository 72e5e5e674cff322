//! A seeded, simulated network for deterministic tests: [`SimNetwork`] and
//! its nodes' [`SimTransport`]s. One seed drives every random choice, a
//! virtual clock is the only time, and faults are injected on purpose:
//! latency, loss, duplication and reordering of one-way messages,
//! partitions (one direction or both), broken connections, and nodes that
//! go down and restart. Same seed, same calls from the driver ⇒ the same
//! delivery schedule, bit for bit.
//!
//! Why a module of its own rather than more of [`crate::InProcNetwork`]:
//! that network is shared between threads (a mutex and a condvar, and
//! `wait` sleeps in real time) and promises that a request is in the peer's
//! queue when `call` returns, which the remote crate's tests rely on. The
//! simulator is the opposite on each point: one thread (`Rc<RefCell>`),
//! nothing arrives until the driver advances the clock, and `wait` never
//! blocks. Both share the window and request bookkeeping (`wire::Window`,
//! `wire::Answering`).
//!
//! # Driving it
//! Nothing moves by itself. The driver polls every node until none has
//! events, then asks [`SimNetwork::next_due_ns`] when the next thing is due
//! and calls [`SimNetwork::advance_to`] with it (or with the instant its own
//! timers want, whichever is first); deliveries happen inside `advance_to`,
//! in due order (ties in the order they were scheduled).
//!
//! # Contract kept, and where it is harsher
//! - Connections, calls and replies keep the seam's contract exactly: a
//!   connection's requests, responses and accept travel as one FIFO stream
//!   per direction, and every call completes once, with its response or
//!   [`OpError::Disconnected`]. A request or response that cannot be
//!   delivered (its direction is cut, or a `break_per_million` draw) breaks
//!   the connection instead: both ends see [`Event::Disconnected`].
//! - One-way messages are harsher than over UCX, as Raft must tolerate
//!   (reconnects lose and resend): each may be dropped (at send), duplicated
//!   (at delivery; the copy takes its own latency), or, with
//!   [`Faults::reorder`], overtaken by later messages. A message across a cut
//!   direction is dropped and its connection stays up, so an asymmetric
//!   partition (A→B cut, B→A flowing) is observable as such. Without
//!   `reorder` messages keep the connection's FIFO order with calls.
//! - A send holds a slot of its sender's window until the receiver's `poll`
//!   hands it out or it is dropped (a duplicate's copy holds it, not the
//!   original), so a node that does not poll holds at most `window` sends
//!   per connection, and at most twice that in its queue.
//! - Connecting to a node that is down or cut off (either direction) fails
//!   after [`Faults::connect_timeout_ns`]: operations started meanwhile
//!   complete with `Disconnected`, sends are lost. Virtual time always
//!   passes before a failed connect is reported, so a driver that
//!   reconnects at once cannot loop without advancing the clock.
//! - [`SimNetwork::down`]: every connection of the node breaks (its peers
//!   see `Disconnected`), its queued events are discarded, and nothing
//!   reaches it; its transport refuses everything from then on.
//!   [`SimNetwork::restart`] gives a fresh transport for the same address,
//!   with no connections: the restarted process reconnects. Dropping a live
//!   node's transport takes the node down.
//! - One-sided access is off ([`Reach::Off`], as over UCX by default):
//!   nothing can be registered or attached, so put, get and atomic fail
//!   with [`OpError::UnknownRegion`]; `flush` completes at once and `fence`
//!   does nothing. Replication uses messages only.
//!
//! Invariants (asserted): every token completes at most once (exactly once
//! once the network drains); a connection's flights are removed when it
//! breaks; in flight there are at most `3 * window + 1` items per
//! connection and direction, and a node's queue holds at most
//! `5 * window + 2` entries per connection it has.

use std::cell::RefCell;
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use ucx_sys as sys;

use crate::error::{AttachError, ConnectError, OpError, RegisterError, Status, WaitError};
use crate::inproc::check_sizes;
use crate::seam::{
    AtomicOp, Completion, ConnId, Event, Limits, LocalRegionId, Output, Reach, RegionDescriptor,
    RemoteRegionId, Request, RequestId, Transport,
};
use crate::wire::{Answering, Window};

/// A node's address in a [`SimNetwork`]; it stays the node's across
/// restarts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SimAddr(pub u32);

/// How long a delivery takes: uniform in `min_ns..=max_ns`, except that a
/// `tail_per_million` share take uniform in `max_ns..=tail_max_ns` (the
/// slow tail: a retransmission, a descheduled receiver).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Latency {
    /// Shortest delivery.
    pub min_ns: u64,
    /// Longest delivery outside the tail.
    pub max_ns: u64,
    /// Deliveries in a million that fall in the tail.
    pub tail_per_million: u32,
    /// Longest delivery in the tail.
    pub tail_max_ns: u64,
}

/// The faults the network injects; change them at any time with
/// [`SimNetwork::set_faults`]. Probabilities are per million.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Faults {
    /// Delivery latency of everything (accepts, requests, responses, messages).
    pub latency: Latency,
    /// One-way messages lost at send.
    pub drop_per_million: u32,
    /// One-way messages delivered twice (the copy after its own latency).
    pub duplicate_per_million: u32,
    /// One-way messages each take their own latency, so a later one may
    /// arrive first. Off: they keep the connection's FIFO order.
    pub reorder: bool,
    /// Requests, responses and accepts that break their connection
    /// instead of arriving.
    pub break_per_million: u32,
    /// How long a connect to a node that is down or cut off takes to fail.
    pub connect_timeout_ns: u64,
}

impl Faults {
    /// A perfect network: 10 µs per delivery, nothing lost, duplicated,
    /// reordered or broken.
    pub fn none() -> Faults {
        Faults {
            latency: Latency {
                min_ns: 10_000,
                max_ns: 10_000,
                tail_per_million: 0,
                tail_max_ns: 10_000,
            },
            drop_per_million: 0,
            duplicate_per_million: 0,
            reorder: false,
            break_per_million: 0,
            connect_timeout_ns: 1_000_000,
        }
    }

    /// A hostile network: 5–200 µs with 1% up to 5 ms, 5% of messages
    /// lost and 2% duplicated, reordering on, one reliable delivery in 2000
    /// breaking its connection.
    pub fn harsh() -> Faults {
        Faults {
            latency: Latency {
                min_ns: 5_000,
                max_ns: 200_000,
                tail_per_million: 10_000,
                tail_max_ns: 5_000_000,
            },
            drop_per_million: 50_000,
            duplicate_per_million: 20_000,
            reorder: true,
            break_per_million: 500,
            connect_timeout_ns: 1_000_000,
        }
    }

    fn check(&self) {
        let l = &self.latency;
        assert!(l.min_ns <= l.max_ns);
        assert!(l.max_ns <= l.tail_max_ns);
        assert!(l.tail_max_ns < u64::MAX / 4);
        assert!(self.connect_timeout_ns >= 1, "a failed connect takes time");
        for p in [l.tail_per_million, self.drop_per_million, self.duplicate_per_million, self.break_per_million] {
            assert!(p <= 1_000_000);
        }
    }
}

/// What the network did so far (for tests to see each fault happen).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// One-way messages accepted by `send`.
    pub messages_sent: u64,
    /// One-way messages (copies included) put in a receiver's queue.
    pub messages_delivered: u64,
    /// One-way messages lost (at send, across a cut, or with their connection).
    pub messages_dropped: u64,
    /// One-way messages duplicated.
    pub messages_duplicated: u64,
    /// Connections broken by a fault, a cut, a down node or `break_connection`.
    pub connections_broken: u64,
    /// Connects that failed after the timeout.
    pub connects_failed: u64,
}

/// The status a broken connection reports.
const BROKEN: Status = Status(sys::UCS_ERR_CONNECTION_RESET);
/// The status a connect that timed out reports.
const UNREACHABLE: Status = Status(sys::UCS_ERR_UNREACHABLE);

/// A simulated network: a handle to share between the driver and its
/// nodes (one thread). See the module docs.
#[derive(Clone)]
pub struct SimNetwork {
    world: Rc<RefCell<World>>,
}

/// One node's transport on a [`SimNetwork`]: valid until its node goes
/// down; [`SimNetwork::restart`] makes the next one.
pub struct SimTransport {
    world: Rc<RefCell<World>>,
    node: u32,
    incarnation: u32,
}

struct World {
    limits: Limits,
    faults: Faults,
    rng: Xoshiro256PlusPlus,
    now_ns: u64,
    nodes: Vec<Node>,
    /// Directed cuts (from, to), sorted, no duplicates.
    cuts: Vec<(u32, u32)>,
    flights: BinaryHeap<Reverse<Flight>>,
    next_order: u64,
    next_link: u64,
    stats: SimStats,
}

struct Node {
    up: bool,
    incarnation: u32,
    queue: VecDeque<Queued>,
    conns: Vec<Option<End>>,
}

/// One end of a connection.
struct End {
    /// The connection's id, unique in the network (both ends share it).
    link: u64,
    /// The other end (node, conn); `None` while a connect to an unreachable
    /// node waits to fail.
    peer: Option<(u32, u32)>,
    open: bool,
    window: Window,
    answering: Answering,
    /// When the last request, response or in-order message this end sent
    /// arrives: the next one arrives no earlier (FIFO per direction).
    stream_due_ns: u64,
    /// When the connection's accept arrives (the connecting end; 0 at the
    /// other): nothing this end sends arrives before it.
    accept_due_ns: u64,
}

/// Something on its way: delivered to end `to` of connection `link`, if
/// that end is still there, at `due_ns`.
struct Flight {
    due_ns: u64,
    order: u64,
    to: (u32, u32),
    link: u64,
    cargo: Cargo,
}

enum Cargo {
    Accept,
    Request { call: u64, header: Vec<u8>, payload: Vec<u8> },
    Response { call: u64, header: Vec<u8>, payload: Vec<u8> },
    /// `held`: the send's slot in the sender's window; `copy`: a duplicate.
    Message { header: Vec<u8>, payload: Vec<u8>, held: Option<u64>, copy: bool },
    /// The connect of end `to` reached nobody: fail it.
    ConnectFails,
}

impl PartialEq for Flight {
    fn eq(&self, other: &Flight) -> bool {
        (self.due_ns, self.order) == (other.due_ns, other.order)
    }
}
impl Eq for Flight {}
impl PartialOrd for Flight {
    fn partial_cmp(&self, other: &Flight) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Flight {
    fn cmp(&self, other: &Flight) -> Ordering {
        (self.due_ns, self.order).cmp(&(other.due_ns, other.order))
    }
}

enum Queued {
    Ready(Event),
    /// A completion that still holds its window slot (stale if the
    /// connection failed meanwhile: then it completed with `Disconnected`).
    Done { conn: u32, call: u64, result: Result<Output, OpError> },
    /// `held`: (sender node, sender conn, link, send id) to release at poll.
    Message { conn: u32, header: Vec<u8>, payload: Vec<u8>, held: Option<(u32, u32, u64, u64)> },
    Gone { conn: u32, cause: Option<Status> },
}

impl SimNetwork {
    /// A network with no nodes yet, at virtual time 0, whose every random
    /// choice comes from `seed`.
    pub fn new(seed: u64, limits: Limits, faults: Faults) -> SimNetwork {
        limits.check();
        faults.check();
        let world = World {
            limits,
            faults,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            now_ns: 0,
            nodes: Vec::new(),
            cuts: Vec::new(),
            flights: BinaryHeap::new(),
            next_order: 0,
            next_link: 0,
            stats: SimStats::default(),
        };
        SimNetwork { world: Rc::new(RefCell::new(world)) }
    }

    /// Adds a node (the next address) and returns its transport.
    pub fn node(&self) -> SimTransport {
        let mut w = self.world.borrow_mut();
        let node = w.nodes.len() as u32;
        w.nodes.push(Node { up: true, incarnation: 0, queue: VecDeque::new(), conns: Vec::new() });
        SimTransport { world: self.world.clone(), node, incarnation: 0 }
    }

    /// The virtual time, in nanoseconds since the network was made.
    pub fn now_ns(&self) -> u64 {
        self.world.borrow().now_ns
    }

    /// When the next delivery is due, if anything is in flight.
    pub fn next_due_ns(&self) -> Option<u64> {
        self.world.borrow().flights.peek().map(|f| f.0.due_ns)
    }

    /// Moves the clock to `t_ns` (not back), delivering everything due by
    /// then, in due order.
    pub fn advance_to(&self, t_ns: u64) {
        let mut w = self.world.borrow_mut();
        assert!(t_ns >= w.now_ns, "the clock does not go back ({t_ns} < {})", w.now_ns);
        while w.flights.peek().is_some_and(|f| f.0.due_ns <= t_ns) {
            let Reverse(flight) = w.flights.pop().expect("peeked");
            assert!(flight.due_ns >= w.now_ns);
            w.now_ns = flight.due_ns;
            w.deliver(flight);
        }
        w.now_ns = t_ns;
    }

    /// Replaces the faults from now on (flights already scheduled keep
    /// their times).
    pub fn set_faults(&self, faults: Faults) {
        faults.check();
        self.world.borrow_mut().faults = faults;
    }

    /// Cuts the direction `from` → `to`: messages that way are dropped,
    /// requests and responses that way break their connection, and
    /// connects either way fail. The other direction still flows.
    pub fn cut(&self, from: SimAddr, to: SimAddr) {
        let mut w = self.world.borrow_mut();
        if let Err(at) = w.cuts.binary_search(&(from.0, to.0)) {
            w.cuts.insert(at, (from.0, to.0));
        }
    }

    /// Cuts both directions between every node of `side` and every node
    /// not in it.
    pub fn partition(&self, side: &[SimAddr]) {
        let count = self.world.borrow().nodes.len() as u32;
        for a in side {
            for b in (0..count).map(SimAddr).filter(|b| !side.contains(b)) {
                self.cut(*a, b);
                self.cut(b, *a);
            }
        }
    }

    /// Heals the direction `from` → `to`.
    pub fn heal(&self, from: SimAddr, to: SimAddr) {
        self.world.borrow_mut().cuts.retain(|&c| c != (from.0, to.0));
    }

    /// Heals every cut.
    pub fn heal_all(&self) {
        self.world.borrow_mut().cuts.clear();
    }

    /// Breaks connection `conn` of `node` now: both ends see
    /// `Disconnected` (with a cause), their calls fail, flights are lost.
    pub fn break_connection(&self, node: SimAddr, conn: ConnId) {
        self.world.borrow_mut().break_link(node.0, conn.0, Some(BROKEN));
    }

    /// Takes `node` down: every connection of it breaks, its queued events
    /// are discarded, nothing reaches it, and its transport refuses
    /// everything. Nothing happens if it is down already.
    pub fn down(&self, node: SimAddr) {
        self.world.borrow_mut().down(node.0);
    }

    /// Brings a node that is down back with a fresh transport (no
    /// connections, nothing queued) at the same address.
    pub fn restart(&self, node: SimAddr) -> SimTransport {
        let mut w = self.world.borrow_mut();
        let n = &mut w.nodes[node.0 as usize];
        assert!(!n.up, "restart of {node:?}, which is up");
        n.up = true;
        n.incarnation += 1;
        assert!(n.queue.is_empty() && n.conns.is_empty());
        SimTransport { world: self.world.clone(), node: node.0, incarnation: n.incarnation }
    }

    /// Whether `node` is up.
    pub fn is_up(&self, node: SimAddr) -> bool {
        self.world.borrow().nodes[node.0 as usize].up
    }

    /// What the network did so far.
    pub fn stats(&self) -> SimStats {
        self.world.borrow().stats
    }

    /// Entries in `node`'s queue (events not yet polled, stale ones included).
    pub fn queued(&self, node: SimAddr) -> usize {
        self.world.borrow().nodes[node.0 as usize].queue.len()
    }

    /// Deliveries in flight.
    pub fn in_flight(&self) -> usize {
        self.world.borrow().flights.len()
    }
}

impl World {
    fn uniform(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi);
        lo + self.rng.next_u64() % (hi - lo + 1)
    }

    fn chance(&mut self, per_million: u32) -> bool {
        per_million > 0 && self.rng.next_u64() % 1_000_000 < u64::from(per_million)
    }

    fn latency_ns(&mut self) -> u64 {
        let l = self.faults.latency;
        if self.chance(l.tail_per_million) {
            self.uniform(l.max_ns, l.tail_max_ns)
        } else {
            self.uniform(l.min_ns, l.max_ns)
        }
    }

    fn is_cut(&self, from: u32, to: u32) -> bool {
        self.cuts.binary_search(&(from, to)).is_ok()
    }

    fn live(&self, node: u32, incarnation: u32) -> bool {
        let n = &self.nodes[node as usize];
        n.up && n.incarnation == incarnation
    }

    /// Bound on a node's queue: per connection, a window of requests, two of
    /// completions (stale ones too), two of messages, an accept and an end.
    fn max_queue(&self) -> usize {
        self.limits.max_conns * (5 * self.limits.window + 2)
    }

    fn push(&mut self, node: u32, q: Queued) {
        let max = self.max_queue();
        let queue = &mut self.nodes[node as usize].queue;
        queue.push_back(q);
        assert!(queue.len() <= max, "node {node}'s queue passed its bound {max}");
    }

    fn end(&mut self, node: u32, conn: u32) -> Option<&mut End> {
        self.nodes[node as usize].conns.get_mut(conn as usize)?.as_mut()
    }

    fn open_end(&mut self, node: u32, conn: ConnId) -> Result<&mut End, OpError> {
        match self.end(node, conn.0) {
            Some(end) if end.open => Ok(end),
            _ => Err(OpError::Disconnected(conn.0)),
        }
    }

    fn schedule(&mut self, due_ns: u64, to: (u32, u32), link: u64, cargo: Cargo) {
        let order = self.next_order;
        self.next_order += 1;
        self.flights.push(Reverse(Flight { due_ns, order, to, link, cargo }));
        // Per connection and direction: a window each of requests and
        // responses, a window of held messages, an accept or connect failure.
        let links = self.nodes.len() * self.limits.max_conns;
        let max = links * 2 * (3 * self.limits.window + 1);
        assert!(self.flights.len() <= max, "{} flights passed the bound {max}", self.flights.len());
    }

    /// When something end (node, conn) sends on its FIFO stream arrives.
    fn stream_due(&mut self, node: u32, conn: u32) -> u64 {
        let arrives = self.now_ns + self.latency_ns();
        let end = self.end(node, conn).expect("sending end");
        end.stream_due_ns = end.stream_due_ns.max(arrives);
        end.stream_due_ns
    }

    /// Fails one end: its operations complete with `Disconnected`, then its
    /// `Disconnected` is queued.
    fn fail_end(&mut self, node: u32, conn: u32, cause: Option<Status>) {
        let Some(end) = self.end(node, conn) else { return };
        if !end.open {
            return;
        }
        end.open = false;
        for (_, token) in end.window.drain() {
            let failed = Completion { conn: ConnId(conn), token, result: Err(OpError::Disconnected(conn)) };
            self.push(node, Queued::Ready(Event::Completion(failed)));
        }
        self.push(node, Queued::Gone { conn, cause });
    }

    /// Breaks the connection of end (node, conn) at both ends and drops its
    /// flights.
    fn break_link(&mut self, node: u32, conn: u32, cause: Option<Status>) {
        let Some(end) = self.end(node, conn) else { return };
        if !end.open {
            return;
        }
        let (link, peer) = (end.link, end.peer);
        self.fail_end(node, conn, cause);
        if let Some((pn, pc)) = peer {
            self.fail_end(pn, pc, cause);
        }
        let lost = self.flights.iter().filter(|f| f.0.link == link && matches!(f.0.cargo, Cargo::Message { .. }));
        self.stats.messages_dropped += lost.count() as u64;
        self.flights.retain(|f| f.0.link != link);
        if cause.is_some() {
            self.stats.connections_broken += 1;
        }
    }

    fn down(&mut self, node: u32) {
        if !self.nodes[node as usize].up {
            return;
        }
        for conn in 0..self.nodes[node as usize].conns.len() as u32 {
            self.break_link(node, conn, Some(BROKEN));
        }
        let n = &mut self.nodes[node as usize];
        n.up = false;
        n.queue.clear();
        n.conns.clear();
    }

    /// Gives back send `id`'s slot in end (node, conn) of `link`, if that
    /// end is still the one that sent it.
    fn release(&mut self, node: u32, conn: u32, link: u64, id: u64) {
        if let Some(end) = self.end(node, conn).filter(|e| e.open && e.link == link) {
            assert!(end.window.finish_send(id), "a send's slot is given back once");
        }
    }

    fn deliver(&mut self, flight: Flight) {
        let Flight { to: (node, conn), link, cargo, .. } = flight;
        let Some(end) = self.end(node, conn).filter(|e| e.open && e.link == link) else {
            unreachable!("a broken connection's flights are dropped with it")
        };
        let Some((pn, pc)) = end.peer else {
            assert!(matches!(cargo, Cargo::ConnectFails));
            self.stats.connects_failed += 1;
            self.fail_end(node, conn, Some(UNREACHABLE));
            return;
        };
        let cut = self.is_cut(pn, node);
        match cargo {
            Cargo::Message { header, payload, held, copy } => {
                if cut {
                    self.stats.messages_dropped += 1;
                    if let Some(id) = held {
                        self.release(pn, pc, link, id);
                    }
                    return;
                }
                let mut held = held;
                if !copy && self.chance(self.faults.duplicate_per_million) {
                    self.stats.messages_duplicated += 1;
                    let due = self.now_ns + self.latency_ns();
                    let again = Cargo::Message { header: header.clone(), payload: payload.clone(), held: held.take(), copy: true };
                    self.schedule(due, (node, conn), link, again);
                }
                self.stats.messages_delivered += 1;
                let held = held.map(|id| (pn, pc, link, id));
                self.push(node, Queued::Message { conn, header, payload, held });
            }
            _ if cut || self.chance(self.faults.break_per_million) => self.break_link(node, conn, Some(BROKEN)),
            Cargo::Accept => self.push(node, Queued::Ready(Event::Accepted(ConnId(conn)))),
            Cargo::Request { call, header, payload } => {
                let end = self.end(node, conn).expect("checked above");
                assert!(end.answering.arrive(call), "a request per window slot");
                let id = RequestId { conn: ConnId(conn), call };
                self.push(node, Queued::Ready(Event::Request(Request { id, header, payload })));
            }
            Cargo::Response { call, header, payload } => {
                let result = Ok(Output::Response { header, payload });
                self.push(node, Queued::Done { conn, call, result });
            }
            Cargo::ConnectFails => unreachable!("a connected end's connect does not fail"),
        }
    }

    fn connect(&mut self, me: u32, to: u32) -> Result<ConnId, ConnectError> {
        if to as usize >= self.nodes.len() {
            return Err(ConnectError::NoPeer(format!("{:?}", SimAddr(to))));
        }
        let limits = self.limits;
        let mine = free_conn_slot(&mut self.nodes[me as usize], limits.max_conns)?;
        let link = self.next_link;
        self.next_link += 1;
        self.nodes[me as usize].conns[mine as usize] = Some(new_end(link, None, &limits));
        let reachable = self.nodes[to as usize].up && !self.is_cut(me, to) && !self.is_cut(to, me);
        let theirs = if reachable { free_conn_slot(&mut self.nodes[to as usize], limits.max_conns).ok() } else { None };
        let Some(theirs) = theirs else {
            let due = self.now_ns + self.faults.connect_timeout_ns;
            self.schedule(due, (me, mine), link, Cargo::ConnectFails);
            return Ok(ConnId(mine));
        };
        self.nodes[to as usize].conns[theirs as usize] = Some(new_end(link, Some((me, mine)), &limits));
        self.end(me, mine).expect("made above").peer = Some((to, theirs));
        // The accept leads the stream: nothing this end sends arrives before it.
        let due = self.stream_due(me, mine);
        self.end(me, mine).expect("made above").accept_due_ns = due;
        self.schedule(due, (to, theirs), link, Cargo::Accept);
        Ok(ConnId(mine))
    }

    fn send(&mut self, me: u32, conn: ConnId, header: &[u8], payload: Vec<u8>) -> Result<(), OpError> {
        check_sizes(&self.limits, header.len(), payload.len())?;
        let end = self.open_end(me, conn)?;
        let cap = end.window.capacity();
        let id = end.window.take_send().ok_or(OpError::WindowFull(cap))?;
        let (link, peer, floor_ns) = (end.link, end.peer, end.accept_due_ns);
        self.stats.messages_sent += 1;
        let lost = self.chance(self.faults.drop_per_million);
        let Some(to) = peer.filter(|_| !lost) else {
            self.stats.messages_dropped += 1;
            assert!(self.open_end(me, conn).expect("open").window.finish_send(id));
            return Ok(());
        };
        let due = if self.faults.reorder {
            // Its own latency, but never before the connection's accept.
            (self.now_ns + self.latency_ns()).max(floor_ns)
        } else {
            self.stream_due(me, conn.0)
        };
        let cargo = Cargo::Message { header: header.to_vec(), payload, held: Some(id), copy: false };
        self.schedule(due, to, link, cargo);
        Ok(())
    }

}

fn new_end(link: u64, peer: Option<(u32, u32)>, limits: &Limits) -> End {
    End { link, peer, open: true, window: Window::new(limits.window), answering: Answering::new(), stream_due_ns: 0, accept_due_ns: 0 }
}

fn free_conn_slot(node: &mut Node, max: usize) -> Result<u32, ConnectError> {
    if let Some(i) = node.conns.iter().position(Option::is_none) {
        return Ok(i as u32);
    }
    if node.conns.len() >= max {
        return Err(ConnectError::TooMany(max));
    }
    node.conns.push(None);
    Ok(node.conns.len() as u32 - 1)
}

impl SimTransport {
    /// This node's address.
    pub fn addr(&self) -> SimAddr {
        SimAddr(self.node)
    }

    /// Runs `f` on the world if this transport's node is up (and this is
    /// its current transport); `down` otherwise.
    fn with<T>(&self, down: T, f: impl FnOnce(&mut World, u32) -> T) -> T {
        let mut w = self.world.borrow_mut();
        if !w.live(self.node, self.incarnation) {
            return down;
        }
        f(&mut w, self.node)
    }
}

impl Drop for SimTransport {
    /// The process exits: its node goes down (unless it already was, or a
    /// later transport took its place).
    fn drop(&mut self) {
        self.with((), |w, me| w.down(me));
    }
}

impl Transport for SimTransport {
    type Addr = SimAddr;

    fn connect(&mut self, addr: &SimAddr) -> Result<ConnId, ConnectError> {
        let down = Err(ConnectError::NoPeer(format!("{:?} is down: this transport is gone", self.addr())));
        self.with(down, |w, me| w.connect(me, addr.0))
    }

    fn close(&mut self, conn: ConnId) {
        self.with((), |w, me| w.break_link(me, conn.0, None));
    }

    fn window_free(&self, conn: ConnId) -> usize {
        self.with(usize::MAX, |w, me| w.open_end(me, conn).map_or(usize::MAX, |end| end.window.free()))
    }

    fn call(&mut self, conn: ConnId, header: &[u8], payload: Vec<u8>, token: u64) -> Result<(), OpError> {
        self.with(Err(OpError::Disconnected(conn.0)), |w, me| {
            check_sizes(&w.limits, header.len(), payload.len())?;
            let end = w.open_end(me, conn)?;
            let cap = end.window.capacity();
            let call = end.window.take(token).ok_or(OpError::WindowFull(cap))?;
            // Unconnected (failing after the timeout): it completes then.
            if let Some(to) = end.peer {
                let link = end.link;
                let due = w.stream_due(me, conn.0);
                let cargo = Cargo::Request { call, header: header.to_vec(), payload };
                w.schedule(due, to, link, cargo);
            }
            Ok(())
        })
    }

    fn reply(&mut self, request: RequestId, header: &[u8], payload: Vec<u8>) -> Result<(), OpError> {
        self.with(Err(OpError::Disconnected(request.conn.0)), |w, me| {
            check_sizes(&w.limits, header.len(), payload.len())?;
            let end = w.open_end(me, request.conn)?;
            if !end.answering.answer(request.call) {
                return Err(OpError::UnknownRequest);
            }
            let (link, to) = (end.link, end.peer.expect("a request came from a peer"));
            let due = w.stream_due(me, request.conn.0);
            let cargo = Cargo::Response { call: request.call, header: header.to_vec(), payload };
            w.schedule(due, to, link, cargo);
            Ok(())
        })
    }

    fn send(&mut self, conn: ConnId, header: &[u8], payload: Vec<u8>) -> Result<(), OpError> {
        self.with(Err(OpError::Disconnected(conn.0)), |w, me| w.send(me, conn, header, payload))
    }

    fn reach(&self) -> Reach {
        Reach::Off
    }

    unsafe fn register(&mut self, _addr: *mut u8, _len: usize) -> Result<LocalRegionId, RegisterError> {
        Err(RegisterError::OneSidedOff)
    }

    fn deregister(&mut self, _region: LocalRegionId) {}

    fn export(&self, _region: LocalRegionId) -> Result<RegionDescriptor, RegisterError> {
        Err(RegisterError::Empty)
    }

    fn attach(&mut self, _conn: ConnId, _desc: &RegionDescriptor) -> Result<RemoteRegionId, AttachError> {
        Err(AttachError::OneSidedOff)
    }

    fn put(&mut self, conn: ConnId, region: RemoteRegionId, _offset: u64, _buf: Vec<u8>, _token: u64) -> Result<(), OpError> {
        self.no_region(conn, region)
    }

    fn get(&mut self, conn: ConnId, region: RemoteRegionId, _offset: u64, _buf: Vec<u8>, _token: u64) -> Result<(), OpError> {
        self.no_region(conn, region)
    }

    fn atomic(&mut self, conn: ConnId, region: RemoteRegionId, offset: u64, _op: AtomicOp, _token: u64) -> Result<(), OpError> {
        if !offset.is_multiple_of(8) {
            return Err(OpError::Misaligned(offset));
        }
        self.no_region(conn, region)
    }

    fn flush(&mut self, conn: ConnId, token: u64) -> Result<(), OpError> {
        self.with(Err(OpError::Disconnected(conn.0)), |w, me| {
            let end = w.open_end(me, conn)?;
            let cap = end.window.capacity();
            let call = end.window.take(token).ok_or(OpError::WindowFull(cap))?;
            w.push(me, Queued::Done { conn: conn.0, call, result: Ok(Output::Flush) });
            Ok(())
        })
    }

    fn fence(&mut self) -> Result<(), OpError> {
        Ok(())
    }

    fn poll(&mut self, events: &mut Vec<Event>, max: usize) -> usize {
        self.with(0, |w, me| {
            let mut n = 0;
            while n < max {
                let Some(q) = w.nodes[me as usize].queue.pop_front() else { break };
                if let Some(event) = w.hand_out(me, q) {
                    events.push(event);
                    n += 1;
                }
            }
            n
        })
    }

    /// Never blocks (virtual time passes only in [`SimNetwork::advance_to`]):
    /// whether events are queued.
    fn wait(&mut self, _timeout: Duration) -> Result<bool, WaitError> {
        Ok(self.with(false, |w, me| !w.nodes[me as usize].queue.is_empty()))
    }
}

impl SimTransport {
    /// One-sided access is off: no region was ever attached.
    fn no_region(&mut self, conn: ConnId, region: RemoteRegionId) -> Result<(), OpError> {
        self.with(Err(OpError::Disconnected(conn.0)), |w, me| {
            w.open_end(me, conn)?;
            Err(OpError::UnknownRegion(region.0))
        })
    }
}

impl World {
    /// Turns a queue entry of `node` into the event `poll` hands out, if any.
    fn hand_out(&mut self, node: u32, q: Queued) -> Option<Event> {
        match q {
            Queued::Ready(e) => Some(e),
            Queued::Done { conn, call, result } => {
                let end = self.end(node, conn).expect("queued completion of a live slot");
                let token = end.window.finish(call)?;
                Some(Event::Completion(Completion { conn: ConnId(conn), token, result }))
            }
            Queued::Message { conn, header, payload, held } => {
                if let Some((sn, sc, link, id)) = held {
                    self.release(sn, sc, link, id);
                }
                if !self.end(node, conn).expect("queued message of a live slot").open {
                    self.stats.messages_dropped += 1;
                    return None;
                }
                Some(Event::Message { conn: ConnId(conn), header, payload: payload.into() })
            }
            Queued::Gone { conn, cause } => {
                self.nodes[node as usize].conns[conn as usize] = None;
                Some(Event::Disconnected { conn: ConnId(conn), cause })
            }
        }
    }
}
