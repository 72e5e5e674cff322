//! The remote subcommands: `pmwire serve`, `pmwire remote status` (Auto's
//! choice per size class and its evidence, against a running server), and
//! the remote bench suites (`bench crash`, and the latency, bulk and
//! log-server suites).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use pmem::{Region, RegionOptions};
use pmwire_bench::remote::crash::{self, CrashOptions};
use pmwire_bench::SuiteReport;
use pmwire_bench::remote::logserver::LogServerOptions;
use pmwire_bench::remote::server::{ucx_config, KeyFile};
use pmwire_remote::auto::AutoStatus;
use pmwire_remote::calibration::{CalibrationCache, Lookup};
use pmwire_remote::client::{Client, ClientOptions};
use pmwire_remote::event_loop::{register_data_area, serve_with, PollBudget};
use pmwire_remote::proto::Method;
use pmwire_remote::pool::{PoolConfig, PoolOpenError};
use pmwire_remote::server::{Server, ServerConfig, ServerError};
use transport::UcxTransport;

/// `pmwire serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// Pool file (a tmpfs path is emulated persistent memory); formatted if it holds no pool.
    #[arg(long)]
    pool: PathBuf,
    /// Pool size (bytes; K, M, G suffixes).
    #[arg(long, value_parser = crate::size::parse)]
    size: u64,
    /// Listen address (port 0 picks one).
    #[arg(long)]
    listen: SocketAddr,
    /// UCX transport: tcp, or sm (shared memory, with tcp for connection set-up).
    #[arg(long, default_value = "tcp")]
    tls: String,
    /// Copy-engine depth: 0 (no RpcOffload), 1 or 8 copies in flight.
    #[arg(long, default_value_t = 8)]
    copy_engine: usize,
    /// RpcOffload writes of at most this many bytes are copied on the event loop while the copy engine is idle
    /// (the hand-off to a sleeping helper costs more than a small copy); 0 hands every copy off.
    #[arg(long, default_value_t = pmwire_remote::copy_engine::INLINE_MAX_BYTES)]
    copy_inline_max: usize,
    /// Region id of a newly formatted pool.
    #[arg(long, default_value_t = 1)]
    region_id: u32,
    /// Write the region id, key and bound address here (JSON) instead of printing the key.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Microseconds the loop keeps polling after activity (at most 1024 empty polls) before it blocks; 0 blocks at once.
    #[arg(long, default_value_t = 30)]
    poll_us: u64,
    /// Turn on one-sided access (put, get, atomic into the data area: the put + FLUSH and read-after-write methods).
    /// DANGER on tcp and sm: UCX serves these in software at whatever address a client names, unchecked against the
    /// registration, so any client that can connect can then read and write the WHOLE server process, the access key
    /// included, and crash it with a bad address. Use it only on a trusted network where every client is trusted.
    /// Off by default: no memory is registered, and HELLO says one-sided access is off.
    #[arg(long)]
    one_sided: bool,
}

/// The remote bench suites (flattened into `pmwire bench`).
#[derive(Subcommand)]
pub enum RemoteSuite {
    /// Kill -9 `pmwire serve` mid-load, restart, check every acknowledged write and append.
    Crash(CrashArgs),
    /// Remote write latency, 64 B-1 KB, one outstanding, every method, over tcp and sm; ucx_perftest floor.
    RemoteLatency(QuickArgs),
    /// The copy engine (issue 13): Rpc vs RpcOffload latency 64 B-64 KiB, and inline vs hand-off GB/s at window 8 (the crossover).
    RemoteOffload(OffloadArgs),
    /// Remote bulk writes, 1-128 KB, windows 1/8/32: put + FLUSH per window, Rpc, RpcOffload; GB/s.
    RemoteBulk(QuickArgs),
    /// Networked persistent log server (seed 000 Fig 9): 1 server thread, 1-8 clients x 32 appends outstanding, 64 B-2 KB, each tail strategy; appends/s.
    LogServer(LogServerArgs),
}

/// `pmwire bench log-server`.
#[derive(Args)]
pub struct LogServerArgs {
    /// A short run (~30 s): 256 B and 2 KB entries, 1 and 8 clients.
    #[arg(long)]
    quick: bool,
    /// UCX transport: tcp, sm or both.
    #[arg(long, default_value = "both", value_parser = ["tcp", "sm", "both"])]
    tls: String,
    /// Where to write the JSON results.
    #[arg(long, default_value = "results")]
    out: PathBuf,
}

