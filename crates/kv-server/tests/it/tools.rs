//! The real tools, unmodified: redis-cli, redis-benchmark, wrk.

use std::process::Command;

use pmwire_kv_server::client::HttpClient;

use crate::common::*;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?} failed: {text}");
    text
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    run(Command::new("redis-cli").args(["-p", &port.to_string()]).args(args)).trim_end().to_string()
}

#[test]
fn redis_cli_and_redis_benchmark_run_unmodified() {
    for mode in MODES {
        let pool = Pool::new();
        // redis-benchmark opens its GET connections while its SET connections are still
        // closing: about 100 at once, more than a 64 MB pool allows (62), so 256 MB (251).
        let mut opts = options(&pool.path, mode);
        opts.size = 256 << 20;
        let server = start_with(pmwire_kv_server::KvServer::open(&opts).unwrap());
        let port = server.resp.port();
        assert_eq!(redis_cli(port, &["SET", "greeting", "hello world"]), "OK");
        assert_eq!(redis_cli(port, &["GET", "greeting"]), "hello world");
        assert_eq!(redis_cli(port, &["HSET", "user:1", "name", "ada", "lang", "rust"]), "2");
        assert_eq!(redis_cli(port, &["HGET", "user:1", "lang"]), "rust");
        assert_eq!(redis_cli(port, &["INCRBY", "counter", "41"]), "41");
        assert_eq!(redis_cli(port, &["INCR", "counter"]), "42");
        assert_eq!(redis_cli(port, &["ZADD", "z", "1", "one", "2", "two"]), "2");
        assert_eq!(redis_cli(port, &["ZRANGE", "z", "0", "-1"]), "one\ntwo");
        assert_eq!(redis_cli(port, &["DEL", "greeting"]), "1");
        assert_eq!(redis_cli(port, &["EXISTS", "greeting"]), "0");
        let text = run(Command::new("redis-benchmark").args([
            "-p",
            &port.to_string(),
            "-t",
            "set,get",
            "-d",
            "1024",
            "-c",
            "50",
            "-n",
            "20000",
            "-q",
        ]));
        // redis-benchmark 7 exits with an error on any error reply.
        assert!(!text.to_lowercase().contains("error"), "{mode}: redis-benchmark reported errors: {text}");
        assert!(text.contains("SET:") && text.contains("GET:"), "{text}");
        assert_eq!(redis_cli(port, &["STRLEN", "key:__rand_int__"]), "1024");
        eprintln!(
            "{mode}: {}",
            text.replace('\r', "\n")
                .lines()
                .filter(|l| l.contains("requests per second"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        server.stop();
    }
}

#[test]
fn wrk_runs_without_socket_errors() {
    let pool = Pool::new();
    let server = start(&pool.path, pmwire_kv_server::Mode::ZeroCopy);
    let mut c = HttpClient::connect(server.http).unwrap();
    assert_eq!(c.request("POST", "/kv/page", &value(1, 1024)).unwrap().status, 204);
    drop(c);
    let url = format!("http://{}/kv/page", server.http);
    let text = run(Command::new("wrk").args(["-t1", "-c10", "-d1s", &url]));
    assert!(!text.contains("Socket errors"), "{text}");
    assert!(!text.contains("Non-2xx"), "{text}");
    // POSTs to the user log through a wrk script.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("post.lua");
    std::fs::write(&script, "wrk.method = \"POST\"\nwrk.body = string.rep(\"x\", 1412)\n").unwrap();
    let url = format!("http://{}/log", server.http);
    let text = run(Command::new("wrk").args(["-t1", "-c10", "-d1s", "-s"]).arg(&script).arg(&url));
    assert!(!text.contains("Socket errors"), "{text}");
    assert!(!text.contains("Non-2xx"), "{text}");
    server.stop();
}
