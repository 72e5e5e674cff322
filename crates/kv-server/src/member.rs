//! [`Member`]: `pmwire kv --cluster`: one member of a replicated Redis
//! cluster (issue 26, items 2 and 9). One thread, one netio loop: it serves
//! RESP clients and drives an [`smr::Replica`] whose machine is the Redis
//! keyspace on the persistent engine (`RedisMachine<ClusterKeyspace>`).
//!
//! The loop: the peers' transport (a [`LinkTransport`], authenticated with
//! the cluster's secret) is armed in [`Service::watch`] (its event fd is
//! waited on with the client sockets); [`Service::wakeups`] runs the
//! replica's turns (events in, timed work out) and answers what they
//! finished; the replica's next tick is the loop's deadline. No other
//! thread, no polling: an idle member sleeps until a tick or a message.
//!
//! Clients (per connection, replies in request order: a queue of slots,
//! flushed in order as their answers come). Every member serves every
//! client alike, leader or follower:
//! - a write ([`Class::Write`], and a name the tables do not know, which the
//!   machine answers as the executor does) becomes an entry
//!   ([`Proposer::command`]) proposed through [`Replica::propose_as`]: on
//!   the leader into its log, on a follower forwarded to the leader by
//!   raft-rs (`pmwire_smr::forward`: tagged, applied once however often the
//!   network delivers it). Its reply is this member's own machine output
//!   once this member applied the entry (committed on a majority; the
//!   machine is deterministic, so it is what the leader answered). Every
//!   proposal of one loop turn goes into one Raft `Ready` (one append
//!   batch, or one forwarded message): group commit
//!   ([`MemberStats::proposal_turns`]). A write with an argument over
//!   128 KiB streams it as piece entries first (`stream`), so no entry
//!   or message holds the whole value;
//! - a read waits for a ReadIndex ([`Replica::read_index`]: the leader's,
//!   or a follower's forwarded one, done once this member applied up to
//!   the index the leader confirmed) and then runs through
//!   [`RedisMachine::read`] when it reaches the head of its connection's
//!   queue (so a read after a pending write sees it): linearizable on any
//!   member. `READONLY` serves reads from the member's applied state at
//!   once (possibly stale), `READWRITE` undoes it;
//! - MULTI queues here; EXEC becomes one entry ([`Proposer::transaction`])
//!   with the connection's WATCH records ([`RedisMachine::watch`]). WATCH
//!   on a follower records this member's applied index: sound, since
//!   EXEC's check runs when the entry is applied, on every member against
//!   the same log (any write to the key at a later index aborts it);
//! - blocking pops (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP) are parked
//!   on the serving member and proposed when their keys may hold an
//!   element (`blocking`); WAIT waits up to its timeout on the leader and
//!   answers what a follower can vouch for on a follower (`wait`);
//! - connection-local commands (AUTH, HELLO, CLIENT, PING, ECHO, SELECT, …)
//!   run on the member's own executor; `INFO replication` and `ROLE`
//!   answer from the replica's status and progress;
//! - a proposal or read that no majority confirms within the replica's
//!   bound ([`smr::node::Failure::NoQuorum`]) is answered
//!   `-CLUSTERDOWN The cluster is down: <reason>`, never with a stale or
//!   unreplicated answer (while no leader is known, a follower holds the
//!   request within the same bound);
//! - with `--redirect moved` a follower answers writes, linearizable reads
//!   and blocking pops `-MOVED <slot> <leader's RESP address>` instead
//!   (`redirect`);
//! - HTTP (`POST|PUT|GET|DELETE /kv/{key}`) takes the same paths (`http`).
//!
//! Identity: a member proposes only for an authenticated session (RESP
//! AUTH with `requirepass`, HTTP `Authorization: Bearer`); entries travel
//! between members only over the links that proved the cluster's secret.
//! With `requirepass` the only user is `default`: a forwarded entry
//! carries the principal `default` in its context (`pmwire_smr::forward`),
//! so a leader could check per-user ACLs once users exist. The machine's
//! and the reads' executors run with no password: the door is the member's.
//!
//! Membership: a member started with [`MemberOptions::join`] waits to be
//! added (`pmwire smr add`); members added later are learnt from the
//! replica's own part for ROLE and INFO.
//!
//! Expiry: the leader proposes a sweep entry when
//! [`RedisMachine::sweep_due`] says so, one at a time.
//!
//! Bounds: at most [`MAX_QUEUE`] unanswered requests per connection (the
//! connection's input is held meanwhile: netio reads up to its bound, then
//! TCP pushes back, and once the queue is below the bound again the
//! connection is woken to read what it holds, since a pipelining client
//! such as `redis-cli --pipe` may send nothing more), requests up to
//! [`MAX_REQUEST_BYTES`] (a 512 MiB value and its command), [`MAX_MULTI`]
//! queued commands per transaction.
//!
//! Replies: a read's values go out by their pool extents in zero-copy mode
//! (the loop retains each buffer when it takes the reply; nothing writes
//! the keyspace between the read and that), as on a single node.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use link::LinkTransport;
use pmem::Region;
use pmwire_keyspace::exec::{Server as RespServer, ServerConfig, Session};
use pmwire_keyspace::store::{Keyspace, MemKeyspace};
use pmwire_kv_cluster::commands::{class, Class};
use pmwire_kv_cluster::{MachineKeyspace, Proposer, RedisMachine, Watched};
use pmwire_kv_cluster::copies::CopyCounters;
use pmwire_netio::{Batch, ConnId, ConnLimits, Segment, Service, Watch};

use crate::service::client_limits;
use pmwire_resp::reply::ReplySink;
use pmwire_resp::request::{Limits as RespLimits, Parsed};
use pmwire_smr::node::{Done, Failure, Replica, Ticket};
use pmwire_smr::pmem_store::PmemDurable;
use raft::StateRole;
use reactor::{Reactor, Service as _};
use transport::{EventFd, Transport};

use crate::cluster::{ClusterKeyspace, SharedStore};
use crate::keyspace::Handle;
use crate::store::Mode;

mod zc;
mod stream;

mod blocking;
mod http;
mod redirect;
mod wait;
pub use redirect::keyslot;

/// The replicated machine of a member.
pub type Machine = RedisMachine<ClusterKeyspace>;
/// A member's replica over a transport.
pub type MemberReplica<T> = Replica<LinkTransport<T>, PmemDurable<Region>, Machine>;

/// Most unanswered requests a connection may have queued.
pub const MAX_QUEUE: usize = 1024;

/// Most replies a subscriber's connection may hold unsent before it is
/// closed ([`Member::route_pushes`]).
pub const MAX_PUSHES_QUEUED: usize = 65_536;
/// Largest request (all its arguments) a member takes.
pub const MAX_REQUEST_BYTES: usize = (512 << 20) + (1 << 20);
/// Most commands one MULTI may queue.
pub const MAX_MULTI: usize = 4096;
/// Most replica turns one wake-up runs before it answers clients.
const TURNS_PER_WAKEUP: usize = 64;
/// Expired keys and collection chunks one sweep entry deletes at most.
const SWEEP_BUDGET: u32 = 64;
/// After the leader found no sweep due, it looks again this many ms later,
/// not every turn: looking (an expiry and a chunk scan) cost a loaded
/// leader 2.6% of its CPU at one client. Expired keys are invisible to
/// every read meanwhile; a sweep that found more work looks again at once.
const SWEEP_CHECK_MS: u64 = 10;
/// WAL words after which a member's engine starts a checkpoint
/// ([`pmwire_kv::Engine::set_checkpoint_words`]). A whole checkpoint of half
/// the default WAL (about 17 K SETs on a 256 MB pool) held the loop 140-210
/// ms, past the 100 ms election timeout, and the cluster lost its leader
/// under load; members therefore checkpoint in slices
/// ([`CHECKPOINT_SLICE`]), which lets a checkpoint cover more records (more
/// updates per tree node written) without holding the loop.
pub const CHECKPOINT_WORDS: u64 = 32_768;
/// Tree operations a member's commit applies of a checkpoint in slices
/// ([`pmwire_kv::Engine::set_checkpoint_slice`]; at least twice the records
/// the commit adds): a few milliseconds of the loop at most.
pub const CHECKPOINT_SLICE: usize = 512;

/// Counters (volatile).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberStats {
    /// Entries proposed for clients (commands and transactions).
    pub proposals: u64,
    /// Loop turns that proposed at least one entry: `proposals /
    /// proposal_turns` is the mean group-commit batch.
    pub proposal_turns: u64,
    /// Linearizable reads asked (ReadIndex).
    pub read_indexes: u64,
    /// Reads served stale (READONLY).
    pub stale_reads: u64,
    /// Requests answered CLUSTERDOWN.
    pub cluster_down: u64,
    /// Sweep entries proposed.
    pub sweeps: u64,
    /// Proposals this member made as a follower (forwarded to the leader).
    pub forwarded: u64,
    /// Attempts of parked blocking pops proposed.
    pub block_attempts: u64,
    /// RESP requests received (INFO's `total_commands_processed`).
    pub commands: u64,
    /// Commands whose long arguments were streamed (`member::stream`).
    pub streams: u64,
    /// Piece entries proposed for them.
    pub pieces: u64,
    /// Streams ended before their command, cut so that the leader's
    /// sweep frees their pieces at once (`member::stream`).
    pub streams_cut: u64,
}

