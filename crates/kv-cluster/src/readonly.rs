//! Reads served outside the log: [`ReadOnly`], a keyspace wrapper that
//! treats an expired key as absent without deleting it, and refuses every
//! write.
//!
//! A member answers a read (GET after a ReadIndex, or a stale read on
//! `READONLY`) from its applied state at its own time. Lazy expiry would
//! delete there, and a delete outside the log is a divergence, so the
//! wrapper sets the inner keyspace's time to 0 while it is used (no key is
//! expired at time 0: a deadline is always after the time it was set at)
//! and judges expiry itself against the caller's time. Every write method
//! returns an error and counts the attempt ([`ReadOnly::attempts`]): the
//! caller refuses anything but a read before it runs
//! ([`crate::commands::class`]), so an attempt is a bug the caller reports.

use pmwire_keyspace::store::{Expiry, Keyspace, Kind, StoreError, StoreLimits, Stored, ValueSource};

use crate::machine::MachineKeyspace;

/// The refusal every write through [`ReadOnly`] gets.
pub const REFUSED: &str = "read-only execution: no write outside the log";

/// A read-only view of a keyspace at time `now_ms` (module docs).
pub struct ReadOnly<'k, K: MachineKeyspace> {
    inner: &'k mut K,
    now_ms: u64,
    /// The inner keyspace's time, put back on drop.
    restore_ms: u64,
    attempts: u64,
}

impl<'k, K: MachineKeyspace> ReadOnly<'k, K> {
    /// A view of `inner` at `now_ms`; `inner`'s time is set back to
    /// `restore_ms` when the view is dropped.
    pub fn new(inner: &'k mut K, now_ms: u64, restore_ms: u64) -> Self {
        inner.set_now_ms(0);
        ReadOnly { inner, now_ms, restore_ms, attempts: 0 }
    }

    /// Writes attempted (and refused) through this view.
    pub fn attempts(&self) -> u64 {
        self.attempts
    }

    fn expired(&self, deadline_ms: Option<u64>) -> bool {
        deadline_ms.is_some_and(|d| d <= self.now_ms)
    }

    fn refuse<T>(&mut self) -> Result<T, StoreError> {
        self.attempts += 1;
        Err(StoreError::NotPersisted(REFUSED.into()))
    }
}

impl<K: MachineKeyspace> Drop for ReadOnly<'_, K> {
    fn drop(&mut self) {
        self.inner.set_now_ms(self.restore_ms);
    }
}

impl<K: MachineKeyspace> Keyspace for ReadOnly<'_, K> {
    type Value = K::Value;

    fn get(&mut self, key: &[u8]) -> Option<Stored<K::Value>> {
        let stored = self.inner.get(key)?;
        (!self.expired(stored.deadline_ms)).then_some(stored)
    }

    fn read(&self, value: &K::Value, out: &mut Vec<u8>) {
        self.inner.read(value, out)
    }

    fn put(&mut self, _key: &[u8], _kind: Kind, _value: ValueSource<'_>, _expiry: Expiry) -> Result<(), StoreError> {
        self.refuse()
    }

    fn set_deadline(&mut self, _key: &[u8], _deadline_ms: Option<u64>) -> Result<bool, StoreError> {
        self.refuse()
    }

    fn delete(&mut self, _key: &[u8]) -> Result<bool, StoreError> {
        self.refuse()
    }

    /// The inner keyspace sees every key at time 0; the expired ones are
    /// skipped here, page by page, until `limit` live keys or the end.
    fn scan(&mut self, after: Option<&[u8]>, limit: usize, visit: &mut dyn FnMut(&[u8], Kind)) -> usize {
        const PAGE: usize = 256;
        let mut cursor: Option<Vec<u8>> = after.map(<[u8]>::to_vec);
        let mut n = 0;
        while n < limit {
            let mut page: Vec<(Vec<u8>, Kind)> = Vec::new();
            let got = self.inner.scan(cursor.as_deref(), PAGE, &mut |k, kind| page.push((k.to_vec(), kind)));
            for (key, kind) in &page {
                if n == limit {
                    break;
                }
                let live = self.inner.get(key).is_some_and(|s| !self.expired(s.deadline_ms));
                if live {
                    visit(key, *kind);
                    n += 1;
                }
            }
            if got < PAGE || n == limit {
                break;
            }
            cursor = page.last().map(|(k, _)| k.clone());
        }
        n
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Nothing is swept on a read.
    fn expired(&self, _limit: usize) -> Vec<Vec<u8>> {
        Vec::new()
    }

    fn expiring_len(&self) -> u64 {
        self.inner.expiring_len()
    }

    fn used_memory(&self) -> u64 {
        self.inner.used_memory()
    }

    fn clear(&mut self) -> Result<(), StoreError> {
        self.refuse()
    }

    fn limits(&self) -> StoreLimits {
        self.inner.limits()
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

    fn internal_put(&mut self, _key: &[u8], _bytes: &[u8]) -> Result<(), StoreError> {
        self.refuse()
    }

    fn internal_delete(&mut self, _key: &[u8]) -> Result<bool, StoreError> {
        self.refuse()
    }

    fn internal_scan(&mut self, from: &[u8], limit: usize, visit: &mut dyn FnMut(&[u8])) -> usize {
        self.inner.internal_scan(from, limit, visit)
    }
}
