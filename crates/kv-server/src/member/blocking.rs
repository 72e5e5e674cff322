//! Blocking commands on a member (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP,
//! BZPOPMIN, BZPOPMAX, BZMPOP, and XREAD and XREADGROUP with BLOCK): the
//! client is parked on the member that serves it, leader or follower.
//!
//! The command itself is proposed as an entry at once (an *attempt*): the
//! machine pops if a list (sorted set) holds an element and answers as the
//! blocking command does, or answers [`pmwire_kv_cluster::Applied::blocked`]
//! and changes nothing (`pmwire_kv_cluster`'s "Blocking pops"). A blocked
//! client stays parked here, queued on each of its keys in arrival order;
//! once this member has applied a write to one of its keys, a flush, or a
//! signal that made one ready without a write (XGROUP DESTROY), past the
//! index its last attempt was applied at
//! ([`pmwire_kv_cluster::RedisMachine::writes`],
//! [`pmwire_kv_cluster::RedisMachine::signals`]), the command is proposed
//! again, the waiters of one key in the order they arrived. At its timeout (parsed by the keyspace's own executor, as the
//! single-node server does) a parked client not in an attempt is answered
//! the null reply; one whose attempt is in flight is answered by that
//! attempt (an element it popped is never dropped). An attempt whose
//! outcome is unknown (no majority in time, leadership lost) answers the
//! client `-CLUSTERDOWN`; one certainly not applied is tried again.
//!
//! XREAD BLOCK: an attempt that blocked returns the IDs it waits beyond
//! ([`pmwire_kv_cluster::Applied::xread_from`]: `$` resolved to the
//! stream's last ID at that entry), and later attempts ask beyond those, so
//! an entry added between two attempts is read, as a client blocked in
//! Redis reads it. XREADGROUP `>` needs nothing of the kind: the group
//! remembers what it delivered. An XREADGROUP attempted again after its
//! stream was deleted, overwritten or flushed, or its group destroyed,
//! answers its own NOGROUP error; its waiter is answered what Redis answers
//! a blocked client then ([`pmwire_kv_cluster::Applied::unblocked`]:
//! `-UNBLOCKED the stream key no longer exists`, or the waiter's NOGROUP). Both are proposed as entries, XREAD too
//! (a read that waits must be ordered after the write that wakes it; an
//! attempt's entry changes nothing).
//!
//! What differs from one Redis: each member has its own queue (across
//! members the attempt applied first wins), and a multi-key pop woken by
//! one key pops from the first non-empty key in its command's order. A
//! client that disconnects with an attempt in flight may lose the element
//! that attempt pops (its reply has nobody to go to).
//!
//! Bounds: at most [`MAX_PARKED`] parked clients per member.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use pmwire_keyspace::exec::{Flow, Server as RespServer};
use pmwire_netio::ConnId;
use pmwire_smr::node::{Done, Failure, Ticket};
use transport::Transport;

use super::{error, failure_reply, Member, Owner, Slot};

/// Most clients parked on one member.
pub const MAX_PARKED: usize = 10_000;

/// One parked client.
struct Waiter {
    conn: ConnId,
    /// Its reply's slot.
    seq: u64,
    args: Vec<Vec<u8>>,
    keys: Vec<Vec<u8>>,
    deadline: Option<Instant>,
    /// The index its last attempt was applied at (writes after it wake it).
    seen: u64,
    in_flight: Option<Ticket>,
    /// Its time ran out while an attempt was in flight.
    expired: bool,
}

/// The parked clients of a member.
#[derive(Default)]
pub(super) struct Parked {
    next: u64,
    waiters: BTreeMap<u64, Waiter>,
    by_key: HashMap<Vec<u8>, VecDeque<u64>>,
}

