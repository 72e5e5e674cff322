//! WHISPER-like persistent data structures (seed 002 §7.2) written on the
//! transaction API: a chained hash map ([`HashMap`]), a crit-bit tree
//! ([`CritBitTree`], NVML's C-tree) and a fixed table of records
//! ([`Table`], for the YCSB-style store). The echo-like store is the hash
//! map driven by a master thread that applies its clients' requests in
//! batches (the bench crate runs it).
//!
//! Each structure owns a fixed layout at `base` of a heap's data area:
//! a 64 B header (magic, geometry, an allocator's state), then its slots
//! of 64 B (a node per slot); no allocator beyond a free list and a bump
//! index. Every update goes through an [`Ops`], a transaction that also
//! counts writes and epochs, and puts an ordering fence ([`Ops::order`])
//! where a persistent program orders its updates: the new node before
//! the pointer that publishes it, the unlink before the free-list push,
//! the structure before its header's counters. Reads see the
//! transaction's own writes ([`Tx::read`]).
//!
//! Invariants (checked by [`HashMap::check`] and [`CritBitTree::check`]):
//! every reachable slot index is below the bump index, no slot is both
//! reachable and free, and the header's count equals the reachable
//! entries. The header and slots are little-endian `u64`s; references are
//! slot index + 1, 0 for none.

use pmem::Media;

use crate::{EpochSink, Heap, OutOfBounds, Tx, TxError};

/// Bytes of a slot (a node, a record field) and of a header.
pub const SLOT_BYTES: u64 = 64;
/// Bytes of a value in the hash map and the crit-bit tree.
pub const VALUE_BYTES: usize = 40;
/// A value.
pub type Value = [u8; VALUE_BYTES];

const MAGIC_HASH: u64 = u64::from_le_bytes(*b"PMWHASH1");
const MAGIC_CTREE: u64 = u64::from_le_bytes(*b"PMWCTRE1");
const MAGIC_TABLE: u64 = u64::from_le_bytes(*b"PMWTABL1");
/// Header words: magic, a geometry word, another, then the allocator:
/// count, free head, next unused (written together as one 24 B write).
const H_MAGIC: u64 = 0;
const H_GEOM_A: u64 = 8;
const H_GEOM_B: u64 = 16;
const H_ALLOC: u64 = 24;

/// Why an operation on a structure failed.
#[derive(Debug, thiserror::Error)]
pub enum WhisperError {
    /// The transaction refused a step (the log is full, the mirror failed).
    #[error(transparent)]
    Tx(#[from] TxError),
    /// A peer's transaction (not this crate's [`Tx`]) refused a step.
    #[error("transaction refused: {0}")]
    Peer(String),
    /// The structure does not fit in the data area.
    #[error(transparent)]
    OutOfBounds(#[from] OutOfBounds),
    /// Every slot is in use.
    #[error("no free slot: all {capacity} slots are in use")]
    Full {
        /// Slots of the structure.
        capacity: u64,
    },
    /// The bytes at `base` are not this structure, or break an invariant.
    #[error("corrupt structure at {base}: {reason}")]
    Corrupt {
        /// The structure's base.
        base: u64,
        /// What is wrong.
        reason: String,
    },
}

/// Writes, epochs and transactions counted by [`Ops`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Snapshot transactions.
    pub transactions: u64,
    /// Epochs with at least one write.
    pub epochs: u64,
    /// Writes.
    pub writes: u64,
}

impl Counts {
    /// Mean writes per epoch (0 with no epoch).
    pub fn writes_per_epoch(&self) -> f64 {
        if self.epochs == 0 {
            0.0
        } else {
            self.writes as f64 / self.epochs as f64
        }
    }

    /// Mean epochs per transaction (0 with no transaction).
    pub fn epochs_per_transaction(&self) -> f64 {
        if self.transactions == 0 {
            0.0
        } else {
            self.epochs as f64 / self.transactions as f64
        }
    }
}

/// Read access to a data area: a transaction's view or the committed one.
pub trait View {
    /// Reads `dst.len()` bytes at data-area `offset`.
    fn get(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfBounds>;

    /// Reads a little-endian `u64`.
    fn get_u64(&self, offset: u64) -> Result<u64, OutOfBounds> {
        let mut b = [0u8; 8];
        self.get(offset, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}

/// Write access inside a transaction: what the structures need of one.
/// [`Ops`] is this crate's; a peer's transactions (the bench crate's
/// libpmemobj) implement it too, so both run the same structure code.
pub trait Writer: View {
    /// Writes `bytes` at data-area `offset` in the transaction.
    fn put(&mut self, offset: u64, bytes: &[u8]) -> Result<(), WhisperError>;

    /// An ordering fence: what was written so far persists before what follows.
    fn order(&mut self) -> Result<(), WhisperError>;

    /// Writes a little-endian `u64`.
    fn put_u64(&mut self, offset: u64, value: u64) -> Result<(), WhisperError> {
        self.put(offset, &value.to_le_bytes())
    }
}

impl<M: Media, S: EpochSink> Writer for Ops<'_, '_, M, S> {
    fn put(&mut self, offset: u64, bytes: &[u8]) -> Result<(), WhisperError> {
        Ok(Ops::put(self, offset, bytes)?)
    }

    fn order(&mut self) -> Result<(), WhisperError> {
        Ok(Ops::order(self)?)
    }
}

/// The committed data of a heap, read-only.
pub struct Snapshot<'a, M: Media> {
    /// The heap.
    pub heap: &'a Heap,
    /// Its medium.
    pub media: &'a M,
}

impl<M: Media> View for Snapshot<'_, M> {
    fn get(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        self.heap.read(self.media, offset, dst)
    }
}

/// A transaction that counts its writes and epochs.
pub struct Ops<'t, 'a, M: Media, S: EpochSink> {
    tx: &'t mut Tx<'a, M, S>,
    counts: Counts,
    open_writes: u64,
}

impl<M: Media, S: EpochSink> View for Ops<'_, '_, M, S> {
    fn get(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        self.tx.read(offset, dst)
    }
}

impl<'t, 'a, M: Media, S: EpochSink> Ops<'t, 'a, M, S> {
    /// Wraps an open transaction.
    pub fn new(tx: &'t mut Tx<'a, M, S>) -> Self {
        Ops { tx, counts: Counts::default(), open_writes: 0 }
    }

