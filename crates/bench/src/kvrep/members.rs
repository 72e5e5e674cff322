//! A 3-member `pmwire kv --cluster` group as child processes, and the
//! blocking RESP client the suites drive it with.
//!
//! Members are started with the CLI of issue 26 (`pmwire kv --pool P --size
//! S --resp ADDR --http ADDR --cluster 1=A,2=B,3=C --id N --secret-file F
//! --ready-file R --peer-transport uring`). Peer and RESP ports are fixed
//! at start (below the ephemeral range, [`listen_ports`]), so a member
//! killed with SIGKILL restarts on its pool at the same addresses. Every
//! child gets SIGKILL when the thread that started it ends; all are killed
//! and their pools removed when the [`Members`] is dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use pmwire_resp::client::Value;

use crate::smr::events::Exchange;
use crate::smr::peers::redis_wait::{resp_reply, resp_step, RedisWaitClient};
use crate::smr::peers::PutClient;
use crate::smr::suite::listen_ports;
use crate::spawn::spawn_until_ready;

/// Members in a group.
pub const MEMBERS: usize = 3;

/// Where the members run, if not on loopback ports picked at start: their
/// peer and RESP addresses and the command each is started under (such as
/// `ip netns exec NS`).
#[derive(Clone, Debug)]
pub struct Placement {
    /// Peer addresses, by `id - 1`.
    pub peers: Vec<SocketAddr>,
    /// RESP addresses, by `id - 1`.
    pub resp: Vec<SocketAddr>,
    /// The command prefix of each member, by `id - 1`.
    pub prefix: Vec<Vec<String>>,
}

/// A running (or partly killed) group; member `id` is `children[id - 1]`.
pub struct Members {
    exe: PathBuf,
    prefix: Vec<Vec<String>>,
    children: Vec<Option<Child>>,
    /// Each member's RESP address, by `id - 1`.
    pub resp: Vec<SocketAddr>,
    cluster: String,
    pools: Vec<PathBuf>,
    /// The pool size given to each member.
    pub size: String,
    /// `--peer-transport`.
    pub transport: String,
    /// More arguments for every member (a Raft pool's size).
    extra: Vec<String>,
    /// The cluster's secret stays while its members may be restarted.
    _secret: crate::smr::links::SecretHold,
}

impl Drop for Members {
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for p in &self.pools {
            remove_pool(p);
        }
    }
}

/// Removes a member's pool and the files beside it: its lock and ready
/// files and its Raft pool (`<pool>.raft`) with its own lock.
pub(crate) fn remove_pool(pool: &Path) {
    let raft = PathBuf::from(format!("{}.raft", pool.display()));
    for f in [pool.to_path_buf(), pool.with_extension("lock"), pool.with_extension("ready"), raft.clone(), raft.with_extension("lock"), raft.with_extension("raft.lock")] {
        let _ = std::fs::remove_file(f);
    }
}

/// `1=A,2=B,3=C` for `--cluster`.
pub fn cluster_arg(peers: &[SocketAddr]) -> String {
    peers.iter().enumerate().map(|(i, a)| format!("{}={a}", i + 1)).collect::<Vec<_>>().join(",")
}

/// What a `pmwire kv --cluster` member is started with.
pub(super) struct MemberArgs<'a> {
    pub pool: &'a Path,
    pub size: &'a str,
    pub resp: SocketAddr,
    /// `--cluster`'s value.
    pub cluster: &'a str,
    pub id: usize,
    pub transport: &'a str,
    pub extra: &'a [String],
    /// A new member (`--join`).
    pub join: bool,
}

/// Spawns `cmd` (the `pmwire` binary, or a prefix that runs it) as the
/// member `m`, killed if the bench dies, and waits until it serves.
pub(super) fn spawn_member(mut cmd: Command, m: &MemberArgs<'_>) -> Result<Child> {
    let ready = m.pool.with_extension("ready");
    cmd.arg("kv").arg("--pool").arg(m.pool).args(["--size", m.size]);
    cmd.args(["--resp", &m.resp.to_string(), "--http", "127.0.0.1:0"]);
    cmd.args(["--cluster", m.cluster, "--id", &m.id.to_string(), "--peer-transport", m.transport]);
    if m.join {
        cmd.arg("--join");
    }
    cmd.args(crate::smr::links::secret_args()?).arg("--ready-file").arg(&ready);
    cmd.args(m.extra);
    cmd.stdout(Stdio::null()).stderr(Stdio::inherit());
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let parse = |text: &str| Ok(crate::kv::child::address(text, "resp").map(drop));
    let what = format!("pmwire kv --cluster{} member {}", if m.join { " --join" } else { "" }, m.id);
    let (child, ()) = spawn_until_ready(cmd, &what, &ready, parse)?;
    Ok(child)
}