/// Where a request's reply stands.
enum Slot {
    /// The reply, ready to send.
    Ready(Vec<u8>),
    /// A proposal in flight.
    Write,
    /// A transaction in flight, and the errors that take their queued
    /// commands' places in its reply (by position, ascending): commands
    /// the ACL rules no longer allowed at EXEC (`splice_exec`).
    Exec(Vec<(usize, Vec<u8>)>),
    /// A blocking pop parked, or a WAIT waiting (answered by `blocking` or
    /// `wait`).
    Pending,
    /// A read waiting for its read index (the request's arguments).
    ReadWait(Vec<Vec<u8>>),
    /// A read to run once it is at the head of the queue.
    Read(Vec<Vec<u8>>),
}

/// One client connection.
struct Conn {
    session: Session,
    /// Commands queued by MULTI (None: no transaction open).
    multi: Option<Vec<Vec<Vec<u8>>>>,
    /// A command of the open transaction was refused: EXEC aborts.
    multi_dirty: bool,
    watched: Vec<Watched>,
    readonly: bool,
    /// The log index of this connection's last applied write (WAIT).
    last_write: u64,
    /// Sequence number of `queue[0]`.
    head: u64,
    queue: VecDeque<Slot>,
    close_after_flush: bool,
    /// The blocking pop this connection waits on (its further requests
    /// are held meanwhile, as Redis processes nothing of a blocked client).
    blocked: Option<u64>,
    /// Requests that arrived while blocked or streaming, served once it is answered.
    held: VecDeque<Vec<Vec<u8>>>,
    /// A command of this connection is being streamed (`stream`).
    streaming: bool,
    /// An HTTP connection's requests, in queue order (`http`).
    http: Option<http::Pending>,
}

impl Conn {
    fn push(&mut self, slot: Slot) -> u64 {
        self.queue.push_back(slot);
        self.head + self.queue.len() as u64 - 1
    }

    fn slot(&mut self, seq: u64) -> Option<&mut Slot> {
        let i = seq.checked_sub(self.head)?;
        self.queue.get_mut(usize::try_from(i).ok()?)
    }

    /// Requests queued or held: the connection is not read past [`MAX_QUEUE`].
    fn backlog(&self) -> usize {
        self.queue.len() + self.held.len()
    }
}

/// Who a ticket's outcome goes to.
#[derive(Clone, Copy, Debug)]
enum Owner {
    /// A connection's reply slot.
    Slot(ConnId, u64),
    /// An attempt of a parked blocking pop (`blocking`).
    Block(u64),
    /// A piece of a streamed command (`stream`): the stream, its bytes.
    Piece(u64, u64),
}

/// The member (module docs).
pub struct Member<T: Transport<Addr = SocketAddr>> {
    reactor: Reactor<LinkTransport<T>, MemberReplica<T>>,
    origin: Instant,
    proposer: Proposer,
    local: RespServer,
    scratch: MemKeyspace,
    reads: RespServer,
    conns: HashMap<ConnId, Conn>,
    tickets: HashMap<Ticket, Owner>,
    /// Commands being streamed (`stream`), by a key of their own.
    streams: HashMap<u64, stream::Stream>,
    next_stream: u64,
    parked: blocking::Parked,
    waits: Vec<wait::Waiting>,
    /// `--redirect moved`: followers answer `-MOVED` to the leader's RESP
    /// address instead of forwarding.
    redirect: Option<BTreeMap<u64, SocketAddr>>,
    /// Stops the loop once the replica halts (`MemberServer::open` sets it).
    halt_stop: Option<pmwire_netio::StopHandle>,
    sweep: Option<Ticket>,
    /// When the leader next asks whether a sweep is due (ms since the epoch).
    next_sweep_check_ms: u64,
    /// When this member last checkpointed to make room for a write.
    room_checked: Option<Instant>,
    parsed: Parsed,
    codec: pmwire_netio::http::Codec,
    to_wake: Vec<ConnId>,
    peers: BTreeMap<u64, SocketAddr>,
    stats: MemberStats,
    proposed_this_turn: bool,
    /// How values travel from the socket (zero-copy: by their extents, `zc`).
    mode: Mode,
    copies: CopyCounters,
}

/// While short of room, a member checkpoints to release deleted values'
/// buffers at most this often ([`Member::short_of_room`]).
const ROOM_CHECKPOINT_EVERY: Duration = Duration::from_millis(200);

/// Commands that only remove or shorten (Redis's writes without
/// `denyoom`): served even when the pool is short of room, so a client can
/// free it.
const FREEING: &[&[u8]] = &[
    b"del", b"unlink", b"flushall", b"flushdb", b"getdel", b"expire", b"pexpire", b"expireat", b"pexpireat", b"persist", b"lpop", b"rpop",
    b"spop", b"srem", b"hdel", b"zrem", b"zpopmin", b"zpopmax", b"lrem", b"ltrim", b"zremrangebyscore", b"zremrangebyrank", b"zremrangebylex",
];

fn cluster_down(reason: &str) -> Vec<u8> {
    format!("-CLUSTERDOWN The cluster is down: {reason}\r\n").into_bytes()
}

/// Runs `f` on `args` as a parsed request: a queued command keeps its
/// arguments, and the executor and the machine take a request.
pub(crate) fn with_request<R>(args: &[Vec<u8>], f: impl FnOnce(&pmwire_resp::request::Request<'_>) -> R) -> R {
    let mut wire = Vec::new();
    pmwire_resp::client::encode_request(args, &mut wire);
    let mut parsed = Parsed::new(RespLimits::default());
    let segs: [&[u8]; 1] = [&wire];
    assert_eq!(parsed.parse(&segs).commands, 1, "one encoded command");
    f(&parsed.request(&segs, 0))
}

fn error(text: &str) -> Vec<u8> {
    format!("-{text}\r\n").into_bytes()
}

fn failure_text(f: Failure) -> &'static str {
    match f {
        Failure::NoQuorum => "no majority confirmed the request in time",
        Failure::LeadershipLost => "leadership was lost (the write may or may not be applied)",
        Failure::NotProposed => "the write never reached a leader's log in its term (it is not applied)",
        Failure::Halted => "this member halted",
        Failure::TooLarge { .. } => "the entry is larger than the replicated log takes (it is not applied)",
    }
}

/// The reply to a failed proposal: an entry too large for the log is the
/// client's error (`-ERR`, as Redis refuses a request over its limits);
/// the others say the cluster could not serve it now (counted in
/// `stats.cluster_down`).
fn failure_reply(f: Failure, stats: &mut MemberStats) -> Vec<u8> {
    stats.cluster_down += u64::from(!matches!(f, Failure::TooLarge { .. }));
    match f {
        Failure::TooLarge { bytes, max } => {
            error(&format!("ERR the write's replicated entry is {bytes} B, over the {max} B one entry of this cluster's Raft log may hold (a quarter of --raft-log-size); it is not applied"))
        }
        f => cluster_down(failure_text(f)),
    }
}

/// A reply sink that gathers the engine's values at once (a read's reply).
struct Gather<'a> {
    ks: &'a mut ClusterKeyspace,
    out: Vec<u8>,
}

impl ReplySink<Handle> for Gather<'_> {
    fn bytes(&mut self, data: &[u8]) {
        self.out.extend_from_slice(data);
    }

    fn value(&mut self, value: &Handle, len: u64) {
        let before = self.out.len();
        self.ks.read(value, &mut self.out);
        assert_eq!((self.out.len() - before) as u64, len, "a value's length");
    }
}

