//! The checkpoint: the WAL's net effect applied to the B+tree with one
//! root switch, then the WAL truncated, then the references the tree's old
//! values and the dropped records held released — in that order, so a
//! buffer is freed only once no durable structure names it.
//!
//! The tree records no WAL position: every record is a blind write (a set
//! carries the whole value; delete and clear need no prior state), so
//! replaying the retained WAL over a tree that already holds some or all
//! of it gives the same index. A crash between the root switch and the
//! truncation therefore only replays records twice.
//!
//! A checkpoint in slices ([`Engine::set_checkpoint_slice`]) rests on the
//! same fact: it takes the net effect of the records committed when it
//! starts ([`Pending`]), applies it a slice per commit while later commits
//! append to the WAL behind it, and truncates the WAL only to where it
//! started, once every slice is in. The tree never holds a value newer than
//! a record the WAL still has, so a crash between slices replays the whole
//! WAL over a tree holding some of the slices and recovers the same index.
//! The references it takes and the old values it drops are held until its
//! end, as a whole checkpoint's are (and counted by [`Engine::check`]).

use std::collections::BTreeMap;

use pmem::Media;
use pmwire_btree::{BatchError, BatchOp};
use pmwire_log::Extent;

use super::{Chain, Engine, Record, RecordOp};
use crate::error::CheckpointError;
use crate::record::{direct_extents, list_bytes, TreeValue};

/// What the WAL does to one key: its final value, or removal (borrowed
/// from the records).
type Net<'r> = BTreeMap<&'r [u8], Option<(u8, Option<u64>, &'r [Extent], Option<&'r Chain>)>>;

impl Engine {
    /// Applies every committed WAL record to the tree and truncates the
    /// WAL (staged operations are untouched). On error the WAL keeps every
    /// record; nothing acknowledged is lost.
    pub fn checkpoint<M: Media>(&mut self, media: &mut M) -> Result<(), CheckpointError> {
        // A checkpoint in slices under way ends first.
        while self.pending.is_some() {
            self.checkpoint_slice_step(media, usize::MAX)?;
        }
        if self.records.is_empty() {
            return Ok(());
        }
        // The records are set aside while the tree is written (the net
        // effect borrows them), and put back, emptied or whole, after.
        let mut records = std::mem::take(&mut self.records);
        let result = self.checkpoint_records(media, &records);
        if result.is_ok() {
            for record in &records {
                record.extents().for_each(|e| _ = self.pool.release(e.buf_idx));
            }
            records.clear();
            // Chained transactions' record lists: the truncation dropped their headers.
            for chain in std::mem::take(&mut self.wal_chains) {
                chain.iter().for_each(|e| _ = self.pool.release(e.buf_idx));
            }
        }
        self.records = records;
        result
    }

    /// Applies `records` to the tree and truncates the WAL; the caller
    /// releases the records' references after.
    fn checkpoint_records<M: Media>(&mut self, media: &mut M, records: &[Record]) -> Result<(), CheckpointError> {
        let (clear, net) = net_effect(records);
        // The tree's references on values it drops: released after the switch.
        let mut dropped: Vec<Extent> = Vec::new();
        let mut cleared: Vec<Extent> = Vec::new();
        if clear {
            let values: Vec<_> = self.tree.iter(media).map(|(_, v)| v).collect();
            for value in values {
                cleared.extend(self.decode_tree_value(media, &value).expect("tree value decodes").1);
            }
        }
        let (encoded, taken) = self.encode_net(media, net)?;
        let ops: Vec<BatchOp> = encoded
            .iter()
            .map(|(key, value)| match value {
                Some(value) => BatchOp::Put { key, value },
                None => BatchOp::Delete { key },
            })
            .collect();
        self.apply_in_batches(media, clear, &ops, &taken, cleared, &mut dropped)?;
        // Planted bug only: take back the references dropped early, so the
        // counts below come out as the correct code's.
        for buf_idx in std::mem::take(&mut self.early) {
            self.pool.reclaim(buf_idx);
        }
        self.early_keys.clear();
        let next = self.wal.next_index();
        self.wal.truncate(media, next).expect("truncate to the tail");
        dropped.iter().for_each(|e| _ = self.pool.release(e.buf_idx));
        self.stats.checkpoints += 1;
        Ok(())
    }

