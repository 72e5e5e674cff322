//! `pmwire bench crash`: kill -9 the server mid-load, restart it on the same
//! pool, and check every acknowledged write and log append byte for byte.
//!
//! Each run: start `pmwire serve` on the pool (the first run formats it);
//! connect over UCX tcp; verify everything acknowledged so far (the model);
//! then load in one of the benchmarks' write phases ([`Phase`], in turn) —
//! while a killer thread sends SIGKILL after a random delay. Only replies
//! the client saw enter the model. A final restart verifies the last run's
//! load and every append of the campaign.
//!
//! The phases: `remote-latency`'s (one write of 64 B–1 KiB outstanding, by
//! Rpc, RpcOffload or OneSidedFlush), `remote-bulk`'s (1–128 KiB writes,
//! windows of 8 and 32, Rpc and RpcOffload), `log-server`'s (32 appends of
//! 64 B–2 KiB in flight to a naive, a rotating and a self-validating log),
//! and a mix of all of them. Writes go to 128 KiB slots used round-robin.
//!
//! Model invariant: slots are reused round-robin, and a slot leaves the
//! model when a new write to it is issued, so a slot in the model must hold
//! exactly the bytes of its acknowledged write (no later write can
//! legitimately have changed it); every acknowledged LSN must read back as
//! its entry.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use pmwire_log::{LogConfig, TailStrategy};
use pmwire_remote::client::{Client, ClientOptions};
use pmwire_remote::proto::Method;
use rand::{Rng, SeedableRng};
use transport::UcxTransport;

use super::server::{shm_path, ucx_config, ServeChild};

/// Slot size of one write (the largest bulk write).
const SLOT: u64 = 128 << 10;
/// Pool size (the data area holds the slots and the logs).
const POOL_SIZE: &str = "160M";
/// The client's window: the most writes and appends a phase keeps in flight.
const WINDOW: usize = 32;
/// The logs, one per tail strategy, in `Model::appends`' log index order.
const LOGS: [(&[u8], TailStrategy); 3] = [
    (b"crash-self-validating", TailStrategy::SelfValidating),
    (b"crash-naive", TailStrategy::Naive),
    (b"crash-rotating", TailStrategy::ROTATING_PAPER),
];
/// Capacity of each log.
const LOG_BYTES: u64 = 12 << 20;

/// The write phase of one benchmark, which a run loads until it is killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// `remote-latency`: one durable write of 64 B to 1 KiB outstanding.
    Latency,
    /// `remote-bulk`: 1 KiB to 128 KiB writes, windows of 8 or 32.
    Bulk,
    /// `log-server`: appends of 64 B to 2 KiB to every tail strategy, 32 in flight.
    LogServer,
    /// All of the above interleaved.
    Mixed,
}

impl Phase {
    /// Every phase, in the order runs take them.
    pub const ALL: [Phase; 4] = [Phase::Latency, Phase::Bulk, Phase::LogServer, Phase::Mixed];

    /// The phase of run `run`.
    pub fn of_run(run: usize) -> Phase {
        Phase::ALL[run % Phase::ALL.len()]
    }

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Latency => "remote-latency",
            Phase::Bulk => "remote-bulk",
            Phase::LogServer => "log-server",
            Phase::Mixed => "mixed",
        }
    }

    /// The writes or appends kept in flight.
    fn window(self, rng: &mut impl Rng) -> usize {
        match self {
            Phase::Latency => 1,
            Phase::Bulk => [8, 32][rng.gen_range(0..2)],
            Phase::LogServer => 32,
            Phase::Mixed => 8,
        }
    }

    /// The next operation: an append (to which log, how long) or a write (method, length).
    fn next_op(self, rng: &mut impl Rng) -> Op {
        let append = |rng: &mut dyn rand::RngCore| Op::Append { log: rng.gen_range(0..LOGS.len()), len: rng.gen_range(64..=2048) };
        match self {
            Phase::Latency => Op::Write { method: durable_method(rng, true), len: rng.gen_range(64..=1024) },
            Phase::Bulk => Op::Write { method: durable_method(rng, false), len: rng.gen_range(1024..=SLOT) },
            Phase::LogServer => append(rng),
            Phase::Mixed if rng.gen_bool(0.3) => append(rng),
            Phase::Mixed => Op::Write { method: durable_method(rng, true), len: rng.gen_range(1..=SLOT) },
        }
    }
}

/// One operation of a phase.
enum Op {
    Write { method: Method, len: u64 },
    Append { log: usize, len: u64 },
}

