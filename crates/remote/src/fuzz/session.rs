//! One fuzz run's state, shared by every target: the model, the generator,
//! the canaries and the counters; the reply check and the checkpoint.
//!
//! Invariants:
//! - A request is predicted, and its effect applied to the model, before it
//!   is sent: targets that pipeline rely on requests of one connection
//!   taking effect in send order.
//! - No request the model predicts to succeed touches a canary (the data
//!   canary's bytes, the canary log's entries or head): such a request is
//!   drawn again. Refused requests may aim anywhere; the checkpoint proves
//!   they changed nothing.
//! - A reply is accepted only if its 48 header bytes equal, byte for byte,
//!   the model's encoding of one acceptable outcome, and its payload equals
//!   the predicted payload.

use pmem::{Media, MemMedia};
use pmwire_log::AppendLog;

use super::gen::{Aim, Generator, Request};
use super::model::{op, Effect, Expected, Geometry, HelloPin, Model, Serving, DIR_BASE, SLOT_BYTES};
use super::{Failure, FailureKind, FuzzConfig, Planted, Report};
use crate::pool::Pool;
use crate::proto::{Status, RIGHT_READ, RIGHT_WRITE, RESPONSE_HEADER_BYTES};

/// Bytes of the data canary.
pub const CANARY_BYTES: u64 = 16 << 10;
/// The canary log's name.
pub const CANARY_LOG: &[u8] = b"canary";
/// Entries appended to the canary log before fuzzing.
const CANARY_ENTRIES: u64 = 5;
/// Draws before the generator gives up aiming and sends an ECHO.
const MAX_DRAWS: usize = 32;

/// The rights of the clients every target connects, in order: none, read,
/// write, both (a target that cannot grant gives every client both).
pub const RIGHTS: [u8; 4] = [0, RIGHT_READ, RIGHT_WRITE, RIGHT_READ | RIGHT_WRITE];

/// What must never change.
#[derive(Clone, Debug)]
struct Canary {
    offset: u64,
    bytes: Vec<u8>,
    log_id: u64,
    /// The canary log's bytes in the region, taken after set-up.
    log_image: Vec<u8>,
}

/// One run (see the module docs).
pub struct Session {
    /// The model.
    pub model: Model,
    /// The generator.
    pub gen: Generator,
    /// The counters.
    pub report: Report,
    canary: Option<Canary>,
    /// The region image after set-up: what refused requests must leave.
    baseline: Vec<u8>,
    /// Requests sent at the last checkpoint.
    checked_at: u64,
    config: FuzzConfig,
}

impl Session {
    /// A run over a freshly formatted pool whose image is `image`.
    pub fn new(config: &FuzzConfig, target: &str, image: &[u8], serving: Serving) -> Result<Session, Failure> {
        let geometry = Geometry::of(image).ok_or_else(|| setup(config, target, "the region holds no valid pool".into()))?;
        let model = Model::new(geometry, serving);
        let aim = Aim { canary_offset: canary_offset(&geometry), canary_len: CANARY_BYTES };
        let gen = Generator::new(config.seed, aim);
        let report = Report { target: target.to_string(), seed: config.seed, ..Report::default() };
        Ok(Session { model, gen, report, canary: None, baseline: Vec::new(), checked_at: 0, config: config.clone() })
    }

    /// A failure of this run at the current request.
    pub fn fail(&self, kind: FailureKind, detail: String) -> Failure {
        Failure { target: self.report.target.clone(), seed: self.config.seed, request: self.report.requests, kind, detail }
    }

    /// Draws the next request for a client with `rights`, predicts its
    /// reply and applies its effect to the model.
    /// `contiguous`: the request goes out as one message, which the server
    /// splits after 64 bytes (`Server::handle`), so it is predicted that way.
    pub fn next(&mut self, rights: u8, contiguous: bool) -> (Request, Expected) {
        for _ in 0..MAX_DRAWS {
            let mut request = self.gen.next(&self.model);
            if contiguous {
                request.join();
            }
            let expected = self.model.predict(rights, &request.header, &request.payload);
            if self.touches_canary(&expected, request.payload.len() as u64) {
                self.report.rerolled += 1;
                continue;
            }
            return self.commit(request, expected);
        }
        let request = self.build(op::ECHO, 0, 0, b"gave up aiming".to_vec());
        let expected = self.model.predict(rights, &request.header, &request.payload);
        self.commit(request, expected)
    }

    /// A structured request, unmutated, predicted and applied (set-up).
    pub fn fixed(&mut self, rights: u8, opcode: u8, offset: u64, length: u64, payload: Vec<u8>) -> (Request, Expected) {
        let request = self.build(opcode, offset, length, payload);
        let expected = self.model.predict(rights, &request.header, &request.payload);
        self.commit(request, expected)
    }

