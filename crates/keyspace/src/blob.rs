//! The serialized forms of hashes, sorted sets, lists and sets: one blob per
//! key, stored by the engine as an opaque value of kind
//! [`crate::store::Kind::Hash`], [`crate::store::Kind::ZSet`],
//! [`crate::store::Kind::List`] or [`crate::store::Kind::Set`]. All
//! integers are fixed-width little-endian.
//!
//! Hash blob (fields in insertion order, as Redis's listpack keeps small
//! hashes, so HGETALL answers in the same order as Redis):
//! ```text
//! offset  size  field
//! 0       4     count: u32, number of field/value pairs
//! 4       ...   count entries:
//!                 4      field_len: u32
//!                 f      field bytes
//!                 4      value_len: u32
//!                 v      value bytes
//! ```
//! Sorted-set blob (entries ordered by score, then member bytes as `memcmp`;
//! no NaN score; `-0` is stored as `0`, as Redis's listpack does):
//! ```text
//! offset  size  field
//! 0       4     count: u32
//! 4       ...   count entries:
//!                 8      score: f64 (IEEE 754 bits, u64 little-endian)
//!                 4      member_len: u32
//!                 m      member bytes
//! ```
//! List blob (elements from head to tail) and set blob (members strictly
//! increasing as `memcmp`, so unique, and found by binary search): the same
//! layout, a sequence of byte strings.
//! ```text
//! offset  size  field
//! 0       4     count: u32
//! 4       ...   count entries:
//!                 4      len: u32
//!                 n      element bytes
//! ```
//! Invariants checked on decode: the blob is exactly as long as its entries;
//! sorted-set entries are strictly in order (so members are unique), and so
//! are set members; a list or set has at least one element. Hash fields are unique by construction (the executor
//! updates in place). The empty hash, sorted set, list or set is never
//! stored: the key is deleted instead, as in Redis.

use std::cmp::Ordering;

/// A blob that does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BlobError {
    /// Shorter than its header or entries say.
    #[error("blob truncated")]
    Truncated,
    /// Bytes left after the last entry.
    #[error("blob has trailing bytes")]
    Trailing,
    /// A sorted-set entry out of order, duplicated, or NaN.
    #[error("sorted set blob out of order")]
    Order,
    /// A set member out of order or duplicated.
    #[error("set blob out of order")]
    SetOrder,
    /// A list or set blob with no elements (an emptied collection deletes its key).
    #[error("empty collection stored")]
    Empty,
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], BlobError> {
    if b.len() < n {
        return Err(BlobError::Truncated);
    }
    let (head, rest) = b.split_at(n);
    *b = rest;
    Ok(head)
}

fn take_u32(b: &mut &[u8]) -> Result<usize, BlobError> {
    let h = take(b, 4)?;
    Ok(u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize)
}

/// Decodes a hash blob into `(field, value)` pairs in stored order.
pub fn decode_hash<'a>(mut blob: &'a [u8], out: &mut Vec<(&'a [u8], &'a [u8])>) -> Result<(), BlobError> {
    out.clear();
    let count = take_u32(&mut blob)?;
    for _ in 0..count {
        let flen = take_u32(&mut blob)?;
        let field = take(&mut blob, flen)?;
        let vlen = take_u32(&mut blob)?;
        let value = take(&mut blob, vlen)?;
        out.push((field, value));
    }
    if !blob.is_empty() {
        return Err(BlobError::Trailing);
    }
    Ok(())
}

/// Encodes `(field, value)` pairs (fields unique) as a hash blob.
pub fn encode_hash(entries: &[(&[u8], &[u8])], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&u32::try_from(entries.len()).expect("hash too large").to_le_bytes());
    for (f, v) in entries {
        out.extend_from_slice(&u32::try_from(f.len()).expect("field too large").to_le_bytes());
        out.extend_from_slice(f);
        out.extend_from_slice(&u32::try_from(v.len()).expect("value too large").to_le_bytes());
        out.extend_from_slice(v);
    }
}

/// The order of sorted-set entries: score, then member bytes.
pub fn zcmp(a: (f64, &[u8]), b: (f64, &[u8])) -> Ordering {
    a.0.partial_cmp(&b.0).unwrap_or(Ordering::Equal).then_with(|| a.1.cmp(b.1))
}

/// Decodes a sorted-set blob into `(score, member)` entries in order.
pub fn decode_zset<'a>(mut blob: &'a [u8], out: &mut Vec<(f64, &'a [u8])>) -> Result<(), BlobError> {
    out.clear();
    let count = take_u32(&mut blob)?;
    for _ in 0..count {
        let s = take(&mut blob, 8)?;
        let score = f64::from_bits(u64::from_le_bytes(s.try_into().map_err(|_| BlobError::Truncated)?));
        let mlen = take_u32(&mut blob)?;
        let member = take(&mut blob, mlen)?;
        if score.is_nan() {
            return Err(BlobError::Order);
        }
        if let Some(&last) = out.last() {
            if zcmp(last, (score, member)) != Ordering::Less {
                return Err(BlobError::Order);
            }
        }
        out.push((score, member));
    }
    if !blob.is_empty() {
        return Err(BlobError::Trailing);
    }
    Ok(())
}

