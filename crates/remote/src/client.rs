//! The client core: builds requests, matches responses, bounds the
//! in-flight window, and decides how a write becomes durable. No I/O: the
//! glue sends what it builds and feeds back what arrives.
//!
//! Invariants:
//! - At most `window` requests are outstanding. A request id is
//!   `sequence << 16 | slot`; a response is accepted only if its id is the
//!   exact id outstanding in its slot, with the same opcode, so a stale,
//!   duplicated or forged response is a [`ResponseError`], never a
//!   completion of someone else's request.
//! - Every method's guarantee comes from the server's HELLO; a write that
//!   needs more than its method gives is refused *before* anything is sent
//!   ([`MethodError::Weaker`] names the guarantee that is available).
//! - Encoding reuses the caller's buffer; matching does not allocate
//!   (except when a HELLO reply is stored).

use thiserror::Error;

use crate::auto::AutoSelector;
use crate::proto::{
    decode_response, decode_response_parts, encode_request, encode_request_header, DecodeError, Guarantee, Hello, LogSpec, Method, Opcode, RequestHeader, Status,
    FLAG_OFFLOAD, FLAG_PAYLOAD_CRC, MAX_PAYLOAD_BYTES,
};
use pmwire_log::{LogConfig, TailStrategy};

/// Largest window.
pub const MAX_WINDOW: usize = 1 << 16;

/// How a client talks to one region.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The region's id.
    pub region_id: u32,
    /// The region's access key.
    pub key: u64,
    /// Requests outstanding at most.
    pub window: usize,
    /// Send payload checksums (always on if the server requires them).
    pub payload_crc: bool,
}

/// Why a request was not built. Nothing was sent.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum IssueError {
    /// `window` requests are outstanding.
    #[error("window of {0} requests full")]
    WindowFull(usize),
    /// The payload exceeds the server's (or the protocol's) limit.
    #[error("payload of {len} B exceeds the limit of {max} B")]
    TooLarge {
        /// Bytes.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// The log name is empty or over 64 bytes.
    #[error("log name of {0} B (allowed 1..=64)")]
    BadName(usize),
}

/// Why a response was not accepted.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ResponseError {
    /// The bytes do not decode.
    #[error("undecodable response: {0}")]
    Decode(#[from] DecodeError),
    /// No request with this id is outstanding (late, duplicate, or forged).
    #[error("response to request {0:#x}, which is not outstanding")]
    Unknown(u64),
    /// The response's opcode differs from its request's.
    #[error("response opcode {got} to a {expected:?} request")]
    Opcode {
        /// The request's opcode.
        expected: Opcode,
        /// The response's.
        got: u8,
    },
    /// A HELLO reply whose body does not parse.
    #[error("bad HELLO body: {0}")]
    Hello(&'static str),
}

/// The server refused a request.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
#[error("server refused: {status} (detail {detail})")]
pub struct RemoteError {
    /// Why.
    pub status: Status,
    /// Context: the limit, the region size, free bytes.
    pub detail: u64,
}

/// A matched response.
#[derive(Debug)]
pub struct Reply<'a> {
    /// The request it answers.
    pub request_id: u64,
    /// The request's opcode.
    pub opcode: Opcode,
    /// The result word (LSN, log id, bytes) or the server's refusal.
    pub result: Result<u64, RemoteError>,
    /// Bytes read, echoed, or the HELLO body.
    pub payload: &'a [u8],
}

/// Why a write cannot be done the way asked. Nothing was sent.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum MethodError {
    /// No HELLO reply yet: the target's guarantees are unknown.
    #[error("no HELLO yet: the target's guarantees are unknown")]
    NotConnected,
    /// The method gives less than needed on this target.
    #[error("{method:?} gives only {available:?} on this target, {required:?} was asked for")]
    Weaker {
        /// The method asked for.
        method: Method,
        /// The guarantee needed.
        required: Guarantee,
        /// What the method does give here.
        available: Guarantee,
    },
    /// `Auto` without a calibration, or no calibrated method gives the guarantee.
    #[error("Auto found no calibrated method giving {required:?} for {size} B")]
    NoCandidate {
        /// Write size.
        size: u64,
        /// The guarantee needed.
        required: Guarantee,
    },
    /// The range is outside the exported data area.
    #[error("write of {len} B at {offset} outside the data area of {data_bytes} B")]
    OutOfBounds {
        /// Offset.
        offset: u64,
        /// Length.
        len: u64,
        /// The data area's size.
        data_bytes: u64,
    },
    /// An RPC method with a payload over the server's limit.
    #[error("RPC write of {len} B over the server's limit of {max} B")]
    TooLarge {
        /// Bytes.
        len: u64,
        /// Limit.
        max: u32,
    },
}

