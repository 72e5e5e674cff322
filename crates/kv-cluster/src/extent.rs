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
//! pool, [`ExtEntry::inline_all`]); a follower turns the wire form back
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
}

impl Arg<'_> {
    /// The argument's length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Arg::Inline(b) => b.len() as u64,
            Arg::Pool { len, .. } => u64::from(*len),
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
        Head { version: VERSION, kind: 1, protocol: protocol_byte(self.protocol), time_ms: self.time_ms, seed: self.seed }.encode(&mut out);
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

fn arg_bytes(a: &Arg<'_>) -> usize {
    ARG_HEAD_BYTES
        + match a {
            Arg::Inline(b) => b.len(),
            Arg::Pool { extents, .. } => POOL_HEAD_BYTES + EXTENT_BYTES * extents.len(),
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
    }
}

impl<'a> ExtEntry<'a> {
    /// Decodes and checks `bytes`: checksum first, then the header, then
    /// every argument against its bounds and the bytes left.
    pub fn decode(bytes: &'a [u8]) -> Result<ExtEntry<'a>, EntryError> {
        let (head, mut r) = Head::decode(bytes, VERSION)?;
        if head.kind != 1 {
            return Err(EntryError::Kind(head.kind));
        }
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
        Ok(ExtEntry { protocol, time_ms, seed, args })
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
        ExtEntry { protocol: Protocol::Resp3, time_ms: 5, seed: 6, args }.encode()
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

    #[test]
    fn every_flipped_bit_and_every_cut_is_refused() {
        refuses_flips_and_cuts(&sample(), |b| ExtEntry::decode(b).is_err());
    }

    #[test]
    fn bad_fields_with_good_checksums_are_refused() {
        let bytes = sample();
        // The pool argument's tag is at 48 + 8 + 3 + 8 + 1.
        let pool_arg = HEADER_BYTES + 8 + 3 + 8 + 1;
        for (at, v) in [(5usize, 2u8), (6, 4), (7, 1), (24, 0), (pool_arg, 2), (pool_arg + 1, 1), (pool_arg + 12, 65), (pool_arg + 12, 0)] {
            let mut b = bytes.clone();
            b[at] = v;
            assert!(ExtEntry::decode(&reseal(b)).is_err(), "byte {at} = {v}");
        }
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
