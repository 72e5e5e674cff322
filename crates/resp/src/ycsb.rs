//! A YCSB-style workload generator with no I/O: it yields operations as
//! encoded RESP requests for a harness to send.
//!
//! - Keys: record `i` is `user` + `fnvhash64(i)` in decimal, as YCSB's
//!   `CoreWorkload.buildKeyName` with hashed (not ordered) inserts.
//! - Key choice: YCSB's `ScrambledZipfianGenerator`: a Zipfian over 10^10
//!   items with θ = 0.99 and YCSB's precomputed ζ(10^10, 0.99), hashed with
//!   FNV-1a-64 into `[0, record_count)`. (Only θ = 0.99 is supported: that is
//!   the constant ζ is known for.) A uniform chooser is also offered.
//! - Records: one value per key (SET/GET), `value_bytes` long (1 KB by
//!   default, YCSB's 10 fields × 100 B), printable bytes from the generator.
//! - Workloads: A is 50% read / 50% update, B 95% / 5%; reads are GET,
//!   updates and inserts SET.
//!
//! Deterministic: the same seed gives the same operations. The generator is
//! SplitMix64 (hand-written, as elsewhere in pmwire, so runs reproduce
//! without a `rand` version dependency).

use crate::client::encode_request;
use rand_xoshiro::rand_core::{RngCore, SeedableRng};

/// YCSB's ζ(10^10, 0.99) (`ScrambledZipfianGenerator.ZETAN`).
pub const ZETAN: f64 = 26.469_028_201_783_02;
/// The item count YCSB's scrambled Zipfian draws from before hashing.
pub const ITEM_COUNT: u64 = 10_000_000_000;
/// The Zipfian constant θ.
pub const THETA: f64 = 0.99;

/// YCSB's FNV-1a over the 8 bytes of `v`, low byte first, as a positive
/// `i64` (Java's `Math.abs`).
pub fn fnvhash64(v: i64) -> i64 {
    let mut h: i64 = 0xCBF2_9CE4_8422_2325_u64 as i64;
    let mut v = v;
    for _ in 0..8 {
        let octet = v & 0xff;
        v >>= 8;
        h ^= octet;
        h = h.wrapping_mul(1_099_511_628_211);
    }
    h.wrapping_abs()
}


/// SplitMix64 (`rand_xoshiro`'s): runs reproduce from a seed.
#[derive(Debug, Clone)]
pub struct Rng(rand_xoshiro::SplitMix64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(rand_xoshiro::SplitMix64::seed_from_u64(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `[0, 1)`, 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// YCSB's `ZipfianGenerator` over `[0, ITEM_COUNT]` with θ = 0.99.
#[derive(Debug, Clone)]
struct Zipfian {
    items: f64,
    alpha: f64,
    eta: f64,
    half_pow_theta: f64,
}

impl Zipfian {
    fn new() -> Self {
        let items = (ITEM_COUNT + 1) as f64;
        let zeta2 = 1.0 + 0.5f64.powf(THETA);
        let alpha = 1.0 / (1.0 - THETA);
        let eta = (1.0 - (2.0 / items).powf(1.0 - THETA)) / (1.0 - zeta2 / ZETAN);
        Zipfian { items, alpha, eta, half_pow_theta: 0.5f64.powf(THETA) }
    }

    fn next(&self, rng: &mut Rng) -> i64 {
        let u = rng.next_f64();
        let uz = u * ZETAN;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1;
        }
        (self.items * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as i64
    }
}

/// How keys are chosen for reads and updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    /// YCSB's scrambled Zipfian (θ = 0.99).
    ScrambledZipfian,
    /// Uniform over the records.
    Uniform,
}

/// A workload's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Records loaded (keys `0..record_count`).
    pub record_count: u64,
    /// Fraction of operations that are reads (the rest are updates).
    pub read_proportion: f64,
    /// Bytes per value.
    pub value_bytes: usize,
    /// Key chooser.
    pub distribution: Distribution,
    /// Seed of every random choice.
    pub seed: u64,
}

impl Workload {
    /// YCSB workload A: 50% reads, 50% updates, Zipfian, 1 KB values.
    pub fn a(record_count: u64, seed: u64) -> Self {
        Workload { record_count, read_proportion: 0.5, value_bytes: 1024, distribution: Distribution::ScrambledZipfian, seed }
    }

    /// YCSB workload B: 95% reads, 5% updates, Zipfian, 1 KB values.
    pub fn b(record_count: u64, seed: u64) -> Self {
        Workload { read_proportion: 0.95, ..Workload::a(record_count, seed) }
    }
}

/// What an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A load-phase SET.
    Insert,
    /// GET.
    Read,
    /// SET of a new value.
    Update,
}

/// One generated operation (its request is appended to the caller's buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    /// What it is.
    pub kind: OpKind,
    /// The record index (`0..record_count`).
    pub record: u64,
}

/// The generator.
#[derive(Debug, Clone)]
pub struct Generator {
    workload: Workload,
    rng: Rng,
    zipf: Zipfian,
    value: Vec<u8>,
    key: Vec<u8>,
}

