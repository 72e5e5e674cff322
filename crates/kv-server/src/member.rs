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
//! flushed in order as their answers come):
//! - a write ([`Class::Write`], and a name the tables do not know, which the
//!   machine answers as the executor does) becomes an entry
//!   ([`Proposer::command`]) proposed on the leader; its reply is the
//!   machine's output once the entry is applied (committed on a majority).
//!   Every proposal of one loop turn goes into one Raft `Ready` (one append
//!   batch): group commit ([`MemberStats::proposal_turns`]);
//! - a read waits for a ReadIndex ([`Replica::read_index`]) and then runs
//!   through [`RedisMachine::read`] when it reaches the head of its
//!   connection's queue (so a read after a pending write sees it);
//!   `READONLY` serves reads from the member's applied state at once
//!   (possibly stale), `READWRITE` undoes it;
//! - MULTI queues here; EXEC becomes one entry ([`Proposer::transaction`])
//!   with the connection's WATCH records ([`RedisMachine::watch`]);
//! - connection-local commands (AUTH, HELLO, CLIENT, PING, ECHO, SELECT, …)
//!   run on the member's own executor; `INFO replication` and `ROLE`
//!   answer from the replica's status and progress;
//! - a proposal or read that no majority confirms within the replica's
//!   bound ([`smr::node::Failure::NoQuorum`]) is answered
//!   `-CLUSTERDOWN The cluster is down: <reason>`, never with a stale or
//!   unreplicated answer;
//! - on a follower, writes and linearizable reads are refused with
//!   `-READONLY` naming the leader (forwarding to the leader is not built
//!   yet); blocking commands are refused (their parking is not built yet).
//!
//! Expiry: the leader proposes a sweep entry when
//! [`RedisMachine::sweep_due`] says so, one at a time.
//!
//! Bounds: at most [`MAX_QUEUE`] unanswered requests per connection (the
//! connection is not read further meanwhile), requests up to
//! [`MAX_REQUEST_BYTES`], [`MAX_MULTI`] queued commands per transaction.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use link::LinkTransport;
use pmem::Region;
use pmwire_keyspace::exec::{Server as RespServer, ServerConfig, Session};
use pmwire_keyspace::store::{Keyspace, MemKeyspace};
use pmwire_kv_cluster::commands::{class, Class};
use pmwire_kv_cluster::{MachineKeyspace, Proposer, RedisMachine, Watched};
use pmwire_netio::{Batch, ConnId, HeapBuffers, Service, Watch};
use pmwire_resp::reply::ReplySink;
use pmwire_resp::request::{Limits as RespLimits, Parsed};
use pmwire_smr::node::{Done, Failure, Replica, Ticket};
use pmwire_smr::pmem_store::PmemDurable;
use raft::StateRole;
use reactor::{Reactor, Service as _};
use transport::{EventFd, Transport};

use crate::cluster::ClusterKeyspace;
use crate::keyspace::Handle;

/// The replicated machine of a member.
pub type Machine = RedisMachine<ClusterKeyspace>;
/// A member's replica over a transport.
pub type MemberReplica<T> = Replica<LinkTransport<T>, PmemDurable<Region>, Machine>;

/// Most unanswered requests a connection may have queued.
pub const MAX_QUEUE: usize = 1024;
/// Largest request (all its arguments) a member takes.
pub const MAX_REQUEST_BYTES: usize = 64 << 20;
/// Most commands one MULTI may queue.
pub const MAX_MULTI: usize = 4096;
/// Most replica turns one wake-up runs before it answers clients.
const TURNS_PER_WAKEUP: usize = 64;
/// Expired keys and collection chunks one sweep entry deletes at most.
const SWEEP_BUDGET: u32 = 64;
/// WAL words after which a member's engine checkpoints
/// ([`pmwire_kv::Engine::set_checkpoint_words`]): a checkpoint of half the
/// default WAL (about 17 K SETs on a 256 MB pool) held the loop 140-210 ms,
/// past the 100 ms election timeout, and the cluster lost its leader under
/// load; 8 Ki words (about 2,700 SETs of one extent) keep each one short.
pub const CHECKPOINT_WORDS: u64 = 8192;

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
}

/// Where a request's reply stands.
enum Slot {
    /// The reply, ready to send.
    Ready(Vec<u8>),
    /// A proposal in flight.
    Write,
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
    tickets: HashMap<Ticket, (ConnId, u64)>,
    sweep: Option<Ticket>,
    parsed: Parsed,
    to_wake: Vec<ConnId>,
    peers: BTreeMap<u64, SocketAddr>,
    stats: MemberStats,
    proposed_this_turn: bool,
}

