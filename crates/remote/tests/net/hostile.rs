//! The server as a hostile or busy client uses it, over UCX tcp and shared
//! memory with the defaults `pmwire serve` runs with: one-sided access off,
//! a forged descriptor that must reach nothing, and pipelined requests that
//! must take effect in the order they were sent.

use std::time::{Duration, Instant};

use pmwire_remote::client::{ClientError, ClientOptions, MethodError};
use pmwire_remote::proto::{Guarantee, Method, OneSidedReach, MAX_PAYLOAD_BYTES};
use pmwire_remote::server::ServerConfig;
use transport::{Event, Output, RegionDescriptor, Transport, UcxTransport};

use crate::harness::{self, connect_default, pattern, start, start_default, AnyClient, Net};
use crate::with_client;

fn ucx_nets() -> [Net; 2] {
    [Net::Ucx("tcp"), Net::Ucx("sm")]
}

#[test]
fn by_default_hello_says_one_sided_access_is_off_and_no_method_uses_it() {
    for net in ucx_nets() {
        let server = start_default(&net, ServerConfig::default());
        let mut client = connect_default(&net, &server, ClientOptions::default());
        with_client!(&mut client, c => {
            let hello = c.hello().clone();
            assert_eq!(hello.one_sided, OneSidedReach::Off, "[{}]", net.name());
            assert!(hello.rkey.is_empty());
            assert_eq!(hello.remote_addr, 0);
            for method in [Method::OneSidedFlush, Method::OneSidedReadAfterWrite, Method::ReadAfterWriteTwoTrips] {
                assert_eq!(hello.guarantee(method), Guarantee::None, "[{}] {method:?}", net.name());
                let refused = c.write_persistent(0, b"x", method);
                assert!(matches!(refused, Err(ClientError::Method(MethodError::Weaker { .. }))), "[{}] {method:?}: {refused:?}", net.name());
            }
            c.write_persistent(0, b"rpc still works", Method::Rpc).unwrap();
        });
        drop(client);
        // Turned on, HELLO says how far it reaches: the whole process.
        let server = start(&net, ServerConfig::default());
        let mut client = harness::connect(&net, &server);
        with_client!(&mut client, c => assert_eq!(c.hello().one_sided, OneSidedReach::Process, "[{}]", net.name()));
    }
}

/// Drives a raw transport until `want` completions arrived or `wait` passed.
fn completions(t: &mut UcxTransport, want: usize, wait: Duration) -> Vec<(u64, Result<Output, transport::OpError>)> {
    let deadline = Instant::now() + wait;
    let (mut got, mut events) = (Vec::new(), Vec::new());
    while got.len() < want && Instant::now() < deadline {
        t.wait(Duration::from_millis(20)).unwrap();
        t.poll(&mut events, 64);
        got.extend(events.drain(..).filter_map(|e| match e {
            Event::Completion(c) => Some((c.token, c.result)),
            _ => None,
        }));
    }
    got
}

