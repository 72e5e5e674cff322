//! What a replica keeps durably, and raft-rs's `Storage` over it.
//!
//! [`Durable`] is the seam: the Raft log (entries by index), the hard
//! state (term, vote, commit), the membership (`ConfState`) and the last
//! snapshot. Its implementations: [`MemDurable`], the volatile DRAM
//! baseline (seed 000 Table 1's "DRAM log"), and the persistent-memory
//! store in [`crate::pmem_store`]. [`Store`] adapts either to raft-rs.
//!
//! Contract of a `Durable` (what a `Ready` relies on): every mutating call
//! is durable when it returns (for [`MemDurable`]: until the process
//! ends), except [`Durable::note_commit`], which may be persisted lazily
//! (a lower commit index after a crash is safe: it is learned again).
//! Indexes: the log holds `first_index()..=last_index()`; it is empty when
//! `first_index() == last_index() + 1`, and `first_index() - 1` is the
//! snapshot's index, whose term [`Durable::term`] also answers.
//!
//! Snapshot streams (`crate::snapshot::stream`): the store names its
//! snapshot's body ([`Durable::snapshot_body`]) and reads it in pieces for
//! a sender; a receiver's chunks go into the store's staging area
//! ([`Durable::stage`], durable on return, a prefix of one body at a
//! time), which [`Durable::install_staged`] installs only once
//! [`Durable::verify_staged`] read the whole body back against its
//! checksum. raft-rs's `Storage::snapshot` hands out the body's
//! descriptor, never the body.

use std::collections::VecDeque;

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, StorageError};
use thiserror::Error;

use crate::snapshot::stream::BodyId;

/// Why a store could not do what was asked.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The log's space is used up: take a snapshot and compact.
    #[error("log full: {0}")]
    Full(String),
    /// Appending past the end or over the compacted prefix.
    #[error("log not contiguous: {0}")]
    Gap(String),
    /// A snapshot larger than the store's snapshot slot.
    #[error("snapshot of {len} B exceeds the slot's {max} B")]
    SnapshotTooLarge {
        /// The snapshot's data length.
        len: u64,
        /// The most a slot holds.
        max: u64,
    },
    /// The media refused or holds something else.
    #[error("store: {0}")]
    Media(String),
}

