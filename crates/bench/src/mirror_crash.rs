//! `pmwire bench mirror-crash`: kill -9 the primary or the backup of a
//! mirrored heap under load, then fail over for real: promote and serve,
//! or restart and resynchronise (issue 14, failover and tests 5).
//!
//! Each run starts a `pmwire mirror-backup` process on a fresh pool and a
//! `pmwire mirror-primary` process on another, running transactions drawn
//! from a seed ([`CrashLoad`]: 1–8 epochs of 1–4 writes of 64 B at random
//! 64 B-aligned places) and appending each acknowledged transaction's
//! number to a file. Once it has one acknowledged, after a random delay:
//! - **primary killed** (even runs): SIGKILL the primary, then the backup;
//!   `pmwire mirror-promote` the backup's pool; serve it with a new
//!   `mirror-primary` (a second seed) whose backup is a `mirror-backup` on
//!   the OLD primary's pool, resynchronised at the hello; stop the new
//!   primary (SIGTERM) once it acknowledged more transactions. In every
//!   fourth such run the backup is killed first and the primary goes on
//!   unmirrored (allowed) before its kill, so the old primary's pool holds
//!   transactions past the promoted pool's fork point: its rejoin must be
//!   a full copy (the run fails otherwise), and the unmirrored
//!   transactions the promotion gives up are counted apart.
//! - **backup killed** (odd runs): SIGKILL the backup; the primary's
//!   commits fail with the reason (default), or it goes on unmirrored
//!   (`--allow-unmirrored`, every other backup run); restart the backup on
//!   its pool at its address; the primary reconnects and resynchronises it
//!   while it keeps committing; stop it once it acknowledged more. A
//!   restarted backup one ahead (it committed the transaction whose
//!   commit failed on the primary, never acknowledged) must be copied
//!   over by the primary (a full copy), never refused: a refused backup
//!   fails the run. Such backups are counted.
//!
//! Checks, with `a` the last acknowledged transaction before the kill:
//! every pool left by a kill holds `b` with `a ≤ b ≤ a + 1` and exactly the
//! data after the first `b` transactions (none lost, none torn), the
//! promoted pool as `mirror-promote` reported it; at the end the serving
//! primary's pool holds exactly every acknowledged transaction of both eras
//! (the second era's transactions numbered on from the promoted pool's
//! last), and the backup's pool equals it byte for byte. The headline is
//! these counts; any run that cannot be checked (a process that failed or
//! did not make progress in time) fails the campaign too.
//!
//! A kill -9 leaves every store in the page cache (the pools are on
//! tmpfs), so this checks the order of the protocol's acts across
//! processes; the crash-state checker (`pmwire check`) checks the flushes.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use pmem::Region;
use pmwire_mirror::{Heap, Strategy};
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

use crate::remote::common::finish;
use crate::remote::server::shm_path;
use crate::schema::BenchResult;
use crate::SuiteReport;

/// The heap's log.
pub const LOG_BYTES: u64 = 64 << 10;
/// The heap's data area.
pub const DATA_BYTES: u64 = 1 << 20;
/// Bytes of each write.
pub const WRITE_BYTES: u64 = 64;
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

/// What a run kills, and what follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    /// SIGKILL the primary; promote the backup's pool and serve it as the
    /// primary, with the old primary's pool as its new backup.
    PrimaryKill,
    /// SIGKILL the backup, let the primary (allowed to) go on unmirrored,
    /// SIGKILL it too, then as [`RunKind::PrimaryKill`]: the old primary's
    /// pool holds transactions past the promoted pool's fork point, so it
    /// must rejoin by a full copy.
    PrimaryKillDiverged,
    /// SIGKILL the backup; the primary's commits fail until the backup,
    /// restarted on its pool, is back and resynchronised.
    BackupKillFail,
    /// SIGKILL the backup; the primary (allowed to) goes on unmirrored,
    /// then resynchronises the restarted backup.
    BackupKillUnmirrored,
}

impl RunKind {
    /// Run `run`'s kind: the primary in even runs (in every fourth of
    /// them after going on unmirrored), the backup in odd ones, failing and
    /// unmirrored in turn.
    pub fn of(run: u64) -> RunKind {
        match (run % 2, (run / 2) % 2, (run / 2) % 4) {
            (0, _, 3) => RunKind::PrimaryKillDiverged,
            (0, _, _) => RunKind::PrimaryKill,
            (_, 0, _) => RunKind::BackupKillFail,
            _ => RunKind::BackupKillUnmirrored,
        }
    }

    fn label(self) -> &'static str {
        match self {
            RunKind::PrimaryKill => "primary killed, backup promoted",
            RunKind::PrimaryKillDiverged => "backup killed, primary unmirrored then killed, backup promoted",
            RunKind::BackupKillFail => "backup killed, commits fail until it is back",
            RunKind::BackupKillUnmirrored => "backup killed, primary goes on unmirrored",
        }
    }
}

