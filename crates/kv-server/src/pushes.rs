//! Messages for connections other than the one whose command made them:
//! pub/sub's PUBLISH ([`pmwire_keyspace::exec::Server::take_pushes`]).
//!
//! The executor names each message's subscriber by client id; [`Pushes`]
//! knows every session's connection, appends a message for the connection
//! being served to its output at once, and holds the others' until the loop
//! shows their connections again (it asks the loop to, [`Pushes::wake`]).
//! What a subscriber has not read is bounded as Redis bounds its output
//! (`client-output-buffer-limit pubsub`, the 32 MiB hard limit): messages
//! held here, and, when its connection is shown, those plus the output the
//! loop has not sent yet ([`pmwire_netio::Input::unsent_bytes`]). A
//! subscriber past it is closed and its messages dropped, as Redis closes it.
//!
//! Invariants: `conns` maps each open session's client id to its
//! connection; `waiting` and `overflowed` name only open connections;
//! `waiting` holds at most [`PUSH_LIMIT`] bytes per connection.

use std::collections::{HashMap, HashSet};

use pmwire_netio::ConnId;

/// Most bytes of messages held for one connection before it is closed
/// (Redis's default hard limit for pub/sub clients).
pub const PUSH_LIMIT: usize = 32 << 20;

/// What [`Pushes::take`] found for a connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// No message waits.
    Nothing,
    /// These bytes, to write before anything else for it.
    Messages(Vec<u8>),
    /// More than the limit waits, with what it has not read: close it.
    OverLimit,
}

/// Messages waiting for their connections (module docs).
#[derive(Debug, Default)]
pub struct Pushes {
    conns: HashMap<u64, ConnId>,
    waiting: HashMap<ConnId, Vec<u8>>,
    overflowed: HashSet<ConnId>,
    wake: Vec<ConnId>,
    /// Connections closed for letting too much wait, so far.
    pub closed_for_limit: u64,
}

impl Pushes {
    /// Session `client` is served on `conn`.
    pub fn opened(&mut self, client: u64, conn: ConnId) {
        self.conns.insert(client, conn);
    }

    /// Session `client` on `conn` closed: what waits for it goes.
    pub fn closed(&mut self, client: u64, conn: ConnId) {
        self.conns.remove(&client);
        self.waiting.remove(&conn);
        self.overflowed.remove(&conn);
    }

    /// Routes `messages` (client id, bytes): those for `current` (the
    /// connection being served, if any) are written to `out` now, the
    /// others held for their connections. Messages for a client no longer
    /// connected are dropped.
    pub fn route(&mut self, messages: Vec<(u64, Vec<u8>)>, current: Option<ConnId>, out: &mut dyn FnMut(&[u8])) {
        for (client, bytes) in messages {
            let Some(&conn) = self.conns.get(&client) else { continue };
            if Some(conn) == current {
                out(&bytes);
                continue;
            }
            if self.overflowed.contains(&conn) {
                continue;
            }
            let held = self.waiting.entry(conn).or_default();
            if held.is_empty() {
                self.wake.push(conn);
            }
            if held.len() + bytes.len() > PUSH_LIMIT {
                self.waiting.remove(&conn);
                self.overflowed.insert(conn);
                self.closed_for_limit += 1;
                continue;
            }
            held.extend_from_slice(&bytes);
        }
    }

    /// What waits for `conn`, whose peer has `unsent` bytes of earlier
    /// output still to read: the messages, or [`Taken::OverLimit`] if
    /// together they pass [`PUSH_LIMIT`] (or passed it already), and the
    /// connection is to be closed.
    pub fn take(&mut self, conn: ConnId, unsent: usize) -> Taken {
        if self.overflowed.remove(&conn) {
            return Taken::OverLimit;
        }
        match self.waiting.remove(&conn) {
            None => Taken::Nothing,
            Some(held) if unsent.saturating_add(held.len()) > PUSH_LIMIT => {
                self.closed_for_limit += 1;
                Taken::OverLimit
            }
            Some(held) => Taken::Messages(held),
        }
    }

    /// The connections with messages waiting that the loop has not been
    /// asked to show yet.
    pub fn wake(&mut self, wake: &mut Vec<ConnId>) {
        wake.append(&mut self.wake);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_go_to_their_connections_and_an_overflowing_one_is_closed() {
        let mut p = Pushes::default();
        let (a, b) = (ConnId { slot: 1, generation: 0 }, ConnId { slot: 2, generation: 0 });
        p.opened(10, a);
        p.opened(20, b);
        let mut now = Vec::new();
        p.route(vec![(10, b"x".to_vec()), (20, b"y".to_vec()), (20, b"z".to_vec()), (30, b"gone".to_vec())], Some(a), &mut |m| now.extend_from_slice(m));
        assert_eq!(now, b"x");
        let mut wake = Vec::new();
        p.wake(&mut wake);
        assert_eq!(wake, vec![b], "woken once");
        assert_eq!(p.take(b, 0), Taken::Messages(b"yz".to_vec()));
        assert_eq!(p.take(b, 0), Taken::Nothing);
        // Held bytes alone past the limit.
        p.route(vec![(20, vec![0; PUSH_LIMIT]), (20, b"more".to_vec())], Some(a), &mut |_| unreachable!());
        assert_eq!(p.take(b, 0), Taken::OverLimit, "dropped at the limit");
        assert_eq!(p.take(b, 0), Taken::Nothing, "asked once");
        // Held bytes with the unsent output past it.
        p.route(vec![(20, b"small".to_vec())], Some(a), &mut |_| unreachable!());
        assert_eq!(p.take(b, PUSH_LIMIT - 1), Taken::OverLimit);
        p.route(vec![(20, b"small".to_vec())], Some(a), &mut |_| unreachable!());
        assert_eq!(p.take(b, PUSH_LIMIT - 5), Taken::Messages(b"small".to_vec()));
        assert_eq!(p.closed_for_limit, 2);
        p.closed(20, b);
        p.route(vec![(20, b"late".to_vec())], Some(a), &mut |_| unreachable!());
        assert_eq!(p.take(b, 0), Taken::Nothing);
    }
}