/// The durable state of one replica.
pub trait Durable {
    /// Hard state as last stored (commit possibly newer, see module docs).
    fn hard_state(&self) -> HardState;
    /// Membership as last stored.
    fn conf_state(&self) -> ConfState;
    /// The last snapshot: its metadata (index, term, membership) and data.
    fn snapshot(&self) -> (SnapshotMetadata, Vec<u8>);
    /// The last snapshot's data, in place where the store's medium can be
    /// read so (a mapped pool: a machine restores a large snapshot without
    /// a copy of it in DRAM).
    fn snapshot_data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Owned(self.snapshot().1)
    }
    /// The first index in the log (snapshot index + 1 if empty).
    fn first_index(&self) -> u64;
    /// The last index in the log (the snapshot's if empty).
    fn last_index(&self) -> u64;
    /// The term of `index`, for the snapshot's index and every entry held.
    fn term(&self, index: u64) -> Option<u64>;
    /// The entry at `index`, if held.
    fn entry(&self, index: u64) -> Option<Entry>;
    /// Appends `entries` (contiguous, first index ≤ last_index() + 1),
    /// first dropping every held entry from `entries[0].index` on; one
    /// durability point for the whole batch.
    fn append(&mut self, entries: &[Entry]) -> Result<(), StoreError>;
    /// Stores the hard state (failure-atomic).
    fn set_hard_state(&mut self, hs: &HardState) -> Result<(), StoreError>;
    /// Records a newer commit index (may be persisted lazily).
    fn note_commit(&mut self, commit: u64);
    /// Stores the membership.
    fn set_conf_state(&mut self, cs: &ConfState) -> Result<(), StoreError>;
    /// Installs a snapshot received from the leader: the log becomes empty,
    /// starting at `meta.index + 1`; the hard state's commit becomes at
    /// least `meta.index`.
    fn install_snapshot(&mut self, meta: &SnapshotMetadata, data: &[u8]) -> Result<(), StoreError>;
    /// Stores a snapshot taken locally at `meta.index` (≤ applied) and
    /// drops the entries up to it.
    fn compact(&mut self, meta: &SnapshotMetadata, data: &[u8]) -> Result<(), StoreError>;
    /// Whether this store takes a compaction's record in parts
    /// ([`Durable::compact_part`], [`Durable::compact_parts`]): a large
    /// record is then written over several turns of a replica's loop.
    fn compacts_in_parts(&self) -> bool {
        false
    }
    /// Writes bytes `offset..` of a compaction's record (parts in order,
    /// from 0), not yet a snapshot. Anything else stored meanwhile (a
    /// compaction, an install, a staged body) discards the parts.
    fn compact_part(&mut self, offset: u64, bytes: &[u8]) -> Result<(), StoreError> {
        let _ = (offset, bytes);
        unreachable!("only a store that compacts in parts is given parts")
    }
    /// Stores the `len` bytes written in parts as the snapshot at
    /// `meta.index` and drops the entries up to it (as [`Durable::compact`]).
    fn compact_parts(&mut self, meta: &SnapshotMetadata, len: u64) -> Result<(), StoreError> {
        let _ = (meta, len);
        unreachable!("only a store that compacts in parts is given parts")
    }
    /// The largest snapshot or log entry this store can hold, if it is
    /// bounded: a replica refuses a larger incoming message at its first
    /// chunk.
    fn capacity_hint(&self) -> Option<u64> {
        None
    }
    /// Bytes free in the log and its capacity, if it is bounded: a
    /// replica compacts once less than half is free (large entries fill a
    /// log long before a count of entries would call for a snapshot).
    fn log_space(&self) -> Option<(u64, u64)> {
        None
    }

    /// The last snapshot's metadata (its data not read).
    fn snapshot_meta(&self) -> SnapshotMetadata;
    /// The held snapshot's body, named for streaming it in pieces
    /// (`crate::snapshot::stream`).
    fn snapshot_body(&self) -> BodyId;
    /// Reads `buf.len()` bytes of the body `body` from `offset`; false if
    /// the store no longer holds that body (a newer one replaced it) or
    /// the range lies past its end.
    fn read_snapshot_body(&self, body: &BodyId, offset: u64, buf: &mut [u8]) -> bool;
    /// The body being received into the staging area, and how many of its
    /// bytes (a prefix) the area holds durably.
    fn staged(&self) -> Option<(BodyId, u64)>;
    /// Writes `bytes` of `body` at `offset` into the staging area, durably,
    /// and returns the bytes now held. `offset` is what the area holds of
    /// `body`, or 0 to start over (whatever was staged is dropped). Refused
    /// past the body's end, with a gap, or for a body larger than a
    /// snapshot the store holds.
    fn stage(&mut self, body: &BodyId, offset: u64, bytes: &[u8]) -> Result<u64, StoreError>;
    /// Whether the staging area holds all of `body` and its checksum
    /// holds (read back from the store; the answer is kept until the area
    /// changes).
    fn verify_staged(&mut self, body: &BodyId) -> bool;
    /// Installs the staged `body` as the snapshot `meta` (as
    /// [`Durable::install_snapshot`]); refused unless
    /// [`Durable::verify_staged`] holds.
    fn install_staged(&mut self, meta: &SnapshotMetadata, body: &BodyId) -> Result<(), StoreError>;
}

/// The volatile baseline: everything in DRAM, nothing flushed.
#[derive(Default)]
pub struct MemDurable {
    entries: VecDeque<Entry>,
    hard: HardState,
    conf: ConfState,
    snap_meta: SnapshotMetadata,
    snap_data: Vec<u8>,
    snap_body: BodyId,
    /// The staging area: the body, its bytes so far, verified.
    staging: Option<(BodyId, Vec<u8>, bool)>,
}

impl MemDurable {
    /// An empty store for a cluster of `voters`.
    pub fn new(voters: &[u64]) -> MemDurable {
        let conf = ConfState { voters: voters.to_vec(), ..Default::default() };
        let mut snap_meta = SnapshotMetadata::default();
        snap_meta.set_conf_state(conf.clone());
        let snap_body = BodyId::of(0, 0, &[]);
        MemDurable { conf, snap_meta, snap_body, ..Default::default() }
    }

