//! Blocking pops: the lists' `BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP` (and
//! `LMPOP`), the sorted sets' `BZPOPMIN BZPOPMAX BZMPOP`, as Redis 7.0's
//! `blocked.c`, `t_list.c` and `t_zset.c` serve them; and the waits of
//! XREAD and XREADGROUP with BLOCK (parsed in [`super::streams`]).
//!
//! A blocking command first parses its timeout, then looks at its keys in
//! order: a wrong type answers WRONGTYPE, the first non-empty list (sorted
//! set) is popped at once (the reply is the non-blocking one's; BZPOPMIN's
//! `[key, member, score]`). Inside EXEC or a script (Redis's
//! `CLIENT_DENY_BLOCKING`) an empty wait answers at once: BLPOP, BRPOP,
//! BLMPOP and the sorted sets' the null array, BLMOVE and BRPOPLPUSH the
//! null bulk. Otherwise
//! the command *blocks*: it writes no reply, the session records what it
//! waits for ([`Blocked`]), the server queues its client id on every key
//! ([`Waiters`], FIFO per key), and [`super::Server::execute`] returns
//! [`super::Flow::Block`]. The caller then holds the connection's further
//! requests and answers nothing more for it until it is served or times out.
//!
//! Wake-ups: a command that stores a list, sorted set or stream at a key
//! someone waits on (a push, ZADD, ZUNIONSTORE, LMOVE's destination, RENAME
//! or COPY onto it, a served BLMOVE's destination) marks the key *ready*,
//! in the order writes happen. After each top-level command the caller
//! serves the ready keys ([`super::Server::next_ready`],
//! [`super::Server::serve_blocked`]): for each key, its waiters in the order
//! they blocked, while it holds what they wait for (a list pop a list, a
//! sorted-set pop a sorted set); each is served as if it ran the command at
//! that moment on that key alone with nothing to wait for (`LPOP key
//! [count]`, `RPOP key [count]`, `LMOVE key dst from to`, `BZPOPMIN key 0`,
//! `ZMPOP 1 key MIN count`; answered `[key, element]`, `[key, [elements]]`,
//! the element, `[key, member, score]`, `[key, [[member, score]...]]`), so
//! its writes are staged with the batch and durable before its reply, and
//! WATCH sees them. A key that does not hold what a waiter waits for keeps
//! it waiting, except an XREADGROUP waiter, answered an error once its
//! stream or group is gone: a key deleted, overwritten or flushed away is
//! made ready for it ([`Waiters::touched`], [`Waiters::flushed`]).
//!
//! Timeouts are the caller's: [`super::Server::blocked_timeout_ms`] says how
//! long (0: for ever), and on expiry the caller unblocks the session
//! ([`super::Server::unblock`]) and sends [`super::Server::timed_out_reply`].
//! CLIENT UNBLOCK takes the client off its keys at once and leaves the
//! answer to the caller ([`super::Server::take_unblocked`]).
//!
//! Invariants: a session is in `by_key[k]` exactly when its `blocked` names
//! `k`; `ready` holds each key once; `clients` counts blocked sessions.

use std::collections::{HashMap, HashSet, VecDeque};

use super::list_ops::{self, End};
use super::{zsets, Ctx, Fail, Res};
use crate::store::{Keyspace, Kind};
use pmwire_resp::reply::ReplySink;

/// What a blocked session waits for.
#[derive(Debug, Clone)]
pub(crate) struct Blocked {
    /// The keys, in the command's order, each once.
    pub keys: Vec<Vec<u8>>,
    /// How long to wait, ms; 0: for ever.
    pub timeout_ms: u64,
    /// What serving it runs.
    pub op: Op,
}

