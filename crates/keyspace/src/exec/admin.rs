//! Connection and server commands: PING ECHO QUIT HELLO SELECT CLIENT
//! (SETNAME GETNAME ID) CONFIG (GET SET) INFO DBSIZE FLUSHDB FLUSHALL KEYS
//! SCAN TYPE OBJECT (ENCODING) (COMMAND is the command table's,
//! [`super::commands`]).
//!
//! SCAN cursors: keys are ordered, so a cursor stands for the last key
//! visited; [`super::Server`] keeps a bounded table from cursor numbers to
//! keys (cursor 0 starts, a forgotten or made-up cursor gets
//! `ERR invalid cursor`). A key present for the whole iteration is returned
//! exactly once.

use super::shared::parse_cursor;
use super::{Ctx, Fail, Res};
use crate::glob::matches;
use crate::store::{Keyspace, Kind};
use pmwire_resp::numbers::parse_i64;
use pmwire_resp::reply::{Protocol, ReplySink};

type C<'a, 'b, 'r, K, S> = &'a mut Ctx<'b, 'r, K, S>;

pub(super) fn ping<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    if c.argc() > 2 {
        return Err(Fail::err("wrong number of arguments for 'ping' command"));
    }
    if c.session.protocol == Protocol::Resp2 && c.server.pubsub.subscribed(c.session.id) {
        // Redis's answer in the pub/sub context: `[pong, arg or ""]`.
        c.out.array(2);
        c.out.bulk(b"pong");
        c.out.bulk(if c.argc() == 2 { c.arg(1) } else { b"" });
        return Ok(());
    }
    if c.argc() == 2 {
        c.out.bulk(c.arg(1));
    } else {
        c.out.simple(b"PONG");
    }
    Ok(())
}

/// RESET: the connection as a new one (Redis's `clearClientConnectionState`):
/// no transaction or watched keys, no subscriptions, RESP2, no name, and
/// not authenticated if a password is set.
pub(super) fn reset<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    c.session.multi = None;
    c.server.watches.unwatch_all(c.session.id);
    super::pubsub::reset(c.server, c.session.id);
    c.session.protocol = Protocol::Resp2;
    c.out.protocol = Protocol::Resp2;
    c.session.name = None;
    c.session.authenticated = c.server.config.requirepass.is_none();
    c.session.reply = super::ReplyMode::On;
    c.out.simple(b"RESET");
    Ok(())
}

pub(super) fn echo<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    c.out.bulk(c.arg(1));
    Ok(())
}

/// TIME: the keyspace's time as seconds and microseconds. The keyspace
/// reads its clock once per batch (a cluster member: the entry's time), in
/// milliseconds, so the microseconds are a multiple of 1000.
pub(super) fn time<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let ms = c.now_ms().max(0);
    c.out.array(2);
    c.out.bulk((ms / 1000).to_string().as_bytes());
    c.out.bulk(((ms % 1000) * 1000).to_string().as_bytes());
    Ok(())
}

pub(super) fn select<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let db = c.int_arg(1)?;
    if i32::try_from(db).is_err() {
        return Err(Fail::NotInteger);
    }
    if db != 0 {
        return Err(Fail::err("DB index is out of range"));
    }
    c.out.ok();
    Ok(())
}

fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

fn set_name<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, name: &[u8]) -> Res {
    if !valid_client_name(name) {
        return Err(Fail::err("Client names cannot contain spaces, newlines or special characters."));
    }
    c.session.name = if name.is_empty() { None } else { Some(name.to_vec()) };
    Ok(())
}

/// CLIENT SETNAME name.
pub(super) fn client_setname<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    set_name(c, c.arg(2))?;
    c.out.ok();
    Ok(())
}

/// What CLIENT LIST shows of a session, kept by the server: its
/// connection (set by the driver), times, last command and the state a
/// command leaves (`Server::note_client`).
#[derive(Debug, Clone)]
pub(crate) struct ClientInfo {
    /// Borrowed `?:0` until the driver sets it: a cluster member opens a
    /// session per entry it applies, and these allocate nothing then.
    pub addr: std::borrow::Cow<'static, str>,
    pub laddr: std::borrow::Cow<'static, str>,
    pub fd: i32,
    /// When its first command ran, ms (the keyspace's clock).
    pub created_ms: Option<u64>,
    pub last_ms: u64,
    pub name: Option<Vec<u8>>,
    pub last_cmd: &'static str,
    pub resp: u8,
    /// Commands queued in MULTI, -1 outside one; their bytes.
    pub multi: i64,
    pub multi_bytes: usize,
    /// The ACL user the session runs as.
    pub user: std::borrow::Cow<'static, [u8]>,
    /// While its command runs: the request's bytes as received (Redis's
    /// query buffer then: `qbuf`, `rbs`) and its arguments' bytes
    /// (`argv-mem`); 0 between commands, when pmwire holds neither.
    pub qbuf: usize,
    pub argv_mem: usize,
    /// The largest request so far (Redis's `rbp`, the read buffer's peak).
    pub qbuf_peak: usize,
}

const UNKNOWN_ADDR: &str = "?:0";

impl Default for ClientInfo {
    fn default() -> Self {
        ClientInfo { addr: UNKNOWN_ADDR.into(), laddr: UNKNOWN_ADDR.into(), fd: -1, created_ms: None, last_ms: 0, name: None, last_cmd: "NULL", resp: 2, multi: -1, multi_bytes: 0, user: std::borrow::Cow::Borrowed(b"default"), qbuf: 0, argv_mem: 0, qbuf_peak: 0 }
    }
}

