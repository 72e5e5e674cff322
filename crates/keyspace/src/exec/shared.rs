//! Helpers more than one command family uses, so that the families
//! (strings, keys, hashes, lists, sets, zsets, blocking, multi, admin)
//! depend only on the core ([`super::Ctx`], [`super::Fail`], this module,
//! [`super::list_ops`], [`super::large`]) and never on each other: SCAN-style
//! cursors and options, random draws and their replies (SRANDMEMBER,
//! HRANDFIELD, ZRANDMEMBER), ZADD's options (the ordinary and the chunked
//! path), and the byte or bit ranges of GETRANGE, BITCOUNT and BITPOS.

use super::{Ctx, Fail, Res};
use crate::store::Keyspace;
use pmwire_resp::reply::ReplySink;

/// A range of `total` units (bytes, bits) with negative ends counted from
/// the end, clamped to `0..total` as Redis clamps GETRANGE's and
/// BITCOUNT's (the end may come out below the start: an empty range).
pub(super) fn clamp_range(start: i64, end: i64, total: i64) -> (i64, i64) {
    let start = if start < 0 { start + total } else { start };
    let end = if end < 0 { end + total } else { end };
    (start.max(0), end.max(0).min(total - 1))
}

/// Redis's cursor parse (`strtoul` base 10: optional sign, `""` is 0, a
/// negative number wraps; no leading space, nothing after, no overflow).
pub(super) fn parse_cursor(s: &[u8]) -> Option<u64> {
    let (negative, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if s.is_empty() {
        return Some(0);
    }
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if negative { v.wrapping_neg() } else { v })
}

/// SSCAN's (HSCAN's, ZSCAN's) COUNT (≥ 1, at most the server's scan bound)
/// and MATCH.
pub(super) fn scan_opts<'r, K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &Ctx<'_, 'r, K, S>,
) -> Result<(usize, Option<&'r [u8]>), Fail> {
    let (mut count, mut pattern) = (10i64, None);
    let mut i = 3;
    while i < c.argc() {
        let a = c.arg(i);
        if a.eq_ignore_ascii_case(b"count") && i + 1 < c.argc() {
            count = c.int_arg(i + 1)?;
            if count < 1 {
                return Err(Fail::Syntax);
            }
        } else if a.eq_ignore_ascii_case(b"match") && i + 1 < c.argc() {
            let p = c.arg(i + 1);
            pattern = if p == b"*" { None } else { Some(p) };
        } else {
            return Err(Fail::Syntax);
        }
        i += 2;
    }
    let count = (count as u64).min(c.server.config.scan_max_count as u64) as usize;
    Ok((count, pattern))
}

/// The page SSCAN-style cursors give over `items` (sorted by their first
/// element, distinct): a cursor stands for the last element answered, so
/// an element present for the whole iteration is answered exactly once.
/// Replies `[cursor, [element, value, ...]]`, MATCH applied to elements.
pub(super) fn scan_pairs<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    cursor: u64,
    items: &[(&[u8], Vec<u8>)],
) -> Res {
    let (count, pattern) = scan_opts(c)?;
    let after = match cursor {
        0 => None,
        n => Some(c.server.cursors.keys.get(&n).cloned().ok_or_else(|| Fail::err("invalid cursor"))?),
    };
    let start = after.map_or(0, |a| items.partition_point(|m| m.0 <= a.as_slice()));
    let end = start.saturating_add(count).min(items.len());
    let page = &items[start..end];
    let next = match page.last() {
        Some(last) if end < items.len() => c.server.remember_cursor(last.0.to_vec()),
        _ => 0,
    };
    let shown: Vec<&(&[u8], Vec<u8>)> =
        page.iter().filter(|m| pattern.is_none_or(|p| crate::glob::matches(p, m.0))).collect();
    c.out.array(2);
    c.out.bulk(next.to_string().as_bytes());
    c.out.array(shown.len() * 2);
    for (m, v) in shown {
        c.out.bulk(m);
        c.out.bulk(v);
    }
    Ok(())
}

/// Most members one SRANDMEMBER with a negative count answers (members may
/// repeat, so the reply is not bounded by the set; Redis has no bound).
pub const MAX_RANDOM_REPLY: u64 = 1 << 20;

/// Most member bytes one SRANDMEMBER with a negative count answers.
pub const MAX_RANDOM_REPLY_BYTES: u64 = 64 << 20;

