//! The deterministic simulation of a replicated cluster (TigerBeetle's
//! VOPR, raft-rs's test network): replicas, clients, network and faults
//! all driven from one seed and one thread, on a virtual clock.
//!
//! A run: `replicas` replicas on a [`SimNetwork`] (latency, loss,
//! duplication, reordering, broken connections), `clients` closed-loop
//! clients doing random PUT, GET, DEL and CAS on a few keys, and a fault
//! schedule drawn from the seed: partitions (symmetric and one-way),
//! healing, crashes of any replica at any point (between turns, or inside
//! the store in its k-th durable write: what was sent stays sent, what was
//! not stored is lost) and restarts. Then everything heals, every client
//! finishes, and one client reads every key.
//!
//! The replicas' store ([`SimStore`]) is a [`MemDurable`], whose crash
//! keeps exactly what it said it persisted (the crash comes before the
//! write), or a [`PmemDurable`] on a [`TracedMedia`]. Its trace is folded
//! into a [`CrashState`] after every write (only the stores not yet
//! durable are kept), and a crash replaces the medium by one image the
//! hardware could leave, drawn with the run's generator: the crash point
//! (inside a write: before one of its fences, or at its end), then every
//! durable word and each pending 8 B word at its durable value or any
//! value stored since. The replica restarts with [`PmemDurable::open`] on
//! that image; an image that does not open, or that opens as a state the
//! store never acknowledged (not the state before the crash, nor for a
//! write in flight the state after it or, for an append, a prefix of it),
//! is a finding. A persistent store also crashes, drawn per truncation, in
//! or soon after an append that drops a conflicting suffix; and a replica
//! whose machine keeps its own state crashes, one time in eight, right
//! after its store compacts the log (what a deferred snapshot leaves to
//! the machine must be durable there).
//! The replicas' chunk size is drawn per seed too: in half the runs, a
//! Raft message over 4 KiB or 512 B (a snapshot, an append of many
//! entries) goes as chunks, under the same loss and broken connections.
//!
//! Checked: the recovered stores, as above; the history is linearizable
//! ([`lincheck`], per key: this also finds an acknowledged write that was
//! lost); at most one leader per term; an index applied anywhere is
//! applied with the same term everywhere (a committed entry never changes); no replica
//! halts (its leader never counts entries as held that its store lost);
//! after healing, every replica holds the same map.
//!
//! The machine is generic ([`run_with`]): what is particular to it, how a
//! client operation becomes an SMR1 request (the log entry, stamped with
//! the virtual clock if the machine wants one), which operations the
//! history records and in which per-key `lincheck` model they are checked
//! ([`SimMachine::first_violation`]: a register for the [`KvMap`], Redis
//! strings and counters for `pmwire_kv_cluster::sim::SimRedis`), the
//! persistent store's snapshot slot, and what a crash leaves of it, is
//! [`SimMachine`]; [`run`] simulates the [`KvMap`]. Convergence compares
//! the machines' snapshots.
//!
//! A run is a pure function of its seed and [`SimConfig`]: a failure is
//! replayed by running the seed again.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use lincheck::kv::{Input, KvOp, Output};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use raft::eraftpb::{ConfState, Entry, HardState, SnapshotMetadata};
use raft::StateRole;
use reactor::Reactor;
use transport::sim::{Faults as NetFaults, SimAddr, SimNetwork, SimTransport};
use transport::{ConnId, Event, Limits, Output as TOutput, Transport};

use pmem::trace::{Op as MediaOp, TracedMedia};
use pmem::MemMedia;
use pmwire_crashcheck::CrashState;
use pmwire_log::{LogConfig, TailStrategy};

use link::{LinkTransport, Secret};

use crate::command::{Op, Request, Response, Status, REQUEST_MAGIC};
use crate::kvmap::KvMap;
use crate::links::{client_link, replica_link};
use crate::node::{Counters, Faults, Replica, ReplicaConfig};
use crate::smr1::Smr1Machine;
use crate::pmem_store::{PmemDurable, StoreFaults};
use crate::snapshot::stream::BodyId;
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
    /// The replicas' durable store, and so what a crash leaves.
    pub store: SimStore,
    /// Planted bugs in every persistent store ([`SimStore::Pmem`]).
    pub planted_store: StoreFaults,
}

/// One operation of a simulated history, on one key, in a machine's own
/// sequential model ([`SimMachine::HistInput`], [`SimMachine::HistOutput`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistOp<I, O> {
    /// The key.
    pub key: Vec<u8>,
    /// When it was called (virtual ns).
    pub call: u64,
    /// When it returned and what; `None` if the client never learned.
    pub ret: Option<(u64, O)>,
    /// What was asked.
    pub input: I,
}

