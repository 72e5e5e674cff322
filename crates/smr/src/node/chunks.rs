//! Chunked transfer of a Raft message larger than one transport payload
//! (a snapshot of a large keyspace, an append of a large value): the
//! sender's [`Outgoing`] cuts the encoded message into chunks as the
//! connection's window allows, the receiver's [`Assembler`] joins them.
//! No I/O here: the replica sends what [`Outgoing::next_chunk`] encodes
//! and steps what [`Assembler::on_chunk`] hands back whole.
//!
//! A chunk (`docs/FORMAT.md`, "Raft message chunks"), little-endian:
//!
//! ```text
//!  0 message id u64 | 8 message length u64 | 16 offset u64
//! 24 crc32c of the chunk's bytes u32 | 28 zero u32 | 32 bytes
//! ```
//!
//! Invariants of the receiver, per incoming connection (a link proves the
//! cluster's secret before anything reaches here):
//! - it holds at most one message, whose first `bytes.len()` bytes arrived
//!   in order, each chunk's checksum checked before its bytes are kept;
//! - a message longer than its bound ([`Assembler::new`]) is refused at
//!   its first chunk, before anything is allocated for it;
//! - a chunk already held (a duplicate, same id, ending at or before what
//!   is held) is ignored; a chunk of another message that does not start
//!   one (offset 0) is ignored; a chunk that leaves a gap (one was lost or
//!   reordered) or whose checksum fails drops the message: the sender's
//!   Raft sends it again;
//! - a new message (offset 0, another id) replaces an unfinished one.
//!
//! A snapshot goes another way (`crate::snapshot::stream`): its body is
//! read from the sender's store chunk by chunk as [`Outgoing`] sends it
//! (never whole in DRAM), the receiver stages each chunk in its own store
//! (`super::snapstream`), and raft-rs's message, naming the body, follows
//! the last chunk. A receiver's [`Resume`] moves the sender's cursor to
//! what the receiver holds.

use std::collections::BTreeMap;

use pmem::le::{get_u32, get_u64};
use transport::ConnId;

use crate::snapshot::stream::{self, BodyId, Resume};

/// A chunk's header: id u64, length u64, offset u64, crc32c u32, zero u32.
pub const CHUNK_HEADER_BYTES: usize = 32;

/// A chunked message on its way to a peer: the encoded message and how
/// much of it went.
pub struct Outgoing {
    /// The connection it goes on (a broken one loses the message).
    pub conn: ConnId,
    /// Its id (per sender, increasing).
    pub id: u64,
    /// It is a snapshot (its send is reported to raft-rs).
    pub snapshot: bool,
    payload: Vec<u8>,
    sent: usize,
    chunk_bytes: usize,
    /// A snapshot's body, streamed before `payload` (the Raft message
    /// naming it, sent whole after the body's last chunk).
    body: Option<BodyCursor>,
}

/// How far a snapshot body went.
struct BodyCursor {
    body: BodyId,
    /// The sending replica.
    from: u64,
    sent: u64,
}

/// What [`Outgoing::next_piece`] encoded.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece {
    /// A chunk of a chunked message, of this many bytes of it.
    Chunk(usize),
    /// A chunk of a snapshot body, of this many bytes of it.
    Body(usize),
    /// The Raft message that follows a snapshot body, whole.
    Message,
    /// The snapshot body is no longer held by the store: the message is lost.
    Gone,
}

impl Outgoing {
    /// `payload` to go on `conn` as chunks of `chunk_bytes`.
    pub fn new(conn: ConnId, id: u64, payload: Vec<u8>, chunk_bytes: usize, snapshot: bool) -> Outgoing {
        assert!(chunk_bytes > 0, "chunks hold at least a byte");
        assert!(!payload.is_empty(), "a chunked message is not empty");
        Outgoing { conn, id, snapshot, payload, sent: 0, chunk_bytes, body: None }
    }

    /// The snapshot `body` streamed from the store on `conn` in chunks of
    /// `chunk_bytes`, then `message` (raft-rs's, naming it) whole.
    pub fn stream(conn: ConnId, id: u64, body: BodyId, from: u64, message: Vec<u8>, chunk_bytes: usize) -> Outgoing {
        assert!(body.len > 0, "a snapshot body is not empty");
        let mut out = Outgoing::new(conn, id, message, chunk_bytes, true);
        out.body = Some(BodyCursor { body, from, sent: 0 });
        out
    }

