//! What the differential tests share (`redis_diff.rs` here, against the
//! executor over `MemKeyspace`; `crates/cli/tests/kv_cluster_diff.rs`,
//! against three real `pmwire kv --cluster` members): a redis-server to
//! compare with, a blocking connection to it, the seeded command generator
//! ([`gen`]), and [`Differ`], which sends each command to redis-server and
//! to a pmwire [`Target`] and compares the replies byte for byte, in RESP2
//! and RESP3 ([`run_random`] drives a seeded run).
//!
//! SPOP, SRANDMEMBER, HRANDFIELD and ZRANDMEMBER answer random members, so
//! the random test compares what is not random ([`Differ::check_random`]):
//! the reply's type, its length (the count, or the collection's size when
//! that is smaller), distinct members for SPOP and for a positive count,
//! every member taken from the collection as it was (with its value or
//! score for WITHVALUES and WITHSCORES, flat pairs in RESP2 and nested in
//! RESP3); and after SPOP, that pmwire's set lost exactly the members
//! it answered, before pmwire's set is made Redis's again so the run goes on
//! from the same state.
//!
//! Expiry in the random test: relative times are large (10^6 s, 10^9 ms
//! and more) and absolute ones far in the future or in the past (which
//! deletes at once), so no key expires while a run goes on, and SET never
//! stores a key already expired (Redis would count it in DBSIZE until its
//! sweep). Redis and pmwire read the clock a few microseconds apart, so a
//! deadline set with a relative time differs by a millisecond or so: TTL
//! and EXPIRETIME are compared within 1, PTTL and PEXPIRETIME within
//! 250 ms (-1 and -2 exactly; [`Differ::check_ttl`]); GT and LT go only
//! with absolute times, which are never within seconds of a relative one.
//! RANDOMKEY is compared by shape ([`Differ::check_randomkey`]).
//!
//! HSCAN and ZSCAN are generated with a COUNT that covers the collection
//! (Redis answers a small hash or sorted set whole, whatever the COUNT;
//! pmwire pages by COUNT, as its SSCAN does) and compared sorted.

#![allow(dead_code)]

pub mod gen;

use pmwire_resp::client::{encode_request, parse_reply, reply_len, Value};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Redis {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start_redis() -> Redis {
    start_redis_with(&[])
}

pub fn start_redis_with(extra: &[&str]) -> Redis {
    let found = Command::new("redis-server").arg("--version").stdout(Stdio::null()).status().is_ok();
    assert!(found, "redis-server is not installed, and the differential tests need it (bash scripts/setup)");
    for _ in 0..5 {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--dir", dir.path().to_str().expect("utf8 path")])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let mut redis = Redis { child, port, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(5);
        let password = extra.windows(2).find(|w| w[0] == "--requirepass").map(|w| w[1]);
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                if serves_as(port, redis.child.id(), password) {
                    return redis;
                }
                // Another test's server took the port first; ours exits.
                break;
            }
            if let Ok(Some(_)) = redis.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("redis-server did not start");
}

/// Whether the redis-server at `port` is process `pid`. A port found free
/// may be taken by another test's server before ours binds it: ours then
/// exits, and a connect reaches the other one, whose end later resets
/// this test's connections.
fn serves_as(port: u16, pid: u32, password: Option<&str>) -> bool {
    let mut conn = Conn::new(port);
    let mut request = Vec::new();
    if let Some(p) = password {
        encode_request(&["AUTH", p], &mut request);
        conn.call(&request);
        request.clear();
    }
    encode_request(&["INFO", "server"], &mut request);
    let info = String::from_utf8_lossy(&conn.call(&request)).into_owned();
    info.lines().any(|l| l == format!("process_id:{pid}"))
}

pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn new(port: u16) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        Conn { stream, buf: Vec::new() }
    }

    pub fn call(&mut self, request: &[u8]) -> Vec<u8> {
        self.stream.write_all(request).expect("write");
        loop {
            if let Some((n, _)) = reply_len(&self.buf).expect("redis reply parses") {
                return self.buf.drain(..n).collect();
            }
            let mut chunk = [0u8; 65536];
            let n = self.stream.read(&mut chunk).expect("read");
            assert!(n > 0, "redis closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Everything until the server closes the connection.
    pub fn rest(&mut self) -> Vec<u8> {
        let mut chunk = [0u8; 65536];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return std::mem::take(&mut self.buf),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => panic!("redis did not close: {e}"),
            }
        }
    }
}

