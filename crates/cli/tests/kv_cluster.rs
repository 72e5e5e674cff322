//! `pmwire kv --cluster`: three real member processes on loopback with a
//! `--secret-file` (issue 26, item 2). Writes through the leader answered
//! once committed, linearizable reads on the leader, possibly stale reads
//! on a follower after READONLY; through every follower (forwarded):
//! writes, MULTI/EXEC, WATCH, INCR counted exact, linearizable reads, a
//! blocking pop woken by a push on the leader, WAIT with its timeout, the
//! redis-py session, HTTP, and `requirepass` / Bearer on every member;
//! `--redirect moved`; MULTI/EXEC,
//! INCR counted exact, INFO replication, ROLE and WAIT, redis-cli against a
//! follower, the leader killed -9 and a new one serving everything
//! acknowledged, the killed member restarted on its pools and catching up;
//! a member cut off from its majority answering CLUSTERDOWN within a
//! bound; and scripts (EVAL, EVALSHA, SCRIPT) through every member. No
//! timing asserts except generous bounds.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod resp;
use resp::{Client, Reply};
mod cluster;
use cluster::{wait_for, Cluster};

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

#[test]
fn three_members_serve_replicate_and_fail_over() {
    let mut cluster = Cluster::start();
    let l = cluster.leader(&[0, 1, 2]);
    let followers: Vec<usize> = (0..3).filter(|&i| i != l).collect();
    let mut leader = cluster.client(l);
    assert_eq!(leader.call(&["SET", "k", "v"]), ok());
    assert_eq!(leader.call(&["GET", "k"]), Reply::bulk("v"), "a linearizable read on the leader");
    for _ in 0..30 {
        assert!(matches!(leader.call(&["INCR", "n"]), Reply::Int(_)));
    }
    assert_eq!(leader.call(&["GET", "n"]), Reply::bulk("30"), "INCR counted exact");
    assert_eq!(leader.call(&["MULTI"]), ok());
    assert_eq!(leader.call(&["SET", "t", "1"]), Reply::Simple("QUEUED".into()));
    assert_eq!(leader.call(&["INCR", "t"]), Reply::Simple("QUEUED".into()));
    assert_eq!(leader.call(&["EXEC"]), Reply::Array(Some(vec![ok(), Reply::Int(2)])), "MULTI/EXEC as one entry");
    match leader.call(&["WAIT", "2", "0"]) {
        Reply::Int(n) => assert!((1..=2).contains(&n), "WAIT: a majority's follower holds the write; {n}"),
        other => panic!("WAIT: {other:?}"),
    }
    // A follower counts as connected once the leader streams to it; one that has not
    // acknowledged anything yet (its link still coming up) is `wait_bgsave`, so wait for both
    // (a generous bound: this checks what INFO says, not how fast).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let info = loop {
        let info = match leader.call(&["INFO", "replication"]) {
            Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
            other => panic!("INFO replication: {other:?}"),
        };
        if info.contains("connected_slaves:2") || std::time::Instant::now() > deadline {
            break info;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(info.contains("role:master") && info.contains("connected_slaves:2") && info.contains("slave1:ip=127.0.0.1"), "{info}");

    for &f in &followers {
        let mut c = cluster.client(f);
        assert_eq!(c.call(&["READONLY"]), ok());
        // The transaction was the last write: once it is applied, so is everything before it.
        wait_for(Duration::from_secs(10), "the follower to apply the writes", || (c.call(&["GET", "t"]) == Reply::bulk("2")).then_some(()));
        assert_eq!(c.call(&["GET", "k"]), Reply::bulk("v"));
        assert_eq!(c.call(&["GET", "n"]), Reply::bulk("30"));
    }
    let out = Command::new("redis-cli").args(["-p", &cluster.resp[followers[0]].port().to_string(), "ROLE"]).output().expect("redis-cli is installed");
    assert!(String::from_utf8_lossy(&out.stdout).contains("slave"), "redis-cli ROLE on a follower: {:?}", out);
    let out = Command::new("redis-cli").args(["-p", &cluster.resp[l].port().to_string(), "SET", "cli", "x"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");

    // The leader killed -9: a new one serves every acknowledged write.
    drop(leader);
    cluster.kill(l);
    let l2 = cluster.leader(&followers);
    let mut leader = cluster.client(l2);
    assert_eq!(leader.call(&["GET", "k"]), Reply::bulk("v"));
    assert_eq!(leader.call(&["GET", "n"]), Reply::bulk("30"), "nothing acknowledged lost");
    assert_eq!(leader.call(&["GET", "cli"]), Reply::bulk("x"));
    assert_eq!(leader.call(&["INCR", "n"]), Reply::Int(31));

    // The killed member restarts on its pools and catches up.
    cluster.spawn(l);
    cluster.wait_ready(l);
    let mut back = cluster.client(l);
    assert_eq!(back.call(&["READONLY"]), ok());
    wait_for(Duration::from_secs(20), "the restarted member to catch up", || (back.call(&["GET", "n"]) == Reply::bulk("31")).then_some(()));
    assert_eq!(back.call(&["GET", "t"]), Reply::bulk("2"));
}

#[test]
fn a_member_cut_off_from_its_majority_answers_clusterdown() {
    let cluster = Cluster::start();
    let l = cluster.leader(&[0, 1, 2]);
    let mut c = cluster.client(l);
    assert_eq!(c.call(&["SET", "k", "v"]), ok());
    let others: Vec<usize> = (0..3).filter(|&i| i != l).collect();
    for &i in &others {
        cluster.signal(i, "-STOP");
    }
    for cmd in [&["SET", "k", "w"][..], &["GET", "k"][..]] {
        let start = Instant::now();
        let reply = c.call(cmd);
        let took = start.elapsed();
        println!("{cmd:?} on the cut-off member: {reply:?} after {took:?}");
        match reply {
            Reply::Error(e) => assert!(e.starts_with("CLUSTERDOWN The cluster is down: "), "{e}"),
            other => panic!("a member without its majority answered {other:?}"),
        }
        assert!(took < Duration::from_secs(5), "CLUSTERDOWN within a generous bound: {took:?}");
    }
    for &i in &others {
        cluster.signal(i, "-CONT");
    }
}

/// A connection with `member::MAX_QUEUE` (1,024) requests unanswered is
/// not read further; once they are answered it is read again, though its
/// client sends nothing more, and it is not closed for holding more unread
/// input than netio's bound (1 MiB). `redis-cli --pipe` (Redis's mass
/// insertion) sends everything, then waits for the replies: with 4,000 SETs
/// it hung after 1,300 to 3,300 replies (the member's last replies took its
/// queue from past the bound to empty in one turn, and the rest of its input
/// stayed unread), and with 20,000 the member closed the connection. Here
/// the followers are stopped, so nothing commits: 1,100 SETs wait past the
/// bound, then 20,000 more (1.2 MB) and an ECHO arrive from a writer thread
/// (the reader does not wait for the writes, as redis-cli does not); every
/// request must be answered, `+OK` or CLUSTERDOWN (the test fails on a read
/// timing out, or on the connection closing).
#[test]
fn a_connection_past_its_queue_bound_is_read_again_once_answered() {
    const FIRST: usize = 1100;
    const SECOND: usize = 20_000;
    let cluster = Cluster::start();
    let l = cluster.leader(&[0, 1, 2]);
    let others: Vec<usize> = (0..3).filter(|&i| i != l).collect();
    let set = |key: String| format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$16\r\nvvvvvvvvvvvvvvvv\r\n", key.len());
    let mut c = Client::connect(cluster.resp[l]);
    for &i in &others {
        cluster.signal(i, "-STOP");
    }
    let first: String = (0..FIRST).map(|i| set(format!("p:{i:08}"))).collect();
    c.r.get_mut().write_all(first.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let second: String = (0..SECOND).map(|i| set(format!("r:{i:08}"))).collect::<String>() + "*2\r\n$4\r\nECHO\r\n$4\r\ndone\r\n";
    assert!(second.len() > 1 << 20, "more than netio's bound of unread input");
    let mut w = c.r.get_ref().try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(second.as_bytes()));
    let down = |r: &Reply| matches!(r, Reply::Error(e) if e.starts_with("CLUSTERDOWN "));
    let mut oks = 0;
    for i in 0..FIRST + SECOND {
        let r = c.read();
        assert!(r == ok() || down(&r), "SET {i} answered {r:?}");
        oks += usize::from(r == ok());
    }
    let last = c.read();
    writer.join().unwrap().expect("the member read every request");
    for &i in &others {
        cluster.signal(i, "-CONT");
    }
    println!("{oks} of {} SETs +OK (the rest CLUSTERDOWN), then {last:?}", FIRST + SECOND);
    assert!(last == Reply::bulk("done") || down(&last), "the last request, ECHO as redis-cli --pipe ends with: {last:?}");
}

/// A member whose replica halts exits with the reason, and the others go
/// on. The halt here: a follower started again on blank pools, which the
/// leader finds (it counts entries as held there that its log lacks); a
/// machine refusing a committed entry (its pool or key index full) halts
/// the same way. Before, the member went on answering CLUSTERDOWN forever,
/// its loop spinning on an overdue tick.
#[test]
fn a_member_whose_replica_halts_exits_with_the_reason() {
    let mut cluster = Cluster::start();
    let l = cluster.leader(&[0, 1, 2]);
    let mut c = cluster.client(l);
    assert_eq!(c.call(&["SET", "before", "x"]), ok());
    let f = (l + 1) % 3;
    cluster.respawn_fresh(f, "64M");
    let status = wait_for(Duration::from_secs(20), "the member on blank pools to exit", || cluster.children[f].as_mut().unwrap().try_wait().unwrap());
    let log = std::fs::read_to_string(cluster.path(&format!("log{f}"))).unwrap();
    println!("member {} exited ({status}): {}", f + 1, log.lines().last().unwrap_or(""));
    assert_eq!(status.code(), Some(1), "a halted member exits 1: {log}");
    assert!(log.contains("Error: member halted: "), "the reason on stderr: {log}");
    assert_eq!(c.call(&["SET", "after", "x"]), ok(), "the leader and the other follower go on");
}

/// The venv python `scripts/setup` installs redis-py into (as
/// crates/kv-server/tests/it/redispy.rs finds it).
fn redis_py() -> PathBuf {
    let venv = match std::env::var_os("PMWIRE_REDISPY_VENV") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/pmwire/redispy-5.2.1"),
    };
    let python = venv.join("bin/python");
    assert!(python.exists(), "{} is missing: run scripts/setup, which installs redis-py 5.2.1 from PyPI there", python.display());
    python
}

/// One HTTP/1.1 request on a new connection: the status and the body.
fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8], bearer: Option<&str>) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let auth = bearer.map_or(String::new(), |b| format!("Authorization: Bearer {b}\r\n"));
    let head = format!("{method} {path} HTTP/1.1\r\nHost: t\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let status = std::str::from_utf8(&all[9..12]).unwrap().parse().unwrap();
    (status, all[end + 4..].to_vec())
}

