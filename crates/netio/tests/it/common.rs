//! Shared helpers: a server on its own thread, blocking HTTP clients with timeouts.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread::JoinHandle;
use std::time::Duration;

use pmwire_netio::{Config, HeapBuffers, Server, Service, StopHandle};

pub struct Running<V: Service<HeapBuffers> + Send + 'static> {
    pub addr: SocketAddr,
    stop: StopHandle,
    join: JoinHandle<(Server<HeapBuffers, V>, f64)>,
}

/// Starts a server on 127.0.0.1 on its own thread.
pub fn start<V: Service<HeapBuffers> + Send + 'static>(cfg: Config, bufs: HeapBuffers, svc: V) -> Running<V> {
    let mut server = Server::bind("127.0.0.1:0", cfg, bufs, svc).expect("bind");
    let addr = server.local_addr();
    let stop = server.stop_handle();
    let join = std::thread::spawn(move || {
        server.run().expect("server run");
        (server, thread_cpu_s())
    });
    Running { addr, stop, join }
}

impl<V: Service<HeapBuffers> + Send + 'static> Running<V> {
    /// Stops the server and returns it with the CPU time its thread used, in seconds.
    pub fn stop(self) -> (Server<HeapBuffers, V>, f64) {
        self.stop.stop();
        self.join.join().expect("server thread panicked")
    }
}

pub fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0);
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub close: bool,
    pub body: Vec<u8>,
}

/// A client-side reader of HTTP responses with a carry-over buffer.
pub struct Reader {
    pub buf: Vec<u8>,
}

impl Reader {
    pub fn new() -> Reader {
        Reader { buf: Vec::new() }
    }

    /// Reads one response; panics on EOF, timeout or garbage.
    pub fn read(&mut self, s: &mut TcpStream) -> Resp {
        loop {
            if let Some(r) = self.try_take() {
                return r;
            }
            let mut chunk = [0u8; 65536];
            let n = s.read(&mut chunk).expect("read response");
            assert!(n > 0, "EOF before a complete response ({} bytes buffered)", self.buf.len());
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn try_take(&mut self) -> Option<Resp> {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut r = httparse::Response::new(&mut headers);
        let n = match r.parse(&self.buf).expect("response parse") {
            httparse::Status::Complete(n) => n,
            httparse::Status::Partial => return None,
        };
        let mut len = 0;
        let mut close = false;
        for h in r.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                len = std::str::from_utf8(h.value).unwrap().parse().unwrap();
            }
            if h.name.eq_ignore_ascii_case("connection") {
                close = h.value == b"close";
            }
        }
        if self.buf.len() < n + len {
            return None;
        }
        let status = r.code.unwrap();
        let body = self.buf[n..n + len].to_vec();
        self.buf.drain(..n + len);
        Some(Resp { status, close, body })
    }
}

/// Asserts the peer closes the connection (EOF or reset) with nothing more to read.
pub fn expect_eof(s: &mut TcpStream) {
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => {}
        Ok(n) => panic!("expected EOF, got {n} bytes"),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("expected EOF, got {e}"),
    }
}

pub fn post(path: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!("POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    r.extend_from_slice(body);
    r
}

pub fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").into_bytes()
}

/// Deterministic body bytes for request `seed`.
pub fn body(seed: u64, len: usize) -> Vec<u8> {
    use rand::{RngCore, SeedableRng};
    let mut bytes = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut bytes);
    bytes
}

pub fn write_all(s: &mut TcpStream, bytes: &[u8]) {
    s.write_all(bytes).expect("write request");
}

/// Small buffers to force requests across buffers.
pub fn small_config() -> Config {
    Config { ring_entries: 64, max_rx_bytes: 80 << 10, ..Config::default() }
}
