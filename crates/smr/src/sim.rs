//! The deterministic simulation of a replicated cluster (TigerBeetle's
//! VOPR, raft-rs's test network): replicas, clients, network and faults
//! all driven from one seed and one thread, on a virtual clock.
//!
//! A run: `replicas` replicas on a [`SimNetwork`] (latency, loss,
//! duplication, reordering, broken connections), `clients` closed-loop
//! clients doing random PUT, GET, DEL and CAS on a few keys, and a fault
//! schedule drawn from the seed: partitions (symmetric and one-way),
//! healing, crashes of any replica at any point (between turns, or inside
//! the store before its k-th durable write: what was sent stays sent,
//! what was not stored is lost) and restarts. Then everything heals, every
//! client finishes, and one client reads every key.
//!
//! Checked: the history is linearizable ([`lincheck`], per key: this also
//! finds an acknowledged write that was lost); at most one leader per
//! term; an index applied anywhere is applied with the same term
//! everywhere (a committed entry never changes); after healing, every
//! replica holds the same map.
//!
//! A run is a pure function of its seed and [`SimConfig`]: a failure is
//! replayed by running the seed again.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use lincheck::kv::{first_violation, Input, KvOp, Output};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use raft::eraftpb::{ConfState, Entry, HardState, SnapshotMetadata};
use raft::StateRole;
use reactor::Reactor;
use transport::sim::{Faults as NetFaults, SimAddr, SimNetwork, SimTransport};
use transport::{ConnId, Event, Limits, Output as TOutput, Transport};

use crate::command::{Op, Request, Response, Status, REQUEST_MAGIC};
use crate::node::{Faults, Replica, ReplicaConfig};
use crate::store::{Durable, MemDurable, StoreError};

/// What a run simulates.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Replicas (3 or 5).
    pub replicas: u64,
    /// Closed-loop clients.
    pub clients: usize,
    /// Distinct keys (few, so that operations collide).
    pub keys: usize,
    /// Virtual time with faults.
    pub faulty_ms: u64,
    /// Crashes and restarts.
    pub crashes: bool,
    /// Partitions.
    pub partitions: bool,
    /// Network faults (loss, duplication, reordering, broken connections).
    pub lossy: bool,
    /// Planted bugs in every replica.
    pub planted: Faults,
    /// Snapshot and compact every this many applied entries.
    pub snapshot_every: u64,
}

impl SimConfig {
    /// Every fault on, 3 replicas, 4 clients, 3 keys, 300 ms.
    pub fn standard(replicas: u64) -> SimConfig {
        SimConfig {
            replicas,
            clients: 4,
            keys: 3,
            faulty_ms: 300,
            crashes: true,
            partitions: true,
            lossy: true,
            planted: Faults::default(),
            snapshot_every: 64,
        }
    }
}

/// What a run found.
#[derive(Clone, Debug, Default)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// Operations in the history; of them, acknowledged.
    pub ops: usize,
    /// Operations acknowledged.
    pub acknowledged: usize,
    /// Crashes injected.
    pub crashes: u64,
    /// Partitions injected.
    pub partitions: u64,
    /// Leader elections seen (distinct terms with a leader).
    pub terms_with_leader: usize,
    /// What went wrong (empty: passed).
    pub violations: Vec<String>,
    /// The history of the key that is not linearizable, if one is not.
    pub failing_history: Vec<KvOp>,
}

impl SimReport {
    /// True if every check passed.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The payload of a simulated crash inside a store.
struct SimCrash;

thread_local! {
    /// True while a replica turns inside the simulation: its panics are
    /// findings, reported in the run's violations rather than printed.
    static IN_TURN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Keeps the panic hook from printing the simulated crashes and the
/// replicas' panics that the simulation reports (once per process; every
/// other panic still goes to the hook that was there).
fn quiet_crashes() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<SimCrash>() && !IN_TURN.with(|t| t.get()) {
                previous(info);
            }
        }));
    });
}

/// A [`MemDurable`] that crashes (panics with [`SimCrash`]) before its
/// k-th durable write, when armed.
#[derive(Default)]
pub struct Crashable {
    inner: MemDurable,
    countdown: Option<u32>,
}

