//! Unit tests of [`PmemDurable`] over a [`MemMedia`]: round trips, reopen,
//! identity checks, snapshots, compaction and suffix truncation.

use pmem::{Media, MemMedia};
use pmwire_log::{LogConfig, TailStrategy};
use raft::eraftpb::{ConfState, Entry, EntryType, HardState, SnapshotMetadata};

use super::{FormatError, OpenError, PmemDurable};
use crate::store::{Durable, StoreError};

const CLUSTER: u64 = 77;
const REPLICA: u64 = 3;

fn log_config() -> LogConfig {
    LogConfig::new(8192, TailStrategy::SelfValidating)
}

fn new_store() -> PmemDurable<MemMedia> {
    let size = PmemDurable::<MemMedia>::required_size(&log_config(), 1024);
    PmemDurable::format(MemMedia::new(size as usize), CLUSTER, REPLICA, &[1, 2, 3], log_config()).expect("format")
}

fn reopen(store: PmemDurable<MemMedia>) -> PmemDurable<MemMedia> {
    PmemDurable::open(store.into_media(), CLUSTER, REPLICA).expect("reopen")
}

fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
    Entry { term, index, data: data.to_vec().into(), ..Default::default() }
}

fn entries(range: std::ops::RangeInclusive<u64>, term: u64) -> Vec<Entry> {
    range.map(|i| entry(i, term, format!("e{i}t{term}").as_bytes())).collect()
}

fn meta(index: u64, term: u64, voters: &[u64]) -> SnapshotMetadata {
    let mut meta = SnapshotMetadata { index, term, ..Default::default() };
    meta.set_conf_state(ConfState { voters: voters.to_vec(), ..Default::default() });
    meta
}

/// Everything the store shows, comparable.
fn shown(d: &impl Durable) -> (u64, u64, Vec<Entry>, HardState, ConfState, SnapshotMetadata, Vec<u8>) {
    let held = (d.first_index()..=d.last_index()).map(|i| d.entry(i).expect("held")).collect();
    let (meta, data) = d.snapshot();
    (d.first_index(), d.last_index(), held, d.hard_state(), d.conf_state(), meta, data)
}

#[test]
fn new_store_is_empty_and_reopens_equal() {
    let store = new_store();
    assert_eq!((store.first_index(), store.last_index()), (1, 0));
    assert_eq!(store.term(0), Some(0));
    assert_eq!(store.conf_state().voters, vec![1, 2, 3]);
    let before = shown(&store);
    assert_eq!(shown(&reopen(store)), before);
}

#[test]
fn entries_hard_state_and_membership_round_trip() {
    let mut store = new_store();
    let mut special = entry(3, 2, b"cc");
    special.entry_type = EntryType::EntryConfChange;
    special.context = b"context".to_vec().into();
    let mut batch = entries(1..=2, 1);
    batch.push(special.clone());
    store.append(&batch).unwrap();
    store.set_hard_state(&HardState { term: 2, vote: 3, commit: 2, ..Default::default() }).unwrap();
    let learners = ConfState { voters: vec![1, 2, 3], learners: vec![4], ..Default::default() };
    store.set_conf_state(&learners).unwrap();
    assert_eq!(store.entry(3), Some(special));
    assert_eq!((store.term(1), store.term(3), store.term(4)), (Some(1), Some(2), None));
    let before = shown(&store);
    let store = reopen(store);
    assert_eq!(shown(&store), before);
    assert_eq!(store.conf_state(), learners);
    assert_eq!(store.hard_state().vote, 3);
}

#[test]
fn note_commit_is_lazy_until_the_next_hard_state() {
    let mut store = new_store();
    store.append(&entries(1..=5, 1)).unwrap();
    store.set_hard_state(&HardState { term: 1, vote: 1, commit: 1, ..Default::default() }).unwrap();
    store.note_commit(4);
    assert_eq!(store.hard_state().commit, 4);
    let mut store = reopen(store);
    assert_eq!(store.hard_state().commit, 1, "a noted commit is not durable by itself");
    store.note_commit(4);
    let hs = store.hard_state();
    store.set_hard_state(&hs).unwrap();
    assert_eq!(reopen(store).hard_state().commit, 4);
}

