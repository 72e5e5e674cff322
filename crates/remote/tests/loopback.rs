//! The server loop over the in-process transport (`transport::InProcTransport`):
//! two client threads with 8 requests in flight each, Rpc and RpcOffload
//! writes and log appends, then a restart on the same pool that must find
//! every acknowledged write and append.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use pmem::Region;
use pmwire_log::{LogConfig, TailStrategy};
use pmwire_remote::client::{Client, ClientConfig, ClientCore, ClientOptions};
use pmwire_remote::event_loop::{register_data_area, serve};
use pmwire_remote::pool::PoolConfig;
use pmwire_remote::server::{Server, ServerConfig};
use transport::{InProcNetwork, InProcTransport, Limits, NodeId};

const WINDOW: usize = 8;
const WRITES: u64 = 64;
const SIZE: usize = 3000;

fn data(client: u64, i: u64) -> Vec<u8> {
    (0..SIZE as u64).map(|b| (b * 7 + i * 13 + client * 101) as u8).collect()
}

/// Keeps `WINDOW` writes and appends in flight; returns the acknowledged appends.
fn run_client(id: u64, t: InProcTransport, server: NodeId, region_id: u32, key: u64) -> Vec<(u64, u64)> {
    let options = ClientOptions { window: WINDOW, ..ClientOptions::default() };
    let mut c = Client::connect_with(t, &server, region_id, key, options).unwrap();
    let log = c.log_create(format!("log-{id}").as_bytes(), &LogConfig::new(64 << 10, TailStrategy::SelfValidating)).unwrap();
    let mut appends = std::collections::HashMap::new();
    let mut appended = Vec::new();
    let (mut sent, mut acked) = (0u64, 0u64);
    while acked < 2 * WRITES {
        while sent < 2 * WRITES && c.outstanding() < WINDOW {
            let i = sent / 2;
            if sent % 2 == 0 {
                c.submit_rpc_write((id * WRITES + i) * 4096, &data(id, i), i % 2 == 1).unwrap();
            } else {
                let token = c.submit_log_append(log, &i.to_le_bytes()).unwrap();
                appends.insert(token, ());
            }
            sent += 1;
        }
        let (token, result) = c.wait_any().unwrap();
        let value = result.unwrap();
        if appends.remove(&token).is_some() {
            appended.push((log, value));
        }
        acked += 1;
    }
    appended
}

#[test]
fn two_clients_through_the_event_loop_then_restart() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("pool");
    let network = InProcNetwork::new(Limits::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let (server_path, server_net, server_stop) = (path.clone(), network.clone(), stop.clone());
    let server = std::thread::spawn(move || {
        let region = Region::create(&server_path, 16 << 20).unwrap();
        let pool = PoolConfig { region_id: 2, dir_slots: 4, log_area_bytes: 1 << 20 };
        let mut server = Server::format(region, pool, ServerConfig::default()).unwrap();
        let mut transport = server_net.node();
        register_data_area(&mut server, &mut transport).unwrap();
        tx.send((server.credentials(), transport.id())).unwrap();
        serve(&mut server, &mut transport, &server_stop)
    });
    let ((region_id, key), node) = rx.recv().unwrap();
    let clients: Vec<_> = (0..2u64)
        .map(|id| {
            let t = network.node();
            std::thread::spawn(move || run_client(id, t, node, region_id, key))
        })
        .collect();
    let appended: Vec<Vec<(u64, u64)>> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    stop.store(true, Ordering::Release);
    let stats = server.join().unwrap();
    // Every RpcOffload write went to the engine or, small and with the
    // engine idle, was copied inline.
    assert_eq!(stats.offloaded + stats.inlined, 2 * WRITES / 2);

    // Restart on the same pool: every acknowledged write and append is there.
    let mut server = Server::open(Region::open(&path, Default::default()).unwrap(), ServerConfig::default()).unwrap();
    let (data_base, _) = server.data_area();
    for id in 0..2u64 {
        for i in 0..WRITES {
            let mut back = vec![0u8; SIZE];
            pmem::Media::read(server.region(), data_base + (id * WRITES + i) * 4096, &mut back);
            assert!(back == data(id, i), "client {id} write {i} lost");
        }
        assert_eq!(appended[id as usize].len(), WRITES as usize);
    }
    server.connect(9);
    let mut core = ClientCore::new(ClientConfig { region_id, key, window: 1, payload_crc: true });
    let (mut msg, mut reply) = (Vec::new(), Vec::new());
    for (log, lsn) in appended.iter().flatten() {
        core.log_read(*log, *lsn, &mut msg).unwrap();
        server.handle(9, &msg, &mut reply);
        let r = core.on_response(&reply).unwrap();
        assert_eq!(r.result, Ok(*lsn));
        assert_eq!(r.payload.len(), 8);
    }
}
