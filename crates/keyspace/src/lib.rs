//! `pmwire-keyspace`: the Redis data model and command set, with no I/O
//! (issues 4, 15, 26).
//!
//! Below it, `pmwire-resp` parses requests and writes replies; above it,
//! whatever drives the keyspace: the single-node server (`pmwire-kv-server`,
//! over the persistent engine) and the replicated one. A driver parses a
//! batch with [`pmwire_resp::request::Parsed::parse`], runs each command
//! with [`exec::Server::execute`] against its [`store::Keyspace`] (the
//! storage seam), commits, and sends what the
//! [`pmwire_resp::reply::ReplySink`] collected. Nothing in this crate
//! touches a socket, and the executor reads the time only through
//! [`store::Keyspace::now_ms`] (the server's clock, read once per batch; a
//! test's fixed [`store::Clock`]), so every behaviour is testable byte for
//! byte, and is: the differential tests (`tests/redis_diff.rs`) replay a
//! corpus of command scripts against a real `redis-server` 7.0 and this
//! executor.
//!
//! | module | owns |
//! |---|---|
//! | [`store`] | the storage seam [`store::Keyspace`], [`store::ValueSource`], [`store::MemKeyspace`] |
//! | [`capture`] | a reply sink that keeps value handles until the keyspace is free (scripts, the replicated machine) |
//! | [`blob`] | the byte layout of hash, list, set and sorted-set values |
//! | [`chunked`] | large collections: header, chunk keys, generations, garbage collection |
//! | [`exec`] | the commands, [`exec::Server`] (shared) and [`exec::Session`] (per connection) |
//! | [`commands`] | the command table: each command once, with its arity, key positions, [`commands::Flags`] (write, readonly, random, time, blocking, admin, connection, multi, no_auth) and handler; [`commands::lookup`], [`commands::of_request`] |
//! | [`script`] | the Lua 5.1 interpreter of EVAL: sandbox, `redis.*`, `cjson`, `bit`, reply conversions |
//! | [`rdb`] | DUMP and RESTORE payloads in Redis 7.0's own format (RDB v10): listpack, ziplist, intset, zipmap, LZF, CRC-64 |
//! | [`glob`] | Redis's `stringmatchlen` (KEYS, SCAN MATCH) |
//! | [`extended`] | Redis's `long double` (x87 80-bit) `strtold`, addition and `%.17Lf`, for INCRBYFLOAT |
//!
//! # Example: one batch
//! ```
//! use pmwire_keyspace::exec::{Flow, Server, ServerConfig};
//! use pmwire_keyspace::store::MemKeyspace;
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
//! let mut replies: Vec<u8> = Vec::new();
//! for i in 0..summary.commands {
//!     let flow = server.execute(&mut session, &mut keyspace, &parsed.request(&segments, i), &mut replies);
//!     assert_eq!(flow, Flow::Continue);
//! }
//! assert_eq!(replies, b"+OK\r\n$5\r\nhello\r\n");
//!
//! // What a command may do, from the one table admission and dispatch read.
//! let set = pmwire_keyspace::commands::lookup(b"SET").unwrap();
//! assert!(set.flags.contains(pmwire_keyspace::commands::Flags::WRITE));
//! ```
#![deny(missing_docs)]

pub mod blob;
pub mod capture;
pub mod chunked;
pub mod exec;
pub mod script;
pub mod extended;
pub mod geohash;
pub mod glob;
pub mod rdb;
pub mod recording;
pub mod store;
pub mod stream;
pub mod stream_group;

pub use exec::commands;
