//! Three real `pmwire kv --cluster` members on loopback, each with its
//! pools in a temporary directory, a `--secret-file` and a ready file: the
//! harness of the integration tests that run a cluster (`kv_cluster.rs`,
//! `kv_cluster_diff.rs`). A test module declares `mod resp;` beside it.

#![allow(dead_code)]

use crate::resp::{free_port, Client, Reply};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Cluster {
    dir: tempfile::TempDir,
    /// Extra arguments of every member.
    extra: Vec<String>,
    /// `ID=ADDR,...`: every member's peer address.
    pub peers: String,
    pub resp: Vec<SocketAddr>,
    pub http: Vec<SocketAddr>,
    pub children: Vec<Option<Child>>,
    /// Each member's keyspace pool size (`--size`).
    size: &'static str,
    /// A member's own `--size`, in place of `size`.
    sizes: [Option<&'static str>; 3],
    /// Each member's Raft pool and Raft log sizes (`--raft-size`, `--raft-log-size`).
    raft: (&'static str, &'static str),
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            print_log_tails(self.dir.path(), self.children.len(), 40);
        }
    }
}

/// Prints the last `lines` lines of each member's log (`DIR/log{i}`), for
/// a failing test's report (run with PMWIRE_RAFT_LOG=info for raft-rs's
/// elections and step-downs).
pub fn print_log_tails(dir: &Path, members: usize, lines: usize) {
    for i in 0..members {
        let log = std::fs::read_to_string(dir.join(format!("log{i}"))).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(lines).collect();
        eprintln!("--- member {} log (last {} lines) ---", i + 1, tail.len());
        for line in tail.iter().rev() {
            eprintln!("{line}");
        }
    }
}

impl Cluster {
    pub fn start() -> Cluster {
        Cluster::start_full("64M", tempfile::tempdir().unwrap(), |_| Vec::new())
    }

    /// A cluster whose members also get `extra(resp addresses)`.
    pub fn start_with(extra: impl Fn(&[SocketAddr]) -> Vec<String>) -> Cluster {
        Cluster::start_full("64M", tempfile::tempdir().unwrap(), extra)
    }

    pub fn start_sized(size: &'static str, dir: tempfile::TempDir) -> Cluster {
        Cluster::start_full(size, dir, |_| Vec::new())
    }

    pub fn start_full(size: &'static str, dir: tempfile::TempDir, extra: impl Fn(&[SocketAddr]) -> Vec<String>) -> Cluster {
        Cluster::start_raft_sized(size, ("64M", "16M"), dir, extra)
    }

    /// A cluster whose members' Raft pools and logs are `raft` (`--raft-size`, `--raft-log-size`).
    pub fn start_raft_sized(size: &'static str, raft: (&'static str, &'static str), dir: tempfile::TempDir, extra: impl Fn(&[SocketAddr]) -> Vec<String>) -> Cluster {
        let peers = (1..=3).map(|i| format!("{i}=127.0.0.1:{}", free_port())).collect::<Vec<_>>().join(",");
        let resp: Vec<SocketAddr> = (0..3).map(|_| SocketAddr::from(([127, 0, 0, 1], free_port()))).collect();
        let http = (0..3).map(|_| SocketAddr::from(([127, 0, 0, 1], free_port()))).collect();
        let extra = extra(&resp);
        let mut c = Cluster { dir, extra, peers, resp, http, children: vec![None, None, None], size, sizes: [None; 3], raft };
        for i in 0..3 {
            c.spawn(i);
        }
        for i in 0..3 {
            c.wait_ready(i);
        }
        c
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn spawn(&mut self, i: usize) {
        let ready = self.path(&format!("ready{i}"));
        let _ = std::fs::remove_file(&ready);
        let log = std::fs::File::create(self.path(&format!("log{i}"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_pmwire"))
            .args(["kv", "--size", self.sizes[i].unwrap_or(self.size), "--raft-size", self.raft.0, "--raft-log-size", self.raft.1, "--create-secret"])
            .arg("--pool")
            .arg(self.path(&format!("pool{i}")))
            .args(["--resp", &self.resp[i].to_string(), "--http", &self.http[i].to_string()])
            .args(["--cluster", &self.peers, "--id", &(i + 1).to_string()])
            .arg("--secret-file")
            .arg(self.path("secret"))
            .arg("--ready-file")
            .arg(&ready)
            .args(&self.extra)
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

    /// Kills member `i`, removes its pools and starts it again on fresh
    /// ones of `size` (not waiting for it to be ready).
    pub fn respawn_fresh(&mut self, i: usize, size: &'static str) {
        self.kill(i);
        for entry in std::fs::read_dir(self.dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().unwrap().to_string_lossy().starts_with(&format!("pool{i}")) {
                std::fs::remove_file(&path).unwrap();
            }
        }
        self.sizes[i] = Some(size);
        self.spawn(i);
    }

    pub fn wait_ready(&mut self, i: usize) {
        let ready = self.path(&format!("ready{i}"));
        let log = self.path(&format!("log{i}"));
        wait_ready_file(self.children[i].as_mut().unwrap(), i, &ready, &log);
    }

    pub fn client(&self, i: usize) -> Client {
        Client::connect(self.resp[i])
    }

    /// The index of the member that says it leads (and whose followers say so too).
    pub fn leader(&self, among: &[usize]) -> usize {
        wait_for(Duration::from_secs(20), "a leader", || {
            among.iter().copied().find(|&i| {
                let mut c = self.client(i);
                matches!(c.call(&["ROLE"]), Reply::Array(Some(a)) if a[0] == Reply::bulk("master"))
                    && c.call(&["SET", "leader-probe", "1"]) == Reply::Simple("OK".into())
            })
        })
    }

    pub fn kill(&mut self, i: usize) {
        let mut c = self.children[i].take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    }

    pub fn signal(&self, i: usize, sig: &str) {
        let pid = self.children[i].as_ref().unwrap().id();
        let ok = Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success();
        assert!(ok, "kill {sig} {pid}");
    }
}

/// Waits (20 s at most) for member `i`'s ready file; a member that exits
/// first fails the test with its log.
pub fn wait_ready_file(child: &mut Child, i: usize, ready: &Path, log: &Path) {
    wait_for(Duration::from_secs(20), "a member's ready file", || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("member {} exited ({status}): {}", i + 1, std::fs::read_to_string(log).unwrap_or_default());
        }
        ready_exists(ready).then_some(())
    });
}

pub fn ready_exists(p: &Path) -> bool {
    std::fs::read_to_string(p).map(|s| s.contains("resp")).unwrap_or(false)
}

pub fn wait_for<T>(bound: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < bound, "no {what} within {bound:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
