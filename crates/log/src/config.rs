//! How an [`AppendLog`](crate::AppendLog) is shaped: entry-space size, tail
//! strategy, padding, and (for tests only) planted bugs.
//!
//! Invariants checked by [`LogConfig::validate`] (and so by `create` and
//! `open`): the capacity is a non-zero multiple of the padding alignment,
//! large enough for one empty entry and at most [`MAX_CAPACITY_BYTES`]; a
//! rotating tail has at least one block, a stride that is a non-zero
//! multiple of 8, and spans at most [`MAX_TAIL_SPAN_BYTES`]. The two bounds
//! make every size and position the log computes from a valid config fit
//! in a `u64` (`AppendLog::required_size` asserts them), however the
//! config arrived (a wire request, a header on the media).

use pmem::Padding;

use crate::error::CreateError;
use crate::format::ENTRY_HEADER_BYTES;

/// Largest entry space a log may have: 2^56 B (64 PiB), far beyond any
/// persistent memory, and low enough that a log's size (header block + tail
/// area + capacity) and every logical position below [`MAX_POS`](crate::MAX_POS)
/// plus two capacities fit in a `u64`.
pub const MAX_CAPACITY_BYTES: u64 = 1 << 56;
/// Largest span of a rotating tail, `(blocks - 1) * stride + 8`: 4 GiB
/// (the paper's tail spans 2312 B).
pub const MAX_TAIL_SPAN_BYTES: u64 = 1 << 32;

/// Largest logical span of one [`append_batch`](crate::AppendLog::append_batch)
/// of two or more entries, from the tail it starts at to its end, skip
/// waste included: 1 MiB. Self-validating recovery scrubs this much free
/// space after the tail, where a torn batch may have left its entries
/// (`docs/FORMAT.md`, "Batches"); larger batches are split by the caller.
pub const MAX_BATCH_SPAN_BYTES: u64 = 1 << 20;

/// Where the end of the log is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TailStrategy {
    /// An 8 B tail word persisted in place after each entry (two drains per
    /// append; every append persists the same cache line).
    Naive,
    /// The tail lives in a [`pmem::RotatingRegister`] of `blocks` chunks
    /// `stride` bytes apart (seed 000 §6.2): still two drains per append,
    /// but consecutive tail updates touch different lines.
    Rotating {
        /// Number of chunks (the paper: 10; eRPC's code: 16).
        blocks: u32,
        /// Bytes between chunks (256 keeps them in distinct XPLines).
        stride: u32,
    },
    /// No tail at all: each entry carries its LSN and a CRC-32C, so an
    /// append needs one drain and recovery scans to the first invalid entry.
    SelfValidating,
}

impl TailStrategy {
    /// The rotating tail in the paper's shape (10 × 256 B).
    ///
    /// Since format version 2 the chunks form a [`pmem::RotatingRegister`]
    /// (the tail is the XOR of the chunks) rather than a monotonic
    /// counter, so a suffix truncation can lower it with one store.
    pub const ROTATING_PAPER: TailStrategy = TailStrategy::Rotating { blocks: 10, stride: 256 };

    /// The on-media code of the strategy.
    pub(crate) fn code(self) -> u32 {
        match self {
            TailStrategy::Naive => 0,
            TailStrategy::Rotating { .. } => 1,
            TailStrategy::SelfValidating => 2,
        }
    }

    /// A short name for reports (`naive`, `rotating`, `self-validating`).
    pub fn name(self) -> &'static str {
        match self {
            TailStrategy::Naive => "naive",
            TailStrategy::Rotating { .. } => "rotating",
            TailStrategy::SelfValidating => "self-validating",
        }
    }
}

/// Planted bugs for the crash checker's canaries. Never set outside tests.
#[doc(hidden)]
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Faults {
    /// The naive/rotating tail is stored but never flushed.
    pub skip_tail_flush: bool,
    /// The tail is persisted before the entry it covers.
    pub tail_before_entry: bool,
    /// Self-validating recovery accepts entries by length and LSN alone.
    pub skip_checksum: bool,
    /// Recovery leaves the remnants of a torn append in place (self-validating
    /// append log; extent log).
    pub skip_scrub: bool,
    /// A suffix truncation returns before it is durable: the lowered naive
    /// or rotating tail is stored but not flushed; the self-validating
    /// scrub of the dropped entries is stored but neither flushed nor drained.
    pub suffix_not_durable: bool,
    /// Self-validating suffix truncation scrubs the dropped entries in the
    /// same drain as its truncation record, instead of after it.
    pub scrub_before_record: bool,
}

