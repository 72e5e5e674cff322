//! Commands on chunked collections ([`crate::chunked`]): the fast paths
//! whose cost does not grow with the collection (HSET HMSET HGET HMGET HDEL
//! HEXISTS HLEN, SADD SREM SISMEMBER SMISMEMBER SCARD, ZADD (every option)
//! ZREM ZSCORE ZCARD, LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP without count, LLEN
//! LINDEX LRANGE), and the two conversions every other command goes through:
//! [`materialise`] (a chunked collection read as one blob, for `Ctx::load`)
//! and [`store_blob`] (a collection written whole, chunked when it is over
//! [`ChunkConfig`]'s limits).
//!
//! A fast path runs only when the key holds a chunked header of the
//! command's kind and the arguments are in the shape it serves; otherwise
//! [`fast`] answers `None` and the command runs its ordinary (blob) code,
//! which produces every error and option. A command's chunk writes and its
//! header write go to the same batch; an error after a write is undone by
//! the executor's `abort_command`.

use super::shared::{zadd_flags, ZaddFlags};
use super::{Ctx, Fail, Res};
use crate::blob::{
    decode_hash, decode_list, decode_set, decode_zset, encode_hash, encode_list, encode_set, encode_zset, zcmp,
};
use crate::chunked::{chunk_key, list_index, member_hash, next_generation, ChunkConfig, Header};
use crate::store::{Expiry, Keyspace, Kind, ValueSource};
use pmwire_resp::reply::ReplySink;

/// A bucket's members: (member, payload): a hash's value, a sorted set's
/// score as `f64` bits (8 bytes little-endian), nothing for a set.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

impl From<crate::chunked::HeaderError> for Fail {
    fn from(e: crate::chunked::HeaderError) -> Self {
        Fail::Text(format!("ERR stored value is corrupt: {e}"))
    }
}

fn corrupt(what: &str) -> Fail {
    Fail::Text(format!("ERR stored value is corrupt: {what}"))
}

/// The chunked header at `key` if it holds one of `kind` (`None` for a
/// missing key, a blob, or another kind).
pub(super) fn header<K: Keyspace + ?Sized>(ks: &mut K, key: &[u8], kind: Kind) -> Result<Option<Header>, Fail> {
    let Some(s) = ks.get(key) else { return Ok(None) };
    if s.kind != kind || s.len != crate::chunked::HEADER_BYTES as u64 {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(crate::chunked::HEADER_BYTES);
    ks.read(&s.value, &mut bytes);
    Ok(Header::decode(kind, &bytes)?)
}

fn write_header<K: Keyspace + ?Sized>(ks: &mut K, key: &[u8], h: &Header) -> Res {
    ks.put(key, h.kind, ValueSource::Owned(h.encode()), Expiry::Keep)?;
    Ok(())
}

fn read_chunk<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, index: u64) -> Option<Vec<u8>> {
    let v = ks.internal_get(&chunk_key(gen, index))?;
    let mut out = Vec::new();
    ks.read(&v, &mut out);
    Some(out)
}

fn decode_bucket(kind: Kind, bytes: &[u8]) -> Result<Entries, Fail> {
    let owned = |b: &[u8]| b.to_vec();
    Ok(match kind {
        Kind::Hash => {
            let mut e = Vec::new();
            decode_hash(bytes, &mut e)?;
            e.into_iter().map(|(f, v)| (owned(f), owned(v))).collect()
        }
        Kind::Set => {
            let mut e = Vec::new();
            decode_set(bytes, &mut e)?;
            e.into_iter().map(|m| (owned(m), Vec::new())).collect()
        }
        Kind::ZSet => {
            let mut e = Vec::new();
            decode_zset(bytes, &mut e)?;
            e.into_iter().map(|(s, m)| (owned(m), s.to_bits().to_le_bytes().to_vec())).collect()
        }
        Kind::List | Kind::String | Kind::Stream => unreachable!("not a hashed kind"),
    })
}

fn score_of(payload: &[u8]) -> f64 {
    f64::from_bits(u64::from_le_bytes(payload.try_into().expect("a score is 8 bytes")))
}