/// `n` draws with repetition from elements of `sizes[i]` bytes, refused
/// beyond [`MAX_RANDOM_REPLY`] elements or [`MAX_RANDOM_REPLY_BYTES`] bytes
/// (also HRANDFIELD's and ZRANDMEMBER's negative counts).
pub(super) fn draws_sized(server: &mut super::Server, sizes: &[u64], n: u64) -> Result<Vec<usize>, Fail> {
    let too_many = || {
        Fail::err(&format!(
            "value is out of range, pmwire answers at most {MAX_RANDOM_REPLY} random members and {MAX_RANDOM_REPLY_BYTES} bytes"
        ))
    };
    if n > MAX_RANDOM_REPLY {
        return Err(too_many());
    }
    let mut bytes = 0u64;
    let mut picked = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let i = server.random_below(sizes.len() as u64) as usize;
        bytes += sizes[i];
        if bytes > MAX_RANDOM_REPLY_BYTES {
            return Err(too_many());
        }
        picked.push(i);
    }
    Ok(picked)
}

/// The count of HRANDFIELD / ZRANDMEMBER (`key count [WITH...]`), checked
/// as Redis 7.0 does before the key is looked up: within ±`LONG_MAX`, the
/// option word, and within ±`LONG_MAX/2` with it. `None`: no count given.
pub(super) fn random_count<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &Ctx<'_, '_, K, S>,
    with: &[u8],
) -> Result<Option<(i64, bool)>, Fail> {
    if c.argc() < 3 {
        return Ok(None);
    }
    let n = c.int_arg(2)?;
    if n == i64::MIN {
        return Err(Fail::err(
            "value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        ));
    }
    if c.argc() > 4 || (c.argc() == 4 && !c.arg(3).eq_ignore_ascii_case(with)) {
        return Err(Fail::Syntax);
    }
    let withvalues = c.argc() == 4;
    if withvalues && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&n) {
        return Err(Fail::err("value is out of range"));
    }
    Ok(Some((n, withvalues)))
}

/// Positions drawn for a random-element count over `len` elements of
/// `sizes[i]` bytes: distinct for a positive count (at most `len`),
/// with repetition for a negative one (bounded as SRANDMEMBER is).
pub(super) fn random_picks(c: &mut super::Server, sizes: &[u64], n: i64) -> Result<Vec<usize>, Fail> {
    let len = sizes.len();
    if n >= 0 {
        return Ok(c.random_distinct(len, usize::try_from(n).unwrap_or(usize::MAX).min(len)));
    }
    draws_sized(c, sizes, n.unsigned_abs())
}

/// Writes `picked` pairs as Redis does for WITHVALUES / WITHSCORES: flat
/// in RESP2, `[element, value]` arrays in RESP3; `value` writes the second.
pub(super) fn reply_pairs<K: Keyspace, S: ReplySink<K::Value> + ?Sized, T>(
    c: &mut Ctx<'_, '_, K, S>,
    picked: &[T],
    first: impl Fn(&T) -> &[u8],
    mut second: impl FnMut(&mut pmwire_resp::reply::Out<'_, K::Value, S>, &T),
) {
    let resp3 = c.out.protocol == pmwire_resp::reply::Protocol::Resp3;
    c.out.array(if resp3 { picked.len() } else { picked.len() * 2 });
    for p in picked {
        if resp3 {
            c.out.array(2);
        }
        c.out.bulk(first(p));
        second(&mut c.out, p);
    }
}

/// ZADD's options.
#[derive(Default)]
pub(super) struct ZaddFlags {
    pub(super) nx: bool,
    pub(super) xx: bool,
    pub(super) ch: bool,
    pub(super) incr: bool,
    pub(super) gt: bool,
    pub(super) lt: bool,
}

/// ZADD's options, read from argument 2 up to the first that is not one, and
/// the index of that argument (the first score).
pub(super) fn zadd_flags<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, '_, K, S>) -> (ZaddFlags, usize) {
    let mut f = ZaddFlags::default();
    let mut idx = 2;
    while idx < c.argc() {
        let o = c.arg(idx);
        let is = |w: &[u8]| o.eq_ignore_ascii_case(w);
        if is(b"nx") {
            f.nx = true;
        } else if is(b"xx") {
            f.xx = true;
        } else if is(b"ch") {
            f.ch = true;
        } else if is(b"incr") {
            f.incr = true;
        } else if is(b"gt") {
            f.gt = true;
        } else if is(b"lt") {
            f.lt = true;
        } else {
            break;
        }
        idx += 1;
    }
    (f, idx)
}
