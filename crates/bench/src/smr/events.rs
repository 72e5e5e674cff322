//! The event-driven load generator: one thread drives every client
//! connection of a throughput point, as redis-benchmark and memtier do.
//!
//! Why: a thread per client (64 of them on this 2-core machine) spends the
//! client side's CPU switching threads, one sleep and one wake-up per
//! request each, and that CPU is taken from the servers on the same cores:
//! at 64 clients single-node `pmwire kv` counted 79 K SETs/s under threads
//! and 124 K under this loop, 3 members 28 K and 37 K (`docs/bench.md`,
//! "Throughput points from one client thread"). Each connection is
//! still a closed loop: one put outstanding, the next sent once its reply
//! came. A client whose protocol is plain request and reply bytes over TCP
//! implements [`Exchange`]; others (UCX) keep a thread each
//! (`peers::throughput_point`).

use anyhow::{bail, Context, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use super::peers::{key, PutClient, KEY_BYTES, VALUE_BYTES};

/// A put as request and reply bytes over one TCP connection.
pub trait Exchange {
    /// The connection.
    fn stream(&self) -> &TcpStream;

    /// Requests one put takes, each sent once the previous one's reply came
    /// (Redis + WAIT: the SET, then the WAIT).
    fn steps(&self) -> usize {
        1
    }

    /// Appends request `step` of a put of `value` under `key` to `out`.
    fn encode(&mut self, step: usize, key: &[u8], value: &[u8], out: &mut Vec<u8>);

    /// The length of the whole reply to request `step` at the start of
    /// `buf`, `None` while more bytes are needed; an error for a reply that
    /// is not a success.
    fn reply(&mut self, step: usize, buf: &[u8]) -> Result<Option<usize>>;
}

/// Most bytes a connection may hold unanswered before its reply is judged
/// runaway.
const MAX_PENDING_BYTES: usize = 1 << 20;

/// One connection's place in its closed loop.
struct Conn<C> {
    client: C,
    out: Vec<u8>,
    sent: usize,
    received: Vec<u8>,
    step: usize,
    seq: u64,
    /// `EPOLLOUT` is armed (a request the socket would not take whole).
    armed: bool,
}

/// `clients` connections (`first`, then `connect`ed ones), driven from this
/// thread for `warmup + seconds`; the puts completed within the timed
/// `seconds`. Any connection's error fails the point.
pub(crate) fn point<C: PutClient>(
    first: C,
    connect: &(dyn Fn() -> Result<C> + Sync),
    clients: usize,
    warmup: Duration,
    seconds: Duration,
) -> Result<u64> {
    let mut conns = Vec::with_capacity(clients);
    conns.push(first);
    for _ in 1..clients {
        conns.push(connect()?);
    }
    // SAFETY: plain syscall; the result is checked.
    let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    anyhow::ensure!(raw >= 0, "epoll_create1: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor we own.
    let epoll = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut conns: Vec<Conn<C>> = conns
        .into_iter()
        .map(|client| Conn { client, out: Vec::with_capacity(256), sent: 0, received: Vec::with_capacity(4096), step: 0, seq: 0, armed: false })
        .collect();
    for (i, c) in conns.iter_mut().enumerate() {
        let ex = c.client.exchange().context("a client of the event loop speaks plain TCP")?;
        ex.stream().set_nonblocking(true).context("a non-blocking client socket")?;
        let fd = ex.stream().as_raw_fd();
        control(&epoll, libc::EPOLL_CTL_ADD, fd, libc::EPOLLIN as u32, i)?;
    }
    let value = [b'v'; VALUE_BYTES];
    let start = Instant::now();
    let (timed_from, until) = (start + warmup, start + warmup + seconds);
    for (i, c) in conns.iter_mut().enumerate() {
        c.queue(i, &value);
        c.flush(&epoll, i)?;
    }
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; conns.len().max(1)];
    let mut counted = 0u64;
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let now = Instant::now();
        if now >= until {
            return Ok(counted);
        }
        let wait_ms = (until - now).as_millis().clamp(1, 1000) as i32;
        // SAFETY: `events` has room for `events.len()` entries.
        let n = unsafe { libc::epoll_wait(epoll.as_raw_fd(), events.as_mut_ptr(), events.len() as i32, wait_ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("epoll_wait");
        }
        for ev in &events[..n as usize] {
            let i = ev.u64 as usize;
            let c = &mut conns[i];
            if ev.events & libc::EPOLLOUT as u32 != 0 {
                c.flush(&epoll, i)?;
            }
            if ev.events & (libc::EPOLLIN | libc::EPOLLERR | libc::EPOLLHUP) as u32 == 0 {
                continue;
            }
            c.read_available(&mut chunk)?;
            let mut answered = false;
            while let Some(len) = c.client.exchange().expect("checked at start").reply(c.step, &c.received)? {
                c.received.drain(..len);
                c.step += 1;
                if c.step == c.client.exchange().expect("checked at start").steps() {
                    c.step = 0;
                    c.seq += 1;
                    if Instant::now() >= timed_from {
                        counted += 1;
                    }
                }
                c.queue(i, &value);
                answered = true;
            }
            if answered {
                c.flush(&epoll, i)?;
            }
        }
    }
}

impl<C: PutClient> Conn<C> {
    /// Encodes the connection's next request.
    fn queue(&mut self, id: usize, value: &[u8]) {
        let mut k = [0u8; KEY_BYTES];
        key(id, self.seq, &mut k);
        let ex = self.client.exchange().expect("checked at start");
        ex.encode(self.step, &k, value, &mut self.out);
    }

    /// Writes what is queued; what the socket would not take waits for
    /// `EPOLLOUT`.
    fn flush(&mut self, epoll: &OwnedFd, id: usize) -> Result<()> {
        let ex = self.client.exchange().expect("checked at start");
        let mut stream = ex.stream();
        while self.sent < self.out.len() {
            match stream.write(&self.out[self.sent..]) {
                Ok(0) => bail!("the server closed the connection"),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if !self.armed {
                        self.armed = true;
                        control(epoll, libc::EPOLL_CTL_MOD, stream.as_raw_fd(), (libc::EPOLLIN | libc::EPOLLOUT) as u32, id)?;
                    }
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("sending a request"),
            }
        }
        self.out.clear();
        self.sent = 0;
        if self.armed {
            self.armed = false;
            control(epoll, libc::EPOLL_CTL_MOD, stream.as_raw_fd(), libc::EPOLLIN as u32, id)?;
        }
        Ok(())
    }

    /// Reads everything the socket holds now.
    fn read_available(&mut self, chunk: &mut [u8]) -> Result<()> {
        let ex = self.client.exchange().expect("checked at start");
        let mut stream = ex.stream();
        loop {
            match stream.read(chunk) {
                Ok(0) => bail!("the server closed the connection mid-reply"),
                Ok(n) => self.received.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("reading a reply"),
            }
            if self.received.len() > MAX_PENDING_BYTES {
                bail!("a reply over {MAX_PENDING_BYTES} bytes");
            }
        }
    }
}

fn control(epoll: &OwnedFd, op: libc::c_int, fd: libc::c_int, events: u32, id: usize) -> Result<()> {
    let mut ev = libc::epoll_event { events, u64: id as u64 };
    // SAFETY: `ev` is a valid event for the duration of the call.
    let r = unsafe { libc::epoll_ctl(epoll.as_raw_fd(), op, fd, &mut ev) };
    anyhow::ensure!(r == 0, "epoll_ctl: {}", std::io::Error::last_os_error());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::peers::throughput_point;
    use super::super::raw_floor::SharedRawFloor;
    use crate::kvrep::members::Resp;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;
    use std::time::Duration;

    #[test]
    fn one_thread_drives_many_closed_loops_to_the_raw_floor() {
        let floor = SharedRawFloor::start().unwrap();
        let puts = throughput_point(&|| floor.client(), 8, Duration::from_millis(50), Duration::from_millis(300)).unwrap();
        assert!(puts > 8, "{puts} puts from 8 clients");
    }

    /// A RESP server that answers a connection's commands with `replies`
    /// in turn.
    fn answering(replies: &'static [&'static [u8]]) -> std::net::SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let mut s = s.unwrap();
                std::thread::spawn(move || {
                    let mut r = BufReader::new(s.try_clone().unwrap());
                    let mut line = String::new();
                    let mut next = replies.iter().cycle();
                    // Each command is an array header and its bulk strings.
                    while r.read_line(&mut line).is_ok_and(|n| n > 0) {
                        let n: usize = line.trim_start_matches('*').trim().parse().unwrap_or(0);
                        for _ in 0..2 * n {
                            line.clear();
                            r.read_line(&mut line).unwrap();
                        }
                        if s.write_all(next.next().unwrap()).is_err() {
                            return;
                        }
                        line.clear();
                    }
                });
            }
        });
        addr
    }

    #[test]
    fn a_refused_put_fails_the_point() {
        let addr = answering(&[b"-ERR refused\r\n"]);
        let e = throughput_point(&|| Resp::connect(addr), 4, Duration::ZERO, Duration::from_millis(200)).unwrap_err();
        assert!(format!("{e:#}").contains("SET answered"), "{e:#}");
    }

    #[test]
    fn a_wait_short_of_its_replicas_fails_the_point() {
        // +OK to the SET, then 1 to the WAIT: not every replica.
        let addr = answering(&[b"+OK\r\n", b":1\r\n"]);
        let plain = throughput_point(&|| Resp::connect(addr), 2, Duration::ZERO, Duration::from_millis(100));
        assert!(plain.is_err(), "without WAIT the second SET gets :1");
        let addr = answering(&[b"+OK\r\n", b":2\r\n"]);
        let waiting = || {
            Resp::connect(addr).map(|mut r| {
                r.wait = true;
                r
            })
        };
        assert!(throughput_point(&waiting, 2, Duration::ZERO, Duration::from_millis(100)).unwrap() > 0, "SET then WAIT, both answered");
        let addr = answering(&[b"+OK\r\n", b":1\r\n"]);
        let short = || {
            Resp::connect(addr).map(|mut r| {
                r.wait = true;
                r
            })
        };
        let e = throughput_point(&short, 2, Duration::ZERO, Duration::from_millis(200)).unwrap_err();
        assert!(format!("{e:#}").contains("only 1 of 2"), "{e:#}");
    }
}
