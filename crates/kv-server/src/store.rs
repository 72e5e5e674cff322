//! [`Store`]: the mapped pool, the KV engine in it, and the receive buffers the io_uring ring
//! is fed from; it is the loop's [`BufferSource`].
//!
//! In [`Mode::ZeroCopy`] the ring's buffers *are* pool buffers: buffer `id` is at
//! `region.as_ptr() + pool.buffer_offset(id)`, its reference count is the pool's, so the kernel
//! copies socket data straight into persistent memory and a SET value is stored by naming
//! where it landed. In [`Mode::Copy`] and [`Mode::NoPersist`] the ring is DRAM
//! ([`HeapBuffers`] of the same size) and values are copied into the pool.
//!
//! Sizing ([`Sizing`]): every receive bound is derived from the pool's buffer count, so that
//! the pool is larger than the ring plus what connections may hold unconsumed (netio's
//! progress condition): half of the buffers are left for stored data, the other half is the
//! ring plus the receive budget ([`Sizing::rx_budget`]), which all connections together may
//! hold as unconsumed input; past it netio closes the connection holding the most (Redis's
//! client eviction). The number of connections is not derived from the pool: an idle
//! connection holds no buffer (the ring lends one when bytes arrive), so `maxclients`
//! (10,000 by default) is bounded only by the process's descriptors ([`connection_cap`]). The
//! budget must still hold [`MIN_CONNECTIONS`] requests of [`MAX_RX_BYTES`] at once
//! ([`Sizing::rx_buffers_per_conn`] each: twice `max_rx_bytes` in buffers, since a receive may
//! fill a buffer only partly).
//!
//! Invariant: in zero-copy mode every buffer id the loop holds is a pool buffer with a
//! non-zero pool count; in the other modes pool and ring ids never mix (values are copied, and
//! replies are copied out of the pool).

use std::path::{Path, PathBuf};

use pmem::{Media, Region, RegionOptions};
use pmwire_kv::{Engine, KvConfig};
use pmwire_netio::{BufferSource, HeapBuffers};
use pmwire_pool::DEFAULT_BUF_SIZE;

/// Largest value (RESP bulk argument or HTTP body) accepted, in bytes: Redis's
/// `proto-max-bulk-len` (512 MiB). Values that large are received into pool buffers as they
/// come (chained extents, `pmwire_kv::chain`), under a receive grant (`crate::admit`).
pub const MAX_VALUE_BYTES: usize = 512 << 20;
/// What a connection may always hold unconsumed (the pool's sizing counts on it): a value of
/// 128 KiB plus Redis's 64 KB inline/header bound. A larger request is received under a grant
/// sized against the free pool, or refused from its header.
pub const MAX_RX_BYTES: usize = (128 << 10) + (64 << 10);
/// Connections whose largest requests ([`MAX_RX_BYTES`] each) the receive budget must hold at
/// once (a smaller pool is refused as too small).
pub const MIN_CONNECTIONS: u32 = 8;
/// Redis's default `maxclients`.
pub const DEFAULT_MAXCLIENTS: u32 = 10_000;
/// Descriptors kept for everything but clients (pool, rings, listeners, peers, logs), as
/// Redis keeps 32 (`CONFIG_MIN_RESERVED_FDS`).
pub const RESERVED_FDS: u64 = 64;

/// The most clients this process can hold open: its descriptor limit (the soft limit raised
/// to the hard one first, as Redis's `adjustOpenFilesLimit` raises it) less
/// [`RESERVED_FDS`]; at least [`MIN_CONNECTIONS`], at most netio's 1,048,576.
pub fn connection_cap() -> u32 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return DEFAULT_MAXCLIENTS;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    (lim.rlim_cur as u64).saturating_sub(RESERVED_FDS).clamp(u64::from(MIN_CONNECTIONS), 1 << 20) as u32
}

/// How values travel between the socket and the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Receive into pool buffers; store values by their extents; send stored values from
    /// their buffers (PASTE).
    ZeroCopy,
    /// Receive into DRAM; copy values into the pool (non-temporal stores) and replies out.
    Copy,
    /// As `Copy`, but `POST /log` is acknowledged without storing or persisting anything (the
    /// network-only baseline of the HTTP WAL benchmark).
    NoPersist,
}