/// How to carry out one durable write (from [`ClientCore::plan_write`]).
///
/// | method | the glue does |
/// |---|---|
/// | `Rpc` | `persist_write(.., offload = false)` |
/// | `RpcOffload` | `persist_write(.., offload = true)` |
/// | `OneSidedFlush` | `put(remote_addr, rkey)`, then `flush(offset, len)` after the put completes |
/// | `OneSidedReadAfterWrite` | `put` and a 1 B (or 8 B) `get` of the last written line on the same endpoint, posted back to back; done when the get completes (one round trip) |
/// | `ReadAfterWriteTwoTrips` | `put`, wait for its completion, then the `get` |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WritePlan {
    /// The concrete method (Auto resolved).
    pub method: Method,
    /// What the write guarantees once done.
    pub guarantee: Guarantee,
    /// For one-sided methods: the server address to put to.
    pub remote_addr: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
struct Outstanding {
    id: u64,
    opcode: Opcode,
}

/// The client core (see the module docs).
#[derive(Debug)]
pub struct ClientCore {
    config: ClientConfig,
    slots: Vec<Option<Outstanding>>,
    free: Vec<u32>,
    sequence: u64,
    hello: Option<Hello>,
    detached: bool,
}

impl ClientCore {
    /// A client for one region.
    pub fn new(config: ClientConfig) -> ClientCore {
        assert!((1..=MAX_WINDOW).contains(&config.window), "window {} outside 1..={MAX_WINDOW}", config.window);
        let free = (0..config.window as u32).rev().collect();
        ClientCore { slots: vec![None; config.window], free, sequence: 0, hello: None, detached: false, config }
    }

    /// The server's HELLO, once received.
    pub fn hello(&self) -> Option<&Hello> {
        self.hello.as_ref()
    }

    /// With `detached`, request builders write only the 64 header bytes to
    /// `out` and the caller sends the payload apart (a transport RPC's
    /// header and payload), saving a copy.
    pub fn set_detached_payload(&mut self, detached: bool) {
        self.detached = detached;
    }

    /// Forgets an outstanding request that could not be sent (frees its slot).
    pub fn cancel(&mut self, request_id: u64) {
        let slot = (request_id & 0xffff) as usize;
        if self.slots.get(slot).copied().flatten().is_some_and(|o| o.id == request_id) {
            self.slots[slot] = None;
            self.free.push(slot as u32);
        }
    }

    /// Requests outstanding.
    pub fn outstanding(&self) -> usize {
        self.config.window - self.free.len()
    }

    fn max_payload(&self) -> u32 {
        self.hello.as_ref().map_or(MAX_PAYLOAD_BYTES, |h| h.max_payload.min(MAX_PAYLOAD_BYTES))
    }

    fn issue(&mut self, mut h: RequestHeader, payload: &[u8], out: &mut Vec<u8>) -> Result<u64, IssueError> {
        let max = self.max_payload();
        if payload.len() > max as usize {
            return Err(IssueError::TooLarge { len: payload.len(), max });
        }
        let slot = self.free.pop().ok_or(IssueError::WindowFull(self.config.window))?;
        self.sequence += 1;
        h.request_id = self.sequence << 16 | slot as u64;
        h.region_id = self.config.region_id;
        h.key = self.config.key;
        let crc_required = self.hello.as_ref().is_some_and(|h| h.payload_crc_required);
        if !payload.is_empty() && (self.config.payload_crc || crc_required) {
            h.flags |= FLAG_PAYLOAD_CRC;
        }
        if self.detached {
            encode_request_header(&h, payload, out);
        } else {
            encode_request(&h, payload, out);
        }
        self.slots[slot as usize] = Some(Outstanding { id: h.request_id, opcode: h.opcode });
        Ok(h.request_id)
    }

