//! The kill -9 campaign against `pmwire kv` (the style of `pmwire bench crash`).
//!
//! Each run: start `pmwire kv` on the same /dev/shm pool (the first run creates it; runs
//! alternate zero-copy and copy mode); verify every key of the model; then load it from two
//! client threads at once, one over RESP (pipelined bursts of SET/DEL) and one over HTTP
//! (pipelined bursts of POST/DELETE `/kv/{key}`), each on its own keys, with values of 1 B to
//! 70 KB (many spanning several receive buffers); a killer thread sends SIGKILL after a random
//! delay. Only replies the clients read enter the model. After the last run a final restart
//! verifies, then the server is stopped with SIGTERM and must exit cleanly. One RESP write in
//! ten is an expiring `SET key value PX 1`: after a restart (milliseconds later at least) its
//! key must read as absent, whether the write was acknowledged or only sent; a served value
//! of such a write is *expired served* (must be 0).
//!
//! Transactions: some RESP bursts are one `MULTI`, a `SET` of every key of a *transaction
//! group* (6 keys with values of up to 70 KB, or 400 keys of small values: over a WAL group's
//! 1024 words) to the same generated value, `EXEC`. Besides each key's own check, every key
//! of a group must hold the same write after a restart: a group whose keys differ is an EXEC
//! *half-applied* (must be 0). Half of the groups are written instead by one `EVAL` of a
//! script that sets each key it is given (`GROUP_SCRIPT`): a script's writes are as
//! failure-atomic as an EXEC's, and a third canary (`run_with_planted_script_bug`) commits
//! them command by command, which the campaign must catch.
//!
//! Collections: about a third of the RESP writes go to keys of their own of the five collection
//! families: hashes (HSET/HDEL/HINCRBY), sorted sets (ZADD/ZREM/ZINCRBY/ZPOPMIN/
//! ZREMRANGEBYSCORE), lists (RPUSH/LPUSH/LPOP), sets (SADD/SREM), streams (XADD with IDs
//! above any sent before, XDEL, XTRIM MAXLEN =) and streams with a consumer group (XGROUP
//! CREATE ... MKSTREAM, XADD, XREADGROUP COUNT 1 `>` by two consumers, XACK of a pending
//! entry, XTRIM), with small universes of fields and members so each key stays small. The model
//! of such a key is its exact acknowledged contents (a list's elements in order; a set's
//! members; a hash's fields and values; a sorted set's members and scores) and the writes sent
//! after it, in order, not yet answered. After a restart each is read back (LRANGE 0 -1,
//! SMEMBERS sorted, HGETALL, ZRANGE 0 -1 WITHSCORES, XRANGE - +; a group key also XINFO GROUPS
//! for its last delivered ID and XPENDING for each pending entry's ID, consumer and delivery
//! count) and must equal the acknowledged contents
//! with some prefix of those writes applied (none, the first, the first two, ...); anything
//! else counts as *lost*. Every other pair of runs starts the server with `--collection-limits
//! tiny` (and stream nodes of 2 entries), so these collections are chunked past 2 members (headers and chunks,
//! `pmwire_keyspace::chunked`, split and merged as they grow and shrink) and recovered in both
//! forms; a second canary (`run_with_planted_chunk_bug`) plants a list header written without
//! its new chunk, which the campaign must catch.
//!
//! Model: per key, the last acknowledged write (or what the previous verification found) and
//! the writes sent after it that were not acknowledged (they may or may not have committed).
//! After a restart a key must hold the acknowledged value or one of those later writes'
//! values, byte for byte; a missing acknowledged value is *lost*, bytes that match no write
//! sent to that key are *torn* (both must be 0). Values are generated from (key, seed,
//! length), so a value found under the wrong key is torn too.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

use crate::client::{HttpClient, RespClient};
use crate::serve::ReadyFile;

/// Pool size of the campaign.
const POOL_SIZE: &str = "96M";
/// Keys per client thread.
const KEYS: u64 = 64;
/// Most requests in one pipelined burst.
const MAX_BURST: usize = 32;
/// Transaction groups (the first `NARROW_GROUPS` of `NARROW_KEYS` keys, the rest of `WIDE_KEYS`).
const TX_GROUPS: u64 = 8;
const NARROW_GROUPS: u64 = 6;
const NARROW_KEYS: u64 = 6;
const WIDE_KEYS: u64 = 400;

/// Keys per collection family (RESP only).
const FAMILY_KEYS: u64 = 16;
/// Most elements a list of the load holds (past it the load pops).
const MAX_LIST: usize = 48;

/// A collection family of the RESP load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Hash,
    Zset,
    List,
    Set,
    Stream,
    /// A stream with a consumer group `g`: XGROUP CREATE, XADD, XREADGROUP, XACK, XTRIM.
    Group,
}

const FAMILIES: [Family; 6] = [Family::Hash, Family::Zset, Family::List, Family::Set, Family::Stream, Family::Group];

impl Family {
    /// The family of collection key `c`.
    fn of(c: u64) -> Family {
        FAMILIES[(c / FAMILY_KEYS) as usize % FAMILIES.len()]
    }

    fn key(c: u64) -> String {
        let name = ["hash", "zset", "list", "set", "stream", "group"][Family::of(c) as usize];
        format!("crash:r:{name}:{c}")
    }
}

/// One write to a collection key.
#[derive(Clone, Debug, PartialEq)]
enum CollOp {
    HSet(Vec<u8>, Vec<u8>),
    HDel(Vec<u8>),
    /// HINCRBY of a counter field (fields of their own: `n0`..`n3`, never HSET).
    HIncrBy(Vec<u8>, i64),
    ZAdd(Vec<u8>, f64),
    ZRem(Vec<u8>),
    /// ZINCRBY (scores stay halves, so every sum is exact).
    ZIncrBy(Vec<u8>, f64),
    /// ZPOPMIN of one member.
    ZPopMin,
    /// ZREMRANGEBYSCORE min max (inclusive).
    ZRemRangeByScore(f64, f64),
    RPush(Vec<u8>),
    LPush(Vec<u8>),
    LPop,
    SAdd(Vec<u8>),
    SRem(Vec<u8>),
    /// XADD of an entry with ID `ms-0` (strictly above every ID sent to the key) and one field.
    XAdd(u64, Vec<u8>, Vec<u8>),
    /// XDEL of one ID.
    XDel(u64),
    /// XTRIM MAXLEN = n.
    XTrim(u64),
    /// XGROUP CREATE key g 0 MKSTREAM.
    XGroupCreate,
    /// XREADGROUP GROUP g <consumer> COUNT 1 STREAMS key >: the next entry past the
    /// group's last delivered one, into its pending entries.
    XReadGroup(Vec<u8>),
    /// XACK key g ms-0.
    XAck(u64),
}