#[test]
fn wrong_cluster_or_replica_or_no_store_is_refused() {
    let media = new_store().into_media();
    let wrong = PmemDurable::open(media.clone(), CLUSTER + 1, REPLICA).err();
    assert_eq!(wrong, Some(OpenError::WrongCluster { expected: CLUSTER + 1, found: CLUSTER }));
    let wrong = PmemDurable::open(media.clone(), CLUSTER, REPLICA + 1).err();
    assert_eq!(wrong, Some(OpenError::WrongReplica { expected: REPLICA + 1, found: REPLICA }));
    assert!(matches!(PmemDurable::open(MemMedia::new(1 << 16), CLUSTER, REPLICA), Err(OpenError::NotFormatted(_))));
    let mut torn = media.clone();
    torn.write_u64(16, CLUSTER + 9); // the cluster word, without a new checksum
    assert!(matches!(PmemDurable::open(torn, CLUSTER, REPLICA), Err(OpenError::NotFormatted(_))));
    let mut broken = media;
    broken.write(256, &[0xff; 256]); // both hard-state slots
    assert!(matches!(PmemDurable::open(broken, CLUSTER, REPLICA), Err(OpenError::Corrupt(_))));
}

#[test]
fn format_refuses_small_media_and_big_memberships() {
    let small = PmemDurable::format(MemMedia::new(4096), CLUSTER, REPLICA, &[1], log_config());
    assert!(matches!(small, Err(FormatError::MediaTooSmall { .. })));
    let big = PmemDurable::format(MemMedia::new(1 << 16), CLUSTER, REPLICA, &[1, 2, 3, 4, 5, 6, 7, 8], log_config());
    assert!(matches!(big, Err(FormatError::TooManyIds("voters"))));
}

#[test]
fn suffix_truncation_then_append_over_it() {
    let mut store = new_store();
    store.append(&entries(1..=6, 1)).unwrap();
    store.append(&entries(4..=5, 2)).unwrap();
    assert_eq!(store.last_index(), 5);
    assert_eq!((store.term(3), store.term(4), store.term(6)), (Some(1), Some(2), None));
    store.append(&entries(6..=8, 2)).unwrap();
    let before = shown(&store);
    let store = reopen(store);
    assert_eq!(shown(&store), before);
    assert_eq!(store.entry(4).unwrap().data.as_ref(), b"e4t2");
    assert!(matches!(new_store().append(&entries(2..=2, 1)), Err(StoreError::Gap(_))));
}

#[test]
fn compaction_drops_the_prefix_and_keeps_the_rest() {
    let mut store = new_store();
    store.append(&entries(1..=10, 1)).unwrap();
    store.compact(&meta(6, 1, &[1, 2, 3]), b"state at 6").unwrap();
    assert_eq!((store.first_index(), store.last_index()), (7, 10));
    assert_eq!((store.term(6), store.entry(6)), (Some(1), None));
    let before = shown(&store);
    let mut store = reopen(store);
    assert_eq!(shown(&store), before);
    assert_eq!(store.snapshot().1, b"state at 6");
    // In place on a medium that is memory: no copy for the machine's restore.
    assert!(matches!(store.snapshot_data(), std::borrow::Cow::Borrowed(b"state at 6")));
    assert!(matches!(store.append(&entries(5..=5, 1)), Err(StoreError::Gap(_))));
    store.append(&entries(11..=12, 1)).unwrap();
    assert_eq!(store.last_index(), 12);
}

