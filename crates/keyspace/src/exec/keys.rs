//! Key commands: RENAME RENAMENX UNLINK TOUCH COPY RANDOMKEY, and expiry:
//! EXPIRE PEXPIRE EXPIREAT PEXPIREAT (NX XX GT LT), TTL PTTL EXPIRETIME
//! PEXPIRETIME PERSIST, and the active sweep ([`active_expire`]). A key's
//! value moves or is copied through the keyspace (read, then written under
//! the new name) with its deadline, as Redis 7.0 carries the TTL.
//!
//! Times are Redis's: `i64` milliseconds since the Unix epoch, every
//! conversion from the wire checked for overflow; a deadline at or before
//! [`Keyspace::now_ms`] deletes the key at once (EXPIRE with a past time
//! answers 1 and deletes, as Redis does).

use super::notify::ev;
use super::{deadline_i64, Ctx, Fail, Res};
use crate::store::{Expiry, Keyspace, Kind, StoreError, Stored, ValueSource};
use pmwire_resp::reply::ReplySink;

/// What one bounded sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Expired keys deleted.
    pub deleted: usize,
    /// More keys were due than the budget allowed (sweep again soon).
    pub more: bool,
}

/// Redis's active expire cycle, bounded: deletes at most `budget` expired
/// keys (earliest deadline first). The server runs it once per event-loop
/// turn, so its cost per turn is bounded whatever the number of keys due;
/// lazy expiry ([`Keyspace::get`]) makes sure no expired key is served
/// meanwhile.
pub fn active_expire<K: Keyspace>(ks: &mut K, budget: usize) -> Result<Sweep, StoreError> {
    active_expire_with(ks, budget, |_| {})
}

/// [`active_expire`], calling `deleted` with each key it deletes.
pub(crate) fn active_expire_with<K: Keyspace>(ks: &mut K, budget: usize, mut deleted: impl FnMut(&[u8])) -> Result<Sweep, StoreError> {
    let due = ks.expired(budget.saturating_add(1));
    let more = due.len() > budget;
    let mut sweep = Sweep { deleted: 0, more };
    for key in due.iter().take(budget) {
        ks.delete(key)?;
        sweep.deleted += 1;
        deleted(key);
    }
    Ok(sweep)
}

/// RENAME key newkey (`nx`: RENAMENX, which keeps an existing newkey).
pub(super) fn rename<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, nx: bool) -> Res {
    let (from, to) = (c.arg(1), c.arg(2));
    let Some(stored) = c.ks.get(from) else {
        return Err(Fail::err("no such key"));
    };
    if from == to {
        if nx {
            c.out.integer(0);
        } else {
            c.out.ok();
        }
        return Ok(());
    }
    if nx && c.ks.get(to).is_some() {
        c.out.integer(0);
        return Ok(());
    }
    // Deleted first, then stored: a chunked collection's header moves alone
    // (the delete's tombstone is lifted by the store, crate::chunked).
    let mut bytes = Vec::with_capacity(stored.len as usize);
    c.ks.read(&stored.value, &mut bytes);
    c.check_fits(to, stored.len)?;
    c.ks.delete(from)?;
    let expiry = stored.deadline_ms.map_or(Expiry::Clear, Expiry::At);
    c.ks.put(to, stored.kind, ValueSource::Owned(bytes), expiry)?;
    // Redis deletes `to` and adds it again: always a new key, first.
    c.notify(ev::NEW, to);
    c.notify(ev::RENAME_FROM, from);
    c.notify(ev::RENAME_TO, to);
    if nx {
        c.out.integer(1);
    } else {
        c.out.ok();
    }
    Ok(())
}

/// Writes the value `stored` holds under `to`, of its kind, with its
/// deadline (RENAME and COPY carry the TTL; `to`'s own is dropped).
fn store_as<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, stored: Stored<K::Value>, to: &[u8]) -> Res {
    let mut bytes = Vec::with_capacity(stored.len as usize);
    c.ks.read(&stored.value, &mut bytes);
    let expiry = stored.deadline_ms.map_or(Expiry::Clear, Expiry::At);
    if stored.kind == Kind::Stream {
        // A copy of a stream gets nodes of its own.
        let h = crate::stream::Header::decode(&bytes).map_err(|e| Fail::Text(format!("ERR stored value is corrupt: {e}")))?;
        return super::streams::copy_stream(c.ks, &h, to, expiry);
    }
    if let Some(h) = crate::chunked::Header::decode(stored.kind, &bytes)? {
        // A copy of a chunked collection gets chunks of its own.
        let blob = super::large::materialise(c.ks, &h)?;
        let cfg = c.server.config.collections;
        return super::large::store_blob(c.ks, to, stored.kind, blob, expiry, &cfg);
    }
    c.ks.put(to, stored.kind, ValueSource::Owned(bytes), expiry)?;
    Ok(())
}

/// RANDOMKEY: a live key drawn uniformly (reservoir sampling over one
/// ordered pass: O(keys), as KEYS is), or nil when there is none.
pub(super) fn randomkey<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    const CHUNK: usize = 4096;
    let (mut seen, mut chosen): (u64, Option<Vec<u8>>) = (0, None);
    let mut after: Option<Vec<u8>> = None;
    loop {
        let mut last = None;
        let server = &mut *c.server;
        let n = c.ks.scan(after.as_deref(), CHUNK, &mut |k, _| {
            seen += 1;
            if server.random_below(seen) == 0 {
                chosen = Some(k.to_vec());
            }
            last = Some(k.to_vec());
        });
        if n < CHUNK {
            break;
        }
        after = last;
    }
    match chosen {
        Some(k) => c.out.bulk(&k),
        None => c.out.null(),
    }
    Ok(())
}

