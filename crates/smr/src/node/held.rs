//! Raft messages held back, per peer, while the connection's window is
//! full, and sent in order once it drains.
//!
//! Why: a connection's window bounds the sends the kernel has not yet
//! taken (`Transport::send_room`). A leader sending a follower up to
//! raft-rs's appends in flight of 1 MiB each fills it whenever the
//! follower reads slower than the leader builds (a follower's compaction,
//! a busy core). A send refused there used to be reported to raft-rs as
//! unreachable, which puts the follower back into probing and, once it
//! answers, sends every entry after its match index again, though most of
//! them were already on their way: under pipelined load a leader rebuilt
//! and sent up to 96 MB of appends in one call of its loop, 85-280 ms
//! (an election timeout is 100-200 ms), and cost itself its leadership
//! (`docs/bench.md`, "A loaded cluster keeps its leader").
//!
//! A held message is encoded when held (its entries' values are gathered
//! from buffers the log may free before it goes). A peer's held messages
//! go before any newer one to it, so raft-rs's order per peer is kept. If
//! the peer's connection is lost or replaced, its held messages are
//! dropped and the peer is reported unreachable, as an unsent message was
//! before. Bounded per peer ([`MAX_HELD_MESSAGES`], [`MAX_HELD_BYTES`]): a
//! message past either bound is not sent, and neither is anything held for
//! that peer ([`HeldSends::drop_peer`]): the peer is reported unreachable,
//! so raft-rs sends again from the follower's match index, and held copies
//! arriving after that would only be sent twice.

use std::collections::{BTreeMap, VecDeque};

use transport::{ConnId, Transport};

/// Most messages held for one peer (raft-rs keeps at most 16 appends in
/// flight to a follower; heartbeats and their answers come in between).
pub(super) const MAX_HELD_MESSAGES: usize = 256;

/// Most bytes held for one peer (twice the appends raft-rs keeps in
/// flight to a follower: 16 of at most 1 MiB).
pub(super) const MAX_HELD_BYTES: usize = 32 << 20;

/// What became of a peer's held messages in one [`HeldSends::drain`].
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Drained {
    /// Handed to the transport.
    pub sent: u64,
    /// Dropped: the connection they were held for is gone or failed.
    pub dropped: u64,
}

struct Queue {
    conn: ConnId,
    frames: VecDeque<(&'static [u8], Vec<u8>)>,
    bytes: usize,
}

/// Each peer's held messages, oldest first.
#[derive(Default)]
pub(super) struct HeldSends {
    peers: BTreeMap<u64, Queue>,
}

impl HeldSends {
    /// Whether messages to `to` are held (a newer one must wait behind them).
    pub(super) fn holds(&self, to: u64) -> bool {
        self.peers.contains_key(&to)
    }

    /// Whether any peer has messages held.
    pub(super) fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Holds `payload` (with frame header `magic`) for `to` on `conn`.
    /// Gives it back if `to`'s bounds are reached, or its messages are held
    /// for another connection (the caller drains first).
    pub(super) fn hold(&mut self, to: u64, conn: ConnId, magic: &'static [u8], payload: Vec<u8>) -> Result<(), Vec<u8>> {
        let q = self.peers.entry(to).or_insert_with(|| Queue { conn, frames: VecDeque::new(), bytes: 0 });
        if q.conn != conn || q.frames.len() >= MAX_HELD_MESSAGES || q.bytes + payload.len() > MAX_HELD_BYTES {
            if q.frames.is_empty() {
                self.peers.remove(&to);
            }
            return Err(payload);
        }
        q.bytes += payload.len();
        q.frames.push_back((magic, payload));
        Ok(())
    }

    /// Drops every message held for `to`, handing each payload to
    /// `recycle`; how many.
    pub(super) fn drop_peer(&mut self, to: u64, mut recycle: impl FnMut(Vec<u8>)) -> u64 {
        let Some(q) = self.peers.remove(&to) else { return 0 };
        let n = q.frames.len() as u64;
        q.frames.into_iter().for_each(|(_, payload)| recycle(payload));
        n
    }

