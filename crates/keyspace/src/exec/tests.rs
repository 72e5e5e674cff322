use super::*;
use crate::store::{Expiry, MemKeyspace, StoreLimits, ValueSource};
use pmwire_resp::request::Parsed;
use std::sync::Arc;

use super::fixture::Fixture;

#[test]
fn pipeline_sees_its_own_writes() {
    let mut f = Fixture::new();
    assert_eq!(f.run("SET a 1\r\nINCR a\r\nGET a\r\nDEL a\r\nGET a"), "+OK\r\n:2\r\n$1\r\n2\r\n:1\r\n$-1\r\n");
}

/// A sink that records which stored values were sent by handle.
#[derive(Default)]
struct GatherSink {
    bytes: Vec<u8>,
    values: Vec<Arc<[u8]>>,
}

impl ReplySink<Arc<[u8]>> for GatherSink {
    fn bytes(&mut self, data: &[u8]) {
        self.bytes.extend_from_slice(data);
    }
    fn value(&mut self, value: &Arc<[u8]>, len: u64) {
        assert_eq!(value.len() as u64, len);
        self.values.push(value.clone());
        self.bytes.extend_from_slice(b"<value>");
    }
}

#[test]
fn get_and_mget_send_values_by_handle() {
    let mut f = Fixture::new();
    f.run("SET k hello");
    let input = b"GET k\r\nMGET k k\r\n";
    let segs: [&[u8]; 1] = [input];
    let mut p = Parsed::new(Limits::default());
    p.parse(&segs);
    let mut sink = GatherSink::default();
    for i in 0..2 {
        f.server.execute(&mut f.session, &mut f.ks, &p.request(&segs, i), &mut sink);
    }
    assert_eq!(sink.bytes, b"$5\r\n<value>\r\n*2\r\n$5\r\n<value>\r\n$5\r\n<value>\r\n");
    assert_eq!(sink.values.len(), 3);
    // The handle outlives an overwrite later in the batch.
    f.run("SET k other");
    assert_eq!(&*sink.values[0], b"hello");
}

/// A keyspace that records how SET values arrive.
struct Recording {
    inner: MemKeyspace,
    pieces: Vec<usize>,
}

impl Keyspace for Recording {
    type Value = Arc<[u8]>;
    fn get(&mut self, key: &[u8]) -> Option<Stored<Arc<[u8]>>> {
        self.inner.get(key)
    }
    fn read(&self, value: &Arc<[u8]>, out: &mut Vec<u8>) {
        self.inner.read(value, out)
    }
    fn put(&mut self, key: &[u8], kind: Kind, value: ValueSource<'_>, expiry: Expiry) -> Result<(), StoreError> {
        if let ValueSource::Arg(a) = &value {
            self.pieces.push(a.pieces.len());
        }
        self.inner.put(key, kind, value, expiry)
    }
    fn set_deadline(&mut self, key: &[u8], deadline_ms: Option<u64>) -> Result<bool, StoreError> {
        self.inner.set_deadline(key, deadline_ms)
    }
    fn now_ms(&self) -> u64 {
        self.inner.now_ms()
    }
    fn expired(&self, limit: usize) -> Vec<Vec<u8>> {
        self.inner.expired(limit)
    }
    fn expiring_len(&self) -> u64 {
        self.inner.expiring_len()
    }
    fn used_memory(&self) -> u64 {
        self.inner.used_memory()
    }
    fn delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        self.inner.delete(key)
    }
    fn scan(&mut self, after: Option<&[u8]>, limit: usize, visit: &mut dyn FnMut(&[u8], Kind)) -> usize {
        self.inner.scan(after, limit, visit)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn clear(&mut self) -> Result<(), StoreError> {
        self.inner.clear()
    }
}

#[test]
fn set_stores_split_values_from_their_pieces() {
    let req = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$8\r\nabcdefgh\r\n";
    let (a, b) = req.split_at(28);
    let segs: [&[u8]; 2] = [a, b];
    let mut p = Parsed::new(Limits::default());
    assert_eq!(p.parse(&segs).commands, 1);
    let mut server = Server::new(ServerConfig::default());
    let mut session = server.open_session();
    let mut ks = Recording { inner: MemKeyspace::new(), pieces: Vec::new() };
    let mut out: Vec<u8> = Vec::new();
    server.execute(&mut session, &mut ks, &p.request(&segs, 0), &mut out);
    assert_eq!(out, b"+OK\r\n");
    assert_eq!(ks.pieces, vec![2]);
    let v = ks.inner.get(b"k").unwrap();
    assert_eq!(&*v.value, b"abcdefgh");
}

#[test]
fn documented_differences_from_redis() {
    let mut f = Fixture::new();
    assert_eq!(f.run("SELECT 1"), "-ERR DB index is out of range\r\n");
    assert_eq!(f.run("CONFIG GET databases"), "*2\r\n$9\r\ndatabases\r\n$1\r\n1\r\n");
    assert_eq!(f.run("COMMAND DOCS"), "*0\r\n");
    assert_eq!(f.run("GET k"), "$-1\r\n");
    assert_eq!(f.run("SCAN 12345"), "-ERR invalid cursor\r\n");
    // Always durable: appendonly is yes, and stays so.
    assert_eq!(f.run("CONFIG GET appendonly"), "*2\r\n$10\r\nappendonly\r\n$3\r\nyes\r\n");
    assert_eq!(f.run("CONFIG SET appendonly yes"), "+OK\r\n");
    assert_eq!(
        f.run("CONFIG SET appendonly no"),
        "-ERR CONFIG SET failed (possibly related to argument 'appendonly') - pmwire cannot turn persistence off: every write is durable in its pool before its reply\r\n"
    );
    assert!(f.run("CONFIG SET maxmemory-policy allkeys-lru").starts_with("-ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - pmwire does not evict keys"));
    assert_eq!(f.run("CONFIG SET maxmemory-policy noeviction"), "+OK\r\n");
    // `save` is taken and shown back, and changes nothing else.
    assert_eq!(f.run("CONFIG SET save \"60 1000\""), "+OK\r\n");
    assert_eq!(f.run("CONFIG GET save"), "*2\r\n$4\r\nsave\r\n$7\r\n60 1000\r\n");
    assert_eq!(f.run("COPY k k2 DB 1"), "-ERR DB index is out of range\r\n");
}