impl Crashable {
    fn new(voters: &[u64]) -> Crashable {
        Crashable { inner: MemDurable::new(voters), countdown: None }
    }

    fn write(&mut self) {
        if let Some(n) = self.countdown.as_mut() {
            if *n == 0 {
                self.countdown = None;
                std::panic::panic_any(SimCrash);
            }
            *n -= 1;
        }
    }
}

impl Durable for Crashable {
    fn hard_state(&self) -> HardState {
        self.inner.hard_state()
    }
    fn conf_state(&self) -> ConfState {
        self.inner.conf_state()
    }
    fn snapshot(&self) -> (SnapshotMetadata, Vec<u8>) {
        self.inner.snapshot()
    }
    fn first_index(&self) -> u64 {
        self.inner.first_index()
    }
    fn last_index(&self) -> u64 {
        self.inner.last_index()
    }
    fn term(&self, index: u64) -> Option<u64> {
        self.inner.term(index)
    }
    fn entry(&self, index: u64) -> Option<Entry> {
        self.inner.entry(index)
    }
    fn append(&mut self, entries: &[Entry]) -> Result<(), StoreError> {
        if !entries.is_empty() {
            self.write();
        }
        self.inner.append(entries)
    }
    fn set_hard_state(&mut self, hs: &HardState) -> Result<(), StoreError> {
        self.write();
        self.inner.set_hard_state(hs)
    }
    fn note_commit(&mut self, commit: u64) {
        self.inner.note_commit(commit)
    }
    fn set_conf_state(&mut self, cs: &ConfState) -> Result<(), StoreError> {
        self.write();
        self.inner.set_conf_state(cs)
    }
    fn install_snapshot(&mut self, meta: &SnapshotMetadata, data: &[u8]) -> Result<(), StoreError> {
        self.write();
        self.inner.install_snapshot(meta, data)
    }
    fn compact(&mut self, meta: &SnapshotMetadata, data: &[u8]) -> Result<(), StoreError> {
        self.write();
        self.inner.compact(meta, data)
    }
}

type SimReplica = Reactor<SimTransport, Replica<SimTransport, Crashable>>;

/// A replica slot: up (its loop), or down (its durable state, and when it
/// comes back).
enum Slot {
    Up(Box<SimReplica>),
    Down { durable: Crashable, back_ns: u64 },
}

/// One closed-loop client and its operation in flight.
struct Client {
    transport: SimTransport,
    session: u64,
    seq: u64,
    target: u64,
    conn: Option<ConnId>,
    op: Option<InFlight>,
    /// When it may next send (after a redirect or a failure: a short backoff).
    next_ns: u64,
    /// Calls made so far (the next call's token).
    tokens: u64,
}

struct InFlight {
    history_at: usize,
    req: Request,
    sent: bool,
    /// The token of the call in flight (each attempt has its own, so a
    /// late completion of an earlier attempt is never taken for it).
    token: u64,
}

struct World {
    cfg: SimConfig,
    rng: Xoshiro256PlusPlus,
    net: SimNetwork,
    addrs: Vec<SimAddr>,
    slots: Vec<Slot>,
    clients: Vec<Client>,
    history: Vec<KvOp>,
    leaders: BTreeMap<u64, u64>,
    applied: BTreeMap<u64, u64>,
    report: SimReport,
    /// Mean time between injected faults in this run.
    fault_every_ms: u64,
    /// When to cut a replica off from everyone (the second step of
    /// [`World::commit_crash_isolate`]).
    isolate_at: Option<(u64, usize)>,
    /// Crashed replicas whose nodes go down at the given time.
    dying: Vec<(usize, u64, Box<SimReplica>)>,
    /// A replica panicked: the run stops and reports it.
    broken: bool,
}

const MS: u64 = 1_000_000;

/// How long a crashed replica's node stays connected, delivering what it
/// sent before the crash (longer than any delivery but the slow tail).
const LINGER_NS: u64 = MS;

