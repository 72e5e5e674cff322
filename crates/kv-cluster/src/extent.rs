//! Extent-form entries (issue 26 item 4): a replicated command whose large
//! arguments are not in the entry but in the serving member's pool, named
//! by their extents (layout in `docs/FORMAT.md`, "Extent-form Redis
//! entries").
//!
//! An [`ExtEntry`] is one command (a [`crate::entry::Kind::Command`]) as a
//! list of arguments, each either inline bytes or a [`Arg::Pool`] value:
//! its length, the crc32c of its bytes, and the PASTE 8 B extents
//! (buffer, offset, length) where the bytes lie in the member's pool. It
//! shares the 48-byte header's first 24 bytes with version 1
//! ([`crate::entry`]) and is told apart by its version byte (2), so
//! [`crate::entry::Entry::decode`] refuses it and the machine dispatches on
//! [`is_extent_form`].
//!
//! The same encoding serves three forms of one entry: the *local* form a
//! member logs (pool arguments name its own buffers), and the *wire* form
//! sent to peers (every argument inline: the values gathered from the
//! pool); a follower turns the wire form back
//! into its own local form. [`ExtEntry::decode`] checks the checksum, then
//! every count and length against its bound and the bytes there are,
//! before anything is interpreted.

use std::borrow::Cow;

use pmwire_resp::reply::Protocol;

use crate::entry::{protocol_byte, seal, EntryError, Head, Reader, HEADER_BYTES, MAGIC, MAX_BODY_BYTES};

/// The version byte of an extent-form entry.
pub const VERSION: u8 = 2;
/// Most arguments one extent-form command has.
pub const MAX_ARGS: u32 = 1 << 20;
/// Most extents one pool argument names (a value up to 64 pieces: 128 KiB
/// over 2 KiB buffers; a larger one travels inline).
pub const MAX_REF_EXTENTS: u32 = 64;
/// Bytes of an argument's fixed part (tag, reserved, length).
const ARG_HEAD_BYTES: usize = 8;
/// Bytes of a pool argument's checksum and extent count.
const POOL_HEAD_BYTES: usize = 8;
/// Bytes of a streamed argument's fixed part after its head (checksum,
/// piece count, stream time and nonce).
const STREAMED_BYTES: usize = 24;
/// Bytes of one extent on media and wire.
pub const EXTENT_BYTES: usize = 8;

/// Where some of a value's bytes lie in a member's pool (PASTE's 8 B extent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// The pool buffer.
    pub buf_idx: u32,
    /// Offset in the buffer.
    pub offset: u16,
    /// Bytes.
    pub len: u16,
}

/// What an extent-form entry asks the machine to do (the header's kind byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtKind {
    /// Run one command (kind 1).
    Command,
    /// Keep one piece of a streamed value (kind 4, [`PieceHead`]): a value
    /// too large for one entry travels as pieces, each its own entry, and
    /// the command naming it ([`Arg::Streamed`]) follows them.
    Piece,
}

impl ExtKind {
    fn to_byte(self) -> u8 {
        match self {
            ExtKind::Command => 1,
            ExtKind::Piece => 4,
        }
    }
}

/// Names one streamed value: the proposer's time when it began (a piece
/// left behind by a stream that never finished is collected by a sweep
/// long after it) and a random draw of the proposer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamId {
    /// The proposer's time at the stream's start, ms since the Unix epoch.
    pub time_ms: u64,
    /// The proposer's draw.
    pub nonce: u64,
}

/// The second argument of a piece entry: which stream and which piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PieceHead {
    /// The stream.
    pub stream: StreamId,
    /// This piece's place, from 0.
    pub index: u32,
    /// Pieces in the stream.
    pub count: u32,
}

/// Bytes of an encoded [`PieceHead`].
pub const PIECE_HEAD_BYTES: usize = 24;
/// The first argument of every piece entry (not a command: a piece runs
/// nothing).
pub const PIECE_NAME: &[u8] = b"PIECE";
/// Most pieces one stream has.
pub const MAX_PIECES: u32 = 1 << 20;

