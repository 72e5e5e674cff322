//! `pmwire bench mirror-crash`: kill -9 the primary or the backup of a
//! mirrored heap under load, then check both pools as a promotion and a
//! restart would open them (issue 14, tests 5).
//!
//! Each run: a fresh `pmwire mirror-backup` process (its pool formatted),
//! then a `pmwire mirror-primary` process (hidden command, [`run_primary`])
//! that formats its own pool, mirrors to the backup under the run's
//! strategy, and runs transactions drawn from a seed ([`CrashLoad`]: 1–8
//! epochs of 1–4 writes of 64 B at random 64 B-aligned places), appending
//! each acknowledged transaction's number to a file. After a random delay
//! the victim (the primary in even runs, the backup in odd ones) gets
//! SIGKILL; the backup is then killed too (or the primary exits on its
//! failed commit). Checks, with `a` the last acknowledged transaction:
//! - the backup's pool, opened as a promotion would ([`Heap::open`]), holds
//!   transaction `b` with `a ≤ b ≤ a + 1` (none acknowledged lost) and
//!   exactly the data after the first `b` transactions (none torn);
//! - the primary's pool, recovered, the same for its own `p`.
//!
//! A kill -9 leaves every store in the page cache (the pools are on
//! tmpfs), so this checks the order of the protocol's acts across
//! processes; the crash-state checker (`pmwire check`) checks the flushes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use pmem::Region;
use pmwire_mirror::{Heap, Mirror, Strategy};
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;
use transport::UcxTransport;

use crate::remote::common::{finish, ratio};
use crate::remote::server::{shm_path, ucx_config};
use crate::schema::BenchResult;
use crate::SuiteReport;

/// The heap's log.
pub const LOG_BYTES: u64 = 64 << 10;
/// The heap's data area.
pub const DATA_BYTES: u64 = 1 << 20;
/// Bytes of each write.
const WRITE_BYTES: u64 = 64;
/// The strategies, one per run in turn.
const STRATEGIES: [Strategy; 3] = [Strategy::SmRc, Strategy::SmOb, Strategy::SmDd];

/// The transactions of a run, drawn from its seed: the same seed gives the
/// same transactions, so the checker can rebuild the data after any number
/// of them.
pub struct CrashLoad {
    rng: SplitMix64,
}

impl CrashLoad {
    /// The load of `seed`.
    pub fn new(seed: u64) -> CrashLoad {
        CrashLoad { rng: SplitMix64::seed_from_u64(seed) }
    }

    /// The next transaction: its epochs, each a list of (data-area offset, fill byte) writes of 64 B.
    pub fn next_tx(&mut self) -> Vec<Vec<(u64, u8)>> {
        let epochs = 1 + self.rng.next_u32() % 8;
        (0..epochs)
            .map(|_| {
                let writes = 1 + self.rng.next_u32() % 4;
                (0..writes)
                    .map(|_| {
                        ((self.rng.next_u64() % (DATA_BYTES / WRITE_BYTES)) * WRITE_BYTES, self.rng.next_u32() as u8)
                    })
                    .collect()
            })
            .collect()
    }

    /// The data area after the first `n` transactions of `seed`.
    pub fn data_after(seed: u64, n: u64) -> Vec<u8> {
        let mut load = CrashLoad::new(seed);
        let mut data = vec![0u8; DATA_BYTES as usize];
        for _ in 0..n {
            for (offset, byte) in load.next_tx().into_iter().flatten() {
                data[offset as usize..(offset + WRITE_BYTES) as usize].fill(byte);
            }
        }
        data
    }
}

/// The hidden `pmwire mirror-primary`: formats a heap in a new pool at
/// `pool`, mirrors it to `backup` under `strategy`, and runs the load of
/// `seed` until a step fails (the backup is gone) or the process is
/// killed, appending each acknowledged transaction's number to `acked`.
pub fn run_primary(
    pool: &Path,
    backup: std::net::SocketAddr,
    strategy: Strategy,
    tls: &str,
    seed: u64,
    acked: &Path,
) -> Result<()> {
    let mut region = Region::create(pool, Heap::required_size(LOG_BYTES, DATA_BYTES))?;
    let mut heap = Heap::create(&mut region, 0, LOG_BYTES, DATA_BYTES)?;
    let transport = UcxTransport::new(&ucx_config(tls, backup.ip().is_loopback(), false)?)?;
    let mut mirror = Mirror::open(&heap, &region, transport, &backup, strategy)?;
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(acked)?;
    let mut load = CrashLoad::new(seed);
    loop {
        let epochs = load.next_tx();
        let mut tx = heap.begin_with(&mut region, &mut mirror);
        for epoch in &epochs {
            for &(offset, byte) in epoch {
                tx.write(offset, &[byte; WRITE_BYTES as usize])?;
            }
            tx.ofence()?;
        }
        let committed = tx.commit()?;
        // One write(2) per line: a kill leaves whole lines only.
        file.write_all(format!("{}\n", committed.tx).as_bytes())?;
    }
}

