//! String commands: GET SET MGET MSET DEL EXISTS INCR DECR INCRBY DECRBY
//! INCRBYFLOAT APPEND STRLEN SETNX GETSET GETDEL MSETNX SETRANGE GETRANGE SUBSTR SETEX
//! PSETEX GETEX. Values given in a command are stored as
//! [`ValueSource::Arg`] (zero-copy for the server); computed ones as
//! [`ValueSource::Owned`].
//!
//! Deadlines as Redis 7.0 keeps them: SET (without KEEPTTL), SETEX,
//! GETSET, MSET and MSETNX replace the key's deadline; APPEND, INCR and
//! its kin, and SETRANGE change the value in place and keep it.

use super::notify::ev;
use super::{Ctx, Fail, Res};
use crate::store::{Expiry, Keyspace, Kind, ValueSource};
use pmwire_resp::numbers::parse_i64;
use pmwire_resp::reply::ReplySink;

pub(super) fn get<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    match c.get_kind(c.arg(1), Kind::String)? {
        Some(s) => c.out.stored(&s.value, s.len),
        None => c.out.null(),
    }
    Ok(())
}

#[derive(Default)]
struct SetFlags {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    expire: Option<(usize, bool)>, // (argument index, seconds?)
    expire_kind: u8,               // 0 none, b'e' EX, b'p' PX, b'E' EXAT, b'P' PXAT
}

/// Redis's `parseExtendedStringArgumentsOrReply`: SET's options from
/// argument 3 (`getex`: false), GETEX's from argument 2 (`getex`: true).
fn parse_set_flags<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &Ctx<'_, '_, K, S>,
    getex: bool,
) -> Result<SetFlags, Fail> {
    let mut f = SetFlags::default();
    let mut j = if getex { 2 } else { 3 };
    while j < c.argc() {
        let opt = c.arg(j);
        let has_next = j + 1 < c.argc();
        let is = |w: &[u8]| opt.eq_ignore_ascii_case(w);
        let no_expire_but = |k: u8| f.expire_kind == 0 || f.expire_kind == k;
        if is(b"nx") && !f.xx && !getex {
            f.nx = true;
        } else if is(b"xx") && !f.nx && !getex {
            f.xx = true;
        } else if is(b"get") && !getex {
            f.get = true;
        } else if is(b"keepttl") && f.expire_kind == 0 && !getex {
            f.keepttl = true;
        } else if is(b"persist") && f.expire_kind == 0 && getex {
            f.persist = true;
        } else if (is(b"ex") || is(b"px") || is(b"exat") || is(b"pxat")) && has_next && !f.keepttl && !f.persist {
            let k = match opt.len() {
                2 if is(b"ex") => b'e',
                2 => b'p',
                _ if is(b"exat") => b'E',
                _ => b'P',
            };
            if !no_expire_but(k) {
                return Err(Fail::Syntax);
            }
            f.expire_kind = k;
            f.expire = Some((j + 1, k == b'e' || k == b'E'));
            j += 1;
        } else {
            return Err(Fail::Syntax);
        }
        j += 1;
    }
    Ok(f)
}

/// Redis's `getExpireMillisecondsOrReply`: argument `i` as a deadline in
/// ms since the Unix epoch (positive; `seconds`: times 1000; `relative`:
/// plus now), every overflow refused as `invalid expire time in '{name}'`.
fn deadline_arg<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &Ctx<'_, '_, K, S>,
    i: usize,
    seconds: bool,
    relative: bool,
) -> Result<u64, Fail> {
    let name = c.arg(0).to_ascii_lowercase();
    let invalid = || Fail::err(&format!("invalid expire time in '{}' command", String::from_utf8_lossy(&name)));
    let t = c.int_arg(i)?;
    if t <= 0 {
        return Err(invalid());
    }
    let ms = if seconds { t.checked_mul(1000).ok_or_else(invalid)? } else { t };
    let ms = if relative { ms.checked_add(c.now_ms()).ok_or_else(invalid)? } else { ms };
    assert!(ms > 0);
    Ok(ms as u64)
}

