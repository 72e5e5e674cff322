//! Every refusal status, and clients that vanish mid-request.

use std::io::{Read, Write};
use std::net::TcpStream;

use pmwire_netio::echo::HttpEcho;
use pmwire_netio::http::Limits;
use pmwire_netio::{Config, HeapBuffers};

use crate::common::*;

fn refused(addr: std::net::SocketAddr, req: &[u8]) -> u16 {
    let mut s = connect(addr);
    write_all(&mut s, req);
    let resp = Reader::new().read(&mut s);
    assert!(resp.close, "a refusal must close the connection");
    assert!(!resp.body.is_empty(), "a refusal explains itself");
    expect_eof(&mut s);
    resp.status
}

#[test]
fn every_refusal_status() {
    let limits = Limits { max_head_bytes: 1024, max_body_bytes: 4096 };
    let srv = start(small_config(), HeapBuffers::new(512, 256), HttpEcho::new(limits));
    let a = srv.addr;
    assert_eq!(refused(a, b"GET / HTTP/1.1\r\nBad Header\r\n\r\n"), 400);
    assert_eq!(refused(a, b"GET / HTTP/9.9\r\n\r\n"), 400);
    assert_eq!(refused(a, b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 400);
    assert_eq!(refused(a, b"POST / HTTP/1.1\r\nContent-Length: 4097\r\n\r\n"), 413);
    let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(2000));
    assert_eq!(refused(a, long.as_bytes()), 431);
    assert_eq!(refused(a, b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), 501);
    // A valid request, then a bad one on the same connection: the first is answered.
    let mut s = connect(a);
    write_all(&mut s, b"GET /ok HTTP/1.1\r\n\r\nBAD\r\n\r\n");
    let mut r = Reader::new();
    assert_eq!(r.read(&mut s).status, 200);
    assert_eq!(r.read(&mut s).status, 400);
    expect_eof(&mut s);
    // HTTP/1.0 without keep-alive: answered, then closed.
    let mut s = connect(a);
    write_all(&mut s, b"GET /old HTTP/1.0\r\n\r\n");
    let resp = Reader::new().read(&mut s);
    assert_eq!((resp.status, resp.close), (200, true));
    expect_eof(&mut s);
    let (server, _) = srv.stop();
    let svc = server.service();
    assert_eq!([400, 413, 431, 501].map(|st| svc.refused_with(st)), [4, 1, 1, 1]);
    assert_eq!(server.source().in_use(), 0);
}

fn reset(s: TcpStream) {
    // SO_LINGER 0: close sends a RST.
    let l = libc::linger { l_onoff: 1, l_linger: 0 };
    use std::os::fd::AsRawFd;
    // SAFETY: valid socket and option.
    unsafe {
        libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_LINGER, (&l as *const libc::linger).cast(), 8)
    };
    drop(s);
}

#[test]
fn clients_vanishing_mid_request() {
    let cfg = Config { ..small_config() };
    let srv = start(cfg, HeapBuffers::new(1024, 256), HttpEcho::default());
    for i in 0..30u64 {
        let mut s = connect(srv.addr);
        let req = post("/gone", &body(i, 5000));
        let cut = (i as usize * 167) % req.len();
        s.write_all(&req[..cut]).unwrap();
        if i % 2 == 0 {
            reset(s);
        } else {
            drop(s);
        }
    }
    // Half a request then half-close: the server drops the partial request and closes.
    let mut s = connect(srv.addr);
    s.write_all(b"GET /half HTTP/1.1\r\nHo").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    expect_eof(&mut s);
    // The server still serves.
    let mut s = connect(srv.addr);
    write_all(&mut s, &get("/alive"));
    assert_eq!(Reader::new().read(&mut s).body, b"/alive\n");
    drop(s);
    let (server, _) = srv.stop();
    assert_eq!(server.source().in_use(), 0);
    assert_eq!(server.stats().accepted, server.stats().closed);
}

#[test]
fn connections_over_the_limit_are_refused() {
    let cfg = Config { max_connections: 4, ..small_config() };
    let srv = start(cfg, HeapBuffers::new(256, 256), HttpEcho::default());
    let mut open: Vec<_> = (0..4).map(|_| connect(srv.addr)).collect();
    for s in &mut open {
        write_all(s, &get("/a"));
        assert_eq!(Reader::new().read(s).status, 200);
    }
    let mut extra = connect(srv.addr);
    let _ = extra.write_all(&get("/b"));
    expect_eof(&mut extra);
    drop(open);
    let (server, _) = srv.stop();
    assert_eq!(server.stats().rejected, 1);
    assert_eq!(server.source().in_use(), 0);
}

#[test]
fn a_refused_connection_is_sent_the_listeners_reply_first() {
    let reply = b"-ERR max number of clients reached\r\n".to_vec();
    let cfg = Config { max_connections: 2, reject_reply: vec![reply.clone()], ..small_config() };
    let srv = start(cfg, HeapBuffers::new(256, 256), HttpEcho::default());
    let mut open: Vec<_> = (0..2).map(|_| connect(srv.addr)).collect();
    for s in &mut open {
        write_all(s, &get("/a"));
        assert_eq!(Reader::new().read(s).status, 200);
    }
    let mut extra = connect(srv.addr);
    let mut got = Vec::new();
    extra.read_to_end(&mut got).expect("the reply, then EOF");
    assert_eq!(got, reply);
    drop(open);
    let (server, _) = srv.stop();
    assert_eq!(server.stats().rejected, 1);
}

#[test]
fn refusal_reaches_a_client_still_sending_its_body() {
    // The server refuses from the head (413) while the client is still writing 4 MB: it
    // half-closes and drains, so the client reads the 413 rather than a reset.
    let limits = Limits { max_head_bytes: 1024, max_body_bytes: 4096 };
    let srv = start(small_config(), HeapBuffers::new(512, 256), HttpEcho::new(limits));
    for _ in 0..3 {
        let mut s = connect(srv.addr);
        let req = post("/huge", &vec![b'z'; 4 << 20]);
        let mut w = s.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            // The server drains what it will not read: the whole body goes out without a reset.
            w.write_all(&req).expect("write the refused body");
            w.shutdown(std::net::Shutdown::Write).unwrap();
        });
        let resp = Reader::new().read(&mut s);
        assert_eq!((resp.status, resp.close), (413, true));
        writer.join().unwrap();
        let mut b = [0u8; 16];
        assert_eq!(s.read(&mut b).expect("a clean EOF, not a reset"), 0);
    }
    let (server, _) = srv.stop();
    assert_eq!(server.service().refused_with(413), 3);
    assert_eq!(server.source().in_use(), 0);
}
