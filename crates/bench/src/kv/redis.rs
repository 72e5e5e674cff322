//! The Redis peers of `pmwire bench kv` (seed 001 Fig 8, 9): `redis-server`
//! children in the persistence modes users run, and `redis-benchmark`
//! runs against any RESP server, ours included.
//!
//! Every child gets its own directory (its AOF and RDB files go there),
//! a free loopback port, one I/O thread, and is killed when dropped.
//! Nothing here is timed; the suites time what these start.

use anyhow::{anyhow, bail, Context, Result};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::bound::{output_with_usage, Usage};
use super::placement::Placement;

/// How a `redis-server` peer persists writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// `appendonly yes`, `appendfsync always`: every write is fsynced
    /// before its reply (Redis's durable mode, group-committed per event
    /// loop iteration).
    AppendFsyncAlways,
    /// `appendonly yes`, `appendfsync everysec`: up to a second of writes
    /// can be lost.
    AppendFsyncEverysec,
    /// No AOF, no RDB snapshots: nothing survives a restart.
    Off,
}

impl Persistence {
    /// The variant name used in results.
    pub fn name(self) -> &'static str {
        match self {
            Persistence::AppendFsyncAlways => "redis_aof_always",
            Persistence::AppendFsyncEverysec => "redis_aof_everysec",
            Persistence::Off => "redis_no_persistence",
        }
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            Persistence::AppendFsyncAlways => &["--appendonly", "yes", "--appendfsync", "always"],
            Persistence::AppendFsyncEverysec => &["--appendonly", "yes", "--appendfsync", "everysec"],
            Persistence::Off => &["--appendonly", "no"],
        }
    }
}

/// `redis-server --version`'s version, or why it cannot run.
pub fn server_version() -> Result<String, String> {
    let out = Command::new("redis-server").arg("--version").output();
    let out = out.map_err(|e| format!("redis-server not found ({e}); scripts/setup installs it"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().find_map(|w| w.strip_prefix("v="));
    version.map(|v| format!("redis-server {v}")).ok_or_else(|| format!("unexpected `redis-server --version`: {text}"))
}

/// Whether `redis-benchmark` is on the PATH, or why not.
pub fn benchmark_available() -> Result<(), String> {
    match Command::new("redis-benchmark").arg("--version").output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!("redis-benchmark --version failed: {}", String::from_utf8_lossy(&out.stderr))),
        Err(e) => Err(format!("redis-benchmark not found ({e}); scripts/setup installs redis-tools")),
    }
}

/// A running `redis-server` child, killed on drop.
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
    persistence: Persistence,
}

impl RedisServer {
    /// Starts a server whose files live in a fresh directory under
    /// `parent` (put it on the filesystem being compared), placed on
    /// `placement`'s server CPU, and waits until it answers PING (10 s at
    /// most).
    pub fn start(persistence: Persistence, parent: &Path, placement: &Placement) -> Result<RedisServer> {
        RedisServer::start_with(persistence, parent, placement, persistence.name(), &[])
    }