/// How the campaign runs.
#[derive(Clone, Debug)]
pub struct MirrorCrashOptions {
    /// Runs (at least 1).
    pub runs: u64,
    /// `tcp` or `sm`.
    pub tls: String,
    /// Seed of the kill delays and loads.
    pub seed: u64,
    /// The `pmwire` binary.
    pub exe: PathBuf,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
}

/// What one run found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Outcome {
    acknowledged: u64,
    backup_tx: u64,
    primary_tx: u64,
    lost: u64,
    torn: u64,
}

/// A child killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the campaign.
pub fn run(options: &MirrorCrashOptions) -> Result<SuiteReport> {
    assert!(options.runs >= 1, "at least one run");
    let mut rng = SplitMix64::seed_from_u64(options.seed);
    let mut totals = Outcome::default();
    let mut failures = Vec::new();
    println!("mirror-crash: {} runs over {}, seed {}", options.runs, options.tls, options.seed);
    for run in 0..options.runs {
        let strategy = STRATEGIES[run as usize % STRATEGIES.len()];
        let kill_primary = run % 2 == 0;
        let delay = Duration::from_millis(20 + rng.next_u64() % 280);
        let seed = rng.next_u64();
        let o = one_run(options, strategy, kill_primary, delay, seed).with_context(|| format!("run {run}"))?;
        let victim = if kill_primary { "primary" } else { "backup" };
        if o.lost > 0 || o.torn > 0 {
            failures.push(format!("run {run} ({strategy}, {victim} killed, seed {seed}): {o:?}"));
        }
        totals.acknowledged += o.acknowledged;
        totals.lost += o.lost;
        totals.torn += o.torn;
        println!(
            "  run {run}: {strategy}, {victim} killed after {delay:?}: {} acknowledged, backup at {}, primary at {}{}",
            o.acknowledged,
            o.backup_tx,
            o.primary_tx,
            if o.lost + o.torn > 0 { " FAILED" } else { "" }
        );
    }
    for f in &failures {
        println!("FAILED {f}");
    }
    let result = BenchResult::new(&format!("mirror_crash_{}", options.tls), "kill_9")
        .param("transport", options.tls.as_str())
        .metric("runs_count", options.runs as f64)
        .metric("acknowledged_count", totals.acknowledged as f64)
        .metric("lost_count", totals.lost as f64)
        .metric("torn_count", totals.torn as f64);
    let headlines = vec![
        ratio(
            "acknowledged transactions lost (kill -9 of primary or backup)",
            Some(totals.lost as f64),
            0.0,
            false,
            "none may be",
        ),
        ratio(
            "torn or partial transactions after recovery or promotion",
            Some(totals.torn as f64),
            0.0,
            false,
            "none may be",
        ),
    ];
    let parameters = serde_json::json!({
        "command": format!("pmwire bench mirror-crash --runs {} --tls {} --seed {}", options.runs, options.tls, options.seed),
        "runs": options.runs, "seed": options.seed, "log_bytes": LOG_BYTES, "data_bytes": DATA_BYTES,
        "failures": failures,
    });
    let report = finish("mirror-crash", &options.out_dir, parameters, vec![result], Vec::new(), headlines)?;
    if totals.lost + totals.torn > 0 {
        bail!("{} acknowledged transactions lost, {} torn", totals.lost, totals.torn);
    }
    Ok(report)
}

