//! Bit commands on strings, as Redis 7.0 has them: SETBIT GETBIT BITCOUNT
//! BITPOS BITOP. A string is a bit array, bit 0 the most significant bit of its
//! first byte; a missing key is an array of zeros. As SETRANGE does, a
//! write reads the string, changes it and stores it again, keeping its
//! deadline (BITOP's result replaces the target and its deadline, as SET).

use super::shared::clamp_range;
use super::{Ctx, Fail, Res};
use crate::store::{Expiry, Keyspace, Kind, ValueSource};
use pmwire_resp::numbers::parse_i64;
use pmwire_resp::reply::ReplySink;

/// Redis's refusal of a bit offset.
const BAD_OFFSET: &str = "bit offset is not an integer or out of range";

/// Argument `i` as a bit offset, a Redis integer, not negative, whose byte
/// lies below `proto-max-bulk-len` (Redis's `getBitOffsetFromArgument`):
/// the byte's index and the bit's mask in it.
fn bit_offset<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, '_, K, S>, i: usize) -> Result<(usize, u8), Fail> {
    let max_bytes = c.server.config.limits.max_bulk_bytes;
    match parse_i64(c.arg(i)) {
        Some(n) if n >= 0 && ((n as u64) >> 3) < max_bytes => {
            let byte = usize::try_from(n >> 3).map_err(|_| Fail::err(BAD_OFFSET))?;
            Ok((byte, 1u8 << (7 - (n & 7))))
        }
        _ => Err(Fail::err(BAD_OFFSET)),
    }
}

/// Whether argument `i`, a range's unit, says BIT (else BYTE; anything
/// else is a syntax error).
fn in_bits<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, '_, K, S>, i: usize) -> Result<bool, Fail> {
    match c.arg(i) {
        w if w.eq_ignore_ascii_case(b"bit") => Ok(true),
        w if w.eq_ignore_ascii_case(b"byte") => Ok(false),
        _ => Err(Fail::Syntax),
    }
}

/// SETBIT key offset value: sets or clears one bit (zero-padding the string
/// to reach it, creating the key if missing); the bit's old value.
pub(super) fn setbit<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let (byte, mask) = bit_offset(c, 2)?;
    let on = match parse_i64(c.arg(3)) {
        Some(v @ (0 | 1)) => v == 1,
        _ => return Err(Fail::err("bit is not an integer or out of range")),
    };
    let key = c.arg(1);
    c.check_fits(key, byte as u64 + 1)?;
    let mut v = c.load(key, Kind::String)?.unwrap_or_default();
    let len = v.len();
    let grows = v.len() <= byte;
    if grows {
        v.resize(byte + 1, 0);
    }
    let was = v[byte] & mask != 0;
    if grows || was != on {
        if on {
            v[byte] |= mask;
        } else {
            v[byte] &= !mask;
        }
        c.ks.set(key, Kind::String, ValueSource::Owned(v))?;
    }
    // Redis unshares the string for any SETBIT, changed or not: it is raw.
    c.server.raw_strings.mark(key, (byte + 1).max(len) as u64);
    c.out.integer(i64::from(was));
    Ok(())
}

/// GETBIT key offset: one bit; 0 past the string's end or for a missing key.
pub(super) fn getbit<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let (byte, mask) = bit_offset(c, 2)?;
    let v = c.load(c.arg(1), Kind::String)?.unwrap_or_default();
    c.out.integer(i64::from(v.get(byte).is_some_and(|b| b & mask != 0)));
    Ok(())
}

/// BITCOUNT key [start end [BYTE|BIT]]: the set bits of the string, or of
/// a range of its bytes or bits (negative offsets count from the end).
/// A missing key counts 0 before its arguments are looked at (Redis 7.0).
pub(super) fn bitcount<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let Some(v) = c.load(c.arg(1), Kind::String)? else {
        c.out.integer(0);
        return Ok(());
    };
    let len = v.len() as i64;
    let (start, end, masks) = match c.argc() {
        2 => (0, len - 1, (0u8, 0u8)),
        4 | 5 => {
            let start = c.int_arg(2)?;
            let end = c.int_arg(3)?;
            // Redis 7.0 answers an empty negative range before it reads the unit.
            if start < 0 && end < 0 && start > end {
                c.out.integer(0);
                return Ok(());
            }
            let bits = c.argc() == 5 && in_bits(c, 4)?;
            let (start, end) = clamp_range(start, end, if bits { len << 3 } else { len });
            if bits && start <= end {
                // The bits of the edge bytes outside the range, to take off.
                let first = !((1u16 << (8 - (start & 7))) - 1) as u8;
                let last = ((1u16 << (7 - (end & 7))) - 1) as u8;
                (start >> 3, end >> 3, (first, last))
            } else {
                (start, end, (0, 0))
            }
        }
        _ => return Err(Fail::Syntax),
    };
    if start > end {
        c.out.integer(0);
        return Ok(());
    }
    let (start, end) = (start as usize, end as usize);
    let bytes = &v[start..=end];
    let mut count: i64 = bytes.iter().map(|b| i64::from(b.count_ones())).sum();
    count -= i64::from((bytes[0] & masks.0).count_ones());
    count -= i64::from((bytes[bytes.len() - 1] & masks.1).count_ones());
    c.out.integer(count);
    Ok(())
}

