//! The replication floor: what a replicated write costs with no Raft, no
//! log and no state machine, over the same processes, transport, loop and
//! message pattern as a [`crate::node::Replica`]. `pmwire bench smr`
//! measures it beside the replicas, so a target below it is shown as
//! unreachable on this machine rather than missed.
//!
//! The lowest id leads. It forwards each client write (the request's
//! bytes) to every other node as a one-way message, over its one outgoing
//! connection to that node, and answers the client once a majority holds
//! the write (itself and the first acknowledgements). A follower
//! acknowledges each forward at once over its own outgoing connection to
//! the leader. Those are a replica's four messages per write (request,
//! append, acknowledgement, reply), with nothing persisted or applied.
//!
//! A GET is answered at once as a miss (the bench's clients read one key
//! to find the leader); STATUS, membership changes and anything else get
//! `BadRequest`.
//! A lost connection is connected again on the next message; the floor
//! is for measurement, not for faults.

use std::collections::BTreeMap;
use std::time::Duration;

use reactor::Service;
use transport::{ConnId, Event, RequestId, Transport};

use crate::command::{Op, RequestView, Response, Status, REQUEST_MAGIC};

/// The header of a forwarded write.
pub const FORWARD_MAGIC: [u8; 4] = *b"FLR1";
/// The header of an acknowledgement.
pub const ACK_MAGIC: [u8; 4] = *b"FLA1";

/// One node of the floor.
pub struct Floor<T: Transport>
where
    T::Addr: Sized,
{
    id: u64,
    leader: u64,
    peers: BTreeMap<u64, T::Addr>,
    /// The peers' ids (the leader forwards to each).
    peer_ids: Vec<u64>,
    out_conns: BTreeMap<u64, ConnId>,
    /// Writes waiting for acknowledgements: the client's request and how
    /// many acknowledgements are still needed.
    pending: BTreeMap<u64, (RequestId, usize)>,
    next_seq: u64,
    /// Messages that could not be decoded or sent.
    pub dropped: u64,
}

impl<T: Transport> Floor<T>
where
    T::Addr: Sized,
{
    /// Node `id` of the cluster whose other nodes are `peers`.
    pub fn new(id: u64, peers: BTreeMap<u64, T::Addr>) -> Floor<T> {
        let leader = peers.keys().copied().chain([id]).min().expect("at least this node");
        let peer_ids = peers.keys().copied().collect();
        Floor { id, leader, peers, peer_ids, out_conns: BTreeMap::new(), pending: BTreeMap::new(), next_seq: 1, dropped: 0 }
    }

    /// Acknowledgements a write needs besides the leader's own copy.
    fn acks_needed(&self) -> usize {
        self.peer_ids.len().div_ceil(2)
    }

    fn conn(&mut self, t: &mut T, to: u64) -> Option<ConnId> {
        if let Some(&c) = self.out_conns.get(&to) {
            return Some(c);
        }
        let c = t.connect(self.peers.get(&to)?).ok()?;
        self.out_conns.insert(to, c);
        Some(c)
    }

    fn send(&mut self, t: &mut T, to: u64, header: &[u8; 4], seq: u64, body: &[u8]) {
        let Some(conn) = self.conn(t, to) else {
            self.dropped += 1;
            return;
        };
        let mut payload = t.take_buffer(8 + body.len());
        payload.extend_from_slice(&seq.to_le_bytes());
        payload.extend_from_slice(body);
        if t.send(conn, header, payload).is_err() {
            self.dropped += 1;
        }
    }

    fn answer(&self, t: &mut T, id: RequestId, status: Status, index: u64) {
        let resp = Response { status, leader: self.leader, index, value: Vec::new() };
        let mut bytes = t.take_buffer(resp.encoded_len());
        resp.encode(&mut bytes);
        let _ = t.reply(id, &REQUEST_MAGIC, bytes);
    }

    fn on_request(&mut self, t: &mut T, id: RequestId, payload: &[u8]) {
        let op = match RequestView::parse(payload) {
            Ok(r) => r.op,
            Err(_) => return self.answer(t, id, Status::BadRequest, 0),
        };
        if self.id != self.leader {
            return self.answer(t, id, Status::NotLeader, 0);
        }
        match op {
            Op::Put | Op::Del | Op::Cas => {}
            Op::Get => return self.answer(t, id, Status::NotFound, 0),
            _ => return self.answer(t, id, Status::BadRequest, 0),
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let needed = self.acks_needed();
        if needed == 0 {
            return self.answer(t, id, Status::Ok, seq);
        }
        self.pending.insert(seq, (id, needed));
        for k in 0..self.peer_ids.len() {
            let to = self.peer_ids[k];
            self.send(t, to, &FORWARD_MAGIC, seq, payload);
        }
    }

    fn on_message(&mut self, t: &mut T, header: &[u8], payload: &[u8]) {
        let Some(seq) = payload.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))) else {
            self.dropped += 1;
            return;
        };
        if header == FORWARD_MAGIC {
            let leader = self.leader;
            self.send(t, leader, &ACK_MAGIC, seq, &[]);
        } else if header == ACK_MAGIC {
            let Some(entry) = self.pending.get_mut(&seq) else {
                return; // a late acknowledgement of an answered write
            };
            entry.1 -= 1;
            if entry.1 == 0 {
                let (id, _) = self.pending.remove(&seq).expect("present");
                self.answer(t, id, Status::Ok, seq);
            }
        } else {
            self.dropped += 1;
        }
    }
}

