//! `pmwire replica` (one replica of a replicated key-value cluster, as a
//! process) and `pmwire smr` (a person's client of such a cluster).
//!
//! A replica listens on its own address from `--peers`, keeps its Raft
//! log, hard state and snapshots in a persistent-memory pool (`--log
//! pmem`, the default) or in DRAM (`--log dram`: the volatile baseline,
//! which loses everything when the process ends), and serves until
//! killed. The pool is locked for the process's lifetime, so a second
//! replica on the same pool is refused; a pool of another cluster or
//! replica id is refused too. With `--join` a new pool is formatted with
//! no voters: the replica waits, never campaigning, until `pmwire smr add`
//! adds it (it then starts from the leader's snapshot).
//!
//! `pmwire smr add|remove|promote|transfer` change the membership through
//! the leader; a refusal is printed with its reason.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use pmem::{Region, RegionOptions};
use pmwire_bench::remote::server::ucx_config;
use pmwire_log::{LogConfig, TailStrategy};
use pmwire_smr::client::SmrClient;
use pmwire_smr::floor::Floor;
use pmwire_smr::command::StatusValue;
use pmwire_smr::node::{Replica, ReplicaConfig};
use pmwire_smr::pmem_store::{OpenError, PmemDurable};
use pmwire_smr::store::{Durable, MemDurable};
use reactor::{PollBudget, Reactor, RealClock, Service};
use link::LinkTransport;
use pmwire_smr::links::{client_link, replica_link};
use transport::{TcpConfig, TcpTransport, Transport, UcxTransport};

use crate::secret_args::{ClientSecret, ServerSecret};

/// Connections a replica accepts and makes (clients and peers).
const MAX_CONNS: usize = 1024;

/// `pmwire replica`.
#[derive(Args)]
pub struct ReplicaArgs {
    /// This replica's id (one of the ids in --peers).
    #[arg(long)]
    pub id: u64,
    /// Every replica of the cluster, this one included: ID=ADDR,ID=ADDR,...
    #[arg(long, value_parser = parse_peers)]
    pub peers: Peers,
    /// The pool file (a tmpfs path is emulated persistent memory); formatted if it holds no store.
    #[arg(long)]
    pub pool: PathBuf,
    /// Pool size (bytes; K, M, G suffixes) when it is created.
    #[arg(long, value_parser = crate::size::parse, default_value = "256M")]
    pub size: u64,
    /// The Raft log's capacity in the pool (the rest holds two snapshots).
    #[arg(long, value_parser = crate::size::parse, default_value = "64M")]
    pub log_size: u64,
    /// Cluster id written into a new pool and checked when one is opened.
    #[arg(long, default_value_t = 1)]
    pub cluster: u64,
    /// Transport: tcp (UCX), sm (UCX shared memory, with tcp for connection set-up), or uring (TCP sockets on
    /// io_uring, no UCX). Every member and client of a cluster uses the same.
    #[arg(long, default_value = "tcp", value_parser = ["tcp", "sm", "uring"])]
    pub tls: String,
    /// Where the Raft log lives: pmem (the pool) or dram (volatile: the baseline; a restart starts empty).
    #[arg(long, default_value = "pmem", value_parser = ["pmem", "dram"])]
    pub log: String,
    /// The log's tail: self-validating (default), naive or rotating.
    #[arg(long, default_value = "self-validating", value_parser = ["self-validating", "naive", "rotating"])]
    pub tail: String,
    /// The leader persists its own entries before sending them (default: it sends first, Raft thesis §10.2.1).
    #[arg(long)]
    pub persist_then_send: bool,
    /// Snapshot and compact the log every this many applied entries.
    #[arg(long, default_value_t = 10_000)]
    pub snapshot_every: u64,
    /// Microseconds the loop keeps polling after activity before it blocks (0 blocks at once: three replicas and
    /// their clients share the cores of one machine, where polling takes the CPU another process needs).
    #[arg(long, default_value_t = 0)]
    pub poll_us: u64,
    /// One Raft tick in milliseconds (elections after 10-20 ticks, heartbeats every 2).
    #[arg(long, default_value_t = 10)]
    pub tick_ms: u64,
    /// Write {"id":N,"addr":"..."} here once listening.
    #[arg(long)]
    pub ready_file: Option<PathBuf>,
    /// Run the benchmark's floor instead of a replica: the same process, transport, loop and four messages per write
    /// (the lowest id forwards each write to every peer and answers at a majority), with no Raft, log or state machine.
    #[arg(long, hide = true)]
    pub floor: bool,
    /// Join a running cluster: a new pool is formatted with no voters and the replica waits to be added with
    /// `pmwire smr add --id N --addr ADDR` (--peers then lists the running replicas and this one). Ignored for a pool
    /// that already holds a store.
    #[arg(long)]
    pub join: bool,
    /// The cluster's secret.
    #[command(flatten)]
    pub secret: ServerSecret,
}

