//! Streams: `XADD XLEN XRANGE XREVRANGE XDEL XTRIM XREAD`, as Redis 7.0's
//! `t_stream.c` serves them, over the stored form of [`crate::stream`]: a
//! header and nodes, so an append reads and writes the last node and the
//! header whatever the stream's length, and a range finds its first node
//! by a binary search over node numbers.
//!
//! Replies, errors and trimming follow Redis's rules node for node: an
//! entry starts a new node when the last one is full (its entries, deleted
//! ones counted, reach `stream-node-max-entries`, or its bytes with the new
//! entry `stream-node-max-bytes`; bytes are this format's, so a node fills
//! at a different entry than Redis's listpack when the byte limit binds);
//! XDEL and an exact trim mark entries deleted inside a node and a node
//! whose last live entry goes is removed; `~` trims whole nodes only, at
//! most LIMIT entries (default 100 nodes' worth).
//!
//! XREAD BLOCK with nothing to read blocks as a list pop does
//! ([`super::blocking`]): the session waits on its keys for an entry past
//! the ID it gave (`$`: the stream's last ID when it blocked), and an XADD
//! to one of them serves it with that one stream's entries.
//!
//! Invariants: the header's `length` is the number of live entries in the
//! nodes numbered `head..tail`; every stored node has a live entry; node
//! IDs increase with node numbers; `last_id` is at least every entry's ID;
//! `first_id` is the first live entry's (0-0 when empty).

pub(super) mod groups;

use super::notify::ev;
use super::{Ctx, Fail, Res};
use crate::chunked::{chunk_key, next_generation};
use crate::store::{Expiry, Keyspace, Kind, ValueSource};
use crate::stream::{entry_key, Entry, Header, Node, NodeLimits, Segmented, StreamError, StreamId};
use pmwire_resp::numbers::{is_c_space, parse_i64};
use pmwire_resp::reply::ReplySink;

type C<'a, 'b, 'r, K, S> = &'a mut Ctx<'b, 'r, K, S>;

fn corrupt(e: crate::stream::StreamError) -> Fail {
    Fail::Text(format!("ERR stored value is corrupt: {e}"))
}

const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

/// Redis's `string2ull`: an integer, or what `strtoull` takes whole
/// (leading spaces, a `+`), never a negative one.
fn parse_u64(s: &[u8]) -> Option<u64> {
    if let Some(v) = parse_i64(s) {
        return u64::try_from(v).ok();
    }
    let start = s.iter().position(|&c| !is_c_space(c))?;
    let mut digits = &s[start..];
    if let Some(rest) = digits.strip_prefix(b"+") {
        digits = rest;
    }
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// An ID as a command gives it (Redis's `streamGenericParseIDOrReply`):
/// `ms-seq`, `ms` (the sequence is `missing_seq`), `-` and `+` unless
/// `strict`, and `ms-*` where `seq_given` is asked (its answer: false).
fn parse_id(arg: &[u8], missing_seq: u64, strict: bool, seq_given: Option<&mut bool>) -> Result<StreamId, Fail> {
    let invalid = || Fail::Text(INVALID_ID.into());
    if arg.len() > 127 {
        return Err(invalid());
    }
    if strict && (arg == b"-" || arg == b"+") {
        return Err(invalid());
    }
    let mut given = true;
    let id = match arg {
        b"-" => StreamId::MIN,
        b"+" => StreamId::MAX,
        _ => {
            // The text up to a NUL, as C reads it.
            let text = &arg[..arg.iter().position(|&c| c == 0).unwrap_or(arg.len())];
            let (ms_text, seq_text) = match text.iter().position(|&c| c == b'-') {
                Some(at) => (&text[..at], Some(&text[at + 1..])),
                None => (text, None),
            };
            let ms = parse_u64(ms_text).ok_or_else(invalid)?;
            let seq = match seq_text {
                Some(b"*") if seq_given.is_some() => {
                    given = false;
                    0
                }
                Some(t) => parse_u64(t).ok_or_else(invalid)?,
                None => missing_seq,
            };
            StreamId { ms, seq }
        }
    };
    if let Some(g) = seq_given {
        *g = given;
    }
    Ok(id)
}

/// The stream at `key`: `WRONGTYPE` for another kind.
fn load<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, key: &[u8]) -> Result<Option<Header>, Fail> {
    let Some(s) = c.get_kind(key, Kind::Stream)? else { return Ok(None) };
    let mut bytes = Vec::with_capacity(s.len as usize);
    c.ks.read(&s.value, &mut bytes);
    Header::decode(&bytes).map(Some).map_err(corrupt)
}