#[test]
fn protected_mode_refuses_remote_peers_only_without_a_password() {
    let mut server = Server::new(ServerConfig::default());
    assert_eq!(server.refuse_peer(true), None);
    assert!(server.refuse_peer(false).is_some_and(|m| m.starts_with(b"-DENIED Redis is running in protected mode")));
    let mut session = server.open_session();
    let mut ks = MemKeyspace::new();
    let mut run = |server: &mut Server, session: &mut Session, line: &str| {
        let req = format!("{line}\r\n");
        let segs: [&[u8]; 1] = [req.as_bytes()];
        let mut p = Parsed::new(Limits::default());
        assert_eq!(p.parse(&segs).commands, 1);
        let mut out: Vec<u8> = Vec::new();
        server.execute(session, &mut ks, &p.request(&segs, 0), &mut out);
        String::from_utf8(out).unwrap()
    };
    assert_eq!(run(&mut server, &mut session, "CONFIG SET requirepass pw"), "+OK\r\n");
    assert_eq!(server.refuse_peer(false), None, "a password lifts protected mode");
    // The session opened without a password stays authenticated (as in Redis); a new one does not.
    assert_eq!(run(&mut server, &mut session, "PING"), "+PONG\r\n");
    let mut fresh = server.open_session();
    assert_eq!(run(&mut server, &mut fresh, "PING"), "-NOAUTH Authentication required.\r\n");
    assert_eq!(run(&mut server, &mut fresh, "AUTH pw"), "+OK\r\n");
    assert_eq!(run(&mut server, &mut fresh, "PING"), "+PONG\r\n");
    assert_eq!(run(&mut server, &mut session, "CONFIG SET requirepass \"\" protected-mode no"), "+OK\r\n");
    assert_eq!(server.refuse_peer(false), None, "protected mode off");
}

#[test]
fn command_and_info() {
    let mut f = Fixture::new();
    assert_eq!(f.run("COMMAND COUNT"), format!(":{}\r\n", commands::commands().count()));
    let info = f.run("COMMAND INFO get nosuch");
    assert!(info.starts_with("*2\r\n*10\r\n$3\r\nget\r\n:2\r\n"), "{info}");
    assert!(info.ends_with("*-1\r\n"), "{info}");
    let all = f.run("COMMAND");
    assert!(all.starts_with(&format!("*{}\r\n", commands::commands().count())));
    let text = f.run("INFO");
    assert!(text.starts_with('$'));
    assert!(text.contains("redis_version:7.0.15\r\n"));
    assert!(text.contains("# Keyspace\r\n"));
    f.run("SET a b");
    assert!(f.run("INFO keyspace").contains("db0:keys=1,expires=0,avg_ttl=0"));
    assert_eq!(f.run("INFO nosuchsection"), "$0\r\n\r\n");
    f.run("HELLO 3");
    let v = f.run("INFO server");
    assert!(v.starts_with('='), "{v}");
    assert!(v.contains("txt:# Server\r\n"));
}

#[test]
fn quit_closes() {
    let mut f = Fixture::new();
    let input = b"QUIT\r\n";
    let segs: [&[u8]; 1] = [input];
    let mut p = Parsed::new(Limits::default());
    p.parse(&segs);
    let mut out: Vec<u8> = Vec::new();
    assert_eq!(f.server.execute(&mut f.session, &mut f.ks, &p.request(&segs, 0), &mut out), Flow::Close);
    assert_eq!(out, b"+OK\r\n");
}

#[test]
fn scan_visits_each_key_once_under_changes() {
    let mut f = Fixture::new();
    for i in 0..100 {
        f.run(&format!("SET key{i:03} v"));
    }
    let mut seen = std::collections::BTreeMap::new();
    let mut cursor = "0".to_string();
    let mut rounds = 0;
    loop {
        let reply = f.run(&format!("SCAN {cursor} COUNT 7"));
        let (v, _) = pmwire_resp::client::parse_reply(reply.as_bytes()).unwrap().unwrap();
        let pmwire_resp::client::Value::Array(parts) = v else { panic!("{reply}") };
        let pmwire_resp::client::Value::Bulk(c) = &parts[0] else { panic!() };
        let pmwire_resp::client::Value::Array(keys) = &parts[1] else { panic!() };
        for k in keys {
            let pmwire_resp::client::Value::Bulk(k) = k else { panic!() };
            *seen.entry(k.clone()).or_insert(0) += 1;
        }
        // Changes during the iteration: delete a key not yet seen, add one.
        if rounds == 3 {
            f.run("DEL key099\r\nSET key050x v\r\nSET aaa v");
        }
        cursor = String::from_utf8(c.clone()).unwrap();
        rounds += 1;
        if cursor == "0" {
            break;
        }
        assert!(rounds < 100);
    }
    for i in 0..99 {
        assert_eq!(seen.get(format!("key{i:03}").as_bytes()), Some(&1), "key{i:03}");
    }
    assert!(seen.values().all(|&n| n == 1));
    assert!(!seen.contains_key(&b"key099"[..]));
}

#[test]
fn store_errors_become_replies_and_mset_is_all_or_nothing() {
    let limits = StoreLimits { max_key_bytes: 8, max_value_bytes: 16 };
    let mut f = Fixture::with(ServerConfig::default(), MemKeyspace::with_limits(limits, Some(2)));
    assert_eq!(f.run("SET a 1\r\nSET b 2"), "+OK\r\n+OK\r\n");
    assert_eq!(f.run("SET c 3"), "-OOM command not allowed when used memory > 'maxmemory'.\r\n");
    assert_eq!(f.run("SET a 0123456789abcdefXYZ"), "-ERR value is too long (19 bytes, at most 16)\r\n");
    assert_eq!(f.run("MSET a x toolongkey123 y"), "-ERR key is too long (13 bytes, at most 8)\r\n");
    assert_eq!(f.run("GET a"), "$1\r\n1\r\n");
}

#[test]
fn corrupt_blob_is_an_error_not_a_crash() {
    let mut f = Fixture::new();
    f.ks.set(b"h", Kind::Hash, ValueSource::Owned(vec![9, 0, 0, 0])).unwrap();
    assert_eq!(f.run("HGET h f"), "-ERR stored value is corrupt: blob truncated\r\n");
    f.ks.set(b"z", Kind::ZSet, ValueSource::Owned(vec![0, 0, 0, 0, 1])).unwrap();
    assert_eq!(f.run("ZCARD z"), "-ERR stored value is corrupt: blob has trailing bytes\r\n");
}

