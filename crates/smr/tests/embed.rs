//! The embedding API (`Replica::propose`, `read_index`, `take_done`,
//! `progress`) driven by a small in-process server loop: three replicas of
//! a test machine (a journal of what it applied) on `transport::sim`, one
//! thread, virtual time. Proposals and reads through it, a leader change,
//! proposals and reads through a follower (forwarded by raft-rs, done
//! when the follower applies them; a duplicated forward applied once; a
//! cut-off follower's failing within the bound), a partitioned leader
//! whose proposals and reads all fail within the bound (none answered as applied, none read), a persistent machine that
//! restarts without applying anything twice and whose lagging follower
//! catches up from a snapshot, a machine that cannot persist halting its
//! replica, and an SMR1 membership change whose answer the bound cut
//! short, sent again. Every wait is bounded in virtual time; nothing
//! asserts on wall-clock timing.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use pmwire_smr::command::{Op, Request, Response, Status, REQUEST_MAGIC};
use pmwire_smr::node::{Done, Failure, NotLeader, Replica, ReplicaConfig, Ticket};
use pmwire_smr::state::{PersistError, RestoreError, StateMachine};
use pmwire_smr::store::{Durable, MemDurable};
use raft::StateRole;
use reactor::Reactor;
use transport::sim::{Faults, SimAddr, SimNetwork, SimTransport};
use transport::{Event, Limits, Output, Transport};

/// A test machine: every entry it applied, in order. Its output is the
/// number of entries it holds. Optionally persistent: what
/// `persist_applied` saw survives a crash ([`Journal::after_crash`]).
#[derive(Clone, Debug, Default)]
struct Journal {
    entries: Vec<(u64, Vec<u8>)>,
    applied: u64,
    persistent: bool,
    /// What a crash keeps (persistent only): entries and applied index.
    durable: (Vec<(u64, Vec<u8>)>, u64),
    /// The applied index at the last persist.
    persisted: u64,
    persists: u64,
    restores: u64,
    fail_persist: bool,
}

impl Journal {
    fn persistent() -> Journal {
        Journal { persistent: true, ..Journal::default() }
    }

    fn after_crash(self) -> Journal {
        let (entries, applied) = self.durable.clone();
        Journal { entries, applied, persisted: applied, durable: self.durable, ..Journal::persistent() }
    }

    fn holds(&self, data: &[u8]) -> bool {
        self.entries.iter().any(|(_, d)| d == data)
    }
}

impl StateMachine for Journal {
    type Output = u64;

    fn apply(&mut self, index: u64, data: &[u8]) -> u64 {
        assert!(index > self.applied, "entry {index} applied twice (applied {})", self.applied);
        self.applied = index;
        self.entries.push((index, data.to_vec()));
        self.entries.len() as u64
    }

    fn persist_applied(&mut self) -> Result<(), PersistError> {
        if self.fail_persist {
            return Err(PersistError("the medium refused the write".into()));
        }
        self.persists += 1;
        self.persisted = self.applied;
        if self.persistent {
            self.durable = (self.entries.clone(), self.applied);
        }
        Ok(())
    }

    fn applied(&self) -> u64 {
        self.applied
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut out = (self.entries.len() as u64).to_le_bytes().to_vec();
        for (i, d) in &self.entries {
            out.extend_from_slice(&i.to_le_bytes());
            out.extend_from_slice(&(d.len() as u64).to_le_bytes());
            out.extend_from_slice(d);
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn restore(&mut self, index: u64, bytes: &[u8]) -> Result<(), RestoreError> {
        let (body, crc) = bytes.split_at(bytes.len().checked_sub(4).ok_or(RestoreError::Corrupt("short"))?);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().unwrap()) {
            return Err(RestoreError::Corrupt("checksum"));
        }
        let u64_at = |at: usize| body.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap())).ok_or(RestoreError::Corrupt("short"));
        let (count, mut at, mut entries) = (u64_at(0)?, 8, Vec::new());
        for _ in 0..count {
            let (i, len) = (u64_at(at)?, u64_at(at + 8)? as usize);
            entries.push((i, body.get(at + 16..at + 16 + len).ok_or(RestoreError::Corrupt("short"))?.to_vec()));
            at += 16 + len;
        }
        self.entries = entries;
        self.applied = index;
        self.restores += 1;
        if self.persistent {
            self.durable = (self.entries.clone(), index);
            self.persisted = index;
        }
        Ok(())
    }
}