fn cluster_down(reason: &str) -> Vec<u8> {
    format!("-CLUSTERDOWN The cluster is down: {reason}\r\n").into_bytes()
}

fn error(text: &str) -> Vec<u8> {
    format!("-{text}\r\n").into_bytes()
}

fn failure_text(f: Failure) -> &'static str {
    match f {
        Failure::NoQuorum => "no majority confirmed the request in time",
        Failure::LeadershipLost => "leadership was lost (the write may or may not be applied)",
        Failure::NotProposed => "leadership was lost before the write reached the log (it is not applied)",
        Failure::Halted => "this member halted",
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
        Member {
            reactor,
            origin: Instant::now(),
            proposer,
            local: RespServer::new(config.clone()),
            scratch: MemKeyspace::new(),
            reads: RespServer::new(config),
            conns: HashMap::new(),
            tickets: HashMap::new(),
            sweep: None,
            parsed: Parsed::new(RespLimits::default()),
            to_wake: Vec::new(),
            peers,
            stats: MemberStats::default(),
            proposed_this_turn: false,
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
        })
    }

    /// Who leads, for a refusal.
    fn leader_text(&self) -> String {
        let leader = self.reactor.service.status().leader;
        match self.peers.get(&leader) {
            Some(addr) if leader != 0 => format!("member {leader} (peer address {addr})"),
            _ => "not known".into(),
        }
    }

    fn not_leader(&self, write: bool) -> Vec<u8> {
        let leader = self.reactor.service.status().leader;
        if leader == 0 {
            return cluster_down("no leader is elected");
        }
        let what = if write { "You can't write against a read only replica" } else { "Linearizable reads are served by the leader (send READONLY for a possibly stale local read)" };
        error(&format!("READONLY {what}: the leader is {}; forwarding is not built yet", self.leader_text()))
    }

    /// Proposes `entry` for connection `id`; the slot it answers.
    fn propose(&mut self, id: ConnId, entry: Vec<u8>) {
        let slot = match self.reactor.service.propose(entry) {
            Ok(ticket) => {
                self.stats.proposals += 1;
                self.proposed_this_turn = true;
                let seq = self.conn(id).push(Slot::Write);
                self.tickets.insert(ticket, (id, seq));
                return;
            }
            Err(_) => self.not_leader(true),
        };
        self.conn(id).push(Slot::Ready(slot));
    }

    fn read(&mut self, id: ConnId, args: Vec<Vec<u8>>) {
        if self.conn(id).readonly {
            self.stats.stale_reads += 1;
            self.conn(id).push(Slot::Read(args));
            return;
        }
        match self.reactor.service.read_index() {
            Ok(ticket) => {
                self.stats.read_indexes += 1;
                let seq = self.conn(id).push(Slot::ReadWait(args));
                self.tickets.insert(ticket, (id, seq));
            }
            Err(_) => {
                let reply = self.not_leader(false);
                self.conn(id).push(Slot::Ready(reply));
            }
        }
    }

    /// Runs a connection-local command on the member's own executor.
    fn local(&mut self, id: ConnId, args: &[Vec<u8>]) -> Vec<u8> {
        let mut wire = Vec::new();
        pmwire_resp::client::encode_request(args, &mut wire);
        let mut parsed = Parsed::new(RespLimits::default());
        let segs: [&[u8]; 1] = [&wire];
        let summary = parsed.parse(&segs);
        assert_eq!(summary.commands, 1, "one encoded command");
        let req = parsed.request(&segs, 0);
        let mut out = Vec::new();
        let conn = self.conns.get_mut(&id).expect("the connection");
        let flow = self.local.execute(&mut conn.session, &mut self.scratch, &req, &mut out);
        if flow == pmwire_keyspace::exec::Flow::Close {
            conn.close_after_flush = true;
        }
        out
    }

    /// Serves one request of connection `id`.
    fn request(&mut self, id: ConnId, args: Vec<Vec<u8>>) {
        let name = args[0].to_ascii_lowercase();
        let authenticated = self.conn(id).session.is_authenticated();
        if !authenticated && !matches!(&name[..], b"auth" | b"hello" | b"quit") {
            self.conn(id).push(Slot::Ready(error("NOAUTH Authentication required.")));
            return;
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
            b"wait" => {
                let reply = self.wait(id, &args);
                self.conn(id).push(Slot::Ready(reply));
            }
            b"role" => {
                let reply = self.role();
                self.conn(id).push(Slot::Ready(reply));
            }
            b"info" if args.len() == 2 && args[1].eq_ignore_ascii_case(b"replication") => {
                let text = self.info_replication();
                let reply = format!("${}\r\n{}\r\n", text.len(), text).into_bytes();
                self.conn(id).push(Slot::Ready(reply));
            }
            b"multi" | b"exec" | b"discard" | b"watch" | b"unwatch" => self.transaction(id, &name, args),
            _ => self.by_class(id, args),
        }
    }

    fn by_class(&mut self, id: ConnId, args: Vec<Vec<u8>>) {
        match class(&args[0]) {
            Class::Read => self.read(id, args),
            Class::Write | Class::Unknown => {
                let protocol = self.conn(id).session.protocol;
                let entry = self.proposer.command(Self::now_ms(), protocol, &args);
                self.propose(id, entry);
            }
            Class::Blocking => {
                let reply = error("ERR blocking commands are not served in cluster mode yet (use the non-blocking form)");
                self.conn(id).push(Slot::Ready(reply));
            }
            Class::Session => {
                let reply = self.local(id, &args);
                self.conn(id).push(Slot::Ready(reply));
            }
        }
    }

    fn queue_in_multi(&mut self, id: ConnId, args: Vec<Vec<u8>>) -> Vec<u8> {
        let refusal = match class(&args[0]) {
            Class::Session => Some("ERR this command is not allowed inside a transaction in cluster mode"),
            _ if self.conn(id).multi.as_ref().map_or(0, Vec::len) >= MAX_MULTI => Some("ERR too many commands in one transaction"),
            _ => None,
        };
        let conn = self.conn(id);
        if let Some(text) = refusal {
            conn.multi_dirty = true;
            return error(text);
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
        let queued = conn.multi.take().expect("a transaction");
        let dirty = std::mem::take(&mut conn.multi_dirty);
        let watched = std::mem::take(&mut conn.watched);
        let protocol = conn.session.protocol;
        if dirty {
            conn.push(Slot::Ready(error("EXECABORT Transaction discarded because of previous errors.")));
            return;
        }
        let entry = self.proposer.transaction(Self::now_ms(), protocol, watched, &queued);
        self.propose(id, entry);
    }

    /// WAIT numreplicas timeout: how many followers hold this connection's
    /// last write (their match index, from the leader's progress). It
    /// answers at once: a write is acknowledged only once a majority holds
    /// it, so WAIT for a majority's followers never needs to wait; waiting
    /// up to the timeout for more is not built yet.
    fn wait(&mut self, id: ConnId, args: &[Vec<u8>]) -> Vec<u8> {
        if args.len() != 3 {
            return error("ERR wrong number of arguments for 'wait' command");
        }
        let parse = |a: &[u8]| std::str::from_utf8(a).ok().and_then(|t| t.parse::<i64>().ok()).filter(|&v| v >= 0);
        if parse(&args[1]).is_none() || parse(&args[2]).is_none() {
            return error("ERR value is not an integer or out of range");
        }
        let last = self.conn(id).last_write;
        let held = self.reactor.service.progress().iter().filter(|p| !p.learner && p.matched >= last).count();
        format!(":{held}\r\n").into_bytes()
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
        out
    }

    /// Runs a read at the head of a connection's queue.
    fn run_read(&mut self, id: ConnId, args: &[Vec<u8>]) -> Vec<u8> {
        let mut wire = Vec::new();
        pmwire_resp::client::encode_request(args, &mut wire);
        let mut parsed = Parsed::new(RespLimits::default());
        let segs: [&[u8]; 1] = [&wire];
        assert_eq!(parsed.parse(&segs).commands, 1, "one encoded command");
        let req = parsed.request(&segs, 0);
        let now = Self::now_ms();
        let conn = self.conns.get_mut(&id).expect("the connection");
        let machine = self.reactor.service.machine_mut();
        let mut capture = Capture::default();
        let result = machine.read(&mut self.reads, &mut conn.session, now, &req, &mut capture);
        let ks = machine.keyspace();
        let mut out = Gather { ks, out: Vec::new() };
        for piece in capture.pieces {
            match piece {
                Piece::Bytes(b) => out.bytes(&b),
                Piece::Value(h, len) => out.value(&h, len),
            }
        }
        let bytes = std::mem::take(&mut out.out);
        out.ks.end_entry();
        match result {
            Ok(_) => bytes,
            Err(e) => error(&format!("ERR {e}")),
        }
    }

    /// Moves each connection's answered prefix into `out` (true if the
    /// connection is to close after it).
    fn flush(&mut self, id: ConnId, out: &mut Vec<u8>) -> bool {
        loop {
            let Some(conn) = self.conns.get_mut(&id) else { return false };
            match conn.queue.front_mut() {
                Some(Slot::Ready(bytes)) => out.append(bytes),
                Some(Slot::Read(args)) => {
                    let args = std::mem::take(args);
                    let reply = self.run_read(id, &args);
                    out.extend_from_slice(&reply);
                }
                _ => return conn.queue.is_empty() && conn.close_after_flush,
            }
            let conn = self.conns.get_mut(&id).expect("the connection");
            conn.queue.pop_front();
            conn.head += 1;
        }
    }

    /// The replica's turns, then what they finished.
    fn drive(&mut self) {
        if std::mem::take(&mut self.proposed_this_turn) {
            self.stats.proposal_turns += 1;
        }
        for _ in 0..TURNS_PER_WAKEUP {
            let now = self.now();
            if !self.reactor.turn(now) {
                break;
            }
        }
        self.maybe_sweep();
        for (ticket, done) in self.reactor.service.take_done() {
            if self.sweep == Some(ticket) {
                self.sweep = None;
                continue;
            }
            let Some((id, seq)) = self.tickets.remove(&ticket) else { continue };
            let Some(conn) = self.conns.get_mut(&id) else { continue };
            if let Done::Applied { index, .. } = &done {
                conn.last_write = conn.last_write.max(*index);
            }
            let Some(slot) = conn.slot(seq) else { continue };
            *slot = match (std::mem::replace(slot, Slot::Write), done) {
                (_, Done::Applied { output, .. }) => Slot::Ready(output.reply),
                (Slot::ReadWait(args), Done::Readable { .. }) => Slot::Read(args),
                (_, Done::Failed(f)) => {
                    self.stats.cluster_down += 1;
                    Slot::Ready(cluster_down(failure_text(f)))
                }
                (_, Done::Readable { .. }) => unreachable!("a write's ticket is never readable"),
            };
            self.to_wake.push(id);
        }
    }

    fn maybe_sweep(&mut self) {
        if self.sweep.is_some() || self.reactor.service.status().role != StateRole::Leader {
            return;
        }
        let now = Self::now_ms();
        if !self.reactor.service.machine_mut().sweep_due(now) {
            return;
        }
        let entry = self.proposer.sweep(now, SWEEP_BUDGET, SWEEP_BUDGET);
        if let Ok(ticket) = self.reactor.service.propose(entry) {
            self.stats.sweeps += 1;
            self.sweep = Some(ticket);
        }
    }
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

impl<T: Transport<Addr = SocketAddr>> Service<HeapBuffers> for Member<T> {
    fn handle(&mut self, batch: &mut Batch, _bufs: &mut HeapBuffers) {
        for i in 0..batch.len() {
            let (input, reply) = batch.split(i);
            let id = input.conn;
            if input.listener != 0 {
                reply.output.push_bytes(b"HTTP/1.1 501 Not Implemented\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                reply.consumed = input.len_bytes();
                reply.close = true;
                continue;
            }
            self.conn(id);
            if self.conns[&id].queue.len() < MAX_QUEUE && !self.conns[&id].close_after_flush {
                let segs: Vec<&[u8]> = input.segments.iter().map(|s| s.bytes).collect();
                let summary = self.parsed.parse(&segs);
                let mut requests = Vec::with_capacity(summary.commands);
                for j in 0..summary.commands {
                    let req = self.parsed.request(&segs, j);
                    requests.push(req.args().map(<[u8]>::to_vec).collect::<Vec<_>>());
                }
                reply.consumed = summary.consumed;
                for args in requests {
                    self.request(id, args);
                }
                if let Some(e) = summary.error {
                    let conn = self.conn(id);
                    conn.push(Slot::Ready(e.reply()));
                    conn.close_after_flush = true;
                } else if let Some(wanted) = summary.wanted {
                    if wanted > MAX_REQUEST_BYTES {
                        let conn = self.conn(id);
                        conn.push(Slot::Ready(error("ERR Protocol error: request too large")));
                        conn.close_after_flush = true;
                    } else {
                        reply.wanted = wanted;
                    }
                }
            }
        }
        self.drive();
        for i in 0..batch.len() {
            let (input, reply) = batch.split(i);
            if input.listener != 0 {
                continue;
            }
            let mut out = Vec::new();
            let close = self.flush(input.conn, &mut out);
            reply.output.push_bytes(&out);
            reply.close |= close;
        }
    }

    fn closed(&mut self, conn: ConnId, _bufs: &mut HeapBuffers) {
        self.conns.remove(&conn);
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
        Some(self.origin + next)
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
    let region = Region::open(&path, region_options.clone()).map_err(|e| fail(e.to_string()))?;
    match PmemDurable::open(region, options.cluster, options.id) {
        Ok(store) => Ok(store),
        Err(OpenError::NotFormatted(_)) => {
            let region = Region::open(&path, region_options).map_err(|e| fail(e.to_string()))?;
            let voters: Vec<u64> = options.peers.keys().copied().collect();
            let log = pmwire_log::LogConfig::new(options.raft_log_bytes, pmwire_log::TailStrategy::SelfValidating);
            PmemDurable::format(region, options.cluster, options.id, &voters, log).map_err(|e| fail(format!("format: {e}")))
        }
        Err(e) => Err(fail(format!("{e} (not overwriting it)"))),
    }
}

/// A member, bound and recovered, not yet running.
pub struct MemberServer<T: Transport<Addr = SocketAddr>> {
    server: pmwire_netio::Server<HeapBuffers, Member<T>>,
    _lock: std::fs::File,
    /// What opening the keyspace's pool found.
    pub recovered: crate::store::Recovered,
}

impl<T: Transport<Addr = SocketAddr>> MemberServer<T> {
    /// Opens both pools (locked), the replica over `transport` (listening
    /// at this member's peer address already) wrapped in authenticated
    /// links, and binds the RESP and HTTP listeners.
    pub fn open(options: &MemberOptions, transport: T, secret: link::Secret) -> Result<MemberServer<T>, MemberError> {
        let lock = lock(&options.pool.with_extension("lock"))?;
        let (mut store, recovered) = crate::store::Store::open(&options.pool, options.size, crate::store::Mode::Copy)?;
        store.engine.set_checkpoint_words(CHECKPOINT_WORDS);
        let sizing = store.sizing();
        let config = ServerConfig {
            tcp_port: options.resp.port(),
            requirepass: options.requirepass.clone(),
            protected_mode: options.protected_mode,
            ..ServerConfig::default()
        };
        let machine = RedisMachine::open(ClusterKeyspace::new(store), config.clone())?;
        let durable = open_raft(options)?;
        let mut rc = pmwire_smr::node::ReplicaConfig::new(options.id);
        rc.tick = options.tick;
        rc.seed = u64::from(std::process::id()) ^ options.id.rotate_left(32);
        let others: BTreeMap<u64, SocketAddr> = options.peers.iter().filter(|(&id, _)| id != options.id).map(|(&id, &a)| (id, a)).collect();
        let link_config = pmwire_smr::links::replica_link(&rc);
        let transport = LinkTransport::real(transport, secret, link_config);
        let replica = Replica::with_machine(rc, durable, machine, others).map_err(|e| MemberError::Raft { path: raft_path(&options.pool), why: e.to_string() })?;
        let member = Member::new(Reactor::new(transport, replica), options.peers.clone(), config);
        let net = pmwire_netio::Config {
            ring_entries: sizing.ring_entries,
            max_connections: sizing.max_connections,
            max_rx_bytes: crate::store::MAX_RX_BYTES,
            ..pmwire_netio::Config::default()
        };
        let bufs = HeapBuffers::new(u32::from(sizing.ring_entries) * 4, sizing.buf_size);
        let server = pmwire_netio::Server::bind_all(&[options.resp, options.http], net, bufs, member)?;
        Ok(MemberServer { server, _lock: lock, recovered })
    }

    /// The bound RESP and HTTP addresses.
    pub fn addrs(&self) -> (SocketAddr, SocketAddr) {
        let a = self.server.local_addrs();
        (a[0], a[1])
    }

    /// Stops `run` from another thread.
    pub fn stop_handle(&self) -> pmwire_netio::StopHandle {
        self.server.stop_handle()
    }

    /// Serves until stopped.
    pub fn run(&mut self) -> Result<(), MemberError> {
        Ok(self.server.run()?)
    }

    /// The member.
    pub fn member(&self) -> &Member<T> {
        self.server.service()
    }
}
