//! OBJECT ENCODING in Redis 7.0's terms.
//!
//! pmwire keeps values in its own layouts (a string as received, a
//! collection as one blob or as a header and chunks: [`crate::chunked`]),
//! none of which is Redis's. OBJECT ENCODING answers what redis-server
//! 7.0.15 would answer for the same value written by the same commands, so
//! clients and test suites that check Redis's conversions (a listpack hash
//! becoming a hashtable when a value outgrows `hash-max-listpack-value`)
//! see Redis's answer. How pmwire itself holds a value is `MEMORY USAGE`'s
//! business and the docs', not this command's.
//!
//! The answer is computed from the value as it stands and the thresholds
//! CONFIG SET last gave ([`super::ServerConfig::encoding_parameters`]):
//! - a string: `int` if it is an integer as Redis's `string2l` reads one
//!   (at most 20 characters), `embstr` up to 44 bytes, else `raw`; a string
//!   that APPEND (to an existing key), SETRANGE (of a non-empty value),
//!   SETBIT or BITOP last wrote is `raw` whatever it holds, as Redis's
//!   in-place writes leave it ([`RawStrings`]);
//! - a hash: `listpack` while it has at most `hash-max-listpack-entries`
//!   fields and no field or value longer than `hash-max-listpack-value`,
//!   else `hashtable`; a sorted set the same with the `zset-` thresholds
//!   (member lengths only), else `skiplist`; a set `intset` while every
//!   member is an integer (`string2ll`) and it has at most
//!   `set-max-intset-entries`, else `hashtable`;
//! - a list `quicklist` (Redis 7.0 has no other list encoding), a stream
//!   `stream`.
//!
//! Where Redis differs: it never converts a collection back to its compact
//! encoding while it runs (a hash that held a long value and lost it stays
//! a hashtable until a restart reloads it), while this answer follows the
//! content, as Redis's does after a restart. The raw marks are kept in
//! DRAM and are lost on a restart, as Redis's loading re-encodes strings.

use std::collections::HashSet;

use super::admin::ENCODING_PARAMETERS;
use super::{Ctx, Fail};
use crate::blob;
use crate::store::{Keyspace, Kind};
use pmwire_resp::reply::ReplySink;

/// Redis's `OBJ_ENCODING_EMBSTR_SIZE_LIMIT`.
const EMBSTR_MAX_BYTES: u64 = 44;

/// The most keys [`RawStrings`] remembers; past it a string written in place
/// is answered by its content (a bound on DRAM, documented above).
pub(super) const RAW_MARKS_MAX: usize = 100_000;

/// Keys whose string was last written in place (APPEND, SETRANGE, SETBIT,
/// BITOP) and is short enough that its content alone would not say `raw`.
/// A command that writes such a key any other way drops its mark
/// ([`super::Server::run_one`]); FLUSHALL drops them all.
#[derive(Debug, Default)]
pub(super) struct RawStrings {
    marked: HashSet<Vec<u8>>,
    /// Marks made by the running command, kept once its other writes have
    /// dropped theirs.
    pending: Vec<Vec<u8>>,
}

impl RawStrings {
    pub(super) fn is_empty(&self) -> bool {
        self.marked.is_empty() && self.pending.is_empty()
    }

    /// The running command wrote `key`'s string of `len` bytes in place.
    pub(super) fn mark(&mut self, key: &[u8], len: u64) {
        if len <= EMBSTR_MAX_BYTES {
            self.pending.push(key.to_vec());
        }
    }

    /// The running command has finished: drop the marks of the keys it
    /// wrote (`touched`; every key if it `cleared` the keyspace), move a
    /// renamed key's mark to its new name, then keep the marks it made.
    pub(super) fn settle(&mut self, touched: &[Vec<u8>], cleared: bool, renamed: Option<(&[u8], &[u8])>) {
        let carried = renamed.is_some_and(|(from, _)| self.marked.contains(from));
        if cleared {
            self.marked.clear();
        }
        for k in touched {
            self.marked.remove(k);
        }
        if let Some((_, to)) = renamed.filter(|_| carried) {
            self.pending.push(to.to_vec());
        }
        for k in self.pending.drain(..) {
            if self.marked.len() < RAW_MARKS_MAX {
                self.marked.insert(k);
            }
        }
    }

