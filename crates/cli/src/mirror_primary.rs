//! `pmwire mirror-primary`: a primary of a mirrored transactional heap as
//! a process, and `pmwire mirror-promote`: a backup's pool made a primary's
//! (issue 14, failover).
//!
//! The primary opens the heap in its pool (recovering it), or formats one
//! when the pool does not exist and `--log-size`/`--data-size` say its
//! shape, mirrors it to a `pmwire mirror-backup` (which `Mirror::open`
//! brings up to date by resynchronisation when it is behind), and runs
//! transactions: drawn from `--seed` (the kill -9 campaign's load), or
//! read from stdin, one per line. Every commit is acknowledged (a line on
//! stdout, and in `--acked`) only once the backup holds it durably. When
//! the backup is lost, commits fail with the reason and the primary waits
//! for it to come back (default), or, with `--allow-unmirrored`, goes on
//! alone; either way it reconnects every `--retry-ms` and resynchronises
//! the returning backup. SIGTERM or SIGINT stops it between transactions.
//!
//! Promotion is a command of its own rather than a flag of
//! `mirror-backup`: it is what an operator does to a backup's pool once
//! that backup is stopped (or dead), and it must refuse a pool that a
//! running backup still holds; the promoted pool is then served by
//! `mirror-primary` like any primary's pool.

use std::fs::File;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use pmem::{Region, RegionOptions};
use pmwire_bench::mirror_crash::CrashLoad;
use pmwire_bench::remote::server::ucx_config;
use pmwire_mirror::stream::AnswerError;
use pmwire_mirror::{
    Committed, EpochSink, Heap, Mirror, MirrorError, OpenError, OpenMirrorError, Plan, Strategy, Tx, TxError,
};
use link::{LinkConfig, LinkTransport, Secret};
use transport::UcxTransport;

use crate::mirror_cmd::{lock, open_or_create, parse_strategy};

/// `pmwire mirror-primary`.
#[derive(Args)]
pub struct MirrorPrimaryArgs {
    /// The primary's pool: a mirror heap (a primary's, or a promoted backup's), or a path that does not exist yet
    /// (then --log-size and --data-size format one).
    #[arg(long)]
    pub pool: PathBuf,
    /// The backup's address (a `pmwire mirror-backup --listen`).
    #[arg(long)]
    pub backup: SocketAddr,
    /// SM-RC, SM-OB or SM-DD.
    #[arg(long, value_parser = parse_strategy)]
    pub strategy: Strategy,
    /// UCX transport: tcp, or sm (shared memory, with tcp for connection set-up).
    #[arg(long, default_value = "tcp")]
    pub tls: String,
    /// The heap's redo log (bytes; K, M, G suffixes) when the pool is created; checked against an existing pool.
    #[arg(long, value_parser = crate::size::parse)]
    pub log_size: Option<u64>,
    /// The heap's data area when the pool is created; checked against an existing pool.
    #[arg(long, value_parser = crate::size::parse)]
    pub data_size: Option<u64>,
    /// When the backup is lost, go on committing without it (it is resynchronised when it comes back). Off: commits
    /// fail until the backup is back.
    #[arg(long)]
    pub allow_unmirrored: bool,
    /// Milliseconds between attempts to reach a lost (or not yet started) backup.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub retry_ms: u64,
    /// Transactions drawn from this seed (1-8 epochs of 1-4 writes of 64 B at random 64 B-aligned places), until
    /// stopped. Without it, transactions are read from stdin, one a line: epochs separated by '|', each a list of
    /// OFFSET=HEXBYTES writes (e.g. `0=68656c6c6f | 4096=ff00`); `read OFFSET LEN` prints data-area bytes.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop after this many committed transactions.
    #[arg(long)]
    pub txs: Option<u64>,
    /// Append each acknowledged transaction's number here, one a line.
    #[arg(long)]
    pub acked: Option<PathBuf>,
    /// The secret the backup must prove (and this primary proves to it).
    #[command(flatten)]
    pub secret: crate::secret_args::ClientSecret,
}

/// The epochs of one transaction, each a list of (data-area offset, bytes) writes.
type TxPlan = Vec<Vec<(u64, Vec<u8>)>>;