#[test]
fn unknown_command_error_is_cut_like_redis() {
    let mut f = Fixture::new();
    let long = "x".repeat(200);
    let reply = f.run(&format!("{long} {long} b"));
    let want =
        format!("-ERR unknown command '{}', with args beginning with: '{}' \r\n", "x".repeat(128), "x".repeat(128));
    assert_eq!(reply, want);
}

#[test]
fn hello_switches_protocol_and_reports_identity() {
    let mut f = Fixture::new();
    let id = f.session.id();
    let r = f.run("HELLO 3");
    assert_eq!(
        r,
        format!(
            "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:{id}\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
        )
    );
    assert_eq!(f.session.protocol, Protocol::Resp3);
    assert_eq!(f.run("GET nope"), "_\r\n");
    assert!(f.run("HELLO 2").starts_with("*14\r\n"));
    assert_eq!(f.run("GET nope"), "$-1\r\n");
}

/// Integer arguments at the edges of `i64` in every command that does
/// arithmetic with them: each gets a reply, none panics.
#[test]
fn extreme_integer_arguments_get_replies_not_panics() {
    let mut f = Fixture::new();
    f.run("ZADD z 1 a 2 b 3 c\r\nSET n 5\r\nSET big 9223372036854775807\r\nSET small -9223372036854775808");
    let (min, max) = (i64::MIN, i64::MAX);
    for (command, want) in [
        (format!("ZRANGEBYSCORE z -inf +inf LIMIT 0 {min}"), "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"),
        (format!("ZRANGE z -inf +inf BYSCORE LIMIT 1 {min}"), "*2\r\n$1\r\nb\r\n$1\r\nc\r\n"),
        (format!("ZRANGE z +inf -inf BYSCORE REV LIMIT 0 {min}"), "*3\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n"),
        (format!("ZRANGE z [a + BYLEX LIMIT 0 {min}"), "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"),
        (format!("ZRANGEBYSCORE z -inf +inf LIMIT {min} {min}"), "*0\r\n"),
        (format!("ZRANGEBYSCORE z -inf +inf LIMIT {max} {max}"), "*0\r\n"),
        (format!("ZRANGE z {min} {max}"), "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"),
        (format!("ZRANGE z {max} {min}"), "*0\r\n"),
        (format!("ZRANGE z {min} {min} REV"), "*0\r\n"),
        ("INCRBY big 1".to_string(), "-ERR increment or decrement would overflow\r\n"),
        ("DECRBY small 1".to_string(), "-ERR increment or decrement would overflow\r\n"),
        (format!("DECRBY n {min}"), "-ERR decrement would overflow\r\n"),
        (format!("INCRBY n {min}"), ":-9223372036854775803\r\n"),
        (format!("SCAN 0 COUNT {max}"), "*2\r\n$1\r\n0\r\n*4\r\n$3\r\nbig\r\n$1\r\nn\r\n$5\r\nsmall\r\n$1\r\nz\r\n"),
        ("SCAN 18446744073709551615".to_string(), "-ERR invalid cursor\r\n"),
        (format!("SET k v EX {max}"), "-ERR invalid expire time in 'set' command\r\n"),
        (format!("SET k v PX {max}"), "-ERR invalid expire time in 'set' command\r\n"),
        (format!("SET k v PXAT {max}"), "+OK\r\n"),
        ("PEXPIRETIME k".to_string(), ":9223372036854775807\r\n"),
        ("EXPIRETIME k".to_string(), ":9223372036854776\r\n"),
        (format!("EXPIRE k {max}"), "-ERR invalid expire time in 'expire' command\r\n"),
        (format!("EXPIREAT k {min}"), "-ERR invalid expire time in 'expireat' command\r\n"),
        (format!("PEXPIREAT k {min}"), ":1\r\n"),
        (format!("SETEX k {max} v"), "-ERR invalid expire time in 'setex' command\r\n"),
        (format!("PSETEX k {min} v"), "-ERR invalid expire time in 'psetex' command\r\n"),
        (format!("SELECT {min}"), "-ERR value is not an integer or out of range\r\n"),
    ] {
        assert_eq!(f.run(&command), want, "{command}");
    }
}

/// Every row of the table is dispatched (an undispatched one would reach
/// `unreachable!`), subcommands included, and COMMAND COUNT counts the
/// lists, sets, OBJECT, the completed hashes and sorted sets, the bit commands,
/// the script commands, TIME, SAVE, BGSAVE, LASTSAVE, pub/sub, RESET, streams and consumer groups,
/// FCALL and FCALL_RO, MONITOR, and the GEO commands.
#[test]
fn every_command_in_the_table_is_served() {
    let mut f = Fixture::new();
    assert_eq!(commands::commands().count(), 212);
    let containers = ["acl", "client", "cluster", "config", "function", "memory", "object", "pubsub", "script", "xgroup", "xinfo"];
    let rows = commands::commands().flat_map(|c| std::iter::once(c).chain(c.subcommands()));
    for spec in rows.filter(|s| s.name != "quit" && !containers.contains(&s.name)) {
        let words = spec.name.replace('|', " ");
        let argc = spec.arity.unsigned_abs() as usize;
        let given = words.split(' ').count();
        let args = ["x"; 8][..argc.saturating_sub(given)].join(" ");
        let reply = f.run(&format!("{words} {args}"));
        assert!(!reply.starts_with("-ERR unknown"), "{}: {reply}", spec.name);
        assert!(!reply.starts_with("-ERR wrong number"), "{}: {reply}", spec.name);
    }
}

