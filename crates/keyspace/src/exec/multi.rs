//! Transactions: `MULTI EXEC DISCARD WATCH UNWATCH`, with Redis 7.0's
//! replies and errors.
//!
//! A session in MULTI queues every command but `EXEC DISCARD MULTI WATCH
//! QUIT` (answered `+QUEUED`), as its RESP encoding; a command refused
//! before it could run (unknown, wrong arity, NOAUTH) flags the
//! transaction, and EXEC then answers `EXECABORT`. EXEC runs the queued
//! commands in order, each answered in the EXEC's array as it would be
//! alone (an error in one does not stop the others, as in Redis). The
//! caller stages a request's writes in one batch and commits it whole
//! (the engine commits a batch of any size failure-atomically), so an EXEC
//! is durable all or nothing.
//!
//! WATCH ([`Watches`], owned by the [`Server`], so writes by any
//! connection are seen): a watched key is *touched* by every write to it
//! (set, a delete of a present key, a flush while it exists), and a
//! session with a touched key is *dirty*: its EXEC answers the null array
//! and runs nothing. EXEC, DISCARD, UNWATCH and closing the connection
//! forget a session's watches and its dirty flag.
//!
//! Expiry, as Redis 7.0 (`isWatchedKeyExpired`, and the touch its expiry
//! deletions make): a key that was live at WATCH and expires before EXEC
//! aborts the EXEC, whether it was deleted meanwhile (lazily or by the
//! sweep) or not; a key already expired at WATCH does not (WATCH's lookup
//! deletes it, so it is watched as absent). WATCH records the deadline of
//! each live key it watches: unless a write touched the key (which makes
//! the session dirty anyway), the key still has that deadline, so EXEC
//! aborts when it has passed ([`Keyspace::now_ms`]), without any hook in
//! the keyspace's lazy or active expiry.
//!
//! Invariants: `by_key[k]` holds client `c` exactly when `by_client[c]`
//! holds `k`; `dirty` only names clients with watches.

use std::collections::{HashMap, HashSet};

use super::{Ctx, Fail, Res, Server, Session};
use crate::store::Keyspace;
use pmwire_resp::reply::ReplySink;

/// Most bytes of queued commands one transaction holds (their RESP
/// encoding); beyond it a command is refused and the transaction flagged.
pub const MAX_QUEUED_BYTES: usize = 512 << 20;

/// A session's open transaction.
#[derive(Debug, Clone, Default)]
pub(crate) struct Multi {
    /// The queued commands, RESP-encoded back to back.
    pub queued: Vec<u8>,
    pub commands: usize,
    /// A command was refused while queuing: EXEC answers EXECABORT.
    pub failed: bool,
    /// A queued command is `denyoom` (checked while `maxmemory` is set):
    /// EXEC is refused above `maxmemory`.
    pub denyoom: bool,
    /// A queued command writes (Redis's `mstate.cmd_flags & CMD_WRITE`):
    /// EXEC is refused without enough good replicas (`min-replicas-to-write`).
    pub writes: bool,
}

/// Which clients watch which keys, and which of them saw a watched key
/// change (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Watches {
    by_key: HashMap<Vec<u8>, Vec<u64>>,
    by_client: HashMap<u64, Vec<Vec<u8>>>,
    dirty: HashSet<u64>,
    /// Deadlines the live watched keys of each client had at WATCH.
    deadlines: HashMap<u64, Vec<u64>>,
}

impl Watches {
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// `client` watches `key`, live with `deadline_ms` if any (a key
    /// watched already keeps what its first WATCH saw, as in Redis).
    pub fn watch(&mut self, client: u64, key: &[u8], deadline_ms: Option<u64>) {
        let clients = self.by_key.entry(key.to_vec()).or_default();
        if !clients.contains(&client) {
            clients.push(client);
            self.by_client.entry(client).or_default().push(key.to_vec());
            if let Some(d) = deadline_ms {
                self.deadlines.entry(client).or_default().push(d);
            }
        }
    }

    /// Whether a key `client` watched live has expired by `now_ms`.
    pub fn expired_since_watch(&self, client: u64, now_ms: u64) -> bool {
        self.deadlines.get(&client).is_some_and(|ds| ds.iter().any(|&d| d <= now_ms))
    }

    /// Forgets `client`'s watches and its dirty flag.
    pub fn unwatch_all(&mut self, client: u64) {
        self.dirty.remove(&client);
        self.deadlines.remove(&client);
        for key in self.by_client.remove(&client).unwrap_or_default() {
            let clients = self.by_key.get_mut(&key).expect("by_key mirrors by_client");
            clients.retain(|&c| c != client);
            if clients.is_empty() {
                self.by_key.remove(&key);
            }
        }
    }

    /// `key` was written: every client watching it is dirty.
    pub fn touch(&mut self, key: &[u8]) {
        if let Some(clients) = self.by_key.get(key) {
            self.dirty.extend(clients.iter().copied());
        }
    }

    pub fn is_dirty(&self, client: u64) -> bool {
        self.dirty.contains(&client)
    }

    /// The watched keys (to see which exist before a flush).
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.by_key.keys().map(|k| &k[..])
    }
}

impl Server {
    /// Sets the bytes of queued commands one transaction may hold (default
    /// [`MAX_QUEUED_BYTES`]; tests set less).
    pub fn set_max_queued_bytes(&mut self, bytes: usize) {
        assert!(bytes > 0, "a transaction queue of 0 bytes");
        self.max_queued_bytes = bytes;
    }

