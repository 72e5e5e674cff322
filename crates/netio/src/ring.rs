//! The provided-buffer ring (`IORING_REGISTER_PBUF_RING`, Linux 5.19+) filled from a
//! [`BufferSource`].
//!
//! The ring is an array of `entries` (a power of two) `io_uring_buf` records in page-aligned
//! anonymous memory shared with the kernel; the kernel consumes from the head, we publish at the
//! tail (a `u16` overlaid on entry 0's reserved field, stored with release ordering). Each
//! record's bid is a `u16`; `slots[bid]` is the source buffer currently attached to that bid.
//!
//! Invariants:
//! - every bid is either in the ring (`slots[bid] != EMPTY`, its buffer holds the ring's one
//!   reference) or in `empty` waiting for a buffer (`slots[bid] == EMPTY`), never both;
//! - so at most `entries` records are ever published and unconsumed: the tail never laps the
//!   kernel's head;
//! - when the kernel consumes a bid (a CQE names it), [`BufRing::take`] hands the buffer and the
//!   ring's reference to the caller, and the bid waits for a fresh buffer (PASTE's buffer swap,
//!   seed 001 §3.2): a received buffer is never put back in the ring while someone reads it.
//!
//! Incremental consumption (`IOU_PBUF_RING_INC`, Linux 6.12; [`BufRing::incremental`]): a
//! receive uses only the bytes it got of the buffer at the ring's head, and the next receive (of
//! any connection) goes on in the same buffer, so small requests share buffers instead of
//! pinning one each (a 64 B SET held a 2 KiB buffer for its value). The kernel flags a
//! completion whose buffer it keeps (`IORING_CQE_F_BUF_MORE`): the caller gets the received
//! bytes at the buffer's consumed offset ([`BufRing::part`]) with a reference of its own, and
//! the ring keeps its reference until the completion that ends the buffer, handled as above.
//! The kernel writes only past the consumed offset, which nobody else writes.

use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

use crate::buffers::BufferSource;

const EMPTY: u32 = u32::MAX;
/// `IOU_PBUF_RING_INC` (linux/io_uring.h): the ring's buffers are consumed incrementally.
const IOU_PBUF_RING_INC: u16 = 2;

pub(crate) struct BufRing {
    mem: *mut BufRingEntry,
    mem_bytes: usize,
    entries: u16,
    bgid: u16,
    /// Our copy of the tail (published to the kernel by `publish`).
    tail: u16,
    slots: Vec<u32>,
    /// Bytes of each bid's buffer the kernel has consumed (incremental mode).
    consumed: Vec<u32>,
    empty: Vec<u16>,
    registered: bool,
    incremental: bool,
}

/// Whether this kernel consumes provided buffers incrementally (module docs): registers a
/// small ring on a scratch io_uring and looks. `Err` if io_uring itself is unavailable.
pub fn incremental_supported() -> io::Result<bool> {
    let ring = IoUring::new(8)?;
    let mut bufs = BufRing::new(8, 0)?;
    bufs.register(&ring)?;
    let incremental = bufs.incremental();
    bufs.unregister(&ring)?;
    Ok(incremental)
}

impl BufRing {
    /// Maps the ring memory; nothing is registered or filled yet.
    pub(crate) fn new(entries: u16, bgid: u16) -> io::Result<BufRing> {
        assert!(entries.is_power_of_two(), "ring entries must be a power of two");
        assert!(entries <= 32768, "ring entries above 32768");
        let mem_bytes = (entries as usize * std::mem::size_of::<BufRingEntry>()).next_multiple_of(4096);
        // SAFETY: anonymous private mapping, checked for failure.
        let mem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mem_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if mem == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(BufRing {
            mem: mem as *mut BufRingEntry,
            mem_bytes,
            entries,
            bgid,
            tail: 0,
            slots: vec![EMPTY; entries as usize],
            consumed: vec![0; entries as usize],
            empty: (0..entries).rev().collect(),
            registered: false,
            incremental: false,
        })
    }

