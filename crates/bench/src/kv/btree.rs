//! `pmwire bench btree` (seed 001 Fig 6): durable inserts of random keys
//! into the KV engine (volatile index + extent WAL + B+tree checkpoints over
//! pool buffers) on one region, zero-copy vs copy, 64 B and 1280 B values.
//!
//! - **zero-copy**: each value is first written into a fresh pool buffer
//!   with ordinary stores, as the kernel's receive copy leaves it, then
//!   stored by its extent: the engine flushes it in place and logs 8 B.
//! - **copy**: the value is first written into a DRAM receive buffer (the
//!   same receive copy), then the engine copies it into the pool
//!   (`set_copy`: non-temporal at or above the region's threshold).
//!
//! Every insert commits before the next starts (one client, one request
//! outstanding), or every `batch` inserts (a server batching one event-loop
//! wake's requests, PASTE A.2). Checkpoints into the B+tree run inside the
//! commits that fill half the WAL, so their cost is in the rates and tails.
//! For reference, the copy-on-write B+tree alone (`btree_cow`: every insert
//! a durable path copy and root switch, 8 B extent values) runs the same keys.

use anyhow::{Context, Result};
use pmem::{Media, Region, RegionOptions};
use pmwire_btree::bench::{insert_random, InsertBench};
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;
use pmwire_kv::{Engine, KvConfig};
use pmwire_log::Extent;
use std::path::PathBuf;
use std::time::Instant;

use crate::measure::{percentile, Progress};
use crate::remote::common::{finish, ratio};
use crate::schema::BenchResult;
use crate::SuiteReport;

/// The suite's name.
pub const SUITE: &str = "btree";

/// How the suite runs.
#[derive(Clone, Debug)]
pub struct BtreeOptions {
    /// Pool file (a tmpfs path is emulated persistent memory).
    pub pool: PathBuf,
    /// Inserts per variant (the paper: 1 M).
    pub keys: u64,
    /// Value sizes.
    pub value_sizes: Vec<usize>,
    /// Inserts per commit, each a variant.
    pub batches: Vec<usize>,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
    /// Seed of the keys and values.
    pub seed: u64,
}

impl BtreeOptions {
    /// The full run: 1 M keys, 64 B and 1280 B values, commits of 1 and 32.
    pub fn full(pool: PathBuf, out_dir: PathBuf) -> BtreeOptions {
        BtreeOptions { pool, keys: 1_000_000, value_sizes: vec![64, 1280], batches: vec![1, 32], out_dir, seed: 42 }
    }

    /// The tour's run: 50 K keys.
    pub fn quick(pool: PathBuf, out_dir: PathBuf) -> BtreeOptions {
        BtreeOptions { keys: 50_000, ..BtreeOptions::full(pool, out_dir) }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    ZeroCopy,
    Copy,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::ZeroCopy => "zero_copy",
            Mode::Copy => "copy",
        }
    }
}

/// Runs the suite, writes its JSON and prints its table.
pub fn run(options: &BtreeOptions) -> Result<SuiteReport> {
    let cells = options.value_sizes.len() * options.batches.len() * 2 + 1;
    let progress = Progress::new(cells as u64, true);
    let mut results = Vec::new();
    for &value_bytes in &options.value_sizes {
        for &batch in &options.batches {
            for mode in [Mode::ZeroCopy, Mode::Copy] {
                progress.stage(&format!("{} {value_bytes} B, commit every {batch}", mode.name()));
                results.push(engine_inserts(options, mode, value_bytes, batch)?);
                progress.step();
            }
        }
    }
    progress.stage("copy-on-write B+tree alone");
    results.push(cow_tree(options)?);
    progress.step();
    progress.finish();
    let _ = std::fs::remove_file(&options.pool);
    let rate = |variant: &str, size: usize| {
        results.iter().find(|r| r.variant == variant && r.size_bytes == Some(size as u64)).and_then(|r| r.get("inserts_per_s"))
    };
    let headlines = options
        .value_sizes
        .iter()
        .map(|&size| {
            let zero = rate("engine_zero_copy_commit_1", size);
            let copy = rate("engine_copy_commit_1", size);
            let name = format!("btree inserts {size} B: zero-copy / copy, commit each");
            ratio(&name, zero.zip(copy).map(|(z, c)| z / c), 1.0, true, "pmwire copy mode").for_information()
        })
        .collect();
    let parameters = serde_json::json!({ "keys": options.keys, "seed": options.seed, "pool": options.pool });
    finish(SUITE, &options.out_dir, parameters, results, Vec::new(), headlines)
}

