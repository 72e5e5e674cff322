//! The server core: request handling against an exported region, without
//! I/O (like raft-rs's `RawNode`, the caller moves the bytes).
//!
//! The event loop hands each whole received message to
//! [`Server::handle`], which returns an [`Action`]: either the reply is in
//! the caller's buffer now, or the write was handed to the copy engine and
//! its reply will come out of [`Server::poll_completions`] once the engine's
//! eventfd ([`Server::completion_fd`]) fires (seed 000 §5.5: the handler
//! returns before the copy completes). Connections are announced with
//! [`connect`](Server::connect)/[`disconnect`](Server::disconnect).
//!
//! Invariants:
//! - Every request is checked in this order before anything is touched:
//!   decode (length, magic, header CRC, version, opcode, flags, payload
//!   length and limit, payload CRC, opcode shape), region id, access key,
//!   the client's right, then the range against the data area. Any failure
//!   is an error reply and **nothing is written**.
//! - Clients address the data area only; offsets are relative to it. The
//!   superblock, directory and logs are out of their reach (`pool`).
//! - A request never touches a range an outstanding copy is writing: the
//!   handler first waits that copy out (blocking on the engine's eventfd,
//!   bounded by [`PATIENCE`]). So requests to one range take effect in
//!   arrival order, and the copy engine's disjointness invariant holds.
//! - An RpcOffload write of at most `copy_inline_max_bytes` that arrives
//!   while the engine is idle (no copy outstanding) is copied inline, by
//!   the engine's own non-temporal copy on this thread, and answered at
//!   once (`Action::Reply`): the hand-off to a sleeping helper costs more
//!   than such a copy (docs/bench.md, issue 13). It never runs beside an
//!   outstanding copy, so it cannot overtake one to the same bytes.
//! - A reply with `Status::Ok` to a mutating request is produced only after
//!   its bytes are persisted (flush + drain, or the helper's drain).
//! - Bounded: one staging buffer per copy-engine slot, allocated at start
//!   (for borrowed payloads; an owned payload is copied from in place and
//!   comes back through [`Server::take_released`]); at most `depth`
//!   offloaded writes pending; replies reuse caller buffers.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::time::Duration;

use pmem::{Media, PersistenceDomain, Region, RegionKind};
use pmwire_log::{AppendError, AppendLog, OpenError};
use thiserror::Error;

use crate::copy_engine::{Completion, CopyBackend, CopyEngine, CopyTarget, Ticket, INLINE_MAX_BYTES};
use crate::pool::{log_config_from_codes, FormatError, LogCreateError, Pool, PoolConfig, PoolOpenError};
use crate::proto::{
    self, encode_response, encode_response_header, Guarantee, Hello, LogSpec, Opcode, Request, ResponseHeader, Status,
    OneSidedReach, DEFAULT_MAX_PAYLOAD_BYTES, FLAG_OFFLOAD, FLAG_PAYLOAD_CRC, MAX_PAYLOAD_BYTES, RESPONSE_HEADER_BYTES, RIGHT_READ,
    RIGHT_WRITE,
};

/// The event loop's name for a connection.
pub type ClientId = u64;

/// Longest the handler blocks for one copy to finish before declaring the
/// engine dead (an unrecoverable persistence failure: it panics).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// What one-sided access the transport set up for the data area.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OneSided {
    /// The packed remote key of the registered data area.
    pub rkey: Vec<u8>,
    /// The server virtual address of byte 0 of the data area.
    pub remote_addr: u64,
    /// Remote writes go to the memory controller, not the cache (RDMA with
    /// DDIO off). False over UCX tcp and sm: a remote write is a CPU store.
    pub writes_bypass_cache: bool,
    /// How far a client's one-sided operations reach (stated in HELLO;
    /// never `Off` here: no registration is `None`).
    pub reach: OneSidedReach,
}

