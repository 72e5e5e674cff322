//! Byte layouts of the tree: the header line, the root word and nodes.
//! `docs/format/btree.md` draws them.
//!
//! Invariants:
//! - every field is fixed-width little-endian; node indices are `u32`;
//! - a node's bytes are `[0, used)`: a 16 B header, `count` u16 slots (the
//!   entries' offsets, in key order), then the entries back to back; the
//!   node's CRC-32C covers `[0, 8) ++ [12, used)`;
//! - entry 0 of an internal node has an empty key (it stands for −∞);
//! - `used <= NODE_BYTES`, and every slot and entry lies inside `[0, used)`
//!   (checked by [`NodeRef::validate`] before a node from the media is
//!   trusted).

pub use pmem::le::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};
use pmem::Media;

use crate::error::OpenError;

/// Format version this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// `b"PMWBTREE"`: a tree starts here.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PMWBTREE");
/// A tree's `base` must be a multiple of this (one XPLine).
pub const BASE_ALIGN: u64 = 256;
/// Bytes of a node: 16 XPLines.
pub const NODE_BYTES: usize = 4096;
/// Bytes before node 0 (header line, root word, padding to a node).
pub const HEADER_BLOCK_BYTES: u64 = NODE_BYTES as u64;
/// Bytes of the header line.
pub const HEADER_LINE_BYTES: usize = 64;
/// Offset (from `base`) of the root word.
pub const ROOT_WORD_AT: u64 = 64;
/// Longest key.
pub const MAX_KEY_BYTES: usize = 255;
/// Longest value (32 extents of 8 B).
pub const MAX_VALUE_BYTES: usize = 256;
/// Bytes of a node header.
pub const NODE_HEADER_BYTES: usize = 16;
/// Bytes of slots + entries a node can hold.
pub const NODE_CAPACITY: usize = NODE_BYTES - NODE_HEADER_BYTES;
/// A non-root node holds at least this many bytes of slots + entries.
pub const MIN_FILL: usize = NODE_CAPACITY / 4;
/// The tallest tree this code builds or opens (root level + 1).
pub const MAX_HEIGHT: u32 = 32;
/// Largest leaf entry with its slot: slot, key length, key, value length, value.
pub const MAX_LEAF_ENTRY: usize = 2 + 1 + MAX_KEY_BYTES + 2 + MAX_VALUE_BYTES;
/// Largest internal entry with its slot: slot, key length, key, child.
pub const MAX_INTERNAL_ENTRY: usize = 2 + 1 + MAX_KEY_BYTES + 4;

const KIND_LEAF: u8 = 1;
const KIND_INTERNAL: u8 = 2;
/// The top 16 bits of a valid root word.
const ROOT_TAG: u64 = 0xB7EE;
const HEADER_CRC_AT: usize = 60;

// The fill bounds of docs/format/btree.md rely on these.
const _: () = assert!(MIN_FILL + MAX_LEAF_ENTRY <= NODE_CAPACITY / 2);
const _: () = assert!(NODE_CAPACITY / 2 + MAX_LEAF_ENTRY + MIN_FILL + MAX_KEY_BYTES <= NODE_CAPACITY);
const _: () = assert!(MIN_FILL + MAX_INTERNAL_ENTRY + MAX_KEY_BYTES <= NODE_CAPACITY / 2);
const _: () = assert!(NODE_BYTES.is_multiple_of(BASE_ALIGN as usize));

/// The header line of a tree of `node_count` nodes, sealed with its CRC.
pub fn header_line(node_count: u32) -> [u8; HEADER_LINE_BYTES] {
    let mut line = [0u8; HEADER_LINE_BYTES];
    put_u64(&mut line, 0, MAGIC);
    put_u32(&mut line, 8, FORMAT_VERSION);
    put_u32(&mut line, 12, NODE_BYTES as u32);
    put_u32(&mut line, 16, node_count);
    put_u32(&mut line, 20, MAX_KEY_BYTES as u32);
    put_u32(&mut line, 24, MAX_VALUE_BYTES as u32);
    let crc = crc32c::crc32c(&line[..HEADER_CRC_AT]);
    put_u32(&mut line, HEADER_CRC_AT, crc);
    line
}

