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
//! Bounds ([`check_with`], [`Budget`]): the search is an iterative DFS (its
//! stack at most one entry per operation), its visited-state cache holds
//! 128-bit keys up to a cap, and it stops after a number of model steps,
//! answering [`Verdict::Undecided`]: a history too large for the budget is
//! never called linearizable. Unknown operations that a later one
//! overwrites are pruned as dominated ([`check_with`]).
//!
//! Invariant: [`Verdict::Linearizable`] only with a witness order found.

#![deny(missing_docs)]

pub mod kv;
pub mod redis;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// A sequential specification.
pub trait Model {
    /// The object's state.
    type State: Clone + Eq + Hash;
    /// An operation's input (compared and hashed: unknown operations with
    /// equal inputs are interchangeable, and only the earliest is tried).
    type Input: Eq + Hash;
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

/// What a bounded search found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A witness order was found.
    Linearizable,
    /// The search was exhausted without one.
    NotLinearizable,
    /// The budget ran out first: nothing is claimed.
    Undecided,
}

/// How far a search may go before it answers [`Verdict::Undecided`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Model steps tried (each costs one [`Model::step`]).
    pub max_steps: u64,
    /// Entries of the visited-state cache (16 bytes each, plus the hash
    /// set's overhead); past it, states are no longer remembered and the
    /// search may revisit them (slower, still exact).
    pub max_cache: usize,
}

impl Default for Budget {
    /// 200 million steps (about a minute), 8 million cache entries (about 256 MiB).
    fn default() -> Budget {
        Budget { max_steps: 200_000_000, max_cache: 8 << 20 }
    }
}

/// True if `history` is linearizable with respect to `model`, within the
/// default [`Budget`] (an undecided history is not called linearizable).
///
/// # Panics
/// If an operation returned before it was called.
pub fn check<M: Model>(model: &M, history: &[Operation<M::Input, M::Output>]) -> bool {
    check_with(model, history, Budget::default()) == Verdict::Linearizable
}

/// Searches for a witness order of `history` within `budget`.
///
/// Memory: the event list and the stack are O(n); the cache holds at most
/// `budget.max_cache` entries: per (a Zobrist hash of the linearized known
/// operations, a hash of the state), the sets of unknown operations
/// (those without a return) it was reached with. A state reached again with
/// a superset of unknown operations used is pruned: it can do nothing the
/// earlier visit could not. Two different pairs with equal 128-bit keys
/// would prune a branch that was never explored: that can only turn a
/// linearizable verdict into a rejection, never the reverse, and at the
/// budget's sizes its chance is below 2^-70.
///
/// Success: every operation with a return is linearized (those without
/// one may never have taken effect).
///
/// Pruning (each prunes a branch only when another branch that is
/// explored reaches the same ends with no more unknown operations used):
/// unknown operations with equal inputs are linearized in call order
/// (interchangeable: k unknown INCRs are not tried in k! orders);
/// an operation with no return (its outcome unknown) that is
/// linearized and immediately followed by an operation that leaves the
/// same state as it would have without it is a dominated branch (the same
/// state, one unknown operation fewer still available) and is not
/// explored: the branch without the unknown operation is (the operation
/// that follows is a candidate there too, since an unknown operation's
/// return is after every event). Without this, k unknown blind writes
/// (SETs whose clients were cut off) multiply the states by 2^k.
///
/// # Panics
/// If an operation returned before it was called.
pub fn check_with<M: Model>(model: &M, history: &[Operation<M::Input, M::Output>], budget: Budget) -> Verdict {
    for op in history {
        if let Some((ret, _)) = &op.ret {
            assert!(*ret >= op.call, "an operation returned before it was called");
        }
    }
    Search::new(model, history, budget).run()
}

/// The state of one search (see [`check_with`]).
struct Search<'a, M: Model> {
    model: &'a M,
    history: &'a [Operation<M::Input, M::Output>],
    budget: Budget,
    /// The events, unknown operations' returns after every other event.
    nodes: Vec<Node>,
    /// `ret_node[i]`: operation i's return node.
    ret_node: Vec<usize>,
    /// A random word per known operation: the linearized known set's hash
    /// is the xor of its operations' words.
    zobrist: Vec<u64>,
    /// `slot[i]`: unknown operation i's bit in `used`.
    slot: Vec<usize>,
    /// `twin[i]`: for unknown operation i, the latest unknown operation
    /// called before it with an equal input.
    twin: Vec<Option<usize>>,
    /// Which unknown operations are linearized.
    used: Vec<u64>,
    /// (known set hash, state hash) -> the unknown sets it was reached with.
    cache: HashMap<(u64, u64), Vec<Box<[u64]>>>,
    cached: usize,
    steps: u64,
    /// Known operations not linearized yet: none left is success.
    known_left: usize,
}