/// One run: start both, kill the victim after `delay`, check both pools.
fn one_run(
    options: &MirrorCrashOptions,
    strategy: Strategy,
    kill_primary: bool,
    delay: Duration,
    seed: u64,
) -> Result<Outcome> {
    let dir = shm_path("mirror-crash");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let result = one_run_in(options, strategy, kill_primary, delay, seed, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn one_run_in(
    options: &MirrorCrashOptions,
    strategy: Strategy,
    kill_primary: bool,
    delay: Duration,
    seed: u64,
    dir: &Path,
) -> Result<Outcome> {
    let (backup_pool, primary_pool, acked) = (dir.join("backup"), dir.join("primary"), dir.join("acked"));
    let (mut backup, addr) = start_backup(options, &backup_pool, dir)?;
    let mut primary = Proc(
        Command::new(&options.exe)
            .args(["mirror-primary", "--strategy", strategy.name(), "--tls", &options.tls, "--seed", &seed.to_string()])
            .arg("--pool")
            .arg(&primary_pool)
            .arg("--acked")
            .arg(&acked)
            .args(["--backup", &addr.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    std::thread::sleep(delay);
    if kill_primary {
        primary.0.kill()?;
        primary.0.wait()?;
        backup.0.kill()?;
        backup.0.wait()?;
    } else {
        backup.0.kill()?;
        backup.0.wait()?;
        wait_exit(&mut primary.0, Duration::from_secs(60))?;
    }
    let text = std::fs::read_to_string(&acked).unwrap_or_default();
    let acknowledged = text.lines().last().map(str::parse::<u64>).transpose()?.unwrap_or(0);
    let mut o = Outcome { acknowledged, ..Outcome::default() };
    o.backup_tx = check_pool(&backup_pool, seed, acknowledged, &mut o)?;
    o.primary_tx = check_pool(&primary_pool, seed, acknowledged, &mut o)?;
    Ok(o)
}

/// Opens a pool as recovery or promotion would; counts a lost or torn
/// transaction in `o`; its last committed transaction.
fn check_pool(pool: &Path, seed: u64, acknowledged: u64, o: &mut Outcome) -> Result<u64> {
    if !pool.exists() {
        if acknowledged > 0 {
            o.lost += acknowledged;
        }
        return Ok(0);
    }
    let mut region = Region::open(pool, Default::default())?;
    let (heap, _) = Heap::open(&mut region, 0).map_err(|e| anyhow!("{}: {e}", pool.display()))?;
    let last = heap.last_committed();
    if last < acknowledged {
        o.lost += acknowledged - last;
    }
    let mut data = vec![0u8; DATA_BYTES as usize];
    heap.read(&region, 0, &mut data)?;
    if last > acknowledged + 1 || data != CrashLoad::data_after(seed, last) {
        o.torn += 1;
    }
    Ok(last)
}

fn start_backup(options: &MirrorCrashOptions, pool: &Path, dir: &Path) -> Result<(Proc, std::net::SocketAddr)> {
    let ready = dir.join("ready");
    let child = Command::new(&options.exe)
        .args(["mirror-backup", "--listen", "127.0.0.1:0", "--tls", &options.tls, "--poll-us", "0"])
        .args(["--log-size", &LOG_BYTES.to_string(), "--data-size", &DATA_BYTES.to_string()])
        .arg("--pool")
        .arg(pool)
        .arg("--ready-file")
        .arg(&ready)
        .stdout(Stdio::null())
        .spawn()?;
    let child = Proc(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(&ready) {
            let addr = text.split('"').nth(3).ok_or_else(|| anyhow!("bad ready file: {text}"))?.parse()?;
            return Ok((child, addr));
        }
        if Instant::now() >= deadline {
            bail!("the backup did not start within 30 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (bounded) for a child that should exit by itself.
fn wait_exit(child: &mut Child, patience: Duration) -> Result<()> {
    let deadline = Instant::now() + patience;
    while child.try_wait()?.is_none() {
        if Instant::now() >= deadline {
            child.kill()?;
            child.wait()?;
            bail!("the primary did not notice its backup was gone within {patience:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_replays_the_same_transactions() {
        let mut a = CrashLoad::new(7);
        let mut b = CrashLoad::new(7);
        for _ in 0..50 {
            let tx = a.next_tx();
            assert!((1..=8).contains(&tx.len()));
            assert!(tx.iter().all(|e| (1..=4).contains(&e.len())));
            assert!(tx
                .iter()
                .flatten()
                .all(|&(offset, _)| offset % WRITE_BYTES == 0 && offset + WRITE_BYTES <= DATA_BYTES));
            assert_eq!(tx, b.next_tx());
        }
        assert_ne!(CrashLoad::data_after(7, 3), CrashLoad::data_after(7, 4));
        assert_eq!(CrashLoad::data_after(7, 0), vec![0u8; DATA_BYTES as usize]);
    }
}
