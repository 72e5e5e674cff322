//! Latency probes with `ucx_perftest` semantics, so our layer can be
//! compared with UCX's own tool on the same transport (issue 3: "our
//! non-durable put latency within 1.2× of ucx_perftest").
//!
//! - [`put_pingpong`] is `ucx_perftest -t ucp_put_lat`: two peers take
//!   turns; each puts `size` bytes whose last byte is a sequence number
//!   into the other's registered buffer and then polls its own buffer until
//!   the peer's put with the same number lands. One iteration is one round
//!   trip; the reported latency is half of it, as ucx_perftest reports.
//!   Ours goes through the [`Transport`] seam (window, completions).
//! - [`rpc_pingpong`] is the RPC analogue of `ucx_perftest -t ucp_am_lat`:
//!   a `call` and its `reply`; again half the round trip.
//! - [`ucx_perftest`] runs the real tool (server and client processes on
//!   127.0.0.1) and parses its `Final:` line.
//!
//! # Running ucx_perftest by hand (Debian `ucx-utils`, UCX 1.13)
//! ```text
//! # server (listens on TCP port 13337 for its own address exchange):
//! UCX_TLS=tcp UCX_NET_DEVICES=lo ucx_perftest -p 13337
//! # client, same variables:
//! UCX_TLS=tcp UCX_NET_DEVICES=lo ucx_perftest 127.0.0.1 -p 13337 -t ucp_put_lat -s 64 -n 20000 -w 2000
//! ```
//! `UCX_TLS` values that work on a host without RDMA: `tcp`; `sm` (= posix,
//! sysv, cma here); `posix,cma,self`. Tests: `ucp_put_lat`, `ucp_am_lat`,
//! `ucp_get`, `ucp_put_bw`. ucx_perftest exchanges UCX worker addresses over
//! its own socket, so unlike client-server UCP it needs no `tcp` in `UCX_TLS`
//! for shared memory. It allocates its buffers with `UCP_MEM_MAP_ALLOCATE`.
//!
//! Output columns (`-f` prints only the final line, without the "Final:"
//! label): iterations; latency in µs as 50th percentile (`-R` changes the
//! rank), average over the last report interval, and overall average;
//! bandwidth in MB/s (interval, overall); message rate in msg/s (interval,
//! overall). For ping-pong tests (`*_lat`) latency is half the round trip.
//!
//! Both sides busy-poll during the measured iterations, as ucx_perftest
//! does (sleeping would measure the scheduler); every loop is bounded by the
//! iteration count and a deadline, and setup and teardown block normally.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::seam::{ConnId, Event, Output, RegionDescriptor, RemoteRegionId, Transport};
use crate::{UcxConfig, UcxTransport};

/// What to measure.
#[derive(Clone, Debug)]
pub struct PingPong {
    /// The UCX configuration of both peers.
    pub config: UcxConfig,
    /// Bytes per message (at least 1; the last byte is the sequence number).
    pub size: usize,
    /// Measured iterations.
    pub iters: usize,
    /// Unmeasured iterations first.
    pub warmup: usize,
    /// Bound on the whole run.
    pub timeout: Duration,
    /// Put into memory UCX allocated (`UCP_MEM_MAP_ALLOCATE`, as
    /// ucx_perftest does) instead of registering an existing mapping (as a
    /// pmem region is). Over shared memory this changes the data path: a
    /// store into a shared segment versus a `process_vm_writev` (cma).
    pub ucx_allocated: bool,
}

/// Half-round-trip latencies in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    /// Measured iterations.
    pub iters: usize,
    /// Median.
    pub p50_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
}