/// What one run found; summed over the campaign.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Outcome {
    /// Transactions acknowledged, every era.
    acknowledged: u64,
    /// Acknowledged transactions some pool does not hold.
    lost: u64,
    /// Pools whose data is not that of a prefix of the transactions.
    torn: u64,
    /// Runs whose final backup differs from the final primary.
    diverged: u64,
    /// Backups promoted.
    promotions: u64,
    /// Resynchronisations by a full copy of the data area.
    resync_full: u64,
    /// Resynchronisations by the missed transactions only.
    resync_incremental: u64,
    /// Bytes of data area the full copies sent.
    resync_full_bytes: u64,
    /// Bytes the incremental copies sent.
    resync_incremental_bytes: u64,
    /// Transactions committed after the kill (the promoted primary's, or
    /// the surviving primary's).
    after_failover: u64,
    /// Of those, committed while the backup was down (allowed unmirrored).
    unmirrored: u64,
    /// Commits that failed, with the reason, while the backup was down.
    failed_commits: u64,
    /// Pools that held the in-flight transaction, one past the acknowledged.
    one_ahead: u64,
    /// Acknowledged transactions committed alone (allowed) that a
    /// promotion of the backup gave up.
    given_up: u64,
    /// Old primaries past the fork point, rejoined by a full copy.
    diverged_rejoins: u64,
    /// Restarted backups one ahead (the failed commit's transaction),
    /// copied over by the primary.
    copied_over: u64,
}

impl Outcome {
    fn add(&mut self, o: &Outcome) {
        self.acknowledged += o.acknowledged;
        self.lost += o.lost;
        self.torn += o.torn;
        self.diverged += o.diverged;
        self.promotions += o.promotions;
        self.resync_full += o.resync_full;
        self.resync_incremental += o.resync_incremental;
        self.resync_full_bytes += o.resync_full_bytes;
        self.resync_incremental_bytes += o.resync_incremental_bytes;
        self.after_failover += o.after_failover;
        self.unmirrored += o.unmirrored;
        self.failed_commits += o.failed_commits;
        self.one_ahead += o.one_ahead;
        self.copied_over += o.copied_over;
        self.given_up += o.given_up;
        self.diverged_rejoins += o.diverged_rejoins;
    }

    /// What a run found, in a few words.
    fn line(&self) -> String {
        let resync = if self.resync_full > 0 {
            "full"
        } else if self.resync_incremental > 0 {
            "incremental"
        } else {
            "none"
        };
        let mut line = format!(
            "{} acknowledged, {} after the failover ({} unmirrored), resync {resync}",
            self.acknowledged, self.after_failover, self.unmirrored
        );
        if self.given_up > 0 {
            line += &format!(", {} unmirrored given up by the promotion", self.given_up);
        }
        if self.bad() {
            line += " FAILED";
        }
        line
    }

    fn bad(&self) -> bool {
        self.lost + self.torn + self.diverged > 0
    }
}

/// The eras of a run's history: `(seed, base)`, transaction `base + i` of
/// the era being its seed's `i`-th (from 1), until the next era's base.
type Eras = [(u64, u64)];

/// The data area after transaction `last` of `eras`.
fn data_after_eras(eras: &Eras, last: u64) -> Vec<u8> {
    let mut data = vec![0u8; DATA_BYTES as usize];
    for (i, &(seed, base)) in eras.iter().enumerate() {
        let end = eras.get(i + 1).map_or(last, |&(_, next)| next.min(last));
        let mut load = CrashLoad::new(seed);
        for _ in base..end.max(base) {
            for (offset, byte) in load.next_tx().into_iter().flatten() {
                data[offset as usize..(offset + WRITE_BYTES) as usize].fill(byte);
            }
        }
    }
    data
}

/// A pool as recovery opens it: its last committed transaction and data area.
fn read_pool(pool: &Path) -> Result<(u64, Vec<u8>)> {
    let mut region = Region::open(pool, Default::default())?;
    let (heap, _) = Heap::open(&mut region, 0).map_err(|e| anyhow!("{}: {e}", pool.display()))?;
    let mut data = vec![0u8; DATA_BYTES as usize];
    heap.read(&region, 0, &mut data)?;
    Ok((heap.last_committed(), data))
}

/// Judges a pool that must hold every transaction up to `acknowledged`
/// (and may hold the one in flight): counts in `o`; its last transaction.
fn judge(pool: &Path, eras: &Eras, acknowledged: u64, o: &mut Outcome) -> Result<u64> {
    let (last, data) = read_pool(pool)?;
    o.lost += acknowledged.saturating_sub(last);
    if last > acknowledged + 1 || data != data_after_eras(eras, last) {
        o.torn += 1;
    }
    if last == acknowledged + 1 {
        o.one_ahead += 1;
    }
    Ok(last)
}

