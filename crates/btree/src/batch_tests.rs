//! Tests of `apply_batch`'s sorted path: against a `BTreeMap` model and
//! against the per-operation path (`apply_batch_per_op`, the code before
//! it) on the same batches — the same previous values, the same contents,
//! every invariant (`verify`, no node leaked), through splits of leaves
//! and internal nodes, leaves emptied by deletes, root growth and
//! collapse, batches at the edge of `BatchError::Full`, and leaves written
//! early and through the overlay.

use std::collections::BTreeMap;

use pmem::MemMedia;
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

use crate::{BTree, BatchError, BatchOp, Counters, Value};

const BASE: u64 = 512;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
/// Operations as owned data: a put (`Some`) or a delete (`None`).
type Ops = Vec<(Vec<u8>, Option<Vec<u8>>)>;

fn media(nodes: u32) -> MemMedia {
    MemMedia::new((BASE + BTree::required_size(nodes)) as usize)
}

fn as_batch(ops: &Ops) -> Vec<BatchOp<'_>> {
    ops.iter()
        .map(|(key, value)| match value {
            Some(value) => BatchOp::Put { key, value },
            None => BatchOp::Delete { key },
        })
        .collect()
}

/// Applies `ops` to the model; returns the previous values.
fn apply_model(model: &mut Model, clear: bool, ops: &Ops) -> Vec<Option<Vec<u8>>> {
    if clear {
        model.clear();
    }
    ops.iter()
        .map(|(key, value)| match value {
            Some(value) => model.insert(key.clone(), value.clone()),
            None => model.remove(key),
        })
        .collect()
}

fn owned(previous: Vec<Option<Value>>) -> Vec<Option<Vec<u8>>> {
    previous.into_iter().map(|v| v.map(|v| v.to_vec())).collect()
}

/// Checks `tree` against `model`: contents, `len`, invariants, no leak.
fn check(tree: &BTree, media: &MemMedia, model: &Model, what: &str) {
    let stats = tree.verify(media).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(tree.free_nodes() as u32, tree.node_count() - stats.nodes, "{what}: a node leaked");
    assert_eq!(tree.len(), model.len() as u64, "{what}: len");
    let all: Vec<(Vec<u8>, Vec<u8>)> = tree.iter(media).map(|(k, v)| (k, v.to_vec())).collect();
    assert!(all.iter().map(|(k, v)| (k, v)).eq(model.iter()), "{what}: contents differ from the model");
}

/// Random keys of `4..=max_key` bytes over `universe` ids.
fn key(rng: &mut SplitMix64, universe: u64, max_key: usize) -> Vec<u8> {
    let id = rng.next_u64() % universe;
    let len = 4 + (id as usize * 7) % (max_key - 3);
    let mut key = vec![b'k'; len];
    key[..4].copy_from_slice(&(id as u32).to_be_bytes());
    key
}

/// A batch of `n` operations: sorted (no key twice) unless `unsorted`.
fn random_ops(rng: &mut SplitMix64, n: usize, shape: &Shape, unsorted: bool) -> Ops {
    let mut ops: Ops = (0..n)
        .map(|_| {
            let k = key(rng, shape.universe, shape.max_key);
            let delete = rng.next_u64() % 100 < shape.delete_percent;
            let len = (rng.next_u64() % (shape.max_value as u64 + 1)) as usize;
            (k, (!delete).then(|| vec![rng.next_u64() as u8; len]))
        })
        .collect();
    if !unsorted {
        ops.sort_by(|a, b| a.0.cmp(&b.0));
        ops.dedup_by(|a, b| a.0 == b.0);
    }
    ops
}

#[derive(Clone, Copy, Debug)]
struct Shape {
    universe: u64,
    max_key: usize,
    max_value: usize,
    delete_percent: u64,
}