pub fn client_id(reply: &[u8]) -> u64 {
    String::from_utf8_lossy(&reply[1..reply.len() - 2]).parse().expect("client id")
}

pub fn sorted(v: Value) -> Value {
    match v {
        Value::Array(items) => {
            let mut items: Vec<Value> = items.into_iter().map(sorted).collect();
            items.sort_by_key(|a| format!("{a:?}"));
            Value::Array(items)
        }
        Value::Map(mut pairs) => {
            pairs.sort_by_key(|a| format!("{a:?}"));
            Value::Map(pairs)
        }
        Value::Set(items) => {
            let mut items: Vec<Value> = items.into_iter().map(sorted).collect();
            items.sort_by_key(|a| format!("{a:?}"));
            Value::Set(items)
        }
        other => other,
    }
}

pub fn redis_version(port: u16) -> String {
    let mut admin = Conn::new(port);
    let mut req = Vec::new();
    encode_request(&[&b"INFO"[..], b"server"], &mut req);
    let reply = admin.call(&req);
    let text = String::from_utf8_lossy(&reply).into_owned();
    let v = text.lines().find_map(|l| l.strip_prefix("redis_version:")).expect("version");
    v.trim().to_string()
}

/// The pmwire side of a comparison: the executor in this process, or a
/// connection to a server or a cluster's members.
pub trait Target {
    /// Runs one encoded command; its reply and whether the connection is
    /// to close.
    fn call(&mut self, request: &[u8]) -> (Vec<u8>, bool);
}

/// One connection to redis-server and one pmwire [`Target`], fed the same
/// commands.
pub struct Differ<T> {
    pub conn: Conn,
    pub target: T,
    req: Vec<u8>,
    /// SPOP / SRANDMEMBER replies that differed and were compared by shape.
    pub by_shape: u64,
    /// TTL-family replies that differed and were compared within a tolerance.
    pub loose: u64,
    /// MULTI commands sent.
    pub multis: u64,
    /// HELLO's `id` is compared as equal when the target cannot take
    /// redis-server's client id (a real server numbers its own connections).
    pub ids_differ: bool,
    /// Whether redis-server's last reply was other than an error.
    pub last_ok: bool,
    /// The length of redis-server's last reply.
    pub last_len: usize,
    /// DUMP replies that differed in bytes where Redis's depend on more
    /// than the content, and were compared by what they restore.
    pub dumps_by_content: u64,
    /// DUMP replies compared byte for byte and equal.
    pub dumps_equal: u64,
}

impl<T: Target> Differ<T> {
    /// Compares `conn` (to redis-server) with `target`.
    pub fn new(conn: Conn, target: T) -> Differ<T> {
        Differ { conn, target, req: Vec::new(), by_shape: 0, loose: 0, multis: 0, ids_differ: false, last_ok: false, last_len: 0, dumps_by_content: 0, dumps_equal: 0 }
    }

    /// Runs `args` on redis-server only.
    pub fn remote<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Vec<u8> {
        self.req.clear();
        encode_request(args, &mut self.req);
        let reply = self.conn.call(&self.req);
        self.last_ok = !reply.starts_with(b"-");
        self.last_len = reply.len();
        reply
    }

    /// Runs `args` on pmwire only: the reply, and whether the connection is to close.
    pub fn local<A: AsRef<[u8]>>(&mut self, args: &[A]) -> (Vec<u8>, bool) {
        self.req.clear();
        encode_request(args, &mut self.req);
        self.target.call(&self.req)
    }

