//! When a replica compacts: taking a snapshot stalls its loop for as long
//! as encoding the machine takes (a whole keyspace), so the members of a
//! group must not stall together, and the leader (whose stall silences
//! every follower) stalls least often.
//!
//! Why: every member used to compact at the same applied index (each
//! [`ReplicaConfig::snapshot_every`] entries). Under load (`pmwire kv
//! --cluster`, 64 clients of 1 KiB SETs) both followers then stalled
//! 105-130 ms at once at index 10,000; the leader heard from neither within
//! its election timeout (100 ms at 10 ms ticks), check-quorum made it step
//! down, and the group elected a new leader mid-run (`max_compact_us` in
//! `INFO replication` showed the stalls).
//!
//! The rules:
//! - the members take turns: a follower (or learner) compacts once its
//!   applied index crosses a boundary `k × members × every + rank ×
//!   every`, `rank` being its place among the members by id. Members apply
//!   the same log, so no two cross a boundary within `every` entries of
//!   each other: one follower stalls while the other keeps the leader's
//!   quorum (and commits). Each member so compacts every `members`
//!   intervals. A boundary less than one interval after the last
//!   compaction (a forced one: an add, a filling log) is skipped;
//! - a leader compacts once [`ReplicaConfig::leader_compaction_intervals`]
//!   intervals are applied past its last snapshot (1: every interval);
//! - a leader defers that compaction while a recently active peer (heard
//!   from within an election timeout: raft-rs's `recent_active`, kept by
//!   check-quorum) that is not already taking a snapshot has not been
//!   sent every entry up to the applied index, up to one interval more,
//!   so the log stays bounded. Why: under load the slower follower trails
//!   the applied index (its window of appends in flight is full while the
//!   faster follower's acknowledgements commit); compacting then leaves
//!   raft-rs no way to send it the entries but a snapshot of the whole
//!   machine (seen: one at index 30171 whose restore failed);
//! - a log more than half full, or a replica just added, compacts at once
//!   (`Replica::maybe_compact`);
//! - a machine that keeps its own state ([`StateMachine::keeps_state`])
//!   compacts by a deferred snapshot that copies nothing and does not
//!   stall: it takes no turns, leader or follower, and compacts every
//!   interval (the leader still defers for a trailing peer, which would
//!   otherwise need the whole machine encoded). Holding its log longer
//!   would only hold the pool buffers its entries name. Its record names
//!   no index past the machine's applied one: while the last entries were
//!   not the machine's, it waits (`Replica::maybe_compact`).
//!
//! [`ReplicaConfig::snapshot_every`]: super::ReplicaConfig::snapshot_every
//! [`ReplicaConfig::leader_compaction_intervals`]: super::ReplicaConfig::leader_compaction_intervals

use raft::{ProgressState, StateRole};
use transport::Transport;

use super::{PeerAddr, Replica};
use crate::state::StateMachine;
use crate::store::Durable;

/// The first boundary at or after `from` of a member whose turn comes at
/// `phase` in every `period` (boundaries at `k × period + phase`, k ≥ 0).
pub(super) fn next_boundary(from: u64, period: u64, phase: u64) -> u64 {
    assert!(period > 0, "a period of at least one entry");
    assert!(phase < period, "a phase within the period");
    if from <= phase {
        return phase;
    }
    let k = (from - phase).div_ceil(period);
    k.saturating_mul(period).saturating_add(phase)
}

/// A member's turn among `members` (sorted ids) compacting every `every`
/// entries in rotation: its (period, phase). A member not listed takes
/// the first turn.
pub(super) fn turn(every: u64, me: u64, members: &[u64]) -> (u64, u64) {
    let n = members.len().max(1) as u64;
    let rank = members.iter().filter(|&&m| m < me).count() as u64 % n;
    (every.saturating_mul(n), every.saturating_mul(rank))
}

impl<T: Transport, D: Durable, M: StateMachine> Replica<T, D, M>
where
    T::Addr: PeerAddr,
{
    /// Whether a compaction counted in entries is due now (module docs):
    /// the follower's staggered boundary, or the leader's interval.
    pub(super) fn compaction_due(&self) -> bool {
        let every = self.config.snapshot_every.max(1);
        let (applied, last) = (self.applied, self.snapshot_index);
        if applied <= last {
            return false;
        }
        if self.raw.raft.state == StateRole::Leader {
            return applied >= last.saturating_add(every.saturating_mul(self.leader_intervals())) && !self.defer_compaction();
        }
        if self.machine.keeps_state() {
            return applied >= last.saturating_add(every);
        }
        let cs = self.conf_state();
        let mut members: Vec<u64> = cs.voters.iter().chain(&cs.learners).copied().collect();
        members.sort_unstable();
        let (period, phase) = turn(every, self.config.id, &members);
        applied >= next_boundary(last.saturating_add(every), period, phase)
    }

    /// Intervals between a leader's compactions: one for a machine that
    /// keeps its own state (nothing stalls), else the configured number.
    fn leader_intervals(&self) -> u64 {
        if self.machine.keeps_state() {
            1
        } else {
            self.config.leader_compaction_intervals.max(1)
        }
    }

    /// Whether a leader's compaction at the applied index is to wait (module docs).
    pub(super) fn defer_compaction(&self) -> bool {
        if self.raw.raft.state != StateRole::Leader {
            return false;
        }
        let intervals = self.leader_intervals().saturating_add(1);
        let limit = self.snapshot_index.saturating_add(self.config.snapshot_every.saturating_mul(intervals));
        if self.applied >= limit {
            return false;
        }
        let me = self.config.id;
        let applied = self.applied;
        self.raw.raft.prs().iter().any(|(&id, pr)| id != me && pr.recent_active && pr.state != ProgressState::Snapshot && pr.next_idx <= applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_take_turns_an_interval_apart() {
        let members = [1, 2, 3];
        let turns: Vec<(u64, u64)> = members.iter().map(|&m| turn(1000, m, &members)).collect();
        assert_eq!(turns, vec![(3000, 0), (3000, 1000), (3000, 2000)]);
        assert_eq!(next_boundary(1, 3000, 0), 3000);
        assert_eq!(next_boundary(0, 3000, 1000), 1000);
        assert_eq!(next_boundary(1000, 3000, 1000), 1000, "at or after");
        assert_eq!(next_boundary(1001, 3000, 1000), 4000);
        // From a common start (one interval past the last compaction at 0)
        // the members' first turns come an interval apart: 1000, 2000, 3000.
        let firsts: Vec<u64> = turns.iter().map(|&(p, ph)| next_boundary(1000, p, ph)).collect();
        assert_eq!(firsts, vec![3000, 1000, 2000]);
        // Members apply the same log: from any common start, their
        // boundaries are an interval apart or more.
        for last in [1u64, 500, 1234, 99_999] {
            let mut b: Vec<u64> = turns.iter().map(|&(p, ph)| next_boundary(last, p, ph)).collect();
            b.sort_unstable();
            assert!(b.windows(2).all(|w| w[1] - w[0] >= 1000), "{b:?}");
        }
    }

    #[test]
    fn a_member_not_listed_and_a_single_member_take_the_first_turn() {
        assert_eq!(turn(100, 7, &[]), (100, 0));
        assert_eq!(turn(100, 1, &[1]), (100, 0));
        assert_eq!(turn(100, 9, &[2, 4, 9]), (300, 200));
    }
}
