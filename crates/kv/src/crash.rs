//! Crash-state checks of the KV engine, and the planted bugs they must catch.
//!
//! The workload drives an [`Engine`] on a [`TracedMedia`] the way the
//! server will: batches of 1–4 operations, each batch staged then
//! committed once — zero-copy sets whose bytes the "kernel" stored into
//! ring buffers (ordinary stores, spanning buffers, at odd offsets), copied
//! sets (0–1500 B over 512 B buffers), values of 40 small fragments (an
//! extent list in the tree), overwrites, deletes, a clear, user-log appends
//! (zero-copy and copied), a third of the sets with an expiry deadline and
//! deadline-only changes (`set_deadline`) — plus explicit checkpoints and user-log
//! truncations between batches; the WAL is small, so automatic
//! checkpoints run inside commits too. Step `k` is marked when it returned.
//!
//! An image passes only if `Engine::open` succeeds and:
//! - every key holds exactly the kind, deadline and bytes of the model after the
//!   acknowledged steps, or after those and the step in flight (a batch's
//!   KV operations are all or nothing), with no other key; the user log
//!   holds exactly the acknowledged entries (or those and the in-flight
//!   ones), byte for byte. The KV group is appended before the user-log
//!   group, so the in-flight batch may also show its KV part alone;
//! - [`Engine::check`] holds: the tree verifies, the index is the tree
//!   plus the WAL's replay, and every buffer's count is exactly the
//!   durable references to it (none free while referenced, none leaked);
//! - every 16th image then runs more batches and a checkpoint on the
//!   recovered engine and still matches and checks.
//!
//! The sliced checks run it with checkpoints in slices of two tree
//! operations per commit ([`Engine::set_checkpoint_slice`]), so images fall
//! between a checkpoint's slices, with later commits appended behind it.
//!
//! The transaction check runs the same workload with groups of 8 words and
//! batches of up to 12 operations, so most batches are transactions over
//! several groups: a crash between two of their groups must show all of
//! the batch or none of it (and recovery must discard the uncommitted tail
//! before appending after it, which the continued runs exercise).

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pmem::trace::TracedMedia;
use pmem::{Media, MemMedia};
use pmwire_crashcheck::{explore, Check, Config, CrashImage, Report};
use pmwire_log::Extent;
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

use crate::{Engine, Faults, KvConfig, StageError};

const BASE: u64 = 4096;
const CONTINUE_EVERY: u64 = 16;
const STEPS: usize = 170;

/// Every crash check of this crate: the correct engine, then the planted bugs.
pub fn checks() -> Vec<Check> {
    let check = |name, planted, run| Check { name, planted, run };
    vec![
        check(
            "kv: batches of sets (zero-copy, copied, extent lists, deadlines), deletes, clear, checkpoints, user log",
            false,
            |c| check_kv(Faults::default(), STEPS, c),
        ),
        check("planted: kv WAL record persisted before the value data is drained", true, |c| {
            check_kv(Faults { skip_data_drain: true, ..Faults::default() }, 60, c)
        }),
        check("planted: kv old value freed before the checkpoint drops its last reference", true, |c| {
            check_kv(Faults { free_early: true, ..Faults::default() }, 80, c)
        }),
        check("planted: kv recovery ignores the WAL records after the checkpoint", true, |c| {
            check_kv(Faults { skip_replay: true, ..Faults::default() }, 60, c)
        }),
        check("planted: kv expiry deadline stored without a flush (not covered by the data drain)", true, |c| {
            check_kv(Faults { unflushed_deadline: true, ..Faults::default() }, 60, c)
        }),
        check("kv: batches larger than a WAL group committed as transactions over several groups", false, |c| {
            check_kv_transactions(Faults::default(), TXN_STEPS, c)
        }),
        check("planted: kv transaction written as plain groups, without its header", true, |c| {
            check_kv_transactions(Faults { txn_unmarked: true, ..Faults::default() }, 40, c)
        }),
        check("planted: kv recovery applies an uncommitted transaction tail", true, |c| {
            check_kv_transactions(Faults { apply_uncommitted: true, ..Faults::default() }, 40, c)
        }),
        check("kv: values whose extent lists are extent chains of several chunks", false, |c| {
            check_kv_chains(Faults::default(), CHAIN_STEPS, c)
        }),
        check("planted: kv extent chain written without a flush (not covered by the data drain)", true, |c| {
            check_kv_chains(Faults { unflushed_chain: true, ..Faults::default() }, 60, c)
        }),
        check("kv: batches committed as chained transactions (their records in an extent chain)", false, |c| {
            check_kv_chained_transactions(Faults::default(), TXN_STEPS, c)
        }),
        check("planted: kv chained transaction's record chain written without a flush", true, |c| {
            check_kv_chained_transactions(Faults { unflushed_chain: true, ..Faults::default() }, 40, c)
        }),
        check("kv: checkpoints in slices across commits (crashes between slices)", false, |c| {
            check_kv_sliced(Faults::default(), STEPS, c)
        }),
        check("kv: chained transactions with checkpoints in slices", false, |c| {
            check_kv_sliced_chained(Faults::default(), TXN_STEPS, c)
        }),
        check("planted: kv checkpoint in slices truncates the WAL to its tail (drops records committed meanwhile)", true, |c| {
            check_kv_sliced(Faults { truncate_to_tail: true, ..Faults::default() }, 80, c)
        }),
    ]
}