/// What the simulation needs of a machine besides the replica's seams
/// ([`crate::state::StateMachine`], [`Smr1Machine`]): its clients' random
/// operations as SMR1 requests, what the history records of them (per key,
/// in the machine's `lincheck` model: a register for [`KvMap`]), how the
/// history is checked, and what a crash leaves of it.
pub trait SimMachine: Smr1Machine + Default {
    /// The largest snapshot a run makes, the persistent store's slot
    /// ([`SimStore::Pmem`]).
    const SNAPSHOT_BYTES: u64 = 16 << 10;
    /// A history operation's input.
    type HistInput: Clone + std::fmt::Debug;
    /// A history operation's output.
    type HistOutput: Clone + std::fmt::Debug;
    /// A random client request of session `session`, number `seq` (a
    /// write's sequence number; reads need none), on one of `keys` keys,
    /// with `clients` clients writing, at virtual time `now_ns`.
    fn random_request(rng: &mut Xoshiro256PlusPlus, keys: usize, clients: usize, session: u64, seq: u64, now_ns: u64) -> Request;
    /// A read of `key` (the final reads after healing; its input must be
    /// recorded).
    fn read_request(key: Vec<u8>) -> Request;
    /// What the history records as the request's input; `None`: the
    /// request is not in the checked history (its answer is checked only
    /// by [`SimMachine::output`], its effect by convergence).
    fn input(req: &Request) -> Option<Self::HistInput>;
    /// What the history records of a final response; `None`: a response
    /// the request cannot get (a violation).
    fn output(req: &Request, resp: Response) -> Option<Self::HistOutput>;
    /// The first key whose history is not linearizable, if any.
    fn first_violation(history: &[HistOp<Self::HistInput, Self::HistOutput>]) -> Option<Vec<u8>>;
    /// What a crash of its replica leaves of the machine (a volatile one:
    /// a new one; a persistent one: what it made durable).
    fn after_crash(self) -> Self;
    /// What a crash leaves, drawn with the run's generator (a persistent
    /// machine on a traced medium: an image the hardware could leave,
    /// reopened). Err: the machine cannot restart from it (a finding).
    fn crash_with(self, _rng: &mut Xoshiro256PlusPlus) -> Result<Self, String> {
        Ok(self.after_crash())
    }
    /// Whether the machine has durable writes a crash can fall inside
    /// ([`SimMachine::arm_crash`]); the simulation then arms its crashes
    /// in the machine as often as in the store.
    fn crashable(&self) -> bool {
        false
    }
    /// Crash inside the machine's `writes`-th durable write from now (with
    /// [`crash_now`]); a machine without durable writes ignores it.
    fn arm_crash(&mut self, _writes: u32) {}
    /// Ends an armed crash (the faults have ended).
    fn disarm_crash(&mut self) {}
}

/// Crashes the replica whose turn is running (a machine's armed crash,
/// [`SimMachine::arm_crash`]): the simulation takes what its store and
/// machine left.
pub fn crash_now() -> ! {
    std::panic::panic_any(SimCrash)
}

impl SimMachine for KvMap {
    type HistInput = Input;
    type HistOutput = Output;

    fn random_request(rng: &mut Xoshiro256PlusPlus, keys: usize, clients: usize, session: u64, seq: u64, _now_ns: u64) -> Request {
        let key = format!("k{}", rng.gen_range(0..keys)).into_bytes();
        let value = format!("{session}.{seq}").into_bytes();
        let (op, expect) = match rng.gen_range(0..10) {
            0..=3 => (Op::Put, None),
            4..=6 => (Op::Get, None),
            7 => (Op::Del, None),
            _ => {
                // Expect a value some client may have written.
                let s = rng.gen_range(1..=clients as u64);
                let q = rng.gen_range(0..=seq);
                (Op::Cas, if q == 0 { None } else { Some(format!("{s}.{q}").into_bytes()) })
            }
        };
        let value = if matches!(op, Op::Put | Op::Cas) { value } else { Vec::new() };
        Request { op, client: session, seq, key, value, expect }
    }

    fn read_request(key: Vec<u8>) -> Request {
        Request { op: Op::Get, client: 0, seq: 0, key, value: Vec::new(), expect: None }
    }

    fn input(req: &Request) -> Option<Input> {
        Some(match req.op {
            Op::Put => Input::Put(req.value.clone()),
            Op::Del => Input::Del,
            Op::Cas => Input::Cas { expect: req.expect.clone(), new: req.value.clone() },
            _ => Input::Get,
        })
    }

    fn first_violation(history: &[HistOp<Input, Output>]) -> Option<Vec<u8>> {
        let ops: Vec<KvOp> = history.iter().map(|o| KvOp { key: o.key.clone(), call: o.call, ret: o.ret.clone(), input: o.input.clone() }).collect();
        lincheck::kv::first_violation(&ops)
    }

    fn output(req: &Request, resp: Response) -> Option<Output> {
        Some(match (req.op, resp.status) {
            (Op::Put | Op::Del, Status::Ok) => Output::Done,
            (Op::Get, Status::Ok) => Output::Value(Some(resp.value)),
            (Op::Get, Status::NotFound) => Output::Value(None),
            (Op::Cas, Status::Ok) => Output::Swapped(true),
            (Op::Cas, Status::CasFailed) => Output::Swapped(false),
            _ => return None,
        })
    }

    fn after_crash(self) -> KvMap {
        KvMap::new()
    }
}

/// Which durable store the simulated replicas run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimStore {
    /// [`MemDurable`]: a crash keeps exactly what the store said it
    /// persisted.
    Mem,
    /// [`PmemDurable`] on a [`TracedMedia`], its log tail strategy drawn
    /// per seed: a crash leaves an image the hardware could leave (every
    /// durable word; each word with stores not yet durable at its durable
    /// value or any value stored since), and the replica restarts with
    /// [`PmemDurable::open`] on it.
    Pmem,
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
            store: SimStore::Mem,
            planted_store: StoreFaults::default(),
        }
    }

    /// [`standard`](SimConfig::standard) on persistent stores.
    pub fn pmem(replicas: u64) -> SimConfig {
        SimConfig { store: SimStore::Pmem, ..SimConfig::standard(replicas) }
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
    /// Raft messages the replicas sent as chunks (the chunk size is drawn
    /// per seed).
    pub chunked_messages: u64,
    /// Turns in which a replica went on taking a whole snapshot, its
    /// applies waiting (small steps are drawn with small chunks).
    pub snapshot_turns: u64,
    /// Committed entries that waited for a snapshot being taken.
    pub entries_held: u64,
    /// Raft messages held back while their connection's window was full.
    pub sends_held: u64,
    /// Bytes of snapshot bodies streamed into staging areas.
    pub staged_bytes: u64,
    /// Requests for the rest of a snapshot body sent by receivers.
    pub snapshot_resumes: u64,
    /// What went wrong (empty: passed).
    pub violations: Vec<String>,
    /// The history of the key that is not linearizable, if one is not.
    /// (each operation as its `Debug` form)
    pub failing_history: Vec<String>,
}

