//! A replica: raft-rs's `RawNode` driven as a [`reactor::Service`].
//!
//! Per turn the reactor hands over the transport's events (peer messages
//! are stepped into Raft, client requests proposed or read), then calls
//! [`Service::poll_work`], which ticks the Raft clock when due and handles
//! at most one `Ready`:
//! 1. the leader's messages go out at once when
//!    [`ReplicaConfig::leader_sends_first`] (Raft thesis §10.2.1: the
//!    leader's append overlaps their sending), else after step 3;
//! 2. a received snapshot is installed;
//! 3. the `Ready`'s entries are appended (one durability point for all of
//!    them), then the hard state is stored;
//! 4. only then go the messages that depend on persistence (a follower's
//!    append acknowledgement, a vote);
//! 5. the committed entries are applied (after the acknowledgement, so a
//!    follower's answer to an append never waits for the apply and the
//!    machine's persist of the entry before it);
//! 6. after `advance`, what the light ready commits is applied, clients of
//!    this replica get their answers, and reads whose read index has been
//!    applied are served.
//!
//! Peers are reached by one outgoing connection each (dialled at start,
//! and again once the reconnect delay has passed after it is lost:
//! `node::redial`); what arrives on any connection is accepted: a
//! Raft message names its sender. Raft messages are one-way transport
//! messages whose header is [`RAFT_MAGIC`] and whose payload is raft-rs's
//! protobuf encoding of `eraftpb.Message`. One larger than
//! [`ReplicaConfig::chunk_bytes`] (a snapshot of a large keyspace, an
//! append of a large value) goes as checksummed chunks
//! ([`RAFT_CHUNK_MAGIC`], `chunks`), one message per peer at a time, sent
//! as the connection's window allows and at most
//! [`CHUNK_BYTES_PER_TURN`] per peer per turn; the receiver joins them per
//! connection by offset, ignores duplicates, drops a message with a gap or
//! a bad checksum, and refuses one larger than its store can hold
//! ([`Durable::capacity_hint`]). A snapshot's body streams out of band
//! (`snapstream`, [`RAFT_STREAM_MAGIC`]): read from the store as it is
//! sent, staged durably in the receiver's store, resumed where it broke
//! ([`RAFT_RESUME_MAGIC`]), installed in place; its send is reported to
//! raft-rs once the message naming it is sent (failed if its connection
//! fails: raft-rs sends it again, the receiver resumes). A replica compacts every
//! [`ReplicaConfig::snapshot_every`] entries or once its log is half full
//! ([`Durable::log_space`]).
//!
//! The machine: a replica is generic over its [`StateMachine`] `M`. Log
//! entries have a kind (`docs/FORMAT.md`, "Replica log entries"): the
//! machine's data (what an embedder proposed with [`Replica::propose`],
//! context `[2]`), an SMR1 client's write (its request's bytes, context
//! `[1]`, or empty in a log written before kinds existed; applied through
//! [`Smr1Machine`] when the replica serves SMR1 data operations), a
//! membership change (a `ConfChange` entry), or a new leader's empty
//! entry. The members' addresses and the sessions of membership changes
//! are the replica's own ([`ReplicaPart`]); a snapshot is that part and
//! [`StateMachine::snapshot`], checksummed together (`crate::snapshot`).
//! After each batch of applies the replica calls
//! [`StateMachine::persist_applied`] once, and only then releases the
//! batch's answers; if it fails, the replica halts with the reason. At
//! start the machine is restored from the store's snapshot unless it
//! already applied past it (a persistent machine): entries up to
//! [`StateMachine::applied`] are then replayed for the replica's own part
//! only, never handed to the machine again.
//!
//! Embedding (`embed`): a server that owns a replica in its own loop
//! proposes with [`Replica::propose`], reads linearizably after
//! [`Replica::read_index`], and takes outcomes with [`Replica::take_done`].
//! Every proposal and read, an embedder's or an SMR1 client's, is done or
//! failed within [`ReplicaConfig::pending_timeout_elections`] election
//! timeouts: a leader that lost its majority answers with an error, never
//! hangs and never answers stale.
//!
//! Membership (Raft thesis §4.1, one server at a time; raft-rs's simple
//! conf changes): ADD_MEMBER makes a learner (it receives the log, does
//! not vote), PROMOTE_MEMBER makes a caught-up learner a voter,
//! REMOVE_MEMBER removes a voter or learner. Each is one `ConfChange`
//! entry whose context is the client's request (id, address, session); the
//! leader checks it against the applied membership before proposing, and
//! proposes nothing while another change is unapplied. Applying an add
//! records the address in the replica's own part and takes a snapshot at once, so
//! the address is durable on every replica that applied it and the log
//! that a new replica would otherwise replay from index 1 (whose
//! membership it cannot know) starts after the add: a new replica always
//! begins from a snapshot. A leader asked to remove itself first hands
//! leadership to the most caught-up voter and answers RETRY; the new
//! leader removes it. TRANSFER_LEADER is raft-rs's leader transfer,
//! answered once this replica is no longer the leader.
//!
//! Addresses: a peer's address is the one the replica recorded when it
//! was added, else the one given at start (`peers` of [`Replica::new`]).
//!
//! Invariants: a client's write is answered [`Status::Ok`] only once it
//! is applied, at the index and term it was proposed at; every request
//! this replica accepted is answered once (or its connection ended);
//! planted faults ([`Faults`]) are off unless a test turns them on.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use pmem::le::{get_u32, get_u64};
use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeSingle, ConfChangeType, ConfChangeV2, ConfState, Entry, EntryType, Message, MessageType, SnapshotMetadata};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use raft::{GetEntriesContext, ProgressState, RawNode, SnapshotStatus, StateRole};
use reactor::Service;
use transport::sim::SimAddr;
use transport::{ConnId, Event, NodeId, Payload, RequestId, Transport};

use crate::command::{Member, Op, Refusal, Refused, RequestView, Response, Status, StatusValue, MAX_ADDR_BYTES, REQUEST_HEADER_BYTES, REQUEST_MAGIC};
use crate::kvmap::KvMap;
use crate::smr1::{Smr1Machine, Smr1Ops};
use crate::snapshot::{self, ReplicaPart};
use crate::state::{MachineRefs, StateMachine};
use crate::store::{Durable, Store};

mod chunks;
mod embed;
pub use chunks::{encode_chunk, Assembler, Received, CHUNK_HEADER_BYTES};
use chunks::{Outgoing, Piece};
pub use embed::{Done, Failure, FollowerProgress, NotLeader, Ticket};
use embed::{Pending, ReadWaiter, Waiter};

/// An entry's context naming its kind: an SMR1 client's write.
pub const ENTRY_SMR1_WRITE: u8 = 1;
/// An entry's context naming its kind: the machine's data.
pub const ENTRY_MACHINE: u8 = 2;
/// An entry's context naming its kind: the machine's data proposed by a
/// follower ([`crate::forward::ForwardContext`] follows the kind byte).
pub const ENTRY_FORWARDED: u8 = crate::forward::KIND;

mod compaction;
mod held;
mod liveness;
mod pending;
mod redial;
mod snapstream;
mod sendorder;
pub use liveness::Liveness;
use liveness::{Step, Timed, Tracker};

/// Ticks a replica waits before connecting again to a peer whose
/// connection was lost or refused.
const RECONNECT_TICKS: u32 = 10;

/// The header of a Raft message between replicas.
pub const RAFT_MAGIC: [u8; 4] = *b"RFT1";
/// The header of one chunk of a Raft message larger than
/// [`ReplicaConfig::chunk_bytes`] (`chunks`: a crc32c per chunk).
pub const RAFT_CHUNK_MAGIC: [u8; 4] = *b"RFC2";
/// The header of one chunk of a snapshot body streamed out of band
/// (`crate::snapshot::stream`).
pub const RAFT_STREAM_MAGIC: [u8; 4] = *b"RFS1";
/// The header of a receiver's request for the rest of a snapshot body.
pub const RAFT_RESUME_MAGIC: [u8; 4] = *b"RFR1";
/// The header of a leader's notice to a replica that is not a member of
/// its configuration ([`NotMember`]).
pub const NOT_MEMBER_MAGIC: [u8; 4] = *b"RFTN";
/// Largest Raft message sent whole, and the size of a chunk (well within
/// the transport's 4 MiB payload bound).
pub const RAFT_CHUNK_BYTES: usize = 1 << 20;
/// Bytes of a whole snapshot taken per turn ([`ReplicaConfig::snapshot_step_bytes`]):
/// a few milliseconds of copying, well within a heartbeat.
pub const SNAPSHOT_STEP_BYTES: usize = 8 << 20;

/// A whole snapshot taken over several turns: the machine's part is
/// encoded in steps after the replica's; a store that compacts in parts
/// is written in steps too, from the turn the record's length is known
/// (the machine said it, or its part is whole), then stored.
struct SnapshotJob {
    meta: SnapshotMetadata,
    /// The record's bytes taken and not yet written into the store: the
    /// replica's part, then the machine's from `machine_at` (until parts
    /// are written: [`SnapshotJob::parts`]).
    record: pending::Pending,
    machine_at: usize,
    cursor: crate::state::SnapshotCursor,
    /// The machine's part is all taken.
    whole: bool,
    /// The record written into the store so far, once its length is known.
    parts: Option<Parts>,
    /// When the next step is due ([`ReplicaConfig::snapshot_step_every`]).
    next_step: Duration,
}

/// A snapshot record being written into its store in parts.
struct Parts {
    /// The record's length (its checksum follows it).
    end: u64,
    /// Bytes written, and their checksum (computed as they are written:
    /// no pass of its own).
    written: u64,
    crc: u32,
}

/// Largest Raft message a replica reassembles from chunks (a store that
/// knows its capacity bounds it lower: [`Durable::capacity_hint`]).
pub const MAX_RAFT_MESSAGE_BYTES: u64 = 1 << 32;
/// Bytes of chunks sent to one peer per turn at most, so that a member
/// sending a large snapshot keeps serving its clients and the log.
pub const CHUNK_BYTES_PER_TURN: usize = 4 << 20;

/// Appends in flight to one follower (raft-rs's `max_inflight_msgs`).
pub const MAX_INFLIGHT_APPENDS: usize = 16;
/// Bytes of committed entries one `Ready` hands over to apply at most
/// (raft-rs's `max_committed_size_per_ready`; at least one entry). A
/// turn's apply is bounded by it: entries of small writes are ~70 B, so
/// 64 KiB is about 900 of them, 20-30 ms of apply here; 1 MiB was about
/// 15,000, 400 ms, and a pipelined load's turns outlasted the election
/// timeout (`docs/bench.md`, "A turn's apply, bounded").
pub const MAX_COMMITTED_BYTES_PER_READY: u64 = 64 << 10;

/// Most voters, and most learners, a membership may have (what the
/// persistent-memory store's membership slot holds).
pub const MAX_VOTERS: usize = crate::pmem_store::MAX_IDS;

/// A leader's notice to a replica that sent it a Raft message but is not
/// in its configuration (neither voter nor learner): a replica started for
/// a new id without `--join`, or one removed since. Sent at most once per
/// [`NOT_MEMBER_EVERY_TICKS`] to each such sender, on the connection the
/// message came in on. The receiver halts only if the leader has applied
/// past the receiver's own commit index: a stale leader that has not yet
/// applied the receiver's addition cannot stop it.
///
/// Payload: term u64, applied index u64, voter count u32, then that many
/// voter ids u64 (at most [`MAX_VOTERS`]), little-endian.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotMember {
    /// The leader's term.
    pub term: u64,
    /// The index up to which the leader applied its log.
    pub applied: u64,
    /// The leader's voters.
    pub voters: Vec<u64>,
}

/// Ticks between two [`NotMember`] notices to one sender.
pub const NOT_MEMBER_EVERY_TICKS: u64 = 10;

