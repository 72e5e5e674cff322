//! Membership changes over the in-process transport, one thread, a
//! virtual clock: a fourth replica joins under write load (learner, then
//! voter once caught up) and holds every acknowledged write; a follower
//! and then the leader are removed and writes go on; leadership moves to
//! the voter asked for; a replica restarted with its original peer list
//! still reaches the member added since; every request a user can get
//! wrong is refused with its reason (Raft thesis §4.1 and §3.10); and a
//! snapshot larger than the transport's message bound reaches a new
//! replica in chunks. Then 50 seeded runs of random adds, removals,
//! transfers and restarts under write load lose no acknowledged write.
//!
//! Every wait is bounded in virtual time; nothing asserts on timing.

use std::collections::BTreeMap;
use std::time::Duration;

use pmem::MemMedia;
use pmwire_log::{LogConfig, TailStrategy};
use pmwire_smr::command::{Op, Refusal, Refused, Request, Response, Status, REQUEST_MAGIC};
use pmwire_smr::node::{NotMember, PeerAddr, Replica, ReplicaConfig};
use pmwire_smr::pmem_store::PmemDurable;
use pmwire_smr::store::Durable;
use raft::StateRole;
use reactor::Reactor;
use transport::{ConnId, Event, InProcNetwork, InProcTransport, Limits, NodeId, Output, Transport};

type Node = Reactor<InProcTransport, Replica<InProcTransport, PmemDurable<MemMedia>>>;

const CLUSTER: u64 = 0xc1;
/// Virtual time a step advances.
const STEP: Duration = Duration::from_micros(100);
/// The longest any wait below lasts (virtual), a failure bound only.
const PATIENCE_MS: u64 = 5_000;

/// Log and snapshot capacity of each store.
#[derive(Clone, Copy)]
struct Sizes {
    log_bytes: u64,
    snapshot_bytes: u64,
}

const SMALL: Sizes = Sizes { log_bytes: 64 << 10, snapshot_bytes: 64 << 10 };

fn store(id: u64, voters: &[u64], sizes: Sizes) -> PmemDurable<MemMedia> {
    let log = LogConfig::new(sizes.log_bytes, TailStrategy::SelfValidating);
    let size = PmemDurable::<MemMedia>::required_size(&log, sizes.snapshot_bytes);
    PmemDurable::format(MemMedia::new(size as usize), CLUSTER, id, voters, log).expect("format")
}

fn config(id: u64) -> ReplicaConfig {
    ReplicaConfig { snapshot_every: 50, ..ReplicaConfig::new(id) }
}

/// A closed-loop writer: one PUT outstanding, retried with the same
/// bytes (its session applies it once), following NOT_LEADER hints.
struct Load {
    t: InProcTransport,
    conns: BTreeMap<u64, ConnId>,
    target: u64,
    seq: u64,
    token: u64,
    inflight: Option<(Request, Duration)>,
    acked: BTreeMap<Vec<u8>, Vec<u8>>,
    acks: u64,
    stopping: bool,
}

impl Load {
    fn pump(&mut self, addrs: &BTreeMap<u64, NodeId>, now: Duration) {
        let mut events = Vec::new();
        self.t.poll(&mut events, 64);
        for e in events {
            match e {
                Event::Completion(c) if c.token == self.token && self.inflight.is_some() => match c.result {
                    Ok(Output::Response { payload, .. }) => self.on_answer(Response::decode(&payload).expect("decodes"), addrs, now),
                    _ => {
                        self.conns.remove(&self.target);
                        self.retarget(0, addrs);
                        self.send(addrs, now);
                    }
                },
                Event::Disconnected { conn, .. } => self.conns.retain(|_, c| *c != conn),
                _ => {}
            }
        }
        match &self.inflight {
            None if !self.stopping => {
                self.seq += 1;
                let key = format!("k{}", self.seq % 37).into_bytes();
                let req = Request { op: Op::Put, client: 77, seq: self.seq, key, value: self.seq.to_le_bytes().to_vec(), expect: None };
                self.inflight = Some((req, now));
                self.send(addrs, now);
            }
            Some((_, sent)) if now >= *sent + Duration::from_millis(300) => {
                self.retarget(0, addrs);
                self.send(addrs, now);
            }
            _ => {}
        }
    }

    fn on_answer(&mut self, resp: Response, addrs: &BTreeMap<u64, NodeId>, now: Duration) {
        match resp.status {
            Status::Ok => {
                let (req, _) = self.inflight.take().expect("in flight");
                self.acked.insert(req.key, req.value);
                self.acks += 1;
            }
            Status::NotLeader => {
                self.retarget(resp.leader, addrs);
                self.send(addrs, now);
            }
            Status::Retry => self.send(addrs, now),
            other => panic!("a PUT answered {other:?}"),
        }
    }

    fn retarget(&mut self, hint: u64, addrs: &BTreeMap<u64, NodeId>) {
        self.target = match hint {
            h if h != 0 && h != self.target && addrs.contains_key(&h) => h,
            _ => addrs.range(self.target + 1..).next().or_else(|| addrs.iter().next()).map(|(&k, _)| k).expect("replicas"),
        };
    }

