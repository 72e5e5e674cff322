//! Model-based tests: the tree against a `std` `BTreeMap` over thousands
//! of random inserts, updates, deletes, gets and range scans, with
//! reopens and invariant checks along the way.

use std::collections::BTreeMap;
use std::ops::Bound;

use pmem::{Media, MemMedia};

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;
use crate::{
    BTree, BatchError, BatchOp, CreateError, DeleteError, InsertError, LookupError, OpenError, MAX_KEY_BYTES,
    MAX_VALUE_BYTES, MIN_NODES,
};

const BASE: u64 = 512;

struct Rng(SplitMix64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.below(256) as u8).collect()
    }
}

fn media(nodes: u32) -> MemMedia {
    MemMedia::new((BASE + BTree::required_size(nodes)) as usize)
}

/// A key from a small alphabet so that deletes and updates hit existing keys.
fn key(rng: &mut Rng, max_len: usize) -> Vec<u8> {
    let len = 1 + rng.below(max_len as u64) as usize;
    let mut key = vec![b'k'; len];
    let id = rng.below(3000);
    key[..len.min(4)].copy_from_slice(&id.to_be_bytes()[4..4 + len.min(4)]);
    key
}

fn check_range(tree: &BTree, media: &MemMedia, model: &BTreeMap<Vec<u8>, Vec<u8>>, lo: &[u8], hi: &[u8]) {
    let bounds = [Bound::Included(lo), Bound::Excluded(hi)];
    let got: Vec<(Vec<u8>, Vec<u8>)> =
        tree.range(media, bounds[0], bounds[1]).map(|(k, v)| (k, v.to_vec())).take(50).collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> =
        model.range::<[u8], _>((bounds[0], bounds[1])).map(|(k, v)| (k.clone(), v.clone())).take(50).collect();
    assert_eq!(got, want, "range [{lo:?}, {hi:?})");
}

fn run_model(seed: u64, ops: usize, max_key: usize, max_value: usize) {
    let mut rng = Rng(SplitMix64::seed_from_u64(seed));
    let mut media = media(2048);
    let mut tree = BTree::create(&mut media, BASE, 2048).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for op in 0..ops {
        let k = key(&mut rng, max_key);
        match rng.below(10) {
            0..=4 => {
                let len = rng.below(max_value as u64 + 1) as usize;
                let value = rng.bytes(len);
                let previous = tree.insert(&mut media, &k, &value).unwrap();
                assert_eq!(previous.map(|v| v.to_vec()), model.insert(k, value), "seed {seed} op {op}");
            }
            5..=7 => {
                let previous = tree.delete(&mut media, &k).unwrap();
                assert_eq!(previous.map(|v| v.to_vec()), model.remove(&k), "seed {seed} op {op}");
            }
            8 => {
                let got = tree.get(&media, &k).unwrap().map(|v| v.to_vec());
                assert_eq!(got.as_ref(), model.get(&k), "seed {seed} op {op}");
            }
            _ => {
                let other = key(&mut rng, max_key);
                let (lo, hi) = if k <= other { (k, other) } else { (other, k) };
                check_range(&tree, &media, &model, &lo, &hi);
            }
        }
        assert_eq!(tree.len(), model.len() as u64);
        if op % 500 == 499 {
            tree.verify(&media).unwrap_or_else(|e| panic!("seed {seed} op {op}: {e}"));
            tree = BTree::open(&media, BASE).unwrap();
        }
    }
    let all: Vec<(Vec<u8>, Vec<u8>)> = tree.iter(&media).map(|(k, v)| (k, v.to_vec())).collect();
    assert_eq!(all, model.into_iter().collect::<Vec<_>>());
    tree.verify(&media).unwrap();
}

#[test]
fn matches_btreemap_short_keys() {
    run_model(1, 6000, 12, 16);
}

#[test]
fn matches_btreemap_long_keys_and_values() {
    run_model(2, 4000, MAX_KEY_BYTES, MAX_VALUE_BYTES);
}

#[test]
fn matches_btreemap_mixed() {
    for seed in 3..6 {
        run_model(seed, 2500, 100, 64);
    }
}