/// `pmwire bench remote-offload`.
#[derive(Args)]
pub struct OffloadArgs {
    /// A short run (~10 s per transport).
    #[arg(long)]
    quick: bool,
    /// UCX transport: tcp, sm or both.
    #[arg(long, default_value = "both", value_parser = ["tcp", "sm", "both"])]
    tls: String,
    /// Where to write the JSON results.
    #[arg(long, default_value = "results")]
    out: PathBuf,
}

/// A remote suite's options.
#[derive(Args)]
pub struct QuickArgs {
    /// A short run (~30 s).
    #[arg(long)]
    quick: bool,
    /// Where to write the JSON results.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Run the suite N times and report each headline's worst value across
    /// the runs (each run's value beside it, in the table and the JSON).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    repeat: u64,
}

/// `pmwire bench crash`.
#[derive(Args)]
pub struct CrashArgs {
    /// Kill -9 runs.
    #[arg(long, default_value_t = 100)]
    runs: usize,
    /// Longest load before the kill, in milliseconds (the kill comes at a random moment).
    #[arg(long, default_value_t = 60)]
    max_load_ms: u64,
    /// Seed of sizes, methods and kill moments.
    #[arg(long)]
    seed: Option<u64>,
}

/// Runs a suite `--repeat` times ([`pmwire_bench::repeat`]).
fn repeat(suite: &str, args: &QuickArgs, mut run: impl FnMut() -> Result<SuiteReport>) -> Result<SuiteReport> {
    pmwire_bench::repeat::run(suite, args.repeat as usize, &args.out, |_| run())
}

/// Runs `pmwire serve` until killed.
pub fn serve_cmd(args: &ServeArgs) -> Result<()> {
    let config = ServerConfig {
        copy_depth: args.copy_engine,
        copy_threads: 1,
        copy_inline_max_bytes: args.copy_inline_max,
        ..ServerConfig::default()
    };
    if ![0, 1, 8].contains(&args.copy_engine) {
        bail!("--copy-engine must be 0, 1 or 8");
    }
    let options = RegionOptions { size: Some(args.size), create: true, ..RegionOptions::default() };
    let region = Region::open(&args.pool, options.clone()).with_context(|| format!("open {}", args.pool.display()))?;
    let mut server = match Server::open(region, config.clone()) {
        Ok(server) => server,
        Err(ServerError::Pool(PoolOpenError::NotFormatted { found: 0 })) => {
            let region = Region::open(&args.pool, options.clone())?;
            let pool = PoolConfig { region_id: args.region_id, dir_slots: 64, log_area_bytes: (args.size / 4) & !4095 };
            Server::format(region, pool, config)?
        }
        Err(e) => return Err(e).context("the pool does not open (not overwriting it)"),
    };
    let mut transport = UcxTransport::new(&ucx_config(&args.tls, args.listen.ip().is_loopback(), args.one_sided)?)?;
    let bound = transport.listen(args.listen)?;
    let registered = register_data_area(&mut server, &mut transport)?;
    let (region_id, key) = server.credentials();
    let keys = KeyFile { region_id, key, addr: bound.to_string() };
    match &args.key_file {
        Some(path) => keys.write(path)?,
        None => println!("region_id={region_id} key={key:#018x}"),
    }
    println!("serving {} ({}) on {bound} over {}", args.pool.display(), server.region().describe(), args.tls);
    if args.copy_engine > 0 {
        println!("copy engine: {} in flight; RpcOffload of at most {} B is copied inline while it is idle", args.copy_engine, server.inline_max_bytes());
    }
    match registered {
        None => println!("one-sided access: off (clients use the RPC methods; --one-sided turns it on)"),
        Some(_) => println!(
            "one-sided access: ON, unconfined: over {} UCX serves puts and gets at any address, so every client that can connect can read and write this whole process, the access key included",
            args.tls
        ),
    }
    let stop = AtomicBool::new(false);
    let budget = match args.poll_us {
        0 => PollBudget::BLOCK,
        us => PollBudget { spin: std::time::Duration::from_micros(us), ..PollBudget::default() },
    };
    serve_with(&mut server, &mut transport, &stop, budget);
    Ok(())
}