fn int(r: Reply) -> i64 {
    match r {
        Reply::Int(n) => n,
        other => panic!("not an integer: {other:?}"),
    }
}

/// Ticks of 30 ms (elections after 0.3-0.6 s, a request's bound 0.6 s):
/// this test's many round trips through a follower then ride out a loaded
/// machine (four builds on two cores) without a CLUSTERDOWN.
fn slow_ticks() -> Vec<String> {
    vec!["--tick-ms".into(), "30".into()]
}

#[test]
fn every_follower_serves_every_client() {
    let cluster = Cluster::start_with(|_| slow_ticks());
    let l = cluster.leader(&[0, 1, 2]);
    let followers: Vec<usize> = (0..3).filter(|&i| i != l).collect();
    let mut leader = cluster.client(l);
    // Writes through each follower, read back linearizably through the others at once.
    for &f in &followers {
        let mut c = cluster.client(f);
        let key = format!("f{f}");
        assert_eq!(c.call(&["SET", &key, "v"]), ok(), "a follower forwards a write");
        for other in 0..3 {
            assert_eq!(cluster.client(other).call(&["GET", &key]), Reply::bulk("v"), "read through member {} right after", other + 1);
        }
    }
    // INCR through every member, interleaved: counted exact.
    let mut clients: Vec<Client> = (0..3).map(|i| cluster.client(i)).collect();
    let mut last = 0;
    for k in 0..45 {
        let n = int(clients[k % 3].call(&["INCR", "n"]));
        assert_eq!(n, last + 1, "INCR through member {} answered the next count", k % 3 + 1);
        last = n;
    }
    for c in &mut clients {
        assert_eq!(c.call(&["GET", "n"]), Reply::bulk("45"));
    }
    // INFO, every section: the follower's own role and the replicated
    // keyspace, and a closed connection no longer counted.
    let f = followers[0];
    let info = |c: &mut Client, args: &[&str]| match c.call(args) {
        Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
        other => panic!("INFO: {other:?}"),
    };
    let field = |text: &str, name: &str| -> String {
        let line = text.lines().find(|l| l.starts_with(&format!("{name}:"))).unwrap_or_else(|| panic!("no {name} in {text}"));
        line[name.len() + 1..].to_string()
    };
    let mut probe = cluster.client(f);
    let all = info(&mut probe, &["INFO"]);
    assert_eq!(field(&all, "role"), "slave", "INFO on a follower: {all}");
    assert!(all.contains("raft_member_id:"), "the member's replication section: {all}");
    let Reply::Int(keys) = probe.call(&["DBSIZE"]) else { panic!("DBSIZE") };
    assert!(keys >= 3 && field(&all, "db0").starts_with(&format!("keys={keys},")), "the replicated keyspace (DBSIZE {keys}): {all}");
    assert_eq!(field(&info(&mut leader, &["INFO", "everything"]), "role"), "master");
    let before: u64 = field(&info(&mut probe, &["INFO", "clients"]), "connected_clients").parse().unwrap();
    drop(clients);
    wait_for(Duration::from_secs(10), "closed connections to leave connected_clients", || {
        let now: u64 = field(&info(&mut probe, &["INFO", "clients"]), "connected_clients").parse().unwrap();
        (now < before).then_some(())
    });

    // MULTI/EXEC and WATCH through a follower.
    let mut c = cluster.client(f);
    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(c.call(&["SET", "t", "1"]), Reply::Simple("QUEUED".into()));
    assert_eq!(c.call(&["INCR", "t"]), Reply::Simple("QUEUED".into()));
    assert_eq!(c.call(&["EXEC"]), Reply::Array(Some(vec![ok(), Reply::Int(2)])), "EXEC through a follower, one entry");
    assert_eq!(c.call(&["WATCH", "w"]), ok());
    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(c.call(&["SET", "w", "mine"]), Reply::Simple("QUEUED".into()));
    assert_eq!(c.call(&["EXEC"]), Reply::Array(Some(vec![ok()])), "an untouched WATCH lets EXEC run");
    assert_eq!(c.call(&["WATCH", "w"]), ok());
    assert_eq!(leader.call(&["SET", "w", "theirs"]), ok());
    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(c.call(&["SET", "w", "mine"]), Reply::Simple("QUEUED".into()));
    assert_eq!(c.call(&["EXEC"]), Reply::Array(None), "a write on the leader after WATCH on a follower aborts EXEC");
    assert_eq!(c.call(&["GET", "w"]), Reply::bulk("theirs"));

    // A blocking pop on a follower, woken by a push on the leader.
    let addr = cluster.resp[f];
    let waiter = std::thread::spawn(move || {
        let mut c = Client::connect(addr);
        let start = Instant::now();
        (c.call(&["BLPOP", "q", "20"]), start.elapsed())
    });
    wait_for(Duration::from_secs(10), "the BLPOP to park", || {
        let info = match cluster.client(f).call(&["INFO", "clients"]) {
            Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
            other => panic!("INFO: {other:?}"),
        };
        info.contains("blocked_clients:1").then_some(())
    });
    let pushed = Instant::now();
    assert_eq!(leader.call(&["RPUSH", "q", "hello"]), Reply::Int(1));
    let (got, took) = waiter.join().unwrap();
    println!("BLPOP on a follower woken {:?} after the push on the leader", pushed.elapsed());
    assert_eq!(got, Reply::Array(Some(vec![Reply::bulk("q"), Reply::bulk("hello")])));
    assert!(took < Duration::from_secs(20), "served before its timeout");
    assert_eq!(leader.call(&["LLEN", "q"]), Reply::Int(0), "popped once");
    let start = Instant::now();
    assert_eq!(c.call(&["BRPOP", "empty", "0.3"]), Reply::Array(None), "a timeout answers the null array");
    let waited = start.elapsed();
    println!("BRPOP empty 0.3 on a follower answered after {waited:?}");
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(10), "not before its timeout: {waited:?}");
    assert_eq!(leader.call(&["RPUSH", "src", "a", "b"]), Reply::Int(2));
    assert_eq!(c.call(&["BLMOVE", "src", "dst", "LEFT", "RIGHT", "1"]), Reply::bulk("a"), "BLMOVE on a follower");
    // BZPOPMIN on a follower, woken by ZADD on the leader; BZMPOP on a set
    // with members answers at once; an empty wait times out.
    let waiter = std::thread::spawn(move || Client::connect(addr).call(&["BZPOPMIN", "zq", "20"]));
    wait_for(Duration::from_secs(10), "the BZPOPMIN to park", || {
        let info = match cluster.client(f).call(&["INFO", "clients"]) {
            Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
            other => panic!("INFO: {other:?}"),
        };
        info.contains("blocked_clients:1").then_some(())
    });
    assert_eq!(leader.call(&["ZADD", "zq", "1", "a", "2", "b"]), Reply::Int(2));
    assert_eq!(waiter.join().unwrap(), Reply::Array(Some(vec![Reply::bulk("zq"), Reply::bulk("a"), Reply::bulk("1")])), "BZPOPMIN on a follower");
    let pair = Reply::Array(Some(vec![Reply::bulk("b"), Reply::bulk("2")]));
    assert_eq!(c.call(&["BZMPOP", "1", "1", "zq", "MAX", "COUNT", "5"]), Reply::Array(Some(vec![Reply::bulk("zq"), Reply::Array(Some(vec![pair]))])));
    assert_eq!(leader.call(&["EXISTS", "zq"]), Reply::Int(0), "popped once, emptied and deleted");
    assert_eq!(c.call(&["BZPOPMAX", "zq", "0.2"]), Reply::Array(None), "a timeout answers the null array");

    // WAIT: the leader waits up to its timeout for more followers than there are.
    assert_eq!(leader.call(&["SET", "x", "1"]), ok());
    let start = Instant::now();
    assert_eq!(leader.call(&["WAIT", "3", "300"]), Reply::Int(2), "two followers hold the write");
    let waited = start.elapsed();
    println!("WAIT 3 300 on the leader answered after {waited:?}");
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(10), "{waited:?}");
    assert!((1..=2).contains(&int(leader.call(&["WAIT", "1", "0"]))), "WAIT 1 0 answers once one holds it");
    assert_eq!(c.call(&["WAIT", "2", "100"]), Reply::Int(1), "a follower vouches for a majority less the leader");

    // HTTP through a follower.
    let h = cluster.http[f];
    assert_eq!(http(h, "POST", "/kv/hk", b"hv", None).0, 204);
    assert_eq!(http(cluster.http[l], "GET", "/kv/hk", b"", None), (200, b"hv".to_vec()), "written through a follower's HTTP");
    assert_eq!(http(h, "GET", "/kv/hk", b"", None), (200, b"hv".to_vec()));
    assert_eq!(http(h, "DELETE", "/kv/hk", b"", None).0, 200);
    assert_eq!(http(h, "GET", "/kv/hk", b"", None).0, 404);
    assert_eq!(http(h, "DELETE", "/kv/hk", b"", None).0, 404);
    assert_eq!(http(h, "GET", "/kv/q", b"", None).0, 404);
    assert_eq!(http(h, "GET", "/kv/src", b"", None).0, 409, "a list is RESP's alone");
    assert_eq!(http(h, "GET", "/elsewhere", b"", None).0, 404);

    // The redis-py session through a follower, on an empty keyspace, RESP2 and RESP3.
    let python = redis_py();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../kv-server/tests/redispy/session.py");
    for protocol in ["2", "3"] {
        assert_eq!(leader.call(&["FLUSHALL"]), ok());
        let out = Command::new(&python).arg(&script).args(["--port", &cluster.resp[f].port().to_string(), "--protocol", protocol]).output().expect("run the redis-py session");
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && text.contains("checks passed"), "redis-py RESP{protocol} session through a follower:\n{text}");
        println!("{}", text.trim());
    }
}

