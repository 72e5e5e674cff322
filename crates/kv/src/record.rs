//! On-media encodings of the engine (docs/FORMAT.md, "Buffer pool and KV
//! engine"): WAL records and user-log entries as runs of 8 B extent words,
//! and B+tree values.
//!
//! Invariants: a header word's `buf_idx` is at or above
//! [`RESERVED_BUF_IDX`], every other word of a record names bytes inside
//! one pool buffer; a record is split across `append_group` calls only
//! inside a transaction (a [`TXN_WORDS`]-word header, then the count of
//! record words that follow it, over as many groups as they need); a SET
//! record with `key_words` = 2 names, after its key, the 8 B of its key's
//! expiry deadline (a `u64` LE, ms since the Unix epoch); a tree value is
//! `kind, form, flags, 5 zero bytes`, then (if `flags` bit 0) the deadline
//! as a `u64` LE, then extent words (direct) or one word naming an extent
//! list in a pool buffer (indirect) or one word naming an extent chain (chain); a chained SET
//! record names its value's extent chain, a chained TXN record the chain of its records
//! (`crate::chain`).

use pmwire_log::Extent;
use pmwire_pool::RESERVED_BUF_IDX;

/// Section tag of the KV WAL (an `ExtentLog`).
pub const TAG_WAL: u32 = 0x4b56_5741; // "AWVK"
/// Section tag of the user log (an `ExtentLog`).
pub const TAG_USER_LOG: u32 = 0x4b56_554c;
/// Section tag of the B+tree.
pub const TAG_TREE: u32 = 0x4b56_5452;

/// Record opcodes (bits 16–23 of a header word's `buf_idx`).
const OP_SET: u32 = 1;
const OP_DELETE: u32 = 2;
const OP_CLEAR: u32 = 3;
const OP_TXN: u32 = 4;
const OP_SET_CHAIN: u32 = 5;
const OP_TXN_CHAIN: u32 = 6;
const OP_USER: u32 = 0x10;

/// Words of a transaction header: the header word, then a word whose
/// `buf_idx` is the number of record words that follow.
pub const TXN_WORDS: usize = 2;
/// The most record words one transaction may hold (its count word's
/// `buf_idx` stays below [`RESERVED_BUF_IDX`]).
pub const MAX_TXN_WORDS: usize = RESERVED_BUF_IDX as usize - 1;

/// Value extents a record or tree value can carry.
pub const MAX_VALUE_EXTENTS: usize = 256;
/// Extents a tree value holds without an extent list.
pub const DIRECT_EXTENTS: usize = 31;
/// Extents of one user-log entry.
pub const MAX_ENTRY_EXTENTS: usize = 1023;
const FORM_DIRECT: u8 = 0;
const FORM_INDIRECT: u8 = 1;
const FORM_CHAIN: u8 = 2;
const VALUE_HEADER: usize = 8;
/// Tree value flag (byte 2): a deadline word follows the header.
const FLAG_DEADLINE: u8 = 1;
/// Bytes of a stored deadline (`u64` LE, ms since the Unix epoch).
pub const DEADLINE_BYTES: usize = 8;

/// Extents a tree value holds without an extent list, with or without a
/// deadline word (a tree value is at most 256 B).
pub fn direct_extents(has_deadline: bool) -> usize {
    DIRECT_EXTENTS - usize::from(has_deadline)
}

/// A mutating operation as the WAL records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WalOp {
    /// `key → (kind, deadline, value)`; `key` names the key's bytes in a pool buffer.
    Set {
        /// The key's bytes in the pool.
        key: Extent,
        /// The opaque type byte.
        kind: u8,
        /// The key's expiry deadline: 8 B in a pool buffer (`u64` LE, ms
        /// since the Unix epoch); `None`: the key does not expire.
        deadline: Option<Extent>,
        /// The value's bytes, in order.
        value: Vec<Extent>,
    },
    /// `key → (kind, deadline, value)` where the value's extents are an
    /// extent chain in the pool (`crate::chain`), named by its first chunk.
    SetChain {
        /// The key's bytes in the pool.
        key: Extent,
        /// The opaque type byte.
        kind: u8,
        /// As for [`WalOp::Set`].
        deadline: Option<Extent>,
        /// The chain's first chunk (offset 0 of its buffer, its used bytes).
        head: Extent,
    },
    /// Remove `key`.
    Delete {
        /// The key's bytes in the pool.
        key: Extent,
    },
    /// Remove every key.
    Clear,
}

