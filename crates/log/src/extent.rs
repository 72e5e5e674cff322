//! [`ExtentLog`]: PASTE's log of 8-byte buffer extents (seed 001 §3.2),
//! where every record is one failure-atomic aligned store.
//!
//! Slot `n` (a logical index that never wraps) lives at physical slot
//! `n % capacity`. Each media word carries, besides the extent, a lap tag
//! `(n / capacity) % 3 + 1` (never 0, so zeroed slots are invalid) and a
//! continuation bit (set on every word of a group but the last).
//! Invariants:
//! - `head <= tail <= head + capacity`;
//! - `capacity <= MAX_CAPACITY_EXTENTS` and, at `open`, `head <= MAX_INDEX`
//!   (the head word carries no checksum, so `open` checks it): no index
//!   computed from them (`head + capacity + MAX_GROUP`) can overflow;
//! - slots `head .. tail` hold complete groups with their lap's tag;
//! - after `open` returns, no slot in `tail .. tail + MAX_GROUP` (within
//!   the free space) carries its own lap's tag: the scrub removed any
//!   remnant of a torn group, so later appends cannot complete it.

use pmem::Media;

use crate::append::check_create_bounds;
use crate::config::Faults;
use crate::error::{AppendError, CreateError, OpenError, TruncateError};
use crate::format::{self, get_u64, put_u32, put_u64, HEADER_BLOCK_BYTES, HEADER_LINE_BYTES};

/// The longest group `append_group` takes; also the scrub window of `open`.
pub const MAX_GROUP: usize = 1024;
/// The largest `offset` an on-media extent can carry (13 bits).
pub const MAX_OFFSET: u16 = (1 << 13) - 1;
/// The most slots an extent log may have (2^60: its size, `8 * capacity`
/// plus the header block, fits in a `u64`).
pub const MAX_CAPACITY_EXTENTS: u64 = 1 << 60;
/// The largest head index `open` accepts: 2^62, beyond any number of
/// appends, and low enough that `head + capacity + MAX_GROUP` fits in a `u64`.
const MAX_INDEX: u64 = 1 << 62;
/// Offset (from `base`) of the persisted head index.
const HEAD_WORD: u64 = 64;
const TAG_SHIFT: u32 = 30;
const CONT_BIT: u64 = 1 << 29;
const FLAG_MASK: u64 = 0b111 << 29;

/// A byte range inside a numbered packet buffer (PASTE's 8-byte extent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Extent {
    /// Index of the buffer in the pool.
    pub buf_idx: u32,
    /// Offset of the data inside the buffer (at most [`MAX_OFFSET`] in a log).
    pub offset: u16,
    /// Bytes of data.
    pub len: u16,
}

impl Extent {
    /// PASTE's packing: `buf_idx << 32 | offset << 16 | len`.
    pub fn pack(self) -> u64 {
        (self.buf_idx as u64) << 32 | (self.offset as u64) << 16 | self.len as u64
    }

    /// The inverse of [`Extent::pack`].
    pub fn unpack(word: u64) -> Extent {
        Extent { buf_idx: (word >> 32) as u32, offset: (word >> 16) as u16, len: word as u16 }
    }
}

/// A circular, durable log of extents (see the module docs).
#[derive(Debug)]
pub struct ExtentLog {
    base: u64,
    capacity: u64,
    head: u64,
    tail: u64,
}

impl ExtentLog {
    /// Media bytes an extent log of `capacity_extents` slots needs at
    /// `base`. `capacity_extents` must be at most [`MAX_CAPACITY_EXTENTS`]
    /// (asserted: callers check sizes they were given first).
    pub fn required_size(capacity_extents: u64) -> u64 {
        assert!(capacity_extents <= MAX_CAPACITY_EXTENTS, "extent log of {capacity_extents} slots");
        HEADER_BLOCK_BYTES + capacity_extents * 8
    }