/// The table's lookups: any case, subcommands by `container|sub` or by
/// request, and flags that never contradict each other.
#[test]
fn the_command_table_answers_lookups() {
    let set = commands::lookup(b"SeT").expect("SET");
    assert_eq!((set.name, set.arity), ("set", -3));
    assert!(set.flags.contains(Flags::WRITE.union(Flags::TIME)));
    assert!(!set.flags.contains(Flags::READONLY));
    assert_eq!(commands::lookup(b"client|ID").map(|c| c.name), Some("client|id"));
    assert!(commands::lookup(b"nosuch").is_none());
    let mut parsed = Parsed::new(Limits::default());
    let input = b"CLIENT setname n\r\nCLIENT nosuch\r\nCLIENT\r\nGET k\r\nFOO\r\nclient|id\r\n";
    let segments: [&[u8]; 1] = [input];
    assert_eq!(parsed.parse(&segments).commands, 6);
    let names: Vec<Option<&str>> = (0..6).map(|i| commands::of_request(&parsed.request(&segments, i)).map(|c| c.name)).collect();
    assert_eq!(names, [Some("client|setname"), None, Some("client"), Some("get"), None, None]);
    let mut f = Fixture::new();
    assert!(f.run("client|id").starts_with("-ERR unknown command 'client|id'"), "a subcommand is no command");
    for spec in commands::commands().flat_map(|c| std::iter::once(c).chain(c.subcommands())) {
        let f = spec.flags;
        assert!(!(f.contains(Flags::WRITE) && f.contains(Flags::READONLY)), "{}", spec.name);
        let keyed = f.contains(Flags::WRITE) || f.contains(Flags::READONLY);
        assert!(keyed || !f.contains(Flags::RANDOM), "{}: a random draw over no key", spec.name);
        assert!(!spec.is_container() || f == Flags::NONE || spec.name == "command", "{}", spec.name);
    }
    let written: Vec<&str> = Flags::WRITE.union(Flags::BLOCKING).names().collect();
    assert_eq!(written, ["write", "blocking"]);
}

/// The table is sorted by name (lookups search it) and each subcommand
/// follows its container or a sibling.
#[test]
fn the_table_is_sorted() {
    let rows: Vec<&CommandInfo> = commands::commands().flat_map(|c| std::iter::once(c).chain(c.subcommands())).collect();
    assert_eq!(rows.len(), 297, "every row is a command or a subcommand found after its container");
    for pair in rows.windows(2) {
        assert!(pair[0].name < pair[1].name, "{} before {}", pair[0].name, pair[1].name);
    }
    for row in &rows {
        assert_eq!(commands::lookup(row.name.to_ascii_uppercase().as_bytes()), Some(*row));
    }
}

/// COMMAND INFO reports the flags, categories and tip of the table.
#[test]
fn command_info_reports_flags() {
    let mut f = Fixture::new();
    let spop = f.run("COMMAND INFO spop");
    let want = "*1\r\n*10\r\n$4\r\nspop\r\n:-2\r\n*1\r\n+write\r\n:1\r\n:1\r\n:1\r\n*3\r\n+@write\r\n+@set\r\n+@fast\r\n*1\r\n$23\r\nnondeterministic_output\r\n*0\r\n*0\r\n";
    assert_eq!(spop, want);
    let client = f.run("COMMAND INFO client");
    assert!(client.contains("$14\r\nclient|unblock\r\n:-3\r\n*1\r\n+admin\r\n"), "{client}");
    assert!(client.contains("*2\r\n+@slow\r\n+@connection\r\n"), "{client}");
}

#[test]
fn object_encoding_answers_as_redis_and_type_names_kinds() {
    let mut f = Fixture::new();
    f.run("SET s 12\r\nRPUSH l a\r\nSADD t 1\r\nHSET h f v\r\nZADD z 1 m");
    let kinds = [("s", "string", "int"), ("l", "list", "quicklist"), ("t", "set", "intset"), ("h", "hash", "listpack"), ("z", "zset", "listpack")];
    for (key, kind, encoding) in kinds {
        assert_eq!(f.run(&format!("TYPE {key}")), format!("+{kind}\r\n"));
        assert_eq!(f.run(&format!("OBJECT ENCODING {key}")), format!("${}\r\n{encoding}\r\n", encoding.len()));
    }
    assert_eq!(f.run("OBJECT ENCODING nope"), "$-1\r\n");
    assert_eq!(f.run("OBJECT FREQ s"), "-ERR unknown subcommand 'FREQ'. Try OBJECT HELP.\r\n");
    assert_eq!(f.run("OBJECT ENCODING"), "-ERR wrong number of arguments for 'object|encoding' command\r\n");
    assert_eq!(f.run("SCAN 0 TYPE list"), "*2\r\n$1\r\n0\r\n*1\r\n$1\r\nl\r\n");
    assert_eq!(f.run("SCAN 0 TYPE set"), "*2\r\n$1\r\n0\r\n*1\r\n$1\r\nt\r\n");
}

/// MEMORY USAGE: the key's bytes plus the value's as stored, null for a
/// missing key; SAMPLES checked; OBJECT REFCOUNT 1 (nothing is shared).
#[test]
fn memory_usage_counts_key_and_stored_value() {
    let mut f = Fixture::new();
    f.run("SET s hello\r\nRPUSH l a b c");
    assert_eq!(f.run("MEMORY USAGE s"), ":6\r\n");
    assert_eq!(f.run("MEMORY USAGE s SAMPLES 0"), ":6\r\n");
    let list: i64 = f.run("MEMORY USAGE l").trim_start_matches(':').trim_end().parse().expect("an integer");
    assert!(list > 1 + 3, "{list}");
    assert_eq!(f.run("MEMORY USAGE nope"), "$-1\r\n");
    assert_eq!(f.run("MEMORY USAGE s SAMPLES x"), "-ERR value is not an integer or out of range\r\n");
    assert_eq!(f.run("MEMORY USAGE s BOGUS"), "-ERR syntax error\r\n");
    assert_eq!(f.run("OBJECT REFCOUNT l"), ":1\r\n");
}

/// The members of a flat array or set reply.
fn members(reply: &str) -> Vec<String> {
    let (v, _) = pmwire_resp::client::parse_reply(reply.as_bytes()).unwrap().unwrap();
    let (pmwire_resp::client::Value::Array(items) | pmwire_resp::client::Value::Set(items)) = v else { panic!("{reply}") };
    items
        .into_iter()
        .map(|i| match i {
            pmwire_resp::client::Value::Bulk(b) => String::from_utf8(b).unwrap(),
            other => panic!("{other:?}"),
        })
        .collect()
}

