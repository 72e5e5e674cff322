//! [`Client`]: the client core driven over the network seam
//! ([`transport::Transport`]), with blocking calls for each operation and a
//! pipelined interface ([`Client::submit_write`], [`Client::wait_any`]) for
//! bulk writers and log clients.
//!
//! How each [`Method`] is carried out (one connection, one endpoint):
//!
//! | method | operations | round trips |
//! |---|---|---|
//! | `Rpc` | PERSIST_WRITE call | 1 |
//! | `RpcOffload` | PERSIST_WRITE call with `OFFLOAD` | 1 |
//! | `OneSidedFlush` | put + transport flush (the put is complete at the target), then a FLUSH call | 2 |
//! | `OneSidedReadAfterWrite` | put, fence, get of the range's last ≤ 8 bytes, posted together; done when the get completes (seed 004 H9) | 1 |
//! | `ReadAfterWriteTwoTrips` | put + transport flush (what "wait for the put" means with remote completion, as an RDMA write's completion does), then the get | 2 |
//! | `Auto` | the method [`AutoSelector`] chose for the size class, among those giving what is asked; now and then a probe of another (≤ 2% of writes) | – |
//!
//! Invariants:
//! - Every operation started gets exactly one completion (the transport's
//!   contract); completions not yet claimed are kept in `done`, bounded by
//!   the window.
//! - A write that needs more than its method gives on this target is
//!   refused before anything is sent ([`MethodError::Weaker`]).
//! - Every wait is bounded by [`ClientOptions::timeout`]; it polls for at
//!   most [`ClientOptions::poll`] (a bounded budget) and then sleeps in
//!   [`Transport::wait`], so an idle client never spins.
//!
//! Waits: a lone wait (at most one request in flight, a closed loop) polls
//! for the longer of [`ClientOptions::poll`] and the [`ReplyPacer`]'s
//! stretch, twice the recent mean wait when that is at most
//! [`ReplyPacer::MAX_SPIN`]. Without it, one late reply could leave the
//! client and the server each blocking after 30 µs and each write paying
//! two wake-ups for as long as they outlast the other end's poll. A
//! [`PollBudget::BLOCK`] budget is never stretched.

use std::time::{Duration, Instant};

use thiserror::Error;
use transport::{AttachError, ConnId, ConnectError, Event, OpError, Output, RegionDescriptor, RemoteRegionId, Transport, WaitError};

use super::{ClientConfig, ClientCore, IssueError, MethodError, RemoteError, ResponseError};
use crate::auto::{AutoParams, AutoSelector, AutoStatus};
use crate::calibration::{Calibration, CalibrationBuilder, CalibrationError, TargetKey};
use crate::event_loop::PollBudget;
use reactor::ReplyPacer;
use crate::proto::{Guarantee, Method, Opcode};
use pmwire_log::LogConfig;

/// Tokens of one-sided operations have this bit; RPC tokens are request ids.
const ONE_SIDED: u64 = 1 << 63;

/// How long the client polls during a *measured* write (calibration, and
/// the writes `Auto` times: its probes and their references) before it
/// blocks. With the default 30 µs, a write slower than that (a probe of
/// a slow method) lets the client block; on a loaded 2-core guest its
/// wake-up then outlasts the server's own 30 µs of polling, the server
/// blocks too, and each later write pays two wake-ups (80–95 µs here, for
/// every method) until a wake-up happens to be quick. Measured writes
/// spin through instead, so they measure the methods and do not start
/// that chain; bounded, so a stuck write still blocks.
const MEASURED_SPIN: Duration = Duration::from_millis(1);

/// How a [`Client`] behaves.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Requests and one-sided operations in flight at most (≤ the transport's window).
    pub window: usize,
    /// Send payload checksums.
    pub payload_crc: bool,
    /// Longest any single wait for a completion lasts.
    pub timeout: Duration,
    /// What a durable write must give (normally `Persistence`).
    pub required: Guarantee,
    /// How long a wait keeps polling before it blocks on the transport.
    pub poll: PollBudget,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions { window: 32, payload_crc: true, timeout: Duration::from_secs(30), required: Guarantee::Persistence, poll: PollBudget::default() }
    }
}

