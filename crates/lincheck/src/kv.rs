//! Key-value histories: PUT, GET, DEL and compare-and-swap on byte keys
//! and values, checked one key at a time (linearizability is local).

use crate::{judge_per_key, Budget, Judgement, Model, Operation};

/// An operation on one key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Input {
    /// Sets the value.
    Put(Vec<u8>),
    /// Reads the value.
    Get,
    /// Removes the key.
    Del,
    /// Sets `new` if the value is `expect` (`None`: the key is absent).
    Cas {
        /// The value the key must hold.
        expect: Option<Vec<u8>>,
        /// The value to set.
        new: Vec<u8>,
    },
}

/// What an operation returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// PUT and DEL.
    Done,
    /// GET: the value, or none.
    Value(Option<Vec<u8>>),
    /// CAS: whether it swapped.
    Swapped(bool),
}

/// One operation of a key-value history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvOp {
    /// The key.
    pub key: Vec<u8>,
    /// When it was called.
    pub call: u64,
    /// When it returned and what; `None` if the caller never learned.
    pub ret: Option<(u64, Output)>,
    /// What was asked.
    pub input: Input,
}

/// The sequential register of one key.
#[derive(Clone, Copy, Debug, Default)]
pub struct Register;

impl Model for Register {
    type State = Option<Vec<u8>>;
    type Input = Input;
    type Output = Output;

    fn init(&self) -> Self::State {
        None
    }

    fn step(&self, state: &Self::State, input: &Input, output: Option<&Output>) -> Option<Self::State> {
        let (next, expected) = match input {
            Input::Put(v) => (Some(v.clone()), Output::Done),
            Input::Get => (state.clone(), Output::Value(state.clone())),
            Input::Del => (None, Output::Done),
            Input::Cas { expect, new } if expect == state => (Some(new.clone()), Output::Swapped(true)),
            Input::Cas { .. } => (state.clone(), Output::Swapped(false)),
        };
        match output {
            Some(o) if *o != expected => None,
            _ => Some(next),
        }
    }
}

/// Checks `history` key by key, each key's search within `budget`.
pub fn judge(history: &[KvOp], budget: Budget) -> Judgement {
    let ops = history.iter().map(|op| (op.key.as_slice(), Operation { call: op.call, ret: op.ret.clone(), input: op.input.clone() }));
    judge_per_key(&Register, ops, budget)
}

/// The first key whose sub-history is not proven linearizable within the
/// default [`Budget`] (not linearizable, or undecided), if any.
pub fn first_violation(history: &[KvOp]) -> Option<Vec<u8>> {
    judge(history, Budget::default()).first_unproven()
}

/// True if the whole history is proven linearizable.
pub fn linearizable(history: &[KvOp]) -> bool {
    first_violation(history).is_none()
}
