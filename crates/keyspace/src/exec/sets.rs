//! Set commands: SADD SREM SMEMBERS SISMEMBER SMISMEMBER SCARD SPOP
//! SRANDMEMBER SMOVE SINTER SUNION SDIFF SINTERSTORE SUNIONSTORE SDIFFSTORE
//! SINTERCARD SSCAN, over the set blob of [`crate::blob`] (members in
//! `memcmp` order, found by binary search; a write rewrites the key's blob;
//! an emptied set deletes its key), following Redis 7.0's `t_set.c` for the
//! order of checks and the reply types (RESP3 sets for SMEMBERS, SINTER,
//! SUNION, SDIFF and SPOP with a count; arrays for SRANDMEMBER with a count).
//!
//! Members are answered in `memcmp` order where Redis answers in its hash
//! table's order (both unspecified); SPOP and SRANDMEMBER draw from
//! [`super::Server`]'s seeded generator.

use super::shared::{draws_sized, parse_cursor, scan_opts};
use super::notify::ev;
use super::{Ctx, Fail, Res};
use crate::blob::{decode_set, encode_set, list_blob_len};
use crate::glob::matches;
use crate::store::{Expiry, Keyspace, Kind};
use pmwire_resp::reply::ReplySink;

type C<'a, 'b, 'r, K, S> = &'a mut Ctx<'b, 'r, K, S>;

fn decode(blob: &[u8]) -> Result<Vec<&[u8]>, Fail> {
    let mut members = Vec::new();
    if !blob.is_empty() {
        decode_set(blob, &mut members)?;
    }
    Ok(members)
}

/// Writes `members` (in order) as the set at `key`, keeping its deadline;
/// deletes the key when empty.
fn store<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, key: &[u8], members: &[&[u8]]) -> Res {
    store_with(c, key, members, Expiry::Keep)
}

/// As [`store`], with the deadline `expiry` says.
fn store_with<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: C<'_, '_, '_, K, S>,
    key: &[u8],
    members: &[&[u8]],
    expiry: Expiry,
) -> Res {
    c.store_collection(key, Kind::Set, members, encode_set, expiry)
}

/// Adds `m` to the ordered `members`; true if it was new.
fn insert<'a>(members: &mut Vec<&'a [u8]>, m: &'a [u8]) -> bool {
    match members.binary_search(&m) {
        Ok(_) => false,
        Err(at) => {
            members.insert(at, m);
            true
        }
    }
}

/// Removes `m` from the ordered `members`; true if it was there.
fn remove(members: &mut Vec<&[u8]>, m: &[u8]) -> bool {
    match members.binary_search(&m) {
        Ok(at) => {
            members.remove(at);
            true
        }
        Err(_) => false,
    }
}

pub(super) fn sadd<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let key = c.arg(1);
    let blob = c.load(key, Kind::Set)?.unwrap_or_default();
    let mut members = decode(&blob)?;
    let mut added = 0;
    for i in 2..c.argc() {
        added += i64::from(insert(&mut members, c.arg(i)));
    }
    if added > 0 {
        store(c, key, &members)?;
    }
    c.out.integer(added);
    Ok(())
}

pub(super) fn srem<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let key = c.arg(1);
    let blob = c.load(key, Kind::Set)?.unwrap_or_default();
    let mut members = decode(&blob)?;
    let mut removed = 0;
    for i in 2..c.argc() {
        removed += i64::from(remove(&mut members, c.arg(i)));
    }
    if removed > 0 {
        store(c, key, &members)?;
    }
    c.out.integer(removed);
    Ok(())
}

/// Writes `members` as a set reply (RESP3 `~`, RESP2 an array).
fn reply_set<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, members: &[&[u8]]) {
    c.out.set(members.len());
    for m in members {
        c.out.bulk(m);
    }
}

pub(super) fn smembers<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let blob = c.load(c.arg(1), Kind::Set)?.unwrap_or_default();
    let members = decode(&blob)?;
    reply_set(c, &members);
    Ok(())
}

pub(super) fn sismember<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let blob = c.load(c.arg(1), Kind::Set)?.unwrap_or_default();
    let members = decode(&blob)?;
    c.out.integer(i64::from(members.binary_search(&c.arg(2)).is_ok()));
    Ok(())
}

pub(super) fn smismember<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let blob = c.load(c.arg(1), Kind::Set)?.unwrap_or_default();
    let members = decode(&blob)?;
    c.out.array(c.argc() - 2);
    for i in 2..c.argc() {
        c.out.integer(i64::from(members.binary_search(&c.arg(i)).is_ok()));
    }
    Ok(())
}

pub(super) fn scard<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let blob = c.load(c.arg(1), Kind::Set)?.unwrap_or_default();
    let n = decode(&blob)?.len();
    c.out.integer(n as i64);
    Ok(())
}

