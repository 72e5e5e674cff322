//! The deterministic simulation of the embedding API through every member:
//! embedder-style clients ([`Replica::propose`], [`Replica::read_index`],
//! [`Replica::take_done`]) on the leader and on followers, whose
//! proposals and reads raft-rs forwards (`crate::forward`), under loss,
//! duplication, reordering, partitions and crashes, all from one seed.
//!
//! The machine is [`AppendMap`]: per key a list of unique tokens; an
//! append returns the list's new length. Appends of unique tokens make
//! every anomaly visible in the final lists, checked per key
//! ([`check_history`]): no token twice (a duplicated forwarded proposal
//! applied twice), none that was not appended, every acknowledged
//! append's token at the position its reply named (the member's own
//! output is the reply), none of an append that failed as never applied
//! ([`Failure::NotProposed`]); every read a prefix of the final list that
//! holds every append acknowledged before the read was asked and nothing
//! asked after it returned; acknowledged appends ordered as they were
//! acknowledged; reads never going backwards in real time. Then every
//! member converges to the same lists.
//!
//! A run is a pure function of its seed and [`ForwardSimConfig`].

use std::collections::BTreeMap;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use raft::StateRole;
use reactor::Reactor;
use transport::sim::{Faults as NetFaults, SimAddr, SimNetwork, SimTransport};
use transport::Limits;

use link::{LinkTransport, Secret};

use crate::links::replica_link;
use crate::node::{Done, Failure, Faults, Replica, ReplicaConfig, Ticket};
use crate::session::Reader;
use crate::state::{PersistError, RestoreError, StateMachine};
use crate::store::MemDurable;

/// A map of small keys to lists of unique tokens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppendMap {
    lists: BTreeMap<u8, Vec<u64>>,
    applied: u64,
}

const APPEND_MAGIC: &[u8; 8] = b"SIMAPND1";

impl AppendMap {
    /// An append's entry: key u8, token u64.
    pub fn entry(key: u8, token: u64) -> Vec<u8> {
        let mut b = vec![key];
        b.extend_from_slice(&token.to_le_bytes());
        b
    }

    /// The list of `key`.
    pub fn list(&self, key: u8) -> &[u64] {
        self.lists.get(&key).map_or(&[], Vec::as_slice)
    }
}

impl StateMachine for AppendMap {
    /// The list's new length (0: a malformed entry, nothing changed).
    type Output = u64;

    fn apply(&mut self, index: u64, data: &[u8]) -> u64 {
        assert!(index > self.applied, "entries apply in order");
        self.applied = index;
        if data.len() != 9 {
            return 0;
        }
        let list = self.lists.entry(data[0]).or_default();
        list.push(pmem::le::get_u64(data, 1));
        list.len() as u64
    }

    fn persist_applied(&mut self) -> Result<(), PersistError> {
        Ok(())
    }

    fn applied(&self) -> u64 {
        self.applied
    }

