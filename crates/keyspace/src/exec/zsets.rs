//! Sorted-set commands: ZADD (NX XX GT LT CH INCR) ZINCRBY ZREM ZSCORE
//! ZMSCORE ZCARD ZRANK ZREVRANK ZCOUNT ZLEXCOUNT, the range family (ZRANGE
//! by rank, BYSCORE, BYLEX, REV, LIMIT, WITHSCORES; ZRANGESTORE ZREVRANGE
//! Z[REV]RANGEBYSCORE Z[REV]RANGEBYLEX), ZREMRANGEBYRANK|SCORE|LEX,
//! ZPOPMIN ZPOPMAX ZMPOP ZRANDMEMBER ZSCAN (the blocking pops BZPOPMIN
//! BZPOPMAX BZMPOP are [`super::blocking`]'s, over [`pop_members`]), and ZUNION ZINTER ZDIFF (and their
//! STORE forms, WEIGHTS, AGGREGATE) ZINTERCARD, over the zset blob of
//! [`crate::blob`] (entries ordered by score, then member bytes), following
//! Redis 7.0's `t_zset.c` step by step (option parsing, then conflicts, then
//! ranges, then the key). Scores are doubles in RESP3; pairs WITHSCORES are
//! flat in RESP2 and `[member, score]` arrays in RESP3 (ZPOPMIN/ZPOPMAX
//! only with a count). A stored score of zero is +0, as Redis stores it.

use super::shared::{parse_cursor, random_count, random_picks, reply_pairs, scan_pairs, zadd_flags, ZaddFlags};
use super::notify::ev;
use super::{Ctx, Fail, Res};
use crate::blob::{decode_zset, encode_zset, zcmp};
use crate::store::{Expiry, Keyspace, Kind};
use pmwire_resp::numbers::{parse_i64, parse_score, parse_score_bound};
use pmwire_resp::reply::{Protocol, ReplySink};
use std::cmp::Ordering;

fn store<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    key: &[u8],
    entries: &[(f64, &[u8])],
) -> Res {
    c.store_collection(key, Kind::ZSet, entries, encode_zset, Expiry::Keep)
}

pub(super) fn zadd<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let (f, idx) = zadd_flags(c);
    zadd_generic(c, &f, idx)
}

/// ZINCRBY key increment member: ZADD's INCR (Redis 7.0 runs both through
/// `zaddGenericCommand`), replying with the new score as a double.
pub(super) fn zincrby<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    zadd_generic(c, &ZaddFlags { incr: true, ..ZaddFlags::default() }, 2)
}

/// ZADD's work once its flags are parsed; score-member pairs from `idx`.
fn zadd_generic<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    f: &ZaddFlags,
    idx: usize,
) -> Res {
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
    let mut pairs = Vec::with_capacity(elements);
    for j in 0..elements {
        pairs.push((parse_score(c.arg(idx + 2 * j)).ok_or(Fail::NotFloat)?, c.arg(idx + 2 * j + 1)));
    }
    zadd_pairs(c, f, &pairs)
}

