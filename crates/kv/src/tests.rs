//! Model-based tests of the engine against a `BTreeMap`: zero-copy and
//! copied values (up to 64 KB, beyond 32 extents), deletes, clears,
//! checkpoints, reopen, and the user log; the invariants are checked
//! along the way.

use std::collections::BTreeMap;
use std::ops::Bound;

use pmem::{Media, MemMedia};
use pmwire_log::Extent;
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

use crate::{CreateError, Engine, KvConfig, LogError, StageError};

type Model = BTreeMap<Vec<u8>, (u8, Vec<u8>)>;


fn config() -> KvConfig {
    KvConfig { buf_size: 2048, buffers: 2048, wal_slots: 1024, log_slots: 256, tree_nodes: 256 }
}

fn engine(config: &KvConfig) -> (MemMedia, Engine) {
    let mut media = MemMedia::new((4096 + config.required_size().unwrap()) as usize);
    let kv = Engine::create(&mut media, 4096, config).unwrap();
    (media, kv)
}

/// Receives `bytes` into fresh pool buffers as a NIC would (MSS-sized
/// pieces at odd offsets), returns the extents; the caller's references
/// are the returned buffers.
fn receive(kv: &mut Engine, media: &mut MemMedia, bytes: &[u8], rng: &mut SplitMix64) -> (Vec<Extent>, Vec<u32>) {
    let mut extents = Vec::new();
    let mut held = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() || extents.is_empty() {
        let buf = kv.pool_mut().alloc().expect("a buffer");
        held.push(buf);
        let offset = (rng.next_u64() % 66) as u16;
        let n = rest.len().min(1448);
        let extent = Extent { buf_idx: buf, offset, len: n as u16 };
        media.write(kv.pool().buffer_offset(buf) + offset as u64, &rest[..n]);
        extents.push(extent);
        rest = &rest[n..];
        if n == 0 {
            break;
        }
    }
    (extents, held)
}

fn check_model(kv: &Engine, media: &MemMedia, model: &Model) {
    assert_eq!(kv.len(), model.len());
    for (key, (kind, value)) in model {
        let mut got = Vec::new();
        assert_eq!(kv.get_bytes(media, key, &mut got), Some(*kind), "key {key:?}");
        assert!(got == *value, "key {key:?}: {} B, want {} B", got.len(), value.len());
    }
    let keys: Vec<&[u8]> = kv.range(Bound::Unbounded).map(|(k, _, _)| k).collect();
    assert!(keys.iter().copied().eq(model.keys().map(|k| &k[..])));
}

#[test]
fn matches_model_through_checkpoints_and_reopens() {
    let config = config();
    let (mut media, mut kv) = engine(&config);
    let mut model = Model::new();
    let mut rng = SplitMix64::seed_from_u64(7);
    for batch in 0..300 {
        for _ in 0..1 + rng.next_u64() % 6 {
            let key = format!("key{}", rng.next_u64() % 150).into_bytes();
            let size = match rng.next_u64() % 10 {
                0 => 65536,
                1 => 5000,
                2..=5 => 1280,
                _ => 64,
            };
            let value: Vec<u8> = (0..size).map(|_| rng.next_u64() as u8).collect();
            let kind = (rng.next_u64() % 3) as u8;
            match rng.next_u64() % 10 {
                0..=3 => {
                    let (extents, held) = receive(&mut kv, &mut media, &value, &mut rng);
                    let staged = kv.set_extents(&mut media, &key, kind, &extents);
                    held.iter().for_each(|&b| _ = kv.pool_mut().release(b));
                    match staged {
                        Ok(()) => _ = model.insert(key, (kind, value)),
                        Err(StageError::BatchFull { .. }) => {}
                        Err(e) => panic!("batch {batch}: {e}"),
                    }
                }
                4..=7 => match kv.set_copy(&mut media, &key, kind, &value) {
                    Ok(()) => _ = model.insert(key, (kind, value)),
                    Err(StageError::BatchFull { .. }) => {}
                    Err(e) => panic!("batch {batch}: {e}"),
                },
                8 => assert_eq!(kv.delete(&mut media, &key).unwrap(), model.remove(&key).is_some()),
                _ => {
                    if rng.next_u64().is_multiple_of(20) {
                        kv.clear(&mut media).unwrap();
                        model.clear();
                    }
                }
            }
        }
        let drains = media.drains;
        kv.commit(&mut media).unwrap();
        let wal_drains = media.drains - drains;
        assert!(wal_drains <= 2 || kv.stats().checkpoints > 0, "{wal_drains} drains");
        if batch % 50 == 49 {
            kv.check(&media).unwrap();
            check_model(&kv, &media, &model);
            kv = Engine::open(&mut media, 4096).unwrap();
            kv.check(&media).unwrap();
        }
    }
    assert!(kv.stats().checkpoints > 0 || Engine::open(&mut media, 4096).is_ok());
    kv.checkpoint(&mut media).unwrap();
    kv.check(&media).unwrap();
    check_model(&kv, &media, &model);
    let kv = Engine::open(&mut media, 4096).unwrap();
    kv.check(&media).unwrap();
    check_model(&kv, &media, &model);
}

