//! The request generator: seeded, mostly *structured* requests of every
//! opcode aimed at the interesting edges of the model's current state (the
//! data area's ends, u64::MAX, each log's head and tail, names that exist),
//! a share of them then *mutated* as bytes (bit flips with and without a
//! resealed header CRC, truncation, extension, wrong checksums, unknown
//! opcode, flags and version, the header/payload split moved).
//!
//! Invariants:
//! - Everything is drawn from one `Xoshiro256PlusPlus` seeded by the run's
//!   seed: the same seed and the same replies give the same requests.
//! - Bounded: a header is at most [`MAX_HEADER_BYTES`] (the transport's
//!   limit), a payload at most `MAX_PAYLOAD_BYTES + 64`.
//! - The generator never consults the server; it reads the model only to
//!   aim (which logs exist, their heads and tails).

use std::fmt;

use rand::{Rng, RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::model::{op, LogSpecBody, Model, FLAG_CRC, FLAG_OFFLOAD};
use crate::proto::{MAX_LOG_NAME_BYTES, MAX_PAYLOAD_BYTES, REQUEST_MAGIC};

/// Longest request header generated (`transport::Limits::default().max_header_bytes`).
pub const MAX_HEADER_BYTES: usize = 128;

/// The canary the generator may aim at but the driver protects.
#[derive(Clone, Copy, Debug)]
pub struct Aim {
    /// Data-area offset of the canary bytes.
    pub canary_offset: u64,
    /// Their length.
    pub canary_len: u64,
}

/// One mutation of an encoded request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Flip header bit `bit`; `reseal` recomputes the header CRC.
    HeaderBit { bit: u16, reseal: bool },
    /// Flip payload bit `bit`.
    PayloadBit { bit: u32 },
    /// Cut the payload to `len` bytes.
    CutPayload { len: u32 },
    /// Append `by` bytes to the payload.
    ExtendPayload { by: u32 },
    /// Set `payload_len` (resealed).
    PayloadLen { value: u32 },
    /// Set the payload CRC field (resealed).
    PayloadCrc { value: u32 },
    /// Cut or extend the header to `len` bytes.
    HeaderLen { len: u8 },
    /// Move `by` bytes across the header/payload boundary (negative: into the payload).
    Resplit { by: i16 },
    /// Set the opcode byte (resealed).
    Opcode { code: u8 },
    /// Set the flags (resealed).
    Flags { flags: u16 },
    /// Set the version byte (resealed).
    Version { version: u8 },
    /// Garble the magic.
    Magic,
    /// Replace the header with `len` random bytes.
    Garbage { len: u8 },
}

/// A generated request: the bytes as sent, and how they were made.
#[derive(Clone, Debug)]
pub struct Request {
    /// The header bytes (64 unless mutated).
    pub header: Vec<u8>,
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// The structured opcode before mutation.
    pub opcode: u8,
    /// The mutations applied, in order.
    pub mutations: Vec<Mutation>,
}

impl Request {
    /// Rejoins header and payload and splits them after 64 bytes, as
    /// `Server::handle` does with one contiguous message.
    pub fn join(&mut self) {
        if self.header.len() != 64 {
            let mut msg = std::mem::take(&mut self.header);
            msg.append(&mut self.payload);
            self.payload = msg.split_off(msg.len().min(64));
            self.header = msg;
        }
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = &self.header;
        write!(f, "{} (generated as {})", op::name(h.get(5).copied().unwrap_or(0)), op::name(self.opcode))?;
        if h.len() >= 64 {
            let field = |at| super::model::le64(h, at);
            write!(f, " flags={:#x} id={} region={} key={:#x}", super::model::le16(h, 6), field(8), super::model::le32(h, 16), field(24))?;
            write!(f, " offset={:#x} length={:#x} value={:#x} payload_len={}", field(32), field(40), field(48), super::model::le32(h, 20))?;
        }
        write!(f, "; header {} B, payload {} B; mutations {:?}", h.len(), self.payload.len(), self.mutations)?;
        let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
        write!(f, "\n    header bytes: {hex}")?;
        let head: String = self.payload.iter().take(48).map(|b| format!("{b:02x}")).collect();
        write!(f, "\n    payload bytes (first 48): {head}")
    }
}

