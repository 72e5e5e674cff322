//! Every write method, the guarantees stated over each transport, Auto,
//! logs, and a client that disconnects mid-write.

use pmwire_log::{LogConfig, TailStrategy};
use pmwire_remote::client::{ClientError, ClientOptions, MethodError};
use pmwire_remote::proto::{Guarantee, Method};
use pmwire_remote::server::ServerConfig;

use crate::harness::{connect, connect_as, nets, pattern, start};
use crate::with_client;

#[test]
fn every_method_writes_durably_and_reads_back() {
    for net in nets() {
        let server = start(&net, ServerConfig::default());
        let mut client = connect(&net, &server);
        with_client!(&mut client, c => {
            let methods = [Method::Rpc, Method::RpcOffload, Method::OneSidedFlush];
            for (i, method) in methods.into_iter().enumerate() {
                for (j, len) in [1usize, 64, 1000, 4096, 70_000].into_iter().enumerate() {
                    let offset = (i * 8 + j) as u64 * 131_072 + 8;
                    let bytes = pattern(len, (i * 8 + j) as u64);
                    let done = c.write_persistent(offset, &bytes, method).unwrap();
                    assert_eq!(done.method, method, "{}", net.name());
                    assert_eq!(done.guarantee, Guarantee::Persistence);
                    let mut back = vec![0u8; len];
                    c.read(offset, &mut back).unwrap();
                    assert!(back == bytes, "{} {method:?} {len} B", net.name());
                }
            }
            c.atomic_write8(4096, 0x1122_3344_5566_7788).unwrap();
            let mut word = vec![0u8; 8];
            c.read(4096, &mut word).unwrap();
            assert_eq!(u64::from_le_bytes(word.try_into().unwrap()), 0x1122_3344_5566_7788);
            c.discard(b"floor").unwrap();
        });
        let stats = server.stop();
        // One write at a time: RpcOffload at or below the inline limit is
        // copied on the loop (the engine is idle), the 70 000 B one offloaded.
        let inline = [1usize, 64, 1000, 4096, 70_000].iter().filter(|&&l| l <= ServerConfig::default().copy_inline_max_bytes).count() as u64;
        assert_eq!((stats.offloaded, stats.inlined), (5 - inline, inline), "{}: {stats:?}", net.name());
    }
}

/// Over tcp, sm and in process the server's stores land in its cache:
/// read-after-write gives visibility, and asking it for persistence is the
/// typed error naming what is available (docs/FORMAT.md, methods table).
#[test]
fn read_after_write_gives_visibility_and_says_so() {
    for net in nets() {
        let server = start(&net, ServerConfig::default());
        let mut client = connect(&net, &server);
        with_client!(&mut client, c => {
            for method in [Method::OneSidedReadAfterWrite, Method::ReadAfterWriteTwoTrips] {
                let err = c.write_persistent(0, b"x", method).unwrap_err();
                match err {
                    ClientError::Method(MethodError::Weaker { available, required, .. }) => {
                        assert_eq!(available, Guarantee::Visibility);
                        assert_eq!(required, Guarantee::Persistence);
                    }
                    other => panic!("{}: {other}", net.name()),
                }
            }
            let mut back = vec![0u8; 1];
            c.read(0, &mut back).unwrap();
            assert_eq!(back, [0], "a refused write sends nothing");
        });
        let options = ClientOptions { required: Guarantee::Visibility, ..ClientOptions::default() };
        let mut client = connect_as(&net, &server, server.region_id, server.key, options).unwrap();
        with_client!(&mut client, c => {
            for (i, method) in [Method::OneSidedReadAfterWrite, Method::ReadAfterWriteTwoTrips].into_iter().enumerate() {
                for len in [8usize, 64, 1024, 20_000] {
                    let offset = 65_536 * (i as u64 + 1);
                    let bytes = pattern(len, len as u64 + i as u64);
                    let done = c.write_persistent(offset, &bytes, method).unwrap();
                    assert_eq!(done.guarantee, Guarantee::Visibility);
                    let mut back = vec![0u8; len];
                    c.read(offset, &mut back).unwrap();
                    assert!(back == bytes, "{} {method:?} {len}", net.name());
                }
            }
        });
    }
}

