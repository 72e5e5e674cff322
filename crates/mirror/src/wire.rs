//! The mirror stream's wire format (docs/FORMAT.md, "Mirror stream"):
//! what a primary sends its backup and what the backup answers. Encoding
//! and validating decoding only; no I/O.
//!
//! Every message is a 40 B header (the transport's header bytes) and a
//! payload. Invariants: fixed-width little-endian fields; the header
//! carries a CRC-32C over its other fields, checked before any field is
//! trusted; a payload that has no checksum of its own (a hello, a copy
//! chunk, a refusal)
//! is covered by one in the header; an epoch's payload is the primary's
//! redo record, whose own CRC the backup checks ([`crate::Epoch::parse`]);
//! every length read from the wire is compared with what arrived before it
//! is used, and decoding never panics on arbitrary bytes.

use pmem::crc::crc32c_append;
use pmem::le::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};

use crate::history::{BackupState, History, Resync, HISTORY_BYTES};

/// `b"PMMS"`, little-endian: a mirror-stream header's first word.
pub const MAGIC: u32 = u32::from_le_bytes(*b"PMMS");
/// The stream version this code speaks (1 had no history in its hello).
pub const VERSION: u8 = 3;
/// Bytes of every header.
pub const HEADER_BYTES: usize = 40;
/// Bytes of a hello's payload: the heap's shape, its data's CRC, the
/// primary's write tracking, its history.
pub const HELLO_BYTES: usize = 40 + HISTORY_BYTES;
/// Bytes of a hello answer's payload: the backup's state ([`BackupState`]).
pub const BACKUP_STATE_BYTES: usize = 64;
/// The largest refusal text carried.
pub const MAX_REASON_BYTES: usize = 1024;
/// The largest epoch record a stream carries: the transport's default
/// payload bound (4 MiB), so a heap whose log is larger cannot be mirrored.
pub const MAX_RECORD_BYTES: u64 = 4 << 20;

/// The largest chunk of a full copy's data ([`Kind::CopyChunk`]).
pub const MAX_COPY_CHUNK: usize = 256 << 10;
/// A hello's acknowledgement with this `count` asks for a full copy
/// (the plan codes are [`crate::Plan::code`]'s).
pub const COPY_NEEDED: u32 = 1;
/// A hello's acknowledgement with this `count` asks for an incremental copy.
pub const INCREMENTAL_NEEDED: u32 = 2;

/// How a primary mirrors (seed 002 §5, Table 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// No mirror: the local baseline.
    NoSm,
    /// Remote commit per epoch: the epoch's writes, then a FLUSH round
    /// trip that makes them durable (and so ordered) before the next.
    SmRc,
    /// Write-through writes, an ordering marker (`rofence`) after each
    /// epoch, no wait until a durability fence (`rdfence`) or the commit.
    SmOb,
    /// Non-temporal writes through one ordered queue, no markers; a
    /// durability fence reads a sentinel that follows every write.
    SmDd,
}

impl Strategy {
    /// Every strategy, NO-SM first.
    pub const ALL: [Strategy; 4] = [Strategy::NoSm, Strategy::SmRc, Strategy::SmOb, Strategy::SmDd];