/// Redis 7.0's `catClientInfoString` line for client `id` (no newline).
/// `qbuf` and `rbs` are the bytes of the request running (the caller's
/// own: between commands a connection's input is in the pool's receive
/// ring, lent only while data arrives, and pmwire keeps no per-client query
/// buffer), `qbuf-free` 0, `rbp` the largest request so far, `argv-mem` the
/// running request's arguments; the output fields are 0 (replies go to the
/// loop's send queue with the batch, none is held per client between
/// batches); `multi-mem` counts the transaction queued and `tot-mem` the
/// sum of what is held.
pub(super) fn client_line(server: &super::Server, id: u64, now_ms: u64) -> String {
    let info = &server.clients[&id];
    let mut flags = String::new();
    if server.monitors.contains(&id) {
        flags.push('O');
    }
    if server.pubsub.subscribed(id) {
        flags.push('P');
    }
    if info.multi >= 0 {
        flags.push('x');
    }
    if server.waiters.is_waiting(id) {
        flags.push('b');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let (sub, psub, ssub) = server.pubsub.client_counts(id);
    let created = info.created_ms.unwrap_or(now_ms);
    format!(
        "id={id} addr={} laddr={} fd={} name={} age={} idle={} flags={flags} db=0 sub={sub} psub={psub} ssub={ssub} multi={} qbuf={} qbuf-free=0 argv-mem={} multi-mem={} rbs={} rbp={} obl=0 oll=0 omem=0 tot-mem={} events=r cmd={} user={} redir=-1 resp={}",
        info.addr,
        info.laddr,
        info.fd,
        String::from_utf8_lossy(info.name.as_deref().unwrap_or_default()),
        now_ms.saturating_sub(created) / 1000,
        now_ms.saturating_sub(info.last_ms) / 1000,
        info.multi,
        info.qbuf,
        info.argv_mem,
        info.multi_bytes,
        info.qbuf,
        info.qbuf_peak,
        info.multi_bytes + info.qbuf + info.argv_mem,
        info.last_cmd,
        String::from_utf8_lossy(&info.user),
        info.resp,
    )
}

/// CLIENT LIST [TYPE normal|master|replica|slave|pubsub] [ID id ...]: one
/// line per client, in connection order.
pub(super) fn client_list<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let now = c.ks.now_ms();
    c.server.note_client(c.session, "client|list", now);
    let mut ids: Vec<u64> = c.server.clients.keys().copied().collect();
    ids.sort_unstable();
    if c.argc() == 4 && c.arg(2).eq_ignore_ascii_case(b"type") {
        let pubsub = match c.arg(3).to_ascii_lowercase().as_slice() {
            b"normal" => false,
            b"pubsub" => true,
            b"master" | b"replica" | b"slave" => {
                ids.clear();
                false
            }
            _ => return Err(Fail::err(&format!("Unknown client type '{}'", String::from_utf8_lossy(c.arg(3))))),
        };
        let server = &*c.server;
        ids.retain(|&id| server.pubsub.subscribed(id) == pubsub);
    } else if c.argc() > 3 && c.arg(2).eq_ignore_ascii_case(b"id") {
        let mut wanted = Vec::new();
        for j in 3..c.argc() {
            let id = pmwire_resp::numbers::parse_i64(c.arg(j)).ok_or_else(|| Fail::err("Invalid client ID"))?;
            if let Ok(id) = u64::try_from(id) {
                if c.server.clients.contains_key(&id) {
                    wanted.push(id);
                }
            }
        }
        ids = wanted;
    } else if c.argc() != 2 {
        return Err(Fail::Syntax);
    }
    let mut text = String::new();
    for id in ids {
        text.push_str(&client_line(c.server, id, now));
        text.push('\n');
    }
    c.out.verbatim(b"txt", text.as_bytes());
    Ok(())
}

/// CLIENT INFO: this connection's CLIENT LIST line.
pub(super) fn client_info<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let now = c.ks.now_ms();
    c.server.note_client(c.session, "client|info", now);
    let text = client_line(c.server, c.session.id, now) + "\n";
    c.out.verbatim(b"txt", text.as_bytes());
    Ok(())
}

/// CLIENT GETNAME.
pub(super) fn client_getname<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    match c.session.name.clone() {
        Some(n) => c.out.bulk(&n),
        None => c.out.null(),
    }
    Ok(())
}

/// CLIENT REPLY ON|OFF|SKIP: ON answers OK and sends every reply again;
/// OFF sends none from now on (itself included); SKIP none for itself and
/// the next command (nothing while OFF). Applied by `Server::execute`.
pub(super) fn client_reply<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    use super::ReplyMode;
    let mode = c.arg(2);
    if mode.eq_ignore_ascii_case(b"on") {
        c.session.reply = ReplyMode::On;
        c.out.ok();
    } else if mode.eq_ignore_ascii_case(b"off") {
        c.session.reply = ReplyMode::Off;
    } else if mode.eq_ignore_ascii_case(b"skip") {
        if c.session.reply != ReplyMode::Off {
            c.session.reply = ReplyMode::SkipNext;
        }
    } else {
        return Err(Fail::Syntax);
    }
    Ok(())
}

/// CLIENT KILL addr:port, or CLIENT KILL with filters (ID, ADDR, LADDR,
/// USER, SKIPME, TYPE), as Redis 7.0 parses and answers them: OK or
/// `No such client` for the old form, the count for the new. The sessions
/// killed are queued for the embedding server ([`super::Server::take_kills`]),
/// which closes their connections; the killer's own closes after its reply.
pub(super) fn client_kill<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let (mut addr, mut laddr, mut id, mut pubsub) = (None, None, None, None);
    let mut skipme = true;
    if c.argc() == 3 {
        addr = Some(c.arg(2));
        skipme = false; // with the old form a client may kill itself
    } else {
        let mut i = 2;
        while i < c.argc() {
            if i + 1 >= c.argc() {
                return Err(Fail::Syntax);
            }
            let (option, value) = (c.arg(i), c.arg(i + 1).to_ascii_lowercase());
            match option.to_ascii_lowercase().as_slice() {
                b"id" => {
                    let n = parse_i64(c.arg(i + 1)).filter(|&n| n >= 1).ok_or_else(|| Fail::err("client-id should be greater than 0"))?;
                    id = Some(n as u64);
                }
                b"type" => {
                    pubsub = Some(match value.as_slice() {
                        b"normal" => Some(false),
                        b"pubsub" => Some(true),
                        b"master" | b"replica" | b"slave" => None,
                        _ => return Err(Fail::err(&format!("Unknown client type '{}'", String::from_utf8_lossy(c.arg(i + 1))))),
                    });
                }
                b"addr" => addr = Some(c.arg(i + 1)),
                b"laddr" => laddr = Some(c.arg(i + 1)),
                b"user" if c.arg(i + 1) == b"default" => {}
                b"user" => return Err(Fail::err(&format!("No such user '{}'", String::from_utf8_lossy(c.arg(i + 1))))),
                b"skipme" if value == b"yes" => skipme = true,
                b"skipme" if value == b"no" => skipme = false,
                _ => return Err(Fail::Syntax),
            }
            i += 2;
        }
    }
    let me = c.session.id;
    let server = &*c.server;
    let mut ids: Vec<u64> = server
        .clients
        .iter()
        .filter(|(&client, info)| {
            addr.is_none_or(|a| a == info.addr.as_bytes())
                && laddr.is_none_or(|a| a == info.laddr.as_bytes())
                && id.is_none_or(|want| want == client)
                && pubsub.is_none_or(|p| p == Some(server.pubsub.subscribed(client)))
                && !(skipme && client == me)
        })
        .map(|(&client, _)| client)
        .collect();
    ids.sort_unstable();
    let killed = ids.len();
    c.server.kills.extend(ids);
    if c.argc() == 3 {
        if killed == 0 {
            return Err(Fail::err("No such client"));
        }
        c.out.ok();
    } else {
        c.out.integer(killed as i64);
    }
    Ok(())
}

/// CLIENT ID.
pub(super) fn client_id<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    c.out.integer(c.session.id as i64);
    Ok(())
}

/// QUIT: OK, then the connection closes (`Flow::Close`).
pub(super) fn quit<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    c.out.ok();
    Ok(())
}

