//! A benchmark helper for `pmwire bench btree`: inserts of random keys
//! into a fresh tree on any [`Media`] (a [`pmem::Region`] for the real
//! thing), timing each insert.
//!
//! Every insert is durable when it returns (two drains: the new nodes,
//! then the root word), so the rate is of acknowledged, persisted inserts.

use std::time::Instant;

use pmem::Media;
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;
use thiserror::Error;

use crate::error::{BatchError, CreateError, InsertError};
use crate::tree::{BTree, BatchOp, Counters};

/// What to insert.
#[derive(Clone, Debug)]
pub struct InsertBench {
    /// Number of inserts (random keys; duplicates become updates).
    pub keys: u64,
    /// Key length (8 ..= 255); the first 8 bytes are random.
    pub key_bytes: usize,
    /// Value length (≤ 256); 8 is one PASTE extent, as in seed 001 Fig 6.
    pub value_bytes: usize,
    /// Seed of the key generator.
    pub seed: u64,
}

impl Default for InsertBench {
    fn default() -> InsertBench {
        InsertBench { keys: 100_000, key_bytes: 8, value_bytes: 8, seed: 1 }
    }
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct InsertReport {
    /// Inserts done.
    pub inserts: u64,
    /// Keys in the tree at the end.
    pub len: u64,
    /// Wall time of all inserts.
    pub elapsed_s: f64,
    /// Inserts per second.
    pub inserts_per_s: f64,
    /// Mean latency.
    pub latency_ns_mean: f64,
    /// Median latency.
    pub latency_ns_p50: u64,
    /// 99th percentile latency.
    pub latency_ns_p99: u64,
    /// 99.9th percentile latency.
    pub latency_ns_p999: u64,
    /// Tree height at the end.
    pub height: u32,
    /// Nodes in use at the end.
    pub nodes_used: u64,
}

/// Why a benchmark run stopped.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BenchError {
    /// The tree could not be created on the media.
    #[error("create: {0}")]
    Create(#[from] CreateError),
    /// An insert failed (the media is too small for the keys, say).
    #[error("insert: {0}")]
    Insert(#[from] InsertError),
    /// A batch failed (the media is too small for the keys, say).
    #[error("batch: {0}")]
    Batch(BatchError),
    /// A parameter is out of range.
    #[error("bad parameter: {0}")]
    BadParameter(&'static str),
}

/// Creates a tree filling `media` from `base` and inserts `config.keys`
/// random keys, timing each.
pub fn insert_random<M: Media>(media: &mut M, base: u64, config: &InsertBench) -> Result<InsertReport, BenchError> {
    if !(8..=crate::MAX_KEY_BYTES).contains(&config.key_bytes) {
        return Err(BenchError::BadParameter("key_bytes must be 8 ..= 255"));
    }
    if config.value_bytes > crate::MAX_VALUE_BYTES {
        return Err(BenchError::BadParameter("value_bytes must be ≤ 256"));
    }
    let nodes = BTree::nodes_for(media.len(), base);
    let mut tree = BTree::create(media, base, nodes)?;
    let mut key = vec![0x6b; config.key_bytes];
    let value = vec![0x76; config.value_bytes];
    let mut state = SplitMix64::seed_from_u64(config.seed);
    let mut latencies_ns: Vec<u64> = Vec::with_capacity(config.keys as usize);
    let start = Instant::now();
    for _ in 0..config.keys {
        key[..8].copy_from_slice(&state.next_u64().to_be_bytes());
        let before = Instant::now();
        tree.insert(media, &key, &value)?;
        latencies_ns.push(before.elapsed().as_nanos() as u64);
    }
    let elapsed_s = start.elapsed().as_secs_f64();
    latencies_ns.sort_unstable();
    let quantile = |q: f64| latencies_ns.get(((latencies_ns.len() as f64 - 1.0) * q) as usize).copied().unwrap_or(0);
    let sum: u64 = latencies_ns.iter().sum();
    Ok(InsertReport {
        inserts: config.keys,
        len: tree.len(),
        elapsed_s,
        inserts_per_s: config.keys as f64 / elapsed_s.max(1e-9),
        latency_ns_mean: sum as f64 / latencies_ns.len().max(1) as f64,
        latency_ns_p50: quantile(0.5),
        latency_ns_p99: quantile(0.99),
        latency_ns_p999: quantile(0.999),
        height: tree.height(),
        nodes_used: (tree.node_count() as usize - tree.free_nodes()) as u64,
    })
}

/// The KV checkpoint's pattern for [`batch_apply`]: a tree of `keys` keys,
/// then `batches` batches of `batch_ops` operations with sorted random
/// keys over the same keys (mostly puts of existing keys, some deletes).
#[derive(Clone, Debug)]
pub struct BatchBench {
    /// Keys loaded first (the key universe).
    pub keys: u64,
    /// Operations per measured batch (sorted by key, no key twice).
    pub batch_ops: usize,
    /// Measured batches.
    pub batches: usize,
    /// Value length.
    pub value_bytes: usize,
    /// Percent of operations that are deletes (the rest are puts).
    pub delete_percent: u64,
    /// Seed of the key choice.
    pub seed: u64,
}

impl Default for BatchBench {
    fn default() -> BatchBench {
        BatchBench { keys: 150_000, batch_ops: 5_000, batches: 20, value_bytes: 32, delete_percent: 5, seed: 1 }
    }
}

/// What one path measured in [`batch_apply`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchReport {
    /// Operations applied in measured batches.
    pub ops: u64,
    /// Wall time of the measured `apply_batch` calls (write-out and root
    /// switch included).
    pub elapsed_s: f64,
    /// Mean time per operation.
    pub ns_per_op: f64,
    /// Keys at the end.
    pub len: u64,
    /// Height at the end.
    pub height: u32,
    /// The tree's counters at the end (sorted path groups, fallbacks, splits…).
    pub counters: Counters,
}

/// The key of id `id`: 16–24 B, an 8 B hash of the id first (random order).
pub fn bench_key(id: u64) -> Vec<u8> {
    let hash = id.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29) ^ id;
    let mut key = hash.to_be_bytes().to_vec();
    key.extend_from_slice(format!("{id:08}").as_bytes());
    key.resize(16 + (id % 9) as usize, b'.');
    key
}

/// Runs the checkpoint pattern on two trees, one per media of `medias`
/// (base 0, each filled by its tree): both are loaded alike, then each
/// measured batch is applied to the first with the per-operation path (the
/// code before the sorted path) and to the second with `apply_batch`,
/// interleaved. Checks that both return the same previous values and end
/// with the same contents. Returns `[per-operation, sorted]`.
pub fn batch_apply<M: Media>(medias: [&mut M; 2], config: &BatchBench) -> Result<[BatchReport; 2], BenchError> {
    if config.keys == 0 || config.batch_ops == 0 || config.value_bytes > crate::MAX_VALUE_BYTES {
        return Err(BenchError::BadParameter("keys and batch_ops must be > 0, value_bytes ≤ 256"));
    }
    let [media_a, media_b] = medias;
    let mut trees = [
        BTree::create(media_a, 0, BTree::nodes_for(media_a.len(), 0))?,
        BTree::create(media_b, 0, BTree::nodes_for(media_b.len(), 0))?,
    ];
    let mut state = SplitMix64::seed_from_u64(config.seed);
    let value = |state: &mut SplitMix64| -> Vec<u8> {
        let byte = state.next_u64() as u8;
        vec![byte; config.value_bytes]
    };
    // Load in sorted chunks of random ids (leaves filled as a random insert order would).
    let mut ids: Vec<u64> = (0..config.keys).collect();
    for i in (1..ids.len()).rev() {
        ids.swap(i, (state.next_u64() % (i as u64 + 1)) as usize);
    }
    for chunk in ids.chunks(config.batch_ops) {
        let mut keys: Vec<Vec<u8>> = chunk.iter().map(|&id| bench_key(id)).collect();
        keys.sort_unstable();
        let values: Vec<Vec<u8>> = keys.iter().map(|_| value(&mut state)).collect();
        let ops: Vec<BatchOp> = keys.iter().zip(&values).map(|(key, value)| BatchOp::Put { key, value }).collect();
        trees[0].apply_batch(media_a, false, &ops).map_err(BenchError::Batch)?;
        trees[1].apply_batch(media_b, false, &ops).map_err(BenchError::Batch)?;
    }
    let mut elapsed = [0f64; 2];
    let mut ops_done = 0u64;
    for _ in 0..config.batches {
        let mut chosen: Vec<u64> = (0..config.batch_ops).map(|_| state.next_u64() % config.keys).collect();
        chosen.sort_unstable();
        chosen.dedup();
        let mut keys: Vec<(Vec<u8>, bool)> =
            chosen.iter().map(|&id| (bench_key(id), state.next_u64() % 100 < config.delete_percent)).collect();
        keys.sort_unstable();
        let values: Vec<Vec<u8>> = keys.iter().map(|_| value(&mut state)).collect();
        let ops: Vec<BatchOp> = keys
            .iter()
            .zip(&values)
            .map(|((key, delete), value)| if *delete { BatchOp::Delete { key } } else { BatchOp::Put { key, value } })
            .collect();
        let start = Instant::now();
        let before = trees[0].apply_batch_per_op(media_a, false, &ops).map_err(BenchError::Batch)?;
        elapsed[0] += start.elapsed().as_secs_f64();
        let start = Instant::now();
        let after = trees[1].apply_batch(media_b, false, &ops).map_err(BenchError::Batch)?;
        elapsed[1] += start.elapsed().as_secs_f64();
        assert_eq!(before, after, "both paths return the same previous values");
        ops_done += ops.len() as u64;
    }
    assert!(trees[0].iter(media_a).eq(trees[1].iter(media_b)), "both paths end with the same contents");
    let report = |tree: &BTree, elapsed_s: f64| BatchReport {
        ops: ops_done,
        elapsed_s,
        ns_per_op: elapsed_s * 1e9 / ops_done.max(1) as f64,
        len: tree.len(),
        height: tree.height(),
        counters: tree.counters(),
    };
    Ok([report(&trees[0], elapsed[0]), report(&trees[1], elapsed[1])])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_runs_on_mem_media() {
        let mut media = pmem::MemMedia::new(BTree::required_size(256) as usize);
        let config = InsertBench { keys: 2000, ..InsertBench::default() };
        let report = insert_random(&mut media, 0, &config).unwrap();
        assert_eq!(report.inserts, 2000);
        assert!(report.len > 1990);
        assert!(report.height >= 2);
        assert!(report.latency_ns_p50 <= report.latency_ns_p99);
    }

    #[test]
    fn batch_bench_runs_on_mem_media() {
        let mut a = pmem::MemMedia::new(BTree::required_size(512) as usize);
        let mut b = pmem::MemMedia::new(BTree::required_size(512) as usize);
        let config = BatchBench { keys: 6_000, batch_ops: 500, batches: 4, ..BatchBench::default() };
        let [per_op, sorted] = batch_apply([&mut a, &mut b], &config).unwrap();
        assert_eq!(per_op.len, sorted.len);
        assert!(per_op.ops > 1500 && per_op.ops == sorted.ops, "{per_op:?}");
        // Both trees were loaded by `apply_batch`; only the second's measured batches took the sorted path.
        assert!(sorted.counters.leaf_groups > per_op.counters.leaf_groups, "{sorted:?} {per_op:?}");
    }

    /// The checkpoint pattern on emulated Regions in /dev/shm: 150 K keys,
    /// 20 batches of 5,000 sorted random operations, per-operation path
    /// against the sorted path, interleaved. Prints the time per operation.
    /// `cargo test --release -p pmwire-btree batch_bench_checkpoint_pattern -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn batch_bench_checkpoint_pattern() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        // 256 MB each: enough free nodes that the sorted path writes leaves early, as in a KV pool.
        let size = BTree::required_size(65_536);
        let mut a = pmem::Region::create(dir.path().join("a"), size).unwrap();
        let mut b = pmem::Region::create(dir.path().join("b"), size).unwrap();
        for round in 0..3 {
            let config = BatchBench { seed: round + 1, ..BatchBench::default() };
            let [per_op, sorted] = batch_apply([&mut a, &mut b], &config).unwrap();
            println!(
                "round {round}: per-op {:.0} ns/op, sorted {:.0} ns/op, ratio {:.2}x (height {}, {} keys, {} leaf groups, {} fallbacks, {} splits)",
                per_op.ns_per_op,
                sorted.ns_per_op,
                per_op.ns_per_op / sorted.ns_per_op,
                sorted.height,
                sorted.len,
                sorted.counters.leaf_groups,
                sorted.counters.group_fallbacks,
                sorted.counters.splits,
            );
        }
    }
}