/// Steps of the transaction check.
const TXN_STEPS: usize = 90;

/// Steps of the extent-chain check.
const CHAIN_STEPS: usize = 120;

/// How the workload batches: the most operations per batch, the engine's
/// group size (`None`: the default), and its chain limits (`None`: the
/// default; `Some((inline, chunk_words))`: values of more than `inline`
/// extents are chained, `chunk_words` words a chunk).
#[derive(Clone, Copy, Debug)]
struct Shape {
    max_ops: u64,
    group_words: Option<usize>,
    chain: Option<(usize, usize)>,
    /// Batches of more record words are chained transactions.
    txn_chain: Option<usize>,
    /// Checkpoints in slices of this many tree operations per commit,
    /// started once the WAL holds this many words (`None`: half full).
    slice: Option<(usize, Option<u64>)>,
}

const PLAIN: Shape = Shape { max_ops: 4, group_words: None, chain: None, txn_chain: None, slice: None };
const TRANSACTIONS: Shape = Shape { max_ops: 12, group_words: Some(8), chain: None, txn_chain: None, slice: None };
/// Batches of more than 6 record words are chained transactions (their
/// records in an extent chain of 512 B buffers, two words in the WAL).
const CHAINED_TXNS: Shape = Shape { max_ops: 12, group_words: Some(8), chain: None, txn_chain: Some(6), slice: None };
/// Checkpoints in slices of two tree operations per commit: most
/// checkpoints run across several commits, and crash images fall between
/// their slices.
const SLICED: Shape = Shape { max_ops: 4, group_words: None, chain: None, txn_chain: None, slice: Some((2, None)) };
/// Chained transactions with checkpoints in slices (started at 16 WAL
/// words: each chained transaction takes two): a checkpoint's end
/// releases the record lists of the chains it covers, not the later ones.
const SLICED_CHAINED_TXNS: Shape = Shape { max_ops: 12, group_words: Some(8), chain: None, txn_chain: Some(6), slice: Some((2, Some(16))) };
/// Values of 3+ extents are chained, 8 words a chunk: a value of 40
/// fragments is a chain of 5 chunks.
const CHAINS: Shape = Shape { max_ops: 4, group_words: None, chain: Some((2, 8)), txn_chain: None, slice: None };

impl Shape {
    fn apply(&self, kv: &mut Engine) {
        if let Some(words) = self.group_words {
            kv.set_group_words(words);
        }
        if let Some((inline, chunk_words)) = self.chain {
            kv.set_chain_limits(inline, chunk_words);
        }
        if let Some(words) = self.txn_chain {
            kv.set_txn_chain_words(words);
        }
        if let Some((ops, words)) = self.slice {
            kv.set_checkpoint_slice(ops);
            if let Some(words) = words {
                kv.set_checkpoint_words(words);
            }
        }
    }
}

