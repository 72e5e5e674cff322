//! Non-temporal copy and fill into persistent memory.
//!
//! The instruction set is chosen once at start-up ([`CopyIsa::detect`]):
//! AVX-512 (one 64 B streaming store per line), AVX2 (two 32 B), or SSE2
//! (four 16 B). The layout follows PMDK's `memmove_nodrain_*_nt`: an
//! unaligned head up to the next 64 B boundary is copied with ordinary
//! stores and flushed; whole lines are streamed; a tail shorter than a
//! line is copied with ordinary stores and flushed. Nothing here fences:
//! the caller drains (`sfence`) once for a whole batch.

use crate::flush::FlushFn;
use crate::layout::LINE;
use std::fmt;

/// The vector instruction set used for non-temporal stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CopyIsa {
    /// 512-bit `vmovntdq`.
    Avx512,
    /// 256-bit `vmovntdq`.
    Avx2,
    /// 128-bit `movntdq`.
    Sse2,
}

impl CopyIsa {
    /// The widest instruction set this CPU offers.
    pub fn detect() -> CopyIsa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return CopyIsa::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return CopyIsa::Avx2;
            }
        }
        CopyIsa::Sse2
    }

    /// Whether this CPU can execute `self`.
    pub fn supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                CopyIsa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
                CopyIsa::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
                CopyIsa::Sse2 => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Parses `avx512`, `avx2` or `sse2`.
    pub fn parse(name: &str) -> Option<CopyIsa> {
        match name {
            "avx512" => Some(CopyIsa::Avx512),
            "avx2" => Some(CopyIsa::Avx2),
            "sse2" => Some(CopyIsa::Sse2),
            _ => None,
        }
    }

    /// The copy and fill routines for this instruction set.
    pub fn copier(self) -> NtCopier {
        assert!(self.supported(), "{self} is not supported by this CPU");
        let (stream, fill) = match self {
            CopyIsa::Avx512 => (stream_lines_avx512 as StreamFn, fill_lines_avx512 as FillFn),
            CopyIsa::Avx2 => (stream_lines_avx2 as StreamFn, fill_lines_avx2 as FillFn),
            CopyIsa::Sse2 => (stream_lines_sse2 as StreamFn, fill_lines_sse2 as FillFn),
        };
        NtCopier { isa: self, stream, fill }
    }
}

impl fmt::Display for CopyIsa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CopyIsa::Avx512 => "avx512",
            CopyIsa::Avx2 => "avx2",
            CopyIsa::Sse2 => "sse2",
        })
    }
}

/// Streams `lines` whole 64 B lines from `src` to 64 B-aligned `dst`.
type StreamFn = unsafe fn(dst: *mut u8, src: *const u8, lines: usize);
/// Fills `lines` whole 64 B lines at 64 B-aligned `dst` with `byte`.
type FillFn = unsafe fn(dst: *mut u8, byte: u8, lines: usize);

/// Non-temporal copy and fill, bound to one instruction set.
#[derive(Clone, Copy)]
pub struct NtCopier {
    /// The instruction set in use.
    pub isa: CopyIsa,
    stream: StreamFn,
    fill: FillFn,
}

impl fmt::Debug for NtCopier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NtCopier").field("isa", &self.isa).finish()
    }
}

