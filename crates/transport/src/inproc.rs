//! The in-process transport: nodes of one [`InProcNetwork`] connect to each
//! other inside a process, RPCs are moved between queues, and "remote
//! memory" is the peer node's registered memory, accessed directly. It makes
//! the RPC layer testable without sockets, deterministically: nothing
//! happens unless a node calls into the network, and every queue is FIFO.
//!
//! Semantics (the same contract as [`crate::UcxTransport`], made exact):
//! - A request is in the peer's queue when `call` returns; a one-sided
//!   operation has been performed on the peer's memory when `put`/`get`/
//!   `atomic` returns, and its completion is queued. So everything is
//!   "complete at the target" at once, and `flush` just completes.
//! - A completion holds its window slot until [`Transport::poll`] hands it
//!   out, so the window bound is observable exactly as with UCX.
//! - A one-way message ([`Transport::send`]) is in the peer's queue, in the
//!   connection's order, when `send` returns; it holds a slot of the
//!   *sender's* window until the peer's `poll` hands it out (it settles
//!   then), so a peer that never polls holds at most `window` of them.
//! - [`InProcNetwork::crash`] fails every connection of a node, as a peer
//!   crash would (completions with [`OpError::Disconnected`], then
//!   [`Event::Disconnected`] with a cause).
//!
//! Nodes may live on different threads (the network is behind one mutex and
//! [`Transport::wait`] sleeps on a condvar); a deterministic test drives them
//! all from one thread.
//!
//! Invariants: every operation started with a token completes exactly once;
//! queues are bounded by the windows (requests, messages and completions)
//! plus one accept and one disconnect per connection.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ucx_sys as sys;

use crate::error::{AttachError, ConnectError, OpError, RegisterError, Status, WaitError};
use crate::seam::{
    check_range, AtomicOp, Completion, ConnId, Event, Limits, LocalRegionId, Output, Reach,
    RegionDescriptor, RemoteRegionId, Request, RequestId, Transport,
};
use crate::wire::{Answering, Window};

/// Names a node of an [`InProcNetwork`] (its [`Transport::Addr`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeId(pub u32);

/// A set of in-process nodes that can connect to each other.
#[derive(Clone)]
pub struct InProcNetwork {
    shared: Arc<Shared>,
}

struct Shared {
    net: Mutex<Net>,
    wake: Condvar,
}

struct Net {
    limits: Limits,
    nodes: Vec<Node>,
}

#[derive(Default)]
struct Node {
    queue: VecDeque<Queued>,
    conns: Vec<Option<Conn>>,
    regions: Vec<Option<Mem>>,
}

/// What sits in a node's queue: events ready as they are, and completions
/// that still hold a window slot.
enum Queued {
    Ready(Event),
    Done {
        conn: u32,
        call: u64,
        result: Result<Output, OpError>,
    },
    Gone {
        conn: u32,
        cause: Option<Status>,
    },
    /// A one-way message; `held` is the slot it holds in its sender's window
    /// (sender node, sender connection, send id).
    Message {
        conn: u32,
        header: Vec<u8>,
        payload: Vec<u8>,
        held: (u32, u32, u64),
    },
}

struct Conn {
    peer_node: u32,
    peer_conn: u32,
    open: bool,
    window: Window,
    answering: Answering,
    remotes: Vec<Remote>,
}

#[derive(Clone, Copy)]
struct Mem {
    addr: usize,
    len: usize,
}

#[derive(Clone, Copy)]
struct Remote {
    node: u32,
    region: u32,
    addr: u64,
    len: u64,
}

/// The in-process status a crashed peer's connections fail with.
const CRASH_STATUS: Status = Status(sys::UCS_ERR_CONNECTION_RESET);

impl InProcNetwork {
    /// A network whose nodes all enforce `limits`.
    pub fn new(limits: Limits) -> InProcNetwork {
        limits.check();
        InProcNetwork {
            shared: Arc::new(Shared {
                net: Mutex::new(Net {
                    limits,
                    nodes: Vec::new(),
                }),
                wake: Condvar::new(),
            }),
        }
    }