/// Reads and checks the header line at `base`; returns the node count.
pub fn read_header<M: Media>(media: &M, base: u64) -> Result<u32, OpenError> {
    if !base.is_multiple_of(BASE_ALIGN) {
        return Err(OpenError::Misaligned { base });
    }
    if base.checked_add(HEADER_BLOCK_BYTES).is_none_or(|end| end > media.len()) {
        return Err(OpenError::MediaTooSmall { base, have: media.len() });
    }
    let mut line = [0u8; HEADER_LINE_BYTES];
    media.read(base, &mut line);
    let found = get_u64(&line, 0);
    if found != MAGIC {
        return Err(OpenError::BadMagic { base, found });
    }
    let stored = get_u32(&line, HEADER_CRC_AT);
    let computed = crc32c::crc32c(&line[..HEADER_CRC_AT]);
    if stored != computed {
        return Err(OpenError::HeaderChecksum { base, stored, computed });
    }
    let version = get_u32(&line, 8);
    if version != FORMAT_VERSION {
        return Err(OpenError::UnsupportedVersion { found: version, supported: FORMAT_VERSION });
    }
    let fields = [get_u32(&line, 12), get_u32(&line, 20), get_u32(&line, 24)];
    if fields != [NODE_BYTES as u32, MAX_KEY_BYTES as u32, MAX_VALUE_BYTES as u32] {
        return Err(OpenError::BadConfig { why: format!("node/key/value sizes {fields:?}") });
    }
    Ok(get_u32(&line, 16))
}

/// The root word: `tag << 48 | height << 32 | root node`.
pub fn root_word(root: u32, height: u32) -> u64 {
    assert!(height >= 1, "height {height}");
    assert!(height <= MAX_HEIGHT, "height {height}");
    ROOT_TAG << 48 | (height as u64) << 32 | root as u64
}

/// Decodes a root word into `(root node, height)`.
pub fn decode_root(word: u64) -> Option<(u32, u32)> {
    let height = (word >> 32) as u16 as u32;
    if word >> 48 != ROOT_TAG || height == 0 || height > MAX_HEIGHT {
        return None;
    }
    Some((word as u32, height))
}

/// What an entry carries besides its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload<'a> {
    /// A leaf entry's value.
    Value(&'a [u8]),
    /// An internal entry's child node.
    Child(u32),
}

/// One entry to be packed into a node.
#[derive(Clone, Copy, Debug)]
pub struct EntryRef<'a> {
    /// The key (empty for entry 0 of an internal node).
    pub key: &'a [u8],
    /// The value or child.
    pub payload: Payload<'a>,
}

impl EntryRef<'_> {
    /// Bytes this entry takes in a node, its slot included.
    pub fn size(&self) -> usize {
        let payload = match self.payload {
            Payload::Value(value) => 2 + value.len(),
            Payload::Child(_) => 4,
        };
        2 + 1 + self.key.len() + payload
    }
}

/// A read-only view of a node's bytes (validated, or built by [`pack`]).
#[derive(Clone, Copy)]
pub struct NodeRef<'a> {
    bytes: &'a [u8],
}

impl<'a> NodeRef<'a> {
    /// A view of `bytes` (at least the node's `used` bytes).
    pub fn new(bytes: &'a [u8]) -> NodeRef<'a> {
        NodeRef { bytes }
    }

    /// Whether this is a leaf.
    pub fn is_leaf(&self) -> bool {
        self.bytes[0] == KIND_LEAF
    }

    /// Height above the leaves (0 for a leaf).
    pub fn level(&self) -> u32 {
        self.bytes[1] as u32
    }

    /// Number of entries.
    pub fn count(&self) -> usize {
        get_u16(self.bytes, 2) as usize
    }

    /// Bytes in use, header included.
    pub fn used(&self) -> usize {
        get_u16(self.bytes, 4) as usize
    }

    /// Bytes of slots + entries (what the fill bounds count).
    pub fn fill(&self) -> usize {
        self.used() - NODE_HEADER_BYTES
    }

    /// Where entry `index` starts (its slot's value).
    pub fn entry_at(&self, index: usize) -> usize {
        debug_assert!(index < self.count());
        get_u16(self.bytes, NODE_HEADER_BYTES + 2 * index) as usize
    }

    /// Where entry `index` ends (entries are packed in slot order).
    pub fn entry_end(&self, index: usize) -> usize {
        if index + 1 < self.count() {
            self.entry_at(index + 1)
        } else {
            self.used()
        }
    }

    /// The key of entry `index`.
    pub fn key(&self, index: usize) -> &'a [u8] {
        let at = self.entry_at(index);
        let len = self.bytes[at] as usize;
        &self.bytes[at + 1..at + 1 + len]
    }

