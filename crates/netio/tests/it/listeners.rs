//! One server, several listeners: each input names the listener its connection came from.

use std::net::SocketAddr;

use pmwire_netio::http::{self, Codec, Limits, Parsed};
use pmwire_netio::{Batch, Config, HeapBuffers, Server, Service};

use crate::common::*;

/// Answers every request with the index of the listener its connection was accepted on.
#[derive(Default)]
struct WhichListener {
    codec: Option<Codec>,
}

impl Service<HeapBuffers> for WhichListener {
    fn handle(&mut self, batch: &mut Batch, _bufs: &mut HeapBuffers) {
        let codec = self.codec.get_or_insert_with(|| Codec::new(Limits::default()));
        for i in 0..batch.len() {
            let (input, reply) = batch.split(i);
            let mut at = 0;
            while let Parsed::Complete(req) = codec.parse(input.segments, at) {
                at += req.len_bytes();
                http::write_response(&mut reply.output, 200, true, None, input.listener.to_string().as_bytes());
            }
            reply.consumed = at;
        }
    }
}

#[test]
fn each_connection_knows_its_listener() {
    let addrs: [SocketAddr; 3] = ["127.0.0.1:0".parse().unwrap(); 3];
    let mut server = Server::bind_all(&addrs, Config::default(), HeapBuffers::new(256, 2048), WhichListener::default())
        .expect("bind");
    let bound = server.local_addrs();
    assert_eq!(bound.len(), 3);
    assert_eq!(bound[0], server.local_addr());
    let stop = server.stop_handle();
    let join = std::thread::spawn(move || {
        server.run().expect("run");
        server
    });
    for round in 0..2 {
        for (i, addr) in bound.iter().enumerate().rev() {
            let mut s = connect(*addr);
            let mut reader = Reader::new();
            write_all(&mut s, &[get("/a"), get("/b")].concat());
            for _ in 0..2 {
                let r = reader.read(&mut s);
                assert_eq!(r.status, 200);
                assert_eq!(r.body, i.to_string().as_bytes(), "round {round}, listener {i}");
            }
        }
    }
    stop.stop();
    let server = join.join().expect("server thread");
    assert_eq!(server.stats().accepted, 6);
    assert_eq!(server.source().in_use(), 0);
}

#[test]
fn bind_all_refuses_no_address() {
    let none: [SocketAddr; 0] = [];
    assert!(Server::bind_all(&none, Config::default(), HeapBuffers::new(4, 64), WhichListener::default()).is_err());
}
