//! redis-py, as an application uses it: a scripted session over every family
//! served (`tests/redispy/session.py`), with RESP2 and with RESP3, without and
//! with a password. `scripts/setup` installs redis-py from PyPI into its own
//! venv; this test runs that venv's Python.

use std::path::PathBuf;
use std::process::Command;

use pmwire_kv_server::Mode;

use crate::common::*;

/// The redis-py version `scripts/setup` installs (keep the two equal).
const REDISPY_VERSION: &str = "5.2.1";

fn venv_python() -> PathBuf {
    let venv = match std::env::var_os("PMWIRE_REDISPY_VENV") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").expect("HOME is set");
            PathBuf::from(home).join(".cache/pmwire").join(format!("redispy-{REDISPY_VERSION}"))
        }
    };
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup, which installs redis-py {REDISPY_VERSION} from PyPI there",
        python.display()
    );
    python
}

/// Runs the scripted session; its output, whatever its exit status.
fn run_session(port: u16, protocol: u8, password: Option<&str>) -> std::process::Output {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/redispy/session.py");
    let mut cmd = Command::new(venv_python());
    cmd.arg(&script).args(["--port", &port.to_string(), "--protocol", &protocol.to_string()]);
    if let Some(p) = password {
        cmd.args(["--password", p]);
    }
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

/// Runs the scripted session, which must pass; what it printed.
fn session(port: u16, protocol: u8, password: Option<&str>) -> String {
    let out = run_session(port, protocol, password);
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "redis-py RESP{protocol} session failed:\n{text}");
    text.trim_end().to_string()
}

#[test]
fn redis_py_runs_a_session_over_every_family_with_resp2_and_resp3() {
    let pool = Pool::new();
    let server = start(&pool.path, Mode::ZeroCopy);
    for protocol in [2, 3] {
        let said = session(server.resp.port(), protocol, None);
        assert!(said.contains(&format!("RESP{protocol} session:")) && said.contains("checks passed"), "{said}");
        eprintln!("{said}");
    }
    server.stop();
}

#[test]
fn redis_py_authenticates_with_requirepass() {
    let pool = Pool::new();
    let mut opts = options(&pool.path, Mode::Copy);
    opts.requirepass = Some(b"s3cret".to_vec());
    let server = start_with(pmwire_kv_server::KvServer::open(&opts).expect("open"));
    for protocol in [2, 3] {
        let said = session(server.resp.port(), protocol, Some("s3cret"));
        assert!(said.contains("checks passed"), "{said}");
    }
    // The script fails without the password: the test can fail.
    let out = run_session(server.resp.port(), 2, None);
    assert!(!out.status.success(), "a session without the password must be refused");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // redis-py raises NOAUTH as its AuthenticationError.
    assert!(stderr.contains("AuthenticationError: Authentication required"), "{stderr}");
    server.stop();
}

/// The script's expectations are redis-server's own: it passes against
/// redis-server 7.0 too, with both protocols.
#[test]
fn the_session_passes_against_redis_server() {
    let redis = RedisServer::start();
    let said: Vec<String> = [2, 3].into_iter().map(|protocol| session(redis.1, protocol, None)).collect();
    drop(redis);
    assert!(said.iter().all(|s| s.contains("checks passed")), "{said:?}");
}
