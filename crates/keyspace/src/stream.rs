//! A stream's stored form: a header (the key's value, [`Kind::Stream`])
//! and *nodes*, internal entries of the keyspace named by the header's
//! generation, as Redis keeps a stream in a radix tree of listpack nodes.
//!
//! An entry is appended to the last node, or to a new node after it when
//! the last is full (Redis's `stream-node-max-entries`, counting entries
//! deleted in it, and `stream-node-max-bytes`). The node appends go to is
//! kept *segmented*: a small record at its node key ([`Segmented`]: its
//! counts and size) and each entry an internal entry of its own
//! ([`entry_key`]), so an append writes the new entry, that record and the
//! header, whatever the node's and the stream's length. When a new node
//! starts, the previous one is *sealed*: written whole (one internal entry,
//! as below) and its entry records deleted, so reading an older node is one
//! read. Either form may be found anywhere (a pool written before segmented
//! nodes, an XDEL that emptied the last node); an append to a whole last
//! node segments it once. Nodes are
//! numbered from `head` to `tail` (exclusive) in ID order; a node whose
//! every entry was deleted is removed, so numbers may be missing in
//! between (found with [`Keyspace::internal_scan`]). XDEL and an exact trim
//! that ends inside a node mark entries deleted in it, as Redis does, so
//! node boundaries and approximate trimming (`~`, whole nodes only) follow
//! Redis's.
//!
//! Header (little-endian; `docs/FORMAT.md`, "Streams"):
//! ```text
//! offset  size  field
//! 0       4     magic FF FF FF FF (as a chunked collection's header)
//! 4       1     kind: 5
//! 5       1     format version: 1
//! 6       2     zero
//! 8       8     generation: names the nodes, crate::chunked's rules
//! 16      8     length: live entries
//! 24      8     head: first node number
//! 32      8     tail: one past the last node number
//! 40      16    last-generated ID (ms, seq)
//! 56      16    first entry ID (0-0 when empty)
//! 72      16    max deleted entry ID
//! 88      8     entries added, ever
//! 96      8     group numbers taken: the next consumer group is numbered
//!               this plus one (0 in a pool written before consumer groups)
//! ```
//! Node (the internal entry `00 gen:u64be number:u64be`):
//! ```text
//! live:u32 deleted:u32, then per entry in ID order:
//!   ms:u64 seq:u64 flags:u8 (1: deleted) fields:u32, then per field
//!   field-len:u32 field value-len:u32 value
//! ```
//! A segmented node (the node key's value, then one internal entry per
//! entry at `00 gen:u64be number:u64be index:u32be`, indexes `0..count`):
//! ```text
//! FF FF FF FF (a whole node's live count is never u32::MAX)
//! count:u32 live:u32 zero:u32 bytes:u64 (its whole form's length)
//! each entry record: one entry as in a whole node
//! ```
//! A node is written within the keyspace's batch, so it is never torn: the
//! engine's commit covers it (no checksum of its own).

use crate::chunked::MAGIC;
use crate::store::Kind;

/// A header's length.
pub const HEADER_BYTES: usize = 104;
/// The header format version.
const VERSION: u8 = 1;

/// A stream entry ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct StreamId {
    /// Milliseconds part.
    pub ms: u64,
    /// Sequence within the millisecond.
    pub seq: u64,
}

impl StreamId {
    /// 0-0, below every entry's ID.
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    /// The largest ID.
    pub const MAX: StreamId = StreamId { ms: u64::MAX, seq: u64::MAX };

    /// The next ID (`None` past the largest).
    pub fn next(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (u64::MAX, u64::MAX) => None,
            (ms, u64::MAX) => Some(StreamId { ms: ms + 1, seq: 0 }),
            (ms, seq) => Some(StreamId { ms, seq: seq + 1 }),
        }
    }

    /// The previous ID (`None` before the smallest).
    pub fn prev(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (0, 0) => None,
            (ms, 0) => Some(StreamId { ms: ms - 1, seq: u64::MAX }),
            (ms, seq) => Some(StreamId { ms, seq: seq - 1 }),
        }
    }

    /// `ms-seq`, as Redis writes an ID.
    pub fn text(self) -> String {
        format!("{}-{}", self.ms, self.seq)
    }
}

/// A stream's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The generation naming the nodes.
    pub gen: u64,
    /// Live entries.
    pub length: u64,
    /// The first node's number (stored whenever `head < tail`).
    pub head: u64,
    /// One past the last node's number (stored whenever `head < tail`).
    pub tail: u64,
    /// The last ID XADD generated or was given.
    pub last_id: StreamId,
    /// The first live entry's ID (0-0 when empty).
    pub first_id: StreamId,
    /// The largest ID deleted.
    pub max_deleted: StreamId,
    /// Entries ever added.
    pub entries_added: u64,
    /// Consumer group numbers taken ([`crate::stream_group`]): the next
    /// group created is numbered `groups_made + 1`; numbers are never reused.
    pub groups_made: u64,
}

