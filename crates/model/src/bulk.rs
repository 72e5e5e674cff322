//! Streams of I/O writes into persistent memory: bulk RDMA writes through
//! DDIO or around it, DMA-engine copies with DCA on or off, CPU
//! non-temporal copies, and small one-sided writes with and without PCIe
//! partial writes.
//!
//! Bulk streams are simulated line by line: the source (NIC or DMA engine)
//! produces 64 B writes at its own rate; each goes into the I/O ways of the
//! LLC (whose evictions go to the memory controller) or straight to the
//! memory controller; a full write-pending queue stalls the source. Rates
//! are measured after a warm-up that fills the cache. Small writes are
//! bounded by the slowest of three stages (NIC, PCIe partial writes, DIMM
//! media), the media's share found by running the requests through the
//! DIMM model: the steady state of a pipeline with ample queueing is exact
//! this way.
//!
//! Invariants: every workload is bounded (`MAX_LINES` lines per run); the
//! same seed gives the same result.

use std::collections::VecDeque;

use serde::Serialize;

use crate::cpu::{Cpu, Domain, Event};
use crate::dimm::DimmCounters;
use crate::llc::IoCache;
use crate::memory::MemorySystem;
use crate::params::{Params, Testbed};
use crate::rng::SplitMix64;

/// The most 64 B lines one bulk run may write.
pub const MAX_LINES: u64 = 4 << 20;

/// Where I/O writes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Placement {
    /// Into the LLC's I/O ways (DDIO for a NIC, DCA for a DMA engine).
    Cache,
    /// Straight to the memory controller (DDIO/DCA disabled).
    Memory,
}

/// What a bulk run measured.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct BulkResult {
    /// Payload throughput, GB/s.
    pub payload_gb_per_s: f64,
    /// Bytes written to the media per second, GB/s.
    pub media_write_gb_per_s: f64,
    /// In-DIMM write amplification.
    pub write_amplification: f64,
    /// Media bytes read per payload byte (read-modify-writes).
    pub media_reads_per_byte: f64,
}

fn bulk_result(params: &Params, lines: u64, dt_ns: f64, c: DimmCounters) -> BulkResult {
    assert!(dt_ns > 0.0, "no time elapsed");
    assert!(lines > 0, "no lines measured");
    let bytes = (lines * params.optane.line_bytes) as f64;
    BulkResult {
        payload_gb_per_s: bytes / dt_ns,
        media_write_gb_per_s: c.media_bytes_written as f64 / dt_ns,
        write_amplification: c.write_amplification(params.optane.line_bytes),
        media_reads_per_byte: c.media_bytes_read as f64 / bytes,
    }
}

/// Places one line; returns when the source may go on.
fn place(now: f64, line: u64, to: Placement, cache: &mut IoCache, memory: &mut MemorySystem, line_bytes: u64) -> f64 {
    match to {
        Placement::Memory => memory.write_line(now, line * line_bytes).max(now),
        Placement::Cache => match cache.write(line) {
            Some(victim) => memory.write_line(now, victim * line_bytes).max(now),
            None => now,
        },
    }
}

/// Bulk RDMA writes of `total_bytes` to sequential addresses (seed 000
/// §5.2: 2 MB writes, pipelined) on `testbed` with `dimms` DIMMs.
pub fn rdma_bulk(params: &Params, testbed: &Testbed, to: Placement, dimms: usize, total_bytes: u64) -> BulkResult {
    let line_bytes = params.optane.line_bytes;
    let mut cache = IoCache::new(params, 0x0dd10);
    let mut memory = MemorySystem::new(params, dimms);
    let warm = 2 * cache.capacity_lines() as u64;
    let lines = total_bytes / line_bytes;
    assert!(lines > 0, "an empty bulk run");
    assert!(warm + lines <= MAX_LINES, "bulk run of {lines} lines out of bounds");
    let line_ns = (line_bytes * 8) as f64 / testbed.bulk_goodput_gbps;
    let (mut t, mut t0, mut c0) = (0.0, 0.0, DimmCounters::default());
    for line in 0..warm + lines {
        if line == warm {
            (t0, c0) = (t, memory.counters());
        }
        t = place(t + line_ns, line, to, &mut cache, &mut memory, line_bytes);
    }
    bulk_result(params, lines, t - t0, memory.counters().since(c0))
}

