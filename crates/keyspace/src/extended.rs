//! Redis's `long double` arithmetic for INCRBYFLOAT, bit for bit as on
//! x86-64, where `long double` is the x87 80-bit extended format (a 64-bit
//! significand, exponents down to subnormals at 2^-16445): `strtold` as
//! Redis's `string2ld` calls it, one addition, and `%.17Lf` with Redis's
//! trailing zeros removed (`ld2string`, `LD_STR_HUMAN`).
//!
//! Every step is exact and then rounded once, to nearest with ties to
//! even, as the x87 unit and glibc do: values are held as `±m × 2^q`
//! (`m` a `u64`), and conversions go through a small unsigned big integer.
//!
//! Invariants: every function is pure and total (no panics on any input);
//! work is bounded by the input's length (Redis refuses a number of 5120
//! bytes or more) and by the format's exponent range.

use std::cmp::Ordering;

/// The smallest exponent `q` of `m × 2^q` (the subnormals' quantum).
const Q_MIN: i64 = -16445;
/// The largest position of a finite value's top bit (max ≈ 1.19e4932).
const TOP_MAX: i64 = 16383;
/// Redis's `MAX_LONG_DOUBLE_CHARS`: longer numbers are not floats.
pub const MAX_CHARS: usize = 5 * 1024;

/// An x87 extended value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ext {
    /// `(-1)^negative × m × 2^q` (`m` = 0 is a signed zero).
    Finite {
        /// The sign.
        negative: bool,
        /// The significand.
        m: u64,
        /// The exponent of its lowest bit.
        q: i64,
    },
    /// An infinity.
    Inf {
        /// The sign.
        negative: bool,
    },
}

