//! `pmwire check smr`'s follower-forwarding part (`smr_check_forward`):
//! `--forward` runs the `sim_forward` simulation alone over the seeds asked
//! for, passes, and catches its planted bug; `--forward` and `--no-forward`
//! together are refused.

use std::process::Command;

fn pmwire(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pmwire")).args(args).output().expect("pmwire runs")
}

#[test]
fn check_smr_forward_passes_and_catches_its_planted_bug() {
    let output = pmwire(&["check", "smr", "--forward", "--seeds", "12", "--replicas", "3"]);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{text}\n{}", String::from_utf8_lossy(&output.stderr));
    let row = text.lines().find(|l| l.starts_with("forward, 3 replicas")).unwrap_or_else(|| panic!("no forward row: {text}"));
    assert!(row.ends_with(" ok"), "{row}");
    assert!(row.split_whitespace().nth(5) == Some("12"), "12 runs: {row}");
    assert!(!text.contains("5 replicas"), "--replicas 3 only: {text}");
    assert!(text.contains("forwards not deduplicated") && text.contains("caught at seed"), "{text}");
    assert!(!text.contains("kv, 3 replicas"), "--forward runs the forwarding simulation alone: {text}");
}

#[test]
fn forward_and_no_forward_are_refused_together() {
    let output = pmwire(&["check", "smr", "--forward", "--no-forward"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot be used with"), "{output:?}");
}
