//! [`Pool`]: fixed-size buffers at fixed places, with volatile ownership.
//!
//! The layout (header, sections, buffer area) is deterministic from the
//! [`PoolConfig`], so after a restart every buffer is where it was. Who
//! owns a buffer is **not** persisted: every holder (a log record, a tree
//! value, the network ring, a send in flight) holds one reference, counted
//! in DRAM. `open` starts with every count at zero in *recovery*: the
//! structures above report each durable reference with
//! [`Pool::recover_ref`], then [`Pool::finish_recovery`] frees the rest.
//!
//! Invariants (checked by [`Pool::check`]):
//! - every buffer at count 0 is on the free list; an entry whose buffer
//!   is referenced is stale (left by [`Pool::alloc_run`], which takes
//!   buffers wherever they are on the list) and is skipped when popped;
//!   the list never holds more than twice the buffers;
//! - `alloc` and `alloc_run` hand out only free buffers, with count 1;
//!   `release` to 0 puts a buffer back on the free list; retaining a free
//!   buffer is a bug (assert), as is releasing one at 0.

use pmem::Media;
use pmwire_log::Extent;

use crate::error::{CreateError, ExtentError, OpenError};
use crate::format::{Layout, PoolConfig, Section, HEADER_BYTES};

/// A named persistent buffer pool (PASTE's Ppool). See the module docs.
#[derive(Debug)]
pub struct Pool {
    layout: Layout,
    refs: Vec<u32>,
    /// Free buffers (and stale entries, module docs); `pop` hands out the
    /// next.
    free: Vec<u32>,
    /// Buffers at count 0.
    free_count: u32,
    /// Where the next [`Pool::alloc_run`] starts looking.
    run_cursor: u32,
    recovering: bool,
}

impl Pool {
    /// Media bytes (from `base`) the pool of `config` needs.
    pub fn required_size(config: &PoolConfig) -> Result<u64, CreateError> {
        Ok(Layout::new(0, config, 0)?.total_bytes)
    }

    /// First half of `create`: checks the layout fits, durably destroys
    /// any older pool header at `base` (a crash from here until
    /// [`Pool::finish_create`] leaves no pool), and returns the layout so
    /// the caller can format its sections.
    pub fn begin_create<M: Media>(media: &mut M, base: u64, config: &PoolConfig) -> Result<Layout, CreateError> {
        let layout = Layout::new(base, config, fresh_nonce(base))?;
        if base.checked_add(layout.total_bytes).is_none_or(|end| end > media.len()) {
            return Err(CreateError::MediaTooSmall { needed: layout.total_bytes, base, have: media.len() });
        }
        media.persist_u64(base, 0);
        Ok(layout)
    }

    /// Second half of `create`: persists the header (last), after the
    /// caller's sections are durable. Every buffer starts free.
    pub fn finish_create<M: Media>(media: &mut M, layout: Layout) -> Pool {
        let header = layout.header();
        media.write(layout.base, &header);
        media.persist(layout.base, HEADER_BYTES as u64);
        let buffers = layout.buffers;
        Pool { layout, refs: vec![0; buffers as usize], free: (0..buffers).rev().collect(), free_count: buffers, run_cursor: 0, recovering: false }
    }

    /// Creates a pool without sections to format (both halves at once).
    pub fn create<M: Media>(media: &mut M, base: u64, config: &PoolConfig) -> Result<Pool, CreateError> {
        let layout = Pool::begin_create(media, base, config)?;
        Ok(Pool::finish_create(media, layout))
    }