/// Where the transactions come from.
enum Load {
    Seeded(CrashLoad),
    Script(std::io::StdinLock<'static>),
}

/// What the load asks next.
enum Step {
    Tx(TxPlan),
    Read { offset: u64, len: u64 },
    Blank,
    End,
}

impl Load {
    fn next(&mut self) -> Result<Step> {
        match self {
            Load::Seeded(load) => Ok(Step::Tx(seeded_plan(load))),
            Load::Script(input) => {
                let mut line = String::new();
                if input.read_line(&mut line)? == 0 {
                    return Ok(Step::End);
                }
                parse_line(&line)
            }
        }
    }
}

/// The campaign's next transaction as a plan.
fn seeded_plan(load: &mut CrashLoad) -> TxPlan {
    let bytes = pmwire_bench::mirror_crash::WRITE_BYTES as usize;
    load.next_tx().into_iter().map(|e| e.into_iter().map(|(at, b)| (at, vec![b; bytes])).collect()).collect()
}

/// The longest read a script may ask for.
const MAX_READ: u64 = 1 << 20;

/// One line of a script: a transaction, a read, or nothing.
fn parse_line(line: &str) -> Result<Step> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(Step::Blank);
    }
    if let Some(rest) = line.strip_prefix("read ") {
        let mut words = rest.split_whitespace();
        let (Some(offset), Some(len), None) = (words.next(), words.next(), words.next()) else {
            bail!("'{line}': a read is `read OFFSET LEN`");
        };
        let offset = offset.parse().map_err(|_| anyhow!("'{line}': bad offset '{offset}'"))?;
        let len: u64 = len.parse().map_err(|_| anyhow!("'{line}': bad length '{len}'"))?;
        if len > MAX_READ {
            bail!("'{line}': reads are at most {MAX_READ} B");
        }
        return Ok(Step::Read { offset, len });
    }
    let mut plan = Vec::new();
    for epoch in line.split('|') {
        let mut writes = Vec::new();
        for write in epoch.split_whitespace() {
            let Some((offset, hex)) = write.split_once('=') else {
                bail!("'{write}' is not OFFSET=HEXBYTES");
            };
            let offset = offset.parse().map_err(|_| anyhow!("'{write}': bad offset '{offset}'"))?;
            writes.push((offset, parse_hex(hex).with_context(|| format!("'{write}'"))?));
        }
        if writes.is_empty() {
            bail!("'{line}': an epoch without a write");
        }
        plan.push(writes);
    }
    Ok(Step::Tx(plan))
}

fn parse_hex(hex: &str) -> Result<Vec<u8>> {
    if hex.is_empty() || !hex.len().is_multiple_of(2) {
        bail!("an even, non-zero number of hex digits is needed");
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| anyhow!("'{}' is not hex", &hex[i..i + 2])))
        .collect()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Blocks SIGINT and SIGTERM here (call before any other thread starts, so
/// every thread inherits the mask) and raises the returned flag when one
/// arrives.
fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    // SAFETY: plain signal-mask calls on a set we initialise.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc).into());
        }
        set
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        let mut signal = 0;
        // SAFETY: waits for one of the blocked signals in `set`.
        let rc = unsafe { libc::sigwait(&set, &mut signal) };
        assert_eq!(rc, 0, "sigwait");
        flag.store(true, Ordering::Relaxed);
    })?;
    Ok(stop)
}

/// Opens (recovering) the heap in `pool`, or formats one where no file is.
/// Refuses, with the reason and without writing, a pool that is not a
/// mirror heap, an unfinished resynchronisation copy, or of another shape.
fn open_heap(pool: &Path, log: Option<u64>, data: Option<u64>) -> Result<(Region, Heap, File)> {
    open_or_create(
        pool,
        log,
        data,
        "a heap",
        Heap::geometry,
        |region, log, data| Heap::create(region, 0, log, data).map_err(|e| anyhow!("{e}")),
        |region| match Heap::open(region, 0) {
            Ok((heap, _)) => Ok(heap),
            Err(e) => bail!("{}", open_refusal(pool, &e)),
        },
    )
}

/// Why a pool cannot be opened as a heap, for a user.
fn open_refusal(pool: &Path, e: &OpenError) -> String {
    let pool = pool.display();
    match e {
        OpenError::BadMagic { .. } => format!("{pool} holds no mirror heap (not a pool of pmwire mirror-primary or mirror-backup)"),
        OpenError::Resyncing { target } => format!(
            "{pool} is an unfinished resynchronisation copy (toward transaction {target}): its data area may be torn, so it \
             can neither serve nor be promoted; restart it as a backup (`pmwire mirror-backup --pool {pool}`) so its primary \
             finishes the copy"
        ),
        other => format!("{pool}: {other} (left as it is)"),
    }
}