    /// Runs a generated command on both, compared as its kind asks.
    pub fn check_any(&mut self, cmd: &gen::Cmd) -> Result<bool, (Vec<u8>, Vec<u8>)> {
        match cmd.args[0].as_slice() {
            _ if cmd.random => self.check_random(&cmd.args),
            b"TTL" | b"EXPIRETIME" => self.check_ttl(&cmd.args, 1),
            b"PTTL" | b"PEXPIRETIME" => self.check_ttl(&cmd.args, 250),
            b"RANDOMKEY" => self.check_randomkey(&cmd.args),
            b"DUMP" => self.check_dump(&cmd.args),
            _ if gen::dump_source(&cmd.args).is_some() => self.check_restore(&cmd.args),
            _ if timed(&cmd.args) => self.check_timed(&cmd.args),
            _ => self.check(&cmd.args, cmd.sort),
        }
    }

    /// Runs `args` on both; `Err` with both replies if they differ (with
    /// arrays and maps sorted first when `sort`); `Ok(true)` if the
    /// connection is to close.
    pub fn check<A: AsRef<[u8]>>(&mut self, args: &[A], sort: bool) -> Result<bool, (Vec<u8>, Vec<u8>)> {
        self.multis += u64::from(args[0].as_ref().eq_ignore_ascii_case(b"multi"));
        let want = self.remote(args);
        let (got, close) = self.local(args);
        let mask = self.ids_differ && args[0].as_ref().eq_ignore_ascii_case(b"hello");
        let same = if sort || mask {
            let norm = |v: Value| {
                let v = if mask { without_id(v) } else { v };
                if sort { sorted(v) } else { v }
            };
            let w = parse_reply(&want).expect("parse").map(|(v, _)| norm(v));
            let g = parse_reply(&got).ok().flatten().map(|(v, _)| norm(v));
            w == g
        } else {
            want == got
        };
        if same { Ok(close) } else { Err((want, got)) }
    }
}

/// What a DUMP payload restores, in a form two servers' payloads of the
/// same value compare equal in (a set's members and a hash's pairs in byte
/// order: Redis writes a hashtable in its dict's order; a sorted set's
/// entries in order; a stream's times zeroed); `None` if the
/// payload does not decode.
fn restored(payload: &[u8]) -> Option<pmwire_keyspace::rdb::Value> {
    use pmwire_keyspace::rdb::Value as V;
    Some(match pmwire_keyspace::rdb::parse(payload).ok()? {
        V::Set(mut m) => {
            m.sort();
            V::Set(m)
        }
        V::Hash(mut p) => {
            p.sort();
            V::Hash(p)
        }
        // A skiplist is written greatest first, a listpack least first.
        V::ZSet(mut e) => {
            e.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
            V::ZSet(e)
        }
        // Delivery and seen times are each server's clock (as XPENDING's
        // idle times, masked the same way).
        V::Stream(mut s) => {
            for g in &mut s.groups {
                g.pel.iter_mut().for_each(|p| p.delivery_ms = 0);
                g.consumers.iter_mut().for_each(|c| c.seen_ms = 0);
            }
            V::Stream(s)
        }
        other => other,
    })
}

/// Whether DUMP's bytes for a payload of type byte `ours` (pmwire's) and
/// `theirs` (Redis's) may differ with the same content, by design
/// (`pmwire_keyspace::rdb`'s list): a hashtable set or hash (dict order, or
/// Redis still holding a hashtable a shrunk collection once needed), a
/// listpack hash pmwire holds chunked (its fields in bucket order: the
/// random test chunks past 2 members), a stream (node bytes), a list (nodes
/// cut by its history).
fn dump_may_differ(ours: u8, theirs: u8) -> bool {
    use pmwire_keyspace::rdb::types::*;
    matches!(theirs, SET | HASH | HASH_LISTPACK | ZSET_2 | STREAM_LISTPACKS_2 | LIST_QUICKLIST_2) && matches!(ours, SET | SET_INTSET | HASH | HASH_LISTPACK | ZSET_2 | ZSET_LISTPACK | STREAM_LISTPACKS_2 | LIST_QUICKLIST_2)
}

/// A bulk reply's bytes.
fn bulk_of(reply: &[u8]) -> Option<Vec<u8>> {
    match parse_reply(reply).ok().flatten()? {
        (Value::Bulk(b), _) => Some(b),
        _ => None,
    }
}

