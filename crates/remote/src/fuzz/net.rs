//! The network targets: the same generator and model driving a server over
//! a [`Transport`] with raw calls — each request's header bytes as the
//! call's header and its payload as the call's payload, as `client/net.rs`
//! sends them, so malformed requests reach the server — in windows of
//! pipelined requests on one connection at a time.
//!
//! Invariants:
//! - Four connections are opened one after another (each completes a
//!   HELLO before the next connects), so a fresh server numbers them 0..4;
//!   a [`NetServer`] that can grant gives them [`RIGHTS`] in that order,
//!   and each connection's next HELLO proves it (the body states the rights).
//! - Within a window, requests take effect in send order (the transport's
//!   per-connection order); windows on different connections never overlap
//!   in time, so the model's order is the server's.
//! - Every wait is bounded by [`HANG_LIMIT`]; a silent server is asked
//!   whether it died ([`NetServer::dead`]) before the run fails as a hang.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pmem::Region;
use transport::{ConnId, Event, Output, Transport, UcxConfig, UcxTransport};

use super::direct::{corrupt, panic_message};
use super::gen::Request;
use super::model::{op, Expected, Serving};
use super::session::{Session, RIGHTS};
use super::{Failure, FailureKind, FuzzConfig, Report, HANG_LIMIT};
use crate::event_loop::{client_id, register_data_area, serve};
use crate::pool::PoolConfig;
use crate::proto::{DEFAULT_MAX_PAYLOAD_BYTES, RIGHT_READ, RIGHT_WRITE};
use crate::server::{Server, ServerConfig};

/// Bytes of the pool a [`ThreadServer`] formats (as `pmwire check fuzz` runs `pmwire serve`).
pub const NET_REGION_BYTES: u64 = 16 << 20;
/// Empty polls before a wait blocks on the transport: few, because on a
/// small machine the server needs the CPU the client would spin on
/// (measured on 2 cores: 4 polls give tcp 1.9x and sm 1.3x the rate of 4096).
const SPIN_POLLS: u32 = 4;
/// Windows between two progress reports.
const PROGRESS_EVERY: u64 = 256;

/// A server under test over the network.
pub trait NetServer {
    /// Its name in reports.
    fn name(&self) -> String;
    /// What it states about itself (HELLO's derivable part).
    fn serving(&self) -> Serving;
    /// Gives connection `i` (the server's numbering) `rights[i]`; `Ok(false)`
    /// if this server cannot grant (every connection then has both rights).
    fn grant(&mut self, rights: &[u8]) -> Result<bool, String>;
    /// The region file the server maps (a tmpfs file: reading it reads the
    /// server's bytes).
    fn pool_path(&self) -> &Path;
    /// Why the server is gone, if it is.
    fn dead(&mut self) -> Option<String>;
}

/// The UCX configuration for `tls` (`tcp`, or `sm`: shared memory with tcp
/// for connection set-up) on the loopback device.
pub fn ucx_config(tls: &str) -> Option<UcxConfig> {
    let config = match tls {
        "tcp" => UcxConfig::tls("tcp"),
        "sm" => UcxConfig::shared_memory(),
        _ => return None,
    };
    Some(config.with_var("NET_DEVICES", "lo"))
}

/// Fuzzes `server`, reached at `addr` through `transport`, until `config`'s
/// budget is spent; `progress` sees the counts now and then.
pub fn run_net<T: Transport>(
    config: &FuzzConfig,
    transport: &mut T,
    addr: &T::Addr,
    server: &mut dyn NetServer,
    progress: &mut dyn FnMut(&Report),
) -> Result<Report, Failure> {
    assert!((1..=32).contains(&config.window), "window of {} outside 1..=32", config.window);
    let image = read_image(config, server)?;
    let session = Session::new(config, &server.name(), &image, server.serving())?;
    let mut run = NetRun { t: transport, server, session, conns: Vec::new(), rights: [RIGHT_READ | RIGHT_WRITE; 4], config: config.clone() };
    let started = Instant::now();
    let result = run.set_up(addr).and_then(|()| run.fuzz(started, progress));
    for conn in std::mem::take(&mut run.conns) {
        run.t.close(conn);
    }
    drain(run.t);
    result.map(|()| {
        run.session.report.elapsed = started.elapsed();
        run.session.report.clone()
    })
}

fn read_image(config: &FuzzConfig, server: &dyn NetServer) -> Result<Vec<u8>, Failure> {
    std::fs::read(server.pool_path()).map_err(|e| Failure {
        target: server.name(),
        seed: config.seed,
        request: 0,
        kind: FailureKind::Setup,
        detail: format!("cannot read the pool file {}: {e}", server.pool_path().display()),
    })
}