/// An unsigned big integer: 32-bit limbs, least significant first, no
/// trailing zero limbs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn from_u64(v: u64) -> Big {
        Big::from_u128(u128::from(v))
    }

    fn from_u128(v: u128) -> Big {
        let mut b = Big((0..4).map(|i| (v >> (32 * i)) as u32).collect());
        b.trim();
        b
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn bits(&self) -> i64 {
        match self.0.last() {
            None => 0,
            Some(&top) => (self.0.len() as i64 - 1) * 32 + (32 - i64::from(top.leading_zeros())),
        }
    }

    fn bit(&self, i: i64) -> bool {
        i >= 0 && self.0.get((i / 32) as usize).is_some_and(|l| l >> (i % 32) & 1 == 1)
    }

    /// Whether any bit below `i` is set.
    fn any_below(&self, i: i64) -> bool {
        if i <= 0 {
            return false;
        }
        let (limbs, rest) = ((i / 32) as usize, i % 32);
        self.0.iter().take(limbs).any(|&l| l != 0)
            || (rest > 0 && self.0.get(limbs).is_some_and(|&l| l & ((1u32 << rest) - 1) != 0))
    }

    fn mul_add_small(&mut self, mul: u32, add: u32) {
        let mut carry = u64::from(add);
        for limb in &mut self.0 {
            let v = u64::from(*limb) * u64::from(mul) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
        self.trim();
    }

    fn mul_pow10(&mut self, mut n: u64) {
        while n > 0 {
            let step = n.min(9);
            self.mul_add_small(10u32.pow(step as u32), 0);
            n -= step;
        }
    }

    fn shl(&self, n: i64) -> Big {
        assert!(n >= 0);
        let (limbs, bits) = ((n / 32) as usize, (n % 32) as u32);
        let mut out = vec![0u32; limbs];
        let mut carry = 0u32;
        for &l in &self.0 {
            out.push(if bits == 0 { l } else { (l << bits) | carry });
            carry = if bits == 0 { 0 } else { l >> (32 - bits) };
        }
        out.push(carry);
        let mut b = Big(out);
        b.trim();
        b
    }

    /// Bits `[from, from + 64)` as a `u64` (`from` ≥ 0).
    fn bits_from(&self, from: i64) -> u64 {
        (0..64).filter(|&k| self.bit(from + k)).fold(0u64, |acc, k| acc | 1u64 << k)
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.0.len().cmp(&other.0.len()).then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    /// `self -= other` (`other` ≤ `self`).
    fn sub_assign(&mut self, other: &Big) {
        assert!(self.cmp(other) != Ordering::Less);
        let mut borrow = 0i64;
        for i in 0..self.0.len() {
            let v = i64::from(self.0[i]) - i64::from(other.0.get(i).copied().unwrap_or(0)) - borrow;
            borrow = i64::from(v < 0);
            self.0[i] = v.rem_euclid(1 << 32) as u32;
        }
        self.trim();
    }

    fn add(&self, other: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len().max(other.0.len()) + 1);
        let mut carry = 0u64;
        for i in 0..self.0.len().max(other.0.len()) {
            let v = u64::from(self.0.get(i).copied().unwrap_or(0))
                + u64::from(other.0.get(i).copied().unwrap_or(0))
                + carry;
            out.push(v as u32);
            carry = v >> 32;
        }
        out.push(carry as u32);
        let mut b = Big(out);
        b.trim();
        b
    }

    /// `self >> n`.
    fn shr(&self, n: i64) -> Big {
        assert!(n >= 0);
        let (limbs, bits) = ((n / 32) as usize, (n % 32) as u32);
        let src = self.0.get(limbs..).unwrap_or(&[]);
        let mut out: Vec<u32> = (0..src.len())
            .map(|i| {
                let hi = src.get(i + 1).copied().unwrap_or(0);
                if bits == 0 {
                    src[i]
                } else {
                    (src[i] >> bits) | (hi << (32 - bits))
                }
            })
            .collect();
        while out.last() == Some(&0) {
            out.pop();
        }
        Big(out)
    }

    /// `floor(self / d)` when the quotient is below 2^`qbits` (≤ 128), and
    /// whether the remainder is non-zero.
    fn div_small_quotient(&self, d: &Big, qbits: i64) -> (u128, bool) {
        assert!(!d.is_zero() && qbits <= 128);
        let mut rem = self.clone();
        let mut q = 0u128;
        for i in (0..qbits).rev() {
            let shifted = d.shl(i);
            if rem.cmp(&shifted) != Ordering::Less {
                rem.sub_assign(&shifted);
                q |= 1u128 << i;
            }
        }
        assert!(rem.cmp(d) == Ordering::Less, "the quotient fits {qbits} bits");
        (q, !rem.is_zero())
    }
}

/// Rounds `n × 2^b` (`sticky`: plus something below its lowest bit) to the
/// format, to nearest, ties to even; `None` on overflow.
fn round(negative: bool, n: &Big, b: i64, sticky: bool) -> Option<Ext> {
    if n.is_zero() {
        return Some(Ext::Finite { negative, m: 0, q: 0 });
    }
    let top = n.bits() - 1 + b;
    let q = (top - 63).max(Q_MIN);
    let shift = q - b; // bits of n below the result's lowest bit
    let (mut m, half, rest) = if shift <= 0 {
        assert!(n.bits() - shift <= 64, "a value this small fits the significand");
        (n.bits_from(0) << (-shift), false, sticky)
    } else {
        (n.bits_from(shift), n.bit(shift - 1), sticky || n.any_below(shift - 1))
    };
    let mut q = q;
    if half && (rest || m & 1 == 1) {
        m = match m.checked_add(1) {
            Some(m) => m,
            None => {
                q += 1;
                1 << 63
            }
        };
    }
    if m != 0 && q + 63 - i64::from(m.leading_zeros()) > TOP_MAX {
        return None;
    }
    Some(Ext::Finite { negative, m, q })
}

fn starts_with_nocase(s: &[u8], word: &[u8]) -> bool {
    s.len() >= word.len() && s[..word.len()].eq_ignore_ascii_case(word)
}

/// Redis's `string2ld`: the whole string is one `strtold` number (so a
/// NUL inside refuses it: `strtold` stops there, short of the length),
/// with no leading space, not NaN, and not out of range (overflow, or a
/// non-zero number rounding to zero); else `None`.
pub fn parse(s: &[u8]) -> Option<Ext> {
    if s.is_empty() || s.len() >= MAX_CHARS {
        return None;
    }
    if s.first().is_none_or(|&c| pmwire_resp::numbers::is_c_space(c)) {
        return None;
    }
    let (negative, body) = match s[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
        return Some(Ext::Inf { negative });
    }
    if starts_with_nocase(body, b"nan") {
        return None;
    }
    if body.len() > 2 && body[0] == b'0' && (body[1] | 0x20) == b'x' {
        return parse_hex(negative, &body[2..]);
    }
    parse_decimal(negative, body)
}

/// Digits (with at most one point) and the count after the point; `None`
/// if there is no digit or a stray character.
fn mantissa_digits(s: &[u8]) -> Option<(Vec<u8>, i64)> {
    let (mut digits, mut after, mut point) = (Vec::new(), 0i64, false);
    for &c in s {
        match c {
            b'.' if !point => point = true,
            b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                digits.push(c);
                after += i64::from(point);
            }
            _ => return None,
        }
    }
    (!digits.is_empty()).then_some((digits, after))
}

