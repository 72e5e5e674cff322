use std::time::Duration;

use super::*;

fn config(seed: u64, requests: u64) -> FuzzConfig {
    FuzzConfig { checkpoint_every: 5_000, ..FuzzConfig::new(seed, requests, Duration::from_secs(60)) }
}

#[test]
fn core_smoke() {
    for server in [CoreServer { copy_depth: 8, require_payload_crc: false }, CoreServer { copy_depth: 0, require_payload_crc: true }] {
        let report = run_core(&config(7, 50_000), server, &mut |_| {}).unwrap_or_else(|f| panic!("{f}"));
        eprintln!("{report:?} {:.0}/s", report.rate());
    }
}

#[test]
fn planted_faults_are_caught() {
    let server = CoreServer { copy_depth: 8, require_payload_crc: false };
    for (planted, kind) in [
        (Planted::AlterReply { index: 30_000 }, FailureKind::Reply),
        (Planted::WrongModel, FailureKind::Reply),
        (Planted::CorruptCanary, FailureKind::Canary),
    ] {
        // A checkpoint after every request: the canary check comes before any READ of it.
        let every = if planted == Planted::CorruptCanary { 1 } else { 5_000 };
        let config = FuzzConfig { planted, checkpoint_every: every, ..config(11, 50_000) };
        let failure = run_core(&config, server, &mut |_| {}).expect_err("a planted fault must fail the run");
        eprintln!("{planted:?}: {failure}");
        assert_eq!(failure.kind, kind, "{planted:?}: {failure}");
    }
}

#[test]
fn net_smoke() {
    for tls in ["tcp", "sm"] {
        for depth in [8, 0] {
            let report = run_thread(&FuzzConfig { large_last: true, ..config(5, 20_000) }, tls, depth, &mut |_| {}).unwrap_or_else(|f| panic!("{f}"));
            eprintln!("{report:?} {:.0}/s", report.rate());
        }
    }
}