/// How a server behaves.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Largest payload accepted (≤ [`MAX_PAYLOAD_BYTES`]).
    pub max_payload: u32,
    /// Rights a client gets on [`Server::connect`] (`RIGHT_*` bits).
    pub default_rights: u8,
    /// Refuse payloads without a checksum.
    pub require_payload_crc: bool,
    /// Copy-engine depth: copies outstanding at once (0: no engine).
    pub copy_depth: usize,
    /// Copy-engine helper threads (1..=depth).
    pub copy_threads: usize,
    /// RpcOffload writes of at most this many bytes are copied on the
    /// calling (event-loop) thread when the engine is idle, like Rpc but
    /// with the engine's non-temporal copy (0: always hand off). Default
    /// [`INLINE_MAX_BYTES`], the measured crossover.
    pub copy_inline_max_bytes: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_payload: DEFAULT_MAX_PAYLOAD_BYTES,
            default_rights: RIGHT_READ | RIGHT_WRITE,
            require_payload_crc: false,
            copy_depth: 8,
            copy_threads: 1,
            copy_inline_max_bytes: INLINE_MAX_BYTES,
        }
    }
}

/// Why a server could not start on a region.
#[derive(Debug, Error)]
pub enum ServerError {
    /// Formatting the pool failed.
    #[error("cannot format the pool: {0}")]
    Format(#[from] FormatError),
    /// The region holds no valid pool.
    #[error("cannot open the pool: {0}")]
    Pool(#[from] PoolOpenError),
    /// A log in the directory does not recover.
    #[error("log {name:?} does not recover: {source}")]
    Log {
        /// Its name.
        name: String,
        /// Why.
        source: OpenError,
    },
    /// The copy engine did not start.
    #[error("cannot start the copy engine: {0}")]
    Engine(#[from] std::io::Error),
    /// The configuration is out of range.
    #[error("bad server config: {0}")]
    Config(&'static str),
}

/// What the event loop does after [`Server::handle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send the reply buffer now.
    Reply,
    /// The copy engine has the write; its reply comes from
    /// [`Server::poll_completions`] with this ticket's completion.
    Offloaded(Ticket),
}

/// A reply that became ready when an offloaded copy completed.
#[derive(Clone, Copy, Debug)]
pub struct Completed {
    /// Whom to send it to.
    pub client: ClientId,
    /// The copy it answers.
    pub ticket: Ticket,
    /// The reply message (a header without payload).
    pub reply: [u8; RESPONSE_HEADER_BYTES],
}

/// An error reply: status and context.
#[derive(Clone, Copy, Debug)]
struct Refusal {
    status: Status,
    detail: u64,
}

impl From<Status> for Refusal {
    fn from(status: Status) -> Self {
        Refusal { status, detail: 0 }
    }
}

type Handled = Result<Outcome, Refusal>;

/// What [`Server::dispatch`] decided.
#[derive(Clone, Copy, Debug)]
enum Outcome {
    /// The reply is in the caller's buffer.
    Reply,
    /// A checked PERSIST_WRITE with `OFFLOAD`: hand the payload to the
    /// engine at region offset `at` (conflicts already waited out).
    Offload { at: u64, request_id: u64 },
}

/// The server core (see the module docs).
pub struct Server {
    // Declared first so it is dropped (its helpers joined) before `region`.
    engine: Option<CopyEngine<Vec<u8>>>,
    region: Region,
    pool: Pool,
    logs: Vec<Option<AppendLog>>,
    clients: HashMap<ClientId, u8>,
    config: ServerConfig,
    one_sided: Option<OneSided>,
    staging: Vec<Vec<u8>>,
    /// Buffers of completed copies beyond the staging set (at most `depth`).
    released: Vec<Vec<u8>>,
    pending: Vec<(Ticket, ClientId, u64)>,
    ready: Vec<Completed>,
    done: Vec<Completion<Vec<u8>>>,
    scratch: Vec<u8>,
    /// RpcOffload writes copied on the loop thread (the inline path).
    inlined: u64,
}

impl Server {
    /// Formats `region` as a new pool and serves it.
    pub fn format(mut region: Region, pool: PoolConfig, config: ServerConfig) -> Result<Server, ServerError> {
        let pool = Pool::format(&mut region, pool)?;
        Server::start(region, pool, config)
    }

    /// Serves the pool already in `region`, recovering its logs.
    pub fn open(region: Region, config: ServerConfig) -> Result<Server, ServerError> {
        let pool = Pool::open(&region)?;
        Server::start(region, pool, config)
    }

    fn start(mut region: Region, pool: Pool, config: ServerConfig) -> Result<Server, ServerError> {
        if config.max_payload == 0 || config.max_payload > MAX_PAYLOAD_BYTES {
            return Err(ServerError::Config("max_payload outside 1..=1 MiB"));
        }
        let mut logs = Vec::with_capacity(pool.superblock().dir_slots as usize);
        logs.resize_with(pool.superblock().dir_slots as usize, || None);
        for (id, slot) in pool.logs() {
            let log = AppendLog::open(&mut region, slot.base);
            let name = || String::from_utf8_lossy(&slot.name).into_owned();
            logs[id as usize] = Some(log.map_err(|source| ServerError::Log { name: name(), source })?);
        }
        let engine = match config.copy_depth {
            0 => None,
            depth => {
                if config.copy_threads == 0 || config.copy_threads > depth {
                    return Err(ServerError::Config("copy_threads outside 1..=copy_depth"));
                }
                // SAFETY: the engine lives in the same Server as the region and
                // is dropped first (field order, and `Drop for Server`).
                let target = unsafe { CopyTarget::new(&region) };
                Some(CopyEngine::new(target, depth, config.copy_threads)?)
            }
        };
        let max = config.max_payload as usize;
        let staging = (0..config.copy_depth).map(|_| Vec::with_capacity(max)).collect();
        Ok(Server {
            engine,
            region,
            pool,
            logs,
            clients: HashMap::new(),
            pending: Vec::with_capacity(config.copy_depth),
            ready: Vec::with_capacity(config.copy_depth),
            done: Vec::with_capacity(config.copy_depth),
            scratch: Vec::with_capacity(max),
            one_sided: None,
            staging,
            released: Vec::with_capacity(config.copy_depth),
            config,
            inlined: 0,
        })
    }

    /// The region served (for the transport to register the data area).
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// The data area clients address: `(offset in the region, bytes)`.
    pub fn data_area(&self) -> (u64, u64) {
        let sb = self.pool.superblock();
        (sb.data_base, sb.data_bytes)
    }

    /// The region id and access key clients must present.
    pub fn credentials(&self) -> (u32, u64) {
        let sb = self.pool.superblock();
        (sb.region_id, sb.key)
    }

    /// Records the one-sided access the transport registered (stated in HELLO).
    pub fn set_one_sided(&mut self, one_sided: Option<OneSided>) {
        if let Some(o) = &one_sided {
            assert!(o.rkey.len() <= proto::MAX_RKEY_BYTES, "rkey of {} B", o.rkey.len());
            assert!(!o.rkey.is_empty(), "a registration has an rkey");
            assert!(o.reach != OneSidedReach::Off, "no registration is None");
        }
        self.one_sided = one_sided;
    }

    /// A new connection, with the default rights.
    pub fn connect(&mut self, client: ClientId) {
        self.clients.insert(client, self.config.default_rights);
    }

    /// Sets a connected client's rights (`RIGHT_*` bits).
    pub fn grant(&mut self, client: ClientId, rights: u8) {
        assert!(rights & !(RIGHT_READ | RIGHT_WRITE) == 0, "unknown rights {rights:#x}");
        self.clients.insert(client, rights);
    }

    /// A connection closed. Its offloaded writes still complete (the region
    /// stays consistent); their replies are dropped.
    pub fn disconnect(&mut self, client: ClientId) {
        self.clients.remove(&client);
    }

    /// The eventfd that becomes readable when offloaded copies complete.
    pub fn completion_fd(&self) -> Option<RawFd> {
        self.engine.as_ref().map(|e| e.event_fd())
    }

    /// Readies [`completion_fd`](Server::completion_fd) for a blocking
    /// wait; true if copies finished already (poll instead of blocking).
    pub fn arm_completions(&mut self) -> bool {
        self.engine.as_mut().is_some_and(|e| e.arm())
    }

    /// Offloaded writes whose replies are not yet out.
    pub fn pending(&self) -> usize {
        self.pending.len() + self.ready.len()
    }

    /// A buffer of a completed copy that [`handle_owned`](Server::handle_owned)
    /// was given and the staging set does not need: the caller's to reuse.
    pub fn take_released(&mut self) -> Option<Vec<u8>> {
        self.released.pop()
    }

    /// Collects the replies of completed copies into `out`; never blocks.
    pub fn poll_completions(&mut self, out: &mut Vec<Completed>) -> usize {
        self.collect();
        let n = self.ready.len();
        out.append(&mut self.ready);
        n
    }

    /// Handles one whole message from `client`; the reply (for
    /// [`Action::Reply`]) is written to `reply`, which is cleared first.
    pub fn handle(&mut self, client: ClientId, msg: &[u8], reply: &mut Vec<u8>) -> Action {
        let split = msg.len().min(proto::REQUEST_HEADER_BYTES);
        self.handle_parts(client, &msg[..split], &msg[split..], reply)
    }

    /// [`handle`](Server::handle) for a message whose header and payload
    /// arrived apart (a transport RPC's header and payload): no copy, except
    /// that an offloaded write is staged into one of the engine's buffers.
    pub fn handle_parts(&mut self, client: ClientId, header: &[u8], payload: &[u8], reply: &mut Vec<u8>) -> Action {
        match self.decide(client, header, payload, reply) {
            Outcome::Reply => Action::Reply,
            Outcome::Offload { at, request_id } => {
                self.make_room();
                let mut buffer = self.staging.pop().expect("one staging buffer per free engine slot");
                buffer.clear();
                buffer.extend_from_slice(payload);
                Action::Offloaded(self.submit_copy(client, at, request_id, buffer))
            }
        }
    }

    /// [`handle_parts`](Server::handle_parts) for a payload the caller gives
    /// up (a transport's receive buffer): an offloaded write is copied by
    /// the engine straight from it, with no staging copy. Otherwise the
    /// payload comes back for reuse.
    pub fn handle_owned(&mut self, client: ClientId, header: &[u8], payload: Vec<u8>, reply: &mut Vec<u8>) -> (Action, Option<Vec<u8>>) {
        match self.decide(client, header, &payload, reply) {
            Outcome::Reply => (Action::Reply, Some(payload)),
            Outcome::Offload { at, request_id } => (Action::Offloaded(self.submit_copy(client, at, request_id, payload)), None),
        }
    }

    /// Decodes and checks a request and carries out everything but an
    /// offloaded copy; error replies are written to `reply`.
    fn decide(&mut self, client: ClientId, header: &[u8], payload: &[u8], reply: &mut Vec<u8>) -> Outcome {
        let msg = header;
        let request = match proto::decode_request_parts(header, payload, self.config.max_payload) {
            Ok(request) => request,
            Err(e) => {
                let detail = match e {
                    proto::DecodeError::TooLarge { max, .. } => max as u64,
                    _ => 0,
                };
                let refusal = Refusal { status: e.status(), detail };
                error_reply(proto::peek_opcode(msg), proto::peek_request_id(msg), refusal, reply);
                return Outcome::Reply;
            }
        };
        let header = request.header;
        match self.dispatch(client, request, reply) {
            Ok(outcome) => outcome,
            Err(refusal) => {
                error_reply(header.opcode as u8, header.request_id, refusal, reply);
                Outcome::Reply
            }
        }
    }

    /// Hands a checked write's payload to the engine (waiting for a free
    /// slot first); its reply comes from [`poll_completions`](Server::poll_completions).
    fn submit_copy(&mut self, client: ClientId, at: u64, request_id: u64, buffer: Vec<u8>) -> Ticket {
        self.make_room();
        let len = buffer.len();
        let engine = self.engine.as_mut().expect("checked above");
        let ticket = match engine.submit(at, buffer, len) {
            Ok(ticket) => ticket,
            Err(rejected) => panic!("copy refused after the server's checks: {}", rejected.error),
        };
        self.pending.push((ticket, client, request_id));
        ticket
    }

    fn dispatch(&mut self, client: ClientId, req: Request<'_>, reply: &mut Vec<u8>) -> Handled {
        let h = &req.header;
        let (region_id, key) = self.credentials();
        if h.region_id != region_id {
            return Err(Status::UnknownRegion.into());
        }
        if h.key != key {
            return Err(Status::BadKey.into());
        }
        let rights = self.clients.get(&client).copied().unwrap_or(0);
        let needed = match h.opcode {
            Opcode::Hello | Opcode::Echo | Opcode::Discard => 0,
            op if op.mutates() => RIGHT_WRITE,
            _ => RIGHT_READ,
        };
        if rights & needed != needed {
            return Err(Refusal { status: Status::Forbidden, detail: rights as u64 });
        }
        if self.config.require_payload_crc && !req.payload.is_empty() && h.flags & FLAG_PAYLOAD_CRC == 0 {
            return Err(Refusal { status: Status::BadChecksum, detail: 1 });
        }
        match h.opcode {
            Opcode::Hello => self.hello(req, rights, reply),
            Opcode::PersistWrite => self.persist_write(req, reply),
            Opcode::Flush => self.flush(req, reply),
            Opcode::Read => self.read(req, reply),
            Opcode::AtomicWrite8 => self.atomic_write8(req, reply),
            Opcode::LogCreate => self.log_create(req, reply),
            Opcode::LogOpen => self.log_open(req, reply),
            Opcode::LogAppend => self.log_append(req, reply),
            Opcode::LogRead => self.log_read(req, reply),
            Opcode::LogTruncate => self.log_truncate(req, reply),
            Opcode::Echo => ok_reply(req, 0, req.payload, reply),
            Opcode::Discard => ok_reply(req, 0, &[], reply),
        }
    }

    /// What each method guarantees on this region and transport.
    pub fn guarantees(&self) -> [Guarantee; 5] {
        let offload = if self.engine.is_some() { Guarantee::Persistence } else { Guarantee::None };
        let (flush, raw) = match &self.one_sided {
            None => (Guarantee::None, Guarantee::None),
            Some(o) => {
                let domain = self.region.domain();
                let durable = domain == PersistenceDomain::CpuCache
                    || (o.writes_bypass_cache && domain == PersistenceDomain::MemoryController);
                (Guarantee::Persistence, if durable { Guarantee::Persistence } else { Guarantee::Visibility })
            }
        };
        [Guarantee::Persistence, offload, flush, raw, raw]
    }

    fn hello(&mut self, req: Request<'_>, rights: u8, reply: &mut Vec<u8>) -> Handled {
        let (_, data_bytes) = self.data_area();
        let hello = Hello {
            data_bytes,
            remote_addr: self.one_sided.as_ref().map_or(0, |o| o.remote_addr),
            kind: kind_code(self.region.kind()),
            domain: domain_code(self.region.domain()),
            rights,
            payload_crc_required: self.config.require_payload_crc,
            max_payload: self.config.max_payload,
            guarantees: self.guarantees(),
            one_sided: self.one_sided.as_ref().map_or(OneSidedReach::Off, |o| o.reach),
            rkey: self.one_sided.as_ref().map_or_else(Vec::new, |o| o.rkey.clone()),
        };
        self.scratch.clear();
        hello.encode(&mut self.scratch);
        ok_reply(req, 0, &self.scratch, reply)
    }

    /// The absolute region offset of `[offset, offset + len)` of the data area.
    fn data_range(&self, offset: u64, len: u64) -> Result<u64, Refusal> {
        let (base, bytes) = self.data_area();
        if offset.checked_add(len).is_none_or(|end| end > bytes) {
            return Err(Refusal { status: Status::OutOfBounds, detail: bytes });
        }
        Ok(base + offset)
    }

    /// Rpc: ordinary stores, then clwb over the range and one sfence (the
    /// issue's and seed 000 Fig 2c's server-side copy); RpcOffload: the
    /// engine's non-temporal copy, after the caller hands it the payload.
    fn persist_write(&mut self, req: Request<'_>, reply: &mut Vec<u8>) -> Handled {
        let len = req.payload.len() as u64;
        let at = self.data_range(req.header.offset, len)?;
        if req.header.flags & FLAG_OFFLOAD != 0 && self.engine.is_none() {
            return Err(Status::Unsupported.into());
        }
        self.wait_conflicts(at, len);
        if req.header.flags & FLAG_OFFLOAD != 0 {
            if !self.copy_inline(at, req.payload) {
                return Ok(Outcome::Offload { at, request_id: req.header.request_id });
            }
            return ok_reply(req, len, &[], reply);
        }
        self.region.write(at, req.payload);
        self.region.persist(at, len);
        ok_reply(req, len, &[], reply)
    }

    fn flush(&mut self, req: Request<'_>, reply: &mut Vec<u8>) -> Handled {
        let at = self.data_range(req.header.offset, req.header.length)?;
        self.region.persist(at, req.header.length);
        ok_reply(req, req.header.length, &[], reply)
    }

    fn read(&mut self, req: Request<'_>, reply: &mut Vec<u8>) -> Handled {
        let len = req.header.length;
        let at = self.data_range(req.header.offset, len)?;
        self.wait_conflicts(at, len);
        reply.clear();
        reply.resize(RESPONSE_HEADER_BYTES + len as usize, 0);
        self.region.read(at, &mut reply[RESPONSE_HEADER_BYTES..]);
        let header = ok_header(req, len);
        let head = encode_response_header(&header, &reply[RESPONSE_HEADER_BYTES..]);
        reply[..RESPONSE_HEADER_BYTES].copy_from_slice(&head);
        Ok(Outcome::Reply)
    }

    fn atomic_write8(&mut self, req: Request<'_>, reply: &mut Vec<u8>) -> Handled {
        let at = self.data_range(req.header.offset, 8)?;
        if at % 8 != 0 {
            return Err(Status::Misaligned.into());
        }
        self.wait_conflicts(at, 8);
        self.region.persist_u64(at, req.header.value);
        ok_reply(req, 8, &[], reply)
    }

    fn log_create(&mut self, req: Request<'_>, reply: &mut Vec<u8>) -> Handled {
        let spec = LogSpec::decode(req.payload).map_err(|_| Refusal::from(Status::Malformed))?;
        let config = log_config_from_codes(spec.capacity, spec.tail, spec.blocks, spec.stride, spec.align);
        let config = config.ok_or(Refusal::from(Status::BadLogConfig))?;
        let (id, log) = self.pool.create_log(&mut self.region, spec.name, config).map_err(|e| match e {
            LogCreateError::Exists(_) => Status::LogExists.into(),
            LogCreateError::BadName(_) => Status::Malformed.into(),
            LogCreateError::DirectoryFull(_) => Status::NoSpace.into(),
            LogCreateError::NoSpace { free, .. } => Refusal { status: Status::NoSpace, detail: free },
            LogCreateError::Config(_) => Status::BadLogConfig.into(),
        })?;
        self.logs[id as usize] = Some(log);
        ok_reply(req, id as u64, &[], reply)
    }

    fn log_open(&mut self, req: Request<'_>, reply: &mut Vec<u8>) -> Handled {
        let id = self.pool.find(req.payload).ok_or(Refusal::from(Status::UnknownLog))?;
        ok_reply(req, id as u64, &[], reply)
    }

    fn log_append(&mut self, req: Request<'_>, reply: &mut Vec<u8>) -> Handled {
        let log = log_mut(&mut self.logs, req.header.offset)?;
        let lsn = log.append(&mut self.region, req.payload).map_err(|e| match e {
            AppendError::Full { free, .. } => Refusal { status: Status::LogFull, detail: free },
            AppendError::TooLarge { max, .. } => Refusal { status: Status::EntryTooLarge, detail: max },
            // LSN or position space used up: no truncation makes room.
            AppendError::Exhausted { .. } => Refusal { status: Status::LogFull, detail: 0 },
            other => panic!("append log refused a byte payload: {other}"),
        })?;
        ok_reply(req, lsn, &[], reply)
    }

    fn log_read(&mut self, req: Request<'_>, reply: &mut Vec<u8>) -> Handled {
        let max = self.config.max_payload as u64;
        let log = log_mut(&mut self.logs, req.header.offset)?;
        let mut entry = std::mem::take(&mut self.scratch);
        let found = log.read_into(&self.region, req.header.length, &mut entry);
        let result = match (found, entry.len() as u64 <= max) {
            (false, _) => Err(Refusal::from(Status::NoEntry)),
            (true, false) => Err(Refusal { status: Status::TooLarge, detail: max }),
            (true, true) => ok_reply(req, req.header.length, &entry, reply),
        };
        self.scratch = entry;
        result
    }

    fn log_truncate(&mut self, req: Request<'_>, reply: &mut Vec<u8>) -> Handled {
        let log = log_mut(&mut self.logs, req.header.offset)?;
        log.truncate(&mut self.region, req.header.length).map_err(|_| Refusal::from(Status::NoEntry))?;
        ok_reply(req, req.header.length, &[], reply)
    }

    /// RpcOffload's inline path: a write of at most
    /// `copy_inline_max_bytes`, while the engine is idle, is copied here
    /// by the engine's own copy (non-temporal stores + drain), skipping the
    /// hand-off to a helper that may be asleep. Idle means no copy is
    /// outstanding, so none can overlap (the engine checks again). True
    /// if copied.
    fn copy_inline(&mut self, at: u64, payload: &[u8]) -> bool {
        let limit = self.config.copy_inline_max_bytes;
        let Some(engine) = self.engine.as_mut() else { return false };
        if payload.len() > limit || engine.outstanding() > 0 {
            return false;
        }
        if let Err(error) = engine.copy_inline(at, payload) {
            panic!("inline copy refused after the server's checks: {error}");
        }
        self.inlined += 1;
        true
    }

    /// RpcOffload writes copied inline so far (see [`ServerConfig::copy_inline_max_bytes`]).
    pub fn offloads_inlined(&self) -> u64 {
        self.inlined
    }

    /// The largest RpcOffload write this server copies inline when its
    /// engine is idle (0: none, or no engine).
    pub fn inline_max_bytes(&self) -> usize {
        if self.engine.is_some() { self.config.copy_inline_max_bytes } else { 0 }
    }

    /// Blocks until the engine has a free slot (and so a staging buffer).
    fn make_room(&mut self) {
        let engine = self.engine.as_ref().expect("an offload outcome needs an engine");
        if engine.outstanding() == engine.depth() {
            self.wait_one();
        }
    }

    /// Blocks until no outstanding copy overlaps `[at, at + len)`.
    fn wait_conflicts(&mut self, at: u64, len: u64) {
        while self.engine.as_ref().is_some_and(|e| e.overlapping(at, len).is_some()) {
            self.wait_one();
        }
    }

    /// Blocks until at least one copy completes, and collects it.
    fn wait_one(&mut self) {
        let engine = self.engine.as_mut().expect("waiting needs an engine");
        assert!(engine.outstanding() > 0, "waiting with nothing outstanding");
        let before = engine.outstanding();
        while self.engine.as_ref().expect("engine").outstanding() == before {
            let ready = self.engine.as_mut().expect("engine").wait(PATIENCE);
            assert!(ready, "copy engine made no progress in {PATIENCE:?}: helper stuck or dead");
            self.collect();
        }
    }

    /// Turns finished copies into ready replies and recycles their buffers.
    fn collect(&mut self) {
        let Some(engine) = self.engine.as_mut() else { return };
        engine.poll_completions(&mut self.done);
        for completion in self.done.drain(..) {
            let at = self.pending.iter().position(|p| p.0 == completion.ticket);
            let (ticket, client, request_id) = self.pending.swap_remove(at.expect("a pending reply per copy"));
            let len = completion.buffer.len() as u64;
            if self.staging.len() < self.config.copy_depth {
                self.staging.push(completion.buffer);
            } else {
                self.released.push(completion.buffer);
            }
            if self.clients.contains_key(&client) {
                let header = ResponseHeader {
                    opcode: Opcode::PersistWrite as u8,
                    status: Status::Ok,
                    request_id,
                    value: len,
                    detail: 0,
                };
                self.ready.push(Completed { client, ticket, reply: encode_response_header(&header, &[]) });
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Join the helpers (finishing queued copies) while the region is mapped.
        self.engine.take();
    }
}

fn log_mut(logs: &mut [Option<AppendLog>], id: u64) -> Result<&mut AppendLog, Refusal> {
    let slot = usize::try_from(id).ok().and_then(|i| logs.get_mut(i));
    slot.and_then(|l| l.as_mut()).ok_or(Refusal::from(Status::UnknownLog))
}

fn ok_header(req: Request<'_>, value: u64) -> ResponseHeader {
    ResponseHeader { opcode: req.header.opcode as u8, status: Status::Ok, request_id: req.header.request_id, value, detail: 0 }
}

fn ok_reply(req: Request<'_>, value: u64, payload: &[u8], reply: &mut Vec<u8>) -> Handled {
    encode_response(&ok_header(req, value), payload, reply);
    Ok(Outcome::Reply)
}

fn error_reply(opcode: u8, request_id: u64, refusal: Refusal, reply: &mut Vec<u8>) {
    assert!(refusal.status != Status::Ok, "an error reply needs an error status");
    let header = ResponseHeader { opcode, status: refusal.status, request_id, value: 0, detail: refusal.detail };
    encode_response(&header, &[], reply);
}

/// HELLO's code for a region kind.
pub fn kind_code(kind: RegionKind) -> u8 {
    match kind {
        RegionKind::FsDax => 0,
        RegionKind::DevDax => 1,
        RegionKind::File => 2,
        RegionKind::Emulated => 3,
    }
}

/// HELLO's code for a persistence domain.
pub fn domain_code(domain: PersistenceDomain) -> u8 {
    match domain {
        PersistenceDomain::CpuCache => 0,
        PersistenceDomain::MemoryController => 1,
        PersistenceDomain::PageCache => 2,
        PersistenceDomain::ProcessOnly => 3,
    }
}

#[cfg(test)]
mod tests;
