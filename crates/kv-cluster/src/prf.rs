//! What an entry's seed becomes: SipHash-2-4 keyed by the seed, one input
//! word per purpose ([`derive`]).
//!
//! The executor's generator is SplitMix64, which a client that sees enough
//! of its draws (SRANDMEMBER with a large count) could run backwards to its
//! seed. So the generator is never seeded with the entry's seed itself, but
//! with a pseudo-random function of it: knowing the generator's seed tells
//! nothing of the seed, hence nothing of the chunked collections' secret
//! derived from the same seed for another purpose. SipHash is written here
//! (twenty lines) rather than taken from `std`, whose `DefaultHasher` may
//! change between Rust releases: every member must derive the same values.

/// The executor's generator for one entry.
pub const RNG: u64 = 1;
/// The chunked collections' generation secret, installed by the first entry.
pub const SECRET: u64 = 2;

/// SipHash-2-4 of the one word `purpose`, keyed by `(seed, !seed)`.
pub fn derive(seed: u64, purpose: u64) -> u64 {
    siphash(seed, !seed, purpose)
}

/// SipHash-2-4 of the 8-byte message `m` (little-endian) under key `(k0, k1)`.
fn siphash(k0: u64, k1: u64, m: u64) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let last = 8u64 << 56; // the length byte; no tail bytes
    for w in [m, last] {
        v[3] ^= w;
        round(&mut v);
        round(&mut v);
        v[0] ^= w;
    }
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SipHash-2-4's reference vector: key 00..0f, message 00..07
    /// (Aumasson and Bernstein's `vectors.h`, `vectors_sip64[8]`: 62 24 93 9a 79 f5 f5 93).
    #[test]
    fn matches_the_reference_vector() {
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let m = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(siphash(k0, k1, m), u64::from_le_bytes([0x62, 0x24, 0x93, 0x9a, 0x79, 0xf5, 0xf5, 0x93]));
    }

    #[test]
    fn purposes_and_seeds_differ() {
        assert_ne!(derive(7, RNG), derive(7, SECRET));
        assert_ne!(derive(7, RNG), derive(8, RNG));
        assert_eq!(derive(7, RNG), derive(7, RNG));
    }
}