/// An exponent: optional sign, digits (saturated far beyond any range).
fn exponent(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = digits.iter().fold(0i64, |acc, &d| (acc * 10 + i64::from(d - b'0')).min(1 << 40));
    Some(if neg { -v } else { v })
}

fn parse_decimal(negative: bool, s: &[u8]) -> Option<Ext> {
    let (mant, exp) = match s.iter().position(|&c| c == b'e' || c == b'E') {
        Some(i) => (&s[..i], exponent(&s[i + 1..])?),
        None => (s, 0),
    };
    let (digits, after) = mantissa_digits(mant)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let digits: Vec<u8> = digits.iter().map(|d| d - b'0').skip_while(|&d| d == 0).collect();
    if digits.is_empty() {
        return Some(Ext::Finite { negative, m: 0, q: 0 });
    }
    let e = exp - after; // value = D × 10^e
    let magnitude = digits.len() as i64 + e; // 10^(magnitude-1) ≤ value < 10^magnitude
    if magnitude > 4934 {
        return None; // above the largest finite value: ERANGE
    }
    if magnitude < -4952 {
        return None; // below half the smallest subnormal: rounds to 0, ERANGE
    }
    let mut d = Big(Vec::new());
    for &digit in &digits {
        d.mul_add_small(10, u32::from(digit));
    }
    let ext = if e >= 0 {
        d.mul_pow10(e as u64);
        round(negative, &d, 0, false)?
    } else {
        // D / 10^-e = Q × 2^-s (+ a remainder), Q of 66 or 67 bits: the
        // significand, a rounding bit and more, the rest sticky.
        let mut p = Big::from_u64(1);
        p.mul_pow10((-e) as u64);
        let s = p.bits() - d.bits() + 66;
        let (num, den) = if s >= 0 { (d.shl(s), p) } else { (d, p.shl(-s)) };
        let (q, sticky) = num.div_small_quotient(&den, 68);
        round(negative, &Big::from_u128(q), -s, sticky)?
    };
    match ext {
        Ext::Finite { m: 0, .. } => None, // a non-zero number rounded to zero: ERANGE
        other => Some(other),
    }
}

fn parse_hex(negative: bool, s: &[u8]) -> Option<Ext> {
    let (mant, exp) = match s.iter().position(|&c| c == b'p' || c == b'P') {
        Some(i) => (&s[..i], exponent(&s[i + 1..])?),
        None => (s, 0),
    };
    let (digits, after) = mantissa_digits(mant)?;
    let digits: Vec<u32> =
        digits.iter().map(|&c| (c as char).to_digit(16).expect("hex digit")).skip_while(|&d| d == 0).collect();
    if digits.is_empty() {
        return Some(Ext::Finite { negative, m: 0, q: 0 });
    }
    let b = exp - 4 * after;
    let top = 4 * digits.len() as i64 + b;
    if !(Q_MIN - 2..=TOP_MAX + 2).contains(&top) {
        return None;
    }
    let mut n = Big(Vec::new());
    for d in digits {
        n.mul_add_small(16, d);
    }
    match round(negative, &n, b, false)? {
        Ext::Finite { m: 0, .. } => None,
        other => Some(other),
    }
}

