//! `pmwire bench smr-crash` (issue 12, item 6): kill -9 replicas of a
//! 3-process cluster under load, restart them on their pools, and check
//! that no acknowledged write is lost and every history is linearizable.
//!
//! Each run starts three `pmwire replica` processes on fresh emulated pools
//! (`/dev/shm`, `super::suite::start_cluster_at`) and a few closed-loop
//! clients (threads, each with its own [`SmrClient`] and session) doing
//! PUT, GET, CAS and DEL on a small key set, every written value unique.
//! At a random moment it kills one replica with SIGKILL: half the runs aim
//! at the leader (asked of the replicas just before), the others pick any
//! replica. After a random pause the replica restarts on the same pool;
//! the load goes on, then stops; the killed replica must catch up with the
//! leader's commit index; then one GET per key reads the healed cluster.
//! With `--netns` each replica runs in its own network namespace
//! ([`super::netns`]) and runs add faults: netem delay and loss on every
//! replica's link, and a partition after the restart (half of them by
//! taking links down, half by dropping every packet with nftables, which
//! leaves TCP connections up and in retransmission backoff, as across a
//! real partition): one replica cut off for up to 1.2 s, or (a third of them) two replicas' links down for
//! longer than a client's operation timeout, so the cluster has no quorum
//! and operations end with unknown outcomes. At each heal a fresh client
//! times the first write the cluster commits (`heal_to_commit_ms`).
//!
//! Every operation is recorded with monotonic call and return times; an
//! operation that failed or timed out has an unknown outcome (`ret: None`:
//! it may have taken effect at any later time, or never). The checks, per
//! run: [`lincheck::kv::first_violation`] over the whole history with the
//! final reads (which also catches a lost acknowledged write), and an
//! explicit count of acknowledged writes whose effect the final read
//! cannot show ([`lost_writes`]). A replica that does not restart, exits
//! on its own or never catches up, and a cluster that cannot serve the
//! final reads, fail the run too. The run's seed draws every choice (which
//! replica, when, the workload), so a failing run's seed replays its plan
//! (not the processes' interleaving); its history and the replicas' stderr
//! are kept under the output directory.
//!
//! Invariant: every replica child is killed and every pool removed when a
//! run ends, on error too (`Cluster`'s drop), and replicas die with the
//! thread that started them (`PR_SET_PDEATHSIG`).

use std::collections::BTreeMap;
use std::fs::File;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use lincheck::kv::{first_violation, Input, KvOp, Output};
use pmwire_smr::client::SmrClient;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reactor::PollBudget;
use transport::UcxConfig;

use super::links::{client_transport, Client};
use super::netns::{self, Namespaces};
use super::suite::{peer_list, pool_path, progress, session, start_cluster_at, start_replica, Cluster, Variant};
use crate::remote::server::ucx_config;
use crate::schema::{BenchResult, SuiteFile};
use crate::{table, SuiteReport};

/// The suite's name (JSON file and results).
const SUITE: &str = "smr_crash";
/// Longest one client operation is retried before its outcome is unknown.
const OP_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest the final reads, the catch-up and the first leader may take.
const HEAL_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest the controller watches for a new leader after a leader kill
/// (the load goes on meanwhile).
const WATCH_LIMIT: Duration = Duration::from_secs(3);

/// How a campaign runs.
#[derive(Clone, Debug)]
pub struct SmrCrashOptions {
    /// Kill -9 runs.
    pub runs: usize,
    /// Short runs (fewer clients and keys, shorter load).
    pub quick: bool,
    /// Where the JSON (and a failing run's evidence) goes.
    pub out_dir: PathBuf,
    /// The `pmwire` binary (it runs the replicas).
    pub exe: PathBuf,
    /// Each replica in its own network namespace, with partitions and netem.
    pub netns: bool,
    /// Seed of the campaign; run `i` uses [`run_seed`]`(seed, i)`.
    pub seed: u64,
    /// The canary: replicas keep their log in DRAM and all three are
    /// killed and restarted after the load, so acknowledged writes are
    /// lost and the campaign must fail.
    pub planted_volatile_log: bool,
    /// Each run in a child process of its own (`pmwire bench smr-crash
    /// --one-run I`, with `--netns` attached to the campaign's
    /// namespaces). UCX 1.13 can abort a process whose threads each run a
    /// UCX context (`async.c:643`), and a campaign should not die with one
    /// run's clients. And a client transport dropped while a killed or cut
    /// replica never answered its send keeps its UCX worker (destroying it
    /// would abort in UCX): in one long-lived process those workers'
    /// half-closed sockets piled up (400 fds after 40 runs) and UCX's async
    /// thread spun on them, a whole core of two, starving the replicas. A
    /// child per run takes its workers with it. A run whose child aborted
    /// in UCX is run again (at most [`CLIENT_ABORT_RETRIES`] times).
    pub child_per_run: bool,
}

/// Times a run whose child process aborted inside UCX is run again.
pub const CLIENT_ABORT_RETRIES: u32 = 3;

/// What a campaign found.
#[derive(Clone, Debug)]
pub struct SmrCrashOutcome {
    /// The JSON written.
    pub report: SuiteReport,
    /// Every run.
    pub runs: Vec<RunRecord>,
}

impl SmrCrashOutcome {
    /// Runs that lost an acknowledged write, were not linearizable or hit
    /// a replica or cluster failure.
    pub fn failed(&self) -> Vec<&RunRecord> {
        self.runs.iter().filter(|r| r.failed()).collect()
    }
}

/// The timing and size of a run.
#[derive(Clone, Copy, Debug)]
struct Plan {
    clients: usize,
    keys: usize,
    /// Load before the kill, drawn from this range (ms).
    before_kill_ms: (u64, u64),
    /// The killed replica stays down this long (ms; 0: restarted at once).
    down_ms: (u64, u64),
    /// Load after the restart (ms).
    after_restart_ms: u64,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan { clients: 3, keys: 4, before_kill_ms: (150, 400), down_ms: (0, 200), after_restart_ms: 500 }
        } else {
            Plan { clients: 4, keys: 6, before_kill_ms: (300, 1500), down_ms: (0, 500), after_restart_ms: 1200 }
        }
    }
}

/// A partition after the restart: links down, then up again.
#[derive(Clone, Copy, Debug)]
struct Partition {
    /// The replica cut off (`None`: whichever leads then).
    target: Option<u64>,
    /// Also cut off the next replica: no quorum, so operations time out
    /// with unknown outcomes (and may take effect after the heal).
    majority: bool,
    after_ms: u64,
    for_ms: u64,
    /// Cut by dropping every packet (connections stay up, in TCP's
    /// retransmission backoff) rather than by taking the link down.
    silent: bool,
}

