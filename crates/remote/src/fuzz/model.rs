//! The fuzzer's model of a served pool: what every request must do,
//! predicted from the request's bytes and `docs/FORMAT.md` ("Wire protocol
//! and remote pool"), independently of the server's decoder.
//!
//! The model owns a mirror of the data area's bytes, the log directory and,
//! per log, its entries by LSN, its head (after truncation) and its tail
//! position. [`Model::predict`] turns one request (header and payload as the
//! server receives them, and the sender's rights) into an [`Expected`]
//! reply — status, value, detail and payload — and the [`Effect`] it has;
//! [`Model::apply`] carries the effect out on the model.
//!
//! Invariants:
//! - Checks run in the server's documented order (`server.rs` module docs,
//!   FORMAT.md "Decoding order"): decode (length, magic, header CRC,
//!   version, opcode, flags, payload length and limit, payload CRC, shape),
//!   region id, key, right, the required payload CRC, then the opcode's own
//!   checks (range, then alignment or the copy engine; the log's checks).
//! - Only an `Ok` prediction has an effect; a refused request changes
//!   nothing.
//! - Log placement follows FORMAT.md's wrap rule, sized with the log's own
//!   public [`LogConfig::entry_size`] and [`LogConfig::max_payload`]
//!   (padding is implementation-defined; the rule is not).

use std::collections::VecDeque;

use pmem::Padding;
use pmwire_log::{LogConfig, TailStrategy};

use crate::proto::{Status, MAX_LOG_NAME_BYTES, MAX_PAYLOAD_BYTES, REQUEST_MAGIC, RESPONSE_MAGIC, RIGHT_READ, RIGHT_WRITE};

/// Opcode codes (FORMAT.md request table).
pub(crate) mod op {
    pub const HELLO: u8 = 1;
    pub const PERSIST_WRITE: u8 = 2;
    pub const FLUSH: u8 = 3;
    pub const READ: u8 = 4;
    pub const ATOMIC_WRITE8: u8 = 5;
    pub const LOG_CREATE: u8 = 6;
    pub const LOG_OPEN: u8 = 7;
    pub const LOG_APPEND: u8 = 8;
    pub const LOG_READ: u8 = 9;
    pub const LOG_TRUNCATE: u8 = 10;
    pub const ECHO: u8 = 11;
    pub const DISCARD: u8 = 12;
    /// Names for reports, indexed by code (0 and unknown codes: "?").
    pub const NAMES: [&str; 13] = [
        "?", "HELLO", "PERSIST_WRITE", "FLUSH", "READ", "ATOMIC_WRITE8", "LOG_CREATE", "LOG_OPEN", "LOG_APPEND",
        "LOG_READ", "LOG_TRUNCATE", "ECHO", "DISCARD",
    ];

    /// The report name of `code`.
    pub fn name(code: u8) -> &'static str {
        NAMES.get(code as usize).copied().unwrap_or("?")
    }
}

/// Request flag bits (FORMAT.md).
pub(crate) const FLAG_CRC: u16 = 1;
pub(crate) const FLAG_OFFLOAD: u16 = 2;
/// Superblock magic, directory layout (FORMAT.md "Remote pool").
const POOL_MAGIC: &[u8; 8] = b"PMWRPOOL";
const SLOT_MAGIC: &[u8; 8] = b"PMWRLOGD";
/// Where the directory starts, and bytes per slot.
pub(crate) const DIR_BASE: u64 = 256;
pub(crate) const SLOT_BYTES: u64 = 128;
/// Logs start on this alignment in the log area.
const LOG_ALIGN: u64 = 256;
/// Bytes of an append log's header block (header line + head slots).
const LOG_HEADER_BYTES: u128 = 256;

pub(crate) fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The pool's fixed geometry, decoded from its superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// The region id clients present.
    pub region_id: u32,
    /// The access key clients present.
    pub key: u64,
    /// Bytes of the whole region.
    pub region_bytes: u64,
    /// Start of the log area.
    pub log_base: u64,
    /// Bytes of the log area.
    pub log_bytes: u64,
    /// Start of the data area.
    pub data_base: u64,
    /// Bytes of the data area.
    pub data_bytes: u64,
    /// Directory slots.
    pub dir_slots: u32,
}