    /// The value of leaf entry `index`.
    pub fn value(&self, index: usize) -> &'a [u8] {
        let at = self.entry_at(index);
        let at = at + 1 + self.bytes[at] as usize;
        let len = get_u16(self.bytes, at) as usize;
        &self.bytes[at + 2..at + 2 + len]
    }

    /// Where the value of leaf entry `index` lies in the node's bytes.
    pub fn value_range(&self, index: usize) -> std::ops::Range<usize> {
        let at = self.entry_at(index);
        let at = at + 1 + self.bytes[at] as usize;
        let len = get_u16(self.bytes, at) as usize;
        at + 2..at + 2 + len
    }

    /// The child of internal entry `index`.
    pub fn child(&self, index: usize) -> u32 {
        get_u32(self.bytes, self.child_at(index))
    }

    /// Where the child of internal entry `index` lies in the node's bytes
    /// (a `u32` a batch may patch in a node it wrote).
    pub fn child_at(&self, index: usize) -> usize {
        let at = self.entry_at(index);
        at + 1 + self.bytes[at] as usize
    }

    /// The node's bytes as given to [`NodeRef::new`].
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Entry `index` as an [`EntryRef`].
    pub fn entry(&self, index: usize) -> EntryRef<'a> {
        let payload =
            if self.is_leaf() { Payload::Value(self.value(index)) } else { Payload::Child(self.child(index)) };
        EntryRef { key: self.key(index), payload }
    }

    /// Leaf: `Ok(i)` if entry `i` has `key`, else `Err(i)`, where it would go.
    pub fn search_leaf(&self, key: &[u8]) -> Result<usize, usize> {
        self.search_leaf_from(0, key)
    }

    /// [`NodeRef::search_leaf`] among entries `from..` (every key before
    /// `from` is known to be less than `key`).
    pub fn search_leaf_from(&self, from: usize, key: &[u8]) -> Result<usize, usize> {
        let (mut lo, mut hi) = (from, self.count());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.key(mid).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// Internal: the entry whose subtree holds `key` (the last entry whose
    /// key is ≤ `key`; entry 0 stands for −∞).
    pub fn search_internal(&self, key: &[u8]) -> usize {
        let (mut lo, mut hi) = (1, self.count());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid) <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo - 1
    }

    /// The node's CRC as stored.
    pub fn stored_crc(&self) -> u32 {
        get_u32(self.bytes, 8)
    }

    /// Checks the CRC and that every slot and entry lies inside the node,
    /// so the accessors above cannot read out of bounds.
    pub fn validate(&self) -> Result<(), String> {
        let used = self.used();
        if !(NODE_HEADER_BYTES..=NODE_BYTES).contains(&used) || used > self.bytes.len() {
            return Err(format!("used {used} out of range"));
        }
        let computed = node_crc(&self.bytes[..used]);
        if computed != self.stored_crc() {
            return Err(format!("CRC mismatch: stored {:#010x}, computed {computed:#010x}", self.stored_crc()));
        }
        let kind = self.bytes[0];
        if kind != KIND_LEAF && kind != KIND_INTERNAL {
            return Err(format!("kind {kind}"));
        }
        if (kind == KIND_LEAF) != (self.level() == 0) {
            return Err(format!("kind {kind} at level {}", self.level()));
        }
        let count = self.count();
        let mut end = NODE_HEADER_BYTES + 2 * count;
        if end > used {
            return Err(format!("{count} slots overflow {used} B"));
        }
        for index in 0..count {
            let at = self.entry_at(index);
            if at != end || at >= used {
                return Err(format!("entry {index} at {at}, expected {end}"));
            }
            let key_end = at + 1 + self.bytes[at] as usize;
            end = if kind == KIND_LEAF {
                let value_at = key_end + 2;
                if value_at > used {
                    return Err(format!("entry {index} overflows"));
                }
                let len = get_u16(self.bytes, key_end) as usize;
                if len > MAX_VALUE_BYTES {
                    return Err(format!("entry {index}: value of {len} B"));
                }
                value_at + len
            } else {
                key_end + 4
            };
            if end > used {
                return Err(format!("entry {index} overflows"));
            }
        }
        if end != used {
            return Err(format!("entries end at {end}, used {used}"));
        }
        Ok(())
    }
}

