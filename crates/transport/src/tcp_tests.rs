//! Tests of [`TcpTransport`]: the seam's contract as the UCX and in-process
//! transports are held to it (calls and replies of every size up to the
//! payload bound, sends and calls of one connection in one order, a peer's
//! messages before its reply, windows, a vanished peer, an unreachable
//! one, close), one-sided access refused, the event fd, and hostile
//! frames written by a plain socket: each ends its connection with a
//! counted reason and the server goes on serving. A server thread and a
//! client in the test thread on 127.0.0.1; every wait is bounded and no
//! test asserts on timing.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::tcp::{FrameError, TcpConfig, TcpStats, TcpTransport, RX_BYTES};
use crate::wire::{self, Kind, FRAMING_BYTES};
use crate::{AttachError, ConnId, Event, EventFd, Limits, OpError, Output, Reach, RegionDescriptor, RegisterError, Status, Transport};

const TIMEOUT: Duration = Duration::from_secs(20);

/// A payload for index `i`: 4 MiB (the bound) every fifth, 100 KiB (past
/// the receive buffer) every third, else 8 B; a pattern of `i`.
fn payload(i: u64) -> Vec<u8> {
    let len = match i {
        i if i % 5 == 4 => 4 << 20,
        i if i % 3 == 0 => 100 << 10,
        _ => 8,
    };
    (0..len).map(|j| (j as u64).wrapping_mul(31).wrapping_add(i) as u8).collect()
}

/// The index in a header's first 8 bytes if the payload is `payload(index)`.
fn checked_index(header: &[u8], body: &[u8]) -> u64 {
    let i = u64::from_le_bytes(header[..8].try_into().unwrap());
    assert!(body == payload(i), "payload of {i} damaged ({} bytes)", body.len());
    i
}

/// A server thread: echoes requests (header and payload), except "log"
/// (answered with the indexes of the requests and messages seen so far,
/// u64 LE each), "burst" (first sends `BURST` messages, payload(0..)),
/// "close" (replies, then closes the connection). Returns its counters.
struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    join: JoinHandle<(TcpStats, usize)>,
}

const BURST: u64 = 12;

fn spawn_server(config: TcpConfig) -> Server {
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let join = std::thread::spawn(move || {
        let mut t = TcpTransport::new(&config).unwrap();
        tx.send(t.listen("127.0.0.1:0".parse().unwrap()).unwrap()).unwrap();
        let mut log = Vec::new();
        let mut events = Vec::new();
        let mut disconnects = 0;
        let deadline = Instant::now() + 4 * TIMEOUT;
        while !stop2.load(Ordering::Relaxed) && Instant::now() < deadline {
            if t.poll(&mut events, 64) == 0 {
                t.wait(Duration::from_millis(20)).unwrap();
            }
            for e in events.drain(..) {
                match e {
                    Event::Request(r) if r.header == b"log" => {
                        let bytes: Vec<u8> = log.iter().flat_map(|i: &u64| i.to_le_bytes()).collect();
                        t.reply(r.id, b"log", bytes).unwrap();
                    }
                    Event::Request(r) if r.header == b"burst" => {
                        for i in 0..BURST {
                            t.send(r.id.conn(), &i.to_le_bytes(), payload(i)).unwrap();
                        }
                        t.reply(r.id, b"done", Vec::new()).unwrap();
                    }
                    Event::Request(r) if r.header == b"close" => {
                        t.reply(r.id, b"bye", payload(4)).unwrap();
                        t.close(r.id.conn());
                    }
                    Event::Request(r) => {
                        if r.header.len() == 8 {
                            log.push(checked_index(&r.header, &r.payload));
                        }
                        // The connection may have gone meanwhile.
                        let _ = t.reply(r.id, &r.header, r.payload);
                    }
                    Event::Message { header, payload: body, .. } => {
                        log.push(checked_index(&header, &body));
                        t.recycle_payload(body);
                    }
                    Event::Disconnected { .. } => disconnects += 1,
                    _ => {}
                }
            }
        }
        (t.stats().clone(), disconnects)
    });
    let addr = rx.recv_timeout(TIMEOUT).expect("server came up");
    Server { addr, stop, join }
}

impl Server {
    fn finish(self) -> (TcpStats, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.join.join().unwrap()
    }
}

/// Polls (and waits) until `done` says the events seen so far suffice.
fn poll_until(t: &mut TcpTransport, seen: &mut Vec<Event>, mut done: impl FnMut(&[Event]) -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !done(seen) {
        assert!(Instant::now() < deadline, "not done in {TIMEOUT:?}: {seen:?}");
        if t.poll(seen, 64) == 0 {
            t.wait(Duration::from_millis(50)).unwrap();
        }
    }
}

