//! A tiny KV service that keeps PUT bodies where they landed (retains their buffers) and sends
//! them zero-copy on GET: the seam the persistent KV server will use.

use std::collections::HashMap;

use pmwire_netio::http::{self, body_pieces, Codec, Limits, Method, Parsed};
use pmwire_netio::{Batch, BufferSource, HeapBuffers, Service};

use crate::common::*;

#[derive(Default)]
struct Kv {
    codec: Option<Codec>,
    map: HashMap<String, Vec<(u32, u32, u32)>>,
}

fn release_all<S: BufferSource>(pieces: &[(u32, u32, u32)], bufs: &mut S) {
    for &(b, _, _) in pieces {
        bufs.release(b);
    }
}

impl Service<HeapBuffers> for Kv {
    fn handle(&mut self, batch: &mut Batch, bufs: &mut HeapBuffers) {
        let codec = self.codec.get_or_insert_with(|| Codec::new(Limits::default()));
        for i in 0..batch.len() {
            let (input, reply) = batch.split(i);
            let mut at = 0;
            loop {
                let req = match codec.parse(input.segments, at) {
                    Parsed::Incomplete => break,
                    Parsed::Error(e) => panic!("bad request {e}"),
                    Parsed::Complete(r) => r,
                };
                at += req.len_bytes();
                let out = &mut reply.output;
                match req.method {
                    Method::Put => {
                        let mut pieces = Vec::new();
                        for p in body_pieces(input.segments, &req.body) {
                            bufs.retain(p.buf);
                            pieces.push((p.buf, p.offset, p.bytes.len() as u32));
                        }
                        if let Some(old) = self.map.insert(req.path.to_string(), pieces) {
                            release_all(&old, bufs);
                        }
                        http::write_response(out, 201, true, None, b"");
                    }
                    Method::Get => match self.map.get(req.path) {
                        Some(pieces) => {
                            let len = pieces.iter().map(|p| p.2 as usize).sum();
                            http::write_head(out, 200, true, len, None);
                            for &(b, off, n) in pieces {
                                out.push_buf(b, off, n);
                            }
                        }
                        None => http::write_response(out, 404, true, None, b""),
                    },
                    Method::Delete => {
                        let found = self.map.remove(req.path).map(|old| release_all(&old, bufs)).is_some();
                        http::write_response(out, if found { 204 } else { 404 }, true, None, b"");
                    }
                    _ => http::write_response(out, 405, true, None, b""),
                }
            }
            reply.consumed = at;
        }
    }
}

/// Releases every stored value's buffers: then no buffer may be in use.
fn release_stored(kv: &mut Kv, bufs: &mut HeapBuffers) {
    for (_, pieces) in kv.map.drain() {
        release_all(&pieces, bufs);
    }
    assert_eq!(bufs.in_use(), 0, "a buffer leaked or was released too early");
}

