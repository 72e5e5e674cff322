//! [`RedisMachine`] in the deterministic simulation (`pmwire_smr::sim`,
//! `pmwire check smr --machine redis`; feature `sim`, test-only).
//!
//! [`SimRedis`] carries Redis entries ([`crate::entry`], made by a
//! [`Proposer`] stamped with the simulation's virtual clock) inside SMR1
//! writes: the request's value is the entry, its key the key the history
//! files it under, and a session (client, seq) makes a retried entry apply
//! once, as [`pmwire_smr::kvmap::KvMap`]'s do. A GET is served either
//! through the log or by the read-only path ([`RedisMachine::read`], after
//! ReadIndex).
//!
//! Clients draw commands of every family: strings and counters on the
//! checked keys `k0..`, whose per-key histories [`lincheck::redis`] checks
//! (SET, GET, INCR, DEL, APPEND); hashes, lists (blocking pops included),
//! sets, sorted sets, TTLs that run out as virtual time moves, PEXPIRE,
//! RENAME, MULTI/EXEC transactions, the random commands (SPOP,
//! SRANDMEMBER, HRANDFIELD, ZRANDMEMBER, RANDOMKEY, SCAN) and sweeps, on
//! other keys (drawn by [`crate::gen::Commands`], as the integration
//! tests' entry stream is), with tiny chunk limits so collections are chunked. Those
//! are checked by their answer (status OK, a reply) and by convergence:
//! after healing every member holds the same snapshot, byte for byte.
//!
//! WATCH: a transaction may carry watch records a client draws itself, as
//! a serving member would have recorded them (a key of any family, an
//! applied index up to about the log's end, absent or live with or without
//! a deadline): what EXEC decides from them must be the same on every
//! member, across crash images (the write index comes back from the
//! engine's journal and dump) and restores from snapshots, which
//! convergence checks. Which records a real member would record is
//! `RedisMachine::watch`'s part, tested against single-node Redis in the
//! integration tests.
//!
//! Streamed writes ([`crate::extent::ExtKind::Piece`]): in one block of
//! `BLOCK_WRITES` writes in four, a client streams a SET or APPEND of a
//! checked key: 2 to 4 piece entries of 8 to 16 bytes, each its own
//! request (retried, lost, cut off by partitions, crashes and leader
//! changes like any), then the command naming the stream
//! ([`crate::extent::Arg::Streamed`]). Each request is drawn apart, so a
//! block's plan (`streamed`) is a function of the session and the block
//! alone (which writes stream is the same in every run; the key, the
//! command, the timing and the faults are the seed's). A client retries a
//! piece until it is applied, so its command finds every piece, except
//! where the plan leaves one out (the command must be refused whole, as
//! when a change of leader cut a stream) or names the stream as begun
//! [`ABANDONED_MS`] before the run (a sweep between the pieces and the
//! command may collect some of them). A refusal applied nothing: the
//! history records it ([`Answer::Refused`]) and drops it from its key's.
//!
//! Not simulated here: the leader's own sweep proposals (the clients send
//! sweep entries instead), and the client-stamped time is the client's
//! clock rather than the leader's (the machine keeps time monotonic either
//! way).
//!
//! Keyspaces ([`SimKeyspace`]): on [`MemKeyspace`] the machine is volatile,
//! and a crashed member starts empty and is rebuilt from a snapshot and the
//! log. On a persistent one (`pmwire_kv_server::sim::PmemKeyspace`: the
//! engine on a traced medium) a crash, between turns or inside any of the
//! machine's durable writes, leaves an image the hardware could leave, and
//! the member reopens the machine from it: its applied index, committed
//! with its writes and with the SMR1 sessions (kept in the internal entry
//! [`SESSIONS_KEY`], written before each commit), must be a state the
//! machine passed through, so the history stays linearizable (a write
//! applied twice, or an applied index ahead of its writes, is not) and the
//! members converge.
//!
//! Snapshot: `SRD1` | machine snapshot length u64 | machine snapshot
//! ([`crate::snapshot`]) | session count u64 | sessions
//! ([`Sessions::encode`]) | crc32c u32 of everything before.