    /// Adds a node and returns its transport.
    pub fn node(&self) -> InProcTransport {
        let mut net = self.lock();
        let id = net.nodes.len() as u32;
        net.nodes.push(Node::default());
        InProcTransport {
            shared: self.shared.clone(),
            node: id,
        }
    }

    /// Fails every connection of `node` at both ends, as if it crashed.
    pub fn crash(&self, node: NodeId) {
        let mut net = self.lock();
        let count = net.nodes.get(node.0 as usize).map_or(0, |n| n.conns.len());
        for c in 0..count as u32 {
            net.fail_conn(node.0, c, Some(CRASH_STATUS));
        }
        drop(net);
        self.shared.wake.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, Net> {
        self.shared.net.lock().expect("in-process network poisoned")
    }
}

/// One node of an [`InProcNetwork`].
pub struct InProcTransport {
    shared: Arc<Shared>,
    node: u32,
}

impl InProcTransport {
    /// This node's address.
    pub fn id(&self) -> NodeId {
        NodeId(self.node)
    }

    fn lock(&self) -> MutexGuard<'_, Net> {
        self.shared.net.lock().expect("in-process network poisoned")
    }

    /// Runs `f` with the network locked, then wakes sleepers.
    fn with_net<T>(&self, f: impl FnOnce(&mut Net, u32) -> T) -> T {
        let out = f(&mut self.lock(), self.node);
        self.shared.wake.notify_all();
        out
    }
}

impl Net {
    fn node(&mut self, n: u32) -> &mut Node {
        &mut self.nodes[n as usize]
    }

    fn conn(&mut self, n: u32, c: ConnId) -> Result<&mut Conn, OpError> {
        match self.node(n).conns.get_mut(c.0 as usize) {
            Some(Some(conn)) if conn.open => Ok(conn),
            _ => Err(OpError::Disconnected(c.0)),
        }
    }

    /// Fails one end's connection: drains its window into failed
    /// completions, queues its Disconnected, and does the same at the peer.
    fn fail_conn(&mut self, n: u32, c: u32, cause: Option<Status>) {
        let Some(Some(conn)) = self.node(n).conns.get_mut(c as usize) else {
            return;
        };
        if !conn.open {
            return;
        }
        conn.open = false;
        let (peer_node, peer_conn) = (conn.peer_node, conn.peer_conn);
        let failed = conn.window.drain();
        let node = self.node(n);
        for (_, token) in failed {
            let completion = Completion {
                conn: ConnId(c),
                token,
                result: Err(OpError::Disconnected(c)),
            };
            node.queue
                .push_back(Queued::Ready(Event::Completion(completion)));
        }
        node.queue.push_back(Queued::Gone { conn: c, cause });
        self.fail_conn(peer_node, peer_conn, cause);
    }

    /// Resolves a one-sided access to a live pointer into the peer's memory.
    fn target(
        &mut self,
        n: u32,
        c: ConnId,
        region: RemoteRegionId,
        offset: u64,
        len: u64,
    ) -> Result<*mut u8, OpError> {
        let conn = self.conn(n, c)?;
        let remote = *conn
            .remotes
            .get(region.0 as usize)
            .ok_or(OpError::UnknownRegion(region.0))?;
        check_range(offset, len, remote.len)?;
        let mem = self.nodes[remote.node as usize]
            .regions
            .get(remote.region as usize)
            .copied()
            .flatten();
        match mem {
            // The region must still be the one attached (same address and size).
            Some(mem) if mem.addr as u64 == remote.addr && mem.len as u64 == remote.len => {
                Ok((mem.addr + offset as usize) as *mut u8)
            }
            _ => Err(OpError::Ucx {
                call: "in-process access",
                status: Status(sys::UCS_ERR_INVALID_ADDR),
            }),
        }
    }

    /// Starts a one-sided op: takes a window slot; `act` performs it.
    fn one_sided(
        &mut self,
        n: u32,
        c: ConnId,
        token: u64,
        act: impl FnOnce(&mut Net) -> Result<Output, OpError>,
    ) -> Result<(), OpError> {
        let conn = self.conn(n, c)?;
        let cap = conn.window.capacity();
        let call = conn.window.take(token).ok_or(OpError::WindowFull(cap))?;
        match act(self) {
            Ok(output) => {
                self.node(n).queue.push_back(Queued::Done {
                    conn: c.0,
                    call,
                    result: Ok(output),
                });
                Ok(())
            }
            Err(e) => {
                // Did not start: give the slot back, no completion.
                self.conn(n, c).map(|conn| conn.window.finish(call)).ok();
                Err(e)
            }
        }
    }
}

