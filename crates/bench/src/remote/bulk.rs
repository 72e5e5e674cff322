//! `pmwire bench remote-bulk`: pipelined writes of 1 KB to 128 KB with
//! windows of 1, 8 and 32 over UCX tcp and sm (seed 000 Fig 4 and 7):
//! one-sided puts with one FLUSH per window (the window's puts, a transport
//! flush, then one FLUSH RPC over the window's range), Rpc, and RpcOffload
//! (copy engine, 8 in flight). GB/s of durable bytes.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use pmwire_remote::client::Client;
use pmwire_remote::proto::Guarantee;
use transport::UcxTransport;

use super::common::{finish, ratio, ServerThread, CORES_NOTE, TRANSPORTS};
use super::latency::wait_for;
use crate::schema::BenchResult;
use crate::SuiteReport;

/// The bench name in results.
pub const BENCH: &str = "remote_bulk";

/// How the suite runs.
#[derive(Clone, Debug)]
pub struct BulkOptions {
    /// Short run.
    pub quick: bool,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
}

const SIZES: [u64; 4] = [1 << 10, 8 << 10, 64 << 10, 128 << 10];
const WINDOWS: [usize; 3] = [1, 8, 32];
const VARIANTS: [&str; 3] = ["put_flush_per_window", "rpc", "rpc_offload"];
/// Bytes of the data area the writes cycle through.
const SPAN: u64 = 32 << 20;

/// Runs the suite.
pub fn run(options: &BulkOptions) -> Result<SuiteReport> {
    // Full mode moves ≥ 256 MiB per cell; quick mode 16 MiB.
    let per_cell: u64 = if options.quick { 16 << 20 } else { 256 << 20 };
    let mut results = Vec::new();
    let mut headlines = Vec::new();
    println!("remote-bulk: {} MiB per cell; {CORES_NOTE}", per_cell >> 20);
    for tls in TRANSPORTS {
        let server = ServerThread::start(tls, 64 << 20, 8, 1 << 20)?;
        let mut client = server.client(tls, Guarantee::Persistence, 64)?;
        for size in SIZES {
            for window in WINDOWS {
                for variant in VARIANTS {
                    let writes = (per_cell / size).max(window as u64);
                    let start = Instant::now();
                    move_bytes(&mut client, variant, size, window, writes)?;
                    let secs = start.elapsed().as_secs_f64();
                    let gbps = (writes * size) as f64 / secs / 1e9;
                    results.push(
                        BenchResult::new(&format!("{BENCH}_{tls}"), variant).size(size).param("transport", tls).param("window", window as u64).metric("gb_per_s", gbps),
                    );
                }
            }
        }
        drop((client, server));
        let gb = |variant: &str, size: u64| {
            results.iter().filter(|r| r.variant == variant && r.size_bytes == Some(size) && r.params["transport"] == tls).filter_map(|r| r.get("gb_per_s")).fold(0.0, f64::max)
        };
        let worst = [64u64 << 10, 128 << 10].iter().map(|&s| gb("rpc_offload", s) / gb("rpc", s)).fold(f64::INFINITY, f64::min);
        if tls == "sm" {
            headlines.push(ratio("sm: RpcOffload / Rpc GB/s, 64 KB+ (best window each, worst size)", Some(worst), 1.5, true, "Rpc, same run"));
        } else {
            headlines.push(ratio("tcp: RpcOffload / Rpc GB/s, 64 KB+ (information)", Some(worst), 1.5, true, "Rpc, same run").for_information());
        }
    }
    let parameters = serde_json::json!({
        "command": if options.quick { "pmwire bench remote-bulk --quick" } else { "pmwire bench remote-bulk" },
        "bytes_per_cell": per_cell, "sizes": SIZES, "windows": WINDOWS, "transports": TRANSPORTS, "payload_crc": false, "note": CORES_NOTE,
    });
    finish("remote-bulk", &options.out_dir, parameters, results, Vec::new(), headlines)
}

fn move_bytes(client: &mut Client<UcxTransport>, variant: &str, size: u64, window: usize, writes: u64) -> Result<()> {
    let bytes = vec![0x3cu8; size as usize];
    let slots = SPAN / size;
    if variant != "put_flush_per_window" {
        // Keep `window` writes in flight, refilling as replies arrive.
        let offload = variant == "rpc_offload";
        let (mut issued, mut acked) = (0u64, 0u64);
        while acked < writes {
            while issued < writes && issued - acked < window as u64 {
                client.submit_rpc_write((issued % slots) * size, &bytes, offload)?;
                issued += 1;
            }
            let (_, result) = client.wait_any()?;
            result?;
            acked += 1;
        }
        return Ok(());
    }
    let mut done = 0u64;
    let mut tokens = Vec::with_capacity(window + 1);
    while done < writes {
        let first = done % slots;
        let batch = (writes - done).min(window as u64).min(slots - first);
        tokens.clear();
        for i in 0..batch {
            tokens.push(client.submit_put((first + i) * size, &bytes)?);
        }
        tokens.push(client.submit_transport_flush()?);
        wait_for(client, &tokens)?;
        client.flush(first * size, batch * size)?;
        done += batch;
    }
    Ok(())
}
