//! The echo service over real sockets: many connections, pipelining, split requests, receive
//! modes, back-pressure, and buffer accounting after every run.

use std::io::Write;

use pmwire_netio::echo::HttpEcho;
use pmwire_netio::http::Limits;
use pmwire_netio::{Config, HeapBuffers, RecvMode};

use crate::common::*;

#[test]
fn many_connections_round_robin() {
    let srv = start(small_config(), HeapBuffers::new(4096, 256), HttpEcho::default());
    let mut conns: Vec<_> = (0..50).map(|_| (connect(srv.addr), Reader::new())).collect();
    for round in 0..20u64 {
        for (i, (s, _)) in conns.iter_mut().enumerate() {
            let b = body(round * 100 + i as u64, (i * 37 + round as usize * 11) % 900 + 1);
            write_all(s, &post("/e", &b));
        }
        for (i, (s, r)) in conns.iter_mut().enumerate() {
            let resp = r.read(s);
            assert_eq!(resp.status, 200);
            assert_eq!(resp.body, body(round * 100 + i as u64, (i * 37 + round as usize * 11) % 900 + 1));
        }
    }
    drop(conns);
    let (server, _) = srv.stop();
    assert_eq!(server.service().requests, 1000);
    assert_eq!(server.source().in_use(), 0, "buffers leaked");
    assert!(server.stats().accepted >= 50);
    assert!(server.stats().ring_refills > 0);
}

fn pipelined(mode: RecvMode, copy_body: bool) {
    let cfg = Config { recv_mode: mode, ..small_config() };
    let mut svc = HttpEcho::default();
    svc.copy_body = copy_body;
    let srv = start(cfg, HeapBuffers::new(2048, 256), svc);
    let mut s = connect(srv.addr);
    let mut all = Vec::new();
    for i in 0..100u64 {
        if i % 3 == 0 {
            all.extend_from_slice(&get(&format!("/p{i}")));
        } else {
            all.extend_from_slice(&post("/p", &body(i, (i as usize * 53) % 700 + 1)));
        }
    }
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&all).unwrap());
    let mut r = Reader::new();
    for i in 0..100u64 {
        let resp = r.read(&mut s);
        assert_eq!(resp.status, 200);
        if i % 3 == 0 {
            assert_eq!(resp.body, format!("/p{i}\n").as_bytes());
        } else {
            assert_eq!(resp.body, body(i, (i as usize * 53) % 700 + 1), "response {i}");
        }
    }
    writer.join().unwrap();
    drop(s);
    let (server, _) = srv.stop();
    assert_eq!(server.service().requests, 100);
    assert_eq!(server.source().in_use(), 0);
    assert!(!server.stats().multishot_fallback);
}

#[test]
fn pipelined_multishot_zero_copy() {
    pipelined(RecvMode::Multishot, false);
}

#[test]
fn pipelined_single_shot_copy() {
    pipelined(RecvMode::SingleShot, true);
}

#[test]
fn requests_written_in_tiny_pieces() {
    let srv = start(small_config(), HeapBuffers::new(1024, 256), HttpEcho::default());
    let mut s = connect(srv.addr);
    let mut r = Reader::new();
    for (i, piece) in [1usize, 2, 3, 7, 64, 255, 256, 257].into_iter().enumerate() {
        let b = body(i as u64, 1500);
        let req = post("/tiny", &b);
        for chunk in req.chunks(piece) {
            write_all(&mut s, chunk);
        }
        let resp = r.read(&mut s);
        assert_eq!(resp.body, b, "piece size {piece}");
    }
    drop(s);
    let (server, _) = srv.stop();
    assert_eq!(server.source().in_use(), 0);
}

