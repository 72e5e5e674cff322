//! `pmwire kv`: the PASTE key-value server (RESP and HTTP on one io_uring loop over a
//! persistent pool) until SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use pmwire_kv_server::{stop_on_signals, KvServer, Mode, ServeOptions};

/// `pmwire kv`.
#[derive(Args)]
pub struct KvArgs {
    /// Pool file (a tmpfs path is emulated persistent memory); created on first use, recovered afterwards.
    #[arg(long)]
    pool: PathBuf,
    /// Size of a new pool (bytes; K, M, G suffixes); an existing pool keeps its size.
    #[arg(long, value_parser = crate::size::parse)]
    size: u64,
    /// RESP (Redis protocol) listen address; port 0 picks one.
    #[arg(long)]
    resp: SocketAddr,
    /// HTTP listen address; port 0 picks one.
    #[arg(long)]
    http: SocketAddr,
    /// zero-copy (receive into the pool, store by extents), copy (receive into DRAM, copy in), or no-persist (copy; POST /log acknowledged without storing).
    #[arg(long, default_value = "zero-copy", value_parser = parse_mode)]
    mode: Mode,
    /// Poll for completions this many microseconds before sleeping (0: sleep at once).
    #[arg(long, default_value_t = 0)]
    busy_poll_us: u32,
    /// After a turn that sent replies, wait up to this many microseconds for the requests they make likely (Linux 6.12; 0: off).
    #[arg(long, default_value_t = pmwire_kv_server::BATCH_WAIT_US)]
    batch_wait_us: u32,
    /// The default user's password, as redis-server's: RESP clients must AUTH (or HELLO AUTH), HTTP requests send `Authorization: Bearer <password>`. CONFIG SET requirepass changes it.
    #[arg(long)]
    requirepass: Option<String>,
    /// Redis's protected mode: with no password set, connections from anywhere but loopback get Redis's DENIED error (yes or no).
    #[arg(long, default_value = "yes", value_parser = parse_yes_no, action = clap::ArgAction::Set)]
    protected_mode: bool,
    /// Write the bound addresses here (JSON: resp, http, pid, mode) once listening.
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Planted bug for the crash campaign's canary: acknowledge writes before committing them.
    #[arg(long, hide = true)]
    fault_ack_before_commit: bool,
    /// When a collection stops being one blob (Redis's listpack) and is chunked: `default` (past 128 members or 8 KiB, chunks of about one pool buffer) or `tiny` (past 2 members, chunks of 2-3: for tests and the crash campaign).
    #[arg(long, default_value = "default", value_parser = parse_collection_limits)]
    collection_limits: pmwire_kv_server::ChunkConfig,
    /// Planted bug for the crash campaign's canary: a list push that starts a new chunk writes the header without the chunk.
    #[arg(long, hide = true)]
    fault_header_without_chunk: bool,
}

fn parse_collection_limits(s: &str) -> Result<pmwire_kv_server::ChunkConfig, String> {
    match s {
        "default" => Ok(pmwire_kv_server::ChunkConfig::default()),
        "tiny" => Ok(pmwire_kv_server::ChunkConfig::tiny()),
        other => Err(format!("'{other}': default or tiny")),
    }
}

fn parse_yes_no(s: &str) -> Result<bool, String> {
    match s {
        "yes" => Ok(true),
        "no" => Ok(false),
        other => Err(format!("'{other}': yes or no")),
    }
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    Mode::parse(s).ok_or_else(|| format!("unknown mode '{s}' (zero-copy, copy, no-persist)"))
}

/// Serves until SIGTERM or SIGINT; every acknowledged write is durable, so the stop loses
/// nothing.
pub fn run(args: &KvArgs) -> Result<()> {
    let options = ServeOptions {
        pool: args.pool.clone(),
        size: args.size,
        resp: args.resp,
        http: args.http,
        mode: args.mode,
        busy_poll_us: args.busy_poll_us,
        batch_wait_us: args.batch_wait_us,
        requirepass: args.requirepass.as_ref().filter(|p| !p.is_empty()).map(|p| p.as_bytes().to_vec()),
        protected_mode: args.protected_mode,
    };
    let mut server = KvServer::open(&options).with_context(|| format!("pmwire kv on {}", args.pool.display()))?;
    stop_on_signals(server.stop_handle()).context("signal handling")?;
    let mut limits = args.collection_limits;
    limits.fault_header_without_chunk = args.fault_header_without_chunk;
    server.set_collection_limits(limits);
    if args.fault_header_without_chunk {
        eprintln!("pmwire kv: PLANTED BUG: a list push that starts a chunk writes the header without it");
    }
    if args.fault_ack_before_commit {
        server.plant_ack_before_commit();
        eprintln!("pmwire kv: PLANTED BUG: writes are acknowledged before they are committed");
    }
    let store = server.store();
    let sizing = store.sizing();
    println!("pool: {}", store.region().describe());
    println!("{}", server.recovered());
    println!(
        "mode {}; ring of {} x {} B buffers, at most {} connections of {} B unconsumed input",
        args.mode,
        sizing.ring_entries,
        sizing.buf_size,
        sizing.max_connections,
        pmwire_kv_server::store::MAX_RX_BYTES
    );
    let (resp, http) = server.addrs();
    if let Some(path) = &args.ready_file {
        server.ready().write(path).with_context(|| format!("ready file {}", path.display()))?;
    }
    println!("serving RESP on {resp}, HTTP on {http}");
    server.run().context("serving")?;
    let stats = server.service().stats();
    println!(
        "stopped: {} batches, {} commits, {} RESP commands, {} HTTP requests",
        stats.batches, stats.commits, stats.resp_commands, stats.http_requests
    );
    Ok(())
}
