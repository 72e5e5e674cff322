//! The wire protocol: fixed-width little-endian request and response
//! headers, the opcodes, status codes, and the HELLO and LOG_CREATE bodies
//! (`docs/FORMAT.md` ("Wire protocol and remote pool") has the byte diagrams).
//!
//! Invariants:
//! - A request is one message: a 64 B [`RequestHeader`] (one cache line)
//!   followed by exactly `payload_len` payload bytes; a response is a 48 B
//!   [`ResponseHeader`] followed by `payload_len` bytes. The transport
//!   delivers whole messages; anything else is malformed.
//! - The header CRC-32C is verified before any other field is interpreted
//!   (after the length and magic checks that make reading it safe). The
//!   payload CRC is verified when the `PAYLOAD_CRC` flag is set.
//! - Decoding never panics and never allocates: every malformed message
//!   becomes a [`DecodeError`]. Encoding appends to a caller-owned `Vec`
//!   (reused across messages, so the hot path does not allocate).
//! - No payload exceeds [`MAX_PAYLOAD_BYTES`]; a server may set a lower
//!   limit and states it in HELLO.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The protocol version this build speaks.
pub const VERSION: u8 = 1;
/// First 4 bytes of every request (`"PMWQ"`).
pub const REQUEST_MAGIC: u32 = u32::from_le_bytes(*b"PMWQ");
/// First 4 bytes of every response (`"PMWP"`).
pub const RESPONSE_MAGIC: u32 = u32::from_le_bytes(*b"PMWP");
/// Bytes in a request header: one cache line.
pub const REQUEST_HEADER_BYTES: usize = 64;
/// Bytes in a response header.
pub const RESPONSE_HEADER_BYTES: usize = 48;
/// Hard limit on any payload, whatever a server configures.
pub const MAX_PAYLOAD_BYTES: u32 = 1 << 20;
/// The payload limit a server uses unless configured otherwise.
pub const DEFAULT_MAX_PAYLOAD_BYTES: u32 = 256 << 10;
/// Longest log name.
pub const MAX_LOG_NAME_BYTES: usize = 64;
/// Longest packed remote key carried in HELLO.
pub const MAX_RKEY_BYTES: usize = 1024;
/// Bytes of the fixed part of a LOG_CREATE body (the name follows).
pub const LOG_SPEC_BYTES: usize = 32;
/// Bytes of the fixed part of a HELLO reply body (the rkey follows).
pub const HELLO_BYTES: usize = 40;

/// Request flag: `payload_crc` holds the CRC-32C of the payload.
pub const FLAG_PAYLOAD_CRC: u16 = 1;
/// Request flag (PERSIST_WRITE only): copy with the copy engine.
pub const FLAG_OFFLOAD: u16 = 2;
const KNOWN_FLAGS: u16 = FLAG_PAYLOAD_CRC | FLAG_OFFLOAD;

/// What a request asks for.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// Authenticate; the reply describes the region and its guarantees.
    Hello = 1,
    /// Copy the payload to `offset` and persist it before replying.
    PersistWrite = 2,
    /// Flush + drain `[offset, offset + length)` (librpma's GPSPM flush).
    Flush = 3,
    /// Read `length` bytes at `offset`.
    Read = 4,
    /// Persist the 8 B `value` at the 8 B-aligned `offset` with one atomic store.
    AtomicWrite8 = 5,
    /// Create a named append log (body: [`LogSpec`]); replies its id.
    LogCreate = 6,
    /// Look up a log by name (body: the name); replies its id.
    LogOpen = 7,
    /// Append the payload to log `offset`; replies the LSN.
    LogAppend = 8,
    /// Read entry LSN `length` of log `offset`.
    LogRead = 9,
    /// Drop entries of log `offset` below LSN `length`.
    LogTruncate = 10,
    /// Reply with the payload (not durable).
    Echo = 11,
    /// Reply with nothing; the payload is dropped (the network floor).
    Discard = 12,
}

