//! A replica: raft-rs's `RawNode` driven as a [`reactor::Service`].
//!
//! Per turn the reactor hands over the transport's events (peer messages
//! are stepped into Raft, client requests proposed or read), then calls
//! [`Service::poll_work`], which ticks the Raft clock when due and handles
//! at most one `Ready`:
//! 1. the leader's messages go out at once when
//!    [`ReplicaConfig::leader_sends_first`] (Raft thesis §10.2.1: the
//!    leader's append overlaps their sending), else after step 3;
//! 2. a received snapshot is installed; committed entries are applied;
//! 3. the `Ready`'s entries are appended (one durability point for all of
//!    them), then the hard state is stored;
//! 4. only then go the messages that depend on persistence (a follower's
//!    append acknowledgement, a vote);
//! 5. after `advance`, what the light ready commits is applied, clients of
//!    this replica get their answers, and reads whose read index has been
//!    applied are served.
//!
//! Peers are reached by one outgoing connection each (made on first use,
//! again after it fails); what arrives on any connection is accepted: a
//! Raft message names its sender. Raft messages are one-way transport
//! messages whose header is [`RAFT_MAGIC`] and whose payload is raft-rs's
//! protobuf encoding of `eraftpb.Message`.
//!
//! Invariants: a client's write is answered [`Status::Ok`] only once it
//! is applied, at the index and term it was proposed at; every request
//! this replica accepted is answered once (or its connection ended);
//! planted faults ([`Faults`]) are off unless a test turns them on.

use std::collections::BTreeMap;
use std::time::Duration;

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeV2, Entry, EntryType, Message, MessageType, SnapshotMetadata};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use raft::{RawNode, SnapshotStatus, StateRole};
use reactor::Service;
use transport::{ConnId, Event, RequestId, Transport};

use crate::command::{Op, RequestView, Response, Status, StatusValue, REQUEST_HEADER_BYTES, REQUEST_MAGIC};
use crate::machine::Machine;
use crate::store::{Durable, Store};

/// Ticks a replica waits before connecting again to a peer whose
/// connection was lost or refused.
const RECONNECT_TICKS: u32 = 10;

/// The header of a Raft message between replicas.
pub const RAFT_MAGIC: [u8; 4] = *b"RFT1";

/// Planted bugs, for the simulation's tests that must fail. All off by
/// default; nothing outside tests turns them on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Send the messages that depend on persistence (a follower's append
    /// acknowledgement) before persisting.
    pub ack_before_persist: bool,
    /// Never store the vote.
    pub forget_vote: bool,
    /// Answer a write as soon as the leader has proposed it, before a
    /// majority has it (the commit index "advances on a minority").
    pub answer_before_commit: bool,
}

/// How a replica runs.
#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    /// This replica's id (non-zero).
    pub id: u64,
    /// One Raft tick.
    pub tick: Duration,
    /// Ticks without a leader before an election (randomized up to twice).
    pub election_ticks: usize,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_ticks: usize,
    /// Take a snapshot and compact the log once this many entries are
    /// applied past the last snapshot.
    pub snapshot_every: u64,
    /// The leader sends its appends before persisting its own (§10.2.1).
    pub leader_sends_first: bool,
    /// Raft's randomized election timeouts come from this seed.
    pub seed: u64,
    /// Planted bugs (tests only).
    pub faults: Faults,
    /// Keep (index, term) of every applied entry for [`Replica::take_applied`]
    /// (the simulation checks that a committed entry never changes).
    pub trace_applied: bool,
}

impl ReplicaConfig {
    /// Defaults for replica `id`: 1 ms ticks, elections after 10-20 ticks,
    /// heartbeats every 2, a snapshot every 10,000 entries.
    pub fn new(id: u64) -> ReplicaConfig {
        ReplicaConfig {
            id,
            tick: Duration::from_millis(1),
            election_ticks: 10,
            heartbeat_ticks: 2,
            snapshot_every: 10_000,
            leader_sends_first: true,
            seed: id,
            faults: Faults::default(),
            trace_applied: false,
        }
    }
}

