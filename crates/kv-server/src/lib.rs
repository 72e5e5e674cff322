//! `pmwire-kv-server`: the PASTE key-value server of issue 4 (seed 001 §4–§5): one io_uring
//! event-loop thread serving the Redis protocol (RESP) and HTTP (pKVS) over the persistent KV
//! engine.
//!
//! In zero-copy mode the loop's provided-buffer ring is fed with *pool* buffers, so the kernel
//! copies socket data straight into (emulated) persistent memory; a SET or POST value is
//! stored by naming the extents it landed in (`Engine::set_extents`: flush in place, 8 B
//! extents in the WAL), never copied; GET replies are sent from the same buffers. A batch
//! (everything that arrived in one wake-up) is executed, committed once, then answered
//! (PASTE A.2).
//!
//! | module | owns |
//! |---|---|
//! | [`store`] | [`Store`]: region + engine + receive buffers ([`netio::BufferSource`]); [`Mode`]; sizing from the pool |
//! | `keyspace` | the RESP keyspace over the engine, value handles that hold their buffers for the batch, the reply sink |
//! | [`service`] | [`KvService`]: per-batch parse/execute/commit/answer for RESP and HTTP |
//! | [`serve`] | [`KvServer`] (both listeners on one loop), [`ReadyFile`], signal handling |
//! | [`client`] | small blocking RESP and HTTP clients (tests, the crash campaign) |
//! | [`cluster`] | [`cluster::ClusterKeyspace`]: the engine as a replicated Redis machine's keyspace |
//! | [`member`] | `pmwire kv --cluster`: a member's loop; `member::zc`, the leader's zero-copy write path |
//! | [`member_zc`] | a zero-copy member's restart: the buffers its Raft log holds, checked |
//! | [`crash_zc`] | crash-state check of a zero-copy member's log extents, with a planted bug |
//! | [`crash`] | the kill -9 campaign against `pmwire kv` |
//! | `sim` (feature `sim`) | `PmemKeyspace`: the engine on a traced medium, the simulation's persistent Redis keyspace with crash images |
//!
//! ```no_run
//! use pmwire_kv_server::{KvServer, Mode, ServeOptions};
//!
//! let options = ServeOptions {
//!     pool: "/dev/shm/kv.pool".into(),
//!     size: 256 << 20,
//!     resp: "127.0.0.1:0".parse().unwrap(),
//!     http: "127.0.0.1:0".parse().unwrap(),
//!     mode: Mode::ZeroCopy,
//!     busy_poll_us: 0,
//!     batch_wait_us: pmwire_kv_server::BATCH_WAIT_US,
//!     requirepass: None,
//!     protected_mode: true,
//! };
//! let mut server = KvServer::open(&options).unwrap();
//! println!("{}; RESP on {}, HTTP on {}", server.recovered(), server.addrs().0, server.addrs().1);
//! let stop = server.stop_handle();
//! let thread = std::thread::spawn(move || { server.run().unwrap(); server });
//! // ... redis-cli -p PORT SET k v; curl -X POST --data v http://ADDR/kv/k ...
//! stop.stop();
//! let server = thread.join().unwrap();
//! server.store().check().unwrap();
//! ```
#![deny(missing_docs)]

pub use pmwire_netio as netio;

mod admit;
pub mod forward;
pub mod client;
pub mod cluster;
pub mod crash;
pub mod crash_zc;
mod keyspace;
pub mod member;
mod member_liveness;
pub mod member_zc;
pub mod pushes;
pub mod rx_arena;
pub mod serve;
pub mod service;
#[cfg(feature = "sim")]
pub mod sim;
pub mod store;

pub use serve::{stop_on_signals, KvServer, ReadyFile, ServeError, ServeOptions, BATCH_WAIT_US};
pub use service::{KvService, ServiceStats};
pub use keyspace::Handle;
pub use store::{Mode, Recovered, Sizing, Store, StoreError};
/// When a collection is chunked, and how big its chunks grow (`pmwire kv --collection-limits`).
pub use pmwire_keyspace::chunked::ChunkConfig;
pub use pmwire_keyspace::exec::parse_memory;
