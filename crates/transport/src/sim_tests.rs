//! Tests of the simulated network ([`crate::sim`]): determinism from one
//! seed, each fault observable on its own, partitions healing, down and
//! restart, every token completing exactly once under every fault, and
//! bounded queues. Time is virtual throughout: nothing here sleeps or
//! depends on the machine's speed. A failing test prints its seed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::seam::{ConnId, Event, Limits, Output, Transport};
use crate::sim::{Faults, Latency, SimAddr, SimNetwork, SimTransport};
use crate::OpError;

fn drain(t: &mut SimTransport) -> Vec<Event> {
    let mut events = Vec::new();
    t.poll(&mut events, usize::MAX);
    events
}

/// Delivers everything in flight, in due order, polling nobody.
fn settle(net: &SimNetwork) {
    while let Some(t) = net.next_due_ns() {
        net.advance_to(t);
    }
}

fn accepted(events: &[Event]) -> ConnId {
    events
        .iter()
        .find_map(|e| match e {
            Event::Accepted(c) => Some(*c),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no accept in {events:?}"))
}

/// Two nodes, `a` connected to `b`; returns a's and b's ends.
fn pair(net: &SimNetwork) -> (SimTransport, SimTransport, ConnId, ConnId) {
    let (mut a, mut b) = (net.node(), net.node());
    let conn = a.connect(&b.addr()).unwrap();
    settle(net);
    let theirs = accepted(&drain(&mut b));
    (a, b, conn, theirs)
}

fn faults(f: impl FnOnce(&mut Faults)) -> Faults {
    let mut faults = Faults::none();
    f(&mut faults);
    faults
}

fn index(header: &[u8]) -> u64 {
    u64::from_le_bytes(header[..8].try_into().unwrap())
}

/// The message indices in `events`, in order.
fn messages(events: &[Event]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Message { header, .. } => Some(index(header)),
            _ => None,
        })
        .collect()
}

/// Sends `count` messages a→b, `window` at a time, delivering and polling
/// b between batches; returns the indices b saw, in order.
fn stream(net: &SimNetwork, a: &mut SimTransport, b: &mut SimTransport, conn: ConnId, count: u64) -> Vec<u64> {
    let mut seen = Vec::new();
    let mut i = 0;
    while i < count {
        while i < count {
            match a.send(conn, &i.to_le_bytes(), vec![i as u8; 16]) {
                Ok(()) => i += 1,
                Err(OpError::WindowFull(_)) => break,
                Err(e) => panic!("{e}"),
            }
        }
        settle(net);
        seen.extend(messages(&drain(b)));
    }
    settle(net);
    seen.extend(messages(&drain(b)));
    seen
}

#[test]
fn wait_never_blocks_and_the_clock_moves_only_when_advanced() {
    let net = SimNetwork::new(1, Limits::default(), faults(|f| f.latency = Latency { min_ns: 500, max_ns: 900, tail_per_million: 0, tail_max_ns: 900 }));
    let (mut a, mut b, conn, _) = pair(&net);
    let t0 = net.now_ns();
    assert!(!b.wait(Duration::from_secs(3600)).unwrap(), "nothing queued: false at once");
    assert_eq!(net.now_ns(), t0, "waiting does not move the clock");
    assert_eq!(net.next_due_ns(), None);
    a.send(conn, &0u64.to_le_bytes(), Vec::new()).unwrap();
    let due = net.next_due_ns().unwrap();
    assert!((t0 + 500..=t0 + 900).contains(&due), "due {due} after {t0}");
    net.advance_to(due - 1);
    assert!(!b.wait(Duration::ZERO).unwrap(), "not yet due");
    net.advance_to(due);
    assert_eq!(net.now_ns(), due);
    assert!(b.wait(Duration::ZERO).unwrap());
    assert_eq!(messages(&drain(&mut b)), [0]);
}