pub(super) fn hello<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let mut version = None;
    let mut j = 1;
    if c.argc() >= 2 {
        let v = parse_i64(c.arg(1)).ok_or_else(|| Fail::err("Protocol version is not an integer or out of range"))?;
        if !(2..=3).contains(&v) {
            return Err(Fail::Text("NOPROTO unsupported protocol version".into()));
        }
        version = Some(v);
        j = 2;
    }
    // Options act as they are read, as in Redis: an AUTH before a bad
    // option has authenticated.
    while j < c.argc() {
        let more = c.argc() - 1 - j;
        let opt = c.arg(j);
        if opt.eq_ignore_ascii_case(b"auth") && more >= 2 {
            authenticate(c, c.arg(j + 1), c.arg(j + 2))?;
            j += 2;
        } else if opt.eq_ignore_ascii_case(b"setname") && more >= 1 {
            set_name(c, c.arg(j + 1))?;
            j += 1;
        } else {
            return Err(Fail::err(&format!("Syntax error in HELLO option '{}'", String::from_utf8_lossy(opt))));
        }
        j += 1;
    }
    if !c.session.authenticated {
        return Err(Fail::Text(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".into(),
        ));
    }
    if let Some(v) = version {
        c.session.protocol = if v == 3 { Protocol::Resp3 } else { Protocol::Resp2 };
        c.out.protocol = c.session.protocol;
        c.server.pubsub.set_protocol(c.session.id, c.session.protocol);
    }
    let proto = if c.session.protocol == Protocol::Resp3 { 3 } else { 2 };
    c.out.map(7);
    c.out.bulk(b"server");
    c.out.bulk(c.server.config.server_name.as_bytes());
    c.out.bulk(b"version");
    c.out.bulk(c.server.config.version.as_bytes());
    c.out.bulk(b"proto");
    c.out.integer(proto);
    c.out.bulk(b"id");
    c.out.integer(c.session.id as i64);
    c.out.bulk(b"mode");
    c.out.bulk(b"standalone");
    c.out.bulk(b"role");
    c.out.bulk(b"master");
    c.out.bulk(b"modules");
    c.out.array(0);
    Ok(())
}

/// Every parameter CONFIG GET knows, with its value, and whether it is
/// hidden (listed only when asked for by its exact name, as Redis's
/// `HIDDEN_CONFIG`). Aliases are listed as parameters of their own.
fn config_values(server: &super::Server) -> Vec<(&'static str, Vec<u8>, bool)> {
    let cfg = &server.config;
    let text = |s: String| s.into_bytes();
    let yes_no = |b: bool| if b { b"yes".to_vec() } else { b"no".to_vec() };
    let busy = text(cfg.lua_time_limit_ms.to_string());
    let mut params: Vec<(&'static str, Vec<u8>, bool)> = vec![
        // Always on: every write is durable in the pool before its reply.
        ("appendonly", b"yes".to_vec(), false),
        ("bind", text(cfg.bind.clone()), false),
        ("busy-reply-threshold", busy.clone(), false),
        ("databases", b"1".to_vec(), false),
        ("lua-time-limit", busy, false),
        ("maxclients", text(cfg.maxclients.to_string()), false),
        ("maxmemory", text(cfg.maxmemory.to_string()), false),
        ("maxmemory-policy", b"noeviction".to_vec(), false),
        ("min-replicas-max-lag", text(cfg.min_replicas_max_lag_s.to_string()), false),
        ("min-replicas-to-write", text(cfg.min_replicas_to_write.to_string()), false),
        ("min-slaves-max-lag", text(cfg.min_replicas_max_lag_s.to_string()), false),
        ("min-slaves-to-write", text(cfg.min_replicas_to_write.to_string()), false),
        ("notify-keyspace-events", text(super::notify::flags_string(cfg.notify_keyspace_events)), false),
        ("port", text(cfg.tcp_port.to_string()), false),
        ("protected-mode", yes_no(cfg.protected_mode), false),
        ("proto-max-bulk-len", text(cfg.limits.max_bulk_bytes.to_string()), false),
        // Not a replica: pmwire kv replicates by Raft (`--cluster`), never by REPLICAOF.
        ("replicaof", Vec::new(), false),
        ("requirepass", cfg.requirepass.clone().unwrap_or_default(), false),
        ("save", text(cfg.save.clone()), false),
        ("slaveof", Vec::new(), false),
        ("stream-node-max-bytes", text(cfg.stream_nodes.max_bytes.to_string()), false),
        ("stream-node-max-entries", text(cfg.stream_nodes.max_entries.to_string()), false),
        ("timeout", text(cfg.timeout_s.to_string()), false),
    ];
    for (p, value) in ENCODING_PARAMETERS.iter().zip(&cfg.encoding_parameters) {
        params.push((p.name, text(value.to_string()), false));
        params.extend(p.alias.map(|alias| (alias, text(value.to_string()), false)));
    }
    for (p, &value) in KEPT_PARAMETERS.iter().zip(&cfg.kept_parameters) {
        params.push((p.name, text(p.show(value)), p.hidden));
    }
    params.sort_unstable_by_key(|p| p.0);
    params
}

/// [`config_values`], for the executor's tests.
#[cfg(test)]
pub(super) fn config_values_for_tests(server: &super::Server) -> Vec<(&'static str, Vec<u8>, bool)> {
    config_values(server)
}

/// CONFIG GET pattern...: the parameters any pattern matches (without
/// case), each once; a hidden one only when named exactly.
pub(super) fn config_get<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let params = config_values(c.server);
    let mut hit = vec![false; params.len()];
    for j in 2..c.argc() {
        let pattern = c.arg(j).to_ascii_lowercase();
        for (i, (name, _, hidden)) in params.iter().enumerate() {
            hit[i] |= if *hidden { pattern == name.as_bytes() } else { matches(&pattern, name.as_bytes()) };
        }
    }
    c.out.map(hit.iter().filter(|&&h| h).count());
    for (i, (name, value, _)) in params.iter().enumerate() {
        if hit[i] {
            c.out.bulk(name.as_bytes());
            c.out.bulk(value);
        }
    }
    Ok(())
}

/// Redis 7.0's configs that CONFIG SET never changes (`IMMUTABLE_CONFIG`).
const IMMUTABLE_PARAMETERS: &[&str] = &[
    "aclfile", "always-show-logo", "aof_rewrite_cpulist", "appenddirname", "appendfilename", "bgsave_cpulist", "bio_cpulist",
    "cluster-config-file", "cluster-enabled", "cluster-port", "daemonize", "databases", "disable-thp", "enable-debug-command",
    "enable-module-command", "enable-protected-configs", "io-threads", "io-threads-do-reads", "logfile", "pidfile", "rdbchecksum",
    "replicaof", "server_cpulist", "set-proc-title", "slaveof", "socket-mark-id", "supervised", "syslog-enabled", "syslog-facility",
    "syslog-ident", "tcp-backlog", "unixsocket", "unixsocketperm",
];

