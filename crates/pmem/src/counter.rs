//! Persistent 8-byte counters and registers (seed 000 §5.4, §6).
//!
//! On Optane, persisting the same cache line again and again is slow: the
//! line must leave the cache and reach the DIMM before the next store to it
//! can be persisted. The rotating forms spread the updates over `blocks`
//! chunks `stride` bytes apart, so consecutive persists touch different
//! lines (and, with a 256 B stride, different XPLines).
//!
//! - [`NaiveCounter`]: one 8 B word, persisted in place.
//! - [`RotatingCounter`]: update `i` writes chunk `i % blocks`; the value is
//!   the maximum over the chunks, so updates must not decrease.
//! - [`RotatingRegister`]: arbitrary updates; chunk `j` is written with the
//!   XOR of the other chunks and the new value, so the XOR of all chunks is
//!   the value. Recovery XORs every chunk and need not know which chunk was
//!   written last. `docs/FORMAT.md` has the proof.
//!
//! Every update is one aligned 8 B store followed by flush + drain; the
//! update is durable when the call returns.

use crate::layout::ATOMIC_WRITE;
use crate::media::Media;

/// The shape of a rotating counter or register: `blocks` chunks of
/// `stride` bytes, starting at `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rotation {
    /// Offset of chunk 0 (8-byte aligned).
    pub base: u64,
    /// Number of chunks (at least 1).
    pub blocks: u32,
    /// Bytes between chunk starts (a multiple of 8).
    pub stride: u32,
}

impl Rotation {
    /// The paper's shape: ten chunks 256 B apart.
    pub const PAPER: (u32, u32) = (10, 256);
    /// The public code's shape (eRPC apps/log, pmem-bench): 16 × 256 B.
    pub const PUBLIC_CODE: (u32, u32) = (16, 256);

    /// A rotation of `blocks` chunks `stride` apart at `base`.
    pub fn new(base: u64, blocks: u32, stride: u32) -> Rotation {
        assert!(blocks >= 1, "a rotation needs at least one block");
        assert!(stride as usize >= ATOMIC_WRITE, "stride {stride} below 8 bytes");
        assert!((stride as usize).is_multiple_of(ATOMIC_WRITE), "stride {stride} not a multiple of 8");
        assert!(base.is_multiple_of(ATOMIC_WRITE as u64), "base {base} not 8-byte aligned");
        Rotation { base, blocks, stride }
    }

    /// Bytes the rotation occupies.
    pub fn span(&self) -> u64 {
        (self.blocks as u64 - 1) * self.stride as u64 + ATOMIC_WRITE as u64
    }

    /// Durably zeroes every chunk (one drain for all).
    pub fn zero<M: Media>(&self, media: &mut M) {
        for index in 0..self.blocks {
            media.write_u64(self.chunk(index), 0);
            media.flush(self.chunk(index), ATOMIC_WRITE as u64);
        }
        media.drain();
    }

    /// Offset of chunk `index`.
    pub fn chunk(&self, index: u32) -> u64 {
        assert!(index < self.blocks);
        self.base + index as u64 * self.stride as u64
    }
}

/// A persistent counter in one 8 B word.
#[derive(Debug)]
pub struct NaiveCounter {
    offset: u64,
    value: u64,
}

impl NaiveCounter {
    /// Formats a zero counter at `offset`.
    pub fn create<M: Media>(media: &mut M, offset: u64) -> NaiveCounter {
        media.persist_u64(offset, 0);
        NaiveCounter { offset, value: 0 }
    }

    /// Recovers the counter at `offset`.
    pub fn recover<M: Media>(media: &M, offset: u64) -> NaiveCounter {
        NaiveCounter { offset, value: media.read_u64(offset) }
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.value
    }

    /// Durably sets the value.
    pub fn set<M: Media>(&mut self, media: &mut M, value: u64) {
        media.persist_u64(self.offset, value);
        self.value = value;
    }

    /// Durably adds `delta`.
    pub fn add<M: Media>(&mut self, media: &mut M, delta: u64) -> u64 {
        let value = self.value.checked_add(delta).expect("counter overflow");
        self.set(media, value);
        value
    }
}

/// A monotonic persistent counter rotated over several chunks.
#[derive(Debug)]
pub struct RotatingCounter {
    rotation: Rotation,
    next: u32,
    value: u64,
}

impl RotatingCounter {
    /// Formats a zero counter.
    pub fn create<M: Media>(media: &mut M, rotation: Rotation) -> RotatingCounter {
        rotation.zero(media);
        RotatingCounter { rotation, next: 0, value: 0 }
    }