impl SimReport {
    /// True if every check passed.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// Adds a replica's counters (at its crash, or at the end).
    fn add_counters(&mut self, c: &Counters) {
        self.chunked_messages += c.chunked;
        self.snapshot_turns += c.snapshot_turns;
        self.entries_held += c.entries_held;
        self.sends_held += c.sends_held;
        self.staged_bytes += c.snapshot_bytes_staged;
        self.snapshot_resumes += c.snapshot_resumes_asked;
    }
}

/// The payload of a simulated crash inside a store.
struct SimCrash;

/// A panic's message, if it carried one.
/// `SMR_TRACE=1` prints crashes and restarts (to replay a failing seed).
fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("SMR_TRACE").is_some())
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload.downcast_ref::<String>().cloned().or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

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

/// A replica's durable store in the simulation, which crashes (panics with
/// [`SimCrash`]) in its k-th durable write when armed. Over [`MemDurable`]
/// the crash comes before the write; over [`PmemDurable`] on a
/// [`TracedMedia`] the write runs and the crash falls just before one of
/// its fences or at its end, and what reaches the medium is drawn later
/// from its trace ([`Crashable::crash`]).
#[derive(Default)]
pub struct Crashable {
    inner: Backend,
    countdown: Option<u32>,
    /// An append dropped a conflicting suffix since the simulation last
    /// asked ([`SimStore::Pmem`] only).
    truncated: bool,
    /// The log was compacted since the simulation last asked.
    compacted: bool,
    /// What the next conflicting append brings.
    on_truncation: OnTruncation,
}

/// The crash a persistent store's next suffix truncation brings (drawn
/// per truncation: the truncation's stores are the likeliest to be lost).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum OnTruncation {
    #[default]
    Nothing,
    /// A crash inside the append that truncates.
    Inside,
    /// A crash right after it.
    After,
    /// A crash in one of the next three writes.
    Soon,
}

enum Backend {
    Mem(Box<MemDurable>),
    Pmem(Box<PmemSim>),
}

impl Default for Backend {
    fn default() -> Backend {
        Backend::Mem(Box::default())
    }
}

/// A persistent-memory store, its trace folded after every write.
struct PmemSim {
    store: PmemDurable<TracedMedia>,
    /// The durable floor and pending stores of everything folded.
    state: CrashState,
    /// The store crashed inside a write whose operations are still in the
    /// trace, unfolded.
    torn: Option<TornWrite>,
}

/// A write a crash interrupted: what the store showed before it, and
/// the first index of an append (which may leave a prefix of its batch).
struct TornWrite {
    before: StoreView,
    append_from: Option<u64>,
}

/// What a store shows, as compared across a crash (the commit index
/// apart: it may be persisted lazily).
#[derive(Clone, Debug, PartialEq)]
struct StoreView {
    first: u64,
    last: u64,
    /// The term of every held entry, from `first`.
    terms: Vec<u64>,
    term: u64,
    vote: u64,
    conf: ConfState,
    /// The snapshot's index and term.
    snapshot: (u64, u64),
}

impl StoreView {
    fn of(d: &dyn Durable) -> StoreView {
        let hs = d.hard_state();
        let (meta, _) = d.snapshot();
        StoreView {
            first: d.first_index(),
            last: d.last_index(),
            terms: (d.first_index()..=d.last_index()).map(|i| d.term(i).unwrap_or(0)).collect(),
            term: hs.term,
            vote: hs.vote,
            conf: d.conf_state(),
            snapshot: (meta.index, meta.term),
        }
    }

    /// This view with the log cut after `last`.
    fn cut(&self, last: u64) -> StoreView {
        let mut v = self.clone();
        v.terms.truncate((last + 1 - self.first) as usize);
        v.last = last;
        v
    }
}

/// What a crash leaves of a replica's store.
enum Remains {
    /// A [`MemDurable`]: exactly what it said it persisted.
    Mem(Box<MemDurable>),
    /// A crash image of the persistent medium, and what the store may
    /// show when it is opened on it.
    Pmem { image: MemMedia, allowed: Box<Allowed> },
}

/// The states a store may recover after a crash: the state it had
/// acknowledged, or if a write was in flight the state after it, or for
/// an append, the log up to its first index and a prefix of its batch
/// (the conflicting suffix is dropped first, and a batch may land in part).
struct Allowed {
    acknowledged: StoreView,
    /// The commit index the store showed: a recovered one is no higher.
    commit: u64,
    in_flight: Option<(StoreView, Option<u64>)>,
}

impl Allowed {
    /// `None` if `found` is allowed, else what is wrong with it.
    fn judge(&self, found: &StoreView, commit: u64) -> Option<String> {
        if commit > self.commit {
            return Some(format!("commit {commit} above the {} it had", self.commit));
        }
        let ok = *found == self.acknowledged
            || self.in_flight.as_ref().is_some_and(|(after, append_from)| {
                *found == *after || append_from.is_some_and(|from| (from - 1..after.last).any(|last| last >= after.first - 1 && *found == after.cut(last)))
            });
        (!ok).then(|| {
            let a = &self.acknowledged;
            format!(
                "first {} last {} (terms {:?}) hard ({}, {}) snapshot {:?}; acknowledged first {} last {} (terms {:?}) hard ({}, {}) snapshot {:?}{}",
                found.first,
                found.last,
                tail(&found.terms),
                found.term,
                found.vote,
                found.snapshot,
                a.first,
                a.last,
                tail(&a.terms),
                a.term,
                a.vote,
                a.snapshot,
                if self.in_flight.is_some() { ", a write in flight" } else { "" }
            )
        })
    }
}