/// Whether a failed `Mirror::open` is the backup's refusal (it will not
/// change by retrying) rather than a backup not (yet) there.
fn refused(e: &OpenMirrorError) -> bool {
    matches!(
        e,
        OpenMirrorError::LogTooLarge(_) | OpenMirrorError::Link(MirrorError::Answer(AnswerError::Refused { .. }))
    )
}

/// What became of a transaction.
enum Outcome {
    /// Committed (and mirrored, unless going on alone): its number.
    Committed(u64),
    /// Refused before anything changed (a write outside the data area, or
    /// a transaction larger than the log): the reason.
    Refused(String),
    /// The mirror failed: abandoned, to be tried again once the backup is back.
    Failed,
}

/// The primary's state between transactions.
struct Primary {
    args: MirrorPrimaryArgs,
    region: Region,
    heap: Heap,
    mirror: Option<Mirror<LinkTransport<UcxTransport>>>,
    secret: Secret,
    acked: Option<File>,
    /// When a lost backup is tried again.
    next_try: Instant,
    committed: u64,
    unmirrored_since: Option<u64>,
    /// Whether the current outage was reported.
    told_unreached: bool,
    /// Whether the primary got past its first attempt to reach the backup
    /// (from then on, a refusing backup is waited for, not fatal).
    served: bool,
}

impl Primary {
    /// Tries to open a mirror to the backup: `Ok(true)` if mirrored, `Ok(false)`
    /// if the backup is not there (try again later), an error if it refused.
    fn connect(&mut self) -> Result<bool> {
        let config = ucx_config(&self.args.tls, self.args.backup.ip().is_loopback(), false)?;
        let mut link = LinkConfig::mirror_primary();
        link.log_events = true;
        let transport = LinkTransport::real(UcxTransport::new(&config)?, self.secret.clone(), link);
        let last = self.heap.last_durable(&self.region);
        match Mirror::open(&self.heap, &self.region, transport, &self.args.backup, self.args.strategy) {
            Ok(mut mirror) => {
                mirror.allow_unmirrored(self.args.allow_unmirrored);
                let bytes = mirror.resync_bytes;
                say(&match mirror.rejoin {
                    Plan::Stream => format!("resync: none, backup current at transaction {last}"),
                    Plan::Incremental { from } => format!(
                        "resync: incremental copy of {bytes} B (the blocks written after transaction {from}), backup \
                         now at transaction {last}"
                    ),
                    Plan::FullCopy => format!("resync: full copy of {bytes} B, backup now at transaction {last}"),
                    Plan::Refuse(ref why) => unreachable!("an open mirror was refused: {why}"),
                });
                self.mirror = Some(mirror);
                self.unmirrored_since = None;
                self.told_unreached = false;
                Ok(true)
            }
            Err(e) if refused(&e) && !self.served => bail!("backup {} refused this primary: {e}", self.args.backup),
            Err(e) => {
                self.next_try = Instant::now() + Duration::from_millis(self.args.retry_ms);
                if !self.told_unreached {
                    self.told_unreached = true;
                    let (backup, retry) = (self.args.backup, self.args.retry_ms);
                    if refused(&e) {
                        // Serving already: stay up until the backup is
                        // replaced or fixed, and say why it is refused.
                        say(&format!("backup refused: {backup} refused this primary: {e}; trying every {retry} ms"));
                    } else {
                        eprintln!("backup {backup} not reached ({e}); trying every {retry} ms");
                    }
                }
                Ok(false)
            }
        }
    }

    /// Whether the primary commits without its backup now: allowed, and the
    /// backup lost or not reached.
    fn alone(&self) -> bool {
        match &self.mirror {
            Some(mirror) => mirror.unmirrored().is_some(),
            None => self.args.allow_unmirrored,
        }
    }

    /// Whether a transaction can commit now: mirrored, or allowed alone.
    /// Tries the backup again when it is due; blocks (for at most the
    /// retry interval) while commits must wait for it.
    fn ready(&mut self, stop: &AtomicBool) -> Result<bool> {
        if self.mirror.is_some() && !self.alone() {
            return Ok(true);
        }
        if Instant::now() >= self.next_try && self.connect()? {
            return Ok(true);
        }
        if self.alone() {
            return Ok(true);
        }
        let wait = self.next_try.saturating_duration_since(Instant::now());
        if !stop.load(Ordering::Relaxed) {
            std::thread::sleep(wait.min(Duration::from_millis(self.args.retry_ms)));
        }
        Ok(false)
    }