/// What a replica reports about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// Its id.
    pub id: u64,
    /// Leader, follower, candidate.
    pub role: StateRole,
    /// Its term.
    pub term: u64,
    /// The leader it knows (0: none).
    pub leader: u64,
    /// Last log index.
    pub last_index: u64,
    /// Commit index.
    pub commit: u64,
    /// Applied index.
    pub applied: u64,
}

/// Counters of what a replica did (for status and tests).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Raft messages sent / that could not be sent.
    pub sent: u64,
    /// Raft messages that could not be sent (no connection, window full).
    pub unsent: u64,
    /// Messages or requests that could not be decoded.
    pub malformed: u64,
    /// Readys handled.
    pub readys: u64,
    /// Snapshots taken locally.
    pub snapshots: u64,
}

/// One replica of the state machine.
pub struct Replica<T: Transport, D: Durable>
where
    T::Addr: Sized,
{
    config: ReplicaConfig,
    raw: RawNode<Store<D>>,
    machine: Machine,
    applied: u64,
    peers: BTreeMap<u64, T::Addr>,
    out_conns: BTreeMap<u64, ConnId>,
    writes: BTreeMap<u64, (RequestId, u64)>,
    /// Reads waiting for their read index, by context: the request, its
    /// key, and the tick it was (last) asked at.
    reads: BTreeMap<u64, (RequestId, Vec<u8>, u64)>,
    ticks: u64,
    ready_reads: Vec<(u64, RequestId, Vec<u8>)>,
    next_read: u64,
    next_tick: Duration,
    was_leader: bool,
    counters: Counters,
    rng: Xoshiro256PlusPlus,
    applied_trace: Vec<(u64, u64)>,
    /// The time of the current turn.
    now: Duration,
    /// When a peer whose connection was lost may be connected to again.
    reconnect_at: BTreeMap<u64, Duration>,
    /// The index of the store's last snapshot (asking the store would
    /// copy the snapshot).
    snapshot_index: u64,
}

fn discard_logger() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

