//! Job-queue libraries as applications run them, unmodified, against
//! `pmwire kv` and against redis-server in the same test (issue 27).
//! Dramatiq (Redis broker and result backend; its broker runs Lua scripts
//! by EVALSHA): 40 jobs whose results are read back and one job that fails,
//! which the worker must report. `scripts/setup` installs Dramatiq and
//! redis-py from PyPI into a venv of their own; this test runs that venv.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pmwire_kv_server::Mode;

use crate::common::*;

/// The versions `scripts/setup` installs (keep them equal).
const DRAMATIQ_VERSION: &str = "2.2.1";

fn venv_bin(name: &str) -> PathBuf {
    let venv = match std::env::var_os("PMWIRE_QUEUES_VENV") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/pmwire").join(format!("queues-dramatiq-{DRAMATIQ_VERSION}")),
    };
    let bin = venv.join("bin").join(name);
    assert!(bin.exists(), "{} is missing: run scripts/setup, which installs Dramatiq {DRAMATIQ_VERSION} from PyPI there", bin.display());
    bin
}

fn app_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/queues")
}

/// Runs a Dramatiq worker and the job script against the server on `port`;
/// the script's output and the worker's log.
fn dramatiq(port: u16) -> (String, String) {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut worker = Command::new(venv_bin("dramatiq"))
        .args(["dramatiq_tasks", "--processes", "1", "--threads", "2"])
        .current_dir(app_dir())
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .expect("start the Dramatiq worker");
    let run = Command::new(venv_bin("python"))
        .arg("dramatiq_run.py")
        .current_dir(app_dir())
        .env("PORT", port.to_string())
        .output()
        .expect("run the Dramatiq jobs");
    // The failing job is sent last: give the worker time to take it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(log.path()).unwrap_or_default().contains("ValueError: boom") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    unsafe { libc::kill(worker.id() as i32, libc::SIGTERM) };
    let _ = worker.wait();
    let out = String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr);
    (out, std::fs::read_to_string(log.path()).unwrap_or_default())
}

#[test]
fn dramatiq_runs_its_jobs_and_returns_their_results_as_on_redis() {
    let redis = RedisServer::start();
    let pool = Pool::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    for (name, port) in [("redis-server", redis.1), ("pmwire kv", server.resp.port())] {
        let (out, log) = dramatiq(port);
        assert!(out.contains("results ok: 40 of 40"), "{name}: {out}\nworker:\n{log}");
        assert!(log.contains("ValueError: boom"), "{name}: the failing job was not reported:\n{log}");
    }
    server.stop();
}
