//! `pmwire bench log-server`: the networked persistent log server of seed
//! 000 §6.4 / Fig 9. ONE server thread (the ordinary serve loop) appends to
//! an `AppendLog` in its pool; 1, 2, 4 or 8 client threads, each with its own
//! UCX worker and connection, keep 32 LOG_APPENDs outstanding each. Entries
//! 64 B to 2 KB; tail strategies naive, rotating (10 × 256 B) and
//! self-validating. Appends/s over the whole cell (first submit to last
//! reply, all clients), the median of rounds that interleave the strategies.
//!
//! The clients block as soon as nothing is ready ([`PollBudget::BLOCK`]):
//! with 32 appends in flight a wake-up is hidden, and up to 8 polling
//! clients on 2 cores would take the server thread's CPU (measured: tcp,
//! 8 clients, 256 B: ~105k appends/s polling vs ~135-160k blocking). The
//! server polls with the default budget.
//!
//! One log per strategy; between cells the control client truncates it to
//! its tail (an O(1) head persist), so every cell starts on an empty ring
//! and a cell never appends more than fits.

use std::path::PathBuf;
use std::sync::Barrier;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use pmwire_log::{LogConfig, TailStrategy};
use pmwire_remote::event_loop::PollBudget;
use pmwire_remote::proto::Guarantee;

use super::common::{finish, ratio, ServerThread, CORES_NOTE, TRANSPORTS};
use crate::schema::BenchResult;
use crate::SuiteReport;

/// The bench name in results (suffixed with the transport and client count).
pub const BENCH: &str = "log_server";

/// Appends each client keeps in flight (seed 000 §6.4).
pub const OUTSTANDING: usize = 32;

/// How the suite runs.
#[derive(Clone, Debug)]
pub struct LogServerOptions {
    /// Short run: 256 B and 2 KB entries, 1 and 8 clients.
    pub quick: bool,
    /// Transports: a subset of [`TRANSPORTS`].
    pub transports: Vec<String>,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
    /// Appends per cell and round instead of the mode's default (tests use tiny counts).
    pub appends_per_cell: Option<u64>,
    /// Rounds per cell instead of the mode's default (the median is reported).
    pub rounds: Option<usize>,
}

const SIZES: [u64; 4] = [64, 256, 1024, 2048];
const SIZES_QUICK: [u64; 2] = [256, 2048];
const CLIENTS: [usize; 4] = [1, 2, 4, 8];
const CLIENTS_QUICK: [usize; 2] = [1, 8];
const STRATEGIES: [TailStrategy; 3] = [TailStrategy::Naive, TailStrategy::ROTATING_PAPER, TailStrategy::SelfValidating];
/// Appends each client makes before the clock starts.
const WARMUP: u64 = 64;

/// What the suite notes about the pool.
const POOL_NOTE: &str = "the pool is DRAM under /dev/shm (emulated persistent memory): flush + drain cost what they cost \
     on DRAM, so Optane's same-line persist penalty that the rotating and self-validating tails avoid (seed 000 §6) is absent";