/// Why a probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Setting up a transport failed.
    #[error("setup: {0}")]
    Setup(#[from] crate::SetupError),
    /// Connecting failed.
    #[error("connect: {0}")]
    Connect(#[from] crate::ConnectError),
    /// An operation failed.
    #[error("operation: {0}")]
    Op(#[from] crate::OpError),
    /// The run exceeded its deadline.
    #[error("timed out")]
    Timeout,
    /// The peer thread failed.
    #[error("peer: {0}")]
    Peer(String),
    /// ucx_perftest could not be run or its output not parsed.
    #[error("ucx_perftest: {0}")]
    Perftest(String),
}

/// Our put ping-pong (see the module docs).
pub fn put_pingpong(p: &PingPong) -> Result<Latency, ProbeError> {
    assert!(p.size >= 1);
    assert!(p.iters >= 1);
    let deadline = Instant::now() + p.timeout;
    let (tx, rx) = mpsc::channel();
    let responder = {
        let p = p.clone();
        std::thread::spawn(move || put_side(&p, Role::Responder(tx), deadline).map(|_| ()))
    };
    let addr = rx
        .recv_timeout(p.timeout)
        .map_err(|_| ProbeError::Timeout)?;
    let result = put_side(p, Role::Initiator(addr), deadline);
    let peer = responder
        .join()
        .map_err(|_| ProbeError::Peer("panicked".into()))?;
    peer.map_err(|e| ProbeError::Peer(e.to_string()))?;
    result.map(|samples| summarize(samples.expect("the initiator measures")))
}

enum Role {
    Responder(mpsc::Sender<SocketAddr>),
    Initiator(SocketAddr),
}

/// One side of the put ping-pong. The initiator returns its samples.
fn put_side(p: &PingPong, role: Role, deadline: Instant) -> Result<Option<Vec<f64>>, ProbeError> {
    let mut recv = vec![0u8; p.size];
    let mut t = UcxTransport::new(&p.config)?;
    let (local, recv_ptr) = if p.ucx_allocated {
        t.allocate(p.size)
            .map_err(|e| ProbeError::Peer(e.to_string()))?
    } else {
        // SAFETY: `recv` outlives `t` (dropped explicitly below, after `t`).
        let id = unsafe { t.register(recv.as_mut_ptr(), recv.len()) }
            .map_err(|e| ProbeError::Peer(e.to_string()))?;
        (id, recv.as_mut_ptr())
    };
    // SAFETY: recv_ptr..+size is registered memory we own (zeroed or UCX's).
    unsafe { std::ptr::write_bytes(recv_ptr, 0, p.size) };
    let mine = t
        .export(local)
        .map_err(|e| ProbeError::Peer(e.to_string()))?
        .encode();
    let initiator = matches!(role, Role::Initiator(_));
    let (conn, remote) = match role {
        Role::Responder(tx) => {
            let addr = t.listen("127.0.0.1:0".parse().unwrap())?;
            tx.send(addr)
                .map_err(|_| ProbeError::Peer("initiator gone".into()))?;
            exchange_as_responder(&mut t, &mine, deadline)?
        }
        Role::Initiator(addr) => {
            let conn = t.connect(&addr)?;
            t.call(conn, b"desc", mine, 0)?;
            let theirs = expect_response(&mut t, deadline)?;
            (conn, attach(&mut t, conn, &theirs)?)
        }
    };
    let recv_ptr = recv_ptr as *const u8;
    let last = p.size - 1;
    // SAFETY (both closures): recv_ptr..+size is our registered buffer, alive
    // for this function; the peer writes it remotely, so read volatile.
    let seen = |sn: u8| unsafe { std::ptr::read_volatile(recv_ptr.add(last)) } == sn;
    let mut buf = vec![0u8; p.size];
    let mut samples = Vec::with_capacity(p.iters);
    let mut events = Vec::with_capacity(64);
    let clock = Ticks::new();
    for i in 0..p.warmup + p.iters {
        let sn = (i % 255) as u8 + 1;
        let start = clock.now();
        if initiator {
            buf = put_and_reclaim(&mut t, conn, remote, buf, sn, &mut events, deadline)?;
        }
        while !seen(sn) {
            spin_poll(&mut t, &mut events, deadline)?;
        }
        if !initiator {
            buf = put_and_reclaim(&mut t, conn, remote, buf, sn, &mut events, deadline)?;
        } else if i >= p.warmup {
            samples.push(clock.now().wrapping_sub(start));
        }
    }
    let us_per_tick = clock.us_per_tick();
    let samples: Vec<f64> = samples.into_iter().map(|ticks| ticks as f64 * us_per_tick / 2.0).collect();
    linger(&mut t, conn, initiator, deadline);
    drop(t);
    drop(recv);
    Ok(initiator.then_some(samples))
}

/// The ping-pong's per-iteration clock. ucx_perftest reads the time-stamp
/// counter (`ucs_get_time`); so does the probe where the CPU says the TSC
/// ticks at a constant rate (x86-64 with `constant_tsc`, either vendor),
/// converting ticks to time over the whole run against [`Instant`]. The
/// clock is on the measured path: `Instant::now` cost 23.5 ns on the AMD
/// EPYC guest, a third of a 64 B half round trip over sm there. Elsewhere
/// it falls back to [`Instant`] (ticks are then nanoseconds).
struct Ticks {
    tsc: bool,
    origin: Instant,
    origin_ticks: u64,
}

impl Ticks {
    fn new() -> Ticks {
        let tsc = cfg!(target_arch = "x86_64")
            && std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
                c.lines()
                    .find(|l| l.starts_with("flags"))
                    .is_some_and(|l| l.split_whitespace().any(|f| f == "constant_tsc"))
            });
        let mut t = Ticks { tsc, origin: Instant::now(), origin_ticks: 0 };
        t.origin_ticks = t.now();
        t
    }

    fn now(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.tsc {
            // SAFETY: RDTSC exists on every x86-64 CPU and has no effects.
            return unsafe { core::arch::x86_64::_rdtsc() };
        }
        self.origin.elapsed().as_nanos() as u64
    }

    /// Microseconds per tick, measured from `new` to now.
    fn us_per_tick(&self) -> f64 {
        let ticks = self.now().wrapping_sub(self.origin_ticks).max(1);
        self.origin.elapsed().as_secs_f64() * 1e6 / ticks as f64
    }
}