/// `a + b` as the x87 unit adds (`None`: NaN, from infinities of both signs).
pub fn add(a: Ext, b: Ext) -> Option<Ext> {
    let (Ext::Finite { negative: na, m: ma, q: qa }, Ext::Finite { negative: nb, m: mb, q: qb }) = (a, b) else {
        return match (a, b) {
            (Ext::Inf { negative: x }, Ext::Inf { negative: y }) if x != y => None,
            (Ext::Inf { negative }, _) | (_, Ext::Inf { negative }) => Some(Ext::Inf { negative }),
            _ => unreachable!("both finite handled below"),
        };
    };
    let q = qa.min(qb);
    let (x, y) = (Big::from_u64(ma).shl(qa - q), Big::from_u64(mb).shl(qb - q));
    if na == nb {
        return Some(round(na, &x.add(&y), q, false).unwrap_or(Ext::Inf { negative: na }));
    }
    let (negative, mut big, small) = match x.cmp(&y) {
        Ordering::Less => (nb, y, x),
        Ordering::Greater => (na, x, y),
        // Exact cancellation: +0 when rounding to nearest.
        Ordering::Equal => return Some(Ext::Finite { negative: false, m: 0, q: 0 }),
    };
    big.sub_assign(&small);
    Some(round(negative, &big, q, false).unwrap_or(Ext::Inf { negative }))
}

/// Redis's `ld2string(..., LD_STR_HUMAN)` of a finite value: `%.17Lf`,
/// trailing zeros (and a bare point) removed, `-0` written `0`.
pub fn format_human(v: Ext) -> String {
    let Ext::Finite { negative, m, q } = v else {
        return if matches!(v, Ext::Inf { negative: true }) { "-inf".into() } else { "inf".into() };
    };
    // value × 10^17, rounded to an integer (ties to even).
    let mut n = Big::from_u64(m);
    n.mul_pow10(17);
    let scaled = if q >= 0 {
        n.shl(q)
    } else {
        let shift = -q;
        let mut r = n.shr(shift);
        let half = n.bit(shift - 1);
        let rest = n.any_below(shift - 1);
        if half && (rest || r.bit(0)) {
            r = r.add(&Big::from_u64(1));
        }
        r
    };
    let mut digits = to_decimal(&scaled);
    while digits.len() < 18 {
        digits.insert(0, b'0');
    }
    let (int, frac) = digits.split_at(digits.len() - 17);
    let mut out = String::with_capacity(digits.len() + 2);
    if negative {
        out.push('-');
    }
    out.push_str(std::str::from_utf8(int).expect("ascii"));
    let frac = std::str::from_utf8(frac).expect("ascii").trim_end_matches('0');
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    if out == "-0" {
        out = "0".into();
    }
    out
}