#[test]
fn grows_and_shrinks_to_an_empty_leaf() {
    let mut media = media(1024);
    let mut tree = BTree::create(&mut media, BASE, 1024).unwrap();
    let value = [9u8; 200];
    let keys: Vec<Vec<u8>> =
        (0..3000u32).map(|i| format!("{:08}{}", i * 7919 % 3001, "x".repeat(40)).into_bytes()).collect();
    for k in &keys {
        tree.insert(&mut media, k, &value).unwrap();
    }
    assert!(tree.height() >= 3, "height {}", tree.height());
    tree.verify(&media).unwrap();
    for k in keys.iter().rev() {
        assert!(tree.delete(&mut media, k).unwrap().is_some());
    }
    let counters = tree.counters();
    assert!(counters.merges > 0 && counters.rebalances > 0 && counters.root_collapses >= 2, "{counters:?}");
    assert_eq!(tree.height(), 1);
    assert!(tree.is_empty());
    let stats = tree.verify(&media).unwrap();
    assert_eq!(stats.nodes, 1);
    assert_eq!(tree.free_nodes(), 1023, "every other node is free again");
}

#[test]
fn full_tree_refuses_without_writing() {
    let mut media = media(8);
    let mut tree = BTree::create(&mut media, BASE, 8).unwrap();
    let mut i = 0u32;
    let err = loop {
        match tree.insert(&mut media, format!("{i:0>200}").as_bytes(), &[1; 256]) {
            Ok(_) => i += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, InsertError::Full { .. }), "{err}");
    let before = media.bytes().to_vec();
    assert!(tree.insert(&mut media, b"more", b"").is_err());
    assert_eq!(media.bytes(), &before[..]);
    tree.verify(&media).unwrap();
    assert_eq!(BTree::open(&media, BASE).unwrap().len(), i as u64);
}

#[test]
fn bad_arguments_are_typed_errors() {
    let mut media = media(16);
    assert_eq!(BTree::create(&mut media, 100, 16).unwrap_err(), CreateError::Misaligned { base: 100 });
    assert!(matches!(BTree::create(&mut media, BASE, 17), Err(CreateError::MediaTooSmall { .. })));
    assert!(matches!(BTree::create(&mut media, BASE, 2), Err(CreateError::TooFewNodes { .. })));
    assert!(matches!(BTree::open(&media, BASE), Err(OpenError::BadMagic { .. })));
    let mut tree = BTree::create(&mut media, BASE, 16).unwrap();
    let long = [0u8; 256];
    assert!(matches!(tree.insert(&mut media, &long, b""), Err(InsertError::KeyTooLong { .. })));
    assert!(matches!(tree.insert(&mut media, b"k", &[0; 257]), Err(InsertError::ValueTooLong { .. })));
    assert!(matches!(tree.delete(&mut media, &long), Err(DeleteError::KeyTooLong { .. })));
    assert!(matches!(tree.get(&media, &long), Err(LookupError::KeyTooLong { .. })));
    assert_eq!(tree.delete(&mut media, b"absent").unwrap(), None);
    tree.insert(&mut media, b"", b"empty key").unwrap();
    assert_eq!(tree.get(&media, b"").unwrap().unwrap().as_bytes(), b"empty key");
}

#[test]
fn open_rejects_damaged_nodes_and_header() {
    let mut media = media(64);
    let mut tree = BTree::create(&mut media, BASE, 64).unwrap();
    for i in 0..200u32 {
        tree.insert(&mut media, &i.to_be_bytes(), &[3; 40]).unwrap();
    }
    let reopened = BTree::open(&media, BASE).unwrap();
    assert_eq!(reopened.len(), 200);
    let (root, _) = tree.root();
    let at = tree.node_offset(root) + 40;
    let word = media.read_u64(at);
    media.write_u64(at, word ^ 1);
    assert!(matches!(BTree::open(&media, BASE), Err(OpenError::Corrupt { .. })));
    media.write_u64(at, word);
    media.write_u64(BASE + 16, 99);
    assert!(matches!(BTree::open(&media, BASE), Err(OpenError::HeaderChecksum { .. })));
}

#[test]
fn runs_on_an_emulated_region() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let size = BTree::required_size(512);
    let mut region = pmem::Region::create(dir.path().join("tree"), size).unwrap();
    let mut tree = BTree::create(&mut region, 0, 512).unwrap();
    for i in 0..5000u32 {
        tree.insert(&mut region, &(i.wrapping_mul(2654435761)).to_be_bytes(), &i.to_le_bytes()).unwrap();
    }
    drop(region);
    let region = pmem::Region::open(dir.path().join("tree"), pmem::RegionOptions::default()).unwrap();
    let tree = BTree::open(&region, 0).unwrap();
    assert_eq!(tree.len(), 5000);
    assert_eq!(
        tree.get(&region, &(7u32.wrapping_mul(2654435761)).to_be_bytes()).unwrap().unwrap().as_bytes(),
        &7u32.to_le_bytes()
    );
    tree.verify(&region).unwrap();
}

