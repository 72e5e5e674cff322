//! List operations both the list commands and the blocking pops run (a
//! blocking command with data at hand does what its non-blocking form
//! does): which end, popping values, moving one element. Over the list blob
//! of [`crate::blob`]; an emptied list deletes its key.

use super::notify::{ev, Event};
use super::{Ctx, Fail, Res};
use crate::blob::{decode_list, encode_list, list_blob_len};
use crate::store::{Expiry, Keyspace, Kind};
use pmwire_resp::reply::ReplySink;

type C<'a, 'b, 'r, K, S> = &'a mut Ctx<'b, 'r, K, S>;

/// Which end of a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    Head,
    Tail,
}

pub(super) fn decode(blob: &[u8]) -> Result<Vec<&[u8]>, Fail> {
    let mut items = Vec::new();
    if !blob.is_empty() {
        decode_list(blob, &mut items)?;
    }
    Ok(items)
}

/// Writes `items` as the list at `key` (deletes the key when empty).
pub(super) fn store<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, key: &[u8], items: &[&[u8]]) -> Res {
    c.store_collection(key, Kind::List, items, encode_list, Expiry::Keep)
}

/// Removes up to `n` elements from `end`, in the order popped.
pub(super) fn take_from<'a>(items: &mut Vec<&'a [u8]>, end: End, n: usize) -> Vec<&'a [u8]> {
    let n = n.min(items.len());
    match end {
        End::Head => items.drain(..n).collect(),
        End::Tail => {
            let at = items.len() - n;
            items.drain(at..).rev().collect()
        }
    }
}

/// Pops up to `n` (at least 1) elements from `end` of the non-empty list at
/// `key`, in the order popped (BLPOP, BRPOP, LMPOP and BLMPOP when a list
/// has elements); `None` if there is no list there.
pub(super) fn pop_values<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: C<'_, '_, '_, K, S>,
    key: &[u8],
    end: End,
    n: usize,
) -> Result<Option<Vec<Vec<u8>>>, Fail> {
    let Some(blob) = c.load(key, Kind::List)? else { return Ok(None) };
    let mut items = decode(&blob)?;
    let popped: Vec<Vec<u8>> = take_from(&mut items, end, n).into_iter().map(<[u8]>::to_vec).collect();
    assert!(!popped.is_empty(), "a stored list is never empty");
    store(c, key, &items)?;
    c.notify(pop_event(end), key);
    if items.is_empty() {
        c.notify(ev::DEL, key);
    }
    Ok(Some(popped))
}

/// The keyspace event of a pop from `end`.
fn pop_event(end: End) -> Event {
    match end {
        End::Head => ev::LPOP,
        End::Tail => ev::RPOP,
    }
}

/// A LEFT / RIGHT argument.
pub(super) fn end_arg(word: &[u8]) -> Result<End, Fail> {
    if word.eq_ignore_ascii_case(b"left") {
        Ok(End::Head)
    } else if word.eq_ignore_ascii_case(b"right") {
        Ok(End::Tail)
    } else {
        Err(Fail::Syntax)
    }
}

/// Pops one element from `from` of the source and pushes it at `to` of the
/// destination (the same list when the keys are equal: a rotation).
pub(super) fn move_one<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: C<'_, '_, '_, K, S>,
    from: End,
    to: End,
) -> Res {
    let (src, dst) = (c.arg(1), c.arg(2));
    let Some(src_blob) = c.load(src, Kind::List)? else {
        c.out.null();
        return Ok(());
    };
    let dst_blob = if src == dst { None } else { c.load(dst, Kind::List)? };
    let mut items = decode(&src_blob)?;
    let value = take_from(&mut items, from, 1)[0];
    let mut target =
        if src == dst { std::mem::take(&mut items) } else { decode(dst_blob.as_deref().unwrap_or_default())? };
    match to {
        End::Head => target.insert(0, value),
        End::Tail => target.push(value),
    }
    c.check_fits(dst, list_blob_len(&target))?;
    if src != dst {
        store(c, src, &items)?;
    }
    store(c, dst, &target)?;
    // Redis's order: the push, the pop, then `del` if the source emptied.
    c.notify(if to == End::Head { ev::LPUSH } else { ev::RPUSH }, dst);
    c.notify(pop_event(from), src);
    if src != dst && items.is_empty() {
        c.notify(ev::DEL, src);
    }
    c.out.bulk(value);
    Ok(())
}
