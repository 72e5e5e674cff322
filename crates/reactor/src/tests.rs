//! The reactor over the in-process transport: events reach the service in
//! order, timed work runs when due and not before, and `run` blocks and
//! stops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use transport::{Event, InProcNetwork, Limits, Output, Transport};

use std::time::Instant;

use super::{PollBudget, Reactor, RealClock, ReplyPacer, Service, CLOCK_EVERY};

/// Echoes every request's payload; counts accepts; has a timer every
/// `period` that counts ticks and sets `stop` after `stop_after` ticks.
struct Echo {
    accepted: u32,
    ticks: u32,
    period: Duration,
    next: Duration,
    stop_after: u32,
    stop: Arc<AtomicBool>,
}

impl Echo {
    fn new(period: Duration, stop_after: u32, stop: Arc<AtomicBool>) -> Echo {
        Echo { accepted: 0, ticks: 0, period, next: period, stop_after, stop }
    }
}

impl<T: Transport> Service<T> for Echo {
    fn on_event(&mut self, transport: &mut T, event: Event, _now: Duration) {
        match event {
            Event::Accepted(_) => self.accepted += 1,
            Event::Request(r) => transport.reply(r.id, &r.header, r.payload).expect("reply"),
            _ => {}
        }
    }

    fn poll_work(&mut self, _transport: &mut T, now: Duration) -> bool {
        if now < self.next {
            return false;
        }
        self.ticks += 1;
        self.next = now + self.period;
        if self.ticks >= self.stop_after {
            self.stop.store(true, Ordering::Relaxed);
        }
        true
    }

    fn next_deadline(&self) -> Option<Duration> {
        Some(self.next)
    }
}

#[test]
fn turn_hands_events_to_the_service_in_order() {
    let net = InProcNetwork::new(Limits::default());
    let server_t = net.node();
    let addr = server_t.id();
    let stop = Arc::new(AtomicBool::new(false));
    let mut reactor = Reactor::new(server_t, Echo::new(Duration::from_secs(3600), 1, stop));
    let mut client = net.node();
    let conn = client.connect(&addr).expect("connect");
    for i in 0..5u8 {
        client.call(conn, &[i], vec![i; 3], u64::from(i)).expect("call");
    }
    assert!(reactor.turn(Duration::ZERO), "the turn handled events");
    assert_eq!(reactor.service.accepted, 1);
    assert_eq!(reactor.service.ticks, 0, "the timer is not due");
    let mut events = Vec::new();
    let mut tokens = Vec::new();
    while tokens.len() < 5 {
        assert!(client.poll(&mut events, 16) > 0, "every reply is queued");
        for e in events.drain(..) {
            if let Event::Completion(c) = e {
                match c.result.expect("ok") {
                    Output::Response { header, payload } => {
                        assert_eq!(header, vec![c.token as u8]);
                        assert_eq!(payload, vec![c.token as u8; 3]);
                    }
                    other => panic!("unexpected {other:?}"),
                }
                tokens.push(c.token);
            }
        }
    }
    assert_eq!(tokens, vec![0, 1, 2, 3, 4], "replies in call order");
    assert!(!reactor.turn(Duration::ZERO), "nothing left: an idle turn reports no work");
}