impl PieceHead {
    /// The head's bytes: stream time, nonce, index, count, little-endian.
    pub fn encode(&self) -> [u8; PIECE_HEAD_BYTES] {
        let mut out = [0u8; PIECE_HEAD_BYTES];
        out[..8].copy_from_slice(&self.stream.time_ms.to_le_bytes());
        out[8..16].copy_from_slice(&self.stream.nonce.to_le_bytes());
        out[16..20].copy_from_slice(&self.index.to_le_bytes());
        out[20..].copy_from_slice(&self.count.to_le_bytes());
        out
    }

    fn decode(b: &[u8]) -> Option<PieceHead> {
        if b.len() != PIECE_HEAD_BYTES {
            return None;
        }
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let head = PieceHead { stream: StreamId { time_ms: u64_at(0), nonce: u64_at(8) }, index: u32_at(16), count: u32_at(20) };
        (head.count > 0 && head.count <= MAX_PIECES && head.index < head.count).then_some(head)
    }
}

/// One argument of an extent-form command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arg<'a> {
    /// The bytes themselves.
    Inline(Cow<'a, [u8]>),
    /// A value in the pool: its length, the crc32c of its bytes, its extents in order.
    Pool {
        /// Total bytes (the extents' lengths add up to it).
        len: u32,
        /// crc32c of the value's bytes.
        crc: u32,
        /// Where the bytes are, in order.
        extents: Vec<Extent>,
    },
    /// A value streamed as pieces before this entry ([`ExtKind::Piece`]):
    /// the machine finds them by their stream, in order.
    Streamed {
        /// Total bytes (the pieces' lengths add up to it).
        len: u32,
        /// crc32c of the whole value.
        crc: u32,
        /// The stream its pieces belong to.
        stream: StreamId,
        /// How many pieces.
        pieces: u32,
    },
}

impl Arg<'_> {
    /// The argument's length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Arg::Inline(b) => b.len() as u64,
            Arg::Pool { len, .. } | Arg::Streamed { len, .. } => u64::from(*len),
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A decoded extent-form entry (module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtEntry<'a> {
    /// What it asks for.
    pub kind: ExtKind,
    /// The protocol the proposing client's reply is written in.
    pub protocol: Protocol,
    /// The proposer's time, ms since the Unix epoch.
    pub time_ms: u64,
    /// The proposer's random draw.
    pub seed: u64,
    /// The command's arguments, name first.
    pub args: Vec<Arg<'a>>,
}

/// Whether `bytes` is an extent-form entry (by its version byte; the
/// checksum is [`ExtEntry::decode`]'s to check).
pub fn is_extent_form(bytes: &[u8]) -> bool {
    bytes.len() >= HEADER_BYTES && bytes[..4] == MAGIC && bytes[4] == VERSION
}

