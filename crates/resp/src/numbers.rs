//! Redis's number conversions, byte for byte: `string2ll` (integers), `strtod`
//! as Redis calls it (scores and range bounds), and `%.17g` (how Redis 7.0
//! replies with a double).
//!
//! Invariant: every function here is pure and total (no panics on any input).

/// Redis `string2ll`: optional `-`, no `+`, no leading zeros (except `"0"`),
/// no spaces, at most 20 characters, within `i64`.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() >= 21 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    let first = *digits.first()?;
    if !(b'1'..=b'9').contains(&first) {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if negative {
        if v > (i64::MAX as u64) + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

/// C `isspace` in the "C" locale.
pub fn is_c_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// What `strtod` did: the value, how many bytes it consumed (0 = no
/// conversion), and whether it would have set `ERANGE` to a value Redis rejects
/// (overflow to infinity, or underflow to zero).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Strtod {
    /// The converted value (0.0 when nothing was converted).
    pub value: f64,
    /// Bytes consumed, including leading white space; 0 when no conversion.
    pub end: usize,
    /// `errno == ERANGE` with a result of ±HUGE_VAL or zero.
    pub range_error: bool,
}

/// glibc `strtod` in the "C" locale: leading white space, sign, decimal or
/// hexadecimal (`0x1.8p3`) floats, `inf`, `infinity`, `nan`, `nan(...)`.
pub fn strtod(s: &[u8]) -> Strtod {
    let none = Strtod { value: 0.0, end: 0, range_error: false };
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        negative = s[i] == b'-';
        i += 1;
    }
    let rest = &s[i..];
    let sign = if negative { -1.0 } else { 1.0 };
    if starts_with_nocase(rest, b"infinity") {
        return Strtod { value: sign * f64::INFINITY, end: i + 8, range_error: false };
    }
    if starts_with_nocase(rest, b"inf") {
        return Strtod { value: sign * f64::INFINITY, end: i + 3, range_error: false };
    }
    if starts_with_nocase(rest, b"nan") {
        let mut end = i + 3;
        if s.get(end) == Some(&b'(') {
            let mut j = end + 1;
            while j < s.len() && (s[j].is_ascii_alphanumeric() || s[j] == b'_') {
                j += 1;
            }
            if s.get(j) == Some(&b')') {
                end = j + 1;
            }
        }
        return Strtod { value: f64::NAN, end, range_error: false };
    }
    if rest.len() >= 2 && rest[0] == b'0' && (rest[1] | 0x20) == b'x' {
        if let Some((v, n, nonzero)) = hex_float(&rest[2..]) {
            let value = sign * v;
            return Strtod { value, end: i + 2 + n, range_error: v.is_infinite() || (v == 0.0 && nonzero) };
        }
        // "0x" with no hex digits: strtod converts the "0" alone.
        return Strtod { value: sign * 0.0, end: i + 1, range_error: false };
    }
    match decimal_prefix(rest) {
        None => none,
        Some((n, nonzero)) => {
            let text = std::str::from_utf8(&rest[..n]).unwrap_or("0");
            let v: f64 = text.parse().unwrap_or(0.0);
            let range_error = v.is_infinite() || (v == 0.0 && nonzero);
            Strtod { value: sign * v, end: i + n, range_error }
        }
    }
}

fn starts_with_nocase(s: &[u8], word: &[u8]) -> bool {
    s.len() >= word.len() && s[..word.len()].eq_ignore_ascii_case(word)
}

