//! Crash-state checks of the B+tree, and the planted bugs they must catch.
//!
//! Each check runs a fixed workload on a [`TracedMedia`] (inserts, updates
//! and deletes of long keys, so that a few hundred operations split leaves
//! and internal nodes, grow the tree to height 3, then merge, rebalance and
//! collapse it back to one leaf), marking operation `k` once it returned.
//! [`explore`] builds the crash images the hardware could leave, and each
//! is recovered with `open` and judged. An image passes only if:
//! - `open` succeeds and [`BTree::verify`] holds: checksums, sorted keys
//!   within their parents' bounds, fill bounds, all leaves at one depth,
//!   and the free list is exactly the unreachable nodes (no leak, no node
//!   both free and live);
//! - the recovered contents (a full scan) equal the model after the
//!   acknowledged operations, or after those and the one in flight; `len`
//!   agrees, and `get` of the in-flight key agrees with the scan;
//! - for every 16th image, the recovered tree takes 12 more operations and
//!   still verifies and matches the model (the rebuilt allocator hands out
//!   only free nodes).
//!
//! The *batches* workload marks whole `apply_batch` calls instead: an
//! image must hold the tree before or after the batch in flight, never a
//! part of it. The *sorted batches* workload does the same with each
//! batch's keys sorted (one sorted run: the sorted path) on a tree with
//! room to spare, so that its leaves are written to the media as they are
//! made, before the batch's drain and root switch.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pmem::trace::TracedMedia;
use pmem::MemMedia;
use pmwire_crashcheck::{explore, Check, Config, CrashImage, Report};

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;
use crate::{BTree, BatchOp, Counters, Faults};

/// Where the tree under test starts in its media (not 0, to test `base`).
const BASE: u64 = 256;
/// Nodes of the tree under test (about twice its peak size).
const NODES: u32 = 48;
/// Nodes of the tree under the sorted batches: enough free nodes that the
/// sorted path writes leaves early (see `BTree::apply_batch`).
const ROOMY_NODES: u32 = 320;
/// Every this many images, recovery is followed by more operations.
const CONTINUE_EVERY: u64 = 16;
/// Operations run on a recovered image.
const CONTINUE_OPS: usize = 12;

/// Every crash check of this crate: the correct tree, then the planted bugs.
pub fn checks() -> Vec<Check> {
    let check = |name, planted, run| Check { name, planted, run };
    vec![
        check("btree: grow to height 3 (splits), shrink to one leaf (merges)", false, |c| {
            check_tree(Workload::GrowShrink, Faults::default(), c)
        }),
        check("btree: mixed inserts, updates, deletes", false, |c| check_tree(Workload::Mixed, Faults::default(), c)),
        check("btree: batches (one root switch each), with a clear", false, |c| {
            check_tree(Workload::Batches, Faults::default(), c)
        }),
        check("btree: sorted batches, leaves written early", false, |c| {
            check_tree(Workload::SortedBatches, Faults::default(), c)
        }),
        check("planted: btree sorted batch's early leaves never flushed", true, |c| {
            check_tree(Workload::SortedShortBatches, Faults { skip_node_flush: true, ..Faults::default() }, c)
        }),
        check("planted: btree sorted batch reuses replaced nodes before the switch", true, |c| {
            check_tree(Workload::SortedShortBatches, Faults { reuse_before_switch: true, ..Faults::default() }, c)
        }),
        check("planted: btree batch switched in the nodes' fence", true, |c| {
            check_tree(Workload::ShortBatches, Faults { root_before_nodes: true, ..Faults::default() }, c)
        }),
        check("planted: btree batch reuses replaced nodes before the switch", true, |c| {
            check_tree(Workload::ShortBatches, Faults { reuse_before_switch: true, ..Faults::default() }, c)
        }),
        check("planted: btree root switched in the nodes' fence", true, |c| {
            check_tree(Workload::Short, Faults { root_before_nodes: true, ..Faults::default() }, c)
        }),
        check("planted: btree nodes never flushed", true, |c| {
            check_tree(Workload::Short, Faults { skip_node_flush: true, ..Faults::default() }, c)
        }),
        check("planted: btree old nodes reused before the switch", true, |c| {
            check_tree(Workload::Short, Faults { reuse_before_switch: true, ..Faults::default() }, c)
        }),
        check("planted: btree free list not rebuilt from reachability", true, |c| {
            check_tree(Workload::Short, Faults { forget_reachability: true, ..Faults::default() }, c)
        }),
    ]
}

