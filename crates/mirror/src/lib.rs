//! `pmwire-mirror`: failure-atomic transactions over persistent memory,
//! built to be mirrored synchronously (seed 002, issue 14).
//!
//! A [`Heap`] is a fixed-size data area behind a header and a redo log, on
//! any [`pmem::Media`] (a [`pmem::Region`] in production, a
//! [`pmem::trace::TracedMedia`] under the crash-state checker). A
//! transaction ([`Tx`]) writes byte ranges of the data area, separates
//! them into epochs with [`Tx::ofence`] (seed 002 §3's ordering fence),
//! may wait with [`Tx::dfence`] (its durability fence), and commits. After
//! a crash, [`Heap::open`] recovers every committed transaction and no
//! trace of an uncommitted one, never a torn epoch.
//!
//! The redo log's epochs are what a mirror streams: every transaction
//! hands its sealed epochs, fences and commit, in order, to an
//! [`EpochSink`]. [`NoMirror`] is seed 002's NO-SM; [`Mirror`] is the
//! network mirror (SM-RC, SM-OB, SM-DD over the `Transport` seam), and
//! [`Backup`] / [`BackupService`] the backup it streams to: [`wire`] is the
//! stream's format, [`stream`] what each strategy sends, [`backup`] what
//! the backup does with it, with no I/O, and [`net`] the I/O. Failover:
//! [`Heap::promote`] turns a backup's pool into a primary's in a new
//! generation of its [`history`]; [`rejoin_plan`] decides how a backup
//! rejoins (stream, incremental copy of the blocks [`tracking`] says were
//! written since, full copy, or refusal). The byte layouts and the crash
//! arguments are in docs/FORMAT.md ("Transactional heap", "History",
//! "Mirror stream"); [`crash`] and [`backup_crash`] hold the crash-state
//! checks and their planted bugs.
//!
//! Like the logs and the B+tree, the heap does not own its medium: `open`,
//! `read` and `begin` take it.
//!
//! ```
//! use pmem::MemMedia;
//! use pmwire_mirror::Heap;
//!
//! let mut media = MemMedia::new(Heap::required_size(4096, 4096) as usize);
//! let mut heap = Heap::create(&mut media, 0, 4096, 4096).unwrap();
//! let mut tx = heap.begin(&mut media);
//! tx.write(0, b"log entry").unwrap();
//! tx.ofence().unwrap(); // the entry persists before what follows
//! tx.write(1024, b"pointer to it").unwrap();
//! tx.commit().unwrap();
//!
//! let mut tx = heap.begin(&mut media);
//! tx.write(0, b"lost").unwrap();
//! tx.abort();
//!
//! // After a crash, `open` recovers exactly the committed transactions.
//! let (heap, recovery) = Heap::open(&mut media, 0).unwrap();
//! assert_eq!(recovery.last_committed, 1);
//! let mut buf = [0u8; 9];
//! heap.read(&media, 0, &mut buf).unwrap();
//! assert_eq!(&buf, b"log entry");
//! ```
#![deny(missing_docs)]

pub mod backup;
pub mod backup_crash;
pub mod crash;
pub mod format;
mod heap;
pub mod history;
pub mod net;
pub mod sink;
pub mod stream;
pub mod tracking;
pub mod whisper;
pub mod wire;

pub use backup::{Backup, HelloError, StreamError};
pub use heap::{CreateError, Faults, Heap, OpenError, OutOfBounds, Promotion, Recovery, Tx, TxError};
pub use history::{rejoin_plan, Generation, History, Plan};
pub use net::{BackupService, Mirror, MirrorError, OpenMirrorError};
pub use sink::{Committed, Epoch, EpochSink, NoMirror, Recorder, SinkError, SinkEvent};
pub use wire::Strategy;
