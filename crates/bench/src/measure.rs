//! Measurement helpers: aligned buffers, statistics, the timer's own cost,
//! pre-faulting, and the progress bar.
//!
//! Invariant: nothing in a timed loop allocates. Buffers are made before
//! the clock starts; samples go into vectors sized up front.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pmem::{Media, Region};
use std::alloc::Layout;
use std::io::IsTerminal;
use std::time::Instant;

/// A page-aligned heap buffer filled with a fixed pseudo-random pattern:
/// the source of every copy, so every variant copies the same bytes.
pub struct AlignedBuf {
    ptr: *mut u8,
    layout: Layout,
}

impl AlignedBuf {
    /// `len` bytes, 4096-aligned, filled with a deterministic pattern.
    pub fn new(len: usize) -> AlignedBuf {
        assert!(len > 0);
        let layout = Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        assert!(!ptr.is_null(), "out of memory for a {len} B buffer");
        let mut buf = AlignedBuf { ptr, layout };
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for byte in buf.as_mut_slice() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *byte = state as u8;
        }
        buf
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for layout.size() initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for layout.size() bytes, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// The order in which `n` interleaved variants run in round `round`: a
/// deterministic pseudo-random permutation, different every round, so no
/// variant always runs right after the same other one (whose dirty lines
/// or cache state it would inherit).
pub fn round_order(round: usize, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut state = 0x2545_F491_4F6C_DD1Du64 ^ (round as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for i in (1..n).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        order.swap(i, (state % (i as u64 + 1)) as usize);
    }
    order
}

/// The median of `values` (sorts them).
pub fn median(values: &mut [f64]) -> f64 {
    assert!(!values.is_empty());
    values.sort_by(|a, b| a.total_cmp(b));
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// The nearest-rank percentile `p` (0–100) of sorted samples.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    assert!(!sorted.is_empty());
    assert!((0.0..=100.0).contains(&p));
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Median, minimum and maximum of per-round rates.
#[derive(Clone, Copy, Debug)]
pub struct Spread {
    /// Median of the rounds.
    pub median: f64,
    /// Slowest round.
    pub min: f64,
    /// Fastest round.
    pub max: f64,
    /// First quartile (nearest rank).
    pub q1: f64,
    /// Third quartile (nearest rank).
    pub q3: f64,
}

impl Spread {
    /// The spread of `values` (sorts them).
    pub fn of(values: &mut [f64]) -> Spread {
        let median = median(values);
        let rank = |p: f64| values[((p * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
        Spread { median, min: values[0], max: values[values.len() - 1], q1: rank(0.25), q3: rank(0.75) }
    }
}

/// The median cost in ns of one `Instant::now()` + `elapsed()` pair: what
/// every individually timed operation's latency includes.
pub fn timer_overhead_ns() -> f64 {
    let mut samples = vec![0u64; 10_001];
    for sample in samples.iter_mut() {
        let start = Instant::now();
        *sample = start.elapsed().as_nanos() as u64;
    }
    samples.sort_unstable();
    samples[samples.len() / 2] as f64
}

/// Writes every page of the region once so no timed loop takes a page
/// fault (tmpfs allocates pages on first touch).
pub fn prefault(region: &mut Region) {
    let chunk = vec![0u8; 1 << 20];
    let len = region.len();
    let mut offset = 0;
    while offset < len {
        let n = (len - offset).min(chunk.len() as u64) as usize;
        region.write(offset, &chunk[..n]);
        offset += n as u64;
    }
    region.persist(0, len);
}

/// Pins the calling thread to the CPU it runs on, so the single-threaded
/// suite is not migrated mid-measurement. Returns the CPU and a guard that
/// restores the previous affinity; `None` if the kernel refused.
pub fn pin_to_current_cpu() -> Option<(usize, AffinityGuard)> {
    // SAFETY: plain syscalls on a zeroed cpu_set_t we own.
    unsafe {
        let mut old: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut old) != 0 {
            return None;
        }
        let cpu = libc::sched_getcpu();
        if cpu < 0 {
            return None;
        }
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut one);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) != 0 {
            return None;
        }
        Some((cpu as usize, AffinityGuard { old }))
    }
}

/// Restores the thread's CPU affinity on drop.
pub struct AffinityGuard {
    old: libc::cpu_set_t,
}

impl Drop for AffinityGuard {
    fn drop(&mut self) {
        // SAFETY: restores a mask the kernel gave us.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.old) };
    }
}

/// The suite's progress bar: on stderr, hidden unless stderr is a terminal.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `steps` steps; hidden when `show` is false or stderr is not a TTY.
    pub fn new(steps: u64, show: bool) -> Progress {
        let target = if show && std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(steps), target);
        let style = ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .unwrap()
            .progress_chars("=> ");
        bar.set_style(style);
        Progress { bar }
    }

    /// Names what runs now.
    pub fn stage(&self, message: &str) {
        self.bar.set_message(message.to_string());
    }

    /// One step done.
    pub fn step(&self) {
        self.bar.inc(1);
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_percentiles() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        let sorted: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&sorted, 50.0), 50);
        assert_eq!(percentile(&sorted, 99.0), 99);
        assert_eq!(percentile(&sorted, 100.0), 100);
        assert_eq!(percentile(&sorted, 0.0), 1);
        let spread = Spread::of(&mut [5.0, 1.0, 3.0]);
        assert_eq!((spread.median, spread.min, spread.max), (3.0, 1.0, 5.0));
        let spread = Spread::of(&mut [8.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
        assert_eq!((spread.q1, spread.q3), (2.0, 6.0));
    }

    #[test]
    fn round_orders_are_permutations_that_vary() {
        let mut firsts = std::collections::BTreeSet::new();
        for round in 0..20 {
            let mut order = round_order(round, 5);
            firsts.insert(order[0]);
            order.sort_unstable();
            assert_eq!(order, vec![0, 1, 2, 3, 4]);
        }
        assert!(firsts.len() > 2);
        assert_eq!(round_order(3, 1), vec![0]);
    }

    #[test]
    fn aligned_buffer_is_aligned_and_deterministic() {
        let a = AlignedBuf::new(8192);
        let b = AlignedBuf::new(8192);
        assert_eq!(a.as_slice().as_ptr() as usize % 4096, 0);
        assert_eq!(a.as_slice(), b.as_slice());
        assert!(a.as_slice().iter().any(|&x| x != a.as_slice()[0]));
    }
}