type Node = Reactor<SimTransport, Replica<SimTransport, MemDurable, Journal>>;

/// The server loop: three replicas, a virtual clock, the outcomes of
/// every ticket with when they came.
struct Server {
    net: SimNetwork,
    addrs: Vec<SimAddr>,
    nodes: Vec<Node>,
    now: Duration,
    done: BTreeMap<(usize, Ticket), (Duration, Done<u64>)>,
    /// Each replica's configuration.
    config: fn(u64) -> ReplicaConfig,
}

const STEP: Duration = Duration::from_micros(100);

fn config(id: u64) -> ReplicaConfig {
    ReplicaConfig { snapshot_every: 20, seed: 7 + id, ..ReplicaConfig::new(id) }
}

/// [`config`] with proposals and reads failing after one election timeout.
fn config_short_bound(id: u64) -> ReplicaConfig {
    ReplicaConfig { pending_timeout_elections: 1, ..config(id) }
}

impl Server {
    fn new(machine: impl Fn() -> Journal) -> Server {
        Server::with_config(machine, config)
    }

    fn with_config(machine: impl Fn() -> Journal, config: fn(u64) -> ReplicaConfig) -> Server {
        let net = SimNetwork::new(26, Limits::default(), Faults::none());
        let transports: Vec<SimTransport> = (0..3).map(|_| net.node()).collect();
        let addrs: Vec<SimAddr> = transports.iter().map(|t| t.addr()).collect();
        let nodes = transports
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let id = i as u64 + 1;
                let replica = Replica::with_machine(config(id), MemDurable::new(&[1, 2, 3]), machine(), peers(&addrs, id)).expect("replica");
                Reactor::new(t, replica)
            })
            .collect();
        Server { net, addrs, nodes, now: Duration::ZERO, done: BTreeMap::new(), config }
    }

    /// Runs `ms` virtual milliseconds, collecting outcomes; each ticket is
    /// done once.
    fn run(&mut self, ms: u64) {
        self.run_steps(ms * 10);
    }

    /// Runs `steps` steps of [`STEP`].
    fn run_steps(&mut self, steps: u64) {
        for _ in 0..steps {
            self.now += STEP;
            self.net.advance_to(self.now.as_nanos() as u64);
            for (i, n) in self.nodes.iter_mut().enumerate() {
                n.turn(self.now);
                for (ticket, done) in n.service.take_done() {
                    let previous = self.done.insert((i, ticket), (self.now, done));
                    assert!(previous.is_none(), "ticket {ticket:?} of replica {} done twice", i + 1);
                }
            }
        }
    }

    fn leader(&self) -> Option<usize> {
        self.nodes.iter().position(|n| n.service.status().role == StateRole::Leader)
    }

    fn elect(&mut self) -> usize {
        for _ in 0..50 {
            self.run(10);
            if let Some(l) = self.leader() {
                return l;
            }
        }
        panic!("no leader within 500 ms");
    }

    /// Waits (bounded) until every ticket in `tickets` of replica `at` is done.
    fn wait(&mut self, at: usize, tickets: &[Ticket]) {
        for _ in 0..200 {
            if tickets.iter().all(|t| self.done.contains_key(&(at, *t))) {
                return;
            }
            self.run(5);
        }
        panic!("tickets not done within 1 s: {:?}", tickets.iter().filter(|t| !self.done.contains_key(&(at, **t))).collect::<Vec<_>>());
    }

    fn outcome(&self, at: usize, t: Ticket) -> &Done<u64> {
        &self.done[&(at, t)].1
    }
}

