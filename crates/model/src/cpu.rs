//! A CPU core replaying a pmem trace ([`pmem::trace::Op`]) against the
//! modelled memory system: the engine behind the `counter` and `trace`
//! experiments.
//!
//! Time advances one event at a time on the core's clock:
//! - a cached **store** is free unless its line was invalidated by a clwb
//!   whose write-back is still in flight: then the store's read-for-ownership
//!   waits until the write-back has reached the DIMM and re-reads the line
//!   (`read_after_write_ns` + `read_latency_ns`). This is seed 000 §6.1's
//!   diagnosis of slow same-location persists. Misses to lines not in
//!   flight are covered by the prefetcher (their cost is in the 120 ns
//!   persist latency, which seed 000 §6 measured on sequential writes);
//! - a **flush** (clwb) of a dirty line issues its write-back (`line_ns`) and,
//!   on Cascade Lake, invalidates the line; a clean line costs nothing;
//! - a **non-temporal store** streams each line (`line_ns`) and drops any
//!   cached copy;
//! - every line written back or streamed goes to the memory controller as
//!   it is issued; a full write-pending queue stalls the core;
//! - a **fence** waits for the epoch's write-backs: `persist_latency_ns`
//!   minus the one line already charged (the WPQ has accepted every line by
//!   then: ADR). Under eADR flushes do nothing and a fence only drains
//!   non-temporal stores;
//! - a **mark** counts an acknowledged operation; **compute** is CPU work.
//!
//! Invariants: the clock never runs backwards; a line is pending at most
//! once per epoch; traces are bounded by [`MAX_TRACE_OPS`].

use std::collections::HashMap;

use pmem::trace::Op;
use serde::Serialize;

use crate::dimm::DimmCounters;
use crate::error::ModelError;
use crate::memory::MemorySystem;
use crate::params::{CpuParams, Params};

/// The longest trace the replay accepts.
pub const MAX_TRACE_OPS: usize = 20_000_000;

/// One event of a replayed program: a pmem trace operation or CPU work.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Event {
    /// Cached stores to `[offset, offset + len)`.
    Store {
        /// Start.
        offset: u64,
        /// Bytes.
        len: u64,
    },
    /// Non-temporal stores to `[offset, offset + len)`.
    NtStore {
        /// Start.
        offset: u64,
        /// Bytes.
        len: u64,
    },
    /// clwb of every line overlapping `[offset, offset + len)`.
    Flush {
        /// Start.
        offset: u64,
        /// Bytes.
        len: u64,
    },
    /// sfence.
    Fence,
    /// An acknowledged operation.
    Mark(u64),
    /// CPU work of this many nanoseconds.
    Compute(f64),
}

impl Event {
    /// The event a recorded trace operation stands for.
    pub fn from_op(op: &Op) -> Event {
        match op {
            Op::Store { offset, bytes } => Event::Store { offset: *offset, len: bytes.len() as u64 },
            Op::NtStore { offset, bytes } => Event::NtStore { offset: *offset, len: bytes.len() as u64 },
            Op::Flush { offset, len } => Event::Flush { offset: *offset, len: *len },
            Op::Fence => Event::Fence,
            Op::Mark(id) => Event::Mark(*id),
        }
    }
}

/// Where the power-safe domain ends (seed 000 §2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Domain {
    /// The WPQ and the DIMMs survive power loss; caches do not.
    Adr,
    /// Caches survive too.
    Eadr,
}

/// What a replay measured.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ReplayStats {
    /// Modelled time from the first event to the last, ns.
    pub time_ns: f64,
    /// Marks seen (acknowledged operations).
    pub marks: u64,
    /// Fences executed.
    pub fences: u64,
    /// Stores that waited for their own line's write-back.
    pub stalls: u64,
    /// The DIMMs' counters.
    pub dimm: DimmCounters,
}

