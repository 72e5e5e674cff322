//! `pmwire bench kv-replicated-crash --runs N [--seed S] [--netns]` (issue
//! 26): in each run a fresh 3-member group takes RESP load from 3 clients
//! spread over the members (so through followers and the leader): SET and
//! GET on 4 shared keys (one SET in 12 with a 160 KiB value, which members
//! stream as pieces; the history keeps its token), INCR on a counter per client, and MULTI/EXEC
//! bursts that set two keys to the same value. A third of the way in, one
//! member (the leader in even runs, a follower in odd ones) gets SIGKILL
//! and is restarted on its pool. After the load the survivors' reads close
//! the history, and the run is checked ([`check`]):
//!
//! - every history linearizable per key (`lincheck::redis`, each key's
//!   search within [`CHECK_BUDGET`]; a final GET that misses an
//!   acknowledged SET fails it, so it finds lost writes). A key whose search
//!   runs out of budget is counted undecided, never as linearizable;
//! - acknowledged SETs lost: per key, the final value is none of the values
//!   of the last acknowledged SET and the writes not over before it began;
//! - each counter's final value is at least its acknowledged INCRs and
//!   at most those plus the INCRs whose outcome the client never learned;
//! - each MULTI/EXEC pair holds the same value (no EXEC half-applied).
//!
//! Clients send to any member: a follower that forwards writes answers
//! them; one that refuses (`-READONLY`, or no leader known) has not
//! proposed the command, which stays out of the history, and the client
//! moves to the next member. An operation answered with another error or
//! cut off is "unknown" (it may or may not have happened): `ret: None` in
//! the history. Every campaign ends with a canary: a lost write planted
//! into a real run's history, which [`check`] must catch, or the campaign
//! fails.
//!
//! With `--netns` the members run in three network namespaces on a bridge
//! (`crate::smr::netns`), and each run also draws, from its seed, delay
//! and loss on every member's link (half the runs; a `tbf` rate limit and
//! an nftables random drop where the kernel has no netem) and a partition
//! after the restart (four runs in five): the leader or one member, or
//! two of them (no majority), cut off by taking the link down or silently
//! by dropping every packet, for 200-700 ms; at the heal a probe sends
//! SETs to every member in turn until one is acknowledged: the heal to
//! the next committed write.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use lincheck::redis::{judge, Input, Output, RedisOp};
use lincheck::Budget;
use pmwire_resp::client::Value;

use super::members::{Members, Placement, Resp, MEMBERS};
use crate::smr::netns::Namespaces;
use crate::remote::common::ratio;
use crate::schema::BenchResult;
use crate::{Headline, SuiteReport};

/// The suite's name.
pub const SUITE: &str = "kv_replicated_crash";
/// Shared SET/GET keys.
const KEYS: u64 = 4;
/// Clients.
const CLIENTS: usize = 3;
/// Each key's linearizability search: past it the key is undecided.
pub const CHECK_BUDGET: Budget = Budget { max_steps: 50_000_000, max_cache: 4 << 20 };
/// Bounds a client's connect, read and write in a `--netns` run (a member
/// cut off answers nothing).
const NETNS_IO_TIMEOUT: Duration = Duration::from_millis(1500);
/// The members' RESP port in a namespace (each has its own address).
const NETNS_RESP_PORT: u16 = 6380;

/// How the campaign runs.
#[derive(Clone, Debug)]
pub struct CrashOptions {
    /// Runs (each a fresh group).
    pub runs: usize,
    /// Load per run.
    pub load: Duration,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
    /// The `pmwire` binary.
    pub exe: PathBuf,
    /// The campaign's seed.
    pub seed: u64,
    /// `--peer-transport` of the members.
    pub transport: String,
    /// Members in network namespaces, with network faults.
    pub netns: bool,
}

/// What one run's clients saw, and what the final reads found.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// SET/GET/INCR operations, by key (final GETs included).
    pub ops: Vec<RedisOp>,
    /// Per counter key: INCRs acknowledged, INCRs unknown, the final value read.
    pub counters: Vec<(Vec<u8>, u64, u64, Option<i64>)>,
    /// Per MULTI/EXEC pair: the two final values read.
    pub pairs: Vec<(Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>)>,
}

/// What [`check`] found.
#[derive(Clone, Debug, Default)]
pub struct Findings {
    /// Every problem, as text (empty: the run passed).
    pub problems: Vec<String>,
    /// Keys whose linearizability search ran out of [`CHECK_BUDGET`].
    pub undecided: Vec<String>,
    /// Acknowledged SETs lost (keys whose final value no write can explain)
    /// plus acknowledged INCRs missing from the counters.
    pub lost: u64,
}

