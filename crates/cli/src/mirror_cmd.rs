//! `pmwire bench mirror`: seed 002's Transact over the mirror
//! (`pmwire_bench::mirror`).
//!
//! `pmwire mirror-backup`: the backup of a mirrored transactional heap
//! (issue 14, seed 002), as a process. It opens (and recovers) the heap in
//! its pool, or formats one when the pool file does not exist yet and
//! `--log-size` and `--data-size` say its shape, then serves one
//! primary's mirror stream at a time over UCX until killed. The pool is
//! locked for the process's lifetime, so a second backup on the same pool
//! is refused. Every commit is durable on the pool before the primary
//! hears of it, so a kill -9 loses nothing acknowledged.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use pmem::{Region, RegionOptions};
use pmwire_bench::remote::server::ucx_config;
use pmwire_mirror::format::Geometry;
use pmwire_mirror::{Backup, BackupService, Heap, OpenError};
use reactor::{PollBudget, Reactor, RealClock};
use link::{LinkConfig, LinkTransport};
use transport::UcxTransport;

/// `pmwire mirror-backup`.
#[derive(Args)]
pub struct MirrorBackupArgs {
    /// The backup's pool file (a tmpfs path is emulated persistent memory). It must hold a mirror heap, or not exist
    /// (then --log-size and --data-size format one).
    #[arg(long)]
    pub pool: PathBuf,
    /// Where to listen (IP:PORT; port 0 picks one).
    #[arg(long)]
    pub listen: SocketAddr,
    /// UCX transport: tcp, or sm (shared memory, with tcp for connection set-up).
    #[arg(long, default_value = "tcp")]
    pub tls: String,
    /// The heap's redo log (bytes; K, M, G suffixes) when the pool is created; checked against an existing pool.
    #[arg(long, value_parser = crate::size::parse)]
    pub log_size: Option<u64>,
    /// The heap's data area when the pool is created; checked against an existing pool.
    #[arg(long, value_parser = crate::size::parse)]
    pub data_size: Option<u64>,
    /// Microseconds the loop keeps polling after activity before it blocks (0 blocks at once).
    #[arg(long, default_value_t = 30)]
    pub poll_us: u64,
    /// Write {"addr":"..."} here once listening.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
    /// The secret the primary must prove.
    #[command(flatten)]
    pub secret: crate::secret_args::ServerSecret,
}

/// Locks the pool file for this process (released when the file closes).
pub(crate) fn lock(path: &Path) -> Result<File> {
    match pmem::lock::lock_file(path, false) {
        Err(pmem::lock::LockError::Held(_)) => bail!("{} is in use by another process (it holds the lock); one backup per pool", path.display()),
        other => Ok(other?),
    }
}

/// Opens the backup's heap, or formats one in a new pool.
fn open_pool(args: &MirrorBackupArgs) -> Result<(Region, Backup, File)> {
    let path = &args.pool;
    let (log, data) = (args.log_size, args.data_size);
    open_or_create(
        path,
        log,
        data,
        "a backup heap",
        Backup::geometry,
        |region, log, data| Backup::create(region, 0, log, data).map_err(|e| anyhow!("{e}")),
        |region| match Backup::open(region, 0) {
            Ok((backup, _)) => Ok(backup),
            Err(OpenError::BadMagic { .. }) => {
                bail!(
                    "{} holds no mirror heap (not a pool of `pmwire mirror-backup`); not overwriting it",
                    path.display()
                )
            }
            Err(e) => bail!("{}: {e} (not overwriting it)", path.display()),
        },
    )
}

/// The pool of a mirror command, locked for this process: where no file is,
/// a new one of `log` + `data` bytes formatted by `create` (and removed if
/// that fails); else the existing one opened by `open`, refused unless its
/// geometry matches the sizes given.
pub(crate) fn open_or_create<T>(
    path: &Path,
    log: Option<u64>,
    data: Option<u64>,
    what: &str,
    geometry: impl Fn(&T) -> Geometry,
    create: impl FnOnce(&mut Region, u64, u64) -> Result<T>,
    open: impl FnOnce(&mut Region) -> Result<T>,
) -> Result<(Region, T, File)> {
    if !path.exists() {
        let (Some(log), Some(data)) = (log, data) else {
            bail!("{} does not exist: give --log-size and --data-size to create {what} there", path.display());
        };
        let mut region = Region::create(path, Heap::required_size(log, data))
            .with_context(|| format!("create {}", path.display()))?;
        let lock = lock(path)?;
        let made = create(&mut region, log, data).map_err(|e| {
            let _ = std::fs::remove_file(path);
            anyhow!("format {}: {e}", path.display())
        })?;
        return Ok((region, made, lock));
    }
    let lock = lock(path)?;
    let options = RegionOptions { create: false, ..RegionOptions::default() };
    let mut region = Region::open(path, options).with_context(|| format!("open {}", path.display()))?;
    let opened = open(&mut region)?;
    let g = geometry(&opened);
    let asked = (log.unwrap_or(g.log_bytes), data.unwrap_or(g.data_bytes));
    if asked != (g.log_bytes, g.data_bytes) {
        bail!(
            "{} holds a heap with a log of {} B and a data area of {} B, not the {} B and {} B asked for",
            path.display(),
            g.log_bytes,
            g.data_bytes,
            asked.0,
            asked.1
        );
    }
    Ok((region, opened, lock))
}