impl<T: Transport<Addr = SocketAddr>> Member<T> {
    /// A member over its replica (the transport already listening).
    pub fn new(reactor: Reactor<LinkTransport<T>, MemberReplica<T>>, peers: BTreeMap<u64, SocketAddr>, config: ServerConfig) -> Member<T> {
        let mut proposer = Proposer::new();
        proposer.observe(reactor.service.machine().last_time_ms());
        let mut reactor = reactor;
        // PUBLISH goes through the log; each member delivers to its own subscribers.
        reactor.service.machine_mut().deliver_publishes();
        let ks = reactor.service.machine_mut().keyspace();
        let (mode, copies) = (ks.store().mode(), ks.copy_counters().clone());
        Member {
            reactor,
            origin: Instant::now(),
            proposer,
            local: RespServer::new(config.clone()),
            scratch: MemKeyspace::new(),
            // The member's door checks the password: reads run for
            // authenticated sessions (and HTTP's Bearer) only.
            reads: RespServer::new(ServerConfig { requirepass: None, ..config }),
            conns: HashMap::new(),
            tickets: HashMap::new(),
            streams: HashMap::new(),
            next_stream: 0,
            parked: blocking::Parked::default(),
            waits: Vec::new(),
            redirect: None,
            halt_stop: None,
            sweep: None,
            next_sweep_check_ms: 0,
            room_checked: None,
            parsed: if mode == Mode::ZeroCopy { Parsed::new(RespLimits::default()).gather_lazily() } else { Parsed::new(RespLimits::default()) },
            codec: pmwire_netio::http::Codec::new(pmwire_netio::http::Limits { max_head_bytes: 8192, max_body_bytes: MAX_REQUEST_BYTES }),
            to_wake: Vec::new(),
            peers,
            stats: MemberStats::default(),
            proposed_this_turn: false,
            mode,
            copies,
        }
    }

    /// The counters.
    pub fn stats(&self) -> MemberStats {
        self.stats
    }

    /// The replica.
    pub fn replica(&self) -> &MemberReplica<T> {
        &self.reactor.service
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn now_ms() -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
    }

    fn conn(&mut self, id: ConnId) -> &mut Conn {
        let local = &mut self.local;
        self.conns.entry(id).or_insert_with(|| Conn {
            session: local.open_session(),
            multi: None,
            multi_dirty: false,
            watched: Vec::new(),
            readonly: false,
            last_write: 0,
            head: 0,
            queue: VecDeque::new(),
            close_after_flush: false,
            blocked: None,
            held: VecDeque::new(),
            streaming: false,
            http: None,
        })
    }

    /// No leader is known: nothing can be proposed or read linearizably.
    fn no_leader() -> Vec<u8> {
        cluster_down("no leader is elected (this member knows none)")
    }

    /// `-MOVED` to the leader's RESP address, if the operator asked for
    /// redirects and this member follows a leader whose address it knows.
    fn moved(&self, args: &[Vec<u8>]) -> Option<Vec<u8>> {
        let resp = self.redirect.as_ref()?;
        if self.reactor.service.is_leader() {
            return None;
        }
        let addr = resp.get(&self.reactor.service.status().leader)?;
        let slot = args.get(1).map_or(0, |k| keyslot(k));
        Some(format!("-MOVED {slot} {addr}\r\n").into_bytes())
    }

    /// The identity a forwarded entry carries: with `requirepass` the
    /// only user is `default` (module docs, "Identity").
    const PRINCIPAL: &'static [u8] = b"default";

    /// Proposes `entry` for connection `id` (on the leader, or forwarded
    /// by a follower); the slot it answers. True if it was proposed.
    /// An extent-form entry's copies are counted by its builder
    /// (`member::zc`), which knows its value bytes without walking it.
    fn propose(&mut self, id: ConnId, entry: Vec<u8>) -> bool {
        self.propose_into(id, entry, Slot::Write)
    }

    /// [`Member::propose`], the reply awaited in `slot` ([`Slot::Write`]
    /// or [`Slot::Exec`]).
    fn propose_into(&mut self, id: ConnId, entry: Vec<u8>, slot: Slot) -> bool {
        if !pmwire_kv_cluster::extent::is_extent_form(&entry) {
            let values = pmwire_kv_cluster::extent::v1_value_bytes(&entry);
            // A follower's: protobuf's encoding copies the entry again into
            // the forwarded proposal's message to the leader.
            let sent = if self.reactor.service.is_leader() { 0 } else { values };
            self.copies.add(|c| {
                c.entry += values;
                c.sent += sent;
            });
        }
        match self.submit(entry) {
            Some(ticket) => {
                let seq = self.conn(id).push(slot);
                self.tickets.insert(ticket, Owner::Slot(id, seq));
                true
            }
            None => {
                self.conn(id).push(Slot::Ready(Self::no_leader()));
                false
            }
        }
    }

    /// Proposes `entry` (on the leader, or forwarded by a follower) and
    /// counts it; `None`: no leader to take it.
    fn submit(&mut self, entry: Vec<u8>) -> Option<Ticket> {
        let ticket = self.reactor.service.propose_as(entry, Self::PRINCIPAL).ok()?;
        self.stats.proposals += 1;
        if !self.reactor.service.is_leader() {
            self.stats.forwarded += 1;
        }
        self.proposed_this_turn = true;
        Some(ticket)
    }

    /// A linearizable read (ReadIndex, on the leader or a follower), or a
    /// stale one on `READONLY`.
    fn read(&mut self, id: ConnId, args: Vec<Vec<u8>>) {
        if self.conn(id).readonly {
            self.stats.stale_reads += 1;
            self.conn(id).push(Slot::Read(args));
            return;
        }
        if let Some(reply) = self.moved(&args) {
            self.conn(id).push(Slot::Ready(reply));
            return;
        }
        match self.reactor.service.read_index() {
            Ok(ticket) => {
                self.stats.read_indexes += 1;
                let seq = self.conn(id).push(Slot::ReadWait(args));
                self.tickets.insert(ticket, Owner::Slot(id, seq));
            }
            Err(_) => {
                self.conn(id).push(Slot::Ready(Self::no_leader()));
            }
        }
    }

    /// Runs a connection-local command on the member's own executor.
    fn local(&mut self, id: ConnId, args: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        let conn = self.conns.get_mut(&id).expect("the connection");
        let flow = with_request(args, |req| self.local.execute(&mut conn.session, &mut self.scratch, req, &mut out));
        if flow == pmwire_keyspace::exec::Flow::Close {
            conn.close_after_flush = true;
        }
        if self.local.shutdown_requested() {
            // SHUTDOWN stops this member only: its log and keyspace are durable, the
            // others go on (and elect a new leader if it led).
            if let Some(stop) = &self.halt_stop {
                stop.stop();
            }
        }
        // CONFIG SET notify-keyspace-events: the entries this member applies
        // report their events to its subscribers.
        let flags = self.local.config().notify_keyspace_events;
        self.reactor.service.machine_mut().set_notify_keyspace_events(flags);
        for client in self.local.take_kills() {
            // CLIENT KILL of another connection: closed once what it was answered is sent.
            if let Some((&killed, c)) = self.conns.iter_mut().find(|(_, c)| c.session.id() == client) {
                c.close_after_flush = true;
                self.to_wake.push(killed);
            }
        }
        out
    }

    /// Serves a request, or holds it while the connection is blocked.
    fn serve_or_hold(&mut self, id: ConnId, args: Vec<Vec<u8>>) {
        let conn = self.conn(id);
        if conn.blocked.is_some() || conn.streaming || !conn.held.is_empty() {
            conn.held.push_back(args);
            return;
        }
        self.request(id, args);
    }

    /// Serves one request of connection `id`.
    fn request(&mut self, id: ConnId, args: Vec<Vec<u8>>) {
        let name = args[0].to_ascii_lowercase();
        let authenticated = self.conn(id).session.is_authenticated();
        if !authenticated && !matches!(&name[..], b"auth" | b"hello" | b"quit") {
            self.conn(id).push(Slot::Ready(error("NOAUTH Authentication required.")));
            return;
        }
        if let Some(text) = self.local.refusal_in_pubsub_context(&self.conns[&id].session, &args) {
            self.conn(id).push(Slot::Ready(error(&text)));
            return;
        }
        // ACL users are this member's configuration: a command is checked
        // here before it is proposed, forwarded or queued (a session
        // command outside MULTI is checked by the local executor itself).
        let local_session = class(&args[0]) == Class::Session && self.conn(id).multi.is_none();
        if !local_session {
            let in_multi = self.conns[&id].multi.is_some();
            if let Some(text) = self.local.acl_refusal(&self.conns[&id].session, &args, in_multi, Self::now_ms()) {
                let conn = self.conn(id);
                if conn.multi.is_some() {
                    conn.multi_dirty = true;
                }
                conn.push(Slot::Ready(error(&text)));
                return;
            }
        }
        if self.conn(id).multi.is_some() && !matches!(&name[..], b"exec" | b"discard" | b"multi" | b"watch" | b"quit") {
            let reply = self.queue_in_multi(id, args);
            self.conn(id).push(Slot::Ready(reply));
            return;
        }
        match &name[..] {
            b"readonly" | b"readwrite" => {
                self.conn(id).readonly = &name[..] == b"readonly";
                self.conn(id).push(Slot::Ready(b"+OK\r\n".to_vec()));
            }
            b"wait" => self.wait(id, &args),
            b"role" => {
                let reply = self.role();
                self.conn(id).push(Slot::Ready(reply));
            }
            b"info" if args.len() == 2 && args[1].eq_ignore_ascii_case(b"copies") => {
                let text = format!("# Copies\r\n{}", self.copies.get().info(self.mode.name()));
                let reply = format!("${}\r\n{}\r\n", text.len(), text).into_bytes();
                self.conn(id).push(Slot::Ready(reply));
            }
            b"info" if args.len() == 2 && args[1].eq_ignore_ascii_case(b"replication") => {
                let text = self.info_replication();
                let reply = format!("${}\r\n{}\r\n", text.len(), text).into_bytes();
                self.conn(id).push(Slot::Ready(reply));
            }
            b"info" => {
                // The executor's INFO (its sessions are this member's
                // connections), with the member's own replication, keyspace
                // and request count, and its parked clients.
                self.set_info_sections();
                let reply = self.local(id, &args);
                let reply = blocking::with_blocked_clients(reply, self.parked.len());
                self.conn(id).push(Slot::Ready(reply));
            }
            b"multi" | b"exec" | b"discard" | b"watch" | b"unwatch" => self.transaction(id, &name, args),
            _ => self.by_class(id, args),
        }
    }

