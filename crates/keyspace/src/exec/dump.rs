//! DUMP and RESTORE, as Redis 7.0.15's `cluster.c` serves them, with
//! payloads in Redis's own format ([`crate::rdb`]), so keys move between
//! redis-server and pmwire either way.
//!
//! DUMP writes a value in the encoding Redis would hold it in, as OBJECT
//! ENCODING answers it ([`super::encoding`]: a listpack or a hashtable
//! hash, an intset or a hashtable set...), and a list's nodes as
//! `list-max-listpack-size` cuts them; see [`crate::rdb`] for where the
//! bytes cannot equal Redis's and why.
//!
//! RESTORE checks in Redis's order (options, then BUSYKEY, then the TTL,
//! then the payload) and stores the value through the ordinary write path
//! (a collection chunked past the blob limits, a stream as header, nodes
//! and group records): it is as durable and failure-atomic as any write,
//! inside MULTI and scripts too. `IDLETIME` and `FREQ` are checked as
//! Redis checks them and then change nothing: pmwire keeps no LRU clock or
//! LFU counter per key (OBJECT IDLETIME and OBJECT FREQ are not served),
//! so there is nothing for them to set.

use super::encoding::redis_encoding;
use super::notify::ev;
use super::{Ctx, Fail, Res};
use crate::blob;
use crate::rdb::{self, Value};
use crate::store::{Expiry, Keyspace, Kind, ValueSource};
use pmwire_resp::reply::ReplySink;

type C<'a, 'b, 'r, K, S> = &'a mut Ctx<'b, 'r, K, S>;

/// `list-max-listpack-size` as CONFIG SET last set it.
fn list_fill<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, '_, K, S>) -> i64 {
    let i = super::ENCODING_PARAMETERS.iter().position(|p| p.name == "list-max-listpack-size").expect("a known parameter");
    c.server.config.encoding_parameters[i]
}

/// DUMP key: the payload, or nil for a missing key.
pub(super) fn dump<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let key = c.arg(1);
    let Some(stored) = c.ks.get(key) else {
        c.out.null();
        return Ok(());
    };
    let kind = stored.kind;
    let payload = match kind {
        Kind::String => {
            let mut v = Vec::with_capacity(stored.len as usize);
            c.ks.read(&stored.value, &mut v);
            rdb::dump_string(&v)
        }
        Kind::Stream => {
            let mut bytes = Vec::with_capacity(stored.len as usize);
            c.ks.read(&stored.value, &mut bytes);
            let h = crate::stream::Header::decode(&bytes).map_err(|e| Fail::Text(format!("ERR stored value is corrupt: {e}")))?;
            rdb::dump_stream(&super::streams::snapshot(c.ks, &h)?)
        }
        Kind::List => {
            let blob = c.load(key, kind)?.unwrap_or_default();
            let mut items = Vec::new();
            blob::decode_list(&blob, &mut items)?;
            rdb::dump_list(&items, list_fill(c))
        }
        Kind::Set => {
            let compact = redis_encoding(c, key, kind, stored.len)? == "intset";
            let blob = c.load(key, kind)?.unwrap_or_default();
            let mut members = Vec::new();
            blob::decode_set(&blob, &mut members)?;
            rdb::dump_set(&members, compact)
        }
        Kind::Hash => {
            let compact = redis_encoding(c, key, kind, stored.len)? == "listpack";
            let blob = c.load(key, kind)?.unwrap_or_default();
            let mut pairs = Vec::new();
            blob::decode_hash(&blob, &mut pairs)?;
            rdb::dump_hash(&pairs, compact)
        }
        Kind::ZSet => {
            let compact = redis_encoding(c, key, kind, stored.len)? == "listpack";
            let blob = c.load(key, kind)?.unwrap_or_default();
            let mut entries = Vec::new();
            blob::decode_zset(&blob, &mut entries)?;
            rdb::dump_zset(&entries, compact)
        }
    };
    c.out.bulk(&payload);
    Ok(())
}

/// RESTORE's options after the payload.
struct Options {
    replace: bool,
    absttl: bool,
}