impl NotMember {
    /// The encoding.
    pub fn to_bytes(&self) -> Vec<u8> {
        assert!(self.voters.len() <= MAX_VOTERS, "at most MAX_VOTERS voters");
        let mut b = Vec::with_capacity(20 + 8 * self.voters.len());
        b.extend_from_slice(&self.term.to_le_bytes());
        b.extend_from_slice(&self.applied.to_le_bytes());
        b.extend_from_slice(&(self.voters.len() as u32).to_le_bytes());
        for v in &self.voters {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// Decodes a notice; `None` if its length does not match its count or
    /// the count is over [`MAX_VOTERS`].
    pub fn decode(b: &[u8]) -> Option<NotMember> {
        if b.len() < 20 {
            return None;
        }
        let count = get_u32(b, 16) as usize;
        if count > MAX_VOTERS || b.len() != 20 + 8 * count {
            return None;
        }
        let voters = (0..count).map(|i| get_u64(b, 20 + 8 * i)).collect();
        Some(NotMember { term: get_u64(b, 0), applied: get_u64(b, 8), voters })
    }
}

/// A transport address as a membership change carries it and the state
/// machine keeps it (at most [`MAX_ADDR_BYTES`]).
pub trait PeerAddr: Sized + Clone {
    /// The encoding.
    fn to_bytes(&self) -> Vec<u8>;
    /// The address an encoding names, if it is one.
    fn from_bytes(b: &[u8]) -> Option<Self>;
}

/// A socket address as its text (`127.0.0.1:7004`, `[::1]:7004`).
impl PeerAddr for SocketAddr {
    fn to_bytes(&self) -> Vec<u8> {
        self.to_string().into_bytes()
    }
    fn from_bytes(b: &[u8]) -> Option<Self> {
        std::str::from_utf8(b).ok()?.parse().ok()
    }
}

/// An in-process node as its number, u32.
impl PeerAddr for NodeId {
    fn to_bytes(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }
    fn from_bytes(b: &[u8]) -> Option<Self> {
        Some(NodeId(u32::from_le_bytes(b.try_into().ok()?)))
    }
}

/// A simulated node as its number, u32.
impl PeerAddr for SimAddr {
    fn to_bytes(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }
    fn from_bytes(b: &[u8]) -> Option<Self> {
        Some(SimAddr(u32::from_le_bytes(b.try_into().ok()?)))
    }
}

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
    /// Apply a follower's proposal again when a copy of it arrives again
    /// (no exactly-once table, `crate::forward`).
    pub forward_without_dedup: bool,
    /// Join a chunked message's chunks in arrival order, their offsets
    /// and checksums unchecked (a duplicated chunk goes in twice).
    pub unchecked_chunks: bool,
    /// Persist the machine after every other batch only, so a machine
    /// that keeps its own state lags the deferred snapshot a compaction
    /// records (the log no longer holds what it lacks).
    pub lazy_machine_persist: bool,
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
    /// applied past the last snapshot (a follower at its own phase of the
    /// interval: `node::compaction`).
    pub snapshot_every: u64,
    /// A leader compacts once this many intervals of
    /// [`ReplicaConfig::snapshot_every`] are applied past its last
    /// snapshot (its compaction stalls every follower's heartbeats).
    pub leader_compaction_intervals: u64,
    /// The leader sends its appends before persisting its own (§10.2.1).
    pub leader_sends_first: bool,
    /// Raft's randomized election timeouts come from this seed.
    pub seed: u64,
    /// Planted bugs (tests only).
    pub faults: Faults,
    /// Keep (index, term) of every applied entry for [`Replica::take_applied`]
    /// (the simulation checks that a committed entry never changes).
    pub trace_applied: bool,
    /// A learner is promoted only once its log is within this many
    /// entries of the leader's commit index (and replicating normally).
    pub promote_lag: u64,
    /// A Raft message larger than this goes as chunks of this size (at
    /// most [`RAFT_CHUNK_BYTES`]; the simulation draws smaller ones so that
    /// chunking runs under its faults).
    pub chunk_bytes: usize,
    /// A whole snapshot of the machine is taken this many bytes per turn
    /// ([`StateMachine::snapshot_step`]; applies wait meanwhile), so a
    /// large keyspace does not hold the loop past an election timeout.
    pub snapshot_step_bytes: usize,
    /// Time between two steps of a snapshot being taken: none in a member
    /// (it polls its sockets between steps anyway); the simulation spaces
    /// them so that messages arrive and entries commit meanwhile.
    pub snapshot_step_every: Duration,
    /// A proposal or read (an embedder's or an SMR1 client's) not done
    /// within this many election timeouts (`election_ticks` each) fails:
    /// [`Failure::NoQuorum`], or RETRY to an SMR1 client. A leader that
    /// lost its majority so answers within a bound, never hangs.
    pub pending_timeout_elections: u64,
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
            leader_compaction_intervals: 1,
            leader_sends_first: true,
            seed: id,
            faults: Faults::default(),
            trace_applied: false,
            promote_lag: 1000,
            chunk_bytes: RAFT_CHUNK_BYTES,
            snapshot_step_bytes: SNAPSHOT_STEP_BYTES,
            snapshot_step_every: Duration::ZERO,
            pending_timeout_elections: 2,
        }
    }

    /// Ticks a proposal or read may wait ([`ReplicaConfig::pending_timeout_elections`]).
    pub fn pending_timeout_ticks(&self) -> u64 {
        self.pending_timeout_elections.saturating_mul(self.election_ticks as u64)
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
    /// Proposals refused as larger than the log takes (a client's, or a
    /// follower's forwarded ones, dropped whole).
    pub oversized: u64,
    /// Readys handled.
    pub readys: u64,
    /// Snapshots taken locally.
    pub snapshots: u64,
    /// Of those, deferred ones: compaction records of a machine that keeps
    /// its own state (`StateMachine::keeps_state`), no copy of it encoded.
    pub snapshots_deferred: u64,
    /// Turns a whole snapshot went on past its first step
    /// ([`ReplicaConfig::snapshot_step_bytes`]), applies waiting.
    pub snapshot_turns: u64,
    /// Committed entries that waited for a snapshot being taken.
    pub entries_held: u64,
    /// Raft messages queued to go as chunks.
    pub chunked: u64,
    /// Bytes of chunked messages sent (headers not counted).
    pub chunk_bytes_sent: u64,
    /// Bytes of chunked messages received and kept.
    pub chunk_bytes_received: u64,
    /// Chunks ignored (duplicates, or of a message no longer joined).
    pub chunks_ignored: u64,
    /// Bytes of snapshot bodies written into the staging area.
    pub snapshot_bytes_staged: u64,
    /// Requests for the rest of a snapshot body sent (as a receiver).
    pub snapshot_resumes_asked: u64,
    /// Requests for the rest of a snapshot body honoured (as a sender).
    pub snapshot_resumes_taken: u64,
    /// Snapshot messages not stepped: their body was not staged whole.
    pub snapshots_unstaged: u64,
    /// Append acknowledgements not sent: a later one of the same batch
    /// superseded them (`sendorder`).
    pub superseded: u64,
    /// Raft messages held back while their connection's window was full,
    /// sent in order once it drained (`node/held.rs`).
    pub sends_held: u64,
}

/// One replica of the state machine `M` (by default the put/get/del/cas
/// map that SMR1 clients reach).
pub struct Replica<T: Transport, D: Durable, M: StateMachine = KvMap>
where
    T::Addr: PeerAddr,
{
    config: ReplicaConfig,
    raw: RawNode<Store<D>>,
    machine: M,
    /// The replica's own part of the state: members' addresses, the
    /// sessions of membership changes.
    own: ReplicaPart,
    /// SMR1's data operations on `M`, if this replica serves them.
    smr1: Option<Smr1Ops<M>>,
    /// The machine had applied up to here when the replica started: data
    /// entries up to it are not handed to it again.
    machine_floor: u64,
    /// The machine applied something since it last persisted.
    machine_dirty: bool,
    /// Planted `lazy_machine_persist`: the last dirty batch was not persisted.
    lazy_skipped: bool,
    applied: u64,
    /// Addresses given at start (without this replica).
    boot_peers: BTreeMap<u64, T::Addr>,
    /// Where each peer is: the machine's recorded address, else the
    /// one given at start.
    peers: BTreeMap<u64, T::Addr>,
    /// TRANSFER_LEADER requests waiting for this leader to step down.
    transfers: Vec<RequestId>,
    /// Take a snapshot at the end of this turn (a replica was added).
    compact_now: bool,
    /// A whole snapshot being taken over several turns; committed entries
    /// wait in `held` until it is stored.
    snapshot_job: Option<SnapshotJob>,
    held: Vec<Entry>,
    out_conns: BTreeMap<u64, ConnId>,
    /// Proposals waiting to be applied, by log index: who waits, the term
    /// proposed in, the tick proposed at.
    writes: BTreeMap<u64, (Waiter, u64, u64)>,
    /// Reads waiting for their read index, by context: who waits, the
    /// tick it was (last) asked at, the tick it was first asked at.
    reads: BTreeMap<u64, (ReadWaiter, u64, u64)>,
    ticks: u64,
    /// Reads whose read index is known: the index, who waits, the tick
    /// first asked at.
    ready_reads: Vec<(u64, ReadWaiter, u64)>,
    next_read: u64,
    /// The last ticket handed out.
    next_ticket: u64,
    /// This incarnation's nonce: it tags the proposals it forwards and its
    /// read contexts (`crate::forward`).
    nonce: u64,
    /// The last sequence number given to a forwarded proposal.
    forward_seq: u64,
    /// A follower's proposal was applied here as the leader: tell the
    /// followers the commit index at once.
    bcast_commit: bool,
    /// Forwarded proposals waiting to be applied here, by sequence: the
    /// ticket, the term proposed in, the tick proposed at.
    forwarded: BTreeMap<u64, (Ticket, u64, u64)>,
    /// Outcomes of the batch being applied, released once it is persisted.
    batch: Vec<(Waiter, Pending<M::Output>)>,
    /// Embedders' outcomes not yet taken ([`Replica::take_done`]).
    done: Vec<(Ticket, Done<M::Output>)>,
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
    /// The index of the last membership entry applied (or replayed): a
    /// compaction that leaves a tail names no index before it, so that
    /// its record's membership is the one at its index.
    membership_index: u64,
    /// Writes received this turn, proposed together before its `Ready`:
    /// who waits and their entries.
    proposed_ids: Vec<Waiter>,
    proposed: Vec<Entry>,
    /// A chunked message being sent to each peer (at most one).
    outbox: BTreeMap<u64, Outgoing>,
    /// Messages waiting for their connection's window, per peer.
    held_sends: held::HeldSends,
    /// The wire forms made in the `send_all` under way, by entry index:
    /// every follower's append carries the same entries, gathered once.
    wire_memo: HashMap<u64, Option<bytes::Bytes>>,
    /// Messages being reassembled from chunks, by incoming connection.
    inbox: Assembler,
    /// The id of the last chunked message sent.
    chunked_sent: u64,
    /// Why this replica stopped, once its state contradicts its leader's
    /// (see [`Replica::halted`]).
    halted: Option<String>,
    /// When (in ticks) each non-member was last sent a [`NotMember`].
    told_not_member: BTreeMap<u64, u64>,
    /// The last request for the rest of a snapshot body: the body and the
    /// offset asked from (not asked again for a later chunk of a gap).
    asked: Option<(crate::snapshot::stream::BodyId, u64)>,
    /// How close this replica came to an election (`liveness`).
    liveness: Tracker,
}

/// What the leader does with a membership change it was asked for.
enum Verdict {
    /// Propose this change.
    Propose(ConfChangeType),
    /// Already so (a learner added again at the same address): answer OK.
    Done,
    /// Refuse it.
    Refuse(Refusal, String),
    /// The leader is asked to remove itself: hand leadership over first.
    HandOver,
}

/// What a replica starts from: the store's snapshot metadata and the
/// replica's own part of it. Restores `machine` from the snapshot unless
/// it applied past it already, and raises the store's commit index to
/// what the machine applied (only committed entries are applied; the
/// commit index is stored lazily).
fn start_state<D: Durable, M: StateMachine>(durable: &mut D, machine: &mut M) -> Result<(SnapshotMetadata, ReplicaPart), String> {
    let (meta, data) = durable.snapshot();
    let mut own = ReplicaPart::default();
    if !data.is_empty() {
        let decoded = snapshot::decode(&data).map_err(|e| format!("snapshot at index {}: {e}", meta.index))?;
        if machine.applied() < meta.index {
            if decoded.machine.is_empty() {
                return Err(format!("the store compacted the log to index {} with the machine's state left to the machine (a deferred snapshot), but the machine applied only to {}: its state was lost", meta.index, machine.applied()));
            }
            snapshot::restore_machine(machine, meta.index, &decoded)?;
        }
        own = decoded.replica;
    } else if machine.applied() < meta.index {
        return Err(format!("the store's snapshot at index {} holds no data and the machine applied only to {}", meta.index, machine.applied()));
    }
    let applied = machine.applied();
    let last = durable.last_index();
    if applied > last {
        return Err(format!("the machine applied the log to index {applied}, past this replica's log (last index {last}): the machine and the log are not of one replica"));
    }
    if applied > durable.hard_state().commit {
        durable.note_commit(applied);
    }
    Ok((meta, own))
}