/// The longest prefix that is a decimal float (`1`, `1.`, `.5`, `1e5`), and
/// whether its mantissa has a non-zero digit.
fn decimal_prefix(s: &[u8]) -> Option<(usize, bool)> {
    let mut i = 0;
    let mut digits = 0;
    let mut nonzero = false;
    while i < s.len() && s[i].is_ascii_digit() {
        nonzero |= s[i] != b'0';
        i += 1;
        digits += 1;
    }
    if i < s.len() && s[i] == b'.' {
        i += 1;
        while i < s.len() && s[i].is_ascii_digit() {
            nonzero |= s[i] != b'0';
            i += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    if i < s.len() && (s[i] | 0x20) == b'e' {
        let mut j = i + 1;
        if j < s.len() && (s[j] == b'+' || s[j] == b'-') {
            j += 1;
        }
        let start = j;
        while j < s.len() && s[j].is_ascii_digit() {
            j += 1;
        }
        if j > start {
            i = j;
        }
    }
    Some((i, nonzero))
}

/// A hex float's digits after `0x`: its value, the bytes it took, and
/// whether any digit was nonzero (a zero value is then an underflow).
fn hex_float(s: &[u8]) -> Option<(f64, usize, bool)> {
    let mut i = 0;
    let mut mantissa = 0.0f64;
    let mut digits = 0;
    let mut exp2: i64 = 0;
    while i < s.len() && s[i].is_ascii_hexdigit() {
        mantissa = mantissa * 16.0 + f64::from(hex_val(s[i]));
        i += 1;
        digits += 1;
    }
    if i < s.len() && s[i] == b'.' {
        let mut j = i + 1;
        let mut frac = 0;
        while j < s.len() && s[j].is_ascii_hexdigit() {
            mantissa = mantissa * 16.0 + f64::from(hex_val(s[j]));
            j += 1;
            frac += 1;
        }
        if digits + frac > 0 {
            i = j;
            digits += frac;
            exp2 -= 4 * frac;
        }
    }
    if digits == 0 {
        return None;
    }
    if i < s.len() && (s[i] | 0x20) == b'p' {
        let mut j = i + 1;
        let mut negative = false;
        if j < s.len() && (s[j] == b'+' || s[j] == b'-') {
            negative = s[j] == b'-';
            j += 1;
        }
        let start = j;
        let mut e: i64 = 0;
        while j < s.len() && s[j].is_ascii_digit() {
            e = (e * 10 + i64::from(s[j] - b'0')).min(100_000);
            j += 1;
        }
        if j > start {
            exp2 += if negative { -e } else { e };
            i = j;
        }
    }
    let exp2 = exp2.clamp(-100_000, 100_000) as i32;
    // In two steps, so a large mantissa with a very negative exponent is
    // not lost to an intermediate underflow.
    let half = exp2 / 2;
    Some((mantissa * 2f64.powi(half) * 2f64.powi(exp2 - half), i, mantissa != 0.0))
}

fn hex_val(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        _ => (c | 0x20) - b'a' + 10,
    }
}

/// Redis `getDoubleFromObject` / `string2d` (ZADD scores, ZINCRBY): the whole
/// string must convert, no leading space, no NaN, no overflow or underflow.
pub fn parse_score(s: &[u8]) -> Option<f64> {
    if s.is_empty() || is_c_space(s[0]) {
        return None;
    }
    let r = strtod(s);
    if r.end != s.len() || r.range_error || r.value.is_nan() {
        return None;
    }
    Some(r.value)
}

/// The bound of a score range (`zslParseRange`): `(` makes it exclusive;
/// the rest goes through `strtod`, which must consume it all (so an empty
/// string is 0, as in Redis); NaN is refused.
pub fn parse_score_bound(s: &[u8]) -> Option<(f64, bool)> {
    let (exclusive, body) = match s.first() {
        Some(b'(') => (true, &s[1..]),
        _ => (false, s),
    };
    let r = strtod(body);
    if r.end != body.len() || r.value.is_nan() {
        return None;
    }
    Some((r.value, exclusive))
}

/// Appends `d` as C's `printf("%.17g", d)` does (Redis 7.0 `addReplyDouble`
/// for finite values; infinities are `inf` and `-inf`).
pub fn format_double(d: f64, out: &mut Vec<u8>) {
    if d.is_infinite() {
        out.extend_from_slice(if d > 0.0 { b"inf" } else { b"-inf" });
        return;
    }
    if d.is_nan() {
        out.extend_from_slice(b"nan");
        return;
    }
    if d == 0.0 {
        out.extend_from_slice(if d.is_sign_negative() { b"-0" } else { b"0" });
        return;
    }
    let sci = format!("{:.16e}", d.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    assert!(digits.len() == 17);
    if d < 0.0 {
        out.push(b'-');
    }
    if !(-4..17).contains(&exp) {
        let sig = trim_zeros(&digits);
        out.push(sig[0]);
        if sig.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&sig[1..]);
        }
        out.push(b'e');
        out.push(if exp < 0 { b'-' } else { b'+' });
        let e = exp.unsigned_abs();
        if e < 10 {
            out.push(b'0');
        }
        out.extend_from_slice(e.to_string().as_bytes());
    } else if exp >= 0 {
        let int_len = exp as usize + 1;
        out.extend_from_slice(&digits[..int_len]);
        let frac = trim_zeros(&digits[int_len..]);
        if !frac.is_empty() {
            out.push(b'.');
            out.extend_from_slice(frac);
        }
    } else {
        out.extend_from_slice(b"0.");
        for _ in 0..(-exp - 1) {
            out.push(b'0');
        }
        out.extend_from_slice(trim_zeros(&digits));
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let mut n = d.len();
    while n > 0 && d[n - 1] == b'0' {
        n -= 1;
    }
    &d[..n]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(d: f64) -> String {
        let mut v = Vec::new();
        format_double(d, &mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn g17_matches_glibc() {
        assert_eq!(fmt(1.0), "1");
        assert_eq!(fmt(1.5), "1.5");
        assert_eq!(fmt(1.1), "1.1000000000000001");
        assert_eq!(fmt(0.1), "0.10000000000000001");
        assert_eq!(fmt(1e20), "1e+20");
        assert_eq!(fmt(1.5e308), "1.5e+308");
        assert_eq!(fmt(123456789012345678.0), "1.2345678901234568e+17");
        assert_eq!(fmt(0.0001), "0.0001");
        assert_eq!(fmt(0.00001), "1.0000000000000001e-05");
        assert_eq!(fmt(1e-320), "9.9998886718268301e-321");
        assert_eq!(fmt(-2.5), "-2.5");
        assert_eq!(fmt(-0.0), "-0");
        assert_eq!(fmt(f64::NEG_INFINITY), "-inf");
        assert_eq!(fmt(1e16), "10000000000000000");
        assert_eq!(fmt(1e17), "1e+17");
        assert_eq!(fmt(100.0), "100");
    }

    #[test]
    fn string2ll_rules() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [&b""[..], b"01", b"+1", b"-0", b" 1", b"1 ", b"9223372036854775808", b"-", b"1a"] {
            assert_eq!(parse_i64(bad), None, "{:?}", bad);
        }
    }

    #[test]
    fn scores_as_redis() {
        assert_eq!(parse_score(b"1.5"), Some(1.5));
        assert_eq!(parse_score(b"inf"), Some(f64::INFINITY));
        assert_eq!(parse_score(b"-Infinity"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_score(b"0x10"), Some(16.0));
        assert_eq!(parse_score(b"0x1p3"), Some(8.0));
        assert_eq!(parse_score(b"1e-320"), Some(1e-320));
        for bad in [&b""[..], b" 1", b"1 ", b"nan", b"1e400", b"1e-400", b"abc", b"1e"] {
            assert_eq!(parse_score(bad), None, "{:?}", bad);
        }
        assert_eq!(parse_score_bound(b""), Some((0.0, false)));
        assert_eq!(parse_score_bound(b" 1"), Some((1.0, false)));
        assert_eq!(parse_score_bound(b"(1e400"), Some((f64::INFINITY, true)));
        assert_eq!(parse_score_bound(b"  "), None);
        assert_eq!(parse_score_bound(b"(nan"), None);
    }
}
