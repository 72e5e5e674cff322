//! Hash commands: HSET HMSET HGET HMGET HGETALL HDEL HEXISTS HLEN, over the
//! hash blob of [`crate::blob`] (fields in insertion order; a write rewrites
//! the key's blob; an emptied hash deletes its key).

use super::{Ctx, Fail, Res};
use crate::blob::{decode_hash, encode_hash};
use crate::keyspace::{Keyspace, Kind, ValueSource};
use crate::reply::ReplySink;

fn store<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, key: &[u8], entries: &[(&[u8], &[u8])]) -> Res {
    if entries.is_empty() {
        c.ks.delete(key)?;
        return Ok(());
    }
    let mut blob = Vec::new();
    encode_hash(entries, &mut blob);
    c.ks.set(key, Kind::Hash, ValueSource::Owned(blob))?;
    Ok(())
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