#[test]
fn latency_follows_the_configured_distribution() {
    let latency = Latency { min_ns: 1_000, max_ns: 5_000, tail_per_million: 200_000, tail_max_ns: 1_000_000 };
    let net = SimNetwork::new(2, Limits::default(), faults(|f| {
        f.latency = latency;
        f.reorder = true;
    }));
    let (mut a, mut b, conn, _) = pair(&net);
    let mut delays = Vec::new();
    for round in 0..40u64 {
        let sent_ns = net.now_ns();
        for i in 0..8 {
            a.send(conn, &(round * 8 + i).to_le_bytes(), Vec::new()).unwrap();
        }
        while let Some(t) = net.next_due_ns() {
            net.advance_to(t);
            let n = messages(&drain(&mut b)).len();
            delays.extend(std::iter::repeat_n(t - sent_ns, n));
        }
    }
    assert_eq!(delays.len(), 320);
    assert!(delays.iter().all(|d| (latency.min_ns..=latency.tail_max_ns).contains(d)), "{delays:?}");
    let body = delays.iter().filter(|&&d| d <= latency.max_ns).count();
    let distinct: BTreeSet<u64> = delays.iter().copied().collect();
    assert!(body > 200 && body < 300, "about 80% in the body: {body} of 320");
    assert!(distinct.len() > 100, "spread over the range: {} distinct delays", distinct.len());
}

#[test]
fn dropped_messages_never_arrive_and_free_their_slots() {
    let net = SimNetwork::new(3, Limits::default(), faults(|f| f.drop_per_million = 300_000));
    let (mut a, mut b, conn, _) = pair(&net);
    let seen = stream(&net, &mut a, &mut b, conn, 1000);
    let stats = net.stats();
    assert_eq!(stats.messages_sent, 1000);
    assert_eq!(seen.len() as u64 + stats.messages_dropped, 1000);
    assert!((600..800).contains(&seen.len()), "about 70% arrive: {}", seen.len());
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "no reordering asked for");
}

#[test]
fn duplicated_messages_arrive_twice() {
    let net = SimNetwork::new(4, Limits::default(), faults(|f| f.duplicate_per_million = 1_000_000));
    let (mut a, mut b, conn, _) = pair(&net);
    let seen = stream(&net, &mut a, &mut b, conn, 100);
    let mut counts = BTreeMap::new();
    for i in &seen {
        *counts.entry(*i).or_insert(0) += 1;
    }
    assert_eq!(counts.len(), 100);
    assert!(counts.values().all(|&n| n == 2), "{counts:?}");
    assert_eq!(net.stats().messages_duplicated, 100);
}

/// Messages and calls interleaved: returns the order b saw them in
/// ("m" or "r", index).
fn interleaved(net: &SimNetwork, count: u64) -> Vec<(&'static str, u64)> {
    let (mut a, mut b, conn, _) = pair(net);
    for i in 0..count {
        if i % 3 == 0 {
            a.call(conn, &i.to_le_bytes(), Vec::new(), i).unwrap();
        } else {
            a.send(conn, &i.to_le_bytes(), Vec::new()).unwrap();
        }
    }
    settle(net);
    drain(&mut b)
        .into_iter()
        .filter_map(|e| match e {
            Event::Message { header, .. } => Some(("m", index(&header))),
            Event::Request(r) => Some(("r", index(&r.header))),
            _ => None,
        })
        .collect()
}

#[test]
fn reordering_lets_messages_overtake_but_never_requests() {
    let wide = Latency { min_ns: 1_000, max_ns: 100_000, tail_per_million: 0, tail_max_ns: 100_000 };
    let net = SimNetwork::new(5, Limits::default(), faults(|f| {
        f.latency = wide;
        f.reorder = true;
    }));
    let seen = interleaved(&net, 30);
    assert_eq!(seen.len(), 30);
    let requests: Vec<u64> = seen.iter().filter(|s| s.0 == "r").map(|s| s.1).collect();
    assert_eq!(requests, (0..30).step_by(3).collect::<Vec<_>>(), "requests keep their order");
    let order: Vec<u64> = seen.iter().map(|s| s.1).collect();
    assert!(order.windows(2).any(|w| w[0] > w[1]), "some message overtook: {order:?}");

    let fifo = SimNetwork::new(5, Limits::default(), faults(|f| f.latency = wide));
    let order: Vec<u64> = interleaved(&fifo, 30).iter().map(|s| s.1).collect();
    assert_eq!(order, (0..30).collect::<Vec<_>>(), "without reorder: the connection's order");
}

