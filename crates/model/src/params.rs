//! The model's parameters: one set, [`Params::published`], for every
//! experiment.
//!
//! Each field says where its default comes from, with one of three tags:
//! - **source**: a number printed in a seed (or, marked *external*, in a
//!   paper a seed cites) and used as is;
//! - **calibrated**: fitted to one published finding, named here; that
//!   finding is then not a prediction and the fidelity table says so;
//! - **assumed**: no published number; a stated engineering guess.
//!
//! Invariants (checked by [`Params::validate`]): every size, count, rate
//! and latency is positive and finite; the DDIO ways are fewer than the
//! ways; the XPLine is a whole number of lines.
//!
//! The seeds measured on three different machines. A [`Testbed`] describes
//! one of them (link, DIMM count, CPU persist costs) from that paper's own
//! set-up section; an experiment picks the testbed its paper used and never
//! changes a value.

use serde::Serialize;

use crate::error::ModelError;

/// The Optane DIMM (seed 000 §2.1.1; seed 004 §2.1, Table 1).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OptaneParams {
    /// Bytes per DDR request (source: seed 004 Table 1, CLine 64 B).
    pub line_bytes: u64,
    /// Bytes per media access, the XPLine (source: seed 000 §2.1.1; seed 004 Table 1: 256 B).
    pub xpline_bytes: u64,
    /// XPLines held by the write-combining buffer (XBuffer) of one DIMM.
    /// Assumed 64 (16 KB): seeds 000/004 call it "small" without a size;
    /// *external*: Yang et al. FAST'20 (ref [53] of seed 000) estimate 16 KB.
    pub xbuffer_entries: usize,
    /// Media write bandwidth of one DIMM, GB/s (source: seed 000 §5.2, "one DIMM's peak 2.3 GB/s").
    pub media_write_gb_per_s: f64,
    /// Media read bandwidth of one DIMM, GB/s (source: seed 004 §2.1/§3, 320 Gbps over 6 DIMMs = 6.67 GB/s).
    pub media_read_gb_per_s: f64,
    /// Latency of a read that misses the XBuffer, ns (source: seed 004 §3, 271 ns measured by MLC).
    pub read_latency_ns: f64,
    /// Interleaving granularity across DIMMs, bytes (source: seed 004 §4.1 H2, 4 KB).
    pub interleave_bytes: u64,
}

/// The CPU's last-level cache, as far as I/O writes see it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LlcParams {
    /// Capacity in bytes (source: seed 002 §6.1/Table 2, Xeon E5-2630 v3: 20 MB).
    pub bytes: u64,
    /// Associativity (source: seed 002 §6.1, 20 ways).
    pub ways: usize,
    /// Ways that DDIO (NIC) and DCA (DMA engine) writes may allocate into
    /// (source: seed 002 §6.1, 2 of 20).
    pub ddio_ways: usize,
    /// Probability that a replacement evicts a way other than the least
    /// recently used one: "near-LRU". **Calibrated** to seed 000 Fig 4's
    /// in-DIMM write amplification with DDIO on (84.8 / 45 Gbps = 1.88x;
    /// a sweep gives 1.67x at 0.10, 1.87x at 0.14, 2.12x at 0.20);
    /// seed 000 §5.2 calls the real order "proprietary … near-random".
    pub victim_disorder: f64,
}

/// The integrated memory controller.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ImcParams {
    /// Write-pending-queue entries per channel (source: seed 002 §6.1, 64).
    pub wpq_entries: usize,
    /// After a write-back is accepted by the WPQ, how long until a read of
    /// the same line can be served (the write must reach the DIMM first), ns.
    /// **Calibrated** to seed 000 §6: same-location persists take 770 ns =
    /// 120 (persist) + this + 271 (read), so 379 ns.
    pub read_after_write_ns: f64,
}