impl CollOp {
    fn encode(&self, key: &str, out: &mut Vec<u8>) {
        let k = key.as_bytes();
        match self {
            CollOp::HSet(f, v) => RespClient::encode(&[&b"HSET"[..], k, f, v], out),
            CollOp::HDel(f) => RespClient::encode(&[&b"HDEL"[..], k, f], out),
            CollOp::ZAdd(m, score) => RespClient::encode(&[&b"ZADD"[..], k, score.to_string().as_bytes(), m], out),
            CollOp::ZRem(m) => RespClient::encode(&[&b"ZREM"[..], k, m], out),
            CollOp::HIncrBy(f, by) => RespClient::encode(&[&b"HINCRBY"[..], k, f, by.to_string().as_bytes()], out),
            CollOp::ZIncrBy(m, by) => RespClient::encode(&[&b"ZINCRBY"[..], k, by.to_string().as_bytes(), m], out),
            CollOp::ZPopMin => RespClient::encode(&[&b"ZPOPMIN"[..], k], out),
            CollOp::ZRemRangeByScore(min, max) => RespClient::encode(
                &[&b"ZREMRANGEBYSCORE"[..], k, min.to_string().as_bytes(), max.to_string().as_bytes()],
                out,
            ),
            CollOp::RPush(e) => RespClient::encode(&[&b"RPUSH"[..], k, e], out),
            CollOp::LPush(e) => RespClient::encode(&[&b"LPUSH"[..], k, e], out),
            CollOp::LPop => RespClient::encode(&[&b"LPOP"[..], k], out),
            CollOp::SAdd(m) => RespClient::encode(&[&b"SADD"[..], k, m], out),
            CollOp::SRem(m) => RespClient::encode(&[&b"SREM"[..], k, m], out),
            CollOp::XAdd(ms, f, v) => RespClient::encode(&[&b"XADD"[..], k, format!("{ms}-0").as_bytes(), f, v], out),
            CollOp::XDel(ms) => RespClient::encode(&[&b"XDEL"[..], k, format!("{ms}-0").as_bytes()], out),
            CollOp::XTrim(n) => RespClient::encode(&[&b"XTRIM"[..], k, b"MAXLEN", b"=", n.to_string().as_bytes()], out),
            CollOp::XGroupCreate => RespClient::encode(&[&b"XGROUP"[..], b"CREATE", k, b"g", b"0", b"MKSTREAM"], out),
            CollOp::XReadGroup(consumer) => RespClient::encode(
                &[&b"XREADGROUP"[..], b"GROUP", b"g", consumer, b"COUNT", b"1", b"STREAMS", k, b">"],
                out,
            ),
            CollOp::XAck(ms) => RespClient::encode(&[&b"XACK"[..], k, b"g", format!("{ms}-0").as_bytes()], out),
        }
    }

    fn is_push(&self) -> bool {
        matches!(self, CollOp::RPush(_) | CollOp::LPush(_))
    }
}

/// The contents of a collection key (empty: absent): a list's elements, or the members of a
/// set (empty values), hash (field values) or sorted set (scores as text). A group key keeps
/// its stream's entries in `list` and its group in `members`: [`GROUP_LAST`] → the last
/// delivered ID's milliseconds (present once the group exists), and a pending entry as
/// `pel:<ms, 20 digits>` → its consumer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Contents {
    list: std::collections::VecDeque<Vec<u8>>,
    members: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Contents {
    fn apply(&mut self, op: &CollOp) {
        match op {
            CollOp::HSet(f, v) => {
                self.members.insert(f.clone(), v.clone());
            }
            CollOp::ZAdd(m, score) => {
                self.members.insert(m.clone(), score.to_string().into_bytes());
            }
            CollOp::SAdd(m) => {
                self.members.insert(m.clone(), Vec::new());
            }
            CollOp::HIncrBy(f, by) => {
                let old = self.members.get(f).map_or(0, |v| Self::number::<i64>(v));
                self.members.insert(f.clone(), (old + by).to_string().into_bytes());
            }
            CollOp::ZIncrBy(m, by) => {
                let old = self.members.get(m).map_or(0.0, |v| Self::number::<f64>(v));
                self.members.insert(m.clone(), (old + by).to_string().into_bytes());
            }
            CollOp::ZPopMin => {
                let min = self
                    .members
                    .iter()
                    .map(|(m, s)| (Self::number::<f64>(s), m))
                    .min_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)))
                    .map(|(_, m)| m.clone());
                if let Some(m) = min {
                    self.members.remove(&m);
                }
            }
            CollOp::ZRemRangeByScore(min, max) => {
                self.members.retain(|_, s| !(*min..=*max).contains(&Self::number::<f64>(s)));
            }
            CollOp::HDel(m) | CollOp::ZRem(m) | CollOp::SRem(m) => {
                self.members.remove(m);
            }
            CollOp::RPush(e) => self.list.push_back(e.clone()),
            CollOp::LPush(e) => self.list.push_front(e.clone()),
            CollOp::LPop => {
                self.list.pop_front();
            }
            // A stream's entries are three list items each: ID, field, value.
            CollOp::XAdd(ms, f, v) => self.list.extend([format!("{ms}-0").into_bytes(), f.clone(), v.clone()]),
            CollOp::XDel(ms) => {
                let id = format!("{ms}-0").into_bytes();
                if let Some(at) = self.list.iter().step_by(3).position(|e| *e == id) {
                    self.list.drain(3 * at..3 * at + 3);
                }
            }
            CollOp::XTrim(n) => {
                let keep = 3 * *n as usize;
                while self.list.len() > keep {
                    self.list.pop_front();
                }
            }
            CollOp::XGroupCreate => {
                self.members.entry(GROUP_LAST.to_vec()).or_insert_with(|| b"0".to_vec());
            }
            CollOp::XReadGroup(consumer) => {
                let Some(last) = self.members.get(GROUP_LAST).map(|v| Self::number::<u64>(v)) else { return };
                let next = self.list.iter().step_by(3).map(|id| entry_ms(id)).find(|&ms| ms > last);
                if let Some(ms) = next {
                    self.members.insert(GROUP_LAST.to_vec(), ms.to_string().into_bytes());
                    self.members.insert(pel_key(ms), consumer.clone());
                }
            }
            CollOp::XAck(ms) => {
                if self.members.contains_key(GROUP_LAST) {
                    self.members.remove(&pel_key(*ms));
                }
            }
        }
    }

    /// A number the model itself wrote (a counter, a score).
    fn number<T: std::str::FromStr>(text: &[u8]) -> T {
        let parsed = std::str::from_utf8(text).ok().and_then(|t| t.parse().ok());
        parsed.expect("the model writes counters and scores as numbers")
    }

    /// The flat reply its family's read gives, normalized: LRANGE's elements; SMEMBERS'
    /// members sorted; HGETALL's field, value pairs sorted by field; ZRANGE WITHSCORES'
    /// member, score pairs in (score, member) order with scores as `f64::to_string` writes them.
    fn canonical(&self, family: Family) -> Vec<Vec<u8>> {
        match family {
            Family::List | Family::Stream => self.list.iter().cloned().collect(),
            // The entries, then `#group` and the last delivered ID, then each pending ID
            // (ascending) with its consumer and delivery count (always 1: nothing is claimed).
            Family::Group => {
                let mut flat: Vec<Vec<u8>> = self.list.iter().cloned().collect();
                if let Some(last) = self.members.get(GROUP_LAST) {
                    flat.push(b"#group".to_vec());
                    flat.push(format!("{}-0", Self::number::<u64>(last)).into_bytes());
                }
                for (k, consumer) in self.members.range(b"pel:".to_vec()..b"pel;".to_vec()) {
                    let ms: u64 = Self::number(&k[4..]);
                    flat.extend([format!("{ms}-0").into_bytes(), consumer.clone(), b"1".to_vec()]);
                }
                flat
            }
            Family::Set => self.members.keys().cloned().collect(),
            Family::Hash => self.members.iter().flat_map(|(f, v)| [f.clone(), v.clone()]).collect(),
            Family::Zset => {
                let score = |s: &[u8]| std::str::from_utf8(s).ok().and_then(|s| s.parse::<f64>().ok());
                let mut pairs: Vec<(f64, &Vec<u8>, &Vec<u8>)> =
                    self.members.iter().map(|(m, s)| (score(s).unwrap_or(f64::NAN), m, s)).collect();
                pairs.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
                pairs.into_iter().flat_map(|(_, m, s)| [m.clone(), s.clone()]).collect()
            }
        }
    }
}

