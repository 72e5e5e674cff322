//! The core target: requests straight into [`Server::handle`],
//! [`Server::handle_parts`] and [`Server::handle_owned`] (chosen per
//! request), offloaded writes completed through
//! [`Server::poll_completions`], on a pool in /dev/shm.
//!
//! Invariants:
//! - The run happens on a worker thread; the caller's thread watches it and
//!   fails the run as a hang if no progress is reported for twice
//!   [`HANG_LIMIT`] (the worker bounds its own waits by [`HANG_LIMIT`]).
//! - A server panic is caught at the call that raised it and reported with
//!   that request.
//! - Every offloaded write gets exactly one completion, checked like an
//!   immediate reply, except the writes of a client that was disconnected
//!   meanwhile: their completion may be dropped (`Server::disconnect`).
//! - Now and then the server is dropped and opened again on its pool
//!   (`Server::open`, which recovers every log): the model carries on, and
//!   the reopened pool must match it.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::Instant;

use pmem::{Media, Region, RegionOptions};

use super::gen::Request;
use super::model::{op, Expected, Serving};
use super::session::{Session, RIGHTS};
use super::{Failure, FailureKind, FuzzConfig, Report, HANG_LIMIT};
use crate::copy_engine::Ticket;
use crate::pool::PoolConfig;
use crate::proto::{DEFAULT_MAX_PAYLOAD_BYTES, RESPONSE_HEADER_BYTES, RIGHT_READ, RIGHT_WRITE};
use crate::server::{Action, ClientId, Completed, Server, ServerConfig};

/// Bytes of the region the core target formats.
const REGION_BYTES: u64 = 4 << 20;
/// Requests between two progress reports.
const PROGRESS_EVERY: u64 = 4096;
/// One request in this many reconnects its client first.
const RECONNECT_ONE_IN: u64 = 4000;
/// One request in this many restarts the server on its pool first.
const RESTART_ONE_IN: u64 = 50_000;
/// A client id no one connects: its requests have no rights.
const STRANGER: ClientId = 1 << 40;

/// The server the core target builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoreServer {
    /// Copy-engine depth (0: no engine, `OFFLOAD` is unsupported).
    pub copy_depth: usize,
    /// The server requires `PAYLOAD_CRC` on every payload.
    pub require_payload_crc: bool,
}

impl CoreServer {
    /// The target's name in reports.
    pub fn name(&self) -> String {
        let crc = if self.require_payload_crc { ", payload CRC required" } else { "" };
        format!("core (copy engine depth {}{crc})", self.copy_depth)
    }
}

enum Message {
    Progress(Box<Report>),
    Done(Box<Result<Report, Failure>>),
}

/// Fuzzes a server core built as `server` says, until `config`'s budget is
/// spent; `progress` sees the counts every few thousand requests.
pub fn run_core(config: &FuzzConfig, server: CoreServer, progress: &mut dyn FnMut(&Report)) -> Result<Report, Failure> {
    let (tx, rx) = mpsc::channel();
    let worker_config = config.clone();
    let worker = std::thread::Builder::new().name("fuzz-core".into()).spawn(move || {
        let result = CoreRun::start(&worker_config, server).and_then(|mut run| {
            run.progress = Some(tx.clone());
            run.fuzz()
        });
        let _ = tx.send(Message::Done(Box::new(result)));
    });
    let hang = |requests| Failure {
        target: server.name(),
        seed: config.seed,
        request: requests,
        kind: FailureKind::Hang,
        detail: format!("the core made no progress for {:?}", HANG_LIMIT * 2),
    };
    worker.map_err(|e| Failure { kind: FailureKind::Setup, detail: format!("cannot start the worker: {e}"), ..hang(0) })?;
    let mut seen = 0;
    loop {
        match rx.recv_timeout(HANG_LIMIT * 2) {
            Ok(Message::Progress(report)) => {
                seen = report.requests;
                progress(&report);
            }
            Ok(Message::Done(result)) => return *result,
            // The worker is stuck inside the server; it is left behind.
            Err(_) => return Err(hang(seen)),
        }
    }
}

/// An offloaded write awaiting its completion.
struct Pending {
    client: ClientId,
    request: Request,
    expected: Expected,
    /// Its client was disconnected since: the completion may never come.
    optional: bool,
}