/// ZADD's work once its options are checked and its scores parsed: each
/// `(score, member)` of `pairs` added to the sorted set at argument 1 (also
/// GEOADD's, whose scores are encoded positions, as Redis's `geoaddCommand`
/// calls `zaddCommand`).
pub(super) fn zadd_pairs<'r, K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, 'r, K, S>,
    f: &ZaddFlags,
    pairs: &[(f64, &'r [u8])],
) -> Res {
    if pairs.is_empty() {
        return Err(Fail::Syntax);
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
        for &(score, member) in pairs {
            match zset_add(&mut entries, score, member, f)? {
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
        c.notify(if f.incr { ev::ZINCR } else { ev::ZADD }, key);
    }
    if f.incr {
        if processed > 0 {
            c.out.double(last_score)
        } else {
            c.out.null()
        }
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
fn zset_add<'a>(
    entries: &mut Vec<(f64, &'a [u8])>,
    mut score: f64,
    member: &'a [u8],
    f: &ZaddFlags,
) -> Result<Outcome, Fail> {
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
pub(super) enum RangeType {
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
            Range::Score { min, minex, .. } => {
                if minex {
                    e.0 > min
                } else {
                    e.0 >= min
                }
            }
            Range::Lex { min, minex, .. } => {
                let o = cmp_lex(Lex::Val(e.1), min);
                if minex {
                    o == Ordering::Greater
                } else {
                    o != Ordering::Less
                }
            }
        }
    }

    fn lte_max(&self, e: (f64, &[u8])) -> bool {
        match *self {
            Range::Score { max, maxex, .. } => {
                if maxex {
                    e.0 < max
                } else {
                    e.0 <= max
                }
            }
            Range::Lex { max, maxex, .. } => {
                let o = cmp_lex(Lex::Val(e.1), max);
                if maxex {
                    o == Ordering::Less
                } else {
                    o != Ordering::Greater
                }
            }
        }
    }
}

/// How a range command reads its arguments (Redis 7.0's
/// `zrangeGenericCommand`): where the source key is, whether it stores,
/// and the direction and range type its name fixes (`None`: options say).
#[derive(Clone, Copy)]
pub(super) struct RangeCmd {
    key_at: usize,
    store: bool,
    reverse: Option<bool>,
    kind: Option<RangeType>,
}

const fn range_cmd(key_at: usize, store: bool, reverse: Option<bool>, kind: Option<RangeType>) -> RangeCmd {
    RangeCmd { key_at, store, reverse, kind }
}

/// ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES].
pub(super) const ZRANGE: RangeCmd = range_cmd(1, false, None, None);
/// ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count].
pub(super) const ZRANGESTORE: RangeCmd = range_cmd(2, true, None, None);
/// ZREVRANGE key start stop [WITHSCORES].
pub(super) const ZREVRANGE: RangeCmd = range_cmd(1, false, Some(true), Some(RangeType::Rank));
/// ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count].
pub(super) const ZRANGEBYSCORE: RangeCmd = range_cmd(1, false, Some(false), Some(RangeType::Score));
/// ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count].
pub(super) const ZREVRANGEBYSCORE: RangeCmd = range_cmd(1, false, Some(true), Some(RangeType::Score));
/// ZRANGEBYLEX key min max [LIMIT offset count].
pub(super) const ZRANGEBYLEX: RangeCmd = range_cmd(1, false, Some(false), Some(RangeType::Lex));
/// ZREVRANGEBYLEX key max min [LIMIT offset count].
pub(super) const ZREVRANGEBYLEX: RangeCmd = range_cmd(1, false, Some(true), Some(RangeType::Lex));

struct RangeOpts {
    withscores: bool,
    offset: i64,
    limit: i64,
    reverse: bool,
    kind: RangeType,
}

fn parse_range_opts<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &Ctx<'_, '_, K, S>,
    cmd: RangeCmd,
) -> Result<RangeOpts, Fail> {
    let mut o = RangeOpts {
        withscores: false,
        offset: 0,
        limit: -1,
        reverse: cmd.reverse.unwrap_or(false),
        kind: cmd.kind.unwrap_or(RangeType::Rank),
    };
    let (mut dir_set, mut kind_set) = (cmd.reverse.is_some(), cmd.kind.is_some());
    let mut j = cmd.key_at + 3;
    while j < c.argc() {
        let left = c.argc() - j - 1;
        let a = c.arg(j);
        let is = |w: &[u8]| a.eq_ignore_ascii_case(w);
        if !cmd.store && is(b"withscores") {
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

/// A BYSCORE range from two arguments (`zslParseRange`).
fn score_range<'a>(lo: &[u8], hi: &[u8]) -> Result<Range<'a>, Fail> {
    let (Some((min, minex)), Some((max, maxex))) = (parse_score_bound(lo), parse_score_bound(hi)) else {
        return Err(Fail::err("min or max is not a float"));
    };
    Ok(Range::Score { min, minex, max, maxex })
}

/// A BYLEX range from two arguments (`zslParseLexRange`).
fn lex_range<'a>(lo: &'a [u8], hi: &'a [u8]) -> Result<Range<'a>, Fail> {
    let (Some((min, minex)), Some((max, maxex))) = (parse_lex(lo), parse_lex(hi)) else {
        return Err(Fail::err("min or max not valid string range item"));
    };
    Ok(Range::Lex { min, minex, max, maxex })
}

/// The range commands: ZRANGE ZRANGESTORE ZREVRANGE Z[REV]RANGEBYSCORE
/// Z[REV]RANGEBYLEX, in Redis 7.0's order of checks (options, conflicts,
/// range, then the key).
pub(super) fn zrange<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, cmd: RangeCmd) -> Res {
    let o = parse_range_opts(c, cmd)?;
    if o.kind == RangeType::Rank && o.limit != -1 {
        return Err(Fail::err("syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"));
    }
    if o.withscores && o.kind == RangeType::Lex {
        return Err(Fail::err("syntax error, WITHSCORES not supported in combination with BYLEX"));
    }
    let (mut lo, mut hi) = (cmd.key_at + 1, cmd.key_at + 2);
    if o.reverse && o.kind != RangeType::Rank {
        std::mem::swap(&mut lo, &mut hi);
    }
    let (lo_arg, hi_arg) = (c.arg(lo), c.arg(hi));
    let mut rank = (0i64, 0i64);
    let range = match o.kind {
        RangeType::Rank => {
            rank = (c.int_arg(lo)?, c.int_arg(hi)?);
            None
        }
        RangeType::Score => Some(score_range(lo_arg, hi_arg)?),
        RangeType::Lex => Some(lex_range(lo_arg, hi_arg)?),
    };
    let blob = c.load(c.arg(cmd.key_at), Kind::ZSet)?;
    let mut entries = Vec::new();
    if let Some(blob) = &blob {
        decode_zset(blob, &mut entries)?;
    }
    let mut picked = match &range {
        None => by_rank(&entries, rank.0, rank.1, o.reverse),
        Some(r) => by_range(&entries, r, o.reverse, o.offset, o.limit),
    };
    if cmd.store {
        // As Redis's zrangeResultFinalizeStore: the destination is replaced
        // (its deadline dropped), or deleted when the range is empty.
        picked.sort_by(|a, b| zcmp(*a, *b));
        c.store_collection(c.arg(1), Kind::ZSet, &picked, encode_zset, Expiry::Clear)?;
        c.out.integer(picked.len() as i64);
        return Ok(());
    }
    emit(c, &picked, o.withscores);
    Ok(())
}

/// The index span `[start, end]` of a rank range (negative from the end),
/// `None` when empty, sanitised as Redis does.
fn rank_span(len: usize, mut start: i64, mut end: i64) -> Option<(usize, usize)> {
    let len = len as i64;
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
        return None;
    }
    if end >= len {
        end = len - 1;
    }
    Some((start as usize, end as usize))
}

fn by_rank<'a>(entries: &[(f64, &'a [u8])], start: i64, end: i64, reverse: bool) -> Vec<(f64, &'a [u8])> {
    let Some((start, end)) = rank_span(entries.len(), start, end) else { return Vec::new() };
    let len = entries.len();
    (start..=end).map(|i| if reverse { entries[len - 1 - i] } else { entries[i] }).collect()
}

/// Where Redis's walk over a BYSCORE or BYLEX range starts: first it tests
/// the set's ends (`zzlIsInRange`, `zzlIsInLexRange`: the last element
/// against the minimum, the first against the maximum); then it goes
/// forward to the first element past the minimum (backward to the last
/// below the maximum when `reverse`), which must be within the far bound.
/// For BYLEX over members of different scores this decides the answer.
fn range_entry(entries: &[(f64, &[u8])], r: &Range<'_>, reverse: bool) -> Option<usize> {
    let (&first, &last) = (entries.first()?, entries.last()?);
    if r.is_empty() || !r.gte_min(last) || !r.lte_max(first) {
        return None;
    }
    if reverse {
        let at = entries.iter().rposition(|&e| r.lte_max(e))?;
        r.gte_min(entries[at]).then_some(at)
    } else {
        let at = entries.iter().position(|&e| r.gte_min(e))?;
        r.lte_max(entries[at]).then_some(at)
    }
}

/// The index span a forward walk over a range covers (ZCOUNT, ZLEXCOUNT,
/// ZREMRANGEBYSCORE, ZREMRANGEBYLEX): from [`range_entry`] while elements
/// stay below the maximum.
fn span(entries: &[(f64, &[u8])], r: &Range<'_>) -> std::ops::Range<usize> {
    let Some(lo) = range_entry(entries, r, false) else { return 0..0 };
    lo..lo + entries[lo..].iter().take_while(|&&e| r.lte_max(e)).count()
}

fn by_range<'a>(
    entries: &[(f64, &'a [u8])],
    r: &Range<'_>,
    reverse: bool,
    offset: i64,
    limit: i64,
) -> Vec<(f64, &'a [u8])> {
    let len = entries.len() as i64;
    // Redis answers nothing for an offset past the set, and skips every
    // element for a negative one (it counts it down from below zero).
    if (offset > 0 && offset >= len) || offset < 0 {
        return Vec::new();
    }
    let Some(at) = range_entry(entries, r, reverse) else { return Vec::new() };
    // A negative count means no limit (Redis counts it down from any
    // negative value; counting down from i64::MIN would overflow here).
    let limit = if limit < 0 { usize::MAX } else { usize::try_from(limit).unwrap_or(usize::MAX) };
    // As Redis, the offset skips elements without testing them against
    // the far bound; the rest stop at the first element beyond it.
    let offset = offset as usize;
    if reverse {
        let stay = |e: &&(f64, &[u8])| r.gte_min(**e);
        entries[..=at].iter().rev().skip(offset).take_while(stay).take(limit).copied().collect()
    } else {
        let stay = |e: &&(f64, &[u8])| r.lte_max(**e);
        entries[at..].iter().skip(offset).take_while(stay).take(limit).copied().collect()
    }
}

fn emit<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    picked: &[(f64, &[u8])],
    withscores: bool,
) {
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

/// The decoded entries of a loaded zset blob (empty for none).
fn entries_of(blob: &[u8]) -> Result<Vec<(f64, &[u8])>, Fail> {
    let mut entries = Vec::new();
    if !blob.is_empty() {
        decode_zset(blob, &mut entries)?;
    }
    Ok(entries)
}

/// ZRANK key member / ZREVRANK key member: the rank, or null.
pub(super) fn zrank<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, reverse: bool) -> Res {
    let blob = c.load(c.arg(1), Kind::ZSet)?.unwrap_or_default();
    let entries = entries_of(&blob)?;
    match entries.iter().position(|e| e.1 == c.arg(2)) {
        Some(i) => c.out.integer(if reverse { entries.len() - 1 - i } else { i } as i64),
        None => c.out.null(),
    }
    Ok(())
}

/// ZCOUNT key min max (`lex`: ZLEXCOUNT): the range is parsed before the
/// key is looked up.
pub(super) fn zcount<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, lex: bool) -> Res {
    let r = if lex { lex_range(c.arg(2), c.arg(3))? } else { score_range(c.arg(2), c.arg(3))? };
    let blob = c.load(c.arg(1), Kind::ZSet)?.unwrap_or_default();
    let entries = entries_of(&blob)?;
    c.out.integer(span(&entries, &r).len() as i64);
    Ok(())
}

