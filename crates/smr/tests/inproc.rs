//! Three replicas over the in-process transport, driven from one thread
//! with a virtual clock: a leader is elected, writes are applied on every
//! replica, reads are linearizable through the leader, followers redirect.
//! The same run over the DRAM store and over the persistent-memory store,
//! which also compacts and restarts a follower from a copy of its media.

use std::collections::BTreeMap;
use std::time::Duration;

use pmwire_smr::command::{Op, Request, Response, Status, REQUEST_MAGIC};
use pmwire_smr::node::{Replica, ReplicaConfig};
use pmem::MemMedia;
use pmwire_log::{LogConfig, TailStrategy};
use pmwire_smr::pmem_store::PmemDurable;
use pmwire_smr::store::{Durable, MemDurable};
use raft::StateRole;
use reactor::Reactor;
use transport::{ConnId, Event, InProcNetwork, InProcTransport, Limits, NodeId, Output, Transport};

type Node<D> = Reactor<InProcTransport, Replica<InProcTransport, D>>;

const CLUSTER: u64 = 0xc1;

fn pmem_log() -> LogConfig {
    LogConfig::new(64 << 10, TailStrategy::SelfValidating)
}

/// A new persistent-memory store for replica `id` on a DRAM-backed medium.
fn pmem_store(id: u64, voters: &[u64]) -> PmemDurable<MemMedia> {
    let size = PmemDurable::<MemMedia>::required_size(&pmem_log(), 64 << 10);
    PmemDurable::format(MemMedia::new(size as usize), CLUSTER, id, voters, pmem_log()).expect("format")
}

fn cluster<D: Durable>(n: u64, config: impl Fn(u64) -> ReplicaConfig, store: impl Fn(u64, &[u64]) -> D) -> (InProcNetwork, Vec<Node<D>>) {
    let net = InProcNetwork::new(Limits::default());
    let transports: Vec<InProcTransport> = (0..n).map(|_| net.node()).collect();
    let addrs: Vec<NodeId> = transports.iter().map(|t| t.id()).collect();
    let voters: Vec<u64> = (1..=n).collect();
    let nodes = transports
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let id = i as u64 + 1;
            let peers: BTreeMap<u64, NodeId> = (1..=n).filter(|&p| p != id).map(|p| (p, addrs[p as usize - 1])).collect();
            let replica = Replica::new(config(id), store(id, &voters), peers).expect("replica");
            Reactor::new(t, replica)
        })
        .collect();
    (net, nodes)
}

/// Runs every node for `ms` virtual milliseconds, 100 µs per step.
fn run<D: Durable>(nodes: &mut [Node<D>], now: &mut Duration, ms: u64) {
    for _ in 0..ms * 10 {
        *now += Duration::from_micros(100);
        for n in nodes.iter_mut() {
            n.turn(*now);
        }
    }
}

fn leader<D: Durable>(nodes: &[Node<D>]) -> Option<usize> {
    nodes.iter().position(|n| n.service.status().role == StateRole::Leader)
}

/// Calls `node` with `req` and runs the cluster until the answer comes.
fn ask<D: Durable>(client: &mut InProcTransport, conn: ConnId, nodes: &mut [Node<D>], now: &mut Duration, req: &Request) -> Response {
    client.call(conn, &REQUEST_MAGIC, req.to_bytes(), 1).expect("call");
    let mut events = Vec::new();
    for _ in 0..1000 {
        run(nodes, now, 1);
        client.poll(&mut events, 16);
        for e in events.drain(..) {
            if let Event::Completion(c) = e {
                let Output::Response { payload, .. } = c.result.expect("answered") else { panic!("a response") };
                return Response::decode(&payload).expect("decodes");
            }
        }
    }
    panic!("no answer within 1 s of virtual time");
}

#[test]
fn three_replicas_elect_replicate_and_read() {
    let (net, mut nodes) = cluster(3, ReplicaConfig::new, |_, voters| MemDurable::new(voters));
    elect_replicate_and_read(&net, &mut nodes);
}

#[test]
fn three_replicas_on_pmem_stores_elect_replicate_and_read() {
    let (net, mut nodes) = cluster(3, ReplicaConfig::new, pmem_store);
    elect_replicate_and_read(&net, &mut nodes);
}

