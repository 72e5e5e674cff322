//! Tests of [`UcxTransport`] over real UCX: a server thread and a client in
//! the test thread, on 127.0.0.1 with port 0, over TCP and over shared
//! memory (each context sets `UCX_TLS` itself, so tests run in parallel).
//! Every wait is bounded; no test asserts on timing.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pmem::Region;

use crate::seam::{AtomicOp, Completion, ConnId, Event, Output, RegionDescriptor, Transport};
use crate::{Limits, OpError, Status, UcxConfig, UcxTransport};

/// Bound on any one wait in these tests.
const TIMEOUT: Duration = Duration::from_secs(20);
const REGION_BYTES: usize = 1 << 20;

/// Transports under test: TCP, and shared memory. Client-server connection
/// set-up goes through UCX's TCP connection manager in both cases (it is
/// not a data transport; `UCX_TLS=sm` still carries the data over posix/cma).
fn configs() -> Vec<(&'static str, UcxConfig)> {
    vec![("tcp", tcp()), ("sm", sm())]
}

/// TCP over the loopback device only: UCX would otherwise add lanes over
/// every interface, and tests talk to this machine's loopback alone. With
/// one-sided access on, as these tests put, get and register.
pub(crate) fn tcp() -> UcxConfig {
    UcxConfig::tls("tcp").with_var("NET_DEVICES", "lo").with_one_sided()
}

/// Shared memory (the TCP connection manager on loopback sets it up), with
/// one-sided access on.
pub(crate) fn sm() -> UcxConfig {
    UcxConfig::shared_memory().with_var("NET_DEVICES", "lo").with_one_sided()
}

struct ServerReport {
    accepted: usize,
    disconnects: Vec<Option<Status>>,
    region_head: Vec<u8>,
}

struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    join: JoinHandle<ServerReport>,
}

/// How the server answers requests.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Echo, until the client disconnects (or stop).
    Echo,
    /// Echo after sleeping a little (for the wait test).
    SlowEcho,
    /// Echo, and go on serving other connections after a disconnect.
    Serve,
}

/// Starts a server thread: a 1 MiB emulated-pmem region on /dev/shm,
/// registered and exported; answers "desc" with the descriptor, "crash" by
/// dropping its transport at once, anything else by echoing.
fn spawn_server(config: UcxConfig, mode: Mode) -> Server {
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let join = std::thread::spawn(move || {
        let dir = tempfile::Builder::new()
            .prefix("pmwire-transport")
            .tempdir_in("/dev/shm")
            .unwrap();
        let region = Region::create(dir.path().join("pool"), REGION_BYTES as u64).unwrap();
        let mut t = UcxTransport::new(&config).unwrap();
        let addr = t.listen("127.0.0.1:0".parse().unwrap()).unwrap();
        // SAFETY: the region outlives the transport (dropped after it below).
        let id = unsafe { t.register(region.as_ptr(), REGION_BYTES) }.unwrap();
        let desc = t.export(id).unwrap().encode();
        tx.send(addr).unwrap();
        let mut report = ServerReport {
            accepted: 0,
            disconnects: Vec::new(),
            region_head: Vec::new(),
        };
        let deadline = Instant::now() + TIMEOUT;
        let mut events = Vec::new();
        'serve: while !stop2.load(Ordering::Relaxed) && Instant::now() < deadline {
            t.poll(&mut events, 64);
            if events.is_empty() {
                t.wait(Duration::from_millis(50)).unwrap();
                continue;
            }
            for e in events.drain(..) {
                match e {
                    Event::Accepted(_) => report.accepted += 1,
                    Event::Request(r) if r.header == b"desc" => {
                        t.reply(r.id, b"desc", desc.clone()).unwrap()
                    }
                    Event::Request(r) if r.header == b"crash" => break 'serve,
                    Event::Request(r) => {
                        if mode == Mode::SlowEcho {
                            std::thread::sleep(Duration::from_millis(200));
                        }
                        t.reply(r.id, &r.header, r.payload).unwrap();
                    }
                    Event::Disconnected { cause, .. } => {
                        report.disconnects.push(cause);
                        if mode != Mode::Serve {
                            break 'serve;
                        }
                    }
                    Event::Message { .. } => {}
                    Event::Completion(_) => {}
                }
            }
        }
        drop(t);
        // SAFETY: the region maps REGION_BYTES; nothing else writes it now.
        report.region_head = unsafe { std::slice::from_raw_parts(region.as_ptr(), 8192) }.to_vec();
        report
    });
    let addr = rx.recv_timeout(TIMEOUT).expect("server came up");
    Server { addr, stop, join }
}