/// Encodes ordered `(score, member)` entries as a sorted-set blob.
pub fn encode_zset(entries: &[(f64, &[u8])], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&u32::try_from(entries.len()).expect("zset too large").to_le_bytes());
    for (i, (score, m)) in entries.iter().enumerate() {
        assert!(!score.is_nan());
        if i > 0 {
            assert!(zcmp(entries[i - 1], (*score, m)) == Ordering::Less);
        }
        let score = if *score == 0.0 { 0.0f64 } else { *score };
        out.extend_from_slice(&score.to_bits().to_le_bytes());
        out.extend_from_slice(&u32::try_from(m.len()).expect("member too large").to_le_bytes());
        out.extend_from_slice(m);
    }
}

/// Decodes a list blob into its elements, head first (at least one).
pub fn decode_list<'a>(mut blob: &'a [u8], out: &mut Vec<&'a [u8]>) -> Result<(), BlobError> {
    out.clear();
    let count = take_u32(&mut blob)?;
    if count == 0 {
        return Err(BlobError::Empty);
    }
    for _ in 0..count {
        let len = take_u32(&mut blob)?;
        out.push(take(&mut blob, len)?);
    }
    if !blob.is_empty() {
        return Err(BlobError::Trailing);
    }
    Ok(())
}

/// The length of the list (or set) blob of `items`.
pub fn list_blob_len(items: &[&[u8]]) -> u64 {
    4 + items.iter().map(|i| 4 + i.len() as u64).sum::<u64>()
}

/// Encodes elements (head first, at least one) as a list blob.
pub fn encode_list(items: &[&[u8]], out: &mut Vec<u8>) {
    assert!(!items.is_empty(), "an empty list is deleted, not stored");
    out.clear();
    let bytes: usize = items.iter().map(|i| 4 + i.len()).sum();
    out.reserve(4 + bytes);
    out.extend_from_slice(&u32::try_from(items.len()).expect("list too large").to_le_bytes());
    for item in items {
        out.extend_from_slice(&u32::try_from(item.len()).expect("element too large").to_le_bytes());
        out.extend_from_slice(item);
    }
}

/// Decodes a set blob into its members, checking they strictly increase.
pub fn decode_set<'a>(blob: &'a [u8], out: &mut Vec<&'a [u8]>) -> Result<(), BlobError> {
    decode_list(blob, out)?;
    if out.windows(2).any(|w| w[0] >= w[1]) {
        return Err(BlobError::SetOrder);
    }
    Ok(())
}

/// Encodes members, strictly increasing as `memcmp`, as a set blob.
pub fn encode_set(members: &[&[u8]], out: &mut Vec<u8>) {
    for w in members.windows(2) {
        assert!(w[0] < w[1], "set members out of order");
    }
    encode_list(members, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_round_trip_and_layout() {
        let mut blob = Vec::new();
        encode_hash(&[(b"f", b"vv")], &mut blob);
        assert_eq!(blob, [1, 0, 0, 0, 1, 0, 0, 0, b'f', 2, 0, 0, 0, b'v', b'v']);
        let mut out = Vec::new();
        decode_hash(&blob, &mut out).unwrap();
        assert_eq!(out, vec![(&b"f"[..], &b"vv"[..])]);
        let mut out2 = Vec::new();
        assert_eq!(decode_hash(&blob[..blob.len() - 1], &mut out2), Err(BlobError::Truncated));
        let mut longer = blob.clone();
        longer.push(0);
        assert_eq!(decode_hash(&longer, &mut out2), Err(BlobError::Trailing));
    }

    #[test]
    fn zset_round_trip_and_order() {
        let mut blob = Vec::new();
        encode_zset(&[(-0.0, b"a"), (1.5, b"b")], &mut blob);
        assert_eq!(&blob[4..12], &0.0f64.to_bits().to_le_bytes());
        let mut out = Vec::new();
        decode_zset(&blob, &mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert!(out[0].0.is_sign_positive());
        let mut bad = Vec::new();
        bad.extend_from_slice(&2u32.to_le_bytes());
        for m in [b"b", b"a"] {
            bad.extend_from_slice(&1.0f64.to_bits().to_le_bytes());
            bad.extend_from_slice(&1u32.to_le_bytes());
            bad.extend_from_slice(m);
        }
        assert_eq!(decode_zset(&bad, &mut out), Err(BlobError::Order));
    }

    #[test]
    fn list_and_set_round_trip_layout_and_order() {
        let mut blob = Vec::new();
        encode_list(&[b"b", b"", b"b"], &mut blob);
        assert_eq!(blob, [3, 0, 0, 0, 1, 0, 0, 0, b'b', 0, 0, 0, 0, 1, 0, 0, 0, b'b']);
        assert_eq!(list_blob_len(&[b"b", b"", b"b"]), blob.len() as u64);
        let mut out = Vec::new();
        decode_list(&blob, &mut out).unwrap();
        assert_eq!(out, vec![&b"b"[..], b"", b"b"]);
        assert_eq!(decode_set(&blob, &mut out), Err(BlobError::SetOrder));
        assert_eq!(decode_list(&blob[..blob.len() - 1], &mut out), Err(BlobError::Truncated));
        let mut set = Vec::new();
        encode_set(&[b"", b"a", b"ab"], &mut set);
        let mut members = Vec::new();
        decode_set(&set, &mut members).unwrap();
        assert_eq!(members, vec![&b""[..], b"a", b"ab"]);
        let mut longer = set.clone();
        longer.push(7);
        assert_eq!(decode_set(&longer, &mut members), Err(BlobError::Trailing));
        assert_eq!(decode_list(&[0, 0, 0, 0], &mut members), Err(BlobError::Empty));
    }
}
