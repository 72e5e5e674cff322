//! Restoring a snapshot into a persistent keyspace in bounded commits.
//!
//! A snapshot may hold far more than one failure-atomic commit of the
//! keyspace can (the engine's bound: its WAL, or a chained transaction's
//! 2^22 record words), so it is written over several commits, made
//! crash-safe by a marker, the internal entry `10 'R'` ([`RESTORING_KEY`],
//! `docs/FORMAT.md`, "The Redis machine's internal entries"):
//!
//! 1. the keyspace is cleared and the marker written, in one commit;
//! 2. the snapshot's keys, internal entries and the write index's dump
//!    parts are written in batches, each committed when the next write
//!    finds it full (a single write larger than a batch goes alone in an
//!    oversized one);
//! 3. the dump's header and the machine's state entry (applied index,
//!    time, write floor, flush, no journal entry) are written and the
//!    marker deleted, in the last commit.
//!
//! A crash before the last commit leaves the marker: [`RedisMachine::open`]
//! then claims no applied index (0, [`RedisMachine::needs_snapshot`]), so
//! the replica restores again from the snapshot its store holds (the store
//! takes a snapshot before the machine is restored from it), and a machine
//! with the marker set never persists an applied entry.

use pmwire_keyspace::store::{Expiry, StoreError, ValueSource};
use pmwire_smr::state::RestoreError;

use super::durable::{self, DUMP_KEY};
use super::{MachineKeyspace, RedisMachine, MACHINE_TAG, META_KEY};
use crate::snapshot::Data;
use crate::track::WriteIndex;

/// The internal key of the restore marker (the index of the snapshot being
/// restored, u64 LE): set while a restore is under way.
pub const RESTORING_KEY: &[u8] = &[MACHINE_TAG, b'R'];

fn store(e: impl ToString) -> RestoreError {
    RestoreError::Store(e.to_string())
}

/// Stages `op`'s writes: if they find the batch full, what came before is
/// committed and `op` runs again; if a fresh batch is too small, alone in an
/// oversized batch, committed at once.
fn staged<K: MachineKeyspace>(ks: &mut K, mut op: impl FnMut(&mut K) -> Result<(), StoreError>) -> Result<(), RestoreError> {
    for attempt in 0..3 {
        ks.begin_entry();
        let result = op(ks);
        if ks.batch_full() {
            ks.rollback_entry();
            match attempt {
                0 => ks.commit().map_err(store)?,
                _ => ks.allow_oversize(),
            }
            continue;
        }
        ks.end_entry();
        if let Some(why) = ks.take_fault() {
            return Err(store(why));
        }
        result.map_err(store)?;
        if attempt == 2 {
            ks.commit().map_err(store)?;
        }
        return Ok(());
    }
    Err(store("a snapshot's write outgrew an oversized batch"))
}

impl<K: MachineKeyspace> RedisMachine<K> {
    /// Whether the keyspace holds an interrupted restore (opened with the
    /// marker set): it claims no applied index and must be restored from a
    /// snapshot before it applies anything.
    pub fn needs_snapshot(&self) -> bool {
        self.restoring
    }

    /// Replaces a persistent keyspace's contents and replication state by
    /// the snapshot's (module docs); `index` is the applied index it is
    /// restored at and `writes` the snapshot's write index. The machine's
    /// fields but the durable layout are the caller's to set.
    pub(super) fn load_in_commits(&mut self, index: u64, data: &Data<'_>, writes: &WriteIndex) -> Result<(), RestoreError> {
        let ks = self.ks.get_mut();
        ks.set_now_ms(0);
        // Whatever is staged is wiped by the clear in the same commit.
        ks.allow_oversize();
        ks.begin_entry();
        let marked = ks.clear().and_then(|()| ks.internal_put(RESTORING_KEY, &index.to_le_bytes()));
        ks.end_entry();
        marked.map_err(store)?;
        ks.commit().map_err(store)?;
        self.restoring = true;
        self.durable.wiped();
        for k in &data.keys {
            let expiry = k.deadline_ms.map_or(Expiry::Clear, Expiry::At);
            staged(ks, |ks| ks.put(k.key, k.kind, ValueSource::Borrowed(k.value), expiry))?;
        }
        for (key, value) in &data.internal {
            staged(ks, |ks| ks.internal_put(key, value))?;
        }
        let dump = durable::dump(writes, index);
        for (n, part) in dump.parts.iter().enumerate() {
            staged(ks, |ks| ks.internal_put(&durable::part_key(n as u32), part))?;
        }
        let meta = durable::meta_bytes(index, data.state.last_time_ms, writes, 0);
        staged(ks, |ks| {
            ks.internal_put(DUMP_KEY, &dump.header)?;
            ks.internal_put(META_KEY, &meta)?;
            ks.internal_delete(RESTORING_KEY).map(drop)
        })?;
        ks.commit().map_err(store)?;
        self.restoring = false;
        self.durable.restored(index, &dump);
        Ok(())
    }
}