/// The non-blocking form a served session runs on the ready key.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// BLPOP / BRPOP: `LPOP key` / `RPOP key`, answered `[key, element]`.
    Pop(End),
    /// BLMOVE / BRPOPLPUSH: `LMOVE key dst from to`, answered as LMOVE.
    Move { dst: Vec<u8>, from: End, to: End },
    /// BLMPOP: `LPOP key count` / `RPOP key count`, answered `[key, [elements]]`.
    MPop { end: End, count: u64 },
    /// BZPOPMIN / BZPOPMAX (`max`): `BZPOPMIN key 0` / `BZPOPMAX key 0` on
    /// the ready key alone, which holds a sorted set and so pops at once,
    /// answered `[key, member, score]` (Redis's `genericZpopCommand` with the
    /// key emitted).
    ZPop { max: bool },
    /// BZMPOP: `ZMPOP 1 key MIN|MAX COUNT count`, answered
    /// `[key, [[member, score]...]]`.
    ZMPop { max: bool, count: u64 },
    /// XREAD BLOCK: `XREAD COUNT count STREAMS key id` on the key with an
    /// entry past the ID this session waits beyond there (`$` resolved when
    /// it blocked), answered as that XREAD.
    XRead { count: u64, from: Vec<(Vec<u8>, crate::stream::StreamId)> },
    /// XREADGROUP BLOCK (every ID `>`): `XREADGROUP GROUP group consumer
    /// COUNT count [NOACK] STREAMS key >` on the key once the stream holds an
    /// entry past the group's last ID, answered as that XREADGROUP; the
    /// `-UNBLOCKED` error once the key holds no stream, `-NOGROUP` once the
    /// group is gone (Redis 7.0's `serveClientsBlockedOnStreamKey` and
    /// `unblockDeletedStreamReadgroupClients`).
    XReadGroup { count: u64, group: Vec<u8>, consumer: Vec<u8>, noack: bool },
}

/// Which sessions wait on which keys, and the keys made ready.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    by_key: HashMap<Vec<u8>, VecDeque<u64>>,
    /// The keys of each blocked client.
    keys: HashMap<u64, Vec<Vec<u8>>>,
    /// Clients CLIENT UNBLOCK released (no longer queued), and whether with
    /// the error.
    unblocked: Vec<(u64, bool)>,
    ready: VecDeque<Vec<u8>>,
    ready_set: HashSet<Vec<u8>>,
    clients: usize,
    /// XREAD waiters: the ID each waits beyond on each of its streams.
    stream_from: HashMap<u64, HashMap<Vec<u8>, crate::stream::StreamId>>,
    /// XREADGROUP waiters: the group each waits in.
    stream_group: HashMap<u64, Vec<u8>>,
    /// Sorted-set pop waiters (BZPOPMIN BZPOPMAX BZMPOP).
    sorted: HashSet<u64>,
}

impl Waiters {
    pub fn is_empty(&self) -> bool {
        self.clients == 0
    }

    pub fn clients(&self) -> usize {
        self.clients
    }

    /// Whether `client` is blocked (CLIENT LIST's `b`).
    pub fn is_waiting(&self, client: u64) -> bool {
        self.keys.contains_key(&client)
    }

    pub fn block(&mut self, client: u64, keys: &[Vec<u8>]) {
        for key in keys {
            self.by_key.entry(key.clone()).or_default().push_back(client);
        }
        assert!(self.keys.insert(client, keys.to_vec()).is_none(), "client {client} blocked twice");
        self.clients += 1;
    }

    /// `client`, blocked, waits for an entry past `from`'s ID on each of
    /// its streams (XREAD).
    pub fn wait_for_entries(&mut self, client: u64, from: &[(Vec<u8>, crate::stream::StreamId)]) {
        self.stream_from.insert(client, from.iter().cloned().collect());
    }

    /// `client`, blocked, waits in consumer group `group` (XREADGROUP).
    pub fn wait_in_group(&mut self, client: u64, group: &[u8]) {
        self.stream_group.insert(client, group.to_vec());
    }

    /// `client`, blocked, waits for a sorted set (BZPOPMIN, BZPOPMAX, BZMPOP).
    pub fn wait_for_sorted_set(&mut self, client: u64) {
        self.sorted.insert(client);
    }

