//! The peers of `pmwire bench smr` (issue 12): the replicated stores users
//! compare a replicated store against, started and driven in the same
//! invocation as ours.
//!
//! - [`Peer::EtcdTmpfs`], [`Peer::EtcdDisk`]: etcd, 3 members on loopback,
//!   each member's data directory on tmpfs or on disk ([`etcd`]); PUTs go
//!   to the leader through the JSON gateway ([`http`]).
//! - [`Peer::RedisWait`]: a Redis primary and 2 replicas, AOF with
//!   `appendfsync always` on all three, data on tmpfs, every `SET`
//!   followed by `WAIT 2 0` ([`redis_wait`]).
//!
//! Workload, the same for every peer: 16 B keys, 64 B values, each client
//! a closed loop with one PUT outstanding on its own connection. A latency
//! run (1 client, an untimed warm-up, then [`Plan::latency_puts`] timed
//! PUTs: p50/p99/p99.9) and a throughput sweep (1, 4, 16, 64 clients as
//! threads, an untimed warm-up, then [`Plan::seconds_per_point`]: PUTs/s).
//! Each peer gets a fresh cluster, dropped (every child killed) before the
//! next starts. Nothing is pinned; every row records the machine's CPU
//! count, since clients and members share the cores.
//!
//! A peer that cannot run (binary missing, cluster not ready, an error
//! mid-run) yields a [`Skipped`] with the reason, never a number.

pub mod etcd;
pub mod http;
pub mod redis_wait;

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::remote::common::latency_result;
use crate::schema::{BenchResult, Skipped};

/// The bench name of latency rows.
pub const LATENCY_BENCH: &str = "smr_latency";
/// The bench name of throughput rows.
pub const THROUGHPUT_BENCH: &str = "smr_throughput";
/// Key bytes.
pub const KEY_BYTES: usize = 16;
/// Value bytes (each row's `size_bytes`).
pub const VALUE_BYTES: usize = 64;
/// Distinct keys per client: keys cycle, so the stores stay small.
const KEYS_PER_CLIENT: u64 = 10_000;
/// Every read and write on a client's socket; bounds `WAIT 2 0` too.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A replicated store measured beside ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// etcd, 3 members, data directories on tmpfs.
    EtcdTmpfs,
    /// etcd, 3 members, data directories on disk.
    EtcdDisk,
    /// Redis primary + 2 replicas, AOF always, `SET` + `WAIT 2 0`.
    RedisWait,
}

impl Peer {
    /// Every peer, in the order they run.
    pub const ALL: [Peer; 3] = [Peer::EtcdTmpfs, Peer::EtcdDisk, Peer::RedisWait];

    /// The variant name in results.
    pub fn name(self) -> &'static str {
        match self {
            Peer::EtcdTmpfs => "etcd_3members_tmpfs",
            Peer::EtcdDisk => "etcd_3members_disk",
            Peer::RedisWait => "redis_2replicas_aof_always_wait",
        }
    }
}

/// Which peers run, where their files go, and how long.
#[derive(Clone, Debug)]
pub struct PeerOptions {
    /// Quick: [`Plan::quick`]; otherwise [`Plan::full`].
    pub quick: bool,
    /// The peers to run.
    pub peers: Vec<Peer>,
    /// The tmpfs directory (etcd on tmpfs, the Redis servers).
    pub tmpfs_dir: PathBuf,
    /// The on-disk directory (etcd on disk).
    pub disk_dir: PathBuf,
    /// The `etcd` executable.
    pub etcd: PathBuf,
}

impl Default for PeerOptions {
    /// Every peer, quick, `/dev/shm` and `/var/tmp`, `etcd` from the PATH.
    fn default() -> PeerOptions {
        PeerOptions {
            quick: true,
            peers: Peer::ALL.to_vec(),
            tmpfs_dir: "/dev/shm".into(),
            disk_dir: "/var/tmp".into(),
            etcd: "etcd".into(),
        }
    }
}

/// How much each peer runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Untimed PUTs before the latency run.
    pub warmup_puts: u64,
    /// Timed PUTs of the latency run.
    pub latency_puts: u64,
    /// Client counts of the throughput sweep.
    pub clients: Vec<usize>,
    /// Untimed time at the start of each throughput point.
    pub warmup_per_point: Duration,
    /// Timed time of each throughput point.
    pub seconds_per_point: Duration,
}

impl Plan {
    /// 3,000 PUTs for latency, 1 s per throughput point.
    pub fn quick() -> Plan {
        Plan {
            warmup_puts: 200,
            latency_puts: 3_000,
            clients: vec![1, 4, 16, 64],
            warmup_per_point: Duration::from_millis(200),
            seconds_per_point: Duration::from_secs(1),
        }
    }

