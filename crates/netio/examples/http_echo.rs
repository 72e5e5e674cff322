//! HTTP echo server and load in one process: measures requests/s with the built-in loadgen and,
//! if installed, wrk (both closed-loop clients on one thread, sharing the machine).
//!
//! `cargo run --release -p pmwire-netio --example http_echo -- [connections] [seconds] [body_bytes] [copy|zc] [busy_poll_us]`

use std::process::Command;
use std::time::Duration;

use pmwire_netio::echo::HttpEcho;
use pmwire_netio::loadgen::{self, LoadConfig, StopAfter};
use pmwire_netio::{Config, HeapBuffers, Server};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| args.get(i).map(|s| s.parse().expect("a number")).unwrap_or(d);
    let connections = num(0, 50) as u32;
    let seconds = num(1, 2);
    let body_bytes = num(2, 0) as usize;
    let copy = args.get(3).is_some_and(|s| s == "copy");
    let busy_poll_us = num(4, 0) as u32;

    let mut echo = HttpEcho::default();
    echo.copy_body = copy;
    let mut server = Server::bind("127.0.0.1:0", Config { busy_poll_us, ..Config::default() }, HeapBuffers::new(8192, 2048), echo).expect("bind");
    let addr = server.local_addr();
    let stop = server.stop_handle();
    let t = std::thread::spawn(move || {
        server.run().expect("run");
        server
    });
    let method = if body_bytes > 0 { "POST" } else { "GET" };
    let cfg = LoadConfig {
        connections,
        method: method.into(),
        body_bytes,
        stop: StopAfter::Duration(Duration::from_secs(seconds)),
        warmup: Duration::from_millis(200),
        ..LoadConfig::default()
    };
    let r = loadgen::run(addr, &cfg).expect("loadgen");
    println!(
        "loadgen  {method} body={body_bytes} B conns={connections} {}: {:.0} req/s, mean {:.0} us, p50 {} us, p99 {} us, errors {}",
        if copy { "copy" } else { "zero-copy" },
        r.throughput_rps,
        r.latency_us_mean,
        r.latency_us_p50,
        r.latency_us_p99,
        r.errors
    );
    if body_bytes == 0 {
        let url = format!("http://{addr}/");
        match Command::new("wrk").args(["-t1", &format!("-c{connections}"), &format!("-d{seconds}s"), &url]).output() {
            Ok(out) => {
                let text = String::from_utf8_lossy(&out.stdout);
                let line = |k: &str| text.lines().find(|l| l.contains(k)).unwrap_or("").trim().to_string();
                println!("wrk      GET conns={connections}: {} | {}", line("Requests/sec"), line("Latency"));
            }
            Err(_) => println!("wrk not installed"),
        }
    }
    stop.stop();
    let server = t.join().expect("server thread");
    let s = server.stats();
    println!(
        "server   batches {} entries/batch {:.2} cqes/wakeup {:.2} recvs {} refills {} enobufs {} arms {} defer_taskrun {}",
        s.batches,
        s.batch_entries as f64 / s.batches.max(1) as f64,
        s.cqes_per_wakeup(),
        s.recvs,
        s.ring_refills,
        s.enobufs,
        s.recv_arms,
        s.defer_taskrun
    );
    assert_eq!(server.source().in_use(), 0);
}