/// Judges the final pair: the primary's pool holds exactly the
/// acknowledged history up to `last` (it stopped cleanly), and the
/// backup's equals it.
fn judge_pair(primary: &Path, backup: &Path, eras: &Eras, last: u64, o: &mut Outcome) -> Result<()> {
    let (p_last, p_data) = read_pool(primary)?;
    o.lost += last.saturating_sub(p_last);
    if p_last != last || p_data != data_after_eras(eras, last) {
        o.torn += 1;
    }
    let (b_last, b_data) = read_pool(backup)?;
    if (b_last, &b_data) != (p_last, &p_data) {
        o.diverged += 1;
    }
    Ok(())
}

/// A child killed (SIGKILL) when dropped.
struct Proc {
    child: Child,
    what: &'static str,
}

impl Proc {
    fn kill9(&mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// SIGTERM, then waits (bounded) for a clean exit.
    fn stop(&mut self, patience: Duration) -> Result<()> {
        // SAFETY: a signal to a child we started and have not reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + patience;
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    bail!("the {} exited with {status} when stopped", self.what);
                }
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("the {} did not stop within {patience:?} of SIGTERM", self.what);
            }
            std::thread::sleep(POLL);
        }
    }

    /// An error if the child has exited.
    fn alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("the {} exited with {status}", self.what);
        }
        Ok(())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How often the campaign looks at a file or a child while it waits.
const POLL: Duration = Duration::from_millis(5);
/// The longest the campaign waits for one step of a run.
const PATIENCE: Duration = Duration::from_secs(60);

/// Waits (at most [`PATIENCE`]) until `done` says so; `what` names it.
fn wait_until(what: &str, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + PATIENCE;
    while !done()? {
        if Instant::now() >= deadline {
            bail!("{what}: not within {PATIENCE:?}");
        }
        std::thread::sleep(POLL);
    }
    Ok(())
}

/// The acknowledged transactions in `acked`: how many, and the last.
fn acked(acked: &Path) -> Result<(u64, u64)> {
    let text = std::fs::read_to_string(acked).unwrap_or_default();
    let last = text.lines().last().map(str::parse::<u64>).transpose()?.unwrap_or(0);
    Ok((text.lines().count() as u64, last))
}

/// The lines of a child's stdout file that start with `prefix`.
fn said(out: &Path, prefix: &str) -> Vec<String> {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    text.lines().filter(|l| l.starts_with(prefix)).map(String::from).collect()
}

/// The number after `marker` in `line`.
fn number_after(line: &str, marker: &str) -> Result<u64> {
    let rest = line.split(marker).nth(1).ok_or_else(|| anyhow!("no '{marker}' in '{line}'"))?;
    let digits: String = rest.trim_start().chars().take_while(char::is_ascii_digit).collect();
    digits.parse().map_err(|_| anyhow!("no number after '{marker}' in '{line}'"))
}

/// Counts the resynchronisations a primary reported in `out`.
fn count_resyncs(out: &Path, o: &mut Outcome) -> Result<()> {
    for line in said(out, "resync: ") {
        if line.starts_with("resync: full") {
            o.resync_full += 1;
            o.resync_full_bytes += number_after(&line, "copy of")?;
        } else if line.starts_with("resync: incremental") {
            o.resync_incremental += 1;
            o.resync_incremental_bytes += number_after(&line, "copy of")?;
        }
    }
    Ok(())
}

/// Runs the campaign.
pub fn run(options: &MirrorCrashOptions) -> Result<SuiteReport> {
    assert!(options.runs >= 1, "at least one run");
    let mut rng = SplitMix64::seed_from_u64(options.seed);
    let mut totals = Outcome::default();
    let mut per_kind = [0u64; 4];
    let mut failures = Vec::new();
    let mut unchecked = 0u64;
    let started = Instant::now();
    println!("mirror-crash: {} runs over {}, seed {}", options.runs, options.tls, options.seed);
    for run in 0..options.runs {
        let strategy = STRATEGIES[run as usize % STRATEGIES.len()];
        let kind = RunKind::of(run);
        per_kind[kind as usize] += 1;
        let delay = Duration::from_millis(20 + rng.next_u64() % 280);
        let seeds = [rng.next_u64(), rng.next_u64()];
        let more = 1 + rng.next_u64() % 200;
        let plan = RunPlan { strategy, kind, delay, seeds, more };
        let o = match one_run(options, &plan) {
            Ok(o) => o,
            Err(e) => {
                unchecked += 1;
                failures.push(format!("run {run} ({strategy}, {}, seeds {seeds:?}): {e:#}", kind.label()));
                println!("  run {run}: {strategy}, {}: COULD NOT BE CHECKED: {e:#}", kind.label());
                continue;
            }
        };
        if o.bad() {
            failures.push(format!("run {run} ({strategy}, {}, seeds {seeds:?}): {o:?}", kind.label()));
        }
        totals.add(&o);
        println!("  run {run}: {strategy}, {} after {delay:?}: {}", kind.label(), o.line());
    }
    for f in &failures {
        println!("FAILED {f}");
    }
    let pass = !totals.bad() && unchecked == 0;
    print_summary(options, &totals, per_kind, unchecked, pass, started.elapsed());
    let report = write_report(options, &totals, per_kind, unchecked, failures, pass)?;
    if !pass {
        bail!(
            "{} acknowledged transactions lost, {} torn, {} final backups differing from their primary, {} runs not checked",
            totals.lost,
            totals.torn,
            totals.diverged,
            unchecked
        );
    }
    Ok(report)
}

