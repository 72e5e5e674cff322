//! `pmwire bench smr` (issue 12): replication benchmarks.
//!
//! - [`suite`]: `pmwire bench smr`, three replica processes, latency and
//!   throughput.
//! - [`peers`]: etcd and Redis with replicas, started and driven as their
//!   users run them, for comparison with pmwire's replicas.
//! - [`events`]: the event-driven load generator (one thread, every
//!   connection of a throughput point).
//! - [`raw_floor`]: the machine's floor, a replicated write's four
//!   messages over plain TCP sockets (no UCX, no loop, no Raft).
//! - [`dare`]: seed 000's DARE-persistent bound from our own RPC and
//!   one-sided persistent write latencies.
//! - [`crash`]: `pmwire bench smr-crash`, kill -9 of replicas under load,
//!   every history checked for lost writes and linearizability.
//! - [`netns`]: the network namespaces and faults of `smr-crash --netns`.
//! - [`links`]: the cluster's secret for the replicas a benchmark starts,
//!   and its clients' authenticated transports.

pub mod crash;
pub mod dare;
pub mod events;
pub mod links;
pub mod netns;
pub mod peers;
pub mod raw_floor;
pub mod suite;
