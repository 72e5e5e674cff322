//! pmwire-transport: the network seam of pmwire.
//!
//! One trait, [`Transport`], is all the RPC layer above sees: connections,
//! RPC request/response with a completion per operation, one-way messages, one-sided
//! `put`/`get`/`atomic`/`flush` into a peer's registered memory, and an event
//! loop driven by [`Transport::poll`] (never blocks) and [`Transport::wait`]
//! (blocks on an event fd with a timeout). Three implementations:
//!
//! - [`UcxTransport`]: UCX (UCP) with one worker per transport, over whatever
//!   UCX transports the context allows (`UCX_TLS`: `tcp`, `sm`, verbs…).
//! - [`InProcTransport`]: nodes of an [`InProcNetwork`] in one process, for
//!   deterministic tests of the layers above.
//! - [`sim::SimTransport`]: nodes of a [`sim::SimNetwork`], a seeded
//!   simulated network with a virtual clock and faults (delay, loss,
//!   duplication, reordering, partitions, broken connections, nodes down
//!   and restarted), for deterministic simulation tests.
//!
//! Below the seam, [`ucx`] wraps the UCP objects safely for code that needs
//! them directly (the latency probe, benchmarks).
//!
//! Invariants, for both implementations:
//! - every operation started with a token completes exactly once;
//! - everything is bounded ([`Limits`]): in-flight window per connection,
//!   header and payload sizes, connections, registrations;
//! - nothing spins: an idle loop sleeps in [`Transport::wait`].
//!
//! # Example
//! A request/response and a put/get round trip between two in-process nodes:
//! ```
//! use std::time::Duration;
//! use transport::{Event, InProcNetwork, Limits, Output, Transport};
//!
//! let net = InProcNetwork::new(Limits::default());
//! let (mut client, mut server) = (net.node(), net.node());
//! let conn = client.connect(&server.id()).unwrap();
//!
//! // The server exports 4 KiB; the descriptor travels as bytes.
//! let mut memory = vec![0u8; 4096];
//! // SAFETY: `memory` outlives the server transport's use of it.
//! let region = unsafe { server.register(memory.as_mut_ptr(), memory.len()) }.unwrap();
//! let desc = server.export(region).unwrap();
//! let remote = client.attach(conn, &desc).unwrap();
//!
//! client.call(conn, b"ping", b"payload".to_vec(), 7).unwrap();
//! client.put(conn, remote, 64, b"hello".to_vec(), 8).unwrap();
//! client.flush(conn, 9).unwrap();
//!
//! let mut events = Vec::new();
//! server.poll(&mut events, 16);
//! for e in events.drain(..) {
//!     if let Event::Request(req) = e {
//!         assert_eq!(req.header, b"ping");
//!         server.reply(req.id, b"pong", Vec::new()).unwrap();
//!     }
//! }
//! let mut done = Vec::new();
//! while done.len() < 3 {
//!     assert!(client.wait(Duration::from_secs(1)).unwrap());
//!     client.poll(&mut events, 16);
//!     for e in events.drain(..) {
//!         if let Event::Completion(c) = e {
//!             done.push(c.token);
//!             if c.token == 7 {
//!                 assert!(matches!(c.result, Ok(Output::Response { ref header, .. }) if header == b"pong"));
//!             }
//!         }
//!     }
//! }
//! done.sort();
//! assert_eq!(done, [7, 8, 9]);
//! drop(server);
//! assert_eq!(&memory[64..69], b"hello");
//! ```
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod error;
pub mod inproc;
pub mod listen;
pub mod probe;
pub mod rx;
pub mod seam;
pub mod sim;
pub mod tcp;
pub mod ucx;
mod ucx_transport;
pub mod wire;

#[cfg(test)]
mod sim_tests;
#[cfg(test)]
mod tcp_tests;
#[cfg(test)]
mod ucx_hostile_tests;
#[cfg(test)]
mod ucx_message_tests;
#[cfg(test)]
mod ucx_tests;

pub use error::{AttachError, ConnectError, OpError, RegisterError, SetupError, Status, WaitError};
pub use inproc::{InProcNetwork, InProcTransport, NodeId};
pub use seam::{
    AtomicOp, Completion, ConnId, Event, EventFd, Limits, LocalRegionId, Output, Reach, RegionDescriptor,
    RemoteRegionId, Request, RequestId, Transport,
};
pub use rx::{AreaHold, Payload, RxArea, RxArena};
pub use tcp::{TcpConfig, TcpTransport};
pub use ucx_transport::{UcxConfig, UcxTransport};
