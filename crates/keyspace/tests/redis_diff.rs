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
//! The random test, the comparison rules for what is random or read from
//! the clock, and the generator are in `diff/` (shared with
//! `crates/cli/tests/kv_cluster_diff.rs`, the same run through three
//! `pmwire kv --cluster` members).

mod diff;

use diff::{client_id, redis_version, start_redis, start_redis_with, Conn, Redis, Target};
use pmwire_keyspace::exec::{Flow, Server, ServerConfig, Session};
use pmwire_keyspace::store::MemKeyspace;
use pmwire_resp::client::{encode_request, parse_reply, Value};
use pmwire_resp::inline::{split_args, Token};
use pmwire_resp::request::{Limits, Parsed};
use std::io::Write;
use std::path::Path;

/// The executor over a `MemKeyspace`, one session.
struct Local {
    server: Server,
    session: Session,
    ks: MemKeyspace,
    parsed: Parsed,
    /// Blocking pops that blocked (and timed out).
    timeouts: u64,
}

impl Target for Local {
    fn call(&mut self, request: &[u8]) -> (Vec<u8>, bool) {
        let segs: [&[u8]; 1] = [request];
        let summary = self.parsed.parse(&segs);
        assert_eq!(summary.consumed, request.len());
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
        (got, flow == Flow::Close)
    }
}

type Differ = diff::Differ<Local>;