/// The structured fields of a request before encoding.
#[derive(Clone, Debug, Default)]
struct Fields {
    opcode: u8,
    flags: u16,
    request_id: u64,
    region_id: u32,
    key: u64,
    offset: u64,
    length: u64,
    value: u64,
    payload: Vec<u8>,
}

/// The seeded generator (see the module docs).
pub struct Generator {
    rng: Xoshiro256PlusPlus,
    next_id: u64,
    aim: Aim,
}

impl Generator {
    /// A generator drawing from `seed`.
    pub fn new(seed: u64, aim: Aim) -> Generator {
        Generator { rng: Xoshiro256PlusPlus::seed_from_u64(seed), next_id: 1, aim }
    }

    /// A uniform draw below `n` (for the drivers' own choices).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "a draw below zero");
        self.rng.gen_range(0..n)
    }

    /// A structured request with the payload CRC and nothing mutated.
    pub fn build(&mut self, opcode: u8, region_id: u32, key: u64, offset: u64, length: u64, payload: Vec<u8>) -> Request {
        self.next_id += 1;
        let f = Fields { opcode, flags: FLAG_CRC, request_id: self.next_id, region_id, key, offset, length, value: 0, payload };
        Request { header: encode(&f), payload: f.payload, opcode, mutations: Vec::new() }
    }

    /// The next request: structured, and mutated one time in five.
    pub fn next(&mut self, model: &Model) -> Request {
        let mut fields = self.structured(model);
        let opcode = fields.opcode;
        let mut header = encode(&fields);
        let mut payload = std::mem::take(&mut fields.payload);
        let mut mutations = Vec::new();
        if self.rng.gen_ratio(1, 5) {
            for _ in 0..self.rng.gen_range(1..=3) {
                let m = self.mutation(&header, &payload);
                mutate(&mut header, &mut payload, m, &mut self.rng);
                mutations.push(m);
            }
        }
        assert!(header.len() <= MAX_HEADER_BYTES, "header of {} B", header.len());
        Request { header, payload, opcode, mutations }
    }

    /// A structured request: the right credentials nineteen times in twenty.
    fn structured(&mut self, model: &Model) -> Fields {
        let opcode = self.opcode();
        let g = model.geometry;
        self.next_id += 1;
        let request_id = if self.rng.gen_ratio(1, 20) { self.rng.gen() } else { self.next_id };
        let mut f = Fields { opcode, request_id, region_id: g.region_id, key: g.key, ..Fields::default() };
        match self.rng.gen_range(0..40) {
            0 => f.key ^= self.rng.gen_range(1..=u64::MAX),
            1 => f.region_id ^= self.rng.gen_range(1..=u32::MAX),
            _ => {}
        }
        if self.rng.gen_ratio(3, 4) {
            f.flags |= FLAG_CRC;
        }
        self.fill(model, &mut f);
        f
    }

    fn opcode(&mut self) -> u8 {
        const WEIGHTS: [(u8, u32); 12] = [
            (op::PERSIST_WRITE, 18),
            (op::READ, 14),
            (op::ATOMIC_WRITE8, 8),
            (op::FLUSH, 5),
            (op::HELLO, 2),
            (op::LOG_CREATE, 6),
            (op::LOG_OPEN, 4),
            (op::LOG_APPEND, 16),
            (op::LOG_READ, 10),
            (op::LOG_TRUNCATE, 7),
            (op::ECHO, 3),
            (op::DISCARD, 2),
        ];
        let total: u32 = WEIGHTS.iter().map(|w| w.1).sum();
        let mut pick = self.rng.gen_range(0..total);
        for (code, weight) in WEIGHTS {
            if pick < weight {
                return code;
            }
            pick -= weight;
        }
        unreachable!("weights cover the draw")
    }

    fn fill(&mut self, model: &Model, f: &mut Fields) {
        let data_bytes = model.geometry.data_bytes;
        match f.opcode {
            op::PERSIST_WRITE => {
                f.payload = self.payload(model.serving.max_payload);
                f.offset = self.data_offset(f.payload.len() as u64, data_bytes);
                f.length = self.maybe_off(f.payload.len() as u64);
                if self.rng.gen_ratio(2, 5) {
                    f.flags |= FLAG_OFFLOAD;
                }
            }
            op::READ => {
                f.length = self.read_len(model.serving.max_payload);
                f.offset = self.data_offset(f.length, data_bytes);
                self.stray_payload(f);
            }
            op::FLUSH => {
                f.length = if self.rng.gen_ratio(1, 10) { self.edge_u64() } else { self.rng.gen_range(0..=65_536) };
                f.offset = self.data_offset(f.length, data_bytes);
                self.stray_payload(f);
            }
            op::ATOMIC_WRITE8 => {
                f.offset = self.data_offset(8, data_bytes);
                if self.rng.gen_ratio(6, 7) {
                    f.offset &= !7;
                }
                f.value = self.rng.gen();
                self.stray_payload(f);
            }
            op::LOG_CREATE => f.payload = self.log_spec(model),
            op::LOG_OPEN => f.payload = self.log_name(model, true),
            op::LOG_APPEND | op::LOG_READ | op::LOG_TRUNCATE => self.log_op(model, f),
            op::ECHO | op::DISCARD => f.payload = self.payload(model.serving.max_payload),
            _ => self.stray_payload(f),
        }
    }

    /// One time in fifty, a payload on an opcode that takes none.
    fn stray_payload(&mut self, f: &mut Fields) {
        if self.rng.gen_ratio(1, 50) {
            let len = self.rng.gen_range(1..=64);
            f.payload = self.bytes(len);
        }
    }

    /// `len`, or (one time in twenty) a little off.
    fn maybe_off(&mut self, len: u64) -> u64 {
        match self.rng.gen_range(0..40) {
            0 => len.wrapping_add(1),
            1 => len.wrapping_sub(1),
            _ => len,
        }
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.rng.fill_bytes(&mut v);
        v
    }

    /// A payload length: mostly small, sometimes up to and past the limit.
    fn payload(&mut self, max_payload: u32) -> Vec<u8> {
        let max = max_payload as usize;
        let len = match self.rng.gen_range(0..100) {
            0..=59 => self.rng.gen_range(0..=64),
            60..=84 => self.rng.gen_range(65..=4096),
            85..=94 => self.rng.gen_range(4097..=65_536.min(max)),
            95..=98 => self.rng.gen_range(0..=max),
            _ => self.rng.gen_range(max..=MAX_PAYLOAD_BYTES as usize + 64),
        };
        self.bytes(len)
    }

    fn read_len(&mut self, max_payload: u32) -> u64 {
        let max = max_payload as u64;
        match self.rng.gen_range(0..100) {
            0..=59 => self.rng.gen_range(0..=512),
            60..=84 => self.rng.gen_range(513..=8192),
            85..=92 => self.rng.gen_range(0..=max),
            93..=96 => max + self.rng.gen_range(0..=2),
            _ => self.edge_u64(),
        }
    }

    /// A value near the u64 edges.
    fn edge_u64(&mut self) -> u64 {
        match self.rng.gen_range(0..4) {
            0 => u64::MAX - self.rng.gen_range(0..=16),
            1 => (1u64 << self.rng.gen_range(32..64)).wrapping_add(self.rng.gen_range(0..=8)).wrapping_sub(4),
            2 => self.rng.gen(),
            _ => u64::MAX / 2 + self.rng.gen_range(0..=8),
        }
    }

    /// A data offset for `len` bytes: inside, at the edges, past them.
    fn data_offset(&mut self, len: u64, data_bytes: u64) -> u64 {
        let room = data_bytes.saturating_sub(len);
        match self.rng.gen_range(0..100) {
            0..=49 => self.rng.gen_range(0..=room),
            50..=64 => room.wrapping_add(self.rng.gen_range(0..=16)).wrapping_sub(8),
            65..=74 => self.rng.gen_range(0..=256),
            75..=79 => self.edge_u64(),
            80..=89 => {
                let inside = self.rng.gen_range(0..self.aim.canary_len) as i64;
                let canary = self.aim.canary_offset as i64 + inside + self.rng.gen_range(-64..=64);
                (canary.max(0) as u64).wrapping_sub(self.rng.gen_range(0..=len.min(4096)))
            }
            90..=94 => data_bytes,
            _ => self.rng.gen_range(0..=data_bytes) & !63,
        }
    }

    /// A log id: an existing one mostly, else one that is not.
    fn log_id(&mut self, model: &Model) -> u64 {
        let n = model.logs.len() as u64;
        if n > 0 && self.rng.gen_ratio(4, 5) {
            return self.rng.gen_range(0..n);
        }
        match self.rng.gen_range(0..6) {
            0 => n,
            1 => model.geometry.dir_slots as u64,
            2 => u32::MAX as u64,
            3 => 1 << 32,
            4 => u64::MAX,
            _ => self.rng.gen(),
        }
    }

    fn log_op(&mut self, model: &Model, f: &mut Fields) {
        f.offset = self.log_id(model);
        let log = usize::try_from(f.offset).ok().and_then(|i| model.logs.get(i));
        let (head, next, max) = log.map_or((0, 0, 4096), |l| (l.head, l.next_lsn(), l.config.max_payload()));
        match f.opcode {
            op::LOG_APPEND => {
                let len = match self.rng.gen_range(0..20) {
                    0..=13 => self.rng.gen_range(0..=128),
                    14..=17 => self.rng.gen_range(0..=max.min(65_536)),
                    18 => max + self.rng.gen_range(0..=1),
                    _ => self.rng.gen_range(0..=model.serving.max_payload as u64),
                };
                f.payload = self.bytes(len.min(MAX_PAYLOAD_BYTES as u64) as usize);
            }
            _ => {
                f.length = self.lsn(head, next);
                self.stray_payload(f);
            }
        }
    }

    /// An LSN around a log's head and tail.
    fn lsn(&mut self, head: u64, next: u64) -> u64 {
        match self.rng.gen_range(0..12) {
            0 => head.wrapping_sub(1),
            1 => head,
            2..=5 => self.rng.gen_range(head..=next),
            6 => next.saturating_sub(1),
            7 | 8 => next,
            9 => next + 1,
            10 => self.rng.gen_range(0..=next + 4),
            _ => self.edge_u64(),
        }
    }

    /// A log name: one that exists, one from a small pool (so creates
    /// collide), or random bytes; for LOG_OPEN sometimes a bad length.
    fn log_name(&mut self, model: &Model, open: bool) -> Vec<u8> {
        match self.rng.gen_range(0..20) {
            0..=7 if !model.logs.is_empty() => model.logs[self.rng.gen_range(0..model.logs.len())].name.clone(),
            0..=13 => format!("log-{}", self.rng.gen_range(0..24)).into_bytes(),
            14..=17 => {
                let len = self.rng.gen_range(1..=MAX_LOG_NAME_BYTES);
                self.bytes(len)
            }
            _ if open => {
                let len = if self.rng.gen() { 0 } else { MAX_LOG_NAME_BYTES + 1 };
                self.bytes(len)
            }
            _ => b"canary".to_vec(),
        }
    }

    /// A LOG_CREATE body: valid shapes mostly, hostile ones, malformed ones.
    fn log_spec(&mut self, model: &Model) -> Vec<u8> {
        let name = self.log_name(model, false);
        let align = [8u32, 64, 256, 8, 64, 256, 128, 0][self.rng.gen_range(0..8)];
        let tail = [0u32, 1, 2, 0, 1, 2, 0, 1, 2, 3][self.rng.gen_range(0..10)];
        let (mut blocks, mut stride) = if tail == 1 { (self.rng.gen_range(1..=16), 8 * self.rng.gen_range(1..=64)) } else { (0, 0) };
        match self.rng.gen_range(0..20) {
            0 => blocks = self.rng.gen(),
            1 => stride = self.rng.gen_range(0..=1025),
            2 => (blocks, stride) = (self.rng.gen(), self.rng.gen::<u32>() & !7),
            _ => {}
        }
        let capacity = self.capacity(align.max(8) as u64);
        let body = LogSpecBody { capacity, tail, blocks, stride, align, name: &name }.encode();
        self.malform_spec(body)
    }

    fn capacity(&mut self, align: u64) -> u64 {
        match self.rng.gen_range(0..40) {
            0..=15 => align * self.rng.gen_range(1..=64),
            16..=27 => align * self.rng.gen_range(1..=65_536 / align),
            28..=31 => self.rng.gen_range(0..=4096),
            32..=34 => (1 << self.rng.gen_range(20..63)) & !(align - 1),
            35..=36 => (u64::MAX / 2) & !(align - 1),
            37 | 38 => (u64::MAX - self.rng.gen_range(0..=600)) & !(align - 1),
            _ => align * self.rng.gen_range(1..=512),
        }
    }

    /// One time in twelve, a body the decoder must refuse.
    fn malform_spec(&mut self, mut body: Vec<u8>) -> Vec<u8> {
        match self.rng.gen_range(0..36) {
            0 => body[28] = 1,
            1 => body.truncate(self.rng.gen_range(0..body.len())),
            2 => body.push(0),
            _ => {}
        }
        body
    }

    fn mutation(&mut self, header: &[u8], payload: &[u8]) -> Mutation {
        let r = &mut self.rng;
        let header_bits = (header.len() * 8).max(1) as u16;
        let payload_bits = (payload.len() * 8).max(1) as u32;
        match r.gen_range(0..13) {
            0 => Mutation::HeaderBit { bit: r.gen_range(0..header_bits), reseal: false },
            1 | 2 => Mutation::HeaderBit { bit: r.gen_range(0..header_bits.min(480)), reseal: true },
            3 => Mutation::PayloadBit { bit: r.gen_range(0..payload_bits) },
            4 => Mutation::CutPayload { len: r.gen_range(0..=payload.len() as u32) },
            5 => Mutation::ExtendPayload { by: r.gen_range(1..=64) },
            6 => Mutation::PayloadLen { value: if r.gen() { r.gen() } else { (payload.len() as u32).wrapping_add(r.gen_range(0..3)).wrapping_sub(1) } },
            7 => Mutation::PayloadCrc { value: r.gen() },
            8 => Mutation::HeaderLen { len: r.gen_range(0..=MAX_HEADER_BYTES as u8) },
            9 => Mutation::Resplit { by: r.gen_range(-64..=64) },
            10 => Mutation::Opcode { code: if r.gen() { 0 } else { r.gen_range(13..=255) } },
            11 => match r.gen_range(0..3) {
                0 => Mutation::Flags { flags: r.gen::<u16>() | 4 },
                1 => Mutation::Flags { flags: FLAG_OFFLOAD | FLAG_CRC },
                _ => Mutation::Version { version: r.gen_range(2..=255) },
            },
            _ => if r.gen() { Mutation::Magic } else { Mutation::Garbage { len: r.gen_range(0..=MAX_HEADER_BYTES as u8) } },
        }
    }
}

