//! Durable inserts/s of random keys into a tree on an emulated region in
//! /dev/shm, beside the same tree on volatile `MemMedia` (no flushes, no
//! fences) and `std::collections::BTreeMap`, in the same run (a quick
//! check; `pmwire bench btree` will be the measurement of record).
//!
//! `cargo run --release -p pmwire-btree --example insert_rate -- [keys] [value_bytes] [region_mib]`

use pmwire_btree::bench::{insert_random, InsertBench};
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>().expect("a number"));
    let keys = args.next().unwrap_or(200_000);
    let value_bytes = args.next().unwrap_or(8) as usize;
    let region_mib = args.next().unwrap_or(64);
    let dir = tempfile::tempdir_in("/dev/shm").expect("/dev/shm");
    let mut region = pmem::Region::create(dir.path().join("btree"), region_mib << 20).expect("region");
    let config = InsertBench { keys, value_bytes, ..InsertBench::default() };
    let report = insert_random(&mut region, 0, &config).expect("bench");
    println!(
        "{} inserts ({} B keys, {} B values, {} MiB {}): {:.0} inserts/s, latency mean {:.0} ns, p50 {} ns, p99 {} ns, p99.9 {} ns; height {}, {} nodes",
        report.inserts,
        config.key_bytes,
        value_bytes,
        region_mib,
        region.kind(),
        report.inserts_per_s,
        report.latency_ns_mean,
        report.latency_ns_p50,
        report.latency_ns_p99,
        report.latency_ns_p999,
        report.height,
        report.nodes_used
    );
    let mut media = pmem::MemMedia::new((region_mib << 20) as usize);
    let volatile = insert_random(&mut media, 0, &config).expect("bench");
    let mut map = std::collections::BTreeMap::new();
    let mut state = SplitMix64::seed_from_u64(config.seed);
    let start = std::time::Instant::now();
    for _ in 0..keys {
        let key = state.next_u64().to_be_bytes();
        map.insert(key, vec![0x76u8; value_bytes]);
    }
    let map_rate = keys as f64 / start.elapsed().as_secs_f64();
    println!(
        "same tree on MemMedia: {:.0} inserts/s ({:.2}x of persistent); std BTreeMap: {:.0} inserts/s ({:.2}x)",
        volatile.inserts_per_s,
        volatile.inserts_per_s / report.inserts_per_s,
        map_rate,
        map_rate / report.inserts_per_s
    );
}