/// SPOP key [count].
pub(super) fn spop<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    if c.argc() > 3 {
        return Err(Fail::Syntax);
    }
    let count = if c.argc() == 3 { Some(c.positive_arg(2, "value is out of range, must be positive")?) } else { None };
    let key = c.arg(1);
    let Some(blob) = c.load(key, Kind::Set)? else {
        if count.is_some() {
            c.out.set(0)
        } else {
            c.out.null()
        }
        return Ok(());
    };
    let mut members = decode(&blob)?;
    let Some(count) = count else {
        let at = c.server.random_below(members.len() as u64) as usize;
        let popped = members.remove(at);
        store(c, key, &members)?;
        c.out.bulk(popped);
        return Ok(());
    };
    let n = usize::try_from(count).unwrap_or(usize::MAX).min(members.len());
    let picked = c.server.random_distinct(members.len(), n);
    let popped: Vec<&[u8]> = picked.iter().map(|&i| members[i]).collect();
    let mut gone = vec![false; members.len()];
    for &i in &picked {
        gone[i] = true;
    }
    let mut at = 0;
    members.retain(|_| {
        at += 1;
        !gone[at - 1]
    });
    assert_eq!(members.len() + popped.len(), gone.len());
    if n > 0 {
        store(c, key, &members)?;
    }
    reply_set(c, &popped);
    Ok(())
}

/// SRANDMEMBER key [count]: a positive count answers that many distinct
/// members (at most the set), a negative one that many draws with
/// repetition (at most [`super::MAX_RANDOM_REPLY`] members and
/// [`super::MAX_RANDOM_REPLY_BYTES`] bytes).
pub(super) fn srandmember<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    if c.argc() > 3 {
        return Err(Fail::Syntax);
    }
    let count = if c.argc() == 3 {
        let n = c.int_arg(2)?;
        if n == i64::MIN {
            return Err(Fail::err(
                "value is out of range, value must between -9223372036854775807 and 9223372036854775807",
            ));
        }
        Some(n)
    } else {
        None
    };
    let Some(blob) = c.load(c.arg(1), Kind::Set)? else {
        if count.is_some() {
            c.out.array(0)
        } else {
            c.out.null()
        }
        return Ok(());
    };
    let members = decode(&blob)?;
    let len = members.len();
    let picked = match count {
        None => vec![c.server.random_below(len as u64) as usize],
        Some(n) if n >= 0 => c.server.random_distinct(len, usize::try_from(n).unwrap_or(usize::MAX).min(len)),
        Some(n) => draws(c.server, &members, n.unsigned_abs())?,
    };
    if count.is_none() {
        c.out.bulk(members[picked[0]]);
        return Ok(());
    }
    c.out.array(picked.len());
    for i in picked {
        c.out.bulk(members[i]);
    }
    Ok(())
}

/// `n` draws with repetition from `members`, refused beyond
/// [`super::MAX_RANDOM_REPLY`] members or [`super::MAX_RANDOM_REPLY_BYTES`] bytes.
fn draws(server: &mut super::Server, members: &[&[u8]], n: u64) -> Result<Vec<usize>, Fail> {
    let sizes: Vec<u64> = members.iter().map(|m| m.len() as u64).collect();
    draws_sized(server, &sizes, n)
}

/// SMOVE source destination member.
pub(super) fn smove<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let (src, dst, member) = (c.arg(1), c.arg(2), c.arg(3));
    let src_found = c.ks.get(src);
    let dst_found = c.ks.get(dst);
    let Some(src_found) = src_found else {
        c.out.integer(0);
        return Ok(());
    };
    if src_found.kind != Kind::Set || dst_found.as_ref().is_some_and(|d| d.kind != Kind::Set) {
        return Err(Fail::WrongType);
    }
    let src_blob = c.load(src, Kind::Set)?.unwrap_or_default();
    let mut src_members = decode(&src_blob)?;
    if src == dst {
        c.out.integer(i64::from(src_members.binary_search(&member).is_ok()));
        return Ok(());
    }
    if !remove(&mut src_members, member) {
        c.out.integer(0);
        return Ok(());
    }
    let dst_blob = c.load(dst, Kind::Set)?.unwrap_or_default();
    let mut dst_members = decode(&dst_blob)?;
    let added = insert(&mut dst_members, member);
    c.check_fits(dst, list_blob_len(&dst_members))?;
    store(c, src, &src_members)?;
    c.notify(ev::SREM, src);
    if src_members.is_empty() {
        c.notify(ev::DEL, src);
    }
    if added {
        store(c, dst, &dst_members)?;
        c.notify(ev::SADD, dst);
    }
    c.out.integer(1);
    Ok(())
}

/// The sets at `keys`, in order; a missing key is `None`. Every key is
/// type-checked, as Redis does before it computes anything.
fn load_sets<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: C<'_, '_, '_, K, S>,
    keys: std::ops::Range<usize>,
) -> Result<Vec<Option<Vec<u8>>>, Fail> {
    keys.map(|i| c.load(c.arg(i), Kind::Set)).collect()
}