impl WalOp {
    /// Words this record takes in the WAL.
    pub fn words(&self) -> usize {
        match self {
            WalOp::Set { value, deadline, .. } => 2 + usize::from(deadline.is_some()) + value.len(),
            WalOp::SetChain { deadline, .. } => 3 + usize::from(deadline.is_some()),
            WalOp::Delete { .. } => 2,
            WalOp::Clear => 1,
        }
    }

    /// Every extent naming pool bytes (each holds one buffer reference),
    /// but for a chain only its head: the chain's own chunks and extents
    /// are read from the pool (`crate::chain::read_chain`).
    pub fn extents(&self) -> impl Iterator<Item = Extent> + '_ {
        let (key, deadline, value) = match self {
            WalOp::Set { key, deadline, value, .. } => (Some(*key), *deadline, &value[..]),
            WalOp::SetChain { key, deadline, head, .. } => (Some(*key), *deadline, std::slice::from_ref(head)),
            WalOp::Delete { key } => (Some(*key), None, &[][..]),
            WalOp::Clear => (None, None, &[][..]),
        };
        key.into_iter().chain(deadline).chain(value.iter().copied())
    }

    /// Appends this record's words to `out`.
    pub fn encode(&self, out: &mut Vec<Extent>) {
        match self {
            WalOp::Set { key, kind, deadline, value } => encode_set(*key, *kind, *deadline, value, out),
            WalOp::SetChain { key, kind, deadline, head } => encode_set_chain(*key, *kind, *deadline, *head, out),
            WalOp::Delete { key } => encode_delete(*key, out),
            WalOp::Clear => encode_clear(out),
        }
    }
}

/// Appends a SET record's words (as [`WalOp::encode`]): with a deadline,
/// `key_words` is 2 and the deadline's extent follows the key's.
pub(crate) fn encode_set(key: Extent, kind: u8, deadline: Option<Extent>, value: &[Extent], out: &mut Vec<Extent>) {
    assert!(value.len() <= MAX_VALUE_EXTENTS, "{} value extents", value.len());
    if let Some(d) = deadline {
        assert_eq!(d.len as usize, DEADLINE_BYTES, "a deadline extent is 8 B");
    }
    let key_words = 1 + u32::from(deadline.is_some());
    out.push(header(OP_SET, kind, key_words, value.len() as u16));
    out.push(key);
    out.extend(deadline);
    out.extend_from_slice(value);
}

/// Appends a SET record whose value is an extent chain (as [`WalOp::encode`]):
/// header (count 1), key, deadline if any, then the chain's head.
pub(crate) fn encode_set_chain(key: Extent, kind: u8, deadline: Option<Extent>, head: Extent, out: &mut Vec<Extent>) {
    if let Some(d) = deadline {
        assert_eq!(d.len as usize, DEADLINE_BYTES, "a deadline extent is 8 B");
    }
    assert_eq!(head.offset, 0, "a chain's head is at the start of its buffer");
    let key_words = 1 + u32::from(deadline.is_some());
    out.push(header(OP_SET_CHAIN, kind, key_words, 1));
    out.push(key);
    out.extend(deadline);
    out.push(head);
}

/// Appends a DELETE record's words (as [`WalOp::encode`]).
pub(crate) fn encode_delete(key: Extent, out: &mut Vec<Extent>) {
    out.push(header(OP_DELETE, 0, 1, 0));
    out.push(key);
}

/// Appends a CLEAR record's word (as [`WalOp::encode`]).
pub(crate) fn encode_clear(out: &mut Vec<Extent>) {
    out.push(header(OP_CLEAR, 0, 0, 0));
}

/// Appends a transaction header for `words` record words (which the
/// caller appends next).
pub(crate) fn encode_txn(words: usize, out: &mut Vec<Extent>) {
    assert!(words <= MAX_TXN_WORDS, "transaction of {words} words");
    out.push(header(OP_TXN, 0, 0, 1));
    out.push(Extent { buf_idx: words as u32, offset: 0, len: 0 });
}