impl Members {
    /// Starts 3 members on fresh pools in `/dev/shm` named after `tag`.
    pub fn start(exe: &Path, tag: &str, size: &str, transport: &str) -> Result<Members> {
        Members::start_full(exe, tag, size, transport, None, &[])
    }

    /// [`Members::start`] with `extra` arguments for every member (as
    /// `--raft-size 1G`).
    pub fn start_with(exe: &Path, tag: &str, size: &str, transport: &str, extra: &[&str]) -> Result<Members> {
        Members::start_full(exe, tag, size, transport, None, extra)
    }

    /// [`Members::start`], at `placement` if given.
    pub fn start_placed(exe: &Path, tag: &str, size: &str, transport: &str, placement: Option<&Placement>) -> Result<Members> {
        Members::start_full(exe, tag, size, transport, placement, &[])
    }

    /// [`Members::start`], at `placement` if given, with `extra` arguments
    /// for every member.
    pub fn start_full(exe: &Path, tag: &str, size: &str, transport: &str, placement: Option<&Placement>, extra: &[&str]) -> Result<Members> {
        // Ports are picked by probing: two groups started at once by one
        // process would pick the same ones. Held until every member listens.
        static PICKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _picking = PICKING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let placement = match placement {
            Some(p) => p.clone(),
            None => {
                let ports = listen_ports(2 * MEMBERS)?;
                let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
                Placement { peers: ports[..MEMBERS].iter().map(|&p| addr(p)).collect(), resp: ports[MEMBERS..].iter().map(|&p| addr(p)).collect(), prefix: vec![Vec::new(); MEMBERS] }
            }
        };
        assert_eq!(placement.peers.len(), MEMBERS, "a peer address per member");
        assert_eq!(placement.resp.len(), MEMBERS, "a RESP address per member");
        let peers = placement.peers;
        let pools = (1..=MEMBERS).map(|id| PathBuf::from(format!("/dev/shm/pmwire-kvrep-{tag}-{}-{id}.pool", std::process::id()))).collect::<Vec<_>>();
        for p in &pools {
            remove_pool(p);
        }
        let mut members = Members {
            exe: exe.to_path_buf(),
            prefix: placement.prefix,
            children: (0..MEMBERS).map(|_| None).collect(),
            resp: placement.resp,
            cluster: cluster_arg(&peers),
            pools,
            size: size.to_string(),
            transport: transport.to_string(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            _secret: crate::smr::links::hold_secret(),
        };
        for id in 1..=MEMBERS {
            members.restart(id)?;
        }
        Ok(members)
    }

    /// Starts member `id` on its pool as it is (a fresh one formats it).
    pub fn restart(&mut self, id: usize) -> Result<()> {
        assert!((1..=MEMBERS).contains(&id), "member id {id}");
        assert!(self.children[id - 1].is_none(), "member {id} is running");
        let pool = &self.pools[id - 1];
        let cmd = match self.prefix[id - 1].split_first() {
            Some((tool, args)) => {
                let mut cmd = Command::new(tool);
                cmd.args(args).arg(&self.exe);
                cmd
            }
            None => Command::new(&self.exe),
        };
        let args = MemberArgs { pool, size: &self.size, resp: self.resp[id - 1], cluster: &self.cluster, id, transport: &self.transport, extra: &self.extra, join: false };
        let child = spawn_member(cmd, &args)?;
        self.children[id - 1] = Some(child);
        Ok(())
    }

    /// `--cluster`'s value: every member's peer address (`1=A,2=B,3=C`).
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The `pmwire` binary the members run.
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// The extra arguments every member got.
    pub fn extra(&self) -> &[String] {
        &self.extra
    }

    /// SIGKILLs member `id` and reaps it.
    pub fn kill(&mut self, id: usize) {
        if let Some(mut c) = self.children[id - 1].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Member `id`'s process id, if it runs.
    pub fn pid(&self, id: usize) -> Option<u32> {
        self.children[id - 1].as_ref().map(Child::id)
    }

    /// The member whose `ROLE` answers `master`, asking every running
    /// member until `within` has passed.
    pub fn leader(&self, within: Duration) -> Result<usize> {
        let deadline = Instant::now() + within;
        let mut last = String::from("no member answered ROLE");
        while Instant::now() < deadline {
            for id in 1..=MEMBERS {
                if self.children[id - 1].is_none() {
                    continue;
                }
                match role(self.resp[id - 1]) {
                    Ok(r) if r == "master" => return Ok(id),
                    Ok(r) => last = format!("member {id} is {r}"),
                    Err(e) => last = format!("member {id}: {e:#}"),
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("no leader within {within:?}: {last}")
    }

    /// Waits until a SET through member `id` is answered `+OK`.
    pub fn wait_writable(&self, id: usize, within: Duration) -> Result<Duration> {
        let start = Instant::now();
        let mut last = anyhow!("never tried");
        while start.elapsed() < within {
            match Resp::connect(self.resp[id - 1]).and_then(|mut c| c.put(b"pmwire-kvrep-probe", b"1")) {
                Ok(()) => return Ok(start.elapsed()),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(last.context(format!("member {id} took no write within {within:?}")))
    }
}

/// The first element of a `ROLE` reply (`master`, `slave`, ...).
pub fn role(addr: SocketAddr) -> Result<String> {
    let mut c = Resp::connect(addr)?;
    role_of(&c.command(&[b"ROLE"])?)
}

/// `ROLE`'s role name from its reply.
pub fn role_of(reply: &Value) -> Result<String> {
    match reply {
        Value::Array(items) => match items.first() {
            Some(Value::Bulk(b) | Value::Simple(b)) => Ok(String::from_utf8_lossy(b).into_owned()),
            other => bail!("ROLE answered {other:?} first"),
        },
        other => bail!("ROLE answered {other:?}"),
    }
}

/// A blocking RESP connection (one request outstanding); `put` is
/// `SET key value`, and with `wait`, `WAIT 2 0` after it (Redis's
/// replicated write).
pub struct Resp {
    inner: RedisWaitClient,
    /// Follow every SET with `WAIT 2 0`.
    pub wait: bool,
}

impl Resp {
    /// Connects to `addr` (loopback), every read and write bounded.
    pub fn connect(addr: SocketAddr) -> Result<Resp> {
        if !addr.ip().is_loopback() {
            return Resp::connect_within(addr, Duration::from_secs(5));
        }
        Ok(Resp { inner: RedisWaitClient::connect(addr.port()).with_context(|| format!("RESP at {addr}"))?, wait: false })
    }

    /// Connects to `addr` within `timeout`, which bounds every read and write too.
    pub fn connect_within(addr: SocketAddr, timeout: Duration) -> Result<Resp> {
        Ok(Resp { inner: RedisWaitClient::connect_to(addr, timeout).with_context(|| format!("RESP at {addr}"))?, wait: false })
    }

    /// One command; an error reply is an error.
    pub fn command(&mut self, args: &[&[u8]]) -> Result<Value> {
        self.inner.command(args)
    }

    /// One command; an error reply is [`Value::Error`].
    pub fn reply(&mut self, args: &[&[u8]]) -> Result<Value> {
        self.inner.reply(args)
    }

    /// `GET key`, checking that a value came back.
    pub fn get(&mut self, key: &[u8]) -> Result<Vec<u8>> {
        match self.command(&[b"GET", key])? {
            Value::Bulk(v) => Ok(v),
            other => bail!("GET answered {other:?}"),
        }
    }
}

impl PutClient for Resp {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        if self.wait {
            return self.inner.put(key, value);
        }
        match self.command(&[b"SET", key, value])? {
            Value::Simple(ok) if ok == b"OK" => Ok(()),
            other => bail!("SET answered {other:?}"),
        }
    }

    fn exchange(&mut self) -> Option<&mut dyn Exchange> {
        Some(self)
    }
}

/// `SET`, and `WAIT 2 0` after it when `wait`, as `put`.
impl Exchange for Resp {
    fn stream(&self) -> &std::net::TcpStream {
        self.inner.stream()
    }

    fn steps(&self) -> usize {
        1 + usize::from(self.wait)
    }

    fn encode(&mut self, step: usize, key: &[u8], value: &[u8], out: &mut Vec<u8>) {
        resp_step(step, key, value, out);
    }

    fn reply(&mut self, step: usize, buf: &[u8]) -> Result<Option<usize>> {
        resp_reply(step, buf)
    }
}

/// `INFO copies`' count of value bytes copied on writes' paths
/// (`copy_value_bytes_path`: receive, entry, log, apply), if it has one.
pub fn copied_bytes(info: &str) -> Option<u64> {
    info_u64(info, "copy_value_bytes_path")
}

/// Field `name` of `INFO` text (`name:value` lines), as a number.
pub fn info_u64(info: &str, name: &str) -> Option<u64> {
    info_field(info, name)?.parse().ok()
}

/// Field `name` of `INFO` text (`name:value` lines).
pub fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(':')).map(str::trim)
}

/// Each member's role and Raft counters from `INFO replication`, or why
/// the member could not say: what a target that did not run on the
/// members reports beside its error, so that a lost leadership or a
/// stalled member shows which and how.
pub fn replication_summary(resp: &[SocketAddr]) -> String {
    const FIELDS: [&str; 8] = ["role", "raft_term", "elections_started", "max_turn_gap_us", "max_leader_silence_us", "raft_unsent", "raft_sends_held", "max_election_elapsed_ticks"];
    let one = |addr: SocketAddr| -> Result<String> {
        let mut c = Resp::connect(addr)?;
        let text = info_text(&mut c, b"replication")?;
        Ok(FIELDS.iter().map(|f| format!("{f}={}", info_field(&text, f).unwrap_or("-"))).collect::<Vec<_>>().join(" "))
    };
    resp.iter()
        .enumerate()
        .map(|(i, &addr)| format!("member {}: {}", i + 1, one(addr).unwrap_or_else(|e| format!("no INFO: {e:#}"))))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The text of `INFO section` on `c`.
pub fn info_text(c: &mut Resp, section: &[u8]) -> Result<String> {
    match c.command(&[b"INFO", section])? {
        Value::Bulk(b) | Value::Verbatim(_, b) => Ok(String::from_utf8_lossy(&b).into_owned()),
        other => bail!("INFO answered {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_arg_numbers_members_from_one() {
        let a: SocketAddr = "127.0.0.1:7001".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:7002".parse().unwrap();
        assert_eq!(cluster_arg(&[a, b]), "1=127.0.0.1:7001,2=127.0.0.1:7002");
    }

    #[test]
    fn role_reads_the_first_element() {
        let reply = Value::Array(vec![Value::Bulk(b"master".to_vec()), Value::Integer(3)]);
        assert_eq!(role_of(&reply).unwrap(), "master");
        assert!(role_of(&Value::Integer(1)).is_err());
        assert!(role_of(&Value::Array(vec![])).is_err());
    }

    #[test]
    fn copied_bytes_reads_the_path_counter_or_says_none() {
        let info = "# Copies\r\ncopy_value_bytes_sent:10\r\ncopy_value_bytes_path:5\r\n";
        assert_eq!(copied_bytes(info), Some(5));
        assert_eq!(copied_bytes("# Stats\r\ntotal_commands_processed:4\r\n"), None);
        assert_eq!(copied_bytes("copy_value_bytes_path:x\r\n"), None, "a field that is not a number is not a count");
    }

    #[test]
    fn the_replication_summary_names_each_members_fields_or_why_not() {
        use std::io::{Read, Write};
        // One member answering INFO (without a held-sends field), one gone.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let answering = listener.local_addr().unwrap();
        let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut request = [0u8; 256];
            let _ = s.read(&mut request).unwrap();
            let text = "# Replication\r\nrole:master\r\nraft_term:3\r\nraft_unsent:7\r\n";
            s.write_all(format!("${}\r\n{text}\r\n", text.len()).as_bytes()).unwrap();
        });
        let summary = replication_summary(&[answering, gone]);
        server.join().unwrap();
        let (first, second) = summary.split_once("; ").expect("one part per member");
        assert!(first.starts_with("member 1: role=master raft_term=3 "), "{summary}");
        assert!(first.contains("raft_unsent=7") && first.contains("raft_sends_held=-"), "a missing field is shown as -: {summary}");
        assert!(second.starts_with("member 2: no INFO: "), "{summary}");
    }
}
