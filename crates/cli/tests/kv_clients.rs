//! `pmwire kv` holds Redis's default 10,000 clients on a small pool: idle connections hold no
//! pool buffer (the receive ring lends one when bytes arrive), so the limit is `maxclients`,
//! not the pool's size. One more client gets Redis's message and is closed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_pmwire");

/// Raises this process's descriptor limit to its hard limit; fails (with the reason) if that
/// cannot hold `need`.
fn descriptors_for(need: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    assert!(
        lim.rlim_cur >= need,
        "this test needs {need} descriptors and the hard limit is {} (raise `ulimit -Hn`)",
        lim.rlim_cur
    );
}

struct Kv {
    child: Child,
    resp: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Kv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_kv(size: &str) -> Kv {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let ready = dir.path().join("ready");
    let mut child = Command::new(EXE)
        .arg("kv")
        .arg("--pool")
        .arg(dir.path().join("pool"))
        .args([
            "--size",
            size,
            "--resp",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--ready-file",
        ])
        .arg(&ready)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(file) = pmwire_kv_server::ReadyFile::read(&ready) {
            return Kv {
                child,
                resp: file.resp_addr(),
                _dir: dir,
            };
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "pmwire kv exited before it was ready"
        );
        assert!(Instant::now() < deadline, "no ready file within 30 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `n` new connections, each answered PONG (the PINGs written first, then read).
fn connected(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut conns: Vec<TcpStream> = (0..n)
        .map(|i| TcpStream::connect(addr).unwrap_or_else(|e| panic!("connection {i}: {e}")))
        .collect();
    for c in &mut conns {
        c.write_all(b"PING\r\n").unwrap();
    }
    for (i, c) in conns.iter_mut().enumerate() {
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut pong = [0u8; 7];
        c.read_exact(&mut pong)
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        assert_eq!(&pong, b"+PONG\r\n", "connection {i}");
    }
    conns
}

fn call(c: &mut TcpStream, args: &[&str]) -> String {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    c.write_all(req.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // One reply: a line, or a bulk string whose length the first line gives.
    loop {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "closed while answering {args:?}");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(len) = text
            .strip_prefix('$')
            .and_then(|t| t.split_once("\r\n"))
            .and_then(|(l, _)| l.parse::<usize>().ok())
        {
            let head = text.find("\r\n").unwrap() + 2;
            if got.len() >= head + len + 2 {
                return text;
            }
        } else if text.ends_with("\r\n") {
            return text;
        }
    }
}

#[test]
fn ten_thousand_idle_clients_on_a_256_mib_pool_while_redis_benchmark_runs() {
    descriptors_for(10_200);
    let kv = start_kv("256M");
    // 9,900 idle clients, then redis-benchmark's 50 (and its configuration connection).
    let mut idle = connected(kv.resp, 9_900);
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &kv.resp.port().to_string(),
            "-c",
            "50",
            "-n",
            "20000",
            "-d",
            "64",
            "-t",
            "set,get",
            "-q",
        ])
        .output()
        .expect("redis-benchmark runs (scripts/setup installs redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "\n");
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for test in ["SET", "GET"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{test}: ")) && l.contains("requests per second")),
            "no {test} result:\n{text}"
        );
    }
    assert!(!text.to_lowercase().contains("error"), "{text}");
    // Up to 10,000, every one served.
    idle.extend(connected(kv.resp, 100));
    let info = call(&mut idle[0], &["INFO", "clients"]);
    assert!(
        info.contains("connected_clients:10000\r\n") && info.contains("maxclients:10000\r\n"),
        "{info}"
    );
    // The 10,001st: Redis's message, then closed.
    let mut extra = TcpStream::connect(kv.resp).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut got = Vec::new();
    extra.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"-ERR max number of clients reached\r\n");
    // Beyond what the descriptors allow: refused with Redis's text.
    let answer = call(&mut idle[1], &["CONFIG", "SET", "maxclients", "4000000000"]);
    assert!(answer.starts_with("-ERR CONFIG SET failed (possibly related to argument 'maxclients') - The operating system is not able to handle the specified number of clients, try with "), "{answer}");
    // The first and the last idle clients still work.
    assert_eq!(call(&mut idle[0], &["PING"]), "+PONG\r\n");
    assert_eq!(
        call(idle.last_mut().unwrap(), &["SET", "k", "v"]),
        "+OK\r\n"
    );
}