#[test]
fn requirepass_and_bearer_hold_on_every_member() {
    let cluster = Cluster::start_with(|_| [vec!["--requirepass".into(), "s3cret".into()], slow_ticks()].concat());
    let l = wait_for(Duration::from_secs(20), "a leader", || {
        (0..3).find(|&i| {
            let mut c = cluster.client(i);
            c.call(&["AUTH", "s3cret"]) == ok() && matches!(c.call(&["ROLE"]), Reply::Array(Some(a)) if a[0] == Reply::bulk("master"))
        })
    });
    let f = (l + 1) % 3;
    let mut c = cluster.client(f);
    match c.call(&["SET", "k", "v"]) {
        Reply::Error(e) => assert!(e.starts_with("NOAUTH"), "{e}"),
        other => panic!("a follower took a write without AUTH: {other:?}"),
    }
    assert_eq!(c.call(&["AUTH", "s3cret"]), ok());
    wait_for(Duration::from_secs(20), "a write through the follower", || (c.call(&["SET", "k", "v"]) == ok()).then_some(()));
    assert_eq!(http(cluster.http[f], "POST", "/kv/h", b"x", None).0, 401, "HTTP without the password");
    assert_eq!(http(cluster.http[f], "POST", "/kv/h", b"x", Some("wrong")).0, 401);
    assert_eq!(http(cluster.http[f], "POST", "/kv/h", b"x", Some("s3cret")).0, 204);
    assert_eq!(http(cluster.http[l], "GET", "/kv/h", b"", Some("s3cret")), (200, b"x".to_vec()));
}

#[test]
fn redirect_moved_sends_clients_to_the_leader() {
    let cluster = Cluster::start_with(|resp| {
        let list = resp.iter().enumerate().map(|(i, a)| format!("{}={a}", i + 1)).collect::<Vec<_>>().join(",");
        vec!["--redirect".into(), "moved".into(), "--cluster-resp".into(), list]
    });
    let l = wait_for(Duration::from_secs(20), "a leader", || {
        (0..3).find(|&i| matches!(cluster.client(i).call(&["ROLE"]), Reply::Array(Some(a)) if a[0] == Reply::bulk("master")))
    });
    let f = (l + 1) % 3;
    let want = format!("MOVED 12739 {}", cluster.resp[l]);
    wait_for(Duration::from_secs(20), "a MOVED naming the leader", || (cluster.client(f).call(&["SET", "123456789", "v"]) == Reply::Error(want.clone())).then_some(()));
    assert_eq!(cluster.client(f).call(&["GET", "123456789"]), Reply::Error(want.clone()));
    let mut c = cluster.client(f);
    assert_eq!(c.call(&["READONLY"]), ok());
    assert!(matches!(c.call(&["GET", "123456789"]), Reply::Bulk(_)), "READONLY still reads locally");
    assert_eq!(cluster.client(l).call(&["SET", "123456789", "v"]), ok(), "the leader serves it");
}
/// INFO copies as `name -> value` (issue 26 item 4's counters).
fn copies(c: &mut Client) -> std::collections::BTreeMap<String, f64> {
    let text = match c.call(&["INFO", "copies"]) {
        Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
        other => panic!("INFO copies: {other:?}"),
    };
    text.lines().filter_map(|l| l.split_once(':')).filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?))).collect()
}

/// The leader receives SET values into pool buffers and logs their extents:
/// 0 value bytes copied on its path, by its counters; the followers receive
/// the leader's messages into their own pools and name the values where
/// they landed (0 copied, by their counters) and hold the same bytes; the leader,
/// killed -9 and restarted, recovers the buffers its log names.
#[test]
fn a_set_on_the_leader_copies_no_value_bytes_and_followers_hold_them() {
    let mut cluster = Cluster::start();
    let l = cluster.leader(&[0, 1, 2]);
    let followers: Vec<usize> = (0..3).filter(|&i| i != l).collect();
    let mut leader = cluster.client(l);
    let before = copies(&mut leader);
    assert_eq!(before.get("copy_mode"), None, "copy_mode is text");
    let value = |i: usize| -> String {
        let len = if i % 2 == 0 { 64 } else { 1024 };
        (0..len).map(|k| (b'a' + ((i * 7 + k) % 26) as u8) as char).collect()
    };
    const N: usize = 100;
    for i in 0..N {
        assert_eq!(leader.call(&["SET", &format!("zc{i}"), &value(i)]), ok());
    }
    let after = copies(&mut leader);
    let delta = |k: &str| after[k] - before[k];
    assert!(delta("copy_writes") >= N as f64, "{after:?}");
    for stage in ["copy_value_bytes_rx_args", "copy_value_bytes_entry", "copy_value_bytes_raft_log", "copy_value_bytes_received", "copy_value_bytes_applied", "copy_value_bytes_path"] {
        assert_eq!(delta(stage), 0.0, "{stage} on the leader: {before:?} -> {after:?}");
    }
    let total: usize = (0..N).map(|i| value(i).len()).sum();
    assert!(delta("copy_value_bytes_sent") >= total as f64, "the values went to the followers: {after:?}");
    eprintln!("leader copies: {after:?}");
    for &f in &followers {
        let mut c = cluster.client(f);
        assert_eq!(c.call(&["READONLY"]), ok());
        let last = format!("zc{}", N - 1);
        wait_for(Duration::from_secs(10), "the follower to apply the writes", || (c.call(&["GET", &last]) == Reply::bulk(&value(N - 1))).then_some(()));
        for i in 0..N {
            assert_eq!(c.call(&["GET", &format!("zc{i}")]), Reply::bulk(&value(i)), "follower {f}, key {i}");
        }
        let fc = copies(&mut c);
        assert_eq!(fc["copy_value_bytes_received"], 0.0, "the follower received the values into its pool and named them in place: {fc:?}");
        eprintln!("follower copies: {fc:?}");
    }
    // The leader killed -9 and restarted on its pools: its log's extents recovered.
    drop(leader);
    restarted_leader_holds(&mut cluster, l, &followers, (0..N).map(|i| (format!("zc{i}"), value(i))));
}

