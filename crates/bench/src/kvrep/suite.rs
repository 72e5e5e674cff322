//! `pmwire bench kv-replicated [--quick]` (issue 26): a 3-member `pmwire kv
//! --cluster` group on loopback, one thread each, beside Redis primary + 2
//! replicas (`appendfsync always`, `WAIT 2 0` after each SET), etcd with 3
//! members, single-node `pmwire kv` (the price of replication) and the
//! machine's floor (a write's four messages over plain blocking TCP
//! sockets, [`crate::smr::raw_floor`]).
//!
//! Method: interleaved rounds; every round starts each target afresh in
//! turn and times `latency_ops / rounds` operations with one closed-loop
//! client; a latency row's percentiles are the medians of its rounds'. The
//! middle round also runs the throughput sweep (1 to 64 closed-loop
//! clients, SET 64 B), YCSB A and B (`resp::ycsb`, 16 connections) and the
//! leader's bytes-copied counters. After the rounds, on groups of their
//! own (`super::catchup`): failover under load (kill -9 of the leader,
//! time to the next committed `+OK`, p50 and max over several kills) and a
//! new member's catch-up rate (added with `pmwire smr add` to a group
//! holding N MiB of keyspace: the snapshot streamed in chunks, then the
//! log). The floor is driven the same way as the rest:
//! a blocking client with one write outstanding per connection, the same
//! connection counts. SET 64 B is measured on every target; SET 1 KiB and
//! GET 64 B / 1 KiB on the RESP servers we start (ours, both shapes).
//! A target that cannot run is a [`Skipped`] with the reason; a headline
//! with a side missing is NOT RUN.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use pmwire_resp::ycsb::Workload;

use super::catchup;
use super::members::{copied_bytes, info_text, Members, Resp, MEMBERS};
use crate::kv::child::{KvChild, KvMode};
use crate::kv::placement::Placement;
use crate::kv::ycsb::{self, YcsbConfig};
use crate::measure::Progress;
use crate::remote::common::{finish_with_peers, latency_result, ratio};
use crate::schema::{BenchResult, Skipped};
use crate::smr::peers::{self, latency_run, throughput_point, Peer, PeerOptions, Plan, PutClient, LATENCY_BENCH, THROUGHPUT_BENCH};
use crate::smr::raw_floor::{self, RawFloor, SharedRawFloor};
use crate::{Headline, SuiteReport};

/// The suite's name.
pub const SUITE: &str = "kv_replicated";
/// Value bytes copied per SET sent through a follower.
const VIA_FOLLOWER: &str = "value_bytes_copied_per_set_via_follower";
/// Our replicated group's variant name.
pub const CLUSTER: &str = "pmwire_kv_3members";
/// Single-node `pmwire kv`'s variant name.
pub const SINGLE: &str = "pmwire_kv_single_node";
/// The bench of SET 64 B latency rows (every target).
pub const SET64: &str = "set_64B_latency";
/// The bench of SET 64 B throughput rows.
pub const SET64_OPS: &str = "set_64B_throughput";

/// How the suite runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// A short run (~1-2 min).
    pub quick: bool,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
    /// The `pmwire` binary (it runs the members).
    pub exe: PathBuf,
    /// Run Redis + WAIT and etcd too.
    pub peers: bool,
    /// `--peer-transport` of the members.
    pub transport: String,
}

/// What one run measures.
#[derive(Clone, Debug, PartialEq)]
pub struct RunPlan {
    /// The SET 64 B plan (latency ops in total, sweep, warm-up).
    pub plan: Plan,
    /// Interleaved rounds.
    pub rounds: u64,
    /// YCSB records and timed operations (0: no YCSB).
    pub ycsb_records: u64,
    /// YCSB timed operations.
    pub ycsb_ops: u64,
    /// MiB of keyspace a new member catches up from (0: not measured).
    pub catchup_mib: u64,
    /// Leader kills of the failover measurement (0: not measured).
    pub failover_kills: usize,
}

impl RunPlan {
    /// The quick plan: 3 rounds, 3,000 SETs each kind, 1 s per point; 3
    /// failovers, a catch-up from 32 MiB.
    pub fn quick() -> RunPlan {
        RunPlan { plan: Plan::quick(), rounds: 3, ycsb_records: 5_000, ycsb_ops: 10_000, catchup_mib: 32, failover_kills: 3 }
    }

    /// The full plan.
    pub fn full() -> RunPlan {
        RunPlan { plan: Plan::full(), rounds: 5, ycsb_records: 50_000, ycsb_ops: 100_000, catchup_mib: 256, failover_kills: 7 }
    }

    fn round(&self, sweep: bool) -> Plan {
        let clients = if sweep { self.plan.clients.clone() } else { Vec::new() };
        Plan { latency_puts: self.plan.latency_puts.div_ceil(self.rounds), warmup_puts: self.plan.warmup_puts.div_ceil(self.rounds), clients, ..self.plan.clone() }
    }
}

/// The latency kinds measured on our RESP servers: bench name, op, bytes.
const KINDS: [(&str, &str, usize); 3] = [("set_1KiB_latency", "SET", 1024), ("get_64B_latency", "GET", 64), ("get_1KiB_latency", "GET", 1024)];