/// A durable write method (OneSidedFlush only where the phase's benchmark has it).
fn durable_method(rng: &mut impl Rng, one_sided: bool) -> Method {
    let methods: &[Method] = if one_sided {
        &[Method::Rpc, Method::RpcOffload, Method::OneSidedFlush]
    } else {
        &[Method::Rpc, Method::RpcOffload]
    };
    methods[rng.gen_range(0..methods.len())]
}

/// How a crash campaign runs.
#[derive(Clone, Debug)]
pub struct CrashOptions {
    /// Kill -9 runs.
    pub runs: usize,
    /// Longest a run loads before it is killed (the kill comes at a random moment before).
    pub max_load: Duration,
    /// Seed of the sizes, methods and kill moments (printed; replays a campaign).
    pub seed: u64,
    /// The `pmwire` executable.
    pub exe: std::path::PathBuf,
}

/// What a campaign found.
#[derive(Clone, Debug, Default)]
pub struct CrashReport {
    /// Runs completed (server killed and restarted).
    pub runs: usize,
    /// Acknowledged writes checked after restarts (counted once per check).
    pub writes_checked: u64,
    /// Acknowledged appends checked.
    pub appends_checked: u64,
    /// Acknowledged writes or appends missing or different: must be 0.
    pub lost: u64,
    /// Acknowledged writes and appends in total (a write later overwritten counts once).
    pub acknowledged: u64,
    /// Runs killed in each phase, in [`Phase::ALL`] order.
    pub runs_per_phase: [usize; Phase::ALL.len()],
}

#[derive(Default)]
struct Model {
    /// slot → (len, seed) of its last acknowledged write, while no later write to it was issued.
    writes: std::collections::BTreeMap<u64, (u64, u64)>,
    /// (log index, LSN, length, seed) of every acknowledged append.
    appends: Vec<(usize, u64, u64, u64)>,
    next_slot: u64,
    acknowledged: u64,
    /// Appends checked after an earlier restart.
    verified_appends: usize,
}

/// `runs killed per phase: remote-latency 25, ...`.
pub fn phases_text(report: &CrashReport) -> String {
    let counts: Vec<String> =
        Phase::ALL.iter().zip(report.runs_per_phase).map(|(phase, runs)| format!("{} {runs}", phase.name())).collect();
    format!("runs killed per write phase: {}", counts.join(", "))
}

fn bytes(len: u64, seed: u64) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(0x9e37_79b9) ^ seed.wrapping_mul(0x85eb_ca6b)) as u8 ^ (seed >> 8) as u8).collect()
}

/// Runs the campaign; fails if any acknowledged write or append is lost.
pub fn run(options: &CrashOptions) -> Result<CrashReport> {
    let pool = shm_path("crash.pool");
    let key_file = shm_path("crash.keys");
    let _ = std::fs::remove_file(&pool);
    let result = campaign(options, &pool, &key_file);
    let _ = std::fs::remove_file(&pool);
    let _ = std::fs::remove_file(&key_file);
    result
}

fn campaign(options: &CrashOptions, pool: &Path, key_file: &Path) -> Result<CrashReport> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(options.seed);
    let mut model = Model::default();
    let mut report = CrashReport::default();
    for run in 0..=options.runs {
        let server = ServeChild::start(&options.exe, pool, POOL_SIZE, "tcp", 8, true, key_file)?;
        let addr = server.keys.socket()?;
        // UCX 1.13's tcp transport aborts the *client* process (an assertion
        // in tcp_ep.c on UCT_TCP_EP_FLAG_PUT_TX_WAITING_ACK) when the server
        // dies with a zero-copy PUT awaiting its ACK. The campaign's client
        // must outlive every kill, so its puts go by UCP's active-message
        // emulation instead: the server side (the region, the FLUSH handler)
        // is the same. `docs/ARCHITECTURE.md` ("UCX facts") records it.
        let transport = UcxTransport::new(&ucx_config("tcp", true, true)?.with_var("PUT_ENABLE", "n"))?;
        let client_options = ClientOptions { window: WINDOW, timeout: Duration::from_secs(10), ..ClientOptions::default() };
        let mut client = Client::connect_with(transport, &addr, server.keys.region_id, server.keys.key, client_options)
            .with_context(|| format!("run {run}: connect"))?;
        let mut logs = Vec::with_capacity(LOGS.len());
        for (name, tail) in LOGS {
            logs.push(if run == 0 { client.log_create(name, &LogConfig::new(LOG_BYTES, tail))? } else { client.log_open(name)? });
        }
        let full = run == options.runs;
        verify(&mut client, &logs, &model, full, &mut report).with_context(|| format!("run {run} (seed {})", options.seed))?;
        model.verified_appends = model.appends.len();
        if run == options.runs {
            break;
        }
        let kill_after = Duration::from_micros(rng.gen_range(2_000..options.max_load.as_micros().max(2_001) as u64));
        let pid = server.pid();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(kill_after);
            // SAFETY: plain syscall on our own child's pid (reaped only by `kill9` below).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        });
        let phase = Phase::of_run(run);
        load(&mut client, &logs, phase, &mut model, &mut rng, Instant::now() + options.max_load * 2);
        killer.join().expect("killer thread");
        drop(client);
        server.kill9()?;
        report.runs += 1;
        report.runs_per_phase[run % Phase::ALL.len()] += 1;
        if report.runs % 10 == 0 {
            eprintln!("  {} runs, {} acknowledged, {} lost", report.runs, model.acknowledged, report.lost);
        }
    }
    report.acknowledged = model.acknowledged;
    if report.lost > 0 {
        bail!("{} acknowledged writes or appends lost (seed {})", report.lost, options.seed);
    }
    Ok(report)
}