/// The campaign's JSON (its counts as metrics, its verdict and failures
/// as parameters) and the tables `finish` prints.
fn write_report(
    options: &MirrorCrashOptions,
    totals: &Outcome,
    per_kind: [u64; 4],
    unchecked: u64,
    failures: Vec<String>,
    pass: bool,
) -> Result<SuiteReport> {
    let result = BenchResult::new(&format!("mirror_crash_{}", options.tls), "kill_9")
        .param("transport", options.tls.as_str())
        .metric("runs_count", options.runs as f64)
        .metric("primary_kill_runs_count", per_kind[0] as f64)
        .metric("primary_kill_diverged_runs_count", per_kind[1] as f64)
        .metric("backup_kill_failing_runs_count", per_kind[2] as f64)
        .metric("backup_kill_unmirrored_runs_count", per_kind[3] as f64)
        .metric("acknowledged_count", totals.acknowledged as f64)
        .metric("lost_count", totals.lost as f64)
        .metric("torn_count", totals.torn as f64)
        .metric("diverged_count", totals.diverged as f64)
        .metric("unchecked_runs_count", unchecked as f64)
        .metric("promotions_count", totals.promotions as f64)
        .metric("resync_full_count", totals.resync_full as f64)
        .metric("resync_incremental_count", totals.resync_incremental as f64)
        .metric("resync_full_bytes", totals.resync_full_bytes as f64)
        .metric("resync_incremental_bytes", totals.resync_incremental_bytes as f64)
        .metric("after_failover_count", totals.after_failover as f64)
        .metric("unmirrored_count", totals.unmirrored as f64)
        .metric("failed_commits_count", totals.failed_commits as f64)
        .metric("one_ahead_count", totals.one_ahead as f64)
        .metric("backups_one_ahead_copied_over_count", totals.copied_over as f64)
        .metric("diverged_rejoins_count", totals.diverged_rejoins as f64)
        .metric("given_up_unmirrored_count", totals.given_up as f64);
    let parameters = serde_json::json!({
        "command": format!("pmwire bench mirror-crash --runs {} --tls {} --seed {}", options.runs, options.tls, options.seed),
        "runs": options.runs, "seed": options.seed, "log_bytes": LOG_BYTES, "data_bytes": DATA_BYTES,
        "verdict": { "lost": totals.lost, "torn": totals.torn, "diverged": totals.diverged, "unchecked_runs": unchecked, "pass": pass },
        "failures": failures,
    });
    finish("mirror-crash", &options.out_dir, parameters, vec![result], Vec::new(), Vec::new())
}

/// The campaign's counts, as counts, and its verdict.
fn print_summary(o: &MirrorCrashOptions, t: &Outcome, per_kind: [u64; 4], unchecked: u64, pass: bool, took: Duration) {
    let row = |name: &str, value: u64, want: &str| vec![name.to_string(), value.to_string(), want.to_string()];
    let rows = vec![
        vec!["count".to_string(), "value".to_string(), "must be".to_string()],
        row("runs: primary killed, backup promoted", per_kind[0], ""),
        row("runs: primary unmirrored (allowed) then killed, backup promoted", per_kind[1], ""),
        row("runs: backup killed, commits failing", per_kind[2], ""),
        row("runs: backup killed, unmirrored allowed", per_kind[3], ""),
        row("acknowledged transactions", t.acknowledged, ""),
        row("acknowledged transactions lost", t.lost, "0"),
        row("pools torn (not a prefix of the transactions)", t.torn, "0"),
        row("final backups differing from their primary", t.diverged, "0"),
        row("runs that could not be checked", unchecked, "0"),
        row("promotions", t.promotions, ""),
        row("resynchronisations by full copy", t.resync_full, ""),
        row("resynchronisations by missed transactions", t.resync_incremental, ""),
        row("  bytes sent by the full copies", t.resync_full_bytes, ""),
        row("  bytes sent by the incremental copies", t.resync_incremental_bytes, ""),
        row("transactions after the failover", t.after_failover, ""),
        row("  of which unmirrored", t.unmirrored, ""),
        row("commits failed with the reason (backup down)", t.failed_commits, ""),
        row("pools one past the acknowledged (in flight)", t.one_ahead, ""),
        row("restarted backups one ahead, copied over by the primary", t.copied_over, ""),
        row("old primaries past the fork point, rejoined by full copy", t.diverged_rejoins, ""),
        row("unmirrored acknowledged transactions given up by promotion", t.given_up, ""),
    ];
    print!("{}", crate::table::render(&rows));
    println!(
        "mirror-crash over {}: {} runs in {:.0} s: {} lost, {} torn, {} diverged: {}",
        o.tls,
        o.runs,
        took.as_secs_f64(),
        t.lost,
        t.torn,
        t.diverged,
        if pass { "PASS" } else { "FAIL" }
    );
}

