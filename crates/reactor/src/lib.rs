//! pmwire's run-to-completion event loop over the [`Transport`] seam.
//!
//! A [`Reactor`] owns one transport and one [`Service`]. One [`turn`]
//! takes the transport's events, hands each to the service, then lets the
//! service do the work that no event drives (timers, queued work). The
//! time of a turn is passed in, never read inside: [`Reactor::run`] reads a
//! [`Clock`] (real time in a process), and a deterministic simulation calls
//! [`Reactor::turn`] itself with virtual time, for every node, from one
//! thread.
//!
//! Invariants:
//! - a turn does a bounded amount of work: at most [`EVENTS_PER_TURN`]
//!   events, then one [`Service::poll_work`];
//! - [`Reactor::run`] never spins unbounded: after its last activity it
//!   polls at most as its [`PollBudget`] allows, then blocks in
//!   [`Transport::wait`] until an event or the service's next deadline
//!   (at most [`IDLE_WAIT`], so it notices `stop`).
//!
//! [`turn`]: Reactor::turn
//! [`Transport`]: transport::Transport

#![deny(missing_docs)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use transport::{Event, Transport};

/// Longest a loop sleeps when idle before it looks at `stop` again.
pub const IDLE_WAIT: Duration = Duration::from_millis(50);

/// Events taken from the transport in one turn.
pub const EVENTS_PER_TURN: usize = 256;

/// A source of time: the time since the clock's origin.
pub trait Clock {
    /// Now, since the clock's origin.
    fn now(&self) -> Duration;
}

/// Real (monotonic) time since the clock was made.
#[derive(Clone, Copy, Debug)]
pub struct RealClock {
    origin: Instant,
}

impl RealClock {
    /// A clock whose origin is now.
    pub fn new() -> RealClock {
        RealClock { origin: Instant::now() }
    }
}

impl Default for RealClock {
    fn default() -> Self {
        RealClock::new()
    }
}

impl Clock for RealClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// What a loop serves: it is handed events and asked for timed work.
pub trait Service<T: Transport> {
    /// Handles one event of the transport, at `now`.
    fn on_event(&mut self, transport: &mut T, event: Event, now: Duration);

    /// Does the work that is due at `now` and that no event drives (timers,
    /// queued work); true if it did anything.
    fn poll_work(&mut self, transport: &mut T, now: Duration) -> bool;

    /// When the service next has timed work, if ever.
    fn next_deadline(&self) -> Option<Duration>;

    /// Why the service cannot go on, once it cannot (its state contradicts
    /// what its peers know, say); [`Reactor::run`] then returns. A halted
    /// service does nothing more with events or timed work.
    fn halted(&self) -> Option<&str> {
        None
    }
}

/// How long a loop keeps polling after its last activity before it blocks
/// (seed 000 §2.2's busy-polling, bounded so that an idle loop sleeps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollBudget {
    /// Longest poll after the last activity; zero blocks at once.
    pub spin: Duration,
    /// Most empty polls in one such window (bounds the loop's passes too).
    pub max_empty_polls: u32,
}

impl PollBudget {
    /// Block as soon as nothing is ready.
    pub const BLOCK: PollBudget = PollBudget { spin: Duration::ZERO, max_empty_polls: 0 };

    /// True while a loop whose last activity was at `since`, after `empty`
    /// empty polls, should poll again rather than block. The clock is read
    /// on every [`CLOCK_EVERY`]th empty poll only: a read costs about as
    /// much as a poll (~50 ns on this VM), and a sub-microsecond round
    /// trip is detected one poll later for every read in its way.
    pub fn keep_polling(&self, since: Instant, empty: u32) -> bool {
        empty < self.max_empty_polls && (!empty.is_multiple_of(CLOCK_EVERY) || since.elapsed() < self.spin)
    }
}

/// Stretches a waiter's [`PollBudget`] to the round trips it has been
/// seeing, so that two ends which both block after their budget cannot
/// settle into paying two wake-ups a round trip.
///
/// The chain it breaks: a closed-loop client polls for its budget, then
/// blocks. If one reply comes late (a preemption, a slow request), the
/// client's wake-up can outlast the server's own budget; the server blocks
/// too, and from then on every request wakes the server and every reply
/// wakes the client, each wake-up (tens of µs on a loaded guest) longer
/// than the other end's budget, so the chain holds until one wake-up
/// happens to be quick (80-95 µs a write over shared memory where a write
/// otherwise takes 1-2 µs: `docs/bench.md`, "Auto that cannot stay
/// wrong"). Linux's hybrid polling for block devices makes the same kind of
/// choice from the mean completion time.
///
/// The pacer keeps an exponentially weighted mean of the waits it is told
/// of (the newest weighing half) and offers twice that as the spin, while
/// that stays within [`ReplyPacer::MAX_SPIN`]: after one or two slow waits the waiter spins
/// through the server's wake-up, gets the reply at once, and sends its next
/// request while the server still polls, which ends the chain. A wait
/// longer than the bound is left to block (a wake-up is small beside it,
/// and a long spin would take the core from the work it waits for). A
/// [`PollBudget::BLOCK`] budget, or one already longer, is never changed.
/// No I/O and no clock: the caller times its waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplyPacer {
    /// Mean of the recorded waits, in ns (weight 1/2 for the newest).
    mean_ns: u64,
}

