//! Typed errors, one enum per operation.
//!
//! An error from `insert`, `delete`, `get` or `range` is returned before
//! anything is written: the tree is exactly as it was. A failed `create`
//! leaves no valid header. An unrecoverable persistence failure (a bug, or
//! bytes changed under a live tree) panics instead: it is not an error a
//! caller can handle.

use thiserror::Error;

/// Why `create` refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CreateError {
    /// The media is too small for the tree at `base`.
    #[error("media of {have} B too small: the tree needs {needed} B at base {base}")]
    MediaTooSmall {
        /// Bytes needed past `base`.
        needed: u64,
        /// Where the tree would start.
        base: u64,
        /// The media's size.
        have: u64,
    },
    /// `base` is not a multiple of 256 B (one XPLine).
    #[error("base {base} is not a multiple of 256 B")]
    Misaligned {
        /// The offending base.
        base: u64,
    },
    /// The node count is outside `MIN_NODES ..= u32::MAX`.
    #[error("{nodes} nodes: need at least {min}")]
    TooFewNodes {
        /// The requested count.
        nodes: u64,
        /// The smallest count accepted.
        min: u64,
    },
}

/// Why `open` could not recover a tree.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum OpenError {
    /// The media is too small for the tree's header (or its nodes).
    #[error("media of {have} B too small for a tree at base {base}")]
    MediaTooSmall {
        /// Where the tree would start.
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
    /// No tree starts at `base` (or its `create` did not finish).
    #[error("bad magic {found:#018x} at base {base}: not a pmwire B+tree")]
    BadMagic {
        /// Where we looked.
        base: u64,
        /// The word found.
        found: u64,
    },
    /// The header's CRC-32C does not match.
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
    /// The header checksums but describes a tree this code cannot use.
    #[error("header describes an unusable tree: {why}")]
    BadConfig {
        /// What is wrong.
        why: String,
    },
    /// The root word is not a valid root.
    #[error("invalid root word {word:#018x}")]
    BadRoot {
        /// The word found.
        word: u64,
    },
    /// A reachable node is damaged or the structure is not a tree.
    #[error("node {node} corrupt: {why}")]
    Corrupt {
        /// The node index.
        node: u32,
        /// What was found.
        why: String,
    },
}

/// Why `insert` refused. Nothing was written.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum InsertError {
    /// The key is longer than `MAX_KEY_BYTES`.
    #[error("key of {len} B exceeds the maximum of {max} B")]
    KeyTooLong {
        /// The key's length.
        len: usize,
        /// The longest key.
        max: usize,
    },
    /// The value is longer than `MAX_VALUE_BYTES`.
    #[error("value of {len} B exceeds the maximum of {max} B")]
    ValueTooLong {
        /// The value's length.
        len: usize,
        /// The longest value.
        max: usize,
    },
    /// Too few free nodes for the worst case of this insert.
    #[error("tree full: {needed} free nodes needed, {free} free")]
    Full {
        /// Free nodes the worst case needs.
        needed: usize,
        /// Free nodes.
        free: usize,
    },
}

/// Why `delete` refused. Nothing was written.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DeleteError {
    /// The key is longer than `MAX_KEY_BYTES` (so it cannot be present).
    #[error("key of {len} B exceeds the maximum of {max} B")]
    KeyTooLong {
        /// The key's length.
        len: usize,
        /// The longest key.
        max: usize,
    },
    /// Too few free nodes for the worst case of this delete (copy-on-write
    /// needs fresh nodes to delete, too).
    #[error("tree full: {needed} free nodes needed, {free} free")]
    Full {
        /// Free nodes the worst case needs.
        needed: usize,
        /// Free nodes.
        free: usize,
    },
}

/// Why `apply_batch` refused. Nothing was written; the tree is as it was.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BatchError {
    /// Operation `index` has a key longer than `MAX_KEY_BYTES`.
    #[error("operation {index}: key of {len} B exceeds the maximum of {max} B")]
    KeyTooLong {
        /// Which operation.
        index: usize,
        /// The key's length.
        len: usize,
        /// The longest key.
        max: usize,
    },
    /// Operation `index` has a value longer than `MAX_VALUE_BYTES`.
    #[error("operation {index}: value of {len} B exceeds the maximum of {max} B")]
    ValueTooLong {
        /// Which operation.
        index: usize,
        /// The value's length.
        len: usize,
        /// The longest value.
        max: usize,
    },
    /// Too few free nodes to go on at operation `index` (the nodes the
    /// batch replaced are not free until its root switch): apply fewer
    /// operations per batch.
    #[error("tree full at operation {index}: {needed} free nodes needed, {free} free")]
    Full {
        /// The operation that did not fit.
        index: usize,
        /// Free nodes its worst case needs.
        needed: usize,
        /// Free nodes left.
        free: usize,
    },
}

/// Why `get` or `range` refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LookupError {
    /// The key (or range bound) is longer than `MAX_KEY_BYTES`.
    #[error("key of {len} B exceeds the maximum of {max} B")]
    KeyTooLong {
        /// The key's length.
        len: usize,
        /// The longest key.
        max: usize,
    },
}

/// A tree invariant that does not hold (from `BTree::verify`).
#[derive(Debug, Error, PartialEq, Eq)]
#[error("tree invariant violated at node {node}: {why}")]
pub struct VerifyError {
    /// The node where it was found.
    pub node: u32,
    /// What is wrong.
    pub why: String,
}