/// What one run does.
struct RunPlan {
    strategy: Strategy,
    kind: RunKind,
    /// From the start of the load to the kill.
    delay: Duration,
    /// The load's seeds: before the kill, after it.
    seeds: [u64; 2],
    /// Transactions to see acknowledged after the failover.
    more: u64,
}

/// One run in a fresh directory.
fn one_run(options: &MirrorCrashOptions, plan: &RunPlan) -> Result<Outcome> {
    let dir = shm_path("mirror-crash");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let result = match plan.kind {
        RunKind::PrimaryKill | RunKind::PrimaryKillDiverged => primary_kill(options, plan, &dir),
        _ => backup_kill(options, plan, &dir),
    };
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Kill -9 of the primary, promotion of the backup, which then serves as
/// the primary with the old primary's pool as its backup.
fn primary_kill(options: &MirrorCrashOptions, plan: &RunPlan, dir: &Path) -> Result<Outcome> {
    let (pool_a, pool_b) = (dir.join("a.pool"), dir.join("b.pool"));
    let [s1, s2] = plan.seeds;
    let diverge = plan.kind == RunKind::PrimaryKillDiverged;
    let mut o = Outcome::default();
    let (mut backup, addr) = start_backup(options, &pool_b, "127.0.0.1:0", dir)?;
    let mut primary = start_primary(options, plan, &pool_a, addr, s1, dir, "1", diverge)?;
    let (out1, acked1) = (dir.join("primary1.out"), dir.join("acked1"));
    under_load(&mut primary, &acked1, plan.delay)?;
    // The backup's pool must hold what was acknowledged while mirrored.
    let mirrored = if diverge {
        backup.kill9()?;
        wait_until("the primary going on unmirrored", || {
            primary.alive()?;
            Ok(!said(&out1, "backup lost: ").is_empty())
        })?;
        let first_alone = number_after(&said(&out1, "backup lost: ")[0], "from transaction")?;
        wait_until("unmirrored transactions", || {
            primary.alive()?;
            Ok(acked(&acked1)?.1 >= first_alone + plan.more)
        })?;
        primary.kill9()?;
        first_alone - 1
    } else {
        primary.kill9()?;
        backup.kill9()?;
        acked(&acked1)?.1
    };
    let (_, a1) = acked(&acked1)?;
    judge(&pool_a, &[(s1, 0)], a1, &mut o)?;
    let promoted = promote(options, &pool_b)?;
    o.promotions += 1;
    let b = judge(&pool_b, &[(s1, 0)], mirrored, &mut o)?;
    if promoted != b {
        bail!("mirror-promote said transaction {promoted}, the pool holds {b}");
    }
    // Acknowledged alone, by the user's leave: the promotion gives them up.
    o.given_up = a1.saturating_sub(b);
    // The promoted pool serves; the old primary's pool is its backup.
    let (mut backup, addr) = start_backup(options, &pool_a, "127.0.0.1:0", dir)?;
    let mut primary = start_primary(options, plan, &pool_b, addr, s2, dir, "2", false)?;
    let (out2, acked2) = (dir.join("primary2.out"), dir.join("acked2"));
    wait_until("the promoted primary's transactions", || {
        primary.alive()?;
        Ok(acked(&acked2)?.0 >= plan.more)
    })?;
    primary.stop(PATIENCE)?;
    backup.kill9()?;
    let (n2, c) = acked(&acked2)?;
    if c != b + n2 {
        bail!("the promoted primary acknowledged {n2} transactions ending at {c}, from {b}");
    }
    count_resyncs(&out2, &mut o)?;
    if diverge && said(&out2, "resync: full").is_empty() {
        // The old primary's pool holds transactions past the fork point
        // that the promoted pool never had: only a full copy is right.
        bail!("the diverged old primary was not given a full copy: {:?}", said(&out2, "resync: "));
    }
    o.diverged_rejoins += diverge as u64;
    judge_pair(&pool_b, &pool_a, &[(s1, 0), (s2, b)], c, &mut o)?;
    o.acknowledged = a1 + n2;
    o.after_failover = n2;
    Ok(o)
}

/// Kill -9 of the backup; the primary fails its commits (or goes on
/// unmirrored, if the run allows it) until the backup, restarted on its
/// pool at its address, is resynchronised; it then commits more.
fn backup_kill(options: &MirrorCrashOptions, plan: &RunPlan, dir: &Path) -> Result<Outcome> {
    let (pool_a, pool_b) = (dir.join("a.pool"), dir.join("b.pool"));
    let s1 = plan.seeds[0];
    let unmirrored = plan.kind == RunKind::BackupKillUnmirrored;
    let mut o = Outcome::default();
    let (mut backup, addr) = start_backup(options, &pool_b, "127.0.0.1:0", dir)?;
    let mut primary = start_primary(options, plan, &pool_a, addr, s1, dir, "1", unmirrored)?;
    let (out, acked1) = (dir.join("primary1.out"), dir.join("acked1"));
    under_load(&mut primary, &acked1, plan.delay)?;
    backup.kill9()?;
    let noticed = if unmirrored { "backup lost: " } else { "commit failed: " };
    wait_until("the primary noticing its backup's death", || {
        primary.alive()?;
        Ok(!said(&out, noticed).is_empty())
    })?;
    // What the dead backup's pool holds: everything acknowledged before the loss.
    let before = if unmirrored {
        let first_alone = number_after(&said(&out, noticed)[0], "from transaction")?;
        let more = plan.more;
        wait_until("unmirrored transactions", || {
            primary.alive()?;
            Ok(acked(&acked1)?.1 >= first_alone + more)
        })?;
        first_alone - 1
    } else {
        o.failed_commits += said(&out, noticed).len() as u64;
        acked(&acked1)?.1
    };
    let b = judge(&pool_b, &[(s1, 0)], before, &mut o)?;
    let resyncs = said(&out, "resync: ").len();
    let (_, at_restart) = acked(&acked1)?;
    if !unmirrored && at_restart != before {
        bail!("the primary acknowledged transactions {}..={at_restart} without its backup", before + 1);
    }
    o.unmirrored = at_restart - before;
    let (mut backup, _) = start_backup(options, &pool_b, &addr.to_string(), dir)?;
    let refusals = said(&out, "backup refused: ").len();
    wait_until("the backup's resynchronisation", || {
        primary.alive()?;
        Ok(said(&out, "resync: ").len() > resyncs || said(&out, "backup refused: ").len() > refusals)
    })?;
    if said(&out, "resync: ").len() == resyncs {
        let why = said(&out, "backup refused: ").pop().unwrap_or_default();
        bail!("the restarted backup (at {b}, {before} acknowledged) was refused: {why}");
    }
    if !unmirrored && b == before + 1 {
        // It holds the transaction whose commit failed on the primary:
        // only a full copy undoes it.
        let rejoins = said(&out, "resync: ");
        if !rejoins[resyncs..].iter().any(|l| l.starts_with("resync: full")) {
            bail!("the backup one ahead was not given a full copy: {:?}", &rejoins[resyncs..]);
        }
        o.copied_over += 1;
    }
    let (_, at_resync) = acked(&acked1)?;
    wait_until("transactions after the resynchronisation", || {
        primary.alive()?;
        Ok(acked(&acked1)?.1 >= at_resync + plan.more)
    })?;
    primary.stop(PATIENCE)?;
    backup.kill9()?;
    let (n, c) = acked(&acked1)?;
    if n != c {
        bail!("the primary acknowledged {n} transactions ending at {c}: numbers skipped or repeated");
    }
    count_resyncs(&out, &mut o)?;
    judge_pair(&pool_a, &pool_b, &[(s1, 0)], c, &mut o)?;
    o.acknowledged = c;
    o.after_failover = c - before;
    Ok(o)
}

/// Waits until the primary has a transaction acknowledged (its start,
/// UCX's set-up included, takes longer than the shortest delays on a
/// loaded machine), then `delay` more: the kill lands under load.
fn under_load(primary: &mut Proc, acked_file: &Path, delay: Duration) -> Result<()> {
    wait_until("the primary's first acknowledged transaction", || {
        primary.alive()?;
        Ok(acked(acked_file)?.0 >= 1)
    })?;
    std::thread::sleep(delay);
    Ok(())
}

/// `pmwire mirror-promote --pool POOL`: the last committed transaction it reports.
fn promote(options: &MirrorCrashOptions, pool: &Path) -> Result<u64> {
    let out = Command::new(&options.exe).arg("mirror-promote").arg("--pool").arg(pool).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("mirror-promote failed: {}{}", stdout, String::from_utf8_lossy(&out.stderr));
    }
    number_after(&stdout, "last committed transaction")
}