    /// Writes `bytes` at `offset` in the transaction.
    pub fn put(&mut self, offset: u64, bytes: &[u8]) -> Result<(), TxError> {
        self.tx.write(offset, bytes)?;
        self.counts.writes += 1;
        self.open_writes += 1;
        Ok(())
    }

    /// Writes a little-endian `u64`.
    pub fn put_u64(&mut self, offset: u64, value: u64) -> Result<(), TxError> {
        self.put(offset, &value.to_le_bytes())
    }

    /// An ordering fence: what was written so far persists before what follows.
    pub fn order(&mut self) -> Result<(), TxError> {
        if self.open_writes > 0 {
            self.counts.epochs += 1;
            self.open_writes = 0;
        }
        self.tx.ofence()
    }

    /// The counts of this transaction, its last epoch closed (call before commit).
    pub fn finish(mut self) -> Counts {
        if self.open_writes > 0 {
            self.counts.epochs += 1;
        }
        self.counts.transactions = 1;
        self.counts
    }
}

/// Runs `body` in one transaction of `heap` through `sink` and commits it,
/// adding its writes and epochs to `counts`. On error the transaction is
/// abandoned and `counts` unchanged.
pub fn transaction<M: Media, S: EpochSink, R>(
    heap: &mut Heap,
    media: &mut M,
    sink: S,
    counts: &mut Counts,
    body: impl FnOnce(&mut Ops<'_, '_, M, S>) -> Result<R, WhisperError>,
) -> Result<R, WhisperError> {
    let mut tx = heap.begin_with(media, sink);
    let mut ops = Ops::new(&mut tx);
    let result = body(&mut ops)?;
    let these = ops.finish();
    tx.commit()?;
    counts.transactions += these.transactions;
    counts.epochs += these.epochs;
    counts.writes += these.writes;
    Ok(result)
}

/// A structure's allocator state, read at an operation's start and
/// written back once at its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Alloc {
    count: u64,
    free_head: u64,
    next_unused: u64,
}

/// The common layout: a header and `capacity` slots at `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slots {
    base: u64,
    capacity: u64,
    /// Bytes between the header and slot 0 (the hash map's buckets).
    gap: u64,
}

impl Slots {
    fn slot(&self, reference: u64) -> u64 {
        assert!(reference >= 1, "a null reference is never followed");
        assert!(reference <= self.capacity, "reference {reference} of {} slots", self.capacity);
        self.base + SLOT_BYTES + self.gap + (reference - 1) * SLOT_BYTES
    }

    fn end(&self) -> u64 {
        self.base + SLOT_BYTES + self.gap + self.capacity * SLOT_BYTES
    }

    fn corrupt(&self, reason: impl Into<String>) -> WhisperError {
        WhisperError::Corrupt { base: self.base, reason: reason.into() }
    }

    fn read_alloc(&self, v: &impl View) -> Result<Alloc, WhisperError> {
        let a = Alloc {
            count: v.get_u64(self.base + H_ALLOC)?,
            free_head: v.get_u64(self.base + H_ALLOC + 8)?,
            next_unused: v.get_u64(self.base + H_ALLOC + 16)?,
        };
        if a.next_unused > self.capacity || a.free_head > a.next_unused || a.count > a.next_unused {
            return Err(self.corrupt(format!("allocator state {a:?} of {} slots", self.capacity)));
        }
        Ok(a)
    }

    fn write_alloc(&self, ops: &mut impl Writer, a: Alloc) -> Result<(), WhisperError> {
        let mut b = [0u8; 24];
        b[..8].copy_from_slice(&a.count.to_le_bytes());
        b[8..16].copy_from_slice(&a.free_head.to_le_bytes());
        b[16..].copy_from_slice(&a.next_unused.to_le_bytes());
        ops.put(self.base + H_ALLOC, &b)
    }

    /// Takes a slot: the free list's head, else the next unused.
    fn take(&self, v: &impl View, a: &mut Alloc) -> Result<u64, WhisperError> {
        let r = if a.free_head != 0 {
            let r = a.free_head;
            a.free_head = v.get_u64(self.slot(r) + 8)?;
            if a.free_head > a.next_unused {
                return Err(self.corrupt(format!("free list links to {}", a.free_head)));
            }
            r
        } else if a.next_unused < self.capacity {
            a.next_unused += 1;
            a.next_unused
        } else {
            return Err(WhisperError::Full { capacity: self.capacity });
        };
        a.count += 1;
        Ok(r)
    }

    /// Pushes slot `r` on the free list (its word at +8 links the next).
    fn give(&self, ops: &mut impl Writer, a: &mut Alloc, r: u64) -> Result<(), WhisperError> {
        ops.put(self.slot(r), &[0u8; 8])?;
        ops.put_u64(self.slot(r) + 8, a.free_head)?;
        a.free_head = r;
        Ok(())
    }

