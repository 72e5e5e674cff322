//! Proposals and reads through every member (`pmwire_smr::sim_forward`):
//! embedder-style clients on the leader and on followers, under loss,
//! duplication, reordering, partitions and crashes; histories checked per
//! key. The planted bug (no exactly-once table for forwarded proposals)
//! must be caught by some seed.

use pmwire_smr::node::Faults;
use pmwire_smr::sim_forward::{run_forward, ForwardSimConfig, ForwardSimReport};

fn seeds() -> u64 {
    std::env::var("PMWIRE_SMR_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(30)
}

fn assert_passes(cfg: &ForwardSimConfig) -> ForwardSimReport {
    let mut total = ForwardSimReport::default();
    for seed in 0..seeds() {
        let r = run_forward(seed, cfg);
        assert!(r.passed(), "seed {seed} failed (replay: run_forward({seed}, ..)): {:?}", r.violations);
        total.acked_follower += r.acked_follower;
        total.acked_leader += r.acked_leader;
        total.reads_follower += r.reads_follower;
        total.reads_leader += r.reads_leader;
        total.failed_not_applied += r.failed_not_applied;
        total.unknown += r.unknown;
        total.crashes += r.crashes;
    }
    eprintln!("{total:?}");
    assert!(total.acked_follower > 0 && total.acked_leader > 0, "appends acknowledged through followers and the leader: {total:?}");
    assert!(total.reads_follower > 0 && total.reads_leader > 0, "reads served on followers and the leader: {total:?}");
    assert!(total.crashes > 0, "crashes were injected");
    total
}

#[test]
fn three_members_serve_through_followers_under_every_fault() {
    assert_passes(&ForwardSimConfig::standard(3));
}

#[test]
fn five_members_serve_through_followers_under_every_fault() {
    assert_passes(&ForwardSimConfig::standard(5));
}

#[test]
fn a_run_is_a_function_of_its_seed() {
    let cfg = ForwardSimConfig::standard(3);
    let (a, b) = (run_forward(7, &cfg), run_forward(7, &cfg));
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

#[test]
fn planted_no_dedup_of_forwarded_proposals_is_caught() {
    let cfg = ForwardSimConfig { planted: Faults { forward_without_dedup: true, ..Faults::default() }, ..ForwardSimConfig::standard(3) };
    let caught = (0..200).map(|seed| run_forward(seed, &cfg)).find(|r| !r.passed());
    let r = caught.expect("some seed catches a forwarded proposal applied twice");
    eprintln!("seed {} caught it: {:?}", r.seed, r.violations);
    assert!(r.violations.iter().any(|v| v.contains("twice")), "{:?}", r.violations);
}

#[test]
#[ignore]
fn replay() {
    let seed: u64 = std::env::var("SEED").unwrap().parse().unwrap();
    let r = run_forward(seed, &ForwardSimConfig::standard(std::env::var("N").map_or(3, |n| n.parse().unwrap())));
    eprintln!("{r:?}");
}