/// `pmwire smr`.
#[derive(Args)]
pub struct SmrArgs {
    /// Every replica of the cluster: ID=ADDR,ID=ADDR,...
    #[arg(long, value_parser = parse_peers)]
    pub peers: Peers,
    /// Transport: tcp or sm (UCX), or uring (TCP sockets on io_uring), as the replicas use.
    #[arg(long, default_value = "tcp", value_parser = ["tcp", "sm", "uring"])]
    pub tls: String,
    /// The cluster's secret.
    #[command(flatten)]
    pub secret: ClientSecret,
    /// Seconds to wait for an answer (a membership change on a member holding a large keyspace waits for the
    /// snapshot it takes).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout_s: u64,
    /// What to do.
    #[command(subcommand)]
    pub command: SmrCommand,
}

/// What `pmwire smr` does.
#[derive(Subcommand)]
pub enum SmrCommand {
    /// Set KEY to VALUE.
    Put {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Print KEY's value (linearizable read).
    Get {
        /// The key.
        key: String,
    },
    /// Remove KEY.
    Del {
        /// The key.
        key: String,
    },
    /// Each replica's role, term, last and commit index, and lag, and the membership.
    Status,
    /// Add replica ID, listening at ADDR (started with `pmwire replica --join`): a learner first, made a voter once it
    /// has caught up with the log.
    Add {
        /// The new replica's id.
        #[arg(long)]
        id: u64,
        /// Its address (IP:PORT).
        #[arg(long)]
        addr: SocketAddr,
        /// Leave it a learner (it receives the log, does not vote); `promote` makes it a voter.
        #[arg(long)]
        learner: bool,
        /// Seconds to wait for it to catch up before giving up on the promotion (it stays a learner).
        #[arg(long, default_value_t = 60)]
        catch_up_s: u64,
    },
    /// Make learner ID a voter once it has caught up.
    Promote {
        /// The learner's id.
        #[arg(long)]
        id: u64,
    },
    /// Remove replica ID (voter or learner). The leader removing itself hands leadership over first. Stop the removed
    /// replica's process afterwards: nothing contacts it any more.
    Remove {
        /// The replica's id.
        #[arg(long)]
        id: u64,
    },
    /// Make voter ID the leader.
    Transfer {
        /// The voter to lead.
        #[arg(long)]
        to: u64,
    },
}

/// A parsed `--peers` list.
#[derive(Clone, Debug)]
pub struct Peers(pub BTreeMap<u64, SocketAddr>);

pub(crate) fn parse_peers(s: &str) -> Result<Peers, String> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part.split_once('=').ok_or_else(|| format!("'{part}': expected ID=ADDR (e.g. 1=127.0.0.1:7001)"))?;
        let id: u64 = id.trim().parse().map_err(|_| format!("'{id}': a replica id is a positive integer"))?;
        if id == 0 {
            return Err("replica ids start at 1".into());
        }
        let addr: SocketAddr = addr.trim().parse().map_err(|e| format!("'{addr}': {e}"))?;
        if out.insert(id, addr).is_some() {
            return Err(format!("replica {id} is listed twice"));
        }
    }
    if out.is_empty() {
        return Err("no replicas listed".into());
    }
    let mut addrs: Vec<_> = out.values().collect();
    addrs.sort();
    if addrs.windows(2).any(|w| w[0] == w[1]) {
        return Err("two replicas share an address".into());
    }
    Ok(Peers(out))
}

fn tail(name: &str) -> TailStrategy {
    match name {
        "naive" => TailStrategy::Naive,
        "rotating" => TailStrategy::ROTATING_PAPER,
        _ => TailStrategy::SelfValidating,
    }
}

/// Locks `path` for this process (released when the file closes).
fn lock(path: &std::path::Path) -> Result<File> {
    match pmem::lock::lock_file(path, true) {
        Err(pmem::lock::LockError::Held(_)) => bail!("{} is in use by another replica process (it holds the lock); one replica per pool", path.display()),
        other => Ok(other?),
    }
}

