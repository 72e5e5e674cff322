//! Batch append: many entries, one drain ([`AppendLog::append_batch`]),
//! and the recovery scrub that makes a torn batch harmless.
//!
//! Invariants: a batch is planned whole before anything is written (every
//! entry placed, the space and the span checked), so an error writes
//! nothing; its entries are laid out exactly as the same appends one by one
//! would lay them out; a batch of two or more entries spans at most
//! [`MAX_BATCH_SPAN_BYTES`] from the tail it starts at.

use std::ops::Range;

use pmem::Media;

use super::{At, AppendLog, Tail, SCRUBBED};
use crate::config::MAX_BATCH_SPAN_BYTES;
use crate::error::AppendError;
use crate::format::ENTRY_HEADER_BYTES;
use crate::Lsn;

impl AppendLog {
    /// Appends `payloads` as consecutive entries and returns their LSNs
    /// once all are durable, with one drain for the whole batch (naive and
    /// rotating: one more for the tail that covers them all).
    ///
    /// After a crash during the call, recovery finds none of the batch
    /// (naive, rotating) or a prefix of it (self-validating); after it
    /// returned, all of it. On error nothing is written. A batch of one
    /// entry is an [`append`](Self::append); two or more must span at
    /// most [`MAX_BATCH_SPAN_BYTES`] ([`AppendError::BatchTooLarge`]).
    pub fn append_batch<M: Media>(&mut self, media: &mut M, payloads: &[&[u8]]) -> Result<Range<Lsn>, AppendError> {
        let first = self.next_lsn;
        match payloads {
            [] => return Ok(first..first),
            [one] => return self.append(media, one).map(|lsn| lsn..lsn + 1),
            _ => {}
        }
        let end = self.plan_batch(payloads)?;
        let faults = self.config.faults;
        let seed = matches!(self.tail, Tail::SelfValidating).then_some(self.seed);
        let tail_first = seed.is_none() && faults.tail_before_entry;
        if tail_first {
            self.store_tail(media, end, faults);
        }
        for payload in payloads {
            let (skip_at, placed, phys, size) = self.place(payload.len() as u64).expect("the batch was planned");
            if let Some(skip_phys) = skip_at {
                let at = self.entries + skip_phys;
                media.write_u64(at, skip_word(placed.lsn));
                media.flush(at, 8);
            }
            self.write_entry_nodrain(media, phys, placed.lsn, payload, seed);
            let next_phys = if phys + size == self.config.capacity { 0 } else { phys + size };
            self.advance(placed.pos, placed.pos + size, next_phys);
        }
        media.drain();
        if seed.is_none() && !tail_first {
            self.store_tail(media, end, faults);
        }
        assert_eq!(self.tail_pos, end, "the batch ended where it was planned to");
        Ok(first..self.next_lsn)
    }

    /// Places every entry of a batch without writing: the tail it would
    /// end at, or why it cannot be appended.
    fn plan_batch(&self, payloads: &[&[u8]]) -> Result<u64, AppendError> {
        let mut at = At { lsn: self.next_lsn, pos: self.tail_pos, phys: self.tail_phys };
        for payload in payloads {
            let (_, placed, phys, size) = self.place_at(at, payload.len() as u64)?;
            let next_phys = if phys + size == self.config.capacity { 0 } else { phys + size };
            at = At { lsn: placed.lsn + 1, pos: placed.pos + size, phys: next_phys };
        }
        let span = at.pos - self.tail_pos;
        if span > MAX_BATCH_SPAN_BYTES {
            return Err(AppendError::BatchTooLarge { span, max: MAX_BATCH_SPAN_BYTES });
        }
        Ok(at.pos)
    }

    /// Self-validating recovery: the batch in flight at the crash started
    /// at or before the recovered tail and spans at most
    /// [`MAX_BATCH_SPAN_BYTES`], so every entry it may have left past the
    /// tail has its header in `[tail, tail + MAX_BATCH_SPAN_BYTES)`; they
    /// are scrubbed like the remnant of a single append.
    pub(super) fn scrub_batch_window<M: Media>(&self, media: &mut M) {
        let free_end = self.head.pos + self.config.capacity;
        let end = self.tail_pos.saturating_add(MAX_BATCH_SPAN_BYTES).min(free_end);
        self.scrub_headers(media, self.tail_pos, end);
    }

    /// Overwrites with [`SCRUBBED`] the length/CRC word of every place an
    /// entry header could sit in the free logical range `[from, to)` (each
    /// multiple of the alignment whose 16 B header lies inside the range
    /// and the ring), then flushes and drains if it wrote anything. Only
    /// free space is written; idempotent.
    pub(super) fn scrub_headers<M: Media>(&self, media: &mut M, from: u64, to: u64) {
        let capacity = self.config.capacity;
        assert!(from >= self.tail_pos, "scrub below the tail at {from}");
        assert!(from <= to, "scrub range [{from}, {to}) reversed");
        assert!(to <= self.head.pos + capacity, "scrub past the free space to {to}");
        let align = self.config.padding.align() as u64;
        assert!(from.is_multiple_of(align), "scrub from a misaligned position {from}");
        let mut dirty = false;
        let mut pos = from;
        while pos + ENTRY_HEADER_BYTES <= to {
            let phys = pos % capacity;
            let word = self.entries + phys + 8;
            if phys + ENTRY_HEADER_BYTES <= capacity && media.read_u64(word) != SCRUBBED {
                media.write_u64(word, SCRUBBED);
                dirty = true;
            }
            pos += align;
        }
        if dirty {
            self.flush_logical(media, from, to - from);
            media.drain();
        }
    }

    /// Flushes logical range `[from, from + len)` of the entry space (one
    /// or two physical pieces; `len <= capacity`).
    fn flush_logical<M: Media>(&self, media: &mut M, from: u64, len: u64) {
        let capacity = self.config.capacity;
        assert!(len <= capacity, "flush of {len} B beyond the ring");
        let phys = from % capacity;
        let first = len.min(capacity - phys);
        if first > 0 {
            media.flush(self.entries + phys, first);
        }
        if len > first {
            media.flush(self.entries, len - first);
        }
    }
}

/// The skip word announcing that entry `lsn` starts at the next lap.
#[inline]
fn skip_word(lsn: Lsn) -> u64 {
    crate::format::SKIP_BIT | lsn
}