/// The unit and base of an EXPIRE-family command.
#[derive(Debug, Clone, Copy)]
pub(super) struct ExpireCmd {
    /// Seconds (EXPIRE, EXPIREAT) or milliseconds.
    pub seconds: bool,
    /// Relative to now (EXPIRE, PEXPIRE) or absolute.
    pub relative: bool,
}

/// EXPIRE PEXPIRE EXPIREAT PEXPIREAT key time [NX | XX | GT | LT]: 1 if the
/// deadline was set (or the key deleted, for a time already past), 0 if
/// the key is missing or a condition failed. Checks in Redis 7.0's order:
/// options, the integer, its overflow, then the key.
pub(super) fn expire<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, cmd: ExpireCmd) -> Res {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for j in 3..c.argc() {
        let opt = c.arg(j);
        match opt.to_ascii_lowercase().as_slice() {
            b"nx" => nx = true,
            b"xx" => xx = true,
            b"gt" => gt = true,
            b"lt" => lt = true,
            _ => return Err(Fail::err(&format!("Unsupported option {}", c_string(opt)))),
        }
    }
    if nx && (xx || gt || lt) {
        return Err(Fail::err("NX and XX, GT or LT options at the same time are not compatible"));
    }
    if gt && lt {
        return Err(Fail::err("GT and LT options at the same time are not compatible"));
    }
    let name = c.arg(0).to_ascii_lowercase();
    let invalid = || Fail::err(&format!("invalid expire time in '{}' command", String::from_utf8_lossy(&name)));
    let mut when = c.int_arg(2)?;
    if cmd.seconds {
        when = when.checked_mul(1000).ok_or_else(invalid)?;
    }
    let now = c.now_ms();
    if cmd.relative {
        when = when.checked_add(now).ok_or_else(invalid)?;
    }
    let key = c.arg(1);
    let Some(stored) = c.ks.get(key) else {
        c.out.integer(0);
        return Ok(());
    };
    let current = stored.deadline_ms.map(deadline_i64);
    let refused = (nx && current.is_some())
        || (xx && current.is_none())
        || (gt && current.is_none_or(|cur| when <= cur))
        || (lt && current.is_some_and(|cur| when >= cur));
    if refused {
        c.out.integer(0);
        return Ok(());
    }
    if when <= now {
        c.ks.delete(key)?;
        c.notify(ev::DEL, key);
    } else {
        let found = c.ks.set_deadline(key, Some(when as u64))?;
        assert!(found, "a live key looked up in this command");
        c.notify(ev::EXPIRE, key);
    }
    c.out.integer(1);
    Ok(())
}

/// `%s` of a C string: the bytes up to the first NUL.
fn c_string(b: &[u8]) -> String {
    let end = b.iter().position(|&x| x == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// TTL PTTL EXPIRETIME PEXPIRETIME key: -2 for a missing key, -1 for no
/// deadline, else the time left (or the deadline), never below 0, in
/// seconds rounded to nearest or in milliseconds.
pub(super) fn ttl<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    ms: bool,
    absolute: bool,
) -> Res {
    let Some(stored) = c.ks.get(c.arg(1)) else {
        c.out.integer(-2);
        return Ok(());
    };
    let Some(deadline) = stored.deadline_ms.map(deadline_i64) else {
        c.out.integer(-1);
        return Ok(());
    };
    let left = if absolute { deadline } else { deadline.saturating_sub(c.now_ms()) }.max(0);
    // (ttl+500)/1000 as Redis 7.0's build answers it: without wrapping,
    // even within 500 of i64::MAX.
    c.out.integer(if ms { left } else { ((i128::from(left) + 500) / 1000) as i64 });
    Ok(())
}

/// PERSIST key: 1 if a deadline was removed, else 0.
pub(super) fn persist<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let key = c.arg(1);
    let had = c.ks.get(key).is_some_and(|s| s.deadline_ms.is_some());
    if had {
        let found = c.ks.set_deadline(key, None)?;
        assert!(found, "a live key looked up in this command");
        c.notify(ev::PERSIST, key);
    }
    c.out.integer(i64::from(had));
    Ok(())
}

/// TOUCH key [key ...]: how many exist.
pub(super) fn touch<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let n = (1..c.argc()).filter(|&i| c.ks.get(c.arg(i)).is_some()).count();
    c.out.integer(n as i64);
    Ok(())
}

/// COPY source destination [DB destination-db] [REPLACE]. pmwire serves
/// one database, so DB must name it (0).
pub(super) fn copy<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let mut replace = false;
    let mut j = 3;
    while j < c.argc() {
        let opt = c.arg(j);
        if opt.eq_ignore_ascii_case(b"replace") {
            replace = true;
        } else if opt.eq_ignore_ascii_case(b"db") && j + 1 < c.argc() {
            let db = c.int_arg(j + 1)?;
            if i32::try_from(db).is_err() {
                return Err(Fail::err("value is out of range, value must between -2147483648 and 2147483647"));
            }
            if db != 0 {
                return Err(Fail::err("DB index is out of range"));
            }
            j += 1;
        } else {
            return Err(Fail::Syntax);
        }
        j += 1;
    }
    let (from, to) = (c.arg(1), c.arg(2));
    if from == to {
        return Err(Fail::err("source and destination objects are the same"));
    }
    let Some(stored) = c.ks.get(from) else {
        c.out.integer(0);
        return Ok(());
    };
    if !replace && c.ks.get(to).is_some() {
        c.out.integer(0);
        return Ok(());
    }
    store_as(c, stored, to)?;
    c.notify(ev::NEW, to);
    c.notify(ev::COPY_TO, to);
    c.out.integer(1);
    Ok(())
}
