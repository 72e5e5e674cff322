//! A closed-loop HTTP/1.1 load generator on one thread and one io_uring.
//!
//! Each of `connections` keep-alive connections has exactly one request outstanding: when its
//! response is complete the next request is sent. The thread blocks in `io_uring_enter` while
//! waiting (it shares the machine with the server under test). Latency is measured from the
//! send's submission to the response's last byte and recorded in an HDR histogram (1 µs to
//! 60 s, 3 significant digits) for requests completing after the warm-up.
//!
//! Invariants: per connection at most one send and one receive are in flight; a connection's
//! socket is closed only when neither is; a response counts as an error when its status is not
//! 2xx or its connection failed (a failed connection is reconnected, up to a bound).

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{IntoRawFd, RawFd};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use io_uring::{opcode, types, IoUring};

/// When a run stops.
#[derive(Clone, Copy, Debug)]
pub enum StopAfter {
    /// After this long (after the warm-up).
    Duration(Duration),
    /// After this many responses (after the warm-up).
    Requests(u64),
}

/// What to send and for how long.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Concurrent connections (each with one request outstanding), 1..=4096.
    pub connections: u32,
    /// Request method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Body bytes per request (sent with Content-Length when above zero).
    pub body_bytes: usize,
    /// When to stop.
    pub stop: StopAfter,
    /// Responses completing during this first period are not recorded.
    pub warmup: Duration,
    /// Hard limit on the whole run (warm-up included).
    pub timeout: Duration,
}

impl Default for LoadConfig {
    fn default() -> LoadConfig {
        LoadConfig {
            connections: 10,
            method: "GET".into(),
            path: "/".into(),
            body_bytes: 0,
            stop: StopAfter::Duration(Duration::from_secs(1)),
            warmup: Duration::from_millis(100),
            timeout: Duration::from_secs(60),
        }
    }
}

/// Results of a run.
#[derive(Clone, Debug)]
pub struct LoadReport {
    /// Responses recorded (after the warm-up), errors included.
    pub requests: u64,
    /// Non-2xx responses and failed connections.
    pub errors: u64,
    /// Length of the recorded period, seconds.
    pub elapsed_s: f64,
    /// `requests / elapsed_s`.
    pub throughput_rps: f64,
    /// Mean latency.
    pub latency_us_mean: f64,
    /// Median latency.
    pub latency_us_p50: u64,
    /// 99th percentile latency.
    pub latency_us_p99: u64,
    /// Largest latency.
    pub latency_us_max: u64,
}

/// Errors of [`run`].
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Invalid configuration.
    #[error("config: {0}")]
    Config(&'static str),
    /// A connection could not be made.
    #[error("connect to {addr}: {source}")]
    Connect {
        /// The server address.
        addr: SocketAddr,
        /// The cause.
        source: io::Error,
    },
    /// The io_uring could not be created or entered.
    #[error("io_uring: {0}")]
    Uring(io::Error),
}

const OP_SEND: u64 = 1;
const OP_RECV: u64 = 2;
const RECV_BUF_BYTES: usize = 16 << 10;

struct Client {
    fd: RawFd,
    buf: Vec<u8>,
    filled: usize,
    /// Body bytes still to read of the current response; `None` while reading the head.
    body_left: Option<usize>,
    status_ok: bool,
    server_closes: bool,
    sent: usize,
    send_inflight: bool,
    recv_inflight: bool,
    outstanding: bool,
    failed: bool,
    started: Instant,
}

struct Gen {
    uring: IoUring,
    addr: SocketAddr,
    request: Vec<u8>,
    clients: Vec<Client>,
    hist: Histogram<u64>,
    recorded: u64,
    errors: u64,
    reconnects: u64,
    running: bool,
    warm_end: Instant,
    sum_us: u128,
    /// Completions drained at once (kept for its capacity).
    cqes: Vec<(u64, i32)>,
}

fn connect(addr: SocketAddr) -> Result<RawFd, LoadError> {
    let s = TcpStream::connect(addr).map_err(|source| LoadError::Connect { addr, source })?;
    s.set_nodelay(true).map_err(|source| LoadError::Connect { addr, source })?;
    Ok(s.into_raw_fd())
}

fn build_request(cfg: &LoadConfig, addr: SocketAddr) -> Vec<u8> {
    let mut r = format!("{} {} HTTP/1.1\r\nHost: {addr}\r\n", cfg.method, cfg.path).into_bytes();
    if cfg.body_bytes > 0 {
        r.extend_from_slice(format!("Content-Length: {}\r\n", cfg.body_bytes).as_bytes());
    }
    r.extend_from_slice(b"\r\n");
    r.extend((0..cfg.body_bytes).map(|i| b'a' + (i % 26) as u8));
    r
}

