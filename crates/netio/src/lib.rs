//! `pmwire-netio`: io_uring TCP serving into caller-owned buffers (issue 4).
//!
//! Network data lands once, in the buffers it will live in (PASTE, seed 001 §3): a
//! [`Server`] registers a provided-buffer ring whose entries are buffers of a [`BufferSource`]
//! (DRAM [`HeapBuffers`] here; a persistent pool in a file mapping elsewhere), the kernel copies
//! socket data straight into them, and each consumed ring entry is refilled with a fresh buffer,
//! so a received buffer can be kept (retained) by the application without a copy. Once per
//! wake-up the loop hands everything that arrived to a [`Service`] in one [`Batch`]; the service
//! consumes input and queues output, which may name ranges of source buffers (sent zero-copy).
//!
//! Modules:
//! - [`buffers`]: the buffer seam and `HeapBuffers`;
//! - [`batch`]: `Batch`, `Input`, `Segment`, `Reply`, `Output`, the `Service` trait;
//! - [`server`]: the io_uring loop, `Config`, `Stats`, `StopHandle`;
//! - [`http`]: an HTTP/1.1 request codec and response encoder with no I/O;
//! - [`echo`]: an HTTP echo service (tests, benchmarks);
//! - [`loadgen`]: a closed-loop HTTP load generator.
//!
//! ```no_run
//! use pmwire_netio::{echo::HttpEcho, Config, HeapBuffers, Server};
//!
//! let bufs = HeapBuffers::new(4096, 2048);
//! let mut server = Server::bind("127.0.0.1:0", Config::default(), bufs, HttpEcho::default()).unwrap();
//! let stop = server.stop_handle();
//! let addr = server.local_addr();
//! let t = std::thread::spawn(move || { server.run().unwrap(); server });
//! let report = pmwire_netio::loadgen::run(addr, &pmwire_netio::loadgen::LoadConfig::default()).unwrap();
//! println!("{} requests/s", report.throughput_rps);
//! stop.stop();
//! let server = t.join().unwrap();
//! assert_eq!(server.source().in_use(), 0);
//! ```
#![deny(missing_docs)]

pub mod batch;
pub mod buffers;
pub mod echo;
pub mod http;
pub mod loadgen;
mod ring;
pub mod server;

pub use batch::{drive, Batch, ConnAddrs, ConnId, ConnLimits, Input, Output, OutputMark, Part, Reply, Segment, Service, Watch};
pub use buffers::{BufferSource, HeapBuffers};
pub use ring::incremental_supported;
pub use server::{Config, RecvMode, Server, ServerError, Stats, StopHandle};
