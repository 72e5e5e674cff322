//! What an applied entry wrote: the keyspace wrapper [`recording`], and the
//! replicated index of each key's last write, [`WriteIndex`], which WATCH
//! is decided against.
//!
//! A *write* to a key is what Redis's `signalModifiedKey` marks: a store, a
//! deadline set or removed, the delete of a live key. The delete of an
//! already expired key (lazy expiry inside a write, or the sweep) is not a
//! write: the key was already logically absent; a key that was live at
//! WATCH and expired since is caught by its deadline instead
//! ([`crate::entry::WatchedState`]). A flush is a write to every key that
//! exists; it is kept as one index ([`WriteIndex::flush`]).
//!
//! Bounds: at most [`MAX_TRACKED_KEYS`] keys and [`MAX_TRACKED_BYTES`] bytes
//! of keys are remembered; past them the least recently written key is
//! forgotten and its index raises the *floor*, which stands for the last
//! write of every key not remembered (as are keys longer than
//! [`MAX_TRACKED_KEY_BYTES`], which raise the floor at once). So a WATCH
//! older than the floor may abort an EXEC whose keys did not change: only
//! after [`MAX_TRACKED_KEYS`] other keys were written since the WATCH. Never
//! the reverse: a changed key always aborts. The table is replicated state:
//! in the snapshot, and in a persistent keyspace's internal entries
//! (`crate::machine`'s `durable` module).
//!
//! Eviction order is `(index, key)`: of the keys last written at the same
//! index, the smallest in byte order goes first. It is a function of the
//! remembered pairs alone, so a member restored from a snapshot (which
//! carries the pairs, not the order they were recorded in) forgets the same
//! keys as one that applied the log.
//!
//! In DRAM (cheap per write): each remembered key has a *slot* (its bytes
//! and the index of its last write), allocated when it enters the table and
//! shared by a hash set (found by the key's bytes) and a queue of
//! `(index, slot)` in eviction order. A queue entry goes *stale* when its
//! key is written again or forgotten (lazy removal: an entry is live while
//! its slot holds its index, checked without a lookup; the queue is
//! compacted when stale entries outnumber live ones). The keys written at
//! the newest index wait in a min-heap by key (they may still gain keys, in
//! any order) and move into the queue in key order when a newer index is
//! recorded. A write costs one hash lookup, plus an insert and a remove
//! when a key enters and another is forgotten.
//!
//! The journal: on a persistent keyspace every change of the table
//! ([`WriteIndex::record`], [`WriteIndex::record_flush`]) is also appended
//! to a byte buffer as a fixed-width *op* ([`OP_BYTES`] + key), which the
//! machine writes once per batch and [`WriteIndex::replay`] applies again
//! after a restart, through the same logic: the same table.

use std::borrow::Borrow;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pmwire_keyspace::chunked::GENERATIONS_KEY;
use pmwire_keyspace::recording::Recording;
use pmwire_keyspace::store::Keyspace;

/// Most keys whose last write is remembered.
pub const MAX_TRACKED_KEYS: usize = 65_536;
/// Most bytes of keys remembered.
pub const MAX_TRACKED_BYTES: usize = 8 << 20;
/// Longest key remembered one by one (fits an internal entry of the engine).
pub const MAX_TRACKED_KEY_BYTES: usize = 200;

/// Bytes of an op before its key: op u8, key length u8, index u64 LE.
pub const OP_BYTES: usize = 10;
/// Op: `key` was written at `index` ([`WriteIndex::record`] of a key of at
/// most [`MAX_TRACKED_KEY_BYTES`]).
pub const OP_WRITE: u8 = 1;
/// Op: a key too long to remember was written at `index` (raises the floor).
pub const OP_FLOOR: u8 = 2;
/// Op: a flush at `index` ([`WriteIndex::record_flush`]).
pub const OP_FLUSH: u8 = 3;

/// A keyspace that records the keys written through it, whose flush keeps
/// the generation entry (counter and replicated secret): otherwise the next
/// chunked collection would draw a secret from the OS, differently on every
/// member.
pub fn recording<K: Keyspace>(inner: &mut K) -> Recording<'_, K> {
    Recording::keeping(inner, &[GENERATIONS_KEY])
}