#[test]
fn an_asymmetric_partition_cuts_one_direction_until_healed() {
    let net = SimNetwork::new(6, Limits::default(), Faults::none());
    let (mut a, mut b, conn, theirs) = pair(&net);
    net.cut(a.addr(), b.addr());
    for i in 0..10u64 {
        a.send(conn, &i.to_le_bytes(), Vec::new()).unwrap();
        b.send(theirs, &(100 + i).to_le_bytes(), Vec::new()).unwrap();
    }
    settle(&net);
    assert_eq!(messages(&drain(&mut b)), Vec::<u64>::new(), "A→B is cut");
    assert_eq!(messages(&drain(&mut a)), (100..110).collect::<Vec<_>>(), "B→A flows");
    assert_eq!(net.stats().messages_dropped, 10);
    // A call cannot cross: its connection breaks rather than leave it hanging.
    a.call(conn, b"x", Vec::new(), 1).unwrap();
    settle(&net);
    let events = drain(&mut a);
    assert!(matches!(&events[..], [Event::Completion(c), Event::Disconnected { cause: Some(_), .. }]
        if c.token == 1 && c.result == Err(OpError::Disconnected(conn.0))), "{events:?}");
    assert!(matches!(&drain(&mut b)[..], [Event::Disconnected { cause: Some(_), .. }]));
    net.heal(a.addr(), b.addr());
    let conn = a.connect(&b.addr()).unwrap();
    a.send(conn, &7u64.to_le_bytes(), Vec::new()).unwrap();
    settle(&net);
    let events = drain(&mut b);
    accepted(&events);
    assert_eq!(messages(&events), [7], "healed");
}

#[test]
fn connects_across_a_partition_fail_after_the_timeout_then_succeed_once_healed() {
    let net = SimNetwork::new(7, Limits::default(), Faults::none());
    let (mut a, mut b, mut c) = (net.node(), net.node(), net.node());
    net.partition(&[a.addr()]);
    let start = net.now_ns();
    let conn = a.connect(&b.addr()).unwrap();
    a.call(conn, b"x", Vec::new(), 1).unwrap();
    a.send(conn, b"lost", Vec::new()).unwrap();
    let due = net.next_due_ns().unwrap();
    assert_eq!(due, start + Faults::none().connect_timeout_ns);
    settle(&net);
    let events = drain(&mut a);
    assert!(matches!(&events[..], [Event::Completion(c), Event::Disconnected { cause: Some(_), .. }]
        if c.result == Err(OpError::Disconnected(conn.0))), "{events:?}");
    assert!(drain(&mut b).is_empty(), "b never heard of it");
    assert_eq!(net.stats().connects_failed, 1);
    // b and c, on the same side, still talk.
    b.connect(&c.addr()).unwrap();
    settle(&net);
    accepted(&drain(&mut c));
    net.heal_all();
    a.connect(&b.addr()).unwrap();
    settle(&net);
    accepted(&drain(&mut b));
}

#[test]
fn a_broken_connection_fails_each_call_once_at_both_ends() {
    let net = SimNetwork::new(8, Limits::default(), Faults::none());
    let (mut a, mut b, conn, theirs) = pair(&net);
    a.call(conn, b"answered late", Vec::new(), 1).unwrap();
    settle(&net);
    let Event::Request(request) = drain(&mut b).remove(0) else { panic!() };
    a.call(conn, b"in flight", Vec::new(), 2).unwrap();
    b.call(theirs, b"the other way", Vec::new(), 3).unwrap();
    a.send(conn, b"lost", Vec::new()).unwrap();
    net.break_connection(a.addr(), conn);
    assert_eq!(net.in_flight(), 0, "its flights go with it");
    assert_eq!(b.reply(request.id, b"", Vec::new()), Err(OpError::Disconnected(theirs.0)));
    let tokens = |events: &[Event]| -> Vec<u64> {
        events.iter().filter_map(|e| match e {
            Event::Completion(c) => Some(c.token),
            _ => None,
        }).collect()
    };
    let (ea, eb) = (drain(&mut a), drain(&mut b));
    let mut ta = tokens(&ea);
    ta.sort();
    assert_eq!(ta, [1, 2]);
    assert_eq!(tokens(&eb), [3]);
    assert!(matches!(ea.last(), Some(Event::Disconnected { cause: Some(_), .. })));
    assert!(matches!(eb.last(), Some(Event::Disconnected { cause: Some(_), .. })));
    settle(&net);
    assert!(drain(&mut a).is_empty() && drain(&mut b).is_empty(), "nothing completes twice");
    assert_eq!(net.stats().connections_broken, 1);
}

