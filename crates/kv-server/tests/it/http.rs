//! HTTP (pKVS): routes, pipelining, limits, the user log.

use pmwire_kv_server::client::{HttpClient, RespClient};
use pmwire_kv_server::Mode;

use crate::common::*;

#[test]
fn routes_in_every_mode() {
    for mode in [Mode::ZeroCopy, Mode::Copy, Mode::NoPersist] {
        let pool = Pool::new();
        let server = start(&pool.path, mode);
        let mut c = HttpClient::connect(server.http).unwrap();
        assert_eq!(c.request("POST", "/kv/a", b"alpha").unwrap().status, 204);
        let r = c.request("GET", "/kv/a", b"").unwrap();
        assert_eq!((r.status, &r.body[..]), (200, &b"alpha"[..]), "{mode}");
        assert_eq!(c.request("PUT", "/kv/a", b"beta").unwrap().status, 204);
        assert_eq!(c.request("GET", "/kv/a", b"").unwrap().body, b"beta");
        assert_eq!(c.request("GET", "/kv/missing", b"").unwrap().status, 404);
        assert_eq!(c.request("DELETE", "/kv/a", b"").unwrap().status, 200);
        assert_eq!(c.request("DELETE", "/kv/a", b"").unwrap().status, 404);
        assert_eq!(c.request("GET", "/kv/a", b"").unwrap().status, 404);
        assert_eq!(c.request("PATCH", "/kv/a", b"x").unwrap().status, 405);
        assert_eq!(c.request("GET", "/log", b"").unwrap().status, 405);
        assert_eq!(c.request("GET", "/elsewhere", b"").unwrap().status, 404);
        let r0 = c.request("POST", "/log", b"entry one").unwrap();
        let r1 = c.request("POST", "/log", b"entry two").unwrap();
        assert_eq!((r0.status, r1.status), (200, 200));
        let lsn0: u64 = std::str::from_utf8(&r0.body).unwrap().trim().parse().unwrap();
        let lsn1: u64 = std::str::from_utf8(&r1.body).unwrap().trim().parse().unwrap();
        assert!(lsn1 > lsn0);
        let read = c.request("GET", &format!("/log/{lsn1}"), b"").unwrap();
        if mode == Mode::NoPersist {
            assert_eq!(read.status, 404, "no-persist stores nothing");
        } else {
            assert_eq!((read.status, &read.body[..]), (200, &b"entry two"[..]));
        }
        // The same keys through RESP.
        assert_eq!(c.request("POST", "/kv/shared", b"from http").unwrap().status, 204);
        let mut r = RespClient::connect(server.resp).unwrap();
        assert_eq!(r.get(b"shared").unwrap(), Some(b"from http".to_vec()));
        // A collection is refused as RESP's GET refuses it, small (a blob) or chunked (a header).
        for n in [3, 200] {
            let key = format!("list{n}");
            let mut push = vec![b"RPUSH".to_vec(), key.clone().into_bytes()];
            push.extend((0..n).map(|i| format!("e{i}").into_bytes()));
            r.call(&push).unwrap();
            let got = c.request("GET", &format!("/kv/{key}"), b"").unwrap();
            assert_eq!(got.status, 409, "{mode} {key}");
            assert!(got.body.starts_with(b"WRONGTYPE"), "{mode} {key}");
            assert_eq!(c.request("DELETE", &format!("/kv/{key}"), b"").unwrap().status, 200);
        }
        drop((c, r));
        server.stop();
    }
}

#[test]
fn pipelined_requests_and_big_bodies() {
    for mode in MODES {
        let pool = Pool::new();
        let server = start(&pool.path, mode);
        let mut c = HttpClient::connect(server.http).unwrap();
        let mut out = Vec::new();
        for i in 0..100u64 {
            let len = if i % 10 == 0 { 64 << 10 } else { 10 + i as usize * 37 };
            HttpClient::encode("POST", &format!("/kv/k{i}"), &value(i, len), &mut out);
            HttpClient::encode("GET", &format!("/kv/k{i}"), b"", &mut out);
        }
        for piece in out.chunks(3000) {
            c.write_raw(piece).unwrap();
        }
        for i in 0..100u64 {
            let len = if i % 10 == 0 { 64 << 10 } else { 10 + i as usize * 37 };
            assert_eq!(c.read_response().unwrap().status, 204);
            let r = c.read_response().unwrap();
            assert_eq!((r.status, r.body.len()), (200, len), "{mode} k{i}");
            assert!(r.body == value(i, len), "{mode} k{i} bytes");
        }
        drop(c);
        server.stop();
    }
}

#[test]
fn oversized_body_is_refused_with_413_and_closed() {
    let pool = Pool::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    let mut c = HttpClient::connect(server.http).unwrap();
    // Over 512 MiB (Redis's proto-max-bulk-len, the largest value).
    let head = format!("POST /kv/big HTTP/1.1\r\nContent-Length: {}\r\n\r\n", (512 << 20) + 1);
    c.write_raw(head.as_bytes()).unwrap();
    let r = c.read_response().unwrap();
    assert_eq!((r.status, r.close), (413, true));
    let mut c = HttpClient::connect(server.http).unwrap();
    assert_eq!(c.request("GET", "/kv/big", b"").unwrap().status, 404);
    drop(c);
    server.stop();
}