/// Why a header or node does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// Wrong length, version or kind, or fields that do not fit together.
    #[error("stream header malformed")]
    Header,
    /// Lengths past the bytes, IDs out of order, or no live entry.
    #[error("stream node malformed")]
    Node,
}

impl Header {
    /// A new empty stream's header, its nodes named by `gen`.
    pub fn new(gen: u64) -> Header {
        Header { gen, length: 0, head: 0, tail: 0, last_id: StreamId::MIN, first_id: StreamId::MIN, max_deleted: StreamId::MIN, entries_added: 0, groups_made: 0 }
    }

    /// The header bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[Kind::Stream.to_byte(), VERSION, 0, 0]);
        let words = [
            self.gen,
            self.length,
            self.head,
            self.tail,
            self.last_id.ms,
            self.last_id.seq,
            self.first_id.ms,
            self.first_id.seq,
            self.max_deleted.ms,
            self.max_deleted.seq,
            self.entries_added,
            self.groups_made,
        ];
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        assert_eq!(out.len(), HEADER_BYTES);
        out
    }

    /// Decodes a header, checking its fields.
    pub fn decode(bytes: &[u8]) -> Result<Header, StreamError> {
        if bytes.len() != HEADER_BYTES || !bytes.starts_with(&MAGIC) || bytes[4] != Kind::Stream.to_byte() || bytes[5] != VERSION || bytes[6..8] != [0, 0] {
            return Err(StreamError::Header);
        }
        let w = |i: usize| u64::from_le_bytes(bytes[8 + 8 * i..16 + 8 * i].try_into().expect("8 bytes"));
        let h = Header {
            gen: w(0),
            length: w(1),
            head: w(2),
            tail: w(3),
            last_id: StreamId { ms: w(4), seq: w(5) },
            first_id: StreamId { ms: w(6), seq: w(7) },
            max_deleted: StreamId { ms: w(8), seq: w(9) },
            entries_added: w(10),
            groups_made: w(11),
        };
        let empty_ok = h.length > 0 || h.first_id == StreamId::MIN;
        if h.head > h.tail || h.length > h.entries_added || !empty_ok || (h.length > 0 && h.head == h.tail) {
            return Err(StreamError::Header);
        }
        Ok(h)
    }
}

/// One entry of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its ID.
    pub id: StreamId,
    /// Marked deleted (XDEL, or an exact trim inside its node).
    pub deleted: bool,
    /// Field-value pairs, in the order given.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Entry {
    /// Bytes it takes in a node.
    pub fn encoded_len(&self) -> usize {
        21 + self.fields.iter().map(|(f, v)| 8 + f.len() + v.len()).sum::<usize>()
    }

    /// Appends its bytes (as in a node, and as a segmented node's entry record).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.ms.to_le_bytes());
        out.extend_from_slice(&self.id.seq.to_le_bytes());
        out.push(u8::from(self.deleted));
        out.extend_from_slice(&(self.fields.len() as u32).to_le_bytes());
        for (f, v) in &self.fields {
            out.extend_from_slice(&(f.len() as u32).to_le_bytes());
            out.extend_from_slice(f);
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
        }
    }

    /// Its bytes alone (a segmented node's entry record).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out
    }

    /// Decodes an entry record: exactly one entry, every length checked.
    pub fn decode(bytes: &[u8]) -> Result<Entry, StreamError> {
        let mut at = 0;
        let e = decode_entry(bytes, &mut at)?;
        if at != bytes.len() {
            return Err(StreamError::Node);
        }
        Ok(e)
    }
}

/// One entry from `bytes` at `at` (moved past it); every length is checked
/// against the bytes present, so nothing is allocated beyond the input.
fn decode_entry(bytes: &[u8], at: &mut usize) -> Result<Entry, StreamError> {
    let mut take = |n: usize| -> Result<&[u8], StreamError> {
        let end = at.checked_add(n).filter(|&e| e <= bytes.len()).ok_or(StreamError::Node)?;
        let s = &bytes[*at..end];
        *at = end;
        Ok(s)
    };
    let u32_of = |s: &[u8]| u32::from_le_bytes(s.try_into().expect("4 bytes"));
    let u64_of = |s: &[u8]| u64::from_le_bytes(s.try_into().expect("8 bytes"));
    let id = StreamId { ms: u64_of(take(8)?), seq: u64_of(take(8)?) };
    let flags = take(1)?[0];
    if flags > 1 {
        return Err(StreamError::Node);
    }
    let n = u32_of(take(4)?) as usize;
    if n == 0 || n > bytes.len() / 8 {
        return Err(StreamError::Node);
    }
    let mut fields = Vec::with_capacity(n);
    for _ in 0..n {
        let fl = u32_of(take(4)?) as usize;
        let f = take(fl)?.to_vec();
        let vl = u32_of(take(4)?) as usize;
        let v = take(vl)?.to_vec();
        fields.push((f, v));
    }
    Ok(Entry { id, deleted: flags == 1, fields })
}

