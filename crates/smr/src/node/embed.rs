//! The embedding API: a server that owns a replica inside its own event
//! loop (its clients are its own, not SMR1 transport clients) drives it
//! with `Reactor::turn`-like calls and, between turns:
//! - [`Replica::propose`]: any member takes the machine's data. On the
//!   leader the outcome comes back once the entry is applied at the index
//!   and term it was proposed at ([`Done::Applied`], the machine's
//!   output), or as a failure. On a follower the entry goes to the leader
//!   by raft-rs's proposal forwarding, tagged with this member's id, its
//!   incarnation's nonce and a sequence number (`crate::forward`), and is
//!   done when this member applies it: its own machine's output is the
//!   reply (applied means committed on a majority). A copy the network
//!   duplicated is never applied twice (the replicated table of
//!   `crate::forward`); a proposal a leader dropped fails within the bound
//!   below as [`Failure::NoQuorum`] (outcome unknown), or as
//!   [`Failure::NotProposed`] once an entry of a later term is applied
//!   here (it can no longer apply);
//! - [`Replica::read_index`]: done ([`Done::Readable`]) once the machine
//!   has applied up to a read index a majority confirmed (ReadIndex, Raft
//!   thesis §6.4), on the leader or, forwarded by raft-rs, on a follower
//!   (the leader confirms its commit index and answers it; the follower
//!   waits until it applied that far): the server then reads
//!   [`Replica::machine`] and what it reads is linearizable. A read's
//!   context is (counter, member id, nonce): unique in the cluster, since
//!   the leader merges requests of equal context;
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
//! an entry applied (committed) at the index and term it was proposed at
//! (the leader's), or for the one copy of a forwarded proposal its table
//! applied (a follower's).

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

/// A halted replica takes no proposal or read. (While no leader is known,
/// during an election, a follower holds its proposals and reads until one
/// is, within the bound.)
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
#[error("this replica halted and takes nothing (leader field: {leader}, always 0)")]
pub struct NotLeader {
    /// The leader this replica knows (0: none).
    pub leader: u64,
}

/// Why a ticket failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Leadership was lost (or the entry's place taken by another term's)
    /// before the proposal was known applied, or (a forwarded proposal)
    /// the member caught up from a snapshot that may hold it: it may or
    /// may not be applied. A read is simply not done.
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
    /// The entry is larger than the replicated log takes
    /// ([`Replica::max_entry_bytes`]): certainly not applied.
    TooLarge {
        /// The entry's bytes.
        bytes: u64,
        /// The most an entry may hold.
        max: u64,
    },
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
    /// A forwarded proposal, by its sequence number (its ticket waits in
    /// `Replica::forwarded`).
    Forwarded(u64),
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
    /// True if this replica leads (its proposals go to its own log).
    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader && self.halted.is_none()
    }

    fn ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        Ticket(self.next_ticket)
    }

    /// Proposes `data` for the machine, on the leader or (forwarded) on a
    /// follower (module docs). It goes with the other proposals of this
    /// turn; its outcome comes from [`Replica::take_done`].
    pub fn propose(&mut self, data: Vec<u8>) -> Result<Ticket, NotLeader> {
        self.propose_as(data, &[])
    }

    /// [`Replica::propose`] for a client that authenticated as
    /// `principal` (at most [`crate::forward::MAX_PRINCIPAL_BYTES`]; a
    /// longer name is not carried). A forwarded entry carries it in its
    /// context; the leader's own entries do not (its clients are checked
    /// at its own door).
    pub fn propose_as(&mut self, data: Vec<u8>, principal: &[u8]) -> Result<Ticket, NotLeader> {
        if self.is_leader() {
            let ticket = self.ticket();
            self.proposed_ids.push(Waiter::Ticket(ticket));
            self.proposed.push(raft::eraftpb::Entry { data: data.into(), context: (&[ENTRY_MACHINE][..]).into(), ..Default::default() });
            return Ok(ticket);
        }
        if self.halted.is_some() {
            return Err(NotLeader { leader: 0 });
        }
        let principal = if principal.len() <= crate::forward::MAX_PRINCIPAL_BYTES { principal } else { &[] };
        self.forward_seq += 1;
        let seq = self.forward_seq;
        let term = self.raw.raft.term;
        let ctx = crate::forward::ForwardContext { origin: self.config.id, nonce: self.nonce, seq, term, principal: principal.to_vec() };
        let ticket = self.ticket();
        self.forwarded.insert(seq, (ticket, term, self.ticks));
        self.proposed_ids.push(Waiter::Forwarded(seq));
        self.proposed.push(raft::eraftpb::Entry { data: data.into(), context: ctx.encode().into(), ..Default::default() });
        Ok(ticket)
    }

    /// Asks for a linearizable read, on the leader or (forwarded) on a
    /// follower: done ([`Done::Readable`]) once a majority confirmed the
    /// leader's commit index as of a moment after this call and this
    /// replica's machine has applied it.
    pub fn read_index(&mut self) -> Result<Ticket, NotLeader> {
        if self.halted.is_some() {
            return Err(NotLeader { leader: 0 });
        }
        let ticket = self.ticket();
        let ctx = self.next_read;
        self.next_read += 1;
        self.reads.insert(ctx, (ReadWaiter::Ticket(ticket), self.ticks, self.ticks));
        let bytes = self.read_ctx(ctx);
        self.raw.read_index(bytes);
        Ok(ticket)
    }

    /// A read's context on the wire: counter u64, member id u64, nonce u64.
    pub(super) fn read_ctx(&self, counter: u64) -> Vec<u8> {
        let mut b = Vec::with_capacity(24);
        for v in [counter, self.config.id, self.nonce] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// The counter of a read context this incarnation asked, if it is one.
    pub(super) fn own_read_ctx(&self, b: &[u8]) -> Option<u64> {
        if b.len() != 24 || pmem::le::get_u64(b, 8) != self.config.id || pmem::le::get_u64(b, 16) != self.nonce {
            return None;
        }
        Some(pmem::le::get_u64(b, 0))
    }

    /// Forwarded proposals waiting to be applied here.
    pub fn forwarding(&self) -> usize {
        self.forwarded.len()
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