/// Runs the suite.
pub fn run(options: &LogServerOptions) -> Result<SuiteReport> {
    let (sizes, clients): (&[u64], &[usize]) = if options.quick { (&SIZES_QUICK, &CLIENTS_QUICK) } else { (&SIZES, &CLIENTS) };
    let capacity: u64 = if options.quick { 32 << 20 } else { 64 << 20 };
    let per_cell = options.appends_per_cell.unwrap_or(if options.quick { 60_000 } else { 150_000 });
    let rounds = options.rounds.unwrap_or(if options.quick { 3 } else { 5 });
    for tls in &options.transports {
        if !TRANSPORTS.contains(&tls.as_str()) {
            bail!("unknown transport {tls} (tcp or sm)");
        }
    }
    println!("log-server: 1 server thread, clients {clients:?} x {OUTSTANDING} outstanding, entries {sizes:?} B, up to {per_cell} appends per cell and round, median of {rounds} rounds (strategies interleaved); {CORES_NOTE}; {POOL_NOTE}");
    let mut results = Vec::new();
    let mut headlines = Vec::new();
    for tls in &options.transports {
        let log_area = STRATEGIES.len() as u64 * (capacity + (1 << 20));
        let server = ServerThread::start(tls, log_area + (8 << 20), 0, log_area)?;
        let mut control = server.client(tls, Guarantee::Persistence, OUTSTANDING)?;
        let mut logs = Vec::new();
        for strategy in STRATEGIES {
            let config = LogConfig::new(capacity, strategy);
            logs.push((strategy, config, control.log_create(strategy.name().as_bytes(), &config).context("log_create")?));
        }
        for &size in sizes {
            for &n in clients {
                // Rounds interleave the strategies, so each sees the same
                // conditions (the 2 cores are shared with other work).
                let mut rates = vec![Vec::new(); STRATEGIES.len()];
                for _ in 0..rounds {
                    for (i, (strategy, config, log)) in logs.iter().enumerate() {
                        // Leave a tenth of the ring free: a cell never meets LogFull.
                        let fit = capacity * 9 / 10 / config.entry_size(size);
                        let per_client = (per_cell.min(fit) / n as u64).saturating_sub(WARMUP).max(1);
                        let cell = run_cell(&server, tls, *log, size, n, per_client)
                            .with_context(|| format!("{tls} {} {size} B {n} clients", strategy.name()))?;
                        control.log_truncate(*log, cell.max_lsn + 1).context("log_truncate")?;
                        rates[i].push((cell.appends as f64 / cell.secs, cell.appends));
                    }
                }
                for ((strategy, _, _), mut r) in logs.iter().zip(rates) {
                    r.sort_by(|a, b| a.0.total_cmp(&b.0));
                    results.push(
                        BenchResult::new(&format!("{BENCH}_{tls}_{n}_clients"), strategy.name())
                            .size(size)
                            .param("transport", tls.as_str())
                            .param("clients", n as u64)
                            .param("outstanding_per_client", OUTSTANDING as u64)
                            .param("appends_per_round", r[0].1)
                            .param("rounds", rounds as u64)
                            .metric("appends_per_s", r[r.len() / 2].0)
                            .metric("appends_per_s_min", r[0].0)
                            .metric("appends_per_s_max", r[r.len() - 1].0),
                    );
                }
            }
        }
        drop((control, server));
        headlines.extend(log_headlines(tls, &results, clients));
    }
    let parameters = serde_json::json!({
        "command": command(options), "sizes": sizes, "clients": clients, "outstanding_per_client": OUTSTANDING,
        "log_capacity_bytes": capacity, "appends_per_cell_max": per_cell, "rounds": rounds, "warmup_per_client": WARMUP,
        "strategies": ["naive", "rotating 10 x 256 B", "self-validating"], "transports": options.transports,
        "quick_subset": options.quick.then_some("entries 256 B and 2 KB, 1 and 8 clients"),
        "note": format!("{CORES_NOTE}; the clients and the server share the 2 cores; clients block at once (PollBudget::BLOCK), the server polls up to 30 us after activity; {POOL_NOTE}"),
    });
    finish("log-server", &options.out_dir, parameters, results, Vec::new(), headlines)
}

fn command(options: &LogServerOptions) -> String {
    let mut c = String::from("pmwire bench log-server");
    if options.quick {
        c.push_str(" --quick");
    }
    if options.transports.len() == 1 {
        c.push_str(&format!(" --tls {}", options.transports[0]));
    }
    c
}