    /// A key was written, deleted or overwritten: ready if an XREADGROUP
    /// waits on it (its stream or group may be gone: Redis signals a
    /// deleted stream's key for them).
    pub fn touched(&mut self, key: &[u8]) {
        let group_waits = self.by_key.get(key).is_some_and(|q| q.iter().any(|c| self.stream_group.contains_key(c)));
        if group_waits {
            self.written(key);
        }
    }

    /// The keyspace was flushed: every key an XREADGROUP waits on is ready
    /// (in key order), as Redis 7.0's `scanDatabaseForDeletedStreams` signals
    /// each of them (a waiter's key holds a stream until a write that changes
    /// that has already made it ready).
    pub fn flushed(&mut self) {
        let mut keys: Vec<Vec<u8>> = self.by_key.keys().cloned().collect();
        keys.sort_unstable();
        keys.iter().for_each(|k| self.touched(k));
    }

    /// `client` waits no more (nothing if it does not wait: CLIENT UNBLOCK
    /// released it already).
    pub fn unblock(&mut self, client: u64) {
        self.stream_from.remove(&client);
        self.stream_group.remove(&client);
        self.sorted.remove(&client);
        let Some(keys) = self.keys.remove(&client) else { return };
        for key in &keys {
            let queue = self.by_key.get_mut(key).expect("a blocked session is queued on each of its keys");
            queue.retain(|&c| c != client);
            if queue.is_empty() {
                self.by_key.remove(key);
            }
        }
        assert!(self.clients > 0);
        self.clients -= 1;
    }

    pub fn take_unblocked(&mut self) -> Vec<(u64, bool)> {
        std::mem::take(&mut self.unblocked)
    }

    /// A list, sorted set or stream was stored at `key`: ready if someone
    /// waits on it.
    pub fn written(&mut self, key: &[u8]) {
        if self.by_key.contains_key(key) && !self.ready_set.contains(key) {
            self.ready_set.insert(key.to_vec());
            self.ready.push_back(key.to_vec());
        }
    }

    /// The first waiter of the first ready key, the key staying ready; a
    /// ready key with no waiter left is dropped.
    fn front(&mut self) -> Option<(Vec<u8>, u64)> {
        while let Some(key) = self.ready.front() {
            if let Some(&client) = self.by_key.get(key).and_then(|q| q.front()) {
                return Some((key.clone(), client));
            }
            self.drop_front();
        }
        None
    }

    fn drop_front(&mut self) {
        if let Some(key) = self.ready.pop_front() {
            self.ready_set.remove(&key);
        }
    }
}

/// Redis 7.0's `getTimeoutFromObjectOrReply` in seconds: the argument as
/// a `long double` (`string2ld`), times 1000 in `long double` (rounded to
/// its 64-bit significand, to nearest, ties to even), then rounded up to a
/// whole millisecond (`ceill`) and converted to `long long` (x86-64's
/// conversion gives `LLONG_MIN` for anything out of range, infinities
/// included, which then reads as negative). 0: for ever. So a fraction of
/// a millisecond waits one (`BLPOP k 0.001`, `1e-5`), and a negative one
/// rounds up to 0, for ever, as redis-server 7.0.15 does.
pub(crate) fn timeout_ms(arg: &[u8]) -> Result<u64, Fail> {
    use crate::extended::{parse, Ext};
    let negative_error = || Fail::err("timeout is negative");
    let Some(v) = parse(arg) else {
        return Err(Fail::err("timeout is not a float or out of range"));
    };
    let (negative, m, q) = match v {
        Ext::Finite { negative, m, q } => (negative, m, q),
        Ext::Inf { .. } => return Err(negative_error()),
        #[allow(unreachable_patterns)]
        _ => return Err(Fail::err("timeout is not a float or out of range")),
    };
    // The product, rounded to a 64-bit significand: (p, e) = p × 2^e.
    let exact = u128::from(m) * 1000;
    let spare = (128 - exact.leading_zeros()).saturating_sub(64);
    let (p, e) = if spare == 0 {
        (exact, q)
    } else {
        let (high, low) = (exact >> spare, exact & ((1u128 << spare) - 1));
        let half = 1u128 << (spare - 1);
        let up = low > half || (low == half && high & 1 == 1);
        (high + u128::from(up), q + i64::from(spare))
    };
    // Its magnitude in whole milliseconds: rounded up for a positive
    // timeout (`ceill`), down for a negative one (ceil of -x is -floor x).
    let magnitude: u128 = if e >= 0 {
        if e >= 64 || (p != 0 && p.leading_zeros() < e as u32 + 1) {
            return Err(negative_error()); // beyond 2^127: out of range
        }
        p << e
    } else if e <= -128 {
        u128::from(p != 0 && !negative)
    } else {
        let whole = p >> (-e) as u32;
        let fraction = p & ((1u128 << (-e) as u32) - 1) != 0;
        whole + u128::from(fraction && !negative)
    };
    if magnitude >= 1 << 63 {
        return Err(negative_error());
    }
    if negative && magnitude > 0 {
        return Err(negative_error());
    }
    Ok(magnitude as u64)
}