#[test]
fn ranges_honour_every_bound_kind() {
    let mut media = media(512);
    let mut tree = BTree::create(&mut media, BASE, 512).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    assert_eq!(tree.iter(&media).count(), 0);
    for i in 0..3000u32 {
        let key = format!("{:06}{}", i * 37 % 3000, "-".repeat(200 + (i % 50) as usize)).into_bytes();
        tree.insert(&mut media, &key, &i.to_le_bytes()).unwrap();
        model.insert(key, i.to_le_bytes().to_vec());
    }
    assert!(tree.height() >= 3);
    let probes: Vec<Vec<u8>> = [&b""[..], b"000000", b"000500-", b"0015", b"002999", b"1", &[0xff; 300]]
        .iter()
        .map(|p| p.to_vec())
        .chain(model.keys().step_by(97).cloned())
        .collect();
    for lo in &probes {
        for hi in probes.iter().step_by(3) {
            for (start, end) in [
                (Bound::Included(&lo[..]), Bound::Excluded(&hi[..])),
                (Bound::Excluded(&lo[..]), Bound::Included(&hi[..])),
                (Bound::Excluded(&lo[..]), Bound::Unbounded),
                (Bound::Unbounded, Bound::Included(&hi[..])),
            ] {
                if lo > hi && !matches!(end, Bound::Unbounded) && !matches!(start, Bound::Unbounded) {
                    continue;
                }
                let got: Vec<Vec<u8>> = tree.range(&media, start, end).map(|(k, _)| k).take(300).collect();
                let want: Vec<Vec<u8>> =
                    model.range::<[u8], _>((start, end)).map(|(k, _)| k.clone()).take(300).collect();
                assert_eq!(got, want, "{start:?} .. {end:?}");
            }
        }
    }
}

#[test]
fn create_over_an_old_tree_starts_empty() {
    let mut media = media(32);
    let mut tree = BTree::create(&mut media, BASE, 32).unwrap();
    for i in 0..500u32 {
        tree.insert(&mut media, &i.to_be_bytes(), b"old").unwrap();
    }
    let tree = BTree::create(&mut media, BASE, 16).unwrap();
    assert!(tree.is_empty());
    let tree = BTree::open(&media, BASE).unwrap();
    assert_eq!((tree.len(), tree.node_count(), tree.free_nodes()), (0, 16, 15));
}

/// Batches of random puts and deletes (and an occasional clear) against
/// the model; every batch is one root switch (two drains).
fn run_batches(seed: u64, batches: usize, max_ops: u64, max_key: usize, max_value: usize) {
    let mut rng = Rng(SplitMix64::seed_from_u64(seed));
    let mut media = media(2048);
    let mut tree = BTree::create(&mut media, BASE, 2048).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for b in 0..batches {
        let clear = rng.below(40) == 0;
        if clear {
            model.clear();
        }
        let ops: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..1 + rng.below(max_ops))
            .map(|_| {
                let k = key(&mut rng, max_key);
                let len = rng.below(max_value as u64 + 1) as usize;
                (k, (rng.below(10) < 6).then(|| rng.bytes(len)))
            })
            .collect();
        let batch = as_batch(&ops);
        let drains = media.drains;
        let previous = tree.apply_batch(&mut media, clear, &batch).unwrap();
        assert!(media.drains - drains <= 2, "seed {seed} batch {b}: {} drains", media.drains - drains);
        for ((key, value), previous) in ops.into_iter().zip(previous) {
            let expected = match value {
                Some(value) => model.insert(key, value),
                None => model.remove(&key),
            };
            assert_eq!(previous.map(|v| v.to_vec()), expected, "seed {seed} batch {b}");
        }
        assert_eq!(tree.len(), model.len() as u64, "seed {seed} batch {b}");
        if b % 20 == 19 {
            tree.verify(&media).unwrap_or_else(|e| panic!("seed {seed} batch {b}: {e}"));
            tree = BTree::open(&media, BASE).unwrap();
        }
    }
    tree.verify(&media).unwrap();
    let all: Vec<(Vec<u8>, Vec<u8>)> = tree.iter(&media).map(|(k, v)| (k, v.to_vec())).collect();
    assert_eq!(all, model.into_iter().collect::<Vec<_>>());
}

/// A batch of puts (`Some`) and deletes (`None`) borrowing `ops`.
fn as_batch(ops: &[(Vec<u8>, Option<Vec<u8>>)]) -> Vec<BatchOp<'_>> {
    ops.iter()
        .map(|(key, value)| match value {
            Some(value) => BatchOp::Put { key, value },
            None => BatchOp::Delete { key },
        })
        .collect()
}