    fn format(&self, ops: &mut impl Writer, magic: u64, geom_b: u64) -> Result<(), WhisperError> {
        let mut head = [0u8; 48];
        head[..8].copy_from_slice(&magic.to_le_bytes());
        head[8..16].copy_from_slice(&self.capacity.to_le_bytes());
        head[16..24].copy_from_slice(&geom_b.to_le_bytes());
        ops.put(self.base, &head)?;
        if self.gap > 0 {
            ops.put(self.base + SLOT_BYTES, &vec![0u8; self.gap as usize])?;
        }
        Ok(())
    }

    fn open(v: &impl View, base: u64, magic: u64, gap: impl Fn(u64) -> u64) -> Result<(Slots, u64), WhisperError> {
        let corrupt = |reason: String| WhisperError::Corrupt { base, reason };
        let found = v.get_u64(base + H_MAGIC)?;
        if found != magic {
            return Err(corrupt(format!("magic {found:#x}, want {magic:#x}")));
        }
        let capacity = v.get_u64(base + H_GEOM_A)?;
        let geom_b = v.get_u64(base + H_GEOM_B)?;
        let slots = Slots { base, capacity, gap: gap(geom_b) };
        let mut probe = [0u8; 1];
        v.get(slots.end() - 1, &mut probe)?;
        Ok((slots, geom_b))
    }
}

fn hash(key: u64) -> u64 {
    let mut x = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn node_bytes(key: u64, next: u64, value: &Value) -> [u8; SLOT_BYTES as usize] {
    let mut b = [0u8; SLOT_BYTES as usize];
    b[..8].copy_from_slice(&key.to_le_bytes());
    b[8..16].copy_from_slice(&next.to_le_bytes());
    b[16..16 + VALUE_BYTES].copy_from_slice(value);
    b
}

/// A persistent chained hash map of `u64` keys to [`Value`]s: a header,
/// `buckets` heads of 8 B, then node slots (key, next, value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashMap {
    slots: Slots,
    buckets: u64,
}

impl HashMap {
    /// Data-area bytes a map of `buckets` and `capacity` nodes takes.
    pub fn required_bytes(buckets: u64, capacity: u64) -> u64 {
        SLOT_BYTES + buckets.div_ceil(8) * SLOT_BYTES + capacity * SLOT_BYTES
    }

    /// Formats an empty map at `base` in `ops`' transaction.
    pub fn format(ops: &mut impl Writer, base: u64, buckets: u64, capacity: u64) -> Result<HashMap, WhisperError> {
        assert!(buckets >= 1, "a map has buckets");
        assert!(capacity >= 1, "a map has slots");
        let map = HashMap { slots: Slots { base, capacity, gap: buckets.div_ceil(8) * SLOT_BYTES }, buckets };
        let mut probe = [0u8; 1];
        ops.get(map.slots.end() - 1, &mut probe)?;
        map.slots.format(ops, MAGIC_HASH, buckets)?;
        ops.order()?;
        map.slots.write_alloc(ops, Alloc { count: 0, free_head: 0, next_unused: 0 })?;
        Ok(map)
    }

    /// Opens the map formatted at `base`.
    pub fn open(v: &impl View, base: u64) -> Result<HashMap, WhisperError> {
        let (slots, buckets) = Slots::open(v, base, MAGIC_HASH, |b| b.div_ceil(8) * SLOT_BYTES)?;
        if buckets == 0 {
            return Err(slots.corrupt("no buckets"));
        }
        Ok(HashMap { slots, buckets })
    }

    fn bucket(&self, key: u64) -> u64 {
        self.slots.base + SLOT_BYTES + (hash(key) % self.buckets) * 8
    }

    /// The entries.
    pub fn len(&self, v: &impl View) -> Result<u64, WhisperError> {
        Ok(self.slots.read_alloc(v)?.count)
    }

    /// Whether the map is empty.
    pub fn is_empty(&self, v: &impl View) -> Result<bool, WhisperError> {
        Ok(self.len(v)? == 0)
    }

    /// Finds `key`: (the word pointing at its node, the node), if present.
    fn find(&self, v: &impl View, key: u64) -> Result<(u64, Option<u64>), WhisperError> {
        let mut link = self.bucket(key);
        let mut r = v.get_u64(link)?;
        let mut steps = 0;
        while r != 0 {
            if r > self.slots.capacity || steps > self.slots.capacity {
                return Err(self.slots.corrupt(format!("chain of bucket for {key} reaches {r} after {steps}")));
            }
            if v.get_u64(self.slots.slot(r))? == key {
                return Ok((link, Some(r)));
            }
            link = self.slots.slot(r) + 8;
            r = v.get_u64(link)?;
            steps += 1;
        }
        Ok((link, None))
    }

    /// The value of `key`.
    pub fn get(&self, v: &impl View, key: u64) -> Result<Option<Value>, WhisperError> {
        let Some(r) = self.find(v, key)?.1 else { return Ok(None) };
        let mut value = [0u8; VALUE_BYTES];
        v.get(self.slots.slot(r) + 16, &mut value)?;
        Ok(Some(value))
    }

    /// Inserts or updates `key`; whether it is new. A new node is written,
    /// then published at its bucket's head, then counted.
    pub fn insert(&self, ops: &mut impl Writer, key: u64, value: &Value) -> Result<bool, WhisperError> {
        if let Some(r) = self.find(ops, key)?.1 {
            ops.put(self.slots.slot(r) + 16, value)?;
            ops.order()?;
            return Ok(false);
        }
        let mut a = self.slots.read_alloc(ops)?;
        let r = self.slots.take(ops, &mut a)?;
        let head = ops.get_u64(self.bucket(key))?;
        ops.put(self.slots.slot(r), &node_bytes(key, head, value))?;
        ops.order()?;
        ops.put_u64(self.bucket(key), r)?;
        ops.order()?;
        self.slots.write_alloc(ops, a)?;
        ops.order()?;
        Ok(true)
    }

