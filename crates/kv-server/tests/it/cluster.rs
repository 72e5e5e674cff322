//! The engine behind a replicated Redis machine (`cluster::ClusterKeyspace`):
//! the same replies and state, byte for byte, as a volatile member fed the
//! same entries; after a reopen of the pool, the applied index and the
//! write index come back and the entries past the last commit are replayed;
//! batches larger than one commit are committed early, an entry larger than
//! the WAL alone; a snapshot larger than one commit is restored in bounded
//! commits, and a crash between them leaves a keyspace that needs the
//! snapshot again.

use crate::common::Pool;
use pmwire_kv_cluster::{Proposer, RedisMachine, Watched};
use pmwire_kv_server::cluster::ClusterKeyspace;
use pmwire_kv_server::{Mode, Store};
use pmwire_keyspace::chunked::ChunkConfig;
use pmwire_keyspace::exec::ServerConfig;
use pmwire_resp::reply::Protocol;
use pmwire_smr::state::StateMachine;
use rand::{Rng, SeedableRng};

const POOL_BYTES: u64 = 32 << 20;

fn config() -> ServerConfig {
    ServerConfig { collections: ChunkConfig::tiny(), ..ServerConfig::default() }
}

fn open(pool: &Pool) -> RedisMachine<ClusterKeyspace> {
    let (store, _) = Store::open(&pool.path, POOL_BYTES, Mode::Copy).expect("the pool opens");
    RedisMachine::open(ClusterKeyspace::new(store), config()).expect("the machine opens")
}

/// Drops the machine without committing what it applied since its last
/// persist, and unmaps the pool, as a kill would.
fn crash(m: RedisMachine<ClusterKeyspace>) {
    drop(m);
}

/// Random entries of every family, with TTLs, sweeps and transactions.
fn entries(seed: u64, n: usize, p: &mut Proposer, now: &mut u64) -> Vec<Vec<u8>> {
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut out = Vec::new();
    for _ in 0..n {
        *now += rng.gen_range(0..200);
        let k = format!("k{}", rng.gen_range(0..8));
        let m = format!("m{}", rng.gen_range(0..10));
        let ttl = rng.gen_range(1..1500).to_string();
        let args: Vec<&str> = match rng.gen_range(0..14) {
            0 => vec!["SET", &k, &m],
            1 => vec!["SET", &k, &m, "PX", &ttl],
            2 => vec!["INCR", &k],
            3 => vec!["SADD", &k, &m, "a", "b"],
            4 => vec!["HSET", &k, &m, "1", "f", "2"],
            5 => vec!["RPUSH", &k, &m, "x", "y", "z"],
            6 => vec!["ZADD", &k, "1", &m, "2", "q"],
            7 => vec!["DEL", &k],
            8 => vec!["SPOP", &k],
            9 => vec!["PEXPIRE", &k, &ttl],
            10 => vec!["LPOP", &k],
            11 => vec!["FLUSHALL"],
            12 => {
                out.push(p.sweep(*now, 4, 16));
                continue;
            }
            _ => {
                let queued =
                    vec![vec!["INCR", "n"], vec!["SADD", "s", k.as_str(), m.as_str()], vec!["GET", k.as_str()]];
                out.push(p.transaction(*now, Protocol::Resp2, Vec::<Watched>::new(), &queued));
                continue;
            }
        };
        if args[0] == "FLUSHALL" && rng.gen_bool(0.8) {
            continue;
        }
        out.push(p.command(*now, Protocol::Resp2, &args));
    }
    out
}