fn write_header<K: Keyspace + ?Sized>(ks: &mut K, key: &[u8], h: &Header) -> Res {
    ks.put(key, Kind::Stream, ValueSource::Owned(h.encode()), Expiry::Keep)?;
    Ok(())
}

/// Node `n`'s stored form: `None` if absent, else its segmented record
/// (`None` inside for a whole node) and the node key's bytes.
fn node_form<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, n: u64) -> Result<Option<(Option<Segmented>, Vec<u8>)>, Fail> {
    let Some(v) = ks.internal_get(&chunk_key(gen, n)) else { return Ok(None) };
    let mut bytes = Vec::new();
    ks.read(&v, &mut bytes);
    Ok(Some((Segmented::decode(&bytes).map_err(corrupt)?, bytes)))
}

/// A segmented node's entries, checked as a whole node's are.
fn read_segments<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, n: u64, seg: Segmented) -> Result<Node, Fail> {
    let mut entries: Vec<Entry> = Vec::with_capacity(seg.count as usize);
    let mut bytes = Vec::new();
    for i in 0..seg.count {
        let v = ks.internal_get(&entry_key(gen, n, i)).ok_or_else(|| corrupt(StreamError::Node))?;
        bytes.clear();
        ks.read(&v, &mut bytes);
        let e = Entry::decode(&bytes).map_err(corrupt)?;
        if entries.last().is_some_and(|p| p.id >= e.id) {
            return Err(corrupt(StreamError::Node));
        }
        entries.push(e);
    }
    let node = Node { entries };
    if node.live() != seg.live as usize || node.encoded_len() as u64 != seg.bytes {
        return Err(corrupt(StreamError::Node));
    }
    Ok(node)
}

fn read_node<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, n: u64) -> Result<Option<Node>, Fail> {
    match node_form(ks, gen, n)? {
        None => Ok(None),
        Some((Some(seg), _)) => read_segments(ks, gen, n, seg).map(Some),
        Some((None, bytes)) => Node::decode(&bytes).map(Some).map_err(corrupt),
    }
}

/// Writes node `n` segmented: its record and an entry record per entry
/// (deleting records past its entries that an earlier, longer form left).
fn write_segmented<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, n: u64, node: &Node, old_count: u32) -> Res {
    for (i, e) in node.entries.iter().enumerate() {
        ks.internal_put(&entry_key(gen, n, i as u32), &e.encode())?;
    }
    for i in node.entries.len() as u32..old_count {
        ks.internal_delete(&entry_key(gen, n, i))?;
    }
    let seg = Segmented { count: node.entries.len() as u32, live: node.live() as u32, bytes: node.encoded_len() as u64 };
    ks.internal_put(&chunk_key(gen, n), &seg.encode())?;
    Ok(())
}

/// Writes node `n` in the form it is stored in (whole if it is not stored).
fn write_node<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, n: u64, node: &Node) -> Res {
    match node_form(ks, gen, n)? {
        Some((Some(seg), _)) => write_segmented(ks, gen, n, node, seg.count),
        _ => {
            ks.internal_put(&chunk_key(gen, n), &node.encode())?;
            Ok(())
        }
    }
}

/// Removes node `n`, with its entry records if it is segmented.
fn delete_node<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, n: u64) -> Res {
    if let Some((Some(seg), _)) = node_form(ks, gen, n)? {
        for i in 0..seg.count {
            ks.internal_delete(&entry_key(gen, n, i))?;
        }
    }
    ks.internal_delete(&chunk_key(gen, n))?;
    Ok(())
}

/// Writes segmented node `n` (its record `seg`) whole: one internal entry,
/// its entry records deleted (a node no longer appended to is read in one
/// read).
fn seal<K: Keyspace + ?Sized>(ks: &mut K, gen: u64, n: u64, seg: Segmented) -> Res {
    let node = read_segments(ks, gen, n, seg)?;
    for i in 0..seg.count {
        ks.internal_delete(&entry_key(gen, n, i))?;
    }
    ks.internal_put(&chunk_key(gen, n), &node.encode())?;
    Ok(())
}

