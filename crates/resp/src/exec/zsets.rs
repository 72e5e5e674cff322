//! Sorted-set commands: ZADD (NX XX GT LT CH INCR) ZREM ZSCORE ZCARD ZRANGE
//! (by rank, BYSCORE, BYLEX, REV, LIMIT, WITHSCORES) ZRANGEBYSCORE, over the
//! zset blob of [`crate::blob`], following Redis 7.0's `t_zset.c` step by
//! step (option parsing, then conflicts, then ranges, then the key).

use super::{Ctx, Fail, Res};
use crate::blob::{decode_zset, encode_zset, zcmp};
use crate::keyspace::{Keyspace, Kind, ValueSource};
use crate::numbers::{parse_score, parse_score_bound};
use crate::reply::{Protocol, ReplySink};
use std::cmp::Ordering;

fn store<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, key: &[u8], entries: &[(f64, &[u8])]) -> Res {
    if entries.is_empty() {
        c.ks.delete(key)?;
        return Ok(());
    }
    let mut blob = Vec::new();
    encode_zset(entries, &mut blob);
    c.ks.set(key, Kind::ZSet, ValueSource::Owned(blob))?;
    Ok(())
}

#[derive(Default)]
struct ZaddFlags {
    nx: bool,
    xx: bool,
    ch: bool,
    incr: bool,
    gt: bool,
    lt: bool,
}

pub(super) fn zadd<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let mut f = ZaddFlags::default();
    let mut idx = 2;
    while idx < c.argc() {
        let o = c.arg(idx);
        let is = |w: &[u8]| o.eq_ignore_ascii_case(w);
        if is(b"nx") {
            f.nx = true;
        } else if is(b"xx") {
            f.xx = true;
        } else if is(b"ch") {
            f.ch = true;
        } else if is(b"incr") {
            f.incr = true;
        } else if is(b"gt") {
            f.gt = true;
        } else if is(b"lt") {
            f.lt = true;
        } else {
            break;
        }
        idx += 1;
    }
    let elements = c.argc() - idx;
    if elements % 2 == 1 || elements == 0 {
        return Err(Fail::Syntax);
    }
    let elements = elements / 2;
    if f.nx && f.xx {
        return Err(Fail::err("XX and NX options at the same time are not compatible"));
    }
    if (f.nx && (f.gt || f.lt)) || (f.gt && f.lt) {
        return Err(Fail::err("GT, LT, and/or NX options at the same time are not compatible"));
    }
    if f.incr && elements > 1 {
        return Err(Fail::err("INCR option supports a single increment-element pair"));
    }
    let mut scores = Vec::with_capacity(elements);
    for j in 0..elements {
        scores.push(parse_score(c.arg(idx + 2 * j)).ok_or(Fail::NotFloat)?);
    }
    let key = c.arg(1);
    let old = c.load(key, Kind::ZSet)?;
    let mut entries = Vec::new();
    if let Some(blob) = &old {
        decode_zset(blob, &mut entries)?;
    }
    let (mut added, mut updated, mut processed) = (0i64, 0i64, 0);
    let mut last_score = 0.0;
    if old.is_some() || !f.xx {
        for (j, &score) in scores.iter().enumerate() {
            let member = c.arg(idx + 2 * j + 1);
            match zset_add(&mut entries, score, member, &f)? {
                Outcome::Added(s) => {
                    added += 1;
                    processed += 1;
                    last_score = s;
                }
                Outcome::Updated(s) => {
                    updated += 1;
                    processed += 1;
                    last_score = s;
                }
                Outcome::Same(s) => {
                    processed += 1;
                    last_score = s;
                }
                Outcome::Nop => {}
            }
        }
    }
    if added + updated > 0 {
        store(c, key, &entries)?;
    }
    if f.incr {
        if processed > 0 { c.out.double(last_score) } else { c.out.null() }
    } else {
        c.out.integer(if f.ch { added + updated } else { added });
    }
    Ok(())
}