#[test]
fn an_engine_member_agrees_with_a_volatile_one_across_reopens() {
    let pool = Pool::new();
    let mut p = Proposer::with_key(1);
    let mut now = 1_700_000_000_000u64;
    let all = entries(26, 1_200, &mut p, &mut now);
    let mut volatile = RedisMachine::in_memory(config());
    let mut engine = open(&pool);
    let mut persisted = 0u64;
    let mut index = 0u64;
    for (round, batch) in all.chunks(100).enumerate() {
        for e in batch {
            index += 1;
            let (a, b) = (engine.apply(index, e), volatile.apply(index, e));
            assert_eq!(a, b, "entry {index}");
        }
        if round % 3 == 2 {
            // Crash with the batch applied and not persisted: it is replayed.
            crash(engine);
            engine = open(&pool);
            assert_eq!(engine.applied(), persisted, "round {round}: the last committed index");
            for (i, e) in all.iter().enumerate().take(index as usize).skip(persisted as usize) {
                engine.apply(i as u64 + 1, e);
            }
        }
        engine.persist_applied().expect("persisted");
        persisted = index;
        assert!(engine.snapshot() == volatile.snapshot(), "round {round}: the same state, byte for byte");
    }
    crash(engine);
    let reopened = open(&pool);
    assert_eq!(reopened.applied(), index);
    assert_eq!(reopened.writes(), volatile.writes(), "the write index came back");
    assert!(reopened.snapshot() == volatile.snapshot());
}

#[test]
fn a_batch_larger_than_a_commit_is_committed_early_and_a_huge_entry_alone() {
    let pool = Pool::new();
    let mut p = Proposer::with_key(2);
    let mut volatile = RedisMachine::in_memory(config());
    let mut engine = open(&pool);
    let value = "v".repeat(100);
    // Far more writes than one commit holds, with no persist between them.
    let sets: Vec<Vec<u8>> =
        (0..6_000).map(|i| p.command(1_000, Protocol::Resp2, &["SET", &format!("key{i}"), &value])).collect();
    for (i, e) in sets.iter().enumerate() {
        assert_eq!(engine.apply(i as u64 + 1, e), volatile.apply(i as u64 + 1, e), "entry {}", i + 1);
    }
    crash(engine);
    let mut engine = open(&pool);
    let early = engine.applied();
    assert!(early > 0 && early < 6_000, "an early commit made a prefix durable: {early}");
    for (i, e) in sets.iter().enumerate().skip(early as usize) {
        engine.apply(i as u64 + 1, e);
    }
    // One transaction larger than the whole WAL: alone, committed at once.
    let queued: Vec<Vec<String>> = (0..8_000).map(|i| vec!["SET".into(), format!("big{i}"), value.clone()]).collect();
    let e = p.transaction(1_000, Protocol::Resp2, vec![], &queued);
    assert_eq!(engine.apply(6_001, &e), volatile.apply(6_001, &e));
    assert!(engine.keyspace().store().engine().stats().chained_transactions > 0, "committed as a chained transaction");
    engine.persist_applied().expect("nothing to halt for");
    crash(engine);
    let engine = open(&pool);
    assert_eq!(engine.applied(), 6_001);
    assert!(engine.snapshot() == volatile.snapshot());
}

/// Pool of the restore tests: room for the snapshot's keys twice (the old
/// values are freed only at a checkpoint).
const RESTORE_POOL_BYTES: u64 = 160 << 20;

fn open_sized(pool: &Pool, bytes: u64) -> RedisMachine<ClusterKeyspace> {
    let (store, _) = Store::open(&pool.path, bytes, Mode::Copy).expect("the pool opens");
    RedisMachine::open(ClusterKeyspace::new(store), config()).expect("the machine opens")
}

/// A volatile machine of `n` string keys (every tenth with a deadline) and
/// chunked collections (internal entries), with the index it applied to.
fn large_source(n: usize) -> (RedisMachine<pmwire_keyspace::store::MemKeyspace>, u64) {
    let mut p = Proposer::with_key(3);
    let mut m = RedisMachine::in_memory(config());
    let value = "v".repeat(48);
    let mut index = 0u64;
    let mut apply = |m: &mut RedisMachine<_>, e: Vec<u8>| {
        index += 1;
        let out = m.apply(index, &e);
        assert!(out.refused.is_none() && !out.reply.starts_with(b"-"), "entry {index}: {:?}", String::from_utf8_lossy(&out.reply));
    };
    for i in 0..n {
        let key = format!("key{i:06}");
        let args: Vec<&str> =
            if i % 10 == 0 { vec!["SET", &key, &value, "PX", "100000000"] } else { vec!["SET", &key, &value] };
        apply(&mut m, p.command(1_000, Protocol::Resp2, &args));
    }
    for i in 0..300 {
        let (member, c) = (format!("m{i}"), format!("{}", i % 10));
        apply(&mut m, p.command(1_000, Protocol::Resp2, &["SADD", &format!("set{c}"), &member]));
        apply(&mut m, p.command(1_000, Protocol::Resp2, &["HSET", &format!("hash{c}"), &member, "1"]));
        apply(&mut m, p.command(1_000, Protocol::Resp2, &["RPUSH", &format!("list{c}"), &member]));
    }
    (m, index)
}

