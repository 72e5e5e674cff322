//! The buffer seam: fixed-size, reference-counted receive buffers named by a `u32`.
//!
//! A [`BufferSource`] owns a set of equal-sized buffers (PASTE's Pbufs, seed 001 §3.2). The
//! server puts free buffers into the kernel's provided-buffer ring; the kernel copies socket data
//! straight into them; the buffer then belongs to the connection's receive queue and, if the
//! service `retain`s it, to the service as well (e.g. a stored value). The persistent
//! implementation (buffers in a file mapping on tmpfs or DAX) lives in another crate; this
//! module gives the DRAM one, [`HeapBuffers`], for tests and the benchmark's copy mode.
//!
//! Invariants of every implementation:
//! - a buffer's memory (`buf_size` bytes from `ptr(id)`) never moves and stays valid while its
//!   reference count is above zero;
//! - `alloc` returns only buffers whose count is zero, and sets it to one;
//! - `retain` and `release` are only called on buffers whose count is above zero (a release to
//!   zero frees the buffer); each holder releases exactly the references it took.
//!
//! [`HeapBuffers`] asserts the last two in release builds: a double release or a retain of a
//! free buffer panics at once instead of corrupting data later.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

/// A set of fixed-size, reference-counted buffers named by `u32` ids.
pub trait BufferSource {
    /// The size of every buffer, in bytes.
    fn buf_size(&self) -> u32;
    /// The start of buffer `id` (`buf_size` bytes, valid while its reference count is above 0).
    fn ptr(&self, id: u32) -> *mut u8;
    /// A free buffer, with reference count 1; `None` when all are in use.
    fn alloc(&mut self) -> Option<u32>;
    /// Adds a reference to a buffer that is in use.
    fn retain(&mut self, id: u32);
    /// Drops a reference; at zero the buffer is free again.
    fn release(&mut self, id: u32);
}

/// Alignment of [`HeapBuffers`]' memory: a page, as a persistent pool's buffers would be.
const HEAP_ALIGN_BYTES: usize = 4096;

/// DRAM buffers with checked reference counts (for tests and the benchmark's copy mode).
///
/// All memory is allocated once by [`HeapBuffers::new`]; nothing allocates afterwards.
pub struct HeapBuffers {
    base: NonNull<u8>,
    layout: Layout,
    buf_size: u32,
    /// `refs[id]` is buffer `id`'s reference count.
    refs: Vec<u32>,
    /// Free buffer ids; popped from the end (most recently freed first, still cache-warm).
    free: Vec<u32>,
    allocs: u64,
}

// SAFETY: the buffer memory is owned exclusively by this value (a raw allocation); moving it to
// another thread moves that ownership. It is not `Sync`: all methods that change state take
// `&mut self`.
unsafe impl Send for HeapBuffers {}

impl HeapBuffers {
    /// `count` buffers of `buf_size` bytes each, all free.
    ///
    /// Panics if `count` or `buf_size` is zero, or the total does not fit in memory.
    pub fn new(count: u32, buf_size: u32) -> HeapBuffers {
        assert!(count > 0, "HeapBuffers needs at least one buffer");
        assert!(buf_size > 0, "HeapBuffers needs a non-zero buffer size");
        let total = (count as usize).checked_mul(buf_size as usize).expect("HeapBuffers size overflows usize");
        let layout = Layout::from_size_align(total, HEAP_ALIGN_BYTES).expect("HeapBuffers layout");
        // SAFETY: `layout` has a non-zero size (both factors are above zero).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let base = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        HeapBuffers {
            base,
            layout,
            buf_size,
            refs: vec![0; count as usize],
            free: (0..count).rev().collect(),
            allocs: 0,
        }
    }

    /// Number of buffers.
    pub fn count(&self) -> u32 {
        self.refs.len() as u32
    }

    /// Number of buffers whose reference count is above zero.
    pub fn in_use(&self) -> u32 {
        self.count() - self.free.len() as u32
    }

    /// Buffer `id`'s reference count.
    pub fn refcount(&self, id: u32) -> u32 {
        self.refs[id as usize]
    }

    /// Number of successful `alloc` calls so far.
    pub fn allocs(&self) -> u64 {
        self.allocs
    }

    /// Copies `len` bytes of buffer `id` from `offset` (for tests; the buffer must be in use
    /// and not a current receive target).
    pub fn read(&self, id: u32, offset: u32, len: u32) -> Vec<u8> {
        assert!(self.refs[id as usize] > 0, "read of free buffer {id}");
        assert!(offset as u64 + len as u64 <= self.buf_size as u64, "read past buffer end");
        // SAFETY: in bounds (asserted) of a live allocation.
        unsafe { std::slice::from_raw_parts(self.ptr(id).add(offset as usize), len as usize) }.to_vec()
    }
}

impl BufferSource for HeapBuffers {
    fn buf_size(&self) -> u32 {
        self.buf_size
    }

    fn ptr(&self, id: u32) -> *mut u8 {
        assert!((id as usize) < self.refs.len(), "buffer id {id} out of range");
        // SAFETY: id < count, so the offset is inside the allocation.
        unsafe { self.base.as_ptr().add(id as usize * self.buf_size as usize) }
    }

    fn alloc(&mut self) -> Option<u32> {
        let id = self.free.pop()?;
        assert_eq!(self.refs[id as usize], 0, "free list held a used buffer {id}");
        self.refs[id as usize] = 1;
        self.allocs += 1;
        Some(id)
    }

    fn retain(&mut self, id: u32) {
        let count = &mut self.refs[id as usize];
        assert!(*count > 0, "retain of free buffer {id}");
        *count = count.checked_add(1).expect("reference count overflow");
    }

    fn release(&mut self, id: u32) {
        let count = &mut self.refs[id as usize];
        assert!(*count > 0, "double release of buffer {id}");
        *count -= 1;
        if *count == 0 {
            self.free.push(id);
        }
    }
}

impl Drop for HeapBuffers {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { alloc::dealloc(self.base.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_retain_release_cycle() {
        let mut b = HeapBuffers::new(3, 64);
        let a = b.alloc().unwrap();
        let c = b.alloc().unwrap();
        let d = b.alloc().unwrap();
        assert_eq!(b.alloc(), None);
        assert_eq!(b.in_use(), 3);
        b.retain(a);
        b.release(a);
        assert_eq!(b.refcount(a), 1);
        b.release(a);
        b.release(c);
        b.release(d);
        assert_eq!(b.in_use(), 0);
        assert!(b.ptr(1) as usize - b.ptr(0) as usize == 64);
    }

    #[test]
    #[should_panic(expected = "double release")]
    fn double_release_panics() {
        let mut b = HeapBuffers::new(1, 64);
        let a = b.alloc().unwrap();
        b.release(a);
        b.release(a);
    }
}