    fn send(&mut self, addrs: &BTreeMap<u64, NodeId>, now: Duration) {
        let Some((req, sent)) = &mut self.inflight else { return };
        *sent = now;
        let bytes = req.to_bytes();
        let conn = match self.conns.get(&self.target) {
            Some(&c) => c,
            None => {
                let c = self.t.connect(&addrs[&self.target]).expect("connect");
                self.conns.insert(self.target, c);
                c
            }
        };
        self.token += 1;
        if self.t.call(conn, &REQUEST_MAGIC, bytes, self.token).is_err() {
            self.conns.remove(&self.target);
        }
    }
}

struct Harness {
    net: InProcNetwork,
    nodes: BTreeMap<u64, Node>,
    addrs: BTreeMap<u64, NodeId>,
    now: Duration,
    admin: InProcTransport,
    admin_conns: BTreeMap<u64, ConnId>,
    seq: u64,
    load: Option<Load>,
    sizes: Sizes,
}

impl Harness {
    /// `n` replicas on persistent-memory stores, a leader elected.
    fn new(n: u64) -> Harness {
        Harness::with_sizes(n, SMALL, Limits::default())
    }

    fn with_sizes(n: u64, sizes: Sizes, limits: Limits) -> Harness {
        let net = InProcNetwork::new(limits);
        let transports: Vec<InProcTransport> = (0..n).map(|_| net.node()).collect();
        let addrs: BTreeMap<u64, NodeId> = transports.iter().enumerate().map(|(i, t)| (i as u64 + 1, t.id())).collect();
        let voters: Vec<u64> = (1..=n).collect();
        let mut nodes = BTreeMap::new();
        for (i, t) in transports.into_iter().enumerate() {
            let id = i as u64 + 1;
            let peers = addrs.iter().filter(|(&p, _)| p != id).map(|(&p, &a)| (p, a)).collect();
            nodes.insert(id, Reactor::new(t, Replica::new(config(id), store(id, &voters, sizes), peers).expect("replica")));
        }
        let admin = net.node();
        let mut h = Harness { net, nodes, addrs, now: Duration::ZERO, admin, admin_conns: BTreeMap::new(), seq: 0, load: None, sizes };
        h.wait_leader();
        h
    }

    fn step(&mut self) {
        self.now += STEP;
        for n in self.nodes.values_mut() {
            n.turn(self.now);
        }
        if let Some(load) = &mut self.load {
            load.pump(&self.addrs, self.now);
        }
    }

    fn run_ms(&mut self, ms: u64) {
        for _ in 0..ms * 10 {
            self.step();
        }
    }

    /// Steps until `done` holds; panics with `what` past the patience.
    fn run_until(&mut self, what: &str, mut done: impl FnMut(&Harness) -> bool) {
        for _ in 0..PATIENCE_MS * 10 {
            if done(self) {
                return;
            }
            self.step();
        }
        panic!("not within {PATIENCE_MS} ms of virtual time: {what}");
    }

    fn leader(&self) -> Option<u64> {
        let leaders: Vec<u64> = self.nodes.iter().filter(|(_, n)| n.service.status().role == StateRole::Leader).map(|(&id, _)| id).collect();
        // A removed leader may still think it leads until it hears a newer term.
        leaders.into_iter().find(|&id| self.node(id).service.conf_state().voters.contains(&id))
    }

    fn wait_leader(&mut self) -> u64 {
        self.run_until("a leader", |h| h.leader().is_some());
        self.leader().expect("a leader")
    }

    fn node(&self, id: u64) -> &Node {
        &self.nodes[&id]
    }

    fn start_load(&mut self) {
        let t = self.net.node();
        let target = *self.addrs.keys().next().expect("replicas");
        self.load = Some(Load { t, conns: BTreeMap::new(), target, seq: 0, token: 0, inflight: None, acked: BTreeMap::new(), acks: 0, stopping: false });
    }

    /// Lets the writer's last PUT finish, then stops it; what it acknowledged.
    fn stop_load(&mut self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        self.load.as_mut().expect("load").stopping = true;
        self.run_until("the last PUT answered", |h| h.load.as_ref().expect("load").inflight.is_none());
        self.load.take().expect("load").acked
    }

    fn acks(&self) -> u64 {
        self.load.as_ref().map_or(0, |l| l.acks)
    }

    /// One call to replica `to`, answered within the patience.
    fn call(&mut self, to: u64, req: &Request) -> Response {
        let conn = match self.admin_conns.get(&to) {
            Some(&c) => c,
            None => {
                let c = self.admin.connect(&self.addrs[&to]).expect("connect");
                self.admin_conns.insert(to, c);
                c
            }
        };
        self.admin.call(conn, &REQUEST_MAGIC, req.to_bytes(), 1).expect("call");
        let mut events = Vec::new();
        for _ in 0..PATIENCE_MS * 10 {
            self.step();
            self.admin.poll(&mut events, 16);
            for e in events.drain(..) {
                if let Event::Completion(c) = e {
                    let Output::Response { payload, .. } = c.result.expect("answered") else { panic!("a response") };
                    return Response::decode(&payload).expect("decodes");
                }
            }
        }
        panic!("replica {to} did not answer {:?} within {PATIENCE_MS} ms", req.op);
    }