    /// Formats an empty log at `base` (a multiple of 256); zeroes every slot.
    pub fn create<M: Media>(media: &mut M, base: u64, capacity_extents: u64) -> Result<ExtentLog, CreateError> {
        if capacity_extents == 0 || capacity_extents > MAX_CAPACITY_EXTENTS {
            return Err(CreateError::BadCapacity { capacity: capacity_extents, why: "need 1 ..= 2^60 extents" });
        }
        check_create_bounds(media, base, ExtentLog::required_size(capacity_extents))?;
        zero_nodrain(media, base + HEADER_BLOCK_BYTES, capacity_extents * 8);
        media.write_u64(base + HEAD_WORD, 0);
        media.flush(base + HEAD_WORD, 8);
        media.drain();
        let mut line = [0u8; HEADER_LINE_BYTES];
        put_u64(&mut line, 0, format::EXTENT_MAGIC);
        put_u32(&mut line, 8, format::EXTENT_FORMAT_VERSION);
        put_u64(&mut line, 16, capacity_extents);
        format::seal_header(&mut line);
        media.write(base, &line);
        media.persist(base, HEADER_LINE_BYTES as u64);
        Ok(ExtentLog { base, capacity: capacity_extents, head: 0, tail: 0 })
    }

    /// Recovers the log at `base`: the tail is the end of the last complete
    /// group after the head; remnants of a torn group are then scrubbed.
    pub fn open<M: Media>(media: &mut M, base: u64) -> Result<ExtentLog, OpenError> {
        ExtentLog::open_with_faults(media, base, Faults::default())
    }

    /// `open` with planted recovery bugs (tests only; only `skip_scrub` applies).
    #[doc(hidden)]
    pub fn open_with_faults<M: Media>(media: &mut M, base: u64, faults: Faults) -> Result<ExtentLog, OpenError> {
        let version = format::EXTENT_FORMAT_VERSION;
        let line = format::read_header(media, base, format::EXTENT_MAGIC, "pmwire extent log", version)?;
        let capacity = get_u64(&line, 16);
        if capacity == 0 || capacity > MAX_CAPACITY_EXTENTS {
            return Err(OpenError::BadConfig { why: format!("capacity of {capacity} extents") });
        }
        let needed = ExtentLog::required_size(capacity);
        if base.checked_add(needed).is_none_or(|end| end > media.len()) {
            return Err(OpenError::MediaTooSmall { base, have: media.len() });
        }
        let head = media.read_u64(base + HEAD_WORD);
        if head > MAX_INDEX {
            return Err(OpenError::Corrupt { pos: head, lsn: head, why: "head index above 2^62".into() });
        }
        let mut log = ExtentLog { base, capacity, head, tail: head };
        log.tail = log.scan(media);
        if !faults.skip_scrub {
            log.scrub(media);
        }
        Ok(log)
    }

    /// Appends one extent with one atomic 8 B persist; returns its index.
    #[inline]
    pub fn append<M: Media>(&mut self, media: &mut M, extent: Extent) -> Result<u64, AppendError> {
        check_extent(extent)?;
        self.check_free(1)?;
        let index = self.tail;
        media.persist_u64(self.slot(index), self.word(index, extent, false));
        self.tail += 1;
        Ok(index)
    }

    /// Appends `extents` as one group with one drain: after a crash the
    /// group is recovered whole or not at all. Returns the first index.
    pub fn append_group<M: Media>(&mut self, media: &mut M, extents: &[Extent]) -> Result<u64, AppendError> {
        if extents.is_empty() || extents.len() > MAX_GROUP {
            return Err(AppendError::BadGroup { len: extents.len(), max: MAX_GROUP });
        }
        extents.iter().try_for_each(|&e| check_extent(e))?;
        self.check_free(extents.len() as u64)?;
        let first = self.tail;
        for (i, &extent) in extents.iter().enumerate() {
            let index = first + i as u64;
            media.write_u64(self.slot(index), self.word(index, extent, i + 1 < extents.len()));
        }
        self.flush_slots(media, first, extents.len() as u64);
        media.drain();
        self.tail += extents.len() as u64;
        Ok(first)
    }

    /// Durably drops every extent below `keep_from` (one 8 B persist).
    pub fn truncate<M: Media>(&mut self, media: &mut M, keep_from: u64) -> Result<(), TruncateError> {
        if keep_from > self.tail {
            return Err(TruncateError::BeyondTail { keep_from, next: self.tail });
        }
        if keep_from > self.head {
            media.persist_u64(self.base + HEAD_WORD, keep_from);
            self.head = keep_from;
        }
        Ok(())
    }

    /// Every retained extent with its index, oldest first.
    pub fn read_all<M: Media>(&self, media: &M) -> Vec<(u64, Extent)> {
        (self.head..self.tail).map(|n| (n, self.read(media, n))).collect()
    }

    /// The extent at `index`, if retained.
    pub fn get<M: Media>(&self, media: &M, index: u64) -> Option<Extent> {
        (self.head..self.tail).contains(&index).then(|| self.read(media, index))
    }