    fn by_class(&mut self, id: ConnId, args: Vec<Vec<u8>>) {
        if blocking::xread_blocks(&args) {
            // XREAD and XREADGROUP with BLOCK park as the blocking pops do
            // (outside MULTI: inside, they do not block, as in Redis).
            match self.moved(&args) {
                Some(reply) => {
                    self.conn(id).push(Slot::Ready(reply));
                }
                None => self.block(id, args),
            }
            return;
        }
        match class(&args[0]) {
            Class::Read => self.read(id, args),
            Class::Write | Class::Unknown => {
                let refused = match self.moved(&args) {
                    Some(reply) => Some(reply),
                    None => self.no_replicas().or_else(|| self.short_of_room(std::slice::from_ref(&args))),
                };
                if let Some(reply) = refused {
                    self.conn(id).push(Slot::Ready(reply));
                    return;
                }
                if args.iter().skip(2).any(|a| a.len() > stream::PIECE_BYTES) {
                    let parts = args
                        .into_iter()
                        .enumerate()
                        .map(|(i, a)| if i >= 2 && a.len() > stream::PIECE_BYTES { stream::Part::Streamed(stream::Source::Bytes(a)) } else { stream::Part::Inline(a) })
                        .collect();
                    self.start_stream(id, parts);
                    return;
                }
                let protocol = self.conn(id).session.protocol;
                let entry = self.proposer.command(Self::now_ms(), protocol, &args);
                self.propose(id, entry);
            }
            Class::Blocking => match self.moved(&args) {
                Some(reply) => {
                    self.conn(id).push(Slot::Ready(reply));
                }
                None => self.block(id, args),
            },
            Class::Session => {
                let reply = self.local(id, &args);
                self.conn(id).push(Slot::Ready(reply));
                self.route_pushes();
            }
        }
    }

