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

use pmwire_keyspace::store::{Keyspace, StoreError};
use pmwire_resp::request::{Limits, Parsed};

use super::{refusal, store_failed, Applied, Kind, MachineKeyspace, Ran, RedisMachine};
use crate::commands::{class, Class};
use crate::entry::EntryError;
use crate::extent::{Arg, ExtEntry, StreamId};
use crate::machine::ExtentBytes;

/// The internal-key tag of streamed pieces (beside the keyspace's own
/// `00`-`02`, `pmwire_keyspace::chunked`; below the machine's
/// [`super::MACHINE_TAG`], so snapshots carry them).
pub const PIECE_TAG: u8 = 0x03;
/// The internal-key tag of a finished stream's mark (`04 ‖ time u64be ‖
/// nonce u64be`, empty value).
pub const FINISHED_TAG: u8 = 0x04;
/// How long after its stream began a piece is kept for the command that
/// names it; a sweep deletes it after that.
pub const ABANDONED_MS: u64 = 10 * 60 * 1000;
/// Bytes of a piece's key: tag, stream time and nonce, index (big-endian,
/// so keys sort by stream time).
pub const PIECE_KEY_BYTES: usize = 21;

/// The internal key of piece `index` of `stream`.
pub fn piece_key(stream: StreamId, index: u32) -> [u8; PIECE_KEY_BYTES] {
    let mut k = [0u8; PIECE_KEY_BYTES];
    k[0] = PIECE_TAG;
    k[1..9].copy_from_slice(&stream.time_ms.to_be_bytes());
    k[9..17].copy_from_slice(&stream.nonce.to_be_bytes());
    k[17..].copy_from_slice(&index.to_be_bytes());
    k
}

/// The internal key of `stream`'s finished mark.
pub fn finished_key(stream: StreamId) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = FINISHED_TAG;
    k[1..9].copy_from_slice(&stream.time_ms.to_be_bytes());
    k[9..].copy_from_slice(&stream.nonce.to_be_bytes());
    k
}

/// The first finished mark, if any.
fn first_finished<K: Keyspace + ?Sized>(ks: &mut K) -> Option<Vec<u8>> {
    let mut first = None;
    ks.internal_scan(&[FINISHED_TAG], 1, &mut |k| first = Some(k.to_vec()));
    first.filter(|k| k.len() == 17 && k[0] == FINISHED_TAG)
}

/// The stream time of a piece key (`None`: not a piece key).
fn piece_time(key: &[u8]) -> Option<u64> {
    (key.len() == PIECE_KEY_BYTES && key[0] == PIECE_TAG).then(|| u64::from_be_bytes(key[1..9].try_into().expect("8 bytes")))
}

/// Up to `budget` piece keys whose stream began before `before_ms`.
fn abandoned<K: Keyspace + ?Sized>(ks: &mut K, before_ms: u64, budget: usize) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    ks.internal_scan(&[PIECE_TAG], budget, &mut |k| {
        if piece_time(k).is_some_and(|t| t < before_ms) {
            keys.push(k.to_vec());
        }
    });
    keys
}

/// Whether a piece waits for collection at `now_ms` (its stream finished,
/// or abandoned).
pub fn has_garbage<K: Keyspace + ?Sized>(ks: &mut K, now_ms: u64) -> bool {
    first_finished(ks).is_some() || !abandoned(ks, now_ms.saturating_sub(ABANDONED_MS), 1).is_empty()
}