#[test]
fn a_down_node_gets_nothing_and_a_restarted_one_is_reconnected() {
    let net = SimNetwork::new(9, Limits::default(), Faults::none());
    let (mut a, mut b, mut c) = (net.node(), net.node(), net.node());
    let ab = a.connect(&b.addr()).unwrap();
    let cb = c.connect(&b.addr()).unwrap();
    settle(&net);
    drain(&mut b);
    a.send(ab, b"in flight", Vec::new()).unwrap();
    a.call(ab, b"in flight", Vec::new(), 1).unwrap();
    net.down(b.addr());
    assert!(!net.is_up(b.addr()));
    for t in [&mut a, &mut c] {
        let events = drain(t);
        assert!(matches!(events.last(), Some(Event::Disconnected { cause: Some(_), .. })), "{events:?}");
    }
    assert_eq!(a.call(ab, b"", Vec::new(), 2), Err(OpError::Disconnected(ab.0)));
    assert_eq!(c.send(cb, b"", Vec::new()), Err(OpError::Disconnected(cb.0)));
    // The old transport is dead.
    assert!(b.connect(&a.addr()).is_err());
    assert_eq!(b.send(ConnId(0), b"", Vec::new()), Err(OpError::Disconnected(0)));
    assert!(drain(&mut b).is_empty());
    // Connects to it fail after the timeout.
    let retry = a.connect(&b.addr()).unwrap();
    settle(&net);
    assert!(matches!(drain(&mut a).last(), Some(Event::Disconnected { conn, .. }) if *conn == retry));
    let mut b2 = net.restart(b.addr());
    drop(b); // the old transport's drop does not take the new one down
    assert!(net.is_up(b2.addr()));
    assert!(drain(&mut b2).is_empty(), "nothing from before the restart");
    let ab = a.connect(&b2.addr()).unwrap();
    a.send(ab, &5u64.to_le_bytes(), Vec::new()).unwrap();
    settle(&net);
    let events = drain(&mut b2);
    accepted(&events);
    assert_eq!(messages(&events), [5]);
    drop(b2);
    assert!(!net.is_up(SimAddr(1)), "dropping a live node's transport takes it down");
}

#[test]
fn a_node_that_never_polls_bounds_what_it_holds() {
    let window = 4;
    let limits = Limits { window, ..Limits::default() };
    let net = SimNetwork::new(10, limits, faults(|f| f.duplicate_per_million = 1_000_000));
    let (mut a, mut b, conn, _) = pair(&net);
    for i in 0..window as u64 {
        a.send(conn, &i.to_le_bytes(), vec![0; 64]).unwrap();
    }
    assert_eq!(a.send(conn, b"", Vec::new()), Err(OpError::WindowFull(window)));
    assert_eq!(a.call(conn, b"", Vec::new(), 1), Err(OpError::WindowFull(window)));
    settle(&net);
    assert_eq!(net.queued(b.addr()), 2 * window, "each message and its copy");
    assert_eq!(a.send(conn, b"", Vec::new()), Err(OpError::WindowFull(window)), "held until b polls");
    // The originals first (the copies took a latency of their own), then
    // copy 0: only the copy held a slot.
    let mut events = Vec::new();
    b.poll(&mut events, window);
    assert_eq!(messages(&events), [0, 1, 2, 3]);
    assert_eq!(a.send(conn, b"", Vec::new()), Err(OpError::WindowFull(window)), "the copies hold the slots");
    b.poll(&mut events, 1);
    assert_eq!(messages(&events), [0, 1, 2, 3, 0]);
    a.send(conn, &9u64.to_le_bytes(), Vec::new()).unwrap();
    assert_eq!(a.send(conn, b"", Vec::new()), Err(OpError::WindowFull(window)), "one slot came back");
}

#[test]
fn one_sided_access_is_off_and_flush_completes() {
    let net = SimNetwork::new(11, Limits::default(), Faults::none());
    let (mut a, _b, conn, _) = pair(&net);
    assert_eq!(a.reach(), crate::Reach::Off);
    let mut byte = 0u8;
    // SAFETY: nothing is registered (the call fails), so nothing is kept.
    assert!(unsafe { a.register(&mut byte, 1) }.is_err());
    assert_eq!(a.put(conn, crate::RemoteRegionId(0), 0, vec![1], 1), Err(OpError::UnknownRegion(0)));
    a.flush(conn, 2).unwrap();
    let events = drain(&mut a);
    assert!(matches!(&events[..], [Event::Completion(c)] if c.token == 2 && c.result == Ok(Output::Flush)));
}

