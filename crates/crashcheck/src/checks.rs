//! Crash checks for the counters and the register of `pmem`.
//!
//! Each check runs a sequence of updates on a traced medium, marking each
//! update once it has returned, and accepts an image only if the recovered
//! value is the last acknowledged one or the one in flight.

use crate::{explore, Config, Report};
use pmem::trace::TracedMedia;
use pmem::{Media, NaiveCounter, Rotation, RotatingCounter, RotatingRegister};

/// Updates per check: enough for well over 10,000 crash images.
pub const UPDATES: u64 = 6_000;

/// The value sequence of a counter: monotonic increments.
fn counter_value(i: u64) -> u64 {
    i * 5 + (i % 5)
}

/// The value sequence of the register: arbitrary, including decreases.
fn register_value(i: u64) -> u64 {
    if i == 0 {
        return 0;
    }
    let mixed = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    if i.is_multiple_of(3) {
        mixed >> 40
    } else {
        mixed
    }
}

/// Checks a recovered value against the acknowledged and in-flight updates.
fn judge(found: u64, acked: &[u64], value: impl Fn(u64) -> u64) -> Result<(), String> {
    let last = acked.last().copied().unwrap_or(0);
    let allowed = [value(last), value(last + 1)];
    if allowed.contains(&found) {
        Ok(())
    } else {
        Err(format!("recovered {found:#x}; acked update {last} ({:#x}) or in-flight {:#x}", allowed[0], allowed[1]))
    }
}

/// Crash-checks [`NaiveCounter`].
pub fn check_naive_counter(config: &Config) -> Report {
    let mut media = TracedMedia::new(4096);
    let mut counter = NaiveCounter::create(&mut media, 64);
    media.checkpoint();
    for i in 1..=UPDATES {
        counter.set(&mut media, counter_value(i));
        media.mark(i);
    }
    explore(&media, config, |image| judge(NaiveCounter::recover(&image.media, 64).get(), image.acked, counter_value))
}

/// Crash-checks [`RotatingCounter`] with `blocks` chunks `stride` apart.
pub fn check_rotating_counter(blocks: u32, stride: u32, config: &Config) -> Report {
    let rotation = Rotation::new(64, blocks, stride);
    let mut media = TracedMedia::new((64 + rotation.span()).next_multiple_of(64) as usize);
    let mut counter = RotatingCounter::create(&mut media, rotation);
    media.checkpoint();
    for i in 1..=UPDATES {
        counter.set(&mut media, counter_value(i));
        media.mark(i);
    }
    explore(&media, config, |image| {
        let recovered = RotatingCounter::recover(&image.media, rotation);
        judge(recovered.get(), image.acked, counter_value)
    })
}

/// Crash-checks [`RotatingRegister`], including recovery followed by more
/// updates (recovery does not know which chunk was written last).
pub fn check_rotating_register(blocks: u32, stride: u32, config: &Config) -> Report {
    let rotation = Rotation::new(0, blocks, stride);
    let size = rotation.span().next_multiple_of(64) as usize;
    let mut media = TracedMedia::new(size);
    let mut register = RotatingRegister::create(&mut media, rotation);
    media.checkpoint();
    let half = UPDATES / 2;
    for i in 1..=half {
        register.set(&mut media, register_value(i));
        media.mark(i);
    }
    // Restart mid-way: recover from the media and go on from chunk 0.
    let mut register = RotatingRegister::recover(&media, rotation);
    assert_eq!(register.get(), register_value(half));
    for i in half + 1..=UPDATES {
        register.set(&mut media, register_value(i));
        media.mark(i);
    }
    explore(&media, config, |image| {
        judge(RotatingRegister::recover(&image.media, rotation).get(), image.acked, register_value)
    })
}

/// A register that writes its chunk without flushing it: must be caught.
pub fn check_planted_unflushed_register(config: &Config) -> Report {
    let rotation = Rotation::new(0, 4, 64);
    let mut media = TracedMedia::new(256);
    RotatingRegister::create(&mut media, rotation);
    media.checkpoint();
    let mut chunks = [0u64; 4];
    for i in 1..=200u64 {
        let index = (i % 4) as usize;
        let others = chunks.iter().enumerate().filter(|&(k, _)| k != index).fold(0, |a, (_, c)| a ^ c);
        chunks[index] = others ^ register_value(i);
        media.write_u64(rotation.chunk(index as u32), chunks[index]);
        media.drain(); // the bug: no flush before the fence
        media.mark(i);
    }
    explore(&media, config, |image| {
        judge(RotatingRegister::recover(&image.media, rotation).get(), image.acked, register_value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::default()
    }

    #[test]
    fn naive_counter_survives_every_crash() {
        check_naive_counter(&config()).assert_passes_at_least(10_000);
    }

    #[test]
    fn rotating_counters_survive_every_crash() {
        for (blocks, stride) in [(1, 64), (10, 256), (16, 256), (4, 8)] {
            let report = check_rotating_counter(blocks, stride, &config());
            report.assert_passes_at_least(10_000);
        }
    }

    #[test]
    fn rotating_register_survives_every_crash() {
        for (blocks, stride) in [(10, 256), (16, 256), (3, 8), (1, 64)] {
            let report = check_rotating_register(blocks, stride, &config());
            report.assert_passes_at_least(10_000);
        }
    }

    #[test]
    fn planted_unflushed_register_is_caught() {
        check_planted_unflushed_register(&config()).assert_caught();
    }

    #[test]
    fn register_value_sequence_decreases_sometimes() {
        assert!((1..100).any(|i| register_value(i + 1) < register_value(i)));
    }
}
