//! `pmwire bench kv --only collections` (issue 15, item 7): does a durable
//! write into a collection cost the same whatever the collection's size?
//!
//! For each family (hash, set, sorted set, list) and each server (`pmwire
//! kv` zero-copy, and `redis-server` with `appendfsync always` on the same
//! tmpfs, as [`super::resp_suite`] runs it), the suite builds a *small*
//! collection of 10 members and a *big* one of 1 M (`--quick`: 100 K),
//! pipelined, then times single durable inserts of a new member, HSET /
//! SADD / ZADD / LPUSH, each followed by its inverse (HDEL / SREM / ZREM /
//! LPOP, not timed) so both collections keep their size.
//!
//! Method: one connection, one request in flight (closed loop), so every
//! insert waits for its own commit (our WAL persist; Redis's `fsync`);
//! small and big alternate pair by pair, so drift in the machine's load and
//! periodic work (our checkpoints, Redis's AOF rewrite) fall on both.
//! Reported per server, family and size: the insert's latency p50 and p99
//! (client side), and the server's CPU time per insert + inverse pair
//! (`clock_getcpuclockid`, ns), which a busy machine disturbs less than
//! latency. The headline per family is our big/small ratio of the p50
//! latency (what a client sees), target <= 2x, with Redis's ratio from the
//! same run beside it; the CPU ratios are informational headlines.

use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::child::{KvChild, KvMode};
use super::placement::{CpuClock, Placement};
use super::redis::{self, Persistence, RedisServer};
use crate::measure::{percentile, Progress};
use crate::remote::common::{finish, ratio};
use crate::schema::{BenchResult, Skipped};
use crate::{Headline, SuiteReport};
use pmwire_resp::client::{encode_request, reply_len};

/// The suite's name.
pub const SUITE: &str = "kv_collections";

/// How the suite runs.
#[derive(Clone, Debug)]
pub struct CollectionsOptions {
    /// The `pmwire` executable (started as `pmwire kv`).
    pub exe: PathBuf,
    /// Our pool file; Redis keeps its AOF in the same directory.
    pub pool: PathBuf,
    /// Our pool size (`--size`).
    pub pool_size: String,
    /// Members of the big collections.
    pub big: u64,
    /// Members of the small collections.
    pub small: u64,
    /// Timed inserts per round and size.
    pub samples: usize,
    /// Rounds (each times small and big once).
    pub rounds: usize,
    /// Members per command while building (pipelined).
    pub build_members: usize,
    /// Commands in flight while building.
    pub build_depth: usize,
    /// Where servers and client run.
    pub placement: Placement,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
}

impl CollectionsOptions {
    /// The full run: 1 M members.
    pub fn full(exe: PathBuf, out_dir: PathBuf) -> CollectionsOptions {
        CollectionsOptions {
            exe,
            pool: "/dev/shm/pmwire-bench-kv-collections.pool".into(),
            pool_size: "4G".into(),
            big: 1_000_000,
            small: 10,
            samples: 1000,
            rounds: 4,
            build_members: 100,
            build_depth: 32,
            placement: Placement::split(),
            out_dir,
        }
    }

    /// The tour's run: 100 K members.
    pub fn quick(exe: PathBuf, out_dir: PathBuf) -> CollectionsOptions {
        CollectionsOptions {
            pool_size: "1G".into(),
            big: 100_000,
            samples: 300,
            rounds: 2,
            ..CollectionsOptions::full(exe, out_dir)
        }
    }
}

/// A collection family and its commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Hash,
    Set,
    ZSet,
    List,
}

const FAMILIES: [Family; 4] = [Family::ZSet, Family::Hash, Family::Set, Family::List];

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::Hash => "hash",
            Family::Set => "set",
            Family::ZSet => "zset",
            Family::List => "list",
        }
    }

    /// The insert timed.
    fn insert_name(self) -> &'static str {
        match self {
            Family::Hash => "HSET",
            Family::Set => "SADD",
            Family::ZSet => "ZADD",
            Family::List => "LPUSH",
        }
    }

    /// A command adding `members` (numbered from `first`) to `key`.
    fn add(self, key: &[u8], first: u64, members: u64) -> Vec<Vec<u8>> {
        let mut args = vec![self.insert_name().as_bytes().to_vec(), key.to_vec()];
        for i in first..first + members {
            match self {
                Family::Hash => args.extend([member(i), value(i)]),
                Family::ZSet => args.extend([i.to_string().into_bytes(), member(i)]),
                Family::Set | Family::List => args.push(member(i)),
            }
        }
        args
    }

    /// The command undoing [`Family::add`] of one member `i`.
    fn remove(self, key: &[u8], i: u64) -> Vec<Vec<u8>> {
        let name: &[u8] = match self {
            Family::Hash => b"HDEL",
            Family::Set => b"SREM",
            Family::ZSet => b"ZREM",
            Family::List => b"LPOP",
        };
        match self {
            Family::List => vec![name.to_vec(), key.to_vec()],
            _ => vec![name.to_vec(), key.to_vec(), member(i)],
        }
    }

    /// The count command (checks the build).
    fn count(self, key: &[u8]) -> Vec<Vec<u8>> {
        let name: &[u8] = match self {
            Family::Hash => b"HLEN",
            Family::Set => b"SCARD",
            Family::ZSet => b"ZCARD",
            Family::List => b"LLEN",
        };
        vec![name.to_vec(), key.to_vec()]
    }
}