    /// A membership request to the leader, following NOT_LEADER and
    /// RETRY (as `SmrClient` does) until a final answer.
    fn member(&mut self, op: Op, id: u64, addr: &[u8]) -> Response {
        if op != Op::TransferLeader {
            self.seq += 1;
        }
        let (client, seq) = if op == Op::TransferLeader { (0, 0) } else { (5, self.seq) };
        let req = Request::member(op, client, seq, id, addr);
        let mut to = self.wait_leader();
        for _ in 0..1000 {
            let resp = self.call(to, &req);
            match resp.status {
                Status::NotLeader | Status::Retry => {
                    self.run_ms(1);
                    to = if resp.leader != 0 && self.addrs.contains_key(&resp.leader) { resp.leader } else { self.wait_leader() };
                }
                _ => return resp,
            }
        }
        panic!("{op:?} {id}: no final answer after 1000 attempts");
    }

    /// Starts replica `id` on a new store with no voters (`pmwire replica
    /// --join`), knowing the current replicas' addresses; its address.
    fn join(&mut self, id: u64) -> NodeId {
        let t = self.net.node();
        let addr = t.id();
        let peers = self.addrs.clone();
        let replica = Replica::new(config(id), store(id, &[], self.sizes), peers).expect("a joining replica");
        self.nodes.insert(id, Reactor::new(t, replica));
        self.addrs.insert(id, addr);
        addr
    }

    /// Adds `id` as a learner, then promotes it once caught up.
    fn add_voter(&mut self, id: u64, addr: NodeId) {
        let r = self.member(Op::AddMember, id, &addr.to_bytes());
        assert_eq!(r.status, Status::Ok, "add {id}: {:?}", refusal(&r));
        for _ in 0..PATIENCE_MS {
            let r = self.member(Op::PromoteMember, id, &[]);
            match refusal(&r) {
                None => return assert_eq!(r.status, Status::Ok),
                Some(f) if f.reason == Refusal::CatchingUp => self.run_ms(1),
                Some(f) => panic!("promote {id}: {f:?}"),
            }
        }
        panic!("replica {id} never caught up");
    }

    /// Replica `id` restarts from a copy of its media (each store call is
    /// durable on return), given `peers` as at its first start.
    fn restart(&mut self, id: u64, peers: BTreeMap<u64, NodeId>) {
        let media = self.node(id).service.durable().media().clone();
        let durable = PmemDurable::open(media, CLUSTER, id).expect("the media opens");
        self.nodes.get_mut(&id).expect("up").service = Replica::new(config(id), durable, peers).expect("restart");
    }

    fn voters(&self, id: u64) -> Vec<u64> {
        self.node(id).service.conf_state().voters
    }
}

fn refusal(r: &Response) -> Option<Refused> {
    (r.status == Status::Refused).then(|| Refused::decode(&r.value).expect("a refusal decodes"))
}

fn refused(r: &Response) -> Refusal {
    refusal(r).unwrap_or_else(|| panic!("refused, not {r:?}")).reason
}

#[test]
fn a_fourth_replica_joins_under_write_load_catches_up_and_holds_every_write() {
    let mut h = Harness::new(3);
    h.start_load();
    h.run_until("writes before the join", |h| h.acks() >= 100);
    let addr = h.join(4);
    let r = h.member(Op::AddMember, 4, &addr.to_bytes());
    assert_eq!(r.status, Status::Ok, "{:?}", refusal(&r));
    let leader = h.wait_leader();
    assert_eq!(h.node(leader).service.conf_state().learners, vec![4], "a learner first");
    assert_eq!(h.voters(leader), vec![1, 2, 3], "not counted in the quorum yet");
    h.add_voter(4, addr);
    let acks_at_promotion = h.acks();
    h.run_until("writes after the promotion", |h| h.acks() >= acks_at_promotion + 100);
    let acked = h.stop_load();
    h.run_ms(50);
    for id in 1..=4 {
        assert_eq!(h.voters(id), vec![1, 2, 3, 4], "replica {id}'s membership");
        let machine = h.node(id).service.machine();
        for (k, v) in &acked {
            assert_eq!(machine.get(k), Some(&v[..]), "replica {id} holds {}", String::from_utf8_lossy(k));
        }
    }
    let joined = h.node(4).service.durable();
    assert!(joined.snapshot().0.index > 0, "the new replica started from a snapshot");
    for id in 1..=3 {
        assert_eq!(h.node(id).service.peer_addr(4), Some(&addr), "replica {id} reaches 4 at its address");
    }
}