/// ZREMRANGEBYRANK / ZREMRANGEBYSCORE / ZREMRANGEBYLEX key a b: removes
/// the span ZRANGE would answer (forward), replies how many.
pub(super) fn zremrange<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    kind: RangeType,
) -> Res {
    let mut rank = (0, 0);
    let range = match kind {
        RangeType::Rank => {
            rank = (c.int_arg(2)?, c.int_arg(3)?);
            None
        }
        RangeType::Score => Some(score_range(c.arg(2), c.arg(3))?),
        RangeType::Lex => Some(lex_range(c.arg(2), c.arg(3))?),
    };
    let key = c.arg(1);
    let Some(blob) = c.load(key, Kind::ZSet)? else {
        c.out.integer(0);
        return Ok(());
    };
    let mut entries = entries_of(&blob)?;
    let gone = match &range {
        None => rank_span(entries.len(), rank.0, rank.1).map_or(0..0, |(s, e)| s..e + 1),
        Some(r) => span(&entries, r),
    };
    let removed = gone.len();
    if removed > 0 {
        entries.drain(gone);
        store(c, key, &entries)?;
    }
    c.out.integer(removed as i64);
    Ok(())
}

/// ZPOPMIN / ZPOPMAX key [count]: RESP3 answers pairs nested when a count
/// is given, flat without (as RESP2 always does).
pub(super) fn zpop<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, max: bool) -> Res {
    if c.argc() > 3 {
        return Err(Fail::Syntax);
    }
    let count = if c.argc() == 3 { Some(c.positive_arg(2, "value is out of range, must be positive")?) } else { None };
    let key = c.arg(1);
    let Some(blob) = c.load(key, Kind::ZSet)? else {
        c.out.array(0);
        return Ok(());
    };
    let mut entries = entries_of(&blob)?;
    let n = usize::try_from(count.unwrap_or(1)).unwrap_or(usize::MAX).min(entries.len());
    if n == 0 {
        c.out.array(0);
        return Ok(());
    }
    let popped: Vec<(f64, &[u8])> =
        if max { entries.drain(entries.len() - n..).rev().collect() } else { entries.drain(..n).collect() };
    store(c, key, &entries)?;
    if count.is_some() {
        emit(c, &popped, true);
    } else {
        c.out.array(2);
        c.out.bulk(popped[0].1);
        c.out.double(popped[0].0);
    }
    Ok(())
}