#[test]
fn a_batch_costs_two_drains_and_a_checkpoint_one_root_switch() {
    let config = config();
    let (mut media, mut kv) = engine(&config);
    for i in 0..100u32 {
        kv.set_copy(&mut media, format!("k{i:03}").as_bytes(), 0, &[i as u8; 64]).unwrap();
    }
    let drains = media.drains;
    kv.commit(&mut media).unwrap();
    assert_eq!(media.drains - drains, 2, "data drain + the WAL group's drain");
    let drains = media.drains;
    kv.checkpoint(&mut media).unwrap();
    // One tree batch: node drain + root persist; then the WAL truncation.
    assert_eq!(media.drains - drains, 3);
    assert_eq!(kv.stats().tree_batches, 1);
    assert_eq!(kv.wal_records(), 0);
    kv.check(&media).unwrap();
}

#[test]
fn old_values_are_freed_only_after_the_checkpoint() {
    let config = config();
    let (mut media, mut kv) = engine(&config);
    let free = kv.pool().free_count();
    kv.set_copy(&mut media, b"k", 1, &[1; 4000]).unwrap();
    kv.commit(&mut media).unwrap();
    kv.checkpoint(&mut media).unwrap();
    let (_, extents) = kv.get(b"k").unwrap();
    let old: Vec<u32> = extents.iter().map(|e| e.buf_idx).collect();
    kv.set_copy(&mut media, b"k", 1, &[2; 10]).unwrap();
    kv.delete(&mut media, b"k").unwrap();
    kv.commit(&mut media).unwrap();
    for &b in &old {
        assert!(kv.pool().refcount(b) > 0, "buffer {b} still named by the durable tree");
    }
    kv.checkpoint(&mut media).unwrap();
    assert!(kv.get(b"k").is_none());
    kv.check(&media).unwrap();
    // Only the arena's buffer stays taken.
    assert_eq!(kv.pool().free_count(), free - 1);
}

#[test]
fn values_beyond_32_extents_use_an_extent_list() {
    let config = config();
    let (mut media, mut kv) = engine(&config);
    let value: Vec<u8> = (0..65536u32).map(|i| (i * 7) as u8).collect();
    let mut rng = SplitMix64::seed_from_u64(1);
    let (extents, held) = receive(&mut kv, &mut media, &value, &mut rng);
    assert!(extents.len() > 32, "{} extents", extents.len());
    kv.set_extents(&mut media, b"big", 9, &extents).unwrap();
    held.iter().for_each(|&b| _ = kv.pool_mut().release(b));
    kv.commit(&mut media).unwrap();
    kv.checkpoint(&mut media).unwrap();
    let mut kv = Engine::open(&mut media, 4096).unwrap();
    let mut got = Vec::new();
    assert_eq!(kv.get_bytes(&media, b"big", &mut got), Some(9));
    assert!(got == value);
    kv.check(&media).unwrap();
    let too_many = vec![extents[0]; kv.max_value_extents() + 1];
    let error = kv.set_extents(&mut media, b"x", 0, &too_many).unwrap_err();
    assert!(matches!(error, StageError::ValueTooLong { .. }), "{error}");
    let error = kv.set_copy(&mut media, &[0; 256], 0, b"").unwrap_err();
    assert_eq!(error, StageError::KeyTooLong { len: 256, max: 255 });
    let freed = Extent { buf_idx: kv.pool().buffers() - 1, offset: 0, len: 1 };
    assert!(matches!(kv.set_extents(&mut media, b"x", 0, &[freed]), Err(StageError::Extent(_))));
    kv.check(&media).unwrap();
}