/// Redis's checks of CONFIG SET's names before any value, in its order: an
/// unknown name (reported first, wherever it is), then the first immutable
/// or repeated one (an alias repeats its parameter).
fn config_set_names<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &C<'_, '_, '_, K, S>, known: &[(&'static str, Vec<u8>, bool)]) -> Res {
    let canonical = |lower: &str| -> String {
        let alias = match lower {
            "lua-time-limit" => Some("busy-reply-threshold"),
            "slaveof" => Some("replicaof"),
            _ => ENCODING_PARAMETERS.iter().find(|p| p.alias == Some(lower)).map(|p| p.name),
        };
        alias.unwrap_or(lower).to_string()
    };
    let mut seen: Vec<String> = Vec::new();
    let mut first: Option<Fail> = None;
    for j in (2..c.argc()).step_by(2) {
        let given = String::from_utf8_lossy(c.arg(j)).into_owned();
        let lower = given.to_ascii_lowercase();
        let listed = known.iter().any(|(n, _, _)| *n == lower) || IMMUTABLE_PARAMETERS.contains(&lower.as_str()) || REDIS_PARAMETERS.contains(&lower.as_str());
        if !listed {
            let shown = String::from_utf8_lossy(&c.arg(j)[..c.arg(j).len().min(128)]).into_owned();
            return Err(Fail::err(&format!("Unknown option or number of arguments for CONFIG SET - '{shown}'")));
        }
        if first.is_some() {
            continue;
        }
        let name = canonical(&lower);
        if IMMUTABLE_PARAMETERS.contains(&lower.as_str()) {
            first = Some(Fail::err(&format!("CONFIG SET failed (possibly related to argument '{given}') - can't set immutable config")));
        } else if seen.contains(&name) {
            first = Some(Fail::err(&format!("CONFIG SET failed (possibly related to argument '{given}') - duplicate parameter")));
        }
        seen.push(name);
    }
    first.map_or(Ok(()), Err)
}

/// A parameter pmwire keeps for CONFIG GET and CONFIG SET, checked as Redis
/// checks it, and which changes nothing in pmwire (as `save`): the
/// eviction and replication knobs of a server that neither evicts nor
/// replicates by REPLICAOF, and the query buffer limit of one whose
/// requests are bounded by its receive ring.
#[derive(Debug, Clone, Copy)]
pub struct KeptParameter {
    /// The parameter's name.
    pub name: &'static str,
    /// Redis 7.0's default.
    pub default: i64,
    min: i64,
    max: i64,
    /// Takes a memory value (`10mb`).
    memory: bool,
    /// Takes a percentage (`10%`, kept negative as Redis keeps it).
    percent: bool,
    /// Redis's `HIDDEN_CONFIG`.
    hidden: bool,
}

/// The parameters kept without effect ([`KeptParameter`]).
pub const KEPT_PARAMETERS: [KeptParameter; 5] = [
    KeptParameter { name: "client-query-buffer-limit", default: 1 << 30, min: 1 << 20, max: i64::MAX, memory: true, percent: false, hidden: false },
    // A debugging delay of RDB loading: pmwire loads no RDB.
    KeptParameter { name: "key-load-delay", default: 0, min: i32::MIN as i64, max: i32::MAX as i64, memory: false, percent: false, hidden: true },
    KeptParameter { name: "maxmemory-clients", default: 0, min: -100, max: i64::MAX, memory: true, percent: true, hidden: false },
    KeptParameter { name: "maxmemory-samples", default: 5, min: 1, max: i32::MAX as i64, memory: false, percent: false, hidden: false },
    KeptParameter { name: "repl-backlog-size", default: 1 << 20, min: 1, max: i64::MAX, memory: true, percent: false, hidden: false },
];

impl KeptParameter {
    /// `value` as CONFIG SET reads it (Redis's `numericParseString` and
    /// `numericBoundaryCheck`), or Redis's error.
    fn parse(&self, value: &[u8]) -> Result<i64, Fail> {
        let failed = |why: String| Fail::err(&format!("CONFIG SET failed (possibly related to argument '{}') - {why}", self.name));
        let percent = || {
            let digits = value.strip_suffix(b"%").filter(|d| !d.is_empty())?;
            pmwire_resp::numbers::parse_i64(digits).filter(|&n| n >= 0).map(|n| -n)
        };
        let n = if self.memory {
            memory_value(value).or_else(|| if self.percent { percent() } else { None })
        } else {
            pmwire_resp::numbers::parse_i64(value)
        };
        let Some(n) = n else {
            return Err(failed(match (self.memory, self.percent) {
                (true, true) => "argument must be a memory or percent value".into(),
                (true, false) => "argument must be a memory value".into(),
                _ => "argument couldn't be parsed into an integer".into(),
            }));
        };
        if self.percent && n < 0 {
            if n < self.min {
                return Err(failed(format!("percentage argument must be less or equal to {}", -self.min)));
            }
        } else if n < self.min || n > self.max {
            return Err(failed(format!("argument must be between {} and {} inclusive", self.min, self.max)));
        }
        Ok(n)
    }

    /// The value as CONFIG GET shows it (a percentage with `%`).
    fn show(&self, value: i64) -> String {
        if self.percent && value < 0 {
            format!("{}%", -value)
        } else {
            value.to_string()
        }
    }
}

