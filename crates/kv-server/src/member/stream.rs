//! Streamed writes (issue 26 item 6): a write command with an argument
//! longer than [`PIECE_BYTES`] does not put that value in one Raft entry.
//! The member proposes it as piece entries of at most [`PIECE_BYTES`] each
//! (`pmwire_kv_cluster::extent::ExtKind::Piece`), at most [`WINDOW_BYTES`]
//! of them unapplied at a time, then, once every piece is applied, the
//! command itself naming the stream (`Arg::Streamed`). No message and no
//! log entry holds the whole value, and the Raft log needs room for the
//! window, not for the value.
//!
//! On the leader in zero-copy mode a piece names the pool buffers the value
//! was received into (flushed in place, PASTE's extents): no value byte is
//! copied on it. Elsewhere (a follower, whose proposals raft-rs forwards to
//! the leader; copy mode; a leader that lost its office mid-stream) a piece
//! carries its bytes. The received buffers are held by the stream until it
//! ends.
//!
//! The connection's later requests wait until the stream's command is
//! answered (as a blocked client's do), so that a client's commands run in
//! its order. A piece refused, or no leader, ends the stream with that
//! error; the pieces already applied are collected by the leader's sweep
//! once their stream is old (`pmwire_kv_cluster::machine::ext`).

use std::borrow::Cow;
use std::net::SocketAddr;

use pmwire_kv_cluster::extent::{Arg, Extent, PieceHead, StreamId, MAX_REF_EXTENTS};
use pmwire_netio::ConnId;
use pmwire_resp::reply::Protocol;
use pmwire_smr::node::Done;
use raft::StateRole;
use transport::Transport;

use super::{failure_reply, Member, Owner, Slot};
use crate::store::Mode;

/// Longest argument that travels inside its command's entry; a longer one
/// is streamed (64 buffers of 2 KiB: what one pool argument may name).
pub const PIECE_BYTES: usize = 128 << 10;
/// Most bytes of one stream's pieces proposed and not yet applied (less
/// with a Raft log under 32 MiB: half of a quarter of it).
pub const WINDOW_BYTES: u64 = 4 << 20;

/// Where a streamed argument's bytes are.
pub(super) enum Source {
    /// Received into the pool: one group of extents per piece.
    Pool(Vec<Vec<Extent>>),
    /// Copied out of the request.
    Bytes(Vec<u8>),
}

impl Source {
    fn pieces(&self) -> u32 {
        match self {
            Source::Pool(groups) => groups.len() as u32,
            Source::Bytes(b) => b.len().div_ceil(PIECE_BYTES) as u32,
        }
    }
}

/// One argument of a streamed command.
pub(super) enum Part {
    /// Travels inside the command's entry.
    Inline(Vec<u8>),
    /// Streamed.
    Streamed(Source),
}

/// A streamed argument, with what its pieces are named by.
struct Streamed {
    id: StreamId,
    len: u32,
    /// crc32c of the pieces proposed so far (whole once all are: each
    /// piece's bytes are read once, when it is proposed, so the value is
    /// not read in one turn before its first piece goes).
    crc: u32,
    source: Source,
}

/// A command being streamed.
pub(super) struct Stream {
    conn: ConnId,
    /// The connection's reply slot.
    seq: u64,
    protocol: Protocol,
    /// The command's arguments: inline bytes, or the index into `streamed`.
    args: Vec<Result<Vec<u8>, usize>>,
    streamed: Vec<Streamed>,
    /// The next piece to propose: (streamed argument, piece).
    next: (usize, u32),
    /// Bytes of pieces proposed and not yet applied.
    in_flight: u64,
    /// Pieces proposed and not yet applied.
    outstanding: u32,
    /// Bytes it may have unapplied now: one piece at first, one piece more
    /// per piece applied (doubling each round trip, as TCP's slow start),
    /// up to the window: the turn that received a large value (its parse
    /// alone can take tens of milliseconds) does not also gather and send
    /// a whole window, so the leader's loop stays within a heartbeat of
    /// its followers.
    window: u64,
    /// Buffers this stream holds (a pool source's).
    held: Vec<u32>,
}

