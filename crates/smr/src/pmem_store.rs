//! [`PmemDurable`]: a replica's durable state ([`Durable`]) in persistent
//! memory, on one [`Media`] (`docs/FORMAT.md`, "Replica store").
//!
//! What it owns, at fixed places: a superblock (the cluster and replica
//! it belongs to, where the areas are; written last by `format`), the
//! hard state in a [`DualRecord`], the membership in two checksummed
//! slots, the Raft log in an [`AppendLog`] whose LSN is the Raft index,
//! and the last snapshot in two alternating slots.
//!
//! Invariants, kept by every method and re-established by `open`:
//! - `first_index() == snapshot index + 1 == log.head()` and
//!   `last_index() == log.next_lsn() - 1`;
//! - `terms[i]` is the term of entry `first_index() + i`, and
//!   `terms.len() == log.len()` (so [`Durable::term`] is O(1));
//! - every mutating call is durable when it returns, except
//!   [`Durable::note_commit`], which is kept in DRAM until the next
//!   hard-state store;
//! - the snapshot slot is the commit point of `compact` and
//!   `install_snapshot`: once it is durable, `open` finishes the rest
//!   (the log's prefix truncation or restart, the membership and hard
//!   state of an install), so a crash leaves the store before or after.

use std::collections::VecDeque;

use pmem::{DualRecord, Media};
use pmwire_log::{AppendError, AppendLog, LogConfig};
use raft::eraftpb::{ConfState, Entry, HardState, SnapshotMetadata};
use thiserror::Error;

use crate::snapshot::stream::BodyId;
use crate::store::{check_append, Durable, StoreError};
use format::{Origin, SnapHeader, Superblock, SuperblockError};

pub mod crash;
mod format;
#[cfg(test)]
mod tests;

pub use format::{FORMAT_VERSION, MAX_IDS};