/// Loads in `phase` until the connection fails (the kill) or `until`.
fn load(client: &mut Client<UcxTransport>, logs: &[u64], phase: Phase, model: &mut Model, rng: &mut impl Rng, until: Instant) {
    let window = phase.window(rng);
    let mut in_flight: HashMap<u64, (Option<usize>, u64, u64, u64)> = HashMap::new();
    let data_slots = client.hello().data_bytes / SLOT;
    loop {
        while in_flight.len() < window && Instant::now() < until {
            let seed = rng.gen::<u64>();
            let started = match phase.next_op(rng) {
                Op::Append { log, len } => {
                    client.submit_log_append(logs[log], &bytes(len, seed)).map(|t| (t, (Some(log), 0, len, seed)))
                }
                Op::Write { method, len } => {
                    let slot = model.next_slot % data_slots;
                    model.next_slot += 1;
                    if in_flight.values().any(|w| w.0.is_none() && w.1 == slot) {
                        return; // the window wrapped around the pool: end this run's load
                    }
                    model.writes.remove(&slot);
                    let data = bytes(len, seed);
                    if method == Method::OneSidedFlush {
                        // Acknowledged only when the whole method returns.
                        match client.write_persistent(slot * SLOT, &data, method) {
                            Ok(_) => {
                                model.writes.insert(slot, (len, seed));
                                model.acknowledged += 1;
                            }
                            Err(_) => return,
                        }
                        continue;
                    }
                    let offload = method == Method::RpcOffload;
                    client.submit_rpc_write(slot * SLOT, &data, offload).map(|t| (t, (None, slot, len, seed)))
                }
            };
            match started {
                Ok((token, what)) => {
                    in_flight.insert(token, what);
                }
                Err(_) => return,
            }
        }
        if in_flight.is_empty() {
            return;
        }
        let Ok((token, result)) = client.wait_any() else { return };
        let Some((log, slot, len, seed)) = in_flight.remove(&token) else { continue };
        let Ok(value) = result else { return };
        model.acknowledged += 1;
        match log {
            Some(log) => model.appends.push((log, value, len, seed)),
            None => {
                model.writes.insert(slot, (len, seed));
            }
        }
    }
}

/// Checks every acknowledged write; every append acknowledged since the
/// last check, a sample of 64 older ones, or (with `full`) all of them —
/// LOG_READ scans the log from its head, so checking every append after
/// every restart would grow with the square of the campaign.
fn verify(client: &mut Client<UcxTransport>, logs: &[u64], model: &Model, full: bool, report: &mut CrashReport) -> Result<()> {
    let mut back = Vec::new();
    for (&slot, &(len, seed)) in &model.writes {
        back.resize(len as usize, 0);
        client.read(slot * SLOT, &mut back)?;
        report.writes_checked += 1;
        if back != bytes(len, seed) {
            report.lost += 1;
            eprintln!("LOST: write to slot {slot} ({len} B)");
        }
    }
    let older = model.verified_appends;
    let sample = (0..64.min(older)).map(|i| i * older / 64.min(older).max(1));
    let picked: Vec<usize> = if full { (0..model.appends.len()).collect() } else { sample.chain(older..model.appends.len()).collect() };
    for &(log, lsn, len, seed) in picked.iter().map(|&i| &model.appends[i]) {
        report.appends_checked += 1;
        match client.log_read(logs[log], lsn, &mut back) {
            Ok(()) if back == bytes(len, seed) => {}
            other => {
                report.lost += 1;
                let name = String::from_utf8_lossy(LOGS[log].0);
                eprintln!("LOST: append lsn {lsn} ({len} B) of {name}: {other:?}");
            }
        }
    }
    Ok(())
}