/// Runs a closed-loop load against `addr` and reports throughput and latency.
pub fn run(addr: SocketAddr, cfg: &LoadConfig) -> Result<LoadReport, LoadError> {
    if cfg.connections == 0 || cfg.connections > 4096 {
        return Err(LoadError::Config("connections must be in 1..=4096"));
    }
    let entries = (cfg.connections * 2 + 8).next_power_of_two();
    let uring = IoUring::builder().setup_cqsize(entries * 2).build(entries).map_err(LoadError::Uring)?;
    let start = Instant::now();
    let mut gen = Gen {
        uring,
        addr,
        request: build_request(cfg, addr),
        clients: Vec::with_capacity(cfg.connections as usize),
        hist: Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds"),
        recorded: 0,
        errors: 0,
        reconnects: 0,
        running: true,
        warm_end: start + cfg.warmup,
        sum_us: 0,
        cqes: Vec::with_capacity(entries as usize * 2),
    };
    for _ in 0..cfg.connections {
        let fd = connect(addr)?;
        gen.clients.push(Client {
            fd,
            buf: vec![0; RECV_BUF_BYTES],
            filled: 0,
            body_left: None,
            status_ok: false,
            server_closes: false,
            sent: 0,
            send_inflight: false,
            recv_inflight: false,
            outstanding: false,
            failed: false,
            started: start,
        });
    }
    let result = gen.drive(cfg, start);
    gen.finish();
    result
}

impl Gen {
    fn push(&mut self, e: io_uring::squeue::Entry) {
        // SAFETY: buffers named by entries live in `self.clients` / `self.request`, which are
        // neither freed nor moved while operations are in flight (`finish` waits for them).
        while unsafe { self.uring.submission().push(&e) }.is_err() {
            let _ = self.uring.submit();
        }
    }