fn encode_bucket(kind: Kind, entries: &Entries) -> Vec<u8> {
    let mut out = Vec::new();
    match kind {
        Kind::Hash => {
            let e: Vec<(&[u8], &[u8])> = entries.iter().map(|(f, v)| (&f[..], &v[..])).collect();
            encode_hash(&e, &mut out);
        }
        Kind::Set => {
            let mut e: Vec<&[u8]> = entries.iter().map(|(m, _)| &m[..]).collect();
            e.sort_unstable();
            encode_set(&e, &mut out);
        }
        Kind::ZSet => {
            let mut e: Vec<(f64, &[u8])> = entries.iter().map(|(m, s)| (score_of(s), &m[..])).collect();
            e.sort_by(|a, b| zcmp(*a, *b));
            encode_zset(&e, &mut out);
        }
        Kind::List | Kind::String | Kind::Stream => unreachable!("not a hashed kind"),
    }
    out
}

fn load_bucket<K: Keyspace + ?Sized>(ks: &mut K, h: &Header, b: u64) -> Result<Entries, Fail> {
    match read_chunk(ks, h.gen, b) {
        Some(bytes) => decode_bucket(h.kind, &bytes),
        None => Ok(Vec::new()),
    }
}

fn store_bucket<K: Keyspace + ?Sized>(ks: &mut K, h: &Header, b: u64, entries: &Entries) -> Res {
    if entries.is_empty() {
        ks.internal_delete(&chunk_key(h.gen, b))?;
    } else {
        ks.internal_put(&chunk_key(h.gen, b), &encode_bucket(h.kind, entries))?;
    }
    Ok(())
}

/// The bucket of `member` and its entries.
fn find<K: Keyspace + ?Sized>(ks: &mut K, h: &Header, member: &[u8]) -> Result<(u64, Entries), Fail> {
    let b = h.bucket_of(member_hash(h.gen, member));
    Ok((b, load_bucket(ks, h, b)?))
}

/// The payload of `member` in a hashed collection.
pub(super) fn map_get<K: Keyspace + ?Sized>(ks: &mut K, h: &Header, member: &[u8]) -> Result<Option<Vec<u8>>, Fail> {
    let (_, entries) = find(ks, h, member)?;
    Ok(entries.into_iter().find(|e| e.0 == member).map(|e| e.1))
}

/// Sets `member`'s payload; true if it is new. `keep` decides, from the
/// old payload, whether an existing member is left alone.
fn map_put<K: Keyspace + ?Sized>(ks: &mut K, h: &mut Header, member: &[u8], payload: &[u8]) -> Result<bool, Fail> {
    let (b, mut entries) = find(ks, h, member)?;
    let created = match entries.iter_mut().find(|e| e.0 == member) {
        Some(e) if e.1 == payload => return Ok(false),
        Some(e) => {
            e.1 = payload.to_vec();
            false
        }
        None => {
            entries.push((member.to_vec(), payload.to_vec()));
            h.count += 1;
            true
        }
    };
    store_bucket(ks, h, b, &entries)?;
    Ok(created)
}

/// Removes `member`; true if it was there.
fn map_remove<K: Keyspace + ?Sized>(ks: &mut K, h: &mut Header, member: &[u8]) -> Result<bool, Fail> {
    let (b, mut entries) = find(ks, h, member)?;
    let before = entries.len();
    entries.retain(|e| e.0 != member);
    if entries.len() == before {
        return Ok(false);
    }
    h.count -= 1;
    store_bucket(ks, h, b, &entries)?;
    Ok(true)
}

/// Splits or merges buckets until the average load is within
/// `[bucket_entries / 4, bucket_entries]` (one step per member added or
/// removed, each touching two chunks).
fn rebalance<K: Keyspace + ?Sized>(ks: &mut K, h: &mut Header, cfg: &ChunkConfig) -> Res {
    let target = cfg.bucket_entries.max(1) as u64;
    while h.count > h.buckets().saturating_mul(target) && h.a < 62 {
        split(ks, h)?;
    }
    while h.buckets() > 1 && h.count.saturating_mul(4) < h.buckets().saturating_mul(target) {
        merge(ks, h)?;
    }
    Ok(())
}

