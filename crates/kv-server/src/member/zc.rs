//! The leader's zero-copy write path (issue 26 item 4): a write command
//! received into pool buffers becomes an extent-form entry
//! (`pmwire_kv_cluster::extent`) naming its values where they landed, not
//! holding them. Kept apart from the member's loop so the loop's edits stay
//! small: [`Member::zero_copy_write`] is called per parsed request and
//! either proposes the entry or leaves the request to the copying path.
//!
//! A value argument (after the command's name and first key) of at least
//! [`MIN_EXTENT_VALUE_BYTES`] whose pieces number at most
//! [`MAX_REF_EXTENTS`] is named by its extents: each piece's lines are
//! flushed and drained now, before the entry can be durable (the Raft
//! log's self-validating tail may reach the media before the log's own
//! fence: seed 001's flush in place + 8 B extent), its crc32c goes into the entry,
//! and its buffers are held (`ClusterKeyspace::hold_until_settled`) until
//! the entry is in the durable log, which then holds them itself. Shorter
//! arguments are copied into the entry and counted.
//!
//! Only in [`Mode::ZeroCopy`], only for a [`Class::Write`] outside MULTI
//! on an authenticated connection: anything else takes the copying path
//! unchanged. A follower that forwards (not one that answers `-MOVED`)
//! streams a long value from the receive buffers as the leader does, and
//! forwards a write with a value of at least [`MIN_EXTENT_VALUE_BYTES`] as
//! an extent-form entry whose arguments are all inline
//! ([`Member::forward_write`]): the leader and the followers then name its
//! values where their peer transport received them, as for the leader's
//! own writes.

use std::borrow::Cow;
use std::net::SocketAddr;

use pmwire_kv_cluster::commands::{class, Class};
use pmwire_kv_cluster::extent::{Arg, Extent, MAX_REF_EXTENTS};
use pmwire_netio::{ConnId, Segment};
use pmwire_resp::request::Request;
use raft::StateRole;
use transport::Transport;

use super::stream::{group, Part, Source, PIECE_BYTES};
use super::Member;
use crate::cluster::MIN_EXTENT_VALUE_BYTES;
use crate::store::Mode;

/// An argument's extents in the receive buffers, if it is to go by them.
fn extents_of(req: &Request<'_>, i: usize, segments: &[Segment<'_>]) -> Option<Vec<Extent>> {
    let arg = req.arg_ref(i);
    if i < 2 || arg.len() < MIN_EXTENT_VALUE_BYTES || arg.pieces.is_empty() || arg.pieces.len() > MAX_REF_EXTENTS as usize {
        return None;
    }
    all_extents(req, i, segments)
}

/// Every extent of an argument in the receive buffers (`None`: some of it is not there).
fn all_extents(req: &Request<'_>, i: usize, segments: &[Segment<'_>]) -> Option<Vec<Extent>> {
    let arg = req.arg_ref(i);
    if arg.pieces.is_empty() {
        return None;
    }
    let mut extents = Vec::with_capacity(arg.pieces.len());
    for p in arg.pieces {
        let s = segments.get(p.segment as usize)?;
        let offset = u16::try_from(s.offset.checked_add(p.start)?).ok()?;
        let len = u16::try_from(p.len).ok()?;
        extents.push(Extent { buf_idx: s.buf, offset, len });
    }
    Some(extents)
}

/// The crc32c of an argument's pieces, read where they lie.
fn crc_of(req: &Request<'_>, i: usize, segments: &[Segment<'_>]) -> u32 {
    req.arg_ref(i).pieces.iter().fold(0, |crc, p| {
        let s = &segments[p.segment as usize];
        crc32c::crc32c_append(crc, &s.bytes[p.start as usize..(p.start + p.len) as usize])
    })
}