    /// Removes `key`; whether it was there. The node is unlinked, then
    /// pushed on the free list, then the header counts it.
    pub fn remove(&self, ops: &mut impl Writer, key: u64) -> Result<bool, WhisperError> {
        let (link, Some(r)) = self.find(ops, key)? else { return Ok(false) };
        let next = ops.get_u64(self.slots.slot(r) + 8)?;
        ops.put_u64(link, next)?;
        ops.order()?;
        let mut a = self.slots.read_alloc(ops)?;
        self.slots.give(ops, &mut a, r)?;
        ops.order()?;
        a.count -= 1;
        self.slots.write_alloc(ops, a)?;
        ops.order()?;
        Ok(true)
    }

    /// Every entry, in no order; checks the invariants on the way.
    pub fn entries(&self, v: &impl View) -> Result<Vec<(u64, Value)>, WhisperError> {
        let a = self.slots.read_alloc(v)?;
        let mut seen = vec![false; self.slots.capacity as usize + 1];
        let mut out = Vec::new();
        for b in 0..self.buckets {
            let mut r = v.get_u64(self.slots.base + SLOT_BYTES + b * 8)?;
            while r != 0 {
                if r > a.next_unused || seen[r as usize] {
                    return Err(self.slots.corrupt(format!("bucket {b} reaches slot {r} (in use: {})", a.next_unused)));
                }
                seen[r as usize] = true;
                let at = self.slots.slot(r);
                let mut value = [0u8; VALUE_BYTES];
                v.get(at + 16, &mut value)?;
                out.push((v.get_u64(at)?, value));
                r = v.get_u64(at + 8)?;
            }
        }
        check_free(&self.slots, v, a, &mut seen)?;
        if out.len() as u64 != a.count {
            return Err(self.slots.corrupt(format!("{} entries reachable, header counts {}", out.len(), a.count)));
        }
        Ok(out)
    }
}

/// Walks the free list: no slot both free and reachable, none twice.
fn check_free(slots: &Slots, v: &impl View, a: Alloc, seen: &mut [bool]) -> Result<(), WhisperError> {
    let mut r = a.free_head;
    while r != 0 {
        if r > a.next_unused || seen[r as usize] {
            return Err(slots.corrupt(format!("free list reaches slot {r}, in use or beyond {}", a.next_unused)));
        }
        seen[r as usize] = true;
        r = v.get_u64(slots.slot(r) + 8)?;
    }
    Ok(())
}

/// Slot tags of the crit-bit tree.
const TAG_LEAF: u64 = 1;
const TAG_INNER: u64 = 2;

/// A persistent crit-bit tree (NVML's C-tree) of `u64` keys to
/// [`Value`]s. Leaves: tag, key, value. Inner nodes: tag, the critical
/// bit, two children; bits decrease from the root, and the keys under
/// child `d` have bit `d` at the critical bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CritBitTree {
    slots: Slots,
}

/// Where the root reference lives (the header's geometry-B word).
const ROOT_AT: u64 = H_GEOM_B;

impl CritBitTree {
    /// Data-area bytes a tree of `capacity` keys takes (a leaf and an inner node per key).
    pub fn required_bytes(capacity: u64) -> u64 {
        SLOT_BYTES + 2 * capacity * SLOT_BYTES
    }

    /// Formats an empty tree for `capacity` keys at `base`.
    pub fn format(ops: &mut impl Writer, base: u64, capacity: u64) -> Result<CritBitTree, WhisperError> {
        assert!(capacity >= 1, "a tree has slots");
        let tree = CritBitTree { slots: Slots { base, capacity: 2 * capacity, gap: 0 } };
        let mut probe = [0u8; 1];
        ops.get(tree.slots.end() - 1, &mut probe)?;
        tree.slots.format(ops, MAGIC_CTREE, 0)?;
        ops.order()?;
        tree.slots.write_alloc(ops, Alloc { count: 0, free_head: 0, next_unused: 0 })?;
        Ok(tree)
    }

    /// Opens the tree formatted at `base`.
    pub fn open(v: &impl View, base: u64) -> Result<CritBitTree, WhisperError> {
        Ok(CritBitTree { slots: Slots::open(v, base, MAGIC_CTREE, |_| 0)?.0 })
    }

    fn root_at(&self) -> u64 {
        self.slots.base + ROOT_AT
    }

    fn child_at(&self, r: u64, dir: u64) -> u64 {
        self.slots.slot(r) + 16 + 8 * dir
    }

    /// Keys stored (leaves).
    pub fn len(&self, v: &impl View) -> Result<u64, WhisperError> {
        // n leaves hang under n - 1 inner nodes.
        Ok(self.slots.read_alloc(v)?.count.div_ceil(2))
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self, v: &impl View) -> Result<bool, WhisperError> {
        Ok(v.get_u64(self.root_at())? == 0)
    }

    fn node(&self, v: &impl View, r: u64) -> Result<(u64, u64), WhisperError> {
        if r == 0 || r > self.slots.capacity {
            return Err(self.slots.corrupt(format!("reference {r}")));
        }
        let at = self.slots.slot(r);
        let (tag, word) = (v.get_u64(at)?, v.get_u64(at + 8)?);
        match tag {
            TAG_LEAF => Ok((tag, word)),
            TAG_INNER if word < 64 => Ok((tag, word)),
            _ => Err(self.slots.corrupt(format!("slot {r} has tag {tag} and word {word}"))),
        }
    }