/// Leader `l` killed -9, a write committed by the new one among
/// `followers`, then `l` restarted on its pools: once caught up it holds
/// every `(key, value)` (its log's references to the values counted again).
fn restarted_leader_holds(cluster: &mut Cluster, l: usize, followers: &[usize], pairs: impl Iterator<Item = (String, String)>) {
    cluster.kill(l);
    let l2 = cluster.leader(followers);
    assert_eq!(cluster.client(l2).call(&["SET", "after", "x"]), ok());
    cluster.spawn(l);
    cluster.wait_ready(l);
    let mut back = cluster.client(l);
    assert_eq!(back.call(&["READONLY"]), ok());
    wait_for(Duration::from_secs(20), "the restarted member to catch up", || (back.call(&["GET", "after"]) == Reply::bulk("x")).then_some(()));
    for (k, v) in pairs {
        assert_eq!(back.call(&["GET", &k]), Reply::bulk(&v), "restarted member, key {k}");
    }
}

/// A SET through a follower goes to the leader as an extent-form entry with
/// its values inline: the leader and the other follower name the values
/// where their peer transports received them (0 bytes copied on their
/// paths, by their counters), the serving follower copies each value once,
/// into the entry it forwards; every member holds the values, and so does
/// the leader after a kill -9 and a restart on its pools (its log's
/// references to the forwarded values counted again).
#[test]
fn a_set_through_a_follower_is_copied_once_into_its_forward_and_never_after() {
    let mut cluster = Cluster::start();
    let l = cluster.leader(&[0, 1, 2]);
    let followers: Vec<usize> = (0..3).filter(|&i| i != l).collect();
    let (serving, other) = (followers[0], followers[1]);
    // `Cluster::leader`'s probe (a 1 B SET) applied everywhere first.
    for m in 0..3 {
        let mut r = cluster.client(m);
        assert_eq!(r.call(&["READONLY"]), ok());
        wait_for(Duration::from_secs(10), "the probe to apply", || (r.call(&["GET", "leader-probe"]) == Reply::bulk("1")).then_some(()));
    }
    let before: Vec<_> = (0..3).map(|i| copies(&mut cluster.client(i))).collect();
    let value = |i: usize| -> String { (0..1024).map(|k| (b'a' + ((i * 5 + k) % 26) as u8) as char).collect() };
    const N: usize = 100;
    let mut c = cluster.client(serving);
    for i in 0..N {
        assert_eq!(c.call(&["SET", &format!("fw{i}"), &value(i)]), ok());
    }
    for m in [l, other, serving] {
        let mut r = cluster.client(m);
        assert_eq!(r.call(&["READONLY"]), ok());
        let last = format!("fw{}", N - 1);
        wait_for(Duration::from_secs(10), "the member to apply the writes", || (r.call(&["GET", &last]) == Reply::bulk(&value(N - 1))).then_some(()));
        for i in 0..N {
            assert_eq!(r.call(&["GET", &format!("fw{i}")]), Reply::bulk(&value(i)), "member {m}, key {i}");
        }
    }
    let delta = |m: usize, k: &str| copies(&mut cluster.client(m))[k] - before[m][k];
    for m in [l, other] {
        assert!(delta(m, "copy_writes") >= N as f64);
        assert_eq!(delta(m, "copy_value_bytes_path"), 0.0, "member {m} (leader {l}): {:?}", copies(&mut cluster.client(m)));
    }
    let total = (N * 1024) as f64;
    assert_eq!(delta(serving, "copy_value_bytes_entry"), total, "{:?}", copies(&mut cluster.client(serving)));
    assert_eq!(delta(serving, "copy_value_bytes_path"), total, "{:?}", copies(&mut cluster.client(serving)));
    drop(c);
    restarted_leader_holds(&mut cluster, l, &followers, (0..N).map(|i| (format!("fw{i}"), value(i))));
}

/// `raft_term` from a member's `INFO replication`.
fn raft_term(c: &mut Client) -> u64 {
    let Reply::Bulk(Some(text)) = c.call(&["INFO", "replication"]) else { panic!("INFO replication answers a bulk string") };
    let text = String::from_utf8(text).unwrap();
    let line = text.lines().find_map(|l| l.strip_prefix("raft_term:")).unwrap_or_else(|| panic!("no raft_term in {text}"));
    line.trim().parse().unwrap()
}

