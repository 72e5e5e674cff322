//! A closed-loop YCSB driver over RESP (seed 001 Fig 9): loads the records,
//! then keeps exactly one operation outstanding on each of N connections
//! for a fixed number of operations, against any RESP server (ours or
//! `redis-server`), from one client thread that blocks in `poll(2)`.
//!
//! The operations come from `pmwire_resp::ycsb` (YCSB's scrambled Zipfian,
//! θ = 0.99, 1 KB values); replies are framed with
//! `pmwire_resp::client::reply_len`. An error reply is counted, not
//! retried; any reply that is not RESP ends the run with an error. The
//! report gives the driver thread's CPU time over the timed operations
//! (`CLOCK_THREAD_CPUTIME_ID`) and, if given the server's clock, the
//! server's.

use anyhow::{bail, Context, Result};
use pmwire_resp::client::reply_len;
use pmwire_resp::ycsb::{Generator, OpKind, Workload};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::bound::thread_cpu_seconds;
use super::placement::CpuClock;
use crate::measure::percentile;

/// One YCSB run.
#[derive(Clone, Debug)]
pub struct YcsbConfig {
    /// The workload (A or B, records, seed).
    pub workload: Workload,
    /// Connections, each with one operation outstanding.
    pub connections: usize,
    /// Operations timed in the run phase (after `warmup_ops`).
    pub ops: u64,
    /// Operations run first and not timed.
    pub warmup_ops: u64,
    /// Requests pipelined per connection while loading (the load is not timed).
    pub load_pipeline: usize,
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct YcsbReport {
    /// Operations timed.
    pub ops: u64,
    /// Of which reads.
    pub reads: u64,
    /// Error replies among them.
    pub errors: u64,
    /// The first [`ERROR_SAMPLES`] error replies' texts (of the timed
    /// operations), so a run that saw errors says which.
    pub error_samples: Vec<String>,
    /// Operations per second.
    pub throughput_ops_per_s: f64,
    /// Mean latency.
    pub latency_us_mean: f64,
    /// Median latency.
    pub latency_us_p50: f64,
    /// 99th percentile latency.
    pub latency_us_p99: f64,
    /// Wall seconds of the timed operations.
    pub elapsed_s: f64,
    /// The driver thread's CPU seconds over them.
    pub generator_cpu_s: f64,
    /// The server's CPU seconds over them, if its clock was given.
    pub server_cpu_s: Option<f64>,
}

/// Error replies a report keeps the text of.
pub const ERROR_SAMPLES: usize = 8;

struct Conn {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
    written: usize,
    /// When the outstanding request was sent, and whether it is a read.
    pending: Option<(Instant, bool)>,
}

/// Loads the workload's records into the server at `addr`, then runs it.
pub fn run(addr: SocketAddr, config: &YcsbConfig) -> Result<YcsbReport> {
    run_measured(addr, config, None)
}

/// [`run`], also reading `server`'s CPU clock at the start and end of the
/// timed operations.
pub fn run_measured(addr: SocketAddr, config: &YcsbConfig, server: Option<CpuClock>) -> Result<YcsbReport> {
    assert!(config.connections > 0, "at least one connection");
    assert!(config.load_pipeline > 0, "a load pipeline of at least 1");
    let mut conns = (0..config.connections).map(|_| connect(addr)).collect::<Result<Vec<_>>>()?;
    let mut generator = Generator::new(config.workload.clone());
    load(&mut conns, &mut generator, config.load_pipeline)?;
    let mut latencies = Vec::with_capacity(config.ops as usize);
    let (mut reads, mut errors, mut issued, mut done) = (0u64, 0u64, 0u64, 0u64);
    let mut error_samples = Vec::new();
    let total = config.warmup_ops + config.ops;
    let mut started = Instant::now();
    let mut marks = Marks::at_start(server);
    for conn in conns.iter_mut() {
        if issued < total {
            issue(conn, &mut generator);
            issued += 1;
        }
    }
    while done < total {
        wait(&mut conns)?;
        for conn in conns.iter_mut() {
            pump(conn)?;
            while let Some((len, is_error)) = reply_len(&conn.input).context("reply from the server is not RESP")? {
                if is_error && done >= config.warmup_ops && error_samples.len() < ERROR_SAMPLES {
                    error_samples.push(String::from_utf8_lossy(&conn.input[..len]).trim_end().to_string());
                }
                conn.input.drain(..len);
                let (sent, read) = conn.pending.take().context("a reply with no request outstanding")?;
                if done >= config.warmup_ops {
                    latencies.push(sent.elapsed().as_nanos() as u64);
                    reads += read as u64;
                    errors += is_error as u64;
                }
                done += 1;
                if done == config.warmup_ops {
                    started = Instant::now();
                    marks = Marks::at_start(server);
                }
                if issued < total {
                    issue(conn, &mut generator);
                    issued += 1;
                }
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let (generator_cpu_s, server_cpu_s) = marks.since(server);
    latencies.sort_unstable();
    let mean_ns = latencies.iter().sum::<u64>() as f64 / latencies.len().max(1) as f64;
    Ok(YcsbReport {
        ops: config.ops,
        reads,
        errors,
        error_samples,
        throughput_ops_per_s: config.ops as f64 / secs,
        latency_us_mean: mean_ns / 1e3,
        latency_us_p50: percentile(&latencies, 50.0) as f64 / 1e3,
        latency_us_p99: percentile(&latencies, 99.0) as f64 / 1e3,
        elapsed_s: secs,
        generator_cpu_s,
        server_cpu_s,
    })
}

/// CPU clocks read at the start of the timed operations.
struct Marks {
    generator_s: f64,
    server_s: Option<f64>,
}

impl Marks {
    fn at_start(server: Option<CpuClock>) -> Marks {
        Marks { generator_s: thread_cpu_seconds(), server_s: server.and_then(|c| c.seconds().ok()) }
    }

    /// CPU seconds of this thread and of the server since the start.
    fn since(&self, server: Option<CpuClock>) -> (f64, Option<f64>) {
        let server_s = self.server_s.zip(server.and_then(|c| c.seconds().ok())).map(|(a, b)| b - a);
        (thread_cpu_seconds() - self.generator_s, server_s)
    }
}

fn connect(addr: SocketAddr) -> Result<Conn> {
    let stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    stream.set_nonblocking(true)?;
    Ok(Conn { stream, input: Vec::with_capacity(4096), output: Vec::with_capacity(4096), written: 0, pending: None })
}

/// Inserts every record, `pipeline` requests in flight per connection.
fn load(conns: &mut [Conn], generator: &mut Generator, pipeline: usize) -> Result<()> {
    let records = generator.workload().record_count;
    let mut next = 0u64;
    let mut outstanding = vec![0usize; conns.len()];
    let mut acked = 0u64;
    while acked < records {
        for (conn, out) in conns.iter_mut().zip(outstanding.iter_mut()) {
            while *out < pipeline && next < records {
                generator.load(next, &mut conn.output);
                next += 1;
                *out += 1;
            }
        }
        wait(conns)?;
        for (conn, out) in conns.iter_mut().zip(outstanding.iter_mut()) {
            pump(conn)?;
            while let Some((len, is_error)) = reply_len(&conn.input).context("reply from the server is not RESP")? {
                if is_error {
                    bail!("the server refused a load SET: {}", String::from_utf8_lossy(&conn.input[..len]).trim_end());
                }
                conn.input.drain(..len);
                *out -= 1;
                acked += 1;
            }
        }
    }
    Ok(())
}

fn issue(conn: &mut Conn, generator: &mut Generator) {
    assert!(conn.pending.is_none(), "one operation outstanding per connection");
    let op = generator.next(&mut conn.output);
    conn.pending = Some((Instant::now(), op.kind == OpKind::Read));
}

/// Writes what is queued and reads what has arrived, without blocking.
fn pump(conn: &mut Conn) -> Result<()> {
    while conn.written < conn.output.len() {
        match conn.stream.write(&conn.output[conn.written..]) {
            Ok(0) => bail!("the server closed the connection"),
            Ok(n) => conn.written += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("sending to the server"),
        }
    }
    if conn.written == conn.output.len() {
        conn.output.clear();
        conn.written = 0;
    }
    let mut chunk = [0u8; 16 << 10];
    loop {
        match conn.stream.read(&mut chunk) {
            Ok(0) => bail!("the server closed the connection"),
            Ok(n) => conn.input.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("receiving from the server"),
        }
    }
}

/// Blocks until some connection is readable (or writable with output queued); 10 s at most.
fn wait(conns: &mut [Conn]) -> Result<()> {
    let mut fds: Vec<libc::pollfd> = conns
        .iter()
        .map(|c| {
            let writing = c.written < c.output.len();
            libc::pollfd { fd: c.stream.as_raw_fd(), events: libc::POLLIN | if writing { libc::POLLOUT } else { 0 }, revents: 0 }
        })
        .collect();
    let timeout = Duration::from_secs(10);
    // SAFETY: `fds` is a live array of `fds.len()` pollfds.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout.as_millis() as i32) };
    if n < 0 {
        let err = std::io::Error::last_os_error();
        if err.kind() != ErrorKind::Interrupted {
            return Err(err).context("poll");
        }
    }
    if n == 0 {
        bail!("no reply from the server within {timeout:?}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::redis::{benchmark_available, server_version, Persistence, RedisServer};

    /// Against a real redis-server: the load fills every record, and the
    /// run's mix is about workload A's 50% reads with no errors.
    #[test]
    fn ycsb_a_runs_against_redis() {
        if let Err(why) = server_version().and(benchmark_available()) {
            println!("skipped: {why}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let server = RedisServer::start(Persistence::Off, dir.path(), &crate::kv::placement::Placement::split()).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", server.port()).parse().unwrap();
        let config = YcsbConfig {
            workload: Workload::a(2000, 7),
            connections: 8,
            ops: 4000,
            warmup_ops: 200,
            load_pipeline: 16,
        };
        let report = run_measured(addr, &config, Some(CpuClock::of(server.pid()))).unwrap();
        assert_eq!(report.ops, 4000);
        assert!(report.generator_cpu_s > 0.0 && report.generator_cpu_s <= report.elapsed_s * 1.05 + 0.01, "{report:?}");
        assert!(report.server_cpu_s.is_some_and(|s| s > 0.0), "{report:?}");
        assert_eq!(report.errors, 0);
        assert!((1600..=2400).contains(&report.reads), "about half reads: {report:?}");
        assert!(report.latency_us_p50 <= report.latency_us_p99);
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(b"*1\r\n$6\r\nDBSIZE\r\n").unwrap();
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b":2000\r\n", "every record loaded");
    }
}
