//! Hash commands: HSET HMSET HSETNX HGET HMGET HGETALL HKEYS HVALS HSTRLEN
//! HDEL HEXISTS HLEN HINCRBY HINCRBYFLOAT HRANDFIELD HSCAN, over the hash
//! blob of [`crate::blob`] (fields in insertion order; a write rewrites the
//! key's blob; an emptied hash deletes its key), with Redis 7.0's order of
//! checks, errors and reply types (HRANDFIELD WITHVALUES: flat pairs in
//! RESP2, `[field, value]` arrays in RESP3).
//!
//! HRANDFIELD draws from [`super::Server`]'s seeded generator; HSCAN's
//! cursors are SSCAN's (the fields in byte order, a cursor standing for the
//! last field answered), where Redis answers a small hash whole.

use super::shared::{parse_cursor, random_count, random_picks, reply_pairs, scan_pairs};
use super::{Ctx, Fail, Res};
use crate::blob::{decode_hash, encode_hash};
use crate::store::{Expiry, Keyspace, Kind};
use pmwire_resp::reply::ReplySink;

fn store<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    key: &[u8],
    entries: &[(&[u8], &[u8])],
) -> Res {
    c.store_collection(key, Kind::Hash, entries, encode_hash, Expiry::Keep)
}

pub(super) fn hset<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, hmset: bool) -> Res {
    if c.argc() % 2 == 1 {
        let name = if hmset { "hmset" } else { "hset" };
        return Err(Fail::err(&format!("wrong number of arguments for '{name}' command")));
    }
    let key = c.arg(1);
    let old = c.load(key, Kind::Hash)?.unwrap_or_default();
    let mut entries = Vec::new();
    if !old.is_empty() {
        decode_hash(&old, &mut entries)?;
    }
    let mut created = 0;
    for i in (2..c.argc()).step_by(2) {
        let (f, v) = (c.arg(i), c.arg(i + 1));
        match entries.iter_mut().find(|e| e.0 == f) {
            Some(e) => e.1 = v,
            None => {
                entries.push((f, v));
                created += 1;
            }
        }
    }
    store(c, key, &entries)?;
    if hmset {
        c.out.ok();
    } else {
        c.out.integer(created);
    }
    Ok(())
}

pub(super) fn hget<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let blob = c.load(c.arg(1), Kind::Hash)?.unwrap_or_default();
    let mut entries = Vec::new();
    if !blob.is_empty() {
        decode_hash(&blob, &mut entries)?;
    }
    match entries.iter().find(|e| e.0 == c.arg(2)) {
        Some(e) => c.out.bulk(e.1),
        None => c.out.null(),
    }
    Ok(())
}

pub(super) fn hmget<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let blob = c.load(c.arg(1), Kind::Hash)?.unwrap_or_default();
    let mut entries = Vec::new();
    if !blob.is_empty() {
        decode_hash(&blob, &mut entries)?;
    }
    c.out.array(c.argc() - 2);
    for i in 2..c.argc() {
        match entries.iter().find(|e| e.0 == c.arg(i)) {
            Some(e) => c.out.bulk(e.1),
            None => c.out.null(),
        }
    }
    Ok(())
}

pub(super) fn hgetall<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let blob = c.load(c.arg(1), Kind::Hash)?.unwrap_or_default();
    let mut entries = Vec::new();
    if !blob.is_empty() {
        decode_hash(&blob, &mut entries)?;
    }
    c.out.map(entries.len());
    for (f, v) in entries {
        c.out.bulk(f);
        c.out.bulk(v);
    }
    Ok(())
}

pub(super) fn hdel<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let key = c.arg(1);
    let Some(blob) = c.load(key, Kind::Hash)? else {
        c.out.integer(0);
        return Ok(());
    };
    let mut entries = Vec::new();
    decode_hash(&blob, &mut entries)?;
    let before = entries.len();
    for i in 2..c.argc() {
        let f = c.arg(i);
        entries.retain(|e| e.0 != f);
    }
    let deleted = before - entries.len();
    if deleted > 0 {
        store(c, key, &entries)?;
    }
    c.out.integer(deleted as i64);
    Ok(())
}

pub(super) fn hexists<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let blob = c.load(c.arg(1), Kind::Hash)?.unwrap_or_default();
    let mut entries = Vec::new();
    if !blob.is_empty() {
        decode_hash(&blob, &mut entries)?;
    }
    c.out.integer(i64::from(entries.iter().any(|e| e.0 == c.arg(2))));
    Ok(())
}

pub(super) fn hlen<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let blob = c.load(c.arg(1), Kind::Hash)?.unwrap_or_default();
    let mut entries = Vec::new();
    if !blob.is_empty() {
        decode_hash(&blob, &mut entries)?;
    }
    c.out.integer(entries.len() as i64);
    Ok(())
}

/// The decoded fields of the hash at `key` (empty if there is none).
fn fields<'b>(blob: &'b [u8]) -> Result<Vec<(&'b [u8], &'b [u8])>, Fail> {
    let mut entries = Vec::new();
    if !blob.is_empty() {
        decode_hash(blob, &mut entries)?;
    }
    Ok(entries)
}

/// HSETNX key field value: 1 if the field was set, 0 if it existed.
pub(super) fn hsetnx<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let key = c.arg(1);
    let blob = c.load(key, Kind::Hash)?.unwrap_or_default();
    let mut entries = fields(&blob)?;
    if entries.iter().any(|e| e.0 == c.arg(2)) {
        c.out.integer(0);
        return Ok(());
    }
    entries.push((c.arg(2), c.arg(3)));
    store(c, key, &entries)?;
    c.out.integer(1);
    Ok(())
}