/// The operation sequences the checks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// 140 inserts of 200–255 B keys with updates (to height 3), then
    /// deletes of every key with updates and absent deletes (to one leaf).
    GrowShrink,
    /// 260 random inserts, updates and deletes over 200 keys of 40–120 B
    /// (insert-heavy, delete-heavy, insert-heavy).
    Mixed,
    /// The first 40 operations of `GrowShrink` (for the planted bugs).
    Short,
    /// `GrowShrink` then `Mixed` twice, cut into batches of 1–8 operations,
    /// each applied with `apply_batch` (one root switch), with two batches
    /// that clear the tree first.
    Batches,
    /// The first 8 batches of `Batches` (for the planted bugs).
    ShortBatches,
    /// `Batches` with each batch's keys sorted (the last step of a key
    /// kept), on a tree of 320 nodes: the sorted path, leaves written early.
    SortedBatches,
    /// The first 8 batches of `SortedBatches` (for the planted bugs).
    SortedShortBatches,
}

impl Workload {
    /// Nodes of the tree this workload runs on.
    fn nodes(self) -> u32 {
        match self {
            Workload::SortedBatches | Workload::SortedShortBatches => ROOMY_NODES,
            _ => NODES,
        }
    }
}

/// What one marked step of a workload does: one `insert`/`delete`, or one
/// `apply_batch` of `steps` (after clearing the tree if `clear`).
#[derive(Clone, Debug)]
struct Unit {
    batched: bool,
    clear: bool,
    steps: Vec<Step>,
}

/// One operation: insert `key → value`, or delete `key` when `value` is `None`.
#[derive(Clone, Debug)]
struct Step {
    key: Vec<u8>,
    value: Option<Vec<u8>>,
}

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// Crash-checks the tree under `workload` (with planted `faults`).
pub fn check_tree(workload: Workload, faults: Faults, config: &Config) -> Report {
    let units = plan(workload);
    let (media, states, _) = run(&units, faults, workload.nodes());
    let mut image_number = 0u64;
    explore(&media, config, |image: &mut CrashImage| {
        image_number += 1;
        let acked = image.acked.len();
        assert_eq!(image.acked.last().copied(), acked.checked_sub(1).map(|k| k as u64), "marks are step numbers");
        let continue_after = image_number.is_multiple_of(CONTINUE_EVERY);
        let judged =
            catch_unwind(AssertUnwindSafe(|| judge(&mut image.media, faults, &states, &units, acked, continue_after)));
        judged.unwrap_or_else(|_| Err("recovery panicked".to_string()))
    })
}

/// The counters of the structure-changing paths `workload` drives (for
/// coverage assertions).
pub fn workload_counters(workload: Workload) -> Counters {
    run(&plan(workload), Faults::default(), workload.nodes()).2
}

/// Runs `steps` on a fresh traced tree; returns the trace, the model state
/// after each number of completed steps, and the tree's counters.
fn run(units: &[Unit], faults: Faults, nodes: u32) -> (TracedMedia, Vec<Map>, Counters) {
    let mut media = TracedMedia::new((BASE + BTree::required_size(nodes)) as usize);
    let mut tree = BTree::create_with_faults(&mut media, BASE, nodes, faults).expect("create");
    media.checkpoint();
    let mut model = Map::new();
    let mut states = vec![model.clone()];
    for (k, unit) in units.iter().enumerate() {
        let done = if unit.batched {
            apply_batch(&mut tree, &mut media, &mut model, unit)
        } else {
            apply(&mut tree, &mut media, &mut model, &unit.steps[0])
        };
        done.unwrap_or_else(|e| panic!("step {k}: {e}"));
        states.push(model.clone());
        media.mark(k as u64);
    }
    (media, states, tree.counters())
}