/// Appends a chained transaction: its header and the head of the extent
/// chain holding its record words (`crate::chain`).
pub(crate) fn encode_txn_chain(head: Extent, out: &mut Vec<Extent>) {
    assert_eq!(head.offset, 0, "a chain's head is at the start of its buffer");
    out.push(header(OP_TXN_CHAIN, 0, 0, 1));
    out.push(head);
}

fn header(op: u32, kind: u8, key_words: u32, count: u16) -> Extent {
    Extent { buf_idx: RESERVED_BUF_IDX | op << 16 | (kind as u32) << 8 | key_words, offset: 0, len: count }
}

/// Splits a header word into `(op, kind, key words, count)`.
fn parse_header(word: Extent) -> Option<(u32, u8, u32, usize)> {
    if word.buf_idx < RESERVED_BUF_IDX || word.offset != 0 {
        return None;
    }
    let bits = word.buf_idx - RESERVED_BUF_IDX;
    Some((bits >> 16, (bits >> 8) as u8, bits & 0xff, word.len as usize))
}

/// The WAL's retained words, decoded.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DecodedWal {
    /// Committed records with their first word's index, oldest first.
    pub records: Vec<(u64, WalOp)>,
    /// An uncommitted transaction at the end of the WAL (a crash came
    /// before its last group was durable): the index of its header word,
    /// and the complete records its durable groups hold (which recovery
    /// must not apply: all of the transaction or none of it).
    pub uncommitted: Option<(u64, Vec<(u64, WalOp)>)>,
}

/// Decodes the WAL's retained words into records (with their first index):
/// plain records, and transactions (a header counting the record words
/// after it). A transaction whose words run past the end of the WAL is
/// the uncommitted tail ([`DecodedWal::uncommitted`]).
pub fn decode_wal(words: &[(u64, Extent)]) -> Result<DecodedWal, String> {
    decode_wal_with(words, &mut |head| Err(format!("a chained transaction at {head:?} and no pool to read it from")))
}

/// [`decode_wal`], reading the record words of a chained transaction (a
/// header and its chain's head, in one group) with `expand`; its records
/// carry the header's index.
pub fn decode_wal_with(
    words: &[(u64, Extent)],
    expand: &mut dyn FnMut(Extent) -> Result<Vec<Extent>, String>,
) -> Result<DecodedWal, String> {
    let mut decoded = DecodedWal::default();
    let mut at = 0;
    while at < words.len() {
        let (index, word) = words[at];
        let bad = |why: &str| format!("WAL word {index}: {why}");
        match parse_header(word) {
            Some((OP_TXN_CHAIN, 0, 0, 1)) => {
                let head = words.get(at + 1).ok_or_else(|| bad("chained transaction cut short"))?.1;
                if head.buf_idx >= RESERVED_BUF_IDX || head.offset != 0 {
                    return Err(bad("not a chain's head"));
                }
                let body: Vec<(u64, Extent)> = expand(head)?.into_iter().map(|w| (index, w)).collect();
                decoded.records.extend(decode_records(&body, false)?);
                at += TXN_WORDS;
            }
            Some((OP_TXN, 0, 0, 1)) => {
                let count = words.get(at + 1).ok_or_else(|| bad("transaction header cut short"))?.1;
                if count.buf_idx >= RESERVED_BUF_IDX || count.offset != 0 || count.len != 0 {
                    return Err(bad("not a transaction's word count"));
                }
                let body = at + TXN_WORDS;
                let end = body + count.buf_idx as usize;
                if end > words.len() {
                    // Records cut short at the end are simply left out.
                    let partial = decode_records(&words[body..], true)?;
                    decoded.uncommitted = Some((index, partial));
                    return Ok(decoded);
                }
                decoded.records.extend(decode_records(&words[body..end], false)?);
                at = end;
            }
            _ => {
                let (record, len) = decode_record(&words[at..])?.ok_or_else(|| bad("record cut short"))?;
                decoded.records.push((index, record));
                at += len;
            }
        }
    }
    Ok(decoded)
}