impl Opcode {
    /// The opcode with wire code `code`.
    pub fn from_u8(code: u8) -> Option<Opcode> {
        use Opcode::*;
        const ALL: [Opcode; 12] =
            [Hello, PersistWrite, Flush, Read, AtomicWrite8, LogCreate, LogOpen, LogAppend, LogRead, LogTruncate, Echo, Discard];
        ALL.into_iter().find(|op| *op as u8 == code)
    }

    /// Whether the opcode needs the write right (else the read right).
    pub fn mutates(self) -> bool {
        use Opcode::*;
        matches!(self, PersistWrite | Flush | AtomicWrite8 | LogCreate | LogAppend | LogTruncate)
    }
}

/// Outcome of a request, carried in every response.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Error)]
pub enum Status {
    /// Done.
    #[error("ok")]
    Ok = 0,
    /// The request could not be parsed (short, bad magic, bad length, bad body).
    #[error("malformed request")]
    Malformed = 1,
    /// The request's header or payload checksum did not match.
    #[error("checksum mismatch")]
    BadChecksum = 2,
    /// The request speaks another protocol version.
    #[error("unsupported protocol version")]
    BadVersion = 3,
    /// Unknown opcode or flags.
    #[error("unknown opcode or flag")]
    UnknownOpcode = 4,
    /// The payload exceeds the server's limit (`detail`: the limit).
    #[error("message too large")]
    TooLarge = 5,
    /// No region with this id.
    #[error("unknown region")]
    UnknownRegion = 6,
    /// Wrong access key.
    #[error("wrong access key")]
    BadKey = 7,
    /// The client lacks the read or write right.
    #[error("missing right")]
    Forbidden = 8,
    /// The range lies outside the region (`detail`: the region size).
    #[error("range out of bounds")]
    OutOfBounds = 9,
    /// An atomic write to an offset that is not 8 B aligned.
    #[error("misaligned")]
    Misaligned = 10,
    /// No log with this id or name.
    #[error("unknown log")]
    UnknownLog = 11,
    /// A log with this name exists.
    #[error("log exists")]
    LogExists = 12,
    /// The log has no room; truncate first (`detail`: free bytes).
    #[error("log full")]
    LogFull = 13,
    /// The entry can never fit the log (`detail`: the largest payload).
    #[error("entry too large for the log")]
    EntryTooLarge = 14,
    /// The pool's log area or directory is full.
    #[error("no space for the log")]
    NoSpace = 15,
    /// The log configuration is invalid.
    #[error("bad log configuration")]
    BadLogConfig = 16,
    /// The LSN is not in the log (truncated, or not yet appended).
    #[error("no such entry")]
    NoEntry = 17,
    /// The server does not offer this (e.g. no copy engine).
    #[error("not supported by this server")]
    Unsupported = 18,
}

impl Status {
    /// The status with wire code `code`.
    pub fn from_u16(code: u16) -> Option<Status> {
        use Status::*;
        const ALL: [Status; 19] = [
            Ok,
            Malformed,
            BadChecksum,
            BadVersion,
            UnknownOpcode,
            TooLarge,
            UnknownRegion,
            BadKey,
            Forbidden,
            OutOfBounds,
            Misaligned,
            UnknownLog,
            LogExists,
            LogFull,
            EntryTooLarge,
            NoSpace,
            BadLogConfig,
            NoEntry,
            Unsupported,
        ];
        ALL.into_iter().find(|s| *s as u16 == code)
    }
}

