//! The compact encodings a payload may carry besides listpacks: the intset
//! (written and read: Redis 7.0 still writes it) and, read only, the
//! ziplist (`src/ziplist.c`: lists, hashes and sorted sets of Redis up to
//! 6.2, and the nodes of `RDB_TYPE_LIST_QUICKLIST`) and the zipmap
//! (`src/zipmap.c`: hashes of Redis up to 2.4).
//!
//! Each decoder validates as Redis's deep `*ValidateIntegrity` does, every
//! length checked against the bytes present before it is used.
//!
//! ```text
//! intset:  encoding:u32le (2, 4 or 8)  count:u32le  values, ascending, LE
//! ziplist: total-bytes:u32le tail-offset:u32le count:u16le entry... FF
//!          entry: prevlen (1 byte < 254, or FE u32le) encoding data
//! zipmap:  count:u8 (254: unknown), then per pair
//!          len field len free:u8 value <free bytes>, then FF
//!          len: 1 byte < 254, or FE u32le
//! ```

use super::listpack::Item;

/// Encodes members (each an `i64`, ascending, unique) as an intset of the
/// smallest encoding that holds them all (what Redis builds by `intsetAdd`
/// upgrades, for a set that never held a wider member).
pub fn intset_encode(values: &[i64]) -> Vec<u8> {
    let width: usize = if values.iter().all(|&v| i16::try_from(v).is_ok()) {
        2
    } else if values.iter().all(|&v| i32::try_from(v).is_ok()) {
        4
    } else {
        8
    };
    let mut out = Vec::with_capacity(8 + width * values.len());
    out.extend_from_slice(&(width as u32).to_le_bytes());
    out.extend_from_slice(&u32::try_from(values.len()).expect("an intset has fewer than 2^32 members").to_le_bytes());
    for &v in values {
        out.extend_from_slice(&v.to_le_bytes()[..width]);
    }
    out
}

/// Decodes an intset: its members, or `None` if it is not a valid,
/// non-empty, strictly ascending one.
pub fn intset_decode(b: &[u8]) -> Option<Vec<i64>> {
    let width = u32::from_le_bytes(b.get(0..4)?.try_into().ok()?) as usize;
    if !matches!(width, 2 | 4 | 8) {
        return None;
    }
    let count = u32::from_le_bytes(b.get(4..8)?.try_into().ok()?) as usize;
    if count == 0 || (b.len() - 8) / width != count || (b.len() - 8) % width != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(count);
    for chunk in b[8..].chunks_exact(width) {
        let mut v: u64 = 0;
        for (i, &x) in chunk.iter().enumerate() {
            v |= u64::from(x) << (8 * i);
        }
        let shift = 64 - 8 * width as u32;
        let v = ((v << shift) as i64) >> shift;
        if out.last().is_some_and(|&p| p >= v) {
            return None;
        }
        out.push(v);
    }
    Some(out)
}

/// Decodes and validates a ziplist: its elements in order.
pub fn ziplist_decode(zl: &[u8]) -> Option<Vec<Item<'_>>> {
    const HEADER: usize = 10;
    if zl.len() < HEADER + 1 {
        return None;
    }
    let total = u32::from_le_bytes(zl[0..4].try_into().ok()?) as usize;
    let tail = u32::from_le_bytes(zl[4..8].try_into().ok()?) as usize;
    let count = u16::from_le_bytes(zl[8..10].try_into().ok()?);
    if total != zl.len() || zl[zl.len() - 1] != 0xFF {
        return None;
    }
    let body = &zl[..zl.len() - 1];
    let mut items = Vec::new();
    let mut p = HEADER;
    let mut prev_len = 0usize;
    let mut last = HEADER;
    while p < body.len() {
        let start = p;
        let (prevlen, n) = if body[p] < 254 {
            (usize::from(body[p]), 1)
        } else if body[p] == 254 {
            (u32::from_le_bytes(body.get(p + 1..p + 5)?.try_into().ok()?) as usize, 5)
        } else {
            return None;
        };
        if prevlen != prev_len {
            return None;
        }
        p += n;
        let e = *body.get(p)?;
        let (item, len) = match e >> 6 {
            0 => {
                let l = usize::from(e & 0x3F);
                (Item::Str(body.get(p + 1..p + 1 + l)?), 1 + l)
            }
            1 => {
                let l = (usize::from(e & 0x3F) << 8) | usize::from(*body.get(p + 1)?);
                (Item::Str(body.get(p + 2..p + 2 + l)?), 2 + l)
            }
            2 => {
                let l = u32::from_be_bytes(body.get(p + 1..p + 5)?.try_into().ok()?) as usize;
                let end = p.checked_add(5)?.checked_add(l)?;
                (Item::Str(body.get(p + 5..end)?), 5 + l)
            }
            _ => {
                let int = |n: usize| -> Option<i64> {
                    let b = body.get(p + 1..p + 1 + n)?;
                    let mut v: u64 = 0;
                    for (i, &x) in b.iter().enumerate() {
                        v |= u64::from(x) << (8 * i);
                    }
                    let shift = 64 - 8 * n as u32;
                    Some(((v << shift) as i64) >> shift)
                };
                match e {
                    0xC0 => (Item::Int(int(2)?), 3),
                    0xD0 => (Item::Int(int(4)?), 5),
                    0xE0 => (Item::Int(int(8)?), 9),
                    0xF0 => (Item::Int(int(3)?), 4),
                    0xFE => (Item::Int(int(1)?), 2),
                    0xF1..=0xFD => (Item::Int(i64::from(e & 0x0F) - 1), 1),
                    _ => return None,
                }
            }
        };
        p += len;
        if p > body.len() {
            return None;
        }
        prev_len = p - start;
        last = start;
        items.push(item);
    }
    if tail != last {
        return None;
    }
    if count != u16::MAX && usize::from(count) != items.len() {
        return None;
    }
    Some(items)
}

