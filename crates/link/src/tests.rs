//! [`LinkTransport`] between in-process nodes, on a clock the test moves.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use transport::{ConnId, Event, InProcNetwork, InProcTransport, Limits, OpError, Output, Transport};

use crate::handshake::{Identity, Role, LINK_MAGIC};
use crate::link::{Keepalive, LinkConfig, LinkTransport};
use crate::secret::Secret;

type Clock = Rc<Cell<Duration>>;

fn node(net: &InProcNetwork, secret: u8, id: u64, clock: &Clock, keepalive: Option<Keepalive>) -> LinkTransport<InProcTransport> {
    let mut config = LinkConfig::new(Identity { role: Role::Replica, id }, &[Role::Replica, Role::Client], Role::Replica);
    config.handshake_timeout = Duration::from_millis(100);
    config.keepalive = keepalive;
    let c = clock.clone();
    LinkTransport::new(net.node(), Secret::from_bytes([secret; 32]), config, Box::new(move || c.get()), Box::new(Xoshiro256PlusPlus::seed_from_u64(id)))
}

fn drain<T: Transport>(t: &mut T) -> Vec<Event> {
    let mut events = Vec::new();
    for _ in 0..4 {
        t.poll(&mut events, 64);
    }
    events
}

/// Polls both sides a few rounds; what each surfaced.
fn exchange<A: Transport, B: Transport>(a: &mut A, b: &mut B) -> (Vec<Event>, Vec<Event>) {
    let (mut ea, mut eb) = (Vec::new(), Vec::new());
    for _ in 0..8 {
        eb.extend(drain(b));
        ea.extend(drain(a));
    }
    (ea, eb)
}

fn answer_requests<T: Transport>(t: &mut T, events: &[Event]) -> usize {
    let ids: Vec<_> = events.iter().filter_map(|e| if let Event::Request(r) = e { Some(r.id) } else { None }).collect();
    for id in &ids {
        t.reply(*id, b"OK", b"answer".to_vec()).unwrap();
    }
    ids.len()
}

#[test]
fn a_link_with_the_secret_carries_calls_and_messages_after_the_handshake() {
    let net = InProcNetwork::new(Limits::default());
    let clock = Clock::default();
    let (mut a, mut b) = (node(&net, 7, 1, &clock, None), node(&net, 7, 2, &clock, None));
    let conn = a.connect(&b.inner().id()).unwrap();
    // Queued until the acceptor has proved the secret.
    a.send(conn, b"MSG1", b"one-way".to_vec()).unwrap();
    a.call(conn, b"REQ1", b"call".to_vec(), 5).unwrap();
    let (_, eb) = exchange(&mut a, &mut b);
    assert!(matches!(eb[0], Event::Accepted(_)), "the service hears of the connection first: {eb:?}");
    assert!(matches!(&eb[1], Event::Message { header, .. } if header == b"MSG1"), "{eb:?}");
    assert!(matches!(&eb[2], Event::Request(r) if r.header == b"REQ1"), "{eb:?}");
    assert_eq!(answer_requests(&mut b, &eb), 1);
    let (ea, _) = exchange(&mut a, &mut b);
    assert_eq!(ea.len(), 1, "only the service's completion: {ea:?}");
    assert!(matches!(&ea[0], Event::Completion(c) if c.token == 5 && matches!(&c.result, Ok(Output::Response { header, .. }) if header == b"OK")));
    assert_eq!((a.stats().opened_out, b.stats().opened_in, b.stats().refused_in), (1, 1, 0));
}

#[test]
fn a_dialer_with_another_secret_is_refused_and_its_calls_fail() {
    let net = InProcNetwork::new(Limits::default());
    let clock = Clock::default();
    let (mut a, mut b) = (node(&net, 8, 1, &clock, None), node(&net, 7, 2, &clock, None));
    let conn = a.connect(&b.inner().id()).unwrap();
    a.call(conn, b"REQ1", b"call".to_vec(), 5).unwrap();
    let (ea, eb) = exchange(&mut a, &mut b);
    assert!(eb.is_empty(), "the acceptor's service sees nothing: {eb:?}");
    assert!(matches!(&ea[0], Event::Completion(c) if c.token == 5 && matches!(c.result, Err(OpError::Disconnected(_)))), "{ea:?}");
    assert!(matches!(ea[1], Event::Disconnected { conn: c, .. } if c == conn), "{ea:?}");
    // The dialer checks the acceptor's MAC first and refuses it.
    assert_eq!(a.stats().refused_out, 1);
    assert!(a.stats().last_refusal.as_deref().unwrap_or("").contains("wrong proof"), "{:?}", a.stats().last_refusal);
}