impl Parked {
    /// Forgets waiter `w` (answered, or its connection closed).
    pub(super) fn remove(&mut self, w: u64) -> Option<(ConnId, u64)> {
        let waiter = self.waiters.remove(&w)?;
        for k in &waiter.keys {
            if let Some(q) = self.by_key.get_mut(k) {
                q.retain(|&x| x != w);
                if q.is_empty() {
                    self.by_key.remove(k);
                }
            }
        }
        Some((waiter.conn, waiter.seq))
    }

    /// The earliest timeout of a waiter not yet expired.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.waiters.values().filter(|w| !w.expired).filter_map(|w| w.deadline).min()
    }

    /// Parked clients.
    pub(super) fn len(&self) -> usize {
        self.waiters.len()
    }
}

/// Whether `args` is XREAD or XREADGROUP with BLOCK (before STREAMS).
pub(super) fn xread_blocks(args: &[Vec<u8>]) -> bool {
    let name = args[0].to_ascii_lowercase();
    (name == b"xread" || name == b"xreadgroup") && options_of(args).iter().any(|a| a.eq_ignore_ascii_case(b"block"))
}

/// XREAD's and XREADGROUP's arguments before STREAMS.
fn options_of(args: &[Vec<u8>]) -> &[Vec<u8>] {
    let end = args.iter().position(|a| a.eq_ignore_ascii_case(b"streams")).unwrap_or(args.len());
    &args[1.min(end)..end]
}

/// XREAD's and XREADGROUP's keys: the first half of what follows STREAMS.
fn stream_keys(args: &[Vec<u8>]) -> &[Vec<u8>] {
    let Some(at) = args.iter().position(|a| a.eq_ignore_ascii_case(b"streams")) else { return &[] };
    let rest = &args[at + 1..];
    &rest[..rest.len() / 2]
}

/// XREADGROUP's BLOCK timeout, ms (0 for ever), read as XREAD reads it; a
/// bad one is answered by the command's first attempt, which the machine
/// refuses with Redis's error.
fn xreadgroup_timeout_ms(args: &[Vec<u8>]) -> u64 {
    let options = options_of(args);
    let at = options.iter().position(|a| a.eq_ignore_ascii_case(b"block"));
    at.and_then(|i| options.get(i + 1)).and_then(|a| std::str::from_utf8(a).ok()?.parse::<u64>().ok()).unwrap_or(0)
}

/// Waiter arguments for its next attempt: XREAD's IDs replaced by those its
/// last attempt waited beyond (`xread_from`), in the command's order.
fn with_xread_ids(args: &[Vec<u8>], from: &[(Vec<u8>, pmwire_keyspace::stream::StreamId)]) -> Vec<Vec<u8>> {
    let mut out = args.to_vec();
    let keys = stream_keys(args).len();
    if keys != from.len() {
        return out;
    }
    let ids_at = out.len() - keys;
    for (i, (_, id)) in from.iter().enumerate() {
        out[ids_at + i] = id.text().into_bytes();
    }
    out
}

/// The keys a blocking command waits on (its arguments already checked by
/// the executor): BLPOP/BRPOP/BZPOPMIN/BZPOPMAX `key... timeout`,
/// BLMOVE/BRPOPLPUSH `source`, BLMPOP/BZMPOP `timeout numkeys key...`,
/// XREAD/XREADGROUP the streams.
fn keys_of(args: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let name = args[0].to_ascii_lowercase();
    let keys: &[Vec<u8>] = match &name[..] {
        b"xread" | b"xreadgroup" => stream_keys(args),
        b"blpop" | b"brpop" | b"bzpopmin" | b"bzpopmax" => &args[1..args.len().saturating_sub(1).max(1)],
        b"blmove" | b"brpoplpush" => &args[1..2.min(args.len())],
        b"blmpop" | b"bzmpop" => {
            let n = args.get(2).and_then(|a| std::str::from_utf8(a).ok()?.parse::<usize>().ok()).unwrap_or(0);
            &args[3.min(args.len())..3usize.saturating_add(n).min(args.len())]
        }
        _ => &[],
    };
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(keys.len());
    for k in keys {
        if !out.contains(k) {
            out.push(k.clone());
        }
    }
    out
}

