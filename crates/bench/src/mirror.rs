//! `pmwire bench mirror`: seed 002 §7.1's Transact microbenchmark over
//! the real mirror. Every transaction of a configuration `e-w` has `e`
//! epochs of `w` writes of 64 B at random 64 B-aligned places of a 16 MiB
//! data area, an ordering fence between epochs, then a commit. Each is
//! run with NO-SM (the heap alone, on its own pool) and mirrored with
//! SM-RC, SM-OB and SM-DD to a backup (`pmwire_mirror::BackupService` on
//! its own thread, on an emulated pool, over UCX tcp or sm); the result is
//! each strategy's time per transaction and its slowdown over NO-SM (the
//! seed's Fig 4). Rounds are interleaved (each round runs every strategy
//! in turn over every configuration, the same transactions for each), and
//! a strategy's time is the median of its rounds'.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pmem::Region;
use pmwire_mirror::{Backup, BackupService, Heap, Mirror, Strategy};
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;
use reactor::{PollBudget, Reactor, RealClock};
use link::{LinkConfig, LinkTransport, Secret};
use transport::UcxTransport;

use crate::kv::placement::{LoadProbe, Placement};
use crate::remote::common::ratio;
use crate::remote::server::{shm_path, ucx_config};
use crate::schema::BenchResult;
use crate::measure::median;
use crate::{table, SuiteReport};

/// The bench name in results (one per transport: `mirror_transact_tcp`).
pub const BENCH: &str = "mirror_transact";
/// The heap's data area.
pub const DATA_BYTES: u64 = 16 << 20;
/// The heap's log: 256 epochs of 8 writes of 64 B fit.
pub const LOG_BYTES: u64 = 256 << 10;
/// Bytes of each write.
pub const WRITE_BYTES: usize = 64;
/// The share of the CPUs other processes may take during a transport's run
/// before the suite says its times are not to be trusted (a quiet run here
/// reads 2-7%: kernel work the process is not charged for).
const OTHER_LOAD_WARNING: f64 = 0.15;
/// The mirrored strategies, in the order each round runs them.
const MIRRORED: [Strategy; 3] = [Strategy::SmRc, Strategy::SmOb, Strategy::SmDd];

/// How the suite runs.
#[derive(Clone, Debug)]
pub struct MirrorOptions {
    /// A short run.
    pub quick: bool,
    /// `tcp`, `sm`.
    pub transports: Vec<String>,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
    /// Run one part only (`None`: every part).
    pub only: Option<Part>,
}

/// A part of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Seed 002 §7.1's Transact.
    Transact,
    /// Seed 002 §7.2's WHISPER-like applications ([`crate::whisper`]).
    Whisper,
    /// NO-SM beside libpmemobj on Transact ([`crate::mirror_peer`]).
    Pmemobj,
}

impl Part {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Part::Transact => "transact",
            Part::Whisper => "whisper",
            Part::Pmemobj => "pmemobj",
        }
    }

    /// Parses a command-line name.
    pub fn parse(name: &str) -> Option<Part> {
        [Part::Transact, Part::Whisper, Part::Pmemobj].into_iter().find(|p| p.name() == name)
    }
}

impl MirrorOptions {
    fn runs(&self, part: Part) -> bool {
        self.only.is_none_or(|p| p == part)
    }

    fn command(&self) -> String {
        let mut c = "pmwire bench mirror".to_string();
        if self.quick {
            c.push_str(" --quick");
        }
        if let Some(p) = self.only {
            c.push_str(&format!(" --only {}", p.name()));
        }
        c
    }
}

/// One Transact configuration: epochs per transaction, writes per epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Epochs per transaction.
    pub epochs: u32,
    /// Writes per epoch.
    pub writes: u32,
}

impl Config {
    /// The seed's label, `e-w`.
    pub fn label(&self) -> String {
        format!("{}-{}", self.epochs, self.writes)
    }
}

/// The configurations run: epochs 1-256 × writes 1-8 (quick: fewer).
pub fn configs(quick: bool) -> Vec<Config> {
    let (epochs, writes): (&[u32], &[u32]) =
        if quick { (&[1, 4, 16, 64, 256], &[1, 8]) } else { (&[1, 2, 4, 8, 16, 32, 64, 128, 256], &[1, 2, 4, 8]) };
    epochs.iter().flat_map(|&e| writes.iter().map(move |&w| Config { epochs: e, writes: w })).collect()
}