/// The engine's sizes; chains take buffers of their own, so their pool is larger.
fn kv_config(shape: Shape) -> KvConfig {
    let buffers = if shape.chain.is_some() || shape.txn_chain.is_some() || shape.slice.is_some() { 192 } else { 96 };
    KvConfig { buf_size: 512, buffers, wal_slots: 256, log_slots: 64, tree_nodes: 16 }
}

type Map = BTreeMap<Vec<u8>, (u8, Option<u64>, Vec<u8>)>;

/// The model: the keys, and the user log's `(lsn, bytes)` entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Model {
    map: Map,
    log: Vec<(u64, Vec<u8>)>,
}

/// Drives an engine and its model.
struct Driver {
    rng: SplitMix64,
    model: Model,
    shape: Shape,
}

impl Driver {
    fn below(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        let fill = self.below(256) as u8;
        (0..len).map(|i| fill ^ (i as u8).wrapping_mul(13)).collect()
    }

    /// A deadline for a third of the sets: any `u64`, the format's whole range.
    fn deadline(&mut self) -> Option<u64> {
        (self.below(3) == 0).then(|| self.rng.next_u64() >> self.below(64))
    }

    fn key(&mut self) -> Vec<u8> {
        let id = self.below(14);
        let pad = if id.is_multiple_of(3) { 50 } else { 0 };
        format!("key-{id:02}{}", "x".repeat(pad)).into_bytes()
    }

    /// The kernel stores `bytes` into fresh ring buffers; `fragments`
    /// splits them into that many small extents. Returns the extents and
    /// the ring's references.
    fn receive<M: Media>(
        &mut self,
        kv: &mut Engine,
        media: &mut M,
        bytes: &[u8],
        fragments: bool,
    ) -> (Vec<Extent>, Vec<u32>) {
        let size = kv.pool().buf_size() as usize;
        let (mut extents, mut ring) = (Vec::new(), Vec::new());
        let mut rest = bytes;
        while !rest.is_empty() {
            let buf = kv.pool_mut().alloc().expect("a ring buffer");
            ring.push(buf);
            let mut at = if fragments { 0 } else { self.below(40) as usize };
            while !rest.is_empty() && at < size {
                let n = if fragments { rest.len().min(8) } else { rest.len().min(size - at) };
                let extent = Extent { buf_idx: buf, offset: at as u16, len: n as u16 };
                media.write(kv.pool().extent_offset(extent), &rest[..n]);
                extents.push(extent);
                rest = &rest[n..];
                at += if fragments { 16 } else { n };
            }
        }
        (extents, ring)
    }

