//! The remote suites (issue 3): `pmwire serve` as a child process, the
//! kill -9 crash campaign, and the remote latency, bulk and log-server
//! benchmarks over UCX tcp and shared memory.

pub mod bulk;
pub mod common;
pub mod crash;
pub mod latency;
pub mod logserver;
pub mod offload;
pub mod server;
