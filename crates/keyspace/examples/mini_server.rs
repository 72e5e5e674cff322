//! A minimal blocking TCP server over `MemKeyspace`, to try the codec and
//! executor with `redis-cli` and `redis-benchmark` (the real KV server, with
//! the persistent engine and gather-sends, lives in `crates/kv`).
//!
//! Receives into fixed 2 KB buffers and parses the unconsumed bytes as
//! segments, as the KV server does. `cargo run --release --example
//! mini_server -- 7380`, then `redis-benchmark -p 7380 -t set,get -q`.

use pmwire_keyspace::exec::{Flow, Server, ServerConfig};
use pmwire_keyspace::store::MemKeyspace;
use pmwire_resp::request::{Limits, Parsed};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

const BUF_BYTES: usize = 2048;

struct Shared {
    server: Server,
    keyspace: MemKeyspace,
}

fn serve(mut stream: TcpStream, shared: Arc<Mutex<Shared>>) -> std::io::Result<()> {
    let mut session = shared.lock().expect("lock").server.open_session();
    let mut parsed = Parsed::new(Limits::default());
    // Received buffers, each (bytes, filled); the first starts at `head`.
    let mut buffers: Vec<(Box<[u8; BUF_BYTES]>, usize)> = Vec::new();
    let mut head = 0usize;
    let mut out: Vec<u8> = Vec::new();
    loop {
        if buffers.last().is_none_or(|b| b.1 == BUF_BYTES) {
            buffers.push((Box::new([0u8; BUF_BYTES]), 0));
        }
        let last = buffers.last_mut().expect("a buffer");
        let n = stream.read(&mut last.0[last.1..])?;
        if n == 0 {
            break;
        }
        last.1 += n;
        loop {
            let segs: Vec<&[u8]> =
                buffers.iter().enumerate().map(|(i, b)| &b.0[if i == 0 { head } else { 0 }..b.1]).collect();
            let summary = parsed.parse(&segs);
            let mut close = false;
            {
                let mut g = shared.lock().expect("lock");
                let Shared { server, keyspace } = &mut *g;
                for i in 0..summary.commands {
                    if server.execute(&mut session, keyspace, &parsed.request(&segs, i), &mut out) == Flow::Close {
                        close = true;
                        break;
                    }
                }
            }
            if let (false, Some(e)) = (close, summary.error) {
                out.extend_from_slice(&e.reply());
                close = true;
            }
            stream.write_all(&out)?;
            out.clear();
            if close {
                return Ok(());
            }
            // Drop consumed bytes: full buffers wholly consumed go; then the
            // head advances within the first (only the last is not full).
            let mut consumed = summary.consumed;
            while let Some(first) = buffers.first() {
                let avail = first.1 - head;
                if first.1 == BUF_BYTES && consumed >= avail {
                    consumed -= avail;
                    buffers.remove(0);
                    head = 0;
                } else {
                    assert!(consumed <= avail);
                    head += consumed;
                    break;
                }
            }
            if !summary.limited {
                break;
            }
        }
    }
    shared.lock().expect("lock").server.close_session(session);
    Ok(())
}

fn main() {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).unwrap_or(7380);
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind");
    let config = ServerConfig { tcp_port: port, ..ServerConfig::default() };
    let shared = Arc::new(Mutex::new(Shared { server: Server::new(config), keyspace: MemKeyspace::new() }));
    eprintln!("mini_server on 127.0.0.1:{port}");
    for stream in listener.incoming() {
        let stream = stream.expect("accept");
        stream.set_nodelay(true).expect("nodelay");
        let shared = shared.clone();
        std::thread::spawn(move || {
            let _ = serve(stream, shared);
        });
    }
}
