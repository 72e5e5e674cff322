//! pmwire-link: member-to-member links that prove the cluster's secret.
//!
//! Replicas (`pmwire replica`), their clients (`pmwire smr`,
//! `SmrClient`), and a mirror's primary and backup all talk over the
//! [`transport::Transport`] seam. This crate puts one thing between them
//! and the network: [`LinkTransport`], a transport over any transport
//! whose every connection first runs a mutual challenge–response
//! handshake keyed by the cluster's [`Secret`] (HMAC-SHA256 over both
//! sides' fresh nonces, roles and ids; the secret never travels), and
//! whose dialled connections are kept alive by pings and closed once
//! quiet, so that the service dials again at once instead of waiting out
//! TCP's retransmission backoff.
//!
//! - [`secret`]: the secret file (32 random bytes, mode 0600).
//! - [`handshake`]: the handshake's I/O-free core ([`handshake::Dialer`],
//!   [`handshake::Acceptor`]): bytes in, bytes or a verdict out.
//! - [`link`]: [`LinkTransport`], the driver: handshake on connect and
//!   accept, nothing else passes before it; pings and quiet links.
//!
//! Why a crate of its own: both `smr` and `mirror` use it, neither should
//! depend on the other, and the HMAC dependencies stay out of `transport`
//! and `reactor`, which every other layer links.
//!
//! # Example
//! Two in-process nodes sharing a secret open a link; a call goes through
//! once the handshake is done:
//! ```
//! use std::time::Duration;
//! use link::{Identity, LinkConfig, LinkTransport, Role, Secret};
//! use transport::{Event, InProcNetwork, Limits, Output, Transport};
//!
//! let net = InProcNetwork::new(Limits::default());
//! let (a, b) = (net.node(), net.node());
//! let server_id = b.id();
//! let secret = Secret::from_bytes([7; 32]);
//! let me = |id| Identity { role: Role::Replica, id };
//! let mut client = LinkTransport::real(a, secret.clone(), LinkConfig::new(me(1), &[Role::Replica], Role::Replica));
//! let mut server = LinkTransport::real(b, secret, LinkConfig::new(me(2), &[Role::Replica], Role::Replica));
//! let conn = client.connect(&server_id).unwrap();
//! client.call(conn, b"ping", b"hi".to_vec(), 1).unwrap(); // waits for the handshake
//! let (mut events, mut answered) = (Vec::new(), false);
//! for _ in 0..100 {
//!     server.poll(&mut events, 16);
//!     for e in events.drain(..) {
//!         if let Event::Request(r) = e {
//!             server.reply(r.id, b"pong", r.payload).unwrap();
//!         }
//!     }
//!     client.poll(&mut events, 16);
//!     for e in events.drain(..) {
//!         if let Event::Completion(c) = e {
//!             assert!(matches!(c.result, Ok(Output::Response { ref header, .. }) if header == b"pong"));
//!             answered = true;
//!         }
//!     }
//!     if answered {
//!         break;
//!     }
//!     std::thread::sleep(Duration::from_millis(1));
//! }
//! assert!(answered);
//! assert_eq!(server.stats().opened_in, 1);
//! ```

#![deny(missing_docs)]

pub mod handshake;
pub mod link;
pub mod secret;

#[cfg(test)]
mod tests;

pub use handshake::{Identity, Role};
pub use link::{Keepalive, LinkConfig, LinkStats, LinkTransport};
pub use secret::{Secret, SecretError};
