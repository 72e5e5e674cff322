//! `pmwire-resp`: the Redis protocol and command set, with no I/O (issue 4).
//!
//! The KV server receives into fixed buffers, hands the unconsumed bytes to
//! [`request::Parsed::parse`] as a list of segments, runs each parsed
//! command with [`exec::Server::execute`] against its [`keyspace::Keyspace`]
//! (the persistent engine), commits, and sends what the
//! [`reply::ReplySink`] collected: protocol bytes plus stored values sent by
//! handle, without copying. Nothing in this crate touches a socket, and
//! the executor reads the time only through [`keyspace::Keyspace::now_ms`]
//! (the server's clock, read once per batch; a test's fixed
//! [`keyspace::Clock`]), so every behaviour is testable byte for byte, and is: the
//! differential tests (`tests/redis_diff.rs`) replay a corpus of command
//! scripts against a real `redis-server` 7.0 and this executor.
//!
//! | module | owns |
//! |---|---|
//! | [`request`] | request codec: multibulk + inline, pipelined, split anywhere across segments; arguments as bytes and as locations ([`request::Piece`]); Redis's protocol errors |
//! | [`reply`] | RESP2/RESP3 reply writer [`reply::Out`] and the [`reply::ReplySink`] trait |
//! | [`keyspace`] | the storage seam [`keyspace::Keyspace`], [`keyspace::ValueSource`], [`keyspace::MemKeyspace`] |
//! | [`blob`] | the byte layout of hash and sorted-set values |
//! | [`chunked`] | large collections: header, chunk keys, generations, garbage collection |
//! | [`exec`] | the commands, [`exec::Server`] (shared) and [`exec::Session`] (per connection) |
//! | [`client`] | request encoder and incremental reply parser |
//! | [`ycsb`] | YCSB-style workload generator (scrambled Zipfian, workloads A and B) |
//! | [`numbers`], [`glob`], [`inline`] | Redis's `string2ll`/`strtod`/`%.17g`, `stringmatchlen`, `sdssplitargs` |
//! | [`extended`] | Redis's `long double` (x87 80-bit) `strtold`, addition and `%.17Lf`, for INCRBYFLOAT |
//!
//! # Example: one batch
//! ```
//! use pmwire_resp::exec::{Flow, Server, ServerConfig};
//! use pmwire_resp::keyspace::MemKeyspace;
//! use pmwire_resp::request::{Limits, Parsed};
//!
//! let mut server = Server::new(ServerConfig::default());
//! let mut session = server.open_session();
//! let mut keyspace = MemKeyspace::new();
//! let mut parsed = Parsed::new(Limits::default());
//!
//! // A pipeline that arrived split across two receive buffers.
//! let received = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\nGET k\r\n";
//! let segments: [&[u8]; 2] = [&received[..26], &received[26..]];
//! let summary = parsed.parse(&segments);
//! assert_eq!(summary.consumed, received.len());
//!
//! // The SET value is split: it has two locations, one per buffer.
//! let set = parsed.request(&segments, 0);
//! assert_eq!(set.arg(2), b"hello");
//! assert_eq!(set.arg_ref(2).pieces.len(), 2);
//!
//! let mut replies: Vec<u8> = Vec::new();
//! for i in 0..summary.commands {
//!     let flow = server.execute(&mut session, &mut keyspace, &parsed.request(&segments, i), &mut replies);
//!     assert_eq!(flow, Flow::Continue);
//! }
//! assert_eq!(replies, b"+OK\r\n$5\r\nhello\r\n");
//! ```
#![deny(missing_docs)]

pub mod blob;
pub mod chunked;
pub mod client;
pub mod exec;
pub mod extended;
pub mod glob;
pub mod inline;
pub mod keyspace;
pub mod numbers;
pub mod reply;
pub mod request;
pub mod ycsb;