/// A learner brought up to date by a snapshot whose index is the last
/// entry, with the cluster idle after it, is promoted (raft-rs may leave
/// it in Probe with the whole log; `node::learner_lag` says why that is
/// ready).
#[test]
fn an_idle_cluster_promotes_a_learner_caught_up_by_a_snapshot_of_the_last_entry() {
    let mut h = Harness::new(3);
    let leader = h.wait_leader();
    // Replica 4 is a learner before it runs, so the snapshot it will be
    // sent can hold every entry, its own conf change included.
    let t = h.net.node();
    let addr = t.id();
    let mut written = vec![1u64, 2, 3];
    for &j in &written {
        let put = Request { op: Op::Put, client: 9, seq: j, key: format!("k{j}").into_bytes(), value: vec![j as u8; 16], expect: None };
        assert_eq!(h.call(leader, &put).status, Status::Ok);
    }
    let mut i = 3;
    let r = h.member(Op::AddMember, 4, &addr.to_bytes());
    assert_eq!(r.status, Status::Ok, "{:?}", refusal(&r));
    let snapshot_at_last = |h: &Harness| {
        let node = h.node(leader);
        node.service.durable().snapshot().0.index == node.service.durable().last_index()
    };
    // The snapshot the add forces is taken over a few turns; idle, it
    // ends at the last entry. Writes move it along if it does not.
    while !snapshot_at_last(&h) {
        i += 1;
        assert!(i < 500, "no snapshot at the last entry within 500 turns");
        h.run_ms(1);
        if i % 20 == 0 {
            written.push(i);
            let put = Request { op: Op::Put, client: 9, seq: i, key: format!("k{i}").into_bytes(), value: vec![i as u8; 16], expect: None };
            assert_eq!(h.call(leader, &put).status, Status::Ok);
        }
    }
    let peers = h.addrs.clone();
    let replica = Replica::new(config(4), store(4, &[], h.sizes), peers).expect("a joining replica");
    h.nodes.insert(4, Reactor::new(t, replica));
    h.addrs.insert(4, addr);
    h.run_until("replica 4 holds the snapshot", |h| h.node(4).service.durable().snapshot().0.index > 0);
    for _ in 0..PATIENCE_MS {
        let r = h.member(Op::PromoteMember, 4, &[]);
        match refusal(&r) {
            None => break,
            Some(f) if f.reason == Refusal::CatchingUp => h.run_ms(1),
            Some(f) => panic!("promote 4: {f:?}"),
        }
    }
    h.run_ms(50);
    assert_eq!(h.voters(4), vec![1, 2, 3, 4], "replica 4 was promoted");
    let machine = h.node(4).service.machine();
    for j in written {
        assert_eq!(machine.get(format!("k{j}").as_bytes()), Some(&vec![j as u8; 16][..]), "replica 4 holds k{j}");
    }
}

#[test]
fn a_follower_then_the_leader_are_removed_and_writes_go_on() {
    let mut h = Harness::new(3);
    let addr = h.join(4);
    h.add_voter(4, addr);
    h.start_load();
    h.run_until("writes", |h| h.acks() >= 50);
    let leader = h.wait_leader();
    let follower = (1..=4).find(|&id| id != leader).expect("a follower");
    let r = h.member(Op::RemoveMember, follower, &[]);
    assert_eq!(r.status, Status::Ok, "{:?}", refusal(&r));
    h.run_ms(20);
    let rest: Vec<u64> = (1..=4).filter(|&id| id != follower).collect();
    for &id in &rest {
        assert_eq!(h.voters(id), rest, "replica {id} applied the removal");
        assert_eq!(h.node(id).service.peer_addr(follower), None, "replica {id} no longer reaches {follower}");
    }
    // The leader removes itself: it hands over, and the new leader removes it.
    let r = h.member(Op::RemoveMember, leader, &[]);
    assert_eq!(r.status, Status::Ok, "{:?}", refusal(&r));
    let new_leader = h.wait_leader();
    assert_ne!(new_leader, leader, "the removed leader stepped down");
    let left: Vec<u64> = rest.iter().copied().filter(|&id| id != leader).collect();
    h.run_until("the removal applied everywhere", |h| left.iter().all(|&id| h.voters(id) == left));
    assert_eq!(h.node(leader).service.status().role, StateRole::Follower, "the old leader is a follower");
    let acks = h.acks();
    h.run_until("writes after both removals", |h| h.acks() >= acks + 50);
    let (removed_applied, follower_applied) = (h.node(leader).service.status().applied, h.node(follower).service.status().applied);
    let acked = h.stop_load();
    h.run_ms(100);
    assert_eq!(h.node(leader).service.status().applied, removed_applied, "the removed leader is no longer sent the log");
    assert_eq!(h.node(follower).service.status().applied, follower_applied, "the removed follower is no longer sent the log");
    for &id in &left {
        let machine = h.node(id).service.machine();
        assert!(acked.iter().all(|(k, v)| machine.get(k) == Some(&v[..])), "replica {id} holds every write");
    }
}

#[test]
fn leadership_moves_to_the_voter_asked_for_and_only_to_a_voter() {
    let mut h = Harness::new(3);
    let leader = h.wait_leader();
    let to = (1..=3).find(|&id| id != leader).expect("a follower");
    let r = h.member(Op::TransferLeader, to, &[]);
    assert_eq!(r.status, Status::Ok, "{:?}", refusal(&r));
    h.run_until("the target leads", |h| h.leader() == Some(to));
    let r = h.member(Op::TransferLeader, to, &[]);
    assert_eq!(r.status, Status::Ok, "transfer to the leader itself: nothing to do");
    assert_eq!(refused(&h.member(Op::TransferLeader, 9, &[])), Refusal::Unknown);
    let addr = h.join(4);
    assert_eq!(h.member(Op::AddMember, 4, &addr.to_bytes()).status, Status::Ok);
    assert_eq!(refused(&h.member(Op::TransferLeader, 4, &[])), Refusal::NotVoter);
    // Under write load too.
    h.start_load();
    h.run_until("writes", |h| h.acks() >= 30);
    let back = leader;
    assert_eq!(h.member(Op::TransferLeader, back, &[]).status, Status::Ok);
    h.run_until("the first leader leads again", |h| h.leader() == Some(back));
    let acks = h.acks();
    h.run_until("writes after the transfer", |h| h.acks() >= acks + 30);
    h.stop_load();
}

