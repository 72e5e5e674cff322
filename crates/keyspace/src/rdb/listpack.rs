//! Redis 7.0's listpack (`src/listpack.c`): the bytes of a small hash,
//! sorted set, list node or stream node inside a DUMP payload.
//!
//! ```text
//! total-bytes:u32le  count:u16le (65535: unknown)  entry...  FF
//! entry: encoding+data, then backlen (the encoding+data length, 7 bits a
//!        byte, most significant first, every byte but the first with bit 7)
//! ```
//! Encodings: `0xxxxxxx` 7-bit unsigned; `10LLLLLL` string of up to 63
//! bytes; `110xxxxx x` 13-bit signed; `1110LLLL L` string of up to 4095;
//! `F0 len:u32le` longer string; `F1`..`F4` 16, 24, 32, 64-bit signed,
//! little-endian. A string that is a canonical integer (`lpStringToInt64`)
//! is always written as the smallest integer encoding, so the bytes are a
//! function of the elements alone: [`Builder`] writes exactly what Redis's
//! `lpAppend` does.
//!
//! [`decode`] validates as `lpValidateIntegrity(deep)` does: the header's
//! size is the input's, every entry lies inside it and its backlen matches,
//! the count matches unless unknown, the terminator ends it.

/// One element read back: listpacks keep integers apart from strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item<'a> {
    /// An integer encoding.
    Int(i64),
    /// A string encoding.
    Str(&'a [u8]),
}

impl Item<'_> {
    /// The element as Redis gives it back: an integer in decimal.
    pub fn to_bytes(self) -> Vec<u8> {
        match self {
            Item::Int(v) => v.to_string().into_bytes(),
            Item::Str(s) => s.to_vec(),
        }
    }

    /// The element as an integer (Redis's `lpGetIntegerIfValid`: an integer
    /// encoding, or a string `lpStringToInt64` reads).
    pub fn as_int(self) -> Option<i64> {
        match self {
            Item::Int(v) => Some(v),
            Item::Str(s) => string_to_i64(s),
        }
    }
}

