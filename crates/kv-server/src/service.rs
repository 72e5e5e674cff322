//! [`KvService`]: the netio service that speaks RESP on listener 0 and HTTP (pKVS) on
//! listener 1, over one [`Store`].
//!
//! One batch (PASTE A.2): for every connection in the batch, parse and execute every complete
//! request, writing the replies into the connection's reply output after a mark; then commit
//! the engine **once**; then, if the commit failed, truncate each output back to its mark and
//! answer every request of the batch with an error instead (`-ERR pmwire could not persist:
//! …` / HTTP 503), the engine having been rolled back. Nothing is sent before `handle`
//! returns, so writing replies in place is staging them. Reads stage nothing and commit
//! nothing.
//!
//! HTTP routes (keep-alive and pipelining as the codec parses them):
//! - `POST|PUT /kv/{key}`: stores the body (the key is the raw path bytes after `/kv/`);
//!   `204 No Content`;
//! - `GET /kv/{key}`: `200` with the value (sent from its pool buffers in zero-copy mode) or
//!   `404`;
//! - `DELETE /kv/{key}`: `200` or `404`;
//! - `POST /log`: appends the body to the user log; `200` with the entry's LSN and `\n` as the
//!   body (in no-persist mode: acknowledged with a volatile counter, nothing stored);
//! - `GET /log/{lsn}`: `200` with the entry or `404`;
//! - any other method on those paths `405`, any other path `404`; a full pool or log `507`;
//!   the codec's refusals (400, 413 over [`crate::store::MAX_VALUE_BYTES`], 431, 501) close the
//!   connection.
//!
//! The user log is a bounded ring: when an append finds it full (or the pool below its
//! receive reserve), the oldest half of its entries is truncated (durably) to make room.
//!
//! Memory: a write (SET, POST) that would leave fewer free pool buffers than the receive
//! ring's size is refused as out of memory (`-OOM …` / `507`) after a checkpoint has released
//! what overwritten and deleted values still held, so the loop can always receive the DEL
//! that frees space.
//!
//! Expiry: the clock is read once per batch (`now_ms`, given to every keyspace of the
//! batch, so all its commands see one time); after the batch's commands, the active sweep
//! deletes at most [`EXPIRE_PER_BATCH`] expired keys (Redis's active expire cycle, bounded
//! per loop turn), committed with the batch. An expired key is never served meanwhile (the
//! keyspace's lazy expiry); the sweep only reclaims its space. A server with no traffic
//! does not turn its loop, so it reclaims at its next batch. The chunks of deleted large
//! collections are reclaimed the same way, [`GARBAGE_PER_BATCH`] per batch.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use pmwire_kv::LogError;
use pmwire_log::Extent;
use pmwire_netio::http::{self, body_pieces, Codec, HttpError, Method, Parsed};
use pmwire_netio::{Batch, ConnId, ConnLimits, Input, Output, OutputMark, Service};

use crate::pushes::{Pushes, Taken};
use pmwire_keyspace::chunked::collect_garbage;
use pmwire_keyspace::exec::{Flow, Server as RespServer, ServerConfig, Session};
use pmwire_keyspace::store::{Clock, Keyspace, Kind, StoreError};
use pmwire_resp::reply::ReplySink;
use pmwire_resp::request::{Limits as RespLimits, Parsed as RespParsed, Skip};

use crate::admit::{Grant, Grants};
use crate::keyspace::{BatchState, EngineKeyspace, OutputSink};
use crate::store::{Mode, PoolView, Store, MAX_VALUE_BYTES};

/// Listener index of the RESP port.
pub const RESP_LISTENER: u32 = 0;
/// Listener index of the HTTP port.
pub const HTTP_LISTENER: u32 = 1;
/// Most extents one user-log entry takes zero-copy (more are copied).
const MAX_LOG_EXTENTS: usize = 256;
/// Most expired keys the active sweep deletes per batch (two WAL words each: 128 of a
/// group's 1024).
pub const EXPIRE_PER_BATCH: usize = 64;
/// HTTP's answer (409) to a GET of a key holding a collection: RESP's GET error.
const WRONGTYPE_BODY: &[u8] = b"WRONGTYPE Operation against a key holding the wrong kind of value\n";
/// While discarding a refused request, the bytes to gather before the next look at it.
const SKIP_CHUNK: u64 = 64 << 10;
/// Most internal entries (chunks of deleted large collections, `pmwire_keyspace::chunked`) the
/// garbage collector deletes per batch, after the sweep.
pub const GARBAGE_PER_BATCH: usize = 64;

/// Counters (volatile).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServiceStats {
    /// Calls to `handle`.
    pub batches: u64,
    /// Batches whose commit wrote something.
    pub commits: u64,
    /// Extra commits inside batches that outgrew one WAL group.
    pub early_commits: u64,
    /// Batches answered with errors because they could not be persisted.
    pub failed_batches: u64,
    /// RESP commands parsed.
    pub resp_commands: u64,
    /// Expired keys deleted by the active sweep.
    pub expired_swept: u64,
    /// Internal entries of deleted large collections collected (chunks and tombstones).
    pub garbage_collected: u64,
    /// HTTP requests parsed.
    pub http_requests: u64,
    /// Blocked commands served by another client's write.
    pub blocked_served: u64,
    /// Blocked commands answered null because their time was up.
    pub blocked_timeouts: u64,
    /// Subscribers closed for letting more than the output limit of
    /// published messages wait ([`crate::pushes::PUSH_LIMIT`]).
    pub pubsub_closed: u64,
}

/// What to write after an entry's replies (kept to rewrite it after a failed commit).
#[derive(Debug, Default)]
enum Tail {
    #[default]
    None,
    Resp(Vec<u8>),
    Http(HttpError),
}

/// One batch entry's bookkeeping.
#[derive(Debug, Default)]
struct EntryState {
    mark: Option<OutputMark>,
    consumed: usize,
    close: bool,
    resp_commands: u32,
    /// Keep-alive of each HTTP request answered.
    http: Vec<bool>,
    tail: Tail,
    /// Unconsumed bytes needed before this connection can progress ([`pmwire_netio::Reply::wanted`]).
    wanted: usize,
}

/// The KV service (see the module docs).
pub struct KvService {
    resp: RespServer,
    sessions: HashMap<ConnId, Session>,
    parsed: RespParsed,
    codec: Codec,
    state: BatchState,
    entries: Vec<EntryState>,
    /// Scratch of `resp_entry` kept for its capacity: segment locations, and (empty between
    /// calls) the segments' byte slices.
    locs: Vec<(u32, u32)>,
    bytes: Vec<&'static [u8]>,
    /// Receive grants of large requests.
    grants: Grants,
    /// Refused RESP requests being discarded as they arrive.
    skips: HashMap<ConnId, Skip>,
    /// Incomplete RESP requests being scanned as they arrive (bytes of the request scanned,
    /// and the scanner), so that each is parsed once, when whole, not once per delivery.
    scans: HashMap<ConnId, (usize, Skip)>,
    no_persist_lsn: u64,
    stats: ServiceStats,
    /// Planted bug for the crash campaign's canary: replies are sent without the batch's
    /// commit (writes become durable only when a later batch fills a WAL group).
    fault_ack_before_commit: bool,
    /// Where the time comes from (the wall clock; tests fix it).
    clock: Clock,
    /// The time of the current batch, ms since the Unix epoch.
    now_ms: u64,
    /// Parked connections and their answers.
    blocking: Blocking,
    /// Published messages waiting for their subscribers' connections.
    pushes: Pushes,
    /// The earliest key deadline after the last batch, ms: with `expired` keyspace events
    /// subscribed to, the loop is woken then so that the sweep runs (and publishes them)
    /// without waiting for traffic, as Redis's background expiry does.
    next_expiry_ms: Option<u64>,
    /// Connections CLIENT KILL closed: each is closed at once (unsent output dropped, as
    /// Redis's `freeClient`) when the loop shows it next, which `kill_wake` asks for.
    killing: HashSet<ConnId>,
    kill_wake: Vec<ConnId>,
    /// Stops the loop when a client runs SHUTDOWN (set by the server that runs this service).
    stop: Option<pmwire_netio::StopHandle>,
}