impl<T: Transport, D: Durable> Replica<T, D>
where
    T::Addr: Sized,
{
    /// A replica over `durable` (its state after a restart, or a new
    /// store), reaching the other replicas at `peers` (id → address,
    /// without this one).
    pub fn new(config: ReplicaConfig, durable: D, peers: BTreeMap<u64, T::Addr>) -> Result<Replica<T, D>, raft::Error> {
        assert_ne!(config.id, 0, "replica ids start at 1");
        assert!(!peers.contains_key(&config.id), "peers exclude this replica");
        let (snap_meta, snap_data) = durable.snapshot();
        let machine = if snap_data.is_empty() {
            Machine::new()
        } else {
            Machine::restore(&snap_data).map_err(|e| raft::Error::ConfigInvalid(format!("snapshot: {e}")))?
        };
        let raft_config = raft::Config {
            id: config.id,
            election_tick: config.election_ticks,
            heartbeat_tick: config.heartbeat_ticks,
            applied: snap_meta.index,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            // A commit reaches the followers with the next append or
            // heartbeat, not in an empty append of its own (two messages
            // and two answers less per write; reads go through the leader).
            skip_bcast_commit: true,
            // The appends a turn's proposals make go to each follower as
            // one message.
            batch_append: true,
            ..Default::default()
        };
        let raw = RawNode::new(&raft_config, Store { durable }, &discard_logger())?;
        let rng = Xoshiro256PlusPlus::seed_from_u64(config.seed);
        let mut replica = Replica {
            next_tick: config.tick,
            config,
            raw,
            machine,
            applied: snap_meta.index,
            peers,
            out_conns: BTreeMap::new(),
            writes: BTreeMap::new(),
            reads: BTreeMap::new(),
            ticks: 0,
            ready_reads: Vec::new(),
            next_read: 1,
            was_leader: false,
            counters: Counters::default(),
            rng,
            applied_trace: Vec::new(),
            now: Duration::ZERO,
            reconnect_at: BTreeMap::new(),
            snapshot_index: snap_meta.index,
        };
        replica.rerandomize();
        Ok(replica)
    }

    /// raft-rs draws each election timeout from the thread's random
    /// generator; a deterministic simulation needs them from its seed.
    /// Whenever the election timer has just restarted (a new term, a
    /// leader's message), draw it again from this replica's generator, in
    /// raft-rs's range [election, 2 × election).
    fn rerandomize(&mut self) {
        if self.raw.raft.election_elapsed != 0 {
            return;
        }
        let min = self.config.election_ticks;
        let timeout = self.rng.gen_range(min..2 * min);
        self.raw.raft.set_randomized_election_timeout(timeout);
    }

    /// Where this replica stands.
    pub fn status(&self) -> ReplicaStatus {
        let r = &self.raw.raft;
        ReplicaStatus {
            id: self.config.id,
            role: r.state,
            term: r.term,
            leader: r.leader_id,
            last_index: r.raft_log.last_index(),
            commit: r.raft_log.committed,
            applied: self.applied,
        }
    }

    /// [`status`](Replica::status) as the STATUS reply carries it.
    pub fn status_value(&self) -> StatusValue {
        let st = self.status();
        let role = match st.role {
            StateRole::Follower => 0,
            StateRole::Candidate => 1,
            StateRole::Leader => 2,
            StateRole::PreCandidate => 3,
        };
        StatusValue { id: st.id, role, term: st.term, leader: st.leader, last_index: st.last_index, commit: st.commit, applied: st.applied }
    }

    /// Client requests waiting: writes proposed, reads waiting for their
    /// read index, reads waiting for it to be applied.
    pub fn waiting(&self) -> (usize, usize, usize) {
        (self.writes.len(), self.reads.len(), self.ready_reads.len())
    }

    /// What it did.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The state machine (for tests and status).
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// The durable state (for tests: crash images, inspection).
    pub fn durable(&self) -> &D {
        &self.raw.store().durable
    }

    /// The (index, term) of the entries applied since the last call
    /// (with [`ReplicaConfig::trace_applied`]).
    pub fn take_applied(&mut self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.applied_trace)
    }

    /// Takes the durable state out (a simulated crash: the replica is
    /// dropped and a new one made from it).
    pub fn take_durable(&mut self) -> D
    where
        D: Default,
    {
        std::mem::take(&mut self.raw.mut_store().durable)
    }

    /// The durable state, mutable (the simulation arms its crashes).
    pub fn durable_mut_for_sim(&mut self) -> &mut D {
        &mut self.raw.mut_store().durable
    }

    /// Starts an election now (tests, leader transfer).
    pub fn campaign(&mut self) -> Result<(), raft::Error> {
        self.raw.campaign()
    }

    /// Hands leadership to `to` (takes effect as Raft allows).
    pub fn transfer_leader(&mut self, to: u64) {
        self.raw.transfer_leader(to);
    }

    fn on_message(&mut self, payload: &[u8]) {
        match Message::parse_from_bytes(payload) {
            Ok(m) if m.to == self.config.id => {
                // A message from a stale term or an unknown peer is
                // refused by Raft itself; nothing to do with the error.
                let _ = self.raw.step(m);
            }
            _ => self.counters.malformed += 1,
        }
    }

    fn on_request<X: Transport>(&mut self, t: &mut X, id: RequestId, payload: Vec<u8>) {
        let (op, key_at) = match RequestView::parse(&payload) {
            Ok(r) => (r.op, REQUEST_HEADER_BYTES..REQUEST_HEADER_BYTES + r.key.len()),
            Err(_) => {
                self.counters.malformed += 1;
                return self.answer(t, id, Status::BadRequest, 0, Vec::new());
            }
        };
        if op == Op::Status {
            let value = self.status_value().to_bytes();
            return self.answer(t, id, Status::Ok, self.applied, value);
        }
        if self.raw.raft.state != StateRole::Leader {
            return self.answer(t, id, Status::NotLeader, 0, Vec::new());
        }
        if op == Op::Get {
            let ctx = self.next_read;
            self.next_read += 1;
            self.reads.insert(ctx, (id, payload[key_at].to_vec(), self.ticks));
            self.raw.read_index(ctx.to_le_bytes().to_vec());
            return;
        }
        // The request's bytes, unchanged, are the log entry's data.
        let planted = self.config.faults.answer_before_commit.then(|| payload.clone());
        if self.raw.propose(Vec::new(), payload).is_err() {
            return self.answer(t, id, Status::NotLeader, 0, Vec::new());
        }
        let index = self.raw.raft.raft_log.last_index();
        let term = self.raw.raft.term;
        if let Some(bytes) = planted {
            // Planted: answer now, as if the entry were committed.
            let req = RequestView::parse(&bytes).expect("checked above");
            let resp = self.machine.clone().apply(index, &req);
            return self.answer(t, id, resp.status, index, resp.value);
        }
        let previous = self.writes.insert(index, (id, term));
        assert!(previous.is_none(), "one proposal per index per term");
    }

    fn answer<X: Transport>(&self, t: &mut X, id: RequestId, status: Status, index: u64, value: Vec<u8>) {
        let resp = Response { status, leader: self.raw.raft.leader_id, index, value };
        let mut bytes = t.take_buffer(resp.encoded_len());
        resp.encode(&mut bytes);
        // A client that went away cannot be answered; nothing is lost.
        let _ = t.reply(id, &REQUEST_MAGIC, bytes);
    }

    fn send_all(&mut self, t: &mut T, msgs: Vec<Message>) {
        for m in msgs {
            self.send(t, m);
        }
    }

    fn send(&mut self, t: &mut T, m: Message) {
        let to = m.to;
        let Some(addr) = self.peers.get(&to) else {
            self.counters.unsent += 1;
            return;
        };
        let conn = match self.out_conns.get(&to) {
            Some(&c) => c,
            None if self.reconnect_at.get(&to).is_some_and(|&at| self.now < at) => {
                // Lost recently: do not reconnect on every message (a dead
                // peer's connect costs the loop); Raft resends.
                self.counters.unsent += 1;
                self.raw.report_unreachable(to);
                return;
            }
            None => match t.connect(addr) {
                Ok(c) => {
                    self.out_conns.insert(to, c);
                    c
                }
                Err(_) => {
                    self.counters.unsent += 1;
                    self.reconnect_at.insert(to, self.now + self.config.tick * RECONNECT_TICKS);
                    self.raw.report_unreachable(to);
                    return;
                }
            },
        };
        let snapshot = m.get_msg_type() == MessageType::MsgSnapshot;
        // Encoded into one of the transport's kept buffers (no allocation
        // once they circulate).
        let mut payload = t.take_buffer(m.compute_size() as usize);
        m.write_to_vec(&mut payload).expect("a raft message encodes");
        let sent = t.send(conn, &RAFT_MAGIC, payload);
        if snapshot {
            // The leader waits for this report before it probes the
            // follower again; the send is all we know of the delivery (a
            // lost snapshot is found by the probe and sent again).
            let status = if sent.is_ok() { SnapshotStatus::Finish } else { SnapshotStatus::Failure };
            self.raw.report_snapshot(to, status);
        }
        match sent {
            Ok(()) => self.counters.sent += 1,
            Err(_) => {
                self.counters.unsent += 1;
                self.raw.report_unreachable(to);
            }
        }
    }

    fn apply_entries(&mut self, t: &mut T, entries: Vec<Entry>) -> Result<(), raft::Error> {
        for e in entries {
            assert_eq!(e.index, self.applied + 1, "entries apply in order");
            self.applied = e.index;
            if self.config.trace_applied {
                self.applied_trace.push((e.index, e.term));
            }
            match e.get_entry_type() {
                EntryType::EntryNormal if e.data.is_empty() => {} // a new leader's empty entry
                EntryType::EntryNormal => self.apply_write(t, &e),
                EntryType::EntryConfChange => {
                    let cc = ConfChange::parse_from_bytes(&e.data).map_err(raft::Error::CodecError)?;
                    let cs = self.raw.apply_conf_change(&cc)?;
                    self.store_mut().set_conf_state(&cs).map_err(store_error)?;
                }
                EntryType::EntryConfChangeV2 => {
                    let cc = ConfChangeV2::parse_from_bytes(&e.data).map_err(raft::Error::CodecError)?;
                    let cs = self.raw.apply_conf_change(&cc)?;
                    self.store_mut().set_conf_state(&cs).map_err(store_error)?;
                }
            }
        }
        Ok(())
    }

    fn apply_write(&mut self, t: &mut T, e: &Entry) {
        let waiting = self.writes.remove(&e.index);
        let Ok(req) = RequestView::parse(&e.data) else {
            // Only checked requests are proposed; every replica skips the
            // same bytes the same way.
            self.counters.malformed += 1;
            return;
        };
        let resp = self.machine.apply(e.index, &req);
        if let Some((id, term)) = waiting {
            if term == e.term {
                self.answer(t, id, resp.status, resp.index, resp.value);
            } else {
                self.answer(t, id, Status::Retry, 0, Vec::new());
            }
        }
    }

    fn store_mut(&mut self) -> &mut D {
        &mut self.raw.mut_store().durable
    }

    /// Serves the reads whose read index has been applied.
    fn serve_reads(&mut self, t: &mut T) {
        let applied = self.applied;
        let ready = std::mem::take(&mut self.ready_reads);
        for (index, id, key) in ready {
            if index > applied {
                self.ready_reads.push((index, id, key));
                continue;
            }
            match self.machine.get(&key) {
                Some(v) => {
                    let v = v.to_vec();
                    self.answer(t, id, Status::Ok, index, v)
                }
                None => self.answer(t, id, Status::NotFound, index, Vec::new()),
            }
        }
    }

    /// On losing leadership: writes not yet applied may or may not be
    /// committed (retry with the same sequence number); reads not yet
    /// served are refused.
    fn step_down(&mut self, t: &mut T) {
        for (_, (id, _)) in std::mem::take(&mut self.writes) {
            self.answer(t, id, Status::Retry, 0, Vec::new());
        }
        for (_, (id, _, _)) in std::mem::take(&mut self.reads) {
            self.answer(t, id, Status::NotLeader, 0, Vec::new());
        }
        for (_, id, _) in std::mem::take(&mut self.ready_reads) {
            self.answer(t, id, Status::NotLeader, 0, Vec::new());
        }
    }

    fn handle_ready(&mut self, t: &mut T) -> Result<bool, raft::Error> {
        if !self.raw.has_ready() {
            return Ok(false);
        }
        self.counters.readys += 1;
        let mut ready = self.raw.ready();
        let early = ready.take_messages();
        let mut late = Vec::new();
        if self.config.leader_sends_first {
            self.send_all(t, early);
        } else {
            late = early;
        }
        if !ready.snapshot().is_empty() {
            let snap = ready.snapshot().clone();
            self.machine = Machine::restore(&snap.data).map_err(|e| raft::Error::ConfigInvalid(format!("snapshot: {e}")))?;
            self.store_mut().install_snapshot(snap.get_metadata(), &snap.data).map_err(store_error)?;
            self.applied = snap.get_metadata().index;
            self.snapshot_index = self.applied;
        }
        self.apply_entries(t, ready.take_committed_entries())?;
        let persisted = ready.take_persisted_messages();
        if self.config.faults.ack_before_persist {
            self.send_all(t, persisted.clone());
        }
        self.store_mut().append(ready.entries()).map_err(store_error)?;
        if let Some(hs) = ready.hs() {
            let mut hs = hs.clone();
            if self.config.faults.forget_vote {
                hs.vote = self.durable().hard_state().vote;
            }
            self.store_mut().set_hard_state(&hs).map_err(store_error)?;
        }
        self.send_all(t, late);
        if !self.config.faults.ack_before_persist {
            self.send_all(t, persisted);
        }
        for rs in ready.take_read_states() {
            let ctx_bytes: &[u8] = rs.request_ctx.as_ref();
            let ctx = u64::from_le_bytes(ctx_bytes.try_into().unwrap_or([0; 8]));
            if let Some((id, key, _)) = self.reads.remove(&ctx) {
                self.ready_reads.push((rs.index, id, key));
            }
        }
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.store_mut().note_commit(commit);
        }
        self.send_all(t, light.take_messages());
        self.apply_entries(t, light.take_committed_entries())?;
        self.raw.advance_apply();
        self.serve_reads(t);
        self.maybe_compact()?;
        Ok(true)
    }

    /// Takes a snapshot and compacts once enough is applied past the last.
    fn maybe_compact(&mut self) -> Result<(), raft::Error> {
        if self.applied < self.snapshot_index + self.config.snapshot_every {
            return Ok(());
        }
        let mut meta = SnapshotMetadata { index: self.applied, ..Default::default() };
        meta.term = self.durable().term(self.applied).expect("applied entries are held");
        meta.set_conf_state(self.raw.raft.prs().conf().to_conf_state());
        let data = self.machine.snapshot();
        self.store_mut().compact(&meta, &data).map_err(store_error)?;
        self.snapshot_index = self.applied;
        self.counters.snapshots += 1;
        Ok(())
    }

    /// raft-rs drops a read-index request in some states (a leader that
    /// has not yet committed in its term; a heartbeat round whose answers
    /// were lost is never retried for an older context): ask again for the
    /// reads that have waited two heartbeats. Asking for a context that is
    /// still pending does nothing more than a heartbeat.
    fn reask_reads(&mut self) {
        if self.raw.raft.state != StateRole::Leader {
            return;
        }
        let patience = 2 * self.config.heartbeat_ticks as u64;
        let now = self.ticks;
        let due: Vec<u64> = self.reads.iter().filter(|(_, r)| now >= r.2 + patience).map(|(&ctx, _)| ctx).collect();
        for ctx in due {
            self.reads.get_mut(&ctx).expect("listed").2 = now;
            self.raw.read_index(ctx.to_le_bytes().to_vec());
        }
    }

    fn tick_if_due(&mut self, now: Duration) -> bool {
        if now < self.next_tick {
            return false;
        }
        self.raw.tick();
        self.ticks += 1;
        self.reask_reads();
        // One tick per turn; after a long stall, restart the cadence.
        self.next_tick += self.config.tick;
        if self.next_tick <= now {
            self.next_tick = now + self.config.tick;
        }
        true
    }
}