struct CoreRun {
    server: Server,
    session: Session,
    /// Connected ids, by slot of [`RIGHTS`].
    clients: [ClientId; 4],
    next_client: ClientId,
    pending: HashMap<Ticket, Pending>,
    reply: Vec<u8>,
    done: Vec<Completed>,
    progress: Option<mpsc::Sender<Message>>,
    server_config: ServerConfig,
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

impl CoreRun {
    fn start(config: &FuzzConfig, target: CoreServer) -> Result<CoreRun, Failure> {
        let setup = |detail: String| Failure { target: target.name(), seed: config.seed, request: 0, kind: FailureKind::Setup, detail };
        let dir = tempfile::tempdir_in("/dev/shm").map_err(|e| setup(format!("temporary directory: {e}")))?;
        let path = dir.path().join("pool");
        let region = Region::create(&path, REGION_BYTES).map_err(|e| setup(format!("region: {e}")))?;
        let pool = PoolConfig { region_id: (config.seed as u32) | 1, dir_slots: 16, log_area_bytes: 1 << 20 };
        let server_config = ServerConfig {
            require_payload_crc: target.require_payload_crc,
            copy_depth: target.copy_depth,
            copy_threads: target.copy_depth.clamp(1, 2),
            ..ServerConfig::default()
        };
        let mut server = Server::format(region, pool, server_config.clone()).map_err(|e| setup(format!("server: {e}")))?;
        let clients = [1, 2, 3, 4];
        connect_all(&mut server, &clients);
        let serving = Serving {
            max_payload: DEFAULT_MAX_PAYLOAD_BYTES,
            require_payload_crc: target.require_payload_crc,
            copy_engine: target.copy_depth > 0,
            pin: None,
        };
        let session = Session::new(config, &target.name(), &image(&server), serving)?;
        Ok(CoreRun {
            server,
            session,
            clients,
            next_client: 100,
            pending: HashMap::new(),
            reply: Vec::new(),
            done: Vec::new(),
            progress: None,
            server_config,
            _dir: dir,
            path,
        })
    }

    fn fuzz(mut self) -> Result<Report, Failure> {
        let started = Instant::now();
        self.set_up()?;
        while !self.session.done(started) {
            self.step()?;
            self.collect()?;
            if self.session.checkpoint_due() {
                self.quiesce()?;
                self.session.checkpoint(&image(&self.server))?;
            }
            if self.session.report.requests.is_multiple_of(PROGRESS_EVERY) {
                self.session.report.elapsed = started.elapsed();
                if let Some(tx) = &self.progress {
                    let _ = tx.send(Message::Progress(Box::new(self.session.report.clone())));
                }
            }
        }
        self.quiesce()?;
        self.session.checkpoint(&image(&self.server))?;
        self.session.report.elapsed = started.elapsed();
        Ok(self.session.report)
    }

    /// HELLO (pins what the model cannot derive), the canaries, the baseline.
    fn set_up(&mut self) -> Result<(), Failure> {
        let rw = RIGHT_READ | RIGHT_WRITE;
        let (request, _) = self.session.fixed(rw, op::HELLO, 0, 0, Vec::new());
        self.send(self.clients[3], &request, 0)?;
        self.session.pin_hello(rw, &self.reply[RESPONSE_HEADER_BYTES.min(self.reply.len())..])?;
        let expected = self.session.model.predict(rw, &request.header, &request.payload);
        self.check_immediate(&request, &expected)?;
        for (request, expected) in self.session.canary_requests() {
            self.send(self.clients[3], &request, 0)?;
            self.check_immediate(&request, &expected)?;
        }
        self.session.set_baseline(image(&self.server))?;
        if let Some(at) = self.session.planted_corruption() {
            corrupt(&self.path, at);
        }
        Ok(())
    }

    /// One request from a random client through a random entry point.
    fn step(&mut self) -> Result<(), Failure> {
        if self.session.gen.below(RESTART_ONE_IN) == 0 {
            self.restart()?;
        }
        let slot = self.session.client_slot(true);
        if slot < 4 && self.session.gen.below(RECONNECT_ONE_IN) == 0 {
            self.reconnect(slot);
        }
        let (client, rights) = if slot < 4 { (self.clients[slot], RIGHTS[slot]) } else { (STRANGER, 0) };
        let entry = self.session.gen.below(3);
        let (request, expected) = self.session.next(rights, entry == 0);
        match self.send(client, &request, entry)? {
            // A small RpcOffload may be copied inline when the engine happens
            // to be idle (timing the model cannot see): then it replies at
            // once, with the reply its completion would carry.
            Action::Reply if expected.deferred && request.payload.len() > self.server.inline_max_bytes() => {
                Err(self.session.fail(FailureKind::Reply, format!("request {request}\n    replied at once; the model expects an offloaded write")))
            }
            Action::Reply => self.check_immediate(&request, &expected),
            Action::Offloaded(_) if !expected.deferred => {
                Err(self.session.fail(FailureKind::Reply, format!("request {request}\n    was offloaded; the model expects {:?} at once", expected.status)))
            }
            Action::Offloaded(ticket) => {
                let pending = Pending { client, request, expected, optional: false };
                if self.pending.insert(ticket, pending).is_some() {
                    return Err(self.session.fail(FailureKind::Reply, format!("ticket {ticket} handed out twice")));
                }
                Ok(())
            }
        }
    }

    /// Hands `request` to the server through entry point `entry` (0:
    /// `handle`, 1: `handle_parts`, 2: `handle_owned`); a panic fails the run.
    fn send(&mut self, client: ClientId, request: &Request, entry: u64) -> Result<Action, Failure> {
        let (server, reply) = (&mut self.server, &mut self.reply);
        let outcome = catch_unwind(AssertUnwindSafe(|| match entry {
            0 => {
                let mut msg = request.header.clone();
                msg.extend_from_slice(&request.payload);
                server.handle(client, &msg, reply)
            }
            1 => server.handle_parts(client, &request.header, &request.payload, reply),
            _ => server.handle_owned(client, &request.header, request.payload.clone(), reply).0,
        }));
        outcome.map_err(|panic| {
            let message = panic_message(panic.as_ref());
            self.session.fail(FailureKind::Crash, format!("the server panicked ({message}) on request {request}"))
        })
    }