use std::borrow::Cow;
use std::cell::RefCell;

use lincheck::redis::{Input, Output, RedisOp};
use pmwire_keyspace::chunked::ChunkConfig;
use pmwire_keyspace::exec::{Server, ServerConfig};
use pmwire_keyspace::store::MemKeyspace;
use pmwire_resp::reply::{Protocol, ReplySink};
use pmwire_resp::request::{Limits, Parsed};
use pmwire_smr::command::{Op, Request, Response, Status};
use pmwire_smr::session::{Reader, Sessions};
use pmwire_smr::sim::{HistOp, SimMachine};
use pmwire_smr::smr1::Smr1Machine;
use pmwire_smr::state::{PersistError, RestoreError, SnapshotCursor, StateMachine};
use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::entry::{Entry, Watched, WatchedState};
use crate::extent::{is_extent_form, Arg, ExtEntry, PieceHead, StreamId};
use crate::gen::Commands;
use crate::machine::ext::ABANDONED_MS;
use crate::{prf, MachineKeyspace, Proposer, RedisMachine};

const SNAPSHOT_MAGIC: &[u8; 4] = b"SRD1";
/// Virtual time 0 as Redis time (ms since the Unix epoch).
const EPOCH_MS: u64 = 1_700_000_000_000;
/// The key of an entry the history does not record.
const UNCHECKED: &[u8] = b"~";

/// The internal entry of the SMR1 sessions on a persistent keyspace
/// (count u64 LE, then [`Sessions::encode`]).
pub const SESSIONS_KEY: &[u8] = &[0x11, b'S'];

/// A keyspace the simulated machine runs on, and what a crash leaves of it.
pub trait SimKeyspace: MachineKeyspace + Sized {
    /// A new, empty keyspace.
    fn fresh() -> Self;
    /// What a crash now leaves, reopened: a new one for a volatile
    /// keyspace; for a persistent one, an image its medium could hold
    /// drawn with `rng`. Err: the image does not open (a finding).
    fn crash(self, rng: &mut Xoshiro256PlusPlus) -> Result<Self, String>;
    /// Crash inside the `writes`-th durable write from now (persistent only).
    fn arm_crash(&mut self, _writes: u32) {}
    /// No armed crash.
    fn disarm_crash(&mut self) {}
}

impl SimKeyspace for MemKeyspace {
    fn fresh() -> Self {
        MemKeyspace::new()
    }

    fn crash(self, _rng: &mut Xoshiro256PlusPlus) -> Result<Self, String> {
        Ok(MemKeyspace::new())
    }
}

/// [`RedisMachine`] with SMR1 sessions on keyspace `K` (volatile by
/// default); with `LOCAL_RANDOM`, every member draws its own randomness
/// (the canary [`RedisMachine::plant_local_random`], which a seed must
/// catch).
pub struct SimRedis<const LOCAL_RANDOM: bool = false, K: SimKeyspace = MemKeyspace> {
    machine: RefCell<RedisMachine<K>>,
    sessions: Sessions,
    /// Sessions changed since the last commit (persistent keyspaces).
    sessions_dirty: bool,
}

/// The configuration every member runs: tiny chunk limits.
fn config() -> ServerConfig {
    ServerConfig { collections: ChunkConfig::tiny(), ..ServerConfig::default() }
}

impl<const L: bool, K: SimKeyspace> Default for SimRedis<L, K> {
    fn default() -> Self {
        SimRedis::over(K::fresh()).expect("a fresh keyspace opens")
    }
}

impl<const L: bool, K: SimKeyspace> SimRedis<L, K> {
    /// The machine over `ks` as it is (a persistent one's applied index
    /// and sessions read back).
    fn over(ks: K) -> Result<Self, String> {
        let mut machine = RedisMachine::open(ks, config()).map_err(|e| format!("the machine does not open: {e}"))?;
        if L {
            machine.plant_local_random();
        }
        let sessions = read_sessions(machine.keyspace())?;
        Ok(SimRedis { machine: RefCell::new(machine), sessions, sessions_dirty: false })
    }