impl Mode {
    /// The name `--mode` takes.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ZeroCopy => "zero-copy",
            Mode::Copy => "copy",
            Mode::NoPersist => "no-persist",
        }
    }

    /// Parses a `--mode` name.
    pub fn parse(name: &str) -> Option<Mode> {
        [Mode::ZeroCopy, Mode::Copy, Mode::NoPersist].into_iter().find(|m| m.name() == name)
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a pool could not be opened or created. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file could not be mapped.
    #[error("{path}: {source}")]
    Region {
        /// The pool path.
        path: PathBuf,
        /// Why.
        source: pmem::RegionError,
    },
    /// The file holds something that is not a pmwire KV pool.
    #[error("{path} is not a pmwire KV pool (not overwriting it): {why}")]
    NotKvPool {
        /// The pool path.
        path: PathBuf,
        /// What was found.
        why: String,
    },
    /// The size cannot hold a useful pool.
    #[error("pool of {size} bytes is too small: {why}")]
    TooSmall {
        /// The size asked for or found.
        size: u64,
        /// What does not fit.
        why: String,
    },
    /// The engine could not be formatted.
    #[error("format: {0}")]
    Create(#[from] pmwire_kv::CreateError),
}

/// What a client past the connection cap is sent before its connection
/// closes (netio's `Config::reject_reply`, per listener: RESP, HTTP), as
/// Redis answers past `maxclients`.
pub fn reject_replies() -> Vec<Vec<u8>> {
    let body = "max number of clients reached\n";
    vec![
        b"-ERR max number of clients reached\r\n".to_vec(),
        format!("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).into_bytes(),
    ]
}

/// Receive bounds derived from the pool (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    /// Pool buffers.
    pub buffers: u32,
    /// Bytes per buffer.
    pub buf_size: u32,
    /// Entries of the provided-buffer ring.
    pub ring_entries: u16,
    /// Buffers all connections together may hold as unconsumed input (netio's
    /// `rx_budget_buffers`).
    pub rx_budget: u32,
    /// Buffers a connection may hold unconsumed (2 × `MAX_RX_BYTES` / `buf_size`).
    pub rx_buffers_per_conn: u32,
}

impl Sizing {
    /// The bounds for a pool of `buffers` buffers of `buf_size` bytes.
    pub fn for_pool(buffers: u32, buf_size: u32) -> Result<Sizing, String> {
        let rx_buffers_per_conn = (2 * MAX_RX_BYTES as u64).div_ceil(buf_size as u64) as u32;
        let ring = 1u32 << (buffers / 16).max(1).ilog2();
        let ring_entries = ring.clamp(64, 4096);
        let rx_budget = (buffers / 2).saturating_sub(ring_entries);
        if rx_budget / rx_buffers_per_conn < MIN_CONNECTIONS {
            let need = 2 * (ring_entries + MIN_CONNECTIONS * rx_buffers_per_conn);
            return Err(format!(
                "{buffers} buffers of {buf_size} B; need at least {need} (a {ring_entries}-entry ring and \
                 {MIN_CONNECTIONS} connections of {rx_buffers_per_conn} buffers, doubled for stored data)"
            ));
        }
        Ok(Sizing { buffers, buf_size, ring_entries: ring_entries as u16, rx_budget, rx_buffers_per_conn })
    }

    /// The engine configuration for a new pool of `size` bytes: as many 2 KB buffers as fit
    /// with `KvConfig::new`'s WAL, user log and tree.
    pub fn config_for_size(size: u64) -> Result<KvConfig, StoreError> {
        let fits = |b: u32| KvConfig::new(b).required_size().is_ok_and(|need| need <= size);
        let (mut lo, mut hi) = (0u32, (size / DEFAULT_BUF_SIZE as u64).min(u32::MAX as u64 / 2) as u32 + 1);
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        if lo == 0 {
            return Err(StoreError::TooSmall { size, why: "not even one buffer fits".into() });
        }
        let config = KvConfig::new(lo);
        Sizing::for_pool(config.buffers, config.buf_size).map_err(|why| StoreError::TooSmall { size, why })?;
        Ok(config)
    }
}

/// What `open` found in an existing pool (or that it made a new one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// The pool was created now.
    pub created: bool,
    /// Keys.
    pub keys: usize,
    /// Committed WAL records replayed on top of the tree.
    pub wal_records: usize,
    /// User-log entries.
    pub log_entries: usize,
    /// Buffers referenced by durable structures.
    pub buffers_in_use: u32,
    /// All buffers.
    pub buffers: u32,
}

impl std::fmt::Display for Recovered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.created {
            return write!(f, "created a new pool of {} buffers", self.buffers);
        }
        write!(
            f,
            "recovered {} keys ({} WAL records replayed), {} user-log entries, {} of {} buffers in use",
            self.keys, self.wal_records, self.log_entries, self.buffers_in_use, self.buffers
        )
    }
}

