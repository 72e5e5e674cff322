//! `pmwire serve` end to end: a kill -9 crash campaign (small) against the
//! real binary on a /dev/shm pool; every acknowledged write and append must
//! survive each restart (`pmwire bench crash` is the large version).

use std::time::Duration;

use pmwire_bench::remote::crash::{run, CrashOptions};

#[test]
fn kill_dash_nine_loses_no_acknowledged_write() {
    let options = CrashOptions {
        runs: 4,
        max_load: Duration::from_millis(40),
        seed: 0x3c,
        exe: env!("CARGO_BIN_EXE_pmwire").into(),
    };
    let report = run(&options).unwrap();
    assert_eq!(report.runs, 4);
    assert_eq!(report.runs_per_phase, [1; 4], "one run in each benchmark's write phase");
    assert_eq!(report.lost, 0);
    assert!(report.acknowledged > 0, "the load ran before the kill");
    assert!(report.writes_checked > 0);
    assert!(report.appends_checked > 0);
}

#[test]
fn serve_refuses_a_pool_it_did_not_format() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = dir.path().join("pool");
    std::fs::write(&pool, vec![7u8; 1 << 20]).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_pmwire"))
        .args(["serve", "--pool", pool.to_str().unwrap(), "--size", "1M", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("does not open"));
    assert_eq!(std::fs::read(&pool).unwrap(), vec![7u8; 1 << 20], "left unchanged");
}