/// Polls (and waits) until the completion for `token` arrives (or takes it
/// from `others`, where earlier calls put events they were not waiting for).
fn completion<T: Transport>(t: &mut T, token: u64, others: &mut Vec<Event>) -> Completion {
    if let Some(i) = others
        .iter()
        .position(|e| matches!(e, Event::Completion(c) if c.token == token))
    {
        let Event::Completion(c) = others.remove(i) else {
            unreachable!()
        };
        return c;
    }
    let deadline = Instant::now() + TIMEOUT;
    let mut events = Vec::new();
    loop {
        t.poll(&mut events, 64);
        let mut found = None;
        for e in events.drain(..) {
            match e {
                Event::Completion(c) if c.token == token && found.is_none() => found = Some(c),
                other => others.push(other),
            }
        }
        if let Some(c) = found {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "no completion for token {token} in {TIMEOUT:?}"
        );
        t.wait(Duration::from_millis(100)).unwrap();
    }
}

fn call<T: Transport>(
    t: &mut T,
    conn: ConnId,
    header: &[u8],
    payload: Vec<u8>,
    token: u64,
) -> (Vec<u8>, Vec<u8>) {
    t.call(conn, header, payload, token).unwrap();
    match completion(t, token, &mut Vec::new()).result {
        Ok(Output::Response { header, payload }) => (header, payload),
        other => panic!("call {token}: {other:?}"),
    }
}

/// Connects, fetches and attaches the server's region.
fn connect(client: &mut UcxTransport, server: &Server) -> (ConnId, crate::RemoteRegionId) {
    let conn = client.connect(&server.addr).unwrap();
    let (_, desc) = call(client, conn, b"desc", Vec::new(), 1);
    let desc = RegionDescriptor::decode(&desc).unwrap();
    assert_eq!(desc.len, REGION_BYTES as u64);
    let remote = client.attach(conn, &desc).unwrap();
    (conn, remote)
}

