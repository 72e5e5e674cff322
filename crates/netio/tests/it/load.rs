//! The load generator against the echo service, and wrk when it is installed.

use std::process::Command;
use std::time::Duration;

use pmwire_netio::echo::HttpEcho;
use pmwire_netio::loadgen::{self, LoadConfig, StopAfter};
use pmwire_netio::{Config, HeapBuffers};

use crate::common::*;

#[test]
fn loadgen_closed_loop_get_and_post() {
    let srv = start(Config::default(), HeapBuffers::new(4096, 2048), HttpEcho::default());
    let get = LoadConfig {
        connections: 20,
        stop: StopAfter::Duration(Duration::from_millis(300)),
        warmup: Duration::from_millis(50),
        ..LoadConfig::default()
    };
    let r = loadgen::run(srv.addr, &get).unwrap();
    println!("GET, 20 connections: {r:?}");
    assert!(r.requests > 0);
    assert_eq!(r.errors, 0);
    assert!(r.latency_us_p50 <= r.latency_us_p99);
    let post =
        LoadConfig { connections: 5, method: "POST".into(), body_bytes: 1280, stop: StopAfter::Requests(2000), ..get };
    let r = loadgen::run(srv.addr, &post).unwrap();
    println!("POST 1280 B, 5 connections: {r:?}");
    assert!(r.requests >= 2000);
    assert_eq!(r.errors, 0);
    let (server, _) = srv.stop();
    assert_eq!(server.source().in_use(), 0);
}

#[test]
fn loadgen_counts_refusals_as_errors() {
    let srv = start(Config::default(), HeapBuffers::new(1024, 2048), HttpEcho::default());
    let bad = LoadConfig {
        connections: 2,
        method: "POST".into(),
        body_bytes: 2 << 20, // over the echo's 1 MiB limit: 413 and close, then reconnect
        stop: StopAfter::Requests(5),
        warmup: Duration::ZERO,
        timeout: Duration::from_secs(20),
        ..LoadConfig::default()
    };
    let r = loadgen::run(srv.addr, &bad).unwrap();
    assert!(r.errors > 0, "{r:?}");
    let (server, _) = srv.stop();
    assert_eq!(server.source().in_use(), 0);
}

#[test]
fn wrk_runs_clean() {
    if let Err(e) = Command::new("wrk").arg("--version").output() {
        panic!("wrk cannot run ({e}): scripts/setup installs it (Debian package wrk)");
    }
    let srv = start(Config::default(), HeapBuffers::new(4096, 2048), HttpEcho::default());
    let url = format!("http://{}/wrk", srv.addr);
    let out = Command::new("wrk").args(["-t1", "-c10", "-d1s", &url]).output().expect("run wrk");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert!(out.status.success(), "wrk failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains("Socket errors"), "wrk saw socket errors");
    assert!(!text.contains("Non-2xx"), "wrk saw non-2xx responses");
    let n: u64 = text
        .lines()
        .find(|l| l.contains("requests in"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("wrk request count");
    assert!(n > 0);
    let (server, _) = srv.stop();
    assert_eq!(server.source().in_use(), 0);
}

#[test]
fn loadgen_120_connections_small_buffers() {
    // 700 B bodies in 256 B buffers: every request spans buffers, 120 connections at once.
    let cfg = Config { ring_entries: 512, max_rx_bytes: 8 << 10, ..Config::default() };
    let srv = start(cfg, HeapBuffers::new(4096, 256), HttpEcho::default());
    let lc = LoadConfig {
        connections: 120,
        method: "POST".into(),
        body_bytes: 700,
        stop: StopAfter::Requests(5000),
        warmup: Duration::ZERO,
        timeout: Duration::from_secs(30),
        ..LoadConfig::default()
    };
    let r = loadgen::run(srv.addr, &lc).unwrap();
    println!("POST 700 B, 120 connections, 256 B buffers: {r:?}");
    assert!(r.requests >= 5000);
    assert_eq!(r.errors, 0);
    let (server, _) = srv.stop();
    assert!(server.stats().accepted >= 120);
    assert_eq!(server.source().in_use(), 0);
}