    /// Stages the sessions with the machine's next commit.
    fn stage_sessions(&mut self) -> Result<(), PersistError> {
        let ks = self.machine.get_mut().keyspace();
        if !std::mem::take(&mut self.sessions_dirty) || !ks.is_persistent() {
            return Ok(());
        }
        let mut bytes = (self.sessions.len() as u64).to_le_bytes().to_vec();
        self.sessions.encode(&mut bytes);
        ks.internal_put(SESSIONS_KEY, &bytes).map_err(|e| PersistError(format!("sessions not staged: {e}")))
    }
}

/// The sessions a persistent keyspace holds (none in a volatile one).
fn read_sessions<K: SimKeyspace>(ks: &mut K) -> Result<Sessions, String> {
    if !ks.is_persistent() {
        return Ok(Sessions::default());
    }
    let Some(handle) = ks.internal_get(SESSIONS_KEY) else { return Ok(Sessions::default()) };
    let mut bytes = Vec::new();
    ks.read(&handle, &mut bytes);
    let mut r = Reader::new(&bytes, 0);
    let count = r.u64().map_err(|e| format!("sessions: {e}"))?;
    let sessions = Sessions::decode(&mut r, count).map_err(|e| format!("sessions: {e}"))?;
    if !r.done() {
        return Err("sessions: trailing bytes".into());
    }
    Ok(sessions)
}

fn answer(status: Status, index: u64, value: Vec<u8>) -> Response {
    Response { status, leader: 0, index, value }
}

/// Where [`SimRedis`]'s snapshot taken in steps stands: its start in the
/// output (until its length is known), the inner machine's cursor and,
/// once the inner machine has said its length, the sessions' encoding and
/// the checksum of everything emitted so far: from then on each step's
/// bytes may leave the output ([`StateMachine::snapshot_len`]), so the
/// simulation writes its snapshots as a member streams them.
struct SimCursor {
    start: usize,
    inner: SnapshotCursor,
    said: Option<Said>,
}

/// A [`SimCursor`]'s snapshot once its length is known.
struct Said {
    inner_len: u64,
    sessions: Vec<u8>,
    crc: u32,
}

impl<const L: bool, K: SimKeyspace> StateMachine for SimRedis<L, K> {
    type Output = Response;

    fn apply(&mut self, index: u64, data: &[u8]) -> Response {
        let machine = self.machine.get_mut();
        let req = match Request::decode(data) {
            Ok(req) if req.op.writes() && req.client != 0 => req,
            _ => {
                machine.apply(index, &[]);
                return answer(Status::BadRequest, index, Vec::new());
            }
        };
        if let Some(kept) = self.sessions.check(req.client, req.seq, index) {
            // A retry: the machine's index moves on, nothing runs.
            machine.apply(index, &[]);
            return kept;
        }
        let reply = machine.apply(index, &req.value).reply;
        self.sessions.remember(req.client, req.seq, index, Status::Ok, reply.clone());
        self.sessions_dirty = true;
        answer(Status::Ok, index, reply)
    }

    fn persist_applied(&mut self) -> Result<(), PersistError> {
        self.stage_sessions()?;
        self.machine.get_mut().persist_applied()
    }

    fn applied(&self) -> u64 {
        self.machine.borrow().applied()
    }

    fn keeps_state(&self) -> bool {
        self.machine.borrow().keeps_state()
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut cursor = None;
        while !self.snapshot_step(&mut cursor, &mut out, usize::MAX) {}
        out
    }