/// Faults a chaos run applies at given instants.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Partition(u32),
    Cut(u32, u32),
    HealAll,
    Break(u32),
    Down(u32),
    Restart(u32),
}

/// A chaos run: `NODES` nodes connect to each other, send messages and make
/// calls at random (from `seed` too), answer every request (some with a
/// message first), reconnect after every loss, under `faults` and the
/// scripted `script`; then everything heals and drains. Checks that every
/// call completes exactly once (or its node went down), and returns the
/// trace of every event with its instant and node.
struct Chaos {
    net: SimNetwork,
    nodes: Vec<Option<SimTransport>>,
    /// `out[a][b]`: the connection a opened to b.
    out: Vec<Vec<Option<ConnId>>>,
    rng: Xoshiro256PlusPlus,
    next_token: u64,
    outstanding: BTreeMap<u64, usize>,
    completed: BTreeSet<u64>,
    trace: Vec<String>,
    seed: u64,
}

const NODES: usize = 4;
const TICK_NS: u64 = 50_000;

impl Chaos {
    fn new(seed: u64, faults: Faults) -> Chaos {
        let net = SimNetwork::new(seed, Limits { window: 8, ..Limits::default() }, faults);
        let nodes = (0..NODES).map(|_| Some(net.node())).collect();
        Chaos {
            net,
            nodes,
            out: vec![vec![None; NODES]; NODES],
            rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5eed),
            next_token: 0,
            outstanding: BTreeMap::new(),
            completed: BTreeSet::new(),
            trace: Vec::new(),
            seed,
        }
    }

    fn run(mut self, script: &[(u64, Fault)], end_ns: u64) -> (Vec<String>, crate::sim::SimStats) {
        let mut script = script.to_vec();
        script.sort_by_key(|s| s.0);
        let mut script = script.into_iter().peekable();
        let mut tick = 0;
        while self.net.now_ns() < end_ns {
            self.pump();
            while script.peek().is_some_and(|s| s.0 <= self.net.now_ns()) {
                let (_, fault) = script.next().unwrap();
                self.apply(fault);
                self.pump();
            }
            if self.net.now_ns() >= tick {
                self.act();
                tick = self.net.now_ns() + TICK_NS;
            }
            let next = [Some(tick), self.net.next_due_ns(), script.peek().map(|s| s.0)];
            self.net.advance_to(next.into_iter().flatten().min().unwrap());
        }
        // Heal, restart whoever is down, and drain without new work.
        self.net.heal_all();
        for n in 0..NODES {
            if self.nodes[n].is_none() {
                self.apply(Fault::Restart(n as u32));
            }
        }
        loop {
            self.pump();
            let Some(t) = self.net.next_due_ns() else { break };
            self.net.advance_to(t);
        }
        assert!(self.outstanding.is_empty(), "seed {}: calls never completed: {:?}", self.seed, self.outstanding);
        let stats = self.net.stats();
        (self.trace, stats)
    }

    fn apply(&mut self, fault: Fault) {
        self.trace.push(format!("{} fault {fault:?}", self.net.now_ns()));
        match fault {
            Fault::Partition(n) => self.net.partition(&[SimAddr(n)]),
            Fault::Cut(a, b) => self.net.cut(SimAddr(a), SimAddr(b)),
            Fault::HealAll => self.net.heal_all(),
            Fault::Break(n) => {
                if let Some(conn) = self.out[n as usize].iter().flatten().next() {
                    self.net.break_connection(SimAddr(n), *conn);
                }
            }
            Fault::Down(n) => {
                self.net.down(SimAddr(n));
                self.nodes[n as usize] = None;
                self.out[n as usize] = vec![None; NODES];
                // Its calls died with its process.
                self.outstanding.retain(|_, node| *node != n as usize);
            }
            Fault::Restart(n) => {
                if self.nodes[n as usize].is_none() {
                    self.nodes[n as usize] = Some(self.net.restart(SimAddr(n)));
                }
            }
        }
    }

    /// Polls every node until none has events, handling each.
    fn pump(&mut self) {
        loop {
            let mut any = false;
            for n in 0..NODES {
                let Some(t) = self.nodes[n].as_mut() else { continue };
                let mut events = Vec::new();
                t.poll(&mut events, 16);
                any |= !events.is_empty();
                for e in events {
                    self.handle(n, e);
                }
            }
            if !any {
                return;
            }
        }
    }

    fn handle(&mut self, n: usize, e: Event) {
        self.trace.push(format!("{} n{n} {e:?}", self.net.now_ns()));
        let seed = self.seed;
        let t = self.nodes[n].as_mut().expect("polled");
        match e {
            Event::Request(r) => {
                if self.rng.next_u64().is_multiple_of(4) {
                    let _ = t.send(r.id.conn(), b"before reply", Vec::new());
                }
                match t.reply(r.id, &r.header, r.payload) {
                    // The connection broke after the request was queued.
                    Ok(()) | Err(OpError::Disconnected(_)) => {}
                    Err(e) => panic!("seed {seed}: {e}"),
                }
            }
            Event::Completion(c) => {
                assert_eq!(self.outstanding.remove(&c.token), Some(n), "seed {seed}: token {} completed twice or never started", c.token);
                assert!(self.completed.insert(c.token));
                if let Ok(Output::Response { header, .. }) = &c.result {
                    assert_eq!(index(header), c.token, "seed {seed}: a response answers its own call");
                }
            }
            Event::Disconnected { conn, .. } => {
                for slot in self.out[n].iter_mut() {
                    if *slot == Some(conn) {
                        *slot = None;
                    }
                }
            }
            Event::Accepted(_) | Event::Message { .. } => {}
        }
    }

    /// Random work for one tick: connect where missing, send, call.
    fn act(&mut self) {
        for a in 0..NODES {
            for b in (0..NODES).filter(|&b| b != a) {
                let Some(t) = self.nodes[a].as_mut() else { continue };
                let Some(conn) = self.out[a][b] else {
                    self.out[a][b] = Some(t.connect(&SimAddr(b as u32)).unwrap());
                    continue;
                };
                let roll = self.rng.next_u64() % 8;
                if roll < 5 {
                    let _ = t.send(conn, &self.next_token.to_le_bytes(), vec![a as u8; (roll * 100) as usize]);
                    self.next_token += 1;
                } else if roll < 7 {
                    let token = self.next_token;
                    self.next_token += 1;
                    if t.call(conn, &token.to_le_bytes(), Vec::new(), token).is_ok() {
                        self.outstanding.insert(token, a);
                    }
                }
            }
        }
    }
}

