//! Tests of [`UcxTransport`] as a hostile or busy peer would use it: the
//! order of pipelined calls whatever their sizes, one-sided access that is
//! off by default, and a forged descriptor against a server with it off.
//! Every wait is bounded; no test asserts on timing.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::seam::{ConnId, Event, Output, Reach, RegionDescriptor, Transport};
use crate::ucx_tests::{sm, tcp};
use crate::{AttachError, OpError, RegisterError, UcxConfig, UcxTransport};

const TIMEOUT: Duration = Duration::from_secs(20);

/// The default configurations: one-sided access off.
fn defaults() -> [(&'static str, UcxConfig); 2] {
    [
        ("tcp", UcxConfig::tls("tcp").with_var("NET_DEVICES", "lo")),
        ("sm", UcxConfig::shared_memory().with_var("NET_DEVICES", "lo")),
    ]
}

/// A server thread that answers every request with the order it arrived
/// in (u64 LE) and an empty payload, and owns `secret`: bytes no peer may
/// read or write. Returns what `secret` held when it stopped.
struct OrderServer {
    addr: SocketAddr,
    secret_addr: u64,
    stop: Arc<AtomicBool>,
    join: JoinHandle<Vec<u8>>,
}

fn spawn_order_server(config: UcxConfig) -> OrderServer {
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let join = std::thread::spawn(move || {
        let secret = vec![0x5au8; 4096];
        let mut t = UcxTransport::new(&config).unwrap();
        let addr = t.listen("127.0.0.1:0".parse().unwrap()).unwrap();
        tx.send((addr, secret.as_ptr() as u64)).unwrap();
        let mut arrived = 0u64;
        let mut events = Vec::new();
        let deadline = Instant::now() + 4 * TIMEOUT;
        while !stop2.load(Ordering::Relaxed) && Instant::now() < deadline {
            t.poll(&mut events, 64);
            if events.is_empty() {
                t.wait(Duration::from_millis(20)).unwrap();
            }
            for e in events.drain(..) {
                if let Event::Request(r) = e {
                    t.recycle(r.payload);
                    // The connection may have gone meanwhile.
                    let _ = t.reply(r.id, &arrived.to_le_bytes(), Vec::new());
                    arrived += 1;
                }
            }
        }
        drop(t);
        secret
    });
    let (addr, secret_addr) = rx.recv_timeout(TIMEOUT).expect("server came up");
    OrderServer {
        addr,
        secret_addr,
        stop,
        join,
    }
}

impl OrderServer {
    fn finish(self) -> Vec<u8> {
        self.stop.store(true, Ordering::Relaxed);
        self.join.join().unwrap()
    }
}

/// Polls until every token in `tokens` has completed; their outputs by token.
fn completions(t: &mut UcxTransport, tokens: &[u64]) -> Vec<(u64, Result<Output, OpError>)> {
    let deadline = Instant::now() + TIMEOUT;
    let mut done = Vec::new();
    let mut events = Vec::new();
    while done.len() < tokens.len() {
        assert!(Instant::now() < deadline, "completions {tokens:?} not all in {TIMEOUT:?}");
        t.wait(Duration::from_millis(20)).unwrap();
        t.poll(&mut events, 64);
        for e in events.drain(..) {
            if let Event::Completion(c) = e {
                if tokens.contains(&c.token) {
                    done.push((c.token, c.result));
                }
            }
        }
    }
    done.sort_by_key(|d| d.0);
    done
}

fn arrival_order(result: &Result<Output, OpError>) -> u64 {
    match result {
        Ok(Output::Response { header, .. }) => u64::from_le_bytes(header[..8].try_into().unwrap()),
        other => panic!("call failed: {other:?}"),
    }
}

/// A 1 MiB call (rendezvous) followed at once by an 8 B one (eager) on the
/// same connection: the server must see them in that order, every time.
/// Before the transport numbered its messages, the eager one overtook the
/// rendezvous one whenever it arrived while the large one was received.
fn pipelined_calls_arrive_in_send_order(name: &str, config: UcxConfig, pairs: u64) {
    let server = spawn_order_server(config.clone());
    let mut client = UcxTransport::new(&config).unwrap();
    let conn = client.connect(&server.addr).unwrap();
    let big = vec![0xabu8; 1 << 20];
    for i in 0..pairs {
        let (large, small) = (2 * i, 2 * i + 1);
        let payload = {
            let mut buf = client.take_buffer(big.len());
            buf.extend_from_slice(&big);
            buf
        };
        client.call(conn, b"large", payload, large).unwrap();
        client.call(conn, b"small", vec![1; 8], small).unwrap();
        let done = completions(&mut client, &[large, small]);
        let (first, second) = (arrival_order(&done[0].1), arrival_order(&done[1].1));
        assert!(first < second, "[{name}] pair {i}: the 8 B call arrived {second}, before the 1 MiB one ({first})");
        for (_, result) in done {
            if let Ok(Output::Response { payload, .. }) = result {
                client.recycle(payload);
            }
        }
    }
    client.close(conn);
    server.finish();
}

#[test]
fn pipelined_calls_arrive_in_send_order_over_tcp_and_sm() {
    for (name, config) in defaults() {
        pipelined_calls_arrive_in_send_order(name, config, 50);
    }
    pipelined_calls_arrive_in_send_order("tcp, one-sided on", tcp(), 20);
    pipelined_calls_arrive_in_send_order("sm, one-sided on", sm(), 20);
}

#[test]
fn one_sided_access_is_off_by_default() {
    for (name, config) in defaults() {
        let mut t = UcxTransport::new(&config).unwrap();
        assert_eq!(t.reach(), Reach::Off, "[{name}]");
        let mut memory = vec![0u8; 4096];
        // SAFETY: `memory` outlives `t`; nothing is registered anyway.
        let registered = unsafe { t.register(memory.as_mut_ptr(), memory.len()) };
        assert!(matches!(registered, Err(RegisterError::OneSidedOff)), "[{name}] {registered:?}");
        assert!(matches!(t.allocate(4096), Err(RegisterError::OneSidedOff)), "[{name}]");
        let server = spawn_order_server(config.clone());
        let conn = t.connect(&server.addr).unwrap();
        let desc = RegionDescriptor {
            addr: server.secret_addr,
            len: 4096,
            rkey: vec![1; 16],
        };
        assert!(matches!(t.attach(conn, &desc), Err(AttachError::OneSidedOff)), "[{name}]");
        t.close(conn);
        server.finish();
    }
    for config in [tcp(), sm()] {
        assert_eq!(UcxTransport::new(&config).unwrap().reach(), Reach::Process);
    }
}

/// A client with one-sided access on (its own registration gives it a
/// well-formed rkey) aims a descriptor at a server's private bytes. The
/// server has one-sided access off: the put must not land, the get must
/// not return its bytes, and the server must stay up and keep answering.
/// Before, UCX's software RMA handlers (tcp) and cma (sm) served both at
/// any address, and a get at an unmapped one killed the server.
fn forged_descriptor_reaches_nothing(name: &str, server_config: UcxConfig, client_config: UcxConfig) {
    let server = spawn_order_server(server_config);
    let mut client = UcxTransport::new(&client_config).unwrap();
    let mut own = vec![0u8; 4096];
    // SAFETY: `own` outlives `client` (dropped below, before `own`).
    let own_region = unsafe { client.register(own.as_mut_ptr(), own.len()) }.unwrap();
    let rkey = client.export(own_region).unwrap().rkey;
    let conn = client.connect(&server.addr).unwrap();
    // The connection is up once a call has gone both ways.
    client.call(conn, b"hello", Vec::new(), 1).unwrap();
    arrival_order(&completions(&mut client, &[1])[0].1);
    let forged = |addr: u64| RegionDescriptor {
        addr,
        len: 4096,
        rkey: rkey.clone(),
    };
    let secret = client.attach(conn, &forged(server.secret_addr)).unwrap();
    let unmapped = client.attach(conn, &forged(0x1000)).unwrap();
    client.put(conn, secret, 0, vec![0xee; 64], 10).unwrap();
    client.get(conn, secret, 0, vec![0; 64], 11).unwrap();
    client.get(conn, unmapped, 0, vec![0; 64], 12).unwrap();
    client.flush(conn, 13).unwrap();
    // Let the server's worker see (and drop) whatever arrived.
    let mut got = Vec::new();
    let mut events = Vec::new();
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        client.wait(Duration::from_millis(20)).unwrap();
        client.poll(&mut events, 64);
        got.extend(events.drain(..).filter_map(|e| match e {
            Event::Completion(c) => Some((c.token, c.result)),
            _ => None,
        }));
    }
    for (token, result) in &got {
        if let Ok(Output::Get { buf }) = result {
            assert!(buf.iter().all(|&b| b != 0x5a), "[{name}] get {token} read the server's private bytes");
        }
    }
    // The server is up and still answers on a new connection.
    let mut probe = UcxTransport::new(&client_config).unwrap();
    let other = probe.connect(&server.addr).unwrap();
    probe.call(other, b"still there?", Vec::new(), 2).unwrap();
    arrival_order(&completions(&mut probe, &[2])[0].1);
    probe.close(other);
    // Closing fails whatever is still waiting: every operation completes.
    client.close(conn);
    let deadline = Instant::now() + TIMEOUT;
    while got.len() < 4 {
        assert!(Instant::now() < deadline, "[{name}] operations never completed: {got:?}");
        client.wait(Duration::from_millis(20)).unwrap();
        client.poll(&mut events, 64);
        got.extend(events.drain(..).filter_map(|e| match e {
            Event::Completion(c) => Some((c.token, c.result)),
            _ => None,
        }));
    }
    drop(probe);
    drop(client);
    drop(own);
    let secret = server.finish();
    assert!(secret.iter().all(|&b| b == 0x5a), "[{name}] the forged put landed in the server");
}

#[test]
fn forged_descriptor_reaches_nothing_when_one_sided_access_is_off() {
    let [(_, tcp_default), (_, sm_default)] = defaults();
    forged_descriptor_reaches_nothing("tcp", tcp_default, tcp());
    forged_descriptor_reaches_nothing("sm", sm_default, sm());
}

/// A connection id a test never opened stays refused.
#[test]
fn unknown_connections_are_refused() {
    let (_, config) = defaults().into_iter().next().unwrap();
    let mut t = UcxTransport::new(&config).unwrap();
    assert!(matches!(t.call(ConnId(7), b"x", Vec::new(), 1), Err(OpError::Disconnected(7))));
}