impl std::fmt::Debug for KvService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KvService({} sessions, {:?})", self.sessions.len(), self.stats)
    }
}

impl KvService {
    /// A service whose RESP limits match the store's (`max_value_bytes` bulk arguments).
    pub fn new(resp_port: u16) -> KvService {
        let limits = RespLimits { max_bulk_bytes: MAX_VALUE_BYTES as u64, ..RespLimits::default() };
        // SPOP and SRANDMEMBER draw from a generator seeded afresh for each server
        // (std's per-process random hash keys).
        let random_seed = std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), resp_port);
        let config = ServerConfig {
            server_name: "pmwire".into(),
            limits,
            tcp_port: resp_port,
            random_seed,
            ..ServerConfig::default()
        };
        let http_limits = http::Limits { max_head_bytes: 8192, max_body_bytes: MAX_VALUE_BYTES };
        KvService {
            resp: RespServer::new(config),
            sessions: HashMap::new(),
            parsed: RespParsed::new(limits),
            codec: Codec::new(http_limits),
            state: BatchState::default(),
            entries: Vec::new(),
            locs: Vec::new(),
            bytes: Vec::new(),
            grants: Grants::default(),
            skips: HashMap::new(),
            scans: HashMap::new(),
            no_persist_lsn: 0,
            stats: ServiceStats::default(),
            fault_ack_before_commit: false,
            clock: Clock::System,
            now_ms: 0,
            blocking: Blocking::default(),
            pushes: Pushes::default(),
            next_expiry_ms: None,
            killing: HashSet::new(),
            kill_wake: Vec::new(),
            stop: None,
        }
    }

    /// Reads the time from `clock` (tests: a fixed time, so nothing depends on the wall clock).
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    /// Access control: the default user's password (`None`: none; RESP's
    /// AUTH, and HTTP's `Authorization: Bearer`), and Redis's protected
    /// mode (with no password, only loopback peers are served).
    pub fn set_access(&mut self, requirepass: Option<Vec<u8>>, protected_mode: bool) {
        let config = self.resp.config_mut();
        config.requirepass = requirepass;
        config.protected_mode = protected_mode;
    }

    /// The executor's configuration (CONFIG GET's values).
    pub fn client_config(&self) -> &ServerConfig {
        self.resp.config()
    }

    /// Client limits: the most `maxclients` may be set to (the process's descriptors,
    /// [`crate::store::connection_cap`]), `maxclients`, and the idle `timeout` in seconds (0:
    /// none). CONFIG SET changes the last two.
    pub fn set_client_limits(&mut self, cap: u32, maxclients: u32, timeout_s: u32) {
        let config = self.resp.config_mut();
        config.maxclients_cap = cap;
        config.maxclients = maxclients.min(cap);
        config.timeout_s = timeout_s;
    }

    /// What SHUTDOWN stops: the loop that runs this service.
    pub fn set_stop(&mut self, stop: pmwire_netio::StopHandle) {
        self.stop = Some(stop);
    }

    /// The address the RESP port is bound to (CONFIG GET `bind`).
    pub fn set_bind(&mut self, address: String) {
        self.resp.config_mut().bind = address;
    }

    /// `maxmemory`, bytes (0: none).
    pub fn set_maxmemory(&mut self, bytes: u64) {
        self.resp.config_mut().maxmemory = bytes;
    }

    /// When collections are chunked, and their chunks' sizes.
    pub fn set_collection_limits(&mut self, limits: pmwire_keyspace::chunked::ChunkConfig) {
        self.resp.config_mut().collections = limits;
    }

    /// The counters.
    pub fn stats(&self) -> ServiceStats {
        self.stats
    }

    /// Test hook: the `nth` next commit that writes (1: the next) fails.
    #[doc(hidden)]
    pub fn fail_commit(&mut self, nth: u32) {
        self.state.fail_commit = nth;
    }

    /// Planted bug (the crash campaign's canary): commit a script's writes command by command.
    #[doc(hidden)]
    pub fn plant_script_commit_per_call(&mut self) {
        self.state.fault_script_commit_per_call = true;
    }

    /// Planted bug (the crash campaign's canary): acknowledge batches without committing them.
    #[doc(hidden)]
    pub fn plant_ack_before_commit(&mut self) {
        self.fault_ack_before_commit = true;
    }

    /// The active sweep: deletes up to [`EXPIRE_PER_BATCH`] expired keys, staged with the
    /// batch. If the batch has no room left (or failed), nothing of it is kept: next batch.
    fn sweep(&mut self, store: &mut Store) {
        let expiring = store.engine.expiring_len() > 0;
        let garbage = crate::keyspace::has_garbage(&store.engine);
        if self.state.failed.is_some() || !(expiring || garbage) {
            return;
        }
        let reserve = self.grants.reserve(store);
        let mut ks = EngineKeyspace {
            engine: &mut store.engine,
            region: &mut store.region,
            state: &mut self.state,
            zero_copy: store.mode == Mode::ZeroCopy,
            locs: &[],
            reserve,
            now_ms: self.now_ms,
        };
        let savepoint = ks.engine.savepoint();
        let push_mark = self.resp.pushes_mark();
        match self.resp.active_expire(&mut ks, EXPIRE_PER_BATCH) {
            Ok(sweep) => self.stats.expired_swept += sweep.deleted as u64,
            Err(_) => {
                ks.engine.rollback_to(savepoint);
                ks.state.batch_full = false;
                self.resp.truncate_pushes(push_mark);
                return;
            }
        }
        if self.resp.pushes_mark() > 0 {
            // `expired` events (keyspace notifications) for the subscribers' connections.
            self.pushes.route(self.resp.take_pushes(), None, &mut |_| unreachable!("no connection is being served"));
        }
        if !garbage {
            return;
        }
        let savepoint = ks.engine.savepoint();
        match collect_garbage(&mut ks, GARBAGE_PER_BATCH) {
            Ok(deleted) => self.stats.garbage_collected += deleted as u64,
            Err(_) => {
                ks.engine.rollback_to(savepoint);
                ks.state.batch_full = false;
            }
        }
    }

    fn resp_entry(&mut self, input: &Input<'_>, out: &mut Output, store: &mut Store, st: &mut EntryState) {
        let KvService { resp, sessions, parsed, state, now_ms, blocking, stats, grants, skips, scans, pushes, killing, kill_wake, stop, .. } = self;
        let now_ms = *now_ms;
        if !sessions.contains_key(&input.conn) {
            // Redis refuses at accept; here the first bytes are the first news of a connection.
            if let Some(denied) = resp.refuse_peer(input.peer_loopback) {
                out.push_bytes(denied);
                st.tail = Tail::Resp(denied.to_vec());
                st.close = true;
                st.consumed = input.len_bytes();
                return;
            }
        }
        let session = sessions.entry(input.conn).or_insert_with(|| {
            let session = resp.open_session();
            pushes.opened(session.id(), input.conn);
            resp.set_client_addrs(session.id(), input.addrs.peer, input.addrs.local, input.addrs.fd);
            session
        });
        if session.is_blocked() {
            return; // parked: what it sent meanwhile waits (Redis: a blocked client reads nothing)
        }
        let (view, zero_copy) = (store.view(), store.mode == Mode::ZeroCopy);
        // This connection's grant (if any) is spent: what it received is here. Writes leave
        // the ring's reserve and the other grants' promises free.
        grants.release(input.conn);
        let reserve = grants.reserve(store);
        let mut bytes: Vec<&[u8]> = recycle(std::mem::take(&mut self.bytes));
        let mut locs = std::mem::take(&mut self.locs);
        let mut done = 0;
        let mut parked = false;
        if let Some(skip) = skips.get_mut(&input.conn) {
            // A refused request: discard what arrived of it.
            bytes.extend(input.segments.iter().map(|s| s.bytes));
            let step = skip.advance(&bytes);
            done = step.consumed;
            if let Some(error) = step.error {
                skips.remove(&input.conn);
                let reply = error.reply();
                out.push_bytes(&reply);
                st.tail = Tail::Resp(reply);
                st.close = true;
            } else if step.done {
                skips.remove(&input.conn);
            } else {
                st.wanted = skip.wanted().min(SKIP_CHUNK) as usize;
            }
            if !step.done {
                st.consumed = if st.close { input.len_bytes() } else { done };
                self.bytes = recycle(bytes);
                self.locs = locs;
                return;
            }
        }
        if let Some((scanned, scan)) = scans.get_mut(&input.conn) {
            // The input starts with an incomplete request already scanned this far: walk the
            // new bytes' headers only; parse when it is whole (or malformed).
            let mut at = *scanned;
            for s in input.segments {
                let take = at.min(s.bytes.len());
                at -= take;
                if take < s.bytes.len() {
                    bytes.push(&s.bytes[take..]);
                }
            }
            let step = scan.advance(&bytes);
            bytes.clear();
            *scanned += step.consumed;
            if !step.done && step.error.is_none() {
                let need = *scanned as u64 + scan.pending().min_bytes();
                let decision = grants.decide(input.conn, need, input.len_bytes(), store);
                if let Grant::Wait(wanted) = decision {
                    st.wanted = wanted;
                    st.consumed = 0;
                    self.bytes = recycle(bytes);
                    self.locs = locs;
                    return;
                }
            }
            scans.remove(&input.conn); // whole, malformed or refused: the parse below says which
        }
        let mut pending;
        loop {
            bytes.clear();
            locs.clear();
            let mut skip = done;
            for s in input.segments {
                if skip >= s.bytes.len() {
                    skip -= s.bytes.len();
                    continue;
                }
                bytes.push(&s.bytes[skip..]);
                locs.push((s.buf, s.offset + skip as u32));
                skip = 0;
            }
            let summary = parsed.parse(&bytes);
            pending = summary.pending;
            let mut ks = EngineKeyspace {
                engine: &mut store.engine,
                region: &mut store.region,
                state,
                zero_copy,
                locs: &locs,
                reserve,
                now_ms,
            };
            let mut sink = OutputSink { out, view, zero_copy };
            for c in 0..summary.commands {
                ks.state.entry_requests = st.resp_commands as usize;
                st.resp_commands += 1;
                if ks.state.failed.is_some() {
                    continue;
                }
                let request = parsed.request(&bytes, c);
                let session = sessions.get_mut(&input.conn).expect("opened above");
                let (savepoint, mark, push_mark) = (ks.engine.savepoint(), sink.out.mark(), resp.pushes_mark());
                // An EXEC consumes the session's transaction: kept to run it again.
                let exec = request.arg(0).eq_ignore_ascii_case(b"exec");
                let before = (exec && session.in_multi()).then(|| session.clone());
                let mut flow = resp.execute(session, &mut ks, &request, &mut sink);
                if std::mem::take(&mut ks.state.batch_full) {
                    // The command outgrew the batch: undo it, commit what came before, run it
                    // again in the fresh batch.
                    ks.engine.rollback_to(savepoint);
                    sink.out.truncate(mark);
                    resp.truncate_pushes(push_mark);
                    if ks.state.commit_early(ks.engine, ks.region, mark).is_err() {
                        continue;
                    }
                    if let Some(before) = &before {
                        *session = before.clone();
                    }
                    let savepoint = ks.engine.savepoint();
                    flow = resp.execute(session, &mut ks, &request, &mut sink);
                    if std::mem::take(&mut ks.state.batch_full) {
                        // Larger than the WAL on its own: run again alone in a batch that may
                        // outgrow the WAL, committed at once as a chained transaction (its
                        // records in pool buffers, bounded by the pool).
                        ks.engine.rollback_to(savepoint);
                        sink.out.truncate(mark);
                        resp.truncate_pushes(push_mark);
                        if let Some(before) = &before {
                            *session = before.clone();
                        }
                        ks.engine.allow_oversize();
                        let savepoint = ks.engine.savepoint();
                        flow = resp.execute(session, &mut ks, &request, &mut sink);
                        if std::mem::take(&mut ks.state.batch_full) {
                            // Larger than a chained transaction holds: refused whole, nothing
                            // of it kept (an EXEC's replies to its other commands would not be
                            // true).
                            ks.engine.rollback_to(savepoint);
                            sink.out.truncate(mark);
                            resp.truncate_pushes(push_mark);
                            let refusal = format!("-{}\r\n", ks.too_large());
                            sink.out.push_bytes(refusal.as_bytes());
                        } else {
                            // Durable now, with its reply (which ends the durable prefix): a
                            // failure is answered, naming the pool, to it and what follows.
                            ks.state.entry_requests += 1;
                            let _ = ks.state.commit_early(ks.engine, ks.region, sink.out.mark());
                        }
                    }
                }
                if flow == Flow::Close {
                    st.close = true;
                    if resp.shutdown_requested() {
                        // SHUTDOWN: this batch is committed and answered as any other, then the
                        // loop stops (every write is durable before its reply; nothing to save).
                        if let Some(stop) = stop.as_ref() {
                            stop.stop();
                        }
                    }
                    break;
                }
                if flow == Flow::Block {
                    // Parked: its request is taken, the pipeline behind it waits.
                    let timeout_ms = resp.blocked_timeout_ms(session).expect("blocked");
                    let at = (ks.state.entry, st.resp_commands as usize - 1);
                    blocking.park(input.conn, session.id(), timeout_ms, at);
                    done += parsed.command_end(c);
                    parked = true;
                    break;
                }
                ks.state.entry_requests = st.resp_commands as usize;
                if resp.pushes_mark() > 0 {
                    let out = &mut *sink.out;
                    pushes.route(resp.take_pushes(), Some(input.conn), &mut |m| out.push_bytes(m));
                }
                for client in resp.take_kills() {
                    // CLIENT KILL of another connection: closed when the loop shows it next.
                    if let Some((&conn, _)) = sessions.iter().find(|(_, s)| s.id() == client) {
                        if killing.insert(conn) {
                            kill_wake.push(conn);
                        }
                    }
                }
                for (client, error) in resp.take_unblocked() {
                    // CLIENT UNBLOCK: answered now (nothing to commit), shown again like a served one.
                    let conn = *blocking.clients.get(&client).expect("a blocked session is parked");
                    let target = sessions.get_mut(&conn).expect("a parked connection has a session");
                    let answer = RespServer::unblocked_reply(target, error).to_vec();
                    resp.unblock(target);
                    blocking.forget(conn);
                    blocking.deferred.insert(conn, answer);
                    blocking.wake.push(conn);
                }
                stats.blocked_served += serve_ready(resp, sessions, blocking, &mut ks, &mut sink);
            }
            if parked {
                break;
            }
            done += summary.consumed;
            if st.close {
                break;
            }
            if let Some(error) = summary.error {
                let reply = error.reply();
                out.push_bytes(&reply);
                st.tail = Tail::Resp(reply);
                st.close = true;
                break;
            }
            if !summary.limited {
                break;
            }
        }
        match pending.filter(|_| !st.close) {
            None => grants.release(input.conn),
            Some(pending) => match grants.decide(input.conn, pending.min_bytes(), input.len_bytes() - done, store) {
                Grant::Wait(wanted) => {
                    st.wanted = wanted;
                    scans.insert(input.conn, (0, Skip::new(pending, parsed.limits())));
                }
                Grant::Refuse(why) => {
                    // Refused before anything of it is consumed; its bytes are discarded as
                    // they arrive and the connection goes on.
                    st.resp_commands += 1;
                    out.push_bytes(format!("-{why}\r\n").as_bytes());
                    let mut skip = Skip::new(pending, parsed.limits());
                    bytes.clear();
                    let mut at = done;
                    for s in input.segments {
                        let take = at.min(s.bytes.len());
                        at -= take;
                        if take < s.bytes.len() {
                            bytes.push(&s.bytes[take..]);
                        }
                    }
                    let step = skip.advance(&bytes);
                    done += step.consumed;
                    assert!(!step.done, "an incomplete request is skipped only once it all arrived");
                    if let Some(error) = step.error {
                        let reply = error.reply();
                        out.push_bytes(&reply);
                        st.tail = Tail::Resp(reply);
                        st.close = true;
                    } else {
                        st.wanted = skip.wanted().min(SKIP_CHUNK) as usize;
                        skips.insert(input.conn, skip);
                    }
                }
            },
        }
        st.consumed = if st.close { input.len_bytes() } else { done };
        self.bytes = recycle(bytes);
        self.locs = locs;
    }

    /// With `expired` keyspace events subscribed to: when the earliest key deadline is due,
    /// a connection to show (any: the batch's sweep deletes the key and publishes its event);
    /// else the instant it will be due. Nothing otherwise.
    fn expiry_wakeup(&mut self, now: Instant, wake: &mut Vec<ConnId>) -> Option<Instant> {
        let due_ms = self.next_expiry_ms.filter(|_| self.resp.wants_expiry_events())?;
        let now_ms = self.clock.now_ms();
        if due_ms > now_ms {
            return now.checked_add(Duration::from_millis(due_ms - now_ms));
        }
        let conn = *self.sessions.keys().next()?;
        if !wake.contains(&conn) {
            wake.push(conn);
        }
        // Asked again after that batch, which sets the next deadline.
        self.next_expiry_ms = None;
        None
    }

    /// Finishes the blocking bookkeeping of a batch whose commit failed: a pop served in it
    /// and not made durable by an early commit answers the error instead of its element, and
    /// a command parked in it that was answered with the error is no longer parked.
    fn batch_failed(&mut self, why: &str) {
        let durable = self.state.commits_ok;
        let error = format!("-ERR pmwire could not persist: {why}\r\n").into_bytes();
        for (conn, made_at) in std::mem::take(&mut self.blocking.served_now) {
            if let Some(d) = self.blocking.deferred.get_mut(&conn) {
                if made_at >= durable {
                    *d = error.clone();
                }
            }
        }
        let committed = self.state.committed;
        for (conn, (entry, request)) in std::mem::take(&mut self.blocking.parked_now) {
            let kept = committed.is_some_and(|c| entry < c.entry || (entry == c.entry && request < c.requests));
            if !kept {
                if let Some(session) = self.sessions.get_mut(&conn) {
                    self.resp.unblock(session);
                }
                self.blocking.forget(conn);
                self.blocking.deferred.remove(&conn); // served after parking: one answer, the error
            }
        }
    }

    fn http_entry(&mut self, input: &Input<'_>, out: &mut Output, store: &mut Store, st: &mut EntryState) {
        let KvService { codec, state, no_persist_lsn, resp, now_ms, grants, .. } = self;
        let now_ms = *now_ms;
        let password = resp.config().requirepass.as_deref();
        grants.release(input.conn);
        let reserve = grants.reserve(store);
        let (view, mode) = (store.view(), store.mode);
        let total = input.len_bytes();
        let mut at = 0;
        while at < total {
            match codec.parse(input.segments, at) {
                Parsed::Incomplete => {
                    let Some(len) = codec.incomplete_len() else { break };
                    match grants.decide(input.conn, len as u64, total - at, store) {
                        Grant::Wait(wanted) => st.wanted = wanted,
                        Grant::Refuse(why) => {
                            // Refused from its head; the connection closes after the answer
                            // (the loop reads and drops what the peer still sends meanwhile).
                            st.http.push(false);
                            let body = format!("{}\n", why.trim_start_matches("OOM "));
                            http::write_response(out, 507, false, Some("text/plain"), body.as_bytes());
                            st.close = true;
                            at = total;
                        }
                    }
                    break;
                }
                Parsed::Error(error) => {
                    http::write_error(out, &error);
                    st.tail = Tail::Http(error);
                    st.close = true;
                    at = total;
                }
                Parsed::Complete(req) => {
                    state.entry_requests = st.http.len();
                    st.http.push(req.keep_alive);
                    if !bearer_ok(password, req.authorization) {
                        write_unauthorized(out, req.keep_alive);
                    } else if state.failed.is_none() {
                        let mut ks = EngineKeyspace {
                            engine: &mut store.engine,
                            region: &mut store.region,
                            state,
                            zero_copy: mode == Mode::ZeroCopy,
                            locs: &[],
                            reserve,
                            now_ms,
                        };
                        let (savepoint, mark) = (ks.engine.savepoint(), out.mark());
                        HttpCtx { ks: &mut ks, out, view, mode, no_persist_lsn }.route(&req, input);
                        if std::mem::take(&mut ks.state.batch_full) {
                            // As for a RESP command: undo, commit what came before, again.
                            ks.engine.rollback_to(savepoint);
                            out.truncate(mark);
                            if ks.state.commit_early(ks.engine, ks.region, mark).is_ok() {
                                let savepoint = ks.engine.savepoint();
                                HttpCtx { ks: &mut ks, out, view, mode, no_persist_lsn }.route(&req, input);
                                if std::mem::take(&mut ks.state.batch_full) {
                                    ks.engine.rollback_to(savepoint);
                                }
                            }
                        }
                    }
                    at += req.len_bytes();
                    if !req.keep_alive {
                        st.close = true;
                        at = total;
                    }
                }
            }
        }
        st.consumed = at;
    }
}

