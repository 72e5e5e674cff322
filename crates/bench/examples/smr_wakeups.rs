//! Where a replicated PUT's time goes: three `pmwire replica` children, one
//! closed-loop client, and per PUT each process's CPU time and context
//! switches (from /proc), beside the latency.
//!
//! `cargo run --release -p pmwire-bench --example smr_wakeups -- PMWIRE_EXE PUTS [replica args...]`
//! (`--tls uring` among them runs the client over io_uring TCP too).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pmwire_bench::remote::server::ucx_config;
use pmwire_smr::client::SmrClient;
use transport::{TcpConfig, TcpTransport, Transport, UcxTransport};

/// (user s, system s, voluntary, involuntary switches) over all threads.
fn stat(pid: u32) -> (f64, f64, u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = s.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let tck = 100.0;
    let (u, sy) = (f[11].parse::<f64>().unwrap() / tck, f[12].parse::<f64>().unwrap() / tck);
    let (mut v, mut iv) = (0, 0);
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let st = std::fs::read_to_string(t.unwrap().path().join("status")).unwrap();
        let get = |k: &str| st.lines().find(|l| l.starts_with(k)).unwrap().split_whitespace().nth(1).unwrap().parse::<u64>().unwrap();
        v += get("voluntary_ctxt_switches");
        iv += get("nonvoluntary_ctxt_switches");
    }
    (u, sy, v, iv)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let exe = &args[1];
    let puts: usize = args[2].parse().unwrap();
    let extra = &args[3..];
    let base = 27100u16;
    let peers: BTreeMap<u64, SocketAddr> = (1..=3).map(|i| (i, SocketAddr::from(([127, 0, 0, 1], base + i as u16)))).collect();
    let list = peers.iter().map(|(i, a)| format!("{i}={a}")).collect::<Vec<_>>().join(",");
    let mut children: Vec<Child> = Vec::new();
    for id in 1..=3u64 {
        let pool = format!("/dev/shm/wakeups-{id}.pool");
        let _ = std::fs::remove_file(&pool);
        let _ = std::fs::remove_file(format!("/dev/shm/wakeups-{id}.ready"));
        let mut c = Command::new(exe);
        c.args(["replica", "--id", &id.to_string(), "--peers", &list, "--size", "160M", "--log-size", "64M", "--pool", &pool]);
        c.args(["--ready-file", &format!("/dev/shm/wakeups-{id}.ready")]).args(extra).stdout(Stdio::null());
        children.push(c.spawn().unwrap());
    }
    for id in 1..=3 {
        while !std::path::Path::new(&format!("/dev/shm/wakeups-{id}.ready")).exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    if extra.iter().any(|a| a == "uring") {
        let t = TcpTransport::new(&TcpConfig::default()).unwrap();
        measure(SmrClient::new(t, peers.clone(), 1), children, puts);
    } else {
        let tls = if extra.iter().any(|a| a == "sm") { "sm" } else { "tcp" };
        let t = UcxTransport::new(&ucx_config(tls, true, false).unwrap()).unwrap();
        measure(SmrClient::new(t, peers.clone(), 1), children, puts);
    }
    for id in 1..=3 {
        let _ = std::fs::remove_file(format!("/dev/shm/wakeups-{id}.pool"));
        let _ = std::fs::remove_file(format!("/dev/shm/wakeups-{id}.ready"));
        let _ = std::fs::remove_file(format!("/dev/shm/wakeups-{id}.pool.lock"));
    }
}

fn measure<T: Transport<Addr = SocketAddr>>(mut client: SmrClient<T>, children: Vec<Child>, puts: usize) {
    client.poll = reactor::PollBudget::BLOCK;
    client.get(b"warm").unwrap();
    let value = [7u8; 64];
    for i in 0..2000u64 {
        client.put(&(i % 1000).to_le_bytes().repeat(2), &value).unwrap();
    }
    let leader = client.leader();
    let before: Vec<_> = children.iter().map(|c| stat(c.id())).collect();
    let me = stat(std::process::id());
    let mut lat = Vec::with_capacity(puts);
    let start = Instant::now();
    for i in 0..puts as u64 {
        let t0 = Instant::now();
        client.put(&(i % 1000).to_le_bytes().repeat(2), &value).unwrap();
        lat.push(t0.elapsed().as_nanos() as u64);
    }
    let wall = start.elapsed().as_secs_f64();
    let after: Vec<_> = children.iter().map(|c| stat(c.id())).collect();
    let me2 = stat(std::process::id());
    lat.sort_unstable();
    let n = puts as f64;
    println!("leader {leader}; {puts} PUTs in {wall:.2} s: p50 {:.1} us p99 {:.1} us; wall per PUT {:.1} us", lat[lat.len() / 2] as f64 / 1e3, lat[lat.len() * 99 / 100] as f64 / 1e3, wall / n * 1e6);
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        println!("replica {}: user {:.1} sys {:.1} us/PUT, vol cs {:.2}/PUT, invol {:.2}/PUT", i + 1, (a.0 - b.0) / n * 1e6, (a.1 - b.1) / n * 1e6, (a.2 - b.2) as f64 / n, (a.3 - b.3) as f64 / n);
    }
    println!("client: user {:.1} sys {:.1} us/PUT, vol cs {:.2}/PUT, invol {:.2}/PUT", (me2.0 - me.0) / n * 1e6, (me2.1 - me.1) / n * 1e6, (me2.2 - me.2) as f64 / n, (me2.3 - me.3) as f64 / n);
    let slow = |ms: u64| lat.iter().filter(|&&l| l >= ms * 1_000_000).count();
    println!("PUTs over 1 / 2 / 5 / 10 / 20 ms: {} / {} / {} / {} / {}; slowest {:?} us", slow(1), slow(2), slow(5), slow(10), slow(20), lat.iter().rev().take(8).map(|l| l / 1000).collect::<Vec<_>>());
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}
