//! What the remote suites share: a server on its own thread (it blocks when
//! idle), clients, latency percentiles, and writing the suite file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use pmem::Region;
use pmwire_remote::client::{Client, ClientOptions};
use pmwire_remote::event_loop::{register_data_area, serve, PollBudget};
use pmwire_remote::pool::PoolConfig;
use pmwire_remote::proto::Guarantee;
use pmwire_remote::server::{Server, ServerConfig};
use transport::UcxTransport;

use super::server::{shm_path, ucx_config};
use crate::schema::{BenchResult, Skipped, SuiteFile};
use crate::{table, Goal, Headline, SuiteReport};

/// The transports every remote suite runs over.
pub const TRANSPORTS: [&str; 2] = ["tcp", "sm"];

/// A server thread over UCX on an emulated pool under /dev/shm.
pub struct ServerThread {
    /// Its listener.
    pub addr: std::net::SocketAddr,
    /// Region id and key.
    pub creds: (u32, u64),
    /// Both ends have one-sided access on.
    one_sided: bool,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pool: PathBuf,
}

impl ServerThread {
    /// Starts a server over `tls` with a copy engine of `copy_depth`, and
    /// one-sided access on (the suites measure the one-sided methods).
    pub fn start(tls: &str, size_bytes: u64, copy_depth: usize, log_area_bytes: u64) -> Result<ServerThread> {
        ServerThread::start_with(tls, size_bytes, copy_depth, log_area_bytes, true)
    }

    /// [`start`](ServerThread::start), with one-sided access on or off
    /// (off: as `pmwire serve` runs by default; its clients are off too).
    pub fn start_with(tls: &str, size_bytes: u64, copy_depth: usize, log_area_bytes: u64, one_sided: bool) -> Result<ServerThread> {
        let config = ServerConfig { copy_depth, copy_threads: 1, ..ServerConfig::default() };
        ServerThread::start_configured(tls, size_bytes, log_area_bytes, one_sided, config, "remote")
    }

    /// [`start_with`](ServerThread::start_with) with a whole server
    /// configuration, on a pool named after `name` (servers running at
    /// once need different names).
    pub fn start_configured(
        tls: &str,
        size_bytes: u64,
        log_area_bytes: u64,
        one_sided: bool,
        server_config: ServerConfig,
        name: &str,
    ) -> Result<ServerThread> {
        let pool = shm_path(&format!("{name}-{tls}.pool"));
        let _ = std::fs::remove_file(&pool);
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let (tls_owned, path, stop2) = (tls.to_string(), pool.clone(), stop.clone());
        let thread = std::thread::Builder::new().name("pmwire-server".into()).spawn(move || {
            let started = (|| -> Result<_> {
                let region = Region::create(&path, size_bytes)?;
                let config = PoolConfig { region_id: 1, dir_slots: 64, log_area_bytes };
                let mut server = Server::format(region, config, server_config)?;
                let mut t = UcxTransport::new(&ucx_config(&tls_owned, true, one_sided)?)?;
                let addr = t.listen("127.0.0.1:0".parse()?)?;
                register_data_area(&mut server, &mut t)?;
                Ok((server, t, addr))
            })();
            match started {
                Ok((mut server, mut t, addr)) => {
                    tx.send(Ok((addr, server.credentials()))).expect("starter waits");
                    serve(&mut server, &mut t, &stop2);
                }
                Err(e) => tx.send(Err(e)).expect("starter waits"),
            }
        })?;
        let (addr, creds) = rx.recv_timeout(Duration::from_secs(30)).map_err(|_| anyhow!("server start timed out"))??;
        Ok(ServerThread { addr, creds, one_sided, stop, thread: Some(thread), pool })
    }

    /// A client over `tls` asking for `required`, polling as [`PollBudget::default`] allows.
    pub fn client(&self, tls: &str, required: Guarantee, window: usize) -> Result<Client<UcxTransport>> {
        self.client_polling(tls, required, window, PollBudget::default())
    }