/// Checks `h` (the module docs' list).
pub fn check(h: &History) -> Findings {
    let mut f = Findings::default();
    let j = judge(&h.ops, CHECK_BUDGET);
    if let Some(key) = j.violation {
        f.problems.push(format!("history of key {} is not linearizable (a lost or phantom write)", String::from_utf8_lossy(&key)));
    }
    f.undecided = j.undecided.iter().map(|k| String::from_utf8_lossy(k).into_owned()).collect();
    for key in lost_sets(&h.ops) {
        f.lost += 1;
        f.problems.push(format!("key {}: an acknowledged SET lost (the final value is none that a write could leave)", String::from_utf8_lossy(&key)));
    }
    for (key, acked, unknown, last) in &h.counters {
        let k = String::from_utf8_lossy(key);
        match last {
            None => f.problems.push(format!("counter {k}: final value unread")),
            Some(v) if *v < 0 || (*v as u64) < *acked => {
                f.lost += acked - (*v).max(0) as u64;
                f.problems.push(format!("counter {k} = {v}, but {acked} INCRs were acknowledged: a lost INCR"));
            }
            Some(v) if *v as u64 > acked + unknown => f.problems.push(format!("counter {k} = {v} > {acked} acknowledged + {unknown} unknown INCRs: an INCR applied twice")),
            Some(_) => {}
        }
    }
    for (key, a, b) in &h.pairs {
        if a != b {
            f.problems.push(format!("MULTI/EXEC pair {}: {a:?} != {b:?}, an EXEC half-applied", String::from_utf8_lossy(key)));
        }
    }
    f
}

/// Keys whose final read (the last GET) shows a SET lost: with `w` the
/// acknowledged SET that began last before the final read, the value read
/// is neither `w`'s nor that of any write not over before `w` began (a
/// SET's value, or no value if a DEL may have come after). Keys where an
/// INCR or APPEND may have come after `w` are left to the linearizability
/// check.
fn lost_sets(ops: &[RedisOp]) -> Vec<Vec<u8>> {
    let mut keys: Vec<&[u8]> = ops.iter().map(|o| o.key.as_slice()).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut lost = Vec::new();
    for key in keys {
        let on_key = || ops.iter().filter(move |o| o.key == key);
        let Some(last_read) = on_key().filter(|o| o.input == Input::Get && o.ret.is_some()).max_by_key(|o| o.call) else { continue };
        let Some((read_ret, Output::Bulk(read))) = &last_read.ret else { continue };
        let acked_before = |o: &&RedisOp| matches!(o.input, Input::Set(_)) && o.ret.as_ref().is_some_and(|r| r.0 < last_read.call);
        let Some(w) = on_key().filter(acked_before).max_by_key(|o| o.call) else { continue };
        let not_over = |o: &&RedisOp| o.input != Input::Get && o.ret.as_ref().is_none_or(|r| r.0 >= w.call) && o.call <= *read_ret;
        let mut possible: Vec<Option<Vec<u8>>> = Vec::new();
        let mut opaque = false;
        for o in on_key().filter(not_over).chain(std::iter::once(w)) {
            match &o.input {
                Input::Set(v) => possible.push(Some(v.clone())),
                Input::Del => possible.push(None),
                _ => opaque = true,
            }
        }
        if !opaque && !possible.contains(read) {
            lost.push(key.to_vec());
        }
    }
    lost
}

/// `h` with a lost write planted: a final GET, after everything, that
/// reads nothing from a key an acknowledged SET wrote. `None` if no SET
/// was acknowledged.
pub fn plant_lost_write(h: &History) -> Option<History> {
    let set = h.ops.iter().find(|o| matches!(o.input, Input::Set(_)) && o.ret.is_some())?;
    let end = h.ops.iter().filter_map(|o| o.ret.as_ref().map(|r| r.0)).max().unwrap_or(0) + 1;
    let mut planted = h.clone();
    planted.ops.push(RedisOp { key: set.key.clone(), call: end, ret: Some((end + 1, Output::Bulk(None))), input: Input::Get });
    Some(planted)
}

fn output(v: &Value) -> Option<Output> {
    match v {
        Value::Simple(s) if s == b"OK" => Some(Output::Ok),
        Value::Bulk(b) => Some(Output::Bulk(Some(compact(b)))),
        Value::NilBulk | Value::Null => Some(Output::Bulk(None)),
        Value::Integer(n) => Some(Output::Int(*n)),
        _ => None,
    }
}

/// A small deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// One client's share of a run.
#[derive(Default)]
struct ClientLog {
    ops: Vec<RedisOp>,
    incr_acked: u64,
    incr_unknown: u64,
    /// (call ns, ret ns) of acknowledged writes.
    writes: Vec<(u64, u64)>,
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i}").into_bytes()
}

/// One SET in [`LARGE_EVERY`] carries a value of [`LARGE_BYTES`]: over
/// the 128 KiB a member streams as pieces (`kv_server::member::stream`),
/// so streams meet kill -9 and partitions too.
const LARGE_EVERY: u64 = 12;
const LARGE_BYTES: usize = 160 << 10;

