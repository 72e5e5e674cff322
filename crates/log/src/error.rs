//! Typed errors, one enum per operation, shared by both logs.
//!
//! An error is returned before anything is written to the media: a failed
//! `create` leaves no valid header, a failed `append` or `truncate` leaves
//! the log exactly as it was.

use thiserror::Error;

/// Why `create` refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CreateError {
    /// The media is too small for the log at `base`.
    #[error("media of {have} B too small: the log needs {needed} B at base {base}")]
    MediaTooSmall {
        /// Bytes needed past `base`.
        needed: u64,
        /// Where the log would start.
        base: u64,
        /// The media's size.
        have: u64,
    },
    /// `base` is not a multiple of 256 B (one XPLine).
    #[error("base {base} is not a multiple of {align} B")]
    Misaligned {
        /// The offending base.
        base: u64,
        /// The required alignment.
        align: u64,
    },
    /// The entry-space capacity is unusable.
    #[error("capacity {capacity} unusable: {why}")]
    BadCapacity {
        /// The requested capacity.
        capacity: u64,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The first LSN of a new log must be below `2^63 - 1`.
    #[error("first LSN {first} beyond the largest an entry may carry")]
    BadFirstLsn {
        /// The requested first LSN.
        first: u64,
    },
    /// A rotating tail needs `blocks ≥ 1`, a stride that is a positive
    /// multiple of 8, and a span `(blocks - 1) * stride + 8` of at most
    /// [`MAX_TAIL_SPAN_BYTES`](crate::MAX_TAIL_SPAN_BYTES).
    #[error("bad rotation: {blocks} blocks of stride {stride} (need blocks >= 1, stride a positive multiple of 8, span <= 4 GiB)")]
    BadRotation {
        /// Requested blocks.
        blocks: u32,
        /// Requested stride.
        stride: u32,
    },
}

/// Why `open` could not recover a log.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum OpenError {
    /// The media is too small to hold a header at `base`.
    #[error("media of {have} B too small for a log header at base {base}")]
    MediaTooSmall {
        /// Where the log would start.
        base: u64,
        /// The media's size.
        have: u64,
    },
    /// `base` is not a multiple of 256 B.
    #[error("base {base} is not a multiple of 256 B")]
    Misaligned {
        /// The offending base.
        base: u64,
    },
    /// No log of this kind starts at `base`.
    #[error("bad magic {found:#018x} at base {base}: not a {expected}")]
    BadMagic {
        /// Where we looked.
        base: u64,
        /// The word found.
        found: u64,
        /// The kind of log expected.
        expected: &'static str,
    },
    /// The header's CRC-32C does not match (a torn or corrupted header).
    #[error("header checksum mismatch at base {base}: stored {stored:#010x}, computed {computed:#010x}")]
    HeaderChecksum {
        /// Where the header is.
        base: u64,
        /// The checksum on the media.
        stored: u32,
        /// The checksum of the bytes on the media.
        computed: u32,
    },
    /// The header is from a format version this code does not read.
    #[error("unsupported format version {found} (this build reads {supported})")]
    UnsupportedVersion {
        /// The version on the media.
        found: u32,
        /// The version this code reads.
        supported: u32,
    },
    /// The header checksums but describes an impossible log.
    #[error("header describes an invalid log: {why}")]
    BadConfig {
        /// What is wrong.
        why: String,
    },
    /// Neither head slot checksums.
    #[error("both head slots are invalid")]
    BadHead,
    /// The persisted tail or head disagrees with the entries on the media.
    #[error("log corrupt at logical position {pos} (LSN {lsn}): {why}")]
    Corrupt {
        /// Logical byte position (append log) or extent index (extent log).
        pos: u64,
        /// The LSN or index expected there.
        lsn: u64,
        /// What was found.
        why: String,
    },
}

/// Why `append` (or `append_group`) refused. Nothing was written.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum AppendError {
    /// Not enough free space; truncate first.
    #[error("log full: {needed} B needed, {free} B free")]
    Full {
        /// Bytes (or extents) the append needs, including wrap-around waste.
        needed: u64,
        /// Bytes (or extents) free.
        free: u64,
    },
    /// The payload can never fit, even in an empty log.
    #[error("payload of {len} B exceeds the maximum of {max} B")]
    TooLarge {
        /// The payload's length.
        len: u64,
        /// The largest payload this log takes.
        max: u64,
    },
    /// An extent field does not fit its packed width.
    #[error("extent offset {offset} exceeds the packed maximum {max}")]
    ExtentOutOfRange {
        /// The offending offset.
        offset: u16,
        /// The largest offset that packs.
        max: u16,
    },
    /// The log's LSN or position space is used up (LSN `2^63 - 1` or
    /// position `2^63`): only reachable from a head slot near the limits.
    #[error("log exhausted: next LSN {next_lsn}, tail position {tail_pos}")]
    Exhausted {
        /// The LSN the append would get.
        next_lsn: u64,
        /// The logical position of the tail.
        tail_pos: u64,
    },
    /// A batch of two or more entries spans more than
    /// [`MAX_BATCH_SPAN_BYTES`](crate::MAX_BATCH_SPAN_BYTES) (split it).
    #[error("batch spans {span} B, above the maximum of {max} B")]
    BatchTooLarge {
        /// Logical bytes the batch would span, skip waste included.
        span: u64,
        /// The largest span allowed.
        max: u64,
    },
    /// An extent group is empty or longer than the log accepts.
    #[error("extent group of {len} extents (allowed: 1..={max})")]
    BadGroup {
        /// The group's length.
        len: usize,
        /// The longest group allowed.
        max: usize,
    },
}

/// Why `truncate` refused. Nothing was written.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TruncateError {
    /// `keep_from` lies past the end of the log.
    #[error("cannot keep from {keep_from}: the log ends before {next}")]
    BeyondTail {
        /// The requested first entry to keep.
        keep_from: u64,
        /// The next LSN or index to be appended.
        next: u64,
    },
}

/// Why `truncate_suffix` refused. Nothing was written.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SuffixTruncateError {
    /// `from` lies below the head: those entries are gone already, and a
    /// suffix truncation never moves the head.
    #[error("cannot drop from {from}: the log starts at {head}")]
    BelowHead {
        /// The requested first entry to drop.
        from: u64,
        /// The first retained entry.
        head: u64,
    },
    /// `from` lies past the end of the log.
    #[error("cannot drop from {from}: the log ends before {next}")]
    BeyondTail {
        /// The requested first entry to drop.
        from: u64,
        /// The next LSN to be appended.
        next: u64,
    },
}

/// Why `restart_at` refused. Nothing was written.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RestartError {
    /// `first` lies below the head: the head LSN never goes down (the head
    /// slot with the larger LSN wins at recovery).
    #[error("cannot restart at {first}: the log starts at {head}")]
    BelowHead {
        /// The requested next LSN.
        first: u64,
        /// The first retained entry.
        head: u64,
    },
    /// `first` is at or beyond the largest LSN an entry may carry.
    #[error("cannot restart at {first}: beyond the largest LSN")]
    TooLarge {
        /// The requested next LSN.
        first: u64,
    },
}