/// Applies `unit` as one batch to the tree and the model; checks the
/// previous values.
fn apply_batch<M: pmem::Media>(tree: &mut BTree, media: &mut M, model: &mut Map, unit: &Unit) -> Result<(), String> {
    let ops: Vec<BatchOp> = unit
        .steps
        .iter()
        .map(|step| match &step.value {
            Some(value) => BatchOp::Put { key: &step.key, value },
            None => BatchOp::Delete { key: &step.key },
        })
        .collect();
    let previous = tree.apply_batch(media, unit.clear, &ops).map_err(|e| e.to_string())?;
    if unit.clear {
        model.clear();
    }
    for (step, previous) in unit.steps.iter().zip(previous) {
        let expected = match &step.value {
            Some(value) => model.insert(step.key.clone(), value.clone()),
            None => model.remove(&step.key),
        };
        if previous.as_deref() != expected.as_deref() {
            return Err(format!("previous value {previous:?}, expected {expected:?}"));
        }
    }
    Ok(())
}

/// Applies `step` to the tree and the model; checks the previous value.
fn apply<M: pmem::Media>(tree: &mut BTree, media: &mut M, model: &mut Map, step: &Step) -> Result<(), String> {
    let (previous, expected) = match &step.value {
        Some(value) => {
            let previous = tree.insert(media, &step.key, value).map_err(|e| e.to_string())?;
            (previous, model.insert(step.key.clone(), value.clone()))
        }
        None => (tree.delete(media, &step.key).map_err(|e| e.to_string())?, model.remove(&step.key)),
    };
    if previous.as_deref() != expected.as_deref() {
        return Err(format!("previous value {previous:?}, expected {expected:?}"));
    }
    Ok(())
}

/// Recovers `media` and judges it after `acked` completed steps.
fn judge(
    media: &mut MemMedia,
    faults: Faults,
    states: &[Map],
    units: &[Unit],
    acked: usize,
    continue_after: bool,
) -> Result<(), String> {
    let mut tree = BTree::open_with_faults(media, BASE, faults).map_err(|e| format!("open: {e}"))?;
    tree.verify(media).map_err(|e| format!("verify: {e}"))?;
    let recovered: Vec<(Vec<u8>, Vec<u8>)> = tree.iter(media).map(|(k, v)| (k, v.to_vec())).collect();
    let before = &states[acked];
    let after = states.get(acked + 1).unwrap_or(before);
    let state = if same(before, &recovered) {
        before
    } else if same(after, &recovered) {
        after
    } else {
        return Err(format!("after {acked} acked steps: {}", difference(before, after, &recovered)));
    };
    if tree.len() != state.len() as u64 {
        return Err(format!("len {} but {} entries", tree.len(), state.len()));
    }
    for step in units.get(acked).map_or(&[][..], |u| &u.steps[..]) {
        let got = tree.get(media, &step.key).map_err(|e| e.to_string())?;
        if got.as_deref() != state.get(&step.key).map(|v| &v[..]) {
            return Err(format!("get of the in-flight key gave {got:?}"));
        }
    }
    if continue_after {
        continue_from(&mut tree, media, state.clone(), acked).map_err(|e| format!("after recovery: {e}"))?;
    }
    Ok(())
}