    /// Stages one random operation.
    fn stage<M: Media>(&mut self, kv: &mut Engine, media: &mut M) {
        let key = self.key();
        let kind = self.below(3) as u8;
        let deadline = self.deadline();
        match self.below(20) {
            0..=5 => {
                let (len, fragments) =
                    if self.below(6) == 0 { (320, true) } else { (self.below(1200) as usize, false) };
                let value = self.bytes(len);
                let (extents, ring) = self.receive(kv, media, &value, fragments);
                let staged = kv.set_extents_expiring(media, &key, kind, deadline, &extents);
                ring.iter().for_each(|&b| _ = kv.pool_mut().release(b));
                match staged {
                    Ok(()) => _ = self.model.map.insert(key, (kind, deadline, value)),
                    Err(StageError::BatchFull { .. }) => {}
                    Err(e) => panic!("zero-copy set: {e}"),
                }
            }
            6..=12 => {
                let len = self.below(1500) as usize;
                let value = self.bytes(len);
                match kv.set_copy_expiring(media, &key, kind, deadline, &value) {
                    Ok(()) => _ = self.model.map.insert(key, (kind, deadline, value)),
                    Err(StageError::BatchFull { .. }) => {}
                    Err(e) => panic!("copied set: {e}"),
                }
            }
            13 => match kv.set_deadline(media, &key, deadline) {
                Ok(found) => match self.model.map.get_mut(&key) {
                    Some(entry) => {
                        assert!(found, "set_deadline's answer");
                        entry.1 = deadline;
                    }
                    None => assert!(!found, "set_deadline's answer"),
                },
                Err(StageError::BatchFull { .. }) => {}
                Err(e) => panic!("set_deadline: {e}"),
            },
            14..=15 => match kv.delete(media, &key) {
                Ok(existed) => assert_eq!(existed, self.model.map.remove(&key).is_some(), "delete's answer"),
                Err(StageError::BatchFull { .. }) => {}
                Err(e) => panic!("delete: {e}"),
            },
            16 if self.below(8) == 0 => {
                if kv.clear(media).is_ok() {
                    self.model.map.clear();
                }
            }
            _ => {
                let len = self.below(700) as usize;
                let value = self.bytes(len);
                let lsn = if self.below(2) == 0 {
                    kv.log_append_copy(media, &value).expect("log append")
                } else {
                    let (extents, ring) = self.receive(kv, media, &value, false);
                    let lsn = kv.log_append(media, &extents).expect("log append");
                    ring.iter().for_each(|&b| _ = kv.pool_mut().release(b));
                    lsn
                };
                self.model.log.push((lsn, value));
            }
        }
    }

    /// Runs step `k`: a batch, a checkpoint, or a user-log truncation.
    fn step<M: Media>(&mut self, kv: &mut Engine, media: &mut M, k: usize) {
        if k % 11 == 10 {
            kv.checkpoint(media).expect("checkpoint");
        } else if k % 7 == 6 || kv.log_read(0).count() > 6 {
            let entries: Vec<u64> = kv.log_read(0).map(|(lsn, _)| lsn).collect();
            let keep = entries.get(entries.len() / 2).copied().unwrap_or(kv.log_next_lsn());
            kv.log_truncate(media, keep).expect("truncate");
            self.model.log.retain(|&(lsn, _)| lsn >= keep);
        } else {
            for _ in 0..1 + self.below(self.shape.max_ops) {
                self.stage(kv, media);
            }
            kv.commit(media).expect("commit");
        }
    }
}

/// Runs the workload on a traced medium; returns it and the model after
/// each number of completed steps.
fn run(faults: Faults, steps: usize, shape: Shape) -> (TracedMedia, Vec<Model>) {
    let config = kv_config(shape);
    let mut media = TracedMedia::new((BASE + config.required_size().unwrap()) as usize);
    let mut kv = Engine::create_with_faults(&mut media, BASE, &config, faults).expect("create");
    shape.apply(&mut kv);
    media.checkpoint();
    let mut driver = Driver { rng: SplitMix64::seed_from_u64(0x6b76), model: Model::default(), shape };
    let mut states = vec![Model::default()];
    for k in 0..steps {
        driver.step(&mut kv, &mut media, k);
        states.push(driver.model.clone());
        media.mark(k as u64);
    }
    (media, states)
}

/// Crash-checks the engine (with planted `faults`) over `steps` steps.
pub fn check_kv(faults: Faults, steps: usize, config: &Config) -> Report {
    check_shaped(faults, steps, PLAIN, config)
}

/// Crash-checks batches that are transactions over several WAL groups.
pub fn check_kv_transactions(faults: Faults, steps: usize, config: &Config) -> Report {
    check_shaped(faults, steps, TRANSACTIONS, config)
}

/// Crash-checks values stored with extent chains (several chunks each).
pub fn check_kv_chains(faults: Faults, steps: usize, config: &Config) -> Report {
    check_shaped(faults, steps, CHAINS, config)
}

/// Crash-checks checkpoints in slices across commits.
pub fn check_kv_sliced(faults: Faults, steps: usize, config: &Config) -> Report {
    check_shaped(faults, steps, SLICED, config)
}