/// Appends `entry` to the stream's last node, or to a new node after it if
/// that one is full (sealing it); updates `h`'s nodes (the caller the rest).
/// A segmented last node takes the entry's record and its own record; a
/// whole one is segmented first (once).
fn append<K: Keyspace + ?Sized>(ks: &mut K, h: &mut Header, entry: &Entry, limits: NodeLimits) -> Res {
    let bytes = entry.encoded_len();
    if h.tail > h.head {
        let last = h.tail - 1;
        match node_form(ks, h.gen, last)? {
            Some((Some(seg), _)) if !limits.full_at(u64::from(seg.count), seg.bytes, bytes) => {
                ks.internal_put(&entry_key(h.gen, last, seg.count), &entry.encode())?;
                let grown = Segmented { count: seg.count + 1, live: seg.live + 1, bytes: seg.bytes + bytes as u64 };
                ks.internal_put(&chunk_key(h.gen, last), &grown.encode())?;
                return Ok(());
            }
            Some((Some(seg), _)) => seal(ks, h.gen, last, seg)?,
            Some((None, whole)) => {
                let mut node = Node::decode(&whole).map_err(corrupt)?;
                if !limits.full(&node, bytes) {
                    node.entries.push(entry.clone());
                    return write_segmented(ks, h.gen, last, &node, 0);
                }
            }
            None => return Err(corrupt(StreamError::Node)),
        }
    }
    // A new node: its one entry's record and its own.
    ks.internal_put(&entry_key(h.gen, h.tail, 0), &entry.encode())?;
    let seg = Segmented { count: 1, live: 1, bytes: (Node::default().encoded_len() + bytes) as u64 };
    ks.internal_put(&chunk_key(h.gen, h.tail), &seg.encode())?;
    if h.length == 0 {
        h.head = h.tail;
    }
    h.tail += 1;
    Ok(())
}

/// The first stored node numbered `from` or more, below the tail.
fn next_node<K: Keyspace + ?Sized>(ks: &mut K, h: &Header, from: u64) -> Option<u64> {
    if from >= h.tail {
        return None;
    }
    let start = chunk_key(h.gen, from);
    let mut found = None;
    ks.internal_scan(&start, 1, &mut |k| found = Some(k.to_vec()));
    let k = found?;
    if k.len() != 17 || k[..9] != start[..9] {
        return None;
    }
    let n = u64::from_be_bytes(k[9..].try_into().expect("8 bytes"));
    (n < h.tail).then_some(n)
}

/// The last stored node numbered below `before`, from the head.
fn prev_node<K: Keyspace + ?Sized>(ks: &mut K, h: &Header, before: u64) -> Option<u64> {
    let mut n = before.min(h.tail);
    while n > h.head {
        n -= 1;
        if ks.internal_get(&chunk_key(h.gen, n)).is_some() {
            return Some(n);
        }
    }
    None
}

/// The last node whose first entry's ID is at most `id`, if any.
fn locate<K: Keyspace + ?Sized>(ks: &mut K, h: &Header, id: StreamId) -> Result<Option<u64>, Fail> {
    let (mut lo, mut hi, mut found) = (h.head, h.tail, None);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let Some(n) = next_node(ks, h, mid).filter(|&n| n < hi) else {
            hi = mid;
            continue;
        };
        let node = read_node(ks, h.gen, n)?.expect("a node found by scan is stored");
        if node.entries[0].id <= id {
            found = Some(n);
            lo = n + 1;
        } else {
            hi = mid;
        }
    }
    Ok(found)
}

/// Live entries with IDs in `start..=end`, ascending (or descending if
/// `rev`), at most `count` (0: all).
fn range<K: Keyspace + ?Sized>(ks: &mut K, h: &Header, start: StreamId, end: StreamId, count: usize, rev: bool) -> Result<Vec<Entry>, Fail> {
    let mut out = Vec::new();
    if h.length == 0 || start > end {
        return Ok(out);
    }
    let full = |out: &Vec<Entry>| count > 0 && out.len() >= count;
    if !rev {
        let mut at = match locate(ks, h, start)? {
            Some(n) => Some(n),
            None => next_node(ks, h, h.head),
        };
        while let Some(n) = at {
            let node = read_node(ks, h.gen, n)?.expect("a located node is stored");
            for e in node.entries {
                if e.id > end {
                    return Ok(out);
                }
                if e.id >= start && !e.deleted {
                    out.push(e);
                    if full(&out) {
                        return Ok(out);
                    }
                }
            }
            at = next_node(ks, h, n + 1);
        }
    } else {
        let mut at = locate(ks, h, end)?;
        while let Some(n) = at {
            let node = read_node(ks, h.gen, n)?.expect("a located node is stored");
            for e in node.entries.into_iter().rev() {
                if e.id < start {
                    return Ok(out);
                }
                if e.id <= end && !e.deleted {
                    out.push(e);
                    if full(&out) {
                        return Ok(out);
                    }
                }
            }
            at = prev_node(ks, h, n);
        }
    }
    Ok(out)
}

/// The first live entry's ID, or 0-0.
fn first_live<K: Keyspace + ?Sized>(ks: &mut K, h: &Header) -> Result<StreamId, Fail> {
    Ok(range(ks, h, StreamId::MIN, StreamId::MAX, 1, false)?.first().map_or(StreamId::MIN, |e| e.id))
}