/// Runs more operations on a recovered tree and checks it still matches.
fn continue_from(tree: &mut BTree, media: &mut MemMedia, mut model: Map, acked: usize) -> Result<(), String> {
    let mut rng = SplitMix64::seed_from_u64(0xc0ff_ee00 ^ acked as u64);
    for i in 0..CONTINUE_OPS {
        let existing = model.keys().nth(rng.next_u64() as usize % model.len().max(1)).cloned();
        let step = match (i % 3, existing) {
            (0, Some(key)) => Step { key, value: None },
            (1, Some(key)) => Step { key, value: Some(vec![i as u8; 200]) },
            _ => Step { key: long_key(&mut rng, 9000 + i as u64, 200, 255), value: Some(vec![0xa5; 256]) },
        };
        apply(tree, media, &mut model, &step)?;
    }
    tree.verify(media).map_err(|e| e.to_string())?;
    let recovered: Vec<(Vec<u8>, Vec<u8>)> = tree.iter(media).map(|(k, v)| (k, v.to_vec())).collect();
    if !same(&model, &recovered) {
        return Err(difference(&model, &model, &recovered));
    }
    Ok(())
}

fn same(state: &Map, recovered: &[(Vec<u8>, Vec<u8>)]) -> bool {
    state.len() == recovered.len() && state.iter().zip(recovered).all(|((k, v), (rk, rv))| k == rk && v == rv)
}

/// Describes how `recovered` differs from both allowed states.
fn difference(before: &Map, after: &Map, recovered: &[(Vec<u8>, Vec<u8>)]) -> String {
    let got: Map = recovered.iter().cloned().collect();
    let lost = before.keys().filter(|k| !got.contains_key(*k)).count();
    let made_up = got.keys().filter(|k| !before.contains_key(*k) && !after.contains_key(*k)).count();
    let changed =
        got.iter().filter(|(k, v)| before.get(*k).is_some_and(|b| b != *v) && after.get(*k) != Some(*v)).count();
    format!(
        "recovered {} entries (acked {}, in flight {}): {lost} acked keys lost, {made_up} never written, {changed} wrong values",
        recovered.len(),
        before.len(),
        after.len()
    )
}

/// A key of `min..=max` bytes, unique by `id` (its first 4 bytes).
fn long_key(rng: &mut SplitMix64, id: u64, min: usize, max: usize) -> Vec<u8> {
    let len = min + rng.next_u64() as usize % (max - min + 1);
    let mut key: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
    key[..4].copy_from_slice(&(id as u32).to_be_bytes());
    key
}

fn value(rng: &mut SplitMix64, min: usize, max: usize) -> Vec<u8> {
    let len = min + rng.next_u64() as usize % (max - min + 1);
    let fill = rng.next_u64() as u8;
    (0..len).map(|i| fill ^ i as u8).collect()
}

/// The fixed operation sequence of `workload` (the sampler is seeded by
/// the [`Config`]; the workload is always the same).
fn plan(workload: Workload) -> Vec<Unit> {
    let mut rng = SplitMix64::seed_from_u64(0x5eed_b7ee);
    let single = |steps: Vec<Step>| -> Vec<Unit> {
        steps.into_iter().map(|step| Unit { batched: false, clear: false, steps: vec![step] }).collect()
    };
    match workload {
        Workload::GrowShrink => single(grow_shrink(&mut rng)),
        Workload::Short => single(grow_shrink(&mut rng).into_iter().take(40).collect()),
        Workload::Mixed => single(mixed(&mut rng)),
        Workload::Batches => batches(&mut rng),
        Workload::ShortBatches => batches(&mut rng).into_iter().take(8).collect(),
        Workload::SortedBatches => batches(&mut rng).into_iter().map(sorted).collect(),
        Workload::SortedShortBatches => batches(&mut rng).into_iter().take(8).map(sorted).collect(),
    }
}

/// `unit` with its steps in key order, only the last step of each key kept
/// (the net effect of the batch, as a checkpoint computes it).
fn sorted(unit: Unit) -> Unit {
    let mut last: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
    for step in unit.steps {
        last.insert(step.key, step.value);
    }
    let steps = last.into_iter().map(|(key, value)| Step { key, value }).collect();
    Unit { steps, ..unit }
}

