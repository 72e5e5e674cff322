//! [`Index`]: the engine's volatile key → value map. Point operations (the
//! hot path: GET, SET, DEL) go to a hash map; the keys are also kept in
//! order, for range scans (KEYS, SCAN), and that ordered set changes only
//! when a key appears or disappears, not when a value is replaced. Keys
//! whose value has a deadline are also kept by deadline (`expiring`), so
//! the expired ones are found without a scan.
//!
//! The hash map grows incrementally (`griddle`: a resize moves a few
//! entries per insert, as Redis's dict rehashes): growing all at once
//! moved every key in one insert, 140 ms at 460 K keys and 300 ms at 920 K
//! here, and a replicated member applying that insert missed its
//! heartbeats (`docs/bench.md`, "A turn's apply, bounded"). The hasher is
//! std's, keyed at random per map, since the keys come from clients.
//!
//! Invariants: `order` holds exactly the keys of `map`; `expiring` holds
//! exactly `(deadline, key)` for each key of `map` whose value has one.

use std::collections::BTreeSet;
use std::hash::RandomState;
use std::ops::Bound;

use griddle::hash_map::Entry;

use crate::small::Key;

/// A value that may carry an expiry deadline.
pub(crate) trait Deadline {
    /// The deadline (ms since the Unix epoch), if any.
    fn deadline(&self) -> Option<u64>;
}

/// The point-lookup map: resized incrementally, std's keyed hasher.
type HashMap<K, V> = griddle::HashMap<K, V, RandomState>;

/// An ordered map from keys to `V` with hashed point lookups (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct Index<V> {
    map: HashMap<Key, V>,
    order: BTreeSet<Key>,
    expiring: BTreeSet<(u64, Key)>,
}

impl<V> Default for Index<V> {
    fn default() -> Index<V> {
        Index { map: HashMap::default(), order: BTreeSet::new(), expiring: BTreeSet::new() }
    }
}

impl<V: PartialEq> PartialEq for Index<V> {
    fn eq(&self, other: &Index<V>) -> bool {
        self.map == other.map && self.order == other.order && self.expiring == other.expiring
    }
}

impl<V: Deadline> Index<V> {
    pub(crate) fn get(&self, key: &[u8]) -> Option<&V> {
        self.map.get(key)
    }

    pub(crate) fn contains_key(&self, key: &[u8]) -> bool {
        self.map.contains_key(key)
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub(crate) fn insert(&mut self, key: &Key, value: V) -> Option<V> {
        if let Some(d) = value.deadline() {
            self.expiring.insert((d, key.clone()));
        }
        if let Some(slot) = self.map.get_mut(&**key) {
            let old = std::mem::replace(slot, value);
            if let Some(d) = old.deadline() {
                if slot.deadline() != Some(d) {
                    assert!(self.expiring.remove(&(d, key.clone())), "an expiring key is in the deadline set");
                }
            }
            return Some(old);
        }
        match self.map.entry(key.clone()) {
            Entry::Vacant(slot) => _ = slot.insert(value),
            Entry::Occupied(_) => unreachable!("looked up above"),
        }
        self.order.insert(key.clone());
        None
    }

    pub(crate) fn remove(&mut self, key: &[u8]) -> Option<V> {
        let value = self.map.remove(key)?;
        assert!(self.order.remove(key), "a key in the map is in the order");
        if let Some(d) = value.deadline() {
            assert!(self.expiring.remove(&(d, Key::new(key))), "an expiring key is in the deadline set");
        }
        Some(value)
    }

    pub(crate) fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
        self.expiring.clear();
    }

    /// Keys whose deadline is at or before `now_ms`, earliest deadline first.
    pub(crate) fn expired(&self, now_ms: u64) -> impl Iterator<Item = &[u8]> + '_ {
        self.expiring.iter().take_while(move |(d, _)| *d <= now_ms).map(|(_, k)| &k[..])
    }

    /// The earliest deadline of any key, if one has a deadline.
    pub(crate) fn next_deadline_ms(&self) -> Option<u64> {
        self.expiring.first().map(|(d, _)| *d)
    }

    /// Keys with a deadline.
    pub(crate) fn expiring_len(&self) -> usize {
        self.expiring.len()
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Entries with keys after `start`, in key order.
    pub(crate) fn range<'a>(&'a self, start: Bound<&[u8]>) -> impl Iterator<Item = (&'a [u8], &'a V)> + 'a {
        self.order.range::<[u8], _>((start, Bound::Unbounded)).map(|key| (&key[..], &self.map[&**key]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Deadline for u32 {
        /// Test values: odd ones expire at their value.
        fn deadline(&self) -> Option<u64> {
            (self % 2 == 1).then_some(u64::from(*self))
        }
    }

    #[test]
    fn matches_a_btreemap() {
        let mut index = Index::default();
        let mut model = std::collections::BTreeMap::new();
        let mut state = 7u64;
        for step in 0..20_000u32 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let key = format!("k{}", (state >> 33) % 500).into_bytes();
            match (state >> 20) % 10 {
                0 => assert_eq!(index.remove(&key), model.remove(&key), "step {step}"),
                1 if step % 1000 == 0 => {
                    index.clear();
                    model.clear();
                }
                _ => assert_eq!(index.insert(&Key::new(&key), step), model.insert(key.clone(), step), "step {step}"),
            }
            assert_eq!(index.len(), model.len());
        }
        let from = b"k3".as_slice();
        let got: Vec<(Vec<u8>, u32)> = index.range(Bound::Excluded(from)).map(|(k, v)| (k.to_vec(), *v)).collect();
        let want: Vec<(Vec<u8>, u32)> =
            model.range::<[u8], _>((Bound::Excluded(from), Bound::Unbounded)).map(|(k, v)| (k.clone(), *v)).collect();
        assert_eq!(got, want);
        assert!(model.keys().all(|k| index.contains_key(k) && index.get(k) == model.get(k)));
        let mut want: Vec<(u32, Vec<u8>)> =
            model.iter().filter(|(_, v)| *v % 2 == 1).map(|(k, v)| (*v, k.clone())).collect();
        want.sort();
        assert_eq!(index.expiring_len(), want.len());
        let bound = want[want.len() / 2].0;
        let got: Vec<Vec<u8>> = index.expired(u64::from(bound)).map(<[u8]>::to_vec).collect();
        let want: Vec<Vec<u8>> = want.into_iter().take_while(|(v, _)| *v <= bound).map(|(_, k)| k).collect();
        assert_eq!(got, want);
    }
}