/// Transactions per round of one strategy: about the same number of
/// epochs for every configuration.
pub(crate) fn transactions(config: Config, quick: bool) -> u64 {
    let epochs = if quick { 2048 } else { 32768 };
    (epochs / u64::from(config.epochs)).max(if quick { 8 } else { 64 })
}

/// Rounds of a run. A full run's 4 rounds give each strategy 1,046,528
/// transactions per transport (4 × 261,632 over the 36 configurations),
/// the 1 M of seed 002 §7.1.
fn rounds(quick: bool) -> u64 {
    if quick {
        5
    } else {
        4
    }
}

/// A backup serving on its own thread until dropped.
pub(crate) struct BackupThread {
    pub(crate) addr: std::net::SocketAddr,
    /// The secret its primary proves (the backup runs behind a link, as
    /// `pmwire mirror-backup` does).
    pub(crate) secret: Secret,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pool: PathBuf,
}

impl BackupThread {
    pub(crate) fn start(name: &str, tls: &str, placement: &Placement) -> Result<BackupThread> {
        let pool = shm_path(&format!("{name}-{tls}.pool"));
        let _ = std::fs::remove_file(&pool);
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let secret = Secret::random();
        let (tls_owned, path, stop2, placement, secret2) = (tls.to_string(), pool.clone(), stop.clone(), placement.clone(), secret.clone());
        let thread = std::thread::Builder::new().name("pmwire-mirror-backup".into()).spawn(move || {
            let started = (|| -> Result<_> {
                placement.pin_current_as_server()?;
                let mut region = Region::create(&path, Heap::required_size(LOG_BYTES, DATA_BYTES))?;
                let backup = Backup::create(&mut region, 0, LOG_BYTES, DATA_BYTES)?;
                let mut t = UcxTransport::new(&ucx_config(&tls_owned, true, false)?)?;
                let addr = t.listen("127.0.0.1:0".parse()?)?;
                let t = LinkTransport::real(t, secret2, LinkConfig::mirror_backup());
                Ok((Reactor::new(t, BackupService::new(region, backup)), addr))
            })();
            match started {
                Ok((mut reactor, addr)) => {
                    tx.send(Ok(addr)).expect("starter waits");
                    reactor.run(&RealClock::new(), &stop2, PollBudget::default());
                }
                Err(e) => tx.send(Err(e)).expect("starter waits"),
            }
        })?;
        let addr = rx.recv_timeout(Duration::from_secs(30)).map_err(|_| anyhow!("backup start timed out"))??;
        Ok(BackupThread { addr, secret, stop, thread: Some(thread), pool })
    }
}

impl Drop for BackupThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.pool);
    }
}

/// A heap on its own emulated pool.
pub(crate) struct Primary {
    pub(crate) region: Region,
    pub(crate) heap: Heap,
    path: PathBuf,
}

impl Primary {
    pub(crate) fn create(name: &str) -> Result<Primary> {
        let path = shm_path(name);
        let _ = std::fs::remove_file(&path);
        let mut region = Region::create(&path, Heap::required_size(LOG_BYTES, DATA_BYTES))?;
        let heap = Heap::create(&mut region, 0, LOG_BYTES, DATA_BYTES)?;
        Ok(Primary { region, heap, path })
    }
}

