//! Inputs to the CPU replay: synthetic programs (counter updates, the log
//! server of seed 000 §6.4) and traces recorded from pmwire's own
//! [`AppendLog`] on a [`TracedMedia`].
//!
//! Invariants: every generator is bounded ([`MAX_APPENDS`], [`MAX_UPDATES`]);
//! recorded traces start after the log is formatted (set-up is not replayed)
//! and carry one mark per acknowledged append.

use pmem::trace::{Op, TracedMedia};
use pmem::{Media, Padding};
use pmwire_log::{AppendLog, LogConfig, TailStrategy};

use crate::cpu::Event;
use crate::error::ModelError;

/// Most appends one generated or recorded log workload may hold.
pub const MAX_APPENDS: usize = 200_000;
/// Most counter updates one generated workload may hold.
pub const MAX_UPDATES: usize = 2_000_000;

/// Where a counter lives (seed 000 §6.2, Fig 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// One 8 B location.
    Naive,
    /// `blocks` chunks `stride` bytes apart, written in turn.
    Rotating {
        /// Chunks.
        blocks: u64,
        /// Bytes between chunks.
        stride: u64,
    },
}

impl Counter {
    /// The paper's rotating counter: ten 256 B blocks.
    pub const PAPER: Counter = Counter::Rotating { blocks: 10, stride: 256 };

    /// The offset of update `i`.
    fn offset(self, i: u64) -> u64 {
        match self {
            Counter::Naive => 0,
            Counter::Rotating { blocks, stride } => (i % blocks) * stride,
        }
    }
}

/// The events of one persist of `len` bytes at `offset` the way PMDK's
/// `pmem_memcpy_persist` does it: non-temporal from `nt_threshold` bytes,
/// store + clwb below, then one fence.
fn persist_copy(offset: u64, len: u64, nt_threshold: u64) -> [Event; 3] {
    if len >= nt_threshold {
        [Event::NtStore { offset, len }, Event::Fence, Event::Compute(0.0)]
    } else {
        [Event::Store { offset, len }, Event::Flush { offset, len }, Event::Fence]
    }
}

/// `updates` durable updates of `counter` (store, clwb, sfence each), each marked.
pub fn counter_updates(counter: Counter, updates: usize) -> impl Iterator<Item = Event> {
    assert!(updates <= MAX_UPDATES, "{updates} updates exceed {MAX_UPDATES}");
    (0..updates as u64).flat_map(move |i| {
        let offset = counter.offset(i);
        [Event::Store { offset, len: 8 }, Event::Flush { offset, len: 8 }, Event::Fence, Event::Mark(i)]
    })
}

/// The log server of seed 000 §6.4: per append, `rpc_ns` of RPC handling,
/// a persistent copy of the payload to the next log position, then a
/// durable update of the log's counter (`counter`).
pub fn erpc_log_appends(counter: Counter, payload: u64, appends: usize, rpc_ns: f64) -> impl Iterator<Item = Event> {
    assert!(appends <= MAX_APPENDS, "{appends} appends exceed {MAX_APPENDS}");
    assert!(payload > 0 && payload <= 1 << 20, "payload of {payload} bytes");
    const LOG_BASE: u64 = 1 << 20;
    (0..appends as u64).flat_map(move |i| {
        let at = LOG_BASE + i * payload;
        let copy = persist_copy(at, payload, pmem::NT_THRESHOLD as u64);
        let c = counter.offset(i);
        [
            Event::Compute(rpc_ns),
            copy[0],
            copy[1],
            copy[2],
            Event::Store { offset: c, len: 8 },
            Event::Flush { offset: c, len: 8 },
            Event::Fence,
            Event::Mark(i),
        ]
    })
}

/// Records `appends` appends of `payload`-byte entries to a fresh pmwire
/// [`AppendLog`] with tail `tail` and entry padding `padding` on a [`TracedMedia`]; returns the trace
/// after formatting, one [`Op::Mark`] per acknowledged append.
pub fn record_append_log(
    tail: TailStrategy,
    padding: Padding,
    payload: usize,
    appends: usize,
) -> Result<Vec<Op>, ModelError> {
    assert!(appends <= MAX_APPENDS, "{appends} appends exceed {MAX_APPENDS}");
    assert!(payload <= 64 << 10, "payload of {payload} bytes");
    let fail = |why: String| ModelError::Recording { tail: tail.name(), why };
    let probe = LogConfig::new(4096, tail).with_padding(padding);
    let capacity = (appends as u64 * probe.entry_size(payload as u64) + 4096).next_multiple_of(4096);
    let config = LogConfig::new(capacity, tail).with_padding(padding);
    let mut media = TracedMedia::new(AppendLog::required_size(&config) as usize);
    let mut log = AppendLog::create(&mut media, 0, config).map_err(|e| fail(e.to_string()))?;
    media.checkpoint();
    let entry = vec![0xA5u8; payload];
    for i in 0..appends as u64 {
        let lsn = log.append(&mut media, &entry).map_err(|e| fail(e.to_string()))?;
        assert_eq!(lsn, i, "LSNs are dense");
        media.mark(i);
    }
    assert_eq!(media.len(), AppendLog::required_size(&config), "the medium kept its size");
    Ok(media.ops().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotating_counter_visits_each_block_in_turn() {
        let offsets: Vec<u64> = counter_updates(Counter::PAPER, 12)
            .filter_map(|e| match e {
                Event::Store { offset, .. } => Some(offset),
                _ => None,
            })
            .collect();
        assert_eq!(offsets, [0, 256, 512, 768, 1024, 1280, 1536, 1792, 2048, 2304, 0, 256]);
    }

    #[test]
    fn recorded_traces_mark_every_append() {
        for tail in [TailStrategy::Naive, TailStrategy::ROTATING_PAPER, TailStrategy::SelfValidating] {
            let ops = record_append_log(tail, Padding::None, 256, 50).unwrap();
            assert_eq!(ops.iter().filter(|op| matches!(op, Op::Mark(_))).count(), 50);
            let fences = ops.iter().filter(|op| matches!(op, Op::Fence)).count();
            let expected = if tail == TailStrategy::SelfValidating { 50 } else { 100 };
            assert_eq!(fences, expected, "{}", tail.name());
        }
    }
}