/// Runs `pmwire replica` until killed.
pub fn replica(args: &ReplicaArgs) -> Result<()> {
    let peers = &args.peers.0;
    let Some(&addr) = peers.get(&args.id) else {
        bail!("--id {} is not in --peers ({})", args.id, peers.keys().map(u64::to_string).collect::<Vec<_>>().join(", "));
    };
    let voters: Vec<u64> = if args.join { Vec::new() } else { peers.keys().copied().collect() };
    let others: BTreeMap<u64, SocketAddr> = peers.iter().filter(|(&id, _)| id != args.id).map(|(&id, &a)| (id, a)).collect();
    let mut config = ReplicaConfig::new(args.id);
    config.leader_sends_first = !args.persist_then_send;
    config.snapshot_every = args.snapshot_every;
    config.seed = std::process::id() as u64 ^ args.id.rotate_left(32);
    if args.tick_ms == 0 {
        bail!("--tick-ms must be at least 1");
    }
    config.tick = std::time::Duration::from_millis(args.tick_ms);
    let secret = args.secret.load()?;
    let lock = if args.log == "pmem" && !args.floor { Some(lock(&args.pool.with_extension("lock"))?) } else { None };
    if args.tls == "uring" {
        let mut transport = TcpTransport::new(&uring_config())?;
        let bound = transport.listen(addr).with_context(|| format!("listen on {addr}"))?;
        return run_replica(transport, bound, args, config, &voters, others, lock, secret);
    }
    let mut ucx = ucx_config(&args.tls, addr.ip().is_loopback(), false)?;
    // Clients connect to every replica they try, peers once each.
    ucx.limits.max_conns = MAX_CONNS;
    let mut transport = UcxTransport::new(&ucx)?;
    let bound = transport.listen(addr).with_context(|| format!("listen on {addr}"))?;
    run_replica(transport, bound, args, config, &voters, others, lock, secret)
}

/// The io_uring TCP transport's configuration for replicas and their clients.
pub fn uring_config() -> TcpConfig {
    let mut config = TcpConfig::default();
    config.limits.max_conns = MAX_CONNS;
    config
}

/// Serves replica (or floor node) `args.id` over `transport`, listening at `bound`.
fn run_replica<T>(transport: T, bound: SocketAddr, args: &ReplicaArgs, config: ReplicaConfig, voters: &[u64], others: BTreeMap<u64, SocketAddr>, lock: Option<File>, secret: link::Secret) -> Result<()>
where
    T: Transport<Addr = SocketAddr>,
{
    let mut link = replica_link(&config);
    link.log_events = true;
    let transport = LinkTransport::real(transport, secret, link);
    let stop = AtomicBool::new(false);
    if args.floor {
        println!("floor node {} of {} on {bound} over {} (no Raft, no log: a benchmark's floor, not a replica)", args.id, voters.len(), args.tls);
        return serve(transport, Floor::new(args.id, others), args, &bound, &stop);
    }
    if args.log == "dram" {
        let cluster = if args.join { "waiting to be added".to_string() } else { format!("{} voters", voters.len()) };
        println!("replica {} on {bound} over {}, {cluster}; log in DRAM (volatile baseline: a restart starts empty)", args.id, args.tls);
        let replica = Replica::new(config, MemDurable::new(voters), others).map_err(|e| anyhow!("{e}"))?;
        return serve(transport, replica, args, &bound, &stop);
    }
    let durable = open_store(args, voters)?;
    let _lock = lock;
    let members = durable.conf_state();
    let cluster = match (members.voters.len(), members.learners.contains(&args.id)) {
        (0, _) => format!("waiting to be added (pmwire smr --peers ... add --id {} --addr {bound})", args.id),
        (n, true) => format!("learner beside {n} voters"),
        (n, false) => format!("{n} voters"),
    };
    println!("replica {} on {bound} over {}, {cluster}; log in {} ({} tail), last index {}", args.id, args.tls, args.pool.display(), args.tail, durable.last_index());
    let replica = Replica::new(config, durable, others).map_err(|e| anyhow!("{e}"))?;
    serve(transport, replica, args, &bound, &stop)
}