/// [`Contents::members`]' key for a group's last delivered ID.
const GROUP_LAST: &[u8] = b"last";

/// [`Contents::members`]' key for a pending entry (fixed width, so byte order is ID order).
fn pel_key(ms: u64) -> Vec<u8> {
    format!("pel:{ms:020}").into_bytes()
}

/// The milliseconds of a model entry's ID `ms-0`.
fn entry_ms(id: &[u8]) -> u64 {
    let text = std::str::from_utf8(id).ok().and_then(|t| t.strip_suffix("-0"));
    text.and_then(|t| t.parse().ok()).expect("the model's IDs are ms-0")
}

/// What one collection key may hold (see the module docs).
#[derive(Clone, Debug, Default)]
struct CollState {
    /// The contents with every acknowledged write applied (or what the last verification found).
    durable: Contents,
    /// Writes sent after the last answered one, in order.
    pending: std::collections::VecDeque<CollOp>,
    /// A stream key: the largest ID's milliseconds sent to it (so the next XADD's is above
    /// whatever committed, acknowledged or not).
    max_ms: u64,
}

/// The key ids of transaction group `g` (after the plain keys' ids).
fn group_ids(g: u64) -> std::ops::Range<u64> {
    let first = KEYS + g * WIDE_KEYS;
    first..first + if g < NARROW_GROUPS { NARROW_KEYS } else { WIDE_KEYS }
}

/// How a campaign runs.
#[derive(Clone, Debug)]
pub struct CrashOptions {
    /// Kill -9 runs.
    pub runs: usize,
    /// Seed of keys, sizes and kill moments (printed on failure; replays the choices).
    pub seed: u64,
    /// The `pmwire` executable.
    pub exe: PathBuf,
    /// Longest a run loads before the kill (the kill comes at a random moment before).
    pub max_load: Duration,
}

/// What a campaign found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Runs completed (killed and restarted).
    pub runs: usize,
    /// Writes (SET, DEL, POST, DELETE, EXEC's SETs and collection writes) acknowledged over all runs.
    pub acknowledged: u64,
    /// Acknowledged values missing or different after a restart, plus torn ones: must be 0.
    pub lost: u64,
    /// Of `lost`: keys holding bytes of no write sent to them.
    pub torn: u64,
    /// Key checks made after restarts.
    pub keys_checked: u64,
    /// Error replies seen during the loads (none expected).
    pub error_replies: u64,
    /// Expiring writes (`SET ... PX 1`) acknowledged.
    pub expiring_acknowledged: u64,
    /// Of `lost`: keys that served the value of an expiring write after a restart.
    pub expired_served: u64,
    /// EXECs acknowledged over all runs.
    pub transactions: u64,
    /// Of `transactions`, those written by one EVAL script acknowledged over all runs.
    pub scripts: u64,
    /// Transaction groups found half-applied after a restart: must be 0.
    pub half_applied: u64,
    /// Of `acknowledged`: HSET/HDEL/HINCRBY writes.
    pub hash_acknowledged: u64,
    /// Of `acknowledged`: ZADD/ZREM/ZINCRBY/ZPOPMIN/ZREMRANGEBYSCORE writes.
    pub zset_acknowledged: u64,
    /// Of `acknowledged`: RPUSH/LPUSH/LPOP writes.
    pub list_acknowledged: u64,
    /// Of `acknowledged`: SADD/SREM writes.
    pub set_acknowledged: u64,
    /// Of `acknowledged`: XADD/XDEL/XTRIM writes.
    pub stream_acknowledged: u64,
    /// Of `acknowledged`: writes to streams with a consumer group (XGROUP CREATE, XADD,
    /// XREADGROUP, XACK, XTRIM).
    pub group_acknowledged: u64,
    /// Of `group_acknowledged`: XREADGROUP and XACK.
    pub group_reads_acks: u64,
    /// Of `keys_checked`: collection keys read back whole after restarts.
    pub collections_checked: u64,
}

/// One write to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Write {
    Set {
        seed: u64,
        len: u32,
    },
    /// A SET with a 1 ms TTL (RESP only): absent after any restart.
    Expiring {
        seed: u64,
        len: u32,
    },
    Delete,
}

/// What one key may hold (see the module docs).
#[derive(Clone, Debug, Default)]
struct KeyState {
    /// The acknowledged (or verified) state; `None`: absent.
    durable: Option<Write>,
    /// Writes sent after it, with their sequence numbers, not yet superseded by an ack.
    pending: Vec<(u64, Write)>,
}

