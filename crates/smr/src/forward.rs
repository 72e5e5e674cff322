//! Proposals from followers: the entry context that tags them and the
//! replicated table that applies each one at most once.
//!
//! A follower's [`crate::node::Replica::propose`] steps raft-rs's
//! `MsgPropose`, which raft-rs forwards to the leader it knows; the leader
//! appends the entries as they came. Each carries in its context
//! ([`ForwardContext`], kind [`crate::node::ENTRY_FORWARDED`]) who proposed
//! it (origin member id, a nonce drawn once per incarnation of that member,
//! a sequence number per incarnation), the term the origin was in when it
//! proposed, and the principal (user) its client authenticated as. The
//! origin's ticket is done when the origin itself applies the entry: the
//! machine is deterministic, so its own output is the client's reply.
//!
//! Exactly once ([`Dedup::decide`], run on every member at apply, so every
//! member decides the same): a forwarded `MsgPropose` may be duplicated or
//! delayed by the network, or sent again to a stale leader. An entry is
//! applied only if
//! 1. the term the leader appended it in (the entry's term) equals the
//!    term in its context: a copy appended by a leader of another term is
//!    skipped. Log terms never decrease along the log, so once an entry of
//!    a term above a proposal's context term is applied, that proposal can
//!    never apply: its origin fails the ticket as certainly not applied;
//! 2. within that term, its (origin, nonce, sequence) was not applied
//!    before: the table keeps, for the current term only (it is emptied
//!    when the first entry of a higher term applies), per (origin, nonce)
//!    the sequences applied above a floor; at most [`WINDOW_SEQS`] of
//!    them (past that the floor rises: a sequence at or below the floor is
//!    skipped as seen, and a proposal that waited that long fails as not
//!    applied) and at most [`MAX_WINDOWS`] incarnations per term (past that
//!    the one used least recently is dropped: sound as long as no copy of
//!    its proposals is still in flight once 64 newer incarnations of
//!    members proposed in one term).
//!
//! The table is the replica's own ([`crate::snapshot::ReplicaPart`]): in
//! its snapshots, and rebuilt by replaying the log after a restart (the
//! entries a persistent machine already applied are replayed for it too).
//!
//! Context format (little-endian, `docs/FORMAT.md`, "Forwarded entries"):
//!
//! ```text
//!  0 kind u8 = 3 | 1 principal length u8 (≤ 64) | 2 six zero bytes
//!  8 origin u64 | 16 nonce u64 | 24 seq u64 | 32 term u64 | 40 principal
//! ```

use std::collections::{BTreeMap, BTreeSet};

use crate::session::Reader;
use crate::state::RestoreError;

/// The kind byte of a forwarded entry's context.
pub const KIND: u8 = 3;
/// A forwarded context's fixed part.
pub const HEADER_BYTES: usize = 40;
/// Longest principal (user name) a context carries.
pub const MAX_PRINCIPAL_BYTES: usize = 64;
/// Sequences kept per incarnation above its floor.
pub const WINDOW_SEQS: usize = 1024;
/// Incarnations kept per term.
pub const MAX_WINDOWS: usize = 64;

/// Who proposed a forwarded entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardContext {
    /// The member that proposed it.
    pub origin: u64,
    /// That member's incarnation.
    pub nonce: u64,
    /// Its sequence number in that incarnation (from 1).
    pub seq: u64,
    /// The origin's term when it proposed.
    pub term: u64,
    /// The user the client authenticated as (empty: not named).
    pub principal: Vec<u8>,
}

impl ForwardContext {
    /// The context bytes.
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.principal.len() <= MAX_PRINCIPAL_BYTES, "a principal within bound");
        let mut b = Vec::with_capacity(HEADER_BYTES + self.principal.len());
        b.push(KIND);
        b.push(self.principal.len() as u8);
        b.extend_from_slice(&[0; 6]);
        for v in [self.origin, self.nonce, self.seq, self.term] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.principal);
        b
    }

    /// Decodes a context of kind [`KIND`]; `None` if it is malformed.
    pub fn decode(b: &[u8]) -> Option<ForwardContext> {
        if b.len() < HEADER_BYTES || b[0] != KIND || b[2..8] != [0; 6] {
            return None;
        }
        let len = b[1] as usize;
        if len > MAX_PRINCIPAL_BYTES || b.len() != HEADER_BYTES + len {
            return None;
        }
        let u = |at: usize| pmem::le::get_u64(b, at);
        Some(ForwardContext { origin: u(8), nonce: u(16), seq: u(24), term: u(32), principal: b[HEADER_BYTES..].to_vec() })
    }
}

/// What to do with a forwarded entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Apply it: the first copy of this proposal in its term.
    Apply,
    /// Skip it: this proposal was applied before (or is below its
    /// incarnation's floor).
    Seen,
    /// Skip it: appended in another term than it was proposed in.
    OtherTerm,
}

/// One incarnation's applied sequences in the current term.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Window {
    /// Every sequence at or below it counts as seen.
    floor: u64,
    applied: BTreeSet<u64>,
    /// The log index this incarnation last applied at (eviction order).
    last_index: u64,
}

/// The replicated table of forwarded proposals applied in the current
/// term (module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dedup {
    term: u64,
    windows: BTreeMap<(u64, u64), Window>,
}