/// Crash-checks chained transactions with checkpoints in slices.
pub fn check_kv_sliced_chained(faults: Faults, steps: usize, config: &Config) -> Report {
    check_shaped(faults, steps, SLICED_CHAINED_TXNS, config)
}

/// Crash-checks batches committed as chained transactions.
pub fn check_kv_chained_transactions(faults: Faults, steps: usize, config: &Config) -> Report {
    check_shaped(faults, steps, CHAINED_TXNS, config)
}

fn check_shaped(faults: Faults, steps: usize, shape: Shape, config: &Config) -> Report {
    let (media, states) = run(faults, steps, shape);
    let mut number = 0u64;
    explore(&media, config, |image: &mut CrashImage| {
        number += 1;
        let acked = image.acked.len();
        let continue_after = number.is_multiple_of(CONTINUE_EVERY);
        let judge = || judge(&mut image.media, faults, shape, &states, acked, continue_after);
        let judged = catch_unwind(AssertUnwindSafe(judge));
        judged.unwrap_or_else(|_| Err("recovery panicked".to_string()))
    })
}

/// What the engine holds: every key's kind and bytes, and the user log.
fn contents(kv: &Engine, media: &MemMedia) -> Model {
    let map = kv
        .entries(std::ops::Bound::Unbounded)
        .map(|(key, entry)| {
            let mut bytes = Vec::new();
            kv.pool().gather(media, entry.extents, &mut bytes);
            (key.to_vec(), (entry.kind, entry.deadline_ms, bytes))
        })
        .collect();
    let log = kv
        .log_read(0)
        .map(|(lsn, extents)| {
            let mut bytes = Vec::new();
            kv.pool().gather(media, extents, &mut bytes);
            (lsn, bytes)
        })
        .collect();
    Model { map, log }
}

fn judge(
    media: &mut MemMedia,
    faults: Faults,
    shape: Shape,
    states: &[Model],
    acked: usize,
    continue_after: bool,
) -> Result<(), String> {
    let open_faults =
        Faults { skip_replay: faults.skip_replay, apply_uncommitted: faults.apply_uncommitted, ..Faults::default() };
    let mut kv = Engine::open_with_faults(media, BASE, open_faults).map_err(|e| format!("open: {e}"))?;
    shape.apply(&mut kv);
    let got = contents(&kv, media);
    let before = &states[acked];
    let after = states.get(acked + 1).unwrap_or(before);
    // A commit appends the KV group, then the user-log group: a crash
    // between them leaves the first without the second.
    let between = Model { map: after.map.clone(), log: before.log.clone() };
    let state = if got == *after {
        after
    } else if got == *before {
        before
    } else if got == between {
        &between
    } else {
        return Err(format!("after {acked} steps: {}", difference(before, after, &got)));
    };
    kv.check(media)?;
    if continue_after {
        let rng = SplitMix64::seed_from_u64(0xc0ff_ee00 ^ acked as u64);
        let mut driver = Driver { rng, model: state.clone(), shape };
        for k in 0..4 {
            driver.step(&mut kv, media, k * 5 + 1);
        }
        kv.checkpoint(media).map_err(|e| format!("checkpoint after recovery: {e}"))?;
        if contents(&kv, media) != driver.model {
            return Err("after recovery and more batches: contents differ from the model".into());
        }
        kv.check(media).map_err(|e| format!("after recovery and more batches: {e}"))?;
    }
    Ok(())
}