/// A fresh engine with room for `keys` values of `value_bytes`.
fn fresh_engine(options: &BtreeOptions, value_bytes: usize) -> Result<(Region, Engine)> {
    let per_buffer = (2048 / value_bytes.next_multiple_of(8)).max(1) as u64;
    // Zero-copy values take a buffer each; copied ones share arena buffers.
    let buffers = options.keys + options.keys / per_buffer + 4096;
    let config = KvConfig { tree_nodes: (options.keys / 40 + 1024) as u32, ..KvConfig::new(buffers as u32) };
    let size = config.required_size().context("sizing the pool")?;
    let _ = std::fs::remove_file(&options.pool);
    let region_options = RegionOptions { size: Some(size), create: true, ..RegionOptions::default() };
    let mut region = Region::open(&options.pool, region_options).with_context(|| format!("{}", options.pool.display()))?;
    crate::measure::prefault(&mut region);
    let engine = Engine::create(&mut region, 0, &config).context("creating the engine")?;
    Ok((region, engine))
}

fn key_of(state: &mut SplitMix64, key: &mut Vec<u8>) {
    key.clear();
    key.extend_from_slice(b"key:");
    key.extend_from_slice(&state.next_u64().to_le_bytes());
}

fn engine_inserts(options: &BtreeOptions, mode: Mode, value_bytes: usize, batch: usize) -> Result<BenchResult> {
    let (mut region, mut kv) = fresh_engine(options, value_bytes)?;
    let mut state = SplitMix64::seed_from_u64(options.seed);
    let (mut key, mut value) = (Vec::with_capacity(16), vec![0u8; value_bytes]);
    let mut received = vec![0u8; value_bytes];
    let mut latencies = Vec::with_capacity((options.keys as usize).div_ceil(batch));
    let started = Instant::now();
    let mut done = 0u64;
    while done < options.keys {
        let t = Instant::now();
        let n = (batch as u64).min(options.keys - done);
        for _ in 0..n {
            key_of(&mut state, &mut key);
            value.iter_mut().for_each(|b| *b = state.next_u64() as u8);
            match mode {
                Mode::ZeroCopy => {
                    let buf = kv.pool_mut().alloc().context("pool out of buffers")?;
                    let at = kv.pool().buffer_offset(buf);
                    region.write(at, &value); // what the kernel's receive copy leaves
                    let extent = Extent { buf_idx: buf, offset: 0, len: value_bytes as u16 };
                    kv.set_extents(&mut region, &key, 0, &[extent]).context("set_extents")?;
                    kv.pool_mut().release(buf); // the ring's reference
                }
                Mode::Copy => {
                    received.copy_from_slice(std::hint::black_box(&value)); // the receive copy, into DRAM
                    kv.set_copy(&mut region, &key, 0, &received).context("set_copy")?
                }
            }
        }
        kv.commit(&mut region).context("commit")?;
        latencies.push(t.elapsed().as_nanos() as u64);
        done += n;
    }
    let secs = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let stats = kv.stats();
    Ok(BenchResult::new(SUITE, &format!("engine_{}_commit_{batch}", mode.name()))
        .size(value_bytes as u64)
        .metric("inserts_per_s", options.keys as f64 / secs)
        .metric("latency_ns_p50_per_commit", percentile(&latencies, 50.0) as f64)
        .metric("latency_ns_p99_per_commit", percentile(&latencies, 99.0) as f64)
        .param("keys", options.keys)
        .param("inserts_per_commit", batch as u64)
        .param("entries_at_end", kv.len() as u64)
        .param("checkpoints", format!("{stats:?}")))
}

fn cow_tree(options: &BtreeOptions) -> Result<BenchResult> {
    let nodes = (options.keys / 40 + 1024) as u32;
    let size = pmwire_btree::BTree::required_size(nodes);
    let _ = std::fs::remove_file(&options.pool);
    let region_options = RegionOptions { size: Some(size), create: true, ..RegionOptions::default() };
    let mut region = Region::open(&options.pool, region_options)?;
    crate::measure::prefault(&mut region);
    let config = InsertBench { keys: options.keys, key_bytes: 12, value_bytes: 8, seed: options.seed };
    let report = insert_random(&mut region, 0, &config).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(BenchResult::new(SUITE, "btree_cow_commit_1")
        .size(8)
        .metric("inserts_per_s", report.inserts_per_s)
        .metric("latency_ns_p50_per_commit", report.latency_ns_p50 as f64)
        .metric("latency_ns_p99_per_commit", report.latency_ns_p99 as f64)
        .param("keys", options.keys)
        .param("height", report.height as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_measures_every_variant() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let options = BtreeOptions {
            pool: dir.path().join("btree.pool"),
            keys: 2000,
            value_sizes: vec![64, 1280],
            batches: vec![1, 32],
            out_dir: dir.path().join("results"),
            seed: 3,
        };
        let report = run(&options).unwrap();
        let text = std::fs::read_to_string(&report.json_path).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let results = json["results"].as_array().unwrap();
        assert_eq!(results.len(), 2 * 2 * 2 + 1);
        for r in results {
            assert!(r["inserts_per_s"].as_f64().unwrap() > 0.0, "{r}");
        }
        assert_eq!(report.headlines.len(), 2);
        assert!(report.headlines.iter().all(|h| h.value.is_finite() && h.informational));
    }
}
