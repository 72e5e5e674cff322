//! A linearizability checker for histories of concurrent operations.
//!
//! A history is a set of operations, each with the time it was called, the
//! time it returned (or none: its client never learned the outcome, so it
//! may or may not have taken effect), its input and its output. The
//! history is linearizable if there is a total order of the operations
//! that respects real time (an operation that returned before another was
//! called comes first) and in which each operation, applied to a
//! sequential [`Model`], produces the output that was observed (Herlihy and
//! Wing, 1990).
//!
//! The search is Wing and Gong's (1993), with Lowe's memoisation of
//! (linearized set, state) pairs (2017), as Porcupine implements it: walk
//! the call and return events in time order; try to linearize each pending
//! call next; on reaching a return whose call is not yet linearized, back
//! up. An operation without a return gets a return after every event, and
//! any output.
//!
//! [`kv`] checks a key-value history one key at a time: linearizability is
//! local (Herlihy and Wing's theorem 1), so the history is linearizable
//! exactly when every key's sub-history is, and the per-key searches are
//! far smaller. [`redis`] does the same for Redis strings and counters
//! (SET, GET, INCR, DEL, APPEND), with Redis's replies.
//!
//! Invariant: [`check`] returns `true` only with a witness order found; it
//! is exact (no timeout), so a history too large for the search takes long
//! rather than passing. Callers bound histories per key.

#![deny(missing_docs)]

pub mod kv;
pub mod redis;

use std::collections::HashSet;
use std::hash::Hash;

/// A sequential specification.
pub trait Model {
    /// The object's state.
    type State: Clone + Eq + Hash;
    /// An operation's input.
    type Input;
    /// An operation's output.
    type Output;

    /// The state before any operation.
    fn init(&self) -> Self::State;

    /// Applies `input` to `state`: the next state if `output` (`None`:
    /// unknown, any output) is what the sequential object would return.
    fn step(&self, state: &Self::State, input: &Self::Input, output: Option<&Self::Output>) -> Option<Self::State>;
}

/// One operation of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation<I, O> {
    /// When it was called.
    pub call: u64,
    /// When it returned, with its output; `None`: the caller never learned
    /// (a timeout, a crash): it may have taken effect at any time after
    /// its call, or never.
    pub ret: Option<(u64, O)>,
    /// What was asked.
    pub input: I,
}

/// One event of the time-ordered list: a call or a return of operation
/// `op`, linked to its neighbours (an index-based doubly linked list, so an
/// operation can be lifted out and put back in O(1)).
#[derive(Clone, Copy, Debug)]
struct Node {
    op: usize,
    is_call: bool,
    prev: usize,
    next: usize,
}

/// True if `history` is linearizable with respect to `model`.
///
/// # Panics
/// If an operation returned before it was called.
pub fn check<M: Model>(model: &M, history: &[Operation<M::Input, M::Output>]) -> bool {
    for op in history {
        if let Some((ret, _)) = &op.ret {
            assert!(*ret >= op.call, "an operation returned before it was called");
        }
    }
    let n = history.len();
    let mut nodes = events(history);
    // Node 0 is the head sentinel; ret_node[i] is operation i's return.
    let mut ret_node = vec![0; n];
    for (i, node) in nodes.iter().enumerate().skip(1) {
        if !node.is_call {
            ret_node[node.op] = i;
        }
    }
    let mut linearized = Bits::new(n);
    let mut cache: HashSet<(Bits, M::State)> = HashSet::new();
    let mut stack: Vec<(usize, M::State)> = Vec::new();
    let mut state = model.init();
    let mut entry = nodes[0].next;
    while nodes[0].next != NIL {
        // Every remaining operation has its return in the list, after its
        // call: the walk meets one before it runs off the end.
        assert_ne!(entry, NIL, "walked past every remaining return");
        let node = nodes[entry];
        if node.is_call {
            let op = &history[node.op];
            let output = op.ret.as_ref().map(|(_, o)| o);
            if let Some(next_state) = model.step(&state, &op.input, output) {
                let mut bits = linearized.clone();
                bits.set(node.op);
                if cache.insert((bits.clone(), next_state.clone())) {
                    stack.push((entry, state));
                    state = next_state;
                    linearized = bits;
                    lift(&mut nodes, entry, ret_node[node.op]);
                    entry = nodes[0].next;
                    continue;
                }
            }
            entry = node.next;
        } else {
            // A return whose call is not linearized yet: back up.
            let Some((call, previous)) = stack.pop() else {
                return false;
            };
            let op = nodes[call].op;
            linearized.clear(op);
            state = previous;
            unlift(&mut nodes, call, ret_node[op]);
            entry = nodes[call].next;
        }
    }
    true
}

const NIL: usize = usize::MAX;

/// The call and return events in time order behind a head sentinel; calls
/// before returns at equal times (concurrent: the permissive reading);
/// operations without a return get one after every event.
fn events<I, O>(history: &[Operation<I, O>]) -> Vec<Node> {
    let mut order: Vec<(u64, u8, usize, bool)> = Vec::with_capacity(2 * history.len());
    for (i, op) in history.iter().enumerate() {
        order.push((op.call, 0, i, true));
        match &op.ret {
            Some((t, _)) => order.push((*t, 1, i, false)),
            None => order.push((u64::MAX, 2, i, false)),
        }
    }
    order.sort_unstable_by_key(|&(t, kind, i, _)| (t, kind, i));
    let mut nodes = Vec::with_capacity(order.len() + 1);
    nodes.push(Node { op: usize::MAX, is_call: false, prev: NIL, next: if order.is_empty() { NIL } else { 1 } });
    let len = order.len();
    for (k, &(_, _, op, is_call)) in order.iter().enumerate() {
        let at = k + 1;
        nodes.push(Node { op, is_call, prev: at - 1, next: if at == len { NIL } else { at + 1 } });
    }
    nodes
}

/// Takes a call node and its return node out of the list.
fn lift(nodes: &mut [Node], call: usize, ret: usize) {
    for at in [call, ret] {
        let Node { prev, next, .. } = nodes[at];
        nodes[prev].next = next;
        if next != NIL {
            nodes[next].prev = prev;
        }
    }
}

/// Puts back what [`lift`] took out (in reverse order).
fn unlift(nodes: &mut [Node], call: usize, ret: usize) {
    for at in [ret, call] {
        let Node { prev, next, .. } = nodes[at];
        nodes[prev].next = at;
        if next != NIL {
            nodes[next].prev = at;
        }
    }
}

/// A fixed-size bit set (the linearized operations).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

#[cfg(test)]
mod tests;