    /// [`client`](ServerThread::client) with the poll budget of its waits.
    pub fn client_polling(&self, tls: &str, required: Guarantee, window: usize, poll: PollBudget) -> Result<Client<UcxTransport>> {
        let t = UcxTransport::new(&ucx_config(tls, true, self.one_sided)?)?;
        let options = ClientOptions { window, payload_crc: false, required, timeout: Duration::from_secs(30), poll };
        Client::connect_with(t, &self.addr, self.creds.0, self.creds.1, options).context("connect")
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.pool);
    }
}

/// p50, p99, p99.9 of latency samples (ns) as result metrics.
pub fn latency_result(bench: &str, variant: &str, size: u64, samples: &mut [u64]) -> BenchResult {
    samples.sort_unstable();
    let pct = |p: f64| crate::measure::percentile(samples, p) as f64;
    BenchResult::new(bench, variant)
        .size(size)
        .metric("latency_ns_p50", pct(50.0))
        .metric("latency_ns_p99", pct(99.0))
        .metric("latency_ns_p99_9", pct(99.9))
}

/// A ratio headline: pass if `value <= max` (or `>= min` when `at_least`).
pub fn ratio(name: &str, value: Option<f64>, target: f64, at_least: bool, peer: &str) -> Headline {
    let target_text = if at_least { format!(">= {target}x") } else { format!("<= {target}x") };
    let goal = if at_least { Goal::at_least(target) } else { Goal::at_most(target) };
    match value {
        Some(v) if v.is_finite() => Headline::measured(name, v, &target_text, goal, peer),
        _ => Headline { goal: Some(goal), ..Headline::not_run(name, &target_text, "a side did not run") },
    }
}

/// Writes the suite's JSON, prints its table and headlines.
pub fn finish(
    suite: &str,
    out_dir: &Path,
    parameters: serde_json::Value,
    results: Vec<BenchResult>,
    skipped: Vec<Skipped>,
    headlines: Vec<Headline>,
) -> Result<SuiteReport> {
    finish_with_peers(suite, out_dir, parameters, serde_json::json!({}), results, skipped, headlines)
}

/// The `peers` entry of a suite that ran `ucx_perftest`: its version, as
/// `ucx_info -v` states it.
pub fn perftest_peer() -> serde_json::Value {
    let version = std::process::Command::new("ucx_info")
        .arg("-v")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).lines().next().map(|l| l.trim_start_matches("# ").to_string()));
    serde_json::json!({ "ucx_perftest": version.unwrap_or_else(|| "ucx_info not found".into()) })
}

/// [`finish`] with the suite's `peers` entry.
pub fn finish_with_peers(
    suite: &str,
    out_dir: &Path,
    parameters: serde_json::Value,
    peers: serde_json::Value,
    results: Vec<BenchResult>,
    skipped: Vec<Skipped>,
    headlines: Vec<Headline>,
) -> Result<SuiteReport> {
    std::fs::create_dir_all(out_dir)?;
    let json_path = out_dir.join(format!("{suite}-{}.json", crate::machine::utc_stamp()));
    let file = SuiteFile {
        suite: suite.to_string(),
        pmwire_version: env!("CARGO_PKG_VERSION").to_string(),
        machine: crate::machine::describe(None),
        parameters,
        peers,
        results,
        skipped,
        headlines: headlines.clone(),
    };
    std::fs::write(&json_path, serde_json::to_string_pretty(&file)? + "\n")?;
    print!("{}", table::results_text(&file.results, &file.skipped));
    println!();
    crate::print_headlines(&headlines);
    Ok(SuiteReport { suite: suite.to_string(), json_path, headlines })
}

/// What every remote suite prints about the two cores.
pub const CORES_NOTE: &str = "server and client are two threads of one process on a 2-core machine; both poll for at most \
     30 us after activity, then block (wake-up latency included when idle longer), except the ping-pong probes and ucx_perftest, which busy-poll both sides and share the 2 cores";