/// The keys of a BLPOP / BRPOP (all but the first and last arguments),
/// each once, in order.
fn distinct_keys<'r, K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &Ctx<'_, 'r, K, S>,
    from: usize,
    to: usize,
) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for i in from..to {
        if !keys.iter().any(|k| k == c.arg(i)) {
            keys.push(c.arg(i).to_vec());
        }
    }
    keys
}

/// BLPOP / BRPOP key [key ...] timeout.
pub(super) fn bpop<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, end: End) -> Res {
    let last = c.argc() - 1;
    let timeout_ms = timeout_ms(c.arg(last))?;
    for i in 1..last {
        let key = c.arg(i);
        if let Some(values) = list_ops::pop_values(c, key, end, 1)? {
            c.out.array(2);
            c.out.bulk(key);
            c.out.bulk(&values[0]);
            return Ok(());
        }
    }
    if c.server.deny_blocking {
        c.out.null_array();
        return Ok(());
    }
    let keys = distinct_keys(c, 1, last);
    c.session.blocked = Some(Blocked { keys, timeout_ms, op: Op::Pop(end) });
    Ok(())
}

/// LMPOP's and BLMPOP's arguments from `numkeys` at `at`: the keys' range,
/// the end, and the count (1 if not given), checked in Redis's order.
fn mpop_args<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &Ctx<'_, '_, K, S>,
    at: usize,
) -> Result<(std::ops::Range<usize>, End, u64), Fail> {
    let positive =
        |i: usize, msg: &str| pmwire_resp::numbers::parse_i64(c.arg(i)).filter(|&n| n >= 1).ok_or_else(|| Fail::err(msg));
    let numkeys = positive(at, "numkeys should be greater than 0")?;
    let where_at = usize::try_from(numkeys).ok().and_then(|n| (at + 1).checked_add(n)).filter(|&w| w < c.argc());
    let Some(where_at) = where_at else { return Err(Fail::Syntax) };
    let end = list_ops::end_arg(c.arg(where_at))?;
    let mut count = None;
    let mut j = where_at + 1;
    while j < c.argc() {
        if count.is_none() && c.arg(j).eq_ignore_ascii_case(b"count") && j + 1 < c.argc() {
            count = Some(positive(j + 1, "count should be greater than 0")?);
            j += 2;
        } else {
            return Err(Fail::Syntax);
        }
    }
    Ok((at + 1..where_at, end, count.unwrap_or(1) as u64))
}