/// Polls for a while so closes reach the peer (bounded).
fn drain<T: Transport>(t: &mut T) {
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(200);
    while Instant::now() < deadline {
        t.poll(&mut events, 64);
        events.clear();
        let _ = t.wait(Duration::from_millis(5));
    }
}

/// A reply as received: header bytes, payload bytes.
type Reply = (Vec<u8>, Vec<u8>);

struct NetRun<'a, T: Transport> {
    t: &'a mut T,
    server: &'a mut dyn NetServer,
    session: Session,
    conns: Vec<ConnId>,
    rights: [u8; 4],
    config: FuzzConfig,
}

impl<T: Transport> NetRun<'_, T> {
    /// Connects, pins HELLO, grants the rights and proves them, sets the
    /// canaries and the baseline.
    fn set_up(&mut self, addr: &T::Addr) -> Result<(), Failure> {
        let rw = RIGHT_READ | RIGHT_WRITE;
        for i in 0..RIGHTS.len() {
            let conn = self.t.connect(addr).map_err(|e| self.session.fail(FailureKind::Setup, format!("connect: {e}")))?;
            self.conns.push(conn);
            let pair = self.session.fixed(rw, op::HELLO, 0, 0, Vec::new());
            let reply = self.exchange(i, std::slice::from_ref(&pair))?.pop().expect("one reply");
            let request = pair.0;
            if i == 0 {
                self.session.pin_hello(rw, &reply.1)?;
            }
            let expected = self.session.model.predict(rw, &request.header, &request.payload);
            self.session.check_reply(&request, &expected, &reply.0, &reply.1)?;
        }
        let granted = self.server.grant(&RIGHTS).map_err(|e| self.session.fail(FailureKind::Setup, format!("grant: {e}")))?;
        if granted {
            self.rights = RIGHTS;
        }
        for i in 0..RIGHTS.len() {
            let (request, expected) = self.session.fixed(self.rights[i], op::HELLO, 0, 0, Vec::new());
            self.window(i, vec![(request, expected)])?;
        }
        let rw_conn = self.rights.iter().position(|&r| r == rw).expect("one connection holds both rights");
        for pair in self.session.canary_requests() {
            self.window(rw_conn, vec![pair])?;
        }
        let image = read_image(&self.config, self.server)?;
        self.session.set_baseline(image)?;
        if let Some(at) = self.session.planted_corruption() {
            corrupt(self.server.pool_path(), at);
        }
        Ok(())
    }

    fn fuzz(&mut self, started: Instant, progress: &mut dyn FnMut(&Report)) -> Result<(), Failure> {
        let mut windows = 0u64;
        while !self.session.done(started) {
            let conn = self.session.client_slot(false);
            let left = self.config.max_requests.saturating_sub(self.session.report.requests).max(1);
            let size = (1 + self.session.gen.below(self.config.window as u64)).min(left) as usize;
            let mut batch = Vec::with_capacity(size);
            while batch.len() < size {
                let (request, expected) = self.session.next(self.rights[conn], false);
                batch.push((request, expected));
            }
            self.window(conn, batch)?;
            if self.session.checkpoint_due() {
                let image = read_image(&self.config, self.server)?;
                self.session.checkpoint(&image)?;
            }
            windows += 1;
            if windows.is_multiple_of(PROGRESS_EVERY) {
                self.session.report.elapsed = started.elapsed();
                progress(&self.session.report);
            }
        }
        let image = read_image(&self.config, self.server)?;
        self.session.checkpoint(&image)
    }

    /// Sends a window on connection `conn` and checks every reply.
    fn window(&mut self, conn: usize, batch: Vec<(Request, Expected)>) -> Result<(), Failure> {
        let replies = self.exchange(conn, &batch)?;
        for ((request, expected), (header, payload)) in batch.iter().zip(replies) {
            self.session.check_reply(request, expected, &header, &payload)?;
            self.t.recycle(payload);
        }
        Ok(())
    }

    /// Sends the requests of `batch` pipelined on connection `conn` and
    /// returns their replies (header, payload) in send order.
    fn exchange(&mut self, conn: usize, batch: &[(Request, Expected)]) -> Result<Vec<Reply>, Failure> {
        let id = self.conns[conn];
        for (k, (request, _)) in batch.iter().enumerate() {
            let mut payload = self.t.take_buffer(request.payload.len());
            payload.extend_from_slice(&request.payload);
            if let Err(e) = self.t.call(id, &request.header, payload, k as u64) {
                return Err(self.broken(format!("call refused ({e}) for request {request}")));
            }
        }
        let mut replies: Vec<Option<Reply>> = (0..batch.len()).map(|_| None).collect();
        let mut left = batch.len();
        let (mut last, mut empty) = (Instant::now(), 0u32);
        let mut events = Vec::new();
        while left > 0 {
            if self.t.poll(&mut events, 64) == 0 {
                empty += 1;
                if last.elapsed() > HANG_LIMIT {
                    let waiting = replies.iter().position(Option::is_none).expect("a reply is missing");
                    return Err(self.silent(&batch[waiting].0));
                }
                if empty > SPIN_POLLS {
                    let _ = self.t.wait(Duration::from_millis(5));
                }
                continue;
            }
            (last, empty) = (Instant::now(), 0);
            for event in events.drain(..) {
                let (token, header, payload) = self.reply_of(event, id)?;
                let slot = replies.get_mut(token as usize).filter(|r| r.is_none());
                let slot = slot.ok_or_else(|| self.session.fail(FailureKind::Transport, format!("a stray completion, token {token}")))?;
                *slot = Some((header, payload));
                left -= 1;
            }
        }
        Ok(replies.into_iter().map(|r| r.expect("every reply arrived")).collect())
    }

    /// The reply an event carries, or why the run fails.
    fn reply_of(&mut self, event: Event, id: ConnId) -> Result<(u64, Vec<u8>, Vec<u8>), Failure> {
        match event {
            Event::Completion(c) if c.conn == id => match c.result {
                Ok(Output::Response { header, payload }) => Ok((c.token, header, payload)),
                Ok(other) => Err(self.session.fail(FailureKind::Transport, format!("a call completed with {other:?}"))),
                Err(e) => Err(self.broken(format!("call {} failed: {e}", c.token))),
            },
            Event::Disconnected { conn, cause } => Err(self.broken(format!("{conn} disconnected ({cause:?})"))),
            other => Err(self.session.fail(FailureKind::Transport, format!("unexpected event {other:?}"))),
        }
    }

    /// The server crashed, or the transport broke.
    fn broken(&mut self, what: String) -> Failure {
        match self.server.dead() {
            Some(why) => self.session.fail(FailureKind::Crash, format!("the server died ({why}); {what}")),
            None => self.session.fail(FailureKind::Transport, what),
        }
    }

    /// No reply within the limit.
    fn silent(&mut self, waiting: &Request) -> Failure {
        match self.server.dead() {
            Some(why) => self.session.fail(FailureKind::Crash, format!("the server died ({why}); waiting for {waiting}")),
            None => self.session.fail(FailureKind::Hang, format!("no reply within {HANG_LIMIT:?} to {waiting}")),
        }
    }
}

