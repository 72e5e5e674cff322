//! List commands: LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP (with count) LRANGE
//! LLEN LINDEX LSET LREM LTRIM LINSERT LPOS LMOVE RPOPLPUSH, over the list
//! blob of [`crate::blob`] (head first; a write rewrites the key's blob; an
//! emptied list deletes its key), following Redis 7.0's `t_list.c`: the
//! same order of argument checks, key lookup and type check, so the same
//! error wins. Indexes from the wire are `i64` and only ever compared with or
//! added to a list length (at most `u32::MAX`), so no arithmetic on them
//! overflows.

use super::list_ops::{decode, end_arg, move_one, store, take_from, End};
use super::{Ctx, Fail, Res};
use crate::store::{Keyspace, Kind};
use pmwire_resp::reply::ReplySink;

type C<'a, 'b, 'r, K, S> = &'a mut Ctx<'b, 'r, K, S>;

/// LPUSH / RPUSH (`existing_only`: LPUSHX / RPUSHX).
pub(super) fn push<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: C<'_, '_, '_, K, S>,
    end: End,
    existing_only: bool,
) -> Res {
    let key = c.arg(1);
    let old = c.load(key, Kind::List)?;
    if existing_only && old.is_none() {
        c.out.integer(0);
        return Ok(());
    }
    let old = old.unwrap_or_default();
    let mut items = decode(&old)?;
    let new = (2..c.argc()).map(|i| c.arg(i));
    items = match end {
        End::Head => new.rev().chain(items).collect(),
        End::Tail => items.into_iter().chain(new).collect(),
    };
    store(c, key, &items)?;
    c.out.integer(items.len() as i64);
    Ok(())
}

/// LPOP / RPOP key [count].
pub(super) fn pop<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, end: End) -> Res {
    if c.argc() > 3 {
        let name = if end == End::Head { "lpop" } else { "rpop" };
        return Err(Fail::err(&format!("wrong number of arguments for '{name}' command")));
    }
    let count = if c.argc() == 3 { Some(c.positive_arg(2, "value is out of range, must be positive")?) } else { None };
    let key = c.arg(1);
    let Some(blob) = c.load(key, Kind::List)? else {
        if count.is_some() {
            c.out.null_array()
        } else {
            c.out.null()
        }
        return Ok(());
    };
    if count == Some(0) {
        c.out.array(0);
        return Ok(());
    }
    let mut items = decode(&blob)?;
    let want = count.map_or(1, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let popped = take_from(&mut items, end, want);
    assert!(!popped.is_empty(), "a stored list is never empty");
    store(c, key, &items)?;
    match count {
        None => c.out.bulk(popped[0]),
        Some(_) => {
            c.out.array(popped.len());
            for p in popped {
                c.out.bulk(p);
            }
        }
    }
    Ok(())
}

/// Redis's `start`/`end` normalisation for LRANGE and LTRIM: the inclusive
/// range of positions, or `None` if it is empty.
fn span(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = i64::try_from(len).expect("list length fits i64");
    let start = if start < 0 { (start + len).max(0) } else { start };
    let end = if end < 0 { end + len } else { end };
    if start > end || start >= len {
        return None;
    }
    let end = end.min(len - 1);
    Some((start as usize, end as usize))
}

/// LRANGE key start stop.
pub(super) fn lrange<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let (start, end) = (c.int_arg(2)?, c.int_arg(3)?);
    let blob = c.load(c.arg(1), Kind::List)?.unwrap_or_default();
    let items = decode(&blob)?;
    let picked = span(start, end, items.len()).map_or(&[][..], |(s, e)| &items[s..=e]);
    c.out.array(picked.len());
    for item in picked {
        c.out.bulk(item);
    }
    Ok(())
}

/// LTRIM key start stop.
pub(super) fn ltrim<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let (start, end) = (c.int_arg(2)?, c.int_arg(3)?);
    let key = c.arg(1);
    if let Some(blob) = c.load(key, Kind::List)? {
        let items = decode(&blob)?;
        let kept = span(start, end, items.len()).map_or(&[][..], |(s, e)| &items[s..=e]);
        if kept.len() != items.len() {
            store(c, key, kept)?;
        }
        // Redis reports a trim that removed nothing too.
        c.notify(super::notify::ev::LTRIM, key);
        if kept.is_empty() {
            c.notify(super::notify::ev::DEL, key);
        }
    }
    c.out.ok();
    Ok(())
}

pub(super) fn llen<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let blob = c.load(c.arg(1), Kind::List)?.unwrap_or_default();
    let n = decode(&blob)?.len();
    c.out.integer(n as i64);
    Ok(())
}

/// A Redis list index (negative from the tail) as a position, if in range.
fn position(index: i64, len: usize) -> Option<usize> {
    let len = i64::try_from(len).expect("list length fits i64");
    let i = if index < 0 { index + len } else { index };
    (0..len).contains(&i).then_some(i as usize)
}

/// LINDEX key index: the key is looked up before the index is parsed.
pub(super) fn lindex<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let Some(blob) = c.load(c.arg(1), Kind::List)? else {
        c.out.null();
        return Ok(());
    };
    let index = c.int_arg(2)?;
    let items = decode(&blob)?;
    match position(index, items.len()) {
        Some(i) => c.out.bulk(items[i]),
        None => c.out.null(),
    }
    Ok(())
}

