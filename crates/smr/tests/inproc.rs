//! Three replicas over the in-process transport, driven from one thread
//! with a virtual clock: a leader is elected, writes are applied on every
//! replica, reads are linearizable through the leader, followers redirect.

use std::collections::BTreeMap;
use std::time::Duration;

use pmwire_smr::command::{Op, Request, Response, Status, REQUEST_MAGIC};
use pmwire_smr::node::{Replica, ReplicaConfig};
use pmwire_smr::store::MemDurable;
use raft::StateRole;
use reactor::Reactor;
use transport::{ConnId, Event, InProcNetwork, InProcTransport, Limits, NodeId, Output, Transport};

type Node = Reactor<InProcTransport, Replica<InProcTransport, MemDurable>>;

fn cluster(n: u64) -> (InProcNetwork, Vec<Node>) {
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
            let replica = Replica::new(ReplicaConfig::new(id), MemDurable::new(&voters), peers).expect("replica");
            Reactor::new(t, replica)
        })
        .collect();
    (net, nodes)
}

/// Runs every node for `ms` virtual milliseconds, 100 µs per step.
fn run(nodes: &mut [Node], now: &mut Duration, ms: u64) {
    for _ in 0..ms * 10 {
        *now += Duration::from_micros(100);
        for n in nodes.iter_mut() {
            n.turn(*now);
        }
    }
}

fn leader(nodes: &[Node]) -> Option<usize> {
    nodes.iter().position(|n| n.service.status().role == StateRole::Leader)
}

/// Calls `node` with `req` and runs the cluster until the answer comes.
fn ask(client: &mut InProcTransport, conn: ConnId, nodes: &mut [Node], now: &mut Duration, req: &Request) -> Response {
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
    let (net, mut nodes) = cluster(3);
    let mut now = Duration::ZERO;
    run(&mut nodes, &mut now, 100);
    let l = leader(&nodes).expect("a leader within 100 ticks");
    let term = nodes[l].service.status().term;
    assert!(nodes.iter().all(|n| n.service.status().leader == l as u64 + 1), "everyone knows the leader");

    let mut client = net.node();
    let to_leader = client.connect(&nodes[l].transport.id()).expect("connect");
    let put = Request { op: Op::Put, client: 1, seq: 1, key: b"k".to_vec(), value: b"v1".to_vec(), expect: None };
    let r = ask(&mut client, to_leader, &mut nodes, &mut now, &put);
    assert_eq!(r.status, Status::Ok);
    let get = Request { op: Op::Get, client: 0, seq: 0, key: b"k".to_vec(), value: vec![], expect: None };
    let r = ask(&mut client, to_leader, &mut nodes, &mut now, &get);
    assert_eq!((r.status, r.value.as_slice()), (Status::Ok, &b"v1"[..]));
    // The retried PUT is not applied twice: a later PUT stays.
    let put2 = Request { seq: 2, value: b"v2".to_vec(), ..put.clone() };
    assert_eq!(ask(&mut client, to_leader, &mut nodes, &mut now, &put2).status, Status::Ok);
    let retry = ask(&mut client, to_leader, &mut nodes, &mut now, &put);
    assert_eq!(retry.status, Status::Stale, "an older sequence number");
    run(&mut nodes, &mut now, 10);
    for n in &nodes {
        assert_eq!(n.service.machine().get(b"k"), Some(&b"v2"[..]), "replica {} applied", n.service.status().id);
    }
    let f = (l + 1) % 3;
    let to_follower = client.connect(&nodes[f].transport.id()).expect("connect");
    let r = ask(&mut client, to_follower, &mut nodes, &mut now, &get);
    assert_eq!((r.status, r.leader), (Status::NotLeader, l as u64 + 1), "a follower names the leader");
    assert_eq!(nodes[l].service.status().term, term, "no election while healthy");
}