/// SPOP and SRANDMEMBER: the same seed draws the same members; the rules
/// for positive and negative counts; a negative count beyond the bound is
/// refused rather than answered.
#[test]
fn random_members_follow_the_seed_and_the_count_rules() {
    let draw = |seed: u64| {
        let mut server = Server::new(ServerConfig { random_seed: seed, ..ServerConfig::default() });
        let session = server.open_session();
        let mut f = Fixture { server, session, ks: MemKeyspace::new() };
        f.run("SADD s a b c d e f g h");
        (f.run("SRANDMEMBER s 3"), f.run("SPOP s 2"), f.run("SMEMBERS s"))
    };
    assert_eq!(draw(7), draw(7));
    assert_ne!(draw(7), draw(8), "another seed, other members (one chance in thousands to fail)");
    let mut f = Fixture::new();
    f.run("SADD s a b c");
    let distinct = members(&f.run("SRANDMEMBER s 5"));
    assert_eq!(distinct.len(), 3);
    let mut sorted = distinct.clone();
    sorted.sort();
    assert_eq!(sorted, ["a", "b", "c"]);
    let repeated = members(&f.run("SRANDMEMBER s -50"));
    assert_eq!(repeated.len(), 50);
    assert!(repeated.iter().all(|m| ["a", "b", "c"].contains(&m.as_str())));
    let over = format!("SRANDMEMBER s -{}", MAX_RANDOM_REPLY + 1);
    assert!(f.run(&over).starts_with("-ERR value is out of range, pmwire answers at most"));
    assert_eq!(members(&f.run(&format!("SRANDMEMBER s -{MAX_RANDOM_REPLY}"))).len() as u64, MAX_RANDOM_REPLY);
    // Members of 100 bytes: 2^20 draws would be 100 MiB, over the byte bound.
    let long = "x".repeat(100);
    f.run(&format!("SADD big {long}"));
    assert!(f.run(&format!("SRANDMEMBER big -{MAX_RANDOM_REPLY}")).starts_with("-ERR value is out of range"));
    let fits = MAX_RANDOM_REPLY_BYTES / 100;
    assert_eq!(members(&f.run(&format!("SRANDMEMBER big -{fits}"))).len() as u64, fits);
    let popped = members(&f.run("SPOP s 2"));
    let left = members(&f.run("SMEMBERS s"));
    assert_eq!(popped.len() + left.len(), 3);
    assert!(popped.iter().all(|m| !left.contains(m)));
}

/// SSCAN answers a member present for the whole iteration exactly once,
/// whatever is added or removed meanwhile.
#[test]
fn sscan_visits_each_member_once_under_changes() {
    let mut f = Fixture::new();
    for i in 0..100 {
        f.run(&format!("SADD s m{i:03}"));
    }
    let mut seen = std::collections::BTreeMap::new();
    let mut cursor = "0".to_string();
    for round in 0.. {
        assert!(round < 100);
        let reply = f.run(&format!("SSCAN s {cursor} COUNT 7"));
        let (v, _) = pmwire_resp::client::parse_reply(reply.as_bytes()).unwrap().unwrap();
        let pmwire_resp::client::Value::Array(parts) = v else { panic!("{reply}") };
        let pmwire_resp::client::Value::Bulk(c) = &parts[0] else { panic!() };
        for m in members(&reply[reply.find("\r\n*").unwrap() + 2..]) {
            *seen.entry(m).or_insert(0) += 1;
        }
        if round == 3 {
            f.run("SREM s m099\r\nSADD s m050x\r\nSADD s aaa");
        }
        cursor = String::from_utf8(c.clone()).unwrap();
        if cursor == "0" {
            break;
        }
    }
    for i in 0..99 {
        assert_eq!(seen.get(&format!("m{i:03}")), Some(&1), "m{i:03}");
    }
    assert!(seen.values().all(|&n| n == 1));
    assert!(!seen.contains_key("m099"));
}

/// A list or set that would outgrow the store's value limit is refused with
/// the store's error and left as it was; bad counts and indexes at the
/// edges of `i64` get replies, not panics.
#[test]
fn collections_are_bounded_by_the_store() {
    let limits = StoreLimits { max_key_bytes: 8, max_value_bytes: 40 };
    let mut f = Fixture::with(ServerConfig::default(), MemKeyspace::with_limits(limits, None));
    assert_eq!(f.run("RPUSH l aaaaaaaa bbbbbbbb cccccccc"), ":3\r\n");
    assert_eq!(f.run("RPUSH l dddddddd"), "-ERR value is too long (52 bytes, at most 40)\r\n");
    assert_eq!(f.run("LLEN l"), ":3\r\n");
    assert_eq!(
        f.run("SADD s aaaaaaaa bbbbbbbb cccccccc dddddddd"),
        "-ERR value is too long (52 bytes, at most 40)\r\n"
    );
    assert_eq!(f.run("EXISTS s"), ":0\r\n");
    // Moves that would overflow the destination (or name a key too long)
    // are refused whole: the source keeps its element.
    f.run("RPUSH m dddddddd\r\nSADD t aaaaaaaa bbbbbbbb cccccccc\r\nSADD u dddddddd");
    assert_eq!(f.run("RPOPLPUSH m l"), "-ERR value is too long (52 bytes, at most 40)\r\n");
    assert_eq!(f.run("LMOVE m toolongkey LEFT LEFT"), "-ERR key is too long (10 bytes, at most 8)\r\n");
    assert_eq!(f.run("LLEN m"), ":1\r\n");
    assert_eq!(f.run("SMOVE u t dddddddd"), "-ERR value is too long (52 bytes, at most 40)\r\n");
    assert_eq!(f.run("SMOVE u toolongkey dddddddd"), "-ERR key is too long (10 bytes, at most 8)\r\n");
    assert_eq!(f.run("SCARD u"), ":1\r\n");
    f.run("DEL m t u");
    let (min, max) = (i64::MIN, i64::MAX);
    for (command, want) in [
        (format!("LRANGE l {min} {max}"), "*3\r\n$8\r\naaaaaaaa\r\n$8\r\nbbbbbbbb\r\n$8\r\ncccccccc\r\n"),
        (format!("LINDEX l {min}"), "$-1\r\n"),
        (format!("LSET l {max} x"), "-ERR index out of range\r\n"),
        (format!("LREM l {min} zz"), ":0\r\n"),
        (format!("LPOS l aaaaaaaa RANK {min} COUNT {max} MAXLEN {max}"), "*1\r\n:0\r\n"),
        (format!("LPOP l {max}"), "*3\r\n$8\r\naaaaaaaa\r\n$8\r\nbbbbbbbb\r\n$8\r\ncccccccc\r\n"),
        (format!("SPOP s {max}"), "*0\r\n"),
        (format!("SINTERCARD {max} s"), "-ERR Number of keys can't be greater than number of args\r\n"),
        (format!("SSCAN s 0 COUNT {max}"), "*2\r\n$1\r\n0\r\n*0\r\n"),
    ] {
        assert_eq!(f.run(&command), want, "{command}");
    }
}