impl Faults {
    /// Whether any fault is planted.
    pub fn any(&self) -> bool {
        let suffix = self.suffix_not_durable || self.scrub_before_record;
        self.skip_tail_flush || self.tail_before_entry || self.skip_checksum || self.skip_scrub || suffix
    }
}

/// The shape of an append log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// Bytes of entry space (a multiple of `padding.align()`).
    pub capacity: u64,
    /// Where the tail is recorded.
    pub tail: TailStrategy,
    /// Alignment and padding of entries (seed 004 H5–H7).
    pub padding: Padding,
    /// Planted bugs (tests only).
    #[doc(hidden)]
    pub faults: Faults,
}

impl LogConfig {
    /// A log of `capacity` bytes of entry space, entries padded to 64 B
    /// lines, without faults.
    ///
    /// Line padding is the default because no entry then shares a line
    /// with the next one, whose header store would otherwise hit a line
    /// whose write-back is still in flight. On this DRAM machine it is
    /// faster for the self-validating log at every size from 64 B to 4 KiB
    /// (5–15% at 64–512 B, `pmwire bench local --only log`); on Optane the
    /// model predicts 3.5× (`docs/MODEL.md`, the recorded trace), as seed
    /// 004's H7 advises. It costs up to 63 B of entry space per entry;
    /// [`with_padding`](Self::with_padding)`(Padding::None)` packs entries.
    pub fn new(capacity: u64, tail: TailStrategy) -> Self {
        LogConfig { capacity, tail, padding: Padding::Line, faults: Faults::default() }
    }

    /// The same config with `padding`.
    pub fn with_padding(mut self, padding: Padding) -> Self {
        self.padding = padding;
        self
    }

    /// Bytes an entry with a `payload_len`-byte payload occupies.
    /// `payload_len` is at most `u32::MAX` (the entry header's length
    /// field; callers check it against [`max_payload`](Self::max_payload)
    /// or read it from that field), so the sum cannot overflow.
    #[inline]
    pub fn entry_size(&self, payload_len: u64) -> u64 {
        assert!(payload_len <= u32::MAX as u64, "entry payload of {payload_len} B exceeds the length field");
        // Every padding is a power of two: round with a mask, not a division.
        let mask = self.padding.align() as u64 - 1;
        (ENTRY_HEADER_BYTES + payload_len + mask) & !mask
    }

    /// The largest payload one entry can hold (an entry may not exceed
    /// the entry space, nor `u32::MAX` bytes of payload).
    #[inline]
    pub fn max_payload(&self) -> u64 {
        let fit = self.capacity.saturating_sub(ENTRY_HEADER_BYTES);
        fit.min(u32::MAX as u64 - 1)
    }

    /// Checks the invariants in the module header.
    pub fn validate(&self) -> Result<(), CreateError> {
        let align = self.padding.align() as u64;
        if self.capacity < align.max(ENTRY_HEADER_BYTES) {
            return Err(CreateError::BadCapacity { capacity: self.capacity, why: "below one entry" });
        }
        if self.capacity > MAX_CAPACITY_BYTES {
            return Err(CreateError::BadCapacity { capacity: self.capacity, why: "above the maximum of 2^56 B" });
        }
        if !self.capacity.is_multiple_of(align) {
            return Err(CreateError::BadCapacity { capacity: self.capacity, why: "not a multiple of the padding" });
        }
        if let TailStrategy::Rotating { blocks, stride } = self.tail {
            if blocks == 0 || stride == 0 || !stride.is_multiple_of(8) {
                return Err(CreateError::BadRotation { blocks, stride });
            }
            if rotation_span(blocks, stride) > MAX_TAIL_SPAN_BYTES {
                return Err(CreateError::BadRotation { blocks, stride });
            }
        }
        Ok(())
    }
}

/// Bytes a rotating tail of `blocks ≥ 1` chunks `stride` apart spans:
/// `(blocks - 1) * stride + 8`. Both factors are below 2^32, so neither the
/// product nor the sum can overflow a `u64`.
pub(crate) fn rotation_span(blocks: u32, stride: u32) -> u64 {
    assert!(blocks >= 1, "a rotation needs at least one block");
    (blocks as u64 - 1) * stride as u64 + 8
}
