//! The write index on a persistent keyspace (`machine::durable`): a member
//! that persists random batches, dumps its write index many times and
//! crashes now and then reads back the write index a volatile member has at
//! the same applied index, and answers alike after; a planted bug in the
//! journal is caught by the same check.

use crate::durable::Durable;
use crate::gen::{Gen, Step};
use pmwire_kv_cluster::machine::durable::JournalLimits;
use pmwire_kv_cluster::{RedisMachine, Watched};
use pmwire_keyspace::chunked::ChunkConfig;
use pmwire_keyspace::exec::ServerConfig;
use pmwire_smr::state::StateMachine;

fn config() -> ServerConfig {
    ServerConfig { collections: ChunkConfig::tiny(), ..ServerConfig::default() }
}

const LIMITS: JournalLimits = JournalLimits { slots: 5, min_bytes: 300 };

fn open(ks: Durable, fault: bool) -> RedisMachine<Durable> {
    let mut m = RedisMachine::open(ks, config()).expect("the keyspace opens");
    m.set_journal_limits(LIMITS);
    if fault {
        m.plant_uncounted_journal_entry();
    }
    m
}

/// What a run saw: dumps (the journal emptied), restarts, and the first
/// restart whose write index differed from the volatile member's (or was
/// refused).
#[derive(Debug, Default)]
struct Run {
    dumps: u32,
    restarts: u32,
    diverged: Option<String>,
}

/// `steps` steps of seed `seed`: a persistent member persists after random
/// batches and every third time restarts from what it committed, replaying
/// the entries it lost; its write index is compared with a volatile
/// member's after every restart.
fn run(seed: u64, steps: usize, fault: bool) -> Run {
    let mut gen = Gen::new(seed);
    let (mut d, mut v) = (open(Durable::default(), fault), RedisMachine::in_memory(config()));
    let mut log: Vec<Vec<u8>> = Vec::new();
    let mut watched: Vec<Watched> = Vec::new();
    let mut run = Run::default();
    for step in 0..steps {
        match gen.next(&mut watched) {
            Step::Watch(key) => watched.push(v.watch(&key, gen.now_ms)),
            Step::Entry(entry) => {
                log.push(entry);
                let index = log.len() as u64;
                assert_eq!(d.apply(index, &log[index as usize - 1]), v.apply(index, &log[index as usize - 1]), "seed {seed} step {step}");
            }
        }
        if step % 7 != 6 {
            continue;
        }
        d.persist_applied().expect("persisted");
        assert!(d.journal_entries() <= LIMITS.slots);
        if step % 21 != 20 {
            continue;
        }
        // A crash with the last batch committed: the write index read back is the live one.
        let committed = d.applied();
        run.dumps += d.write_index_dumps() as u32;
        let crashed = d.keyspace().crash();
        d = match RedisMachine::open(crashed, config()) {
            Ok(mut m) => {
                m.set_journal_limits(LIMITS);
                if fault {
                    m.plant_uncounted_journal_entry();
                }
                m
            }
            Err(e) => {
                run.diverged.get_or_insert(format!("step {step}: refused: {e}"));
                return run;
            }
        };
        run.restarts += 1;
        assert_eq!(d.applied(), committed);
        if d.writes() != v.writes() {
            run.diverged.get_or_insert(format!("step {step}: the write index read back differs"));
            return run;
        }
        assert!(d.snapshot() == v.snapshot(), "seed {seed} step {step}: the same state");
    }
    run
}

#[test]
fn a_restart_across_many_dumps_reads_back_the_live_write_index() {
    let (mut dumps, mut restarts) = (0, 0);
    for seed in 0..12 {
        let r = run(seed, 1_200, false);
        assert_eq!(r.diverged, None, "seed {seed}");
        dumps += r.dumps;
        restarts += r.restarts;
    }
    println!("{dumps} dumps, {restarts} restarts");
    assert!(dumps >= 100, "{dumps} dumps");
    assert!(restarts >= 500, "{restarts} restarts");
}

#[test]
fn the_restart_check_catches_an_uncounted_journal_entry() {
    let caught = (0..12).filter(|&seed| run(seed, 1_200, true).diverged.is_some()).count();
    assert!(caught >= 10, "{caught} of 12 seeds caught the planted bug");
}