    /// The path to the leaf `key` leads to: (word pointing at each node, node).
    fn walk(&self, v: &impl View, key: u64) -> Result<Vec<(u64, u64)>, WhisperError> {
        let mut path = Vec::new();
        let mut link = self.root_at();
        let mut r = v.get_u64(link)?;
        while r != 0 {
            path.push((link, r));
            let (tag, bit) = self.node(v, r)?;
            if tag == TAG_LEAF {
                break;
            }
            if path.len() > 65 {
                return Err(self.slots.corrupt("a path longer than 64 bits"));
            }
            link = self.child_at(r, (key >> bit) & 1);
            r = v.get_u64(link)?;
        }
        Ok(path)
    }

    /// The value of `key`.
    pub fn get(&self, v: &impl View, key: u64) -> Result<Option<Value>, WhisperError> {
        let Some(&(_, leaf)) = self.walk(v, key)?.last() else { return Ok(None) };
        if v.get_u64(self.slots.slot(leaf) + 8)? != key {
            return Ok(None);
        }
        let mut value = [0u8; VALUE_BYTES];
        v.get(self.slots.slot(leaf) + 16, &mut value)?;
        Ok(Some(value))
    }

    /// Inserts or updates `key`; whether it is new. The new leaf, then the
    /// inner node over it, then the pointer that publishes them, then the
    /// header, each in its own epoch.
    pub fn insert(&self, ops: &mut impl Writer, key: u64, value: &Value) -> Result<bool, WhisperError> {
        let path = self.walk(ops, key)?;
        let leaf_bytes = node_bytes(TAG_LEAF, key, value);
        let mut a = self.slots.read_alloc(ops)?;
        let Some(&(_, best)) = path.last() else {
            let leaf = self.slots.take(ops, &mut a)?;
            ops.put(self.slots.slot(leaf), &leaf_bytes)?;
            ops.order()?;
            ops.put_u64(self.root_at(), leaf)?;
            ops.order()?;
            self.slots.write_alloc(ops, a)?;
            ops.order()?;
            return Ok(true);
        };
        let other = ops.get_u64(self.slots.slot(best) + 8)?;
        if other == key {
            ops.put(self.slots.slot(best) + 16, value)?;
            ops.order()?;
            return Ok(false);
        }
        let crit = 63 - u64::from((other ^ key).leading_zeros());
        // The new inner node goes above the first node on the path that is
        // a leaf or tests a lower bit.
        let mut at = 0;
        while at < path.len() {
            let (tag, bit) = self.node(ops, path[at].1)?;
            if tag == TAG_LEAF || bit < crit {
                break;
            }
            at += 1;
        }
        let (link, below) = path[at];
        let leaf = self.slots.take(ops, &mut a)?;
        let inner = self.slots.take(ops, &mut a)?;
        ops.put(self.slots.slot(leaf), &leaf_bytes)?;
        ops.order()?;
        let dir = (key >> crit) & 1;
        let mut children = [below, below];
        children[dir as usize] = leaf;
        let mut inner_bytes = [0u8; 32];
        inner_bytes[..8].copy_from_slice(&TAG_INNER.to_le_bytes());
        inner_bytes[8..16].copy_from_slice(&crit.to_le_bytes());
        inner_bytes[16..24].copy_from_slice(&children[0].to_le_bytes());
        inner_bytes[24..].copy_from_slice(&children[1].to_le_bytes());
        ops.put(self.slots.slot(inner), &inner_bytes)?;
        ops.order()?;
        ops.put_u64(link, inner)?;
        ops.order()?;
        self.slots.write_alloc(ops, a)?;
        ops.order()?;
        Ok(true)
    }

    /// Removes `key`; whether it was there. Its parent is replaced by the
    /// sibling, then both slots are freed, then the header counts it.
    pub fn remove(&self, ops: &mut impl Writer, key: u64) -> Result<bool, WhisperError> {
        let path = self.walk(ops, key)?;
        let Some(&(leaf_link, leaf)) = path.last() else { return Ok(false) };
        if ops.get_u64(self.slots.slot(leaf) + 8)? != key {
            return Ok(false);
        }
        let mut a = self.slots.read_alloc(ops)?;
        if path.len() == 1 {
            ops.put_u64(leaf_link, 0)?;
            ops.order()?;
            self.slots.give(ops, &mut a, leaf)?;
            a.count -= 1;
        } else {
            let (parent_link, parent) = path[path.len() - 2];
            let bit = ops.get_u64(self.slots.slot(parent) + 8)?;
            let sibling = ops.get_u64(self.child_at(parent, 1 - ((key >> bit) & 1)))?;
            ops.put_u64(parent_link, sibling)?;
            ops.order()?;
            self.slots.give(ops, &mut a, leaf)?;
            self.slots.give(ops, &mut a, parent)?;
            a.count -= 2;
        }
        ops.order()?;
        self.slots.write_alloc(ops, a)?;
        ops.order()?;
        Ok(true)
    }

    /// Every entry in key order; checks the invariants on the way.
    pub fn entries(&self, v: &impl View) -> Result<Vec<(u64, Value)>, WhisperError> {
        let a = self.slots.read_alloc(v)?;
        let mut seen = vec![false; self.slots.capacity as usize + 1];
        let mut out = Vec::new();
        let mut nodes = 0u64;
        // (reference, the highest bit an inner node below may test)
        let mut stack = Vec::new();
        let root = v.get_u64(self.root_at())?;
        if root != 0 {
            stack.push((root, 64u64));
        }
        while let Some((r, limit)) = stack.pop() {
            if r > a.next_unused || seen[r as usize] {
                return Err(self.slots.corrupt(format!("slot {r} reached twice or beyond {}", a.next_unused)));
            }
            seen[r as usize] = true;
            nodes += 1;
            let (tag, word) = self.node(v, r)?;
            if tag == TAG_LEAF {
                let mut value = [0u8; VALUE_BYTES];
                v.get(self.slots.slot(r) + 16, &mut value)?;
                out.push((word, value));
                continue;
            }
            if word >= limit {
                return Err(self.slots.corrupt(format!("inner slot {r} tests bit {word} under bit {limit}")));
            }
            stack.push((v.get_u64(self.child_at(r, 1))?, word));
            stack.push((v.get_u64(self.child_at(r, 0))?, word));
        }
        check_free(&self.slots, v, a, &mut seen)?;
        if nodes != a.count {
            return Err(self.slots.corrupt(format!("{nodes} nodes reachable, header counts {}", a.count)));
        }
        if out.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(self.slots.corrupt("leaves out of key order"));
        }
        Ok(out)
    }
}

