//! A driver for `perf record`: the self-validating log's append (entries
//! padded to 64 B, the default) or the persist floor of `pmwire bench
//! local` (the same entry's stores, flushes and drain, no log), in a loop
//! on an emulated region in /dev/shm.
//!
//! `cargo run --release -p pmwire-log --example floor_profile -- log|floor|both [payload_bytes] [appends]`
//!
//! `both` alternates the two in blocks of 50,000 appends (as the bench's
//! rounds do) and prints each one's ns per append, median of the blocks.

use std::time::Instant;

use pmem::{Media, Padding, Region};
use pmwire_log::{prefetch_entry, store_entry_nodrain, AppendLog, LogConfig, TailStrategy, ENTRY_HEADER_BYTES};

const CAPACITY: u64 = 64 << 20;
const BLOCK: u64 = 50_000;

struct Floor {
    base: u64,
    pos: u64,
}

fn floor(region: &mut Region, floor: &mut Floor, payload: &[u8], count: u64) {
    let size = Padding::Line.padded(ENTRY_HEADER_BYTES as usize + payload.len()) as u64;
    for _ in 0..count {
        if floor.pos + size > CAPACITY {
            floor.pos = 0;
        }
        store_entry_nodrain(region, floor.base + floor.pos, payload, || [0x5a; ENTRY_HEADER_BYTES as usize]);
        let next = floor.pos + size;
        if next + size <= CAPACITY {
            prefetch_entry(region, floor.base + next, size);
        }
        region.drain();
        floor.pos = next;
    }
}

fn log(region: &mut Region, log: &mut AppendLog, payload: &[u8], count: u64) {
    for _ in 0..count {
        if log.append(region, payload).is_err() {
            log.truncate(region, log.next_lsn()).expect("truncate");
            log.append(region, payload).expect("append");
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "both".into());
    let payload_len: usize = args.next().map_or(256, |a| a.parse().expect("payload bytes"));
    let appends: u64 = args.next().map_or(20_000_000, |a| a.parse().expect("appends"));
    let payload = vec![0x5a; payload_len];
    let dir = tempfile::tempdir_in("/dev/shm").expect("/dev/shm");
    let config = LogConfig::new(CAPACITY, TailStrategy::SelfValidating).with_padding(Padding::Line);
    let log_bytes = AppendLog::required_size(&config).next_multiple_of(64 << 10);
    let mut region = Region::create(&dir.path().join("region"), log_bytes + CAPACITY).expect("region");
    let mut the_log = AppendLog::create(&mut region, 0, config).expect("create");
    let mut the_floor = Floor { base: log_bytes, pos: 0 };
    let blocks = appends.div_ceil(BLOCK);
    let (mut log_ns, mut floor_ns) = (Vec::new(), Vec::new());
    for block in 0..blocks {
        let order: &[&str] = match mode.as_str() {
            "both" if block % 2 == 0 => &["log", "floor"],
            "both" => &["floor", "log"],
            "log" => &["log"],
            "floor" => &["floor"],
            other => panic!("mode {other:?}: log, floor or both"),
        };
        for &which in order {
            let start = Instant::now();
            if which == "log" {
                log(&mut region, &mut the_log, &payload, BLOCK);
            } else {
                floor(&mut region, &mut the_floor, &payload, BLOCK);
            }
            let ns = start.elapsed().as_nanos() as f64 / BLOCK as f64;
            if which == "log" { log_ns.push(ns) } else { floor_ns.push(ns) }
        }
    }
    for (name, ns) in [("log", &mut log_ns), ("floor", &mut floor_ns)] {
        if ns.is_empty() {
            continue;
        }
        ns.sort_by(f64::total_cmp);
        println!("{name:<6} {payload_len} B: {:.1} ns/append (median of {} blocks)", ns[ns.len() / 2], ns.len());
    }
    if !log_ns.is_empty() && !floor_ns.is_empty() {
        println!("log/floor rate: {:.3}", floor_ns[floor_ns.len() / 2] / log_ns[log_ns.len() / 2]);
    }
}
