//! `pmwire bench kv-replicated` and `kv-replicated-crash` (issue 26):
//! `pmwire kv --cluster` members as child processes, measured beside
//! Redis + WAIT, etcd, single-node `pmwire kv` and the machine's floor,
//! and killed under load with every history checked.
//!
//! - [`members`]: the 3 members (start, kill -9, restart on their pools,
//!   the leader by `ROLE`) and a blocking RESP client.
//! - [`suite`]: `pmwire bench kv-replicated [--quick]`.
//! - [`catchup`]: its failover under load and a new member's catch-up
//!   rate (`--join`, `pmwire smr add`).
//! - [`crash`]: `pmwire bench kv-replicated-crash --runs N`, and the
//!   history checks it runs (lost writes, exact INCR counts, whole EXECs,
//!   linearizability per key by `lincheck::redis`).

pub mod catchup;
pub mod crash;
pub mod members;
pub mod suite;