/// `n` timed `op`s of `bytes`-byte values on one connection (GETs read
/// keys written first), after `warm` untimed ones: ns each.
fn op_latency(c: &mut Resp, op: &str, bytes: usize, warm: u64, n: u64) -> Result<Vec<u64>> {
    let value = vec![b'v'; bytes];
    let key = |i: u64| format!("lat:{bytes}:{}", i % 1000).into_bytes();
    if op == "GET" {
        for i in 0..1000.min(warm + n) {
            c.put(&key(i), &value)?;
        }
    }
    let mut samples = Vec::with_capacity(n as usize);
    for i in 0..warm + n {
        let start = Instant::now();
        if op == "GET" {
            let got = c.get(&key(i))?;
            if got.len() != bytes {
                bail!("GET returned {} bytes, {bytes} written", got.len());
            }
        } else {
            c.put(&key(i), &value)?;
        }
        if i >= warm {
            samples.push(start.elapsed().as_nanos() as u64);
        }
    }
    Ok(samples)
}

/// A RESP server of ours, measured: its rows into `rows` (per round) and
/// `results` (sweep, YCSB), failures into `skipped`.
struct Sink<'a> {
    rows: &'a mut Vec<BenchResult>,
    results: &'a mut Vec<BenchResult>,
    skipped: &'a mut Vec<Skipped>,
}

fn measure_resp(addr: std::net::SocketAddr, variant: &str, plan: &Plan, run: &RunPlan, sweep: bool, sink: &mut Sink) {
    let connect = || Resp::connect(addr);
    match latency_run(&connect, plan) {
        Ok(mut s) => sink.rows.push(latency_result(SET64, variant, 64, &mut s)),
        Err(e) => sink.skipped.push(Skipped::new(SET64, variant, &format!("{e:#}"))),
    }
    for (bench, op, bytes) in KINDS {
        match connect().and_then(|mut c| op_latency(&mut c, op, bytes, plan.warmup_puts, plan.latency_puts)) {
            Ok(mut s) => sink.rows.push(latency_result(bench, variant, bytes as u64, &mut s)),
            Err(e) => sink.skipped.push(Skipped::new(bench, variant, &format!("{e:#}"))),
        }
    }
    if !sweep {
        return;
    }
    sweep_into(&connect, variant, plan, sink);
    match large_set(addr) {
        Ok(mb_per_s) => sink.results.push(
            BenchResult::new(BIG_SET, variant)
                .size(BIG_SET_BYTES as u64)
                .metric("mb_per_s", mb_per_s)
                .param("method", "one SET on a fresh connection, timed from its first byte sent to +OK, then GET compared byte for byte"),
        ),
        Err(e) => sink.skipped.push(Skipped::new(BIG_SET, variant, &format!("{e:#}"))),
    }
    for (name, workload) in [("a", Workload::a(run.ycsb_records, 7)), ("b", Workload::b(run.ycsb_records, 7))] {
        let config = YcsbConfig { workload, connections: 16, ops: run.ycsb_ops, warmup_ops: run.ycsb_ops / 10, load_pipeline: 16 };
        let bench = format!("ycsb_{name}");
        match ycsb::run(addr, &config) {
            Ok(r) if r.errors == 0 => sink.results.push(
                BenchResult::new(&bench, variant)
                    .size(1024)
                    .metric("throughput_ops_per_s", r.throughput_ops_per_s)
                    .metric("latency_us_p50", r.latency_us_p50)
                    .metric("latency_us_p99", r.latency_us_p99)
                    .param("connections", 16)
                    .param("ops", r.ops),
            ),
            Ok(r) => sink.skipped.push(Skipped::new(&bench, variant, &format!("{} error replies in {} ops, the first: {}", r.errors, r.ops, r.error_samples.join(" | ")))),
            Err(e) => sink.skipped.push(Skipped::new(&bench, variant, &format!("{e:#}"))),
        }
    }
}

/// The large SET's row and size: through a member it streams as pieces
/// (`kv_server::member::stream`).
const BIG_SET: &str = "set_16mib";
const BIG_SET_BYTES: usize = 16 << 20;

/// One SET of [`BIG_SET_BYTES`] to `addr`, read back: MB/s of the SET.
fn large_set(addr: std::net::SocketAddr) -> Result<f64> {
    let mut c = Resp::connect(addr)?;
    let value: Vec<u8> = (0..BIG_SET_BYTES).map(|i| (i % 251) as u8).collect();
    let start = std::time::Instant::now();
    match c.command(&[b"SET", b"big:value", &value])? {
        pmwire_resp::client::Value::Simple(s) if s == b"OK" => {}
        other => anyhow::bail!("SET of {BIG_SET_BYTES} B answered {other:?}"),
    }
    let secs = start.elapsed().as_secs_f64();
    match c.command(&[b"GET", b"big:value"])? {
        pmwire_resp::client::Value::Bulk(b) if b == value => {}
        pmwire_resp::client::Value::Bulk(b) => anyhow::bail!("GET gave {} B that differ from the value SET", b.len()),
        other => anyhow::bail!("GET answered {other:?}"),
    }
    Ok(BIG_SET_BYTES as f64 / 1e6 / secs)
}