/// `grow_shrink` then `mixed` twice, cut into batches of 1–8 steps; a
/// batch that clears the tree (then inserts) sits after the growth, and
/// one that only clears before the second `mixed`.
fn batches(rng: &mut SplitMix64) -> Vec<Unit> {
    let mut units = Vec::new();
    let cut = |steps: Vec<Step>, rng: &mut SplitMix64, units: &mut Vec<Unit>| {
        let mut steps = steps.into_iter().peekable();
        while steps.peek().is_some() {
            let size = 1 + rng.next_u64() as usize % 8;
            units.push(Unit { batched: true, clear: false, steps: steps.by_ref().take(size).collect() });
        }
    };
    let mut grow: Vec<Step> = grow_shrink(rng);
    let shrink = grow.split_off(grow.len() * 2 / 3);
    cut(grow, rng, &mut units);
    let refill = (0..6).map(|i| Step { key: long_key(rng, 7000 + i, 200, 255), value: Some(value(rng, 0, 256)) });
    units.push(Unit { batched: true, clear: true, steps: refill.collect() });
    cut(shrink, rng, &mut units);
    cut(mixed(rng), rng, &mut units);
    units.push(Unit { batched: true, clear: true, steps: Vec::new() });
    cut(mixed(rng), rng, &mut units);
    units
}

fn grow_shrink(rng: &mut SplitMix64) -> Vec<Step> {
    // Random insertion order: leaves fill to 50–100 % (in key order they
    // would stay half full).
    let mut keys: Vec<Vec<u8>> = (0..140).map(|id| long_key(rng, id, 200, 255)).collect();
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.next_u64() as usize % (i + 1));
    }
    let mut steps = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        steps.push(Step { key: key.clone(), value: Some(value(rng, 100, 256)) });
        if i % 7 == 6 {
            let earlier = keys[rng.next_u64() as usize % (i + 1)].clone();
            steps.push(Step { key: earlier, value: Some(value(rng, 0, 256)) });
        }
    }
    // Deletes in key order for the first half (an underfull leaf meets a
    // full right sibling: rebalances), then in random order (merges).
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
    for i in (keys.len() / 2 + 1..order.len()).rev() {
        let j = keys.len() / 2 + rng.next_u64() as usize % (i + 1 - keys.len() / 2);
        order.swap(i, j);
    }
    for (n, &i) in order.iter().enumerate() {
        steps.push(Step { key: keys[i].clone(), value: None });
        if n % 10 == 9 {
            steps.push(Step { key: long_key(rng, 5000 + n as u64, 200, 255), value: None });
        }
        if n % 8 == 7 && n + 1 < order.len() {
            let remaining = order[n + 1 + rng.next_u64() as usize % (order.len() - n - 1)];
            steps.push(Step { key: keys[remaining].clone(), value: Some(value(rng, 0, 256)) });
        }
    }
    steps
}