/// The network faults of a `--netns` run.
#[derive(Clone, Debug, Default)]
struct Faults {
    /// On every replica's link: delay (ms), loss (%), and the rate limit
    /// (Mbit/s) that stands for the delay where the kernel has no netem.
    impair: Option<(u32, f64, u32)>,
    partition: Option<Partition>,
}

impl Faults {
    fn draw(rng: &mut StdRng, plan: &Plan) -> Faults {
        let impair = rng.gen_bool(0.5).then(|| ([1, 2, 5, 10, 20][rng.gen_range(0..5)], [0.0, 0.5, 1.0, 2.0][rng.gen_range(0..4)], [2, 5, 20][rng.gen_range(0..3)]));
        let partition = rng.gen_bool(0.8).then(|| {
            let target = if rng.gen_bool(0.5) { None } else { Some(rng.gen_range(1..=3)) };
            let majority = rng.gen_bool(0.3);
            // A lost quorum lasts past OP_TIMEOUT, so some outcomes are unknown.
            let for_ms = if majority { rng.gen_range(OP_TIMEOUT.as_millis() as u64..OP_TIMEOUT.as_millis() as u64 + 1500) } else { rng.gen_range(200..1200) };
            let silent = rng.gen_bool(0.5);
            Partition { target, majority, after_ms: rng.gen_range(0..plan.after_restart_ms / 2), for_ms, silent }
        });
        Faults { impair, partition }
    }

    fn text(&self, impaired: &str) -> String {
        let part = match self.partition {
            None => "no partition".to_string(),
            Some(p) => {
                let who = p.target.map_or("the leader".to_string(), |id| format!("replica {id}"));
                let who = if p.majority { format!("{who} and the next replica (no quorum)") } else { who };
                let how = if p.silent { "silently (packets dropped)" } else { "(link down)" };
                format!("{who} cut off {how} {} ms", p.for_ms)
            }
        };
        format!("{}, {part}", if impaired.is_empty() { "no delay or loss" } else { impaired })
    }
}

/// One run's outcome.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RunRecord {
    /// Its index in the campaign.
    pub run: usize,
    /// Its seed.
    pub seed: u64,
    /// The replica killed.
    pub victim: u64,
    /// It led when it was killed (asked of the replicas just before).
    pub victim_was_leader: bool,
    /// What each replica said just before the kill (role, term, commit index).
    pub roles_at_kill: String,
    /// Operations recorded, final reads included.
    pub ops: u64,
    /// PUT, DEL and successful CAS acknowledged.
    pub acked_writes: u64,
    /// Operations whose outcome is unknown (error or timeout).
    pub unknown: u64,
    /// Acknowledged writes the final reads cannot show: must be 0.
    pub lost: u64,
    /// The first key whose history is not linearizable.
    pub violation: Option<String>,
    /// Leader kills: when (ns since the run's epoch).
    pub leader_killed_ns: Option<u64>,
    /// Leader kills: from the kill to the first acknowledged PUT called after it.
    pub recovery_ms: Option<f64>,
    /// Leader kills: from the kill to another replica leading in a higher term.
    pub election_ms: Option<f64>,
    /// From starting the killed replica again to its listening.
    pub restart_ms: Option<f64>,
    /// From the end of the load to the restarted replica applying the leader's commit index.
    pub catch_up_ms: Option<f64>,
    /// Partition runs: from the heal to the first PUT acknowledged by a
    /// fresh client started at the heal (the cluster serves writes again).
    #[serde(default)]
    pub heal_to_commit_ms: Option<f64>,
    /// Partition runs: two replicas were cut off (no quorum until the heal).
    #[serde(default)]
    pub quorum_lost: bool,
    /// Partition runs: the cut dropped packets silently (connections
    /// stayed up, in TCP's backoff) rather than taking the link down.
    #[serde(default)]
    pub silent_cut: bool,
    /// The faults of a `--netns` run.
    pub faults: String,
    /// A replica or cluster failure (did not restart, exited on its own, no final reads).
    pub error: Option<String>,
    /// Taken when a cluster failure was found, its replicas still running:
    /// each one's process state and answer to a fresh client, its
    /// namespace's sockets, its threads' stacks ([`diagnose`]).
    #[serde(default)]
    pub diagnosis: Option<String>,
}

impl RunRecord {
    /// Lost a write, not linearizable, or a replica or cluster failure.
    pub fn failed(&self) -> bool {
        self.lost > 0 || self.violation.is_some() || self.error.is_some()
    }
}