    /// Runs `plan` as one transaction.
    fn commit(&mut self, plan: &TxPlan) -> Result<Outcome> {
        let committed = match self.mirror.as_mut() {
            Some(mirror) => run_tx(self.heap.begin_with(&mut self.region, mirror), plan),
            None => run_tx(self.heap.begin(&mut self.region), plan),
        };
        match committed {
            Ok(c) => {
                let why = match &self.mirror {
                    Some(mirror) => mirror.unmirrored().map(String::from),
                    None => Some(format!("backup {} not reached", self.args.backup)),
                };
                if let Some(why) = why {
                    if self.unmirrored_since.is_none() {
                        say(&format!("backup lost: {why}; going on unmirrored (allowed) from transaction {}", c.tx));
                        self.unmirrored_since = Some(c.tx);
                        self.next_try = Instant::now() + Duration::from_millis(self.args.retry_ms);
                    }
                }
                Ok(Outcome::Committed(c.tx))
            }
            Err(e @ (TxError::OutOfBounds(_) | TxError::LogFull { .. })) => Ok(Outcome::Refused(e.to_string())),
            Err(e) => {
                say(&format!("commit failed: {e}; no commit until the backup is back"));
                self.mirror = None;
                // The abandoned transaction's number is reused: reopen,
                // remembering that the backup may hold it (its rejoin then
                // copies this pool over it instead of refusing it as ahead).
                let abandoned = self.heap.abandoned_to();
                self.heap = Heap::open(&mut self.region, 0).map_err(|e| anyhow!("reopen after the failure: {e}"))?.0;
                self.heap.note_abandoned(abandoned);
                self.next_try = Instant::now();
                Ok(Outcome::Failed)
            }
        }
    }

    fn acknowledge(&mut self, tx: u64) -> Result<()> {
        self.committed += 1;
        if let Some(file) = &mut self.acked {
            // One write(2) per line: a kill leaves whole lines only.
            file.write_all(format!("{tx}\n").as_bytes())?;
        }
        if self.args.seed.is_none() {
            say(&format!("committed {tx}"));
        }
        Ok(())
    }
}

/// Runs `plan` in `tx`: its writes, an ordering fence after each epoch,
/// the commit. A refused write abandons the transaction.
fn run_tx<S: EpochSink>(mut tx: Tx<'_, Region, S>, plan: &TxPlan) -> Result<Committed, TxError> {
    for epoch in plan {
        for (offset, bytes) in epoch {
            tx.write(*offset, bytes)?;
        }
        tx.ofence()?;
    }
    tx.commit()
}

/// A line on stdout, flushed (the campaign and scripts read it as it comes).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Runs `pmwire mirror-primary` until stopped, its load ends, or the
/// backup refuses it.
pub fn mirror_primary(args: MirrorPrimaryArgs) -> Result<()> {
    let stop = stop_on_signals()?;
    let secret = args.secret.load()?;
    let (region, heap, _lock) = open_heap(&args.pool, args.log_size, args.data_size)?;
    let g = heap.geometry();
    say(&format!(
        "mirror primary: {} (log {} B, data {} B), last committed transaction {}, generation {}; backup {} under {} \
         over {}{}",
        args.pool.display(),
        g.log_bytes,
        g.data_bytes,
        heap.last_committed(),
        heap.history().current().number,
        args.backup,
        args.strategy,
        args.tls,
        if args.allow_unmirrored { ", unmirrored if it is lost" } else { "" }
    ));
    let acked = match &args.acked {
        Some(path) => Some(std::fs::OpenOptions::new().create(true).append(true).open(path)?),
        None => None,
    };
    let mut load = match args.seed {
        Some(seed) => Load::Seeded(CrashLoad::new(seed)),
        None => Load::Script(std::io::stdin().lock()),
    };
    let limit = args.txs.unwrap_or(u64::MAX);
    let mut p = Primary {
        args,
        region,
        heap,
        mirror: None,
        secret,
        acked,
        next_try: Instant::now(),
        committed: 0,
        unmirrored_since: None,
        told_unreached: false,
        served: false,
    };
    p.connect()?;
    p.served = true;
    let mut pending = None;
    while p.committed < limit && !stop.load(Ordering::Relaxed) {
        let plan = match pending.take() {
            Some(plan) => plan,
            None => match load.next()? {
                Step::Tx(plan) => plan,
                Step::Read { offset, len } => {
                    let mut buf = vec![0u8; len as usize];
                    p.heap.read(&p.region, offset, &mut buf)?;
                    say(&format!("read {offset} {}", to_hex(&buf)));
                    continue;
                }
                Step::Blank => continue,
                Step::End => break,
            },
        };
        if !p.ready(&stop)? {
            pending = Some(plan);
            continue;
        }
        match p.commit(&plan)? {
            Outcome::Committed(tx) => p.acknowledge(tx)?,
            Outcome::Refused(why) => say(&format!("refused: {why}")),
            Outcome::Failed => pending = Some(plan),
        }
    }
    let alone = p.alone();
    drop(p.mirror.take());
    say(&format!(
        "stopped: last committed transaction {}, {} committed by this run{}",
        p.heap.last_committed(),
        p.committed,
        if alone || pending.is_some() { " (the backup is behind)" } else { "" }
    ));
    Ok(())
}

