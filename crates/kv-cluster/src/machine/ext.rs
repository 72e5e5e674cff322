//! Applying an extent-form entry ([`crate::extent`]): the command is parsed
//! over segments that are partly the entry's own framing and inline
//! arguments, partly the pool bytes its values name, so an argument whose
//! pieces all lie in the pool is stored by its extents (no value byte
//! moves). Each pool value's crc32c is checked first: a mismatch means this
//! member's pool no longer holds what its log says (a buffer freed while a
//! log entry named it), a local fault that halts the member rather than
//! applying other bytes.
//!
//! Streamed values ([`crate::extent::ExtKind::Piece`]): a piece entry is
//! kept as an internal entry of the keyspace under [`PIECE_TAG`] (by its
//! extents where the keyspace has a pool: no byte moves), so it is in every
//! snapshot and survives a restart like any key. The command naming the
//! stream ([`Arg::Streamed`]) is parsed over its pieces' bytes, in order,
//! and marks the stream finished ([`FINISHED_TAG`]: one write, so the
//! entry costs the same whatever the piece count); the leader's sweep
//! entries then delete a finished stream's pieces, a bounded number per
//! entry, and its mark with the last. A piece missing (a leader change cut
//! the stream: every member has the same pieces, so every member finds
//! the same one missing), or a stream already finished, refuses the
//! command whole; pieces whose stream never finished are deleted by a
//! sweep [`ABANDONED_MS`] after the stream began.

use std::io::Write;

use pmwire_keyspace::store::{Keyspace, StoreError};
use pmwire_resp::request::{Limits, Parsed};

use super::{refusal, store_failed, Applied, Kind, MachineKeyspace, PieceValue, Ran, RedisMachine};
use crate::commands::{class, Class};
use crate::entry::EntryError;
use crate::extent::{Arg, ExtEntry, Extent, StreamId};
use crate::machine::ExtentBytes;

/// The internal-key tag of streamed pieces (beside the keyspace's own
/// `00`-`03` and `05`: `pmwire_keyspace::chunked`, scripts, functions;
/// below the machine's [`super::MACHINE_TAG`], so snapshots carry them).
/// It was `03` until SCRIPT FLUSH, which deletes every `03` key, was found
/// to take a stream's pieces with the scripts.
pub const PIECE_TAG: u8 = 0x06;
/// The internal-key tag of a stream's state (`04 ‖ time u64be ‖ nonce
/// u64be`, a [`StreamState`]).
pub const STREAM_TAG: u8 = 0x04;
/// How long after its stream began a piece is kept for the command that
/// names it; a sweep deletes it after that.
pub const ABANDONED_MS: u64 = 10 * 60 * 1000;
/// Bytes of a piece's key: tag, stream time and nonce, index (big-endian,
/// so keys sort by stream time).
pub const PIECE_KEY_BYTES: usize = 21;
/// Bytes of a stream state's key.
pub const STREAM_KEY_BYTES: usize = 17;
/// Stream states a sweep looks at for one it may collect.
const SWEEP_SCAN: usize = 64;

/// The most segments, and framing bytes, of an entry whose scratch
/// (`RedisMachine::ext_scratch`) is kept for the next.
const SCRATCH_MAX_SEGMENTS: usize = 64;
const SCRATCH_MAX_FRAMING: usize = 64 << 10;

/// The internal key of piece `index` of `stream`.
pub fn piece_key(stream: StreamId, index: u32) -> [u8; PIECE_KEY_BYTES] {
    let mut k = [0u8; PIECE_KEY_BYTES];
    k[..STREAM_KEY_BYTES].copy_from_slice(&stream_key(stream));
    k[0] = PIECE_TAG;
    k[17..].copy_from_slice(&index.to_be_bytes());
    k
}

/// The internal key of `stream`'s state.
pub fn stream_key(stream: StreamId) -> [u8; STREAM_KEY_BYTES] {
    let mut k = [0u8; STREAM_KEY_BYTES];
    k[0] = STREAM_TAG;
    k[1..9].copy_from_slice(&stream.time_ms.to_be_bytes());
    k[9..].copy_from_slice(&stream.nonce.to_be_bytes());
    k
}

/// Where a stream stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Phase {
    /// Its pieces are arriving in order.
    #[default]
    Open,
    /// Its command ran (or was refused): its pieces wait for a sweep.
    Finished,
    /// A piece came out of order: its command will be refused.
    Broken,
}

/// A stream's state (24 B, little-endian: pieces kept u32, phase u8 (0
/// open, 1 finished, 2 broken), 3 zero bytes, bytes kept u64, crc32c of
/// the bytes kept u32, 4 zero bytes): every member keeps it from the same
/// piece entries, so the command checks the value's length and checksum
/// without reading the value again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamState {
    /// Pieces kept: the index the next piece must have.
    pub next: u32,
    /// Where it stands.
    pub phase: Phase,
    /// Bytes kept.
    pub len: u64,
    /// crc32c of the bytes kept, in order.
    pub crc: u32,
}