/// Bucket `s` splits into `s` and `s + 2^L`; `s` moves on.
fn split<K: Keyspace + ?Sized>(ks: &mut K, h: &mut Header) -> Res {
    let (from, to) = (h.b, h.b + (1u64 << h.a));
    let entries = load_bucket(ks, h, from)?;
    h.b += 1;
    if h.b == 1u64 << h.a {
        h.a += 1;
        h.b = 0;
    }
    let (moved, kept): (Entries, Entries) =
        entries.into_iter().partition(|e| h.bucket_of(member_hash(h.gen, &e.0)) == to);
    debug_assert!(kept.iter().all(|e| h.bucket_of(member_hash(h.gen, &e.0)) == from));
    store_bucket(ks, h, from, &kept)?;
    store_bucket(ks, h, to, &moved)
}

/// The inverse of [`split`]: the last bucket merges into its sibling.
fn merge<K: Keyspace + ?Sized>(ks: &mut K, h: &mut Header) -> Res {
    assert!(h.buckets() > 1);
    if h.b == 0 {
        h.a -= 1;
        h.b = 1u64 << h.a;
    }
    h.b -= 1;
    let (into, from) = (h.b, h.b + (1u64 << h.a));
    let mut entries = load_bucket(ks, h, into)?;
    entries.extend(load_bucket(ks, h, from)?);
    store_bucket(ks, h, from, &Vec::new())?;
    store_bucket(ks, h, into, &entries)
}

/// A chunked collection read whole, as the blob of its kind (hash fields
/// bucket by bucket, set members and sorted-set entries in order, list
/// elements head to tail).
pub(super) fn materialise<K: Keyspace + ?Sized>(ks: &mut K, h: &Header) -> Result<Vec<u8>, Fail> {
    let mut out = Vec::new();
    if h.kind == Kind::List {
        let mut items: Vec<Vec<u8>> = Vec::new();
        for seq in h.head()..=h.tail() {
            let bytes = read_chunk(ks, h.gen, list_index(seq)).ok_or_else(|| corrupt("list chunk missing"))?;
            let mut e = Vec::new();
            decode_list(&bytes, &mut e)?;
            items.extend(e.into_iter().map(<[u8]>::to_vec));
        }
        if items.len() as u64 != h.count {
            return Err(corrupt("list count differs from its chunks"));
        }
        let refs: Vec<&[u8]> = items.iter().map(|i| &i[..]).collect();
        encode_list(&refs, &mut out);
        return Ok(out);
    }
    let mut all: Entries = Vec::new();
    for b in 0..h.buckets() {
        let entries = load_bucket(ks, h, b)?;
        if entries.iter().any(|e| h.bucket_of(member_hash(h.gen, &e.0)) != b) {
            return Err(corrupt("member in the wrong bucket"));
        }
        all.extend(entries);
    }
    if all.len() as u64 != h.count {
        return Err(corrupt("member count differs from its buckets"));
    }
    match h.kind {
        Kind::Hash => {
            let e: Vec<(&[u8], &[u8])> = all.iter().map(|(f, v)| (&f[..], &v[..])).collect();
            encode_hash(&e, &mut out);
        }
        _ => out = encode_bucket(h.kind, &all),
    }
    Ok(out)
}

/// The number of members of a `kind` blob (for the size rule).
fn blob_count(blob: &[u8]) -> u64 {
    blob.get(..4).map_or(0, |b| u64::from(u32::from_le_bytes(b.try_into().expect("4 bytes"))))
}