/// Who copies into persistent memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Copier {
    /// The DMA engine with DCA on (writes into the LLC; not durable).
    DmaDca,
    /// The DMA engine with DCA off (writes to the memory controller).
    DmaNoDca,
    /// One core with non-temporal stores and a fence per copy (PMDK's persistent memcpy).
    NtStore,
}

/// Copies of `copy_bytes` each, `total_bytes` in all, to sequential
/// addresses of a buffer much larger than the cache (seed 000 §5.4: 1–128 KB
/// into 4 GB, eight copies in flight). Returns payload GB/s.
pub fn copies(params: &Params, testbed: &Testbed, copier: Copier, copy_bytes: u64, total_bytes: u64) -> BulkResult {
    let line_bytes = params.optane.line_bytes;
    assert!(copy_bytes >= line_bytes, "copies are at least a line");
    assert!(copy_bytes.is_multiple_of(line_bytes), "copies are whole lines");
    let copies = total_bytes / copy_bytes;
    assert!(copies > 0, "an empty copy run");
    assert!(total_bytes / line_bytes <= MAX_LINES, "copy run out of bounds");
    if copier == Copier::NtStore {
        let cpu = Cpu::new(params, &testbed.cpu, testbed.dimms, Domain::Adr);
        let events =
            (0..copies).flat_map(|k| [Event::NtStore { offset: k * copy_bytes, len: copy_bytes }, Event::Fence]);
        let stats = cpu.replay(events).expect("bounded run");
        return bulk_result(params, total_bytes / line_bytes, stats.time_ns, stats.dimm);
    }
    let to = if copier == Copier::DmaDca { Placement::Cache } else { Placement::Memory };
    let mut cache = IoCache::new(params, 0xdca);
    let mut memory = MemorySystem::new(params, testbed.dimms);
    let line_ns = line_bytes as f64 / params.dma.engine_gb_per_s;
    let window = params.dma.window;
    let warm_copies = (2 * cache.capacity_lines() as u64 * line_bytes).div_ceil(copy_bytes);
    let mut done: VecDeque<f64> = VecDeque::with_capacity(window);
    let (mut engine_free, mut last_done, mut t0, mut c0) = (0.0f64, 0.0f64, 0.0, DimmCounters::default());
    let lines_per_copy = copy_bytes / line_bytes;
    for k in 0..warm_copies + copies {
        if k == warm_copies {
            (t0, c0) = (last_done, memory.counters());
        }
        let posted = if done.len() == window { done.pop_front().expect("full window") } else { 0.0 };
        let mut t = engine_free.max(posted);
        for j in 0..lines_per_copy {
            t = place(t + line_ns, k * lines_per_copy + j, to, &mut cache, &mut memory, line_bytes);
        }
        // In-order visibility (seed 000 §5.4): without DCA the next copy
        // starts only once the memory controller acknowledged this one.
        engine_free = if to == Placement::Memory { t + params.dma.uncached_ack_ns } else { t };
        last_done = t + params.dma.op_latency_ns;
        done.push_back(last_done);
    }
    bulk_result(params, copies * lines_per_copy, last_done - t0, memory.counters().since(c0))
}

/// Small one-sided RDMA writes to random addresses (seed 004 §3–§4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SmallWrite {
    /// 16 B writes at 16 B-aligned random offsets: PCIe partial writes.
    Raw16,
    /// Aligned and padded to the PCIe data word, 64 B (hint H6).
    PadDataWord,
    /// Aligned and padded to the XPLine, 256 B (hint H5).
    PadXpline,
}

impl SmallWrite {
    /// Bytes each request carries.
    pub fn payload_bytes(self) -> u64 {
        match self {
            SmallWrite::Raw16 => 16,
            SmallWrite::PadDataWord => 64,
            SmallWrite::PadXpline => 256,
        }
    }

    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            SmallWrite::Raw16 => "raw_16B",
            SmallWrite::PadDataWord => "h6_pad_64B",
            SmallWrite::PadXpline => "h5_pad_256B",
        }
    }
}

/// What a small-write run measured, in million requests per second.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct SmallResult {
    /// The achieved rate: the smallest of the three limits.
    pub mreq_per_s: f64,
    /// The NIC's limit (wire bytes per request).
    pub nic_limit: f64,
    /// The PCIe partial-write limit (infinite when no partial writes).
    pub pcie_limit: f64,
    /// The DIMM media's limit.
    pub media_limit: f64,
    /// NVM read requests per write request (seed 004 Fig 13).
    pub reads_per_write: f64,
}