impl StreamState {
    fn encode(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        out[..4].copy_from_slice(&self.next.to_le_bytes());
        out[4] = match self.phase {
            Phase::Open => 0,
            Phase::Finished => 1,
            Phase::Broken => 2,
        };
        out[8..16].copy_from_slice(&self.len.to_le_bytes());
        out[16..20].copy_from_slice(&self.crc.to_le_bytes());
        out
    }

    /// A state written by another build or damaged reads as broken: its
    /// command is refused and a sweep collects it.
    fn decode(b: &[u8]) -> StreamState {
        let broken = StreamState { phase: Phase::Broken, ..StreamState::default() };
        if b.len() != 24 || b[5..8] != [0; 3] || b[20..] != [0; 4] {
            return broken;
        }
        let phase = match b[4] {
            0 => Phase::Open,
            1 => Phase::Finished,
            _ => Phase::Broken,
        };
        StreamState {
            next: u32::from_le_bytes(b[..4].try_into().expect("4 bytes")),
            phase,
            len: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            crc: u32::from_le_bytes(b[16..20].try_into().expect("4 bytes")),
        }
    }
}

/// The state of `stream`, if it has one.
pub fn stream_state<K: Keyspace + ?Sized>(ks: &mut K, stream: StreamId) -> Option<StreamState> {
    let mut bytes = Vec::with_capacity(24);
    ks.internal_read(&stream_key(stream), &mut bytes).then(|| StreamState::decode(&bytes))
}

fn put_state<K: Keyspace + ?Sized>(ks: &mut K, stream: StreamId, st: StreamState) -> Result<(), StoreError> {
    ks.internal_put(&stream_key(stream), &st.encode())
}

/// The first stream a sweep at `now_ms` may collect (finished, broken, or
/// begun [`ABANDONED_MS`] before), among the first [`SWEEP_SCAN`].
fn collectable<K: Keyspace + ?Sized>(ks: &mut K, now_ms: u64) -> Option<(StreamId, StreamState)> {
    let mut keys = Vec::new();
    ks.internal_scan(&[STREAM_TAG], SWEEP_SCAN, &mut |k| {
        if k.len() == STREAM_KEY_BYTES && k[0] == STREAM_TAG {
            keys.push(k.to_vec());
        }
    });
    keys.into_iter().find_map(|k| {
        let stream = StreamId {
            time_ms: u64::from_be_bytes(k[1..9].try_into().expect("8 bytes")),
            nonce: u64::from_be_bytes(k[9..].try_into().expect("8 bytes")),
        };
        let st = stream_state(ks, stream)?;
        (st.phase != Phase::Open || stream.time_ms < now_ms.saturating_sub(ABANDONED_MS)).then_some((stream, st))
    })
}

/// Whether a stream waits for collection at `now_ms`.
pub fn has_garbage<K: Keyspace + ?Sized>(ks: &mut K, now_ms: u64) -> bool {
    collectable(ks, now_ms).is_some()
}

/// Deletes up to `budget` pieces of collectable streams, and a stream's
/// state with its last piece; how many entries it deleted.
pub fn collect_pieces<K: Keyspace + ?Sized>(ks: &mut K, now_ms: u64, budget: usize) -> Result<usize, StoreError> {
    let mut deleted = 0;
    while deleted < budget {
        let Some((stream, st)) = collectable(ks, now_ms) else { break };
        if st.phase == Phase::Open {
            // Abandoned: broken first, so that a command still to come is
            // refused rather than finding its first pieces gone.
            put_state(ks, stream, StreamState { phase: Phase::Broken, ..st })?;
        }
        let prefix = piece_key(stream, 0);
        let prefix = &prefix[..STREAM_KEY_BYTES];
        let mut doomed = Vec::new();
        ks.internal_scan(prefix, budget - deleted, &mut |k| {
            if k.starts_with(prefix) {
                doomed.push(k.to_vec());
            }
        });
        for k in &doomed {
            ks.internal_delete(k)?;
        }
        deleted += doomed.len();
        if deleted == budget {
            break;
        }
        ks.internal_delete(&stream_key(stream))?;
        deleted += 1;
    }
    Ok(deleted)
}

/// Why an entry's arguments cannot be read.
enum Missing {
    /// A streamed argument the command cannot have: its error reply (every
    /// member kept the same pieces, so every member refuses alike).
    Refused(String),
    /// A local fault.
    Fault(String),
}

impl Missing {
    fn refused(text: String) -> Missing {
        Missing::Refused(format!("-ERR pmwire: {text}; nothing was applied\r\n"))
    }

