//! CRC-32C: the torn-write detector of log entries.
//!
//! Bit-compatible with the `crc32c` crate (`crc32c_append`). That crate
//! runs three independent `crc32` instruction streams over blocks of
//! 3 × 256 B or more and joins them with tables; below 768 B it falls back
//! to one stream, and a `crc32` instruction has a latency of 3 cycles, so
//! a 272 B log entry costs 34 × 3 cycles of pure latency (about 30 ns
//! here; the entry's whole persist floor is about 240 ns). This module
//! runs four streams at any length from 64 B and joins them by carry-less
//! multiplication (the method of Intel's "Fast CRC Computation for iSCSI
//! Polynomial Using CRC32 Instruction", 2011): shifting a CRC state over
//! `n` zero bytes is a multiplication by x^(8n) mod P, one `pclmulqdq`
//! with a precomputed constant and one `crc32` reduction. The incoming
//! state (the seed, or a log entry's `lsn | len`) is shifted over the
//! streamed words in parallel with them, not fed into the first stream,
//! so it adds nothing to the critical path: for a 256 B payload, four
//! streams of 8 words (24 cycles) and one join, where three streams ran
//! the seed's 2 `crc32`s, 10 words, the join and 2 leftover words on one
//! chain. The stream loop reads words without bounds checks (four
//! `crc32`s, an increment and a branch per iteration).
//!
//! Beyond [`MAX_PARALLEL`] bytes, and without SSE 4.2 and PCLMULQDQ
//! (checked once), it calls the `crc-fast` crate, which folds 64 B lanes
//! with VPCLMULQDQ where the CPU has it (chosen at run time): on this
//! machine 1.7× three streams at 1 KiB and 3.3× at 4 KiB (31 GB/s),
//! while below about 500 B its set-up costs more than it saves.

use std::sync::OnceLock;

/// Inputs longer than this go to `crc-fast`.
pub const MAX_PARALLEL: usize = 8 * MAX_WORDS;

/// Longest input of the streams, in 8 B words (504 B).
const MAX_WORDS: usize = 63;

/// Independent `crc32` chains over the input.
const STREAMS: usize = 4;

/// Shorter inputs are not worth the join (a multiplication per stream).
const MIN_PARALLEL: usize = 64;

/// The reflected Castagnoli polynomial.
const POLY: u32 = 0x82F6_3B78;

/// `crc32c_append(crc, data)`: the CRC-32C of `data` continuing from the
/// finished CRC `crc` (0 to start), as the `crc32c` crate defines it.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    match accelerated() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `accelerated` checked SSE 4.2 and PCLMULQDQ at run time.
        Some(shifts) if data.len() <= MAX_PARALLEL => unsafe { x86::crc32c(crc, data, shifts) },
        _ => folded(crc, data),
    }
}

/// `crc32c_append` by `crc-fast`. Its state is the CRC register before the
/// final inversion, so continuing from a finished CRC starts from `!crc`.
fn folded(crc: u32, data: &[u8]) -> u32 {
    let mut digest = crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    digest.update(data);
    digest.finalize() as u32
}

/// `crc32c_append` over `word`'s 8 little-endian bytes, then `half`'s 4,
/// then `data`: a record whose fixed fields sit in registers, checksummed
/// in one call (a log entry's `lsn | len` and payload) without storing the
/// fields first.
#[inline]
pub fn crc32c_append_parts(crc: u32, word: u64, half: u32, data: &[u8]) -> u32 {
    match accelerated() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `accelerated` checked SSE 4.2 and PCLMULQDQ at run time.
        Some(shifts) if data.len() <= MAX_PARALLEL => unsafe { x86::crc32c_parts(crc, word, half, data, shifts) },
        _ => {
            let mut fields = [0u8; 12];
            fields[..8].copy_from_slice(&word.to_le_bytes());
            fields[8..].copy_from_slice(&half.to_le_bytes());
            crc32c_append(crc32c_append(crc, &fields), data)
        }
    }
}