/// Runs `batches` random batches on two trees, one per path, and the model.
/// Returns the sorted tree's counters and how many batches a path refused.
fn compare_paths(seed: u64, nodes: u32, batches: usize, max_ops: u64, shapes: &[Shape]) -> (Counters, usize) {
    let mut refused = 0;
    let mut rng = SplitMix64::seed_from_u64(seed);
    let (mut media_a, mut media_b) = (media(nodes), media(nodes));
    let mut a = BTree::create(&mut media_a, BASE, nodes).unwrap();
    let mut b = BTree::create(&mut media_b, BASE, nodes).unwrap();
    let mut model = Model::new();
    for batch in 0..batches {
        let shape = shapes[batch % shapes.len()];
        let clear = rng.next_u64() % 50 == 0;
        let unsorted = rng.next_u64() % 5 == 0;
        let n = 1 + (rng.next_u64() % max_ops) as usize;
        let ops = random_ops(&mut rng, n, &shape, unsorted);
        let what = format!("seed {seed} batch {batch} ({} ops, {shape:?}, unsorted {unsorted})", ops.len());
        let per_op = a.apply_batch_per_op(&mut media_a, clear, &as_batch(&ops));
        let sorted = b.apply_batch(&mut media_b, clear, &as_batch(&ops));
        match (per_op, sorted) {
            (Ok(per_op), Ok(sorted)) => {
                let per_op = owned(per_op);
                assert_eq!(per_op, owned(sorted), "{what}: previous values differ");
                assert_eq!(per_op, apply_model(&mut model, clear, &ops), "{what}: previous values");
            }
            (Err(BatchError::Full { .. }), Err(BatchError::Full { .. })) => {
                // Refused: both trees are as they were.
                check(&a, &media_a, &model, &format!("{what}, both full"));
                check(&b, &media_b, &model, &format!("{what}, both full"));
                refused += 1;
                continue;
            }
            // One path ran out of nodes first (the sorted path needs fewer):
            // the refused tree is as it was, then takes the batch in steps.
            (Err(BatchError::Full { .. }), Ok(sorted)) => {
                check(&a, &media_a, &model, &format!("{what}, per-op full"));
                assert_eq!(owned(sorted), apply_model(&mut model, clear, &ops), "{what}: previous values");
                catch_up(&mut a, &mut media_a, clear, &ops, &what);
                refused += 1;
            }
            (Ok(per_op), Err(BatchError::Full { .. })) => {
                check(&b, &media_b, &model, &format!("{what}, sorted full"));
                assert_eq!(owned(per_op), apply_model(&mut model, clear, &ops), "{what}: previous values");
                catch_up(&mut b, &mut media_b, clear, &ops, &what);
                refused += 1;
            }
            (a, b) => panic!("{what}: {a:?} / {b:?}"),
        }
        check(&a, &media_a, &model, &what);
        check(&b, &media_b, &model, &what);
        if batch % 10 == 9 {
            let reopened = BTree::open(&media_b, BASE).unwrap();
            check(&reopened, &media_b, &model, &format!("{what}, reopened"));
        }
    }
    (b.counters(), refused)
}

/// Applies `ops` one per batch (as the checkpoint's halving ends up doing).
fn catch_up(tree: &mut BTree, media: &mut MemMedia, clear: bool, ops: &Ops, what: &str) {
    if clear {
        tree.apply_batch(media, true, &[]).unwrap_or_else(|e| panic!("{what}: clear: {e}"));
    }
    for op in as_batch(ops) {
        tree.apply_batch(media, false, &[op]).unwrap_or_else(|e| panic!("{what}: one operation: {e}"));
    }
}

#[test]
fn sorted_path_matches_per_op_path_and_model() {
    let small = Shape { universe: 4000, max_key: 24, max_value: 40, delete_percent: 20 };
    let big = Shape { universe: 600, max_key: 200, max_value: 256, delete_percent: 35 };
    let shrink = Shape { universe: 4000, max_key: 24, max_value: 40, delete_percent: 90 };
    let big_shrink = Shape { delete_percent: 95, ..big };
    let (counters, _) = compare_paths(31, 4096, 200, 600, &[small, big, small, shrink, big, big_shrink]);
    assert!(counters.leaf_groups > 5_000, "{counters:?}");
    assert!(counters.early_leaves > 1_000, "{counters:?}");
    assert!(counters.splits > 100 && counters.root_splits >= 1, "{counters:?}");
    assert!(counters.group_fallbacks > 20 && counters.merges > 10, "{counters:?}");
    assert!(counters.in_place_updates > 0, "{counters:?}");
}