/// The deadline SET's or GETEX's EX/PX/EXAT/PXAT option gives, if any.
fn flags_deadline<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &Ctx<'_, '_, K, S>,
    f: &SetFlags,
) -> Result<Option<u64>, Fail> {
    match f.expire {
        Some((i, seconds)) => Ok(Some(deadline_arg(c, i, seconds, matches!(f.expire_kind, b'e' | b'p'))?)),
        None => Ok(None),
    }
}

/// SET key value [NX|XX] [GET] [EX|PX|EXAT|PXAT t|KEEPTTL]: a deadline
/// already past is stored as given (the key is expired at once), as
/// Redis 7.0 does.
pub(super) fn set<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let f = parse_set_flags(c, false)?;
    let expiry = match flags_deadline(c, &f)? {
        Some(ms) => Expiry::At(ms),
        None if f.keepttl => Expiry::Keep,
        None => Expiry::Clear,
    };
    let key = c.arg(1);
    // A plain SET needs nothing of the old value: no lookup (no value handle to hold).
    let old = if f.get {
        c.get_kind(key, Kind::String)?
    } else if f.nx || f.xx {
        c.ks.get(key)
    } else {
        None
    };
    let found = old.is_some();
    if (f.nx && found) || (f.xx && !found) {
        match (&old, f.get) {
            (Some(s), true) => c.out.stored(&s.value, s.len),
            _ => c.out.null(),
        }
        return Ok(());
    }
    c.ks.put(key, Kind::String, ValueSource::Arg(c.req.arg_ref(2)), expiry)?;
    c.notify(ev::SET, key);
    if matches!(expiry, Expiry::At(_)) {
        c.notify(ev::EXPIRE, key);
    }
    if f.get {
        match old {
            Some(s) => c.out.stored(&s.value, s.len),
            None => c.out.null(),
        }
    } else {
        c.out.ok();
    }
    Ok(())
}

pub(super) fn mget<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    c.out.array(c.argc() - 1);
    for i in 1..c.argc() {
        match c.ks.get(c.arg(i)) {
            Some(s) if s.kind == Kind::String => c.out.stored(&s.value, s.len),
            _ => c.out.null(),
        }
    }
    Ok(())
}

pub(super) fn mset<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    if c.argc().is_multiple_of(2) {
        return Err(Fail::err("wrong number of arguments for 'mset' command"));
    }
    check_sizes(c)?;
    for i in (1..c.argc()).step_by(2) {
        c.ks.put(c.arg(i), Kind::String, ValueSource::Arg(c.req.arg_ref(i + 1)), Expiry::Clear)?;
    }
    c.out.ok();
    Ok(())
}

pub(super) fn del<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let mut n = 0;
    for i in 1..c.argc() {
        if c.ks.delete(c.arg(i))? {
            n += 1;
        }
    }
    c.out.integer(n);
    Ok(())
}

pub(super) fn exists<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let mut n = 0;
    for i in 1..c.argc() {
        if c.ks.get(c.arg(i)).is_some() {
            n += 1;
        }
    }
    c.out.integer(n);
    Ok(())
}

pub(super) fn incrby<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let by = c.int_arg(2)?;
    incr_by(c, by)
}

pub(super) fn decrby<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let by = c.int_arg(2)?;
    if by == i64::MIN {
        return Err(Fail::err("decrement would overflow"));
    }
    incr_by(c, -by)
}

pub(super) fn incr_by<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, by: i64) -> Res {
    let key = c.arg(1);
    let old = match c.load(key, Kind::String)? {
        Some(bytes) => parse_i64(&bytes).ok_or(Fail::NotInteger)?,
        None => 0,
    };
    let Some(new) = old.checked_add(by) else {
        return Err(Fail::err("increment or decrement would overflow"));
    };
    c.ks.set(key, Kind::String, ValueSource::Owned(new.to_string().into_bytes()))?;
    c.out.integer(new);
    Ok(())
}