/// The 64 header bytes of `f` (FORMAT.md "Request"), sealed.
fn encode(f: &Fields) -> Vec<u8> {
    let mut h = vec![0u8; 64];
    h[0..4].copy_from_slice(&REQUEST_MAGIC.to_le_bytes());
    h[4] = 1;
    h[5] = f.opcode;
    h[6..8].copy_from_slice(&f.flags.to_le_bytes());
    h[8..16].copy_from_slice(&f.request_id.to_le_bytes());
    h[16..20].copy_from_slice(&f.region_id.to_le_bytes());
    h[20..24].copy_from_slice(&(f.payload.len() as u32).to_le_bytes());
    h[24..32].copy_from_slice(&f.key.to_le_bytes());
    h[32..40].copy_from_slice(&f.offset.to_le_bytes());
    h[40..48].copy_from_slice(&f.length.to_le_bytes());
    h[48..56].copy_from_slice(&f.value.to_le_bytes());
    let payload_crc = if f.flags & FLAG_CRC != 0 { crc32c::crc32c(&f.payload) } else { 0 };
    h[56..60].copy_from_slice(&payload_crc.to_le_bytes());
    seal(&mut h);
    h
}

/// Recomputes the header CRC of a 64 B header (others are left alone).
pub(crate) fn seal(h: &mut [u8]) {
    if h.len() == 64 {
        let crc = crc32c::crc32c(&h[..60]);
        h[60..64].copy_from_slice(&crc.to_le_bytes());
    }
}