    fn simple(&mut self, opcode: Opcode, offset: u64, length: u64, out: &mut Vec<u8>) -> Result<u64, IssueError> {
        let mut h = RequestHeader::new(opcode, 0);
        h.offset = offset;
        h.length = length;
        self.issue(h, &[], out)
    }

    /// HELLO: authenticate and learn the target's guarantees.
    pub fn hello_request(&mut self, out: &mut Vec<u8>) -> Result<u64, IssueError> {
        self.simple(Opcode::Hello, 0, 0, out)
    }

    /// PERSIST_WRITE of `data` at `offset`, through the copy engine if `offload`.
    pub fn persist_write(&mut self, offset: u64, data: &[u8], offload: bool, out: &mut Vec<u8>) -> Result<u64, IssueError> {
        let mut h = RequestHeader::new(Opcode::PersistWrite, 0);
        h.offset = offset;
        h.length = data.len() as u64;
        if offload {
            h.flags = FLAG_OFFLOAD;
        }
        self.issue(h, data, out)
    }

    /// FLUSH of `[offset, offset + len)`.
    pub fn flush(&mut self, offset: u64, len: u64, out: &mut Vec<u8>) -> Result<u64, IssueError> {
        self.simple(Opcode::Flush, offset, len, out)
    }

    /// READ of `len` bytes at `offset`.
    pub fn read(&mut self, offset: u64, len: u64, out: &mut Vec<u8>) -> Result<u64, IssueError> {
        let max = self.max_payload();
        if len > max as u64 {
            return Err(IssueError::TooLarge { len: len.min(usize::MAX as u64) as usize, max });
        }
        self.simple(Opcode::Read, offset, len, out)
    }

    /// ATOMIC_WRITE8 of `value` at the 8 B-aligned `offset`.
    pub fn atomic_write8(&mut self, offset: u64, value: u64, out: &mut Vec<u8>) -> Result<u64, IssueError> {
        let mut h = RequestHeader::new(Opcode::AtomicWrite8, 0);
        h.offset = offset;
        h.value = value;
        self.issue(h, &[], out)
    }

    /// LOG_CREATE of a log named `name` shaped like `config`.
    pub fn log_create(&mut self, name: &[u8], config: &LogConfig, out: &mut Vec<u8>) -> Result<u64, IssueError> {
        if name.is_empty() || name.len() > crate::proto::MAX_LOG_NAME_BYTES {
            return Err(IssueError::BadName(name.len()));
        }
        let (tail, blocks, stride) = match config.tail {
            TailStrategy::Naive => (0, 0, 0),
            TailStrategy::Rotating { blocks, stride } => (1, blocks, stride),
            TailStrategy::SelfValidating => (2, 0, 0),
        };
        let align = config.padding.align() as u32;
        let mut body = Vec::with_capacity(crate::proto::LOG_SPEC_BYTES + name.len());
        LogSpec { capacity: config.capacity, tail, blocks, stride, align, name }.encode(&mut body);
        self.issue(RequestHeader::new(Opcode::LogCreate, 0), &body, out)
    }

    /// LOG_OPEN by name.
    pub fn log_open(&mut self, name: &[u8], out: &mut Vec<u8>) -> Result<u64, IssueError> {
        if name.is_empty() || name.len() > crate::proto::MAX_LOG_NAME_BYTES {
            return Err(IssueError::BadName(name.len()));
        }
        self.issue(RequestHeader::new(Opcode::LogOpen, 0), name, out)
    }

    /// LOG_APPEND of `entry` to log `log`.
    pub fn log_append(&mut self, log: u64, entry: &[u8], out: &mut Vec<u8>) -> Result<u64, IssueError> {
        let mut h = RequestHeader::new(Opcode::LogAppend, 0);
        h.offset = log;
        self.issue(h, entry, out)
    }

    /// LOG_READ of entry `lsn` of log `log`.
    pub fn log_read(&mut self, log: u64, lsn: u64, out: &mut Vec<u8>) -> Result<u64, IssueError> {
        self.simple(Opcode::LogRead, log, lsn, out)
    }