#[test]
fn a_restarted_replica_still_reaches_the_member_added_since() {
    let mut h = Harness::new(3);
    let original: BTreeMap<u64, NodeId> = h.addrs.clone();
    let addr = h.join(4);
    h.add_voter(4, addr);
    h.run_until("every replica applied the promotion", |h| (1..=4).all(|id| h.voters(id) == [1, 2, 3, 4]));
    // Every replica restarts with its first peer list, which lacks 4 (and
    // the new replica with the list it joined with).
    for id in 1..=4 {
        let peers = original.iter().filter(|(&p, _)| p != id).map(|(&p, &a)| (p, a)).collect();
        h.restart(id, peers);
    }
    for id in 1..=3 {
        assert_eq!(h.node(id).service.peer_addr(4), Some(&addr), "replica {id} knows 4's address after a restart");
        assert_eq!(h.voters(id), vec![1, 2, 3, 4]);
    }
    // 4 takes part: two of the others stop, and 4 is needed for a quorum.
    h.wait_leader();
    let r = h.member(Op::TransferLeader, 1, &[]);
    assert_eq!(r.status, Status::Ok, "{:?}", refusal(&r));
    h.run_until("replica 1 leads", |h| h.leader() == Some(1));
    let stopped = h.nodes.remove(&3).expect("up");
    let put = Request { op: Op::Put, client: 9, seq: 1, key: b"after".to_vec(), value: b"restart".to_vec(), expect: None };
    assert_eq!(h.call(1, &put).status, Status::Ok, "committed by 1, 2 and 4");
    h.run_ms(10);
    assert_eq!(h.node(4).service.machine().get(b"after"), Some(&b"restart"[..]));
    drop(stopped);
}

/// Why replica `id` halted, if it did.
fn halted(h: &Harness, id: u64) -> Option<String> {
    h.node(id).service.halted().map(str::to_string)
}

#[test]
fn a_new_id_started_without_join_is_told_it_is_not_a_member_and_halts() {
    let mut h = Harness::new(3);
    h.start_load();
    h.run_until("writes", |h| h.acks() >= 20);
    // Replica 4 formats its pool with itself among the voters (no
    // `--join`): it campaigns, and the leader disowns it.
    let t = h.net.node();
    let addr = t.id();
    let replica = Replica::new(config(4), store(4, &[1, 2, 3, 4], SMALL), h.addrs.clone()).expect("replica 4");
    h.nodes.insert(4, Reactor::new(t, replica));
    h.addrs.insert(4, addr);
    h.run_until("replica 4 halts", |h| halted(h, 4).is_some());
    let reason = halted(&h, 4).expect("halted");
    assert!(reason.contains("replica 4 is not a member"), "{reason}");
    assert!(reason.contains("voters 1, 2, 3"), "{reason}");
    assert!(reason.contains("--join"), "{reason}");
    let acks = h.acks();
    h.run_until("writes go on", |h| h.acks() >= acks + 20);
    for id in 1..=3 {
        assert_eq!(h.voters(id), [1, 2, 3], "replica {id}'s membership is untouched");
        assert_eq!(halted(&h, id), None);
    }
    h.stop_load();
}

#[test]
fn a_member_restarted_on_a_new_pool_halts_with_the_reason() {
    let mut h = Harness::new(3);
    h.start_load();
    h.run_until("writes", |h| h.acks() >= 20);
    h.stop_load();
    let leader = h.wait_leader();
    let commit = h.node(leader).service.status().commit;
    h.run_until("every replica applied every write", |h| (1..=3).all(|id| h.node(id).service.status().applied == commit));
    let follower = (1..=3).find(|&id| id != leader).expect("a follower");
    // The follower comes back on a new pool, formatted as at the start.
    let peers = h.addrs.iter().filter(|(&p, _)| p != follower).map(|(&p, &a)| (p, a)).collect();
    h.nodes.get_mut(&follower).expect("up").service = Replica::new(config(follower), store(follower, &[1, 2, 3], SMALL), peers).expect("restart");
    // The leader's next heartbeat counts entries as held there (raft-rs
    // would abort on it).
    h.run_until("the follower halts", |h| halted(h, follower).is_some());
    let reason = halted(&h, follower).expect("halted");
    assert!(reason.contains("this replica's log ends at index 0"), "{reason}");
    assert!(reason.contains("not the one replica"), "{reason}");
    assert_eq!(h.node(follower).service.status().last_index, 0, "nothing was stepped into it");
    // The two others still commit.
    let put = Request { op: Op::Put, client: 9, seq: 1, key: b"two".to_vec(), value: b"of three".to_vec(), expect: None };
    assert_eq!(h.call(leader, &put).status, Status::Ok);
}

