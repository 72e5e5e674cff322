//! Replication: a replicated state machine on tikv's raft-rs.
//!
//! raft-rs's `RawNode` does no I/O; a [`node::Replica`] drives it as a
//! [`reactor::Service`] over the `Transport` seam: it persists what each
//! `Ready` demands, sends the messages, applies committed entries to its
//! [`state::StateMachine`] (the put/get/del/cas [`kvmap::KvMap`] by
//! default) and answers clients: SMR1 transport clients
//! ([`command`], [`client`]) or, through the embedding API, the server
//! that owns the replica ([`node::Replica::propose`],
//! [`node::Replica::read_index`], [`node::Replica::take_done`]).

#![deny(missing_docs)]

pub mod client;
pub mod command;
pub mod floor;
pub mod kvmap;
pub mod node;
pub mod pmem_store;
pub mod session;
pub mod sim;
pub mod smr1;
pub mod snapshot;
pub mod state;
pub mod store;