fn difference(before: &Model, after: &Model, got: &Model) -> String {
    let wrong: Vec<String> = got
        .map
        .iter()
        .filter(|(k, v)| before.map.get(*k) != Some(v) && after.map.get(*k) != Some(v))
        .map(|(k, v)| format!("{} ({} B)", String::from_utf8_lossy(&k[..6.min(k.len())]), v.2.len()))
        .collect();
    let lost = before.map.keys().filter(|k| !got.map.contains_key(*k) && after.map.contains_key(*k)).count();
    format!(
        "{} keys (acked {}, in flight {}), wrong or made up: {wrong:?}, lost {lost}; log {} entries (acked {}, in flight {})",
        got.map.len(),
        before.map.len(),
        after.map.len(),
        got.log.len(),
        before.log.len(),
        after.log.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_survives_every_crash() {
        check_kv(Faults::default(), STEPS, &Config::default()).assert_passes_at_least(10_000);
    }

    #[test]
    fn canary_wal_before_data_drain_is_caught() {
        check_kv(Faults { skip_data_drain: true, ..Faults::default() }, 60, &Config::default()).assert_caught();
    }

    #[test]
    fn canary_early_free_is_caught() {
        check_kv(Faults { free_early: true, ..Faults::default() }, 80, &Config::default()).assert_caught();
    }

    #[test]
    fn canary_skipped_replay_is_caught() {
        check_kv(Faults { skip_replay: true, ..Faults::default() }, 60, &Config::default()).assert_caught();
    }

    #[test]
    fn canary_unflushed_deadline_is_caught() {
        check_kv(Faults { unflushed_deadline: true, ..Faults::default() }, 60, &Config::default()).assert_caught();
    }

    #[test]
    fn transactions_over_several_groups_survive_every_crash() {
        let report = check_kv_transactions(Faults::default(), TXN_STEPS, &Config::default());
        println!("{}", report.describe());
        report.assert_passes_at_least(5_000);
    }

    #[test]
    fn the_workload_commits_transactions_over_several_groups() {
        let config = kv_config(TRANSACTIONS);
        let mut media = MemMedia::new((BASE + config.required_size().unwrap()) as usize);
        let mut kv = Engine::create(&mut media, BASE, &config).unwrap();
        kv.set_group_words(8);
        let mut driver =
            Driver { rng: SplitMix64::seed_from_u64(0x6b76), model: Model::default(), shape: TRANSACTIONS };
        for k in 0..TXN_STEPS {
            driver.step(&mut kv, &mut media, k);
        }
        assert!(kv.stats().transactions >= 20, "{:?}", kv.stats());
    }

    #[test]
    fn canary_unmarked_transaction_is_caught() {
        let report = check_kv_transactions(Faults { txn_unmarked: true, ..Faults::default() }, 40, &Config::default());
        println!("{}", report.describe());
        report.assert_caught();
    }

    #[test]
    fn canary_applied_uncommitted_tail_is_caught() {
        let report =
            check_kv_transactions(Faults { apply_uncommitted: true, ..Faults::default() }, 40, &Config::default());
        println!("{}", report.describe());
        report.assert_caught();
    }

    #[test]
    fn extent_chains_survive_every_crash() {
        let report = check_kv_chains(Faults::default(), CHAIN_STEPS, &Config::default());
        println!("{}", report.describe());
        report.assert_passes_at_least(5_000);
    }

    #[test]
    fn the_chain_workload_writes_chains_of_several_chunks() {
        let config = kv_config(CHAINS);
        let mut media = MemMedia::new((BASE + config.required_size().unwrap()) as usize);
        let mut kv = Engine::create(&mut media, BASE, &config).unwrap();
        CHAINS.apply(&mut kv);
        let mut driver = Driver { rng: SplitMix64::seed_from_u64(0x6b76), model: Model::default(), shape: CHAINS };
        for k in 0..CHAIN_STEPS {
            driver.step(&mut kv, &mut media, k);
        }
        let stats = kv.stats();
        assert!(stats.chains >= 20 && stats.chain_chunks >= stats.chains + 20, "{stats:?}");
        assert_eq!(contents(&kv, &media), driver.model);
        kv.check(&media).unwrap();
        drop(kv);
        let kv = Engine::open(&mut media, BASE).unwrap();
        assert_eq!(contents(&kv, &media), driver.model);
        kv.check(&media).unwrap();
    }

    #[test]
    fn checkpoints_in_slices_survive_every_crash() {
        let report = check_kv_sliced(Faults::default(), STEPS, &Config::default());
        println!("{}", report.describe());
        report.assert_passes_at_least(10_000);
    }

    #[test]
    fn chained_transactions_with_checkpoints_in_slices_survive_every_crash() {
        let report = check_kv_sliced_chained(Faults::default(), TXN_STEPS, &Config::default());
        println!("{}", report.describe());
        report.assert_passes_at_least(5_000);
    }

    #[test]
    fn canary_sliced_checkpoint_truncating_to_the_tail_is_caught() {
        check_kv_sliced(Faults { truncate_to_tail: true, ..Faults::default() }, 80, &Config::default()).assert_caught();
    }

    /// The sliced workload really runs checkpoints over several commits,
    /// with commits between their slices, and ends equal to its model,
    /// checked, and after a reopen.
    #[test]
    fn the_sliced_workload_spreads_checkpoints_over_commits() {
        for shape in [SLICED, SLICED_CHAINED_TXNS] {
            let config = kv_config(shape);
            let mut media = MemMedia::new((BASE + config.required_size().unwrap()) as usize);
            let mut kv = Engine::create(&mut media, BASE, &config).unwrap();
            shape.apply(&mut kv);
            let mut driver = Driver { rng: SplitMix64::seed_from_u64(0x6b76), model: Model::default(), shape };
            let mut mid_checkpoint_checks = 0;
            for k in 0..STEPS {
                driver.step(&mut kv, &mut media, k);
                if kv.checkpoint_under_way() {
                    kv.check(&media).unwrap();
                    mid_checkpoint_checks += 1;
                }
            }
            let stats = kv.stats();
            assert!(stats.checkpoint_slices >= 10, "{stats:?}");
            assert!(mid_checkpoint_checks >= 5, "{mid_checkpoint_checks} steps ended inside a checkpoint");
            assert_eq!(contents(&kv, &media), driver.model);
            drop(kv);
            let kv = Engine::open(&mut media, BASE).unwrap();
            assert_eq!(contents(&kv, &media), driver.model);
            kv.check(&media).unwrap();
        }
    }

    #[test]
    fn canary_unflushed_chain_is_caught() {
        check_kv_chains(Faults { unflushed_chain: true, ..Faults::default() }, 60, &Config::default()).assert_caught();
    }

    #[test]
    fn chained_transactions_survive_every_crash() {
        let report = check_kv_chained_transactions(Faults::default(), TXN_STEPS, &Config::default());
        println!("{}", report.describe());
        report.assert_passes_at_least(5_000);
    }

    #[test]
    fn canary_unflushed_transaction_chain_is_caught() {
        let faults = Faults { unflushed_chain: true, ..Faults::default() };
        check_kv_chained_transactions(faults, 40, &Config::default()).assert_caught();
    }

    #[test]
    fn the_workload_commits_chained_transactions() {
        let config = kv_config(CHAINED_TXNS);
        let mut media = MemMedia::new((BASE + config.required_size().unwrap()) as usize);
        let mut kv = Engine::create(&mut media, BASE, &config).unwrap();
        CHAINED_TXNS.apply(&mut kv);
        let mut driver =
            Driver { rng: SplitMix64::seed_from_u64(0x6b76), model: Model::default(), shape: CHAINED_TXNS };
        for k in 0..TXN_STEPS {
            driver.step(&mut kv, &mut media, k);
        }
        let stats = kv.stats();
        assert!(stats.chained_transactions >= 20 && stats.transactions == 0, "{stats:?}");
        kv.check(&media).unwrap();
        drop(kv);
        let mut kv = Engine::open(&mut media, BASE).unwrap();
        assert_eq!(contents(&kv, &media), driver.model);
        kv.check(&media).unwrap();
        kv.checkpoint(&mut media).unwrap();
        kv.check(&media).unwrap();
    }

    #[test]
    fn registry_lists_every_check_once() {
        pmwire_crashcheck::assert_registry(&checks(), 9);
    }
}
