//! Limits a service sets on its connections at run time (`Service::limits`): a client limit
//! that refuses with the listener's reply, an idle timeout that spares the connections the
//! service names; and the loop's own bound on what all connections hold unconsumed, past
//! which the largest holder is evicted.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmwire_netio::echo::HttpEcho;
use pmwire_netio::{Batch, BufferSource, Config, ConnId, ConnLimits, HeapBuffers, Service};

use crate::common::*;

/// `HttpEcho` under limits the test changes while it runs; a connection that asked for a
/// path containing `keep` is spared by the idle timeout.
struct Limited {
    echo: HttpEcho,
    max_clients: Arc<AtomicU32>,
    /// Idle timeout in ms (0: none).
    idle_ms: Arc<AtomicU64>,
    kept: HashSet<ConnId>,
}

impl Limited {
    fn new(max_clients: u32, idle_ms: u64) -> (Limited, Arc<AtomicU32>, Arc<AtomicU64>) {
        let (m, i) = (
            Arc::new(AtomicU32::new(max_clients)),
            Arc::new(AtomicU64::new(idle_ms)),
        );
        (
            Limited {
                echo: HttpEcho::default(),
                max_clients: m.clone(),
                idle_ms: i.clone(),
                kept: HashSet::new(),
            },
            m,
            i,
        )
    }
}

impl<S: BufferSource> Service<S> for Limited {
    fn handle(&mut self, batch: &mut Batch, bufs: &mut S) {
        for i in 0..batch.len() {
            let input = batch.input(i);
            let bytes: Vec<u8> = input
                .segments
                .iter()
                .flat_map(|s| s.bytes.iter().copied())
                .collect();
            if bytes.windows(4).any(|w| w == b"keep") {
                self.kept.insert(input.conn);
            }
        }
        self.echo.handle(batch, bufs);
    }

    fn closed(&mut self, conn: ConnId, bufs: &mut S) {
        self.kept.remove(&conn);
        self.echo.closed(conn, bufs);
    }

    fn limits(&self) -> ConnLimits {
        let ms = self.idle_ms.load(Ordering::Relaxed);
        ConnLimits {
            max_clients: self.max_clients.load(Ordering::Relaxed),
            idle_timeout: (ms > 0).then(|| Duration::from_millis(ms)),
        }
    }

    fn idle_closable(&self, conn: ConnId) -> bool {
        !self.kept.contains(&conn)
    }
}

fn served(s: &mut std::net::TcpStream, path: &str) {
    write_all(s, &get(path));
    assert_eq!(Reader::new().read(s).status, 200);
}

#[test]
fn the_services_client_limit_refuses_with_the_reply_and_follows_changes() {
    let reply = b"-ERR max number of clients reached\r\n".to_vec();
    let (svc, max_clients, _) = Limited::new(2, 0);
    let cfg = Config {
        max_connections: 64,
        reject_reply: vec![reply.clone()],
        ..small_config()
    };
    let srv = start(cfg, HeapBuffers::new(256, 256), svc);
    let mut open: Vec<_> = (0..2).map(|_| connect(srv.addr)).collect();
    for s in &mut open {
        served(s, "/a");
    }
    let mut extra = connect(srv.addr);
    extra
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut got = Vec::new();
    extra.read_to_end(&mut got).expect("the reply, then EOF");
    assert_eq!(got, reply);
    // Raised at run time: the next client is served.
    max_clients.store(3, Ordering::Relaxed);
    let mut third = connect(srv.addr);
    served(&mut third, "/b");
    // Lowered below the open count: nobody is closed, newcomers are refused.
    max_clients.store(1, Ordering::Relaxed);
    let mut late = connect(srv.addr);
    late.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut got = Vec::new();
    late.read_to_end(&mut got).expect("the reply, then EOF");
    assert_eq!(got, reply);
    for s in open.iter_mut().chain([&mut third]) {
        served(s, "/still");
    }
    drop((open, third));
    let (server, _) = srv.stop();
    assert_eq!(server.stats().rejected, 2);
    assert_eq!(server.source().in_use(), 0);
}

#[test]
fn idle_connections_are_closed_unless_active_or_spared() {
    let (svc, _, idle_ms) = Limited::new(u32::MAX, 0);
    let srv = start(small_config(), HeapBuffers::new(256, 256), svc);
    let mut silent = connect(srv.addr); // never sends a byte
    let mut quiet = connect(srv.addr);
    served(&mut quiet, "/once");
    let mut spared = connect(srv.addr);
    served(&mut spared, "/keep");
    let mut busy = connect(srv.addr);
    // No timeout yet: all stay open through a second of silence.
    std::thread::sleep(Duration::from_millis(1000));
    served(&mut quiet, "/no-timeout-yet");
    // A 1 s timeout from now (set at run time).
    idle_ms.store(1000, Ordering::Relaxed);
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(3500) {
        served(&mut busy, "/busy");
        std::thread::sleep(Duration::from_millis(50));
    }
    for s in [&mut silent, &mut quiet] {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        expect_eof(s);
    }
    served(&mut spared, "/keep-again");
    served(&mut busy, "/busy-again");
    drop((spared, busy));
    let (server, _) = srv.stop();
    assert_eq!(server.stats().idle_closes, 2);
    assert_eq!(server.source().in_use(), 0);
}

#[test]
fn past_the_receive_budget_the_largest_holder_is_evicted() {
    // Buffers of 256 B; all connections together may hold 12 of them unconsumed.
    let cfg = Config {
        rx_budget_buffers: 12,
        ..small_config()
    };
    let srv = start(cfg, HeapBuffers::new(512, 256), HttpEcho::default());
    let head = |len: usize| {
        format!("POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: {len}\r\n\r\n").into_bytes()
    };
    let partial = |s: &mut std::net::TcpStream, body: usize| {
        let mut req = head(4096);
        req.extend_from_slice(&vec![b'x'; body]);
        // One buffer per write at most: each lands in a segment of its own.
        for chunk in req.chunks(256) {
            s.write_all(chunk).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let mut big = connect(srv.addr);
    partial(&mut big, 1800); // about 8 buffers
    let mut small = connect(srv.addr);
    partial(&mut small, 700); // about 3
    std::thread::sleep(Duration::from_millis(300));
    let mut third = connect(srv.addr);
    partial(&mut third, 700); // about 3 more: past 12
    big.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    expect_eof(&mut big);
    // The others finish their requests and are answered.
    for (s, sent) in [(&mut small, 700), (&mut third, 700)] {
        s.write_all(&vec![b'y'; 4096 - sent]).unwrap();
        let r = Reader::new().read(s);
        assert_eq!((r.status, r.body.len()), (200, 4096));
    }
    drop((small, third));
    let (server, _) = srv.stop();
    assert_eq!(server.stats().rx_evictions, 1);
    assert_eq!(server.source().in_use(), 0);
}