/// Which socket's NVM a small write targets, seen from the RNIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Socket {
    /// The RNIC's own socket (hint H1 applied).
    Local,
    /// The other socket: every NVM access crosses UPI through the RNIC's
    /// socket (seed 004 §4.1, Fig 1), at `numa.cross_socket_nvm_share` of
    /// the local NVM throughput.
    Remote,
}

/// `requests` small writes of kind `kind` over a 4 GiB region of `socket`'s
/// NVM on `testbed`.
pub fn small_writes(
    params: &Params,
    testbed: &Testbed,
    kind: SmallWrite,
    socket: Socket,
    requests: u64,
) -> SmallResult {
    assert!(requests > 0, "an empty small-write run");
    assert!(requests * 4 <= MAX_LINES, "small-write run out of bounds");
    let region_xplines = (4u64 << 30) / params.optane.xpline_bytes;
    let mut memory = MemorySystem::new(params, testbed.dimms);
    let mut rng = SplitMix64::new(0x5a11);
    for _ in 0..requests {
        let base = rng.below(region_xplines) * params.optane.xpline_bytes;
        match kind {
            SmallWrite::Raw16 => {
                let addr = base + rng.below(params.optane.xpline_bytes / 16) * 16;
                memory.read_line(0.0, addr);
                memory.write_line(0.0, addr);
            }
            SmallWrite::PadDataWord => {
                memory.write_line(0.0, base + rng.below(params.optane.xpline_bytes / 64) * 64);
            }
            SmallWrite::PadXpline => {
                for line in 0..params.optane.xpline_bytes / params.optane.line_bytes {
                    memory.write_line(0.0, base + line * params.optane.line_bytes);
                }
            }
        }
    }
    let (write_ns, read_ns) = memory.media_costs_ns();
    let xp = params.optane.xpline_bytes as f64;
    let busiest = memory
        .per_dimm()
        .iter()
        .map(|c| c.media_bytes_written as f64 / xp * write_ns + c.media_bytes_read as f64 / xp * read_ns)
        .fold(0.0, f64::max);
    let share = if socket == Socket::Remote { params.numa.cross_socket_nvm_share } else { 1.0 };
    let media_limit = share * requests as f64 / busiest * 1e3;
    let wire_bytes = kind.payload_bytes() as f64 + params.nic.overhead_bytes;
    let nic_limit = testbed.link_gbps * 1e3 / 8.0 / wire_bytes;
    let pcie_limit = if kind == SmallWrite::Raw16 {
        share * params.nic.partial_write_inflight / params.optane.read_latency_ns * 1e3
    } else {
        f64::INFINITY
    };
    let c = memory.counters();
    SmallResult {
        mreq_per_s: media_limit.min(nic_limit).min(pcie_limit),
        nic_limit,
        pcie_limit,
        media_limit,
        reads_per_write: c.read_requests as f64 / requests as f64,
    }
}

/// One RPC server thread receiving bulk writes and copying them to NVMM
/// with non-temporal stores, serially (seed 000 §5.2): Gbps.
pub fn rpc_bulk_gbps(testbed: &Testbed, line_bytes: u64) -> f64 {
    let copy_gbps = (line_bytes * 8) as f64 / testbed.cpu.line_ns;
    1.0 / (1.0 / testbed.cpu.rpc_receive_gbps + 1.0 / copy_gbps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddio_off_streams_at_the_link_without_amplification() {
        let p = Params::published();
        let r = rdma_bulk(&p, &p.kalia, Placement::Memory, 6, 8 << 20);
        assert!((r.payload_gb_per_s * 8.0 - 45.0).abs() < 0.5, "{r:?}");
        assert!((r.write_amplification - 1.0).abs() < 0.02, "{r:?}");
    }

    #[test]
    fn small_writes_are_deterministic() {
        let p = Params::published();
        let a = small_writes(&p, &p.wei, SmallWrite::PadDataWord, Socket::Local, 20_000);
        let b = small_writes(&p, &p.wei, SmallWrite::PadDataWord, Socket::Local, 20_000);
        assert_eq!(a.mreq_per_s, b.mreq_per_s);
    }
}
