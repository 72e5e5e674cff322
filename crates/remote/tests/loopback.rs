//! The cores driven by the real event loop over the in-process transport:
//! two client threads with 8 requests in flight each, Rpc and RpcOffload
//! writes and log appends, then a restart on the same pool that must find
//! every acknowledged write and append.

use std::sync::mpsc;

use pmem::Region;
use pmwire_log::{LogConfig, TailStrategy};
use pmwire_remote::client::{ClientConfig, ClientCore};
use pmwire_remote::event_loop::{serve, InProcClient, InProcServer};
use pmwire_remote::pool::PoolConfig;
use pmwire_remote::proto::{Guarantee, Method};
use pmwire_remote::server::{Server, ServerConfig};

const WINDOW: usize = 8;
const WRITES: u64 = 64;
const SIZE: usize = 3000;

fn data(client: u64, i: u64) -> Vec<u8> {
    (0..SIZE as u64).map(|b| (b * 7 + i * 13 + client * 101) as u8).collect()
}

/// Sends every request the client core builds; keeps `WINDOW` in flight.
fn run_client(id: u64, net: InProcClient, region_id: u32, key: u64) -> Vec<(u64, u64)> {
    let mut core = ClientCore::new(ClientConfig { region_id, key, window: WINDOW, payload_crc: true });
    let (mut msg, mut reply) = (Vec::new(), Vec::new());
    core.hello_request(&mut msg).unwrap();
    net.send(&msg);
    net.recv(&mut reply);
    core.on_response(&reply).unwrap().result.unwrap();
    let config = LogConfig::new(64 << 10, TailStrategy::SelfValidating);
    core.log_create(format!("log-{id}").as_bytes(), &config, &mut msg).unwrap();
    net.send(&msg);
    net.recv(&mut reply);
    let log = core.on_response(&reply).unwrap().result.unwrap();
    let mut appended = Vec::new();
    let (mut sent, mut acked) = (0u64, 0u64);
    while acked < 2 * WRITES {
        while sent < 2 * WRITES && core.outstanding() < WINDOW {
            let i = sent / 2;
            if sent % 2 == 0 {
                let method = if i % 2 == 0 { Method::Rpc } else { Method::RpcOffload };
                let offset = (id * WRITES + i) * 4096;
                let plan = core.plan_write(offset, SIZE as u64, method, Guarantee::Persistence, None).unwrap();
                core.persist_write(offset, &data(id, i), plan.method == Method::RpcOffload, &mut msg).unwrap();
            } else {
                core.log_append(log, &i.to_le_bytes(), &mut msg).unwrap();
            }
            net.send(&msg);
            sent += 1;
        }
        net.recv(&mut reply);
        let r = core.on_response(&reply).unwrap();
        let value = r.result.unwrap();
        if r.opcode == pmwire_remote::proto::Opcode::LogAppend {
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
    let (tx, rx) = mpsc::channel();
    let server_path = path.clone();
    let server = std::thread::spawn(move || {
        let region = Region::create(&server_path, 16 << 20).unwrap();
        let pool = PoolConfig { region_id: 2, dir_slots: 4, log_area_bytes: 1 << 20 };
        let mut server = Server::format(region, pool, ServerConfig::default()).unwrap();
        let mut transport = InProcServer::new();
        tx.send((server.credentials(), transport.handle())).unwrap();
        serve(&mut server, &mut transport);
    });
    let ((region_id, key), network) = rx.recv().unwrap();
    let clients: Vec<_> = (0..2u64)
        .map(|id| {
            let net = network.connect(id);
            std::thread::spawn(move || run_client(id, net, region_id, key))
        })
        .collect();
    let appended: Vec<Vec<(u64, u64)>> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    network.shutdown();
    server.join().unwrap();

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