enum Outcome {
    Added(f64),
    Updated(f64),
    Same(f64),
    Nop,
}

/// Redis `zsetAdd` on the decoded entries.
fn zset_add<'a>(entries: &mut Vec<(f64, &'a [u8])>, mut score: f64, member: &'a [u8], f: &ZaddFlags) -> Result<Outcome, Fail> {
    match entries.iter().position(|e| e.1 == member) {
        Some(i) => {
            if f.nx {
                return Ok(Outcome::Nop);
            }
            let cur = entries[i].0;
            if f.incr {
                score += cur;
                if score.is_nan() {
                    return Err(Fail::err("resulting score is not a number (NaN)"));
                }
            }
            if (f.lt && score >= cur) || (f.gt && score <= cur) {
                return Ok(Outcome::Nop);
            }
            if score == cur {
                return Ok(Outcome::Same(score));
            }
            entries.remove(i);
            insert_sorted(entries, score, member);
            Ok(Outcome::Updated(score))
        }
        None => {
            if f.xx {
                return Ok(Outcome::Nop);
            }
            insert_sorted(entries, score, member);
            Ok(Outcome::Added(score))
        }
    }
}

fn insert_sorted<'a>(entries: &mut Vec<(f64, &'a [u8])>, score: f64, member: &'a [u8]) {
    let score = if score == 0.0 { 0.0 } else { score };
    let at = entries.partition_point(|&e| zcmp(e, (score, member)) == Ordering::Less);
    entries.insert(at, (score, member));
}

pub(super) fn zrem<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let key = c.arg(1);
    let Some(blob) = c.load(key, Kind::ZSet)? else {
        c.out.integer(0);
        return Ok(());
    };
    let mut entries = Vec::new();
    decode_zset(&blob, &mut entries)?;
    let before = entries.len();
    for i in 2..c.argc() {
        let m = c.arg(i);
        if let Some(p) = entries.iter().position(|e| e.1 == m) {
            entries.remove(p);
        }
    }
    let removed = before - entries.len();
    if removed > 0 {
        store(c, key, &entries)?;
    }
    c.out.integer(removed as i64);
    Ok(())
}

pub(super) fn zscore<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let blob = c.load(c.arg(1), Kind::ZSet)?.unwrap_or_default();
    let mut entries = Vec::new();
    if !blob.is_empty() {
        decode_zset(&blob, &mut entries)?;
    }
    match entries.iter().find(|e| e.1 == c.arg(2)) {
        Some(e) => c.out.double(e.0),
        None => c.out.null(),
    }
    Ok(())
}

pub(super) fn zcard<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let blob = c.load(c.arg(1), Kind::ZSet)?.unwrap_or_default();
    let mut entries = Vec::new();
    if !blob.is_empty() {
        decode_zset(&blob, &mut entries)?;
    }
    c.out.integer(entries.len() as i64);
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum RangeType {
    Rank,
    Score,
    Lex,
}

/// A lexicographic bound: `-`, `+`, or a member, exclusive or not.
#[derive(Clone, Copy)]
enum Lex<'a> {
    Min,
    Max,
    Val(&'a [u8]),
}

fn parse_lex(s: &[u8]) -> Option<(Lex<'_>, bool)> {
    match s.first()? {
        b'+' if s.len() == 1 => Some((Lex::Max, true)),
        b'-' if s.len() == 1 => Some((Lex::Min, true)),
        b'(' => Some((Lex::Val(&s[1..]), true)),
        b'[' => Some((Lex::Val(&s[1..]), false)),
        _ => None,
    }
}

fn cmp_lex(a: Lex<'_>, b: Lex<'_>) -> Ordering {
    match (a, b) {
        (Lex::Min, Lex::Min) | (Lex::Max, Lex::Max) => Ordering::Equal,
        (Lex::Min, _) | (_, Lex::Max) => Ordering::Less,
        (Lex::Max, _) | (_, Lex::Min) => Ordering::Greater,
        (Lex::Val(x), Lex::Val(y)) => x.cmp(y),
    }
}

