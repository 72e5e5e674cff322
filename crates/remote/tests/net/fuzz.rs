//! The fuzzer over the network (`pmwire_remote::fuzz`): `event_loop::serve`
//! on UCX tcp and shared memory in a thread, raw pipelined requests from
//! four connections holding no right, READ, WRITE and both, every reply and
//! checkpoint checked against the model. And it must fail on a planted fault.
//! Windows mix rendezvous payloads with small requests: the model assumes
//! a connection's requests take effect in send order.

use std::time::Duration;

use pmwire_remote::fuzz::{run_thread, FailureKind, FuzzConfig, Planted};

fn config(seed: u64, requests: u64) -> FuzzConfig {
    FuzzConfig { checkpoint_every: 5_000, ..FuzzConfig::new(seed, requests, Duration::from_secs(20)) }
}

#[test]
fn the_server_loop_passes_the_fuzzer_over_tcp_and_shared_memory() {
    for tls in ["tcp", "sm"] {
        for copy_depth in [8, 0] {
            let report = run_thread(&config(0x17, 25_000), tls, copy_depth, &mut |_| {}).unwrap_or_else(|failure| panic!("{failure}"));
            assert!(report.requests >= 25_000 || report.elapsed >= Duration::from_secs(20), "{report:?}");
            assert!(report.checkpoints >= 5, "{report:?}");
            // Every right was exercised: refusals for the missing ones, successes for the rest.
            assert!(report.statuses[pmwire_remote::proto::Status::Forbidden as usize] > 0, "{report:?}");
            eprintln!("{}: {} requests, {:.0}/s", report.target, report.requests, report.rate());
        }
    }
}

#[test]
fn an_altered_reply_fails_the_run_over_the_network() {
    let altered = FuzzConfig { planted: Planted::AlterReply { index: 2_000 }, ..config(3, 10_000) };
    let failure = run_thread(&altered, "tcp", 8, &mut |_| {}).expect_err("the altered reply is caught");
    assert_eq!(failure.kind, FailureKind::Reply, "{failure}");
    let corrupted = FuzzConfig { planted: Planted::CorruptCanary, checkpoint_every: 1, ..config(3, 100) };
    let failure = run_thread(&corrupted, "sm", 0, &mut |_| {}).expect_err("the changed canary is caught");
    assert_eq!(failure.kind, FailureKind::Canary, "{failure}");
}