#[test]
fn auto_picks_from_a_measured_calibration() {
    for net in nets() {
        let server = start(&net, ServerConfig::default());
        let mut client = connect(&net, &server);
        with_client!(&mut client, c => {
            assert!(matches!(c.write_persistent(0, b"x", Method::Auto), Err(ClientError::Method(MethodError::NoCandidate { .. }))));
            let table = c.calibrate(1 << 20, &[64, 4096, 65_536], 3, net.name()).unwrap().clone();
            assert!(table.points.iter().all(|p| p.method != Method::OneSidedReadAfterWrite), "visibility-only methods are not candidates");
            let back = pmwire_remote::calibration::Calibration::from_json(&table.to_json()).unwrap();
            // A table measured when the server stated another domain, or over another transport, is refused.
            let mut stale = back.clone();
            stale.target.as_mut().unwrap().domain ^= 1;
            assert!(matches!(c.set_calibration(stale), Err(ClientError::Calibration(_))));
            let mut elsewhere = back.clone();
            elsewhere.transport = "elsewhere".into();
            assert!(matches!(c.set_calibration(elsewhere), Err(ClientError::Calibration(_))));
            c.set_calibration(back).unwrap();
            for len in [10usize, 3000, 100_000] {
                let bytes = pattern(len, 7);
                for _ in 0..100 {
                    let done = c.write_persistent(0, &bytes, Method::Auto).unwrap();
                    assert_eq!(done.guarantee, Guarantee::Persistence);
                }
                let mut read = vec![0u8; len];
                c.read(0, &mut read).unwrap();
                assert!(read == bytes);
            }
            // The evidence: 100 writes per class, some probes, every candidate durable.
            let status = c.auto_status().unwrap();
            assert_eq!(status.target, c.target(net.name()));
            for class in &status.classes {
                assert_eq!(class.writes, 100, "{} B", class.size_bytes);
                assert!(class.probes >= 1 && class.probes <= 100 / status.params.probe_every_young, "{} probes", class.probes);
                assert!(class.methods.iter().all(|m| m.method != Method::OneSidedReadAfterWrite));
            }
        });
    }
}

#[test]
fn logs_over_the_network() {
    for net in nets() {
        let server = start(&net, ServerConfig::default());
        let mut client = connect(&net, &server);
        with_client!(&mut client, c => {
            for (name, tail) in [(&b"naive"[..], TailStrategy::Naive), (b"sv", TailStrategy::SelfValidating)] {
                let log = c.log_create(name, &LogConfig::new(64 << 10, tail)).unwrap();
                assert_eq!(c.log_open(name).unwrap(), log);
                let mut lsns = Vec::new();
                for i in 0..20u64 {
                    lsns.push(c.log_append(log, &pattern(10 + i as usize * 7, i)).unwrap());
                }
                for (i, lsn) in lsns.iter().enumerate() {
                    let mut entry = Vec::new();
                    c.log_read(log, *lsn, &mut entry).unwrap();
                    assert_eq!(entry, pattern(10 + i * 7, i as u64), "{}", net.name());
                }
            }
        });
    }
}

/// A client with many writes in flight vanishes; every range is either
/// untouched or whole, the server keeps serving, and its copies drain.
///
/// Over UCX the vanishing client has only RPC writes in flight: UCX 1.13
/// emulates a put over tcp in software, and its target-side handler
/// (`ucp_put_handler`) aborts the *server* process ("Fatal: unexpected
/// error: Endpoint timeout") when it cannot acknowledge a put to an
/// initiator that is gone. In process, puts are in flight too.
#[test]
fn a_client_that_disconnects_mid_write_leaves_the_region_consistent() {
    const LEN: usize = 40_000;
    for net in nets() {
        let server = start(&net, ServerConfig::default());
        let mut client = connect(&net, &server);
        let puts = matches!(net, crate::harness::Net::InProc(_));
        with_client!(&mut client, c => {
            for i in 0..24u64 {
                let bytes = pattern(LEN, i);
                let offset = i * 65_536;
                let _ = match i % 3 {
                    0 => c.submit_rpc_write(offset, &bytes, false),
                    2 if puts => c.submit_put(offset, &bytes),
                    _ => c.submit_rpc_write(offset, &bytes, true),
                };
            }
        });
        drop(client); // mid-write: nothing waited for
        let mut other = connect(&net, &server);
        with_client!(&mut other, c => {
            for i in 0..24u64 {
                let mut back = vec![0u8; LEN];
                c.read(i * 65_536, &mut back).unwrap();
                let whole = back == pattern(LEN, i);
                let untouched = back.iter().all(|&b| b == 0);
                assert!(whole || untouched || i % 3 == 2, "{}: write {i} torn", net.name());
            }
            c.write_persistent(0, b"still serving", Method::Rpc).unwrap();
        });
        drop(other);
        server.stop();
    }
}

/// The bounded poll (event_loop::PollBudget): after activity the loop polls
/// at most `max_empty_polls` times before it blocks, so an idle server makes
/// a bounded number of passes however long it idles (no timing asserted).
#[test]
fn an_idle_server_blocks_after_a_bounded_poll() {
    let budget = pmwire_remote::event_loop::PollBudget::default();
    for net in nets() {
        let server = start(&net, ServerConfig::default());
        let mut client = connect(&net, &server);
        with_client!(&mut client, c => {
            for i in 0..10u64 {
                c.write_persistent(i * 64, &pattern(64, i), Method::Rpc).unwrap();
            }
        });
        drop(client);
        // Idle: a spinning loop would make millions of passes here.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let stats = server.stop();
        assert!(stats.blocks >= 1, "{}: {stats:?}", net.name());
        // Each event (request, accept, disconnect, stop) opens at most one
        // window of `max_empty_polls` empty passes; each wake-up adds one pass.
        let events = stats.requests + stats.accepted * 2 + 2;
        let bound = events * (budget.max_empty_polls as u64 + 2) + 2 * stats.blocks;
        assert!(stats.passes <= bound, "{}: {} passes > {bound}: {stats:?}", net.name(), stats.passes);
    }
}