impl ExtEntry<'_> {
    /// The entry's bytes.
    pub fn encode(&self) -> Vec<u8> {
        assert!(!self.args.is_empty() && self.args.len() as u64 <= u64::from(MAX_ARGS));
        let body: usize = self.args.iter().map(arg_bytes).sum();
        assert!(body as u64 <= MAX_BODY_BYTES);
        let mut out = Vec::with_capacity(HEADER_BYTES + body + 4);
        assert!(self.kind == ExtKind::Command || self.piece().is_some(), "a piece entry is the piece's name, head and bytes");
        Head { version: VERSION, kind: self.kind.to_byte(), protocol: protocol_byte(self.protocol), time_ms: self.time_ms, seed: self.seed }.encode(&mut out);
        out.extend_from_slice(&(self.args.len() as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(body as u64).to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        assert_eq!(out.len(), HEADER_BYTES);
        for a in &self.args {
            encode_arg(a, &mut out);
        }
        assert_eq!(out.len(), HEADER_BYTES + body, "the arguments' length written in the header");
        seal(&mut out);
        out
    }

    /// A piece entry's head and bytes (`None` for a command, or a piece
    /// that is not the piece's name, a good head and one value).
    pub fn piece(&self) -> Option<(PieceHead, &Arg<'_>)> {
        if self.kind != ExtKind::Piece {
            return None;
        }
        match &self.args[..] {
            [Arg::Inline(name), Arg::Inline(head), value @ (Arg::Inline(_) | Arg::Pool { .. })] if &name[..] == PIECE_NAME => {
                Some((PieceHead::decode(head)?, value))
            }
            _ => None,
        }
    }

    /// The streamed arguments of a command entry.
    pub fn streamed(&self) -> impl Iterator<Item = (StreamId, u32)> + '_ {
        self.args.iter().filter_map(|a| match a {
            Arg::Streamed { stream, pieces, .. } => Some((*stream, *pieces)),
            _ => None,
        })
    }

    /// The pool arguments' bytes summed.
    pub fn pool_bytes(&self) -> u64 {
        self.args.iter().filter(|a| matches!(a, Arg::Pool { .. })).map(Arg::len).sum()
    }

    /// The inline bytes of the arguments after the command's name and first
    /// key (what the copy counters call value bytes).
    pub fn inline_value_bytes(&self) -> u64 {
        self.args.iter().skip(2).filter(|a| matches!(a, Arg::Inline(_))).map(Arg::len).sum()
    }
}

/// One argument's head as [`walk`] finds it.
#[derive(Clone, Copy, Debug)]
pub enum ArgHead<'a> {
    /// Inline bytes, this many.
    Inline(u32),
    /// A pool value: its length and its extents' raw bytes
    /// ([`EXTENT_BYTES`] each: buffer, offset, length, little-endian).
    Pool {
        /// Total bytes.
        len: u32,
        /// The extents, unparsed.
        extents: &'a [u8],
    },
    /// A streamed value's reference.
    Streamed,
}

impl ArgHead<'_> {
    /// The bytes it carries inline that the copy counters call value
    /// bytes (as [`ExtEntry::inline_value_bytes`]: arguments after the
    /// command's name and first key), for the argument at place `i`.
    pub fn inline_value_bytes(&self, i: usize) -> u64 {
        match self {
            ArgHead::Inline(len) if i >= 2 => u64::from(*len),
            _ => 0,
        }
    }

    /// The buffers a pool value's extents name, in order (none otherwise).
    pub fn buffers(&self) -> impl Iterator<Item = u32> + '_ {
        let raw: &[u8] = if let ArgHead::Pool { extents, .. } = self { extents } else { &[] };
        raw.chunks_exact(EXTENT_BYTES).map(|c| u32::from_le_bytes(c[..4].try_into().expect("4 bytes")))
    }
}

/// Whether `data` is an entry as a peer may send it: not in extent form,
/// or in extent form whose arguments all walk and none names pool extents.
/// Extents name the buffers of the member that logged the entry, so only a
/// local form holds them; the wire form carries every value inline
/// (`LogHooks::wire_form`). An entry that names extents or does not walk,
/// from a peer, would have this member take references on buffers it
/// never gave out, so it is refused before anything is done with it.
pub fn acceptable_from_peer(data: &[u8]) -> bool {
    if !is_extent_form(data) {
        return true;
    }
    let mut names_extents = false;
    let walked = walk(data, |_, head| names_extents |= matches!(head, ArgHead::Pool { .. }));
    walked && !names_extents
}

