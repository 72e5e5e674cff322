//! When a leader may compact: not while a follower that is keeping up
//! still needs the entries a compaction would drop.
//!
//! Why: a leader compacts once [`ReplicaConfig::snapshot_every`] entries
//! are applied past its last snapshot, at its applied index. Under load the
//! slower follower trails that index: its window of appends in flight
//! (raft-rs's `max_inflight_msgs`) is full while the faster follower's
//! acknowledgements commit, so the entries it has not been sent yet are
//! among those applied. Compacting then leaves raft-rs no way to send them
//! but a snapshot of the whole machine, for a follower that was a few
//! hundred entries behind (seen: `pmwire kv --cluster` under 64 clients
//! sent one at index 30171, and the follower's restore failed).
//!
//! The rule: a leader defers the compaction while a recently active peer
//! (heard from within an election timeout: raft-rs's `recent_active`,
//! kept by check-quorum) that is not already taking a snapshot has not
//! been sent every entry up to the applied index; but only up to twice
//! the snapshot interval past the last snapshot, so the log stays bounded
//! (a follower still behind then takes the snapshot). A follower, or a
//! peer that is down, defers nothing.
//!
//! [`ReplicaConfig::snapshot_every`]: super::ReplicaConfig::snapshot_every

use raft::{ProgressState, StateRole};
use transport::Transport;

use super::{PeerAddr, Replica};
use crate::state::StateMachine;
use crate::store::Durable;

impl<T: Transport, D: Durable, M: StateMachine> Replica<T, D, M>
where
    T::Addr: PeerAddr,
{
    /// Whether a compaction at the applied index is to wait (module docs).
    pub(super) fn defer_compaction(&self) -> bool {
        if self.raw.raft.state != StateRole::Leader {
            return false;
        }
        let limit = self.snapshot_index.saturating_add(self.config.snapshot_every.saturating_mul(2));
        if self.applied >= limit {
            return false;
        }
        let me = self.config.id;
        let applied = self.applied;
        self.raw.raft.prs().iter().any(|(&id, pr)| id != me && pr.recent_active && pr.state != ProgressState::Snapshot && pr.next_idx <= applied)
    }
}
