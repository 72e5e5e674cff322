//! `pmwire-btree`: a persistent, crash-consistent B+tree from byte-string
//! keys (≤ 255 B) to small values (≤ 256 B: up to 32 PASTE extents, or
//! inline bytes), for the KV engine of issue 4 (seed 001 §4.3.2).
//!
//! The tree is **copy-on-write** (shadow paging): an update writes new
//! copies of the nodes on its path into free nodes, drains once, then
//! switches an 8 B root word with one failure-atomic persisted store. A
//! crash therefore leaves either the old tree or the new one, never a mix;
//! nodes are 4 KB (16 XPLines), written with non-temporal stores. The free
//! list is volatile and rebuilt from reachability by [`BTree::open`], as
//! PASTE rebuilds buffer ownership: no crash leaks a node or hands one out
//! twice. `docs/format/btree.md` has the byte layout and the crash
//! argument; [`crash`] holds the crash-state checks and their planted bugs.
//!
//! Like the logs, the tree does not own its medium: every method takes the
//! [`pmem::Media`] and the tree remembers its `base`.
//!
//! ```
//! use std::ops::Bound;
//! use pmem::MemMedia;
//! use pmwire_btree::{BTree, Value};
//! use pmwire_log::Extent;
//!
//! let mut media = MemMedia::new(BTree::required_size(64) as usize);
//! let mut tree = BTree::create(&mut media, 0, 64).unwrap();
//! let extent = Extent { buf_idx: 7, offset: 0, len: 1280 };
//! tree.insert(&mut media, b"apple", &Value::from_extents(&[extent]).unwrap()).unwrap();
//! tree.insert(&mut media, b"banana", b"inline").unwrap();
//! tree.insert(&mut media, b"cherry", b"").unwrap();
//! assert_eq!(tree.delete(&mut media, b"cherry").unwrap().as_deref(), Some(&b""[..]));
//!
//! // After a crash, `open` recovers the last acknowledged state.
//! let tree = BTree::open(&media, 0).unwrap();
//! assert_eq!(tree.len(), 2);
//! assert_eq!(tree.get(&media, b"apple").unwrap().unwrap().extents().unwrap(), vec![extent]);
//! let keys: Vec<Vec<u8>> = tree.range(&media, Bound::Included(b"b"), Bound::Unbounded).map(|(k, _)| k).collect();
//! assert_eq!(keys, vec![b"banana".to_vec()]);
//! tree.verify(&media).unwrap();
//! ```
#![deny(missing_docs)]

pub mod bench;
pub mod crash;
mod error;
mod format;
mod iter;
mod tree;
mod value;
mod verify;

pub use error::{BatchError, CreateError, DeleteError, InsertError, LookupError, OpenError, VerifyError};
pub use format::{
    BASE_ALIGN, FORMAT_VERSION, MAX_HEIGHT, MAX_KEY_BYTES, MAX_VALUE_BYTES, MIN_FILL, NODE_BYTES, NODE_CAPACITY,
};
pub use iter::Range;
pub use tree::{BTree, BatchOp, Counters, Faults, MIN_NODES};
pub use value::{Value, MAX_EXTENTS};
pub use verify::TreeStats;

#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod tests;