    /// Queues what PUBLISH sent to this member's subscribers, and the
    /// MONITOR lines for its monitors, on their connections, in order
    /// after what each was answered before. A
    /// subscriber with [`MAX_PUSHES_QUEUED`] replies unsent is closed once
    /// they are (Redis closes a subscriber past its output limit).
    fn route_pushes(&mut self) {
        let messages = self.local.take_pushes();
        if messages.is_empty() {
            return;
        }
        let local = &self.local;
        let by_client: HashMap<u64, ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| local.is_subscribed(c.session.id()) || local.is_monitor(c.session.id()))
            .map(|(&id, c)| (c.session.id(), id))
            .collect();
        for (client, bytes) in messages {
            let Some(&id) = by_client.get(&client) else { continue };
            let conn = self.conns.get_mut(&id).expect("a subscriber's connection");
            if conn.queue.len() >= MAX_PUSHES_QUEUED {
                conn.close_after_flush = true;
                continue;
            }
            conn.push(Slot::Ready(bytes));
            self.to_wake.push(id);
        }
    }

    fn queue_in_multi(&mut self, id: ConnId, args: Vec<Vec<u8>>) -> Vec<u8> {
        // As Redis: an unknown command or a wrong arity is refused when queued
        // (the executor's own text), and EXEC then aborts.
        let refusal = match (pmwire_keyspace::exec::command_of(&args), class(&args[0])) {
            (Err(text), _) => Some(text),
            (_, Class::Session) => Some("ERR this command is not allowed inside a transaction in cluster mode".into()),
            _ if self.conn(id).multi.as_ref().map_or(0, Vec::len) >= MAX_MULTI => Some("ERR too many commands in one transaction".into()),
            _ => None,
        };
        let conn = self.conn(id);
        if let Some(text) = refusal {
            conn.multi_dirty = true;
            return error(&text);
        }
        conn.multi.as_mut().expect("a transaction").push(args);
        b"+QUEUED\r\n".to_vec()
    }

    fn transaction(&mut self, id: ConnId, name: &[u8], args: Vec<Vec<u8>>) {
        let reply = match name {
            b"multi" if self.conn(id).multi.is_some() => error("ERR MULTI calls can not be nested"),
            b"multi" => {
                self.conn(id).multi = Some(Vec::new());
                b"+OK\r\n".to_vec()
            }
            b"discard" | b"exec" if self.conn(id).multi.is_none() => error(&format!("ERR {} without MULTI", String::from_utf8_lossy(name).to_uppercase())),
            b"discard" => {
                let conn = self.conn(id);
                (conn.multi, conn.multi_dirty) = (None, false);
                conn.watched.clear();
                b"+OK\r\n".to_vec()
            }
            b"exec" => return self.exec(id),
            b"watch" if self.conn(id).multi.is_some() => error("ERR WATCH inside MULTI is not allowed"),
            b"watch" if args.len() < 2 => error("ERR wrong number of arguments for 'watch' command"),
            b"watch" => {
                let now = Self::now_ms();
                for key in &args[1..] {
                    let w = self.reactor.service.machine_mut().watch(key, now);
                    self.conn(id).watched.push(w);
                }
                b"+OK\r\n".to_vec()
            }
            _ => {
                self.conn(id).watched.clear();
                b"+OK\r\n".to_vec()
            }
        };
        self.conn(id).push(Slot::Ready(reply));
    }

    fn exec(&mut self, id: ConnId) {
        let conn = self.conn(id);
        let mut queued = conn.multi.take().expect("a transaction");
        let dirty = std::mem::take(&mut conn.multi_dirty);
        let watched = std::mem::take(&mut conn.watched);
        let protocol = conn.session.protocol;
        if dirty {
            conn.push(Slot::Ready(error("EXECABORT Transaction discarded because of previous errors.")));
            return;
        }
        let writes = queued.iter().any(|args| matches!(class(&args[0]), Class::Write | Class::Blocking));
        let refused = match queued.first().and_then(|args| self.moved(args)) {
            Some(reply) => Some(reply),
            None if writes && self.no_replicas().is_some() => self.no_replicas().map(|_| error("EXECABORT Transaction discarded because of: NOREPLICAS Not enough good replicas to write.")),
            None => self.short_of_room(&queued),
        };
        if let Some(reply) = refused {
            self.conn(id).push(Slot::Ready(reply));
            return;
        }
        // As Redis's execCommand, the ACL rules are checked again: a
        // command they no longer allow is not run, and its place in EXEC's
        // reply is the error (the rest run).
        let now = Self::now_ms();
        let (mut denied, mut at) = (Vec::new(), 0);
        let session = &self.conns[&id].session;
        queued.retain(|args| {
            let refused = self.local.acl_exec_refusal(session, args, now);
            if let Some(text) = &refused {
                denied.push((at, error(text)));
            }
            at += 1;
            refused.is_none()
        });
        let entry = self.proposer.transaction(now, protocol, watched, &queued);
        self.propose_into(id, entry, Slot::Exec(denied));
    }

    /// `-OOM` if the pool is too short of room for `commands` (a command or
    /// a transaction's) to be proposed: what is committed must apply on
    /// every member, and a member whose pool ran out while applying would
    /// halt (all members alike: a client filling the pool stopped the whole
    /// cluster). The room kept: a quarter of the pool, below which the
    /// engine checkpoints whole at every commit (`set_checkpoint_floor`;
    /// 300-640 ms of apply per 1 MiB SET were measured there, and the
    /// members lost their leader), plus the most a Raft log holds
    /// uncommitted (a quarter of it), which every member may have to
    /// apply. Commands that only remove ([`FREEING`]) always go.
    /// Before refusing, a checkpoint releases what deleted and overwritten
    /// values still hold.
    /// Redis's `-NOREPLICAS` for a write while `min-replicas-to-write` asks
    /// for more good replicas than this member knows in contact: the
    /// leader counts its followers recently active (as INFO's
    /// `connected_slaves`); a follower knows only itself in contact with
    /// the leader (1 while it knows a leader, 0 otherwise).
    fn no_replicas(&mut self) -> Option<Vec<u8>> {
        if self.local.config().min_replicas_to_write == 0 {
            return None;
        }
        let st = self.reactor.service.status();
        let good = if st.role == StateRole::Leader {
            let progress = self.reactor.service.progress();
            progress.iter().filter(|p| p.recent_active || p.state == raft::ProgressState::Replicate).count()
        } else {
            usize::from(st.leader != 0)
        };
        self.local.config_mut().good_replicas = u32::try_from(good).unwrap_or(u32::MAX);
        (!self.local.config().enough_replicas()).then(|| error("NOREPLICAS Not enough good replicas to write."))
    }

    fn short_of_room(&mut self, commands: &[Vec<Vec<u8>>]) -> Option<Vec<u8>> {
        self.short_of_room_for(commands.iter().map(|args| args.first().map_or(&[][..], Vec::as_slice)))
    }

    /// [`Member::short_of_room`] for commands named `names`.
    pub(super) fn short_of_room_for<'a>(&mut self, mut names: impl Iterator<Item = &'a [u8]>) -> Option<Vec<u8>> {
        // The common case (room enough) looks at two counters and nothing
        // else: it runs for every write.
        let keep = self.reactor.service.max_entry_bytes().unwrap_or(0);
        let store = self.reactor.service.machine_mut().keyspace().shared_store();
        let (mut free, total) = store.pool_room();
        let keep = total / 4 + keep;
        // The key index (the engine's B+tree) has a fixed number of nodes:
        // a member whose tree is full cannot apply a committed write, and
        // halts, so its room is kept as the pool's is.
        let (mut nodes_free, nodes) = store.tree_room();
        if (free >= keep && nodes_free >= nodes / 4) || names.all(|n| FREEING.iter().any(|f| n.eq_ignore_ascii_case(f))) {
            return None;
        }
        if self.room_checked.is_none_or(|at| at.elapsed() >= ROOM_CHECKPOINT_EVERY) {
            // Deleted and overwritten values hold their buffers until a
            // checkpoint: take one before refusing (at most one per
            // ROOM_CHECKPOINT_EVERY: a whole checkpoint holds the loop).
            self.room_checked = Some(Instant::now());
            free = store.release_room().0;
            nodes_free = store.tree_room().0;
        }
        if free < keep {
            return Some(error(&format!(
                "OOM command not allowed: the persistent pool has {free} B free, below the {keep} B a member keeps so that every member can apply what is committed; DEL, UNLINK or FLUSHALL free room"
            )));
        }
        (nodes_free < nodes / 4).then(|| {
            error(&format!(
                "OOM command not allowed: the key index has {nodes_free} of its {nodes} nodes free, below the quarter a member keeps so that every member can apply what is committed; DEL, UNLINK or FLUSHALL free room"
            ))
        })
    }

    /// ROLE: Redis's array.
    fn role(&self) -> Vec<u8> {
        let st = self.reactor.service.status();
        if st.role == StateRole::Leader {
            let progress = self.reactor.service.progress();
            let mut out = format!("*3\r\n$6\r\nmaster\r\n:{}\r\n*{}\r\n", st.applied, progress.len());
            for p in progress {
                let (ip, port) = self.peers.get(&p.id).map_or(("?".to_string(), "0".to_string()), |a| (a.ip().to_string(), a.port().to_string()));
                let offset = p.matched.to_string();
                out += &format!("*3\r\n${}\r\n{ip}\r\n${}\r\n{port}\r\n${}\r\n{offset}\r\n", ip.len(), port.len(), offset.len());
            }
            return out.into_bytes();
        }
        let (ip, port) = self.peers.get(&st.leader).map_or(("?".to_string(), 0), |a| (a.ip().to_string(), a.port()));
        let state = if st.leader == 0 { "connect" } else { "connected" };
        format!("*5\r\n$5\r\nslave\r\n${}\r\n{ip}\r\n:{port}\r\n${}\r\n{state}\r\n:{}\r\n", ip.len(), state.len(), st.applied).into_bytes()
    }

    /// Gives the local executor's INFO this member's sections.
    fn set_info_sections(&mut self) {
        let replication = self.info_replication();
        let body = replication.strip_prefix("# Replication\r\n").unwrap_or(&replication).to_string();
        let ks = self.reactor.service.machine_mut().keyspace();
        let (keys, expires) = (ks.len(), ks.expiring_len());
        let keyspace = if keys > 0 { format!("db0:keys={keys},expires={expires},avg_ttl=0\r\n") } else { String::new() };
        self.local.set_info_section("replication", body);
        self.local.set_info_section("keyspace", keyspace);
        let st = &self.stats;
        let stats = format!(
            "total_commands_processed:{}\r\nraft_proposals:{}\r\nraft_proposal_turns:{}\r\nraft_forwarded:{}\r\nraft_read_indexes:{}\r\nstale_reads:{}\r\nstreamed_commands:{}\r\nstreamed_pieces:{}\r\nstreams_cut:{}\r\n",
            st.commands, st.proposals, st.proposal_turns, st.forwarded, st.read_indexes, st.stale_reads, st.streams, st.pieces, st.streams_cut
        );
        self.local.set_info_section("stats", stats);
    }

    /// INFO replication's section, Redis's field style.
    fn info_replication(&self) -> String {
        let st = self.reactor.service.status();
        let mut out = String::from("# Replication\r\n");
        if st.role == StateRole::Leader {
            let progress = self.reactor.service.progress();
            out += "role:master\r\n";
            // Online: the leader streams the log to it (Replicate) or heard
            // from it within the election timeout.
            let online = |p: &pmwire_smr::node::FollowerProgress| p.recent_active || p.state == raft::ProgressState::Replicate;
            out += &format!("connected_slaves:{}\r\n", progress.iter().filter(|p| online(p)).count());
            for (i, p) in progress.iter().enumerate() {
                let (ip, port) = self.peers.get(&p.id).map_or(("?".to_string(), 0), |a| (a.ip().to_string(), a.port()));
                let state = if online(p) { "online" } else { "wait_bgsave" };
                out += &format!("slave{i}:ip={ip},port={port},state={state},offset={},lag={}\r\n", p.matched, st.last_index.saturating_sub(p.matched));
            }
        } else {
            let (ip, port) = self.peers.get(&st.leader).map_or(("?".to_string(), 0), |a| (a.ip().to_string(), a.port()));
            out += "role:slave\r\n";
            out += &format!("master_host:{ip}\r\nmaster_port:{port}\r\n");
            out += &format!("master_link_status:{}\r\n", if st.leader == 0 { "down" } else { "up" });
            out += &format!("slave_repl_offset:{}\r\n", st.applied);
        }
        out += &format!("master_repl_offset:{}\r\n", st.applied);
        out += &format!("raft_member_id:{}\r\nraft_term:{}\r\nraft_commit_index:{}\r\nraft_last_index:{}\r\n", st.id, st.term, st.commit, st.last_index);
        out += &crate::member_liveness::info(self.reactor.service.liveness(), self.reactor.service.counters());
        out
    }

    /// A request's arguments copied out of the receive buffers (a write's
    /// value bytes counted).
    fn copy_args(&self, req: &pmwire_resp::request::Request<'_>) -> Vec<Vec<u8>> {
        if class(req.arg(0)) == Class::Write {
            let values: u64 = (2..req.len()).map(|i| req.arg_len(i) as u64).sum();
            self.copies.add(|c| c.rx_args += values);
        }
        req.args().map(<[u8]>::to_vec).collect()
    }

    /// Runs a read at the head of a connection's queue.
    fn run_read(&mut self, id: ConnId, args: &[Vec<u8>]) -> Vec<u8> {
        match self.read_pieces(id, args) {
            Ok(pieces) => {
                let ks = self.reactor.service.machine_mut().keyspace();
                let mut out = Gather { ks, out: Vec::new() };
                for piece in pieces {
                    match piece {
                        Piece::Bytes(b) => out.bytes(&b),
                        Piece::Value(h, len) => out.value(&h, len),
                    }
                }
                std::mem::take(&mut out.out)
            }
            Err(reply) => reply,
        }
    }

    /// Runs a read: its reply as bytes and value handles (valid until the
    /// keyspace next writes: the caller sends or gathers them at once), or
    /// the error reply.
    fn read_pieces(&mut self, id: ConnId, args: &[Vec<u8>]) -> Result<Vec<Piece>, Vec<u8>> {
        let now = Self::now_ms();
        let conn = self.conns.get_mut(&id).expect("the connection");
        let machine = self.reactor.service.machine_mut();
        let mut capture = Capture::default();
        // Counted in this member's INFO, and shown to its monitors.
        self.local.swap_stats_with(&mut self.reads);
        let result = with_request(args, |req| {
            let result = machine.read(&mut self.reads, &mut conn.session, now, req, &mut capture);
            self.local.feed_monitors_for(&conn.session, now, req);
            result
        });
        self.local.swap_stats_with(&mut self.reads);
        machine.keyspace().end_entry();
        match result {
            Ok(_) => Ok(capture.pieces),
            Err(e) => Err(error(&format!("ERR {e}"))),
        }
    }

    /// A read's reply into `out`: in zero-copy mode a value goes by its
    /// pool extents (the loop retains each buffer when it takes the reply,
    /// and nothing writes the keyspace before it does), so a large GET
    /// copies nothing; otherwise gathered.
    fn read_into(&mut self, id: ConnId, args: &[Vec<u8>], out: &mut pmwire_netio::Output) {
        if self.mode != Mode::ZeroCopy {
            out.push_bytes(&self.run_read(id, args));
            return;
        }
        match self.read_pieces(id, args) {
            Ok(pieces) => {
                for piece in pieces {
                    match piece {
                        Piece::Bytes(b) => out.push_bytes(&b),
                        Piece::Value(h, _) => h.iter().for_each(|e| out.push_buf(e.buf_idx, u32::from(e.offset), u32::from(e.len))),
                    }
                }
            }
            Err(reply) => out.push_bytes(&reply),
        }
    }

    /// Moves each connection's answered prefix into `out` (true if the
    /// connection is to close after it).
    fn flush(&mut self, id: ConnId, out: &mut pmwire_netio::Output) -> bool {
        loop {
            let Some(conn) = self.conns.get_mut(&id) else { return false };
            let http = conn.http.is_some();
            let reply = match conn.queue.front_mut() {
                Some(Slot::Ready(bytes)) => std::mem::take(bytes),
                Some(Slot::Read(args)) if !http => {
                    let args = std::mem::take(args);
                    self.read_into(id, &args, out);
                    let conn = self.conns.get_mut(&id).expect("the connection");
                    conn.queue.pop_front();
                    conn.head += 1;
                    continue;
                }
                Some(Slot::Read(args)) => {
                    let args = std::mem::take(args);
                    self.run_read(id, &args)
                }
                _ => return conn.queue.is_empty() && conn.close_after_flush,
            };
            let conn = self.conns.get_mut(&id).expect("the connection");
            match conn.http.as_mut().and_then(VecDeque::pop_front) {
                Some((want, keep)) => out.push_bytes(&http::translate(want, keep, &reply)),
                None => out.push_bytes(&reply),
            }
            conn.queue.pop_front();
            conn.head += 1;
        }
    }

    /// The replica's turns, then what they finished.
    fn drive(&mut self) {
        if std::mem::take(&mut self.proposed_this_turn) {
            self.stats.proposal_turns += 1;
        }
        let monitoring = self.local.has_monitors();
        self.reactor.service.machine_mut().set_monitoring(monitoring);
        // A second round of turns sends what a finished piece let its
        // stream propose (its next pieces, or its command) at once.
        for _round in 0..2 {
            for _ in 0..TURNS_PER_WAKEUP {
                let now = self.now();
                if !self.reactor.turn(now) {
                    break;
                }
            }
            self.maybe_sweep();
            self.learn_peers();
            self.take_in_applied();
            let mut pieces_done = false;
            for (ticket, done) in self.reactor.service.take_done() {
                if self.sweep == Some(ticket) {
                    self.sweep = None;
                    continue;
                }
                match self.tickets.remove(&ticket) {
                    Some(Owner::Slot(id, seq)) => self.slot_done(id, seq, done),
                    Some(Owner::Block(w)) => self.attempt_done(w, done),
                    Some(Owner::Piece(key, bytes)) => {
                        self.piece_done(key, bytes, done);
                        pieces_done = true;
                    }
                    None => {}
                }
            }
            if !pieces_done {
                break;
            }
        }
        self.wake_blocked();
        self.check_waits();
        if self.reactor.service.halted().is_some() {
            // A halted replica takes no turn again (its machine refused a
            // committed entry, or it was removed): stop serving, so the
            // process exits with the reason (`MemberServer::halted`) rather
            // than answering CLUSTERDOWN forever while its overdue tick
            // keeps the loop awake.
            if let Some(stop) = self.halt_stop.take() {
                stop.stop();
            }
        }
    }

    /// What the entries applied in this drive published, to this member's
    /// own subscribers (every member delivers every entry's messages), and
    /// their commands' statistics, into this member's INFO.
    fn take_in_applied(&mut self) {
        // INFO commandstats and errorstats count what the machine applied.
        let applied = self.reactor.service.machine_mut().stats_mut();
        if !applied.is_empty() {
            self.local.absorb_stats(applied);
        }
        let published = self.reactor.service.machine_mut().take_published();
        let lines = self.reactor.service.machine_mut().take_monitor_lines();
        for p in &published {
            self.local.deliver_published(p);
        }
        for line in &lines {
            self.local.feed_monitor_line(line);
        }
        self.route_pushes();
    }

    /// A proposal's or read's outcome, into its connection's slot.
    fn slot_done(&mut self, id: ConnId, seq: u64, mut done: Done<pmwire_kv_cluster::Applied>) {
        if let Done::Applied { output, .. } = &mut done {
            // A PUBLISH answers how many of this member's subscribers it
            // reached (the machine answered 0, the same on every member).
            if let Some((channel, shard)) = output.publish_reply.take() {
                if output.reply.first() == Some(&b':') {
                    output.reply = format!(":{}\r\n", self.local.publish_receivers(&channel, shard)).into_bytes();
                }
            }
        }
        {
            let Some(conn) = self.conns.get_mut(&id) else { return };
            if let Done::Applied { index, .. } = &done {
                conn.last_write = conn.last_write.max(*index);
            }
            let Some(slot) = conn.slot(seq) else { return };
            *slot = match (std::mem::replace(slot, Slot::Write), done) {
                (Slot::Exec(denied), Done::Applied { output, .. }) => Slot::Ready(splice_exec(output.reply, denied)),
                (_, Done::Applied { output, .. }) => Slot::Ready(output.reply),
                (Slot::ReadWait(args), Done::Readable { .. }) => Slot::Read(args),
                (_, Done::Failed(f)) => Slot::Ready(failure_reply(f, &mut self.stats)),
                (_, Done::Readable { .. }) => unreachable!("a write's ticket is never readable"),
            };
        }
        self.to_wake.push(id);
    }

    /// Members added since start (`pmwire smr add`): their peer addresses,
    /// as the replica recorded them, for ROLE, INFO and refusals.
    fn learn_peers(&mut self) {
        for (&id, bytes) in &self.reactor.service.own_state().members {
            let Some(addr) = std::str::from_utf8(bytes).ok().and_then(|a| a.parse::<SocketAddr>().ok()) else { continue };
            if self.peers.get(&id) != Some(&addr) {
                self.peers.insert(id, addr);
            }
        }
    }

    fn maybe_sweep(&mut self) {
        if self.sweep.is_some() || self.reactor.service.status().role != StateRole::Leader {
            return;
        }
        let now = Self::now_ms();
        if now < self.next_sweep_check_ms {
            return;
        }
        if !self.reactor.service.machine_mut().sweep_due(now) {
            self.next_sweep_check_ms = now + SWEEP_CHECK_MS;
            return;
        }
        let entry = self.proposer.sweep(now, SWEEP_BUDGET, SWEEP_BUDGET);
        if let Ok(ticket) = self.reactor.service.propose(entry) {
            self.stats.sweeps += 1;
            self.sweep = Some(ticket);
        }
    }
}