fn member(i: u64) -> Vec<u8> {
    format!("member:{i:010}").into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    format!("value:{i:016x}").into_bytes()
}

/// A blocking RESP connection (the scripts suite uses it too).
pub(super) struct Conn {
    stream: TcpStream,
    input: Vec<u8>,
    request: Vec<u8>,
}

impl Conn {
    pub(super) fn connect(addr: SocketAddr) -> Result<Conn> {
        let stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        Ok(Conn { stream, input: Vec::new(), request: Vec::new() })
    }

    /// Reads one reply; fails on an error reply.
    pub(super) fn reply(&mut self) -> Result<Vec<u8>> {
        let mut buf = [0u8; 64 << 10];
        loop {
            if let Some((len, is_error)) = reply_len(&self.input).context("reply is not RESP")? {
                let reply: Vec<u8> = self.input.drain(..len).collect();
                if is_error {
                    bail!("error reply: {}", String::from_utf8_lossy(&reply).trim_end());
                }
                return Ok(reply);
            }
            let n = self.stream.read(&mut buf)?;
            if n == 0 {
                bail!("the server closed the connection");
            }
            self.input.extend_from_slice(&buf[..n]);
        }
    }

    /// Sends `commands` together and reads their replies.
    pub(super) fn pipeline(&mut self, commands: &[Vec<Vec<u8>>]) -> Result<()> {
        self.request.clear();
        for c in commands {
            encode_request(c, &mut self.request);
        }
        self.stream.write_all(&self.request)?;
        for _ in commands {
            self.reply()?;
        }
        Ok(())
    }

    /// One command, one reply.
    pub(super) fn call(&mut self, command: &[Vec<u8>]) -> Result<Vec<u8>> {
        self.request.clear();
        encode_request(command, &mut self.request);
        self.stream.write_all(&self.request)?;
        self.reply()
    }
}

/// A server measured.
pub(super) enum Running {
    Ours(KvChild),
    Redis(RedisServer),
}

impl Running {
    /// Starts `variant`: `pmwire_zero_copy` (`pmwire kv` from `exe` on `pool` of `size`) or
    /// `redis_aof_always` (redis-server, AOF `always`, its files in `shm_dir`).
    pub(super) fn start(variant: &str, (exe, pool, size): (&Path, &Path, &str), shm_dir: &Path, placement: &Placement) -> Result<Running> {
        if variant == "pmwire_zero_copy" {
            KvChild::start(exe, pool, size, KvMode::ZeroCopy, placement).map(Running::Ours)
        } else {
            redis::server_version()
                .map_err(|e| anyhow::anyhow!(e))
                .and_then(|_| RedisServer::start(Persistence::AppendFsyncAlways, shm_dir, placement))
                .map(Running::Redis)
        }
    }

    pub(super) fn pid(&self) -> u32 {
        match self {
            Running::Ours(c) => c.pid(),
            Running::Redis(r) => r.pid(),
        }
    }

    pub(super) fn addr(&self) -> SocketAddr {
        match self {
            Running::Ours(c) => c.resp,
            Running::Redis(r) => SocketAddr::from(([127, 0, 0, 1], r.port())),
        }
    }
}

/// What one server, family and size measured.
#[derive(Clone, Copy, Debug)]
struct Cost {
    p50_us: f64,
    p99_us: f64,
    cpu_us_per_pair: f64,
}