    /// Piece `piece` of streamed argument `arg` is not there.
    fn piece(arg: usize, piece: u32) -> Missing {
        Missing::refused(format!("piece {piece} of argument {arg}, a streamed value, is missing (a change of leader cut its stream)"))
    }
}

/// The bytes `extents` name in this member's pool, checked against `crc`
/// if given (`Err`: a local fault, an extent outside the pool or a buffer
/// reused while the log or a piece named it).
fn lend<K: MachineKeyspace>(ks: &K, extents: &[Extent], crc: Option<u32>) -> Result<Vec<ExtentBytes>, String> {
    let lent = extents
        .iter()
        .map(|&x| ks.extent_bytes(x).ok_or_else(|| format!("extent {x:?} is outside this member's pool")))
        .collect::<Result<Vec<_>, _>>()?;
    match crc {
        Some(crc) if lent.iter().fold(0, |s, b| crc32c::crc32c_append(s, b.bytes())) != crc => {
            Err("the pool bytes its extents name fail their checksum (a buffer reused while the log named it)".into())
        }
        _ => Ok(lent),
    }
}

/// A segment of the command: a range of the framing buffer, or pool bytes.
enum Piece {
    Framing(usize, usize),
    Pool(ExtentBytes, (u32, u32)),
}

/// The command's RESP bytes as pieces: framing and inline arguments in
/// `framing`, pool values as their extents' bytes (checked against their
/// crc32c), streamed values as their pieces' bytes.
fn pieces<K: MachineKeyspace>(ks: &mut K, e: &ExtEntry<'_>, framing: &mut Vec<u8>) -> Result<Vec<Piece>, Missing> {
    let mut out = Vec::with_capacity(e.args.len() + 2);
    let mut start = 0;
    // Into the framing itself: an allocation per argument showed in a
    // follower's profile.
    write!(framing, "*{}\r\n", e.args.len()).expect("a Vec takes every write");
    for (i, a) in e.args.iter().enumerate() {
        write!(framing, "${}\r\n", a.len()).expect("a Vec takes every write");
        match a {
            Arg::Inline(b) => framing.extend_from_slice(b),
            Arg::Pool { crc, extents, .. } => {
                out.push(Piece::Framing(start, framing.len()));
                let lent = lend(ks, extents, Some(*crc)).map_err(|why| Missing::Fault(format!("argument {i}: {why}")))?;
                out.extend(lent.into_iter().zip(extents).map(|(b, x)| Piece::Pool(b, (x.buf_idx, u32::from(x.offset)))));
                start = framing.len();
            }
            Arg::Streamed { len, crc, stream, pieces } => {
                // The state says whether every piece is there, in order, and
                // what their bytes sum to: the value is not read again.
                let st = stream_state(ks, *stream).ok_or(Missing::piece(i, 0))?;
                match st.phase {
                    Phase::Finished => return Err(Missing::refused(format!("argument {i} names a streamed value an earlier command used"))),
                    Phase::Broken => return Err(Missing::piece(i, st.next)),
                    Phase::Open => {}
                }
                if st.next != *pieces || st.len != u64::from(*len) {
                    return Err(Missing::piece(i, st.next.min(*pieces)));
                }
                if st.crc != *crc {
                    return Err(Missing::refused(format!("argument {i}, a streamed value, fails its checksum")));
                }
                out.push(Piece::Framing(start, framing.len()));
                for index in 0..*pieces {
                    let key = piece_key(*stream, index);
                    match ks.piece_extents(&key) {
                        Some(extents) => {
                            let lent = lend(ks, &extents, None).map_err(|why| Missing::Fault(format!("piece {index}: {why}")))?;
                            out.extend(lent.into_iter().zip(&extents).map(|(b, x)| Piece::Pool(b, (x.buf_idx, u32::from(x.offset)))));
                        }
                        None => {
                            let value = ks
                                .internal_get(&key)
                                .ok_or_else(|| Missing::Fault(format!("piece {index} of a stream whose state holds it is not there")))?;
                            let at = framing.len();
                            ks.read(&value, framing);
                            out.push(Piece::Framing(at, framing.len()));
                        }
                    }
                }
                start = framing.len();
            }
        }
        framing.extend_from_slice(b"\r\n");
    }
    out.push(Piece::Framing(start, framing.len()));
    Ok(out)
}