/// Why a message could not be decoded. Nothing was acted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// Shorter than a header (split delivery: a header that is not exactly `need` bytes).
    #[error("{len} B where a {need} B header was expected")]
    Short {
        /// Bytes received.
        len: usize,
        /// Header size.
        need: usize,
    },
    /// The first word is not the magic.
    #[error("bad magic {found:#010x}")]
    BadMagic {
        /// The word found.
        found: u32,
    },
    /// The header CRC does not match: the header is torn or garbled.
    #[error("header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    HeaderChecksum {
        /// In the header.
        stored: u32,
        /// Of the bytes received.
        computed: u32,
    },
    /// Another protocol version.
    #[error("protocol version {found}, this build speaks {VERSION}")]
    Version {
        /// The version in the header.
        found: u8,
    },
    /// An opcode this build does not know.
    #[error("unknown opcode {0}")]
    Opcode(u8),
    /// A status code this build does not know (responses).
    #[error("unknown status {0}")]
    UnknownStatus(u16),
    /// Flags this build does not know, or a flag the opcode does not take.
    #[error("flags {flags:#06x} not valid for this opcode")]
    Flags {
        /// The flags.
        flags: u16,
    },
    /// The declared payload length disagrees with the bytes received.
    #[error("declared payload of {declared} B, received {actual} B")]
    Length {
        /// `payload_len` in the header.
        declared: u32,
        /// Bytes after the header.
        actual: usize,
    },
    /// The payload exceeds the limit.
    #[error("payload of {len} B exceeds the limit of {max} B")]
    TooLarge {
        /// Declared length.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// The payload CRC does not match.
    #[error("payload checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    PayloadChecksum {
        /// In the header.
        stored: u32,
        /// Of the payload received.
        computed: u32,
    },
    /// The header is well formed but its fields do not fit the opcode.
    #[error("malformed {opcode:?}: {why}")]
    Malformed {
        /// The opcode.
        opcode: Opcode,
        /// What is wrong.
        why: &'static str,
    },
}

impl DecodeError {
    /// The status a server replies with.
    pub fn status(self) -> Status {
        match self {
            DecodeError::HeaderChecksum { .. } | DecodeError::PayloadChecksum { .. } => Status::BadChecksum,
            DecodeError::Version { .. } => Status::BadVersion,
            DecodeError::Opcode(_) | DecodeError::Flags { .. } => Status::UnknownOpcode,
            DecodeError::TooLarge { .. } => Status::TooLarge,
            _ => Status::Malformed,
        }
    }
}

/// The fixed header of a request. Field use per opcode is in `wire.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    /// What is asked.
    pub opcode: Opcode,
    /// `FLAG_*` bits.
    pub flags: u16,
    /// Chosen by the client, echoed in the response.
    pub request_id: u64,
    /// Which exported region.
    pub region_id: u32,
    /// The region's access key.
    pub key: u64,
    /// Byte offset in the region's data area, or a log id.
    pub offset: u64,
    /// Byte length, or an LSN.
    pub length: u64,
    /// The word of ATOMIC_WRITE8.
    pub value: u64,
}

impl RequestHeader {
    /// A header for `opcode` with every other field zero.
    pub fn new(opcode: Opcode, request_id: u64) -> RequestHeader {
        RequestHeader { opcode, flags: 0, request_id, region_id: 0, key: 0, offset: 0, length: 0, value: 0 }
    }
}

/// A decoded request; the payload borrows the message.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The header.
    pub header: RequestHeader,
    /// The payload (exactly `payload_len` bytes, checksum verified if flagged).
    pub payload: &'a [u8],
}

/// The fixed header of a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseHeader {
    /// The request's opcode (raw: echoed even when unknown).
    pub opcode: u8,
    /// The outcome.
    pub status: Status,
    /// The request's id (best effort when the request was garbled).
    pub request_id: u64,
    /// Result word: LSN, log id, bytes read.
    pub value: u64,
    /// Error context: the limit exceeded, the region size, free bytes.
    pub detail: u64,
}

/// A decoded response; the payload borrows the message.
#[derive(Clone, Copy, Debug)]
pub struct Response<'a> {
    /// The header.
    pub header: ResponseHeader,
    /// The payload.
    pub payload: &'a [u8],
}