/// The reproduction: the access key is in the superblock at the
/// pool's offset 0, and the log area sits just before the data area. With
/// a forged descriptor (a well-formed rkey of the attacker's own, an
/// address moved onto the superblock, and one at 0x1000), a GET returned
/// the superblock, a PUT landed in the log area, and a GET at 0x1000 killed
/// the server. By default none of it reaches the server.
#[test]
fn a_forged_descriptor_reads_and_writes_nothing_and_the_server_stays_up() {
    for net in ucx_nets() {
        let harness::Net::Ucx(tls) = net else { unreachable!() };
        let server = start_default(&net, ServerConfig::default());
        let harness::Addr::Socket(addr) = server.addr else { unreachable!() };
        let mut attacker = UcxTransport::new(&harness::ucx_config(tls)).unwrap();
        let mut own = vec![0u8; 4096];
        // SAFETY: `own` outlives the attacker transport (forgotten below:
        // its stuck gets keep it, as a real attacker's would).
        let own_region = unsafe { attacker.register(own.as_mut_ptr(), own.len()) }.unwrap();
        let rkey = attacker.export(own_region).unwrap().rkey;
        let conn = attacker.connect(&addr).unwrap();
        let forged = |addr: u64| RegionDescriptor { addr, len: 1 << 20, rkey: rkey.clone() };
        let pool = attacker.attach(conn, &forged(server.region_addr)).unwrap();
        let unmapped = attacker.attach(conn, &forged(0x1000)).unwrap();
        attacker.get(conn, pool, 0, vec![0; 64], 1).unwrap();
        attacker.put(conn, pool, 4096, vec![0xee; 4096], 2).unwrap();
        attacker.get(conn, unmapped, 0, vec![0; 64], 3).unwrap();
        for (token, result) in completions(&mut attacker, 3, Duration::from_secs(1)) {
            if let Ok(Output::Get { buf }) = result {
                let key = server.key.to_le_bytes();
                assert!(!buf.windows(8).any(|w| w == key), "[{tls}] get {token} read the access key");
            }
        }
        // The server is up, its key unchanged, its pool intact.
        let mut client = connect_default(&net, &server, ClientOptions::default());
        with_client!(&mut client, c => {
            c.write_persistent(0, b"after the attack", Method::Rpc).unwrap();
            let mut back = vec![0; 16];
            c.read(0, &mut back).unwrap();
            assert_eq!(back, b"after the attack");
            let log = c.log_create(b"after", &pmwire_log::LogConfig::new(64 << 10, pmwire_log::TailStrategy::SelfValidating)).unwrap();
            assert_eq!(c.log_append(log, b"entry").unwrap(), 0);
        });
        drop(client);
        std::mem::forget(attacker);
        std::mem::forget(own);
        server.stop();
    }
}

/// `PMWIRE_PIPELINES` pipelines (default 100; the issue asks for 1,000) of
/// a 1 MiB PERSIST_WRITE, an 8 B PERSIST_WRITE to the same bytes and a
/// READ of them, sent without waiting on one connection: the 8 B write
/// wins and the READ sees it, every time. Before the transport kept the
/// order, the 1 MiB write (rendezvous) landed last: 10 times out of 10.
#[test]
fn pipelined_large_write_small_write_read_take_effect_in_order() {
    let pipelines: u64 = std::env::var("PMWIRE_PIPELINES").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    for net in ucx_nets() {
        let config = ServerConfig { max_payload: MAX_PAYLOAD_BYTES, ..ServerConfig::default() };
        let server = start_default(&net, config);
        let options = ClientOptions { window: 8, payload_crc: false, ..ClientOptions::default() };
        let mut client = connect_default(&net, &server, options);
        let AnyClient::Ucx(c) = &mut client else { unreachable!() };
        let large_len = MAX_PAYLOAD_BYTES as usize;
        for i in 0..pipelines {
            let offset = (i % 4) * large_len as u64;
            let large = pattern(large_len, 2 * i);
            let small = pattern(8, 2 * i + 1);
            let w1 = c.submit_rpc_write(offset, &large, false).unwrap();
            let w2 = c.submit_rpc_write(offset, &small, false).unwrap();
            let r = c.submit_read(offset, 8).unwrap();
            assert_eq!(c.wait(w1, None).unwrap(), large_len as u64);
            assert_eq!(c.wait(w2, None).unwrap(), 8);
            let mut seen = Vec::new();
            c.wait(r, Some(&mut seen)).unwrap();
            assert_eq!(seen, small, "[{}] pipeline {i}: the READ did not see the 8 B write", net.name());
            let mut head = vec![0; 16];
            c.read(offset, &mut head).unwrap();
            assert_eq!(&head[..8], &small[..], "[{}] pipeline {i}: the 1 MiB write landed after the 8 B one", net.name());
            assert_eq!(&head[8..], &large[8..16], "[{}] pipeline {i}", net.name());
        }
        eprintln!("[{}] {pipelines} pipelines of 1 MiB write, 8 B write, READ: the 8 B write won every time", net.name());
        drop(client);
        server.stop();
    }
}
