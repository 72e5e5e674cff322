//! `pmwire kv --cluster`: three real member processes on loopback with a
//! `--secret-file` (issue 26, item 2). Writes through the leader answered
//! once committed, linearizable reads on the leader, possibly stale reads
//! on a follower after READONLY, a follower's refusal to write, MULTI/EXEC,
//! INCR counted exact, INFO replication, ROLE and WAIT, redis-cli against a
//! follower, the leader killed -9 and a new one serving everything
//! acknowledged, the killed member restarted on its pools and catching up;
//! and a member cut off from its majority answering CLUSTERDOWN within a
//! bound. No timing asserts except generous bounds.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A RESP reply.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    fn bulk(s: &str) -> Reply {
        Reply::Bulk(Some(s.as_bytes().to_vec()))
    }
}

struct Client {
    r: BufReader<TcpStream>,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client { r: BufReader::new(s) }
    }

    fn call(&mut self, args: &[&str]) -> Reply {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out += &format!("${}\r\n{a}\r\n", a.len());
        }
        self.r.get_mut().write_all(out.as_bytes()).unwrap();
        self.read()
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).expect("a reply line");
        assert!(l.ends_with("\r\n"), "a reply line ends with CRLF: {l:?}");
        l.truncate(l.len() - 2);
        l
    }

    fn read(&mut self) -> Reply {
        let l = self.line();
        let (t, rest) = l.split_at(1);
        match t {
            "+" => Reply::Simple(rest.into()),
            "-" => Reply::Error(rest.into()),
            ":" => Reply::Int(rest.parse().unwrap()),
            "$" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return Reply::Bulk(None);
                }
                let mut b = vec![0; n as usize + 2];
                self.r.read_exact(&mut b).unwrap();
                b.truncate(n as usize);
                Reply::Bulk(Some(b))
            }
            "*" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return Reply::Array(None);
                }
                Reply::Array(Some((0..n).map(|_| self.read()).collect()))
            }
            other => panic!("unknown reply type {other:?} in {l:?}"),
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Cluster {
    dir: tempfile::TempDir,
    peers: String,
    resp: Vec<SocketAddr>,
    http: Vec<SocketAddr>,
    children: Vec<Option<Child>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Cluster {
    fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let peers = (1..=3).map(|i| format!("{i}=127.0.0.1:{}", free_port())).collect::<Vec<_>>().join(",");
        let resp = (0..3).map(|_| SocketAddr::from(([127, 0, 0, 1], free_port()))).collect();
        let http = (0..3).map(|_| SocketAddr::from(([127, 0, 0, 1], free_port()))).collect();
        let mut c = Cluster { dir, peers, resp, http, children: vec![None, None, None] };
        for i in 0..3 {
            c.spawn(i);
        }
        for i in 0..3 {
            c.wait_ready(i);
        }
        c
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn spawn(&mut self, i: usize) {
        let ready = self.path(&format!("ready{i}"));
        let _ = std::fs::remove_file(&ready);
        let log = std::fs::File::create(self.path(&format!("log{i}"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_pmwire"))
            .args(["kv", "--size", "64M", "--raft-size", "64M", "--raft-log-size", "16M", "--create-secret"])
            .arg("--pool")
            .arg(self.path(&format!("pool{i}")))
            .args(["--resp", &self.resp[i].to_string(), "--http", &self.http[i].to_string()])
            .args(["--cluster", &self.peers, "--id", &(i + 1).to_string()])
            .arg("--secret-file")
            .arg(self.path("secret"))
            .arg("--ready-file")
            .arg(&ready)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn pmwire kv --cluster");
        self.children[i] = Some(child);
        if i == 0 {
            // The first member creates the secret; the others read it.
            let secret = self.path("secret");
            wait_for(Duration::from_secs(10), "the secret file", || secret.exists().then_some(()));
        }
    }

    fn wait_ready(&mut self, i: usize) {
        let ready = self.path(&format!("ready{i}"));
        let log = self.path(&format!("log{i}"));
        let child = self.children[i].as_mut().unwrap();
        wait_for(Duration::from_secs(20), "a member's ready file", || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("member {} exited ({status}): {}", i + 1, std::fs::read_to_string(&log).unwrap_or_default());
            }
            ready_exists(&ready).then_some(())
        });
    }

    fn client(&self, i: usize) -> Client {
        Client::connect(self.resp[i])
    }

    /// The index of the member that says it leads (and whose followers say so too).
    fn leader(&self, among: &[usize]) -> usize {
        wait_for(Duration::from_secs(20), "a leader", || {
            among.iter().copied().find(|&i| {
                let mut c = self.client(i);
                matches!(c.call(&["ROLE"]), Reply::Array(Some(a)) if a[0] == Reply::bulk("master"))
                    && c.call(&["SET", "leader-probe", "1"]) == Reply::Simple("OK".into())
            })
        })
    }

    fn kill(&mut self, i: usize) {
        let mut c = self.children[i].take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    }

    fn signal(&self, i: usize, sig: &str) {
        let pid = self.children[i].as_ref().unwrap().id();
        let ok = Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success();
        assert!(ok, "kill {sig} {pid}");
    }
}

fn ready_exists(p: &Path) -> bool {
    std::fs::read_to_string(p).map(|s| s.contains("resp")).unwrap_or(false)
}

fn wait_for<T>(bound: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < bound, "no {what} within {bound:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

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
        match c.call(&["SET", "k", "w"]) {
            Reply::Error(e) => assert!(e.starts_with("READONLY"), "a follower refuses a write: {e}"),
            other => panic!("a follower wrote: {other:?}"),
        }
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
/// the values into their own pools and hold the same bytes; the leader,
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
        assert!(fc["copy_value_bytes_received"] >= total as f64, "the follower copied the values into its pool: {fc:?}");
        eprintln!("follower copies: {fc:?}");
    }
    // The leader killed -9 and restarted on its pools: its log's extents recovered.
    drop(leader);
    cluster.kill(l);
    let l2 = cluster.leader(&followers);
    let mut leader = cluster.client(l2);
    assert_eq!(leader.call(&["SET", "after", &value(1)]), ok());
    cluster.spawn(l);
    cluster.wait_ready(l);
    let mut back = cluster.client(l);
    assert_eq!(back.call(&["READONLY"]), ok());
    wait_for(Duration::from_secs(20), "the restarted member to catch up", || (back.call(&["GET", "after"]) == Reply::bulk(&value(1))).then_some(()));
    for i in 0..N {
        assert_eq!(back.call(&["GET", &format!("zc{i}")]), Reply::bulk(&value(i)), "restarted member, key {i}");
    }
}