/// A CPU core doing persistent stores.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CpuParams {
    /// Latency of a one-line persist (store, clwb, sfence) whose store misses
    /// a line not in flight, ns (source: seed 000 §6, "small sequential
    /// durable writes … around 120 ns").
    pub persist_latency_ns: f64,
    /// Issue cost of each further line written back or streamed in one
    /// fence epoch, ns: 64 B at the single-core NVMM write speed (source:
    /// seed 000 §5.2, 34 Gbps, and §5.4.2, ntstore 4.3 GB/s: 64/4.3 = 14.9 ns).
    pub line_ns: f64,
    /// Whether clwb invalidates the line (source: seed 000 §6.1, true up to
    /// Cascade Lake; a later CPU retains it).
    pub clwb_invalidates: bool,
    /// Server CPU time per small RPC, ns. *External*: eRPC (ref [28] of seed
    /// 000) handles about 10 M small RPCs/s per core, so 100 ns.
    pub rpc_ns: f64,
    /// Receive bandwidth of one RPC server thread, Gbps (source: seed 000 §5.2, "around 46 Gbps").
    pub rpc_receive_gbps: f64,
}

/// The on-die DMA engine (Intel IOAT, seed 000 §5.3–5.4).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DmaParams {
    /// Copy bandwidth of one channel, GB/s (source: seed 000 §5.4.1, 13.3 GB/s to DRAM with W = 8).
    pub engine_gb_per_s: f64,
    /// Fixed latency per copy (descriptor fetch, completion write), ns.
    /// **Calibrated** to seed 000 §5.4.1: with one copy in flight, 4 KB
    /// copies run at a third of the pipelined rate: 4096 / (13.3 / 3) − 4096 / 13.3 = 616 ns.
    pub op_latency_ns: f64,
    /// Copies kept in flight (source: seed 000 §5.4, Fig 6: eight).
    pub window: usize,
    /// With DCA off, how long the engine waits, after a copy's last line
    /// was accepted by the memory controller, for the acknowledgement that
    /// the copy is visible before it starts the next copy, ns. Seed 000
    /// §5.4 verified that a copy's updates never become visible before the
    /// previous copy's on the same channel; with DCA on the LLC is the
    /// visibility point and acknowledges at once (that cost is inside
    /// `op_latency_ns`, calibrated on DCA-on copies), with DCA off it is
    /// the write-pending queue, a round trip away. **Assumed** equal to the
    /// same round trip a core pays, seed 000 §6's 120 ns persist (store,
    /// clwb, sfence waiting for the WPQ). Seed 000 §5.4.2 and Fig 7 name
    /// the effect ("writing directly to caches makes the copies faster")
    /// without a number.
    pub uncached_ack_ns: f64,
}

/// The RDMA NIC and PCIe.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NicParams {
    /// Per-message bytes on the wire and PCIe besides the payload.
    /// **Calibrated** to seed 004 §4.2: 256 B writes to DRAM reach 37 M req/s
    /// on 100 Gbps, so 100e9 / 8 / 37e6 − 256 = 82 B.
    pub overhead_bytes: f64,
    /// PCIe partial writes (a read-modify-write of a 64 B data word) the
    /// root complex keeps in flight. **Calibrated** to seed 004 §4.1–4.2:
    /// raw 16 B writes (H1 applied) reach 31 M req/s; 31e6 × 271 ns ≈ 8.
    pub partial_write_inflight: f64,
    /// Sender-side cost of issuing one RDMA operation on seed 002's testbed
    /// (one thread, ConnectX-3, a doorbell per operation), ns; the only
    /// user is the mirroring model. No seed publishes it (seed 002 Fig 2
    /// has the source poll the completion queue). **Calibrated**, jointly
    /// with `tavakkol.cpu.line_ns` and `whisper.app_ns_per_persistent_write`
    /// (three parameters), to seed 002's six magnitude findings: Transact's
    /// SM-RC slowdowns "about 20x to over 55x" (§7.1), the OB/DD gain of
    /// 3.5x at 4-1 (§7.1) and the WHISPER-like times 6.7x / 3.8x / 2.3x
    /// (§7.2, Fig 5). The fit keeps SM-RC's 55x and WHISPER SM-RC's 6.7x
    /// exact (bisection on this cost and on the application work for each
    /// local cost) and picks the local cost that minimises the largest
    /// log error of the other four (a 0.5 ns grid: 32.5 ns, 333 ns, 293 ns;
    /// largest error 23%, on the 4-1 gain and WHISPER SM-OB). A one-thread
    /// sender this slow keeps SM-DD's writes apart by more than the remote
    /// queue's 150 ns drain, which is why §7.1's orderings are known gaps.
    pub post_ns: f64,
    /// Remote-NIC time to place one write over PCIe, ns (source: seed 002 §6.1, 200 ns round trip).
    pub pcie_write_ns: f64,
    /// Queue pairs a mirroring strategy may spread an epoch's writes over
    /// (SM-RC, SM-OB); SM-DD uses one (seed 002 §5). Assumed 8.
    pub mirror_qps: usize,
}

