//! Streamed values (issue 26 item 6): a value travels as piece entries and
//! the command naming them follows; no entry holds the whole value.

use std::borrow::Cow;

use pmwire_keyspace::exec::ServerConfig;
use pmwire_keyspace::store::Keyspace;
use pmwire_kv_cluster::extent::{Arg, PieceHead, StreamId};
use pmwire_kv_cluster::machine::ext::{ABANDONED_MS, PIECE_TAG};
use pmwire_kv_cluster::{Proposer, RedisMachine};
use pmwire_keyspace::store::MemKeyspace;
use pmwire_resp::reply::Protocol;
use pmwire_smr::state::StateMachine;

const PIECE: usize = 1000;

struct Member {
    m: RedisMachine<MemKeyspace>,
    p: Proposer,
    now: u64,
}

impl Member {
    fn new() -> Member {
        Member { m: RedisMachine::in_memory(ServerConfig::default()), p: Proposer::with_key(5), now: 1_000_000 }
    }

    fn apply(&mut self, entry: &[u8]) -> String {
        let index = self.m.applied() + 1;
        String::from_utf8_lossy(&self.m.apply(index, entry).reply).into_owned()
    }

    fn cmd(&mut self, args: &[&[u8]]) -> String {
        let e = self.p.command(self.now, Protocol::Resp2, args);
        self.apply(&e)
    }

    /// The piece entries of `value` under `stream`.
    fn pieces(&mut self, stream: StreamId, value: &[u8]) -> Vec<Vec<u8>> {
        let chunks: Vec<&[u8]> = value.chunks(PIECE).collect();
        let count = chunks.len() as u32;
        chunks
            .iter()
            .enumerate()
            .map(|(i, c)| self.p.piece(self.now, PieceHead { stream, index: i as u32, count }, Arg::Inline(Cow::Borrowed(c))))
            .collect()
    }

    /// A new stream of a `len`-byte value: the value, its name, its pieces.
    fn begin(&mut self, len: usize) -> (Vec<u8>, StreamId, Vec<Vec<u8>>) {
        let v = value(len);
        let stream = self.p.stream_id(self.now);
        let pieces = self.pieces(stream, &v);
        (v, stream, pieces)
    }

    /// The command `name key <streamed value>`.
    fn streamed(&mut self, name: &str, key: &str, stream: StreamId, value: &[u8]) -> Vec<u8> {
        let args = vec![
            Arg::Inline(Cow::Owned(name.as_bytes().to_vec())),
            Arg::Inline(Cow::Owned(key.as_bytes().to_vec())),
            Arg::Streamed { len: value.len() as u32, crc: crc32c::crc32c(value), stream, pieces: value.len().div_ceil(PIECE) as u32 },
        ];
        self.p.command_extents(self.now, Protocol::Resp2, args)
    }

    /// A sweep at the member's time (it collects finished streams' pieces).
    fn sweep(&mut self) {
        let sweep = self.p.sweep(self.now, 64, 64);
        self.apply(&sweep);
    }

    /// What a member proposes to cut a stream of `count` pieces: an empty
    /// piece at the last index, out of order.
    fn cut(&mut self, stream: StreamId, count: u32) -> Vec<u8> {
        self.p.piece(self.now, PieceHead { stream, index: count - 1, count }, Arg::Inline(Cow::Borrowed(&[])))
    }

    fn pieces_kept(&mut self) -> usize {
        let mut n = 0;
        self.m.keyspace().internal_scan(&[PIECE_TAG], 1 << 20, &mut |k| n += usize::from(k[0] == PIECE_TAG));
        n
    }
}

