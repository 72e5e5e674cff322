//! The links of a replica and of its clients: the [`LinkConfig`]s that
//! `pmwire replica`, `pmwire smr`, the benchmarks and the simulation put
//! between a replica and the network ([`link::LinkTransport`]).
//!
//! A replica accepts replicas and clients, dials replicas, and pings what
//! it dials ([`keepalive`]): a dialled link whose PING goes unanswered
//! for three minimum election timeouts is closed, and the replica dials
//! the peer again after its reconnect delay (10 ticks) instead of waiting
//! for TCP to retransmit into a connection that a healed partition left in
//! backoff. Why the ping and not Raft's own traffic: each replica sends to
//! a peer on the connection it dialled and hears the peer's answers on the
//! connection the peer dialled, so "I have not heard from X" cannot say
//! which of the two is stuck (X may hear our heartbeats and answer over a
//! dead connection of its own, and would never notice); a PING is answered
//! on the connection it came on, so each side tests the one it sends on.
//! Followers that exchange no Raft messages still ping each other, so an
//! idle healthy cluster keeps every link and churns none.

use std::time::Duration;

use link::{Identity, Keepalive, LinkConfig, Role};

use crate::node::ReplicaConfig;

/// How a replica pings what it dials: a link is quiet after three
/// minimum election timeouts without an answer (300 ms at 10 ms ticks:
/// longer than TCP's 200 ms minimum retransmission timeout, so one lost
/// segment does not close a healthy link; far below the 5-7 s TCP's
/// backoff reaches), pinged four times in that span.
pub fn keepalive(config: &ReplicaConfig) -> Keepalive {
    let ticks = u32::try_from(3 * config.election_ticks).expect("election ticks fit u32");
    let quiet_after = config.tick * ticks;
    Keepalive { every: quiet_after / 4, quiet_after }
}

/// A replica's links: accepts replicas and clients, dials replicas, pings
/// what it dials ([`keepalive`]); a handshake may take as long as a quiet
/// link is given.
pub fn replica_link(config: &ReplicaConfig) -> LinkConfig {
    let mut c = LinkConfig::new(Identity { role: Role::Replica, id: config.id }, &[Role::Replica, Role::Client], Role::Replica);
    let keepalive = keepalive(config);
    c.keepalive = Some(keepalive);
    c.handshake_timeout = keepalive.quiet_after;
    c
}

/// A client's links (`pmwire smr`, `SmrClient`): dials replicas, accepts
/// nothing, no pings (its requests have their own timeouts).
pub fn client_link() -> LinkConfig {
    let mut c = LinkConfig::new(Identity { role: Role::Client, id: 0 }, &[], Role::Replica);
    c.handshake_timeout = Duration::from_secs(2);
    c
}

#[cfg(test)]
mod tests {
    //! No one in without the key: strangers that reach a replica's port
    //! change nothing, in a simulated cluster on virtual time.

    use std::cell::Cell;
    use std::collections::BTreeMap;
    use std::rc::Rc;
    use std::time::Duration;

    use link::{LinkTransport, Secret};
    use protobuf::Message as _;
    use raft::eraftpb::{Message, MessageType};
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;
    use reactor::Reactor;
    use transport::sim::{Faults, SimAddr, SimNetwork, SimTransport};
    use transport::{Limits, Transport};

    use super::{client_link, replica_link};
    use crate::command::{Op, Request, REQUEST_MAGIC};
    use crate::node::{Replica, ReplicaConfig, RAFT_MAGIC};
    use crate::store::{Durable, MemDurable};

    const KEY: [u8; 32] = [0x11; 32];

    type Node<T> = Reactor<T, Replica<T, MemDurable>>;

    fn linked(net: &SimNetwork, t: SimTransport, config: link::LinkConfig, secret: [u8; 32], seed: u64) -> LinkTransport<SimTransport> {
        let clock = net.clone();
        LinkTransport::new(t, Secret::from_bytes(secret), config, Box::new(move || Duration::from_nanos(clock.now_ns())), Box::new(Xoshiro256PlusPlus::seed_from_u64(seed)))
    }