fn completed(seen: &[Event], token: u64) -> bool {
    seen.iter().any(|e| matches!(e, Event::Completion(c) if c.token == token))
}

fn response(seen: &[Event], token: u64) -> (Vec<u8>, Vec<u8>) {
    seen.iter()
        .find_map(|e| match e {
            Event::Completion(c) if c.token == token => match &c.result {
                Ok(Output::Response { header, payload }) => Some((header.clone(), payload.clone())),
                other => panic!("call {token}: {other:?}"),
            },
            _ => None,
        })
        .expect("completed")
}

/// Starts `op` until the window lets it; what was polled meanwhile goes to `seen`.
fn start(t: &mut TcpTransport, seen: &mut Vec<Event>, mut op: impl FnMut(&mut TcpTransport) -> Result<(), OpError>) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match op(t) {
            Ok(()) => return,
            Err(OpError::WindowFull(_)) => {
                assert!(Instant::now() < deadline, "the window never opened");
                if t.poll(seen, 64) == 0 {
                    t.wait(Duration::from_millis(20)).unwrap();
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
}

fn client() -> TcpTransport {
    TcpTransport::new(&TcpConfig::default()).unwrap()
}

#[test]
fn calls_of_every_size_are_answered_and_one_sided_access_is_refused() {
    let server = spawn_server(TcpConfig::default());
    let mut t = client();
    let conn = t.connect(&server.addr).unwrap();
    let mut seen = Vec::new();
    for (token, i) in [0u64, 1, 3, 4, 9].into_iter().enumerate() {
        let token = token as u64;
        t.call(conn, &i.to_le_bytes(), payload(i), token).unwrap();
        poll_until(&mut t, &mut seen, |s| completed(s, token));
        let (header, body) = response(&seen, token);
        assert_eq!(checked_index(&header, &body), i);
    }
    let empty = t.take_buffer(0);
    t.call(conn, b"", empty, 50).unwrap();
    poll_until(&mut t, &mut seen, |s| completed(s, 50));
    assert_eq!(response(&seen, 50), (Vec::new(), Vec::new()));
    let too_big = vec![0u8; (4 << 20) + 1];
    assert!(matches!(t.call(conn, b"x", too_big, 51), Err(OpError::TooLarge { what: "payload", .. })));
    assert!(matches!(t.send(conn, &[0u8; 129], Vec::new()), Err(OpError::TooLarge { what: "header", .. })));
    assert_eq!(t.reach(), Reach::Off);
    let mut memory = vec![0u8; 64];
    // SAFETY: refused before anything is registered.
    assert!(matches!(unsafe { t.register(memory.as_mut_ptr(), 64) }, Err(RegisterError::OneSidedOff)));
    let desc = RegionDescriptor { addr: 1, len: 1, rkey: vec![1] };
    assert!(matches!(t.attach(conn, &desc), Err(AttachError::OneSidedOff)));
    let region = crate::RemoteRegionId(0);
    assert!(matches!(t.put(conn, region, 0, vec![1], 60), Err(OpError::Unsupported(_))));
    assert!(matches!(t.get(conn, region, 0, vec![0], 61), Err(OpError::Unsupported(_))));
    assert!(matches!(t.atomic(conn, region, 0, crate::AtomicOp::Add(1), 62), Err(OpError::Unsupported(_))));
    assert!(matches!(t.flush(conn, 63), Err(OpError::Unsupported(_))));
    assert!(t.fence().is_err());
    let tokens: Vec<u64> = seen.iter().filter_map(|e| if let Event::Completion(c) = e { Some(c.token) } else { None }).collect();
    assert_eq!(tokens, [0, 1, 2, 3, 4, 50], "each token once, refused ops none");
    t.close(conn);
    let (stats, _) = server.finish();
    assert_eq!(stats.bad_frames, [0; 8]);
}

/// `count` operations, every fourth a call and the rest sends, sizes mixed
/// (4 MiB and 100 KiB among 8 B): the server logs them in that order.
fn sends_and_calls_keep_one_order(config: TcpConfig, count: u64) {
    let server = spawn_server(config);
    let mut t = TcpTransport::new(&config).unwrap();
    let conn = t.connect(&server.addr).unwrap();
    let mut seen = Vec::new();
    for i in 0..count {
        if i % 4 == 3 {
            start(&mut t, &mut seen, |t| t.call(conn, &i.to_le_bytes(), payload(i), i));
        } else {
            start(&mut t, &mut seen, |t| t.send(conn, &i.to_le_bytes(), payload(i)));
        }
    }
    start(&mut t, &mut seen, |t| t.call(conn, b"log", Vec::new(), u64::MAX));
    poll_until(&mut t, &mut seen, |s| completed(s, u64::MAX));
    let (_, log) = response(&seen, u64::MAX);
    let log: Vec<u64> = log.chunks(8).map(|b| u64::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(log, (0..count).collect::<Vec<_>>());
    t.close(conn);
    server.finish();
}

#[test]
fn sends_and_calls_of_a_connection_arrive_in_send_order() {
    sends_and_calls_keep_one_order(TcpConfig::default(), 120);
    let small = TcpConfig { limits: Limits { window: 2, ..Limits::default() }, ..TcpConfig::default() };
    sends_and_calls_keep_one_order(small, 40);
}

#[test]
fn a_peers_messages_arrive_in_order_before_its_reply() {
    let server = spawn_server(TcpConfig::default());
    let mut t = client();
    let conn = t.connect(&server.addr).unwrap();
    for round in 0..3 {
        let mut seen = Vec::new();
        t.call(conn, b"burst", Vec::new(), round).unwrap();
        poll_until(&mut t, &mut seen, |s| completed(s, round));
        let order: Vec<u64> = seen
            .into_iter()
            .filter_map(|e| match e {
                Event::Message { conn: on, header, payload } => {
                    assert_eq!(on, conn);
                    Some(checked_index(&header, &payload))
                }
                Event::Completion(c) => {
                    assert!(c.result.is_ok(), "{c:?}");
                    Some(u64::MAX)
                }
                _ => None,
            })
            .collect();
        let mut expected: Vec<u64> = (0..BURST).collect();
        expected.push(u64::MAX);
        assert_eq!(order, expected, "round {round}: messages, then the reply");
    }
    t.close(conn);
    server.finish();
}

/// A send holds its slot until its frame is written to the socket, so
/// `window` sends queued in one turn fill the window, for sends and calls
/// alike; once written, the slots come back.
#[test]
fn unsettled_sends_fill_the_window_until_written() {
    let window = 4;
    let config = TcpConfig { limits: Limits { window, ..Limits::default() }, ..TcpConfig::default() };
    let server = spawn_server(config);
    let mut t = TcpTransport::new(&config).unwrap();
    let conn = t.connect(&server.addr).unwrap();
    for i in [1u64, 2, 5, 7] {
        t.send(conn, &i.to_le_bytes(), payload(i)).unwrap();
    }
    assert_eq!(t.send(conn, &8u64.to_le_bytes(), payload(8)), Err(OpError::WindowFull(window)));
    assert_eq!(t.call(conn, b"log", Vec::new(), 1), Err(OpError::WindowFull(window)));
    let mut seen = Vec::new();
    start(&mut t, &mut seen, |t| t.send(conn, &8u64.to_le_bytes(), payload(8)));
    start(&mut t, &mut seen, |t| t.call(conn, b"log", Vec::new(), 1));
    poll_until(&mut t, &mut seen, |s| completed(s, 1));
    let (_, log) = response(&seen, 1);
    let log: Vec<u64> = log.chunks(8).map(|b| u64::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(log, [1, 2, 5, 7, 8]);
    t.close(conn);
    server.finish();
}

#[test]
fn calls_are_bounded_by_the_window_per_connection() {
    let config = TcpConfig { limits: Limits { window: 3, ..Limits::default() }, ..TcpConfig::default() };
    let server = spawn_server(config);
    let mut t = TcpTransport::new(&config).unwrap();
    let (a, b) = (t.connect(&server.addr).unwrap(), t.connect(&server.addr).unwrap());
    for token in 0..3 {
        t.call(a, &[], Vec::new(), token).unwrap();
    }
    assert_eq!(t.call(a, &[], Vec::new(), 9), Err(OpError::WindowFull(3)));
    t.call(b, &[], Vec::new(), 10).unwrap();
    let mut seen = Vec::new();
    poll_until(&mut t, &mut seen, |s| (0..3).chain([10]).all(|k| completed(s, k)));
    t.call(a, &[], Vec::new(), 9).unwrap();
    poll_until(&mut t, &mut seen, |s| completed(s, 9));
    server.finish();
}

/// The server drops its transport: the call in flight fails with
/// `Disconnected` exactly once, before the one `Disconnected` event, and
/// later operations are refused.
#[test]
fn a_vanished_peer_fails_calls_and_is_reported_once() {
    let server = spawn_server(TcpConfig::default());
    let mut t = client();
    let conn = t.connect(&server.addr).unwrap();
    let mut seen = Vec::new();
    t.call(conn, b"log", Vec::new(), 1).unwrap();
    poll_until(&mut t, &mut seen, |s| completed(s, 1));
    server.finish(); // drops the server's transport
    let _ = t.call(conn, &[], Vec::new(), 2);
    poll_until(&mut t, &mut seen, |s| s.iter().any(|e| matches!(e, Event::Disconnected { .. })));
    let ends: Vec<Option<Status>> = seen.iter().filter_map(|e| if let Event::Disconnected { cause, .. } = e { Some(*cause) } else { None }).collect();
    assert_eq!(ends.len(), 1);
    assert!(ends[0].is_some(), "a failure, not a local close");
    let failed: Vec<usize> = seen.iter().enumerate().filter(|(_, e)| matches!(e, Event::Completion(c) if c.token == 2)).map(|(i, _)| i).collect();
    if let [at] = failed[..] {
        let end = seen.iter().position(|e| matches!(e, Event::Disconnected { .. })).unwrap();
        assert!(at < end, "the call fails before the disconnect");
        assert!(matches!(&seen[at], Event::Completion(c) if c.result == Err(OpError::Disconnected(conn.0))));
    }
    assert_eq!(t.send(conn, &[], Vec::new()), Err(OpError::Disconnected(conn.0)));
}

#[test]
fn connecting_to_nothing_fails_the_calls_then_the_connection() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = unused.local_addr().unwrap();
    drop(unused);
    let mut t = client();
    let conn = t.connect(&addr).unwrap();
    t.call(conn, b"x", vec![1, 2, 3], 7).unwrap();
    t.send(conn, b"y", vec![4]).unwrap();
    let mut seen = Vec::new();
    poll_until(&mut t, &mut seen, |s| s.iter().any(|e| matches!(e, Event::Disconnected { .. })));
    assert!(matches!(&seen[0], Event::Completion(c) if c.token == 7 && c.result == Err(OpError::Disconnected(conn.0))), "{seen:?}");
    assert!(matches!(&seen[1], Event::Disconnected { conn: c, cause: Some(_) } if *c == conn), "{seen:?}");
    assert_eq!(seen.len(), 2);
    assert_eq!(t.stats().connects_failed, 1);
    // The slot is reused once the end was polled.
    let again = t.connect(&addr).unwrap();
    assert_eq!(again, conn);
}

/// A reply queued before `close` still reaches the peer, then the peer
/// sees the connection end.
#[test]
fn a_close_sends_what_was_queued_first() {
    let server = spawn_server(TcpConfig::default());
    let mut t = client();
    let conn = t.connect(&server.addr).unwrap();
    let mut seen = Vec::new();
    t.call(conn, b"close", Vec::new(), 3).unwrap();
    poll_until(&mut t, &mut seen, |s| s.iter().any(|e| matches!(e, Event::Disconnected { .. })));
    let (header, body) = response(&seen, 3);
    assert_eq!(header, b"bye");
    assert!(body == payload(4), "the 4 MiB reply whole");
    let (stats, _) = server.finish();
    assert_eq!(stats.bad_frames, [0; 8]);
}

/// Arms `t` for an outside wait, polling into `seen` what is ready first;
/// the fd to wait on.
fn armed(t: &mut TcpTransport, seen: &mut Vec<Event>) -> std::os::fd::RawFd {
    loop {
        match t.event_fd() {
            EventFd::Armed(fd) => return fd,
            EventFd::Ready => {
                t.poll(seen, 64);
            }
            EventFd::Unsupported => panic!("a tcp transport has an event fd"),
        }
    }
}

#[test]
fn wait_times_out_when_idle_and_the_event_fd_wakes_a_poller() {
    let server = spawn_server(TcpConfig::default());
    let mut t = client();
    assert!(!t.wait(Duration::from_millis(30)).unwrap(), "nothing to do");
    let conn = t.connect(&server.addr).unwrap();
    let mut seen = Vec::new();
    t.call(conn, b"warm", Vec::new(), 1).unwrap();
    poll_until(&mut t, &mut seen, |s| completed(s, 1));
    // Idle: armed, and the fd is not readable.
    let fd = match t.event_fd() {
        EventFd::Armed(fd) => fd,
        other => panic!("{other:?}"),
    };
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd we own.
    assert_eq!(unsafe { libc::poll(&mut pfd, 1, 0) }, 0, "idle: not readable");
    // A call goes out with the next event_fd; its answer makes the fd readable.
    t.call(conn, b"echo", vec![9; 10], 2).unwrap();
    let fd = armed(&mut t, &mut seen);
    if !completed(&seen, 2) {
        // SAFETY: as above; bounded by TIMEOUT.
        let n = unsafe { libc::poll(&mut pfd, 1, TIMEOUT.as_millis() as i32) };
        assert_eq!(n, 1, "the answer wakes the poller (fd {fd})");
        poll_until(&mut t, &mut seen, |s| completed(s, 2));
    }
    assert_eq!(response(&seen, 2).1, vec![9; 10]);
    // Events queued: Ready, not armed.
    t.call(conn, b"echo", Vec::new(), 3).unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while t.event_fd() != EventFd::Ready {
        assert!(Instant::now() < deadline);
        t.wait(Duration::from_millis(50)).unwrap();
    }
    server.finish();
}

/// Between a wake-up (any `poll`) and the next `event_fd`, the owner is
/// running: completions of that time (its own sends, answers) do not make
/// the fd readable, so a loop woken by something else does not find its
/// poll on the fd fired and turn once for nothing; the next `event_fd`
/// reports them.
#[test]
fn completions_while_the_owner_runs_do_not_signal_the_event_fd() {
    let server = spawn_server(TcpConfig::default());
    let mut t = client();
    let conn = t.connect(&server.addr).unwrap();
    let mut seen = Vec::new();
    t.call(conn, b"warm", Vec::new(), 1).unwrap();
    poll_until(&mut t, &mut seen, |s| completed(s, 1));
    let fd = armed(&mut t, &mut seen);
    // Woken by something else: the owner polls, then sends (the request's
    // send completes inline), and its answer comes back meanwhile.
    t.poll(&mut seen, 64);
    t.call(conn, b"echo", vec![5; 10], 2).unwrap();
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd we own.
    assert_eq!(unsafe { libc::poll(&mut pfd, 1, 200) }, 0, "completions while the owner runs left the fd quiet");
    let deadline = Instant::now() + TIMEOUT;
    while !completed(&seen, 2) {
        assert!(Instant::now() < deadline, "the answer is reported");
        if t.event_fd() == EventFd::Ready {
            t.poll(&mut seen, 64);
        } else {
            // SAFETY: as above; bounded by TIMEOUT.
            unsafe { libc::poll(&mut pfd, 1, TIMEOUT.as_millis() as i32) };
            t.poll(&mut seen, 64);
        }
    }
    assert_eq!(response(&seen, 2).1, vec![5; 10]);
    server.finish();
}

/// Writes `frames` on a plain socket to a fresh transport, then checks
/// that the transport ended that connection for `reason` (counted once)
/// and still answers a good client.
/// `frames` end their connection for `reason`, on a transport receiving
/// into its own memory and on one receiving into lent memory.
fn hostile(frames: &[Vec<u8>], reason: FrameError) {
    hostile_with(frames, reason, false);
    hostile_with(frames, reason, true);
}

fn hostile_with(frames: &[Vec<u8>], reason: FrameError, lend: bool) {
    let areas = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let mut server = TcpTransport::new(&TcpConfig::default()).unwrap();
    if lend {
        server.lend_rx(Box::new(TestArena { size: crate::tcp::LENT_MIN_BYTES, budget: 64, areas: areas.clone() }));
    }
    let addr = server.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut raw = TcpStream::connect(addr).unwrap();
    for f in frames {
        raw.write_all(f).unwrap();
    }
    let mut seen = Vec::new();
    poll_until(&mut server, &mut seen, |s| s.iter().any(|e| matches!(e, Event::Disconnected { .. })));
    assert_eq!(server.stats().bad_frames(reason), 1, "{reason:?}: {:?}", server.stats());
    assert_eq!(server.stats().bad_frames.iter().sum::<u64>(), 1);
    // The peer sees its connection end.
    raw.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut rest = Vec::new();
    let _ = raw.read_to_end(&mut rest);
    // A good client is still served, by the same transport (it may reuse
    // the ended connection's id: what was polled for that one is dropped).
    seen.clear();
    let mut good = client();
    let conn = good.connect(&addr).unwrap();
    good.call(conn, b"hi", vec![1], 1).unwrap();
    let deadline = Instant::now() + TIMEOUT;
    let mut got = Vec::new();
    while !completed(&got, 1) {
        assert!(Instant::now() < deadline);
        for t in [&mut good, &mut server] {
            t.poll(&mut seen, 64);
        }
        for e in seen.drain(..) {
            match e {
                Event::Request(r) => server.reply(r.id, b"ok", Vec::new()).unwrap(),
                other => got.push(other),
            }
        }
        good.wait(Duration::from_millis(5)).unwrap();
    }
    assert_eq!(response(&got, 1).0, b"ok");
    assert!(!lend || !areas.borrow().is_empty(), "the hostile connection received into lent memory");
    drop(server);
}

fn frame(kind: Kind, seq: u32, call: u64, header: &[u8], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    wire::encode_header(&mut out, kind, seq, call, header, body.len());
    out.extend_from_slice(body);
    out
}

#[test]
fn a_bad_frame_ends_only_its_connection_with_a_counted_reason() {
    let good = frame(Kind::Request, 0, 1 << 16, b"h", b"body");
    let with = |at: usize, byte: u8| {
        let mut f = good.clone();
        f[at] = byte;
        vec![f]
    };
    hostile(&with(0, 0x42), FrameError::Magic);
    hostile(&with(1, 9), FrameError::Version);
    hostile(&with(2, 7), FrameError::Kind);
    hostile(&with(3, 1), FrameError::Reserved);
    hostile(&with(7, 1), FrameError::Reserved);
    // A message with a call id.
    let mut msg = frame(Kind::Message, 0, 0, b"", b"");
    msg[16] = 1;
    hostile(&[msg], FrameError::Reserved);
    // Lengths past the bounds: nothing is allocated or awaited for them.
    let mut huge = good.clone();
    huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    hostile(&[huge], FrameError::TooLarge);
    let mut long_header = good.clone();
    long_header[4..6].copy_from_slice(&129u16.to_le_bytes());
    hostile(&[long_header], FrameError::TooLarge);
    // Out of order, a busy request slot, a slot past the window, and a
    // response to nothing.
    hostile(&[frame(Kind::Request, 1, 1 << 16, b"", b"")], FrameError::Order);
    hostile(&[good.clone(), frame(Kind::Request, 1, 2 << 16, b"", b"")], FrameError::Window);
    hostile(&[frame(Kind::Request, 0, 1 << 16 | 300, b"", b"")], FrameError::Window);
    hostile(&[frame(Kind::Response, 0, 1 << 16, b"", b"")], FrameError::UnknownResponse);
}

#[test]
fn frames_split_anywhere_and_a_truncated_one_are_handled() {
    let mut server = TcpTransport::new(&TcpConfig::default()).unwrap();
    let addr = server.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut raw = TcpStream::connect(addr).unwrap();
    raw.set_nodelay(true).unwrap();
    let big: Vec<u8> = (0..RX_BYTES * 3 + 5).map(|i| i as u8).collect();
    let mut bytes = frame(Kind::Message, 0, 0, b"one", b"1");
    bytes.extend(frame(Kind::Message, 1, 0, &[7; 100], &big));
    bytes.extend(frame(Kind::Message, 2, 0, b"", b""));
    // Byte by byte for the first frames, then in odd chunks.
    let mut seen = Vec::new();
    for (i, chunk) in bytes.chunks(1).take(FRAMING_BYTES + 10).enumerate() {
        raw.write_all(chunk).unwrap();
        if i % 7 == 0 {
            server.poll(&mut seen, 64);
        }
    }
    for chunk in bytes[FRAMING_BYTES + 10..].chunks(9_999) {
        raw.write_all(chunk).unwrap();
        server.poll(&mut seen, 64);
    }
    poll_until(&mut server, &mut seen, |s| s.iter().filter(|e| matches!(e, Event::Message { .. })).count() == 3);
    let bodies: Vec<&[u8]> = seen.iter().filter_map(|e| if let Event::Message { payload, .. } = e { Some(&payload[..]) } else { None }).collect();
    assert_eq!(bodies[0], b"1");
    assert!(*bodies[1] == big);
    assert!(bodies[2].is_empty());
    // Half a frame, then the peer goes: the connection ends, no frame error.
    raw.write_all(&frame(Kind::Message, 3, 0, b"", &[1; 50])[..40]).unwrap();
    drop(raw);
    poll_until(&mut server, &mut seen, |s| s.iter().any(|e| matches!(e, Event::Disconnected { .. })));
    assert_eq!(server.stats().bad_frames, [0; 8]);
    let accepted: Vec<ConnId> = seen.iter().filter_map(|e| if let Event::Accepted(c) = e { Some(*c) } else { None }).collect();
    assert_eq!(accepted.len(), 1);
}

/// A receiver that does not take its events holds at most
/// `MAX_QUEUED_EVENTS` and a receive's worth: past that its receives wait
/// (the kernel and TCP hold the rest), and every message still arrives, in
/// order, once it polls.
#[test]
fn a_slow_poller_pauses_receiving_and_loses_nothing() {
    const COUNT: u64 = 6_000;
    let mut receiver = client();
    let addr = receiver.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let sender = std::thread::spawn(move || {
        let mut t = client();
        let conn = t.connect(&addr).unwrap();
        let mut seen = Vec::new();
        for i in 0..COUNT {
            start(&mut t, &mut seen, |t| t.send(conn, &i.to_le_bytes(), Vec::new()));
        }
        // Until the receiver has them all (it answers the final call).
        t.call(conn, b"done?", Vec::new(), 1).unwrap();
        poll_until(&mut t, &mut seen, |s| completed(s, 1));
    });
    // Receive without taking any event (poll for none) until receiving
    // pauses: 6,000 messages are more than the queue holds.
    let mut seen = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while receiver.stats().paused_recvs == 0 {
        assert!(Instant::now() < deadline, "receiving never paused: {:?}", receiver.stats());
        assert_eq!(receiver.poll(&mut seen, 0), 0);
        receiver.wait(Duration::from_millis(5)).unwrap();
    }
    let queued = receiver.events.len();
    assert!(queued >= crate::tcp::MAX_QUEUED_EVENTS, "paused at {queued}");
    // Paused: more polls without taking events receive nothing more.
    for _ in 0..5 {
        receiver.poll(&mut seen, 0);
        receiver.wait(Duration::from_millis(5)).unwrap();
    }
    assert_eq!(receiver.events.len(), queued, "nothing received while paused");
    let (mut got, mut most_queued) = (Vec::new(), 0);
    let deadline = Instant::now() + TIMEOUT;
    while got.len() < COUNT as usize {
        assert!(Instant::now() < deadline, "{} of {COUNT} arrived", got.len());
        if receiver.poll(&mut seen, 1) == 0 {
            receiver.wait(Duration::from_millis(20)).unwrap();
        }
        most_queued = most_queued.max(receiver.events.len());
        for e in seen.drain(..) {
            if let Event::Message { header, .. } = e {
                got.push(u64::from_le_bytes(header[..8].try_into().unwrap()));
            }
        }
    }
    assert_eq!(got, (0..COUNT).collect::<Vec<_>>());
    assert!(receiver.stats().paused_recvs > 0, "{:?}", receiver.stats());
    assert!(most_queued <= crate::tcp::MAX_QUEUED_EVENTS + RX_BYTES / FRAMING_BYTES, "{most_queued} queued");
    poll_until(&mut receiver, &mut seen, |s| s.iter().any(|e| matches!(e, Event::Request(_))));
    for e in seen.drain(..) {
        if let Event::Request(r) = e {
            receiver.reply(r.id, b"yes", Vec::new()).unwrap();
        }
    }
    let deadline = Instant::now() + TIMEOUT;
    while !sender.is_finished() {
        assert!(Instant::now() < deadline);
        receiver.poll(&mut seen, 64);
        receiver.wait(Duration::from_millis(10)).unwrap();
    }
    sender.join().unwrap();
}

/// A loop that blocks only on the event fd (as netio's does) never sleeps
/// through work: every armed fd turns readable while calls are in flight,
/// through many receives (100 KiB payloads, past the receive buffer) and
/// sends gathered behind others.
#[test]
fn a_loop_driven_by_the_event_fd_alone_completes_every_call() {
    let server = spawn_server(TcpConfig::default());
    let mut t = client();
    let conn = t.connect(&server.addr).unwrap();
    let mut seen = Vec::new();
    let (mut started, mut done) = (0u64, 0u64);
    while done < 200 {
        while started < 200 && started < done + 8 {
            let i = started * 3; // payload(i): 100 KiB
            t.call(conn, &i.to_le_bytes(), payload(i), started).unwrap();
            started += 1;
        }
        match t.event_fd() {
            EventFd::Ready => {}
            EventFd::Armed(fd) => {
                let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                // SAFETY: one pollfd we own.
                let n = unsafe { libc::poll(&mut pfd, 1, TIMEOUT.as_millis() as i32) };
                assert_eq!(n, 1, "slept through work: {done} of 200 calls done, {started} started");
            }
            EventFd::Unsupported => unreachable!(),
        }
        t.poll(&mut seen, 64);
        for e in seen.drain(..) {
            if let Event::Completion(c) = e {
                let Ok(Output::Response { header, payload: body }) = c.result else { panic!("{c:?}") };
                assert_eq!(checked_index(&header, &body), c.token * 3);
                done += 1;
            }
        }
    }
    server.finish();
}

/// An arena over heap memory for the tests: hands out `budget` areas of
/// `size` bytes (or the size asked, if larger), then none; keeps every
/// area's memory and hold so the test can see which are still in use.
struct TestArena {
    size: usize,
    budget: usize,
    areas: std::rc::Rc<std::cell::RefCell<Vec<(Box<[u8]>, Arc<crate::AreaHold>)>>>,
}

impl crate::RxArena for TestArena {
    fn area(&mut self, min: usize) -> Option<crate::RxArea> {
        if self.budget == 0 {
            return None;
        }
        self.budget -= 1;
        let mut mem = vec![0u8; self.size.max(min)].into_boxed_slice();
        let hold = Arc::new(crate::AreaHold::default());
        let ptr = std::ptr::NonNull::new(mem.as_mut_ptr()).unwrap();
        // SAFETY: the boxed memory is kept in `areas` (never written by the
        // test) until the test ends, after the transport and its payloads.
        let area = unsafe { crate::RxArea::new(ptr, mem.len(), hold.clone()) };
        self.areas.borrow_mut().push((mem, hold));
        Some(area)
    }
}

/// Messages of every size arrive whole into lent memory, across the ends
/// of areas (moved to the next, counted), larger than an area, and once
/// the arena has no more (back in the transport's own buffer); requests
/// still arrive owned; a dropped payload gives its area back.
#[test]
fn messages_arrive_in_lent_memory_across_areas_and_without_it() {
    let areas = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let mut server = TcpTransport::new(&TcpConfig::default()).unwrap();
    assert!(server.lend_rx(Box::new(TestArena { size: crate::tcp::LENT_MIN_BYTES, budget: 12, areas: areas.clone() })));
    let addr = server.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut raw = TcpStream::connect(addr).unwrap();
    raw.set_nodelay(true).unwrap();
    let body = |i: usize| -> Vec<u8> {
        let len = match i % 7 {
            0 => 300 << 10,
            1 | 4 => 70_001,
            _ => 40 + i * 13,
        };
        (0..len).map(|j| (j * 7 + i) as u8).collect()
    };
    const N: usize = 160;
    let mut bytes = Vec::new();
    for i in 0..N {
        bytes.extend(frame(Kind::Message, i as u32, 0, &(i as u64).to_le_bytes(), &body(i)));
    }
    bytes.extend(frame(Kind::Request, N as u32, 1 << 16, b"req", b"owned"));
    let mut seen = Vec::new();
    let mut lent = 0;
    let mut got = 0;
    let check = |seen: &mut Vec<Event>, lent: &mut usize, got: &mut usize| {
        for e in seen.drain(..) {
            match e {
                Event::Message { header, payload, .. } => {
                    let i = u64::from_le_bytes(header[..8].try_into().unwrap()) as usize;
                    assert_eq!(i, *got, "in order");
                    assert!(payload[..] == body(i)[..], "message {i} damaged ({} bytes)", payload.len());
                    *lent += usize::from(payload.is_lent());
                    *got += 1;
                }
                Event::Request(r) => {
                    assert_eq!(r.payload, b"owned");
                    *got += 1;
                }
                Event::Accepted(_) => {}
                e => panic!("{e:?}"),
            }
        }
    };
    for chunk in bytes.chunks(50_001) {
        raw.write_all(chunk).unwrap();
        server.poll(&mut seen, 64);
        check(&mut seen, &mut lent, &mut got);
    }
    let deadline = Instant::now() + TIMEOUT;
    while got < N + 1 {
        assert!(Instant::now() < deadline, "{got} of {} arrived", N + 1);
        if server.poll(&mut seen, 64) == 0 {
            server.wait(Duration::from_millis(50)).unwrap();
        }
        check(&mut seen, &mut lent, &mut got);
    }
    let stats = server.stats().clone();
    assert!(lent > 20 && lent < N, "{lent} of {N} lent: some in areas, the rest after the arena ran dry");
    assert_eq!(stats.lent_payloads as usize, lent);
    assert!(stats.carried_bytes > 0 && stats.carried_bytes < stats.bytes_received / 4, "{stats:?}");
    assert_eq!(areas.borrow().len(), 12, "the arena's budget was used");
    // Every payload was dropped: only the area the connection still
    // receives into (none: the arena ran dry) is in use.
    assert!(areas.borrow().iter().all(|(_, hold)| !crate::RxArea::in_use(hold)));
    drop(server);
}