/// HKEYS key / HVALS key: arrays in insertion order.
pub(super) fn hkeys_or_vals<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    keys: bool,
) -> Res {
    let blob = c.load(c.arg(1), Kind::Hash)?.unwrap_or_default();
    let entries = fields(&blob)?;
    c.out.array(entries.len());
    for (f, v) in entries {
        c.out.bulk(if keys { f } else { v });
    }
    Ok(())
}

/// HSTRLEN key field: the value's length, 0 if there is none.
pub(super) fn hstrlen<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let blob = c.load(c.arg(1), Kind::Hash)?.unwrap_or_default();
    let entries = fields(&blob)?;
    let len = entries.iter().find(|e| e.0 == c.arg(2)).map_or(0, |e| e.1.len());
    c.out.integer(len as i64);
    Ok(())
}

/// Writes `value` at `field` of `entries` (in place, or appended).
fn put_field<'a>(entries: &mut Vec<(&'a [u8], &'a [u8])>, field: &'a [u8], value: &'a [u8]) {
    match entries.iter_mut().find(|e| e.0 == field) {
        Some(e) => e.1 = value,
        None => entries.push((field, value)),
    }
}

/// HINCRBY key field increment, as Redis 7.0's `hincrbyCommand`: the
/// increment is checked first, then the key, then the stored value.
pub(super) fn hincrby<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let by = c.int_arg(3)?;
    let key = c.arg(1);
    let blob = c.load(key, Kind::Hash)?.unwrap_or_default();
    let mut entries = fields(&blob)?;
    let old = match entries.iter().find(|e| e.0 == c.arg(2)) {
        Some(e) => pmwire_resp::numbers::parse_i64(e.1).ok_or_else(|| Fail::err("hash value is not an integer"))?,
        None => 0,
    };
    let new = old.checked_add(by).ok_or_else(|| Fail::err("increment or decrement would overflow"))?;
    let text = new.to_string().into_bytes();
    put_field(&mut entries, c.arg(2), &text);
    store(c, key, &entries)?;
    c.out.integer(new);
    Ok(())
}

/// HINCRBYFLOAT key field increment: Redis's `long double` sum, formatted
/// as INCRBYFLOAT formats it ([`crate::extended`]).
pub(super) fn hincrbyfloat<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    use crate::extended::{add, format_human, parse, Ext};
    let by = parse(c.arg(3)).ok_or(Fail::NotFloat)?;
    if !matches!(by, Ext::Finite { .. }) {
        return Err(Fail::err("value is NaN or Infinity"));
    }
    let key = c.arg(1);
    let blob = c.load(key, Kind::Hash)?.unwrap_or_default();
    let mut entries = fields(&blob)?;
    let old = match entries.iter().find(|e| e.0 == c.arg(2)) {
        Some(e) => parse(e.1).ok_or_else(|| Fail::err("hash value is not a float"))?,
        None => Ext::Finite { negative: false, m: 0, q: 0 },
    };
    let sum = match add(old, by) {
        Some(sum @ Ext::Finite { .. }) => sum,
        _ => return Err(Fail::err("increment would produce NaN or Infinity")),
    };
    let text = format_human(sum).into_bytes();
    put_field(&mut entries, c.arg(2), &text);
    store(c, key, &entries)?;
    c.out.bulk(&text);
    Ok(())
}

/// HRANDFIELD key [count [WITHVALUES]].
pub(super) fn hrandfield<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let count = random_count(c, b"withvalues")?;
    let Some(blob) = c.load(c.arg(1), Kind::Hash)? else {
        if count.is_some() {
            c.out.array(0)
        } else {
            c.out.null()
        }
        return Ok(());
    };
    let entries = fields(&blob)?;
    let Some((n, withvalues)) = count else {
        let at = c.server.random_below(entries.len() as u64) as usize;
        c.out.bulk(entries[at].0);
        return Ok(());
    };
    let sizes: Vec<u64> = entries.iter().map(|e| (e.0.len() + if withvalues { e.1.len() } else { 0 }) as u64).collect();
    let picked = random_picks(c.server, &sizes, n)?;
    let picked: Vec<(&[u8], &[u8])> = picked.iter().map(|&i| entries[i]).collect();
    if withvalues {
        reply_pairs(c, &picked, |e| e.0, |out, e| out.bulk(e.1));
    } else {
        c.out.array(picked.len());
        for e in picked {
            c.out.bulk(e.0);
        }
    }
    Ok(())
}

/// HSCAN key cursor [MATCH pattern] [COUNT count], over the fields in
/// byte order (see [`scan_pairs`]).
pub(super) fn hscan<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let cursor = parse_cursor(c.arg(2)).ok_or_else(|| Fail::err("invalid cursor"))?;
    let Some(blob) = c.load(c.arg(1), Kind::Hash)? else {
        c.out.array(2);
        c.out.bulk(b"0");
        c.out.array(0);
        return Ok(());
    };
    let mut items: Vec<(&[u8], Vec<u8>)> = fields(&blob)?.into_iter().map(|(f, v)| (f, v.to_vec())).collect();
    items.sort_unstable_by(|a, b| a.0.cmp(b.0));
    scan_pairs(c, cursor, &items)
}
