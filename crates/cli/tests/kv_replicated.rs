//! `pmwire bench kv-replicated` and `kv-replicated-crash` against real
//! `pmwire kv --cluster` members: a tiny plan of the suite (no peers: their
//! own tests are in `pmwire-bench`) and two kill -9 runs. Nothing is
//! skipped: members that do not start fail the test with the reason.

use std::path::PathBuf;
use std::time::Duration;

use pmwire_bench::kvrep::{crash, suite};
use pmwire_bench::smr::peers::Plan;

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_pmwire"))
}

#[test]
fn a_tiny_suite_measures_the_members_and_fails_over() {
    let out = tempfile::tempdir().unwrap();
    let options = suite::Options { quick: true, out_dir: out.path().into(), exe: exe(), peers: false, transport: "uring".into() };
    let plan = Plan { warmup_puts: 20, latency_puts: 100, clients: vec![1, 4], warmup_per_point: Duration::from_millis(50), seconds_per_point: Duration::from_millis(300) };
    let run = suite::RunPlan { plan, rounds: 1, ycsb_records: 200, ycsb_ops: 500, catchup_mib: 8, failover_kills: 2 };
    let report = suite::run_suite(&options, &run).expect("the suite runs");
    let file: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report.json_path).unwrap()).unwrap();
    // Only the copy counters may be missing (their own headline says why).
    let skipped: Vec<&serde_json::Value> = file["skipped"].as_array().unwrap().iter().filter(|s| s["bench"] != "value_bytes_copied_per_set").collect();
    assert!(skipped.is_empty(), "targets that did not run: {skipped:#?}");
    let rows = file["results"].as_array().unwrap();
    let has = |bench: &str| rows.iter().any(|r| r["bench"] == bench && r["variant"] == suite::CLUSTER);
    for bench in [suite::SET64, "set_1KiB_latency", "get_64B_latency", "get_1KiB_latency", suite::SET64_OPS, "ycsb_a", "ycsb_b", "failover", "catch_up"] {
        assert!(has(bench), "no {bench} row for the members: {rows:#?}");
    }
    let floor = report.headlines.iter().find(|h| h.name.contains("/ raw TCP floor")).unwrap();
    assert!(floor.value.is_finite(), "the floor headline was measured: {floor:?}");
}

#[test]
fn kill_9_runs_lose_nothing_and_the_canary_is_caught() {
    let out = tempfile::tempdir().unwrap();
    let options = crash::CrashOptions { runs: 2, load: Duration::from_millis(2000), out_dir: out.path().into(), exe: exe(), seed: 0x5eed, transport: "uring".into(), netns: false };
    // Run 0 kills the leader, run 1 a follower.
    for run in 0..2 {
        let r = crash::one_run(&options, None, run);
        assert!(r.findings.problems.is_empty(), "run {run}: {:?}", r.findings.problems);
        assert!(r.findings.undecided.is_empty(), "run {run}: keys undecided {:?}", r.findings.undecided);
        assert!(r.ops > 0, "run {run} did no operation");
        let planted = crash::plant_lost_write(&r.history).expect("an acknowledged SET");
        assert!(!crash::check(&planted).problems.is_empty(), "run {run}: the planted lost write was not caught");
        if run == 0 {
            assert!(r.failover_ms.is_some(), "a write was acknowledged after the leader's kill");
        }
    }
}

/// As root with `ip`, `tc` and `nft`: runs in network namespaces with
/// partitions, delay and loss (elsewhere the test fails, saying why it
/// cannot run: the namespaces need root and iproute2, which scripts/setup
/// installs).
#[test]
fn kill_9_and_partition_runs_in_network_namespaces_lose_nothing() {
    if let Some(why) = pmwire_bench::smr::netns::unavailable() {
        panic!("kv-replicated-crash --netns cannot run here: {why}");
    }
    let out = tempfile::tempdir().unwrap();
    let options = crash::CrashOptions { runs: 3, load: Duration::from_millis(2000), out_dir: out.path().into(), exe: exe(), seed: 0x5eed, transport: "uring".into(), netns: true };
    let (report, passed) = crash::run(&options).expect("the campaign runs");
    let file: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report.json_path).unwrap()).unwrap();
    let rows = file["results"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{rows:#?}");
    for r in rows {
        assert_eq!(r["problems"], 0.0, "{r:#}");
        assert_eq!(r["lost_acked_writes"], 0.0, "{r:#}");
    }
    // The seed's draw has partitions: a heal was measured.
    assert!(rows.iter().any(|r| r["heal_to_commit_ms"].is_number()), "{rows:#?}");
    assert!(passed, "{rows:#?}");
}
