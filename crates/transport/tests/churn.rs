//! Connect–close cycles in one process, over tcp and shared memory: every
//! closed connection and dropped client transport gives back what UCX took
//! (file descriptors, mapped shared-memory segments), on both ends, and a
//! long-lived server keeps accepting. Its own test binary, so that no other
//! test's descriptors or segments come and go in the same process.
//!
//! `PMWIRE_CHURN_CYCLES=10000 cargo test --release -p pmwire-transport
//! --test churn -- --nocapture` runs the 10,000 cycles per
//! transport and prints the connect time per tenth (information: nothing
//! here asserts on time).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use transport::{Event, Output, Transport, UcxConfig, UcxTransport};

const TIMEOUT: Duration = Duration::from_secs(20);

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Bytes of /dev/shm this process has mapped (UCX's posix segments,
/// unlinked or not): this process's share, whatever others do there.
fn shm_bytes() -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter(|line| line.contains("/dev/shm/"))
        .map(|line| {
            let range = line.split_whitespace().next().unwrap();
            let (start, end) = range.split_once('-').unwrap();
            u64::from_str_radix(end, 16).unwrap() - u64::from_str_radix(start, 16).unwrap()
        })
        .sum()
}

/// A server thread with one transport for the whole test: echoes, and
/// counts connections it saw end.
fn spawn_server(config: UcxConfig, stop: Arc<AtomicBool>) -> (SocketAddr, std::thread::JoinHandle<(u64, u64)>) {
    let (tx, rx) = mpsc::channel();
    let join = std::thread::spawn(move || {
        let mut t = UcxTransport::new(&config).unwrap();
        tx.send(t.listen("127.0.0.1:0".parse().unwrap()).unwrap()).unwrap();
        let (mut accepted, mut ended) = (0u64, 0u64);
        let mut events = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            t.poll(&mut events, 64);
            if events.is_empty() {
                t.wait(Duration::from_millis(20)).unwrap();
            }
            for e in events.drain(..) {
                match e {
                    Event::Accepted(_) => accepted += 1,
                    Event::Disconnected { .. } => ended += 1,
                    Event::Request(r) => {
                        let _ = t.reply(r.id, &r.header, r.payload);
                    }
                    Event::Completion(_) | Event::Message { .. } => {}
                }
            }
        }
        (accepted, ended)
    });
    (rx.recv_timeout(TIMEOUT).unwrap(), join)
}

/// One cycle: a new client transport connects, makes one call, closes,
/// sees the close, and is dropped. Returns the time to the first response.
fn cycle(config: &UcxConfig, addr: &SocketAddr) -> Duration {
    let start = Instant::now();
    let mut t = UcxTransport::new(config).unwrap();
    let conn = t.connect(addr).unwrap();
    t.call(conn, b"hi", b"there".to_vec(), 1).unwrap();
    let mut events = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    let connected = loop {
        assert!(Instant::now() < deadline, "no response in {TIMEOUT:?}");
        t.wait(Duration::from_millis(10)).unwrap();
        t.poll(&mut events, 16);
        let done = events.drain(..).any(|e| {
            matches!(e, Event::Completion(c) if matches!(c.result, Ok(Output::Response { .. })))
        });
        if done {
            break start.elapsed();
        }
    };
    t.close(conn);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        t.poll(&mut events, 16);
        if events.drain(..).any(|e| matches!(e, Event::Disconnected { .. })) {
            break;
        }
        assert!(Instant::now() < deadline, "close not reported");
        t.wait(Duration::from_millis(10)).unwrap();
    }
    // Let the graceful close reach the server before the transport goes.
    for _ in 0..20 {
        t.wait(Duration::from_millis(1)).unwrap();
        t.poll(&mut events, 16);
    }
    drop(t);
    connected
}

fn churn(name: &str, config: UcxConfig, cycles: usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let (addr, server) = spawn_server(config.clone(), stop.clone());
    let warmup = (cycles / 10).max(20);
    let mut times = Vec::with_capacity(cycles);
    let mut baseline = None;
    for i in 0..cycles {
        if i == warmup {
            baseline = Some((open_fds(), shm_bytes()));
        }
        times.push(cycle(&config, &addr));
    }
    // The server's side of the last closes may still be in flight.
    let (fds_before, shm_before) = baseline.expect("more cycles than the warm-up");
    let deadline = Instant::now() + TIMEOUT;
    while open_fds() > fds_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let (fds_after, shm_after) = (open_fds(), shm_bytes());
    stop.store(true, Ordering::Relaxed);
    let (accepted, ended) = server.join().unwrap();
    let tenth = cycles / 10;
    let medians: Vec<String> = times
        .chunks(tenth.max(1))
        .map(|c| {
            let mut c = c.to_vec();
            c.sort();
            format!("{:.0}", c[c.len() / 2].as_secs_f64() * 1e6)
        })
        .collect();
    eprintln!(
        "[{name}] {cycles} cycles: fds {fds_before} -> {fds_after}, /dev/shm {} -> {} KiB, server accepted {accepted} and saw {ended} end; connect+first call p50 per tenth (us): {}",
        shm_before / 1024,
        shm_after / 1024,
        medians.join(" ")
    );
    assert_eq!(accepted, cycles as u64, "[{name}] every connection accepted");
    assert_eq!(ended, cycles as u64, "[{name}] the server saw every connection end");
    assert!(fds_after <= fds_before + 2, "[{name}] descriptors grew: {fds_before} -> {fds_after}");
    assert!(shm_after <= shm_before + (1 << 20), "[{name}] /dev/shm grew: {shm_before} -> {shm_after} B");
}

#[test]
fn connect_close_cycles_give_back_every_resource() {
    let cycles = std::env::var("PMWIRE_CHURN_CYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let lo = |c: UcxConfig| c.with_var("NET_DEVICES", "lo");
    churn("tcp", lo(UcxConfig::tls("tcp")), cycles);
    churn("sm", lo(UcxConfig::shared_memory()), cycles);
    churn("tcp, one-sided on", lo(UcxConfig::tls("tcp")).with_one_sided(), cycles / 3);
    churn("sm, one-sided on", lo(UcxConfig::shared_memory()).with_one_sided(), cycles / 3);
}