/// ZMPOP's and BZMPOP's arguments from `numkeys` at `at`: the keys' range,
/// whether from the highest scores (MAX), and the count (1 if not given),
/// checked in Redis 7.0's `zmpopGenericCommand` order.
pub(super) fn mpop_args<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &Ctx<'_, '_, K, S>,
    at: usize,
) -> Result<(std::ops::Range<usize>, bool, usize), Fail> {
    let positive =
        |i: usize, msg: &str| parse_i64(c.arg(i)).filter(|&n| n >= 1).ok_or_else(|| Fail::err(msg));
    let numkeys = positive(at, "numkeys should be greater than 0")?;
    let where_at = usize::try_from(numkeys).ok().and_then(|n| (at + 1).checked_add(n)).filter(|&w| w < c.argc());
    let Some(where_at) = where_at else { return Err(Fail::Syntax) };
    let max = if c.arg(where_at).eq_ignore_ascii_case(b"max") {
        true
    } else if c.arg(where_at).eq_ignore_ascii_case(b"min") {
        false
    } else {
        return Err(Fail::Syntax);
    };
    let mut count = None;
    let mut j = where_at + 1;
    while j < c.argc() {
        if count.is_none() && c.arg(j).eq_ignore_ascii_case(b"count") && j + 1 < c.argc() {
            count = Some(positive(j + 1, "count should be greater than 0")?);
            j += 2;
        } else {
            return Err(Fail::Syntax);
        }
    }
    Ok((at + 1..where_at, max, usize::try_from(count.unwrap_or(1)).unwrap_or(usize::MAX)))
}

