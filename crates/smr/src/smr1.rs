//! What SMR1's data operations (PUT, GET, DEL, CAS from transport
//! clients, `crate::command`) mean for a machine: [`Smr1Machine`].
//!
//! A replica serves STATUS and the membership operations itself, for any
//! machine. Its data operations reach a machine only if the replica was
//! made with them ([`crate::node::Replica::new`] for a [`crate::kvmap::KvMap`],
//! [`crate::node::Replica::serve_smr1`] for another machine that implements
//! this trait); otherwise they are answered BAD_REQUEST. So a machine whose
//! clients are not SMR1 clients (a Redis keyspace behind its own server)
//! need not implement it.
//!
//! A write's entry is its request's bytes, unchanged; every replica hands
//! them to [`Smr1Machine::apply_write`] in log order. A GET is served by
//! the leader by ReadIndex, once the read index is applied.

use crate::command::Response;
use crate::state::StateMachine;

/// A machine that SMR1 clients' data operations reach.
pub trait Smr1Machine: StateMachine {
    /// Applies the committed SMR1 write whose request bytes are `request`
    /// (checked by the leader: PUT, DEL or CAS with a session) at log
    /// `index`, and answers it (status, index applied at, value; `leader`
    /// is filled by the replica). Deterministic, like
    /// [`StateMachine::apply`]; a retried request is applied once.
    fn apply_write(&mut self, index: u64, request: &[u8]) -> Response;

    /// Answers a linearizable GET of `key` (status OK with the value, or
    /// NOT_FOUND; the index is filled by the replica).
    fn read(&self, key: &[u8]) -> Response;

    /// What [`Smr1Machine::apply_write`] would answer, changing nothing:
    /// used only by the planted fault that answers a write before it is
    /// committed (`Faults::answer_before_commit`, tests only).
    fn preview(&self, index: u64, request: &[u8]) -> Response;
}

/// The SMR1 data operations of machine `M`, as plain functions (so that a
/// replica of any machine is a `Service`, and only one made with these
/// serves PUT, GET, DEL and CAS).
pub struct Smr1Ops<M> {
    pub(crate) apply_write: fn(&mut M, u64, &[u8]) -> Response,
    pub(crate) read: fn(&M, &[u8]) -> Response,
    pub(crate) preview: fn(&M, u64, &[u8]) -> Response,
}

impl<M: Smr1Machine> Smr1Ops<M> {
    /// `M`'s operations.
    pub fn of() -> Smr1Ops<M> {
        Smr1Ops { apply_write: M::apply_write, read: M::read, preview: M::preview }
    }
}