fn open_store(args: &ReplicaArgs, voters: &[u64]) -> Result<PmemDurable<Region>> {
    let options = RegionOptions { size: Some(args.size), create: true, ..RegionOptions::default() };
    // Every page faulted in now (as a member's pools are): on tmpfs the
    // first snapshot into a slot otherwise allocates and zeroes its pages
    // inside the loop's turns.
    let mut region = Region::open(&args.pool, options.clone()).with_context(|| format!("open {}", args.pool.display()))?;
    region.populate();
    match PmemDurable::open(region, args.cluster, args.id) {
        Ok(store) => Ok(store),
        Err(OpenError::NotFormatted(_)) => {
            let region = Region::open(&args.pool, options)?;
            let log = LogConfig::new(args.log_size, tail(&args.tail));
            PmemDurable::format(region, args.cluster, args.id, voters, log).map_err(|e| anyhow!("format {}: {e}", args.pool.display()))
        }
        Err(e) => Err(anyhow!("{}: {e} (not overwriting it)", args.pool.display())),
    }
}

fn serve<T: Transport>(transport: T, service: impl Service<T>, args: &ReplicaArgs, bound: &SocketAddr, stop: &AtomicBool) -> Result<()> {
    if let Some(path) = &args.ready_file {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("{{\"id\":{},\"addr\":\"{bound}\"}}\n", args.id))?;
        std::fs::rename(&tmp, path)?;
    }
    let mut reactor = Reactor::new(transport, service);
    let budget = match args.poll_us {
        0 => PollBudget::BLOCK,
        us => PollBudget { spin: std::time::Duration::from_micros(us), ..PollBudget::default() },
    };
    reactor.run(&RealClock::new(), stop, budget);
    if let Some(reason) = reactor.service.halted() {
        // Exit with the reason before the transport is torn down: the
        // peers keep reconnecting to a halted replica, and UCX 1.13 can
        // crash destroying a listener while its async thread takes a
        // connection request (seen in a clean-clone CI run). Nothing is
        // lost: the store is durable at every write, and the pool's lock
        // goes with the process.
        eprintln!("Error: {reason}");
        std::process::exit(1);
    }
    Ok(())
}

/// Runs `pmwire smr`.
pub fn smr(args: &SmrArgs) -> Result<()> {
    let peers = &args.peers.0;
    let session = (std::process::id() as u64) << 32 | u64::from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.subsec_nanos()) | 1;
    if args.tls == "uring" {
        let transport = TcpTransport::new(&TcpConfig::default())?;
        return smr_with(transport, peers, session, args);
    }
    let loopback = peers.values().all(|a| a.ip().is_loopback());
    let transport = UcxTransport::new(&ucx_config(&args.tls, loopback, false)?)?;
    smr_with(transport, peers, session, args)
}

fn smr_with<T: Transport<Addr = SocketAddr>>(transport: T, peers: &BTreeMap<u64, SocketAddr>, session: u64, args: &SmrArgs) -> Result<()> {
    let mut link = client_link();
    link.log_events = true;
    let transport = LinkTransport::real(transport, args.secret.load()?, link);
    let mut client = SmrClient::new(transport, peers.clone(), session);
    client.timeout = std::time::Duration::from_secs(args.timeout_s);
    let done = run_command(&mut client, &args.command);
    match (&done, &client.transport().stats().last_refusal) {
        (Err(e), Some(why)) => Err(anyhow!("{e}; the replicas' links were refused: {why}")),
        _ => done,
    }
}

fn run_command<T: Transport<Addr = SocketAddr>>(client: &mut SmrClient<LinkTransport<T>>, command: &SmrCommand) -> Result<()> {
    match command {
        SmrCommand::Put { key, value } => {
            let index = client.put(key.as_bytes(), value.as_bytes())?;
            println!("OK (index {index}, leader {})", client.leader());
        }
        SmrCommand::Get { key } => match client.get(key.as_bytes())? {
            Some(v) => println!("{}", String::from_utf8_lossy(&v)),
            None => println!("(not found)"),
        },
        SmrCommand::Del { key } => {
            let index = client.del(key.as_bytes())?;
            println!("OK (index {index})");
        }
        SmrCommand::Status => status(client)?,
        SmrCommand::Add { id, addr, learner, catch_up_s } => {
            let index = client.add_learner(*id, addr).map_err(|e| anyhow!("add replica {id}: {e}"))?;
            println!("replica {id} at {addr} is a learner (index {index})");
            if !learner {
                client.catch_up_timeout = std::time::Duration::from_secs(*catch_up_s);
                let index = client.promote(*id).map_err(|e| anyhow!("promote replica {id} (it stays a learner): {e}"))?;
                println!("replica {id} caught up and is a voter (index {index})");
            }
        }
        SmrCommand::Promote { id } => {
            let index = client.promote(*id).map_err(|e| anyhow!("promote replica {id}: {e}"))?;
            println!("replica {id} is a voter (index {index})");
        }
        SmrCommand::Remove { id } => {
            let index = client.remove_member(*id).map_err(|e| anyhow!("remove replica {id}: {e}"))?;
            println!("replica {id} removed (index {index}); leader {}", client.leader());
        }
        SmrCommand::Transfer { to } => {
            client.transfer_leader(*to).map_err(|e| anyhow!("transfer leadership to {to}: {e}"))?;
            println!("replica {to} leads");
        }
    }
    Ok(())
}