/// Builds `family`'s collection `key` of `members`, pipelined.
fn build(conn: &mut Conn, family: Family, key: &[u8], members: u64, o: &CollectionsOptions) -> Result<()> {
    let per = o.build_members as u64;
    let mut next = 0;
    while next < members {
        let mut batch = Vec::with_capacity(o.build_depth);
        while batch.len() < o.build_depth && next < members {
            let n = per.min(members - next);
            batch.push(family.add(key, next, n));
            next += n;
        }
        conn.pipeline(&batch)?;
    }
    let count = conn.call(&family.count(key))?;
    let want = format!(":{members}\r\n");
    if count != want.as_bytes() {
        bail!(
            "{} {} holds {:?}, not {members}",
            family.name(),
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(&count)
        );
    }
    Ok(())
}

/// Times one insert of the new member `i` into `key` and undoes it; the insert's latency
/// (ns) and the server CPU (s) of the pair.
fn time_pair(conn: &mut Conn, server: CpuClock, family: Family, key: &[u8], i: u64) -> Result<(u64, f64)> {
    let add = family.add(key, i, 1);
    let cpu_before = server.seconds()?;
    let started = Instant::now();
    conn.call(&add)?;
    let latency_ns = started.elapsed().as_nanos() as u64;
    conn.call(&family.remove(key, i))?;
    Ok((latency_ns, server.seconds()? - cpu_before))
}

/// Measures one server: every family, small and big.
fn measure(running: &Running, o: &CollectionsOptions, progress: &Progress) -> Result<Vec<(Family, bool, Cost)>> {
    let mut conn = Conn::connect(running.addr())?;
    let clock = CpuClock::of(running.pid());
    let mut out = Vec::new();
    for family in FAMILIES {
        let small_key = format!("collections:{}:small", family.name()).into_bytes();
        let big_key = format!("collections:{}:big", family.name()).into_bytes();
        progress.stage(&format!("{}: building 10 and {} members", family.name(), o.big));
        build(&mut conn, family, &small_key, o.small, o)?;
        build(&mut conn, family, &big_key, o.big, o)?;
        progress.step();
        let (mut lat, mut cpu) = ([Vec::new(), Vec::new()], [0.0f64; 2]);
        for round in 0..o.rounds {
            progress.stage(&format!("{}: round {}/{}", family.name(), round + 1, o.rounds));
            for s in 0..o.samples {
                // Small and big alternate pair by pair (which goes first alternates too), so
                // drift in the machine's load, and the engine's periodic checkpoints, fall on both.
                // New members are numbered past the built ones and every earlier pair's.
                let i = 10 * o.big + (round * o.samples + s) as u64;
                for k in 0..2 {
                    let big = (k + s + round) % 2 == 1;
                    let key = if big { &big_key } else { &small_key };
                    let (latency_ns, used) = time_pair(&mut conn, clock, family, key, i)?;
                    lat[big as usize].push(latency_ns);
                    cpu[big as usize] += used;
                }
            }
            progress.step();
        }
        for big in [false, true] {
            let l = &mut lat[big as usize];
            l.sort_unstable();
            let pairs = (o.rounds * o.samples) as f64;
            let cost = Cost {
                p50_us: percentile(l, 50.0) as f64 / 1e3,
                p99_us: percentile(l, 99.0) as f64 / 1e3,
                cpu_us_per_pair: cpu[big as usize] / pairs * 1e6,
            };
            out.push((family, big, cost));
        }
    }
    Ok(out)
}

/// Runs the suite, writes its JSON and prints its table and headlines.
pub fn run(o: &CollectionsOptions) -> Result<SuiteReport> {
    assert!(o.rounds >= 1 && o.samples >= 1, "something to time");
    let shm_dir = o.pool.parent().unwrap_or(Path::new("/dev/shm")).to_path_buf();
    let steps = 2 * FAMILIES.len() * (1 + o.rounds);
    let progress = Progress::new(steps as u64, true);
    let (mut results, mut skipped) = (Vec::new(), Vec::new());
    let mut costs: Vec<(&str, Family, bool, Cost)> = Vec::new();
    for variant in ["pmwire_zero_copy", "redis_aof_always"] {
        progress.stage(&format!("starting {variant}"));
        let started = Running::start(variant, (&o.exe, &o.pool, &o.pool_size), &shm_dir, &o.placement);
        let measured = started.and_then(|server| measure(&server, o, &progress));
        match measured {
            Ok(rows) => costs.extend(rows.into_iter().map(|(f, big, c)| (variant, f, big, c))),
            Err(e) => {
                skipped.push(Skipped::new(SUITE, variant, &format!("{e:#}")));
                (0..FAMILIES.len() * (1 + o.rounds)).for_each(|_| progress.step());
            }
        }
    }
    let _ = std::fs::remove_file(&o.pool);
    progress.finish();
    for (variant, family, big, c) in &costs {
        let members = if *big { o.big } else { o.small };
        let mut r = BenchResult::new(SUITE, variant)
            .metric("latency_us_p50", c.p50_us)
            .metric("latency_us_p99", c.p99_us)
            .metric("server_cpu_us_per_pair", c.cpu_us_per_pair);
        r.params.insert("family".into(), family.name().into());
        r.params.insert("command".into(), family.insert_name().into());
        r.params.insert("members".into(), members.into());
        results.push(r);
    }
    print!("{}", ratio_table(&costs, o));
    let headlines = headlines(&costs, o);
    let parameters = serde_json::json!({
        "big_members": o.big, "small_members": o.small, "samples_per_round": o.samples, "rounds": o.rounds,
        "build_members_per_command": o.build_members, "build_depth": o.build_depth,
        "pool": o.pool, "placement": o.placement.describe(),
        "method": "one connection, one request in flight; each timed insert of a new member is followed by its \
                   inverse (untimed); small and big alternate pair by pair",
        "server_cpu_us_per_pair": "server CPU (user + system) per insert + inverse pair",
        "redis": redis::server_version().unwrap_or_else(|e| e),
        "redis_config": "--appendonly yes --appendfsync always, files on the pool's tmpfs, --save '' --io-threads 1",
    });
    finish(SUITE, &o.out_dir, parameters, results, skipped, headlines)
}