    /// The seed's name: `NO-SM`, `SM-RC`, `SM-OB`, `SM-DD`.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::NoSm => "NO-SM",
            Strategy::SmRc => "SM-RC",
            Strategy::SmOb => "SM-OB",
            Strategy::SmDd => "SM-DD",
        }
    }

    /// Parses a name as [`name`](Strategy::name) prints it, in any case,
    /// with or without the dash.
    pub fn parse(name: &str) -> Option<Strategy> {
        let name = name.to_ascii_uppercase().replace(['-', '_'], "");
        Strategy::ALL.into_iter().find(|s| s.name().replace('-', "") == name)
    }

    fn code(self) -> u16 {
        match self {
            Strategy::NoSm => 0,
            Strategy::SmRc => 1,
            Strategy::SmOb => 2,
            Strategy::SmDd => 3,
        }
    }

    fn from_code(code: u16) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.code() == code)
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a message is. The codes are in docs/FORMAT.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Primary → backup, a call: the strategy, the heap's geometry, its
    /// last committed transaction, the CRC of its data area, its write
    /// tracking and its history. The ack carries the backup's state and,
    /// in `count`, the rejoin plan: 0 stream, [`COPY_NEEDED`] (a full copy
    /// must follow), [`INCREMENTAL_NEEDED`] (the blocks written since the
    /// backup's transaction must follow).
    Hello,
    /// One-way: an epoch record of the open transaction.
    Epoch,
    /// One-way (SM-OB): `rofence`, an ordering marker.
    Ofence,
    /// A call (SM-RC): make the transaction's epochs durable, then answer.
    Flush,
    /// A call (SM-OB): `rdfence`, drain, then answer "all durable".
    Dfence,
    /// A call (SM-DD): read the sentinel, which follows every write: drain,
    /// then answer with the number of epochs applied.
    Sentinel,
    /// A call: commit the transaction durably, then answer.
    Commit,
    /// One-way: the transaction is abandoned.
    Abort,
    /// One-way, after a hello answered with a copy: `payload_bytes`
    /// (1..=[`MAX_COPY_CHUNK`]) of the primary's data area at offset
    /// `value`, for transaction `tx`; the header's CRC covers the payload.
    /// A full copy's chunks are back to back from 0; an incremental
    /// copy's are in increasing order, not overlapping.
    CopyChunk,
    /// A call, after the last chunk: `value` is the data area's size and
    /// `count` its CRC-32C; the backup checks both, makes the copy its
    /// committed state durably, then answers.
    CopyDone,
    /// Backup → primary: done; `value` and `count` say what.
    Ack,
    /// Backup → primary: refused; the payload says why (UTF-8).
    Refused,
}

impl Kind {
    fn code(self) -> u8 {
        match self {
            Kind::Hello => 1,
            Kind::Epoch => 2,
            Kind::Ofence => 3,
            Kind::Flush => 4,
            Kind::Dfence => 5,
            Kind::Sentinel => 6,
            Kind::Commit => 7,
            Kind::Abort => 8,
            Kind::CopyChunk => 9,
            Kind::CopyDone => 10,
            Kind::Ack => 64,
            Kind::Refused => 65,
        }
    }

    fn from_code(code: u8) -> Option<Kind> {
        let all = [
            Kind::Hello,
            Kind::Epoch,
            Kind::Ofence,
            Kind::Flush,
            Kind::Dfence,
            Kind::Sentinel,
            Kind::Commit,
            Kind::Abort,
            Kind::CopyChunk,
            Kind::CopyDone,
            Kind::Ack,
            Kind::Refused,
        ];
        all.into_iter().find(|k| k.code() == code)
    }

    /// Whether the sender waits for an answer (sent with `Transport::call`).
    pub fn is_call(self) -> bool {
        matches!(self, Kind::Hello | Kind::Flush | Kind::Dfence | Kind::Sentinel | Kind::Commit | Kind::CopyDone)
    }
}

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What the message is.
    pub kind: Kind,
    /// The strategy (a hello), else [`Strategy::NoSm`].
    pub strategy: Strategy,
    /// The transaction (0 in a hello).
    pub tx: u64,
    /// Epoch: its log offset; commit: the transaction's log bytes; hello:
    /// the last committed transaction; ack: what was asked for.
    pub value: u64,
    /// Epoch: its index; fences and commit: the transaction's epochs so
    /// far; ack: the epochs the backup holds.
    pub count: u32,
    /// Bytes of the payload that follows.
    pub payload_bytes: u32,
    /// CRC-32C of the payload, for kinds whose payload has none of its own.
    pub payload_crc: u32,
}