impl Drop for Primary {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Runs `count` Transact transactions of `config` (drawn from `seed`)
/// through `mirror`; the mean time per transaction (ns).
fn transact(
    primary: &mut Primary,
    mirror: &mut Mirror<LinkTransport<UcxTransport>>,
    config: Config,
    count: u64,
    seed: u64,
) -> Result<f64> {
    let mut rng = SplitMix64::seed_from_u64(seed);
    let mut bytes = [0u8; WRITE_BYTES];
    let lines = DATA_BYTES / WRITE_BYTES as u64;
    let start = Instant::now();
    for i in 0..count {
        let mut tx = primary.heap.begin_with(&mut primary.region, &mut *mirror);
        for e in 0..config.epochs {
            for _ in 0..config.writes {
                bytes[0] = i as u8;
                tx.write((rng.next_u64() % lines) * WRITE_BYTES as u64, &bytes)?;
            }
            if e + 1 < config.epochs {
                tx.ofence()?;
            }
        }
        tx.commit()?;
    }
    Ok(start.elapsed().as_nanos() as f64 / count as f64)
}

pub(crate) fn progress(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if std::io::stderr().is_terminal() {
        bar.set_style(
            ProgressStyle::with_template("mirror [{bar:30}] {pos}/{len} {msg}")
                .expect("template")
                .progress_chars("=> "),
        );
    } else {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar
}

/// Runs the suite.
pub fn run(options: &MirrorOptions) -> Result<SuiteReport> {
    let configs = if options.runs(Part::Transact) { configs(options.quick) } else { Vec::new() };
    let rounds = rounds(options.quick);
    if options.runs(Part::Transact) {
        println!(
            "mirror: Transact, {} configurations x {{NO-SM, SM-RC, SM-OB, SM-DD}} x {} rounds over {}; primary and backup are two threads of one process pinned to different CPUs, both poll 30 us after activity, then block",
            configs.len(),
            rounds,
            options.transports.join(", ")
        );
    }
    if options.runs(Part::Whisper) {
        println!(
            "mirror: WHISPER-like hashmap, ctree, echo (a master and {} clients), ycsb x {{NO-SM, SM-RC, SM-OB, SM-DD}} x {} rounds over {}, placed as Transact",
            crate::whisper::ECHO_CLIENTS,
            crate::whisper::rounds(options.quick),
            options.transports.join(", ")
        );
    }
    // The backup on one CPU, the primary on the other (as the KV suites
    // pin server and load): on 2 cores, both threads on one CPU make every
    // round trip a context switch, and a run would measure placement.
    // PMDK is loaded (and its flag set) before any other thread starts.
    let pmemobj = options.runs(Part::Pmemobj).then(crate::pmdk::libpmemobj);
    let placement = Placement::split();
    let cpus = crate::kv::placement::allowed_cpus().len();
    placement.as_load(|| run_pinned(options, &configs, rounds, &placement, cpus, pmemobj))
}

fn run_pinned(
    options: &MirrorOptions,
    configs: &[Config],
    rounds: u64,
    placement: &Placement,
    cpus: usize,
    pmemobj: Option<Result<&'static crate::pmdk::Libpmemobj, String>>,
) -> Result<SuiteReport> {
    let per_transport = u64::from(options.runs(Part::Transact)) * rounds
        + u64::from(options.runs(Part::Whisper)) * crate::whisper::rounds(options.quick);
    let peer_rounds = if pmemobj.is_some() { rounds } else { 0 };
    let bar = progress(options.transports.len() as u64 * per_transport * Strategy::ALL.len() as u64 + peer_rounds);
    let mut results = Vec::new();
    let mut skipped = Vec::new();
    let mut headlines = Vec::new();
    for tls in options.transports.iter().filter(|_| options.runs(Part::Transact)) {
        let probe = LoadProbe::start_in_process(cpus)?;
        let backup =
            BackupThread::start("mirror-backup", tls, placement).with_context(|| format!("backup over {tls}"))?;
        let mut local = Primary::create(&format!("mirror-local-{tls}.pool"))?;
        let mut mirrored = Primary::create(&format!("mirror-primary-{tls}.pool"))?;
        // times[config][strategy]: one mean per round.
        let mut times: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); 4]; configs.len()];
        for round in 0..rounds {
            // Each round runs every strategy once over every configuration,
            // on one connection per strategy (a close over sm makes UCX log
            // a flush timeout of the peer's endpoint, so connections are few).
            for (s, strategy) in Strategy::ALL.into_iter().enumerate() {
                bar.set_message(format!("{tls} {strategy} (round {}/{rounds})", round + 1));
                let target = if strategy == Strategy::NoSm { &mut local } else { &mut mirrored };
                let t = LinkTransport::real(UcxTransport::new(&ucx_config(tls, true, false)?)?, backup.secret.clone(), LinkConfig::mirror_primary());
                let mut mirror = Mirror::open(&target.heap, &target.region, t, &backup.addr, strategy)
                    .with_context(|| format!("{strategy} over {tls}"))?;
                for (c, &config) in configs.iter().enumerate() {
                    let seed = 0x7472_616e ^ (u64::from(config.epochs) << 8) ^ u64::from(config.writes) ^ (round << 32);
                    let count = transactions(config, options.quick);
                    times[c][s].push(transact(target, &mut mirror, config, count, seed)?);
                }
                bar.inc(1);
            }
        }
        let other = probe.other_share()?;
        println!(
            "{tls}: other processes took {:.0}% of the CPUs meanwhile{}",
            other * 100.0,
            if other > OTHER_LOAD_WARNING {
                " (more than 15%: the times below measure the contention as much as the mirror)"
            } else {
                ""
            }
        );
        let mut cell_results = Vec::new();
        for (c, &config) in configs.iter().enumerate() {
            let medians: Vec<f64> = times[c].iter_mut().map(|t| median(t)).collect();
            let mut r = BenchResult::new(&format!("{BENCH}_{tls}"), &config.label())
                .param("transport", tls.as_str())
                .param("epochs", config.epochs)
                .param("writes_per_epoch", config.writes)
                .param("transactions_per_round", transactions(config, options.quick))
                .metric("no_sm_tx_us", medians[0] / 1e3)
                .metric("other_processes_cpu_share", other);
            for (i, strategy) in MIRRORED.into_iter().enumerate() {
                let key = strategy.name().to_ascii_lowercase().replace('-', "_");
                r = r.metric(&format!("{key}_tx_us"), medians[i + 1] / 1e3);
                r = r.metric(&format!("{key}_slowdown_x"), medians[i + 1] / medians[0]);
                r = r.metric(&format!("model_{key}_slowdown_x"), model_slowdown(strategy, config));
            }
            cell_results.push(r);
        }
        headlines.extend(beats_rc(tls, &cell_results));
        results.extend(cell_results);
    }
    for tls in options.transports.iter().filter(|_| options.runs(Part::Whisper)) {
        let probe = LoadProbe::start_in_process(cpus)?;
        let (r, h) = crate::whisper::run_transport(tls, options.quick, placement, &bar, || {
            let other = probe.other_share()?;
            println!(
                "{tls} (WHISPER-like): other processes took {:.0}% of the CPUs meanwhile{}",
                other * 100.0,
                if other > OTHER_LOAD_WARNING { " (more than 15%: the times measure the contention too)" } else { "" }
            );
            Ok(other)
        })?;
        results.extend(r);
        headlines.extend(h);
    }
    if let Some(library) = pmemobj {
        let (r, s, h) = crate::mirror_peer::run(library, &self::configs(options.quick), rounds, options.quick, &bar)?;
        results.extend(r);
        skipped.extend(s);
        headlines.extend(h);
    }
    bar.finish_and_clear();
    if options.runs(Part::Transact) {
        print!("{}", slowdown_table(&results));
    }
    if options.runs(Part::Whisper) {
        print!("{}", crate::whisper::table(&results));
    }
    if options.runs(Part::Pmemobj) {
        print!("{}", crate::mirror_peer::table(&results));
    }
    let parameters = serde_json::json!({
        "command": options.command(),
        "whisper": options.runs(Part::Whisper).then(|| serde_json::json!({
            "workloads": crate::whisper::Workload::ALL.map(|w| serde_json::json!({"name": w.name(), "operations_per_round": w.operations(options.quick)})),
            "rounds": crate::whisper::rounds(options.quick), "keys": crate::whisper::KEYS,
            "echo_clients": crate::whisper::ECHO_CLIENTS, "echo_batch": crate::whisper::ECHO_BATCH,
        })),
        "configs": configs.iter().map(Config::label).collect::<Vec<_>>(),
        "rounds": rounds, "transports": options.transports, "data_bytes": DATA_BYTES, "log_bytes": LOG_BYTES,
        "write_bytes": WRITE_BYTES, "placement": placement.describe(),
        "note": "NO-SM on its own pool, the mirrored strategies on another (a primary must match its backup); each round runs every strategy on the same transactions; time per transaction is the median of the rounds' means",
    });
    let peers = if options.runs(Part::Pmemobj) { crate::pmdk::describe() } else { serde_json::json!({}) };
    crate::remote::common::finish_with_peers("mirror", &options.out_dir, parameters, peers, results, skipped, headlines)
}