/// Decodes plain records filling `words`; with `partial`, a record cut
/// short at the end is left out rather than refused.
fn decode_records(words: &[(u64, Extent)], partial: bool) -> Result<Vec<(u64, WalOp)>, String> {
    let mut records = Vec::new();
    let mut at = 0;
    while at < words.len() {
        match decode_record(&words[at..])? {
            Some((record, len)) => {
                records.push((words[at].0, record));
                at += len;
            }
            None if partial => break,
            None => return Err(format!("WAL word {}: record cut short inside a transaction", words[at].0)),
        }
    }
    Ok(records)
}

/// Decodes the plain record at the start of `words` and its length in
/// words; `None` if it is cut short.
fn decode_record(words: &[(u64, Extent)]) -> Result<Option<(WalOp, usize)>, String> {
    let (index, word) = words[0];
    let bad = |why: &str| format!("WAL word {index}: {why}");
    let (op, kind, key_words, count) = parse_header(word).ok_or_else(|| bad("not a record header"))?;
    let body = |n: usize| words.get(1..1 + n);
    let record = match (op, key_words) {
        (OP_SET, 1) if count <= MAX_VALUE_EXTENTS => match body(1 + count) {
            Some(body) => {
                WalOp::Set { key: body[0].1, kind, deadline: None, value: body[1..].iter().map(|w| w.1).collect() }
            }
            None => return Ok(None),
        },
        (OP_SET, 2) if count <= MAX_VALUE_EXTENTS => match body(2 + count) {
            Some(body) => {
                if body[1].1.len as usize != DEADLINE_BYTES {
                    return Err(bad("a deadline extent that is not 8 B"));
                }
                WalOp::Set {
                    key: body[0].1,
                    kind,
                    deadline: Some(body[1].1),
                    value: body[2..].iter().map(|w| w.1).collect(),
                }
            }
            None => return Ok(None),
        },
        (OP_SET_CHAIN, 1 | 2) if count == 1 => match body(key_words as usize + 1) {
            Some(body) => {
                let deadline = (key_words == 2).then_some(body[1].1);
                if deadline.is_some_and(|d| d.len as usize != DEADLINE_BYTES) {
                    return Err(bad("a deadline extent that is not 8 B"));
                }
                let head = body[key_words as usize].1;
                if head.offset != 0 {
                    return Err(bad("a chain head not at the start of its buffer"));
                }
                WalOp::SetChain { key: body[0].1, kind, deadline, head }
            }
            None => return Ok(None),
        },
        (OP_DELETE, 1) if count == 0 => match body(1) {
            Some(body) => WalOp::Delete { key: body[0].1 },
            None => return Ok(None),
        },
        (OP_CLEAR, 0) if count == 0 => WalOp::Clear,
        (OP_TXN | OP_TXN_CHAIN, _) => return Err(bad("a transaction inside a transaction")),
        _ => return Err(bad("unknown record")),
    };
    if record.extents().any(|e| e.buf_idx >= RESERVED_BUF_IDX) {
        return Err(bad("a header word inside a record"));
    }
    let len = record.words();
    Ok(Some((record, len)))
}

/// Appends a user-log entry's words (header, then the extents) to `out`.
pub fn encode_user_entry(extents: &[Extent], out: &mut Vec<Extent>) {
    assert!(extents.len() <= MAX_ENTRY_EXTENTS, "{} extents", extents.len());
    out.push(header(OP_USER, 0, 0, extents.len() as u16));
    out.extend_from_slice(extents);
}

/// Decodes the user log's retained words into `(lsn, extents)` entries;
/// an entry's LSN is the index of its header word.
pub fn decode_user_log(words: &[(u64, Extent)]) -> Result<Vec<(u64, Vec<Extent>)>, String> {
    let mut entries = Vec::new();
    let mut at = 0;
    while at < words.len() {
        let (lsn, word) = words[at];
        let bad = |why: &str| format!("user log word {lsn}: {why}");
        match parse_header(word) {
            Some((OP_USER, 0, 0, count)) => {
                let body = words.get(at + 1..at + 1 + count).ok_or_else(|| bad("entry cut short"))?;
                if body.iter().any(|w| w.1.buf_idx >= RESERVED_BUF_IDX) {
                    return Err(bad("a header word inside an entry"));
                }
                entries.push((lsn, body.iter().map(|w| w.1).collect()));
                at += 1 + count;
            }
            _ => return Err(bad("not an entry header")),
        }
    }
    Ok(entries)
}