#[test]
fn rollback_restores_the_index_and_references() {
    let config = config();
    let (mut media, mut kv) = engine(&config);
    kv.set_copy(&mut media, b"a", 0, b"one").unwrap();
    kv.commit(&mut media).unwrap();
    kv.set_copy(&mut media, b"a", 0, b"two").unwrap();
    kv.set_copy(&mut media, b"b", 0, b"three").unwrap();
    kv.clear(&mut media).unwrap();
    kv.set_copy(&mut media, b"c", 0, b"four").unwrap();
    assert_eq!(kv.len(), 1);
    kv.rollback();
    let mut got = Vec::new();
    kv.get_bytes(&media, b"a", &mut got);
    assert_eq!(got, b"one");
    assert_eq!(kv.len(), 1);
    kv.check(&media).unwrap();
}

#[test]
fn rollback_to_a_savepoint_keeps_what_was_staged_before_it() {
    let config = config();
    let (mut media, mut kv) = engine(&config);
    kv.set_copy(&mut media, b"a", 0, b"one").unwrap();
    kv.commit(&mut media).unwrap();
    kv.set_copy(&mut media, b"b", 0, b"two").unwrap();
    let first_lsn = kv.log_append_copy(&mut media, b"entry one").unwrap();
    let savepoint = kv.savepoint();
    kv.set_copy(&mut media, b"a", 0, b"three").unwrap();
    kv.delete(&mut media, b"b").unwrap();
    kv.log_append_copy(&mut media, b"entry two").unwrap();
    kv.clear(&mut media).unwrap();
    kv.set_copy(&mut media, b"c", 0, b"four").unwrap();
    kv.rollback_to(savepoint);
    assert_eq!(kv.savepoint(), savepoint);
    kv.commit(&mut media).unwrap();
    let mut got = Vec::new();
    kv.get_bytes(&media, b"a", &mut got);
    assert_eq!(got, b"one");
    got.clear();
    kv.get_bytes(&media, b"b", &mut got);
    assert_eq!(got, b"two");
    assert!(kv.get(b"c").is_none());
    let log: Vec<_> = kv.log_read(0).map(|(lsn, _)| lsn).collect();
    assert_eq!(log, vec![first_lsn], "only the entry staged before the savepoint");
    kv.check(&media).unwrap();
    // Rolling back to an empty batch's savepoint is the full rollback.
    let empty = kv.savepoint();
    kv.set_copy(&mut media, b"d", 0, b"five").unwrap();
    kv.rollback_to(empty);
    assert!(kv.get(b"d").is_none());
    kv.check(&media).unwrap();
}

#[test]
fn user_log_appends_reads_and_truncates() {
    let config = config();
    let (mut media, mut kv) = engine(&config);
    let mut lsns = Vec::new();
    for i in 0..20u8 {
        lsns.push(kv.log_append_copy(&mut media, &vec![i; 100 * i as usize]).unwrap());
    }
    let buf = kv.pool_mut().alloc().unwrap();
    media.write(kv.pool().buffer_offset(buf), b"zero-copy");
    lsns.push(kv.log_append(&mut media, &[Extent { buf_idx: buf, offset: 0, len: 9 }]).unwrap());
    kv.pool_mut().release(buf);
    assert_eq!(kv.log_read(0).count(), 0, "not committed yet");
    kv.commit(&mut media).unwrap();
    assert!(lsns.windows(2).all(|w| w[0] < w[1]));
    let mut kv = Engine::open(&mut media, 4096).unwrap();
    let entries: Vec<(u64, Vec<Extent>)> = kv.log_read(0).map(|(l, e)| (l, e.to_vec())).collect();
    assert_eq!(entries.iter().map(|e| e.0).collect::<Vec<_>>(), lsns);
    let mut got = Vec::new();
    kv.pool().gather(&media, &entries[20].1, &mut got);
    assert_eq!(got, b"zero-copy");
    kv.log_truncate(&mut media, lsns[10]).unwrap();
    assert_eq!(kv.log_read(0).next().unwrap().0, lsns[10]);
    assert!(matches!(kv.log_truncate(&mut media, u64::MAX), Err(LogError::BeyondEnd { .. })));
    kv.check(&media).unwrap();
    let kv = Engine::open(&mut media, 4096).unwrap();
    assert_eq!(kv.log_read(0).count(), 11);
    kv.check(&media).unwrap();
}

