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
//!
//! A server embedding a one-replica cluster of the map: it turns the
//! replica in its own loop, proposes an SMR1 write as the machine's data
//! and reads linearizably once its read index is applied.
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::time::Duration;
//! use pmwire_smr::command::{Op, Request, Status};
//! use pmwire_smr::node::{Done, Replica, ReplicaConfig, Ticket};
//! use pmwire_smr::store::MemDurable;
//! use reactor::Reactor;
//! use transport::{InProcNetwork, InProcTransport, Limits};
//!
//! let net = InProcNetwork::new(Limits::default());
//! let replica: Replica<InProcTransport, MemDurable> = Replica::new(ReplicaConfig::new(1), MemDurable::new(&[1]), BTreeMap::new()).unwrap();
//! let mut node = Reactor::new(net.node(), replica);
//! let mut now = Duration::ZERO;
//! // Turns the loop (virtual time) until `ticket` is done.
//! let mut wait = |node: &mut Reactor<InProcTransport, Replica<InProcTransport, MemDurable>>, ticket: Ticket| loop {
//!     now += Duration::from_millis(1);
//!     node.turn(now);
//!     if let Some((_, done)) = node.service.take_done().into_iter().find(|(t, _)| *t == ticket) {
//!         return done;
//!     }
//! };
//! node.service.campaign().unwrap(); // the only voter leads at once
//! let put = Request { op: Op::Put, client: 1, seq: 1, key: b"k".to_vec(), value: b"v".to_vec(), expect: None };
//! let ticket = node.service.propose(put.to_bytes()).unwrap();
//! let Done::Applied { output, .. } = wait(&mut node, ticket) else { panic!("not applied") };
//! assert_eq!(output.status, Status::Ok);
//! let read = node.service.read_index().unwrap();
//! assert!(matches!(wait(&mut node, read), Done::Readable { .. }));
//! assert_eq!(node.service.machine().get(b"k"), Some(&b"v"[..]));
//! ```

#![deny(missing_docs)]

pub mod client;
pub mod command;
pub mod floor;
pub mod forward;
pub mod kvmap;
pub mod links;
pub mod logrefs;
pub mod node;
pub mod pmem_store;
pub mod session;
pub mod sim;
pub mod sim_forward;
pub mod smr1;
pub mod snapshot;
pub mod state;
pub mod store;