/// The model of one client thread's keys.
#[derive(Debug, Default)]
struct Model {
    keys: HashMap<u64, KeyState>,
    /// Collection keys (RESP only), by id (see [`Family::of`]).
    colls: HashMap<u64, CollState>,
    /// Acknowledged XREADGROUPs and XACKs.
    group_reads_acks: u64,
    /// Acknowledged collection writes per family, in [`FAMILIES`] order.
    family_acknowledged: [u64; 6],
    next_seq: u64,
    acknowledged: u64,
    expiring_acknowledged: u64,
    error_replies: u64,
    transactions: u64,
    /// Of `transactions`, those written by one EVAL.
    scripts: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Front {
    Resp,
    Http,
}

impl Front {
    fn key(self, i: u64) -> String {
        match self {
            Front::Resp => format!("crash:r:{i}"),
            Front::Http => format!("crash:h:{i}"),
        }
    }
}

/// The bytes of a SET of `key`.
fn value_bytes(key: &str, seed: u64, len: u32) -> Vec<u8> {
    let key_hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    let mut bytes = vec![0u8; len as usize];
    StdRng::seed_from_u64(seed ^ key_hash).fill_bytes(&mut bytes);
    bytes
}

fn random_write(rng: &mut StdRng, front: Front) -> Write {
    if rng.gen_bool(0.08) {
        return Write::Delete;
    }
    let len = match rng.gen_range(0..100) {
        0..40 => rng.gen_range(1..=100),
        40..85 => rng.gen_range(101..=4096),
        _ => rng.gen_range(4097..=70_000),
    };
    if front == Front::Resp && rng.gen_bool(0.1) {
        return Write::Expiring { seed: rng.gen(), len };
    }
    Write::Set { seed: rng.gen(), len }
}

/// Runs the campaign; fails if any acknowledged write is lost or any value torn.
pub fn run(options: &CrashOptions) -> Result<CrashReport> {
    run_inner(options, None)
}

/// The canary: the campaign against a server with a planted bug (it acknowledges writes
/// before committing them); it must fail.
#[doc(hidden)]
pub fn run_with_planted_bug(options: &CrashOptions) -> Result<CrashReport> {
    run_inner(options, Some("--fault-ack-before-commit"))
}

/// The second canary: a server whose list pushes that start a new chunk write the header
/// without the chunk (every run with tiny collection limits); it must fail.
#[doc(hidden)]
pub fn run_with_planted_chunk_bug(options: &CrashOptions) -> Result<CrashReport> {
    run_inner(options, Some("--fault-header-without-chunk"))
}

/// The third canary: a server that commits a script's writes command by command; it must
/// fail (a group half-applied).
#[doc(hidden)]
pub fn run_with_planted_script_bug(options: &CrashOptions) -> Result<CrashReport> {
    run_inner(options, Some(SCRIPT_CANARY))
}

/// The flag of [`run_with_planted_script_bug`]'s server.
const SCRIPT_CANARY: &str = "--fault-script-commit-per-call";

fn run_inner(options: &CrashOptions, planted: Option<&'static str>) -> Result<CrashReport> {
    let dir = PathBuf::from(format!("/dev/shm/pmwire-kv-crash-{}-{:x}", std::process::id(), options.seed));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let result = campaign(options, &dir, planted);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn campaign(options: &CrashOptions, dir: &Path, planted: Option<&'static str>) -> Result<CrashReport> {
    let pool = dir.join("kv.pool");
    let mut rng = StdRng::seed_from_u64(options.seed);
    let mut models = [Model::default(), Model::default()];
    let mut report = CrashReport::default();
    for run in 0..=options.runs {
        let mode = ["zero-copy", "copy"][run % 2];
        // Every other pair of runs chunks collections past 2 members (pmwire_keyspace::chunked),
        // so headers and chunks are written, split, merged and recovered under kill -9.
        let tiny = (run / 2) % 2 == 1 || planted.is_some();
        let child = KvChild::start(&options.exe, &pool, mode, tiny, planted)?;
        let limits = if tiny { "tiny" } else { "default" };
        let context = || format!("run {run} ({mode}, collection limits {limits}, seed {})", options.seed);
        for (front, model) in [Front::Resp, Front::Http].into_iter().zip(models.iter_mut()) {
            verify(&child.ready, front, model, &mut report).with_context(context)?;
        }
        if run == options.runs {
            child.stop().with_context(context)?;
            break;
        }
        if tiny {
            // Streams too: nodes of 2 entries, so appends start nodes and deletes and trims
            // remove them under kill -9.
            let mut conn = RespClient::connect(child.ready.resp_addr()).with_context(context)?;
            let reply = conn.call(&["CONFIG", "SET", "stream-node-max-entries", "2"]).with_context(context)?;
            anyhow::ensure!(reply == pmwire_resp::client::Value::Simple(b"OK".to_vec()), "CONFIG SET stream-node-max-entries: {reply:?}");
        }
        let kill_after = Duration::from_micros(rng.gen_range(1_000..options.max_load.as_micros().max(1_001) as u64));
        let deadline = Instant::now() + options.max_load * 2 + Duration::from_secs(1);
        let seeds = [rng.gen::<u64>(), rng.gen::<u64>()];
        let [resp_model, http_model] = std::mem::take(&mut models);
        let (resp_addr, http_addr) = (child.ready.resp_addr(), child.ready.http_addr());
        // Against the script canary, the RESP load is scripts only, so kills land inside them.
        let scripts_only = planted == Some(SCRIPT_CANARY);
        let resp = std::thread::spawn(move || load(Front::Resp, resp_addr, resp_model, seeds[0], deadline, scripts_only));
        let http = std::thread::spawn(move || load(Front::Http, http_addr, http_model, seeds[1], deadline, false));
        std::thread::sleep(kill_after);
        child.kill9()?;
        models = [resp.join().expect("RESP client thread"), http.join().expect("HTTP client thread")];
        report.runs += 1;
        if report.runs % 10 == 0 {
            eprintln!("  {} runs, {} acknowledged, {} lost", report.runs, acknowledged(&models), report.lost);
        }
    }
    report.acknowledged = acknowledged(&models);
    report.error_replies = models.iter().map(|m| m.error_replies).sum();
    report.expiring_acknowledged = models.iter().map(|m| m.expiring_acknowledged).sum();
    report.transactions = models.iter().map(|m| m.transactions).sum();
    report.scripts = models.iter().map(|m| m.scripts).sum();
    let family = |f: Family| models.iter().map(|m| m.family_acknowledged[f as usize]).sum::<u64>();
    report.hash_acknowledged = family(Family::Hash);
    report.zset_acknowledged = family(Family::Zset);
    report.list_acknowledged = family(Family::List);
    report.set_acknowledged = family(Family::Set);
    report.stream_acknowledged = family(Family::Stream);
    report.group_acknowledged = family(Family::Group);
    report.group_reads_acks = models.iter().map(|m| m.group_reads_acks).sum();
    if report.half_applied > 0 {
        bail!("{} transactions (EXEC or EVAL) half-applied (seed {})", report.half_applied, options.seed);
    }
    if report.lost > 0 {
        bail!(
            "{} acknowledged writes lost ({} torn, {} expired served) (seed {})",
            report.lost,
            report.torn,
            report.expired_served,
            options.seed
        );
    }
    Ok(report)
}

fn acknowledged(models: &[Model]) -> u64 {
    models.iter().map(|m| m.acknowledged).sum()
}

/// Pipelined bursts of writes until the connection fails (the kill) or `deadline`.
fn load(front: Front, addr: SocketAddr, mut model: Model, seed: u64, deadline: Instant, scripts_only: bool) -> Model {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut conn = match front {
        Front::Resp => RespClient::connect(addr).map(Conn::Resp),
        Front::Http => HttpClient::connect(addr).map(Conn::Http),
    };
    let Ok(conn) = conn.as_mut() else { return model };
    let mut burst: Vec<Sent> = Vec::with_capacity(MAX_BURST);
    let mut out = Vec::new();
    while Instant::now() < deadline {
        burst.clear();
        out.clear();
        if front == Front::Resp && (scripts_only || rng.gen_bool(0.15)) {
            if !transaction(conn, &mut model, &mut rng, &mut out, scripts_only) {
                break;
            }
            continue;
        }
        for _ in 0..rng.gen_range(1..=MAX_BURST) {
            if front == Front::Resp && rng.gen_bool(0.35) {
                let c = rng.gen_range(0..FAMILY_KEYS * FAMILIES.len() as u64);
                let state = model.colls.entry(c).or_default();
                let op = random_coll_op(&mut rng, c, state);
                op.encode(&Family::key(c), &mut out);
                state.pending.push_back(op);
                burst.push(Sent::Coll(c));
                continue;
            }
            let (i, write) = (rng.gen_range(0..KEYS), random_write(&mut rng, front));
            let seq = model.next_seq;
            model.next_seq += 1;
            model.keys.entry(i).or_default().pending.push((seq, write));
            conn.encode(&front.key(i), write, &mut out);
            burst.push(Sent::Plain(i, seq, write));
        }
        if conn.write_raw(&out).is_err() {
            break;
        }
        for sent in &burst {
            let (i, seq, write) = match *sent {
                Sent::Plain(i, seq, write) => (i, seq, write),
                Sent::Coll(c) => {
                    let Conn::Resp(r) = conn else { unreachable!("collection writes go over RESP") };
                    let Ok(reply) = r.read_reply() else { return model };
                    let state = model.colls.get_mut(&c).expect("sent");
                    let op = state.pending.pop_front().expect("sent");
                    if matches!(reply, pmwire_resp::client::Value::Error(_)) {
                        model.error_replies += 1;
                    } else {
                        state.durable.apply(&op);
                        model.acknowledged += 1;
                        model.family_acknowledged[Family::of(c) as usize] += 1;
                        model.group_reads_acks += u64::from(matches!(op, CollOp::XReadGroup(_) | CollOp::XAck(_)));
                    }
                    continue;
                }
            };
            match conn.read_ack() {
                Ok(true) => {
                    let state = model.keys.get_mut(&i).expect("sent");
                    state.durable = Some(write);
                    state.pending.retain(|&(s, _)| s > seq);
                    model.acknowledged += 1;
                    model.expiring_acknowledged += u64::from(matches!(write, Write::Expiring { .. }));
                }
                Ok(false) => model.error_replies += 1,
                Err(_) => return model,
            }
        }
    }
    model
}

/// A request of a RESP burst: a write to a plain key (id, sequence number, write) or to a
/// collection key (its write is the last of the key's pending ones when sent).
enum Sent {
    Plain(u64, u64, Write),
    Coll(u64),
}

/// A random write to collection key `c`, on small universes of fields and members; a list
/// pops once it could hold [`MAX_LIST`] elements.
fn random_coll_op(rng: &mut StdRng, c: u64, state: &mut CollState) -> CollOp {
    let member = |rng: &mut StdRng, n: u32| format!("m{}", rng.gen_range(0..n)).into_bytes();
    match Family::of(c) {
        Family::Hash if rng.gen_bool(0.1) => {
            CollOp::HIncrBy(format!("n{}", rng.gen_range(0..4)).into_bytes(), rng.gen_range(-50..=50))
        }
        Family::Hash if rng.gen_bool(0.75) => {
            let most = rng.gen_range(1..=2_000u32);
            let len = rng.gen_range(1..=most);
            CollOp::HSet(member(rng, 12), value_bytes(&Family::key(c), rng.gen(), len))
        }
        Family::Hash => CollOp::HDel(member(rng, 12)),
        Family::Zset if rng.gen_bool(0.1) => CollOp::ZIncrBy(member(rng, 24), rng.gen_range(-200..200) as f64 / 2.0),
        Family::Zset if rng.gen_bool(0.05) => CollOp::ZPopMin,
        Family::Zset if rng.gen_bool(0.05) => {
            let min = rng.gen_range(-2_000..2_000) as f64 / 2.0;
            CollOp::ZRemRangeByScore(min, min + rng.gen_range(0..100) as f64 / 2.0)
        }
        Family::Zset if rng.gen_bool(0.7) => CollOp::ZAdd(member(rng, 24), rng.gen_range(-2_000..2_000) as f64 / 2.0),
        Family::Zset => CollOp::ZRem(member(rng, 24)),
        Family::Set if rng.gen_bool(0.65) => CollOp::SAdd(member(rng, 24)),
        Family::Set => CollOp::SRem(member(rng, 24)),
        Family::Stream => {
            let mut now = state.durable.clone();
            state.pending.iter().for_each(|op| now.apply(op));
            let entries = now.list.len() / 3;
            if entries > 0 && rng.gen_bool(0.1) {
                let at = rng.gen_range(0..entries);
                let id = String::from_utf8_lossy(&now.list[3 * at]).trim_end_matches("-0").parse().expect("the model's IDs");
                return CollOp::XDel(id);
            }
            if entries >= MAX_LIST || rng.gen_bool(0.05) {
                return CollOp::XTrim(rng.gen_range(0..=MAX_LIST as u64 / 2));
            }
            state.max_ms += 1 + rng.gen_range(0..3);
            let most = rng.gen_range(1..=2_000u32);
            CollOp::XAdd(state.max_ms, member(rng, 6), value_bytes(&Family::key(c), rng.gen(), rng.gen_range(1..=most)))
        }
        Family::Group => {
            let mut now = state.durable.clone();
            state.pending.iter().for_each(|op| now.apply(op));
            if !now.members.contains_key(GROUP_LAST) {
                return CollOp::XGroupCreate;
            }
            let entries = now.list.len() / 3;
            let pel: Vec<u64> = now.members.range(b"pel:".to_vec()..b"pel;".to_vec()).map(|(k, _)| Contents::number(&k[4..])).collect();
            if !pel.is_empty() && rng.gen_bool(0.3) {
                return CollOp::XAck(pel[rng.gen_range(0..pel.len())]);
            }
            if rng.gen_bool(0.35) {
                return CollOp::XReadGroup(format!("c{}", rng.gen_range(0..2)).into_bytes());
            }
            if entries >= MAX_LIST || rng.gen_bool(0.05) {
                return CollOp::XTrim(rng.gen_range(0..=MAX_LIST as u64 / 2));
            }
            state.max_ms += 1 + rng.gen_range(0..3);
            let most = rng.gen_range(1..=2_000u32);
            CollOp::XAdd(state.max_ms, member(rng, 6), value_bytes(&Family::key(c), rng.gen(), rng.gen_range(1..=most)))
        }
        Family::List => {
            let pushes = state.pending.iter().filter(|op| op.is_push()).count();
            if state.durable.list.len() + pushes >= MAX_LIST || rng.gen_bool(0.4) {
                return CollOp::LPop;
            }
            let element = format!("e{:x}", rng.gen::<u64>()).into_bytes();
            if rng.gen_bool(0.7) {
                CollOp::RPush(element)
            } else {
                CollOp::LPush(element)
            }
        }
    }
}

/// A script that sets every key it is given to the value for that key in ARGV.
const GROUP_SCRIPT: &str = "for i, k in ipairs(KEYS) do redis.call('set', k, ARGV[i]) end return #KEYS";

/// One transaction: a random group's keys all set to one write, by MULTI, SET of each, EXEC,
/// or (half of them) by one EVAL of [`GROUP_SCRIPT`]; false if the connection failed (the
/// kill).
fn transaction(conn: &mut Conn, model: &mut Model, rng: &mut StdRng, out: &mut Vec<u8>, scripts_only: bool) -> bool {
    let Conn::Resp(c) = conn else { unreachable!("transactions go over RESP") };
    let g = rng.gen_range(0..TX_GROUPS);
    let len = if g < NARROW_GROUPS { rng.gen_range(1..=70_000) } else { rng.gen_range(1..=100) };
    let seed = rng.gen();
    let write = Write::Set { seed, len };
    let seq = model.next_seq;
    model.next_seq += 1;
    let script = scripts_only || rng.gen_bool(0.5);
    for i in group_ids(g) {
        model.keys.entry(i).or_default().pending.push((seq, write));
    }
    let keys: Vec<String> = group_ids(g).map(|i| Front::Resp.key(i)).collect();
    if script {
        let mut args: Vec<Vec<u8>> = vec![b"EVAL".to_vec(), GROUP_SCRIPT.into(), keys.len().to_string().into_bytes()];
        args.extend(keys.iter().map(|k| k.clone().into_bytes()));
        args.extend(keys.iter().map(|k| value_bytes(k, seed, len)));
        RespClient::encode(&args, out);
    } else {
        RespClient::encode(&["MULTI"], out);
        for key in &keys {
            RespClient::encode(&[&b"SET"[..], key.as_bytes(), &value_bytes(key, seed, len)], out);
        }
        RespClient::encode(&["EXEC"], out);
    }
    if c.write_raw(out).is_err() {
        return false;
    }
    use pmwire_resp::client::Value;
    let ok = Value::Simple(b"OK".to_vec());
    let mut expected = Vec::new();
    if script {
        expected.push(Value::Integer(keys.len() as i64));
    } else {
        expected.push(ok.clone());
        expected.extend(group_ids(g).map(|_| Value::Simple(b"QUEUED".to_vec())));
        expected.push(Value::Array(group_ids(g).map(|_| ok.clone()).collect()));
    }
    let mut all_ok = true;
    for want in &expected {
        match c.read_reply() {
            Ok(got) => all_ok &= got == *want,
            Err(_) => return false,
        }
    }
    if !all_ok {
        model.error_replies += 1;
        return true;
    }
    for i in group_ids(g) {
        let state = model.keys.get_mut(&i).expect("sent");
        state.durable = Some(write);
        state.pending.retain(|&(s, _)| s > seq);
    }
    model.acknowledged += group_ids(g).count() as u64;
    model.transactions += 1;
    model.scripts += u64::from(script);
    true
}

enum Conn {
    Resp(RespClient),
    Http(HttpClient),
}

impl Conn {
    fn encode(&self, key: &str, write: Write, out: &mut Vec<u8>) {
        match (self, write) {
            (Conn::Resp(_), Write::Set { seed, len }) => {
                RespClient::encode(&[&b"SET"[..], key.as_bytes(), &value_bytes(key, seed, len)], out)
            }
            (Conn::Resp(_), Write::Expiring { seed, len }) => {
                RespClient::encode(&[&b"SET"[..], key.as_bytes(), &value_bytes(key, seed, len), b"PX", b"1"], out)
            }
            (Conn::Http(_), Write::Expiring { .. }) => unreachable!("expiring writes go over RESP"),
            (Conn::Resp(_), Write::Delete) => RespClient::encode(&["DEL", key], out),
            (Conn::Http(_), Write::Set { seed, len }) => {
                HttpClient::encode("POST", &format!("/kv/{key}"), &value_bytes(key, seed, len), out)
            }
            (Conn::Http(_), Write::Delete) => HttpClient::encode("DELETE", &format!("/kv/{key}"), b"", out),
        }
    }

    fn write_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Conn::Resp(c) => c.write_raw(bytes),
            Conn::Http(c) => c.write_raw(bytes),
        }
    }

