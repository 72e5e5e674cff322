//! `pmwire check fuzz`: the in-tree fuzzer (`pmwire_remote::fuzz`) against
//! the server core and against `pmwire serve` over UCX tcp and shared
//! memory. Prints the seed first, a progress line on a terminal, then per
//! target the requests sent, the rate, the replies by status and the checks
//! done, and PASS or FAIL with the command that replays the failure.
//!
//! Each target runs two phases, half the time each: a server with an
//! 8-deep copy engine, then one without (the core phase without also
//! requires payload checksums). Phase 0 uses the seed, phase 1 the seed + 1;
//! `--copy-engine` runs one phase with the seed as given.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pmwire_bench::remote::server::{shm_path, ServeChild};
use pmwire_remote::fuzz::{self, CoreServer, Failure, FailureKind, FuzzConfig, NetServer, Report, Serving};
use pmwire_remote::proto::{Opcode, Status, DEFAULT_MAX_PAYLOAD_BYTES};
use transport::UcxTransport;

/// `pmwire check fuzz`.
#[derive(Args, Clone)]
pub struct FuzzArgs {
    /// Seconds to fuzz each target.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seed of every draw (default: from the clock); printed first.
    #[arg(long)]
    seed: Option<u64>,
    /// Which target: the server core, `pmwire serve` over tcp or sm, or all three.
    #[arg(long, default_value = "all", value_parser = ["core", "tcp", "sm", "all"])]
    target: String,
    /// Stop each target after this many requests (whichever of time and count comes first).
    #[arg(long)]
    requests: Option<u64>,
    /// Run one phase only: the server's copy-engine depth (0 or 8), with the seed as given.
    #[arg(long, value_parser = parse_depth)]
    copy_engine: Option<usize>,
    /// Requests pipelined per window on the network targets (1-32).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=32))]
    window: u64,
    /// Serve tcp and sm from a server thread in this process, which grants each connection different rights, instead of a `pmwire serve` child.
    #[arg(long)]
    in_process: bool,
}

impl FuzzArgs {
    /// A short run of every target, `seconds` each, for the tour.
    pub fn tour(seconds: u64) -> FuzzArgs {
        FuzzArgs { seconds, seed: None, target: "all".into(), requests: None, copy_engine: None, window: 16, in_process: false }
    }
}

/// One phase: a target with one server configuration.
#[derive(Clone, Copy, Debug)]
enum Phase {
    Core(CoreServer),
    Net { tls: &'static str, copy_depth: usize },
}

impl Phase {
    fn target(&self) -> &'static str {
        match self {
            Phase::Core(_) => "core",
            Phase::Net { tls, .. } => tls,
        }
    }

    fn copy_depth(&self) -> usize {
        match self {
            Phase::Core(server) => server.copy_depth,
            Phase::Net { copy_depth, .. } => *copy_depth,
        }
    }
}

/// Runs the fuzzer as `args` say; prints the report; returns whether it passed.
pub fn run(args: &FuzzArgs) -> Result<bool> {
    let seed = args.seed.unwrap_or_else(clock_seed);
    println!("pmwire check fuzz: seed {seed} (replay with --seed {seed})");
    let targets: Vec<&str> = if args.target == "all" { vec!["core", "tcp", "sm"] } else { vec![args.target.as_str()] };
    let bar = progress_bar();
    let mut totals: Vec<(String, Report)> = Vec::new();
    for target in targets {
        let phases = phases(target, args.copy_engine);
        let mut total = Report { target: target.to_string(), seed, ..Report::default() };
        for (i, phase) in phases.iter().enumerate() {
            let config = phase_config(args, seed + if args.copy_engine.is_some() { 0 } else { i as u64 }, phases.len() as u32);
            let result = run_phase(args, *phase, &config, &bar);
            bar.set_message(String::new());
            match result {
                Ok(report) => {
                    print_phase(&report);
                    total.absorb(&report);
                }
                Err(failure) => {
                    bar.finish_and_clear();
                    print_failure(args, *phase, &failure);
                    return Ok(false);
                }
            }
        }
        totals.push((target.to_string(), total));
    }
    bar.finish_and_clear();
    print_summary(&totals);
    println!("PASS (seed {seed})");
    Ok(true)
}

fn parse_depth(s: &str) -> Result<usize, String> {
    match s {
        "0" => Ok(0),
        "8" => Ok(8),
        _ => Err(format!("copy-engine depth '{s}': 0 or 8")),
    }
}

