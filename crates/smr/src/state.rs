//! The seam between a replica and what it replicates: [`StateMachine`].
//!
//! A replica orders entries (Raft); a state machine gives them meaning. The
//! replica hands every committed entry of the user's kind to
//! [`StateMachine::apply`], in log order, exactly once per index on every
//! member, and after each batch of applied entries calls
//! [`StateMachine::persist_applied`] once, before it answers anyone whose
//! entry was in the batch (SMR1 clients' writes, an entry kind of their
//! own, reach a machine that serves them through `crate::smr1` instead).
//! Membership changes, and the sessions that make their retries
//! exactly-once, are the replica's business, not the machine's; a machine
//! that SMR1 clients write to keeps their sessions with its state, since
//! both must be committed together (`crate::kvmap::KvMap` does).
//!
//! Determinism is the machine's contract: the same entries, applied in the
//! same order from the same starting state (a snapshot, or empty), give the
//! same state and the same outputs on every member. So a machine never
//! reads a clock, a random generator or the iteration order of a hash map
//! while applying; whatever it needs of time or chance is written into the
//! entry by the member that proposed it.
//!
//! Durability: a volatile machine (a map in DRAM) starts empty, or from the
//! replica's last snapshot, and [`StateMachine::applied`] is that
//! snapshot's index; a persistent machine (a keyspace in persistent memory)
//! keeps its applied index durably with its state, committed by
//! [`StateMachine::persist_applied`] in the same failure-atomic step as the
//! state it describes, and reports it after a restart, so the replica
//! replays only the entries after it.

use thiserror::Error;

/// Why a snapshot could not be restored.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum RestoreError {
    /// Not a snapshot of this machine, or a bad checksum.
    #[error("snapshot corrupt: {0}")]
    Corrupt(&'static str),
    /// The machine could not store the snapshot's state (a full pool).
    #[error("snapshot not restored: {0}")]
    Store(String),
}

/// Why applied entries could not be made durable. The replica cannot go
/// on past this (its state would no longer be the log's): it halts with
/// the reason, as PMDK crashes on an unrecoverable persistence failure.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("applied entries not persisted: {0}")]
pub struct PersistError(pub String);

/// A deterministic state machine driven by a replica.
pub trait StateMachine {
    /// What applying one entry answers to the member that proposed it.
    type Output;

    /// Applies the committed entry at log `index` (one more than the last
    /// applied), whose bytes are what its proposer proposed. Must be
    /// deterministic (see the module docs); an entry it cannot interpret
    /// is answered as an error and changes nothing, identically on every
    /// member.
    fn apply(&mut self, index: u64, data: &[u8]) -> Self::Output;

    /// Makes everything applied so far durable (a persistent machine
    /// commits here, its applied index with it; a volatile one does
    /// nothing). Called once per batch of applies, before any of the
    /// batch's outputs is released.
    fn persist_applied(&mut self) -> Result<(), PersistError>;

    /// The index of the last entry applied: after a restart, what the
    /// machine kept durably (0 for a new or volatile machine before a
    /// snapshot is restored).
    fn applied(&self) -> u64;

    /// The state as of [`StateMachine::applied`], as bytes that
    /// [`StateMachine::restore`] takes back (checksummed: it may be torn in
    /// transit or on media).
    fn snapshot(&self) -> Vec<u8>;