/// Stores the `kind` blob `blob` (not empty) at `key` with the deadline
/// `expiry` says: as it is if within `cfg`'s limits (or the keyspace keeps
/// no internal entries), else chunked under a fresh generation.
pub(super) fn store_blob<K: Keyspace + ?Sized>(
    ks: &mut K,
    key: &[u8],
    kind: Kind,
    blob: Vec<u8>,
    expiry: Expiry,
    cfg: &ChunkConfig,
) -> Res {
    let count = blob_count(&blob);
    let small = count <= cfg.max_blob_entries as u64 && blob.len() <= cfg.max_blob_bytes;
    if small || !ks.has_internal() || kind == Kind::String {
        ks.put(key, kind, ValueSource::Owned(blob), expiry)?;
        return Ok(());
    }
    let gen = next_generation(ks)?;
    if kind == Kind::List {
        let mut items = Vec::new();
        decode_list(&blob, &mut items)?;
        let mut chunks: Vec<Vec<&[u8]>> = vec![Vec::new()];
        let mut bytes = 0;
        for item in items {
            let last = chunks.last_mut().expect("a chunk");
            if !last.is_empty()
                && (last.len() >= cfg.list_chunk_entries || bytes + item.len() + 4 > cfg.list_chunk_bytes)
            {
                chunks.push(Vec::new());
                bytes = 0;
            }
            bytes += item.len() + 4;
            chunks.last_mut().expect("a chunk").push(item);
        }
        let tail = i64::try_from(chunks.len() - 1).expect("chunk count fits i64");
        let h = Header { kind, gen, count, a: 0, b: tail as u64 };
        ks.put(key, kind, ValueSource::Owned(h.encode()), expiry)?;
        for (seq, chunk) in chunks.iter().enumerate() {
            let mut out = Vec::new();
            encode_list(chunk, &mut out);
            ks.internal_put(&chunk_key(gen, list_index(seq as i64)), &out)?;
        }
        return Ok(());
    }
    let all = decode_bucket(kind, &blob)?;
    let n = count.div_ceil(cfg.bucket_entries.max(1) as u64).max(1);
    let level = 63 - u64::from(n.leading_zeros());
    let h = Header { kind, gen, count, a: level, b: n - (1u64 << level) };
    let mut buckets: Vec<Entries> = vec![Vec::new(); n as usize];
    for e in all {
        let b = h.bucket_of(member_hash(gen, &e.0));
        buckets[b as usize].push(e);
    }
    ks.put(key, kind, ValueSource::Owned(h.encode()), expiry)?;
    for (b, entries) in buckets.iter().enumerate() {
        store_bucket(ks, &h, b as u64, entries)?;
    }
    Ok(())
}

/// Runs fast path `f` if the key (argument 1) holds a chunked header of
/// `kind`; `None`: run the ordinary code. The command table names each
/// command's fast path ([`super::commands`]).
pub(super) fn fast<'a, 'r, K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'a, 'r, K, S>,
    kind: Kind,
    f: impl FnOnce(&mut Ctx<'a, 'r, K, S>, Header) -> Option<Res>,
) -> Option<Res> {
    if c.argc() < 2 || !c.ks.has_internal() {
        return None;
    }
    let h = match header(c.ks, c.arg(1), kind) {
        Ok(Some(h)) => h,
        Ok(None) => return None,
        Err(f) => return Some(Err(f)),
    };
    f(c, h)
}

/// Writes the header after a change, or deletes the key if it emptied.
fn finish<K: Keyspace + ?Sized>(ks: &mut K, key: &[u8], h: &Header, cfg: &ChunkConfig) -> Res {
    let mut h = *h;
    if h.count == 0 {
        ks.delete(key)?;
        return Ok(());
    }
    if h.kind != Kind::List {
        rebalance(ks, &mut h, cfg)?;
    }
    write_header(ks, key, &h)
}

/// HSET / HMSET on a chunked hash; `None` for an odd argument count (the
/// ordinary path's error).
pub(super) fn hset<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    mut h: Header,
    hmset: bool,
) -> Option<Res> {
    if c.argc() % 2 == 1 {
        return None;
    }
    let (key, cfg) = (c.arg(1), c.server.config.collections);
    let mut run = || -> Res {
        let mut created = 0;
        for i in (2..c.argc()).step_by(2) {
            created += i64::from(map_put(c.ks, &mut h, c.arg(i), c.arg(i + 1))?);
        }
        finish(c.ks, key, &h, &cfg)?;
        if hmset {
            c.out.ok();
        } else {
            c.out.integer(created);
        }
        Ok(())
    };
    Some(run())
}