/// CONFIG SET: the parameters pmwire changes (`requirepass`, empty for
/// none; `protected-mode`, `maxmemory`, `busy-reply-threshold`, ...), those
/// it keeps for CONFIG GET without effect (`save`: pmwire takes no
/// snapshots, every write is durable before its reply; [`KEPT_PARAMETERS`]),
/// `appendonly yes` (already so) and any listed parameter set to the value
/// it has; all or none, as Redis 7.0 applies several pairs, after Redis's
/// checks of the names ([`config_set_names`]). Other parameters are
/// refused by name.
pub(super) fn config_set<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    if c.argc() % 2 != 0 {
        return Err(Fail::Syntax);
    }
    let known = config_values(c.server);
    config_set_names(&c, &known)?;
    let mut maxmemory = None;
    let mut kept = c.server.config.kept_parameters;
    let mut pass = None;
    let mut protected = None;
    let mut save = None;
    let mut busy = None;
    let (mut node_bytes, mut node_entries) = (None, None);
    let (mut maxclients, mut timeout) = (None, None);
    let (mut min_replicas, mut max_lag) = (None, None);
    let mut events = None;
    let mut encoding = c.server.config.encoding_parameters;
    for j in (2..c.argc()).step_by(2) {
        let (name, value) = (c.arg(j), c.arg(j + 1));
        if let Some(i) = ENCODING_PARAMETERS.iter().position(|p| p.is(name)) {
            encoding[i] = ENCODING_PARAMETERS[i].parse(value)?;
        } else if name.eq_ignore_ascii_case(b"requirepass") {
            pass = Some(value);
        } else if name.eq_ignore_ascii_case(b"protected-mode") {
            protected = Some(match value.to_ascii_lowercase().as_slice() {
                b"yes" => true,
                b"no" => false,
                _ => return Err(Fail::err("CONFIG SET failed (possibly related to argument 'protected-mode') - argument must be 'yes' or 'no'")),
            });
        } else if name.eq_ignore_ascii_case(b"notify-keyspace-events") {
            let flags = super::notify::parse_flags(value).ok_or_else(|| {
                Fail::err(&format!("CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - {}", super::notify::BAD_CLASS))
            })?;
            events = Some(flags);
        } else if name.eq_ignore_ascii_case(b"save") {
            save = Some(save_schedule(value).ok_or_else(|| Fail::err("CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters"))?);
        } else if name.eq_ignore_ascii_case(b"busy-reply-threshold") || name.eq_ignore_ascii_case(b"lua-time-limit") {
            let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
            let n = pmwire_resp::numbers::parse_i64(value)
                .ok_or_else(|| Fail::err(&format!("CONFIG SET failed (possibly related to argument '{lower}') - argument couldn't be parsed into an integer")))?;
            let n = u64::try_from(n).map_err(|_| {
                Fail::err(&format!("CONFIG SET failed (possibly related to argument '{lower}') - argument must be between 0 and 9223372036854775807 inclusive"))
            })?;
            busy = Some(n);
        } else if name.eq_ignore_ascii_case(b"stream-node-max-entries") || name.eq_ignore_ascii_case(b"stream-node-max-bytes") {
            let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
            let memory = lower == "stream-node-max-bytes";
            let n = if memory { memory_value(value) } else { pmwire_resp::numbers::parse_i64(value) }
                .ok_or_else(|| Fail::err(&format!("CONFIG SET failed (possibly related to argument '{lower}') - argument couldn't be parsed into an integer")))?;
            let n = u64::try_from(n).map_err(|_| {
                Fail::err(&format!("CONFIG SET failed (possibly related to argument '{lower}') - argument must be between 0 and 9223372036854775807 inclusive"))
            })?;
            if memory { node_bytes = Some(n) } else { node_entries = Some(n) }
        } else if name.eq_ignore_ascii_case(b"maxclients") || name.eq_ignore_ascii_case(b"timeout") {
            let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
            let failed = |why: &str| Fail::err(&format!("CONFIG SET failed (possibly related to argument '{lower}') - {why}"));
            let n = pmwire_resp::numbers::parse_i64(value).ok_or_else(|| failed("argument couldn't be parsed into an integer"))?;
            if lower == "maxclients" {
                let n = u32::try_from(n).ok().filter(|&n| n >= 1).ok_or_else(|| failed("argument must be between 1 and 4294967295 inclusive"))?;
                let cap = c.server.config.maxclients_cap;
                if n > cap {
                    return Err(failed(&format!("The operating system is not able to handle the specified number of clients, try with {cap}")));
                }
                maxclients = Some(n);
            } else {
                let n = u32::try_from(n).ok().filter(|&n| n <= i32::MAX as u32).ok_or_else(|| failed("argument must be between 0 and 2147483647 inclusive"))?;
                timeout = Some(n);
            }
        } else if let Some(lower) = ["min-replicas-to-write", "min-slaves-to-write", "min-replicas-max-lag", "min-slaves-max-lag"].into_iter().find(|n| name.eq_ignore_ascii_case(n.as_bytes())) {
            let failed = |why: &str| Fail::err(&format!("CONFIG SET failed (possibly related to argument '{lower}') - {why}"));
            let n = pmwire_resp::numbers::parse_i64(value).ok_or_else(|| failed("argument couldn't be parsed into an integer"))?;
            let n = u32::try_from(n).ok().filter(|&n| n <= i32::MAX as u32).ok_or_else(|| failed("argument must be between 0 and 2147483647 inclusive"))?;
            if lower.ends_with("to-write") { min_replicas = Some(n) } else { max_lag = Some(n) }
        } else if let Some(i) = KEPT_PARAMETERS.iter().position(|p| name.eq_ignore_ascii_case(p.name.as_bytes())) {
            kept[i] = KEPT_PARAMETERS[i].parse(value)?;
        } else if name.eq_ignore_ascii_case(b"maxmemory") {
            let n = memory_value(value).ok_or_else(|| Fail::err("CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be a memory value"))?;
            maxmemory = Some(u64::try_from(n).map_err(|_| Fail::err("CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be a memory value"))?);
            if maxmemory != Some(0) && !c.server.config.maxmemory_enforced {
                return Err(Fail::err("CONFIG SET failed (possibly related to argument 'maxmemory') - a pmwire cluster member does not enforce maxmemory: its writes are admitted by the replicated log, not by this executor"));
            }
        } else if name.eq_ignore_ascii_case(b"maxmemory-policy") {
            maxmemory_policy(value)?;
        } else if name.eq_ignore_ascii_case(b"appendonly") {
            match value.to_ascii_lowercase().as_slice() {
                b"yes" => {}
                b"no" => return Err(Fail::err("CONFIG SET failed (possibly related to argument 'appendonly') - pmwire cannot turn persistence off: every write is durable in its pool before its reply")),
                _ => return Err(Fail::err("CONFIG SET failed (possibly related to argument 'appendonly') - argument must be 'yes' or 'no'")),
            }
        } else if name.eq_ignore_ascii_case(b"port") && value != c.server.config.tcp_port.to_string().as_bytes() {
            return Err(Fail::err(&format!(
                "CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port: pmwire serves the port it started on ({}) until it stops",
                c.server.config.tcp_port
            )));
        } else if known.iter().any(|(n, v, _)| name.eq_ignore_ascii_case(n.as_bytes()) && v == value) {
            // A parameter pmwire does not change, set to the value it has: nothing to do.
        } else {
            let shown = String::from_utf8_lossy(&name[..name.len().min(128)]).into_owned();
            let lower = shown.to_ascii_lowercase();
            if REDIS_PARAMETERS.contains(&lower.as_str()) || known.iter().any(|(n, _, _)| *n == lower) {
                return Err(Fail::err(&format!(
                    "CONFIG SET failed (possibly related to argument '{lower}') - pmwire does not change '{lower}' (it sets requirepass, protected-mode, save, busy-reply-threshold, maxclients, timeout, maxmemory, min-replicas-to-write, min-replicas-max-lag, notify-keyspace-events, the encoding thresholds and the stream-node limits; every write is durable before its reply)"
                )));
            }
            return Err(Fail::err(&format!("Unknown option or number of arguments for CONFIG SET - '{shown}'")));
        }
    }
    if let Some(p) = pass {
        c.server.config.requirepass = if p.is_empty() { None } else { Some(p.to_vec()) };
    }
    if let Some(p) = protected {
        c.server.config.protected_mode = p;
    }
    if let Some(s) = save {
        c.server.config.save = s;
    }
    if let Some(ms) = busy {
        c.server.config.lua_time_limit_ms = ms;
    }
    if let Some(n) = node_bytes {
        c.server.config.stream_nodes.max_bytes = n;
    }
    if let Some(n) = node_entries {
        c.server.config.stream_nodes.max_entries = n;
    }
    if let Some(n) = maxclients {
        c.server.config.maxclients = n;
    }
    if let Some(n) = timeout {
        c.server.config.timeout_s = n;
    }
    if let Some(n) = min_replicas {
        c.server.config.min_replicas_to_write = n;
    }
    if let Some(n) = max_lag {
        c.server.config.min_replicas_max_lag_s = n;
    }
    if let Some(flags) = events {
        c.server.config.notify_keyspace_events = flags;
    }
    c.server.config.encoding_parameters = encoding;
    c.server.config.kept_parameters = kept;
    if let Some(n) = maxmemory {
        c.server.config.maxmemory = n;
    }
    c.out.ok();
    Ok(())
}

