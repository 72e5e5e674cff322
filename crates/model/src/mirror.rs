//! Synchronous mirroring of persistent-memory transactions over RDMA (seed
//! 002 §5–§7): the Transact microbenchmark under NO-SM, SM-RC, SM-OB and
//! SM-DD, on seed 002's testbed and its model of the remote LLC and memory
//! controller (§6.1–6.2).
//!
//! One transaction is `epochs` epochs of `writes` random-address writes.
//! Locally each write is a store + clwb and each epoch ends in an sfence.
//! Remotely (one-way delay = RTT / 2; each message occupies the link for its
//! wire bytes; each QP of the remote NIC places one write at a time, taking
//! `pcie_write_ns`; every blocking remote operation (rcommit, rdfence, RDMA
//! read) also pays one PCIe round trip, as §6.2 models each like a read):
//! - **SM-RC**: writes land in the remote LLC (DDIO); each epoch ends with a
//!   blocking `rcommit` that waits for the epoch's placements, then moves
//!   each line LLC → MC (10 ns) into the write-pending queue;
//! - **SM-OB**: write-through writes land in the LLC and are queued for the
//!   MC in order (the LLC buffers them, so the NIC never stalls); `rofence`
//!   is a posted message that the remote NIC keeps in one FIFO with the
//!   writes (§6.2): no write after it is placed before every write before
//!   it was placed; a blocking `rdfence` ends the transaction, costed as
//!   §6.2 says, serially: a read-like round trip plus what is left of the
//!   eager write-through into the queue when the FIFO reaches it;
//! - **SM-DD**: non-temporal writes on one QP go straight to the queue; the
//!   QP processes its writes in order (the RDMA standard's ordering, which
//!   SM-DD relies on, §5), each holding it for its PCIe write and until it
//!   entered the queue, so a full queue stalls the NIC; a blocking RDMA
//!   read ends the transaction.
//!
//! The queue holds 64 lines and drains one line per 150 ns (§6.1).
//!
//! Seed 002 ran the local side and the RDMA operations on real hardware
//! (Haswell with `clflush`, ConnectX-3) and published neither cost; the
//! local persist per write (`tavakkol.cpu.line_ns`), the issue cost of one
//! RDMA operation (`nic.post_ns`) and the WHISPER-like applications' work
//! per persistent write (`app_ns` here) are fitted jointly to seed 002's
//! six magnitude findings (see `params`); the orderings of §7.1 are left
//! as predictions. Application work is CPU time that neither persists nor
//! sends anything.
//! Invariants: clocks never run backwards; transactions are bounded.

use std::collections::VecDeque;

use serde::Serialize;

use crate::params::Params;

/// The largest transaction the model runs (256 epochs × 8 writes, seed 002 §7.1).
pub const MAX_WRITES_PER_TX: usize = 256 * 8;

/// A replication strategy (seed 002 §5, Table 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Strategy {
    /// No mirroring: local persistence only.
    NoSm,
    /// Remote commit after every epoch.
    SmRc,
    /// Ordered buffering: write-through writes, rofence, rdfence.
    SmOb,
    /// Disabled DDIO: non-temporal writes on one QP, a read at the end.
    SmDd,
}

impl Strategy {
    /// Every strategy.
    pub const ALL: [Strategy; 4] = [Strategy::NoSm, Strategy::SmRc, Strategy::SmOb, Strategy::SmDd];

    /// The paper's name.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::NoSm => "NO-SM",
            Strategy::SmRc => "SM-RC",
            Strategy::SmOb => "SM-OB",
            Strategy::SmDd => "SM-DD",
        }
    }
}

/// The remote memory controller's write-pending queue.
struct RemoteQueue {
    departures: VecDeque<f64>,
    capacity: usize,
    drain_free: f64,
    service_ns: f64,
}

impl RemoteQueue {
    /// A line arriving at `now`: returns when it enters the queue.
    fn enter(&mut self, now: f64) -> f64 {
        while self.departures.front().is_some_and(|&d| d <= now) {
            self.departures.pop_front();
        }
        let enter =
            if self.departures.len() == self.capacity { self.departures.pop_front().expect("full") } else { now };
        let enter = enter.max(now);
        self.drain_free = self.drain_free.max(enter) + self.service_ns;
        self.departures.push_back(self.drain_free);
        enter
    }
}