fn set(h: &mut [u8], at: usize, bytes: &[u8]) {
    if h.len() >= at + bytes.len() {
        h[at..at + bytes.len()].copy_from_slice(bytes);
        seal(h);
    }
}

fn mutate(header: &mut Vec<u8>, payload: &mut Vec<u8>, m: Mutation, rng: &mut Xoshiro256PlusPlus) {
    match m {
        Mutation::HeaderBit { bit, reseal } => {
            if let Some(byte) = header.get_mut(bit as usize / 8) {
                *byte ^= 1 << (bit % 8);
                if reseal && bit < 480 {
                    seal(header);
                }
            }
        }
        Mutation::PayloadBit { bit } => {
            if let Some(byte) = payload.get_mut(bit as usize / 8) {
                *byte ^= 1 << (bit % 8);
            }
        }
        Mutation::CutPayload { len } => payload.truncate(len as usize),
        Mutation::ExtendPayload { by } => payload.extend((0..by).map(|_| rng.gen::<u8>())),
        Mutation::PayloadLen { value } => set(header, 20, &value.to_le_bytes()),
        Mutation::PayloadCrc { value } => set(header, 56, &value.to_le_bytes()),
        Mutation::HeaderLen { len } => header.resize_with(len as usize, || rng.gen()),
        Mutation::Resplit { by } => resplit(header, payload, by),
        Mutation::Opcode { code } => set(header, 5, &[code]),
        Mutation::Flags { flags } => set(header, 6, &flags.to_le_bytes()),
        Mutation::Version { version } => set(header, 4, &[version]),
        Mutation::Magic => {
            if let Some(byte) = header.first_mut() {
                *byte ^= 0x20;
            }
        }
        Mutation::Garbage { len } => {
            header.clear();
            header.extend((0..len).map(|_| rng.gen::<u8>()));
        }
    }
    payload.truncate(MAX_PAYLOAD_BYTES as usize + 64);
}

/// Moves the header/payload boundary by `by` bytes, keeping the header at
/// most [`MAX_HEADER_BYTES`].
fn resplit(header: &mut Vec<u8>, payload: &mut Vec<u8>, by: i16) {
    if by >= 0 {
        let n = (by as usize).min(payload.len()).min(MAX_HEADER_BYTES - header.len().min(MAX_HEADER_BYTES));
        header.extend(payload.drain(..n));
    } else {
        let n = (by.unsigned_abs() as usize).min(header.len());
        let tail = header.split_off(header.len() - n);
        payload.splice(0..0, tail);
    }
}