/// Run `run`'s seed (SplitMix64 of the campaign seed and the index).
pub fn run_seed(seed: u64, run: usize) -> u64 {
    let mut z = seed.wrapping_add((run as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Where the replicas run: loopback, or one namespace each.
struct Network {
    namespaces: Option<Namespaces>,
}

impl Network {
    fn peers(&self) -> Result<BTreeMap<u64, SocketAddr>> {
        match &self.namespaces {
            Some(ns) => Ok(ns.peers()),
            None => {
                let ports = super::suite::listen_ports(3)?;
                Ok(ports.iter().enumerate().map(|(i, &p)| (i as u64 + 1, SocketAddr::from(([127, 0, 0, 1], p)))).collect())
            }
        }
    }

    fn prefix(&self, id: u64) -> Vec<String> {
        match &self.namespaces {
            Some(ns) => {
                let mut p = ns.prefix(id);
                p.extend(["env".to_string(), format!("UCX_NET_DEVICES={}", netns::DEVICE)]);
                p
            }
            None => Vec::new(),
        }
    }

    fn client_config(&self) -> Result<UcxConfig> {
        Ok(match &self.namespaces {
            Some(_) => ucx_config("tcp", false, false)?.with_var("NET_DEVICES", netns::BRIDGE),
            None => ucx_config("tcp", true, false)?,
        })
    }
}

fn variant(options: &SmrCrashOptions) -> Variant {
    let log = if options.planted_volatile_log { "dram" } else { "pmem" };
    Variant { tls: "tcp", log, tail: "self-validating", persist_then_send: false, throughput: false }
}

/// Replica `id`'s output (stdout and stderr) during a run.
fn log_path(id: u64) -> PathBuf {
    PathBuf::from(format!("/dev/shm/pmwire-smr-crash-{}-{id}.log", super::suite::campaign_id()))
}

/// Replica `id`'s output file, appended to by each of its starts.
fn log_file(id: u64) -> Option<File> {
    std::fs::OpenOptions::new().create(true).append(true).open(log_path(id)).ok()
}

/// Removes the pools, locks, ready files and logs that campaigns (and
/// `bench smr`) killed with SIGKILL left in `/dev/shm`: those named by a
/// pid that no longer runs. (Their replicas died with them.)
fn remove_dead_campaigns_files() {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else { return };
    for entry in dir.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("pmwire-smr-bench-").or_else(|| name.strip_prefix("pmwire-smr-crash-")) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Runs the campaign and writes its JSON.
pub fn run(options: &SmrCrashOptions) -> Result<SmrCrashOutcome> {
    remove_dead_campaigns_files();
    let secret = super::links::hold_secret();
    let namespaces = if options.netns { Some(Namespaces::create()?) } else { None };
    let note = namespaces.as_ref().and_then(Namespaces::impairment_note);
    if let Some(note) = &note {
        println!("smr-crash --netns: {note}");
    }
    let network = Network { namespaces };
    let plan = Plan::new(options.quick);
    let bar = progress(options.runs as u64);
    let mut runs = Vec::with_capacity(options.runs);
    let mut client_aborts = 0u32;
    for i in 0..options.runs {
        let seed = run_seed(options.seed, i);
        let record = if options.child_per_run {
            let (record, aborts) = run_in_child(options, i);
            client_aborts += aborts;
            if aborts > 0 {
                bar.suspend(|| eprintln!("smr-crash: run {i}: its client process aborted inside UCX 1.13 (async.c:643) {aborts} time(s); run again"));
            }
            record
        } else {
            one_run(options, &network, &plan, i, seed)
        };
        if record.failed() {
            bar.suspend(|| {
                eprintln!("smr-crash: run {i} (seed {seed:#x}) FAILED: {}", failure_text(&record));
                if let Some(d) = &record.diagnosis {
                    eprintln!("smr-crash: run {i}'s cluster when the failure was found:\n{d}");
                }
            });
        }
        runs.push(record);
        let lost: u64 = runs.iter().map(|r| r.lost).sum();
        bar.set_message(format!("lost {lost}, failed runs {}", runs.iter().filter(|r| r.failed()).count()));
        bar.inc(1);
    }
    bar.finish_and_clear();
    drop(network);
    drop(secret);
    if client_aborts > 0 {
        println!("smr-crash: {client_aborts} client process(es) aborted inside UCX 1.13 (async.c:643, not a replica) and their runs were run again");
    }
    let report = write_report(options, &plan, &runs, note)?;
    Ok(SmrCrashOutcome { report, runs })
}

/// Run `run` of `options`'s campaign in this process, alone (the child
/// side of [`SmrCrashOptions::child_per_run`]).
pub fn one_run_alone(options: &SmrCrashOptions, run: usize) -> RunRecord {
    let _secret = super::links::hold_secret();
    let seed = run_seed(options.seed, run);
    let namespaces = match options.netns.then(Namespaces::attach).transpose() {
        Ok(n) => n,
        Err(e) => return RunRecord { run, seed, error: Some(format!("{e:#}")), ..RunRecord::default() },
    };
    one_run(options, &Network { namespaces }, &Plan::new(options.quick), run, seed)
}

/// A record as the child prints it: one line of JSON.
pub fn record_json(record: &RunRecord) -> String {
    serde_json::to_string(record).expect("a record serializes")
}

/// Runs `run` in a child `pmwire` process; returns its record and how many
/// times a child aborted inside UCX before one finished.
fn run_in_child(options: &SmrCrashOptions, run: usize) -> (RunRecord, u32) {
    let seed = run_seed(options.seed, run);
    let failed = |why: String| RunRecord { run, seed, error: Some(why), ..RunRecord::default() };
    let mut aborts = 0;
    loop {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap_or_else(|_| options.exe.clone()));
        cmd.args(["bench", "smr-crash", "--one-run", &run.to_string(), "--seed", &options.seed.to_string(), "--out"]).arg(&options.out_dir);
        cmd.env(super::suite::CAMPAIGN_ENV, super::suite::campaign_id().to_string());
        // The run dies with the campaign (and its replicas with the run).
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            use std::os::unix::process::CommandExt as _;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        if options.quick {
            cmd.arg("--quick");
        }
        if options.netns {
            cmd.arg("--netns");
        }
        if super::links::legacy_links() {
            cmd.arg("--replica-exe").arg(&options.exe);
        }
        if options.planted_volatile_log {
            cmd.arg("--planted-bug");
        }
        let out = match cmd.output() {
            Ok(out) => out,
            Err(e) => return (failed(format!("could not start the run's process: {e}")), aborts),
        };
        remove_dead_campaigns_files();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            let stdout = String::from_utf8_lossy(&out.stdout);
            let parsed = stdout.lines().rev().find_map(|l| serde_json::from_str::<RunRecord>(l).ok());
            return match parsed {
                Some(record) => (record, aborts),
                None => (failed(format!("the run's process printed no record: {}", stderr.trim())), aborts),
            };
        }
        if stderr.contains("async.c:643") && aborts < CLIENT_ABORT_RETRIES {
            aborts += 1;
            continue;
        }
        return (failed(format!("the run's process failed ({}): {}", out.status, stderr.trim())), aborts);
    }
}

fn failure_text(r: &RunRecord) -> String {
    let mut out = Vec::new();
    if r.lost > 0 {
        out.push(format!("{} acknowledged writes lost", r.lost));
    }
    if let Some(k) = &r.violation {
        out.push(format!("history of key {k} not linearizable"));
    }
    if let Some(e) = &r.error {
        out.push(e.clone());
    }
    out.join("; ")
}

/// One run; its failures are in the record, never an `Err`.
fn one_run(options: &SmrCrashOptions, network: &Network, plan: &Plan, run: usize, seed: u64) -> RunRecord {
    let mut rng = StdRng::seed_from_u64(seed);
    let faults = if network.namespaces.is_some() { Faults::draw(&mut rng, plan) } else { Faults::default() };
    let mut record = RunRecord { run, seed, ..RunRecord::default() };
    for id in 1..=3 {
        // A run's cluster starts on fresh pools (a run that died may have left its own).
        let _ = std::fs::remove_file(log_path(id));
        let _ = std::fs::remove_file(pool_path(id));
    }
    let mut history = Vec::new();
    let mut diagnosis = None;
    if let Err(e) = run_cluster(options, network, plan, &faults, &mut rng, &mut record, &mut history, &mut diagnosis) {
        record.error = Some(format!("{e:#}"));
        record.diagnosis = diagnosis;
    }
    if let Some(ns) = &network.namespaces {
        for id in 1..=3 {
            let _ = ns.heal(id);
        }
    }
    check(&mut record, &history);
    if record.failed() {
        if let Err(e) = keep_evidence(options, &record, &history) {
            eprintln!("smr-crash: could not keep run {run}'s evidence: {e:#}");
        }
    }
    for id in 1..=3 {
        let _ = std::fs::remove_file(log_path(id));
    }
    record
}

/// Starts the cluster, loads it while killing and restarting a replica,
/// then reads every key. The history grows even when this fails.
#[allow(clippy::too_many_arguments)]
fn run_cluster(options: &SmrCrashOptions, network: &Network, plan: &Plan, faults: &Faults, rng: &mut StdRng, record: &mut RunRecord, history: &mut Vec<KvOp>, diagnosis: &mut Option<String>) -> Result<()> {
    let v = variant(options);
    let peers = network.peers()?;
    let mut impaired = String::new();
    if let (Some(ns), Some((delay, loss, mbit))) = (&network.namespaces, faults.impair) {
        for id in 1..=3 {
            impaired = ns.impair(id, delay, loss, mbit)?;
        }
    }
    if network.namespaces.is_some() {
        record.faults = faults.text(&impaired);
    }
    let mut cluster = start_cluster_at(&options.exe, &v, peers.clone(), &|id| network.prefix(id), &log_file).context("starting the cluster")?;
    let config = network.client_config()?;
    let mut probe = SmrClient::new(client_transport(&config)?, peers.clone(), session());
    probe.poll = PollBudget::BLOCK;
    probe.timeout = HEAL_TIMEOUT;
    probe.get(b"first-leader").map_err(|e| anyhow!("no leader elected: {e}"))?;
    let epoch = Instant::now();
    let stop = AtomicBool::new(false);
    let client_seeds: Vec<u64> = (0..plan.clients).map(|_| rng.gen()).collect();
    let (control, histories) = std::thread::scope(|s| {
        let handles: Vec<_> = client_seeds
            .iter()
            .enumerate()
            .map(|(i, &seed)| {
                let (config, peers, stop) = (&config, &peers, &stop);
                s.spawn(move || client_loop(config, peers, i, plan.keys, seed, epoch, stop))
            })
            .collect();
        let control = control(options, network, plan, faults, rng, record, &mut cluster, &mut probe, epoch);
        stop.store(true, Ordering::Release);
        let histories: Vec<Result<Vec<KvOp>>> = handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("a client thread panicked")))).collect();
        (control, histories)
    });
    for h in histories {
        history.extend(h?);
    }
    control?;
    if options.planted_volatile_log {
        restart_all(options, network, &mut cluster)?;
    }
    if let Some(ns) = &network.namespaces {
        for id in 1..=3 {
            ns.heal(id)?;
        }
    }
    // Checked by a client made now, as `heal_to_commit` is: the probe went through the kills
    // and cuts, and a UCX 1.13 client worker that did can stay unable to reach a restarted
    // replica (its socket from that replica left in CLOSE-WAIT) while a new one reaches it at
    // once (docs/bench.md, "Replication under kill -9": the stall after the heal).
    let mut checker = SmrClient::new(client_transport(&config)?, peers.clone(), session());
    checker.poll = PollBudget::BLOCK;
    checker.timeout = HEAL_TIMEOUT;
    let healed = catch_up(&mut checker, record.victim).map(|ms| record.catch_up_ms = Some(ms)).and_then(|()| final_reads(&mut checker, plan.keys, epoch, history));
    if healed.is_err() {
        *diagnosis = Some(diagnose(network, &cluster));
    }
    healed?;
    for (i, child) in cluster.children.iter_mut().enumerate() {
        if let Ok(Some(status)) = child.try_wait() {
            bail!("replica {} exited on its own ({status})", i + 1);
        }
    }
    Ok(())
}