/// Runs one seeded simulation.
pub fn run(seed: u64, cfg: &SimConfig) -> SimReport {
    quiet_crashes();
    let mut w = World::new(seed, cfg.clone());
    let end_ns = cfg.faulty_ms * MS;
    let mut next_fault = 20 * MS;
    let mut issuing = true;
    while w.net.now_ns() < end_ns + 2_000 * MS {
        let now = w.net.now_ns();
        if now >= end_ns && issuing {
            issuing = false;
            w.calm();
        }
        if issuing && now >= next_fault {
            let hold = w.inject_fault();
            next_fault = now + hold.unwrap_or(w.rng.gen_range(1..=2 * w.fault_every_ms) * MS);
        }
        if let Some((at, l)) = w.isolate_at {
            if now >= at {
                w.isolate_at = None;
                if issuing {
                    w.net.partition(&[w.addrs[l]]);
                }
            }
        }
        w.bury(now);
        w.restart_due(now);
        w.turn_all(now);
        if w.broken {
            return w.report;
        }
        w.clients_step(now, issuing);
        w.observe();
        if !issuing && w.clients.iter().all(|c| c.op.is_none()) {
            break;
        }
        let fault_due = if issuing { next_fault.min(w.isolate_at.map_or(u64::MAX, |(at, _)| at)) } else { u64::MAX };
        let next = w.next_due(now, fault_due, issuing);
        w.net.advance_to(next);
    }
    w.finish();
    w.report
}

impl World {
    fn new(seed: u64, cfg: SimConfig) -> World {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let net = SimNetwork::new(rng.gen(), Limits::default(), NetFaults::none());
        let transports: Vec<SimTransport> = (0..cfg.replicas).map(|_| net.node()).collect();
        let addrs: Vec<SimAddr> = transports.iter().map(|t| t.addr()).collect();
        let voters: Vec<u64> = (1..=cfg.replicas).collect();
        let mut w = World {
            rng,
            net,
            addrs,
            slots: Vec::new(),
            clients: Vec::new(),
            history: Vec::new(),
            leaders: BTreeMap::new(),
            applied: BTreeMap::new(),
            report: SimReport { seed, ..Default::default() },
            fault_every_ms: 20,
            isolate_at: None,
            dying: Vec::new(),
            broken: false,
            cfg,
        };
        for (i, t) in transports.into_iter().enumerate() {
            let r = w.make_replica(i as u64 + 1, t, Crashable::new(&voters));
            w.slots.push(Slot::Up(Box::new(r)));
        }
        for c in 0..w.cfg.clients {
            let transport = w.net.node();
            let target = w.rng.gen_range(1..=w.cfg.replicas);
            w.clients.push(Client { transport, session: c as u64 + 1, seq: 0, target, conn: None, op: None, next_ns: 0, tokens: 0 });
        }
        if w.cfg.lossy {
            // Swarm testing: each seed draws its own loss rate, so that
            // some runs lose a little and some a lot.
            let mut f = NetFaults::harsh();
            f.break_per_million = 200;
            f.drop_per_million = [0, 10_000, 50_000, 200_000, 400_000][w.rng.gen_range(0..5)];
            w.net.set_faults(f);
        }
        w.fault_every_ms = [5, 20, 50][w.rng.gen_range(0..3)];
        w
    }

    fn make_replica(&mut self, id: u64, t: SimTransport, durable: Crashable) -> SimReplica {
        let peers = (1..=self.cfg.replicas).filter(|&p| p != id).map(|p| (p, self.addrs[p as usize - 1])).collect();
        let mut config = ReplicaConfig::new(id);
        config.seed = self.rng.gen();
        config.faults = self.cfg.planted;
        config.snapshot_every = self.cfg.snapshot_every;
        config.trace_applied = true;
        let replica = Replica::new(config, durable, peers).expect("a replica over a valid store");
        Reactor::new(t, replica)
    }

