//! A member's liveness counters as `INFO replication` lines
//! (`pmwire_smr::node::Liveness`): how close the member came to an
//! election under load. Maxima since the member started, in µs or ticks.

use pmwire_smr::node::{Counters, Liveness};

/// Intervals of the replica's `snapshot_every` a leader applies between
/// two compactions (`pmwire_smr::node::compaction`): a leader's snapshot
/// encodes the whole keyspace in its loop, silencing both followers for
/// that long, so it compacts every sixth interval (each follower, taking
/// turns, every third).
pub(crate) const LEADER_COMPACTION_INTERVALS: u64 = 6;

/// The lines, Redis's `field:value` style.
pub(crate) fn info(l: Liveness, c: &Counters) -> String {
    format!(
        "max_turn_gap_us:{}\r\nmax_heartbeat_gap_us:{}\r\nmax_leader_silence_us:{}\r\nmax_election_elapsed_ticks:{}\r\n\
         max_append_us:{}\r\nmax_apply_us:{}\r\nmax_compact_us:{}\r\nelections_started:{}\r\nraft_snapshots:{}\r\nraft_snapshot_turns:{}\r\nraft_entries_held:{}\r\n\
         raft_unsent:{}\r\nraft_acks_superseded:{}\r\nraft_sends_held:{}\r\n",
        l.max_turn_gap_us,
        l.max_sent_gap_us,
        l.max_heard_gap_us,
        l.max_election_elapsed_ticks,
        l.max_append_us,
        l.max_apply_us,
        l.max_compact_us,
        l.campaigns,
        c.snapshots,
        c.snapshot_turns,
        c.entries_held,
        c.unsent,
        c.superseded,
        c.sends_held
    )
}