    /// Appends [`StateMachine::snapshot`]'s bytes to `out` (a machine with
    /// a large state writes them in place: the replica's record around
    /// them is then not a second copy).
    fn snapshot_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.snapshot());
    }

    /// Appends about `budget` more bytes of [`StateMachine::snapshot`] to
    /// `out`, from where `cursor` (`None` at first) left off; true once the
    /// snapshot is whole. The replica applies nothing between the steps of
    /// one snapshot, so a machine with a large state is taken over several
    /// turns of its loop. The default takes it whole in the first step.
    fn snapshot_step(&self, cursor: &mut SnapshotCursor, out: &mut Vec<u8>, budget: usize) -> bool {
        let _ = (cursor, budget);
        self.snapshot_into(out);
        true
    }

    /// The whole length of the snapshot being taken in steps, once the
    /// machine knows it (`None`: not yet, or never). From then on each step
    /// only appends to its output and never reads what earlier steps
    /// appended, so the replica writes each step's bytes into its store
    /// and drops them: the snapshot is never whole in DRAM. `None` by
    /// default (the replica keeps the steps' bytes until the last).
    fn snapshot_len(&self, cursor: &SnapshotCursor) -> Option<u64> {
        let _ = cursor;
        None
    }

    /// Replaces the whole state with a snapshot's, taken at log `index`;
    /// afterwards [`StateMachine::applied`] is `index`. On an error the
    /// state is unchanged.
    fn restore(&mut self, index: u64, bytes: &[u8]) -> Result<(), RestoreError>;

    /// Whether the machine keeps its state durably itself, as of
    /// [`StateMachine::applied`] after each [`StateMachine::persist_applied`]
    /// (a persistent keyspace). Then log compaction stores no copy of the
    /// state (a deferred snapshot, `crate::snapshot::is_deferred`): a whole
    /// one is encoded only when a peer needs one. False by default: every
    /// compaction encodes [`StateMachine::snapshot`].
    fn keeps_state(&self) -> bool {
        false
    }

    /// The log seam (`crate::logrefs`): whether this machine's entries name
    /// its own buffers, so the replica tells it which entries the durable
    /// log holds ([`StateMachine::log_held`], [`StateMachine::log_dropped`]).
    /// False by default: nothing below is called.
    fn tracks_log(&self) -> bool {
        false
    }

    /// The machine entry `data` as sent to a peer, if it differs (values
    /// named by local extents gathered into the entry); `None`: as is.
    fn wire_form(&mut self, _data: &[u8]) -> Option<Vec<u8>> {
        None
    }

    /// `data` is sent to another peer in the form [`StateMachine::wire_form`]
    /// gave it a moment ago (`wire`; `None`: as is), without asking again
    /// (for the machine's copy counters).
    fn wire_form_again(&mut self, _data: &[u8], _wire: Option<&[u8]>) {}

    /// How long a machine entry is in its wire form
    /// ([`StateMachine::wire_form`]), from its logged bytes alone: the Raft
    /// store bounds each append to a peer by it. Its own length by default.
    fn wire_len(&self) -> WireLen {
        own_len
    }

    /// A machine entry received from a peer, before Raft steps it: the
    /// local form to log instead (values stored in this member's buffers,
    /// persisted in place), or `None` to log it as received.
    fn local_form(&mut self, _data: &[u8]) -> Option<Vec<u8>> {
        None
    }

    /// Whether a normal entry `data` that a peer sent (in an append or a
    /// forwarded proposal) may be taken at all: a machine whose local form
    /// names its own buffers refuses one that names buffers, since only
    /// this member can. A refused entry drops its whole message (counted
    /// malformed). True by default.
    fn accepts_from_peer(&self, _data: &[u8]) -> bool {
        true
    }

    /// The durable log now holds the machine entry `data`.
    fn log_held(&mut self, _data: &[u8]) {}

    /// The machine entry `data` left the durable log (truncated, compacted,
    /// or under an installed snapshot).
    fn log_dropped(&mut self, _data: &[u8]) {}

    /// Every entry proposed or received so far is in the durable log or
    /// was refused: temporary holds on their buffers may go.
    fn log_settled(&mut self) {}

    /// Whether the buffers the durable log's entries hold are wanted back
    /// (the machine's pool runs short): the replica then compacts its log
    /// to the applied index as soon as the machine has applied that far,
    /// by a deferred record if the machine keeps its state. False by
    /// default.
    fn log_room_wanted(&self) -> bool {
        false
    }
}

/// A machine entry's length in its wire form ([`StateMachine::wire_len`]).
pub type WireLen = fn(&[u8]) -> u64;

/// An entry's own length: its wire form is as logged.
pub fn own_len(data: &[u8]) -> u64 {
    data.len() as u64
}

/// Where a machine's snapshot taken in steps stands
/// ([`StateMachine::snapshot_step`]): the machine's own type.
pub type SnapshotCursor = Option<Box<dyn std::any::Any>>;

/// A machine as the [`crate::logrefs::LogRefs`] of its own entries.
pub struct MachineRefs<'a, M: StateMachine + ?Sized>(pub &'a mut M);

impl<M: StateMachine + ?Sized> crate::logrefs::LogRefs for MachineRefs<'_, M> {
    fn held(&mut self, data: &[u8]) {
        self.0.log_held(data);
    }

    fn dropped(&mut self, data: &[u8]) {
        self.0.log_dropped(data);
    }

    fn tracks(&self) -> bool {
        self.0.tracks_log()
    }
}