/// The last few of `terms`, for messages.
fn tail(terms: &[u64]) -> &[u64] {
    &terms[terms.len().saturating_sub(6)..]
}

/// The cluster id of every simulated persistent store.
const SIM_CLUSTER: u64 = 0x5133;
/// A simulated replica's log: ample for a run (a full log or an oversized
/// snapshot, [`SimMachine::SNAPSHOT_BYTES`], would be reported as a failure).
const SIM_LOG_BYTES: u64 = 64 << 10;

impl Crashable {
    fn mem(voters: &[u64]) -> Crashable {
        Crashable { inner: Backend::Mem(Box::new(MemDurable::new(voters))), countdown: None, truncated: false, compacted: false, on_truncation: OnTruncation::Nothing }
    }

    /// A freshly formatted persistent store of replica `id` whose log has
    /// the `tail` strategy (formatted on plain memory: the format is taken
    /// as durable and is not part of the trace).
    fn pmem(id: u64, voters: &[u64], tail: TailStrategy, faults: StoreFaults, snapshot_bytes: u64) -> Crashable {
        let log = LogConfig::new(SIM_LOG_BYTES, tail);
        let size = PmemDurable::<MemMedia>::required_size(&log, snapshot_bytes);
        let formatted = PmemDurable::format(MemMedia::new(size as usize), SIM_CLUSTER, id, voters, log).expect("a sized, valid format");
        let image = formatted.into_media();
        Crashable::reopen(id, image, faults).expect("a store just formatted opens")
    }

    /// Restarts replica `id` from what its crash left; an image that
    /// does not open is a finding, returned as its message.
    fn restart(id: u64, remains: Remains, faults: StoreFaults) -> Result<Crashable, String> {
        match remains {
            Remains::Mem(inner) => Ok(Crashable { inner: Backend::Mem(inner), countdown: None, truncated: false, compacted: false, on_truncation: OnTruncation::Nothing }),
            Remains::Pmem { image, allowed } => {
                let restarted = Crashable::reopen(id, image, faults)?;
                let store = restarted.store();
                match allowed.judge(&StoreView::of(store), store.hard_state().commit) {
                    None => Ok(restarted),
                    Some(why) => Err(format!("replica {id} restarted with a store it never acknowledged: {why}")),
                }
            }
        }
    }

    fn reopen(id: u64, image: MemMedia, faults: StoreFaults) -> Result<Crashable, String> {
        let state = CrashState::new(image.bytes());
        let media = TracedMedia::from_image(image.bytes().to_vec());
        let store = PmemDurable::open_with_faults(media, SIM_CLUSTER, id, faults).map_err(|e| format!("replica {id}'s crash image does not open: {e}"))?;
        let mut sim = PmemSim { store, state, torn: None };
        sim.fold();
        Ok(Crashable { inner: Backend::Pmem(Box::new(sim)), countdown: None, truncated: false, compacted: false, on_truncation: OnTruncation::Nothing })
    }

    /// Counts down to the armed crash: true if this write is the one.
    fn crash_due(&mut self) -> bool {
        match self.countdown.as_mut() {
            Some(0) => {
                self.countdown = None;
                true
            }
            Some(n) => {
                *n -= 1;
                false
            }
            None => false,
        }
    }

    /// One durable write, and the armed crash if it is due: before the
    /// write over memory, inside it over persistent memory.
    fn write(&mut self, append_from: Option<u64>, op: impl FnOnce(&mut dyn Durable) -> Result<(), StoreError>) -> Result<(), StoreError> {
        let crash = self.crash_due();
        match &mut self.inner {
            Backend::Mem(m) => {
                if crash {
                    std::panic::panic_any(SimCrash);
                }
                op(m.as_mut())
            }
            Backend::Pmem(p) => {
                let before = crash.then(|| StoreView::of(&p.store));
                let result = op(&mut p.store);
                if let Some(before) = before {
                    p.torn = Some(TornWrite { before, append_from });
                    std::panic::panic_any(SimCrash);
                }
                p.fold();
                result
            }
        }
    }

    /// What a crash now leaves (a persistent medium's image drawn with `rng`).
    fn crash(self, rng: &mut impl Rng) -> Remains {
        match self.inner {
            Backend::Mem(m) => Remains::Mem(m),
            Backend::Pmem(p) => {
                let (image, allowed) = p.crash(rng);
                Remains::Pmem { image, allowed: Box::new(allowed) }
            }
        }
    }

    fn store(&self) -> &dyn Durable {
        match &self.inner {
            Backend::Mem(m) => m.as_ref(),
            Backend::Pmem(p) => &p.store,
        }
    }
}

impl PmemSim {
    /// Folds the operations the store did since the last fold.
    fn fold(&mut self) {
        self.state.fold(self.store.media_mut());
    }

    /// The image a crash now leaves: after a crash inside a write, the
    /// crash point is first drawn among the write's fences and its end
    /// (the operations before it are folded in, the rest never happened);
    /// then each pending word independently is at its floor or one of its
    /// stored values ([`CrashState::draw`]).
    fn crash(mut self, rng: &mut impl Rng) -> (MemMedia, Allowed) {
        let ops = self.store.media_mut().take_ops();
        let point = if self.torn.is_some() {
            let fences: Vec<usize> = ops.iter().enumerate().filter(|(_, op)| matches!(op, MediaOp::Fence)).map(|(k, _)| k).collect();
            fences.get(rng.gen_range(0..=fences.len())).copied().unwrap_or(ops.len())
        } else {
            ops.len()
        };
        for op in &ops[..point] {
            self.state.apply(op);
        }
        let now = StoreView::of(&self.store);
        let commit = self.store.hard_state().commit;
        let allowed = match self.torn {
            Some(t) => Allowed { acknowledged: t.before, commit, in_flight: Some((now, t.append_from)) },
            None => Allowed { acknowledged: now, commit, in_flight: None },
        };
        (self.state.draw(rng).0, allowed)
    }
}