/// `crc32c_append(0, data)`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// Shift constants, `K[m - 1]` = x^(64 m − 33) mod P for a shift over
/// `m` words, m = 1 ..= MAX_WORDS; `None` if the CPU lacks the
/// instructions.
#[inline]
fn accelerated() -> Option<&'static [u64; MAX_WORDS]> {
    static SHIFTS: OnceLock<Option<Box<[u64; MAX_WORDS]>>> = OnceLock::new();
    SHIFTS
        .get_or_init(|| {
            if !supported() {
                return None;
            }
            let mut k = Box::new([0u64; MAX_WORDS]);
            for (m, slot) in k.iter_mut().enumerate() {
                *slot = u64::from(x_pow_mod(64 * (m as u64 + 1) - 33));
            }
            Some(k)
        })
        .as_deref()
}

fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("sse4.2") && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// x^n mod P in the reflected representation (bit 31 is x^0).
fn x_pow_mod(n: u64) -> u32 {
    let mut v: u32 = 0x8000_0000;
    for _ in 0..n {
        v = if v & 1 != 0 { (v >> 1) ^ POLY } else { v >> 1 };
    }
    v
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{MAX_WORDS, MIN_PARALLEL, STREAMS};
    use std::arch::x86_64::{
        _mm_clmulepi64_si128, _mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8, _mm_cvtsi128_si64,
        _mm_cvtsi64_si128,
    };

    /// The raw state `s` (no final inversion) carried over `m` zero words,
    /// 1 <= m <= MAX_WORDS.
    #[inline]
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    unsafe fn shift(s: u64, m: usize, k: &[u64; MAX_WORDS]) -> u32 {
        let product = _mm_clmulepi64_si128::<0>(_mm_cvtsi64_si128(s as i64), _mm_cvtsi64_si128(k[m - 1] as i64));
        _mm_crc32_u64(0, _mm_cvtsi128_si64(product) as u64) as u32
    }

    /// # Safety
    /// The CPU has SSE 4.2 and PCLMULQDQ; `data.len() <= MAX_PARALLEL`.
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    pub(super) unsafe fn crc32c(crc: u32, data: &[u8], k: &[u64; MAX_WORDS]) -> u32 {
        !raw(!crc, data, k)
    }

    /// `crc32c` over `word`'s 8 LE bytes, `half`'s 4, then `data`, in one call.
    ///
    /// # Safety
    /// As [`crc32c`].
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    pub(super) unsafe fn crc32c_parts(crc: u32, word: u64, half: u32, data: &[u8], k: &[u64; MAX_WORDS]) -> u32 {
        let s = _mm_crc32_u32(_mm_crc32_u64(u64::from(!crc), word) as u32, half);
        !raw(s, data, k)
    }

    /// The raw state (no inversions) `s` carried over `data`
    /// (`data.len() <= MAX_PARALLEL`, asserted).
    ///
    /// From `MIN_PARALLEL` bytes the first `STREAMS * n` words run as
    /// `STREAMS` chains from zero, and the state after them is the XOR of
    /// each chain's state shifted over the words after it and of `s`
    /// shifted over all of them (the CRC is linear in state and data).
    #[inline]
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    unsafe fn raw(s: u32, data: &[u8], k: &[u64; MAX_WORDS]) -> u32 {
        let words = data.len() / 8;
        assert!(words <= MAX_WORDS, "{} B is beyond the streams", data.len());
        let at = |i: usize| {
            debug_assert!(i < words);
            // SAFETY: i < words, so the 8 bytes at 8 i lie inside `data`.
            u64::from_le(unsafe { data.as_ptr().add(8 * i).cast::<u64>().read_unaligned() })
        };
        let mut t = u64::from(s);
        let mut done = 0;
        if data.len() >= MIN_PARALLEL {
            let n = words / STREAMS;
            let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
            for i in 0..n {
                a = _mm_crc32_u64(a, at(i));
                b = _mm_crc32_u64(b, at(n + i));
                c = _mm_crc32_u64(c, at(2 * n + i));
                d = _mm_crc32_u64(d, at(3 * n + i));
            }
            let joined = shift(t, 4 * n, k) ^ shift(a, 3 * n, k) ^ shift(b, 2 * n, k) ^ shift(c, n, k) ^ d as u32;
            t = u64::from(joined);
            done = STREAMS * n;
        }
        for i in done..words {
            t = _mm_crc32_u64(t, at(i));
        }
        let mut s = t as u32;
        let mut rest = &data[8 * words..];
        if rest.len() >= 4 {
            s = _mm_crc32_u32(s, u32::from_le_bytes(rest[..4].try_into().unwrap()));
            rest = &rest[4..];
        }
        if rest.len() >= 2 {
            s = _mm_crc32_u16(s, u16::from_le_bytes(rest[..2].try_into().unwrap()));
            rest = &rest[2..];
        }
        if let Some(&byte) = rest.first() {
            s = _mm_crc32_u8(s, byte);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(len: usize, seed: u64) -> Vec<u8> {
        use rand::{RngCore, SeedableRng};
        let mut data = vec![0u8; len];
        rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut data);
        data
    }

    #[test]
    fn matches_the_crc32c_crate_at_every_length() {
        for len in 0..=MAX_PARALLEL + 64 {
            let data = bytes(len, len as u64 + 7);
            for seed in [0u32, 1, 0xdead_beef, u32::MAX] {
                assert_eq!(crc32c_append(seed, &data), crc32c::crc32c_append(seed, &data), "len {len} seed {seed:#x}");
            }
        }
    }

    #[test]
    fn parts_match_the_bytes_they_stand_for() {
        for len in [0, 1, 47, 48, 256, 272, MAX_PARALLEL, MAX_PARALLEL + 1, 4096] {
            let data = bytes(len, len as u64 + 3);
            for (seed, word, half) in [(0u32, 0u64, 0u32), (7, 0x0102_0304_0506_0708, 256), (u32::MAX, u64::MAX, u32::MAX)] {
                let mut flat = word.to_le_bytes().to_vec();
                flat.extend_from_slice(&half.to_le_bytes());
                flat.extend_from_slice(&data);
                let want = crc32c::crc32c_append(seed, &flat);
                assert_eq!(crc32c_append_parts(seed, word, half, &data), want, "len {len} seed {seed:#x}");
            }
        }
    }

    #[test]
    fn matches_at_unaligned_starts_and_chained() {
        let data = bytes(4096, 99);
        for start in 0..8 {
            for len in [47, 48, 49, 255, 256, 272, 1000, MAX_PARALLEL] {
                let slice = &data[start..start + len];
                assert_eq!(crc32c(slice), crc32c::crc32c(slice));
                let (head, tail) = slice.split_at(len / 3);
                assert_eq!(crc32c_append(crc32c(head), tail), crc32c::crc32c(slice));
            }
        }
    }

    #[test]
    fn long_inputs_match_the_crc32c_crate() {
        let data = bytes(64 << 10, 5);
        for len in [MAX_PARALLEL + 1, 512, 1000, 1024, 1040, 2048, 4096, 4111, 16 << 10, 64 << 10] {
            for start in [0, 3] {
                let slice = &data[start..start + len - start];
                for seed in [0u32, 1, 0xdead_beef, u32::MAX] {
                    assert_eq!(crc32c_append(seed, slice), crc32c::crc32c_append(seed, slice), "len {len} seed {seed:#x}");
                }
            }
        }
    }

    #[test]
    fn known_answer() {
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn detects_a_stale_word() {
        let data = bytes(272, 3);
        let good = crc32c(&data);
        for w in 0..34 {
            let mut torn = data.clone();
            torn[8 * w] ^= 0x40;
            assert_ne!(crc32c(&torn), good, "word {w}");
        }
    }
}