/// The loop's buffer source and the engine (see the module docs).
pub struct Store {
    pub(crate) region: Region,
    pub(crate) engine: Engine,
    pub(crate) heap: Option<HeapBuffers>,
    pub(crate) mode: Mode,
    pub(crate) sizing: Sizing,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({}, {:?}, {:?})", self.mode, self.engine, self.sizing)
    }
}

impl Store {
    /// Opens (recovers) the KV pool at `path`, or creates one of `size` bytes if the file is
    /// absent, empty, or holds no pool header (all zero: e.g. a create that crashed). A file
    /// holding anything else is refused untouched. An existing pool keeps its own size.
    pub fn open(path: &Path, size: u64, mode: Mode) -> Result<(Store, Recovered), StoreError> {
        Store::open_with_refs(path, size, mode, &[])
    }

    /// [`Store::open`] of a pool whose buffers `external` are also held by
    /// another durable structure (a member's Raft log naming values here:
    /// `crate::member_zc`), one reference per listed id, counted before
    /// recovery frees what nothing references.
    pub fn open_with_refs(path: &Path, size: u64, mode: Mode, external: &[u32]) -> Result<(Store, Recovered), StoreError> {
        let region_err = |source| StoreError::Region { path: path.to_path_buf(), source };
        let existing = std::fs::metadata(path).map(|m| m.len() > 0).unwrap_or(false);
        if existing {
            let options = RegionOptions { size: None, create: false, ..RegionOptions::default() };
            let mut region = Region::open(path, options).map_err(region_err)?;
            if !looks_unformatted(&region) {
                let engine = Engine::open_with_refs(&mut region, 0, pmwire_kv::Faults::default(), external)
                    .map_err(|e| StoreError::NotKvPool { path: path.to_path_buf(), why: e.to_string() })?;
                let recovered = Recovered {
                    created: false,
                    keys: engine.len(),
                    wal_records: engine.wal_records(),
                    log_entries: engine.log_read(0).count(),
                    buffers_in_use: engine.pool().buffers() - engine.pool().free_count(),
                    buffers: engine.pool().buffers(),
                };
                return Ok((Store::assemble(region, engine, mode)?, recovered));
            }
            if region.len() > size {
                return Err(StoreError::NotKvPool {
                    path: path.to_path_buf(),
                    why: format!("an unformatted file of {} bytes, larger than --size {size}", region.len()),
                });
            }
        }
        let config = Sizing::config_for_size(size)?;
        let options = RegionOptions { size: Some(size), create: true, ..RegionOptions::default() };
        let mut region = Region::open(path, options).map_err(region_err)?;
        let engine = Engine::create(&mut region, 0, &config)?;
        let recovered = Recovered {
            created: true,
            keys: 0,
            wal_records: 0,
            log_entries: 0,
            buffers_in_use: 0,
            buffers: config.buffers,
        };
        Ok((Store::assemble(region, engine, mode)?, recovered))
    }

    fn assemble(mut region: Region, mut engine: Engine, mode: Mode) -> Result<Store, StoreError> {
        // The ring hands the kernel buffers all over the pool: fault its pages in
        // once, now, rather than one receive at a time.
        region.populate();
        let (buffers, buf_size) = (engine.pool().buffers(), engine.pool().buf_size());
        let size = region.len();
        let sizing = Sizing::for_pool(buffers, buf_size).map_err(|why| StoreError::TooSmall { size, why })?;
        // Checkpoint early when a quarter of the pool is left (half is the receive side's):
        // retained WAL records pin overwritten values' buffers until the checkpoint.
        engine.set_checkpoint_floor(sizing.ring_entries as u32 + buffers / 4);
        let heap = match mode {
            Mode::ZeroCopy => None,
            // DRAM receive buffers as many as the pool sets aside for receiving; untouched
            // pages of the zeroed allocation cost no memory.
            Mode::Copy | Mode::NoPersist => Some(HeapBuffers::new(buffers / 2, buf_size)),
        };
        Ok(Store { region, engine, heap, mode, sizing })
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The receive bounds.
    pub fn sizing(&self) -> Sizing {
        self.sizing
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The mapped pool.
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// The value of `key` (kind and bytes) as the engine holds it: a key past its deadline
    /// that no batch has deleted yet is returned too (the server never serves one).
    pub fn get(&self, key: &[u8]) -> Option<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        self.engine.get_bytes(&self.region, key, &mut out).map(|kind| (kind, out))
    }

    /// Checks the engine's invariants (no caller references may be outstanding: call after
    /// the server stopped).
    pub fn check(&self) -> Result<(), String> {
        self.engine.check(&self.region)
    }

    /// Receive buffers in use in DRAM (copy modes; 0 in zero-copy mode).
    pub fn heap_in_use(&self) -> u32 {
        self.heap.as_ref().map_or(0, |h| h.in_use())
    }

    /// A read-only view of the pool's buffers for copying values out.
    pub(crate) fn view(&self) -> PoolView {
        let layout = self.engine.pool().layout();
        PoolView {
            base: self.region.as_ptr(),
            buffers_at: layout.buffers_at,
            buf_size: layout.buf_size,
            buffers: layout.buffers,
        }
    }
}

/// Whether the region starts with 4 KiB of zeros: no pool header was ever completed there
/// (a fresh file, or a create that crashed before its header, which is persisted last).
fn looks_unformatted(region: &Region) -> bool {
    let mut head = [0u8; 4096];
    if region.len() < head.len() as u64 {
        return false;
    }
    region.read(0, &mut head);
    head.iter().all(|&b| b == 0)
}

/// Where the pool's buffers are in the mapping, to read extents while the engine is borrowed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolView {
    base: *mut u8,
    buffers_at: u64,
    buf_size: u32,
    buffers: u32,
}