/// One entry as Redis answers it: `[id, [field, value, ...]]`.
fn reply_entry<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, e: &Entry) {
    c.out.array(2);
    c.out.bulk(e.id.text().as_bytes());
    c.out.array(2 * e.fields.len());
    for (f, v) in &e.fields {
        c.out.bulk(f);
        c.out.bulk(v);
    }
}

fn reply_entries<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, entries: &[Entry]) {
    c.out.array(entries.len());
    for e in entries {
        reply_entry(c, e);
    }
}

/// The node sizes the server is configured with.
fn limits<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> NodeLimits {
    c.server.config.stream_nodes
}

/// How XADD and XTRIM trim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
    None,
    MaxLen(u64),
    MinId(StreamId),
}

#[derive(Debug)]
struct TrimArgs {
    strategy: Strategy,
    approx: bool,
    /// Most entries to remove (0: no bound).
    limit: u64,
    no_mkstream: bool,
    /// XADD: the ID argument's position, the ID if given, and whether its
    /// sequence was.
    id_pos: usize,
    id: Option<StreamId>,
    seq_given: bool,
}

/// Redis's `streamParseAddOrTrimArgsOrReply`.
fn parse_trim_args<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, xadd: bool) -> Result<TrimArgs, Fail> {
    let mut a = TrimArgs { strategy: Strategy::None, approx: false, limit: 0, no_mkstream: false, id_pos: 0, id: None, seq_given: true };
    let mut limit_given = false;
    let mut i = 2;
    while i < c.argc() {
        let more = c.argc() - 1 - i;
        let opt = c.arg(i);
        if xadd && opt == b"*" {
            break;
        } else if (opt.eq_ignore_ascii_case(b"maxlen") || opt.eq_ignore_ascii_case(b"minid")) && more > 0 {
            if a.strategy != Strategy::None {
                return Err(Fail::err("syntax error, MAXLEN and MINID options at the same time are not compatible"));
            }
            a.approx = false;
            let next = c.arg(i + 1);
            if more >= 2 && next == b"~" {
                a.approx = true;
                i += 1;
            } else if more >= 2 && next == b"=" {
                i += 1;
            }
            if opt.eq_ignore_ascii_case(b"maxlen") {
                let n = c.int_arg(i + 1)?;
                if n < 0 {
                    return Err(Fail::err("The MAXLEN argument must be >= 0."));
                }
                a.strategy = Strategy::MaxLen(n as u64);
            } else {
                a.strategy = Strategy::MinId(parse_id(c.arg(i + 1), 0, true, None)?);
            }
            i += 1;
        } else if opt.eq_ignore_ascii_case(b"limit") && more > 0 {
            let n = c.int_arg(i + 1)?;
            if n < 0 {
                return Err(Fail::err("The LIMIT argument must be >= 0."));
            }
            a.limit = n as u64;
            limit_given = true;
            i += 1;
        } else if xadd && opt.eq_ignore_ascii_case(b"nomkstream") {
            a.no_mkstream = true;
        } else if xadd {
            let mut given = true;
            a.id = Some(parse_id(opt, 0, true, Some(&mut given))?);
            a.seq_given = given;
            break;
        } else {
            return Err(Fail::Syntax);
        }
        i += 1;
    }
    a.id_pos = i;
    if a.limit > 0 && a.strategy == Strategy::None {
        return Err(Fail::err("syntax error, LIMIT cannot be used without specifying a trimming strategy"));
    }
    if !xadd && a.strategy == Strategy::None {
        return Err(Fail::err("syntax error, XTRIM must be called with a trimming strategy"));
    }
    if limit_given {
        if !a.approx {
            return Err(Fail::err("syntax error, LIMIT cannot be used without the special ~ option"));
        }
    } else if a.approx {
        // At most 100 nodes' worth, bounded both ways as Redis bounds it.
        a.limit = match limits(c).max_entries.saturating_mul(100) {
            0 => 10_000,
            n => n.min(1_000_000),
        };
    }
    Ok(a)
}