/// Deletes up to `budget` pieces of finished streams (and a mark once its
/// last piece is gone), then of streams abandoned at `now_ms`; how many
/// entries it deleted.
pub fn collect_pieces<K: Keyspace + ?Sized>(ks: &mut K, now_ms: u64, budget: usize) -> Result<usize, StoreError> {
    let mut deleted = 0;
    while deleted < budget {
        let Some(mark) = first_finished(ks) else { break };
        let mut prefix = mark.clone();
        prefix[0] = PIECE_TAG;
        let mut doomed = Vec::new();
        ks.internal_scan(&prefix, budget - deleted, &mut |k| {
            if k.starts_with(&prefix) {
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
        ks.internal_delete(&mark)?;
        deleted += 1;
    }
    let keys = abandoned(ks, now_ms.saturating_sub(ABANDONED_MS), budget - deleted);
    for k in &keys {
        ks.internal_delete(k)?;
    }
    Ok(deleted + keys.len())
}

/// Why a streamed argument cannot be read.
enum Missing {
    /// Its piece `index` is not there (or is not the length the stream says).
    Piece(usize, u32),
    /// Its stream was finished by an earlier command.
    Finished(usize),
    /// A local fault.
    Fault(String),
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
    framing.extend_from_slice(format!("*{}\r\n", e.args.len()).as_bytes());
    for (i, a) in e.args.iter().enumerate() {
        framing.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        match a {
            Arg::Inline(b) => framing.extend_from_slice(b),
            Arg::Pool { crc, extents, .. } => {
                out.push(Piece::Framing(start, framing.len()));
                let mut sum = 0u32;
                for &x in extents {
                    let bytes = ks
                        .extent_bytes(x)
                        .ok_or_else(|| Missing::Fault(format!("argument {i} names extent {x:?} outside this member's pool")))?;
                    sum = crc32c::crc32c_append(sum, bytes.bytes());
                    out.push(Piece::Pool(bytes, (x.buf_idx, u32::from(x.offset))));
                }
                if sum != *crc {
                    return Err(Missing::Fault(format!(
                        "argument {i}: the pool bytes its extents name fail their checksum (a buffer reused while the log named it)"
                    )));
                }
                start = framing.len();
            }
            Arg::Streamed { len, crc, stream, pieces } => {
                if ks.internal_get(&finished_key(*stream)).is_some() {
                    return Err(Missing::Finished(i));
                }
                out.push(Piece::Framing(start, framing.len()));
                let (mut sum, mut total) = (0u32, 0u64);
                for index in 0..*pieces {
                    let key = piece_key(*stream, index);
                    match ks.piece_extents(&key) {
                        Some(extents) => {
                            for x in extents {
                                let bytes = ks
                                    .extent_bytes(x)
                                    .ok_or_else(|| Missing::Fault(format!("piece {index} names extent {x:?} outside this member's pool")))?;
                                sum = crc32c::crc32c_append(sum, bytes.bytes());
                                total += bytes.bytes().len() as u64;
                                out.push(Piece::Pool(bytes, (x.buf_idx, u32::from(x.offset))));
                            }
                        }
                        None => {
                            let value = ks.internal_get(&key).ok_or(Missing::Piece(i, index))?;
                            let at = framing.len();
                            ks.read(&value, framing);
                            sum = crc32c::crc32c_append(sum, &framing[at..]);
                            total += (framing.len() - at) as u64;
                            out.push(Piece::Framing(at, framing.len()));
                        }
                    }
                    if total > u64::from(*len) {
                        return Err(Missing::Piece(i, index));
                    }
                }
                if total != u64::from(*len) {
                    return Err(Missing::Piece(i, *pieces));
                }
                if sum != *crc {
                    return Err(Missing::Fault(format!("argument {i}: its streamed pieces fail the value's checksum")));
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
        let mut framing = Vec::new();
        let pieces = match pieces(self.ks.get_mut(), e, &mut framing) {
            Ok(p) => p,
            Err(Missing::Fault(why)) => {
                self.fault.get_or_insert(format!("entry {index}: {why}"));
                return Ok(Ran { applied: refusal(EntryError::Field("pool extent")), touched: Vec::new(), cleared: false });
            }
            Err(why @ (Missing::Piece(..) | Missing::Finished(_))) => {
                let reply = match why {
                    Missing::Piece(arg, piece) => format!(
                        "-ERR pmwire: piece {piece} of argument {arg}, a streamed value, is missing (a change of leader cut its stream); nothing was applied\r\n"
                    ),
                    Missing::Finished(arg) => format!(
                        "-ERR pmwire: argument {arg} names a streamed value an earlier command used; nothing was applied\r\n"
                    ),
                    Missing::Fault(_) => unreachable!("matched above"),
                };
                let applied = match self.finish_streams(e) {
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
        let mut parsed = Parsed::new(Limits { max_commands: 1, ..Limits::default() }).gather_lazily();
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
        if let Err(err) = self.finish_streams(e) {
            ran.applied = store_failed(err, e.protocol);
        }
        Ok(ran)
    }

    /// Keeps piece `head` of a streamed value until the command naming it.
    fn keep_piece(&mut self, index: u64, head: crate::extent::PieceHead, value: &Arg<'_>) -> Ran {
        let ks = self.ks.get_mut();
        let key = piece_key(head.stream, head.index);
        let result = match value {
            Arg::Inline(b) => ks.put_piece(&key, b, None),
            Arg::Pool { crc, extents, len } => {
                let mut bytes = Vec::new();
                let mut lent = Vec::with_capacity(extents.len());
                for &x in extents {
                    match ks.extent_bytes(x) {
                        Some(b) => lent.push(b),
                        None => {
                            self.fault.get_or_insert(format!("entry {index}: a piece names extent {x:?} outside this member's pool"));
                            return Ran { applied: refusal(EntryError::Field("pool extent")), touched: Vec::new(), cleared: false };
                        }
                    }
                }
                let sum = lent.iter().fold(0, |s, b| crc32c::crc32c_append(s, b.bytes()));
                if sum != *crc {
                    self.fault.get_or_insert(format!("entry {index}: a piece's pool bytes fail their checksum"));
                    return Ran { applied: refusal(EntryError::Field("pool extent")), touched: Vec::new(), cleared: false };
                }
                if !ks.stores_by_extents() {
                    bytes.reserve(*len as usize);
                    lent.iter().for_each(|b| bytes.extend_from_slice(b.bytes()));
                }
                ks.put_piece(&key, &bytes, Some(extents))
            }
            Arg::Streamed { .. } => unreachable!("a piece's value is inline or in the pool"),
        };
        let applied = match result {
            Ok(()) => Applied { reply: b"+OK\r\n".to_vec(), ..Applied::default() },
            Err(err) => store_failed(err, pmwire_resp::reply::Protocol::Resp2),
        };
        Ran { applied, touched: Vec::new(), cleared: false }
    }

    /// Marks the entry's streams finished (their pieces go with later
    /// sweeps).
    fn finish_streams(&mut self, e: &ExtEntry<'_>) -> Result<(), StoreError> {
        let ks = self.ks.get_mut();
        for (stream, _) in e.streamed() {
            ks.internal_put(&finished_key(stream), &[])?;
        }
        Ok(())
    }
}