fn peers(addrs: &[SimAddr], id: u64) -> BTreeMap<u64, SimAddr> {
    (1..=addrs.len() as u64).filter(|&p| p != id).map(|p| (p, addrs[p as usize - 1])).collect()
}

#[test]
fn proposals_and_reads_go_through_the_embedding_api() {
    let mut s = Server::new(Journal::default);
    let l = s.elect();
    let f = (l + 1) % 3;
    let tickets: Vec<Ticket> = (0..30u32).map(|i| s.nodes[l].service.propose(format!("e{i}").into_bytes()).expect("the leader takes it")).collect();
    s.wait(l, &tickets);
    let mut last = 0;
    for (i, t) in tickets.iter().enumerate() {
        let Done::Applied { index, output } = *s.outcome(l, *t) else { panic!("{t:?}: {:?}", s.outcome(l, *t)) };
        assert!(index > last, "applied in the order proposed");
        last = index;
        assert_eq!(output, i as u64 + 1, "the machine's output: entries held after it");
        let machine = s.nodes[l].service.machine();
        assert!(machine.persisted >= index, "an output is released only after its batch is persisted");
    }
    let read = s.nodes[l].service.read_index().expect("the leader reads");
    s.wait(l, &[read]);
    let Done::Readable { index } = *s.outcome(l, read) else { panic!("{:?}", s.outcome(l, read)) };
    assert!(index >= last, "the read index covers every acknowledged proposal");
    assert!(s.nodes[l].service.status().applied >= index);
    assert_eq!(s.nodes[l].service.machine().entries.len(), 30, "so the read sees all of them");
    s.run(20);
    for n in &s.nodes {
        assert_eq!(n.service.machine().entries, s.nodes[l].service.machine().entries, "replica {} applied the same", n.service.status().id);
    }
    let progress = s.nodes[l].service.progress();
    assert_eq!(progress.iter().map(|p| p.id).collect::<Vec<_>>(), (1..=3).filter(|&id| id != l as u64 + 1).collect::<Vec<_>>());
    assert!(progress.iter().all(|p| p.matched == s.nodes[l].service.status().last_index && !p.learner), "{progress:?}");
    assert!(s.nodes[f].service.progress().is_empty(), "only the leader knows progress");
    assert!(s.nodes[l].service.counters().snapshots >= 1, "compacted with this machine's snapshot");
    smr1_data_ops_are_refused_status_answered(&mut s, l);
}

#[test]
fn a_follower_proposes_and_reads_through_the_leader() {
    let mut s = Server::new(Journal::default);
    let l = s.elect();
    let f = (l + 1) % 3;
    let data: Vec<Vec<u8>> = (0..20u32).map(|i| format!("f{i}").into_bytes()).collect();
    let tickets: Vec<Ticket> = data.iter().map(|d| s.nodes[f].service.propose(d.clone()).expect("a follower takes it while it knows a leader")).collect();
    s.wait(f, &tickets);
    let mut last = 0;
    for (t, d) in tickets.iter().zip(&data) {
        let Done::Applied { index, output } = *s.outcome(f, *t) else { panic!("{t:?}: {:?}", s.outcome(f, *t)) };
        let journal = &s.nodes[f].service.machine().entries;
        let at = journal.iter().position(|(i, _)| *i == index).expect("applied here at that index");
        assert_eq!(&journal[at].1, d, "the follower's own output is for its own entry");
        assert_eq!(output, at as u64 + 1, "the machine's output on the follower");
        assert!(index > last, "applied in the order proposed");
        last = index;
    }
    let read = s.nodes[f].service.read_index().expect("a follower reads through the leader");
    s.wait(f, &[read]);
    let Done::Readable { index } = *s.outcome(f, read) else { panic!("{:?}", s.outcome(f, read)) };
    assert!(index >= last, "the read index covers every acknowledged proposal");
    assert!(s.nodes[f].service.status().applied >= index, "served only once applied here");
    s.run(20);
    for n in &s.nodes {
        assert_eq!(n.service.machine().entries, s.nodes[l].service.machine().entries, "replica {} applied the same", n.service.status().id);
    }
    assert_eq!(s.nodes[f].service.forwarding(), 0, "nothing left waiting");
}