/// Why a client operation failed.
#[derive(Debug, Error)]
pub enum ClientError {
    /// Connecting failed.
    #[error("connect: {0}")]
    Connect(#[from] ConnectError),
    /// The server's rkey could not be attached.
    #[error("attach the server's data area: {0}")]
    Attach(#[from] AttachError),
    /// The method cannot give what is asked here (nothing was sent).
    #[error(transparent)]
    Method(#[from] MethodError),
    /// The request could not be built (nothing was sent).
    #[error(transparent)]
    Issue(#[from] IssueError),
    /// The server refused the request.
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// The response did not match or decode.
    #[error(transparent)]
    Response(#[from] ResponseError),
    /// The transport failed the operation.
    #[error("transport: {0}")]
    Op(#[from] OpError),
    /// Waiting on the transport failed.
    #[error("wait: {0}")]
    Wait(#[from] WaitError),
    /// No completion within the timeout.
    #[error("no completion within {0:?}")]
    Timeout(Duration),
    /// The server states no one-sided access (no rkey in HELLO).
    #[error("the server exports no one-sided access")]
    NoOneSided,
    /// A calibration cannot be used here.
    #[error(transparent)]
    Calibration(#[from] CalibrationError),
}

/// What a durable write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteOutcome {
    /// The concrete method used (Auto resolved).
    pub method: Method,
    /// What the write guarantees now.
    pub guarantee: Guarantee,
}

/// A connection to one exported region (see the module docs).
pub struct Client<T: Transport> {
    transport: T,
    conn: ConnId,
    core: ClientCore,
    remote: Option<RemoteRegionId>,
    /// The server as addressed (part of a calibration's target).
    server: String,
    auto: Option<AutoSelector>,
    options: ClientOptions,
    events: Vec<Event>,
    done: Vec<(u64, Result<Output, OpError>)>,
    msg: Vec<u8>,
    next_one_sided: u64,
    /// Stretches the poll budget of a lone wait to the round trips seen
    /// (see [`ReplyPacer`]); pipelined waits keep the base budget.
    pacer: ReplyPacer,
}

impl<T: Transport> Client<T> {
    /// Connects, says HELLO and attaches the data area if the server exports it.
    pub fn connect(transport: T, addr: &T::Addr, region_id: u32, key: u64) -> Result<Client<T>, ClientError>
    where
        T::Addr: std::fmt::Debug,
    {
        Client::connect_with(transport, addr, region_id, key, ClientOptions::default())
    }

    /// [`connect`](Client::connect) with options.
    pub fn connect_with(
        mut transport: T,
        addr: &T::Addr,
        region_id: u32,
        key: u64,
        options: ClientOptions,
    ) -> Result<Client<T>, ClientError>
    where
        T::Addr: std::fmt::Debug,
    {
        let conn = transport.connect(addr)?;
        let config = ClientConfig { region_id, key, window: options.window, payload_crc: options.payload_crc };
        let mut core = ClientCore::new(config);
        core.set_detached_payload(true);
        let mut client = Client {
            transport,
            conn,
            core,
            remote: None,
            server: format!("{addr:?}"),
            auto: None,
            options,
            events: Vec::new(),
            done: Vec::new(),
            msg: Vec::new(),
            next_one_sided: 0,
            pacer: ReplyPacer::new(),
        };
        client.core.hello_request(&mut client.msg)?;
        client.rpc(Vec::new(), None)?;
        let hello = client.core.hello().expect("HELLO stored");
        if !hello.rkey.is_empty() && client.transport.reach() != transport::Reach::Off {
            let desc = RegionDescriptor { addr: hello.remote_addr, len: hello.data_bytes, rkey: hello.rkey.clone() };
            client.remote = Some(client.transport.attach(conn, &desc)?);
        }
        Ok(client)
    }

    /// The server's HELLO.
    pub fn hello(&self) -> &crate::proto::Hello {
        self.core.hello().expect("connected clients have a HELLO")
    }

    /// The transport (for probes).
    pub fn transport(&mut self) -> &mut T {
        &mut self.transport
    }

    /// This connection's target over `transport` (a label the caller
    /// gives: `tcp`, `sm`): the server, what is required, and what its
    /// HELLO stated.
    pub fn target(&self, transport: &str) -> TargetKey {
        TargetKey::new(&self.server, transport, self.hello(), self.options.required)
    }

    /// Uses `calibration` for `Method::Auto`, online evidence starting
    /// afresh. Refused (and the current one kept) if it was measured on
    /// another target: another server, or the server's guarantees, domain
    /// or limits changed since (the transport is the table's own label).
    pub fn set_calibration(&mut self, calibration: Calibration) -> Result<(), ClientError> {
        calibration.check_target(&self.target(&calibration.transport))?;
        self.auto = Some(AutoSelector::new(calibration, AutoParams::default())?);
        Ok(())
    }

    /// The calibration `Auto` started from, if any.
    pub fn calibration(&self) -> Option<&Calibration> {
        self.auto.as_ref().map(AutoSelector::calibration)
    }

    /// `Auto`'s current choice per size class and its evidence.
    pub fn auto_status(&self) -> Option<AutoStatus> {
        self.auto.as_ref().map(AutoSelector::status)
    }

    /// Decides how a write would be done (nothing is sent; `Auto` as it
    /// stands, without a probe).
    pub fn plan(&self, offset: u64, len: u64, method: Method) -> Result<super::WritePlan, MethodError> {
        self.core.plan_write(offset, len, method, self.options.required, self.auto.as_ref())
    }

    /// Writes `bytes` at `offset` of the data area by `method`; returns once
    /// the write gives what [`ClientOptions::required`] asks. `Auto` asks
    /// the selector, and times the writes it says to (the few before a
    /// probe, and the probe) to keep its evidence.
    pub fn write_persistent(&mut self, offset: u64, bytes: &[u8], method: Method) -> Result<WriteOutcome, ClientError> {
        if method != Method::Auto {
            return self.write_as(offset, bytes, method);
        }
        let len = bytes.len() as u64;
        let (core, required, attached) = (&self.core, self.options.required, self.remote.is_some());
        let allowed = |m: Method| (attached || !m.one_sided()) && core.plan_write(offset, len, m, required, None).is_ok();
        let pick = match self.auto.as_mut() {
            Some(auto) => auto.pick(len, allowed),
            None => None,
        };
        let Some(pick) = pick else {
            // Out of bounds, or no candidate: plan says which.
            self.plan(offset, len, Method::Auto)?;
            return Err(MethodError::NoCandidate { size: len, required }.into());
        };
        if !pick.timed {
            return self.write_as(offset, bytes, pick.method);
        }
        let (outcome, latency_ns) = self.measured(|c| c.write_as(offset, bytes, pick.method));
        if let (Ok(_), Some(auto)) = (&outcome, self.auto.as_mut()) {
            auto.record(pick, latency_ns);
        }
        outcome
    }

    /// Runs `write` polling for up to [`MEASURED_SPIN`], and times it.
    fn measured<R>(&mut self, write: impl FnOnce(&mut Self) -> R) -> (R, u64) {
        let saved = self.options.poll;
        self.options.poll = PollBudget { spin: saved.spin.max(MEASURED_SPIN), max_empty_polls: u32::MAX };
        let start = Instant::now();
        let result = write(self);
        let latency_ns = start.elapsed().as_nanos() as u64;
        self.options.poll = saved;
        (result, latency_ns)
    }

    /// [`write_persistent`](Client::write_persistent) by a concrete method.
    fn write_as(&mut self, offset: u64, bytes: &[u8], method: Method) -> Result<WriteOutcome, ClientError> {
        let plan = self.plan(offset, bytes.len() as u64, method)?;
        match plan.method {
            Method::Rpc | Method::RpcOffload => {
                let token = self.submit_rpc_write(offset, bytes, plan.method == Method::RpcOffload)?;
                self.wait_rpc(token, None)?;
            }
            Method::OneSidedFlush => {
                self.put_and_flush(offset, bytes)?;
                self.core.flush(offset, bytes.len() as u64, &mut self.msg)?;
                self.rpc(Vec::new(), None)?;
            }
            Method::OneSidedReadAfterWrite => {
                let remote = self.remote.ok_or(ClientError::NoOneSided)?;
                let put = self.start_put(offset, bytes)?;
                self.transport.fence()?;
                let get = self.start_probe_get(remote, offset, bytes.len() as u64)?;
                self.wait_op(put)?;
                self.wait_op(get)?;
            }
            Method::ReadAfterWriteTwoTrips => {
                let remote = self.remote.ok_or(ClientError::NoOneSided)?;
                self.put_and_flush(offset, bytes)?;
                let get = self.start_probe_get(remote, offset, bytes.len() as u64)?;
                self.wait_op(get)?;
            }
            Method::Auto => unreachable!("write_persistent resolves Auto"),
        }
        Ok(WriteOutcome { method: plan.method, guarantee: plan.guarantee })
    }

    /// A non-durable one-sided put, waited for locally only (the baseline).
    pub fn put(&mut self, offset: u64, bytes: &[u8]) -> Result<(), ClientError> {
        let token = self.start_put(offset, bytes)?;
        self.wait_op(token).map(|_| ())
    }

    /// Starts a one-sided put of `bytes` at `offset`; complete it with
    /// [`wait_any`](Client::wait_any) (value 0).
    pub fn submit_put(&mut self, offset: u64, bytes: &[u8]) -> Result<u64, ClientError> {
        self.start_put(offset, bytes)
    }

    /// Starts a PERSIST_WRITE; its completion's value is the bytes written.
    pub fn submit_rpc_write(&mut self, offset: u64, bytes: &[u8], offload: bool) -> Result<u64, ClientError> {
        let id = self.core.persist_write(offset, bytes, offload, &mut self.msg)?;
        let payload = self.buffer(bytes);
        self.send(id, payload)
    }

    /// Starts a READ of `len` bytes at `offset`; take its bytes with
    /// [`wait`](Client::wait). Requests of one connection take effect in
    /// the order they were sent, so a READ started after a write sees it.
    pub fn submit_read(&mut self, offset: u64, len: u64) -> Result<u64, ClientError> {
        let id = self.core.read(offset, len, &mut self.msg)?;
        self.send(id, Vec::new())
    }

    /// Waits for the started request `token`: its result value, and its
    /// reply payload (a READ's bytes) in `out` if given.
    pub fn wait(&mut self, token: u64, out: Option<&mut Vec<u8>>) -> Result<u64, ClientError> {
        self.wait_rpc(token, out)
    }

    /// Starts a LOG_APPEND; its completion's value is the LSN.
    pub fn submit_log_append(&mut self, log: u64, entry: &[u8]) -> Result<u64, ClientError> {
        let id = self.core.log_append(log, entry, &mut self.msg)?;
        let payload = self.buffer(entry);
        self.send(id, payload)
    }

    /// Starts a FLUSH RPC of `[offset, offset + len)`.
    pub fn submit_flush(&mut self, offset: u64, len: u64) -> Result<u64, ClientError> {
        let id = self.core.flush(offset, len, &mut self.msg)?;
        self.send(id, Vec::new())
    }

    /// Starts a transport flush: completes when every earlier one-sided
    /// operation is complete at the target (visible, not persistent).
    pub fn submit_transport_flush(&mut self) -> Result<u64, ClientError> {
        let token = self.one_sided_token();
        self.transport.flush(self.conn, token)?;
        Ok(token)
    }

    /// Operations in flight.
    pub fn outstanding(&self) -> usize {
        self.core.outstanding()
    }

    /// Waits for any started operation; returns its token and result value
    /// (bytes, LSN; 0 for one-sided operations).
    pub fn wait_any(&mut self) -> Result<(u64, Result<u64, ClientError>), ClientError> {
        let started = Instant::now();
        let deadline = started + self.options.timeout;
        let lone = self.lone_wait();
        while self.done.is_empty() {
            self.pump(deadline, lone)?;
        }
        if lone {
            self.pacer.record(started.elapsed());
        }
        let (token, result) = self.done.remove(0);
        Ok((token, self.finish(token, result, None)))
    }

    /// Durable flush of `[offset, offset + len)` (after one-sided puts).
    pub fn flush(&mut self, offset: u64, len: u64) -> Result<(), ClientError> {
        self.core.flush(offset, len, &mut self.msg)?;
        self.rpc(Vec::new(), None).map(|_| ())
    }

    /// READ of `buf.len()` bytes at `offset` into `buf`.
    pub fn read(&mut self, offset: u64, buf: &mut Vec<u8>) -> Result<(), ClientError> {
        let len = buf.len() as u64;
        self.core.read(offset, len, &mut self.msg)?;
        self.rpc(Vec::new(), Some(buf)).map(|_| ())
    }

    /// ATOMIC_WRITE8 of `value` at the 8 B aligned `offset`, persisted.
    pub fn atomic_write8(&mut self, offset: u64, value: u64) -> Result<(), ClientError> {
        self.core.atomic_write8(offset, value, &mut self.msg)?;
        self.rpc(Vec::new(), None).map(|_| ())
    }

    /// LOG_CREATE; returns the log id.
    pub fn log_create(&mut self, name: &[u8], config: &LogConfig) -> Result<u64, ClientError> {
        // The log spec is built by the core: take it from a whole message.
        self.core.set_detached_payload(false);
        let built = self.core.log_create(name, config, &mut self.msg);
        self.core.set_detached_payload(true);
        built?;
        let payload = self.msg.split_off(crate::proto::REQUEST_HEADER_BYTES);
        self.rpc(payload, None)
    }

    /// LOG_OPEN by name; returns the log id.
    pub fn log_open(&mut self, name: &[u8]) -> Result<u64, ClientError> {
        self.core.log_open(name, &mut self.msg)?;
        self.rpc(name.to_vec(), None)
    }

    /// LOG_APPEND; returns the entry's LSN once it is durable.
    pub fn log_append(&mut self, log: u64, entry: &[u8]) -> Result<u64, ClientError> {
        let token = self.submit_log_append(log, entry)?;
        self.wait_rpc(token, None)
    }

    /// LOG_READ of entry `lsn` into `entry`.
    pub fn log_read(&mut self, log: u64, lsn: u64, entry: &mut Vec<u8>) -> Result<(), ClientError> {
        self.core.log_read(log, lsn, &mut self.msg)?;
        self.rpc(Vec::new(), Some(entry)).map(|_| ())
    }

    /// LOG_TRUNCATE: durably drops every entry below `keep_from`.
    pub fn log_truncate(&mut self, log: u64, keep_from: u64) -> Result<(), ClientError> {
        self.core.log_truncate(log, keep_from, &mut self.msg)?;
        self.rpc(Vec::new(), None).map(|_| ())
    }

    /// A non-durable RPC the server discards: the network floor.
    pub fn discard(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.core.echo(bytes, true, &mut self.msg)?;
        let payload = self.buffer(bytes);
        self.rpc(payload, None).map(|_| ())
    }

    /// Measures every method that gives what is asked on this target at
    /// each size, `rounds` writes each at `offset`, and starts `Auto` from
    /// the table. Interleaved: each round writes once with every method at
    /// every size, in an order that rotates by round, so noise lands on all
    /// methods alike (see [`crate::calibration`]). `transport_name` labels
    /// the target (a table is valid only there). The writes put back the
    /// bytes read there first, so the data area keeps its content (unless
    /// another client writes the same range meanwhile).
    pub fn calibrate(&mut self, offset: u64, sizes: &[u64], rounds: usize, transport_name: &str) -> Result<&Calibration, ClientError> {
        assert!(rounds >= 1, "at least one round");
        let mut builder = CalibrationBuilder::default();
        let largest = sizes.iter().copied().max().unwrap_or(0);
        let original = self.read_range(offset, largest)?;
        let mut cells: Vec<(u64, Vec<Method>)> = Vec::with_capacity(sizes.len());
        for &size in sizes {
            let usable = |m: Method| self.plan(offset, size, m).is_ok() && (self.remote.is_some() || !m.one_sided());
            cells.push((size, Method::CONCRETE.into_iter().filter(|&m| usable(m)).collect()));
        }
        const WARM_UP_ROUNDS: usize = 2;
        for round in 0..WARM_UP_ROUNDS + rounds {
            for (size, methods) in &cells {
                for j in 0..methods.len() {
                    let method = methods[(round + j) % methods.len()];
                    let (written, latency_ns) = self.measured(|c| c.write_as(offset, &original[..*size as usize], method));
                    written?;
                    if round >= WARM_UP_ROUNDS {
                        builder.record_latency(*size, method, latency_ns);
                    }
                }
            }
        }
        let target = self.target(transport_name);
        self.auto = Some(AutoSelector::new(builder.finish(transport_name, Some(target)), AutoParams::default())?);
        Ok(self.calibration().expect("just set"))
    }

    /// Reads `[offset, offset + len)` in pieces the server takes.
    pub fn read_range(&mut self, offset: u64, len: u64) -> Result<Vec<u8>, ClientError> {
        let piece = self.hello().max_payload.clamp(1, crate::proto::MAX_PAYLOAD_BYTES) as u64;
        let mut out = Vec::with_capacity(len as usize);
        let mut buf = Vec::new();
        while (out.len() as u64) < len {
            let n = piece.min(len - out.len() as u64);
            buf.resize(n as usize, 0);
            self.read(offset + out.len() as u64, &mut buf)?;
            out.extend_from_slice(&buf);
        }
        Ok(out)
    }

    /// Closes the connection (bounded wait for it to go).
    pub fn close(mut self) {
        self.transport.close(self.conn);
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            self.transport.poll(&mut self.events, 64);
            if self.events.drain(..).any(|e| matches!(e, Event::Disconnected { .. })) {
                return;
            }
            let _ = self.transport.wait(Duration::from_millis(10));
        }
    }

    fn put_and_flush(&mut self, offset: u64, bytes: &[u8]) -> Result<(), ClientError> {
        let put = self.start_put(offset, bytes)?;
        let flush = self.submit_transport_flush()?;
        self.wait_op(put)?;
        self.wait_op(flush).map(|_| ())
    }

    fn start_put(&mut self, offset: u64, bytes: &[u8]) -> Result<u64, ClientError> {
        let remote = self.remote.ok_or(ClientError::NoOneSided)?;
        let token = self.one_sided_token();
        let buf = self.buffer(bytes);
        self.transport.put(self.conn, remote, offset, buf, token)?;
        Ok(token)
    }

    /// A get of the last ≤ 8 bytes of `[offset, offset + len)`.
    fn start_probe_get(&mut self, remote: RemoteRegionId, offset: u64, len: u64) -> Result<u64, ClientError> {
        let n = len.clamp(1, 8);
        let token = self.one_sided_token();
        let buf = self.buffer(&[0u8; 8][..n as usize]);
        self.transport.get(self.conn, remote, offset + len - n, buf, token)?;
        Ok(token)
    }

    fn one_sided_token(&mut self) -> u64 {
        self.next_one_sided += 1;
        ONE_SIDED | self.next_one_sided
    }

    fn buffer(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut buf = self.transport.take_buffer(bytes.len());
        buf.extend_from_slice(bytes);
        buf
    }

    /// Sends the request header in `msg` (request `id`) with `payload`.
    fn send(&mut self, id: u64, payload: Vec<u8>) -> Result<u64, ClientError> {
        assert!(id & ONE_SIDED == 0, "request ids stay below the one-sided bit");
        if let Err(e) = self.transport.call(self.conn, &self.msg, payload, id) {
            self.core.cancel(id);
            return Err(e.into());
        }
        Ok(id)
    }

    /// Sends the built request and waits for its result word.
    fn rpc(&mut self, payload: Vec<u8>, out: Option<&mut Vec<u8>>) -> Result<u64, ClientError> {
        let id = crate::proto::peek_request_id(&self.msg);
        let token = self.send(id, payload)?;
        self.wait_rpc(token, out)
    }

    fn wait_rpc(&mut self, token: u64, out: Option<&mut Vec<u8>>) -> Result<u64, ClientError> {
        let result = self.take(token)?;
        self.finish(token, result, out)
    }

    fn wait_op(&mut self, token: u64) -> Result<u64, ClientError> {
        let result = self.take(token)?;
        self.finish(token, result, None)
    }

    /// Turns a completion into a result, recycling buffers.
    fn finish(&mut self, token: u64, result: Result<Output, OpError>, out: Option<&mut Vec<u8>>) -> Result<u64, ClientError> {
        let output = match result {
            Ok(output) => output,
            Err(e) => {
                if token & ONE_SIDED == 0 {
                    self.core.cancel(token);
                }
                return Err(e.into());
            }
        };
        match output {
            Output::Response { header, payload } => {
                let reply = self.core.on_response_parts(&header, &payload)?;
                let value = reply.result?;
                if let Some(out) = out {
                    out.clear();
                    out.extend_from_slice(reply.payload);
                }
                if reply.opcode == Opcode::Hello {
                    debug_assert!(self.core.hello().is_some());
                }
                self.transport.recycle(payload);
                Ok(value)
            }
            Output::Put { buf } | Output::Get { buf } => {
                self.transport.recycle(buf);
                Ok(0)
            }
            Output::Atomic { old } => Ok(old),
            Output::Flush => Ok(0),
        }
    }

    /// Blocks until the completion for `token` arrives.
    fn take(&mut self, token: u64) -> Result<Result<Output, OpError>, ClientError> {
        let started = Instant::now();
        let deadline = started + self.options.timeout;
        let lone = self.lone_wait();
        let mut waited = false;
        loop {
            if let Some(at) = self.done.iter().position(|(t, _)| *t == token) {
                if waited && lone {
                    self.pacer.record(started.elapsed());
                }
                return Ok(self.done.swap_remove(at).1);
            }
            self.pump(deadline, lone)?;
            waited = true;
        }
    }

    /// True when at most one request is in flight: a closed-loop wait,
    /// whose poll budget the pacer may stretch (module docs, "Waits").
    fn lone_wait(&self) -> bool {
        self.core.outstanding() <= 1
    }

    /// Polls once, waiting (bounded by `deadline`) if nothing is ready.
    fn pump(&mut self, deadline: Instant, lone: bool) -> Result<(), ClientError> {
        let budget = if lone { self.pacer.budget(self.options.poll) } else { self.options.poll };
        if self.poll_within_budget(budget) == 0 {
            let now = Instant::now();
            if now >= deadline {
                return Err(ClientError::Timeout(self.options.timeout));
            }
            self.transport.wait(deadline - now)?;
            self.transport.poll(&mut self.events, 64);
        }
        for event in self.events.drain(..) {
            match event {
                Event::Completion(c) if c.conn == self.conn => self.done.push((c.token, c.result)),
                // A lost connection fails its operations first (completions above).
                _ => {}
            }
        }
        Ok(())
    }

    /// Polls until events arrive or `budget` (counted from now, the last
    /// thing this client did) is spent; how many arrived.
    fn poll_within_budget(&mut self, budget: PollBudget) -> usize {
        let since = Instant::now();
        let mut empty = 0;
        loop {
            let n = self.transport.poll(&mut self.events, 64);
            if n > 0 {
                return n;
            }
            // Work without events yet (a rendezvous, puts on their way) is
            // not an empty poll; the time bound still holds.
            empty = if self.transport.progressed() { 0 } else { empty + 1 };
            if !budget.keep_polling(since, empty) {
                return 0;
            }
            std::hint::spin_loop();
        }
    }
}