    /// Reads the next reply: whether it acknowledges the write.
    fn read_ack(&mut self) -> std::io::Result<bool> {
        use pmwire_resp::client::Value;
        match self {
            Conn::Resp(c) => Ok(matches!(c.read_reply()?, Value::Simple(_) | Value::Integer(_))),
            Conn::Http(c) => Ok(matches!(c.read_response()?.status, 200 | 204 | 404)),
        }
    }
}

/// Reads every key of `model` (pipelined) and checks it against the model; then the model's
/// durable state becomes what was read.
fn verify(ready: &ReadyFile, front: Front, model: &mut Model, report: &mut CrashReport) -> Result<()> {
    let mut ids: Vec<u64> = model.keys.keys().copied().collect();
    ids.sort_unstable();
    let found = read_all(ready, front, &ids)?;
    let mut problems = Vec::new();
    for (&i, observed) in ids.iter().zip(found) {
        let key = front.key(i);
        let state = model.keys.get_mut(&i).expect("listed");
        report.keys_checked += 1;
        let candidates = std::iter::once(state.durable).chain(state.pending.iter().map(|&(_, w)| Some(w)));
        let matched = candidates.into_iter().find(|c| matches_observed(&key, *c, observed.as_deref()));
        match matched {
            Some(now) => {
                state.durable = now;
                state.pending.clear();
            }
            None => {
                report.lost += 1;
                let expired = |w: &Write| match (*w, observed.as_deref()) {
                    (Write::Expiring { seed, len }, Some(bytes)) => bytes == value_bytes(&key, seed, len),
                    _ => false,
                };
                let served = state.durable.iter().chain(state.pending.iter().map(|(_, w)| w)).any(expired);
                report.expired_served += u64::from(served);
                let torn = observed.is_some() && !served;
                report.torn += torn as u64;
                if problems.len() < 5 {
                    let what = observed
                        .as_ref()
                        .map_or("absent".to_string(), |v| format!("{} bytes matching no write", v.len()));
                    problems
                        .push(format!("{key}: {what}; acknowledged {:?}, pending {:?}", state.durable, state.pending));
                }
                state.durable = observed.map(|v| Write::Set { seed: 0, len: v.len() as u32 });
                state.pending.clear();
            }
        }
    }
    if front == Front::Resp {
        verify_collections(ready, model, report, &mut problems)?;
    }
    if !problems.is_empty() {
        bail!("{} keys wrong after restart: {}", problems.len(), problems.join("; "));
    }
    if front == Front::Resp {
        for g in 0..TX_GROUPS {
            let states: Vec<Option<Write>> =
                group_ids(g).filter_map(|i| model.keys.get(&i).map(|s| s.durable)).collect();
            if states.windows(2).any(|w| w[0] != w[1]) {
                report.half_applied += 1;
                bail!("transaction group {g} half-applied after restart: {states:?}");
            }
        }
    }
    Ok(())
}