#[test]
fn a_full_tree_fails_the_checkpoint_without_losing_records() {
    let config = KvConfig { tree_nodes: 16, wal_slots: 4096, ..config() };
    let (mut media, mut kv) = engine(&config);
    let mut model = Model::new();
    let mut failed = false;
    for batch in 0..200u32 {
        for i in 0..10u32 {
            let key = format!("{:0>200}", batch * 10 + i).into_bytes();
            kv.set_copy(&mut media, &key, 0, &[1; 8]).unwrap();
            model.insert(key, (0, vec![1; 8]));
        }
        kv.commit(&mut media).unwrap();
        if kv.checkpoint(&mut media).is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "16 nodes cannot hold 2000 keys of 200 B");
    kv.check(&media).unwrap();
    check_model(&kv, &media, &model);
    let kv = Engine::open(&mut media, 4096).unwrap();
    check_model(&kv, &media, &model);
    kv.check(&media).unwrap();
}

#[test]
fn log_sizes_near_2_64_are_refused_without_panicking() {
    for (wal_slots, log_slots) in [(u64::MAX, 256), (1024, u64::MAX / 4), ((1 << 60) + 1, 256)] {
        let config = KvConfig { wal_slots, log_slots, ..config() };
        assert!(matches!(config.required_size(), Err(CreateError::BadConfig(_))), "{config:?}");
        let mut media = MemMedia::new(1 << 20);
        assert!(matches!(Engine::create(&mut media, 0, &config), Err(CreateError::BadConfig(_))), "{config:?}");
    }
}

/// Deadlines ride with their key's record: through commit, rollback,
/// checkpoint (direct and indirect tree values) and reopen, and
/// `set_deadline` keeps the value; `expired` lists exactly the keys due.
#[test]
fn deadlines_survive_checkpoint_and_reopen() {
    let config = config();
    let (mut media, mut kv) = engine(&config);
    let big = vec![7u8; 40 * 2048]; // beyond 30 extents: an indirect tree value
    kv.set_copy_expiring(&mut media, b"a", 0, Some(1_000), b"x").unwrap();
    kv.set_copy_expiring(&mut media, b"b", 3, Some(2_000), &big).unwrap();
    kv.set_copy(&mut media, b"c", 0, b"never").unwrap();
    kv.commit(&mut media).unwrap();
    assert_eq!(kv.lookup(b"a").unwrap().deadline_ms, Some(1_000));
    assert_eq!(kv.expiring_len(), 2);
    let save = kv.savepoint();
    assert!(kv.set_deadline(&mut media, b"c", Some(500)).unwrap());
    assert!(!kv.set_deadline(&mut media, b"zz", Some(500)).unwrap(), "absent key");
    assert_eq!(kv.expired(600).collect::<Vec<_>>(), vec![&b"c"[..]]);
    kv.rollback_to(save);
    assert_eq!(kv.lookup(b"c").unwrap().deadline_ms, None);
    assert_eq!(kv.expired(600).count(), 0);
    assert!(kv.set_deadline(&mut media, b"a", None).unwrap(), "persist");
    assert!(kv.set_deadline(&mut media, b"c", Some(1_500)).unwrap());
    kv.commit(&mut media).unwrap();
    kv.check(&media).unwrap();
    let want = |kv: &Engine, media: &MemMedia| {
        assert_eq!(kv.lookup(b"a").unwrap().deadline_ms, None);
        assert_eq!(kv.lookup(b"b").unwrap().deadline_ms, Some(2_000));
        assert_eq!(kv.lookup(b"c").unwrap().deadline_ms, Some(1_500));
        let mut bytes = Vec::new();
        assert_eq!(kv.get_bytes(media, b"c", &mut bytes), Some(0));
        assert_eq!(bytes, b"never", "set_deadline keeps the value");
        bytes.clear();
        assert_eq!(kv.get_bytes(media, b"b", &mut bytes), Some(3));
        assert!(bytes == big);
        assert_eq!(kv.expired(1_999).collect::<Vec<_>>(), vec![&b"c"[..]]);
        assert_eq!(kv.expired(u64::MAX).collect::<Vec<_>>(), vec![&b"c"[..], b"b"]);
    };
    want(&kv, &media);
    // From the WAL alone, then from the tree alone.
    let reopened = Engine::open(&mut media, 4096).unwrap();
    want(&reopened, &media);
    reopened.check(&media).unwrap();
    kv.checkpoint(&mut media).unwrap();
    kv.check(&media).unwrap();
    let reopened = Engine::open(&mut media, 4096).unwrap();
    assert_eq!(reopened.wal_records(), 0);
    want(&reopened, &media);
    reopened.check(&media).unwrap();
}

