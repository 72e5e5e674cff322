//! A 3-member `pmwire kv --cluster` under heavy load keeps its leader and
//! answers no error (issue 26): real member processes on loopback, pools on
//! tmpfs, driven at once by
//! - 16 connections of pipelined 1 KiB SETs, 8 in flight each (the shape
//!   of `redis-benchmark -P 8 -d 1024`), and
//! - 48 closed-loop connections of a YCSB A mix (half GETs, half 1 KiB
//!   SETs, keys skewed towards a hot set), as the bench's 16 connections
//!   were when they saw error replies,
//!
//! about 51 K entries: past each follower's compaction (snapshots every
//! 10,000 entries, the members taking turns; the leader's every sixth
//! interval is past this load). Asserted: no error reply
//! (each one is printed), every member's `raft_term` unchanged and the
//! same member leading afterwards. Nothing about time is asserted; how
//! long the load took and each member's liveness counters (`INFO
//! replication`: longest loop gap, heartbeat gaps, compactions) are
//! printed.
//!
//! It failed on each partial fix (docs/bench.md, "A loaded cluster keeps
//! its leader"): with members taking turns compacting only, 346 and 436
//! `-CLUSTERDOWN ... no majority confirmed the request in time` replies
//! (acknowledgements and heartbeat responses refused by a full window);
//! with the send order too, a new leader (term 1 to 3) after the leader's
//! 276 ms turn re-sending 256 appends in flight to a follower back from its
//! compaction. (On main, a pipelined 1 KiB load lost the leader at the
//! first compaction, index 10,000, where every member stalled at once.)
//! Then, with 16 appends in flight, it failed in about one run in six with
//! a busy core beside it: a send refused by a full window was reported to
//! raft-rs as unreachable, so the leader probed the follower again and
//! re-sent everything after its match index, up to 96 MB of appends in
//! one call of its loop (85-280 ms). Such sends are now held until the
//! window drains (`smr::node::held`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

mod resp;
use resp::{Client, Reply};
mod cluster;
use cluster::Cluster;

/// Pipelined connections and their depth.
const PIPELINED: usize = 16;
const DEPTH: usize = 8;
/// SETs each pipelined connection sends.
const PIPELINED_SETS: usize = 2_000;
/// Closed-loop YCSB A connections and the operations of each.
const MIXED: usize = 48;
const MIXED_OPS: usize = 800;
/// Keys of the pipelined SETs and of the mix.
const KEYS: u64 = 20_000;
const HOT_KEYS: u64 = 2_000;

/// Three members with pools on tmpfs, as the bench's (on a disk file
/// every persist is an msync), and a larger Raft log than the other tests'.
fn start_members() -> Cluster {
    let dir = if Path::new("/dev/shm").is_dir() { tempfile::tempdir_in("/dev/shm").unwrap() } else { tempfile::tempdir().unwrap() };
    Cluster::start_raft_sized("512M", ("128M", "32M"), dir, |_| Vec::new())
}

fn info(members: &Cluster, i: usize) -> String {
    match members.client(i).call(&["INFO", "replication"]) {
        Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
        other => panic!("INFO replication: {other:?}"),
    }
}


fn field(info: &str, name: &str) -> u64 {
    let prefix = format!("{name}:");
    let line = info.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no {name} in {info}"));
    line.trim().parse().unwrap()
}

/// A 64-bit LCG step.
fn next(x: &mut u64) -> u64 {
    *x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *x >> 33
}