/// The three members' Raft terms once they agree with leader `l`'s (up to
/// 10 s after the first election; no timing asserted).
fn settled_terms(cluster: &Cluster, l: usize) -> Vec<u64> {
    let mut terms = Vec::new();
    for _ in 0..1000 {
        terms = (0..3).map(|i| raft_term(&mut cluster.client(i))).collect();
        if terms.iter().all(|&t| t == terms[l]) {
            return terms;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("one term after the first election: {terms:?}")
}

/// SETs pipelined `depth` deep on one connection, `count` of them, keys
/// drawn from `keys` (a simple LCG seeded by `seed`); the replies that were
/// not `+OK`.
fn pipelined_sets(addr: SocketAddr, seed: u64, count: usize, depth: usize, keys: u64) -> Vec<Reply> {
    let mut c = Client::connect(addr);
    let mut x = seed | 1;
    let mut bad = Vec::new();
    let value = "v".repeat(64);
    let mut sent = 0;
    while sent < count {
        let n = depth.min(count - sent);
        let mut out = String::new();
        for _ in 0..n {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let key = format!("key:{:06}", (x >> 33) % keys);
            out += &format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{value}\r\n", key.len(), value.len());
        }
        c.r.get_mut().write_all(out.as_bytes()).unwrap();
        for _ in 0..n {
            let r = c.read();
            if r != ok() {
                bad.push(r);
            }
        }
        sent += n;
    }
    bad
}

/// Issue 26's bench lost its leader at 64 clients: near 17 K SETs every
/// member's engine checkpointed half its WAL in one commit, which held each
/// member's loop 140-210 ms, past the 100 ms election timeout (no
/// heartbeats, no acknowledgements), and the followers elected another
/// leader. Under the bench's load shape (64 closed-loop connections) for
/// 30 K SETs, past that point and several of a member's shorter
/// checkpoints, the leader keeps its term: no election after the first,
/// and every write `+OK`. (No timing is asserted; how long the load takes
/// is printed.) Left open: a pipelined load (16 connections, 8 deep) still
/// loses the leader near 10-25 K SETs, before and after the fix
/// (docs/bench.md, "A member's loop under load").
#[test]
fn a_loaded_cluster_keeps_its_leader() {
    // Pools on tmpfs, as the bench's: on a disk file every persist is an msync.
    let dir = if Path::new("/dev/shm").is_dir() { tempfile::tempdir_in("/dev/shm").unwrap() } else { tempfile::tempdir().unwrap() };
    let cluster = Cluster::start_sized("256M", dir);
    let l = cluster.leader(&[0, 1, 2]);
    // A member may not have heard the first election's leader yet (term 0
    // on a loaded machine, CI saw it): wait for all three to agree.
    let terms = settled_terms(&cluster, l);
    const CONNS: usize = 64;
    const SETS_PER_CONN: usize = 470;
    let start = Instant::now();
    let addr = cluster.resp[l];
    let workers: Vec<_> = (0..CONNS).map(|k| std::thread::spawn(move || pipelined_sets(addr, k as u64 + 1, SETS_PER_CONN, 1, 100_000))).collect();
    let bad: Vec<Reply> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    println!("{} SETs over {CONNS} connections, one at a time each, in {:?}", CONNS * SETS_PER_CONN, start.elapsed());
    assert!(bad.is_empty(), "{} SETs not answered +OK, the first: {:?}", bad.len(), bad.first());
    let after: Vec<u64> = (0..3).map(|i| raft_term(&mut cluster.client(i))).collect();
    assert_eq!(after, terms, "no election during the load");
    let mut c = cluster.client(l);
    assert!(matches!(c.call(&["ROLE"]), Reply::Array(Some(a)) if a[0] == Reply::bulk("master")), "the same member leads");
}

/// A transaction whose replicated entry is larger than a quarter of the
/// Raft log (`--raft-log-size` 16M here: 4 MiB) is refused with an error
/// naming both sizes, and every member goes on serving: a 60 MiB SET
/// through a follower had filled the leader's log and stopped it
/// (`storage failed: log full`). A single command's long value streams
/// instead (`a_value_larger_than_the_log_streams_through_any_member`); a
/// transaction's commands travel in its one entry.
#[test]
fn a_transaction_larger_than_the_log_takes_is_refused_and_the_members_go_on() {
    let cluster = Cluster::start_with(|_| slow_ticks());
    let l = cluster.leader(&[0, 1, 2]);
    let f = (l + 1) % 3;
    let ascii = |mib: usize| "v".repeat(mib << 20);
    let refused = |r: Reply| match r {
        Reply::Error(e) => assert!(e.contains("over the") && e.contains("it is not applied"), "{e}"),
        other => panic!("a write over the log's bound answered {other:?}"),
    };
    for i in [l, f] {
        let mut c = cluster.client(i);
        wait_for(Duration::from_secs(20), "MULTI to be served", || match c.call(&["MULTI"]) {
            Reply::Simple(s) if s == "OK" => Some(()),
            Reply::Error(e) if e.starts_with("CLUSTERDOWN") => None,
            other => panic!("MULTI answered {other:?}"),
        });
        assert_eq!(c.call(&["SET", "big", &ascii(5)]), Reply::Simple("QUEUED".into()));
        refused(c.call(&["EXEC"]));
    }
    every_member_serves_without(&cluster, "big");
}

/// A value larger than the whole Raft log (40 MiB against a 16 MiB log)
/// streams as piece entries of at most 128 KiB (issue 26 item 6), through
/// the leader (its pieces name the pool buffers the value was received
/// into) and through a follower (its pieces forwarded): every member then
/// holds both values byte for byte, `INFO stats` counts the streams and
/// their pieces, and a streamed APPEND adds to a value.
#[test]
fn a_value_larger_than_the_log_streams_through_any_member() {
    let dir = if Path::new("/dev/shm").is_dir() { tempfile::tempdir_in("/dev/shm").unwrap() } else { tempfile::tempdir().unwrap() };
    let cluster = Cluster::start_full("512M", dir, |_| slow_ticks());
    let l = cluster.leader(&[0, 1, 2]);
    let f = (l + 1) % 3;
    let pattern = |bytes: usize, seed: usize| -> String { (0..bytes).map(|i| char::from(b'a' + ((i / 7 + seed) % 26) as u8)).collect() };
    let big = pattern(40 << 20, 1);
    let mid = pattern((6 << 20) + 12_345, 2);
    let tail = pattern(300_000, 3);
    let set = |i: usize, key: &str, value: &str| {
        let mut c = cluster.client(i);
        wait_for(Duration::from_secs(60), "a streamed SET to be answered +OK", || match c.call(&["SET", key, value]) {
            Reply::Simple(s) if s == "OK" => Some(()),
            Reply::Error(e) if e.starts_with("CLUSTERDOWN") || e.contains("missing") => None,
            other => panic!("SET {key} through member {} answered {other:?}", i + 1),
        });
    };
    set(l, "through-leader", &big);
    set(f, "through-follower", &mid);
    let mut c = cluster.client(f);
    match c.call(&["APPEND", "through-follower", &tail]) {
        Reply::Int(n) => assert_eq!(n as usize, mid.len() + tail.len()),
        other => panic!("APPEND answered {other:?}"),
    }
    let appended = format!("{mid}{tail}");
    for i in 0..3 {
        let mut c = cluster.client(i);
        for (key, want) in [("through-leader", &big), ("through-follower", &appended)] {
            wait_for(Duration::from_secs(30), "the streamed value on every member", || match c.call(&["GET", key]) {
                Reply::Bulk(Some(b)) => Some(assert!(b == want.as_bytes(), "{key} on member {} differs", i + 1)),
                Reply::Error(e) if e.starts_with("CLUSTERDOWN") => None,
                other => panic!("GET {key} on member {}: {other:?}", i + 1),
            });
        }
    }
    let stats = |i: usize| match cluster.client(i).call(&["INFO", "stats"]) {
        Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
        other => panic!("INFO stats: {other:?}"),
    };
    let (leader, follower) = (stats(l), stats(f));
    assert!(info_u64(&leader, "streamed_commands") >= 1 && info_u64(&leader, "streamed_pieces") >= 320, "{leader}");
    assert!(info_u64(&follower, "streamed_commands") >= 2 && info_u64(&follower, "streamed_pieces") >= 48, "{follower}");
    // The follower streamed from its receive buffers: no whole value was
    // copied out of a request (each piece is copied once, into its entry).
    let copies = match cluster.client(f).call(&["INFO", "copies"]) {
        Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
        other => panic!("INFO copies: {other:?}"),
    };
    assert_eq!(info_u64(&copies, "copy_value_bytes_rx_args"), 0, "{copies}");
    assert!(info_u64(&copies, "copy_value_bytes_entry") >= (mid.len() + tail.len()) as u64, "{copies}");
}

/// A client that sends a long value and leaves before its stream ends:
/// the member cuts the stream (an empty piece out of order, counted as
/// `streams_cut`), so every member's sweep frees the pieces kept so far at
/// once rather than after the abandon time; nothing of the SET is applied
/// and the members go on serving.
#[test]
fn a_stream_whose_client_leaves_is_cut() {
    use std::io::Write;
    let dir = if Path::new("/dev/shm").is_dir() { tempfile::tempdir_in("/dev/shm").unwrap() } else { tempfile::tempdir().unwrap() };
    let cluster = Cluster::start_full("512M", dir, |_| slow_ticks());
    let l = cluster.leader(&[0, 1, 2]);
    let value = vec![b'v'; 24 << 20];
    let mut sock = std::net::TcpStream::connect(cluster.resp[l]).unwrap();
    sock.write_all(format!("*3\r\n$3\r\nSET\r\n$4\r\ngone\r\n${}\r\n", value.len()).as_bytes()).unwrap();
    sock.write_all(&value).unwrap();
    sock.write_all(b"\r\n").unwrap();
    drop(sock);
    wait_for(Duration::from_secs(30), "the leader to cut the stream", || match cluster.client(l).call(&["INFO", "stats"]) {
        Reply::Bulk(Some(b)) => {
            let text = String::from_utf8(b).unwrap();
            (info_u64(&text, "streamed_commands") >= 1 && info_u64(&text, "streams_cut") >= 1).then_some(())
        }
        _ => None,
    });
    every_member_serves_without(&cluster, "gone");
}

/// Every member takes a write (after any election the test caused) and
/// holds no `key`: nothing of a refused or cut write was applied.
fn every_member_serves_without(cluster: &Cluster, key: &str) {
    for i in 0..3 {
        let mut c = cluster.client(i);
        wait_for(Duration::from_secs(20), "every member to serve", || match c.call(&["SET", &format!("after{i}"), "x"]) {
            Reply::Simple(s) if s == "OK" => Some(()),
            Reply::Error(e) if e.starts_with("CLUSTERDOWN") => None,
            other => panic!("member {} answered {other:?}", i + 1),
        });
        assert_eq!(c.call(&["EXISTS", key]), Reply::Int(0), "nothing of the write to {key} applied");
    }
}

/// Field `name` of an `INFO` section's text, as a number.
fn info_u64(text: &str, name: &str) -> u64 {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok()).unwrap_or_else(|| panic!("{name} in {text}"))
}

/// A client filling the pool gets `-OOM` before any member runs out, and
/// every member goes on serving: a member whose pool ran out while applying
/// a committed write halts, and all members apply the same writes, so
/// filling a 64 MiB pool had stopped the whole cluster. FLUSHALL (always
/// served) makes room again.
#[test]
fn a_client_filling_the_pool_gets_oom_and_the_cluster_goes_on() {
    let cluster = Cluster::start_with(|_| slow_ticks());
    let l = cluster.leader(&[0, 1, 2]);
    let f = (l + 1) % 3;
    let value = "v".repeat(1 << 20);
    let mut written = 0;
    let mut refusal = None;
    // A 1 MiB value travels inside its entry, and applying one now and then
    // holds a member's loop for up to half a second (docs/bench.md, "A full
    // pool"): an election may answer CLUSTERDOWN meanwhile, and the same
    // SET is sent again.
    let mut retries = 0;
    'writes: for i in 0..200 {
        // Through the leader and a follower in turn, on a connection of its
        // own (one a loaded member closed is counted and tried again; the
        // checks after the loop catch a member that stopped).
        let addr = cluster.resp[if i % 2 == 0 { l } else { f }];
        loop {
            match raw_set(addr, &format!("k{i}"), &value) {
                None if retries < 40 => {
                    retries += 1;
                    std::thread::sleep(Duration::from_millis(250));
                    continue;
                }
                None => panic!("SET {i}: every connection closed"),
                Some(Reply::Simple(s)) if s == "OK" => written += 1,
                Some(Reply::Error(e)) if e.starts_with("CLUSTERDOWN") && retries < 40 => {
                    println!("SET {i} through member {}: {e}", if i % 2 == 0 { l + 1 } else { f + 1 });
                    retries += 1;
                    std::thread::sleep(Duration::from_millis(250));
                    continue;
                }
                Some(Reply::Error(e)) => {
                    refusal = Some(e);
                    break 'writes;
                }
                other => panic!("SET {i} answered {other:?}"),
            }
            break;
        }
    }
    println!("{retries} SETs answered CLUSTERDOWN or lost their connection, and were sent again");
    let refusal = refusal.unwrap_or_else(|| panic!("{written} SETs of 1 MiB into 64 MiB pools, none refused"));
    if !refusal.starts_with("OOM") {
        for i in 0..3 {
            if let Reply::Bulk(Some(b)) = cluster.client(i).call(&["INFO", "replication"]) {
                eprintln!("member {}: {}", i + 1, String::from_utf8_lossy(&b));
            }
        }
    }
    assert!(refusal.starts_with("OOM") && refusal.contains("B free"), "after {written} SETs: {refusal}");
    println!("refused after {written} SETs of 1 MiB: {refusal}");
    // Every acknowledged SET, and the harness's own key, on every member.
    // The leader by ROLE alone: `Cluster::leader` probes with a SET, which
    // the full pool refuses.
    let by_role = || {
        wait_for(Duration::from_secs(20), "a member saying it leads", || {
            (0..3).find(|&i| matches!(cluster.client(i).call(&["ROLE"]), Reply::Array(Some(a)) if a[0] == Reply::bulk("master")))
        })
    };
    let Reply::Int(keys) = cluster.client(by_role()).call(&["DBSIZE"]) else { panic!("DBSIZE") };
    assert!(keys >= written, "{keys} keys, {written} SETs acknowledged");
    for i in 0..3 {
        let mut c = cluster.client(i);
        let mut last = Reply::Int(-1);
        let held = (0..100).any(|_| {
            last = c.call(&["DBSIZE"]);
            std::thread::sleep(Duration::from_millis(100));
            last == Reply::Int(keys)
        });
        assert!(held, "member {} holds the leader's {keys} keys: DBSIZE {last:?}", i + 1);
        assert_eq!(c.call(&["GET", "k0"]), Reply::bulk(&value), "member {} still serves", i + 1);
        // A SET answered CLUSTERDOWN may have left a cut stream, whose
        // pieces the leader's sweep frees: then room may come back.
        let more = c.call(&["SET", "more", &value]);
        match &more {
            Reply::Error(e) if e.starts_with("OOM") => {}
            Reply::Simple(s) if s == "OK" && retries > 0 => assert_eq!(c.call(&["DEL", "more"]), Reply::Int(1)),
            _ => panic!("member {} still refuses with OOM ({retries} SETs sent again): {more:?}", i + 1),
        }
    }
    let mut any = cluster.client(f);
    assert_eq!(any.call(&["FLUSHALL"]), ok(), "FLUSHALL is served when short of room");
    // The deleted values' buffers come back at the member's next
    // checkpoint (taken for a refused write at most every 200 ms).
    wait_for(Duration::from_secs(10), "room again after FLUSHALL", || (any.call(&["SET", "k0", &value]) == ok()).then_some(()));
    let leader_now = by_role();
    for i in 0..3 {
        assert_eq!(cluster.client(i).call(&["PING"]), Reply::Simple("PONG".into()), "member {} did not halt (leader now {})", i + 1, leader_now + 1);
    }
}