fn script() -> Vec<(u64, Fault)> {
    vec![
        (2_000_000, Fault::Partition(0)),
        (4_000_000, Fault::HealAll),
        (5_000_000, Fault::Cut(1, 2)),
        (6_000_000, Fault::Break(3)),
        (7_000_000, Fault::HealAll),
        (8_000_000, Fault::Down(2)),
        (10_000_000, Fault::Restart(2)),
        (11_000_000, Fault::Break(0)),
    ]
}

#[test]
fn the_same_seed_gives_the_same_trace_bit_for_bit() {
    let (first, stats) = Chaos::new(42, Faults::harsh()).run(&script(), 15_000_000);
    let (again, stats_again) = Chaos::new(42, Faults::harsh()).run(&script(), 15_000_000);
    assert!(first.len() > 1000, "the run did something: {} events", first.len());
    assert_eq!(stats, stats_again);
    if let Some(at) = (0..first.len().min(again.len())).find(|&i| first[i] != again[i]) {
        panic!("seed 42: traces differ at event {at}: {:?} / {:?}", first[at], again[at]);
    }
    assert_eq!(first.len(), again.len());
    let (other, _) = Chaos::new(43, Faults::harsh()).run(&script(), 15_000_000);
    assert_ne!(first, other, "another seed, another schedule");
    // Every fault happened.
    assert!(stats.messages_dropped > 0 && stats.messages_duplicated > 0, "{stats:?}");
    assert!(stats.connections_broken > 0 && stats.connects_failed > 0, "{stats:?}");
}

#[test]
fn every_call_completes_exactly_once_under_every_fault() {
    for seed in 1..=6 {
        // `run` asserts no token completes twice and none is left over.
        let (trace, stats) = Chaos::new(seed, Faults::harsh()).run(&script(), 12_000_000);
        assert!(stats.messages_delivered > 0, "seed {seed}: {stats:?}");
        assert!(trace.iter().any(|t| t.contains("Completion")), "seed {seed}");
    }
    // And on a perfect network, with only the scripted faults.
    Chaos::new(7, Faults::none()).run(&script(), 12_000_000);
}