/// The planted bug: forwarded copies applied again.
fn config_no_dedup(id: u64) -> ReplicaConfig {
    let mut c = config(id);
    c.faults.forward_without_dedup = true;
    c
}

/// Proposes 60 entries through a follower on a network that duplicates
/// half its messages; the largest number of times one was applied.
fn forward_with_duplicates(config: fn(u64) -> ReplicaConfig) -> (Server, usize) {
    let mut s = Server::with_config(Journal::default, config);
    let l = s.elect();
    let f = (l + 2) % 3;
    let mut faults = Faults::none();
    faults.duplicate_per_million = 500_000;
    faults.reorder = true;
    s.net.set_faults(faults);
    let data: Vec<Vec<u8>> = (0..60u32).map(|i| format!("d{i}").into_bytes()).collect();
    let mut tickets = Vec::new();
    for d in &data {
        tickets.push(s.nodes[f].service.propose(d.clone()).expect("taken"));
        s.run_steps(3);
    }
    s.wait(f, &tickets);
    s.run(50);
    let most = s.nodes.iter().flat_map(|n| data.iter().map(|d| n.service.machine().entries.iter().filter(|(_, x)| x == d).count())).max().unwrap_or(0);
    let applied = tickets.iter().filter(|t| matches!(s.outcome(f, **t), Done::Applied { .. })).count();
    assert_eq!(applied, data.len(), "every forward answered as applied on a network that loses nothing");
    (s, most)
}

#[test]
fn a_duplicated_forward_is_applied_once() {
    let (_, most) = forward_with_duplicates(config);
    assert_eq!(most, 1, "every entry applied once on every replica");
    let (_, planted) = forward_with_duplicates(config_no_dedup);
    assert!(planted > 1, "without the table a duplicated forward applies twice (so the network did duplicate)");
}

#[test]
fn a_follower_holds_its_requests_through_an_election_and_a_cut_off_one_fails_within_the_bound() {
    let mut s = Server::new(Journal::default);
    let early = s.nodes[0].service.propose(b"early".to_vec()).expect("held until a leader is known");
    let read = s.nodes[0].service.read_index().expect("held until a leader is known");
    s.wait(0, &[early, read]);
    let l = s.elect();
    match s.outcome(0, early) {
        Done::Applied { .. } => assert!(s.nodes[l].service.machine().holds(b"early"), "applied, so the leader has it"),
        // A replica that became leader itself proposes it as its own;
        // otherwise only the bound ends it.
        Done::Failed(f) => assert!(matches!(f, Failure::NoQuorum | Failure::NotProposed), "{f:?}"),
        other => panic!("{other:?}"),
    }
    let mut s = Server::with_config(Journal::default, config_short_bound);
    let l = s.elect();
    let f = (l + 1) % 3;
    s.net.partition(&[s.addrs[f]]);
    let asked = s.now;
    let write = s.nodes[f].service.propose(b"lost".to_vec()).expect("it still knows the leader");
    let read = s.nodes[f].service.read_index().expect("it still knows the leader");
    s.run(100);
    for t in [write, read] {
        let (at, done) = &s.done[&(f, t)];
        assert!(matches!(done, Done::Failed(_)), "{t:?}: {done:?}");
        let bound = Duration::from_millis(10 * config_short_bound(1).pending_timeout_ticks() + 2);
        assert!(*at - asked <= bound, "{t:?} failed after {:?} (bound {bound:?})", *at - asked);
    }
    assert!(!s.nodes[l].service.machine().holds(b"lost"), "the leader never had it");
}

