//! Differential tests: the same command scripts go to a real `redis-server`
//! (over TCP) and to the executor over `MemKeyspace`; replies must be equal
//! byte for byte, in RESP2 and RESP3. Skipped, with a message, when
//! `redis-server` is not installed.
//!
//! Script format (`tests/corpus/*.txt`): one command per line, split as an
//! inline command (quotes and `\xHH` escapes work); `#` starts a comment; a
//! line starting with `~ ` compares its reply with arrays sorted (KEYS, SCAN
//! and CONFIG GET orders are unspecified in Redis).

use pmwire_resp::client::{encode_request, parse_reply, reply_len, Value};
use pmwire_resp::exec::{Flow, Server, ServerConfig};
use pmwire_resp::inline::{split_args, Token};
use pmwire_resp::keyspace::MemKeyspace;
use pmwire_resp::request::{Limits, Parsed};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_redis() -> Option<Redis> {
    let found = Command::new("redis-server").arg("--version").stdout(Stdio::null()).status().is_ok();
    if !found {
        println!("SKIPPED: redis-server is not installed (apt-get install -y redis-server)");
        return None;
    }
    for _ in 0..5 {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--dir", dir.path().to_str().expect("utf8 path")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let mut redis = Redis { child, port, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(redis);
            }
            if let Ok(Some(_)) = redis.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("redis-server did not start");
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn new(port: u16) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        Conn { stream, buf: Vec::new() }
    }

    fn call(&mut self, request: &[u8]) -> Vec<u8> {
        self.stream.write_all(request).expect("write");
        loop {
            if let Some((n, _)) = reply_len(&self.buf).expect("redis reply parses") {
                return self.buf.drain(..n).collect();
            }
            let mut chunk = [0u8; 65536];
            let n = self.stream.read(&mut chunk).expect("read");
            assert!(n > 0, "redis closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Everything until the server closes the connection.
    fn rest(&mut self) -> Vec<u8> {
        let mut chunk = [0u8; 65536];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return std::mem::take(&mut self.buf),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => panic!("redis did not close: {e}"),
            }
        }
    }
}

fn args_of(line: &str) -> Vec<Vec<u8>> {
    let mut tokens = Vec::new();
    assert!(split_args(line.as_bytes(), &mut tokens), "bad script line {line}");
    tokens
        .into_iter()
        .map(|t| match t {
            Token::Verbatim(r) => line.as_bytes()[r].to_vec(),
            Token::Unescaped(v) => v,
        })
        .collect()
}

fn sorted(v: Value) -> Value {
    match v {
        Value::Array(items) => {
            let mut items: Vec<Value> = items.into_iter().map(sorted).collect();
            items.sort_by_key(|a| format!("{a:?}"));
            Value::Array(items)
        }
        Value::Map(mut pairs) => {
            pairs.sort_by_key(|a| format!("{a:?}"));
            Value::Map(pairs)
        }
        other => other,
    }
}

fn redis_version(port: u16) -> String {
    let mut admin = Conn::new(port);
    let mut req = Vec::new();
    encode_request(&[&b"INFO"[..], b"server"], &mut req);
    let reply = admin.call(&req);
    let text = String::from_utf8_lossy(&reply).into_owned();
    let v = text.lines().find_map(|l| l.strip_prefix("redis_version:")).expect("version");
    v.trim().to_string()
}

