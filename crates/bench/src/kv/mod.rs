//! The key-value suites of issue 4 (`pmwire bench kv`, `http-wal`,
//! `btree`) and their peers.

pub mod btree;
pub mod bound;
pub mod child;
pub mod http_wal;
pub mod placement;
pub mod redis;
pub mod resp_suite;
pub mod trials;
pub mod ycsb;