impl Transport for InProcTransport {
    type Addr = NodeId;

    fn connect(&mut self, addr: &NodeId) -> Result<ConnId, ConnectError> {
        self.with_net(|net, me| {
            let peer = addr.0;
            if peer as usize >= net.nodes.len() {
                return Err(ConnectError::NoPeer(format!("{addr:?}")));
            }
            let limits = net.limits;
            let mine = free_conn_slot(net.node(me), limits.max_conns)?;
            net.node(me).conns[mine as usize] = Some(new_conn(peer, 0, &limits));
            let theirs = match free_conn_slot(net.node(peer), limits.max_conns) {
                Ok(t) => t,
                Err(e) => {
                    net.node(me).conns[mine as usize] = None;
                    return Err(e);
                }
            };
            net.node(peer).conns[theirs as usize] = Some(new_conn(me, mine, &limits));
            net.node(me).conns[mine as usize]
                .as_mut()
                .unwrap()
                .peer_conn = theirs;
            net.node(peer)
                .queue
                .push_back(Queued::Ready(Event::Accepted(ConnId(theirs))));
            Ok(ConnId(mine))
        })
    }

    fn close(&mut self, conn: ConnId) {
        self.with_net(|net, me| net.fail_conn(me, conn.0, None));
    }

    fn call(
        &mut self,
        conn: ConnId,
        header: &[u8],
        payload: Vec<u8>,
        token: u64,
    ) -> Result<(), OpError> {
        self.with_net(|net, me| {
            check_sizes(&net.limits, header.len(), payload.len())?;
            let c = net.conn(me, conn)?;
            let cap = c.window.capacity();
            let call = c.window.take(token).ok_or(OpError::WindowFull(cap))?;
            let (pn, pc) = (c.peer_node, c.peer_conn);
            let peer = net
                .conn(pn, ConnId(pc))
                .expect("an open connection's peer end is open");
            assert!(
                peer.answering.arrive(call),
                "window slots are unique per connection"
            );
            let request = Request {
                id: RequestId {
                    conn: ConnId(pc),
                    call,
                },
                header: header.to_vec(),
                payload,
            };
            net.node(pn)
                .queue
                .push_back(Queued::Ready(Event::Request(request)));
            Ok(())
        })
    }

    fn reply(
        &mut self,
        request: RequestId,
        header: &[u8],
        payload: Vec<u8>,
    ) -> Result<(), OpError> {
        self.with_net(|net, me| {
            check_sizes(&net.limits, header.len(), payload.len())?;
            let c = net.conn(me, request.conn)?;
            if !c.answering.answer(request.call) {
                return Err(OpError::UnknownRequest);
            }
            let (pn, pc) = (c.peer_node, c.peer_conn);
            let result = Ok(Output::Response {
                header: header.to_vec(),
                payload,
            });
            net.node(pn).queue.push_back(Queued::Done {
                conn: pc,
                call: request.call,
                result,
            });
            Ok(())
        })
    }

    fn window_free(&self, conn: ConnId) -> usize {
        self.lock().conn(self.node, conn).map_or(usize::MAX, |c| c.window.free())
    }

    fn send(&mut self, conn: ConnId, header: &[u8], payload: Vec<u8>) -> Result<(), OpError> {
        self.with_net(|net, me| {
            check_sizes(&net.limits, header.len(), payload.len())?;
            let c = net.conn(me, conn)?;
            let cap = c.window.capacity();
            let id = c.window.take_send().ok_or(OpError::WindowFull(cap))?;
            let (pn, pc) = (c.peer_node, c.peer_conn);
            net.node(pn).queue.push_back(Queued::Message {
                conn: pc,
                header: header.to_vec(),
                payload,
                held: (me, conn.0, id),
            });
            Ok(())
        })
    }

    fn reach(&self) -> Reach {
        Reach::Registered
    }

