//! The service's wake-ups and timer: a parked request is answered later with no new bytes
//! from its peer, either because another connection's request released it (a wake-up) or
//! because its deadline passed (the loop's timer, with the loop otherwise idle).
//!
//! The service: `P<ms>\n` parks the connection (its line consumed) until `ms` milliseconds
//! pass (answered `late\n`) or a `R\n` from any connection releases every parked one
//! (answered `released\n`; `R` itself answers `ok\n`); `N\n` answers how many are parked.
//! Lines behind a parked one wait.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use pmwire_netio::{Batch, ConnId, HeapBuffers, Service};

use crate::common::{connect, small_config, start};

#[derive(Default)]
struct Parking {
    parked: BTreeMap<ConnId, Instant>,
    answers: BTreeMap<ConnId, &'static [u8]>,
    wake: Vec<ConnId>,
    shown_empty: u32,
}

impl Service<HeapBuffers> for Parking {
    fn handle(&mut self, batch: &mut Batch, _bufs: &mut HeapBuffers) {
        for i in 0..batch.len() {
            let (input, reply) = batch.split(i);
            if let Some(answer) = self.answers.remove(&input.conn) {
                reply.output.push_bytes(answer);
            }
            let bytes: Vec<u8> = input.segments.iter().flat_map(|s| s.bytes.iter().copied()).collect();
            self.shown_empty += u32::from(bytes.is_empty());
            if self.parked.contains_key(&input.conn) {
                continue;
            }
            let mut at = 0;
            while let Some(n) = bytes[at..].iter().position(|&b| b == b'\n') {
                let line = &bytes[at..at + n];
                at += n + 1;
                if line == b"R" {
                    reply.output.push_bytes(b"ok\n");
                    for (conn, _) in std::mem::take(&mut self.parked) {
                        self.answers.insert(conn, b"released\n");
                        self.wake.push(conn);
                    }
                } else if line == b"N" {
                    reply.output.push_bytes(format!("{}\n", self.parked.len()).as_bytes());
                } else if let Some(ms) = line.strip_prefix(b"P") {
                    let ms: u64 = std::str::from_utf8(ms).unwrap().parse().unwrap();
                    self.parked.insert(input.conn, Instant::now() + Duration::from_millis(ms));
                    break;
                }
            }
            reply.consumed = at;
        }
    }

    fn closed(&mut self, conn: ConnId, _bufs: &mut HeapBuffers) {
        self.parked.remove(&conn);
        self.answers.remove(&conn);
    }

    fn wakeups(&mut self, wake: &mut Vec<ConnId>) -> Option<Instant> {
        let now = Instant::now();
        let due: Vec<ConnId> = self.parked.iter().filter(|(_, d)| **d <= now).map(|(c, _)| *c).collect();
        for conn in due {
            self.parked.remove(&conn);
            self.answers.insert(conn, b"late\n");
            self.wake.push(conn);
        }
        wake.append(&mut self.wake);
        self.parked.values().min().copied()
    }
}

fn read_line(s: &mut std::net::TcpStream) -> Vec<u8> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.last() != Some(&b'\n') {
        assert_eq!(s.read(&mut byte).expect("read"), 1, "connection closed");
        line.push(byte[0]);
    }
    line
}

#[test]
fn parked_requests_are_answered_by_wake_ups_and_by_the_timer() {
    let srv = start(small_config(), HeapBuffers::new(256, 256), Parking::default());
    let (mut a, mut b, mut c) = (connect(srv.addr), connect(srv.addr), connect(srv.addr));
    // Released by another connection; the line behind the parked one waits for it.
    a.write_all(b"P600000\nR\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        b.write_all(b"N\n").unwrap();
        if read_line(&mut b) == b"1\n" {
            break;
        }
        assert!(Instant::now() < deadline, "never parked");
        std::thread::sleep(Duration::from_millis(2));
    }
    b.write_all(b"R\n").unwrap();
    assert_eq!(read_line(&mut b), b"ok\n");
    assert_eq!(read_line(&mut a), b"released\n");
    assert_eq!(read_line(&mut a), b"ok\n");
    // Nothing else happens: only the timer can answer these (shortest first, both in time).
    c.write_all(b"P80\n").unwrap();
    a.write_all(b"P40\n").unwrap();
    assert_eq!(read_line(&mut a), b"late\n");
    assert_eq!(read_line(&mut c), b"late\n");
    drop((a, b, c));
    let (server, _) = srv.stop();
    assert!(server.service().shown_empty >= 2, "woken connections with nothing unread are shown");
    assert!(server.service().parked.is_empty());
}

/// A connection parked for a second with nothing else to do: the loop sleeps in the kernel
/// until the timer (few wake-ups, little CPU), then answers.
#[test]
fn a_parked_connection_lets_the_loop_sleep_until_its_deadline() {
    let srv = start(small_config(), HeapBuffers::new(256, 256), Parking::default());
    let mut a = connect(srv.addr);
    a.write_all(b"P1000\n").unwrap();
    assert_eq!(read_line(&mut a), b"late\n");
    drop(a);
    let (server, cpu_s) = srv.stop();
    assert!(cpu_s < 0.25, "server thread used {cpu_s:.3} s of CPU while a connection waited ~1 s");
    assert!(server.stats().wakeups < 100, "{:?}", server.stats());
}