    fn offset(&self) -> u64 {
        self.snap_meta.index + 1
    }
}

impl Durable for MemDurable {
    fn hard_state(&self) -> HardState {
        self.hard.clone()
    }
    fn conf_state(&self) -> ConfState {
        self.conf.clone()
    }
    fn snapshot(&self) -> (SnapshotMetadata, Vec<u8>) {
        (self.snap_meta.clone(), self.snap_data.clone())
    }
    fn first_index(&self) -> u64 {
        self.offset()
    }
    fn last_index(&self) -> u64 {
        self.snap_meta.index + self.entries.len() as u64
    }
    fn term(&self, index: u64) -> Option<u64> {
        if index == self.snap_meta.index {
            return Some(self.snap_meta.term);
        }
        self.entry_ref(index).map(|e| e.term)
    }
    fn entry(&self, index: u64) -> Option<Entry> {
        self.entry_ref(index).cloned()
    }
    fn append(&mut self, entries: &[Entry]) -> Result<(), StoreError> {
        let Some(first) = entries.first() else { return Ok(()) };
        check_append(self, first.index)?;
        self.entries.truncate((first.index - self.offset()) as usize);
        self.entries.extend(entries.iter().cloned());
        Ok(())
    }
    fn set_hard_state(&mut self, hs: &HardState) -> Result<(), StoreError> {
        self.hard = hs.clone();
        Ok(())
    }
    fn note_commit(&mut self, commit: u64) {
        self.hard.commit = commit;
    }
    fn set_conf_state(&mut self, cs: &ConfState) -> Result<(), StoreError> {
        self.conf = cs.clone();
        Ok(())
    }
    fn install_snapshot(&mut self, meta: &SnapshotMetadata, data: &[u8]) -> Result<(), StoreError> {
        self.entries.clear();
        self.snap_meta = meta.clone();
        self.snap_data = data.to_vec();
        self.snap_body = BodyId::of(meta.index, meta.term, data);
        self.conf = meta.get_conf_state().clone();
        self.hard.commit = self.hard.commit.max(meta.index);
        self.hard.term = self.hard.term.max(meta.term);
        Ok(())
    }
    fn compact(&mut self, meta: &SnapshotMetadata, data: &[u8]) -> Result<(), StoreError> {
        assert!(meta.index >= self.snap_meta.index, "snapshots move forward");
        assert!(meta.index <= self.last_index(), "a snapshot of held entries");
        let drop = (meta.index - self.snap_meta.index) as usize;
        self.entries.drain(..drop);
        self.snap_meta = meta.clone();
        self.snap_data = data.to_vec();
        self.snap_body = BodyId::of(meta.index, meta.term, data);
        Ok(())
    }
    fn snapshot_meta(&self) -> SnapshotMetadata {
        self.snap_meta.clone()
    }
    fn snapshot_body(&self) -> BodyId {
        self.snap_body
    }
    fn read_snapshot_body(&self, body: &BodyId, offset: u64, buf: &mut [u8]) -> bool {
        let end = offset.checked_add(buf.len() as u64);
        if *body != self.snap_body || end.is_none_or(|end| end > body.len) {
            return false;
        }
        buf.copy_from_slice(&self.snap_data[offset as usize..offset as usize + buf.len()]);
        true
    }
    fn staged(&self) -> Option<(BodyId, u64)> {
        self.staging.as_ref().map(|(b, bytes, _)| (*b, bytes.len() as u64))
    }
    fn stage(&mut self, body: &BodyId, offset: u64, bytes: &[u8]) -> Result<u64, StoreError> {
        check_stage(self.staged(), body, offset, bytes, None)?;
        if offset == 0 {
            self.staging = Some((*body, Vec::new(), false));
        }
        let (_, held, verified) = self.staging.as_mut().expect("staging");
        held.extend_from_slice(bytes);
        *verified = false;
        Ok(held.len() as u64)
    }
    fn verify_staged(&mut self, body: &BodyId) -> bool {
        match &mut self.staging {
            Some((b, bytes, verified)) if b == body && bytes.len() as u64 == body.len => {
                *verified = *verified || crate::snapshot::stream::body_crc(bytes) == body.crc;
                *verified
            }
            _ => false,
        }
    }
    fn install_staged(&mut self, meta: &SnapshotMetadata, body: &BodyId) -> Result<(), StoreError> {
        check_staged_meta(meta, body)?;
        if !self.verify_staged(body) {
            return Err(StoreError::Media(format!("the staging area does not hold the snapshot body at index {} whole and checked", body.index)));
        }
        let (_, data, _) = self.staging.take().expect("verified");
        self.install_snapshot(meta, &data)
    }
}

