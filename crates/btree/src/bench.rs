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

use crate::error::{CreateError, InsertError};
use crate::tree::BTree;

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
}