/// INCRBYFLOAT key increment: Redis's `long double` sum (x87 extended,
/// [`crate::extended`]), stored and answered as `%.17Lf` without trailing
/// zeros; the key's deadline is kept.
pub(super) fn incrbyfloat<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    use crate::extended::{add, format_human, parse, Ext};
    let key = c.arg(1);
    let old = match c.load(key, Kind::String)? {
        Some(bytes) => parse(&bytes).ok_or(Fail::NotFloat)?,
        None => Ext::Finite { negative: false, m: 0, q: 0 },
    };
    let by = parse(c.arg(2)).ok_or(Fail::NotFloat)?;
    let sum = match add(old, by) {
        Some(sum @ Ext::Finite { .. }) => sum,
        _ => return Err(Fail::err("increment would produce NaN or Infinity")),
    };
    let text = format_human(sum).into_bytes();
    c.ks.set(key, Kind::String, ValueSource::Owned(text.clone()))?;
    c.out.bulk(&text);
    Ok(())
}

pub(super) fn append<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let key = c.arg(1);
    let add = c.req.arg_ref(2);
    let total = match c.load(key, Kind::String)? {
        None => {
            c.ks.set(key, Kind::String, ValueSource::Arg(add))?;
            add.len()
        }
        Some(mut v) => {
            if (v.len() + add.len()) as u64 > c.server.config.limits.max_bulk_bytes {
                return Err(Fail::err("string exceeds maximum allowed size (proto-max-bulk-len)"));
            }
            v.extend_from_slice(add.bytes());
            let n = v.len();
            c.ks.set(key, Kind::String, ValueSource::Owned(v))?;
            c.server.raw_strings.mark(key, n as u64);
            n
        }
    };
    c.out.integer(total as i64);
    Ok(())
}

pub(super) fn strlen<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let n = c.get_kind(c.arg(1), Kind::String)?.map_or(0, |s| s.len);
    c.out.integer(n as i64);
    Ok(())
}

/// SETNX key value: 1 if set, 0 if the key exists (of any type).
pub(super) fn setnx<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let key = c.arg(1);
    if c.ks.get(key).is_some() {
        c.out.integer(0);
        return Ok(());
    }
    c.ks.put(key, Kind::String, ValueSource::Arg(c.req.arg_ref(2)), Expiry::Clear)?;
    c.out.integer(1);
    Ok(())
}

/// GETSET key value: SET key value GET.
pub(super) fn getset<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let key = c.arg(1);
    let old = c.get_kind(key, Kind::String)?;
    c.ks.put(key, Kind::String, ValueSource::Arg(c.req.arg_ref(2)), Expiry::Clear)?;
    match old {
        Some(s) => c.out.stored(&s.value, s.len),
        None => c.out.null(),
    }
    Ok(())
}

/// GETDEL key: the string, then the key is gone.
pub(super) fn getdel<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let key = c.arg(1);
    match c.get_kind(key, Kind::String)? {
        Some(s) => {
            c.ks.delete(key)?;
            c.out.stored(&s.value, s.len);
        }
        None => c.out.null(),
    }
    Ok(())
}

/// MSETNX key value [key value ...]: all set (1), or none if any key
/// exists (0).
pub(super) fn msetnx<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    if c.argc().is_multiple_of(2) {
        return Err(Fail::err("wrong number of arguments for 'msetnx' command"));
    }
    for i in (1..c.argc()).step_by(2) {
        if c.ks.get(c.arg(i)).is_some() {
            c.out.integer(0);
            return Ok(());
        }
    }
    check_sizes(c)?;
    for i in (1..c.argc()).step_by(2) {
        c.ks.put(c.arg(i), Kind::String, ValueSource::Arg(c.req.arg_ref(i + 1)), Expiry::Clear)?;
    }
    c.out.integer(1);
    Ok(())
}

/// Refuses an MSET-shaped command whose keys or values the store cannot
/// hold, before anything is written.
fn check_sizes<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, '_, K, S>) -> Res {
    let limits = c.ks.limits();
    for i in (1..c.argc()).step_by(2) {
        let (k, v) = (c.arg(i).len() as u64, c.arg(i + 1).len() as u64);
        if k > limits.max_key_bytes {
            return Err(crate::store::StoreError::KeyTooLong { len: k, max: limits.max_key_bytes }.into());
        }
        if v > limits.max_value_bytes {
            return Err(crate::store::StoreError::ValueTooLong { len: v, max: limits.max_value_bytes }.into());
        }
    }
    Ok(())
}

