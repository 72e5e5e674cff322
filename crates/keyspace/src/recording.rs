//! [`Recording`]: a keyspace that records the keys written through it,
//! forwarding every operation to the keyspace it wraps.
//!
//! A *write* to a key is what Redis's `signalModifiedKey` marks: a store, a
//! deadline set or removed, the delete of a live key (the delete of an
//! already expired key is not one). The single-node executor uses the
//! record for WATCH and for waking blocked pops; the replicated machine
//! (`pmwire-kv-cluster`) for its replicated write index as well.
//!
//! A flush is recorded as [`Recording::cleared`], not key by key. Internal
//! entries named in [`Recording::keeping`] survive a flush through the
//! wrapper (the replicated machine keeps its generation counter and
//! replicated secret that way, so every member draws the same).

use crate::store::{Expiry, Keyspace, Kind, StoreError, StoreLimits, Stored, ValueSource};

/// A keyspace that records the keys written through it (module docs).
pub struct Recording<'k, K: Keyspace> {
    /// The keyspace.
    pub inner: &'k mut K,
    /// Keys written, in order, with repeats.
    pub touched: Vec<Vec<u8>>,
    /// Keys a list, sorted set or stream was stored at, or made ready
    /// without a write ([`Keyspace::signal_ready`]): blocked pops and reads
    /// may now be served there.
    pub ready: Vec<Vec<u8>>,
    /// A flush ran.
    pub cleared: bool,
    /// When `Some`: the keys stored that were not live before (keyspace
    /// notifications' `new`), each once, in order. Finding them costs a
    /// look-up per store, so it is asked for only when needed.
    pub created: Option<Vec<Vec<u8>>>,
    /// Internal entries a flush keeps.
    keep: &'static [&'static [u8]],
}

impl<'k, K: Keyspace> Recording<'k, K> {
    /// A recorder over `inner`.
    pub fn new(inner: &'k mut K) -> Self {
        Recording::keeping(inner, &[])
    }

    /// A recorder over `inner` whose flush keeps the internal entries
    /// `keep` (their bytes are read before the flush and put back after).
    pub fn keeping(inner: &'k mut K, keep: &'static [&'static [u8]]) -> Self {
        Recording { inner, touched: Vec::new(), ready: Vec::new(), cleared: false, created: None, keep }
    }
}

impl<K: Keyspace> Keyspace for Recording<'_, K> {
    type Value = K::Value;

    fn get(&mut self, key: &[u8]) -> Option<Stored<K::Value>> {
        self.inner.get(key)
    }

    fn read(&self, value: &K::Value, out: &mut Vec<u8>) {
        self.inner.read(value, out)
    }

    fn put(&mut self, key: &[u8], kind: Kind, value: ValueSource<'_>, expiry: Expiry) -> Result<(), StoreError> {
        let new = self.created.is_some() && self.inner.get(key).is_none();
        self.inner.put(key, kind, value, expiry)?;
        if let Some(created) = self.created.as_mut().filter(|c| new && !c.iter().any(|k| k == key)) {
            created.push(key.to_vec());
        }
        self.touched.push(key.to_vec());
        if matches!(kind, Kind::List | Kind::ZSet | Kind::Stream) {
            self.ready.push(key.to_vec());
        }
        Ok(())
    }

    fn set_deadline(&mut self, key: &[u8], deadline_ms: Option<u64>) -> Result<bool, StoreError> {
        let written = self.inner.set_deadline(key, deadline_ms)?;
        if written {
            self.touched.push(key.to_vec());
        }
        Ok(written)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        let live = self.inner.delete(key)?;
        if live {
            self.touched.push(key.to_vec());
        }
        Ok(live)
    }

    fn scan(&mut self, after: Option<&[u8]>, limit: usize, visit: &mut dyn FnMut(&[u8], Kind)) -> usize {
        self.inner.scan(after, limit, visit)
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn now_ms(&self) -> u64 {
        self.inner.now_ms()
    }

    fn expired(&self, limit: usize) -> Vec<Vec<u8>> {
        self.inner.expired(limit)
    }

    fn expiring_len(&self) -> u64 {
        self.inner.expiring_len()
    }

    fn used_memory(&self) -> u64 {
        self.inner.used_memory()
    }

    fn clear(&mut self) -> Result<(), StoreError> {
        let mut kept = Vec::new();
        for &key in self.keep {
            if let Some(v) = self.inner.internal_get(key) {
                let mut bytes = Vec::new();
                self.inner.read(&v, &mut bytes);
                kept.push((key, bytes));
            }
        }
        self.inner.clear()?;
        for (key, bytes) in kept {
            self.inner.internal_put(key, &bytes)?;
        }
        self.cleared = true;
        Ok(())
    }

    fn signal_ready(&mut self, key: &[u8]) {
        self.ready.push(key.to_vec());
    }

    fn limits(&self) -> StoreLimits {
        self.inner.limits()
    }

    fn begin_command(&mut self) {
        self.inner.begin_command()
    }

    fn take_expired(&mut self) -> Vec<Vec<u8>> {
        self.inner.take_expired()
    }

    fn abort_command(&mut self) {
        self.inner.abort_command()
    }

    fn begin_script(&mut self) {
        self.inner.begin_script()
    }

    fn abort_script(&mut self) {
        self.inner.abort_script()
    }

    fn has_internal(&self) -> bool {
        self.inner.has_internal()
    }

    fn internal_get(&mut self, key: &[u8]) -> Option<K::Value> {
        self.inner.internal_get(key)
    }

    fn internal_exists(&mut self, key: &[u8]) -> bool {
        self.inner.internal_exists(key)
    }

    fn internal_read(&mut self, key: &[u8], out: &mut Vec<u8>) -> bool {
        self.inner.internal_read(key, out)
    }

    fn internal_put(&mut self, key: &[u8], bytes: &[u8]) -> Result<(), StoreError> {
        self.inner.internal_put(key, bytes)
    }

    fn internal_delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        self.inner.internal_delete(key)
    }

    fn internal_scan(&mut self, from: &[u8], limit: usize, visit: &mut dyn FnMut(&[u8])) -> usize {
        self.inner.internal_scan(from, limit, visit)
    }
}