/// A linearized choice: its call node, the state and known set hash before it.
struct Frame<S> {
    call: usize,
    state: S,
    set: u64,
}

impl<'a, M: Model> Search<'a, M> {
    fn new(model: &'a M, history: &'a [Operation<M::Input, M::Output>], budget: Budget) -> Self {
        let nodes = events(history);
        let mut ret_node = vec![0; history.len()];
        for (i, node) in nodes.iter().enumerate().skip(1) {
            if !node.is_call {
                ret_node[node.op] = i;
            }
        }
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let zobrist = (0..history.len()).map(|_| splitmix(&mut seed)).collect();
        let (mut slot, mut twin) = (vec![usize::MAX; history.len()], vec![None; history.len()]);
        let mut last: HashMap<&M::Input, usize> = HashMap::new();
        let mut unknowns = 0;
        for node in nodes.iter().skip(1).filter(|n| n.is_call) {
            let op = &history[node.op];
            if op.ret.is_none() {
                slot[node.op] = unknowns;
                unknowns += 1;
                twin[node.op] = last.insert(&op.input, node.op);
            }
        }
        let known_left = history.len() - unknowns;
        let used = vec![0; unknowns.div_ceil(64)];
        Search { model, history, budget, nodes, ret_node, zobrist, slot, twin, used, cache: HashMap::new(), cached: 0, steps: 0, known_left }
    }

    /// One model step, counted against the budget.
    fn step(&mut self, state: &M::State, op: usize) -> Option<M::State> {
        self.steps += 1;
        let op = &self.history[op];
        self.model.step(state, &op.input, op.ret.as_ref().map(|(_, o)| o))
    }

    fn known(&self, op: usize) -> bool {
        self.history[op].ret.is_some()
    }

    fn is_used(&self, op: usize) -> bool {
        let k = self.slot[op];
        self.used[k / 64] & (1 << (k % 64)) != 0
    }

    /// Marks operation `op` linearized (`true`) or not.
    fn mark(&mut self, op: usize, done: bool) {
        if self.known(op) {
            if done {
                self.known_left -= 1;
            } else {
                self.known_left += 1;
            }
        } else {
            let k = self.slot[op];
            self.used[k / 64] ^= 1 << (k % 64);
        }
    }

    /// An unknown operation whose earlier twin is still to be linearized is
    /// not tried: the two are interchangeable, and the earlier is a
    /// candidate whenever the later one is.
    fn twin_waits(&self, op: usize) -> bool {
        self.twin[op].is_some_and(|t| !self.is_used(t))
    }

    /// True unless `(set, state)` was reached before with a subset of the
    /// unknown operations used now (then this branch can do nothing that
    /// one could not); remembered while the cache has room.
    fn first_visit(&mut self, set: u64, state: &M::State) -> bool {
        let key = (set, state_hash(state));
        let used = &self.used;
        let subset = |a: &Box<[u64]>| a.iter().zip(used).all(|(a, u)| a & !u == 0);
        if self.cache.get(&key).is_some_and(|seen| seen.iter().any(subset)) {
            return false;
        }
        if self.cached < self.budget.max_cache {
            self.cache.entry(key).or_default().push(used.clone().into_boxed_slice());
            self.cached += 1;
        }
        true
    }

    /// Linearizing `op` (to `next`) right after an unknown operation is
    /// dominated if `op` from the state before that one leads to `next` too.
    fn dominated(&mut self, stack: &[Frame<M::State>], op: usize, next: &M::State) -> bool {
        let Some(top) = stack.last() else { return false };
        if self.known(self.nodes[top.call].op) {
            return false;
        }
        let before = top.state.clone();
        self.step(&before, op).as_ref() == Some(next)
    }

