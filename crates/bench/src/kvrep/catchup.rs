//! Two measurements of `pmwire bench kv-replicated` (issue 26, item 7 and
//! its benchmark list): a new member's catch-up rate and failover time
//! under load.
//!
//! - [`catch_up`]: 3 members are loaded with `mib` MiB of keyspace (64 KiB
//!   values), a 4th is started with `--join` on fresh pools, a marker key
//!   is written, and `pmwire smr add --learner` adds it while a writer
//!   keeps writing small keys. Timed from the add's start: until the new
//!   member serves the marker (`READONLY` read of its applied state: it
//!   installed the snapshot, streamed in chunks), and until it serves a
//!   second marker written once the first was there (it then follows the
//!   log). The rate is the keyspace's key and value bytes over the first
//!   time, in MB/s (10^6 B).
//! - [`failover`]: 3 members under a closed-loop SET load (clients that
//!   move to the next member on an error); `kills` times: kill -9 of the
//!   leader, then a SET through each surviving member in turn until one is
//!   answered `+OK` (committed by the new leader); the killed member is
//!   restarted on its pool and the cluster settles before the next kill.
//!
//! Both run real processes on tmpfs pools; timings on a shared machine are
//! noisy and are reported as measured, with the method.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use pmwire_resp::client::Value;

use super::members::{info_text, info_u64, remove_pool, spawn_member, MemberArgs, Members, Resp, MEMBERS};
use crate::smr::peers::PutClient;
use crate::smr::suite::listen_ports;

/// The value size the catch-up's keyspace is written with.
pub const VALUE_BYTES: usize = 64 << 10;

/// What [`catch_up`] measured.
#[derive(Clone, Debug)]
pub struct CatchUp {
    /// Key and value bytes in the keyspace before the add.
    pub keyspace_bytes: u64,
    /// From the add's start until the new member served the marker
    /// written before it (snapshot installed).
    pub snapshot_s: f64,
    /// From the add's start until it served a marker written after that
    /// (snapshot, then the log).
    pub total_s: f64,
    /// Writes the background writer had acknowledged meanwhile.
    pub writes_during: u64,
    /// Raft terms the group moved through from the add to the end (0: the
    /// leader kept its term while it sent the snapshot).
    pub term_changes: u64,
    /// The longest gap between two turns of any first member's loop since
    /// it started (`max_turn_gap_us` of `INFO replication`), ms: how long
    /// taking or sending the snapshot held a loop.
    pub max_turn_gap_ms: f64,
    /// The longest compaction of any first member (`max_compact_us`), ms:
    /// adding a learner makes each take a whole snapshot.
    pub max_compact_ms: f64,
}

impl CatchUp {
    /// The keyspace's bytes over the time to the snapshot, MB/s.
    pub fn mb_per_s(&self) -> f64 {
        self.keyspace_bytes as f64 / 1e6 / self.snapshot_s
    }
}

/// Closed-loop SET clients that move to the next member on an error (a
/// follower's refusal, a dead member).
pub struct Load {
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl Load {
    /// `clients` threads writing `prefix:<n>` keys of 64 B values.
    pub fn start(resp: &[SocketAddr], clients: usize, prefix: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicU64::new(0));
        let threads = (0..clients)
            .map(|t| {
                let (stop, ops, resp, prefix) = (stop.clone(), ops.clone(), resp.to_vec(), prefix.to_string());
                std::thread::spawn(move || load_thread(t, &resp, &prefix, &stop, &ops))
            })
            .collect();
        Load { stop, ops, threads }
    }

    /// SETs acknowledged so far.
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }

    /// Stops the clients; the SETs acknowledged.
    pub fn stop(mut self) -> u64 {
        self.halt();
        self.ops()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.halt();
    }
}

fn load_thread(t: usize, resp: &[SocketAddr], prefix: &str, stop: &AtomicBool, ops: &AtomicU64) {
    let value = [b'l'; 64];
    let mut member = t % resp.len();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut c) = Resp::connect(resp[member]) else {
            member = (member + 1) % resp.len();
            std::thread::sleep(Duration::from_millis(2));
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            if c.put(format!("{prefix}:{t}:{}", n % 4096).as_bytes(), &value).is_err() {
                break;
            }
            ops.fetch_add(1, Ordering::Relaxed);
        }
        member = (member + 1) % resp.len();
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A member started with `--join` beside a running group; killed and its
/// pools removed when dropped.
struct Joiner {
    child: Option<Child>,
    pool: PathBuf,
    resp: SocketAddr,
    peer: SocketAddr,
}

impl Drop for Joiner {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        remove_pool(&self.pool);
    }
}

impl Joiner {
    fn start(members: &Members, id: usize, size: &str) -> Result<Joiner> {
        let ports = listen_ports(2)?;
        let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        let pool = PathBuf::from(format!("/dev/shm/pmwire-kvrep-join-{}-{id}.pool", std::process::id()));
        remove_pool(&pool);
        let mut j = Joiner { child: None, pool, resp: addr(ports[1]), peer: addr(ports[0]) };
        let cluster = format!("{},{id}={}", members.cluster(), j.peer);
        let args = MemberArgs { pool: &j.pool, size, resp: j.resp, cluster: &cluster, id, transport: &members.transport, extra: members.extra(), join: true };
        let child = spawn_member(Command::new(members.exe()), &args)?;
        j.child = Some(child);
        Ok(j)
    }
}

