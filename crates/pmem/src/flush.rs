//! Cache-line flush and drain instructions, detected once with CPUID.
//!
//! Rust has no stable intrinsics for `clwb` or `clflushopt`, so both are
//! issued with `asm!`. The choice is made once ([`FlushInstruction::detect`])
//! and stored as a function pointer in the [`Persister`] of a region, so the
//! hot path never branches on it (libpmem2's `flush_fn`/`drain_fn`).
//!
//! Invariant: after `flush(range)` then `drain()`, every 64 B line that
//! overlaps `range` has left the CPU caches for the persistence domain
//! (ADR), or is already inside it (eADR, where flush is a no-op).

use crate::layout::LINE;
use std::fmt;

/// The instruction used to write a cache line back toward memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushInstruction {
    /// `clwb`: writes back, may keep the line cached (best).
    Clwb,
    /// `clflushopt`: writes back and invalidates; weakly ordered.
    Clflushopt,
    /// `clflush`: writes back and invalidates; serialising (slowest).
    Clflush,
    /// No flush: the caches are inside the persistence domain (eADR), or
    /// the medium is persisted another way (msync).
    None,
}

impl FlushInstruction {
    /// The best flush instruction this CPU offers.
    pub fn detect() -> FlushInstruction {
        let (clflushopt, clwb, clflush) = cpuid_flush_bits();
        if clwb {
            FlushInstruction::Clwb
        } else if clflushopt {
            FlushInstruction::Clflushopt
        } else if clflush {
            FlushInstruction::Clflush
        } else {
            FlushInstruction::None
        }
    }

    /// Whether this CPU can execute `self`.
    pub fn supported(self) -> bool {
        let (clflushopt, clwb, clflush) = cpuid_flush_bits();
        match self {
            FlushInstruction::Clwb => clwb,
            FlushInstruction::Clflushopt => clflushopt,
            FlushInstruction::Clflush => clflush,
            FlushInstruction::None => true,
        }
    }

    /// Parses `clwb`, `clflushopt`, `clflush` or `none`.
    pub fn parse(name: &str) -> Option<FlushInstruction> {
        match name {
            "clwb" => Some(FlushInstruction::Clwb),
            "clflushopt" => Some(FlushInstruction::Clflushopt),
            "clflush" => Some(FlushInstruction::Clflush),
            "none" => Some(FlushInstruction::None),
            _ => None,
        }
    }

    /// The function that flushes every line overlapping `[ptr, ptr+len)`.
    pub fn flush_fn(self) -> FlushFn {
        match self {
            FlushInstruction::Clwb => flush_clwb,
            FlushInstruction::Clflushopt => flush_clflushopt,
            FlushInstruction::Clflush => flush_clflush,
            FlushInstruction::None => flush_none,
        }
    }
}

impl fmt::Display for FlushInstruction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            FlushInstruction::Clwb => "clwb",
            FlushInstruction::Clflushopt => "clflushopt",
            FlushInstruction::Clflush => "clflush",
            FlushInstruction::None => "none",
        };
        f.write_str(name)
    }
}

/// Flushes every cache line overlapping `[ptr, ptr + len)`.
///
/// # Safety
/// The range must be mapped.
pub type FlushFn = unsafe fn(ptr: *const u8, len: usize);

/// Waits until earlier flushes and non-temporal stores are in the
/// persistence domain.
pub type DrainFn = fn();

#[cfg(target_arch = "x86_64")]
fn cpuid_flush_bits() -> (bool, bool, bool) {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // CPUID is available on every x86_64 CPU.
    let leaf1 = __cpuid(1);
    let max_leaf = __cpuid(0).eax;
    let clflush = leaf1.edx & (1 << 19) != 0;
    if max_leaf < 7 {
        return (false, false, clflush);
    }
    let leaf7 = __cpuid_count(7, 0);
    let clflushopt = leaf7.ebx & (1 << 23) != 0;
    let clwb = leaf7.ebx & (1 << 24) != 0;
    (clflushopt, clwb, clflush)
}