enum Command {
    Grant(Vec<u8>),
    Stop,
}

/// `event_loop::serve` on a [`UcxTransport`] in a thread of this process,
/// over a fresh pool formatted as `pmwire serve` formats one (64 log slots,
/// a quarter of the region for logs). Between serving phases it can grant
/// rights to its connections.
pub struct ThreadServer {
    addr: SocketAddr,
    tls: String,
    copy_depth: usize,
    pause: Arc<AtomicBool>,
    commands: mpsc::Sender<Command>,
    acks: mpsc::Receiver<()>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl ThreadServer {
    /// Starts a server over UCX `tls` (`tcp` or `sm`) with a copy engine of
    /// `copy_depth` (0, or 1..=64), listening on 127.0.0.1.
    pub fn start(tls: &str, copy_depth: usize) -> Result<ThreadServer, String> {
        let ucx = ucx_config(tls).ok_or_else(|| format!("unknown transport '{tls}' (tcp, sm)"))?;
        let dir = tempfile::tempdir_in("/dev/shm").map_err(|e| format!("temporary directory: {e}"))?;
        let path = dir.path().join("pool");
        let pause = Arc::new(AtomicBool::new(false));
        let (commands, command_rx) = mpsc::channel();
        let (ack_tx, acks) = mpsc::channel();
        let (ready_tx, ready) = mpsc::channel();
        let (thread_path, thread_pause) = (path.clone(), pause.clone());
        let thread = std::thread::Builder::new().name(format!("fuzz-serve-{tls}")).spawn(move || {
            let started = start_server(&ucx, &thread_path, copy_depth);
            let (mut server, mut transport) = match started {
                Ok((server, transport, addr)) => {
                    let _ = ready_tx.send(Ok(addr));
                    (server, transport)
                }
                Err(e) => return drop(ready_tx.send(Err(e))),
            };
            serve_phases(&mut server, &mut transport, &thread_pause, &command_rx, &ack_tx);
        });
        let thread = thread.map_err(|e| format!("spawn: {e}"))?;
        let addr = ready.recv_timeout(Duration::from_secs(30)).map_err(|e| format!("the server did not start: {e}"))??;
        Ok(ThreadServer { addr, tls: tls.to_string(), copy_depth, pause, commands, acks, thread: Some(thread), path, _dir: dir })
    }

    /// The listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the server (after its offloaded writes) and joins the thread.
    pub fn stop(mut self) -> Result<(), String> {
        self.halt()
    }

    fn halt(&mut self) -> Result<(), String> {
        self.pause.store(true, Ordering::Release);
        let _ = self.commands.send(Command::Stop);
        match self.thread.take().map(JoinHandle::join) {
            Some(Err(panic)) => Err(panic_message(panic.as_ref())),
            _ => Ok(()),
        }
    }
}

impl Drop for ThreadServer {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

fn start_server(ucx: &UcxConfig, path: &Path, copy_depth: usize) -> Result<(Server, UcxTransport, SocketAddr), String> {
    let mut transport = UcxTransport::new(ucx).map_err(|e| format!("transport: {e}"))?;
    let addr = transport.listen("127.0.0.1:0".parse().expect("an address")).map_err(|e| format!("listen: {e}"))?;
    let region = Region::create(path, NET_REGION_BYTES).map_err(|e| format!("region: {e}"))?;
    let pool = PoolConfig { region_id: 1, dir_slots: 64, log_area_bytes: (NET_REGION_BYTES / 4) & !4095 };
    let config = ServerConfig { copy_depth, copy_threads: 1, ..ServerConfig::default() };
    let mut server = Server::format(region, pool, config).map_err(|e| format!("server: {e}"))?;
    register_data_area(&mut server, &mut transport).map_err(|e| format!("register: {e}"))?;
    Ok((server, transport, addr))
}

/// Serves until paused; then grants, or stops.
fn serve_phases(server: &mut Server, transport: &mut UcxTransport, pause: &AtomicBool, commands: &mpsc::Receiver<Command>, acks: &mpsc::Sender<()>) {
    loop {
        serve(server, transport, pause);
        match commands.recv() {
            Ok(Command::Grant(rights)) => {
                for (i, rights) in rights.into_iter().enumerate() {
                    server.grant(client_id(ConnId(i as u32)), rights);
                }
                pause.store(false, Ordering::Release);
                let _ = acks.send(());
            }
            Ok(Command::Stop) | Err(_) => return,
        }
    }
}

impl NetServer for ThreadServer {
    fn name(&self) -> String {
        format!("{} (event_loop::serve in a thread, copy engine depth {})", self.tls, self.copy_depth)
    }