/// `SET key value` on a connection of its own: the reply, or `None` if the
/// connection failed or closed first.
fn raw_set(addr: SocketAddr, key: &str, value: &str) -> Option<Reply> {
    use std::io::{BufRead, BufReader};
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let req = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{value}\r\n", key.len(), value.len());
    s.write_all(req.as_bytes()).ok()?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).ok()?;
    let line = line.strip_suffix("\r\n")?;
    Some(match line.split_at(1) {
        ("+", text) => Reply::Simple(text.to_string()),
        ("-", text) => Reply::Error(text.to_string()),
        _ => panic!("SET answered {line:?}"),
    })
}

/// Scripts through every member (issue 27): a script loaded through a
/// follower is known to every member (its body is replicated state), so
/// EVALSHA through any member runs it, once, on the same keyspace; EVAL_RO
/// reads on any member; a FLUSHALL keeps the scripts; a script that loops
/// is stopped on every member at the same instruction budget, answered
/// with the error, nothing of it kept, and the members go on.
#[test]
fn scripts_run_through_every_member() {
    let cluster = Cluster::start_with(|_| slow_ticks());
    let l = cluster.leader(&[0, 1, 2]);
    let f = (l + 1) % 3;
    let mut c = cluster.client(f);
    let body = "return redis.call('incr', KEYS[1])";
    let sha = wait_for(Duration::from_secs(20), "SCRIPT LOAD to be served", || match c.call(&["SCRIPT", "LOAD", body]) {
        Reply::Bulk(Some(sha)) => Some(String::from_utf8(sha).unwrap()),
        Reply::Error(e) if e.starts_with("CLUSTERDOWN") => None,
        other => panic!("SCRIPT LOAD answered {other:?}"),
    });
    for (n, i) in [l, f, (l + 2) % 3].into_iter().enumerate() {
        let mut c = cluster.client(i);
        assert_eq!(c.call(&["EVALSHA", &sha, "1", "counter"]), Reply::Int(n as i64 + 1), "member {}", i + 1);
        assert_eq!(c.call(&["EVAL", body, "1", "other"]), Reply::Int(n as i64 + 1), "member {}", i + 1);
        assert_eq!(c.call(&["EVAL_RO", "return redis.call('get', KEYS[1])", "1", "counter"]), Reply::Bulk(Some(format!("{}", n + 1).into_bytes())));
        assert_eq!(c.call(&["SCRIPT", "EXISTS", &sha]), Reply::Array(Some(vec![Reply::Int(1)])));
    }
    assert_eq!(cluster.client(l).call(&["FLUSHALL"]), ok());
    for i in 0..3 {
        assert_eq!(cluster.client(i).call(&["EVALSHA", &sha, "1", "counter"]), Reply::Int(i as i64 + 1), "scripts outlive FLUSHALL");
    }
    match cluster.client(f).call(&["EVAL", "redis.call('set', 'looped', '1') while true do end", "0"]) {
        Reply::Error(e) => assert!(e.contains("ran past its budget"), "{e}"),
        other => panic!("a looping script answered {other:?}"),
    }
    every_member_serves_without(&cluster, "looped");
}