/// The controller: waits, kills a replica, restarts it, partitions one in
/// a `--netns` run, waits for the rest of the load.
#[allow(clippy::too_many_arguments)]
fn control(options: &SmrCrashOptions, network: &Network, plan: &Plan, faults: &Faults, rng: &mut StdRng, record: &mut RunRecord, cluster: &mut Cluster, probe: &mut Client, epoch: Instant) -> Result<()> {
    std::thread::sleep(Duration::from_millis(rng.gen_range(plan.before_kill_ms.0..=plan.before_kill_ms.1)));
    let aim_at_leader = rng.gen_bool(0.5);
    let any = rng.gen_range(1..=3u64);
    let (leader, term, roles) = leader_and_roles(probe);
    record.roles_at_kill = roles;
    record.victim = if aim_at_leader { leader.unwrap_or(any) } else { any };
    record.victim_was_leader = leader == Some(record.victim);
    let slot = &mut cluster.children[record.victim as usize - 1];
    slot.kill().context("kill -9")?;
    slot.wait().context("reaping the killed replica")?;
    let killed = Instant::now();
    record.leader_killed_ns = record.victim_was_leader.then(|| killed.duration_since(epoch).as_nanos() as u64);
    let down = Duration::from_millis(rng.gen_range(plan.down_ms.0..=plan.down_ms.1));
    let (victim, config, peers) = (record.victim, &network.client_config()?, cluster.peers.clone());
    // While the victim is down and restarting, watch the others elect a leader.
    let (election, restarted) = std::thread::scope(|s| {
        let watch = record.victim_was_leader.then(|| s.spawn(|| new_leader_ms(config, &peers, victim, term, killed)));
        std::thread::sleep(down);
        let restarted = restart(options, network, cluster, victim);
        (watch.and_then(|w| w.join().ok().flatten()), restarted)
    });
    record.election_ms = election;
    record.restart_ms = Some(restarted?);
    let load_end = Instant::now() + Duration::from_millis(plan.after_restart_ms);
    if let (Some(ns), Some(p)) = (&network.namespaces, faults.partition) {
        std::thread::sleep(Duration::from_millis(p.after_ms));
        let id = p.target.or_else(|| find_leader(probe)).unwrap_or(1);
        let cut: Vec<u64> = if p.majority { vec![id, id % 3 + 1] } else { vec![id] };
        let silent = p.silent && ns.nft;
        for &id in &cut {
            if silent { ns.set_silent_cut(id, true)? } else { ns.set_link(id, false)? }
        }
        std::thread::sleep(Duration::from_millis(p.for_ms));
        for &id in &cut {
            if silent { ns.set_silent_cut(id, false)? } else { ns.set_link(id, true)? }
        }
        record.quorum_lost = p.majority;
        record.silent_cut = silent;
        record.heal_to_commit_ms = Some(heal_to_commit(config, &cluster.peers)?);
    }
    std::thread::sleep(load_end.saturating_duration_since(Instant::now()));
    Ok(())
}

/// Longest [`heal_to_commit`] waits for a write after a heal.
const HEAL_WRITE_LIMIT: Duration = Duration::from_secs(10);