/// The index a forgotten key's slot holds (no entry has it).
const FORGOTTEN: u64 = u64::MAX;

/// A remembered key and its last write.
#[derive(Debug)]
struct Slot {
    /// The index of the key's last write; [`FORGOTTEN`] once evicted.
    at: AtomicU64,
    key: Box<[u8]>,
}

/// A key's slot, shared by the map and the queue: a queue entry is live
/// while the slot's index is the entry's (no lookup), and the map finds
/// it by the key's bytes (hashed and compared as `[u8]`, so a `&[u8]`
/// looks it up).
#[derive(Debug, Clone)]
struct Key(Arc<Slot>);

impl Key {
    fn new(key: &[u8], at: u64) -> Key {
        Key(Arc::new(Slot { at: AtomicU64::new(at), key: key.into() }))
    }

    fn at(&self) -> u64 {
        self.0.at.load(Ordering::Relaxed)
    }

    fn set(&self, at: u64) {
        self.0.at.store(at, Ordering::Relaxed);
    }

    fn bytes(&self) -> &[u8] {
        &self.0.key
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.bytes().hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        self.bytes().cmp(other.bytes())
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.bytes()
    }
}

/// Bounds of a [`WriteIndex`]: [`Bounds::REPLICATED`] on every member (tests
/// use smaller ones to reach them quickly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Most keys remembered.
    pub keys: usize,
    /// Most bytes of keys remembered.
    pub bytes: usize,
}

impl Bounds {
    /// [`MAX_TRACKED_KEYS`] and [`MAX_TRACKED_BYTES`].
    pub const REPLICATED: Bounds = Bounds { keys: MAX_TRACKED_KEYS, bytes: MAX_TRACKED_BYTES };
}

/// The log index of each key's last write (module docs), bounded.
#[derive(Debug)]
pub struct WriteIndex {
    /// The remembered keys, each with its last write.
    by_key: HashSet<Key>,
    /// `(index, key)` in eviction order, every index below `open_index`; an
    /// entry is live while its key's slot holds its index.
    queue: VecDeque<(u64, Key)>,
    /// The keys whose last write is at `open_index` (none stale).
    open: BinaryHeap<Reverse<Key>>,
    /// The newest index recorded.
    open_index: u64,
    bytes: usize,
    bounds: Bounds,
    /// The last write of every key not remembered is at most this.
    pub floor: u64,
    /// The index of the last flush (0: none). Set it through
    /// [`WriteIndex::record_flush`] (the journal).
    pub flush: u64,
    /// Ops since [`WriteIndex::clear_journal`] (kept only when `persistent`).
    journal: Vec<u8>,
    /// How many ops `journal` holds.
    journal_ops: u64,
    persistent: bool,
}

impl Default for WriteIndex {
    fn default() -> Self {
        WriteIndex::with_bounds(Bounds::REPLICATED)
    }
}

/// Equal when they remember the same writes (the journal is not compared).
impl PartialEq for WriteIndex {
    fn eq(&self, other: &Self) -> bool {
        let same = |k: &Key| other.by_key.get(k.bytes()).is_some_and(|o| o.at() == k.at());
        self.by_key.len() == other.by_key.len()
            && self.by_key.iter().all(same)
            && self.floor == other.floor
            && self.flush == other.flush
    }
}

/// A copy with slots of its own (a slot's index changes in place).
impl Clone for WriteIndex {
    fn clone(&self) -> Self {
        let pairs = self.oldest_first().into_iter().map(|(k, i)| (k.to_vec(), i)).collect();
        let mut w = WriteIndex::from_entries_within(self.bounds, pairs, self.floor, self.flush).expect("within its bounds");
        w.seal_to(self.open_index);
        w.journal = self.journal.clone();
        w.journal_ops = self.journal_ops;
        w.persistent = self.persistent;
        w
    }
}

impl Eq for WriteIndex {}

/// Why a journal's ops were refused ([`WriteIndex::replay`]).
pub type ReplayError = &'static str;

