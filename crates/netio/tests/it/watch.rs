//! One thread, one loop: a netio server whose service also drives a network transport
//! (`transport::TcpTransport`) to a peer, waiting on the transport's event fd through
//! `Service::watch` beside its own sockets (issue 26, item 9).
//!
//! The service relays each line a client sends to the peer as a call and answers the client
//! with the peer's response. The peer answers only after the loop has gone idle, and the loop
//! has no timer: the answers reach the client only if the transport's fd wakes the loop.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use pmwire_netio::{Batch, Config, ConnId, HeapBuffers, Server, Service, Stats, Watch};
use transport::{Event, EventFd, Output, TcpConfig, TcpTransport, Transport};

use crate::common::connect;

/// Relays lines to the peer and the peer's answers back.
struct Relay {
    t: TcpTransport,
    peer: transport::ConnId,
    next: u64,
    waiting: HashMap<u64, ConnId>,
    answers: HashMap<ConnId, Vec<u8>>,
    events: Vec<Event>,
}

impl Service<HeapBuffers> for Relay {
    fn handle(&mut self, batch: &mut Batch, _bufs: &mut HeapBuffers) {
        for i in 0..batch.len() {
            let (input, reply) = batch.split(i);
            if let Some(answer) = self.answers.remove(&input.conn) {
                reply.output.push_bytes(&answer);
            }
            let bytes: Vec<u8> = input.segments.iter().flat_map(|s| s.bytes.iter().copied()).collect();
            let mut at = 0;
            while let Some(n) = bytes[at..].iter().position(|&b| b == b'\n') {
                self.next += 1;
                self.t.call(self.peer, b"up", bytes[at..at + n].to_vec(), self.next).expect("within the window");
                self.waiting.insert(self.next, input.conn);
                at += n + 1;
            }
            reply.consumed = at;
        }
    }

    fn wakeups(&mut self, wake: &mut Vec<ConnId>) -> Option<Instant> {
        self.t.poll(&mut self.events, 64);
        for e in self.events.drain(..) {
            let Event::Completion(c) = e else { continue };
            let client = self.waiting.remove(&c.token).expect("a call of ours");
            let Ok(Output::Response { payload, .. }) = c.result else { panic!("the peer failed: {:?}", c.result) };
            let answer = self.answers.entry(client).or_default();
            answer.extend_from_slice(&payload);
            answer.push(b'\n');
            if !wake.contains(&client) {
                wake.push(client);
            }
        }
        None
    }

    fn watch(&mut self) -> Watch {
        match self.t.event_fd() {
            EventFd::Ready => Watch::Ready,
            EventFd::Armed(fd) => Watch::Fd(fd),
            EventFd::Unsupported => Watch::Nothing,
        }
    }
}

/// The peer: answers each call with its payload in capitals, once `go` says so.
fn peer(stop: Arc<AtomicBool>, go: mpsc::Receiver<()>, addr_tx: mpsc::Sender<std::net::SocketAddr>) {
    let mut t = TcpTransport::new(&TcpConfig::default()).unwrap();
    addr_tx.send(t.listen("127.0.0.1:0".parse().unwrap()).unwrap()).unwrap();
    let mut events = Vec::new();
    let mut held = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        if t.poll(&mut events, 64) == 0 {
            t.wait(Duration::from_millis(10)).unwrap();
        }
        for e in events.drain(..) {
            if let Event::Request(r) = e {
                held.push(r);
            }
        }
        if !held.is_empty() && go.try_recv().is_ok() {
            for r in held.drain(..) {
                let _ = t.reply(r.id, b"", r.payload.to_ascii_uppercase());
            }
        }
    }
}

#[test]
fn one_loop_serves_its_clients_and_a_transports_peer() {
    let stop = Arc::new(AtomicBool::new(false));
    let (go_tx, go_rx) = mpsc::channel();
    let (peer_tx, peer_rx) = mpsc::channel();
    let peer_stop = stop.clone();
    let peer_thread = std::thread::spawn(move || peer(peer_stop, go_rx, peer_tx));
    let peer_addr = peer_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let (server_tx, server_rx) = mpsc::channel();
    let server_thread = std::thread::spawn(move || -> Stats {
        let mut t = TcpTransport::new(&TcpConfig::default()).unwrap();
        let peer = t.connect(&peer_addr).unwrap();
        let relay = Relay { t, peer, next: 0, waiting: HashMap::new(), answers: HashMap::new(), events: Vec::new() };
        let mut server = Server::bind("127.0.0.1:0", Config::default(), HeapBuffers::new(4096, 64), relay).unwrap();
        server_tx.send((server.local_addr(), server.stop_handle())).unwrap();
        server.run().unwrap();
        server.stats().clone()
    });
    let (addr, stop_server) = server_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let mut client = connect(addr);
    let mut lines = BufReader::new(client.try_clone().unwrap());
    for (round, words) in [["hello", "world"], ["one", "loop"]].iter().enumerate() {
        client.write_all(format!("{}\n{}\n", words[0], words[1]).as_bytes()).unwrap();
        // Let the loop go idle (its relayed calls are out, the peer holds them), then release
        // the answers: only the transport's fd can wake the loop for them.
        std::thread::sleep(Duration::from_millis(50));
        go_tx.send(()).unwrap();
        for w in words {
            let mut line = String::new();
            lines.read_line(&mut line).unwrap_or_else(|e| panic!("round {round}: no answer for {w}: {e}"));
            assert_eq!(line, format!("{}\n", w.to_ascii_uppercase()));
        }
    }
    stop_server.stop();
    let stats = server_thread.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    peer_thread.join().unwrap();
    assert!(stats.watch_wakeups + stats.watch_ready > 0, "{stats:?}");
}