fn store_error(e: crate::store::StoreError) -> raft::Error {
    raft::Error::Store(raft::StorageError::Other(Box::new(e)))
}

impl<T: Transport, D: Durable> Service<T> for Replica<T, D>
where
    T::Addr: Sized,
{
    fn on_event(&mut self, t: &mut T, event: Event, now: Duration) {
        self.now = now;
        match event {
            Event::Message { header, payload, .. } => {
                if header == RAFT_MAGIC {
                    self.on_message(&payload);
                } else {
                    self.counters.malformed += 1;
                }
                t.recycle(payload);
            }
            Event::Request(r) => {
                if r.header == REQUEST_MAGIC {
                    self.on_request(t, r.id, r.payload);
                } else {
                    self.counters.malformed += 1;
                    let resp = Response { status: Status::BadRequest, leader: 0, index: 0, value: Vec::new() };
                    let _ = t.reply(r.id, &REQUEST_MAGIC, resp.to_bytes());
                }
            }
            Event::Disconnected { conn, .. } => {
                let lost: Vec<u64> = self.out_conns.iter().filter(|(_, c)| **c == conn).map(|(&p, _)| p).collect();
                for peer in lost {
                    self.out_conns.remove(&peer);
                    self.reconnect_at.insert(peer, now + self.config.tick * RECONNECT_TICKS);
                }
            }
            Event::Accepted(_) | Event::Completion(_) => {}
        }
        self.rerandomize();
    }

    fn poll_work(&mut self, t: &mut T, now: Duration) -> bool {
        self.now = now;
        let ticked = self.tick_if_due(now);
        let readied = self.handle_ready(t).unwrap_or_else(|e| panic!("replica {}: storage failed: {e}", self.config.id));
        let leader = self.raw.raft.state == StateRole::Leader;
        if self.was_leader && !leader {
            self.step_down(t);
        }
        self.was_leader = leader;
        self.rerandomize();
        ticked || readied
    }

    fn next_deadline(&self) -> Option<Duration> {
        Some(self.next_tick)
    }
}