/// A batch of many groups' worth of words commits as one transaction and
/// is there whole after a reopen; staging beyond the WAL is refused with
/// the room left, and nothing of the refused operation is staged.
#[test]
fn a_batch_larger_than_a_group_commits_whole_up_to_the_wal() {
    let config = KvConfig { buf_size: 2048, buffers: 2048, wal_slots: 8192, log_slots: 256, tree_nodes: 256 };
    let (mut media, mut kv) = engine(&config);
    assert_eq!(kv.max_batch_words(), 8190);
    for k in 0..2000u32 {
        kv.set_copy(&mut media, format!("k{k}").as_bytes(), 0, &k.to_le_bytes()).unwrap();
    }
    assert!(kv.staged_words() > 1024 * 5, "{} words", kv.staged_words());
    kv.commit(&mut media).unwrap();
    assert_eq!(kv.stats().transactions, 1);
    kv.check(&media).unwrap();
    let mut kv = Engine::open(&mut media, 4096).unwrap();
    assert_eq!(kv.len(), 2000);
    let mut value = Vec::new();
    assert_eq!(kv.get_bytes(&media, b"k1999", &mut value), Some(0));
    assert_eq!(value, 1999u32.to_le_bytes());
    kv.check(&media).unwrap();
    // The WAL holds 8190 words a batch: 2000 deletes (4000 words) twice over do not fit.
    let mut refused = None;
    for round in 0..2 {
        for k in 0..2000u32 {
            let key = format!("k{k}");
            let staged = if round == 1 {
                kv.set_copy(&mut media, key.as_bytes(), 0, b"again").map(|_| true)
            } else {
                kv.delete(&mut media, key.as_bytes())
            };
            if let Err(e) = staged {
                refused.get_or_insert(e);
            }
        }
    }
    match refused {
        Some(StageError::BatchFull { needed, room }) => assert!(needed > room, "{needed} {room}"),
        other => panic!("{other:?}"),
    }
    assert!(kv.staged_words() <= kv.max_batch_words());
    kv.commit(&mut media).unwrap();
    kv.check(&media).unwrap();
    assert_eq!(Engine::open(&mut media, 4096).unwrap().len(), kv.len());
}

/// `set_checkpoint_words` checkpoints before the WAL is half full (a
/// member's bound on one commit's pause), and nothing is lost by it.
#[test]
fn checkpoint_words_bound_the_wal_below_half() {
    let config = KvConfig { wal_slots: 8192, ..config() };
    let run = |bound: Option<u64>| {
        let (mut media, mut kv) = engine(&config);
        if let Some(words) = bound {
            kv.set_checkpoint_words(words);
        }
        let mut model = Model::new();
        for i in 0..600u32 {
            let key = format!("key{}", i % 400).into_bytes();
            let value = i.to_le_bytes().repeat(16);
            kv.set_copy(&mut media, &key, 0, &value).unwrap();
            kv.commit(&mut media).unwrap();
            model.insert(key, (0, value));
        }
        check_model(&kv, &media, &model);
        kv.stats().checkpoints
    };
    assert_eq!(run(None), 0, "600 one-extent SETs (about 1,800 words) stay below half of 8 Ki slots");
    assert!(run(Some(1024)) >= 1, "a bound of 1 Ki words checkpoints");
}
