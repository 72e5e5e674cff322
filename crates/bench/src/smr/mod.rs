//! `pmwire bench smr` (issue 12): replication benchmarks.
//!
//! - [`peers`]: etcd and Redis with replicas, started and driven as their
//!   users run them, for comparison with pmwire's replicas.

pub mod peers;
pub mod suite;