impl<K: MachineKeyspace> RedisMachine<K> {
    /// Runs an extent-form entry (module docs).
    pub(super) fn run_ext(&mut self, index: u64, e: &ExtEntry<'_>, time_ms: u64) -> Result<Ran, EntryError> {
        if let Some((head, value)) = e.piece() {
            return Ok(self.keep_piece(index, head, value));
        }
        let (mut framing, mut parsed) =
            self.ext_scratch.take().unwrap_or_else(|| (Vec::new(), Parsed::new(Limits { max_commands: 1, ..Limits::default() }).gather_lazily()));
        framing.clear();
        let pieces = match pieces(self.ks.get_mut(), e, &mut framing) {
            Ok(p) => p,
            Err(Missing::Fault(why)) => {
                self.fault.get_or_insert(format!("entry {index}: {why}"));
                return Ok(Ran { applied: refusal(EntryError::Field("pool extent")), touched: Vec::new(), cleared: false });
            }
            Err(Missing::Refused(reply)) => {
                let applied = match self.finish_streams(e, Phase::Broken) {
                    Ok(()) => Applied { reply: reply.into_bytes(), ..Applied::default() },
                    Err(err) => store_failed(err, e.protocol),
                };
                return Ok(Ran { applied, touched: Vec::new(), cleared: false });
            }
        };
        let segments: Vec<&[u8]> = pieces
            .iter()
            .map(|p| match p {
                Piece::Framing(a, b) => &framing[*a..*b],
                Piece::Pool(bytes, _) => bytes.bytes(),
            })
            .collect();
        let locs: Vec<Option<(u32, u32)>> = pieces.iter().map(|p| if let Piece::Pool(_, at) = p { Some(*at) } else { None }).collect();
        let summary = parsed.parse(&segments);
        let total: usize = segments.iter().map(|s| s.len()).sum();
        if summary.error.is_some() || summary.consumed != total || summary.commands != 1 {
            return Err(EntryError::Commands);
        }
        if class(parsed.request(&segments, 0).arg(0)) == Class::Session {
            return Err(EntryError::NotReplicated);
        }
        self.ks.get_mut().set_segment_locs(&locs);
        let mut ran = self.run_parsed(index, (Kind::Command, e.seed, e.protocol), false, time_ms, &parsed, &segments);
        self.ks.get_mut().set_segment_locs(&[]);
        // Kept for the next entry unless this one was large (a value of many
        // pieces would keep its parse's capacity).
        if segments.len() <= SCRATCH_MAX_SEGMENTS && framing.capacity() <= SCRATCH_MAX_FRAMING {
            drop(segments);
            self.ext_scratch = Some((framing, parsed));
        }
        if let Err(err) = self.finish_streams(e, Phase::Finished) {
            ran.applied = store_failed(err, e.protocol);
        }
        Ok(ran)
    }

    /// Keeps piece `head` of a streamed value until the command naming it,
    /// if it is the next of an open stream (otherwise the stream is broken
    /// and the piece dropped: its command will be refused).
    fn keep_piece(&mut self, index: u64, head: crate::extent::PieceHead, value: &Arg<'_>) -> Ran {
        let ks = self.ks.get_mut();
        let mut st = stream_state(ks, head.stream).unwrap_or_default();
        let ok = || Ran { applied: Applied { reply: b"+OK\r\n".to_vec(), ..Applied::default() }, touched: Vec::new(), cleared: false };
        if st.phase != Phase::Open || head.index != st.next {
            if st.phase == Phase::Open {
                st.phase = Phase::Broken;
                if let Err(err) = put_state(ks, head.stream, st) {
                    return Ran { applied: store_failed(err, pmwire_resp::reply::Protocol::Resp2), touched: Vec::new(), cleared: false };
                }
            }
            return ok();
        }
        let key = piece_key(head.stream, head.index);
        let (result, crc) = match value {
            Arg::Inline(b) => (ks.put_piece(&key, PieceValue::Bytes(b)), crc32c::crc32c(b)),
            Arg::Pool { crc, extents, .. } => {
                if let Err(why) = lend(ks, extents, Some(*crc)) {
                    self.fault.get_or_insert(format!("entry {index}: a piece: {why}"));
                    return Ran { applied: refusal(EntryError::Field("pool extent")), touched: Vec::new(), cleared: false };
                }
                (ks.put_piece(&key, PieceValue::Pool(extents)), *crc)
            }
            Arg::Streamed { .. } => unreachable!("a piece's value is inline or in the pool"),
        };
        let len = value.len();
        st.next += 1;
        st.crc = crc32c::crc32c_combine(st.crc, crc, len as usize);
        st.len += len;
        match result.and_then(|()| put_state(ks, head.stream, st)) {
            Ok(()) => ok(),
            Err(err) => Ran { applied: store_failed(err, pmwire_resp::reply::Protocol::Resp2), touched: Vec::new(), cleared: false },
        }
    }

    /// Sets the state of the entry's streams that have one to `phase`
    /// (their pieces go with later sweeps).
    fn finish_streams(&mut self, e: &ExtEntry<'_>, phase: Phase) -> Result<(), StoreError> {
        let ks = self.ks.get_mut();
        for (stream, _) in e.streamed() {
            if let Some(st) = stream_state(ks, stream) {
                put_state(ks, stream, StreamState { phase, ..st })?;
            }
        }
        Ok(())
    }
}