/// A value as the tree stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeValue {
    /// Up to [`DIRECT_EXTENTS`] extents inline.
    Direct {
        /// The type byte.
        kind: u8,
        /// The expiry deadline (ms since the Unix epoch), if any.
        deadline: Option<u64>,
        /// The value's extents.
        extents: Vec<Extent>,
    },
    /// An extent naming a list of `list.len / 8` extent words in the pool.
    Indirect {
        /// The type byte.
        kind: u8,
        /// The expiry deadline (ms since the Unix epoch), if any.
        deadline: Option<u64>,
        /// Where the extent list is.
        list: Extent,
    },
    /// One word naming an extent chain's first chunk (`crate::chain`).
    Chain {
        /// The type byte.
        kind: u8,
        /// The expiry deadline (ms since the Unix epoch), if any.
        deadline: Option<u64>,
        /// The chain's first chunk.
        head: Extent,
    },
}

impl TreeValue {
    /// The bytes the tree holds.
    pub fn encode(&self) -> Vec<u8> {
        let (kind, form, deadline, words): (u8, u8, Option<u64>, Vec<Extent>) = match self {
            TreeValue::Direct { kind, deadline, extents } => {
                let max = direct_extents(deadline.is_some());
                assert!(extents.len() <= max, "{} direct extents", extents.len());
                (*kind, FORM_DIRECT, *deadline, extents.clone())
            }
            TreeValue::Indirect { kind, deadline, list } => (*kind, FORM_INDIRECT, *deadline, vec![*list]),
            TreeValue::Chain { kind, deadline, head } => (*kind, FORM_CHAIN, *deadline, vec![*head]),
        };
        let flags = if deadline.is_some() { FLAG_DEADLINE } else { 0 };
        let mut bytes = vec![kind, form, flags, 0, 0, 0, 0, 0];
        bytes.extend(deadline.map(u64::to_le_bytes).into_iter().flatten());
        bytes.extend(words.iter().flat_map(|e| e.pack().to_le_bytes()));
        assert!(bytes.len() <= VALUE_HEADER + DIRECT_EXTENTS * 8, "a tree value is at most 256 B");
        bytes
    }

    /// Decodes the bytes the tree holds.
    pub fn decode(bytes: &[u8]) -> Result<TreeValue, String> {
        if bytes.len() < VALUE_HEADER || !(bytes.len() - VALUE_HEADER).is_multiple_of(8) || bytes[3..8] != [0; 5] {
            return Err(format!("tree value of {} B", bytes.len()));
        }
        let (kind, form, flags) = (bytes[0], bytes[1], bytes[2]);
        let (deadline, words) = match flags {
            0 => (None, &bytes[VALUE_HEADER..]),
            FLAG_DEADLINE if bytes.len() >= VALUE_HEADER + DEADLINE_BYTES => {
                let (d, rest) = bytes[VALUE_HEADER..].split_at(DEADLINE_BYTES);
                (Some(u64::from_le_bytes(d.try_into().expect("8 B"))), rest)
            }
            _ => return Err(format!("tree value flags {flags:#x} in {} B", bytes.len())),
        };
        let words = extent_words(words);
        match (form, words.len()) {
            (FORM_DIRECT, n) if n <= direct_extents(deadline.is_some()) => {
                Ok(TreeValue::Direct { kind, deadline, extents: words })
            }
            (FORM_INDIRECT, 1) if words[0].len.is_multiple_of(8) => {
                Ok(TreeValue::Indirect { kind, deadline, list: words[0] })
            }
            (FORM_CHAIN, 1) if words[0].offset == 0 => Ok(TreeValue::Chain { kind, deadline, head: words[0] }),
            (form, n) => Err(format!("tree value form {form} with {n} words")),
        }
    }
}

/// Extent words, little-endian, back to back (an extent list's bytes).
pub fn extent_words(bytes: &[u8]) -> Vec<Extent> {
    bytes.chunks_exact(8).map(|w| Extent::unpack(u64::from_le_bytes(w.try_into().unwrap()))).collect()
}