/// Why a message does not decode. Nothing was acted on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Not 40 B of header.
    #[error("mirror header of {0} B, want {HEADER_BYTES}")]
    HeaderSize(usize),
    /// The first word is not [`MAGIC`].
    #[error("not a mirror-stream message (bad magic)")]
    BadMagic,
    /// The header's CRC fails.
    #[error("mirror header checksum mismatch")]
    HeaderChecksum,
    /// Another stream version.
    #[error("mirror stream version {0} is not supported (this is version {VERSION})")]
    Version(u8),
    /// An unknown kind.
    #[error("unknown mirror message kind {0}")]
    UnknownKind(u8),
    /// An unknown strategy.
    #[error("unknown mirror strategy {0}")]
    UnknownStrategy(u16),
    /// The payload's length is not the header's.
    #[error("payload of {got} B, the header says {want} B")]
    PayloadSize {
        /// Bytes that arrived.
        got: usize,
        /// Bytes the header names.
        want: u32,
    },
    /// The payload's CRC fails.
    #[error("mirror payload checksum mismatch")]
    PayloadChecksum,
    /// A hello whose history does not check.
    #[error("hello carries a bad history: {0}")]
    BadHistory(String),
    /// A payload this kind does not allow.
    #[error("{kind:?} with a payload of {bytes} B")]
    BadPayload {
        /// The kind.
        kind: Kind,
        /// Its payload's length.
        bytes: usize,
    },
}

/// Encodes a header. `payload` is the message's payload (its length and,
/// for kinds without a checksum of their own, its CRC go in the header).
pub fn encode(kind: Kind, strategy: Strategy, tx: u64, value: u64, count: u32, payload: &[u8]) -> [u8; HEADER_BYTES] {
    let payload_bytes = u32::try_from(payload.len()).expect("payloads are bounded below 4 GiB");
    let mut h = [0u8; HEADER_BYTES];
    put_u32(&mut h, 0, MAGIC);
    h[4] = VERSION;
    h[5] = kind.code();
    put_u16(&mut h, 6, strategy.code());
    put_u64(&mut h, 8, tx);
    put_u64(&mut h, 16, value);
    put_u32(&mut h, 24, count);
    put_u32(&mut h, 28, payload_bytes);
    let payload_crc = if kind == Kind::Epoch { 0 } else { crc32c_append(0, payload) };
    put_u32(&mut h, 32, payload_crc);
    let crc = crc32c_append(0, &h[..36]);
    put_u32(&mut h, 36, crc);
    h
}

/// Decodes and checks a message: the header's CRC first, then its fields,
/// then the payload's length and (where the header covers it) its CRC,
/// and that the kind allows such a payload.
pub fn decode(header: &[u8], payload: &[u8]) -> Result<Header, WireError> {
    if header.len() != HEADER_BYTES {
        return Err(WireError::HeaderSize(header.len()));
    }
    if get_u32(header, 0) != MAGIC {
        return Err(WireError::BadMagic);
    }
    if crc32c_append(0, &header[..36]) != get_u32(header, 36) {
        return Err(WireError::HeaderChecksum);
    }
    if header[4] != VERSION {
        return Err(WireError::Version(header[4]));
    }
    let kind = Kind::from_code(header[5]).ok_or(WireError::UnknownKind(header[5]))?;
    let code = get_u16(header, 6);
    let strategy = Strategy::from_code(code).ok_or(WireError::UnknownStrategy(code))?;
    let h = Header {
        kind,
        strategy,
        tx: get_u64(header, 8),
        value: get_u64(header, 16),
        count: get_u32(header, 24),
        payload_bytes: get_u32(header, 28),
        payload_crc: get_u32(header, 32),
    };
    if payload.len() as u64 != u64::from(h.payload_bytes) {
        return Err(WireError::PayloadSize { got: payload.len(), want: h.payload_bytes });
    }
    let allowed = match kind {
        Kind::Hello => payload.len() == HELLO_BYTES,
        Kind::Ack => payload.is_empty() || payload.len() == BACKUP_STATE_BYTES,
        Kind::Epoch => payload.len() as u64 <= MAX_RECORD_BYTES,
        Kind::Refused => payload.len() <= MAX_REASON_BYTES,
        Kind::CopyChunk => !payload.is_empty() && payload.len() <= MAX_COPY_CHUNK,
        _ => payload.is_empty(),
    };
    if !allowed {
        return Err(WireError::BadPayload { kind, bytes: payload.len() });
    }
    if kind != Kind::Epoch && crc32c_append(0, payload) != h.payload_crc {
        return Err(WireError::PayloadChecksum);
    }
    Ok(h)
}