/// The run's secret file in `dir` (made by the first process that needs
/// it: a run's backup and primaries share it).
fn secret_file(dir: &Path) -> Result<PathBuf> {
    let path = dir.join("secret");
    link::Secret::open(&path, true)?;
    Ok(path)
}

/// A `pmwire mirror-backup` on `pool` listening on `listen` (its pool
/// formatted if absent); its address once it listens.
fn start_backup(options: &MirrorCrashOptions, pool: &Path, listen: &str, dir: &Path) -> Result<(Proc, SocketAddr)> {
    let ready = dir.join("ready");
    let _ = std::fs::remove_file(&ready);
    let child = Command::new(&options.exe)
        .args(["mirror-backup", "--listen", listen, "--tls", &options.tls, "--poll-us", "0"])
        .args(["--log-size", &LOG_BYTES.to_string(), "--data-size", &DATA_BYTES.to_string()])
        .arg("--pool")
        .arg(pool)
        .arg("--ready-file")
        .arg(&ready)
        .arg("--secret-file")
        .arg(secret_file(dir)?)
        .stdout(Stdio::null())
        .stderr(File::create(dir.join("backup.err"))?)
        .spawn()?;
    let mut child = Proc { child, what: "backup" };
    let mut addr = None;
    wait_until("the backup's start", || {
        child.alive().with_context(|| std::fs::read_to_string(dir.join("backup.err")).unwrap_or_default())?;
        if let Ok(text) = std::fs::read_to_string(&ready) {
            addr = Some(text.split('"').nth(3).ok_or_else(|| anyhow!("bad ready file: {text}"))?.parse()?);
        }
        Ok(addr.is_some())
    })?;
    Ok((child, addr.expect("waited for it")))
}