/// `maxmemory-policy`: Redis's policies are known, and only `noeviction`
/// is taken: pmwire never evicts (a durable store does not drop data to
/// make room; above `maxmemory` it refuses writes that would grow it).
fn maxmemory_policy(value: &[u8]) -> Res {
    const POLICIES: [&str; 8] = ["volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl", "allkeys-lru", "allkeys-lfu", "allkeys-random", "noeviction"];
    let lower = String::from_utf8_lossy(value).to_ascii_lowercase();
    if lower == "noeviction" {
        return Ok(());
    }
    let failed = |why: String| Fail::err(&format!("CONFIG SET failed (possibly related to argument 'maxmemory-policy') - {why}"));
    if POLICIES.contains(&lower.as_str()) {
        return Err(failed(format!("pmwire does not evict keys: a durable store does not drop data to make room, so '{lower}' is refused; 'noeviction' (writes refused above maxmemory) is the only policy")));
    }
    Err(failed(format!("argument(s) must be one of the following: {}", POLICIES.join(", "))))
}

/// Parses a memory amount as Redis's `memtoull` (CONFIG SET maxmemory,
/// `--maxmemory`): bytes, or `None`.
pub fn parse_memory(value: &[u8]) -> Option<u64> {
    memory_value(value).and_then(|n| u64::try_from(n).ok())
}

/// A memory amount as Redis's `memtoull` reads one: an integer with an
/// optional unit (`b`, `k`, `kb`, `m`, `mb`, `g`, `gb`, any case; `k` is
/// 1000, `kb` 1024).
fn memory_value(value: &[u8]) -> Option<i64> {
    let lower = value.to_ascii_lowercase();
    let units: [(&[u8], i64); 7] = [(b"gb", 1 << 30), (b"mb", 1 << 20), (b"kb", 1 << 10), (b"g", 1_000_000_000), (b"m", 1_000_000), (b"k", 1000), (b"b", 1)];
    let (digits, mul) = units.iter().find_map(|&(u, m)| lower.strip_suffix(u).map(|d| (d, m))).unwrap_or((&lower[..], 1));
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse::<i64>().ok()?.checked_mul(mul)
}

/// `save`'s value as Redis 7.0 takes it: "" (no snapshots), or pairs of
/// seconds (at least 1) and changes (at least 0) split on single spaces,
/// each read as C's `strtoll` reads it; the pairs as CONFIG GET shows
/// them, or `None` if Redis would refuse the value.
fn save_schedule(value: &[u8]) -> Option<String> {
    if value.is_empty() {
        return Some(String::new());
    }
    let words: Vec<&[u8]> = value.split(|&b| b == b' ').collect();
    if words.len() % 2 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(words.len());
    for (j, word) in words.iter().enumerate() {
        let n = strtoll(word)?;
        let seconds = j % 2 == 0;
        if (seconds && n < 1) || (!seconds && n < 0) {
            return None;
        }
        // Redis keeps the changes in a C `int`.
        out.push(if seconds { n.to_string() } else { (n as i32).to_string() });
    }
    Some(out.join(" "))
}

/// A whole word read as C's `strtoll(word, &end, 10)` with `*end == 0`
/// required: leading white space, a sign, decimal digits, saturating on
/// overflow; an empty word reads as 0 (no digits, and nothing left over).
fn strtoll(word: &[u8]) -> Option<i64> {
    if word.is_empty() {
        return Some(0);
    }
    let rest = word.trim_ascii_start();
    let (negative, digits) = match rest.first() {
        Some(b'-') => (true, &rest[1..]),
        Some(b'+') => (false, &rest[1..]),
        _ => (false, rest),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        let d = i64::from(d - b'0');
        n = if negative { n.saturating_mul(10).saturating_sub(d) } else { n.saturating_mul(10).saturating_add(d) };
    }
    Some(n)
}

/// Parameters Redis 7.0 sets that pmwire does not: refused by name rather
/// than called unknown.
/// One of Redis's encoding thresholds (when a listpack, intset or
/// quicklist node gives way to a bigger structure), as Redis 7.0's
/// `config.c` declares it. pmwire keeps the value CONFIG SET gives and
/// CONFIG GET shows it; a collection's layout follows pmwire's own limits
/// ([`crate::chunked::ChunkConfig`]), so clients and test suites that tune
/// these (Redis's own does before most units) are served, and OBJECT
/// ENCODING still says how pmwire holds the value.
#[derive(Debug, Clone, Copy)]
pub struct EncodingParameter {
    /// The parameter's name.
    pub name: &'static str,
    /// Its Redis 6 name, still accepted.
    pub alias: Option<&'static str>,
    /// Redis 7.0's default.
    pub default: i64,
    /// The least value accepted.
    pub min: i64,
    /// The greatest value accepted.
    pub max: i64,
    /// A memory amount (`64`, `1kb`...), as Redis's `MEMORY_CONFIG`.
    pub memory: bool,
}

impl EncodingParameter {
    const fn new(name: &'static str, alias: Option<&'static str>, default: i64, min: i64, max: i64, memory: bool) -> Self {
        EncodingParameter { name, alias, default, min, max, memory }
    }

    fn is(&self, name: &[u8]) -> bool {
        name.eq_ignore_ascii_case(self.name.as_bytes()) || self.alias.is_some_and(|a| name.eq_ignore_ascii_case(a.as_bytes()))
    }

    /// `value` as CONFIG SET reads it, or Redis's error.
    fn parse(&self, value: &[u8]) -> Result<i64, Fail> {
        let failed = |why: &str| Fail::err(&format!("CONFIG SET failed (possibly related to argument '{}') - {why}", self.name));
        let n = if self.memory {
            memory_value(value).ok_or_else(|| failed("argument must be a memory value"))?
        } else {
            pmwire_resp::numbers::parse_i64(value).ok_or_else(|| failed("argument couldn't be parsed into an integer"))?
        };
        if n < self.min || n > self.max {
            return Err(failed(&format!("argument must be between {} and {} inclusive", self.min, self.max)));
        }
        Ok(n)
    }
}