#[cfg(not(target_arch = "x86_64"))]
fn cpuid_flush_bits() -> (bool, bool, bool) {
    (false, false, false)
}

fn line_range(ptr: *const u8, len: usize) -> (usize, usize) {
    let start = (ptr as usize) & !(LINE - 1);
    let end = (ptr as usize).saturating_add(len);
    (start, end)
}

#[cfg(target_arch = "x86_64")]
unsafe fn flush_clwb(ptr: *const u8, len: usize) {
    let (mut line, end) = line_range(ptr, len);
    while line < end {
        // SAFETY: the caller guarantees the range is mapped.
        unsafe { std::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags)) };
        line += LINE;
    }
}

#[cfg(target_arch = "x86_64")]
unsafe fn flush_clflushopt(ptr: *const u8, len: usize) {
    let (mut line, end) = line_range(ptr, len);
    while line < end {
        // SAFETY: the caller guarantees the range is mapped.
        unsafe { std::arch::asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags)) };
        line += LINE;
    }
}

#[cfg(target_arch = "x86_64")]
unsafe fn flush_clflush(ptr: *const u8, len: usize) {
    let (mut line, end) = line_range(ptr, len);
    while line < end {
        // SAFETY: the caller guarantees the range is mapped.
        unsafe { std::arch::asm!("clflush [{0}]", in(reg) line, options(nostack, preserves_flags)) };
        line += LINE;
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn flush_clwb(_ptr: *const u8, _len: usize) {
    unreachable!("clwb is x86_64 only")
}
#[cfg(not(target_arch = "x86_64"))]
unsafe fn flush_clflushopt(_ptr: *const u8, _len: usize) {
    unreachable!("clflushopt is x86_64 only")
}
#[cfg(not(target_arch = "x86_64"))]
unsafe fn flush_clflush(_ptr: *const u8, _len: usize) {
    unreachable!("clflush is x86_64 only")
}

unsafe fn flush_none(_ptr: *const u8, _len: usize) {}

/// `sfence`: orders earlier flushes and non-temporal stores before later
/// stores; with ADR, they are then durable.
pub fn sfence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no memory operands.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// A drain that does nothing (file regions: msync already waited).
pub fn drain_none() {}

/// Flush and drain, chosen once when a region is mapped.
#[derive(Clone, Copy)]
pub struct Persister {
    /// What `flush` executes.
    pub instruction: FlushInstruction,
    /// Flushes the lines of a range.
    pub flush: FlushFn,
    /// Waits for earlier flushes.
    pub drain: DrainFn,
}

impl Persister {
    /// A persister that flushes with `instruction` and drains with `sfence`.
    pub fn with_instruction(instruction: FlushInstruction) -> Persister {
        Persister { instruction, flush: instruction.flush_fn(), drain: sfence }
    }

    /// Flushes `[ptr, ptr + len)` then drains.
    ///
    /// # Safety
    /// The range must be mapped.
    #[inline]
    pub unsafe fn persist(&self, ptr: *const u8, len: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { (self.flush)(ptr, len) };
        (self.drain)();
    }
}

impl fmt::Debug for Persister {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Persister").field("instruction", &self.instruction).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detected_instruction_is_supported_and_runs() {
        let instruction = FlushInstruction::detect();
        assert!(instruction.supported());
        let data = vec![7u8; 4096];
        let persister = Persister::with_instruction(instruction);
        // SAFETY: the vector is mapped for its length.
        unsafe { persister.persist(data.as_ptr().wrapping_add(3), 1000) };
        assert_eq!(data[500], 7);
    }

    #[test]
    fn parse_round_trips() {
        for i in [FlushInstruction::Clwb, FlushInstruction::Clflushopt, FlushInstruction::Clflush, FlushInstruction::None] {
            assert_eq!(FlushInstruction::parse(&i.to_string()), Some(i));
        }
        assert_eq!(FlushInstruction::parse("wbinvd"), None);
    }
}