    /// Every chunk went.
    pub fn done(&self) -> bool {
        self.sent == self.payload.len()
    }

    /// The receiver holds `r.offset` bytes of the body: go on from there
    /// (back, after a lost chunk; forward, after a resumed transfer).
    /// False if this is not the body streamed.
    pub fn resume(&mut self, r: &Resume) -> bool {
        match &mut self.body {
            Some(c) if c.body == r.body && r.offset <= c.body.len && self.sent == 0 => {
                c.sent = r.offset;
                true
            }
            _ => false,
        }
    }

    /// Encodes what goes next into `buf` (cleared first): a body chunk
    /// read with `read` (the store's [`crate::store::Durable::read_snapshot_body`]),
    /// the message after a body, or a chunk of a chunked message.
    pub fn next_piece(&self, buf: &mut Vec<u8>, read: impl FnOnce(&BodyId, u64, &mut [u8]) -> bool) -> Piece {
        match &self.body {
            Some(c) if c.sent < c.body.len => {
                let n = (c.body.len - c.sent).min(self.chunk_bytes as u64) as usize;
                buf.clear();
                buf.resize(stream::STREAM_HEADER_BYTES + n, 0);
                if !read(&c.body, c.sent, &mut buf[stream::STREAM_HEADER_BYTES..]) {
                    return Piece::Gone;
                }
                stream::seal_chunk(&c.body, c.sent, c.from, buf);
                Piece::Body(n)
            }
            Some(_) => {
                buf.clear();
                buf.extend_from_slice(&self.payload);
                Piece::Message
            }
            None => Piece::Chunk(self.next_chunk(buf)),
        }
    }

    /// The piece [`Outgoing::next_piece`] encoded went.
    pub fn went(&mut self, piece: &Piece) {
        match (piece, &mut self.body) {
            (Piece::Body(n), Some(c)) => {
                assert!(c.sent + *n as u64 <= c.body.len, "a chunk within the body");
                c.sent += *n as u64;
            }
            (Piece::Message, Some(c)) => {
                assert_eq!(c.sent, c.body.len, "the message follows the whole body");
                self.sent = self.payload.len();
            }
            (Piece::Chunk(n), None) => self.sent(*n),
            (p, _) => panic!("{p:?} is not what this message sends"),
        }
    }

    /// The next chunk's encoding into `buf` (cleared first); its bytes of
    /// the message, or 0 if every chunk went. [`Outgoing::sent`] marks it
    /// gone once the transport took it.
    pub fn next_chunk(&self, buf: &mut Vec<u8>) -> usize {
        buf.clear();
        let end = (self.sent + self.chunk_bytes).min(self.payload.len());
        let part = &self.payload[self.sent..end];
        if part.is_empty() {
            return 0;
        }
        encode_chunk(self.id, self.payload.len() as u64, self.sent as u64, part, buf);
        part.len()
    }

    /// The chunk of `n` bytes that [`Outgoing::next_chunk`] encoded went.
    pub fn sent(&mut self, n: usize) {
        assert!(n > 0 && self.sent + n <= self.payload.len(), "a chunk within the message");
        self.sent += n;
    }
}