    fn check_immediate(&mut self, request: &Request, expected: &Expected) -> Result<(), Failure> {
        let split = RESPONSE_HEADER_BYTES.min(self.reply.len());
        let (header, payload) = self.reply.split_at(split);
        self.session.check_reply(request, expected, header, payload)
    }

    /// Disconnects the client in `slot` and connects it again under a new id.
    fn reconnect(&mut self, slot: usize) {
        let old = self.clients[slot];
        self.server.disconnect(old);
        self.pending.values_mut().filter(|p| p.client == old).for_each(|p| p.optional = true);
        self.next_client += 1;
        self.clients[slot] = self.next_client;
        self.server.connect(self.next_client);
        self.server.grant(self.next_client, RIGHTS[slot]);
    }

    /// Drops the server once its copies are done and opens its pool again:
    /// every log recovers, the model must still hold.
    fn restart(&mut self) -> Result<(), Failure> {
        self.quiesce()?;
        let options = RegionOptions { size: Some(REGION_BYTES), ..RegionOptions::default() };
        let failed = |what: String| self.session.fail(FailureKind::State, format!("the pool does not reopen: {what}"));
        let region = Region::open(&self.path, options).map_err(|e| failed(e.to_string()))?;
        let reopened = catch_unwind(AssertUnwindSafe(|| Server::open(region, self.server_config.clone())));
        let reopened = reopened.map_err(|p| self.session.fail(FailureKind::Crash, format!("Server::open panicked: {}", panic_message(p.as_ref()))))?;
        self.server = reopened.map_err(|e| failed(e.to_string()))?;
        self.clients = self.clients.map(|id| id + 1000);
        connect_all(&mut self.server, &self.clients);
        self.session.reopened(&image(&self.server))
    }

    /// Checks the completions that are ready (never blocks).
    fn collect(&mut self) -> Result<usize, Failure> {
        let polled = catch_unwind(AssertUnwindSafe(|| self.server.poll_completions(&mut self.done)));
        let n = polled.map_err(|p| self.session.fail(FailureKind::Crash, format!("poll_completions panicked: {}", panic_message(p.as_ref()))))?;
        for completed in std::mem::take(&mut self.done) {
            let Some(pending) = self.pending.remove(&completed.ticket) else {
                return Err(self.session.fail(FailureKind::Reply, format!("a completion for unknown ticket {}", completed.ticket)));
            };
            if completed.client != pending.client {
                let detail = format!("ticket {} completed for client {}, sent by {}", completed.ticket, completed.client, pending.client);
                return Err(self.session.fail(FailureKind::Reply, detail));
            }
            self.session.check_reply(&pending.request, &pending.expected, &completed.reply, &[])?;
        }
        Ok(n)
    }

    /// Waits (bounded) until every offloaded write has completed.
    fn quiesce(&mut self) -> Result<(), Failure> {
        let deadline = Instant::now() + HANG_LIMIT;
        while self.server.pending() > 0 || self.pending.values().any(|p| !p.optional) {
            if self.collect()? > 0 {
                continue;
            }
            if self.server.pending() == 0 {
                let lost: Vec<_> = self.pending.values().filter(|p| !p.optional).map(|p| p.request.to_string()).collect();
                return Err(self.session.fail(FailureKind::Reply, format!("no completion for {} offloaded writes: {lost:?}", lost.len())));
            }
            if Instant::now() >= deadline {
                return Err(self.session.fail(FailureKind::Hang, format!("{} offloaded writes not done within {HANG_LIMIT:?}", self.server.pending())));
            }
            if !self.server.arm_completions() {
                wait_readable(self.server.completion_fd().expect("pending copies need an engine"));
            }
        }
        self.pending.clear();
        Ok(())
    }
}

/// Connects `clients` and grants them [`RIGHTS`] in order.
fn connect_all(server: &mut Server, clients: &[ClientId; 4]) {
    for (client, rights) in clients.iter().zip(RIGHTS) {
        server.connect(*client);
        server.grant(*client, rights);
    }
}

/// The whole region, read through the mapping.
fn image(server: &Server) -> Vec<u8> {
    let region = server.region();
    let mut all = vec![0u8; region.len() as usize];
    region.read(0, &mut all);
    all
}

/// Overwrites one byte of the region file behind the server's back (a
/// planted fault: the mapping is shared, so the server's bytes change).
pub(crate) fn corrupt(path: &std::path::Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).expect("open the region file");
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, at).expect("read the region file");
    file.write_all_at(&[!byte[0]], at).expect("write the region file");
}

/// Blocks until `fd` is readable or 100 ms pass.
fn wait_readable(fd: std::os::fd::RawFd) {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd on the stack.
    unsafe { libc::poll(&mut pfd, 1, 100) };
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned()).unwrap_or_else(|| "non-string panic".into())
}
