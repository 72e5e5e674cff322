//! `SmrClient` against three replicas that run their own loops on threads
//! (real time, the in-process transport): it finds the leader, writes,
//! reads, swaps, deletes, asks every replica's status, and follows a
//! leader change.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use pmwire_smr::client::SmrClient;
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
    assert_eq!(client.cas(b"k", Some(b"v1"), b"v2").expect("cas").0, true);
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