/// Reads every collection key of `model` back whole (pipelined) and checks it equals its
/// acknowledged contents with a prefix of its pending writes applied; then that is its
/// acknowledged contents.
fn verify_collections(
    ready: &ReadyFile,
    model: &mut Model,
    report: &mut CrashReport,
    problems: &mut Vec<String>,
) -> Result<()> {
    let mut ids: Vec<u64> = model.colls.keys().copied().collect();
    ids.sort_unstable();
    let mut out = Vec::new();
    for &c in &ids {
        for read in reads(Family::of(c), &Family::key(c)) {
            RespClient::encode(&read, &mut out);
        }
    }
    let mut conn = RespClient::connect(ready.resp_addr()).context("RESP connect")?;
    conn.write_raw(&out)?;
    for &c in &ids {
        let family = Family::of(c);
        let replies = reads(family, &Family::key(c)).iter().map(|_| conn.read_reply()).collect::<std::io::Result<Vec<_>>>()?;
        let observed = observe(family, replies).with_context(|| format!("{} read back", Family::key(c)))?;
        let state = model.colls.get_mut(&c).expect("listed");
        report.keys_checked += 1;
        report.collections_checked += 1;
        let mut candidate = state.durable.clone();
        let mut matched = candidate.canonical(family) == observed;
        for op in &state.pending {
            if matched {
                break;
            }
            candidate.apply(op);
            matched = candidate.canonical(family) == observed;
        }
        if matched {
            state.durable = candidate;
        } else {
            report.lost += 1;
            if problems.len() < 5 {
                problems.push(format!(
                    "{}: read back {} items matching no acknowledged-or-in-flight state; acknowledged {:?}, \
                     pending {:?}",
                    Family::key(c),
                    observed.len(),
                    state.durable,
                    state.pending
                ));
            }
        }
        state.pending.clear();
    }
    Ok(())
}