    /// Every up replica turns at `now` until none has more to do (bounded).
    fn turn_all(&mut self, now_ns: u64) {
        let now = Duration::from_nanos(now_ns);
        for _ in 0..8 {
            let mut busy = false;
            for i in 0..self.slots.len() {
                let Slot::Up(r) = &mut self.slots[i] else { continue };
                IN_TURN.with(|t| t.set(true));
                let result = catch_unwind(AssertUnwindSafe(|| r.turn(now)));
                IN_TURN.with(|t| t.set(false));
                match result {
                    Ok(worked) => busy |= worked,
                    Err(payload) if payload.is::<SimCrash>() => {
                        self.crash(i, now_ns)
                    }
                    Err(payload) => {
                        // A replica's own assertion (or raft-rs's) failed:
                        // that is a finding, not a crash to recover from.
                        let what = payload.downcast_ref::<String>().cloned().or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()));
                        self.report.violations.push(format!("replica {} panicked: {}", i + 1, what.unwrap_or_default()));
                        self.broken = true;
                        return;
                    }
                }
            }
            if !busy {
                break;
            }
        }
    }

    /// Replica `i` crashes now: it does nothing more, and restarts from its
    /// durable state 1-100 ms later. What it sent is still delivered (a
    /// dead process's kernel sends what it had buffered): its node goes
    /// down, breaking its connections, only [`LINGER_NS`] later.
    fn crash(&mut self, i: usize, now_ns: u64) {
        let back_ns = now_ns + LINGER_NS + self.rng.gen_range(MS..100 * MS);
        let Slot::Up(r) = &mut self.slots[i] else { return };
        let durable = r.service.take_durable();
        self.record_applied(i);
        let Slot::Up(dead) = std::mem::replace(&mut self.slots[i], Slot::Down { durable, back_ns }) else { unreachable!() };
        self.dying.push((i, now_ns + LINGER_NS, dead));
        self.report.crashes += 1;
    }

    /// Takes down the nodes of crashed replicas whose messages had time to
    /// arrive.
    fn bury(&mut self, now_ns: u64) {
        let mut k = 0;
        while k < self.dying.len() {
            if self.dying[k].1 <= now_ns {
                let (i, _, dead) = self.dying.swap_remove(k);
                drop(dead);
                self.net.down(self.addrs[i]);
            } else {
                k += 1;
            }
        }
    }

    fn restart_due(&mut self, now_ns: u64) {
        for i in 0..self.slots.len() {
            let Slot::Down { back_ns, .. } = &self.slots[i] else { continue };
            if *back_ns > now_ns || self.dying.iter().any(|d| d.0 == i) {
                continue;
            }
            let Slot::Down { durable, .. } = std::mem::replace(&mut self.slots[i], Slot::Down { durable: Crashable::default(), back_ns: 0 }) else {
                unreachable!()
            };
            let t = self.net.restart(self.addrs[i]);
            let r = self.make_replica(i as u64 + 1, t, durable);
            self.slots[i] = Slot::Up(Box::new(r));
        }
    }

    /// Injects one fault; some say how long to hold before the next.
    fn inject_fault(&mut self) -> Option<u64> {
        let n = self.cfg.replicas as usize;
        match self.rng.gen_range(0..11) {
            0..=2 if self.cfg.partitions => {
                let side: Vec<SimAddr> = (0..n).filter(|_| self.rng.gen_bool(0.5)).map(|i| self.addrs[i]).collect();
                self.net.partition(&side);
                self.report.partitions += 1;
            }
            3 if self.cfg.partitions => {
                let (a, b) = (self.rng.gen_range(0..n), self.rng.gen_range(0..n));
                if a != b {
                    self.net.cut(self.addrs[a], self.addrs[b]);
                    self.report.partitions += 1;
                }
            }
            4..=5 => self.net.heal_all(),
            9 if self.cfg.partitions => {
                // Jepsen's favourite: cut the leader off from everyone.
                let leader = self.slots.iter().position(|s| matches!(s, Slot::Up(r) if r.service.status().role == StateRole::Leader));
                if let Some(l) = leader {
                    self.net.partition(&[self.addrs[l]]);
                    self.report.partitions += 1;
                }
            }
            6 if self.cfg.crashes => {
                let i = self.rng.gen_range(0..n);
                if matches!(self.slots[i], Slot::Up(_)) {
                    let now = self.net.now_ns();
                    self.crash(i, now);
                }
            }
            7..=8 if self.cfg.crashes => {
                // Crash inside the store, before one of its next writes.
                let i = self.rng.gen_range(0..n);
                let k = self.rng.gen_range(0..3);
                if let Slot::Up(r) = &mut self.slots[i] {
                    r.service.durable_mut_for_sim().countdown = Some(k);
                }
            }
            10 if self.cfg.partitions && self.cfg.crashes => {
                // Hold it long enough for the others to elect a leader.
                self.commit_crash_isolate();
                return Some(150 * MS);
            }
            _ => {}
        }
        None
    }

    /// A correlated schedule that single faults rarely line up: the leader
    /// is cut off from all followers but one, that follower crashes before
    /// its next durable write, and 3 ms later the leader is cut off from
    /// everyone. A write the leader committed with that follower alone must
    /// survive (it is on the follower's media, or it was never
    /// acknowledged).
    fn commit_crash_isolate(&mut self) {
        let Some(l) = self.slots.iter().position(|s| matches!(s, Slot::Up(r) if r.service.status().role == StateRole::Leader)) else {
            return;
        };
        let n = self.cfg.replicas as usize;
        let f = (l + 1 + self.rng.gen_range(0..n - 1)) % n;
        for g in (0..n).filter(|&g| g != l && g != f) {
            self.net.cut(self.addrs[l], self.addrs[g]);
            self.net.cut(self.addrs[g], self.addrs[l]);
        }
        if let Slot::Up(r) = &mut self.slots[f] {
            r.service.durable_mut_for_sim().countdown = Some(0);
        }
        self.isolate_at = Some((self.net.now_ns() + 3 * MS, l));
        self.report.partitions += 1;
    }

    /// The end of the faults: heal, restart everyone, a perfect network.
    fn calm(&mut self) {
        self.net.heal_all();
        self.net.set_faults(NetFaults::none());
        for s in &mut self.slots {
            match s {
                Slot::Down { back_ns, .. } => *back_ns = 0,
                Slot::Up(r) => r.service.durable_mut_for_sim().countdown = None,
            }
        }
    }

    fn next_due(&self, now: u64, fault: u64, issuing: bool) -> u64 {
        let mut next = fault.min(self.net.next_due_ns().unwrap_or(u64::MAX));
        for s in &self.slots {
            match s {
                Slot::Up(r) => {
                    if let Some(d) = reactor::Service::<SimTransport>::next_deadline(&r.service) {
                        next = next.min(d.as_nanos() as u64);
                    }
                }
                // A crashed replica's node still lingering comes back
                // after it goes down (its time is in `dying`, below).
                Slot::Down { back_ns, .. } => next = next.min((*back_ns).max(now + 1)),
            }
        }
        for d in &self.dying {
            next = next.min(d.1);
        }
        for c in &self.clients {
            let waiting = match &c.op {
                Some(op) => !op.sent,
                None => issuing,
            };
            if waiting && c.next_ns > now {
                next = next.min(c.next_ns);
            }
        }
        next.max(now + 1)
    }

    fn random_request(&mut self, session: u64, seq: u64) -> Request {
        let key = format!("k{}", self.rng.gen_range(0..self.cfg.keys)).into_bytes();
        let value = format!("{session}.{seq}").into_bytes();
        let (op, expect) = match self.rng.gen_range(0..10) {
            0..=3 => (Op::Put, None),
            4..=6 => (Op::Get, None),
            7 => (Op::Del, None),
            _ => {
                // Expect a value some client may have written.
                let s = self.rng.gen_range(1..=self.cfg.clients as u64);
                let q = self.rng.gen_range(0..=seq);
                (Op::Cas, if q == 0 { None } else { Some(format!("{s}.{q}").into_bytes()) })
            }
        };
        let value = if matches!(op, Op::Put | Op::Cas) { value } else { Vec::new() };
        Request { op, client: session, seq, key, value, expect }
    }

    fn clients_step(&mut self, now: u64, issuing: bool) {
        for c in 0..self.clients.len() {
            self.client_poll(c, now);
            let cl = &self.clients[c];
            if cl.next_ns > now {
                continue;
            }
            if cl.op.is_none() && issuing {
                let (session, seq) = (cl.session, cl.seq + 1);
                let req = self.random_request(session, seq);
                let input = match req.op {
                    Op::Put => Input::Put(req.value.clone()),
                    Op::Get | Op::Status => Input::Get,
                    Op::Del => Input::Del,
                    Op::Cas => Input::Cas { expect: req.expect.clone(), new: req.value.clone() },
                    op => unreachable!("the simulation issues no {op:?}"),
                };
                self.history.push(KvOp { key: req.key.clone(), call: now, ret: None, input });
                let cl = &mut self.clients[c];
                if req.op.writes() {
                    cl.seq = seq;
                }
                cl.op = Some(InFlight { history_at: self.history.len() - 1, req, sent: false, token: 0 });
            }
            self.client_send(c, now);
        }
    }

    fn client_send(&mut self, c: usize, now: u64) {
        let addr = {
            let cl = &self.clients[c];
            if cl.op.as_ref().is_none_or(|op| op.sent) {
                return;
            }
            self.addrs[cl.target as usize - 1]
        };
        let cl = &mut self.clients[c];
        let conn = match cl.conn {
            Some(conn) => conn,
            None => match cl.transport.connect(&addr) {
                Ok(conn) => {
                    cl.conn = Some(conn);
                    conn
                }
                Err(_) => {
                    cl.next_ns = now + MS;
                    return;
                }
            },
        };
        let op = cl.op.as_mut().expect("checked");
        cl.tokens += 1;
        match cl.transport.call(conn, &REQUEST_MAGIC, op.req.to_bytes(), cl.tokens) {
            Ok(()) => {
                op.sent = true;
                op.token = cl.tokens;
            }
            Err(_) => {
                cl.conn = None;
                cl.next_ns = now + MS;
            }
        }
    }

    fn client_poll(&mut self, c: usize, now: u64) {
        let mut events = Vec::new();
        self.clients[c].transport.poll(&mut events, 64);
        for e in events {
            match e {
                Event::Completion(done) => self.client_done(c, now, done.token, done.result),
                Event::Disconnected { conn, .. } => {
                    let cl = &mut self.clients[c];
                    if cl.conn == Some(conn) {
                        cl.conn = None;
                    }
                }
                _ => {}
            }
        }
    }

    fn client_done(&mut self, c: usize, now: u64, token: u64, result: Result<TOutput, transport::OpError>) {
        let replicas = self.cfg.replicas;
        let next_target = |t: u64| t % replicas + 1;
        let cl = &mut self.clients[c];
        let Some(op) = cl.op.as_mut().filter(|op| op.sent && op.token == token) else {
            return;
        };
        op.sent = false;
        let resp = match result {
            Ok(TOutput::Response { payload, .. }) => Response::decode(&payload),
            _ => {
                // The connection failed: try the next replica.
                if let Some(conn) = cl.conn.take() {
                    cl.transport.close(conn);
                }
                cl.target = next_target(cl.target);
                cl.next_ns = now + MS;
                return;
            }
        };
        let Ok(resp) = resp else {
            self.report.violations.push(format!("client {}: an undecodable response", cl.session));
            cl.op = None;
            return;
        };
        let output = match (op.req.op, resp.status) {
            (Op::Put | Op::Del, Status::Ok) => Output::Done,
            (Op::Get, Status::Ok) => Output::Value(Some(resp.value)),
            (Op::Get, Status::NotFound) => Output::Value(None),
            (Op::Cas, Status::Ok) => Output::Swapped(true),
            (Op::Cas, Status::CasFailed) => Output::Swapped(false),
            (_, Status::NotLeader) => {
                cl.target = if resp.leader != 0 && resp.leader <= replicas { resp.leader } else { next_target(cl.target) };
                if let Some(conn) = cl.conn.take() {
                    cl.transport.close(conn);
                }
                cl.next_ns = now + MS / 2;
                return;
            }
            (_, Status::Retry) => {
                cl.next_ns = now + MS / 2;
                return;
            }
            (op_kind, status) => {
                self.report.violations.push(format!("client {}: {op_kind:?} answered {status:?}", cl.session));
                cl.op = None;
                return;
            }
        };
        let at = op.history_at;
        self.history[at].ret = Some((now, output));
        cl.op = None;
        cl.next_ns = now + 100_000;
    }

    /// Records leaders per term and applied terms per index; flags a second
    /// leader in a term and an index applied with two terms.
    fn observe(&mut self) {
        for i in 0..self.slots.len() {
            let Slot::Up(r) = &self.slots[i] else { continue };
            let st = r.service.status();
            if st.role == StateRole::Leader {
                match self.leaders.insert(st.term, st.id) {
                    Some(other) if other != st.id => {
                        self.report.violations.push(format!("two leaders in term {}: {} and {}", st.term, other, st.id));
                    }
                    _ => {}
                }
            }
            self.record_applied(i);
        }
    }

    fn record_applied(&mut self, i: usize) {
        let Slot::Up(r) = &mut self.slots[i] else { return };
        for (index, term) in r.service.take_applied() {
            match self.applied.insert(index, term) {
                Some(t) if t != term => {
                    self.report.violations.push(format!("index {index} applied with term {t} and term {term} (replica {})", i + 1));
                }
                _ => {}
            }
        }
    }

    /// The final reads, and the checks.
    fn finish(&mut self) {
        if self.clients.iter().any(|c| c.op.is_some()) {
            let mut detail = String::new();
            for c in &self.clients {
                if let Some(op) = &c.op {
                    detail += &format!(" client {} {:?} seq {} target {} sent {} conn {:?};", c.session, op.req.op, op.req.seq, c.target, op.sent, c.conn);
                }
            }
            for s in &self.slots {
                if let Slot::Up(r) = s {
                    detail += &format!(" {:?} {:?} waiting {:?};", r.service.status(), r.service.counters(), r.service.waiting());
                }
            }
            self.report.violations.push(format!("clients still waiting 2 s after the faults ended (no progress):{detail}"));
        }
        // One last read of every key, through the first client.
        for k in 0..self.cfg.keys {
            let key = format!("k{k}").into_bytes();
            let call = self.net.now_ns();
            self.history.push(KvOp { key: key.clone(), call, ret: None, input: Input::Get });
            let req = Request { op: Op::Get, client: 0, seq: 0, key, value: Vec::new(), expect: None };
            self.clients[0].op = Some(InFlight { history_at: self.history.len() - 1, req, sent: false, token: 0 });
            let deadline = call + 2_000 * MS;
            while self.clients[0].op.is_some() {
                let now = self.net.now_ns();
                if now > deadline {
                    self.report.violations.push(format!("the final read of k{k} was not answered within 2 s"));
                    return;
                }
                self.bury(now);
                self.restart_due(now);
                self.turn_all(now);
                if self.broken {
                    return;
                }
                self.clients_step(now, false);
                if self.clients[0].op.is_none() {
                    break;
                }
                let next = self.next_due(now, u64::MAX, false);
                self.net.advance_to(next);
            }
        }
        self.observe();
        self.report.ops = self.history.len();
        self.report.acknowledged = self.history.iter().filter(|o| o.ret.is_some()).count();
        self.report.terms_with_leader = self.leaders.len();
        if let Some(key) = first_violation(&self.history) {
            self.report.violations.push(format!("not linearizable on key {}", String::from_utf8_lossy(&key)));
            self.report.failing_history = if std::env::var_os("SMR_ALL_HISTORY").is_some() { self.history.clone() } else { self.history.iter().filter(|o| o.key == key).cloned().collect() };
        }
        self.check_converged();
    }

    /// After healing, every replica that applied as far as the others holds
    /// the same map.
    fn check_converged(&mut self) {
        let ups: Vec<&SimReplica> = self.slots.iter().filter_map(|s| if let Slot::Up(r) = s { Some(r.as_ref()) } else { None }).collect();
        let Some(max) = ups.iter().map(|r| r.service.status().applied).max() else { return };
        let caught_up: Vec<&&SimReplica> = ups.iter().filter(|r| r.service.status().applied == max).collect();
        for pair in caught_up.windows(2) {
            if pair[0].service.machine() != pair[1].service.machine() {
                self.report.violations.push(format!("replicas {} and {} differ at applied index {max}", pair[0].service.status().id, pair[1].service.status().id));
            }
        }
    }
}