/// Writes enough to compact the persistent-memory stores several times,
/// restarts a follower from a copy of its media (what a crash leaves: each
/// store call is durable when it returns), writes more, and checks that
/// every replica, the restarted one too, holds every write.
#[test]
fn pmem_replicas_compact_and_a_follower_restarts_from_its_media() {
    let config = |id| ReplicaConfig { snapshot_every: 8, ..ReplicaConfig::new(id) };
    let (net, mut nodes) = cluster(3, config, pmem_store);
    let mut now = Duration::ZERO;
    run(&mut nodes, &mut now, 100);
    let l = leader(&nodes).expect("a leader within 100 ticks");
    let mut client = net.node();
    let to_leader = client.connect(&nodes[l].transport.id()).expect("connect");
    let put = |seq: u64| Request { op: Op::Put, client: 1, seq, key: format!("k{}", seq % 7).into_bytes(), value: seq.to_le_bytes().to_vec(), expect: None };
    for seq in 1..=30 {
        assert_eq!(ask(&mut client, to_leader, &mut nodes, &mut now, &put(seq)).status, Status::Ok);
    }
    run(&mut nodes, &mut now, 10);
    let f = (l + 1) % 3;
    let follower = &nodes[f].service;
    // Members take turns compacting (each follower every third interval, `node::compaction`).
    assert!(follower.counters().snapshots >= 1, "the follower compacted its store");
    let (snap, _) = follower.durable().snapshot();
    assert!(snap.index >= 8 && follower.durable().first_index() == snap.index + 1, "compacted to {}", snap.index);
    let image = follower.durable().media().clone();
    let id = f as u64 + 1;
    let store = PmemDurable::open(image, CLUSTER, id).expect("the follower's media opens");
    assert_eq!(store.hard_state(), follower.durable().hard_state(), "reopened hard state");
    assert_eq!(store.last_index(), follower.durable().last_index(), "reopened log");
    let peers: BTreeMap<u64, NodeId> = (1..=3).filter(|&p| p != id).map(|p| (p, nodes[p as usize - 1].transport.id())).collect();
    nodes[f].service = Replica::new(config(id), store, peers).expect("restart");
    for seq in 31..=40 {
        assert_eq!(ask(&mut client, to_leader, &mut nodes, &mut now, &put(seq)).status, Status::Ok);
    }
    run(&mut nodes, &mut now, 20);
    for n in nodes.iter() {
        for seq in 34..=40u64 {
            let value = n.service.machine().get(format!("k{}", seq % 7).as_bytes());
            assert_eq!(value, Some(&seq.to_le_bytes()[..]), "replica {} holds write {seq}", n.service.status().id);
        }
    }
}

fn elect_replicate_and_read<D: Durable>(net: &InProcNetwork, nodes: &mut [Node<D>]) {
    let mut now = Duration::ZERO;
    run(nodes, &mut now, 100);
    let l = leader(nodes).expect("a leader within 100 ticks");
    let term = nodes[l].service.status().term;
    assert!(nodes.iter().all(|n| n.service.status().leader == l as u64 + 1), "everyone knows the leader");

    let mut client = net.node();
    let to_leader = client.connect(&nodes[l].transport.id()).expect("connect");
    let put = Request { op: Op::Put, client: 1, seq: 1, key: b"k".to_vec(), value: b"v1".to_vec(), expect: None };
    let r = ask(&mut client, to_leader, nodes, &mut now, &put);
    assert_eq!(r.status, Status::Ok);
    let get = Request { op: Op::Get, client: 0, seq: 0, key: b"k".to_vec(), value: vec![], expect: None };
    let r = ask(&mut client, to_leader, nodes, &mut now, &get);
    assert_eq!((r.status, r.value.as_slice()), (Status::Ok, &b"v1"[..]));
    // The retried PUT is not applied twice: a later PUT stays.
    let put2 = Request { seq: 2, value: b"v2".to_vec(), ..put.clone() };
    assert_eq!(ask(&mut client, to_leader, nodes, &mut now, &put2).status, Status::Ok);
    let retry = ask(&mut client, to_leader, nodes, &mut now, &put);
    assert_eq!(retry.status, Status::Stale, "an older sequence number");
    run(nodes, &mut now, 10);
    for n in nodes.iter() {
        assert_eq!(n.service.machine().get(b"k"), Some(&b"v2"[..]), "replica {} applied", n.service.status().id);
    }
    let f = (l + 1) % 3;
    let to_follower = client.connect(&nodes[f].transport.id()).expect("connect");
    let r = ask(&mut client, to_follower, nodes, &mut now, &get);
    assert_eq!((r.status, r.leader), (Status::NotLeader, l as u64 + 1), "a follower names the leader");
    assert_eq!(nodes[l].service.status().term, term, "no election while healthy");
}
