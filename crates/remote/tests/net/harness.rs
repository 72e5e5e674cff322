//! Starts a server thread over a chosen transport and connects clients.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use pmem::Region;
use pmwire_remote::client::{Client, ClientError, ClientOptions};
use pmwire_remote::event_loop::{register_data_area, serve, ServeStats, ServeTransport};
use pmwire_remote::pool::PoolConfig;
use pmwire_remote::server::{Server, ServerConfig};
use transport::{InProcNetwork, InProcTransport, Limits, NodeId, Transport, UcxConfig, UcxTransport};

/// Where a test runs.
#[derive(Clone)]
pub enum Net {
    InProc(InProcNetwork),
    Ucx(&'static str),
}

/// A peer address of either kind.
#[derive(Clone, Copy, Debug)]
pub enum Addr {
    Node(NodeId),
    Socket(std::net::SocketAddr),
}

pub fn nets() -> Vec<Net> {
    vec![Net::InProc(InProcNetwork::new(Limits::default())), Net::Ucx("tcp"), Net::Ucx("sm")]
}

/// The cases exercise every method, one-sided ones included, so both ends
/// turn one-sided access on (`default_config` is the default, off).
pub fn ucx_config(tls: &str) -> UcxConfig {
    default_config(tls).with_one_sided()
}

/// The default configuration over `tls`: one-sided access off.
pub fn default_config(tls: &str) -> UcxConfig {
    let config = if tls == "sm" { UcxConfig::shared_memory() } else { UcxConfig::tls(tls) };
    config.with_var("NET_DEVICES", "lo")
}

impl Net {
    pub fn name(&self) -> &'static str {
        match self {
            Net::InProc(_) => "inproc",
            Net::Ucx(tls) => tls,
        }
    }
}

/// A running server.
pub struct Running {
    pub addr: Addr,
    pub region_id: u32,
    pub key: u64,
    /// Where the pool is mapped in this process (the server is a thread):
    /// what a hostile client would aim a forged descriptor at.
    pub region_addr: u64,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<ServeStats>>,
    _dir: tempfile::TempDir,
}

impl Running {
    pub fn stop(mut self) -> ServeStats {
        self.stop.store(true, Ordering::Release);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

type Started = (Addr, u32, u64, u64);

fn run<T: ServeTransport>(mut transport: T, addr: Addr, path: &std::path::Path, config: ServerConfig, tx: mpsc::Sender<Started>, stop: &AtomicBool) -> ServeStats {
    let region = Region::create(path, 8 << 20).unwrap();
    let pool = PoolConfig { region_id: 3, dir_slots: 8, log_area_bytes: 2 << 20 };
    let mut server = Server::format(region, pool, config).unwrap();
    register_data_area(&mut server, &mut transport).unwrap();
    let (region_id, key) = server.credentials();
    tx.send((addr, region_id, key, server.region().as_ptr() as u64)).unwrap();
    serve(&mut server, &mut transport, stop)
}

/// A server with one-sided access on (the cases use every method).
pub fn start(net: &Net, config: ServerConfig) -> Running {
    start_with(net, config, true)
}

/// A server as `pmwire serve` runs by default: one-sided access off.
pub fn start_default(net: &Net, config: ServerConfig) -> Running {
    start_with(net, config, false)
}

fn start_with(net: &Net, config: ServerConfig, one_sided: bool) -> Running {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("pool");
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let (net2, path2, stop2) = (net.clone(), path.clone(), stop.clone());
    let thread = std::thread::spawn(move || match net2 {
        Net::InProc(network) => {
            let t = network.node();
            let addr = Addr::Node(t.id());
            run(t, addr, &path2, config, tx, &stop2)
        }
        Net::Ucx(tls) => {
            let config_ucx = if one_sided { ucx_config(tls) } else { default_config(tls) };
            let mut t = UcxTransport::new(&config_ucx).unwrap();
            let addr = t.listen("127.0.0.1:0".parse().unwrap()).unwrap();
            run(t, Addr::Socket(addr), &path2, config, tx, &stop2)
        }
    });
    let (addr, region_id, key, region_addr) = rx.recv_timeout(Duration::from_secs(30)).expect("server started");
    Running { addr, region_id, key, region_addr, stop, thread: Some(thread), _dir: dir }
}

/// A client over either transport (one per test: its size does not matter).
#[allow(clippy::large_enum_variant)]
pub enum AnyClient {
    InProc(Client<InProcTransport>),
    Ucx(Client<UcxTransport>),
}

/// Calls `$body` with the concrete client.
#[macro_export]
macro_rules! with_client {
    ($c:expr, $x:ident => $body:expr) => {
        match $c {
            $crate::harness::AnyClient::InProc($x) => $body,
            $crate::harness::AnyClient::Ucx($x) => $body,
        }
    };
}

pub fn connect_as(net: &Net, server: &Running, region_id: u32, key: u64, options: ClientOptions) -> Result<AnyClient, ClientError> {
    match (net, server.addr) {
        (Net::InProc(network), Addr::Node(node)) => {
            Client::connect_with(network.node(), &node, region_id, key, options).map(AnyClient::InProc)
        }
        (Net::Ucx(tls), Addr::Socket(addr)) => {
            let t = UcxTransport::new(&ucx_config(tls)).unwrap();
            Client::connect_with(t, &addr, region_id, key, options).map(AnyClient::Ucx)
        }
        _ => unreachable!("address of the other kind"),
    }
}

/// A client as users run it by default: one-sided access off.
pub fn connect_default(net: &Net, server: &Running, options: ClientOptions) -> AnyClient {
    match (net, server.addr) {
        (Net::Ucx(tls), Addr::Socket(addr)) => {
            let t = UcxTransport::new(&default_config(tls)).unwrap();
            AnyClient::Ucx(Client::connect_with(t, &addr, server.region_id, server.key, options).unwrap())
        }
        _ => connect_as(net, server, server.region_id, server.key, options).unwrap(),
    }
}

pub fn connect(net: &Net, server: &Running) -> AnyClient {
    connect_as(net, server, server.region_id, server.key, ClientOptions::default()).unwrap()
}

/// A transport of the net's kind, connected to the server, for raw requests.
pub fn raw_call(net: &Net, server: &Running, header: &[u8], payload: Vec<u8>) -> Vec<u8> {
    fn go<T: Transport>(mut t: T, addr: &T::Addr, header: &[u8], payload: Vec<u8>) -> Vec<u8> {
        let conn = t.connect(addr).unwrap();
        t.call(conn, header, payload, 1).unwrap();
        let mut events = Vec::new();
        for _ in 0..2000 {
            t.wait(Duration::from_millis(10)).unwrap();
            t.poll(&mut events, 16);
            for e in events.drain(..) {
                if let transport::Event::Completion(c) = e {
                    match c.result.unwrap() {
                        transport::Output::Response { header, .. } => return header,
                        other => panic!("unexpected {other:?}"),
                    }
                }
            }
        }
        panic!("no response");
    }
    match (net, server.addr) {
        (Net::InProc(network), Addr::Node(node)) => go(network.node(), &node, header, payload),
        (Net::Ucx(tls), Addr::Socket(addr)) => go(UcxTransport::new(&ucx_config(tls)).unwrap(), &addr, header, payload),
        _ => unreachable!(),
    }
}

/// Deterministic bytes for write `i` of a test.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64).map(|b| (b.wrapping_mul(31) ^ seed.wrapping_mul(0x9e37)) as u8 | 1).collect()
}
