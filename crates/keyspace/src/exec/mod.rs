//! The command executor: runs one parsed [`Request`] against a [`Keyspace`]
//! and writes its reply to a [`ReplySink`], with Redis 7.0's reply types and
//! error strings.
//!
//! State is split in two: [`Server`] is shared by all connections of one
//! keyspace (identity, client ids, SCAN cursors, counters) and [`Session`]
//! belongs to one connection (protocol version, name, id). Nothing here does
//! I/O: the caller parses, executes each command of a batch in order (every
//! write is visible to the next command), commits, sends the sink's bytes,
//! and closes the connection when [`Flow::Close`] is returned.
//!
//! Invariant: a command writes exactly one reply, and writes nothing before
//! it knows it will succeed; errors are written whole by `Fail`. The one
//! exception is a SHUTDOWN that stops the server: as in Redis, its
//! connection is closed unanswered ([`Server::shutdown_requested`]).
//!
//! Layers, top down: [`commands`] (the table: admission data, dispatch,
//! COMMAND) names the handlers of the command families (`strings`, `keys`,
//! `hashes`, `lists`, `sets`, `zsets`, `blocking`, `multi`, `admin`); a
//! family uses only the core, never another family: this module (`Ctx`,
//! `Fail`, [`Server`], [`Session`]), `shared` (cursors and SCAN options,
//! random draws, ZADD's options), `list_ops` (the list operations the list
//! commands and the blocking pops share) and `large` (chunked collections:
//! reading and writing them whole, and the table's fast paths). The server
//! state of transactions and blocked sessions (`multi::Watches`,
//! `blocking::Waiters`) is kept with their commands.

mod acl;
mod acl_table;
mod acls;
mod admin;
mod bits;
mod blocking;
pub mod commands;
mod dump;
mod encoding;
mod functions;
mod geo;
mod hashes;
mod keys;
mod large;
mod list_ops;
mod lists;
mod monitor;
mod multi;
pub mod notify;
mod pubsub;
pub use pubsub::Published;
pub use stats::Stats;
mod scripting;
mod sets;
mod shared;
mod sort;
mod stats;
mod streams;
mod strings;
mod zsets;

/// The ACL categories of a command or subcommand (`container|sub`), in
/// Redis's order, as Redis 7.0.15's command table gives them.
pub fn acl_categories(name: &str) -> impl Iterator<Item = &'static str> {
    acl::category_names(name)
}
pub use admin::{parse_memory, EncodingParameter, KeptParameter, ENCODING_PARAMETERS, KEPT_PARAMETERS};
use commands::{CommandInfo, Flags};
pub use keys::{active_expire, Sweep};
pub use multi::MAX_QUEUED_BYTES;
pub use functions::LIBRARY_TAG;
pub use scripting::{Scripts, DEFAULT_SCRIPT_BUDGET, DEFAULT_TIME_LIMIT_MS, SCRIPT_TAG};
pub use shared::{MAX_RANDOM_REPLY, MAX_RANDOM_REPLY_BYTES};

#[cfg(test)]
mod acl_tests;
#[cfg(test)]
mod dump_tests;
#[cfg(test)]
mod fixture;
#[cfg(test)]
mod function_tests;
#[cfg(test)]
mod large_tests;
#[cfg(test)]
mod stream_group_tests;
#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod stats_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod zset_blocking_tests;

use crate::blob::BlobError;
use crate::store::{Keyspace, Kind, StoreError, Stored};
use pmwire_resp::reply::{Out, Protocol, ReplySink};
use pmwire_resp::request::{Limits, Request};
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;
use std::borrow::Cow;
use std::cell::Cell;
use std::collections::{HashMap, VecDeque};

/// Server-wide settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The `server` field of HELLO (Redis: `redis`). Borrowed where it can
    /// be: a cluster member clones the config for every entry it applies.
    pub server_name: Cow<'static, str>,
    /// The version HELLO and INFO report: the Redis version whose behaviour is
    /// emulated.
    pub version: Cow<'static, str>,
    /// Request limits, reported by CONFIG GET `proto-max-bulk-len`; APPEND
    /// refuses to grow a string beyond `max_bulk_bytes`, as Redis does.
    pub limits: Limits,
    /// SCAN cursors remembered (oldest forgotten first).
    pub scan_cursors: usize,
    /// Most keys one SCAN call visits, whatever its COUNT.
    pub scan_max_count: usize,
    /// TCP port INFO reports (0 if unknown).
    pub tcp_port: u16,
    /// The default user's password (`requirepass`); `None`: no password,
    /// and every connection starts authenticated. CONFIG SET changes it.
    pub requirepass: Option<Vec<u8>>,
    /// `save` as CONFIG SET last set it (normalized, as CONFIG GET shows
    /// it; "" by default). pmwire takes no snapshots: every write is
    /// durable before its reply, so the schedule changes nothing else.
    pub save: String,
    /// Redis's protected mode: with no password, connections from
    /// anywhere but loopback are refused ([`Server::refuse_peer`]).
    pub protected_mode: bool,
    /// Seed of the generator SPOP and SRANDMEMBER draw from (a server
    /// passes something fresh; tests a fixed value).
    pub random_seed: u64,
    /// When a collection stops being one blob and is chunked
    /// ([`crate::chunked`]), and its chunks' sizes.
    pub collections: crate::chunked::ChunkConfig,
    /// How long a script may run before it is stopped and its writes
    /// undone, ms (Redis's `busy-reply-threshold`, alias `lua-time-limit`;
    /// 0: no limit). Wall time, unless `script_budget` is set.
    pub lua_time_limit_ms: u64,
    /// Stream node sizes (`stream-node-max-entries`, `stream-node-max-bytes`;
    /// CONFIG SET changes them).
    pub stream_nodes: crate::stream::NodeLimits,
    /// Most clients connected at once (`maxclients`, default 10,000); the
    /// server refuses one more with Redis's `-ERR max number of clients
    /// reached`. CONFIG SET changes it up to `maxclients_cap`.
    pub maxclients: u32,
    /// The most `maxclients` can be: what the process's descriptor limit
    /// allows (the server sets it; Redis's `adjustOpenFilesLimit`).
    pub maxclients_cap: u32,
    /// Seconds a client may stay idle before the server closes it
    /// (`timeout`; 0: never). Blocked clients and subscribers are spared,
    /// as Redis spares them.
    pub timeout_s: u32,
    /// A replicated executor's limit instead: a script is stopped after
    /// this many instructions (counted in steps of
    /// [`crate::script::HOOK_EVERY`]), the same on every member, where a
    /// wall-clock limit would stop it on one member and not on another.
    pub script_budget: Option<u64>,
    /// Redis's encoding thresholds as CONFIG SET last set them, in the order
    /// of [`ENCODING_PARAMETERS`]: CONFIG GET shows them and OBJECT ENCODING
    /// answers by them (`encoding`); a collection's layout follows
    /// `collections`.
    pub encoding_parameters: [i64; ENCODING_PARAMETERS.len()],
    /// `notify-keyspace-events` as flags ([`notify`]; 0: off, the default).
    pub notify_keyspace_events: u16,
    /// `maxmemory`, bytes (0: no limit, the default): while the keyspace's
    /// used memory ([`Keyspace::used_memory`]) is above it, the commands
    /// flagged [`Flags::DENYOOM`] are refused with Redis's `-OOM`
    /// (`maxmemory-policy noeviction`: pmwire never evicts).
    pub maxmemory: u64,
    /// Whether this executor admits the keyspace's writes, and so can
    /// enforce `maxmemory` (false on a cluster member's own executor: its
    /// writes are admitted by the replicated log, so CONFIG SET maxmemory
    /// there is refused rather than taken without effect).
    pub maxmemory_enforced: bool,
    /// The parameters kept for CONFIG GET without effect, in the order of
    /// [`KEPT_PARAMETERS`].
    pub kept_parameters: [i64; KEPT_PARAMETERS.len()],
    /// The address the RESP port is bound to (CONFIG GET `bind`; "" if the
    /// executor has no listener).
    pub bind: String,
    /// `min-replicas-to-write` (alias `min-slaves-to-write`; 0: off): with
    /// fewer good replicas ([`ServerConfig::good_replicas`]) and
    /// `min_replicas_max_lag_s` not 0, writes are refused with Redis's
    /// `-NOREPLICAS`.
    pub min_replicas_to_write: u32,
    /// `min-replicas-max-lag`, s (alias `min-slaves-max-lag`; default 10;
    /// 0 turns the check off, as in Redis).
    pub min_replicas_max_lag_s: u32,
    /// Replicas in contact now, as the driver knows them: 0 on a single
    /// node (it has none); a cluster member counts its followers in
    /// contact (`pmwire_kv_server`'s member sets it).
    pub good_replicas: u32,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            server_name: "redis".into(),
            version: "7.0.15".into(),
            limits: Limits::default(),
            scan_cursors: 4096,
            scan_max_count: 100_000,
            tcp_port: 0,
            requirepass: None,
            save: String::new(),
            protected_mode: true,
            random_seed: 0x706d_7769_7265,
            collections: crate::chunked::ChunkConfig::default(),
            stream_nodes: crate::stream::NodeLimits::default(),
            maxclients: 10_000,
            maxclients_cap: u32::MAX,
            timeout_s: 0,
            lua_time_limit_ms: scripting::DEFAULT_TIME_LIMIT_MS,
            script_budget: None,
            encoding_parameters: ENCODING_PARAMETERS.map(|p| p.default),
            notify_keyspace_events: 0,
            maxmemory: 0,
            maxmemory_enforced: true,
            kept_parameters: KEPT_PARAMETERS.map(|p| p.default),
            bind: String::new(),
            min_replicas_to_write: 0,
            min_replicas_max_lag_s: 10,
            good_replicas: 0,
        }
    }
}