    /// The inner machine's steps, so the simulation takes Redis snapshots
    /// over several turns as a member does.
    fn snapshot_step(&self, cursor: &mut SnapshotCursor, out: &mut Vec<u8>, budget: usize) -> bool {
        let c = cursor.get_or_insert_with(|| {
            let start = out.len();
            out.extend_from_slice(SNAPSHOT_MAGIC);
            out.extend_from_slice(&[0; 8]);
            Box::new(SimCursor { start, inner: None, said: None })
        });
        let c = c.downcast_mut::<SimCursor>().expect("a cursor this machine made");
        let before = out.len();
        let machine = self.machine.borrow();
        let whole = machine.snapshot_step(&mut c.inner, out, budget);
        match c.said.as_mut() {
            Some(said) => said.crc = crc32c::crc32c_append(said.crc, &out[before..]),
            None => {
                let len_at = c.start + SNAPSHOT_MAGIC.len();
                let inner_len = machine.snapshot_len(&c.inner).or_else(|| whole.then(|| (out.len() - len_at - 8) as u64));
                if let Some(inner_len) = inner_len {
                    // Nothing has left the output yet: the header is there.
                    out[len_at..len_at + 8].copy_from_slice(&inner_len.to_le_bytes());
                    let mut sessions = (self.sessions.len() as u64).to_le_bytes().to_vec();
                    self.sessions.encode(&mut sessions);
                    c.said = Some(Said { inner_len, sessions, crc: crc32c::crc32c(&out[c.start..]) });
                }
            }
        }
        if !whole {
            return false;
        }
        let said = c.said.as_ref().expect("a whole inner snapshot has its length");
        out.extend_from_slice(&said.sessions);
        let crc = crc32c::crc32c_append(said.crc, &said.sessions);
        out.extend_from_slice(&crc.to_le_bytes());
        true
    }

    fn snapshot_len(&self, cursor: &SnapshotCursor) -> Option<u64> {
        let said = cursor.as_ref()?.downcast_ref::<SimCursor>()?.said.as_ref()?;
        Some((SNAPSHOT_MAGIC.len() + 8) as u64 + said.inner_len + said.sessions.len() as u64 + 4)
    }

    fn restore(&mut self, index: u64, bytes: &[u8]) -> Result<(), RestoreError> {
        let corrupt = RestoreError::Corrupt;
        let body_len = bytes.len().checked_sub(4).ok_or(corrupt("short snapshot"))?;
        let (body, crc) = bytes.split_at(body_len);
        if crc32c::crc32c(body).to_le_bytes() != crc {
            return Err(corrupt("snapshot checksum"));
        }
        let mut r = Reader::new(body, 0);
        if r.bytes(4)? != SNAPSHOT_MAGIC {
            return Err(corrupt("snapshot magic"));
        }
        let inner_len = usize::try_from(r.u64()?).map_err(|_| corrupt("snapshot length"))?;
        let inner = r.bytes(inner_len)?;
        let count = r.u64()?;
        let sessions = Sessions::decode(&mut r, count)?;
        if !r.done() {
            return Err(corrupt("trailing snapshot bytes"));
        }
        self.machine.get_mut().restore(index, inner)?;
        self.sessions = sessions;
        self.sessions_dirty = true;
        self.stage_sessions().map_err(|e| RestoreError::Store(e.0))?;
        if self.machine.get_mut().keyspace().is_persistent() {
            self.machine.get_mut().keyspace().commit().map_err(RestoreError::Store)?;
        }
        Ok(())
    }
}

impl<const L: bool, K: SimKeyspace> Smr1Machine for SimRedis<L, K> {
    fn apply_write(&mut self, index: u64, request: &[u8]) -> Response {
        self.apply(index, request)
    }

    fn read(&self, key: &[u8]) -> Response {
        let mut machine = self.machine.borrow_mut();
        let mut server = Server::new(config());
        let mut session = server.open_session();
        let now_ms = machine.last_time_ms();
        let mut bytes = Vec::new();
        pmwire_resp::client::encode_request(&[&b"GET"[..], key], &mut bytes);
        let mut parsed = Parsed::new(Limits::default());
        let segments: [&[u8]; 1] = [&bytes];
        assert_eq!(parsed.parse(&segments).commands, 1, "one GET");
        let mut sink = Deferred { parts: Vec::new() };
        let result = machine.read(&mut server, &mut session, now_ms, &parsed.request(&segments, 0), &mut sink);
        let ks = machine.keyspace();
        let mut out: Vec<u8> = Vec::new();
        for part in sink.parts {
            match part {
                Part::Bytes(b) => out.extend_from_slice(&b),
                Part::Value(v) => ks.read(&v, &mut out),
            }
        }
        ks.end_entry();
        match result {
            Ok(_) => answer(Status::Ok, 0, out),
            Err(_) => answer(Status::BadRequest, 0, Vec::new()),
        }
    }