#[test]
fn snapshot_install_then_append() {
    let mut store = new_store();
    store.append(&entries(1..=4, 1)).unwrap();
    store.set_hard_state(&HardState { term: 1, vote: 1, commit: 2, ..Default::default() }).unwrap();
    store.install_snapshot(&meta(20, 3, &[1, 2, 3, 4]), b"leader state").unwrap();
    assert_eq!((store.first_index(), store.last_index()), (21, 20));
    assert_eq!((store.hard_state().commit, store.hard_state().term), (20, 3));
    assert_eq!(store.conf_state().voters, vec![1, 2, 3, 4]);
    store.append(&entries(21..=23, 3)).unwrap();
    let before = shown(&store);
    let store = reopen(store);
    assert_eq!(shown(&store), before);
    assert_eq!(store.term(20), Some(3));
    assert_eq!(store.snapshot().1, b"leader state");
    assert!(matches!(store.snapshot_data(), std::borrow::Cow::Borrowed(b"leader state")));
}

#[test]
fn snapshot_bigger_than_its_slot_is_refused_unwritten() {
    let mut store = new_store();
    store.append(&entries(1..=3, 1)).unwrap();
    let max = store.snapshot_capacity();
    let too_big = vec![7u8; max as usize + 1];
    let refused = store.compact(&meta(2, 1, &[1, 2, 3]), &too_big);
    assert!(matches!(refused, Err(StoreError::SnapshotTooLarge { len, max: m }) if len == max + 1 && m == max));
    let refused = store.install_snapshot(&meta(9, 1, &[1, 2, 3]), &too_big);
    assert!(matches!(refused, Err(StoreError::SnapshotTooLarge { .. })));
    assert_eq!((store.first_index(), store.last_index()), (1, 3), "nothing changed");
    store.compact(&meta(2, 1, &[1, 2, 3]), &too_big[..max as usize]).unwrap();
    assert_eq!(reopen(store).snapshot().1.len() as u64, max);
}

#[test]
fn a_full_log_says_so() {
    let mut store = new_store();
    let big = vec![1u8; 3000];
    let mut index = 1;
    let error = loop {
        match store.append(&[entry(index, 1, &big)]) {
            Ok(()) => index += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(error, StoreError::Full(_)), "{error}");
    store.compact(&meta(index - 1, 1, &[1, 2, 3]), b"").unwrap();
    store.append(&[entry(index, 1, &big)]).unwrap();
}

#[test]
fn the_store_agrees_with_mem_durable() {
    let mut store = new_store();
    let mut model = crate::store::MemDurable::new(&[1, 2, 3]);
    for round in 0..30u64 {
        let first = if round % 4 == 3 { model.last_index().max(1) } else { model.last_index() + 1 };
        let batch = entries(first..=first + round % 3, round + 1);
        store.append(&batch).unwrap();
        model.append(&batch).unwrap();
        if round % 5 == 4 {
            let m = meta(model.last_index() - 1, model.term(model.last_index() - 1).unwrap(), &[1, 2, 3]);
            store.compact(&m, b"s").unwrap();
            model.compact(&m, b"s").unwrap();
        }
        assert_eq!(shown(&store), shown(&model), "round {round}");
    }
    assert_eq!(shown(&reopen(store)), shown(&model));
}

#[test]
fn a_compaction_past_the_durable_commit_restarts_raft() {
    // The commit index is noted lazily, and compaction takes what is
    // applied: after a crash the snapshot may lie beyond the durable
    // commit. raft-rs refuses a hard state whose commit is below its
    // log's first index - 1, so the restart must not show one.
    let mut store = new_store();
    store.append(&entries(1..=10, 1)).unwrap();
    store.set_hard_state(&HardState { term: 1, vote: 1, commit: 2, ..Default::default() }).unwrap();
    store.note_commit(10);
    store.compact(&meta(8, 1, &[1, 2, 3]), b"state at 8").unwrap();
    let store = reopen(store);
    let config = raft::Config { id: REPLICA, ..Default::default() };
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    let node = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| raft::RawNode::new(&config, crate::store::Store::new(store, crate::state::own_len), &logger)));
    let node = node.expect("raft-rs accepts the restarted store").expect("a node");
    assert!(node.raft.raft_log.committed >= 8, "the snapshot's index is committed");
}
