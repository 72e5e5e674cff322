//! The memory controller and its DIMMs: a write-pending queue (WPQ) per
//! channel, one Optane DIMM per channel, addresses interleaved across the
//! DIMMs at 4 KB (seed 004 §4.1 H2).
//!
//! A write is durable once the WPQ accepts it (ADR: the WPQ is in the
//! power-safe domain, seed 000 §2.1); with eADR the caches are too, which
//! changes when a writer may stop waiting, not what reaches the DIMM.
//! The WPQ is FIFO with `wpq_entries` slots: a write enters when a slot is
//! free and leaves when its DIMM accepts it.
//!
//! Invariants: per channel, departures are non-decreasing and at most
//! `wpq_entries` writes are queued at any instant.

use std::collections::VecDeque;

use crate::dimm::{Dimm, DimmCounters};
use crate::params::Params;

/// One channel's write-pending queue: the departure times of queued writes.
#[derive(Clone, Debug)]
struct Wpq {
    departures: VecDeque<f64>,
    capacity: usize,
    last_departure: f64,
}

/// The memory controller with its DIMMs.
#[derive(Clone, Debug)]
pub struct MemorySystem {
    wpqs: Vec<Wpq>,
    dimms: Vec<Dimm>,
    interleave_lines: u64,
    line_bytes: u64,
}

impl MemorySystem {
    /// `dimms` DIMMs (1-16), one per channel, from `params`.
    pub fn new(params: &Params, dimms: usize) -> MemorySystem {
        assert!((1..=16).contains(&dimms), "1-16 DIMMs, not {dimms}");
        let o = &params.optane;
        let wpq = Wpq {
            departures: VecDeque::with_capacity(params.imc.wpq_entries),
            capacity: params.imc.wpq_entries,
            last_departure: 0.0,
        };
        MemorySystem {
            wpqs: vec![wpq; dimms],
            dimms: (0..dimms).map(|_| Dimm::new(o)).collect(),
            interleave_lines: o.interleave_bytes / o.line_bytes,
            line_bytes: o.line_bytes,
        }
    }

    /// The DIMM holding byte `addr`, and the line's index within that DIMM.
    fn locate(&self, addr: u64) -> (usize, u64) {
        let line = addr / self.line_bytes;
        let (unit, within) = (line / self.interleave_lines, line % self.interleave_lines);
        let n = self.dimms.len() as u64;
        ((unit % n) as usize, (unit / n) * self.interleave_lines + within)
    }

    /// A 64 B write of the line holding `addr`, arriving at `now`; returns
    /// when the WPQ accepts it (the ADR durability point).
    pub fn write_line(&mut self, now: f64, addr: u64) -> f64 {
        let (channel, line) = self.locate(addr);
        let q = &mut self.wpqs[channel];
        while q.departures.front().is_some_and(|&d| d <= now) {
            q.departures.pop_front();
        }
        let enter =
            if q.departures.len() == q.capacity { q.departures.pop_front().expect("full queue").max(now) } else { now };
        let accepted = self.dimms[channel].write(enter, line);
        let departure = accepted.max(q.last_departure).max(enter);
        q.last_departure = departure;
        q.departures.push_back(departure);
        assert!(q.departures.len() <= q.capacity, "WPQ over capacity");
        enter
    }

    /// A 64 B read of the line holding `addr` at `now`; returns when the data is back.
    pub fn read_line(&mut self, now: f64, addr: u64) -> f64 {
        let (channel, line) = self.locate(addr);
        self.dimms[channel].read(now, line)
    }

    /// The sum of every DIMM's counters.
    pub fn counters(&self) -> DimmCounters {
        self.dimms.iter().fold(DimmCounters::default(), |sum, d| sum.plus(d.counters()))
    }

    /// Each DIMM's counters.
    pub fn per_dimm(&self) -> Vec<DimmCounters> {
        self.dimms.iter().map(Dimm::counters).collect()
    }

    /// Media time (ns) of one XPLine write and one XPLine read on one DIMM.
    pub fn media_costs_ns(&self) -> (f64, f64) {
        self.dimms[0].media_costs_ns()
    }

    /// When every DIMM's media is done with the work queued so far.
    pub fn media_free_ns(&self) -> f64 {
        self.dimms.iter().map(Dimm::media_free_ns).fold(0.0, f64::max)
    }

    /// Number of DIMMs.
    pub fn dimms(&self) -> usize {
        self.dimms.len()
    }

    /// Writes back every XBuffer (end of a run).
    pub fn drain(&mut self) {
        self.dimms.iter_mut().for_each(Dimm::drain);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaves_at_four_kilobytes() {
        let m = MemorySystem::new(&Params::published(), 6);
        assert_eq!(m.locate(0), (0, 0));
        assert_eq!(m.locate(4096), (1, 0));
        assert_eq!(m.locate(6 * 4096 + 64), (0, 65));
        assert_eq!(m.locate(4095), (0, 63));
    }

    #[test]
    fn a_full_queue_pushes_back_at_the_media_rate() {
        let p = Params::published();
        let mut m = MemorySystem::new(&p, 1);
        let mut t = 0.0;
        let lines = 200_000u64;
        for i in 0..lines {
            t = m.write_line(t, i * 64);
        }
        let gb_per_s = (lines * 64) as f64 / t;
        assert!((gb_per_s / p.optane.media_write_gb_per_s - 1.0).abs() < 0.02, "{gb_per_s} GB/s");
    }
}