/// Commits the engine made so far.
fn commits(m: &mut RedisMachine<ClusterKeyspace>) -> u64 {
    m.keyspace().store().engine().stats().commits
}

#[test]
fn a_snapshot_larger_than_a_commit_is_restored_in_bounded_commits() {
    let (source, index) = large_source(30_000);
    let snap = source.snapshot();
    let pool = Pool::new();
    let mut engine = open_sized(&pool, RESTORE_POOL_BYTES);
    let max_words = engine.keyspace().store().engine().max_batch_words();
    assert!(30_000 * 3 > max_words, "the snapshot's records ({} keys) exceed one commit ({max_words} words)", 30_000);
    let before = commits(&mut engine);
    engine.restore(index, &snap).expect("a snapshot of any size restores");
    let made = commits(&mut engine) - before;
    assert!(made >= 3, "the marker, at least one batch of keys, the last commit: {made} commits");
    assert!(!engine.needs_snapshot());
    assert_eq!(engine.applied(), index);
    assert!(engine.snapshot() == snap, "the restored state equals the source's, byte for byte");
    assert_eq!(engine.keyspace().store().engine().stats().chained_transactions, 0, "no commit went past the WAL");
    crash(engine);
    let mut reopened = open_sized(&pool, RESTORE_POOL_BYTES);
    // Before any read: a snapshot's reads hold their values' buffers.
    reopened.keyspace().store().check().expect("engine invariants");
    assert!(!reopened.needs_snapshot());
    assert_eq!(reopened.applied(), index);
    assert_eq!(reopened.writes(), source.writes(), "the write index came back");
    assert!(reopened.snapshot() == snap);
}

#[test]
fn a_crash_between_the_restore_commits_leaves_a_keyspace_that_needs_a_snapshot() {
    // Large enough for more than one batch of keys: the write index no longer
    // adds an entry per key (a dump of a few parts).
    let (source, index) = large_source(30_000);
    let snap = source.snapshot();
    // How many commits a whole restore makes (on a fresh pool).
    let total = {
        let pool = Pool::new();
        let mut engine = open_sized(&pool, RESTORE_POOL_BYTES);
        let before = commits(&mut engine);
        engine.restore(index, &snap).expect("restored");
        commits(&mut engine) - before
    } as u32;
    assert!(total >= 3, "{total} commits");
    for fail_at in [1, 2, total / 2, total] {
        let pool = Pool::new();
        // An older state first: a few keys, persisted at index 5.
        let mut engine = open_sized(&pool, RESTORE_POOL_BYTES);
        let mut p = Proposer::with_key(4);
        for i in 1..=5u64 {
            engine.apply(i, &p.command(500, Protocol::Resp2, &["SET", &format!("old{i}"), "x"]));
        }
        engine.persist_applied().expect("persisted");
        let old = engine.snapshot();
        engine.keyspace().fail_commit(fail_at);
        assert!(engine.restore(index, &snap).is_err(), "commit {fail_at} of {total} failed");
        crash(engine);
        let mut engine = open_sized(&pool, RESTORE_POOL_BYTES);
        if fail_at == 1 {
            // The marker never became durable: the old state stands.
            assert!(!engine.needs_snapshot());
            assert_eq!(engine.applied(), 5);
            assert!(engine.snapshot() == old);
        } else {
            assert!(engine.needs_snapshot(), "commit {fail_at} of {total}: the marker is set");
            assert_eq!(engine.applied(), 0, "an interrupted restore claims no applied index");
            // Applying onto it halts the member instead of persisting.
            engine.apply(1, &p.command(500, Protocol::Resp2, &["SET", "new", "x"]));
            assert!(engine.persist_applied().is_err(), "an interrupted restore never persists an entry");
            crash(engine);
            engine = open_sized(&pool, RESTORE_POOL_BYTES);
            assert!(engine.needs_snapshot());
        }
        engine.restore(index, &snap).expect("restoring again succeeds");
        assert!(engine.snapshot() == snap);
        crash(engine);
        let mut engine = open_sized(&pool, RESTORE_POOL_BYTES);
        engine.keyspace().store().check().expect("engine invariants");
        assert!(!engine.needs_snapshot());
        assert_eq!(engine.applied(), index);
        assert_eq!(engine.writes(), source.writes());
        assert!(engine.snapshot() == snap, "commit {fail_at} of {total}: restored byte for byte");
    }
}

