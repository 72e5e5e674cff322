//! `pmwire bench kv-replicated-crash --runs N [--seed S]` (issue 26): in
//! each run a fresh 3-member group takes RESP load from 3 clients spread
//! over the members (so through followers and the leader): SET and GET on
//! 4 shared keys, INCR on a counter per client, and MULTI/EXEC bursts that
//! set two keys to the same value. A third of the way in, one member
//! (the leader in even runs, a follower in odd ones) gets SIGKILL and is
//! restarted on its pool. After the load the survivors' reads close the
//! history, and the run is checked ([`check`]):
//!
//! - every history linearizable per key (`lincheck::redis`; a final GET
//!   that misses an acknowledged SET fails it, so it finds lost writes);
//! - each counter's final value is at least its acknowledged INCRs and
//!   at most those plus the INCRs whose outcome the client never learned;
//! - each MULTI/EXEC pair holds the same value (no EXEC half-applied).
//!
//! An operation answered with an error or cut off is "unknown" (it may or
//! may not have happened): `ret: None` in the history. Every campaign ends
//! with a canary: a lost write planted into a real run's history, which
//! [`check`] must catch, or the campaign fails.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use lincheck::redis::{first_violation, Input, Output, RedisOp};
use pmwire_resp::client::Value;

use super::members::{Members, Resp, MEMBERS};
use crate::remote::common::ratio;
use crate::schema::BenchResult;
use crate::{Headline, SuiteReport};

/// The suite's name.
pub const SUITE: &str = "kv_replicated_crash";
/// Shared SET/GET keys.
const KEYS: u64 = 4;
/// Clients.
const CLIENTS: usize = 3;

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

/// Every problem in `h`, as text (empty: the run passed).
pub fn check(h: &History) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(key) = first_violation(&h.ops) {
        problems.push(format!("history of key {} is not linearizable (a lost or phantom write)", String::from_utf8_lossy(&key)));
    }
    for (key, acked, unknown, last) in &h.counters {
        let k = String::from_utf8_lossy(key);
        match last {
            None => problems.push(format!("counter {k}: final value unread")),
            Some(v) if *v < 0 || (*v as u64) < *acked => problems.push(format!("counter {k} = {v}, but {acked} INCRs were acknowledged: a lost INCR")),
            Some(v) if *v as u64 > acked + unknown => problems.push(format!("counter {k} = {v} > {acked} acknowledged + {unknown} unknown INCRs: an INCR applied twice")),
            Some(_) => {}
        }
    }
    for (key, a, b) in &h.pairs {
        if a != b {
            problems.push(format!("MULTI/EXEC pair {}: {a:?} != {b:?}, an EXEC half-applied", String::from_utf8_lossy(key)));
        }
    }
    problems
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
        Value::Bulk(b) => Some(Output::Bulk(Some(b.clone()))),
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

/// Client `c`: random operations until `stop`, through member
/// `(c + attempt) % 3`, reconnecting to the next member after any error.
fn client(c: usize, addrs: &[SocketAddr], seed: u64, epoch: Instant, stop: &AtomicBool) -> ClientLog {
    let mut rng = Rng(seed ^ (c as u64).wrapping_mul(0x1000_0001));
    let mut log = ClientLog::default();
    let (mut member, mut conn): (usize, Option<Resp>) = (c % MEMBERS, None);
    let now = || epoch.elapsed().as_nanos() as u64;
    let (counter, pair_a, pair_b) = (format!("ctr{c}").into_bytes(), format!("m{c}a").into_bytes(), format!("m{c}b").into_bytes());
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if conn.is_none() {
            conn = Resp::connect(addrs[member]).ok();
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
                let (k, v) = (key(rng.next() % KEYS), format!("{c}:{seq}").into_bytes());
                let r = c_.command(&[b"SET", &k, &v]);
                (k, Input::Set(v), r)
            }
            4..=6 => {
                let k = key(rng.next() % KEYS);
                let r = c_.command(&[b"GET", &k]);
                (k, Input::Get, r)
            }
            7 | 8 => {
                let r = c_.command(&[b"INCR", &counter]);
                match &r {
                    Ok(Value::Integer(_)) => log.incr_acked += 1,
                    _ => log.incr_unknown += 1,
                }
                (counter.clone(), Input::Incr, r)
            }
            _ => {
                let v = seq.to_string().into_bytes();
                let burst = (|| -> Result<Value> {
                    c_.command(&[b"MULTI"])?;
                    c_.command(&[b"SET", &pair_a, &v])?;
                    c_.command(&[b"SET", &pair_b, &v])?;
                    c_.command(&[b"EXEC"])
                })();
                if burst.is_err() {
                    conn = None;
                    member = (member + 1) % MEMBERS;
                }
                continue;
            }
        };
        let refused = matches!(&result, Ok(Value::Error(e)) if not_executed(e));
        let ret = result.ok().and_then(|v| output(&v)).map(|o| (now(), o));
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
                continue;
            }
        }
        log.ops.push(RedisOp { key: k, call, ret, input });
    }
    log
}

