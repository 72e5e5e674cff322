//! `pmwire-log`: durable logs in persistent memory.
//!
//! - [`AppendLog`]: a circular log of variable-length entries whose tail is
//!   recorded one of three ways ([`TailStrategy`]): an 8 B tail word, a
//!   rotating counter (seed 000 §6.2), or self-validating entries that need
//!   one drain per append. For Raft storage it also reads any entry in
//!   O(1), appends batches with one drain, drops a suffix durably, and
//!   starts at any LSN ([`AppendLog::create_at`], [`AppendLog::restart_at`]).
//! - [`ExtentLog`]: PASTE's log of 8-byte buffer extents (seed 001 §3.2),
//!   one atomic store per record, with all-or-nothing groups.
//!
//! Neither log owns its medium: each method takes the [`pmem::Media`] and
//! the log remembers the `base` offset it was created at, so many
//! structures share one region. `docs/FORMAT.md` ("Logs") gives the byte layout
//! and the crash analysis; [`crash`] holds the crash-state checks.
//!
//! ```
//! use pmem::{Media, MemMedia};
//! use pmwire_log::{AppendLog, Extent, ExtentLog, LogConfig, TailStrategy};
//!
//! let config = LogConfig::new(4096, TailStrategy::SelfValidating);
//! let mut media = MemMedia::new(AppendLog::required_size(&config) as usize);
//! let mut log = AppendLog::create(&mut media, 0, config).unwrap();
//! assert_eq!(log.append(&mut media, b"first").unwrap(), 0);
//! assert_eq!(log.append(&mut media, b"second").unwrap(), 1);
//! log.truncate(&mut media, 1).unwrap();
//!
//! // A crash now loses nothing acknowledged: recovery scans the entries.
//! let log = AppendLog::open(&mut media, 0).unwrap();
//! assert_eq!(log.read_all(&media), vec![(1, b"second".to_vec())]);
//!
//! let mut media = MemMedia::new(ExtentLog::required_size(64) as usize);
//! let mut extents = ExtentLog::create(&mut media, 0, 64).unwrap();
//! let extent = Extent { buf_idx: 7, offset: 0, len: 1280 };
//! extents.append(&mut media, extent).unwrap();
//! let extents = ExtentLog::open(&mut media, 0).unwrap();
//! assert_eq!(extents.read_all(&media), vec![(0, extent)]);
//! ```
#![deny(missing_docs)]

mod append;
mod config;
pub mod crash;
mod error;
mod extent;
mod format;

pub use append::{prefetch_entry, store_entry_nodrain, AppendLog, Entries, PREFETCH_AHEAD_MAX};
pub use config::{Faults, LogConfig, TailStrategy, MAX_BATCH_SPAN_BYTES, MAX_CAPACITY_BYTES, MAX_TAIL_SPAN_BYTES};
pub use error::{AppendError, CreateError, OpenError, RestartError, SuffixTruncateError, TruncateError};
pub use extent::{Extent, ExtentLog, MAX_CAPACITY_EXTENTS, MAX_GROUP, MAX_OFFSET};
pub use format::{EntryHeader, APPEND_FORMAT_VERSION, BASE_ALIGN, ENTRY_HEADER_BYTES, EXTENT_FORMAT_VERSION, MAX_POS};

/// An entry's sequence number; the first entry of a log is 0.
pub type Lsn = u64;

#[cfg(test)]
mod tests;
