//! The log seam for machines whose entries name the machine's own buffers
//! (issue 26 item 4: a Redis entry that refers to a value's extent in the
//! keyspace's pool instead of holding its bytes).
//!
//! Such an entry is only meaningful on the member whose pool holds the
//! bytes, and only while the buffers stay allocated. Two hooks of
//! [`StateMachine`] keep that true, called by the replica at these points
//! and nowhere else:
//! - **wire**: a `MsgAppend` going to a peer has each machine entry passed
//!   through [`StateMachine::wire_form`] (the machine gathers the values
//!   named by extents into a self-contained entry); one arriving from a
//!   peer, before Raft steps it, through [`StateMachine::local_form`] (the
//!   machine stores the values in its own pool, persists them in place and
//!   returns an entry naming its own extents). Membership, SMR1 and empty
//!   entries are never touched.
//! - **ownership** ([`LogRefs`]): an entry in the durable log holds one
//!   reference on every buffer it names. [`append`], [`compact`] and
//!   [`install_snapshot`] wrap the [`Durable`] calls that add or drop
//!   entries: the references of new entries are taken (`held`) once the
//!   append is durable, and those of entries the call dropped (a
//!   conflicting suffix a new leader truncated, a compacted prefix, the
//!   whole log under an installed snapshot) are given back (`dropped`)
//!   once the drop is durable, each exactly once. After each turn's Ready
//!   the replica calls [`StateMachine::log_settled`]: every entry proposed
//!   or received before it is now in the durable log (holding its own
//!   references) or was refused by Raft, so the machine drops the
//!   temporary references it took while building or absorbing them.
//!
//! At a restart the machine counts the references of the entries the
//! durable log holds itself, from the store, before anything allocates
//! (`pmwire_kv_server::member_zc`), so the volatile counts match the
//! durable log again.

use raft::eraftpb::{Entry, EntryType, SnapshotMetadata};

use crate::node::{ENTRY_FORWARDED, ENTRY_MACHINE};
use crate::store::{Durable, StoreError};

#[cfg(doc)]
use crate::state::StateMachine;

/// Who counts the references of the machine entries in the durable log.
pub trait LogRefs {
    /// The machine entry `data` is now in the durable log.
    fn held(&mut self, data: &[u8]);
    /// The machine entry `data` has left the durable log (truncated or compacted).
    fn dropped(&mut self, data: &[u8]);
    /// Whether entries are counted at all (when not, nothing is read back
    /// from the log to say which were dropped).
    fn tracks(&self) -> bool {
        true
    }
}

/// Whether `e` is the machine's data (the only entries the hooks see):
/// the leader's own proposal, or a follower's that the leader appended
/// (the forward context after the kind byte; its data is the machine's
/// entry all the same).
pub fn is_machine_entry(e: &Entry) -> bool {
    e.get_entry_type() == EntryType::EntryNormal && (e.context.as_ref() == [ENTRY_MACHINE] || e.context.first() == Some(&ENTRY_FORWARDED))
}

/// The machine entries `d` holds from index `from` on.
fn held_from<D: Durable>(d: &D, from: u64) -> Vec<Entry> {
    (from.max(d.first_index())..=d.last_index()).filter_map(|i| d.entry(i)).filter(is_machine_entry).collect()
}

/// [`Durable::append`], then `held` for each new machine entry and
/// `dropped` for each machine entry the append truncated.
pub fn append<D: Durable, R: LogRefs + ?Sized>(d: &mut D, entries: &[Entry], refs: &mut R) -> Result<(), StoreError> {
    let Some(first) = entries.first().filter(|_| refs.tracks()) else { return d.append(entries) };
    let truncated = held_from(d, first.index);
    d.append(entries)?;
    for e in entries.iter().filter(|e| is_machine_entry(e)) {
        refs.held(&e.data);
    }
    for e in &truncated {
        refs.dropped(&e.data);
    }
    Ok(())
}

/// [`Durable::compact`], then `dropped` for each machine entry it dropped.
pub fn compact<D: Durable, R: LogRefs + ?Sized>(d: &mut D, meta: &SnapshotMetadata, data: &[u8], refs: &mut R) -> Result<(), StoreError> {
    compact_with(d, meta.index, refs, |d| d.compact(meta, data))
}

/// [`Durable::compact_parts`], then `dropped` for each machine entry it
/// dropped.
pub fn compact_parts<D: Durable, R: LogRefs + ?Sized>(d: &mut D, meta: &SnapshotMetadata, len: u64, refs: &mut R) -> Result<(), StoreError> {
    compact_with(d, meta.index, refs, |d| d.compact_parts(meta, len))
}

/// Compacts the log up to `index` with `compact`, telling `refs` of every
/// machine entry it drops.
fn compact_with<D: Durable, R: LogRefs + ?Sized>(d: &mut D, index: u64, refs: &mut R, compact: impl FnOnce(&mut D) -> Result<(), StoreError>) -> Result<(), StoreError> {
    if !refs.tracks() {
        return compact(d);
    }
    let first = d.first_index();
    let gone: Vec<Entry> = (first..=index.min(d.last_index())).filter_map(|i| d.entry(i)).filter(is_machine_entry).collect();
    compact(d)?;
    for e in &gone {
        refs.dropped(&e.data);
    }
    Ok(())
}

/// [`Durable::install_snapshot`], then `dropped` for every machine entry
/// the log held (an installed snapshot empties it).
pub fn install_snapshot<D: Durable, R: LogRefs + ?Sized>(d: &mut D, meta: &SnapshotMetadata, data: &[u8], refs: &mut R) -> Result<(), StoreError> {
    install_with(d, refs, |d| d.install_snapshot(meta, data))
}

/// Installs a snapshot with `install` (a streamed one: from the store's
/// staging area), telling `refs` of every machine entry it drops.
pub fn install_with<D: Durable, R: LogRefs + ?Sized>(d: &mut D, refs: &mut R, install: impl FnOnce(&mut D) -> Result<(), StoreError>) -> Result<(), StoreError> {
    if !refs.tracks() {
        return install(d);
    }
    let gone = held_from(d, d.first_index());
    install(d)?;
    for e in &gone {
        refs.dropped(&e.data);
    }
    Ok(())
}

/// Counts nothing (a machine whose entries name no buffers).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoRefs;

impl LogRefs for NoRefs {
    fn held(&mut self, _: &[u8]) {}
    fn dropped(&mut self, _: &[u8]) {}
    fn tracks(&self) -> bool {
        false
    }
}