impl NtCopier {
    /// Copies `len` bytes from `src` to `dst` with streaming stores for the
    /// whole lines and ordinary stores + `flush` for the partial head and
    /// tail. Does not drain.
    ///
    /// # Safety
    /// `src` and `dst` are valid for `len` bytes and do not overlap.
    pub unsafe fn copy_nodrain(&self, dst: *mut u8, src: *const u8, len: usize, flush: FlushFn) {
        let head = (LINE - (dst as usize & (LINE - 1))) & (LINE - 1);
        let head = head.min(len);
        // SAFETY (whole body): every pointer stays within [dst, dst+len) and
        // [src, src+len), which the caller guarantees are valid.
        unsafe {
            if head > 0 {
                std::ptr::copy_nonoverlapping(src, dst, head);
                flush(dst, head);
            }
            let lines = (len - head) / LINE;
            if lines > 0 {
                (self.stream)(dst.add(head), src.add(head), lines);
            }
            let done = head + lines * LINE;
            if done < len {
                std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), len - done);
                flush(dst.add(done), len - done);
            }
        }
    }

    /// Fills `len` bytes at `dst` with `byte`, like [`copy_nodrain`](Self::copy_nodrain).
    ///
    /// # Safety
    /// `dst` is valid for `len` bytes.
    pub unsafe fn fill_nodrain(&self, dst: *mut u8, byte: u8, len: usize, flush: FlushFn) {
        let head = ((LINE - (dst as usize & (LINE - 1))) & (LINE - 1)).min(len);
        // SAFETY: as in copy_nodrain.
        unsafe {
            if head > 0 {
                std::ptr::write_bytes(dst, byte, head);
                flush(dst, head);
            }
            let lines = (len - head) / LINE;
            if lines > 0 {
                (self.fill)(dst.add(head), byte, lines);
            }
            let done = head + lines * LINE;
            if done < len {
                std::ptr::write_bytes(dst.add(done), byte, len - done);
                flush(dst.add(done), len - done);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f")]
    pub unsafe fn stream_lines_avx512(dst: *mut u8, src: *const u8, lines: usize) {
        for i in 0..lines {
            // SAFETY: the caller guarantees `lines` whole lines at both ends;
            // dst is 64 B aligned.
            unsafe {
                let v = _mm512_loadu_si512(src.add(i * 64) as *const _);
                _mm512_stream_si512(dst.add(i * 64) as *mut _, v);
            }
        }
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn fill_lines_avx512(dst: *mut u8, byte: u8, lines: usize) {
        let v = _mm512_set1_epi8(byte as i8);
        for i in 0..lines {
            // SAFETY: as above.
            unsafe { _mm512_stream_si512(dst.add(i * 64) as *mut _, v) };
        }
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn stream_lines_avx2(dst: *mut u8, src: *const u8, lines: usize) {
        for i in 0..lines {
            // SAFETY: as above; dst is 32 B aligned.
            unsafe {
                let s = src.add(i * 64);
                let d = dst.add(i * 64);
                let a = _mm256_loadu_si256(s as *const __m256i);
                let b = _mm256_loadu_si256(s.add(32) as *const __m256i);
                _mm256_stream_si256(d as *mut __m256i, a);
                _mm256_stream_si256(d.add(32) as *mut __m256i, b);
            }
        }
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn fill_lines_avx2(dst: *mut u8, byte: u8, lines: usize) {
        let v = _mm256_set1_epi8(byte as i8);
        for i in 0..lines {
            // SAFETY: as above.
            unsafe {
                let d = dst.add(i * 64);
                _mm256_stream_si256(d as *mut __m256i, v);
                _mm256_stream_si256(d.add(32) as *mut __m256i, v);
            }
        }
    }

    pub unsafe fn stream_lines_sse2(dst: *mut u8, src: *const u8, lines: usize) {
        for i in 0..lines {
            // SAFETY: as above; dst is 16 B aligned.
            unsafe {
                let s = src.add(i * 64);
                let d = dst.add(i * 64);
                for k in 0..4 {
                    let v = _mm_loadu_si128(s.add(k * 16) as *const __m128i);
                    _mm_stream_si128(d.add(k * 16) as *mut __m128i, v);
                }
            }
        }
    }

    pub unsafe fn fill_lines_sse2(dst: *mut u8, byte: u8, lines: usize) {
        let v = _mm_set1_epi8(byte as i8);
        for i in 0..lines {
            for k in 0..4 {
                // SAFETY: as above.
                unsafe { _mm_stream_si128(dst.add(i * 64 + k * 16) as *mut __m128i, v) };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
use x86::*;

#[cfg(not(target_arch = "x86_64"))]
mod portable {
    pub unsafe fn stream_lines_avx512(dst: *mut u8, src: *const u8, lines: usize) {
        unsafe { std::ptr::copy_nonoverlapping(src, dst, lines * 64) }
    }
    pub unsafe fn fill_lines_avx512(dst: *mut u8, byte: u8, lines: usize) {
        unsafe { std::ptr::write_bytes(dst, byte, lines * 64) }
    }
    pub use stream_lines_avx512 as stream_lines_avx2;
    pub use stream_lines_avx512 as stream_lines_sse2;
    pub use fill_lines_avx512 as fill_lines_avx2;
    pub use fill_lines_avx512 as fill_lines_sse2;
}
#[cfg(not(target_arch = "x86_64"))]
use portable::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flush::{sfence, FlushInstruction};

    fn isas() -> Vec<CopyIsa> {
        [CopyIsa::Avx512, CopyIsa::Avx2, CopyIsa::Sse2].into_iter().filter(|i| i.supported()).collect()
    }

    #[test]
    fn copy_matches_source_for_every_alignment_and_size() {
        let flush = FlushInstruction::detect().flush_fn();
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 31 % 251) as u8).collect();
        for isa in isas() {
            let copier = isa.copier();
            for dst_off in [0usize, 1, 7, 63, 64, 100] {
                for len in [0usize, 1, 63, 64, 65, 200, 256, 1000, 4096] {
                    let mut dst = vec![0xAAu8; 5200];
                    // SAFETY: both buffers hold dst_off + len bytes.
                    unsafe { copier.copy_nodrain(dst.as_mut_ptr().add(dst_off), src.as_ptr(), len, flush) };
                    sfence();
                    assert_eq!(&dst[dst_off..dst_off + len], &src[..len], "{isa} off {dst_off} len {len}");
                    assert!(dst[..dst_off].iter().all(|&b| b == 0xAA));
                    assert!(dst[dst_off + len..].iter().all(|&b| b == 0xAA));
                }
            }
        }
    }

    #[test]
    fn fill_sets_exactly_the_range() {
        let flush = FlushInstruction::detect().flush_fn();
        for isa in isas() {
            let copier = isa.copier();
            let mut dst = vec![0u8; 1024];
            // SAFETY: 5 + 700 < 1024.
            unsafe { copier.fill_nodrain(dst.as_mut_ptr().add(5), 0x5A, 700, flush) };
            sfence();
            assert!(dst[5..705].iter().all(|&b| b == 0x5A));
            assert_eq!(dst[4], 0);
            assert_eq!(dst[705], 0);
        }
    }
}