#[test]
fn bodies_up_to_the_limit() {
    let max = 64 << 10;
    let cfg = Config { ring_entries: 256, max_rx_bytes: max + 4096, ..Config::default() };
    let srv =
        start(cfg, HeapBuffers::new(2048, 256), HttpEcho::new(Limits { max_head_bytes: 4096, max_body_bytes: max }));
    let mut s = connect(srv.addr);
    let mut r = Reader::new();
    for len in [max - 1, max, 1, max / 2 + 3] {
        let b = body(len as u64, len);
        let mut w = s.try_clone().unwrap();
        let req = post("/big", &b);
        let writer = std::thread::spawn(move || w.write_all(&req).unwrap());
        let resp = r.read(&mut s);
        writer.join().unwrap();
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body.len(), len);
        assert!(resp.body == b, "body of {len} bytes differs");
    }
    // One byte over: 413 and close, without reading the body.
    write_all(&mut s, format!("POST /big HTTP/1.1\r\nContent-Length: {}\r\n\r\nxx", max + 1).as_bytes());
    let resp = r.read(&mut s);
    assert_eq!(resp.status, 413);
    assert!(resp.close);
    expect_eof(&mut s);
    let (server, _) = srv.stop();
    assert_eq!(server.service().refused_with(413), 1);
    assert_eq!(server.source().in_use(), 0);
}

#[test]
fn output_back_pressure_pauses_reading() {
    // Tiny send queue; the client writes 300 requests before reading any response.
    let cfg = Config { max_tx_bytes: 2048, ..small_config() };
    let srv = start(cfg, HeapBuffers::new(2048, 256), HttpEcho::default());
    let mut s = connect(srv.addr);
    let mut all = Vec::new();
    for i in 0..300u64 {
        all.extend_from_slice(&post("/bp", &body(i, 2000)));
    }
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&all).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut r = Reader::new();
    for i in 0..300u64 {
        let resp = r.read(&mut s);
        assert_eq!(resp.body, body(i, 2000), "response {i}");
    }
    writer.join().unwrap();
    drop(s);
    let (server, _) = srv.stop();
    assert!(server.stats().read_pauses > 0, "{:?}", server.stats());
    assert_eq!(server.source().in_use(), 0);
}

#[test]
fn ring_exhaustion_with_a_tiny_pool() {
    // 24 buffers of 256 B, 16 of them in the ring: four connections writing 40 KB each at
    // once must run the ring dry; the loop re-arms and loses no byte.
    let cfg = Config { ring_entries: 16, max_rx_bytes: 2048, ..Config::default() };
    let srv = start(cfg, HeapBuffers::new(24, 256), HttpEcho::default());
    let mut writers = Vec::new();
    let mut conns = Vec::new();
    for c in 0..4u64 {
        let s = connect(srv.addr);
        let mut all = Vec::new();
        for i in 0..100u64 {
            all.extend_from_slice(&post("/x", &body(c * 1000 + i, 300)));
        }
        let mut w = s.try_clone().unwrap();
        writers.push(std::thread::spawn(move || w.write_all(&all).unwrap()));
        conns.push(s);
    }
    for (c, s) in conns.iter_mut().enumerate() {
        let mut r = Reader::new();
        for i in 0..100u64 {
            let resp = r.read(s);
            assert_eq!(resp.body, body(c as u64 * 1000 + i, 300), "conn {c} response {i}");
        }
    }
    for w in writers {
        w.join().unwrap();
    }
    drop(conns);
    let (server, _) = srv.stop();
    let st = server.stats();
    assert!(st.enobufs > 0, "the ring never ran dry: {st:?}");
    assert_eq!(server.service().requests, 400);
    assert_eq!(server.source().in_use(), 0);
}

fn idle_server_sleeps(busy_poll_us: u32) {
    let cfg = Config { busy_poll_us, ..small_config() };
    let srv = start(cfg, HeapBuffers::new(256, 256), HttpEcho::default());
    let mut s = connect(srv.addr);
    write_all(&mut s, &get("/idle"));
    assert_eq!(Reader::new().read(&mut s).status, 200);
    // One connection open, nothing sent for a second: the loop must block in the kernel.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let (server, cpu_s) = srv.stop();
    assert!(cpu_s < 0.25, "server thread used {cpu_s:.3} s of CPU over an idle second");
    assert!(server.stats().wakeups < 1000, "{:?}", server.stats());
    println!(
        "idle (busy poll {busy_poll_us} us): server thread CPU {:.1} ms over ~1 s, {} wake-ups",
        cpu_s * 1e3,
        server.stats().wakeups
    );
}

#[test]
fn idle_server_sleeps_blocking() {
    idle_server_sleeps(0);
}

#[test]
fn idle_server_sleeps_after_its_poll_budget() {
    idle_server_sleeps(50);
}

