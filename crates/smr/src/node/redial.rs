//! Re-dialling: a replica holds a connection to every peer it knows, not
//! only to those Raft sends to now, and dials a lost one again as soon as
//! its reconnect delay ([`RECONNECT_TICKS`]) has passed.
//!
//! Why: the link below ([`link::LinkTransport`], `crate::links`) closes a
//! dialled connection whose pings go unanswered (a partition, or one that
//! healed and left TCP in retransmission backoff). Dialled only when Raft
//! next sends, the connection between two followers would stay closed
//! until an election needs it, and that election would then wait for a
//! connect and a handshake in each direction; dialled at once, the link
//! is open (and tested) before it is needed. A peer that is down is tried
//! once per reconnect delay, as a leader's heartbeats to it already do.

use transport::Transport;

use super::{PeerAddr, Replica, RECONNECT_TICKS};
use crate::state::StateMachine;
use crate::store::Durable;

impl<T: Transport, D: Durable, M: StateMachine> Replica<T, D, M>
where
    T::Addr: PeerAddr,
{
    /// Dials every known peer that has no connection and whose reconnect
    /// delay has passed; true if it dialled any.
    pub(super) fn redial(&mut self, t: &mut T) -> bool {
        let now = self.now;
        let due: Vec<u64> = self.peers.keys().copied().filter(|id| !self.out_conns.contains_key(id) && self.reconnect_at.get(id).is_none_or(|&at| now >= at)).collect();
        for &id in &due {
            let addr = self.peers[&id].clone();
            match t.connect(&addr) {
                Ok(conn) => {
                    self.out_conns.insert(id, conn);
                }
                Err(_) => {
                    self.reconnect_at.insert(id, now + self.config.tick * RECONNECT_TICKS);
                }
            }
        }
        !due.is_empty()
    }
}