impl WriteIndex {
    /// An empty table with `bounds` ([`Bounds::REPLICATED`] but in tests).
    pub fn with_bounds(bounds: Bounds) -> WriteIndex {
        assert!(bounds.keys > 0, "a table remembers a key");
        WriteIndex {
            by_key: HashSet::new(),
            queue: VecDeque::new(),
            open: BinaryHeap::new(),
            open_index: 0,
            bytes: 0,
            bounds,
            floor: 0,
            flush: 0,
            journal: Vec::new(),
            journal_ops: 0,
            persistent: false,
        }
    }

    /// Records that `key` was written by the entry at `index` (not below any
    /// index recorded before).
    pub fn record(&mut self, key: &[u8], index: u64) {
        if key.len() > MAX_TRACKED_KEY_BYTES {
            self.floor = self.floor.max(index);
            self.log(OP_FLOOR, index, &[]);
            return;
        }
        assert!(index >= self.open_index, "writes are recorded in log order");
        assert!(index < FORGOTTEN);
        let shared = match self.by_key.get(key) {
            Some(k) if k.at() == index => return,
            Some(k) => {
                assert!(k.at() < index, "writes are recorded in log order");
                k.set(index);
                k.clone()
            }
            None => {
                let k = Key::new(key, index);
                self.by_key.insert(k.clone());
                self.bytes += key.len();
                k
            }
        };
        self.push_open(index, shared);
        self.log(OP_WRITE, index, key);
        self.evict();
        self.compact();
    }

    /// Records a flush at `index` (a write to every key that exists).
    pub fn record_flush(&mut self, index: u64) {
        self.flush = index;
        self.log(OP_FLUSH, index, &[]);
    }

    /// Appends an op to the journal (persistent keyspaces).
    fn log(&mut self, op: u8, index: u64, key: &[u8]) {
        if self.persistent {
            assert!(key.len() <= MAX_TRACKED_KEY_BYTES);
            self.journal.extend_from_slice(&[op, key.len() as u8]);
            self.journal.extend_from_slice(&index.to_le_bytes());
            self.journal.extend_from_slice(key);
            self.journal_ops += 1;
        }
    }

    /// Adds `key`, now last written at `index`, to the newest keys (moving
    /// the older newest ones into the queue first if `index` is newer).
    fn push_open(&mut self, index: u64, key: Key) {
        self.seal_to(index);
        self.open.push(Reverse(key));
    }

    /// Moves the newest keys into the queue, in key order, if `index` is newer.
    fn seal_to(&mut self, index: u64) {
        if index > self.open_index {
            while let Some(Reverse(k)) = self.open.pop() {
                self.queue.push_back((self.open_index, k));
            }
            self.open_index = index;
        }
    }

    /// Forgets the least recently written keys past the bounds.
    fn evict(&mut self) {
        while self.by_key.len() > self.bounds.keys || self.bytes > self.bounds.bytes {
            let (index, key) = self.pop_oldest();
            assert!(self.by_key.remove(key.bytes()), "a live entry's key is remembered");
            key.set(FORGOTTEN);
            self.bytes -= key.bytes().len();
            self.floor = self.floor.max(index);
        }
    }

    /// The live `(index, key)` first in eviction order, taken out of the
    /// queue (or the newest keys); the table must not be empty.
    fn pop_oldest(&mut self) -> (u64, Key) {
        while let Some((index, key)) = self.queue.pop_front() {
            if key.at() == index {
                return (index, key);
            }
        }
        let Reverse(key) = self.open.pop().expect("over a bound: a key is remembered");
        (self.open_index, key)
    }

    /// Drops the queue's stale entries once they outnumber its live ones.
    fn compact(&mut self) {
        let live = self.by_key.len() - self.open.len();
        let stale = self.queue.len() - live;
        if stale > live.max(1024) {
            self.queue.retain(|(i, k)| k.at() == *i);
            assert_eq!(self.queue.len(), live, "one live queue entry per remembered key not among the newest");
        }
    }

    /// Keeps the journal ([`WriteIndex::journal`]: a persistent keyspace
    /// writes it), or not.
    pub fn set_persistent(&mut self, persistent: bool) {
        self.persistent = persistent;
        self.clear_journal();
    }