/// The segments of `segments` past their first `skip` bytes.
fn after<'a>(segments: &[Segment<'a>], mut skip: usize) -> Vec<Segment<'a>> {
    let mut out = Vec::with_capacity(segments.len());
    for s in segments {
        if skip >= s.bytes.len() {
            skip -= s.bytes.len();
            continue;
        }
        let off = u32::try_from(skip).expect("a segment is shorter than 4 GiB");
        out.push(Segment { buf: s.buf, offset: s.offset + off, bytes: &s.bytes[skip..] });
        skip = 0;
    }
    out
}

/// A read's reply pieces: bytes, and engine values to gather after.
#[derive(Default)]
struct Capture {
    pieces: Vec<Piece>,
}

enum Piece {
    Bytes(Vec<u8>),
    Value(Handle, u64),
}

impl ReplySink<Handle> for Capture {
    fn bytes(&mut self, data: &[u8]) {
        match self.pieces.last_mut() {
            Some(Piece::Bytes(b)) => b.extend_from_slice(data),
            _ => self.pieces.push(Piece::Bytes(data.to_vec())),
        }
    }

    fn value(&mut self, value: &Handle, len: u64) {
        self.pieces.push(Piece::Value(value.clone(), len));
    }
}

impl<T: Transport<Addr = SocketAddr>> Service<SharedStore> for Member<T> {
    fn handle(&mut self, batch: &mut Batch, _bufs: &mut SharedStore) {
        for i in 0..batch.len() {
            let (input, reply) = batch.split(i);
            let id = input.conn;
            if input.listener != 0 {
                self.http_input(&input, reply);
                continue;
            }
            if !self.conns.contains_key(&id) {
                let session = self.conn(id).session.id();
                self.local.set_client_addrs(session, input.addrs.peer, input.addrs.local, input.addrs.fd);
            }
            // Parses at most `Limits::max_commands` requests a call: again
            // after what it consumed until the input is parsed or the
            // connection's queue is full (its input is then held, and read
            // again once the queue drains: below).
            let mut done = 0;
            loop {
                let conn = self.conn(id);
                if conn.close_after_flush {
                    break;
                }
                if conn.backlog() >= MAX_QUEUE {
                    reply.held = done < input.len_bytes();
                    break;
                }
                // Only input past 1,024 commands needs its segments cut.
                let cut;
                let segments = if done == 0 {
                    input.segments
                } else {
                    cut = after(input.segments, done);
                    &cut[..]
                };
                let segs: Vec<&[u8]> = segments.iter().map(|s| s.bytes).collect();
                let mut parsed = std::mem::take(&mut self.parsed);
                let summary = parsed.parse(&segs);
                self.stats.commands += summary.commands as u64;
                for j in 0..summary.commands {
                    let req = parsed.request(&segs, j);
                    if !self.zero_copy_write(id, &req, segments) {
                        self.serve_or_hold(id, self.copy_args(&req));
                    }
                }
                self.parsed = parsed;
                done += summary.consumed;
                if let Some(e) = summary.error {
                    let conn = self.conn(id);
                    conn.push(Slot::Ready(e.reply()));
                    conn.close_after_flush = true;
                    break;
                }
                if let Some(wanted) = summary.wanted {
                    if wanted > MAX_REQUEST_BYTES {
                        let conn = self.conn(id);
                        conn.push(Slot::Ready(error("ERR Protocol error: request too large")));
                        conn.close_after_flush = true;
                    } else {
                        reply.wanted = wanted;
                    }
                    break;
                }
                if !summary.limited {
                    break;
                }
            }
            reply.consumed = done;
        }
        self.drive();
        for i in 0..batch.len() {
            let (input, reply) = batch.split(i);
            let close = self.flush(input.conn, &mut reply.output);
            reply.close |= close;
            // Input held behind a full queue that has now drained: woken to
            // be read, since its client may send nothing more until answered.
            if reply.held && self.conns.get(&input.conn).is_some_and(|c| c.backlog() < MAX_QUEUE && !c.close_after_flush) {
                self.to_wake.push(input.conn);
            }
        }
        // MONITOR lines of the reads just served.
        self.route_pushes();
    }