/// A replica whose machine is not served over SMR1 still answers STATUS,
/// and refuses PUT as BAD_REQUEST.
fn smr1_data_ops_are_refused_status_answered(s: &mut Server, l: usize) {
    let mut client = s.net.node();
    let conn = client.connect(&s.addrs[l]).expect("connect");
    let put = Request { op: Op::Put, client: 1, seq: 1, key: b"k".to_vec(), value: b"v".to_vec(), expect: None };
    let status = Request { op: Op::Status, client: 0, seq: 0, key: vec![], value: vec![], expect: None };
    for (token, req) in [(1, put), (2, status)] {
        client.call(conn, &REQUEST_MAGIC, req.to_bytes(), token).expect("call");
    }
    let mut answers = BTreeMap::new();
    let mut events = Vec::new();
    for _ in 0..100 {
        s.run(1);
        client.poll(&mut events, 16);
        for e in events.drain(..) {
            if let Event::Completion(c) = e {
                let Ok(Output::Response { payload, .. }) = c.result else { panic!("answered") };
                answers.insert(c.token, Response::decode(&payload).expect("decodes").status);
            }
        }
    }
    assert_eq!(answers, BTreeMap::from([(1, Status::BadRequest), (2, Status::Ok)]));
}

#[test]
fn a_leader_change_answers_every_ticket_once_and_never_as_applied_unless_it_was() {
    let mut s = Server::new(Journal::default);
    let l = s.elect();
    let target = (l + 1) % 3;
    let mut tickets = Vec::new();
    for i in 0..40u32 {
        match s.nodes[l].service.propose(format!("p{i}").into_bytes()) {
            Ok(t) => tickets.push((t, format!("p{i}").into_bytes())),
            Err(NotLeader { .. }) => break,
        }
        if i == 10 {
            s.nodes[l].service.transfer_leader(target as u64 + 1);
        }
        s.run(1);
    }
    s.run(100);
    assert_eq!(s.leader(), Some(target), "leadership moved");
    let tickets_only: Vec<Ticket> = tickets.iter().map(|(t, _)| *t).collect();
    s.wait(l, &tickets_only);
    let new = &s.nodes[target].service;
    let mut applied = 0;
    for (t, data) in &tickets {
        match s.outcome(l, *t) {
            Done::Applied { index, .. } => {
                applied += 1;
                assert!(new.machine().entries.iter().any(|(i, d)| i == index && d == data), "{t:?} answered applied at {index}: the new leader holds it there");
            }
            Done::Failed(Failure::NotProposed) => assert!(!new.machine().holds(data), "{t:?} was never proposed"),
            Done::Failed(Failure::LeadershipLost | Failure::NoQuorum) => {} // unknown outcome
            other => panic!("{t:?}: {other:?}"),
        }
    }
    assert!(applied >= 10, "the proposals before the transfer were applied ({applied})");
    let t = s.nodes[target].service.propose(b"after".to_vec()).expect("the new leader takes proposals");
    s.wait(target, &[t]);
    assert!(matches!(s.outcome(target, t), Done::Applied { .. }));
}