/// Puts `buf` (sequence number in its last byte) and waits for the put's
/// local completion to get the buffer back.
fn put_and_reclaim(
    t: &mut UcxTransport,
    conn: ConnId,
    remote: RemoteRegionId,
    mut buf: Vec<u8>,
    sn: u8,
    events: &mut Vec<Event>,
    deadline: Instant,
) -> Result<Vec<u8>, ProbeError> {
    let last = buf.len() - 1;
    buf[last] = sn;
    t.put(conn, remote, 0, buf, sn as u64)?;
    loop {
        for e in events.drain(..) {
            if let Event::Completion(c) = e {
                match c.result {
                    Ok(Output::Put { buf }) => return Ok(buf),
                    Ok(other) => return Err(ProbeError::Peer(format!("unexpected {other:?}"))),
                    Err(e) => return Err(e.into()),
                }
            }
        }
        spin_poll(t, events, deadline)?;
    }
}

fn spin_poll(
    t: &mut UcxTransport,
    events: &mut Vec<Event>,
    deadline: Instant,
) -> Result<(), ProbeError> {
    thread_local!(static POLLS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) });
    t.poll(events, 64);
    if events
        .iter()
        .any(|e| matches!(e, Event::Disconnected { .. }))
    {
        return Err(ProbeError::Peer("disconnected".into()));
    }
    let polls = POLLS.get().wrapping_add(1);
    POLLS.set(polls);
    if polls.is_multiple_of(CLOCK_EVERY) && Instant::now() > deadline {
        return Err(ProbeError::Timeout);
    }
    Ok(())
}

/// Polls between two reads of the clock in [`spin_poll`]: a read costs
/// about 50 ns on this VM (`Instant::now`), as much as the rest of a poll.
const CLOCK_EVERY: u32 = 1024;

fn exchange_as_responder(
    t: &mut UcxTransport,
    mine: &[u8],
    deadline: Instant,
) -> Result<(ConnId, RemoteRegionId), ProbeError> {
    let mut events = Vec::new();
    loop {
        t.poll(&mut events, 64);
        for e in events.drain(..) {
            if let Event::Request(r) = e {
                let conn = r.id.conn();
                let remote = attach(t, conn, &r.payload)?;
                t.reply(r.id, b"desc", mine.to_vec())?;
                return Ok((conn, remote));
            }
        }
        if Instant::now() > deadline {
            return Err(ProbeError::Timeout);
        }
        t.wait(Duration::from_millis(50))
            .map_err(|e| ProbeError::Peer(e.to_string()))?;
    }
}

fn expect_response(t: &mut UcxTransport, deadline: Instant) -> Result<Vec<u8>, ProbeError> {
    let mut events = Vec::new();
    loop {
        t.poll(&mut events, 64);
        for e in events.drain(..) {
            if let Event::Completion(c) = e {
                return match c.result? {
                    Output::Response { payload, .. } => Ok(payload),
                    other => Err(ProbeError::Peer(format!("unexpected {other:?}"))),
                };
            }
        }
        if Instant::now() > deadline {
            return Err(ProbeError::Timeout);
        }
        t.wait(Duration::from_millis(50))
            .map_err(|e| ProbeError::Peer(e.to_string()))?;
    }
}