fn put_u16(buf: &mut [u8], at: usize, v: u16) {
    buf[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([buf[at], buf[at + 1]])
}
fn get_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}
fn get_u64(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

/// Appends the request `header` + `payload` to `out` (cleared first),
/// filling in the payload length and both checksums. The payload CRC is
/// computed only if `header.flags` has [`FLAG_PAYLOAD_CRC`].
pub fn encode_request(header: &RequestHeader, payload: &[u8], out: &mut Vec<u8>) {
    encode_request_header(header, payload, out);
    out.extend_from_slice(payload);
}

/// [`encode_request`] without the payload: `out` (cleared first) gets the
/// 64 header bytes for `header` + `payload`, for a transport that sends the
/// payload apart.
pub fn encode_request_header(header: &RequestHeader, payload: &[u8], out: &mut Vec<u8>) {
    assert!(payload.len() <= MAX_PAYLOAD_BYTES as usize, "payload of {} B over the hard limit", payload.len());
    out.clear();
    out.resize(REQUEST_HEADER_BYTES, 0);
    let h = &mut out[..];
    put_u32(h, 0, REQUEST_MAGIC);
    h[4] = VERSION;
    h[5] = header.opcode as u8;
    put_u16(h, 6, header.flags);
    put_u64(h, 8, header.request_id);
    put_u32(h, 16, header.region_id);
    put_u32(h, 20, payload.len() as u32);
    put_u64(h, 24, header.key);
    put_u64(h, 32, header.offset);
    put_u64(h, 40, header.length);
    put_u64(h, 48, header.value);
    let payload_crc = if header.flags & FLAG_PAYLOAD_CRC != 0 { crc32c::crc32c(payload) } else { 0 };
    put_u32(h, 56, payload_crc);
    let crc = crc32c::crc32c(&h[..60]);
    put_u32(h, 60, crc);
}

/// The request id at bytes 8..16, if the message is long enough: used to
/// address an error reply to a request that failed to decode.
pub fn peek_request_id(msg: &[u8]) -> u64 {
    msg.get(8..16).map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// The opcode byte, if present (echoed in error replies).
pub fn peek_opcode(msg: &[u8]) -> u8 {
    msg.get(5).copied().unwrap_or(0)
}

/// Checks length, magic, header CRC and version of a message whose header
/// is `header_bytes` long with its CRC in the last 4 bytes.
fn check_frame(msg: &[u8], header_bytes: usize, magic: u32) -> Result<(), DecodeError> {
    if msg.len() < header_bytes {
        return Err(DecodeError::Short { len: msg.len(), need: header_bytes });
    }
    let found = get_u32(msg, 0);
    if found != magic {
        return Err(DecodeError::BadMagic { found });
    }
    let stored = get_u32(msg, header_bytes - 4);
    let computed = crc32c::crc32c(&msg[..header_bytes - 4]);
    if stored != computed {
        return Err(DecodeError::HeaderChecksum { stored, computed });
    }
    if msg[4] != VERSION {
        return Err(DecodeError::Version { found: msg[4] });
    }
    Ok(())
}

/// Decodes and validates one request message. `max_payload` is the
/// server's limit (capped at [`MAX_PAYLOAD_BYTES`]).
pub fn decode_request(msg: &[u8], max_payload: u32) -> Result<Request<'_>, DecodeError> {
    if msg.len() < REQUEST_HEADER_BYTES {
        return Err(DecodeError::Short { len: msg.len(), need: REQUEST_HEADER_BYTES });
    }
    let (header, payload) = msg.split_at(REQUEST_HEADER_BYTES);
    decode_request_parts(header, payload, max_payload)
}

/// [`decode_request`] for a transport that delivers the header and the
/// payload separately (a UCX active message's header and data): no copy
/// to make them contiguous. `header` must be exactly 64 bytes.
pub fn decode_request_parts<'a>(header: &[u8], payload: &'a [u8], max_payload: u32) -> Result<Request<'a>, DecodeError> {
    if header.len() != REQUEST_HEADER_BYTES {
        return Err(DecodeError::Short { len: header.len(), need: REQUEST_HEADER_BYTES });
    }
    let msg = header;
    check_frame(msg, REQUEST_HEADER_BYTES, REQUEST_MAGIC)?;
    let opcode = Opcode::from_u8(msg[5]).ok_or(DecodeError::Opcode(msg[5]))?;
    let flags = get_u16(msg, 6);
    if flags & !KNOWN_FLAGS != 0 || (flags & FLAG_OFFLOAD != 0 && opcode != Opcode::PersistWrite) {
        return Err(DecodeError::Flags { flags });
    }
    let declared = get_u32(msg, 20);
    let max = max_payload.min(MAX_PAYLOAD_BYTES);
    if declared > max {
        return Err(DecodeError::TooLarge { len: declared, max });
    }
    if payload.len() != declared as usize {
        return Err(DecodeError::Length { declared, actual: payload.len() });
    }
    if flags & FLAG_PAYLOAD_CRC != 0 {
        let stored = get_u32(msg, 56);
        let computed = crc32c::crc32c(payload);
        if stored != computed {
            return Err(DecodeError::PayloadChecksum { stored, computed });
        }
    }
    let header = RequestHeader {
        opcode,
        flags,
        request_id: get_u64(msg, 8),
        region_id: get_u32(msg, 16),
        key: get_u64(msg, 24),
        offset: get_u64(msg, 32),
        length: get_u64(msg, 40),
        value: get_u64(msg, 48),
    };
    check_shape(&header, payload, max_payload)?;
    Ok(Request { header, payload })
}