/// LSET key index element.
pub(super) fn lset<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let key = c.arg(1);
    let Some(blob) = c.load(key, Kind::List)? else {
        return Err(Fail::err("no such key"));
    };
    let index = c.int_arg(2)?;
    let mut items = decode(&blob)?;
    let Some(i) = position(index, items.len()) else {
        return Err(Fail::err("index out of range"));
    };
    items[i] = c.arg(3);
    store(c, key, &items)?;
    c.out.ok();
    Ok(())
}

/// LREM key count element: `count` > 0 from the head, < 0 from the tail,
/// 0 all.
pub(super) fn lrem<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let count = c.int_arg(2)?;
    let (key, element) = (c.arg(1), c.arg(3));
    let Some(blob) = c.load(key, Kind::List)? else {
        c.out.integer(0);
        return Ok(());
    };
    let mut items = decode(&blob)?;
    let limit = if count == 0 { u64::MAX } else { count.unsigned_abs() };
    let mut removed = 0u64;
    let mut keep = |item: &&[u8]| {
        let hit = removed < limit && *item == element;
        removed += u64::from(hit);
        !hit
    };
    if count < 0 {
        items.reverse();
        items.retain(&mut keep);
        items.reverse();
    } else {
        items.retain(&mut keep);
    }
    if removed > 0 {
        store(c, key, &items)?;
    }
    c.out.integer(removed as i64);
    Ok(())
}

/// LINSERT key BEFORE|AFTER pivot element.
pub(super) fn linsert<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let after = match c.arg(2) {
        w if w.eq_ignore_ascii_case(b"after") => true,
        w if w.eq_ignore_ascii_case(b"before") => false,
        _ => return Err(Fail::Syntax),
    };
    let key = c.arg(1);
    let Some(blob) = c.load(key, Kind::List)? else {
        c.out.integer(0);
        return Ok(());
    };
    let mut items = decode(&blob)?;
    let Some(at) = items.iter().position(|i| *i == c.arg(3)) else {
        c.out.integer(-1);
        return Ok(());
    };
    items.insert(at + usize::from(after), c.arg(4));
    store(c, key, &items)?;
    c.out.integer(items.len() as i64);
    Ok(())
}

/// LPOS's options: RANK (never 0), COUNT (-1: not given; 0: all),
/// MAXLEN (0: no limit).
struct LposOpts {
    rank: i64,
    count: i64,
    maxlen: i64,
}

fn lpos_opts<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Result<LposOpts, Fail> {
    let mut o = LposOpts { rank: 1, count: -1, maxlen: 0 };
    let mut j = 3;
    while j < c.argc() {
        let more = j + 1 < c.argc();
        let opt = c.arg(j);
        if opt.eq_ignore_ascii_case(b"rank") && more {
            o.rank = c.int_arg(j + 1)?;
            if o.rank == 0 {
                return Err(Fail::err("RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list"));
            }
        } else if opt.eq_ignore_ascii_case(b"count") && more {
            o.count = c.positive_arg(j + 1, "COUNT can't be negative")?;
        } else if opt.eq_ignore_ascii_case(b"maxlen") && more {
            o.maxlen = c.positive_arg(j + 1, "MAXLEN can't be negative")?;
        } else {
            return Err(Fail::Syntax);
        }
        j += 2;
    }
    Ok(o)
}

/// The positions LPOS answers, as Redis 7.0 computes them. A negative rank
/// searches from the tail; Redis negates it in C, so `i64::MIN` stays
/// negative (every match then qualifies and COUNT never stops the search):
/// the wrapping operations below reproduce that exactly.
fn lpos_search(items: &[&[u8]], element: &[u8], o: &LposOpts) -> Vec<i64> {
    let (rank, from_tail) = if o.rank < 0 { (o.rank.wrapping_neg(), true) } else { (o.rank, false) };
    let len = items.len() as i64;
    let mut found = Vec::new();
    let mut matches = 0i64;
    for index in 0..len {
        if o.maxlen != 0 && index >= o.maxlen {
            break;
        }
        let at = if from_tail { len - index - 1 } else { index };
        if items[at as usize] != element {
            continue;
        }
        matches += 1;
        if matches >= rank {
            found.push(at);
            let single = o.count == -1;
            if single || (o.count != 0 && matches.wrapping_sub(rank).wrapping_add(1) >= o.count) {
                break;
            }
        }
    }
    found
}

/// LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len].
pub(super) fn lpos<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let o = lpos_opts(c)?;
    let blob = c.load(c.arg(1), Kind::List)?.unwrap_or_default();
    let items = decode(&blob)?;
    let found = lpos_search(&items, c.arg(2), &o);
    if o.count == -1 {
        match found.first() {
            Some(&i) => c.out.integer(i),
            None => c.out.null(),
        }
    } else {
        c.out.array(found.len());
        for i in found {
            c.out.integer(i);
        }
    }
    Ok(())
}

/// LMOVE source destination LEFT|RIGHT LEFT|RIGHT.
pub(super) fn lmove<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let from = end_arg(c.arg(3))?;
    let to = end_arg(c.arg(4))?;
    move_one(c, from, to)
}

/// RPOPLPUSH source destination: LMOVE source destination RIGHT LEFT.
pub(super) fn rpoplpush<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    move_one(c, End::Tail, End::Head)
}