/// The intersection of ordered sets, stopping at `limit` members (0: none).
fn intersect<'a>(sets: &[Vec<&'a [u8]>], limit: usize) -> Vec<&'a [u8]> {
    let Some(smallest) = sets.iter().min_by_key(|s| s.len()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for m in smallest {
        if sets.iter().all(|s| s.binary_search(m).is_ok()) {
            out.push(*m);
            if out.len() == limit {
                break;
            }
        }
    }
    out
}

/// The union of ordered sets, ordered.
fn union<'a>(sets: &[Vec<&'a [u8]>]) -> Vec<&'a [u8]> {
    let mut out: Vec<&[u8]> = sets.iter().flatten().copied().collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The members of the first set in none of the others, ordered.
fn difference<'a>(sets: &[Vec<&'a [u8]>]) -> Vec<&'a [u8]> {
    let Some((first, rest)) = sets.split_first() else {
        return Vec::new();
    };
    first.iter().copied().filter(|m| !rest.iter().any(|s| s.binary_search(m).is_ok())).collect()
}

/// Which set operation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum SetOp {
    Inter,
    Union,
    Diff,
}

/// Decodes loaded sets; a missing one is empty.
fn decode_all(blobs: &[Option<Vec<u8>>]) -> Result<Vec<Vec<&[u8]>>, Fail> {
    blobs.iter().map(|b| decode(b.as_deref().unwrap_or_default())).collect()
}

fn compute<'a>(op: SetOp, sets: &[Vec<&'a [u8]>]) -> Vec<&'a [u8]> {
    match op {
        SetOp::Inter => intersect(sets, 0),
        SetOp::Union => union(sets),
        SetOp::Diff => difference(sets),
    }
}

/// SINTER / SUNION / SDIFF key [key ...].
pub(super) fn combine<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, op: SetOp) -> Res {
    let blobs = load_sets(c, 1..c.argc())?;
    let sets = decode_all(&blobs)?;
    let result = compute(op, &sets);
    reply_set(c, &result);
    Ok(())
}

/// SINTERSTORE / SUNIONSTORE / SDIFFSTORE destination key [key ...]: the
/// destination is replaced whatever it held, or deleted if the result is
/// empty.
pub(super) fn combine_store<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, op: SetOp) -> Res {
    let blobs = load_sets(c, 2..c.argc())?;
    let sets = decode_all(&blobs)?;
    let result = compute(op, &sets);
    // As Redis's setKey: the destination is replaced, its deadline dropped.
    store_with(c, c.arg(1), &result, Expiry::Clear)?;
    c.out.integer(result.len() as i64);
    Ok(())
}

/// SINTERCARD numkeys key [key ...] [LIMIT limit].
pub(super) fn sintercard<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let numkeys = pmwire_resp::numbers::parse_i64(c.arg(1)).filter(|&n| n >= 1);
    let numkeys = numkeys.ok_or_else(|| Fail::err("numkeys should be greater than 0"))?;
    let given = c.argc() - 2;
    if numkeys > given as i64 {
        return Err(Fail::err("Number of keys can't be greater than number of args"));
    }
    let numkeys = numkeys as usize;
    let mut limit = 0i64;
    let mut j = 2 + numkeys;
    while j < c.argc() {
        if c.arg(j).eq_ignore_ascii_case(b"limit") && j + 1 < c.argc() {
            limit = c.positive_arg(j + 1, "LIMIT can't be negative")?;
        } else {
            return Err(Fail::Syntax);
        }
        j += 2;
    }
    let blobs = load_sets(c, 2..2 + numkeys)?;
    let sets = decode_all(&blobs)?;
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    c.out.integer(intersect(&sets, limit).len() as i64);
    Ok(())
}

/// SSCAN key cursor [MATCH pattern] [COUNT count]. A cursor stands for the
/// last member answered (members are ordered), kept in the server's
/// bounded cursor table, so a member present for the whole iteration is
/// answered exactly once; cursor 0 starts and ends.
pub(super) fn sscan<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let cursor = parse_cursor(c.arg(2)).ok_or_else(|| Fail::err("invalid cursor"))?;
    let Some(blob) = c.load(c.arg(1), Kind::Set)? else {
        c.out.array(2);
        c.out.bulk(b"0");
        c.out.array(0);
        return Ok(());
    };
    let (count, pattern) = scan_opts(c)?;
    let after = match cursor {
        0 => None,
        n => Some(c.server.cursors.keys.get(&n).cloned().ok_or_else(|| Fail::err("invalid cursor"))?),
    };
    let members = decode(&blob)?;
    let start = after.map_or(0, |a| members.partition_point(|m| *m <= a.as_slice()));
    let end = start.saturating_add(count).min(members.len());
    let page = &members[start..end];
    let next = match page.last() {
        Some(last) if end < members.len() => c.server.remember_cursor(last.to_vec()),
        _ => 0,
    };
    c.out.array(2);
    c.out.bulk(next.to_string().as_bytes());
    let shown: Vec<&[u8]> = page.iter().copied().filter(|m| pattern.is_none_or(|p| matches(p, m))).collect();
    c.out.array(shown.len());
    for m in shown {
        c.out.bulk(m);
    }
    Ok(())
}