/// Pops up to `count` members (at least one) from the lowest end of the
/// sorted set at `key`, or the highest (`max`), highest first: `None` if
/// there is no key (an emptied set is deleted), WRONGTYPE for another kind.
pub(super) fn pop_members<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    key: &[u8],
    max: bool,
    count: usize,
) -> Result<Option<Vec<(f64, Vec<u8>)>>, Fail> {
    assert!(count >= 1, "a pop takes at least one member");
    let Some(blob) = c.load(key, Kind::ZSet)? else { return Ok(None) };
    let mut entries = entries_of(&blob)?;
    if entries.is_empty() {
        return Err(Fail::Text("ERR stored value is corrupt: an empty sorted set".into()));
    }
    let n = count.min(entries.len());
    let popped: Vec<(f64, Vec<u8>)> = if max {
        entries.drain(entries.len() - n..).rev().map(|(s, m)| (s, m.to_vec())).collect()
    } else {
        entries.drain(..n).map(|(s, m)| (s, m.to_vec())).collect()
    };
    store(c, key, &entries)?;
    c.notify(if max { ev::ZPOPMAX } else { ev::ZPOPMIN }, key);
    if entries.is_empty() {
        c.notify(ev::DEL, key);
    }
    Ok(Some(popped))
}

/// Pops up to `count` from the first sorted set of `keys` (argument
/// indices) and answers `[key, [[member, score]...]]` (ZMPOP's and
/// BZMPOP's reply in RESP2 and RESP3); false if no key holds one (nothing
/// answered). A key of another kind before it answers WRONGTYPE.
pub(super) fn mpop_first<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    keys: std::ops::Range<usize>,
    max: bool,
    count: usize,
) -> Result<bool, Fail> {
    for i in keys {
        let key = c.arg(i);
        let Some(popped) = pop_members(c, key, max, count)? else { continue };
        c.out.array(2);
        c.out.bulk(key);
        c.out.array(popped.len());
        for (score, member) in &popped {
            c.out.array(2);
            c.out.bulk(member);
            c.out.double(*score);
        }
        return Ok(true);
    }
    Ok(false)
}

/// ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]: pops up to `count`
/// members from the first non-empty sorted set and answers
/// `[key, [[member, score]...]]`, or the null array if every set is empty.
pub(super) fn zmpop<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let (keys, max, count) = mpop_args(c, 1)?;
    if !mpop_first(c, keys, max, count)? {
        c.out.null_array();
    }
    Ok(())
}

/// ZMSCORE key member [member ...]: a double or null per member.
pub(super) fn zmscore<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let blob = c.load(c.arg(1), Kind::ZSet)?.unwrap_or_default();
    let entries = entries_of(&blob)?;
    c.out.array(c.argc() - 2);
    for i in 2..c.argc() {
        match entries.iter().find(|e| e.1 == c.arg(i)) {
            Some(e) => c.out.double(e.0),
            None => c.out.null(),
        }
    }
    Ok(())
}

/// ZRANDMEMBER key [count [WITHSCORES]], as HRANDFIELD.
pub(super) fn zrandmember<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let count = random_count(c, b"withscores")?;
    let Some(blob) = c.load(c.arg(1), Kind::ZSet)? else {
        if count.is_some() {
            c.out.array(0)
        } else {
            c.out.null()
        }
        return Ok(());
    };
    let entries = entries_of(&blob)?;
    let Some((n, withscores)) = count else {
        let at = c.server.random_below(entries.len() as u64) as usize;
        c.out.bulk(entries[at].1);
        return Ok(());
    };
    let sizes: Vec<u64> = entries.iter().map(|e| e.1.len() as u64 + if withscores { 24 } else { 0 }).collect();
    let picked = random_picks(c.server, &sizes, n)?;
    let picked: Vec<(f64, &[u8])> = picked.iter().map(|&i| entries[i]).collect();
    if withscores {
        reply_pairs(c, &picked, |e| e.1, |out, e| out.double(e.0));
    } else {
        c.out.array(picked.len());
        for e in picked {
            c.out.bulk(e.1);
        }
    }
    Ok(())
}

/// ZSCAN key cursor [MATCH pattern] [COUNT count], over the members in
/// byte order, scores as bulk strings as Redis 7.0 answers them: from a
/// listpack (at most 128 members of at most 64 bytes), which keeps an
/// integral score within ±2^62 as an integer (`double2ll`), that integer;
/// otherwise `%.17g`.
pub(super) fn zscan<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let cursor = parse_cursor(c.arg(2)).ok_or_else(|| Fail::err("invalid cursor"))?;
    let Some(blob) = c.load(c.arg(1), Kind::ZSet)? else {
        c.out.array(2);
        c.out.bulk(b"0");
        c.out.array(0);
        return Ok(());
    };
    let entries = entries_of(&blob)?;
    let listpack = entries.len() <= 128 && entries.iter().all(|(_, m)| m.len() <= 64);
    const HALF_LLONG_MAX: f64 = (i64::MAX / 2) as f64;
    let mut items: Vec<(&[u8], Vec<u8>)> = entries
        .into_iter()
        .map(|(s, m)| {
            let mut text = Vec::new();
            if listpack && (-HALF_LLONG_MAX..=HALF_LLONG_MAX).contains(&s) && s == (s as i64) as f64 {
                text.extend_from_slice((s as i64).to_string().as_bytes());
            } else {
                pmwire_resp::numbers::format_double(s, &mut text);
            }
            (m, text)
        })
        .collect();
    items.sort_unstable_by(|a, b| a.0.cmp(b.0));
    scan_pairs(c, cursor, &items)
}

