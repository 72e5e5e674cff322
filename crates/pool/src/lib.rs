//! `pmwire-pool`: the named persistent buffer pool (PASTE's Ppool, seed
//! 001 §3.2; issue 4).
//!
//! A [`Pool`] is a deterministic layout inside a [`pmem::Media`] from a
//! `base`: a checksummed header recording the buffer size and count, a
//! nonce and the *sections* other structures keep their own state in (the
//! KV engine's WAL, user log and B+tree), then the buffers: fixed-size,
//! indexed by `u32`, so a PASTE extent (`buf_idx`, `offset`, `len`) names
//! bytes that are found at the same place after a restart.
//!
//! Ownership is volatile: reference counts in DRAM, rebuilt on open from
//! whatever durable structures still reference a buffer (everything else
//! is free: a receive buffer no durable record names is simply reused).
//! `docs/FORMAT.md` ("Buffer pool and KV engine") has the layout and
//! PASTE's appendix A.1 crash analysis for this design; [`crash`] holds the
//! crash checks of the PASTE receive–persist–swap loop.
//!
//! ```
//! use pmem::{Media, MemMedia};
//! use pmwire_pool::{Pool, PoolConfig};
//! use pmwire_log::Extent;
//!
//! let config = PoolConfig::new(16);
//! let mut media = MemMedia::new(Pool::required_size(&config).unwrap() as usize);
//! let mut pool = Pool::create(&mut media, 0, &config).unwrap();
//! let buf = pool.alloc().unwrap();
//! media.write(pool.buffer_offset(buf), b"request bytes"); // the NIC/kernel's stores
//! let extent = Extent { buf_idx: buf, offset: 0, len: 13 };
//! pool.flush_extent(&mut media, extent);
//! media.drain();
//!
//! // After a restart: the buffer is where it was; ownership is rebuilt
//! // from the durable references (here: we know the extent).
//! let mut pool = Pool::open(&media, 0).unwrap();
//! pool.recover_ref(extent.buf_idx).unwrap();
//! pool.finish_recovery();
//! let mut bytes = Vec::new();
//! pool.gather(&media, &[extent], &mut bytes);
//! assert_eq!(bytes, b"request bytes");
//! assert_eq!(pool.free_count(), 15);
//! pool.check().unwrap();
//! ```
#![deny(missing_docs)]

pub mod crash;
mod error;
mod format;
mod pool;

pub use error::{CreateError, ExtentError, OpenError};
pub use format::{
    Layout, PoolConfig, Section, BASE_ALIGN, DEFAULT_BUF_SIZE, FORMAT_VERSION, HEADER_BYTES, MAX_BUF_SIZE,
    MAX_SECTIONS, RESERVED_BUF_IDX,
};
pub use pool::Pool;