/// Why `format` refused. Nothing was written.
#[derive(Debug, Error)]
pub enum FormatError {
    /// The log's config is unusable.
    #[error("log config: {0}")]
    Log(#[from] pmwire_log::CreateError),
    /// The media cannot hold the store.
    #[error("media of {have} B too small: the store needs at least {needed} B")]
    MediaTooSmall {
        /// Bytes needed (with an empty snapshot slot).
        needed: u64,
        /// The media's size.
        have: u64,
    },
    /// The initial membership does not fit its bounded encoding.
    #[error("membership has more than {MAX_IDS} {0}")]
    TooManyIds(&'static str),
}

/// Why `open` refused. A refused store was not written to.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum OpenError {
    /// No store here, or a `format` that did not finish.
    #[error("not a formatted replica store: {0}")]
    NotFormatted(&'static str),
    /// Written by a format version this build does not read.
    #[error("unsupported replica store version {found} (this build reads {supported})")]
    UnsupportedVersion {
        /// The version on the media.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The store belongs to another cluster.
    #[error("the store belongs to cluster {found}, not {expected}")]
    WrongCluster {
        /// The cluster asked for.
        expected: u64,
        /// The cluster on the media.
        found: u64,
    },
    /// The store belongs to another replica of the cluster.
    #[error("the store belongs to replica {found}, not {expected}")]
    WrongReplica {
        /// The replica asked for.
        expected: u64,
        /// The replica on the media.
        found: u64,
    },
    /// The store was formatted but an area holds what no crash leaves.
    #[error("replica store corrupt: {0}")]
    Corrupt(String),
}

/// Planted bugs for the crash checker's canary. Never set outside tests.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreFaults {
    /// A conflicting suffix is dropped with stores that are never flushed
    /// nor drained: the truncation is not durable before the new entries land.
    pub unflushed_suffix_truncation: bool,
    /// Appended entries are left in the caches until the next hard state
    /// is durable: the hard state (its commit) lands before the entries
    /// it covers.
    pub hard_state_before_entries: bool,
    /// A hard state whose vote changed is stored without a flush: the
    /// vote may never reach the media.
    pub unflushed_vote: bool,
    /// A staged chunk's progress record is written with no drain after
    /// its bytes: the record may claim bytes the media never got.
    pub staging_record_before_data: bool,
    /// A staging area is installed without reading its bytes back
    /// against the body's checksum.
    pub unverified_staging: bool,
}

/// The membership as last stored, and which slot holds it.
#[derive(Clone, Debug)]
struct ConfSlots {
    newest: usize,
    seq: u64,
    /// The log index this membership is current from (a snapshot's index,
    /// or the last index when it was stored).
    as_of: u64,
    conf: ConfState,
}

/// A valid snapshot, and which slot holds it (its data stays on the media).
#[derive(Clone, Debug)]
struct Snap {
    slot: usize,
    header: SnapHeader,
}

impl Snap {
    fn body(&self) -> BodyId {
        let h = &self.header;
        BodyId { index: h.index, term: h.term, len: h.data_len, crc: h.data_crc }
    }
}

/// The body being received into the staging area (the slot not holding
/// the newest snapshot): the bytes of it held durably, and whether all of
/// them were read back and checked.
#[derive(Clone, Copy, Debug)]
struct Staging {
    body: BodyId,
    held: u64,
    verified: bool,
    /// The sequence of the record that holds it.
    seq: u64,
}

/// Bytes read from the media at a time to check a snapshot's data.
const CHECK_PIECE_BYTES: u64 = 1 << 20;

/// A replica's durable state in persistent memory (see the module docs).
pub struct PmemDurable<M: Media> {
    media: M,
    sb: Superblock,
    hard_record: DualRecord,
    hard: HardState,
    conf: ConfSlots,
    snap: Snap,
    /// The older valid snapshot in the other slot, while it lasts (a
    /// stream to a peer may still be reading it).
    prev: Option<Snap>,
    staging: Option<Staging>,
    /// A compaction's record being written in parts into the other slot:
    /// bytes written, and their data checksum so far.
    parts: Option<(u64, u32)>,
    log: AppendLog,
    terms: VecDeque<u64>,
    faults: StoreFaults,
    /// Planted (`hard_state_before_entries`): appended entries not yet
    /// flushed.
    owed_log_flush: bool,
}

impl<M: Media> PmemDurable<M> {
    /// Media bytes a store needs for a log of `log` and snapshots of up
    /// to `snapshot_data_bytes` (`log` must pass [`LogConfig::validate`]).
    pub fn required_size(log: &LogConfig, snapshot_data_bytes: u64) -> u64 {
        let slot = (format::SNAP_HEADER_BYTES + snapshot_data_bytes).next_multiple_of(format::AREA_ALIGN);
        snap_area_at(AppendLog::required_size(log)) + 2 * slot
    }

    /// Formats a new store on `media` for replica `replica_id` of cluster
    /// `cluster_id` with membership `voters`: empty log (first index 1),
    /// hard state zero, an empty snapshot at index 0. The snapshot slots
    /// share what the log leaves of the media. The superblock is written
    /// last, after clearing any old one, so a format a crash interrupted
    /// is refused by `open` ([`OpenError::NotFormatted`]).
    pub fn format(media: M, cluster_id: u64, replica_id: u64, voters: &[u64], log: LogConfig) -> Result<Self, FormatError> {
        let mut media = media;
        log.validate()?;
        let conf = ConfState { voters: voters.to_vec(), ..Default::default() };
        let conf_block = format::encode_conf(&conf).map_err(FormatError::TooManyIds)?;
        let log_bytes = AppendLog::required_size(&log);
        let snap_at = snap_area_at(log_bytes);
        let needed = snap_at + 2 * format::SNAP_HEADER_BYTES;
        if media.len() < needed {
            return Err(FormatError::MediaTooSmall { needed, have: media.len() });
        }
        let snap_slot_bytes = ((media.len() - snap_at) / 2) / format::AREA_ALIGN * format::AREA_ALIGN;
        let sb = Superblock { cluster: cluster_id, replica: replica_id, log_bytes, snap_at, snap_slot_bytes };
        media.write(0, &[0; format::SUPERBLOCK_BYTES]);
        media.persist(0, format::SUPERBLOCK_BYTES as u64);
        let hard = format::encode_hard_state(0, 0, 0);
        DualRecord::format(&mut media, format::HARD_STATE_AT, &hard).expect("the hard state's place is fixed and aligned");
        media.write(format::CONF_AT, &format::encode_conf_slot(1, 0, &conf_block));
        media.write(format::CONF_AT + format::CONF_SLOT_BYTES, &[0; format::CONF_SLOT_BYTES as usize]);
        media.flush(format::CONF_AT, 2 * format::CONF_SLOT_BYTES);
        let empty = SnapHeader { seq: 1, index: 0, term: 0, data_len: 0, data_crc: format::snap_data_crc(&[]), origin: Origin::Compact, conf };
        media.write(snap_at, &format::encode_snap_header(&empty, &conf_block));
        media.write(snap_at + format::STAGING_AT, &[0; 2 * format::STAGING_RECORD_BYTES]);
        media.write(snap_at + snap_slot_bytes, &[0; format::SNAP_HEADER_BYTES as usize]);
        media.flush(snap_at, format::SNAP_HEADER_BYTES);
        media.flush(snap_at + snap_slot_bytes, format::SNAP_HEADER_BYTES);
        media.drain();
        AppendLog::create_at(&mut media, format::LOG_AT, log, 1)?;
        media.write(0, &format::encode_superblock(&sb));
        media.persist(0, format::SUPERBLOCK_BYTES as u64);
        Ok(Self::open(media, cluster_id, replica_id).expect("a store just formatted opens"))
    }

    /// Recovers the store on `media`, which must belong to replica
    /// `replica` of cluster `cluster`, and finishes the snapshot
    /// operation a crash interrupted (so `open` may write to the media).
    pub fn open(media: M, cluster: u64, replica: u64) -> Result<Self, OpenError> {
        Self::open_with_faults(media, cluster, replica, StoreFaults::default())
    }

    /// `open` with planted bugs (tests only).
    #[doc(hidden)]
    pub fn open_with_faults(media: M, cluster: u64, replica: u64, faults: StoreFaults) -> Result<Self, OpenError> {
        let mut media = media;
        let sb = read_superblock(&media, cluster, replica)?;
        let hard_record = DualRecord::open(&media, format::HARD_STATE_AT).map_err(|e| corrupt(format!("hard state: {e}")))?;
        let (term, vote, commit) = format::decode_hard_state(hard_record.payload()).ok_or_else(|| corrupt("hard state of the wrong length".into()))?;
        let hard = HardState { term, vote, commit, ..Default::default() };
        let conf = read_conf(&media)?;
        let (snap, prev, staging) = read_snapshots(&media, &sb)?;
        let log = AppendLog::open(&mut media, format::LOG_AT).map_err(|e| corrupt(format!("log: {e}")))?;
        if AppendLog::required_size(log.config()) != sb.log_bytes {
            return Err(corrupt(format!("the log's header describes a log of other than {} B", sb.log_bytes)));
        }
        let terms = read_terms(&media, &log)?;
        let mut store = PmemDurable { media, sb, hard_record, hard, conf, snap, prev, staging, parts: None, log, terms, faults, owed_log_flush: false };
        store.finish_interrupted()?;
        assert_eq!(store.log.head(), store.snap.header.index + 1, "the log starts right after the snapshot");
        assert_eq!(store.terms.len() as u64, store.log.len(), "a term for every entry");
        Ok(store)
    }

    /// Finishes what a crash after the snapshot slot (the commit point)
    /// left undone: a compaction's prefix truncation; an install's log
    /// restart, membership and hard state. Idempotent.
    fn finish_interrupted(&mut self) -> Result<(), OpenError> {
        let (index, term) = (self.snap.header.index, self.snap.header.term);
        if self.log.head() > index + 1 {
            return Err(corrupt(format!("the log starts at {} after the snapshot at {index}", self.log.head())));
        }
        match self.snap.header.origin {
            Origin::Compact if self.log.head() <= index => {
                if self.log_term(index) != Some(term) {
                    return Err(corrupt(format!("compacted at {index} (term {term}) but the log does not hold it")));
                }
                let dropped = (index + 1 - self.log.head()) as usize;
                self.log.truncate(&mut self.media, index + 1).expect("index is held");
                self.terms.drain(..dropped);
            }
            Origin::Compact => {}
            Origin::Install => {
                if self.log.head() <= index {
                    self.log.restart_at(&mut self.media, index + 1).map_err(|e| corrupt(format!("restart: {e}")))?;
                    self.terms.clear();
                }
                if self.conf.as_of < index {
                    let conf = self.snap.header.conf.clone();
                    self.store_conf(&conf, index).map_err(|e| corrupt(e.to_string()))?;
                }
                if self.hard.commit < index || self.hard.term < term {
                    let mut hs = self.hard.clone();
                    hs.commit = hs.commit.max(index);
                    hs.term = hs.term.max(term);
                    self.set_hard_state(&hs).map_err(|e| corrupt(e.to_string()))?;
                }
            }
        }
        Ok(())
    }

    /// The media (tests: crash images, inspection).
    pub fn media(&self) -> &M {
        &self.media
    }

    /// The media, mutable, for a harness that takes a traced medium's
    /// trace as it runs (the simulation). Writing through it bypasses
    /// the store.
    #[doc(hidden)]
    pub fn media_mut(&mut self) -> &mut M {
        &mut self.media
    }

    /// Gives the media back (to reopen it).
    pub fn into_media(self) -> M {
        self.media
    }

    /// The largest snapshot the store takes.
    pub fn snapshot_capacity(&self) -> u64 {
        self.sb.snap_slot_bytes - format::SNAP_HEADER_BYTES
    }

    /// The log, for its free space (a replica compacts before it fills).
    pub fn log(&self) -> &AppendLog {
        &self.log
    }

    /// The term of retained entry `index`, from the cache.
    fn log_term(&self, index: u64) -> Option<u64> {
        let at = index.checked_sub(self.log.head())?;
        self.terms.get(usize::try_from(at).ok()?).copied()
    }
}

impl<M: Media> PmemDurable<M> {
    /// Durably stores `conf` as current from index `as_of` in the slot not
    /// holding the newest membership (one persist).
    fn store_conf(&mut self, conf: &ConfState, as_of: u64) -> Result<(), StoreError> {
        let block = format::encode_conf(conf).map_err(|list| StoreError::Media(format!("membership has more than {MAX_IDS} {list}")))?;
        let seq = self.conf.seq.checked_add(1).ok_or_else(|| StoreError::Media("membership sequence exhausted".into()))?;
        let target = 1 - self.conf.newest;
        let at = format::CONF_AT + target as u64 * format::CONF_SLOT_BYTES;
        self.media.write(at, &format::encode_conf_slot(seq, as_of, &block));
        self.media.persist(at, format::CONF_SLOT_BYTES);
        self.conf = ConfSlots { newest: target, seq, as_of, conf: conf.clone() };
        Ok(())
    }

    /// Durably writes a snapshot into the slot not holding the newest one:
    /// data and header, one drain (the header's CRC and the data's CRC
    /// make a torn slot invalid, and the newest slot is never touched).
    /// Checks everything before writing anything.
    fn store_snapshot(&mut self, meta: &SnapshotMetadata, data: &[u8], origin: Origin) -> Result<(), StoreError> {
        let max = self.snapshot_capacity();
        if data.len() as u64 > max {
            return Err(StoreError::SnapshotTooLarge { len: data.len() as u64, max });
        }
        let (header, block) = self.next_snap_header(meta, data.len() as u64, format::snap_data_crc(data), origin)?;
        let target = 1 - self.snap.slot;
        let at = self.slot_at(target);
        self.clear_staging_records(target);
        if !data.is_empty() {
            self.media.memcpy_nodrain(at + format::SNAP_HEADER_BYTES, data);
        }
        self.commit_slot(target, header, &block);
        Ok(())
    }

    /// The header of the next snapshot (`seq + 1`) at `meta` over data of
    /// `data_len` bytes with checksum `data_crc`, and its membership block.
    fn next_snap_header(&self, meta: &SnapshotMetadata, data_len: u64, data_crc: u32, origin: Origin) -> Result<(SnapHeader, [u8; format::CONF_BLOCK_BYTES]), StoreError> {
        let conf = meta.get_conf_state().clone();
        let block = format::encode_conf(&conf).map_err(|list| StoreError::Media(format!("membership has more than {MAX_IDS} {list}")))?;
        let seq = self.snap.header.seq.checked_add(1).ok_or_else(|| StoreError::Media("snapshot sequence exhausted".into()))?;
        Ok((SnapHeader { seq, index: meta.index, term: meta.term, data_len, data_crc, origin, conf }, block))
    }

    /// A compaction at `meta` names an entry the log holds, with its term,
    /// at or past the snapshot held.
    fn check_compaction(&self, meta: &SnapshotMetadata) {
        assert!(meta.index >= self.snap.header.index, "snapshots move forward");
        assert!(meta.index <= self.last_index(), "a snapshot of held entries");
        assert_eq!(self.term(meta.index), Some(meta.term), "a snapshot of held entries, with their term");
    }

    /// Drops the log's entries up to `index` (a compaction's snapshot is
    /// committed).
    fn drop_log_through(&mut self, index: u64) {
        let dropped = (index + 1 - self.log.head()) as usize;
        self.log.truncate(&mut self.media, index + 1).expect("the index is held");
        self.terms.drain(..dropped);
    }

    /// No staging record outlives the slot's reuse (it would claim bytes
    /// a snapshot's data replaces). Parts written there are gone too.
    fn clear_staging_records(&mut self, slot: usize) {
        let at = self.slot_at(slot);
        self.media.write(at + format::STAGING_AT, &[0; 2 * format::STAGING_RECORD_BYTES]);
        self.media.persist(at + format::STAGING_AT, 2 * format::STAGING_RECORD_BYTES as u64);
        self.parts = None;
    }

    /// Where slot `slot` starts.
    fn slot_at(&self, slot: usize) -> u64 {
        self.sb.snap_at + slot as u64 * self.sb.snap_slot_bytes
    }

    /// Writes `header` into `slot` (whose data is written, not yet
    /// drained), one drain: the commit point of a snapshot. The slot that
    /// held the newest snapshot keeps it as the older one; the staging
    /// area, the other slot, is gone.
    fn commit_slot(&mut self, slot: usize, header: SnapHeader, conf: &[u8; format::CONF_BLOCK_BYTES]) {
        assert_ne!(slot, self.snap.slot, "the newest slot is never written");
        let at = self.slot_at(slot);
        self.media.write(at, &format::encode_snap_header(&header, conf));
        self.media.flush(at, format::SNAP_HEADER_USED as u64);
        self.media.drain();
        let old = std::mem::replace(&mut self.snap, Snap { slot, header });
        self.prev = Some(old);
        self.staging = None;
    }

    /// Durably records that the staging area holds `held` bytes of `body`,
    /// in the record not holding the newest (one persist: a torn record
    /// leaves the other).
    fn store_staging(&mut self, body: &BodyId, held: u64) {
        let slot_at = self.slot_at(1 - self.snap.slot);
        let last = match self.staging {
            Some(s) => s.seq,
            None => read_staging(&self.media, slot_at, u64::MAX).map_or(0, |(seq, _, _)| seq),
        };
        let seq = last.checked_add(1).expect("staging sequence within u64");
        let at = slot_at + format::STAGING_AT + (seq % 2) * format::STAGING_RECORD_BYTES as u64;
        self.media.write(at, &format::encode_staging(seq, body, held));
        self.media.persist(at, format::STAGING_RECORD_BYTES as u64);
        self.staging = Some(Staging { body: *body, held, verified: false, seq });
    }

    /// The log restart, membership and hard state of an install whose
    /// snapshot slot is durable.
    fn finish_install(&mut self, meta: &SnapshotMetadata) -> Result<(), StoreError> {
        self.log.restart_at(&mut self.media, meta.index + 1).map_err(|e| StoreError::Media(format!("restart: {e}")))?;
        self.terms.clear();
        self.store_conf(meta.get_conf_state(), meta.index)?;
        let mut hs = self.hard.clone();
        hs.commit = hs.commit.max(meta.index);
        hs.term = hs.term.max(meta.term);
        self.set_hard_state(&hs)
    }

    /// Durably drops the entries from `from` on (the planted bug leaves
    /// the drop in the caches).
    fn drop_suffix(&mut self, from: u64) {
        let dropped = if self.faults.unflushed_suffix_truncation {
            self.log.truncate_suffix(&mut pmem::NoFlush(&mut self.media), from)
        } else {
            self.log.truncate_suffix(&mut self.media, from)
        };
        dropped.expect("check_append bounded `from` to the log");
        self.terms.truncate((from - self.log.head()) as usize);
    }

    /// Appends encoded entries with their terms, one drain per batch; a
    /// batch beyond the log's span limit goes in halves (a crash between
    /// them leaves a prefix, as a self-validating log may anyway).
    fn append_payloads(&mut self, payloads: &[&[u8]], terms: &[u64]) -> Result<(), StoreError> {
        assert_eq!(payloads.len(), terms.len(), "a term per entry");
        match self.log.append_batch(&mut self.media, payloads) {
            Ok(lsns) => {
                assert_eq!(lsns.end - lsns.start, payloads.len() as u64, "every entry appended");
                self.terms.extend(terms.iter().copied());
                Ok(())
            }
            Err(AppendError::BatchTooLarge { .. }) => {
                let half = payloads.len() / 2;
                self.append_payloads(&payloads[..half], &terms[..half])?;
                self.append_payloads(&payloads[half..], &terms[half..])
            }
            Err(AppendError::Full { needed, free }) => {
                let why = format!("{needed} B needed at index {}, {free} B free: compact", self.log.next_lsn());
                Err(StoreError::Full(why))
            }
            Err(e) => Err(StoreError::Media(format!("append at index {}: {e}", self.log.next_lsn()))),
        }
    }
}

impl<M: Media> Durable for PmemDurable<M> {
    fn hard_state(&self) -> HardState {
        self.hard.clone()
    }

    fn conf_state(&self) -> ConfState {
        self.conf.conf.clone()
    }

    fn snapshot(&self) -> (SnapshotMetadata, Vec<u8>) {
        let h = &self.snap.header;
        let mut data = vec![0u8; usize::try_from(h.data_len).expect("a slot fits in memory")];
        self.media.read(self.slot_at(self.snap.slot) + format::SNAP_HEADER_BYTES, &mut data);
        (self.snapshot_meta(), data)
    }

    fn snapshot_data(&self) -> std::borrow::Cow<'_, [u8]> {
        let at = self.slot_at(self.snap.slot) + format::SNAP_HEADER_BYTES;
        match self.media.bytes_at(at, self.snap.header.data_len) {
            Some(bytes) => std::borrow::Cow::Borrowed(bytes),
            None => std::borrow::Cow::Owned(self.snapshot().1),
        }
    }

    fn snapshot_meta(&self) -> SnapshotMetadata {
        let h = &self.snap.header;
        let mut meta = SnapshotMetadata { index: h.index, term: h.term, ..Default::default() };
        meta.set_conf_state(h.conf.clone());
        meta
    }

    fn snapshot_body(&self) -> BodyId {
        self.snap.body()
    }

    fn read_snapshot_body(&self, body: &BodyId, offset: u64, buf: &mut [u8]) -> bool {
        let Some(snap) = std::iter::once(&self.snap).chain(self.prev.as_ref()).find(|s| s.body() == *body) else { return false };
        if offset.checked_add(buf.len() as u64).is_none_or(|end| end > body.len) {
            return false;
        }
        self.media.read(self.slot_at(snap.slot) + format::SNAP_HEADER_BYTES + offset, buf);
        true
    }

    fn staged(&self) -> Option<(BodyId, u64)> {
        self.staging.map(|s| (s.body, s.held))
    }

    /// Bytes first (flushed, drained), then the progress record (one
    /// persist): the record never claims a byte the media does not hold.
    /// Starting over first records an empty area, so an older body's
    /// record never covers the new body's bytes.
    fn stage(&mut self, body: &BodyId, offset: u64, bytes: &[u8]) -> Result<u64, StoreError> {
        crate::store::check_stage(self.staged(), body, offset, bytes, Some(self.snapshot_capacity()))?;
        if offset == 0 {
            self.prev = None;
            self.parts = None;
            self.store_staging(body, 0);
        }
        let at = self.slot_at(1 - self.snap.slot);
        if !bytes.is_empty() {
            self.media.memcpy_nodrain(at + format::SNAP_HEADER_BYTES + offset, bytes);
        }
        if !self.faults.staging_record_before_data {
            self.media.drain();
        }
        let held = offset + bytes.len() as u64;
        self.store_staging(body, held);
        Ok(held)
    }

    /// Reads the staged bytes back against the body's checksum; a staging
    /// area that fails is emptied (durably), so the body starts over.
    fn verify_staged(&mut self, body: &BodyId) -> bool {
        let Some(s) = self.staging.filter(|s| s.body == *body && s.held == body.len) else { return false };
        if s.verified || self.faults.unverified_staging {
            return true;
        }
        let at = self.slot_at(1 - self.snap.slot) + format::SNAP_HEADER_BYTES;
        if data_crc(&self.media, at, body.len) != body.crc {
            self.store_staging(body, 0);
            return false;
        }
        self.staging = Some(Staging { verified: true, ..s });
        true
    }

    /// The staged slot's header (the commit point), then as
    /// [`Durable::install_snapshot`]: no byte of the body is copied.
    fn install_staged(&mut self, meta: &SnapshotMetadata, body: &BodyId) -> Result<(), StoreError> {
        crate::store::check_staged_meta(meta, body)?;
        if meta.index < self.snap.header.index {
            let why = format!("snapshot at {} older than the one held at {}", meta.index, self.snap.header.index);
            return Err(StoreError::Gap(why));
        }
        if !self.verify_staged(body) {
            return Err(StoreError::Media(format!("the staging area does not hold the snapshot body at index {} whole and checked", body.index)));
        }
        // `meta` names the body's index and term (checked above).
        let (header, block) = self.next_snap_header(meta, body.len, body.crc, Origin::Install)?;
        self.commit_slot(1 - self.snap.slot, header, &block);
        self.finish_install(meta)
    }

    fn first_index(&self) -> u64 {
        self.log.head()
    }

    fn last_index(&self) -> u64 {
        self.log.next_lsn() - 1
    }

    fn term(&self, index: u64) -> Option<u64> {
        if index == self.snap.header.index {
            return Some(self.snap.header.term);
        }
        self.log_term(index)
    }

    fn entry(&self, index: u64) -> Option<Entry> {
        let mut payload = Vec::new();
        if !self.log.read_into(&self.media, index, &mut payload) {
            return None;
        }
        let entry = format::decode_entry(index, &payload).expect("entries are checked by open or written by this process");
        assert_eq!(Some(entry.term), self.log_term(index), "the term cache agrees with the media");
        Some(entry)
    }

    fn append(&mut self, entries: &[Entry]) -> Result<(), StoreError> {
        let Some(first) = entries.first() else { return Ok(()) };
        check_append(self, first.index)?;
        let mut payloads = Vec::with_capacity(entries.len());
        for (k, e) in entries.iter().enumerate() {
            assert_eq!(e.index, first.index + k as u64, "appended entries are contiguous");
            let mut payload = Vec::new();
            format::encode_entry(e, &mut payload).ok_or_else(|| StoreError::Media(format!("entry {} above 4 GiB", e.index)))?;
            payloads.push(payload);
        }
        if first.index <= self.last_index() {
            self.drop_suffix(first.index);
        }
        let refs: Vec<&[u8]> = payloads.iter().map(|p| &p[..]).collect();
        let terms: Vec<u64> = entries.iter().map(|e| e.term).collect();
        if self.faults.hard_state_before_entries {
            self.owed_log_flush = true;
            return append_unflushed(self, &refs, &terms);
        }
        self.append_payloads(&refs, &terms)
    }

    fn set_hard_state(&mut self, hs: &HardState) -> Result<(), StoreError> {
        let payload = format::encode_hard_state(hs.term, hs.vote, hs.commit);
        let stored = if self.faults.unflushed_vote && hs.vote != self.hard.vote {
            self.hard_record.store(&mut pmem::NoFlush(&mut self.media), &payload)
        } else {
            self.hard_record.store(&mut self.media, &payload)
        };
        stored.map_err(|e| StoreError::Media(format!("hard state: {e}")))?;
        self.hard = hs.clone();
        if std::mem::take(&mut self.owed_log_flush) {
            self.media.persist(format::LOG_AT, self.sb.log_bytes);
        }
        Ok(())
    }

    fn note_commit(&mut self, commit: u64) {
        self.hard.commit = commit;
    }

    fn set_conf_state(&mut self, cs: &ConfState) -> Result<(), StoreError> {
        let as_of = self.last_index();
        self.store_conf(cs, as_of)
    }

    /// Snapshot slot (the commit point), log restart, membership, hard
    /// state: each durable before the next; `open` finishes the rest.
    fn install_snapshot(&mut self, meta: &SnapshotMetadata, data: &[u8]) -> Result<(), StoreError> {
        if meta.index < self.snap.header.index {
            let why = format!("snapshot at {} older than the one held at {}", meta.index, self.snap.header.index);
            return Err(StoreError::Gap(why));
        }
        self.store_snapshot(meta, data, Origin::Install)?;
        self.finish_install(meta)
    }

    /// Snapshot slot (the commit point), then the log's prefix truncation.
    fn compact(&mut self, meta: &SnapshotMetadata, data: &[u8]) -> Result<(), StoreError> {
        self.check_compaction(meta);
        self.store_snapshot(meta, data, Origin::Compact)?;
        self.drop_log_through(meta.index);
        Ok(())
    }

    fn compacts_in_parts(&self) -> bool {
        true
    }

    fn compact_part(&mut self, offset: u64, bytes: &[u8]) -> Result<(), StoreError> {
        let target = 1 - self.snap.slot;
        if offset == 0 {
            // The other slot's older snapshot goes, as with any compaction.
            self.prev = None;
            self.staging = None;
            self.clear_staging_records(target);
            self.parts = Some((0, format::snap_data_crc_start()));
        }
        let Some((written, crc)) = self.parts.filter(|&(written, _)| written == offset) else {
            return Err(StoreError::Media(format!("compaction part at {offset}: the parts written before it were discarded")));
        };
        let end = offset + bytes.len() as u64;
        let max = self.snapshot_capacity();
        if end > max {
            self.parts = None;
            return Err(StoreError::SnapshotTooLarge { len: end, max });
        }
        if !bytes.is_empty() {
            self.media.memcpy_nodrain(self.slot_at(target) + format::SNAP_HEADER_BYTES + written, bytes);
        }
        self.parts = Some((end, crc32c::crc32c_append(crc, bytes)));
        Ok(())
    }

    fn compact_parts(&mut self, meta: &SnapshotMetadata, len: u64) -> Result<(), StoreError> {
        let Some((written, data_crc)) = self.parts.take().filter(|&(written, _)| written == len) else {
            return Err(StoreError::Media(format!("compaction of {len} B in parts: the parts were discarded or are short")));
        };
        self.check_compaction(meta);
        let (header, block) = self.next_snap_header(meta, written, data_crc, Origin::Compact)?;
        self.commit_slot(1 - self.snap.slot, header, &block);
        self.drop_log_through(meta.index);
        Ok(())
    }

    fn capacity_hint(&self) -> Option<u64> {
        Some(self.snapshot_capacity().max(self.sb.log_bytes))
    }

    fn log_space(&self) -> Option<(u64, u64)> {
        Some((self.log.free_bytes(), self.log.config().capacity))
    }
}

/// Planted (`hard_state_before_entries`): appends through a medium that
/// never flushes; `set_hard_state` flushes the log after the hard state.
fn append_unflushed<M: Media>(store: &mut PmemDurable<M>, payloads: &[&[u8]], terms: &[u64]) -> Result<(), StoreError> {
    let lsns = store.log.append_batch(&mut pmem::NoFlush(&mut store.media), payloads).map_err(|e| StoreError::Media(format!("append: {e}")))?;
    assert_eq!(lsns.end - lsns.start, payloads.len() as u64, "every entry appended");
    store.terms.extend(terms.iter().copied());
    Ok(())
}

/// Where the snapshot area starts after a log of `log_bytes`.
fn snap_area_at(log_bytes: u64) -> u64 {
    (format::LOG_AT + log_bytes).next_multiple_of(format::AREA_ALIGN)
}

fn corrupt(why: String) -> OpenError {
    OpenError::Corrupt(why)
}

/// The superblock, checked against the identity asked for.
fn read_superblock<M: Media>(media: &M, cluster: u64, replica: u64) -> Result<Superblock, OpenError> {
    if media.len() < format::SUPERBLOCK_BYTES as u64 {
        return Err(OpenError::NotFormatted("media smaller than a superblock"));
    }
    let mut bytes = [0u8; format::SUPERBLOCK_BYTES];
    media.read(0, &mut bytes);
    let sb = format::decode_superblock(&bytes, media.len()).map_err(|e| match e {
        SuperblockError::NotFormatted(why) => OpenError::NotFormatted(why),
        SuperblockError::Version(found) => OpenError::UnsupportedVersion { found, supported: FORMAT_VERSION },
        SuperblockError::Impossible(why) => corrupt(format!("superblock: {why}")),
    })?;
    if sb.cluster != cluster {
        return Err(OpenError::WrongCluster { expected: cluster, found: sb.cluster });
    }
    if sb.replica != replica {
        return Err(OpenError::WrongReplica { expected: replica, found: sb.replica });
    }
    Ok(sb)
}

/// The newest valid membership slot.
fn read_conf<M: Media>(media: &M) -> Result<ConfSlots, OpenError> {
    let read = |slot: usize| {
        let mut bytes = [0u8; format::CONF_SLOT_BYTES as usize];
        media.read(format::CONF_AT + slot as u64 * format::CONF_SLOT_BYTES, &mut bytes);
        format::decode_conf_slot(&bytes).map(|(seq, as_of, conf)| ConfSlots { newest: slot, seq, as_of, conf })
    };
    newest(read(0), read(1), |c| c.seq).ok_or_else(|| corrupt("no valid membership slot".into()))?
}

/// The newest valid snapshot slot (header checksum, bounds, then data
/// checksum), the other slot's snapshot if it is valid too, else its
/// staging area if it holds one.
fn read_snapshots<M: Media>(media: &M, sb: &Superblock) -> Result<(Snap, Option<Snap>, Option<Staging>), OpenError> {
    let data_max = sb.snap_slot_bytes - format::SNAP_HEADER_BYTES;
    let header = |slot: usize| {
        let mut bytes = [0u8; format::SNAP_HEADER_USED];
        media.read(sb.snap_at + slot as u64 * sb.snap_slot_bytes, &mut bytes);
        bytes
    };
    let read = |slot: usize| {
        let at = sb.snap_at + slot as u64 * sb.snap_slot_bytes;
        let header = format::decode_snap_header(&header(slot), data_max)?;
        (data_crc(media, at + format::SNAP_HEADER_BYTES, header.data_len) == header.data_crc).then_some(Snap { slot, header })
    };
    let (a, b) = (read(0), read(1));
    let snap = newest(a.clone(), b.clone(), |s| s.header.seq).ok_or_else(|| corrupt("no valid snapshot slot".into()))??;
    let other = 1 - snap.slot;
    let prev = [a, b].into_iter().flatten().find(|s| s.slot == other);
    let staging = match prev {
        Some(_) => None,
        None => read_staging(media, sb.snap_at + other as u64 * sb.snap_slot_bytes, data_max).map(|(seq, body, held)| Staging { body, held, verified: false, seq }),
    };
    Ok((snap, prev, staging))
}

/// The newer valid staging record of the slot at `slot_at`.
fn read_staging<M: Media>(media: &M, slot_at: u64, data_max: u64) -> Option<(u64, BodyId, u64)> {
    let read = |k: u64| {
        let mut b = [0u8; format::STAGING_RECORD_BYTES];
        media.read(slot_at + format::STAGING_AT + k * format::STAGING_RECORD_BYTES as u64, &mut b);
        format::decode_staging(&b, data_max)
    };
    [read(0), read(1)].into_iter().flatten().max_by_key(|r| r.0)
}

/// The data checksum of `len` bytes at `at`, read in bounded pieces.
fn data_crc<M: Media>(media: &M, at: u64, len: u64) -> u32 {
    let mut crc = format::snap_data_crc_start();
    let mut piece = vec![0u8; len.min(CHECK_PIECE_BYTES) as usize];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(CHECK_PIECE_BYTES) as usize;
        media.read(at + done, &mut piece[..n]);
        crc = crc32c::crc32c_append(crc, &piece[..n]);
        done += n as u64;
    }
    crc
}