    /// 100,000 PUTs for latency, 5 s per throughput point.
    pub fn full() -> Plan {
        Plan {
            warmup_puts: 5_000,
            latency_puts: 100_000,
            clients: vec![1, 4, 16, 64],
            warmup_per_point: Duration::from_secs(1),
            seconds_per_point: Duration::from_secs(5),
        }
    }
}

/// One connection to a peer that PUTs with one request outstanding; a
/// PUT returns once the peer acknowledged it as replicated.
pub trait PutClient {
    /// Writes `value` under `key`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;

    /// The client as request and reply bytes over TCP, if it is one: then
    /// one thread drives all of a throughput point's clients
    /// ([`super::events`]).
    fn exchange(&mut self) -> Option<&mut dyn super::events::Exchange> {
        None
    }
}

/// Runs `options.peers` one after the other: their rows, and a
/// [`Skipped`] for every peer or point that could not run.
pub fn run_peers(options: &PeerOptions) -> (Vec<BenchResult>, Vec<Skipped>) {
    let plan = if options.quick { Plan::quick() } else { Plan::full() };
    let (mut results, mut skipped) = (Vec::new(), Vec::new());
    for &peer in &options.peers {
        let (rows, skips) = run_peer(peer, &plan, options);
        results.extend(rows);
        skipped.extend(skips);
    }
    (results, skipped)
}

/// Starts `peer`'s cluster, runs `plan` against it, drops it.
pub fn run_peer(peer: Peer, plan: &Plan, options: &PeerOptions) -> (Vec<BenchResult>, Vec<Skipped>) {
    let skip_all = |reason: String| {
        let skips = [LATENCY_BENCH, THROUGHPUT_BENCH].map(|b| Skipped::new(b, peer.name(), &reason));
        (Vec::new(), skips.to_vec())
    };
    match peer {
        Peer::EtcdTmpfs | Peer::EtcdDisk => {
            let version = match etcd::version(&options.etcd) {
                Ok(v) => v,
                Err(why) => return skip_all(why),
            };
            let parent = if peer == Peer::EtcdTmpfs { &options.tmpfs_dir } else { &options.disk_dir };
            let cluster = match etcd::EtcdCluster::start(&options.etcd, parent, peer.name()) {
                Ok(c) => c,
                Err(e) => return skip_all(format!("etcd cluster did not start: {e:#}")),
            };
            let port = cluster.leader_port();
            let context = RowContext::new(peer, &version, cluster.dir(), etcd::MEMBERS);
            drive(&context, plan, &|| etcd::EtcdClient::connect(port))
        }
        Peer::RedisWait => {
            let version = match crate::kv::redis::server_version() {
                Ok(v) => v,
                Err(why) => return skip_all(why),
            };
            let cluster = match redis_wait::RedisWaitCluster::start(&options.tmpfs_dir, peer.name()) {
                Ok(c) => c,
                Err(e) => return skip_all(format!("redis primary and replicas did not start: {e:#}")),
            };
            let port = cluster.primary_port();
            let context = RowContext::new(peer, &version, cluster.dirs()[0], 1 + redis_wait::REPLICAS);
            drive(&context, plan, &|| redis_wait::RedisWaitClient::connect(port))
        }
    }
}

/// What every row of one peer carries.
struct RowContext {
    peer: Peer,
    params: Vec<(&'static str, serde_json::Value)>,
}

impl RowContext {
    fn new(peer: Peer, version: &str, data_dir: &Path, servers: usize) -> RowContext {
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
        let mut params = vec![
            ("peer", version.into()),
            ("servers", servers.into()),
            ("key_bytes", KEY_BYTES.into()),
            ("data_dir", data_dir.display().to_string().into()),
            ("data_dir_fs", fs_type(data_dir).into()),
            ("machine_cpus", cpus.into()),
            ("pinned", false.into()),
            ("note", format!("unpinned: {servers} servers and the clients share {cpus} CPUs").into()),
        ];
        if peer == Peer::RedisWait {
            params.push(("write", "SET k v, then WAIT 2 0 (two round trips); WAIT must answer 2".into()));
        } else {
            params.push(("write", "POST /v3/kv/put to the leader's JSON gateway, keep-alive HTTP/1.1".into()));
        }
        RowContext { peer, params }
    }