/// A parsed BYSCORE or BYLEX range.
enum Range<'a> {
    Score { min: f64, minex: bool, max: f64, maxex: bool },
    Lex { min: Lex<'a>, minex: bool, max: Lex<'a>, maxex: bool },
}

impl Range<'_> {
    fn is_empty(&self) -> bool {
        match *self {
            Range::Score { min, minex, max, maxex } => min > max || (min == max && (minex || maxex)),
            Range::Lex { min, minex, max, maxex } => {
                let o = cmp_lex(min, max);
                o == Ordering::Greater || (o == Ordering::Equal && (minex || maxex))
            }
        }
    }

    fn gte_min(&self, e: (f64, &[u8])) -> bool {
        match *self {
            Range::Score { min, minex, .. } => if minex { e.0 > min } else { e.0 >= min },
            Range::Lex { min, minex, .. } => {
                let o = cmp_lex(Lex::Val(e.1), min);
                if minex { o == Ordering::Greater } else { o != Ordering::Less }
            }
        }
    }

    fn lte_max(&self, e: (f64, &[u8])) -> bool {
        match *self {
            Range::Score { max, maxex, .. } => if maxex { e.0 < max } else { e.0 <= max },
            Range::Lex { max, maxex, .. } => {
                let o = cmp_lex(Lex::Val(e.1), max);
                if maxex { o == Ordering::Less } else { o != Ordering::Greater }
            }
        }
    }
}

struct RangeOpts {
    withscores: bool,
    offset: i64,
    limit: i64,
    reverse: bool,
    kind: RangeType,
}

fn parse_range_opts<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, '_, K, S>, byscore_cmd: bool) -> Result<RangeOpts, Fail> {
    let mut o = RangeOpts { withscores: false, offset: 0, limit: -1, reverse: false, kind: RangeType::Rank };
    let (mut dir_set, mut kind_set) = (byscore_cmd, byscore_cmd);
    if byscore_cmd {
        o.kind = RangeType::Score;
    }
    let mut j = 4;
    while j < c.argc() {
        let left = c.argc() - j - 1;
        let a = c.arg(j);
        let is = |w: &[u8]| a.eq_ignore_ascii_case(w);
        if is(b"withscores") {
            o.withscores = true;
        } else if is(b"limit") && left >= 2 {
            o.offset = c.int_arg(j + 1)?;
            o.limit = c.int_arg(j + 2)?;
            j += 2;
        } else if !dir_set && is(b"rev") {
            o.reverse = true;
            dir_set = true;
        } else if !kind_set && is(b"bylex") {
            o.kind = RangeType::Lex;
            kind_set = true;
        } else if !kind_set && is(b"byscore") {
            o.kind = RangeType::Score;
            kind_set = true;
        } else {
            return Err(Fail::Syntax);
        }
        j += 1;
    }
    Ok(o)
}