/// Redis's `lpStringToInt64`: a canonical decimal `int64` (no sign but a
/// leading `-`, no leading zero, not `-0`), at most 20 bytes.
pub fn string_to_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() >= 21 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    if digits.is_empty() || !(b'1'..=b'9').contains(&digits[0]) || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if negative {
        if v > i64::MAX as u64 + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

/// Bytes of a listpack's header and terminator.
pub const EMPTY_BYTES: usize = 7;

/// A listpack under construction, elements appended at the end.
#[derive(Debug, Clone)]
pub struct Builder {
    bytes: Vec<u8>,
    count: usize,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

/// `lpEncodeBacklen`'s length for an entry of `l` bytes.
fn backlen_bytes(l: usize) -> usize {
    match l {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2097150 => 3,
        2097151..=268435454 => 4,
        _ => 5,
    }
}

/// The bytes one element takes (encoding, data and backlen), as
/// `lpEncodeGetType` and `lpEncodeBacklen` size it.
pub fn entry_bytes(s: &[u8]) -> usize {
    let l = match string_to_i64(s) {
        Some(v) => int_bytes(v),
        None if s.len() < 64 => 1 + s.len(),
        None if s.len() < 4096 => 2 + s.len(),
        None => 5 + s.len(),
    };
    l + backlen_bytes(l)
}

fn int_bytes(v: i64) -> usize {
    match v {
        0..=127 => 1,
        -4096..=4095 => 2,
        -32768..=32767 => 3,
        -8388608..=8388607 => 4,
        -2147483648..=2147483647 => 5,
        _ => 9,
    }
}

impl Builder {
    /// An empty listpack.
    pub fn new() -> Builder {
        Builder { bytes: vec![0; 6], count: 0 }
    }

    /// Elements so far.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether it has no element.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The bytes it would take finished (`lpBytes`).
    pub fn total_bytes(&self) -> usize {
        self.bytes.len() + 1
    }

    /// `lpAppend`: a string, written as an integer if it is one.
    pub fn push(&mut self, s: &[u8]) {
        if let Some(v) = string_to_i64(s) {
            return self.push_int(v);
        }
        let start = self.bytes.len();
        let len = s.len();
        if len < 64 {
            self.bytes.push(0x80 | len as u8);
        } else if len < 4096 {
            self.bytes.push(0xE0 | (len >> 8) as u8);
            self.bytes.push(len as u8);
        } else {
            let len32 = u32::try_from(len).expect("a listpack string is below 4 GiB");
            self.bytes.push(0xF0);
            self.bytes.extend_from_slice(&len32.to_le_bytes());
        }
        self.bytes.extend_from_slice(s);
        self.end_entry(start);
    }

    /// `lpAppendInteger`.
    pub fn push_int(&mut self, v: i64) {
        let start = self.bytes.len();
        match int_bytes(v) {
            1 => self.bytes.push(v as u8),
            2 => {
                let u = (v as u64) & 0x1FFF;
                self.bytes.push(0xC0 | (u >> 8) as u8);
                self.bytes.push(u as u8);
            }
            3 => {
                self.bytes.push(0xF1);
                self.bytes.extend_from_slice(&(v as i16).to_le_bytes());
            }
            4 => {
                self.bytes.push(0xF2);
                self.bytes.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
            }
            5 => {
                self.bytes.push(0xF3);
                self.bytes.extend_from_slice(&(v as i32).to_le_bytes());
            }
            _ => {
                self.bytes.push(0xF4);
                self.bytes.extend_from_slice(&v.to_le_bytes());
            }
        }
        self.end_entry(start);
    }

    fn end_entry(&mut self, start: usize) {
        let l = self.bytes.len() - start;
        let n = backlen_bytes(l);
        for i in (0..n).rev() {
            let mut b = ((l >> (7 * i)) & 127) as u8;
            if i != n - 1 {
                b |= 128;
            }
            self.bytes.push(b);
        }
        self.count += 1;
    }

    /// The finished bytes (`lpBytes` of them).
    pub fn finish(mut self) -> Vec<u8> {
        self.bytes.push(0xFF);
        let total = u32::try_from(self.bytes.len()).expect("a listpack is below 4 GiB");
        self.bytes[0..4].copy_from_slice(&total.to_le_bytes());
        let count = u16::try_from(self.count).unwrap_or(u16::MAX);
        self.bytes[4..6].copy_from_slice(&count.to_le_bytes());
        self.bytes
    }
}

/// Reads `n` little-endian bytes at `at` as a sign-extended integer.
fn signed_le(b: &[u8], n: usize) -> i64 {
    let mut v: u64 = 0;
    for (i, &x) in b[..n].iter().enumerate() {
        v |= u64::from(x) << (8 * i);
    }
    let shift = 64 - 8 * n as u32;
    ((v << shift) as i64) >> shift
}

/// One entry at `p` of `body` (the bytes before the terminator): its item
/// and the length of encoding+data; `None` if it does not fit.
fn entry_at(body: &[u8], p: usize) -> Option<(Item<'_>, usize)> {
    let b = *body.get(p)?;
    let rest = &body[p..];
    let (item, len) = if b & 0x80 == 0 {
        (Item::Int(i64::from(b)), 1)
    } else if b & 0xC0 == 0x80 {
        let n = usize::from(b & 0x3F);
        (Item::Str(rest.get(1..1 + n)?), 1 + n)
    } else if b & 0xE0 == 0xC0 {
        let u = (u64::from(b & 0x1F) << 8) | u64::from(*rest.get(1)?);
        (Item::Int(((u << 51) as i64) >> 51), 2)
    } else if b & 0xF0 == 0xE0 {
        let n = (usize::from(b & 0x0F) << 8) | usize::from(*rest.get(1)?);
        (Item::Str(rest.get(2..2 + n)?), 2 + n)
    } else {
        match b {
            0xF0 => {
                let n = u32::from_le_bytes(rest.get(1..5)?.try_into().ok()?) as usize;
                let end = 5usize.checked_add(n)?;
                (Item::Str(rest.get(5..end)?), end)
            }
            0xF1 => (Item::Int(signed_le(rest.get(1..3)?, 2)), 3),
            0xF2 => (Item::Int(signed_le(rest.get(1..4)?, 3)), 4),
            0xF3 => (Item::Int(signed_le(rest.get(1..5)?, 4)), 5),
            0xF4 => (Item::Int(signed_le(rest.get(1..9)?, 8)), 9),
            _ => return None,
        }
    };
    Some((item, len))
}

/// Decodes and validates a listpack: its elements in order, or `None` if
/// the bytes are not one whole, consistent listpack.
pub fn decode(lp: &[u8]) -> Option<Vec<Item<'_>>> {
    if lp.len() < EMPTY_BYTES {
        return None;
    }
    let total = u32::from_le_bytes(lp[0..4].try_into().ok()?) as usize;
    if total != lp.len() || lp[lp.len() - 1] != 0xFF {
        return None;
    }
    let count = u16::from_le_bytes(lp[4..6].try_into().ok()?);
    let body = &lp[..lp.len() - 1];
    let mut items = Vec::new();
    let mut p = 6usize;
    while p < body.len() {
        let (item, len) = entry_at(body, p)?;
        let n = backlen_bytes(len);
        let end = p.checked_add(len)?.checked_add(n)?;
        if end > body.len() {
            return None;
        }
        // The backlen, read backwards from its last byte as lpDecodeBacklen.
        let back = &body[p + len..end];
        let mut v: usize = 0;
        for (i, &x) in back.iter().enumerate() {
            let more = i != 0;
            if (x & 0x80 != 0) != more {
                return None;
            }
            v = (v << 7) | usize::from(x & 0x7F);
        }
        if v != len {
            return None;
        }
        items.push(item);
        p = end;
    }
    if count != u16::MAX && usize::from(count) != items.len() {
        return None;
    }
    Some(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_take_the_smallest_encoding_and_read_back() {
        let values: [&[u8]; 12] = [b"0", b"127", b"128", b"-1", b"-4096", b"4095", b"32767", b"-32769", b"8388608", b"-2147483648", b"9223372036854775807", b"-9223372036854775808"];
        let mut b = Builder::new();
        for v in values {
            b.push(v);
        }
        for s in [&b"-0"[..], b"01", b"+1", b"", b"9223372036854775808", b"a"] {
            b.push(s);
        }
        let lp = b.finish();
        let items = decode(&lp).expect("valid");
        let back: Vec<Vec<u8>> = items.iter().map(|i| i.to_bytes()).collect();
        assert_eq!(back.len(), 18);
        for (v, got) in values.iter().zip(&back) {
            assert_eq!(&got[..], *v);
            assert!(matches!(items[back.iter().position(|x| x == got).unwrap()], Item::Int(_)));
        }
        assert!(matches!(items[12], Item::Str(b"-0")));
    }

    #[test]
    fn long_strings_and_backlens() {
        for len in [63usize, 64, 4095, 4096, 16377, 16378, 70000] {
            let s = vec![b'x'; len];
            let mut b = Builder::new();
            b.push(&s);
            b.push(b"tail");
            let lp = b.finish();
            let items = decode(&lp).expect("valid");
            assert_eq!(items, vec![Item::Str(&s), Item::Str(b"tail")], "len {len}");
            assert_eq!(entry_bytes(&s) + entry_bytes(b"tail") + EMPTY_BYTES, lp.len());
        }
    }

    #[test]
    fn damage_is_refused() {
        let mut b = Builder::new();
        b.push(b"hello");
        b.push(b"12345");
        let lp = b.finish();
        for cut in 0..lp.len() {
            assert!(decode(&lp[..cut]).is_none(), "cut at {cut}");
        }
        for i in 0..lp.len() - 1 {
            for flip in [0x01u8, 0x80, 0xFF] {
                let mut bad = lp.clone();
                bad[i] ^= flip;
                if let Some(items) = decode(&bad) {
                    // A flip inside a string's bytes changes only the string.
                    assert_eq!(items.len(), 2, "flip {flip:#x} at {i}");
                }
            }
        }
    }
}