    /// Three replicas whose transports `wrap` makes.
    fn cluster<T: Transport<Addr = SimAddr>>(net: &SimNetwork, wrap: &dyn Fn(SimTransport, &ReplicaConfig) -> T) -> Vec<Node<T>> {
        let nodes: Vec<SimTransport> = (0..3).map(|_| net.node()).collect();
        let addrs: Vec<SimAddr> = nodes.iter().map(SimTransport::addr).collect();
        nodes
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let id = i as u64 + 1;
                let peers: BTreeMap<u64, SimAddr> = (1..=3).filter(|&p| p != id).map(|p| (p, addrs[p as usize - 1])).collect();
                let config = ReplicaConfig::new(id);
                let t = wrap(t, &config);
                Reactor::new(t, Replica::new(config, MemDurable::new(&[1, 2, 3]), peers).expect("a replica"))
            })
            .collect()
    }

    /// Turns every replica and `extra` each virtual millisecond for `ms`.
    fn run<T: Transport<Addr = SimAddr>>(net: &SimNetwork, nodes: &mut [Node<T>], extra: &mut [&mut dyn Transport<Addr = SimAddr>], ms: u64) {
        let end = net.now_ns() + ms * 1_000_000;
        while net.now_ns() < end {
            let now = Duration::from_nanos(net.now_ns());
            for n in nodes.iter_mut() {
                n.turn(now);
            }
            let mut events = Vec::new();
            for t in extra.iter_mut() {
                t.poll(&mut events, 64);
                events.clear();
            }
            net.advance_to(net.now_ns() + 1_000_000);
        }
    }

    /// Each replica's term, vote, last index and commit index.
    fn state<T: Transport<Addr = SimAddr>>(nodes: &[Node<T>]) -> Vec<(u64, u64, u64, u64)> {
        nodes
            .iter()
            .map(|n| {
                let hs = n.service.durable().hard_state();
                let st = n.service.status();
                (st.term, hs.vote, st.last_index, st.commit)
            })
            .collect()
    }

    /// What a stranger sends each replica: a heartbeat from "replica 2"
    /// (3 for replica 2) in a term far ahead, and a client's PUT.
    fn attack(stranger: &mut dyn Transport<Addr = SimAddr>, nodes: &[SimAddr], term: u64) {
        for (i, addr) in nodes.iter().enumerate() {
            let to = i as u64 + 1;
            let conn = stranger.connect(addr).expect("connect");
            let mut m = Message::default();
            m.set_msg_type(MessageType::MsgHeartbeat);
            m.to = to;
            m.from = if to == 2 { 3 } else { 2 };
            m.term = term + 100;
            let _ = stranger.send(conn, &RAFT_MAGIC, m.write_to_bytes().expect("encodes"));
            let put = Request { op: Op::Put, client: 99, seq: 1, key: b"evil".to_vec(), value: b"x".to_vec(), expect: None };
            let _ = stranger.call(conn, &REQUEST_MAGIC, put.to_bytes(), 1);
        }
    }

    #[test]
    fn strangers_without_the_secret_change_nothing() {
        let net = SimNetwork::new(7, Limits::default(), Faults::none());
        let seeds = Rc::new(Cell::new(100u64));
        let wrap = |t: SimTransport, c: &ReplicaConfig| {
            seeds.set(seeds.get() + 1);
            linked(&net, t, replica_link(c), KEY, seeds.get())
        };
        let mut nodes = cluster(&net, &wrap);
        run(&net, &mut nodes, &mut [], 500);
        let before = state(&nodes);
        assert!(before.iter().all(|s| s.0 >= 1 && s.3 >= 1), "a leader was elected and committed: {before:?}");
        let addrs: Vec<SimAddr> = nodes.iter().map(|n| n.transport.inner().addr()).collect();
        // A process with no link at all, and one with another secret.
        let mut raw = net.node();
        let mut wrong = linked(&net, net.node(), client_link(), [0x22; 32], 9);
        attack(&mut raw, &addrs, before[0].0);
        attack(&mut wrong, &addrs, before[0].0);
        run(&net, &mut nodes, &mut [&mut raw, &mut wrong], 500);
        assert_eq!(state(&nodes), before, "term, vote, log and commit unchanged");
        for n in &nodes {
            assert!(n.transport.stats().refused_in >= 2, "each replica refused both strangers: {:?}", n.transport.stats());
        }
        assert!(wrong.stats().refused_out >= 3, "the wrong secret was refused: {:?}", wrong.stats());
        // The cluster itself still works: its own client writes.
        let mut good = linked(&net, net.node(), client_link(), KEY, 10);
        let leader = nodes.iter().position(|n| n.service.status().role == raft::StateRole::Leader).expect("a leader");
        let conn = good.connect(&addrs[leader]).expect("connect");
        let put = Request { op: Op::Put, client: 7, seq: 1, key: b"k".to_vec(), value: b"v".to_vec(), expect: None };
        good.call(conn, &REQUEST_MAGIC, put.to_bytes(), 1).expect("call");
        run(&net, &mut nodes, &mut [&mut good], 200);
        assert!(state(&nodes)[leader].2 > before[leader].2, "an authenticated client's PUT reached the log");
    }

    /// The control: without links the same stranger does change a
    /// replica's term (so the test above could fail).
    #[test]
    fn without_links_a_stranger_moves_the_term() {
        let net = SimNetwork::new(7, Limits::default(), Faults::none());
        let mut nodes = cluster(&net, &|t, _| t);
        run(&net, &mut nodes, &mut [], 500);
        let before = state(&nodes);
        let addrs: Vec<SimAddr> = nodes.iter().map(|n| n.transport.addr()).collect();
        let mut raw = net.node();
        attack(&mut raw, &addrs, before[0].0);
        run(&net, &mut nodes, &mut [&mut raw], 50);
        let after = state(&nodes);
        assert!(after.iter().zip(&before).any(|(a, b)| a.0 > b.0), "a stranger's heartbeat moved some term: {before:?} -> {after:?}");
    }
}