impl ReplayStats {
    /// Marks per second.
    pub fn marks_per_s(&self) -> f64 {
        assert!(self.time_ns > 0.0, "no time elapsed");
        self.marks as f64 * 1e9 / self.time_ns
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct LineState {
    cached: bool,
    dirty: bool,
    busy_until: f64,
}

/// A core, its cache lines and the memory system behind them.
pub struct Cpu {
    cpu: CpuParams,
    domain: Domain,
    read_after_write_ns: f64,
    read_latency_ns: f64,
    line_bytes: u64,
    memory: MemorySystem,
    lines: HashMap<u64, LineState>,
    pending: Vec<u64>,
    now: f64,
    stats: ReplayStats,
}

impl Cpu {
    /// A core with the persist costs `cpu`, over `dimms` modelled DIMMs.
    pub fn new(params: &Params, cpu: &CpuParams, dimms: usize, domain: Domain) -> Cpu {
        Cpu {
            cpu: cpu.clone(),
            domain,
            read_after_write_ns: params.imc.read_after_write_ns,
            read_latency_ns: params.optane.read_latency_ns,
            line_bytes: params.optane.line_bytes,
            memory: MemorySystem::new(params, dimms),
            lines: HashMap::new(),
            pending: Vec::with_capacity(64),
            now: 0.0,
            stats: ReplayStats { time_ns: 0.0, marks: 0, fences: 0, stalls: 0, dimm: DimmCounters::default() },
        }
    }

    /// Replays `events` and returns what was measured.
    pub fn replay<I: IntoIterator<Item = Event>>(mut self, events: I) -> Result<ReplayStats, ModelError> {
        for (n, event) in events.into_iter().enumerate() {
            if n >= MAX_TRACE_OPS {
                return Err(ModelError::TraceTooLong { ops: n + 1, limit: MAX_TRACE_OPS });
            }
            let before = self.now;
            self.step(event);
            assert!(self.now >= before, "clock ran backwards at event {n}");
        }
        self.stats.time_ns = self.now;
        self.stats.dimm = self.memory.counters();
        Ok(self.stats)
    }

    fn line_range(&self, offset: u64, len: u64) -> std::ops::Range<u64> {
        if len == 0 {
            return 0..0;
        }
        offset / self.line_bytes..(offset + len - 1) / self.line_bytes + 1
    }

    fn step(&mut self, event: Event) {
        match event {
            Event::Store { offset, len } => {
                for line in self.line_range(offset, len) {
                    self.store(line);
                }
            }
            Event::NtStore { offset, len } => {
                for line in self.line_range(offset, len) {
                    let state = self.lines.entry(line).or_default();
                    state.cached = false;
                    state.dirty = false;
                    self.issue(line);
                }
            }
            Event::Flush { offset, len } if self.domain == Domain::Adr => {
                for line in self.line_range(offset, len) {
                    self.flush(line);
                }
            }
            Event::Flush { .. } => {}
            Event::Fence => self.fence(),
            Event::Mark(_) => self.stats.marks += 1,
            Event::Compute(ns) => {
                assert!(ns.is_finite(), "compute time {ns}");
                assert!(ns >= 0.0, "compute time {ns}");
                self.now += ns;
            }
        }
    }

    fn store(&mut self, line: u64) {
        let state = self.lines.entry(line).or_default();
        if !state.cached {
            if self.now < state.busy_until {
                self.now = state.busy_until + self.read_latency_ns;
                self.stats.stalls += 1;
            }
            state.cached = true;
        }
        state.dirty = true;
    }

    fn flush(&mut self, line: u64) {
        let Some(state) = self.lines.get_mut(&line) else { return };
        let dirty = state.dirty;
        state.dirty = false;
        if self.cpu.clwb_invalidates {
            state.cached = false;
        }
        if dirty {
            self.issue(line);
        }
    }

    /// Sends one line toward the memory controller as the core streams it
    /// (`line_ns`); a full WPQ stalls the core.
    fn issue(&mut self, line: u64) {
        self.now += self.cpu.line_ns;
        let accepted = self.memory.write_line(self.now, line * self.line_bytes);
        self.now = self.now.max(accepted);
        self.pending.push(line);
    }

    fn fence(&mut self) {
        self.stats.fences += 1;
        if self.pending.is_empty() {
            return;
        }
        let done = self.now + (self.cpu.persist_latency_ns - self.cpu.line_ns).max(0.0);
        self.now = done;
        for line in self.pending.drain(..) {
            let state = self.lines.get_mut(&line).expect("a pending line has a state");
            state.busy_until = done + self.read_after_write_ns;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn persist_loop(offsets: impl Iterator<Item = u64>) -> ReplayStats {
        let p = Params::published();
        let cpu = Cpu::new(&p, &p.kalia.cpu, 6, Domain::Adr);
        let events = offsets.flat_map(|o| {
            [Event::Store { offset: o, len: 8 }, Event::Flush { offset: o, len: 8 }, Event::Fence, Event::Mark(0)]
        });
        cpu.replay(events).unwrap()
    }

    #[test]
    fn one_line_persist_costs_the_persist_latency() {
        let stats = persist_loop((0..1000).map(|i| i * 64));
        assert!((stats.time_ns / 1000.0 - 120.0).abs() < 1e-6, "{}", stats.time_ns);
        assert_eq!(stats.stalls, 0);
    }

    #[test]
    fn same_line_persists_wait_for_the_write_back() {
        let stats = persist_loop(std::iter::repeat_n(0, 1000));
        assert!((stats.time_ns / 1000.0 - 770.0).abs() < 1.0, "{}", stats.time_ns / 1000.0);
        assert_eq!(stats.stalls, 999);
    }

    #[test]
    fn a_retaining_clwb_removes_the_stall() {
        let p = Params::published();
        let mut cpu = p.kalia.cpu.clone();
        cpu.clwb_invalidates = false;
        let events = (0..1000)
            .flat_map(|_| [Event::Store { offset: 0, len: 8 }, Event::Flush { offset: 0, len: 8 }, Event::Fence]);
        let stats = Cpu::new(&p, &cpu, 6, Domain::Adr).replay(events).unwrap();
        assert_eq!(stats.stalls, 0);
    }

    #[test]
    fn eadr_skips_flushes() {
        let p = Params::published();
        let events = (0..100)
            .flat_map(|_| [Event::Store { offset: 0, len: 8 }, Event::Flush { offset: 0, len: 8 }, Event::Fence]);
        let stats = Cpu::new(&p, &p.kalia.cpu, 6, Domain::Eadr).replay(events).unwrap();
        assert_eq!(stats.time_ns, 0.0);
        assert_eq!(stats.dimm.write_requests, 0);
    }
}