    /// Index of the first retained extent.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Index the next append will get.
    pub fn next_index(&self) -> u64 {
        self.tail
    }

    /// Number of retained extents.
    pub fn len(&self) -> u64 {
        self.tail - self.head
    }

    /// Whether no extents are retained.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots free for appends.
    pub fn free(&self) -> u64 {
        self.capacity - self.len()
    }

    /// Slots in the log.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    fn read<M: Media>(&self, media: &M, index: u64) -> Extent {
        let word = media.read_u64(self.slot(index));
        assert_eq!(word >> TAG_SHIFT & 0b11, self.tag(index), "retained slot {index} lost its lap tag");
        Extent::unpack(word & !FLAG_MASK)
    }

    /// The lap tag slot `index` must carry: 1, 2 or 3.
    fn tag(&self, index: u64) -> u64 {
        (index / self.capacity) % 3 + 1
    }

    pub(crate) fn slot(&self, index: u64) -> u64 {
        self.base + HEADER_BLOCK_BYTES + (index % self.capacity) * 8
    }

    pub(crate) fn word(&self, index: u64, extent: Extent, more: bool) -> u64 {
        let word = extent.pack() | self.tag(index) << TAG_SHIFT | if more { CONT_BIT } else { 0 };
        assert_eq!(Extent::unpack(word & !FLAG_MASK), extent, "extent does not survive packing");
        word
    }

    fn check_free(&self, needed: u64) -> Result<(), AppendError> {
        let free = self.free();
        if needed > free {
            return Err(AppendError::Full { needed, free });
        }
        Ok(())
    }

    /// Flushes slots `first .. first + count`, which may wrap around the end.
    fn flush_slots<M: Media>(&self, media: &mut M, first: u64, count: u64) {
        let phys = first % self.capacity;
        let before_end = count.min(self.capacity - phys);
        media.flush(self.slot(first), before_end * 8);
        if before_end < count {
            media.flush(self.slot(0), (count - before_end) * 8);
        }
    }

    /// The end of the last complete group after the head.
    fn scan<M: Media>(&self, media: &M) -> u64 {
        let limit = self.head + self.capacity;
        let (mut index, mut complete) = (self.head, self.head);
        while index < limit {
            let word = media.read_u64(self.slot(index));
            if word >> TAG_SHIFT & 0b11 != self.tag(index) {
                break;
            }
            index += 1;
            if word & CONT_BIT == 0 {
                complete = index;
            }
        }
        complete
    }

    /// Zeroes (durably) every slot in the scrub window that carries its
    /// lap's tag: all such words are remnants of a torn group.
    fn scrub<M: Media>(&self, media: &mut M) {
        let end = (self.tail + MAX_GROUP as u64).min(self.head + self.capacity);
        let mut dirty = false;
        for index in self.tail..end {
            if media.read_u64(self.slot(index)) >> TAG_SHIFT & 0b11 == self.tag(index) {
                media.write_u64(self.slot(index), 0);
                media.flush(self.slot(index), 8);
                dirty = true;
            }
        }
        if dirty {
            media.drain();
        }
    }
}

fn check_extent(extent: Extent) -> Result<(), AppendError> {
    if extent.offset > MAX_OFFSET {
        return Err(AppendError::ExtentOutOfRange { offset: extent.offset, max: MAX_OFFSET });
    }
    Ok(())
}

/// Zeroes `[offset, offset + len)`; durable at the next drain.
fn zero_nodrain<M: Media>(media: &mut M, offset: u64, len: u64) {
    static ZEROS: [u8; 4096] = [0; 4096];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(ZEROS.len() as u64);
        media.memcpy_nodrain(offset + done, &ZEROS[..n as usize]);
        done += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_matches_paste() {
        let e = Extent { buf_idx: 0xdead_beef, offset: 0x1234, len: 0xabcd };
        assert_eq!(e.pack(), 0xdead_beef_1234_abcd);
        assert_eq!(Extent::unpack(e.pack()), e);
    }

    #[test]
    fn tags_never_zero_and_differ_between_neighbouring_laps() {
        let log = ExtentLog { base: 0, capacity: 4, head: 0, tail: 0 };
        for lap in 0..10u64 {
            let (this, next) = (log.tag(lap * 4), log.tag((lap + 1) * 4));
            assert_ne!(this, 0);
            assert_ne!(this, next);
            assert_ne!(this, log.tag((lap + 2) * 4));
        }
    }
}