/// The reads that verify a key of `family`: its family's whole read; for a group key also
/// its groups (XINFO GROUPS) and its group's pending entries (XPENDING, extended form).
fn reads(family: Family, key: &str) -> Vec<Vec<&str>> {
    match family {
        Family::List => vec![vec!["LRANGE", key, "0", "-1"]],
        Family::Set => vec![vec!["SMEMBERS", key]],
        Family::Hash => vec![vec!["HGETALL", key]],
        Family::Zset => vec![vec!["ZRANGE", key, "0", "-1", "WITHSCORES"]],
        Family::Stream => vec![vec!["XRANGE", key, "-", "+"]],
        Family::Group => vec![
            vec!["XRANGE", key, "-", "+"],
            vec!["XINFO", "GROUPS", key],
            vec!["XPENDING", key, "g", "-", "+", "100000"],
        ],
    }
}

/// The replies of [`reads`] in [`Contents::canonical`]'s form.
fn observe(family: Family, mut replies: Vec<pmwire_resp::client::Value>) -> Result<Vec<Vec<u8>>> {
    use pmwire_resp::client::Value;
    if family != Family::Group {
        let reply = replies.pop().expect("one read");
        return normalize(family, flatten_read(family, reply)?);
    }
    let [range, groups, pending]: [Value; 3] = replies.try_into().map_err(|_| anyhow::anyhow!("three replies"))?;
    let mut flat = flatten_read(Family::Stream, range)?;
    let bulk = |v: &Value| match v {
        Value::Bulk(b) | Value::Simple(b) => Ok(b.clone()),
        other => bail!("not a string: {other:?}"),
    };
    // XINFO GROUPS: per group its fields as pairs; an error if the key is missing.
    let groups = match groups {
        Value::Error(_) => Vec::new(),
        Value::Array(groups) => groups,
        other => bail!("XINFO GROUPS {other:?}"),
    };
    let mut last = None;
    for group in groups {
        let pairs: Vec<(Value, Value)> = match group {
            Value::Map(pairs) => pairs,
            Value::Array(items) => {
                let mut it = items.into_iter();
                std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
            }
            other => bail!("XINFO GROUPS entry {other:?}"),
        };
        let field = |name: &[u8]| pairs.iter().find(|(k, _)| bulk(k).is_ok_and(|k| k == name)).map(|(_, v)| v);
        if field(b"name").map(bulk).transpose()?.as_deref() != Some(&b"g"[..]) {
            bail!("a group other than g");
        }
        last = Some(bulk(field(b"last-delivered-id").ok_or_else(|| anyhow::anyhow!("no last-delivered-id"))?)?);
    }
    if let Some(last) = last {
        flat.push(b"#group".to_vec());
        flat.push(last);
        // XPENDING key g - + n: [id, consumer, idle, deliveries] per entry, by ID.
        let Value::Array(entries) = pending else { bail!("XPENDING {pending:?}") };
        for e in entries {
            let Value::Array(e) = e else { bail!("XPENDING entry {e:?}") };
            let [id, consumer, _idle, Value::Integer(deliveries)] = &e[..] else { bail!("XPENDING entry {e:?}") };
            flat.extend([bulk(id)?, bulk(consumer)?, deliveries.to_string().into_bytes()]);
        }
    }
    Ok(flat)
}

/// A collection read's reply (LRANGE, SMEMBERS, HGETALL, ZRANGE WITHSCORES, XRANGE) as a flat
/// list of strings: a stream's entries as ID, field, value, ...
fn flatten_read(family: Family, reply: pmwire_resp::client::Value) -> Result<Vec<Vec<u8>>> {
    use pmwire_resp::client::Value;
    let items = match reply {
        // XRANGE: [id, [field, value]] per entry, flattened.
        Value::Array(entries) if matches!(family, Family::Stream | Family::Group) => {
            let mut items = Vec::with_capacity(3 * entries.len());
            for e in entries {
                match e {
                    Value::Array(mut pair) if pair.len() == 2 => match pair.pop() {
                        Some(Value::Array(fields)) => {
                            items.extend(pair);
                            items.extend(fields);
                        }
                        other => bail!("entry fields {other:?}"),
                    },
                    other => bail!("entry {other:?}"),
                }
            }
            items
        }
        Value::Array(items) | Value::Set(items) => items,
        Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        other => bail!("read reply {other:?}"),
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::Bulk(b) => Ok(b),
            Value::Double(d) => Ok(d.to_string().into_bytes()),
            other => bail!("element {other:?}"),
        })
        .collect()
}