/// The ≥ 1.3× headline at 256 B with the most clients (8 in every mode),
/// and the rotating tail's ratio for information.
fn log_headlines(tls: &str, results: &[BenchResult], clients: &[usize]) -> Vec<crate::Headline> {
    let most = *clients.iter().max().expect("some client counts") as u64;
    let rate = |strategy: &str| {
        results
            .iter()
            .find(|r| r.variant == strategy && r.size_bytes == Some(256) && r.params["transport"] == tls && r.params["clients"] == most)
            .and_then(|r| r.get("appends_per_s"))
    };
    let over_naive = |s: &str| rate(s).zip(rate("naive")).map(|(a, b)| a / b);
    vec![
        ratio(&format!("{tls}: self-validating / naive appends/s, 256 B, {most} clients"), over_naive("self-validating"), 1.3, true, "naive tail, same run"),
        ratio(&format!("{tls}: rotating / naive appends/s, 256 B, {most} clients (information)"), over_naive("rotating"), 1.3, true, "naive tail, same run").for_information(),
    ]
}

/// What one cell measured.
struct Cell {
    appends: u64,
    secs: f64,
    max_lsn: u64,
}

/// `n` client threads, each connecting, warming up, then (all together)
/// making `per_client` appends with [`OUTSTANDING`] in flight.
fn run_cell(server: &ServerThread, tls: &str, log: u64, size: u64, n: usize, per_client: u64) -> Result<Cell> {
    let barrier = Barrier::new(n + 1);
    let entry = vec![0x5au8; size as usize];
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..n)
            .map(|_| {
                let (barrier, entry) = (&barrier, &entry);
                scope.spawn(move || -> Result<u64> {
                    let ready = server.client_polling(tls, Guarantee::Persistence, OUTSTANDING, PollBudget::BLOCK).and_then(|mut client| {
                        let lsn = append_pipelined(&mut client, log, entry, WARMUP)?;
                        Ok((client, lsn))
                    });
                    // Every thread reaches the barrier, ready or not.
                    barrier.wait();
                    let (mut client, warm_lsn) = ready?;
                    let lsn = append_pipelined(&mut client, log, entry, per_client)?;
                    Ok(lsn.max(warm_lsn))
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut max_lsn = 0;
        for t in threads {
            max_lsn = max_lsn.max(t.join().map_err(|_| anyhow!("client thread panicked"))??);
        }
        let secs = start.elapsed().as_secs_f64();
        Ok(Cell { appends: per_client * n as u64, secs, max_lsn })
    })
}

/// Makes `count` appends keeping [`OUTSTANDING`] in flight; the largest LSN.
fn append_pipelined(client: &mut pmwire_remote::client::Client<transport::UcxTransport>, log: u64, entry: &[u8], count: u64) -> Result<u64> {
    let (mut issued, mut acked, mut max_lsn) = (0u64, 0u64, 0u64);
    while acked < count {
        while issued < count && issued - acked < OUTSTANDING as u64 {
            client.submit_log_append(log, entry)?;
            issued += 1;
        }
        let (_, result) = client.wait_any()?;
        max_lsn = max_lsn.max(result.context("log append")?);
        acked += 1;
    }
    Ok(max_lsn)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tiny counts over tcp: every strategy and client count runs, the JSON
    /// is written and the headlines are computed (never asserted on: timing).
    #[test]
    fn log_server_smoke_runs_every_cell() {
        let dir = tempfile::tempdir().unwrap();
        let options = LogServerOptions {
            quick: true,
            transports: vec!["tcp".into()],
            out_dir: dir.path().to_path_buf(),
            appends_per_cell: Some(200),
            rounds: Some(1),
        };
        let report = run(&options).unwrap();
        assert!(report.json_path.exists());
        assert_eq!(report.headlines.len(), 2);
        let file: serde_json::Value = serde_json::from_slice(&std::fs::read(&report.json_path).unwrap()).unwrap();
        let results = file["results"].as_array().unwrap();
        assert_eq!(results.len(), STRATEGIES.len() * SIZES_QUICK.len() * CLIENTS_QUICK.len());
        assert!(results.iter().all(|r| r["appends_per_s"].as_f64().unwrap() > 0.0), "{results:?}");
    }
}
