//! `pmwire-remote`: durable writes into a server's persistent memory over
//! the network, as I/O-free protocol cores (raft-rs `RawNode` style) that
//! any event loop can drive.
//!
//! - [`proto`]: the wire format (fixed little-endian headers, CRC-32C,
//!   opcodes, status codes, HELLO); decoding never panics.
//! - [`server`]: [`server::Server`] checks and executes requests against an
//!   exported [`pmem::Region`]: keys, rights, bounds, PERSIST_WRITE, FLUSH
//!   (librpma's GPSPM), READ, ATOMIC_WRITE8, the named log server.
//! - [`copy_engine`]: asynchronous non-temporal copies on helper threads
//!   behind the [`copy_engine::CopyBackend`] seam (the DMA-engine role of
//!   seed 000 §5.5), completions on an eventfd.
//! - [`client`]: request building, response matching, the bounded window,
//!   and [`proto::Method`] planning from the server's stated guarantees;
//!   [`calibration`] holds `Auto`'s per-size table and [`auto`] keeps its
//!   choice right online.
//! - [`pool`]: the exported region's layout and the crash-consistent log
//!   directory; [`crash`] checks it with `pmwire-crashcheck`.
//! - [`event_loop`]: `serve(server, transport, stop)`, the server loop over
//!   the network seam ([`transport::Transport`]: UCX or in process), and
//!   [`client::Client`], the client over the same seam.
//! - [`fuzz`]: the in-tree fuzzer: seeded, structured and mutated requests
//!   checked against a model of the pool and its logs, through the core or
//!   over a transport.
//!
//! `docs/FORMAT.md` ("Wire protocol and remote pool") gives every byte.
//!
//! ```
//! use pmem::Region;
//! use pmwire_remote::client::{ClientConfig, ClientCore};
//! use pmwire_remote::pool::PoolConfig;
//! use pmwire_remote::proto::{Guarantee, Method};
//! use pmwire_remote::server::{Action, Server, ServerConfig};
//!
//! let dir = tempfile::tempdir_in("/dev/shm").unwrap();
//! let region = Region::create(dir.path().join("pool"), 1 << 20).unwrap();
//! let pool = PoolConfig { region_id: 1, dir_slots: 4, log_area_bytes: 64 << 10 };
//! let mut server = Server::format(region, pool, ServerConfig::default()).unwrap();
//! server.connect(7);
//! let (region_id, key) = server.credentials();
//! let mut client = ClientCore::new(ClientConfig { region_id, key, window: 4, payload_crc: true });
//! let (mut msg, mut reply) = (Vec::new(), Vec::new());
//!
//! // The "network" is a function call: client bytes in, server bytes out.
//! client.hello_request(&mut msg).unwrap();
//! assert_eq!(server.handle(7, &msg, &mut reply), Action::Reply);
//! client.on_response(&reply).unwrap();
//!
//! // On emulated pmem with no one-sided access, Rpc persists; read-after-write is not offered.
//! let plan = client.plan_write(0, 5, Method::Rpc, Guarantee::Persistence, None).unwrap();
//! assert_eq!(plan.method, Method::Rpc);
//! assert!(client.plan_write(0, 5, Method::OneSidedReadAfterWrite, Guarantee::Persistence, None).is_err());
//! client.persist_write(0, b"hello", false, &mut msg).unwrap();
//! server.handle(7, &msg, &mut reply);
//! assert_eq!(client.on_response(&reply).unwrap().result, Ok(5));
//! ```
#![deny(missing_docs)]

pub mod auto;
pub mod calibration;
pub mod client;
pub mod copy_engine;
pub mod crash;
pub mod event_loop;
pub mod fuzz;
pub mod pool;
pub mod proto;
pub mod server;