impl Geometry {
    /// Decodes the superblock at the start of a region image (FORMAT.md
    /// "Superblock"); `None` if it is not a valid pool of this size.
    pub fn of(image: &[u8]) -> Option<Geometry> {
        if image.len() < 64 || &image[0..8] != POOL_MAGIC || crc32c::crc32c(&image[..60]) != le32(image, 60) {
            return None;
        }
        let (log_base, log_bytes, data_base) = (le64(image, 24), le64(image, 32), le64(image, 40));
        let fits = le32(image, 8) == 1 && log_base.checked_add(log_bytes) == Some(data_base) && data_base < image.len() as u64;
        fits.then(|| Geometry {
            region_id: le32(image, 12),
            key: le64(image, 16),
            region_bytes: image.len() as u64,
            log_base,
            log_bytes,
            data_base,
            data_bytes: image.len() as u64 - data_base,
            dir_slots: le32(image, 48),
        })
    }
}

/// What the server states about itself, fixed for a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Serving {
    /// Largest payload accepted.
    pub max_payload: u32,
    /// The server refuses payloads without `PAYLOAD_CRC`.
    pub require_payload_crc: bool,
    /// The server runs a copy engine (`OFFLOAD` is served).
    pub copy_engine: bool,
    /// HELLO bytes the model cannot derive (transport registration, region
    /// kind): taken from the first HELLO once its derivable bytes checked.
    pub pin: Option<HelloPin>,
}

/// The environment's part of a HELLO body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelloPin {
    /// Bytes 8..16: the data area's server address.
    pub remote_addr: u64,
    /// Byte 16: the region kind.
    pub kind: u8,
    /// Byte 17: the persistence domain.
    pub domain: u8,
    /// Bytes 26..29: the one-sided methods' guarantees.
    pub one_sided: [u8; 3],
    /// The packed rkey.
    pub rkey: Vec<u8>,
}

/// A refusal: the status and the reply's detail word.
pub type Refusal = (Status, u64);

/// What a request does to the pool when it succeeds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing changes.
    None,
    /// The request payload lands at this data offset.
    Write {
        /// Data-area offset.
        offset: u64,
    },
    /// One little-endian word lands at this data offset.
    Word {
        /// Data-area offset.
        offset: u64,
        /// The word.
        value: u64,
    },
    /// A new log, at the next directory slot.
    Create(NewLog),
    /// The request payload is appended to log `id` at logical `pos`.
    Append {
        /// The log id.
        id: u64,
        /// Logical position of the entry.
        pos: u64,
    },
    /// Log `id` drops every entry below `keep`.
    Truncate {
        /// The log id.
        id: u64,
        /// The first LSN kept.
        keep: u64,
    },
}

/// A log a LOG_CREATE makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewLog {
    /// Its name.
    pub name: Vec<u8>,
    /// Its shape.
    pub config: LogConfig,
    /// Where it starts in the region.
    pub base: u64,
    /// `AppendLog::required_size` of its shape.
    pub size: u64,
}

/// The reply a request must get, and what it does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    /// Response byte 5: the request's opcode byte (raw).
    pub opcode: u8,
    /// Response bytes 8..16.
    pub request_id: u64,
    /// The status.
    pub status: Status,
    /// The result word.
    pub value: u64,
    /// The detail word.
    pub detail: u64,
    /// The response payload.
    pub payload: Vec<u8>,
    /// The reply comes from the copy engine's completion (an offloaded write).
    pub deferred: bool,
    /// What the request does if the status is `Ok`.
    pub effect: Effect,
}

impl Expected {
    fn refused(opcode: u8, request_id: u64, (status, detail): Refusal) -> Expected {
        assert!(status != Status::Ok, "a refusal needs an error status");
        Expected {
            opcode,
            request_id,
            status,
            value: 0,
            detail,
            payload: Vec::new(),
            deferred: false,
            effect: Effect::None,
        }
    }

