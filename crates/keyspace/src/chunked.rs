//! Large collections: the chunked representation of a hash, set, sorted set
//! or list that outgrew one blob, and its garbage collection.
//!
//! A collection of at most [`ChunkConfig::max_blob_entries`] members and
//! [`ChunkConfig::max_blob_bytes`] bytes is one [`crate::blob`] (what Redis
//! calls a listpack). A larger one is a *header* (the key's value, of the
//! collection's [`Kind`]) plus *chunks*: internal entries of the keyspace
//! ([`Keyspace::internal_get`]), each a small blob of the same format, so
//! that a command touching one member reads and writes one or two chunks
//! and the header, whatever the collection's size.
//!
//! Header (the key's value; never a valid blob, whose first four bytes are
//! a count that no value can reach):
//! ```text
//! offset  size  field
//! 0       4     magic FF FF FF FF
//! 4       1     kind: Kind::to_byte (1 hash, 2 zset, 3 list, 4 set)
//! 5       1     format version: 1
//! 6       2     zero
//! 8       8     generation: u64, names this collection's chunks
//! 16      8     count: u64, members (list: elements)
//! 24      8     hashed: level L     list: head sequence (i64 as u64)
//! 32      8     hashed: split s     list: tail sequence (i64 as u64)
//! ```
//! Internal keys (a namespace apart from user keys; the engine keyspace
//! stores them behind the byte `FF`, see docs/FORMAT.md):
//! ```text
//! 00 gen:u64be index:u64be   chunk `index` of generation `gen`
//! 01 gen:u64be               tombstone: generation `gen` is dead (empty value)
//! 02                         counter:u64le secret:u64le: generations (next_generation)
//! ```
//! Hashes, sets and sorted sets are *linear hashing* tables: `2^L + s`
//! buckets (`0 <= s < 2^L`); member `m` lives in bucket
//! `b = h(m) mod 2^L`, or `h(m) mod 2^(L+1)` if `b < s`, where `h` is FNV-1a
//! seeded by the generation (unpredictable: [`next_generation`]) and
//! finished by SplitMix64. A bucket is a chunk
//! holding a hash blob (fields in insertion order), a set blob or a zset
//! blob of the members hashed there; an empty bucket has no chunk. When the
//! count passes [`ChunkConfig::bucket_entries`] per bucket on average, one
//! bucket splits in two (bucket `s` into `s` and `s + 2^L`); below a
//! quarter of it, the last two merge: each touches two chunks. Lists are a
//! sequence of list-blob chunks indexed by sequence number (stored with the
//! sign bit flipped, so big-endian order is numeric order), from head to
//! tail; a push adds to the end chunk or starts a new one next to it, a pop
//! empties the end chunk and deletes it.
//!
//! Generations: every chunked collection written whole (a conversion, a
//! COPY, a `*STORE`) takes a fresh generation ([`next_generation`]). Deleting,
//! expiring or overwriting a header writes the generation's tombstone (the
//! keyspace does it, [`Keyspace::has_internal`]), in the same batch, so the
//! command is O(1); [`collect_garbage`] then deletes a bounded number of a
//! dead generation's chunks per call, and the tombstone with the last.
//! RENAME moves the header alone: the delete writes the tombstone, storing
//! the header under the new name removes it again.

use crate::store::{Keyspace, Kind, StoreError};

/// The first bytes of every header.
pub const MAGIC: [u8; 4] = [0xFF; 4];
/// A header's length.
pub const HEADER_BYTES: usize = 40;
/// The header format version.
const VERSION: u8 = 1;
/// Internal key tags.
const CHUNK: u8 = 0x00;
const TOMBSTONE: u8 = 0x01;
const NEXT_GEN: u8 = 0x02;
/// The internal key of the generation entry (counter and secret, [`next_generation`]).
pub const GENERATIONS_KEY: &[u8] = &[NEXT_GEN];