    fn build(&mut self, opcode: u8, offset: u64, length: u64, payload: Vec<u8>) -> Request {
        let (region_id, key) = (self.model.geometry.region_id, self.model.geometry.key);
        self.gen.build(opcode, region_id, key, offset, length, payload)
    }

    fn commit(&mut self, request: Request, expected: Expected) -> (Request, Expected) {
        let forgotten = self.config.planted == Planted::WrongModel && matches!(expected.effect, Effect::Word { .. });
        if !forgotten {
            self.model.apply(&expected, &request.payload);
        }
        self.report.requests += 1;
        self.report.mutated += !request.mutations.is_empty() as u64;
        self.report.offloaded += expected.deferred as u64;
        (request, expected)
    }

    fn touches_canary(&self, expected: &Expected, len: u64) -> bool {
        let Some(canary) = &self.canary else { return false };
        if expected.status != Status::Ok {
            return false;
        }
        let overlaps = |offset: u64, n: u64| offset < canary.offset + CANARY_BYTES && canary.offset < offset + n && n > 0;
        match expected.effect {
            Effect::Write { offset } => overlaps(offset, len),
            Effect::Word { offset, .. } => overlaps(offset, 8),
            Effect::Append { id, .. } | Effect::Truncate { id, .. } => id == canary.log_id,
            Effect::None | Effect::Create(_) => false,
        }
    }

    /// Checks one reply (`header`, `payload` as received) against `expected`.
    pub fn check_reply(&mut self, request: &Request, expected: &Expected, header: &[u8], payload: &[u8]) -> Result<(), Failure> {
        let planted = self.config.planted == Planted::AlterReply { index: self.report.replies_checked } && header.len() > 24;
        let mut altered;
        let header = if planted {
            altered = header.to_vec();
            altered[24] ^= 1;
            &altered[..]
        } else {
            header
        };
        self.report.replies_checked += 1;
        let status = expected.status;
        let matched = header == expected.header_bytes();
        let payload_ok = if status == Status::Ok { payload == expected.payload } else { payload.is_empty() };
        if matched && payload_ok {
            self.report.statuses[status as usize] += 1;
            if status == Status::Ok {
                self.report.ok_by_opcode[expected.opcode as usize] += 1;
            }
            return Ok(());
        }
        let detail = describe_mismatch(request, expected, header, payload);
        Err(self.fail(FailureKind::Reply, detail))
    }

    /// Pins the HELLO bytes the model cannot derive, from a HELLO reply
    /// body whose derivable bytes are checked first.
    pub fn pin_hello(&mut self, rights: u8, body: &[u8]) -> Result<(), Failure> {
        let ok = body.len() >= 40 && body.len() == 40 + super::model::le32(body, 32) as usize;
        if !ok {
            return Err(self.fail(FailureKind::Setup, format!("HELLO body of {} B does not match its rkey length", body.len())));
        }
        let pin = HelloPin {
            remote_addr: super::model::le64(body, 8),
            kind: body[16],
            domain: body[17],
            one_sided: body[26..29].try_into().expect("3 bytes"),
            rkey: body[40..].to_vec(),
        };
        self.model.serving.pin = Some(pin);
        if self.model.hello_body(rights) != body {
            let detail = format!("HELLO body {body:02x?} disagrees with the model's {:02x?}", self.model.hello_body(rights));
            return Err(self.fail(FailureKind::Reply, detail));
        }
        Ok(())
    }

    /// The canary requests: the data canary's bytes, then the canary log
    /// and its entries, all from a client with both rights.
    pub fn canary_requests(&mut self) -> Vec<(Request, Expected)> {
        let rw = RIGHT_READ | RIGHT_WRITE;
        let offset = canary_offset(&self.model.geometry);
        let bytes: Vec<u8> = (0..CANARY_BYTES).map(|i| (i * 131 + 7) as u8 | 0x80).collect();
        let mut out = vec![self.fixed(rw, op::PERSIST_WRITE, offset, CANARY_BYTES, bytes.clone())];
        let spec = super::model::LogSpecBody { capacity: 8192, tail: 2, blocks: 0, stride: 0, align: 64, name: CANARY_LOG };
        out.push(self.fixed(rw, op::LOG_CREATE, 0, 0, spec.encode()));
        let log_id = self.model.find(CANARY_LOG).expect("the canary log is the first log");
        for i in 0..CANARY_ENTRIES {
            let entry = format!("canary entry {i} of {CANARY_ENTRIES}").into_bytes();
            out.push(self.fixed(rw, op::LOG_APPEND, log_id, 0, entry));
        }
        self.canary = Some(Canary { offset, bytes, log_id, log_image: Vec::new() });
        out
    }