    fn row(&self, result: BenchResult) -> BenchResult {
        self.params.iter().fold(result, |r, (name, value)| r.param(name, value.clone()))
    }
}

/// The latency run and the throughput sweep against one running peer.
fn drive<C: PutClient>(
    context: &RowContext,
    plan: &Plan,
    connect: &(dyn Fn() -> Result<C> + Sync),
) -> (Vec<BenchResult>, Vec<Skipped>) {
    let name = context.peer.name();
    let (mut results, mut skipped) = (Vec::new(), Vec::new());
    match latency_run(connect, plan) {
        Ok(mut samples) => {
            let row = latency_result(LATENCY_BENCH, name, VALUE_BYTES as u64, &mut samples)
                .param("puts", plan.latency_puts)
                .param("warmup_puts", plan.warmup_puts)
                .param("clients", 1);
            results.push(context.row(row));
        }
        Err(e) => skipped.push(Skipped::new(LATENCY_BENCH, name, &format!("{e:#}"))),
    }
    for &clients in &plan.clients {
        match throughput_point(connect, clients, plan.warmup_per_point, plan.seconds_per_point) {
            Ok(ops) => {
                let rate = ops as f64 / plan.seconds_per_point.as_secs_f64();
                let row = BenchResult::new(THROUGHPUT_BENCH, name)
                    .size(VALUE_BYTES as u64)
                    .metric("throughput_ops_per_s", rate)
                    .param("clients", clients)
                    .param("puts", ops)
                    .param("seconds", plan.seconds_per_point.as_secs_f64());
                results.push(context.row(row));
            }
            Err(e) => skipped.push(Skipped::new(THROUGHPUT_BENCH, name, &format!("{clients} clients: {e:#}"))),
        }
    }
    (results, skipped)
}

/// Writes the key of `client`'s `seq`-th PUT into `out`: 16 hex digits.
pub(crate) fn key(client: usize, seq: u64, out: &mut [u8; KEY_BYTES]) {
    let n = ((client as u64) << 32) | (seq % KEYS_PER_CLIENT);
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = b"0123456789abcdef"[((n >> (60 - 4 * i)) & 15) as usize];
    }
}

/// One client: `warmup_puts` untimed, then `latency_puts` timed (ns each).
pub(crate) fn latency_run<C: PutClient>(connect: &dyn Fn() -> Result<C>, plan: &Plan) -> Result<Vec<u64>> {
    assert!(plan.latency_puts > 0);
    let mut client = connect()?;
    let value = [b'v'; VALUE_BYTES];
    let mut k = [0u8; KEY_BYTES];
    for seq in 0..plan.warmup_puts {
        key(0, seq, &mut k);
        client.put(&k, &value)?;
    }
    let mut samples = Vec::with_capacity(plan.latency_puts as usize);
    for seq in plan.warmup_puts..plan.warmup_puts + plan.latency_puts {
        key(0, seq, &mut k);
        let start = Instant::now();
        client.put(&k, &value)?;
        samples.push(start.elapsed().as_nanos() as u64);
    }
    Ok(samples)
}

/// `clients` closed-loop clients PUT for `warmup + seconds`; returns the
/// PUTs completed within the timed `seconds`. Any client's error fails the
/// point. Clients that are plain TCP ([`PutClient::exchange`]) are all
/// driven from this thread ([`super::events`]); others get a thread each,
/// each making its own connection (a client need not be `Send`: UCX
/// contexts stay on their thread; all connect before any starts).
pub(crate) fn throughput_point<C: PutClient>(
    connect: &(dyn Fn() -> Result<C> + Sync),
    clients: usize,
    warmup: Duration,
    seconds: Duration,
) -> Result<u64> {
    assert!(clients > 0);
    let mut first = connect()?;
    if first.exchange().is_some() {
        return super::events::point(first, connect, clients, warmup, seconds);
    }
    drop(first);
    let barrier = Barrier::new(clients);
    let counts: Vec<Result<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|id| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let made = connect();
                    barrier.wait();
                    let mut client = made?;
                    let start = Instant::now();
                    let (timed_from, until) = (start + warmup, start + warmup + seconds);
                    let value = [b'v'; VALUE_BYTES];
                    let mut k = [0u8; KEY_BYTES];
                    let (mut seq, mut counted) = (0u64, 0u64);
                    loop {
                        key(id, seq, &mut k);
                        client.put(&k, &value)?;
                        seq += 1;
                        let now = Instant::now();
                        if now >= until {
                            return Ok(counted);
                        }
                        if now >= timed_from {
                            counted += 1;
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a client thread panicked")).collect()
    });
    let mut total = 0;
    for count in counts {
        total += count?;
    }
    if total == 0 {
        bail!("no PUT completed in {seconds:?} with {clients} clients");
    }
    Ok(total)
}

