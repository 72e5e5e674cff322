use super::*;
use crate::keyspace::{MemKeyspace, StoreLimits, ValueSource};
use crate::request::Parsed;
use std::sync::Arc;

struct Fixture {
    server: Server,
    session: Session,
    ks: MemKeyspace,
}

impl Fixture {
    fn new() -> Self {
        Fixture::with(MemKeyspace::new())
    }

    fn with(ks: MemKeyspace) -> Self {
        let mut server = Server::new(ServerConfig::default());
        let session = server.open_session();
        Fixture { server, session, ks }
    }

    /// Runs inline commands (one per line) and returns all replies.
    fn run(&mut self, input: &str) -> String {
        let input = format!("{input}\r\n");
        let segs: [&[u8]; 1] = [input.as_bytes()];
        let mut p = Parsed::new(Limits::default());
        let s = p.parse(&segs);
        assert_eq!(s.error, None);
        let mut out: Vec<u8> = Vec::new();
        for i in 0..s.commands {
            self.server.execute(&mut self.session, &mut self.ks, &p.request(&segs, i), &mut out);
        }
        String::from_utf8(out).unwrap()
    }
}

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
    fn set(&mut self, key: &[u8], kind: Kind, value: ValueSource<'_>) -> Result<(), StoreError> {
        if let ValueSource::Arg(a) = &value {
            self.pieces.push(a.pieces.len());
        }
        self.inner.set(key, kind, value)
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
    assert_eq!(f.run("SET k v EX 10"), "-ERR pmwire keys do not expire: SET EX, PX, EXAT and PXAT are not supported\r\n");
    assert_eq!(f.run("SET k v PXAT 10"), "-ERR pmwire keys do not expire: SET EX, PX, EXAT and PXAT are not supported\r\n");
    assert_eq!(f.run("GET k"), "$-1\r\n");
    assert_eq!(f.run("SCAN 12345"), "-ERR invalid cursor\r\n");
    assert_eq!(
        f.run("CONFIG SET save x"),
        "-ERR CONFIG SET failed (possibly related to argument 'save') - pmwire does not change 'save' (it sets requirepass and protected-mode; every write is durable before its reply)\r\n"
    );
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
    assert_eq!(f.run("COMMAND COUNT"), format!(":{}\r\n", COMMANDS.len()));
    let info = f.run("COMMAND INFO get nosuch");
    assert!(info.starts_with("*2\r\n*10\r\n$3\r\nget\r\n:2\r\n"), "{info}");
    assert!(info.ends_with("*-1\r\n"), "{info}");
    let all = f.run("COMMAND");
    assert!(all.starts_with(&format!("*{}\r\n", COMMANDS.len())));
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
        let (v, _) = crate::client::parse_reply(reply.as_bytes()).unwrap().unwrap();
        let crate::client::Value::Array(parts) = v else { panic!("{reply}") };
        let crate::client::Value::Bulk(c) = &parts[0] else { panic!() };
        let crate::client::Value::Array(keys) = &parts[1] else { panic!() };
        for k in keys {
            let crate::client::Value::Bulk(k) = k else { panic!() };
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
    let mut f = Fixture::with(MemKeyspace::with_limits(limits, Some(2)));
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
    let want = format!("-ERR unknown command '{}', with args beginning with: '{}' \r\n", "x".repeat(128), "x".repeat(128));
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
        (format!("SET k v PX {max}"), "-ERR pmwire keys do not expire: SET EX, PX, EXAT and PXAT are not supported\r\n"),
        (format!("SELECT {min}"), "-ERR value is not an integer or out of range\r\n"),
    ] {
        assert_eq!(f.run(&command), want, "{command}");
    }
}
