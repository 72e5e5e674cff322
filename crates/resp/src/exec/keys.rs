//! Key commands: RENAME RENAMENX UNLINK TOUCH COPY. A key's value moves or
//! is copied through the keyspace (read, then written under the new name).

use super::{Ctx, Fail, Res};
use crate::keyspace::{Keyspace, Stored, ValueSource};
use crate::reply::ReplySink;

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
    store_as(c, stored, to)?;
    c.ks.delete(from)?;
    if nx {
        c.out.integer(1);
    } else {
        c.out.ok();
    }
    Ok(())
}

/// Writes the value `stored` holds under `to`, of its kind.
fn store_as<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, stored: Stored<K::Value>, to: &[u8]) -> Res {
    let mut bytes = Vec::with_capacity(stored.len as usize);
    c.ks.read(&stored.value, &mut bytes);
    c.ks.set(to, stored.kind, ValueSource::Owned(bytes))?;
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
    c.out.integer(1);
    Ok(())
}