    fn contains(&self, key: &[u8]) -> bool {
        self.marked.contains(key)
    }
}

/// The threshold `name` as CONFIG SET last set it (negative values read as 0).
fn threshold<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, '_, K, S>, name: &str) -> u64 {
    let i = ENCODING_PARAMETERS.iter().position(|p| p.name == name).expect("a known encoding parameter");
    u64::try_from(c.server.config.encoding_parameters[i]).unwrap_or(0)
}

/// What OBJECT ENCODING answers for the live key `key` of `kind`.
pub(super) fn redis_encoding<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    key: &[u8],
    kind: Kind,
    len: u64,
) -> Result<&'static str, Fail> {
    Ok(match kind {
        Kind::List => "quicklist",
        Kind::Stream => "stream",
        Kind::String => {
            if c.server.raw_strings.contains(key) || len > EMBSTR_MAX_BYTES {
                "raw"
            } else {
                let v = c.load(key, Kind::String)?.unwrap_or_default();
                if pmwire_resp::numbers::parse_i64(&v).is_some() {
                    "int"
                } else {
                    "embstr"
                }
            }
        }
        Kind::Hash => {
            let (entries, value) = (threshold(c, "hash-max-listpack-entries"), threshold(c, "hash-max-listpack-value"));
            let compact = match members(c, key, kind, entries)? {
                None => false,
                Some(v) => {
                    let mut pairs = Vec::new();
                    blob::decode_hash(&v, &mut pairs)?;
                    pairs.len() as u64 <= entries && pairs.iter().all(|(f, v)| f.len() as u64 <= value && v.len() as u64 <= value)
                }
            };
            if compact { "listpack" } else { "hashtable" }
        }
        Kind::ZSet => {
            let (entries, value) = (threshold(c, "zset-max-listpack-entries"), threshold(c, "zset-max-listpack-value"));
            let compact = match members(c, key, kind, entries)? {
                None => false,
                Some(v) => {
                    let mut members = Vec::new();
                    blob::decode_zset(&v, &mut members)?;
                    members.len() as u64 <= entries && members.iter().all(|(_, m)| m.len() as u64 <= value)
                }
            };
            if compact { "listpack" } else { "skiplist" }
        }
        Kind::Set => {
            let entries = threshold(c, "set-max-intset-entries");
            let intset = match members(c, key, kind, entries)? {
                None => false,
                Some(v) => {
                    let mut members = Vec::new();
                    blob::decode_set(&v, &mut members)?;
                    members.len() as u64 <= entries && members.iter().all(|m| pmwire_resp::numbers::parse_i64(m).is_some())
                }
            };
            if intset { "intset" } else { "hashtable" }
        }
    })
}

/// The collection at `key` as one blob, or `None` if it is chunked with more
/// than `entries` members (known from its header, without reading them).
fn members<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    key: &[u8],
    kind: Kind,
    entries: u64,
) -> Result<Option<Vec<u8>>, Fail> {
    if super::large::header(c.ks, key, kind)?.is_some_and(|h| h.count > entries) {
        return Ok(None);
    }
    Ok(Some(c.load(key, kind)?.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_marks_follow_writes() {
        let mut r = RawStrings::default();
        r.mark(b"k", 4);
        r.mark(b"long", EMBSTR_MAX_BYTES + 1);
        // The marking command itself wrote k: its mark is kept.
        r.settle(&[b"k".to_vec()], false, None);
        assert!(r.contains(b"k"));
        assert!(!r.contains(b"long"), "a long string is raw by its length alone");
        // Another command writing k drops it.
        r.settle(&[b"k".to_vec()], false, None);
        assert!(!r.contains(b"k"));
        r.mark(b"a", 1);
        r.settle(&[], false, None);
        r.settle(&[b"a".to_vec(), b"b".to_vec()], false, Some((b"a", b"b")));
        assert!(r.contains(b"b"), "RENAME carries the mark");
        assert!(!r.contains(b"a"));
        r.settle(&[], true, None);
        assert!(r.is_empty(), "FLUSHALL drops every mark");
    }
}