/// SETRANGE key offset value: overwrites from `offset`, zero-padding a
/// shorter (or missing) string; the new length.
pub(super) fn setrange<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let offset = c.int_arg(2)?;
    if offset < 0 {
        return Err(Fail::err("offset is out of range"));
    }
    let key = c.arg(1);
    let add = c.arg(3);
    let old = c.load(key, Kind::String)?;
    if add.is_empty() {
        // Nothing to write: a missing key stays missing.
        c.out.integer(old.map_or(0, |v| v.len() as i64));
        return Ok(());
    }
    let end = (offset as u64).checked_add(add.len() as u64);
    match end {
        Some(end) if end <= c.server.config.limits.max_bulk_bytes => {}
        _ => return Err(Fail::err("string exceeds maximum allowed size (proto-max-bulk-len)")),
    }
    let (offset, end) = (offset as usize, offset as usize + add.len());
    let mut v = old.unwrap_or_default();
    if v.len() < end {
        v.resize(end, 0);
    }
    v[offset..end].copy_from_slice(add);
    let n = v.len();
    c.ks.set(key, Kind::String, ValueSource::Owned(v))?;
    c.server.raw_strings.mark(key, n as u64);
    c.out.integer(n as i64);
    Ok(())
}

/// GETRANGE key start end (and its old name SUBSTR): the bytes between
/// two inclusive offsets, negative ones counted from the end.
pub(super) fn getrange<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let start = c.int_arg(2)?;
    let end = c.int_arg(3)?;
    let Some(v) = c.load(c.arg(1), Kind::String)? else {
        c.out.bulk(b"");
        return Ok(());
    };
    let len = v.len() as i64;
    if start < 0 && end < 0 && start > end {
        c.out.bulk(b"");
        return Ok(());
    }
    let (start, end) = super::shared::clamp_range(start, end, len);
    if len == 0 || start > end {
        c.out.bulk(b"");
    } else {
        c.out.bulk(&v[start as usize..=end as usize]);
    }
    Ok(())
}

/// LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]: the longest
/// common subsequence of two strings (a missing key is ""), its length, or
/// its matching ranges from the last to the first, as Redis 7.0's
/// `lcsCommand` computes them (the same dynamic-programming table, the same
/// walk back, the same limit: a table larger than `proto-max-bulk-len` is
/// refused).
pub(super) fn lcs<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    for key in [c.arg(1), c.arg(2)] {
        if c.ks.get(key).is_some_and(|s| s.kind != Kind::String) {
            return Err(Fail::err("The specified keys must contain string values"));
        }
    }
    let a = c.load(c.arg(1), Kind::String)?.unwrap_or_default();
    let b = c.load(c.arg(2), Kind::String)?.unwrap_or_default();
    let (mut get_len, mut get_idx, mut with_len, mut min_len) = (false, false, false, 0i64);
    let mut j = 3;
    while j < c.argc() {
        let opt = c.arg(j);
        if opt.eq_ignore_ascii_case(b"idx") {
            get_idx = true;
        } else if opt.eq_ignore_ascii_case(b"len") {
            get_len = true;
        } else if opt.eq_ignore_ascii_case(b"withmatchlen") {
            with_len = true;
        } else if opt.eq_ignore_ascii_case(b"minmatchlen") && j + 1 < c.argc() {
            min_len = c.int_arg(j + 1)?.max(0);
            j += 1;
        } else {
            return Err(Fail::Syntax);
        }
        j += 1;
    }
    if get_len && get_idx {
        return Err(Fail::err("If you want both the length and indexes, please just use IDX."));
    }
    let (alen, blen) = (a.len(), b.len());
    let cells = (alen as u64 + 1) * (blen as u64 + 1);
    if cells.saturating_mul(4) > c.server.config.limits.max_bulk_bytes as u64 {
        return Err(Fail::err("Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len"));
    }
    let width = blen + 1;
    let mut table = vec![0u32; cells as usize];
    for i in 1..=alen {
        for j in 1..=blen {
            table[i * width + j] = if a[i - 1] == b[j - 1] {
                table[(i - 1) * width + j - 1] + 1
            } else {
                table[(i - 1) * width + j].max(table[i * width + j - 1])
            };
        }
    }
    let total = table[alen * width + blen] as usize;
    let mut result = vec![0u8; total];
    let mut ranges: Vec<[usize; 5]> = Vec::new();
    let (mut i, mut j, mut idx) = (alen, blen, total);
    let (mut a_start, mut a_end, mut b_start, mut b_end) = (alen, 0, 0, 0);
    while (get_idx || !get_len) && i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            result[idx - 1] = a[i - 1];
            if a_start == alen {
                (a_start, a_end, b_start, b_end) = (i - 1, i - 1, j - 1, j - 1);
            } else if a_start == i && b_start == j {
                a_start -= 1;
                b_start -= 1;
            } else {
                emit = true;
            }
            if a_start == 0 || b_start == 0 {
                emit = true;
            }
            (idx, i, j) = (idx - 1, i - 1, j - 1);
        } else {
            if table[(i - 1) * width + j] > table[i * width + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            emit = a_start != alen;
        }
        let match_len = a_end.wrapping_sub(a_start).wrapping_add(1);
        if emit {
            if min_len == 0 || match_len as i64 >= min_len {
                ranges.push([a_start, a_end, b_start, b_end, match_len]);
            }
            a_start = alen;
        }
    }
    if get_idx {
        c.out.map(2);
        c.out.bulk(b"matches");
        c.out.array(ranges.len());
        for r in &ranges {
            c.out.array(2 + usize::from(with_len));
            c.out.array(2);
            c.out.integer(r[0] as i64);
            c.out.integer(r[1] as i64);
            c.out.array(2);
            c.out.integer(r[2] as i64);
            c.out.integer(r[3] as i64);
            if with_len {
                c.out.integer(r[4] as i64);
            }
        }
        c.out.bulk(b"len");
        c.out.integer(total as i64);
    } else if get_len {
        c.out.integer(total as i64);
    } else {
        c.out.bulk(&result);
    }
    Ok(())
}

/// SETEX key seconds value (`seconds`) / PSETEX key milliseconds value.
pub(super) fn setex<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, seconds: bool) -> Res {
    let ms = deadline_arg(c, 2, seconds, true)?;
    c.ks.put(c.arg(1), Kind::String, ValueSource::Arg(c.req.arg_ref(3)), Expiry::At(ms))?;
    c.notify(ev::SET, c.arg(1));
    c.notify(ev::EXPIRE, c.arg(1));
    c.out.ok();
    Ok(())
}

/// GETEX key [EX|PX|EXAT|PXAT t | PERSIST]: the string, then its deadline
/// changed. Redis 7.0's order: options, the key (nil if missing), its type,
/// then the time; an EXAT/PXAT already past deletes the key.
pub(super) fn getex<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let f = parse_set_flags(c, true)?;
    let key = c.arg(1);
    let Some(stored) = c.get_kind(key, Kind::String)? else {
        c.out.null();
        return Ok(());
    };
    let deadline = flags_deadline(c, &f)?;
    let absolute = matches!(f.expire_kind, b'E' | b'P');
    match deadline {
        Some(ms) if absolute && super::deadline_i64(ms) <= c.now_ms() => {
            c.ks.delete(key)?;
            c.notify(ev::DEL, key);
        }
        Some(ms) => {
            c.ks.set_deadline(key, Some(ms))?;
            c.notify(ev::EXPIRE, key);
        }
        None if f.persist && stored.deadline_ms.is_some() => {
            c.ks.set_deadline(key, None)?;
            c.notify(ev::PERSIST, key);
        }
        None => {}
    }
    // The handle stays readable after the write (the keyspace's contract).
    c.out.stored(&stored.value, stored.len);
    Ok(())
}