/// The filesystem `path` is on, by `statfs` magic (`tmpfs`, `ext4`, ...).
fn fs_type(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return "unknown".into() };
    // SAFETY: statfs writes into a zeroed struct we own; c_path is NUL-terminated.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c_path.as_ptr(), &mut stat) } != 0 {
        return "unknown".into();
    }
    let name = match stat.f_type as i64 {
        0x0102_1994 => "tmpfs",
        0x8584_58f6 => "ramfs",
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x794c_7630 => "overlayfs",
        other => return format!("statfs f_type {other:#x}"),
    };
    name.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_plan() -> Plan {
        Plan {
            warmup_puts: 5,
            latency_puts: 20,
            clients: vec![1, 4],
            warmup_per_point: Duration::from_millis(50),
            seconds_per_point: Duration::from_millis(300),
        }
    }

    #[test]
    fn keys_are_16_distinct_hex_bytes_per_client_and_cycle() {
        let (mut a, mut b) = ([0u8; KEY_BYTES], [0u8; KEY_BYTES]);
        key(0, 1, &mut a);
        key(1, 1, &mut b);
        assert_ne!(a, b);
        assert_eq!(&a, b"0000000000000001");
        key(0, 1 + KEYS_PER_CLIENT, &mut b);
        assert_eq!(a, b, "keys cycle");
    }

    /// Checks one peer's rows: both benches there, nothing skipped, rates
    /// above zero, p50 ≤ p99 ≤ p99.9.
    fn check_peer(peer: Peer, options: &PeerOptions) {
        let plan = tiny_plan();
        let (rows, skipped) = run_peer(peer, &plan, options);
        assert!(skipped.is_empty(), "{peer:?}: {skipped:?}");
        let latency: Vec<_> = rows.iter().filter(|r| r.bench == LATENCY_BENCH).collect();
        assert_eq!(latency.len(), 1, "{rows:?}");
        let (p50, p99, p99_9) =
            (latency[0].get("latency_ns_p50").unwrap(), latency[0].get("latency_ns_p99").unwrap(), latency[0].get("latency_ns_p99_9").unwrap());
        assert!(p50 > 0.0, "{p50}");
        assert!(p50 <= p99, "{p50} {p99}");
        assert!(p99 <= p99_9, "{p99} {p99_9}");
        let rates: Vec<f64> = rows.iter().filter(|r| r.bench == THROUGHPUT_BENCH).map(|r| r.get("throughput_ops_per_s").unwrap()).collect();
        assert_eq!(rates.len(), plan.clients.len(), "{rows:?}");
        assert!(rates.iter().all(|&r| r > 0.0), "{rates:?}");
        assert!(rows.iter().all(|r| r.size_bytes == Some(VALUE_BYTES as u64) && r.params.contains_key("machine_cpus")));
    }

    #[test]
    fn etcd_clusters_on_tmpfs_and_disk_take_puts() {
        let options = PeerOptions::default();
        if let Err(why) = etcd::version(&options.etcd) {
            println!("skipped: {why}");
            return;
        }
        for peer in [Peer::EtcdTmpfs, Peer::EtcdDisk] {
            check_peer(peer, &options);
        }
        let leftovers = std::fs::read_dir(&options.tmpfs_dir).unwrap().flatten().filter(|e| {
            e.file_name().to_string_lossy().ends_with(&format!("-{}", std::process::id()))
                && e.file_name().to_string_lossy().starts_with("pmwire-etcd-")
        });
        assert_eq!(leftovers.count(), 0, "the cluster's directory is removed on drop");
    }

    #[test]
    fn redis_primary_and_replicas_take_set_wait() {
        if let Err(why) = crate::kv::redis::server_version() {
            println!("skipped: {why}");
            return;
        }
        check_peer(Peer::RedisWait, &PeerOptions::default());
    }

    #[test]
    fn a_missing_etcd_is_skipped_with_the_reason() {
        let options = PeerOptions { etcd: "/nonexistent/etcd".into(), ..PeerOptions::default() };
        let (rows, skipped) = run_peer(Peer::EtcdDisk, &tiny_plan(), &options);
        assert!(rows.is_empty());
        assert_eq!(skipped.len(), 2);
        assert!(skipped[0].reason.contains("not found"), "{skipped:?}");
    }

    #[test]
    fn fs_type_names_tmpfs() {
        if Path::new("/dev/shm").exists() {
            assert_eq!(fs_type(Path::new("/dev/shm")), "tmpfs");
        }
    }
}