/// With a batch wait, turns that sent replies wait for the requests they bring; a wait that
/// gets fewer than it expects still ends (here: ten connections answered, then only one
/// sends again, after a pause, and is answered), and an idle loop still sleeps.
#[test]
fn batch_wait_ends_with_fewer_arrivals_than_expected() {
    let cfg = Config { batch_wait_us: 200, ..small_config() };
    let srv = start(cfg, HeapBuffers::new(1024, 256), HttpEcho::default());
    let mut conns: Vec<_> = (0..10).map(|_| (connect(srv.addr), Reader::new())).collect();
    for round in 0..50u64 {
        for (i, (s, _)) in conns.iter_mut().enumerate() {
            write_all(s, &post("/b", &body(round * 10 + i as u64, 100)));
        }
        for (i, (s, r)) in conns.iter_mut().enumerate() {
            assert_eq!(r.read(s).body, body(round * 10 + i as u64, 100));
        }
    }
    for pause_ms in [0, 5, 50] {
        std::thread::sleep(std::time::Duration::from_millis(pause_ms));
        let (s, r) = &mut conns[3];
        write_all(s, &post("/alone", b"alone"));
        assert_eq!(r.read(s).body, b"alone");
    }
    std::thread::sleep(std::time::Duration::from_secs(1));
    drop(conns);
    let (server, cpu_s) = srv.stop();
    let stats = server.stats();
    assert_eq!(server.service().requests, 503);
    assert_eq!(server.source().in_use(), 0, "buffers leaked");
    assert!(cpu_s < 0.5, "server thread used {cpu_s:.3} s of CPU over about a second, mostly idle");
    assert_eq!(stats.batch_waits > 0, stats.min_wait_supported, "{stats:?}");
    println!("batch wait: {stats:?}");
}

/// A seeded xorshift generator (the seed is printed so a failure can be replayed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn random_requests_in_random_pieces() {
    let seed: u64 = std::env::var("NETIO_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_0001);
    println!("NETIO_SEED={seed}");
    let mut rng = Rng(seed | 1);
    for round in 0..4 {
        let buf_size = [128u32, 256, 512, 2048][round];
        let cfg = Config { ring_entries: 64, max_rx_bytes: 40 << 10, ..Config::default() };
        let limits = Limits { max_head_bytes: 2048, max_body_bytes: 32 << 10 };
        let mut svc = HttpEcho::new(limits);
        svc.copy_body = round % 2 == 1;
        let srv = start(cfg, HeapBuffers::new(4096, buf_size), svc);
        let mut conns: Vec<_> = (0..8).map(|_| (connect(srv.addr), Reader::new())).collect();
        let mut expected = 0u64;
        for _ in 0..25 {
            for (s, r) in conns.iter_mut() {
                // 1..4 pipelined requests, written in random pieces.
                let n = 1 + rng.below(4);
                let mut bytes = Vec::new();
                let mut want = Vec::new();
                for _ in 0..n {
                    if rng.below(4) == 0 {
                        let path = format!("/r{}", rng.below(1 << 20));
                        bytes.extend_from_slice(&get(&path));
                        want.push(format!("{path}\n").into_bytes());
                    } else {
                        let b = body(rng.next(), 1 + rng.below(32 << 10) as usize);
                        bytes.extend_from_slice(&post("/b", &b));
                        want.push(b);
                    }
                }
                let mut w = s.try_clone().unwrap();
                let cuts: Vec<usize> = (0..1 + rng.below(6)).map(|_| rng.below(bytes.len() as u64) as usize).collect();
                let writer = std::thread::spawn(move || {
                    let mut cuts = cuts;
                    cuts.sort();
                    let mut at = 0;
                    for c in cuts.into_iter().chain([bytes.len()]) {
                        w.write_all(&bytes[at..c]).unwrap();
                        at = c;
                    }
                });
                for wb in want {
                    let resp = r.read(s);
                    assert_eq!(resp.status, 200, "seed {seed}");
                    assert!(resp.body == wb, "seed {seed}: body of {} bytes differs", wb.len());
                    expected += 1;
                }
                writer.join().unwrap();
            }
        }
        drop(conns);
        let (server, _) = srv.stop();
        assert_eq!(server.service().requests, expected, "seed {seed}");
        assert_eq!(server.service().closed, server.stats().accepted, "closed() once per connection");
        assert_eq!(server.source().in_use(), 0, "seed {seed}: buffers leaked");
    }
}