/// A raw transport (no link) that speaks first: whatever it sends is
/// refused and never reaches the service.
#[test]
fn anything_before_the_handshake_closes_the_connection_unseen() {
    for kind in ["message", "request", "bad hello", "nothing"] {
        let net = InProcNetwork::new(Limits::default());
        let clock = Clock::default();
        let mut b = node(&net, 7, 2, &clock, None);
        let mut raw = net.node();
        let conn = raw.connect(&b.inner().id()).unwrap();
        match kind {
            "message" => raw.send(conn, b"RFT1", vec![8, 1, 16, 2]).unwrap(),
            "request" => raw.call(conn, b"SMR1", vec![0; 40], 1).unwrap(),
            "bad hello" => raw.call(conn, &LINK_MAGIC, vec![1, 1, 1], 1).unwrap(),
            _ => {}
        }
        let (mut gone, eb) = exchange(&mut raw, &mut b);
        if kind == "nothing" {
            assert_eq!(b.stats().refused_in, 0);
            clock.set(clock.get() + Duration::from_millis(101));
            assert!(drain(&mut b).is_empty());
        }
        assert!(eb.is_empty(), "{kind}: the service saw {eb:?}");
        assert_eq!(b.stats().refused_in, 1, "{kind}");
        gone.extend(drain(&mut raw));
        assert!(gone.iter().any(|e| matches!(e, Event::Disconnected { .. })), "{kind}: the connection is closed: {gone:?}");
    }
}

#[test]
fn a_quiet_link_is_closed_and_an_answering_one_is_kept() {
    let net = InProcNetwork::new(Limits::default());
    let clock = Clock::default();
    let keep = Keepalive { every: Duration::from_millis(10), quiet_after: Duration::from_millis(40) };
    let (mut a, mut b) = (node(&net, 7, 1, &clock, Some(keep)), node(&net, 7, 2, &clock, None));
    let conn: ConnId = a.connect(&b.inner().id()).unwrap();
    exchange(&mut a, &mut b);
    assert_eq!(a.stats().opened_out, 1);
    // Idle and healthy: pings are answered for a long time, nothing closes.
    for _ in 0..100 {
        clock.set(clock.get() + Duration::from_millis(5));
        let (ea, eb) = exchange(&mut a, &mut b);
        assert!(ea.is_empty() && eb.is_empty(), "pings never reach the services: {ea:?} {eb:?}");
    }
    assert_eq!(a.stats().quiet_closed, 0);
    // The acceptor stops answering (its process stalls, its network is cut).
    clock.set(clock.get() + Duration::from_millis(10));
    assert!(drain(&mut a).is_empty());
    clock.set(clock.get() + Duration::from_millis(41));
    let ea = drain(&mut a);
    assert!(ea.iter().any(|e| matches!(e, Event::Disconnected { conn: c, .. } if *c == conn)), "{ea:?}");
    assert_eq!(a.stats().quiet_closed, 1);
}

/// A service that sends while `send_room` says so fills the window but
/// for the ping's slot: a peer that stops reading is still found quiet.
#[test]
fn a_peer_that_stops_reading_a_busy_link_is_found_quiet() {
    let net = InProcNetwork::new(Limits { window: 4, ..Limits::default() });
    let clock = Clock::default();
    let keep = Keepalive { every: Duration::from_millis(10), quiet_after: Duration::from_millis(40) };
    let (mut a, mut b) = (node(&net, 7, 1, &clock, Some(keep)), node(&net, 7, 2, &clock, None));
    let conn: ConnId = a.connect(&b.inner().id()).unwrap();
    exchange(&mut a, &mut b);
    assert_eq!(a.window_free(conn), 3, "one of the 4 slots is the ping's");
    // The acceptor stops reading; the dialer sends while there is room.
    let mut sent = 0;
    while a.send_room(conn) {
        a.send(conn, b"MSG1", vec![sent]).unwrap();
        sent += 1;
    }
    assert_eq!(sent, 3);
    assert!(drain(&mut a).is_empty());
    clock.set(clock.get() + Duration::from_millis(10));
    assert!(drain(&mut a).is_empty(), "the ping goes in the slot kept for it");
    assert_eq!(a.inner().window_free(conn), 0, "three sends and the ping fill the window");
    clock.set(clock.get() + Duration::from_millis(41));
    let ea = drain(&mut a);
    assert!(ea.iter().any(|e| matches!(e, Event::Disconnected { conn: c, .. } if *c == conn)), "{ea:?}");
    assert_eq!(a.stats().quiet_closed, 1);
    drop(b);
}

#[test]
fn an_unanswered_handshake_ends_in_time_on_the_dialer_too() {
    let net = InProcNetwork::new(Limits::default());
    let clock = Clock::default();
    let mut a = node(&net, 7, 1, &clock, None);
    let silent = net.node();
    let conn = a.connect(&silent.id()).unwrap();
    a.send(conn, b"MSG1", vec![1]).unwrap();
    assert!(drain(&mut a).is_empty());
    clock.set(Duration::from_millis(101));
    let ea = drain(&mut a);
    assert!(ea.iter().any(|e| matches!(e, Event::Disconnected { conn: c, .. } if *c == conn)), "{ea:?}");
    assert_eq!(a.stats().refused_out, 1);
    drop(silent);
}

#[test]
#[should_panic(expected = "top bit")]
fn a_service_token_with_the_link_bit_is_refused() {
    let net = InProcNetwork::new(Limits::default());
    let clock = Clock::default();
    let (mut a, b) = (node(&net, 7, 1, &clock, None), node(&net, 7, 2, &clock, None));
    let conn = a.connect(&b.inner().id()).unwrap();
    let _ = a.call(conn, b"REQ1", Vec::new(), crate::link::LINK_TOKEN);
}