/// Redis's `streamTrim`: removes entries from the head by `a`'s strategy;
/// how many. Updates `h` (the caller writes it).
fn trim<K: Keyspace + ?Sized>(ks: &mut K, h: &mut Header, a: &TrimArgs) -> Result<u64, Fail> {
    if a.strategy == Strategy::None {
        return Ok(0);
    }
    let mut deleted = 0u64;
    let mut at = next_node(ks, h, h.head);
    while let Some(n) = at {
        if let Strategy::MaxLen(max) = a.strategy {
            if h.length <= max {
                break;
            }
        }
        let mut node = read_node(ks, h.gen, n)?.expect("a scanned node is stored");
        let entries = node.live() as u64;
        if a.limit > 0 && deleted + entries > a.limit {
            break;
        }
        let remove = match a.strategy {
            Strategy::MaxLen(max) => h.length - entries >= max,
            Strategy::MinId(min) => node.entries.last().expect("a stored node has entries").id < min,
            Strategy::None => unreachable!("returned above"),
        };
        if remove {
            delete_node(ks, h.gen, n)?;
            h.length -= entries;
            deleted += entries;
            h.head = n + 1;
            at = next_node(ks, h, n + 1);
            continue;
        }
        if a.approx {
            break;
        }
        for e in &mut node.entries {
            let stop = match a.strategy {
                Strategy::MaxLen(max) => h.length <= max,
                Strategy::MinId(min) => e.id >= min,
                Strategy::None => unreachable!("returned above"),
            };
            if stop {
                break;
            }
            if !e.deleted {
                e.deleted = true;
                h.length -= 1;
                deleted += 1;
            }
        }
        write_node(ks, h.gen, n, &node)?;
        break;
    }
    if h.length == 0 {
        h.first_id = StreamId::MIN;
        h.head = h.tail;
    } else if deleted > 0 {
        h.head = next_node(ks, h, h.head).expect("a stream with entries has a node");
        h.first_id = first_live(ks, h)?;
    }
    Ok(deleted)
}

/// XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value [field value ...]
pub(super) fn xadd<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let a = parse_trim_args(c, true)?;
    let field_pos = a.id_pos + 1;
    if c.argc() < field_pos + 2 || (c.argc() - field_pos) % 2 == 1 {
        return Err(Fail::err("wrong number of arguments for 'xadd' command"));
    }
    if a.id == Some(StreamId::MIN) && a.seq_given {
        return Err(Fail::err("The ID specified in XADD must be greater than 0-0"));
    }
    let key = c.arg(1);
    let mut h = match load(c, key)? {
        Some(h) => h,
        None if a.no_mkstream => {
            c.out.null();
            return Ok(());
        }
        None => Header::new(next_generation(c.ks)?),
    };
    if h.last_id == StreamId::MAX {
        return Err(Fail::err("The stream has exhausted the last possible ID, unable to add more items"));
    }
    let id = match a.id {
        Some(given) if a.seq_given => Some(given),
        Some(given) if given.ms == h.last_id.ms => h.last_id.next().filter(|_| h.last_id.seq != u64::MAX),
        Some(given) => Some(given),
        None => {
            let now = c.now_ms().max(0) as u64;
            if now > h.last_id.ms { Some(StreamId { ms: now, seq: 0 }) } else { h.last_id.next() }
        }
    };
    let Some(id) = id.filter(|&id| id > h.last_id) else {
        return Err(Fail::err("The ID specified in XADD is equal or smaller than the target stream top item"));
    };
    let fields: Vec<(Vec<u8>, Vec<u8>)> = (field_pos..c.argc()).step_by(2).map(|j| (c.arg(j).to_vec(), c.arg(j + 1).to_vec())).collect();
    let entry = Entry { id, deleted: false, fields };
    let bytes = entry.encoded_len();
    if bytes as u64 > c.ks.limits().max_value_bytes {
        return Err(Fail::err("Elements are too large to be stored"));
    }
    let node_limits = limits(c);
    append(c.ks, &mut h, &entry, node_limits)?;
    h.length += 1;
    h.entries_added += 1;
    h.last_id = id;
    if h.length == 1 {
        h.first_id = id;
    }
    let trimmed = trim(c.ks, &mut h, &a)?;
    write_header(c.ks, key, &h)?;
    c.notify(ev::XADD, key);
    if trimmed > 0 {
        c.notify(ev::XTRIM, key);
    }
    c.out.bulk(id.text().as_bytes());
    Ok(())
}

/// XLEN key
pub(super) fn xlen<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let n = load(c, c.arg(1))?.map_or(0, |h| h.length);
    c.out.integer(n as i64);
    Ok(())
}

/// Redis's `streamParseIntervalIDOrReply`: `(id` excludes the ID.
fn interval(arg: &[u8], missing: u64) -> Result<(StreamId, bool), Fail> {
    match arg.strip_prefix(b"(").filter(|_| arg.len() > 1) {
        Some(rest) => Ok((parse_id(rest, missing, true, None)?, true)),
        None => Ok((parse_id(arg, missing, false, None)?, false)),
    }
}

/// A range's start as XRANGE, XPENDING and XAUTOCLAIM read it.
fn interval_start(arg: &[u8]) -> Result<StreamId, Fail> {
    let (start, excluded) = interval(arg, 0)?;
    if !excluded {
        return Ok(start);
    }
    start.next().ok_or_else(|| Fail::err("invalid start ID for the interval"))
}