/// When a collection is chunked, and how big its chunks grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkConfig {
    /// Most members a blob holds (Redis's `*-max-listpack-entries`: 128).
    pub max_blob_entries: usize,
    /// Most bytes a blob holds (Redis's `list-max-listpack-size -2`: 8 KiB).
    pub max_blob_bytes: usize,
    /// Average members per hash bucket before one splits.
    pub bucket_entries: usize,
    /// Most elements in one list chunk.
    pub list_chunk_entries: usize,
    /// Most bytes in one list chunk (a chunk with one element may be larger).
    pub list_chunk_bytes: usize,
    /// Planted bug (the crash campaign's canary): a push that starts a new list chunk
    /// advances the header but never writes the chunk.
    #[doc(hidden)]
    pub fault_header_without_chunk: bool,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        // Chunks of about one 2 KiB pool buffer for members of tens of bytes.
        ChunkConfig {
            max_blob_entries: 128,
            max_blob_bytes: 8 << 10,
            bucket_entries: 16,
            list_chunk_entries: 64,
            list_chunk_bytes: 1800,
            fault_header_without_chunk: false,
        }
    }
}

impl ChunkConfig {
    /// Tiny thresholds, so that a test's few members cross them often.
    pub fn tiny() -> Self {
        ChunkConfig {
            max_blob_entries: 2,
            max_blob_bytes: 64,
            bucket_entries: 2,
            list_chunk_entries: 3,
            list_chunk_bytes: 48,
            fault_header_without_chunk: false,
        }
    }
}

/// A chunked collection's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The collection's kind (never [`Kind::String`]).
    pub kind: Kind,
    /// The generation naming its chunks.
    pub gen: u64,
    /// Members (list: elements); at least one.
    pub count: u64,
    /// Hashed kinds: the level `L`; list: the head chunk's sequence.
    pub a: u64,
    /// Hashed kinds: the split pointer `s`; list: the tail chunk's sequence.
    pub b: u64,
}

/// A header that does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Wrong length, version or kind.
    #[error("collection header malformed")]
    Malformed,
    /// Counts or sequences that do not fit together.
    #[error("collection header inconsistent")]
    Inconsistent,
}

impl Header {
    /// The header bytes.
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.kind != Kind::String);
        assert!(self.count > 0, "an empty collection is never stored");
        let mut out = Vec::with_capacity(HEADER_BYTES);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[self.kind.to_byte(), VERSION, 0, 0]);
        for v in [self.gen, self.count, self.a, self.b] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(out.len(), HEADER_BYTES);
        out
    }

    /// Decodes `bytes`, a value of `kind`: `Ok(None)` if it is no header (a blob).
    pub fn decode(kind: Kind, bytes: &[u8]) -> Result<Option<Header>, HeaderError> {
        if kind == Kind::String || kind == Kind::Stream || !bytes.starts_with(&MAGIC) {
            return Ok(None);
        }
        if bytes.len() != HEADER_BYTES || bytes[4] != kind.to_byte() || bytes[5] != VERSION || bytes[6..8] != [0, 0] {
            return Err(HeaderError::Malformed);
        }
        let word = |i: usize| u64::from_le_bytes(bytes[8 + 8 * i..16 + 8 * i].try_into().expect("8 bytes"));
        let h = Header { kind, gen: word(0), count: word(1), a: word(2), b: word(3) };
        let consistent = match kind {
            Kind::List => h.head() <= h.tail() && h.count >= (h.tail() as i128 - h.head() as i128 + 1) as u64,
            _ => h.a < 63 && h.b < (1u64 << h.a).max(1) && (h.a > 0 || h.b == 0),
        };
        if h.count == 0 || !consistent {
            return Err(HeaderError::Inconsistent);
        }
        Ok(Some(h))
    }

    /// Number of buckets of a hashed kind: `2^L + s`.
    pub fn buckets(&self) -> u64 {
        (1u64 << self.a) + self.b
    }

    /// A list's head chunk sequence.
    pub fn head(&self) -> i64 {
        self.a as i64
    }

    /// A list's tail chunk sequence.
    pub fn tail(&self) -> i64 {
        self.b as i64
    }

    /// The bucket holding a member whose hash is `hash`.
    pub fn bucket_of(&self, hash: u64) -> u64 {
        let low = hash & ((1u64 << self.a) - 1);
        if low < self.b {
            hash & ((1u64 << (self.a + 1)) - 1)
        } else {
            low
        }
    }
}

/// The generation of a stored value of `kind` if it is a chunked header
/// (what a keyspace checks before deleting or overwriting it).
pub fn value_generation(kind: Kind, value: &[u8]) -> Option<u64> {
    if kind == Kind::Stream {
        return crate::stream::Header::decode(value).ok().map(|h| h.gen);
    }
    match Header::decode(kind, value) {
        Ok(Some(h)) => Some(h.gen),
        _ => None,
    }
}