impl<T: Target> Differ<T> {
    /// DUMP: byte for byte, or, where the bytes may differ by design
    /// ([`dump_may_differ`]), by what the payloads restore.
    pub fn check_dump(&mut self, args: &[Vec<u8>]) -> Result<bool, (Vec<u8>, Vec<u8>)> {
        let want = self.remote(args);
        let (got, close) = self.local(args);
        if want == got {
            self.dumps_equal += u64::from(want.starts_with(b"$") && !want.starts_with(b"$-1"));
            return Ok(close);
        }
        if let (Some(w), Some(g)) = (bulk_of(&want), bulk_of(&got)) {
            let same = restored(&w).is_some() && restored(&w) == restored(&g);
            if same && dump_may_differ(g[0], w[0]) {
                self.dumps_by_content += 1;
                return Ok(close);
            }
        }
        Err((want, got))
    }

    /// `RESTORE key ttl <DUMP of source> ...`: each server restores its own
    /// DUMP of the source key (a missing one: an empty payload).
    pub fn check_restore(&mut self, args: &[Vec<u8>]) -> Result<bool, (Vec<u8>, Vec<u8>)> {
        let source = gen::dump_source(args).expect("a RESTORE of a DUMP").to_vec();
        let dump: [&[u8]; 2] = [b"DUMP", &source];
        let theirs = bulk_of(&self.remote(&dump)).unwrap_or_default();
        let ours = bulk_of(&self.local(&dump).0).unwrap_or_default();
        let with = |payload: Vec<u8>| {
            let mut a = args.to_vec();
            a[3] = payload;
            a
        };
        let want = self.remote(&with(theirs));
        let (got, close) = self.local(&with(ours));
        if want == got { Ok(close) } else { Err((want, got)) }
    }
}

/// A HELLO reply with its `id` field's value set to 0.
fn without_id(v: Value) -> Value {
    let is_id = |k: &Value| matches!(k, Value::Bulk(b) if b == b"id");
    match v {
        Value::Map(mut pairs) => {
            for (k, v) in pairs.iter_mut() {
                if is_id(k) {
                    *v = Value::Integer(0);
                }
            }
            Value::Map(pairs)
        }
        Value::Array(mut items) => {
            for i in (0..items.len().saturating_sub(1)).step_by(2) {
                if is_id(&items[i]) {
                    items[i + 1] = Value::Integer(0);
                }
            }
            Value::Array(items)
        }
        other => other,
    }
}


/// The bulk strings of an array or set reply (`None` for anything else).
pub fn members_of(reply: &[u8]) -> Option<Vec<Vec<u8>>> {
    let (Value::Array(items) | Value::Set(items), _) = parse_reply(reply).ok()?? else { return None };
    items.into_iter().map(|v| if let Value::Bulk(b) = v { Some(b) } else { None }).collect()
}

/// The elements of an array, set or map reply, each written as text so
/// they compare: a bulk string, or with `pairs` an element and its value
/// (flat pairs in RESP2, `[element, value]` arrays in RESP3, a map's
/// entries); `None` for any other shape.
pub fn elements_of(reply: &[u8], pairs: bool) -> Option<Vec<String>> {
    let pair = |a: &Value, b: &Value| matches!(a, Value::Bulk(_)).then(|| format!("{a:?} {b:?}"));
    match parse_reply(reply).ok()??.0 {
        Value::Map(entries) if pairs => entries.iter().map(|(a, b)| pair(a, b)).collect(),
        Value::Array(items) | Value::Set(items) => {
            if !pairs {
                return items.iter().map(|v| matches!(v, Value::Bulk(_)).then(|| format!("{v:?}"))).collect();
            }
            if items.iter().all(|v| matches!(v, Value::Array(p) if p.len() == 2)) {
                return items
                    .iter()
                    .map(|v| match v {
                        Value::Array(p) => pair(&p[0], &p[1]),
                        _ => None,
                    })
                    .collect();
            }
            if items.len() % 2 != 0 {
                return None;
            }
            items.chunks(2).map(|c| pair(&c[0], &c[1])).collect()
        }
        _ => None,
    }
}

