//! `SmrClient` against three replicas that run their own loops on threads
//! (real time, the in-process transport): it finds the leader, writes,
//! reads, swaps, deletes, asks every replica's status, and follows a
//! leader change; and it changes the membership (add, transfer, remove).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use pmwire_smr::client::{SmrClient, SmrError};
use pmwire_smr::command::Refusal;
use pmwire_smr::node::{Replica, ReplicaConfig};
use pmwire_smr::store::MemDurable;
use reactor::{PollBudget, Reactor, RealClock};
use transport::{InProcNetwork, Limits, NodeId};

fn start(net: &InProcNetwork, n: u64, stop: &Arc<AtomicBool>) -> (BTreeMap<u64, NodeId>, Vec<JoinHandle<()>>) {
    let transports: Vec<_> = (0..n).map(|_| net.node()).collect();
    let addrs: BTreeMap<u64, NodeId> = transports.iter().enumerate().map(|(i, t)| (i as u64 + 1, t.id())).collect();
    let voters: Vec<u64> = (1..=n).collect();
    let mut threads = Vec::new();
    for (i, t) in transports.into_iter().enumerate() {
        let id = i as u64 + 1;
        let peers: BTreeMap<u64, NodeId> = addrs.iter().filter(|(&p, _)| p != id).map(|(&p, &a)| (p, a)).collect();
        let voters = voters.clone();
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || {
            let replica = Replica::new(ReplicaConfig::new(id), MemDurable::new(&voters), peers).expect("replica");
            let mut reactor = Reactor::new(t, replica);
            reactor.run(&RealClock::new(), &stop, PollBudget::BLOCK);
        }));
    }
    (addrs, threads)
}

#[test]
fn a_client_finds_the_leader_and_every_operation_works() {
    let net = InProcNetwork::new(Limits::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (addrs, threads) = start(&net, 3, &stop);
    let mut client = SmrClient::new(net.node(), addrs.clone(), 42);
    let index = client.put(b"k", b"v1").expect("put");
    assert!(index > 0);
    assert_eq!(client.get(b"k").expect("get"), Some(b"v1".to_vec()));
    assert_eq!(client.cas(b"k", Some(b"nope"), b"x").expect("cas"), (false, b"v1".to_vec()));
    assert!(client.cas(b"k", Some(b"v1"), b"v2").expect("cas").0);
    assert_eq!(client.get(b"k").expect("get"), Some(b"v2".to_vec()));
    client.del(b"k").expect("del");
    assert_eq!(client.get(b"k").expect("get"), None);
    let leader = client.leader();
    for id in 1..=3 {
        let st = client.status(id).expect("status");
        assert_eq!(st.id, id);
        assert_eq!(st.leader, leader, "replica {id} knows the leader");
        assert_eq!(st.role_name(), if id == leader { "leader" } else { "follower" });
    }
    assert!(client.status(9).is_err(), "an unknown replica id is refused");
    // A second client, pointed at a follower first, is redirected.
    let mut other = SmrClient::new(net.node(), addrs, 43);
    assert_eq!(other.get(b"k").expect("get"), None);
    assert_eq!(other.leader(), leader);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("replica thread");
    }
}

/// A replica waiting to be added (a store with no voters) on its own thread.
fn start_joiner(net: &InProcNetwork, id: u64, peers: BTreeMap<u64, NodeId>, stop: &Arc<AtomicBool>) -> (NodeId, JoinHandle<()>) {
    let t = net.node();
    let addr = t.id();
    let stop = stop.clone();
    let thread = std::thread::spawn(move || {
        let replica = Replica::new(ReplicaConfig::new(id), MemDurable::new(&[]), peers).expect("replica");
        let mut reactor = Reactor::new(t, replica);
        reactor.run(&RealClock::new(), &stop, PollBudget::BLOCK);
    });
    (addr, thread)
}

#[test]
fn a_client_adds_a_replica_moves_leadership_to_it_and_removes_replicas() {
    let net = InProcNetwork::new(Limits::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (addrs, mut threads) = start(&net, 3, &stop);
    let (addr4, joiner) = start_joiner(&net, 4, addrs.clone(), &stop);
    threads.push(joiner);
    let mut client = SmrClient::new(net.node(), addrs.clone(), 44);
    client.put(b"k", b"v").expect("put");
    client.add_member(4, &addr4).expect("add replica 4");
    // Replica 4 applies its promotion soon after the leader (a failure bound, not a timing claim).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while client.status(4).expect("4 is in the client's list now").voters() != [1, 2, 3, 4] {
        assert!(std::time::Instant::now() < deadline, "replica 4 never applied its promotion");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    match client.add_member(4, &addr4) {
        Err(SmrError::Refused { reason: Refusal::Exists, .. }) => {}
        other => panic!("adding a voter again: {other:?}"),
    }
    client.transfer_leader(4).expect("transfer");
    assert_eq!(client.leader(), 4);
    // A client that knows only 1-3 finds the new leader by its address.
    let mut other = SmrClient::new(net.node(), addrs, 45);
    assert_eq!(other.get(b"k").expect("get"), Some(b"v".to_vec()));
    assert_eq!(other.leader(), 4);
    client.remove_member(1).expect("remove a follower");
    client.remove_member(4).expect("the leader removes itself");
    assert_ne!(client.leader(), 4);
    client.put(b"k", b"w").expect("put after the removals");
    let st = client.status(client.leader()).expect("status");
    assert_eq!((st.voters(), st.learners()), (vec![2, 3], vec![]));
    match client.remove_member(3) {
        Ok(_) => {}
        other => panic!("removing a voter of two: {other:?}"),
    }
    let last = client.leader();
    match client.remove_member(last) {
        Err(SmrError::Refused { reason: Refusal::LastVoter, .. }) => {}
        other => panic!("removing the last voter: {other:?}"),
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("replica thread");
    }
}