/// HGET on a chunked hash.
pub(super) fn hget<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, h: Header) -> Option<Res> {
    let mut run = || -> Res {
        match map_get(c.ks, &h, c.arg(2))? {
            Some(v) => c.out.bulk(&v),
            None => c.out.null(),
        }
        Ok(())
    };
    Some(run())
}

/// HMGET on a chunked hash.
pub(super) fn hmget<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, h: Header) -> Option<Res> {
    let mut run = || -> Res {
        let mut values = Vec::with_capacity(c.argc() - 2);
        for i in 2..c.argc() {
            values.push(map_get(c.ks, &h, c.arg(i))?);
        }
        c.out.array(values.len());
        for v in values {
            match v {
                Some(v) => c.out.bulk(&v),
                None => c.out.null(),
            }
        }
        Ok(())
    };
    Some(run())
}

/// HDEL on a chunked hash.
pub(super) fn hdel<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, mut h: Header) -> Option<Res> {
    let (key, cfg) = (c.arg(1), c.server.config.collections);
    let mut run = || -> Res {
        let mut deleted = 0;
        for i in 2..c.argc() {
            deleted += i64::from(map_remove(c.ks, &mut h, c.arg(i))?);
        }
        if deleted > 0 {
            finish(c.ks, key, &h, &cfg)?;
        }
        c.out.integer(deleted);
        Ok(())
    };
    Some(run())
}

/// HEXISTS and SISMEMBER on a chunked hash or set.
pub(super) fn hexists<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, h: Header) -> Option<Res> {
    let mut run = || -> Res {
        let found = map_get(c.ks, &h, c.arg(2))?.is_some();
        c.out.integer(i64::from(found));
        Ok(())
    };
    Some(run())
}

/// SISMEMBER on a chunked set.
pub(super) fn sismember<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, h: Header) -> Option<Res> {
    hexists(c, h)
}

/// HLEN, SCARD, ZCARD, LLEN: the header's count.
pub(super) fn count<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, h: Header) -> Option<Res> {
    c.out.integer(h.count as i64);
    Some(Ok(()))
}

/// SADD (`add`) or SREM on a chunked set.
pub(super) fn sadd_or_srem<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    mut h: Header,
    add: bool,
) -> Option<Res> {
    let (key, cfg) = (c.arg(1), c.server.config.collections);
    let mut run = || -> Res {
        let mut changed = 0;
        for i in 2..c.argc() {
            let done = if add { map_put(c.ks, &mut h, c.arg(i), &[])? } else { map_remove(c.ks, &mut h, c.arg(i))? };
            changed += i64::from(done);
        }
        if changed > 0 {
            finish(c.ks, key, &h, &cfg)?;
        }
        c.out.integer(changed);
        Ok(())
    };
    Some(run())
}

/// SMISMEMBER on a chunked set.
pub(super) fn smismember<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, h: Header) -> Option<Res> {
    let mut run = || -> Res {
        let mut found = Vec::with_capacity(c.argc() - 2);
        for i in 2..c.argc() {
            found.push(map_get(c.ks, &h, c.arg(i))?.is_some());
        }
        c.out.array(found.len());
        for f in found {
            c.out.integer(i64::from(f));
        }
        Ok(())
    };
    Some(run())
}

