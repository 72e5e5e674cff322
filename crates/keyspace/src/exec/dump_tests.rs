//! DUMP and RESTORE through the executor ([`super::dump`]): chunked
//! collections dump as their blob form does and restore chunked; a stream
//! with groups, pending entries and deleted entries comes back whole;
//! RESTORE works inside MULTI and scripts and with a TTL; a failed RESTORE
//! changes nothing. (Bytes against redis-server: `tests/corpus/dump.txt`.)

use super::*;
use crate::chunked::ChunkConfig;


use super::fixture::Fixture as Side;

impl Side {
    /// Runs one command given as its arguments; its reply bytes.
    fn bytes(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.raw(args)
    }

    /// DUMP `key`'s payload.
    fn dump(&mut self, key: &str) -> Vec<u8> {
        let reply = self.bytes(&[b"DUMP", key.as_bytes()]);
        let (value, _) = pmwire_resp::client::parse_reply(&reply).expect("parse").expect("whole");
        match value {
            pmwire_resp::client::Value::Bulk(b) => b,
            other => panic!("DUMP {key}: {other:?}"),
        }
    }

    fn restore(&mut self, key: &str, ttl: &str, payload: &[u8], extra: &[&str]) -> String {
        let mut args: Vec<&[u8]> = vec![b"RESTORE", key.as_bytes(), ttl.as_bytes(), payload];
        args.extend(extra.iter().map(|s| s.as_bytes()));
        String::from_utf8_lossy(&self.bytes(&args)).into_owned()
    }
}

fn side(collections: ChunkConfig) -> Side {
    Side::at(collections, 1_000_000)
}

fn never() -> ChunkConfig {
    ChunkConfig { max_blob_entries: usize::MAX, max_blob_bytes: usize::MAX, ..ChunkConfig::default() }
}

fn fill(s: &mut Side) {
    for i in 0..60 {
        s.cmd(&format!("RPUSH l e{i}"));
        s.cmd(&format!("SADD s {}", i * 7 - 100));
        s.cmd(&format!("SADD t m{i}"));
        s.cmd(&format!("HSET h f{i} v{i}"));
        s.cmd(&format!("ZADD z {} m{i}", i % 7));
    }
}

#[test]
fn chunked_collections_dump_as_blobs_do_and_restore_chunked() {
    let (mut chunked, mut blob) = (side(ChunkConfig::tiny()), side(never()));
    fill(&mut chunked);
    fill(&mut blob);
    let reads = [("l", "LRANGE {} 0 -1"), ("s", "SMEMBERS {}"), ("t", "SMEMBERS {}"), ("h", "HLEN {}"), ("z", "ZRANGE {} 0 -1 WITHSCORES")];
    for (key, read) in reads {
        let payload = chunked.dump(key);
        if key != "h" && key != "t" {
            // A hashtable's order is the representation's; the rest is content.
            assert_eq!(payload, blob.dump(key), "{key}");
        }
        for side in [&mut chunked, &mut blob] {
            assert_eq!(side.restore(&format!("{key}2"), "0", &payload, &[]), "+OK\r\n");
            assert_eq!(side.cmd(&read.replace("{}", &format!("{key}2"))), side.cmd(&read.replace("{}", key)), "{key}");
        }
        let kind = chunked.ks.get(key.as_bytes()).unwrap().kind;
        let restored = super::large::header(&mut chunked.ks, format!("{key}2").as_bytes(), kind).unwrap();
        assert!(restored.is_some(), "{key}: restored chunked, as any write of its size");
    }
    for i in 0..60 {
        assert_eq!(chunked.cmd(&format!("HGET h2 f{i}")), blob.cmd(&format!("HGET h2 f{i}")));
    }
}