    /// `key` changed outside a command's own writes (eviction, a write the
    /// caller makes itself): every session watching it will see its EXEC
    /// fail. Expiry needs no call: WATCH records deadlines (module docs).
    pub fn key_changed(&mut self, key: &[u8]) {
        self.watches.touch(key);
    }

    /// Queues a command of a session in MULTI; `+QUEUED`, or an error and
    /// the transaction flagged if the queue is full.
    pub(crate) fn queue(&mut self, session: &mut Session, args: &[&[u8]]) -> Result<(), String> {
        let multi = session.multi.as_mut().expect("queue inside MULTI");
        let size: usize = args.iter().map(|a| a.len() + 32).sum::<usize>() + 16;
        let max = self.max_queued_bytes;
        if multi.queued.len() + size > max {
            multi.failed = true;
            return Err(format!("ERR transaction queue is full ({max} bytes of queued commands at most)"));
        }
        pmwire_resp::client::encode_request(args, &mut multi.queued);
        multi.commands += 1;
        Ok(())
    }
}

pub(crate) fn multi<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    if c.session.multi.is_some() {
        return Err(Fail::err("MULTI calls can not be nested"));
    }
    c.session.multi = Some(Multi::default());
    c.out.ok();
    Ok(())
}

pub(crate) fn discard<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    if c.session.multi.take().is_none() {
        return Err(Fail::err("DISCARD without MULTI"));
    }
    c.server.watches.unwatch_all(c.session.id);
    c.out.ok();
    Ok(())
}

pub(crate) fn watch<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    if c.session.multi.is_some() {
        return Err(Fail::err("WATCH inside MULTI is not allowed"));
    }
    for i in 1..c.argc() {
        let key = c.arg(i);
        let deadline_ms = c.ks.get(key).and_then(|s| s.deadline_ms);
        c.server.watches.watch(c.session.id, key, deadline_ms);
    }
    c.out.ok();
    Ok(())
}

pub(crate) fn unwatch<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: &mut Ctx<'_, '_, K, S>) -> Res {
    c.server.watches.unwatch_all(c.session.id);
    c.out.ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::ServerConfig;
    use crate::store::MemKeyspace;
    use pmwire_resp::request::{Limits, Parsed};

    /// Runs inline commands on `session` and returns the replies.
    fn run(server: &mut Server, session: &mut Session, ks: &mut MemKeyspace, input: &str) -> String {
        let input = format!("{input}\r\n");
        let segs: [&[u8]; 1] = [input.as_bytes()];
        let mut p = Parsed::new(Limits::default());
        let s = p.parse(&segs);
        let mut out: Vec<u8> = Vec::new();
        for i in 0..s.commands {
            server.execute(session, ks, &p.request(&segs, i), &mut out);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_full_queue_refuses_the_command_and_aborts_the_transaction() {
        let mut server = Server::new(ServerConfig::default());
        server.set_max_queued_bytes(150);
        let (mut session, mut ks) = (server.open_session(), MemKeyspace::new());
        let full = "-ERR transaction queue is full (150 bytes of queued commands at most)\r\n";
        let abort = "-EXECABORT Transaction discarded because of previous errors.\r\n";
        let got =
            run(&mut server, &mut session, &mut ks, "MULTI\r\nSET a 1\r\nSET b 2222222222222222222222222222\r\nEXEC");
        assert_eq!(got, format!("+OK\r\n+QUEUED\r\n{full}{abort}"));
        assert_eq!(
            run(&mut server, &mut session, &mut ks, "EXISTS a b\r\nMULTI\r\nSET a 1\r\nEXEC"),
            ":0\r\n+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n"
        );
    }

    #[test]
    fn key_changed_makes_watchers_exec_fail_and_closing_forgets_watches() {
        let mut server = Server::new(ServerConfig::default());
        let (mut session, mut ks) = (server.open_session(), MemKeyspace::new());
        assert_eq!(run(&mut server, &mut session, &mut ks, "WATCH k\r\nMULTI\r\nSET k 1"), "+OK\r\n+OK\r\n+QUEUED\r\n");
        server.key_changed(b"k");
        assert_eq!(run(&mut server, &mut session, &mut ks, "EXEC\r\nEXISTS k"), "*-1\r\n:0\r\n");
        run(&mut server, &mut session, &mut ks, "WATCH k");
        assert!(!server.watches.is_empty());
        server.close_session(session);
        assert!(server.watches.is_empty(), "a closed connection's watches are gone");
    }

    #[test]
    fn watches_mirror_and_forget() {
        let mut w = Watches::default();
        w.watch(1, b"a", None);
        w.watch(1, b"a", None);
        w.watch(2, b"a", None);
        w.watch(2, b"b", Some(50));
        assert!(!w.expired_since_watch(2, 49));
        assert!(w.expired_since_watch(2, 50));
        assert!(!w.expired_since_watch(1, 50));
        w.touch(b"b");
        assert!(!w.is_dirty(1));
        assert!(w.is_dirty(2));
        w.touch(b"zz");
        assert!(!w.is_dirty(1));
        w.unwatch_all(2);
        assert!(!w.is_dirty(2));
        assert!(!w.expired_since_watch(2, 50), "unwatching forgets the deadlines");
        assert_eq!(w.keys().collect::<Vec<_>>(), vec![&b"a"[..]]);
        w.touch(b"a");
        assert!(w.is_dirty(1));
        w.unwatch_all(1);
        assert!(w.is_empty());
        assert!(!w.is_dirty(1));
    }
}
