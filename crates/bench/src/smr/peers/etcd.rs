//! An etcd cluster of [`MEMBERS`] `etcd` children on loopback, and a
//! keep-alive client of its JSON gateway (`POST /v3/kv/put`).
//!
//! Every member has its own data directory under one fresh directory of
//! the parent it is given (tmpfs or disk: the thing compared), its own
//! free peer and client ports, and its log next to its data. The members
//! are killed, and the directory removed, when the cluster is dropped,
//! also when starting fails half-way.

use anyhow::{anyhow, bail, Context, Result};
use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::http::{append_post, append_put_body, check_put_reply, parse_response, status_is_leader, MAX_BODY_BYTES};
use super::{PutClient, IO_TIMEOUT};
use crate::smr::events::Exchange;

/// Members of a cluster.
pub const MEMBERS: usize = 3;

/// How long a cluster may take to be healthy with a leader.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// `etcd --version`'s version (`etcd 3.4.23`), or why it cannot run.
pub fn version(exe: &Path) -> Result<String, String> {
    let out = Command::new(exe).arg("--version").output();
    let out = out.map_err(|e| format!("{} not found ({e}); scripts/setup installs etcd-server", exe.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.lines().find_map(|l| l.strip_prefix("etcd Version: "));
    version.map(|v| format!("etcd {}", v.trim())).ok_or_else(|| format!("unexpected `etcd --version`: {text}"))
}

/// A running cluster, killed on drop.
pub struct EtcdCluster {
    members: Vec<Child>,
    client_ports: Vec<u16>,
    dir: PathBuf,
    leader: usize,
}

impl EtcdCluster {
    /// Starts [`MEMBERS`] members of `exe` with their data under a fresh
    /// directory of `parent` named after `label`, and waits until every
    /// member is healthy and one is leader.
    pub fn start(exe: &Path, parent: &Path, label: &str) -> Result<EtcdCluster> {
        let dir = parent.join(format!("pmwire-etcd-{label}-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let ports = crate::ports::listen_ports(2 * MEMBERS)?;
        let (peer_ports, client_ports) = ports.split_at(MEMBERS);
        let url = |port: u16| format!("http://127.0.0.1:{port}");
        let initial: Vec<String> = peer_ports.iter().enumerate().map(|(i, &p)| format!("m{i}={}", url(p))).collect();
        let mut cluster = EtcdCluster { members: Vec::new(), client_ports: client_ports.to_vec(), dir, leader: 0 };
        for i in 0..MEMBERS {
            let log = File::create(cluster.log_path(i)).context("creating an etcd log")?;
            let mut command = Command::new(exe);
            command
                .args(["--name", &format!("m{i}")])
                .arg("--data-dir")
                .arg(cluster.dir.join(format!("m{i}")))
                .args(["--listen-peer-urls", &url(peer_ports[i]), "--initial-advertise-peer-urls", &url(peer_ports[i])])
                .args(["--listen-client-urls", &url(client_ports[i]), "--advertise-client-urls", &url(client_ports[i])])
                .args(["--initial-cluster", &initial.join(","), "--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", &format!("pmwire-{label}-{}", std::process::id())])
                .args(["--logger", "zap", "--log-outputs", "stderr"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log);
            cluster.members.push(command.spawn().with_context(|| format!("starting {}", exe.display()))?);
        }
        cluster.leader = cluster.wait_ready()?;
        Ok(cluster)
    }

    fn log_path(&self, member: usize) -> PathBuf {
        self.dir.join(format!("m{member}.log"))
    }

    /// Waits until every member answers `/health` and one says it leads;
    /// returns that member.
    fn wait_ready(&mut self) -> Result<usize> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            for (i, child) in self.members.iter_mut().enumerate() {
                if let Some(status) = child.try_wait()? {
                    let log = std::fs::read_to_string(self.dir.join(format!("m{i}.log"))).unwrap_or_default();
                    bail!("etcd member m{i} exited at start ({status}): {}", log.lines().last().unwrap_or(""));
                }
            }
            if let Ok(Some(leader)) = self.find_leader() {
                return Ok(leader);
            }
            if Instant::now() > deadline {
                bail!("etcd cluster in {} was not healthy with a leader within {READY_WITHIN:?}", self.dir.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The member that leads, if all are healthy and one does.
    fn find_leader(&self) -> Result<Option<usize>> {
        let mut leader = None;
        for (i, &port) in self.client_ports.iter().enumerate() {
            let mut client = EtcdClient::connect(port)?;
            client.get_health()?;
            if client.post("/v3/maintenance/status", b"{}", status_is_leader)? {
                leader = Some(i);
            }
        }
        Ok(leader)
    }

    /// The leader's client port (found at start; a PUT sent to a member
    /// that no longer leads is forwarded).
    pub fn leader_port(&self) -> u16 {
        self.client_ports[self.leader]
    }

    /// The directory holding the members' data.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for child in &mut self.members {
            let _ = child.kill();
        }
        for child in &mut self.members {
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}


/// One keep-alive connection to a member's client URL.
pub struct EtcdClient {
    stream: TcpStream,
    host: String,
    request: Vec<u8>,
    body: String,
    received: Vec<u8>,
}

impl EtcdClient {
    /// Connects to `127.0.0.1:port`, with [`IO_TIMEOUT`] on every read and write.
    pub fn connect(port: u16) -> Result<EtcdClient> {
        let stream = TcpStream::connect(("127.0.0.1", port)).with_context(|| format!("connecting to etcd on {port}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(EtcdClient {
            stream,
            host: format!("127.0.0.1:{port}"),
            request: Vec::with_capacity(512),
            body: String::with_capacity(256),
            received: Vec::with_capacity(4096),
        })
    }

    /// `GET /health`: an error unless it says `"health":"true"`.
    fn get_health(&mut self) -> Result<()> {
        self.request.clear();
        write!(self.request, "GET /health HTTP/1.1\r\nHost: {}\r\n\r\n", self.host).expect("writing to a Vec");
        self.exchange(|status, body| {
            let json: serde_json::Value = serde_json::from_slice(body).context("/health body")?;
            match (status, json.get("health").and_then(|h| h.as_str())) {
                (200, Some("true")) => Ok(()),
                _ => Err(anyhow!("member not healthy: HTTP {status} {json}")),
            }
        })
    }

    /// `POST path` with a JSON `body`; `check` judges the reply.
    pub fn post<T>(&mut self, path: &str, body: &[u8], check: impl FnOnce(u16, &[u8]) -> Result<T>) -> Result<T> {
        self.request.clear();
        append_post(&self.host, path, body, &mut self.request);
        self.exchange(check)
    }

    /// Sends the request built, reads one whole response, hands it to `check`.
    fn exchange<T>(&mut self, check: impl FnOnce(u16, &[u8]) -> Result<T>) -> Result<T> {
        self.stream.write_all(&self.request).context("sending to etcd")?;
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(response) = parse_response(&self.received)? {
                let (status, len) = (response.status, response.len);
                let result = check(status, response.body);
                self.received.drain(..len);
                return result;
            }
            if self.received.len() > MAX_BODY_BYTES + 64 * 1024 {
                bail!("etcd response over {} bytes", self.received.len());
            }
            let n = self.stream.read(&mut chunk).context("reading from etcd")?;
            if n == 0 {
                bail!("etcd closed the connection mid-response");
            }
            self.received.extend_from_slice(&chunk[..n]);
        }
    }
}

impl PutClient for EtcdClient {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut body = std::mem::take(&mut self.body);
        body.clear();
        append_put_body(key, value, &mut body);
        let result = self.post("/v3/kv/put", body.as_bytes(), check_put_reply);
        self.body = body;
        result.map(|_revision| ())
    }

    fn exchange(&mut self) -> Option<&mut dyn Exchange> {
        Some(self)
    }
}

/// `POST /v3/kv/put` and its response, as `put`.
impl Exchange for EtcdClient {
    fn stream(&self) -> &TcpStream {
        &self.stream
    }

    fn encode(&mut self, _step: usize, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
        self.body.clear();
        append_put_body(key, value, &mut self.body);
        append_post(&self.host, "/v3/kv/put", self.body.as_bytes(), out);
    }

    fn reply(&mut self, _step: usize, buf: &[u8]) -> Result<Option<usize>> {
        let Some(response) = parse_response(buf)? else { return Ok(None) };
        check_put_reply(response.status, response.body)?;
        Ok(Some(response.len))
    }
}