/// Keeps the client progressing (a graceful close needs it) until the
/// server thread ends, then returns its report.
fn finish(client: &mut UcxTransport, server: Server) -> ServerReport {
    let deadline = Instant::now() + TIMEOUT;
    let mut events = Vec::new();
    while !server.join.is_finished() {
        if Instant::now() >= deadline {
            server.stop.store(true, Ordering::Relaxed);
        }
        client.wait(Duration::from_millis(20)).unwrap();
        client.poll(&mut events, 64);
    }
    server.join.join().unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The whole seam over one UCX transport: RPC (eager and rendezvous),
/// put/get/flush into registered tmpfs memory, an atomic, fence, close.
fn exercise(name: &str, config: UcxConfig) {
    let server = spawn_server(config.clone(), Mode::Echo);
    let mut client = UcxTransport::new(&config).unwrap();
    let (conn, remote) = connect(&mut client, &server);
    let lanes = client.describe(conn).unwrap();
    eprintln!("[{name}] client endpoint:\n{lanes}");
    if name == "sm" {
        // The data lanes are shared memory, not TCP.
        assert!(
            lanes.contains("posix/") || lanes.contains("sysv/"),
            "{lanes}"
        );
        assert!(!lanes.contains("tcp/"), "{lanes}");
    }

    // Small RPC.
    let (h, p) = call(&mut client, conn, b"echo", b"hello".to_vec(), 2);
    assert_eq!(h, b"echo");
    assert_eq!(p, b"hello");

    // A 1 MiB payload: above every eager limit, so it travels as rendezvous
    // both ways (request and response).
    let big = pattern(1 << 20, 7);
    let (_, p) = call(&mut client, conn, b"big", big.clone(), 3);
    assert_eq!(p.len(), big.len());
    assert!(p == big, "rendezvous payload corrupted");

    // put, flush, get back.
    let data = pattern(256, 3);
    client.put(conn, remote, 4096, data.clone(), 10).unwrap();
    client.flush(conn, 11).unwrap();
    let mut others = Vec::new();
    assert!(matches!(
        completion(&mut client, 10, &mut others).result,
        Ok(Output::Put { .. })
    ));
    assert!(matches!(
        completion(&mut client, 11, &mut others).result,
        Ok(Output::Flush)
    ));
    client.get(conn, remote, 4096, vec![0; 256], 12).unwrap();
    match completion(&mut client, 12, &mut others).result {
        Ok(Output::Get { buf }) => assert_eq!(buf, data),
        other => panic!("get: {other:?}"),
    }

    // A bulk put of 64 KiB, then a fence and a worker-ordered put.
    client
        .put(conn, remote, 65536, pattern(65536, 9), 13)
        .unwrap();
    client.fence().unwrap();
    client
        .put(conn, remote, 0, b"fenced!!".to_vec(), 14)
        .unwrap();
    client.flush(conn, 15).unwrap();
    for token in [13, 14, 15] {
        assert!(completion(&mut client, token, &mut others).result.is_ok());
    }

    // An 8-byte atomic at offset 8192 (zero in a fresh region).
    let atomic = client.atomic(conn, remote, 8192, AtomicOp::FetchAdd(5), 16);
    match atomic.map(|()| completion(&mut client, 16, &mut others).result) {
        Ok(Ok(Output::Atomic { old })) => {
            assert_eq!(old, 0);
            client
                .atomic(
                    conn,
                    remote,
                    8192,
                    AtomicOp::CompareSwap {
                        expected: 5,
                        new: 42,
                    },
                    17,
                )
                .unwrap();
            assert_eq!(
                completion(&mut client, 17, &mut others).result.unwrap(),
                Output::Atomic { old: 5 }
            );
            client.get(conn, remote, 8192, vec![0; 8], 18).unwrap();
            let Ok(Output::Get { buf }) = completion(&mut client, 18, &mut others).result else {
                panic!()
            };
            assert_eq!(u64::from_le_bytes(buf.try_into().unwrap()), 42);
            eprintln!("[{name}] 8-byte atomics: supported (fetch-add, compare-swap)");
        }
        Ok(Err(e)) | Err(e) => {
            eprintln!("[{name}] 8-byte atomics NOT offered by this transport: {e}")
        }
        Ok(Ok(other)) => panic!("atomic produced {other:?}"),
    }

    // Bounds are checked locally.
    assert!(matches!(
        client.put(conn, remote, REGION_BYTES as u64 - 4, vec![0; 8], 19),
        Err(OpError::OutOfBounds { .. })
    ));
    assert!(matches!(
        client.atomic(conn, remote, 3, AtomicOp::Add(1), 20),
        Err(OpError::Misaligned(3))
    ));
    assert!(
        others
            .iter()
            .all(|e| !matches!(e, Event::Disconnected { .. })),
        "{others:?}"
    );

    // Close: our side reports it; the server sees the peer go.
    client.close(conn);
    let mut events = Vec::new();
    client.poll(&mut events, 64);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::Disconnected { conn: c, cause: None } if *c == conn)));
    let report = finish(&mut client, server);
    assert_eq!(report.accepted, 1);
    assert_eq!(report.disconnects.len(), 1, "server saw the client leave");
    assert_eq!(&report.region_head[4096..4096 + 256], &data[..]);
    assert_eq!(&report.region_head[0..8], b"fenced!!");
}

#[test]
fn tcp_rpc_rendezvous_put_get_flush_atomic_close() {
    exercise("tcp", configs().remove(0).1);
}

#[test]
fn sm_rpc_rendezvous_put_get_flush_atomic_close() {
    exercise("sm", configs().remove(1).1);
}

#[test]
fn forced_rendezvous_threshold_still_delivers() {
    // A low threshold makes even 16 KiB messages rendezvous.
    let mut config = tcp();
    config
        .context
        .vars
        .push(("RNDV_THRESH".into(), "1024".into()));
    let server = spawn_server(config.clone(), Mode::Echo);
    let mut client = UcxTransport::new(&config).unwrap();
    let conn = client.connect(&server.addr).unwrap();
    for (i, len) in [0usize, 1, 1023, 1025, 16384, 100_000]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, i as u8);
        let (_, p) = call(&mut client, conn, b"x", data.clone(), 100 + i as u64);
        assert!(p == data, "len {len}");
    }
    client.close(conn);
    let report = finish(&mut client, server);
    assert_eq!(report.disconnects.len(), 1);
}

