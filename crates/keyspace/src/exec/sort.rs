//! SORT and SORT_RO (Redis 7.0's `sort.c`): the elements of a list, set or
//! sorted set, ordered numerically or as bytes (ALPHA), by themselves or by
//! other keys (`BY pattern`, a `*` replaced by the element, `->field` for a
//! hash's field), LIMIT, `GET pattern` (`#` is the element), and STORE into
//! a list.
//!
//! As Redis: a `BY` pattern without `*` means no sort (a list or sorted set
//! keeps its own order, DESC reversing it; a set is sorted as bytes when
//! STOREd or inside a script, so the result does not depend on the member
//! that runs it); an element whose `BY` key is missing sorts as 0 (as the
//! least with ALPHA); equal numbers are ordered by the elements' bytes; a
//! value that is not a number fails the whole command with "One or more
//! scores can't be converted into double" (nothing stored). STORE replaces
//! the destination (its deadline too) with a list of the result, a missing
//! `GET` key stored as ""; an empty result deletes it.
//!
//! Where pmwire differs: ALPHA compares as Redis does under the C locale
//! (bytes with STORE, C strings without: Redis calls `strcoll` in whatever
//! `LC_COLLATE` it was started with), and elements that compare equal keep
//! their order (Redis's `qsort` may swap them); a set left unsorted comes out in pmwire's member order, where
//! Redis's is its hash table's (Redis documents it as unspecified).

use std::cmp::Ordering;

use super::{Ctx, Fail, Res};
use crate::blob;
use crate::store::{Expiry, Keyspace, Kind};
use pmwire_resp::reply::ReplySink;

/// One element and what it sorts by.
struct Item {
    element: Vec<u8>,
    score: f64,
    /// ALPHA with BY: the BY key's value, `None` if missing.
    by: Option<Vec<u8>>,
}

/// The parsed options.
struct Options<'r> {
    desc: bool,
    alpha: bool,
    limit: Option<(i64, i64)>,
    by: Option<&'r [u8]>,
    get: Vec<&'r [u8]>,
    store: Option<&'r [u8]>,
}

fn parse<'r, K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &Ctx<'_, 'r, K, S>, readonly: bool) -> Result<Options<'r>, Fail> {
    let mut o = Options { desc: false, alpha: false, limit: None, by: None, get: Vec::new(), store: None };
    let mut j = 2;
    while j < c.argc() {
        let word = c.arg(j);
        let left = c.argc() - j - 1;
        if word.eq_ignore_ascii_case(b"asc") {
            o.desc = false;
        } else if word.eq_ignore_ascii_case(b"desc") {
            o.desc = true;
        } else if word.eq_ignore_ascii_case(b"alpha") {
            o.alpha = true;
        } else if word.eq_ignore_ascii_case(b"limit") && left >= 2 {
            o.limit = Some((c.int_arg(j + 1)?, c.int_arg(j + 2)?));
            j += 2;
        } else if !readonly && word.eq_ignore_ascii_case(b"store") && left >= 1 {
            o.store = Some(c.arg(j + 1));
            j += 1;
        } else if word.eq_ignore_ascii_case(b"by") && left >= 1 {
            o.by = Some(c.arg(j + 1));
            j += 1;
        } else if word.eq_ignore_ascii_case(b"get") && left >= 1 {
            o.get.push(c.arg(j + 1));
            j += 1;
        } else {
            return Err(Fail::Syntax);
        }
        j += 1;
    }
    Ok(o)
}

/// Redis's `lookupKeyByPattern`: `#` is the element itself; otherwise the
/// first `*` is replaced by it and the key read as a string, or, with
/// `->field` after the `*`, as a hash's field; `None` for a pattern without
/// `*`, a missing key or one of another kind.
fn lookup<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    pattern: &[u8],
    element: &[u8],
) -> Result<Option<Vec<u8>>, Fail> {
    if pattern == b"#" {
        return Ok(Some(element.to_vec()));
    }
    let Some(star) = pattern.iter().position(|&b| b == b'*') else { return Ok(None) };
    let after = &pattern[star + 1..];
    let field = after.windows(2).position(|w| w == b"->").filter(|&f| f + 2 < after.len());
    let (suffix, field) = match field {
        Some(f) => (&after[..f], Some(&after[f + 2..])),
        None => (after, None),
    };
    let mut key = Vec::with_capacity(star + element.len() + suffix.len());
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(element);
    key.extend_from_slice(suffix);
    let Some(stored) = c.ks.get(&key) else { return Ok(None) };
    match field {
        None if stored.kind == Kind::String => Ok(c.load(&key, Kind::String)?),
        Some(field) if stored.kind == Kind::Hash => {
            // A chunked hash: the field's bucket only, as HGET reads it.
            if let Some(h) = super::large::header(c.ks, &key, Kind::Hash)? {
                return super::large::map_get(c.ks, &h, field);
            }
            let v = c.load(&key, Kind::Hash)?.unwrap_or_default();
            let mut pairs = Vec::new();
            blob::decode_hash(&v, &mut pairs)?;
            Ok(pairs.iter().find(|(f, _)| *f == field).map(|(_, v)| v.to_vec()))
        }
        _ => Ok(None),
    }
}

/// A number as Redis's SORT reads one: `strtod` over the value as a C
/// string (up to its first NUL byte), all of it used, in range, not NaN.
fn score(value: &[u8]) -> Option<f64> {
    let c_string = value.iter().position(|&b| b == 0).map_or(value, |n| &value[..n]);
    let parsed = pmwire_resp::numbers::strtod(c_string);
    (parsed.end == c_string.len() && !parsed.range_error && !parsed.value.is_nan()).then_some(parsed.value)
}

/// SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC]
/// [ALPHA] [STORE destination], and SORT_RO (no STORE).
pub(super) fn sort<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, readonly: bool) -> Res {
    let mut o = parse(c, readonly)?;
    let key = c.arg(1);
    let kind = match c.ks.get(key) {
        None => None,
        Some(s) if matches!(s.kind, Kind::List | Kind::Set | Kind::ZSet) => Some(s.kind),
        Some(_) => return Err(Fail::WrongType),
    };
    let mut dont_sort = o.by.is_some_and(|p| !p.contains(&b'*'));
    if dont_sort && kind == Some(Kind::Set) && (o.store.is_some() || c.server.in_script) {
        // A set has no order of its own: sorted as bytes where the result
        // must not depend on who runs it.
        dont_sort = false;
        o.alpha = true;
        o.by = None;
    }
    let elements: Vec<Vec<u8>> = match kind {
        None => Vec::new(),
        Some(kind) => {
            let v = c.load(key, kind)?.unwrap_or_default();
            match kind {
                Kind::List => {
                    let mut items = Vec::new();
                    blob::decode_list(&v, &mut items)?;
                    items.into_iter().map(<[u8]>::to_vec).collect()
                }
                Kind::Set => {
                    let mut items = Vec::new();
                    blob::decode_set(&v, &mut items)?;
                    items.into_iter().map(<[u8]>::to_vec).collect()
                }
                _ => {
                    let mut items = Vec::new();
                    blob::decode_zset(&v, &mut items)?;
                    items.into_iter().map(|(_, m)| m.to_vec()).collect()
                }
            }
        }
    };
    // Redis's LIMIT arithmetic, on the whole vector.
    let n = elements.len() as i64;
    let (limit_start, limit_count) = o.limit.unwrap_or((0, -1));
    let mut start = limit_start.clamp(0, n);
    let count = limit_count.clamp(-1, n);
    let mut end = if count < 0 { n - 1 } else { start.saturating_add(count) - 1 };
    if start >= n {
        start = n - 1;
        end = n - 2;
    }
    end = end.min(n - 1);

    let mut items: Vec<Item> = elements.into_iter().map(|element| Item { element, score: 0.0, by: None }).collect();
    if dont_sort {
        // A list or sorted set in its own order, DESC reversing it; a set as it is.
        if o.desc && kind != Some(Kind::Set) {
            items.reverse();
        }
    } else {
        let mut not_a_number = false;
        for item in &mut items {
            let by = match o.by {
                Some(pattern) => match lookup(c, pattern, &item.element)? {
                    Some(v) => v,
                    None => continue,
                },
                None => item.element.clone(),
            };
            if o.alpha {
                if o.by.is_some() {
                    item.by = Some(by);
                }
            } else {
                match score(&by) {
                    Some(s) => item.score = s,
                    None => not_a_number = true,
                }
            }
        }
        if not_a_number {
            return Err(Fail::err("One or more scores can't be converted into double"));
        }
        let (alpha, by_pattern, desc, store) = (o.alpha, o.by.is_some(), o.desc, o.store.is_some());
        // ALPHA compares bytes for STORE (Redis's `compareStringObjects`),
        // else C strings (its `strcoll` under the C locale: up to a NUL).
        fn whole(v: &[u8]) -> &[u8] {
            v
        }
        fn c_string(v: &[u8]) -> &[u8] {
            v.iter().position(|&b| b == 0).map_or(v, |n| &v[..n])
        }
        let text: fn(&[u8]) -> &[u8] = if store { whole } else { c_string };
        items.sort_by(|a, b| {
            let cmp = if !alpha {
                a.score.partial_cmp(&b.score).unwrap_or(Ordering::Equal).then_with(|| a.element.cmp(&b.element))
            } else if by_pattern {
                // A missing BY value is the least.
                a.by.as_deref().map(text).cmp(&b.by.as_deref().map(text))
            } else {
                text(&a.element).cmp(text(&b.element))
            };
            if desc { cmp.reverse() } else { cmp }
        });
    }
    let chosen: &[Item] = if end >= start { &items[start as usize..=end as usize] } else { &[] };

    match o.store {
        None => {
            let per = o.get.len().max(1);
            c.out.array(chosen.len() * per);
            for item in chosen {
                if o.get.is_empty() {
                    c.out.bulk(&item.element);
                }
                for pattern in &o.get {
                    match lookup(c, pattern, &item.element)? {
                        Some(v) => c.out.bulk(&v),
                        None => c.out.null(),
                    }
                }
            }
        }
        Some(dest) => {
            let mut out: Vec<Vec<u8>> = Vec::with_capacity(chosen.len() * o.get.len().max(1));
            for item in chosen {
                if o.get.is_empty() {
                    out.push(item.element.clone());
                }
                for pattern in &o.get {
                    out.push(lookup(c, pattern, &item.element)?.unwrap_or_default());
                }
            }
            let refs: Vec<&[u8]> = out.iter().map(Vec::as_slice).collect();
            let len = blob::list_blob_len(&refs);
            c.check_fits(dest, len)?;
            c.store_collection(dest, Kind::List, &refs, |items, blob| blob::encode_list(items, blob), Expiry::Clear)?;
            c.out.integer(refs.len() as i64);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::score;

    #[test]
    fn scores_read_as_redis_reads_them() {
        assert_eq!(score(b"10"), Some(10.0));
        assert_eq!(score(b" 1.5"), Some(1.5));
        assert_eq!(score(b""), Some(0.0), "strtod of an empty C string ends where it began: 0");
        assert_eq!(score(b"1\x00abc"), Some(1.0), "a C string ends at its NUL");
        assert_eq!(score(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(score(b"abc"), None);
        assert_eq!(score(b"1 "), None);
        assert_eq!(score(b"nan"), None);
        assert_eq!(score(b"1e400"), None);
    }
}
