//! Job-queue libraries as applications run them, unmodified, against
//! `pmwire kv` and against redis-server in the same test (issue 27).
//! Dramatiq (Redis broker and result backend; its broker runs Lua scripts
//! by EVALSHA): 40 jobs whose results are read back and one job that fails,
//! which the worker must report. Celery (Redis broker and result backend;
//! kombu's Lua scripts, results waited for by pub/sub): plain, failing and
//! delayed tasks, a group and a chord, each result checked. python-rq
//! (results written by XADD inside MULTI, the worker's commands by pub/sub):
//! plain, failing and dependent jobs run by a burst worker, each result read
//! back. BullMQ (Node; its Lua scripts, which unpack their options with
//! cmsgpack, by EVALSHA): plain, failing (retried) and delayed jobs and a
//! flow whose parent sums its children's results. `scripts/setup`
//! installs each Python library and redis-py from PyPI into a venv of its
//! own, and BullMQ from the npm registry into a directory of its own;
//! these tests run those.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pmwire_kv_server::Mode;

use crate::common::*;

/// The versions `scripts/setup` installs (keep them equal).
const DRAMATIQ_VERSION: &str = "2.2.1";
const CELERY_VERSION: &str = "5.5.3";
const RQ_VERSION: &str = "3.0.0";
const BULLMQ_VERSION: &str = "5.81.5";

/// `name` in the venv of `library` (`dramatiq` or `celery`), which
/// `scripts/setup` made (or the path its environment variable gives).
fn venv_bin(library: &str, name: &str) -> PathBuf {
    let (var, version) = match library {
        "dramatiq" => ("PMWIRE_QUEUES_VENV", DRAMATIQ_VERSION),
        "rq" => ("PMWIRE_RQ_VENV", RQ_VERSION),
        _ => ("PMWIRE_CELERY_VENV", CELERY_VERSION),
    };
    let venv = match std::env::var_os(var) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/pmwire").join(format!("queues-{library}-{version}")),
    };
    let bin = venv.join("bin").join(name);
    assert!(bin.exists(), "{} is missing: run scripts/setup, which installs {library} {version} from PyPI there", bin.display());
    bin
}

fn app_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/queues")
}

/// Starts `worker` (its program from `library`'s venv, then its arguments)
/// against the server on `port`, runs `script` with that venv's Python,
/// waits until the worker's log shows the failing job (at most 20 s: it is
/// sent last), and stops the worker: the script's output and the log.
fn worker_and_script(library: &str, worker: &[&str], script: &str, port: u16) -> (String, String) {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut worker = Command::new(venv_bin(library, worker[0]))
        .args(&worker[1..])
        .current_dir(app_dir())
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("start the {library} worker: {e}"));
    let run = Command::new(venv_bin(library, "python"))
        .arg(script)
        .current_dir(app_dir())
        .env("PORT", port.to_string())
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(log.path()).unwrap_or_default().contains("ValueError: boom") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    unsafe { libc::kill(worker.id() as i32, libc::SIGTERM) };
    let _ = worker.wait();
    let out = String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr);
    (out, std::fs::read_to_string(log.path()).unwrap_or_default())
}

/// A Dramatiq worker and the job script.
fn dramatiq(port: u16) -> (String, String) {
    worker_and_script("dramatiq", &["dramatiq", "dramatiq_tasks", "--processes", "1", "--threads", "2"], "dramatiq_run.py", port)
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

/// A Celery worker and the work script.
fn celery(port: u16) -> (String, String) {
    let worker = ["celery", "-A", "celery_tasks", "worker", "--pool", "solo", "--concurrency", "1", "--loglevel", "INFO"];
    worker_and_script("celery", &worker, "celery_run.py", port)
}

#[test]
fn celery_runs_plain_failing_delayed_group_and_chord_work_as_on_redis() {
    let redis = RedisServer::start();
    let pool = Pool::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    for (name, port) in [("redis-server", redis.1), ("pmwire kv", server.resp.port())] {
        let (out, log) = celery(port);
        assert!(out.contains("celery ok"), "{name}: {out}\nworker:\n{log}");
        for kind in ["plain", "failing", "delayed", "group", "chord"] {
            assert!(out.contains(&format!("{kind} ok")), "{name}: {kind}: {out}");
        }
        assert!(log.contains("ValueError: boom"), "{name}: the failing task was not reported:\n{log}");
    }
    server.stop();
}

/// Queues python-rq jobs, runs a burst worker over them, and reads the
/// results back, against the server on `port`: the check's output and the
/// worker's log.
fn rq(port: u16) -> (String, String) {
    let ids = tempfile::NamedTempFile::new().unwrap();
    let script = |step: &str| {
        Command::new(venv_bin("rq", "python"))
            .args(["rq_run.py", step])
            .current_dir(app_dir())
            .env("PORT", port.to_string())
            .env("IDS", ids.path())
            .output()
            .expect("run the rq script")
    };
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    let queued = script("enqueue");
    let worker = Command::new(venv_bin("rq", "rq"))
        .args(["worker", "--burst", "--url", &format!("redis://127.0.0.1:{port}"), "default"])
        .current_dir(app_dir())
        .output()
        .expect("run the rq worker");
    let checked = script("check");
    (format!("{}{}", text(&queued), text(&checked)), text(&worker))
}

#[test]
fn python_rq_runs_plain_failing_and_dependent_jobs_as_on_redis() {
    let redis = RedisServer::start();
    let pool = Pool::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    for (name, port) in [("redis-server", redis.1), ("pmwire kv", server.resp.port())] {
        let (out, log) = rq(port);
        assert!(out.contains("rq ok"), "{name}: {out}\nworker:\n{log}");
        for kind in ["plain", "failing", "dependent"] {
            assert!(out.contains(&format!("{kind} ok")), "{name}: {kind}: {out}");
        }
        assert!(log.contains("ValueError: boom"), "{name}: the failing job was not reported:\n{log}");
    }
    server.stop();
}

/// The directory `scripts/setup` installed BullMQ into (or the path
/// `PMWIRE_BULLMQ_DIR` gives).
fn bullmq_dir() -> PathBuf {
    let dir = match std::env::var_os("PMWIRE_BULLMQ_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/pmwire").join(format!("queues-bullmq-{BULLMQ_VERSION}")),
    };
    let package = dir.join("node_modules/bullmq/package.json");
    assert!(package.exists(), "{} is missing: run scripts/setup, which installs BullMQ {BULLMQ_VERSION} from the npm registry there", package.display());
    dir
}

/// Runs `bullmq_run.js` with Node against the server on `port`.
fn bullmq(port: u16) -> String {
    let run = Command::new("node")
        .arg(app_dir().join("bullmq_run.js"))
        .env("NODE_PATH", bullmq_dir().join("node_modules"))
        .env("PORT", port.to_string())
        .output()
        .unwrap_or_else(|e| panic!("run node (scripts/setup installs it): {e}"));
    String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr)
}

#[test]
fn bullmq_runs_plain_failing_delayed_and_flow_jobs_as_on_redis() {
    let redis = RedisServer::start();
    let pool = Pool::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    for (name, port) in [("redis-server", redis.1), ("pmwire kv", server.resp.port())] {
        let out = bullmq(port);
        for kind in ["plain", "failing", "delayed", "flow"] {
            assert!(out.contains(&format!("{kind} ok")), "{name}: {kind}: {out}");
        }
        assert!(out.contains("bullmq ok"), "{name}: {out}");
    }
    server.stop();
}