/// CRC-32C of a node's `[0, used)` bytes, skipping the CRC field `[8, 12)`.
pub fn node_crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&bytes[..8]), &bytes[12..])
}

/// Bytes of slots + entries `entries` take.
pub fn fill_of(entries: &[EntryRef]) -> usize {
    entries.iter().map(EntryRef::size).sum()
}

/// A piece of a node being built: a run of entries copied from an
/// existing node (one `memcpy` of their bytes, slots shifted), or one entry.
#[derive(Clone, Debug)]
pub enum Part<'a> {
    /// Entries `range` of a node, bytes unchanged.
    Run(NodeRef<'a>, std::ops::Range<usize>),
    /// One entry.
    One(EntryRef<'a>),
}

impl Part<'_> {
    /// Entries in this part.
    pub fn count(&self) -> usize {
        match self {
            Part::Run(_, range) => range.len(),
            Part::One(_) => 1,
        }
    }

    /// Bytes of slots + entries.
    pub fn size(&self) -> usize {
        match self {
            Part::Run(_, range) if range.is_empty() => 0,
            Part::Run(node, range) => 2 * range.len() + node.entry_end(range.end - 1) - node.entry_at(range.start),
            Part::One(entry) => entry.size(),
        }
    }
}

impl std::fmt::Debug for NodeRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeRef(level {}, {} entries, {} B)", self.level(), self.count(), self.used())
    }
}

/// The entries of `parts`, one by one (for the split path).
pub fn expand<'a>(parts: &[Part<'a>]) -> Vec<EntryRef<'a>> {
    let mut entries = Vec::with_capacity(parts.iter().map(Part::count).sum());
    for part in parts {
        match part {
            Part::Run(node, range) => entries.extend(range.clone().map(|i| node.entry(i))),
            Part::One(entry) => entries.push(*entry),
        }
    }
    entries
}

/// Writes `entry` at `at` (its key replaced by the empty key if `minus_infinity`);
/// returns the end.
fn put_entry(out: &mut [u8; NODE_BYTES], at: usize, entry: &EntryRef, leaf: bool, minus_infinity: bool) -> usize {
    let key = if minus_infinity { &[][..] } else { entry.key };
    assert!(key.len() <= MAX_KEY_BYTES, "key of {} B", key.len());
    assert!(at + 3 + key.len() <= NODE_BYTES, "node overflow while packing");
    out[at] = key.len() as u8;
    out[at + 1..at + 1 + key.len()].copy_from_slice(key);
    let at = at + 1 + key.len();
    match (entry.payload, leaf) {
        (Payload::Value(value), true) => {
            assert!(value.len() <= MAX_VALUE_BYTES, "value of {} B", value.len());
            assert!(at + 2 + value.len() <= NODE_BYTES, "node overflow while packing");
            put_u16(out, at, value.len() as u16);
            out[at + 2..at + 2 + value.len()].copy_from_slice(value);
            at + 2 + value.len()
        }
        (Payload::Child(child), false) => {
            assert!(at + 4 <= NODE_BYTES, "node overflow while packing");
            put_u32(out, at, child);
            at + 4
        }
        _ => panic!("entry kind does not match the node"),
    }
}

/// Packs `parts` (sorted, fitting one node) into `out` as a node at
/// `level`; returns the used bytes. Entry 0 of an internal node is
/// written with an empty key (a run that starts the node must already
/// have it). The result is sealed with its CRC.
pub fn pack_parts(level: u32, parts: &[Part], out: &mut [u8; NODE_BYTES]) -> usize {
    let leaf = level == 0;
    let count: usize = parts.iter().map(Part::count).sum();
    assert!(NODE_HEADER_BYTES + 2 * count <= NODE_BYTES, "{count} slots overflow a node");
    let mut slot = NODE_HEADER_BYTES;
    let mut at = NODE_HEADER_BYTES + 2 * count;
    for part in parts {
        match part {
            Part::Run(_, range) if range.is_empty() => {}
            Part::Run(node, range) => {
                assert_eq!(node.is_leaf(), leaf, "a run from a node of another kind");
                assert!(leaf || slot > NODE_HEADER_BYTES || node.key(range.start).is_empty(), "internal entry 0 keyed");
                let (from, to) = (node.entry_at(range.start), node.entry_end(range.end - 1));
                assert!(at + to - from <= NODE_BYTES, "node overflow while packing");
                for i in range.clone() {
                    put_u16(out, slot, (node.entry_at(i) + at - from) as u16);
                    slot += 2;
                }
                out[at..at + to - from].copy_from_slice(&node.bytes[from..to]);
                at += to - from;
            }
            Part::One(entry) => {
                put_u16(out, slot, at as u16);
                at = put_entry(out, at, entry, leaf, !leaf && slot == NODE_HEADER_BYTES);
                slot += 2;
            }
        }
    }
    put_header(out, level, count, at);
    let crc = node_crc(&out[..at]);
    put_u32(out, 8, crc);
    at
}