/// Which operation ZUNION / ZINTER / ZDIFF (and their STORE forms) make.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum ZOp {
    Union,
    Inter,
    Diff,
    /// ZINTERCARD: the intersection's size, up to a LIMIT.
    InterCard,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

/// Redis's `zunionInterAggregate`: a sum that is NaN (inf + -inf) is 0.
fn aggregate(target: &mut f64, val: f64, how: Aggregate) {
    match how {
        Aggregate::Sum => {
            *target += val;
            if target.is_nan() {
                *target = 0.0;
            }
        }
        Aggregate::Min => *target = if val < *target { val } else { *target },
        Aggregate::Max => *target = if val > *target { val } else { *target },
    }
}

/// One input of a set operation: its entries (a plain set's members
/// score 1) and its weight.
struct Source<'b> {
    entries: Vec<(f64, &'b [u8])>,
    weight: f64,
}

/// Loads the `n` input keys from argument `from`: sorted sets or sets,
/// WRONGTYPE for anything else (checked before the options, as Redis).
fn load_inputs<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    from: usize,
    n: usize,
) -> Result<Vec<Option<(Kind, Vec<u8>)>>, Fail> {
    let mut out = Vec::with_capacity(n);
    for i in from..from + n {
        let key = c.arg(i);
        let kind = match c.ks.get(key) {
            None => None,
            Some(s) if s.kind == Kind::ZSet || s.kind == Kind::Set => Some(s.kind),
            Some(_) => return Err(Fail::WrongType),
        };
        out.push(match kind {
            Some(kind) => Some((kind, c.load(key, kind)?.expect("the key was just found"))),
            None => None,
        });
    }
    Ok(out)
}

fn decode_input(loaded: &Option<(Kind, Vec<u8>)>) -> Result<Vec<(f64, &[u8])>, Fail> {
    match loaded {
        None => Ok(Vec::new()),
        Some((Kind::ZSet, blob)) => entries_of(blob),
        Some((_, blob)) => {
            let mut members = Vec::new();
            crate::blob::decode_set(blob, &mut members)?;
            Ok(members.into_iter().map(|m| (1.0, m)).collect())
        }
    }
}

/// Options after the keys: WEIGHTS, AGGREGATE, WITHSCORES, LIMIT.
struct SetOpOpts {
    weights: Vec<f64>,
    aggregate: Aggregate,
    withscores: bool,
    limit: i64,
}

fn parse_setop_opts<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &Ctx<'_, '_, K, S>,
    mut j: usize,
    n: usize,
    op: ZOp,
    store: bool,
) -> Result<SetOpOpts, Fail> {
    let mut o = SetOpOpts { weights: vec![1.0; n], aggregate: Aggregate::Sum, withscores: false, limit: 0 };
    let combines = op == ZOp::Union || op == ZOp::Inter;
    while j < c.argc() {
        let remaining = c.argc() - j;
        let a = c.arg(j);
        let is = |w: &[u8]| a.eq_ignore_ascii_case(w);
        if combines && remaining > n && is(b"weights") {
            for (i, w) in o.weights.iter_mut().enumerate() {
                *w = parse_score(c.arg(j + 1 + i)).ok_or_else(|| Fail::err("weight value is not a float"))?;
            }
            j += 1 + n;
        } else if combines && remaining >= 2 && is(b"aggregate") {
            let v = c.arg(j + 1);
            o.aggregate = match () {
                _ if v.eq_ignore_ascii_case(b"sum") => Aggregate::Sum,
                _ if v.eq_ignore_ascii_case(b"min") => Aggregate::Min,
                _ if v.eq_ignore_ascii_case(b"max") => Aggregate::Max,
                _ => return Err(Fail::Syntax),
            };
            j += 2;
        } else if !store && op != ZOp::InterCard && is(b"withscores") {
            o.withscores = true;
            j += 1;
        } else if op == ZOp::InterCard && remaining >= 2 && is(b"limit") {
            o.limit = c.positive_arg(j + 1, "LIMIT can't be negative")?;
            j += 2;
        } else {
            return Err(Fail::Syntax);
        }
    }
    Ok(o)
}