/// A tight tree: the free nodes rarely allow early writes, many batches
/// run out of nodes, and every leaf goes through the overlay.
#[test]
fn sorted_path_matches_per_op_path_in_a_tight_tree() {
    let shape = Shape { universe: 1500, max_key: 60, max_value: 100, delete_percent: 30 };
    let shrink = Shape { delete_percent: 90, ..shape };
    let (counters, refused) = compare_paths(32, 56, 240, 300, &[shape, shape, shrink]);
    assert!(counters.leaf_groups > 1_000, "{counters:?}");
    assert!(counters.splits > 50 && counters.group_fallbacks > 20, "{counters:?}");
    assert!(refused >= 3, "{refused} batches refused");
}

fn sorted_puts(ids: impl Iterator<Item = u32>, key_len: usize, value: &[u8]) -> Ops {
    let mut ops: Ops = ids
        .map(|id| {
            let mut key = format!("{id:010}").into_bytes();
            key.resize(key_len.max(10), b'-');
            (key, Some(value.to_vec()))
        })
        .collect();
    ops.sort_by(|a, b| a.0.cmp(&b.0));
    ops
}

/// One sorted batch grows an empty tree to height 3 (a root leaf split
/// into many pieces, parents gaining separators, internal nodes split by
/// the per-operation path), then sorted batches delete whole ranges,
/// emptying leaves, down to one empty leaf.
#[test]
fn sorted_batches_split_and_merge_leaves_and_internal_nodes() {
    let nodes = 8192;
    let mut media = media(nodes);
    let mut tree = BTree::create(&mut media, BASE, nodes).unwrap();
    let mut model = Model::new();
    // 120-byte keys: about 30 per internal node, so 2 levels above the leaves.
    let ops = sorted_puts((0..20_000).map(|i| i * 7), 120, &[5; 48]);
    let previous = tree.apply_batch(&mut media, false, &as_batch(&ops)).unwrap();
    assert_eq!(owned(previous), apply_model(&mut model, false, &ops));
    check(&tree, &media, &model, "bulk load");
    assert!(tree.height() >= 3, "height {}", tree.height());
    let grown = tree.counters();
    assert!(grown.root_splits >= 2 && grown.splits > 100, "{grown:?}");
    // Inserts between the keys: leaves split into two or more pieces.
    let ops = sorted_puts((0..20_000).filter(|i| i % 3 == 0).map(|i| i * 7 + 3), 120, &[6; 48]);
    let previous = tree.apply_batch(&mut media, false, &as_batch(&ops)).unwrap();
    assert_eq!(owned(previous), apply_model(&mut model, false, &ops));
    check(&tree, &media, &model, "inserts between");
    // Delete ranges of keys in sorted batches: whole leaves emptied.
    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    for (round, range) in keys.chunks(keys.len() / 5 + 1).enumerate() {
        let ops: Ops = range.iter().map(|k| (k.clone(), None)).collect();
        let previous = tree.apply_batch(&mut media, false, &as_batch(&ops)).unwrap();
        assert_eq!(owned(previous), apply_model(&mut model, false, &ops));
        check(&tree, &media, &model, &format!("delete round {round}"));
    }
    assert!(tree.is_empty());
    assert_eq!(tree.height(), 1);
    let shrunk = tree.counters();
    assert!(shrunk.merges > 100 && shrunk.root_collapses >= 2, "{shrunk:?}");
    assert_eq!(tree.free_nodes() as u32, nodes - 1);
}

