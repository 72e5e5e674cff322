//! A server on its own thread over a fresh /dev/shm pool.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use pmwire_kv_server::netio::StopHandle;
use pmwire_kv_server::{KvServer, Mode, ServeOptions};

pub const POOL_SIZE: u64 = 64 << 20;

/// A pool path in a fresh /dev/shm directory (removed on drop).
pub struct Pool {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl Pool {
    pub fn new() -> Pool {
        let dir =
            tempfile::Builder::new().prefix("pmwire-kv-test").tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
        let path = dir.path().join("kv.pool");
        Pool { _dir: dir, path }
    }
}

pub struct Running {
    pub resp: SocketAddr,
    pub http: SocketAddr,
    stop: StopHandle,
    join: JoinHandle<KvServer>,
}

pub fn options(pool: &Path, mode: Mode) -> ServeOptions {
    ServeOptions {
        pool: pool.to_path_buf(),
        size: POOL_SIZE,
        resp: "127.0.0.1:0".parse().unwrap(),
        http: "127.0.0.1:0".parse().unwrap(),
        mode,
        busy_poll_us: 0,
        batch_wait_us: pmwire_kv_server::BATCH_WAIT_US,
        requirepass: None,
        protected_mode: true,
    }
}

/// Opens the pool and serves it on a thread.
pub fn start(pool: &Path, mode: Mode) -> Running {
    start_with(KvServer::open(&options(pool, mode)).expect("open"))
}

pub fn start_with(mut server: KvServer) -> Running {
    let (resp, http) = server.addrs();
    let stop = server.stop_handle();
    let join = std::thread::spawn(move || {
        server.run().expect("run");
        server
    });
    Running { resp, http, stop, join }
}

impl Running {
    /// Stops the server and checks the engine's invariants (every reference accounted for).
    pub fn stop(self) -> KvServer {
        self.stop.stop();
        let server = self.join.join().expect("server thread panicked");
        server.store().check().expect("engine invariants after stop");
        assert_eq!(server.store().heap_in_use(), 0, "DRAM receive buffers returned");
        server
    }

    /// Waits for a server that stops by itself (SHUTDOWN), and checks the engine's invariants.
    pub fn wait(self) -> KvServer {
        let server = self.join.join().expect("server thread panicked");
        server.store().check().expect("engine invariants after stop");
        server
    }
}

pub const MODES: [Mode; 2] = [Mode::ZeroCopy, Mode::Copy];

/// Deterministic value bytes.
pub fn value(seed: u64, len: usize) -> Vec<u8> {
    use rand::{RngCore, SeedableRng};
    let mut bytes = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut bytes);
    bytes
}

/// A redis-server on a free port, without persistence (a peer whose
/// behaviour a test compares with ours); stopped when dropped.
pub struct RedisServer(pub std::process::Child, pub u16);

impl RedisServer {
    pub fn start() -> RedisServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (scripts/setup installs it)");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "redis-server did not listen on {port}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        RedisServer(child, port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