/// A collection read's flat reply in [`Contents::canonical`]'s order.
fn normalize(family: Family, mut flat: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
    match family {
        Family::List | Family::Stream | Family::Group => {}
        Family::Set => flat.sort_unstable(),
        Family::Hash => {
            if flat.len() % 2 != 0 {
                bail!("HGETALL gave an odd number of items");
            }
            let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(flat.len() / 2);
            let mut it = flat.into_iter();
            while let (Some(f), Some(v)) = (it.next(), it.next()) {
                pairs.push((f, v));
            }
            pairs.sort_unstable();
            flat = pairs.into_iter().flat_map(|(f, v)| [f, v]).collect();
        }
        Family::Zset => {
            if flat.len() % 2 != 0 {
                bail!("ZRANGE WITHSCORES gave an odd number of items");
            }
            for score in flat.iter_mut().skip(1).step_by(2) {
                let parsed = std::str::from_utf8(score).ok().and_then(|s| s.parse::<f64>().ok());
                let Some(parsed) = parsed else { bail!("score {:?} does not parse", String::from_utf8_lossy(score)) };
                *score = parsed.to_string().into_bytes();
            }
        }
    }
    Ok(flat)
}

fn matches_observed(key: &str, candidate: Option<Write>, observed: Option<&[u8]>) -> bool {
    match (candidate, observed) {
        (None | Some(Write::Delete) | Some(Write::Expiring { .. }), None) => true,
        (Some(Write::Set { seed, len }), Some(bytes)) => {
            bytes.len() == len as usize && bytes == value_bytes(key, seed, len)
        }
        _ => false,
    }
}

/// GETs `ids` over `front`, pipelined.
fn read_all(ready: &ReadyFile, front: Front, ids: &[u64]) -> Result<Vec<Option<Vec<u8>>>> {
    let mut out = Vec::new();
    let mut found = Vec::with_capacity(ids.len());
    match front {
        Front::Resp => {
            let mut c = RespClient::connect(ready.resp_addr()).context("RESP connect")?;
            ids.iter().for_each(|&i| RespClient::encode(&["GET", &front.key(i)], &mut out));
            c.write_raw(&out)?;
            for _ in ids {
                use pmwire_resp::client::Value;
                found.push(match c.read_reply()? {
                    Value::Bulk(v) => Some(v),
                    Value::NilBulk => None,
                    other => bail!("GET reply {other:?}"),
                });
            }
        }
        Front::Http => {
            let mut c = HttpClient::connect(ready.http_addr()).context("HTTP connect")?;
            ids.iter().for_each(|&i| HttpClient::encode("GET", &format!("/kv/{}", front.key(i)), b"", &mut out));
            c.write_raw(&out)?;
            for _ in ids {
                let r = c.read_response()?;
                found.push(match r.status {
                    200 => Some(r.body),
                    404 => None,
                    status => bail!("GET status {status}"),
                });
            }
        }
    }
    Ok(found)
}

/// A running `pmwire kv` child.
struct KvChild {
    child: Child,
    ready: ReadyFile,
}

impl KvChild {
    /// Starts `exe kv` on `pool` and waits (≤ 30 s) for its ready file.
    fn start(exe: &Path, pool: &Path, mode: &str, tiny: bool, planted: Option<&str>) -> Result<KvChild> {
        let ready_file = pool.with_extension("ready");
        let _ = std::fs::remove_file(&ready_file);
        let mut command = Command::new(exe);
        command.arg("kv").arg("--pool").arg(pool).args(["--size", POOL_SIZE, "--mode", mode]);
        command.args(["--resp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--ready-file"]).arg(&ready_file);
        if tiny {
            command.args(["--collection-limits", "tiny"]);
        }
        if let Some(flag) = planted {
            command.arg(flag);
        }
        let mut child = command.stdout(Stdio::null()).stderr(Stdio::inherit()).spawn().context("start pmwire kv")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(ready) = ReadyFile::read(&ready_file) {
                return Ok(KvChild { child, ready });
            }
            if let Some(status) = child.try_wait()? {
                bail!("pmwire kv exited before it was ready: {status}");
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("pmwire kv wrote no ready file within 30 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL, and reap.
    fn kill9(mut self) -> Result<()> {
        self.child.kill().context("kill -9")?;
        self.child.wait().context("reap")?;
        Ok(())
    }

    /// SIGTERM; the server must stop cleanly.
    fn stop(mut self) -> Result<()> {
        // SAFETY: a plain syscall on our own child's pid, reaped below.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().context("reap")?;
        if !status.success() {
            bail!("pmwire kv did not stop cleanly on SIGTERM: {status}");
        }
        Ok(())
    }
}

impl Drop for KvChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmwire_resp::client::{parse_reply, Value};
    use pmwire_keyspace::exec::{Server, ServerConfig};
    use pmwire_keyspace::store::MemKeyspace;
    use pmwire_resp::request::{Limits, Parsed};

    /// The collection model agrees with the executor: random writes of every family (as the
    /// load makes them) go to both, and after each one the key read back as the verification
    /// reads it equals the model's contents. A model that got a write wrong (say ZPOPMIN
    /// popping the largest) would make the campaign count a correct server's keys as lost.
    #[test]
    fn the_collection_model_agrees_with_the_executor() {
        let mut server = Server::new(ServerConfig::default());
        let mut session = server.open_session();
        let mut ks = MemKeyspace::new();
        let mut parsed = Parsed::new(Limits::default());
        let mut rng = StdRng::seed_from_u64(15);
        let mut states: HashMap<u64, CollState> = HashMap::new();
        let mut seen: HashMap<String, u64> = HashMap::new();
        let mut run = |out: &[u8]| -> Value {
            let segs: [&[u8]; 1] = [out];
            let summary = parsed.parse(&segs);
            assert_eq!(summary.commands, 1);
            let mut reply: Vec<u8> = Vec::new();
            server.execute(&mut session, &mut ks, &parsed.request(&segs, 0), &mut reply);
            parse_reply(&reply).expect("a reply").expect("a whole reply").0
        };
        for _ in 0..20_000 {
            let c = rng.gen_range(0..FAMILY_KEYS * FAMILIES.len() as u64);
            let state = states.entry(c).or_default();
            let op = random_coll_op(&mut rng, c, state);
            let name = format!("{op:?}");
            *seen.entry(name.split('(').next().expect("a name").to_string()).or_insert(0u64) += 1;
            let mut out = Vec::new();
            op.encode(&Family::key(c), &mut out);
            let reply = run(&out);
            assert!(!matches!(reply, Value::Error(_)), "{op:?}: {reply:?}");
            state.durable.apply(&op);
            let family = Family::of(c);
            let key = Family::key(c);
            let replies = reads(family, &key)
                .iter()
                .map(|read| {
                    out.clear();
                    RespClient::encode(read, &mut out);
                    run(&out)
                })
                .collect();
            let observed = observe(family, replies).expect("a collection read");
            assert_eq!(state.durable.canonical(family), observed, "{key} after {op:?}");
        }
        let kinds = ["HIncrBy", "ZIncrBy", "ZPopMin", "ZRemRangeByScore", "HSet", "ZAdd", "LPop", "SRem", "XAdd", "XDel", "XTrim"];
        assert!(seen.get("XGroupCreate").is_some_and(|&n| n >= 1), "a group is created");
        for kind in kinds.into_iter().chain(["XReadGroup", "XAck"]) {
            assert!(seen.get(kind).is_some_and(|&n| n >= 50), "{kind} generated {:?} times", seen.get(kind));
        }
    }
}