    fn drive(&mut self, cfg: &LoadConfig, start: Instant) -> Result<LoadReport, LoadError> {
        let hard_end = start + cfg.timeout;
        let end = match cfg.stop {
            StopAfter::Duration(d) => (self.warm_end + d).min(hard_end),
            StopAfter::Requests(_) => hard_end,
        };
        for i in 0..self.clients.len() {
            self.issue(i);
        }
        let mut measured_end = end;
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            if let StopAfter::Requests(n) = cfg.stop {
                if self.recorded >= n {
                    measured_end = now;
                    break;
                }
            }
            if self.clients.iter().all(|c| c.failed && !c.send_inflight && !c.recv_inflight) {
                measured_end = now;
                break; // every connection failed and could not be remade
            }
            self.wait(end - now)?;
            self.drain();
        }
        self.running = false;
        let elapsed_s = measured_end.saturating_duration_since(self.warm_end).as_secs_f64().max(1e-9);
        let h = &self.hist;
        Ok(LoadReport {
            requests: self.recorded,
            errors: self.errors,
            elapsed_s,
            throughput_rps: self.recorded as f64 / elapsed_s,
            latency_us_mean: if self.recorded > 0 { self.sum_us as f64 / self.recorded as f64 } else { 0.0 },
            latency_us_p50: h.value_at_quantile(0.5),
            latency_us_p99: h.value_at_quantile(0.99),
            latency_us_max: h.max(),
        })
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), LoadError> {
        let ts = types::Timespec::new().sec(timeout.as_secs()).nsec(timeout.subsec_nanos());
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.uring.submitter().submit_with_args(1, &args) {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => Ok(()),
            Err(e) => Err(LoadError::Uring(e)),
        }
    }

    fn drain(&mut self) {
        let mut cqes = std::mem::take(&mut self.cqes);
        loop {
            cqes.clear();
            cqes.extend(self.uring.completion().map(|c| (c.user_data(), c.result())));
            if cqes.is_empty() {
                break;
            }
            for &(ud, res) in &cqes {
                let i = (ud & 0xffff_ffff) as usize;
                match ud >> 32 {
                    OP_SEND => self.on_send(i, res),
                    OP_RECV => self.on_recv(i, res),
                    _ => panic!("unknown completion {ud:#x}"),
                }
            }
        }
        self.cqes = cqes;
    }

    fn issue(&mut self, i: usize) {
        let c = &mut self.clients[i];
        assert!(!c.outstanding && !c.send_inflight);
        c.outstanding = true;
        c.sent = 0;
        c.started = Instant::now();
        self.submit_send(i);
        if !self.clients[i].recv_inflight {
            self.submit_recv(i);
        }
    }

    fn submit_send(&mut self, i: usize) {
        let c = &mut self.clients[i];
        c.send_inflight = true;
        let rest = &self.request[c.sent..];
        let e = opcode::Send::new(types::Fd(c.fd), rest.as_ptr(), rest.len() as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(OP_SEND << 32 | i as u64);
        self.push(e);
    }

    fn submit_recv(&mut self, i: usize) {
        let c = &mut self.clients[i];
        assert!(c.filled < c.buf.len());
        c.recv_inflight = true;
        let room = &mut c.buf[c.filled..];
        let e = opcode::Recv::new(types::Fd(c.fd), room.as_mut_ptr(), room.len() as u32)
            .build()
            .user_data(OP_RECV << 32 | i as u64);
        self.push(e);
    }

    fn on_send(&mut self, i: usize, res: i32) {
        let c = &mut self.clients[i];
        c.send_inflight = false;
        if res <= 0 || c.failed {
            self.fail(i);
            return;
        }
        c.sent += res as usize;
        if c.sent < self.request.len() {
            self.submit_send(i);
        }
    }

    fn on_recv(&mut self, i: usize, res: i32) {
        let c = &mut self.clients[i];
        c.recv_inflight = false;
        if res <= 0 || c.failed {
            self.fail(i);
            return;
        }
        c.filled += res as usize;
        if !self.parse(i) {
            self.fail(i);
            return;
        }
        let c = &self.clients[i];
        if c.server_closes && !c.outstanding {
            self.fail_quietly(i);
        } else if self.running && !c.outstanding {
            self.issue(i);
        } else if c.outstanding {
            self.submit_recv(i);
        }
    }

    /// Consumes complete responses from the buffer; false on a protocol error.
    fn parse(&mut self, i: usize) -> bool {
        loop {
            let c = &mut self.clients[i];
            match c.body_left {
                None => {
                    let mut headers = [httparse::EMPTY_HEADER; 32];
                    let mut resp = httparse::Response::new(&mut headers);
                    let n = match resp.parse(&c.buf[..c.filled]) {
                        Ok(httparse::Status::Complete(n)) => n,
                        Ok(httparse::Status::Partial) => return c.filled < c.buf.len(),
                        Err(_) => return false,
                    };
                    let code = resp.code.unwrap_or(0);
                    let mut len = 0usize;
                    let mut closes = false;
                    for h in resp.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            match std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse().ok()) {
                                Some(v) => len = v,
                                None => return false,
                            }
                        } else if h.name.eq_ignore_ascii_case("connection") {
                            closes |= h.value.eq_ignore_ascii_case(b"close");
                        }
                    }
                    c.status_ok = (200..300).contains(&code);
                    c.server_closes = closes;
                    c.buf.copy_within(n..c.filled, 0);
                    c.filled -= n;
                    c.body_left = Some(len);
                }
                Some(left) => {
                    let take = left.min(c.filled);
                    c.buf.copy_within(take..c.filled, 0);
                    c.filled -= take;
                    if left > take {
                        c.body_left = Some(left - take);
                        return true;
                    }
                    c.body_left = None;
                    if !c.outstanding {
                        return false; // a response nobody asked for
                    }
                    c.outstanding = false;
                    let ok = c.status_ok;
                    let now = Instant::now();
                    let us = now.duration_since(c.started).as_micros() as u64;
                    if now >= self.warm_end {
                        self.recorded += 1;
                        self.sum_us += us as u128;
                        self.hist.saturating_record(us.max(1));
                        if !ok {
                            self.errors += 1;
                        }
                    }
                    if self.clients[i].filled == 0 {
                        return true;
                    }
                }
            }
        }
    }

    fn fail(&mut self, i: usize) {
        if !self.clients[i].failed && self.running {
            self.errors += 1;
        }
        self.fail_quietly(i);
    }

    /// Shuts the connection down; once nothing is in flight, closes it and (while running,
    /// up to a bound) connects again.
    fn fail_quietly(&mut self, i: usize) {
        let c = &mut self.clients[i];
        if !c.failed {
            c.failed = true;
            // SAFETY: our socket; completes its in-flight operations.
            unsafe { libc::shutdown(c.fd, libc::SHUT_RDWR) };
        }
        if c.send_inflight || c.recv_inflight {
            return;
        }
        // SAFETY: nothing in flight on it.
        unsafe { libc::close(c.fd) };
        c.fd = -1;
        let limit = 10 * self.clients.len() as u64;
        if !self.running || self.reconnects >= limit {
            return;
        }
        self.reconnects += 1;
        let Ok(fd) = connect(self.addr) else { return };
        let c = &mut self.clients[i];
        c.fd = fd;
        c.failed = false;
        c.filled = 0;
        c.body_left = None;
        c.outstanding = false;
        c.server_closes = false;
        self.issue(i);
    }

    /// Ends every connection and waits (bounded) for their operations.
    fn finish(&mut self) {
        self.running = false;
        for c in &mut self.clients {
            if c.fd >= 0 {
                c.failed = true;
                // SAFETY: our socket.
                unsafe { libc::shutdown(c.fd, libc::SHUT_RDWR) };
            }
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.clients.iter().any(|c| c.send_inflight || c.recv_inflight) && Instant::now() < deadline {
            if self.wait(Duration::from_millis(50)).is_err() {
                break;
            }
            self.drain();
        }
        for c in &mut self.clients {
            if c.fd >= 0 {
                // SAFETY: our socket, closed once.
                unsafe { libc::close(c.fd) };
                c.fd = -1;
            }
        }
    }
}
