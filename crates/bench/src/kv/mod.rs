//! The key-value suites of issue 4 (`pmwire bench kv`, `http-wal`,
//! `btree`), the collections suite of issue 15 (`kv --only collections`) and their peers.

pub mod btree;
pub mod bound;
pub mod child;
pub mod collections;
pub mod scripts;
pub mod http_wal;
pub mod placement;
pub mod redis;
pub mod resp_suite;
pub mod trials;
pub mod ycsb;
