//! The bytes of a snapshot record taken and not yet written into a store
//! that compacts in parts ([`super::SnapshotJob`]).
//!
//! While the machine is still being taken, each turn appends about half a
//! step and writes up to a step, and what a step took past its budget (a
//! header, the end of a value) stays for the next turn: written bytes are
//! dropped each turn so the record holds at most a remainder and one
//! step's bytes, never the snapshot. Once the machine is whole the rest is
//! written from an offset, a step per turn, without moving what is left
//! (a machine that does not say its length is whole in DRAM first).

/// A record's bytes from the first one not yet written.
pub(super) struct Pending {
    /// Taken bytes; those before `at` are written.
    pub(super) bytes: Vec<u8>,
    at: usize,
}

impl Pending {
    /// A record whose first bytes (the replica's part) are taken.
    pub(super) fn new(bytes: Vec<u8>) -> Pending {
        Pending { bytes, at: 0 }
    }

    /// The next bytes to write in a turn whose machine steps take half of
    /// `step`: up to a step of them.
    pub(super) fn next(&self, step: usize) -> &[u8] {
        &self.bytes[self.at..self.bytes.len().min(self.at.saturating_add(step.max(1)))]
    }

    /// `n` bytes of [`Pending::next`] were written; `more` if the machine
    /// appends more after them.
    pub(super) fn written(&mut self, n: usize, more: bool) {
        self.at += n;
        assert!(self.at <= self.bytes.len(), "written bytes were taken");
        if self.at == self.bytes.len() {
            self.bytes.clear();
            self.at = 0;
        } else if more {
            self.bytes.drain(..self.at);
            self.at = 0;
        }
    }

    /// Every byte taken is written.
    pub(super) fn is_empty(&self) -> bool {
        self.at == self.bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps that each take a little past their half-step budget: the
    /// remainder is written with the next step's bytes, so the record never
    /// grows past a step and a remainder (it had grown to the whole
    /// snapshot when each turn wrote only half a step: a 256 MiB keyspace
    /// then held its member's loop 0.8-0.96 s in one turn).
    #[test]
    fn a_step_past_its_budget_leaves_no_growing_remainder() {
        let (step, over) = (4096usize, 40usize);
        let mut p = Pending::new(Vec::new());
        let (mut taken, mut written, mut most) = (0usize, 0usize, 0usize);
        for i in 0..1000u32 {
            let bytes = step / 2 + over;
            p.bytes.extend((0..bytes).map(|j| (i as usize + j) as u8));
            taken += bytes;
            most = most.max(p.bytes.len());
            let n = p.next(step).len();
            written += n;
            p.written(n, true);
        }
        assert_eq!(written, taken, "every step's bytes are written in its turn");
        assert!(p.is_empty());
        assert!(most <= step / 2 + over, "the record held {most} B at most");
    }

    /// A record whole in DRAM is written a step per turn from an offset,
    /// in order, and what is left does not move.
    #[test]
    fn a_whole_record_is_written_in_order_a_step_per_turn() {
        let step = 1000;
        let record: Vec<u8> = (0..10_500u32).map(|i| (i % 251) as u8).collect();
        let mut p = Pending::new(record.clone());
        let (ptr, mut out, mut turns) = (p.bytes.as_ptr(), Vec::new(), 0);
        while !p.is_empty() {
            let part = p.next(step).to_vec();
            assert!(part.len() <= step);
            out.extend_from_slice(&part);
            p.written(part.len(), false);
            turns += 1;
            if !p.is_empty() {
                assert_eq!(p.bytes.as_ptr(), ptr, "the rest is not moved");
            }
        }
        assert_eq!(out, record);
        assert_eq!(turns, 11);
    }
}
