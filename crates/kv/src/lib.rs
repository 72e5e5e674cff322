//! `pmwire-kv`: the key-value engine of issue 4 — PASTE-style zero-copy
//! persistent storage (seed 001 §3–§4): values stay in the pool buffers
//! the network received them into; a WAL of 8 B extents makes a batch of
//! operations durable with two drains; a copy-on-write B+tree, updated by
//! checkpoints with one root switch per batch, keeps the WAL short.
//!
//! The engine does no I/O besides the [`pmem::Media`] it is handed: the
//! caller (one event-loop thread) stages a batch of operations, calls
//! [`Engine::commit`] once, then sends the replies.
//!
//! ```
//! use pmem::{Media, MemMedia};
//! use pmwire_kv::{Engine, KvConfig};
//! use pmwire_log::Extent;
//!
//! let config = KvConfig { tree_nodes: 16, wal_slots: 256, log_slots: 64, ..KvConfig::new(64) };
//! let mut media = MemMedia::new(config.required_size().unwrap() as usize);
//! let mut kv = Engine::create(&mut media, 0, &config).unwrap();
//!
//! // Zero-copy: the value was received into a pool buffer we hold.
//! let buf = kv.pool_mut().alloc().unwrap();
//! let at = kv.pool().buffer_offset(buf);
//! media.write(at, b"hello");
//! kv.set_extents(&mut media, b"greeting", 0, &[Extent { buf_idx: buf, offset: 0, len: 5 }]).unwrap();
//! kv.pool_mut().release(buf); // the ring's reference; the engine holds its own
//! // Copy mode: the engine copies into buffers it allocates.
//! kv.set_copy(&mut media, b"counter", 0, b"42").unwrap();
//! kv.commit(&mut media).unwrap(); // durable now: reply
//!
//! // After a crash or restart: the tree plus the WAL's replay.
//! let kv = Engine::open(&mut media, 0).unwrap();
//! let mut value = Vec::new();
//! assert_eq!(kv.get_bytes(&media, b"greeting", &mut value), Some(0));
//! assert_eq!(value, b"hello");
//! assert_eq!(kv.len(), 2);
//! kv.check(&media).unwrap();
//! ```
#![deny(missing_docs)]

pub mod chain;
pub mod crash;
mod engine;
mod error;
pub mod record;
mod index;
mod small;
#[cfg(test)]
mod tests;

pub use engine::{Engine, Entry, Faults, KvConfig, Savepoint, Stats};
pub use error::{CheckpointError, CommitError, CreateError, ExtentError, LogError, OpenError, StageError};