fn clock_seed() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (std::process::id() as u64) << 32
}

fn phases(target: &str, only: Option<usize>) -> Vec<Phase> {
    let phase = |depth: usize| match target {
        "core" => Phase::Core(CoreServer { copy_depth: depth, require_payload_crc: depth == 0 }),
        "tcp" => Phase::Net { tls: "tcp", copy_depth: depth },
        _ => Phase::Net { tls: "sm", copy_depth: depth },
    };
    match only {
        Some(depth) => vec![phase(depth)],
        None => vec![phase(8), phase(0)],
    }
}

fn phase_config(args: &FuzzArgs, seed: u64, phases: u32) -> FuzzConfig {
    let requests = args.requests.map_or(u64::MAX, |r| r.div_ceil(phases as u64));
    let time = Duration::from_secs(args.seconds) / phases;
    FuzzConfig {
        window: args.window as usize,
        ..FuzzConfig::new(seed, requests, time)
    }
}

fn progress_bar() -> ProgressBar {
    let target = if std::io::stderr().is_terminal() { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
    let bar = ProgressBar::with_draw_target(None, target);
    bar.set_style(ProgressStyle::with_template("{elapsed_precise} {spinner} {msg}").expect("a valid template"));
    bar
}

/// Runs one phase as a sequence of epochs, each on a fresh server with its
/// own seed (epoch 0: the phase's seed), so that long runs keep creating
/// logs in an empty directory instead of fuzzing a full one. A failure
/// names its epoch's seed, which replays it as epoch 0.
fn run_phase(args: &FuzzArgs, phase: Phase, config: &FuzzConfig, bar: &ProgressBar) -> Result<Report, Failure> {
    let started = std::time::Instant::now();
    let mut total = Report { seed: config.seed, ..Report::default() };
    for epoch in 0u64.. {
        let time_left = config.max_time.saturating_sub(started.elapsed());
        let requests_left = config.max_requests.saturating_sub(total.requests);
        if requests_left == 0 || time_left < MIN_EPOCH_TIME {
            break;
        }
        let seed = if epoch == 0 { config.seed } else { mix(config.seed, epoch) };
        let epoch_requests = if matches!(phase, Phase::Core(_)) { CORE_EPOCH_REQUESTS } else { NET_EPOCH_REQUESTS };
        let epoch_config = FuzzConfig { seed, max_requests: requests_left.min(epoch_requests), max_time: time_left, ..config.clone() };
        let done = total.clone();
        let mut progress = |r: &Report| {
            let (requests, elapsed) = (done.requests + r.requests, started.elapsed().as_secs_f64());
            bar.set_message(format!("{}: epoch {epoch}, {requests} requests, {:.0}/s", r.target, requests as f64 / elapsed));
            bar.tick();
        };
        let report = run_epoch(args, phase, &epoch_config, &mut progress)?;
        total.target = report.target.clone();
        total.absorb(&report);
    }
    total.elapsed = started.elapsed();
    Ok(total)
}

/// Requests per epoch: the core's 16-slot directory fills within a few
/// thousand requests; `pmwire serve`'s 64 slots take longer, and a restart costs more.
const CORE_EPOCH_REQUESTS: u64 = 250_000;
const NET_EPOCH_REQUESTS: u64 = 500_000;
/// An epoch is not started with less time than this left.
const MIN_EPOCH_TIME: Duration = Duration::from_millis(500);

/// SplitMix64's finaliser over `seed + epoch`: epoch seeds that do not collide.
fn mix(seed: u64, epoch: u64) -> u64 {
    let mut z = seed.wrapping_add(epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn run_epoch(args: &FuzzArgs, phase: Phase, config: &FuzzConfig, progress: &mut dyn FnMut(&Report)) -> Result<Report, Failure> {
    match phase {
        Phase::Core(server) => fuzz::run_core(config, server, progress),
        Phase::Net { tls, copy_depth } if args.in_process => fuzz::run_thread(config, tls, copy_depth, progress),
        Phase::Net { tls, copy_depth } => run_child(config, tls, copy_depth, progress),
    }
}

/// A `pmwire serve` child (this executable) on a fresh /dev/shm pool.
struct ChildServer {
    child: ServeChild,
    pool: PathBuf,
    tls: &'static str,
    copy_depth: usize,
}

impl NetServer for ChildServer {
    fn name(&self) -> String {
        format!("{} (pmwire serve, pid {}, copy engine depth {})", self.tls, self.child.pid(), self.copy_depth)
    }

    fn serving(&self) -> Serving {
        Serving { max_payload: DEFAULT_MAX_PAYLOAD_BYTES, require_payload_crc: false, copy_engine: self.copy_depth > 0, pin: None }
    }

    fn grant(&mut self, _rights: &[u8]) -> Result<bool, String> {
        Ok(false)
    }

    fn pool_path(&self) -> &Path {
        &self.pool
    }

    fn dead(&mut self) -> Option<String> {
        self.child.exited().map(|status| format!("pmwire serve exited: {status}"))
    }
}

fn run_child(config: &FuzzConfig, tls: &'static str, copy_depth: usize, progress: &mut dyn FnMut(&Report)) -> Result<Report, Failure> {
    let setup = |detail: String| Failure { target: tls.to_string(), seed: config.seed, request: 0, kind: FailureKind::Setup, detail };
    let pool = shm_path(&format!("fuzz-{tls}-{copy_depth}.pool"));
    let key_file = shm_path(&format!("fuzz-{tls}-{copy_depth}.key"));
    let _ = std::fs::remove_file(&pool);
    let exe = std::env::current_exe().map_err(|e| setup(format!("this executable: {e}")))?;
    let size = fuzz::NET_REGION_BYTES.to_string();
    let child = ServeChild::start(&exe, &pool, &size, tls, copy_depth, false, &key_file).map_err(|e| setup(format!("pmwire serve: {e:#}")))?;
    let addr = child.keys.socket().map_err(|e| setup(format!("{e:#}")))?;
    let mut server = ChildServer { child, pool: pool.clone(), tls, copy_depth };
    let ucx = fuzz::ucx_config(tls).expect("tcp or sm");
    let mut transport = UcxTransport::new(&ucx).map_err(|e| setup(format!("client transport: {e}")))?;
    let result = fuzz::run_net(config, &mut transport, &addr, &mut server, progress);
    drop(transport);
    drop(server);
    let _ = std::fs::remove_file(&pool);
    let _ = std::fs::remove_file(&key_file);
    result
}

fn print_phase(r: &Report) {
    println!(
        "{:<62} {:>10} requests {:>9.0}/s  {:>5.1}% mutated  {:>3} checkpoints  ok",
        r.target,
        r.requests,
        r.rate(),
        100.0 * r.mutated as f64 / r.requests.max(1) as f64,
        r.checkpoints
    );
}

fn print_summary(totals: &[(String, Report)]) {
    println!();
    for (target, r) in totals {
        println!("{target}: {} requests in {:.1} s ({:.0}/s), {} replies checked byte for byte", r.requests, r.elapsed.as_secs_f64(), r.rate(), r.replies_checked);
        let statuses: Vec<String> = (0..r.statuses.len())
            .filter(|&i| r.statuses[i] > 0)
            .map(|i| format!("{:?} {}", Status::from_u16(i as u16).expect("a status code"), r.statuses[i]))
            .collect();
        println!("  replies by status: {}", statuses.join(", "));
        let ok: Vec<String> = (1..r.ok_by_opcode.len())
            .map(|i| format!("{:?} {}", Opcode::from_u8(i as u8).expect("an opcode"), r.ok_by_opcode[i]))
            .collect();
        println!("  ok by opcode: {}", ok.join(", "));
        println!(
            "  checks: {} checkpoints ({:.0} MB of data area and {} log entries compared with the model; superblock, directory, canaries intact), {} restarts on the same pool; {} draws re-aimed off the canaries",
            r.checkpoints,
            r.data_bytes_compared as f64 / 1e6,
            r.log_entries_compared,
            r.restarts,
            r.rerolled
        );
    }
}

fn print_failure(args: &FuzzArgs, phase: Phase, failure: &Failure) {
    println!("{failure}");
    let mut replay = format!(
        "pmwire check fuzz --target {} --copy-engine {} --seed {} --requests {} --seconds 3600 --window {}",
        phase.target(),
        phase.copy_depth(),
        failure.seed,
        failure.request + args.window,
        args.window
    );
    if args.in_process {
        replay.push_str(" --in-process");
    }
    println!("FAIL (seed {}): replay with\n  {replay}", failure.seed);
}