/// An argument's pieces over the receive buffers: runs of at most
/// [`MAX_REF_EXTENTS`] extents and [`PIECE_BYTES`] bytes.
pub(super) fn group(extents: Vec<Extent>) -> Vec<Vec<Extent>> {
    let per = MAX_REF_EXTENTS as usize;
    let mut groups = Vec::with_capacity(extents.len().div_ceil(per));
    let mut cur: Vec<Extent> = Vec::with_capacity(per);
    let mut bytes = 0usize;
    for e in extents {
        if cur.len() == per || bytes + e.len as usize > PIECE_BYTES {
            groups.push(std::mem::replace(&mut cur, Vec::with_capacity(per)));
            bytes = 0;
        }
        bytes += e.len as usize;
        cur.push(e);
    }
    if !cur.is_empty() {
        groups.push(cur);
    }
    groups
}

impl<T: Transport<Addr = SocketAddr>> Member<T> {
    /// Starts streaming the command `parts` for connection `id` (module docs).
    pub(super) fn start_stream(&mut self, id: ConnId, parts: Vec<Part>) {
        let now = Self::now_ms();
        let store = self.reactor.service.machine_mut().keyspace().shared_store().clone();
        let mut args = Vec::with_capacity(parts.len());
        let mut streamed = Vec::new();
        let mut held = Vec::new();
        for part in parts {
            match part {
                Part::Inline(b) => args.push(Ok(b)),
                Part::Streamed(source) => {
                    let len = match &source {
                        Source::Pool(groups) => {
                            held.extend(groups.iter().flatten().map(|e| e.buf_idx));
                            groups.iter().flatten().map(|e| u64::from(e.len)).sum::<u64>()
                        }
                        Source::Bytes(b) => b.len() as u64,
                    };
                    let len = u32::try_from(len).expect("a request's argument fits u32");
                    args.push(Err(streamed.len()));
                    streamed.push(Streamed { id: self.proposer.stream_id(now), len, crc: 0, source });
                }
            }
        }
        store.retain_all(&held);
        let conn = self.conn(id);
        let protocol = conn.session.protocol;
        conn.streaming = true;
        let seq = conn.push(Slot::Write);
        self.stats.streams += 1;
        let key = self.next_stream;
        self.next_stream += 1;
        self.streams.insert(key, Stream { conn: id, seq, protocol, args, streamed, next: (0, 0), in_flight: 0, outstanding: 0, window: PIECE_BYTES as u64, held });
        self.pump_stream(key);
    }

    /// Proposes what stream `key` may propose now: pieces up to the window,
    /// or its command once every piece is applied. True if it proposed.
    pub(super) fn pump_stream(&mut self, key: u64) -> bool {
        let mut flushed = false;
        let proposed = self.propose_pieces(key, &mut flushed);
        if flushed {
            // The pieces' values are durable before an entry naming them can
            // be: the log appends them in a later turn (`member::zc`).
            self.reactor.service.machine_mut().keyspace().shared_store().drain();
        }
        proposed
    }

    /// [`Member::pump_stream`]'s proposals; `flushed` if a piece named
    /// pool extents (flushed, not yet drained).
    fn propose_pieces(&mut self, key: u64, flushed: &mut bool) -> bool {
        let mut proposed = false;
        loop {
            let Some(s) = self.streams.get(&key) else { return proposed };
            let (arg, piece) = s.next;
            if arg == s.streamed.len() {
                if s.outstanding > 0 {
                    return proposed;
                }
                self.finish_stream(key);
                return true;
            }
            // Half of what one turn may propose, so that the stream leaves
            // room to the other clients (raft-rs drops proposals past its
            // uncommitted bound, the same quarter of the log).
            let most = self.reactor.service.max_entry_bytes().map_or(WINDOW_BYTES, |m| (m / 2).min(WINDOW_BYTES));
            if s.in_flight > 0 && s.in_flight + PIECE_BYTES as u64 > s.window.min(most) {
                return proposed;
            }
            let (entry, bytes, hold) = self.piece_entry(key, arg, piece);
            let s = self.streams.get_mut(&key).expect("looked up above");
            s.next = if piece + 1 == s.streamed[arg].source.pieces() { (arg + 1, 0) } else { (arg, piece + 1) };
            let Some(ticket) = self.submit(entry) else {
                self.end_stream(key, Self::no_leader());
                return proposed;
            };
            let s = self.streams.get_mut(&key).expect("looked up above");
            s.in_flight += bytes;
            s.outstanding += 1;
            self.stats.pieces += 1;
            self.tickets.insert(ticket, Owner::Piece(key, bytes));
            if !hold.is_empty() {
                *flushed = true;
                self.reactor.service.machine_mut().keyspace().hold_until_settled(&hold);
            }
            proposed = true;
        }
    }