    /// The 48 response header bytes this reply must be (FORMAT.md
    /// "Response").
    pub fn header_bytes(&self) -> [u8; 48] {
        let (status, detail) = (self.status, self.detail);
        let ok = status == Status::Ok;
        let payload: &[u8] = if ok { &self.payload } else { &[] };
        let mut h = [0u8; 48];
        h[0..4].copy_from_slice(&RESPONSE_MAGIC.to_le_bytes());
        h[4] = 1;
        h[5] = self.opcode;
        h[6..8].copy_from_slice(&(status as u16).to_le_bytes());
        h[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        h[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        h[20..24].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
        h[24..32].copy_from_slice(&(if ok { self.value } else { 0 }).to_le_bytes());
        h[32..40].copy_from_slice(&detail.to_le_bytes());
        let crc = crc32c::crc32c(&h[..44]);
        h[44..48].copy_from_slice(&crc.to_le_bytes());
        h
    }
}

/// The fields of a request header that decoded.
#[derive(Clone, Copy, Debug)]
struct Fields {
    opcode: u8,
    flags: u16,
    request_id: u64,
    region_id: u32,
    key: u64,
    offset: u64,
    length: u64,
    value: u64,
}

/// What a successful request replies.
struct Done {
    value: u64,
    payload: Vec<u8>,
    effect: Effect,
    deferred: bool,
}

impl Done {
    fn value(value: u64) -> Done {
        Done { value, payload: Vec::new(), effect: Effect::None, deferred: false }
    }
}

/// One log as the model sees it. `entries[i]` is LSN `head + i`, with its
/// logical position and payload.
#[derive(Clone, Debug)]
pub struct ModelLog {
    /// Its name.
    pub name: Vec<u8>,
    /// Its shape.
    pub config: LogConfig,
    /// Where it starts in the region.
    pub base: u64,
    /// Its size in the log area.
    pub size: u64,
    /// LSN of the first retained entry.
    pub head: u64,
    /// Logical position of the head.
    pub head_pos: u64,
    /// Logical position after the last entry.
    pub tail_pos: u64,
    /// The retained entries: `(logical position, payload)`.
    pub entries: VecDeque<(u64, Vec<u8>)>,
}

impl ModelLog {
    /// LSN the next append gets.
    pub fn next_lsn(&self) -> u64 {
        self.head + self.entries.len() as u64
    }

    /// Entry-space bytes not holding retained entries.
    pub fn free_bytes(&self) -> u64 {
        self.config.capacity - (self.tail_pos - self.head_pos)
    }

    /// FORMAT.md's append rule: too large, full (with wrap waste), or the
    /// logical position of the new entry.
    fn place(&self, len: u64) -> Result<u64, Refusal> {
        let max = self.config.max_payload();
        if len > max {
            return Err((Status::EntryTooLarge, max));
        }
        let capacity = self.config.capacity;
        let size = self.config.entry_size(len);
        let phys = self.tail_pos % capacity;
        let waste = if phys + size > capacity { capacity - phys } else { 0 };
        let free = self.free_bytes();
        if waste + size > free {
            return Err((Status::LogFull, free));
        }
        Ok(self.tail_pos + waste)
    }

    fn entry(&self, lsn: u64) -> Option<&(u64, Vec<u8>)> {
        lsn.checked_sub(self.head).and_then(|i| usize::try_from(i).ok()).and_then(|i| self.entries.get(i))
    }
}

/// The model of one served pool (see the module docs).
#[derive(Clone, Debug)]
pub struct Model {
    /// The pool's geometry.
    pub geometry: Geometry,
    /// What the server states.
    pub serving: Serving,
    /// The data area's bytes.
    pub data: Vec<u8>,
    /// The logs, by id.
    pub logs: Vec<ModelLog>,
}

impl Model {
    /// A freshly formatted pool: zero data area, no logs.
    pub fn new(geometry: Geometry, serving: Serving) -> Model {
        assert!(geometry.data_bytes <= 1 << 32, "the model mirrors the data area in memory");
        assert!(serving.max_payload >= 1 && serving.max_payload <= MAX_PAYLOAD_BYTES, "max payload out of range");
        Model { geometry, serving, data: vec![0; geometry.data_bytes as usize], logs: Vec::new() }
    }

    /// The reply the server must give `header` + `payload` from a client
    /// holding `rights` (see the module docs for the order of checks).
    pub fn predict(&self, rights: u8, header: &[u8], payload: &[u8]) -> Expected {
        let echo_opcode = header.get(5).copied().unwrap_or(0);
        let echo_id = header.get(8..16).map_or(0, |b| le64(b, 0));
        let fields = match self.decode(header, payload) {
            Ok(fields) => fields,
            Err(refusal) => return Expected::refused(echo_opcode, echo_id, refusal),
        };
        if let Err(refusal) = self.admit(rights, &fields, payload) {
            return Expected::refused(fields.opcode, fields.request_id, refusal);
        }
        match self.execute(rights, &fields, payload) {
            Ok(done) => Expected {
                opcode: fields.opcode,
                request_id: fields.request_id,
                status: Status::Ok,
                value: done.value,
                detail: 0,
                payload: done.payload,
                deferred: done.deferred,
                effect: done.effect,
            },
            Err(refusal) => Expected::refused(fields.opcode, fields.request_id, refusal),
        }
    }

    /// Carries out an `Ok` prediction's effect (`payload` is the request's).
    pub fn apply(&mut self, expected: &Expected, payload: &[u8]) {
        assert!(expected.status == Status::Ok || expected.effect == Effect::None, "a refusal has no effect");
        match &expected.effect {
            Effect::None => {}
            Effect::Write { offset } => {
                let at = *offset as usize;
                self.data[at..at + payload.len()].copy_from_slice(payload);
            }
            Effect::Word { offset, value } => {
                let at = *offset as usize;
                self.data[at..at + 8].copy_from_slice(&value.to_le_bytes());
            }
            Effect::Create(new) => self.logs.push(ModelLog {
                name: new.name.clone(),
                config: new.config,
                base: new.base,
                size: new.size,
                head: 0,
                head_pos: 0,
                tail_pos: 0,
                entries: VecDeque::new(),
            }),
            Effect::Append { id, pos } => {
                let log = &mut self.logs[*id as usize];
                log.tail_pos = pos + log.config.entry_size(payload.len() as u64);
                log.entries.push_back((*pos, payload.to_vec()));
                assert!(log.tail_pos - log.head_pos <= log.config.capacity, "model log over its capacity");
            }
            Effect::Truncate { id, keep } => {
                let log = &mut self.logs[*id as usize];
                while log.head < *keep {
                    log.entries.pop_front().expect("keep is at most next_lsn");
                    log.head += 1;
                }
                log.head_pos = log.entries.front().map_or(log.tail_pos, |e| e.0);
            }
        }
    }

    /// The id of the log named `name`.
    pub fn find(&self, name: &[u8]) -> Option<u64> {
        self.logs.iter().position(|l| l.name == name).map(|i| i as u64)
    }

    /// Length, magic, header CRC, version, opcode, flags, payload length
    /// and limit, payload CRC, shape (FORMAT.md "Decoding order").
    fn decode(&self, h: &[u8], payload: &[u8]) -> Result<Fields, Refusal> {
        let limit = self.serving.max_payload.min(MAX_PAYLOAD_BYTES) as u64;
        if h.len() != 64 || le32(h, 0) != REQUEST_MAGIC {
            return Err((Status::Malformed, 0));
        }
        if crc32c::crc32c(&h[..60]) != le32(h, 60) {
            return Err((Status::BadChecksum, 0));
        }
        if h[4] != 1 {
            return Err((Status::BadVersion, 0));
        }
        let (opcode, flags) = (h[5], le16(h, 6));
        let bad_flags = flags & !(FLAG_CRC | FLAG_OFFLOAD) != 0 || (flags & FLAG_OFFLOAD != 0 && opcode != op::PERSIST_WRITE);
        if !(op::HELLO..=op::DISCARD).contains(&opcode) || bad_flags {
            return Err((Status::UnknownOpcode, 0));
        }
        let declared = le32(h, 20) as u64;
        if declared > limit {
            return Err((Status::TooLarge, limit));
        }
        if payload.len() as u64 != declared {
            return Err((Status::Malformed, 0));
        }
        if flags & FLAG_CRC != 0 && crc32c::crc32c(payload) != le32(h, 56) {
            return Err((Status::BadChecksum, 0));
        }
        let fields = Fields {
            opcode,
            flags,
            request_id: le64(h, 8),
            region_id: le32(h, 16),
            key: le64(h, 24),
            offset: le64(h, 32),
            length: le64(h, 40),
            value: le64(h, 48),
        };
        self.check_shape(&fields, payload, limit).map(|()| fields)
    }

    /// Which opcodes carry a payload, and how long (FORMAT.md tables).
    fn check_shape(&self, f: &Fields, payload: &[u8], limit: u64) -> Result<(), Refusal> {
        let malformed = Err((Status::Malformed, 0));
        let len = payload.len();
        match f.opcode {
            op::HELLO | op::FLUSH | op::ATOMIC_WRITE8 | op::LOG_READ | op::LOG_TRUNCATE | op::READ if len != 0 => malformed,
            op::READ if f.length > limit => Err((Status::TooLarge, self.serving.max_payload as u64)),
            op::PERSIST_WRITE if f.length != len as u64 => malformed,
            op::LOG_OPEN if len == 0 || len > MAX_LOG_NAME_BYTES => malformed,
            op::LOG_CREATE if LogSpecBody::parse(payload).is_none() => malformed,
            _ => Ok(()),
        }
    }

    /// Region id, key, the client's right, the required payload CRC.
    fn admit(&self, rights: u8, f: &Fields, payload: &[u8]) -> Result<(), Refusal> {
        if f.region_id != self.geometry.region_id {
            return Err((Status::UnknownRegion, 0));
        }
        if f.key != self.geometry.key {
            return Err((Status::BadKey, 0));
        }
        let needed = match f.opcode {
            op::HELLO | op::ECHO | op::DISCARD => 0,
            op::PERSIST_WRITE | op::FLUSH | op::ATOMIC_WRITE8 | op::LOG_CREATE | op::LOG_APPEND | op::LOG_TRUNCATE => RIGHT_WRITE,
            _ => RIGHT_READ,
        };
        if rights & needed != needed {
            return Err((Status::Forbidden, rights as u64));
        }
        if self.serving.require_payload_crc && !payload.is_empty() && f.flags & FLAG_CRC == 0 {
            return Err((Status::BadChecksum, 1));
        }
        Ok(())
    }

    fn execute(&self, rights: u8, f: &Fields, payload: &[u8]) -> Result<Done, Refusal> {
        match f.opcode {
            op::HELLO => Ok(Done { payload: self.hello_body(rights), ..Done::value(0) }),
            op::PERSIST_WRITE => {
                self.range(f.offset, payload.len() as u64)?;
                let offload = f.flags & FLAG_OFFLOAD != 0;
                if offload && !self.serving.copy_engine {
                    return Err((Status::Unsupported, 0));
                }
                Ok(Done { effect: Effect::Write { offset: f.offset }, deferred: offload, ..Done::value(payload.len() as u64) })
            }
            op::FLUSH => self.range(f.offset, f.length).map(|()| Done::value(f.length)),
            op::READ => {
                self.range(f.offset, f.length)?;
                let bytes = self.data[f.offset as usize..(f.offset + f.length) as usize].to_vec();
                Ok(Done { payload: bytes, ..Done::value(f.length) })
            }
            op::ATOMIC_WRITE8 => {
                self.range(f.offset, 8)?;
                if !f.offset.is_multiple_of(8) {
                    return Err((Status::Misaligned, 0));
                }
                Ok(Done { effect: Effect::Word { offset: f.offset, value: f.value }, ..Done::value(8) })
            }
            op::LOG_CREATE => self.log_create(payload),
            op::LOG_OPEN => self.find(payload).map(Done::value).ok_or((Status::UnknownLog, 0)),
            op::LOG_APPEND => {
                let pos = self.log(f.offset)?.place(payload.len() as u64)?;
                Ok(Done { effect: Effect::Append { id: f.offset, pos }, ..Done::value(self.log(f.offset)?.next_lsn()) })
            }
            op::LOG_READ => self.log_read(f),
            op::LOG_TRUNCATE => self.log_truncate(f),
            op::ECHO => Ok(Done { payload: payload.to_vec(), ..Done::value(0) }),
            _ => Ok(Done::value(0)),
        }
    }

    /// `[offset, offset + len)` inside the data area (overflow-safe).
    fn range(&self, offset: u64, len: u64) -> Result<(), Refusal> {
        match offset.checked_add(len) {
            Some(end) if end <= self.geometry.data_bytes => Ok(()),
            _ => Err((Status::OutOfBounds, self.geometry.data_bytes)),
        }
    }

    fn log(&self, id: u64) -> Result<&ModelLog, Refusal> {
        usize::try_from(id).ok().and_then(|i| self.logs.get(i)).ok_or((Status::UnknownLog, 0))
    }

    fn log_read(&self, f: &Fields) -> Result<Done, Refusal> {
        let entry = self.log(f.offset)?.entry(f.length).ok_or((Status::NoEntry, 0))?;
        if entry.1.len() as u64 > self.serving.max_payload as u64 {
            return Err((Status::TooLarge, self.serving.max_payload as u64));
        }
        Ok(Done { payload: entry.1.clone(), ..Done::value(f.length) })
    }

    fn log_truncate(&self, f: &Fields) -> Result<Done, Refusal> {
        let log = self.log(f.offset)?;
        if f.length > log.next_lsn() {
            return Err((Status::NoEntry, 0));
        }
        let effect = if f.length > log.head { Effect::Truncate { id: f.offset, keep: f.length } } else { Effect::None };
        Ok(Done { effect, ..Done::value(f.length) })
    }

    /// Spec codes and the log's bounds (`LogConfig::validate`, as the
    /// server's `log_config_from_codes` calls it), name taken, directory
    /// full, room in the log area (FORMAT.md "create_log" step 1, in
    /// `Pool::create_log`'s order).
    fn log_create(&self, payload: &[u8]) -> Result<Done, Refusal> {
        let spec = LogSpecBody::parse(payload).expect("shape checked");
        let config = spec.config().ok_or((Status::BadLogConfig, 0))?;
        config.validate().map_err(|_| (Status::BadLogConfig, 0))?;
        if self.find(spec.name).is_some() {
            return Err((Status::LogExists, 0));
        }
        if self.logs.len() as u64 >= self.geometry.dir_slots as u64 {
            return Err((Status::NoSpace, 0));
        }
        let base = self.next_free();
        let area_end = self.geometry.log_base + self.geometry.log_bytes;
        let size = required_size(&config);
        if base as u128 + size > area_end as u128 {
            return Err((Status::NoSpace, area_end.saturating_sub(base)));
        }
        let new = NewLog { name: spec.name.to_vec(), config, base, size: size as u64 };
        Ok(Done { effect: Effect::Create(new), ..Done::value(self.logs.len() as u64) })
    }

    /// Where the next log starts: the end of the highest log, 256 B aligned.
    fn next_free(&self) -> u64 {
        let end = self.logs.iter().map(|l| l.base + l.size).max().unwrap_or(self.geometry.log_base);
        end.next_multiple_of(LOG_ALIGN)
    }

    /// The HELLO body for a client with `rights` (FORMAT.md "Bodies").
    pub fn hello_body(&self, rights: u8) -> Vec<u8> {
        let pin = self.serving.pin.clone().unwrap_or(HelloPin { remote_addr: 0, kind: 0, domain: 0, one_sided: [0; 3], rkey: Vec::new() });
        let mut b = vec![0u8; 40];
        b[0..8].copy_from_slice(&self.geometry.data_bytes.to_le_bytes());
        b[8..16].copy_from_slice(&pin.remote_addr.to_le_bytes());
        (b[16], b[17], b[18], b[19]) = (pin.kind, pin.domain, rights, self.serving.require_payload_crc as u8);
        b[20..24].copy_from_slice(&self.serving.max_payload.to_le_bytes());
        b[24] = 2; // Rpc: persistence
        b[25] = if self.serving.copy_engine { 2 } else { 0 };
        b[26..29].copy_from_slice(&pin.one_sided);
        b[32..36].copy_from_slice(&(pin.rkey.len() as u32).to_le_bytes());
        b.extend_from_slice(&pin.rkey);
        b
    }

    /// The bytes of directory slot `id` for a valid log (FORMAT.md
    /// "Directory slot").
    pub fn slot_bytes(log: &ModelLog) -> [u8; SLOT_BYTES as usize] {
        let mut b = [0u8; SLOT_BYTES as usize];
        let (code, blocks, stride) = tail_codes(log.config.tail);
        b[0..8].copy_from_slice(SLOT_MAGIC);
        b[8..16].copy_from_slice(&log.base.to_le_bytes());
        b[16..24].copy_from_slice(&log.size.to_le_bytes());
        b[24..32].copy_from_slice(&log.config.capacity.to_le_bytes());
        b[32..36].copy_from_slice(&code.to_le_bytes());
        b[36..40].copy_from_slice(&blocks.to_le_bytes());
        b[40..44].copy_from_slice(&stride.to_le_bytes());
        b[44..48].copy_from_slice(&(log.config.padding.align() as u32).to_le_bytes());
        b[48..52].copy_from_slice(&(log.name.len() as u32).to_le_bytes());
        b[56..56 + log.name.len()].copy_from_slice(&log.name);
        let crc = crc32c::crc32c(&b[..124]);
        b[124..128].copy_from_slice(&crc.to_le_bytes());
        b
    }
}

fn tail_codes(tail: TailStrategy) -> (u32, u32, u32) {
    match tail {
        TailStrategy::Naive => (0, 0, 0),
        TailStrategy::Rotating { blocks, stride } => (1, blocks, stride),
        TailStrategy::SelfValidating => (2, 0, 0),
    }
}

/// FORMAT.md: `required_size = 256 + tail area + capacity`, in u128 so a
/// hostile capacity cannot overflow the model.
pub(crate) fn required_size(config: &LogConfig) -> u128 {
    let tail = match config.tail {
        TailStrategy::Naive => 256,
        TailStrategy::Rotating { blocks, stride } => ((blocks.max(1) as u128 - 1) * stride as u128 + 8).div_ceil(256) * 256,
        TailStrategy::SelfValidating => 0,
    };
    LOG_HEADER_BYTES + tail + config.capacity as u128
}

/// A LOG_CREATE body (FORMAT.md "Log spec"), parsed by the model.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LogSpecBody<'a> {
    pub capacity: u64,
    pub tail: u32,
    pub blocks: u32,
    pub stride: u32,
    pub align: u32,
    pub name: &'a [u8],
}

impl<'a> LogSpecBody<'a> {
    /// Structure only: 32 B + a 1..=64 B name, reserved word zero.
    pub fn parse(body: &'a [u8]) -> Option<LogSpecBody<'a>> {
        if body.len() < 32 {
            return None;
        }
        let name_len = le32(body, 24) as usize;
        let fits = (1..=MAX_LOG_NAME_BYTES).contains(&name_len) && body.len() == 32 + name_len && le32(body, 28) == 0;
        fits.then(|| LogSpecBody {
            capacity: le64(body, 0),
            tail: le32(body, 8),
            blocks: le32(body, 12),
            stride: le32(body, 16),
            align: le32(body, 20),
            name: &body[32..],
        })
    }

    /// The body bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 32];
        b[0..8].copy_from_slice(&self.capacity.to_le_bytes());
        b[8..12].copy_from_slice(&self.tail.to_le_bytes());
        b[12..16].copy_from_slice(&self.blocks.to_le_bytes());
        b[16..20].copy_from_slice(&self.stride.to_le_bytes());
        b[20..24].copy_from_slice(&self.align.to_le_bytes());
        b[24..28].copy_from_slice(&(self.name.len() as u32).to_le_bytes());
        b.extend_from_slice(self.name);
        b
    }

    /// The log's shape if the codes are valid (pmwire-log's config rules:
    /// tail 0..=2, blocks and stride only for rotating — at least one block,
    /// a stride that is a positive multiple of 8 —, alignment 8, 64 or 256,
    /// a capacity that is a multiple of it and at least one 16 B header).
    pub fn config(&self) -> Option<LogConfig> {
        let tail = match self.tail {
            0 => TailStrategy::Naive,
            1 => TailStrategy::Rotating { blocks: self.blocks, stride: self.stride },
            2 => TailStrategy::SelfValidating,
            _ => return None,
        };
        let rotating = self.tail == 1;
        if (!rotating && (self.blocks != 0 || self.stride != 0)) || (rotating && (self.blocks == 0 || self.stride == 0 || !self.stride.is_multiple_of(8))) {
            return None;
        }
        let padding = match self.align {
            8 => Padding::None,
            64 => Padding::Line,
            256 => Padding::XpLine,
            _ => return None,
        };
        let align = self.align as u64;
        if self.capacity < align.max(16) || !self.capacity.is_multiple_of(align) {
            return None;
        }
        Some(LogConfig::new(self.capacity, tail).with_padding(padding))
    }
}