    fn preview(&self, index: u64, request: &[u8]) -> Response {
        let mut copy = SimRedis::<L, MemKeyspace>::default();
        let applied = self.applied();
        if applied > 0 {
            copy.restore(applied, &self.snapshot()).expect("a member's own snapshot restores");
        }
        copy.apply(index, request)
    }
}

/// A read's reply, its values gathered from the keyspace afterwards (the
/// machine is borrowed while the read runs).
struct Deferred<V> {
    parts: Vec<Part<V>>,
}

enum Part<V> {
    Bytes(Vec<u8>),
    Value(V),
}

impl<V: Clone> ReplySink<V> for Deferred<V> {
    fn bytes(&mut self, data: &[u8]) {
        self.parts.push(Part::Bytes(data.to_vec()));
    }

    fn value(&mut self, value: &V, _len: u64) {
        self.parts.push(Part::Value(value.clone()));
    }
}

/// The first command of `entry`, as its arguments (empty if it is not a
/// one-command entry).
fn command_args(entry: &[u8]) -> Vec<Vec<u8>> {
    let Ok(e) = Entry::decode(entry) else { return Vec::new() };
    let mut parsed = Parsed::new(Limits::default());
    let segments: [&[u8]; 1] = [e.commands];
    if e.count != 1 || parsed.parse(&segments).commands != 1 {
        return Vec::new();
    }
    parsed.request(&segments, 0).args().map(<[u8]>::to_vec).collect()
}

/// A session's writes go in blocks of this many (block `b`: seqs
/// `BLOCK_WRITES * b + 1 ..= BLOCK_WRITES * (b + 1)`); a streamed write,
/// its pieces and its command, fits in one.
const BLOCK_WRITES: u64 = 5;

/// The streamed write of one block of a session's writes: its pieces at
/// the block's first sequence numbers, its command after them.
struct Streamed {
    stream: StreamId,
    /// Pieces (2 to 4), of `piece_bytes` (8 to 16) each but the last.
    pieces: u32,
    piece_bytes: usize,
    /// The whole value (unique: it spells the command's session and seq).
    value: Vec<u8>,
    /// A piece never sent: the command must be refused.
    left_out: Option<u32>,
}

impl Streamed {
    /// Whether a sweep may collect its pieces before its command comes
    /// (the stream began [`ABANDONED_MS`] before the run).
    fn abandoned(&self) -> bool {
        self.stream.time_ms < EPOCH_MS
    }
}

/// The streamed write that write `seq` of `session` belongs to, and its
/// place there (a piece's index; `pieces`: the command), if its block makes
/// one (one in four) and the write is one of its pieces sent or its
/// command: a function of the session and the block alone, as every piece
/// and the command must find the same plan.
fn streamed(session: u64, seq: u64) -> Option<(Streamed, u32)> {
    assert!(seq > 0, "a write's seq counts from 1");
    let (block, at) = ((seq - 1) / BLOCK_WRITES, (seq - 1) % BLOCK_WRITES);
    let draw = prf::derive(session, block);
    let pieces = 2 + (draw >> 8) % 3;
    let piece_bytes = 8 + (draw >> 16) % 9;
    let len = (pieces - 1) * piece_bytes + 1 + (draw >> 24) % piece_bytes;
    // One stream in eight leaves a piece out; one in four began long ago.
    let left_out = (draw >> 32).is_multiple_of(8).then_some((draw >> 40) % pieces);
    if !draw.is_multiple_of(4) || at > pieces || left_out == Some(at) {
        return None;
    }
    let time_ms = if (draw >> 48).is_multiple_of(4) { EPOCH_MS - ABANDONED_MS - 1 } else { EPOCH_MS };
    let command_seq = block * BLOCK_WRITES + 1 + pieces;
    let value = format!("{session}.{command_seq}.").into_bytes().into_iter().cycle().take(len as usize).collect();
    let plan = Streamed {
        stream: StreamId { time_ms, nonce: session << 32 | block },
        pieces: pieces as u32,
        piece_bytes: piece_bytes as usize,
        value,
        left_out: left_out.map(|i| i as u32),
    };
    Some((plan, at as u32))
}