impl Durable for Crashable {
    fn hard_state(&self) -> HardState {
        self.store().hard_state()
    }
    fn conf_state(&self) -> ConfState {
        self.store().conf_state()
    }
    fn snapshot(&self) -> (SnapshotMetadata, Vec<u8>) {
        self.store().snapshot()
    }
    fn snapshot_data(&self) -> std::borrow::Cow<'_, [u8]> {
        self.store().snapshot_data()
    }
    fn first_index(&self) -> u64 {
        self.store().first_index()
    }
    fn last_index(&self) -> u64 {
        self.store().last_index()
    }
    fn term(&self, index: u64) -> Option<u64> {
        self.store().term(index)
    }
    fn entry(&self, index: u64) -> Option<Entry> {
        self.store().entry(index)
    }
    fn append(&mut self, entries: &[Entry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        if matches!(self.inner, Backend::Pmem(_)) && entries[0].index <= self.last_index() {
            self.truncated = true;
            if self.on_truncation == OnTruncation::Inside {
                self.countdown = Some(0);
            }
        }
        self.write(Some(entries[0].index), |d| d.append(entries))
    }
    fn set_hard_state(&mut self, hs: &HardState) -> Result<(), StoreError> {
        self.write(None, |d| d.set_hard_state(hs))
    }
    fn note_commit(&mut self, commit: u64) {
        match &mut self.inner {
            Backend::Mem(m) => m.note_commit(commit),
            Backend::Pmem(p) => p.store.note_commit(commit),
        }
    }
    fn set_conf_state(&mut self, cs: &ConfState) -> Result<(), StoreError> {
        self.write(None, |d| d.set_conf_state(cs))
    }
    fn install_snapshot(&mut self, meta: &SnapshotMetadata, data: &[u8]) -> Result<(), StoreError> {
        self.write(None, |d| d.install_snapshot(meta, data))
    }
    fn compact(&mut self, meta: &SnapshotMetadata, data: &[u8]) -> Result<(), StoreError> {
        self.compacted = true;
        self.write(None, |d| d.compact(meta, data))
    }
    fn compacts_in_parts(&self) -> bool {
        self.store().compacts_in_parts()
    }
    fn compact_part(&mut self, offset: u64, bytes: &[u8]) -> Result<(), StoreError> {
        self.write(None, |d| d.compact_part(offset, bytes))
    }
    fn compact_parts(&mut self, meta: &SnapshotMetadata, len: u64) -> Result<(), StoreError> {
        self.compacted = true;
        self.write(None, |d| d.compact_parts(meta, len))
    }
    fn capacity_hint(&self) -> Option<u64> {
        self.store().capacity_hint()
    }
    fn log_space(&self) -> Option<(u64, u64)> {
        self.store().log_space()
    }
    fn snapshot_meta(&self) -> SnapshotMetadata {
        self.store().snapshot_meta()
    }
    fn snapshot_body(&self) -> BodyId {
        self.store().snapshot_body()
    }
    fn read_snapshot_body(&self, body: &BodyId, offset: u64, buf: &mut [u8]) -> bool {
        self.store().read_snapshot_body(body, offset, buf)
    }
    fn staged(&self) -> Option<(BodyId, u64)> {
        self.store().staged()
    }
    fn stage(&mut self, body: &BodyId, offset: u64, bytes: &[u8]) -> Result<u64, StoreError> {
        let mut held = 0;
        self.write(None, |d| d.stage(body, offset, bytes).map(|h| held = h))?;
        Ok(held)
    }
    fn verify_staged(&mut self, body: &BodyId) -> bool {
        let mut ok = false;
        let _ = self.write(None, |d| {
            ok = d.verify_staged(body);
            Ok(())
        });
        ok
    }
    fn install_staged(&mut self, meta: &SnapshotMetadata, body: &BodyId) -> Result<(), StoreError> {
        self.write(None, |d| d.install_staged(meta, body))
    }
}

/// A simulated node's transport: every connection authenticated with
/// [`SIM_SECRET`], dialled links pinged ([`crate::links`]), on virtual time.
type SimLink = LinkTransport<SimTransport>;

type SimReplica<M> = Reactor<SimLink, Replica<SimLink, Crashable, M>>;

/// The simulated cluster's secret.
const SIM_SECRET: [u8; 32] = [0x5a; 32];

/// `t` behind a link with `config`, on `net`'s clock, nonces from `seed`.
fn linked(net: &SimNetwork, t: SimTransport, config: link::LinkConfig, seed: u64) -> SimLink {
    let clock = net.clone();
    let rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    LinkTransport::new(t, Secret::from_bytes(SIM_SECRET), config, Box::new(move || Duration::from_nanos(clock.now_ns())), Box::new(rng))
}

/// A replica slot: up (its loop), or down (its durable state, what is
/// left of its machine, and when it comes back).
enum Slot<M: SimMachine> {
    Up(Box<SimReplica<M>>),
    Down { remains: Remains, machine: M, back_ns: u64 },
}

/// One closed-loop client and its operation in flight.
struct Client {
    transport: SimLink,
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
    /// `None`: not in the checked history.
    history_at: Option<usize>,
    req: Request,
    sent: bool,
    /// The token of the call in flight (each attempt has its own, so a
    /// late completion of an earlier attempt is never taken for it).
    token: u64,
}