/// `pmwire smr --tls uring --peers <group> --secret-file F <args>`.
fn smr(members: &Members, args: &[&str]) -> Result<String> {
    let out = Command::new(members.exe())
        .args(["smr", "--tls", "uring", "--peers", members.cluster()])
        .args(crate::smr::links::secret_args()?)
        .args(args)
        .output()
        .context("run pmwire smr")?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        bail!("pmwire smr {}: {}", args.join(" "), text.trim());
    }
    Ok(text)
}

/// Waits until a `READONLY` read of `key` on `addr` answers `want`.
fn wait_served(addr: SocketAddr, key: &[u8], want: &[u8], within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    let mut c = Resp::connect(addr)?;
    c.command(&[b"READONLY"])?;
    while Instant::now() < deadline {
        if matches!(c.command(&[b"GET", key]), Ok(Value::Bulk(v)) if v == want) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    bail!("{} was not served by {addr} within {within:?}", String::from_utf8_lossy(key))
}

/// A connection to the group's leader that finds the leader again after
/// an election (a snapshot of a large keyspace stalls a member's loop; a
/// SET asked again is the same SET).
struct Leader<'a> {
    members: &'a Members,
    conn: Option<Resp>,
}

impl Leader<'_> {
    fn new(members: &Members) -> Result<Leader<'_>> {
        Ok(Leader { members, conn: None })
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.conn.is_none() {
                let leader = self.members.leader(Duration::from_secs(20))?;
                self.conn = Some(Resp::connect(self.members.resp[leader - 1])?);
            }
            match self.conn.as_mut().expect("connected").put(key, value) {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => {
                    self.conn = None;
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}

/// Sizes for a group holding `mib` MiB of keyspace: the keyspace pool and
/// the Raft pool (its two snapshot slots each hold the whole keyspace).
pub fn sizes(mib: u64) -> (String, String) {
    let keyspace = (3 * mib).max(256);
    let raft = 2 * (mib + mib / 4) + 128;
    (format!("{keyspace}M"), format!("{raft}M"))
}

/// A new member's catch-up from `mib` MiB of keyspace (module docs).
pub fn catch_up(exe: &std::path::Path, transport: &str, mib: u64) -> Result<CatchUp> {
    let (size, raft) = sizes(mib);
    let members = Members::start_with(exe, "catchup", &size, transport, &["--raft-size", &raft, "--raft-log-size", "64M"])?;
    let mut c = Leader::new(&members)?;
    let keys = (mib << 20) / VALUE_BYTES as u64;
    let mut keyspace_bytes = 0;
    for k in 0..keys {
        let key = format!("catchup:{k:08}");
        let mut value = vec![b'a' + (k % 26) as u8; VALUE_BYTES];
        value[..8].copy_from_slice(&k.to_le_bytes());
        c.put(key.as_bytes(), &value).with_context(|| format!("loading {key}"))?;
        keyspace_bytes += (key.len() + value.len()) as u64;
    }
    c.put(b"catchup:marker", b"before")?;
    let term_before = group_liveness(&members)?.term;
    let joiner = Joiner::start(&members, MEMBERS + 1, &size)?;
    let load = Load::start(&members.resp, 2, "catchup-load");
    let before = load.ops();
    let start = Instant::now();
    smr(&members, &["--timeout-s", "120", "add", "--id", &(MEMBERS + 1).to_string(), "--addr", &joiner.peer.to_string(), "--learner"])?;
    let within = Duration::from_secs(60 + mib);
    wait_served(joiner.resp, b"catchup:marker", b"before", within)?;
    let snapshot_s = start.elapsed().as_secs_f64();
    c.put(b"catchup:marker2", b"after")?;
    wait_served(joiner.resp, b"catchup:marker2", b"after", within)?;
    let total_s = start.elapsed().as_secs_f64();
    let writes_during = load.stop() - before;
    let after = group_liveness(&members)?;
    drop(joiner);
    Ok(CatchUp {
        keyspace_bytes,
        snapshot_s,
        total_s,
        writes_during,
        term_changes: after.term.saturating_sub(term_before),
        max_turn_gap_ms: after.turn_gap_us as f64 / 1e3,
        max_compact_ms: after.compact_us as f64 / 1e3,
    })
}

/// The highest `raft_term`, `max_turn_gap_us` and `max_compact_us` among
/// the group's members (`INFO replication`).
struct GroupLiveness {
    term: u64,
    turn_gap_us: u64,
    compact_us: u64,
}

fn group_liveness(members: &Members) -> Result<GroupLiveness> {
    let mut g = GroupLiveness { term: 0, turn_gap_us: 0, compact_us: 0 };
    for addr in &members.resp {
        let mut c = Resp::connect(*addr)?;
        let info = info_text(&mut c, b"replication")?;
        let field = |name: &str| info_u64(&info, name).with_context(|| format!("{addr}: INFO replication has no number {name}"));
        g.term = g.term.max(field("raft_term")?);
        g.turn_gap_us = g.turn_gap_us.max(field("max_turn_gap_us")?);
        g.compact_us = g.compact_us.max(field("max_compact_us")?);
    }
    Ok(g)
}

/// What [`failover`] measured.
#[derive(Clone, Debug)]
pub struct Failovers {
    /// Each kill's time to the next committed write, ms.
    pub ms: Vec<f64>,
    /// SETs the load had acknowledged by the end.
    pub load_ops: u64,
    /// Why fewer kills than asked were made, if so.
    pub stopped: Option<String>,
}

/// Restarts killed member `id` on its pool, trying again for a second
/// (its port may linger a moment after the kill).
fn restart(members: &mut Members, id: usize) -> Result<()> {
    let mut last = None;
    for _ in 0..5 {
        match members.restart(id) {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(last.expect("tried"))
}

/// `kills` failovers under load (module docs).
pub fn failover(exe: &std::path::Path, transport: &str, kills: usize) -> Result<Failovers> {
    let mut members = Members::start(exe, "failover", "256M", transport)?;
    members.leader(Duration::from_secs(20))?;
    let load = Load::start(&members.resp, 4, "failover-load");
    let mut ms = Vec::with_capacity(kills);
    for kill in 0..kills {
        let leader = confirmed_leader(&members)?;
        let others: Vec<usize> = (1..=MEMBERS).filter(|&i| i != leader).collect();
        members.kill(leader);
        let start = Instant::now();
        let took = 'probe: loop {
            if start.elapsed() > Duration::from_secs(20) {
                bail!("kill {kill}: no member took a write within 20 s of the leader's kill");
            }
            for &id in &others {
                if members.wait_writable(id, Duration::from_millis(20)).is_ok() {
                    break 'probe start.elapsed();
                }
            }
        };
        ms.push(took.as_secs_f64() * 1e3);
        if let Err(e) = restart(&mut members, leader) {
            // Its fixed port taken meanwhile (by another process on this
            // machine): the kills so far stand, the reason is reported.
            let stopped = Some(format!("after {} kills: member {leader} did not restart: {e:#}", ms.len()));
            return Ok(Failovers { ms, load_ops: load.stop(), stopped });
        }
        // Settle: the next kill waits for the restarted member to catch up
        // from its pool and the log (a kill while it still recovers leaves
        // no majority, and would time a restart, not a failover).
        rejoined(&members, leader, Duration::from_secs(20)).with_context(|| format!("after kill {kill}"))?;
    }
    Ok(Failovers { ms, load_ops: load.stop(), stopped: None })
}

/// Waits until restarted member `id` follows and has committed up to
/// what the leader had committed when the wait began.
fn rejoined(members: &Members, id: usize, within: Duration) -> Result<()> {
    let leader = members.leader(within)?;
    let commit = |id: usize| -> Result<(String, u64)> {
        let info = info_text(&mut Resp::connect(members.resp[id - 1])?, b"replication")?;
        let c = info_u64(&info, "raft_commit_index").with_context(|| format!("member {id}: INFO replication has no raft_commit_index"))?;
        Ok((info, c))
    };
    let (_, target) = commit(leader)?;
    let deadline = Instant::now() + within;
    let mut last = String::from("not asked");
    while Instant::now() < deadline {
        match commit(id) {
            Ok((info, c)) if c >= target && info.contains("role:slave") => return Ok(()),
            Ok((_, c)) => last = format!("commit index {c} of {target}"),
            Err(e) => last = format!("{e:#}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("restarted member {id} did not catch up within {within:?}: {last}")
}

/// The member that answers `ROLE` with `master` and takes a write (a
/// deposed leader may still say `master` for a moment: killing it would
/// time no failover).
fn confirmed_leader(members: &Members) -> Result<usize> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let leader = members.leader(Duration::from_secs(20))?;
        if members.wait_writable(leader, Duration::from_millis(200)).is_ok() && members.leader(Duration::from_secs(1))? == leader {
            return Ok(leader);
        }
        if Instant::now() > deadline {
            bail!("no member both says it leads and takes a write within 20 s");
        }
    }
}

/// The `p`-th percentile (0..=1, nearest rank) of `xs`.
pub fn percentile(xs: &[f64], p: f64) -> Option<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v.get(i).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_sizes() {
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 0.5), Some(2.0));
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 1.0), Some(3.0));
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(sizes(256), ("768M".to_string(), "768M".to_string()));
        assert_eq!(sizes(32), ("256M".to_string(), "208M".to_string()));
        let c = CatchUp { keyspace_bytes: 50_000_000, snapshot_s: 0.5, total_s: 0.6, writes_during: 1, term_changes: 0, max_turn_gap_ms: 0.0, max_compact_ms: 0.0 };
        assert_eq!(c.mb_per_s(), 100.0);
    }
}