#[test]
fn corrupt_list_and_set_blobs_are_errors() {
    let mut f = Fixture::new();
    f.ks.set(b"l", Kind::List, ValueSource::Owned(vec![2, 0, 0, 0, 0, 0, 0, 0])).unwrap();
    assert_eq!(f.run("LLEN l"), "-ERR stored value is corrupt: blob truncated\r\n");
    f.ks.set(b"s", Kind::Set, ValueSource::Owned(vec![2, 0, 0, 0, 1, 0, 0, 0, b'b', 1, 0, 0, 0, b'a'])).unwrap();
    assert_eq!(f.run("SCARD s"), "-ERR stored value is corrupt: set blob out of order\r\n");
    // An empty collection is never stored: one found is corrupt, not popped from.
    f.ks.set(b"e", Kind::Set, ValueSource::Owned(vec![0, 0, 0, 0])).unwrap();
    assert_eq!(f.run("SPOP e"), "-ERR stored value is corrupt: empty collection stored\r\n");
    f.ks.set(b"e", Kind::List, ValueSource::Owned(vec![0, 0, 0, 0])).unwrap();
    assert_eq!(f.run("RPOPLPUSH e x"), "-ERR stored value is corrupt: empty collection stored\r\n");
}

#[test]
fn cursor_table_is_bounded_in_bytes() {
    let mut cursors = Cursors::default();
    let big = vec![7u8; CURSOR_BYTES / 3 + 1];
    let first = cursors.insert(big.clone(), 4096);
    for _ in 0..5 {
        cursors.insert(big.clone(), 4096);
    }
    assert!(cursors.bytes <= CURSOR_BYTES);
    assert_eq!(cursors.order.len(), 2);
    assert!(!cursors.keys.contains_key(&first));
}

/// A fixture whose keyspace reads a fixed clock, moved by the test.
fn at(ms: u64) -> Fixture {
    let mut ks = MemKeyspace::new();
    ks.set_clock(crate::store::Clock::Fixed(ms));
    Fixture::with(ServerConfig::default(), ks)
}

/// With an injected clock: a key is served until its deadline and never
/// at or after it, by any command; DBSIZE counts it until it is deleted
/// (lazily, by a read, or by the sweep), as Redis's does.
#[test]
fn expired_keys_are_never_served() {
    use crate::store::Clock;
    let mut f = at(1_000_000);
    f.run("SET a v PX 1000\r\nSET b v EXAT 1002\r\nRPUSH l x\r\nPEXPIREAT l 1001000\r\nSET keep v");
    assert_eq!(f.run("PTTL a"), ":1000\r\n");
    assert_eq!(f.run("TTL b"), ":2\r\n");
    assert_eq!(f.run("PEXPIRETIME b"), ":1002000\r\n");
    f.ks.set_clock(Clock::Fixed(1_000_999));
    assert_eq!(f.run("GET a"), "$1\r\nv\r\n");
    assert_eq!(f.run("PTTL a"), ":1\r\n");
    assert_eq!(f.run("TTL a"), ":0\r\n");
    f.ks.set_clock(Clock::Fixed(1_001_000));
    assert_eq!(f.run("DBSIZE"), ":4\r\n", "expired, not yet deleted");
    assert_eq!(f.run("KEYS *"), "*2\r\n$1\r\nb\r\n$4\r\nkeep\r\n");
    assert_eq!(f.run("SCAN 0 TYPE list"), "*2\r\n$1\r\n0\r\n*0\r\n");
    for command in ["GET a", "GETEX a PERSIST", "GETDEL a", "LRANGE l 0 -1", "SMEMBERS l"] {
        let reply = f.run(command);
        assert!(reply == "$-1\r\n" || reply == "*0\r\n", "{command}: {reply}");
    }
    for command in ["EXISTS a l", "TTL a", "PERSIST l", "EXPIRE a 100", "RENAMENX l z", "TYPE a", "COPY a z"] {
        let reply = f.run(command);
        assert!(
            matches!(reply.as_str(), ":0\r\n" | ":-2\r\n" | "+none\r\n" | "-ERR no such key\r\n"),
            "{command}: {reply}"
        );
    }
    assert_eq!(f.run("DBSIZE"), ":2\r\n", "the reads deleted a and l");
    // A write to an expired key starts afresh: no old value, no old deadline.
    f.ks.set_clock(Clock::Fixed(1_002_000));
    assert_eq!(f.run("APPEND b w"), ":1\r\n");
    assert_eq!(f.run("TTL b"), ":-1\r\n");
    assert_eq!(f.run("SET a v PXAT 5\r\nGET a\r\nDBSIZE"), "+OK\r\n$-1\r\n:2\r\n");
    f.run("SET gone v PXAT 1");
    for _ in 0..50 {
        let reply = f.run("RANDOMKEY");
        assert!(reply == "$1\r\nb\r\n" || reply == "$4\r\nkeep\r\n", "{reply}");
    }
}

/// The active sweep deletes at most its budget per call, earliest deadline
/// first, only keys that are due, and says whether more are.
#[test]
fn active_expire_is_bounded_per_call() {
    use crate::store::{Clock, Keyspace};
    let mut f = at(10_000);
    for i in 0..100 {
        f.run(&format!("SET k{i:03} v PXAT {}", 10_001 + i));
    }
    f.run("SET forever v\r\nSET later v PXAT 20000");
    assert_eq!(f.ks.expiring_len(), 101);
    assert_eq!(active_expire(&mut f.ks, 10).unwrap(), Sweep { deleted: 0, more: false }, "nothing due yet");
    f.ks.set_clock(Clock::Fixed(10_100)); // k000 ..= k099 due
    let mut rounds = 0;
    loop {
        let before = f.ks.len();
        let sweep = active_expire(&mut f.ks, 16).unwrap();
        assert!(sweep.deleted <= 16);
        assert_eq!(f.ks.len(), before - sweep.deleted as u64);
        rounds += 1;
        if rounds == 1 {
            // The earliest deadlines went first.
            assert_eq!(f.ks.expired(1), vec![b"k016".to_vec()]);
        }
        if !sweep.more {
            break;
        }
    }
    assert_eq!(rounds, 7, "100 keys at 16 per call");
    assert_eq!(f.ks.len(), 2, "forever and later remain");
    assert_eq!(f.run("KEYS *"), "*2\r\n$7\r\nforever\r\n$5\r\nlater\r\n");
    assert_eq!(f.ks.expiring_len(), 1);
    assert_eq!(active_expire(&mut f.ks, 0).unwrap(), Sweep { deleted: 0, more: false });
    f.ks.set_clock(Clock::Fixed(20_000));
    assert_eq!(active_expire(&mut f.ks, 0).unwrap(), Sweep { deleted: 0, more: true }, "a zero budget deletes nothing");
    assert_eq!(active_expire(&mut f.ks, 5).unwrap(), Sweep { deleted: 1, more: false });
    assert_eq!(f.run("DBSIZE"), ":1\r\n");
}