/// Runs a remote suite.
pub fn bench(suite: &RemoteSuite) -> Result<()> {
    match suite {
        RemoteSuite::RemoteLatency(args) => {
            let options = pmwire_bench::remote::latency::LatencyOptions { quick: args.quick, out_dir: args.out.clone() };
            let report = repeat("remote-latency", args, || pmwire_bench::remote::latency::run(&options))?;
            println!("results: {}", report.json_path.display());
            Ok(())
        }
        RemoteSuite::RemoteOffload(args) => {
            let transports = match args.tls.as_str() {
                "both" => pmwire_bench::remote::common::TRANSPORTS.iter().map(|t| t.to_string()).collect(),
                one => vec![one.to_string()],
            };
            let options = pmwire_bench::remote::offload::OffloadOptions { quick: args.quick, transports, out_dir: args.out.clone() };
            let report = pmwire_bench::remote::offload::run(&options)?;
            println!("results: {}", report.json_path.display());
            Ok(())
        }
        RemoteSuite::RemoteBulk(args) => {
            let options = pmwire_bench::remote::bulk::BulkOptions { quick: args.quick, out_dir: args.out.clone() };
            let report = repeat("remote-bulk", args, || pmwire_bench::remote::bulk::run(&options))?;
            println!("results: {}", report.json_path.display());
            Ok(())
        }
        RemoteSuite::LogServer(args) => {
            let transports = match args.tls.as_str() {
                "both" => pmwire_bench::remote::common::TRANSPORTS.iter().map(|t| t.to_string()).collect(),
                one => vec![one.to_string()],
            };
            let options = LogServerOptions { quick: args.quick, transports, out_dir: args.out.clone(), appends_per_cell: None, rounds: None };
            let report = pmwire_bench::remote::logserver::run(&options)?;
            println!("results: {}", report.json_path.display());
            Ok(())
        }
        RemoteSuite::Crash(args) => {
            let seed = args.seed.unwrap_or_else(|| std::process::id() as u64 ^ 0x5eed);
            let options = CrashOptions {
                runs: args.runs,
                max_load: std::time::Duration::from_millis(args.max_load_ms),
                seed,
                exe: std::env::current_exe()?,
            };
            println!("crash campaign: {} kill -9 runs, seed {seed}", args.runs);
            let report = crash::run(&options)?;
            println!(
                "{} runs: {} acknowledged writes+appends, {} write checks and {} append checks after restarts, {} lost",
                report.runs, report.acknowledged, report.writes_checked, report.appends_checked, report.lost
            );
            println!("{}", crash::phases_text(&report));
            Ok(())
        }
    }
}

/// `pmwire remote`: talk to a running `pmwire serve`.
#[derive(Subcommand)]
pub enum RemoteCommand {
    /// Connect to a `pmwire serve`, calibrate `Auto` (or reuse a cached calibration of the same server, transport and
    /// guarantees), run Auto writes, and print per size class the chosen method, each method's estimates and sample
    /// counts, and the probes spent. The bytes written are the bytes read there first: the data area keeps its content.
    Status(StatusArgs),
    /// Write a file's bytes (or stdin's, `-`) at OFFSET of the data area, durably: each piece is persistent on the
    /// server before the next goes (a write longer than the server's message limit is several pieces, not atomic).
    Write(WriteArgs),
    /// Print LEN bytes of the data area from OFFSET on stdout, as they are.
    Read(ReadArgs),
    /// Append logs in the pool: create one, append an entry, read an entry back, follow the tail.
    Log(LogArgs),
    /// What the server's HELLO says: the data area, what backs it and its persistence domain, this key's rights, the
    /// message limit, each write method's guarantee, and whether one-sided access is on.
    Hello(Target),
}

/// What every command that talks to a `pmwire serve` takes.
#[derive(Args)]
pub struct Target {
    /// The server's key file (`pmwire serve --key-file`): region id, key and address.
    #[arg(long)]
    key_file: PathBuf,
    /// UCX transport: tcp or sm (as the server runs).
    #[arg(long, default_value = "tcp")]
    tls: String,
}

/// `pmwire remote write`.
#[derive(Args)]
pub struct WriteArgs {
    #[command(flatten)]
    target: Target,
    /// Where in the data area (bytes).
    offset: u64,
    /// The file to write, or `-` for stdin.
    file: PathBuf,
    /// How: `rpc` (the server copies, flushes and drains), `rpc-offload` (its copy engine does), or, on a server and
    /// client with one-sided access on (`--one-sided`; see `pmwire serve --one-sided` for the danger), `put-flush` or
    /// `put-get` (seed 004's one-round-trip write).
    #[arg(long, default_value = "rpc")]
    method: String,
    /// Turn on one-sided access on this client (for the put methods).
    #[arg(long)]
    one_sided: bool,
}