/// The SET 64 B throughput points of one target.
fn sweep_into<C: PutClient>(connect: &(dyn Fn() -> Result<C> + Sync), variant: &str, plan: &Plan, sink: &mut Sink) {
    for &clients in &plan.clients {
        match throughput_point(connect, clients, plan.warmup_per_point, plan.seconds_per_point) {
            Ok(ops) => sink.results.push(
                BenchResult::new(SET64_OPS, variant).size(64).metric("throughput_ops_per_s", ops as f64 / plan.seconds_per_point.as_secs_f64()).param("clients", clients).param("sets", ops),
            ),
            Err(e) => sink.skipped.push(Skipped::new(SET64_OPS, variant, &format!("{clients} clients: {e:#}"))),
        }
    }
}

/// The leader's value bytes copied per SET (1 KiB values) on a write's
/// path, from its `INFO copies` counters, or why not.
/// Value bytes copied per 1 KiB SET through the leader, from `INFO copies`
/// on the leader and then on each follower once it applied the last SET
/// (each follower's, in member order).
fn copied_per_set(members: &Members, leader: usize) -> Result<(f64, Vec<f64>), String> {
    let info = |c: &mut Resp| info_text(c, b"copies").map_err(|e| format!("INFO: {e:#}"));
    let mut followers = Vec::new();
    for (i, &addr) in members.resp.iter().enumerate().filter(|&(i, _)| i + 1 != leader) {
        let mut f = Resp::connect(addr).map_err(|e| format!("member {}: {e:#}", i + 1))?;
        let before = copied_bytes(&info(&mut f)?).ok_or("a follower's INFO copies has no copy_value_bytes_path counter")?;
        followers.push((f, before));
    }
    let mut c = Resp::connect(members.resp[leader - 1]).map_err(|e| format!("{e:#}"))?;
    // A member that is not the leader throughout forwards the SETs and
    // copies as a follower does: then the count is not the leader's.
    let role = |c: &mut Resp| c.command(&[b"ROLE"]).and_then(|r| super::members::role_of(&r)).map_err(|e| format!("ROLE: {e:#}"));
    let still_leader = |role: String| if role == "master" { Ok(()) } else { Err(format!("member {leader} was not the leader throughout (ROLE {role}): leadership moved")) };
    still_leader(role(&mut c)?)?;
    let before = copied_bytes(&info(&mut c)?).ok_or("the member's INFO copies has no copy_value_bytes_path counter")?;
    const SETS: u64 = 1000;
    let value = vec![b'c'; 1024];
    for i in 0..SETS {
        c.put(format!("copied:{i}").as_bytes(), &value).map_err(|e| format!("{e:#}"))?;
    }
    let after = copied_bytes(&info(&mut c)?).ok_or("the counter went away")?;
    still_leader(role(&mut c)?)?;
    let last = format!("copied:{}", SETS - 1);
    let mut per_follower = Vec::new();
    for (mut f, before) in followers {
        wait_applied(&mut f, &last, &value)?;
        let f_after = copied_bytes(&info(&mut f)?).ok_or("the counter went away")?;
        per_follower.push(f_after.saturating_sub(before) as f64 / SETS as f64);
    }
    Ok((after.saturating_sub(before) as f64 / SETS as f64, per_follower))
}

