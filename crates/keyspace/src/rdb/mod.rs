//! DUMP and RESTORE payloads: Redis 7.0.15's own format, one value in RDB
//! encoding (RDB version 10) framed as `cluster.c`'s `createDumpPayload`
//! frames it, so that a payload moves between redis-server and pmwire in
//! either direction. Pure codecs, no keyspace: the executor reads a value,
//! [`dump_string`] and its siblings make its payload; [`parse`] checks and
//! decodes a payload into a [`Value`] the executor stores.
//!
//! ```text
//! type:u8  object (RDB encoding, rdb.c rdbSaveObject)  version:u16le (10)
//! crc:u64le  (CRC-64/Jones as Redis's crc64(0, ...), of everything before it)
//! ```
//! Writing follows `rdbSaveObjectType`/`rdbSaveObject` for the encoding
//! Redis would hold the value in (the caller says which, from
//! `exec::encoding`): a string as an `RDB_ENC_INT*` integer when it is one
//! that fits 32 bits, LZF-compressed when longer than 20 bytes and LZF
//! saves at least 4, raw otherwise ([`lzf`]); a list as
//! `RDB_TYPE_LIST_QUICKLIST_2`, its nodes cut as `quicklistPushTail` cuts
//! them under `list-max-listpack-size`; a set `RDB_TYPE_SET_INTSET` or
//! `RDB_TYPE_SET`; a hash `RDB_TYPE_HASH_LISTPACK` or `RDB_TYPE_HASH`; a
//! sorted set `RDB_TYPE_ZSET_LISTPACK` or `RDB_TYPE_ZSET_2`; a stream
//! `RDB_TYPE_STREAM_LISTPACKS_2`, one listpack per node ([`listpack`]).
//!
//! Where the bytes cannot equal Redis's, because Redis's depend on the
//! value's history or on its process rather than on the content: a
//! hashtable set or hash (Redis writes its dict's order, which a random
//! seed decides), a list whose nodes Redis cut otherwise (built by head
//! pushes or inserts, or with `list-compress-depth` set), an intset that
//! was once wider, a stream whose node boundaries Redis's byte limit drew
//! (pmwire counts its own node bytes), and an LZF compression that reused
//! stale hash slots in Redis ([`lzf`]). Each payload still restores the
//! same content on either server.
//!
//! Reading accepts every object type Redis 7.0.15's `rdbLoadObject`
//! accepts but modules: the above and the older encodings a 6.2 or older
//! payload carries (`RDB_TYPE_LIST`, `RDB_TYPE_ZSET`, ziplists, zipmap,
//! `RDB_TYPE_LIST_QUICKLIST` of ziplists, `RDB_TYPE_STREAM_LISTPACKS`).
//! It validates as `sanitize-dump-payload yes` does, and more where
//! pmwire's invariants need it (a stream's length and IDs agree with its
//! entries, a pending entry has one owner): any inconsistency is
//! [`PayloadError::BadFormat`], every length checked before it is used and
//! nothing allocated beyond what the payload's bytes can fill.

pub mod legacy;
pub mod listpack;
pub mod lzf;
mod stream;

pub use stream::{ConsumerValue, GroupValue, PendingValue, StreamValue};

use listpack::{Builder, Item};

/// The RDB version DUMP writes and the newest RESTORE reads.
pub const RDB_VERSION: u16 = 10;

/// Object types (`rdb.h`).
pub mod types {
    #![allow(missing_docs)]
    pub const STRING: u8 = 0;
    pub const LIST: u8 = 1;
    pub const SET: u8 = 2;
    pub const ZSET: u8 = 3;
    pub const HASH: u8 = 4;
    pub const ZSET_2: u8 = 5;
    pub const MODULE: u8 = 6;
    pub const MODULE_2: u8 = 7;
    pub const HASH_ZIPMAP: u8 = 9;
    pub const LIST_ZIPLIST: u8 = 10;
    pub const SET_INTSET: u8 = 11;
    pub const ZSET_ZIPLIST: u8 = 12;
    pub const HASH_ZIPLIST: u8 = 13;
    pub const LIST_QUICKLIST: u8 = 14;
    pub const STREAM_LISTPACKS: u8 = 15;
    pub const HASH_LISTPACK: u8 = 16;
    pub const ZSET_LISTPACK: u8 = 17;
    pub const LIST_QUICKLIST_2: u8 = 18;
    pub const STREAM_LISTPACKS_2: u8 = 19;
}