/// Pub/sub on a cluster: PUBLISH goes through the log and every member
/// delivers each message to its own subscribers (channels and patterns),
/// whichever member it was published through, alone, in a transaction or
/// from a script; a PUBLISH answers how many of the serving member's
/// subscribers it reached (inside EXEC and scripts 0, the same on every
/// member). In the RESP2 context a read is refused.
#[test]
fn published_messages_reach_subscribers_on_every_member() {
    let cluster = Cluster::start();
    let l = cluster.leader(&[0, 1, 2]);
    let f = (l + 1) % 3;
    let message = |channel: &str, text: &str| Reply::Array(Some(vec![Reply::bulk("message"), Reply::bulk(channel), Reply::bulk(text)]));
    for m in [l, f] {
        let other = (m + 2) % 3;
        let mut sub = cluster.client(m);
        let mut psub = cluster.client(other);
        let mut publisher = cluster.client(m);
        let confirm = |kind: &str, name: &str, n: i64| Reply::Array(Some(vec![Reply::bulk(kind), Reply::bulk(name), Reply::Int(n)]));
        assert_eq!(sub.call(&["SUBSCRIBE", "news"]), confirm("subscribe", "news", 1));
        assert_eq!(psub.call(&["PSUBSCRIBE", "ne*"]), confirm("psubscribe", "ne*", 1));
        assert!(matches!(sub.call(&["GET", "k"]), Reply::Error(e) if e.starts_with("ERR Can't execute 'get'")), "member {m}: the RESP2 context");
        let pmessage = |text: &str| Reply::Array(Some(vec![Reply::bulk("pmessage"), Reply::bulk("ne*"), Reply::bulk("news"), Reply::bulk(text)]));
        assert_eq!(publisher.call(&["PUBLISH", "news", "hello"]), Reply::Int(1), "member {m}");
        assert_eq!(sub.read(), message("news", "hello"));
        assert_eq!(psub.read(), pmessage("hello"), "a pattern subscriber on member {other}");
        assert_eq!(publisher.call(&["PUBSUB", "NUMSUB", "news"]), Reply::Array(Some(vec![Reply::bulk("news"), Reply::Int(1)])));
        let mut elsewhere = cluster.client(other);
        assert_eq!(elsewhere.call(&["PUBLISH", "news", "elsewhere"]), Reply::Int(1), "member {other}: its pattern subscriber");
        assert_eq!(sub.read(), message("news", "elsewhere"), "published through member {other}");
        assert_eq!(psub.read(), pmessage("elsewhere"));
        assert_eq!(elsewhere.call(&["MULTI"]), ok());
        assert_eq!(elsewhere.call(&["PUBLISH", "news", "in-multi"]), Reply::Simple("QUEUED".into()));
        assert_eq!(elsewhere.call(&["EXEC"]), Reply::Array(Some(vec![Reply::Int(0)])));
        assert_eq!(sub.read(), message("news", "in-multi"));
        assert_eq!(psub.read(), pmessage("in-multi"));
        assert_eq!(elsewhere.call(&["EVAL", "return redis.call('publish', 'news', ARGV[1])", "0", "from-script"]), Reply::Int(0));
        assert_eq!(sub.read(), message("news", "from-script"));
        assert_eq!(psub.read(), pmessage("from-script"));
        assert_eq!(sub.call(&["UNSUBSCRIBE"]), confirm("unsubscribe", "news", 0));
        assert_eq!(psub.call(&["PUNSUBSCRIBE"]), confirm("punsubscribe", "ne*", 0));
        assert_eq!(sub.call(&["SET", "k", "v"]), ok(), "out of the context, writes go through the log");
        assert_eq!(publisher.call(&["PUBLISH", "news", "gone"]), Reply::Int(0));
        assert_eq!(elsewhere.call(&["SPUBLISH", "news", "shard"]), Reply::Int(0));
        // Every member has applied (and delivered to no one) what was published
        // here before the next round subscribes again: a linearizable read waits
        // for its member to apply that far.
        for x in 0..3 {
            assert_eq!(cluster.client(x).call(&["GET", "k"]), Reply::bulk("v"));
        }
    }
    // Keyspace events: each member's own setting, for every entry it
    // applies, whichever member proposed it.
    assert_eq!(cluster.client(f).call(&["CONFIG", "SET", "notify-keyspace-events", "E$"]), ok());
    let mut events = cluster.client(f);
    let subscribed = Reply::Array(Some(vec![Reply::bulk("subscribe"), Reply::bulk("__keyevent@0__:set"), Reply::Int(1)]));
    assert_eq!(events.call(&["SUBSCRIBE", "__keyevent@0__:set"]), subscribed);
    assert_eq!(cluster.client(l).call(&["SET", "noted", "1"]), ok());
    assert_eq!(events.read(), message("__keyevent@0__:set", "noted"), "a SET through the leader, on member {f}");
    // The sweep's `expired` (a leader-proposed entry, no read of the key),
    // on each member that asks for it.
    assert_eq!(cluster.client(l).call(&["CONFIG", "SET", "notify-keyspace-events", "Ex"]), ok());
    assert_eq!(cluster.client(f).call(&["CONFIG", "SET", "notify-keyspace-events", "E$x"]), ok());
    let expired = |m: usize| {
        let mut c = cluster.client(m);
        let subscribed = Reply::Array(Some(vec![Reply::bulk("subscribe"), Reply::bulk("__keyevent@0__:expired"), Reply::Int(1)]));
        assert_eq!(c.call(&["SUBSCRIBE", "__keyevent@0__:expired"]), subscribed);
        c
    };
    let mut on = [(l, expired(l)), (f, expired(f))];
    assert_eq!(cluster.client(f).call(&["SET", "brief", "1", "PX", "50"]), ok());
    assert_eq!(events.read(), message("__keyevent@0__:set", "brief"));
    for (m, c) in &mut on {
        assert_eq!(c.read(), message("__keyevent@0__:expired", "brief"), "member {m}: the sweep's event");
    }
    assert_eq!(cluster.client(l).call(&["EXISTS", "brief"]), Reply::Int(0));
    // Each member's INFO counts every command it applied, whoever sent it
    // (the four SETs above, and any the cluster's start made).
    let set_calls: Vec<u64> = (0..3).map(|m| calls(&cluster, m, "set")).collect();
    assert!(set_calls[0] >= 4 && set_calls.iter().all(|&n| n == set_calls[0]), "{set_calls:?}");
}

/// Command `name`'s calls in member `m`'s INFO commandstats.
fn calls(cluster: &Cluster, m: usize, name: &str) -> u64 {
    let Reply::Bulk(Some(info)) = cluster.client(m).call(&["INFO", "commandstats"]) else { panic!("INFO") };
    let info = String::from_utf8(info).unwrap();
    let head = format!("cmdstat_{name}:calls=");
    let Some(line) = info.lines().find(|l| l.starts_with(&head)) else { return 0 };
    line[head.len()..].split(',').next().unwrap().parse().unwrap()
}

