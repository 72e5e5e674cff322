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
        let mut encoded: Vec<(&[u8], Option<Vec<u8>>)> = Vec::with_capacity(net.len());
        let mut taken: Vec<Vec<Extent>> = Vec::with_capacity(net.len());
        for (key, value) in net {
            match value {
                Some((kind, deadline, extents, chain)) => {
                    match self.tree_value(media, kind, deadline, extents, chain) {
                        Some((bytes, refs)) => {
                            encoded.push((key, Some(bytes)));
                            taken.push(refs);
                        }
                        None => {
                            taken.iter().flatten().for_each(|e| _ = self.pool.release(e.buf_idx));
                            return Err(CheckpointError::PoolFull);
                        }
                    }
                }
                None => {
                    encoded.push((key, None));
                    taken.push(Vec::new());
                }
            }
        }
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