/// Decodes and validates a zipmap: its field-value pairs in order.
pub fn zipmap_decode(zm: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    if zm.len() < 2 || zm[zm.len() - 1] != 0xFF {
        return None;
    }
    let body = &zm[..zm.len() - 1];
    let len_at = |p: usize| -> Option<(usize, usize)> {
        match *body.get(p)? {
            b @ 0..=253 => Some((usize::from(b), 1)),
            254 => Some((u32::from_le_bytes(body.get(p + 1..p + 5)?.try_into().ok()?) as usize, 5)),
            _ => None,
        }
    };
    let mut pairs = Vec::new();
    let mut p = 1usize;
    while p < body.len() {
        let (fl, n) = len_at(p)?;
        let f_start = p + n;
        let f_end = f_start.checked_add(fl)?;
        let field = body.get(f_start..f_end)?;
        let (vl, n) = len_at(f_end)?;
        let free = usize::from(*body.get(f_end + n)?);
        let v_start = f_end + n + 1;
        let v_end = v_start.checked_add(vl)?;
        let value = body.get(v_start..v_end)?;
        p = v_end.checked_add(free)?;
        if p > body.len() {
            return None;
        }
        pairs.push((field, value));
    }
    if pairs.is_empty() || (zm[0] != 254 && usize::from(zm[0]) != pairs.len()) {
        return None;
    }
    Some(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intset_round_trip_widths_and_damage() {
        for (values, width) in [(vec![-3i64, 1, 700], 2u8), (vec![1, 70000], 4), (vec![-(1i64 << 40), 5], 8)] {
            let b = intset_encode(&values);
            assert_eq!(b[0], width);
            assert_eq!(intset_decode(&b), Some(values.clone()));
            for cut in 0..b.len() {
                assert_eq!(intset_decode(&b[..cut]), None);
            }
        }
        assert_eq!(intset_decode(&intset_encode(&[])), None, "empty");
        let mut unordered = intset_encode(&[1, 2]);
        unordered[8] = 9;
        assert_eq!(intset_decode(&unordered), None);
    }

    /// A 6.2 ziplist: `RPUSH l a 1 bbb...(300) -5 100000` as redis-server 6.2
    /// builds it (entries: 6-bit string, immediate, 14-bit string with a
    /// 5-byte prevlen after it, int8... ).
    fn sample_ziplist() -> Vec<u8> {
        let mut entries: Vec<Vec<u8>> = Vec::new();
        let long = vec![b'b'; 300];
        let encodings: Vec<Vec<u8>> = vec![
            vec![0x01, b'a'],
            vec![0xF2],
            [&[0x41u8, 0x2C][..], &long].concat(),
            vec![0xFE, 0xFB],
            vec![0xF0, 0xA0, 0x86, 0x01],
        ];
        let mut prev = 0usize;
        for e in encodings {
            let mut entry = if prev < 254 { vec![prev as u8] } else { [&[0xFEu8][..], &(prev as u32).to_le_bytes()].concat() };
            entry.extend_from_slice(&e);
            prev = entry.len();
            entries.push(entry);
        }
        let tail = 10 + entries[..entries.len() - 1].iter().map(Vec::len).sum::<usize>();
        let body: Vec<u8> = entries.concat();
        let total = 10 + body.len() + 1;
        let mut zl = Vec::new();
        zl.extend_from_slice(&(total as u32).to_le_bytes());
        zl.extend_from_slice(&(tail as u32).to_le_bytes());
        zl.extend_from_slice(&5u16.to_le_bytes());
        zl.extend_from_slice(&body);
        zl.push(0xFF);
        zl
    }

    #[test]
    fn ziplist_reads_every_encoding_and_refuses_damage() {
        let zl = sample_ziplist();
        let items = ziplist_decode(&zl).expect("valid");
        let long = vec![b'b'; 300];
        assert_eq!(items, vec![Item::Str(b"a"), Item::Int(1), Item::Str(&long), Item::Int(-5), Item::Int(100000)]);
        for cut in 0..zl.len() {
            assert!(ziplist_decode(&zl[..cut]).is_none(), "cut at {cut}");
        }
        let mut bad_prev = zl.clone();
        bad_prev[10 + 3] = 9; // the second entry's prevlen
        assert!(ziplist_decode(&bad_prev).is_none());
        let mut bad_tail = zl.clone();
        bad_tail[4] ^= 1;
        assert!(ziplist_decode(&bad_tail).is_none());
    }

    #[test]
    fn zipmap_reads_pairs_and_refuses_damage() {
        // {"foo" => "bar", "hello" => "world"} with one free byte after "bar".
        let zm = b"\x02\x03foo\x03\x01barX\x05hello\x05\x00world\xff".to_vec();
        assert_eq!(zipmap_decode(&zm), Some(vec![(&b"foo"[..], &b"bar"[..]), (b"hello", b"world")]));
        for cut in 0..zm.len() {
            assert!(zipmap_decode(&zm[..cut]).is_none(), "cut at {cut}");
        }
        let mut bad_count = zm.clone();
        bad_count[0] = 3;
        assert!(zipmap_decode(&bad_count).is_none());
    }
}