/// Writes a node header (kind, level, `count` entries, `used` bytes) with a
/// zero CRC field: the caller seals the node with [`node_crc`].
pub fn put_header(out: &mut [u8; NODE_BYTES], level: u32, count: usize, used: usize) {
    assert!(NODE_HEADER_BYTES + 2 * count <= used, "{count} slots overflow {used} B");
    assert!(used <= NODE_BYTES, "node of {used} B");
    out[0] = if level == 0 { KIND_LEAF } else { KIND_INTERNAL };
    out[1] = u8::try_from(level).expect("level fits a byte");
    put_u16(out, 2, count as u16);
    put_u16(out, 4, used as u16);
    put_u16(out, 6, 0);
    put_u32(out, 8, 0);
    put_u32(out, 12, 0);
}

/// Packs `entries` (sorted, fitting one node); see [`pack_parts`].
pub fn pack(level: u32, entries: &[EntryRef], out: &mut [u8; NODE_BYTES]) -> usize {
    let parts: Vec<Part> = entries.iter().map(|e| Part::One(*e)).collect();
    pack_parts(level, &parts, out)
}

/// Where to cut `entries` into two nodes: the longest prefix of at most
/// half the bytes (at least one entry on each side). `None` if they fit one node.
pub fn split_point(entries: &[EntryRef]) -> Option<usize> {
    let total = fill_of(entries);
    if total <= NODE_CAPACITY {
        return None;
    }
    assert!(entries.len() >= 2, "one entry overflows a node");
    let mut left = 0;
    let mut cut = 0;
    while cut < entries.len() - 1 && left + entries[cut].size() <= total / 2 {
        left += entries[cut].size();
        cut += 1;
    }
    Some(cut.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_node_validates_and_reads_back() {
        let mut out = [0u8; NODE_BYTES];
        let entries = [
            EntryRef { key: b"a", payload: Payload::Value(b"1") },
            EntryRef { key: b"bb", payload: Payload::Value(b"") },
            EntryRef { key: b"c", payload: Payload::Value(&[7; 256]) },
        ];
        let used = pack(0, &entries, &mut out);
        let node = NodeRef::new(&out[..used]);
        node.validate().unwrap();
        assert_eq!(node.count(), 3);
        assert_eq!(node.value(2), &[7; 256]);
        assert_eq!(node.search_leaf(b"bb"), Ok(1));
        assert_eq!(node.search_leaf(b"b"), Err(1));
        out[used - 1] ^= 1;
        assert!(NodeRef::new(&out[..used]).validate().is_err());
    }

    #[test]
    fn internal_search_treats_entry_zero_as_minus_infinity() {
        let mut out = [0u8; NODE_BYTES];
        let entries = [
            EntryRef { key: b"zzz", payload: Payload::Child(1) },
            EntryRef { key: b"k", payload: Payload::Child(2) },
            EntryRef { key: b"p", payload: Payload::Child(3) },
        ];
        let used = pack(1, &entries, &mut out);
        let node = NodeRef::new(&out[..used]);
        node.validate().unwrap();
        assert_eq!(node.key(0), b"");
        assert_eq!(node.search_internal(b"a"), 0);
        assert_eq!(node.search_internal(b"k"), 1);
        assert_eq!(node.search_internal(b"o"), 1);
        assert_eq!(node.search_internal(b"q"), 2);
    }

    #[test]
    fn root_word_round_trips() {
        assert_eq!(decode_root(root_word(17, 3)), Some((17, 3)));
        assert_eq!(decode_root(0), None);
    }
}
