//! `pmwire bench smr`: three `pmwire replica` processes on loopback, one
//! closed-loop client with one PUT outstanding (16 B keys, 64 B values),
//! latency percentiles; the log in DRAM against the log in persistent
//! memory (seed 000 Table 1), the three tails, the leader's two orders of
//! append and send, UCX tcp and shared memory, and TCP sockets on io_uring
//! (`transport::tcp`, `uring`); throughput with 1 to 64 clients, of the
//! replicas, of the floor over each transport and of the machine's raw
//! floor; and, in the same run, etcd and Redis with replicas and WAIT
//! (`super::peers`).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{anyhow, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pmwire_smr::client::SmrClient;
use reactor::PollBudget;
use link::LinkTransport;
use transport::{TcpConfig, TcpTransport, UcxTransport};

use super::dare;
use super::raw_floor::{self, RawFloor, SharedRawFloor};
use super::peers::{self, latency_run, throughput_point, Peer, PeerOptions, Plan, PutClient, KEY_BYTES, LATENCY_BENCH, THROUGHPUT_BENCH, VALUE_BYTES};
use crate::remote::common::{finish_with_peers, latency_result, ratio};
use crate::remote::server::ucx_config;
use crate::schema::{BenchResult, Skipped};
use crate::spawn::spawn_until_ready;
use crate::{Headline, SuiteReport};

/// How the suite runs.
#[derive(Clone, Debug)]
pub struct SmrOptions {
    /// A short run.
    pub quick: bool,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
    /// The `pmwire` binary (it runs the replicas).
    pub exe: PathBuf,
    /// Run etcd and Redis too.
    pub peers: bool,
    /// Transports to run the replicas over: UCX `tcp` and `sm`, and
    /// `uring` (TCP sockets on io_uring).
    pub transports: Vec<&'static str>,
}

/// One cluster configuration.
#[derive(Clone, Debug)]
pub(crate) struct Variant {
    pub(crate) tls: &'static str,
    pub(crate) log: &'static str,
    pub(crate) tail: &'static str,
    pub(crate) persist_then_send: bool,
    pub(crate) throughput: bool,
}

impl Variant {
    fn name(&self) -> String {
        let order = if self.persist_then_send { "_persist_then_send" } else { "" };
        match self.log {
            "dram" => format!("pmwire_{}_dram", self.tls),
            "floor" => format!("floor_{}_4_messages_no_raft", self.tls),
            _ => format!("pmwire_{}_pmem_{}{order}", self.tls, self.tail.replace('-', "_")),
        }
    }
}

