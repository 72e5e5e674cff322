//! Appends/s of each tail strategy on an emulated region in /dev/shm.
//!
//! `cargo run --release -p pmwire-log --example append_rate -- [payload_bytes] [appends]`
//! A quick sanity check only; `pmwire bench` is the measurement of record.

use std::time::Instant;

use pmwire_log::{AppendLog, LogConfig, TailStrategy};

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("a number"));
    let payload_len = args.next().unwrap_or(256);
    let appends = args.next().unwrap_or(1_000_000);
    let payload = vec![0x5a; payload_len];
    let dir = tempfile::tempdir_in("/dev/shm").expect("/dev/shm");
    for tail in [TailStrategy::Naive, TailStrategy::Rotating { blocks: 16, stride: 256 }, TailStrategy::SelfValidating]
    {
        let config = LogConfig::new(8 << 20, tail);
        let path = dir.path().join(tail.name());
        let mut region = pmem::Region::create(&path, AppendLog::required_size(&config)).expect("region");
        let mut log = AppendLog::create(&mut region, 0, config).expect("create");
        let start = Instant::now();
        for _ in 0..appends {
            if log.append(&mut region, &payload).is_err() {
                log.truncate(&mut region, log.next_lsn()).expect("truncate");
                log.append(&mut region, &payload).expect("append");
            }
        }
        let rate = appends as f64 / start.elapsed().as_secs_f64();
        println!("{:<16} {payload_len:>5} B  {:>8.2} M appends/s", tail.name(), rate / 1e6);
    }
}