/// The first bytes of a segmented node's record.
const SEGMENTED: [u8; 4] = [0xFF; 4];
/// A segmented node's record's length.
pub const SEGMENTED_BYTES: usize = 24;

/// The record at a segmented node's key (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segmented {
    /// Entry records, deleted entries included, at indexes `0..count`.
    pub count: u32,
    /// Entries not deleted (at least 1: an empty node is removed).
    pub live: u32,
    /// Bytes of the node's whole form ([`Node::encoded_len`]), for the byte limit.
    pub bytes: u64,
}

impl Segmented {
    /// The record's bytes.
    pub fn encode(&self) -> [u8; SEGMENTED_BYTES] {
        let mut out = [0u8; SEGMENTED_BYTES];
        out[..4].copy_from_slice(&SEGMENTED);
        out[4..8].copy_from_slice(&self.count.to_le_bytes());
        out[8..12].copy_from_slice(&self.live.to_le_bytes());
        out[16..24].copy_from_slice(&self.bytes.to_le_bytes());
        out
    }

    /// The record, if `bytes` (a node key's value) is one; `None` for a
    /// whole node.
    pub fn decode(bytes: &[u8]) -> Result<Option<Segmented>, StreamError> {
        if !bytes.starts_with(&SEGMENTED) {
            return Ok(None);
        }
        if bytes.len() != SEGMENTED_BYTES || bytes[12..16] != [0; 4] {
            return Err(StreamError::Node);
        }
        let count = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
        let live = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        let node_bytes = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
        if live == 0 || live > count {
            return Err(StreamError::Node);
        }
        Ok(Some(Segmented { count, live, bytes: node_bytes }))
    }
}

/// The internal key of entry `index` of segmented node `number` of
/// generation `gen`: the node's key, then the index (big-endian, so a
/// node's entries follow its key in order, before the next node's key).
pub fn entry_key(gen: u64, number: u64, index: u32) -> [u8; 21] {
    let mut k = [0u8; 21];
    k[..17].copy_from_slice(&crate::chunked::chunk_key(gen, number));
    k[17..].copy_from_slice(&index.to_be_bytes());
    k
}

/// A node: entries in ID order, live and deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node {
    /// The entries, IDs increasing.
    pub entries: Vec<Entry>,
}

impl Node {
    /// Entries not deleted.
    pub fn live(&self) -> usize {
        self.entries.iter().filter(|e| !e.deleted).count()
    }

    /// Bytes of [`Node::encode`].
    pub fn encoded_len(&self) -> usize {
        8 + self.entries.iter().map(Entry::encoded_len).sum::<usize>()
    }

    /// The node bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        let live = self.live() as u32;
        out.extend_from_slice(&live.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u32 - live).to_le_bytes());
        for e in &self.entries {
            e.encode_into(&mut out);
        }
        out
    }

    /// Decodes a node; every length is checked against the bytes present.
    pub fn decode(bytes: &[u8]) -> Result<Node, StreamError> {
        if bytes.len() < 8 {
            return Err(StreamError::Node);
        }
        let live = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes")) as usize;
        let deleted = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")) as usize;
        let total = live.checked_add(deleted).ok_or(StreamError::Node)?;
        // An entry takes at least 21 bytes: no allocation beyond the input.
        if total > bytes.len() / 21 {
            return Err(StreamError::Node);
        }
        let mut at = 8usize;
        let mut entries: Vec<Entry> = Vec::with_capacity(total);
        for _ in 0..total {
            let e = decode_entry(bytes, &mut at)?;
            if entries.last().is_some_and(|p| p.id >= e.id) {
                return Err(StreamError::Node);
            }
            entries.push(e);
        }
        let node = Node { entries };
        if at != bytes.len() || node.live() != live || node.entries.is_empty() || live == 0 {
            return Err(StreamError::Node);
        }
        Ok(node)
    }
}