/// The WHISPER-like applications of seed 002 §7.2.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WhisperParams {
    /// Persistent writes per epoch, on average (source: seed 002 §7.2, 1.4).
    pub writes_per_epoch: f64,
    /// Non-persistent application work per persistent write, ns. Seed 002
    /// §7.2 (after WHISPER, its ref [44]): only about 5% of the writes
    /// update persistent data, the rest modify volatile structures, so the
    /// applications do work between persistent writes that mirroring does
    /// not touch; its time is not published. **Calibrated** jointly with
    /// the two mirroring costs (see `nic.post_ns`); for each local cost it
    /// is set so that Fig 5's SM-RC execution time is 6.7x.
    pub app_ns_per_persistent_write: f64,
}

/// Two sockets joined by UPI (seed 004 Table 2: two Xeon Gold 5215M, six
/// Optane DIMMs on each).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NumaParams {
    /// Share of its own socket's NVM throughput a device reaches on the
    /// other socket's NVM. Source: seed 004 §4.1 H1, citing Yang et al.
    /// FAST'20 (*external*): "the NVM write bandwidth of a socket could be
    /// halved from other sockets", so 0.5. The RNIC reaches remote NVM
    /// through its own socket (seed 004 Fig 1), so the model scales every
    /// NVM-side stage of a cross-socket write (the PCIe partial-write
    /// pipeline and the media) by it; the NIC stage is unchanged.
    pub cross_socket_nvm_share: f64,
}

/// Persistent memory as seed 002 §6.1 models it (its testbed has no Optane).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelledPmParams {
    /// LLC to memory-controller queue, ns (source: seed 002 §6.1, 10 ns).
    pub llc_to_mc_ns: f64,
    /// Memory-controller queue to the media, per line, serial, ns (source: seed 002 §6.1, 150 ns).
    pub mc_to_pm_ns: f64,
}

/// One of the seeds' machines.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Testbed {
    /// Short name (`kalia-socc20`, `wei-atc21`, `tavakkol`).
    pub name: &'static str,
    /// Where it is described.
    pub source: &'static str,
    /// Optane DIMMs on the socket (one per channel).
    pub dimms: usize,
    /// Link rate, Gbps.
    pub link_gbps: f64,
    /// Highest bulk RDMA payload rate the NIC reaches, Gbps (PCIe and NIC
    /// limits included).
    pub bulk_goodput_gbps: f64,
    /// Round trip of one small RDMA operation, ns.
    pub rtt_ns: f64,
    /// The CPU's persist costs.
    pub cpu: CpuParams,
}

/// Every parameter of the model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Params {
    /// Optane DIMM.
    pub optane: OptaneParams,
    /// LLC and DDIO.
    pub llc: LlcParams,
    /// Memory controller.
    pub imc: ImcParams,
    /// DMA engine.
    pub dma: DmaParams,
    /// RDMA NIC and PCIe.
    pub nic: NicParams,
    /// Seed 002's modelled persistent memory.
    pub modelled_pm: ModelledPmParams,
    /// The second socket (seed 004, hint H1).
    pub numa: NumaParams,
    /// Seed 002's WHISPER-like applications.
    pub whisper: WhisperParams,
    /// Seed 000's machine: Cascade Lake, 6 Optane DIMMs, ConnectX-3 56 Gbps.
    pub kalia: Testbed,
    /// Seed 004's machine: Xeon Gold 5215M, 6 Optane DIMMs per socket, ConnectX-5 100 Gbps.
    pub wei: Testbed,
    /// Seed 002's machine: Xeon E5-2630 v3, modelled PM, ConnectX-3 40 Gbps.
    pub tavakkol: Testbed,
}