fn run_script(redis: &Redis, version: &str, name: &str, script: &str) -> Vec<String> {
    let mut failures = Vec::new();
    let mut admin = Conn::new(redis.port);
    let mut req = Vec::new();
    encode_request(&[&b"FLUSHALL"[..]], &mut req);
    admin.call(&req);
    let mut conn = Conn::new(redis.port);
    req.clear();
    encode_request(&[&b"CLIENT"[..], b"ID"], &mut req);
    let id_reply = conn.call(&req);
    let id: u64 = String::from_utf8_lossy(&id_reply[1..id_reply.len() - 2]).parse().expect("client id");

    let config = ServerConfig { version: version.to_string(), ..ServerConfig::default() };
    let mut server = Server::new(config);
    let mut session = server.open_session_with_id(id);
    let mut ks = MemKeyspace::new();
    let mut parsed = Parsed::new(Limits::default());
    for (lineno, line) in script.lines().enumerate() {
        let line = line.trim_end();
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (sort, command) = match line.strip_prefix("~ ") {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let args = args_of(command);
        req.clear();
        encode_request(&args, &mut req);
        let want = conn.call(&req);
        let segs: [&[u8]; 1] = [&req];
        let summary = parsed.parse(&segs);
        assert_eq!(summary.consumed, req.len());
        assert_eq!(summary.commands, 1);
        let mut got: Vec<u8> = Vec::new();
        let flow = server.execute(&mut session, &mut ks, &parsed.request(&segs, 0), &mut got);
        let same = if sort {
            let w = parse_reply(&want).expect("parse").map(|(v, _)| sorted(v));
            let g = parse_reply(&got).ok().flatten().map(|(v, _)| sorted(v));
            w == g
        } else {
            want == got
        };
        if !same {
            failures.push(format!(
                "{name}:{}: {command}\n    redis:  {:?}\n    pmwire: {:?}",
                lineno + 1,
                String::from_utf8_lossy(&want),
                String::from_utf8_lossy(&got)
            ));
        }
        if flow == Flow::Close {
            break;
        }
    }
    failures
}

#[test]
fn corpus_matches_redis() {
    let Some(redis) = start_redis() else { return };
    let version = redis_version(redis.port);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut names: Vec<_> = std::fs::read_dir(&dir).expect("corpus dir").map(|e| e.expect("entry").path()).collect();
    names.sort();
    let mut failures = Vec::new();
    let mut lines = 0;
    for path in &names {
        let script = std::fs::read_to_string(path).expect("read script");
        lines += script.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')).count();
        let name = path.file_name().expect("name").to_string_lossy().into_owned();
        failures.extend(run_script(&redis, &version, &name, &script));
    }
    println!("{} scripts, {lines} commands compared with redis-server {version}", names.len());
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}

/// Raw inputs, including protocol errors: every reply until the server
/// closes must match.
const RAW: &[&[u8]] = &[
    b"PING\r\n*x\r\n",
    b"*1\r\n$4\r\nPING\r\n*1\r\nx\r\n",
    b"*2\r\n$4\r\nECHO\r\n$-3\r\n",
    b"*1\r\n$abc\r\n",
    b"*\r\n",
    b"*3000000000\r\n",
    b"*1\r\n$600000000\r\n",
    b"ping\r\necho \"a b\" 'c'\r\necho \"unbalanced\r\n",
    b"echo \"a\"b\r\n",
    b"set k \"\\x41\\n\"\r\nget k\r\n*-1\r\n*0\r\n\r\n\nget k\nQUIT\r\nPING\r\n",
    b"*2\r\n$4\r\nECHO\r\n$3\r\nabcXY*1\r\n$4\r\nPING\r\n*1\r\n:1\r\n",
    b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n\r\n",
];

#[test]
fn raw_protocol_matches_redis() {
    let Some(redis) = start_redis() else { return };
    let mut failures = Vec::new();
    for input in RAW {
        let mut conn = Conn::new(redis.port);
        conn.stream.write_all(input).expect("write");
        let want = conn.rest();
        let mut server = Server::new(ServerConfig::default());
        let mut session = server.open_session();
        let mut ks = MemKeyspace::new();
        let mut parsed = Parsed::new(Limits::default());
        let segs: [&[u8]; 1] = [input];
        let summary = parsed.parse(&segs);
        let mut got: Vec<u8> = Vec::new();
        let mut closed = false;
        for i in 0..summary.commands {
            if server.execute(&mut session, &mut ks, &parsed.request(&segs, i), &mut got) == Flow::Close {
                closed = true;
                break;
            }
        }
        if !closed {
            if let Some(e) = summary.error {
                got.extend_from_slice(&e.reply());
            }
        }
        if want != got {
            failures.push(format!(
                "{:?}\n    redis:  {:?}\n    pmwire: {:?}",
                String::from_utf8_lossy(input),
                String::from_utf8_lossy(&want),
                String::from_utf8_lossy(&got)
            ));
        }
    }
    assert!(failures.is_empty(), "{} differences:\n{}", failures.len(), failures.join("\n"));
}