    /// Reads the header at `base`. The pool starts in recovery: every
    /// count 0, nothing allocatable until [`Pool::finish_recovery`].
    pub fn open<M: Media>(media: &M, base: u64) -> Result<Pool, OpenError> {
        let room = base.checked_add(HEADER_BYTES as u64).is_some_and(|end| end <= media.len());
        if !room || !base.is_multiple_of(crate::BASE_ALIGN) {
            return Err(OpenError::MediaTooSmall { base, have: media.len() });
        }
        let mut header = [0u8; HEADER_BYTES];
        media.read(base, &mut header);
        let layout = Layout::from_header(base, &header)?;
        if base.checked_add(layout.total_bytes).is_none_or(|end| end > media.len()) {
            return Err(OpenError::MediaTooSmall { base, have: media.len() });
        }
        let buffers = layout.buffers as usize;
        Ok(Pool { layout, refs: vec![0; buffers], free: Vec::new(), free_count: 0, run_cursor: 0, recovering: true })
    }

    /// Recovery: one durable reference to `buf_idx` was found.
    pub fn recover_ref(&mut self, buf_idx: u32) -> Result<(), ExtentError> {
        assert!(self.recovering, "recover_ref after recovery finished");
        self.check_index(buf_idx)?;
        self.refs[buf_idx as usize] += 1;
        Ok(())
    }

    /// Ends recovery: every buffer nothing referenced becomes free.
    pub fn finish_recovery(&mut self) {
        assert!(self.recovering, "recovery finished twice");
        self.recovering = false;
        self.free = (0..self.layout.buffers).rev().filter(|&b| self.refs[b as usize] == 0).collect();
        self.free_count = self.free.len() as u32;
    }

    /// Whether the pool is still in recovery.
    pub fn is_recovering(&self) -> bool {
        self.recovering
    }

    /// A free buffer with count 1 (its contents are stale), or `None`.
    pub fn alloc(&mut self) -> Option<u32> {
        assert!(!self.recovering, "alloc during recovery");
        if self.free_count == 0 {
            return None;
        }
        loop {
            let buf_idx = self.free.pop().expect("a buffer at count 0 is on the free list");
            if self.refs[buf_idx as usize] == 0 {
                self.refs[buf_idx as usize] = 1;
                self.free_count -= 1;
                return Some(buf_idx);
            }
        }
    }

    /// `n` free buffers at consecutive places, each with count 1, or
    /// `None` (no such run free). Returns the first. For memory that must
    /// be contiguous (a receive area); looks from where the last run
    /// ended (next fit), at most once round the pool.
    pub fn alloc_run(&mut self, n: u32) -> Option<u32> {
        assert!(!self.recovering, "alloc during recovery");
        let buffers = self.layout.buffers;
        if n == 0 || n > self.free_count || n > buffers {
            return None;
        }
        let mut start = if self.run_cursor + n > buffers { 0 } else { self.run_cursor };
        let mut scanned = 0u64;
        while scanned <= u64::from(buffers) + u64::from(n) {
            if start + n > buffers {
                scanned += u64::from(buffers - start);
                start = 0;
                continue;
            }
            match (start..start + n).rev().find(|&b| self.refs[b as usize] != 0) {
                Some(taken) => {
                    scanned += u64::from(taken + 1 - start);
                    start = taken + 1;
                }
                None => {
                    for b in start..start + n {
                        self.refs[b as usize] = 1;
                    }
                    self.free_count -= n;
                    self.run_cursor = start + n;
                    // The run's entries on the free list are stale now.
                    return Some(start);
                }
            }
        }
        None
    }

    /// One more reference to a live buffer.
    pub fn retain(&mut self, buf_idx: u32) {
        let count = &mut self.refs[buf_idx as usize];
        assert!(*count > 0, "retain of free buffer {buf_idx}");
        *count += 1;
    }

    /// Drops one reference; returns whether the buffer became free.
    pub fn release(&mut self, buf_idx: u32) -> bool {
        let count = &mut self.refs[buf_idx as usize];
        assert!(*count > 0, "release of free buffer {buf_idx}");
        *count -= 1;
        if *count == 0 && !self.recovering {
            self.free.push(buf_idx);
            self.free_count += 1;
            if self.free.len() > 2 * self.layout.buffers as usize {
                self.compact_free();
            }
            return true;
        }
        false
    }

