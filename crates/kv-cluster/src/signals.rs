//! [`Signals`]: keys an entry made ready for blocked clients without
//! writing them (XGROUP DESTROY, after which a blocked XREADGROUP on the
//! group is answered NOGROUP), by entry index. A member's parked clients
//! are attempted again after a write to one of their keys
//! ([`crate::track::WriteIndex`]) or after such a signal; the write index
//! cannot hold signals, since WATCH reads it and Redis 7.0 does not count
//! XGROUP DESTROY a write.
//!
//! Not replicated state: each member keeps the signals of the entries it
//! applies, in memory, the last [`MAX_SIGNALS`] of them. Invariants:
//! `recent` is in index order; every signal at an index above `floor` is
//! in `recent`, so [`Signals::after`] answers true (attempt again) for
//! any index whose signals it may have forgotten.

use std::collections::VecDeque;

/// Most signals remembered.
pub const MAX_SIGNALS: usize = 1024;

/// Recent signals (module docs).
#[derive(Debug, Default)]
pub struct Signals {
    recent: VecDeque<(u64, Vec<u8>)>,
    /// Signals at or below this index may have been forgotten.
    floor: u64,
}

impl Signals {
    /// `key` was signalled by the entry at `index` (entries come in order).
    pub fn record(&mut self, key: &[u8], index: u64) {
        assert!(self.recent.back().is_none_or(|(last, _)| *last <= index), "signals come in index order");
        assert!(index > self.floor, "a signal above the floor");
        if self.recent.len() == MAX_SIGNALS {
            let (oldest, _) = self.recent.pop_front().expect("full");
            self.floor = oldest;
        }
        self.recent.push_back((index, key.to_vec()));
    }

    /// Forgets every signal: the state was replaced at `index` (a snapshot
    /// installed), and what came before it is unknown here.
    pub fn reset(&mut self, index: u64) {
        self.recent.clear();
        self.floor = self.floor.max(index);
    }

    /// Whether `key` may have been signalled after `index`.
    pub fn after(&self, key: &[u8], index: u64) -> bool {
        index < self.floor || self.recent.iter().rev().take_while(|(i, _)| *i > index).any(|(_, k)| k == key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_is_seen_after_earlier_indices_and_a_forgotten_one_is_assumed() {
        let mut s = Signals::default();
        assert!(!s.after(b"k", 0));
        s.record(b"k", 5);
        s.record(b"j", 7);
        assert!(s.after(b"k", 4) && !s.after(b"k", 5), "after 4, not after 5");
        assert!(s.after(b"j", 6) && !s.after(b"other", 0));
        for i in 0..MAX_SIGNALS as u64 {
            s.record(b"x", 10 + i);
        }
        assert_eq!(s.recent.len(), MAX_SIGNALS);
        assert!(s.after(b"k", 6), "6 is below the floor (7, forgotten): maybe");
        assert!(!s.after(b"k", 7), "every signal past 7 is remembered");
        s.reset(5000);
        assert!(s.after(b"k", 4999) && !s.after(b"k", 5000));
    }
}