/// ZADD on a chunked sorted set; `None` for options or scores the ordinary
/// path refuses (its errors come before the key is read).
pub(super) fn zadd<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, mut h: Header) -> Option<Res> {
    let (key, cfg) = (c.arg(1), c.server.config.collections);
    let (f, first, scores) = zadd_args(c)?;
    let mut run = || -> Res {
        let (mut added, mut updated, mut last) = (0i64, 0i64, None);
        for (j, &score) in scores.iter().enumerate() {
            let member = c.arg(first + 2 * j + 1);
            match zadd_one(c.ks, &mut h, member, score, &f)? {
                Some((score, Change::Added)) => (added, last) = (added + 1, Some(score)),
                Some((score, Change::Updated)) => (updated, last) = (updated + 1, Some(score)),
                Some((score, Change::Same)) => last = Some(score),
                None => {}
            }
        }
        if added + updated > 0 {
            finish(c.ks, key, &h, &cfg)?;
            c.notify(if f.incr { super::notify::ev::ZINCR } else { super::notify::ev::ZADD }, key);
        }
        match (f.incr, last) {
            (true, Some(score)) => c.out.double(score),
            (true, None) => c.out.null(),
            _ => c.out.integer(if f.ch { added + updated } else { added }),
        }
        Ok(())
    };
    Some(run())
}

/// ZREM on a chunked sorted set.
pub(super) fn zrem<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, mut h: Header) -> Option<Res> {
    let (key, cfg) = (c.arg(1), c.server.config.collections);
    let mut run = || -> Res {
        let mut removed = 0;
        for i in 2..c.argc() {
            removed += i64::from(map_remove(c.ks, &mut h, c.arg(i))?);
        }
        if removed > 0 {
            finish(c.ks, key, &h, &cfg)?;
        }
        c.out.integer(removed);
        Ok(())
    };
    Some(run())
}

/// ZSCORE on a chunked sorted set.
pub(super) fn zscore<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, h: Header) -> Option<Res> {
    let mut run = || -> Res {
        match map_get(c.ks, &h, c.arg(2))? {
            Some(s) => c.out.double(score_of(&s)),
            None => c.out.null(),
        }
        Ok(())
    };
    Some(run())
}

/// ZADD's options, the index of its first score, and its scores; `None` for anything
/// the ordinary path refuses (zsets.rs, Redis's order of checks).
fn zadd_args<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &Ctx<'_, '_, K, S>,
) -> Option<(ZaddFlags, usize, Vec<f64>)> {
    let (f, idx) = zadd_flags(c);
    let elements = c.argc() - idx;
    let conflict = (f.nx && (f.xx || f.gt || f.lt)) || (f.gt && f.lt) || (f.incr && elements > 2);
    if elements % 2 == 1 || elements == 0 || conflict {
        return None;
    }
    let scores = (idx..c.argc()).step_by(2).map(|i| pmwire_resp::numbers::parse_score(c.arg(i))).collect::<Option<_>>()?;
    Some((f, idx, scores))
}

/// What ZADD did to one member.
enum Change {
    Added,
    Updated,
    Same,
}

/// Redis's `zsetAdd` on the member's bucket: the member's new score and what changed, or
/// `None` if the options left it alone.
fn zadd_one<K: Keyspace + ?Sized>(
    ks: &mut K,
    h: &mut Header,
    member: &[u8],
    mut score: f64,
    f: &ZaddFlags,
) -> Result<Option<(f64, Change)>, Fail> {
    let (b, mut entries) = find(ks, h, member)?;
    let stored = |s: f64| (if s == 0.0 { 0.0f64 } else { s }).to_bits().to_le_bytes().to_vec();
    let change = match entries.iter().position(|e| e.0 == member) {
        Some(_) if f.nx => return Ok(None),
        Some(i) => {
            let cur = score_of(&entries[i].1);
            if f.incr {
                score += cur;
                if score.is_nan() {
                    return Err(Fail::err("resulting score is not a number (NaN)"));
                }
            }
            if (f.lt && score >= cur) || (f.gt && score <= cur) {
                return Ok(None);
            }
            if score == cur {
                return Ok(Some((score, Change::Same)));
            }
            entries[i].1 = stored(score);
            Change::Updated
        }
        None if f.xx => return Ok(None),
        None => {
            entries.push((member.to_vec(), stored(score)));
            h.count += 1;
            Change::Added
        }
    };
    store_bucket(ks, h, b, &entries)?;
    Ok(Some((score, change)))
}

