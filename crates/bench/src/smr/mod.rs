//! `pmwire bench smr` (issue 12): replication benchmarks.
//!
//! - [`peers`]: etcd and Redis with replicas, started and driven as their
//!   users run them, for comparison with pmwire's replicas.
//! - [`dare`]: seed 000's DARE-persistent bound from our own RPC and
//!   one-sided persistent write latencies.

pub mod dare;
pub mod peers;
pub mod suite;