/// Called at a partition's heal: ms until a PUT (to a key of its own, not
/// the load's) is acknowledged, by a client made at the heal (its own
/// connections are new: the load's clients may sit in the same TCP
/// backoff as the replicas' links, and would measure themselves). Each
/// attempt waits at most 100 ms for its answer, then tries the next
/// replica.
fn heal_to_commit(config: &UcxConfig, peers: &BTreeMap<u64, SocketAddr>) -> Result<f64> {
    let healed = Instant::now();
    let mut probe = SmrClient::new(client_transport(config)?, peers.clone(), session());
    probe.poll = PollBudget::BLOCK;
    probe.attempt_timeout = Duration::from_millis(100);
    probe.timeout = HEAL_WRITE_LIMIT;
    probe.put(b"heal-probe", b"healed").map_err(|e| anyhow!("no write committed within {HEAL_WRITE_LIMIT:?} of the heal: {e}"))?;
    Ok(healed.elapsed().as_secs_f64() * 1e3)
}

/// Starts replica `id` again on its pool; ms until it listens.
fn restart(options: &SmrCrashOptions, network: &Network, cluster: &mut Cluster, id: u64) -> Result<f64> {
    let list = peer_list(&cluster.peers);
    let prefix = network.prefix(id);
    let prefix: Vec<&str> = prefix.iter().map(String::as_str).collect();
    let started = Instant::now();
    let child = start_replica(&options.exe, &variant(options), id, &list, &pool_path(id), &prefix, log_file(id).as_ref())
        .with_context(|| format!("replica {id} did not restart on its pool"))?;
    cluster.children[id as usize - 1] = child;
    Ok(started.elapsed().as_secs_f64() * 1e3)
}

/// The canary's crash: kill -9 every replica, then restart them all.
fn restart_all(options: &SmrCrashOptions, network: &Network, cluster: &mut Cluster) -> Result<()> {
    for child in &mut cluster.children {
        child.kill()?;
        child.wait()?;
    }
    let list = peer_list(&cluster.peers);
    for id in 1..=3u64 {
        let prefix = network.prefix(id);
        let prefix: Vec<&str> = prefix.iter().map(String::as_str).collect();
        cluster.children[id as usize - 1] = start_replica(&options.exe, &variant(options), id, &list, &pool_path(id), &prefix, log_file(id).as_ref())?;
    }
    Ok(())
}

/// The replica that says it leads in the highest term, if any answers so.
fn find_leader(probe: &mut Client) -> Option<u64> {
    leader_and_roles(probe).0
}

