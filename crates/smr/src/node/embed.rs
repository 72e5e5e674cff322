//! The embedding API: a server that owns a replica inside its own event
//! loop (its clients are its own, not SMR1 transport clients) drives it
//! with `Reactor::turn`-like calls and, between turns:
//! - [`Replica::propose`]: the leader takes the machine's data; the outcome
//!   comes back once the entry is applied at the index and term it was
//!   proposed at ([`Done::Applied`], the machine's output), or as a failure;
//! - [`Replica::read_index`]: done ([`Done::Readable`]) once the machine
//!   has applied up to a read index a majority confirmed (ReadIndex, Raft
//!   thesis §6.4): the server then reads [`Replica::machine`] and what it
//!   reads is linearizable;
//! - [`Replica::take_done`]: the outcomes, each ticket once;
//! - [`Replica::status`] and [`Replica::progress`]: role, leader, term,
//!   commit, applied, last index, and on the leader each member's match
//!   index (for INFO replication, ROLE, WAIT).
//!
//! Bounded failure: every ticket is done within
//! [`super::ReplicaConfig::pending_timeout_elections`] election timeouts.
//! A leader that lost its majority fails its proposals and reads with
//! [`Failure::NoQuorum`] by then (and raft-rs's check-quorum makes it step
//! down after an election timeout without hearing from a majority,
//! failing them with [`Failure::LeadershipLost`]); a read is never served
//! from a read index no majority confirmed, so never stale.
//!
//! Invariants: a ticket is done exactly once; [`Done::Applied`] only for
//! an entry applied (committed) at the index and term it was proposed at.

use raft::{ProgressState, StateRole};
use thiserror::Error;
use transport::{RequestId, Transport};

use super::{PeerAddr, Replica, ENTRY_MACHINE};
use crate::command::Response;
use crate::state::StateMachine;
use crate::store::Durable;

/// A proposal or read handed to the replica by its embedder: the handle
/// its outcome comes back with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(pub u64);

/// Only the leader takes proposals and reads.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
#[error("not the leader (the leader this replica knows: {leader}; 0 if none)")]
pub struct NotLeader {
    /// The leader this replica knows (0: none).
    pub leader: u64,
}

/// Why a ticket failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Leadership was lost (or the entry's place taken by another term's)
    /// before the proposal was known applied: it may or may not be
    /// applied. A read is simply not done.
    LeadershipLost,
    /// Not done within the bound ([`super::ReplicaConfig::pending_timeout_elections`]):
    /// no majority confirmed it in time. A proposal may still be applied
    /// later (its outcome is unknown); a read was not served.
    NoQuorum,
    /// Leadership was lost before the proposal reached the log: it is
    /// certainly not applied.
    NotProposed,
    /// The replica halted ([`Replica::halted`]).
    Halted,
}

/// The outcome of a ticket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Done<O> {
    /// The proposal was applied at `index`, in the term it was proposed
    /// in, and the machine answered `output`.
    Applied {
        /// Its log index.
        index: u64,
        /// What [`StateMachine::apply`] returned.
        output: O,
    },
    /// The machine has applied up to `index`, a read index a majority
    /// confirmed after the read was asked: read the machine now.
    Readable {
        /// The read index.
        index: u64,
    },
    /// It failed.
    Failed(Failure),
}

/// What the leader knows of one member's log (raft-rs's `Progress`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FollowerProgress {
    /// The member's id.
    pub id: u64,
    /// The highest index known to be in its log.
    pub matched: u64,
    /// The next index the leader sends it.
    pub next: u64,
    /// Probing, replicating, or being sent a snapshot.
    pub state: ProgressState,
    /// A learner (receives the log, does not vote).
    pub learner: bool,
    /// Heard from within the current election timeout.
    pub recent_active: bool,
}

/// Who waits for a proposal.
pub(crate) enum Waiter {
    /// An SMR1 client's request (a write or a membership change).
    Client(RequestId),
    /// An embedder's ticket.
    Ticket(Ticket),
}

/// Who waits for a read.
pub(crate) enum ReadWaiter {
    /// An SMR1 client's GET of a key.
    Client(RequestId, Vec<u8>),
    /// An embedder's ticket.
    Ticket(Ticket),
}

/// An applied proposal's outcome, held until its batch is persisted.
pub(crate) enum Pending<O> {
    /// An SMR1 answer.
    Smr1(Response),
    /// The machine's output for an embedder's proposal, applied at index.
    Output(u64, O),
    /// Another term's entry took the proposal's index.
    Superseded,
}

impl<T: Transport, D: Durable, M: StateMachine> Replica<T, D, M>
where
    T::Addr: PeerAddr,
{
    fn not_leader(&self) -> Option<NotLeader> {
        let r = &self.raw.raft;
        (r.state != StateRole::Leader || self.halted.is_some()).then_some(NotLeader { leader: if self.halted.is_some() { 0 } else { r.leader_id } })
    }

    fn ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        Ticket(self.next_ticket)
    }

    /// Proposes `data` for the machine (the leader only). It goes to the
    /// log with the other proposals of this turn; its outcome comes from
    /// [`Replica::take_done`].
    pub fn propose(&mut self, data: Vec<u8>) -> Result<Ticket, NotLeader> {
        if let Some(e) = self.not_leader() {
            return Err(e);
        }
        let ticket = self.ticket();
        self.proposed_ids.push(Waiter::Ticket(ticket));
        self.proposed.push(raft::eraftpb::Entry { data: data.into(), context: (&[ENTRY_MACHINE][..]).into(), ..Default::default() });
        Ok(ticket)
    }

    /// Asks for a linearizable read (the leader only): done
    /// ([`Done::Readable`]) once a majority confirmed this leader's commit
    /// index as of now and the machine has applied it.
    pub fn read_index(&mut self) -> Result<Ticket, NotLeader> {
        if let Some(e) = self.not_leader() {
            return Err(e);
        }
        let ticket = self.ticket();
        let ctx = self.next_read;
        self.next_read += 1;
        self.reads.insert(ctx, (ReadWaiter::Ticket(ticket), self.ticks, self.ticks));
        self.raw.read_index(ctx.to_le_bytes().to_vec());
        Ok(ticket)
    }

    /// The outcomes since the last call, each ticket once.
    pub fn take_done(&mut self) -> Vec<(Ticket, Done<M::Output>)> {
        std::mem::take(&mut self.done)
    }

    /// True if an outcome is waiting to be taken.
    pub fn has_done(&self) -> bool {
        !self.done.is_empty()
    }

    /// On the leader, every other member's progress (by id); elsewhere
    /// nothing.
    pub fn progress(&self) -> Vec<FollowerProgress> {
        let r = &self.raw.raft;
        if r.state != StateRole::Leader {
            return Vec::new();
        }
        let learners = self.conf_state().learners;
        let mut out: Vec<FollowerProgress> = r
            .prs()
            .iter()
            .filter(|(&id, _)| id != self.config.id)
            .map(|(&id, p)| FollowerProgress { id, matched: p.matched, next: p.next_idx, state: p.state, learner: learners.contains(&id), recent_active: p.recent_active })
            .collect();
        out.sort_by_key(|p| p.id);
        out
    }
}