/// A `pmwire mirror-primary` on `pool` (formatted if absent) running the
/// load of `seed`, its acknowledgements in `acked{era}`, its stdout in
/// `primary{era}.out`.
#[allow(clippy::too_many_arguments)]
fn start_primary(
    options: &MirrorCrashOptions,
    plan: &RunPlan,
    pool: &Path,
    backup: SocketAddr,
    seed: u64,
    dir: &Path,
    era: &str,
    unmirrored: bool,
) -> Result<Proc> {
    let mut command = Command::new(&options.exe);
    command
        .args(["mirror-primary", "--strategy", plan.strategy.name(), "--tls", &options.tls, "--retry-ms", "20"])
        .args(["--seed", &seed.to_string(), "--backup", &backup.to_string()])
        .args(["--log-size", &LOG_BYTES.to_string(), "--data-size", &DATA_BYTES.to_string()])
        .arg("--pool")
        .arg(pool)
        .arg("--acked")
        .arg(dir.join(format!("acked{era}")))
        .arg("--secret-file")
        .arg(secret_file(dir)?)
        .stdout(File::create(dir.join(format!("primary{era}.out")))?)
        .stderr(File::create(dir.join(format!("primary{era}.err")))?);
    if unmirrored {
        command.arg("--allow-unmirrored");
    }
    Ok(Proc { child: command.spawn()?, what: "primary" })
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

    /// A pool in /dev/shm holding the first `n` transactions of `eras`, committed as the primary commits them.
    fn pool_with(name: &str, eras: &Eras, n: u64) -> PathBuf {
        let path = PathBuf::from(format!("/dev/shm/b-mirror-crash-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut region = Region::create(&path, Heap::required_size(LOG_BYTES, DATA_BYTES)).unwrap();
        let mut heap = Heap::create(&mut region, 0, LOG_BYTES, DATA_BYTES).unwrap();
        for (i, &(seed, base)) in eras.iter().enumerate() {
            let end = eras.get(i + 1).map_or(n, |&(_, next)| next.min(n));
            let mut load = CrashLoad::new(seed);
            for _ in base..end.max(base) {
                let mut tx = heap.begin(&mut region);
                for epoch in load.next_tx() {
                    for (offset, byte) in epoch {
                        tx.write(offset, &[byte; WRITE_BYTES as usize]).unwrap();
                    }
                    tx.ofence().unwrap();
                }
                tx.commit().unwrap();
            }
        }
        path
    }

    #[test]
    fn eras_follow_one_another() {
        assert_eq!(data_after_eras(&[(5, 0)], 7), CrashLoad::data_after(5, 7));
        let two = [(5, 0), (6, 3)];
        assert_eq!(data_after_eras(&two, 2), CrashLoad::data_after(5, 2), "before the second era");
        assert_eq!(data_after_eras(&two, 3), CrashLoad::data_after(5, 3));
        let mut want = CrashLoad::data_after(5, 3);
        let mut load = CrashLoad::new(6);
        for _ in 0..2 {
            for (offset, byte) in load.next_tx().into_iter().flatten() {
                want[offset as usize..(offset + WRITE_BYTES) as usize].fill(byte);
            }
        }
        assert_eq!(data_after_eras(&two, 5), want);
        assert_ne!(data_after_eras(&two, 5), CrashLoad::data_after(5, 5));
    }

    #[test]
    fn the_judge_counts_lost_torn_and_diverged_pools() {
        let eras = [(11, 0), (12, 4)];
        let good = pool_with("good", &eras, 6);
        let mut o = Outcome::default();
        assert_eq!(judge(&good, &eras, 6, &mut o).unwrap(), 6);
        assert_eq!(judge(&good, &eras, 5, &mut o).unwrap(), 6, "one past: the transaction in flight");
        assert_eq!((o.lost, o.torn, o.one_ahead), (0, 0, 1));
        // Planted: two acknowledged transactions the pool does not hold.
        judge(&good, &eras, 8, &mut o).unwrap();
        assert_eq!(o.lost, 2);
        // Planted: the second era replaced by another seed's transactions.
        let other = pool_with("other", &[(11, 0), (13, 4)], 6);
        let mut o = Outcome::default();
        judge(&other, &eras, 6, &mut o).unwrap();
        assert_eq!((o.lost, o.torn), (0, 1));
        // Planted: two pools past the acknowledged.
        let mut o = Outcome::default();
        judge(&good, &eras, 4, &mut o).unwrap();
        assert_eq!(o.torn, 1);
        let mut o = Outcome::default();
        judge_pair(&good, &good, &eras, 6, &mut o).unwrap();
        assert!(!o.bad(), "{o:?}");
        judge_pair(&good, &other, &eras, 6, &mut o).unwrap();
        assert_eq!((o.diverged, o.torn, o.lost), (1, 0, 0));
        let behind = pool_with("behind", &eras, 5);
        let mut o = Outcome::default();
        judge_pair(&good, &behind, &eras, 6, &mut o).unwrap();
        assert_eq!(o.diverged, 1, "a backup one behind its stopped primary");
        let mut o = Outcome::default();
        judge_pair(&behind, &good, &eras, 6, &mut o).unwrap();
        assert_eq!((o.lost, o.torn), (1, 1), "a primary without its last acknowledged transaction");
        for path in [good, other, behind] {
            std::fs::remove_file(path).unwrap();
        }
    }

    #[test]
    fn a_primarys_resync_lines_are_counted_with_their_bytes() {
        let out = std::env::temp_dir().join(format!("b-mirror-crash-out-{}", std::process::id()));
        let text = "mirror primary: p, last committed transaction 3\nresync: none, backup current at transaction 3\n\
                    resync: incremental copy of 4096 B (the blocks written after transaction 3), backup now at transaction 9\n\
                    commit failed: x\nresync: full copy of 1048576 B, backup now at transaction 12\n";
        std::fs::write(&out, text).unwrap();
        let mut o = Outcome::default();
        count_resyncs(&out, &mut o).unwrap();
        assert_eq!((o.resync_full, o.resync_full_bytes), (1, 1 << 20));
        assert_eq!((o.resync_incremental, o.resync_incremental_bytes), (1, 4096));
        std::fs::write(&out, "resync: full copy of many B\n").unwrap();
        assert!(count_resyncs(&out, &mut o).is_err(), "a line without its bytes");
        std::fs::remove_file(&out).unwrap();
    }

    #[test]
    fn runs_take_turns_and_messages_give_their_numbers() {
        let kinds: Vec<RunKind> = (0..8).map(RunKind::of).collect();
        use RunKind::*;
        let want = [PrimaryKill, BackupKillFail, PrimaryKill, BackupKillUnmirrored, PrimaryKill, BackupKillFail];
        assert_eq!(kinds[..6], want, "the tour's six runs");
        assert_eq!(kinds[6..], [PrimaryKillDiverged, BackupKillUnmirrored]);
        let strategies: Vec<u64> = (0..24).filter(|&r| RunKind::of(r) == PrimaryKillDiverged).map(|r| r % 3).collect();
        assert_eq!(strategies, [0, 2, 1], "every strategy in turn");
        let line = "promoted /p: last committed transaction 412 (log 65536 B)";
        assert_eq!(number_after(line, "last committed transaction").unwrap(), 412);
        assert!(number_after(line, "from transaction").is_err());
        assert!(number_after("last committed transaction x", "last committed transaction").is_err());
    }
}
