//! Streams' stored form under the executor: an append writes its entry's
//! record and its node's small record whatever the node's and the stream's
//! length (a node that fills is sealed once); a deleted stream's nodes are
//! collected; a copy owns its nodes; damaged nodes answer an error.
//! (Replies are held to redis-server by `tests/redis_diff.rs`.)

use crate::chunked::{chunk_key, collect_garbage};
use crate::store::Keyspace;

use super::fixture::Fixture as Side;

fn side() -> Side {
    Side::at(crate::chunked::ChunkConfig::default(), 1_000_000)
}

/// Internal entries `after` has that `before` did not (new or changed), their
/// bytes, and how many of `before` are gone.
fn delta(before: &[(Vec<u8>, Vec<u8>)], after: &[(Vec<u8>, Vec<u8>)]) -> (usize, usize, usize) {
    let written: Vec<_> = after.iter().filter(|e| !before.contains(e)).collect();
    let gone = before.iter().filter(|(k, _)| !after.iter().any(|(a, _)| a == k)).count();
    (written.len(), written.iter().map(|(_, v)| v.len()).sum(), gone)
}

#[test]
fn an_append_writes_its_entry_and_a_small_record_however_long_the_stream() {
    let mut s = side();
    for i in 1..=20_000u64 {
        let reply = s.cmd(&format!("XADD st {i}-0 field value-{i}"));
        assert!(reply.starts_with('$'), "{reply}");
    }
    let h = s.stream_header("st");
    assert_eq!(h.length, 20_000);
    assert!(h.tail - h.head >= 200, "nodes of at most 100 entries: {h:?}");
    // Until a node fills, an append writes one entry record and its node's
    // record: a few dozen bytes, not a node. The append that finds the node
    // full seals it (written whole, its entry records deleted) and starts
    // the next.
    let mut before = s.internal();
    let mut sealed = false;
    for i in 20_001..20_300u64 {
        let h = s.stream_header("st");
        let last = s.ks.internal_get(&chunk_key(h.gen, h.tail - 1)).expect("the last node");
        let mut record = Vec::new();
        s.ks.read(&last, &mut record);
        let seg = crate::stream::Segmented::decode(&record).expect("a record").expect("the last node is segmented");
        assert_eq!(s.cmd(&format!("XADD st {i}-0 field value-{i}")), format!("${}\r\n{i}-0\r\n", format!("{i}-0").len()));
        let after = s.internal();
        let (written, bytes, gone) = delta(&before, &after);
        if s.stream_header("st").tail == h.tail {
            assert_eq!((written, gone), (2, 0), "the entry's record and the node's");
            assert!(bytes < 100, "{bytes} bytes written");
            assert_eq!(before.len() + 1, after.len());
        } else {
            assert_eq!(written, 3, "the sealed node, the new node's record and its entry");
            assert_eq!(gone, seg.count as usize, "the sealed node's entry records");
            sealed = true;
            break;
        }
        before = after;
    }
    assert!(sealed, "a node filled within 300 appends");
    // A range in the middle reads a few nodes, not the stream.
    assert_eq!(s.cmd("XRANGE st 10000 10000"), "*1\r\n*2\r\n$7\r\n10000-0\r\n*2\r\n$5\r\nfield\r\n$11\r\nvalue-10000\r\n");
    assert_eq!(s.cmd("XREVRANGE st 10001 - COUNT 1"), "*1\r\n*2\r\n$7\r\n10001-0\r\n*2\r\n$5\r\nfield\r\n$11\r\nvalue-10001\r\n");
}