/// Encodes one chunk of message `id` (of `len` bytes) at `offset`.
pub fn encode_chunk(id: u64, len: u64, offset: u64, part: &[u8], buf: &mut Vec<u8>) {
    buf.reserve(CHUNK_HEADER_BYTES + part.len());
    for v in [id, len, offset] {
        buf.extend_from_slice(&v.to_le_bytes());
    }
    buf.extend_from_slice(&crc32c::crc32c(part).to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(part);
}

/// What one chunk did.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// Kept; the message is not whole yet.
    Partial,
    /// Already held, or of a message no longer assembled: ignored.
    Ignored,
    /// The message is whole: its bytes.
    Whole(Vec<u8>),
    /// Refused (and the message it belonged to dropped): why.
    Refused(&'static str),
}

/// A message being joined.
struct Incoming {
    id: u64,
    len: u64,
    bytes: Vec<u8>,
}

/// Joins the chunks of each incoming connection (module docs).
pub struct Assembler {
    max_bytes: u64,
    by_conn: BTreeMap<ConnId, Incoming>,
    /// Planted bug: chunks are joined in arrival order, their offsets and
    /// checksums unchecked.
    unchecked: bool,
}

/// The largest allocation made ahead of the bytes that fill it.
const RESERVE_AHEAD: u64 = 64 << 20;

impl Assembler {
    /// Takes messages of at most `max_bytes`.
    pub fn new(max_bytes: u64) -> Assembler {
        Assembler { max_bytes, by_conn: BTreeMap::new(), unchecked: false }
    }

    /// Plants the bug of joining chunks unchecked (simulation tests only).
    pub fn plant_unchecked(&mut self) {
        self.unchecked = true;
    }

    /// The largest message taken.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Forgets what `conn` sent (it closed).
    pub fn forget(&mut self, conn: ConnId) {
        self.by_conn.remove(&conn);
    }

    /// Bytes held for unfinished messages.
    pub fn held_bytes(&self) -> u64 {
        self.by_conn.values().map(|m| m.bytes.len() as u64).sum()
    }

    /// One chunk from `conn`.
    pub fn on_chunk(&mut self, conn: ConnId, chunk: &[u8]) -> Received {
        if chunk.len() <= CHUNK_HEADER_BYTES {
            self.by_conn.remove(&conn);
            return Received::Refused("a chunk shorter than its header");
        }
        let (id, len, offset, crc) = (get_u64(chunk, 0), get_u64(chunk, 8), get_u64(chunk, 16), get_u32(chunk, 24));
        let part = &chunk[CHUNK_HEADER_BYTES..];
        if self.unchecked {
            return self.join_unchecked(conn, id, len, part);
        }
        if get_u32(chunk, 28) != 0 || crc32c::crc32c(part) != crc {
            self.by_conn.remove(&conn);
            return Received::Refused("a chunk's checksum or header does not match its bytes");
        }
        let Some(end) = offset.checked_add(part.len() as u64).filter(|&end| end <= len) else {
            self.by_conn.remove(&conn);
            return Received::Refused("a chunk past its message's length");
        };
        let current = self.by_conn.get(&conn).filter(|m| m.id == id && m.len == len);
        if let Some(m) = current {
            if end <= m.bytes.len() as u64 {
                return Received::Ignored;
            }
        } else if offset != 0 {
            return Received::Ignored;
        } else if len > self.max_bytes {
            self.by_conn.remove(&conn);
            return Received::Refused("a message larger than this replica takes");
        } else {
            let reserve = usize::try_from(len.min(RESERVE_AHEAD)).expect("bounded");
            self.by_conn.insert(conn, Incoming { id, len, bytes: Vec::with_capacity(reserve) });
        }
        let m = self.by_conn.get_mut(&conn).expect("held or just made");
        if offset != m.bytes.len() as u64 {
            self.by_conn.remove(&conn);
            return Received::Refused("a chunk after a gap (one was lost or reordered)");
        }
        m.bytes.extend_from_slice(part);
        if m.bytes.len() as u64 == len {
            return Received::Whole(self.by_conn.remove(&conn).expect("held").bytes);
        }
        Received::Partial
    }

    /// The planted bug: whatever arrives with the id is appended.
    fn join_unchecked(&mut self, conn: ConnId, id: u64, len: u64, part: &[u8]) -> Received {
        let m = self.by_conn.entry(conn).or_insert_with(|| Incoming { id, len, bytes: Vec::new() });
        if m.id != id {
            *m = Incoming { id, len, bytes: Vec::new() };
        }
        m.bytes.extend_from_slice(part);
        if m.bytes.len() as u64 >= m.len {
            let mut whole = self.by_conn.remove(&conn).expect("held").bytes;
            whole.truncate(usize::try_from(len).unwrap_or(usize::MAX));
            return Received::Whole(whole);
        }
        Received::Partial
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(id: u64, payload: &[u8], size: usize) -> Vec<Vec<u8>> {
        let mut out = Outgoing::new(ConnId(1), id, payload.to_vec(), size, false);
        let mut all = Vec::new();
        loop {
            let mut buf = Vec::new();
            let n = out.next_chunk(&mut buf);
            if n == 0 {
                return all;
            }
            out.sent(n);
            all.push(buf);
        }
    }

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn chunks_in_order_join_and_duplicates_are_ignored() {
        let p = payload(10_000);
        let cs = chunks(1, &p, 999);
        assert_eq!(cs.len(), 11);
        let mut a = Assembler::new(1 << 20);
        for (i, c) in cs.iter().enumerate() {
            if i > 0 {
                assert_eq!(a.on_chunk(ConnId(5), &cs[i - 1]), Received::Ignored, "a duplicate of chunk {}", i - 1);
                assert_eq!(a.on_chunk(ConnId(5), &cs[0]), Received::Ignored, "a late duplicate of the first");
            }
            match a.on_chunk(ConnId(5), c) {
                Received::Whole(w) => assert_eq!((i, w), (cs.len() - 1, p.clone())),
                r => assert_eq!((i < cs.len() - 1, r), (true, Received::Partial)),
            }
        }
        assert_eq!(a.held_bytes(), 0);
        assert_eq!(a.on_chunk(ConnId(5), &cs[3]), Received::Ignored, "a chunk of a finished message");
    }

    #[test]
    fn a_gap_a_bad_checksum_or_an_oversized_message_drops_it() {
        let p = payload(5000);
        let cs = chunks(2, &p, 1000);
        let mut a = Assembler::new(1 << 20);
        assert_eq!(a.on_chunk(ConnId(1), &cs[0]), Received::Partial);
        assert!(matches!(a.on_chunk(ConnId(1), &cs[2]), Received::Refused(_)), "chunk 1 was lost");
        assert_eq!(a.held_bytes(), 0);
        assert_eq!(a.on_chunk(ConnId(1), &cs[1]), Received::Ignored, "the message is gone");
        let mut bad = cs[0].clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(a.on_chunk(ConnId(1), &bad), Received::Refused(_)), "a flipped byte");
        let mut small = Assembler::new(4999);
        assert!(matches!(small.on_chunk(ConnId(1), &cs[0]), Received::Refused(_)), "over the bound");
        assert_eq!(small.held_bytes(), 0);
        assert!(matches!(a.on_chunk(ConnId(1), &cs[0][..CHUNK_HEADER_BYTES]), Received::Refused(_)));
    }

    #[test]
    fn connections_join_apart_and_a_new_message_replaces_an_unfinished_one() {
        let (p, q) = (payload(3000), payload(2500));
        let (cp, cq) = (chunks(1, &p, 1000), chunks(2, &q, 1000));
        let mut a = Assembler::new(1 << 20);
        assert_eq!(a.on_chunk(ConnId(1), &cp[0]), Received::Partial);
        assert_eq!(a.on_chunk(ConnId(2), &cp[0]), Received::Partial);
        assert_eq!(a.on_chunk(ConnId(1), &cq[0]), Received::Partial, "message 2 replaces 1 on conn 1");
        assert_eq!(a.on_chunk(ConnId(1), &cp[1]), Received::Ignored);
        assert_eq!(a.on_chunk(ConnId(1), &cq[1]), Received::Partial);
        assert_eq!(a.on_chunk(ConnId(1), &cq[2]), Received::Whole(q));
        assert_eq!(a.on_chunk(ConnId(2), &cp[1]), Received::Partial);
        assert_eq!(a.on_chunk(ConnId(2), &cp[2]), Received::Whole(p));
    }

    #[test]
    fn the_planted_bug_joins_a_duplicate() {
        let p = payload(3000);
        let cs = chunks(1, &p, 1000);
        let mut a = Assembler::new(1 << 20);
        a.plant_unchecked();
        a.on_chunk(ConnId(1), &cs[0]);
        a.on_chunk(ConnId(1), &cs[0]);
        let Received::Whole(w) = a.on_chunk(ConnId(1), &cs[1]) else { panic!("joined") };
        assert_ne!(w, p, "the duplicate went in");
    }
}
