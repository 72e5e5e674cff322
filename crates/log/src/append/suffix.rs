//! Suffix truncation ([`AppendLog::truncate_suffix`]: a Raft follower
//! drops its conflicting entries) and restarting the log at another LSN
//! ([`AppendLog::restart_at`]: after a snapshot is installed).
//!
//! Invariants: a suffix truncation is durable when it returns, for every
//! tail; it never moves the head; the naive and rotating tails are lowered
//! with one failure-atomic store (the rotating tail is an XOR register,
//! which takes any value); a self-validating log, which has no tail word,
//! persists a truncation record first, then scrubs the dropped entries'
//! headers, then clears the record, so that no dropped entry can validate
//! again, even when a new entry with its LSN is later torn at its place.
//! Recovery finishes a truncation whose record it finds
//! (`docs/FORMAT.md`, "Suffix truncation").

use pmem::Media;

use super::{AppendLog, Tail, MAX_LSN, SCRUBBED, TRUNCATION_RECORD};
use crate::error::{OpenError, RestartError, SuffixTruncateError};
use crate::format::{decode_truncation, encode_truncation, Head, Truncation, TRUNCATION_RECORD_BYTES};

/// Offset, in the truncation record, of the word holding its CRC.
const TRUNCATION_CRC_WORD: u64 = 32;
use crate::Lsn;

impl AppendLog {
    /// Durably drops every entry with LSN `>= from`; the next append gets
    /// `from`. Dropping from `next_lsn` does nothing. After a crash during
    /// the call, recovery finds the log as it was or truncated, never
    /// anything between; after it returned, no dropped entry comes back.
    pub fn truncate_suffix<M: Media>(&mut self, media: &mut M, from: Lsn) -> Result<(), SuffixTruncateError> {
        if from < self.head.lsn {
            return Err(SuffixTruncateError::BelowHead { from, head: self.head.lsn });
        }
        if from > self.next_lsn {
            return Err(SuffixTruncateError::BeyondTail { from, next: self.next_lsn });
        }
        if from == self.next_lsn {
            return Ok(());
        }
        let keep_pos = self.end_before(media, from);
        let mut faults = self.config.faults;
        if matches!(self.tail, Tail::SelfValidating) {
            let truncation = Truncation { keep_lsn: from, keep_pos, end_pos: self.tail_pos };
            self.drop_self_validating(media, truncation);
        } else {
            faults.skip_tail_flush = faults.suffix_not_durable;
            self.store_tail(media, keep_pos, faults);
        }
        self.index.truncate((from - self.head.lsn) as usize);
        self.next_lsn = from;
        self.tail_pos = keep_pos;
        self.tail_phys = keep_pos % self.config.capacity;
        Ok(())
    }

    /// Durably empties the log so that the next append gets `first`
    /// (Raft: after installing a snapshot whose last index is `first - 1`).
    /// `first` may lie past the end (one head-slot persist) or inside the
    /// log (a suffix truncation from `first`, then the head-slot persist;
    /// a crash between leaves the log truncated but not yet emptied).
    pub fn restart_at<M: Media>(&mut self, media: &mut M, first: Lsn) -> Result<(), RestartError> {
        if first < self.head.lsn {
            return Err(RestartError::BelowHead { first, head: self.head.lsn });
        }
        if first >= MAX_LSN {
            return Err(RestartError::TooLarge { first });
        }
        if first < self.next_lsn {
            self.truncate_suffix(media, first).expect("bounds checked above");
        }
        if first > self.head.lsn {
            self.write_head(media, Head { lsn: first, pos: self.tail_pos });
            self.next_lsn = first;
        }
        assert!(self.is_empty(), "a restarted log is empty");
        assert_eq!(self.next_lsn, first, "a restarted log appends `first` next");
        Ok(())
    }

    /// The logical position right after entry `lsn - 1` (the head's
    /// position for the head): where the tail was before `lsn` was
    /// appended. Entry `lsn` itself may start a lap later, after a skip word.
    fn end_before<M: Media>(&self, media: &M, lsn: Lsn) -> u64 {
        assert!(lsn >= self.head.lsn, "no entry before the head is retained");
        if lsn == self.head.lsn {
            return self.head.pos;
        }
        let previous = self.placed(media, lsn - 1).expect("a retained entry");
        previous.pos + self.config.entry_size(previous.len)
    }

