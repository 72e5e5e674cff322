//! One forwarding of the executor's [`Keyspace`] to the engine, for a
//! keyspace that owns an engine and lends an [`EngineKeyspace`] over it for
//! each call ([`EngineHost`]): [`Forward`] is that keyspace. The host says
//! only what differs between hosts: how it lends the engine, and what it
//! does with a write's result, and whether a put stores its value by pool
//! extents (a replicated member's [`crate::cluster::ClusterHost`] stores
//! values received into the pool so, counts what it copies and notes
//! refusals that depend on its pool; the simulation's
//! [`crate::sim::PmemKeyspace`] notes pool refusals and, with its planted
//! bug, commits at once).
//!
//! Reads that need no [`EngineKeyspace`] (counts, the expired keys, the
//! limits, a value's bytes) go to the same functions [`EngineKeyspace`]'s
//! own do, over the engine the host shows read-only.

use std::ops::{Deref, DerefMut};

use pmem::Media;
use pmwire_keyspace::store::{Expiry, Keyspace, Kind, StoreError, StoreLimits, Stored, ValueSource};
use pmwire_kv::Engine;

use crate::keyspace::{engine_limits, expired_keys, user_len, EngineKeyspace, Handle};

/// What a keyspace over the engine supplies ([`Forward`] does the rest).
pub(crate) trait EngineHost {
    /// The medium the engine lies on.
    type Media: Media;

    /// Runs `f` on an engine keyspace made for one call.
    fn lend<R>(&mut self, f: impl FnOnce(&mut EngineKeyspace<'_, Self::Media>) -> R) -> R;

    /// Runs `f` on an engine keyspace made for one put; `by_extents`:
    /// what [`EngineHost::put_by_extents`] said. As `lend` by default.
    fn lend_put<R>(&mut self, by_extents: bool, f: impl FnOnce(&mut EngineKeyspace<'_, Self::Media>) -> R) -> R {
        let _ = by_extents;
        self.lend(f)
    }

    /// Whether a put of `value` stores it by its pool extents (a value
    /// received into the pool, as a replicated member's); the host may
    /// count what it copies otherwise. False by default.
    fn put_by_extents(&mut self, value: &ValueSource<'_>) -> bool {
        let _ = value;
        false
    }

    /// Runs `f` on the engine and its medium, read only.
    fn peek<R>(&self, f: impl FnOnce(&Engine, &Self::Media) -> R) -> R;

    /// The time deadlines are compared with, ms since the Unix epoch.
    fn now_ms(&self) -> u64;

    /// Sees the result of a write before the executor does.
    fn wrote<T>(&mut self, result: Result<T, StoreError>) -> Result<T, StoreError>;
}

/// A host as a [`Keyspace`] (module docs); derefs to the host.
#[derive(Debug)]
pub struct Forward<H>(pub H);

impl<H> Deref for Forward<H> {
    type Target = H;

    fn deref(&self) -> &H {
        &self.0
    }
}

impl<H> DerefMut for Forward<H> {
    fn deref_mut(&mut self) -> &mut H {
        &mut self.0
    }
}

impl<H: EngineHost> Keyspace for Forward<H> {
    type Value = Handle;

    fn get(&mut self, key: &[u8]) -> Option<Stored<Handle>> {
        self.0.lend(|k| k.get(key))
    }

    fn read(&self, value: &Handle, out: &mut Vec<u8>) {
        self.0.peek(|engine, media| engine.pool().gather(media, value, out))
    }

    fn put(&mut self, key: &[u8], kind: Kind, value: ValueSource<'_>, expiry: Expiry) -> Result<(), StoreError> {
        let by_extents = self.0.put_by_extents(&value);
        let result = self.0.lend_put(by_extents, |k| k.put(key, kind, value, expiry));
        self.0.wrote(result)
    }

    fn set_deadline(&mut self, key: &[u8], deadline_ms: Option<u64>) -> Result<bool, StoreError> {
        let result = self.0.lend(|k| k.set_deadline(key, deadline_ms));
        self.0.wrote(result)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        let result = self.0.lend(|k| k.delete(key));
        self.0.wrote(result)
    }

    fn scan(&mut self, after: Option<&[u8]>, limit: usize, visit: &mut dyn FnMut(&[u8], Kind)) -> usize {
        self.0.lend(|k| k.scan(after, limit, visit))
    }

    fn len(&self) -> u64 {
        self.0.peek(|engine, _| user_len(engine))
    }

    fn now_ms(&self) -> u64 {
        self.0.now_ms()
    }

    fn expired(&self, limit: usize) -> Vec<Vec<u8>> {
        let now_ms = self.0.now_ms();
        self.0.peek(|engine, _| expired_keys(engine, now_ms, limit))
    }

    fn expiring_len(&self) -> u64 {
        self.0.peek(|engine, _| engine.expiring_len() as u64)
    }

    fn used_memory(&self) -> u64 {
        self.0.peek(|engine, _| crate::keyspace::used_memory(engine))
    }

    fn clear(&mut self) -> Result<(), StoreError> {
        let result = self.0.lend(|k| k.clear());
        self.0.wrote(result)
    }

    fn limits(&self) -> StoreLimits {
        self.0.peek(|engine, _| engine_limits(engine))
    }

    fn begin_command(&mut self) {
        self.0.lend(|k| k.begin_command())
    }

    fn abort_command(&mut self) {
        self.0.lend(|k| k.abort_command())
    }

    fn begin_script(&mut self) {
        self.0.lend(|k| k.begin_script())
    }

    fn abort_script(&mut self) {
        self.0.lend(|k| k.abort_script())
    }

    fn has_internal(&self) -> bool {
        true
    }

    fn internal_get(&mut self, key: &[u8]) -> Option<Handle> {
        self.0.lend(|k| k.internal_get(key))
    }

    fn internal_exists(&mut self, key: &[u8]) -> bool {
        self.0.lend(|k| k.internal_exists(key))
    }

    fn internal_read(&mut self, key: &[u8], out: &mut Vec<u8>) -> bool {
        self.0.lend(|k| k.internal_read(key, out))
    }

    fn internal_put(&mut self, key: &[u8], bytes: &[u8]) -> Result<(), StoreError> {
        let result = self.0.lend(|k| k.internal_put(key, bytes));
        self.0.wrote(result)
    }

    fn internal_delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        let result = self.0.lend(|k| k.internal_delete(key));
        self.0.wrote(result)
    }

    fn internal_scan(&mut self, from: &[u8], limit: usize, visit: &mut dyn FnMut(&[u8])) -> usize {
        self.0.lend(|k| k.internal_scan(from, limit, visit))
    }
}