/// MONITOR on any member shows every command that member applies from the
/// log (`[0 log:<index>]`, whichever member a client sent it to), and the
/// reads it serves itself with their client's address; its INFO counts both.
#[test]
fn monitors_on_every_member_see_what_it_applies() {
    let cluster = Cluster::start();
    let l = cluster.leader(&[0, 1, 2]);
    let f = (l + 1) % 3;
    let (sets, gets) = (calls(&cluster, l, "set"), calls(&cluster, l, "get"));
    let mut monitors: Vec<(usize, Client)> = [l, f]
        .into_iter()
        .map(|m| {
            let mut c = cluster.client(m);
            assert_eq!(c.call(&["MONITOR"]), ok());
            (m, c)
        })
        .collect();
    assert_eq!(cluster.client(f).call(&["SET", "seen", "1"]), ok());
    assert_eq!(cluster.client(l).call(&["GET", "seen"]), Reply::bulk("1"));
    for (m, mon) in &mut monitors {
        // A follower may apply the cluster's start-up writes after its MONITOR began.
        let line = loop {
            let Reply::Simple(line) = mon.read() else { panic!("member {m}: a monitor line") };
            if !line.contains("leader-probe") {
                break line;
            }
        };
        assert!(line.contains("[0 log:") && line.ends_with(r#"] "SET" "seen" "1""#), "member {m}: {line}");
    }
    let Reply::Simple(line) = monitors[0].1.read() else { panic!("the leader's read") };
    assert!(line.ends_with(r#""GET" "seen""#) && !line.contains("[0 log:"), "{line}");
    assert_eq!((calls(&cluster, l, "set"), calls(&cluster, l, "get")), (sets + 1, gets + 1));
}

/// Streams through every member: XADD through the leader and a follower,
/// XRANGE, XREAD and XLEN read the same entries on each; XREAD BLOCK on `$`
/// parked on a follower is served by an XADD through the leader (and not by
/// one made before it blocked), XREADGROUP BLOCK `>` likewise, and a
/// timeout answers the null array.
#[test]
fn streams_are_written_and_read_through_every_member() {
    let cluster = Cluster::start();
    let l = cluster.leader(&[0, 1, 2]);
    let f = (l + 1) % 3;
    assert_eq!(cluster.client(l).call(&["XADD", "st", "1-0", "a", "1"]), Reply::bulk("1-0"));
    assert_eq!(cluster.client(f).call(&["XADD", "st", "2-*", "b", "2"]), Reply::bulk("2-0"));
    // `*` takes the entry's time: the ID the follower answered is the one the leader holds.
    let added = cluster.client(f).call(&["XADD", "st", "MAXLEN", "=", "5", "*", "c", "3"]);
    let last = match cluster.client(l).call(&["XREVRANGE", "st", "+", "-", "COUNT", "1"]) {
        Reply::Array(Some(mut entries)) => match entries.remove(0) {
            Reply::Array(Some(mut pair)) => pair.remove(0),
            other => panic!("an entry: {other:?}"),
        },
        other => panic!("XREVRANGE: {other:?}"),
    };
    assert_eq!(added, last);
    for m in 0..3 {
        let mut c = cluster.client(m);
        assert_eq!(c.call(&["XLEN", "st"]), Reply::Int(3), "member {m}");
        let first = c.call(&["XRANGE", "st", "-", "+", "COUNT", "2"]);
        let entry = |id: &str, f: &str, v: &str| Reply::Array(Some(vec![Reply::bulk(id), Reply::Array(Some(vec![Reply::bulk(f), Reply::bulk(v)]))]));
        assert_eq!(first, Reply::Array(Some(vec![entry("1-0", "a", "1"), entry("2-0", "b", "2")])), "member {m}");
        let read = c.call(&["XREAD", "COUNT", "1", "STREAMS", "st", "1-0"]);
        assert_eq!(read, Reply::Array(Some(vec![Reply::Array(Some(vec![Reply::bulk("st"), Reply::Array(Some(vec![entry("2-0", "b", "2")]))]))])), "member {m}");
        let start = Instant::now();
        assert_eq!(c.call(&["XREAD", "BLOCK", "300", "STREAMS", "st", "$"]), Reply::Array(None), "member {m}: a timeout");
        assert!(start.elapsed() >= Duration::from_millis(300), "member {m}: not before its timeout");
    }
    let entry = |id: &str, f: &str, v: &str| Reply::Array(Some(vec![Reply::bulk(id), Reply::Array(Some(vec![Reply::bulk(f), Reply::bulk(v)]))]));
    let parked = |what: &'static [&'static str], m: usize| {
        let addr = cluster.resp[m];
        let waiter = std::thread::spawn(move || Client::connect(addr).call(what));
        wait_for(Duration::from_secs(10), "the read to park", || {
            let info = match cluster.client(m).call(&["INFO", "clients"]) {
                Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
                other => panic!("INFO: {other:?}"),
            };
            info.contains("blocked_clients:1").then_some(())
        });
        waiter
    };
    // XREAD BLOCK `$` on a follower: parked (its first attempt saw the
    // stream's last ID), then served by the next XADD through the leader.
    let waiter = parked(&["XREAD", "BLOCK", "20000", "STREAMS", "st", "$"], f);
    assert_eq!(cluster.client(l).call(&["XADD", "st", "9000000000000-1", "d", "4"]), Reply::bulk("9000000000000-1"));
    assert_eq!(waiter.join().unwrap(), Reply::Array(Some(vec![Reply::Array(Some(vec![Reply::bulk("st"), Reply::Array(Some(vec![entry("9000000000000-1", "d", "4")]))]))])));
    // XREADGROUP BLOCK `>`: the group's next entry, delivered once.
    assert_eq!(cluster.client(l).call(&["XGROUP", "CREATE", "st", "g", "$"]), ok());
    let waiter = parked(&["XREADGROUP", "GROUP", "g", "alice", "BLOCK", "20000", "STREAMS", "st", ">"], f);
    assert_eq!(cluster.client(l).call(&["XADD", "st", "9000000000000-2", "e", "5"]), Reply::bulk("9000000000000-2"));
    assert_eq!(waiter.join().unwrap(), Reply::Array(Some(vec![Reply::Array(Some(vec![Reply::bulk("st"), Reply::Array(Some(vec![entry("9000000000000-2", "e", "5")]))]))])));
    for m in 0..3 {
        let pending = cluster.client(m).call(&["XPENDING", "st", "g"]);
        assert!(matches!(&pending, Reply::Array(Some(p)) if p[0] == Reply::Int(1)), "member {m}: one entry pending: {pending:?}");
    }
    // A group that does not exist is refused, not parked.
    assert!(matches!(cluster.client(f).call(&["XREADGROUP", "GROUP", "nog", "c", "BLOCK", "0", "STREAMS", "st", ">"]), Reply::Error(e) if e.starts_with("NOGROUP")));
    // A parked XREADGROUP whose stream is deleted, overwritten or flushed
    // through the leader is answered as Redis answers it.
    let unblocked = Reply::Error("UNBLOCKED the stream key no longer exists".into());
    for write in [&["DEL", "st"][..], &["SET", "st", "v"], &["FLUSHALL"]] {
        cluster.client(l).call(&["DEL", "st"]);
        assert_eq!(cluster.client(l).call(&["XGROUP", "CREATE", "st", "u", "$", "MKSTREAM"]), ok());
        let waiter = parked(&["XREADGROUP", "GROUP", "u", "bob", "BLOCK", "20000", "STREAMS", "st", ">"], f);
        assert!(!matches!(cluster.client(l).call(write), Reply::Error(_)), "{write:?}");
        assert_eq!(waiter.join().unwrap(), unblocked, "after {write:?}");
    }
    // XGROUP DESTROY (no write to the key) answers it NOGROUP.
    assert_eq!(cluster.client(l).call(&["XGROUP", "CREATE", "st", "u", "$", "MKSTREAM"]), ok());
    let waiter = parked(&["XREADGROUP", "GROUP", "u", "bob", "BLOCK", "20000", "STREAMS", "st", ">"], f);
    assert_eq!(cluster.client(l).call(&["XGROUP", "DESTROY", "st", "u"]), Reply::Int(1));
    assert_eq!(waiter.join().unwrap(), Reply::Error("NOGROUP the consumer group this client was blocked on no longer exists".into()));
}


/// ACL users on a member (they are each member's configuration, as
/// redis-server's): a command the user may not run is refused before it is
/// proposed, forwarded or queued (and EXEC then aborts); a queued command
/// the rules no longer allow at EXEC takes Redis's NOPERM error in EXEC's
/// reply and is not applied anywhere, while the rest of the transaction is.
#[test]
fn acl_rules_hold_on_a_member_when_queued_and_again_at_exec() {
    let cluster = Cluster::start();
    let l = cluster.leader(&[0, 1, 2]);
    for m in [(l + 1) % 3, l] {
        let mut admin = cluster.client(m);
        assert_eq!(admin.call(&["ACL", "SETUSER", "alice", "on", ">pw", "~*", "+@all", "-get"]), ok());
        let mut alice = cluster.client(m);
        assert_eq!(alice.call(&["AUTH", "alice", "pw"]), ok());
        let (a, n) = (format!("acl-a-{m}"), format!("acl-n-{m}"));
        assert!(matches!(alice.call(&["GET", &a]), Reply::Error(e) if e.starts_with("NOPERM")), "member {m}");
        assert_eq!(alice.call(&["SET", &a, "0"]), ok());
        // Refused when queued: EXEC aborts.
        assert_eq!(alice.call(&["MULTI"]), ok());
        assert!(matches!(alice.call(&["GET", &a]), Reply::Error(e) if e.starts_with("NOPERM")), "member {m}");
        assert!(matches!(alice.call(&["EXEC"]), Reply::Error(e) if e.starts_with("EXECABORT")), "member {m}");
        // Allowed when queued, refused at EXEC.
        assert_eq!(alice.call(&["MULTI"]), ok());
        assert_eq!(alice.call(&["SET", &a, "1"]), Reply::Simple("QUEUED".into()));
        assert_eq!(alice.call(&["INCR", &n]), Reply::Simple("QUEUED".into()));
        assert_eq!(alice.call(&["SET", &a, "2"]), Reply::Simple("QUEUED".into()));
        assert_eq!(admin.call(&["ACL", "SETUSER", "alice", "-incr"]), ok());
        let Reply::Array(Some(replies)) = alice.call(&["EXEC"]) else { panic!("member {m}: EXEC's array") };
        assert_eq!(replies.len(), 3, "member {m}: {replies:?}");
        assert_eq!((&replies[0], &replies[2]), (&ok(), &ok()), "member {m}");
        assert!(
            matches!(&replies[1], Reply::Error(e) if e.starts_with("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call")),
            "member {m}: {:?}",
            replies[1]
        );
        for other in 0..3 {
            let mut c = cluster.client(other);
            assert_eq!(c.call(&["GET", &a]), Reply::bulk("2"), "member {other}");
            assert_eq!(c.call(&["EXISTS", &n]), Reply::Int(0), "member {other}");
        }
        // ACL LOG, newest first: INCR at EXEC, GET queued (both "multi"),
        // GET at the top level.
        let Reply::Array(Some(log)) = admin.call(&["ACL", "LOG"]) else { panic!("member {m}: ACL LOG") };
        let fields = |e: &Reply, name: &str| match e {
            Reply::Array(Some(f)) => f.chunks(2).find(|p| p[0] == Reply::bulk(name)).map(|p| p[1].clone()),
            _ => None,
        };
        let seen: Vec<(Option<Reply>, Option<Reply>)> = log.iter().map(|e| (fields(e, "object"), fields(e, "context"))).collect();
        let want = |o: &str, c: &str| (Some(Reply::bulk(o)), Some(Reply::bulk(c)));
        assert_eq!(seen, vec![want("incr", "multi"), want("get", "multi"), want("get", "toplevel")], "member {m}");
    }
}