    fn closed(&mut self, conn: ConnId, _bufs: &mut SharedStore) {
        if let Some(c) = self.conns.remove(&conn) {
            if let Some(w) = c.blocked {
                self.parked.remove(w);
            }
            if c.streaming {
                self.drop_streams_of(conn);
            }
            self.local.close_session(c.session);
        }
        self.waits.retain(|w| w.conn != conn);
    }

    fn wakeups(&mut self, wake: &mut Vec<ConnId>) -> Option<Instant> {
        self.drive();
        wake.append(&mut self.to_wake);
        wake.sort_unstable();
        wake.dedup();
        // The replica's next tick, or the links' next timer (a ping, a
        // handshake's deadline, a re-dial), whichever comes first; both
        // as instants from this member's origin (the links' clock started a
        // moment before it: a link timer may fire that moment late).
        let next = [self.reactor.service.next_deadline(), self.reactor.transport.next_deadline()].into_iter().flatten().min()?;
        let timers = [self.parked.next_deadline(), wait::next_deadline(&self.waits)].into_iter().flatten().min();
        Some(timers.map_or(self.origin + next, |t| t.min(self.origin + next)))
    }

    fn limits(&self) -> ConnLimits {
        client_limits(self.local.config())
    }

    /// Redis spares blocked clients (a blocking pop, `WAIT`, here also a
    /// write waiting for its commit) and subscribers.
    fn idle_closable(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_none_or(|c| c.blocked.is_none() && !self.local.is_subscribed(c.session.id())) && !self.waits.iter().any(|w| w.conn == conn)
    }

    fn watch(&mut self) -> Watch {
        if self.reactor.service.has_done() {
            return Watch::Ready;
        }
        match self.reactor.transport.event_fd() {
            EventFd::Ready => Watch::Ready,
            EventFd::Armed(fd) => Watch::Fd(fd),
            EventFd::Unsupported => Watch::Nothing,
        }
    }
}

/// What `pmwire kv --cluster` serves.
#[derive(Clone, Debug)]
pub struct MemberOptions {
    /// The keyspace's pool file; the Raft store is `<pool>.raft`, the lock `<pool>.lock`.
    pub pool: std::path::PathBuf,
    /// Size of a new keyspace pool.
    pub size: u64,
    /// Size of a new Raft pool.
    pub raft_size: u64,
    /// The Raft log's capacity in its pool.
    pub raft_log_bytes: u64,
    /// RESP listen address.
    pub resp: SocketAddr,
    /// HTTP listen address (answered 501 for now).
    pub http: SocketAddr,
    /// This member's id.
    pub id: u64,
    /// Every member's peer address, this one's included.
    pub peers: BTreeMap<u64, SocketAddr>,
    /// The cluster id written into a new Raft pool and checked after.
    pub cluster: u64,
    /// One Raft tick.
    pub tick: Duration,
    /// The default user's password.
    pub requirepass: Option<Vec<u8>>,
    /// Redis's protected mode.
    pub protected_mode: bool,
    /// `--redirect moved`: every member's RESP address; a follower then
    /// answers `-MOVED` to the leader's instead of forwarding. `None`:
    /// followers forward (the default).
    pub redirect: Option<BTreeMap<u64, SocketAddr>>,
    /// How values travel from the socket into the log and the keyspace
    /// ([`Mode::ZeroCopy`]: by their extents, `member::zc`; [`Mode::Copy`]:
    /// copied at every stage).
    pub mode: Mode,
    /// A new Raft pool is formatted with no voters: the member waits to
    /// be added (`pmwire smr add`), never campaigning.
    pub join: bool,
}