/// `pmwire remote read`.
#[derive(Args)]
pub struct ReadArgs {
    #[command(flatten)]
    target: Target,
    /// Where in the data area (bytes).
    offset: u64,
    /// How many bytes.
    len: u64,
}

/// `pmwire remote log`.
#[derive(Args)]
pub struct LogArgs {
    #[command(flatten)]
    target: Target,
    #[command(subcommand)]
    command: LogCommand,
}

/// The log operations.
#[derive(Subcommand)]
pub enum LogCommand {
    /// Create log NAME with CAPACITY bytes of entry space (entries padded to 64 B lines, its tail in a rotating
    /// register); prints its id.
    Create {
        /// The log's name.
        name: String,
        /// Bytes of entry space (K, M, G suffixes).
        #[arg(value_parser = crate::size::parse)]
        capacity: u64,
    },
    /// Append a file's bytes (or stdin's, `-`) to log NAME as one entry; prints its LSN once it is durable.
    Append {
        /// The log's name.
        name: String,
        /// The entry: a file, or `-` for stdin.
        file: PathBuf,
    },
    /// Print entry LSN of log NAME on stdout, as it is.
    Read {
        /// The log's name.
        name: String,
        /// The entry's LSN.
        lsn: u64,
    },
    /// Print log NAME's entries from LSN `--from` on, one a line (as they are, then a newline); with `--follow`,
    /// keep waiting for new ones (until killed).
    Tail {
        /// The log's name.
        name: String,
        /// The first entry's LSN.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Wait for new entries (polling every 100 ms) instead of stopping at the tail.
        #[arg(short = 'f', long)]
        follow: bool,
    },
}

/// `pmwire remote status`.
#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    target: Target,
    /// Turn on one-sided access on this client (the put + FLUSH method; the server must run with --one-sided).
    #[arg(long)]
    one_sided: bool,
    /// Size classes (bytes, comma-separated; K, M suffixes).
    #[arg(long, value_delimiter = ',', value_parser = crate::size::parse, default_value = "64,256,1024,4096")]
    sizes: Vec<u64>,
    /// Calibration rounds (each writes once with every method at every size, interleaved).
    #[arg(long, default_value_t = 100)]
    rounds: usize,
    /// Auto writes per size class after calibrating (the online evidence).
    #[arg(long, default_value_t = 2000)]
    writes: usize,
    /// Where in the data area to write (the bytes there are read first and written back unchanged).
    #[arg(long, default_value_t = 0)]
    offset: u64,
    /// Calibration cache (JSON, one table per server and transport), reused while the target is unchanged.
    #[arg(long)]
    cache: Option<PathBuf>,
    /// Measure anew even if the cache holds a table for this target.
    #[arg(long)]
    recalibrate: bool,
    /// Print the status as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs a `pmwire remote` command.
pub fn remote(command: &RemoteCommand) -> Result<()> {
    match command {
        RemoteCommand::Status(args) => status(args),
        RemoteCommand::Write(args) => write(args),
        RemoteCommand::Read(args) => read(args),
        RemoteCommand::Log(args) => log(args),
        RemoteCommand::Hello(target) => hello(target),
    }
}

fn hello(target: &Target) -> Result<()> {
    use pmwire_remote::proto::{RIGHT_READ, RIGHT_WRITE};
    let client = connect(target, false)?;
    let h = client.hello().clone();
    client.close();
    let kind = ["fsdax", "devdax", "file", "emulated"].get(h.kind as usize).copied().unwrap_or("unknown");
    let domain = ["cpu_cache (eADR)", "memory_controller (ADR)", "page_cache", "process_only"].get(h.domain as usize).copied().unwrap_or("unknown");
    let rights: Vec<&str> = [(RIGHT_READ, "read"), (RIGHT_WRITE, "write")].iter().filter(|(bit, _)| h.rights & bit != 0).map(|(_, n)| *n).collect();
    println!("data area:        {} B", h.data_bytes);
    println!("backed by:        {kind}");
    println!("domain:           {domain}");
    println!("rights:           {}", if rights.is_empty() { "none".to_string() } else { rights.join(", ") });
    println!("max payload:      {} B{}", h.max_payload, if h.payload_crc_required { " (payload CRC required)" } else { "" });
    println!("one-sided access: {:?}", h.one_sided);
    for (method, guarantee) in Method::CONCRETE.iter().zip(h.guarantees) {
        println!("  {:<24} {guarantee:?}", format!("{method:?}"));
    }
    Ok(())
}