    /// The ops recorded since the last [`WriteIndex::clear_journal`], each
    /// [`OP_BYTES`] then its key (`docs/FORMAT.md`, "Write index journal").
    pub fn journal(&self) -> &[u8] {
        &self.journal
    }

    /// How many ops [`WriteIndex::journal`] holds.
    pub fn journal_ops(&self) -> u64 {
        self.journal_ops
    }

    /// Empties the journal (its ops are durable).
    pub fn clear_journal(&mut self) {
        self.journal.clear();
        self.journal_ops = 0;
    }

    /// Applies journal `ops` again, through [`WriteIndex::record`] and
    /// [`WriteIndex::record_flush`]: every op's index must lie in
    /// `(after, upto]`, not below the op before it. Returns the op count.
    pub fn replay(&mut self, ops: &[u8], after: u64, upto: u64) -> Result<u64, ReplayError> {
        let mut r = pmem::le::Reader::new(ops, 0);
        let (mut count, mut last) = (0u64, after);
        while !r.done() {
            let head = r.take(2).ok_or("a journal op cut short")?;
            let (op, len) = (head[0], head[1] as usize);
            let index = r.u64().ok_or("a journal op cut short")?;
            if index <= after || index > upto {
                return Err("a journal op's index outside its batch");
            }
            if index < last || index < self.open_index {
                return Err("journal ops out of log order");
            }
            last = index;
            match op {
                OP_WRITE if len <= MAX_TRACKED_KEY_BYTES => {
                    let key = r.take(len as u64).ok_or("a journal op's key cut short")?;
                    self.record(key, index);
                }
                OP_FLOOR | OP_FLUSH if len != 0 => return Err("a journal floor or flush op with a key"),
                OP_FLOOR => self.floor = self.floor.max(index),
                OP_FLUSH => self.flush = index,
                OP_WRITE => return Err("a journal op's key over its bound"),
                _ => return Err("an unknown journal op"),
            }
            count += 1;
        }
        Ok(count)
    }

    /// The index of `key`'s last write, as far as is known (at most the floor
    /// if it is not remembered).
    pub fn last_write(&self, key: &[u8]) -> u64 {
        self.by_key.get(key).map_or(self.floor, Key::at)
    }

    /// The remembered `(key, index)` pairs, keys in byte order.
    pub fn entries(&self) -> impl Iterator<Item = (&[u8], u64)> + '_ {
        let mut pairs: Vec<(&[u8], u64)> = self.by_key.iter().map(|k| (k.bytes(), k.at())).collect();
        pairs.sort_unstable_by(|a, b| a.0.cmp(b.0));
        pairs.into_iter()
    }

    /// The remembered `(key, index)` pairs in eviction order (oldest first).
    pub fn oldest_first(&self) -> Vec<(&[u8], u64)> {
        let mut pairs: Vec<(&[u8], u64)> = Vec::with_capacity(self.by_key.len());
        pairs.extend(self.queue.iter().filter(|(i, k)| k.at() == *i).map(|(i, k)| (k.bytes(), *i)));
        let mut newest: Vec<&[u8]> = self.open.iter().map(|Reverse(k)| k.bytes()).collect();
        newest.sort_unstable();
        pairs.extend(newest.into_iter().map(|k| (k, self.open_index)));
        assert_eq!(pairs.len(), self.by_key.len());
        pairs
    }

    /// Number of keys remembered.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Bytes of the remembered keys.
    pub fn key_bytes(&self) -> usize {
        self.bytes
    }

    /// A table with these entries (restore, reopen); `None` if one is over a
    /// bound or a key repeats.
    pub fn from_entries(entries: Vec<(Vec<u8>, u64)>, floor: u64, flush: u64) -> Option<WriteIndex> {
        WriteIndex::from_entries_within(Bounds::REPLICATED, entries, floor, flush)
    }

    /// [`WriteIndex::from_entries`] with `bounds`.
    pub fn from_entries_within(bounds: Bounds, mut entries: Vec<(Vec<u8>, u64)>, floor: u64, flush: u64) -> Option<WriteIndex> {
        if entries.len() > bounds.keys {
            return None;
        }
        entries.sort_unstable_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        let mut w = WriteIndex { floor, flush, ..WriteIndex::with_bounds(bounds) };
        for (key, index) in entries {
            if key.len() > MAX_TRACKED_KEY_BYTES {
                return None;
            }
            if index == FORGOTTEN {
                return None;
            }
            w.bytes += key.len();
            let key = Key::new(&key, index);
            if !w.by_key.insert(key.clone()) {
                return None;
            }
            w.push_open(index, key);
        }
        (w.bytes <= bounds.bytes).then_some(w)
    }
}