    /// Piece `piece` of streamed argument `arg`: the entry, its value
    /// bytes, and the extents to hold until it settles (a pool piece).
    fn piece_entry(&mut self, key: u64, arg: usize, piece: u32) -> (Vec<u8>, u64, Vec<Extent>) {
        let by_extents = self.mode == Mode::ZeroCopy && self.reactor.service.status().role == StateRole::Leader;
        let store = self.reactor.service.machine_mut().keyspace().shared_store().clone();
        let s = self.streams.get_mut(&key).expect("a stream proposing");
        let st = &mut s.streamed[arg];
        let head = PieceHead { stream: st.id, index: piece, count: st.source.pieces() };
        let (value, bytes, hold, crc) = match &st.source {
            Source::Pool(groups) => {
                let extents = &groups[piece as usize];
                let len: u32 = extents.iter().map(|e| u32::from(e.len)).sum();
                if by_extents {
                    // Drained once for the pump's pieces (`pump_stream`).
                    extents.iter().for_each(|&e| store.flush_extent(e));
                    let crc = store.crc_of(extents);
                    (Arg::Pool { len, crc, extents: extents.clone() }, len, extents.clone(), crc)
                } else {
                    self.copies.add(|c| c.entry += u64::from(len));
                    let bytes = store.gather(extents);
                    let crc = crc32c::crc32c(&bytes);
                    (Arg::Inline(Cow::Owned(bytes)), len, Vec::new(), crc)
                }
            }
            Source::Bytes(b) => {
                let at = piece as usize * PIECE_BYTES;
                let chunk = &b[at..b.len().min(at + PIECE_BYTES)];
                self.copies.add(|c| c.entry += chunk.len() as u64);
                (Arg::Inline(Cow::Borrowed(chunk)), chunk.len() as u32, Vec::new(), crc32c::crc32c(chunk))
            }
        };
        let combined = crc32c::crc32c_combine(st.crc, crc, bytes as usize);
        let entry = self.proposer.piece(Self::now_ms(), head, value);
        self.streams.get_mut(&key).expect("a stream proposing").streamed[arg].crc = combined;
        (entry, u64::from(bytes), hold)
    }

    /// Every piece is applied: proposes the command naming them.
    fn finish_stream(&mut self, key: u64) {
        let s = self.streams.remove(&key).expect("a stream finishing");
        let args: Vec<Arg<'_>> = s
            .args
            .iter()
            .map(|a| match a {
                Ok(b) => Arg::Inline(Cow::Borrowed(&b[..])),
                Err(i) => {
                    let st = &s.streamed[*i];
                    Arg::Streamed { len: st.len, crc: st.crc, stream: st.id, pieces: st.source.pieces() }
                }
            })
            .collect();
        let inline: u64 = s.args.iter().skip(2).filter_map(|a| a.as_ref().ok()).map(|b| b.len() as u64).sum();
        self.copies.add(|c| c.entry += inline);
        let entry = self.proposer.command_extents(Self::now_ms(), s.protocol, args);
        let store = self.reactor.service.machine_mut().keyspace().shared_store().clone();
        store.release_all(&s.held);
        let reply = match self.submit(entry) {
            Some(ticket) => {
                self.tickets.insert(ticket, Owner::Slot(s.conn, s.seq));
                None
            }
            None => Some(Self::no_leader()),
        };
        self.stream_ended(s.conn, s.seq, reply);
    }