    /// Recovers the counter: the maximum over the chunks. The next update
    /// goes to the chunk after the one holding it.
    pub fn recover<M: Media>(media: &M, rotation: Rotation) -> RotatingCounter {
        let mut value = 0;
        let mut holder = rotation.blocks - 1;
        for index in 0..rotation.blocks {
            let chunk = media.read_u64(rotation.chunk(index));
            if chunk > value {
                value = chunk;
                holder = index;
            }
        }
        RotatingCounter { rotation, next: (holder + 1) % rotation.blocks, value }
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.value
    }

    /// Durably sets the value, which must not decrease.
    pub fn set<M: Media>(&mut self, media: &mut M, value: u64) {
        assert!(value >= self.value, "rotating counter cannot decrease ({} -> {value})", self.value);
        media.persist_u64(self.rotation.chunk(self.next), value);
        self.next = (self.next + 1) % self.rotation.blocks;
        self.value = value;
    }

    /// Durably adds `delta`.
    pub fn add<M: Media>(&mut self, media: &mut M, delta: u64) -> u64 {
        let value = self.value.checked_add(delta).expect("counter overflow");
        self.set(media, value);
        value
    }
}

/// A persistent 8 B register with arbitrary updates, rotated over chunks
/// whose XOR is the value (seed 000 §6.3).
#[derive(Debug)]
pub struct RotatingRegister {
    rotation: Rotation,
    chunks: Vec<u64>,
    next: u32,
    value: u64,
}

impl RotatingRegister {
    /// Formats a zero register.
    pub fn create<M: Media>(media: &mut M, rotation: Rotation) -> RotatingRegister {
        rotation.zero(media);
        RotatingRegister { rotation, chunks: vec![0; rotation.blocks as usize], next: 0, value: 0 }
    }

    /// Recovers the register: the XOR of every chunk. Any chunk may take the
    /// next update, so recovery need not know which was written last.
    pub fn recover<M: Media>(media: &M, rotation: Rotation) -> RotatingRegister {
        let chunks: Vec<u64> = (0..rotation.blocks).map(|i| media.read_u64(rotation.chunk(i))).collect();
        let value = chunks.iter().fold(0, |acc, c| acc ^ c);
        RotatingRegister { rotation, chunks, next: 0, value }
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.value
    }

    /// Durably sets the value to anything.
    pub fn set<M: Media>(&mut self, media: &mut M, value: u64) {
        let index = self.next as usize;
        // XOR of the other chunks = value ^ chunks[index]; the cached copy
        // spares any read of the media.
        let others = self.value ^ self.chunks[index];
        let chunk = others ^ value;
        media.persist_u64(self.rotation.chunk(self.next), chunk);
        self.chunks[index] = chunk;
        self.next = (self.next + 1) % self.rotation.blocks;
        self.value = value;
        debug_assert_eq!(self.chunks.iter().fold(0, |a, c| a ^ c), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::MemMedia;

    #[test]
    fn rotating_counter_recovers_the_maximum() {
        let mut media = MemMedia::new(8192);
        let rotation = Rotation::new(64, 10, 256);
        let mut counter = RotatingCounter::create(&mut media, rotation);
        for i in 1..=37 {
            counter.add(&mut media, i);
        }
        let recovered = RotatingCounter::recover(&media, rotation);
        assert_eq!(recovered.get(), counter.get());
        assert_eq!(recovered.next, counter.next);
    }

    #[test]
    #[should_panic(expected = "cannot decrease")]
    fn rotating_counter_refuses_to_decrease() {
        let mut media = MemMedia::new(4096);
        let mut counter = RotatingCounter::create(&mut media, Rotation::new(0, 4, 64));
        counter.set(&mut media, 5);
        counter.set(&mut media, 4);
    }

    #[test]
    fn rotating_register_takes_any_value() {
        let mut media = MemMedia::new(8192);
        let rotation = Rotation::new(0, 16, 256);
        let mut register = RotatingRegister::create(&mut media, rotation);
        let values = [5u64, 3, u64::MAX, 0, 17, 17, 2, 1 << 63, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 44];
        for (i, &v) in values.iter().enumerate() {
            register.set(&mut media, v);
            let recovered = RotatingRegister::recover(&media, rotation);
            assert_eq!(recovered.get(), v, "after update {i}");
        }
        // Recovery restarts at chunk 0 and still keeps the invariant.
        let mut recovered = RotatingRegister::recover(&media, rotation);
        recovered.set(&mut media, 1234);
        assert_eq!(RotatingRegister::recover(&media, rotation).get(), 1234);
    }

    #[test]
    fn naive_counter_round_trips() {
        let mut media = MemMedia::new(64);
        let mut counter = NaiveCounter::create(&mut media, 8);
        counter.add(&mut media, 3);
        counter.add(&mut media, 4);
        assert_eq!(NaiveCounter::recover(&media, 8).get(), 7);
    }
}