/// Pops up to `count` from the first non-empty list of `keys` and answers
/// `[key, [elements]]`; false if every key is empty (nothing written).
fn mpop_first<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    keys: std::ops::Range<usize>,
    end: End,
    count: u64,
) -> Result<bool, Fail> {
    for i in keys {
        let key = c.arg(i);
        if let Some(values) = list_ops::pop_values(c, key, end, usize::try_from(count).unwrap_or(usize::MAX))? {
            c.out.array(2);
            c.out.bulk(key);
            c.out.array(values.len());
            for v in &values {
                c.out.bulk(v);
            }
            return Ok(true);
        }
    }
    Ok(false)
}

/// LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count].
pub(super) fn lmpop<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let (keys, end, count) = mpop_args(c, 1)?;
    if !mpop_first(c, keys, end, count)? {
        c.out.null_array();
    }
    Ok(())
}

/// BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count].
pub(super) fn blmpop<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    // Redis 7.0 reads the timeout after the other arguments here.
    let (keys, end, count) = mpop_args(c, 2)?;
    let timeout_ms = timeout_ms(c.arg(1))?;
    if mpop_first(c, keys.clone(), end, count)? {
        return Ok(());
    }
    if c.server.deny_blocking {
        c.out.null_array();
        return Ok(());
    }
    let keys = distinct_keys(c, keys.start, keys.end);
    c.session.blocked = Some(Blocked { keys, timeout_ms, op: Op::MPop { end, count } });
    Ok(())
}

/// BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout.
pub(super) fn blmove<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let from = list_ops::end_arg(c.arg(3))?;
    let to = list_ops::end_arg(c.arg(4))?;
    let timeout_ms = timeout_ms(c.arg(5))?;
    bmove(c, from, to, timeout_ms)
}

/// BRPOPLPUSH source destination timeout: BLMOVE ... RIGHT LEFT.
pub(super) fn brpoplpush<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    let timeout_ms = timeout_ms(c.arg(3))?;
    bmove(c, End::Tail, End::Head, timeout_ms)
}

fn bmove<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(
    c: &mut Ctx<'_, '_, K, S>,
    from: End,
    to: End,
    timeout_ms: u64,
) -> Res {
    let src = c.arg(1);
    if c.get_kind(src, Kind::List)?.is_some() {
        return list_ops::move_one(c, from, to);
    }
    if c.server.deny_blocking {
        c.out.null();
        return Ok(());
    }
    let op = Op::Move { dst: c.arg(2).to_vec(), from, to };
    c.session.blocked = Some(Blocked { keys: vec![src.to_vec()], timeout_ms, op });
    Ok(())
}

/// BZPOPMIN / BZPOPMAX key [key ...] timeout: pops the lowest (highest,
/// `max`) member of the first non-empty sorted set, answered
/// `[key, member, score]` (the score a double in RESP3), else waits.
pub(super) fn bzpop<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>, max: bool) -> Res {
    let last = c.argc() - 1;
    let timeout_ms = timeout_ms(c.arg(last))?;
    for i in 1..last {
        let key = c.arg(i);
        if let Some(popped) = zsets::pop_members(c, key, max, 1)? {
            c.out.array(3);
            c.out.bulk(key);
            c.out.bulk(&popped[0].1);
            c.out.double(popped[0].0);
            return Ok(());
        }
    }
    if c.server.deny_blocking {
        c.out.null_array();
        return Ok(());
    }
    let keys = distinct_keys(c, 1, last);
    c.session.blocked = Some(Blocked { keys, timeout_ms, op: Op::ZPop { max } });
    Ok(())
}

/// BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count]: ZMPOP's pop
/// and reply, else waits.
pub(super) fn bzmpop<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    // Redis 7.0 reads the timeout after the other arguments here, as BLMPOP's.
    let (keys, max, count) = zsets::mpop_args(c, 2)?;
    let timeout_ms = timeout_ms(c.arg(1))?;
    if zsets::mpop_first(c, keys.clone(), max, count)? {
        return Ok(());
    }
    if c.server.deny_blocking {
        c.out.null_array();
        return Ok(());
    }
    let keys = distinct_keys(c, keys.start, keys.end);
    let op = Op::ZMPop { max, count: count as u64 };
    c.session.blocked = Some(Blocked { keys, timeout_ms, op });
    Ok(())
}