/// Sorted operations spread over many leaves: one group per leaf touched,
/// no fallback, and each touched leaf written once (early).
#[test]
fn sorted_ops_spanning_many_leaves_touch_each_leaf_once() {
    // Room for early writes: about 800 leaves in use, 16 K nodes.
    let nodes = 16_384;
    let mut media = media(nodes);
    let mut tree = BTree::create(&mut media, BASE, nodes).unwrap();
    let mut model = Model::new();
    let load = sorted_puts(0..30_000, 20, &[1; 32]);
    tree.apply_batch(&mut media, false, &as_batch(&load)).unwrap();
    apply_model(&mut model, false, &load);
    let leaves = tree.verify(&media).unwrap().leaves as u64;
    let before = tree.counters();
    // Every 10th key: several operations per leaf, every leaf touched.
    let ops = sorted_puts((0..30_000).step_by(10), 20, &[2; 32]);
    let previous = tree.apply_batch(&mut media, false, &as_batch(&ops)).unwrap();
    assert_eq!(owned(previous), apply_model(&mut model, false, &ops));
    check(&tree, &media, &model, "updates");
    let after = tree.counters();
    assert_eq!(after.leaf_groups - before.leaf_groups, leaves, "one group per leaf");
    assert_eq!(after.early_leaves - before.early_leaves, leaves, "each leaf written once");
    assert_eq!(after.group_fallbacks, before.group_fallbacks);
}

/// The same sorted batch on trees of every size around the smallest that
/// takes it: a refused batch writes nothing and leaves the tree as it was;
/// an accepted one matches the model.
#[test]
fn sorted_batch_at_the_edge_of_full() {
    let load = sorted_puts(0..600, 40, &[3; 60]);
    let ops: Ops = sorted_puts((0..1200).map(|i| i * 3 % 1200), 40, &[4; 60])
        .into_iter()
        .enumerate()
        .map(|(i, (key, value))| (key, value.filter(|_| i % 4 != 0)))
        .collect();
    let (mut refused, mut accepted) = (0, 0);
    for nodes in 16..=64 {
        let mut media = media(nodes);
        let mut tree = BTree::create(&mut media, BASE, nodes).unwrap();
        let mut model = Model::new();
        if tree.apply_batch(&mut media, false, &as_batch(&load)).is_err() {
            continue;
        }
        apply_model(&mut model, false, &load);
        let before = media.bytes().to_vec();
        match tree.apply_batch(&mut media, false, &as_batch(&ops)) {
            Err(BatchError::Full { index, needed, free }) => {
                assert!(index < ops.len() && needed > free, "{nodes} nodes: {index} {needed} {free}");
                assert_eq!(media.bytes(), &before[..], "{nodes} nodes: a refused batch wrote");
                check(&tree, &media, &model, &format!("{nodes} nodes, refused"));
                refused += 1;
            }
            Ok(previous) => {
                assert_eq!(owned(previous), apply_model(&mut model, false, &ops));
                check(&tree, &media, &model, &format!("{nodes} nodes, accepted"));
                let reopened = BTree::open(&media, BASE).unwrap();
                check(&reopened, &media, &model, &format!("{nodes} nodes, reopened"));
                accepted += 1;
            }
            Err(error) => panic!("{nodes} nodes: {error}"),
        }
    }
    assert!(refused > 0 && accepted > 0, "refused {refused}, accepted {accepted}");
}

/// An unsorted batch with repeated keys is cut into sorted runs: each
/// operation sees the value the one before it left.
#[test]
fn unsorted_batch_with_repeats_sees_earlier_values() {
    let mut media = media(256);
    let mut tree = BTree::create(&mut media, BASE, 256).unwrap();
    let ops: Ops = vec![
        (b"b".to_vec(), Some(b"1".to_vec())),
        (b"c".to_vec(), Some(b"2".to_vec())),
        (b"b".to_vec(), Some(b"3".to_vec())),
        (b"a".to_vec(), None),
        (b"b".to_vec(), None),
        (b"b".to_vec(), Some(b"44".to_vec())),
        (b"c".to_vec(), Some(b"5".to_vec())),
    ];
    let previous = owned(tree.apply_batch(&mut media, false, &as_batch(&ops)).unwrap());
    let expected: Vec<Option<Vec<u8>>> = [None, None, Some(&b"1"[..]), None, Some(b"3"), None, Some(b"2")]
        .iter()
        .map(|v| v.map(<[u8]>::to_vec))
        .collect();
    assert_eq!(previous, expected);
    let mut model = Model::new();
    apply_model(&mut model, false, &ops);
    check(&tree, &media, &model, "repeats");
}