/// The model's state across transactions.
struct Mirror<'a> {
    p: &'a Params,
    strategy: Strategy,
    t: f64,
    link_free: f64,
    qp_free: Vec<f64>,
    queue: RemoteQueue,
    in_llc: Vec<f64>,
    through_done: f64,
    through_free: f64,
    next_qp: usize,
    /// SM-OB: writes may be placed only after this (the last rofence's point).
    fence: f64,
    /// SM-OB: when the current epoch's last write was placed.
    epoch_placed: f64,
    app_ns: f64,
}

impl Mirror<'_> {
    fn owd(&self) -> f64 {
        self.p.tavakkol.rtt_ns / 2.0
    }

    /// Posts one message of `payload` bytes; returns its arrival at the remote NIC.
    fn send(&mut self, payload: f64) -> f64 {
        self.t += self.p.nic.post_ns;
        let wire = (payload + self.p.nic.overhead_bytes) * 8.0 / self.p.tavakkol.link_gbps;
        self.link_free = self.link_free.max(self.t) + wire;
        self.link_free + self.owd()
    }

    fn write(&mut self) {
        let cpu = &self.p.tavakkol.cpu;
        self.t += self.app_ns + cpu.line_ns;
        if self.strategy == Strategy::NoSm {
            return;
        }
        let arrive = self.send(64.0);
        let pcie = self.p.nic.pcie_write_ns;
        let to_mc = self.p.modelled_pm.llc_to_mc_ns;
        let qp = self.next_qp % self.qp_free.len();
        self.next_qp += 1;
        let placed = arrive.max(self.qp_free[qp]) + pcie;
        match self.strategy {
            Strategy::SmRc => {
                self.qp_free[qp] = placed;
                self.in_llc.push(placed);
            }
            Strategy::SmOb => {
                let placed = arrive.max(self.qp_free[qp]).max(self.fence) + pcie;
                self.qp_free[qp] = placed;
                self.epoch_placed = self.epoch_placed.max(placed);
                self.through_free = self.through_free.max(placed) + to_mc;
                self.through_free = self.queue.enter(self.through_free);
                self.through_done = self.through_done.max(self.through_free);
            }
            Strategy::SmDd => self.qp_free[qp] = self.queue.enter(placed),
            Strategy::NoSm => unreachable!(),
        }
    }

    fn end_epoch(&mut self, last: bool) {
        let cpu = &self.p.tavakkol.cpu;
        self.t += (cpu.persist_latency_ns - cpu.line_ns).max(0.0);
        match self.strategy {
            Strategy::NoSm | Strategy::SmDd => {}
            Strategy::SmRc => {
                let arrive = self.send(16.0);
                let placed = self.in_llc.iter().copied().fold(arrive, f64::max);
                let mut cursor = placed + self.p.nic.pcie_write_ns;
                for _ in 0..self.in_llc.len() {
                    cursor = self.queue.enter(cursor + self.p.modelled_pm.llc_to_mc_ns);
                }
                self.in_llc.clear();
                self.t = cursor + self.owd();
            }
            Strategy::SmOb if !last => {
                let arrive = self.send(16.0);
                self.fence = self.fence.max(arrive).max(self.epoch_placed);
            }
            Strategy::SmOb => {}
        }
    }

    fn end_transaction(&mut self) {
        match self.strategy {
            Strategy::NoSm | Strategy::SmRc => {}
            Strategy::SmOb => {
                // §6.2: "two separate serial operations, a round trip and
                // draining writes to the persistent memory, similar to an
                // rcommit": the read-like round trip once the FIFO reaches
                // the rdfence, plus what is left, at that point, of the
                // eager (clwb-like) write-through of the transaction's
                // lines into the queue, which is in the persistent domain
                // (§6.1), as an rcommit's drain ends there too. Draining on
                // to the media (the queue's 150 ns writes) would make an
                // rdfence dearer than an rcommit at one epoch, against §7.1's
                // "outperform SM-RC for all Transact configurations".
                let arrive = self.send(16.0);
                let fifo = arrive.max(self.epoch_placed);
                let drain = (self.through_done - fifo).max(0.0);
                self.t = fifo + self.p.nic.pcie_write_ns + drain + self.owd();
            }
            Strategy::SmDd => {
                let arrive = self.send(16.0);
                let done = arrive.max(self.qp_free[0]) + self.p.nic.pcie_write_ns;
                self.t = done + self.owd();
            }
        }
    }
}