/// The Cascade Lake core of seed 000.
fn cascade_lake() -> CpuParams {
    CpuParams {
        persist_latency_ns: 120.0,
        line_ns: 64.0 / 4.3,
        clwb_invalidates: true,
        rpc_ns: 100.0,
        rpc_receive_gbps: 46.0,
    }
}

impl Params {
    /// The one parameter set, every value from the seeds (see the field docs).
    pub fn published() -> Params {
        // Seed 002's testbed persists locally with clflush on a Haswell
        // (§6.3, "platform disclaimers"); the cost per write is not
        // published. **Calibrated** jointly with `nic.post_ns` and the
        // application work (see `nic.post_ns`): 32.5 ns per written line,
        // plus the fence's wait for the last line, seed 002 §6.1's 10 ns
        // LLC-to-MC move.
        const LOCAL_LINE_NS: f64 = 32.5;
        // `whisper.app_ns_per_persistent_write`, calibrated (see there).
        const APP_NS: f64 = 293.0;
        let tavakkol_cpu = CpuParams {
            persist_latency_ns: LOCAL_LINE_NS + 10.0,
            line_ns: LOCAL_LINE_NS,
            clwb_invalidates: true,
            ..cascade_lake()
        };
        Params {
            optane: OptaneParams {
                line_bytes: 64,
                xpline_bytes: 256,
                xbuffer_entries: 64,
                media_write_gb_per_s: 2.3,
                media_read_gb_per_s: 320.0 / 8.0 / 6.0,
                read_latency_ns: 271.0,
                interleave_bytes: 4096,
            },
            llc: LlcParams { bytes: 20 << 20, ways: 20, ddio_ways: 2, victim_disorder: 0.14 },
            imc: ImcParams { wpq_entries: 64, read_after_write_ns: 770.0 - 120.0 - 271.0 },
            dma: DmaParams {
                engine_gb_per_s: 13.3,
                op_latency_ns: 4096.0 / (13.3 / 3.0) - 4096.0 / 13.3,
                window: 8,
                uncached_ack_ns: 120.0,
            },
            nic: NicParams {
                overhead_bytes: 100e9 / 8.0 / 37e6 - 256.0,
                partial_write_inflight: 8.0,
                post_ns: 333.0,
                pcie_write_ns: 200.0,
                mirror_qps: 8,
            },
            modelled_pm: ModelledPmParams { llc_to_mc_ns: 10.0, mc_to_pm_ns: 150.0 },
            numa: NumaParams { cross_socket_nvm_share: 0.5 },
            whisper: WhisperParams { writes_per_epoch: 1.4, app_ns_per_persistent_write: APP_NS },
            kalia: Testbed {
                name: "kalia-socc20",
                source: "seed 000 §3 (Cascade Lake, 6 Optane DIMMs, ConnectX-3 56 Gbps); §4.3 RTT 1.4 us; §5.2 45 Gbps",
                dimms: 6,
                link_gbps: 56.0,
                bulk_goodput_gbps: 45.0,
                rtt_ns: 1400.0,
                cpu: cascade_lake(),
            },
            wei: Testbed {
                name: "wei-atc21",
                source: "seed 004 §3 Table 2 (6 Optane DIMMs per socket, ConnectX-5 100 Gbps); §4.3 2 us per request",
                dimms: 6,
                link_gbps: 100.0,
                // A 4 KB MTU carries the per-message overhead once per packet.
                bulk_goodput_gbps: 100.0 * 4096.0 / (4096.0 + (100e9 / 8.0 / 37e6 - 256.0)),
                rtt_ns: 2000.0,
                cpu: cascade_lake(),
            },
            tavakkol: Testbed {
                name: "tavakkol",
                source: "seed 002 §6.3 Table 2 (E5-2630 v3, ConnectX-3 40 Gbps); RTT of ConnectX-3 from seed 000 §4.3",
                dimms: 1,
                link_gbps: 40.0,
                bulk_goodput_gbps: 40.0,
                rtt_ns: 1400.0,
                cpu: tavakkol_cpu,
            },
        }
    }