/// Per-opcode structure: which requests carry a payload, and how long.
fn check_shape(h: &RequestHeader, payload: &[u8], max_payload: u32) -> Result<(), DecodeError> {
    let bad = |why| Err(DecodeError::Malformed { opcode: h.opcode, why });
    let len = payload.len();
    match h.opcode {
        Opcode::Hello | Opcode::Flush | Opcode::AtomicWrite8 | Opcode::LogRead | Opcode::LogTruncate if len != 0 => {
            bad("carries a payload")
        }
        Opcode::Read if len != 0 => bad("carries a payload"),
        Opcode::Read if h.length > max_payload.min(MAX_PAYLOAD_BYTES) as u64 => {
            Err(DecodeError::TooLarge { len: h.length.min(u32::MAX as u64) as u32, max: max_payload })
        }
        Opcode::PersistWrite if h.length != len as u64 => bad("length differs from the payload"),
        Opcode::LogOpen if len == 0 || len > MAX_LOG_NAME_BYTES => bad("name must be 1..=64 bytes"),
        Opcode::LogCreate => LogSpec::decode(payload).map(|_| ()).map_err(|why| DecodeError::Malformed { opcode: h.opcode, why }),
        _ => Ok(()),
    }
}

/// Appends the response `header` + `payload` to `out` (cleared first).
/// Response payloads always carry their CRC (reads are the bytes the
/// client came for; checking them costs the client, not the server's loop).
pub fn encode_response(header: &ResponseHeader, payload: &[u8], out: &mut Vec<u8>) {
    assert!(payload.len() <= MAX_PAYLOAD_BYTES as usize, "response payload of {} B over the limit", payload.len());
    out.clear();
    out.extend_from_slice(&encode_response_header(header, payload));
    out.extend_from_slice(payload);
}

/// The 48 response header bytes for `header` with `payload`.
pub fn encode_response_header(header: &ResponseHeader, payload: &[u8]) -> [u8; RESPONSE_HEADER_BYTES] {
    let mut h = [0u8; RESPONSE_HEADER_BYTES];
    put_u32(&mut h, 0, RESPONSE_MAGIC);
    h[4] = VERSION;
    h[5] = header.opcode;
    put_u16(&mut h, 6, header.status as u16);
    put_u64(&mut h, 8, header.request_id);
    put_u32(&mut h, 16, payload.len() as u32);
    put_u32(&mut h, 20, crc32c::crc32c(payload));
    put_u64(&mut h, 24, header.value);
    put_u64(&mut h, 32, header.detail);
    let crc = crc32c::crc32c(&h[..44]);
    put_u32(&mut h, 44, crc);
    h
}