    /// Each key's final state as tree bytes, with the references the tree
    /// takes for it (all released again if the pool runs out).
    #[allow(clippy::type_complexity)]
    fn encode_net<'r, M: Media>(
        &mut self,
        media: &mut M,
        net: Net<'r>,
    ) -> Result<(Vec<(&'r [u8], Option<Vec<u8>>)>, Vec<Vec<Extent>>), CheckpointError> {
        let mut encoded: Vec<(&[u8], Option<Vec<u8>>)> = Vec::with_capacity(net.len());
        let mut taken: Vec<Vec<Extent>> = Vec::with_capacity(net.len());
        for (key, value) in net {
            match value {
                Some((kind, deadline, extents, chain)) => match self.tree_value(media, kind, deadline, extents, chain) {
                    Some((bytes, refs)) => {
                        encoded.push((key, Some(bytes)));
                        taken.push(refs);
                    }
                    None => {
                        taken.iter().flatten().for_each(|e| _ = self.pool.release(e.buf_idx));
                        return Err(CheckpointError::PoolFull);
                    }
                },
                None => {
                    encoded.push((key, None));
                    taken.push(Vec::new());
                }
            }
        }
        Ok((encoded, taken))
    }

    /// One step of a checkpoint in slices: starts one over the committed
    /// records if none is under way (or, if they clear the tree, runs it
    /// whole), applies up to `budget` of its tree operations, and ends it
    /// once all are in. On error the checkpoint is dropped with every
    /// reference it held, and the WAL keeps every record.
    pub(super) fn checkpoint_slice_step<M: Media>(&mut self, media: &mut M, budget: usize) -> Result<(), CheckpointError> {
        let mut pending = match self.pending.take() {
            Some(pending) => pending,
            None if self.records.is_empty() => return Ok(()),
            None => {
                let records = std::mem::take(&mut self.records);
                let (clear, net) = net_effect(&records);
                let started = if clear {
                    None
                } else {
                    match self.encode_net(media, net) {
                        Ok((encoded, taken)) => Some(Pending {
                            records: records.len(),
                            chains: self.wal_chains.len(),
                            wal_next: self.wal.next_index(),
                            ops: encoded.into_iter().map(|(k, v)| (k.to_vec(), v)).collect(),
                            taken,
                            next: 0,
                            dropped: Vec::new(),
                        }),
                        Err(error) => {
                            self.records = records;
                            return Err(error);
                        }
                    }
                };
                self.records = records;
                match started {
                    Some(pending) => pending,
                    // A clear: whole, as before slices.
                    None => return self.checkpoint(media),
                }
            }
        };
        let end = pending.next.saturating_add(budget.max(1)).min(pending.ops.len());
        let ops: Vec<BatchOp> = pending.ops[pending.next..end]
            .iter()
            .map(|(key, value)| match value {
                Some(value) => BatchOp::Put { key, value },
                None => BatchOp::Delete { key },
            })
            .collect();
        let applied = self.apply_in_batches(media, false, &ops, &pending.taken[pending.next..end], Vec::new(), &mut pending.dropped);
        drop(ops);
        if let Err(error) = applied {
            // `apply_in_batches` released this slice's unapplied references
            // and every dropped one; the later slices' are released here.
            pending.taken[end..].iter().flatten().for_each(|e| _ = self.pool.release(e.buf_idx));
            return Err(error);
        }
        pending.next = end;
        self.stats.checkpoint_slices += 1;
        if pending.next < pending.ops.len() {
            self.pending = Some(pending);
            return Ok(());
        }
        self.finish_pending(media, pending);
        Ok(())
    }

    /// The last slice is in: truncates the WAL to where the checkpoint
    /// began, then releases what it dropped and what its records held.
    fn finish_pending<M: Media>(&mut self, media: &mut M, pending: Pending) {
        for buf_idx in std::mem::take(&mut self.early) {
            self.pool.reclaim(buf_idx);
        }
        self.early_keys.clear();
        let to = if self.faults.truncate_to_tail { self.wal.next_index() } else { pending.wal_next };
        self.wal.truncate(media, to).expect("truncate to a committed record's end");
        pending.dropped.iter().for_each(|e| _ = self.pool.release(e.buf_idx));
        for record in self.records.drain(..pending.records) {
            record.extents().for_each(|e| _ = self.pool.release(e.buf_idx));
        }
        for chain in self.wal_chains.drain(..pending.chains) {
            chain.iter().for_each(|e| _ = self.pool.release(e.buf_idx));
        }
        self.stats.checkpoints += 1;
    }

    /// The tree's bytes for a value, with the references the tree takes
    /// (an extent list is written to the arena, durable at the tree's drain).
    fn tree_value<M: Media>(
        &mut self,
        media: &mut M,
        kind: u8,
        deadline: Option<u64>,
        extents: &[Extent],
        chain: Option<&Chain>,
    ) -> Option<(Vec<u8>, Vec<Extent>)> {
        let mut refs = extents.to_vec();
        let value = if let Some(chain) = chain {
            // The record's chain, immutable, is named by the tree too.
            refs.extend_from_slice(chain);
            chain.iter().for_each(|e| self.pool.retain(e.buf_idx));
            TreeValue::Chain { kind, deadline, head: chain[0] }
        } else if extents.len() <= direct_extents(deadline.is_some()) {
            TreeValue::Direct { kind, deadline, extents: extents.to_vec() }
        } else {
            let list = self.copy_in(media, &list_bytes(extents), true)?[0];
            refs.push(list);
            TreeValue::Indirect { kind, deadline, list }
        };
        extents.iter().for_each(|e| self.pool.retain(e.buf_idx));
        Some((value.encode(), refs))
    }

    /// Applies `ops` with as few root switches as the free nodes allow:
    /// all at once, else halves, down to one operation per batch.
    fn apply_in_batches<M: Media>(
        &mut self,
        media: &mut M,
        clear: bool,
        ops: &[BatchOp],
        taken: &[Vec<Extent>],
        mut cleared: Vec<Extent>,
        dropped: &mut Vec<Extent>,
    ) -> Result<(), CheckpointError> {
        let (mut start, mut chunk, mut clear_pending) = (0, ops.len().max(1), clear);
        while start < ops.len() || clear_pending {
            let end = (start + chunk).min(ops.len());
            match self.tree.apply_batch(media, clear_pending, &ops[start..end]) {
                Ok(previous) => {
                    for value in previous.into_iter().flatten() {
                        dropped.extend(self.decode_tree_value(media, &value).expect("tree value decodes").1);
                    }
                    self.stats.tree_batches += 1;
                    dropped.append(&mut cleared);
                    (start, clear_pending) = (end, false);
                }
                Err(BatchError::Full { .. }) if end - start > 1 => chunk = (end - start) / 2,
                Err(error) => {
                    taken[start..].iter().flatten().for_each(|e| _ = self.pool.release(e.buf_idx));
                    // The batches that did switch dropped the tree's
                    // references on their old values.
                    dropped.iter().for_each(|e| _ = self.pool.release(e.buf_idx));
                    return Err(CheckpointError::TreeFull(error.to_string()));
                }
            }
        }
        Ok(())
    }
}