/// The large value of `token`: the token and `|`, repeated to
/// [`LARGE_BYTES`]. The history keeps the token alone ([`compact`]).
fn expand(token: &[u8]) -> Vec<u8> {
    let unit = [token, b"|"].concat();
    unit.iter().copied().cycle().take(LARGE_BYTES).collect()
}

/// A value read back as the history records it: a large value as its
/// token if it is exactly [`expand`] of one, else as a marker no write
/// left (so a torn or mixed value fails the checks); others as read.
fn compact(v: &[u8]) -> Vec<u8> {
    if v.len() != LARGE_BYTES {
        return v.to_vec();
    }
    match v.iter().position(|&b| b == b'|') {
        Some(end) if expand(&v[..end]) == v => v[..end].to_vec(),
        _ => b"<a large value no SET wrote>".to_vec(),
    }
}

/// How a client reaches the members.
#[derive(Clone, Copy)]
struct Reach<'a> {
    addrs: &'a [SocketAddr],
    /// Connect, read and write bound (`None`: loopback's defaults).
    timeout: Option<Duration>,
}

impl Reach<'_> {
    fn connect(&self, member: usize) -> Result<Resp> {
        match self.timeout {
            Some(t) => Resp::connect_within(self.addrs[member], t),
            None => Resp::connect(self.addrs[member]),
        }
    }
}