impl ServerConfig {
    /// Redis's `checkGoodReplicasStatus`: whether writes may go on.
    pub fn enough_replicas(&self) -> bool {
        self.min_replicas_max_lag_s == 0 || self.min_replicas_to_write == 0 || self.good_replicas >= self.min_replicas_to_write
    }
}

/// Redis's refusal of a write without enough good replicas.
pub(crate) const NOREPLICAS_ERROR: &str = "NOREPLICAS Not enough good replicas to write.";

/// What the caller does after a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on with the next command.
    Continue,
    /// Send the replies so far, then close the connection (QUIT).
    Close,
    /// The command blocked (BLPOP on empty lists...): it wrote no reply.
    /// The connection processes nothing more until the session is served
    /// ([`Server::serve_blocked`]) or times out ([`Server::unblock`]).
    Block,
}

/// One connection's state.
#[derive(Debug, Clone)]
pub struct Session {
    id: u64,
    /// The protocol replies are written in.
    pub protocol: Protocol,
    name: Option<Vec<u8>>,
    /// AUTH (or HELLO AUTH) succeeded, or no password was set when the
    /// connection opened (as Redis decides it, once).
    authenticated: bool,
    /// The open transaction (MULTI), if any.
    multi: Option<multi::Multi>,
    /// What a blocked command waits for, if the session is blocked.
    blocked: Option<blocking::Blocked>,
    /// CLIENT REPLY: which replies are sent.
    reply: ReplyMode,
    /// The ACL user the connection runs as ([`acl`]): `default` until
    /// AUTH or HELLO AUTH names another (borrowed until then: a cluster
    /// member opens a session per entry it applies).
    user: Cow<'static, [u8]>,
}

/// CLIENT REPLY's state (Redis's `CLIENT_REPLY_OFF`, `CLIENT_REPLY_SKIP_NEXT`,
/// `CLIENT_REPLY_SKIP`). Pub/sub confirmations and messages are sent whatever
/// it is, as Redis sends them (`CLIENT_PUSHING`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplyMode {
    /// Every reply (the default, and after CLIENT REPLY ON).
    On,
    /// None (CLIENT REPLY OFF).
    Off,
    /// None for this command (CLIENT REPLY SKIP) and the next.
    SkipNext,
    /// None for this command only.
    Skip,
}

/// A sink that keeps nothing: the replies CLIENT REPLY suppresses.
struct Discard;

impl<V> ReplySink<V> for Discard {
    fn bytes(&mut self, _data: &[u8]) {}
    fn value(&mut self, _value: &V, _len: u64) {}
}

impl Session {
    /// The client id (CLIENT ID, HELLO).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The name given by CLIENT SETNAME or HELLO SETNAME.
    pub fn name(&self) -> Option<&[u8]> {
        self.name.as_deref()
    }

    /// Whether AUTH (or HELLO AUTH) succeeded, or no password was set
    /// when the connection opened.
    pub fn is_authenticated(&self) -> bool {
        self.authenticated
    }

    /// The ACL user the connection runs as.
    pub fn user(&self) -> &[u8] {
        &self.user
    }

    /// Whether a transaction is open (MULTI without EXEC or DISCARD yet).
    pub fn in_multi(&self) -> bool {
        self.multi.is_some()
    }

    /// Whether a blocking command waits (its reply not written yet).
    pub fn is_blocked(&self) -> bool {
        self.blocked.is_some()
    }
}

/// SCAN and SSCAN cursors: a bounded table from cursor number to the last
/// key (or member) visited, holding at most `capacity` cursors and
/// [`CURSOR_BYTES`] bytes of keys and members (oldest forgotten first).
#[derive(Debug, Default)]
struct Cursors {
    next: u64,
    keys: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
    bytes: usize,
}

/// Most bytes of keys and members the cursor table holds.
const CURSOR_BYTES: usize = 64 << 20;

impl Cursors {
    fn insert(&mut self, key: Vec<u8>, capacity: usize) -> u64 {
        assert!(capacity > 0);
        assert!(key.len() <= CURSOR_BYTES);
        while self.order.len() >= capacity || self.bytes + key.len() > CURSOR_BYTES {
            let old = self.order.pop_front().expect("a cursor to forget");
            let gone = self.keys.remove(&old).expect("every ordered cursor is in the table");
            self.bytes -= gone.len();
        }
        self.next += 1;
        let id = self.next;
        self.bytes += key.len();
        self.keys.insert(id, key);
        self.order.push_back(id);
        id
    }
}

/// State shared by the connections of one keyspace, and the entry point.
#[derive(Debug)]
pub struct Server {
    config: ServerConfig,
    next_client_id: u64,
    connected: u64,
    commands_processed: u64,
    cursors: Cursors,
    rng: SplitMix64,
    /// Draws from `rng` so far ([`Server::random_draws`]).
    random_draws: u64,
    /// Clock reads by commands so far ([`Server::clock_reads`]).
    clock_reads: Cell<u64>,
    watches: multi::Watches,
    /// Sessions blocked on keys, and the keys made ready.
    waiters: blocking::Waiters,
    /// Inside EXEC: blocking commands answer at once (Redis's
    /// `CLIENT_DENY_BLOCKING`).
    deny_blocking: bool,
    /// A script is running (Redis's `CLIENT_SCRIPT`: XREAD refuses BLOCK).
    in_script: bool,
    /// INFO sections whose bodies the embedding server supplies (a cluster
    /// member's replication, keyspace and stats), by section name.
    info_sections: Vec<(&'static str, String)>,
    /// Bytes of queued commands one transaction may hold.
    max_queued_bytes: usize,
    /// The Lua interpreter and the script cache (EVAL, SCRIPT).
    scripts: scripting::Scripts,
    /// Subscriptions, and messages for other connections (pub/sub).
    pubsub: pubsub::PubSub,
    /// What CLIENT LIST shows of each open session.
    clients: HashMap<u64, admin::ClientInfo>,
    /// Strings last written in place, which OBJECT ENCODING calls `raw`.
    raw_strings: encoding::RawStrings,
    /// The keyspace events the running command reported from its code
    /// ([`notify`]), published when it succeeds.
    notes: Vec<(notify::Event, Vec<u8>)>,
    /// Sessions CLIENT KILL killed, for the embedding server to close
    /// ([`Server::take_kills`]).
    kills: Vec<u64>,
    /// Sessions in MONITOR ([`monitor`]), in the order they began.
    monitors: Vec<u64>,
    /// INFO commandstats and errorstats ([`stats`]).
    stats: stats::Stats,
    /// Used memory was above `maxmemory` when the running top-level
    /// command was admitted (Redis's `pre_command_oom_state`): a script's
    /// first write is refused then.
    oom_at_admission: bool,
    /// The running script's state for `redis.call`'s OOM check.
    script_run: scripting::ScriptRun,
    /// SHUTDOWN ran: the driver stops serving ([`Server::shutdown_requested`]).
    shutdown: bool,
    /// ACL users and the ACL log ([`acl`]).
    users: acl::Users,
    /// The `requirepass` the default user's password was last set from:
    /// when the configuration's differs, the default user takes it
    /// ([`Server::sync_requirepass`]).
    users_requirepass: Option<Vec<u8>>,
}

/// Why a command failed; written as its error reply.
#[derive(Debug)]
pub(crate) enum Fail {
    WrongType,
    NotInteger,
    NotFloat,
    Syntax,
    Store(StoreError),
    Corrupt(BlobError),
    /// A full error text including its code (`ERR ...`).
    Text(String),
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Fail::Store(e)
    }
}

