//! `pmwire kv`: the PASTE key-value server (RESP and HTTP on one io_uring loop over a
//! persistent pool) until SIGTERM or SIGINT; with `--cluster`, one member of a replicated
//! cluster (`pmwire_kv_server::member`): the keyspace in `--pool`, the Raft log in
//! `<pool>.raft`, both locked through `<pool>.lock`, the peers over authenticated links.

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
    /// Most clients connected at once, as redis-server's maxclients: one more is sent "-ERR max number of clients reached" and closed (lowered, with a warning, to what the process's descriptor limit allows). CONFIG SET maxclients changes it.
    #[arg(long, default_value_t = pmwire_kv_server::store::DEFAULT_MAXCLIENTS)]
    maxclients: u32,
    /// Refuse the writes that may grow the keyspace (Redis's denyoom commands) while the keyspace's used memory (INFO's used_memory: pool buffers and index nodes in use) is above this many bytes, as redis-server's maxmemory with maxmemory-policy noeviction (a unit: 100mb, 1gb; 0: no limit). pmwire never evicts. CONFIG SET maxmemory changes it.
    #[arg(long, default_value = "0", value_parser = parse_maxmemory)]
    maxmemory: u64,
    /// Close a client idle for this many seconds (0: never), as redis-server's timeout; blocked clients and subscribers are spared. CONFIG SET timeout changes it.
    #[arg(long, default_value_t = 0)]
    timeout: u32,
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
    /// Planted bug for the crash campaign's canary: a script's writes are committed command by command.
    #[arg(long, hide = true)]
    fault_script_commit_per_call: bool,
    /// Serve as a member of a replicated cluster: every member's peer address, this one's included: ID=ADDR,ID=ADDR,...
    /// (as `pmwire replica --peers`). Writes are answered once committed on a majority, reads are linearizable
    /// (ReadIndex; READONLY asks for a possibly stale local read); a member cut off from its majority answers
    /// -CLUSTERDOWN within about a second. The Raft log lives in `<pool>.raft`. Needs --id and --secret-file.
    #[arg(long, value_parser = crate::smr_cmd::parse_peers, requires_all = ["id", "secret_file"])]
    cluster: Option<crate::smr_cmd::Peers>,
    /// This member's id (one of the ids in --cluster).
    #[arg(long)]
    id: Option<u64>,
    /// The cluster's secret (--cluster): a file of 32 random bytes, mode 0600, the same on every member. Every peer
    /// connection proves it (HMAC-SHA256 challenge-response) before any Raft message is accepted.
    #[arg(long)]
    secret_file: Option<PathBuf>,
    /// Create --secret-file (32 random bytes, mode 0600) if it does not exist; copy it to the other members.
    #[arg(long)]
    create_secret: bool,
    /// Transport between members (--cluster): uring (TCP sockets on io_uring, the default: as fast as UCX tcp at one
    /// client and 1.3-13x its throughput under load, docs/bench.md), tcp or sm (UCX).
    #[arg(long, default_value = "uring", value_parser = ["uring", "tcp", "sm"])]
    peer_transport: String,
    /// Size of a new Raft pool (`<pool>.raft`, --cluster).
    #[arg(long, value_parser = crate::size::parse, default_value = "256M")]
    raft_size: u64,
    /// The Raft log's capacity in its pool (--cluster).
    #[arg(long, value_parser = crate::size::parse, default_value = "64M")]
    raft_log_size: u64,
    /// Cluster id written into a new Raft pool and checked when one is opened (--cluster).
    #[arg(long, default_value_t = 1)]
    cluster_id: u64,
    /// One Raft tick in milliseconds (--cluster; elections after 10-20 ticks, heartbeats every 2).
    #[arg(long, default_value_t = 10)]
    tick_ms: u64,
    /// What a follower does with a write or a linearizable read (--cluster): forward (to the leader, by Raft's
    /// proposal and ReadIndex forwarding, and relay the answer: the default) or moved (answer `-MOVED slot ADDR` with
    /// the leader's RESP address from --cluster-resp).
    #[arg(long, default_value = "forward", value_parser = ["forward", "moved"])]
    redirect: String,
    /// Every member's RESP address, ID=ADDR,... (for --redirect moved).
    #[arg(long, value_parser = crate::smr_cmd::parse_peers)]
    cluster_resp: Option<crate::smr_cmd::Peers>,
    /// Join a running cluster (--cluster): a new Raft pool is formatted with no voters and the member waits, never
    /// campaigning, until `pmwire smr --tls uring --peers ... add --id N --addr PEER_ADDR` adds it; it then starts
    /// from the leader's snapshot (streamed in chunks) and the log. --cluster lists the running members and this one.
    /// Ignored for a Raft pool that already holds a store.
    #[arg(long, requires = "cluster")]
    join: bool,
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
    if args.cluster.is_some() {
        return run_member(args);
    }
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
    warn_maxclients(args.maxclients, server.set_client_limits(args.maxclients, args.timeout));
    server.set_maxmemory(args.maxmemory);
    if args.fault_header_without_chunk {
        eprintln!("pmwire kv: PLANTED BUG: a list push that starts a chunk writes the header without it");
    }
    if args.fault_script_commit_per_call {
        server.plant_script_commit_per_call();
        eprintln!("pmwire kv: PLANTED BUG: a script's writes are committed command by command");
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
        "mode {}; ring of {} x {} B buffers; at most {} clients; {} buffers for unconsumed input (requests of up to {} B; past it the client holding the most is closed)",
        args.mode,
        sizing.ring_entries,
        sizing.buf_size,
        server.service().client_config().maxclients,
        sizing.rx_budget,
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

/// `pmwire kv --cluster`: one member until SIGTERM or SIGINT.
fn run_member(args: &KvArgs) -> Result<()> {
    use pmwire_kv_server::member::{MemberOptions, MemberServer};
    if args.maxmemory != 0 {
        anyhow::bail!("--maxmemory is for a single server: a cluster member's writes are admitted by the replicated log, which does not enforce it");
    }
    let peers = args.cluster.as_ref().expect("--cluster").0.clone();
    let id = args.id.context("--cluster needs --id")?;
    let Some(&peer_addr) = peers.get(&id) else {
        anyhow::bail!("--id {id} is not in --cluster ({})", peers.keys().map(u64::to_string).collect::<Vec<_>>().join(", "));
    };
    if args.tick_ms == 0 {
        anyhow::bail!("--tick-ms must be at least 1");
    }
    let secret = crate::secret_args::ServerSecret { secret_file: args.secret_file.clone().context("--cluster needs --secret-file")?, create_secret: args.create_secret }.load()?;
    let redirect = match (args.redirect.as_str(), &args.cluster_resp) {
        ("moved", None) => anyhow::bail!("--redirect moved needs --cluster-resp (every member's RESP address)"),
        ("moved", Some(resp)) => Some(resp.0.clone()),
        _ => None,
    };
    let options = MemberOptions {
        pool: args.pool.clone(),
        size: args.size,
        raft_size: args.raft_size,
        raft_log_bytes: args.raft_log_size,
        resp: args.resp,
        http: args.http,
        id,
        peers,
        cluster: args.cluster_id,
        tick: std::time::Duration::from_millis(args.tick_ms),
        requirepass: args.requirepass.as_ref().filter(|p| !p.is_empty()).map(|p| p.as_bytes().to_vec()),
        protected_mode: args.protected_mode,
        redirect,
        mode: args.mode,
        join: args.join,
    };
    if args.peer_transport == "uring" {
        let mut transport = transport::TcpTransport::new(&crate::smr_cmd::uring_config())?;
        transport.listen(peer_addr).with_context(|| format!("listen for peers on {peer_addr}"))?;
        let server = MemberServer::open(&options, transport, secret).with_context(|| format!("pmwire kv member {id} on {}", args.pool.display()))?;
        return serve_member(server, args, peer_addr);
    }
    let mut ucx = pmwire_bench::remote::server::ucx_config(&args.peer_transport, peer_addr.ip().is_loopback(), false)?;
    ucx.limits.max_conns = 1024;
    let mut transport = transport::UcxTransport::new(&ucx)?;
    transport.listen(peer_addr).with_context(|| format!("listen for peers on {peer_addr}"))?;
    let server = MemberServer::open(&options, transport, secret).with_context(|| format!("pmwire kv member {id} on {}", args.pool.display()))?;
    serve_member(server, args, peer_addr)
}

fn serve_member<T: transport::Transport<Addr = SocketAddr>>(mut server: pmwire_kv_server::member::MemberServer<T>, args: &KvArgs, peer_addr: SocketAddr) -> Result<()> {
    stop_on_signals(server.stop_handle()).context("signal handling")?;
    warn_maxclients(args.maxclients, server.set_client_limits(args.maxclients, args.timeout));
    println!("{}", server.recovered);
    let (resp, http) = server.addrs();
    let st = server.member().replica().status();
    let voters = server.member().replica().conf_state().voters;
    if voters.is_empty() {
        println!("member {} waiting to be added (pmwire smr --tls {} --peers ... add --id {} --addr {peer_addr})", st.id, args.peer_transport, st.id);
    }
    println!("member {} of {} (peers on {peer_addr} over {}); raft last index {}, applied {}", st.id, args.cluster.as_ref().map_or(0, |c| c.0.len()), args.peer_transport, st.last_index, st.applied);
    if let Some(path) = &args.ready_file {
        let ready = pmwire_kv_server::ReadyFile { resp: resp.to_string(), http: http.to_string(), pid: std::process::id(), mode: "cluster".into() };
        ready.write(path).with_context(|| format!("ready file {}", path.display()))?;
    }
    println!("serving RESP on {resp}, HTTP on {http}");
    server.run().context("serving")?;
    if let Some(reason) = server.halted() {
        // As `pmwire replica` does: nothing is lost (every committed entry
        // is in the Raft log, and the keyspace replays after its applied
        // index), and the pools' lock goes with the process.
        eprintln!("Error: member halted: {reason}");
        std::process::exit(1);
    }
    let s = server.member().stats();
    println!(
        "stopped: {} proposals ({} forwarded) in {} turns, {} read indexes, {} stale reads, {} CLUSTERDOWN, {} sweeps, {} blocking-pop attempts",
        s.proposals, s.forwarded, s.proposal_turns, s.read_indexes, s.stale_reads, s.cluster_down, s.sweeps, s.block_attempts
    );
    Ok(())
}

/// Redis's warning when the descriptor limit lowers `maxclients`.
fn warn_maxclients(asked: u32, got: u32) {
    if got < asked {
        eprintln!(
            "pmwire kv: you requested maxclients of {asked} requiring at least {} max file descriptors; the process's limit allows {got} clients (raise `ulimit -n`)",
            u64::from(asked) + pmwire_kv_server::store::RESERVED_FDS
        );
    }
}

/// `--maxmemory`: a memory amount as redis-server reads one (`100mb`, `1gb`, bytes).
fn parse_maxmemory(value: &str) -> Result<u64, String> {
    pmwire_kv_server::parse_memory(value.as_bytes()).ok_or_else(|| format!("'{value}' is not a memory amount (bytes, or with a unit: 100mb, 1gb)"))
}
