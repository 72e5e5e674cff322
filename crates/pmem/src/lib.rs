//! `pmem`: how bytes become durable in persistent memory.
//!
//! A [`Region`] maps a file and says honestly what it is (DAX, devdax,
//! ordinary file, or emulated on tmpfs) and what a persisted store survives.
//! Its persist strategy (flush instruction, drain, non-temporal copy ISA)
//! is chosen once at map time. Every persistent structure writes through
//! the [`Media`] trait, which a [`Region`], a volatile [`MemMedia`] and a
//! recording [`trace::TracedMedia`] all implement. On top of it, small
//! failure-atomic state: counters and registers ([`counter`]) and a
//! two-slot checksummed record ([`DualRecord`]).
//!
//! ```
//! use pmem::{Media, Region, RegionKind};
//! let dir = tempfile::tempdir_in("/dev/shm").unwrap();
//! let mut region = Region::create(dir.path().join("pool"), 1 << 20).unwrap();
//! assert_eq!(region.kind(), RegionKind::Emulated);
//! region.memcpy_persist(0, b"durable bytes");
//! region.persist_u64(64, 42);
//! assert_eq!(region.read_u64(64), 42);
//! ```
#![deny(missing_docs)]

pub mod copy;
pub mod counter;
pub mod crc;
pub mod flush;
pub mod layout;
pub mod le;
pub mod lock;
pub mod media;
pub mod record;
pub mod region;
pub mod trace;

pub use copy::{CopyIsa, NtCopier};
pub use counter::{NaiveCounter, Rotation, RotatingCounter, RotatingRegister};
pub use flush::{FlushInstruction, Persister};
pub use layout::{Padding, LINE, XPLINE};
pub use media::{Media, MemMedia, NoFlush, NT_THRESHOLD};
pub use record::{DualRecord, RecordFaults, RecordFormatError, RecordOpenError, RecordStoreError};
pub use region::{PersistenceDomain, Region, RegionError, RegionKind, RegionOptions};