/// Cuts the leader off `delay_ms` after its election and checks that its
/// proposals and reads made then all fail within the bound, none applied
/// or read, and that it stepped down within two election timeouts; returns
/// how they failed while it was still the leader (NoQuorum) or after.
fn partition_the_leader(config: fn(u64) -> ReplicaConfig, delay_ms: u64) -> Vec<Failure> {
    let mut s = Server::with_config(Journal::default, config);
    let l = s.elect();
    let t = s.nodes[l].service.propose(b"before".to_vec()).expect("leader");
    s.wait(l, &[t]);
    s.run(delay_ms);
    s.net.partition(&[s.addrs[l]]);
    let start = s.now;
    let cfg = (s.config)(l as u64 + 1);
    let tick = cfg.tick;
    let bound = tick * cfg.pending_timeout_ticks() as u32 + tick;
    let mut proposals = Vec::new();
    let mut reads = Vec::new();
    for i in 0..5u32 {
        let Ok(p) = s.nodes[l].service.propose(format!("cut{i}").into_bytes()) else { break };
        proposals.push((p, format!("cut{i}").into_bytes(), s.now));
        reads.push((s.nodes[l].service.read_index().expect("still leader"), s.now));
        s.run(1);
    }
    let mut stepped_down_at = None;
    while s.now < start + bound + Duration::from_millis(10) {
        s.run(1);
        if stepped_down_at.is_none() && s.nodes[l].service.status().role != StateRole::Leader {
            stepped_down_at = Some(s.now);
        }
    }
    let stepped = stepped_down_at.expect("the cut-off leader stepped down (check quorum)");
    assert!(stepped <= start + tick * (2 * cfg.election_ticks as u32 + 2), "within two election timeouts: {:?}", stepped - start);
    let mut how = Vec::new();
    let asked = proposals.iter().map(|(t, _, at)| (*t, *at)).chain(reads.iter().copied());
    for (t, asked_at) in asked {
        let (at, done) = s.done.get(&(l, t)).unwrap_or_else(|| panic!("{t:?} not done within the bound"));
        let Done::Failed(why) = done else { panic!("{t:?} answered by a leader without a majority: {done:?}") };
        assert!(*at <= asked_at + bound, "{t:?} done {:?} after it was asked, past the bound {bound:?}", *at - asked_at);
        assert!(*why != Failure::NoQuorum || *at <= stepped, "NoQuorum comes from the bound, while still the leader");
        how.push(*why);
    }
    s.net.heal_all();
    s.run(300);
    let l2 = s.leader().expect("a leader after healing");
    for (_, data, _) in &proposals {
        assert!(!s.nodes[l2].service.machine().holds(data), "the cut-off leader's proposals were never committed (a new term took their places)");
    }
    let t = s.nodes[l2].service.propose(b"healed".to_vec()).expect("leader");
    s.wait(l2, &[t]);
    assert!(matches!(s.outcome(l2, t), Done::Applied { .. }));
    how
}

#[test]
fn a_partitioned_leader_fails_every_proposal_and_read_within_the_bound() {
    for delay_ms in [0, 3, 7] {
        let how = partition_the_leader(config, delay_ms);
        assert_eq!(how.len(), 10, "five proposals and five reads");
    }
}

/// With a bound of one election timeout, a leader cut off right after its
/// last quorum check is still the leader when the bound expires: its
/// proposals and reads fail with NoQuorum, not by its stepping down.
#[test]
fn the_bound_answers_before_the_leader_steps_down_when_it_is_shorter() {
    let mut no_quorum = 0;
    for delay_ms in 0..10 {
        no_quorum += partition_the_leader(config_short_bound, delay_ms).iter().filter(|&&w| w == Failure::NoQuorum).count();
    }
    assert!(no_quorum > 0, "some proposal or read failed by the bound while its leader still led");
}

#[test]
fn a_persistent_machine_restarts_without_applying_twice_and_a_lagging_follower_gets_its_snapshot() {
    let mut s = Server::new(Journal::persistent);
    let l = s.elect();
    let lagging = (l + 1) % 3;
    s.net.partition(&[s.addrs[lagging]]);
    let mut tickets = Vec::new();
    for i in 0..60u32 {
        tickets.push(s.nodes[l].service.propose(format!("w{i}").into_bytes()).expect("leader"));
        s.run(1);
    }
    s.wait(l, &tickets);
    assert!(s.nodes[l].service.durable().first_index() > 2, "the leader compacted past what the cut-off follower holds");
    // A follower that applied everything restarts: its machine kept what it
    // applied, its store what it persisted.
    let f = 3 - l - lagging;
    s.run(20);
    let id = f as u64 + 1;
    let durable = s.nodes[f].service.take_durable();
    let machine = s.nodes[f].service.take_machine().after_crash();
    let kept = machine.applied;
    assert!(kept >= 60, "the machine kept what it applied ({kept})");
    s.nodes[f].service = Replica::with_machine(config(id), durable, machine, peers(&s.addrs, id)).expect("restart");
    assert_eq!(s.nodes[f].service.machine().restores, 0, "not restored from the snapshot: it is ahead of it");
    s.net.heal_all();
    let more: Vec<Ticket> = (0..5u32).map(|i| s.nodes[l].service.propose(format!("m{i}").into_bytes()).expect("leader")).collect();
    s.wait(l, &more);
    s.run(300);
    let leader_entries = s.nodes[l].service.machine().entries.clone();
    assert_eq!(leader_entries.len(), 65);
    assert_eq!(s.nodes[f].service.machine().entries, leader_entries, "the restarted follower applied each entry once (the journal asserts it)");
    let lag = s.nodes[lagging].service.machine();
    assert!(lag.restores >= 1, "the lagging follower was sent the machine's snapshot");
    assert_eq!(lag.entries, leader_entries, "and caught up from it");
}

