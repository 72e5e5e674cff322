//! Crash checks for the counters, the register and the dual record of `pmem`.
//!
//! Each check runs a sequence of updates on a traced medium, marking each
//! update once it has returned, and accepts an image only if the recovered
//! value is the last acknowledged one or the one in flight.

use crate::{explore, Config, Report};
use pmem::trace::TracedMedia;
use pmem::{DualRecord, Media, NaiveCounter, RecordFaults, Rotation, RotatingCounter, RotatingRegister};

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

/// Stores per dual-record check: well over 10,000 crash images.
pub const RECORD_STORES: u64 = 3_000;
/// Where the dual record sits in its traced medium (not 0, to test `base`).
const RECORD_BASE: u64 = 192;

/// The payload of store `i`: 0 to 40 bytes, distinct for every `i`
/// (a hard state's term, vote and commit when 24 B long).
fn record_payload(i: u64) -> Vec<u8> {
    let len = (i * 7 % 41) as usize;
    let mixed = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut payload: Vec<u8> = (0..len).map(|k| (mixed >> (8 * (k % 8))) as u8 ^ k as u8).collect();
    if let Some(first) = payload.first_mut() {
        *first = i as u8; // neighbours differ even when their mix agrees
    }
    payload
}

/// Crash-checks [`DualRecord`]: `RECORD_STORES` stores of 0–40 B payloads,
/// with a reopen half-way (recovery then writes the slot it did not pick).
/// An image passes only if `open` succeeds and finds the acknowledged
/// payload or the one in flight, never anything else.
pub fn check_dual_record(faults: RecordFaults, config: &Config) -> Report {
    let mut media = TracedMedia::new(512);
    let record = DualRecord::format(&mut media, RECORD_BASE, &record_payload(0)).expect("format");
    let mut record = record.with_faults(faults);
    media.checkpoint();
    for i in 1..=RECORD_STORES {
        if i == RECORD_STORES / 2 {
            record = DualRecord::open(&media, RECORD_BASE).expect("reopen").with_faults(faults);
        }
        record.store(&mut media, &record_payload(i)).expect("store");
        media.mark(i);
    }
    explore(&media, config, |image| {
        let found = DualRecord::open(&image.media, RECORD_BASE).map_err(|e| format!("open failed: {e}"))?;
        let last = image.acked.last().copied().unwrap_or(0);
        let allowed = [record_payload(last), record_payload(last + 1)];
        if allowed.iter().any(|p| p[..] == *found.payload()) {
            Ok(())
        } else {
            let seq = found.sequence();
            Err(format!("recovered {:?} (seq {seq}); acked store {last} or the one in flight", found.payload()))
        }
    })
}

/// A dual record whose stores are never flushed ("a vote that is never
/// flushed"): must be caught.
pub fn check_planted_unflushed_record(config: &Config) -> Report {
    check_dual_record(RecordFaults { skip_flush: true }, config)
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
    fn dual_record_survives_every_crash() {
        check_dual_record(RecordFaults::default(), &config()).assert_passes_at_least(10_000);
    }

    #[test]
    fn planted_unflushed_record_is_caught() {
        check_planted_unflushed_record(&config()).assert_caught();
    }

    #[test]
    fn record_payloads_differ_from_their_neighbours() {
        assert!((0..RECORD_STORES).all(|i| record_payload(i) != record_payload(i + 1)));
        assert!((0..100).any(|i| record_payload(i).len() == 40));
        assert!((0..100).any(|i| record_payload(i).is_empty()));
    }

    #[test]
    fn register_value_sequence_decreases_sometimes() {
        assert!((1..100).any(|i| register_value(i + 1) < register_value(i)));
    }
}