/// Connects to the server `target` names (with one-sided access on this
/// client if `one_sided`).
fn connect(target: &Target, one_sided: bool) -> Result<Client<UcxTransport>> {
    connect_with(target, one_sided, ClientOptions::default())
}

/// [`connect`] with the client's `options`.
fn connect_with(target: &Target, one_sided: bool, options: ClientOptions) -> Result<Client<UcxTransport>> {
    let text = std::fs::read_to_string(&target.key_file).with_context(|| format!("read {}", target.key_file.display()))?;
    let keys: KeyFile = serde_json::from_str(&text).with_context(|| format!("parse {}", target.key_file.display()))?;
    let addr = keys.socket()?;
    let transport = UcxTransport::new(&ucx_config(&target.tls, addr.ip().is_loopback(), one_sided)?)?;
    Client::connect_with(transport, &addr, keys.region_id, keys.key, options).with_context(|| format!("connect to {addr}"))
}

/// A file's bytes, or stdin's for `-`.
fn input(file: &std::path::Path) -> Result<Vec<u8>> {
    if file.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes).context("read stdin")?;
        return Ok(bytes);
    }
    std::fs::read(file).with_context(|| format!("read {}", file.display()))
}

fn write(args: &WriteArgs) -> Result<()> {
    let method = match args.method.as_str() {
        "rpc" => Method::Rpc,
        "rpc-offload" => Method::RpcOffload,
        "put-flush" => Method::OneSidedFlush,
        "put-get" => Method::OneSidedReadAfterWrite,
        other => bail!("unknown method {other:?}: rpc, rpc-offload, put-flush or put-get"),
    };
    let bytes = input(&args.file)?;
    let mut client = connect(&args.target, args.one_sided)?;
    let piece = client.hello().max_payload.clamp(1, pmwire_remote::proto::MAX_PAYLOAD_BYTES) as usize;
    let mut at = args.offset;
    for chunk in bytes.chunks(piece) {
        client.write_persistent(at, chunk, method).with_context(|| format!("write {} B at {at}", chunk.len()))?;
        at += chunk.len() as u64;
    }
    client.close();
    eprintln!("wrote {} B at {} ({}), durable", bytes.len(), args.offset, args.method);
    Ok(())
}

fn read(args: &ReadArgs) -> Result<()> {
    let mut client = connect(&args.target, false)?;
    let bytes = client.read_range(args.offset, args.len).with_context(|| format!("read {} B at {}", args.len, args.offset))?;
    client.close();
    std::io::Write::write_all(&mut std::io::stdout().lock(), &bytes).context("write stdout")
}

fn log(args: &LogArgs) -> Result<()> {
    use pmwire_log::{LogConfig, TailStrategy};
    let mut client = connect(&args.target, false)?;
    match &args.command {
        LogCommand::Create { name, capacity } => {
            let id = client.log_create(name.as_bytes(), &LogConfig::new(*capacity, TailStrategy::ROTATING_PAPER)).with_context(|| format!("create log {name}"))?;
            println!("{id}");
        }
        LogCommand::Append { name, file } => {
            let entry = input(file)?;
            let id = client.log_open(name.as_bytes()).with_context(|| format!("open log {name}"))?;
            let lsn = client.log_append(id, &entry).with_context(|| format!("append {} B to log {name}", entry.len()))?;
            println!("{lsn}");
        }
        LogCommand::Read { name, lsn } => {
            let id = client.log_open(name.as_bytes()).with_context(|| format!("open log {name}"))?;
            let mut entry = Vec::new();
            client.log_read(id, *lsn, &mut entry).with_context(|| format!("read entry {lsn} of log {name}"))?;
            std::io::Write::write_all(&mut std::io::stdout().lock(), &entry).context("write stdout")?;
        }
        LogCommand::Tail { name, from, follow } => {
            use pmwire_remote::client::{ClientError, RemoteError};
            use pmwire_remote::proto::Status;
            let id = client.log_open(name.as_bytes()).with_context(|| format!("open log {name}"))?;
            let (mut lsn, mut entry) = (*from, Vec::new());
            loop {
                entry.clear();
                match client.log_read(id, lsn, &mut entry) {
                    Ok(()) => {
                        let mut out = std::io::stdout().lock();
                        std::io::Write::write_all(&mut out, &entry).and_then(|_| std::io::Write::write_all(&mut out, b"\n")).context("write stdout")?;
                        std::io::Write::flush(&mut out).context("write stdout")?;
                        lsn += 1;
                    }
                    Err(ClientError::Remote(RemoteError { status: Status::NoEntry, .. })) if *follow => std::thread::sleep(std::time::Duration::from_millis(100)),
                    Err(ClientError::Remote(RemoteError { status: Status::NoEntry, .. })) => break,
                    Err(e) => return Err(e).with_context(|| format!("read entry {lsn} of log {name}")),
                }
            }
        }
    }
    client.close();
    Ok(())
}