    /// Checks the invariants in the module header.
    pub fn validate(&self) -> Result<(), ModelError> {
        let o = &self.optane;
        let positive = [
            ("optane.media_write_gb_per_s", o.media_write_gb_per_s),
            ("optane.media_read_gb_per_s", o.media_read_gb_per_s),
            ("optane.read_latency_ns", o.read_latency_ns),
            ("imc.read_after_write_ns", self.imc.read_after_write_ns),
            ("dma.engine_gb_per_s", self.dma.engine_gb_per_s),
            ("dma.op_latency_ns", self.dma.op_latency_ns),
            ("dma.uncached_ack_ns", self.dma.uncached_ack_ns),
            ("nic.overhead_bytes", self.nic.overhead_bytes),
            ("nic.partial_write_inflight", self.nic.partial_write_inflight),
            ("nic.pcie_write_ns", self.nic.pcie_write_ns),
            ("modelled_pm.mc_to_pm_ns", self.modelled_pm.mc_to_pm_ns),
            ("whisper.writes_per_epoch", self.whisper.writes_per_epoch),
            ("whisper.app_ns_per_persistent_write", self.whisper.app_ns_per_persistent_write),
        ];
        for (name, value) in positive {
            if !(value.is_finite() && value > 0.0) {
                return Err(ModelError::BadParameter { name, why: format!("{value} is not positive and finite") });
            }
        }
        if o.line_bytes == 0 || !o.xpline_bytes.is_multiple_of(o.line_bytes) || o.xpline_bytes / o.line_bytes > 8 {
            return Err(ModelError::BadParameter { name: "optane.xpline_bytes", why: "not 1-8 whole lines".into() });
        }
        if o.xbuffer_entries == 0 || o.xbuffer_entries > 4096 || !o.interleave_bytes.is_multiple_of(o.xpline_bytes) {
            return Err(ModelError::BadParameter {
                name: "optane",
                why: "xbuffer 1..=4096, interleave in XPLines".into(),
            });
        }
        if !(self.numa.cross_socket_nvm_share > 0.0 && self.numa.cross_socket_nvm_share <= 1.0) {
            return Err(ModelError::BadParameter { name: "numa.cross_socket_nvm_share", why: "in (0, 1]".into() });
        }
        let l = &self.llc;
        if l.ddio_ways == 0 || l.ddio_ways >= l.ways || !(0.0..=1.0).contains(&l.victim_disorder) {
            return Err(ModelError::BadParameter {
                name: "llc",
                why: "0 < ddio_ways < ways, disorder in [0, 1]".into(),
            });
        }
        if self.imc.wpq_entries == 0 || self.dma.window == 0 || self.nic.mirror_qps == 0 {
            return Err(ModelError::BadParameter { name: "queues", why: "queue depths must be positive".into() });
        }
        for t in [&self.kalia, &self.wei, &self.tavakkol] {
            if t.dimms == 0 || t.dimms > 16 || !(t.bulk_goodput_gbps > 0.0 && t.rtt_ns > 0.0) {
                return Err(ModelError::BadParameter { name: t.name, why: "1-16 DIMMs, positive rates".into() });
            }
        }
        Ok(())
    }

    /// LLC sets (capacity / line / ways).
    pub fn llc_sets(&self) -> usize {
        (self.llc.bytes / self.optane.line_bytes) as usize / self.llc.ways
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_set_is_valid_and_derived_values_match_their_sources() {
        let p = Params::published();
        p.validate().unwrap();
        assert!((p.imc.read_after_write_ns - 379.0).abs() < 1e-9);
        assert!((p.nic.overhead_bytes - 81.8).abs() < 0.1);
        assert!((p.dma.op_latency_ns - 616.0).abs() < 1.0);
        assert!((p.tavakkol.cpu.persist_latency_ns - p.tavakkol.cpu.line_ns - p.modelled_pm.llc_to_mc_ns).abs() < 1e-9);
        assert_eq!(p.llc_sets(), 16384);
    }

    #[test]
    fn rejects_bad_values() {
        let mut p = Params::published();
        p.llc.ddio_ways = 20;
        assert!(p.validate().is_err());
        let mut p = Params::published();
        p.optane.media_write_gb_per_s = f64::NAN;
        assert!(p.validate().is_err());
    }
}
