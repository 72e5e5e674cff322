//! The persistence seam: every persistent structure in pmwire is written
//! through [`Media`], so the same code runs on a mapped [`Region`]
//! (real, file-backed or emulated persistent memory), on a volatile
//! [`MemMedia`] in tests, and on a [`TracedMedia`] that records every store,
//! flush and fence for the crash-state checker.
//!
//! The contract mirrors the hardware:
//! - `write`/`write_u64` are ordinary (cached) stores: not durable until
//!   their lines are flushed *and* a later `drain` returns.
//! - `write_nt` is a non-temporal store: it bypasses the cache, so it needs
//!   only a `drain`.
//! - Only an aligned 8-byte store (`write_u64`) is failure-atomic. A longer
//!   write may reach the media in any mix of its 8 B words.
//!
//! Offsets and lengths are checked against `len()` on every call, in
//! release builds too: nothing writes outside the media.
//!
//! [`Region`]: crate::Region
//! [`TracedMedia`]: crate::trace::TracedMedia

use crate::layout::ATOMIC_WRITE;

/// The default size at and above which copies use non-temporal stores; below
/// it, ordinary stores + flush. PMDK uses 256 B; `pmwire bench local`
/// measures the crossover on this machine (`nt_crossover`), and a region can
/// be given another with [`RegionOptions::nt_threshold`](crate::RegionOptions).
pub const NT_THRESHOLD: usize = 256;

/// A byte-addressable persistent medium.
pub trait Media {
    /// Size in bytes.
    fn len(&self) -> u64;

    /// Whether the medium has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `dst.len()` bytes at `offset` into `dst`.
    fn read(&self, offset: u64, dst: &mut [u8]);

    /// The `len` bytes at `offset` in place, where the medium is memory
    /// this process can read directly (a mapping, a buffer); `None` if it
    /// must be read with [`Media::read`]. Panics outside the medium.
    fn bytes_at(&self, offset: u64, len: u64) -> Option<&[u8]> {
        check_range(self.len(), offset, len);
        None
    }

    /// Reads the aligned 8-byte little-endian word at `offset`.
    fn read_u64(&self, offset: u64) -> u64;

    /// Ordinary stores of `src` at `offset`.
    fn write(&mut self, offset: u64, src: &[u8]);

    /// One failure-atomic aligned 8-byte store.
    fn write_u64(&mut self, offset: u64, value: u64);

    /// Non-temporal stores of `src` at `offset` (need only a `drain`).
    fn write_nt(&mut self, offset: u64, src: &[u8]);

    /// Writes back every line overlapping `[offset, offset + len)`.
    fn flush(&mut self, offset: u64, len: u64);

    /// Waits until earlier flushes and non-temporal stores are durable.
    fn drain(&mut self);

    /// A hint that `[offset, offset + len)` will be written soon: a
    /// region fetches its lines for ownership (`prefetchw`) so that the
    /// stores find them in the cache. Changes no byte, orders nothing and
    /// never faults; a range past the end is ignored. The default does nothing.
    fn prefetch_write(&self, _offset: u64, _len: u64) {}

    /// Copies at or above this many bytes use non-temporal stores.
    fn nt_threshold(&self) -> usize {
        NT_THRESHOLD
    }

    /// Flush then drain.
    fn persist(&mut self, offset: u64, len: u64) {
        self.flush(offset, len);
        self.drain();
    }

    /// Copies `src` to `offset` and makes it durable at the next `drain`
    /// (PMDK's `pmem_memcpy_nodrain`): non-temporal at or above
    /// [`nt_threshold`](Media::nt_threshold), ordinary stores + flush below it.
    fn memcpy_nodrain(&mut self, offset: u64, src: &[u8]) {
        if src.len() >= self.nt_threshold() {
            self.write_nt(offset, src);
        } else {
            self.write(offset, src);
            self.flush(offset, src.len() as u64);
        }
    }

    /// Fills `len` bytes at `offset` with `byte`, durable at the next `drain`
    /// (PMDK's `pmem_memset_nodrain`). The default stores in 4 KiB pieces.
    fn memset_nodrain(&mut self, offset: u64, byte: u8, len: u64) {
        check_range(self.len(), offset, len);
        let piece = [byte; 4096];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(piece.len() as u64);
            self.memcpy_nodrain(offset + done, &piece[..n as usize]);
            done += n;
        }
    }

    /// Fills `len` bytes at `offset` with `byte` and returns once durable.
    fn memset_persist(&mut self, offset: u64, byte: u8, len: u64) {
        self.memset_nodrain(offset, byte, len);
        self.drain();
    }

    /// Copies `src` to `offset` and returns once it is durable.
    fn memcpy_persist(&mut self, offset: u64, src: &[u8]) {
        self.memcpy_nodrain(offset, src);
        self.drain();
    }

    /// Stores `value` atomically at `offset` and returns once it is durable.
    fn persist_u64(&mut self, offset: u64, value: u64) {
        self.write_u64(offset, value);
        self.persist(offset, ATOMIC_WRITE as u64);
    }
}