    /// Drops the free list's stale and repeated entries.
    fn compact_free(&mut self) {
        let mut seen = vec![false; self.refs.len()];
        let refs = &self.refs;
        self.free.retain(|&b| refs[b as usize] == 0 && !std::mem::replace(&mut seen[b as usize], true));
    }

    /// Takes a free buffer off the free list with count 1, wherever it is
    /// in the list (O(free); for the crash checker's planted bugs).
    #[doc(hidden)]
    pub fn reclaim(&mut self, buf_idx: u32) {
        if self.refs[buf_idx as usize] > 0 {
            self.retain(buf_idx);
            return;
        }
        self.free.retain(|&b| b != buf_idx);
        self.refs[buf_idx as usize] = 1;
        self.free_count -= 1;
    }

    /// References held on `buf_idx`.
    pub fn refcount(&self, buf_idx: u32) -> u32 {
        self.refs[buf_idx as usize]
    }

    /// Media offset of buffer `buf_idx`.
    pub fn buffer_offset(&self, buf_idx: u32) -> u64 {
        assert!(buf_idx < self.layout.buffers, "buffer {buf_idx} beyond {}", self.layout.buffers);
        self.layout.buffers_at + buf_idx as u64 * self.layout.buf_size as u64
    }

    /// Bytes per buffer.
    pub fn buf_size(&self) -> u32 {
        self.layout.buf_size
    }

    /// Number of buffers.
    pub fn buffers(&self) -> u32 {
        self.layout.buffers
    }

    /// Free buffers.
    pub fn free_count(&self) -> u32 {
        self.free_count
    }

    /// The layout (base, buffer area, sections, nonce).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The section tagged `tag`.
    pub fn section(&self, tag: u32) -> Option<Section> {
        self.layout.sections.iter().copied().find(|s| s.tag == tag)
    }

    /// Checks that `extent` lies inside one buffer of the pool.
    pub fn check_extent(&self, extent: Extent) -> Result<(), ExtentError> {
        self.check_index(extent.buf_idx)?;
        if extent.offset as u32 + extent.len as u32 > self.layout.buf_size {
            let (offset, len, buf_size) = (extent.offset, extent.len, self.layout.buf_size);
            return Err(ExtentError::OutOfBuffer { offset, len, buf_size });
        }
        Ok(())
    }

    /// `check_extent`, and the buffer must be live (referenced).
    pub fn check_live_extent(&self, extent: Extent) -> Result<(), ExtentError> {
        self.check_extent(extent)?;
        if self.refs[extent.buf_idx as usize] == 0 {
            return Err(ExtentError::Free { buf_idx: extent.buf_idx });
        }
        Ok(())
    }

    fn check_index(&self, buf_idx: u32) -> Result<(), ExtentError> {
        if buf_idx >= self.layout.buffers {
            return Err(ExtentError::NoSuchBuffer { buf_idx, buffers: self.layout.buffers });
        }
        Ok(())
    }

    /// Media offset of an extent's first byte.
    pub fn extent_offset(&self, extent: Extent) -> u64 {
        assert!(extent.offset as u32 + extent.len as u32 <= self.layout.buf_size, "extent past its buffer");
        self.buffer_offset(extent.buf_idx) + extent.offset as u64
    }

    /// Writes back the lines of `extent` (durable at the next drain).
    pub fn flush_extent<M: Media>(&self, media: &mut M, extent: Extent) {
        if extent.len > 0 {
            media.flush(self.extent_offset(extent), extent.len as u64);
        }
    }

    /// Appends the bytes of `extents` to `out`.
    pub fn gather<M: Media>(&self, media: &M, extents: &[Extent], out: &mut Vec<u8>) {
        for &extent in extents {
            let at = out.len();
            out.resize(at + extent.len as usize, 0);
            media.read(self.extent_offset(extent), &mut out[at..]);
        }
    }

