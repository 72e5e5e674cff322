//! The Redis machine in the deterministic simulation (feature `sim`):
//! seeded runs with every fault pass on 3 and 5 members over both stores,
//! a member drawing its own randomness is caught, and the client stream
//! runs commands of every family that mostly succeed, with watched
//! transactions that sometimes abort and sometimes run.

use pmwire_kv_cluster::entry::{Entry, Kind};
use pmwire_kv_cluster::sim::SimRedis;
use pmwire_smr::command::Op;
use pmwire_smr::sim::{run_with, SimConfig, SimMachine};
use pmwire_smr::state::StateMachine;
use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

/// Seeds per configuration (`PMWIRE_SMR_SEEDS` for more).
fn seeds() -> u64 {
    std::env::var("PMWIRE_SMR_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(20)
}

#[test]
fn redis_passes_under_every_fault() {
    for cfg in [SimConfig::standard(3), SimConfig::standard(5), SimConfig::pmem(3), SimConfig::pmem(5)] {
        let (mut acknowledged, mut crashes) = (0, 0);
        for seed in 0..seeds() {
            let r = run_with::<SimRedis>(seed, &cfg);
            assert!(r.passed(), "seed {seed} failed ({} members, {:?}): {:?}", cfg.replicas, cfg.store, r.violations);
            acknowledged += r.acknowledged;
            crashes += r.crashes;
        }
        assert!(acknowledged > 0, "some operations were acknowledged");
        assert!(crashes > 0, "crashes were injected");
    }
}

#[test]
fn a_redis_seed_replays_exactly() {
    let cfg = SimConfig::pmem(3);
    let key = |seed| {
        let r = run_with::<SimRedis>(seed, &cfg);
        (r.ops, r.acknowledged, r.crashes, r.partitions, r.terms_with_leader, r.violations)
    };
    assert_eq!(key(5), key(5));
}

#[test]
fn a_member_drawing_its_own_randomness_is_caught() {
    let cfg = SimConfig::standard(3);
    let found = (0..500).map(|seed| run_with::<SimRedis<true>>(seed, &cfg)).find(|r| !r.passed());
    let r = found.expect("members drawing their own randomness went unnoticed in 500 seeds");
    assert!(r.violations.iter().any(|v| v.contains("differ")), "caught by convergence: {:?}", r.violations);
}

/// Applies a client stream to one machine: every family runs, most
/// commands succeed, the checked keys get their inputs, and a snapshot
/// restores to the same state.
#[test]
fn the_stream_runs_every_family() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
    let mut m = SimRedis::<false>::default();
    let (mut index, mut errors, mut checked, mut arrays) = (0u64, 0, 0, 0);
    let (mut watched_aborted, mut watched_ran) = (0, 0);
    for seq in 1..=3000u64 {
        let req = SimRedis::<false>::random_request(&mut rng, 3, 4, 1, seq, seq * 1_000_000);
        if req.op == Op::Get {
            assert!(SimRedis::<false>::input(&req).is_some());
            continue;
        }
        checked += usize::from(SimRedis::<false>::input(&req).is_some());
        index += 1;
        let resp = m.apply(index, &req.to_bytes());
        let watching = Entry::decode(&req.value).is_ok_and(|e| e.kind == Kind::Exec && !e.watched.is_empty());
        if watching {
            let aborted = resp.value == b"*-1\r\n" || resp.value == b"_\r\n";
            watched_aborted += usize::from(aborted);
            watched_ran += usize::from(!aborted);
        }
        errors += usize::from(resp.value.first() == Some(&b'-'));
        arrays += usize::from(matches!(resp.value.first(), Some(b'*' | b'%' | b'~')));
    }
    assert!(checked > 1000, "checked string ops: {checked}");
    assert!(arrays > 200, "collection replies: {arrays}");
    assert!(errors < 600, "error replies: {errors} of {index}");
    assert!(watched_aborted > 10 && watched_ran > 10, "watched EXECs: {watched_aborted} aborted, {watched_ran} ran");
    let mut copy = SimRedis::<false>::default();
    copy.restore(index, &m.snapshot()).expect("restores");
    assert_eq!(copy.snapshot(), m.snapshot());
}