/// Walks the arguments of `data`, an extent-form entry this member logged
/// (checked by [`ExtEntry::decode`] when it was), by their heads alone: no
/// checksum, no allocation. The log's bookkeeping runs it on every append,
/// drop and send. `f` gets each argument's place and head; false if the
/// heads do not parse (then `f` may have seen some).
pub fn walk(data: &[u8], mut f: impl FnMut(usize, ArgHead<'_>)) -> bool {
    if !is_extent_form(data) {
        return false;
    }
    let u32_at = |at: usize| data.get(at..at.checked_add(4)?).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    let Some(argc) = u32_at(24) else { return false };
    let mut at = HEADER_BYTES;
    for i in 0..argc as usize {
        let (Some(&tag), Some(len)) = (data.get(at), u32_at(at + 4)) else { return false };
        let (head, size) = match tag {
            0 => (ArgHead::Inline(len), len as usize),
            1 => {
                let Some(n) = u32_at(at + ARG_HEAD_BYTES + 4) else { return false };
                let Some(raw) = (n as usize).checked_mul(EXTENT_BYTES).and_then(|b| data.get(at + ARG_HEAD_BYTES + POOL_HEAD_BYTES..)?.get(..b)) else {
                    return false;
                };
                (ArgHead::Pool { len, extents: raw }, POOL_HEAD_BYTES + raw.len())
            }
            2 => (ArgHead::Streamed, STREAMED_BYTES),
            _ => return false,
        };
        match at.checked_add(ARG_HEAD_BYTES).and_then(|a| a.checked_add(size)) {
            Some(next) if next <= data.len() => at = next,
            _ => return false,
        }
        f(i, head);
    }
    true
}

/// The length of `data` in its wire form (every pool value gathered
/// inline, as `LogHooks::wire_form` sends it), from its heads ([`walk`]):
/// the Raft store sizes each append by it, for every entry it sends.
/// Anything that is not a well-formed extent-form entry is its own length.
pub fn wire_len(data: &[u8]) -> u64 {
    let own = data.len() as u64;
    let mut wire = own;
    let walked = walk(data, |_, head| {
        if let ArgHead::Pool { len, extents } = head {
            wire = wire - (POOL_HEAD_BYTES + extents.len()) as u64 + u64::from(len);
        }
    });
    if walked {
        wire
    } else {
        own
    }
}

fn arg_bytes(a: &Arg<'_>) -> usize {
    ARG_HEAD_BYTES
        + match a {
            Arg::Inline(b) => b.len(),
            Arg::Pool { extents, .. } => POOL_HEAD_BYTES + EXTENT_BYTES * extents.len(),
            Arg::Streamed { .. } => STREAMED_BYTES,
        }
}

fn encode_arg(a: &Arg<'_>, out: &mut Vec<u8>) {
    match a {
        Arg::Inline(b) => {
            out.extend_from_slice(&[0, 0, 0, 0]);
            out.extend_from_slice(&u32::try_from(b.len()).expect("an argument fits u32").to_le_bytes());
            out.extend_from_slice(b);
        }
        Arg::Pool { len, crc, extents } => {
            assert!(!extents.is_empty() && extents.len() as u32 <= MAX_REF_EXTENTS);
            assert_eq!(extents.iter().map(|e| u64::from(e.len)).sum::<u64>(), u64::from(*len), "extents add up to the value");
            out.extend_from_slice(&[1, 0, 0, 0]);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&crc.to_le_bytes());
            out.extend_from_slice(&(extents.len() as u32).to_le_bytes());
            for e in extents {
                assert!(e.len > 0, "an extent holds bytes");
                out.extend_from_slice(&e.buf_idx.to_le_bytes());
                out.extend_from_slice(&e.offset.to_le_bytes());
                out.extend_from_slice(&e.len.to_le_bytes());
            }
        }
        Arg::Streamed { len, crc, stream, pieces } => {
            assert!(*pieces > 0 && *pieces <= MAX_PIECES);
            out.extend_from_slice(&[2, 0, 0, 0]);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&crc.to_le_bytes());
            out.extend_from_slice(&pieces.to_le_bytes());
            out.extend_from_slice(&stream.time_ms.to_le_bytes());
            out.extend_from_slice(&stream.nonce.to_le_bytes());
        }
    }
}