    /// Sends held messages in order while their connections take them.
    /// `current(to)` is the connection messages to `to` now go on: a peer
    /// whose held messages were for another one loses them, as does one
    /// whose connection refuses a held message. Calls
    /// `outcome(to, drained)` for each peer that sent or dropped any.
    pub(super) fn drain<T: Transport>(&mut self, t: &mut T, current: impl Fn(u64) -> Option<ConnId>, mut outcome: impl FnMut(u64, Drained)) {
        let peers: Vec<u64> = self.peers.keys().copied().collect();
        for to in peers {
            let q = self.peers.get_mut(&to).expect("listed");
            let mut d = Drained::default();
            let mut lost = current(to) != Some(q.conn);
            while !lost && t.send_room(q.conn) {
                let Some((magic, payload)) = q.frames.pop_front() else { break };
                q.bytes -= payload.len();
                match t.send(q.conn, magic, payload) {
                    Ok(()) => d.sent += 1,
                    // `send_room` said yes; a transport may still refuse.
                    // Either way the message is lost, and so are those
                    // behind it (the peer is reported unreachable).
                    Err(_) => {
                        d.dropped += 1;
                        lost = true;
                    }
                }
            }
            if lost {
                for (_, payload) in q.frames.drain(..) {
                    t.recycle(payload);
                    d.dropped += 1;
                }
            }
            if q.frames.is_empty() {
                self.peers.remove(&to);
            }
            if d != Drained::default() {
                outcome(to, d);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use transport::inproc::{InProcNetwork, InProcTransport};
    use transport::Limits;

    const MAGIC: &[u8] = b"TEST";

    /// Two in-process endpoints, `a` connected to `b` with a window of 2.
    fn pair() -> (InProcTransport, InProcTransport, ConnId) {
        let net = InProcNetwork::new(Limits { window: 2, ..Limits::default() });
        let (mut a, b) = (net.node(), net.node());
        let conn = a.connect(&b.id()).expect("connect");
        (a, b, conn)
    }

    fn received(b: &mut InProcTransport) -> Vec<Vec<u8>> {
        let mut events = Vec::new();
        let _ = b.wait(Duration::from_millis(10));
        b.poll(&mut events, 64);
        events
            .into_iter()
            .filter_map(|e| match e {
                transport::Event::Message { payload, .. } => Some(payload.into_vec()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn held_messages_go_in_order_once_the_window_drains() {
        let (mut a, mut b, conn) = pair();
        let mut held = HeldSends::default();
        a.send(conn, MAGIC, vec![1]).unwrap();
        a.send(conn, MAGIC, vec![2]).unwrap();
        assert!(!a.send_room(conn), "a window of 2 is full after two sends");
        held.hold(7, conn, MAGIC, vec![3]).unwrap();
        held.hold(7, conn, MAGIC, vec![4]).unwrap();
        let mut outcomes = Vec::new();
        held.drain(&mut a, |_| Some(conn), |to, d| outcomes.push((to, d)));
        assert!(outcomes.is_empty(), "nothing could go: {outcomes:?}");
        assert!(held.holds(7));
        // The receiver takes the first two; their slots come back.
        let mut got = Vec::new();
        for _ in 0..100 {
            got.extend(received(&mut b));
            let mut events = Vec::new();
            a.poll(&mut events, 64);
            held.drain(&mut a, |_| Some(conn), |to, d| outcomes.push((to, d)));
            if got.len() == 4 {
                break;
            }
        }
        assert_eq!(got, vec![vec![1], vec![2], vec![3], vec![4]], "every message, in the order sent");
        assert_eq!(outcomes.iter().map(|(_, d)| d.sent).sum::<u64>(), 2);
        assert!(outcomes.iter().all(|(to, d)| *to == 7 && d.dropped == 0));
        assert!(!held.holds(7) && held.is_empty());
    }

    #[test]
    fn a_peer_on_another_connection_loses_what_was_held_for_the_old_one() {
        let (mut a, _b, conn) = pair();
        let mut held = HeldSends::default();
        held.hold(7, conn, MAGIC, vec![1]).unwrap();
        held.hold(7, conn, MAGIC, vec![2]).unwrap();
        assert_eq!(held.hold(7, ConnId(conn.0 + 1), MAGIC, vec![3]), Err(vec![3]), "held for another connection");
        let mut outcomes = Vec::new();
        held.drain(&mut a, |_| None, |to, d| outcomes.push((to, d)));
        assert_eq!(outcomes, vec![(7, Drained { sent: 0, dropped: 2 })]);
        assert!(held.is_empty());
    }

    #[test]
    fn dropping_a_peer_hands_back_what_was_held_for_it_alone() {
        let (_a, _b, conn) = pair();
        let mut held = HeldSends::default();
        held.hold(7, conn, MAGIC, vec![1]).unwrap();
        held.hold(7, conn, MAGIC, vec![2]).unwrap();
        held.hold(8, conn, MAGIC, vec![3]).unwrap();
        let mut recycled = Vec::new();
        assert_eq!(held.drop_peer(7, |p| recycled.push(p)), 2);
        assert_eq!(recycled, vec![vec![1], vec![2]]);
        assert!(!held.holds(7) && held.holds(8), "only peer 7's messages went");
        assert_eq!(held.drop_peer(7, |_| panic!("nothing is held for 7")), 0);
    }

    #[test]
    fn a_peer_past_its_bound_is_refused_more() {
        let (_a, _b, conn) = pair();
        let mut held = HeldSends::default();
        for i in 0..MAX_HELD_MESSAGES {
            held.hold(7, conn, MAGIC, vec![i as u8]).unwrap();
        }
        assert_eq!(held.hold(7, conn, MAGIC, vec![0]), Err(vec![0]), "past the message bound");
        held.hold(8, conn, MAGIC, vec![0; MAX_HELD_BYTES]).unwrap();
        assert_eq!(held.hold(8, conn, MAGIC, vec![0]), Err(vec![0]), "past the byte bound");
    }
}