/// Parses `[REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]` as
/// `restoreCommand` does (IDLETIME and FREQ exclude each other).
fn options<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, '_, K, S>) -> Result<Options, Fail> {
    let mut o = Options { replace: false, absttl: false };
    let (mut idle, mut freq) = (false, false);
    let mut j = 4;
    while j < c.argc() {
        let additional = c.argc() - j - 1;
        let opt = c.arg(j);
        if opt.eq_ignore_ascii_case(b"replace") {
            o.replace = true;
        } else if opt.eq_ignore_ascii_case(b"absttl") {
            o.absttl = true;
        } else if opt.eq_ignore_ascii_case(b"idletime") && additional >= 1 && !freq {
            if c.int_arg(j + 1)? < 0 {
                return Err(Fail::err("Invalid IDLETIME value, must be >= 0"));
            }
            idle = true;
            j += 1;
        } else if opt.eq_ignore_ascii_case(b"freq") && additional >= 1 && !idle {
            if !(0..=255).contains(&c.int_arg(j + 1)?) {
                return Err(Fail::err("Invalid FREQ value, must be >= 0 and <= 255"));
            }
            freq = true;
            j += 1;
        } else {
            return Err(Fail::Syntax);
        }
        j += 1;
    }
    Ok(o)
}

/// RESTORE key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds]
/// [FREQ frequency].
pub(super) fn restore<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let o = options(c)?;
    let key = c.arg(1);
    let exists = c.ks.get(key).is_some();
    if !o.replace && exists {
        return Err(Fail::Text("BUSYKEY Target key name already exists.".into()));
    }
    let ttl = c.int_arg(2)?;
    if ttl < 0 {
        return Err(Fail::err("Invalid TTL value, must be >= 0"));
    }
    let value = rdb::parse(c.arg(3)).map_err(|e| Fail::Text(e.to_string()))?;
    let deadline = match ttl {
        0 => None,
        t => {
            let now = c.now_ms();
            let at = if o.absttl { t } else { t.saturating_add(now) };
            // Redis's checkAlreadyExpired: the key is gone at once (REPLACE
            // deleted the old one), and the reply is OK all the same.
            if at <= now {
                if exists {
                    c.ks.delete(key)?;
                    c.notify(ev::DEL, key);
                }
                c.out.ok();
                return Ok(());
            }
            Some(at)
        }
    };
    let expiry = deadline.map_or(Expiry::Clear, |at| Expiry::At(at as u64));
    if exists {
        c.ks.delete(key)?;
    }
    store(c, key, value, expiry)?;
    c.notify(ev::NEW, key);
    c.notify(ev::RESTORE, key);
    c.out.ok();
    Ok(())
}

/// Writes a decoded value at `key` (absent now) through the ordinary
/// write path.
fn store<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, key: &[u8], value: Value, expiry: Expiry) -> Res {
    match value {
        Value::String(v) => {
            c.check_fits(key, v.len() as u64)?;
            c.ks.put(key, Kind::String, ValueSource::Owned(v), expiry)?;
            Ok(())
        }
        Value::List(items) => {
            let items: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
            c.store_collection(key, Kind::List, &items, blob::encode_list, expiry)
        }
        Value::Set(members) => {
            let mut members: Vec<&[u8]> = members.iter().map(Vec::as_slice).collect();
            members.sort_unstable();
            c.store_collection(key, Kind::Set, &members, blob::encode_set, expiry)
        }
        Value::Hash(pairs) => {
            let pairs: Vec<(&[u8], &[u8])> = pairs.iter().map(|(f, v)| (f.as_slice(), v.as_slice())).collect();
            c.store_collection(key, Kind::Hash, &pairs, blob::encode_hash, expiry)
        }
        Value::ZSet(entries) => {
            // The blob keeps -0 as 0, as Redis's listpack does.
            let mut entries: Vec<(f64, &[u8])> = entries.iter().map(|(s, m)| (if *s == 0.0 { 0.0 } else { *s }, m.as_slice())).collect();
            entries.sort_unstable_by(|a, b| blob::zcmp(*a, *b));
            c.store_collection(key, Kind::ZSet, &entries, blob::encode_zset, expiry)
        }
        Value::Stream(s) => {
            c.check_fits(key, crate::stream::HEADER_BYTES as u64)?;
            super::streams::restore_stream(c.ks, key, &s, expiry)
        }
    }
}