#[test]
fn a_not_member_notice_round_trips_and_malformed_ones_are_refused() {
    let n = NotMember { term: 7, applied: 1234, voters: vec![1, 2, 3] };
    let b = n.to_bytes();
    assert_eq!(b.len(), 20 + 24);
    assert_eq!(NotMember::decode(&b), Some(n));
    assert_eq!(NotMember::decode(&b[..b.len() - 1]), None, "short");
    assert_eq!(NotMember::decode(&[0; 19]), None, "no count");
    let mut huge = vec![0u8; 20];
    huge[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(NotMember::decode(&huge), None, "a count past MAX_VOTERS");
}

#[test]
fn what_a_user_can_get_wrong_is_refused_with_its_reason() {
    let mut h = Harness::new(3);
    let leader = h.wait_leader();
    let follower = (1..=3).find(|&id| id != leader).expect("a follower");
    let addr = h.join(4);
    assert_eq!(refused(&h.member(Op::AddMember, 2, &addr.to_bytes())), Refusal::Exists, "adding a voter's id");
    assert_eq!(refused(&h.member(Op::RemoveMember, 9, &[])), Refusal::Unknown, "removing an unknown id");
    assert_eq!(refused(&h.member(Op::PromoteMember, 9, &[])), Refusal::Unknown, "promoting an unknown id");
    assert_eq!(refused(&h.member(Op::PromoteMember, 2, &[])), Refusal::Exists, "promoting a voter");
    let in_use = h.addrs[&follower].to_bytes();
    assert_eq!(refused(&h.member(Op::AddMember, 5, &in_use)), Refusal::AddressInUse, "another member's address");
    // A request to a follower names the leader.
    let req = Request::member(Op::RemoveMember, 6, 100, 9, &[]);
    let r = h.call(follower, &req);
    assert_eq!((r.status, r.leader), (Status::NotLeader, leader));
    // Two changes at once: the second is refused while the first is unapplied.
    let conn = h.admin.connect(&h.addrs[&leader]).expect("connect");
    let add = Request::member(Op::AddMember, 6, 200, 4, &addr.to_bytes());
    let remove = Request::member(Op::RemoveMember, 6, 201, follower, &[]);
    h.admin.call(conn, &REQUEST_MAGIC, add.to_bytes(), 10).expect("call");
    h.admin.call(conn, &REQUEST_MAGIC, remove.to_bytes(), 11).expect("call");
    let mut answers = BTreeMap::new();
    let mut events = Vec::new();
    for _ in 0..PATIENCE_MS * 10 {
        if answers.len() == 2 {
            break;
        }
        h.step();
        h.admin.poll(&mut events, 16);
        for e in events.drain(..) {
            if let Event::Completion(c) = e {
                let Output::Response { payload, .. } = c.result.expect("answered") else { panic!("a response") };
                answers.insert(c.token, Response::decode(&payload).expect("decodes"));
            }
        }
    }
    assert_eq!(answers[&10].status, Status::Ok, "the first change");
    assert_eq!(refused(&answers[&11]), Refusal::Pending, "the second, while the first is pending");
    // The same ADD again (a retry) gets the outcome the session kept.
    assert_eq!(h.call(leader, &add).status, Status::Ok);
    // A learner at another address is not added again.
    assert_eq!(refused(&h.member(Op::AddMember, 4, &NodeId(999).to_bytes())), Refusal::Exists);
    // The last voter is never removed.
    let mut one = Harness::new(1);
    assert_eq!(refused(&one.member(Op::RemoveMember, 1, &[])), Refusal::LastVoter);
}

/// A map larger than the transport's 4 MiB message bound reaches a new
/// replica: its snapshot goes as chunks, paced by the connection's window
/// (a window of 4 sends, so the 7 chunks cannot all go at once).
#[test]
fn a_snapshot_larger_than_a_message_reaches_a_new_replica() {
    let limits = Limits { window: 4, ..Limits::default() };
    let mut h = Harness::with_sizes(3, Sizes { log_bytes: 16 << 20, snapshot_bytes: 12 << 20 }, limits);
    let leader = h.wait_leader();
    let value = |i: u64| vec![i as u8; 256 << 10];
    for i in 0..24u64 {
        let put = Request { op: Op::Put, client: 8, seq: i + 1, key: format!("big{i}").into_bytes(), value: value(i), expect: None };
        assert_eq!(h.call(leader, &put).status, Status::Ok);
    }
    let addr = h.join(4);
    h.add_voter(4, addr);
    h.run_until("replica 4 applied everything", |h| h.node(4).service.status().applied >= h.node(leader).service.status().commit);
    let (meta, data) = h.node(4).service.durable().snapshot();
    assert!(meta.index > 0 && data.len() > 4 << 20, "installed a snapshot of {} B", data.len());
    let staged = h.node(4).service.counters().snapshot_bytes_staged;
    assert!(staged >= data.len() as u64, "the body went through the staging area ({staged} B staged)");
    let machine = h.node(4).service.machine();
    for i in 0..24u64 {
        assert_eq!(machine.get(format!("big{i}").as_bytes()), Some(&value(i)[..]), "key big{i}");
    }
}

/// Chunks that do not follow on are handled by the rules of
/// `node::chunks`: a duplicate and another message's middle chunk are
/// ignored; a gap, a bad checksum, a header alone, a message over the
/// store's bound are refused (counted malformed); the cluster goes on.
#[test]
fn chunks_that_do_not_follow_on_are_dropped() {
    use pmwire_smr::node::{encode_chunk, CHUNK_HEADER_BYTES, MAX_RAFT_MESSAGE_BYTES, RAFT_CHUNK_MAGIC};
    let mut h = Harness::new(3);
    let leader = h.wait_leader();
    let follower = (1..=3).find(|&id| id != leader).expect("a follower");
    let mut peer = h.net.node();
    let conn = peer.connect(&h.addrs[&follower]).expect("connect");
    let chunk = |id: u64, len: u64, offset: u64, n: usize| {
        let mut c = Vec::new();
        encode_chunk(id, len, offset, &vec![0xab; n], &mut c);
        c
    };
    let part = 1000;
    let len = 4 * part as u64;
    let mut flipped = chunk(5, len, 0, 100);
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    let cases = [
        (chunk(1, len, 0, part), false, false),
        (chunk(1, len, 0, part), true, false),                 // a duplicate: ignored
        (chunk(2, len, part as u64, 10), true, false),         // another message's middle chunk: ignored
        (chunk(1, len, part as u64 + 10, 10), false, true),    // a gap: refused
        (chunk(3, len, 0, 0)[..CHUNK_HEADER_BYTES].to_vec(), false, true), // a header alone
        (chunk(4, len, 0, 100), false, false),
        (chunk(4, len, 200, 100), false, true), // a gap
        (flipped, false, true),                 // a bad checksum
        (chunk(6, MAX_RAFT_MESSAGE_BYTES + 1, 0, 100), false, true), // over the bound
    ];
    for (i, (c, ignored, refused)) in cases.into_iter().enumerate() {
        let before = h.node(follower).service.counters().clone();
        peer.send(conn, &RAFT_CHUNK_MAGIC, c).expect("send");
        h.run_ms(1);
        let after = h.node(follower).service.counters().clone();
        assert_eq!(after.chunks_ignored - before.chunks_ignored, u64::from(ignored), "case {i}: ignored");
        assert_eq!(after.malformed - before.malformed, u64::from(refused), "case {i}: refused");
    }
    // The cluster is unharmed: a write still commits.
    let put = Request { op: Op::Put, client: 3, seq: 1, key: b"k".to_vec(), value: b"v".to_vec(), expect: None };
    assert_eq!(h.call(leader, &put).status, Status::Ok);
}

/// Seeded sequences of membership changes under write load, with a
/// replica restarted from its media between them: every acknowledged
/// write is on every voter at the end, and the voters agree on the
/// membership and the whole state machine. Prints the seed on failure.
#[test]
fn random_membership_changes_with_restarts_lose_no_write() {
    use rand::{Rng, SeedableRng};
    for seed in 0..50u64 {
        let run = std::panic::catch_unwind(|| membership_run(seed));
        if let Err(e) = run {
            eprintln!("membership run failed at seed {seed}");
            std::panic::resume_unwind(e);
        }
    }

    fn membership_run(seed: u64) {
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut h = Harness::new(3);
        let first: BTreeMap<u64, NodeId> = h.addrs.clone();
        h.start_load();
        let mut next_id = 4;
        for _ in 0..8 {
            h.run_ms(rng.gen_range(5..40));
            let leader = h.wait_leader();
            let voters = h.voters(leader);
            match rng.gen_range(0..4) {
                0 if next_id <= 6 => {
                    let addr = h.join(next_id);
                    h.add_voter(next_id, addr);
                    next_id += 1;
                }
                1 if voters.len() > 3 => {
                    let victim = voters[rng.gen_range(0..voters.len())];
                    let r = h.member(Op::RemoveMember, victim, &[]);
                    assert_eq!(r.status, Status::Ok, "seed {seed}: remove {victim}: {:?}", refusal(&r));
                }
                2 => {
                    let to = voters[rng.gen_range(0..voters.len())];
                    let r = h.member(Op::TransferLeader, to, &[]);
                    assert!(matches!(r.status, Status::Ok | Status::Refused), "seed {seed}: transfer to {to}: {r:?}");
                }
                _ => {
                    let id = voters[rng.gen_range(0..voters.len())];
                    let peers = first.iter().filter(|(&p, _)| p != id).map(|(&p, &a)| (p, a)).collect();
                    let peers = if first.contains_key(&id) { peers } else { h.addrs.iter().filter(|(&p, _)| p != id).map(|(&p, &a)| (p, a)).collect() };
                    h.restart(id, peers);
                }
            }
        }
        let acked = h.stop_load();
        let leader = h.wait_leader();
        let voters = h.voters(leader);
        h.run_until("the voters converge", |h| {
            let applied = h.node(leader).service.status().applied;
            voters.iter().all(|&v| h.node(v).service.status().applied == applied && h.voters(v) == voters)
        });
        for &v in &voters {
            let machine = h.node(v).service.machine();
            assert!(acked.iter().all(|(k, val)| machine.get(k) == Some(&val[..])), "seed {seed}: replica {v} lost an acknowledged write");
            assert_eq!(machine, h.node(leader).service.machine(), "seed {seed}: replica {v} differs from the leader");
        }
    }
}

/// A transfer that breaks: a cluster whose snapshot is about 6 MiB, and a
/// new replica whose connections are all cut (`restart`: and which is
/// restarted from its media) once it holds part of the body.
struct Broken {
    h: Harness,
    leader: u64,
    /// The body's length and what the new replica held when cut.
    len: u64,
    held: u64,
}

fn break_a_transfer(restart: bool) -> Broken {
    let limits = Limits { window: 4, ..Limits::default() };
    let mut h = Harness::with_sizes(3, Sizes { log_bytes: 16 << 20, snapshot_bytes: 12 << 20 }, limits);
    let leader = h.wait_leader();
    for i in 0..24u64 {
        let put = Request { op: Op::Put, client: 8, seq: i + 1, key: format!("big{i}").into_bytes(), value: vec![i as u8; 256 << 10], expect: None };
        assert_eq!(h.call(leader, &put).status, Status::Ok);
    }
    let addr = h.join(4);
    assert_eq!(h.member(Op::AddMember, 4, &addr.to_bytes()).status, Status::Ok);
    h.run_until("replica 4 holds part of the body", |h| h.node(4).service.counters().snapshot_bytes_staged > 0);
    let (body, held) = h.node(4).service.durable().staged().expect("a body staged");
    assert!(held > 0 && held < body.len, "cut mid-transfer: {held} of {} B", body.len);
    h.net.crash(addr);
    if restart {
        let peers = h.addrs.iter().filter(|(&p, _)| p != 4).map(|(&p, &a)| (p, a)).collect();
        h.restart(4, peers);
        assert_eq!(h.node(4).service.durable().staged(), Some((body, held)), "the staging area survives the restart");
    }
    Broken { h, leader, len: body.len, held }
}

/// The broken transfer finishes from where it broke: the new replica
/// asks for the rest, the leader goes on from there, and no byte of the
/// body is staged twice; then the replica holds every key.
fn finish_broken(mut b: Broken, staged_before: u64) {
    b.h.run_until("replica 4 applied everything", |h| h.node(4).service.status().applied >= h.node(b.leader).service.status().commit);
    let (c4, cl) = (b.h.node(4).service.counters().clone(), b.h.node(b.leader).service.counters().clone());
    assert!(c4.snapshot_resumes_asked >= 1, "replica 4 asked for the rest");
    assert!(cl.snapshot_resumes_taken >= 1, "the leader went on from there");
    assert_eq!(staged_before + c4.snapshot_bytes_staged, b.len, "resumed at {} B, not from zero: every byte staged once", b.held);
    assert_eq!(b.h.node(4).service.durable().staged(), None, "the staging area became the snapshot");
    let machine = b.h.node(4).service.machine();
    for i in 0..24u64 {
        assert_eq!(machine.get(format!("big{i}").as_bytes()), Some(&vec![i as u8; 256 << 10][..]), "key big{i}");
    }
}

/// Issue 26 item 6: a transfer whose connection is cut mid-body resumes.
#[test]
fn a_snapshot_transfer_cut_mid_body_resumes_where_it_broke() {
    let b = break_a_transfer(false);
    finish_broken(b, 0);
}

/// Issue 26 item 6: a replica restarted mid-body resumes from what its
/// staging area holds durably.
#[test]
fn a_replica_restarted_mid_snapshot_resumes_from_its_staging_area() {
    let b = break_a_transfer(true);
    let held = b.held;
    finish_broken(b, held);
}

/// Stream chunks that do not follow on: a bad checksum is refused, a
/// chunk of another body's middle is answered with a request from zero,
/// and the cluster goes on; a snapshot message whose body is not staged
/// is not stepped.
#[test]
fn stream_chunks_that_do_not_follow_on_are_not_staged() {
    use pmwire_smr::node::{RAFT_MAGIC, RAFT_STREAM_MAGIC};
    use pmwire_smr::snapshot::stream::{encode_chunk, encode_descriptor, BodyId};
    use protobuf::Message as _;
    let mut h = Harness::new(3);
    let leader = h.wait_leader();
    let follower = (1..=3).find(|&id| id != leader).expect("a follower");
    let mut peer = h.net.node();
    let conn = peer.connect(&h.addrs[&follower]).expect("connect");
    let body = BodyId::of(1 << 40, 1 << 30, &[7u8; 3000]);
    let mut c = Vec::new();
    encode_chunk(&body, 1000, leader, &[7u8; 1000], &mut c);
    let before = h.node(follower).service.counters().clone();
    peer.send(conn, &RAFT_STREAM_MAGIC, c.clone()).expect("send");
    let last = c.len() - 1;
    c[last] ^= 1;
    peer.send(conn, &RAFT_STREAM_MAGIC, c).expect("send");
    let mut m = raft::eraftpb::Message { msg_type: raft::eraftpb::MessageType::MsgSnapshot.into(), to: follower, from: leader, term: 1 << 30, ..Default::default() };
    let mut snap = raft::eraftpb::Snapshot { data: encode_descriptor(&body).into(), ..Default::default() };
    snap.mut_metadata().index = body.index;
    snap.mut_metadata().term = body.term;
    m.set_snapshot(snap);
    peer.send(conn, &RAFT_MAGIC, m.write_to_bytes().expect("encodes")).expect("send");
    h.run_ms(2);
    let after = h.node(follower).service.counters().clone();
    assert_eq!(after.snapshot_resumes_asked - before.snapshot_resumes_asked, 1, "a middle chunk of a body not held: asked from zero");
    assert_eq!(after.malformed - before.malformed, 1, "a flipped byte");
    assert_eq!(after.snapshot_bytes_staged, before.snapshot_bytes_staged, "nothing staged");
    assert_eq!(after.snapshots_unstaged - before.snapshots_unstaged, 1, "the message is not stepped");
    assert_eq!(h.node(follower).service.durable().staged(), None);
    let put = Request { op: Op::Put, client: 3, seq: 1, key: b"k".to_vec(), value: b"v".to_vec(), expect: None };
    let leader = h.wait_leader();
    assert_eq!(h.call(leader, &put).status, Status::Ok);
}