impl<T: Transport<Addr = std::net::SocketAddr>> Member<T> {
    /// A blocking command outside MULTI: checked by the member's own
    /// executor on an empty keyspace (an argument error is answered at
    /// once; a valid command blocks there, which gives its timeout), then
    /// parked and attempted at once.
    pub(super) fn block(&mut self, id: ConnId, args: Vec<Vec<u8>>) {
        // XREADGROUP cannot be checked on an empty keyspace (its group is
        // not there): its first attempt checks it.
        let checked = if args[0].eq_ignore_ascii_case(b"xreadgroup") { Ok(xreadgroup_timeout_ms(&args)) } else { self.check_blocking(id, &args) };
        let timeout_ms = match checked {
            Ok(ms) => ms,
            Err(reply) => {
                self.conn(id).push(Slot::Ready(reply));
                return;
            }
        };
        if self.parked.len() >= MAX_PARKED {
            self.conn(id).push(Slot::Ready(error("ERR too many blocked clients on this member")));
            return;
        }
        let deadline = (timeout_ms > 0).then(|| Instant::now().checked_add(Duration::from_millis(timeout_ms))).flatten();
        let keys = keys_of(&args);
        let seq = self.conn(id).push(Slot::Pending);
        self.parked.next += 1;
        let w = self.parked.next;
        for k in &keys {
            self.parked.by_key.entry(k.clone()).or_default().push_back(w);
        }
        self.parked.waiters.insert(w, Waiter { conn: id, seq, args, keys, deadline, seen: 0, in_flight: None, expired: false });
        self.conn(id).blocked = Some(w);
        self.attempt(w);
    }

    /// Runs `args` on the member's executor over its empty scratch
    /// keyspace: the timeout (ms, 0 for ever) if it blocks, else its reply.
    fn check_blocking(&mut self, id: ConnId, args: &[Vec<u8>]) -> Result<u64, Vec<u8>> {
        let mut out = Vec::new();
        let conn = self.conns.get_mut(&id).expect("the connection");
        let flow = super::with_request(args, |req| self.local.execute(&mut conn.session, &mut self.scratch, req, &mut out));
        if flow != Flow::Block {
            return Err(out);
        }
        let ms = self.local.blocked_timeout_ms(&conn.session).expect("blocked");
        self.local.unblock(&mut conn.session);
        Ok(ms)
    }

    /// Proposes waiter `w`'s command (nothing if no leader is known: it
    /// is tried again after the next turn).
    fn attempt(&mut self, w: u64) {
        let Some(waiter) = self.parked.waiters.get(&w) else { return };
        let Some(conn) = self.conns.get(&waiter.conn) else { return };
        let entry = self.proposer.command(Self::now_ms(), conn.session.protocol, &waiter.args);
        if let Ok(ticket) = self.reactor.service.propose_as(entry, Self::PRINCIPAL) {
            self.stats.block_attempts += 1;
            self.proposed_this_turn = true;
            self.parked.waiters.get_mut(&w).expect("listed").in_flight = Some(ticket);
            self.tickets.insert(ticket, Owner::Block(w));
        }
    }