/// An error reply that says the command was never proposed: a follower's
/// refusal (`-READONLY`, it forwards nothing) or a member that knows no
/// leader. Other errors (leadership lost, no majority in time, a cut
/// connection) leave the outcome unknown.
fn not_executed(error: &[u8]) -> bool {
    error.starts_with(b"READONLY ") || error.starts_with(b"CLUSTERDOWN The cluster is down: no leader is elected")
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
    /// Kill to the first acknowledged write called after it.
    pub failover_ms: Option<f64>,
    /// The problems [`check`] found, or why the run could not run.
    pub problems: Vec<String>,
    /// The history (for the canary).
    pub history: History,
}

/// One run: fresh members, load, a kill -9 and a restart, final reads, checks.
pub fn one_run(options: &CrashOptions, run: usize) -> RunRecord {
    let seed = options.seed.wrapping_add(run as u64);
    let killed_leader = run % 2 == 0;
    let mut record = RunRecord { run, killed_leader, ops: 0, failover_ms: None, problems: Vec::new(), history: History::default() };
    if let Err(e) = drive(options, seed, &mut record) {
        record.problems.push(format!("run could not complete: {e:#}"));
    }
    record
}

fn drive(options: &CrashOptions, seed: u64, record: &mut RunRecord) -> Result<()> {
    let mut members = Members::start(&options.exe, &format!("crash{}", record.run), "256M", &options.transport)?;
    let leader = members.leader(Duration::from_secs(20))?;
    let victim = if record.killed_leader { leader } else { leader % MEMBERS + 1 };
    let (epoch, stop) = (Instant::now(), AtomicBool::new(false));
    let addrs = members.resp.clone();
    let mut killed_at = 0u64;
    let logs: Vec<ClientLog> = std::thread::scope(|s| -> Result<Vec<ClientLog>> {
        let handles: Vec<_> = (0..CLIENTS).map(|c| {
            let (addrs, stop) = (&addrs, &stop);
            s.spawn(move || client(c, addrs, seed, epoch, stop))
        }).collect();
        std::thread::sleep(options.load / 3);
        killed_at = epoch.elapsed().as_nanos() as u64;
        members.kill(victim);
        std::thread::sleep(options.load / 6);
        let restarted = members.restart(victim);
        std::thread::sleep(options.load / 2);
        stop.store(true, Ordering::Relaxed);
        let logs = handles.into_iter().map(|h| h.join().expect("a client thread panicked")).collect();
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
    record.problems = check(&h);
    record.history = h;
    Ok(())
}

/// After the load: GETs of every key through the leader, added to `h`.
fn final_reads(members: &Members, epoch: Instant, h: &mut History) -> Result<()> {
    let leader = members.leader(Duration::from_secs(20))?;
    let mut c = Resp::connect(members.resp[leader - 1])?;
    let mut get = |k: &[u8]| -> Result<Option<Vec<u8>>> {
        match c.command(&[b"GET", k])? {
            Value::Bulk(b) => Ok(Some(b)),
            Value::NilBulk | Value::Null => Ok(None),
            other => bail!("GET answered {other:?}"),
        }
    };
    let now = || epoch.elapsed().as_nanos() as u64;
    for i in 0..KEYS {
        let call = now();
        let v = get(&key(i))?;
        h.ops.push(RedisOp { key: key(i), call, ret: Some((now(), Output::Bulk(v))), input: Input::Get });
    }
    for (k, _, _, last) in &mut h.counters {
        let call = now();
        let v = get(k)?;
        *last = v.as_deref().map_or(Some(0), |b| lincheck::redis::parse_i64(b));
        h.ops.push(RedisOp { key: k.clone(), call, ret: Some((now(), Output::Bulk(v))), input: Input::Get });
    }
    for c in 0..CLIENTS {
        let (a, b) = (format!("m{c}a").into_bytes(), format!("m{c}b").into_bytes());
        let pair = (get(&a)?, get(&b)?);
        h.pairs.push((a, pair.0, pair.1));
    }
    Ok(())
}

fn percentile(xs: &mut [f64], p: f64) -> Option<f64> {
    xs.sort_by(f64::total_cmp);
    let i = ((xs.len() as f64 - 1.0) * p).round() as usize;
    xs.get(i).copied()
}

/// Runs the campaign: its JSON, table and headlines, and whether it passed.
pub fn run(options: &CrashOptions) -> Result<(SuiteReport, bool)> {
    let progress = crate::measure::Progress::new(options.runs as u64, true);
    let mut records = Vec::new();
    for run in 0..options.runs {
        progress.stage(&format!("run {}/{}", run + 1, options.runs));
        let r = one_run(options, run);
        for p in &r.problems {
            eprintln!("kv-replicated-crash run {run} (seed {:#x}): {p}", options.seed.wrapping_add(run as u64));
        }
        records.push(r);
        progress.step();
    }
    progress.finish();
    crate::smr::links::remove_secret_file();
    let canary = records.iter().find_map(|r| plant_lost_write(&r.history)).map(|h| !check(&h).is_empty());
    let failed = records.iter().filter(|r| !r.problems.is_empty()).count();
    let results: Vec<BenchResult> = records
        .iter()
        .map(|r| {
            let mut row = BenchResult::new(SUITE, &format!("run_{}", r.run)).metric("ops", r.ops as f64).metric("problems", r.problems.len() as f64).param("killed", if r.killed_leader { "leader" } else { "follower" }).param("problems_text", r.problems.clone());
            if let Some(ms) = r.failover_ms {
                row = row.metric("failover_ms", ms);
            }
            row
        })
        .collect();
    let mut failovers: Vec<f64> = records.iter().filter_map(|r| r.failover_ms).collect();
    let info = |name: &str, v: Option<f64>| match v {
        Some(v) => Headline::measured(name, v, "<= 1000 ms (information)", crate::Goal::at_most(1000.0), "this campaign").in_unit("ms").for_information(),
        None => Headline::not_run(name, "<= 1000 ms (information)", "no leader kill with a write after it"),
    };
    let heads = vec![
        ratio("kv-replicated-crash runs with a lost write, a wrong INCR count, a half EXEC or a non-linearizable history", Some(failed as f64), 0.0, false, "every run's checks"),
        match canary {
            Some(caught) => ratio("kv-replicated-crash canary: planted lost write caught (1 = caught)", Some(f64::from(u8::from(caught))), 1.0, true, "a real run's history with a lost write planted"),
            None => Headline::not_run("kv-replicated-crash canary: planted lost write caught (1 = caught)", ">= 1", "no run acknowledged a SET"),
        },
        info("kv-replicated-crash failover p50 (ms): kill -9 of the leader to the next acknowledged write", percentile(&mut failovers, 0.5)),
        info("kv-replicated-crash failover max (ms)", percentile(&mut failovers, 1.0)),
        Headline::not_run("kv-replicated-crash partition heal to next committed write (ms)", "<= 1000", "--netns partitions are not built in this campaign yet"),
    ];
    let parameters = serde_json::json!({
        "runs": options.runs, "seed": format!("{:#x}", options.seed), "load_ms": options.load.as_millis() as u64,
        "clients": CLIENTS, "keys": KEYS, "peer_transport": options.transport,
        "faults": "kill -9 of the leader (even runs) or a follower (odd runs) a third of the way in, restarted on its pool",
    });
    let passed = failed == 0 && canary == Some(true);
    let report = crate::remote::common::finish(SUITE, &options.out_dir, parameters, results, Vec::new(), heads)?;
    Ok((report, passed))
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
        assert_eq!(check(&good()), Vec::<String>::new());
    }

    #[test]
    fn a_planted_lost_write_fails() {
        let planted = plant_lost_write(&good()).unwrap();
        let problems = check(&planted);
        assert!(problems.iter().any(|p| p.contains("not linearizable")), "{problems:?}");
    }

    #[test]
    fn wrong_counts_and_half_execs_fail() {
        let mut h = good();
        h.counters[0].3 = Some(2);
        assert!(check(&h).iter().any(|p| p.contains("lost INCR")));
        h.counters[0].3 = Some(5);
        assert!(check(&h).iter().any(|p| p.contains("applied twice")));
        h.counters[0].3 = Some(4);
        h.pairs[0].2 = None;
        assert!(check(&h).iter().any(|p| p.contains("half-applied")));
        h.pairs[0].2 = Some(b"7".to_vec());
        h.counters[0].3 = None;
        assert!(check(&h).iter().any(|p| p.contains("unread")));
    }

    #[test]
    fn replies_become_outputs() {
        assert_eq!(output(&Value::Simple(b"OK".to_vec())), Some(Output::Ok));
        assert_eq!(output(&Value::NilBulk), Some(Output::Bulk(None)));
        assert_eq!(output(&Value::Integer(3)), Some(Output::Int(3)));
        assert_eq!(output(&Value::Array(vec![])), None);
    }
}