impl From<BlobError> for Fail {
    fn from(e: BlobError) -> Self {
        Fail::Corrupt(e)
    }
}

impl Fail {
    fn text(&self) -> String {
        match self {
            Fail::WrongType => "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
            Fail::NotInteger => "ERR value is not an integer or out of range".into(),
            Fail::NotFloat => "ERR value is not a valid float".into(),
            Fail::Syntax => "ERR syntax error".into(),
            Fail::Store(e) => e.to_string(),
            Fail::Corrupt(e) => format!("ERR stored value is corrupt: {e}"),
            Fail::Text(t) => t.clone(),
        }
    }

    pub(crate) fn err(text: &str) -> Fail {
        Fail::Text(format!("ERR {text}"))
    }
}

type Res = Result<(), Fail>;

/// Everything a command handler works with.
pub(crate) struct Ctx<'a, 'r, K: Keyspace, S: ReplySink<K::Value> + ?Sized> {
    pub server: &'a mut Server,
    pub session: &'a mut Session,
    pub ks: &'a mut K,
    pub req: &'a Request<'r>,
    pub out: Out<'a, K::Value, S>,
}

impl<'r, K: Keyspace, S: ReplySink<K::Value> + ?Sized> Ctx<'_, 'r, K, S> {
    pub fn arg(&self, i: usize) -> &'r [u8] {
        self.req.arg(i)
    }

    pub fn argc(&self) -> usize {
        self.req.len()
    }

    /// The value at `key` if it is of `kind`; `WRONGTYPE` if another kind.
    pub fn get_kind(&mut self, key: &[u8], kind: Kind) -> Result<Option<Stored<K::Value>>, Fail> {
        match self.ks.get(key) {
            Some(s) if s.kind != kind => Err(Fail::WrongType),
            other => Ok(other),
        }
    }

    /// The bytes of the value at `key` if it is of `kind`; a chunked
    /// collection is read whole, as its blob ([`large::materialise`]).
    pub fn load(&mut self, key: &[u8], kind: Kind) -> Result<Option<Vec<u8>>, Fail> {
        let Some(s) = self.get_kind(key, kind)? else { return Ok(None) };
        let mut v = Vec::with_capacity(s.len as usize);
        self.ks.read(&s.value, &mut v);
        assert!(v.len() as u64 == s.len);
        match crate::chunked::Header::decode(kind, &v)? {
            Some(h) => Ok(Some(large::materialise(self.ks, &h)?)),
            None => Ok(Some(v)),
        }
    }

    /// Writes a collection's `items` at `key` as one `kind` blob made by
    /// `encode` (chunked when over [`ServerConfig::collections`]' limits,
    /// [`large::store_blob`]), with the deadline `expiry` says, or deletes
    /// the key when there are none (Redis keeps no empty collection).
    pub fn store_collection<T>(
        &mut self,
        key: &[u8],
        kind: Kind,
        items: &[T],
        encode: impl FnOnce(&[T], &mut Vec<u8>),
        expiry: crate::store::Expiry,
    ) -> Res {
        if items.is_empty() {
            self.ks.delete(key)?;
            return Ok(());
        }
        let mut blob = Vec::new();
        encode(items, &mut blob);
        let cfg = self.server.config.collections;
        large::store_blob(self.ks, key, kind, blob, expiry, &cfg)
    }

    /// Refuses, as the store would, a value of `len` bytes at `key`: for a
    /// command that writes several keys, checked before its first write so
    /// that it is refused whole.
    pub fn check_fits(&self, key: &[u8], len: u64) -> Res {
        let limits = self.ks.limits();
        if key.len() as u64 > limits.max_key_bytes {
            return Err(StoreError::KeyTooLong { len: key.len() as u64, max: limits.max_key_bytes }.into());
        }
        if len > limits.max_value_bytes {
            return Err(StoreError::ValueTooLong { len, max: limits.max_value_bytes }.into());
        }
        Ok(())
    }

    /// Deletes every key (FLUSHALL, FLUSHDB): a keyspace's clear deletes its
    /// internal entries too, and the script cache's are stored again, as
    /// Redis keeps its scripts across a flush.
    pub fn clear_keyspace(&mut self) -> Res {
        let scripts = scripting::stored_scripts(self.ks);
        self.ks.clear()?;
        for (key, body) in scripts {
            self.ks.internal_put(&key, &body)?;
        }
        Ok(())
    }

    /// Reports keyspace event `event` on `key` ([`notify`]), if
    /// `notify-keyspace-events` asks for it: published once the command
    /// succeeds.
    pub fn notify(&mut self, event: notify::Event, key: &[u8]) {
        if self.server.notifying(notify::ALL | notify::NEW) {
            self.server.notes.push((event, key.to_vec()));
        }
    }

    /// The keyspace's time, ms since the Unix epoch, as Redis's `long long`.
    pub fn now_ms(&self) -> i64 {
        self.server.clock_reads.set(self.server.clock_reads.get() + 1);
        deadline_i64(self.ks.now_ms())
    }

    /// Argument `i` as a Redis integer.
    pub fn int_arg(&self, i: usize) -> Result<i64, Fail> {
        pmwire_resp::numbers::parse_i64(self.arg(i)).ok_or(Fail::NotInteger)
    }

    /// Argument `i` as a non-negative integer; `ERR {msg}` if it is not an
    /// integer or negative (Redis's `getPositiveLongFromObjectOrReply`).
    pub fn positive_arg(&self, i: usize, msg: &str) -> Result<i64, Fail> {
        pmwire_resp::numbers::parse_i64(self.arg(i)).filter(|&n| n >= 0).ok_or_else(|| Fail::err(msg))
    }
}

/// A stored deadline as Redis's `long long` (a deadline is never above
/// `i64::MAX`: every one written came from an `i64`).
pub(super) fn deadline_i64(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// Lower-cases an ASCII command word into `buf` (words longer than `buf`
/// match nothing).
pub(crate) fn lower<'b>(word: &[u8], buf: &'b mut [u8; 32]) -> &'b [u8] {
    if word.len() > buf.len() {
        return b"";
    }
    for (d, s) in buf.iter_mut().zip(word) {
        *d = s.to_ascii_lowercase();
    }
    &buf[..word.len()]
}

/// Redis's unknown-command error: the name and the first arguments, each cut
/// as `%.128s` / `%.*s` would, and cut at a NUL as C strings are.
fn unknown_command<'a>(argc: usize, arg: impl Fn(usize) -> &'a [u8]) -> String {
    use crate::script::c_str;
    let name = c_str(arg(0));
    let name = &name[..name.len().min(128)];
    let mut args: Vec<u8> = Vec::new();
    let mut i = 1;
    while i < argc && args.len() < 128 {
        let a = c_str(arg(i));
        let room = 128 - args.len();
        args.push(b'\'');
        args.extend_from_slice(&a[..a.len().min(room)]);
        args.extend_from_slice(b"' ");
        i += 1;
    }
    format!(
        "ERR unknown command '{}', with args beginning with: {}",
        String::from_utf8_lossy(name),
        String::from_utf8_lossy(&args)
    )
}

/// Redis's refusal of a command that may grow the keyspace while used
/// memory is above `maxmemory`.
pub(crate) const OOM_ERROR: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// The row `argc` arguments `arg(i)` name (its subcommand's for a
/// container), whatever its arity; `None` if unknown.
pub(crate) fn row_of<'a>(argc: usize, arg: impl Fn(usize) -> &'a [u8]) -> Option<&'static CommandInfo> {
    if argc == 0 {
        return None;
    }
    let command = commands::lookup(arg(0)).filter(|c| !c.is_subcommand())?;
    if !command.is_container() || argc < 2 {
        return Some(command);
    }
    commands::subcommand(command, arg(1))
}

/// The command (or subcommand) `args` names, or Redis's error for an
/// unknown command or subcommand or a wrong number of arguments: what the
/// executor refuses before anything else, inside MULTI too (where the
/// refusal dirties the transaction). A cluster member that queues a
/// transaction itself asks this first.
pub fn command_of(args: &[Vec<u8>]) -> Result<&'static CommandInfo, String> {
    assert!(!args.is_empty());
    find_command(args.len(), |i| &args[i])
}