fn status(args: &StatusArgs) -> Result<()> {
    let options = ClientOptions { payload_crc: false, ..ClientOptions::default() };
    let mut client = connect_with(&args.target, args.one_sided, options)?;
    let target = client.target(&args.target.tls);
    let mut cache = match &args.cache {
        Some(path) => CalibrationCache::load(path)?,
        None => CalibrationCache::default(),
    };
    let cached = match cache.lookup(&target) {
        Lookup::Fresh(table) if !args.recalibrate => Some(table.clone()),
        Lookup::Fresh(_) => None,
        Lookup::Invalidated(why) => {
            println!("cached calibration invalidated: {why}");
            None
        }
        Lookup::Missing => None,
    };
    let how = match cached {
        Some(table) => {
            client.set_calibration(table)?;
            "reused from the cache (same server, transport and guarantees)".to_string()
        }
        None => {
            let started = std::time::Instant::now();
            let table = client.calibrate(args.offset, &args.sizes, args.rounds, &args.target.tls)?.clone();
            cache.insert(table);
            format!("measured now: {} interleaved rounds in {:.1} s", args.rounds, started.elapsed().as_secs_f64())
        }
    };
    if let Some(path) = &args.cache {
        cache.save(path)?;
    }
    let sizes = client.calibration().map(|c| c.sizes()).unwrap_or_default();
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let original = client.read_range(args.offset, largest)?;
    for &size in &sizes {
        for _ in 0..args.writes {
            client.write_persistent(args.offset, &original[..size as usize], Method::Auto)?;
        }
    }
    let status = client.auto_status().context("Auto has no calibration")?;
    client.close();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        println!("calibration: {how}");
        print!("{}", status_text(&status, args.writes));
    }
    Ok(())
}

/// The status as a table per size class.
fn status_text(status: &AutoStatus, writes: usize) -> String {
    let t = &status.target;
    let p = &status.params;
    let mut out = format!(
        "target: {} over {}; domain code {}, guarantees {:?}, one-sided {}, max payload {} B; writes must give {:?}\n",
        t.server, t.transport, t.domain, t.guarantees, t.one_sided, t.max_payload, t.required
    );
    out += &format!(
        "selector: switch when another method is {:.0}% faster (paired median of {} probes, upper quartile < 1); probe 1 write in {} (1 in {} until each alternative has a batch)\n",
        p.margin * 100.0,
        p.batch,
        p.probe_every,
        p.probe_every_young
    );
    out += &format!("{writes} Auto writes per size class after calibrating\n\n");
    let us = |ns: u64| format!("{:.2} us", ns as f64 / 1e3);
    for c in &status.classes {
        out += &format!(
            "{:>7} B  chosen {:?} (calibration chose {:?}); {} writes, {} probes ({:.1}%), {} switches\n",
            c.size_bytes,
            c.chosen,
            c.calibrated_choice,
            c.writes,
            c.probes,
            100.0 * c.probes as f64 / c.writes.max(1) as f64,
            c.switches
        );
        out += &format!("           {:<24} {:>18} {:>20} {:>22}\n", "method", "calibrated (n)", "online p50 (n)", "vs chosen (pairs)");
        for m in &c.methods {
            let online = m.online_ns.map_or("-".to_string(), |ns| format!("{} ({})", us(ns), m.online_samples));
            let ratio = match m.ratio_to_chosen {
                Some(r) => format!("{r:.2}x (+{})", m.pairs),
                None if m.method == c.chosen => "chosen".to_string(),
                None => format!("- (+{})", m.pairs),
            };
            let mark = if m.method == c.chosen { "*" } else { " " };
            let calibrated = format!("{} ({})", us(m.calibrated_ns), m.calibrated_samples);
            out += &format!("         {mark} {:<24} {calibrated:>18} {online:>20} {ratio:>22}\n", format!("{:?}", m.method));
        }
    }
    out
}
