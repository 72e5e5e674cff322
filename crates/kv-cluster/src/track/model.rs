//! The write index as it was before the hash map and queue (three ordered
//! collections): the model the randomized tests compare [`super::WriteIndex`]
//! with.

use std::collections::{BTreeMap, BTreeSet};

use super::{Bounds, MAX_TRACKED_KEY_BYTES};

/// The ordered-collections write index, with `bounds`.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    pub(crate) by_key: BTreeMap<Vec<u8>, u64>,
    by_index: BTreeSet<(u64, Vec<u8>)>,
    bytes: usize,
    bounds: Bounds,
    pub floor: u64,
    pub flush: u64,
}

impl Model {
    pub fn new(bounds: Bounds) -> Model {
        Model { by_key: BTreeMap::new(), by_index: BTreeSet::new(), bytes: 0, bounds, floor: 0, flush: 0 }
    }

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
        while self.by_key.len() > self.bounds.keys || self.bytes > self.bounds.bytes {
            let (index, key) = self.by_index.pop_first().expect("over a bound: not empty");
            assert_eq!(self.by_key.remove(&key), Some(index));
            self.bytes -= key.len();
            self.floor = self.floor.max(index);
        }
    }

    pub fn last_write(&self, key: &[u8]) -> u64 {
        self.by_key.get(key).copied().unwrap_or(self.floor)
    }

    /// The pairs in eviction order.
    pub fn oldest_first(&self) -> Vec<(Vec<u8>, u64)> {
        self.by_index.iter().map(|(i, k)| (k.clone(), *i)).collect()
    }
}
