//! [`KvServer`]: a [`Store`] and a [`KvService`] on one netio loop listening on the RESP and
//! HTTP addresses, the [`ReadyFile`] a parent process waits for, and the signal handling of
//! `pmwire kv` ([`stop_on_signals`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use pmwire_netio::{Config, Server, ServerError, StopHandle};
use serde::{Deserialize, Serialize};

use crate::service::KvService;
use crate::store::{Mode, Recovered, Store, StoreError, MAX_RX_BYTES};

/// The loop's batch wait ([`pmwire_netio::Config::batch_wait_us`]): off. Measured with
/// redis-benchmark (SET/GET, 1 KB, server and generator pinned to the two cores), 200 µs took
/// a turn from ~3 requests to ~20 and cut the server's and the generator's CPU per request
/// (which raised throughput while other processes shared the cores), but on a quiet machine it
/// gained nothing at 50 clients (SET 82–84 K/s either way) and lost at 16 (SET 66–73 K/s
/// against 74–81 K/s: a closed loop with few connections loses the overlap of server and
/// generator), and YCSB runs 16 connections.
pub const BATCH_WAIT_US: u32 = 0;

/// What `pmwire kv` serves.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The pool file.
    pub pool: PathBuf,
    /// Size of a new pool.
    pub size: u64,
    /// RESP listen address (port 0 picks one).
    pub resp: SocketAddr,
    /// HTTP listen address (port 0 picks one).
    pub http: SocketAddr,
    /// How values travel.
    pub mode: Mode,
    /// Poll for completions this long before sleeping ([`Config::busy_poll_us`]; 0: sleep at once).
    pub busy_poll_us: u32,
    /// The loop's batch wait ([`Config::batch_wait_us`]; [`BATCH_WAIT_US`] by default).
    pub batch_wait_us: u32,
    /// The default user's password (RESP `AUTH`, HTTP `Authorization: Bearer`); `None`: none.
    pub requirepass: Option<Vec<u8>>,
    /// Redis's protected mode: with no password, serve loopback peers only.
    pub protected_mode: bool,
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The pool.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Binding or running the loop.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// Writing the ready file.
    #[error("ready file {path}: {source}")]
    ReadyFile {
        /// Its path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The ready file: JSON written (atomically, by rename) once both ports listen.
///
/// `{"resp":"127.0.0.1:40001","http":"127.0.0.1:40002","pid":1234,"mode":"zero-copy"}`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyFile {
    /// The bound RESP address.
    pub resp: String,
    /// The bound HTTP address.
    pub http: String,
    /// The server's process id.
    pub pid: u32,
    /// The mode's name.
    pub mode: String,
}

impl ReadyFile {
    /// Writes `path` atomically (a temporary file renamed over it).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self).expect("serializable"))?;
        std::fs::rename(&tmp, path)
    }

    /// Reads `path` (`None` if absent or not complete JSON yet).
    pub fn read(path: &Path) -> Option<ReadyFile> {
        serde_json::from_slice(&std::fs::read(path).ok()?).ok()
    }

    /// The RESP address.
    pub fn resp_addr(&self) -> SocketAddr {
        self.resp.parse().expect("a socket address")
    }

    /// The HTTP address.
    pub fn http_addr(&self) -> SocketAddr {
        self.http.parse().expect("a socket address")
    }
}

/// The server: bound, not yet running.
pub struct KvServer {
    server: Server<Store, KvService>,
    recovered: Recovered,
}

impl std::fmt::Debug for KvServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KvServer({:?}, {:?})", self.addrs(), self.server.source())
    }
}

impl KvServer {
    /// Opens or creates the pool and binds both listeners (RESP is listener 0, HTTP 1). The
    /// loop's bounds come from the pool ([`crate::store::Sizing`]).
    pub fn open(options: &ServeOptions) -> Result<KvServer, ServeError> {
        let (store, recovered) = Store::open(&options.pool, options.size, options.mode)?;
        let sizing = store.sizing();
        let cap = crate::store::connection_cap();
        let config = Config {
            ring_entries: sizing.ring_entries,
            max_connections: cap,
            rx_budget_buffers: sizing.rx_budget,
            reject_reply: crate::store::reject_replies(),
            max_rx_bytes: MAX_RX_BYTES,
            busy_poll_us: options.busy_poll_us,
            batch_wait_us: options.batch_wait_us,
            ..Config::default()
        };
        let mut service = KvService::new(options.resp.port());
        service.set_bind(options.resp.ip().to_string());
        service.set_access(options.requirepass.clone(), options.protected_mode);
        service.set_client_limits(cap, crate::store::DEFAULT_MAXCLIENTS.min(cap), 0);
        let mut server = Server::bind_all(&[options.resp, options.http], config, store, service)?;
        let stop = server.stop_handle();
        server.service_mut().set_stop(stop);
        Ok(KvServer { server, recovered })
    }