#[test]
fn a_machine_that_cannot_persist_halts_its_replica_and_answers_nothing_of_the_batch() {
    let mut s = Server::new(Journal::default);
    let l = s.elect();
    let f = (l + 1) % 3;
    s.nodes[f].service.machine_mut().fail_persist = true;
    let t = s.nodes[l].service.propose(b"doomed on one".to_vec()).expect("leader");
    s.wait(l, &[t]);
    assert!(matches!(s.outcome(l, t), Done::Applied { .. }), "a majority still applies");
    s.run(10);
    let why = s.nodes[f].service.halted().expect("the follower halted");
    assert!(why.contains("the medium refused the write"), "{why}");
    // The leader's own machine failing: its waiting proposals fail, none applied.
    s.nodes[l].service.machine_mut().fail_persist = true;
    let doomed: Vec<Ticket> = (0..3u32).map(|i| s.nodes[l].service.propose(format!("d{i}").into_bytes()).expect("leader")).collect();
    s.run(50);
    let failed: BTreeSet<Ticket> = doomed.iter().copied().filter(|t| matches!(s.done.get(&(l, *t)), Some((_, Done::Failed(Failure::Halted))))).collect();
    assert_eq!(failed.len(), 3, "every waiting proposal learns the halt: {:?}", doomed.iter().map(|t| s.done.get(&(l, *t))).collect::<Vec<_>>());
    assert!(s.nodes[l].service.propose(b"more".to_vec()).is_err(), "a halted replica takes nothing");
}

/// Sends `req` on `conn` and runs the cluster until its answer comes (at
/// most `ms` virtual milliseconds).
fn call(s: &mut Server, client: &mut SimTransport, conn: transport::ConnId, req: &Request, token: u64, ms: u64) -> Option<Response> {
    client.call(conn, &REQUEST_MAGIC, req.to_bytes(), token).ok()?;
    let mut events = Vec::new();
    for _ in 0..ms * 10 {
        s.run_steps(1);
        client.poll(&mut events, 16);
        for e in events.drain(..) {
            if let Event::Completion(c) = e {
                if c.token == token {
                    let Ok(Output::Response { payload, .. }) = c.result else { return None };
                    return Some(Response::decode(&payload).expect("decodes"));
                }
            }
        }
    }
    None
}

/// A membership change whose answer the bound cut short (RETRY) and that
/// its client sends again while its entry is still unapplied is told to
/// retry, never refused as if another change were pending.
#[test]
fn a_membership_change_retried_after_the_bound_is_not_refused_as_someone_elses() {
    let mut retried_in_progress = 0;
    for delay_ms in 0..10 {
        let mut s = Server::with_config(Journal::default, config_short_bound);
        let l = s.elect();
        s.run(delay_ms);
        let newcomer = s.net.node();
        let add = Request::member(Op::AddMember, 5, 1, 4, &newcomer.addr().0.to_le_bytes());
        let mut client = s.net.node();
        let conn = client.connect(&s.addrs[l]).expect("connect");
        s.net.partition(&[s.addrs[l], client.addr()]);
        let first = call(&mut s, &mut client, conn, &add, 1, 100).expect("answered within the bound");
        assert_eq!(first.status, Status::Retry, "a change the cut-off leader could not commit");
        let again = call(&mut s, &mut client, conn, &add, 2, 100).expect("answered");
        assert!(matches!(again.status, Status::Retry | Status::NotLeader), "the same request again: {again:?}");
        if again.status == Status::Retry && s.nodes[l].service.status().role == StateRole::Leader {
            retried_in_progress += 1;
        }
    }
    assert!(retried_in_progress > 0, "some retry found its own change still in progress at the leader");
}