/// Asks every replica listed, and every member a replica names that is
/// not listed (at the address it names), for its status; prints them and
/// the membership of the replica with the highest applied index.
fn status<T: Transport<Addr = SocketAddr>>(client: &mut SmrClient<T>) -> Result<()> {
    client.timeout = std::time::Duration::from_secs(2);
    let mut rows: BTreeMap<u64, Result<StatusValue, String>> = BTreeMap::new();
    let mut asked = 0;
    while let Some(id) = client.replicas().keys().copied().find(|id| !rows.contains_key(id)) {
        asked += 1;
        if asked > 64 {
            break;
        }
        let row = client.status(id).map_err(|e| e.to_string());
        if let Ok(st) = &row {
            for m in &st.members {
                if let Some(addr) = std::str::from_utf8(&m.addr).ok().and_then(|a| a.parse::<SocketAddr>().ok()) {
                    if !client.replicas().contains_key(&m.id) {
                        client.add_replica(m.id, addr);
                    }
                }
            }
        }
        rows.insert(id, row);
    }
    let newest = rows.values().filter_map(|r| r.as_ref().ok()).max_by_key(|s| (s.role == 2, s.applied)).cloned();
    let leader_last = rows.values().filter_map(|r| r.as_ref().ok()).filter(|s| s.role == 2).map(|s| s.last_index).max();
    let kind = |id: u64| match &newest {
        Some(s) => s.members.iter().find(|m| m.id == id).map_or("-", |m| if m.learner { "learner" } else { "voter" }),
        None => "?",
    };
    println!("{:>4} {:<22} {:<8} {:<14} {:>6} {:>7} {:>10} {:>10} {:>10} {:>6}", "id", "address", "member", "role", "term", "leader", "last", "commit", "applied", "lag");
    for (&id, row) in &rows {
        let addr = client.replicas()[&id];
        match row {
            Ok(s) => {
                let lag = leader_last.map_or("-".to_string(), |l| l.saturating_sub(s.applied).to_string());
                println!("{:>4} {:<22} {:<8} {:<14} {:>6} {:>7} {:>10} {:>10} {:>10} {:>6}", id, addr, kind(id), s.role_name(), s.term, s.leader, s.last_index, s.commit, s.applied, lag);
            }
            Err(e) => println!("{:>4} {:<22} {:<8} unreachable: {e}", id, addr, kind(id)),
        }
    }
    if let Some(s) = newest {
        let list = |ids: Vec<u64>| if ids.is_empty() { "-".to_string() } else { ids.iter().map(u64::to_string).collect::<Vec<_>>().join(", ") };
        println!("membership (as replica {} has applied it, index {}): voters {}; learners {}", s.id, s.applied, list(s.voters()), list(s.learners()));
    }
    Ok(())
}

/// `pmwire bench smr`.
#[derive(Args)]
pub struct SmrBenchArgs {
    /// A short run (2,000 PUTs per latency cell, 1 s per throughput point).
    #[arg(long)]
    pub quick: bool,
    /// Where to write the JSON results.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Leave out etcd and Redis.
    #[arg(long)]
    pub no_peers: bool,
    /// Transports for the replicas: tcp (UCX, default), sm (UCX), both (tcp and sm), uring (TCP sockets on io_uring),
    /// tcp+uring (UCX tcp beside io_uring tcp, with the floor over each), or all. Over sm, UCX 1.13 has no peer failure
    /// handling, and a connection closed while its peer still sends can abort a process (docs/bench.md, "Replication").
    #[arg(long, default_value = "tcp", value_parser = ["tcp", "sm", "both", "uring", "tcp+uring", "all"])]
    pub tls: String,
    /// Run the suite N times and report each headline's worst value across
    /// the runs (each run's value beside it, in the table and the JSON).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub repeat: u64,
}