    /// What opening the pool found.
    pub fn recovered(&self) -> &Recovered {
        &self.recovered
    }

    /// The bound RESP and HTTP addresses.
    pub fn addrs(&self) -> (SocketAddr, SocketAddr) {
        let addrs = self.server.local_addrs();
        (addrs[0], addrs[1])
    }

    /// The ready file's contents.
    pub fn ready(&self) -> ReadyFile {
        let (resp, http) = self.addrs();
        let mode = self.server.source().mode().name().to_string();
        ReadyFile { resp: resp.to_string(), http: http.to_string(), pid: std::process::id(), mode }
    }

    /// Stops `run` from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        self.server.stop_handle()
    }

    /// Serves until stopped; every batch is committed before its replies are sent, so a stop
    /// loses nothing acknowledged.
    pub fn run(&mut self) -> Result<(), ServeError> {
        Ok(self.server.run()?)
    }

    /// The store (engine, region).
    pub fn store(&self) -> &Store {
        self.server.source()
    }

    /// The service's counters.
    pub fn service(&self) -> &KvService {
        self.server.service()
    }

    /// The loop's counters.
    pub fn loop_stats(&self) -> &pmwire_netio::Stats {
        self.server.stats()
    }

    /// Test hook: the `nth` next commit that writes (1: the next; early commits inside a
    /// batch count) fails.
    #[doc(hidden)]
    pub fn fail_commit(&mut self, nth: u32) {
        self.server.service_mut().fail_commit(nth);
    }

    /// Planted bug (the crash campaign's canary): a script's writes are committed command by
    /// command.
    #[doc(hidden)]
    pub fn plant_script_commit_per_call(&mut self) {
        self.server.service_mut().plant_script_commit_per_call();
    }

    /// Planted bug (the crash campaign's canary): acknowledge batches without committing them.
    #[doc(hidden)]
    pub fn plant_ack_before_commit(&mut self) {
        self.server.service_mut().plant_ack_before_commit();
    }

    /// When collections are chunked ([`pmwire_keyspace::chunked::ChunkConfig`]; `pmwire kv
    /// --collection-limits`).
    pub fn set_collection_limits(&mut self, limits: pmwire_keyspace::chunked::ChunkConfig) {
        self.server.service_mut().set_collection_limits(limits);
    }

    /// `maxmemory` in bytes (0: none), as redis-server's `--maxmemory` (policy
    /// `noeviction`: writes that may grow the keyspace are refused above it).
    pub fn set_maxmemory(&mut self, bytes: u64) {
        self.server.service_mut().set_maxmemory(bytes);
    }

    /// `maxclients` and the idle `timeout` in seconds (0: none), as redis-server's
    /// `--maxclients` and `--timeout`; the `maxclients` in effect: lowered to what the
    /// process's descriptors allow ([`crate::store::connection_cap`]), as Redis lowers it.
    pub fn set_client_limits(&mut self, maxclients: u32, timeout_s: u32) -> u32 {
        let service = self.server.service_mut();
        let cap = service.client_config().maxclients_cap;
        service.set_client_limits(cap, maxclients, timeout_s);
        service.client_config().maxclients
    }

    /// Test hook: the service reads the time from `clock` (expiry tests that do not sleep).
    #[doc(hidden)]
    pub fn set_clock(&mut self, clock: pmwire_keyspace::store::Clock) {
        self.server.service_mut().set_clock(clock);
    }
}

/// Blocks SIGINT and SIGTERM in the calling thread (and the threads it starts afterwards) and
/// starts a thread that waits for either and then stops the server. Call before starting any
/// other thread, so that no thread takes the signals' default action.
pub fn stop_on_signals(stop: StopHandle) -> std::io::Result<()> {
    // SAFETY: plain signal-mask calls on a set we initialise.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        set
    };
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        let mut signal = 0;
        // SAFETY: waits for one of the blocked signals in `set`.
        let rc = unsafe { libc::sigwait(&set, &mut signal) };
        assert_eq!(rc, 0, "sigwait");
        eprintln!("pmwire kv: signal {signal}, stopping");
        stop.stop();
    })?;
    Ok(())
}
