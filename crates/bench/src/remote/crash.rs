//! `pmwire bench crash`: kill -9 the server mid-load, restart it on the same
//! pool, and check every acknowledged write and log append byte for byte.
//!
//! Each run: start `pmwire serve` on the pool (the first run formats it);
//! connect over UCX tcp; verify everything acknowledged so far (the model);
//! then load — pipelined writes (window 8) by Rpc, RpcOffload and
//! OneSidedFlush, each to a fresh 4 KiB slot, interleaved with appends to a
//! self-validating log — while a killer thread sends SIGKILL after a random
//! delay. Only replies the client saw enter the model. A final restart
//! verifies the last run's load and every append of the campaign.
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

/// Slot size of one write.
const SLOT: u64 = 4096;
/// Pool size (the data area holds the slots).
const POOL_SIZE: &str = "64M";
/// Writes and appends in flight.
const WINDOW: usize = 8;

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
}

#[derive(Default)]
struct Model {
    /// slot → (len, seed) of its last acknowledged write, while no later write to it was issued.
    writes: std::collections::BTreeMap<u64, (u64, u64)>,
    appends: Vec<(u64, u64, u64)>,
    next_slot: u64,
    acknowledged: u64,
    /// Appends checked after an earlier restart.
    verified_appends: usize,
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
        let server = ServeChild::start(&options.exe, pool, POOL_SIZE, "tcp", 8, key_file)?;
        let addr = server.keys.socket()?;
        let transport = UcxTransport::new(&ucx_config("tcp", true)?)?;
        let client_options = ClientOptions { window: WINDOW, timeout: Duration::from_secs(10), ..ClientOptions::default() };
        let mut client = Client::connect_with(transport, &addr, server.keys.region_id, server.keys.key, client_options)
            .with_context(|| format!("run {run}: connect"))?;
        let log = if run == 0 {
            client.log_create(b"crash", &LogConfig::new(12 << 20, TailStrategy::SelfValidating))?
        } else {
            client.log_open(b"crash")?
        };
        let full = run == options.runs;
        verify(&mut client, log, &model, full, &mut report).with_context(|| format!("run {run} (seed {})", options.seed))?;
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
        load(&mut client, log, &mut model, &mut rng, Instant::now() + options.max_load * 2);
        killer.join().expect("killer thread");
        drop(client);
        server.kill9()?;
        report.runs += 1;
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

/// Loads until the connection fails (the kill) or `until`.
fn load(client: &mut Client<UcxTransport>, log: u64, model: &mut Model, rng: &mut impl Rng, until: Instant) {
    let mut in_flight: HashMap<u64, (bool, u64, u64, u64)> = HashMap::new();
    let data_slots = client.hello().data_bytes / SLOT;
    loop {
        while in_flight.len() < WINDOW && Instant::now() < until {
            let seed = rng.gen::<u64>();
            let len = rng.gen_range(1..=SLOT);
            let started = if rng.gen_bool(0.3) {
                let len = len.min(256);
                client.submit_log_append(log, &bytes(len, seed)).map(|t| (t, (true, 0, len, seed)))
            } else {
                let slot = model.next_slot % data_slots;
                model.next_slot += 1;
                if in_flight.values().any(|w| !w.0 && w.1 == slot) {
                    return; // the window wrapped around the pool: end this run's load
                }
                model.writes.remove(&slot);
                let data = bytes(len, seed);
                let method = [Method::Rpc, Method::RpcOffload, Method::OneSidedFlush][rng.gen_range(0..3)];
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
                client.submit_rpc_write(slot * SLOT, &data, method == Method::RpcOffload).map(|t| (t, (false, slot, len, seed)))
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
        let Some((append, slot, len, seed)) = in_flight.remove(&token) else { continue };
        let Ok(value) = result else { return };
        model.acknowledged += 1;
        if append {
            model.appends.push((value, len, seed));
        } else {
            model.writes.insert(slot, (len, seed));
        }
    }
}

/// Checks every acknowledged write; every append acknowledged since the
/// last check, a sample of 64 older ones, or (with `full`) all of them —
/// LOG_READ scans the log from its head, so checking every append after
/// every restart would grow with the square of the campaign.
fn verify(client: &mut Client<UcxTransport>, log: u64, model: &Model, full: bool, report: &mut CrashReport) -> Result<()> {
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
    for &(lsn, len, seed) in picked.iter().map(|&i| &model.appends[i]) {
        report.appends_checked += 1;
        match client.log_read(log, lsn, &mut back) {
            Ok(()) if back == bytes(len, seed) => {}
            other => {
                report.lost += 1;
                eprintln!("LOST: append lsn {lsn} ({len} B): {other:?}");
            }
        }
    }
    Ok(())
}