    /// Registers the ring, with incremental consumption where the kernel has it (6.12), else
    /// without (each receive then takes a whole buffer).
    pub(crate) fn register(&mut self, ring: &IoUring) -> io::Result<()> {
        // SAFETY (both calls): the memory stays mapped until `Drop`, which happens after
        // `unregister` (the server unregisters before dropping the ring or this value).
        match unsafe { ring.submitter().register_buf_ring_with_flags(self.mem as u64, self.entries, self.bgid, IOU_PBUF_RING_INC) } {
            Ok(()) => self.incremental = true,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => unsafe {
                ring.submitter().register_buf_ring_with_flags(self.mem as u64, self.entries, self.bgid, 0)?
            },
            Err(e) => return Err(e),
        }
        self.registered = true;
        Ok(())
    }

    /// Whether receives consume buffers incrementally (module docs).
    pub(crate) fn incremental(&self) -> bool {
        self.incremental
    }

    /// A receive of `len` bytes into `bid` (incremental mode): the buffer and the offset the
    /// bytes start at. With `more` (the kernel keeps the buffer) the ring keeps its reference
    /// and the caller holds none (it retains the buffer to keep the bytes); without, the bid is
    /// taken as by [`BufRing::take`], its reference passing to the caller.
    pub(crate) fn part(&mut self, bid: u16, len: u32, more: bool) -> (u32, u32) {
        let off = self.consumed[bid as usize];
        let id = if more {
            let id = self.slots[bid as usize];
            assert!(id != EMPTY, "kernel returned bid {bid} that holds no buffer");
            self.consumed[bid as usize] = off + len;
            id
        } else {
            self.take(bid)
        };
        (id, off)
    }

    pub(crate) fn unregister(&mut self, ring: &IoUring) -> io::Result<()> {
        if self.registered {
            ring.submitter().unregister_buf_ring(self.bgid)?;
            self.registered = false;
        }
        Ok(())
    }

    pub(crate) fn bgid(&self) -> u16 {
        self.bgid
    }

    /// Records currently offered to the kernel (approximate: the kernel may have consumed some
    /// whose completions are not read yet).
    pub(crate) fn available(&self) -> usize {
        self.entries as usize - self.empty.len()
    }

    /// The kernel consumed `bid`: returns its source buffer, whose reference passes to the
    /// caller. The bid now waits for a fresh buffer.
    pub(crate) fn take(&mut self, bid: u16) -> u32 {
        let id = self.slots[bid as usize];
        assert!(id != EMPTY, "kernel returned bid {bid} that holds no buffer");
        self.slots[bid as usize] = EMPTY;
        self.consumed[bid as usize] = 0;
        self.empty.push(bid);
        id
    }

    /// Attaches fresh buffers from `src` to waiting bids and publishes them. Returns how many
    /// were added; stops early when `src` has no free buffer.
    pub(crate) fn refill<S: BufferSource>(&mut self, src: &mut S) -> u32 {
        let mut added = 0;
        let mask = self.entries - 1;
        while let Some(&bid) = self.empty.last() {
            let Some(id) = src.alloc() else { break };
            self.empty.pop();
            assert_eq!(self.slots[bid as usize], EMPTY, "bid {bid} refilled twice");
            self.slots[bid as usize] = id;
            // SAFETY: the index is masked into the mapping; only our fields are written (entry
            // 0's reserved field holds the tail and is left alone).
            unsafe {
                let e = &mut *self.mem.add((self.tail & mask) as usize);
                e.set_addr(src.ptr(id) as u64);
                e.set_len(src.buf_size());
                e.set_bid(bid);
            }
            self.tail = self.tail.wrapping_add(1);
            added += 1;
        }
        if added > 0 {
            // SAFETY: the tail field is a u16 inside the mapping, naturally aligned.
            let tail = unsafe { &*(BufRingEntry::tail(self.mem) as *const AtomicU16) };
            tail.store(self.tail, Ordering::Release);
        }
        added
    }

    /// Releases every buffer still attached (after `unregister`, when the kernel no longer
    /// uses them).
    pub(crate) fn release_all<S: BufferSource>(&mut self, src: &mut S) {
        assert!(!self.registered, "releasing buffers of a registered ring");
        for bid in 0..self.entries {
            let id = self.slots[bid as usize];
            if id != EMPTY {
                self.slots[bid as usize] = EMPTY;
                self.empty.push(bid);
                src.release(id);
            }
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // If still registered (an error path), the kernel may read the records until the
        // io_uring is closed: leak the mapping rather than unmap it under the kernel.
        if !self.registered {
            // SAFETY: mapped in `new`, unmapped once.
            unsafe { libc::munmap(self.mem as *mut libc::c_void, self.mem_bytes) };
        }
    }
}