    /// Tries to linearize the call at node `e` (operation `op`) next.
    fn try_push(&mut self, stack: &mut Vec<Frame<M::State>>, state: &mut M::State, set: &mut u64, e: usize, op: usize) -> bool {
        if !self.known(op) && self.twin_waits(op) {
            return false;
        }
        let Some(next) = self.step(state, op) else { return false };
        if self.dominated(stack, op, &next) {
            return false;
        }
        let next_set = if self.known(op) { *set ^ self.zobrist[op] } else { *set };
        self.mark(op, true);
        if !self.first_visit(next_set, &next) {
            self.mark(op, false);
            return false;
        }
        stack.push(Frame { call: e, state: std::mem::replace(state, next), set: *set });
        *set = next_set;
        lift(&mut self.nodes, e, self.ret_node[op]);
        true
    }

    fn run(mut self) -> Verdict {
        let mut stack: Vec<Frame<M::State>> = Vec::new();
        let mut state = self.model.init();
        let mut set = 0u64;
        let mut entry = self.nodes[0].next;
        while self.known_left > 0 {
            if self.steps > self.budget.max_steps {
                return Verdict::Undecided;
            }
            // A known operation is left, so is its return: the walk meets
            // one before it runs off the end.
            assert_ne!(entry, NIL, "walked past every remaining return");
            let node = self.nodes[entry];
            if node.is_call {
                if self.try_push(&mut stack, &mut state, &mut set, entry, node.op) {
                    entry = self.nodes[0].next;
                } else {
                    entry = node.next;
                }
                continue;
            }
            // A return whose call is not linearized yet: back up.
            let Some(frame) = stack.pop() else { return Verdict::NotLinearizable };
            let op = self.nodes[frame.call].op;
            state = frame.state;
            set = frame.set;
            self.mark(op, false);
            unlift(&mut self.nodes, frame.call, self.ret_node[op]);
            entry = self.nodes[frame.call].next;
        }
        Verdict::Linearizable
    }
}

/// What a per-key check of a whole history found (linearizability is
/// local: the history is linearizable exactly when every key's is).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Judgement {
    /// Keys checked.
    pub keys: usize,
    /// The first key (in byte order) whose history is not linearizable.
    pub violation: Option<Vec<u8>>,
    /// Keys whose search ran out of budget.
    pub undecided: Vec<Vec<u8>>,
}

impl Judgement {
    /// Every key was found linearizable.
    pub fn linearizable(&self) -> bool {
        self.violation.is_none() && self.undecided.is_empty()
    }

    /// The first key not proven linearizable (a violation first, else an
    /// undecided key).
    pub fn first_unproven(&self) -> Option<Vec<u8>> {
        self.violation.clone().or_else(|| self.undecided.first().cloned())
    }
}

/// Checks every key's sub-history of `ops` (key, operation) with `model`,
/// each within `budget`.
pub fn judge_per_key<'k, M: Model>(model: &M, ops: impl IntoIterator<Item = (&'k [u8], Operation<M::Input, M::Output>)>, budget: Budget) -> Judgement {
    let mut by_key: std::collections::BTreeMap<&[u8], Vec<Operation<M::Input, M::Output>>> = std::collections::BTreeMap::new();
    for (key, op) in ops {
        by_key.entry(key).or_default().push(op);
    }
    let mut j = Judgement { keys: by_key.len(), ..Judgement::default() };
    for (key, history) in by_key {
        match check_with(model, &history, budget) {
            Verdict::Linearizable => {}
            Verdict::NotLinearizable => {
                j.violation.get_or_insert_with(|| key.to_vec());
            }
            Verdict::Undecided => j.undecided.push(key.to_vec()),
        }
    }
    j
}

/// SplitMix64: the Zobrist words, the same every run.
fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A state's hash (SipHash with fixed keys: the same every run).
fn state_hash<S: Hash>(state: &S) -> u64 {
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new_with_keys(0x6c69_6e63_6865_636b, 0x7374_6174_6568_6173);
    state.hash(&mut h);
    h.finish()
}

const NIL: usize = usize::MAX;

/// The call and return events in time order behind a head sentinel;
/// calls before returns at equal times (concurrent: the permissive
/// reading); operations without a return get one after every event.
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

#[cfg(test)]
mod tests;
#[cfg(test)]
mod bounded_tests;