fn variants(transports: &[&'static str]) -> Vec<Variant> {
    let v = |tls, log, tail, persist_then_send, throughput| Variant { tls, log, tail, persist_then_send, throughput };
    let mut out = Vec::new();
    for &tls in transports {
        out.extend([
            v(tls, "floor", "self-validating", false, true),
            v(tls, "dram", "self-validating", false, false),
            v(tls, "pmem", "self-validating", false, true),
            v(tls, "pmem", "naive", false, false),
            v(tls, "pmem", "rotating", false, false),
            v(tls, "pmem", "self-validating", true, false),
        ]);
    }
    out
}

/// Three replica children, killed (and their pools removed) on drop.
pub(crate) struct Cluster {
    /// Replica `id` is `children[id - 1]`.
    pub(crate) children: Vec<Child>,
    pub(crate) peers: BTreeMap<u64, SocketAddr>,
    pub(crate) files: Vec<PathBuf>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// `--peers` for `peers`.
pub(crate) fn peer_list(peers: &BTreeMap<u64, SocketAddr>) -> String {
    peers.iter().map(|(id, a)| format!("{id}={a}")).collect::<Vec<_>>().join(",")
}

/// Replica `id`'s pool (its lock and ready files sit beside it).
pub(crate) fn pool_path(id: u64) -> PathBuf {
    PathBuf::from(format!("/dev/shm/pmwire-smr-bench-{}-{id}.pool", campaign_id()))
}

/// The environment variable a campaign sets for the processes that run its
/// runs: its pid, which names their pools and logs.
pub(crate) const CAMPAIGN_ENV: &str = "PMWIRE_SMR_CAMPAIGN";

/// The pid that names this process's replica files: the campaign's, if it
/// started this process to run one of its runs ([`CAMPAIGN_ENV`]), else
/// this process's own. So a campaign's files and replicas carry its pid
/// whichever process started them, and die with it
/// (`crash::remove_dead_campaigns_files`).
pub(crate) fn campaign_id() -> u32 {
    std::env::var(CAMPAIGN_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or_else(std::process::id)
}

/// Starts replica `id` of `list` on `pool` (formatted if new, reopened
/// otherwise) and waits for its ready file. `prefix` runs it under another
/// command (`ip netns exec NS`); its stdout and stderr go to `log` (without
/// one: stdout nowhere, stderr to ours). The child gets
/// SIGKILL if the thread that started it ends, so no replica outlives the
/// benchmark (start replicas from the thread that lives longest).
pub(crate) fn start_replica(exe: &Path, v: &Variant, id: u64, list: &str, pool: &Path, prefix: &[&str], log: Option<&File>) -> Result<Child> {
    let ready = pool.with_extension("ready");
    let mut cmd = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.args(["replica", "--id", &id.to_string(), "--peers", list, "--tls", v.tls, "--tail", v.tail, "--size", "160M", "--log-size", "64M"]);
    match v.log {
        "floor" => cmd.arg("--floor"),
        log => cmd.args(["--log", log]),
    };
    cmd.arg("--pool").arg(pool).arg("--ready-file").arg(&ready);
    cmd.args(super::links::secret_args()?);
    if v.persist_then_send {
        cmd.arg("--persist-then-send");
    }
    match log {
        Some(f) => cmd.stdout(f.try_clone()?).stderr(f.try_clone()?),
        None => cmd.stdout(Stdio::null()).stderr(Stdio::inherit()),
    };
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let parse = |text: &str| Ok(text.contains("\"addr\"").then_some(()));
    let (child, ()) = spawn_until_ready(cmd, "pmwire replica", &ready, parse)?;
    Ok(child)
}

/// Three replicas of `v` at `peers`, replica `id` run under `prefix(id)`
/// with its output in `log(id)`, on fresh pools.
pub(crate) fn start_cluster_at(exe: &Path, v: &Variant, peers: BTreeMap<u64, SocketAddr>, prefix: &dyn Fn(u64) -> Vec<String>, log: &dyn Fn(u64) -> Option<File>) -> Result<Cluster> {
    let list = peer_list(&peers);
    let ids: Vec<u64> = peers.keys().copied().collect();
    let mut cluster = Cluster { children: Vec::new(), peers, files: Vec::new() };
    for id in ids {
        let pool = pool_path(id);
        let _ = std::fs::remove_file(&pool);
        cluster.files.extend([pool.clone(), pool.with_extension("lock"), pool.with_extension("ready")]);
        let prefix = prefix(id);
        let prefix: Vec<&str> = prefix.iter().map(String::as_str).collect();
        cluster.children.push(start_replica(exe, v, id, &list, &pool, &prefix, log(id).as_ref())?);
    }
    Ok(cluster)
}

pub(crate) use crate::ports::listen_ports;

fn start_cluster(exe: &Path, v: &Variant) -> Result<Cluster> {
    let ports = listen_ports(3)?;
    let peers: BTreeMap<u64, SocketAddr> = ports.iter().enumerate().map(|(i, &p)| (i as u64 + 1, SocketAddr::from(([127, 0, 0, 1], p)))).collect();
    start_cluster_at(exe, v, peers, &|_| Vec::new(), &|_| None)
}

/// A session id no other client of this process has used (a session's
/// sequence numbers start at 1, so a reused id would be refused as stale).
pub(crate) fn session() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Our client as the peers' driver sees it, over the replicas' transport.
enum Ours {
    Ucx(Box<SmrClient<LinkTransport<UcxTransport>>>),
    Uring(Box<SmrClient<LinkTransport<TcpTransport>>>),
}

impl PutClient for Ours {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let put = match self {
            Ours::Ucx(c) => c.put(key, value),
            Ours::Uring(c) => c.put(key, value),
        };
        put.map(drop).map_err(|e| anyhow!("{e}"))
    }
}

fn connect(cluster_peers: &BTreeMap<u64, SocketAddr>, tls: &str, session: u64, poll: PollBudget) -> Result<Ours> {
    if tls == "uring" {
        let t = super::links::link_client(TcpTransport::new(&TcpConfig::default())?)?;
        let mut client = SmrClient::new(t, cluster_peers.clone(), session);
        client.poll = poll;
        client.get(b"warm")?;
        return Ok(Ours::Uring(Box::new(client)));
    }
    let t = super::links::client_transport(&ucx_config(tls, true, false)?)?;
    let mut client = SmrClient::new(t, cluster_peers.clone(), session);
    client.poll = poll;
    // The first request finds the leader (and waits for the election).
    client.get(b"warm")?;
    Ok(Ours::Ucx(Box::new(client)))
}

pub(crate) fn progress(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if std::io::stderr().is_terminal() {
        bar.set_style(ProgressStyle::with_template("smr [{bar:30}] {pos}/{len} {msg}").expect("template").progress_chars("=> "));
    } else {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar
}

/// Latency rounds per variant (5 quick, 7 full): every round starts each variant's cluster
/// afresh, in turn, and a variant's percentiles are the medians of its
/// rounds'. On 2 cores, where the 4 processes land decides a cluster's
/// latency for as long as it runs (runs are bimodal); interleaved rounds
/// give every variant the same draws.
fn rounds(quick: bool) -> u64 {
    if quick {
        5
    } else {
        7
    }
}

fn row_params(v: &Variant, r: BenchResult) -> BenchResult {
    let transport = if v.tls == "uring" { "uring (TCP sockets on io_uring, no UCX)" } else { v.tls };
    r.param("transport", transport).param("log", v.log).param("tail", v.tail).param("leader_order", if v.persist_then_send { "persist then send" } else { "send first (thesis 10.2.1)" }).param("servers", 3).param("key_bytes", KEY_BYTES).param("pool", "tmpfs (emulated pmem, every flush issued)")
}

/// One round of `v`: a fresh cluster, `plan.latency_puts` timed PUTs (the
/// per-round share), and with `sweep`, the throughput points.
fn run_round(exe: &Path, v: &Variant, plan: &Plan, sweep: bool, results: &mut Vec<BenchResult>, skipped: &mut Vec<Skipped>) -> Option<BenchResult> {
    let name = v.name();
    let cluster = match start_cluster(exe, v) {
        Ok(c) => c,
        Err(e) => {
            skipped.push(Skipped::new(LATENCY_BENCH, &name, &format!("replicas did not start: {e:#}")));
            return None;
        }
    };
    let row = match latency_run(&|| connect(&cluster.peers, v.tls, session(), PollBudget::BLOCK), plan) {
        Ok(mut samples) => Some(latency_result(LATENCY_BENCH, &name, VALUE_BYTES as u64, &mut samples)),
        Err(e) => {
            skipped.push(Skipped::new(LATENCY_BENCH, &name, &format!("{e:#}")));
            None
        }
    };
    if !sweep {
        return row;
    }
    for &clients in &plan.clients {
        let connect = || connect(&cluster.peers, v.tls, session(), PollBudget::BLOCK);
        match throughput_point(&connect, clients, plan.warmup_per_point, plan.seconds_per_point) {
            Ok(ops) => {
                let rate = ops as f64 / plan.seconds_per_point.as_secs_f64();
                let row = BenchResult::new(THROUGHPUT_BENCH, &name).size(VALUE_BYTES as u64).metric("throughput_ops_per_s", rate).param("clients", clients).param("puts", ops);
                results.push(row_params(v, row));
            }
            Err(e) => skipped.push(Skipped::new(THROUGHPUT_BENCH, &name, &format!("{clients} clients: {e:#}"))),
        }
    }
    row
}

/// A variant's latency row from its rounds: each percentile is the median
/// of the rounds' (the rounds' p50s are kept as a parameter).
fn median_of_rounds(v: &Variant, rounds: &[BenchResult], puts: u64) -> BenchResult {
    row_params(v, median_row(&v.name(), rounds, puts))
}

/// A latency row named `name` whose percentiles are the medians of its
/// rounds'.
fn median_row(name: &str, rounds: &[BenchResult], puts: u64) -> BenchResult {
    let median = |m: &str| {
        let mut xs: Vec<f64> = rounds.iter().filter_map(|r| r.get(m)).collect();
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let p50s: Vec<f64> = rounds.iter().filter_map(|r| r.get("latency_ns_p50")).collect();
    BenchResult::new(LATENCY_BENCH, name)
        .size(VALUE_BYTES as u64)
        .metric("latency_ns_p50", median("latency_ns_p50"))
        .metric("latency_ns_p99", median("latency_ns_p99"))
        .metric("latency_ns_p99_9", median("latency_ns_p99_9"))
        .param("rounds", rounds.len())
        .param("round_p50s_ns", p50s)
        .param("puts_per_round", puts)
        .param("clients", 1)
}

/// The machine's floor under load: one shared leader, 1 to 64 clients.
fn raw_floor_sweep(plan: &Plan, results: &mut Vec<BenchResult>, skipped: &mut Vec<Skipped>) {
    let floor = match SharedRawFloor::start() {
        Ok(f) => f,
        Err(e) => {
            skipped.push(Skipped::new(THROUGHPUT_BENCH, raw_floor::VARIANT, &format!("{e:#}")));
            return;
        }
    };
    for &clients in &plan.clients {
        match throughput_point(&|| floor.client(), clients, plan.warmup_per_point, plan.seconds_per_point) {
            Ok(ops) => {
                let rate = ops as f64 / plan.seconds_per_point.as_secs_f64();
                let row = BenchResult::new(THROUGHPUT_BENCH, raw_floor::VARIANT).size(VALUE_BYTES as u64).metric("throughput_ops_per_s", rate).param("clients", clients).param("puts", ops);
                results.push(row.param("transport", "plain TCP sockets, loopback, TCP_NODELAY, blocking; one leader thread polls its clients and followers").param("servers", 3));
            }
            Err(e) => skipped.push(Skipped::new(THROUGHPUT_BENCH, raw_floor::VARIANT, &format!("{clients} clients: {e:#}"))),
        }
    }
}

/// One round of the machine's floor (plain TCP sockets, no UCX).
fn raw_floor_round(plan: &Plan, skipped: &mut Vec<Skipped>) -> Option<BenchResult> {
    match latency_run(&RawFloor::start, plan) {
        Ok(mut samples) => Some(latency_result(LATENCY_BENCH, raw_floor::VARIANT, VALUE_BYTES as u64, &mut samples)),
        Err(e) => {
            skipped.push(Skipped::new(LATENCY_BENCH, raw_floor::VARIANT, &format!("{e:#}")));
            None
        }
    }
}

fn metric(results: &[BenchResult], bench: &str, variant: &str, metric: &str, clients: Option<u64>) -> Option<f64> {
    results
        .iter()
        .filter(|r| r.bench == bench && r.variant == variant)
        .filter(|r| clients.is_none_or(|c| r.params.get("clients").and_then(|v| v.as_u64()) == Some(c)))
        .find_map(|r| r.get(metric))
}

/// How the latency targets name the machine's replication floor.
const FLOOR_NAME: &str = "raw TCP sockets, 4 messages (no UCX, no loop, no Raft)";

/// A missed p50 target against a peer is bound by the machine's floor (a
/// write's four messages over plain sockets, [`raw_floor`]) when that floor
/// misses it too and pmwire's p50 is at most 1.25x the floor's (floor /
/// pmwire >= 0.8): our transport, loop, Raft's log, its persist and the
/// state machine together may cost a quarter of four plain loopback
/// messages, no more. The floor over our own transport ([`pmwire_smr::floor`])
/// is shown beside it, for information: it bounds our stack, not the machine.
pub const FLOOR_WITHIN: f64 = 0.8;

fn headlines(results: &[BenchResult]) -> Vec<Headline> {
    let lat = |v: &str, m: &str| metric(results, LATENCY_BENCH, v, m, None);
    let div = |a: Option<f64>, b: Option<f64>| Some(a? / b?);
    let ours = "pmwire_tcp_pmem_self_validating";
    // The machine's floor: a write's four messages over plain sockets. A
    // p50 target below raw / peer cannot be met here; the two peer targets
    // carry it (BOUND when pmwire is within FLOOR_WITHIN of it). The floor
    // over our transport and loop (no Raft) is information.
    let raw = lat(raw_floor::VARIANT, "latency_ns_p50");
    let floor = lat("floor_tcp_4_messages_no_raft", "latency_ns_p50");
    let sm = "pmwire_sm_pmem_self_validating";
    let mut out = vec![
        ratio("smr p50: log in pmem / log in DRAM (tcp; seed 000 Table 1: 1.18x)", div(lat(ours, "latency_ns_p50"), lat("pmwire_tcp_dram", "latency_ns_p50")), 1.2, false, "pmwire, log in DRAM"),
        ratio("smr p99: log in pmem / log in DRAM (tcp; seed 000 Table 1: 1.12x)", div(lat(ours, "latency_ns_p99"), lat("pmwire_tcp_dram", "latency_ns_p99")), 1.15, false, "pmwire, log in DRAM"),
        ratio("smr PUT p50: pmwire (tcp, pmem) / etcd (3 members, tmpfs)", div(lat(ours, "latency_ns_p50"), lat(Peer::EtcdTmpfs.name(), "latency_ns_p50")), 0.1, false, "etcd 3.4")
            .with_floor(FLOOR_NAME, div(raw, lat(Peer::EtcdTmpfs.name(), "latency_ns_p50")), FLOOR_WITHIN),
        ratio("smr PUT p50: pmwire (tcp, pmem) / Redis + WAIT 2 0", div(lat(ours, "latency_ns_p50"), lat(Peer::RedisWait.name(), "latency_ns_p50")), 0.3, false, "redis-server, 2 replicas")
            .with_floor(FLOOR_NAME, div(raw, lat(Peer::RedisWait.name(), "latency_ns_p50")), FLOOR_WITHIN),
        ratio(
            "smr PUTs/s at 64 clients: pmwire (tcp, pmem) / etcd (tmpfs)",
            div(metric(results, THROUGHPUT_BENCH, ours, "throughput_ops_per_s", Some(64)), metric(results, THROUGHPUT_BENCH, Peer::EtcdTmpfs.name(), "throughput_ops_per_s", Some(64))),
            3.0,
            true,
            "etcd 3.4",
        ),
    ];
    let dare = metric(results, &format!("{}_tcp", dare::BENCH), "dare_persistent_bound", "latency_ns_p50", None);
    for (name, value, peer) in [
        ("smr PUT p50: floor over UCX tcp (4 messages, no Raft) / etcd (tmpfs): the best pmwire / etcd our transport allows", div(floor, lat(Peer::EtcdTmpfs.name(), "latency_ns_p50")), "etcd 3.4"),
        ("smr PUT p50: floor over UCX tcp (4 messages, no Raft) / Redis + WAIT: the best pmwire / Redis our transport allows", div(floor, lat(Peer::RedisWait.name(), "latency_ns_p50")), "redis-server, 2 replicas"),
        ("smr PUT p50: pmwire (tcp, pmem) / floor (tcp, 4 messages, no Raft)", div(lat(ours, "latency_ns_p50"), floor), "the floor, same run"),
        ("smr PUT p50: floor (UCX tcp) / raw TCP sockets: the transport and loop's own cost", div(floor, raw), "raw TCP sockets, same run"),
        ("smr PUT p50: pmwire (tcp, pmem) / DARE-persistent bound (tcp; seed 000: 6.6 / 8.1 us = 0.81x)", div(lat(ours, "latency_ns_p50"), dare), "volatile RPC + 2 one-sided persistent writes, same run"),
    ] {
        let h = ratio(name, value, 1.0, false, peer).for_information();
        if h.value.is_finite() {
            out.push(h);
        }
    }
    // Over shared memory (one host only, so beside the tcp headlines, not
    // instead of them), against the same targets.
    for (name, value, target, peer) in [
        ("smr PUT p50: pmwire (sm, pmem) / etcd (tmpfs) (one host only)", div(lat(sm, "latency_ns_p50"), lat(Peer::EtcdTmpfs.name(), "latency_ns_p50")), 0.1, "etcd 3.4"),
        ("smr PUT p50: pmwire (sm, pmem) / Redis + WAIT (one host only)", div(lat(sm, "latency_ns_p50"), lat(Peer::RedisWait.name(), "latency_ns_p50")), 0.3, "redis-server, 2 replicas"),
    ] {
        let h = ratio(name, value, target, false, peer).for_information();
        if h.value.is_finite() {
            out.push(h);
        }
    }
    out.extend(transport_headlines(results));
    let mut info = ratio("smr p50: log in pmem / log in DRAM (sm)", div(lat("pmwire_sm_pmem_self_validating", "latency_ns_p50"), lat("pmwire_sm_dram", "latency_ns_p50")), 1.2, false, "pmwire, log in DRAM");
    info.informational = true;
    if info.value.is_finite() {
        out.push(info);
    }
    out
}

/// The transports side by side (issue 26, item 9: choose by measurement):
/// p50 and throughput at 64 clients of the replicas and of the floor over
/// UCX tcp and over io_uring TCP, each against the machine's raw floor of
/// the same run, and io_uring against UCX. Information: they choose, they
/// do not pass or fail.
fn transport_headlines(results: &[BenchResult]) -> Vec<Headline> {
    let lat = |v: &str| metric(results, LATENCY_BENCH, v, "latency_ns_p50", None);
    let ops = |v: &str| metric(results, THROUGHPUT_BENCH, v, "throughput_ops_per_s", Some(64));
    let div = |a: Option<f64>, b: Option<f64>| Some(a? / b?);
    let raw = raw_floor::VARIANT;
    let mut out = Vec::new();
    for (tls, label) in [("tcp", "UCX tcp"), ("uring", "io_uring tcp")] {
        let (floor, ours) = (format!("floor_{tls}_4_messages_no_raft"), format!("pmwire_{tls}_pmem_self_validating"));
        out.push(ratio(&format!("smr PUT p50: floor over {label} / raw TCP sockets"), div(lat(&floor), lat(raw)), 1.0, false, "raw TCP sockets, same run"));
        out.push(ratio(&format!("smr PUT p50: pmwire ({label}, pmem) / raw TCP sockets"), div(lat(&ours), lat(raw)), 1.5, false, "raw TCP sockets, same run"));
        out.push(ratio(&format!("smr PUTs/s at 64 clients: floor over {label} / raw TCP sockets"), div(ops(&floor), ops(raw)), 1.0, true, "raw TCP sockets, same run"));
        out.push(ratio(&format!("smr PUTs/s at 64 clients: pmwire ({label}, pmem) / raw TCP sockets"), div(ops(&ours), ops(raw)), 1.0, true, "raw TCP sockets, same run"));
    }
    for (name, value, more) in [
        ("smr PUT p50: pmwire (io_uring tcp) / pmwire (UCX tcp)", div(lat("pmwire_uring_pmem_self_validating"), lat("pmwire_tcp_pmem_self_validating")), false),
        ("smr PUTs/s at 64 clients: pmwire (io_uring tcp) / pmwire (UCX tcp)", div(ops("pmwire_uring_pmem_self_validating"), ops("pmwire_tcp_pmem_self_validating")), true),
    ] {
        out.push(ratio(name, value, 1.0, more, "pmwire over UCX tcp, same run"));
    }
    out.into_iter().map(Headline::for_information).filter(|h| h.value.is_finite()).collect()
}

/// Runs the suite.
pub fn run(options: &SmrOptions) -> Result<SuiteReport> {
    let _secret = super::links::hold_secret();
    run_suite(options)
}

fn run_suite(options: &SmrOptions) -> Result<SuiteReport> {
    let plan = if options.quick { Plan::quick() } else { Plan::full() };
    let variants = variants(&options.transports);
    let rounds = rounds(options.quick);
    let round_plan = Plan { latency_puts: plan.latency_puts.div_ceil(rounds), ..plan.clone() };
    let raw = options.transports.iter().any(|t| matches!(*t, "tcp" | "uring"));
    let ucx = options.transports.iter().filter(|t| **t != "uring").count() as u64;
    let bar = progress(rounds * (variants.len() as u64 + u64::from(raw)) + ucx + u64::from(options.peers));
    let (mut results, mut skipped) = (Vec::new(), Vec::new());
    let mut by_variant: Vec<Vec<BenchResult>> = vec![Vec::new(); variants.len()];
    let mut raw_rounds = Vec::new();
    for round in 0..rounds {
        if raw {
            bar.set_message(format!("{} (round {}/{rounds})", raw_floor::VARIANT, round + 1));
            raw_rounds.extend(raw_floor_round(&round_plan, &mut skipped));
            if round == rounds / 2 {
                raw_floor_sweep(&plan, &mut results, &mut skipped);
            }
            bar.inc(1);
        }
        for (v, done) in variants.iter().zip(&mut by_variant) {
            bar.set_message(format!("{} (round {}/{rounds})", v.name(), round + 1));
            // The throughput sweep runs once, in the middle round.
            let sweep = v.throughput && round == rounds / 2;
            done.extend(run_round(&options.exe, v, &round_plan, sweep, &mut results, &mut skipped));
            bar.inc(1);
        }
    }
    for (v, done) in variants.iter().zip(&by_variant) {
        if !done.is_empty() {
            results.push(median_of_rounds(v, done, round_plan.latency_puts));
        }
    }
    if !raw_rounds.is_empty() {
        let row = median_row(raw_floor::VARIANT, &raw_rounds, round_plan.latency_puts).param("transport", "plain TCP sockets, loopback, TCP_NODELAY, blocking; 3 threads");
        results.push(row);
    }
    // The DARE bound needs one-sided access: UCX only.
    for &tls in options.transports.iter().filter(|t| **t != "uring") {
        bar.set_message(format!("DARE bound over {tls}"));
        dare::run(tls, options.quick, &mut results, &mut skipped);
        bar.inc(1);
    }
    if options.peers {
        bar.set_message("etcd, redis + WAIT");
        let (r, s) = peers::run_peers(&PeerOptions { quick: options.quick, ..PeerOptions::default() });
        results.extend(r);
        skipped.extend(s);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let heads = headlines(&results);
    let parameters = serde_json::json!({
        "command": if options.quick { "pmwire bench smr --quick" } else { "pmwire bench smr" },
        "replicas": 3, "key_bytes": KEY_BYTES, "value_bytes": VALUE_BYTES,
        "latency_puts": plan.latency_puts, "latency_rounds": rounds, "warmup_puts": plan.warmup_puts, "clients": plan.clients,
        "rounds": "pmwire's latency variants run in interleaved rounds, each on a fresh cluster; a row's percentiles are the medians of its rounds'",
        "note": "3 replica processes and the clients share the 2 cores; replicas and clients block as soon as nothing is ready (no polling)",
    });
    let peer_info = serde_json::json!({ "etcd": "Debian etcd-server 3.4, 3 members on loopback", "redis": "redis-server primary + 2 replicas, appendonly yes, appendfsync always, SET then WAIT 2 0" });
    finish_with_peers("smr", &options.out_dir, parameters, peer_info, results, skipped, heads)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;

    fn p50(variant: &str, us: f64) -> BenchResult {
        BenchResult::new(LATENCY_BENCH, variant).metric("latency_ns_p50", us * 1e3).metric("latency_ns_p99", us * 2e3)
    }

    fn find<'a>(h: &'a [Headline], start: &str) -> &'a Headline {
        h.iter().find(|h| h.name.starts_with(start)).unwrap()
    }

    #[test]
    fn each_transport_is_set_against_the_raw_floor_of_the_run() {
        let ops = |variant: &str, k: f64| BenchResult::new(THROUGHPUT_BENCH, variant).metric("throughput_ops_per_s", k * 1e3).param("clients", 64);
        let results = vec![
            p50(raw_floor::VARIANT, 40.0),
            p50("floor_tcp_4_messages_no_raft", 70.0),
            p50("floor_uring_4_messages_no_raft", 60.0),
            p50("pmwire_tcp_pmem_self_validating", 100.0),
            p50("pmwire_uring_pmem_self_validating", 90.0),
            ops(raw_floor::VARIANT, 20.0),
            ops("floor_uring_4_messages_no_raft", 45.0),
            ops("pmwire_tcp_pmem_self_validating", 20.0),
            ops("pmwire_uring_pmem_self_validating", 30.0),
        ];
        let h = transport_headlines(&results);
        let value = |start: &str| find(&h, start).value;
        assert!((value("smr PUT p50: floor over io_uring tcp / raw") - 1.5).abs() < 1e-9);
        assert!((value("smr PUT p50: floor over UCX tcp / raw") - 1.75).abs() < 1e-9);
        assert!((value("smr PUTs/s at 64 clients: floor over io_uring tcp / raw") - 2.25).abs() < 1e-9);
        assert!((value("smr PUTs/s at 64 clients: pmwire (io_uring tcp) / pmwire (UCX tcp)") - 1.5).abs() < 1e-9);
        assert!(h.iter().all(|h| h.informational), "they choose; they do not pass or fail");
        // A side that did not run leaves its ratio out.
        assert!(h.iter().all(|h| !h.name.starts_with("smr PUTs/s at 64 clients: floor over UCX tcp")));
    }

    #[test]
    fn a_miss_the_floor_explains_is_bound_and_one_it_does_not_fails() {
        // etcd 500 us, Redis 160 us, raw floor 110 us, pmwire 130 us: floor
        // / etcd 0.22x misses <= 0.1x, pmwire at 110/130 = 0.85 of the floor.
        // The floor over UCX (no Raft) is information only.
        let mut results = vec![
            p50("pmwire_tcp_pmem_self_validating", 130.0),
            p50("pmwire_tcp_dram", 120.0),
            p50(Peer::EtcdTmpfs.name(), 500.0),
            p50(Peer::RedisWait.name(), 600.0),
            p50("floor_tcp_4_messages_no_raft", 125.0),
            p50(raw_floor::VARIANT, 110.0),
        ];
        let h = headlines(&results);
        let etcd = find(&h, "smr PUT p50: pmwire (tcp, pmem) / etcd");
        assert_eq!(etcd.verdict(), Verdict::Bound, "{etcd:?}");
        let floor = etcd.floor.as_ref().unwrap();
        assert!((floor.vs_peer - 0.22).abs() < 1e-9);
        assert!((floor.ours_of_floor - 110.0 / 130.0).abs() < 1e-9);
        // Against Redis at 600 us the floor (0.18x) meets <= 0.3x, so
        // pmwire's 0.217x passes on its own.
        assert_eq!(find(&h, "smr PUT p50: pmwire (tcp, pmem) / Redis").verdict(), Verdict::Pass);
        // pmwire at 150 us is 0.73 of the floor: below FLOOR_WITHIN, a
        // plain miss even though the floor misses too.
        results[0] = p50("pmwire_tcp_pmem_self_validating", 150.0);
        let h = headlines(&results);
        assert_eq!(find(&h, "smr PUT p50: pmwire (tcp, pmem) / etcd").verdict(), Verdict::Fail);
        // Without the floor's row, no floor and a plain miss.
        results.pop();
        let h = headlines(&results);
        let etcd = find(&h, "smr PUT p50: pmwire (tcp, pmem) / etcd");
        assert!(etcd.floor.is_none());
        assert_eq!(etcd.verdict(), Verdict::Fail);
    }
}