/// Redis 7.0's encoding thresholds, in [`super::ServerConfig::encoding_parameters`]'s order.
pub const ENCODING_PARAMETERS: [EncodingParameter; 7] = [
    EncodingParameter::new("hash-max-listpack-entries", Some("hash-max-ziplist-entries"), 512, 0, i64::MAX, false),
    EncodingParameter::new("hash-max-listpack-value", Some("hash-max-ziplist-value"), 64, 0, i64::MAX, true),
    EncodingParameter::new("list-compress-depth", None, 0, 0, i32::MAX as i64, false),
    EncodingParameter::new("list-max-listpack-size", Some("list-max-ziplist-size"), -2, i32::MIN as i64, i32::MAX as i64, false),
    EncodingParameter::new("set-max-intset-entries", None, 512, 0, i64::MAX, false),
    EncodingParameter::new("zset-max-listpack-entries", Some("zset-max-ziplist-entries"), 128, 0, i64::MAX, false),
    EncodingParameter::new("zset-max-listpack-value", Some("zset-max-ziplist-value"), 64, 0, i64::MAX, true),
];

const REDIS_PARAMETERS: &[&str] = &[
    "appendfsync", "appendonly", "databases", "hz", "latency-tracking", "lazyfree-lazy-user-del", "loglevel",
    "maxmemory", "maxmemory-policy", "proto-max-bulk-len", "slowlog-log-slower-than",
];

/// AUTH [username] password.
pub(super) fn auth<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    if c.argc() > 3 {
        return Err(Fail::Syntax);
    }
    c.server.sync_requirepass();
    let (user, password) = if c.argc() == 2 {
        if c.server.users.default_nopass() {
            return Err(Fail::err(
                "AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            ));
        }
        (&b"default"[..], c.arg(1))
    } else {
        (c.arg(1), c.arg(2))
    };
    authenticate(c, user, password)?;
    c.out.ok();
    Ok(())
}

/// Redis's `ACLAuthenticateUser`: the session runs as `user` if
/// `password` opens it; a failure is logged in ACL LOG (never the password).
fn authenticate<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, user: &[u8], password: &[u8]) -> Res {
    if !c.server.credentials_ok(user, password) {
        let now = c.ks.now_ms();
        let context = if c.session.in_multi() { "multi" } else { "toplevel" };
        let client_info = if c.server.clients.contains_key(&c.session.id) { client_line(c.server, c.session.id, now) } else { String::new() };
        let entry = super::acl::LogEntry { count: 1, reason: "auth", context, object: c.arg(0).to_vec(), username: user.to_vec(), ctime_ms: now, client_info };
        c.server.users.log_denied(entry);
        return Err(Fail::Text(WRONGPASS.into()));
    }
    c.session.authenticated = true;
    c.session.user = if user == b"default" { std::borrow::Cow::Borrowed(b"default") } else { std::borrow::Cow::Owned(user.to_vec()) };
    Ok(())
}

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// CLUSTER ...: pmwire kv is no Redis Cluster node (its replication is
/// Raft, `--cluster`, whose members all hold every key), so every
/// subcommand answers as Redis does with `cluster-enabled no`.
pub(super) fn cluster<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(_c: C<'_, '_, '_, K, S>) -> Res {
    Err(Fail::err("This instance has cluster support disabled"))
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]: every write is already
/// durable, so there is nothing to save or wait for: the server stops
/// ([`super::Server::shutdown_requested`]) and, as Redis, the connection
/// is closed without a reply. ABORT finds no shutdown in progress.
pub(super) fn shutdown<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let (mut save, mut nosave, mut other, mut abort) = (false, false, false, false);
    for j in 1..c.argc() {
        match c.arg(j).to_ascii_lowercase().as_slice() {
            b"nosave" => nosave = true,
            b"save" => save = true,
            b"now" | b"force" => other = true,
            b"abort" => abort = true,
            _ => return Err(Fail::Syntax),
        }
    }
    if (abort && (save || nosave || other)) || (save && nosave) {
        return Err(Fail::Syntax);
    }
    if abort {
        return Err(Fail::err("No shutdown in progress."));
    }
    c.server.shutdown = true;
    Ok(())
}

/// SAVE: every write is durable in the pool before its reply, so there is
/// nothing left to save; answered as Redis answers a finished save.
pub(super) fn save<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    c.out.ok();
    Ok(())
}

/// BGSAVE [SCHEDULE]: as SAVE, answered with Redis's text.
pub(super) fn bgsave<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    if c.argc() > 2 || (c.argc() == 2 && !c.arg(1).eq_ignore_ascii_case(b"schedule")) {
        return Err(Fail::Syntax);
    }
    c.out.simple(b"Background saving started");
    Ok(())
}

/// LASTSAVE: now, in seconds: the whole keyspace as of this command is
/// durable (every write is, before its reply).
pub(super) fn lastsave<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let secs = c.now_ms().max(0) / 1000;
    c.out.integer(secs);
    Ok(())
}

pub(super) fn dbsize<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    c.out.integer(c.ks.len() as i64);
    Ok(())
}

pub(super) fn flush<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    if c.argc() > 2 {
        return Err(Fail::Syntax);
    }
    if c.argc() == 2 && !c.arg(1).eq_ignore_ascii_case(b"sync") && !c.arg(1).eq_ignore_ascii_case(b"async") {
        return Err(Fail::Syntax);
    }
    c.clear_keyspace()?;
    c.out.ok();
    Ok(())
}

pub(super) fn type_<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let name = c.ks.get(c.arg(1)).map_or("none", |s| s.kind.name());
    c.out.simple(name.as_bytes());
    Ok(())
}

/// OBJECT ENCODING key: what redis-server 7.0 would answer for the value
/// ([`super::encoding`]).
pub(super) fn object<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let key = c.arg(2);
    let Some(s) = c.ks.get(key) else {
        c.out.null();
        return Ok(());
    };
    let encoding = super::encoding::redis_encoding(c, key, s.kind, s.len)?;
    c.out.bulk(encoding.as_bytes());
    Ok(())
}

/// OBJECT REFCOUNT key: 1 for a key that exists (pmwire shares no value
/// between keys; Redis shares small integers and answers 2147483647 for
/// them), the null reply for one that does not.
pub(super) fn object_refcount<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    if c.ks.get(c.arg(2)).is_some() {
        c.out.integer(1);
    } else {
        c.out.null();
    }
    Ok(())
}

/// MEMORY USAGE key [SAMPLES count]: the bytes the key and its value take
/// in the pool: the key's, plus the value's as stored (a chunked
/// collection's chunks summed as its materialised blob; a stream's header
/// only); the null reply for a missing key. Every member is counted, so
/// SAMPLES is checked and otherwise ignored.
pub(super) fn memory_usage<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let mut j = 3;
    while j < c.argc() {
        if c.arg(j).eq_ignore_ascii_case(b"samples") && j + 1 < c.argc() {
            c.int_arg(j + 1)?;
            j += 2;
        } else {
            return Err(Fail::Syntax);
        }
    }
    let key = c.arg(2);
    let Some(s) = c.ks.get(key) else {
        c.out.null();
        return Ok(());
    };
    let value = match s.kind {
        Kind::Stream => s.len,
        kind => c.load(key, kind)?.map_or(0, |v| v.len() as u64),
    };
    c.out.integer((key.len() as u64 + value) as i64);
    Ok(())
}