/// SM-OB and SM-DD each beat SM-RC in every configuration with more than
/// one epoch: the worst SM-RC / SM-OB and SM-RC / SM-DD ratio.
fn beats_rc(tls: &str, cell: &[BenchResult]) -> Vec<crate::Headline> {
    let worst = |other: &str| {
        cell.iter()
            .filter(|r| r.params.get("epochs").and_then(|e| e.as_u64()).is_some_and(|e| e > 1))
            .filter_map(|r| Some(r.get("sm_rc_tx_us")? / r.get(&format!("{other}_tx_us"))?))
            .fold(None, |acc: Option<f64>, v| Some(acc.map_or(v, |a| a.min(v))))
    };
    ["sm_ob", "sm_dd"]
        .into_iter()
        .map(|other| {
            let name = format!(
                "{tls}: SM-RC / {} time per transaction (worst Transact configuration with > 1 epoch)",
                other.to_ascii_uppercase().replace('_', "-")
            );
            ratio(&name, worst(other), 1.0, true, "SM-RC, same run")
        })
        .collect()
}

/// The hardware model's slowdown of `strategy` for `config` on seed 002's
/// RDMA testbed (`pmwire_model::mirror`, `pmwire model mirror`): what the
/// seed's system would do, beside what ours does over UCX.
fn model_slowdown(strategy: Strategy, config: Config) -> f64 {
    use pmwire_model::mirror::{slowdown, Shape, Strategy as Modelled};
    let modelled = match strategy {
        Strategy::NoSm => Modelled::NoSm,
        Strategy::SmRc => Modelled::SmRc,
        Strategy::SmOb => Modelled::SmOb,
        Strategy::SmDd => Modelled::SmDd,
    };
    let shape = Shape::transact(config.epochs as usize, config.writes as usize);
    slowdown(&pmwire_model::params::Params::published(), modelled, shape)
}