impl Dedup {
    /// Decides the forwarded entry at `index`, appended in `entry_term`,
    /// and records it if it applies. `dedup` false is the planted bug of
    /// the simulation's tests: a copy seen before applies again.
    pub fn decide(&mut self, index: u64, entry_term: u64, ctx: &ForwardContext, dedup: bool) -> Decision {
        if entry_term != ctx.term {
            return Decision::OtherTerm;
        }
        if entry_term > self.term {
            self.term = entry_term;
            self.windows.clear();
        }
        // Log terms never decrease: an older term here is a corrupt log.
        assert_eq!(entry_term, self.term, "entries apply in term order");
        let key = (ctx.origin, ctx.nonce);
        if !self.windows.contains_key(&key) && self.windows.len() >= MAX_WINDOWS {
            let oldest = *self.windows.iter().min_by_key(|(_, w)| w.last_index).expect("full").0;
            self.windows.remove(&oldest);
        }
        let w = self.windows.entry(key).or_default();
        if (ctx.seq <= w.floor || w.applied.contains(&ctx.seq)) && dedup {
            return Decision::Seen;
        }
        w.applied.insert(ctx.seq);
        w.last_index = index;
        if w.applied.len() > WINDOW_SEQS {
            w.floor = w.applied.pop_first().expect("over the bound");
        }
        Decision::Apply
    }

    /// True if a proposal of (`origin`, `nonce`, `seq`) proposed in
    /// `term` may have been applied by the log this table describes (a
    /// member that caught up from a snapshot holding it cannot know its
    /// output).
    pub fn may_have_applied(&self, origin: u64, nonce: u64, seq: u64, term: u64) -> bool {
        if term != self.term {
            return term < self.term;
        }
        match self.windows.get(&(origin, nonce)) {
            Some(w) => seq <= w.floor || w.applied.contains(&seq),
            None => self.windows.len() >= MAX_WINDOWS,
        }
    }

    /// The encoding: term u64, window count u64, then per window origin
    /// u64, nonce u64, floor u64, last index u64, sequence count u64 and
    /// the sequences u64 in ascending order.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.term.to_le_bytes());
        out.extend_from_slice(&(self.windows.len() as u64).to_le_bytes());
        for (&(origin, nonce), w) in &self.windows {
            for v in [origin, nonce, w.floor, w.last_index, w.applied.len() as u64] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            for s in &w.applied {
                out.extend_from_slice(&s.to_le_bytes());
            }
        }
    }

    /// Decodes [`Dedup::encode`]'s bytes, every count checked against its bound.
    pub fn decode(r: &mut Reader<'_>) -> Result<Dedup, RestoreError> {
        let term = r.u64()?;
        let count = r.u64()?;
        if count > MAX_WINDOWS as u64 {
            return Err(RestoreError::Corrupt("forwarded window count"));
        }
        let mut windows = BTreeMap::new();
        for _ in 0..count {
            let (origin, nonce, floor, last_index, n) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?);
            if n > WINDOW_SEQS as u64 {
                return Err(RestoreError::Corrupt("forwarded sequence count"));
            }
            let mut applied = BTreeSet::new();
            for _ in 0..n {
                let s = r.u64()?;
                if s <= floor || !applied.insert(s) {
                    return Err(RestoreError::Corrupt("forwarded sequence"));
                }
            }
            if windows.insert((origin, nonce), Window { floor, applied, last_index }).is_some() {
                return Err(RestoreError::Corrupt("duplicate forwarded window"));
            }
        }
        Ok(Dedup { term, windows })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(origin: u64, seq: u64, term: u64) -> ForwardContext {
        ForwardContext { origin, nonce: 7, seq, term, principal: b"default".to_vec() }
    }

    #[test]
    fn contexts_round_trip_and_malformed_ones_are_refused() {
        let c = ctx(2, 9, 4);
        let b = c.encode();
        assert_eq!(b.len(), HEADER_BYTES + 7);
        assert_eq!(ForwardContext::decode(&b), Some(c));
        assert!(ForwardContext::decode(&b[..b.len() - 1]).is_none());
        let mut bad = b.clone();
        bad[3] = 1;
        assert!(ForwardContext::decode(&bad).is_none());
        let mut long = b;
        long[1] = 65;
        assert!(ForwardContext::decode(&long).is_none());
    }

    #[test]
    fn a_copy_applies_once_and_another_terms_copy_never() {
        let mut d = Dedup::default();
        assert_eq!(d.decide(1, 3, &ctx(2, 1, 3), true), Decision::Apply);
        assert_eq!(d.decide(2, 3, &ctx(2, 1, 3), true), Decision::Seen);
        assert_eq!(d.decide(3, 3, &ctx(2, 1, 3), false), Decision::Apply, "the planted bug applies it again");
        assert_eq!(d.decide(4, 4, &ctx(2, 2, 3), true), Decision::OtherTerm);
        assert_eq!(d.decide(5, 4, &ctx(2, 1, 4), true), Decision::Apply, "a new term starts a new table");
        let mut bytes = Vec::new();
        d.encode(&mut bytes);
        let back = Dedup::decode(&mut Reader::new(&bytes, 0)).expect("decodes");
        assert_eq!(back, d);
    }

    #[test]
    fn the_window_and_the_incarnations_are_bounded() {
        let mut d = Dedup::default();
        for s in 1..=(WINDOW_SEQS as u64 + 5) {
            assert_eq!(d.decide(s, 1, &ctx(2, s, 1), true), Decision::Apply);
        }
        assert_eq!(d.decide(9000, 1, &ctx(2, 3, 1), true), Decision::Seen, "below the floor");
        for o in 0..MAX_WINDOWS as u64 + 3 {
            d.decide(10_000 + o, 1, &ctx(100 + o, 1, 1), true);
        }
        assert_eq!(d.windows.len(), MAX_WINDOWS);
    }
}