/// A checkpoint in slices under way ([`Engine::set_checkpoint_slice`]).
pub(super) struct Pending {
    /// The committed records it covers: the engine's first `records`.
    records: usize,
    /// The chained transactions' record lists it covers: the first `chains`.
    chains: usize,
    /// The WAL's next index when it began: where it truncates.
    wal_next: u64,
    /// Each covered key's final state as a tree operation, in key order
    /// (owned: commits go on while it runs).
    ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// The references the tree takes for each operation's value.
    taken: Vec<Vec<Extent>>,
    /// Operations applied so far.
    next: usize,
    /// The tree's references on the values the applied slices replaced,
    /// released at the end.
    dropped: Vec<Extent>,
}

impl Pending {
    /// The references it holds that no durable structure names: those
    /// taken for operations not yet applied, and those of replaced values.
    pub(super) fn held(&self) -> impl Iterator<Item = Extent> + '_ {
        self.taken[self.next..].iter().flatten().chain(&self.dropped).copied()
    }
}

/// Whether the records clear the tree, and each key's final state.
fn net_effect(records: &[Record]) -> (bool, Net<'_>) {
    let mut clear = false;
    let mut net = Net::new();
    for record in records {
        match &record.op {
            RecordOp::Set { kind, deadline, value, chain, .. } => {
                _ = net.insert(&record.key, Some((*kind, deadline.map(|d| d.1), &value[..], chain.as_ref())))
            }
            RecordOp::Delete { .. } => _ = net.insert(&record.key, None),
            RecordOp::Clear => {
                clear = true;
                net.clear();
            }
        }
    }
    (clear, net)
}