    /// A piece's outcome.
    pub(super) fn piece_done(&mut self, key: u64, bytes: u64, done: Done<pmwire_kv_cluster::Applied>) {
        let Some(s) = self.streams.get_mut(&key) else { return };
        s.outstanding -= 1;
        s.in_flight -= bytes;
        s.window = (s.window + PIECE_BYTES as u64).min(WINDOW_BYTES);
        match done {
            Done::Applied { output, .. } if output.reply.first() == Some(&b'-') => self.end_stream(key, output.reply),
            Done::Applied { .. } => _ = self.pump_stream(key),
            Done::Failed(f) => {
                let reply = failure_reply(f, &mut self.stats);
                self.end_stream(key, reply);
            }
            Done::Readable { .. } => unreachable!("a piece's ticket is never readable"),
        }
    }

    /// Ends stream `key` with the error `reply` (nothing of its command is
    /// applied).
    fn end_stream(&mut self, key: u64, reply: Vec<u8>) {
        let Some(s) = self.streams.remove(&key) else { return };
        let store = self.reactor.service.machine_mut().keyspace().shared_store().clone();
        store.release_all(&s.held);
        self.cut(&s);
        self.stream_ended(s.conn, s.seq, Some(reply));
    }

    /// Stream `s` ends without its command: for each streamed argument
    /// that has pieces proposed, proposes an empty piece out of order (its
    /// last index), which every member's machine takes as the stream
    /// broken (`pmwire_kv_cluster::machine::ext`), so the leader's next
    /// sweep frees the pieces kept so far instead of waiting
    /// [`pmwire_kv_cluster::machine::ext::ABANDONED_MS`] for them (an
    /// upload cut short by its client would hold up to its whole value in
    /// every member's pool meanwhile). A piece still in flight applies
    /// before it (one proposer, the log's order) or, forwarded past it,
    /// finds the stream broken and is dropped. Without a leader the
    /// proposal fails and the stream is left to the sweep's abandon rule.
    fn cut(&mut self, s: &Stream) {
        let now = Self::now_ms();
        for (arg, st) in s.streamed.iter().enumerate() {
            let count = st.source.pieces();
            let proposed = arg < s.next.0 || (arg == s.next.0 && s.next.1 > 0);
            if !proposed || count < 2 {
                continue;
            }
            let head = PieceHead { stream: st.id, index: count - 1, count };
            let entry = self.proposer.piece(now, head, Arg::Inline(Cow::Borrowed(&[])));
            if self.submit(entry).is_some() {
                self.stats.streams_cut += 1;
            }
        }
    }

    /// The connection's stream is over: its slot answered now (`Some`) or
    /// by the command's ticket; its held requests are served.
    fn stream_ended(&mut self, id: ConnId, seq: u64, reply: Option<Vec<u8>>) {
        let Some(conn) = self.conns.get_mut(&id) else { return };
        conn.streaming = false;
        if let (Some(reply), Some(slot)) = (reply, conn.slot(seq)) {
            *slot = Slot::Ready(reply);
        }
        self.to_wake.push(id);
        self.resume(id);
    }

    /// Connection `id` closed: its streams end, their buffers given back.
    pub(super) fn drop_streams_of(&mut self, id: ConnId) {
        let keys: Vec<u64> = self.streams.iter().filter(|(_, s)| s.conn == id).map(|(k, _)| *k).collect();
        let store = self.reactor.service.machine_mut().keyspace().shared_store().clone();
        for key in keys {
            let s = self.streams.remove(&key).expect("listed above");
            store.release_all(&s.held);
            self.cut(&s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_hold_at_most_a_pool_arguments_extents_and_bytes() {
        let e = |len: u16| Extent { buf_idx: 1, offset: 0, len };
        let groups = group(vec![e(2048); 130]);
        assert_eq!(groups.iter().map(Vec::len).collect::<Vec<_>>(), vec![64, 64, 2]);
        let groups = group(vec![e(100); 70]);
        assert_eq!(groups.iter().map(Vec::len).collect::<Vec<_>>(), vec![64, 6]);
        assert!(group(Vec::new()).is_empty());
    }
}