/// A differ against the executor over a fresh `MemKeyspace`.
fn differ(redis: &Redis, version: &str) -> Differ {
    differ_with_password(redis, version, None)
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

/// The same against a redis-server started with `--requirepass`
/// `password`: the set-up connection authenticates, the compared one
/// does not.
fn differ_with_password(redis: &Redis, version: &str, password: Option<&str>) -> Differ {
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
    let config = ServerConfig { version: version.to_string().into(), requirepass, ..ServerConfig::default() };
    let mut server = Server::new(config);
    let session = server.open_session_with_id(id);
    let (ks, parsed) = (MemKeyspace::new(), Parsed::new(Limits::default()));
    diff::Differ::new(conn, Local { server, session, ks, parsed, timeouts: 0 })
}

fn run_script(redis: &Redis, version: &str, name: &str, script: &str) -> Vec<String> {
    run_lines(&mut differ(redis, version), name, script)
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
        let args = args_of(command);
        let checked = if diff::clock_id(&args) { d.check_clock_id(&args, 1000) } else { d.check(&args, sort) };
        match checked {
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



/// The keyspace's generation counter: the next one to take (1 if none was taken).
fn next_generation_of(ks: &mut MemKeyspace) -> u64 {
    use pmwire_keyspace::store::Keyspace;
    ks.internal_get(&[2]).map_or(1, |v| u64::from_le_bytes(v[..8].try_into().expect("a counter first")))
}

/// Seeded random commands over every family, compared byte for byte with
/// redis-server, switching between RESP2 and RESP3 (`diff::run_random`).
/// `PMWIRE_DIFF_COMMANDS` sets how many (CI: 20,000), `PMWIRE_DIFF_SEED`
/// the seed (printed).
#[test]
fn random_commands_match_redis() {
    let redis = start_redis();
    let version = redis_version(redis.port);
    let count = diff::env_u64("PMWIRE_DIFF_COMMANDS", 20_000);
    let seed = diff::seed();
    println!("random differential test: seed {seed} (PMWIRE_DIFF_SEED={seed} replays it), {count} commands");
    let mut g = diff::gen::Gen::new(seed);
    let mut d = differ(&redis, &version);
    // Tiny chunking limits: collections cross between blob and chunked
    // forms (and buckets split and merge) every few commands.
    d.target.server.config_mut().collections = pmwire_keyspace::chunked::ChunkConfig::tiny();
    // Stream nodes of 2 entries on both servers (entries, not bytes: the two
    // count a node's bytes differently), so appends, deletes and trims cross
    // node boundaries every few commands.
    for setting in [&["CONFIG", "SET", "stream-node-max-entries", "2"][..], &["CONFIG", "SET", "stream-node-max-bytes", "0"][..]] {
        let args: Vec<&[u8]> = setting.iter().map(|a| a.as_bytes()).collect();
        if let Err((want, got)) = d.check(&args, false) {
            panic!("{setting:?}: redis {:?}, pmwire {:?}", String::from_utf8_lossy(&want), String::from_utf8_lossy(&got));
        }
    }
    let failures = diff::run_random(&mut d, &mut g, count, |d, i, _| {
        if i % 7 == 0 {
            // The server's background collection of dead chunks, interleaved.
            pmwire_keyspace::chunked::collect_garbage(&mut d.target.ks, 3).expect("collect garbage");
        }
    });
    println!("{} blocking pops blocked and timed out", d.target.timeouts);
    let generations = next_generation_of(&mut d.target.ks) - 1;
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
    let ok = |a: &[&str], reply: &[u8]| diff::random_reply_ok(&args(a), &before, reply);
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
    let ok = |a: &[&str], reply: &[u8]| diff::random_reply_ok(&args(a), &before, reply);
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
    let mut d = differ_with_password(&redis, &version, Some("s3cret"));
    let failures = run_lines(&mut d, "auth", AUTH_SCRIPT);
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}

/// ACL users: SETUSER's rules and errors, GETUSER and LIST (each user's
/// description has at most one single-command rule: Redis emits several in
/// its dict's order), DRYRUN, the refusals of a restricted user at
/// dispatch and inside MULTI, AUTH and HELLO AUTH as users, DELUSER.
const ACL_SCRIPT: &str = r#"
ACL WHOAMI
ACL USERS
ACL LIST
ACL GETUSER default
ACL SETUSER alice on >pw1 +@string +@pubsub -get ~k* &chan
ACL GETUSER alice
ACL SETUSER bob
ACL GETUSER bob
ACL SETUSER bob on nopass +@all -@dangerous %R~r* %W~w* (+get ~x) allchannels
ACL GETUSER bob
ACL LIST
ACL SETUSER carol on #5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8 +select|0 +config|get -@all
ACL GETUSER carol
ACL SETUSER carol reset
ACL LIST
ACL SETUSER bad +nosuch
ACL SETUSER bad ~* ~x
ACL SETUSER bad &* &x
ACL SETUSER bad (+get ~x
ACL SETUSER bad #abc
ACL SETUSER bad <nopw
ACL SETUSER bad +config|get|x
ACL SETUSER bad +get|
ACL SETUSER bad %Q~x
ACL SETUSER bad +@nosuch
ACL SETUSER "sp ace" on
ACL USERS
ACL DRYRUN alice get k1
ACL DRYRUN alice set k1 v
ACL DRYRUN alice set z1 v
ACL DRYRUN alice publish chan m
ACL DRYRUN alice publish other m
ACL DRYRUN alice subscribe chan other
ACL DRYRUN bob get r1
ACL DRYRUN bob get w1
ACL DRYRUN bob get x
ACL DRYRUN bob set w1 v
ACL DRYRUN bob set w1 v get
ACL DRYRUN bob flushall
ACL DRYRUN nobody get k
ACL DRYRUN alice nosuch
ACL DRYRUN alice get
ACL CAT
ACL CAT nosuch
ACL GENPASS 0
ACL GENPASS 5000
ACL GENPASS x
ACL LOG RESET
ACL LOG
ACL LOAD
ACL SAVE
ACL DELUSER default
ACL HELP
AUTH alice wrong
AUTH nobody pw1
AUTH alice pw1
ACL WHOAMI
GET k1
SET k1 v
SET z1 v
APPEND k1 w
HSET k1 f v
MSET k1 a k2 b
MSET k1 a z2 b
PUBLISH chan m
PUBLISH other m
MULTI
ACL USERS
HELLO 3 AUTH bob anything
ACL WHOAMI
GET r1
GET w1
SET w1 v
GET x
FLUSHALL
HELLO 2 AUTH default anything
ACL SETUSER alice off
AUTH alice pw1
ACL DELUSER alice bob carol nobody
ACL USERS
"#;

#[test]
fn acl_users_match_redis() {
    let redis = start_redis();
    let version = redis_version(redis.port);
    let mut d = differ(&redis, &version);
    let failures = run_lines(&mut d, "acl", ACL_SCRIPT);
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
    let mut a = differ(&redis, &version);
    // The second connection joins the first one's server and keyspace.
    let mut b_conn = Conn::new(redis.port);
    let mut req = Vec::new();
    encode_request(&[&b"CLIENT"[..], b"ID"], &mut req);
    let b_id = client_id(&b_conn.call(&req));
    let mut b_session = a.target.server.open_session_with_id(b_id);
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
            let summary = a.target.parsed.parse(&segs);
            assert_eq!(summary.commands, 1);
            let mut got = Vec::new();
            let t = &mut a.target;
            t.server.execute(&mut b_session, &mut t.ks, &t.parsed.request(&segs, 0), &mut got);
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
    let mut d = differ(&redis, &version);
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
    // DUMP too: Redis writes a hashtable's members in its dict's order.
    let hash_order = ["scan", "sscan", "hscan", "zscan", "object|encoding", "dump"];
    // Redis tips XTRIM nondeterministic for `~`, whose result follows the
    // stream's node layout: a function of the stream-node settings and the
    // writes, the same wherever they are the same (a replicated machine's
    // executors share them).
    let node_layout = ["xtrim"];
    // Redis tips OBJECT REFCOUNT nondeterministic for its shared integers;
    // pmwire shares no value, so its answer is a function of the keyspace.
    let sharing = ["object|refcount"];
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
        check(Flags::DENYOOM, has(&flags, "denyoom"), "denyoom");
        check(Flags::CONNECTION, has(&categories, "@connection"), "@connection");
        check(Flags::MULTI, has(&categories, "@transaction"), "@transaction");
        // ACL categories: every one Redis gives, in its order (pmwire's COMMAND INFO).
        let ours = pmwire_keyspace::exec::acl_categories(row.name).map(|c| format!("@{c}")).collect::<Vec<String>>();
        assert_eq!(ours, categories, "{}: ACL categories", row.name);
        let nondeterministic = has(&tips, "nondeterministic_output");
        assert!(!row.flags.contains(Flags::RANDOM) || nondeterministic, "{}: RANDOM, redis tips {tips:?}", row.name);
        if nondeterministic {
            let keyless = !row.flags.contains(Flags::WRITE) && !row.flags.contains(Flags::READONLY);
            let explained = row.flags.contains(Flags::RANDOM) || row.flags.contains(Flags::TIME) || keyless;
            assert!(explained || hash_order.contains(&row.name) || node_layout.contains(&row.name) || sharing.contains(&row.name), "{}: redis tips nondeterministic_output", row.name);
        }
        compared += 1;
    }
    assert_eq!(compared, 297, "every row compared");
    println!("{compared} commands and subcommands compared with redis-server {}", redis_version(redis.port));
}

/// Keyspace notifications: with `notify-keyspace-events KEA` plus `n`
/// (every class, new keys), a subscriber to every channel (`PSUBSCRIBE *`)
/// receives, after each command of the script, exactly the messages
/// redis-server's subscriber receives, in the same order and byte for byte:
/// the events' names, the keyspace and keyevent channels, `del` after a
/// collection emptied, `new` before a key's first event, `expired` for a
/// key found expired. Both sides' messages are read up to a marker
/// published after each command.
#[test]
fn keyspace_notifications_match_redis() {
    let redis = start_redis();
    let version = redis_version(redis.port);
    let mut a = differ(&redis, &version);
    let mut sub = Conn::new(redis.port);
    let mut req = Vec::new();
    encode_request(&[&b"CLIENT"[..], b"ID"], &mut req);
    let sub_id = client_id(&sub.call(&req));
    let mut sub_session = a.target.server.open_session_with_id(sub_id);
    // The clock: EXPIRE in the past, and a key that expires while the script runs.
    a.target.ks.set_clock(pmwire_keyspace::store::Clock::System);
    for args in [&["FLUSHALL"][..], &["CONFIG", "SET", "notify-keyspace-events", "KEAn"]] {
        let want = a.remote(args);
        assert_eq!(want, a.local(args).0, "{args:?}");
    }
    req.clear();
    encode_request(&[&b"PSUBSCRIBE"[..], b"*"], &mut req);
    let want = sub.call(&req);
    let segs: [&[u8]; 1] = [&req];
    assert_eq!(a.target.parsed.parse(&segs).commands, 1);
    let mut got = Vec::new();
    let t = &mut a.target;
    t.server.execute(&mut sub_session, &mut t.ks, &t.parsed.request(&segs, 0), &mut got);
    assert_eq!(want, got);
    let script = [
        "SET s 1", "SET s 2 EX 100", "SET s 3 KEEPTTL", "SETNX s 4", "SETNX s2 4", "APPEND s 5", "APPEND s3 x",
        "INCR n", "DECRBY n 3", "INCRBYFLOAT n 1.5", "GETSET s 9", "MSET m1 a m2 b", "MSETNX m1 a m3 c", "SETRANGE s 0 zz",
        "SETBIT b 3 1", "GETDEL s2", "GETEX s EX 50", "GETEX s PERSIST", "GETEX s PERSIST", "PSETEX p 100000 v",
        "EXPIRE m1 100", "PEXPIRE m1 1000000", "PERSIST m1", "PERSIST m1", "EXPIRE m2 -1", "EXPIREAT m3 1",
        "DEL s nosuch n", "UNLINK b", "RENAME m1 r1", "RENAMENX r1 r2", "COPY r2 c1", "COPY r2 c1 REPLACE",
        "LPUSH l a b c", "RPUSH l d", "LPUSHX l e", "RPUSHX nol e", "LINSERT l BEFORE a x", "LINSERT l BEFORE nosuch x",
        "LSET l 0 y", "LREM l 1 x", "LREM l 1 nosuch", "LTRIM l 0 -1", "LTRIM l 1 -1", "LPOP l", "RPOP l 2",
        "LMOVE l l2 LEFT RIGHT", "RPOPLPUSH l2 l", "LMPOP 2 nol l RIGHT COUNT 9", "RPUSH l a b", "BLPOP l 1", "BRPOP l 1",
        "RPUSH l a", "LTRIM l 5 6",
        "SADD st a b c", "SADD st a", "SREM st a", "SREM st nosuch", "SMOVE st st2 b", "SMOVE st st2 c", "SADD one x", "SPOP one",
        "SADD x 1 2", "SADD y 2 3", "SINTERSTORE d x y", "SUNIONSTORE d x y", "SDIFFSTORE d x x", "SDIFFSTORE d x x",
        "HSET h f 1 g 2", "HSET h f 1", "HSETNX h f 2", "HSETNX h k 2", "HINCRBY h f 3", "HINCRBYFLOAT h f 0.5",
        "HMSET h a 1", "HDEL h nosuch", "HDEL h f g k a",
        "ZADD z 1 a 2 b", "ZADD z 1 a", "ZADD z INCR 5 a", "ZINCRBY z 1 b", "ZREM z nosuch", "ZREM z a",
        "ZADD z 3 c 4 d 5 e", "ZREMRANGEBYSCORE z 100 200", "ZREMRANGEBYSCORE z 3 3", "ZREMRANGEBYRANK z 0 0",
        "ZREMRANGEBYLEX z - +", "ZADD z 1 a 2 b 3 c", "ZPOPMIN z", "ZPOPMAX z 5", "ZADD z 1 a", "ZMPOP 1 z MIN",
        "ZADD z1 1 a", "ZADD z2 2 a", "ZUNIONSTORE zd 2 z1 z2", "ZINTERSTORE zd 2 z1 nosuch", "ZDIFFSTORE zd 1 z1",
        "ZRANGESTORE zr z2 0 -1",
        "GEOADD g 1 1 a 2 2 b", "GEOADD g 1 1 a", "GEOADD g XX CH 1.5 1 a", "GEORADIUS g 1 1 500 km",
        "GEORADIUS g 1 1 500 km STORE gd", "GEORADIUSBYMEMBER g a 500 km STOREDIST gd", "GEORADIUS g 50 50 1 km STORE gd",
        "GEORADIUS g 50 50 1 km STORE gd", "GEOSEARCHSTORE gs g FROMMEMBER a BYRADIUS 500 km STOREDIST",
        "GEOSEARCHSTORE gs nosuch FROMMEMBER a BYRADIUS 500 km", "GEORADIUS_RO g 1 1 500 km", "GEOSEARCH g FROMLONLAT 1 1 BYBOX 9 9 km",
        "XADD xs 1-1 f v", "XADD xs MAXLEN 1 2-1 f v", "XDEL xs 2-1", "XDEL xs 9-9", "XADD xs 3-1 f v",
        "XTRIM xs MAXLEN 0", "XADD xs 4-1 f v", "XSETID xs 5-0", "XGROUP CREATE xs g $", "XGROUP CREATECONSUMER xs g c",
        "XGROUP SETID xs g 0", "XGROUP DELCONSUMER xs g c", "XGROUP DESTROY xs g", "XGROUP CREATE xn g $ MKSTREAM",
        "XGROUP CREATE xs g2 0", "XREADGROUP GROUP g2 alice STREAMS xs >", "XCLAIM xs g2 mike 0 4-1 FORCE",
        "XAUTOCLAIM xs g2 alice 0 0", "XAUTOCLAIM xs g2 bob 0 0",
        "SET e 1 PX 1", "SET e2 1 PX 1", "DEBUG_SLEEP", "GET e", "EXISTS e2",
        "MULTI", "SET t 1", "LPUSH tl 1", "EXEC", "EVAL \"redis.call('set','sk','v') return redis.call('del','sk')\" 0",
        "FLUSHALL",
    ];
    let mut failures = Vec::new();
    let mut in_multi = false;
    for (n, line) in script.iter().enumerate() {
        if *line == "DEBUG_SLEEP" {
            std::thread::sleep(std::time::Duration::from_millis(20));
            continue;
        }
        let args = args_of(line);
        let (want, got) = (a.remote(&args), a.local(&args).0);
        if want != got {
            failures.push(format!("{line} replied\n    redis:  {:?}\n    pmwire: {:?}", String::from_utf8_lossy(&want), String::from_utf8_lossy(&got)));
        }
        // The marker: published after the command on both sides (after
        // EXEC for a transaction's commands).
        in_multi = (in_multi || *line == "MULTI") && *line != "EXEC";
        if in_multi {
            continue;
        }
        let marker = format!("marker{n}");
        let publish = [&b"PUBLISH"[..], b"sync", marker.as_bytes()];
        a.remote(&publish);
        a.local(&publish);
        let mut marker_msg = Vec::new();
        encode_request(&[&b"pmessage"[..], b"*", b"sync", marker.as_bytes()], &mut marker_msg);
        let mut redis_msgs = Vec::new();
        loop {
            req.clear();
            let msg = sub.call(&req);
            if msg == marker_msg {
                break;
            }
            redis_msgs.push(String::from_utf8_lossy(&msg).into_owned());
        }
        let mut ours = Vec::new();
        for (client, bytes) in a.target.server.take_pushes() {
            assert_eq!(client, sub_id, "only the subscriber gets messages");
            if bytes != marker_msg {
                ours.push(String::from_utf8_lossy(&bytes).into_owned());
            }
        }
        if redis_msgs != ours {
            failures.push(format!("{line} published\n    redis:  {redis_msgs:?}\n    pmwire: {ours:?}"));
        }
    }
    println!("{} commands' keyspace events compared with redis-server {version}", script.len());
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}