#[test]
fn recycled_buffers_carry_exactly_each_new_message() {
    // Every payload after the first few goes out of and comes back into a
    // kept buffer that last held a different, often longer, message (the
    // echo server answers with the buffer it received into): stale bytes or
    // a stale length would show. Eager and rendezvous sizes, both ways.
    for (name, config) in configs() {
        let server = spawn_server(config.clone(), Mode::Echo);
        let mut client = UcxTransport::new(&config).unwrap();
        let conn = client.connect(&server.addr).unwrap();
        let sizes = [
            200_000usize,
            65_536,
            300,
            131_072,
            8_000,
            0,
            65_536,
            200_001,
            17,
        ];
        for round in 0..3u64 {
            for (i, &len) in sizes.iter().enumerate() {
                let data = pattern(len, (round * 16 + i as u64) as u8);
                let mut payload = client.take_buffer(len);
                assert!(payload.is_empty() && payload.capacity() >= len);
                payload.extend_from_slice(&data);
                let token = 1000 + round * 100 + i as u64;
                let (_, p) = call(&mut client, conn, b"x", payload, token);
                assert!(p == data, "[{name}] round {round}, {len} B");
                client.recycle(p);
            }
        }
        client.close(conn);
        let report = finish(&mut client, server);
        assert_eq!(report.disconnects.len(), 1, "[{name}]");
    }
}

/// The server drops its transport on "crash" (its endpoints are torn down
/// without a goodbye). Returns the cause the client saw, or None if it saw
/// nothing within `bound`. When it does see it, the call in flight must have
/// failed first, exactly once.
fn crash_case(name: &str, config: UcxConfig, bound: Duration) -> Option<Option<Status>> {
    let server = spawn_server(config.clone(), Mode::Echo);
    let mut client = UcxTransport::new(&config).unwrap();
    let (conn, _) = connect(&mut client, &server);
    client.call(conn, b"crash", Vec::new(), 50).unwrap();
    let deadline = Instant::now() + bound;
    let mut events = Vec::new();
    while !events
        .iter()
        .any(|e| matches!(e, Event::Disconnected { .. }))
        && Instant::now() < deadline
    {
        client.wait(Duration::from_millis(100)).unwrap();
        client.poll(&mut events, 64);
    }
    server.join.join().unwrap();
    let cause = events.iter().find_map(|e| match e {
        Event::Disconnected { conn: c, cause } if *c == conn => Some(*cause),
        _ => None,
    });
    eprintln!("[{name}] peer crash seen as {cause:?}");
    if cause.is_some() {
        let failed: Vec<_> = events
            .iter()
            .filter(|e| matches!(e, Event::Completion(c) if c.token == 50))
            .collect();
        assert_eq!(failed.len(), 1, "[{name}] {events:?}");
        assert!(
            matches!(failed[0], Event::Completion(c) if c.result == Err(OpError::Disconnected(conn.0)))
        );
        let gone = events
            .iter()
            .position(|e| matches!(e, Event::Disconnected { .. }))
            .unwrap();
        let done = events
            .iter()
            .position(|e| matches!(e, Event::Completion(_)))
            .unwrap();
        assert!(done < gone, "completions come before Disconnected");
        assert!(matches!(
            client.call(conn, b"x", Vec::new(), 51),
            Err(OpError::Disconnected(_))
        ));
    }
    cause
}

#[test]
fn peer_crash_over_tcp_fails_calls_and_reports_disconnect() {
    let cause = crash_case("tcp", tcp(), TIMEOUT);
    assert!(
        matches!(cause, Some(Some(_))),
        "peer failure detection must report a crash over TCP"
    );
}

#[test]
fn peer_crash_over_shared_memory_is_reported_if_the_connection_manager_sees_it() {
    // Without UCP_ERR_HANDLING_MODE_PEER (unavailable on shared memory in
    // UCX 1.13) only the connection manager can notice; report what happens.
    match crash_case("sm", sm(), Duration::from_secs(3)) {
        Some(cause) => eprintln!("[sm] crash detected: {cause:?}"),
        None => eprintln!(
            "[sm] crash NOT detected within 3 s (no peer failure detection on shared memory)"
        ),
    }
}