/// Whether `reply` is a valid SPOP / SRANDMEMBER / HRANDFIELD /
/// ZRANDMEMBER answer for a collection that held `before` (sorted, as
/// [`elements_of`] writes them: with their values for WITHVALUES and
/// WITHSCORES): the reply's shape and membership rules.
pub fn random_reply_ok(args: &[Vec<u8>], before: &[String], reply: &[u8]) -> Result<(), String> {
    let spop = args[0].eq_ignore_ascii_case(b"SPOP");
    let Some(count) = args.get(2) else {
        let Ok(Some((m @ Value::Bulk(_), _))) = parse_reply(reply) else { return Err("not a bulk string".into()) };
        let m = format!("{m:?}");
        return if before.binary_search(&m).is_ok() { Ok(()) } else { Err("a member not in the set".into()) };
    };
    let count: i64 = std::str::from_utf8(count).ok().and_then(|c| c.parse().ok()).ok_or("count not a number")?;
    let members = elements_of(reply, args.len() == 4).ok_or("not an array or set of bulk strings (or pairs)")?;
    let want_len = if count < 0 { count.unsigned_abs() } else { (count as u64).min(before.len() as u64) };
    if members.len() as u64 != want_len {
        return Err(format!("{} members, expected {want_len}", members.len()));
    }
    if members.iter().any(|m| before.binary_search(m).is_err()) {
        return Err("a member not in the set".into());
    }
    let mut distinct = members.clone();
    distinct.sort();
    distinct.dedup();
    if (spop || count >= 0) && distinct.len() != members.len() {
        return Err("a member repeated".into());
    }
    Ok(())
}

impl<T: Target> Differ<T> {
    /// SPOP SRANDMEMBER HRANDFIELD ZRANDMEMBER (the rules are in the
    /// module's header). Replies equal byte for byte (errors, nulls, empty
    /// answers) pass at once.
    pub fn check_random(&mut self, args: &[Vec<u8>]) -> Result<bool, (Vec<u8>, Vec<u8>)> {
        if args.len() < 2 {
            return self.check(args, false);
        }
        let key = args[1].clone();
        let pairs = args.len() == 4;
        let name = args[0].to_ascii_uppercase();
        let listing: Vec<&[u8]> = match (name.as_slice(), pairs) {
            (b"HRANDFIELD", false) => vec![b"HKEYS", &key],
            (b"HRANDFIELD", true) => vec![b"HGETALL", &key],
            (b"ZRANDMEMBER", false) => vec![b"ZRANGE", &key, b"0", b"-1"],
            (b"ZRANDMEMBER", true) => vec![b"ZRANGE", &key, b"0", b"-1", b"WITHSCORES"],
            _ => vec![b"SMEMBERS", &key],
        };
        let listed = self.remote(&listing);
        let mut before = elements_of(&listed, pairs).unwrap_or_default();
        before.sort();
        let want = self.remote(args);
        let (got, _) = self.local(args);
        if want == got {
            return Ok(false);
        }
        self.by_shape += 1;
        let fail = |why: String, got: &[u8]| Err((want.clone(), format!("{why}: {}", String::from_utf8_lossy(got)).into_bytes()));
        if want.first() != got.first() {
            return fail("another reply type".into(), &got);
        }
        if let Err(why) = random_reply_ok(args, &before, &want) {
            return fail(format!("the checker refuses redis's reply ({why})"), &got);
        }
        if let Err(why) = random_reply_ok(args, &before, &got) {
            return fail(why, &got);
        }
        if name == b"SPOP" {
            let mut raw = members_of(&listed).unwrap_or_default();
            raw.sort();
            return self.after_spop(&key, &raw, &got).map(|()| false);
        }
        Ok(false)
    }