    fn serving(&self) -> Serving {
        Serving { max_payload: DEFAULT_MAX_PAYLOAD_BYTES, require_payload_crc: false, copy_engine: self.copy_depth > 0, pin: None }
    }

    fn grant(&mut self, rights: &[u8]) -> Result<bool, String> {
        self.pause.store(true, Ordering::Release);
        self.commands.send(Command::Grant(rights.to_vec())).map_err(|_| "the server thread is gone".to_string())?;
        self.acks.recv_timeout(HANG_LIMIT).map_err(|e| format!("no grant acknowledgement: {e}"))?;
        Ok(true)
    }

    fn pool_path(&self) -> &Path {
        &self.path
    }

    fn dead(&mut self) -> Option<String> {
        if !self.thread.as_ref().is_some_and(|t| t.is_finished()) {
            return None;
        }
        Some(match self.thread.take().map(JoinHandle::join) {
            Some(Err(panic)) => format!("the server thread panicked: {}", panic_message(panic.as_ref())),
            _ => "the server thread returned".to_string(),
        })
    }
}

/// Starts a [`ThreadServer`] over `tls` and fuzzes it from this thread.
pub fn run_thread(config: &FuzzConfig, tls: &str, copy_depth: usize, progress: &mut dyn FnMut(&Report)) -> Result<Report, Failure> {
    let setup = |detail: String| Failure { target: tls.to_string(), seed: config.seed, request: 0, kind: FailureKind::Setup, detail };
    let mut server = ThreadServer::start(tls, copy_depth).map_err(setup)?;
    let ucx = ucx_config(tls).expect("checked by start");
    let mut transport = UcxTransport::new(&ucx).map_err(|e| setup(format!("client transport: {e}")))?;
    let addr = server.addr();
    let result = run_net(config, &mut transport, &addr, &mut server, progress);
    drop(transport);
    let stopped = server.stop();
    match (result, stopped) {
        (Ok(_), Err(panic)) => Err(setup(format!("the server thread panicked at stop: {panic}"))),
        (result, _) => result,
    }
}