    /// Self-validating suffix truncation: record, scrub, clear, each durable
    /// before the next (unless a planted fault merges or skips a step).
    fn drop_self_validating<M: Media>(&mut self, media: &mut M, truncation: Truncation) {
        let faults = self.config.faults;
        let at = self.base + TRUNCATION_RECORD;
        media.write(at, &encode_truncation(truncation, self.seed));
        media.flush(at, TRUNCATION_RECORD_BYTES as u64);
        if !faults.scrub_before_record {
            media.drain();
        }
        let first = (truncation.keep_lsn - self.head.lsn) as usize;
        for index in first..self.index.len() {
            let word = self.entries + self.index[index] % self.config.capacity + 8;
            media.write_u64(word, SCRUBBED);
            if !faults.suffix_not_durable {
                media.flush(word, 8);
            }
        }
        if !faults.suffix_not_durable {
            media.drain();
        }
        clear_truncation(media, at);
    }

    /// The truncation record of a self-validating log, if one is in
    /// progress, checked against the head (`Corrupt` if no truncation
    /// could have written it).
    pub(super) fn pending_truncation<M: Media>(&self, media: &M) -> Result<Option<Truncation>, OpenError> {
        let mut bytes = [0u8; TRUNCATION_RECORD_BYTES];
        media.read(self.base + TRUNCATION_RECORD, &mut bytes);
        let Some(t) = decode_truncation(&bytes, self.seed) else { return Ok(None) };
        let corrupt = |why: &str| Err(OpenError::Corrupt { pos: t.keep_pos, lsn: t.keep_lsn, why: why.into() });
        let align = self.config.padding.align() as u64;
        if t.keep_lsn < self.head.lsn || t.keep_lsn >= MAX_LSN {
            return corrupt("truncation record drops from outside [head, 2^63 - 1)");
        }
        if t.keep_pos < self.head.pos || t.end_pos < t.keep_pos {
            return corrupt("truncation record positions out of order");
        }
        if t.end_pos - self.head.pos > self.config.capacity {
            return corrupt("truncation record ends beyond the ring");
        }
        if !t.keep_pos.is_multiple_of(align) || !t.end_pos.is_multiple_of(align) {
            return corrupt("truncation record positions misaligned");
        }
        Ok(Some(t))
    }

    /// Recovery of a truncation in progress: the scan stopped at its
    /// first dropped LSN, exactly at its position (the kept entries were
    /// durable before the record was written); the dropped range is
    /// scrubbed whole, since a crash may have left any subset of the
    /// per-entry scrub, then the record is cleared.
    pub(super) fn finish_truncation<M: Media>(&mut self, media: &mut M, t: Truncation) -> Result<(), OpenError> {
        if self.next_lsn != t.keep_lsn || self.tail_pos != t.keep_pos {
            let why = format!("kept entries end at LSN {} position {}", self.next_lsn, self.tail_pos);
            return Err(OpenError::Corrupt { pos: t.keep_pos, lsn: t.keep_lsn, why });
        }
        self.scrub_headers(media, t.keep_pos, t.end_pos);
        clear_truncation(media, self.base + TRUNCATION_RECORD);
        Ok(())
    }
}

/// Durably clears the truncation record at `at` by overwriting its CRC
/// word (CRC and reserved half) with all ones: the reserved half is then
/// non-zero, so the record is invalid, and stays so while the next
/// truncation's record is written over it, whatever subset of its words a
/// crash lets through: only that record's own CRC word validates again.
/// (Clearing the magic would not do: the next record rewrites the same
/// magic, and with the old fields and CRC still there, the old record
/// would come back, as the crash checker found.)
fn clear_truncation<M: Media>(media: &mut M, at: u64) {
    media.persist_u64(at + TRUNCATION_CRC_WORD, u64::MAX);
}