/// ZRANGE (and ZRANGEBYSCORE when `byscore_cmd`).
pub(super) fn zrange<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, byscore_cmd: bool) -> Res {
    let o = parse_range_opts(c, byscore_cmd)?;
    if o.kind == RangeType::Rank && o.limit != -1 {
        return Err(Fail::err("syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"));
    }
    if o.withscores && o.kind == RangeType::Lex {
        return Err(Fail::err("syntax error, WITHSCORES not supported in combination with BYLEX"));
    }
    let (mut lo, mut hi) = (2, 3);
    if o.reverse && o.kind != RangeType::Rank {
        std::mem::swap(&mut lo, &mut hi);
    }
    let (lo_arg, hi_arg) = (c.arg(lo), c.arg(hi));
    let mut rank = (0i64, 0i64);
    let mut range = None;
    match o.kind {
        RangeType::Rank => rank = (c.int_arg(lo)?, c.int_arg(hi)?),
        RangeType::Score => {
            let (Some((min, minex)), Some((max, maxex))) = (parse_score_bound(lo_arg), parse_score_bound(hi_arg)) else {
                return Err(Fail::err("min or max is not a float"));
            };
            range = Some(Range::Score { min, minex, max, maxex });
        }
        RangeType::Lex => {
            let (Some((min, minex)), Some((max, maxex))) = (parse_lex(lo_arg), parse_lex(hi_arg)) else {
                return Err(Fail::err("min or max not valid string range item"));
            };
            range = Some(Range::Lex { min, minex, max, maxex });
        }
    }
    let Some(blob) = c.load(c.arg(1), Kind::ZSet)? else {
        c.out.array(0);
        return Ok(());
    };
    let mut entries = Vec::new();
    decode_zset(&blob, &mut entries)?;
    let picked = match &range {
        None => by_rank(&entries, rank.0, rank.1, o.reverse),
        Some(r) => by_range(&entries, r, o.reverse, o.offset, o.limit),
    };
    emit(c, &picked, o.withscores);
    Ok(())
}

fn by_rank<'a>(entries: &[(f64, &'a [u8])], mut start: i64, mut end: i64, reverse: bool) -> Vec<(f64, &'a [u8])> {
    let len = entries.len() as i64;
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    if start < 0 {
        start = 0;
    }
    if start > end || start >= len {
        return Vec::new();
    }
    if end >= len {
        end = len - 1;
    }
    (start..=end)
        .map(|i| if reverse { entries[(len - 1 - i) as usize] } else { entries[i as usize] })
        .collect()
}

fn by_range<'a>(entries: &[(f64, &'a [u8])], r: &Range<'_>, reverse: bool, offset: i64, limit: i64) -> Vec<(f64, &'a [u8])> {
    let mut out = Vec::new();
    let len = entries.len() as i64;
    if (offset > 0 && offset >= len) || r.is_empty() || offset < 0 {
        return out;
    }
    // Redis first tests the set's ends (`zzlIsInRange`, `zzlIsInLexRange`):
    // the last element against the minimum, the first against the maximum.
    // For BYLEX over members of different scores this decides the answer.
    let (Some(&first), Some(&last)) = (entries.first(), entries.last()) else { return out };
    if !r.gte_min(last) || !r.lte_max(first) {
        return out;
    }
    let order: Box<dyn Iterator<Item = &(f64, &'a [u8])>> =
        if reverse { Box::new(entries.iter().rev()) } else { Box::new(entries.iter()) };
    let enter = |e: (f64, &[u8])| if reverse { r.lte_max(e) } else { r.gte_min(e) };
    let stay = |e: (f64, &[u8])| if reverse { r.gte_min(e) } else { r.lte_max(e) };
    let mut it = order.skip_while(|e| !enter(**e)).peekable();
    // Redis checks the first element in range against the far bound too.
    match it.peek() {
        Some(e) if stay(**e) => {}
        _ => return out,
    }
    let mut it = it.skip(offset as usize);
    // A negative count means no limit (Redis counts it down from any
    // negative value; counting down from i64::MIN would overflow here).
    let mut left = if limit < 0 { usize::MAX } else { limit as usize };
    while left != 0 {
        let Some(&e) = it.next() else { break };
        if !stay(e) {
            break;
        }
        out.push(e);
        left -= 1;
    }
    out
}

fn emit<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, picked: &[(f64, &[u8])], withscores: bool) {
    if !withscores {
        c.out.array(picked.len());
        for e in picked {
            c.out.bulk(e.1);
        }
        return;
    }
    match c.out.protocol {
        Protocol::Resp2 => {
            c.out.array(picked.len() * 2);
            for e in picked {
                c.out.bulk(e.1);
                c.out.double(e.0);
            }
        }
        Protocol::Resp3 => {
            c.out.array(picked.len());
            for e in picked {
                c.out.array(2);
                c.out.bulk(e.1);
                c.out.double(e.0);
            }
        }
    }
}