/// CLIENT UNBLOCK client-id [TIMEOUT|ERROR]: ends a blocked client's wait
/// now, answered as a time-out (the null array) or with the `UNBLOCKED`
/// error; 1 if it was blocked, else 0.
pub(super) fn client_unblock<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    if c.argc() > 4 {
        let given = String::from_utf8_lossy(c.arg(1)).into_owned();
        return Err(Fail::err(&format!(
            "unknown subcommand or wrong number of arguments for '{given}'. Try CLIENT HELP."
        )));
    }
    let id = c.int_arg(2)?;
    let error = match c.argc() {
        4 if c.arg(3).eq_ignore_ascii_case(b"timeout") => false,
        4 if c.arg(3).eq_ignore_ascii_case(b"error") => true,
        4 => return Err(Fail::err("CLIENT UNBLOCK reason should be TIMEOUT or ERROR")),
        _ => false,
    };
    let Ok(id) = u64::try_from(id) else {
        c.out.integer(0);
        return Ok(());
    };
    if !c.server.waiters.is_waiting(id) {
        c.out.integer(0);
        return Ok(());
    }
    c.server.waiters.unblock(id);
    c.server.waiters.unblocked.push((id, error));
    c.out.integer(1);
    Ok(())
}

/// A sink that keeps a served command's reply, to frame or pass on. List
/// replies are copied bytes, never stored-value handles.
pub(crate) struct Capture(pub Vec<u8>);

impl<V> ReplySink<V> for Capture {
    fn bytes(&mut self, data: &[u8]) {
        self.0.extend_from_slice(data);
    }

    fn value(&mut self, _value: &V, _len: u64) {
        unreachable!("list commands reply with copied bytes");
    }
}

/// The error a client blocked in XREADGROUP for `group` on `key` is
/// answered once the key holds no stream, or the stream no such group
/// (Redis 7.0's `unblockDeletedStreamReadgroupClients` and
/// `serveClientsBlockedOnStreamKey`); `None` while it may wait on.
pub(crate) fn group_gone_error<K: Keyspace + ?Sized>(ks: &mut K, key: &[u8], group: &[u8]) -> Option<&'static str> {
    use super::streams::groups::{group_wait, GroupWait};
    match group_wait(ks, key, group) {
        GroupWait::Gone => Some("UNBLOCKED the stream key no longer exists"),
        GroupWait::NoGroup => Some("NOGROUP the consumer group this client was blocked on no longer exists"),
        GroupWait::Ready | GroupWait::Waiting => None,
    }
}

/// An XREADGROUP's group and streams, from its arguments (`XREADGROUP
/// GROUP group consumer [COUNT n] [BLOCK ms] [NOACK] STREAMS key... id...`);
/// `None` if they are not in that shape.
pub(crate) fn xreadgroup_waits<'a>(args: &[&'a [u8]]) -> Option<(&'a [u8], Vec<&'a [u8]>)> {
    let is = |i: usize, word: &[u8]| args.get(i).is_some_and(|a| a.eq_ignore_ascii_case(word));
    if !is(0, b"xreadgroup") || !is(1, b"group") || args.len() < 4 {
        return None;
    }
    let mut i = 4;
    while i < args.len() && !is(i, b"streams") {
        i += if is(i, b"count") || is(i, b"block") { 2 } else { 1 };
    }
    let rest = args.get(i + 1..).filter(|r| !r.is_empty() && r.len() % 2 == 0)?;
    Some((args[2], rest[..rest.len() / 2].to_vec()))
}