    /// After SPOP: pmwire's set is `before` less what pmwire answered; then
    /// it is made what Redis's set is now.
    fn after_spop(&mut self, key: &[u8], before: &[Vec<u8>], got: &[u8]) -> Result<(), (Vec<u8>, Vec<u8>)> {
        let popped = match parse_reply(got) {
            Ok(Some((Value::Bulk(m), _))) => vec![m],
            _ => members_of(got).unwrap_or_default(),
        };
        let expected: Vec<Vec<u8>> = before.iter().filter(|m| !popped.contains(m)).cloned().collect();
        let mut now = members_of(&self.local(&[&b"SMEMBERS"[..], key]).0).unwrap_or_default();
        now.sort();
        if now != expected {
            return Err((format!("{expected:?}").into_bytes(), format!("set after SPOP: {now:?}").into_bytes()));
        }
        let mut theirs = members_of(&self.remote(&[&b"SMEMBERS"[..], key])).unwrap_or_default();
        let deadline = self.remote(&[&b"PEXPIRETIME"[..], key]);
        self.local(&[&b"DEL"[..], key]);
        if !theirs.is_empty() {
            theirs.insert(0, key.to_vec());
            theirs.insert(0, b"SADD".to_vec());
            self.local(&theirs);
            // And its deadline (Redis's, to the millisecond).
            if let Ok(Some((Value::Integer(ms), _))) = parse_reply(&deadline) {
                if ms > 0 {
                    self.local(&[&b"PEXPIREAT"[..], key, ms.to_string().as_bytes()]);
                }
            }
        }
        Ok(())
    }
}

impl<T: Target> Differ<T> {
    /// TTL PTTL EXPIRETIME PEXPIRETIME: equal, or both non-negative
    /// integers at most `tolerance` apart (see the module's header).
    pub fn check_ttl(&mut self, args: &[Vec<u8>], tolerance: i64) -> Result<bool, (Vec<u8>, Vec<u8>)> {
        let int = |r: &[u8]| match parse_reply(r) {
            Ok(Some((Value::Integer(n), _))) => Some(n),
            _ => None,
        };
        self.check_loosely(args, |want, got| match (int(want), int(got)) {
            (Some(w), Some(g)) => w >= 0 && g >= 0 && (w - g).abs() <= tolerance,
            _ => false,
        })
    }

    /// Runs `args` on both: equal replies pass, and so do unequal ones that
    /// `close(want, got)` accepts (counted in `loose`); `Ok(false)`, or
    /// `Err` with both replies.
    fn check_loosely(&mut self, args: &[Vec<u8>], close: impl Fn(&[u8], &[u8]) -> bool) -> Result<bool, (Vec<u8>, Vec<u8>)> {
        let want = self.remote(args);
        let (got, _) = self.local(args);
        if want == got {
            return Ok(false);
        }
        if close(&want, &got) {
            self.loose += 1;
            return Ok(false);
        }
        Err((want, got))
    }

    /// An ID the server took from its clock (`XADD key * ...`): the two
    /// servers read the clock apart, so the millisecond parts may differ
    /// by up to `tolerance`; the sequence parts must match.
    pub fn check_clock_id(&mut self, args: &[Vec<u8>], tolerance: u64) -> Result<bool, (Vec<u8>, Vec<u8>)> {
        let id = |r: &[u8]| match parse_reply(r) {
            Ok(Some((Value::Bulk(b), _))) => {
                let s = std::str::from_utf8(&b).ok()?.to_owned();
                let (ms, seq) = s.split_once('-')?;
                Some((ms.parse::<u64>().ok()?, seq.parse::<u64>().ok()?))
            }
            _ => None,
        };
        self.check_loosely(args, |want, got| match (id(want), id(got)) {
            (Some((wm, ws)), Some((gm, gs))) => ws == gs && wm.abs_diff(gm) <= tolerance,
            _ => false,
        })
    }

    /// RANDOMKEY: nil on both sides, or a key on both sides, pmwire's
    /// being a key both hold.
    pub fn check_randomkey(&mut self, args: &[Vec<u8>]) -> Result<bool, (Vec<u8>, Vec<u8>)> {
        let want = self.remote(args);
        let (got, _) = self.local(args);
        if want == got {
            return Ok(false);
        }
        let Ok(Some((Value::Bulk(key), _))) = parse_reply(&got) else { return Err((want, got)) };
        if !matches!(parse_reply(&want), Ok(Some((Value::Bulk(_), _)))) {
            return Err((want, got));
        }
        let exists = [&b"EXISTS"[..], &key];
        if self.remote(&exists) != b":1\r\n" || self.local(&exists).0 != b":1\r\n" {
            return Err((want, format!("a key not in both keyspaces: {}", String::from_utf8_lossy(&got)).into_bytes()));
        }
        Ok(false)
    }
}