fn attach(t: &mut UcxTransport, conn: ConnId, bytes: &[u8]) -> Result<RemoteRegionId, ProbeError> {
    let desc = RegionDescriptor::decode(bytes)
        .map_err(|e| ProbeError::Peer(format!("descriptor: {e}")))?;
    t.attach(conn, &desc)
        .map_err(|e| ProbeError::Peer(e.to_string()))
}

/// Ends the run: the initiator closes; the responder waits (blocking) until
/// it sees the close, so that UCX software RMA the peer still needs is served.
fn linger(t: &mut UcxTransport, conn: ConnId, initiator: bool, deadline: Instant) {
    let mut events = Vec::new();
    if initiator {
        t.close(conn);
    }
    while Instant::now() < deadline {
        t.poll(&mut events, 64);
        if events
            .iter()
            .any(|e| matches!(e, Event::Disconnected { .. }))
            && initiator
        {
            // Give a graceful close a moment of progress, then go.
            let _ = t.wait(Duration::from_millis(10));
            t.poll(&mut events, 64);
            return;
        }
        if events
            .iter()
            .any(|e| matches!(e, Event::Disconnected { .. }))
        {
            return;
        }
        let _ = t.wait(Duration::from_millis(20));
    }
}

/// Our RPC ping-pong: `call` + `reply` of `size`-byte payloads.
pub fn rpc_pingpong(p: &PingPong) -> Result<Latency, ProbeError> {
    assert!(p.iters >= 1);
    let deadline = Instant::now() + p.timeout;
    let (tx, rx) = mpsc::channel();
    let config = p.config.clone();
    let responder = std::thread::spawn(move || -> Result<(), ProbeError> {
        let mut t = UcxTransport::new(&config)?;
        tx.send(t.listen("127.0.0.1:0".parse().unwrap())?)
            .map_err(|_| ProbeError::Peer("gone".into()))?;
        let mut events = Vec::new();
        while Instant::now() < deadline {
            t.poll(&mut events, 64);
            for e in events.drain(..) {
                match e {
                    Event::Request(r) => t.reply(r.id, &r.header, r.payload)?,
                    Event::Disconnected { .. } => return Ok(()),
                    _ => {}
                }
            }
        }
        Err(ProbeError::Timeout)
    });
    let addr = rx
        .recv_timeout(p.timeout)
        .map_err(|_| ProbeError::Timeout)?;
    let mut t = UcxTransport::new(&p.config)?;
    let conn = t.connect(&addr)?;
    let mut payload = vec![0u8; p.size];
    let mut samples = Vec::with_capacity(p.iters);
    let mut events = Vec::with_capacity(64);
    for i in 0..p.warmup + p.iters {
        let start = Instant::now();
        t.call(conn, b"", payload, i as u64)?;
        payload = loop {
            spin_poll(&mut t, &mut events, deadline)?;
            let done = events.drain(..).find_map(|e| match e {
                Event::Completion(c) => Some(c.result),
                _ => None,
            });
            if let Some(result) = done {
                match result? {
                    Output::Response { payload, .. } => break payload,
                    other => return Err(ProbeError::Peer(format!("unexpected {other:?}"))),
                }
            }
        };
        if i >= p.warmup {
            samples.push(start.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    linger(&mut t, conn, true, deadline);
    drop(t);
    responder
        .join()
        .map_err(|_| ProbeError::Peer("panicked".into()))??;
    Ok(summarize(samples))
}

fn summarize(mut samples: Vec<f64>) -> Latency {
    assert!(!samples.is_empty());
    let mean_us = samples.iter().sum::<f64>() / samples.len() as f64;
    samples.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Latency {
        iters: samples.len(),
        p50_us: at(0.5),
        mean_us,
        p99_us: at(0.99),
    }
}

/// One `ucx_perftest` result line (`Final:`), latency columns in µs,
/// bandwidth in bytes per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Perftest {
    /// Iterations measured.
    pub iters: u64,
    /// "50.0%ile" latency (half round trip for ping-pong tests).
    pub p50_us: f64,
    /// "average" latency over the last report interval.
    pub avg_us: f64,
    /// "overall" latency over the whole run.
    pub overall_us: f64,
    /// "overall" bandwidth over the whole run, bytes/s (ucx_perftest prints
    /// MB/s meaning MiB/s: `UCS_MBYTE` is 2^20).
    pub bw_overall_bytes_per_s: f64,
}

/// Runs `ucx_perftest -t <test>` with a server and a client process on
/// 127.0.0.1 (port `port`), `UCX_TLS=tls`, TCP on the loopback device only,
/// and parses the client's `Final:` line.
pub fn ucx_perftest(
    test: &str,
    tls: &str,
    size: usize,
    iters: usize,
    warmup: usize,
    port: u16,
    timeout: Duration,
) -> Result<Perftest, ProbeError> {
    let env = [("UCX_TLS", tls), ("UCX_NET_DEVICES", "lo")];
    let mut server = Command::new("ucx_perftest")
        .args(["-p", &port.to_string()])
        .envs(env)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            ProbeError::Perftest(format!("cannot start (apt-get install ucx-utils): {e}"))
        })?;
    // The server needs a moment to listen; the client retries its connect.
    std::thread::sleep(Duration::from_millis(300));
    let client = Command::new("timeout")
        .arg(format!("{}", timeout.as_secs().max(1)))
        .arg("ucx_perftest")
        .args([
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            test,
            "-s",
            &size.to_string(),
        ])
        .args(["-n", &iters.to_string(), "-w", &warmup.to_string(), "-f"])
        .envs(env)
        .output();
    let _ = server.kill();
    let _ = server.wait();
    let out = client.map_err(|e| ProbeError::Perftest(e.to_string()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_perftest(&text).ok_or_else(|| ProbeError::Perftest(format!("no Final line in: {text}")))
}

/// Parses the final result line: `[Final:] iters p50 avg overall bw_avg
/// bw_overall rate_avg rate_overall` (`-f` prints it without the label).
pub fn parse_perftest(text: &str) -> Option<Perftest> {
    let line = text.lines().rev().find(|l| {
        let cols: Vec<&str> = l.split_whitespace().filter(|c| *c != "Final:").collect();
        cols.len() == 8 && cols.iter().all(|c| c.parse::<f64>().is_ok())
    })?;
    let cols: Vec<&str> = line.split_whitespace().filter(|c| *c != "Final:").collect();
    Some(Perftest {
        iters: cols.first()?.parse().ok()?,
        p50_us: cols.get(1)?.parse().ok()?,
        avg_us: cols.get(2)?.parse().ok()?,
        overall_us: cols.get(3)?.parse().ok()?,
        bw_overall_bytes_per_s: cols.get(5)?.parse::<f64>().ok()? * (1u64 << 20) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_final_line() {
        let text = "+----+\nFinal:                  2000      0.194    21.137    21.137        2.89       2.89       47310       47310\n";
        let p = parse_perftest(text).unwrap();
        assert_eq!(p.iters, 2000);
        assert_eq!(p.p50_us, 0.194);
        assert_eq!(p.overall_us, 21.137);
        assert_eq!(p.bw_overall_bytes_per_s, 2.89 * 1048576.0);
        let f = "|  Test  |\n                       20000     10.747    11.362    11.362        5.37       5.37       88012       88012\n";
        assert_eq!(parse_perftest(f).unwrap().p50_us, 10.747);
    }

    #[test]
    fn probes_run_over_tcp_and_shared_memory() {
        // A few iterations only: this checks the probes work, not their numbers.
        for config in [
            UcxConfig::tls("tcp").with_var("NET_DEVICES", "lo").with_one_sided(),
            UcxConfig::shared_memory().with_var("NET_DEVICES", "lo").with_one_sided(),
        ] {
            let mut p = PingPong {
                config,
                size: 64,
                iters: 50,
                warmup: 5,
                timeout: Duration::from_secs(30),
                ucx_allocated: false,
            };
            let put = put_pingpong(&p).unwrap();
            assert_eq!(put.iters, 50);
            assert!(put.p50_us > 0.0);
            p.ucx_allocated = true;
            assert_eq!(put_pingpong(&p).unwrap().iters, 50);
            let rpc = rpc_pingpong(&p).unwrap();
            assert_eq!(rpc.iters, 50);
        }
    }
}
