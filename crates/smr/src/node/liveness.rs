//! Liveness counters: how close a replica came to losing (or starting)
//! an election, in the replica's own time (the `now` of its turns), for
//! `INFO replication` and the load tests.
//!
//! What is measured, each a maximum since start:
//! - the longest gap between two turns (`max_turn_gap_us`): a loop that
//!   spent that long elsewhere (serving clients, applying, compacting, or
//!   descheduled) sent and heard nothing meanwhile;
//! - on a leader, the longest gap between two messages sent to one
//!   follower (`max_sent_gap_us`): any message of the leader's term
//!   restarts that follower's election timer;
//! - on a follower, the longest gap between two messages heard from its
//!   leader in one term (`max_heard_gap_us`);
//! - on a follower, the most ticks its election timer reached
//!   (`max_election_elapsed_ticks`) against the fewest an election needs
//!   (`election_ticks`): the margin left;
//! - the longest storage steps of one `Ready`: appending (`max_append_us`),
//!   applying a batch with its persist (`max_apply_us`), a compaction
//!   (`max_compact_us`), measured with the process clock (counters only:
//!   nothing decides on them);
//! - elections this replica started (`campaigns`: it became a
//!   pre-candidate or candidate).
//!
//! Invariants: gaps are only measured between two events of one kind
//! and one leader term (a new term or leader starts afresh); counters
//! never decrease.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The counters (module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Liveness {
    /// Longest gap between two turns, µs.
    pub max_turn_gap_us: u64,
    /// Leader: longest gap between two messages sent to one follower, µs.
    pub max_sent_gap_us: u64,
    /// Follower: longest gap between two messages heard from its leader, µs.
    pub max_heard_gap_us: u64,
    /// Follower: the highest election timer seen, in ticks.
    pub max_election_elapsed_ticks: u64,
    /// Longest append of one `Ready`'s entries and hard state, µs.
    pub max_append_us: u64,
    /// Longest apply of one batch of committed entries with its persist, µs.
    pub max_apply_us: u64,
    /// Longest compaction (snapshot taken, log compacted), µs.
    pub max_compact_us: u64,
    /// Elections this replica started.
    pub campaigns: u64,
}

/// What the counters are kept from.
#[derive(Debug, Default)]
pub(super) struct Tracker {
    pub(super) counters: Liveness,
    last_turn: Option<Duration>,
    /// Per follower: the term and time of the last message sent to it.
    last_sent: BTreeMap<u64, (u64, Duration)>,
    /// The leader, term and time of the last message heard from it.
    last_heard: Option<(u64, u64, Duration)>,
    campaigning: bool,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Tracker {
    /// A turn starts at `now`.
    pub(super) fn turn(&mut self, now: Duration) {
        if let Some(last) = self.last_turn {
            let gap = micros(now.saturating_sub(last));
            self.counters.max_turn_gap_us = self.counters.max_turn_gap_us.max(gap);
        }
        self.last_turn = Some(now);
    }

    /// The leader of `term` sent a message to `to` at `now`.
    pub(super) fn sent(&mut self, to: u64, term: u64, now: Duration) {
        if let Some((t, at)) = self.last_sent.insert(to, (term, now)) {
            if t == term {
                self.counters.max_sent_gap_us = self.counters.max_sent_gap_us.max(micros(now.saturating_sub(at)));
            }
        }
    }

    /// A message of `term` came from `leader` at `now`.
    pub(super) fn heard(&mut self, leader: u64, term: u64, now: Duration) {
        if let Some((l, t, at)) = self.last_heard.replace((leader, term, now)) {
            if (l, t) == (leader, term) {
                self.counters.max_heard_gap_us = self.counters.max_heard_gap_us.max(micros(now.saturating_sub(at)));
            }
        }
    }

    /// A follower's election timer after a tick.
    pub(super) fn election_elapsed(&mut self, ticks: usize) {
        self.counters.max_election_elapsed_ticks = self.counters.max_election_elapsed_ticks.max(ticks as u64);
    }

    /// Whether the replica is a (pre-)candidate after a turn: an election
    /// it started is counted once.
    pub(super) fn campaigning(&mut self, now: bool) {
        if now && !self.campaigning {
            self.counters.campaigns += 1;
        }
        self.campaigning = now;
    }
}

/// Which storage step a [`Timed`] measures.
#[derive(Clone, Copy, Debug)]
pub(super) enum Step {
    Append,
    Apply,
    Compact,
}

/// A storage step's start; [`Timed::done`] records its length.
pub(super) struct Timed(Instant, Step);

impl Timed {
    pub(super) fn start(step: Step) -> Timed {
        Timed(Instant::now(), step)
    }

    pub(super) fn done(self, counters: &mut Liveness) {
        let us = micros(self.0.elapsed());
        let max = match self.1 {
            Step::Append => &mut counters.max_append_us,
            Step::Apply => &mut counters.max_apply_us,
            Step::Compact => &mut counters.max_compact_us,
        };
        *max = (*max).max(us);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn gaps_are_kept_per_term_and_leader() {
        let mut t = Tracker::default();
        t.turn(ms(0));
        t.turn(ms(30));
        t.turn(ms(35));
        assert_eq!(t.counters.max_turn_gap_us, 30_000);
        t.heard(1, 5, ms(0));
        t.heard(1, 5, ms(40));
        t.heard(2, 6, ms(500)); // a new leader: no gap across it
        t.heard(2, 6, ms(510));
        assert_eq!(t.counters.max_heard_gap_us, 40_000);
        t.sent(2, 7, ms(0));
        t.sent(3, 7, ms(1));
        t.sent(2, 7, ms(20));
        t.sent(3, 8, ms(900)); // a new term
        assert_eq!(t.counters.max_sent_gap_us, 20_000);
    }

    #[test]
    fn an_election_is_counted_once_and_the_timer_is_kept_at_its_highest() {
        let mut t = Tracker::default();
        t.campaigning(true);
        t.campaigning(true);
        t.campaigning(false);
        t.campaigning(true);
        assert_eq!(t.counters.campaigns, 2);
        t.election_elapsed(7);
        t.election_elapsed(3);
        assert_eq!(t.counters.max_election_elapsed_ticks, 7);
    }
}