#[test]
fn a_deleted_streams_nodes_are_collected_and_a_copy_keeps_its_own() {
    let mut s = side();
    for i in 1..=500u64 {
        s.cmd(&format!("XADD st {i}-0 f v{i}"));
    }
    assert_eq!(s.cmd("COPY st st2"), ":1\r\n");
    let (h, h2) = (s.stream_header("st"), s.stream_header("st2"));
    assert_ne!(h.gen, h2.gen, "a copy's nodes are its own");
    assert_eq!(s.cmd("DEL st"), ":1\r\n");
    while collect_garbage(&mut s.ks, 7).expect("collect") > 0 {}
    let left = s.internal().iter().filter(|(k, _)| k.len() >= 9 && k[0] == 0 && k[1..9] == h.gen.to_be_bytes()).count();
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
    let mut s = side();
    for i in 1..=5u64 {
        s.cmd(&format!("XADD st {i}-0 f v"));
    }
    let h = s.stream_header("st");
    s.ks.internal_put(&chunk_key(h.gen, h.head), b"\x01\x00\x00\x00garbage").expect("put");
    let reply = s.cmd("XRANGE st - +");
    assert!(reply.starts_with("-ERR stored value is corrupt"), "{reply}");
    let reply = s.cmd("XADD st 9-0 f v");
    assert!(reply.starts_with("-ERR stored value is corrupt"), "{reply}");
    // A segmented node's entry record damaged, or missing.
    let mut s = side();
    for i in 1..=5u64 {
        s.cmd(&format!("XADD st {i}-0 f v"));
    }
    let h = s.stream_header("st");
    s.ks.internal_put(&crate::stream::entry_key(h.gen, h.head, 2), b"\x01garbage").expect("put");
    assert!(s.cmd("XRANGE st - +").starts_with("-ERR stored value is corrupt"));
    s.ks.internal_delete(&crate::stream::entry_key(h.gen, h.head, 2)).expect("delete");
    assert!(s.cmd("XRANGE st - +").starts_with("-ERR stored value is corrupt"));
}

/// A last node stored whole (a pool written before segmented nodes, or an
/// XDEL that emptied the last node) takes appends: it is segmented once.
#[test]
fn a_whole_last_node_is_segmented_by_the_next_append() {
    let mut s = side();
    for i in 1..=150u64 {
        s.cmd(&format!("XADD st {i}-0 f v{i}"));
    }
    let h = s.stream_header("st");
    // Rewrite the segmented last node whole, as the previous format stored it.
    let expected = s.cmd("XRANGE st - +");
    let last = h.tail - 1;
    let node = (0..50u32)
        .map(|i| {
            let v = s.ks.internal_get(&crate::stream::entry_key(h.gen, last, i)).expect("an entry record");
            let mut b = Vec::new();
            s.ks.read(&v, &mut b);
            s.ks.internal_delete(&crate::stream::entry_key(h.gen, last, i)).expect("delete");
            crate::stream::Entry::decode(&b).expect("an entry")
        })
        .collect();
    s.ks.internal_put(&chunk_key(h.gen, last), &crate::stream::Node { entries: node }.encode()).expect("put");
    assert_eq!(s.cmd("XRANGE st - +"), expected);
    assert_eq!(s.cmd("XADD st 151-0 f v151"), "$5\r\n151-0\r\n");
    assert_eq!(s.cmd("XLEN st"), ":151\r\n");
    assert_eq!(s.cmd("XRANGE st 149 +"), "*3\r\n*2\r\n$5\r\n149-0\r\n*2\r\n$1\r\nf\r\n$4\r\nv149\r\n*2\r\n$5\r\n150-0\r\n*2\r\n$1\r\nf\r\n$4\r\nv150\r\n*2\r\n$5\r\n151-0\r\n*2\r\n$1\r\nf\r\n$4\r\nv151\r\n");
    let records = s.internal().iter().filter(|(k, _)| k.len() == 21 && k[1..9] == h.gen.to_be_bytes()).count();
    assert_eq!(records, 51, "the last node segmented: 50 entries and the new one");
    // XDEL empties the last node: the one before, sealed whole, takes the next append.
    assert_eq!(s.cmd(&format!("XDEL st {}", (101..=151).map(|i| format!("{i}-0")).collect::<Vec<_>>().join(" "))), ":51\r\n");
    assert_eq!(s.cmd("XADD st 152-0 f v152"), "$5\r\n152-0\r\n");
    assert_eq!(s.cmd("XRANGE st 99 +"), "*3\r\n*2\r\n$4\r\n99-0\r\n*2\r\n$1\r\nf\r\n$3\r\nv99\r\n*2\r\n$5\r\n100-0\r\n*2\r\n$1\r\nf\r\n$4\r\nv100\r\n*2\r\n$5\r\n152-0\r\n*2\r\n$1\r\nf\r\n$4\r\nv152\r\n");
}