/// Runs `pmwire mirror-backup` until killed.
pub fn mirror_backup(args: &MirrorBackupArgs) -> Result<()> {
    let secret = args.secret.load()?;
    let (region, backup, _lock) = open_pool(args)?;
    let mut transport = UcxTransport::new(&ucx_config(&args.tls, args.listen.ip().is_loopback(), false)?)?;
    let bound = transport.listen(args.listen).with_context(|| format!("listen on {}", args.listen))?;
    let g = backup.geometry();
    println!(
        "mirror backup on {bound} over {}: {} (log {} B, data {} B), last committed transaction {}",
        args.tls,
        args.pool.display(),
        g.log_bytes,
        g.data_bytes,
        backup.last_committed()
    );
    if backup.torn() {
        println!("the pool holds an unfinished resynchronisation copy: the next primary's hello restarts it");
    }
    if let Some(path) = &args.ready_file {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("{{\"addr\":\"{bound}\"}}\n"))?;
        std::fs::rename(&tmp, path)?;
    }
    let budget = match args.poll_us {
        0 => PollBudget::BLOCK,
        us => PollBudget { spin: std::time::Duration::from_micros(us), ..PollBudget::default() },
    };
    let mut link = LinkConfig::mirror_backup();
    link.log_events = true;
    let transport = LinkTransport::real(transport, secret, link);
    let mut reactor = Reactor::new(transport, BackupService::new(region, backup));
    reactor.run(&RealClock::new(), &AtomicBool::new(false), budget);
    Ok(())
}

/// `pmwire bench mirror`.
#[derive(Args)]
pub struct MirrorBenchArgs {
    /// A short run (~10 s): 10 configurations (1-256 epochs x 1 and 8 writes), 5 rounds.
    #[arg(long)]
    pub quick: bool,
    /// UCX transport: tcp, sm or both.
    #[arg(long, default_value = "both", value_parser = ["tcp", "sm", "both"])]
    pub tls: String,
    /// Where to write the JSON results.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Run one part: transact (seed 002 §7.1), whisper (the WHISPER-like applications, §7.2) or pmemobj (NO-SM beside libpmemobj).
    #[arg(long, value_parser = ["transact", "whisper", "pmemobj"])]
    pub only: Option<String>,
}

/// Runs `pmwire bench mirror`.
pub fn bench(args: &MirrorBenchArgs) -> Result<()> {
    let transports = match args.tls.as_str() {
        "both" => vec!["tcp".to_string(), "sm".to_string()],
        one => vec![one.to_string()],
    };
    let only = args.only.as_deref().map(|o| pmwire_bench::mirror::Part::parse(o).expect("clap checked the name"));
    let options =
        pmwire_bench::mirror::MirrorOptions { quick: args.quick, transports, out_dir: args.out.clone(), only };
    let report = pmwire_bench::mirror::run(&options)?;
    println!("results: {}", report.json_path.display());
    Ok(())
}

/// A mirroring strategy's name (NO-SM mirrors nothing, so it is not one).
pub(crate) fn parse_strategy(s: &str) -> Result<pmwire_mirror::Strategy, String> {
    match pmwire_mirror::Strategy::parse(s) {
        Some(pmwire_mirror::Strategy::NoSm) | None => {
            Err(format!("unknown mirroring strategy '{s}' (SM-RC, SM-OB, SM-DD)"))
        }
        Some(strategy) => Ok(strategy),
    }
}

/// `pmwire bench mirror-crash`.
#[derive(Args)]
pub struct MirrorCrashArgs {
    /// Runs: the primary killed (then the backup promoted and served, the old primary's pool as its backup) in even
    /// ones, every fourth of them after the primary went on unmirrored; the backup killed (then restarted and
    /// resynchronised) in odd ones, its primary failing its commits or going on unmirrored in turn; SM-RC, SM-OB, SM-DD
    /// in turn.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub runs: u64,
    /// UCX transport: tcp or sm.
    #[arg(long, default_value = "tcp", value_parser = ["tcp", "sm"])]
    pub tls: String,
    /// Seed of the kill delays and the loads (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Where to write the JSON results.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
}

/// Runs `pmwire bench mirror-crash`.
pub fn crash(args: &MirrorCrashArgs) -> Result<()> {
    let seed = args.seed.unwrap_or_else(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        now.as_nanos() as u64
    });
    let options = pmwire_bench::mirror_crash::MirrorCrashOptions {
        runs: args.runs,
        tls: args.tls.clone(),
        seed,
        exe: std::env::current_exe()?,
        out_dir: args.out.clone(),
    };
    let report = pmwire_bench::mirror_crash::run(&options)?;
    println!("results: {}", report.json_path.display());
    Ok(())
}