    /// Checks the invariants: every buffer at count 0 is on the free list
    /// (other entries are stale, module docs), `free_count` counts them,
    /// and the list is bounded.
    pub fn check(&self) -> Result<(), String> {
        if self.recovering {
            return Err("still recovering".into());
        }
        let mut on_list = vec![false; self.refs.len()];
        for &b in &self.free {
            on_list[b as usize] = true;
        }
        if let Some(b) = (0..self.refs.len()).find(|&b| self.refs[b] == 0 && !on_list[b]) {
            return Err(format!("buffer {b} unreferenced but not free (leaked)"));
        }
        let at_zero = self.refs.iter().filter(|&&r| r == 0).count();
        if at_zero != self.free_count as usize {
            return Err(format!("{at_zero} buffers unreferenced, {} counted free", self.free_count));
        }
        if self.free.len() > 2 * self.refs.len() {
            return Err(format!("free list of {} entries for {} buffers", self.free.len(), self.refs.len()));
        }
        Ok(())
    }
}

/// A nonce that differs between creates: clock, place and a counter.
fn fresh_nonce(base: u64) -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut x = now.as_nanos() as u64 ^ base.rotate_left(32) ^ COUNTER.fetch_add(1, Ordering::Relaxed) << 48;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^ x >> 33
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem::MemMedia;

    fn pool(buffers: u32) -> (MemMedia, Pool) {
        let config = PoolConfig::new(buffers);
        let mut media = MemMedia::new(Pool::required_size(&config).unwrap() as usize);
        let pool = Pool::create(&mut media, 0, &config).unwrap();
        (media, pool)
    }

    #[test]
    fn a_run_is_consecutive_and_alloc_skips_it() {
        let (_m, mut p) = pool(64);
        let first = p.alloc_run(8).unwrap();
        assert!((first..first + 8).all(|b| p.refcount(b) == 1));
        assert_eq!(p.free_count(), 56);
        let mut got = Vec::new();
        while let Some(b) = p.alloc() {
            got.push(b);
        }
        assert_eq!(got.len(), 56);
        assert!(got.iter().all(|b| !(first..first + 8).contains(b)), "{got:?}");
        p.check().unwrap();
        assert_eq!(p.alloc_run(1), None);
    }

    #[test]
    fn a_run_needs_consecutive_free_buffers() {
        let (_m, mut p) = pool(16);
        let all: Vec<u32> = (0..16).map(|_| p.alloc().unwrap()).collect();
        // Free every other buffer: 8 free, no two adjacent.
        for b in all.iter().filter(|&&b| b % 2 == 0) {
            p.release(*b);
        }
        assert_eq!(p.alloc_run(2), None);
        assert_eq!(p.alloc_run(1).map(|b| b % 2), Some(0));
        p.release(5);
        let run = p.alloc_run(3).unwrap();
        assert_eq!(run, 4, "4, 5 and 6 are the only three free in a row");
        p.check().unwrap();
    }

    /// Random allocs, runs and releases against a model: every handed-out
    /// buffer was free, counts and the free list stay right.
    #[test]
    fn runs_and_single_buffers_churn_against_a_model() {
        let (_m, mut p) = pool(97);
        let mut held: Vec<u32> = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for step in 0..20_000 {
            match next(4) {
                0 => {
                    if let Some(b) = p.alloc() {
                        assert!(!held.contains(&b), "buffer {b} handed out twice at step {step}");
                        held.push(b);
                    }
                }
                1 => {
                    let n = 1 + next(9) as u32;
                    if let Some(first) = p.alloc_run(n) {
                        for b in first..first + n {
                            assert!(!held.contains(&b), "buffer {b} handed out twice at step {step}");
                            held.push(b);
                        }
                    }
                }
                _ => {
                    if !held.is_empty() {
                        let i = next(held.len() as u64) as usize;
                        let b = held.swap_remove(i);
                        assert!(p.release(b));
                    }
                }
            }
            assert_eq!(p.free_count() as usize, 97 - held.len());
            if step % 97 == 0 {
                p.check().unwrap();
            }
        }
        p.check().unwrap();
    }
}