/// The bytes of an extent list.
pub fn list_bytes(extents: &[Extent]) -> Vec<u8> {
    extents.iter().flat_map(|e| e.pack().to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(buf_idx: u32, offset: u16, len: u16) -> Extent {
        Extent { buf_idx, offset, len }
    }

    #[test]
    fn wal_records_round_trip() {
        let ops = vec![
            WalOp::Set { key: e(1, 0, 5), kind: 7, deadline: None, value: vec![e(2, 0, 2048), e(3, 8, 100)] },
            WalOp::Delete { key: e(1, 8, 3) },
            WalOp::Clear,
            WalOp::Set { key: e(4, 0, 0), kind: 0, deadline: None, value: vec![] },
            WalOp::Set { key: e(4, 8, 2), kind: 3, deadline: Some(e(4, 16, 8)), value: vec![e(5, 0, 9)] },
        ];
        let mut words = Vec::new();
        ops.iter().for_each(|op| op.encode(&mut words));
        assert_eq!(words.len(), ops.iter().map(WalOp::words).sum::<usize>());
        let indexed: Vec<(u64, Extent)> = words.iter().enumerate().map(|(i, &w)| (100 + i as u64, w)).collect();
        let decoded = decode_wal(&indexed).unwrap().records;
        assert_eq!(decoded.iter().map(|(_, op)| op.clone()).collect::<Vec<_>>(), ops);
        assert_eq!(decoded.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![100, 104, 106, 107, 109]);
        let mut bad_deadline = Vec::new();
        encode_set(e(1, 0, 1), 0, Some(e(2, 0, 8)), &[], &mut bad_deadline);
        bad_deadline[2].len = 7;
        let indexed_bad: Vec<(u64, Extent)> = bad_deadline.iter().enumerate().map(|(i, &w)| (i as u64, w)).collect();
        assert!(decode_wal(&indexed_bad).is_err(), "a deadline extent is 8 B");
        assert!(decode_wal(&indexed[1..]).is_err(), "a body word is not a header");
        assert!(decode_wal(&indexed[..3]).is_err(), "cut short");
    }

    #[test]
    fn chained_sets_round_trip() {
        let ops = vec![
            WalOp::SetChain { key: e(1, 0, 5), kind: 2, deadline: None, head: e(7, 0, 96) },
            WalOp::SetChain { key: e(1, 8, 5), kind: 0, deadline: Some(e(1, 16, 8)), head: e(9, 0, 2048) },
        ];
        let mut words = Vec::new();
        ops.iter().for_each(|op| op.encode(&mut words));
        assert_eq!(words.len(), 3 + 4);
        let indexed: Vec<(u64, Extent)> = words.iter().enumerate().map(|(i, &w)| (i as u64, w)).collect();
        let decoded: Vec<WalOp> = decode_wal(&indexed).unwrap().records.into_iter().map(|(_, op)| op).collect();
        assert_eq!(decoded, ops);
        let mut bad = words.clone();
        bad[2].offset = 8;
        let indexed_bad: Vec<(u64, Extent)> = bad.iter().enumerate().map(|(i, &w)| (i as u64, w)).collect();
        assert!(decode_wal(&indexed_bad).is_err(), "a chain head is at offset 0");
        assert!(decode_wal(&indexed[..2]).is_err(), "cut short");
        // A chained transaction: two words naming the chain of its records.
        let mut body = Vec::new();
        ops.iter().for_each(|op| op.encode(&mut body));
        let mut txn = Vec::new();
        WalOp::Clear.encode(&mut txn);
        encode_txn_chain(e(30, 0, 64), &mut txn);
        let indexed: Vec<(u64, Extent)> = txn.iter().enumerate().map(|(i, &w)| (i as u64 + 50, w)).collect();
        assert!(decode_wal(&indexed).is_err(), "a chained transaction needs its chain");
        let got = decode_wal_with(&indexed, &mut |head| {
            assert_eq!(head, e(30, 0, 64));
            Ok(body.clone())
        })
        .unwrap();
        assert_eq!(got.records, vec![(50, WalOp::Clear), (51, ops[0].clone()), (51, ops[1].clone())]);
        let short: Vec<(u64, Extent)> = indexed[..2].to_vec();
        assert!(decode_wal_with(&short, &mut |_| Ok(Vec::new())).is_err(), "cut short");
        let tree = TreeValue::Chain { kind: 3, deadline: Some(9), head: e(4, 0, 40) };
        assert_eq!(TreeValue::decode(&tree.encode()).unwrap(), tree);
    }

    #[test]
    fn transactions_decode_whole_or_as_the_uncommitted_tail() {
        let ops = vec![
            WalOp::Set { key: e(1, 0, 5), kind: 1, deadline: None, value: vec![e(2, 0, 9)] },
            WalOp::Delete { key: e(1, 8, 3) },
        ];
        let mut words = Vec::new();
        WalOp::Clear.encode(&mut words);
        let body: usize = ops.iter().map(WalOp::words).sum();
        encode_txn(body, &mut words);
        ops.iter().for_each(|op| op.encode(&mut words));
        WalOp::Clear.encode(&mut words);
        let indexed: Vec<(u64, Extent)> = words.iter().enumerate().map(|(i, &w)| (i as u64, w)).collect();
        let whole = decode_wal(&indexed).unwrap();
        assert_eq!(whole.uncommitted, None);
        let got: Vec<WalOp> = whole.records.into_iter().map(|(_, op)| op).collect();
        assert_eq!(got, vec![WalOp::Clear, ops[0].clone(), ops[1].clone(), WalOp::Clear]);
        // Cut after the first record of the transaction: the tail is
        // uncommitted, its complete record reported but not committed.
        let cut = decode_wal(&indexed[..1 + TXN_WORDS + 4]).unwrap();
        assert_eq!(cut.records, vec![(0, WalOp::Clear)]);
        assert_eq!(cut.uncommitted, Some((1, vec![(3, ops[0].clone())])));
        let cut = decode_wal(&indexed[..1 + TXN_WORDS]).unwrap();
        assert_eq!(cut.uncommitted, Some((1, vec![])));
        assert!(decode_wal(&indexed[..2]).is_err(), "a header without its count is corrupt (one group holds both)");
    }

    #[test]
    fn user_entries_and_tree_values_round_trip() {
        let mut words = Vec::new();
        encode_user_entry(&[e(1, 0, 10)], &mut words);
        encode_user_entry(&[], &mut words);
        let indexed: Vec<(u64, Extent)> = words.iter().enumerate().map(|(i, &w)| (i as u64, w)).collect();
        assert_eq!(decode_user_log(&indexed).unwrap(), vec![(0, vec![e(1, 0, 10)]), (2, vec![])]);
        let direct = TreeValue::Direct { kind: 3, deadline: None, extents: vec![e(9, 1, 2); DIRECT_EXTENTS] };
        assert_eq!(direct.encode().len(), 256);
        assert_eq!(TreeValue::decode(&direct.encode()).unwrap(), direct);
        let expiring =
            TreeValue::Direct { kind: 0, deadline: Some(0x0102_0304_0506_0708), extents: vec![e(9, 1, 2); 30] };
        let bytes = expiring.encode();
        assert_eq!(bytes.len(), 256);
        assert_eq!(&bytes[..16], &[0, 0, 1, 0, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(TreeValue::decode(&bytes).unwrap(), expiring);
        let mut bad_flags = bytes.clone();
        bad_flags[2] = 2;
        assert!(TreeValue::decode(&bad_flags).is_err());
        let mut over = bytes[..16].to_vec();
        over.extend(std::iter::repeat_n(0u8, 31 * 8));
        assert!(TreeValue::decode(&over).is_err(), "31 extents and a deadline exceed a tree value");
        let indirect = TreeValue::Indirect { kind: 4, deadline: None, list: e(5, 16, 8 * 40) };
        assert_eq!(TreeValue::decode(&indirect.encode()).unwrap(), indirect);
        let indirect = TreeValue::Indirect { kind: 4, deadline: Some(7), list: e(5, 16, 8 * 40) };
        assert_eq!(TreeValue::decode(&indirect.encode()).unwrap(), indirect);
        assert!(TreeValue::decode(b"short").is_err());
        assert_eq!(extent_words(&list_bytes(&[e(1, 2, 3), e(4, 5, 6)])), vec![e(1, 2, 3), e(4, 5, 6)]);
    }
}