/// Decodes and validates one response message.
pub fn decode_response(msg: &[u8], max_payload: u32) -> Result<Response<'_>, DecodeError> {
    if msg.len() < RESPONSE_HEADER_BYTES {
        return Err(DecodeError::Short { len: msg.len(), need: RESPONSE_HEADER_BYTES });
    }
    let (header, payload) = msg.split_at(RESPONSE_HEADER_BYTES);
    decode_response_parts(header, payload, max_payload)
}

/// [`decode_response`] for a response whose header and payload arrived
/// apart (a transport RPC's response header and payload). `header` must be
/// exactly 48 bytes.
pub fn decode_response_parts<'a>(header: &[u8], payload: &'a [u8], max_payload: u32) -> Result<Response<'a>, DecodeError> {
    if header.len() != RESPONSE_HEADER_BYTES {
        return Err(DecodeError::Short { len: header.len(), need: RESPONSE_HEADER_BYTES });
    }
    let msg = header;
    check_frame(msg, RESPONSE_HEADER_BYTES, RESPONSE_MAGIC)?;
    let code = get_u16(msg, 6);
    let status = Status::from_u16(code).ok_or(DecodeError::UnknownStatus(code))?;
    if get_u32(msg, 40) != 0 {
        return Err(DecodeError::Flags { flags: 0xffff });
    }
    let declared = get_u32(msg, 16);
    let max = max_payload.min(MAX_PAYLOAD_BYTES);
    if declared > max {
        return Err(DecodeError::TooLarge { len: declared, max });
    }
    if payload.len() != declared as usize {
        return Err(DecodeError::Length { declared, actual: payload.len() });
    }
    let stored = get_u32(msg, 20);
    let computed = crc32c::crc32c(payload);
    if stored != computed {
        return Err(DecodeError::PayloadChecksum { stored, computed });
    }
    let header = ResponseHeader {
        opcode: msg[5],
        status,
        request_id: get_u64(msg, 8),
        value: get_u64(msg, 24),
        detail: get_u64(msg, 32),
    };
    Ok(Response { header, payload })
}

/// What a write method guarantees once its completion is seen, weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Guarantee {
    /// Nothing: the method is not offered, or the data is dropped.
    None = 0,
    /// A later read by anyone sees the bytes; they may sit in the server's
    /// cache and be lost at power failure (RPMA_FLUSH_TYPE_VISIBILITY).
    Visibility = 1,
    /// The bytes are in the server's persistence domain (what that survives
    /// is the domain: power loss, or a process crash only when emulated).
    Persistence = 2,
}

impl Guarantee {
    fn from_u8(code: u8) -> Option<Guarantee> {
        [Guarantee::None, Guarantee::Visibility, Guarantee::Persistence].into_iter().find(|g| *g as u8 == code)
    }
}

/// The ways a client can write durably (plus `Auto`, which picks one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Method {
    /// PERSIST_WRITE: the server copies with ordinary stores, flushes the
    /// lines (`clwb`) and drains (seed 000 Fig 2c).
    Rpc,
    /// PERSIST_WRITE with the copy engine: the reply follows the copy (seed 000 §5.5).
    RpcOffload,
    /// One-sided put, then a FLUSH RPC (librpma GPSPM).
    OneSidedFlush,
    /// One-sided put and a flushing get posted together: one round trip (seed 004 H9).
    OneSidedReadAfterWrite,
    /// Put, wait for it, then the flushing get: the two-round-trip strawman.
    ReadAfterWriteTwoTrips,
    /// Chosen per size from a calibration table.
    Auto,
}

impl Method {
    /// The concrete methods, in HELLO's guarantee-table order.
    pub const CONCRETE: [Method; 5] = [
        Method::Rpc,
        Method::RpcOffload,
        Method::OneSidedFlush,
        Method::OneSidedReadAfterWrite,
        Method::ReadAfterWriteTwoTrips,
    ];