/// Write `seq` of `session` if it is a piece or the command of a streamed
/// write ([`streamed`]): the command a SET or APPEND of a checked key.
fn streamed_request(rng: &mut Xoshiro256PlusPlus, keys: usize, session: u64, seq: u64, now_ms: u64) -> Option<Request> {
    let (plan, at) = streamed(session, seq)?;
    let mut proposer = Proposer::with_key(rng.gen());
    if at < plan.pieces {
        let chunk = plan.value.chunks(plan.piece_bytes).nth(at as usize).expect("a chunk per piece");
        let head = PieceHead { stream: plan.stream, index: at, count: plan.pieces };
        let value = proposer.piece(now_ms, head, Arg::Inline(Cow::Borrowed(chunk)));
        return Some(Request { op: Op::Put, client: session, seq, key: UNCHECKED.to_vec(), value, expect: None });
    }
    let key = format!("k{}", rng.gen_range(0..keys)).into_bytes();
    let name: &[u8] = if rng.gen_bool(0.7) { b"SET" } else { b"APPEND" };
    let value = Arg::Streamed {
        len: u32::try_from(plan.value.len()).expect("a small value"),
        crc: crc32c::crc32c(&plan.value),
        stream: plan.stream,
        pieces: plan.pieces,
    };
    let args = vec![Arg::Inline(Cow::Borrowed(name)), Arg::Inline(Cow::Borrowed(&key)), value];
    let value = proposer.command_extents(now_ms, Protocol::Resp2, args);
    Some(Request { op: Op::Put, client: session, seq, key, value, expect: None })
}

/// The arguments of a streamed write's command, its streamed value whole.
fn streamed_args(req: &Request) -> Vec<Vec<u8>> {
    let Ok(e) = ExtEntry::decode(&req.value) else { return Vec::new() };
    let Some((plan, _)) = streamed(req.client, req.seq) else { return Vec::new() };
    e.args
        .iter()
        .map(|a| match a {
            Arg::Inline(b) => b.to_vec(),
            Arg::Streamed { crc, .. } if *crc == crc32c::crc32c(&plan.value) => plan.value.clone(),
            other => panic!("a streamed write's command names its own stream: {other:?}"),
        })
        .collect()
}

/// Whether `reply` refuses a command whole for a streamed value's missing
/// piece (`machine::ext`).
fn missing_piece(reply: &[u8]) -> bool {
    reply.starts_with(b"-ERR pmwire: piece ") && reply.windows(10).any(|w| w == b"is missing")
}

/// What the history records of an answer: a reply, or the refusal of a
/// streamed write whose piece was missing (it applied nothing, so it drops
/// out of its key's history).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A reply of the strings model.
    Reply(Output),
    /// Refused whole.
    Refused,
}

impl<const L: bool, K: SimKeyspace> SimMachine for SimRedis<L, K> {
    /// Collections, chunks, the write index and sessions: larger than a
    /// map's.
    const SNAPSHOT_BYTES: u64 = 256 << 10;
    type HistInput = Input;
    type HistOutput = Answer;

