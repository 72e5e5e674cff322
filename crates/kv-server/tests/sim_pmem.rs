//! The Redis machine on the persistent engine in the deterministic
//! simulation (feature `sim`): members restart from crash images of their
//! machine's medium (crashes between turns and inside the machine's
//! commits) as well as of their Raft store, and every seed's history stays
//! linearizable and the members converge; the planted bug (writes
//! committed apart from the applied index) is caught by a seed.

use pmwire_kv_cluster::sim::SimRedis;
use pmwire_kv_server::sim::PmemKeyspace;
use pmwire_smr::sim::{run_with, SimConfig};

/// Seeds per configuration (`PMWIRE_SMR_SEEDS` for more).
fn seeds() -> u64 {
    std::env::var("PMWIRE_SMR_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(12)
}

#[test]
fn redis_on_crash_imaged_engines_passes_under_every_fault() {
    for cfg in [SimConfig::pmem(3), SimConfig::standard(3)] {
        let (mut acknowledged, mut crashes) = (0, 0);
        for seed in 0..seeds() {
            let r = run_with::<SimRedis<false, PmemKeyspace>>(seed, &cfg);
            assert!(r.passed(), "seed {seed} failed ({:?}): {:?}\n{:#?}", cfg.store, r.violations, r.failing_history);
            acknowledged += r.acknowledged;
            crashes += r.crashes;
        }
        assert!(acknowledged > 0, "some operations were acknowledged");
        assert!(crashes > 0, "crashes were injected");
    }
}

#[test]
fn writes_committed_apart_from_the_applied_index_are_caught() {
    let cfg = SimConfig::pmem(3);
    let found = (0..300).map(|seed| run_with::<SimRedis<false, PmemKeyspace<true>>>(seed, &cfg)).find(|r| !r.passed());
    let r = found.expect("writes committed apart from the applied index went unnoticed in 300 seeds");
    println!("caught at seed {}: {:?}", r.seed, r.violations);
}