/// The decimal digits of `n` (`"0"` for zero).
fn to_decimal(n: &Big) -> Vec<u8> {
    let mut limbs = n.0.clone();
    let mut chunks = Vec::new();
    while !limbs.is_empty() {
        let mut rem = 0u64;
        for limb in limbs.iter_mut().rev() {
            let cur = (rem << 32) | u64::from(*limb);
            *limb = (cur / 1_000_000_000) as u32;
            rem = cur % 1_000_000_000;
        }
        while limbs.last() == Some(&0) {
            limbs.pop();
        }
        chunks.push(rem as u32);
    }
    let mut out = match chunks.pop() {
        None => return b"0".to_vec(),
        Some(top) => top.to_string().into_bytes(),
    };
    for chunk in chunks.iter().rev() {
        out.extend_from_slice(format!("{chunk:09}").as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incr(a: &str, b: &str) -> Option<String> {
        let sum = add(parse(a.as_bytes())?, parse(b.as_bytes())?)?;
        matches!(sum, Ext::Finite { .. }).then(|| format_human(sum))
    }

    /// Results of `INCRBYFLOAT` on redis-server 7.0.15 (x86-64).
    #[test]
    fn matches_redis_on_x86_64() {
        for (value, by, want) in [
            ("10.5", "0.1", "10.6"),
            ("0", "0.1", "0.1"),
            ("3.0e3", "200", "3200"),
            ("5.0e3", "2.0e2", "5200"),
            ("1", "-1", "0"),
            ("-0", "-0", "0"),
            ("0.1", "0.2", "0.3"),
            ("1e-20", "0", "0"),
            ("-1e-20", "0", "0"),
            ("9223372036854775807", "1", "9223372036854775808"),
            ("1.5", "0x1p1", "3.5"),
            ("10", "1.23456789012345678", "11.23456789012345678"),
            ("0", "0.000000000000000005", "0"),
            ("0", "0.000000000000000015", "0.00000000000000002"),
            ("0", "0.000000000000000025", "0.00000000000000002"),
            ("0", "1e-4940", "0"),
            ("0", "0x1p-16445", "0"),
            ("0", "-1.5e-7", "-0.00000015"),
            ("0", ".5", "0.5"),
            ("0", "5.", "5"),
            ("0", "+3", "3"),
            ("0", "0x1.8", "1.5"),
            ("0", "123456789012345678901234567890", "123456789012345678899921813504"),
            (
                "0",
                "1.7976931348623157e308",
                "179769313486231569995921046774104434048386446944329178485314420765176628523124396354701868608387085564428793419425520689308708363451136055357897278026477617073498977686288394835618163294045594434929537447290627480669417384648879122776218333598953852832103282504751611691208117720159985926376802466863339536384",
            ),
        ] {
            assert_eq!(incr(value, by).as_deref(), Some(want), "{value} + {by}");
        }
        assert_eq!(incr("inf", "1"), None);
        assert_eq!(parse(b"infinity"), Some(Ext::Inf { negative: false }));
        assert_eq!(parse(b"0x"), None);
        assert_eq!(parse(b"1e4933"), None);
        assert!(parse(b"1.18973149535723176502e+4932").is_some(), "the largest finite value");
        assert_eq!(parse(b"1.18973149535723176508e+4932"), None, "rounds to infinity");
        assert_eq!(incr("1e4932", "1e4932"), None, "overflow to infinity");
        assert_eq!(parse(b"nan"), None);
        assert_eq!(parse(b" 1"), None);
        assert_eq!(parse(b"1 "), None);
        assert_eq!(parse(b"1e5000"), None);
        assert_eq!(parse(b"1e-5000"), None);
        assert_eq!(parse(b""), None);
        assert_eq!(parse(b"abc"), None);
        assert_eq!(parse(b"1e"), None);
        assert_eq!(parse(b"1\0"), None, "strtold stops at the NUL, short of the length");
        assert!(parse(b"1e-4940").is_some(), "a subnormal is a value");
        assert_eq!(parse(b"0e99999999999999999999"), Some(Ext::Finite { negative: false, m: 0, q: 0 }));
    }

    /// Total on any input: random strings over the characters numbers are
    /// made of parse, add and format without a panic; what parses as a
    /// finite value and formats to a string short of 5120 bytes parses back.
    #[test]
    fn total_on_random_inputs() {
        use rand_xoshiro::rand_core::{RngCore, SeedableRng};
        let alphabet = b"0123456789.eE+-xXpP abcdefinINFAN\0";
        let mut rng = rand_xoshiro::SplitMix64::seed_from_u64(15);
        let mut previous = Ext::Finite { negative: false, m: 0, q: 0 };
        for _ in 0..20_000 {
            let len = (rng.next_u64() % 40) as usize;
            let s: Vec<u8> = (0..len).map(|_| alphabet[(rng.next_u64() % alphabet.len() as u64) as usize]).collect();
            let Some(v) = parse(&s) else { continue };
            if let Some(sum @ Ext::Finite { .. }) = add(previous, v) {
                let text = format_human(sum);
                if text.len() < MAX_CHARS {
                    assert!(parse(text.as_bytes()).is_some(), "{text}");
                }
                previous = sum;
            }
        }
    }

    #[test]
    fn exact_values_round_trip() {
        assert_eq!(parse(b"1"), Some(Ext::Finite { negative: false, m: 1 << 63, q: -63 }));
        assert_eq!(parse(b"0.5"), Some(Ext::Finite { negative: false, m: 1 << 63, q: -64 }));
        assert_eq!(format_human(parse(b"123.25").unwrap()), "123.25");
        assert_eq!(format_human(parse(b"-7").unwrap()), "-7");
        // 0.1 in 64 bits: 0xCCCCCCCCCCCCCCCD × 2^-67.
        assert_eq!(parse(b"0.1"), Some(Ext::Finite { negative: false, m: 0xCCCC_CCCC_CCCC_CCCD, q: -67 }));
    }
}
