//! A `pmwire kv --cluster` member killed -9 while its peers are connected
//! and clients write through every member starts again at once on the
//! same peer, RESP and HTTP ports, with no supervisor retrying it: the
//! killed process's listening sockets and connections on those ports must
//! not keep it out (issue 26, item 7; the crash campaign saw `listen for
//! peers ... Address already in use` on 2 of 50 restarts, docs/bench.md).

mod cluster;
mod resp;

use cluster::{wait_for, Cluster};
use resp::{Client, Reply};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// SETs through `addr` until `stop`, reconnecting after any error (the
/// member killed, refusing, or answering CLUSTERDOWN); counts the `+OK`s.
fn load(addr: SocketAddr, stop: Arc<AtomicBool>, acked: Arc<AtomicU64>) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(s) = std::net::TcpStream::connect(addr) else {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut c = Client { r: std::io::BufReader::new(s) };
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            i += 1;
            let Ok(r) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.call(&["SET", &format!("load{}", i % 64), "v"]))) else { break };
            if r != Reply::Simple("OK".into()) {
                break;
            }
            acked.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Kills every member in turn, leader included, ten times, under writes
/// through every member, and starts it again right after its exit: it
/// must come up (its ready file written) and serve, holding every
/// acknowledged INCR.
#[test]
fn a_member_killed_9_restarts_at_once_on_its_ports() {
    let mut cluster = Cluster::start_with(|_| vec!["--tick-ms".into(), "30".into()]);
    let l = cluster.leader(&[0, 1, 2]);
    let stop = Arc::new(AtomicBool::new(false));
    let loaded = Arc::new(AtomicU64::new(0));
    let loaders: Vec<_> = cluster.resp.iter().map(|&a| {
        let (stop, loaded) = (stop.clone(), loaded.clone());
        std::thread::spawn(move || load(a, stop, loaded))
    }).collect();
    // INCRs acknowledged, and sent (one whose reply was an error may still apply).
    let (mut acked, mut sent) = (0i64, 0i64);
    let mut slowest = Duration::ZERO;
    for round in 0..10 {
        let victim = (l + round) % 3;
        let mut c = cluster.client(victim);
        for _ in 0..10 {
            sent += 1;
            if let Reply::Int(_) = c.call(&["INCR", "n"]) {
                acked += 1;
            }
        }
        drop(c);
        cluster.kill(victim);
        let start = Instant::now();
        cluster.spawn(victim);
        cluster.wait_ready(victim);
        slowest = slowest.max(start.elapsed());
        let mut back = cluster.client(victim);
        let holds_all = |r: Reply| match r {
            Reply::Bulk(Some(v)) => String::from_utf8_lossy(&v).parse::<i64>().is_ok_and(|n| (acked..=sent).contains(&n)),
            _ => false,
        };
        wait_for(Duration::from_secs(20), "the restarted member to serve every acknowledged write", || holds_all(back.call(&["GET", "n"])).then_some(()));
    }
    stop.store(true, Ordering::Relaxed);
    for t in loaders {
        t.join().unwrap();
    }
    println!("10 kills -9 under load ({} SETs acknowledged meanwhile) and immediate restarts on the same ports; {acked} of {sent} INCRs acknowledged and kept; slowest restart to ready {slowest:?}", loaded.load(Ordering::Relaxed));
    assert!(acked > 0, "writes went through the members");
}