impl PoolView {
    /// The bytes of `extent`. The caller holds a reference on its buffer.
    pub(crate) fn bytes(&self, extent: pmwire_log::Extent) -> &[u8] {
        assert!(extent.buf_idx < self.buffers, "extent of buffer {} beyond the pool", extent.buf_idx);
        assert!(extent.offset as u32 + extent.len as u32 <= self.buf_size, "extent past its buffer");
        let at = self.buffers_at + extent.buf_idx as u64 * self.buf_size as u64 + extent.offset as u64;
        // SAFETY: in bounds of the mapping (the pool was opened against the region's length,
        // and the extent lies inside one of its buffers, asserted above); the buffer is
        // referenced, so it is neither freed nor a receive target while the slice lives.
        unsafe { std::slice::from_raw_parts(self.base.add(at as usize), extent.len as usize) }
    }
}

impl BufferSource for Store {
    fn buf_size(&self) -> u32 {
        match &self.heap {
            Some(heap) => heap.buf_size(),
            None => self.engine.pool().buf_size(),
        }
    }

    fn ptr(&self, id: u32) -> *mut u8 {
        match &self.heap {
            Some(heap) => heap.ptr(id),
            // SAFETY: buffer_offset asserts id < buffers, and the pool lies inside the mapping.
            None => unsafe { self.region.as_ptr().add(self.engine.pool().buffer_offset(id) as usize) },
        }
    }

    fn alloc(&mut self) -> Option<u32> {
        match &mut self.heap {
            Some(heap) => heap.alloc(),
            None => self.engine.pool_mut().alloc(),
        }
    }

    fn retain(&mut self, id: u32) {
        match &mut self.heap {
            Some(heap) => heap.retain(id),
            None => self.engine.pool_mut().retain(id),
        }
    }

    fn release(&mut self, id: u32) {
        match &mut self.heap {
            Some(heap) => heap.release(id),
            None => _ = self.engine.pool_mut().release(id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizing_leaves_half_the_pool_for_data() {
        for buffers in [3328u32, 10_000, 104_750, 1 << 20] {
            let s = Sizing::for_pool(buffers, 2048).unwrap();
            assert!(s.ring_entries.is_power_of_two());
            assert!((64..=4096).contains(&s.ring_entries));
            assert!(s.rx_budget / s.rx_buffers_per_conn >= MIN_CONNECTIONS);
            let receiving = s.ring_entries as u64 + s.rx_budget as u64;
            assert!(receiving <= buffers as u64 / 2, "{s:?}");
            assert!(s.rx_buffers_per_conn as usize * 2048 >= 2 * MAX_RX_BYTES);
        }
        assert!(Sizing::for_pool(3199, 2048).is_err());
    }

    #[test]
    fn config_for_size_fits_and_refuses_tiny_pools() {
        for size in [16u64 << 20, 256 << 20, 1 << 30] {
            let config = Sizing::config_for_size(size).unwrap();
            assert!(config.required_size().unwrap() <= size);
            assert!(KvConfig::new(config.buffers + 64).required_size().unwrap() > size, "as many buffers as fit");
        }
        assert!(matches!(Sizing::config_for_size(1 << 20), Err(StoreError::TooSmall { .. })));
    }

    #[test]
    fn modes_parse_by_name() {
        for mode in [Mode::ZeroCopy, Mode::Copy, Mode::NoPersist] {
            assert_eq!(Mode::parse(mode.name()), Some(mode));
        }
        assert_eq!(Mode::parse("fast"), None);
    }
}