/// With a password set, an HTTP request must carry `Authorization: Bearer
/// <password>`.
pub(crate) fn bearer_ok(password: Option<&[u8]>, authorization: Option<&[u8]>) -> bool {
    let Some(want) = password else { return true };
    let Some(given) = authorization else { return false };
    let given = given.trim_ascii();
    match given.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => pmwire_keyspace::exec::same_secret(want, given[7..].trim_ascii()),
        _ => false,
    }
}

/// 401, with the scheme to use.
fn write_unauthorized(out: &mut Output, keep_alive: bool) {
    let body = b"a password is set: send Authorization: Bearer <password>\n";
    let conn = if keep_alive { "keep-alive" } else { "close" };
    let head = format!(
        "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"pmwire\"\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: {conn}\r\n\r\n",
        body.len()
    );
    out.push_bytes(head.as_bytes());
    out.push_bytes(body);
}

/// Answers one HTTP request.
struct HttpCtx<'k, 'e, 'o> {
    ks: &'k mut EngineKeyspace<'e>,
    out: &'o mut Output,
    view: PoolView,
    mode: Mode,
    no_persist_lsn: &'k mut u64,
}

impl HttpCtx<'_, '_, '_> {
    fn route(&mut self, req: &http::Request<'_>, input: &Input<'_>) {
        let keep = req.keep_alive;
        let pieces: Vec<http::Piece<'_>> = body_pieces(input.segments, &req.body).collect();
        // Only a zero-copy store keeps the body where it landed: in a pool buffer.
        let extents: Vec<Extent> = match self.ks.zero_copy {
            true => pieces.iter().map(|p| crate::keyspace::piece_in_buffer(p.buf, p.offset, p.bytes.len() as u32)).collect(),
            false => Vec::new(),
        };
        let gather = || match &pieces[..] {
            [] => Cow::Borrowed(&[][..]),
            [one] => Cow::Borrowed(one.bytes),
            many => {
                let mut bytes = Vec::with_capacity(many.iter().map(|p| p.bytes.len()).sum());
                many.iter().for_each(|p| bytes.extend_from_slice(p.bytes));
                Cow::Owned(bytes)
            }
        };
        if let Some(key) = req.path.strip_prefix("/kv/").filter(|k| !k.is_empty()) {
            let key = key.as_bytes();
            match req.method {
                Method::Post | Method::Put => {
                    match self.ks.set_value(key, 0, None, req.body.len, Some(&extents), gather) {
                        Ok(()) => http::write_response(self.out, 204, keep, None, b""),
                        Err(e) => self.store_error(keep, &e),
                    }
                }
                Method::Get => match self.ks.get_held(key) {
                    // A collection is RESP's alone: its bytes are an encoding (a blob, or a chunked
                    // collection's header), not a value, so HTTP answers as RESP's GET would.
                    Some((kind, _, _)) if kind != Kind::String.to_byte() => {
                        http::write_response(self.out, 409, keep, Some("text/plain"), WRONGTYPE_BODY)
                    }
                    Some((_, _, handle)) => {
                        let len = handle.iter().map(|e| e.len as usize).sum();
                        http::write_head(self.out, 200, keep, len, None);
                        OutputSink { out: self.out, view: self.view, zero_copy: self.ks.zero_copy }
                            .value_extents(&handle);
                    }
                    None => http::write_response(self.out, 404, keep, None, b""),
                },
                Method::Delete => match self.ks.delete(key) {
                    Ok(found) => http::write_response(self.out, if found { 200 } else { 404 }, keep, None, b""),
                    Err(e) => self.store_error(keep, &e),
                },
                _ => http::write_response(self.out, 405, keep, None, b""),
            }
        } else if req.path == "/log" {
            if req.method != Method::Post {
                return http::write_response(self.out, 405, keep, None, b"");
            }
            match self.append_log(req.body.len, &extents, gather) {
                Ok(lsn) => http::write_response(self.out, 200, keep, Some("text/plain"), format!("{lsn}\n").as_bytes()),
                Err(e) => self.store_error(keep, &e),
            }
        } else if let Some(lsn) = req.path.strip_prefix("/log/") {
            if req.method != Method::Get {
                return http::write_response(self.out, 405, keep, None, b"");
            }
            let entry = lsn.parse::<u64>().ok().and_then(|lsn| {
                let (at, extents) = self.ks.engine.log_read(lsn).next()?;
                (at == lsn).then(|| extents.to_vec())
            });
            match entry {
                Some(extents) => {
                    self.ks.hold(&extents);
                    let len = extents.iter().map(|e| e.len as usize).sum();
                    http::write_head(self.out, 200, keep, len, None);
                    OutputSink { out: self.out, view: self.view, zero_copy: self.ks.zero_copy }.value_extents(&extents);
                }
                None => http::write_response(self.out, 404, keep, None, b""),
            }
        } else {
            http::write_response(self.out, 404, keep, None, b"");
        }
    }

    fn store_error(&mut self, keep: bool, error: &StoreError) {
        let status = match error {
            StoreError::Full | StoreError::PoolFull | StoreError::TooLargeToCommit { .. } => 507,
            StoreError::TooManyExtents { .. } => 413,
            StoreError::NotPersisted(_) => 503,
            StoreError::KeyTooLong { .. } => 414,
            StoreError::ValueTooLong { .. } => 413,
        };
        http::write_response(self.out, status, keep, Some("text/plain"), format!("{error}\n").as_bytes());
    }

    /// Appends a user-log entry (see the module docs for a full log).
    fn append_log<'b>(
        &mut self,
        len: usize,
        extents: &[Extent],
        gather: impl FnOnce() -> Cow<'b, [u8]>,
    ) -> Result<u64, StoreError> {
        if self.mode == Mode::NoPersist {
            *self.no_persist_lsn += 1;
            return Ok(*self.no_persist_lsn - 1);
        }
        let ks = &mut *self.ks;
        if let Some(why) = &ks.state.failed {
            return Err(StoreError::NotPersisted(why.clone()));
        }
        // One entry is one group of the user log: at most 1023 extents (copied: a buffer each).
        let max = (pmwire_kv::record::MAX_ENTRY_EXTENTS as u64 - 2) * u64::from(ks.engine.pool().buf_size());
        if len as u64 > max {
            return Err(StoreError::ValueTooLong { len: len as u64, max });
        }
        // This request has written no reply yet: an early commit here ends the durable
        // prefix just before it.
        let mark = self.out.mark();
        if ks.check_room().is_err() {
            // Log entries hold pool buffers too: commit, then drop the oldest half.
            ks.state.commit_early(ks.engine, ks.region, mark).map_err(|()| not_persisted(&ks.state))?;
            truncate_older_half(ks);
            ks.check_room()?;
        }
        let zero_copy = ks.zero_copy && extents.len() <= MAX_LOG_EXTENTS;
        let bytes = if zero_copy { Cow::Borrowed(&[][..]) } else { gather() };
        for attempt in 0..3 {
            let result = if zero_copy {
                ks.engine.log_append(ks.region, extents)
            } else {
                ks.engine.log_append_copy(ks.region, &bytes)
            };
            match result {
                Ok(lsn) => {
                    ks.state.wrote = true;
                    return Ok(lsn);
                }
                Err(LogError::Full { .. }) if attempt == 0 => {
                    ks.state.commit_early(ks.engine, ks.region, mark).map_err(|()| not_persisted(&ks.state))?;
                }
                Err(LogError::Full { .. }) if attempt == 1 => truncate_older_half(ks),
                Err(LogError::Extent(e)) => panic!("a received extent is not live in the pool: {e}"),
                Err(_) => return Err(StoreError::PoolFull),
            }
        }
        Err(StoreError::PoolFull)
    }
}