    /// `SIMAPND1`, key count u64, per key: key u64, length u64, tokens
    /// u64; crc32c u32.
    fn snapshot(&self) -> Vec<u8> {
        let mut b = APPEND_MAGIC.to_vec();
        b.extend_from_slice(&(self.lists.len() as u64).to_le_bytes());
        for (&k, list) in &self.lists {
            b.extend_from_slice(&u64::from(k).to_le_bytes());
            b.extend_from_slice(&(list.len() as u64).to_le_bytes());
            for t in list {
                b.extend_from_slice(&t.to_le_bytes());
            }
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    fn restore(&mut self, index: u64, bytes: &[u8]) -> Result<(), RestoreError> {
        let body = crate::kvmap::checked_body(bytes, 16)?;
        if &body[..8] != APPEND_MAGIC {
            return Err(RestoreError::Corrupt("magic"));
        }
        let mut r = Reader::new(body, 8);
        let mut lists = BTreeMap::new();
        for _ in 0..r.u64()? {
            let key = u8::try_from(r.u64()?).map_err(|_| RestoreError::Corrupt("key"))?;
            let n = r.u64()?;
            if n > body.len() as u64 / 8 {
                return Err(RestoreError::Corrupt("list length"));
            }
            let list = (0..n).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?;
            lists.insert(key, list);
        }
        if !r.done() {
            return Err(RestoreError::Corrupt("trailing bytes"));
        }
        *self = AppendMap { lists, applied: index };
        Ok(())
    }
}

/// What a run simulates.
#[derive(Clone, Debug)]
pub struct ForwardSimConfig {
    /// Members (3 or 5).
    pub replicas: u64,
    /// Closed-loop clients, each on a member drawn per operation.
    pub clients: usize,
    /// Keys (few, so that operations collide).
    pub keys: u8,
    /// Virtual time with faults.
    pub faulty_ms: u64,
    /// Crashes and restarts.
    pub crashes: bool,
    /// Partitions.
    pub partitions: bool,
    /// Loss, duplication, reordering, broken connections.
    pub lossy: bool,
    /// Planted bugs in every member.
    pub planted: Faults,
    /// Snapshot every this many applied entries.
    pub snapshot_every: u64,
}

impl ForwardSimConfig {
    /// Every fault on, 3 or 5 members, 6 clients on 3 keys.
    pub fn standard(replicas: u64) -> ForwardSimConfig {
        ForwardSimConfig { replicas, clients: 6, keys: 3, faulty_ms: 600, crashes: true, partitions: true, lossy: true, planted: Faults::default(), snapshot_every: 40 }
    }
}

/// What a run found.
#[derive(Clone, Debug, Default)]
pub struct ForwardSimReport {
    /// The seed.
    pub seed: u64,
    /// Appends acknowledged through a follower / through the leader.
    pub acked_follower: u64,
    /// Appends acknowledged through the leader.
    pub acked_leader: u64,
    /// Reads served on a follower / on the leader.
    pub reads_follower: u64,
    /// Reads served on the leader.
    pub reads_leader: u64,
    /// Tickets failed, by reason: never applied, outcome unknown.
    pub failed_not_applied: u64,
    /// Tickets whose outcome is unknown (timed out, leadership lost, the
    /// member crashed).
    pub unknown: u64,
    /// Crashes injected.
    pub crashes: u64,
    /// Raft messages held back while their connection's window was full.
    pub sends_held: u64,
    /// What was wrong (empty: passed).
    pub violations: Vec<String>,
}

impl ForwardSimReport {
    /// No violation.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// One operation of the history.
#[derive(Clone, Debug)]
pub struct Op {
    /// Its key.
    pub key: u8,
    /// Called at (virtual ns).
    pub call: u64,
    /// What it was and how it ended.
    pub kind: OpKind,
    /// Returned at, if it did.
    pub ret: Option<u64>,
}

/// An operation and its outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// An append of a token: its reply (the list's length), `None` while unknown.
    Append {
        /// The token.
        token: u64,
        /// The position its reply named.
        position: Option<u64>,
        /// It failed as certainly not applied.
        not_applied: bool,
    },
    /// A read and the list it returned.
    Read(Option<Vec<u64>>),
}

type SimLink = LinkTransport<SimTransport>;
type SimMember = Reactor<SimLink, Replica<SimLink, MemDurable, AppendMap>>;

enum Slot {
    Up(Box<SimMember>),
    Down { durable: MemDurable, back_ns: u64 },
}

struct Client {
    /// The operation in flight: history index, member, ticket.
    op: Option<(usize, usize, Ticket)>,
    next_ns: u64,
}

struct World {
    cfg: ForwardSimConfig,
    rng: Xoshiro256PlusPlus,
    net: SimNetwork,
    addrs: Vec<SimAddr>,
    slots: Vec<Slot>,
    clients: Vec<Client>,
    history: Vec<Op>,
    next_token: u64,
    report: ForwardSimReport,
}

const MS: u64 = 1_000_000;

/// Runs one seeded simulation.
pub fn run_forward(seed: u64, cfg: &ForwardSimConfig) -> ForwardSimReport {
    let mut w = World::new(seed, cfg.clone());
    let end_ns = cfg.faulty_ms * MS;
    let mut next_fault = 20 * MS;
    let mut calmed = false;
    while w.net.now_ns() < end_ns + 3_000 * MS {
        let now = w.net.now_ns();
        let issuing = now < end_ns;
        if !issuing && !std::mem::replace(&mut calmed, true) {
            w.calm();
        }
        if issuing && now >= next_fault {
            w.inject_fault();
            next_fault = now + w.rng.gen_range(5..40) * MS;
        }
        w.restart_due(now);
        w.turn_all(now);
        w.collect(now);
        w.clients_step(now, issuing);
        if !issuing && w.clients.iter().all(|c| c.op.is_none()) {
            break;
        }
        let next = w.next_due(now, if issuing { next_fault } else { u64::MAX });
        w.net.advance_to(next);
    }
    w.finish();
    w.report
}

fn linked(net: &SimNetwork, t: SimTransport, config: link::LinkConfig, seed: u64) -> SimLink {
    let clock = net.clone();
    let rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    LinkTransport::new(t, Secret::from_bytes([0x5b; 32]), config, Box::new(move || Duration::from_nanos(clock.now_ns())), Box::new(rng))
}

impl World {
    fn new(seed: u64, cfg: ForwardSimConfig) -> World {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let window = crate::sim::draw_window(&mut rng);
        let net = SimNetwork::new(rng.gen(), Limits { window, ..Limits::default() }, NetFaults::none());
        let transports: Vec<SimTransport> = (0..cfg.replicas).map(|_| net.node()).collect();
        let addrs = transports.iter().map(SimTransport::addr).collect();
        let mut w = World { rng, net, addrs, slots: Vec::new(), clients: Vec::new(), history: Vec::new(), next_token: 0, report: ForwardSimReport { seed, ..Default::default() }, cfg };
        let voters: Vec<u64> = (1..=w.cfg.replicas).collect();
        for (i, t) in transports.into_iter().enumerate() {
            let r = w.member(i as u64 + 1, t, MemDurable::new(&voters));
            w.slots.push(Slot::Up(Box::new(r)));
        }
        w.clients = (0..w.cfg.clients).map(|_| Client { op: None, next_ns: 0 }).collect();
        if w.cfg.lossy {
            let mut f = NetFaults::harsh();
            f.drop_per_million = [10_000, 50_000, 150_000][w.rng.gen_range(0..3)];
            f.duplicate_per_million = [20_000, 100_000][w.rng.gen_range(0..2)];
            w.net.set_faults(f);
        }
        w
    }

    fn member(&mut self, id: u64, t: SimTransport, durable: MemDurable) -> SimMember {
        let peers = (1..=self.cfg.replicas).filter(|&p| p != id).map(|p| (p, self.addrs[p as usize - 1])).collect();
        let mut config = ReplicaConfig::new(id);
        config.seed = self.rng.gen();
        config.faults = self.cfg.planted;
        config.snapshot_every = self.cfg.snapshot_every;
        let t = linked(&self.net, t, replica_link(&config), self.rng.gen());
        let replica = Replica::with_machine(config, durable, AppendMap::default(), peers).expect("a member over its store");
        Reactor::new(t, replica)
    }

    fn turn_all(&mut self, now_ns: u64) {
        let now = Duration::from_nanos(now_ns);
        for _ in 0..8 {
            let mut busy = false;
            for s in &mut self.slots {
                if let Slot::Up(r) = s {
                    busy |= r.turn(now);
                    if let Some(why) = r.service.halted() {
                        self.report.violations.push(format!("a member halted: {why}"));
                    }
                }
            }
            if !busy {
                break;
            }
        }
    }

    /// Routes what the members finished to their clients.
    fn collect(&mut self, now: u64) {
        for m in 0..self.slots.len() {
            let Slot::Up(r) = &mut self.slots[m] else { continue };
            let leader = r.service.status().role == StateRole::Leader;
            for (ticket, done) in r.service.take_done() {
                let Some(c) = self.clients.iter().position(|c| matches!(c.op, Some((_, cm, t)) if cm == m && t == ticket)) else { continue };
                let (h, _, _) = self.clients[c].op.take().expect("found");
                let Slot::Up(r) = &self.slots[m] else { unreachable!() };
                let op = &mut self.history[h];
                match (&mut op.kind, done) {
                    (OpKind::Append { position, .. }, Done::Applied { output, .. }) => {
                        *position = Some(output);
                        op.ret = Some(now);
                        if leader {
                            self.report.acked_leader += 1;
                        } else {
                            self.report.acked_follower += 1;
                        }
                    }
                    (OpKind::Read(list), Done::Readable { .. }) => {
                        *list = Some(r.service.machine().list(op.key).to_vec());
                        op.ret = Some(now);
                        if leader {
                            self.report.reads_leader += 1;
                        } else {
                            self.report.reads_follower += 1;
                        }
                    }
                    (OpKind::Append { not_applied, .. }, Done::Failed(Failure::NotProposed)) => {
                        *not_applied = true;
                        self.report.failed_not_applied += 1;
                    }
                    (_, Done::Failed(_)) => self.report.unknown += 1,
                    (kind, done) => self.report.violations.push(format!("op {h} ({kind:?}) done as {done:?}")),
                }
                self.clients[c].next_ns = now + self.rng.gen_range(0..2 * MS);
            }
        }
    }

    fn clients_step(&mut self, now: u64, issuing: bool) {
        for c in 0..self.clients.len() {
            if !issuing || self.clients[c].op.is_some() || self.clients[c].next_ns > now {
                continue;
            }
            let m = self.rng.gen_range(0..self.slots.len());
            let key = self.rng.gen_range(0..self.cfg.keys);
            let read = self.rng.gen_bool(0.3);
            let Slot::Up(r) = &mut self.slots[m] else {
                self.clients[c].next_ns = now + MS;
                continue;
            };
            self.next_token += 1;
            let token = self.next_token;
            let asked = if read { r.service.read_index() } else { r.service.propose(AppendMap::entry(key, token)) };
            match asked {
                Ok(ticket) => {
                    let kind = if read { OpKind::Read(None) } else { OpKind::Append { token, position: None, not_applied: false } };
                    self.history.push(Op { key, call: now, kind, ret: None });
                    self.clients[c].op = Some((self.history.len() - 1, m, ticket));
                }
                // No leader known there: try again shortly (nothing asked).
                Err(_) => self.clients[c].next_ns = now + MS,
            }
        }
    }

    fn inject_fault(&mut self) {
        let n = self.slots.len();
        match self.rng.gen_range(0..8) {
            0..=1 if self.cfg.partitions => {
                let side: Vec<SimAddr> = (0..n).filter(|_| self.rng.gen_bool(0.5)).map(|i| self.addrs[i]).collect();
                self.net.partition(&side);
            }
            2 if self.cfg.partitions => {
                let leader = self.slots.iter().position(|s| matches!(s, Slot::Up(r) if r.service.status().role == StateRole::Leader));
                if let Some(l) = leader {
                    self.net.partition(&[self.addrs[l]]);
                }
            }
            3..=4 => self.net.heal_all(),
            5 if self.cfg.crashes => {
                let i = self.rng.gen_range(0..n);
                self.crash(i);
            }
            _ => {}
        }
    }

    /// Member `i` crashes: its clients' operations end unknown; it comes
    /// back 1-60 ms later from its store, with a new incarnation.
    fn crash(&mut self, i: usize) {
        let now = self.net.now_ns();
        let back_ns = now + self.rng.gen_range(MS..60 * MS);
        let Slot::Up(r) = &mut self.slots[i] else { return };
        self.report.sends_held += r.service.counters().sends_held;
        let durable = r.service.take_durable();
        self.slots[i] = Slot::Down { durable, back_ns };
        self.net.down(self.addrs[i]);
        for c in &mut self.clients {
            if matches!(c.op, Some((_, m, _)) if m == i) {
                c.op = None;
                self.report.unknown += 1;
            }
        }
        self.report.crashes += 1;
    }

    fn restart_due(&mut self, now: u64) {
        for i in 0..self.slots.len() {
            if !matches!(self.slots[i], Slot::Down { back_ns, .. } if back_ns <= now) {
                continue;
            }
            let Slot::Down { durable, .. } = std::mem::replace(&mut self.slots[i], Slot::Down { durable: MemDurable::default(), back_ns: 0 }) else { unreachable!() };
            let t = self.net.restart(self.addrs[i]);
            let r = self.member(i as u64 + 1, t, durable);
            self.slots[i] = Slot::Up(Box::new(r));
        }
    }

    fn calm(&mut self) {
        self.net.heal_all();
        self.net.set_faults(NetFaults::none());
        for s in &mut self.slots {
            if let Slot::Down { back_ns, .. } = s {
                *back_ns = 0;
            }
        }
    }

    fn next_due(&self, now: u64, fault: u64) -> u64 {
        let mut next = fault.min(self.net.next_due_ns().unwrap_or(u64::MAX));
        for s in &self.slots {
            match s {
                Slot::Up(r) => {
                    for d in [reactor::Service::<SimLink>::next_deadline(&r.service), r.transport.next_deadline()].into_iter().flatten() {
                        next = next.min(d.as_nanos() as u64);
                    }
                }
                Slot::Down { back_ns, .. } => next = next.min((*back_ns).max(now + 1)),
            }
        }
        for c in &self.clients {
            if c.op.is_none() && c.next_ns > now {
                next = next.min(c.next_ns);
            }
        }
        next.max(now + 1)
    }

    /// After the faults: every member converges; the leader's lists are
    /// the final ones; the history is checked against them.
    fn finish(&mut self) {
        self.finish_checks();
        for s in &self.slots {
            if let Slot::Up(r) = s {
                self.report.sends_held += r.service.counters().sends_held;
            }
        }
    }

    fn finish_checks(&mut self) {
        let mut finals = None;
        let start = self.net.now_ns();
        while self.net.now_ns() < start + 5_000 * MS {
            let now = self.net.now_ns();
            self.restart_due(now);
            self.turn_all(now);
            let _ = self.collect_quiet();
            if let Some(f) = self.converged() {
                finals = Some(f);
                break;
            }
            let next = self.next_due(now, u64::MAX);
            self.net.advance_to(next);
        }
        let Some(finals) = finals else {
            let states: Vec<String> = self
                .slots
                .iter()
                .map(|s| match s {
                    Slot::Up(r) => format!("{:?} {:?} {:?} lists equal to member 1's: {}", r.service.status(), r.service.progress(), r.service.counters(), Some(r.service.machine()) == self.slots.first().and_then(|f| if let Slot::Up(f) = f { Some(f.service.machine()) } else { None })),
                    Slot::Down { .. } => "down".into(),
                })
                .collect();
            self.report.violations.push(format!("the members did not converge within 5 s of healing: {states:?}"));
            return;
        };
        for key in 0..self.cfg.keys {
            let ops: Vec<Op> = self.history.iter().filter(|o| o.key == key).cloned().collect();
            let empty = Vec::new();
            if let Err(why) = check_history(&ops, finals.get(&key).unwrap_or(&empty)) {
                self.report.violations.push(format!("key {key}: {why}"));
            }
        }
    }

    fn collect_quiet(&mut self) -> usize {
        let mut n = 0;
        for s in &mut self.slots {
            if let Slot::Up(r) = s {
                n += r.service.take_done().len();
            }
        }
        n
    }

    /// The lists, once a leader leads and every member applied all it committed.
    fn converged(&self) -> Option<BTreeMap<u8, Vec<u64>>> {
        let ups: Vec<&SimMember> = self.slots.iter().filter_map(|s| if let Slot::Up(r) = s { Some(&**r) } else { None }).collect();
        if ups.len() != self.slots.len() {
            return None;
        }
        let leader = ups.iter().find(|r| r.service.status().role == StateRole::Leader)?;
        let st = leader.service.status();
        if st.applied != st.last_index || ups.iter().any(|r| r.service.status().applied != st.applied) {
            return None;
        }
        let m = leader.service.machine();
        if ups.iter().any(|r| r.service.machine().lists != m.lists) {
            return None;
        }
        Some(m.lists.clone())
    }
}

/// Checks one key's history against its final list (module docs).
pub fn check_history(ops: &[Op], last: &[u64]) -> Result<(), String> {
    let mut at = BTreeMap::new();
    for (i, &t) in last.iter().enumerate() {
        if at.insert(t, i as u64 + 1).is_some() {
            return Err(format!("token {t} applied twice (final list {last:?})"));
        }
    }
    let appended: BTreeMap<u64, &Op> = ops.iter().filter_map(|o| if let OpKind::Append { token, .. } = o.kind { Some((token, o)) } else { None }).collect();
    if let Some(t) = last.iter().find(|t| !appended.contains_key(t)) {
        return Err(format!("token {t} in the list was never appended to this key"));
    }
    for (&token, op) in &appended {
        let OpKind::Append { position, not_applied, .. } = op.kind else { unreachable!() };
        match (position, at.get(&token)) {
            (Some(p), Some(&q)) if p != q => return Err(format!("append of {token} answered position {p}, applied at {q}")),
            (Some(p), None) => return Err(format!("append of {token} answered position {p} but is lost")),
            (_, Some(&q)) if not_applied => return Err(format!("append of {token} failed as never applied, yet it is at {q}")),
            _ => {}
        }
    }
    for a in ops.iter().filter(|o| o.ret.is_some()) {
        let a_ret = a.ret.expect("filtered");
        for b in ops.iter().filter(|b| b.call > a_ret) {
            check_order(a, b, &at)?;
        }
        if let OpKind::Read(Some(list)) = &a.kind {
            if !last.starts_with(list) {
                return Err(format!("read {list:?} is not a prefix of the final list {last:?}"));
            }
            if let Some(t) = list.iter().find(|t| appended.get(t).is_some_and(|o| o.call > a_ret)) {
                return Err(format!("read returned at {a_ret} holds {t}, appended after it returned"));
            }
        }
    }
    Ok(())
}

/// `a` returned before `b` was called: `b` must see `a`'s effect.
fn check_order(a: &Op, b: &Op, at: &BTreeMap<u64, u64>) -> Result<(), String> {
    let a_len = match &a.kind {
        OpKind::Append { token, .. } => at.get(token).copied().unwrap_or(0),
        OpKind::Read(list) => list.as_ref().map_or(0, |l| l.len() as u64),
    };
    match &b.kind {
        OpKind::Append { token, .. } => match at.get(token) {
            Some(&q) if q <= a_len => Err(format!("append of {token} called after an op that saw {a_len} entries, yet applied at {q}")),
            _ => Ok(()),
        },
        OpKind::Read(Some(list)) if (list.len() as u64) < a_len => Err(format!("read {list:?} called after an op that saw {a_len} entries (stale)")),
        OpKind::Read(_) => Ok(()),
    }
}