/// The shape of one run: `transactions` transactions of `epochs` epochs of
/// `writes` writes, with `app_ns` of application work before each write.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Shape {
    /// Epochs per transaction (at least 1; epochs × writes ≤ [`MAX_WRITES_PER_TX`]).
    pub epochs: usize,
    /// Persistent writes per epoch (1-8).
    pub writes: usize,
    /// Non-persistent CPU work before each persistent write, ns (0 for Transact).
    pub app_ns: f64,
}

impl Shape {
    /// Transact `epochs`-`writes` (seed 002 §7.1): writes only.
    pub fn transact(epochs: usize, writes: usize) -> Shape {
        Shape { epochs, writes, app_ns: 0.0 }
    }
}

/// Mean modelled time of one transaction of `shape`, ns, over `transactions` runs.
pub fn transact_ns(p: &Params, strategy: Strategy, shape: Shape, transactions: usize) -> f64 {
    let Shape { epochs, writes, app_ns } = shape;
    assert!(app_ns.is_finite() && app_ns >= 0.0, "application work {app_ns}");
    assert!(epochs >= 1, "a transaction has epochs");
    assert!(writes >= 1, "an epoch has writes");
    assert!(epochs * writes <= MAX_WRITES_PER_TX, "transaction {epochs}x{writes}");
    assert!((1..=10_000).contains(&transactions), "1-10000 transactions");
    let qps = if strategy == Strategy::SmDd { 1 } else { p.nic.mirror_qps };
    let mut m = Mirror {
        p,
        strategy,
        t: 0.0,
        link_free: 0.0,
        qp_free: vec![0.0; qps],
        queue: RemoteQueue {
            departures: VecDeque::with_capacity(p.imc.wpq_entries),
            capacity: p.imc.wpq_entries,
            drain_free: 0.0,
            service_ns: p.modelled_pm.mc_to_pm_ns,
        },
        in_llc: Vec::with_capacity(MAX_WRITES_PER_TX),
        through_done: 0.0,
        through_free: 0.0,
        next_qp: 0,
        fence: 0.0,
        epoch_placed: 0.0,
        app_ns,
    };
    for _ in 0..transactions {
        for e in 0..epochs {
            for _ in 0..writes {
                m.write();
            }
            m.end_epoch(e + 1 == epochs);
        }
        m.end_transaction();
    }
    assert!(m.t > 0.0, "time advanced");
    m.t / transactions as f64
}

/// Slowdown of `strategy` over NO-SM for transactions of `shape`.
pub fn slowdown(p: &Params, strategy: Strategy, shape: Shape) -> f64 {
    let n = (4096 / (shape.epochs * shape.writes)).clamp(4, 200);
    transact_ns(p, strategy, shape, n) / transact_ns(p, Strategy::NoSm, shape, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirroring_costs_more_than_local_persistence() {
        let p = Params::published();
        for s in [Strategy::SmRc, Strategy::SmOb, Strategy::SmDd] {
            assert!(slowdown(&p, s, Shape::transact(4, 2)) > 1.0, "{}", s.name());
        }
    }

    /// §5/§7.1: SM-DD's one QP places a write at a time (PCIe write, then a
    /// queue slot); when writes arrive faster than that, long transactions
    /// become placement-bound and SM-OB's eight QPs win despite an rofence
    /// per epoch. The fitted one-thread sender (~366 ns a write) never gets
    /// there; a fast one does.
    #[test]
    fn a_fast_sender_makes_sm_dd_placement_bound_on_long_transactions() {
        let mut p = Params::published();
        p.nic.post_ns = 71.0;
        p.tavakkol.cpu.line_ns = 15.0;
        p.tavakkol.cpu.persist_latency_ns = 25.0;
        let long = Shape::transact(256, 8);
        assert!(transact_ns(&p, Strategy::SmOb, long, 4) < transact_ns(&p, Strategy::SmDd, long, 4));
        let fitted = Params::published();
        assert!(transact_ns(&fitted, Strategy::SmOb, long, 4) > transact_ns(&fitted, Strategy::SmDd, long, 4));
    }
}
