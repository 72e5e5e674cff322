//! The primary's DRAM record of which blocks of the data area each
//! transaction wrote, for incremental resynchronisation (docs/ARCHITECTURE.md,
//! "Mirror rejoin").
//!
//! One `u64` per block: the last transaction that wrote any byte of it
//! (0: none since the record began). The record begins when the heap is
//! created or opened, at its last committed transaction, or at the one
//! before if the log still holds the last one's records (they are marked):
//! it is complete for every transaction after `since`, so the blocks a
//! backup at `t ≥ since` lacks are exactly those whose entry is past `t`.
//! A restart loses the rest (a backup further behind then gets a full copy).
//!
//! Blocks are 1 KiB ([`MIN_BLOCK_BYTES`]), larger for data areas past
//! 8 GiB so that the table stays within [`MAX_ENTRIES`] entries (64 MiB):
//! 8 MiB of DRAM per GiB of data area up to there.

/// The smallest block: 1 KiB.
pub const MIN_BLOCK_BYTES: u64 = 1024;
/// The most blocks a table has (64 MiB of DRAM).
pub const MAX_ENTRIES: u64 = 1 << 23;

/// The last transaction to write each block of a data area.
#[derive(Clone, Debug)]
pub struct WriteTracker {
    shift: u32,
    data_bytes: u64,
    last: Vec<u64>,
    since: u64,
}

impl WriteTracker {
    /// A record for a data area of `data_bytes`, complete after transaction `since`.
    pub fn new(data_bytes: u64, since: u64) -> WriteTracker {
        let mut shift = MIN_BLOCK_BYTES.trailing_zeros();
        while data_bytes.div_ceil(1 << shift) > MAX_ENTRIES {
            shift += 1;
        }
        let blocks = data_bytes.div_ceil(1 << shift) as usize;
        WriteTracker { shift, data_bytes, last: vec![0; blocks], since }
    }

    /// Bytes of one block.
    pub fn block_bytes(&self) -> u64 {
        1 << self.shift
    }

    /// Bytes of DRAM the table takes.
    pub fn dram_bytes(&self) -> u64 {
        self.last.len() as u64 * 8
    }

    /// The record is complete for every transaction after this one.
    pub fn since(&self) -> u64 {
        self.since
    }

    /// Notes that transaction `tx` wrote `[offset, offset + len)` (inside the data area).
    pub fn mark(&mut self, offset: u64, len: u64, tx: u64) {
        if len == 0 {
            return;
        }
        let first = (offset >> self.shift) as usize;
        let last = ((offset + len - 1) >> self.shift) as usize;
        for entry in &mut self.last[first..=last] {
            *entry = tx;
        }
    }

    /// The data-area ranges `(offset, len)` written after transaction `t`,
    /// in order, adjacent blocks merged; `None` if the record does not go
    /// back to `t`.
    pub fn written_after(&self, t: u64) -> Option<Vec<(u64, u64)>> {
        if t < self.since {
            return None;
        }
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for (i, &tx) in self.last.iter().enumerate() {
            if tx <= t {
                continue;
            }
            let start = (i as u64) << self.shift;
            let len = self.block_bytes().min(self.data_bytes - start);
            match ranges.last_mut() {
                Some((at, n)) if *at + *n == start => *n += len,
                _ => ranges.push((start, len)),
            }
        }
        Some(ranges)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_written_after_a_transaction_merge_and_clip() {
        let mut t = WriteTracker::new(5 * 1024 + 256, 3);
        assert_eq!((t.block_bytes(), t.dram_bytes()), (1024, 6 * 8));
        t.mark(10, 1, 4);
        t.mark(1023, 2, 5); // blocks 0 and 1
        t.mark(3 * 1024, 1024, 6);
        t.mark(5 * 1024 + 100, 156, 7); // the partial last block
        t.mark(0, 0, 9); // nothing
        assert_eq!(t.written_after(3).unwrap(), [(0, 2048), (3072, 1024), (5120, 256)]);
        assert_eq!(t.written_after(5).unwrap(), [(3072, 1024), (5120, 256)]);
        assert_eq!(t.written_after(7).unwrap(), []);
        assert_eq!(t.written_after(2), None, "before the record began");
    }

    #[test]
    fn large_areas_get_larger_blocks_within_the_bound() {
        let t = WriteTracker::new(1 << 30, 0);
        assert_eq!((t.block_bytes(), t.dram_bytes()), (1024, 8 << 20), "8 MiB per GiB");
        let t = WriteTracker::new(32 << 30, 0);
        assert_eq!(t.block_bytes(), 4096);
        assert!(t.dram_bytes() <= MAX_ENTRIES * 8);
    }
}