    /// [`start`](RedisServer::start) with `label` in its directory's name
    /// (so several servers can share `parent`) and `extra` arguments after
    /// the others (e.g. `--replicaof 127.0.0.1 <port>`).
    pub fn start_with(
        persistence: Persistence,
        parent: &Path,
        placement: &Placement,
        label: &str,
        extra: &[String],
    ) -> Result<RedisServer> {
        let dir = parent.join(format!("pmwire-redis-{label}-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let port = crate::ports::listen_port()?;
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--daemonize", "no"])
            .args(["--io-threads", "1", "--protected-mode", "no", "--logfile", "redis.log"])
            .arg("--dir")
            .arg(&dir)
            .args(persistence.args())
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        placement.pin_server(&mut command);
        let child = command.spawn().context("starting redis-server")?;
        let mut server = RedisServer { child, port, dir, persistence };
        server.wait_ready(Duration::from_secs(10))?;
        Ok(server)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where its files are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its persistence mode.
    pub fn persistence(&self) -> Persistence {
        self.persistence
    }

    fn wait_ready(&mut self, limit: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
                bail!("redis-server exited at start ({status}): {}", log.lines().last().unwrap_or(""));
            }
            if ping(self.port).is_ok() {
                return Ok(());
            }
            if start.elapsed() > limit {
                bail!("redis-server on port {} did not answer PING within {limit:?}", self.port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends `PING` in RESP and expects `+PONG`.
pub fn ping(port: u16) -> Result<()> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply)?;
    if &reply != b"+PONG\r\n" {
        bail!("PING answered {:?}", String::from_utf8_lossy(&reply));
    }
    Ok(())
}


/// One `redis-benchmark` invocation.
#[derive(Clone, Debug)]
pub struct BenchmarkConfig {
    /// `-t`: the tests, e.g. `set,get`.
    pub tests: String,
    /// `-d`: value bytes.
    pub value_bytes: usize,
    /// `-c`: parallel connections.
    pub clients: usize,
    /// `-n`: requests per test.
    pub requests: u64,
    /// `-r`: random keys drawn from this many (None: one key, as by default).
    pub keyspace: Option<u64>,
    /// `-P`: requests pipelined per connection.
    pub pipeline: usize,
}

/// One row of `redis-benchmark --csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchmarkRow {
    /// The test, as redis-benchmark names it (`SET`, `GET`).
    pub test: String,
    /// Requests per second.
    pub rps: f64,
    /// Mean latency.
    pub latency_ms_mean: f64,
    /// Median latency.
    pub latency_ms_p50: f64,
    /// 99th percentile latency.
    pub latency_ms_p99: f64,
}

/// What one `redis-benchmark` run reported, and what it cost.
#[derive(Clone, Debug)]
pub struct BenchmarkRun {
    /// One row per test.
    pub rows: Vec<BenchmarkRow>,
    /// redis-benchmark's own CPU time (its `wait4` rusage) over its life.
    pub generator: Usage,
}

/// Runs `redis-benchmark` against `127.0.0.1:port`, on `placement`'s
/// load CPU, and parses its CSV.
pub fn run_benchmark(port: u16, config: &BenchmarkConfig, placement: &Placement) -> Result<BenchmarkRun> {
    let mut command = Command::new("redis-benchmark");
    placement.pin_load(&mut command);
    command
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "--csv", "-t", &config.tests])
        .args(["-d", &config.value_bytes.to_string(), "-c", &config.clients.to_string()])
        .args(["-n", &config.requests.to_string(), "-P", &config.pipeline.to_string()]);
    if let Some(keys) = config.keyspace {
        command.args(["-r", &keys.to_string()]);
    }
    let (out, generator) = output_with_usage(&mut command).context("running redis-benchmark")?;
    if !out.status.success() {
        bail!("redis-benchmark failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    let rows = parse_csv(&String::from_utf8_lossy(&out.stdout))?;
    if rows.is_empty() {
        bail!("redis-benchmark printed no results: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(BenchmarkRun { rows, generator })
}

/// Parses `redis-benchmark --csv` (Redis 7: a header line, then one quoted
/// row per test with rps and latencies in ms).
pub fn parse_csv(text: &str) -> Result<Vec<BenchmarkRow>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<String> = split_row(lines.next().ok_or_else(|| anyhow!("empty redis-benchmark output"))?);
    let column = |name: &str| header.iter().position(|h| h == name).ok_or_else(|| anyhow!("no `{name}` column in {header:?}"));
    let (test, rps, mean, p50, p99) =
        (column("test")?, column("rps")?, column("avg_latency_ms")?, column("p50_latency_ms")?, column("p99_latency_ms")?);
    lines
        .map(|line| {
            let fields = split_row(line);
            let number = |i: usize| -> Result<f64> {
                let field = fields.get(i).ok_or_else(|| anyhow!("short row {line:?}"))?;
                field.parse().with_context(|| format!("field {i} of {line:?}"))
            };
            Ok(BenchmarkRow {
                test: fields.get(test).cloned().ok_or_else(|| anyhow!("short row {line:?}"))?,
                rps: number(rps)?,
                latency_ms_mean: number(mean)?,
                latency_ms_p50: number(p50)?,
                latency_ms_p99: number(p99)?,
            })
        })
        .collect()
}

fn split_row(line: &str) -> Vec<String> {
    line.split(',').map(|f| f.trim().trim_matches('"').to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redis_7_csv() {
        let text = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                    \"SET\",\"57803.47\",\"0.784\",\"0.272\",\"0.743\",\"1.127\",\"1.599\",\"5.919\"\n\
                    \"GET\",\"85178.88\",\"0.302\",\"0.120\",\"0.295\",\"0.351\",\"0.503\",\"2.943\"\n";
        let rows = parse_csv(text).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].test, "SET");
        assert_eq!(rows[0].rps, 57803.47);
        assert_eq!(rows[1].latency_ms_p99, 0.503);
    }

    #[test]
    fn rejects_output_without_columns() {
        assert!(parse_csv("").is_err());
        assert!(parse_csv("\"test\",\"rps\"\n\"SET\",\"1\"\n").is_err());
        let bad = "\"test\",\"rps\",\"avg_latency_ms\",\"p50_latency_ms\",\"p99_latency_ms\"\n\"SET\",\"x\",\"1\",\"1\",\"1\"\n";
        assert!(parse_csv(bad).is_err());
    }

    /// Each persistence mode starts, answers, takes a short redis-benchmark
    /// run, and leaves its AOF (or none) where it was told.
    #[test]
    fn redis_peers_start_and_serve() {
        if let Err(why) = server_version().and(benchmark_available()) {
            println!("skipped: {why}");
            return;
        }
        let parent = tempfile::tempdir().unwrap();
        for persistence in [Persistence::AppendFsyncAlways, Persistence::AppendFsyncEverysec, Persistence::Off] {
            let server = RedisServer::start(persistence, parent.path(), &Placement::split()).unwrap();
            let config = BenchmarkConfig {
                tests: "set,get".into(),
                value_bytes: 64,
                clients: 4,
                requests: 2000,
                keyspace: Some(100),
                pipeline: 1,
            };
            let run = run_benchmark(server.port(), &config, &Placement::split()).unwrap();
            assert!(run.generator.cpu_s > 0.0 && run.generator.busy_share() <= 1.0, "{:?}", run.generator);
            let rows = run.rows;
            let tests: Vec<&str> = rows.iter().map(|r| r.test.as_str()).collect();
            assert_eq!(tests, ["SET", "GET"], "{persistence:?}");
            assert!(rows.iter().all(|r| r.rps > 0.0), "{rows:?}");
            let aof = std::fs::read_dir(server.dir()).unwrap().flatten().any(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.contains("appendonly")
            });
            assert_eq!(aof, persistence != Persistence::Off, "{persistence:?}: AOF files in {}", server.dir().display());
            let dir = server.dir().to_path_buf();
            drop(server);
            assert!(!dir.exists(), "the peer's directory is removed on drop");
        }
    }
}