fn find_command<'a>(argc: usize, arg: impl Fn(usize) -> &'a [u8]) -> Result<&'static CommandInfo, String> {
    let Some(command) = commands::lookup(arg(0)).filter(|s| !s.is_subcommand()) else {
        return Err(unknown_command(argc, arg));
    };
    let info = if command.is_container() && argc >= 2 {
        let Some(sub) = commands::subcommand(command, arg(1)) else {
            let given = arg(1);
            let given = String::from_utf8_lossy(&given[..given.len().min(128)]).into_owned();
            return Err(format!("ERR unknown subcommand '{given}'. Try {} HELP.", command.name.to_ascii_uppercase()));
        };
        sub
    } else {
        command
    };
    if !info.arity_ok(argc) {
        return Err(format!("ERR wrong number of arguments for '{}' command", info.name));
    }
    Ok(info)
}

impl Server {
    /// A server with `config`.
    pub fn new(config: ServerConfig) -> Self {
        assert!(config.scan_cursors > 0);
        assert!(config.scan_max_count > 0);
        let rng = SplitMix64::seed_from_u64(config.random_seed);
        let watches = multi::Watches::default();
        let users = acl::Users::new(config.requirepass.as_deref());
        let users_requirepass = config.requirepass.clone();
        Server {
            config,
            next_client_id: 0,
            connected: 0,
            commands_processed: 0,
            cursors: Cursors::default(),
            rng,
            random_draws: 0,
            clock_reads: Cell::new(0),
            watches,
            waiters: blocking::Waiters::default(),
            deny_blocking: false,
            in_script: false,
            info_sections: Vec::new(),
            max_queued_bytes: MAX_QUEUED_BYTES,
            scripts: scripting::Scripts::default(),
            pubsub: pubsub::PubSub::default(),
            clients: HashMap::new(),
            raw_strings: encoding::RawStrings::default(),
            notes: Vec::new(),
            kills: Vec::new(),
            monitors: Vec::new(),
            stats: stats::Stats::default(),
            oom_at_admission: false,
            script_run: scripting::ScriptRun::default(),
            shutdown: false,
            users,
            users_requirepass,
        }
    }

    /// Gives the default user the configuration's `requirepass` if it
    /// changed since it last did (a driver sets it through
    /// [`Server::config_mut`]; CONFIG SET sets it here): Redis's
    /// `ACLUpdateDefaultUserPassword`.
    pub(crate) fn sync_requirepass(&mut self) {
        if self.users_requirepass != self.config.requirepass {
            self.users.set_default_password(self.config.requirepass.as_deref());
            self.users_requirepass.clone_from(&self.config.requirepass);
        }
    }