fn put(path: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!("PUT {path} HTTP/1.1\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    r.extend_from_slice(body);
    r
}

#[test]
fn stored_values_stay_in_their_buffers_and_are_sent_zero_copy() {
    let srv = start(small_config(), HeapBuffers::new(1024, 256), Kv::default());
    let mut s = connect(srv.addr);
    let mut r = Reader::new();
    // Values spanning several 256 B buffers, some overwritten, some deleted.
    for k in 0..20u64 {
        write_all(&mut s, &put(&format!("/k{k}"), &body(k, 100 + k as usize * 97)));
        assert_eq!(r.read(&mut s).status, 201);
    }
    for k in 0..5u64 {
        write_all(&mut s, &put(&format!("/k{k}"), &body(k + 500, 1000)));
        assert_eq!(r.read(&mut s).status, 201);
    }
    for k in 15..20u64 {
        write_all(&mut s, format!("DELETE /k{k} HTTP/1.1\r\n\r\n").as_bytes());
        assert_eq!(r.read(&mut s).status, 204);
    }
    // Read back from a second connection, pipelined: each GET answered from the stored buffers.
    let mut s2 = connect(srv.addr);
    let mut r2 = Reader::new();
    let all: Vec<u8> = (0..20u64).flat_map(|k| get(&format!("/k{k}"))).collect();
    write_all(&mut s2, &all);
    for k in 0..20u64 {
        let resp = r2.read(&mut s2);
        match k {
            0..5 => assert_eq!(resp.body, body(k + 500, 1000)),
            5..15 => assert_eq!(resp.body, body(k, 100 + k as usize * 97)),
            _ => assert_eq!(resp.status, 404),
        }
    }
    drop((s, s2));
    let (server, _) = srv.stop();
    let (mut bufs, mut kv) = server.into_parts();
    // Only the stored values' buffers are still in use; dropping them frees everything.
    assert!(bufs.in_use() > 0);
    release_stored(&mut kv, &mut bufs);
}

/// Small values received one request at a time (the client waits for each reply) share their
/// receive buffers: the ring consumes each buffer a receive at a time (`IOU_PBUF_RING_INC`), so
/// 200 stored values of 16 B hold a few buffers, not one each (a 64 B SET held a 2 KiB buffer).
#[test]
fn small_values_received_one_at_a_time_share_buffers() {
    let srv = start(small_config(), HeapBuffers::new(1024, 256), Kv::default());
    let (mut a, mut b) = (connect(srv.addr), connect(srv.addr));
    let (mut ra, mut rb) = (Reader::new(), Reader::new());
    // Two connections in turn, so their receives interleave in the shared buffers.
    for k in 0..100u64 {
        write_all(&mut a, &put(&format!("/a{k}"), &body(k, 16)));
        assert_eq!(ra.read(&mut a).status, 201);
        write_all(&mut b, &put(&format!("/b{k}"), &body(k + 1000, 16)));
        assert_eq!(rb.read(&mut b).status, 201);
    }
    let mut c = connect(srv.addr);
    let mut rc = Reader::new();
    for k in 0..100u64 {
        write_all(&mut c, &get(&format!("/a{k}")));
        assert_eq!(rc.read(&mut c).body, body(k, 16));
        write_all(&mut c, &get(&format!("/b{k}")));
        assert_eq!(rc.read(&mut c).body, body(k + 1000, 16));
    }
    drop((a, b, c));
    let (server, _) = srv.stop();
    assert!(server.stats().incremental_buffers, "this kernel has no incremental buffer consumption (IOU_PBUF_RING_INC, Linux 6.12): every small receive holds a buffer of its own");
    let (mut bufs, mut kv) = server.into_parts();
    // Each request is ~50 B: about five to a 256 B buffer.
    let held = bufs.in_use();
    assert!(held <= 50, "200 stored values of 16 B hold {held} buffers of 256 B");
    release_stored(&mut kv, &mut bufs);
}

/// A request sent a byte at a time is one segment, not one per receive: each receive goes on in
/// the buffer where the previous one ended and is joined to it (incremental consumption), and
/// the value stored from it is whole.
#[test]
fn a_request_sent_a_byte_at_a_time_is_joined_in_its_buffer() {
    let srv = start(small_config(), HeapBuffers::new(1024, 256), Kv::default());
    let mut s = connect(srv.addr);
    let mut r = Reader::new();
    for byte in put("/slow", &body(7, 20)) {
        write_all(&mut s, &[byte]);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(r.read(&mut s).status, 201);
    write_all(&mut s, &get("/slow"));
    assert_eq!(r.read(&mut s).body, body(7, 20));
    drop(s);
    let (server, _) = srv.stop();
    assert!(server.stats().incremental_buffers, "this kernel has no incremental buffer consumption (IOU_PBUF_RING_INC, Linux 6.12)");
    assert!(server.stats().coalesced > 0, "no receive was joined to the one before it: {:?}", server.stats());
    let (mut bufs, mut kv) = server.into_parts();
    release_stored(&mut kv, &mut bufs);
}