/// Polls the replicas other than `victim` until one leads in a term above
/// `term`: ms from `killed` (looks for at most [`WATCH_LIMIT`]; none if the
/// restarted victim won the election). Asking the victim too would retry a
/// connection to a dead process every millisecond, and each failed socket
/// is a chance for UCX 1.13's abort (docs/bench.md, "Replication under
/// kill -9").
fn new_leader_ms(config: &UcxConfig, peers: &BTreeMap<u64, SocketAddr>, victim: u64, term: u64, killed: Instant) -> Option<f64> {
    let mut probe = SmrClient::new(client_transport(config).ok()?, peers.clone(), session());
    probe.poll = PollBudget::BLOCK;
    probe.timeout = Duration::from_millis(100);
    let mut found = None;
    while found.is_none() && killed.elapsed() < WATCH_LIMIT {
        let leads = (1..=3).filter(|&id| id != victim).filter_map(|id| probe.status(id).ok()).any(|s| s.role == 2 && s.term > term);
        if leads {
            found = Some(killed.elapsed().as_secs_f64() * 1e3);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    found
}

/// [`find_leader`], the highest term any replica gave, and every
/// replica's answer in words (`1 leader t2 c40`).
fn leader_and_roles(probe: &mut Client) -> (Option<u64>, u64, String) {
    let saved = probe.timeout;
    probe.timeout = Duration::from_millis(300);
    let replies: Vec<_> = (1..=3).map(|id| (id, probe.status(id))).collect();
    probe.timeout = saved;
    let answers: Vec<_> = replies.iter().map(|(id, r)| (*id, r.as_ref().ok().cloned())).collect();
    let leader = answers.iter().filter_map(|(_, s)| s.as_ref()).filter(|s| s.role == 2).max_by_key(|s| s.term).map(|s| s.id);
    let words: Vec<String> = replies
        .iter()
        .map(|(id, s)| match s {
            Ok(s) => format!("{id} {} t{} c{}", s.role_name(), s.term, s.commit),
            Err(e) => format!("{id} no answer ({e})"),
        })
        .collect();
    let term = answers.iter().filter_map(|(_, s)| s.as_ref()).map(|s| s.term).max().unwrap_or(0);
    (leader, term, words.join(", "))
}

/// Waits until replica `id` has applied the leader's commit index; the wait in ms.
fn catch_up(probe: &mut Client, id: u64) -> Result<f64> {
    let started = Instant::now();
    let saved = probe.timeout;
    probe.timeout = Duration::from_millis(300);
    let mut target = None;
    let mut last_error = None;
    let result = loop {
        if target.is_none() {
            if let Some(leader) = find_leader(probe) {
                match probe.status(leader) {
                    Ok(s) => target = Some(s.commit),
                    Err(e) => last_error = Some(format!("replica {leader}'s status: {e}")),
                }
            }
        }
        match (target, probe.status(id)) {
            (Some(t), Ok(s)) if s.applied >= t => break Ok(started.elapsed().as_secs_f64() * 1e3),
            (_, Ok(_)) => {}
            (_, Err(e)) => last_error = Some(format!("replica {id}'s status: {e}")),
        }
        if started.elapsed() > HEAL_TIMEOUT {
            let (_, _, roles) = leader_and_roles(probe);
            let last = last_error.unwrap_or_else(|| String::from("every status answered"));
            break Err(anyhow!("replica {id} did not catch up with the leader's commit index {target:?} within {HEAL_TIMEOUT:?} (this client's view: {roles}; its last error: {last})"));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    probe.timeout = saved;
    result
}

/// A failed cluster, its replicas still running: each replica's process
/// state (`/proc`), its answer to a client made now, the sockets of its
/// namespace (`ss`), and its threads' stacks (`gdb`, where installed).
fn diagnose(network: &Network, cluster: &Cluster) -> String {
    let mut out = String::new();
    let fresh = network.client_config().and_then(|c| client_transport(&c)).map(|t| {
        let mut c = SmrClient::new(t, cluster.peers.clone(), session());
        c.poll = PollBudget::BLOCK;
        c.timeout = Duration::from_secs(1);
        c
    });
    let mut fresh = fresh.map_err(|e| writeln!(out, "no fresh client: {e:#}").expect("a String")).ok();
    for (i, child) in cluster.children.iter().enumerate() {
        let (id, pid) = (i as u64 + 1, child.id());
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the command's closing parenthesis: state is the 1st, utime and stime the 12th and 13th.
        let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
        let field = |n: usize| fields.get(n).copied().unwrap_or("?");
        let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
        let answer = match fresh.as_mut().map(|c| c.status(id)) {
            Some(Ok(s)) => format!("{} t{} c{} a{}", s.role_name(), s.term, s.commit, s.applied),
            Some(Err(e)) => format!("no answer ({e})"),
            None => "not asked".into(),
        };
        writeln!(out, "replica {id}: pid {pid}, state {} utime {} stime {} (ticks), wchan {wchan}; status {answer}", field(0), field(11), field(12)).expect("a String");
    }
    if let Some(ns) = &network.namespaces {
        for id in 1..=3 {
            writeln!(out, "\n## sockets of replica {id}'s namespace\n{}", ns.sockets(id)).expect("a String");
        }
    }
    // This process (the run's clients and probe): its descriptors, its sockets that the
    // peer closed and it did not, and each thread's CPU time (UCX's `async` thread spun on
    // half-closed sockets once, starving the replicas).
    let fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
    let close_wait = std::fs::read_to_string("/proc/self/net/tcp").map(|t| t.lines().filter(|l| l.split_whitespace().nth(3) == Some("08")).count()).unwrap_or(0);
    writeln!(out, "\n## the run's own process: {fds} descriptors, {close_wait} sockets in CLOSE-WAIT (its namespace)").expect("a String");
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.filter_map(Result::ok) {
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            let comm = stat.split_once('(').and_then(|(_, r)| r.rsplit_once(')')).map_or("?", |(c, _)| c);
            let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
            let field = |n: usize| fields.get(n).copied().unwrap_or("?");
            writeln!(out, "thread {} ({comm}): state {} utime {} stime {} (ticks)", t.file_name().to_string_lossy(), field(0), field(11), field(12)).expect("a String");
        }
    }
    for (i, child) in cluster.children.iter().enumerate() {
        let stacks = std::process::Command::new("gdb")
            .args(["-p", &child.id().to_string(), "-batch", "-ex", "thread apply all bt 10"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).lines().filter(|l| l.starts_with('#') || l.starts_with("Thread")).collect::<Vec<_>>().join("\n"))
            .unwrap_or_else(|e| format!("gdb: {e}"));
        writeln!(out, "\n## replica {}'s threads\n{stacks}", i + 1).expect("a String");
    }
    out
}

fn key(i: usize) -> Vec<u8> {
    format!("k{i}").into_bytes()
}

fn now_ns(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

/// One GET per key on the healed cluster, recorded in `history`.
fn final_reads(probe: &mut Client, keys: usize, epoch: Instant, history: &mut Vec<KvOp>) -> Result<()> {
    for i in 0..keys {
        let call = now_ns(epoch);
        let value = probe.get(&key(i)).map_err(|e| anyhow!("final read of k{i}: {e}"))?;
        history.push(KvOp { key: key(i), call, ret: Some((now_ns(epoch), Output::Value(value))), input: Input::Get });
    }
    Ok(())
}

/// A closed-loop client until `stop`: its history.
fn client_loop(config: &UcxConfig, peers: &BTreeMap<u64, SocketAddr>, me: usize, keys: usize, seed: u64, epoch: Instant, stop: &AtomicBool) -> Result<Vec<KvOp>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut client = SmrClient::new(client_transport(config)?, peers.clone(), session());
    client.poll = PollBudget::BLOCK;
    client.timeout = OP_TIMEOUT;
    let mut seen: Vec<Option<Vec<u8>>> = vec![None; keys];
    let mut history = Vec::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Acquire) {
        let k = rng.gen_range(0..keys);
        n += 1;
        let value = format!("c{me}-{n}").into_bytes();
        let draw = rng.gen_range(0..100);
        let call = now_ns(epoch);
        let (input, result) = match draw {
            0..=39 => (Input::Put(value.clone()), client.put(&key(k), &value).map(|_| Output::Done)),
            40..=69 => (Input::Get, client.get(&key(k)).map(Output::Value)),
            70..=84 => {
                let expect = seen[k].clone();
                let r = client.cas(&key(k), expect.as_deref(), &value).map(|(swapped, _)| Output::Swapped(swapped));
                (Input::Cas { expect, new: value.clone() }, r)
            }
            _ => (Input::Del, client.del(&key(k)).map(|_| Output::Done)),
        };
        let ret = result.ok().map(|out| (now_ns(epoch), out));
        match (&input, &ret) {
            (Input::Put(v), Some(_)) | (Input::Cas { new: v, .. }, Some((_, Output::Swapped(true)))) => seen[k] = Some(v.clone()),
            (Input::Del, Some(_)) => seen[k] = None,
            (Input::Get, Some((_, Output::Value(v)))) => seen[k] = v.clone(),
            _ => {}
        }
        history.push(KvOp { key: key(k), call, ret, input });
    }
    Ok(history)
}

/// True if `op` is an acknowledged write that took effect.
fn acked_write(op: &KvOp) -> bool {
    matches!((&op.input, &op.ret), (Input::Put(_) | Input::Del, Some((_, Output::Done))) | (Input::Cas { .. }, Some((_, Output::Swapped(true)))))
}

/// Acknowledged writes of one key whose effect its final value cannot
/// show. The final value was written by some operation (a PUT or CAS of
/// that unique value; absent: a DEL or the initial state); if every such
/// operation returned before an acknowledged write `w` was called, `w`
/// took effect after the final value's writer and nothing could have
/// overwritten it with that value again: `w` is lost. A final value no
/// operation wrote counts every acknowledged write of the key as lost.
pub fn lost_writes(ops: &[KvOp], last: &Option<Vec<u8>>) -> u64 {
    let end = |op: &KvOp| op.ret.as_ref().map_or(u64::MAX, |r| r.0);
    let wrote_last = |op: &KvOp| match (&op.input, last) {
        (Input::Put(v), Some(l)) => v == l,
        (Input::Cas { new, .. }, Some(l)) => new == l && !matches!(op.ret, Some((_, Output::Swapped(false)))),
        (Input::Del, None) => true,
        _ => false,
    };
    let writers: Vec<u64> = ops.iter().filter(|op| wrote_last(op)).map(end).collect();
    let acked: Vec<&KvOp> = ops.iter().filter(|op| acked_write(op)).collect();
    match writers.iter().max() {
        Some(&latest) => acked.iter().filter(|op| op.call > latest).count() as u64,
        None if last.is_none() => acked.len() as u64, // absent, never deleted: the initial state
        None => acked.len().max(1) as u64,
    }
}

/// Fills the record's counts and checks from the history.
fn check(record: &mut RunRecord, history: &[KvOp]) {
    record.ops = history.len() as u64;
    record.acked_writes = history.iter().filter(|op| acked_write(op)).count() as u64;
    record.unknown = history.iter().filter(|op| op.ret.is_none()).count() as u64;
    if let Some(killed_ns) = record.leader_killed_ns {
        record.recovery_ms = history
            .iter()
            .filter(|op| matches!(op.input, Input::Put(_)) && op.call >= killed_ns)
            .filter_map(|op| op.ret.as_ref().map(|r| r.0))
            .min()
            .map(|ret| (ret - killed_ns) as f64 / 1e6);
    }
    // The final reads are the last GET of each key, called after every client stopped.
    let mut finals: BTreeMap<&[u8], &KvOp> = BTreeMap::new();
    for op in history.iter().filter(|op| op.input == Input::Get && op.ret.is_some()) {
        let latest = finals.entry(&op.key).or_insert(op);
        if op.call > latest.call {
            *latest = op;
        }
    }
    if record.error.is_none() {
        for (key, read) in &finals {
            let Some((_, Output::Value(last))) = &read.ret else { continue };
            let ops: Vec<KvOp> = history.iter().filter(|op| op.key == *key && op.call < read.call).cloned().collect();
            record.lost += lost_writes(&ops, last);
        }
    }
    record.violation = first_violation(history).map(|k| String::from_utf8_lossy(&k).into_owned());
}

/// Copies a failing run's history and replica logs to the output directory.
fn keep_evidence(options: &SmrCrashOptions, record: &RunRecord, history: &[KvOp]) -> Result<()> {
    let dir = options.out_dir.join(format!("smr-crash-run{}-seed{:x}", record.run, record.seed));
    std::fs::create_dir_all(&dir)?;
    let mut text = format!("{record:#?}\n\n# key call_ns ret_ns input -> output (ns since the run's epoch; unknown: no answer)\n");
    let mut sorted: Vec<&KvOp> = history.iter().collect();
    sorted.sort_by_key(|op| (op.key.clone(), op.call));
    for op in sorted {
        let (ret, out) = op.ret.as_ref().map_or(("unknown".to_string(), "?".to_string()), |(t, o)| (t.to_string(), output_text(o)));
        writeln!(text, "{} {} {ret} {} -> {out}", String::from_utf8_lossy(&op.key), op.call, input_text(&op.input))?;
    }
    std::fs::write(dir.join("history.txt"), text)?;
    if let Some(d) = &record.diagnosis {
        std::fs::write(dir.join("diagnosis.txt"), d)?;
        eprintln!("smr-crash: run {}'s cluster when the failure was found:\n{d}", record.run);
    }
    for id in 1..=3 {
        let _ = std::fs::copy(log_path(id), dir.join(format!("replica{id}.log")));
    }
    eprintln!("smr-crash: run {}'s history and replica logs are in {}", record.run, dir.display());
    Ok(())
}

fn show(v: &Option<Vec<u8>>) -> String {
    v.as_ref().map_or("(none)".into(), |v| String::from_utf8_lossy(v).into_owned())
}

fn input_text(i: &Input) -> String {
    match i {
        Input::Put(v) => format!("put {}", String::from_utf8_lossy(v)),
        Input::Get => "get".into(),
        Input::Del => "del".into(),
        Input::Cas { expect, new } => format!("cas {} -> {}", show(expect), String::from_utf8_lossy(new)),
    }
}

fn output_text(o: &Output) -> String {
    match o {
        Output::Done => "done".into(),
        Output::Value(v) => show(v),
        Output::Swapped(s) => format!("swapped={s}"),
    }
}

fn percentile(values: &mut [f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * (values.len() - 1) as f64).round() as usize;
    Some(values[rank])
}

/// The campaign's summary row.
fn summary(options: &SmrCrashOptions, runs: &[RunRecord]) -> BenchResult {
    let sum = |f: fn(&RunRecord) -> u64| runs.iter().map(f).sum::<u64>() as f64;
    let count = |f: fn(&RunRecord) -> bool| runs.iter().filter(|r| f(r)).count() as f64;
    let mut row = BenchResult::new(SUITE, if options.netns { "netns" } else { "loopback" })
        .param("seed", format!("{:#x}", options.seed))
        .metric("runs_count", runs.len() as f64)
        .metric("kills_leader_count", count(|r| r.victim != 0 && r.victim_was_leader))
        .metric("kills_follower_count", count(|r| r.victim != 0 && !r.victim_was_leader))
        .metric("ops_count", sum(|r| r.ops))
        .metric("acked_writes_count", sum(|r| r.acked_writes))
        .metric("unknown_outcome_ops_count", sum(|r| r.unknown))
        .metric("lost_acked_writes_count", sum(|r| r.lost))
        .metric("nonlinearizable_runs_count", count(|r| r.violation.is_some()))
        .metric("failed_runs_count", count(RunRecord::failed))
        .metric("replica_or_cluster_failures_count", count(|r| r.error.is_some()));
    let timings: [(&str, Vec<f64>); 7] = [
        ("heal_to_commit_ms", runs.iter().filter_map(|r| r.heal_to_commit_ms).collect()),
        ("heal_to_commit_silent_ms", runs.iter().filter(|r| r.silent_cut).filter_map(|r| r.heal_to_commit_ms).collect()),
        ("heal_to_commit_quorum_lost_ms", runs.iter().filter(|r| r.quorum_lost).filter_map(|r| r.heal_to_commit_ms).collect()),
        ("leader_recovery_ms", runs.iter().filter_map(|r| r.recovery_ms).collect()),
        ("new_leader_ms", runs.iter().filter_map(|r| r.election_ms).collect()),
        ("restart_ms", runs.iter().filter_map(|r| r.restart_ms).collect()),
        ("catch_up_ms", runs.iter().filter_map(|r| r.catch_up_ms).collect()),
    ];
    for (name, mut values) in timings {
        for (suffix, p) in [("p50", 50.0), ("max", 100.0)] {
            if let Some(v) = percentile(&mut values, p) {
                row = row.metric(&format!("{name}_{suffix}"), v);
            }
        }
    }
    row
}

/// One run as a result row (the JSON keeps every run).
fn run_row(options: &SmrCrashOptions, r: &RunRecord) -> BenchResult {
    let mut row = BenchResult::new("smr_crash_run", if options.netns { "netns" } else { "loopback" })
        .param("run", r.run)
        .param("seed", format!("{:#x}", r.seed))
        .param("victim", r.victim)
        .param("victim_role", if r.victim_was_leader { "leader" } else { "follower" })
        .param("roles_at_kill", r.roles_at_kill.clone())
        .param("linearizable", r.violation.is_none())
        .metric("ops_count", r.ops as f64)
        .metric("acked_writes_count", r.acked_writes as f64)
        .metric("unknown_outcome_ops_count", r.unknown as f64)
        .metric("lost_acked_writes_count", r.lost as f64);
    if options.netns {
        row = row.param("faults", r.faults.clone());
    }
    if let Some(e) = &r.error {
        row = row.param("error", e.clone());
    }
    for (name, v) in [("leader_recovery_ms", r.recovery_ms), ("new_leader_ms", r.election_ms), ("restart_ms", r.restart_ms), ("catch_up_ms", r.catch_up_ms), ("heal_to_commit_ms", r.heal_to_commit_ms)] {
        if let Some(v) = v {
            row = row.metric(name, v);
        }
    }
    row
}

fn write_report(options: &SmrCrashOptions, plan: &Plan, runs: &[RunRecord], note: Option<String>) -> Result<SuiteReport> {
    let summary = summary(options, runs);
    let mut quick = if options.quick { " --quick" } else { "" }.to_string();
    if options.netns {
        quick.push_str(" --netns");
    }
    let parameters = serde_json::json!({
        "command": format!("pmwire bench smr-crash --runs {}{quick} --seed {:#x}", options.runs, options.seed),
        "replicas": 3, "clients": plan.clients, "keys": plan.keys,
        "workload": "closed loop per client: 40% PUT, 30% GET, 15% CAS, 15% DEL, every written value unique",
        "kill": "SIGKILL to one replica per run (half the runs aim at the leader), restarted on its pool after 0 to a few hundred ms",
        "op_timeout_ms": OP_TIMEOUT.as_millis() as u64,
        "network": if options.netns { "3 network namespaces, veth pairs to a bridge; netem delay/loss; partitions by link down or by dropping every packet (nftables)" } else { "loopback" },
        "network_note": note,
        "pool": "tmpfs (emulated pmem, every flush issued)", "log": "pmem, self-validating tail", "transport": "UCX tcp",
    });
    let mut results = vec![summary.clone()];
    results.extend(runs.iter().map(|r| run_row(options, r)));
    std::fs::create_dir_all(&options.out_dir)?;
    let json_path = options.out_dir.join(format!("{SUITE}-{}.json", crate::machine::utc_stamp()));
    let file = SuiteFile {
        suite: SUITE.to_string(),
        pmwire_version: env!("CARGO_PKG_VERSION").to_string(),
        machine: crate::machine::describe(None),
        parameters,
        peers: serde_json::json!({}),
        results,
        skipped: Vec::new(),
        headlines: Vec::new(),
    };
    std::fs::write(&json_path, serde_json::to_string_pretty(&file)? + "\n")?;
    print!("{}", summary_table(&summary, options));
    Ok(SuiteReport { suite: SUITE.to_string(), json_path, headlines: Vec::new() })
}

fn summary_table(s: &BenchResult, options: &SmrCrashOptions) -> String {
    let get = |m: &str| s.get(m).map_or("-".to_string(), |v| if m.ends_with("_ms_p50") || m.ends_with("_ms_max") { format!("{v:.0} ms") } else { format!("{v:.0}") });
    let pair = |a: &str, b: &str| format!("{} / {}", get(a), get(b));
    let rows = vec![
        vec![format!("smr-crash ({})", if options.netns { "netns" } else { "loopback" }), String::new()],
        vec!["runs".into(), get("runs_count")],
        vec!["kills (leader / follower)".into(), pair("kills_leader_count", "kills_follower_count")],
        vec!["ops (unknown outcome)".into(), format!("{} ({})", get("ops_count"), get("unknown_outcome_ops_count"))],
        vec!["acknowledged writes".into(), get("acked_writes_count")],
        vec!["lost acknowledged writes".into(), get("lost_acked_writes_count")],
        vec!["non-linearizable runs".into(), get("nonlinearizable_runs_count")],
        vec!["replica or cluster failures".into(), get("replica_or_cluster_failures_count")],
        vec!["recovery after a leader kill (p50 / max)".into(), pair("leader_recovery_ms_p50", "leader_recovery_ms_max")],
        vec!["new leader after a leader kill (p50 / max)".into(), pair("new_leader_ms_p50", "new_leader_ms_max")],
        vec!["heal to a committed write (p50 / max)".into(), pair("heal_to_commit_ms_p50", "heal_to_commit_ms_max")],
        vec!["  of which quorum lost (p50 / max)".into(), pair("heal_to_commit_quorum_lost_ms_p50", "heal_to_commit_quorum_lost_ms_max")],
        vec!["  of which silent cuts (p50 / max)".into(), pair("heal_to_commit_silent_ms_p50", "heal_to_commit_silent_ms_max")],
        vec!["restart to listening (p50 / max)".into(), pair("restart_ms_p50", "restart_ms_max")],
        vec!["restarted replica catches up (p50 / max)".into(), pair("catch_up_ms_p50", "catch_up_ms_max")],
    ];
    table::render(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(call: u64, ret: Option<(u64, Output)>, input: Input) -> KvOp {
        KvOp { key: b"k".to_vec(), call, ret, input }
    }

    fn put(v: &str) -> Input {
        Input::Put(v.as_bytes().to_vec())
    }

    #[test]
    fn a_final_value_older_than_an_acknowledged_put_counts_it_lost() {
        let h = [op(0, Some((1, Output::Done)), put("a")), op(2, Some((3, Output::Done)), put("b"))];
        assert_eq!(lost_writes(&h, &Some(b"b".to_vec())), 0);
        assert_eq!(lost_writes(&h, &Some(b"a".to_vec())), 1);
        assert_eq!(lost_writes(&h, &None), 2);
        assert_eq!(lost_writes(&h, &Some(b"zz".to_vec())), 2);
    }

    #[test]
    fn concurrent_and_unknown_writes_may_explain_the_final_value() {
        // "a" overlaps "b": either may be last.
        let h = [op(0, Some((5, Output::Done)), put("a")), op(2, Some((3, Output::Done)), put("b"))];
        assert_eq!(lost_writes(&h, &Some(b"a".to_vec())), 0);
        // An unknown DEL may take effect at any time after its call.
        let h = [op(0, None, Input::Del), op(2, Some((3, Output::Done)), put("b"))];
        assert_eq!(lost_writes(&h, &None), 0);
        // A CAS that did not swap wrote nothing.
        let h = [op(0, Some((1, Output::Swapped(false))), Input::Cas { expect: None, new: b"c".to_vec() }), op(2, Some((3, Output::Done)), put("b"))];
        assert_eq!(lost_writes(&h, &Some(b"c".to_vec())), 1);
    }

    #[test]
    fn run_seeds_differ_and_replay() {
        assert_ne!(run_seed(1, 0), run_seed(1, 1));
        assert_eq!(run_seed(7, 3), run_seed(7, 3));
    }
}