/// What keeps, carries and drops a deadline, with exact deadlines (the
/// clock is fixed), and INFO's `expires`.
#[test]
fn deadlines_kept_carried_and_dropped() {
    let mut f = at(5_000_000);
    f.run("SET s 1 EX 100\r\nINCR s\r\nAPPEND s 0\r\nSETRANGE s 0 3");
    assert_eq!(f.run("PEXPIRETIME s\r\nGET s"), ":5100000\r\n$2\r\n30\r\n");
    f.run("RENAME s t");
    assert_eq!(f.run("PEXPIRETIME t\r\nEXISTS s"), ":5100000\r\n:0\r\n");
    f.run("COPY t u");
    assert_eq!(f.run("PTTL u"), ":100000\r\n");
    assert!(f.run("INFO keyspace").contains("db0:keys=2,expires=2,avg_ttl=0"));
    f.run("SET u x KEEPTTL");
    assert_eq!(f.run("PTTL u"), ":100000\r\n");
    f.run("GETSET u y");
    assert_eq!(f.run("PTTL u"), ":-1\r\n");
    f.run("SADD a m\r\nPEXPIRE a 7\r\nSADD a n\r\nSREM a m");
    assert_eq!(f.run("PTTL a"), ":7\r\n");
    f.run("SADD d q\r\nPEXPIRE d 9\r\nSUNIONSTORE d a");
    assert_eq!(f.run("PTTL d"), ":-1\r\n");
    assert_eq!(f.run("GETEX t PXAT 5000000"), "$2\r\n30\r\n");
    assert_eq!(f.run("EXISTS t"), ":0\r\n", "a deadline not after now deletes");
    assert_eq!(f.run("SETEX e 1 v\r\nPEXPIRETIME e"), "+OK\r\n:5001000\r\n");
}

/// The completed hashes and sorted sets without redis-server at hand (the
/// differential tests compare them with it byte for byte when installed).
#[test]
fn hashes_and_sorted_sets_completed() {
    let mut f = Fixture::new();
    for (command, want) in [
        ("HINCRBY h n 5", ":5\r\n"),
        ("HINCRBY h n 9223372036854775807", "-ERR increment or decrement would overflow\r\n"),
        ("HINCRBYFLOAT h x 0.1", "$3\r\n0.1\r\n"),
        ("HINCRBYFLOAT h x 0.2", "$3\r\n0.3\r\n"),
        ("HINCRBYFLOAT h x inf", "-ERR value is NaN or Infinity\r\n"),
        ("HSET h s abc", ":1\r\n"),
        ("HINCRBY h s 1", "-ERR hash value is not an integer\r\n"),
        ("HINCRBYFLOAT h s 1", "-ERR hash value is not a float\r\n"),
        ("HSETNX h s x", ":0\r\n"),
        ("HKEYS h", "*3\r\n$1\r\nn\r\n$1\r\nx\r\n$1\r\ns\r\n"),
        ("HVALS h", "*3\r\n$1\r\n5\r\n$3\r\n0.3\r\n$3\r\nabc\r\n"),
        ("HSTRLEN h s", ":3\r\n"),
        ("HRANDFIELD h 1 WITHVALUES x", "-ERR syntax error\r\n"),
        ("HSCAN h 0 MATCH s", "*2\r\n$1\r\n0\r\n*2\r\n$1\r\ns\r\n$3\r\nabc\r\n"),
        ("ZADD z 1 a 2 b 3 c", ":3\r\n"),
        ("ZINCRBY z 1.5 a", "$3\r\n2.5\r\n"),
        ("ZADD z inf i", ":1\r\n"),
        ("ZINCRBY z -inf i", "-ERR resulting score is not a number (NaN)\r\n"),
        ("ZRANK z a", ":1\r\n"),
        ("ZREVRANK z a", ":2\r\n"),
        ("ZREVRANGEBYSCORE z (3 -inf WITHSCORES LIMIT 1 5", "*2\r\n$1\r\nb\r\n$1\r\n2\r\n"),
        ("ZCOUNT z (2 +inf", ":3\r\n"),
        ("ZCOUNT z x 1", "-ERR min or max is not a float\r\n"),
        ("ZLEXCOUNT z a b", "-ERR min or max not valid string range item\r\n"),
        ("ZMSCORE z a nope", "*2\r\n$3\r\n2.5\r\n$-1\r\n"),
        ("ZPOPMIN z", "*2\r\n$1\r\nb\r\n$1\r\n2\r\n"),
        ("ZPOPMAX z 2", "*4\r\n$1\r\ni\r\n$3\r\ninf\r\n$1\r\nc\r\n$1\r\n3\r\n"),
        ("ZADD y 1 a 10 d", ":2\r\n"),
        ("ZUNIONSTORE u 2 z y WEIGHTS 2 1 AGGREGATE MAX", ":2\r\n"),
        ("ZRANGE u 0 -1 WITHSCORES", "*4\r\n$1\r\na\r\n$1\r\n5\r\n$1\r\nd\r\n$2\r\n10\r\n"),
        ("ZINTERCARD 2 z y", ":1\r\n"),
        ("ZDIFF 2 y z", "*1\r\n$1\r\nd\r\n"),
        ("ZUNION 0 z", "-ERR at least 1 input key is needed for 'zunion' command\r\n"),
        ("ZRANGESTORE r y 0 -1 REV", ":2\r\n"),
        ("ZREMRANGEBYSCORE r -inf (10", ":1\r\n"),
        ("ZREMRANGEBYRANK r 0 -1", ":1\r\n"),
        ("EXISTS r", ":0\r\n"),
        ("HELLO 3", ""),
        ("ZPOPMIN y 1", "*1\r\n*2\r\n$1\r\na\r\n,1\r\n"),
        ("ZPOPMIN y", "*2\r\n$1\r\nd\r\n,10\r\n"),
        ("ZRANDMEMBER u 1 WITHSCORES", "*1\r\n*2\r\n$1\r\n"),
    ] {
        let got = f.run(command);
        match command {
            "HELLO 3" => {}
            // One random member: only the reply's start is fixed.
            _ if command.starts_with("ZRANDMEMBER") => assert!(got.starts_with(want), "{command}: {got:?}"),
            _ => assert_eq!(got, want, "{command}"),
        }
    }
}