#[cfg(test)]
mod model;

/// The previous ordered-collections table, the tests' model.
#[cfg(test)]
pub(crate) fn model_for_tests(bounds: Bounds) -> model::Model {
    model::Model::new(bounds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmwire_keyspace::store::{Expiry, Kind, MemKeyspace, ValueSource};

    #[test]
    fn the_floor_stands_for_forgotten_keys() {
        let mut w = WriteIndex::default();
        for i in 0..MAX_TRACKED_KEYS as u64 + 10 {
            w.record(&i.to_be_bytes(), i + 1);
        }
        assert_eq!(w.len(), MAX_TRACKED_KEYS);
        assert_eq!(w.floor, 10, "the ten oldest forgotten");
        assert_eq!(w.last_write(&0u64.to_be_bytes()), 10);
        assert_eq!(w.last_write(&20u64.to_be_bytes()), 21);
        assert_eq!(w.last_write(b"never"), 10);
        w.record(&[7u8; MAX_TRACKED_KEY_BYTES + 1], 99_999_999);
        assert_eq!(w.floor, 99_999_999, "a long key raises the floor");
        let copy = WriteIndex::from_entries(w.entries().map(|(k, i)| (k.to_vec(), i)).collect(), w.floor, 0).unwrap();
        assert_eq!(copy.entries().collect::<Vec<_>>(), w.entries().collect::<Vec<_>>());
    }

    #[test]
    fn recording_sees_writes_not_expiry() {
        let mut ks = MemKeyspace::new();
        ks.set_clock(pmwire_keyspace::store::Clock::Fixed(100));
        ks.put(b"gone", Kind::String, ValueSource::Owned(b"x".to_vec()), Expiry::At(150)).unwrap();
        ks.set_clock(pmwire_keyspace::store::Clock::Fixed(200));
        let mut r = recording(&mut ks);
        assert!(!r.delete(b"gone").unwrap(), "expired: not live");
        r.put(b"l", Kind::List, ValueSource::Owned(vec![0; 4]), Expiry::Clear).unwrap();
        assert!(!r.set_deadline(b"absent", Some(5)).unwrap());
        assert_eq!(r.touched, vec![b"l".to_vec()]);
        assert_eq!(r.ready, vec![b"l".to_vec()]);
    }

    #[test]
    fn a_flush_keeps_the_generation_secret() {
        let mut ks = MemKeyspace::new();
        pmwire_keyspace::chunked::install_generation_secret(&mut ks, 5).unwrap();
        let first = pmwire_keyspace::chunked::next_generation(&mut ks).unwrap();
        let mut r = recording(&mut ks);
        r.clear().unwrap();
        assert!(r.cleared);
        let second = pmwire_keyspace::chunked::next_generation(&mut ks).unwrap();
        let mut other = MemKeyspace::new();
        pmwire_keyspace::chunked::install_generation_secret(&mut other, 5).unwrap();
        let g: Vec<u64> = (0..2).map(|_| pmwire_keyspace::chunked::next_generation(&mut other).unwrap()).collect();
        assert_eq!(g, vec![first, second], "the same secret and counter after the flush");
    }
}

#[cfg(test)]
mod randomized {
    use super::model::Model;
    use super::*;

    use rand_xoshiro::rand_core::{RngCore, SeedableRng};

    /// The tests' deterministic draws (SplitMix64, as every crash workload's).
    struct Rng(rand_xoshiro::SplitMix64);

    impl Rng {
        fn seeded(seed: u64) -> Rng {
            Rng(rand_xoshiro::SplitMix64::seed_from_u64(seed))
        }

        fn next(&mut self) -> u64 {
            self.0.next_u64()
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Keys of 0 to 11 bytes (several of each length), and one too long to remember.
    fn universe(rng: &mut Rng, n: usize) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = (0..n).map(|_| (0..rng.below(12)).map(|_| b'a' + rng.below(4) as u8).collect()).collect();
        keys.push(vec![b'L'; MAX_TRACKED_KEY_BYTES + 1]);
        keys
    }

    fn assert_same(w: &WriteIndex, m: &Model, what: &str) {
        assert_eq!(w.floor, m.floor, "{what}: floor");
        assert_eq!(w.flush, m.flush, "{what}: flush");
        let order: Vec<(Vec<u8>, u64)> = w.oldest_first().into_iter().map(|(k, i)| (k.to_vec(), i)).collect();
        assert_eq!(order, m.oldest_first(), "{what}: eviction order");
        let sorted: Vec<(Vec<u8>, u64)> = w.entries().map(|(k, i)| (k.to_vec(), i)).collect();
        assert_eq!(sorted, m.by_key.iter().map(|(k, i)| (k.clone(), *i)).collect::<Vec<_>>(), "{what}: entries in key order");
    }

    #[test]
    fn the_table_evicts_floors_and_flushes_as_the_ordered_model_does() {
        for seed in 0..40u64 {
            let mut rng = Rng::seeded(seed);
            let bounds = Bounds { keys: 1 + rng.below(40) as usize, bytes: 8 + rng.below(300) as usize };
            let keys = universe(&mut rng, 3 * bounds.keys + 5);
            let (mut w, mut m) = (WriteIndex::with_bounds(bounds), Model::new(bounds));
            let mut index = 1u64;
            for step in 0..6_000 {
                let what = format!("seed {seed} step {step} {bounds:?}");
                index += rng.below(2);
                match rng.below(100) {
                    0..=1 => {
                        w.record_flush(index);
                        m.flush = index;
                    }
                    2 => {
                        // A restore from the pairs alone: the same order follows.
                        let pairs = w.entries().map(|(k, i)| (k.to_vec(), i)).collect();
                        w = WriteIndex::from_entries_within(bounds, pairs, w.floor, w.flush).expect("within bounds");
                    }
                    _ => {
                        let key = &keys[rng.below(keys.len() as u64) as usize];
                        w.record(key, index);
                        m.record(key, index);
                        assert_eq!(w.last_write(key), m.last_write(key), "{what}: last write");
                    }
                }
                if step % 50 == 0 || bounds.keys < 4 {
                    assert_same(&w, &m, &what);
                    assert_eq!(w.len(), m.by_key.len());
                }
            }
            assert_same(&w, &m, &format!("seed {seed} end"));
            assert!(w.floor > 0, "seed {seed}: keys were forgotten");
        }
    }

    #[test]
    fn many_keys_at_one_index_are_forgotten_in_key_order() {
        let bounds = Bounds { keys: 8, bytes: 1 << 20 };
        let (mut w, mut m) = (WriteIndex::with_bounds(bounds), Model::new(bounds));
        for k in (0..30u8).rev().chain(0..30) {
            w.record(&[k], 7);
            m.record(&[k], 7);
        }
        assert_same(&w, &m, "one index");
        w.record(b"x", 8);
        m.record(b"x", 8);
        assert_same(&w, &m, "then a newer one");
    }

    #[test]
    fn replaying_the_journal_rebuilds_the_table() {
        for seed in 0..20u64 {
            let mut rng = Rng::seeded(1000 + seed);
            let bounds = Bounds { keys: 1 + rng.below(30) as usize, bytes: 8 + rng.below(200) as usize };
            let keys = universe(&mut rng, 2 * bounds.keys + 3);
            let mut w = WriteIndex::with_bounds(bounds);
            w.set_persistent(true);
            let mut restarted = w.clone();
            restarted.set_persistent(false);
            let mut index = 1u64;
            for batch in 0..300 {
                let before = index;
                for _ in 0..rng.below(20) {
                    index += rng.below(2);
                    if rng.below(30) == 0 {
                        w.record_flush(index);
                    } else {
                        w.record(&keys[rng.below(keys.len() as u64) as usize], index);
                    }
                }
                let n = restarted.replay(w.journal(), before - 1, index).expect("its own journal replays");
                assert_eq!(n as usize, count_ops(w.journal()));
                w.clear_journal();
                assert_eq!(restarted, w, "seed {seed} batch {batch}");
                assert_eq!(restarted.oldest_first(), w.oldest_first());
                index += 1;
            }
        }
    }

    fn count_ops(mut ops: &[u8]) -> usize {
        let mut n = 0;
        while !ops.is_empty() {
            ops = &ops[OP_BYTES + ops[1] as usize..];
            n += 1;
        }
        n
    }

    #[test]
    fn replay_refuses_ops_that_do_not_follow_the_log() {
        let op = |op: u8, index: u64, key: &[u8]| {
            let mut b = vec![op, key.len() as u8];
            b.extend_from_slice(&index.to_le_bytes());
            b.extend_from_slice(key);
            b
        };
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (op(OP_WRITE, 5, b"k")[..5].to_vec(), "a journal op cut short"),
            (op(OP_WRITE, 5, b"key")[..11].to_vec(), "a journal op's key cut short"),
            (op(9, 5, b""), "an unknown journal op"),
            (op(OP_WRITE, 3, b"k"), "a journal op's index outside its batch"),
            (op(OP_WRITE, 11, b"k"), "a journal op's index outside its batch"),
            ([op(OP_WRITE, 7, b"k"), op(OP_WRITE, 6, b"j")].concat(), "journal ops out of log order"),
            (op(OP_FLUSH, 6, b"k"), "a journal floor or flush op with a key"),
            ({
                let mut b = op(OP_WRITE, 6, &[1u8; MAX_TRACKED_KEY_BYTES]);
                b[1] = MAX_TRACKED_KEY_BYTES as u8 + 1;
                b.push(1);
                b
            }, "a journal op's key over its bound"),
        ];
        for (bytes, why) in cases {
            let mut w = WriteIndex::default();
            assert_eq!(w.replay(&bytes, 4, 10), Err(why));
        }
        let mut w = WriteIndex::default();
        assert_eq!(w.replay(&[op(OP_WRITE, 5, b"k"), op(OP_FLOOR, 6, b""), op(OP_FLUSH, 10, b"")].concat(), 4, 10), Ok(3));
        assert_eq!((w.last_write(b"k"), w.floor, w.flush), (5, 6, 10));
    }
}

#[cfg(test)]
mod measure {
    use super::model::Model;
    use super::*;
    use std::time::Instant;

    /// Prints the time per write of the table and of the previous ordered
    /// collections (`docs/bench.md`): 1,000,000 writes of random keys out
    /// of 100,000, the members' bounds. Run with `--ignored --nocapture`.
    #[test]
    #[ignore = "a measurement: prints timings"]
    fn time_per_write_against_the_ordered_collections() {
        let mut x = 7u64;
        let keys: Vec<Vec<u8>> = (0..1_000_000)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                format!("key:{:012}", (x >> 33) % 100_000).into_bytes()
            })
            .collect();
        for round in 0..3 {
            let mut w = WriteIndex::default();
            w.set_persistent(true);
            let t = Instant::now();
            for (i, k) in keys.iter().enumerate() {
                w.record(k, i as u64 + 1);
                if i % 32 == 31 {
                    w.clear_journal();
                }
            }
            let new_ns = t.elapsed().as_nanos() as f64 / keys.len() as f64;
            let mut m = Model::new(Bounds::REPLICATED);
            let t = Instant::now();
            for (i, k) in keys.iter().enumerate() {
                m.record(k, i as u64 + 1);
            }
            let old_ns = t.elapsed().as_nanos() as f64 / keys.len() as f64;
            assert_eq!(w.floor, m.floor);
            println!("round {round}: hash map and queue {new_ns:.0} ns/write, ordered collections {old_ns:.0} ns/write");
        }
    }
}