/// BITPOS key bit [start [end [BYTE|BIT]]]: the first bit equal to `bit`
/// within the range (bytes unless BIT), as an offset from the string's
/// start; -1 if there is none. Looking for a 0 with no end given, a string
/// of ones answers the bit just past it (the string reads as padded with
/// zeros), as Redis does; a missing key is all zeros.
pub(super) fn bitpos<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let want = match c.int_arg(2)? {
        b @ (0 | 1) => b == 1,
        _ => return Err(Fail::err("The bit argument must be 1 or 0.")),
    };
    let Some(v) = c.load(c.arg(1), Kind::String)? else {
        c.out.integer(if want { -1 } else { 0 });
        return Ok(());
    };
    let len = v.len() as i64;
    // The range in bits, inclusive, and whether the caller gave its end.
    let (first, last, end_given) = match c.argc() {
        3 => (0, len * 8 - 1, false),
        4..=6 => {
            let start = c.int_arg(3)?;
            let bits = c.argc() == 6 && in_bits(c, 5)?;
            let (end, end_given) = if c.argc() >= 5 { (c.int_arg(4)?, true) } else { (len - 1, false) };
            let (start, end) = clamp_range(start, end, if bits { len << 3 } else { len });
            if bits {
                (start, end, end_given)
            } else {
                (start * 8, end * 8 + 7, end_given)
            }
        }
        _ => return Err(Fail::Syntax),
    };
    if first > last {
        c.out.integer(-1);
        return Ok(());
    }
    let bit = |i: i64| v[(i >> 3) as usize] & (0x80 >> (i & 7)) != 0;
    let found = (first..=last).find(|&i| bit(i) == want);
    c.out.integer(match found {
        Some(i) => i,
        None if !want && !end_given => last + 1,
        None => -1,
    });
    Ok(())
}

/// BITOP AND|OR|XOR|NOT destkey key [key ...]: the operation over the
/// strings (missing keys and shorter strings read as zeros) stored at
/// `destkey`, or `destkey` deleted when every input is empty; the result's
/// length.
pub(super) fn bitop<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    #[derive(Clone, Copy, PartialEq)]
    enum Op {
        And,
        Or,
        Xor,
        Not,
    }
    let name = c.arg(1);
    let op = if name.eq_ignore_ascii_case(b"and") {
        Op::And
    } else if name.eq_ignore_ascii_case(b"or") {
        Op::Or
    } else if name.eq_ignore_ascii_case(b"xor") {
        Op::Xor
    } else if name.eq_ignore_ascii_case(b"not") {
        Op::Not
    } else {
        return Err(Fail::Syntax);
    };
    if op == Op::Not && c.argc() != 4 {
        return Err(Fail::err("BITOP NOT must be called with a single source key."));
    }
    let mut sources = Vec::with_capacity(c.argc() - 3);
    for i in 3..c.argc() {
        sources.push(c.load(c.arg(i), Kind::String)?.unwrap_or_default());
    }
    let width = sources.iter().map(Vec::len).max().unwrap_or(0);
    let dest = c.arg(2);
    if width == 0 {
        c.ks.delete(dest)?;
        c.out.integer(0);
        return Ok(());
    }
    c.check_fits(dest, width as u64)?;
    let byte = |s: &Vec<u8>, j: usize| s.get(j).copied().unwrap_or(0);
    let mut out = Vec::with_capacity(width);
    for j in 0..width {
        let mut b = byte(&sources[0], j);
        if op == Op::Not {
            b = !b;
        }
        for s in &sources[1..] {
            match op {
                Op::And => b &= byte(s, j),
                Op::Or => b |= byte(s, j),
                Op::Xor => b ^= byte(s, j),
                Op::Not => unreachable!("NOT has one source"),
            }
        }
        out.push(b);
    }
    c.ks.put(dest, Kind::String, ValueSource::Owned(out), Expiry::Clear)?;
    c.server.raw_strings.mark(dest, width as u64);
    c.out.integer(width as i64);
    Ok(())
}