/// A nonce for this incarnation from its seed (splitmix64; the seed's own
/// generator is left to the election timeouts).
fn incarnation_nonce(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A routine compaction of a machine that keeps its own state leaves
/// `snapshot_every / COMPACTION_TAIL_DIVISOR` entries behind the applied
/// index in the log (1,000 at the default interval).
const COMPACTION_TAIL_DIVISOR: u64 = 10;
/// At most this many entries in that tail: half the session table
/// ([`crate::session::MAX_SESSIONS`]).
const MAX_COMPACTION_TAIL: u64 = crate::session::MAX_SESSIONS as u64 / 2;

/// raft-rs's log: discarded, unless `PMWIRE_RAFT_LOG` names a level
/// (`info`, `debug`, `trace`): then each record at or above it goes to
/// stderr as one line with its key-values (an operator's view of
/// elections, step-downs and transfers).
fn raft_logger() -> slog::Logger {
    use slog::Drain;
    let level = std::env::var("PMWIRE_RAFT_LOG").ok().and_then(|l| l.parse::<slog::Level>().ok());
    match level {
        Some(level) => slog::Logger::root(StderrDrain.filter_level(level).fuse(), slog::o!()),
        None => slog::Logger::root(slog::Discard, slog::o!()),
    }
}

/// One line per record on stderr: time, level, message, key-values.
struct StderrDrain;

impl slog::Drain for StderrDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &slog::Record<'_>, values: &slog::OwnedKVList) -> Result<(), slog::Never> {
        use slog::KV;
        let mut line = String::new();
        let mut kv = KvLine(&mut line);
        let _ = record.kv().serialize(record, &mut kv);
        let _ = values.serialize(record, &mut kv);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        eprintln!("{}.{:06} raft {} {}{line}", now.as_secs(), now.subsec_micros(), record.level().as_short_str(), record.msg());
        Ok(())
    }
}

struct KvLine<'a>(&'a mut String);