#[test]
fn wait_blocks_on_the_event_fd_and_times_out_when_idle() {
    let config = tcp();
    let server = spawn_server(config.clone(), Mode::SlowEcho);
    let mut client = UcxTransport::new(&config).unwrap();
    let conn = client.connect(&server.addr).unwrap();
    let (_, _) = call(&mut client, conn, b"desc", Vec::new(), 1);

    // Idle: nothing in flight, so wait returns false after its timeout.
    let mut events = Vec::new();
    client.poll(&mut events, 64);
    assert!(events.is_empty());
    assert!(!client.wait(Duration::from_millis(50)).unwrap());

    // A call the server answers late: wait blocks, then returns true for it
    // (perhaps after spurious wake-ups, each of which blocked on the fd).
    client.call(conn, b"slow", b"z".to_vec(), 2).unwrap();
    let deadline = Instant::now() + TIMEOUT;
    let mut wakes = 0;
    loop {
        assert!(Instant::now() < deadline);
        if client.wait(Duration::from_secs(5)).unwrap() {
            wakes += 1;
            client.poll(&mut events, 64);
            if events
                .iter()
                .any(|e| matches!(e, Event::Completion(c) if c.token == 2))
            {
                break;
            }
        }
    }
    assert!(wakes >= 1);
    client.close(conn);
    finish(&mut client, server);
}

#[test]
fn window_is_bounded_per_connection() {
    let limits = Limits {
        window: 4,
        ..Limits::default()
    };
    let config = UcxConfig { limits, ..tcp() };
    let server = spawn_server(config.clone(), Mode::Echo);
    let mut client = UcxTransport::new(&config).unwrap();
    let conn = client.connect(&server.addr).unwrap();
    for token in 0..4 {
        client.call(conn, b"w", vec![token as u8], token).unwrap();
    }
    assert_eq!(
        client.call(conn, b"w", Vec::new(), 9),
        Err(OpError::WindowFull(4))
    );
    let mut others = Vec::new();
    for token in 0..4 {
        let c = completion(&mut client, token, &mut others);
        assert!(
            matches!(c.result, Ok(Output::Response { ref payload, .. }) if payload == &[token as u8])
        );
    }
    client.call(conn, b"w", Vec::new(), 9).unwrap();
    assert!(completion(&mut client, 9, &mut others).result.is_ok());
    assert!(matches!(
        client.call(conn, &[0u8; 200], Vec::new(), 10),
        Err(OpError::TooLarge { what: "header", .. })
    ));
    client.close(conn);
    finish(&mut client, server);
}

#[test]
fn connecting_to_nothing_fails_cleanly() {
    // Bind a port and release it, so nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut client = UcxTransport::new(&tcp()).unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    match client.connect(&addr) {
        Err(e) => eprintln!("connect refused at once: {e}"),
        Ok(conn) => {
            client.call(conn, b"x", Vec::new(), 1).unwrap();
            let c = completion(&mut client, 1, &mut Vec::new());
            assert_eq!(c.result, Err(OpError::Disconnected(conn.0)));
        }
    }
}

/// Issue 29's leak, reproduced: one long-lived client transport that
/// opens and closes connections to one server over shared memory keeps,
/// per closed connection, a socket and the server's two SysV segments
/// mapped (and, with a region attached, its mapping), though every close
/// request completed (60 connections: +70 descriptors, +194 mappings).
/// Not yet fixed: the transport's close requests all complete in UCX, and
/// UCX keeps the rest until the worker is destroyed (a closed `Client` is
/// clean). Over tcp the same loop leaks nothing, and so does shared memory
/// with peer failure detection on, but that makes UCX 1.13 choose TCP lanes.
#[test]
#[ignore = "issue 29: fails until the shared-memory close leak is fixed"]
fn closed_connections_over_shared_memory_release_their_descriptors_and_mappings() {
    let count = || std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
    let maps = || std::fs::read_to_string("/proc/self/maps").unwrap().lines().count();
    let mut client = UcxTransport::new(&sm()).unwrap();
    let server = spawn_server(sm(), Mode::Serve);
    let mut events = Vec::new();
    let mut cycle = |client: &mut UcxTransport| {
        let conn = client.connect(&server.addr).unwrap();
        let (_, desc) = call(client, conn, b"desc", Vec::new(), 1);
        client.attach(conn, &RegionDescriptor::decode(&desc).unwrap()).unwrap();
        client.close(conn);
        for _ in 0..5 {
            client.wait(Duration::from_millis(2)).unwrap();
            client.poll(&mut events, 64);
        }
    };
    // The first connections set up what a transport keeps for good.
    for _ in 0..5 {
        cycle(&mut client);
    }
    let (fds, mapped) = (count(), maps());
    for _ in 0..40 {
        cycle(&mut client);
    }
    let (more_fds, more_maps) = (count() as i64 - fds as i64, maps() as i64 - mapped as i64);
    server.stop.store(true, Ordering::Relaxed);
    finish(&mut client, server);
    assert!(more_fds <= 2 && more_maps <= 4, "40 closed connections left {more_fds} descriptors and {more_maps} mappings");
}
