//! `pmwire-resp`: the Redis wire protocol, with no I/O (issue 4).
//!
//! A server receives into fixed buffers and hands the unconsumed bytes to
//! [`request::Parsed::parse`] as a list of segments; each parsed
//! [`request::Request`] names its arguments as bytes and as locations in
//! those buffers ([`request::Piece`]), so a large value is stored where the
//! kernel put it. Replies are written by [`reply::Out`] into a
//! [`reply::ReplySink`]: protocol bytes plus stored values sent by handle,
//! without copying. A client encodes requests and parses replies with
//! [`client`]. What the commands mean (the data model and the command set)
//! is the `pmwire-keyspace` crate's, above this one; nothing here knows a
//! command by name, and nothing here touches a socket.
//!
//! | module | owns |
//! |---|---|
//! | [`request`] | request codec: multibulk + inline, pipelined, split anywhere across segments; arguments as bytes and as locations ([`request::Piece`]); Redis's protocol errors |
//! | [`reply`] | RESP2/RESP3 reply writer [`reply::Out`] and the [`reply::ReplySink`] trait |
//! | [`client`] | request encoder and incremental reply parser |
//! | [`ycsb`] | YCSB-style workload generator (scrambled Zipfian, workloads A and B), a client of [`client`] |
//! | [`numbers`], [`inline`] | Redis's `string2ll`/`strtod`/`%.17g`, `sdssplitargs` |
//!
//! # Example: a pipeline split across two buffers
//! ```
//! use pmwire_resp::request::{Limits, Parsed};
//!
//! let mut parsed = Parsed::new(Limits::default());
//! let received = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\nGET k\r\n";
//! let segments: [&[u8]; 2] = [&received[..26], &received[26..]];
//! let summary = parsed.parse(&segments);
//! assert_eq!(summary.consumed, received.len());
//! assert_eq!(summary.commands, 2);
//!
//! // The SET value is split: it has two locations, one per buffer.
//! let set = parsed.request(&segments, 0);
//! assert_eq!(set.arg(2), b"hello");
//! assert_eq!(set.arg_ref(2).pieces.len(), 2);
//! // The inline GET is parsed too.
//! assert_eq!(parsed.request(&segments, 1).arg(0), b"GET");
//! ```
#![deny(missing_docs)]

pub mod client;
pub mod inline;
pub mod numbers;
pub mod reply;
pub mod request;
pub mod ycsb;