impl ReplyPacer {
    /// The longest spin the pacer offers.
    pub const MAX_SPIN: Duration = Duration::from_micros(250);

    /// A pacer that has seen no wait (it offers the base budget).
    pub const fn new() -> ReplyPacer {
        ReplyPacer { mean_ns: 0 }
    }

    /// Takes in one wait: from the start of waiting for a reply to its
    /// arrival.
    pub fn record(&mut self, wait: Duration) {
        let wait_ns = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX).min(u64::MAX / 4);
        self.mean_ns = self.mean_ns / 2 + wait_ns / 2;
    }

    /// The mean wait so far.
    pub fn mean(&self) -> Duration {
        Duration::from_nanos(self.mean_ns)
    }

    /// The budget for the next wait: `base`, or a spin of twice the mean
    /// wait where that is longer than `base`'s and within
    /// [`ReplyPacer::MAX_SPIN`] (the spin then bounds it, not a count of
    /// polls).
    pub fn budget(&self, base: PollBudget) -> PollBudget {
        let spin = Duration::from_nanos(self.mean_ns.saturating_mul(2));
        if base == PollBudget::BLOCK || spin <= base.spin || spin > ReplyPacer::MAX_SPIN {
            return base;
        }
        PollBudget { spin, max_empty_polls: u32::MAX }
    }
}

/// Empty polls between two reads of the clock in [`PollBudget::keep_polling`].
pub const CLOCK_EVERY: u32 = 16;

impl Default for PollBudget {
    /// 30 µs and 1024 polls: longer than a sm or tcp round trip on one
    /// host (9-25 µs), short enough that idle CPU stays ~0.
    fn default() -> Self {
        PollBudget { spin: Duration::from_micros(30), max_empty_polls: 1024 }
    }
}

/// A transport and the service it feeds.
pub struct Reactor<T: Transport, S: Service<T>> {
    /// The transport (public: a service's owner may connect or listen).
    pub transport: T,
    /// The service.
    pub service: S,
    events: Vec<Event>,
}

impl<T: Transport, S: Service<T>> Reactor<T, S> {
    /// A loop feeding `service` from `transport`.
    pub fn new(transport: T, service: S) -> Reactor<T, S> {
        Reactor { transport, service, events: Vec::with_capacity(EVENTS_PER_TURN) }
    }

    /// One pass at `now`: the transport's events (at most
    /// [`EVENTS_PER_TURN`]) to the service, then its timed work. True if
    /// anything happened.
    pub fn turn(&mut self, now: Duration) -> bool {
        debug_assert!(self.events.is_empty());
        let n = self.transport.poll(&mut self.events, EVENTS_PER_TURN);
        assert!(n <= EVENTS_PER_TURN, "poll returned more than asked");
        for event in self.events.drain(..) {
            self.service.on_event(&mut self.transport, event, now);
        }
        let worked = self.service.poll_work(&mut self.transport, now);
        n > 0 || worked
    }

    /// Turns until `stop` is set or the service halts, reading `clock`; polls after activity as
    /// `budget` allows, then blocks until an event, the service's next
    /// deadline or [`IDLE_WAIT`]. A failed wait is reported again by the
    /// next poll, as a disconnect or an event; it is not retried hot: the
    /// loop sleeps at most [`IDLE_WAIT`] per failure.
    pub fn run(&mut self, clock: &impl Clock, stop: &AtomicBool, budget: PollBudget) {
        let mut since = Instant::now();
        let mut empty = 0u32;
        while !stop.load(Ordering::Relaxed) && self.service.halted().is_none() {
            if self.turn(clock.now()) {
                since = Instant::now();
                empty = 0;
                continue;
            }
            empty += 1;
            if budget.keep_polling(since, empty) {
                continue;
            }
            let now = clock.now();
            let wait = match self.service.next_deadline() {
                Some(deadline) => deadline.saturating_sub(now).min(IDLE_WAIT),
                None => IDLE_WAIT,
            };
            if !wait.is_zero() && self.transport.wait(wait).is_err() {
                std::thread::sleep(wait);
            }
        }
    }
}

#[cfg(test)]
mod tests;