/// The arguments of the non-blocking command that serves `op` on `key`.
pub(crate) fn served_command(op: &Op, key: &[u8]) -> Vec<Vec<u8>> {
    let side = |e: End| if e == End::Head { b"LEFT".to_vec() } else { b"RIGHT".to_vec() };
    match op {
        Op::Pop(End::Head) => vec![b"LPOP".to_vec(), key.to_vec()],
        Op::Pop(End::Tail) => vec![b"RPOP".to_vec(), key.to_vec()],
        Op::Move { dst, from, to } => vec![b"LMOVE".to_vec(), key.to_vec(), dst.clone(), side(*from), side(*to)],
        Op::MPop { end, count } => {
            let name = if *end == End::Head { b"LPOP".to_vec() } else { b"RPOP".to_vec() };
            vec![name, key.to_vec(), count.to_string().into_bytes()]
        }
        Op::ZPop { max } => {
            let name = if *max { b"BZPOPMAX".to_vec() } else { b"BZPOPMIN".to_vec() };
            vec![name, key.to_vec(), b"0".to_vec()]
        }
        Op::ZMPop { max, count } => {
            let side = if *max { b"MAX".to_vec() } else { b"MIN".to_vec() };
            vec![b"ZMPOP".to_vec(), b"1".to_vec(), key.to_vec(), side, b"COUNT".to_vec(), count.to_string().into_bytes()]
        }
        Op::XRead { count, from } => {
            let id = from.iter().find(|(k, _)| k == key).map(|(_, id)| *id).expect("a waiter's stream key");
            let count = count.to_string().into_bytes();
            vec![b"XREAD".to_vec(), b"COUNT".to_vec(), count, b"STREAMS".to_vec(), key.to_vec(), id.text().into_bytes()]
        }
        Op::XReadGroup { count, group, consumer, noack } => {
            let mut args = vec![b"XREADGROUP".to_vec(), b"GROUP".to_vec(), group.clone(), consumer.clone()];
            args.extend([b"COUNT".to_vec(), count.to_string().into_bytes()]);
            if *noack {
                args.push(b"NOACK".to_vec());
            }
            args.extend([b"STREAMS".to_vec(), key.to_vec(), b">".to_vec()]);
            args
        }
    }
}