    /// An attempt's outcome.
    pub(super) fn attempt_done(&mut self, w: u64, done: Done<pmwire_kv_cluster::Applied>) {
        let Some(waiter) = self.parked.waiters.get_mut(&w) else { return };
        waiter.in_flight = None;
        let expired = waiter.expired;
        match done {
            Done::Applied { output, .. } if !output.blocked => {
                // A waiter that blocked before, whose stream or group has gone since.
                let reply = match output.unblocked {
                    Some(error) if waiter.seen > 0 => error,
                    _ => output.reply,
                };
                self.answer_parked(w, reply);
            }
            Done::Applied { index, output } => {
                waiter.seen = index;
                if let Some(from) = output.xread_from {
                    waiter.args = with_xread_ids(&waiter.args, &from);
                }
                if expired {
                    self.time_out(w);
                }
            }
            // Certainly not applied: tried again by `wake_blocked`.
            Done::Failed(Failure::NotProposed) if !expired => {}
            Done::Failed(Failure::NotProposed) => self.time_out(w),
            Done::Failed(f) => {
                let reply = failure_reply(f, &mut self.stats);
                self.answer_parked(w, reply);
            }
            Done::Readable { .. } => unreachable!("an attempt is a proposal"),
        }
    }

    /// After each drive: timeouts, then the attempts due (a waiter not in
    /// an attempt whose key was written past what its last attempt saw, or
    /// that has not been attempted yet), in arrival order.
    pub(super) fn wake_blocked(&mut self) {
        if self.parked.waiters.is_empty() {
            return;
        }
        let now = Instant::now();
        let due_out: Vec<u64> = self.parked.waiters.iter().filter(|(_, x)| !x.expired && x.deadline.is_some_and(|d| d <= now)).map(|(&w, _)| w).collect();
        for w in due_out {
            let waiter = self.parked.waiters.get_mut(&w).expect("listed");
            waiter.expired = true;
            if waiter.in_flight.is_none() {
                self.time_out(w);
            }
        }
        let machine = self.reactor.service.machine();
        let (writes, signals) = (machine.writes(), machine.signals());
        let due: Vec<u64> = self
            .parked
            .waiters
            .iter()
            .filter(|(_, x)| x.in_flight.is_none() && !x.expired)
            .filter(|(_, x)| x.seen == 0 || writes.flush > x.seen || x.keys.iter().any(|k| writes.last_write(k) > x.seen || signals.after(k, x.seen)))
            .map(|(&w, _)| w)
            .collect();
        for w in due {
            self.attempt(w);
        }
    }

    fn time_out(&mut self, w: u64) {
        let Some(waiter) = self.parked.waiters.get(&w) else { return };
        let reply = match self.conns.get(&waiter.conn) {
            Some(c) => RespServer::timed_out_reply(&c.session).to_vec(),
            None => Vec::new(),
        };
        self.answer_parked(w, reply);
    }

    /// Answers waiter `w` and serves what its connection held meanwhile.
    fn answer_parked(&mut self, w: u64, reply: Vec<u8>) {
        let Some((id, seq)) = self.parked.remove(w) else { return };
        let Some(conn) = self.conns.get_mut(&id) else { return };
        if let Some(slot) = conn.slot(seq) {
            *slot = Slot::Ready(reply);
        }
        conn.blocked = None;
        self.to_wake.push(id);
        self.resume(id);
    }

    /// Serves the requests a connection held while it was blocked, until
    /// one blocks it again.
    pub(super) fn resume(&mut self, id: ConnId) {
        loop {
            let Some(conn) = self.conns.get_mut(&id) else { return };
            if conn.blocked.is_some() || conn.streaming {
                return;
            }
            let Some(args) = conn.held.pop_front() else { return };
            self.request(id, args);
        }
    }
}