/// Client `c`: random operations until `stop`, through member
/// `(c + attempt) % 3`, reconnecting to the next member after any error.
fn client(c: usize, reach: Reach<'_>, seed: u64, epoch: Instant, stop: &AtomicBool) -> ClientLog {
    let mut rng = Rng(seed ^ (c as u64).wrapping_mul(0x1000_0001));
    let mut log = ClientLog::default();
    let (mut member, mut conn): (usize, Option<Resp>) = (c % MEMBERS, None);
    let now = || epoch.elapsed().as_nanos() as u64;
    let (counter, pair_a, pair_b) = (format!("ctr{c}").into_bytes(), format!("m{c}a").into_bytes(), format!("m{c}b").into_bytes());
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if conn.is_none() {
            conn = reach.connect(member).ok();
            if conn.is_none() {
                member = (member + 1) % MEMBERS;
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        }
        let c_ = conn.as_mut().expect("connected");
        seq += 1;
        let roll = rng.next() % 10;
        let call = now();
        let (k, input, result) = match roll {
            0..=3 => {
                let k = key(rng.next() % KEYS);
                if seq % LARGE_EVERY == 0 {
                    let token = format!("{c}:{seq}:large").into_bytes();
                    let r = c_.reply(&[b"SET", &k, &expand(&token)]);
                    (k, Input::Set(token), r)
                } else {
                    let v = format!("{c}:{seq}").into_bytes();
                    let r = c_.reply(&[b"SET", &k, &v]);
                    (k, Input::Set(v), r)
                }
            }
            4..=6 => {
                let k = key(rng.next() % KEYS);
                let r = c_.reply(&[b"GET", &k]);
                (k, Input::Get, r)
            }
            7 | 8 => (counter.clone(), Input::Incr, c_.reply(&[b"INCR", &counter])),
            _ => {
                if !exec_burst(c_, &pair_a, &pair_b, &seq.to_string()) {
                    conn = None;
                    member = (member + 1) % MEMBERS;
                    std::thread::sleep(Duration::from_millis(5));
                }
                continue;
            }
        };
        let refused = matches!(&result, Ok(Value::Error(e)) if not_executed(e));
        let ret = result.ok().and_then(|v| output(&v)).map(|o| (now(), o));
        if input == Input::Incr && !refused {
            match &ret {
                Some((_, Output::Int(_))) => log.incr_acked += 1,
                _ => log.incr_unknown += 1,
            }
        }
        if let Some((at, o)) = &ret {
            if matches!(o, Output::Ok | Output::Int(_)) {
                log.writes.push((call, *at));
            }
        } else {
            conn = None;
            member = (member + 1) % MEMBERS;
            if refused || input == Input::Get {
                // Certainly not applied, or a read that changes nothing: in the
                // history it would only be one more operation pending forever,
                // which every later one must be checked against.
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
        }
        log.ops.push(RedisOp { key: k, call, ret, input });
    }
    log
}

/// MULTI, SET a v, SET b v, EXEC; false on any error (the connection is
/// then dropped: a transaction half-queued is discarded with it).
fn exec_burst(c: &mut Resp, a: &[u8], b: &[u8], v: &str) -> bool {
    let v = v.as_bytes();
    let ok = |r: Result<Value>| matches!(r, Ok(ref v) if !matches!(v, Value::Error(_)));
    ok(c.reply(&[b"MULTI"])) && ok(c.reply(&[b"SET", a, v])) && ok(c.reply(&[b"SET", b, v])) && ok(c.reply(&[b"EXEC"]))
}

/// An error reply that says the command was never proposed or applied
/// nothing: a follower's refusal (`-READONLY`, it forwards nothing), a
/// member that knows no leader, a streamed value missing a piece. Other errors (leadership lost, no majority in time, a cut
/// connection) leave the outcome unknown.
fn not_executed(error: &[u8]) -> bool {
    error.starts_with(b"READONLY ")
        || error.starts_with(b"CLUSTERDOWN The cluster is down: no leader is elected")
        // A streamed value whose stream a change of leader cut: refused whole on every member.
        || (error.starts_with(b"ERR pmwire: piece ") && error.ends_with(b"nothing was applied"))
}

/// What one run found.
#[derive(Clone, Debug)]
pub struct RunRecord {
    /// The run's index.
    pub run: usize,
    /// Whether the leader (else a follower) was killed.
    pub killed_leader: bool,
    /// Operations in the history.
    pub ops: usize,
    /// Acknowledged writes (SET, INCR) in the history.
    pub acked_writes: usize,
    /// Of them, SETs of a large (streamed) value.
    pub acked_large: usize,
    /// Operations of unknown outcome in the history.
    pub unknown: usize,
    /// Kill of the leader to the first acknowledged write called after it.
    pub failover_ms: Option<f64>,
    /// Partition runs: the heal to the first write acknowledged by a probe
    /// started at the heal.
    pub heal_ms: Option<f64>,
    /// Partition runs: two members were cut off (no majority until the heal).
    pub quorum_lost: bool,
    /// The network faults drawn (`--netns`).
    pub faults: String,
    /// What [`check`] found; `problems` also holds why the run could not run.
    pub findings: Findings,
    /// The history (for the canary).
    pub history: History,
}

/// One run: fresh members, load, a kill -9 and a restart, network faults
/// in namespaces, final reads, checks.
pub fn one_run(options: &CrashOptions, net: Option<&Net>, run: usize) -> RunRecord {
    let seed = options.seed.wrapping_add(run as u64);
    let killed_leader = run % 2 == 0;
    let mut record = RunRecord {
        run,
        killed_leader,
        ops: 0,
        acked_writes: 0,
        acked_large: 0,
        unknown: 0,
        failover_ms: None,
        heal_ms: None,
        quorum_lost: false,
        faults: String::new(),
        findings: Findings::default(),
        history: History::default(),
    };
    if let Err(e) = drive(options, net, seed, &mut record) {
        record.findings.problems.push(format!("run could not complete: {e:#}"));
    }
    if let Some(net) = net {
        net.heal_all();
    }
    record
}

/// The namespaces of a `--netns` campaign.
pub struct Net {
    namespaces: Namespaces,
}

impl Net {
    /// Creates the namespaces (removing stale ones first).
    pub fn create() -> Result<Net> {
        Ok(Net { namespaces: Namespaces::create()? })
    }

    /// Where run `run`'s members listen: each member's own address, on
    /// ports that move on from run to run (the last run's connections may
    /// hold its ports in TIME_WAIT for a minute).
    fn placement(&self, run: usize) -> Placement {
        let shift = 2 * (run % 64) as u16;
        let peers: Vec<SocketAddr> = self.namespaces.peers().into_values().map(|p| SocketAddr::new(p.ip(), p.port() + shift)).collect();
        let resp = peers.iter().map(|p| SocketAddr::new(p.ip(), NETNS_RESP_PORT + shift)).collect();
        let prefix = (1..=MEMBERS as u64).map(|id| self.namespaces.prefix(id)).collect();
        Placement { peers, resp, prefix }
    }

    fn heal_all(&self) {
        for id in 1..=MEMBERS as u64 {
            if let Err(e) = self.namespaces.heal(id) {
                eprintln!("kv-replicated-crash: healing member {id}: {e:#}");
            }
        }
    }

    fn cut(&self, ids: &[usize], silent: bool) -> Result<()> {
        for &id in ids {
            if silent {
                self.namespaces.set_silent_cut(id as u64, true)?;
            } else {
                self.namespaces.set_link(id as u64, false)?;
            }
        }
        Ok(())
    }
}

/// The network faults of a `--netns` run, drawn from its seed.
#[derive(Clone, Copy, Debug)]
struct NetFaults {
    /// Delay (ms), loss (%), and the rate limit (Mbit/s) standing for the
    /// delay without netem, on every member's link.
    impair: Option<(u32, f64, u32)>,
    partition: Option<Partition>,
}

#[derive(Clone, Copy, Debug)]
struct Partition {
    /// Cut the leader (else member `(seed % 3) + 1`).
    leader: bool,
    /// Cut the next member too: no majority anywhere.
    majority: bool,
    /// Drop every packet (connections stay up) rather than down the link.
    silent: bool,
    for_ms: u64,
}

impl NetFaults {
    fn draw(seed: u64, nft: bool) -> NetFaults {
        let mut rng = Rng(seed ^ 0x6e65_746e_73);
        let mut pick = |n: u64| rng.next() % n;
        let impair = (pick(2) == 0).then(|| ([1, 2, 5, 10][pick(4) as usize], [0.0, 0.5, 1.0, 2.0][pick(4) as usize], [2, 5, 20][pick(3) as usize]));
        let partition = (pick(5) != 0).then(|| Partition { leader: pick(2) == 0, majority: pick(10) < 3, silent: nft && pick(2) == 0, for_ms: 200 + pick(500) });
        NetFaults { impair, partition }
    }

    fn text(&self, impaired: &str) -> String {
        let part = match self.partition {
            None => "no partition".to_string(),
            Some(p) => format!(
                "{}{} cut off {} for {} ms, from 55% of the load",
                if p.leader { "the leader" } else { "a member" },
                if p.majority { " and the next member (no majority)" } else { "" },
                if p.silent { "silently (nftables drops every packet)" } else { "(link down)" },
                p.for_ms
            ),
        };
        format!("{}; {part}", if impaired.is_empty() { "no delay or loss" } else { impaired })
    }
}

/// Starts the group; a start that fails (on loopback, a probed port taken
/// by another process before a member bound it) is tried again, at most
/// three times, on fresh ports.
fn start_members(options: &CrashOptions, net: Option<&Net>, run: usize) -> Result<Members> {
    let mut attempt = 0;
    loop {
        let placement = net.map(|n| n.placement(run + 7 * attempt));
        match Members::start_placed(&options.exe, &format!("crash{run}"), "256M", &options.transport, placement.as_ref()) {
            Ok(m) => return Ok(m),
            Err(e) if attempt == 2 => return Err(e),
            Err(e) => eprintln!("kv-replicated-crash run {run}: the group did not start ({e:#}); starting it again"),
        }
        attempt += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Starts killed member `id` again on its pools; a start that fails is
/// tried again every 100 ms for 5 s (a killed member's peer port can stay
/// taken for a moment by its connections still closing, which
/// `SO_REUSEADDR` does not cover), as an operator's supervisor would.
fn restart(members: &mut Members, id: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match members.restart(id) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(e.context(format!("member {id} did not start again within 5 s"))),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Sleeps until `at` after `epoch`.
fn sleep_until(epoch: Instant, at: Duration) {
    if let Some(left) = at.checked_sub(epoch.elapsed()) {
        std::thread::sleep(left);
    }
}

/// From now, SETs through every member in turn (each bounded by
/// `timeout`) until one is acknowledged: how long that took, if within 10 s.
fn probe_write(addrs: &[SocketAddr], timeout: Duration) -> Option<f64> {
    let start = Instant::now();
    let mut member = 0;
    while start.elapsed() < Duration::from_secs(10) {
        let ok = Resp::connect_within(addrs[member], timeout).and_then(|mut c| c.reply(&[b"SET", b"pmwire-probe", b"1"]));
        if matches!(ok, Ok(Value::Simple(ref s)) if s == b"OK") {
            return Some(start.elapsed().as_secs_f64() * 1e3);
        }
        member = (member + 1) % MEMBERS;
        if member == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    None
}

fn drive(options: &CrashOptions, net: Option<&Net>, seed: u64, record: &mut RunRecord) -> Result<()> {
    let faults = net.map(|n| NetFaults::draw(seed, n.namespaces.nft));
    let mut impaired = String::new();
    if let (Some(net), Some(NetFaults { impair: Some((delay, loss, mbit)), .. })) = (net, faults) {
        for id in 1..=MEMBERS as u64 {
            impaired = net.namespaces.impair(id, delay, loss, mbit)?;
        }
    }
    record.faults = faults.map_or_else(|| "loopback: no network faults".to_string(), |f| f.text(&impaired));
    let mut members = start_members(options, net, record.run)?;
    let leader = members.leader(Duration::from_secs(20))?;
    let victim = if record.killed_leader { leader } else { leader % MEMBERS + 1 };
    let (epoch, stop) = (Instant::now(), AtomicBool::new(false));
    let addrs = members.resp.clone();
    let reach = Reach { addrs: &addrs, timeout: net.map(|_| NETNS_IO_TIMEOUT) };
    let mut killed_at = 0u64;
    let load = options.load;
    let logs: Vec<ClientLog> = std::thread::scope(|s| -> Result<Vec<ClientLog>> {
        let handles: Vec<_> = (0..CLIENTS).map(|c| {
            let stop = &stop;
            s.spawn(move || client(c, reach, seed, epoch, stop))
        }).collect();
        sleep_until(epoch, load / 3);
        killed_at = epoch.elapsed().as_nanos() as u64;
        members.kill(victim);
        sleep_until(epoch, load / 2);
        let restarted = restart(&mut members, victim);
        let mut probe = None;
        if let (Some(net), Some(NetFaults { partition: Some(p), .. })) = (net, faults) {
            sleep_until(epoch, load * 11 / 20);
            let first = if p.leader { members.leader(Duration::from_millis(500)).unwrap_or(victim) } else { (seed % MEMBERS as u64) as usize + 1 };
            let cut: Vec<usize> = if p.majority { vec![first, first % MEMBERS + 1] } else { vec![first] };
            net.cut(&cut, p.silent)?;
            record.quorum_lost = p.majority;
            std::thread::sleep(Duration::from_millis(p.for_ms));
            net.heal_all();
            probe = Some(s.spawn(|| probe_write(&addrs, Duration::from_millis(300))));
        }
        sleep_until(epoch, load);
        stop.store(true, Ordering::Relaxed);
        let logs = handles.into_iter().map(|h| h.join().expect("a client thread panicked")).collect();
        record.heal_ms = probe.and_then(|p| p.join().expect("the probe panicked"));
        restarted?;
        Ok(logs)
    })?;
    if record.killed_leader {
        let first = logs.iter().flat_map(|l| &l.writes).filter(|(call, _)| *call >= killed_at).map(|(_, ret)| *ret).min();
        record.failover_ms = first.map(|ret| (ret - killed_at) as f64 / 1e6);
    }
    let mut h = History::default();
    for (c, l) in logs.iter().enumerate() {
        h.ops.extend(l.ops.iter().cloned());
        h.counters.push((format!("ctr{c}").into_bytes(), l.incr_acked, l.incr_unknown, None));
    }
    final_reads(&members, epoch, &mut h)?;
    record.ops = h.ops.len();
    record.unknown = h.ops.iter().filter(|o| o.ret.is_none()).count();
    record.acked_writes = h.ops.iter().filter(|o| matches!(o.ret, Some((_, Output::Ok | Output::Int(_))))).count();
    record.acked_large =
        h.ops.iter().filter(|o| matches!(o.ret, Some((_, Output::Ok))) && matches!(&o.input, Input::Set(v) if v.ends_with(b":large"))).count();
    record.findings = check(&h);
    record.history = h;
    Ok(())
}

/// After the load: GETs of every key through the leader, added to `h`.
fn final_reads(members: &Members, epoch: Instant, h: &mut History) -> Result<()> {
    let mut reader = FinalReader { members, epoch, conn: None };
    for i in 0..KEYS {
        let (call, v, ret) = reader.get(&key(i))?;
        h.ops.push(RedisOp { key: key(i), call, ret: Some((ret, Output::Bulk(v))), input: Input::Get });
    }
    for (k, _, _, last) in &mut h.counters {
        let (call, v, ret) = reader.get(k)?;
        *last = v.as_deref().map_or(Some(0), |b| lincheck::redis::parse_i64(b));
        h.ops.push(RedisOp { key: k.clone(), call, ret: Some((ret, Output::Bulk(v))), input: Input::Get });
    }
    for c in 0..CLIENTS {
        let (a, b) = (format!("m{c}a").into_bytes(), format!("m{c}b").into_bytes());
        let pair = (reader.get(&a)?.1, reader.get(&b)?.1);
        h.pairs.push((a, pair.0, pair.1));
    }
    Ok(())
}

/// The final GETs, through the leader; a GET that fails (leadership moved
/// just then) is sent again, to the leader found again, for up to 20 s (a
/// read changes nothing, so only the attempt that answered is recorded).
struct FinalReader<'m> {
    members: &'m Members,
    epoch: Instant,
    conn: Option<Resp>,
}

impl FinalReader<'_> {
    /// (called, value, returned), in ns since the run's epoch.
    fn get(&mut self, k: &[u8]) -> Result<(u64, Option<Vec<u8>>, u64)> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let now = || self.epoch.elapsed().as_nanos() as u64;
        loop {
            if self.conn.is_none() {
                let leader = self.members.leader(deadline.saturating_duration_since(Instant::now()))?;
                self.conn = Resp::connect(self.members.resp[leader - 1]).ok();
            }
            if let Some(c) = self.conn.as_mut() {
                let call = now();
                match c.command(&[b"GET", k]) {
                    Ok(Value::Bulk(b)) => return Ok((call, Some(compact(&b)), now())),
                    Ok(Value::NilBulk | Value::Null) => return Ok((call, None, now())),
                    Ok(other) => bail!("GET answered {other:?}"),
                    Err(e) if Instant::now() > deadline => return Err(e.context("the final reads")),
                    Err(_) => self.conn = None,
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn percentile(xs: &mut [f64], p: f64) -> Option<f64> {
    xs.sort_by(f64::total_cmp);
    let i = ((xs.len() as f64 - 1.0) * p).round() as usize;
    xs.get(i).copied()
}

/// Runs the campaign: its JSON, table and headlines, and whether it passed.
pub fn run(options: &CrashOptions) -> Result<(SuiteReport, bool)> {
    let secret = crate::smr::links::hold_secret();
    let net = if options.netns { Some(Net::create()?) } else { None };
    if let Some(note) = net.as_ref().and_then(|n| n.namespaces.impairment_note()) {
        println!("kv-replicated-crash --netns: {note}");
    }
    let progress = crate::measure::Progress::new(options.runs as u64, true);
    let mut records = Vec::new();
    for run in 0..options.runs {
        progress.stage(&format!("run {}/{}", run + 1, options.runs));
        let r = one_run(options, net.as_ref(), run);
        for p in &r.findings.problems {
            eprintln!("kv-replicated-crash run {run} (seed {:#x}): {p}", options.seed.wrapping_add(run as u64));
        }
        records.push(r);
        progress.step();
    }
    progress.finish();
    drop(net);
    drop(secret);
    let canary = records.iter().find_map(|r| plant_lost_write(&r.history)).map(|h| !check(&h).problems.is_empty());
    let failed = records.iter().filter(|r| !r.findings.problems.is_empty()).count();
    let results: Vec<BenchResult> = records.iter().map(|r| row(options, r)).collect();
    let heads = headlines(&records, failed, canary);
    let parameters = serde_json::json!({
        "runs": options.runs, "seed": format!("{:#x}", options.seed), "load_ms": options.load.as_millis() as u64,
        "clients": CLIENTS, "keys": KEYS, "peer_transport": options.transport,
        "network": if options.netns { "3 network namespaces, veth pairs to a bridge; delay/loss (tbf + nftables without netem); partitions by link down or by dropping every packet (nftables), of one member or two" } else { "loopback" },
        "faults": "kill -9 of the leader (even runs) or a follower (odd runs) a third of the way in, restarted on its pool halfway; with --netns, the run's network faults (each row's `faults`)",
        "check_budget": { "max_steps": CHECK_BUDGET.max_steps, "max_cache": CHECK_BUDGET.max_cache },
    });
    let passed = failed == 0 && canary == Some(true);
    let suite_name = if options.netns { format!("{SUITE}_netns") } else { SUITE.to_string() };
    let report = crate::remote::common::finish(&suite_name, &options.out_dir, parameters, results, Vec::new(), heads)?;
    Ok((report, passed))
}

/// One run's row.
fn row(options: &CrashOptions, r: &RunRecord) -> BenchResult {
    let f = &r.findings;
    let mut row = BenchResult::new(SUITE, &format!("run_{}", r.run))
        .metric("ops", r.ops as f64)
        .metric("acked_writes", r.acked_writes as f64)
        .metric("acked_large_sets", r.acked_large as f64)
        .metric("unknown", r.unknown as f64)
        .metric("lost_acked_writes", f.lost as f64)
        .metric("undecided_keys", f.undecided.len() as f64)
        .metric("problems", f.problems.len() as f64)
        .param("killed", if r.killed_leader { "leader" } else { "follower" })
        .param("network", if options.netns { "netns" } else { "loopback" })
        .param("faults", r.faults.clone())
        .param("problems_text", f.problems.clone());
    if let Some(ms) = r.failover_ms {
        row = row.metric("failover_ms", ms);
    }
    if let Some(ms) = r.heal_ms {
        row = row.metric("heal_to_commit_ms", ms).param("quorum_lost", if r.quorum_lost { "yes" } else { "no" });
    }
    row
}

fn headlines(records: &[RunRecord], failed: usize, canary: Option<bool>) -> Vec<Headline> {
    let mut failovers: Vec<f64> = records.iter().filter_map(|r| r.failover_ms).collect();
    let mut heals: Vec<f64> = records.iter().filter_map(|r| r.heal_ms).collect();
    let mut quorum_heals: Vec<f64> = records.iter().filter(|r| r.quorum_lost).filter_map(|r| r.heal_ms).collect();
    let info = |name: &str, v: Option<f64>, why: &str| match v {
        Some(v) => Headline::measured(name, v, "<= 1000 ms (information)", crate::Goal::at_most(1000.0), "this campaign").in_unit("ms").for_information(),
        None => Headline::not_run(name, "<= 1000 ms (information)", why),
    };
    let goal = |name: &str, v: Option<f64>, why: &str| match v {
        Some(v) => Headline::measured(name, v, "<= 1000 ms", crate::Goal::at_most(1000.0), "this campaign").in_unit("ms"),
        None => Headline::not_run(name, "<= 1000 ms", why),
    };
    let lost: u64 = records.iter().map(|r| r.findings.lost).sum();
    let undecided = records.iter().filter(|r| !r.findings.undecided.is_empty()).count();
    let no_kill = "no leader kill with a write after it";
    let no_heal = "no partition healed in this campaign (partitions need --netns)";
    vec![
        ratio("kv-replicated-crash runs with a lost write, a wrong INCR count, a half EXEC or a non-linearizable history", Some(failed as f64), 0.0, false, "every run's checks"),
        ratio("kv-replicated-crash acknowledged writes lost (SETs and INCRs)", Some(lost as f64), 0.0, false, "every run's final reads"),
        Headline::measured("kv-replicated-crash runs with a key undecided (linearizability search past its budget)", undecided as f64, "counted (information)", crate::Goal::at_most(0.0), "every run's checks").for_information(),
        match canary {
            Some(caught) => ratio("kv-replicated-crash canary: planted lost write caught (1 = caught)", Some(f64::from(u8::from(caught))), 1.0, true, "a real run's history with a lost write planted"),
            None => Headline::not_run("kv-replicated-crash canary: planted lost write caught (1 = caught)", ">= 1", "no run acknowledged a SET"),
        },
        info("kv-replicated-crash failover p50 (ms): kill -9 of the leader to the next acknowledged write", percentile(&mut failovers, 0.5), no_kill),
        info("kv-replicated-crash failover max (ms)", percentile(&mut failovers, 1.0), no_kill),
        goal("kv-replicated-crash partition heal to next committed write p50 (ms)", percentile(&mut heals, 0.5), no_heal),
        goal("kv-replicated-crash partition heal to next committed write max (ms)", percentile(&mut heals, 1.0), no_heal),
        goal("kv-replicated-crash heal of a partition with no majority to next committed write p50 (ms)", percentile(&mut quorum_heals, 0.5), "no partition without a majority healed"),
        goal("kv-replicated-crash heal of a partition with no majority to next committed write max (ms)", percentile(&mut quorum_heals, 1.0), "no partition without a majority healed"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(key: &str, call: u64, ret: u64, input: Input, out: Output) -> RedisOp {
        RedisOp { key: key.into(), call, ret: Some((ret, out)), input }
    }

    fn good() -> History {
        History {
            ops: vec![
                op("k0", 0, 10, Input::Set(b"a".to_vec()), Output::Ok),
                op("k0", 5, 15, Input::Get, Output::Bulk(Some(b"a".to_vec()))),
                RedisOp { key: b"k0".to_vec(), call: 20, ret: None, input: Input::Set(b"b".to_vec()) },
                op("k0", 30, 40, Input::Get, Output::Bulk(Some(b"b".to_vec()))),
            ],
            counters: vec![(b"ctr0".to_vec(), 3, 1, Some(4))],
            pairs: vec![(b"m0a".to_vec(), Some(b"7".to_vec()), Some(b"7".to_vec()))],
        }
    }

    #[test]
    fn a_good_history_passes() {
        let f = check(&good());
        assert_eq!(f.problems, Vec::<String>::new());
        assert_eq!(f.lost, 0);
    }

    #[test]
    fn a_planted_lost_write_fails() {
        let planted = plant_lost_write(&good()).unwrap();
        let f = check(&planted);
        assert_eq!(f.lost, 1, "{:?}", f.problems);
        let problems = f.problems;
        assert!(problems.iter().any(|p| p.contains("not linearizable")), "{problems:?}");
    }

    #[test]
    fn wrong_counts_and_half_execs_fail() {
        let mut h = good();
        h.counters[0].3 = Some(2);
        assert!(check(&h).problems.iter().any(|p| p.contains("lost INCR")));
        h.counters[0].3 = Some(5);
        assert!(check(&h).problems.iter().any(|p| p.contains("applied twice")));
        h.counters[0].3 = Some(4);
        h.pairs[0].2 = None;
        assert!(check(&h).problems.iter().any(|p| p.contains("half-applied")));
        h.pairs[0].2 = Some(b"7".to_vec());
        h.counters[0].3 = None;
        assert!(check(&h).problems.iter().any(|p| p.contains("unread")));
    }

    #[test]
    fn large_values_become_their_tokens_and_torn_ones_a_marker() {
        let v = expand(b"1:12:large");
        assert_eq!(v.len(), LARGE_BYTES);
        assert_eq!(compact(&v), b"1:12:large");
        let mut torn = v.clone();
        torn[LARGE_BYTES - 1] ^= 1;
        assert_eq!(compact(&torn), b"<a large value no SET wrote>");
        assert_eq!(compact(b"1:13"), b"1:13");
    }

    #[test]
    fn replies_become_outputs() {
        assert_eq!(output(&Value::Simple(b"OK".to_vec())), Some(Output::Ok));
        assert_eq!(output(&Value::NilBulk), Some(Output::Bulk(None)));
        assert_eq!(output(&Value::Integer(3)), Some(Output::Int(3)));
        assert_eq!(output(&Value::Array(vec![])), None);
    }
}