/// `XADD` with an ID from the server's clock (`*`). (Queued in a
/// transaction, its ID would show in EXEC's reply: the corpus has none.)
pub fn clock_id(args: &[Vec<u8>]) -> bool {
    args[0].eq_ignore_ascii_case(b"xadd") && args.iter().any(|a| a.as_slice() == b"*")
}

/// Replies that show an idle time (XPENDING's extended form, XINFO
/// CONSUMERS): compared with those times set to 0 on both sides, never
/// queued in a transaction.
pub fn timed(args: &[Vec<u8>]) -> bool {
    let name = args[0].to_ascii_uppercase();
    (name == b"XPENDING" && args.len() >= 6) || (name == b"XINFO" && args.get(1).is_some_and(|s| s.eq_ignore_ascii_case(b"consumers")))
}

/// `v` with every idle time an XPENDING or XINFO CONSUMERS reply shows set
/// to 0: the third of each four-element array, the value after `idle`.
fn without_idle(v: Value) -> Value {
    match v {
        Value::Array(items) if items.len() == 4 && matches!(items[2], Value::Integer(_)) && matches!(items[0], Value::Bulk(_)) => {
            let mut items = items;
            items[2] = Value::Integer(0);
            Value::Array(items)
        }
        Value::Array(items) => {
            let mut items: Vec<Value> = items.into_iter().map(without_idle).collect();
            for i in 0..items.len().saturating_sub(1) {
                if matches!(&items[i], Value::Bulk(b) if b == b"idle") {
                    items[i + 1] = Value::Integer(0);
                }
            }
            Value::Array(items)
        }
        Value::Map(pairs) => Value::Map(
            pairs
                .into_iter()
                .map(|(k, v)| if matches!(&k, Value::Bulk(b) if b == b"idle") { (k, Value::Integer(0)) } else { (k, without_idle(v)) })
                .collect(),
        ),
        other => other,
    }
}

impl<T: Target> Differ<T> {
    /// XPENDING (extended) and XINFO CONSUMERS: equal once their idle times
    /// are masked ([`without_idle`]).
    pub fn check_timed(&mut self, args: &[Vec<u8>]) -> Result<bool, (Vec<u8>, Vec<u8>)> {
        let masked = |r: &[u8]| parse_reply(r).ok().flatten().map(|(v, _)| without_idle(v));
        self.check_loosely(args, |want, got| {
            let w = masked(want);
            w.is_some() && w == masked(got)
        })
    }
}

/// TTL-family replies: the two servers read the clock apart, so these are
/// compared within a tolerance, never queued in a transaction.
pub fn loose_compared(args: &[Vec<u8>]) -> bool {
    matches!(args[0].as_slice(), b"TTL" | b"PTTL" | b"EXPIRETIME" | b"PEXPIRETIME")
}

/// `name` from the environment as a number, else `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The seed of a random run: `PMWIRE_DIFF_SEED`, else the clock.
pub fn seed() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos() as u64;
    env_u64("PMWIRE_DIFF_SEED", now)
}