#[test]
fn a_stream_with_groups_comes_back_whole() {
    let mut s = side(ChunkConfig::default());
    for i in 1..=250 {
        s.cmd(&format!("XADD x {i}-1 f v{i} g {i}"));
    }
    s.cmd("XADD x 251-0 other 1");
    s.cmd("XDEL x 5-1 120-1");
    s.cmd("XGROUP CREATE x g1 0");
    s.cmd("XGROUP CREATE x g2 $");
    s.cmd("XREADGROUP GROUP g1 alice COUNT 3 STREAMS x >");
    s.cmd("XREADGROUP GROUP g1 bob COUNT 2 STREAMS x >");
    s.cmd("XACK x g1 2-1");
    s.cmd("XGROUP CREATECONSUMER x g2 carol");
    let payload = s.dump("x");
    assert_eq!(s.restore("y", "0", &payload, &[]), "+OK\r\n");
    assert_eq!(s.cmd("XINFO STREAM y FULL"), s.cmd("XINFO STREAM x FULL"));
    assert_eq!(s.cmd("XPENDING y g1 - + 10"), s.cmd("XPENDING x g1 - + 10"));
    assert_eq!(s.dump("y"), payload, "the restored stream dumps the same bytes");
    // Both go on alike.
    let (y, x) = (s.cmd("XREADGROUP GROUP g1 alice COUNT 2 STREAMS y >"), s.cmd("XREADGROUP GROUP g1 alice COUNT 2 STREAMS x >"));
    assert_eq!(y.replace("$1\r\ny\r\n", "$1\r\nx\r\n"), x);
    assert_eq!(s.cmd("XADD y 300-0 a b"), "$5\r\n300-0\r\n");
}

#[test]
fn restore_in_multi_and_scripts_and_with_a_ttl() {
    let mut s = side(ChunkConfig::default());
    s.cmd("RPUSH l a b c");
    let payload = s.dump("l");
    assert_eq!(s.cmd("MULTI"), "+OK\r\n");
    assert_eq!(s.restore("m", "0", &payload, &[]), "+QUEUED\r\n");
    assert_eq!(s.restore("l", "0", &payload, &[]), "+QUEUED\r\n");
    assert_eq!(s.cmd("EXEC"), "*2\r\n+OK\r\n-BUSYKEY Target key name already exists.\r\n");
    assert_eq!(s.cmd("LRANGE m 0 -1"), "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n");
    let script = b"return redis.call('RESTORE', KEYS[1], 0, ARGV[1])";
    assert_eq!(s.bytes(&[b"EVAL", script, b"1", b"e", &payload]), b"+OK\r\n");
    assert_eq!(s.cmd("LLEN e"), ":3\r\n");
    assert_eq!(s.restore("t", "5000", &payload, &[]), "+OK\r\n");
    assert_eq!(s.cmd("PTTL t"), ":5000\r\n");
    assert_eq!(s.restore("a", "1000500", &payload, &["ABSTTL"]), "+OK\r\n");
    assert_eq!(s.cmd("PEXPIRETIME a"), ":1000500\r\n");
    assert_eq!(s.restore("a", "999999", &payload, &["ABSTTL", "REPLACE"]), "+OK\r\n");
    assert_eq!(s.cmd("EXISTS a"), ":0\r\n", "a deadline passed: REPLACE deleted it, nothing stored");
}

#[test]
fn a_refused_restore_changes_nothing() {
    let mut s = side(ChunkConfig::default());
    s.cmd("SET k old");
    let mut payload = s.dump("k");
    let n = payload.len();
    payload[n - 1] ^= 1;
    assert_eq!(s.restore("k", "0", &payload, &["REPLACE"]), "-ERR DUMP payload version or checksum are wrong\r\n");
    assert_eq!(s.restore("k", "-5", &payload, &["REPLACE"]), "-ERR Invalid TTL value, must be >= 0\r\n");
    let bad = crate::rdb::dump_string(b"x");
    let mut bad = bad[..bad.len() - 10].to_vec();
    bad[0] = 8;
    bad.extend_from_slice(&crate::rdb::RDB_VERSION.to_le_bytes());
    let crc = crate::rdb::crc64(&bad);
    bad.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(s.restore("k", "0", &bad, &["REPLACE"]), "-ERR Bad data format\r\n");
    assert_eq!(s.cmd("GET k"), "$3\r\nold\r\n");
    assert_eq!(s.cmd("DUMP nosuch"), "$-1\r\n");
}