/// A range's end as XRANGE and XPENDING read it.
fn interval_end(arg: &[u8]) -> Result<StreamId, Fail> {
    let (end, excluded) = interval(arg, u64::MAX)?;
    if !excluded {
        return Ok(end);
    }
    end.prev().ok_or_else(|| Fail::err("invalid end ID for the interval"))
}

/// XRANGE key start end [COUNT n], XREVRANGE key end start [COUNT n].
pub(super) fn xrange<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>, rev: bool) -> Res {
    let (start_arg, end_arg) = if rev { (c.arg(3), c.arg(2)) } else { (c.arg(2), c.arg(3)) };
    let start = interval_start(start_arg)?;
    let end = interval_end(end_arg)?;
    let mut count: i64 = -1;
    let mut j = 4;
    while j < c.argc() {
        if c.arg(j).eq_ignore_ascii_case(b"count") && j + 1 < c.argc() {
            count = c.int_arg(j + 1)?.max(0);
            j += 2;
        } else {
            return Err(Fail::Syntax);
        }
    }
    let Some(h) = load(c, c.arg(1))? else {
        c.out.array(0);
        return Ok(());
    };
    if count == 0 {
        c.out.null_array();
        return Ok(());
    }
    let entries = range(c.ks, &h, start, end, count.max(0) as usize, rev)?;
    reply_entries(c, &entries);
    Ok(())
}

/// XDEL key id [id ...]: how many were deleted.
pub(super) fn xdel<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let key = c.arg(1);
    let Some(mut h) = load(c, key)? else {
        c.out.integer(0);
        return Ok(());
    };
    let ids = (2..c.argc()).map(|j| parse_id(c.arg(j), 0, true, None)).collect::<Result<Vec<_>, _>>()?;
    let (mut deleted, mut first) = (0u64, false);
    for id in ids {
        let Some(n) = locate(c.ks, &h, id)? else { continue };
        let mut node = read_node(c.ks, h.gen, n)?.expect("a located node is stored");
        let Some(e) = node.entries.iter_mut().find(|e| e.id == id && !e.deleted) else { continue };
        e.deleted = true;
        if node.live() == 0 {
            delete_node(c.ks, h.gen, n)?;
            if n == h.head {
                h.head = next_node(c.ks, &h, n + 1).unwrap_or(h.tail);
            }
            if n + 1 == h.tail {
                h.tail = prev_node(c.ks, &h, n).map_or(h.head, |p| p + 1);
            }
        } else {
            write_node(c.ks, h.gen, n, &node)?;
        }
        h.length -= 1;
        first |= id == h.first_id;
        h.max_deleted = h.max_deleted.max(id);
        deleted += 1;
    }
    if deleted > 0 {
        if h.length == 0 {
            h.first_id = StreamId::MIN;
            h.head = h.tail;
        } else if first {
            h.first_id = first_live(c.ks, &h)?;
        }
        write_header(c.ks, key, &h)?;
    }
    c.out.integer(deleted as i64);
    Ok(())
}

/// XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]: how many were removed.
pub(super) fn xtrim<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let a = parse_trim_args(c, false)?;
    let key = c.arg(1);
    let Some(mut h) = load(c, key)? else {
        c.out.integer(0);
        return Ok(());
    };
    let deleted = trim(c.ks, &mut h, &a)?;
    if deleted > 0 {
        write_header(c.ks, key, &h)?;
    }
    c.out.integer(deleted as i64);
    Ok(())
}

/// COPY's part: the stream of header `h` stored at `to` with nodes of a
/// fresh generation, with the deadline `expiry` says.
pub(super) fn copy_stream<K: Keyspace + ?Sized>(ks: &mut K, h: &Header, to: &[u8], expiry: Expiry) -> Res {
    let mut copy = *h;
    copy.gen = next_generation(ks)?;
    let mut at = next_node(ks, h, h.head);
    while let Some(n) = at {
        let node = read_node(ks, h.gen, n)?.expect("a scanned node is stored");
        write_node(ks, copy.gen, n, &node)?;
        at = next_node(ks, h, n + 1);
    }
    groups::copy_groups(ks, h.gen, copy.gen)?;
    ks.put(to, Kind::Stream, ValueSource::Owned(copy.encode()), expiry)?;
    Ok(())
}