    unsafe fn register(
        &mut self,
        addr: *mut u8,
        len: usize,
    ) -> Result<LocalRegionId, RegisterError> {
        if addr.is_null() || len == 0 {
            return Err(RegisterError::Empty);
        }
        self.with_net(|net, me| {
            let max = net.limits.max_regions;
            let regions = &mut net.node(me).regions;
            let slot = match regions.iter().position(Option::is_none) {
                Some(i) => i,
                None if regions.len() < max => {
                    regions.push(None);
                    regions.len() - 1
                }
                None => return Err(RegisterError::TooMany(max)),
            };
            regions[slot] = Some(Mem {
                addr: addr as usize,
                len,
            });
            Ok(LocalRegionId(slot as u32))
        })
    }

    fn deregister(&mut self, region: LocalRegionId) {
        self.with_net(|net, me| {
            if let Some(r) = net.node(me).regions.get_mut(region.0 as usize) {
                *r = None;
            }
        })
    }

    fn export(&self, region: LocalRegionId) -> Result<RegionDescriptor, RegisterError> {
        let net = self.lock();
        let mem = net.nodes[self.node as usize]
            .regions
            .get(region.0 as usize)
            .copied()
            .flatten();
        let mem = mem.ok_or(RegisterError::Empty)?;
        let mut rkey = Vec::with_capacity(8);
        rkey.extend_from_slice(&self.node.to_le_bytes());
        rkey.extend_from_slice(&region.0.to_le_bytes());
        Ok(RegionDescriptor {
            addr: mem.addr as u64,
            len: mem.len as u64,
            rkey,
        })
    }

    fn attach(
        &mut self,
        conn: ConnId,
        desc: &RegionDescriptor,
    ) -> Result<RemoteRegionId, AttachError> {
        if desc.rkey.len() != 8 {
            return Err(AttachError::Malformed("in-process rkey is 8 bytes"));
        }
        let node = u32::from_le_bytes(desc.rkey[0..4].try_into().unwrap());
        let region = u32::from_le_bytes(desc.rkey[4..8].try_into().unwrap());
        self.with_net(|net, me| {
            let max = net.limits.max_remote_regions;
            let c = net
                .conn(me, conn)
                .map_err(|_| AttachError::NotConnected(conn.0))?;
            if node != c.peer_node {
                return Err(AttachError::Malformed(
                    "descriptor is not from this connection's peer",
                ));
            }
            if c.remotes.len() >= max {
                return Err(AttachError::TooMany(max));
            }
            c.remotes.push(Remote {
                node,
                region,
                addr: desc.addr,
                len: desc.len,
            });
            Ok(RemoteRegionId(c.remotes.len() as u32 - 1))
        })
    }