/// A script past `lua-time-limit` is stopped, and every write it made is
/// undone, those of the commands it ran before included.
#[test]
fn a_script_past_its_time_limit_is_stopped_and_undone() {
    let mut f = Fixture::new();
    f.run("SET k before");
    f.server.config_mut().lua_time_limit_ms = 50;
    let reply = f.run("EVAL \"redis.call('set','k','during') redis.call('set','other','x') while true do end\" 0");
    assert!(reply.starts_with("-ERR Script killed: it ran past lua-time-limit (50 ms)"), "{reply}");
    assert_eq!(f.run("GET k"), "$6\r\nbefore\r\n");
    assert_eq!(f.run("EXISTS other"), ":0\r\n");
    // pcall cannot outlast the limit.
    let reply = f.run("EVAL \"while true do pcall(function() while true do end end) end\" 0");
    assert!(reply.starts_with("-ERR Script killed"), "{reply}");
    // The interpreter serves the next script.
    assert_eq!(f.run("EVAL \"return redis.call('get','k')\" 0"), "$6\r\nbefore\r\n");
}

/// A replicated executor's budget stops a script after the same number
/// of instructions wherever it runs.
#[test]
fn a_script_budget_stops_at_the_same_step() {
    let mut f = Fixture::new();
    f.server.config_mut().script_budget = Some(3);
    let reply = f.run("EVAL \"local n = 0 while true do n = n + 1 redis.call('set','n',n) end\" 0");
    assert!(reply.starts_with("-ERR Script killed: it ran past its budget of 3 steps"), "{reply}");
    assert_eq!(f.run("EXISTS n"), ":0\r\n");
    assert_eq!(f.run("EVAL \"local n = 0 for i = 1, 1000 do n = n + i end return n\" 0"), ":500500\r\n");
}

/// As in Redis, a script that fails after writing keeps its writes; and a
/// script runs whole inside EXEC.
#[test]
fn a_failing_script_keeps_its_writes_and_exec_runs_scripts() {
    let mut f = Fixture::new();
    let reply = f.run("EVAL \"redis.call('set','a','1') redis.call('incr','a') return redis.call('incr','nonum', 'x')\" 0");
    assert!(reply.starts_with("-ERR Wrong number of args calling Redis command from script"), "{reply}");
    assert_eq!(f.run("GET a"), "$1\r\n2\r\n");
    let replies = f.run("MULTI\nEVAL \"return redis.call('incr', KEYS[1])\" 1 c\nEVAL \"return redis.call('incr', KEYS[1])\" 1 c\nEXEC");
    assert_eq!(replies, "+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:1\r\n:2\r\n");
}

/// No script leaves anything behind for the next: globals, library tables,
/// the string metatable, the environment and the thread's globals refuse
/// every change, and `loadstring` compiles into the same environment.
#[test]
fn scripts_cannot_leave_state_behind() {
    let mut f = Fixture::new();
    for attempt in [
        "x = 1",
        "rawset(_G, 'x', 1)",
        "string.x = 1",
        "rawset(string, 'x', 1)",
        "getmetatable('').__index = nil",
        "getmetatable('').x = 1",
        "getfenv(0).x = 1",
        "getfenv(1).x = 1",
        "setfenv(0, {})",
        "loadstring('x = 1')()",
        "setmetatable(string, nil)",
        "redis.call = nil",
        "math.random = nil",
        "cjson.null = 1",
        "bit.band = nil",
    ] {
        let reply = f.run(&format!("EVAL \"{attempt}\" 0"));
        assert!(reply.starts_with("-"), "{attempt}: {reply}");
    }
    let check = "EVAL \"return {type(rawget(_G, 'x')), type(string.x), type(redis.call), type(math.random), type(bit.band), tostring(cjson.null ~= 1)}\" 0";
    assert_eq!(f.run(check), "*6\r\n$3\r\nnil\r\n$3\r\nnil\r\n$8\r\nfunction\r\n$8\r\nfunction\r\n$8\r\nfunction\r\n$4\r\ntrue\r\n");
    // What a script may do: locals, its own tables, functions it defines.
    assert_eq!(f.run("EVAL \"local t = {} t.x = 1 local function g() return t.x end return g()\" 0"), ":1\r\n");
}

/// math.random draws from the executor's generator: two executors seeded
/// alike draw alike (a cluster's members), and a script's numbers are in range.
#[test]
fn math_random_follows_the_executor_seed() {
    let script = "EVAL \"local t = {} for i = 1, 5 do t[i] = math.random(1000) end return t\" 0";
    let (mut a, mut b) = (Fixture::new(), Fixture::new());
    let (ra, rb) = (a.run(script), b.run(script));
    assert_eq!(ra, rb);
    assert_eq!(a.run(script), b.run(script));
    assert_ne!(ra, a.run(script), "each run draws a fresh seed");
}

/// SCRIPT FLUSH and FLUSHALL take only script bodies (`03` and 40 hex
/// digits) for scripts: another entry under the same first byte, as a
/// cluster's streamed pieces once were, is neither deleted by SCRIPT FLUSH
/// nor stored again by FLUSHALL as if it were a script.
#[test]
fn script_flush_takes_only_script_bodies() {
    use crate::store::Keyspace;
    let mut f = Fixture::new();
    let other: &[u8] = b"\x03\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00";
    f.ks.internal_put(other, b"piece").unwrap();
    assert!(f.run("SCRIPT LOAD \"return 1\"").starts_with("$40\r\n"));
    assert_eq!(f.run("SCRIPT FLUSH"), "+OK\r\n");
    let mut v = Vec::new();
    assert!(f.ks.internal_read(other, &mut v), "SCRIPT FLUSH deleted an entry that is not a script");
    assert_eq!(v, b"piece");
    assert_eq!(f.run("SCRIPT EXISTS e0e1f9fabfc9d4800c877a703b823ac0578ff8db"), "*1\r\n:0\r\n");
    assert_eq!(f.run("FLUSHALL"), "+OK\r\n");
    assert!(!f.ks.internal_read(other, &mut Vec::new()), "FLUSHALL kept an entry that is not a script");
}
