//! A replica's side of snapshot streams (`crate::snapshot::stream`, the
//! formats; `chunks::Outgoing`, the sender's cursor).
//!
//! Sender: raft-rs's `MsgSnapshot` names the store's snapshot body (the
//! store hands raft-rs a descriptor, not the body); the body goes to the
//! peer chunk by chunk, each read from the store as the connection's
//! window allows, then the message. A [`Resume`] from the peer moves the
//! cursor to what the peer holds. A body the store no longer holds (two
//! compactions replaced it) fails the send, reported to raft-rs, which
//! sends the newer snapshot.
//!
//! Receiver: a chunk is checked (its CRC-32C covers its header and bytes)
//! and written durably into the store's staging area if it continues what
//! the area holds of its body, or starts a body over (offset 0, another
//! body). A chunk of the held body at offset 0 (the sender began again:
//! a reconnection, or this replica restarted) is answered with a
//! [`Resume`] from what the area holds; a gap (a lost chunk) or a chunk of
//! a body the area does not hold is answered with one too, once per body
//! and offset. The `MsgSnapshot` is stepped into Raft only once the area
//! holds its whole body and the body's checksum, read back from the
//! store, holds; while raft-rs holds a snapshot to install, no chunk
//! touches the area. So a torn or partial staging area is never
//! installed: at worst the body is sent again.

use raft::eraftpb::Message;
use raft::SnapshotStatus;
use transport::{ConnId, Transport};

use super::{Outgoing, PeerAddr, Replica, RAFT_RESUME_MAGIC};
use crate::snapshot::stream::{self, BodyId, Resume};
use crate::state::StateMachine;
use crate::store::Durable;

impl<T: Transport, D: Durable, M: StateMachine> Replica<T, D, M>
where
    T::Addr: PeerAddr,
{
    /// Queues the snapshot `body` and then `message` (raft-rs's, naming
    /// it) to peer `to` (refused, as unsent, while another chunked message
    /// to it is on its way) and starts sending.
    pub(super) fn send_stream(&mut self, t: &mut T, to: u64, conn: ConnId, message: Vec<u8>, body: BodyId) {
        if self.outbox.contains_key(&to) || body.len == 0 {
            self.counters.unsent += 1;
            self.raw.report_snapshot(to, SnapshotStatus::Failure);
            return;
        }
        self.chunked_sent += 1;
        self.counters.chunked += 1;
        let out = Outgoing::stream(conn, self.chunked_sent, body, self.config.id, message, self.config.chunk_bytes);
        self.outbox.insert(to, out);
        self.drain_outbox(t);
    }

    /// A peer asks for the rest of a body from an offset.
    pub(super) fn on_resume(&mut self, payload: &[u8]) {
        let Some(r) = Resume::decode(payload) else {
            return self.counters.malformed += 1;
        };
        if self.outbox.get_mut(&r.from).is_some_and(|out| out.resume(&r)) {
            self.counters.snapshot_resumes_taken += 1;
        }
    }

    /// One chunk of a snapshot body arrived on `conn` (module docs).
    pub(super) fn on_stream_chunk(&mut self, t: &mut T, conn: ConnId, payload: &[u8]) {
        let Ok(c) = stream::decode_chunk(payload) else {
            return self.counters.malformed += 1;
        };
        if self.snapshot_job.as_ref().is_some_and(|j| j.parts.is_some()) {
            // This replica is writing its own snapshot into the area a body
            // is staged in: the sender is asked again once it is stored.
            return self.counters.chunks_ignored += 1;
        }
        let log = &self.raw.raft.raft_log;
        if log.unstable.snapshot.is_some() || c.body.index <= log.committed {
            // An install from the area is pending, or Raft would refuse
            // a snapshot this old.
            return self.counters.chunks_ignored += 1;
        }
        let durable = &mut self.raw.mut_store().durable;
        let held = match durable.staged() {
            Some((b, n)) if b == c.body => Some(n),
            _ => None,
        };
        match held {
            Some(n) if c.offset < n => {
                self.counters.chunks_ignored += 1;
                if c.offset == 0 {
                    self.ask(t, conn, c.body, n, true);
                }
            }
            Some(n) if c.offset > n => self.ask(t, conn, c.body, n, false),
            None if c.offset != 0 => self.ask(t, conn, c.body, 0, false),
            _ => match durable.stage(&c.body, c.offset, c.bytes) {
                Ok(_) => self.counters.snapshot_bytes_staged += c.bytes.len() as u64,
                Err(_) => self.counters.malformed += 1,
            },
        }
    }

    /// Asks the sender on `conn` for `body` from `offset` (unless asked
    /// for just that already and not `again`).
    fn ask(&mut self, t: &mut T, conn: ConnId, body: BodyId, offset: u64, again: bool) {
        self.counters.chunks_ignored += 1;
        if !again && self.asked == Some((body, offset)) {
            return;
        }
        self.asked = Some((body, offset));
        let r = Resume { body, from: self.config.id, offset };
        match t.send(conn, &RAFT_RESUME_MAGIC, r.encode()) {
            Ok(()) => self.counters.snapshot_resumes_asked += 1,
            Err(_) => self.counters.unsent += 1,
        }
    }

    /// Whether a `MsgSnapshot` may be stepped: a whole snapshot (an older
    /// sender) may; a streamed one only once its body is staged whole and
    /// checked (module docs).
    pub(super) fn snapshot_staged(&mut self, m: &Message) -> bool {
        let snap = m.get_snapshot();
        let Some(body) = stream::decode_descriptor(snap.get_data()) else { return true };
        let meta = snap.get_metadata();
        if meta.index != body.index || meta.term != body.term {
            self.counters.malformed += 1;
            return false;
        }
        if self.raw.mut_store().durable.verify_staged(&body) {
            return true;
        }
        self.counters.snapshots_unstaged += 1;
        false
    }
}