/// The refusal of a write whose batch could not be made durable.
fn not_persisted(state: &BatchState) -> StoreError {
    StoreError::NotPersisted(state.failed.clone().unwrap_or_else(|| "commit failed".into()))
}

impl Service<Store> for KvService {
    fn handle(&mut self, batch: &mut Batch, store: &mut Store) {
        self.state.release_held(&mut store.engine);
        self.state.expired_by_reads.clear();
        self.state.failed = None;
        self.state.committed = None;
        self.now_ms = self.clock.now_ms();
        let n = batch.len();
        let mut entries = std::mem::take(&mut self.entries);
        entries.resize_with(n.max(entries.len()), EntryState::default);
        for (i, st) in entries.iter_mut().enumerate().take(n) {
            let (input, reply) = batch.split(i);
            if let Some(served) = self.blocking.deferred.remove(&input.conn) {
                // A blocked request's answer, durable since an earlier batch: before any reply
                // of this batch (and outside its mark: a failure here does not take it back).
                reply.output.push_bytes(&served);
            }
            // Published to it since it was last shown (not durable: outside the mark too), or
            // more than its limit with what it has not read yet: closed.
            let overflowed = match self.pushes.take(input.conn, input.unsent_bytes) {
                Taken::Nothing => false,
                Taken::Messages(messages) => {
                    reply.output.push_bytes(&messages);
                    false
                }
                Taken::OverLimit => true,
            };
            self.stats.pubsub_closed += u64::from(overflowed);
            let killed = self.killing.remove(&input.conn);
            *st = EntryState {
                mark: Some(reply.output.mark()),
                http: std::mem::take(&mut st.http),
                ..EntryState::default()
            };
            st.http.clear();
            self.state.entry = i;
            if killed {
                // CLIENT KILL: closed at once; `closed` then ends its session.
                reply.abort = true;
                st.consumed = input.len_bytes();
            } else if overflowed {
                // A subscriber that let more than the limit wait: closed at once, its
                // subscriptions ended now, as Redis closes it.
                reply.abort = true;
                st.consumed = input.len_bytes();
                if let Some(session) = self.sessions.get(&input.conn) {
                    self.resp.end_subscriptions(session.id());
                }
            } else if input.listener == HTTP_LISTENER {
                self.http_entry(&input, &mut reply.output, store, st);
            } else {
                self.resp_entry(&input, &mut reply.output, store, st);
            }
            self.stats.resp_commands += st.resp_commands as u64;
            self.stats.http_requests += st.http.len() as u64;
        }
        self.sweep(store);
        let wrote = self.state.wrote;
        let committed = self.fault_ack_before_commit && self.state.failed.is_none()
            || self.state.commit(&mut store.engine, &mut store.region).is_ok();
        self.stats.commits += (wrote && committed) as u64;
        self.stats.early_commits += std::mem::take(&mut self.state.early_commits);
        self.stats.batches += 1;
        if !committed {
            self.stats.failed_batches += 1;
            let why = self.state.failed.clone().unwrap_or_default().replace(['\r', '\n'], " ");
            self.batch_failed(&why);
            // An early commit made a prefix of the batch durable: its replies stand.
            let committed = self.state.committed;
            for (i, st) in entries.iter().enumerate().take(n) {
                let from = match committed {
                    Some(c) if i < c.entry => continue,
                    Some(c) if i == c.entry => (c.mark, c.requests),
                    _ => (st.mark.expect("marked"), 0),
                };
                answer_failed(&mut batch.reply(i).output, st, from, &why);
            }
        }
        for (i, st) in entries.iter().enumerate().take(n) {
            let reply = batch.reply(i);
            reply.consumed = st.consumed;
            reply.close = st.close;
            reply.wanted = st.wanted;
        }
        self.blocking.served_now.clear();
        self.blocking.parked_now.clear();
        self.entries = entries;
        self.next_expiry_ms = store.engine.next_deadline_ms();
    }

