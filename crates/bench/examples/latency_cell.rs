//! One cell of `pmwire bench remote-latency` (a transport, a write method
//! and a size), for comparing two builds side by side with
//! `scripts/ab-latency`: the suite's own server and clients, one write
//! outstanding, the same loop as the suite.
//!
//! `latency_cell TLS VARIANT SIZE ITERS` prints `TLS VARIANT SIZE p50 N p90 N
//! p99 N` (ns). With `PIN_SPLIT` set, the server's threads run on CPU 0 and
//! the client on CPU 1: on two cores, unpinned runs are bimodal (client and
//! server sometimes share a core), which hides a small difference between
//! builds.
//!
//! It uses only APIs that `scripts/ab-latency`'s older builds also have.

use std::time::Instant;

use pmwire_bench::remote::common::ServerThread;
use pmwire_bench::remote::latency::wait_for;
use pmwire_remote::proto::{Guarantee, Method};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    anyhow::ensure!(args.len() == 5, "usage: latency_cell TLS VARIANT SIZE ITERS");
    let (tls, variant) = (args[1].as_str(), args[2].as_str());
    let (size, iters) = (args[3].parse::<usize>()?, args[4].parse::<usize>()?);
    let pin = std::env::var_os("PIN_SPLIT").is_some();
    if pin {
        set_cpu(0); // the server thread inherits this
    }
    let server = ServerThread::start(tls, 64 << 20, 8, 4 << 20)?;
    if pin {
        set_cpu(1);
    }
    let mut durable = server.client(tls, Guarantee::Persistence, 32)?;
    let mut visible = server.client(tls, Guarantee::Visibility, 32)?;
    if variant == "auto" {
        durable.calibrate(1 << 20, &[64, 256, 1024], 100, tls)?;
    }
    let bytes = vec![0x5au8; size];
    let mut samples = Vec::with_capacity(iters);
    for i in 0..iters + iters / 10 {
        let start = Instant::now();
        match variant {
            "put" => {
                let put = durable.submit_put(4096, &bytes)?;
                let flush = durable.submit_transport_flush()?;
                wait_for(&mut durable, &[put, flush])?;
            }
            "raw_1rtt" => drop(visible.write_persistent(4096, &bytes, Method::OneSidedReadAfterWrite)?),
            "raw_2rtt" => drop(visible.write_persistent(4096, &bytes, Method::ReadAfterWriteTwoTrips)?),
            "put_flush" => drop(durable.write_persistent(4096, &bytes, Method::OneSidedFlush)?),
            "rpc" => drop(durable.write_persistent(4096, &bytes, Method::Rpc)?),
            "rpc_offload" => drop(durable.write_persistent(4096, &bytes, Method::RpcOffload)?),
            "auto" => drop(durable.write_persistent(4096, &bytes, Method::Auto)?),
            "discard_floor" => durable.discard(&bytes)?,
            other => anyhow::bail!("unknown variant {other}"),
        }
        if i >= iters / 10 {
            samples.push(start.elapsed().as_nanos() as u64);
        }
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    println!("{tls} {variant} {size} p50 {} p90 {} p99 {}", at(0.5), at(0.9), at(0.99));
    Ok(())
}

/// Pins the calling thread to `cpu`.
fn set_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t with one bit set, passed with its size,
    // for the calling thread (pid 0).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(rc, 0, "sched_setaffinity({cpu}): {}", std::io::Error::last_os_error());
}