/// `pmwire mirror-promote`.
#[derive(Args)]
pub struct MirrorPromoteArgs {
    /// The backup's pool (its backup process stopped or dead).
    #[arg(long)]
    pub pool: PathBuf,
}

/// Runs `pmwire mirror-promote`: recovers the backup's heap and makes it
/// a primary's; prints what it holds.
pub fn mirror_promote(args: &MirrorPromoteArgs) -> Result<()> {
    let pool = &args.pool;
    if !pool.exists() {
        bail!("{} does not exist", pool.display());
    }
    let _lock = lock(pool).map_err(|_| {
        anyhow!("{} is in use by another process: stop its backup (or primary) before promoting it", pool.display())
    })?;
    let options = RegionOptions { create: false, ..RegionOptions::default() };
    let mut region = Region::open(pool, options).with_context(|| format!("open {}", pool.display()))?;
    let (heap, promotion) = Heap::promote(&mut region, 0).map_err(|e| anyhow!("{}", open_refusal(pool, &e)))?;
    let g = heap.geometry();
    let crc = pmwire_mirror::backup::data_crc(&region, &g);
    let generation = promotion.generation;
    say(&format!(
        "promoted {}: last committed transaction {}{}, now generation {} of history {:#018x} (forked at transaction \
         {}; it was in generation {}); log {} B, data {} B, data CRC {crc:#010x}; serve it with `pmwire mirror-primary \
         --pool {} --backup ADDR --strategy S`",
        pool.display(),
        heap.last_committed(),
        if promotion.recovery.replayed.is_some() { " (replayed by recovery)" } else { "" },
        generation.number,
        heap.history().id(),
        generation.start,
        promotion.previous.number,
        g.log_bytes,
        g.data_bytes,
        pool.display()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_line_is_a_transaction_of_epochs_or_a_read() {
        let Step::Tx(plan) = parse_line("0=68656c6c6f 64=ff | 4096=0001\n").unwrap() else { panic!("a transaction") };
        assert_eq!(plan, vec![vec![(0, b"hello".to_vec()), (64, vec![0xff])], vec![(4096, vec![0, 1])]]);
        assert!(matches!(parse_line("read 8 16").unwrap(), Step::Read { offset: 8, len: 16 }));
        assert!(matches!(parse_line("  # a comment").unwrap(), Step::Blank));
        assert!(matches!(parse_line("").unwrap(), Step::Blank));
    }

    #[test]
    fn bad_script_lines_are_refused_with_the_reason() {
        for (line, why) in [
            ("0=abc", "even"),
            ("0=", "even"),
            ("0=zz", "not hex"),
            ("x=00", "bad offset"),
            ("00", "OFFSET=HEXBYTES"),
            ("0=00 | ", "without a write"),
            ("read 1", "read OFFSET LEN"),
            ("read 0 99999999999", "at most"),
            ("read -1 4", "bad offset"),
        ] {
            let err = parse_line(line).err().unwrap_or_else(|| panic!("'{line}' accepted"));
            assert!(format!("{err:#}").contains(why), "'{line}': {err:#}");
        }
    }

    #[test]
    fn a_seeded_plan_is_the_campaigns_transaction() {
        let (mut a, mut b) = (CrashLoad::new(3), CrashLoad::new(3));
        let plan = seeded_plan(&mut a);
        let tx = b.next_tx();
        assert_eq!(plan.len(), tx.len());
        for (epoch, want) in plan.iter().zip(&tx) {
            let got: Vec<(u64, u8)> = epoch.iter().map(|(at, bytes)| (*at, bytes[0])).collect();
            assert_eq!(&got, want);
            assert!(epoch.iter().all(|(_, bytes)| bytes.len() == 64 && bytes.iter().all(|&x| x == bytes[0])));
        }
    }
}