    /// Index in HELLO's guarantee table (`None` for `Auto`).
    pub fn index(self) -> Option<usize> {
        Method::CONCRETE.iter().position(|m| *m == self)
    }

    /// Whether the method puts the data one-sided (needs an rkey).
    pub fn one_sided(self) -> bool {
        matches!(self, Method::OneSidedFlush | Method::OneSidedReadAfterWrite | Method::ReadAfterWriteTwoTrips)
    }
}

/// HELLO's byte 29: how far a client's one-sided operations reach into the
/// server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OneSidedReach {
    /// One-sided access is off (the default): no rkey; the server's
    /// transport serves no put, get or atomic.
    Off = 0,
    /// Confined to the data area: the transport checks every access
    /// against the registration.
    DataArea = 1,
    /// The whole server process: the transport serves one-sided
    /// operations in software at whatever address a client names (UCX over
    /// tcp and shared memory), so a client can read the access key and
    /// write anything. Only an operator's flag turns this on.
    Process = 2,
}

impl OneSidedReach {
    /// The code's meaning, if known.
    pub fn from_u8(code: u8) -> Option<OneSidedReach> {
        match code {
            0 => Some(OneSidedReach::Off),
            1 => Some(OneSidedReach::DataArea),
            2 => Some(OneSidedReach::Process),
            _ => None,
        }
    }
}

/// The HELLO reply body: what the server exports and promises.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Bytes of the exported data area.
    pub data_bytes: u64,
    /// Server virtual address of byte 0 of the data area (for one-sided
    /// access with `rkey`; 0 when not registered). `remote_addr +
    /// data_bytes` fits in a `u64` (checked by [`Hello::decode`]).
    pub remote_addr: u64,
    /// What backs the region (`pmem::RegionKind` code: 0 fsdax, 1 devdax, 2 file, 3 emulated).
    pub kind: u8,
    /// Persistence domain (0 cpu_cache/eADR, 1 memory_controller/ADR, 2 page_cache, 3 process_only).
    pub domain: u8,
    /// The rights this client holds (`RIGHT_*` bits).
    pub rights: u8,
    /// The server requires `FLAG_PAYLOAD_CRC` on every payload.
    pub payload_crc_required: bool,
    /// Largest payload the server takes.
    pub max_payload: u32,
    /// Guarantee of each method in [`Method::CONCRETE`] order.
    pub guarantees: [Guarantee; 5],
    /// How far one-sided access reaches (`Off`: no rkey).
    pub one_sided: OneSidedReach,
    /// The packed remote key for one-sided access (empty: none).
    pub rkey: Vec<u8>,
}

/// Right to READ and LOG_READ/LOG_OPEN.
pub const RIGHT_READ: u8 = 1;
/// Right to every mutating opcode.
pub const RIGHT_WRITE: u8 = 2;