/// Runs `pmwire bench smr` (`--repeat` times).
pub fn bench(args: &SmrBenchArgs) -> Result<pmwire_bench::SuiteReport> {
    let exe = std::env::current_exe().context("the pmwire binary")?;
    let transports = match args.tls.as_str() {
        "both" => vec!["tcp", "sm"],
        "sm" => vec!["sm"],
        "uring" => vec!["uring"],
        "tcp+uring" => vec!["tcp", "uring"],
        "all" => vec!["tcp", "sm", "uring"],
        _ => vec!["tcp"],
    };
    let options = pmwire_bench::smr::suite::SmrOptions { quick: args.quick, out_dir: args.out.clone(), exe, peers: !args.no_peers, transports };
    pmwire_bench::repeat::run("smr", args.repeat as usize, &args.out, |_| pmwire_bench::smr::suite::run(&options))
}

/// `pmwire bench smr-crash`.
#[derive(Args)]
pub struct SmrCrashArgs {
    /// Kill -9 runs (each a fresh 3-replica cluster).
    #[arg(long, default_value_t = 100)]
    pub runs: usize,
    /// Short runs (3 clients, 4 keys, about 1 s of load each).
    #[arg(long)]
    pub quick: bool,
    /// Where to write the JSON results (and a failing run's history and replica logs).
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Each replica in its own network namespace (veth pairs to a bridge), with netem delay and loss and link-down
    /// partitions. Needs root, `ip` and `tc`.
    #[arg(long)]
    pub netns: bool,
    /// Seed of the campaign (default: from the clock; printed).
    #[arg(long, value_parser = parse_seed)]
    pub seed: Option<u64>,
    /// The canary (a test): logs in DRAM and every replica killed after the load, so the campaign must fail.
    #[arg(long, hide = true)]
    pub planted_bug: bool,
    /// Run only run I of the campaign in this process and print its record as JSON (a loopback campaign runs each
    /// run so, in a child of its own).
    #[arg(long, hide = true)]
    pub one_run: Option<usize>,
    /// Run the replicas from this `pmwire` binary, a build that predates authenticated links (no --secret-file; the
    /// campaign's clients then do no handshake): the "before" of a before-and-after comparison. --netns only.
    #[arg(long, hide = true)]
    pub replica_exe: Option<PathBuf>,
}

fn parse_seed(s: &str) -> Result<u64, String> {
    let parsed = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|e| format!("'{s}': {e} (a decimal or 0x-prefixed hex u64)"))
}

/// Runs `pmwire bench smr-crash`; false if a run lost an acknowledged write, was not linearizable, or a replica or
/// the cluster failed.
pub fn crash(args: &SmrCrashArgs) -> Result<bool> {
    use pmwire_bench::smr::{crash, netns};
    if args.netns {
        if let Some(why) = netns::unavailable() {
            bail!("smr-crash --netns could not run: {why}");
        }
    }
    let seed = args.seed.unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        nanos ^ u64::from(std::process::id()).rotate_left(40)
    });
    let mut exe = std::env::current_exe().context("the pmwire binary")?;
    if let Some(old) = &args.replica_exe {
        if !args.netns {
            bail!("--replica-exe needs --netns (a loopback campaign runs each run in a child of this binary)");
        }
        exe = old.clone();
        pmwire_bench::smr::links::use_legacy_links();
        println!("smr-crash: replicas from {} with unauthenticated links (a build that predates them)", old.display());
    }
    let options = crash::SmrCrashOptions { runs: args.runs, quick: args.quick, out_dir: args.out.clone(), exe, netns: args.netns, seed, planted_volatile_log: args.planted_bug, child_per_run: true };
    if let Some(run) = args.one_run {
        let record = crash::one_run_alone(&options, run);
        println!("{}", crash::record_json(&record));
        return Ok(true);
    }
    let network = if args.netns { "3 network namespaces" } else { "loopback" };
    println!("smr-crash: {} kill -9 runs on {network}, seed {seed:#x}", args.runs);
    let outcome = crash::run(&options)?;
    println!("results: {}", outcome.report.json_path.display());
    let failed = outcome.failed();
    for r in &failed {
        println!("FAILED: run {} (seed {:#x}): see the messages above and {}", r.run, r.seed, args.out.display());
    }
    println!("{}", if failed.is_empty() { "PASS: no acknowledged write lost, every history linearizable" } else { "FAIL" });
    Ok(failed.is_empty())
}