/// Visits every key matching `pattern` (all if `None`), in order.
fn each_key<K: Keyspace>(ks: &mut K, mut visit: impl FnMut(&[u8], Kind)) {
    const CHUNK: usize = 4096;
    let mut after: Option<Vec<u8>> = None;
    loop {
        let mut last = None;
        let n = ks.scan(after.as_deref(), CHUNK, &mut |k, kind| {
            visit(k, kind);
            last = Some(k.to_vec());
        });
        if n < CHUNK {
            return;
        }
        after = last;
    }
}

pub(super) fn keys<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let pattern = c.arg(1);
    let all = pattern == b"*";
    let mut found = Vec::new();
    each_key(c.ks, |k, _| {
        if all || matches(pattern, k) {
            found.push(k.to_vec());
        }
    });
    c.out.array(found.len());
    for k in &found {
        c.out.bulk(k);
    }
    Ok(())
}

/// SCAN cursor [MATCH pattern] [COUNT n] [TYPE type].
pub(super) fn scan<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let cursor = parse_cursor(c.arg(1)).ok_or_else(|| Fail::err("invalid cursor"))?;
    let (mut count, mut pattern, mut type_name) = (10i64, None, None);
    let mut i = 2;
    while i < c.argc() {
        let left = c.argc() - i;
        let a = c.arg(i);
        if a.eq_ignore_ascii_case(b"count") && left >= 2 {
            count = c.int_arg(i + 1)?;
            if count < 1 {
                return Err(Fail::Syntax);
            }
        } else if a.eq_ignore_ascii_case(b"match") && left >= 2 {
            let p = c.arg(i + 1);
            pattern = if p == b"*" { None } else { Some(p) };
        } else if a.eq_ignore_ascii_case(b"type") && left >= 2 {
            type_name = Some(c.arg(i + 1));
        } else {
            return Err(Fail::Syntax);
        }
        i += 2;
    }
    let after = match cursor {
        0 => None,
        n => Some(c.server.cursors.keys.get(&n).cloned().ok_or_else(|| Fail::err("invalid cursor"))?),
    };
    let limit = (count as u64).min(c.server.config.scan_max_count as u64) as usize;
    let mut found = Vec::new();
    let mut last = None;
    let visited = c.ks.scan(after.as_deref(), limit, &mut |k, kind| {
        last = Some(k.to_vec());
        let type_ok = type_name.is_none_or(|t| t.eq_ignore_ascii_case(kind.name().as_bytes()));
        if type_ok && pattern.is_none_or(|p| matches(p, k)) {
            found.push(k.to_vec());
        }
    });
    let next = match last {
        Some(k) if visited == limit => c.server.remember_cursor(k),
        _ => 0,
    };
    c.out.array(2);
    c.out.bulk(next.to_string().as_bytes());
    c.out.array(found.len());
    for k in &found {
        c.out.bulk(k);
    }
    Ok(())
}

/// INFO [section...]: the sections a client or monitor looks at, with
/// pmwire's values (Redis's full field list is not reproduced).
pub(super) fn info<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    const ALL: [&str; 9] = ["server", "clients", "memory", "persistence", "stats", "replication", "commandstats", "errorstats", "keyspace"];
    // Redis's default sections: all but commandstats.
    const DEFAULT: [bool; 9] = [true, true, true, true, true, true, false, true, true];
    let mut want = [false; 9];
    if c.argc() == 1 {
        want = DEFAULT;
    }
    for j in 1..c.argc() {
        let s = c.arg(j).to_ascii_lowercase();
        if s == b"all" || s == b"everything" {
            want = [true; 9];
        }
        if s == b"default" {
            want.iter_mut().zip(DEFAULT).for_each(|(w, d)| *w |= d);
        }
        for (i, name) in ALL.iter().enumerate() {
            want[i] |= s == name.as_bytes();
        }
    }
    let memory = if want[2] {
        let (scripts, (libraries, functions)) = (c.server.scripts.count(c.ks), c.server.function_counts(c.ks));
        let (used, max) = (c.ks.used_memory(), c.server.config.maxmemory);
        format!("used_memory:{used}\r\nmaxmemory:{max}\r\nmaxmemory_policy:noeviction\r\nnumber_of_cached_scripts:{scripts}\r\nnumber_of_functions:{functions}\r\nnumber_of_libraries:{libraries}\r\n")
    } else {
        String::new()
    };
    let cfg = &c.server.config;
    let mut text = String::new();
    let server = &*c.server;
    let errors = format!("total_error_replies:{}\r\n", server.stats.total_error_replies());
    let mut section = |i: usize, body: String| {
        if want[i] {
            let mut body = server.info_section(ALL[i]).map_or(body, str::to_string);
            if ALL[i] == "stats" && server.info_section("stats").is_some() {
                body.push_str(&errors);
            }
            if !text.is_empty() {
                text.push_str("\r\n");
            }
            let title = ALL[i][..1].to_ascii_uppercase() + &ALL[i][1..];
            text.push_str(&format!("# {title}\r\n{body}"));
        }
    };
    section(
        0,
        format!(
            "redis_version:{}\r\nredis_mode:standalone\r\nos:{}\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\nexecutable:pmwire\r\n",
            cfg.version,
            std::env::consts::OS,
            std::process::id(),
            cfg.tcp_port
        ),
    );
    let clients = format!(
        "connected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:{}\r\n",
        server.connected,
        server.config.maxclients,
        server.blocked_clients()
    );
    section(1, clients);
    section(2, memory);
    // aof_enabled: every write is durable before its reply (CONFIG GET appendonly: yes).
    section(3, "loading:0\r\nrdb_changes_since_last_save:0\r\naof_enabled:1\r\n".into());
    let (channels, patterns, shard) = server.pubsub.sizes();
    section(
        4,
        format!(
            "total_commands_processed:{}\r\ntotal_error_replies:{}\r\npubsub_channels:{channels}\r\npubsub_patterns:{patterns}\r\npubsubshard_channels:{shard}\r\n",
            server.commands_processed,
            server.stats.total_error_replies()
        ),
    );
    section(5, "role:master\r\nconnected_slaves:0\r\n".into());
    let mut commandstats = String::new();
    if want[6] {
        server.stats.write_commandstats(&mut commandstats);
    }
    section(6, commandstats);
    let mut errorstats = String::new();
    if want[7] {
        server.stats.write_errorstats(&mut errorstats);
    }
    section(7, errorstats);
    let n = c.ks.len();
    let expires = c.ks.expiring_len();
    section(8, if n > 0 { format!("db0:keys={n},expires={expires},avg_ttl=0\r\n") } else { String::new() });
    c.out.verbatim(b"txt", text.as_bytes());
    Ok(())
}

/// CONFIG RESETSTAT: INFO's counters from zero (Redis's resetServerStats,
/// resetCommandTableStats, resetErrorTableStats): commandstats,
/// errorstats, `total_error_replies`, `total_commands_processed`.
pub(super) fn config_resetstat<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    c.server.stats.reset();
    c.server.commands_processed = 0;
    c.out.ok();
    Ok(())
}
