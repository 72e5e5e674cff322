//! `pmwire kv` end to end: the kill -9 campaign (small; `pmwire_kv_server::crash::run` with
//! more runs is the large version) and the refusals of bad input.

use std::process::Command;
use std::time::Duration;

use pmwire_kv_server::crash::{run, CrashOptions};

const EXE: &str = env!("CARGO_BIN_EXE_pmwire");

#[test]
fn kill_dash_nine_loses_no_acknowledged_write() {
    let options = CrashOptions { runs: 5, seed: 0x6b76, exe: EXE.into(), max_load: Duration::from_millis(80) };
    let report = run(&options).unwrap();
    eprintln!("{report:?}");
    assert_eq!(report.runs, 5);
    assert_eq!(report.lost, 0);
    assert_eq!(report.torn, 0);
    assert_eq!(report.expired_served, 0);
    assert!(report.acknowledged > 0, "the load ran before the kills");
    assert!(report.expiring_acknowledged > 0, "expiring writes were acknowledged");
    assert!(report.keys_checked > 0);
    assert_eq!(report.half_applied, 0);
    assert!(report.transactions > 0, "EXECs ran before the kills");
    for (family, n) in [
        ("hash", report.hash_acknowledged),
        ("zset", report.zset_acknowledged),
        ("list", report.list_acknowledged),
        ("set", report.set_acknowledged),
    ] {
        assert!(n > 0, "{family} writes were acknowledged");
    }
    assert!(report.collections_checked > 0, "collections were read back");
}

#[test]
fn the_campaign_catches_a_server_that_acknowledges_before_committing() {
    let options = CrashOptions { runs: 3, seed: 0xca9a, exe: EXE.into(), max_load: Duration::from_millis(80) };
    let error = pmwire_kv_server::crash::run_with_planted_bug(&options).expect_err("the canary must fail");
    assert!(error.to_string().contains("lost") || format!("{error:#}").contains("wrong after restart"), "{error:#}");
}

#[test]
fn the_campaign_catches_a_list_header_written_without_its_chunk() {
    let options = CrashOptions { runs: 3, seed: 0xc4a7, exe: EXE.into(), max_load: Duration::from_millis(80) };
    let error = pmwire_kv_server::crash::run_with_planted_chunk_bug(&options).expect_err("the canary must fail");
    // The missing chunk is found when the list is read back after a restart: its read is
    // answered `-ERR stored value is corrupt: list chunk missing` (or the list comes back short).
    let text = format!("{error:#}");
    assert!(text.contains("read reply Error") || text.contains("lost"), "{text}");
}

fn kv(args: &[&str]) -> std::process::Output {
    Command::new(EXE).arg("kv").args(["--resp", "127.0.0.1:0", "--http", "127.0.0.1:0"]).args(args).output().unwrap()
}

#[test]
fn bad_input_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let pool = dir.path().join("pool");
    let path = pool.to_str().unwrap();

    let out = kv(&["--pool", path, "--size", "64M", "--mode", "fast"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown mode 'fast'"));
    assert!(!pool.exists());

    let out = kv(&["--pool", path, "--size", "1M"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("too small"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!pool.exists());

    std::fs::write(&pool, vec![7u8; 1 << 20]).unwrap();
    let out = kv(&["--pool", path, "--size", "64M"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a pmwire KV pool"));
    assert_eq!(std::fs::read(&pool).unwrap(), vec![7u8; 1 << 20], "left unchanged");
}