/// Waits (10 s at most) until the member on `c` serves `key` as `value`
/// to a stale read (`READONLY`): it applied the write.
fn wait_applied(c: &mut Resp, key: &str, value: &[u8]) -> Result<(), String> {
    c.command(&[b"READONLY"]).map_err(|e| format!("READONLY: {e:#}"))?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while c.get(key.as_bytes()).ok().as_deref() != Some(value) {
        if std::time::Instant::now() > deadline {
            return Err(format!("{key} not applied within 10 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Value bytes copied per 1 KiB SET sent through a follower: the worse of
/// the leader and the other follower (which name the forwarded values where
/// they received them), and the serving follower (which copies each value
/// into the entry it forwards).
fn copied_through_follower(members: &Members, leader: usize) -> Result<(f64, f64), String> {
    let info = |c: &mut Resp| info_text(c, b"copies").map_err(|e| format!("INFO: {e:#}"));
    let ids: Vec<usize> = (1..=members.resp.len()).filter(|&i| i != leader).collect();
    let (&serving, others) = ids.split_first().ok_or("no follower")?;
    let connect = |i: usize| Resp::connect(members.resp[i - 1]).map_err(|e| format!("member {i}: {e:#}"));
    let value = vec![b'f'; 1024];
    // Everything before (a marker written through the follower) applied on
    // every member, so the counts below are of these SETs alone.
    let mut c = connect(serving)?;
    c.put(b"copied-via:marker", &value).map_err(|e| format!("{e:#}"))?;
    let applied = |key: &str| (1..=members.resp.len()).try_for_each(|i| wait_applied(&mut connect(i)?, key, &value).map_err(|e| format!("member {i}: {e}")));
    applied("copied-via:marker")?;
    let mut before = Vec::new();
    for i in 1..=members.resp.len() {
        before.push(copied_bytes(&info(&mut connect(i)?)?).ok_or("a member's INFO copies has no copy_value_bytes_path counter")?);
    }
    const SETS: u64 = 1000;
    for i in 0..SETS {
        c.put(format!("copied-via:{i}").as_bytes(), &value).map_err(|e| format!("{e:#}"))?;
    }
    applied(&format!("copied-via:{}", SETS - 1))?;
    let role = super::members::role_of(&connect(leader)?.command(&[b"ROLE"]).map_err(|e| format!("ROLE: {e:#}"))?).map_err(|e| format!("ROLE: {e:#}"))?;
    if role != "master" {
        return Err(format!("member {leader} was not the leader throughout (ROLE {role}): leadership moved"));
    }
    let mut per = vec![0.0; members.resp.len()];
    for i in 1..=members.resp.len() {
        let after = copied_bytes(&info(&mut connect(i)?)?).ok_or("the counter went away")?;
        per[i - 1] = after.saturating_sub(before[i - 1]) as f64 / SETS as f64;
    }
    let worst = std::iter::once(leader).chain(others.iter().copied()).map(|i| per[i - 1]).fold(0.0, f64::max);
    Ok((worst, per[serving - 1]))
}

fn cluster_round(options: &Options, run: &RunPlan, plan: &Plan, sweep: bool, sink: &mut Sink) {
    let members = match Members::start(&options.exe, "bench", "512M", &options.transport) {
        Ok(m) => m,
        Err(e) => return sink.skipped.push(Skipped::new(SET64, CLUSTER, &format!("members did not start: {e:#}"))),
    };
    let leader = match members.leader(Duration::from_secs(20)) {
        Ok(l) => l,
        Err(e) => return sink.skipped.push(Skipped::new(SET64, CLUSTER, &format!("{e:#}"))),
    };
    let skipped_before = sink.skipped.len();
    measure_resp(members.resp[leader - 1], CLUSTER, plan, run, sweep, sink);
    if sink.skipped.len() > skipped_before {
        // What the members say of themselves, beside each error.
        let summary = super::members::replication_summary(&members.resp);
        for s in &mut sink.skipped[skipped_before..] {
            s.reason = format!("{} [{summary}]", s.reason);
        }
    }
    if !sweep {
        return;
    }
    // The sweep may have moved leadership (a loaded 2-core machine): ask again.
    let leader = match members.leader(Duration::from_secs(20)) {
        Ok(l) => l,
        Err(e) => return sink.skipped.push(Skipped::new("value_bytes_copied_per_set", CLUSTER, &format!("{e:#}"))),
    };
    match copied_per_set(&members, leader) {
        Ok((v, followers)) => {
            sink.results.push(BenchResult::new("value_bytes_copied_per_set", CLUSTER).size(1024).metric("bytes_per_set", v).param("member", "leader"));
            let worst = followers.iter().copied().fold(0.0, f64::max);
            sink.results.push(
                BenchResult::new("value_bytes_copied_per_set_follower", CLUSTER).size(1024).metric("bytes_per_set", worst).param("member", "follower, the worst of both").param("each", followers),
            );
        }
        Err(why) => {
            sink.skipped.push(Skipped::new("value_bytes_copied_per_set", CLUSTER, &why));
            sink.skipped.push(Skipped::new("value_bytes_copied_per_set_follower", CLUSTER, &why));
        }
    }
    match copied_through_follower(&members, leader) {
        Ok((worst, serving)) => sink.results.push(
            BenchResult::new(VIA_FOLLOWER, CLUSTER)
                .size(1024)
                .metric("bytes_per_set", worst)
                .metric("serving_follower_bytes_per_set", serving)
                .param("member", "the leader and the other follower, the worse (bytes_per_set); the serving follower copies each value into its forward"),
        ),
        Err(why) => sink.skipped.push(Skipped::new(VIA_FOLLOWER, CLUSTER, &why)),
    }
}

/// Failover under load and a new member's catch-up, each on a group of
/// its own (`super::catchup`).
fn membership_stage(options: &Options, run: &RunPlan, sink: &mut Sink) {
    if run.failover_kills > 0 {
        match catchup::failover(&options.exe, &options.transport, run.failover_kills) {
            Ok(f) => {
                let p50 = catchup::percentile(&f.ms, 0.5).unwrap_or(f64::NAN);
                let max = catchup::percentile(&f.ms, 1.0).unwrap_or(f64::NAN);
                sink.results.push(
                    BenchResult::new("failover", CLUSTER)
                        .metric("failover_ms", p50)
                        .metric("failover_ms_p50", p50)
                        .metric("failover_ms_max", max)
                        .param("kills", f.ms.len())
                        .param("failover_ms_each", f.ms.clone())
                        .param("load_sets", f.load_ops)
                        .param("stopped_early", f.stopped.clone().unwrap_or_default())
                        .param("method", "4 closed-loop SET clients; kill -9 of the leader, then SET through each other member in turn until +OK (committed by the new leader); the killed member restarted on its pool, 0.5 s to settle, next kill"),
                );
            }
            Err(e) => sink.skipped.push(Skipped::new("failover", CLUSTER, &format!("{e:#}"))),
        }
    } else {
        sink.skipped.push(Skipped::new("failover", CLUSTER, "left out (--failover-kills 0)"));
    }
    if run.catchup_mib > 0 {
        match catchup::catch_up(&options.exe, &options.transport, run.catchup_mib) {
            Ok(c) => sink.results.push(
                BenchResult::new("catch_up", CLUSTER)
                    .size(catchup::VALUE_BYTES as u64)
                    .metric("catch_up_mb_per_s", c.mb_per_s())
                    .metric("snapshot_s", c.snapshot_s)
                    .metric("snapshot_then_log_s", c.total_s)
                    .param("keyspace_bytes", c.keyspace_bytes)
                    .param("keyspace_mib", run.catchup_mib)
                    .param("writes_during", c.writes_during)
                    .metric("term_changes", c.term_changes as f64)
                    .metric("max_turn_gap_ms", c.max_turn_gap_ms)
                    .param("max_compact_ms", c.max_compact_ms)
                    .param("method", "3 members loaded with N MiB of 64 KiB values; a 4th started with --join; pmwire smr add --learner under 2 SET clients; MB/s = keyspace bytes / time from the add to the new member serving a key written before it (READONLY); then to serving one written after"),
            ),
            Err(e) => sink.skipped.push(Skipped::new("catch_up", CLUSTER, &format!("{e:#}"))),
        }
    }
}

fn single_round(options: &Options, run: &RunPlan, plan: &Plan, sweep: bool, sink: &mut Sink) {
    let pool = PathBuf::from(format!("/dev/shm/pmwire-kvrep-single-{}.pool", std::process::id()));
    // 2 GiB (sparse on tmpfs): the single node takes 80 K fresh keys a
    // second in the sweep, each value in the pool buffer it was received
    // into, and filled 512 MiB at 64 clients (-OOM, the row not run).
    match KvChild::start(&options.exe, &pool, "2G", KvMode::ZeroCopy, &Placement::unpinned()) {
        Ok(child) => {
            measure_resp(child.resp, SINGLE, plan, run, sweep, sink);
            drop(child);
        }
        Err(e) => sink.skipped.push(Skipped::new(SET64, SINGLE, &format!("pmwire kv did not start: {e:#}"))),
    }
    let _ = std::fs::remove_file(&pool);
}

fn floor_round(plan: &Plan, sweep: bool, sink: &mut Sink) {
    match latency_run(&RawFloor::start, plan) {
        Ok(mut s) => sink.rows.push(latency_result(SET64, raw_floor::VARIANT, 64, &mut s)),
        Err(e) => sink.skipped.push(Skipped::new(SET64, raw_floor::VARIANT, &format!("{e:#}"))),
    }
    if sweep {
        match SharedRawFloor::start() {
            Ok(floor) => sweep_into(&|| floor.client(), raw_floor::VARIANT, plan, sink),
            Err(e) => sink.skipped.push(Skipped::new(SET64_OPS, raw_floor::VARIANT, &format!("{e:#}"))),
        }
    }
}

/// A peer's round through `smr::peers` (SET 64 B + WAIT / etcd PUT), its
/// benches renamed to this suite's.
fn peer_round(peer: Peer, plan: &Plan, sink: &mut Sink) {
    let (rows, skips) = peers::run_peer(peer, plan, &PeerOptions::default());
    let rename = |b: &str| if b == LATENCY_BENCH { SET64.to_string() } else if b == THROUGHPUT_BENCH { SET64_OPS.to_string() } else { b.to_string() };
    for mut r in rows {
        r.bench = rename(&r.bench);
        if r.bench == SET64 { sink.rows.push(r) } else { sink.results.push(r) }
    }
    sink.skipped.extend(skips.into_iter().map(|mut s| {
        s.bench = rename(&s.bench);
        s
    }));
}

/// One row per (bench, variant) whose percentiles are the medians of its rounds'.
pub fn medians(rows: &[BenchResult]) -> Vec<BenchResult> {
    let mut keys: Vec<(String, String)> = rows.iter().map(|r| (r.bench.clone(), r.variant.clone())).collect();
    keys.dedup();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|(bench, variant)| {
            let mine: Vec<&BenchResult> = rows.iter().filter(|r| r.bench == bench && r.variant == variant).collect();
            let median = |m: &str| {
                let mut xs: Vec<f64> = mine.iter().filter_map(|r| r.get(m)).collect();
                xs.sort_by(f64::total_cmp);
                xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
            };
            let mut row = BenchResult::new(&bench, &variant).metric("latency_ns_p50", median("latency_ns_p50")).metric("latency_ns_p99", median("latency_ns_p99")).param("rounds", mine.len()).param("round_p50s_ns", mine.iter().filter_map(|r| r.get("latency_ns_p50")).collect::<Vec<_>>());
            row.size_bytes = mine[0].size_bytes;
            row
        })
        .collect()
}

/// Runs the suite.
pub fn run(options: &Options) -> Result<SuiteReport> {
    run_suite(options, &if options.quick { RunPlan::quick() } else { RunPlan::full() })
}

/// Runs `run` (0 rounds: only failover and catch-up) against the targets
/// of `options`, holding the cluster's secret until it ends.
pub fn run_suite(options: &Options, run: &RunPlan) -> Result<SuiteReport> {
    let _secret = crate::smr::links::hold_secret();
    let targets: u64 = 3 + if options.peers { 2 } else { 0 };
    let progress = Progress::new(run.rounds * targets + 1, true);
    let (mut rows, mut results, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..run.rounds {
        let sweep = round == run.rounds / 2;
        let plan = run.round(sweep);
        let mut sink = Sink { rows: &mut rows, results: &mut results, skipped: &mut skipped };
        let stage = |what: &str| progress.stage(&format!("round {}/{}: {what}", round + 1, run.rounds));
        stage("raw floor");
        floor_round(&plan, sweep, &mut sink);
        progress.step();
        stage(CLUSTER);
        cluster_round(options, run, &plan, sweep, &mut sink);
        progress.step();
        stage(SINGLE);
        single_round(options, run, &plan, sweep, &mut sink);
        progress.step();
        if options.peers {
            for peer in [Peer::RedisWait, Peer::EtcdTmpfs] {
                stage(peer.name());
                peer_round(peer, &plan, &mut sink);
                progress.step();
            }
        }
    }
    progress.stage("failover under load and a new member's catch-up");
    membership_stage(options, run, &mut Sink { rows: &mut rows, results: &mut results, skipped: &mut skipped });
    progress.step();
    progress.finish();
    // A target that failed in several rounds is reported once per reason.
    skipped.sort_by(|a: &Skipped, b: &Skipped| (&a.bench, &a.variant, &a.reason).cmp(&(&b.bench, &b.variant, &b.reason)));
    skipped.dedup_by(|a, b| a.bench == b.bench && a.variant == b.variant && a.reason == b.reason);
    let mut all = medians(&rows);
    all.extend(results);
    let heads = headlines(&all, &skipped);
    let parameters = serde_json::json!({
        "command": if options.quick { "pmwire bench kv-replicated --quick" } else { "pmwire bench kv-replicated" },
        "members": MEMBERS, "peer_transport": options.transport, "rounds": run.rounds,
        "latency_ops_per_kind": run.plan.latency_puts, "clients": run.plan.clients, "seconds_per_point": run.plan.seconds_per_point.as_secs_f64(),
        "ycsb_records": run.ycsb_records, "ycsb_ops": run.ycsb_ops, "key_bytes": 16,
        "catchup_mib": run.catchup_mib, "failover_kills": run.failover_kills,
        "method": "interleaved rounds, every target started afresh each round; latency rows are medians of the rounds'; sweep, YCSB and copy counters in the middle round; failover and catch-up after the rounds, on groups of their own",
        "pool": "tmpfs (emulated pmem)",
    });
    let peer_info = serde_json::json!({
        "etcd": "Debian etcd-server 3.4, 3 members on loopback, data on tmpfs",
        "redis": "redis-server primary + 2 replicas, appendonly yes, appendfsync always, SET then WAIT 2 0",
        "floor": "4 messages per write over plain blocking TCP sockets, 3 threads, no Raft, no log",
    });
    finish_with_peers(SUITE, &options.out_dir, parameters, peer_info, all, skipped, heads)
}

fn metric(results: &[BenchResult], bench: &str, variant: &str, m: &str, clients: Option<u64>) -> Option<f64> {
    results
        .iter()
        .filter(|r| r.bench == bench && r.variant == variant)
        .filter(|r| clients.is_none_or(|c| r.params.get("clients").and_then(|v| v.as_u64()) == Some(c)))
        .find_map(|r| r.get(m))
}

/// The throughput floor's name in the headlines.
const OPS_FLOOR: &str = "raw TCP sockets, batched as a Raft leader batches (no log, no Raft)";

/// The ratios, all from one run.
pub fn headlines(results: &[BenchResult], skipped: &[Skipped]) -> Vec<Headline> {
    let p50 = |v: &str| metric(results, SET64, v, "latency_ns_p50", None);
    let ops = |v: &str| metric(results, SET64_OPS, v, "throughput_ops_per_s", Some(64));
    let div = |a: Option<f64>, b: Option<f64>| Some(a? / b?);
    let (redis, etcd) = (Peer::RedisWait.name(), Peer::EtcdTmpfs.name());
    let mut out = vec![
        ratio("kv-replicated SET 64 B p50, 1 client: pmwire 3 members / raw TCP floor (4 messages)", div(p50(CLUSTER), p50(raw_floor::VARIANT)), 1.5, false, "plain blocking sockets, same run"),
        // What bounds the ratio above: a replicated SET is a single node's
        // (two messages, the persist, the server) plus two messages and a
        // follower's persist, and the floor's four messages are only twice
        // a single node's two.
        ratio("kv-replicated SET 64 B p50, 1 client: single-node pmwire kv / raw TCP floor (4 messages; a replicated SET adds 2 messages and a follower's persist)", div(p50(SINGLE), p50(raw_floor::VARIANT)), 1.0, false, "plain blocking sockets, same run").for_information(),
        ratio("kv-replicated SET 64 B p50, 1 client: pmwire 3 members / Redis + WAIT 2 0", div(p50(CLUSTER), p50(redis)), 1.0, false, "redis-server + 2 replicas, AOF always"),
        ratio("kv-replicated SET 64 B p50, 1 client: pmwire 3 members / etcd", div(p50(CLUSTER), p50(etcd)), 1.0, false, "etcd 3.4, 3 members, tmpfs"),
        // The batched raw floor bounds what any replicated design reaches
        // here: a target past it is shown BOUND when we are near it.
        ratio("kv-replicated SETs/s at 64 clients: pmwire 3 members / Redis + WAIT 2 0", div(ops(CLUSTER), ops(redis)), 3.0, true, "redis-server + 2 replicas, AOF always")
            .with_floor(OPS_FLOOR, div(ops(raw_floor::VARIANT), ops(redis)), crate::smr::suite::FLOOR_WITHIN),
        ratio("kv-replicated SETs/s at 64 clients: pmwire 3 members / etcd", div(ops(CLUSTER), ops(etcd)), 10.0, true, "etcd 3.4, 3 members, tmpfs")
            .with_floor(OPS_FLOOR, div(ops(raw_floor::VARIANT), ops(etcd)), crate::smr::suite::FLOOR_WITHIN),
        ratio("kv-replicated SETs/s at 64 clients: pmwire 3 members / single-node pmwire kv", div(ops(CLUSTER), ops(SINGLE)), 0.5, true, "pmwire kv, one node, same run")
            .with_floor(OPS_FLOOR, div(ops(raw_floor::VARIANT), ops(SINGLE)), crate::smr::suite::FLOOR_WITHIN),
        ratio("kv-replicated SETs/s at 64 clients: raw TCP floor / pmwire 3 members (a floor the system beats is no floor)", div(ops(raw_floor::VARIANT), ops(CLUSTER)), 1.0, true, "the floor, same run").for_information(),
    ];
    let big = |v: &str| metric(results, BIG_SET, v, "mb_per_s", None);
    let big_name = "kv-replicated SET of 16 MiB through the leader (streamed as 128 KiB pieces), MB/s: pmwire 3 members / single-node pmwire kv";
    out.push(match div(big(CLUSTER), big(SINGLE)) {
        Some(v) => Headline::measured(big_name, v, "information", crate::Goal::at_least(0.0), "pmwire kv, one node, same run").for_information(),
        None => Headline::not_run(big_name, "information", &skipped.iter().find(|s| s.bench == BIG_SET).map_or("a side did not run".to_string(), |s| s.reason.clone())),
    });
    let reason = |bench: &str| skipped.iter().find(|s| s.bench == bench && s.variant == CLUSTER).map_or("the cluster did not run".to_string(), |s| s.reason.clone());
    out.push(match metric(results, "value_bytes_copied_per_set", CLUSTER, "bytes_per_set", None) {
        Some(v) => Headline::measured("kv-replicated value bytes copied per 1 KiB SET on the leader (INFO counters)", v, "= 0", crate::Goal::at_most(0.0), "counters of the member"),
        None => Headline::not_run("kv-replicated value bytes copied per 1 KiB SET on the leader (INFO counters)", "= 0", &reason("value_bytes_copied_per_set")),
    });
    out.push(match metric(results, "value_bytes_copied_per_set_follower", CLUSTER, "bytes_per_set", None) {
        Some(v) => Headline::measured("kv-replicated value bytes copied per 1 KiB SET on a follower, the worst of both (INFO counters; received into its pool)", v, "= 0", crate::Goal::at_most(0.0), "counters of the members"),
        None => Headline::not_run("kv-replicated value bytes copied per 1 KiB SET on a follower, the worst of both (INFO counters; received into its pool)", "= 0", &reason("value_bytes_copied_per_set_follower")),
    });
    let via = "kv-replicated value bytes copied per 1 KiB SET through a follower, on the leader and the other follower, the worse (INFO counters; the serving follower copies it once, into its forward)";
    out.push(match metric(results, VIA_FOLLOWER, CLUSTER, "bytes_per_set", None) {
        Some(v) => Headline::measured(via, v, "= 0", crate::Goal::at_most(0.0), "counters of the members"),
        None => Headline::not_run(via, "= 0", &reason(VIA_FOLLOWER)),
    });
    out.push(match metric(results, "failover", CLUSTER, "failover_ms_p50", None) {
        Some(v) => Headline::measured("kv-replicated failover under load, p50: kill -9 of the leader to the next committed +OK (ms)", v, "<= 1000 ms (information)", crate::Goal::at_most(1000.0), "kills in one run").in_unit("ms").for_information(),
        None => Headline::not_run("kv-replicated failover under load, p50: kill -9 of the leader to the next committed +OK (ms)", "<= 1000 ms (information)", &reason("failover")),
    });
    out.push(match metric(results, "failover", CLUSTER, "failover_ms_max", None) {
        Some(v) => Headline::measured("kv-replicated failover under load, max (ms)", v, "<= 1000 ms (information)", crate::Goal::at_most(1000.0), "kills in one run").in_unit("ms").for_information(),
        None => Headline::not_run("kv-replicated failover under load, max (ms)", "<= 1000 ms (information)", &reason("failover")),
    });
    out.push(match metric(results, "catch_up", CLUSTER, "catch_up_mb_per_s", None) {
        Some(v) => Headline::measured("kv-replicated new member's catch-up rate from a snapshot (MB/s of keyspace)", v, "information", crate::Goal::at_least(0.0), "pmwire smr add under load").in_unit("MB/s").for_information(),
        None => Headline::not_run("kv-replicated new member's catch-up rate from a snapshot (MB/s of keyspace)", "information", &reason("catch_up")),
    });
    // The members' loops through the add: the snapshot the add takes is
    // taken in steps, so no loop stands still past an election timeout.
    let gap_name = "kv-replicated longest turn gap of the first three members through a new member's add (ms; elections after 100-200 ms)";
    out.push(match metric(results, "catch_up", CLUSTER, "max_turn_gap_ms", None) {
        Some(v) => Headline::measured(gap_name, v, "<= 100 ms (information)", crate::Goal::at_most(100.0), "pmwire smr add under load").in_unit("ms").for_information(),
        None => Headline::not_run(gap_name, "<= 100 ms (information)", &reason("catch_up")),
    });
    let terms_name = "kv-replicated Raft term changes through a new member's add";
    out.push(match metric(results, "catch_up", CLUSTER, "term_changes", None) {
        Some(v) => Headline::measured(terms_name, v, "= 0 (information)", crate::Goal::at_most(0.0), "pmwire smr add under load").for_information(),
        None => Headline::not_run(terms_name, "= 0 (information)", &reason("catch_up")),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Verdict;

    fn lat(bench: &str, v: &str, us: f64) -> BenchResult {
        BenchResult::new(bench, v).metric("latency_ns_p50", us * 1e3).metric("latency_ns_p99", us * 2e3)
    }

    fn ops(v: &str, k: f64) -> BenchResult {
        BenchResult::new(SET64_OPS, v).metric("throughput_ops_per_s", k * 1e3).param("clients", 64)
    }

    #[test]
    fn medians_take_the_middle_round() {
        let rows = vec![lat(SET64, CLUSTER, 30.0), lat(SET64, CLUSTER, 10.0), lat(SET64, CLUSTER, 20.0), lat(SET64, SINGLE, 5.0)];
        let m = medians(&rows);
        assert_eq!(m.len(), 2);
        let c = m.iter().find(|r| r.variant == CLUSTER).unwrap();
        assert_eq!(c.get("latency_ns_p50"), Some(20_000.0));
        assert_eq!(c.params["rounds"], 3);
    }

    #[test]
    fn headlines_pass_fail_and_say_not_run() {
        let results = vec![
            lat(SET64, CLUSTER, 60.0),
            lat(SET64, raw_floor::VARIANT, 50.0),
            lat(SET64, Peer::RedisWait.name(), 100.0),
            ops(CLUSTER, 60.0),
            ops(SINGLE, 100.0),
            ops(Peer::RedisWait.name(), 30.0),
        ];
        let skipped = vec![Skipped::new("value_bytes_copied_per_set", CLUSTER, "no counter")];
        let h = headlines(&results, &skipped);
        let find = |s: &str| h.iter().find(|x| x.name.contains(s)).unwrap();
        assert_eq!(find("pmwire 3 members / raw TCP floor").verdict(), Verdict::Pass, "1.2x <= 1.5x");
        assert!(find("single-node pmwire kv / raw TCP floor").not_run_reason().is_some(), "no single-node p50: not run");
        assert_eq!(find("p50, 1 client: pmwire 3 members / Redis").verdict(), Verdict::Pass);
        assert_eq!(find("at 64 clients: pmwire 3 members / Redis").verdict(), Verdict::Fail, "2x < 3x");
        assert_eq!(find("/ single-node").verdict(), Verdict::Pass, "0.6x >= 0.5x");
        assert_eq!(find("p50, 1 client: pmwire 3 members / etcd").not_run_reason(), Some("a side did not run"), "etcd missing: never a pass");
        assert_eq!(find("bytes copied per 1 KiB SET on the leader").not_run_reason(), Some("no counter"));
        assert!(find("bytes copied per 1 KiB SET on a follower").not_run_reason().is_some(), "no follower row: not run");
        assert!(find("SET through a follower, on the leader").not_run_reason().is_some(), "no via-follower row: not run");
        assert!(find("catch-up").not_run_reason().is_some(), "no catch_up row: not run");
        assert!(find("turn gap").not_run_reason().is_some() && find("term changes").not_run_reason().is_some());
        let add = BenchResult::new("catch_up", CLUSTER).metric("catch_up_mb_per_s", 50.0).metric("term_changes", 1.0).metric("max_turn_gap_ms", 120.0);
        let h = headlines(&[add], &[]);
        let find = |s: &str| h.iter().find(|x| x.name.contains(s)).unwrap();
        assert_eq!((find("turn gap").value, find("term changes").value), (120.0, 1.0));
    }

    #[test]
    fn a_round_plan_splits_latency_and_sweeps_only_when_asked() {
        let run = RunPlan::quick();
        assert_eq!(run.round(false).clients, Vec::<usize>::new());
        assert_eq!(run.round(true).clients, run.plan.clients);
        assert_eq!(run.round(true).latency_puts, run.plan.latency_puts.div_ceil(run.rounds));
    }
}