impl<T: Transport> Service<T> for Floor<T>
where
    T::Addr: Sized,
{
    fn on_event(&mut self, t: &mut T, event: Event, _now: Duration) {
        match event {
            Event::Message { header, payload, .. } => {
                self.on_message(t, &header, &payload);
                t.recycle_payload(payload);
            }
            Event::Request(r) if r.header == REQUEST_MAGIC => self.on_request(t, r.id, &r.payload),
            Event::Request(r) => self.answer(t, r.id, Status::BadRequest, 0),
            Event::Disconnected { conn, .. } => self.out_conns.retain(|_, c| *c != conn),
            Event::Accepted(_) | Event::Completion(_) => {}
        }
    }

    fn poll_work(&mut self, _t: &mut T, _now: Duration) -> bool {
        false
    }

    fn next_deadline(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Request;
    use reactor::Reactor;
    use transport::{InProcNetwork, InProcTransport, Limits, NodeId, Output};

    type Node = Reactor<InProcTransport, Floor<InProcTransport>>;

    fn cluster(n: u64) -> (InProcNetwork, Vec<Node>) {
        let net = InProcNetwork::new(Limits::default());
        let transports: Vec<InProcTransport> = (0..n).map(|_| net.node()).collect();
        let addrs: Vec<NodeId> = transports.iter().map(|t| t.id()).collect();
        let nodes = transports
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let id = i as u64 + 1;
                let peers = (1..=n).filter(|&p| p != id).map(|p| (p, addrs[p as usize - 1])).collect();
                Reactor::new(t, Floor::new(id, peers))
            })
            .collect();
        (net, nodes)
    }

    /// Sends `req` to node `to` and turns the nodes (`up` of them) until
    /// the answer comes, or 1,000 rounds pass (`None`).
    fn ask(net: &InProcNetwork, nodes: &mut [Node], up: usize, to: usize, req: &Request) -> Option<Response> {
        let mut client = net.node();
        let conn = client.connect(&nodes[to].transport.id()).expect("connect");
        client.call(conn, &REQUEST_MAGIC, req.to_bytes(), 7).expect("call");
        let mut events = Vec::new();
        for round in 1..=1000u64 {
            for n in nodes[..up].iter_mut() {
                n.turn(Duration::from_micros(round));
            }
            client.poll(&mut events, 16);
            for e in events.drain(..) {
                if let Event::Completion(c) = e {
                    let Output::Response { payload, .. } = c.result.expect("answered") else { panic!("a response") };
                    return Some(Response::decode(&payload).expect("decodes"));
                }
            }
        }
        None
    }

    fn put(seq: u64) -> Request {
        Request { op: Op::Put, client: 1, seq, key: b"k".to_vec(), value: b"v".to_vec(), expect: None }
    }

    #[test]
    fn the_lowest_id_leads_and_answers_a_write_once_a_majority_has_it() {
        let (net, mut nodes) = cluster(3);
        let r = ask(&net, &mut nodes, 3, 1, &put(1)).expect("answered");
        assert_eq!((r.status, r.leader), (Status::NotLeader, 1));
        let r = ask(&net, &mut nodes, 3, 0, &put(2)).expect("answered");
        assert_eq!((r.status, r.index), (Status::Ok, 1));
        // With the two others down, the leader has no majority: no answer.
        assert!(ask(&net, &mut nodes, 1, 0, &put(3)).is_none());
        assert_eq!(nodes[0].service.pending.len(), 1);
    }

    #[test]
    fn five_nodes_need_two_acknowledgements() {
        let (net, mut nodes) = cluster(5);
        assert_eq!(nodes[0].service.acks_needed(), 2);
        // One follower up besides the leader is not a majority of five.
        assert!(ask(&net, &mut nodes, 2, 0, &put(1)).is_none());
        let r = ask(&net, &mut nodes, 3, 0, &put(2)).expect("answered");
        assert_eq!(r.status, Status::Ok);
    }
}