struct World<M: SimMachine> {
    cfg: SimConfig,
    rng: Xoshiro256PlusPlus,
    net: SimNetwork,
    addrs: Vec<SimAddr>,
    slots: Vec<Slot<M>>,
    clients: Vec<Client>,
    history: Vec<HistOp<M::HistInput, M::HistOutput>>,
    leaders: BTreeMap<u64, u64>,
    applied: BTreeMap<u64, u64>,
    report: SimReport,
    /// Mean time between injected faults in this run.
    fault_every_ms: u64,
    /// When to cut a replica off from everyone (the second step of
    /// [`World::commit_crash_isolate`]).
    isolate_at: Option<(u64, usize)>,
    /// Crashed replicas whose nodes go down at the given time.
    dying: Vec<(usize, u64, Box<SimReplica<M>>)>,
    /// A replica panicked: the run stops and reports it.
    broken: bool,
    /// The persistent stores' log tail ([`SimStore::Pmem`]).
    tail: TailStrategy,
    /// The faults have ended ([`World::calm`]).
    calmed: bool,
    /// The replicas' chunk size, drawn per seed: most runs send every
    /// Raft message whole, some chunk their snapshots and large appends.
    chunk_bytes: usize,
}

const MS: u64 = 1_000_000;

/// How long a crashed replica's node stays connected, delivering what it
/// sent before the crash (longer than any delivery but the slow tail).
const LINGER_NS: u64 = MS;

/// Runs one seeded simulation of the [`KvMap`].
pub fn run(seed: u64, cfg: &SimConfig) -> SimReport {
    run_with::<KvMap>(seed, cfg)
}

