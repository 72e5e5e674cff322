//! The part of the last-level cache that I/O writes allocate into: DDIO for
//! the NIC, DCA for the DMA engine (seed 000 §5.4 calls them the same
//! mechanism), restricted to `ddio_ways` of each set (seed 002 §6.1).
//!
//! A write to a line already cached updates it in place. Otherwise it takes
//! a way of its set (`line % sets`), evicting one when the set's I/O ways
//! are full. The victim is the least recently used way, except with
//! probability `victim_disorder` a uniformly chosen other way ("near-LRU";
//! the real policy is unpublished, seed 000 §5.2). Evicted lines go to the
//! memory controller, which is where the in-DIMM write amplification of
//! seed 000 Fig 4 comes from.
//!
//! Invariants: a line is cached at most once; each set holds at most
//! `ddio_ways` lines; the generator is seeded, so runs are reproducible.

use crate::params::Params;
use crate::rng::SplitMix64;

const EMPTY: u64 = u64::MAX;

/// The I/O-allocating ways of the LLC.
#[derive(Clone, Debug)]
pub struct IoCache {
    sets: usize,
    ways: usize,
    tags: Vec<u64>,
    stamps: Vec<u64>,
    tick: u64,
    disorder: f64,
    rng: SplitMix64,
}

impl IoCache {
    /// An empty cache shaped by `params.llc`, with generator seed `seed`.
    pub fn new(params: &Params, seed: u64) -> IoCache {
        let (sets, ways) = (params.llc_sets(), params.llc.ddio_ways);
        assert!(sets > 0, "a cache has sets");
        assert!(ways > 0, "a cache has ways");
        assert!(sets * ways <= 1 << 24, "cache model bounded to 16 M lines");
        IoCache {
            sets,
            ways,
            tags: vec![EMPTY; sets * ways],
            stamps: vec![0; sets * ways],
            tick: 0,
            disorder: params.llc.victim_disorder,
            rng: SplitMix64::new(seed),
        }
    }

    /// Lines the I/O ways hold in all.
    pub fn capacity_lines(&self) -> usize {
        self.sets * self.ways
    }

    /// An I/O write of line number `line`; returns the line it evicts, if any.
    pub fn write(&mut self, line: u64) -> Option<u64> {
        assert!(line != EMPTY, "line number reserved");
        self.tick += 1;
        let base = (line % self.sets as u64) as usize * self.ways;
        let set = base..base + self.ways;
        if let Some(i) = set.clone().find(|&i| self.tags[i] == line) {
            self.stamps[i] = self.tick;
            return None;
        }
        if let Some(i) = set.clone().find(|&i| self.tags[i] == EMPTY) {
            self.tags[i] = line;
            self.stamps[i] = self.tick;
            return None;
        }
        let lru = set.clone().min_by_key(|&i| self.stamps[i]).expect("a set has ways");
        let victim = if self.ways > 1 && self.rng.unit() < self.disorder {
            let other = self.rng.below(self.ways as u64 - 1) as usize;
            let i = base + other;
            if i >= lru {
                i + 1
            } else {
                i
            }
        } else {
            lru
        };
        let evicted = self.tags[victim];
        self.tags[victim] = line;
        self.stamps[victim] = self.tick;
        Some(evicted)
    }

    /// Every cached line, emptied out (end of a run).
    pub fn drain(&mut self) -> Vec<u64> {
        let lines: Vec<u64> = self.tags.iter().copied().filter(|&t| t != EMPTY).collect();
        self.tags.fill(EMPTY);
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn true_lru_evicts_a_sequential_stream_in_order() {
        let mut p = Params::published();
        p.llc.victim_disorder = 0.0;
        let mut c = IoCache::new(&p, 1);
        let cap = c.capacity_lines() as u64;
        for line in 0..cap {
            assert_eq!(c.write(line), None);
        }
        for line in cap..cap + 1000 {
            assert_eq!(c.write(line), Some(line - cap));
        }
    }

    #[test]
    fn near_lru_disorders_some_evictions() {
        let p = Params::published();
        let mut c = IoCache::new(&p, 1);
        let cap = c.capacity_lines() as u64;
        let mut out_of_order = 0;
        for line in 0..cap * 4 {
            if let Some(v) = c.write(line) {
                out_of_order += u64::from(v + cap != line);
            }
        }
        let share = out_of_order as f64 / (cap * 3) as f64;
        assert!(share > 0.1 && share < 0.9, "{share}");
    }

    #[test]
    fn rewriting_a_cached_line_evicts_nothing() {
        let mut c = IoCache::new(&Params::published(), 1);
        for _ in 0..100 {
            assert_eq!(c.write(42), None);
        }
    }
}
