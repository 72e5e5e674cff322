//! Crash-state check of the remote pool's log directory, and the planted
//! bugs it must catch.
//!
//! The workload formats a pool on a [`TracedMedia`], then interleaves log
//! creations (all three tail strategies, one that fails for lack of space
//! and must write nothing) with appends to the logs created so far,
//! marking step `k` once it returned. Every crash image must satisfy:
//! - the pool opens (the superblock was persisted before the trace);
//! - the directory lists exactly the logs created by acknowledged steps,
//!   plus possibly the one in flight, with their configs;
//! - every listed log opens, and holds every acknowledged append to it,
//!   byte for byte, plus at most the append in flight.

use pmem::trace::TracedMedia;
use pmem::{MemMedia, Padding};
use pmwire_crashcheck::{explore, Config, CrashImage, Report};
use pmwire_log::{AppendLog, LogConfig, TailStrategy};

use crate::pool::{Pool, PoolConfig, PoolFaults};

/// One step of the workload.
#[derive(Clone, Debug)]
enum Step {
    Create { name: &'static [u8], config: LogConfig },
    Append { name: &'static [u8], payload: Vec<u8> },
}

fn workload() -> Vec<Step> {
    let self_valid = LogConfig::new(16384, TailStrategy::SelfValidating).with_padding(Padding::Line);
    let naive = LogConfig::new(8192, TailStrategy::Naive);
    let rotating = LogConfig::new(8192, TailStrategy::Rotating { blocks: 4, stride: 64 });
    let too_big = LogConfig::new(1 << 20, TailStrategy::Naive);
    let names: [&'static [u8]; 3] = [b"alpha", b"beta", b"gamma"];
    let mut steps = vec![Step::Create { name: names[0], config: self_valid }];
    let mut k = 0u8;
    let mut append = |steps: &mut Vec<Step>, upto: usize| {
        for name in &names[..upto] {
            k = k.wrapping_add(1);
            steps.push(Step::Append { name, payload: vec![k; 8 + (k as usize * 13) % 60] });
        }
    };
    append(&mut steps, 1);
    steps.push(Step::Create { name: names[1], config: naive });
    append(&mut steps, 2);
    steps.push(Step::Create { name: b"huge", config: too_big });
    steps.push(Step::Create { name: names[2], config: rotating });
    // Enough appends for at least 10,000 sampled crash images.
    for _ in 0..40 {
        append(&mut steps, 3);
    }
    steps
}

/// Crash-checks the directory with planted `faults`.
pub fn check_directory(faults: PoolFaults, config: &Config) -> Report {
    let steps = workload();
    let mut media = TracedMedia::new(96 << 10);
    let pool_config = PoolConfig { region_id: 1, dir_slots: 8, log_area_bytes: 64 << 10 };
    let mut pool = Pool::format_with_key(&mut media, pool_config, 1).expect("format");
    media.checkpoint();
    let mut logs: Vec<(&[u8], AppendLog)> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Create { name, config } => {
                if let Ok((_, log)) = pool.create_log_with_faults(&mut media, name, *config, faults) {
                    logs.push((name, log));
                }
            }
            Step::Append { name, payload } => {
                let (_, log) = logs.iter_mut().find(|(n, _)| n == name).expect("created before");
                log.append(&mut media, payload).expect("room");
            }
        }
        media.mark(i as u64 + 1);
    }
    explore(&media, config, |image| judge(image, &steps))
}

/// Judges one image against the steps acknowledged before it.
fn judge(image: &mut CrashImage<'_>, steps: &[Step]) -> Result<(), String> {
    let acked = image.acked.last().copied().unwrap_or(0) as usize;
    let media: &mut MemMedia = &mut image.media;
    let pool = Pool::open(media).map_err(|e| format!("pool does not open: {e}"))?;
    for (i, step) in steps.iter().enumerate() {
        let Step::Create { name, config } = step else { continue };
        let found = pool.find(name).and_then(|id| pool.slot(id));
        let must = i < acked && config.capacity < (1 << 20);
        let may = must || (i == acked && config.capacity < (1 << 20));
        match found {
            None if must => return Err(format!("acked log {:?} missing", String::from_utf8_lossy(name))),
            Some(_) if !may => return Err(format!("log {:?} present before its create", String::from_utf8_lossy(name))),
            Some(slot) if slot.config != *config => return Err(format!("log {:?} config differs", slot.name)),
            _ => {}
        }
    }
    let slots: Vec<_> = pool.logs().map(|(_, s)| s.clone()).collect();
    for slot in slots {
        let log = AppendLog::open(media, slot.base).map_err(|e| format!("log {:?}: {e}", slot.name))?;
        let entries = log.read_all(media);
        let appended: Vec<(usize, &Vec<u8>)> = steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Step::Append { name, payload } if *name == &slot.name[..] => Some((i, payload)),
                _ => None,
            })
            .collect();
        let must = appended.iter().filter(|(i, _)| *i < acked).count();
        let may = must + appended.iter().any(|(i, _)| *i == acked) as usize;
        if entries.len() < must || entries.len() > may {
            return Err(format!("log {:?}: {} entries, acked {must}", slot.name, entries.len()));
        }
        for (lsn, (entry, (_, payload))) in entries.iter().zip(&appended).enumerate() {
            if entry.0 != lsn as u64 || &entry.1 != *payload {
                return Err(format!("log {:?}: entry {lsn} differs", slot.name));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_survives_every_crash() {
        let report = check_directory(PoolFaults::default(), &Config::default());
        eprintln!("{}", report.describe());
        report.assert_ok();
        assert!(report.images > 1_000, "only {} images", report.images);
    }

    #[test]
    fn planted_slot_before_log_is_caught() {
        let faults = PoolFaults { slot_before_log: true, ..PoolFaults::default() };
        assert!(!check_directory(faults, &Config::default()).is_ok(), "checker missed a slot written before its log");
    }

    #[test]
    fn planted_unflushed_slot_is_caught() {
        let faults = PoolFaults { skip_slot_flush: true, ..PoolFaults::default() };
        assert!(!check_directory(faults, &Config::default()).is_ok(), "checker missed an unflushed slot");
    }
}