/// DUMP's part: the stream of header `h` whole, its nodes (deleted
/// entries kept, as Redis's listpacks keep them) and its groups.
pub(super) fn snapshot<K: Keyspace + ?Sized>(ks: &mut K, h: &Header) -> Result<crate::rdb::StreamValue, Fail> {
    let mut nodes = Vec::new();
    let mut at = next_node(ks, h, h.head);
    while let Some(n) = at {
        nodes.push(read_node(ks, h.gen, n)?.expect("a scanned node is stored").entries);
        at = next_node(ks, h, n + 1);
    }
    Ok(crate::rdb::StreamValue {
        nodes,
        length: h.length,
        last_id: h.last_id,
        first_id: h.first_id,
        max_deleted: h.max_deleted,
        entries_added: h.entries_added,
        groups: groups::snapshot_groups(ks, h.gen)?,
    })
}

/// RESTORE's part: `s` stored at `to` (absent now) under a fresh
/// generation, one node per payload node, with the deadline `expiry` says.
pub(super) fn restore_stream<K: Keyspace + ?Sized>(ks: &mut K, to: &[u8], s: &crate::rdb::StreamValue, expiry: Expiry) -> Res {
    let mut h = Header::new(next_generation(ks)?);
    for (n, entries) in s.nodes.iter().enumerate() {
        let node = Node { entries: entries.clone() };
        assert!(node.live() > 0, "a restored node has a live entry");
        ks.internal_put(&chunk_key(h.gen, n as u64), &node.encode())?;
    }
    h.tail = s.nodes.len() as u64;
    h.length = s.length;
    h.last_id = s.last_id;
    h.first_id = s.first_id;
    h.max_deleted = s.max_deleted;
    h.entries_added = s.entries_added;
    h.groups_made = s.groups.len() as u64;
    groups::restore_groups(ks, h.gen, &s.groups)?;
    ks.put(to, Kind::Stream, ValueSource::Owned(h.encode()), expiry)?;
    Ok(())
}

/// The last live entry's ID of a stream with entries.
fn last_live_of<K: Keyspace + ?Sized>(ks: &mut K, h: &Header) -> Result<StreamId, Fail> {
    assert!(h.length > 0);
    Ok(range(ks, h, StreamId::MIN, StreamId::MAX, 1, true)?.first().expect("a stream with entries has a live one").id)
}

/// Each node's first entry's ID, deleted or not (Redis's radix tree keys,
/// a listpack's master ID), in order.
fn node_masters<K: Keyspace + ?Sized>(ks: &mut K, h: &Header) -> Result<Vec<StreamId>, Fail> {
    let mut out = Vec::new();
    let mut at = next_node(ks, h, h.head);
    while let Some(n) = at {
        out.push(read_node(ks, h.gen, n)?.expect("a scanned node is stored").entries[0].id);
        at = next_node(ks, h, n + 1);
    }
    Ok(out)
}

/// The ID of the last live entry of the stream at `key`, if it is a stream
/// with entries (Redis's `streamLastValidID`): what an XREAD waiter's ID is
/// compared with.
pub(crate) fn last_live_id<K: Keyspace + ?Sized>(ks: &mut K, key: &[u8]) -> Option<StreamId> {
    let s = ks.get(key).filter(|s| s.kind == Kind::Stream)?;
    let mut bytes = Vec::new();
    ks.read(&s.value, &mut bytes);
    let h = Header::decode(&bytes).ok().filter(|h| h.length > 0)?;
    range(ks, &h, StreamId::MIN, StreamId::MAX, 1, true).ok()?.first().map(|e| e.id)
}

