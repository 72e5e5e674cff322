//! [`ClusterKeyspace`]: the persistent engine as the keyspace of a replicated
//! Redis machine (`pmwire_kv_cluster::RedisMachine`), which owns it across
//! entries and commits it once per batch of applied entries, the applied
//! index with the writes (`MachineKeyspace::commit`).
//!
//! Every keyspace call goes to an [`EngineKeyspace`] made for it over the
//! store and one [`BatchState`] kept here, in copy mode (an entry's values
//! are copied from the log entry; storing them by their extents in the
//! replicated log is issue 26 item 4). Value handles are held until the
//! machine has taken an entry's replies (`end_entry`), or until a commit.
//!
//! Determinism: a command refused because the pool is full, or a failed
//! commit, depends on this member's pool, not on the log: it is reported
//! as a fault (`take_fault`), and the machine halts at its next persist
//! instead of going on with a state the others do not have. An entry that
//! finds the batch full is undone and run again by the machine after a
//! commit (`batch_full`, `rollback_entry`), or alone in an oversized batch
//! (`allow_oversize`: committed as a chained transaction).

use pmwire_kv::Savepoint;
use pmwire_kv_cluster::MachineKeyspace;
use pmwire_keyspace::store::{Expiry, Keyspace, Kind, StoreError, StoreLimits, Stored, ValueSource};

use crate::keyspace::{engine_limits, internal_count, user_key, BatchState, EngineKeyspace, Handle};
use crate::store::Store;

/// The engine behind a replicated Redis machine (module docs).
pub struct ClusterKeyspace {
    store: Store,
    state: BatchState,
    now_ms: u64,
    entry_start: Option<Savepoint>,
    fault: Option<String>,
}

impl std::fmt::Debug for ClusterKeyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterKeyspace({:?}, now {} ms)", self.store, self.now_ms)
    }
}

impl ClusterKeyspace {
    /// The keyspace over an opened store (its mode does not matter: values
    /// are copied).
    pub fn new(store: Store) -> ClusterKeyspace {
        ClusterKeyspace { store, state: BatchState::default(), now_ms: 0, entry_start: None, fault: None }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The store back, every handle released (what is staged and not
    /// committed is dropped with it, as a crash would).
    pub fn into_store(mut self) -> Store {
        self.state.release_held(&mut self.store.engine);
        self.store
    }

    /// An engine keyspace for one call.
    fn ks(&mut self) -> EngineKeyspace<'_> {
        EngineKeyspace {
            engine: &mut self.store.engine,
            region: &mut self.store.region,
            state: &mut self.state,
            zero_copy: false,
            locs: &[],
            reserve: u32::from(self.store.sizing.ring_entries),
            now_ms: self.now_ms,
        }
    }

    /// Notes a refusal that depends on this member's pool.
    fn watch<T>(&mut self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(e @ (StoreError::PoolFull | StoreError::NotPersisted(_) | StoreError::Full)) = &result {
            self.fault.get_or_insert(e.to_string());
        }
        result
    }
}

impl MachineKeyspace for ClusterKeyspace {
    fn set_now_ms(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
    }

    fn is_persistent(&self) -> bool {
        true
    }

    fn commit(&mut self) -> Result<(), String> {
        let result = self.state.commit(&mut self.store.engine, &mut self.store.region);
        self.state.release_held(&mut self.store.engine);
        result.map_err(|()| self.state.failed.clone().unwrap_or_else(|| "commit failed".into()))
    }

    fn begin_entry(&mut self) {
        self.entry_start = Some(self.store.engine.savepoint());
    }

    fn batch_full(&self) -> bool {
        self.state.batch_full
    }

    fn rollback_entry(&mut self) {
        let start = self.entry_start.take().expect("an entry began");
        self.store.engine.rollback_to(start);
        self.state.batch_full = false;
    }

    fn allow_oversize(&mut self) {
        self.store.engine.allow_oversize();
    }

    fn take_fault(&mut self) -> Option<String> {
        self.fault.take()
    }

    fn end_entry(&mut self) {
        self.entry_start = None;
        self.state.release_held(&mut self.store.engine);
    }
}

impl Keyspace for ClusterKeyspace {
    type Value = Handle;

    fn get(&mut self, key: &[u8]) -> Option<Stored<Handle>> {
        self.ks().get(key)
    }

    fn read(&self, value: &Handle, out: &mut Vec<u8>) {
        self.store.engine.pool().gather(&self.store.region, value, out);
    }

    fn put(&mut self, key: &[u8], kind: Kind, value: ValueSource<'_>, expiry: Expiry) -> Result<(), StoreError> {
        let result = self.ks().put(key, kind, value, expiry);
        self.watch(result)
    }

    fn set_deadline(&mut self, key: &[u8], deadline_ms: Option<u64>) -> Result<bool, StoreError> {
        let result = self.ks().set_deadline(key, deadline_ms);
        self.watch(result)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        let result = self.ks().delete(key);
        self.watch(result)
    }

    fn scan(&mut self, after: Option<&[u8]>, limit: usize, visit: &mut dyn FnMut(&[u8], Kind)) -> usize {
        self.ks().scan(after, limit, visit)
    }

    fn len(&self) -> u64 {
        (self.store.engine.len() - internal_count(&self.store.engine)) as u64
    }

    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    fn expired(&self, limit: usize) -> Vec<Vec<u8>> {
        self.store.engine.expired(self.now_ms).filter_map(user_key).take(limit).map(<[u8]>::to_vec).collect()
    }

    fn expiring_len(&self) -> u64 {
        self.store.engine.expiring_len() as u64
    }

    fn clear(&mut self) -> Result<(), StoreError> {
        let result = self.ks().clear();
        self.watch(result)
    }

    fn limits(&self) -> StoreLimits {
        engine_limits(&self.store.engine)
    }

    fn begin_command(&mut self) {
        self.ks().begin_command()
    }

    fn abort_command(&mut self) {
        self.ks().abort_command()
    }

    fn has_internal(&self) -> bool {
        true
    }

    fn internal_get(&mut self, key: &[u8]) -> Option<Handle> {
        self.ks().internal_get(key)
    }

    fn internal_put(&mut self, key: &[u8], bytes: &[u8]) -> Result<(), StoreError> {
        let result = self.ks().internal_put(key, bytes);
        self.watch(result)
    }

    fn internal_delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        let result = self.ks().internal_delete(key);
        self.watch(result)
    }

    fn internal_scan(&mut self, from: &[u8], limit: usize, visit: &mut dyn FnMut(&[u8])) -> usize {
        self.ks().internal_scan(from, limit, visit)
    }
}