impl<'a> ExtEntry<'a> {
    /// Decodes and checks `bytes`: checksum first, then the header, then
    /// every argument against its bounds and the bytes left.
    pub fn decode(bytes: &'a [u8]) -> Result<ExtEntry<'a>, EntryError> {
        let (head, mut r) = Head::decode(bytes, VERSION)?;
        let kind = match head.kind {
            1 => ExtKind::Command,
            4 => ExtKind::Piece,
            k => return Err(EntryError::Kind(k)),
        };
        let protocol = match head.protocol {
            2 => Protocol::Resp2,
            3 => Protocol::Resp3,
            _ => return Err(EntryError::Field("protocol")),
        };
        let (time_ms, seed) = (head.time_ms, head.seed);
        let argc = r.u32("argument count")?;
        let reserved = r.u32("reserved")?;
        let body_len = r.u64("body length")?;
        let reserved2 = r.u64("reserved")?;
        if reserved != 0 || reserved2 != 0 {
            return Err(EntryError::Field("reserved"));
        }
        if argc == 0 || argc > MAX_ARGS {
            return Err(EntryError::Bounds("argument count"));
        }
        if body_len > MAX_BODY_BYTES || body_len != (bytes.len() - 4 - HEADER_BYTES) as u64 {
            return Err(EntryError::Bounds("body length"));
        }
        let mut args = Vec::with_capacity(argc.min(1024) as usize);
        for _ in 0..argc {
            args.push(read_arg(&mut r)?);
        }
        if !r.0.done() {
            return Err(EntryError::Bounds("trailing bytes"));
        }
        let e = ExtEntry { kind, protocol, time_ms, seed, args };
        if kind == ExtKind::Piece && e.piece().is_none() {
            return Err(EntryError::Field("piece"));
        }
        if kind == ExtKind::Command && matches!(e.args[0], Arg::Streamed { .. } | Arg::Pool { .. }) {
            return Err(EntryError::Field("command name"));
        }
        Ok(e)
    }
}

fn read_arg<'a>(r: &mut Reader<'a>) -> Result<Arg<'a>, EntryError> {
    let head = r.take(4, "argument tag")?;
    if head[1..] != [0, 0, 0] {
        return Err(EntryError::Field("argument reserved"));
    }
    let len = r.u32("argument length")?;
    match head[0] {
        0 => Ok(Arg::Inline(Cow::Borrowed(r.take(u64::from(len), "argument bytes")?))),
        1 => {
            let crc = r.u32("value checksum")?;
            let n = r.u32("extent count")?;
            if n == 0 || n > MAX_REF_EXTENTS {
                return Err(EntryError::Bounds("extent count"));
            }
            let raw = r.take(u64::from(n) * EXTENT_BYTES as u64, "extents")?;
            let extents: Vec<Extent> = raw
                .chunks_exact(EXTENT_BYTES)
                .map(|c| Extent {
                    buf_idx: u32::from_le_bytes(c[..4].try_into().expect("4 bytes")),
                    offset: u16::from_le_bytes(c[4..6].try_into().expect("2 bytes")),
                    len: u16::from_le_bytes(c[6..].try_into().expect("2 bytes")),
                })
                .collect();
            if extents.iter().any(|e| e.len == 0 || u32::from(e.offset) + u32::from(e.len) > u32::from(u16::MAX)) {
                return Err(EntryError::Field("extent"));
            }
            if extents.iter().map(|e| u64::from(e.len)).sum::<u64>() != u64::from(len) {
                return Err(EntryError::Bounds("extents do not add up to the value"));
            }
            Ok(Arg::Pool { len, crc, extents })
        }
        2 => {
            let crc = r.u32("value checksum")?;
            let pieces = r.u32("piece count")?;
            let time_ms = r.u64("stream time")?;
            let nonce = r.u64("stream nonce")?;
            if pieces == 0 || pieces > MAX_PIECES || u64::from(pieces) > u64::from(len).max(1) {
                return Err(EntryError::Bounds("piece count"));
            }
            Ok(Arg::Streamed { len, crc, stream: StreamId { time_ms, nonce }, pieces })
        }
        _ => Err(EntryError::Field("argument tag")),
    }
}

