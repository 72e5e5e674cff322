//! Differential tests: the same command scripts go to a real `redis-server`
//! (over TCP) and to the executor over `MemKeyspace`; replies must be equal
//! byte for byte, in RESP2 and RESP3. They fail, saying so, when
//! `redis-server` is not installed (`bash scripts/setup` installs it).
//!
//! Script format (`tests/corpus/*.txt`): one command per line, split as an
//! inline command (quotes and `\xHH` escapes work); `#` starts a comment; a
//! line starting with `~ ` compares its reply with arrays and sets sorted
//! (the orders of KEYS, SCAN, CONFIG GET and of set members are unspecified
//! in Redis; pmwire answers set members in byte order, Redis in its hash
//! table's order, or numerically for a set of integers).
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

use pmwire_resp::client::{encode_request, parse_reply, reply_len, Value};
use pmwire_keyspace::exec::{Flow, Server, ServerConfig};
use pmwire_resp::inline::{split_args, Token};
use pmwire_keyspace::store::MemKeyspace;
use pmwire_resp::request::{Limits, Parsed};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_redis() -> Redis {
    start_redis_with(&[])
}

fn start_redis_with(extra: &[&str]) -> Redis {
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
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return redis;
            }
            if let Ok(Some(_)) = redis.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("redis-server did not start");
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn new(port: u16) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        Conn { stream, buf: Vec::new() }
    }

    fn call(&mut self, request: &[u8]) -> Vec<u8> {
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
    fn rest(&mut self) -> Vec<u8> {
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

fn client_id(reply: &[u8]) -> u64 {
    String::from_utf8_lossy(&reply[1..reply.len() - 2]).parse().expect("client id")
}

fn args_of(line: &str) -> Vec<Vec<u8>> {
    let mut tokens = Vec::new();
    assert!(split_args(line.as_bytes(), &mut tokens), "bad script line {line}");
    tokens
        .into_iter()
        .map(|t| match t {
            Token::Verbatim(r) => line.as_bytes()[r].to_vec(),
            Token::Unescaped(v) => v,
        })
        .collect()
}

fn sorted(v: Value) -> Value {
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

fn redis_version(port: u16) -> String {
    let mut admin = Conn::new(port);
    let mut req = Vec::new();
    encode_request(&[&b"INFO"[..], b"server"], &mut req);
    let reply = admin.call(&req);
    let text = String::from_utf8_lossy(&reply).into_owned();
    let v = text.lines().find_map(|l| l.strip_prefix("redis_version:")).expect("version");
    v.trim().to_string()
}

/// One connection to redis-server and one pmwire session over a
/// `MemKeyspace`, fed the same commands.
struct Differ {
    conn: Conn,
    server: Server,
    session: pmwire_keyspace::exec::Session,
    ks: MemKeyspace,
    parsed: Parsed,
    req: Vec<u8>,
    /// SPOP / SRANDMEMBER replies that differed and were compared by shape.
    by_shape: u64,
    /// TTL-family replies that differed and were compared within a tolerance.
    loose: u64,
    /// MULTI commands sent.
    multis: u64,
    /// Blocking pops that blocked (and timed out).
    timeouts: u64,
}

impl Differ {
    /// Flushes redis and opens a session with the same client id.
    fn new(redis: &Redis, version: &str) -> Differ {
        Differ::with_password(redis, version, None)
    }

    /// The same against a redis-server started with `--requirepass`
    /// `password`: the set-up connection authenticates, the compared one
    /// does not.
    fn with_password(redis: &Redis, version: &str, password: Option<&str>) -> Differ {
        let mut admin = Conn::new(redis.port);
        let mut req = Vec::new();
        if let Some(p) = password {
            encode_request(&[&b"AUTH"[..], p.as_bytes()], &mut req);
            assert_eq!(admin.call(&req), b"+OK\r\n");
            req.clear();
        }
        encode_request(&[&b"FLUSHALL"[..]], &mut req);
        admin.call(&req);
        req.clear();
        let id = match password {
            None => {
                let mut conn = Conn::new(redis.port);
                encode_request(&[&b"CLIENT"[..], b"ID"], &mut req);
                let id = client_id(&conn.call(&req));
                req.clear();
                (conn, id)
            }
            Some(_) => {
                // CLIENT ID needs authentication: the admin connection's
                // id, plus one for the next connection (ids count up; the
                // compared HELLO replies show a wrong guess).
                encode_request(&[&b"CLIENT"[..], b"ID"], &mut req);
                let admin_id = client_id(&admin.call(&req));
                req.clear();
                (Conn::new(redis.port), admin_id + 1)
            }
        };
        let (conn, id) = id;
        let requirepass = password.map(|p| p.as_bytes().to_vec());
        let config = ServerConfig { version: version.to_string(), requirepass, ..ServerConfig::default() };
        let mut server = Server::new(config);
        let session = server.open_session_with_id(id);
        let (ks, parsed) = (MemKeyspace::new(), Parsed::new(Limits::default()));
        Differ { conn, server, session, ks, parsed, req, by_shape: 0, loose: 0, multis: 0, timeouts: 0 }
    }

    /// Runs `args` on redis-server only.
    fn remote<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Vec<u8> {
        self.req.clear();
        encode_request(args, &mut self.req);
        self.conn.call(&self.req)
    }

    /// Runs `args` on pmwire only.
    fn local<A: AsRef<[u8]>>(&mut self, args: &[A]) -> (Vec<u8>, Flow) {
        self.req.clear();
        encode_request(args, &mut self.req);
        let segs: [&[u8]; 1] = [&self.req];
        let summary = self.parsed.parse(&segs);
        assert_eq!(summary.consumed, self.req.len());
        assert_eq!(summary.commands, 1);
        let mut got: Vec<u8> = Vec::new();
        let mut flow = self.server.execute(&mut self.session, &mut self.ks, &self.parsed.request(&segs, 0), &mut got);
        if flow == Flow::Block {
            // One connection: nobody can push, so the wait ends by its time-out.
            assert!(got.is_empty(), "a blocked command wrote a reply");
            self.server.unblock(&mut self.session);
            self.timeouts += 1;
            got.extend_from_slice(Server::timed_out_reply(&self.session));
            flow = Flow::Continue;
        }
        (got, flow)
    }

    /// Runs a generated command on both, compared as its kind asks.
    fn check_any(&mut self, cmd: &gen::Cmd) -> Result<bool, (Vec<u8>, Vec<u8>)> {
        match cmd.args[0].as_slice() {
            _ if cmd.random => self.check_random(&cmd.args),
            b"TTL" | b"EXPIRETIME" => self.check_ttl(&cmd.args, 1),
            b"PTTL" | b"PEXPIRETIME" => self.check_ttl(&cmd.args, 250),
            b"RANDOMKEY" => self.check_randomkey(&cmd.args),
            _ => self.check(&cmd.args, cmd.sort),
        }
    }

    /// Runs `args` on both; `Err` with both replies if they differ (with
    /// arrays and maps sorted first when `sort`); `Ok(true)` if the
    /// connection is to close.
    fn check<A: AsRef<[u8]>>(&mut self, args: &[A], sort: bool) -> Result<bool, (Vec<u8>, Vec<u8>)> {
        self.multis += u64::from(args[0].as_ref().eq_ignore_ascii_case(b"multi"));
        let want = self.remote(args);
        let (got, flow) = self.local(args);
        let same = if sort {
            let w = parse_reply(&want).expect("parse").map(|(v, _)| sorted(v));
            let g = parse_reply(&got).ok().flatten().map(|(v, _)| sorted(v));
            w == g
        } else {
            want == got
        };
        if same { Ok(flow == Flow::Close) } else { Err((want, got)) }
    }
}

/// The bulk strings of an array or set reply (`None` for anything else).
fn members_of(reply: &[u8]) -> Option<Vec<Vec<u8>>> {
    let (Value::Array(items) | Value::Set(items), _) = parse_reply(reply).ok()?? else { return None };
    items.into_iter().map(|v| if let Value::Bulk(b) = v { Some(b) } else { None }).collect()
}

/// The elements of an array, set or map reply, each written as text so
/// they compare: a bulk string, or with `pairs` an element and its value
/// (flat pairs in RESP2, `[element, value]` arrays in RESP3, a map's
/// entries); `None` for any other shape.
fn elements_of(reply: &[u8], pairs: bool) -> Option<Vec<String>> {
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
fn random_reply_ok(args: &[Vec<u8>], before: &[String], reply: &[u8]) -> Result<(), String> {
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

impl Differ {
    /// SPOP SRANDMEMBER HRANDFIELD ZRANDMEMBER (the rules are in the
    /// module's header). Replies equal byte for byte (errors, nulls, empty
    /// answers) pass at once.
    fn check_random(&mut self, args: &[Vec<u8>]) -> Result<bool, (Vec<u8>, Vec<u8>)> {
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

impl Differ {
    /// TTL PTTL EXPIRETIME PEXPIRETIME: equal, or both non-negative
    /// integers at most `tolerance` apart (see the module's header).
    fn check_ttl(&mut self, args: &[Vec<u8>], tolerance: i64) -> Result<bool, (Vec<u8>, Vec<u8>)> {
        let want = self.remote(args);
        let (got, _) = self.local(args);
        if want == got {
            return Ok(false);
        }
        let int = |r: &[u8]| match parse_reply(r) {
            Ok(Some((Value::Integer(n), _))) => Some(n),
            _ => None,
        };
        match (int(&want), int(&got)) {
            (Some(w), Some(g)) if w >= 0 && g >= 0 && (w - g).abs() <= tolerance => {
                self.loose += 1;
                Ok(false)
            }
            _ => Err((want, got)),
        }
    }

    /// RANDOMKEY: nil on both sides, or a key on both sides, pmwire's
    /// being a key both hold.
    fn check_randomkey(&mut self, args: &[Vec<u8>]) -> Result<bool, (Vec<u8>, Vec<u8>)> {
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

fn run_script(redis: &Redis, version: &str, name: &str, script: &str) -> Vec<String> {
    run_lines(&mut Differ::new(redis, version), name, script)
}

/// Runs a script's lines (`#` comments; `~ ` sorts the replies' arrays)
/// through `d`; one failure text per difference.
fn run_lines(d: &mut Differ, name: &str, script: &str) -> Vec<String> {
    let mut failures = Vec::new();
    for (lineno, line) in script.lines().enumerate() {
        let line = line.trim_end();
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (sort, command) = match line.strip_prefix("~ ") {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        match d.check(&args_of(command), sort) {
            Ok(false) => {}
            Ok(true) => break,
            Err((want, got)) => failures.push(format!(
                "{name}:{}: {command}\n    redis:  {:?}\n    pmwire: {:?}",
                lineno + 1,
                String::from_utf8_lossy(&want),
                String::from_utf8_lossy(&got)
            )),
        }
    }
    failures
}

#[test]
fn corpus_matches_redis() {
    let redis = start_redis();
    let version = redis_version(redis.port);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut names: Vec<_> = std::fs::read_dir(&dir).expect("corpus dir").map(|e| e.expect("entry").path()).collect();
    names.sort();
    let mut failures = Vec::new();
    let mut lines = 0;
    for path in &names {
        let script = std::fs::read_to_string(path).expect("read script");
        lines += script.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')).count();
        let name = path.file_name().expect("name").to_string_lossy().into_owned();
        failures.extend(run_script(&redis, &version, &name, &script));
    }
    println!("{} scripts, {lines} commands compared with redis-server {version}", names.len());
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}

/// Raw inputs, including protocol errors: every reply until the server
/// closes must match.
const RAW: &[&[u8]] = &[
    b"PING\r\n*x\r\n",
    b"*1\r\n$4\r\nPING\r\n*1\r\nx\r\n",
    b"*2\r\n$4\r\nECHO\r\n$-3\r\n",
    b"*1\r\n$abc\r\n",
    b"*\r\n",
    b"*3000000000\r\n",
    b"*1\r\n$600000000\r\n",
    b"ping\r\necho \"a b\" 'c'\r\necho \"unbalanced\r\n",
    b"echo \"a\"b\r\n",
    b"set k \"\\x41\\n\"\r\nget k\r\n*-1\r\n*0\r\n\r\n\nget k\nQUIT\r\nPING\r\n",
    b"*2\r\n$4\r\nECHO\r\n$3\r\nabcXY*1\r\n$4\r\nPING\r\n*1\r\n:1\r\n",
    b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n\r\n",
];

#[test]
fn raw_protocol_matches_redis() {
    let redis = start_redis();
    let mut failures = Vec::new();
    for input in RAW {
        let mut conn = Conn::new(redis.port);
        conn.stream.write_all(input).expect("write");
        let want = conn.rest();
        let mut server = Server::new(ServerConfig::default());
        let mut session = server.open_session();
        let mut ks = MemKeyspace::new();
        let mut parsed = Parsed::new(Limits::default());
        let segs: [&[u8]; 1] = [input];
        let summary = parsed.parse(&segs);
        let mut got: Vec<u8> = Vec::new();
        let mut closed = false;
        for i in 0..summary.commands {
            if server.execute(&mut session, &mut ks, &parsed.request(&segs, i), &mut got) == Flow::Close {
                closed = true;
                break;
            }
        }
        if !closed {
            if let Some(e) = summary.error {
                got.extend_from_slice(&e.reply());
            }
        }
        if want != got {
            failures.push(format!(
                "{:?}\n    redis:  {:?}\n    pmwire: {:?}",
                String::from_utf8_lossy(input),
                String::from_utf8_lossy(&want),
                String::from_utf8_lossy(&got)
            ));
        }
    }
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}

/// A seeded generator of commands over every family pmwire serves, with
/// keys shared between types (so WRONGTYPE comes up), numbers at their
/// edges, bad arities and bad options.
mod gen {
    use rand::{Rng, SeedableRng};
    use rand_xoshiro::Xoshiro256PlusPlus;

    const KEYS: &[&str] = &["k0", "k1", "k2", "k3", "k4", "k5"];
    const VALUES: &[&str] = &[
        "", "0", "1", "-1", "7", "42", "100", "3.5", "-0", "+1", " 1", "0x10", "1e3", "abc", "hello world",
        "9223372036854775807", "-9223372036854775808", "9223372036854775808", "\u{0}\u{7f}",
    ];
    const INTS: &[&str] = &[
        "0", "1", "-1", "2", "-2", "3", "5", "-5", "10", "100", "-100", "9223372036854775807", "-9223372036854775808",
        "99999999999999999999", "x", "1.5", "",
    ];
    const FLOATS: &[&str] = &[
        "0", "-0", "0.1", "1e308", "1e4932", "-1e4932", "1e4933", "1e-4950", "1e-5000", "inf", "-inf", "nan", ".", "1.",
        ".5", "+1.5", " 1", "1 ", "1e", "0x", "0x1p-16445", "5e-18", "1.5e-17", "9223372036854775807", "x",
    ];
    const SCORES: &[&str] = &["0", "1", "-1", "1.5", "-2.25", "3", "1e2", "inf", "-inf", "+inf", "nan", "x", "0.1", "10"];
    const BOUNDS: &[&str] = &["-inf", "+inf", "0", "1", "(1", "2", "(2.5", "-1", "x", "(", "1e1"];
    const FIELDS: &[&str] = &["f0", "f1", "f2", "f3"];
    const MEMBERS: &[&str] = &["a", "b", "c", "d", "e"];
    const HASH_KEYS: &[&str] = &["h0", "h1"];
    const ZSET_KEYS: &[&str] = &["z0", "z1", "z2"];
    const LEX_BOUNDS: &[&str] = &["-", "+", "[a", "(b", "[c", "d", "(e", "[", "(", "+x", "[1"];
    const LIST_KEYS: &[&str] = &["l0", "l1"];
    const SET_KEYS: &[&str] = &["s0", "s1", "s2"];
    /// Set members: strings and integers (Redis keeps an all-integer set
    /// as an intset, others as a hash table). Fewer than 10, so SSCAN's
    /// default COUNT covers a whole set, as Redis answers a small set.
    const SET_MEMBERS: &[&str] = &["a", "b", "c", "d", "1", "2", "10", "-3", ""];
    /// Counts for pops and draws: small, at the edges, and not numbers.
    /// (No large negative SRANDMEMBER count: Redis 7.0 would answer with
    /// that many members, pmwire refuses beyond `MAX_RANDOM_REPLY`.)
    const COUNTS: &[&str] = &["0", "1", "2", "3", "5", "-1", "-2", "-7", "x", "", "9223372036854775807", "-9223372036854775808"];
    /// Relative times (EXPIRE, SET EX, SETEX, GETEX EX): large, or at once
    /// (0, negative), or refused.
    const REL_SECONDS: &[&str] =
        &["1000000", "2000000", "3000000", "0", "-1", "x", "", "9223372036854775807", "9223372036854775"];
    const REL_MS: &[&str] = &["1000000000", "2000000000", "3000000000", "0", "-5", "x", "9223372036854775807"];
    /// Absolute times: far in the future, in the past, at the edges.
    const ABS_SECONDS: &[&str] =
        &["4102444800", "4102444900", "4102444700", "1", "0", "-5", "9223372036854775807", "9223372036854775", "x"];
    const ABS_MS: &[&str] =
        &["4102444800000", "4102444800123", "4102444899999", "1", "0", "9223372036854775807", "-9223372036854775808"];
    /// Absolute times SET takes: none in the past (a key stored expired).
    const SET_ABS_SECONDS: &[&str] =
        &["4102444800", "4102444900", "0", "-1", "x", "9223372036854775", "9223372036854776"];
    const SET_ABS_MS: &[&str] = &["4102444800123", "4102444800500", "0", "x", "9223372036854775807"];

    pub struct Gen {
        rng: Xoshiro256PlusPlus,
    }

    /// A generated command; `sort` when its reply's order is unspecified,
    /// `random` when its reply is (SPOP, SRANDMEMBER).
    pub struct Cmd {
        pub args: Vec<Vec<u8>>,
        pub sort: bool,
        pub random: bool,
    }

    impl Gen {
        pub fn new(seed: u64) -> Gen {
            Gen { rng: Xoshiro256PlusPlus::seed_from_u64(seed) }
        }

        /// True with probability `p`.
        pub fn chance(&mut self, p: f64) -> bool {
            self.rng.gen_bool(p)
        }

        fn pick(&mut self, from: &[&str]) -> Vec<u8> {
            from[self.rng.gen_range(0..from.len())].as_bytes().to_vec()
        }

        fn key(&mut self) -> Vec<u8> {
            self.pick(KEYS)
        }

        /// A key for a list or set command: mostly the family's own keys,
        /// so collections grow, else one shared with every family.
        fn family_key(&mut self, own: &[&str]) -> Vec<u8> {
            if self.rng.gen_bool(0.7) { self.pick(own) } else { self.pick(KEYS) }
        }

        fn value(&mut self) -> Vec<u8> {
            if self.rng.gen_bool(0.1) {
                let n = self.rng.gen_range(0..40);
                (0..n).map(|_| self.rng.gen::<u8>()).collect()
            } else {
                self.pick(VALUES)
            }
        }

        fn int(&mut self) -> Vec<u8> {
            if self.rng.gen_bool(0.7) {
                self.rng.gen_range(-12i64..12).to_string().into_bytes()
            } else {
                self.pick(INTS)
            }
        }

        /// A number for INCRBYFLOAT: decimals of up to 25 digits with a point
        /// and an exponent anywhere (rounding at every position of the
        /// 64-bit significand and of `%.17Lf`), hex floats, edges, non-numbers.
        fn float(&mut self) -> Vec<u8> {
            match self.rng.gen_range(0..10) {
                0 => self.pick(FLOATS),
                1 => self.int(),
                2 => {
                    let (int, frac) = (self.rng.gen::<u16>(), self.rng.gen::<u16>());
                    let exp = self.rng.gen_range(-80i32..80);
                    format!("0x{int:x}.{frac:x}p{exp}").into_bytes()
                }
                _ => {
                    let len = self.rng.gen_range(1..=25);
                    let mut d: Vec<u8> = (0..len).map(|_| b'0' + self.rng.gen_range(0..10u8)).collect();
                    d.insert(self.rng.gen_range(0..=len), b'.');
                    if self.rng.gen_bool(0.5) {
                        d.insert(0, b'-');
                    }
                    if self.rng.gen_bool(0.3) {
                        d.extend(format!("e{}", self.rng.gen_range(-30i32..30)).into_bytes());
                    }
                    d
                }
            }
        }

        fn n(&mut self, lo: usize, hi: usize) -> usize {
            self.rng.gen_range(lo..=hi)
        }

        fn element(&mut self) -> Vec<u8> {
            if self.rng.gen_bool(0.8) { self.pick(MEMBERS) } else { self.value() }
        }

        fn name(&mut self) -> &'static str {
            let family: &[&str] = match self.rng.gen_range(0..100) {
                0..=24 => STRINGS,
                25..=34 => KEYCMDS,
                35..=47 => HASHES,
                48..=65 => ZSETS,
                66..=77 => LISTS,
                78..=88 => SETS,
                _ => EXPIRY,
            };
            family[self.rng.gen_range(0..family.len())]
        }

        pub fn next(&mut self) -> Cmd {
            let name = self.name();
            let mut a: Vec<Vec<u8>> = vec![name.as_bytes().to_vec()];
            let sort = self.args(name, &mut a);
            let random = matches!(name, "SPOP" | "SRANDMEMBER" | "HRANDFIELD" | "ZRANDMEMBER");
            // Now and then a wrong arity: one argument too few.
            if a.len() > 1 && self.rng.gen_bool(0.03) {
                a.pop();
            }
            Cmd { args: a, sort, random }
        }

        /// Pushes the arguments of `name`; true if its reply's order is unspecified.
        fn args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) -> bool {
            if LISTS.contains(&name) {
                self.list_args(name, a);
                return false;
            }
            if SETS.contains(&name) {
                return self.set_args(name, a);
            }
            if EXPIRY.contains(&name) {
                self.expiry_args(name, a);
                return false;
            }
            if HASHES.contains(&name) {
                return self.hash_args(name, a);
            }
            if ZSETS.contains(&name) {
                return self.zset_args(name, a);
            }
            let mut sort = false;
            match name {
                "GET" | "STRLEN" | "GETDEL" | "INCR" | "DECR" | "TYPE" => a.push(self.key()),
                "SET" => {
                    a.push(self.key());
                    a.push(self.value());
                    for _ in 0..self.n(0, 2) {
                        match self.rng.gen_range(0..12) {
                            0 => a.extend([b"EX".to_vec(), self.pick(REL_SECONDS)]),
                            1 => a.extend([b"px".to_vec(), self.pick(REL_MS)]),
                            2 => a.extend([b"EXAT".to_vec(), self.pick(SET_ABS_SECONDS)]),
                            3 => a.extend([b"PXAT".to_vec(), self.pick(SET_ABS_MS)]),
                            _ => a.push(self.pick(&["NX", "XX", "GET", "KEEPTTL", "nx", "get", "keepttl", "BAD"])),
                        }
                    }
                }
                "SETNX" | "GETSET" | "APPEND" => {
                    a.push(self.key());
                    a.push(self.value());
                }
                "INCRBY" | "DECRBY" => {
                    a.push(self.key());
                    a.push(self.int());
                }
                "INCRBYFLOAT" => {
                    a.push(self.key());
                    a.push(self.float());
                }
                "MGET" | "DEL" | "UNLINK" | "EXISTS" | "TOUCH" => {
                    for _ in 0..self.n(1, 4) {
                        a.push(self.key());
                    }
                }
                "MSET" | "MSETNX" => {
                    for _ in 0..self.n(1, 3) {
                        a.push(self.key());
                        a.push(self.value());
                    }
                }
                "SETRANGE" => {
                    a.push(self.key());
                    a.push(self.int());
                    a.push(self.value());
                }
                "GETRANGE" | "SUBSTR" => {
                    a.push(self.key());
                    a.push(self.int());
                    a.push(self.int());
                }
                "RENAME" | "RENAMENX" => {
                    a.push(self.key());
                    a.push(self.key());
                }
                "COPY" => {
                    a.push(self.key());
                    a.push(self.key());
                    for _ in 0..self.n(0, 2) {
                        a.push(self.pick(&["REPLACE", "replace", "DB", "BAD"]));
                        if a.last().is_some_and(|w| w == b"DB") {
                            a.push(self.pick(&["0", "x", "99999999999"]));
                        }
                    }
                }
                "DBSIZE" => {}
                "KEYS" => {
                    a.push(self.pick(&["*", "k?", "k[0-2]", "h*", "k[^1]"]));
                    sort = true;
                }
                other => unreachable!("{other}"),
            }
            sort
        }

        fn list_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) {
            a.push(self.family_key(LIST_KEYS));
            match name {
                "LPUSH" | "RPUSH" | "LPUSHX" | "RPUSHX" => {
                    for _ in 0..self.n(1, 3) {
                        a.push(self.element());
                    }
                }
                "LPOP" | "RPOP" => {
                    for _ in 0..self.n(0, 2) {
                        a.push(self.pick(COUNTS));
                    }
                }
                "LRANGE" | "LTRIM" => {
                    a.push(self.int());
                    a.push(self.int());
                }
                "LINDEX" => a.push(self.int()),
                "LSET" | "LREM" => {
                    a.push(self.int());
                    a.push(self.element());
                }
                "LINSERT" => {
                    a.push(self.pick(&["BEFORE", "AFTER", "after", "middle"]));
                    a.push(self.element());
                    a.push(self.element());
                }
                "LPOS" => {
                    a.push(self.element());
                    for _ in 0..self.n(0, 3) {
                        a.push(self.pick(&["RANK", "COUNT", "MAXLEN", "rank", "BAD"]));
                        a.push(self.int());
                    }
                }
                "LMOVE" | "RPOPLPUSH" => {
                    a.push(self.family_key(LIST_KEYS));
                    if name == "LMOVE" {
                        for _ in 0..2 {
                            a.push(self.pick(&["LEFT", "RIGHT", "left", "UP"]));
                        }
                    }
                }
                "BLPOP" | "BRPOP" => {
                    for _ in 0..self.n(0, 2) {
                        a.push(self.family_key(LIST_KEYS));
                    }
                    a.push(self.pick(BLOCK_TIMEOUTS));
                }
                "BLMOVE" | "BRPOPLPUSH" => {
                    a.push(self.family_key(LIST_KEYS));
                    if name == "BLMOVE" {
                        for _ in 0..2 {
                            a.push(self.pick(&["LEFT", "RIGHT", "left", "UP"]));
                        }
                    }
                    a.push(self.pick(BLOCK_TIMEOUTS));
                }
                "LMPOP" | "BLMPOP" => {
                    let first = a.pop().expect("the key pushed above");
                    if name == "BLMPOP" {
                        a.push(self.pick(BLOCK_TIMEOUTS));
                    }
                    let n = self.n(1, 3);
                    let numkeys = if self.rng.gen_bool(0.85) { n.to_string().into_bytes() } else { self.pick(COUNTS) };
                    a.push(numkeys);
                    a.push(first);
                    for _ in 1..n {
                        a.push(self.family_key(LIST_KEYS));
                    }
                    a.push(self.pick(&["LEFT", "RIGHT", "right", "UP"]));
                    if self.rng.gen_bool(0.5) {
                        a.push(self.pick(&["COUNT", "count", "COUNT", "FOO"]));
                        a.push(self.pick(COUNTS));
                    }
                }
                "LLEN" => {}
                other => unreachable!("{other}"),
            }
        }

        /// Pushes an expiry command's arguments (times as in the module's header).
        fn expiry_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) {
            // Any key of any family: TTLs ride on every type.
            let key = match self.rng.gen_range(0..3) {
                0 => self.pick(LIST_KEYS),
                1 => self.pick(SET_KEYS),
                _ => self.key(),
            };
            a.push(key);
            match name {
                "EXPIRE" | "PEXPIRE" => {
                    a.push(self.pick(if name == "EXPIRE" { REL_SECONDS } else { REL_MS }));
                    for _ in 0..self.n(0, 2) {
                        a.push(self.pick(&["NX", "XX", "xx", "BAD"]));
                    }
                }
                "EXPIREAT" | "PEXPIREAT" => {
                    a.push(self.pick(if name == "EXPIREAT" { ABS_SECONDS } else { ABS_MS }));
                    for _ in 0..self.n(0, 2) {
                        a.push(self.pick(&["NX", "XX", "GT", "LT", "gt", "BAD"]));
                    }
                }
                "SETEX" | "PSETEX" => {
                    a.push(self.pick(if name == "SETEX" { REL_SECONDS } else { REL_MS }));
                    a.push(self.value());
                }
                "GETEX" => {
                    for _ in 0..self.n(0, 2) {
                        match self.rng.gen_range(0..6) {
                            0 => a.extend([b"EX".to_vec(), self.pick(REL_SECONDS)]),
                            1 => a.extend([b"PX".to_vec(), self.pick(REL_MS)]),
                            2 => a.extend([b"EXAT".to_vec(), self.pick(ABS_SECONDS)]),
                            3 => a.extend([b"pxat".to_vec(), self.pick(ABS_MS)]),
                            _ => a.push(self.pick(&["PERSIST", "persist", "KEEPTTL", "NX"])),
                        }
                    }
                }
                "RANDOMKEY" => _ = a.pop(),
                "TTL" | "PTTL" | "EXPIRETIME" | "PEXPIRETIME" | "PERSIST" => {}
                other => unreachable!("{other}"),
            }
        }

        /// Pushes a hash command's arguments; true if the reply is unordered.
        fn hash_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) -> bool {
            a.push(self.family_key(HASH_KEYS));
            match name {
                "HSET" | "HMSET" => {
                    for _ in 0..self.n(1, 3) {
                        a.push(self.pick(FIELDS));
                        a.push(self.value());
                    }
                }
                "HGET" | "HEXISTS" | "HSTRLEN" => a.push(self.pick(FIELDS)),
                "HMGET" | "HDEL" => {
                    for _ in 0..self.n(1, 3) {
                        a.push(self.pick(FIELDS));
                    }
                }
                "HSETNX" => {
                    a.push(self.pick(FIELDS));
                    a.push(self.value());
                }
                "HINCRBY" => {
                    a.push(self.pick(FIELDS));
                    a.push(self.int());
                }
                "HINCRBYFLOAT" => {
                    a.push(self.pick(FIELDS));
                    a.push(self.float());
                }
                "HRANDFIELD" => self.random_count(a, "WITHVALUES"),
                "HSCAN" => self.scan_opts(a),
                _ => {}
            }
            matches!(name, "HGETALL" | "HKEYS" | "HVALS" | "HSCAN")
        }

        /// COUNT [WITHVALUES|WITHSCORES] of HRANDFIELD / ZRANDMEMBER.
        fn random_count(&mut self, a: &mut Vec<Vec<u8>>, with: &str) {
            if self.rng.gen_bool(0.8) {
                a.push(self.pick(COUNTS));
                if self.rng.gen_bool(0.5) {
                    a.push(self.pick(&[with, &with.to_lowercase(), "BAD"]));
                }
            }
        }

        /// HSCAN / ZSCAN: cursor 0 (or not a cursor), MATCH, and a COUNT
        /// covering the whole collection (Redis answers a small one whole,
        /// pmwire pages by COUNT).
        fn scan_opts(&mut self, a: &mut Vec<Vec<u8>>) {
            a.push(self.pick(&["0", "0", "0", "0", "0", "0", "0", "0", "0", "x"]));
            for _ in 0..self.n(0, 2) {
                match self.rng.gen_range(0..10) {
                    0..=5 => a.extend([b"MATCH".to_vec(), self.pick(&["*", "[a-c]", "f*", "x", "?"])]),
                    6 | 7 => a.extend([b"COUNT".to_vec(), self.pick(&["100", "1000", "100", "0", "x"])]),
                    8 => a.push(b"COUNT".to_vec()),
                    _ => a.extend([self.pick(&["TYPE", "BAD"]), b"x".to_vec()]),
                }
            }
            if !a.iter().any(|w| w == b"COUNT") {
                a.extend([b"COUNT".to_vec(), b"100".to_vec()]);
            }
        }

        /// A sorted-set key; now and then a set's (the set operations read
        /// sets) or a key of any family.
        fn zkey(&mut self) -> Vec<u8> {
            match self.rng.gen_range(0..20) {
                0 | 1 => self.pick(SET_KEYS),
                2 => self.key(),
                _ => self.pick(ZSET_KEYS),
            }
        }

        /// LIMIT offset count, now and then.
        fn limit(&mut self, a: &mut Vec<Vec<u8>>) {
            if self.rng.gen_bool(0.3) {
                a.push(self.pick(&["LIMIT", "limit"]));
                a.push(self.int());
                a.push(self.int());
            }
        }

        /// Pushes a sorted-set command's arguments; true if the reply is unordered.
        fn zset_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) -> bool {
            match name {
                "ZUNIONSTORE" | "ZINTERSTORE" | "ZDIFFSTORE" | "ZUNION" | "ZINTER" | "ZDIFF" | "ZINTERCARD" => {
                    self.zset_op_args(name, a);
                    return false;
                }
                "ZRANGESTORE" => {
                    a.push(self.zkey());
                    a.push(self.zkey());
                    self.zrange_args(a, false);
                    return false;
                }
                _ => a.push(self.zkey()),
            }
            match name {
                "ZADD" => {
                    for _ in 0..self.n(0, 2) {
                        a.push(self.pick(&["NX", "XX", "GT", "LT", "CH", "INCR"]));
                    }
                    for _ in 0..self.n(1, 3) {
                        a.push(self.pick(SCORES));
                        a.push(self.pick(MEMBERS));
                    }
                }
                "ZREM" | "ZMSCORE" => {
                    for _ in 0..self.n(1, 3) {
                        a.push(self.pick(MEMBERS));
                    }
                }
                "ZSCORE" | "ZRANK" | "ZREVRANK" => a.push(self.pick(MEMBERS)),
                "ZINCRBY" => {
                    a.push(self.pick(SCORES));
                    a.push(self.pick(MEMBERS));
                }
                "ZRANGE" => self.zrange_args(a, true),
                "ZRANGEBYSCORE" | "ZREVRANGEBYSCORE" => {
                    a.push(self.pick(BOUNDS));
                    a.push(self.pick(BOUNDS));
                    if self.rng.gen_bool(0.3) {
                        a.push(b"WITHSCORES".to_vec());
                    }
                    self.limit(a);
                }
                "ZRANGEBYLEX" | "ZREVRANGEBYLEX" => {
                    a.push(self.pick(LEX_BOUNDS));
                    a.push(self.pick(LEX_BOUNDS));
                    self.limit(a);
                }
                "ZREVRANGE" | "ZREMRANGEBYRANK" => {
                    a.push(self.int());
                    a.push(self.int());
                    if name == "ZREVRANGE" && self.rng.gen_bool(0.3) {
                        a.push(self.pick(&["WITHSCORES", "withscores", "REV", "LIMIT"]));
                    }
                }
                "ZCOUNT" | "ZREMRANGEBYSCORE" => {
                    a.push(self.pick(BOUNDS));
                    a.push(self.pick(BOUNDS));
                }
                "ZLEXCOUNT" | "ZREMRANGEBYLEX" => {
                    a.push(self.pick(LEX_BOUNDS));
                    a.push(self.pick(LEX_BOUNDS));
                }
                "ZPOPMIN" | "ZPOPMAX" => {
                    for _ in 0..self.n(0, 2) {
                        a.push(self.pick(COUNTS));
                    }
                }
                "ZRANDMEMBER" => self.random_count(a, "WITHSCORES"),
                "ZSCAN" => self.scan_opts(a),
                _ => {}
            }
            name == "ZSCAN"
        }

        /// ZRANGE's (and ZRANGESTORE's) range and options.
        fn zrange_args(&mut self, a: &mut Vec<Vec<u8>>, withscores: bool) {
            match self.rng.gen_range(0..3) {
                0 => {
                    a.push(self.int());
                    a.push(self.int());
                }
                1 => {
                    a.push(self.pick(BOUNDS));
                    a.push(self.pick(BOUNDS));
                    a.push(self.pick(&["BYSCORE", "byscore"]));
                }
                _ => {
                    a.push(self.pick(LEX_BOUNDS));
                    a.push(self.pick(LEX_BOUNDS));
                    a.push(b"BYLEX".to_vec());
                }
            }
            for _ in 0..self.n(0, 2) {
                match self.rng.gen_range(0..4) {
                    0 => a.push(b"REV".to_vec()),
                    1 if withscores => a.push(b"WITHSCORES".to_vec()),
                    1 => a.push(self.pick(&["WITHSCORES", "BYSCORE"])),
                    _ => {
                        a.push(b"LIMIT".to_vec());
                        a.push(self.int());
                        a.push(self.int());
                    }
                }
            }
        }

        /// The set operations: [destination] numkeys key... [WEIGHTS w...]
        /// [AGGREGATE how] [WITHSCORES] [LIMIT n].
        fn zset_op_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) {
            if name.ends_with("STORE") {
                a.push(self.zkey());
            }
            let n = self.n(1, 3);
            a.push(if self.rng.gen_bool(0.9) { n.to_string().into_bytes() } else { self.pick(&["0", "-1", "x", "9"]) });
            for _ in 0..n {
                a.push(self.zkey());
            }
            // Mostly the options the command takes, now and then any.
            let fitting: &[u8] = match name {
                "ZINTERCARD" => &[3],
                "ZDIFF" => &[2],
                "ZDIFFSTORE" => &[],
                "ZUNION" | "ZINTER" => &[0, 1, 2],
                _ => &[0, 1],
            };
            for _ in 0..self.n(0, 2) {
                let pick = match fitting.len() {
                    n if n > 0 && self.rng.gen_bool(0.85) => fitting[self.rng.gen_range(0..n)],
                    0 if self.rng.gen_bool(0.8) => continue,
                    _ => self.rng.gen_range(0..5),
                };
                match pick {
                    0 => {
                        a.push(b"WEIGHTS".to_vec());
                        let given = if self.rng.gen_bool(0.9) { n } else { n - 1 };
                        for _ in 0..given {
                            a.push(self.pick(&["1", "2", "-1", "0.5", "0", "inf", "-inf", "3", "0.1", "x", "nan"]));
                        }
                    }
                    1 => a.extend([b"AGGREGATE".to_vec(), self.pick(&["SUM", "min", "MAX", "avg"])]),
                    2 => a.push(b"WITHSCORES".to_vec()),
                    3 => a.extend([b"LIMIT".to_vec(), self.pick(&["0", "1", "2", "-1", "x"])]),
                    _ => a.push(b"BAD".to_vec()),
                }
            }
        }

        fn set_keys(&mut self, a: &mut Vec<Vec<u8>>, lo: usize, hi: usize) {
            for _ in 0..self.n(lo, hi) {
                a.push(self.family_key(SET_KEYS));
            }
        }

        /// Pushes a set command's arguments; true if the reply is unordered.
        fn set_args(&mut self, name: &str, a: &mut Vec<Vec<u8>>) -> bool {
            match name {
                "SADD" | "SREM" | "SMISMEMBER" => {
                    a.push(self.family_key(SET_KEYS));
                    for _ in 0..self.n(1, 3) {
                        a.push(self.pick(SET_MEMBERS));
                    }
                }
                "SISMEMBER" => {
                    a.push(self.family_key(SET_KEYS));
                    a.push(self.pick(SET_MEMBERS));
                }
                "SMEMBERS" | "SCARD" => a.push(self.family_key(SET_KEYS)),
                "SPOP" | "SRANDMEMBER" => {
                    a.push(self.family_key(SET_KEYS));
                    for _ in 0..self.n(0, 2) {
                        a.push(self.pick(COUNTS));
                    }
                }
                "SMOVE" => {
                    a.push(self.family_key(SET_KEYS));
                    a.push(self.family_key(SET_KEYS));
                    a.push(self.pick(SET_MEMBERS));
                }
                "SINTER" | "SUNION" | "SDIFF" => self.set_keys(a, 1, 3),
                "SINTERSTORE" | "SUNIONSTORE" | "SDIFFSTORE" => self.set_keys(a, 2, 4),
                "SINTERCARD" => {
                    a.push(self.pick(&["1", "2", "3", "0", "x", "4"]));
                    self.set_keys(a, 1, 3);
                    if self.rng.gen_bool(0.4) {
                        a.push(self.pick(&["LIMIT", "limit", "BAD"]));
                        a.push(self.pick(&["0", "1", "2", "-1", "x"]));
                    }
                }
                "SSCAN" => {
                    a.push(self.family_key(SET_KEYS));
                    a.push(self.pick(&["0", "0", "0", "x"]));
                    for _ in 0..self.n(0, 2) {
                        match self.rng.gen_range(0..3) {
                            0 => a.push(b"MATCH".to_vec()),
                            1 => a.push(b"COUNT".to_vec()),
                            _ => a.push(self.pick(&["TYPE", "BAD"])),
                        }
                        let v = self.pick(&["*", "[a-c]", "1*", "10", "100", "0", "x"]);
                        a.push(v);
                    }
                }
                other => unreachable!("{other}"),
            }
            !matches!(name, "SADD" | "SREM" | "SMISMEMBER" | "SISMEMBER" | "SCARD" | "SMOVE" | "SINTERCARD")
        }
    }

    const STRINGS: &[&str] = &[
        "GET", "SET", "SETNX", "GETSET", "GETDEL", "MGET", "MSET", "MSETNX", "INCR", "DECR", "INCRBY", "DECRBY",
        "INCRBYFLOAT", "INCRBYFLOAT", "APPEND", "STRLEN", "SETRANGE", "GETRANGE", "SUBSTR",
    ];
    /// Expiry (TTL and PERSIST twice over: they read what the others set).
    pub const EXPIRY: &[&str] = &[
        "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT", "TTL", "TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME", "PEXPIRETIME",
        "PERSIST", "SETEX", "PSETEX", "GETEX", "GETEX", "RANDOMKEY",
    ];
    const KEYCMDS: &[&str] = &["DEL", "UNLINK", "EXISTS", "TOUCH", "TYPE", "RENAME", "RENAMENX", "COPY", "DBSIZE", "KEYS"];
    /// HSET twice over, so hashes grow.
    const HASHES: &[&str] = &[
        "HSET", "HSET", "HMSET", "HGET", "HMGET", "HDEL", "HLEN", "HEXISTS", "HGETALL", "HSETNX", "HKEYS", "HVALS",
        "HSTRLEN", "HINCRBY", "HINCRBYFLOAT", "HRANDFIELD", "HSCAN",
    ];
    /// ZADD three times over, so sorted sets grow past the pops and removals.
    const ZSETS: &[&str] = &[
        "ZADD", "ZADD", "ZADD", "ZREM", "ZSCORE", "ZCARD", "ZRANGE", "ZRANGE", "ZRANGEBYSCORE", "ZINCRBY", "ZRANK",
        "ZREVRANK", "ZREVRANGE", "ZRANGEBYLEX", "ZREVRANGEBYSCORE", "ZREVRANGEBYLEX", "ZCOUNT", "ZLEXCOUNT",
        "ZPOPMIN", "ZPOPMAX", "ZREMRANGEBYRANK", "ZREMRANGEBYSCORE", "ZREMRANGEBYLEX", "ZMSCORE", "ZRANDMEMBER",
        "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE", "ZUNION", "ZINTER", "ZDIFF", "ZINTERCARD", "ZRANGESTORE", "ZSCAN",
    ];
    const LISTS: &[&str] = &[
        "LPUSH", "RPUSH", "LPUSHX", "RPUSHX", "LPOP", "RPOP", "LRANGE", "LLEN", "LINDEX", "LSET", "LREM", "LTRIM",
        "LINSERT", "LPOS", "LMOVE", "RPOPLPUSH", "BLPOP", "BRPOP", "BLMOVE", "BRPOPLPUSH", "LMPOP", "BLMPOP",
    ];
    /// Timeouts of blocking pops: short (one connection: nobody pushes, so
    /// an empty wait times out; 0 would block for ever), and refused ones.
    pub const BLOCK_TIMEOUTS: &[&str] = &["0.01", "0.02", "-1", "x", "inf", "1e400"];
    /// SADD three times over: sets grow past one member, where SPOP and
    /// SRANDMEMBER become random.
    const SETS: &[&str] = &[
        "SADD", "SADD", "SADD", "SREM", "SMEMBERS", "SISMEMBER", "SMISMEMBER", "SCARD", "SPOP", "SRANDMEMBER", "SMOVE", "SINTER",
        "SUNION", "SDIFF", "SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE", "SINTERCARD", "SSCAN",
    ];
}

/// The keyspace's generation counter: the next one to take (1 if none was taken).
fn next_generation_of(ks: &mut MemKeyspace) -> u64 {
    use pmwire_keyspace::store::Keyspace;
    ks.internal_get(&[2]).map_or(1, |v| u64::from_le_bytes(v[..8].try_into().expect("a counter first")))
}

/// TTL-family replies: the two servers read the clock apart, so these are
/// compared within a tolerance, never queued in a transaction.
fn loose_compared(args: &[Vec<u8>]) -> bool {
    matches!(args[0].as_slice(), b"TTL" | b"PTTL" | b"EXPIRETIME" | b"PEXPIRETIME")
}

/// Seeded random commands over every family, compared byte for byte with
/// redis-server, switching between RESP2 and RESP3. `PMWIRE_DIFF_COMMANDS`
/// sets how many (CI: 20,000), `PMWIRE_DIFF_SEED` the seed (printed).
#[test]
fn random_commands_match_redis() {
    let redis = start_redis();
    let version = redis_version(redis.port);
    let count: u64 = std::env::var("PMWIRE_DIFF_COMMANDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let seed: u64 = std::env::var("PMWIRE_DIFF_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos() as u64
    });
    println!("random differential test: seed {seed} (PMWIRE_DIFF_SEED={seed} replays it), {count} commands");
    let mut g = gen::Gen::new(seed);
    let mut d = Differ::new(&redis, &version);
    // Tiny chunking limits: collections cross between blob and chunked
    // forms (and buckets split and merge) every few commands.
    d.server.config_mut().collections = pmwire_keyspace::chunked::ChunkConfig::tiny();
    let mut failures = Vec::new();
    let mut ttl_family = 0u64;
    let mut in_multi = false;
    for i in 0..count {
        if i % 2_000 == 0 && !in_multi {
            let proto: &[u8] = if (i / 2_000) % 2 == 0 { b"2" } else { b"3" };
            d.check(&[&b"HELLO"[..], proto], true).expect("HELLO agrees");
        }
        let cmd = g.next();
        if i % 7 == 0 {
            // The server's background collection of dead chunks, interleaved.
            pmwire_keyspace::chunked::collect_garbage(&mut d.ks, 3).expect("collect garbage");
        }
        ttl_family += u64::from(loose_compared(&cmd.args));
        // Now and then a transaction: commands whose replies compare byte for byte are
        // queued (their replies then come in EXEC's array); it ends with EXEC, or DISCARD.
        let plain = !cmd.random && !cmd.sort && !loose_compared(&cmd.args) && cmd.args[0].as_slice() != b"RANDOMKEY";
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
    println!("{} blocking pops blocked and timed out", d.timeouts);
    let generations = next_generation_of(&mut d.ks) - 1;
    println!("{generations} collections chunked (written whole under a fresh generation)");
    assert!(count < 5_000 || generations > 0, "the tiny limits made no collection chunked");
    assert!(failures.is_empty(), "seed {seed}: {} differences (first 20):\n{}", failures.len(), failures.join("\n"));
}

/// The shape checker refuses what it must: a member not in the set, a
/// repeated member where members are distinct, a wrong length, a wrong type.
#[test]
fn random_reply_checker_refuses_bad_replies() {
    let before: Vec<String> =
        ["a", "b", "c"].iter().map(|m| format!("{:?}", Value::Bulk(m.as_bytes().to_vec()))).collect();
    let args = |words: &[&str]| -> Vec<Vec<u8>> { words.iter().map(|w| w.as_bytes().to_vec()).collect() };
    let ok = |a: &[&str], reply: &[u8]| random_reply_ok(&args(a), &before, reply);
    assert!(ok(&["SRANDMEMBER", "k"], b"$1\r\nb\r\n").is_ok());
    assert!(ok(&["SRANDMEMBER", "k"], b"$1\r\nz\r\n").is_err());
    assert!(ok(&["SRANDMEMBER", "k"], b"*1\r\n$1\r\nb\r\n").is_err());
    assert!(ok(&["SRANDMEMBER", "k", "2"], b"*2\r\n$1\r\na\r\n$1\r\nc\r\n").is_ok());
    assert!(ok(&["SRANDMEMBER", "k", "2"], b"*2\r\n$1\r\na\r\n$1\r\na\r\n").is_err());
    assert!(ok(&["SRANDMEMBER", "k", "5"], b"*2\r\n$1\r\na\r\n$1\r\nc\r\n").is_err());
    assert!(ok(&["SRANDMEMBER", "k", "-3"], b"*3\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n").is_ok());
    assert!(ok(&["SRANDMEMBER", "k", "-3"], b"*2\r\n$1\r\na\r\n$1\r\na\r\n").is_err());
    assert!(ok(&["SPOP", "k", "5"], b"~3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n").is_ok());
    assert!(ok(&["SPOP", "k", "2"], b"~2\r\n$1\r\nb\r\n$1\r\nb\r\n").is_err());
    assert!(ok(&["SPOP", "k", "2"], b"~2\r\n$1\r\nb\r\n$1\r\nq\r\n").is_err());
    // With values: flat pairs (RESP2) or [element, value] arrays (RESP3),
    // each pair as the collection holds it.
    let before: Vec<String> = vec![
        format!("{:?} {:?}", Value::Bulk(b"a".to_vec()), Value::Bulk(b"1".to_vec())),
        format!("{:?} {:?}", Value::Bulk(b"b".to_vec()), Value::Double(2.5)),
    ];
    let ok = |a: &[&str], reply: &[u8]| random_reply_ok(&args(a), &before, reply);
    assert!(ok(&["HRANDFIELD", "k", "2", "WITHVALUES"], b"*2\r\n$1\r\na\r\n$1\r\n1\r\n").is_err());
    assert!(ok(&["HRANDFIELD", "k", "1", "WITHVALUES"], b"*2\r\n$1\r\na\r\n$1\r\n1\r\n").is_ok());
    assert!(ok(&["HRANDFIELD", "k", "1", "WITHVALUES"], b"*2\r\n$1\r\na\r\n$1\r\n2\r\n").is_err());
    let twice = b"*2\r\n*2\r\n$1\r\nb\r\n,2.5\r\n*2\r\n$1\r\nb\r\n,2.5\r\n";
    assert!(ok(&["ZRANDMEMBER", "k", "-2", "WITHSCORES"], twice).is_ok());
    assert!(ok(&["ZRANDMEMBER", "k", "2", "WITHSCORES"], twice).is_err());
    assert!(ok(&["ZRANDMEMBER", "k", "1", "WITHSCORES"], b"*1\r\n*2\r\n$1\r\nb\r\n,3\r\n").is_err());
    assert!(ok(&["ZRANDMEMBER", "k", "1", "WITHSCORES"], b"*1\r\n$1\r\nb\r\n").is_err());
}

/// With a password set: what needs AUTH, AUTH and HELLO AUTH in all their
/// forms, ACL WHOAMI, CONFIG SET requirepass (changing and clearing it).
const AUTH_SCRIPT: &str = r#"
GET k
SET k v
PING
foo
GET
CONFIG GET requirepass
ACL WHOAMI
HELLO 3
HELLO 3 SETNAME before
AUTH wrong
AUTH default wrong
AUTH nobody s3cret
AUTH a b c
HELLO 2 AUTH default wrong
HELLO 2 AUTH default s3cret SETNAME named
CLIENT GETNAME
GET k
ACL WHOAMI
ACL
ACL WHOAMI extra
AUTH s3cret
AUTH default s3cret
CONFIG GET requirepass
CONFIG SET requirepass
CONFIG SET requirepass a b
CONFIG SET nosuchparam 1
CONFIG SET requirepass x nosuchparam 1
GET k
CONFIG SET protected-mode maybe
CONFIG SET requirepass n3w
AUTH s3cret
AUTH n3w
SET k v
GET k
CONFIG SET requirepass ""
AUTH x
AUTH default anything
CONFIG SET requirepass s3cret
QUIT
"#;

#[test]
fn auth_matches_redis() {
    let redis = start_redis_with(&["--requirepass", "s3cret"]);
    let mut admin = Conn::new(redis.port);
    let mut req = Vec::new();
    encode_request(&[&b"AUTH"[..], b"s3cret"], &mut req);
    admin.call(&req);
    req.clear();
    encode_request(&[&b"INFO"[..], b"server"], &mut req);
    let text = String::from_utf8_lossy(&admin.call(&req)).into_owned();
    let version = text.lines().find_map(|l| l.strip_prefix("redis_version:")).expect("version").trim().to_string();
    let mut d = Differ::with_password(&redis, &version, Some("s3cret"));
    let failures = run_lines(&mut d, "auth", AUTH_SCRIPT);
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}

/// WATCH needs two connections: each script line runs on connection `a` or
/// `b` of redis-server and of one pmwire server over one keyspace, and the
/// replies must be equal byte for byte, in RESP2 and RESP3 (a write by the
/// other connection makes EXEC answer the null array; reads, failed writes
/// and writes to other keys do not; EXEC, DISCARD and UNWATCH forget).
#[test]
fn watch_across_two_connections_matches_redis() {
    let redis = start_redis();
    let version = redis_version(redis.port);
    let mut a = Differ::new(&redis, &version);
    // The second connection joins the first one's server and keyspace.
    let mut b_conn = Conn::new(redis.port);
    let mut req = Vec::new();
    encode_request(&[&b"CLIENT"[..], b"ID"], &mut req);
    let b_id = client_id(&b_conn.call(&req));
    let mut b_session = a.server.open_session_with_id(b_id);
    let script = [
        "a WATCH w", "b SET w theirs", "a MULTI", "a SET w mine", "a EXEC", "a GET w",
        "a WATCH w", "b GET w", "b SET other 1", "b LPUSH w x", "a MULTI", "a SET w mine", "a EXEC", "a GET w",
        "a WATCH w v", "b DEL v", "b DEL w", "a MULTI", "a PING", "a EXEC",
        "a WATCH w", "b SET w 1", "a UNWATCH", "a MULTI", "a PING", "a EXEC",
        "a WATCH w", "b SET w 2", "a MULTI", "a DISCARD", "a MULTI", "a GET w", "a EXEC",
        "b WATCH w", "a WATCH w", "b MULTI", "b INCR w", "b EXEC", "a MULTI", "a INCR w", "a EXEC", "a GET w",
        "a WATCH h", "b HSET h f v", "a HELLO 3", "a MULTI", "a HGETALL h", "a EXEC", "a HELLO 2",
        "a WATCH s", "b SADD s m", "b SREM s nosuch", "a MULTI", "a SCARD s", "a EXEC",
        "a WATCH s", "b SREM s nosuch", "b SISMEMBER s m", "a MULTI", "a SCARD s", "a EXEC",
        "a WATCH f", "b SET f 1", "a MULTI", "b FLUSHDB", "a SET f 2", "a EXEC", "a GET f",
        "a WATCH gone", "b FLUSHDB", "a MULTI", "a SET gone 1", "a EXEC", "b GET gone",
        "b MULTI", "b SET q 1", "a WATCH q", "b EXEC", "a MULTI", "a GET q", "a EXEC",
        "a WATCH z", "b ZINCRBY z 1 m", "a MULTI", "a ZCARD z", "a EXEC",
        "a WATCH z", "b ZPOPMIN z 0", "b ZREMRANGEBYSCORE z 5 6", "b ZINCRBY z 0 m", "a MULTI", "a ZCARD z", "a EXEC",
        "a WATCH z", "b ZPOPMAX z", "a MULTI", "a ZCARD z", "a EXEC",
        "a WATCH d", "b ZADD z 1 m", "b ZUNIONSTORE d 1 z", "a MULTI", "a ZCARD d", "a EXEC",
        "a WATCH d", "b ZINTERSTORE d 1 nosuch", "a MULTI", "a EXISTS d", "a EXEC",
        "a WATCH nd", "b ZINTERSTORE nd 1 nosuch", "a MULTI", "a PING", "a EXEC",
        "a WATCH h", "b HINCRBY h n 1", "a MULTI", "a HLEN h", "a EXEC",
        "a WATCH h", "b HSETNX h n 1", "b HINCRBYFLOAT h x 1.5", "a MULTI", "a HLEN h", "a EXEC",
    ];
    let mut failures = Vec::new();
    for line in script {
        let (who, command) = line.split_at(2);
        let args = args_of(command);
        let (want, got) = if who == "a " {
            let want = a.remote(&args);
            (want, a.local(&args).0)
        } else {
            req.clear();
            encode_request(&args, &mut req);
            let want = b_conn.call(&req);
            let segs: [&[u8]; 1] = [&req];
            let summary = a.parsed.parse(&segs);
            assert_eq!(summary.commands, 1);
            let mut got = Vec::new();
            a.server.execute(&mut b_session, &mut a.ks, &a.parsed.request(&segs, 0), &mut got);
            (want, got)
        };
        if want != got {
            let (want, got) = (String::from_utf8_lossy(&want), String::from_utf8_lossy(&got));
            failures.push(format!("{line}\n    redis:  {want:?}\n    pmwire: {got:?}"));
        }
    }
    println!("{} two-connection commands compared with redis-server {version}", script.len());
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}

/// Every command pmwire lists in COMMAND has Redis's arity and legacy key
/// positions (first key, last key, step) in COMMAND INFO: what clients and
/// cluster proxies read to find a command's keys.
#[test]
fn command_table_matches_redis() {
    let redis = start_redis();
    let version = redis_version(redis.port);
    let mut d = Differ::new(&redis, &version);
    let Ok(Some((Value::Array(ours), _))) = parse_reply(&d.local(&[&b"COMMAND"[..]]).0) else {
        panic!("COMMAND answers an array")
    };
    let shape = |info: &Value| -> Option<(Vec<u8>, [i64; 4])> {
        let Value::Array(f) = info else { return None };
        let int = |v: &Value| if let Value::Integer(n) = v { Some(*n) } else { None };
        let Value::Bulk(name) = f.first()? else { return None };
        Some((name.clone(), [int(&f[1])?, int(&f[3])?, int(&f[4])?, int(&f[5])?]))
    };
    let mut failures = Vec::new();
    for info in &ours {
        let (name, mine) = shape(info).expect("a command info");
        let reply = d.remote(&[&b"COMMAND"[..], b"INFO", &name]);
        let Ok(Some((Value::Array(theirs), _))) = parse_reply(&reply) else { panic!("redis COMMAND INFO") };
        let want = theirs.first().and_then(shape).map(|s| s.1);
        if want != Some(mine) {
            failures.push(format!("{}: redis {want:?}, pmwire {mine:?}", String::from_utf8_lossy(&name)));
        }
    }
    println!("{} commands' arity and key positions compared with redis-server {version}", ours.len());
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}

/// The command table's flags agree with redis-server's COMMAND INFO for
/// every command and subcommand both have (`exec::commands`): Redis's
/// `write`, `readonly`, `admin`, `blocking` and `no_auth` flags, its
/// `@connection` and `@transaction` categories, and RANDOM only where Redis
/// tips `nondeterministic_output`. Conversely, a command Redis tips so is
/// RANDOM, TIME, touches no key, or is one whose output Redis's hash order
/// makes nondeterministic and ours (ordered keys, remembered cursors) does not.
#[test]
fn command_flags_match_redis() {
    use pmwire_keyspace::exec::commands::{self, Flags};
    let redis = start_redis();
    let mut conn = Conn::new(redis.port);
    let text = |v: &Value| match v {
        Value::Simple(b) | Value::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("not text: {other:?}"),
    };
    let words = |v: &Value| match v {
        Value::Array(items) | Value::Set(items) => items.iter().map(text).collect::<Vec<String>>(),
        other => panic!("not a list: {other:?}"),
    };
    let hash_order = ["scan", "sscan", "hscan", "zscan", "object|encoding"];
    let mut compared = 0;
    let rows = commands::commands().flat_map(|c| std::iter::once(c).chain(c.subcommands()));
    for row in rows {
        let top = row.name.split('|').next().expect("a name");
        let mut req = Vec::new();
        encode_request(&[&b"COMMAND"[..], b"INFO", top.as_bytes()], &mut req);
        let (reply, _) = parse_reply(&conn.call(&req)).expect("parse").expect("whole");
        let Value::Array(mut infos) = reply else { panic!("COMMAND INFO {top}: {reply:?}") };
        let Value::Array(mut info) = infos.remove(0) else { panic!("redis has no {top}") };
        if row.is_subcommand() {
            let Value::Array(subs) = info.remove(9) else { panic!("{top} subcommands") };
            let found = subs.into_iter().find_map(|s| match s {
                Value::Array(s) if text(&s[0]) == row.name => Some(s),
                _ => None,
            });
            info = found.unwrap_or_else(|| panic!("redis has no {}", row.name));
        }
        let (flags, categories, tips) = (words(&info[2]), words(&info[6]), words(&info[7]));
        let has = |list: &[String], w: &str| list.iter().any(|x| x == w);
        let check = |flag: Flags, redis: bool, what: &str| {
            assert_eq!(row.flags.contains(flag), redis, "{}: {what} (redis flags {flags:?}, categories {categories:?})", row.name);
        };
        assert_eq!(info[1], Value::Integer(i64::from(row.arity)), "{}: arity", row.name);
        check(Flags::WRITE, has(&flags, "write"), "write");
        check(Flags::READONLY, has(&flags, "readonly"), "readonly");
        check(Flags::ADMIN, has(&flags, "admin"), "admin");
        check(Flags::BLOCKING, has(&flags, "blocking"), "blocking");
        check(Flags::NO_AUTH, has(&flags, "no_auth"), "no_auth");
        check(Flags::CONNECTION, has(&categories, "@connection"), "@connection");
        check(Flags::MULTI, has(&categories, "@transaction"), "@transaction");
        let nondeterministic = has(&tips, "nondeterministic_output");
        assert!(!row.flags.contains(Flags::RANDOM) || nondeterministic, "{}: RANDOM, redis tips {tips:?}", row.name);
        if nondeterministic {
            let keyless = !row.flags.contains(Flags::WRITE) && !row.flags.contains(Flags::READONLY);
            let explained = row.flags.contains(Flags::RANDOM) || row.flags.contains(Flags::TIME) || keyless;
            assert!(explained || hash_order.contains(&row.name), "{}: redis tips nondeterministic_output", row.name);
        }
        compared += 1;
    }
    assert_eq!(compared, 158, "every row compared");
    println!("{compared} commands and subcommands compared with redis-server {}", redis_version(redis.port));
}