/// A hello's payload: the primary's heap, as the backup must match it,
/// and what the rejoin plan needs of the primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Bytes of the heap's log.
    pub log_bytes: u64,
    /// Bytes of its data area.
    pub data_bytes: u64,
    /// CRC-32C of its whole data area.
    pub data_crc: u32,
    /// The transaction after which the primary's record of written blocks
    /// is complete, if it keeps one.
    pub tracked_since: Option<u64>,
    /// The highest transaction whose commit this primary sent and then
    /// abandoned since it opened its heap (0: none): a backup may hold it
    /// committed ([`crate::Heap::abandoned_to`]).
    pub abandoned_to: u64,
    /// The primary's history.
    pub history: History,
}

impl Hello {
    /// The payload bytes.
    pub fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut p = [0u8; HELLO_BYTES];
        put_u64(&mut p, 0, self.log_bytes);
        put_u64(&mut p, 8, self.data_bytes);
        put_u32(&mut p, 16, self.data_crc);
        put_u32(&mut p, 20, u32::from(self.tracked_since.is_some()));
        put_u64(&mut p, 24, self.tracked_since.unwrap_or(0));
        put_u64(&mut p, 32, self.abandoned_to);
        p[40..].copy_from_slice(&self.history.encode(0));
        p
    }

    /// Reads a payload [`decode`] accepted for a hello; its history is
    /// checked as one on media is.
    pub fn decode(payload: &[u8]) -> Result<Hello, WireError> {
        if payload.len() != HELLO_BYTES || get_u32(payload, 20) > 1 {
            return Err(WireError::BadPayload { kind: Kind::Hello, bytes: payload.len() });
        }
        let (history, _) = History::decode(&payload[40..]).map_err(WireError::BadHistory)?;
        Ok(Hello {
            log_bytes: get_u64(payload, 0),
            data_bytes: get_u64(payload, 8),
            data_crc: get_u32(payload, 16),
            tracked_since: (get_u32(payload, 20) == 1).then(|| get_u64(payload, 24)),
            abandoned_to: get_u64(payload, 32),
            history,
        })
    }
}

/// A hello answer's payload: the backup's state.
pub fn encode_backup_state(state: &BackupState) -> [u8; BACKUP_STATE_BYTES] {
    let mut p = [0u8; BACKUP_STATE_BYTES];
    put_u64(&mut p, 0, state.last);
    put_u32(&mut p, 8, state.data_crc);
    let (kind, base) = match state.resync {
        Resync::None => (0, 0),
        Resync::Full => (1, 0),
        Resync::Incremental { base } => (2, base),
    };
    put_u32(&mut p, 12, kind);
    put_u64(&mut p, 16, base);
    put_u64(&mut p, 24, state.id);
    put_u64(&mut p, 32, state.generation);
    if let Some((number, tag)) = state.last_gen {
        put_u32(&mut p, 40, 1);
        put_u64(&mut p, 48, number);
        put_u64(&mut p, 56, tag);
    }
    p
}