/// The longest string a payload may expand to (an LZF string's stated
/// length is checked against it before anything is allocated): Redis's
/// `proto-max-bulk-len` default, the longest value pmwire stores.
pub const MAX_STRING_BYTES: u64 = 512 << 20;

/// Why a payload was refused; the Display text is RESTORE's error reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// Shorter than its footer, a version above [`RDB_VERSION`], or a CRC
    /// that does not match.
    #[error("ERR DUMP payload version or checksum are wrong")]
    VersionOrChecksum,
    /// The object does not decode, or decodes to something inconsistent
    /// or empty.
    #[error("ERR Bad data format")]
    BadFormat,
}

type Result<T> = std::result::Result<T, PayloadError>;
use PayloadError::BadFormat;

/// A decoded value, ready to store.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string.
    String(Vec<u8>),
    /// A list, head first (at least one element).
    List(Vec<Vec<u8>>),
    /// A set's members (unique, at least one), in payload order.
    Set(Vec<Vec<u8>>),
    /// A hash's pairs (fields unique, at least one), in payload order.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A sorted set's entries (members unique, no NaN, at least one), in
    /// payload order.
    ZSet(Vec<(f64, Vec<u8>)>),
    /// A stream.
    Stream(StreamValue),
}

/// Redis's `crc64(0, bytes)`: CRC-64/Jones, reflected, as catalogued
/// `CRC-64/REDIS`.
pub fn crc64(bytes: &[u8]) -> u64 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Redis, bytes)
}

// ---------------------------------------------------------------- writing