/// The seed's Fig 4 as text: one row per configuration, each strategy's
/// slowdown over NO-SM, per transport, and the model's for seed 002's
/// RDMA testbed.
fn slowdown_table(results: &[BenchResult]) -> String {
    let mut rows = vec![vec![
        "transport".to_string(),
        "e-w".to_string(),
        "NO-SM us/tx".to_string(),
        "SM-RC".to_string(),
        "SM-OB".to_string(),
        "SM-DD".to_string(),
        "model: SM-RC".to_string(),
        "SM-OB".to_string(),
        "SM-DD".to_string(),
    ]];
    for r in results.iter().filter(|r| r.bench.starts_with(BENCH)) {
        let cell = |k: &str| r.get(k).map_or("-".to_string(), |v| format!("{}x", table::num(v)));
        rows.push(vec![
            r.params.get("transport").and_then(|t| t.as_str()).unwrap_or("?").to_string(),
            r.variant.clone(),
            r.get("no_sm_tx_us").map_or("-".to_string(), table::num),
            cell("sm_rc_slowdown_x"),
            cell("sm_ob_slowdown_x"),
            cell("sm_dd_slowdown_x"),
            cell("model_sm_rc_slowdown_x"),
            cell("model_sm_ob_slowdown_x"),
            cell("model_sm_dd_slowdown_x"),
        ]);
    }
    format!(
        "\nslowdown over NO-SM (seed 002 Fig 4), median of rounds; model: seed 002's RDMA testbed (pmwire model mirror)\n{}",
        table::render(&rows)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_cover_the_seeds_ranges() {
        let full = configs(false);
        assert_eq!(full.len(), 36);
        assert_eq!(full.first(), Some(&Config { epochs: 1, writes: 1 }));
        assert_eq!(full.last(), Some(&Config { epochs: 256, writes: 8 }));
        assert!(configs(true).iter().all(|c| full.contains(c)));
        let biggest = Config { epochs: 256, writes: 8 };
        let per_epoch = 24 + u64::from(biggest.writes) * (16 + WRITE_BYTES as u64);
        assert!(u64::from(biggest.epochs) * per_epoch <= LOG_BYTES, "the largest transaction fits the log");
        assert_eq!(Config { epochs: 16, writes: 2 }.label(), "16-2");
    }
}