/// Whether a value of `kind` and `len` bytes can be a header that names
/// internal entries (a chunked collection's, or a stream's): what a
/// keyspace reads before it decides a delete or overwrite needs a
/// tombstone.
pub fn header_len_fits(kind: Kind, len: usize) -> bool {
    match kind {
        Kind::String => false,
        Kind::Stream => len == crate::stream::HEADER_BYTES,
        _ => len == HEADER_BYTES,
    }
}

/// The internal key of chunk `index` of generation `gen`.
pub fn chunk_key(gen: u64, index: u64) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = CHUNK;
    k[1..9].copy_from_slice(&gen.to_be_bytes());
    k[9..].copy_from_slice(&index.to_be_bytes());
    k
}

/// A list chunk's index: its sequence with the sign bit flipped.
pub fn list_index(seq: i64) -> u64 {
    (seq as u64) ^ (1 << 63)
}

/// The internal key of generation `gen`'s tombstone.
pub fn tombstone_key(gen: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = TOMBSTONE;
    k[1..].copy_from_slice(&gen.to_be_bytes());
    k
}

/// A member's hash in a collection of generation `gen` (stable: it places
/// members in stored buckets).
pub fn member_hash(gen: u64, member: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ splitmix(gen);
    for &b in member {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    splitmix(h)
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Takes a fresh generation (the write joins the batch).
///
/// The entry holds a counter and a secret drawn from the OS's randomness
/// when the keyspace chunks its first collection; a generation is the
/// counter xored with the secret, mixed by SplitMix64 (a bijection of
/// `u64`), so generations never repeat and a client cannot predict one, and
/// so cannot craft members that all hash to one bucket of
/// [`member_hash`] (Redis seeds its dict's siphash for the same reason).
/// An entry of 8 bytes (a pool chunked by an earlier build) is a plain
/// counter and stays one.
pub fn next_generation<K: Keyspace + ?Sized>(ks: &mut K) -> Result<u64, StoreError> {
    let mut bytes = Vec::new();
    if let Some(v) = ks.internal_get(&[NEXT_GEN]) {
        ks.read(&v, &mut bytes);
    }
    let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    let (mut counter, secret) = match bytes.len() {
        16 => (word(0), Some(word(8))),
        8 => (word(0), None),
        _ => (1, Some(fresh_secret())),
    };
    loop {
        let gen = secret.map_or(counter, |secret| splitmix(counter ^ secret));
        counter = counter.checked_add(1).expect("2^64 generations");
        if gen != 0 {
            let mut entry = counter.to_le_bytes().to_vec();
            if let Some(secret) = secret {
                entry.extend(secret.to_le_bytes());
            }
            ks.internal_put(&[NEXT_GEN], &entry)?;
            return Ok(gen);
        }
    }
}

/// Installs the generation entry with `secret` if the keyspace has none yet
/// (true if it wrote it): a replicated keyspace takes its secret from its
/// log (the same on every member, drawn by the leader) instead of the OS,
/// so that [`next_generation`] chooses the same generations everywhere and
/// never calls the OS's randomness. A keyspace that has the entry keeps it.
pub fn install_generation_secret<K: Keyspace + ?Sized>(ks: &mut K, secret: u64) -> Result<bool, StoreError> {
    if ks.internal_get(&[NEXT_GEN]).is_some() {
        return Ok(false);
    }
    let mut entry = 1u64.to_le_bytes().to_vec();
    entry.extend(secret.to_le_bytes());
    ks.internal_put(&[NEXT_GEN], &entry)?;
    Ok(true)
}

/// 64 bits from the OS's randomness (std's `RandomState` keys are drawn from it).
fn fresh_secret() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x7069_6d77_6972_6521u64)
}

/// Deletes up to `budget` chunks of the first dead generation (and its
/// tombstone once none is left); returns the internal entries deleted. The
/// server calls it once per loop turn, so a deleted collection of any size
/// costs every turn a bounded amount until it is gone.
pub fn collect_garbage<K: Keyspace + ?Sized>(ks: &mut K, budget: usize) -> Result<usize, StoreError> {
    assert!(budget > 0);
    if !ks.has_internal() {
        return Ok(0);
    }
    let mut first = None;
    ks.internal_scan(&[TOMBSTONE], 1, &mut |k| first = Some(k.to_vec()));
    let Some(tomb) = first.filter(|k| k.len() == 9 && k[0] == TOMBSTONE) else {
        return Ok(0);
    };
    let mut prefix = [0u8; 9];
    prefix[0] = CHUNK;
    prefix[1..].copy_from_slice(&tomb[1..]);
    let mut doomed = Vec::new();
    ks.internal_scan(&prefix, budget, &mut |k| {
        if k.starts_with(&prefix) {
            doomed.push(k.to_vec());
        }
    });
    for k in &doomed {
        ks.internal_delete(k)?;
    }
    let mut deleted = doomed.len();
    if doomed.len() < budget {
        ks.internal_delete(&tomb)?;
        deleted += 1;
    }
    Ok(deleted)
}