    fn closed(&mut self, conn: ConnId, store: &mut Store) {
        self.grants.release(conn);
        self.skips.remove(&conn);
        self.scans.remove(&conn);
        if let Some(session) = self.sessions.remove(&conn) {
            self.pushes.closed(session.id(), conn);
            self.resp.close_session(session); // a blocked session stops waiting
        }
        self.blocking.forget(conn);
        self.blocking.deferred.remove(&conn);
        self.killing.remove(&conn);
        // The loop has taken every reply of the last batch: its held buffers may go.
        self.state.release_held(&mut store.engine);
    }

    fn wakeups(&mut self, wake: &mut Vec<ConnId>) -> Option<Instant> {
        let now = Instant::now();
        while let Some(&(deadline, conn)) = self.blocking.deadlines.first() {
            if deadline > now {
                break;
            }
            let session = self.sessions.get_mut(&conn).expect("a parked connection has a session");
            self.resp.unblock(session);
            let reply = RespServer::timed_out_reply(session);
            self.blocking.forget(conn);
            self.blocking.deferred.insert(conn, reply.to_vec());
            self.blocking.wake.push(conn);
            self.stats.blocked_timeouts += 1;
        }
        wake.append(&mut self.blocking.wake);
        wake.append(&mut self.kill_wake);
        self.pushes.wake(wake);
        let blocked = self.blocking.deadlines.first().map(|&(deadline, _)| deadline);
        match self.expiry_wakeup(now, wake) {
            Some(expiry) => Some(blocked.map_or(expiry, |b| b.min(expiry))),
            None => blocked,
        }
    }