    /// Records the region image after set-up (the canaries are in place).
    pub fn set_baseline(&mut self, image: Vec<u8>) -> Result<(), Failure> {
        let canary = self.canary.as_mut().expect("canary requests sent first");
        let log = &self.model.logs[canary.log_id as usize];
        canary.log_image = image[log.base as usize..(log.base + log.size) as usize].to_vec();
        self.baseline = image;
        let baseline = std::mem::take(&mut self.baseline);
        let result = self.checkpoint(&baseline);
        self.baseline = baseline;
        result
    }

    /// After the server reopened the pool: recovery may scrub the free
    /// space after a self-validating log's tail (FORMAT.md), so the canary
    /// log's bytes are taken again once the pool checks out.
    pub fn reopened(&mut self, image: &[u8]) -> Result<(), Failure> {
        self.report.restarts += 1;
        let canary = self.canary.as_mut().expect("set-up came first");
        let log = &self.model.logs[canary.log_id as usize];
        let (base, end) = (log.base as usize, (log.base + log.size) as usize);
        let saved = std::mem::replace(&mut canary.log_image, image[base..end].to_vec());
        self.checkpoint(image).inspect_err(|_| self.canary.as_mut().expect("set").log_image = saved)
    }

    /// Compares a quiescent region image with the model: superblock,
    /// directory, bytes outside the logs, the canaries, the data area, and
    /// every log opened from the image.
    pub fn checkpoint(&mut self, image: &[u8]) -> Result<(), Failure> {
        self.report.checkpoints += 1;
        self.checked_at = self.report.requests;
        let result = self.check_metadata(image).and_then(|()| self.check_canaries(image)).and_then(|()| self.check_data(image));
        result.and_then(|()| self.check_logs(image))
    }

    fn check_metadata(&self, image: &[u8]) -> Result<(), Failure> {
        let g = self.model.geometry;
        if image.len() as u64 != g.region_bytes || Geometry::of(image) != Some(g) {
            return Err(self.fail(FailureKind::State, "the superblock changed".into()));
        }
        if !self.baseline.is_empty() && image[..DIR_BASE as usize] != self.baseline[..DIR_BASE as usize] {
            return Err(self.fail(FailureKind::State, "bytes 0..256 (superblock) changed".into()));
        }
        for slot in 0..g.dir_slots as usize {
            let at = (DIR_BASE + slot as u64 * SLOT_BYTES) as usize;
            let expected = self.model.logs.get(slot).map_or([0; SLOT_BYTES as usize], Model::slot_bytes);
            if image[at..at + SLOT_BYTES as usize] != expected {
                return Err(self.fail(FailureKind::State, format!("directory slot {slot} is not what the model says")));
            }
        }
        if self.baseline.is_empty() {
            return Ok(());
        }
        let dir_end = (DIR_BASE + g.dir_slots as u64 * SLOT_BYTES) as usize;
        let mut spans: Vec<(usize, usize)> = self.model.logs.iter().map(|l| (l.base as usize, (l.base + l.size) as usize)).collect();
        spans.sort_unstable();
        let mut at = dir_end;
        for (start, end) in spans.into_iter().chain([(g.data_base as usize, g.data_base as usize)]) {
            if image[at..start] != self.baseline[at..start] {
                return Err(self.fail(FailureKind::State, format!("metadata bytes {at}..{start} outside every log changed")));
            }
            at = end;
        }
        Ok(())
    }

    fn check_canaries(&self, image: &[u8]) -> Result<(), Failure> {
        let Some(canary) = &self.canary else { return Ok(()) };
        let at = (self.model.geometry.data_base + canary.offset) as usize;
        if image[at..at + canary.bytes.len()] != canary.bytes[..] {
            return Err(self.fail(FailureKind::Canary, format!("the data canary at data offset {} changed", canary.offset)));
        }
        let log = &self.model.logs[canary.log_id as usize];
        if !canary.log_image.is_empty() && image[log.base as usize..(log.base + log.size) as usize] != canary.log_image[..] {
            return Err(self.fail(FailureKind::Canary, format!("the canary log's bytes at {} changed", log.base)));
        }
        Ok(())
    }

    fn check_data(&mut self, image: &[u8]) -> Result<(), Failure> {
        let base = self.model.geometry.data_base as usize;
        let data = &image[base..];
        self.report.data_bytes_compared += data.len() as u64;
        if data == &self.model.data[..] {
            return Ok(());
        }
        let first = data.iter().zip(&self.model.data).position(|(a, b)| a != b).expect("they differ");
        let detail = format!("data area differs from the model from offset {first} ({:#04x}, model {:#04x})", data[first], self.model.data[first]);
        Err(self.fail(FailureKind::State, detail))
    }

