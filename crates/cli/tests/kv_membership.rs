//! Membership of `pmwire kv --cluster` members (issue 26, item 7): three
//! real member processes loaded with keys (values large enough that the
//! keyspace's snapshot goes as several chunks), a fourth started with
//! `--join` and added with `pmwire smr add` (a learner, caught up from the
//! snapshot and the log, then a voter), serving what was written before
//! and after; leadership transferred to it with `pmwire smr transfer`; a
//! founding member removed with `pmwire smr remove` and stopped, the rest
//! serving writes. No timing asserts except generous bounds.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

mod resp;
use resp::{free_port, Client, Reply};
mod cluster;
use cluster::{wait_for, wait_ready_file};


struct Cluster {
    dir: tempfile::TempDir,
    peer: Vec<SocketAddr>,
    resp: Vec<SocketAddr>,
    children: Vec<Option<Child>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let members: Vec<usize> = (0..self.children.len()).collect();
            eprintln!("--- pmwire smr status at the failure ---\n{}", text(&self.smr(&members, &["status"])));
        }
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            cluster::print_log_tails(self.dir.path(), self.children.len(), 60);
        }
    }
}

fn addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

impl Cluster {
    /// Room for `n` members; the first three started as the founders.
    fn start(n: usize) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Cluster { dir, peer: (0..n).map(|_| addr()).collect(), resp: (0..n).map(|_| addr()).collect(), children: (0..n).map(|_| None).collect() };
        for i in 0..3 {
            c.spawn(i, 3, false);
        }
        for i in 0..3 {
            c.wait_ready(i);
        }
        c
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// ID=PEER_ADDR for the first `n` members.
    fn peers(&self, ids: impl Iterator<Item = usize>) -> String {
        ids.map(|i| format!("{}={}", i + 1, self.peer[i])).collect::<Vec<_>>().join(",")
    }

    fn spawn(&mut self, i: usize, founders: usize, join: bool) {
        let ready = self.path(&format!("ready{i}"));
        let _ = std::fs::remove_file(&ready);
        let log = std::fs::File::create(self.path(&format!("log{i}"))).unwrap();
        let listed = if join { self.peers((0..founders).chain([i])) } else { self.peers(0..founders) };
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pmwire"));
        cmd.args(["kv", "--size", "128M", "--raft-size", "96M", "--raft-log-size", "16M", "--create-secret"])
            .arg("--pool")
            .arg(self.path(&format!("pool{i}")))
            .args(["--resp", &self.resp[i].to_string(), "--http", &addr().to_string()])
            .args(["--cluster", &listed, "--id", &(i + 1).to_string()])
            .arg("--secret-file")
            .arg(self.path("secret"))
            .arg("--ready-file")
            .arg(&ready);
        if join {
            cmd.arg("--join");
        }
        let child = cmd.stdout(log.try_clone().unwrap()).stderr(log).stdin(Stdio::null()).spawn().expect("spawn pmwire kv --cluster");
        self.children[i] = Some(child);
        if i == 0 {
            let secret = self.path("secret");
            wait_for(Duration::from_secs(10), "the secret file", || secret.exists().then_some(()));
        }
    }

    fn wait_ready(&mut self, i: usize) {
        let ready = self.path(&format!("ready{i}"));
        let log = self.path(&format!("log{i}"));
        wait_ready_file(self.children[i].as_mut().unwrap(), i, &ready, &log);
    }

    fn client(&self, i: usize) -> Client {
        Client::connect(self.resp[i])
    }

    /// SET through the leader among `among`, asking again after an
    /// election (a SET again is the same SET); the leader it went through.
    fn set(&self, among: &[usize], key: &str, value: &str) -> usize {
        wait_for(Duration::from_secs(30), &format!("SET {key} acknowledged"), || {
            let l = self.leader(among);
            (self.client(l).call(&["SET", key, value]) == ok()).then_some(l)
        })
    }

    fn leader(&self, among: &[usize]) -> usize {
        wait_for(Duration::from_secs(20), "a leader", || {
            among.iter().copied().find(|&i| {
                let mut c = self.client(i);
                matches!(c.call(&["ROLE"]), Reply::Array(Some(a)) if a[0] == Reply::bulk("master"))
                    && c.call(&["SET", "leader-probe", "1"]) == Reply::Simple("OK".into())
            })
        })
    }

    /// `pmwire smr --tls uring --peers <members> --secret-file S <args>`.
    fn smr(&self, members: &[usize], args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_pmwire"))
            .args(["smr", "--tls", "uring", "--peers", &self.peers(members.iter().copied())])
            .arg("--secret-file")
            .arg(self.path("secret"))
            .args(args)
            .output()
            .expect("run pmwire smr")
    }

    fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.path(&format!("log{i}"))).unwrap_or_default()
    }
}

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn assert_ok(o: &Output, what: &str) -> String {
    let t = text(o);
    assert!(o.status.success(), "{what} failed: {t}");
    t
}

/// A value of `n` bytes that names its key.
fn value(key: usize, n: usize) -> String {
    let mut v = format!("v{key}-");
    while v.len() < n {
        v.push(char::from(b'a' + (v.len() % 26) as u8));
    }
    v
}

/// Waits until member `i` serves `key` as `want` (a READONLY read of its applied state).
fn wait_value(c: &Cluster, i: usize, key: &str, want: &str) {
    let mut client = c.client(i);
    assert_eq!(client.call(&["READONLY"]), ok());
    wait_for(Duration::from_secs(30), &format!("{key} on member {}", i + 1), || (client.call(&["GET", key]) == Reply::bulk(want)).then_some(()));
}

#[test]
fn a_member_joins_a_loaded_cluster_catches_up_leads_and_one_is_removed() {
    let mut c = Cluster::start(4);
    // About 6 MiB of values: the keyspace's snapshot goes as several chunks.
    const KEYS: usize = 96;
    for k in 0..KEYS {
        c.set(&[0, 1, 2], &format!("big{k}"), &value(k, 64 << 10));
    }
    c.set(&[0, 1, 2], "n", "20");

    // Member 4 starts with --join: it waits, never campaigning.
    c.spawn(3, 3, true);
    c.wait_ready(3);
    assert!(c.log(3).contains("waiting to be added"), "member 4 says it waits: {}", c.log(3));
    let added = assert_ok(&c.smr(&[0, 1, 2], &["add", "--id", "4", "--addr", &c.peer[3].to_string(), "--catch-up-s", "60"]), "pmwire smr add");
    assert!(added.contains("is a voter"), "added and promoted: {added}");

    // It caught up from the snapshot (chunked) and the log, and serves.
    wait_value(&c, 3, "big0", &value(0, 64 << 10));
    wait_value(&c, 3, &format!("big{}", KEYS - 1), &value(KEYS - 1, 64 << 10));
    wait_value(&c, 3, "n", "20");
    c.set(&[0, 1, 2, 3], "after", "join");
    wait_value(&c, 3, "after", "join");
    // The leader reports it with its peer address (learned after start).
    let port = format!("port={}", c.peer[3].port());
    wait_for(Duration::from_secs(10), "the new member's address in the leader's INFO", || {
        let Reply::Bulk(Some(info)) = c.client(c.leader(&[0, 1, 2, 3])).call(&["INFO", "replication"]) else { return None };
        String::from_utf8(info).unwrap().contains(&port).then_some(())
    });
    let status = assert_ok(&c.smr(&[0, 1, 2], &["status"]), "pmwire smr status");
    assert!(status.contains("voters 1, 2, 3, 4"), "four voters: {status}");

    // Leadership moves to the new member; it takes writes.
    assert_ok(&c.smr(&[0, 1, 2, 3], &["transfer", "--to", "4"]), "pmwire smr transfer");
    assert_eq!(c.leader(&[0, 1, 2, 3]), 3, "member 4 leads");
    let mut new_leader = c.client(3);
    assert_eq!(new_leader.call(&["INCR", "n"]), Reply::Int(21));
    assert_eq!(new_leader.call(&["GET", "big5"]), Reply::bulk(&value(5, 64 << 10)), "a linearizable read on the new member");
    // Its ROLE says it leads.
    let Reply::Array(Some(role)) = new_leader.call(&["ROLE"]) else { panic!("ROLE") };
    assert_eq!(role[0], Reply::bulk("master"));

    // A founder is removed and stopped; the other three serve writes.
    let gone = 1;
    let removed = assert_ok(&c.smr(&[0, 1, 2, 3], &["remove", "--id", &(gone + 1).to_string()]), "pmwire smr remove");
    assert!(removed.contains("removed"), "{removed}");
    let mut child = c.children[gone].take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let rest: Vec<usize> = (0..4).filter(|&i| i != gone).collect();
    let l2 = c.leader(&rest);
    assert_eq!(c.client(l2).call(&["SET", "probe", "x"]), ok());
    c.set(&rest, "after", "remove");
    for &i in &rest {
        wait_value(&c, i, "after", "remove");
    }
    let status = assert_ok(&c.smr(&[0, 1, 2, 3], &["status"]), "pmwire smr status");
    let voters: String = rest.iter().map(|i| (i + 1).to_string()).collect::<Vec<_>>().join(", ");
    assert!(status.contains(&format!("voters {voters}")), "three voters left: {status}");
}