    fn put(
        &mut self,
        conn: ConnId,
        region: RemoteRegionId,
        offset: u64,
        buf: Vec<u8>,
        token: u64,
    ) -> Result<(), OpError> {
        self.with_net(|net, me| {
            let dst = net.target(me, conn, region, offset, buf.len() as u64)?;
            net.one_sided(me, conn, token, |_| {
                // SAFETY: dst..dst+len lies inside a registered region
                // (checked by `target`), which register's contract keeps mapped.
                unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, buf.len()) };
                Ok(Output::Put { buf })
            })
        })
    }

    fn get(
        &mut self,
        conn: ConnId,
        region: RemoteRegionId,
        offset: u64,
        mut buf: Vec<u8>,
        token: u64,
    ) -> Result<(), OpError> {
        self.with_net(|net, me| {
            let src = net.target(me, conn, region, offset, buf.len() as u64)?;
            net.one_sided(me, conn, token, |_| {
                // SAFETY: as in put, for reading.
                unsafe { std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len()) };
                Ok(Output::Get { buf })
            })
        })
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
        self.with_net(|net, me| {
            let p = net.target(me, conn, region, offset, 8)?;
            if !(p as usize).is_multiple_of(8) {
                return Err(OpError::Misaligned(offset));
            }
            net.one_sided(me, conn, token, |_| {
                // SAFETY: p is 8-byte aligned and inside a registered region;
                // all concurrent access through this network is atomic.
                let cell = unsafe { AtomicU64::from_ptr(p as *mut u64) };
                let old = match op {
                    AtomicOp::Add(x) => {
                        cell.fetch_add(x, Ordering::SeqCst);
                        0
                    }
                    AtomicOp::FetchAdd(x) => cell.fetch_add(x, Ordering::SeqCst),
                    AtomicOp::Swap(x) => cell.swap(x, Ordering::SeqCst),
                    AtomicOp::CompareSwap { expected, new } => {
                        match cell.compare_exchange(
                            expected,
                            new,
                            Ordering::SeqCst,
                            Ordering::SeqCst,
                        ) {
                            Ok(v) | Err(v) => v,
                        }
                    }
                };
                Ok(Output::Atomic { old })
            })
        })
    }

    fn flush(&mut self, conn: ConnId, token: u64) -> Result<(), OpError> {
        self.with_net(|net, me| net.one_sided(me, conn, token, |_| Ok(Output::Flush)))
    }

    fn fence(&mut self) -> Result<(), OpError> {
        Ok(())
    }

    fn poll(&mut self, events: &mut Vec<Event>, max: usize) -> usize {
        let mut net = self.lock();
        let me = self.node;
        let mut n = 0;
        while n < max {
            let Some(q) = net.node(me).queue.pop_front() else {
                break;
            };
            let event = match q {
                Queued::Ready(e) => Some(e),
                Queued::Done { conn, call, result } => {
                    let c = net.node(me).conns[conn as usize]
                        .as_mut()
                        .expect("queued completion of a live slot");
                    // A stale id (its connection failed meanwhile) was already
                    // completed with Disconnected by `fail_conn`.
                    c.window.finish(call).map(|token| {
                        Event::Completion(Completion {
                            conn: ConnId(conn),
                            token,
                            result,
                        })
                    })
                }
                Queued::Message {
                    conn,
                    header,
                    payload,
                    held: (sn, sc, id),
                } => {
                    let open = net.node(me).conns[conn as usize]
                        .as_ref()
                        .is_some_and(|c| c.open);
                    if open {
                        // Both ends fail together: the sender's end is open
                        // and its slot still held (failures drain it).
                        let sender = net.conn(sn, ConnId(sc)).expect("the peer end of an open connection is open");
                        assert!(sender.window.finish_send(id), "a delivered send releases its slot once");
                    }
                    // Queued before its connection failed: handed out, as a
                    // request queued then would be.
                    Some(Event::Message {
                        conn: ConnId(conn),
                        header,
                        payload: payload.into(),
                    })
                }
                Queued::Gone { conn, cause } => {
                    net.node(me).conns[conn as usize] = None;
                    Some(Event::Disconnected {
                        conn: ConnId(conn),
                        cause,
                    })
                }
            };
            if let Some(e) = event {
                events.push(e);
                n += 1;
            }
        }
        n
    }

    fn wait(&mut self, timeout: Duration) -> Result<bool, WaitError> {
        let deadline = Instant::now() + timeout;
        let mut net = self.lock();
        loop {
            if !net.nodes[self.node as usize].queue.is_empty() {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            net = self
                .shared
                .wake
                .wait_timeout(net, deadline - now)
                .expect("in-process network poisoned")
                .0;
        }
    }
}

