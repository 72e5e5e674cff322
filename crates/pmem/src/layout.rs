//! Layout of persistent data: the 64 B cache line, the 256 B XPLine of
//! Optane DIMMs, and the padding policy of seed 004 (H5–H7).
//!
//! Seed 004 H5/H6: writes smaller than an XPLine cost a read-modify-write
//! inside the DIMM, so records that are written often should start on a
//! 256 B boundary and be padded to it; H7: where space matters more, 64 B
//! alignment avoids splitting a record over two cache lines.

/// Bytes in a CPU cache line: the unit of flushing.
pub const LINE: usize = 64;
/// Bytes in an Optane XPLine: the unit the DIMM writes internally.
pub const XPLINE: usize = 256;
/// Bytes a single store is failure-atomic for (aligned).
pub const ATOMIC_WRITE: usize = 8;

/// How records are aligned and padded in persistent memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Padding {
    /// Records packed back to back (8 B aligned).
    None,
    /// Records start on a cache line and fill whole lines.
    Line,
    /// Records start on an XPLine and fill whole XPLines.
    XpLine,
}

impl Padding {
    /// The alignment a record gets under this policy.
    #[inline]
    pub const fn align(self) -> usize {
        match self {
            Padding::None => ATOMIC_WRITE,
            Padding::Line => LINE,
            Padding::XpLine => XPLINE,
        }
    }

    /// The size a record of `len` bytes occupies under this policy.
    #[inline]
    pub const fn padded(self, len: usize) -> usize {
        align_up(len, self.align())
    }

    /// Parses `none`, `64` or `256`.
    pub fn parse(name: &str) -> Option<Padding> {
        match name {
            "none" | "8" => Some(Padding::None),
            "64" | "line" => Some(Padding::Line),
            "256" | "xpline" => Some(Padding::XpLine),
            _ => None,
        }
    }
}

/// Rounds `value` up to a multiple of `align` (a power of two). The
/// result must fit: callers bound `value` first (no wire or media value
/// reaches this unbounded); [`checked_align_up`] is the fallible form.
#[inline]
pub const fn align_up(value: usize, align: usize) -> usize {
    match checked_align_up(value, align) {
        Some(up) => up,
        None => panic!("align_up: rounded value exceeds usize::MAX"),
    }
}

/// [`align_up`], or `None` when the rounded value does not fit a `usize`.
#[inline]
pub const fn checked_align_up(value: usize, align: usize) -> Option<usize> {
    assert!(align.is_power_of_two());
    match value.checked_add(align - 1) {
        Some(v) => Some(v & !(align - 1)),
        None => None,
    }
}

/// Rounds `value` down to a multiple of `align` (a power of two).
#[inline]
pub const fn align_down(value: usize, align: usize) -> usize {
    assert!(align.is_power_of_two());
    value & !(align - 1)
}

/// The number of 64 B lines `[offset, offset + len)` touches (the range
/// must lie in the address space).
pub const fn lines_touched(offset: usize, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let Some(end) = offset.checked_add(len) else { panic!("lines_touched: range past usize::MAX") };
    (align_up(end, LINE) - align_down(offset, LINE)) / LINE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_rounds_up() {
        assert_eq!(Padding::None.padded(13), 16);
        assert_eq!(Padding::Line.padded(65), 128);
        assert_eq!(Padding::XpLine.padded(1), 256);
        assert_eq!(Padding::XpLine.padded(256), 256);
    }

    #[test]
    fn rounding_near_the_top_of_usize_is_refused_by_the_checked_form() {
        assert_eq!(checked_align_up(usize::MAX, 64), None);
        assert_eq!(checked_align_up(usize::MAX - 63, 64), Some(usize::MAX - 63));
        assert_eq!(checked_align_up(usize::MAX - 62, 64), None);
        assert_eq!(checked_align_up(65, 64), Some(128));
        assert_eq!(align_up(usize::MAX - 63, 64), usize::MAX - 63);
    }

    #[test]
    fn lines_touched_counts_straddles() {
        assert_eq!(lines_touched(0, 64), 1);
        assert_eq!(lines_touched(60, 8), 2);
        assert_eq!(lines_touched(0, 0), 0);
        assert_eq!(lines_touched(64, 129), 3);
    }
}
