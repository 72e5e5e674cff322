//! `pmwire bench smr-crash` end to end: a few kill -9 runs of a 3-replica
//! cluster on loopback, and (as root, with `ip` and `tc`) in three network
//! namespaces with partitions and delay and loss. Every run is bounded: the
//! campaign's own timeouts end each operation, catch-up and final read.
//! Afterwards no replica of the campaign runs and none of its files remain.

use std::process::{Command, Stdio};

struct Campaign {
    success: bool,
    text: String,
    pid: u32,
}

/// UCX 1.13 can abort the campaign's own process (a client thread, in
/// `async.c:643`; docs/bench.md, "Replication under kill -9"): such a
/// campaign is run again, at most twice, and the abort printed.
fn smr_crash(extra: &[&str]) -> Campaign {
    for attempt in 0..3 {
        let c = smr_crash_once(extra);
        if c.success || !c.text.contains("async.c:643") || attempt == 2 {
            return c;
        }
        println!("the campaign aborted inside UCX 1.13 (async.c:643); running it again\n{}", c.text);
    }
    unreachable!("the last attempt returns")
}

fn smr_crash_once(extra: &[&str]) -> Campaign {
    let out = tempfile::tempdir().unwrap();
    let mut args = vec!["bench", "smr-crash", "--quick", "--seed", "0x5eed", "--out", out.path().to_str().unwrap()];
    args.extend_from_slice(extra);
    let child = Command::new(env!("CARGO_BIN_EXE_pmwire")).args(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("pmwire runs");
    let pid = child.id();
    let output = child.wait_with_output().unwrap();
    let text = format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    let json = std::fs::read_dir(out.path()).unwrap().filter_map(Result::ok).any(|e| e.file_name().to_string_lossy().starts_with("smr_crash-"));
    assert!(json || text.contains("async.c:643"), "no JSON written\n{text}");
    Campaign { success: output.status.success(), text, pid }
}

fn row<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no '{name}' row\n{text}"))
}

/// Command lines of running replicas of campaign `pid`.
fn replicas_of(pid: u32) -> Vec<String> {
    let pool = format!("pmwire-smr-bench-{pid}-");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(" replica ") && c.contains(&pool))
        .collect()
}

fn assert_clean(c: &Campaign, runs: &str) {
    let text = &c.text;
    assert!(c.success, "{text}");
    assert!(row(text, "runs ").trim_end().ends_with(runs), "{text}");
    assert!(row(text, "lost acknowledged writes").trim_end().ends_with(" 0"), "{text}");
    assert!(row(text, "non-linearizable runs").trim_end().ends_with(" 0"), "{text}");
    assert!(text.contains("PASS: no acknowledged write lost, every history linearizable"), "{text}");
    // Replicas' pools, locks, ready files and logs are named by the campaign's pid.
    let tag = format!("-{}-", c.pid);
    let files: Vec<String> = std::fs::read_dir("/dev/shm").unwrap().filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("pmwire-smr-") && n.contains(&tag)).collect();
    assert!(files.is_empty(), "left behind: {files:?}");
    let procs = replicas_of(c.pid);
    assert!(procs.is_empty(), "replicas left running: {procs:?}");
}

#[test]
fn three_kill_runs_on_loopback_lose_nothing() {
    let c = smr_crash(&["--runs", "3"]);
    assert_clean(&c, "3");
    assert!(row(&c.text, "kills (leader / follower)").contains(" / "), "{}", c.text);
}

#[test]
fn two_kill_runs_in_network_namespaces_lose_nothing() {
    // A test whose peer is missing fails with the reason (scripts/setup installs iproute2).
    if let Some(why) = pmwire_bench::smr::netns::unavailable() {
        panic!("smr-crash --netns cannot run here: {why}");
    }
    let c = smr_crash(&["--netns", "--runs", "2"]);
    assert_clean(&c, "2");
}

/// The canary: with the log in DRAM and every replica killed after the
/// load, acknowledged writes are gone, and the campaign must say so.
#[test]
fn the_campaign_catches_a_cluster_that_forgets_acknowledged_writes() {
    let c = smr_crash(&["--runs", "1", "--planted-bug"]);
    assert!(!c.success, "the canary must fail\n{}", c.text);
    // Found by the checks: lost writes counted, or a history lincheck refuses.
    let lost = row(&c.text, "lost acknowledged writes").trim_end().ends_with(" 0");
    let linearizable = row(&c.text, "non-linearizable runs").trim_end().ends_with(" 0");
    assert!(!lost || !linearizable, "{}", c.text);
    assert!(c.text.contains("FAILED: run 0"), "{}", c.text);
}

/// A campaign killed with SIGKILL mid-run takes its replicas with it.
#[test]
fn a_campaign_killed_mid_run_leaves_no_replica_running() {
    let out = tempfile::tempdir().unwrap();
    let args = ["bench", "smr-crash", "--quick", "--runs", "20", "--out", out.path().to_str().unwrap()];
    let mut child = Command::new(env!("CARGO_BIN_EXE_pmwire")).args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("pmwire runs");
    let pid = child.id();
    // Kill it once its first cluster runs (its replicas carry its pid, whichever of its
    // processes started them).
    let mut seen = false;
    for _ in 0..100 {
        seen = !replicas_of(pid).is_empty();
        if seen {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    child.kill().unwrap();
    assert!(seen, "no replica of the campaign was seen running in 10 s");
    child.wait().unwrap();
    let mut left = replicas_of(pid);
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        left = replicas_of(pid);
    }
    assert!(left.is_empty(), "replicas outlived their campaign: {left:?}");
}