/// A fixed table of `rows` records of `fields` fields of 64 B each, the
/// first 8 B of each record's first field its version (the YCSB-style
/// store's table: records never move, so no allocator).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Table {
    slots: Slots,
    fields: u64,
}

impl Table {
    /// Data-area bytes a table takes.
    pub fn required_bytes(rows: u64, fields: u64) -> u64 {
        SLOT_BYTES + rows * fields * SLOT_BYTES
    }

    /// Formats a table of `rows` zeroed records of `fields` fields at `base`.
    pub fn format(ops: &mut impl Writer, base: u64, rows: u64, fields: u64) -> Result<Table, WhisperError> {
        assert!(rows >= 1, "a table has rows");
        assert!(fields >= 2, "a record has a version field and a data field");
        let table = Table { slots: Slots { base, capacity: rows * fields, gap: 0 }, fields };
        let mut probe = [0u8; 1];
        ops.get(table.slots.end() - 1, &mut probe)?;
        table.slots.format(ops, MAGIC_TABLE, fields)?;
        Ok(table)
    }

    /// Opens the table at `base`.
    pub fn open(v: &impl View, base: u64) -> Result<Table, WhisperError> {
        let (slots, fields) = Slots::open(v, base, MAGIC_TABLE, |_| 0)?;
        if fields < 2 || slots.capacity % fields != 0 {
            return Err(slots.corrupt(format!("{fields} fields per record, {} slots", slots.capacity)));
        }
        Ok(Table { slots, fields })
    }

    /// Records.
    pub fn rows(&self) -> u64 {
        self.slots.capacity / self.fields
    }

    /// Fields per record.
    pub fn fields(&self) -> u64 {
        self.fields
    }

    fn field_at(&self, row: u64, field: u64) -> u64 {
        assert!(row < self.rows(), "row {row} of {}", self.rows());
        assert!(field < self.fields, "field {field} of {}", self.fields);
        self.slots.slot(row * self.fields + field + 1)
    }

    /// Reads field `field` (1-based data fields; 0 holds the version) of `row`.
    pub fn read(&self, v: &impl View, row: u64, field: u64, dst: &mut [u8; 64]) -> Result<(), WhisperError> {
        Ok(v.get(self.field_at(row, field), dst)?)
    }

    /// The version of `row` (its updates so far).
    pub fn version(&self, v: &impl View, row: u64) -> Result<u64, WhisperError> {
        Ok(v.get_u64(self.field_at(row, 0))?)
    }

    /// Updates data field `field` (≥ 1) of `row`: the new field and the
    /// bumped version in one epoch (N-store's in-place update and its
    /// version, ordered before the next update).
    pub fn update(&self, ops: &mut impl Writer, row: u64, field: u64, bytes: &[u8; 64]) -> Result<(), WhisperError> {
        assert!(field >= 1, "field 0 is the version");
        let version = self.version(ops, row)?;
        ops.put(self.field_at(row, field), bytes)?;
        ops.put_u64(self.field_at(row, 0), version + 1)?;
        ops.order()?;
        Ok(())
    }
}