#[test]
fn batches_match_btreemap() {
    run_batches(11, 300, 60, 40, 64);
    run_batches(12, 120, 200, MAX_KEY_BYTES, MAX_VALUE_BYTES);
}

/// Same-length updates of keys a batch already touched take the in-place
/// path (no new node, no new path): the values, the previous values, the
/// CRCs (checked by `verify` and `open`) and the node count must all come
/// out as with copies.
#[test]
fn batch_updates_in_place_match_btreemap() {
    let mut rng = Rng(SplitMix64::seed_from_u64(21));
    let mut media = media(1024);
    let mut tree = BTree::create(&mut media, BASE, 1024).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut in_place = 0;
    for b in 0..40 {
        // Few keys, most values 16 B: many repeats of a key within a batch.
        let ops: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..1 + rng.below(400))
            .map(|_| {
                let k = format!("key{:05}", rng.below(3000)).into_bytes();
                let len = if rng.below(10) == 0 { rng.below(40) as usize } else { 16 };
                (k, (rng.below(20) != 0).then(|| rng.bytes(len)))
            })
            .collect();
        let batch = as_batch(&ops);
        let previous = tree.apply_batch(&mut media, false, &batch).unwrap();
        for ((key, value), previous) in ops.into_iter().zip(previous) {
            let expected = match value {
                Some(value) => model.insert(key, value),
                None => model.remove(&key),
            };
            assert_eq!(previous.map(|v| v.to_vec()), expected, "batch {b}");
        }
        let stats = tree.verify(&media).unwrap_or_else(|e| panic!("batch {b}: {e}"));
        assert_eq!(tree.free_nodes() as u32, 1024 - stats.nodes, "batch {b}: no node leaked");
        in_place += tree.counters().in_place_updates;
        tree = BTree::open(&media, BASE).unwrap();
    }
    let all: Vec<(Vec<u8>, Vec<u8>)> = tree.iter(&media).map(|(k, v)| (k, v.to_vec())).collect();
    assert_eq!(all, model.into_iter().collect::<Vec<_>>());
    assert!(in_place > 1000, "{in_place} in-place updates");
}

#[test]
fn batch_writes_each_node_once() {
    let mut media = media(1024);
    let mut tree = BTree::create(&mut media, BASE, 1024).unwrap();
    let keys: Vec<Vec<u8>> = (0..2000u32).map(|i| format!("{:08}", i * 7919 % 2003).into_bytes()).collect();
    let ops: Vec<BatchOp> = keys.iter().map(|k| BatchOp::Put { key: k, value: &[7; 8] }).collect();
    let flushes = media.flushes;
    tree.apply_batch(&mut media, false, &ops).unwrap();
    let stats = tree.verify(&media).unwrap();
    assert_eq!(stats.entries, 2000);
    // Every reachable node written once (nodes are ≥ 256 B: non-temporal,
    // no flush), plus the root word's flush.
    assert!(media.flushes - flushes <= 1 + stats.nodes as u64, "{} flushes", media.flushes - flushes);
    assert_eq!(tree.free_nodes() as u32, 1024 - stats.nodes, "no node leaked by the batch");
}

#[test]
fn full_batch_leaves_the_tree_untouched() {
    let mut media = media(MIN_NODES);
    let mut tree = BTree::create(&mut media, BASE, MIN_NODES).unwrap();
    let keys: Vec<Vec<u8>> = (0..200u32).map(|i| format!("{i:08}{}", "y".repeat(200)).into_bytes()).collect();
    let ops: Vec<BatchOp> = keys.iter().map(|k| BatchOp::Put { key: k, value: &[1; 200] }).collect();
    let before = media.bytes().to_vec();
    let error = tree.apply_batch(&mut media, false, &ops).unwrap_err();
    assert!(matches!(error, BatchError::Full { .. }), "{error}");
    assert_eq!(media.bytes(), &before[..], "nothing written");
    assert!(tree.is_empty());
    tree.verify(&media).unwrap();
    let long = [0u8; MAX_KEY_BYTES + 1];
    let error = tree.apply_batch(&mut media, false, &[BatchOp::Delete { key: &long }]).unwrap_err();
    assert_eq!(error, BatchError::KeyTooLong { index: 0, len: MAX_KEY_BYTES + 1, max: MAX_KEY_BYTES });
    tree.apply_batch(&mut media, false, &ops[..3]).unwrap();
    assert_eq!(tree.len(), 3);
    tree.apply_batch(&mut media, true, &[]).unwrap();
    assert!(tree.is_empty());
    tree.verify(&media).unwrap();
}
