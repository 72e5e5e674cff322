//! Streams' stored form under the executor: an append writes one node and
//! the header whatever the stream's length; a deleted stream's nodes are
//! collected; a copy owns its nodes; damaged nodes answer an error.
//! (Replies are held to redis-server by `tests/redis_diff.rs`.)

use super::*;
use crate::chunked::{chunk_key, collect_garbage};
use crate::store::{Clock, Keyspace, MemKeyspace};
use pmwire_resp::request::Parsed;

struct Side {
    server: Server,
    session: Session,
    ks: MemKeyspace,
}

impl Side {
    fn new() -> Side {
        let mut server = Server::new(ServerConfig::default());
        let session = server.open_session();
        let mut ks = MemKeyspace::new();
        ks.set_clock(Clock::Fixed(1_000_000));
        Side { server, session, ks }
    }

    fn cmd(&mut self, line: &str) -> String {
        let args: Vec<Vec<u8>> = line.split(' ').map(|a| a.as_bytes().to_vec()).collect();
        let mut input = Vec::new();
        pmwire_resp::client::encode_request(&args, &mut input);
        let segs: [&[u8]; 1] = [&input];
        let mut p = Parsed::new(Limits::default());
        assert_eq!(p.parse(&segs).commands, 1);
        let mut out: Vec<u8> = Vec::new();
        self.server.execute(&mut self.session, &mut self.ks, &p.request(&segs, 0), &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Every internal entry: key and bytes.
    fn internal(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut keys = Vec::new();
        self.ks.internal_scan(&[], usize::MAX, &mut |k| keys.push(k.to_vec()));
        keys.into_iter()
            .map(|k| {
                let mut v = Vec::new();
                let h = self.ks.internal_get(&k).expect("scanned");
                self.ks.read(&h, &mut v);
                (k, v)
            })
            .collect()
    }

    fn stream_header(&mut self, key: &str) -> crate::stream::Header {
        let s = self.ks.get(key.as_bytes()).expect("a stream");
        let mut v = Vec::new();
        self.ks.read(&s.value, &mut v);
        crate::stream::Header::decode(&v).expect("a stream header")
    }
}

#[test]
fn an_append_writes_one_node_and_the_header_however_long_the_stream() {
    let mut s = Side::new();
    for i in 1..=20_000u64 {
        let reply = s.cmd(&format!("XADD st {i}-0 field value-{i}"));
        assert!(reply.starts_with('$'), "{reply}");
    }
    let h = s.stream_header("st");
    assert_eq!(h.length, 20_000);
    assert!(h.tail - h.head >= 200, "nodes of at most 100 entries: {h:?}");
    let before = s.internal();
    assert_eq!(s.cmd("XADD st 20001-0 field last"), "$7\r\n20001-0\r\n");
    let after = s.internal();
    let changed = after.iter().filter(|e| !before.contains(e)).count();
    assert_eq!(changed, 1, "one node written (or started) by the append");
    assert_eq!(before.len() + usize::from(after.len() > before.len()), after.len());
    // A range in the middle reads a few nodes, not the stream.
    assert_eq!(s.cmd("XRANGE st 10000 10000"), "*1\r\n*2\r\n$7\r\n10000-0\r\n*2\r\n$5\r\nfield\r\n$11\r\nvalue-10000\r\n");
    assert_eq!(s.cmd("XREVRANGE st 10001 - COUNT 1"), "*1\r\n*2\r\n$7\r\n10001-0\r\n*2\r\n$5\r\nfield\r\n$11\r\nvalue-10001\r\n");
}

#[test]
fn a_deleted_streams_nodes_are_collected_and_a_copy_keeps_its_own() {
    let mut s = Side::new();
    for i in 1..=500u64 {
        s.cmd(&format!("XADD st {i}-0 f v{i}"));
    }
    assert_eq!(s.cmd("COPY st st2"), ":1\r\n");
    let (h, h2) = (s.stream_header("st"), s.stream_header("st2"));
    assert_ne!(h.gen, h2.gen, "a copy's nodes are its own");
    assert_eq!(s.cmd("DEL st"), ":1\r\n");
    while collect_garbage(&mut s.ks, 7).expect("collect") > 0 {}
    let left = s.internal().iter().filter(|(k, _)| k.len() == 17 && k[1..9] == h.gen.to_be_bytes()).count();
    assert_eq!(left, 0, "the deleted stream's nodes were collected");
    assert_eq!(s.cmd("XLEN st2"), ":500\r\n");
    assert_eq!(s.cmd("XRANGE st2 250 250"), "*1\r\n*2\r\n$5\r\n250-0\r\n*2\r\n$1\r\nf\r\n$4\r\nv250\r\n");
    // Trimmed and deleted down to nothing, the stream stays (as Redis keeps it).
    assert_eq!(s.cmd("XTRIM st2 MAXLEN 0"), ":500\r\n");
    assert_eq!(s.cmd("EXISTS st2"), ":1\r\n");
    assert_eq!(s.cmd("XADD st2 1-0 f v"), "-ERR The ID specified in XADD is equal or smaller than the target stream top item\r\n");
    assert_eq!(s.cmd("XADD st2 501-0 f v"), "$5\r\n501-0\r\n");
    assert_eq!(s.cmd("XLEN st2"), ":1\r\n");
}

#[test]
fn a_damaged_node_answers_an_error() {
    let mut s = Side::new();
    for i in 1..=5u64 {
        s.cmd(&format!("XADD st {i}-0 f v"));
    }
    let h = s.stream_header("st");
    s.ks.internal_put(&chunk_key(h.gen, h.head), b"\x01\x00\x00\x00garbage").expect("put");
    let reply = s.cmd("XRANGE st - +");
    assert!(reply.starts_with("-ERR stored value is corrupt"), "{reply}");
    let reply = s.cmd("XADD st 9-0 f v");
    assert!(reply.starts_with("-ERR stored value is corrupt"), "{reply}");
}