/// Checks a [`Durable::stage`] call against what is staged (`held`) and
/// the store's snapshot bound (`max`).
pub fn check_stage(held: Option<(BodyId, u64)>, body: &BodyId, offset: u64, bytes: &[u8], max: Option<u64>) -> Result<(), StoreError> {
    if let Some(max) = max.filter(|&max| body.len > max) {
        return Err(StoreError::SnapshotTooLarge { len: body.len, max });
    }
    let at = match held {
        Some((b, n)) if b == *body => n,
        _ => 0,
    };
    if offset != 0 && offset != at {
        return Err(StoreError::Gap(format!("staged bytes at {offset} of the snapshot body at index {}, which holds {at}", body.index)));
    }
    if offset.checked_add(bytes.len() as u64).is_none_or(|end| end > body.len) {
        return Err(StoreError::Gap(format!("staged bytes past the end of the snapshot body at index {} ({} B)", body.index, body.len)));
    }
    Ok(())
}

/// Checks that a staged body is the snapshot `meta` names.
pub fn check_staged_meta(meta: &SnapshotMetadata, body: &BodyId) -> Result<(), StoreError> {
    if meta.index != body.index || meta.term != body.term {
        let why = format!("the staged body at index {} (term {}) is not the snapshot at {} (term {})", body.index, body.term, meta.index, meta.term);
        return Err(StoreError::Gap(why));
    }
    Ok(())
}

impl MemDurable {
    fn entry_ref(&self, index: u64) -> Option<&Entry> {
        let at = index.checked_sub(self.offset())?;
        self.entries.get(usize::try_from(at).ok()?)
    }
}

/// Checks that an append starting at `first` is contiguous with `store`.
pub fn check_append(store: &impl Durable, first: u64) -> Result<(), StoreError> {
    if first < store.first_index() {
        return Err(StoreError::Gap(format!("append at {first} over the compacted prefix (first index {})", store.first_index())));
    }
    if first > store.last_index() + 1 {
        return Err(StoreError::Gap(format!("append at {first} past the end (last index {})", store.last_index())));
    }
    Ok(())
}

/// raft-rs's view of a [`Durable`].
pub struct Store<D: Durable> {
    /// The durable state.
    pub durable: D,
    /// raft-rs asked for a snapshot to send while the stored one was a
    /// compaction record of a machine that keeps its own state (its machine
    /// part deferred, `crate::snapshot::is_deferred`): the replica encodes a
    /// whole one at the end of the turn, and raft-rs asks again.
    pub snapshot_wanted: std::cell::Cell<bool>,
    /// A machine entry's wire length ([`crate::StateMachine::wire_len`]):
    /// an append is bounded by what it carries on the wire, not by the
    /// logged form (an extent-form entry names its values; sent, it
    /// carries them).
    wire_len: crate::state::WireLen,
    /// A whole snapshot for a new member is being taken while the log
    /// still begins at the cluster's first entry: no append from there
    /// (the new member must start from the snapshot, which holds the first
    /// membership).
    pub withhold_start: std::cell::Cell<bool>,
}

impl<D: Durable> Store<D> {
    /// raft-rs's view of `durable`, whose machine entries are `wire_len`
    /// long when sent.
    pub fn new(durable: D, wire_len: crate::state::WireLen) -> Store<D> {
        Store { durable, snapshot_wanted: std::cell::Cell::new(false), wire_len, withhold_start: std::cell::Cell::new(false) }
    }
}

fn compacted() -> raft::Error {
    raft::Error::Store(StorageError::Compacted)
}
fn unavailable() -> raft::Error {
    raft::Error::Store(StorageError::Unavailable)
}