    fn random_request(rng: &mut Xoshiro256PlusPlus, keys: usize, clients: usize, session: u64, seq: u64, now_ns: u64) -> Request {
        let now_ms = EPOCH_MS + now_ns / 1_000_000;
        if let Some(req) = streamed_request(rng, keys, session, seq, now_ms) {
            return req;
        }
        let mut proposer = Proposer::with_key(rng.gen());
        // TTLs that run out within the faulty part of a run.
        let mut g = Commands::new(rng, 300);
        if g.rng.gen_range(0..100) < 45 {
            let key = format!("k{}", g.rng.gen_range(0..keys)).into_bytes();
            let args: Vec<Vec<u8>> = match g.rng.gen_range(0..12) {
                0 => return SimRedis::<L, K>::read_request(key),
                1..=2 => vec![s("SET"), key.clone(), format!("{session}.{seq}").into_bytes()],
                3 => vec![s("SET"), key.clone(), g.small()],
                4..=6 => vec![s("INCR"), key.clone()],
                7 => vec![s("DEL"), key.clone()],
                8 => vec![s("APPEND"), key.clone(), g.rng.gen_range(0..10).to_string().into_bytes()],
                _ => vec![s("GET"), key.clone()],
            };
            let value = proposer.command(now_ms, Protocol::Resp2, &args);
            return Request { op: Op::Put, client: session, seq, key, value, expect: None };
        }
        let protocol = if g.rng.gen_bool(0.2) { Protocol::Resp3 } else { Protocol::Resp2 };
        let value = match g.rng.gen_range(0..100) {
            0..=9 => {
                let queued: Vec<Vec<Vec<u8>>> = (0..g.rng.gen_range(1..4)).map(|_| g.command()).collect();
                // Half the transactions watch, at an index anywhere up to
                // about where the log stands (each client's seq counts its
                // requests), so some keys were written since and some not.
                let near = seq.saturating_mul(clients as u64);
                let watched = if g.rng.gen_bool(0.5) {
                    (0..g.rng.gen_range(1..4))
                        .map(|_| Watched {
                            key: g.any_key(),
                            index: g.rng.gen_range(0..=near),
                            state: match g.rng.gen_range(0..4) {
                                0 => WatchedState::Absent,
                                1 => WatchedState::Live(Some(now_ms + g.rng.gen_range(0..400))),
                                _ => WatchedState::Live(None),
                            },
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                proposer.transaction(now_ms, protocol, watched, &queued)
            }
            10..=17 => proposer.sweep(now_ms, g.rng.gen_range(0..4), g.rng.gen_range(0..8)),
            _ => proposer.command(now_ms, protocol, &g.command()),
        };
        Request { op: Op::Put, client: session, seq, key: UNCHECKED.to_vec(), value, expect: None }
    }

    fn read_request(key: Vec<u8>) -> Request {
        Request { op: Op::Get, client: 0, seq: 0, key, value: Vec::new(), expect: None }
    }

    fn input(req: &Request) -> Option<Input> {
        if req.op == Op::Get {
            return Some(Input::Get);
        }
        if req.key == UNCHECKED {
            return None;
        }
        let args = if is_extent_form(&req.value) { streamed_args(req) } else { command_args(&req.value) };
        let name = args.first().map(|a| a.to_ascii_uppercase()).unwrap_or_default();
        Some(match (name.as_slice(), args.get(2)) {
            (b"SET", Some(v)) => Input::Set(v.clone()),
            (b"INCR", _) => Input::Incr,
            (b"DEL", _) => Input::Del,
            (b"APPEND", Some(v)) => Input::Append(v.clone()),
            (b"GET", _) => Input::Get,
            _ => panic!("a checked request is SET, GET, INCR, DEL or APPEND: {args:?}"),
        })
    }

    fn output(req: &Request, resp: Response) -> Option<Answer> {
        if resp.status != Status::Ok {
            return None;
        }
        #[cfg(test)]
        tests::count(req, &resp.value);
        if req.op == Op::Put && req.key == UNCHECKED {
            // Any reply (empty for a sweep or a blocked pop); its effect is
            // checked by convergence.
            return Some(Answer::Reply(Output::Ok));
        }
        if is_extent_form(&req.value) {
            // A streamed write: refused where a piece may be missing (never
            // otherwise: the client's pieces were applied), always where
            // one is.
            let (plan, _) = streamed(req.client, req.seq)?;
            if missing_piece(&resp.value) {
                return (plan.left_out.is_some() || plan.abandoned()).then_some(Answer::Refused);
            }
            if plan.left_out.is_some() {
                return None;
            }
        }
        Output::from_reply(&resp.value).map(Answer::Reply)
    }

    fn first_violation(history: &[HistOp<Input, Answer>]) -> Option<Vec<u8>> {
        let ops: Vec<RedisOp> = history
            .iter()
            .filter_map(|o| {
                let ret = match &o.ret {
                    Some((_, Answer::Refused)) => return None,
                    Some((at, Answer::Reply(out))) => Some((*at, out.clone())),
                    None => None,
                };
                Some(RedisOp { key: o.key.clone(), call: o.call, ret, input: o.input.clone() })
            })
            .collect();
        lincheck::redis::first_violation(&ops)
    }

    fn after_crash(self) -> Self {
        SimRedis::default()
    }

    fn crash_with(self, rng: &mut Xoshiro256PlusPlus) -> Result<Self, String> {
        let ks = self.machine.into_inner().into_keyspace();
        SimRedis::over(ks.crash(rng)?)
    }

    fn crashable(&self) -> bool {
        self.machine.borrow_mut().keyspace().is_persistent()
    }

    fn arm_crash(&mut self, writes: u32) {
        self.machine.get_mut().keyspace().arm_crash(writes);
    }

    fn disarm_crash(&mut self) {
        self.machine.get_mut().keyspace().disarm_crash();
    }
}

fn s(v: &str) -> Vec<u8> {
    v.as_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use pmwire_smr::sim::{run_with, SimConfig};

    use super::*;

    thread_local! {
        /// Answers seen on this thread: pieces applied, streamed SETs
        /// answered +OK, streamed APPENDs answered a length, streamed
        /// writes refused.
        static SEEN: Cell<[u64; 4]> = const { Cell::new([0; 4]) };
    }

    /// Counts `req`'s answer `reply` if it is a piece's or a streamed write's.
    pub(super) fn count(req: &Request, reply: &[u8]) {
        let Ok(e) = ExtEntry::decode(&req.value) else { return };
        let i = match (e.piece().is_some(), reply.first()) {
            (true, Some(b'+')) => 0,
            (false, Some(b'+')) => 1,
            (false, Some(b':')) => 2,
            _ if missing_piece(reply) => 3,
            _ => return,
        };
        SEEN.with(|s| {
            let mut seen = s.get();
            seen[i] += 1;
            s.set(seen);
        });
    }

    #[test]
    fn every_block_holds_its_streamed_write() {
        for session in 1..=4 {
            for seq in 1..=2_000 {
                let Some((plan, at)) = streamed(session, seq) else { continue };
                assert!((2..=4).contains(&plan.pieces));
                assert!(at <= plan.pieces);
                assert!(u64::from(plan.pieces) < BLOCK_WRITES, "pieces and command in one block");
                assert_eq!(plan.value.chunks(plan.piece_bytes).count(), plan.pieces as usize);
                assert!((8..=16).contains(&plan.piece_bytes));
            }
        }
    }

    #[test]
    fn runs_apply_streamed_writes_and_refuse_some() {
        for seed in 0..20 {
            let r = run_with::<SimRedis>(seed, &SimConfig::standard(3));
            assert!(r.passed(), "seed {seed}: {:?}", r.violations);
        }
        let [pieces, sets, appends, refused] = SEEN.with(Cell::get);
        println!("20 runs: {pieces} pieces applied, {sets} streamed SETs +OK, {appends} streamed APPENDs, {refused} refused");
        assert!(pieces > 0, "pieces applied");
        assert!(sets > 0, "streamed SETs answered +OK");
        assert!(appends > 0, "streamed APPENDs answered");
        assert!(refused > 0, "streamed writes refused for a missing piece");
    }
}