fn mixed(rng: &mut SplitMix64) -> Vec<Step> {
    let keys: Vec<Vec<u8>> = (0..200).map(|id| long_key(rng, id, 40, 120)).collect();
    let mut present: Vec<usize> = Vec::new();
    // Insert-heavy, delete-heavy, then insert-heavy again: splits and merges.
    (0..260)
        .map(|i| {
            let insert_percent = if (110..200).contains(&i) { 15 } else { 85 };
            if present.is_empty() || rng.next_u64() % 100 < insert_percent {
                let k = rng.next_u64() as usize % keys.len();
                if !present.contains(&k) {
                    present.push(k);
                }
                Step { key: keys[k].clone(), value: Some(value(rng, 0, 256)) }
            } else {
                let k = present.swap_remove(rng.next_u64() as usize % present.len());
                Step { key: keys[k].clone(), value: None }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::default()
    }

    #[test]
    fn workloads_cover_splits_merges_and_height_changes() {
        let grow_shrink = workload_counters(Workload::GrowShrink);
        assert!(grow_shrink.root_splits >= 2, "{grow_shrink:?}");
        assert!(grow_shrink.root_collapses >= 2, "{grow_shrink:?}");
        assert!(grow_shrink.merges >= 10 && grow_shrink.rebalances >= 3, "{grow_shrink:?}");
        let mixed = workload_counters(Workload::Mixed);
        assert!(mixed.splits >= 5 && mixed.merges >= 3, "{mixed:?}");
    }

    #[test]
    fn grow_shrink_survives_every_crash() {
        check_tree(Workload::GrowShrink, Faults::default(), &config()).assert_passes_at_least(10_000);
    }

    #[test]
    fn mixed_survives_every_crash() {
        check_tree(Workload::Mixed, Faults::default(), &config()).assert_passes_at_least(10_000);
    }

    #[test]
    fn batches_survive_every_crash() {
        check_tree(Workload::Batches, Faults::default(), &config()).assert_passes_at_least(10_000);
    }

    #[test]
    fn sorted_batches_survive_every_crash() {
        check_tree(Workload::SortedBatches, Faults::default(), &config()).assert_passes_at_least(10_000);
    }

    #[test]
    fn sorted_batches_write_leaves_early() {
        let counters = workload_counters(Workload::SortedBatches);
        assert!(counters.early_leaves >= 100 && counters.leaf_groups >= 200, "{counters:?}");
        assert!(counters.splits >= 10 && counters.group_fallbacks >= 5, "{counters:?}");
        let short = workload_counters(Workload::SortedShortBatches);
        assert!(short.early_leaves >= 8, "{short:?}");
    }

    /// Leaves written early but never flushed: the batch's drain does not
    /// cover them, and a crash after the root switch loses them.
    #[test]
    fn canary_sorted_batch_unflushed_leaves_are_caught() {
        let faults = Faults { skip_node_flush: true, ..Faults::default() };
        check_tree(Workload::SortedShortBatches, faults, &config()).assert_caught();
    }

    /// Replaced nodes reused before the switch, on the sorted path.
    #[test]
    fn canary_sorted_batch_early_reuse_is_caught() {
        let faults = Faults { reuse_before_switch: true, ..Faults::default() };
        check_tree(Workload::SortedShortBatches, faults, &config()).assert_caught();
    }

    #[test]
    fn canary_batch_root_before_nodes_is_caught() {
        let faults = Faults { root_before_nodes: true, ..Faults::default() };
        check_tree(Workload::ShortBatches, faults, &config()).assert_caught();
    }

    #[test]
    fn canary_batch_early_reuse_is_caught() {
        let faults = Faults { reuse_before_switch: true, ..Faults::default() };
        check_tree(Workload::ShortBatches, faults, &config()).assert_caught();
    }

    #[test]
    fn canary_root_before_nodes_is_caught() {
        let faults = Faults { root_before_nodes: true, ..Faults::default() };
        check_tree(Workload::Short, faults, &config()).assert_caught();
    }

    #[test]
    fn canary_unflushed_nodes_are_caught() {
        let faults = Faults { skip_node_flush: true, ..Faults::default() };
        check_tree(Workload::Short, faults, &config()).assert_caught();
    }

    #[test]
    fn canary_early_reuse_is_caught() {
        let faults = Faults { reuse_before_switch: true, ..Faults::default() };
        check_tree(Workload::Short, faults, &config()).assert_caught();
    }

    #[test]
    fn canary_unwalked_free_list_is_caught() {
        let faults = Faults { forget_reachability: true, ..Faults::default() };
        check_tree(Workload::Short, faults, &config()).assert_caught();
    }

    #[test]
    fn registry_lists_every_check_once() {
        pmwire_crashcheck::assert_registry(&checks(), 8);
    }
}