impl Hello {
    /// Appends the body to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        assert!(self.rkey.len() <= MAX_RKEY_BYTES, "rkey of {} B", self.rkey.len());
        let mut h = [0u8; HELLO_BYTES];
        put_u64(&mut h, 0, self.data_bytes);
        put_u64(&mut h, 8, self.remote_addr);
        h[16] = self.kind;
        h[17] = self.domain;
        h[18] = self.rights;
        h[19] = self.payload_crc_required as u8;
        put_u32(&mut h, 20, self.max_payload);
        for (i, g) in self.guarantees.iter().enumerate() {
            h[24 + i] = *g as u8;
        }
        h[29] = self.one_sided as u8;
        put_u32(&mut h, 32, self.rkey.len() as u32);
        out.extend_from_slice(&h);
        out.extend_from_slice(&self.rkey);
    }

    /// Parses a body.
    pub fn decode(body: &[u8]) -> Result<Hello, &'static str> {
        if body.len() < HELLO_BYTES {
            return Err("HELLO body shorter than 40 B");
        }
        let rkey_len = get_u32(body, 32) as usize;
        if rkey_len > MAX_RKEY_BYTES || body.len() != HELLO_BYTES + rkey_len {
            return Err("HELLO rkey length disagrees with the body");
        }
        if body[16] > 3 || body[17] > 3 || body[18] & !(RIGHT_READ | RIGHT_WRITE) != 0 || body[19] > 1 {
            return Err("HELLO field out of range");
        }
        if body[30..32].iter().any(|&b| b != 0) || get_u32(body, 36) != 0 {
            return Err("HELLO reserved bytes not zero");
        }
        let one_sided = OneSidedReach::from_u8(body[29]).ok_or("HELLO one-sided reach code unknown")?;
        if (one_sided == OneSidedReach::Off) != (rkey_len == 0) {
            return Err("HELLO one-sided reach disagrees with the rkey");
        }
        // The data area is a range of the server's address space: a client
        // adds offsets below `data_bytes` to `remote_addr` unchecked.
        if get_u64(body, 8).checked_add(get_u64(body, 0)).is_none() {
            return Err("HELLO data area runs past the end of the address space");
        }
        let mut guarantees = [Guarantee::None; 5];
        for (i, g) in guarantees.iter_mut().enumerate() {
            *g = Guarantee::from_u8(body[24 + i]).ok_or("HELLO guarantee code unknown")?;
        }
        Ok(Hello {
            data_bytes: get_u64(body, 0),
            remote_addr: get_u64(body, 8),
            kind: body[16],
            domain: body[17],
            rights: body[18],
            payload_crc_required: body[19] == 1,
            max_payload: get_u32(body, 20),
            guarantees,
            one_sided,
            rkey: body[HELLO_BYTES..].to_vec(),
        })
    }

    /// The guarantee `method` gives on this target (`Auto`: none by itself).
    pub fn guarantee(&self, method: Method) -> Guarantee {
        method.index().map_or(Guarantee::None, |i| self.guarantees[i])
    }
}

/// The LOG_CREATE body: a log's shape and name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogSpec<'a> {
    /// Entry-space bytes.
    pub capacity: u64,
    /// Tail strategy code: 0 naive, 1 rotating, 2 self-validating.
    pub tail: u32,
    /// Rotating tail: chunks.
    pub blocks: u32,
    /// Rotating tail: stride.
    pub stride: u32,
    /// Entry alignment: 8, 64 or 256.
    pub align: u32,
    /// The log's name (1..=64 bytes).
    pub name: &'a [u8],
}

impl<'a> LogSpec<'a> {
    /// Appends the body to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        assert!(!self.name.is_empty() && self.name.len() <= MAX_LOG_NAME_BYTES, "log name of {} B", self.name.len());
        let mut h = [0u8; LOG_SPEC_BYTES];
        put_u64(&mut h, 0, self.capacity);
        put_u32(&mut h, 8, self.tail);
        put_u32(&mut h, 12, self.blocks);
        put_u32(&mut h, 16, self.stride);
        put_u32(&mut h, 20, self.align);
        put_u32(&mut h, 24, self.name.len() as u32);
        out.extend_from_slice(&h);
        out.extend_from_slice(self.name);
    }

    /// Parses a body (structure only; the server validates the values).
    pub fn decode(body: &'a [u8]) -> Result<LogSpec<'a>, &'static str> {
        if body.len() < LOG_SPEC_BYTES {
            return Err("log spec shorter than 32 B");
        }
        let name_len = get_u32(body, 24) as usize;
        if name_len == 0 || name_len > MAX_LOG_NAME_BYTES || body.len() != LOG_SPEC_BYTES + name_len {
            return Err("log name length disagrees with the body or is not 1..=64");
        }
        if get_u32(body, 28) != 0 {
            return Err("log spec reserved word not zero");
        }
        Ok(LogSpec {
            capacity: get_u64(body, 0),
            tail: get_u32(body, 8),
            blocks: get_u32(body, 12),
            stride: get_u32(body, 16),
            align: get_u32(body, 20),
            name: &body[LOG_SPEC_BYTES..],
        })
    }
}

#[cfg(test)]
mod tests;