/// Node sizes (Redis's `stream-node-max-entries` and `-bytes`; 0: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLimits {
    /// Entries a node holds, deleted ones included (0: no limit).
    pub max_entries: u64,
    /// Bytes a node reaches before a new one starts (0: no limit).
    pub max_bytes: u64,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits { max_entries: 100, max_bytes: 4096 }
    }
}

impl NodeLimits {
    /// Whether an entry of `entry_bytes` goes to a new node after `node`
    /// (Redis's rule: the node's bytes with the new fields reach the byte
    /// limit, or its entries, deleted ones included, the entry limit).
    pub fn full(&self, node: &Node, entry_bytes: usize) -> bool {
        self.full_at(node.entries.len() as u64, node.encoded_len() as u64, entry_bytes)
    }

    /// [`NodeLimits::full`] from a node's entry count and whole-form bytes.
    pub fn full_at(&self, entries: u64, node_bytes: u64, entry_bytes: usize) -> bool {
        let bytes_full = self.max_bytes > 0 && node_bytes.saturating_add(entry_bytes as u64) >= self.max_bytes;
        let entries_full = self.max_entries > 0 && entries >= self.max_entries;
        bytes_full || entries_full
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ms: u64, seq: u64, deleted: bool) -> Entry {
        Entry { id: StreamId { ms, seq }, deleted, fields: vec![(b"f".to_vec(), b"value".to_vec())] }
    }

    #[test]
    fn header_and_node_round_trip_and_refuse_damage() {
        let mut h = Header::new(7);
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        h.length = 2;
        h.entries_added = 3;
        h.tail = 4;
        h.first_id = StreamId { ms: 1, seq: 0 };
        h.last_id = StreamId { ms: 5, seq: 9 };
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        let mut bad = h.encode();
        bad[4] = 1;
        assert_eq!(Header::decode(&bad), Err(StreamError::Header));
        assert_eq!(Header::decode(&bad[..50]), Err(StreamError::Header));
        let node = Node { entries: vec![entry(1, 0, false), entry(1, 1, true), entry(2, 0, false)] };
        let bytes = node.encode();
        assert_eq!(bytes.len(), node.encoded_len());
        assert_eq!(Node::decode(&bytes), Ok(node.clone()));
        for cut in 0..bytes.len() {
            assert!(Node::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut unordered = node.clone();
        unordered.entries.swap(0, 2);
        assert!(Node::decode(&unordered.encode()).is_err());
        let mut huge = bytes.clone();
        huge[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Node::decode(&huge).is_err());
    }

    #[test]
    fn segmented_records_round_trip_and_refuse_damage() {
        let seg = Segmented { count: 7, live: 5, bytes: 300 };
        assert_eq!(Segmented::decode(&seg.encode()), Ok(Some(seg)));
        // A whole node is not a segmented record.
        let node = Node { entries: vec![entry(1, 0, false)] };
        assert_eq!(Segmented::decode(&node.encode()), Ok(None));
        let mut bad = seg.encode();
        bad[8..12].copy_from_slice(&8u32.to_le_bytes()); // live above count
        assert_eq!(Segmented::decode(&bad), Err(StreamError::Node));
        let mut dead = seg.encode();
        dead[8..12].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(Segmented::decode(&dead), Err(StreamError::Node));
        assert_eq!(Segmented::decode(&seg.encode()[..20]), Err(StreamError::Node));
        let e = entry(3, 4, true);
        assert_eq!(Entry::decode(&e.encode()), Ok(e.clone()));
        let mut two = e.encode();
        two.extend_from_slice(&e.encode());
        assert_eq!(Entry::decode(&two), Err(StreamError::Node), "exactly one entry");
        for cut in 0..e.encode().len() {
            assert!(Entry::decode(&e.encode()[..cut]).is_err());
        }
        // An entry key sorts after its node's key and before the next node's.
        let (a, b, c) = (crate::chunked::chunk_key(9, 4), entry_key(9, 4, u32::MAX), crate::chunked::chunk_key(9, 5));
        assert!(a.as_slice() < b.as_slice() && b.as_slice() < c.as_slice());
    }

    #[test]
    fn ids_step_and_wrap_as_redis_does() {
        assert_eq!(StreamId { ms: 1, seq: u64::MAX }.next(), Some(StreamId { ms: 2, seq: 0 }));
        assert_eq!(StreamId::MAX.next(), None);
        assert_eq!(StreamId { ms: 2, seq: 0 }.prev(), Some(StreamId { ms: 1, seq: u64::MAX }));
        assert_eq!(StreamId::MIN.prev(), None);
        assert_eq!(StreamId { ms: 3, seq: 4 }.text(), "3-4");
    }
}
