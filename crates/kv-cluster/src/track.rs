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
//! in the snapshot, and in a persistent keyspace's internal entries.

use std::collections::{BTreeMap, BTreeSet};

use pmwire_keyspace::chunked::GENERATIONS_KEY;
use pmwire_keyspace::recording::Recording;
use pmwire_keyspace::store::Keyspace;

/// Most keys whose last write is remembered.
pub const MAX_TRACKED_KEYS: usize = 65_536;
/// Most bytes of keys remembered.
pub const MAX_TRACKED_BYTES: usize = 8 << 20;
/// Longest key remembered one by one (fits an internal entry of the engine).
pub const MAX_TRACKED_KEY_BYTES: usize = 200;

/// A keyspace that records the keys written through it, whose flush keeps
/// the generation entry (counter and replicated secret): otherwise the next
/// chunked collection would draw a secret from the OS, differently on every
/// member.
pub fn recording<K: Keyspace>(inner: &mut K) -> Recording<'_, K> {
    Recording::keeping(inner, &[GENERATIONS_KEY])
}

/// The log index of each key's last write (module docs), bounded.
#[derive(Debug, Clone, Default)]
pub struct WriteIndex {
    by_key: BTreeMap<Vec<u8>, u64>,
    by_index: BTreeSet<(u64, Vec<u8>)>,
    bytes: usize,
    /// The last write of every key not remembered is at most this.
    pub floor: u64,
    /// The index of the last flush (0: none).
    pub flush: u64,
    /// Keys recorded or forgotten since [`WriteIndex::take_changes`] (for a
    /// persistent keyspace's internal entries; kept only when `persistent`).
    changed: BTreeSet<Vec<u8>>,
    persistent: bool,
}

/// Equal when they remember the same writes (what is pending for a
/// persistent keyspace is not compared).
impl PartialEq for WriteIndex {
    fn eq(&self, other: &Self) -> bool {
        self.by_key == other.by_key && self.floor == other.floor && self.flush == other.flush
    }
}

impl Eq for WriteIndex {}

impl WriteIndex {
    /// Records that `key` was written by the entry at `index` (not below any
    /// index recorded before).
    pub fn record(&mut self, key: &[u8], index: u64) {
        if key.len() > MAX_TRACKED_KEY_BYTES {
            self.floor = self.floor.max(index);
            return;
        }
        if let Some(old) = self.by_key.insert(key.to_vec(), index) {
            assert!(old <= index, "writes are recorded in log order");
            assert!(self.by_index.remove(&(old, key.to_vec())), "by_index mirrors by_key");
        } else {
            self.bytes += key.len();
        }
        self.by_index.insert((index, key.to_vec()));
        if self.persistent {
            self.changed.insert(key.to_vec());
        }
        self.evict();
    }

    /// Forgets the least recently written keys past the bounds.
    fn evict(&mut self) {
        while self.by_key.len() > MAX_TRACKED_KEYS || self.bytes > MAX_TRACKED_BYTES {
            let (index, key) = self.by_index.pop_first().expect("over a bound: not empty");
            assert_eq!(self.by_key.remove(&key), Some(index));
            self.bytes -= key.len();
            self.floor = self.floor.max(index);
            if self.persistent {
                self.changed.insert(key);
            }
        }
    }

    /// Keeps the changes [`WriteIndex::take_changes`] returns (a persistent
    /// keyspace writes them as internal entries), or not.
    pub fn set_persistent(&mut self, persistent: bool) {
        self.persistent = persistent;
        self.changed.clear();
    }

    /// The index of `key`'s last write, as far as is known (at most the floor
    /// if it is not remembered).
    pub fn last_write(&self, key: &[u8]) -> u64 {
        self.by_key.get(key).copied().unwrap_or(self.floor)
    }

    /// The remembered `(key, index)` pairs, keys in byte order.
    pub fn entries(&self) -> impl Iterator<Item = (&[u8], u64)> + '_ {
        self.by_key.iter().map(|(k, &i)| (&k[..], i))
    }

    /// Number of keys remembered.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Keys recorded or forgotten since the last call, each with its index
    /// if it is still remembered.
    pub fn take_changes(&mut self) -> Vec<(Vec<u8>, Option<u64>)> {
        let changed = std::mem::take(&mut self.changed);
        changed.into_iter().map(|k| (self.by_key.get(&k).copied(), k)).map(|(i, k)| (k, i)).collect()
    }

    /// Marks every remembered key changed (a flush wiped their internal entries).
    pub fn mark_all_changed(&mut self) {
        assert!(self.persistent, "changes are kept for a persistent keyspace only");
        self.changed.extend(self.by_key.keys().cloned());
    }

    /// A table with these entries (restore, reopen); `None` if one is over a
    /// bound or a key repeats.
    pub fn from_entries(entries: Vec<(Vec<u8>, u64)>, floor: u64, flush: u64) -> Option<WriteIndex> {
        let mut w = WriteIndex { floor, flush, ..WriteIndex::default() };
        if entries.len() > MAX_TRACKED_KEYS {
            return None;
        }
        for (key, index) in entries {
            if key.len() > MAX_TRACKED_KEY_BYTES {
                return None;
            }
            w.bytes += key.len();
            w.by_index.insert((index, key.clone()));
            if w.by_key.insert(key, index).is_some() {
                return None;
            }
        }
        (w.bytes <= MAX_TRACKED_BYTES).then_some(w)
    }
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
        assert_eq!(r.lists, vec![b"l".to_vec()]);
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