    fn limits(&self) -> ConnLimits {
        client_limits(self.resp.config())
    }

    /// Redis spares blocked clients, subscribers and monitors.
    fn idle_closable(&self, conn: ConnId) -> bool {
        self.sessions.get(&conn).is_none_or(|s| !s.is_blocked() && !self.resp.is_subscribed(s.id()) && !self.resp.is_monitor(s.id()))
    }
}

/// netio's limits from the executor's `maxclients` and `timeout` (CONFIG SET changes both).
pub(crate) fn client_limits(config: &ServerConfig) -> ConnLimits {
    let idle = (config.timeout_s > 0).then(|| Duration::from_secs(u64::from(config.timeout_s)));
    ConnLimits { max_clients: config.maxclients, idle_timeout: idle }
}

/// Connections parked by a blocking command, and answers waiting to be sent (see the module
/// docs). Invariants: `parked[c]` exists exactly when `c`'s session is blocked, and holds
/// its client id and deadline; `deadlines` holds `(d, c)` exactly when `parked[c]`'s deadline
/// is `Some(d)`; `clients[id] = c` exactly when `c` is parked with session `id`.
#[derive(Debug, Default)]
struct Blocking {
    parked: HashMap<ConnId, (u64, Option<Instant>)>,
    deadlines: BTreeSet<(Instant, ConnId)>,
    clients: HashMap<u64, ConnId>,
    /// Answers for connections no longer parked (served or timed out), written before their
    /// next replies when the loop shows them again.
    deferred: HashMap<ConnId, Vec<u8>>,
    /// Connections to show the loop again.
    wake: Vec<ConnId>,
    /// Served in this batch: the connection and `BatchState::commits_ok` then.
    served_now: Vec<(ConnId, u64)>,
    /// Parked in this batch: the connection, its batch entry and request index.
    parked_now: Vec<(ConnId, (usize, usize))>,
}

impl Blocking {
    fn park(&mut self, conn: ConnId, client: u64, timeout_ms: u64, at: (usize, usize)) {
        let deadline =
            (timeout_ms > 0).then(|| Instant::now().checked_add(Duration::from_millis(timeout_ms))).flatten();
        self.parked.insert(conn, (client, deadline));
        if let Some(d) = deadline {
            self.deadlines.insert((d, conn));
        }
        self.clients.insert(client, conn);
        self.parked_now.push((conn, at));
    }

    /// `conn` is no longer parked.
    fn forget(&mut self, conn: ConnId) {
        if let Some((client, deadline)) = self.parked.remove(&conn) {
            if let Some(d) = deadline {
                assert!(self.deadlines.remove(&(d, conn)), "a parked deadline is in the set");
            }
            assert_eq!(self.clients.remove(&client), Some(conn), "a parked client is in the map");
        }
    }
}

/// Serves the sessions blocked on keys the last command made ready (Redis's
/// `handleClientsBlockedOnKeys`), each staged in this batch like any write, its answer kept
/// until the batch is committed and the loop shows its connection again. Returns how many.
fn serve_ready(
    resp: &mut RespServer,
    sessions: &mut HashMap<ConnId, Session>,
    blocking: &mut Blocking,
    ks: &mut EngineKeyspace<'_>,
    sink: &mut OutputSink<'_>,
) -> u64 {
    let mut served = 0;
    while ks.state.failed.is_none() {
        let Some((key, client)) = resp.next_ready(ks) else { break };
        let conn = *blocking.clients.get(&client).expect("a blocked session is parked");
        let session = sessions.get_mut(&conn).expect("a parked connection has a session");
        let mut answer = DeferredSink { bytes: Vec::new(), view: sink.view };
        let savepoint = ks.engine.savepoint();
        resp.serve_blocked(session, ks, &key, &mut answer);
        if std::mem::take(&mut ks.state.batch_full) {
            // As for a command: undo, commit what came before, serve again in a fresh batch.
            ks.engine.rollback_to(savepoint);
            if ks.state.commit_early(ks.engine, ks.region, sink.out.mark()).is_err() {
                break;
            }
            answer.bytes.clear();
            resp.serve_blocked(session, ks, &key, &mut answer);
            assert!(!std::mem::take(&mut ks.state.batch_full), "one list pop fills a fresh batch");
        }
        resp.unblock(session);
        blocking.forget(conn);
        blocking.deferred.insert(conn, answer.bytes);
        blocking.served_now.push((conn, ks.state.commits_ok));
        blocking.wake.push(conn);
        served += 1;
    }
    served
}

/// Collects a served blocked command's answer (stored values copied: it is sent in a later
/// batch, after the handles of this one are released).
struct DeferredSink {
    bytes: Vec<u8>,
    view: PoolView,
}

impl ReplySink<crate::keyspace::Handle> for DeferredSink {
    fn bytes(&mut self, data: &[u8]) {
        self.bytes.extend_from_slice(data);
    }

    fn value(&mut self, value: &crate::keyspace::Handle, len: u64) {
        assert_eq!(value.iter().map(|e| e.len as u64).sum::<u64>(), len, "value handle length");
        for &e in value.iter() {
            self.bytes.extend_from_slice(self.view.bytes(e));
        }
    }
}