/// INFO's reply (a bulk string, or RESP3's verbatim string) with its
/// `blocked_clients:` field saying `parked` (the executor counts only its
/// own waiters; a member's are here). Any other reply is returned as is.
pub(super) fn with_blocked_clients(reply: Vec<u8>, parked: usize) -> Vec<u8> {
    let Some(head_end) = reply.windows(2).position(|w| w == b"\r\n") else { return reply };
    if !matches!(reply.first(), Some(b'$' | b'=')) || reply.len() < head_end + 4 {
        return reply;
    }
    let body = &reply[head_end + 2..reply.len() - 2];
    let Ok(text) = std::str::from_utf8(body) else { return reply };
    let field = "blocked_clients:";
    let Some(at) = text.find(field) else { return reply };
    let end = text[at..].find("\r\n").map_or(text.len(), |e| at + e);
    let new = format!("{}{field}{parked}{}", &text[..at], &text[end..]);
    let mut out = format!("{}{}\r\n", reply[0] as char, new.len()).into_bytes();
    out.extend_from_slice(new.as_bytes());
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::{keys_of, with_blocked_clients};

    #[test]
    fn info_says_how_many_clients_are_parked() {
        let info = b"$39\r\n# Clients\r\nblocked_clients:0\r\nother:1\r\n\r\n".to_vec();
        let text = "# Clients\r\nblocked_clients:12\r\nother:1\r\n";
        let want = format!("${}\r\n{text}\r\n", text.len()).into_bytes();
        assert_eq!(with_blocked_clients(info, 12), want);
        assert_eq!(with_blocked_clients(b"-ERR x\r\n".to_vec(), 3), b"-ERR x\r\n".to_vec());
    }

    fn args(a: &[&str]) -> Vec<Vec<u8>> {
        a.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn the_keys_a_blocking_command_waits_on() {
        assert_eq!(keys_of(&args(&["BLPOP", "a", "b", "a", "0"])), args(&["a", "b"]));
        assert_eq!(keys_of(&args(&["brpop", "a", "1.5"])), args(&["a"]));
        assert_eq!(keys_of(&args(&["BLMOVE", "s", "d", "LEFT", "RIGHT", "0"])), args(&["s"]));
        assert_eq!(keys_of(&args(&["BRPOPLPUSH", "s", "d", "0"])), args(&["s"]));
        assert_eq!(keys_of(&args(&["BLMPOP", "0", "2", "x", "y", "LEFT"])), args(&["x", "y"]));
        assert_eq!(keys_of(&args(&["BLMPOP", "0", "99", "x"])), args(&["x"]), "a count past the arguments is bounded");
        assert_eq!(keys_of(&args(&["BZPOPMIN", "z", "y", "z", "0"])), args(&["z", "y"]));
        assert_eq!(keys_of(&args(&["bzpopmax", "z", "0.5"])), args(&["z"]));
        assert_eq!(keys_of(&args(&["BZMPOP", "0", "2", "x", "y", "MIN", "COUNT", "3"])), args(&["x", "y"]));
        assert_eq!(keys_of(&args(&["XREAD", "COUNT", "2", "BLOCK", "0", "STREAMS", "a", "b", "$", "0"])), args(&["a", "b"]));
        assert_eq!(keys_of(&args(&["xreadgroup", "GROUP", "g", "c", "BLOCK", "10", "streams", "s", ">"])), args(&["s"]));
    }

    #[test]
    fn xread_blocks_and_its_ids_are_replaced_by_those_it_waited_beyond() {
        use pmwire_keyspace::stream::StreamId;
        assert!(super::xread_blocks(&args(&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"])));
        assert!(!super::xread_blocks(&args(&["XREAD", "COUNT", "1", "STREAMS", "block", "$"])), "a stream named block");
        assert!(super::xread_blocks(&args(&["xreadgroup", "group", "g", "c", "block", "5", "streams", "s", ">"])));
        assert_eq!(super::xreadgroup_timeout_ms(&args(&["XREADGROUP", "GROUP", "g", "c", "BLOCK", "1500", "STREAMS", "s", ">"])), 1500);
        let from = vec![(b"a".to_vec(), StreamId { ms: 5, seq: 1 }), (b"b".to_vec(), StreamId { ms: 0, seq: 0 })];
        assert_eq!(super::with_xread_ids(&args(&["XREAD", "BLOCK", "0", "STREAMS", "a", "b", "$", "0"]), &from), args(&["XREAD", "BLOCK", "0", "STREAMS", "a", "b", "5-1", "0-0"]));
    }
}