/// The head or tail chunk of a list.
fn end_chunk<K: Keyspace + ?Sized>(ks: &mut K, h: &Header, head: bool) -> Result<(i64, Vec<Vec<u8>>), Fail> {
    let seq = if head { h.head() } else { h.tail() };
    let bytes = read_chunk(ks, h.gen, list_index(seq)).ok_or_else(|| corrupt("list chunk missing"))?;
    let mut e = Vec::new();
    decode_list(&bytes, &mut e)?;
    Ok((seq, e.into_iter().map(<[u8]>::to_vec).collect()))
}

fn put_list_chunk<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, seq: i64, items: &[Vec<u8>]) -> Res {
    let refs: Vec<&[u8]> = items.iter().map(|i| &i[..]).collect();
    let mut out = Vec::new();
    encode_list(&refs, &mut out);
    ks.internal_put(&chunk_key(gen, list_index(seq)), &out)?;
    Ok(())
}

/// Pushes `item` at one end: into the end chunk if it has room, else into
/// a new chunk beyond it.
fn list_push<K: Keyspace + ?Sized>(ks: &mut K, h: &mut Header, item: &[u8], head: bool, cfg: &ChunkConfig) -> Res {
    let (seq, mut items) = end_chunk(ks, h, head)?;
    let bytes: usize = items.iter().map(|i| i.len() + 4).sum();
    let full = items.len() >= cfg.list_chunk_entries || bytes + item.len() + 4 > cfg.list_chunk_bytes;
    if full {
        let next = if head { seq.checked_sub(1) } else { seq.checked_add(1) };
        let next = next.ok_or_else(|| Fail::err("list has too many chunks"))?;
        if !cfg.fault_header_without_chunk {
            put_list_chunk(ks, h.gen, next, &[item.to_vec()])?;
        }
        if head {
            h.a = next as u64;
        } else {
            h.b = next as u64;
        }
    } else {
        if head {
            items.insert(0, item.to_vec());
        } else {
            items.push(item.to_vec());
        }
        put_list_chunk(ks, h.gen, seq, &items)?;
    }
    h.count = h.count.checked_add(1).ok_or_else(|| Fail::err("list too long"))?;
    Ok(())
}

/// Pops one element from an end (the list is not empty).
fn list_pop<K: Keyspace + ?Sized>(ks: &mut K, h: &mut Header, head: bool) -> Result<Vec<u8>, Fail> {
    let (seq, mut items) = end_chunk(ks, h, head)?;
    let item = if head { items.remove(0) } else { items.pop().ok_or_else(|| corrupt("empty list chunk"))? };
    h.count -= 1;
    if items.is_empty() {
        ks.internal_delete(&chunk_key(h.gen, list_index(seq)))?;
        if h.count > 0 {
            if h.head() == h.tail() {
                return Err(corrupt("list count beyond its chunks"));
            }
            if head {
                h.a = (seq + 1) as u64;
            } else {
                h.b = (seq - 1) as u64;
            }
        }
    } else {
        put_list_chunk(ks, h.gen, seq, &items)?;
    }
    Ok(item)
}

/// LINDEX: walks chunks from the nearer end.
fn list_index_of<K: Keyspace + ?Sized>(ks: &mut K, h: &Header, index: i64) -> Result<Option<Vec<u8>>, Fail> {
    let len = h.count as i128;
    let pos = if index < 0 { len + index as i128 } else { index as i128 };
    if pos < 0 || pos >= len {
        return Ok(None);
    }
    let from_head = pos < len - pos;
    let mut skip = if from_head { pos } else { len - 1 - pos };
    let seqs: Box<dyn Iterator<Item = i64>> =
        if from_head { Box::new(h.head()..=h.tail()) } else { Box::new((h.head()..=h.tail()).rev()) };
    for seq in seqs {
        let bytes = read_chunk(ks, h.gen, list_index(seq)).ok_or_else(|| corrupt("list chunk missing"))?;
        let mut e = Vec::new();
        decode_list(&bytes, &mut e)?;
        if skip < e.len() as i128 {
            let i = if from_head { skip as usize } else { e.len() - 1 - skip as usize };
            return Ok(Some(e[i].to_vec()));
        }
        skip -= e.len() as i128;
    }
    Err(corrupt("list count beyond its chunks"))
}