/// An open stream on an idle leader: each sweep check reads its state, and
/// none of those reads keeps a buffer held (they piled up until a commit
/// that an idle leader never makes).
#[test]
fn a_sweep_check_holds_no_buffer() {
    use pmwire_kv_cluster::extent::{Arg, PieceHead};
    use std::borrow::Cow;
    let pool = Pool::new();
    let mut m = open(&pool);
    let mut p = Proposer::with_key(3);
    let now = 1_000_000;
    let stream = p.stream_id(now);
    let value = vec![7u8; 5000];
    let piece = p.piece(now, PieceHead { stream, index: 0, count: 2 }, Arg::Inline(Cow::Borrowed(&value)));
    m.apply(1, &piece);
    m.persist_applied().expect("commits");
    let before = m.keyspace().held();
    for i in 0..100 {
        assert!(!m.sweep_due(now + i), "an open stream younger than the abandon time is not garbage");
    }
    assert_eq!(m.keyspace().held(), before, "sweep checks held buffers");
}

/// A follower packs small received values into shared pool buffers: 200
/// SETs of 32 B take a few buffers, not one each. With a 2 KiB buffer per
/// value a follower's pool filled about a hundred times faster than its
/// leader's (whose values share the buffers they were received into), and
/// the leader's room check, on its own pool, let a pipelined load fill the
/// followers' pools until their machines halted. Each value reads back.
#[test]
fn a_follower_packs_small_received_values() {
    use pmwire_kv_cluster::extent::Arg;
    use std::borrow::Cow;
    let pool = Pool::new();
    let (store, _) = Store::open(&pool.path, POOL_BYTES, Mode::ZeroCopy).expect("the pool opens");
    let mut m = RedisMachine::open(ClusterKeyspace::new(store), config()).expect("the machine opens");
    let mut p = Proposer::with_key(5);
    let free = |m: &mut RedisMachine<ClusterKeyspace>| m.keyspace().shared_store().pool_room().0;
    let before = free(&mut m);
    let mut locals = Vec::new();
    for i in 0..200u64 {
        let value = format!("{i:032}");
        let args = vec![Arg::Inline(Cow::Borrowed(&b"SET"[..])), Arg::Inline(Cow::Owned(format!("k{i}").into_bytes())), Arg::Inline(Cow::Owned(value.into_bytes()))];
        let wire = p.command_extents(1_000, Protocol::Resp2, args);
        let local = m.local_form(&wire).expect("a 32 B value is absorbed into the pool");
        m.log_held(&local);
        locals.push(local);
    }
    m.log_settled();
    let used = before - free(&mut m);
    assert!(used <= 4 * 2048, "200 values of 32 B took {used} B of pool buffers");
    for (i, local) in locals.iter().enumerate() {
        m.apply(i as u64 + 1, local);
    }
    m.persist_applied().expect("commits");
    for i in [0u64, 63, 64, 199] {
        let get = p.command(1_000, Protocol::Resp2, &["GET".to_string(), format!("k{i}")]);
        let reply = m.apply(201 + i, &get).reply;
        assert_eq!(reply, format!("$32\r\n{i:032}\r\n").into_bytes(), "k{i} reads back");
    }
}