fn value(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

fn bulk(v: &[u8]) -> String {
    format!("${}\r\n{}\r\n", v.len(), String::from_utf8_lossy(v))
}

#[test]
fn a_streamed_set_stores_the_whole_value_and_drops_its_pieces() {
    let mut t = Member::new();
    let v = value(5 * PIECE + 17);
    let stream = t.p.stream_id(t.now);
    for piece in t.pieces(stream, &v) {
        assert_eq!(t.apply(&piece), "+OK\r\n");
    }
    assert_eq!(t.pieces_kept(), 6);
    assert_eq!(t.cmd(&[b"DBSIZE"]), ":0\r\n", "pieces are no keys");
    let set = t.streamed("SET", "k", stream, &v);
    assert_eq!(t.apply(&set), "+OK\r\n");
    assert_eq!(t.cmd(&[b"GET", b"k"]), bulk(&v));
    // The same command again (an entry applied twice would be a bug
    // elsewhere) is refused, not applied twice.
    assert!(t.apply(&set).contains("an earlier command used"));
    assert!(t.m.sweep_due(t.now), "the finished stream's pieces wait for a sweep");
    t.sweep();
    assert_eq!(t.pieces_kept(), 0);
    assert!(!t.m.sweep_due(t.now));
    assert_eq!(t.cmd(&[b"GET", b"k"]), bulk(&v), "the value outlives its pieces");
    // APPEND of a streamed value to it.
    let w = value(2 * PIECE);
    let stream = t.p.stream_id(t.now);
    for piece in t.pieces(stream, &w) {
        t.apply(&piece);
    }
    let append = t.streamed("APPEND", "k", stream, &w);
    assert_eq!(t.apply(&append), format!(":{}\r\n", v.len() + w.len()));
    assert_eq!(t.cmd(&[b"GET", b"k"]), bulk(&[v, w].concat()));
}

#[test]
fn a_missing_piece_refuses_the_command_whole_on_every_member() {
    let mut t = Member::new();
    let (v, stream, pieces) = t.begin(3 * PIECE);
    t.apply(&pieces[0]);
    t.apply(&pieces[2]);
    let set = t.streamed("SET", "k", stream, &v);
    let reply = t.apply(&set);
    assert!(reply.starts_with("-ERR") && reply.contains("piece 1") && reply.contains("missing"), "{reply}");
    assert_eq!(t.cmd(&[b"EXISTS", b"k"]), ":0\r\n");
    t.sweep();
    assert_eq!(t.pieces_kept(), 0, "the refused stream's pieces go with the next sweep");
    // A piece of another stream's length does not pass for this one's.
    let stream = t.p.stream_id(t.now);
    let pieces = t.pieces(stream, &v);
    pieces.iter().for_each(|p| _ = t.apply(p));
    let longer = t.streamed("SET", "k", stream, &value(3 * PIECE + 1));
    assert!(t.apply(&longer).contains("missing"));
    assert_eq!(t.cmd(&[b"EXISTS", b"k"]), ":0\r\n");
}

#[test]
fn a_snapshot_taken_mid_stream_carries_its_pieces() {
    let mut a = Member::new();
    let (v, stream, pieces) = a.begin(4 * PIECE);
    a.apply(&pieces[0]);
    a.apply(&pieces[1]);
    let snap = a.m.snapshot();
    let mut b = Member::new();
    b.m.restore(a.m.applied(), &snap).unwrap();
    let set = a.streamed("SET", "k", stream, &v);
    for m in [&mut a, &mut b] {
        m.apply(&pieces[2]);
        m.apply(&pieces[3]);
        assert_eq!(m.apply(&set), "+OK\r\n");
        assert_eq!(m.cmd(&[b"GET", b"k"]), bulk(&v));
        m.sweep();
        assert_eq!(m.pieces_kept(), 0);
    }
}

#[test]
fn a_sweep_collects_a_finished_streams_pieces_within_its_budget() {
    let mut t = Member::new();
    let v = value(150 * PIECE);
    let stream = t.p.stream_id(t.now);
    for piece in t.pieces(stream, &v) {
        t.apply(&piece);
    }
    let set = t.streamed("SET", "k", stream, &v);
    assert_eq!(t.apply(&set), "+OK\r\n");
    t.sweep();
    assert_eq!(t.pieces_kept(), 150 - 64);
    t.sweep();
    assert_eq!(t.pieces_kept(), 150 - 128);
    t.sweep();
    assert_eq!(t.pieces_kept(), 0);
    assert!(!t.m.sweep_due(t.now), "the mark went with the last piece");
    assert_eq!(t.cmd(&[b"GET", b"k"]), bulk(&v));
}

#[test]
fn the_sweep_collects_the_pieces_of_an_abandoned_stream() {
    let mut t = Member::new();
    let (v, stream, pieces) = t.begin(3 * PIECE);
    t.apply(&pieces[0]);
    t.apply(&pieces[1]);
    assert!(!t.m.sweep_due(t.now + ABANDONED_MS - 1), "a young stream's pieces are kept");
    let late = t.now + ABANDONED_MS + 1;
    assert!(t.m.sweep_due(late));
    let sweep = t.p.sweep(late, 64, 64);
    t.apply(&sweep);
    assert_eq!(t.pieces_kept(), 0);
    assert!(!t.m.sweep_due(late));
    // Its command, if it ever comes, is refused.
    let set = t.streamed("SET", "k", stream, &v);
    assert!(t.apply(&set).contains("missing"));
}

/// What a member proposes when a stream ends without its command (its
/// client left): an empty piece out of order, its last index. The stream
/// is broken on every member at once, so the next sweep collects its
/// pieces without waiting for the abandon time, and a piece forwarded
/// past the cut is dropped.
#[test]
fn an_empty_piece_out_of_order_cuts_a_stream_for_the_next_sweep() {
    let mut t = Member::new();
    let (v, stream, pieces) = t.begin(4 * PIECE);
    t.apply(&pieces[0]);
    t.apply(&pieces[1]);
    assert!(!t.m.sweep_due(t.now), "an open stream is kept");
    let cut = t.cut(stream, 4);
    assert_eq!(t.apply(&cut), "+OK\r\n");
    assert!(t.m.sweep_due(t.now), "a cut stream is collected at once");
    assert_eq!(t.apply(&pieces[2]), "+OK\r\n", "a piece after the cut is answered");
    t.sweep();
    assert_eq!(t.pieces_kept(), 0, "the piece after the cut was dropped, the others swept");
    assert!(!t.m.sweep_due(t.now));
    let set = t.streamed("SET", "k", stream, &v);
    assert!(t.apply(&set).contains("missing"));
    assert_eq!(t.cmd(&[b"EXISTS", b"k"]), ":0\r\n");

    // A stream cut before any of its pieces applied leaves nothing either.
    let (_, stream, _) = t.begin(4 * PIECE);
    let cut = t.cut(stream, 4);
    t.apply(&cut);
    assert!(t.m.sweep_due(t.now));
    t.sweep();
    assert!(!t.m.sweep_due(t.now), "its state went with the sweep");
}
