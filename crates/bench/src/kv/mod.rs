//! The key-value suites of issue 4 (`pmwire bench kv`, `http-wal`,
//! `btree`) and their peers.

pub mod btree;
pub mod redis;
pub mod ycsb;