impl<D: Durable> raft::Storage for Store<D> {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let mut hard_state = self.durable.hard_state();
        // The commit index is stored lazily and compaction takes what is
        // applied, so after a crash the snapshot may lie past the stored
        // commit; raft-rs refuses a commit below first_index - 1. A
        // snapshot holds only committed entries.
        hard_state.commit = hard_state.commit.max(self.durable.first_index() - 1);
        Ok(RaftState { hard_state, conf_state: self.durable.conf_state() })
    }

    fn entries(&self, low: u64, high: u64, max_size: impl Into<Option<u64>>, context: GetEntriesContext) -> raft::Result<Vec<Entry>> {
        if low < self.durable.first_index() {
            return Err(compacted());
        }
        if high > self.durable.last_index() + 1 || low > high {
            return Err(unavailable());
        }
        let max = max_size.into().unwrap_or(u64::MAX);
        let mut out = Vec::with_capacity((high - low).min(1024) as usize);
        let mut size = 0u64;
        // Only an append to a peer (the one context raft-rs lets fetch
        // asynchronously) carries the wire form; a Ready's committed
        // entries are applied in the logged form, values in place.
        let sending = context.can_async();
        if sending && low <= 1 && self.withhold_start.get() {
            // raft-rs tries again at the next heartbeat's answer.
            return Err(raft::Error::Store(StorageError::LogTemporarilyUnavailable));
        }
        for index in low..high {
            let e = self.durable.entry(index).ok_or_else(unavailable)?;
            let mut bytes = u64::from(protobuf::Message::compute_size(&e));
            if sending && crate::logrefs::is_machine_entry(&e) {
                bytes = bytes.saturating_add((self.wire_len)(&e.data).saturating_sub(e.data.len() as u64));
            }
            size = size.saturating_add(bytes);
            if !out.is_empty() && size > max {
                break; // at least one entry, then within max_size
            }
            out.push(e);
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx + 1 < self.durable.first_index() {
            return Err(compacted());
        }
        if idx > self.durable.last_index() {
            return Err(unavailable());
        }
        self.durable.term(idx).ok_or_else(unavailable)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.durable.first_index())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.durable.last_index())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let (meta, body) = (self.durable.snapshot_meta(), self.durable.snapshot_body());
        let mut head = [0u8; 32];
        if body.len >= head.len() as u64 && self.durable.read_snapshot_body(&body, 0, &mut head) && crate::snapshot::is_deferred(&head) {
            // Never sent: the peer would have nothing to restore from.
            self.snapshot_wanted.set(true);
            return Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable));
        }
        if meta.index < request_index {
            return Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable));
        }
        // The body goes out of band, streamed from the store
        // (`crate::snapshot::stream`); the message names it.
        let mut snap = Snapshot::default();
        snap.set_metadata(meta);
        snap.data = crate::snapshot::stream::encode_descriptor(&body).into();
        Ok(snap)
    }
}

#[cfg(test)]
mod tests {
    use raft::Storage;

    use super::*;

    /// An append to a peer is bounded by its entries' wire length; a
    /// Ready's committed entries by their logged length.
    #[test]
    fn appends_are_sized_by_the_wire_form() {
        let mut durable = MemDurable::new(&[1]);
        let entries: Vec<Entry> = (1..=100u64)
            .map(|index| {
                let mut e = Entry { index, term: 1, data: vec![0u8; 100].into(), ..Default::default() };
                e.context = vec![crate::node::ENTRY_MACHINE].into();
                e
            })
            .collect();
        durable.append(&entries).unwrap();
        // Each entry is 100 B logged, 10,000 B on the wire.
        let store = Store::new(durable, |data| data.len() as u64 * 100);
        let sent = store.entries(1, 101, 50_000, GetEntriesContext::empty(true)).unwrap();
        assert_eq!(sent.len(), 4, "5 entries would carry 50,000 B and more");
        let applied = store.entries(1, 101, 50_000, GetEntriesContext::empty(false)).unwrap();
        assert_eq!(applied.len(), 100, "100 logged entries are about 11,000 B");
        assert_eq!(store.entries(1, 101, 1, GetEntriesContext::empty(true)).unwrap().len(), 1, "the first always goes");
    }
}