    /// Opens the pool and each log from a copy of the image and compares
    /// directory, heads, tails and every entry with the model.
    fn check_logs(&mut self, image: &[u8]) -> Result<(), Failure> {
        let mut media = MemMedia::from_bytes(image.to_vec());
        let pool = Pool::open(&media).map_err(|e| self.fail(FailureKind::State, format!("the pool does not open: {e}")))?;
        if pool.logs().count() != self.model.logs.len() {
            return Err(self.fail(FailureKind::State, format!("{} logs in the directory, the model has {}", pool.logs().count(), self.model.logs.len())));
        }
        for (id, log) in self.model.logs.iter().enumerate() {
            let opened = AppendLog::open(&mut media, log.base);
            let opened = opened.map_err(|e| self.fail(FailureKind::State, format!("log {id} does not open: {e}")))?;
            let entries: Vec<(u64, Vec<u8>)> = (log.head..).zip(log.entries.iter().map(|e| e.1.clone())).collect();
            let same = opened.head() == log.head
                && opened.next_lsn() == log.next_lsn()
                && opened.positions() == (log.head_pos, log.tail_pos)
                && opened.read_all(&media) == entries;
            if !same {
                let detail = format!("log {id}: head {} next {} positions {:?}; model head {} next {} positions {:?}",
                    opened.head(), opened.next_lsn(), opened.positions(), log.head, log.next_lsn(), (log.head_pos, log.tail_pos));
                return Err(self.fail(FailureKind::State, detail));
            }
            self.report.log_entries_compared += entries.len() as u64;
        }
        debug_assert!(media.len() == image.len() as u64);
        Ok(())
    }

    /// A client slot of [`RIGHTS`] (or, with `stranger`, 4: a client that
    /// never connected), both rights most often so that most requests get
    /// past the rights check.
    pub fn client_slot(&mut self, stranger: bool) -> usize {
        const WEIGHTS: [u64; 5] = [1, 2, 2, 9, 1];
        let slots = if stranger { 5 } else { 4 };
        let mut pick = self.gen.below(WEIGHTS[..slots].iter().sum());
        for (slot, weight) in WEIGHTS.iter().enumerate() {
            if pick < *weight {
                return slot;
            }
            pick -= weight;
        }
        unreachable!("weights cover the draw")
    }

    /// Whether a run's budget is spent.
    pub fn done(&self, started: std::time::Instant) -> bool {
        self.report.requests >= self.config.max_requests || started.elapsed() >= self.config.max_time
    }

    /// Whether a checkpoint is due.
    pub fn checkpoint_due(&self) -> bool {
        self.report.requests - self.checked_at >= self.config.checkpoint_every
    }

    /// The region offset a planted canary corruption overwrites, if planted.
    pub fn planted_corruption(&self) -> Option<u64> {
        let canary = self.canary.as_ref()?;
        (self.config.planted == Planted::CorruptCanary).then(|| self.model.geometry.data_base + canary.offset + 100)
    }
}

/// Where the data canary lives: the middle of the data area, 4 KiB aligned.
fn canary_offset(g: &Geometry) -> u64 {
    assert!(g.data_bytes >= 4 * CANARY_BYTES, "data area of {} B too small for the canary", g.data_bytes);
    (g.data_bytes / 2) & !4095
}

fn setup(config: &FuzzConfig, target: &str, detail: String) -> Failure {
    Failure { target: target.to_string(), seed: config.seed, request: 0, kind: FailureKind::Setup, detail }
}

fn describe_mismatch(request: &Request, expected: &Expected, header: &[u8], payload: &[u8]) -> String {
    let decoded = crate::proto::decode_response_parts(header, payload, u32::MAX);
    let got = match decoded {
        Ok(r) => format!("{:?} value={:#x} detail={:#x}, {} B payload", r.header.status, r.header.value, r.header.detail, r.payload.len()),
        Err(e) => format!("an undecodable reply ({e}): {} B header {header:02x?}", header.len()),
    };
    let want = format!(
        "{:?} value={:#x} detail={:#x}, {} B payload",
        expected.status,
        expected.value,
        expected.detail,
        expected.payload.len(),
    );
    let payload_note = if header.len() == RESPONSE_HEADER_BYTES && payload != expected.payload && expected.status == Status::Ok {
        let first = payload.iter().zip(&expected.payload).position(|(a, b)| a != b);
        format!("\n    payload differs (first differing byte: {first:?})")
    } else {
        String::new()
    };
    format!("request {request}\n    expected {want}\n    got      {got}{payload_note}")
}