/// XREAD [COUNT count] [BLOCK ms] STREAMS key [key ...] id [id ...]: for
/// each stream with entries past its ID, `[key, entries]` (RESP3: a map);
/// the null array if none has any, or, with BLOCK, the session waits.
/// XREADGROUP GROUP group consumer [COUNT count] [BLOCK ms] [NOACK]
/// STREAMS key [key ...] id [id ...] is the same command in Redis
/// (`xreadCommand`): `>` reads the group's new entries, another ID the
/// consumer's history ([`groups::read_group`]).
pub(super) fn xread<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let xreadgroup = c.arg(0).len() == 10;
    let (mut timeout_ms, mut count, mut streams_at) = (None, 0u64, 0usize);
    let (mut group, mut noack) = (None, false);
    let mut i = 1;
    while i < c.argc() {
        let more = c.argc() - i - 1;
        let opt = c.arg(i);
        if opt.eq_ignore_ascii_case(b"block") && more > 0 {
            if c.server.in_script {
                return Err(Fail::err(&format!("{} command is not allowed with BLOCK option from scripts", String::from_utf8_lossy(c.arg(0)))));
            }
            i += 1;
            let ms = parse_i64(c.arg(i)).ok_or_else(|| Fail::err("timeout is not an integer or out of range"))?;
            if ms < 0 {
                return Err(Fail::err("timeout is negative"));
            }
            timeout_ms = Some(ms as u64);
        } else if opt.eq_ignore_ascii_case(b"count") && more > 0 {
            i += 1;
            count = c.int_arg(i)?.max(0) as u64;
        } else if opt.eq_ignore_ascii_case(b"streams") && more > 0 {
            streams_at = i + 1;
            if (c.argc() - streams_at) % 2 != 0 {
                return Err(Fail::err("Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified."));
            }
            break;
        } else if opt.eq_ignore_ascii_case(b"group") && more >= 2 {
            if !xreadgroup {
                return Err(Fail::err("The GROUP option is only supported by XREADGROUP. You called XREAD instead."));
            }
            group = Some((c.arg(i + 1), c.arg(i + 2)));
            i += 2;
        } else if opt.eq_ignore_ascii_case(b"noack") {
            if !xreadgroup {
                return Err(Fail::err("The NOACK option is only supported by XREADGROUP. You called XREAD instead."));
            }
            noack = true;
        } else {
            return Err(Fail::Syntax);
        }
        i += 1;
    }
    if streams_at == 0 {
        return Err(Fail::Syntax);
    }
    if xreadgroup && group.is_none() {
        return Err(Fail::err("Missing GROUP option for XREADGROUP"));
    }
    let n = (c.argc() - streams_at) / 2;
    // Each stream's ID, in order: type checks, groups and IDs as Redis
    // reads them. `>` is the largest ID, as in Redis.
    let mut from = Vec::with_capacity(n);
    for j in 0..n {
        let key = c.arg(streams_at + j);
        let h = load(c, key)?;
        if let Some((name, _)) = group {
            let found = match h.as_ref() {
                Some(h) => groups::find_group(c.ks, h.gen, name)?.is_some(),
                None => false,
            };
            if !found {
                return Err(Fail::Text(format!(
                    "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                    groups::shown(key),
                    groups::shown(name)
                )));
            }
        }
        let id = match c.arg(streams_at + n + j) {
            b"$" if xreadgroup => return Err(Fail::err("The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.")),
            b"$" => h.map_or(StreamId::MIN, |h| h.last_id),
            b">" if xreadgroup => StreamId::MAX,
            b">" => return Err(Fail::err("The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.")),
            arg => parse_id(arg, 0, true, None)?,
        };
        from.push((key.to_vec(), id, h));
    }
    let mut served = Vec::new();
    for (key, id, h) in &from {
        let Some(h) = h else { continue };
        if let Some((name, consumer)) = group {
            let read = groups::GroupRead { key, group: name, consumer, noack };
            if let Some(entries) = groups::read_group(c, h, *id, count, &read)? {
                served.push((key.clone(), entries));
            }
            continue;
        }
        if h.length == 0 {
            continue;
        }
        let Some(start) = id.next() else { continue };
        let entries = range(c.ks, h, start, StreamId::MAX, count as usize, false)?;
        if !entries.is_empty() {
            served.push((key.clone(), entries.into_iter().map(|e| (e.id, Some(e))).collect()));
        }
    }
    if !served.is_empty() {
        // RESP2: an array of `[key, entries]` pairs; RESP3: a map.
        let resp2 = c.session.protocol == pmwire_resp::reply::Protocol::Resp2;
        if resp2 { c.out.array(served.len()) } else { c.out.map(served.len()) }
        for (key, entries) in &served {
            if resp2 {
                c.out.array(2);
            }
            c.out.bulk(key);
            groups::reply_read(c, entries);
        }
        return Ok(());
    }
    let Some(timeout_ms) = timeout_ms else {
        c.out.null_array();
        return Ok(());
    };
    if c.server.deny_blocking {
        c.out.null_array();
        return Ok(());
    }
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for (key, _, _) in &from {
        if !keys.contains(key) {
            keys.push(key.clone());
        }
    }
    let from = from.into_iter().map(|(k, id, _)| (k, id)).collect();
    let count = if count == 0 { XREAD_BLOCKED_DEFAULT_COUNT } else { count };
    let op = match group {
        Some((name, consumer)) => super::blocking::Op::XReadGroup { count, group: name.to_vec(), consumer: consumer.to_vec(), noack },
        None => super::blocking::Op::XRead { count, from },
    };
    c.session.blocked = Some(super::blocking::Blocked { keys, timeout_ms, op });
    Ok(())
}

/// Entries a served XREAD BLOCK without COUNT answers with at most (Redis's
/// `XREAD_BLOCKED_DEFAULT_COUNT`).
const XREAD_BLOCKED_DEFAULT_COUNT: u64 = 1000;