impl Waiters {
    /// See [`super::Server::next_ready`].
    pub(crate) fn next_ready<K: Keyspace>(&mut self, ks: &mut K) -> Option<(Vec<u8>, u64)> {
        loop {
            let (key, _) = self.front()?;
            // The first waiter, in blocking order, that the key can serve now: a
            // list pop while it holds a list (a sorted-set pop a sorted set: an
            // emptied one is deleted), an XREAD once the stream holds an entry
            // past the ID it waits beyond.
            let kind = ks.get(&key).map(|s| s.kind);
            // The stream's last live entry, read once and only for an XREAD waiter.
            let mut last = None;
            let queue = self.by_key.get(&key).expect("a front key has waiters");
            let served = queue.iter().copied().find(|client| {
                if let Some(group) = self.stream_group.get(client) {
                    return super::streams::groups::group_wait(ks, &key, group) != super::streams::groups::GroupWait::Waiting;
                }
                match self.stream_from.get(client) {
                    Some(from) => {
                        let last = *last.get_or_insert_with(|| super::streams::last_live_id(ks, &key));
                        last.is_some_and(|last| from.get(&key).is_some_and(|&id| last > id))
                    }
                    None if self.sorted.contains(client) => kind == Some(Kind::ZSet),
                    None => kind == Some(Kind::List),
                }
            });
            if let Some(client) = served {
                return Some((key, client));
            }
            self.drop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_convert_as_redis_does() {
        let ok = |s: &str| timeout_ms(s.as_bytes()).ok();
        assert_eq!(ok("0"), Some(0));
        assert_eq!(ok("0.1"), Some(100));
        assert_eq!(ok("1e3"), Some(1_000_000));
        assert_eq!(ok("+0.5"), Some(500));
        assert_eq!(ok("1e-5"), Some(1), "rounded up to a millisecond, as in Redis 7.0");
        assert_eq!(ok("0.001"), Some(1), "not 2: the product is rounded to the long double's 64 bits first");
        assert_eq!(ok("0.0015"), Some(2));
        assert_eq!(ok("0.1"), Some(100));
        assert_eq!(ok("2.5"), Some(2500));
        assert_eq!(ok("-1e-5"), Some(0), "rounded up to 0: for ever, as in Redis 7.0");
        assert_eq!(ok("-0.0001"), Some(0));
        assert_eq!(ok("1.5e-320"), Some(1));
        assert_eq!(ok("0x10"), Some(16_000));
        assert_eq!(ok("9e15"), Some(9_000_000_000_000_000_000));
        let err = |s: &str| timeout_ms(s.as_bytes()).err().map(|f| f.text());
        let negative = Some("ERR timeout is negative".to_string());
        let not_float = Some("ERR timeout is not a float or out of range".to_string());
        for s in ["-1", "inf", "-inf", "1e400", "9223372036854775807", "9.3e15"] {
            assert_eq!(err(s), negative, "{s}");
        }
        for s in ["abc", "nan", " 1", "1 ", ""] {
            assert_eq!(err(s), not_float, "{s}");
        }
    }

    #[test]
    fn waiters_are_served_in_blocking_order_and_forgotten_on_unblock() {
        let mut w = Waiters::default();
        let (a, b) = (b"a".to_vec(), b"b".to_vec());
        w.block(1, &[a.clone(), b.clone()]);
        w.block(2, &[a.clone()]);
        w.written(b"zz");
        assert!(w.front().is_none(), "nobody waits on zz");
        w.written(b"a");
        w.written(b"a");
        assert_eq!(w.front(), Some((a.clone(), 1)));
        w.unblock(1);
        w.unblock(1);
        assert_eq!(w.front(), Some((a.clone(), 2)));
        w.unblock(2);
        assert_eq!(w.front(), None);
        assert!(w.is_empty() && w.by_key.is_empty() && w.ready.is_empty() && w.ready_set.is_empty());
        assert!(w.keys.is_empty());
    }

    #[test]
    fn an_xreadgroup_names_its_group_and_streams() {
        let words = |line: &'static str| line.split(' ').map(str::as_bytes).collect::<Vec<&[u8]>>();
        let waits = |line: &'static str| xreadgroup_waits(&words(line));
        assert_eq!(waits("XREADGROUP GROUP g c BLOCK 0 STREAMS a b > >"), Some((&b"g"[..], vec![&b"a"[..], b"b"])));
        assert_eq!(waits("xreadgroup group g streams count 1 noack block 5 STREAMS s >"), Some((&b"g"[..], vec![&b"s"[..]])), "a consumer named streams");
        assert_eq!(waits("XREADGROUP GROUP g c BLOCK 0 STREAMS a b >"), None, "odd");
        assert_eq!(waits("XREADGROUP GROUP g c BLOCK 0"), None);
        assert_eq!(waits("XREAD BLOCK 0 STREAMS a $"), None);
    }

    #[test]
    fn a_flush_readies_only_the_keys_a_group_waits_on_and_unblock_forgets_every_wait() {
        let mut w = Waiters::default();
        let (a, b, c) = (b"a".to_vec(), b"b".to_vec(), b"c".to_vec());
        w.block(1, &[b.clone()]);
        w.wait_in_group(1, b"g");
        w.block(2, &[a.clone()]);
        w.wait_for_sorted_set(2);
        w.block(3, &[c.clone(), a.clone()]);
        w.wait_in_group(3, b"g");
        w.flushed();
        assert_eq!(Vec::from(w.ready.clone()), vec![a.clone(), b.clone(), c.clone()], "in key order, a for client 3");
        w.block(4, &[b"d".to_vec()]);
        w.flushed();
        assert_eq!(w.ready.len(), 3, "d has no group waiter; the others are ready once");
        for client in 1..=4 {
            w.unblock(client);
        }
        assert!(w.is_empty() && w.by_key.is_empty() && w.sorted.is_empty() && w.stream_group.is_empty());
    }
}