fn cost(costs: &[(&str, Family, bool, Cost)], variant: &str, family: Family, big: bool) -> Option<Cost> {
    costs.iter().find(|c| c.0 == variant && c.1 == family && c.2 == big).map(|c| c.3)
}

/// big/small of one metric.
fn ratio_of(costs: &[(&str, Family, bool, Cost)], variant: &str, family: Family, f: fn(&Cost) -> f64) -> Option<f64> {
    Some(f(&cost(costs, variant, family, true)?) / f(&cost(costs, variant, family, false)?))
}

fn ratio_table(costs: &[(&str, Family, bool, Cost)], o: &CollectionsOptions) -> String {
    let mut t = format!(
        "\n{:<6} {:<6} {:>12} {:>12} {:>8} {:>12} {:>12} {:>8}   (big = {} members, small = {})\n",
        "family",
        "server",
        "p50 small us",
        "p50 big us",
        "ratio",
        "cpu small us",
        "cpu big us",
        "ratio",
        o.big,
        o.small
    );
    for family in FAMILIES {
        for (variant, short) in [("pmwire_zero_copy", "pmwire"), ("redis_aof_always", "redis")] {
            let (Some(s), Some(b)) = (cost(costs, variant, family, false), cost(costs, variant, family, true)) else {
                continue;
            };
            t += &format!(
                "{:<6} {:<6} {:>12.1} {:>12.1} {:>7.2}x {:>12.1} {:>12.1} {:>7.2}x\n",
                family.name(),
                short,
                s.p50_us,
                b.p50_us,
                b.p50_us / s.p50_us,
                s.cpu_us_per_pair,
                b.cpu_us_per_pair,
                b.cpu_us_per_pair / s.cpu_us_per_pair
            );
        }
    }
    t
}

fn headlines(costs: &[(&str, Family, bool, Cost)], o: &CollectionsOptions) -> Vec<Headline> {
    let size = if o.big >= 1_000_000 { format!("{}M", o.big / 1_000_000) } else { format!("{}K", o.big / 1000) };
    let mut out = Vec::new();
    for family in FAMILIES {
        let redis_p50 = ratio_of(costs, "redis_aof_always", family, |c| c.p50_us);
        let redis_cpu = ratio_of(costs, "redis_aof_always", family, |c| c.cpu_us_per_pair);
        let shown = |r: Option<f64>| r.map_or("not run".to_string(), |r| format!("{r:.2}x"));
        let peer = format!(
            "redis-server {} (appendfsync always), same run: {} (CPU {})",
            redis::server_version().unwrap_or_default(),
            shown(redis_p50),
            shown(redis_cpu)
        );
        let name =
            format!("kv collections: durable {} into {size} / into 10 members, p50 latency", family.insert_name());
        out.push(ratio(&name, ratio_of(costs, "pmwire_zero_copy", family, |c| c.p50_us), 2.0, false, &peer));
        let name =
            format!("kv collections: {} + inverse into {size} / into 10 members, server CPU", family.insert_name());
        let mut h = ratio(&name, ratio_of(costs, "pmwire_zero_copy", family, |c| c.cpu_us_per_pair), 2.0, false, &peer);
        h.informational = true;
        out.push(h);
    }
    out
}
