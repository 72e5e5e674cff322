//! Replication: a replicated key-value state machine on tikv's raft-rs.
//!
//! raft-rs's `RawNode` does no I/O; a [`node::Replica`] drives it as a
//! [`reactor::Service`] over the `Transport` seam: it persists what each
//! `Ready` demands, sends the messages, applies committed entries to the
//! [`machine::Machine`] and answers clients.

#![deny(missing_docs)]

pub mod client;
pub mod command;
pub mod floor;
pub mod links;
pub mod machine;
pub mod node;
pub mod pmem_store;
pub mod sim;
pub mod state;
pub mod store;