/// Redis 7.0's `zunionInterDiffGenericCommand` over decoded inputs: the
/// result sorted as a sorted set, or (ZINTERCARD) only counted.
fn combine<'b>(mut srcs: Vec<Source<'b>>, op: ZOp, how: Aggregate, limit: usize) -> Vec<(f64, &'b [u8])> {
    if op != ZOp::Diff {
        // Redis sorts the inputs by size (a stable sort in glibc), which
        // fixes the order of the additions.
        srcs.sort_by_key(|s| s.entries.len());
    }
    // Each input's scores by member, for the lookups of ZINTER and ZDIFF.
    let maps: Vec<std::collections::HashMap<&[u8], f64>> = if op == ZOp::Union {
        Vec::new()
    } else {
        srcs.iter().map(|s| s.entries.iter().map(|&(score, m)| (m, score)).collect()).collect()
    };
    let find = |i: usize, m: &[u8]| maps[i].get(m).copied();
    let mut out: Vec<(f64, &[u8])> = Vec::new();
    match op {
        ZOp::Union => {
            let mut at: std::collections::HashMap<&[u8], usize> = std::collections::HashMap::new();
            for s in &srcs {
                for &(score, m) in &s.entries {
                    let mut v = s.weight * score;
                    if v.is_nan() {
                        v = 0.0;
                    }
                    match at.get(m) {
                        Some(&i) => aggregate(&mut out[i].0, v, how),
                        None => {
                            at.insert(m, out.len());
                            out.push((v, m));
                        }
                    }
                }
            }
        }
        ZOp::Inter | ZOp::InterCard => {
            let Some((first, rest)) = srcs.split_first() else { return out };
            for &(score, m) in &first.entries {
                let mut total = first.weight * score;
                if total.is_nan() {
                    total = 0.0;
                }
                let all = rest.iter().enumerate().all(|(i, s)| match find(i + 1, m) {
                    Some(v) => {
                        aggregate(&mut total, v * s.weight, how);
                        true
                    }
                    None => false,
                });
                if all {
                    out.push((total, m));
                    if op == ZOp::InterCard && limit > 0 && out.len() >= limit {
                        break;
                    }
                }
            }
        }
        ZOp::Diff => {
            let Some((first, rest)) = srcs.split_first() else { return out };
            out = first.entries.iter().copied().filter(|e| (1..=rest.len()).all(|i| find(i, e.1).is_none())).collect();
        }
    }
    out.sort_by(|a, b| zcmp(*a, *b));
    out
}

/// ZUNION ZINTER ZDIFF numkeys key... (WITHSCORES), their STORE forms
/// (destination first), and ZINTERCARD numkeys key... [LIMIT n].
pub(super) fn zsetop<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    op: ZOp,
    store: bool,
) -> Res {
    let at = if store { 2 } else { 1 };
    let n = c.int_arg(at)?;
    if n < 1 {
        let mut buf = [0u8; 32];
        let name = String::from_utf8_lossy(super::lower(c.arg(0), &mut buf)).into_owned();
        return Err(Fail::err(&format!("at least 1 input key is needed for '{name}' command")));
    }
    if n > (c.argc() - at - 1) as i64 {
        return Err(Fail::Syntax);
    }
    let n = n as usize;
    let loaded = load_inputs(c, at + 1, n)?;
    let o = parse_setop_opts(c, at + 1 + n, n, op, store)?;
    let mut srcs = Vec::with_capacity(n);
    for (l, &weight) in loaded.iter().zip(&o.weights) {
        srcs.push(Source { entries: decode_input(l)?, weight });
    }
    let limit = usize::try_from(o.limit).unwrap_or(usize::MAX);
    let mut result = combine(srcs, op, o.aggregate, limit);
    if op == ZOp::InterCard {
        c.out.integer(result.len() as i64);
    } else if store {
        // Stored as ZADD stores: a zero score is +0.
        for e in &mut result {
            e.0 = if e.0 == 0.0 { 0.0 } else { e.0 };
        }
        c.store_collection(c.arg(1), Kind::ZSet, &result, encode_zset, Expiry::Clear)?;
        c.out.integer(result.len() as i64);
    } else {
        emit(c, &result, o.withscores);
    }
    Ok(())
}