impl Generator {
    /// A generator for `workload`.
    pub fn new(workload: Workload) -> Self {
        assert!(workload.record_count > 0);
        assert!(workload.record_count < ITEM_COUNT);
        assert!((0.0..=1.0).contains(&workload.read_proportion));
        assert!(workload.value_bytes > 0);
        let rng = Rng::new(workload.seed);
        let value = vec![0u8; workload.value_bytes];
        Generator { workload, rng, zipf: Zipfian::new(), value, key: Vec::with_capacity(32) }
    }

    /// The workload.
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// The key of record `i`.
    pub fn key(record: u64) -> Vec<u8> {
        let mut k = Vec::with_capacity(24);
        push_key(record, &mut k);
        k
    }

    /// The next record a read or update touches.
    pub fn next_record(&mut self) -> u64 {
        let n = self.workload.record_count;
        match self.workload.distribution {
            Distribution::Uniform => self.rng.next_u64() % n,
            Distribution::ScrambledZipfian => {
                let z = self.zipf.next(&mut self.rng);
                (fnvhash64(z) % n as i64).rem_euclid(n as i64) as u64
            }
        }
    }

    fn fill_value(&mut self) {
        let mut chunks = self.value.chunks_mut(8);
        for chunk in &mut chunks {
            let r = self.rng.next_u64().to_le_bytes();
            for (d, s) in chunk.iter_mut().zip(r) {
                *d = b' ' + (s % 95);
            }
        }
    }

    /// Appends the load-phase SET of record `i` to `out`.
    pub fn load(&mut self, record: u64, out: &mut Vec<u8>) -> Op {
        assert!(record < self.workload.record_count);
        self.fill_value();
        self.key.clear();
        push_key(record, &mut self.key);
        encode_request(&[&b"SET"[..], &self.key, &self.value], out);
        Op { kind: OpKind::Insert, record }
    }

    /// Appends the next run-phase operation to `out`.
    pub fn next(&mut self, out: &mut Vec<u8>) -> Op {
        let read = self.rng.next_f64() < self.workload.read_proportion;
        let record = self.next_record();
        self.key.clear();
        push_key(record, &mut self.key);
        if read {
            encode_request(&[&b"GET"[..], &self.key], out);
            Op { kind: OpKind::Read, record }
        } else {
            self.fill_value();
            encode_request(&[&b"SET"[..], &self.key, &self.value], out);
            Op { kind: OpKind::Update, record }
        }
    }
}

fn push_key(record: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(b"user");
    out.extend_from_slice(fnvhash64(record as i64).to_string().as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{Limits, Parsed};

    #[test]
    fn fnv_matches_ycsb() {
        // FNV-1a-64 of the little-endian bytes of 12345, then |x| as i64
        // (computed independently in Python).
        assert_eq!(fnvhash64(12345), 1_792_800_413_050_876_852);
        let h = fnvhash64(0);
        assert!(h >= 0);
        // FNV-1a of eight zero bytes, computed by hand from the definition.
        let mut e: u64 = 0xCBF2_9CE4_8422_2325;
        for _ in 0..8 {
            e = e.wrapping_mul(1_099_511_628_211);
        }
        assert_eq!(h, (e as i64).wrapping_abs());
    }

    #[test]
    fn deterministic_and_well_formed() {
        let mut a = Generator::new(Workload::a(1000, 7));
        let mut b = Generator::new(Workload::a(1000, 7));
        let (mut ba, mut bb) = (Vec::new(), Vec::new());
        for _ in 0..200 {
            assert_eq!(a.next(&mut ba), b.next(&mut bb));
        }
        assert_eq!(ba, bb);
        let segs: [&[u8]; 1] = [&ba];
        let mut p = Parsed::new(Limits::default());
        let s = p.parse(&segs);
        assert_eq!(s.consumed, ba.len());
        assert_eq!(s.commands, 200);
        for i in 0..200 {
            let r = p.request(&segs, i);
            match r.arg(0) {
                b"GET" => assert_eq!(r.len(), 2),
                b"SET" => assert_eq!(r.arg(2).len(), 1024),
                other => panic!("unexpected {other:?}"),
            }
            assert!(r.arg(1).starts_with(b"user"));
        }
    }

    #[test]
    fn mixes_and_skew() {
        let mut g = Generator::new(Workload::b(10_000, 1));
        let mut out = Vec::new();
        let mut reads = 0;
        let mut hits = std::collections::HashMap::new();
        let n = 100_000;
        for _ in 0..n {
            out.clear();
            let op = g.next(&mut out);
            assert!(op.record < 10_000);
            if op.kind == OpKind::Read {
                reads += 1;
            }
            *hits.entry(op.record).or_insert(0u32) += 1;
        }
        let read_share = reads as f64 / n as f64;
        assert!((0.94..0.96).contains(&read_share), "{read_share}");
        // Zipfian: the hottest record takes several percent of the accesses.
        let top = *hits.values().max().unwrap_or(&0) as f64 / n as f64;
        assert!(top > 0.02, "hottest share {top}");
        assert!(hits.len() > 3000, "{} distinct", hits.len());
    }
}
