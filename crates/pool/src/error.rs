//! Typed errors, one enum per operation. An error is returned before
//! anything is written to the media.

use thiserror::Error;

/// Why a pool could not be laid out or created.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CreateError {
    /// `base` is not a multiple of [`BASE_ALIGN`](crate::BASE_ALIGN).
    #[error("base {base} is not a multiple of {align} B")]
    Misaligned {
        /// The offending base.
        base: u64,
        /// The required alignment.
        align: u64,
    },
    /// The configuration cannot be laid out.
    #[error("bad pool configuration: {why}")]
    BadConfig {
        /// What is wrong.
        why: String,
    },
    /// The media is too small for the layout.
    #[error("media of {have} B too small: the pool needs {needed} B at base {base}")]
    MediaTooSmall {
        /// Bytes needed past `base`.
        needed: u64,
        /// Where the pool would start.
        base: u64,
        /// The media's size.
        have: u64,
    },
}

/// Why `open` found no usable pool.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum OpenError {
    /// `base` is misaligned or the media too small for a header.
    #[error("no room for a pool header at base {base} in {have} B")]
    MediaTooSmall {
        /// Where we looked.
        base: u64,
        /// The media's size.
        have: u64,
    },
    /// No pool starts here (or its `create` did not finish).
    #[error("bad magic {found:#018x} at base {base}: not a pmwire pool")]
    BadMagic {
        /// Where we looked.
        base: u64,
        /// The word found.
        found: u64,
    },
    /// The header's CRC-32C does not match (a torn or damaged header).
    #[error("pool header checksum mismatch at base {base}")]
    HeaderChecksum {
        /// Where the header is.
        base: u64,
    },
    /// A format version this code does not read.
    #[error("unsupported pool format version {found} (this build reads {supported})")]
    UnsupportedVersion {
        /// The version on the media.
        found: u32,
        /// The version this code reads.
        supported: u32,
    },
    /// The header checksums but describes an unusable layout.
    #[error("pool header describes an unusable layout: {why}")]
    BadConfig {
        /// What is wrong.
        why: String,
    },
}

/// Why an extent does not describe bytes of a pool buffer.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ExtentError {
    /// The buffer index is beyond the pool.
    #[error("buffer {buf_idx} beyond the pool's {buffers}")]
    NoSuchBuffer {
        /// The index.
        buf_idx: u32,
        /// Buffers in the pool.
        buffers: u32,
    },
    /// `offset + len` runs past the end of the buffer.
    #[error("extent [{offset}, +{len}) past the {buf_size} B buffer")]
    OutOfBuffer {
        /// The offset.
        offset: u16,
        /// The length.
        len: u16,
        /// The buffer size.
        buf_size: u32,
    },
    /// The buffer is free: the caller holds no reference to it.
    #[error("buffer {buf_idx} is free")]
    Free {
        /// The index.
        buf_idx: u32,
    },
}