/// The newer of two valid slots by sequence; `None` if neither is valid;
/// `Some(Err)` if both carry the same sequence (no sequence of writes
/// leaves that).
fn newest<T>(a: Option<T>, b: Option<T>, seq: impl Fn(&T) -> u64) -> Option<Result<T, OpenError>> {
    match (a, b) {
        (None, None) => None,
        (Some(a), Some(b)) if seq(&a) == seq(&b) => Some(Err(corrupt(format!("two slots with sequence {}", seq(&a))))),
        (Some(a), Some(b)) => Some(Ok(if seq(&a) > seq(&b) { a } else { b })),
        (Some(a), None) => Some(Ok(a)),
        (None, Some(b)) => Some(Ok(b)),
    }
}

/// The term of every retained entry, each header checked (no data copied).
fn read_terms<M: Media>(media: &M, log: &AppendLog) -> Result<VecDeque<u64>, OpenError> {
    let mut terms = VecDeque::with_capacity(log.len() as usize);
    for index in log.head()..log.next_lsn() {
        let range = log.payload_range(media, index).expect("a retained entry");
        let len = range.end - range.start;
        let mut header = [0u8; format::ENTRY_HEADER_BYTES];
        let term = (len >= header.len() as u64)
            .then(|| {
                media.read(range.start, &mut header);
                format::entry_term(&header, len)
            })
            .flatten();
        terms.push_back(term.ok_or_else(|| corrupt(format!("entry {index} is not a well-formed Raft entry")))?);
    }
    Ok(terms)
}