impl slog::Serializer for KvLine<'_> {
    fn emit_arguments(&mut self, key: slog::Key, val: &std::fmt::Arguments<'_>) -> slog::Result {
        use std::fmt::Write;
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

impl<T: Transport, D: Durable> Replica<T, D, KvMap>
where
    T::Addr: PeerAddr,
{
    /// A replica of the put/get/del/cas map ([`KvMap`]) over `durable`
    /// (its state after a restart, or a new store), reaching the other
    /// replicas at `peers` (id → address, without this one) unless it
    /// recorded another address for one (a replica added later), serving
    /// SMR1's data operations. A new store with no voters is a replica
    /// waiting to be added: it never campaigns and starts from the
    /// snapshot the leader sends it.
    pub fn new(config: ReplicaConfig, durable: D, peers: BTreeMap<u64, T::Addr>) -> Result<Replica<T, D, KvMap>, raft::Error> {
        Ok(Replica::with_machine(config, durable, KvMap::new(), peers)?.serve_smr1())
    }
}

impl<T: Transport, D: Durable, M: StateMachine> Replica<T, D, M>
where
    T::Addr: PeerAddr,
{
    /// A replica of `machine` (new, or a persistent machine as a restart
    /// found it) over `durable`, reaching the other replicas at `peers`
    /// (see [`Replica::new`]). The machine is restored from the store's
    /// snapshot unless it applied past the snapshot already; a machine
    /// that applied past the log's end is refused (machine and log are not
    /// of one replica). SMR1's data operations are answered BAD_REQUEST
    /// unless [`Replica::serve_smr1`] turns them on.
    pub fn with_machine(config: ReplicaConfig, mut durable: D, mut machine: M, peers: BTreeMap<u64, T::Addr>) -> Result<Replica<T, D, M>, raft::Error> {
        assert_ne!(config.id, 0, "replica ids start at 1");
        assert!((1..=RAFT_CHUNK_BYTES).contains(&config.chunk_bytes), "chunks of 1 B to RAFT_CHUNK_BYTES");
        assert!(!peers.contains_key(&config.id), "peers exclude this replica");
        assert!(config.pending_timeout_ticks() > 0, "a pending proposal or read may wait at least a tick");
        let (snap_meta, own) = start_state(&mut durable, &mut machine).map_err(raft::Error::ConfigInvalid)?;
        // A message larger than the store can hold (a snapshot past its
        // slot, an entry past its log) is refused at its first chunk.
        let incoming_bound = durable.capacity_hint().map_or(MAX_RAFT_MESSAGE_BYTES, |c| c.saturating_add(RAFT_CHUNK_BYTES as u64).min(MAX_RAFT_MESSAGE_BYTES));
        let log_quarter = durable.log_space().map(|(_, capacity)| capacity / 4);
        let raft_config = raft::Config {
            id: config.id,
            election_tick: config.election_ticks,
            heartbeat_tick: config.heartbeat_ticks,
            applied: snap_meta.index,
            // An append carries at most 1 MiB of entries (the first
            // always goes), less for a log of under 4 MiB: raft-rs takes
            // no append bound above its uncommitted bound.
            max_size_per_msg: log_quarter.map_or(1 << 20, |q| q.min(1 << 20)),
            // Uncommitted entries the leader holds at most (a turn's
            // proposals past it are dropped, NotProposed: back-pressure):
            // with commits stalled (followers gone) they would otherwise fill
            // the log, which cannot compact past the commit. One proposal
            // alone always passes; `max_entry_bytes` bounds it.
            max_uncommitted_size: log_quarter.unwrap_or(raft::NO_LIMIT),
            // Appends in flight per follower: within a connection's window
            // of sends (32 on io_uring TCP), so a turn never builds appends
            // (gathering their values) that the window then refuses; 256
            // held a leader's turn 275 ms re-sending to a follower back
            // from a stall, and its followers elected another leader.
            max_inflight_msgs: MAX_INFLIGHT_APPENDS,
            // Committed entries one Ready hands over: a follower back from
            // a stall applies its backlog over several turns, not in one.
            max_committed_size_per_ready: MAX_COMMITTED_BYTES_PER_READY,
            check_quorum: true,
            pre_vote: true,
            // A commit reaches the followers with the next append or
            // heartbeat, not in an empty append of its own (two messages
            // and two answers less per write; reads go through the leader).
            skip_bcast_commit: true,
            // Not `batch_append`: raft-rs 0.7 merges new entries into a
            // pending *empty* append (a probe) without fixing its index, so
            // the follower acknowledges entries it does not hold and the
            // leader's next heartbeat commits past its log (found by the
            // simulation, seed 2546).
            ..Default::default()
        };
        let raw = RawNode::new(&raft_config, Store::new(durable, machine.wire_len()), &raft_logger())?;
        let rng = Xoshiro256PlusPlus::seed_from_u64(config.seed);
        let seed = config.seed;
        let mut replica = Replica {
            next_tick: config.tick,
            config,
            raw,
            machine_floor: machine.applied(),
            machine_dirty: false,
            lazy_skipped: false,
            machine,
            own,
            smr1: None,
            applied: snap_meta.index,
            boot_peers: peers.clone(),
            peers,
            transfers: Vec::new(),
            compact_now: false,
            snapshot_job: None,
            held: Vec::new(),
            out_conns: BTreeMap::new(),
            writes: BTreeMap::new(),
            reads: BTreeMap::new(),
            ticks: 0,
            ready_reads: Vec::new(),
            next_read: 1,
            next_ticket: 0,
            nonce: incarnation_nonce(seed),
            forward_seq: 0,
            bcast_commit: false,
            forwarded: BTreeMap::new(),
            batch: Vec::new(),
            done: Vec::new(),
            was_leader: false,
            counters: Counters::default(),
            rng,
            applied_trace: Vec::new(),
            now: Duration::ZERO,
            reconnect_at: BTreeMap::new(),
            snapshot_index: snap_meta.index,
            membership_index: 0,
            proposed_ids: Vec::new(),
            proposed: Vec::new(),
            outbox: BTreeMap::new(),
            held_sends: held::HeldSends::default(),
            wire_memo: HashMap::new(),
            inbox: Assembler::new(incoming_bound),
            chunked_sent: 0,
            halted: None,
            told_not_member: BTreeMap::new(),
            asked: None,
            liveness: Tracker::default(),
        };
        if replica.config.faults.unchecked_chunks {
            replica.inbox.plant_unchecked();
        }
        replica.sync_peers();
        replica.rerandomize();
        Ok(replica)
    }

    /// Serves SMR1's data operations (PUT, GET, DEL, CAS) on the machine.
    pub fn serve_smr1(mut self) -> Replica<T, D, M>
    where
        M: Smr1Machine,
    {
        self.smr1 = Some(Smr1Ops::of());
        self
    }

    /// Rebuilds the address book: what the replica recorded, else what
    /// was given at start.
    fn sync_peers(&mut self) {
        let mut peers = self.boot_peers.clone();
        for (&id, bytes) in &self.own.members {
            if id == self.config.id {
                continue;
            }
            if let Some(addr) = T::Addr::from_bytes(bytes) {
                peers.insert(id, addr);
            }
        }
        self.peers = peers;
    }

    /// The address this replica would reach replica `id` at.
    pub fn peer_addr(&self, id: u64) -> Option<&T::Addr> {
        self.peers.get(&id)
    }

    /// The membership this replica has applied (voters, learners).
    pub fn conf_state(&self) -> ConfState {
        let mut cs = self.raw.raft.prs().conf().to_conf_state();
        cs.voters.sort_unstable();
        cs.learners.sort_unstable();
        cs
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
        let cs = self.conf_state();
        let listed = cs.voters.iter().map(|&id| (id, false)).chain(cs.learners.iter().map(|&id| (id, true)));
        let members = listed
            .take(crate::command::MAX_MEMBERS)
            .map(|(id, learner)| {
                let addr = self.peers.get(&id).map(PeerAddr::to_bytes).filter(|a| a.len() <= MAX_ADDR_BYTES).unwrap_or_default();
                Member { id, learner, addr }
            })
            .collect();
        StatusValue { id: st.id, role, term: st.term, leader: st.leader, last_index: st.last_index, commit: st.commit, applied: st.applied, members }
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

    /// How close it came to an election (`liveness`).
    pub fn liveness(&self) -> Liveness {
        self.liveness.counters
    }

    /// The state machine: what an embedder reads, linearizably once a
    /// [`Replica::read_index`] is done.
    pub fn machine(&self) -> &M {
        &self.machine
    }

    /// The state machine, mutable (an embedder's own bookkeeping; what it
    /// changes here is not replicated).
    pub fn machine_mut(&mut self) -> &mut M {
        &mut self.machine
    }

    /// The replica's own part of the state (members' addresses, sessions
    /// of membership changes).
    pub fn own_state(&self) -> &ReplicaPart {
        &self.own
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

    /// Takes the machine out (a simulated crash: what it leaves is the
    /// simulation's to decide).
    pub fn take_machine(&mut self) -> M
    where
        M: Default,
    {
        std::mem::take(&mut self.machine)
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

    /// Why this replica stopped, if it did: its leader counts entries as
    /// held here that its store does not hold (the pool is not the one
    /// this replica ran on), or its leader says it is not a member. Raft
    /// cannot go on safely from either; the process exits with the reason.
    pub fn halted(&self) -> Option<&str> {
        self.halted.as_deref()
    }

    fn on_message(&mut self, t: &mut T, conn: ConnId, payload: &Payload) {
        // A payload in lent memory (the member's pool) is shared by the
        // message's entries, not copied into them (`transport::rx`).
        let parsed = match payload {
            Payload::Lent(bytes) => Message::parse_from_carllerche_bytes(bytes),
            Payload::Owned(v) => Message::parse_from_bytes(v),
        };
        let mut m = match parsed {
            Ok(m) if m.to == self.config.id => m,
            _ => return self.counters.malformed += 1,
        };
        if matches!(m.get_msg_type(), MessageType::MsgAppend | MessageType::MsgPropose)
            && m.get_entries().iter().any(|e| e.get_entry_type() == EntryType::EntryNormal && !self.machine.accepts_from_peer(&e.data))
        {
            // An entry naming this member's own buffers, or one that does
            // not parse as the machine's local form would: never sent by a
            // correct peer.
            return self.counters.malformed += 1;
        }
        if m.get_msg_type() == MessageType::MsgPropose && !self.fits_log(m.get_entries()) {
            // A follower forwarded more than the log takes (it refuses such
            // an entry itself, so members sized alike never send one): its
            // proposals fail by their bound; appending them would find the
            // log full and stop this replica.
            return self.counters.oversized += 1;
        }
        // A follower's forwarded proposal is taken into the local form only
        // by a leader, which appends it (a follower would pass it on to its
        // leader as it came, in the wire form).
        let appends = match m.get_msg_type() {
            MessageType::MsgAppend => true,
            MessageType::MsgPropose => self.raw.raft.state == StateRole::Leader,
            _ => false,
        };
        if appends && self.machine.tracks_log() {
            self.local_forms(&mut m);
        }
        let r = &self.raw.raft;
        if r.state == StateRole::Leader && m.from != self.config.id && r.prs().get(m.from).is_none() {
            return self.tell_not_member(t, conn, m.from);
        }
        if m.get_msg_type() == MessageType::MsgSnapshot && !self.snapshot_staged(&m) {
            return;
        }
        let r = &self.raw.raft;
        let last = r.raft_log.last_index();
        if m.get_msg_type() == MessageType::MsgHeartbeat && m.term >= r.term && m.commit > last {
            // raft-rs would abort here: a leader sends a heartbeat's
            // commit only up to what this replica acknowledged holding.
            let id = self.config.id;
            self.halted = Some(format!(
                "replica {id}: the leader (replica {}, term {}) counts log entries up to index {} as held here, but this replica's log ends at index {last}: \
                 it was started on a pool that is not the one replica {id} ran on (a new or older pool, or a DRAM log that a restart emptied). \
                 Start it on its own pool, or remove replica {id} (pmwire smr ... remove --id {id}) and add it back as a new replica started with --join",
                m.from, m.term, m.commit
            ));
            return;
        }
        if matches!(m.get_msg_type(), MessageType::MsgAppend | MessageType::MsgHeartbeat | MessageType::MsgSnapshot) && m.term >= r.term {
            self.liveness.heard(m.from, m.term, self.now);
        }
        // A message from a stale term is refused by Raft itself; nothing
        // to do with the error.
        let _ = self.raw.step(m);
    }

    /// The log seam (`crate::logrefs`): each machine entry of a received
    /// append in the machine's local form.
    fn local_forms(&mut self, m: &mut Message) {
        for e in m.mut_entries().iter_mut().filter(|e| crate::logrefs::is_machine_entry(e)) {
            if let Some(local) = self.machine.local_form(&e.data) {
                e.data = local.into();
            }
        }
    }

    /// The log seam: each machine entry of an append to send in its wire form.
    /// The first follower's append of an entry in a `send_all` makes its
    /// wire form; the others' reuse it (`wire_memo`).
    fn wire_forms(&mut self, m: &mut Message) {
        for e in m.mut_entries().iter_mut().filter(|e| crate::logrefs::is_machine_entry(e)) {
            let wire = match self.wire_memo.get(&e.index) {
                Some(wire) => {
                    self.machine.wire_form_again(&e.data, wire.as_deref());
                    wire.clone()
                }
                None => {
                    let wire = self.machine.wire_form(&e.data).map(bytes::Bytes::from);
                    self.wire_memo.insert(e.index, wire.clone());
                    wire
                }
            };
            if let Some(wire) = wire {
                e.data = wire;
            }
        }
    }

    /// A Raft message came from `from`, which is not in this leader's
    /// configuration: tell it (rate-limited), on the connection it used.
    fn tell_not_member(&mut self, t: &mut T, conn: ConnId, from: u64) {
        if self.told_not_member.get(&from).is_some_and(|&at| self.ticks < at + NOT_MEMBER_EVERY_TICKS) {
            return;
        }
        self.told_not_member.insert(from, self.ticks);
        let notice = NotMember { term: self.raw.raft.term, applied: self.applied, voters: self.conf_state().voters };
        if t.send(conn, &NOT_MEMBER_MAGIC, notice.to_bytes()).is_err() {
            self.counters.unsent += 1;
        }
    }

    /// A leader says this replica is not a member: halt, unless this
    /// replica has committed past what that leader applied (a stale leader
    /// that has not applied this replica's addition).
    fn on_not_member(&mut self, payload: &[u8]) {
        let Some(notice) = NotMember::decode(payload) else {
            return self.counters.malformed += 1;
        };
        let commit = self.raw.raft.raft_log.committed;
        if notice.applied <= commit {
            return;
        }
        let id = self.config.id;
        let voters = notice.voters.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        self.halted = Some(format!(
            "replica {id} is not a member of this cluster: its leader (term {}, applied index {}) has voters {voters}. \
             A new replica is added with `pmwire smr --peers ... add --id {id} --addr ADDR` and started with --join on a new pool; \
             a removed replica is not started again",
            notice.term, notice.applied
        ));
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
        if op.names_member() {
            return self.on_member_request(t, id, payload);
        }
        let Some(ops) = &self.smr1 else {
            // This replica's machine is not reached by SMR1's data operations.
            return self.answer(t, id, Status::BadRequest, 0, Vec::new());
        };
        if op == Op::Get {
            let ctx = self.next_read;
            self.next_read += 1;
            self.reads.insert(ctx, (ReadWaiter::Client(id, payload[key_at].to_vec()), self.ticks, self.ticks));
            let bytes = self.read_ctx(ctx);
            self.raw.read_index(bytes);
            return;
        }
        // The request's bytes, unchanged, are the log entry's data. The
        // writes of a turn are proposed together, before its `Ready`
        // ([`Replica::propose_batch`]): one append per follower for all.
        if !self.config.faults.answer_before_commit {
            self.proposed_ids.push(Waiter::Client(id));
            self.proposed.push(Entry { data: payload.into(), context: (&[ENTRY_SMR1_WRITE][..]).into(), ..Default::default() });
            return;
        }
        let preview = ops.preview;
        if self.raw.propose(vec![ENTRY_SMR1_WRITE], payload.clone()).is_err() {
            return self.answer(t, id, Status::NotLeader, 0, Vec::new());
        }
        // Planted: answer now, as if the entry were committed.
        let index = self.raw.raft.raft_log.last_index();
        let resp = preview(&self.machine, index, &payload);
        self.answer(t, id, resp.status, index, resp.value);
    }

    /// A membership request at the leader: checked against the applied
    /// membership, then proposed (or, for TRANSFER_LEADER, started).
    fn on_member_request<X: Transport>(&mut self, t: &mut X, id: RequestId, payload: Vec<u8>) {
        let req = RequestView::parse(&payload).expect("checked by on_request");
        let member = req.member_id().expect("a membership request");
        if req.op == Op::TransferLeader {
            return self.start_transfer(t, id, member);
        }
        if let Some(resp) = self.own.sessions.check(req.client, req.seq, 0) {
            return self.answer(t, id, resp.status, resp.index, resp.value);
        }
        if self.raw.raft.has_pending_conf() {
            return match self.unapplied_conf_change() {
                // This very request, proposed before (its answer timed out): still in progress.
                Some((_, client, seq)) if (client, seq) == (req.client, req.seq) => self.answer(t, id, Status::Retry, 0, Vec::new()),
                Some((index, _, _)) => self.refuse(t, id, Refusal::Pending, format!("another membership change (log index {index}) is not applied yet; try again")),
                // A new leader's conservative guard: gone once it applies its first entry.
                None => self.answer(t, id, Status::Retry, 0, Vec::new()),
            };
        }
        if self.raw.raft.lead_transferee.is_some() {
            return self.answer(t, id, Status::Retry, 0, Vec::new());
        }
        let cs = self.conf_state();
        let change = match self.check_member_change(&req, member, &cs) {
            Verdict::Propose(change) => change,
            Verdict::Done => return self.answer(t, id, Status::Ok, self.applied, Vec::new()),
            Verdict::Refuse(reason, message) => return self.refuse(t, id, reason, message),
            Verdict::HandOver => return self.hand_over_before_removal(t, id, &cs),
        };
        let cc = ConfChange { change_type: change, node_id: member, ..Default::default() };
        if self.raw.propose_conf_change(payload, cc).is_err() {
            return self.answer(t, id, Status::NotLeader, 0, Vec::new());
        }
        let index = self.raw.raft.raft_log.last_index();
        let previous = self.writes.insert(index, (Waiter::Client(id), self.raw.raft.term, self.ticks));
        assert!(previous.is_none(), "one proposal per index per term");
    }

    /// What to do with a membership change, checked against the applied
    /// membership `cs` (nothing is pending: checked before).
    fn check_member_change(&self, req: &RequestView<'_>, member: u64, cs: &ConfState) -> Verdict {
        let (voter, learner) = (cs.voters.contains(&member), cs.learners.contains(&member));
        let refuse = |reason, message: String| Verdict::Refuse(reason, message);
        match req.op {
            Op::AddMember if voter => refuse(Refusal::Exists, format!("replica {member} is already a voter")),
            Op::AddMember if learner && self.peers.get(&member).is_some_and(|a| a.to_bytes() == req.value) => Verdict::Done,
            Op::AddMember if learner => refuse(Refusal::Exists, format!("replica {member} is already a learner at another address; remove it first")),
            Op::AddMember => {
                let members = cs.voters.iter().chain(&cs.learners).copied();
                if let Some(other) = members.filter(|&m| m != member).find(|m| self.peers.get(m).is_some_and(|a| a.to_bytes() == req.value)) {
                    return refuse(Refusal::AddressInUse, format!("replica {other} has that address"));
                }
                if T::Addr::from_bytes(req.value).is_none() {
                    return refuse(Refusal::Rejected, "the address does not parse".to_string());
                }
                if cs.learners.len() >= MAX_VOTERS {
                    return refuse(Refusal::Rejected, format!("at most {MAX_VOTERS} learners"));
                }
                Verdict::Propose(ConfChangeType::AddLearnerNode)
            }
            Op::PromoteMember if voter => refuse(Refusal::Exists, format!("replica {member} is already a voter")),
            Op::PromoteMember if !learner => refuse(Refusal::Unknown, format!("replica {member} is not a member (add it first)")),
            Op::PromoteMember if cs.voters.len() >= MAX_VOTERS => refuse(Refusal::Rejected, format!("at most {MAX_VOTERS} voters")),
            Op::PromoteMember => match self.not_caught_up(member) {
                Some(why) => refuse(Refusal::CatchingUp, why),
                None => Verdict::Propose(ConfChangeType::AddNode),
            },
            Op::RemoveMember if !voter && !learner => refuse(Refusal::Unknown, format!("replica {member} is not a member")),
            Op::RemoveMember if voter && cs.voters.len() == 1 => refuse(Refusal::LastVoter, format!("replica {member} is the last voter")),
            Op::RemoveMember if member == self.config.id => Verdict::HandOver,
            Op::RemoveMember => Verdict::Propose(ConfChangeType::RemoveNode),
            _ => unreachable!("membership changes only"),
        }
    }

    fn refuse<X: Transport>(&self, t: &mut X, id: RequestId, reason: Refusal, message: String) {
        self.answer(t, id, Status::Refused, 0, Refused::new(reason, message).to_bytes());
    }

    /// The index of a conf change in the log past the applied index, and
    /// the session (client, seq) of the request it carries.
    fn unapplied_conf_change(&self) -> Option<(u64, u64, u64)> {
        let log = &self.raw.raft.raft_log;
        let entries = log.entries(self.applied + 1, None, GetEntriesContext::empty(false)).ok()?;
        let e = entries.iter().find(|e| e.get_entry_type() != EntryType::EntryNormal)?;
        let (client, seq) = RequestView::parse(&e.context).map_or((0, 0), |r| (r.client, r.seq));
        Some((e.index, client, seq))
    }

    /// Why learner `id` is not ready to vote, if it is not.
    fn not_caught_up(&self, id: u64) -> Option<String> {
        let pr = self.raw.raft.prs().get(id)?;
        learner_lag(id, pr, self.raw.raft.raft_log.committed, self.config.promote_lag)
    }

    /// The leader asked to remove itself: hand leadership to the voter
    /// with the longest log and answer RETRY (the client asks again and
    /// is sent to the new leader, which removes this replica).
    fn hand_over_before_removal<X: Transport>(&mut self, t: &mut X, id: RequestId, cs: &ConfState) {
        let me = self.config.id;
        let prs = self.raw.raft.prs();
        let best = cs.voters.iter().copied().filter(|&v| v != me).max_by_key(|&v| (prs.get(v).map_or(0, |p| p.matched), std::cmp::Reverse(v)));
        let to = best.expect("not the last voter: checked");
        self.raw.transfer_leader(to);
        self.answer(t, id, Status::Retry, 0, Vec::new());
    }

    fn start_transfer<X: Transport>(&mut self, t: &mut X, id: RequestId, to: u64) {
        if to == self.config.id {
            return self.answer(t, id, Status::Ok, 0, Vec::new());
        }
        let cs = self.conf_state();
        if cs.learners.contains(&to) {
            return self.refuse(t, id, Refusal::NotVoter, format!("replica {to} is a learner; promote it first"));
        }
        if !cs.voters.contains(&to) {
            return self.refuse(t, id, Refusal::Unknown, format!("replica {to} is not a member"));
        }
        self.raw.transfer_leader(to);
        self.transfers.push(id);
    }

    /// Applies a conf-change entry: unless its request was applied before
    /// (a duplicate: answered from the session, not applied again), to
    /// raft-rs (which may refuse it), the store and the machine.
    fn apply_membership(&mut self, t: &mut T, e: &Entry, cc: &ConfChangeV2) -> Result<(), raft::Error> {
        self.membership_index = self.membership_index.max(e.index);
        let waiting = self.writes.remove(&e.index);
        let req = RequestView::parse(&e.context).ok().filter(|r| r.op.changes_membership());
        if let Some(resp) = req.as_ref().and_then(|r| self.own.sessions.check(r.client, r.seq, 0)) {
            if let Some((waiter, _, _)) = waiting {
                self.batch.push((waiter, Pending::Smr1(resp)));
            }
            return Ok(());
        }
        assert!(
            !self.raw.raft.prs().conf().to_conf_state().voters.is_empty(),
            "replica {}: a membership change at index {} reached a replica that knows no voters: a new replica must start from a snapshot",
            self.config.id,
            e.index
        );
        let outcome = match self.raw.apply_conf_change(cc) {
            Ok(cs) => {
                self.store_mut().set_conf_state(&cs).map_err(store_error)?;
                (Status::Ok, Vec::new())
            }
            Err(err) => (Status::Refused, Refused::new(Refusal::Rejected, format!("raft refused the change: {err}")).to_bytes()),
        };
        let resp = match &req {
            Some(r) => self.record_member_change(e.index, r, outcome),
            None => Response { status: outcome.0, leader: 0, index: e.index, value: outcome.1 },
        };
        if resp.status == Status::Ok {
            self.after_membership_change(t, cc.get_changes());
        }
        if let Some((waiter, term, _)) = waiting {
            let pending = if term == e.term { Pending::Smr1(resp) } else { Pending::Superseded };
            self.batch.push((waiter, pending));
        }
        Ok(())
    }

    /// Records the outcome of the membership request `req` carried by the
    /// conf change at `index` in the replica's own part: on success
    /// ADD_MEMBER records the address and REMOVE_MEMBER drops it; the
    /// outcome is remembered in the request's session.
    fn record_member_change(&mut self, index: u64, req: &RequestView<'_>, outcome: (Status, Vec<u8>)) -> Response {
        let id = req.member_id().expect("a membership request names a replica");
        let (status, value) = outcome;
        if status == Status::Ok {
            match req.op {
                Op::AddMember => {
                    assert!(req.value.len() <= MAX_ADDR_BYTES, "checked by parse");
                    self.own.members.insert(id, req.value.to_vec());
                }
                Op::RemoveMember => {
                    self.own.members.remove(&id);
                }
                _ => {}
            }
        }
        self.own.sessions.remember(req.client, req.seq, index, status, value.clone());
        Response { status, leader: 0, index, value }
    }

    /// Follows an applied change: the address book, connections to
    /// removed replicas, and a snapshot after an add.
    fn after_membership_change(&mut self, t: &mut T, changes: &[ConfChangeSingle]) {
        self.sync_peers();
        for c in changes {
            match c.get_change_type() {
                ConfChangeType::AddLearnerNode => self.compact_now = true,
                ConfChangeType::RemoveNode => {
                    self.peers.remove(&c.node_id);
                    self.reconnect_at.remove(&c.node_id);
                    if let Some(conn) = self.out_conns.remove(&c.node_id) {
                        t.close(conn);
                    }
                }
                ConfChangeType::AddNode => {}
            }
        }
    }

    /// The most bytes one entry, and one turn's proposals together, may
    /// hold: a quarter of the log's capacity, or no bound for a store
    /// without one. Why it always finds room: the log compacts its applied
    /// prefix once half full, and raft-rs holds at most this much
    /// uncommitted (`max_uncommitted_size`), so the log never holds more
    /// than three quarters; a larger entry had found the log full and
    /// stopped the replica (a 60 MiB SET through a follower did).
    pub fn max_entry_bytes(&self) -> Option<u64> {
        self.durable().log_space().map(|(_, capacity)| capacity / 4)
    }

    /// Whether entries proposed together fit the log: within
    /// [`Replica::max_entry_bytes`] together.
    fn fits_log(&self, entries: &[Entry]) -> bool {
        let Some(max) = self.max_entry_bytes() else { return true };
        entries.iter().map(|e| e.data.len() as u64).sum::<u64>() <= max
    }

    /// A proposal larger than the log takes: certainly not applied.
    fn too_large(&mut self, t: &mut T, waiter: Waiter, bytes: u64, max: u64) {
        self.counters.oversized += 1;
        let reply = (Status::BadRequest, format!("entry of {bytes} B, over the log's {max} B").into_bytes());
        self.fail_unlogged(t, waiter, Failure::TooLarge { bytes, max }, reply);
    }

    /// A proposal that never reached a log fails: an SMR1 client gets
    /// `reply`, a ticket (the embedder's or a forwarded one's) `why`.
    fn fail_unlogged(&mut self, t: &mut T, waiter: Waiter, why: Failure, reply: (Status, Vec<u8>)) {
        match waiter {
            Waiter::Client(id) => self.answer(t, id, reply.0, 0, reply.1),
            Waiter::Ticket(k) => self.done.push((k, Done::Failed(why))),
            Waiter::Forwarded(seq) => {
                if let Some((k, _, _)) = self.forwarded.remove(&seq) {
                    self.done.push((k, Done::Failed(why)));
                }
            }
        }
    }

    /// Proposes the writes this turn received as one `MsgPropose` with all
    /// their entries: raft-rs appends them and sends each follower one
    /// append (raft-rs's own `batch_append` is off, see `new`). Each
    /// write's index follows from the log's last index after the step.
    /// On a follower only the forwarded proposals go (raft-rs forwards
    /// them to the leader); a leader's own, proposed before it lost
    /// leadership, fail as never proposed.
    fn propose_batch(&mut self, t: &mut T) {
        if self.proposed.is_empty() {
            return;
        }
        let leader = self.raw.raft.state == StateRole::Leader;
        // No leader known (an election): forwarded proposals wait here for
        // one, within their bound (`expire_pending`).
        let hold = !leader && self.raw.raft.leader_id == 0;
        let term = self.raw.raft.term;
        let entries = std::mem::take(&mut self.proposed);
        let waiters = std::mem::take(&mut self.proposed_ids);
        assert_eq!(entries.len(), waiters.len(), "one waiter per proposed entry");
        let mut going = Vec::with_capacity(entries.len());
        let mut waiting = Vec::with_capacity(entries.len());
        // One turn's entries stay within the bound together; the rest go
        // next turn, in order.
        let max = self.max_entry_bytes();
        let mut turn_bytes = 0u64;
        for (mut e, w) in entries.into_iter().zip(waiters) {
            let bytes = e.data.len() as u64;
            if let Some(max) = max {
                if bytes > max {
                    self.too_large(t, w, bytes, max);
                    continue;
                }
                if !self.proposed.is_empty() || turn_bytes + bytes > max {
                    self.proposed.push(e);
                    self.proposed_ids.push(w);
                    continue;
                }
                turn_bytes += bytes;
            }
            match w {
                // Expired while held: failed already.
                Waiter::Forwarded(seq) if !self.forwarded.contains_key(&seq) => {}
                Waiter::Forwarded(_) if hold => {
                    self.proposed.push(e);
                    self.proposed_ids.push(w);
                }
                Waiter::Forwarded(seq) => {
                    // Tagged with the term it is sent in (the one its leader
                    // must append it in to apply it).
                    let mut ctx = e.context.to_vec();
                    ctx[32..40].copy_from_slice(&term.to_le_bytes());
                    e.context = ctx.into();
                    self.forwarded.get_mut(&seq).expect("checked").1 = term;
                    going.push(e);
                    waiting.push(w);
                }
                w if leader => {
                    going.push(e);
                    waiting.push(w);
                }
                w => self.not_proposed(t, w),
            }
        }
        if going.is_empty() {
            return;
        }
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgPropose);
        m.from = self.config.id;
        m.set_entries(going.into());
        let n = waiting.len() as u64;
        if self.raw.step(m).is_err() {
            for w in waiting {
                self.not_proposed(t, w);
            }
            return;
        }
        if !leader {
            return;
        }
        let term = self.raw.raft.term;
        let first = self.raw.raft.raft_log.last_index() + 1 - n;
        let ticks = self.ticks;
        for (k, waiter) in waiting.into_iter().enumerate() {
            if matches!(waiter, Waiter::Forwarded(_)) {
                // Done when applied, by its context (`apply_forwarded`).
                continue;
            }
            let previous = self.writes.insert(first + k as u64, (waiter, term, ticks));
            assert!(previous.is_none(), "one proposal per index per term");
        }
    }

    /// A proposal that never reached a log: certainly not applied.
    fn not_proposed(&mut self, t: &mut T, waiter: Waiter) {
        self.fail_unlogged(t, waiter, Failure::NotProposed, (Status::NotLeader, Vec::new()));
    }

    fn answer<X: Transport>(&self, t: &mut X, id: RequestId, status: Status, index: u64, value: Vec<u8>) {
        let resp = Response { status, leader: self.raw.raft.leader_id, index, value };
        let mut bytes = t.take_buffer(resp.encoded_len());
        resp.encode(&mut bytes);
        // A client that went away cannot be answered; nothing is lost.
        let _ = t.reply(id, &REQUEST_MAGIC, bytes);
    }

    /// Sends a batch: control messages first, superseded acknowledgements
    /// dropped (`sendorder`).
    fn send_all(&mut self, t: &mut T, msgs: Vec<Message>) {
        let (msgs, superseded) = sendorder::order(msgs);
        self.counters.superseded += superseded as u64;
        self.drain_held(t);
        for m in msgs {
            self.send(t, m);
        }
        self.wire_memo.clear();
    }

    fn send(&mut self, t: &mut T, mut m: Message) {
        let to = m.to;
        let snapshot = m.get_msg_type() == MessageType::MsgSnapshot;
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
                self.unsendable(to, snapshot);
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
                    self.unsendable(to, snapshot);
                    return;
                }
            },
        };
        if m.get_msg_type() == MessageType::MsgAppend && self.machine.tracks_log() {
            self.wire_forms(&mut m);
        }
        // Encoded into one of the transport's kept buffers (no allocation
        // once they circulate).
        let mut payload = t.take_buffer(m.compute_size() as usize);
        m.write_to_vec(&mut payload).expect("a raft message encodes");
        if let Some(body) = snapshot.then(|| crate::snapshot::stream::decode_descriptor(m.get_snapshot().get_data())).flatten() {
            return self.send_stream(t, to, conn, payload, body);
        }
        if payload.len() > self.config.chunk_bytes {
            return self.send_chunked(t, to, conn, payload, snapshot);
        }
        if !snapshot && (self.held_sends.holds(to) || !t.send_room(conn)) {
            // Behind its connection's window: held, not lost (`node/held.rs`).
            match self.held_sends.hold(to, conn, &RAFT_MAGIC, payload) {
                Ok(()) => self.counters.sends_held += 1,
                Err(payload) => self.drop_held(t, to, payload),
            }
            return;
        }
        let sent = t.send(conn, &RAFT_MAGIC, payload);
        if snapshot {
            // The leader waits for this report before it probes the
            // follower again; the send is all we know of the delivery (a
            // lost snapshot is found by the probe and sent again).
            let status = if sent.is_ok() { SnapshotStatus::Finish } else { SnapshotStatus::Failure };
            self.raw.report_snapshot(to, status);
        }
        match sent {
            Ok(()) => {
                self.counters.sent += 1;
                if self.raw.raft.state == StateRole::Leader {
                    self.liveness.sent(to, self.raw.raft.term, self.now);
                }
            }
            Err(_) => {
                self.counters.unsent += 1;
                self.raw.report_unreachable(to);
            }
        }
    }

    /// A message to `to` could not go. A snapshot must be reported, or
    /// raft-rs waits for it forever (the follower's progress stays in its
    /// snapshot state: found by the forwarding simulation, `sim_forward`).
    fn unsendable(&mut self, to: u64, snapshot: bool) {
        self.raw.report_unreachable(to);
        if snapshot {
            self.raw.report_snapshot(to, SnapshotStatus::Failure);
        }
    }

    /// Drops `refused`, a message to `to`, and everything held for it
    /// (counted unsent), and reports the peer unreachable: raft-rs sends
    /// again from its match index (`node/held.rs`).
    fn drop_held(&mut self, t: &mut T, to: u64, refused: Vec<u8>) {
        t.recycle(refused);
        let dropped = self.held_sends.drop_peer(to, |payload| t.recycle(payload));
        self.counters.unsent += 1 + dropped;
        self.raw.report_unreachable(to);
    }

    /// Sends the messages held for full windows that now fit, in order; a
    /// peer whose connection went loses its held messages and is reported
    /// unreachable (raft-rs sends again), as an unsent message is.
    fn drain_held(&mut self, t: &mut T) -> bool {
        if self.held_sends.is_empty() {
            return false;
        }
        let mut sent_any = false;
        let (leader, term, now) = (self.raw.raft.state == StateRole::Leader, self.raw.raft.term, self.now);
        let (out_conns, counters, liveness, raw) = (&self.out_conns, &mut self.counters, &mut self.liveness, &mut self.raw);
        self.held_sends.drain(t, |to| out_conns.get(&to).copied(), |to, d| {
            counters.sent += d.sent;
            counters.unsent += d.dropped;
            sent_any |= d.sent > 0;
            if d.sent > 0 && leader {
                liveness.sent(to, term, now);
            }
            if d.dropped > 0 {
                raw.report_unreachable(to);
            }
        });
        sent_any
    }

    /// Queues `payload` as chunks to peer `to` (refused, as unsent, while
    /// another chunked message to it is on its way) and starts sending.
    fn send_chunked(&mut self, t: &mut T, to: u64, conn: ConnId, payload: Vec<u8>, snapshot: bool) {
        if !snapshot && self.held_sends.holds(to) {
            // It would overtake the messages held before it: it and they
            // are dropped, and raft-rs sends again from the match index.
            return self.drop_held(t, to, payload);
        }
        if self.outbox.contains_key(&to) || payload.len() as u64 > MAX_RAFT_MESSAGE_BYTES {
            self.counters.unsent += 1;
            if snapshot {
                self.raw.report_snapshot(to, SnapshotStatus::Failure);
            }
            return;
        }
        self.chunked_sent += 1;
        self.counters.chunked += 1;
        let out = Outgoing::new(conn, self.chunked_sent, payload, self.config.chunk_bytes, snapshot);
        self.outbox.insert(to, out);
        self.drain_outbox(t);
    }

    /// Sends queued chunks while the connections' windows allow, at most
    /// [`CHUNK_BYTES_PER_TURN`] to each peer; true if any went. A peer
    /// whose connection fails loses its message (raft-rs sends it again,
    /// a snapshot from its first chunk).
    fn drain_outbox(&mut self, t: &mut T) -> bool {
        let mut sent_any = false;
        let peers: Vec<u64> = self.outbox.keys().copied().collect();
        for to in peers {
            let out = self.outbox.get_mut(&to).expect("listed");
            let mut failed = false;
            let mut budget = CHUNK_BYTES_PER_TURN;
            let durable = &self.raw.store().durable;
            while budget > 0 && !out.done() {
                let mut buf = t.take_buffer(crate::snapshot::stream::STREAM_HEADER_BYTES + self.config.chunk_bytes);
                let piece = out.next_piece(&mut buf, |body, offset, dst| durable.read_snapshot_body(body, offset, dst));
                let (magic, n) = match piece {
                    Piece::Chunk(n) => (RAFT_CHUNK_MAGIC, n),
                    Piece::Body(n) => (RAFT_STREAM_MAGIC, n),
                    Piece::Message => (RAFT_MAGIC, 0),
                    Piece::Gone => {
                        t.recycle(buf);
                        failed = true;
                        break;
                    }
                };
                match t.send(out.conn, &magic, buf) {
                    Ok(()) => {
                        out.went(&piece);
                        self.counters.chunk_bytes_sent += n as u64;
                        budget = budget.saturating_sub(n);
                        sent_any = true;
                    }
                    Err(transport::OpError::WindowFull(_)) => break,
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            if failed || out.done() {
                let out = self.outbox.remove(&to).expect("listed");
                if out.snapshot {
                    let status = if failed { SnapshotStatus::Failure } else { SnapshotStatus::Finish };
                    self.raw.report_snapshot(to, status);
                }
                if failed {
                    self.counters.unsent += 1;
                    self.raw.report_unreachable(to);
                } else {
                    self.counters.sent += 1;
                }
            }
        }
        sent_any
    }

    /// One chunk of a large Raft message arrived on `conn`: joined to the
    /// message it continues (`chunks`); the whole message is stepped.
    fn on_chunk(&mut self, t: &mut T, conn: ConnId, chunk: &[u8]) {
        match self.inbox.on_chunk(conn, chunk) {
            Received::Partial => self.counters.chunk_bytes_received += chunk.len().saturating_sub(CHUNK_HEADER_BYTES) as u64,
            Received::Ignored => self.counters.chunks_ignored += 1,
            Received::Refused(_) => self.counters.malformed += 1,
            Received::Whole(whole) => {
                self.counters.chunk_bytes_received += chunk.len().saturating_sub(CHUNK_HEADER_BYTES) as u64;
                self.on_message(t, conn, &Payload::Owned(whole));
            }
        }
    }

    /// Applies committed entries in order; their answers wait in
    /// `batch` until [`Replica::finish_batch`].
    fn apply_entries(&mut self, t: &mut T, entries: Vec<Entry>) -> Result<(), raft::Error> {
        if self.snapshot_job.is_some() {
            // The machine's state must hold still until its snapshot is whole.
            self.counters.entries_held += entries.len() as u64;
            self.held.extend(entries);
            return Ok(());
        }
        for e in entries {
            if self.halted.is_some() {
                break;
            }
            assert_eq!(e.index, self.applied + 1, "entries apply in order");
            self.applied = e.index;
            if self.config.trace_applied {
                self.applied_trace.push((e.index, e.term));
            }
            match e.get_entry_type() {
                EntryType::EntryNormal if e.data.is_empty() && e.context.is_empty() => {} // a new leader's empty entry
                EntryType::EntryNormal if e.context.first() == Some(&ENTRY_FORWARDED) => self.apply_forwarded(&e),
                EntryType::EntryNormal => self.apply_normal(&e),
                EntryType::EntryConfChange => {
                    let v1 = ConfChange::parse_from_bytes(&e.data).map_err(raft::Error::CodecError)?;
                    let single = ConfChangeSingle { change_type: v1.change_type, node_id: v1.node_id, ..Default::default() };
                    let cc = ConfChangeV2 { changes: vec![single].into(), ..Default::default() };
                    self.apply_membership(t, &e, &cc)?;
                }
                EntryType::EntryConfChangeV2 => {
                    let cc = ConfChangeV2::parse_from_bytes(&e.data).map_err(raft::Error::CodecError)?;
                    self.apply_membership(t, &e, &cc)?;
                }
            }
            self.fail_older_forwarded(e.term);
        }
        Ok(())
    }

    /// Applies a follower's proposal once ([`crate::forward`]); on its
    /// origin, its ticket is done with the machine's output, or failed if
    /// this copy shows it can never apply.
    fn apply_forwarded(&mut self, e: &Entry) {
        use crate::forward::{Decision, ForwardContext};
        if let Some((waiter, _, _)) = self.writes.remove(&e.index) {
            // This leader's own proposal lost its index to another term's entry.
            self.batch.push((waiter, Pending::Superseded));
        }
        let Some(ctx) = ForwardContext::decode(&e.context) else {
            // Skipped the same way on every member.
            self.counters.malformed += 1;
            return;
        };
        let decision = self.own.forwarded.decide(e.index, e.term, &ctx, !self.config.faults.forward_without_dedup);
        // Its origin waits to learn the commit index, which the leader
        // otherwise sends only with its next append or heartbeat
        // (`skip_bcast_commit`): send it now.
        self.bcast_commit |= self.raw.raft.state == StateRole::Leader && ctx.origin != self.config.id;
        let fresh = e.index > self.machine_floor;
        let output = (decision == Decision::Apply && fresh).then(|| self.machine.apply(e.index, &e.data));
        self.machine_dirty |= output.is_some();
        if (ctx.origin, ctx.nonce) != (self.config.id, self.nonce) {
            return;
        }
        let never = match decision {
            Decision::Apply => false,
            // Applied before this incarnation applied the log that far
            // (caught up from a snapshot), or below the floor: unknown,
            // left to time out.
            Decision::Seen => false,
            // No copy can apply after this one (terms never decrease);
            // one applied before was seen, here or in a snapshot.
            Decision::OtherTerm => e.term > ctx.term,
        };
        if decision == Decision::Apply {
            if let Some((k, _, _)) = self.forwarded.remove(&ctx.seq) {
                let output = output.expect("this incarnation's proposals are past the machine's floor");
                self.batch.push((Waiter::Ticket(k), Pending::Output(e.index, output)));
            }
        } else if never {
            if let Some((k, _, _)) = self.forwarded.remove(&ctx.seq) {
                self.done.push((k, Done::Failed(Failure::NotProposed)));
            }
        }
    }

    /// After installing a snapshot: a forwarded proposal it may hold
    /// fails with its outcome unknown (its output is not in a snapshot).
    fn forwarded_after_snapshot(&mut self) {
        let (id, nonce) = (self.config.id, self.nonce);
        let table = &self.own.forwarded;
        let unknown: Vec<u64> = self.forwarded.iter().filter(|(&seq, &(_, term, _))| table.may_have_applied(id, nonce, seq, term)).map(|(&seq, _)| seq).collect();
        for seq in unknown {
            let (k, _, _) = self.forwarded.remove(&seq).expect("listed");
            self.done.push((k, Done::Failed(Failure::LeadershipLost)));
        }
    }

    /// Forwarded proposals of a term below `term` can no longer apply once
    /// an entry of `term` is applied (log terms never decrease, and a
    /// proposal applies only in the term it was proposed in).
    fn fail_older_forwarded(&mut self, term: u64) {
        while let Some(first) = self.forwarded.first_entry() {
            if first.get().1 >= term {
                break;
            }
            let (k, _, _) = first.remove();
            self.done.push((k, Done::Failed(Failure::NotProposed)));
        }
    }

    /// Applies a normal entry by its kind: the machine's data, or an SMR1
    /// write (an empty context is one, as every entry was before kinds).
    /// Data entries the machine applied before the replica started are
    /// not handed to it again.
    fn apply_normal(&mut self, e: &Entry) {
        let waiting = self.writes.remove(&e.index);
        let fresh = e.index > self.machine_floor;
        let outcome = match e.context.as_ref() {
            [ENTRY_MACHINE] => fresh.then(|| Pending::Output(e.index, self.machine.apply(e.index, &e.data))),
            [] | [ENTRY_SMR1_WRITE] => match &self.smr1 {
                Some(ops) => fresh.then(|| Pending::Smr1((ops.apply_write)(&mut self.machine, e.index, &e.data))),
                None => {
                    // Only a leader serving SMR1 proposes these; every
                    // replica skips the bytes the same way.
                    self.counters.malformed += 1;
                    Some(Pending::Smr1(Response { status: Status::BadRequest, leader: 0, index: e.index, value: Vec::new() }))
                }
            },
            other => {
                let id = self.config.id;
                self.halted = Some(format!("replica {id}: the log entry at index {} has a kind this build does not know (context {other:?}); was it written by a newer pmwire?", e.index));
                return;
            }
        };
        self.machine_dirty |= fresh;
        if let Some((waiter, term, _)) = waiting {
            let pending = if term != e.term { Pending::Superseded } else { outcome.expect("a proposal waits only past the machine's floor") };
            self.batch.push((waiter, pending));
        }
    }

    /// The end of a batch of applies: the machine persists what it
    /// applied, then the batch's answers are released. A machine that
    /// cannot persist halts the replica; its batch fails unanswered.
    fn finish_batch(&mut self, t: &mut T) {
        if std::mem::take(&mut self.machine_dirty) && self.halted.is_none() {
            if self.config.faults.lazy_machine_persist {
                self.lazy_skipped = !self.lazy_skipped;
                if self.lazy_skipped {
                    self.machine_dirty = true;
                }
            }
            if self.machine_dirty {
                // planted: left for the next batch
            } else if let Err(e) = self.machine.persist_applied() {
                self.halted = Some(format!("replica {}: {e} (applied to index {}); it cannot go on with a machine that lost what it applied", self.config.id, self.applied));
            }
        }
        let batch = std::mem::take(&mut self.batch);
        for (waiter, pending) in batch {
            if self.halted.is_some() {
                self.fail_write(t, waiter, Failure::Halted);
                continue;
            }
            self.release(t, waiter, pending);
        }
    }

    fn release(&mut self, t: &mut T, waiter: Waiter, pending: Pending<M::Output>) {
        match (waiter, pending) {
            (waiter, Pending::Superseded) => self.fail_write(t, waiter, Failure::LeadershipLost),
            (Waiter::Client(id), Pending::Smr1(r)) => self.answer(t, id, r.status, r.index, r.value),
            (Waiter::Ticket(k), Pending::Output(index, output)) => self.done.push((k, Done::Applied { index, output })),
            (Waiter::Client(_), Pending::Output(..)) | (Waiter::Ticket(_), Pending::Smr1(_)) => unreachable!("an entry of one term is of the kind it was proposed as"),
            (Waiter::Forwarded(_), _) => unreachable!("forwarded proposals wait by their context, not their index"),
        }
    }

    fn store_mut(&mut self) -> &mut D {
        &mut self.raw.mut_store().durable
    }

    /// Serves the reads whose read index has been applied.
    fn serve_reads(&mut self, t: &mut T) {
        let applied = self.applied;
        let ready = std::mem::take(&mut self.ready_reads);
        for (index, waiter, since) in ready {
            if index > applied {
                self.ready_reads.push((index, waiter, since));
                continue;
            }
            match waiter {
                ReadWaiter::Client(id, key) => {
                    let ops = self.smr1.as_ref().expect("only a replica serving SMR1 takes a GET");
                    let r = (ops.read)(&self.machine, &key);
                    self.answer(t, id, r.status, index, r.value);
                }
                ReadWaiter::Ticket(k) => self.done.push((k, Done::Readable { index })),
            }
        }
    }

    /// On losing leadership: proposals not yet applied may or may not be
    /// committed (an SMR1 client retries with the same sequence number);
    /// reads not yet served are refused.
    fn step_down(&mut self, t: &mut T) {
        for id in std::mem::take(&mut self.transfers) {
            self.answer(t, id, Status::Ok, 0, Vec::new());
        }
        self.fail_all(t, Failure::LeadershipLost);
    }

    /// Fails every proposal and read waiting.
    fn fail_all(&mut self, t: &mut T, why: Failure) {
        for (_, (waiter, _, _)) in std::mem::take(&mut self.writes) {
            self.fail_write(t, waiter, why);
        }
        for (_, (waiter, _, _)) in std::mem::take(&mut self.reads) {
            self.fail_read(t, waiter, why);
        }
        for (_, waiter, _) in std::mem::take(&mut self.ready_reads) {
            self.fail_read(t, waiter, why);
        }
        if why == Failure::Halted {
            // A leader stepping down keeps its forwarded proposals: they
            // are done by their context wherever they are applied.
            for (_, (k, _, _)) in std::mem::take(&mut self.forwarded) {
                self.done.push((k, Done::Failed(why)));
            }
        }
    }

    /// A proposal failed: an SMR1 client is told to retry (its session
    /// applies the write once), or sent on if this replica halted.
    fn fail_write(&mut self, t: &mut T, waiter: Waiter, why: Failure) {
        match waiter {
            Waiter::Client(id) if why == Failure::Halted => self.answer(t, id, Status::NotLeader, 0, Vec::new()),
            Waiter::Client(id) => self.answer(t, id, Status::Retry, 0, Vec::new()),
            Waiter::Ticket(k) => self.done.push((k, Done::Failed(why))),
            Waiter::Forwarded(seq) => {
                if let Some((k, _, _)) = self.forwarded.remove(&seq) {
                    self.done.push((k, Done::Failed(why)));
                }
            }
        }
    }

    /// A read failed: an SMR1 client is sent on (NOT_LEADER) or, if it
    /// timed out, told to retry.
    fn fail_read(&mut self, t: &mut T, waiter: ReadWaiter, why: Failure) {
        match waiter {
            ReadWaiter::Client(id, _) if why == Failure::NoQuorum => self.answer(t, id, Status::Retry, 0, Vec::new()),
            ReadWaiter::Client(id, _) => self.answer(t, id, Status::NotLeader, 0, Vec::new()),
            ReadWaiter::Ticket(k) => self.done.push((k, Done::Failed(why))),
        }
    }

    /// Fails the proposals and reads that waited longer than
    /// [`ReplicaConfig::pending_timeout_ticks`]. Both maps are in the
    /// order they were asked in (log index, read context), so the expired
    /// ones are at the front.
    fn expire_pending(&mut self, t: &mut T) {
        if self.snapshot_job.is_some() {
            // Committed writes wait for the snapshot being taken, not for
            // a quorum; the wait ends with it.
            return;
        }
        let bound = self.config.pending_timeout_ticks();
        let now = self.ticks;
        let expired = |since: u64| now >= since.saturating_add(bound);
        while let Some(first) = self.writes.first_entry() {
            if !expired(first.get().2) {
                break;
            }
            let (waiter, _, _) = first.remove();
            self.fail_write(t, waiter, Failure::NoQuorum);
        }
        while let Some(first) = self.reads.first_entry() {
            if !expired(first.get().2) {
                break;
            }
            let (waiter, _, _) = first.remove();
            self.fail_read(t, waiter, Failure::NoQuorum);
        }
        // Outcome unknown: a copy may still be in flight to a leader.
        while let Some(first) = self.forwarded.first_entry() {
            if !expired(first.get().2) {
                break;
            }
            let (k, _, _) = first.remove();
            self.done.push((k, Done::Failed(Failure::NoQuorum)));
        }
        if self.ready_reads.iter().any(|r| expired(r.2)) {
            for (index, waiter, since) in std::mem::take(&mut self.ready_reads) {
                if expired(since) {
                    self.fail_read(t, waiter, Failure::NoQuorum);
                } else {
                    self.ready_reads.push((index, waiter, since));
                }
            }
        }
    }

    /// Installs a snapshot from the leader: checked, then into the store,
    /// then the machine and the replica's own part from its data (in that
    /// order, so that a persistent machine is never ahead of the log: a
    /// crash in between restores the machine from the store at start).
    fn install_snapshot(&mut self, snap: &raft::eraftpb::Snapshot) -> Result<(), raft::Error> {
        let index = snap.get_metadata().index;
        let durable = &mut self.raw.mut_store().durable;
        let refs = &mut MachineRefs(&mut self.machine);
        let streamed = crate::snapshot::stream::decode_descriptor(&snap.data);
        match &streamed {
            // Streamed: the staging area becomes the snapshot in place.
            Some(body) => crate::logrefs::install_with(durable, refs, |d| d.install_staged(snap.get_metadata(), body)),
            None => crate::logrefs::install_snapshot(durable, snap.get_metadata(), &snap.data, refs),
        }
        .map_err(store_error)?;
        // A streamed one is restored from the store's copy, in place where
        // the store is mapped memory (no second copy of a large keyspace).
        let data = match streamed {
            Some(_) => self.raw.store().durable.snapshot_data(),
            None => std::borrow::Cow::Borrowed(&snap.data[..]),
        };
        let decoded = snapshot::decode(&data).map_err(|e| raft::Error::ConfigInvalid(format!("snapshot at index {index}: {e}")))?;
        // A snapshot being taken is of the state this one replaces.
        self.snapshot_job = None;
        self.raw.store().withhold_start.set(false);
        self.held.retain(|e| e.index > index);
        snapshot::restore_machine(&mut self.machine, index, &decoded).map_err(raft::Error::ConfigInvalid)?;
        self.own = decoded.replica;
        self.forwarded_after_snapshot();
        self.applied = index;
        self.snapshot_index = index;
        self.machine_floor = self.machine_floor.max(index);
        self.sync_peers();
        Ok(())
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
            self.install_snapshot(&snap)?;
        }
        let persisted = ready.take_persisted_messages();
        if self.config.faults.ack_before_persist {
            self.send_all(t, persisted.clone());
        }
        let timed = Timed::start(Step::Append);
        let durable = &mut self.raw.mut_store().durable;
        crate::logrefs::append(durable, ready.entries(), &mut MachineRefs(&mut self.machine)).map_err(store_error)?;
        if let Some(hs) = ready.hs() {
            let mut hs = hs.clone();
            if self.config.faults.forget_vote {
                hs.vote = self.durable().hard_state().vote;
            }
            self.store_mut().set_hard_state(&hs).map_err(store_error)?;
        }
        timed.done(&mut self.liveness.counters);
        self.send_all(t, late);
        if !self.config.faults.ack_before_persist {
            self.send_all(t, persisted);
        }
        // Applied after the new entries are persisted and acknowledged: a
        // follower's acknowledgement (on the write path) no longer waits for
        // the previous entry's apply and the machine's persist, which the
        // commit it learns with each append hands it.
        let timed = Timed::start(Step::Apply);
        self.apply_entries(t, ready.take_committed_entries())?;
        self.finish_batch(t);
        timed.done(&mut self.liveness.counters);
        for rs in ready.take_read_states() {
            let Some(ctx) = self.own_read_ctx(&rs.request_ctx) else { continue };
            if let Some((waiter, _, since)) = self.reads.remove(&ctx) {
                self.ready_reads.push((rs.index, waiter, since));
            }
        }
        // raft-rs's `advance` would count every entry it delivered before
        // as applied; entries held for a snapshot being taken are not.
        let mut light = self.raw.advance_append(ready);
        if let Some(commit) = light.commit_index() {
            self.store_mut().note_commit(commit);
        }
        self.send_all(t, light.take_messages());
        let timed = Timed::start(Step::Apply);
        self.apply_entries(t, light.take_committed_entries())?;
        self.finish_batch(t);
        timed.done(&mut self.liveness.counters);
        self.raw.advance_apply_to(self.applied);
        if std::mem::take(&mut self.bcast_commit) {
            self.raw.raft.bcast_append();
        }
        self.serve_reads(t);
        self.maybe_compact()?;
        Ok(true)
    }

    /// Takes a snapshot and compacts once due (`compaction`: staggered
    /// per member, less often on the leader), or the log is more than half full (not while entries the machine already holds are replayed: its
    /// state is then past the applied index).
    fn maybe_compact(&mut self) -> Result<(), raft::Error> {
        if self.machine.applied() > self.applied || self.halted.is_some() || self.snapshot_job.is_some() {
            return Ok(());
        }
        // raft-rs asked to send the stored snapshot, a deferred one: encode
        // a whole one now (at this index, even if it is the stored one's).
        let wanted = self.raw.store().snapshot_wanted.take();
        let forced = std::mem::take(&mut self.compact_now) && self.applied > self.snapshot_index;
        let filling = self.applied > self.snapshot_index && self.durable().log_space().is_some_and(|(free, capacity)| free < capacity / 2);
        // The pool buffers the log's entries name are wanted back: compact
        // now, with no tail, by a deferred record only (so only a machine
        // that keeps its state; it waits for the machine's next entry as a
        // routine compaction does).
        let for_room = !filling && self.applied > self.snapshot_index && self.machine.keeps_state() && self.machine.log_room_wanted();
        if !wanted && !forced && !filling && !for_room && !self.compaction_due() {
            return Ok(());
        }
        // A deferred record stands for the machine's own state, so it may
        // name no index past what the machine applied: when the last
        // entries were not the machine's (a new leader's empty entry, a
        // membership change), a crash after compacting would leave a
        // machine short of its snapshot (`start_state` refuses it; the
        // simulation found it). Wait for the machine's next entry, or, if
        // the log is filling, take a whole snapshot.
        let behind = self.machine.keeps_state() && self.machine.applied() < self.applied;
        if behind && !wanted && !forced && !filling {
            return Ok(());
        }
        // A machine that keeps its state durably (persisted by the batch's
        // `finish_batch` just before: nothing is dirty) needs no copy of it
        // to compact: the record holds the replica's part only. A new
        // member (`compact_now`) or raft-rs (`wanted`) gets a whole one.
        let deferred = self.machine.keeps_state() && !wanted && !forced && !behind;
        // A deferred record may stand below the machine's applied index (a
        // restart replays the entries after it, which the machine skips: as
        // after a crash between two compactions), so a routine one leaves a
        // tail of entries in the log: a follower a little behind is caught
        // up from the log, not sent the whole keyspace as a snapshot (as
        // etcd keeps entries behind its snapshots). Not past a membership
        // change (the record's membership is the current one), nor when
        // the log is filling. The record's replica part (sessions) is as
        // of the applied index: replaying the tail finds each SMR1 write
        // already in its session, the tail being shorter than the session
        // table (no session it names can have been evicted within it).
        let tail = if deferred && !filling && !for_room { (self.config.snapshot_every / COMPACTION_TAIL_DIVISOR).min(MAX_COMPACTION_TAIL) } else { 0 };
        let at = if self.membership_index > self.applied.saturating_sub(tail) { self.applied } else { self.applied.saturating_sub(tail) };
        if at <= self.snapshot_index {
            return Ok(());
        }
        let mut meta = SnapshotMetadata { index: at, ..Default::default() };
        meta.term = self.durable().term(at).expect("applied entries are held");
        meta.set_conf_state(self.raw.raft.prs().conf().to_conf_state());
        assert!(!self.machine_dirty || self.config.faults.lazy_machine_persist, "compaction follows the batch's persist");
        if deferred {
            let timed = Timed::start(Step::Compact);
            self.store_compaction(&meta, &snapshot::encode(&self.own, &[]))?;
            self.counters.snapshots_deferred += 1;
            timed.done(&mut self.liveness.counters);
            return Ok(());
        }
        assert_eq!(at, self.applied, "a whole snapshot keeps no tail");
        if forced && self.durable().first_index() <= 1 {
            // A replica was added while the log still begins at the
            // cluster's first entry: raft-rs would send it the log from
            // there, without the first membership (in no entry). It must
            // start from this snapshot: appends from the log's start wait
            // until it is stored.
            self.raw.store().withhold_start.set(true);
        }
        // A whole one (for a new member, for raft-rs to send, or for a
        // filling log) is taken in steps, one per turn, and nothing is
        // applied until it is stored: a large keyspace no longer holds the
        // loop past an election timeout.
        let record = snapshot::record_prefix(&self.own);
        let machine_at = record.len();
        self.snapshot_job = Some(SnapshotJob { meta, record: pending::Pending::new(record), machine_at, cursor: None, whole: false, parts: None, next_step: self.now });
        // The first step at once: a small machine is whole in it.
        self.advance_snapshot()?;
        Ok(())
    }

    /// Writes a compaction record at `meta`'s index and drops the log
    /// before it.
    fn store_compaction(&mut self, meta: &SnapshotMetadata, data: &[u8]) -> Result<(), raft::Error> {
        let durable = &mut self.raw.mut_store().durable;
        crate::logrefs::compact(durable, meta, data, &mut MachineRefs(&mut self.machine)).map_err(store_error)?;
        self.compacted(meta.index);
        Ok(())
    }

    /// The log is compacted up to `index`.
    fn compacted(&mut self, index: u64) {
        self.snapshot_index = index;
        self.counters.snapshots += 1;
    }

    /// One step of the snapshot being taken, stored once whole. True if
    /// there was one.
    ///
    /// Each turn takes a step of the machine's part until it is whole (half
    /// a step's bytes when the store compacts in parts), and (a store that
    /// compacts in parts, once the record's length is known) writes up to a
    /// step of the bytes taken and not yet written. A machine that says its
    /// length early ([`StateMachine::snapshot_len`]) is written as its steps
    /// come and never whole in DRAM; any other is whole in DRAM, then
    /// written.
    fn advance_snapshot(&mut self) -> Result<bool, raft::Error> {
        let Some(job) = self.snapshot_job.as_mut().filter(|j| j.next_step <= self.now) else { return Ok(false) };
        job.next_step = self.now + self.config.snapshot_step_every;
        let step = self.config.snapshot_step_bytes.max(1);
        let in_parts = self.raw.store().durable.compacts_in_parts();
        let timed = Timed::start(Step::Compact);
        if !job.whole {
            let budget = if in_parts { step / 2 } else { step };
            job.whole = self.machine.snapshot_step(&mut job.cursor, &mut job.record.bytes, budget);
            if in_parts && job.parts.is_none() {
                let said = self.machine.snapshot_len(&job.cursor);
                let len = said.or_else(|| job.whole.then(|| (job.record.bytes.len() - job.machine_at) as u64));
                if let Some(len) = len {
                    // Nothing is written yet: the prefix is in `record`.
                    snapshot::seal_machine_len(&mut job.record.bytes, job.machine_at, len);
                    job.parts = Some(Parts { end: job.machine_at as u64 + len, written: 0, crc: 0 });
                }
            }
        }
        let stored = if !in_parts {
            let whole = job.whole;
            if whole {
                let job = self.snapshot_job.take().expect("stepped");
                self.store_compaction(&job.meta, &snapshot::finish_record(job.record.bytes, job.machine_at))?;
            }
            whole
        } else if let Some(parts) = job.parts.as_mut() {
            let part = job.record.next(step);
            self.raw.mut_store().durable.compact_part(parts.written, part).map_err(store_error)?;
            parts.crc = crc32c::crc32c_append(parts.crc, part);
            parts.written += part.len() as u64;
            let n = part.len();
            job.record.written(n, !job.whole);
            if job.whole && job.record.is_empty() {
                assert_eq!(parts.written, parts.end, "the machine's part is the length it said");
                let (len, crc) = (parts.written, parts.crc);
                self.finish_parts(len, crc)?;
                true
            } else {
                false
            }
        } else {
            false
        };
        if stored {
            // raft-rs asked for a snapshot while this one was being taken:
            // the stored one is whole now (and the log's start compacted).
            self.raw.store().snapshot_wanted.set(false);
            self.raw.store().withhold_start.set(false);
        }
        timed.done(&mut self.liveness.counters);
        Ok(true)
    }

    /// The snapshot job's record is written in parts up to `len`, whose
    /// checksum is `crc`: the checksum goes last, then the commit. The job
    /// is done.
    fn finish_parts(&mut self, len: u64, crc: u32) -> Result<(), raft::Error> {
        // The record's checksum, its last field.
        self.raw.mut_store().durable.compact_part(len, &crc.to_le_bytes()).map_err(store_error)?;
        let job = self.snapshot_job.take().expect("stepped");
        let durable = &mut self.raw.mut_store().durable;
        crate::logrefs::compact_parts(durable, &job.meta, len + 4, &mut MachineRefs(&mut self.machine)).map_err(store_error)?;
        self.compacted(job.meta.index);
        Ok(())
    }

    /// [`Replica::advance_snapshot`]; once it is stored, the entries that
    /// waited for it are applied. True if there was a snapshot to step.
    fn step_snapshot(&mut self, t: &mut T) -> Result<bool, raft::Error> {
        if !self.advance_snapshot()? {
            return Ok(false);
        }
        self.counters.snapshot_turns += 1;
        if self.snapshot_job.is_none() && !self.held.is_empty() {
            let timed = Timed::start(Step::Apply);
            let held = std::mem::take(&mut self.held);
            self.apply_entries(t, held)?;
            self.finish_batch(t);
            timed.done(&mut self.liveness.counters);
            self.raw.advance_apply_to(self.applied);
            self.serve_reads(t);
        }
        Ok(true)
    }

    /// raft-rs drops a read-index request in some states (a leader that
    /// has not yet committed in its term; a heartbeat round whose answers
    /// were lost is never retried for an older context): ask again for the
    /// reads that have waited two heartbeats. Asking for a context that is
    /// still pending does nothing more than a heartbeat.
    /// On a follower the read is forwarded again (to the leader it now
    /// knows; raft-rs drops it while it knows none).
    fn reask_reads(&mut self) {
        let patience = 2 * self.config.heartbeat_ticks as u64;
        let now = self.ticks;
        let due: Vec<u64> = self.reads.iter().filter(|(_, r)| now >= r.1 + patience).map(|(&ctx, _)| ctx).collect();
        for ctx in due {
            self.reads.get_mut(&ctx).expect("listed").1 = now;
            let bytes = self.read_ctx(ctx);
            self.raw.read_index(bytes);
        }
    }

    fn tick_if_due(&mut self, t: &mut T, now: Duration) -> bool {
        if now < self.next_tick {
            return false;
        }
        self.raw.tick();
        self.ticks += 1;
        if self.raw.raft.state == StateRole::Follower && self.raw.raft.leader_id != 0 {
            self.liveness.election_elapsed(self.raw.raft.election_elapsed);
        }
        self.reask_reads();
        self.expire_pending(t);
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

impl<T: Transport, D: Durable, M: StateMachine> Service<T> for Replica<T, D, M>
where
    T::Addr: PeerAddr,
{
    fn on_event(&mut self, t: &mut T, event: Event, now: Duration) {
        self.now = now;
        if self.halted.is_some() {
            // Nothing more is stepped or applied; a client is sent on.
            match event {
                Event::Message { payload, .. } => t.recycle_payload(payload),
                Event::Request(r) => self.answer(t, r.id, Status::NotLeader, 0, Vec::new()),
                _ => {}
            }
            return;
        }
        match event {
            Event::Message { header, payload, conn } => {
                if header == RAFT_MAGIC {
                    self.on_message(t, conn, &payload);
                } else if header == RAFT_CHUNK_MAGIC {
                    self.on_chunk(t, conn, &payload);
                } else if header == RAFT_STREAM_MAGIC {
                    self.on_stream_chunk(t, conn, &payload);
                } else if header == RAFT_RESUME_MAGIC {
                    self.on_resume(&payload);
                } else if header == NOT_MEMBER_MAGIC {
                    self.on_not_member(&payload);
                } else {
                    self.counters.malformed += 1;
                }
                t.recycle_payload(payload);
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
                self.inbox.forget(conn);
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
        if self.halted.is_some() {
            // Whoever waits learns it (once: nothing waits afterwards).
            self.fail_all(t, Failure::Halted);
            return false;
        }
        self.liveness.turn(now);
        let ticked = self.tick_if_due(t, now);
        let dialled = self.redial(t);
        let drained = !self.outbox.is_empty() && self.drain_outbox(t);
        let drained = self.drain_held(t) || drained;
        self.propose_batch(t);
        // A snapshot step is not reported as work to turn again for at
        // once: the embedding loop comes back at `next_deadline`, after it
        // has served its sockets (a member's loop runs up to a fixed number
        // of turns back to back while they report work).
        self.step_snapshot(t).unwrap_or_else(|e| panic!("replica {}: storage failed: {e}", self.config.id));
        let readied = self.handle_ready(t).unwrap_or_else(|e| panic!("replica {}: storage failed: {e}", self.config.id));
        // Everything stepped so far is durable or refused (the log seam).
        self.machine.log_settled();
        let leader = self.raw.raft.state == StateRole::Leader;
        if self.was_leader && !leader {
            self.step_down(t);
        }
        if leader && self.raw.raft.lead_transferee.is_none() && !self.transfers.is_empty() {
            // raft-rs gave up after an election timeout.
            let refused = Refused::new(Refusal::TransferFailed, "the target did not take over within an election timeout (is it up and caught up?)");
            for id in std::mem::take(&mut self.transfers) {
                self.answer(t, id, Status::Refused, 0, refused.to_bytes());
            }
        }
        self.was_leader = leader;
        self.liveness.campaigning(matches!(self.raw.raft.state, StateRole::Candidate | StateRole::PreCandidate));
        self.rerandomize();
        ticked || readied || drained || dialled
    }

    fn next_deadline(&self) -> Option<Duration> {
        // A snapshot being taken goes on at the next turn, without a wait.
        Some(self.snapshot_job.as_ref().map_or(self.next_tick, |j| j.next_step.min(self.next_tick)))
    }

    fn halted(&self) -> Option<&str> {
        Replica::halted(self)
    }
}

/// Why a learner with progress `pr` is not ready to vote when the leader
/// has committed `commit`, if it is not. A learner that caught up by a
/// snapshot and has had no entry since stays in Probe with the whole log
/// (raft-rs moves it to Replicate only on the next entry's answer); it is
/// ready if it answered within the last election timeout (check_quorum
/// keeps `recent_active` true only then).
fn learner_lag(id: u64, pr: &raft::Progress, commit: u64, promote_lag: u64) -> Option<String> {
    let live = match pr.state {
        ProgressState::Replicate => true,
        ProgressState::Probe => pr.recent_active && pr.matched >= commit,
        ProgressState::Snapshot => false,
    };
    if live && pr.matched + promote_lag >= commit {
        return None;
    }
    Some(format!("replica {id} is catching up: it holds the log to index {} of {commit} ({:?}); is it running?", pr.matched, pr.state))
}

#[cfg(test)]
mod learner_tests {
    use super::*;

    fn progress(state: ProgressState, matched: u64, recent_active: bool) -> raft::Progress {
        let mut pr = raft::Progress::new(matched + 1, 256);
        pr.matched = matched;
        pr.state = state;
        pr.recent_active = recent_active;
        pr
    }

    #[test]
    fn a_learner_is_ready_when_replicating_near_the_commit_or_idle_in_probe_with_everything() {
        assert_eq!(learner_lag(4, &progress(ProgressState::Replicate, 90, true), 100, 16), None);
        assert!(learner_lag(4, &progress(ProgressState::Replicate, 50, true), 100, 16).is_some(), "too far behind");
        // Caught up by a snapshot of the last entry, nothing written since.
        assert_eq!(learner_lag(4, &progress(ProgressState::Probe, 196, true), 196, 16), None);
        assert!(learner_lag(4, &progress(ProgressState::Probe, 196, false), 196, 16).is_some(), "silent for an election timeout");
        assert!(learner_lag(4, &progress(ProgressState::Probe, 190, true), 196, 16).is_some(), "probing for entries it lacks");
        assert!(learner_lag(4, &progress(ProgressState::Snapshot, 196, true), 196, 16).is_some(), "a snapshot in flight");
    }
}