impl<T: Transport<Addr = SocketAddr>> Member<T> {
    /// Proposes `req` of connection `id` as an extent-form entry if it is
    /// eligible (module docs); false leaves it to the copying path.
    pub(super) fn zero_copy_write(&mut self, id: ConnId, req: &Request<'_>, segments: &[Segment<'_>]) -> bool {
        if self.mode != Mode::ZeroCopy || class(req.arg(0)) != Class::Write {
            return false;
        }
        // A follower streams a long value from where it was received too
        // (each piece gathered as it is forwarded), rather than copying the
        // whole value out of the request first (`member::stream`).
        let streams = (2..req.len()).any(|i| req.arg_len(i) > PIECE_BYTES);
        let leader = self.reactor.service.status().role == StateRole::Leader;
        if !leader && self.redirect.is_some() {
            return false;
        }
        let conn = self.conn(id);
        if !conn.session.is_authenticated() || conn.multi.is_some() || conn.blocked.is_some() || conn.streaming || !conn.held.is_empty() {
            return false;
        }
        let protocol = conn.session.protocol;
        if let Some(reply) = self.short_of_room_for(std::iter::once(req.arg(0))) {
            self.conn(id).push(super::Slot::Ready(reply));
            return true;
        }
        if streams {
            return self.stream_write(id, req, segments);
        }
        if !leader {
            return self.forward_write(id, req, protocol);
        }
        let mut args = Vec::with_capacity(req.len());
        let mut held = Vec::new();
        let mut inline_values = 0u64;
        for i in 0..req.len() {
            match extents_of(req, i, segments) {
                Some(extents) => {
                    let len = req.arg_len(i) as u32;
                    let crc = crc_of(req, i, segments);
                    held.extend_from_slice(&extents);
                    args.push(Arg::Pool { len, crc, extents });
                }
                None => {
                    if i >= 2 {
                        inline_values += req.arg_len(i) as u64;
                    }
                    args.push(Arg::Inline(Cow::Borrowed(req.arg(i))));
                }
            }
        }
        if held.is_empty() {
            return false;
        }
        let store = self.reactor.service.machine_mut().keyspace().shared_store().clone();
        for &e in &held {
            store.flush_extent(e);
        }
        store.drain();
        let entry = self.proposer.command_extents(Self::now_ms(), protocol, args);
        self.copies.add(|c| c.entry += inline_values);
        if self.propose(id, entry) {
            self.reactor.service.machine_mut().keyspace().hold_until_settled(&held);
        }
        true
    }

    /// A follower's write with a value long enough to go by extents: its
    /// entry in the extent form with every argument inline (a peer may
    /// name no buffer of the member it sends to), which the leader and
    /// every follower take into their pools where the message landed, as
    /// the leader's own appends (`ClusterHost::local_form`); false leaves
    /// a write of short values to the copying path.
    fn forward_write(&mut self, id: ConnId, req: &Request<'_>, protocol: pmwire_resp::reply::Protocol) -> bool {
        if !(2..req.len()).any(|i| req.arg_len(i) >= MIN_EXTENT_VALUE_BYTES) {
            return false;
        }
        let args: Vec<Arg<'_>> = (0..req.len()).map(|i| Arg::Inline(Cow::Borrowed(req.arg(i)))).collect();
        let values: u64 = (2..req.len()).map(|i| req.arg_len(i) as u64).sum();
        let entry = self.proposer.command_extents(Self::now_ms(), protocol, args);
        // Copied into the entry, then by protobuf's encoding into the
        // forwarded proposal's message to the leader.
        self.copies.add(|c| {
            c.entry += values;
            c.sent += values;
        });
        self.propose(id, entry);
        true
    }

    /// Streams `req` (`member::stream`): its long arguments by the pool
    /// extents they were received into; false if one is not all in the
    /// pool (the copying path streams it).
    fn stream_write(&mut self, id: ConnId, req: &Request<'_>, segments: &[Segment<'_>]) -> bool {
        let mut parts = Vec::with_capacity(req.len());
        for i in 0..req.len() {
            if i >= 2 && req.arg_len(i) > PIECE_BYTES {
                let Some(extents) = all_extents(req, i, segments) else { return false };
                parts.push(Part::Streamed(Source::Pool(group(extents))));
            } else {
                parts.push(Part::Inline(req.arg(i).to_vec()));
            }
        }
        self.start_stream(id, parts);
        true
    }
}