/// Panics unless `[offset, offset + len)` lies inside a medium of `size` bytes.
#[inline]
#[track_caller]
pub fn check_range(size: u64, offset: u64, len: u64) {
    let end = offset.checked_add(len);
    assert!(end.is_some(), "range overflows: offset {offset} len {len}");
    assert!(end.unwrap() <= size, "range [{offset}, {offset}+{len}) outside media of {size} B");
}

/// Panics unless `offset` is 8-byte aligned and the word lies inside.
#[inline]
#[track_caller]
pub fn check_word(size: u64, offset: u64) {
    assert!(offset.is_multiple_of(ATOMIC_WRITE as u64), "8-byte word at unaligned offset {offset}");
    check_range(size, offset, ATOMIC_WRITE as u64);
}

/// A medium whose flushes do nothing: how the crash-state checker's
/// planted "never flushed" bugs are made. Its non-temporal stores become
/// ordinary (cached) stores, which only a flush would make durable; drains
/// pass through, so what was flushed before still becomes durable.
pub struct NoFlush<'a, M: Media>(pub &'a mut M);

impl<M: Media> Media for NoFlush<'_, M> {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read(&self, offset: u64, dst: &mut [u8]) {
        self.0.read(offset, dst)
    }
    fn read_u64(&self, offset: u64) -> u64 {
        self.0.read_u64(offset)
    }
    fn write(&mut self, offset: u64, src: &[u8]) {
        self.0.write(offset, src)
    }
    fn write_u64(&mut self, offset: u64, value: u64) {
        self.0.write_u64(offset, value)
    }
    fn write_nt(&mut self, offset: u64, src: &[u8]) {
        self.0.write(offset, src)
    }
    fn flush(&mut self, _offset: u64, _len: u64) {}
    fn drain(&mut self) {
        self.0.drain()
    }
}

/// A volatile medium in a `Vec`: stores are immediately visible, flushes
/// and fences are counted but do nothing. For unit tests and as the
/// DRAM baseline.
#[derive(Clone, Debug, Default)]
pub struct MemMedia {
    bytes: Vec<u8>,
    /// Flush calls seen.
    pub flushes: u64,
    /// Drain calls seen.
    pub drains: u64,
}

impl MemMedia {
    /// A zeroed medium of `len` bytes.
    pub fn new(len: usize) -> MemMedia {
        MemMedia { bytes: vec![0; len], flushes: 0, drains: 0 }
    }

    /// A medium holding `bytes` (a crash image, say).
    pub fn from_bytes(bytes: Vec<u8>) -> MemMedia {
        MemMedia { bytes, flushes: 0, drains: 0 }
    }

    /// The current contents.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Media for MemMedia {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn bytes_at(&self, offset: u64, len: u64) -> Option<&[u8]> {
        check_range(self.len(), offset, len);
        Some(&self.bytes[offset as usize..(offset + len) as usize])
    }

    fn read(&self, offset: u64, dst: &mut [u8]) {
        check_range(self.len(), offset, dst.len() as u64);
        let start = offset as usize;
        dst.copy_from_slice(&self.bytes[start..start + dst.len()]);
    }

    fn read_u64(&self, offset: u64) -> u64 {
        check_word(self.len(), offset);
        let start = offset as usize;
        u64::from_le_bytes(self.bytes[start..start + 8].try_into().unwrap())
    }

    fn write(&mut self, offset: u64, src: &[u8]) {
        check_range(self.len(), offset, src.len() as u64);
        let start = offset as usize;
        self.bytes[start..start + src.len()].copy_from_slice(src);
    }

    fn write_u64(&mut self, offset: u64, value: u64) {
        check_word(self.len(), offset);
        let start = offset as usize;
        self.bytes[start..start + 8].copy_from_slice(&value.to_le_bytes());
    }

    fn write_nt(&mut self, offset: u64, src: &[u8]) {
        self.write(offset, src);
    }

    fn flush(&mut self, offset: u64, len: u64) {
        check_range(self.len(), offset, len);
        self.flushes += 1;
    }

    fn drain(&mut self) {
        self.drains += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_media_round_trips() {
        let mut media = MemMedia::new(128);
        media.memcpy_persist(3, b"hello");
        media.persist_u64(64, 0xdead_beef);
        let mut buf = [0u8; 5];
        media.read(3, &mut buf);
        assert_eq!(&buf, b"hello");
        assert_eq!(media.read_u64(64), 0xdead_beef);
        assert_eq!(media.drains, 2);
    }

    #[test]
    #[should_panic(expected = "outside media")]
    fn write_past_end_panics() {
        let mut media = MemMedia::new(16);
        media.write(10, &[0; 7]);
    }

    #[test]
    #[should_panic(expected = "unaligned")]
    fn unaligned_word_panics() {
        let mut media = MemMedia::new(16);
        media.write_u64(4, 1);
    }
}