/// Reads a hello answer's payload (its CRC was checked by [`decode`]).
pub fn decode_backup_state(payload: &[u8]) -> Result<BackupState, WireError> {
    let bad = || WireError::BadPayload { kind: Kind::Ack, bytes: payload.len() };
    if payload.len() != BACKUP_STATE_BYTES || get_u32(payload, 44) != 0 {
        return Err(bad());
    }
    let resync = match get_u32(payload, 12) {
        0 => Resync::None,
        1 => Resync::Full,
        2 => Resync::Incremental { base: get_u64(payload, 16) },
        _ => return Err(bad()),
    };
    let last_gen = match get_u32(payload, 40) {
        0 => None,
        1 => Some((get_u64(payload, 48), get_u64(payload, 56))),
        _ => return Err(bad()),
    };
    Ok(BackupState {
        id: get_u64(payload, 24),
        generation: get_u64(payload, 32),
        last: get_u64(payload, 0),
        last_gen,
        resync,
        data_crc: get_u32(payload, 8),
    })
}

/// A refusal's text, cut to [`MAX_REASON_BYTES`] at a character boundary.
pub fn reason_bytes(reason: &str) -> &[u8] {
    let mut end = reason.len().min(MAX_REASON_BYTES);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason.as_bytes()[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let hello = Hello {
            log_bytes: 4096,
            data_bytes: 1 << 20,
            data_crc: 77,
            tracked_since: Some(3),
            abandoned_to: 4,
            history: History::new(5).fork(4, 9),
        };
        let payload = hello.encode();
        let h = encode(Kind::Hello, Strategy::SmOb, 0, 9, 0, &payload);
        let got = decode(&h, &payload).unwrap();
        let want = (Kind::Hello, Strategy::SmOb, 9, HELLO_BYTES as u32);
        assert_eq!((got.kind, got.strategy, got.value, got.payload_bytes), want);
        assert_eq!(Hello::decode(&payload).unwrap(), hello);
        let untracked = Hello { tracked_since: None, ..hello.clone() };
        assert_eq!(Hello::decode(&untracked.encode()).unwrap(), untracked);
        let mut bad = payload;
        bad[40] ^= 1;
        assert!(matches!(Hello::decode(&bad), Err(WireError::BadHistory(_))));
        bad = payload;
        bad[20] = 2;
        assert!(Hello::decode(&bad).is_err());
        let state = BackupState {
            id: 5,
            generation: 1,
            last: 12,
            last_gen: Some((1, 9)),
            resync: Resync::Incremental { base: 7 },
            data_crc: 3,
        };
        let p = encode_backup_state(&state);
        let h = encode(Kind::Ack, Strategy::NoSm, 0, 12, 2, &p);
        assert_eq!(decode(&h, &p).unwrap().payload_bytes as usize, BACKUP_STATE_BYTES);
        assert_eq!(decode_backup_state(&p).unwrap(), state);
        let blank = BackupState { last_gen: None, resync: Resync::None, ..state };
        assert_eq!(decode_backup_state(&encode_backup_state(&blank)).unwrap(), blank);
        let mut bad = p;
        bad[12] = 3;
        assert!(decode_backup_state(&bad).is_err());
        let h = encode(Kind::Ack, Strategy::NoSm, 0, 12, 2, &p[..10]);
        assert!(matches!(decode(&h, &p[..10]), Err(WireError::BadPayload { kind: Kind::Ack, .. })));
        let record = vec![5u8; 100];
        let h = encode(Kind::Epoch, Strategy::NoSm, 3, 48, 2, &record);
        let got = decode(&h, &record).unwrap();
        assert_eq!((got.kind, got.tx, got.value, got.count), (Kind::Epoch, 3, 48, 2));
        let h = encode(Kind::Refused, Strategy::NoSm, 3, 0, 0, b"no");
        assert_eq!(decode(&h, b"no").unwrap().kind, Kind::Refused);
    }

    #[test]
    fn every_flipped_header_bit_is_rejected() {
        let h = encode(Kind::Commit, Strategy::NoSm, 7, 640, 3, &[]);
        for byte in 0..HEADER_BYTES {
            for bit in 0..8 {
                let mut bad = h;
                bad[byte] ^= 1 << bit;
                assert!(decode(&bad, &[]).is_err(), "flip of bit {bit} of byte {byte} accepted");
            }
        }
    }

    #[test]
    fn payloads_are_checked() {
        let hello =
            Hello { log_bytes: 4096, data_bytes: 4096, data_crc: 1, tracked_since: None, abandoned_to: 0, history: History::new(1) };
        let payload = hello.encode();
        let h = encode(Kind::Hello, Strategy::SmRc, 0, 0, 0, &payload);
        let mut flipped = payload;
        flipped[3] ^= 1;
        assert_eq!(decode(&h, &flipped), Err(WireError::PayloadChecksum));
        assert!(matches!(decode(&h, &payload[..20]), Err(WireError::PayloadSize { got: 20, .. })));
        let h = encode(Kind::Commit, Strategy::NoSm, 1, 0, 0, b"x");
        assert!(matches!(decode(&h, b"x"), Err(WireError::BadPayload { kind: Kind::Commit, bytes: 1 })));
        assert!(matches!(decode(&h[..39], b"x"), Err(WireError::HeaderSize(39))));
        let long = "é".repeat(MAX_REASON_BYTES);
        assert!(reason_bytes(&long).len() <= MAX_REASON_BYTES);
        assert!(std::str::from_utf8(reason_bytes(&long)).is_ok());
    }

    #[test]
    fn copy_chunks_are_bounded_and_checked() {
        let chunk = vec![9u8; MAX_COPY_CHUNK];
        let h = encode(Kind::CopyChunk, Strategy::NoSm, 4, 512, 0, &chunk);
        let got = decode(&h, &chunk).unwrap();
        assert_eq!(
            (got.kind, got.tx, got.value, got.payload_bytes as usize),
            (Kind::CopyChunk, 4, 512, MAX_COPY_CHUNK)
        );
        assert!(!got.kind.is_call() && Kind::CopyDone.is_call());
        let mut flipped = chunk.clone();
        flipped[1000] ^= 4;
        assert_eq!(decode(&h, &flipped), Err(WireError::PayloadChecksum));
        let over = vec![9u8; MAX_COPY_CHUNK + 1];
        let h = encode(Kind::CopyChunk, Strategy::NoSm, 4, 0, 0, &over);
        assert!(matches!(decode(&h, &over), Err(WireError::BadPayload { kind: Kind::CopyChunk, .. })));
        let h = encode(Kind::CopyChunk, Strategy::NoSm, 4, 0, 0, &[]);
        assert!(matches!(decode(&h, &[]), Err(WireError::BadPayload { kind: Kind::CopyChunk, bytes: 0 })));
        let h = encode(Kind::CopyDone, Strategy::NoSm, 4, 0, 0, b"x");
        assert!(matches!(decode(&h, b"x"), Err(WireError::BadPayload { kind: Kind::CopyDone, bytes: 1 })));
    }

    #[test]
    fn garbage_never_panics() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as u8
        };
        for i in 0..5000 {
            let mut h = encode(Kind::Epoch, Strategy::SmDd, i, i * 8, 1, &[]);
            for _ in 0..(i % 4) {
                let at = next() as usize % HEADER_BYTES;
                h[at] = next();
            }
            let payload: Vec<u8> = (0..(next() % 40)).map(|_| next()).collect();
            let _ = decode(&h, &payload);
        }
    }

    #[test]
    fn strategies_parse_by_name() {
        for s in Strategy::ALL {
            assert_eq!(Strategy::parse(s.name()), Some(s));
            assert_eq!(Strategy::from_code(s.code()), Some(s));
        }
        assert_eq!(Strategy::parse("sm-ob"), Some(Strategy::SmOb));
        assert_eq!(Strategy::parse("smdd"), Some(Strategy::SmDd));
        assert_eq!(Strategy::parse("sm-xx"), None);
    }
}