/// LRANGE's elements `[start, end]` (positions, `end < count`): chunks are read from the
/// end nearer the range, so a range near either end costs a few chunks.
fn list_range<K: Keyspace + ?Sized>(ks: &mut K, h: &Header, start: u64, end: u64) -> Result<Vec<Vec<u8>>, Fail> {
    assert!(start <= end && end < h.count);
    let from_head = start <= h.count - 1 - end;
    let (mut skip, want) = if from_head { (start, end - start + 1) } else { (h.count - 1 - end, end - start + 1) };
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(want.min(1 << 16) as usize);
    let mut seq = if from_head { h.head() } else { h.tail() };
    while (out.len() as u64) < want {
        if seq < h.head() || seq > h.tail() {
            return Err(corrupt("list count beyond its chunks"));
        }
        let bytes = read_chunk(ks, h.gen, list_index(seq)).ok_or_else(|| corrupt("list chunk missing"))?;
        let mut e = Vec::new();
        decode_list(&bytes, &mut e)?;
        if !from_head {
            e.reverse();
        }
        let n = e.len() as u64;
        if skip >= n {
            skip -= n;
        } else {
            let take = (n - skip).min(want - out.len() as u64);
            out.extend(e[skip as usize..(skip + take) as usize].iter().map(|i| i.to_vec()));
            skip = 0;
        }
        seq = if from_head { seq + 1 } else { seq - 1 };
    }
    if !from_head {
        out.reverse();
    }
    Ok(out)
}

/// LPUSH LPUSHX (`head`), RPUSH RPUSHX on a chunked list (it exists, so
/// the X forms push too).
pub(super) fn push<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    mut h: Header,
    head: bool,
) -> Option<Res> {
    let (key, cfg) = (c.arg(1), c.server.config.collections);
    let mut run = || -> Res {
        for i in 2..c.argc() {
            list_push(c.ks, &mut h, c.arg(i), head, &cfg)?;
        }
        finish(c.ks, key, &h, &cfg)?;
        c.out.integer(h.count as i64);
        Ok(())
    };
    Some(run())
}

/// LPOP (`head`) or RPOP without a count on a chunked list; `None` with a
/// count.
pub(super) fn pop<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    mut h: Header,
    head: bool,
) -> Option<Res> {
    if c.argc() != 2 {
        return None;
    }
    let (key, cfg) = (c.arg(1), c.server.config.collections);
    let mut run = || -> Res {
        let item = list_pop(c.ks, &mut h, head)?;
        finish(c.ks, key, &h, &cfg)?;
        c.out.bulk(&item);
        Ok(())
    };
    Some(run())
}

/// LRANGE on a chunked list; `None` if an index is not an integer.
pub(super) fn lrange<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, h: Header) -> Option<Res> {
    let (start, end) = (pmwire_resp::numbers::parse_i64(c.arg(2))?, pmwire_resp::numbers::parse_i64(c.arg(3))?);
    // Redis's normalisation (lists.rs `span`), in i128: no overflow.
    let len = i128::from(h.count);
    let start = if start < 0 { (i128::from(start) + len).max(0) } else { i128::from(start) };
    let end = if end < 0 { i128::from(end) + len } else { i128::from(end) };
    let range = if start > end || start >= len { None } else { Some((start as u64, end.min(len - 1) as u64)) };
    let mut run = || -> Res {
        let items = match range {
            Some((start, end)) => list_range(c.ks, &h, start, end)?,
            None => Vec::new(),
        };
        c.out.array(items.len());
        for item in &items {
            c.out.bulk(item);
        }
        Ok(())
    };
    Some(run())
}

/// LINDEX on a chunked list; `None` if the index is not an integer.
pub(super) fn lindex<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, h: Header) -> Option<Res> {
    let index = pmwire_resp::numbers::parse_i64(c.arg(2))?;
    let mut run = || -> Res {
        match list_index_of(c.ks, &h, index)? {
            Some(v) => c.out.bulk(&v),
            None => c.out.null(),
        }
        Ok(())
    };
    Some(run())
}