    /// A uniform draw from `0..n` (`n` > 0), by multiply-shift.
    pub(crate) fn random_below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        self.random_draws += 1;
        ((u128::from(self.rng.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// `k` distinct positions of `0..n` in random order (a partial
    /// Fisher-Yates shuffle).
    pub(crate) fn random_distinct(&mut self, n: usize, k: usize) -> Vec<usize> {
        assert!(k <= n);
        let mut all: Vec<usize> = (0..n).collect();
        for i in 0..k {
            let j = i + self.random_below((n - i) as u64) as usize;
            all.swap(i, j);
        }
        all.truncate(k);
        all
    }

    /// A new cursor standing for `after` (SCAN's last key, SSCAN's last member).
    pub(crate) fn remember_cursor(&mut self, after: Vec<u8>) -> u64 {
        self.cursors.insert(after, self.config.scan_cursors)
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The configuration, to change (a server's `--requirepass`).
    pub fn config_mut(&mut self) -> &mut ServerConfig {
        &mut self.config
    }

    /// Redis's protected mode, at accept: with protected mode on and no
    /// password, a peer that is not on loopback gets this error (send it,
    /// then close).
    pub fn refuse_peer(&self, loopback: bool) -> Option<&'static [u8]> {
        (self.config.protected_mode && self.config.requirepass.is_none() && !loopback).then_some(DENIED)
    }

    /// Whether `user` exists, is on, and `password` opens it (any
    /// password opens a `nopass` user, as the default user is with no
    /// `requirepass`).
    pub fn credentials_ok(&mut self, user: &[u8], password: &[u8]) -> bool {
        self.sync_requirepass();
        self.users.credentials_ok(user, password)
    }

    /// Redis's refusal of `args` by the ACL rules of `session`'s user, if
    /// they refuse it (logged in ACL LOG), for a driver that serves some
    /// commands without [`Server::execute`] (a cluster member checks a
    /// command before it proposes, forwards or queues it; `in_multi`: the
    /// driver is queueing it in a transaction of its own, which ACL LOG
    /// names as the context). `None` for an unknown command: its own error
    /// comes later.
    pub fn acl_refusal(&mut self, session: &Session, args: &[Vec<u8>], in_multi: bool, now_ms: u64) -> Option<String> {
        if self.users.unrestricted(&session.user) {
            return None;
        }
        let info = command_of(args).ok()?;
        let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let context = if in_multi || session.multi.is_some() { "multi" } else { "toplevel" };
        self.acl_check(session, info, &argv, context, now_ms).err()
    }

    /// As Redis's execCommand: `args`, queued in a transaction by
    /// `session`, checked again at EXEC (the rules may have changed since
    /// it was queued); the error that takes its place in EXEC's reply, if
    /// refused (logged in ACL LOG). A cluster member's transactions are
    /// queued by the member, which checks them so before proposing.
    pub fn acl_exec_refusal(&mut self, session: &Session, args: &[Vec<u8>], now_ms: u64) -> Option<String> {
        if self.users.unrestricted(&session.user) {
            return None;
        }
        let info = command_of(args).ok()?;
        let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let denied = self.users.check(&session.user, info.name, info.flags.contains(Flags::NO_AUTH), &argv).err()?;
        self.log_denied(session, denied, info.name, &argv, "multi", now_ms);
        Some(exec_refusal(denied))
    }

    /// ACL's check of `argv`, a call of `info`, by `session`'s user: Ok,
    /// or Redis's refusal (logged in ACL LOG with `context`).
    pub(crate) fn acl_check(&mut self, session: &Session, info: &CommandInfo, argv: &[&[u8]], context: &'static str, now_ms: u64) -> Result<(), String> {
        if self.users.unrestricted(&session.user) {
            return Ok(());
        }
        let denied = match self.users.check(&session.user, info.name, info.flags.contains(Flags::NO_AUTH), argv) {
            Ok(()) => return Ok(()),
            Err(d) => d,
        };
        self.log_denied(session, denied, info.name, argv, context, now_ms);
        Err(match context {
            "lua" => denied.script_error(),
            _ => denied.error(info.name),
        })
    }

    /// Adds a refusal to ACL LOG.
    pub(crate) fn log_denied(&mut self, session: &Session, denied: acl::Denied, command: &str, argv: &[&[u8]], context: &'static str, now_ms: u64) {
        let info = if self.clients.contains_key(&session.id) { admin::client_line(self, session.id, now_ms) } else { String::new() };
        let entry = acl::Users::entry(denied, context, command, argv, &session.user, now_ms, info);
        self.users.log_denied(entry);
    }

    /// A new connection's session (RESP2, next client id).
    pub fn open_session(&mut self) -> Session {
        self.next_client_id += 1;
        self.connected += 1;
        self.sync_requirepass();
        let authenticated = self.users.default_open();
        self.clients.insert(self.next_client_id, admin::ClientInfo::default());
        Session { id: self.next_client_id, protocol: Protocol::Resp2, name: None, authenticated, multi: None, blocked: None, reply: ReplyMode::On, user: Cow::Borrowed(b"default") }
    }

    /// A session with a given id (tests that mirror another server's ids).
    pub fn open_session_with_id(&mut self, id: u64) -> Session {
        self.connected += 1;
        self.next_client_id = self.next_client_id.max(id);
        self.sync_requirepass();
        let authenticated = self.users.default_open();
        self.clients.insert(id, admin::ClientInfo::default());
        Session { id, protocol: Protocol::Resp2, name: None, authenticated, multi: None, blocked: None, reply: ReplyMode::On, user: Cow::Borrowed(b"default") }
    }

    /// Session `id`'s connection: its peer's and its own address and its
    /// descriptor, as CLIENT LIST shows them (`addr`, `laddr`, `fd`).
    pub fn set_client_addrs(&mut self, id: u64, peer: Option<std::net::SocketAddr>, local: Option<std::net::SocketAddr>, fd: i32) {
        if let Some(info) = self.clients.get_mut(&id) {
            let text = |a: Option<std::net::SocketAddr>| a.map_or(std::borrow::Cow::Borrowed("?:0"), |a| a.to_string().into());
            (info.addr, info.laddr, info.fd) = (text(peer), text(local), fd);
        }
    }

    /// Has INFO answer section `name` (`"replication"`, `"keyspace"`,
    /// `"stats"`, ...) with `body` (its lines, each ending in CRLF) in place
    /// of this executor's own, until set again.
    pub fn set_info_section(&mut self, name: &'static str, body: String) {
        match self.info_sections.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = body,
            None => self.info_sections.push((name, body)),
        }
    }

    /// The body [`Server::set_info_section`] gave section `name`.
    pub(crate) fn info_section(&self, name: &str) -> Option<&str> {
        self.info_sections.iter().find(|(n, _)| *n == name).map(|(_, b)| b.as_str())
    }

    /// A connection closed (INFO's `connected_clients`).
    pub fn close_session(&mut self, mut session: Session) {
        self.unblock(&mut session);
        self.watches.unwatch_all(session.id);
        self.pubsub.forget(session.id);
        self.monitors.retain(|&m| m != session.id);
        self.clients.remove(&session.id);
        assert!(self.connected > 0);
        self.connected -= 1;
    }

    /// Whether SHUTDOWN ran: the command that ran it answered
    /// [`Flow::Close`] with no reply (as Redis, which exits); the driver
    /// sends what earlier commands were answered, stops serving and exits.
    /// Every write is durable before its reply, so nothing is left to save.
    pub fn shutdown_requested(&self) -> bool {
        self.shutdown
    }

    /// Commands executed so far.
    pub fn commands_processed(&self) -> u64 {
        self.commands_processed
    }

    /// Draws commands made from the seeded generator so far. Only commands
    /// flagged [`Flags::RANDOM`] draw (asserted after every command).
    pub fn random_draws(&self) -> u64 {
        self.random_draws
    }

    /// Times commands read the clock so far, lazy expiry aside (the
    /// keyspace's own). Only commands flagged [`Flags::TIME`] read it
    /// (asserted after every command).
    pub fn clock_reads(&self) -> u64 {
        self.clock_reads.get()
    }

    /// Executes one command, writing exactly one reply to `sink`.
    pub fn execute<K, S>(&mut self, session: &mut Session, ks: &mut K, req: &Request<'_>, sink: &mut S) -> Flow
    where
        K: Keyspace,
        S: ReplySink<K::Value> + ?Sized,
    {
        let mut name = "";
        if let Some(info) = self.clients.get_mut(&session.id) {
            // What the request holds while it runs (CLIENT LIST's qbuf, argv-mem).
            info.qbuf = req.wire_bytes();
            info.qbuf_peak = info.qbuf_peak.max(info.qbuf);
            info.argv_mem = (0..req.len()).map(|i| req.arg_len(i)).sum();
        }
        let flow = if session.reply == ReplyMode::On || replies_anyway(req) {
            self.execute_command(session, ks, req, sink, &mut name)
        } else {
            self.execute_command(session, ks, req, &mut Discard, &mut name)
        };
        // Redis's `commandProcessed`: a SKIP covers the command after CLIENT REPLY SKIP.
        session.reply = match session.reply {
            ReplyMode::Skip => ReplyMode::On,
            ReplyMode::SkipNext => ReplyMode::Skip,
            other => other,
        };
        self.note_client(session, name, ks.now_ms());
        if let Some(info) = self.clients.get_mut(&session.id) {
            (info.qbuf, info.argv_mem) = (0, 0);
        }
        flow
    }

    /// What CLIENT LIST shows of `session` after a command (`cmd`: its
    /// table name, empty if it was not found), at `now_ms`.
    pub(crate) fn note_client(&mut self, session: &Session, cmd: &'static str, now_ms: u64) {
        let Some(info) = self.clients.get_mut(&session.id) else { return };
        info.created_ms.get_or_insert(now_ms);
        info.last_ms = now_ms;
        if !cmd.is_empty() {
            info.last_cmd = cmd;
        }
        info.resp = if session.protocol == Protocol::Resp3 { 3 } else { 2 };
        (info.multi, info.multi_bytes) = session.multi.as_ref().map_or((-1, 0), |m| (m.commands as i64, m.queued.len()));
        if info.name != session.name {
            info.name.clone_from(&session.name);
        }
        if info.user != session.user {
            info.user.clone_from(&session.user);
        }
    }

    fn execute_command<K, S>(&mut self, session: &mut Session, ks: &mut K, req: &Request<'_>, sink: &mut S, name: &mut &'static str) -> Flow
    where
        K: Keyspace,
        S: ReplySink<K::Value> + ?Sized,
    {
        assert!(!req.is_empty());
        self.commands_processed += 1;
        let protocol = session.protocol;
        let mut ctx = Ctx { server: self, session, ks: &mut *ks, req, out: Out::new(sink, protocol) };
        let spec = match admit(&mut ctx) {
            Ok(spec) => spec,
            Err(fail) => {
                // As Redis's rejectCommand: a refused command flags an open
                // transaction; a refused EXEC discards it, and says why.
                if let Some(multi) = ctx.session.multi.as_mut() {
                    multi.failed = true;
                }
                let text = fail.text();
                // Redis's `c->cmd->rejected_calls++`: the command is known
                // when only its arity, authentication or state refused it.
                if let Some(known) = commands::of_request(req) {
                    ctx.server.stats.rejected(known);
                }
                if req.arg(0).eq_ignore_ascii_case(b"exec") {
                    ctx.session.multi = None;
                    ctx.server.watches.unwatch_all(ctx.session.id);
                    let why = text.strip_prefix("ERR ").unwrap_or(&text);
                    ctx.server.stats.error_reply(&mut ctx.out, format!("EXECABORT Transaction discarded because of: {why}").as_bytes());
                } else {
                    ctx.server.stats.error_reply(&mut ctx.out, text.as_bytes());
                }
                return Flow::Continue;
            }
        };
        *name = spec.name;
        if ctx.session.multi.is_some() && !spec.flags.contains(Flags::IMMEDIATE) {
            // Redis's `mstate.cmd_flags`: an EXEC that queued a denyoom command is one.
            if ctx.server.config.maxmemory > 0 && !ctx.session.multi.as_ref().is_some_and(|m| m.denyoom) {
                let denyoom = denies_oom(ctx.server, ctx.ks, spec, req);
                ctx.session.multi.as_mut().expect("in MULTI").denyoom = denyoom;
            }
            if spec.flags.contains(Flags::WRITE) {
                ctx.session.multi.as_mut().expect("in MULTI").writes = true;
            }
            let args: Vec<&[u8]> = req.args().collect();
            match ctx.server.queue(ctx.session, &args) {
                Ok(()) => ctx.out.simple(b"QUEUED"),
                Err(text) => {
                    ctx.server.stats.rejected(spec);
                    ctx.server.stats.error_reply(&mut ctx.out, text.as_bytes());
                }
            }
            return Flow::Continue;
        }
        if spec.name == "exec" {
            let flow = self.counted(spec, |server| server.exec(session, ks, sink));
            self.feed_monitors(session, ks, req, false);
            return flow;
        }
        self.run_admitted(spec, session, ks, req, sink)
    }

    /// Runs an admitted command: a script by [`Server::eval`], any other
    /// by [`Server::run_one`].
    fn run_admitted<K, S>(&mut self, spec: &CommandInfo, session: &mut Session, ks: &mut K, req: &Request<'_>, sink: &mut S) -> Flow
    where
        K: Keyspace,
        S: ReplySink<K::Value> + ?Sized,
    {
        if scripting::is_eval(spec.name) {
            // Before the script, so that its commands follow it (Redis's `evalCommand`).
            self.feed_monitors(session, ks, req, false);
            return self.counted(spec, |server| server.eval(spec, session, ks, req, sink));
        }
        let flow = self.counted(spec, |server| server.run_one(spec, session, ks, req, sink));
        if !spec.flags.contains(Flags::ADMIN) {
            self.feed_monitors(session, ks, req, false);
        }
        flow
    }

    /// Runs `call`, a call of `spec`, counted in `spec`'s statistics as
    /// Redis's `call()` counts one ([`stats`]): its time, and whether it
    /// replied an error.
    fn counted<R>(&mut self, spec: &CommandInfo, call: impl FnOnce(&mut Self) -> R) -> R {
        self.stats.begin_call();
        let start = std::time::Instant::now();
        let result = call(self);
        let usec = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.stats.end_call(spec, usec);
        result
    }

    /// Sends every monitor the line of `req`, run by `session` (by a script
    /// if `lua`) ([`monitor`]).
    pub(crate) fn feed_monitors<K: Keyspace>(&mut self, session: &Session, ks: &K, req: &Request<'_>, lua: bool) {
        self.feed_monitors_at(session, ks.now_ms(), req, lua);
    }

    /// Runs an admitted command, recording the keys it writes when some
    /// session watches keys.
    fn run_one<K, S>(&mut self, spec: &CommandInfo, session: &mut Session, ks: &mut K, req: &Request<'_>, sink: &mut S) -> Flow
    where
        K: Keyspace,
        S: ReplySink<K::Value> + ?Sized,
    {
        let protocol = session.protocol;
        let (draws, reads) = (self.random_draws, self.clock_reads.get());
        let notifying = self.notifying(notify::ALL | notify::NEW);
        self.notes.clear();
        ks.begin_command();
        let mut record = None;
        let result = if !notifying && self.watches.is_empty() && self.waiters.is_empty() && self.raw_strings.is_empty() {
            let mut ctx = Ctx { server: self, session, ks, req, out: Out::new(sink, protocol) };
            let result = commands::run(spec, &mut ctx).map_err(|fail| ctx.server.stats.error_reply(&mut ctx.out, fail.text().as_bytes()));
            self.raw_strings.settle(&[], false, None);
            result
        } else {
            // A flush touches the watched keys that exist when it runs.
            let flush = matches!(spec.name, "flushdb" | "flushall");
            let existing: Vec<Vec<u8>> = if flush {
                let keys: Vec<Vec<u8>> = self.watches.keys().map(<[u8]>::to_vec).collect();
                keys.into_iter().filter(|k| ks.get(k).is_some()).collect()
            } else {
                Vec::new()
            };
            let mut tracked = crate::recording::Recording::new(ks);
            if self.notifying(notify::NEW) {
                tracked.created = Some(Vec::new());
            }
            let mut ctx = Ctx { server: self, session, ks: &mut tracked, req, out: Out::new(sink, protocol) };
            let result = commands::run(spec, &mut ctx).map_err(|fail| ctx.server.stats.error_reply(&mut ctx.out, fail.text().as_bytes()));
            let (touched, cleared, created) = (std::mem::take(&mut tracked.touched), tracked.cleared, tracked.created.take());
            touched.iter().for_each(|k| self.watches.touch(k));
            tracked.ready.iter().for_each(|k| self.waiters.written(k));
            touched.iter().for_each(|k| self.waiters.touched(k));
            if cleared {
                existing.iter().for_each(|k| self.watches.touch(k));
                self.waiters.flushed();
            }
            let renamed = matches!(spec.name, "rename" | "renamenx") && result.is_ok();
            self.raw_strings.settle(&touched, cleared, renamed.then(|| (req.arg(1), req.arg(2))));
            record = Some((touched, created.unwrap_or_default()));
            result
        };
        let expired = ks.take_expired();
        if notifying && result.is_ok() {
            let (touched, created) = record.unwrap_or_default();
            self.publish_events(spec, ks, expired, &touched, &created);
        }
        assert!(draws == self.random_draws || spec.flags.contains(Flags::RANDOM), "{} drew unflagged", spec.name);
        assert!(reads == self.clock_reads.get() || spec.flags.contains(Flags::TIME), "{} read the clock unflagged", spec.name);
        match result {
            Ok(()) if spec.name == "quit" || spec.name == "shutdown" => Flow::Close,
            // CLIENT KILL of its own session: closed after this reply.
            Ok(()) if self.kills.contains(&session.id) => {
                self.kills.retain(|&k| k != session.id);
                Flow::Close
            }
            Ok(()) if session.blocked.is_some() => {
                let blocked = session.blocked.as_ref().expect("blocked");
                self.waiters.block(session.id, &blocked.keys);
                match &blocked.op {
                    blocking::Op::XRead { from, .. } => self.waiters.wait_for_entries(session.id, from),
                    blocking::Op::XReadGroup { group, .. } => self.waiters.wait_in_group(session.id, group),
                    blocking::Op::ZPop { .. } | blocking::Op::ZMPop { .. } => self.waiters.wait_for_sorted_set(session.id),
                    _ => {}
                }
                Flow::Block
            }
            Ok(()) => Flow::Continue,
            Err(()) => {
                // A failed command stored nothing (a write may have failed part-way).
                ks.abort_command();
                Flow::Continue
            }
        }
    }

    /// Whether `notify-keyspace-events` asks for messages of any class of
    /// `classes` (and for keyspace or keyevent messages at all).
    fn notifying(&self, classes: u16) -> bool {
        let flags = self.config.notify_keyspace_events;
        flags & (notify::KEYSPACE | notify::KEYEVENT) != 0 && flags & classes != 0
    }

    /// Publishes a command's keyspace events ([`notify`]): the keys its
    /// reads found expired, then the events its code reported and those of
    /// its fixed event for the keys it wrote (`touched`), each key's first
    /// event preceded by `new` if the command created it.
    fn publish_events<K: Keyspace>(&mut self, spec: &CommandInfo, ks: &mut K, expired: Vec<Vec<u8>>, touched: &[Vec<u8>], created: &[Vec<u8>]) {
        let flags = self.config.notify_keyspace_events;
        for key in &expired {
            notify::publish(&mut self.pubsub, flags, notify::ev::EXPIRED, key);
        }
        let mut events = std::mem::take(&mut self.notes);
        if let Some(fixed) = notify::fixed(spec.name) {
            let mut written: Vec<(Vec<u8>, bool)> = Vec::new();
            for key in touched {
                if !written.iter().any(|(k, _)| k == key) {
                    let live = ks.get(key).is_some();
                    written.push((key.clone(), live));
                }
            }
            notify::fixed_events(fixed, &written, &mut events);
        }
        let mut announced: Vec<&[u8]> = Vec::new();
        for (event, key) in &events {
            if *event == notify::ev::NEW {
                // Reported by the command itself, where Redis's `dbAdd` is.
                announced.push(key);
            } else if created.contains(key) && !announced.contains(&&key[..]) {
                announced.push(key);
                notify::publish(&mut self.pubsub, flags, notify::ev::NEW, key);
            }
            notify::publish(&mut self.pubsub, flags, *event, key);
        }
        for key in created.iter().filter(|k| !announced.contains(&&k[..])) {
            notify::publish(&mut self.pubsub, flags, notify::ev::NEW, key);
        }
        events.clear();
        self.notes = events;
    }

    /// Deletes up to `budget` expired keys, as [`active_expire`] does,
    /// publishing `expired` for each when `notify-keyspace-events` asks for it.
    pub fn active_expire<K: Keyspace>(&mut self, ks: &mut K, budget: usize) -> Result<Sweep, crate::store::StoreError> {
        if !self.notifying(notify::EXPIRED) {
            return active_expire(ks, budget);
        }
        let flags = self.config.notify_keyspace_events;
        let pubsub = &mut self.pubsub;
        keys::active_expire_with(ks, budget, |key| notify::publish(pubsub, flags, notify::ev::EXPIRED, key))
    }

    /// Whether the active sweep should run as soon as a key is due, not only
    /// at the next batch: someone may be waiting for its `expired` event.
    pub fn wants_expiry_events(&self) -> bool {
        self.notifying(notify::EXPIRED) && self.pubsub.sizes() != (0, 0, 0)
    }

    /// EXEC: the queued commands in order, their replies in one array;
    /// EXECABORT if one was refused while queuing; the null array if a
    /// watched key changed.
    fn exec<K, S>(&mut self, session: &mut Session, ks: &mut K, sink: &mut S) -> Flow
    where
        K: Keyspace,
        S: ReplySink<K::Value> + ?Sized,
    {
        let mut out = Out::<K::Value, S>::new(sink, session.protocol);
        let Some(multi) = session.multi.take() else {
            self.stats.error_reply(&mut out, b"ERR EXEC without MULTI");
            return Flow::Continue;
        };
        self.clock_reads.set(self.clock_reads.get() + 1);
        let dirty = self.watches.is_dirty(session.id) || self.watches.expired_since_watch(session.id, ks.now_ms());
        self.watches.unwatch_all(session.id);
        if multi.failed {
            self.stats.error_reply(&mut out, b"EXECABORT Transaction discarded because of previous errors.");
            return Flow::Continue;
        }
        if dirty {
            out.null_array();
            return Flow::Continue;
        }
        out.array(multi.commands);
        // Replayed without pieces: the values are copied, never named where
        // the queued bytes lie.
        let limits = Limits { max_commands: u32::MAX, ..self.config.limits };
        let mut parsed = pmwire_resp::request::Parsed::new(limits);
        let segments: [&[u8]; 1] = [&multi.queued];
        let summary = parsed.parse(&segments);
        assert_eq!(summary.commands, multi.commands, "queued commands parse back");
        assert_eq!(summary.consumed, multi.queued.len(), "queued commands parse back");
        parsed.forget_pieces();
        self.deny_blocking = true;
        for i in 0..multi.commands {
            let req = parsed.request(&segments, i);
            self.commands_processed += 1;
            let spec = commands::of_request(&req).expect("a queued command was admitted");
            // As Redis's execCommand: the rules may have changed since it was queued.
            if !self.users.unrestricted(&session.user) {
                let argv: Vec<&[u8]> = req.args().collect();
                if let Err(denied) = self.users.check(&session.user, spec.name, spec.flags.contains(Flags::NO_AUTH), &argv) {
                    self.log_denied(session, denied, spec.name, &argv, "multi", ks.now_ms());
                    let text = exec_refusal(denied);
                    self.stats.error_reply(&mut Out::<K::Value, S>::new(sink, session.protocol), text.as_bytes());
                    continue;
                }
            }
            self.run_admitted(spec, session, ks, &req, sink);
        }
        self.deny_blocking = false;
        Flow::Continue
    }

    /// Messages published for other connections since the last call:
    /// each subscriber's client id and the bytes to write to it, in the
    /// order published ([`pubsub`]).
    pub fn take_pushes(&mut self) -> Vec<(u64, Vec<u8>)> {
        self.pubsub.take_outbox()
    }

    /// Makes this executor a replicated machine's: PUBLISH and SPUBLISH
    /// deliver nothing here and answer 0 (the same on every member, so a
    /// script or transaction that reads the count does the same
    /// everywhere); their messages are kept for [`Server::take_published`].
    pub fn record_publishes(&mut self) {
        self.pubsub.recorded.get_or_insert_with(Vec::new);
    }

    /// The messages recorded since the last call, in the order published.
    pub fn take_published(&mut self) -> Vec<pubsub::Published> {
        self.pubsub.recorded.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Delivers a message a replicated machine recorded to this server's
    /// own subscribers (queued as [`Server::take_pushes`] gives them); how
    /// many it reached.
    pub fn deliver_published(&mut self, p: &pubsub::Published) -> usize {
        self.pubsub.deliver(&p.channel, &p.message, p.shard)
    }

    /// How many of this server's clients a message on `channel` would reach
    /// now (PUBLISH's count, for a member answering a PUBLISH that went
    /// through the log).
    pub fn publish_receivers(&self, channel: &[u8], shard: bool) -> usize {
        self.pubsub.receivers(channel, shard)
    }

    /// Sessions CLIENT KILL killed since the last call (never the session
    /// whose command killed them: that command answered [`Flow::Close`]).
    /// The caller closes their connections at once, unsent output dropped,
    /// as Redis's `freeClient`; [`Server::close_session`] then forgets them.
    pub fn take_kills(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.kills)
    }

    /// A mark of the messages queued so far, to take back those of a
    /// command undone ([`Server::truncate_pushes`]).
    pub fn pushes_mark(&self) -> usize {
        self.pubsub.outbox_len()
    }

    /// Drops the messages queued after `mark`.
    pub fn truncate_pushes(&mut self, mark: usize) {
        self.pubsub.truncate_outbox(mark);
    }

    /// Redis's refusal of the command `args` on `session` if that is a RESP2
    /// connection holding a subscription and the command is not one the
    /// pub/sub context allows (for a driver that serves some commands
    /// without [`Server::execute`]).
    pub fn refusal_in_pubsub_context(&self, session: &Session, args: &[Vec<u8>]) -> Option<String> {
        if !self.pubsub.subscribed(session.id) {
            return None;
        }
        let info = command_of(args).ok()?;
        pubsub::refusal_in_context(&self.pubsub, session.id, session.protocol, info.name).map(|f| f.text())
    }

    /// Ends client `id`'s subscriptions at once (a subscriber being closed
    /// for its output limit: nothing more is published to it).
    pub fn end_subscriptions(&mut self, id: u64) {
        self.pubsub.forget(id);
    }

    /// Whether client `id` is in MONITOR.
    pub fn is_monitor(&self, id: u64) -> bool {
        self.monitors.contains(&id)
    }

    /// Whether client `id` holds a subscription (pub/sub).
    pub fn is_subscribed(&self, id: u64) -> bool {
        self.pubsub.subscribed(id)
    }

    /// Sessions blocked now (INFO's `blocked_clients`).
    pub fn blocked_clients(&self) -> usize {
        self.waiters.clients()
    }

    /// How long a blocked session waits, ms (0: for ever); `None` if it is
    /// not blocked.
    pub fn blocked_timeout_ms(&self, session: &Session) -> Option<u64> {
        session.blocked.as_ref().map(|b| b.timeout_ms)
    }

    /// A session blocked in XREAD: the ID it waits beyond on each stream, in
    /// the command's order (`$` resolved to the stream's last ID when it
    /// blocked). A driver that runs the command again later (a cluster
    /// member's next attempt) runs it with these IDs, so that entries added
    /// meanwhile are found, as Redis's blocked client finds them.
    pub fn blocked_xread_ids(&self, session: &Session) -> Option<Vec<(Vec<u8>, crate::stream::StreamId)>> {
        match &session.blocked.as_ref()?.op {
            blocking::Op::XRead { from, .. } => Some(from.clone()),
            _ => None,
        }
    }

    /// The next session to serve: the first waiter (in blocking order) of
    /// the first key made ready that can serve one now, and that key.
    /// Call after each top-level command until `None`, serving each with
    /// [`Server::serve_blocked`] then [`Server::unblock`].
    pub fn next_ready<K: Keyspace>(&mut self, ks: &mut K) -> Option<(Vec<u8>, u64)> {
        self.waiters.next_ready(ks)
    }

    /// Serves blocked `session` on ready `key` (from [`Server::next_ready`]):
    /// runs the non-blocking form of its command there, as if the client
    /// sent it now, and writes the blocking command's reply to `sink`. The
    /// session stays blocked until [`Server::unblock`] (so a caller whose
    /// batch could not take the writes can undo them and serve again).
    pub fn serve_blocked<K, S>(&mut self, session: &mut Session, ks: &mut K, key: &[u8], sink: &mut S)
    where
        K: Keyspace,
        S: ReplySink<K::Value> + ?Sized,
    {
        let blocked = session.blocked.take().expect("serving a blocked session");
        if let blocking::Op::XReadGroup { group, .. } = &blocked.op {
            if let Some(error) = blocking::group_gone_error(ks, key, group) {
                self.stats.error_reply(&mut Out::<K::Value, S>::new(sink, session.protocol), error.as_bytes());
                // Redis's updateStatsOnUnblock: the blocked command failed.
                self.stats.failed_uncounted(commands::lookup(b"xreadgroup").expect("a row"));
                session.blocked = Some(blocked);
                return;
            }
        }
        let args = blocking::served_command(&blocked.op, key);
        let mut encoded = Vec::new();
        pmwire_resp::client::encode_request(&args, &mut encoded);
        let mut parsed = pmwire_resp::request::Parsed::new(self.config.limits);
        let segments: [&[u8]; 1] = [&encoded];
        assert_eq!(parsed.parse(&segments).commands, 1, "a served command parses back");
        parsed.forget_pieces();
        let req = parsed.request(&segments, 0);
        let spec = commands::of_request(&req).expect("a served command");
        self.commands_processed += 1;
        let mut capture = blocking::Capture(Vec::new());
        // A served BZPOPMIN never blocks again: its key holds a sorted set.
        let deny_blocking = std::mem::replace(&mut self.deny_blocking, true);
        self.run_one(spec, session, ks, &req, &mut capture);
        self.deny_blocking = deny_blocking;
        // Served, it is not called again (Redis counted its call when it
        // blocked); an error fails it, counted on the row it is served under.
        if capture.0.starts_with(b"-") {
            self.stats.failed_uncounted(spec);
        }
        let mut out = Out::<K::Value, S>::new(sink, session.protocol);
        let framed = matches!(blocked.op, blocking::Op::Pop(_) | blocking::Op::MPop { .. });
        if framed && !capture.0.starts_with(b"-") {
            out.array(2);
            out.bulk(key);
        }
        out.raw(&capture.0);
        session.blocked = Some(blocked);
    }

    /// What a client that blocked earlier in the XREADGROUP `args` is
    /// answered now if one of its streams or its group is gone, the first
    /// such of its streams in order: Redis 7.0's `-UNBLOCKED the stream key
    /// no longer exists` or `-NOGROUP the consumer group this client was
    /// blocked on no longer exists` (the reply's bytes); `None` if every
    /// stream holds the group, or `args` is no XREADGROUP. For a driver that
    /// attempts a blocked command again rather than serving it (a cluster
    /// member: such an attempt itself answers XREADGROUP's own NOGROUP).
    pub fn xreadgroup_gone<K: Keyspace>(ks: &mut K, args: &[&[u8]]) -> Option<Vec<u8>> {
        let (group, keys) = blocking::xreadgroup_waits(args)?;
        let error = keys.iter().find_map(|key| blocking::group_gone_error(ks, key, group))?;
        Some(format!("-{error}\r\n").into_bytes())
    }

    /// Waits that CLIENT UNBLOCK ended since the last call: the client ids,
    /// each with whether it ends with the error; the caller sends
    /// [`Server::unblocked_reply`] and calls [`Server::unblock`] on the
    /// session. They are no longer queued on any key already. Call after
    /// each top-level command, before serving ready keys.
    pub fn take_unblocked(&mut self) -> Vec<(u64, bool)> {
        self.waiters.take_unblocked()
    }

    /// The answer of a wait CLIENT UNBLOCK ended: as a time-out, or the
    /// `UNBLOCKED` error.
    pub fn unblocked_reply(session: &Session, error: bool) -> &'static [u8] {
        if error {
            b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"
        } else {
            Server::timed_out_reply(session)
        }
    }

    /// Ends `session`'s wait (served, timed out, or closed): it is no
    /// longer queued on any key. Nothing if it is not blocked.
    pub fn unblock(&mut self, session: &mut Session) {
        if session.blocked.take().is_some() {
            self.waiters.unblock(session.id);
        }
    }

    /// What a blocked command answers when its time is up: the null array
    /// (`*-1` in RESP2, `_` in RESP3), whatever the command.
    pub fn timed_out_reply(session: &Session) -> &'static [u8] {
        match session.protocol {
            Protocol::Resp2 => b"*-1\r\n",
            Protocol::Resp3 => b"_\r\n",
        }
    }
}

/// Whether `req` is answered even under CLIENT REPLY OFF or SKIP: the
/// subscribe commands (their confirmations are pushes, which Redis sends
/// whatever the reply mode) and CLIENT REPLY itself (ON answers OK).
fn replies_anyway(req: &Request<'_>) -> bool {
    const PUSHING: [&[u8]; 6] = [b"subscribe", b"psubscribe", b"ssubscribe", b"unsubscribe", b"punsubscribe", b"sunsubscribe"];
    let name = req.arg(0);
    PUSHING.iter().any(|p| name.eq_ignore_ascii_case(p))
        || (req.len() == 1 && name.eq_ignore_ascii_case(b"reset"))
        || (req.len() == 3 && name.eq_ignore_ascii_case(b"client") && req.arg(1).eq_ignore_ascii_case(b"reply"))
}

/// Redis 7.0's protected-mode refusal, word for word.
pub const DENIED: &[u8] = b"-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

/// Compares a secret in time that depends on the lengths only.
pub fn same_secret(want: &[u8], given: &[u8]) -> bool {
    let mut diff = u8::from(want.len() != given.len());
    for i in 0..want.len().max(given.len()) {
        diff |= want.get(i).copied().unwrap_or(0) ^ given.get(i).copied().unwrap_or(0xff);
    }
    diff == 0
}

/// The checks before a command runs or is queued, as Redis's
/// processCommand makes them: it exists, its arity (and subcommand's), then
/// authentication.
fn admit<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Result<&'static CommandInfo, Fail> {
    let req = c.req;
    let info = find_command(req.len(), |i| req.arg(i)).map_err(Fail::Text)?;
    // As Redis: existence and arity first, then authentication; AUTH,
    // HELLO and QUIT are served to anyone.
    c.server.sync_requirepass();
    if !c.session.authenticated && !c.server.users.default_open() && !info.flags.contains(Flags::NO_AUTH) {
        return Err(Fail::Text("NOAUTH Authentication required.".into()));
    }
    // Redis's `no_multi` commands (of those served here).
    if c.session.multi.is_some() && matches!(info.name, "save" | "shutdown") {
        return Err(Fail::err("Command not allowed inside a transaction"));
    }
    if !c.server.users.unrestricted(&c.session.user) {
        let argv: Vec<&[u8]> = req.args().collect();
        let context = if c.session.multi.is_some() { "multi" } else { "toplevel" };
        let now = c.ks.now_ms();
        c.server.acl_check(c.session, info, &argv, context, now).map_err(Fail::Text)?;
    }
    if let Some(refused) = pubsub::refusal_in_context(&c.server.pubsub, c.session.id, c.session.protocol, info.name) {
        return Err(refused);
    }
    admit_memory(c, info)?;
    // Redis's processCommand: a write (an EXEC that queued one; a script
    // whose shebang may write) needs enough good replicas.
    if !c.server.config.enough_replicas() {
        let queued_write = info.name == "exec" && c.session.multi.as_ref().is_some_and(|m| m.writes);
        if queued_write || may_write(c.server, c.ks, info, req) {
            return Err(Fail::Text(NOREPLICAS_ERROR.into()));
        }
    }
    Ok(info)
}

/// Whether `req`, of row `info`, is a write command as Redis's
/// getCommandFlags says (an EVAL's flags its shebang's, an FCALL's its
/// function's).
fn may_write<K: Keyspace>(server: &mut Server, ks: &mut K, info: &CommandInfo, req: &Request<'_>) -> bool {
    if info.flags.contains(Flags::WRITE) {
        return true;
    }
    match info.name {
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" => server.script_flags_deny(ks, info.name.starts_with("evalsha"), req.arg(1), scripting::NO_WRITES),
        "fcall" | "fcall_ro" => server.function_flags_deny(ks, req.arg(1), scripting::NO_WRITES),
        _ => false,
    }
}

/// Redis's processCommand maxmemory check (policy `noeviction`): above
/// `maxmemory`, a `denyoom` command (an EXEC that queued one; an EVAL whose
/// shebang may write without `allow-oom`) is refused, and so is anything
/// but EXEC, DISCARD, QUIT and RESET inside MULTI. Remembers, for a
/// script's first write, whether memory was above the limit.
fn admit_memory<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, info: &CommandInfo) -> Res {
    let max = c.server.config.maxmemory;
    if max == 0 {
        c.server.oom_at_admission = false;
        return Ok(());
    }
    let over = c.ks.used_memory() > max;
    if over {
        let queued_denyoom = info.name == "exec" && c.session.multi.as_ref().is_some_and(|m| m.denyoom);
        let in_multi = c.session.multi.is_some() && !matches!(info.name, "exec" | "discard" | "quit" | "reset");
        if queued_denyoom || in_multi || denies_oom(c.server, c.ks, info, c.req) {
            return Err(Fail::Text(OOM_ERROR.into()));
        }
    }
    c.server.oom_at_admission = over;
    Ok(())
}

/// Whether `req`, of row `info`, is `denyoom` (Redis's getCommandFlags:
/// an EVAL's flags are its script's when it has a shebang, an FCALL's its
/// function's).
fn denies_oom<K: Keyspace>(server: &mut Server, ks: &mut K, info: &CommandInfo, req: &Request<'_>) -> bool {
    if info.flags.contains(Flags::DENYOOM) {
        return true;
    }
    match info.name {
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" => server.script_flags_deny(ks, info.name.starts_with("evalsha"), req.arg(1), scripting::NO_WRITES | scripting::ALLOW_OOM),
        "fcall" | "fcall_ro" => server.function_flags_deny(ks, req.arg(1), scripting::NO_WRITES | scripting::ALLOW_OOM),
        _ => false,
    }
}

/// execCommand's error for a queued command the rules no longer allow.
fn exec_refusal(denied: acl::Denied) -> String {
    format!("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: {}", denied.exec_reason())
}