/// Crash-checks the hash map on the heap (with planted heap `faults`):
/// transactions of 1-3 inserts, updates and removes, each commit marked;
/// every crash image must open as a heap whose map passes its invariants
/// and holds exactly the entries after the acknowledged transactions or
/// after those and the one in flight.
pub fn check_hash_map(faults: crate::Faults, config: &pmwire_crashcheck::Config) -> pmwire_crashcheck::Report {
    use pmem::trace::TracedMedia;
    use pmem::MemMedia;
    use rand_xoshiro::rand_core::{RngCore, SeedableRng};
    use rand_xoshiro::SplitMix64;
    use std::collections::BTreeMap;

    const BASE: u64 = 64;
    const LOG: u64 = 4096;
    let data = (BASE + HashMap::required_bytes(7, 24)).next_multiple_of(256);
    let mut media = MemMedia::new(Heap::required_size(LOG, data) as usize);
    let mut heap = Heap::create(&mut media, 0, LOG, data).expect("create");
    let map = transaction(&mut heap, &mut media, crate::NoMirror, &mut Counts::default(), |o| {
        HashMap::format(o, BASE, 7, 24)
    })
    .expect("format");
    let mut media = TracedMedia::from_image(media.bytes().to_vec());
    let (mut heap, _) = Heap::open(&mut media, 0).expect("open");
    heap.set_faults(faults);
    let mut rng = SplitMix64::seed_from_u64(0x7768_6973);
    let mut states = vec![BTreeMap::new()];
    for i in 0..40u64 {
        let mut pending = states.last().expect("a state").clone();
        let steps: Vec<(u64, Option<u8>)> = (0..1 + rng.next_u32() % 3)
            .map(|_| (rng.next_u64() % 20, (rng.next_u32() % 3 != 0).then_some(rng.next_u32() as u8)))
            .collect();
        transaction(&mut heap, &mut media, crate::NoMirror, &mut Counts::default(), |o| {
            for &(key, op) in &steps {
                match op {
                    Some(b) => {
                        map.insert(o, key, &[b; VALUE_BYTES])?;
                        pending.insert(key, [b; VALUE_BYTES]);
                    }
                    None => {
                        map.remove(o, key)?;
                        pending.remove(&key);
                    }
                }
            }
            Ok(())
        })
        .expect("fits");
        states.push(pending);
        media.mark(i);
    }
    pmwire_crashcheck::explore(&media, config, |image| {
        let acked = image.acked.len();
        let mut recovered = image.media.clone();
        let (heap, _) = Heap::open_with_faults(&mut recovered, 0, faults).map_err(|e| format!("open: {e}"))?;
        let view = Snapshot { heap: &heap, media: &recovered };
        let map = HashMap::open(&view, BASE).map_err(|e| format!("map: {e}"))?;
        let mut got = map.entries(&view).map_err(|e| format!("after {acked} transactions: {e}"))?;
        got.sort_by_key(|e| e.0);
        let matches = |k: usize| {
            states
                .get(k)
                .is_some_and(|s: &BTreeMap<u64, Value>| s.iter().map(|(k, v)| (*k, *v)).eq(got.iter().copied()))
        };
        if matches(acked) || matches(acked + 1) {
            Ok(())
        } else {
            Err(format!(
                "{} entries after {acked} acknowledged transactions: neither that state nor the next",
                got.len()
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use pmem::MemMedia;
    use rand_xoshiro::rand_core::{RngCore, SeedableRng};
    use rand_xoshiro::SplitMix64;

    use super::*;
    use crate::NoMirror;

    const BASE: u64 = 128;

    fn heap(data_bytes: u64) -> (MemMedia, Heap) {
        let data_bytes = data_bytes.next_multiple_of(256);
        let log = 64 << 10;
        let mut media = MemMedia::new(Heap::required_size(log, data_bytes) as usize);
        let heap = Heap::create(&mut media, 0, log, data_bytes).expect("create");
        (media, heap)
    }

    fn value(rng: &mut SplitMix64) -> Value {
        let mut v = [0u8; VALUE_BYTES];
        for b in &mut v {
            *b = rng.next_u32() as u8;
        }
        v
    }

    /// A structure under test: insert, remove, get, entries.
    trait Under: Copy {
        fn insert<M: Media>(&self, o: &mut Ops<'_, '_, M, NoMirror>, k: u64, v: &Value) -> Result<bool, WhisperError>;
        fn remove<M: Media>(&self, o: &mut Ops<'_, '_, M, NoMirror>, k: u64) -> Result<bool, WhisperError>;
        fn get(&self, v: &impl View, k: u64) -> Result<Option<Value>, WhisperError>;
        fn entries(&self, v: &impl View) -> Result<Vec<(u64, Value)>, WhisperError>;
    }

    impl Under for HashMap {
        fn insert<M: Media>(&self, o: &mut Ops<'_, '_, M, NoMirror>, k: u64, v: &Value) -> Result<bool, WhisperError> {
            HashMap::insert(self, o, k, v)
        }
        fn remove<M: Media>(&self, o: &mut Ops<'_, '_, M, NoMirror>, k: u64) -> Result<bool, WhisperError> {
            HashMap::remove(self, o, k)
        }
        fn get(&self, v: &impl View, k: u64) -> Result<Option<Value>, WhisperError> {
            HashMap::get(self, v, k)
        }
        fn entries(&self, v: &impl View) -> Result<Vec<(u64, Value)>, WhisperError> {
            HashMap::entries(self, v)
        }
    }

    impl Under for CritBitTree {
        fn insert<M: Media>(&self, o: &mut Ops<'_, '_, M, NoMirror>, k: u64, v: &Value) -> Result<bool, WhisperError> {
            CritBitTree::insert(self, o, k, v)
        }
        fn remove<M: Media>(&self, o: &mut Ops<'_, '_, M, NoMirror>, k: u64) -> Result<bool, WhisperError> {
            CritBitTree::remove(self, o, k)
        }
        fn get(&self, v: &impl View, k: u64) -> Result<Option<Value>, WhisperError> {
            CritBitTree::get(self, v, k)
        }
        fn entries(&self, v: &impl View) -> Result<Vec<(u64, Value)>, WhisperError> {
            CritBitTree::entries(self, v)
        }
    }

    /// Random inserts, updates and removes (some in aborted transactions)
    /// against a `BTreeMap`, keys from a small range so removes hit.
    fn against_model<U: Under>(media: &mut MemMedia, heap: &mut Heap, under: U, seed: u64) -> Counts {
        let mut rng = SplitMix64::seed_from_u64(seed);
        let mut model = BTreeMap::new();
        let mut counts = Counts::default();
        for i in 0..600u64 {
            let ops_in_tx = 1 + rng.next_u32() % 4;
            let mut pending = model.clone();
            let mut tx = heap.begin(media);
            let mut ops = Ops::new(&mut tx);
            for _ in 0..ops_in_tx {
                // Keys sharing long prefixes stress the crit bits.
                let key = (rng.next_u64() % 96) << (rng.next_u32() % 3 * 20);
                if rng.next_u32() % 3 == 0 {
                    assert_eq!(under.remove(&mut ops, key).unwrap(), pending.remove(&key).is_some(), "remove {key}");
                } else {
                    let v = value(&mut rng);
                    assert_eq!(under.insert(&mut ops, key, &v).unwrap(), pending.insert(key, v).is_none(), "{key}");
                }
                let probe = (rng.next_u64() % 96) << (rng.next_u32() % 3 * 20);
                assert_eq!(under.get(&ops, probe).unwrap(), pending.get(&probe).copied(), "in-tx get {probe}");
            }
            if i % 9 == 4 {
                drop(ops);
                tx.abort();
            } else {
                let c = ops.finish();
                counts.transactions += c.transactions;
                counts.epochs += c.epochs;
                counts.writes += c.writes;
                tx.commit().unwrap();
                model = pending;
            }
            let view = Snapshot { heap: &*heap, media: &*media };
            let mut got = under.entries(&view).unwrap();
            got.sort_by_key(|e| e.0);
            let want: Vec<(u64, Value)> = model.iter().map(|(k, v)| (*k, *v)).collect();
            assert!(got == want, "after transaction {i}: {} entries, model {}", got.len(), want.len());
        }
        counts
    }

    fn format_hash(media: &mut MemMedia, heap: &mut Heap) -> HashMap {
        transaction(heap, media, NoMirror, &mut Counts::default(), |o| HashMap::format(o, BASE, 13, 200)).unwrap()
    }

    #[test]
    fn hash_map_matches_a_btreemap() {
        let (mut media, mut heap) = heap(BASE + HashMap::required_bytes(13, 200));
        let map = format_hash(&mut media, &mut heap);
        let counts = against_model(&mut media, &mut heap, map, 7);
        assert!(counts.writes_per_epoch() >= 1.0, "{counts:?}");
        assert!(counts.epochs_per_transaction() > 3.0, "{counts:?}");
        let (heap, _) = Heap::open(&mut media, 0).unwrap();
        assert_eq!(HashMap::open(&Snapshot { heap: &heap, media: &media }, BASE).unwrap(), map);
    }

    #[test]
    fn crit_bit_tree_matches_a_btreemap_in_order() {
        let (mut media, mut heap) = heap(BASE + CritBitTree::required_bytes(300));
        let tree =
            transaction(&mut heap, &mut media, NoMirror, &mut Counts::default(), |o| CritBitTree::format(o, BASE, 300))
                .unwrap();
        against_model(&mut media, &mut heap, tree, 11);
        let view = Snapshot { heap: &heap, media: &media };
        let entries = tree.entries(&view).unwrap();
        assert!(entries.windows(2).all(|w| w[0].0 < w[1].0), "in key order without sorting");
        assert_eq!(CritBitTree::open(&view, BASE).unwrap(), tree);
    }

    #[test]
    fn a_full_map_refuses_and_changes_nothing() {
        let (mut media, mut heap) = heap(BASE + HashMap::required_bytes(2, 3));
        let map =
            transaction(&mut heap, &mut media, NoMirror, &mut Counts::default(), |o| HashMap::format(o, BASE, 2, 3))
                .unwrap();
        let mut counts = Counts::default();
        for k in 0..3 {
            transaction(&mut heap, &mut media, NoMirror, &mut counts, |o| map.insert(o, k, &[k as u8; VALUE_BYTES]))
                .unwrap();
        }
        let err = transaction(&mut heap, &mut media, NoMirror, &mut counts, |o| map.insert(o, 9, &[9; VALUE_BYTES]))
            .unwrap_err();
        assert!(matches!(err, WhisperError::Full { capacity: 3 }), "{err}");
        assert_eq!(counts.transactions, 3, "the refused transaction is not counted");
        let view = Snapshot { heap: &heap, media: &media };
        assert_eq!(map.entries(&view).unwrap().len(), 3);
        assert!(map.get(&view, 9).unwrap().is_none());
    }

    #[test]
    fn open_refuses_another_structure() {
        let (mut media, mut heap) = heap(BASE + HashMap::required_bytes(13, 200));
        format_hash(&mut media, &mut heap);
        let view = Snapshot { heap: &heap, media: &media };
        assert!(matches!(CritBitTree::open(&view, BASE), Err(WhisperError::Corrupt { .. })));
        assert!(matches!(Table::open(&view, BASE), Err(WhisperError::Corrupt { .. })));
    }

    #[test]
    fn table_updates_bump_versions() {
        let (mut media, mut heap) = heap(BASE + Table::required_bytes(50, 4));
        let table =
            transaction(&mut heap, &mut media, NoMirror, &mut Counts::default(), |o| Table::format(o, BASE, 50, 4))
                .unwrap();
        let mut counts = Counts::default();
        let mut rng = SplitMix64::seed_from_u64(3);
        let mut model = vec![([[0u8; 64]; 4], 0u64); 50];
        for _ in 0..200 {
            let updates: Vec<(u64, u64, u8)> =
                (0..5).map(|_| (rng.next_u64() % 50, 1 + rng.next_u64() % 3, rng.next_u32() as u8)).collect();
            transaction(&mut heap, &mut media, NoMirror, &mut counts, |o| {
                for &(row, field, b) in &updates {
                    table.update(o, row, field, &[b; 64])?;
                }
                Ok(())
            })
            .unwrap();
            for &(row, field, b) in &updates {
                model[row as usize].0[field as usize] = [b; 64];
                model[row as usize].1 += 1;
            }
        }
        let view = Snapshot { heap: &heap, media: &media };
        for (row, (fields, version)) in model.iter().enumerate() {
            assert_eq!(table.version(&view, row as u64).unwrap(), *version);
            for field in 1..4 {
                let mut got = [0u8; 64];
                table.read(&view, row as u64, field, &mut got).unwrap();
                assert_eq!(got, fields[field as usize], "row {row} field {field}");
            }
        }
        assert_eq!(counts.writes_per_epoch(), 2.0, "a field and its version per epoch");
    }

    #[test]
    fn hash_map_survives_every_crash() {
        check_hash_map(crate::Faults::default(), &pmwire_crashcheck::Config::default()).assert_passes_at_least(1_000);
    }

    #[test]
    fn canary_hash_map_applied_before_commit_is_caught() {
        let faults = crate::Faults { apply_before_commit: true, ..crate::Faults::default() };
        check_hash_map(faults, &pmwire_crashcheck::Config::default()).assert_caught();
    }
}
