//! A persistent keyspace for tests: a [`MemKeyspace`] whose committed state
//! is a second copy, taken at each commit; a crash keeps only that copy.

use pmwire_kv_cluster::MachineKeyspace;
use pmwire_keyspace::store::{Expiry, Keyspace, Kind, MemKeyspace, StoreError, StoreLimits, Stored, ValueSource};
use std::sync::Arc;

/// A keyspace whose writes survive a "crash" only once committed.
#[derive(Debug, Default, Clone)]
pub struct Durable {
    live: MemKeyspace,
    committed: MemKeyspace,
    /// Commits made.
    pub commits: u64,
}

impl Durable {
    /// What a restart finds: the last committed state.
    pub fn crash(&self) -> Durable {
        Durable { live: self.committed.clone(), committed: self.committed.clone(), commits: self.commits }
    }
}

impl MachineKeyspace for Durable {
    fn set_now_ms(&mut self, now_ms: u64) {
        self.live.set_now_ms(now_ms);
    }

    fn is_persistent(&self) -> bool {
        true
    }

    fn commit(&mut self) -> Result<(), String> {
        self.committed = self.live.clone();
        self.commits += 1;
        Ok(())
    }
}

impl Keyspace for Durable {
    type Value = Arc<[u8]>;

    fn get(&mut self, key: &[u8]) -> Option<Stored<Arc<[u8]>>> {
        self.live.get(key)
    }

    fn read(&self, value: &Arc<[u8]>, out: &mut Vec<u8>) {
        self.live.read(value, out)
    }

    fn put(&mut self, key: &[u8], kind: Kind, value: ValueSource<'_>, expiry: Expiry) -> Result<(), StoreError> {
        self.live.put(key, kind, value, expiry)
    }

    fn set_deadline(&mut self, key: &[u8], deadline_ms: Option<u64>) -> Result<bool, StoreError> {
        self.live.set_deadline(key, deadline_ms)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        self.live.delete(key)
    }

    fn scan(&mut self, after: Option<&[u8]>, limit: usize, visit: &mut dyn FnMut(&[u8], Kind)) -> usize {
        self.live.scan(after, limit, visit)
    }

    fn len(&self) -> u64 {
        self.live.len()
    }

    fn now_ms(&self) -> u64 {
        self.live.now_ms()
    }

    fn expired(&self, limit: usize) -> Vec<Vec<u8>> {
        self.live.expired(limit)
    }

    fn expiring_len(&self) -> u64 {
        self.live.expiring_len()
    }

    fn used_memory(&self) -> u64 {
        self.live.used_memory()
    }

    fn clear(&mut self) -> Result<(), StoreError> {
        self.live.clear()
    }

    fn limits(&self) -> StoreLimits {
        self.live.limits()
    }

    fn has_internal(&self) -> bool {
        true
    }

    fn internal_get(&mut self, key: &[u8]) -> Option<Arc<[u8]>> {
        self.live.internal_get(key)
    }

    fn internal_put(&mut self, key: &[u8], bytes: &[u8]) -> Result<(), StoreError> {
        self.live.internal_put(key, bytes)
    }

    fn internal_delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        self.live.internal_delete(key)
    }

    fn internal_scan(&mut self, from: &[u8], limit: usize, visit: &mut dyn FnMut(&[u8])) -> usize {
        self.live.internal_scan(from, limit, visit)
    }
}