#[test]
fn timed_work_runs_when_due_and_not_before() {
    let net = InProcNetwork::new(Limits::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut reactor = Reactor::new(net.node(), Echo::new(Duration::from_millis(10), 100, stop));
    assert_eq!(reactor.service.next, Duration::from_millis(10));
    assert!(!reactor.turn(Duration::from_millis(9)));
    assert_eq!(reactor.service.ticks, 0);
    assert!(reactor.turn(Duration::from_millis(10)));
    assert_eq!(reactor.service.ticks, 1);
    assert_eq!(reactor.service.next, Duration::from_millis(20));
}

#[test]
fn run_blocks_until_the_deadline_and_stops() {
    let net = InProcNetwork::new(Limits::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut reactor = Reactor::new(net.node(), Echo::new(Duration::from_millis(1), 5, stop.clone()));
    reactor.run(&RealClock::new(), &stop, PollBudget::BLOCK);
    assert_eq!(reactor.service.ticks, 5, "ran until the service set stop");
}

/// Halts after `after` timed ticks (1 ms apart), with a reason.
struct Halting {
    ticks: u32,
    after: u32,
    next: Duration,
}

impl<T: Transport> Service<T> for Halting {
    fn on_event(&mut self, _transport: &mut T, _event: Event, _now: Duration) {}

    fn poll_work(&mut self, _transport: &mut T, now: Duration) -> bool {
        if now < self.next {
            return false;
        }
        self.ticks += 1;
        self.next = now + Duration::from_millis(1);
        true
    }

    fn next_deadline(&self) -> Option<Duration> {
        Some(self.next)
    }

    fn halted(&self) -> Option<&str> {
        (self.ticks >= self.after).then_some("it said so")
    }
}

#[test]
fn run_returns_once_the_service_halts() {
    let net = InProcNetwork::new(Limits::default());
    let stop = AtomicBool::new(false);
    let mut reactor = Reactor::new(net.node(), Halting { ticks: 0, after: 3, next: Duration::ZERO });
    reactor.run(&RealClock::new(), &stop, PollBudget::BLOCK);
    assert_eq!(reactor.service.ticks, 3, "no turn after the halt");
    assert_eq!(Service::<transport::InProcTransport>::halted(&reactor.service), Some("it said so"));
    assert!(!stop.load(Ordering::Relaxed), "stop was never set");
}

#[test]
fn a_poll_budget_ends_by_count_or_by_time() {
    let budget = PollBudget { spin: Duration::from_secs(3600), max_empty_polls: 100 };
    let now = Instant::now();
    assert!((0..100).all(|empty| budget.keep_polling(now, empty)));
    assert!(!budget.keep_polling(now, 100));
    assert!(!PollBudget::BLOCK.keep_polling(now, 0));
    // Time is looked at on every CLOCK_EVERY-th empty poll: an expired
    // window ends there, never later.
    let expired = PollBudget { spin: Duration::ZERO, max_empty_polls: 1000 };
    assert!(!expired.keep_polling(now, 0));
    assert!(!expired.keep_polling(now, CLOCK_EVERY));
    let ends = (0..1000).find(|&empty| !expired.keep_polling(now, empty)).unwrap();
    assert_eq!(ends, 0);
    assert!((1..CLOCK_EVERY).all(|empty| expired.keep_polling(now, empty)));
}

#[test]
fn a_pacer_stretches_the_budget_after_slow_waits_and_lets_it_go_after_fast_ones() {
    let base = PollBudget::default();
    let mut pacer = ReplyPacer::new();
    assert_eq!(pacer.budget(base), base, "no evidence: the base budget");
    for _ in 0..50 {
        pacer.record(Duration::from_micros(1));
    }
    assert_eq!(pacer.budget(base), base, "fast round trips keep the base budget");
    // The chain: waits of two wake-ups each.
    pacer.record(Duration::from_micros(85));
    pacer.record(Duration::from_micros(85));
    let stretched = pacer.budget(base);
    assert!(stretched.spin > Duration::from_micros(85), "spins through a wake-up after two slow waits: {stretched:?}");
    assert!(stretched.spin <= ReplyPacer::MAX_SPIN);
    assert_eq!(stretched.max_empty_polls, u32::MAX, "the spin bounds it, not the count");
    // Fast again: back to the base within a bounded number of waits.
    let back = (1..=64).find(|_| {
        pacer.record(Duration::from_micros(1));
        pacer.budget(base) == base
    });
    assert!(back.is_some_and(|n| n <= 16), "back to the base after {back:?} fast waits");
}

#[test]
fn a_pacer_leaves_long_waits_and_blocking_budgets_alone() {
    let mut pacer = ReplyPacer::new();
    for _ in 0..20 {
        pacer.record(Duration::from_micros(400));
    }
    let base = PollBudget::default();
    assert_eq!(pacer.budget(base), base, "a wait past MAX_SPIN/2 blocks as before");
    assert_eq!(pacer.budget(PollBudget::BLOCK), PollBudget::BLOCK, "BLOCK is never stretched");
    let long = PollBudget { spin: Duration::from_millis(1), max_empty_polls: u32::MAX };
    let mut fast = ReplyPacer::new();
    fast.record(Duration::from_micros(100));
    assert_eq!(fast.budget(long), long, "a longer budget is kept");
    let mut huge = ReplyPacer::new();
    huge.record(Duration::MAX);
    huge.record(Duration::MAX);
    assert_eq!(huge.budget(base), base, "no overflow on absurd waits");
}