/// Why a member could not start.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// The keyspace's pool.
    #[error("keyspace pool: {0}")]
    Store(#[from] crate::store::StoreError),
    /// The machine's state in the pool.
    #[error("keyspace pool: {0}")]
    Machine(#[from] pmwire_kv_cluster::OpenError),
    /// The Raft pool.
    #[error("raft pool {path}: {why}")]
    Raft {
        /// Its path.
        path: std::path::PathBuf,
        /// Why.
        why: String,
    },
    /// Another process holds the pools.
    #[error("{0} is in use by another member process (it holds the lock); one member per pool")]
    Locked(std::path::PathBuf),
    /// I/O (the lock file).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The loop.
    #[error(transparent)]
    Server(#[from] pmwire_netio::ServerError),
}

/// Locks `path` for this process (released when the file closes).
fn lock(path: &std::path::Path) -> Result<std::fs::File, MemberError> {
    pmem::lock::lock_file(path, true).map_err(|e| match e {
        pmem::lock::LockError::Held(p) => MemberError::Locked(p),
        pmem::lock::LockError::Open(_, io) => io.into(),
    })
}

fn raft_path(pool: &std::path::Path) -> std::path::PathBuf {
    let mut p = pool.as_os_str().to_owned();
    p.push(".raft");
    p.into()
}

fn open_raft(options: &MemberOptions) -> Result<PmemDurable<Region>, MemberError> {
    use pmwire_smr::pmem_store::OpenError;
    let path = raft_path(&options.pool);
    let fail = |why: String| MemberError::Raft { path: path.clone(), why };
    let region_options = pmem::RegionOptions { size: Some(options.raft_size), create: true, ..pmem::RegionOptions::default() };
    // Every page faulted in now, as the keyspace's pool is: the first
    // snapshot written into a slot of a fresh pool otherwise allocated and
    // zeroed its pages (on tmpfs) inside the loop's compaction steps, half
    // the CPU of a new member's catch-up.
    let populated = |region: Result<Region, pmem::RegionError>| {
        let mut region = region.map_err(|e| fail(e.to_string()))?;
        region.populate();
        Ok::<_, MemberError>(region)
    };
    let region = populated(Region::open(&path, region_options.clone()))?;
    match PmemDurable::open(region, options.cluster, options.id) {
        Ok(store) => Ok(store),
        Err(OpenError::NotFormatted(_)) => {
            let region = populated(Region::open(&path, region_options))?;
            let voters: Vec<u64> = if options.join { Vec::new() } else { options.peers.keys().copied().collect() };
            let log = pmwire_log::LogConfig::new(options.raft_log_bytes, pmwire_log::TailStrategy::SelfValidating);
            PmemDurable::format(region, options.cluster, options.id, &voters, log).map_err(|e| fail(format!("format: {e}")))
        }
        Err(e) => Err(fail(format!("{e} (not overwriting it)"))),
    }
}

/// A member, bound and recovered, not yet running.
pub struct MemberServer<T: Transport<Addr = SocketAddr>> {
    server: pmwire_netio::Server<SharedStore, Member<T>>,
    _lock: std::fs::File,
    /// What opening the keyspace's pool found.
    pub recovered: crate::store::Recovered,
}

impl<T: Transport<Addr = SocketAddr>> MemberServer<T> {
    /// Opens both pools (locked), the replica over `transport` (listening
    /// at this member's peer address already) wrapped in authenticated
    /// links, and binds the RESP and HTTP listeners.
    pub fn open(options: &MemberOptions, mut transport: T, secret: link::Secret) -> Result<MemberServer<T>, MemberError> {
        let lock = lock(&options.pool.with_extension("lock"))?;
        if options.mode == Mode::NoPersist {
            return Err(MemberError::Raft { path: options.pool.clone(), why: "--mode no-persist is not served by a cluster member (zero-copy or copy)".into() });
        }
        let durable = open_raft(options)?;
        let log_refs = crate::member_zc::log_refs(&durable).map_err(|why| MemberError::Raft { path: raft_path(&options.pool), why })?;
        let (mut store, recovered) = crate::store::Store::open_with_refs(&options.pool, options.size, options.mode, &log_refs)?;
        store.engine.set_checkpoint_words(CHECKPOINT_WORDS);
        store.engine.set_checkpoint_slice(CHECKPOINT_SLICE);
        if recovered.created && !log_refs.is_empty() {
            return Err(MemberError::Raft { path: raft_path(&options.pool), why: format!("its log names {} values in a keyspace pool that was just created: not this member's pool", log_refs.len()) });
        }
        crate::member_zc::verify(&store, &durable).map_err(|why| MemberError::Raft { path: raft_path(&options.pool), why })?;
        let sizing = store.sizing();
        let store = SharedStore::new(store);
        let cap = crate::store::connection_cap();
        let config = ServerConfig {
            tcp_port: options.resp.port(),
            requirepass: options.requirepass.clone(),
            protected_mode: options.protected_mode,
            maxclients: crate::store::DEFAULT_MAXCLIENTS.min(cap),
            maxclients_cap: cap,
            bind: options.resp.ip().to_string(),
            maxmemory_enforced: false,
            ..ServerConfig::default()
        };
        // The member's door checks the password (RESP AUTH, HTTP Bearer);
        // the machine runs entries of authenticated sessions only, so its
        // executor has none (with one, every entry answered NOAUTH).
        let machine_config = ServerConfig { requirepass: None, ..config.clone() };
        let copies = CopyCounters::new();
        if options.mode == Mode::ZeroCopy {
            // Peers' messages are received into the pool (`crate::rx_arena`);
            // a transport that cannot (UCX) receives into its own memory.
            transport.lend_rx(Box::new(crate::rx_arena::PoolArena::new(store.clone(), copies.clone())));
        }
        let machine = RedisMachine::open(ClusterKeyspace::shared(store.clone(), copies), machine_config)?;
        let mut rc = pmwire_smr::node::ReplicaConfig::new(options.id);
        rc.tick = options.tick;
        rc.leader_compaction_intervals = crate::member_liveness::LEADER_COMPACTION_INTERVALS;
        // The seed also gives this incarnation's nonce (forwarded
        // proposals): the process id and the time make it new per start.
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        rc.seed = u64::from(std::process::id()) ^ options.id.rotate_left(32) ^ nanos.rotate_left(17);
        let others: BTreeMap<u64, SocketAddr> = options.peers.iter().filter(|(&id, _)| id != options.id).map(|(&id, &a)| (id, a)).collect();
        let link_config = pmwire_smr::links::replica_link(&rc);
        let transport = LinkTransport::real(transport, secret, link_config);
        let replica = Replica::with_machine(rc, durable, machine, others).map_err(|e| MemberError::Raft { path: raft_path(&options.pool), why: e.to_string() })?;
        let mut member = Member::new(Reactor::new(transport, replica), options.peers.clone(), config);
        member.redirect = options.redirect.clone();
        let net = pmwire_netio::Config {
            ring_entries: sizing.ring_entries,
            max_connections: cap,
            rx_budget_buffers: sizing.rx_budget,
            reject_reply: crate::store::reject_replies(),
            max_rx_bytes: crate::store::MAX_RX_BYTES,
            ..pmwire_netio::Config::default()
        };
        let mut server = pmwire_netio::Server::bind_all(&[options.resp, options.http], net, store, member)?;
        server.service_mut().halt_stop = Some(server.stop_handle());
        Ok(MemberServer { server, _lock: lock, recovered })
    }

    /// The bound RESP and HTTP addresses.
    pub fn addrs(&self) -> (SocketAddr, SocketAddr) {
        let a = self.server.local_addrs();
        (a[0], a[1])
    }

    /// `maxclients` and the idle `timeout` in seconds (0: none), as
    /// redis-server's `--maxclients` and `--timeout`; the `maxclients` in
    /// effect (lowered to what the process's descriptors allow).
    pub fn set_client_limits(&mut self, maxclients: u32, timeout_s: u32) -> u32 {
        let config = self.server.service_mut().local.config_mut();
        config.maxclients = maxclients.min(config.maxclients_cap);
        config.timeout_s = timeout_s;
        config.maxclients
    }

    /// Stops `run` from another thread.
    pub fn stop_handle(&self) -> pmwire_netio::StopHandle {
        self.server.stop_handle()
    }

    /// Serves until stopped.
    pub fn run(&mut self) -> Result<(), MemberError> {
        Ok(self.server.run()?)
    }

    /// Why the member's replica halted, if it did (`run` then returns).
    pub fn halted(&self) -> Option<&str> {
        self.member().replica().halted()
    }

    /// The member.
    pub fn member(&self) -> &Member<T> {
        self.server.service()
    }
}

/// EXEC's reply `reply` (`*N` and its N replies) with `denied` put in at
/// their positions (ascending), as Redis's execCommand answers the queued
/// commands the ACL rules no longer allow; any other reply (a WATCH's nil,
/// an error) as it is.
fn splice_exec(reply: Vec<u8>, denied: Vec<(usize, Vec<u8>)>) -> Vec<u8> {
    if denied.is_empty() || reply.first() != Some(&b'*') {
        return reply;
    }
    let Some(eol) = reply.windows(2).position(|w| w == b"\r\n") else { return reply };
    // `*-1` (a WATCH's abort) does not parse as a count.
    let Some(n) = std::str::from_utf8(&reply[1..eol]).ok().and_then(|s| s.parse::<usize>().ok()) else { return reply };
    let total = n + denied.len();
    let mut out = format!("*{total}\r\n").into_bytes();
    let mut at = eol + 2;
    let mut denied = denied.into_iter().peekable();
    for pos in 0..total {
        if let Some((_, text)) = denied.next_if(|(p, _)| *p == pos) {
            out.extend_from_slice(&text);
            continue;
        }
        let Ok(Some((len, _))) = pmwire_resp::client::reply_len(&reply[at..]) else { return reply };
        out.extend_from_slice(&reply[at..at + len]);
        at += len;
    }
    out
}

#[cfg(test)]
mod splice_tests {
    use super::splice_exec;

    #[test]
    fn refused_commands_take_their_places_in_exec_s_reply() {
        let e = |t: &str| format!("-{t}\r\n").into_bytes();
        let reply = b"*2\r\n+OK\r\n*1\r\n:1\r\n".to_vec();
        assert_eq!(splice_exec(reply.clone(), vec![(0, e("NOPERM a")), (3, e("NOPERM b"))]), b"*4\r\n-NOPERM a\r\n+OK\r\n*1\r\n:1\r\n-NOPERM b\r\n".to_vec());
        assert_eq!(splice_exec(reply.clone(), vec![(1, e("NOPERM a"))]), b"*3\r\n+OK\r\n-NOPERM a\r\n*1\r\n:1\r\n".to_vec());
        assert_eq!(splice_exec(b"*0\r\n".to_vec(), vec![(0, e("x")), (1, e("y"))]), b"*2\r\n-x\r\n-y\r\n".to_vec());
        // A WATCH's abort, RESP2 and RESP3, and an error stay as they are.
        for r in [&b"*-1\r\n"[..], b"_\r\n", b"-EXECABORT no\r\n"] {
            assert_eq!(splice_exec(r.to_vec(), vec![(0, e("x"))]), r.to_vec());
        }
    }
}