/// Runs one seeded simulation of machine `M`.
pub fn run_with<M: SimMachine>(seed: u64, cfg: &SimConfig) -> SimReport {
    quiet_crashes();
    let mut w = World::<M>::new(seed, cfg.clone());
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
        if issuing {
            w.crash_after_truncation(now);
            w.crash_after_compaction(now);
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

/// A connection's window for one seed's run: for half the seeds a small
/// one, so that sends meet full windows and are held (`node/held.rs`).
pub(crate) fn draw_window(rng: &mut impl Rng) -> usize {
    if rng.gen_bool(0.5) {
        rng.gen_range(2..=8)
    } else {
        Limits::default().window
    }
}

impl<M: SimMachine> World<M> {
    fn new(seed: u64, cfg: SimConfig) -> World<M> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let window = draw_window(&mut rng);
        let net = SimNetwork::new(rng.gen(), Limits { window, ..Limits::default() }, NetFaults::none());
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
            tail: TailStrategy::SelfValidating,
            calmed: false,
            chunk_bytes: crate::node::RAFT_CHUNK_BYTES,
            cfg,
        };
        w.chunk_bytes = [crate::node::RAFT_CHUNK_BYTES, crate::node::RAFT_CHUNK_BYTES, 4096, 512][w.rng.gen_range(0..4)];
        if w.cfg.store == SimStore::Pmem {
            w.tail = [TailStrategy::Naive, TailStrategy::ROTATING_PAPER, TailStrategy::SelfValidating][w.rng.gen_range(0..3)];
        }
        for (i, t) in transports.into_iter().enumerate() {
            let id = i as u64 + 1;
            let durable = match w.cfg.store {
                SimStore::Mem => Crashable::mem(&voters),
                SimStore::Pmem => {
                    let mut d = Crashable::pmem(id, &voters, w.tail, w.cfg.planted_store, M::SNAPSHOT_BYTES);
                    d.on_truncation = w.draw_on_truncation();
                    d
                }
            };
            let r = w.make_replica(id, t, durable, M::default()).expect("a replica over a new store");
            w.slots.push(Slot::Up(Box::new(r)));
        }
        for c in 0..w.cfg.clients {
            let seed = w.rng.gen();
            let transport = linked(&w.net, w.net.node(), client_link(), seed);
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

    fn make_replica(&mut self, id: u64, t: SimTransport, durable: Crashable, machine: M) -> Result<SimReplica<M>, raft::Error> {
        let peers = (1..=self.cfg.replicas).filter(|&p| p != id).map(|p| (p, self.addrs[p as usize - 1])).collect();
        let mut config = ReplicaConfig::new(id);
        config.seed = self.rng.gen();
        config.faults = self.cfg.planted;
        config.snapshot_every = self.cfg.snapshot_every;
        config.trace_applied = true;
        config.chunk_bytes = self.chunk_bytes;
        // Runs that chunk their messages also take whole snapshots in
        // small steps, over several turns (no new draw: seeds keep their runs).
        if self.chunk_bytes < crate::node::RAFT_CHUNK_BYTES {
            config.snapshot_step_bytes = 4 * self.chunk_bytes;
            config.snapshot_step_every = Duration::from_millis(1);
        }
        let t = linked(&self.net, t, replica_link(&config), self.rng.gen());
        let replica = Replica::with_machine(config, durable, machine, peers)?.serve_smr1();
        Ok(Reactor::new(t, replica))
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
                    Ok(worked) => {
                        // A halt (its leader counted entries as held here
                        // that its store lost, or disowned it) never
                        // happens in a correct run.
                        if let Some(reason) = r.service.halted().map(str::to_string) {
                            self.report.violations.push(format!("replica {} halted: {reason}", i + 1));
                            self.broken = true;
                            return;
                        }
                        busy |= worked;
                    }
                    Err(payload) if payload.is::<SimCrash>() => {
                        self.crash(i, now_ns)
                    }
                    Err(payload) => {
                        // A replica's own assertion (or raft-rs's) failed:
                        // that is a finding, not a crash to recover from.
                        self.report.violations.push(format!("replica {} panicked: {}", i + 1, panic_message(&*payload)));
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
        if trace() {
            let d = r.service.durable().store();
            eprintln!("{now_ns:>12} ns: replica {} crashes: durable last {} hard {:?} status {:?}", i + 1, d.last_index(), d.hard_state(), r.service.status());
        }
        self.report.add_counters(r.service.counters());
        let remains = r.service.take_durable().crash(&mut self.rng);
        let machine = match r.service.take_machine().crash_with(&mut self.rng) {
            Ok(m) => m,
            Err(why) => {
                self.report.violations.push(format!("replica {}'s machine after a crash: {why}", i + 1));
                self.broken = true;
                M::default()
            }
        };
        self.record_applied(i);
        let Slot::Up(dead) = std::mem::replace(&mut self.slots[i], Slot::Down { remains, machine, back_ns }) else { unreachable!() };
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
            let Slot::Down { remains, machine, .. } = std::mem::replace(&mut self.slots[i], Slot::Down { remains: Remains::Mem(Box::default()), machine: M::default(), back_ns: 0 }) else {
                unreachable!()
            };
            let t = self.net.restart(self.addrs[i]);
            match self.recover(i as u64 + 1, t, remains, machine) {
                Ok(r) => {
                    if trace() {
                        let d = r.service.durable().store();
                        eprintln!("{now_ns:>12} ns: replica {} restarts: last {} hard {:?}", i + 1, d.last_index(), d.hard_state());
                    }
                    self.slots[i] = Slot::Up(Box::new(r))
                }
                Err(why) => {
                    self.report.violations.push(why);
                    self.broken = true;
                    return;
                }
            }
        }
    }

    /// Restarts replica `id` from what its crash left. A store that does
    /// not open, or a replica that refuses or panics on it, is a finding.
    fn recover(&mut self, id: u64, t: SimTransport, remains: Remains, machine: M) -> Result<SimReplica<M>, String> {
        let faults = self.cfg.planted_store;
        let on_truncation = match remains {
            Remains::Mem(_) => OnTruncation::Nothing,
            Remains::Pmem { .. } => self.draw_on_truncation(),
        };
        IN_TURN.with(|t| t.set(true));
        let result = catch_unwind(AssertUnwindSafe(|| {
            let mut durable = Crashable::restart(id, remains, faults)?;
            durable.on_truncation = on_truncation;
            self.make_replica(id, t, durable, machine).map_err(|e| format!("replica {id} refuses its recovered store: {e}"))
        }));
        IN_TURN.with(|t| t.set(false));
        result.unwrap_or_else(|payload| Err(format!("replica {id} panicked on restart: {}", panic_message(&*payload))))
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
                let crashable = matches!(&self.slots[i], Slot::Up(r) if r.service.machine().crashable());
                let in_machine = crashable && self.rng.gen_bool(0.5);
                if let Slot::Up(r) = &mut self.slots[i] {
                    if in_machine {
                        r.service.machine_mut().arm_crash(k);
                    } else {
                        r.service.durable_mut_for_sim().countdown = Some(k);
                    }
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

    /// A correlated fault for persistent stores: a replica whose log just
    /// dropped a conflicting suffix crashes, half the time, right away or
    /// in one of its next writes (the truncation's stores are the likeliest
    /// to be pending).
    fn crash_after_truncation(&mut self, now_ns: u64) {
        for i in 0..self.slots.len() {
            let Slot::Up(r) = &mut self.slots[i] else { continue };
            if !std::mem::take(&mut r.service.durable_mut_for_sim().truncated) {
                continue;
            }
            let next = self.draw_on_truncation();
            let Slot::Up(r) = &mut self.slots[i] else { unreachable!() };
            let durable = r.service.durable_mut_for_sim();
            match std::mem::replace(&mut durable.on_truncation, next) {
                OnTruncation::After => self.crash(i, now_ns),
                OnTruncation::Soon => durable.countdown = Some(self.rng.gen_range(0..3)),
                OnTruncation::Inside | OnTruncation::Nothing => {}
            }
        }
    }

    /// A correlated fault: a replica whose machine keeps its own state,
    /// its store having just compacted the log, crashes one time in eight
    /// right after that turn. A deferred snapshot leaves the entries the
    /// log no longer holds to the machine, whose state must be durable that
    /// far; a random crash rarely falls between a compaction and the
    /// machine's next persist.
    fn crash_after_compaction(&mut self, now_ns: u64) {
        for i in 0..self.slots.len() {
            let Slot::Up(r) = &mut self.slots[i] else { continue };
            if !std::mem::take(&mut r.service.durable_mut_for_sim().compacted) || !r.service.machine().keeps_state() {
                continue;
            }
            if self.cfg.crashes && self.rng.gen_range(0..8) == 0 {
                self.crash(i, now_ns);
            }
        }
    }

    /// What a persistent store's next suffix truncation brings (nothing
    /// once the faults have ended).
    fn draw_on_truncation(&mut self) -> OnTruncation {
        let then = [OnTruncation::Nothing, OnTruncation::Inside, OnTruncation::After, OnTruncation::Soon][self.rng.gen_range(0..4)];
        if self.cfg.crashes && !self.calmed {
            then
        } else {
            OnTruncation::Nothing
        }
    }

    /// The end of the faults: heal, restart everyone, a perfect network.
    fn calm(&mut self) {
        self.net.heal_all();
        self.net.set_faults(NetFaults::none());
        self.calmed = true;
        for s in &mut self.slots {
            match s {
                Slot::Down { back_ns, .. } => *back_ns = 0,
                Slot::Up(r) => {
                    let durable = r.service.durable_mut_for_sim();
                    durable.countdown = None;
                    durable.on_truncation = OnTruncation::Nothing;
                    r.service.machine_mut().disarm_crash();
                }
            }
        }
    }

    fn next_due(&self, now: u64, fault: u64, issuing: bool) -> u64 {
        let mut next = fault.min(self.net.next_due_ns().unwrap_or(u64::MAX));
        for s in &self.slots {
            match s {
                Slot::Up(r) => {
                    if let Some(d) = reactor::Service::<SimLink>::next_deadline(&r.service) {
                        next = next.min(d.as_nanos() as u64);
                    }
                    if let Some(d) = r.transport.next_deadline() {
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
            if let Some(d) = c.transport.next_deadline() {
                next = next.min(d.as_nanos() as u64);
            }
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

    fn clients_step(&mut self, now: u64, issuing: bool) {
        for c in 0..self.clients.len() {
            self.client_poll(c, now);
            let cl = &self.clients[c];
            if cl.next_ns > now {
                continue;
            }
            if cl.op.is_none() && issuing {
                let (session, seq) = (cl.session, cl.seq + 1);
                let req = M::random_request(&mut self.rng, self.cfg.keys, self.cfg.clients, session, seq, now);
                self.report.ops += 1;
                let history_at = M::input(&req).map(|input| {
                    self.history.push(HistOp { key: req.key.clone(), call: now, ret: None, input });
                    self.history.len() - 1
                });
                let cl = &mut self.clients[c];
                if req.op.writes() {
                    cl.seq = seq;
                }
                cl.op = Some(InFlight { history_at, req, sent: false, token: 0 });
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
        let output = match resp.status {
            Status::NotLeader => {
                cl.target = if resp.leader != 0 && resp.leader <= replicas { resp.leader } else { next_target(cl.target) };
                if let Some(conn) = cl.conn.take() {
                    cl.transport.close(conn);
                }
                cl.next_ns = now + MS / 2;
                return;
            }
            Status::Retry => {
                cl.next_ns = now + MS / 2;
                return;
            }
            status => match M::output(&op.req, resp) {
                Some(output) => output,
                None => {
                    self.report.violations.push(format!("client {}: {:?} answered {status:?}", cl.session, op.req.op));
                    cl.op = None;
                    return;
                }
            },
        };
        self.report.acknowledged += 1;
        if let Some(at) = op.history_at {
            self.history[at].ret = Some((now, output));
        }
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
            let req = M::read_request(key.clone());
            let input = M::input(&req).expect("a final read is recorded");
            self.history.push(HistOp { key, call, ret: None, input });
            self.report.ops += 1;
            self.clients[0].op = Some(InFlight { history_at: Some(self.history.len() - 1), req, sent: false, token: 0 });
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
        for s in &self.slots {
            if let Slot::Up(r) = s {
                self.report.add_counters(r.service.counters());
            }
        }
        self.report.terms_with_leader = self.leaders.len();
        if let Some(key) = M::first_violation(&self.history) {
            self.report.violations.push(format!("not linearizable on key {}", String::from_utf8_lossy(&key)));
            let all = std::env::var_os("SMR_ALL_HISTORY").is_some();
            self.report.failing_history = self.history.iter().filter(|o| all || o.key == key).map(|o| format!("{o:?}")).collect();
        }
        self.check_converged();
    }

    /// After healing, every replica that applied as far as the others holds
    /// the same map.
    fn check_converged(&mut self) {
        let ups: Vec<&SimReplica<M>> = self.slots.iter().filter_map(|s| if let Slot::Up(r) = s { Some(r.as_ref()) } else { None }).collect();
        let Some(max) = ups.iter().map(|r| r.service.status().applied).max() else { return };
        let caught_up: Vec<&&SimReplica<M>> = ups.iter().filter(|r| r.service.status().applied == max).collect();
        for pair in caught_up.windows(2) {
            if pair[0].service.machine().snapshot() != pair[1].service.machine().snapshot() {
                self.report.violations.push(format!("replicas {} and {} differ at applied index {max}", pair[0].service.status().id, pair[1].service.status().id));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(first: u64, terms: &[u64], term: u64) -> StoreView {
        let conf = ConfState { voters: vec![1, 2, 3], ..Default::default() };
        StoreView { first, last: first + terms.len() as u64 - 1, terms: terms.to_vec(), term, vote: 1, conf, snapshot: (first - 1, 1) }
    }

    #[test]
    fn a_quiet_crash_must_recover_what_was_acknowledged() {
        let acked = view(5, &[1, 1, 2], 2);
        let allowed = Allowed { acknowledged: acked.clone(), commit: 6, in_flight: None };
        assert_eq!(allowed.judge(&acked, 6), None);
        assert_eq!(allowed.judge(&acked, 4), None, "a lazily persisted commit may be lower");
        assert!(allowed.judge(&acked, 7).is_some(), "never higher");
        assert!(allowed.judge(&view(5, &[1, 1], 2), 6).is_some(), "an acknowledged entry lost");
        assert!(allowed.judge(&view(5, &[1, 1, 2, 1], 2), 6).is_some(), "a dropped entry back");
    }

    #[test]
    fn an_append_in_flight_may_leave_its_truncation_and_a_prefix() {
        // Before: 5..=8 of terms 1, 1, 1, 1; the append writes 7..=9 of term 3.
        let before = view(5, &[1, 1, 1, 1], 3);
        let after = view(5, &[1, 1, 3, 3, 3], 3);
        let allowed = Allowed { acknowledged: before.clone(), commit: 5, in_flight: Some((after.clone(), Some(7))) };
        for found in [before, after, view(5, &[1, 1], 3), view(5, &[1, 1, 3], 3), view(5, &[1, 1, 3, 3], 3)] {
            assert_eq!(allowed.judge(&found, 5), None, "{found:?}");
        }
        assert!(allowed.judge(&view(5, &[1], 3), 5).is_some(), "an entry before the append lost");
        assert!(allowed.judge(&view(5, &[1, 1, 3, 1], 3), 5).is_some(), "an old entry after a new one");
        let hard_state = Allowed { acknowledged: view(5, &[1], 2), commit: 5, in_flight: Some((view(5, &[1], 3), None)) };
        assert_eq!(hard_state.judge(&view(5, &[1], 3), 5), None);
        assert!(hard_state.judge(&view(5, &[], 3), 5).is_some(), "not an append: no prefix");
    }
}