    /// LOG_TRUNCATE of log `log` below `keep_from`.
    pub fn log_truncate(&mut self, log: u64, keep_from: u64, out: &mut Vec<u8>) -> Result<u64, IssueError> {
        self.simple(Opcode::LogTruncate, log, keep_from, out)
    }

    /// ECHO (`discard = false`) or DISCARD of `data`: the network floor.
    pub fn echo(&mut self, data: &[u8], discard: bool, out: &mut Vec<u8>) -> Result<u64, IssueError> {
        let opcode = if discard { Opcode::Discard } else { Opcode::Echo };
        self.issue(RequestHeader::new(opcode, 0), data, out)
    }

    /// Matches one response to its outstanding request and frees its slot.
    pub fn on_response<'a>(&mut self, msg: &'a [u8]) -> Result<Reply<'a>, ResponseError> {
        let response = decode_response(msg, MAX_PAYLOAD_BYTES)?;
        self.matched(response)
    }

    /// [`on_response`](ClientCore::on_response) for a response whose header
    /// and payload arrived apart.
    pub fn on_response_parts<'a>(&mut self, header: &[u8], payload: &'a [u8]) -> Result<Reply<'a>, ResponseError> {
        let response = decode_response_parts(header, payload, MAX_PAYLOAD_BYTES)?;
        self.matched(response)
    }

    fn matched<'a>(&mut self, response: crate::proto::Response<'a>) -> Result<Reply<'a>, ResponseError> {
        let h = response.header;
        let slot = (h.request_id & 0xffff) as usize;
        let outstanding = self.slots.get(slot).copied().flatten();
        let outstanding = outstanding.filter(|o| o.id == h.request_id).ok_or(ResponseError::Unknown(h.request_id))?;
        if h.opcode != outstanding.opcode as u8 {
            return Err(ResponseError::Opcode { expected: outstanding.opcode, got: h.opcode });
        }
        self.slots[slot] = None;
        self.free.push(slot as u32);
        let result = match h.status {
            Status::Ok => Ok(h.value),
            status => Err(RemoteError { status, detail: h.detail }),
        };
        if outstanding.opcode == Opcode::Hello && result.is_ok() {
            self.hello = Some(Hello::decode(response.payload).map_err(ResponseError::Hello)?);
        }
        Ok(Reply { request_id: h.request_id, opcode: outstanding.opcode, result, payload: response.payload })
    }

    /// Decides how to write `len` bytes at `offset` so that the write gives
    /// at least `required` (normally `Guarantee::Persistence`). `Auto`
    /// takes the method `auto` uses now for this size among those that
    /// give it (no probe: [`Client`] asks the selector itself).
    pub fn plan_write(
        &self,
        offset: u64,
        len: u64,
        method: Method,
        required: Guarantee,
        auto: Option<&AutoSelector>,
    ) -> Result<WritePlan, MethodError> {
        let hello = self.hello.as_ref().ok_or(MethodError::NotConnected)?;
        if offset.checked_add(len).is_none_or(|end| end > hello.data_bytes) {
            return Err(MethodError::OutOfBounds { offset, len, data_bytes: hello.data_bytes });
        }
        let rpc_fits = |m: Method| m.one_sided() || len <= hello.max_payload as u64;
        let method = match method {
            Method::Auto => {
                let allowed = |m: Method| hello.guarantee(m) >= required && rpc_fits(m);
                let chosen = auto.and_then(|a| a.current(len, allowed));
                chosen.ok_or(MethodError::NoCandidate { size: len, required })?
            }
            concrete => concrete,
        };
        let available = hello.guarantee(method);
        if available < required {
            return Err(MethodError::Weaker { method, required, available });
        }
        if !rpc_fits(method) {
            return Err(MethodError::TooLarge { len, max: hello.max_payload });
        }
        // `offset + len <= data_bytes` (above) and `remote_addr + data_bytes`
        // fits (checked when the HELLO was decoded).
        let remote_addr = method.one_sided().then(|| hello.remote_addr.checked_add(offset).expect("HELLO bounds the data area"));
        Ok(WritePlan { method, guarantee: available, remote_addr })
    }
}

#[cfg(test)]
mod tests;

mod net;
pub use net::{Client, ClientError, ClientOptions, WriteOutcome};