/// [`resp_value_bytes`] of a version-1 entry's commands, found from its
/// header without checking its checksum (a count for the copy counters,
/// read on every append and send: a large value's entry is not hashed for
/// it); 0 for anything that is not a version-1 entry.
pub fn v1_value_bytes(data: &[u8]) -> u64 {
    let u32_at = |at: usize| data.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    let u64_at = |at: usize| data.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    if data.len() < HEADER_BYTES + 4 || data[..4] != MAGIC || data[4] != crate::entry::VERSION {
        return 0;
    }
    let (Some(watched), Some(body)) = (u32_at(28), u64_at(40)) else { return 0 };
    let mut at = HEADER_BYTES;
    for _ in 0..watched {
        let Some(key) = u32_at(at + 12) else { return 0 };
        at = at.saturating_add(24).saturating_add(key as usize);
    }
    match usize::try_from(body).ok().and_then(|b| data.get(at..at.checked_add(b)?)) {
        Some(commands) => resp_value_bytes(commands),
        None => 0,
    }
}

/// The bytes of the arguments after each command's name and first key in
/// RESP multibulk `commands` (a version-1 entry's body): what the copy
/// counters call value bytes. Stops at the first byte that is not
/// well-formed RESP (the entry's decoder refuses those anyway).
pub fn resp_value_bytes(commands: &[u8]) -> u64 {
    let mut at = 0usize;
    let mut total = 0u64;
    let number = |at: &mut usize, lead: u8| -> Option<usize> {
        if commands.get(*at) != Some(&lead) {
            return None;
        }
        let end = commands[*at..].iter().position(|&b| b == b'\r')? + *at;
        let n = std::str::from_utf8(&commands[*at + 1..end]).ok()?.parse().ok()?;
        *at = end + 2;
        Some(n)
    };
    while at < commands.len() {
        let Some(argc) = number(&mut at, b'*') else { break };
        for i in 0..argc {
            let Some(len) = number(&mut at, b'$') else { return total };
            if i >= 2 {
                total += len as u64;
            }
            at = at.saturating_add(len).saturating_add(2);
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::tests::{refuses_flips_and_cuts, reseal};

    fn sample() -> Vec<u8> {
        let args = vec![
            Arg::Inline(Cow::Borrowed(&b"SET"[..])),
            Arg::Inline(Cow::Borrowed(&b"k"[..])),
            Arg::Pool { len: 100, crc: 7, extents: vec![Extent { buf_idx: 3, offset: 10, len: 60 }, Extent { buf_idx: 9, offset: 0, len: 40 }] },
        ];
        ExtEntry { kind: ExtKind::Command, protocol: Protocol::Resp3, time_ms: 5, seed: 6, args }.encode()
    }

    #[test]
    fn round_trips() {
        let bytes = sample();
        assert!(is_extent_form(&bytes));
        let e = ExtEntry::decode(&bytes).unwrap();
        assert_eq!(e.args.len(), 3);
        assert_eq!(e.pool_bytes(), 100);
        assert_eq!(e.inline_value_bytes(), 0);
        assert_eq!(e.encode(), bytes);
        assert_eq!(crate::entry::Entry::decode(&bytes).unwrap_err(), EntryError::Version(2));
    }

    /// A peer may send the wire form (values inline, streams by name) and
    /// any entry not in extent form; never one naming pool extents, and
    /// never an extent-form entry whose arguments do not walk.
    #[test]
    fn only_entries_naming_no_buffers_are_taken_from_a_peer() {
        let encode = |args: Vec<Arg<'_>>| ExtEntry { kind: ExtKind::Command, protocol: Protocol::Resp3, time_ms: 5, seed: 6, args }.encode();
        let local = sample();
        assert!(!acceptable_from_peer(&local), "names extents 3 and 9");
        let e = ExtEntry::decode(&local).unwrap();
        let inline: Vec<Arg<'_>> = e
            .args
            .iter()
            .map(|a| match a {
                Arg::Pool { len, .. } => Arg::Inline(Cow::Owned(vec![1; *len as usize])),
                a => a.clone(),
            })
            .collect();
        let wire = encode(inline.clone());
        assert!(acceptable_from_peer(&wire));
        let streamed = Arg::Streamed { len: 1 << 20, crc: 1, stream: StreamId { time_ms: 1, nonce: 2 }, pieces: 8 };
        assert!(acceptable_from_peer(&encode(inline.into_iter().chain([streamed]).collect())));
        assert!(acceptable_from_peer(b"SET k v"), "not the extent form: the machine's own checks refuse it at apply");
        // Cut inside an argument's head: the walk fails, refused.
        for cut in HEADER_BYTES + 1..HEADER_BYTES + 8 {
            assert!(!acceptable_from_peer(&wire[..cut]), "cut at {cut}");
        }
    }

    #[test]
    fn wire_len_is_the_length_with_every_value_gathered() {
        let encode = |args: Vec<Arg<'_>>| ExtEntry { kind: ExtKind::Command, protocol: Protocol::Resp3, time_ms: 5, seed: 6, args }.encode();
        let local = sample();
        let e = ExtEntry::decode(&local).unwrap();
        let gathered = |a: &Arg<'_>| match a {
            Arg::Pool { len, .. } => Arg::Inline(Cow::Owned(vec![1; *len as usize])),
            a => Arg::Inline(Cow::Owned(match a { Arg::Inline(b) => b.to_vec(), _ => unreachable!("sample: inline or pool") })),
        };
        let wire = encode(e.args.iter().map(gathered).collect());
        assert_eq!(wire_len(&local), wire.len() as u64);
        assert_eq!(wire_len(&wire), wire.len() as u64, "the wire form is its own length");
        // A streamed argument travels as it is logged.
        let streamed = Arg::Streamed { len: 1 << 20, crc: 1, stream: StreamId { time_ms: 1, nonce: 2 }, pieces: 8 };
        let local_streamed = encode(e.args.iter().cloned().chain([streamed.clone()]).collect());
        let wire_streamed = encode(e.args.iter().map(gathered).chain([streamed]).collect());
        assert_eq!(wire_len(&local_streamed), wire_streamed.len() as u64);
        // Not an extent-form entry, or arguments that do not parse: its own length.
        assert_eq!(wire_len(b"SET k v"), 7);
        for cut in HEADER_BYTES..local.len() {
            let mut bytes = local[..cut].to_vec();
            bytes.resize(local.len() - 1, 0xff);
            let got = wire_len(&bytes);
            // Cut past the last argument's extent count (the walk reads
            // no extent): every head whole, one byte short.
            let whole = cut >= local.len() - 4 - 2 * EXTENT_BYTES;
            assert_eq!(got, if whole { wire.len() as u64 - 1 } else { bytes.len() as u64 }, "cut at {cut}");
        }
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_refused() {
        refuses_flips_and_cuts(&sample(), |b| ExtEntry::decode(b).is_err());
    }

    #[test]
    fn bad_fields_with_good_checksums_are_refused() {
        let bytes = sample();
        // The pool argument's tag is at 48 + 8 + 3 + 8 + 1.
        let pool_arg = HEADER_BYTES + 8 + 3 + 8 + 1;
        for (at, v) in [(5usize, 2u8), (6, 5), (7, 1), (24, 0), (pool_arg, 3), (pool_arg + 1, 1), (pool_arg + 12, 65), (pool_arg + 12, 0)] {
            let mut b = bytes.clone();
            b[at] = v;
            assert!(ExtEntry::decode(&reseal(b)).is_err(), "byte {at} = {v}");
        }
    }

    fn streamed_sample() -> Vec<u8> {
        let args = vec![
            Arg::Inline(Cow::Borrowed(&b"SET"[..])),
            Arg::Inline(Cow::Borrowed(&b"k"[..])),
            Arg::Streamed { len: 300_000, crc: 9, stream: StreamId { time_ms: 77, nonce: 88 }, pieces: 3 },
        ];
        ExtEntry { kind: ExtKind::Command, protocol: Protocol::Resp2, time_ms: 5, seed: 6, args }.encode()
    }

    fn piece_sample() -> Vec<u8> {
        let head = PieceHead { stream: StreamId { time_ms: 77, nonce: 88 }, index: 2, count: 3 };
        let value = Arg::Pool { len: 10, crc: 1, extents: vec![Extent { buf_idx: 4, offset: 0, len: 10 }] };
        crate::Proposer::with_key(3).piece(5, head, value)
    }

    #[test]
    fn pieces_and_streamed_arguments_round_trip() {
        let bytes = streamed_sample();
        let e = ExtEntry::decode(&bytes).unwrap();
        assert_eq!(e.kind, ExtKind::Command);
        assert_eq!(e.streamed().collect::<Vec<_>>(), vec![(StreamId { time_ms: 77, nonce: 88 }, 3)]);
        assert!(e.piece().is_none());
        assert_eq!(e.encode(), bytes);
        let bytes = piece_sample();
        let e = ExtEntry::decode(&bytes).unwrap();
        assert_eq!(e.kind, ExtKind::Piece);
        let (head, value) = e.piece().unwrap();
        assert_eq!((head.index, head.count, head.stream.nonce), (2, 3, 88));
        assert_eq!(value.len(), 10);
        assert_eq!(e.encode(), bytes);
        refuses_flips_and_cuts(&streamed_sample(), |b| ExtEntry::decode(b).is_err());
        refuses_flips_and_cuts(&piece_sample(), |b| ExtEntry::decode(b).is_err());
    }

    #[test]
    fn bad_pieces_and_streams_with_good_checksums_are_refused() {
        // A piece whose index is not below its count, or whose count is 0.
        let piece = piece_sample();
        let head_at = HEADER_BYTES + 8 + PIECE_NAME.len() + 8;
        for (at, v) in [(head_at + 16, 3u8), (head_at + 20, 0)] {
            let mut b = piece.clone();
            b[at] = v;
            assert!(ExtEntry::decode(&reseal(b)).is_err(), "piece byte {at} = {v}");
        }
        // A streamed argument with no pieces, or as the command's name.
        let streamed = streamed_sample();
        let arg_at = HEADER_BYTES + 8 + 3 + 8 + 1;
        let mut b = streamed.clone();
        b[arg_at + 12] = 0;
        assert!(ExtEntry::decode(&reseal(b)).is_err(), "no pieces");
        let args = vec![Arg::Streamed { len: 10, crc: 0, stream: StreamId { time_ms: 1, nonce: 1 }, pieces: 1 }];
        let name = ExtEntry { kind: ExtKind::Command, protocol: Protocol::Resp2, time_ms: 1, seed: 1, args }.encode();
        assert!(ExtEntry::decode(&name).is_err(), "a streamed command name");
        // A command entry marked as a piece.
        let mut b = streamed;
        b[5] = 4;
        assert!(ExtEntry::decode(&reseal(b)).is_err(), "a command as a piece");
    }

    #[test]
    fn value_bytes_of_resp_commands() {
        let mut c = Vec::new();
        pmwire_resp::client::encode_request(&[&b"SET"[..], b"key", &[1u8; 64][..]], &mut c);
        pmwire_resp::client::encode_request(&[&b"INCR"[..], b"n"], &mut c);
        pmwire_resp::client::encode_request(&[&b"HSET"[..], b"h", b"f", b"vv"], &mut c);
        assert_eq!(resp_value_bytes(&c), 64 + 3);
        let mut p = crate::Proposer::with_key(1);
        let watched = vec![crate::Watched { key: b"w".to_vec(), index: 3, state: crate::WatchedState::Absent }];
        let queued = vec![vec![&b"SET"[..], b"key", &[1u8; 64][..]], vec![&b"HSET"[..], b"h", b"f", b"vv"]];
        assert_eq!(v1_value_bytes(&p.transaction(1, Protocol::Resp2, watched, &queued)), 64 + 3);
        assert_eq!(v1_value_bytes(&p.command(1, Protocol::Resp2, &["SET", "k", "12345"])), 5);
        assert_eq!(v1_value_bytes(&sample()), 0, "not a version-1 entry");
    }
}
