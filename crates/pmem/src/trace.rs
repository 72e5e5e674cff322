//! A medium that records every store, flush and fence, for the crash-state
//! checker (`pmwire-crashcheck`).
//!
//! [`TracedMedia`] behaves like a [`MemMedia`] (reads see every store at
//! once, as a CPU does through its caches) and appends each operation to a
//! trace. The trace, with the image the medium started from, is enough to
//! rebuild every state the persistent medium could be left in by a crash.
//! `mark` lets a test harness note where in the trace an operation was
//! acknowledged to its caller.

use crate::media::{check_range, check_word, Media, MemMedia};

/// One recorded operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Ordinary (cached) stores.
    Store {
        /// Where.
        offset: u64,
        /// What.
        bytes: Vec<u8>,
    },
    /// Non-temporal stores: pending until the next fence, no flush needed.
    NtStore {
        /// Where.
        offset: u64,
        /// What.
        bytes: Vec<u8>,
    },
    /// Write-back of every line overlapping the range.
    Flush {
        /// Start.
        offset: u64,
        /// Length.
        len: u64,
    },
    /// A drain (`sfence`): earlier flushes and non-temporal stores are durable.
    Fence,
    /// A harness marker (an acknowledged operation, say).
    Mark(u64),
}

/// A medium that records what is done to it.
#[derive(Clone, Debug)]
pub struct TracedMedia {
    initial: Vec<u8>,
    current: MemMedia,
    ops: Vec<Op>,
}

impl TracedMedia {
    /// A zeroed traced medium of `len` bytes.
    pub fn new(len: usize) -> TracedMedia {
        TracedMedia::from_image(vec![0; len])
    }

    /// A traced medium starting from `image` (taken as durable).
    pub fn from_image(image: Vec<u8>) -> TracedMedia {
        TracedMedia { current: MemMedia::from_bytes(image.clone()), initial: image, ops: Vec::new() }
    }

    /// Records a harness marker.
    pub fn mark(&mut self, id: u64) {
        self.ops.push(Op::Mark(id));
    }

    /// The durable image the trace starts from.
    pub fn initial(&self) -> &[u8] {
        &self.initial
    }

    /// The contents as the CPU sees them now.
    pub fn current(&self) -> &[u8] {
        self.current.bytes()
    }

    /// The operations recorded so far.
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Takes the current contents as durable and clears the trace (call
    /// after set-up that the checker need not explore).
    pub fn checkpoint(&mut self) {
        self.initial = self.current.bytes().to_vec();
        self.ops.clear();
    }

    /// Hands over the operations recorded since the last call (or since
    /// the start), for a consumer that folds the trace as it runs (the
    /// replication simulation's `crashcheck::CrashState`), so the trace
    /// does not grow without bound. [`initial`](TracedMedia::initial) is
    /// then no longer where [`ops`](TracedMedia::ops) start from: the
    /// consumer keeps that state.
    pub fn take_ops(&mut self) -> Vec<Op> {
        std::mem::take(&mut self.ops)
    }
}

impl Media for TracedMedia {
    fn len(&self) -> u64 {
        self.current.len()
    }

    fn read(&self, offset: u64, dst: &mut [u8]) {
        self.current.read(offset, dst);
    }

    fn bytes_at(&self, offset: u64, len: u64) -> Option<&[u8]> {
        self.current.bytes_at(offset, len)
    }

    fn read_u64(&self, offset: u64) -> u64 {
        self.current.read_u64(offset)
    }

    fn write(&mut self, offset: u64, src: &[u8]) {
        self.current.write(offset, src);
        self.ops.push(Op::Store { offset, bytes: src.to_vec() });
    }

    fn write_u64(&mut self, offset: u64, value: u64) {
        check_word(self.len(), offset);
        self.write(offset, &value.to_le_bytes());
    }

    fn write_nt(&mut self, offset: u64, src: &[u8]) {
        self.current.write(offset, src);
        self.ops.push(Op::NtStore { offset, bytes: src.to_vec() });
    }

    fn flush(&mut self, offset: u64, len: u64) {
        check_range(self.len(), offset, len);
        self.ops.push(Op::Flush { offset, len });
    }

    fn drain(&mut self) {
        self.ops.push(Op::Fence);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_in_order() {
        let mut media = TracedMedia::new(512);
        media.write(0, b"abc");
        media.memcpy_persist(64, &[1; 300 - 64]);
        media.mark(7);
        media.persist_u64(8, 9);
        let kinds: Vec<&str> = media
            .ops()
            .iter()
            .map(|op| match op {
                Op::Store { .. } => "store",
                Op::NtStore { .. } => "nt",
                Op::Flush { .. } => "flush",
                Op::Fence => "fence",
                Op::Mark(_) => "mark",
            })
            .collect();
        assert_eq!(kinds, ["store", "store", "flush", "fence", "mark", "store", "flush", "fence"]);
        assert_eq!(media.read_u64(8), 9);
        assert_eq!(media.initial()[8], 0);
    }

    #[test]
    fn take_ops_hands_over_each_op_once() {
        let mut media = TracedMedia::new(128);
        media.persist_u64(0, 1);
        let first = media.take_ops();
        assert_eq!(first.len(), 3, "store, flush, fence");
        assert!(media.ops().is_empty());
        media.write_u64(8, 2);
        assert_eq!(media.take_ops(), [Op::Store { offset: 8, bytes: 2u64.to_le_bytes().to_vec() }]);
        assert_eq!(media.read_u64(0), 1, "the contents are untouched");
        assert_eq!(media.read_u64(8), 2);
    }
}