fn set_command(key: &str, value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n", key.len(), value.len()).as_bytes());
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `count` 1 KiB SETs pipelined `DEPTH` deep on one connection; the
/// replies that were not `+OK`.
fn pipelined_sets(addr: SocketAddr, seed: u64, count: usize) -> Vec<Reply> {
    let mut c = Client::connect(addr);
    let (mut x, mut bad, mut sent) = (seed | 1, Vec::new(), 0);
    let value = vec![b'p'; 1024];
    while sent < count {
        let n = DEPTH.min(count - sent);
        let mut out = Vec::new();
        for _ in 0..n {
            set_command(&format!("key:{:06}", next(&mut x) % KEYS), &value, &mut out);
        }
        c.r.get_mut().write_all(&out).unwrap();
        for _ in 0..n {
            let r = c.read();
            if r != Reply::Simple("OK".into()) {
                bad.push(r);
            }
        }
        sent += n;
    }
    bad
}

/// `ops` closed-loop operations of YCSB A's mix on one connection: half
/// GETs, half 1 KiB SETs, nine in ten on the hot keys; the error replies.
fn mixed_ops(addr: SocketAddr, seed: u64, ops: usize) -> Vec<Reply> {
    let mut c = Client::connect(addr);
    let (mut x, mut bad) = (seed | 1, Vec::new());
    let value = vec![b'y'; 1024];
    for _ in 0..ops {
        let r = next(&mut x);
        let key = format!("key:{:06}", if r % 10 == 0 { r % KEYS } else { r % HOT_KEYS });
        let reply = if r & (1 << 20) == 0 {
            c.call(&["GET", &key])
        } else {
            let mut out = Vec::new();
            set_command(&key, &value, &mut out);
            c.r.get_mut().write_all(&out).unwrap();
            c.read()
        };
        if matches!(reply, Reply::Error(_)) {
            bad.push(reply);
        }
    }
    bad
}

#[test]
fn a_cluster_under_pipelined_and_many_client_load_keeps_its_leader_and_answers_no_error() {
    let members = start_members();
    let l = members.leader(&[0, 1, 2]);
    // A follower may learn the leader's term a heartbeat after the leader
    // answers: wait until the three agree.
    let mut terms = Vec::new();
    for _ in 0..1000 {
        terms = (0..3).map(|i| field(&info(&members, i), "raft_term")).collect::<Vec<u64>>();
        if terms.iter().all(|&t| t == terms[l]) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(terms.iter().all(|&t| t == terms[l]), "one term after the first election: {terms:?}");
    let addr = members.resp[l];
    let start = Instant::now();
    let pipelined = (0..PIPELINED).map(|k| std::thread::spawn(move || pipelined_sets(addr, 100 + k as u64, PIPELINED_SETS)));
    let mixed = (0..MIXED).map(|k| std::thread::spawn(move || mixed_ops(addr, 1000 + k as u64, MIXED_OPS)));
    let workers: Vec<_> = pipelined.chain(mixed).collect();
    let bad: Vec<Reply> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    println!(
        "{} pipelined SETs ({PIPELINED} connections, {DEPTH} deep) and {} mixed operations ({MIXED} connections) in {:?}",
        PIPELINED * PIPELINED_SETS,
        MIXED * MIXED_OPS,
        start.elapsed()
    );
    let infos: Vec<String> = (0..3).map(|i| info(&members, i)).collect();
    for (i, info) in infos.iter().enumerate() {
        let lines: Vec<&str> = info.lines().filter(|l| l.starts_with("max_") || l.starts_with("raft_") || l.starts_with("role") || l.starts_with("elections")).collect();
        println!("member {}: {}", i + 1, lines.join(" "));
    }
    for (i, e) in bad.iter().enumerate().take(20) {
        println!("error reply {i}: {e:?}");
    }
    assert!(bad.is_empty(), "{} error replies, the first: {:?}", bad.len(), bad.first());
    let after: Vec<u64> = infos.iter().map(|info| field(info, "raft_term")).collect();
    assert_eq!(after, terms, "no election during the load");
    assert!(infos[l].contains("role:master"), "the same member leads");
    // The followers took their turns compacting (the leader compacts every
    // sixth interval, past this load): the stalls the load has to ride out.
    for (i, info) in infos.iter().enumerate().filter(|&(i, _)| i != l) {
        assert!(field(info, "raft_snapshots") >= 1, "follower {} compacted under the load: {info}", i + 1);
    }
}