/// `rdbSaveLen`.
fn put_len(out: &mut Vec<u8>, len: u64) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.push(0x40 | (len >> 8) as u8);
        out.push(len as u8);
    } else if let Ok(l) = u32::try_from(len) {
        out.push(0x80);
        out.extend_from_slice(&l.to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// `rdbSaveRawString` with `rdbcompression yes`.
fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 11 {
        if let Some(v) = pmwire_resp::numbers::parse_i64(s) {
            if let Ok(v8) = i8::try_from(v) {
                out.extend_from_slice(&[0xC0, v8 as u8]);
                return;
            } else if let Ok(v16) = i16::try_from(v) {
                out.push(0xC1);
                out.extend_from_slice(&v16.to_le_bytes());
                return;
            } else if let Ok(v32) = i32::try_from(v) {
                out.push(0xC2);
                out.extend_from_slice(&v32.to_le_bytes());
                return;
            }
        }
    }
    if s.len() > 20 {
        if let Some(c) = lzf::compress(s, s.len() - 4) {
            out.push(0xC3);
            put_len(out, c.len() as u64);
            put_len(out, s.len() as u64);
            out.extend_from_slice(&c);
            return;
        }
    }
    put_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// Appends the footer: the RDB version and the CRC of everything before.
fn finish(mut out: Vec<u8>) -> Vec<u8> {
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The payload of a string.
pub fn dump_string(s: &[u8]) -> Vec<u8> {
    let mut out = vec![types::STRING];
    put_string(&mut out, s);
    finish(out)
}

/// The largest listpack a quicklist node may reach for a negative
/// `list-max-listpack-size` (`optimization_level`).
const OPTIMIZATION_LEVEL: [usize; 5] = [4096, 8192, 16384, 32768, 65536];

/// `_quicklistNodeAllowInsert`: whether an element of `sz` bytes joins a
/// node of `node_bytes` bytes and `count` elements under `fill`.
fn node_allows(node_bytes: usize, count: usize, fill: i64, sz: usize) -> bool {
    let new_sz = node_bytes + sz + 8;
    if fill < 0 {
        let offset = (-fill - 1) as usize;
        if offset < OPTIMIZATION_LEVEL.len() && new_sz <= OPTIMIZATION_LEVEL[offset] {
            return true;
        }
    }
    if new_sz > 8192 {
        return false;
    }
    (count as i64) < fill
}

/// The payload of a list, its nodes cut as tail pushes under
/// `list-max-listpack-size` = `fill` cut them.
pub fn dump_list(items: &[&[u8]], fill: i64) -> Vec<u8> {
    let fill = fill.clamp(-5, (1 << 15) - 1);
    let mut nodes: Vec<Builder> = Vec::new();
    for item in items {
        match nodes.last_mut() {
            Some(node) if node_allows(node.total_bytes(), node.len(), fill, item.len()) => node.push(item),
            _ => {
                let mut node = Builder::new();
                node.push(item);
                nodes.push(node);
            }
        }
    }
    let mut out = vec![types::LIST_QUICKLIST_2];
    put_len(&mut out, nodes.len() as u64);
    for node in nodes {
        put_len(&mut out, 2); // QUICKLIST_NODE_CONTAINER_PACKED
        put_string(&mut out, &node.finish());
    }
    finish(out)
}

/// The payload of a set: an intset (every member an integer, `intset`
/// true) or a plain set.
pub fn dump_set(members: &[&[u8]], intset: bool) -> Vec<u8> {
    if intset {
        let mut values: Vec<i64> =
            members.iter().map(|m| pmwire_resp::numbers::parse_i64(m).expect("an intset member is an integer")).collect();
        values.sort_unstable();
        let mut out = vec![types::SET_INTSET];
        put_string(&mut out, &legacy::intset_encode(&values));
        return finish(out);
    }
    let mut out = vec![types::SET];
    put_len(&mut out, members.len() as u64);
    for m in members {
        put_string(&mut out, m);
    }
    finish(out)
}

/// The payload of a hash, as a listpack or a plain hash.
pub fn dump_hash(pairs: &[(&[u8], &[u8])], listpack: bool) -> Vec<u8> {
    if listpack {
        let mut lp = Builder::new();
        for (f, v) in pairs {
            lp.push(f);
            lp.push(v);
        }
        let mut out = vec![types::HASH_LISTPACK];
        put_string(&mut out, &lp.finish());
        return finish(out);
    }
    let mut out = vec![types::HASH];
    put_len(&mut out, pairs.len() as u64);
    for (f, v) in pairs {
        put_string(&mut out, f);
        put_string(&mut out, v);
    }
    finish(out)
}

/// Redis 7.0's `d2string`: how a listpack keeps a score.
fn score_text(d: f64) -> Vec<u8> {
    const HALF: f64 = (i64::MAX / 2) as f64;
    if d.is_finite() && d != 0.0 && (-HALF..=HALF).contains(&d) && (d as i64) as f64 == d {
        return (d as i64).to_string().into_bytes();
    }
    let mut out = Vec::new();
    pmwire_resp::numbers::format_double(d, &mut out);
    out
}

/// The payload of a sorted set (`entries` in order), as a listpack or a
/// skiplist (written from the greatest entry down, as Redis does).
pub fn dump_zset(entries: &[(f64, &[u8])], listpack: bool) -> Vec<u8> {
    if listpack {
        let mut lp = Builder::new();
        for (score, m) in entries {
            lp.push(m);
            lp.push(&score_text(*score));
        }
        let mut out = vec![types::ZSET_LISTPACK];
        put_string(&mut out, &lp.finish());
        return finish(out);
    }
    let mut out = vec![types::ZSET_2];
    put_len(&mut out, entries.len() as u64);
    for (score, m) in entries.iter().rev() {
        put_string(&mut out, m);
        out.extend_from_slice(&score.to_le_bytes());
    }
    finish(out)
}

/// The payload of a stream.
pub fn dump_stream(s: &StreamValue) -> Vec<u8> {
    let mut out = vec![types::STREAM_LISTPACKS_2];
    stream::write(&mut out, s);
    finish(out)
}

// ---------------------------------------------------------------- reading

/// A cursor over a payload's bytes.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: u64) -> Result<&'a [u8]> {
        let n = usize::try_from(n).map_err(|_| BadFormat)?;
        let end = self.at.checked_add(n).ok_or(BadFormat)?;
        let s = self.b.get(self.at..end).ok_or(BadFormat)?;
        self.at = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn remaining(&self) -> usize {
        self.b.len() - self.at
    }

    /// `rdbLoadLenByRef`: a length, or (`true`) a special encoding's number.
    fn len_or_enc(&mut self) -> Result<(u64, bool)> {
        let b = self.byte()?;
        Ok(match b >> 6 {
            0 => (u64::from(b & 0x3F), false),
            1 => ((u64::from(b & 0x3F) << 8) | u64::from(self.byte()?), false),
            3 => (u64::from(b & 0x3F), true),
            _ if b == 0x80 => (u64::from(u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes"))), false),
            _ if b == 0x81 => (u64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")), false),
            _ => return Err(BadFormat),
        })
    }

    /// `rdbLoadLen`: a plain length.
    fn len(&mut self) -> Result<u64> {
        match self.len_or_enc()? {
            (n, false) => Ok(n),
            _ => Err(BadFormat),
        }
    }

    /// A count of things each taking at least one byte: never more than
    /// the bytes left, so nothing is allocated for what cannot follow.
    fn count(&mut self) -> Result<usize> {
        let n = self.len()?;
        usize::try_from(n).ok().filter(|&n| n <= self.remaining()).ok_or(BadFormat)
    }

    /// `rdbGenericLoadStringObject`: raw, integer-encoded or LZF.
    fn string(&mut self) -> Result<Vec<u8>> {
        let (n, encoded) = self.len_or_enc()?;
        if !encoded {
            return Ok(self.take(n)?.to_vec());
        }
        let int = |b: &[u8]| -> i64 {
            let mut v: u64 = 0;
            for (i, &x) in b.iter().enumerate() {
                v |= u64::from(x) << (8 * i);
            }
            let shift = 64 - 8 * b.len() as u32;
            ((v << shift) as i64) >> shift
        };
        match n {
            0 => Ok(int(self.take(1)?).to_string().into_bytes()),
            1 => Ok(int(self.take(2)?).to_string().into_bytes()),
            2 => Ok(int(self.take(4)?).to_string().into_bytes()),
            3 => {
                let clen = self.len()?;
                let len = self.len()?;
                if len > MAX_STRING_BYTES {
                    return Err(BadFormat);
                }
                let compressed = self.take(clen)?;
                lzf::decompress(compressed, len as usize).ok_or(BadFormat)
            }
            _ => Err(BadFormat),
        }
    }

    /// `rdbLoadMillisecondTime`: an `int64`, little-endian.
    fn ms_time(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    /// `rdbLoadBinaryDoubleValue`.
    fn binary_double(&mut self) -> Result<f64> {
        Ok(f64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    /// `rdbLoadDoubleValue` (`RDB_TYPE_ZSET`): a length byte and text, or
    /// 253 NaN, 254 +inf, 255 -inf.
    fn text_double(&mut self) -> Result<f64> {
        match self.byte()? {
            253 => Ok(f64::NAN),
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            n => score_of_text(self.take(u64::from(n))?),
        }
    }
}

/// A score kept as text (a listpack's, an old RDB's): what `strtod` reads
/// from the whole of it.
fn score_of_text(s: &[u8]) -> Result<f64> {
    let r = pmwire_resp::numbers::strtod(s);
    if s.is_empty() || r.end != s.len() || r.value.is_nan() {
        return Err(BadFormat);
    }
    Ok(r.value)
}

/// Checks `payload`'s footer as `verifyDumpPayload` does and decodes its
/// object as `rdbLoadObject` does, from the payload's start.
pub fn parse(payload: &[u8]) -> Result<Value> {
    if payload.len() < 10 {
        return Err(PayloadError::VersionOrChecksum);
    }
    let footer = payload.len() - 10;
    let version = u16::from_le_bytes([payload[footer], payload[footer + 1]]);
    if version > RDB_VERSION {
        return Err(PayloadError::VersionOrChecksum);
    }
    let crc = u64::from_le_bytes(payload[footer + 2..].try_into().expect("8 bytes"));
    if crc64(&payload[..footer + 2]) != crc {
        return Err(PayloadError::VersionOrChecksum);
    }
    // The object is read from the whole payload, as Redis's rio reads the
    // whole argument: a corrupt object may run into the footer's bytes,
    // and what follows the object is ignored.
    let mut r = Reader { b: payload, at: 0 };
    let t = r.byte()?;
    read_object(&mut r, t)
}

/// One object of type `t` from `r` (`rdbLoadObject`), leaving `r` after it.
fn read_object(r: &mut Reader<'_>, t: u8) -> Result<Value> {
    Ok(match t {
        types::STRING => Value::String(r.string()?),
        types::LIST | types::LIST_ZIPLIST | types::LIST_QUICKLIST | types::LIST_QUICKLIST_2 => Value::List(read_list(r, t)?),
        types::SET | types::SET_INTSET => Value::Set(read_set(r, t)?),
        types::HASH | types::HASH_ZIPMAP | types::HASH_ZIPLIST | types::HASH_LISTPACK => Value::Hash(read_hash(r, t)?),
        types::ZSET | types::ZSET_2 | types::ZSET_ZIPLIST | types::ZSET_LISTPACK => Value::ZSet(read_zset(r, t)?),
        types::STREAM_LISTPACKS | types::STREAM_LISTPACKS_2 => Value::Stream(stream::read(r, t == types::STREAM_LISTPACKS_2)?),
        _ => return Err(BadFormat),
    })
}

fn items_to_bytes(items: &[Item<'_>]) -> Vec<Vec<u8>> {
    items.iter().map(|i| i.to_bytes()).collect()
}

fn read_list(r: &mut Reader<'_>, t: u8) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    match t {
        types::LIST => {
            for _ in 0..r.count()? {
                out.push(r.string()?);
            }
        }
        types::LIST_ZIPLIST => {
            let zl = r.string()?;
            out = items_to_bytes(&legacy::ziplist_decode(&zl).ok_or(BadFormat)?);
        }
        _ => {
            for _ in 0..r.count()? {
                let container = if t == types::LIST_QUICKLIST_2 { r.len()? } else { 2 };
                let data = r.string()?;
                if data.is_empty() {
                    return Err(BadFormat);
                }
                match container {
                    1 => out.push(data),
                    2 if t == types::LIST_QUICKLIST_2 => out.extend(items_to_bytes(&listpack::decode(&data).ok_or(BadFormat)?)),
                    2 => out.extend(items_to_bytes(&legacy::ziplist_decode(&data).ok_or(BadFormat)?)),
                    _ => return Err(BadFormat),
                }
            }
        }
    }
    if out.is_empty() {
        return Err(BadFormat);
    }
    Ok(out)
}

/// Checks that no two of `keys` are equal.
fn unique<'a>(keys: impl Iterator<Item = &'a [u8]>) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for k in keys {
        if !seen.insert(k) {
            return Err(BadFormat);
        }
    }
    Ok(())
}

fn read_set(r: &mut Reader<'_>, t: u8) -> Result<Vec<Vec<u8>>> {
    let out: Vec<Vec<u8>> = if t == types::SET_INTSET {
        let b = r.string()?;
        legacy::intset_decode(&b).ok_or(BadFormat)?.iter().map(|v| v.to_string().into_bytes()).collect()
    } else {
        let n = r.count()?;
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(r.string()?);
        }
        out
    };
    if out.is_empty() {
        return Err(BadFormat);
    }
    unique(out.iter().map(Vec::as_slice))?;
    Ok(out)
}

/// Elements taken two by two.
fn pairs_of(items: Vec<Vec<u8>>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    if items.len() % 2 != 0 {
        return Err(BadFormat);
    }
    let mut it = items.into_iter();
    let mut out = Vec::new();
    while let (Some(a), Some(b)) = (it.next(), it.next()) {
        out.push((a, b));
    }
    Ok(out)
}

fn read_hash(r: &mut Reader<'_>, t: u8) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let out = match t {
        types::HASH => {
            let n = r.count()?;
            let mut out = Vec::new();
            for _ in 0..n {
                let f = r.string()?;
                let v = r.string()?;
                out.push((f, v));
            }
            out
        }
        types::HASH_ZIPMAP => {
            let b = r.string()?;
            legacy::zipmap_decode(&b).ok_or(BadFormat)?.into_iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect()
        }
        types::HASH_ZIPLIST => pairs_of(items_to_bytes(&legacy::ziplist_decode(&r.string()?).ok_or(BadFormat)?))?,
        _ => pairs_of(items_to_bytes(&listpack::decode(&r.string()?).ok_or(BadFormat)?))?,
    };
    if out.is_empty() {
        return Err(BadFormat);
    }
    unique(out.iter().map(|(f, _)| f.as_slice()))?;
    Ok(out)
}

fn read_zset(r: &mut Reader<'_>, t: u8) -> Result<Vec<(f64, Vec<u8>)>> {
    let mut out = Vec::new();
    match t {
        types::ZSET | types::ZSET_2 => {
            for _ in 0..r.count()? {
                let m = r.string()?;
                let score = if t == types::ZSET_2 { r.binary_double()? } else { r.text_double()? };
                if score.is_nan() {
                    return Err(BadFormat);
                }
                out.push((score, m));
            }
        }
        _ => {
            let b = r.string()?;
            let items =
                if t == types::ZSET_ZIPLIST { legacy::ziplist_decode(&b) } else { listpack::decode(&b) }.ok_or(BadFormat)?;
            if items.len() % 2 != 0 {
                return Err(BadFormat);
            }
            for pair in items.chunks_exact(2) {
                let score = match pair[1] {
                    Item::Int(v) => v as f64,
                    Item::Str(s) => score_of_text(s)?,
                };
                out.push((score, pair[0].to_bytes()));
            }
        }
    }
    if out.is_empty() {
        return Err(BadFormat);
    }
    unique(out.iter().map(|(_, m)| m.as_slice()))?;
    Ok(out)
}

#[cfg(test)]
mod tests;