/// Runs `count` commands from `g` through `d`, switching between RESP2 and
/// RESP3 every 2,000, with now and then a transaction (commands whose
/// replies compare byte for byte are queued, their replies then come in
/// EXEC's array; it ends with EXEC, or DISCARD). `before(d, i, in_multi)`
/// runs before command `i`. Returns one text per difference (at most 20).
pub fn run_random<T: Target>(
    d: &mut Differ<T>,
    g: &mut gen::Gen,
    count: u64,
    mut before: impl FnMut(&mut Differ<T>, u64, bool),
) -> Vec<String> {
    let mut failures = Vec::new();
    let mut ttl_family = 0u64;
    let mut in_multi = false;
    // Stream commands sent, and how many answered other than an error.
    let mut streams: std::collections::BTreeMap<String, (u64, u64)> = std::collections::BTreeMap::new();
    // GEO commands sent, answered other than an error, and answered more
    // than an empty array, a null or a small integer (points found).
    let mut geo: std::collections::BTreeMap<String, (u64, u64, u64)> = std::collections::BTreeMap::new();
    for i in 0..count {
        if i % 2_000 == 0 && !in_multi {
            let proto: &[u8] = if (i / 2_000) % 2 == 0 { b"2" } else { b"3" };
            if let Err((want, got)) = d.check(&[&b"HELLO"[..], proto], true) {
                panic!("HELLO differs:\n    redis:  {:?}\n    pmwire: {:?}", String::from_utf8_lossy(&want), String::from_utf8_lossy(&got));
            }
        }
        let cmd = g.next();
        before(d, i, in_multi);
        let name = String::from_utf8_lossy(&cmd.args[0]).into_owned();
        let tally = name.starts_with('X').then(|| streams.entry(name).or_default());
        ttl_family += u64::from(loose_compared(&cmd.args));
        // DUMP is compared apart (bytes, or content where they may differ),
        // and a RESTORE of a DUMP runs a DUMP first: neither is queued.
        let apart = matches!(cmd.args[0].as_slice(), b"RANDOMKEY" | b"DUMP") || gen::dump_source(&cmd.args).is_some();
        let plain = !cmd.random && !cmd.sort && !loose_compared(&cmd.args) && !timed(&cmd.args) && !apart;
        let result = match (plain, in_multi) {
            (true, false) if g.chance(0.02) => {
                in_multi = true;
                d.check(&[&b"MULTI"[..]], false).and_then(|_| d.check(&cmd.args, false))
            }
            (true, true) => d.check(&cmd.args, false),
            (false, true) => {
                in_multi = false;
                let end: &[u8] = if g.chance(0.1) { b"DISCARD" } else { b"EXEC" };
                d.check(&[end], false).and_then(|_| d.check_any(&cmd))
            }
            (_, false) => d.check_any(&cmd),
        };
        if let Some(t) = tally {
            t.0 += 1;
            t.1 += u64::from(d.last_ok);
        }
        if cmd.args[0].starts_with(b"GEO") {
            let t = geo.entry(String::from_utf8_lossy(&cmd.args[0]).into_owned()).or_default();
            t.0 += 1;
            t.1 += u64::from(d.last_ok);
            t.2 += u64::from(d.last_ok && d.last_len > 8);
        }
        if let Err((want, got)) = result {
            let shown: Vec<String> = cmd.args.iter().map(|a| format!("{:?}", String::from_utf8_lossy(a))).collect();
            failures.push(format!(
                "command {i}: {}\n    redis:  {:?}\n    pmwire: {:?}",
                shown.join(" "),
                String::from_utf8_lossy(&want),
                String::from_utf8_lossy(&got)
            ));
            if failures.len() >= 20 {
                break;
            }
        }
    }
    println!(
        "{count} commands; {} SPOP/SRANDMEMBER/HRANDFIELD/ZRANDMEMBER replies differed from Redis's and were checked \
         by shape",
        d.by_shape
    );
    println!("{} of {ttl_family} TTL/PTTL/EXPIRETIME/PEXPIRETIME replies differed within the tolerance", d.loose);
    println!("{} transactions (MULTI ... EXEC or DISCARD)", d.multis);
    println!("DUMP: {} payloads equal byte for byte, {} compared by content (a hashtable, a stream, a list's nodes)", d.dumps_equal, d.dumps_by_content);
    let shown: Vec<String> = streams.iter().map(|(n, (all, ok))| format!("{n} {all} ({ok} not errors)")).collect();
    println!("stream commands: {}", shown.join(", "));
    let shown: Vec<String> = geo.iter().map(|(n, (all, ok, rich))| format!("{n} {all} ({ok} not errors, {rich} longer than 8 bytes)")).collect();
    println!("geo commands: {}", shown.join(", "));
    failures
}