/// Whether the internal key `key` is a chunk of generation `gen` (checkers).
pub fn is_chunk_of(key: &[u8], gen: u64) -> bool {
    key.len() == 17 && key[0] == CHUNK && key[1..9] == gen.to_be_bytes()
}

/// The generation of a chunk or tombstone key (checkers).
pub fn key_generation(key: &[u8]) -> Option<(bool, u64)> {
    match (key.first(), key.len()) {
        (Some(&CHUNK), 17) => Some((false, u64::from_be_bytes(key[1..9].try_into().ok()?))),
        (Some(&TOMBSTONE), 9) => Some((true, u64::from_be_bytes(key[1..9].try_into().ok()?))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_is_no_blob() {
        let h = Header { kind: Kind::Hash, gen: 7, count: 300, a: 4, b: 3 };
        let bytes = h.encode();
        assert_eq!(Header::decode(Kind::Hash, &bytes), Ok(Some(h)));
        assert_eq!(Header::decode(Kind::Set, &bytes), Err(HeaderError::Malformed));
        assert_eq!(Header::decode(Kind::String, &bytes), Ok(None));
        assert_eq!(Header::decode(Kind::Hash, &[1, 0, 0, 0]), Ok(None));
        let bad = Header { b: 16, ..h }.encode();
        assert_eq!(Header::decode(Kind::Hash, &bad), Err(HeaderError::Inconsistent));
        let list = Header { kind: Kind::List, gen: 1, count: 2, a: (-3i64) as u64, b: 5 };
        assert_eq!(Header::decode(Kind::List, &list.encode()), Err(HeaderError::Inconsistent));
    }

    #[test]
    fn linear_hashing_addresses_every_bucket() {
        for n in 1u64..70 {
            let level = 63 - n.leading_zeros() as u64;
            let h = Header { kind: Kind::Set, gen: 1, count: 1, a: level, b: n - (1 << level) };
            assert_eq!(h.buckets(), n);
            let mut seen = vec![false; n as usize];
            for m in 0..4000u64 {
                let b = h.bucket_of(member_hash(1, &m.to_le_bytes()));
                assert!(b < n);
                seen[b as usize] = true;
            }
            assert!(seen.iter().all(|&s| s), "{n} buckets all used");
        }
    }

    #[test]
    fn list_indexes_sort_numerically() {
        let seqs = [i64::MIN, -5, -1, 0, 1, 9, i64::MAX];
        let keys: Vec<_> = seqs.iter().map(|&s| chunk_key(3, list_index(s))).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn generations_are_distinct_and_not_a_shared_sequence() {
        use crate::store::MemKeyspace;
        let (mut a, mut b) = (MemKeyspace::new(), MemKeyspace::new());
        let ga: Vec<u64> = (0..1000).map(|_| next_generation(&mut a).unwrap()).collect();
        let gb: Vec<u64> = (0..3).map(|_| next_generation(&mut b).unwrap()).collect();
        let distinct: std::collections::HashSet<_> = ga.iter().collect();
        assert_eq!(distinct.len(), ga.len());
        assert!(ga.iter().all(|&g| g != 0));
        // Two keyspaces draw their own secrets: their first generations differ (and are not
        // the counter), so a client cannot know which buckets members of a collection land in.
        assert_ne!(ga[..3], gb[..]);
        assert!(ga[..3] != [1, 2, 3] && gb[..] != [1, 2, 3]);
        // A pool chunked by an earlier build (an 8-byte counter) keeps counting plainly.
        let mut old = MemKeyspace::new();
        old.internal_put(&[NEXT_GEN], &7u64.to_le_bytes()).unwrap();
        assert_eq!((next_generation(&mut old).unwrap(), next_generation(&mut old).unwrap()), (7, 8));
    }
}