fn new_conn(peer_node: u32, peer_conn: u32, limits: &Limits) -> Conn {
    Conn {
        peer_node,
        peer_conn,
        open: true,
        window: Window::new(limits.window),
        answering: Answering::new(),
        remotes: Vec::new(),
    }
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

pub(crate) fn check_sizes(limits: &Limits, header: usize, payload: usize) -> Result<(), OpError> {
    if header > limits.max_header_bytes {
        return Err(OpError::TooLarge {
            what: "header",
            len: header,
            max: limits.max_header_bytes,
        });
    }
    if payload > limits.max_payload_bytes {
        return Err(OpError::TooLarge {
            what: "payload",
            len: payload,
            max: limits.max_payload_bytes,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(t: &mut InProcTransport) -> Vec<Event> {
        let mut events = Vec::new();
        t.poll(&mut events, usize::MAX);
        events
    }

    fn completions(events: Vec<Event>) -> Vec<Completion> {
        events
            .into_iter()
            .filter_map(|e| match e {
                Event::Completion(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn rpc_round_trip_and_accept() {
        let net = InProcNetwork::new(Limits::default());
        let (mut a, mut b) = (net.node(), net.node());
        let conn = a.connect(&b.id()).unwrap();
        let events = drain(&mut b);
        let Event::Accepted(server_conn) = events[0] else {
            panic!("{events:?}")
        };
        a.call(conn, b"h", vec![1, 2, 3], 99).unwrap();
        let Event::Request(req) = drain(&mut b).remove(0) else {
            panic!()
        };
        assert_eq!(req.id.conn(), server_conn);
        assert_eq!(req.payload, [1, 2, 3]);
        b.reply(req.id, b"r", vec![4]).unwrap();
        assert_eq!(
            b.reply(req.id, b"r", vec![4]),
            Err(OpError::UnknownRequest),
            "one reply per request"
        );
        let c = completions(drain(&mut a)).remove(0);
        assert_eq!(c.token, 99);
        assert_eq!(
            c.result,
            Ok(Output::Response {
                header: b"r".to_vec(),
                payload: vec![4]
            })
        );
    }

    #[test]
    fn one_sided_ops_touch_the_peer_region() {
        let net = InProcNetwork::new(Limits::default());
        let (mut a, mut b) = (net.node(), net.node());
        let conn = a.connect(&b.id()).unwrap();
        let mut memory = vec![0u64; 64]; // 8-byte aligned
                                         // SAFETY: memory outlives every access (the nodes drop first).
        let region = unsafe { b.register(memory.as_mut_ptr() as *mut u8, 512) }.unwrap();
        let desc = RegionDescriptor::decode(&b.export(region).unwrap().encode()).unwrap();
        let remote = a.attach(conn, &desc).unwrap();
        a.put(conn, remote, 8, 7u64.to_le_bytes().to_vec(), 1)
            .unwrap();
        a.atomic(conn, remote, 8, AtomicOp::FetchAdd(3), 2).unwrap();
        a.atomic(
            conn,
            remote,
            8,
            AtomicOp::CompareSwap {
                expected: 10,
                new: 11,
            },
            3,
        )
        .unwrap();
        a.atomic(conn, remote, 8, AtomicOp::Swap(20), 4).unwrap();
        a.get(conn, remote, 8, vec![0; 8], 5).unwrap();
        a.flush(conn, 6).unwrap();
        let cs = completions(drain(&mut a));
        assert_eq!(
            cs.iter().map(|c| c.token).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5, 6],
            "FIFO"
        );
        assert_eq!(cs[1].result, Ok(Output::Atomic { old: 7 }));
        assert_eq!(cs[2].result, Ok(Output::Atomic { old: 10 }));
        assert_eq!(cs[3].result, Ok(Output::Atomic { old: 11 }));
        assert_eq!(
            cs[4].result,
            Ok(Output::Get {
                buf: 20u64.to_le_bytes().to_vec()
            })
        );
        assert_eq!(
            a.put(conn, remote, 510, vec![0; 4], 7),
            Err(OpError::OutOfBounds {
                offset: 510,
                len: 4,
                region_len: 512
            })
        );
        assert_eq!(
            a.atomic(conn, remote, 4, AtomicOp::Add(1), 8),
            Err(OpError::Misaligned(4))
        );
        assert_eq!(
            a.put(conn, RemoteRegionId(9), 0, vec![0], 9),
            Err(OpError::UnknownRegion(9))
        );
        drop((a, b));
        assert_eq!(memory[1], 20);
    }

    #[test]
    fn window_counts_until_completions_are_polled() {
        let net = InProcNetwork::new(Limits {
            window: 2,
            ..Limits::default()
        });
        let (mut a, b) = (net.node(), net.node());
        let conn = a.connect(&b.id()).unwrap();
        a.flush(conn, 1).unwrap();
        a.call(conn, b"", Vec::new(), 2).unwrap();
        assert_eq!(a.flush(conn, 3), Err(OpError::WindowFull(2)));
        assert_eq!(
            completions(drain(&mut a)).len(),
            1,
            "the flush completed; the call is unanswered"
        );
        a.flush(conn, 3).unwrap();
        let limits = Limits::default();
        assert!(matches!(
            a.call(conn, &vec![0; limits.max_header_bytes + 1], Vec::new(), 4),
            Err(OpError::WindowFull(2)) | Err(OpError::TooLarge { .. })
        ));
    }

    #[test]
    fn crash_fails_in_flight_ops_once_then_disconnects() {
        let net = InProcNetwork::new(Limits::default());
        let (mut a, mut b) = (net.node(), net.node());
        let conn = a.connect(&b.id()).unwrap();
        a.call(conn, b"x", Vec::new(), 1).unwrap();
        a.flush(conn, 2).unwrap(); // its completion is queued, not yet polled
        net.crash(b.id());
        let events = drain(&mut a);
        let tokens: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                Event::Completion(c) => Some((c.token, c.result.as_ref().err().cloned())),
                _ => None,
            })
            .collect();
        assert_eq!(
            tokens.len(),
            2,
            "each op completes exactly once: {events:?}"
        );
        assert!(tokens
            .iter()
            .all(|(_, e)| *e == Some(OpError::Disconnected(conn.0))));
        assert!(matches!(
            events.last(),
            Some(Event::Disconnected { cause: Some(_), .. })
        ));
        assert_eq!(
            a.call(conn, b"x", Vec::new(), 3),
            Err(OpError::Disconnected(conn.0))
        );
        let server_events = drain(&mut b);
        assert!(matches!(
            server_events.last(),
            Some(Event::Disconnected { .. })
        ));
        // The id is reused only after its Disconnected was polled.
        assert_eq!(a.connect(&b.id()).unwrap(), conn);
    }

    /// What arrived at a node, in order: ("m", index) for a message,
    /// ("r", index) for a request (answered at once), from the header.
    fn arrivals(t: &mut InProcTransport) -> Vec<(&'static str, u64)> {
        let mut out = Vec::new();
        for e in drain(t) {
            match e {
                Event::Message { header, payload, .. } => {
                    let i = u64::from_le_bytes(header[..8].try_into().unwrap());
                    assert_eq!(payload.len(), message_len(i), "message {i} whole");
                    out.push(("m", i));
                }
                Event::Request(r) => {
                    out.push(("r", u64::from_le_bytes(r.header[..8].try_into().unwrap())));
                    t.reply(r.id, b"", Vec::new()).unwrap();
                }
                _ => {}
            }
        }
        out
    }

    /// Large (rendezvous-sized over UCX) and small payloads, mixed.
    fn message_len(i: u64) -> usize {
        if i.is_multiple_of(3) {
            1 << 20
        } else {
            8
        }
    }

    #[test]
    fn sends_and_calls_of_a_connection_arrive_in_send_order() {
        let net = InProcNetwork::new(Limits::default());
        let (mut a, mut b) = (net.node(), net.node());
        let conn = a.connect(&b.id()).unwrap();
        let mut expected = Vec::new();
        for i in 0..12u64 {
            if i % 4 == 1 {
                a.call(conn, &i.to_le_bytes(), Vec::new(), i).unwrap();
                expected.push(("r", i));
            } else {
                a.send(conn, &i.to_le_bytes(), vec![i as u8; message_len(i)]).unwrap();
                expected.push(("m", i));
            }
        }
        assert_eq!(arrivals(&mut b), expected);
        // The other way: messages sent before a reply come before its completion.
        let mut events = drain(&mut a);
        assert_eq!(completions(std::mem::take(&mut events)).len(), 3);
        let server_conn = ConnId(0);
        a.call(conn, &99u64.to_le_bytes(), Vec::new(), 99).unwrap();
        let Event::Request(r) = drain(&mut b).remove(0) else { panic!() };
        b.send(server_conn, b"before the reply", Vec::new()).unwrap();
        b.reply(r.id, b"", Vec::new()).unwrap();
        b.send(server_conn, b"after the reply", Vec::new()).unwrap();
        let seen: Vec<String> = drain(&mut a)
            .into_iter()
            .map(|e| match e {
                Event::Message { header, .. } => String::from_utf8(header).unwrap(),
                Event::Completion(c) => format!("completion {}", c.token),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(seen, ["before the reply", "completion 99", "after the reply"]);
    }

    #[test]
    fn unpolled_sends_hold_the_senders_window() {
        let net = InProcNetwork::new(Limits {
            window: 3,
            ..Limits::default()
        });
        let (mut a, mut b) = (net.node(), net.node());
        let conn = a.connect(&b.id()).unwrap();
        a.send(conn, b"1", Vec::new()).unwrap();
        a.send(conn, b"2", Vec::new()).unwrap();
        a.call(conn, b"3", Vec::new(), 3).unwrap();
        assert_eq!(a.send(conn, b"4", Vec::new()), Err(OpError::WindowFull(3)));
        assert_eq!(a.call(conn, b"4", Vec::new(), 4), Err(OpError::WindowFull(3)), "one window for both");
        assert!(matches!(
            a.send(conn, &[0; 129], Vec::new()),
            Err(OpError::TooLarge { what: "header", .. })
        ));
        let mut events = Vec::new();
        assert_eq!(b.poll(&mut events, 2), 2, "Accepted and message 1");
        a.send(conn, b"4", Vec::new()).unwrap();
        assert_eq!(a.send(conn, b"5", Vec::new()), Err(OpError::WindowFull(3)), "one slot came back");
        assert_eq!(arrivals_headers(&mut b), ["2", "3", "4"]);
        a.send(conn, b"5", Vec::new()).unwrap();
    }

    fn arrivals_headers(t: &mut InProcTransport) -> Vec<String> {
        drain(t)
            .into_iter()
            .filter_map(|e| match e {
                Event::Message { header, .. } => Some(String::from_utf8(header).unwrap()),
                Event::Request(r) => Some(String::from_utf8(r.header).unwrap()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn sends_fail_after_a_disconnect_and_their_slots_complete_nothing() {
        let net = InProcNetwork::new(Limits {
            window: 2,
            ..Limits::default()
        });
        let (mut a, mut b) = (net.node(), net.node());
        let conn = a.connect(&b.id()).unwrap();
        a.send(conn, b"queued", Vec::new()).unwrap();
        a.call(conn, b"call", Vec::new(), 7).unwrap();
        net.crash(b.id());
        let events = drain(&mut a);
        let tokens: Vec<u64> = events
            .iter()
            .filter_map(|e| match e {
                Event::Completion(c) if c.result == Err(OpError::Disconnected(conn.0)) => Some(c.token),
                Event::Completion(c) => panic!("{c:?}"),
                _ => None,
            })
            .collect();
        assert_eq!(tokens, [7], "the call fails once; the send has no completion: {events:?}");
        assert!(matches!(events.last(), Some(Event::Disconnected { .. })));
        assert_eq!(a.send(conn, b"late", Vec::new()), Err(OpError::Disconnected(conn.0)));
        // Queued before the crash: handed out, then the disconnect.
        assert!(matches!(
            &drain(&mut b)[..],
            [Event::Accepted(_), Event::Message { .. }, Event::Request(_), Event::Disconnected { .. }]
        ));
    }

    #[test]
    fn close_is_seen_by_both_ends() {
        let net = InProcNetwork::new(Limits::default());
        let (mut a, mut b) = (net.node(), net.node());
        let conn = a.connect(&b.id()).unwrap();
        a.close(conn);
        assert!(matches!(
            drain(&mut a)[..],
            [Event::Disconnected { cause: None, .. }]
        ));
        assert!(matches!(
            drain(&mut b)[..],
            [Event::Accepted(_), Event::Disconnected { cause: None, .. }]
        ));
    }

    #[test]
    fn wait_times_out_when_idle_and_wakes_across_threads() {
        let net = InProcNetwork::new(Limits::default());
        let (mut a, mut b) = (net.node(), net.node());
        assert!(!a.wait(Duration::from_millis(20)).unwrap());
        let a_id = a.id();
        let t = std::thread::spawn(move || {
            let conn = b.connect(&a_id).unwrap();
            b.call(conn, b"wake", Vec::new(), 1).unwrap();
            b
        });
        assert!(a.wait(Duration::from_secs(20)).unwrap());
        let _b = t.join().unwrap();
        assert!(!drain(&mut a).is_empty());
    }
}