/// An empty vector of slices of another lifetime, with `v`'s allocation (the in-place
/// collect of an empty iterator reuses it), so a scratch vector of borrowed slices can be
/// kept across calls without holding any borrow.
fn recycle<'a, 'b>(mut v: Vec<&'a [u8]>) -> Vec<&'b [u8]> {
    v.clear();
    v.into_iter().map(|_| -> &'b [u8] { unreachable!("the vector is empty") }).collect()
}

/// Durably drops the older half of the user log's committed entries (none staged).
fn truncate_older_half(ks: &mut EngineKeyspace<'_>) {
    let Some((first, _)) = ks.engine.log_read(0).next() else { return };
    let next = ks.engine.log_next_lsn();
    ks.engine.log_truncate(ks.region, first + (next - first).div_ceil(2)).expect("truncate below the end");
}

/// Replaces an entry's replies from `(mark, the requests before it)` on with one error per
/// request, then its tail.
fn answer_failed(out: &mut Output, st: &EntryState, (mark, done): (OutputMark, usize), why: &str) {
    if st.resp_commands as usize <= done && st.http.len() <= done {
        return;
    }
    out.truncate(mark);
    let resp_error = format!("-ERR pmwire could not persist: {why}\r\n");
    (done..st.resp_commands as usize).for_each(|_| out.push_bytes(resp_error.as_bytes()));
    let body = format!("could not persist: {why}\n");
    for &keep in st.http.iter().skip(done) {
        http::write_response(out, 503, keep, Some("text/plain"), body.as_bytes());
    }
    match &st.tail {
        Tail::None => {}
        Tail::Resp(reply) => out.push_bytes(reply),
        Tail::Http(error) => http::write_error(out, error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmwire_netio::{drive, Segment};

    fn post(key: &str, value: &[u8]) -> Vec<u8> {
        let mut req = format!("POST /kv/{key} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req
    }

    /// The active sweep is bounded per batch: with 200 keys due, each batch (one `handle`,
    /// here a PING) deletes at most `EXPIRE_PER_BATCH`, earliest first, and never a key that is
    /// not due; the clock is fixed, so nothing depends on time passing.
    #[test]
    fn the_sweep_deletes_at_most_its_bound_per_batch() {
        use crate::client::RespClient;
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let (mut store, _) = Store::open(&dir.path().join("pool"), 64 << 20, Mode::Copy).unwrap();
        let mut service = KvService::new(0);
        service.set_clock(Clock::Fixed(1_000));
        let mut writes = Vec::new();
        for i in 0..200 {
            RespClient::encode(&["SET", &format!("k{i:03}"), "v", "PXAT", &(1_100 + i).to_string()], &mut writes);
        }
        RespClient::encode(&["SET", "later", "v", "PXAT", "5000"], &mut writes);
        let mut ping = Vec::new();
        RespClient::encode(&["PING"], &mut ping);
        let batch = |service: &mut KvService, store: &mut Store, bytes: &[u8]| {
            let segments = [Segment { buf: 0, offset: 0, bytes }];
            let conn = ConnId { slot: 0, generation: 0 };
            let input =
                Input { conn, listener: RESP_LISTENER, peer_loopback: true, segments: &segments, peer_closed: false, unsent_bytes: 0, addrs: Default::default() };
            drive(service, store, &[input]);
        };
        batch(&mut service, &mut store, &writes);
        assert_eq!(store.engine().len(), 201);
        assert_eq!(service.stats().expired_swept, 0, "nothing due at 1000");
        service.set_clock(Clock::Fixed(2_000));
        for left in [137, 73, 9, 1, 1] {
            batch(&mut service, &mut store, &ping);
            assert_eq!(store.engine().len(), left);
            if left == 137 {
                // The earliest deadlines went first.
                assert!(store.engine().lookup(b"k063").is_none());
                assert!(store.engine().lookup(b"k064").is_some());
            }
        }
        assert!(store.engine().lookup(b"later").is_some());
        assert_eq!(service.stats().expired_swept, 200);
        assert_eq!(store.engine().expiring_len(), 1);
        store.engine().check(store.region()).unwrap();
    }

    /// The HTTP side of "a command is never split across two commits", driven without a
    /// network so that one batch surely outgrows what one commit holds (the whole WAL, 16 Ki
    /// words in a 16 MB pool): 8 connections × 800 POSTs of 100 B values (3 WAL words each,
    /// a few 4) is ~19,200 words: an early commit, then the batch's own. With the second
    /// made to fail, every POST answered 204 is stored and
    /// every one answered 503 is not.
    #[test]
    fn http_posts_are_never_split_across_commits() {
        for fail in [None, Some(2)] {
            let dir = tempfile::tempdir_in("/dev/shm").unwrap();
            let (mut store, _) = Store::open(&dir.path().join("pool"), 16 << 20, Mode::Copy).unwrap();
            assert!(8 * 800 * 3 > store.engine().max_batch_words(), "{}", store.engine().max_batch_words());
            let mut service = KvService::new(0);
            if let Some(nth) = fail {
                service.fail_commit(nth);
            }
            let value = |c: usize, r: usize| vec![(c * 16 + r) as u8; 100];
            let streams: Vec<Vec<u8>> =
                (0..8).map(|c| (0..800).flat_map(|r| post(&format!("c{c}r{r}"), &value(c, r))).collect()).collect();
            let segments: Vec<[Segment<'_>; 1]> =
                streams.iter().map(|s| [Segment { buf: 0, offset: 0, bytes: s }]).collect();
            let inputs: Vec<Input<'_>> = segments
                .iter()
                .enumerate()
                .map(|(c, segs)| Input { conn: ConnId { slot: c as u32, generation: 0 }, listener: HTTP_LISTENER, peer_loopback: true, segments: segs, peer_closed: false, unsent_bytes: 0, addrs: Default::default() })
                .collect();
            let replies = drive(&mut service, &mut store, &inputs);
            assert!(service.stats().early_commits >= 1, "{:?}", service.stats());
            let mut failed = 0;
            for (c, reply) in replies.iter().enumerate() {
                let text = String::from_utf8(reply.output.to_vec(&store)).unwrap();
                let statuses: Vec<&str> = text.match_indices("HTTP/1.1 ").map(|(i, _)| &text[i + 9..i + 12]).collect();
                assert_eq!(statuses.len(), 800, "{}", &text[..text.len().min(300)]);
                for (r, status) in statuses.into_iter().enumerate() {
                    let stored = store.engine().get(format!("c{c}r{r}").as_bytes()).is_some();
                    match status {
                        "204" => assert!(stored, "fail {fail:?}: c{c}r{r} answered 204, not stored"),
                        "503" => {
                            assert!(!stored, "fail {fail:?}: c{c}r{r} answered 503, stored");
                            failed += 1;
                        }
                        other => panic!("status {other}"),
                    }
                }
            }
            assert_eq!(failed > 0, fail.is_some(), "{failed} POSTs failed");
            store.engine().check(store.region()).unwrap();
        }
    }

    fn resp(args: &[Vec<u8>], out: &mut Vec<u8>) {
        pmwire_resp::client::encode_request(args, out);
    }

    /// An EXEC that nearly fills the WAL, after an MSET in the same batch: the batch outgrows
    /// one commit, so the MSET is committed early and the EXEC run again (its transaction
    /// restored) in a fresh batch; driven without a network so that it is one batch surely.
    /// With the early commit failing, everything is answered with the error and nothing is
    /// stored; with the last one failing, the MSET is stored and the EXEC wholly absent.
    #[test]
    fn an_exec_that_outgrows_the_batch_runs_again_after_an_early_commit() {
        for fail in [None, Some(1), Some(2)] {
            let dir = tempfile::tempdir_in("/dev/shm").unwrap();
            let (mut store, _) = Store::open(&dir.path().join("pool"), 64 << 20, Mode::Copy).unwrap();
            let mut service = KvService::new(0);
            if let Some(nth) = fail {
                service.fail_commit(nth);
            }
            let max = store.engine().max_batch_words();
            let (pre, tx) = (600, (max - 1000) / 3);
            let mut stream = Vec::new();
            let mset = |prefix: &str, n: usize| {
                let mut args = vec![b"MSET".to_vec()];
                (0..n).for_each(|k| args.extend([format!("{prefix}{k}").into_bytes(), b"v".to_vec()]));
                args
            };
            resp(&mset("p", pre), &mut stream);
            resp(&[b"MULTI".to_vec()], &mut stream);
            let queued = tx.div_ceil(2_000);
            for q in 0..queued {
                resp(&mset(&format!("t{q}-"), 2_000.min(tx - q * 2_000)), &mut stream);
            }
            resp(&[b"EXEC".to_vec()], &mut stream);
            let segments = [Segment { buf: 0, offset: 0, bytes: &stream }];
            let conn = ConnId { slot: 0, generation: 0 };
            let input =
                Input { conn, listener: RESP_LISTENER, peer_loopback: true, segments: &segments, peer_closed: false, unsent_bytes: 0, addrs: Default::default() };
            let replies = drive(&mut service, &mut store, &[input]);
            assert_eq!(service.stats().early_commits, 1, "{:?}", service.stats());
            let text = replies[0].output.to_vec(&store);
            let ok = format!("+OK\r\n+OK\r\n{}*{queued}\r\n{}", "+QUEUED\r\n".repeat(queued), "+OK\r\n".repeat(queued));
            let error = "-ERR pmwire could not persist: injected commit failure\r\n";
            let want = match fail {
                None => ok,
                Some(1) => error.repeat(2 + queued + 1),
                _ => format!("+OK\r\n+OK\r\n{}{error}", "+QUEUED\r\n".repeat(queued)),
            };
            assert!(
                text == want.as_bytes(),
                "fail {fail:?}: {}",
                String::from_utf8_lossy(&text[..text.len().min(300)])
            );
            let stored = |key: String| store.engine().get(key.as_bytes()).is_some();
            assert_eq!(stored("p0".into()) && stored(format!("p{}", pre - 1)), fail != Some(1));
            assert_eq!(stored("t0-0".into()), fail.is_none());
            assert_eq!(stored(format!("t{}-{}", queued - 1, (tx - 1) % 2_000)), fail.is_none());
            store.engine().check(store.region()).unwrap();
        }
    }

    /// A waiter parked and served in one batch, driven without a network so both surely share
    /// it: the waiter's answer waits for the commit and goes out when the loop shows its
    /// connection again; if that commit fails, the waiter gets one answer, the error, and
    /// waits no more, and the list is untouched.
    #[test]
    fn a_waiter_served_in_its_own_batch_answers_after_the_commit_or_the_error() {
        for fail in [false, true] {
            let dir = tempfile::tempdir_in("/dev/shm").unwrap();
            let (mut store, _) = Store::open(&dir.path().join("pool"), 16 << 20, Mode::Copy).unwrap();
            let mut service = KvService::new(0);
            if fail {
                service.fail_commit(1);
            }
            let (mut blpop, mut rpush) = (Vec::new(), Vec::new());
            resp(&[b"BLPOP".to_vec(), b"k".to_vec(), b"0".to_vec()], &mut blpop);
            resp(&[b"RPUSH".to_vec(), b"k".to_vec(), b"v".to_vec()], &mut rpush);
            let (waiter, pusher) = (ConnId { slot: 0, generation: 0 }, ConnId { slot: 1, generation: 0 });
            let segs = [[Segment { buf: 0, offset: 0, bytes: &blpop }], [Segment { buf: 0, offset: 0, bytes: &rpush }]];
            let input = |conn, segments| Input {
                conn,
                listener: RESP_LISTENER,
                peer_loopback: true,
                segments,
                peer_closed: false,
                unsent_bytes: 0,
                addrs: Default::default(),
            };
            let replies = drive(&mut service, &mut store, &[input(waiter, &segs[0][..]), input(pusher, &segs[1][..])]);
            let text = |r: &pmwire_netio::Reply, store: &Store| String::from_utf8(r.output.to_vec(store)).unwrap();
            let error = "-ERR pmwire could not persist: injected commit failure\r\n";
            assert_eq!(replies[0].consumed, blpop.len());
            assert_eq!(text(&replies[0], &store), if fail { error } else { "" });
            assert_eq!(text(&replies[1], &store), if fail { error } else { ":1\r\n" });
            let mut wake = Vec::new();
            assert_eq!(service.wakeups(&mut wake), None, "no deadline: BLPOP ... 0 waits for ever");
            assert_eq!(wake, vec![waiter]);
            let again = drive(&mut service, &mut store, &[input(waiter, &[])]);
            assert_eq!(text(&again[0], &store), if fail { "" } else { "*2\r\n$1\r\nk\r\n$1\r\nv\r\n" });
            assert!(!service.sessions[&waiter].is_blocked());
            assert_eq!(service.resp.blocked_clients(), 0);
            assert!(store.engine().lookup(b"k").is_none(), "popped, or never pushed");
            store.engine().check(store.region()).unwrap();
        }
    }

    /// A command refused part-way (the pool runs out in the middle of an MSET's copies) keeps
    /// nothing: its error reply means nothing of it was stored; the connection goes on.
    #[test]
    fn a_command_refused_part_way_keeps_nothing() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let (mut store, _) = Store::open(&dir.path().join("pool"), 16 << 20, Mode::Copy).unwrap();
        let mut service = KvService::new(0);
        let value = vec![7u8; 120 << 10];
        let mut args = vec![b"MSET".to_vec()];
        (0..200).for_each(|k| args.extend([format!("k{k}").into_bytes(), value.clone()]));
        let mut stream = Vec::new();
        resp(&args, &mut stream);
        resp(&[b"SET".to_vec(), b"after".to_vec(), b"1".to_vec()], &mut stream);
        let segments = [Segment { buf: 0, offset: 0, bytes: &stream }];
        let conn = ConnId { slot: 0, generation: 0 };
        let input = Input { conn, listener: RESP_LISTENER, peer_loopback: true, segments: &segments, peer_closed: false, unsent_bytes: 0, addrs: Default::default() };
        let replies = drive(&mut service, &mut store, &[input]);
        let text = String::from_utf8(replies[0].output.to_vec(&store)).unwrap();
        assert_eq!(text, "-OOM command not allowed: the persistent pool is full\r\n+OK\r\n");
        assert!(store.engine().get(b"k0").is_none(), "nothing of the refused MSET");
        assert!(store.engine().get(b"after").is_some());
        store.engine().check(store.region()).unwrap();
        // Inside EXEC: that command answers the error and keeps nothing, the others run.
        let mut stream = Vec::new();
        resp(&[b"MULTI".to_vec()], &mut stream);
        resp(&[b"SET".to_vec(), b"x".to_vec(), b"1".to_vec()], &mut stream);
        resp(&args, &mut stream);
        resp(&[b"SET".to_vec(), b"y".to_vec(), b"2".to_vec()], &mut stream);
        resp(&[b"EXEC".to_vec()], &mut stream);
        let segments = [Segment { buf: 0, offset: 0, bytes: &stream }];
        let input = Input { conn, listener: RESP_LISTENER, peer_loopback: true, segments: &segments, peer_closed: false, unsent_bytes: 0, addrs: Default::default() };
        let replies = drive(&mut service, &mut store, &[input]);
        let text = String::from_utf8(replies[0].output.to_vec(&store)).unwrap();
        let queued = "+QUEUED\r\n".repeat(3);
        let exec = "*3\r\n+OK\r\n-OOM command not allowed: the persistent pool is full\r\n+OK\r\n";
        assert_eq!(text, format!("+OK\r\n{queued}{exec}"));
        assert!(store.engine().get(b"k0").is_none(), "nothing of the refused MSET");
        assert!(store.engine().get(b"x").is_some() && store.engine().get(b"y").is_some());
        store.engine().check(store.region()).unwrap();
    }
}
