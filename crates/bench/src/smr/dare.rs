//! Seed 000 §4.6's argument against one-sided replication, from our own
//! numbers: DARE-persistent would need a volatile RPC from the client to
//! the leader and then two dependent one-sided persistent writes (the log
//! entry, then the tail pointer) to the followers, so its median latency
//! is at least `rpc + 2 × persistent write`. The seed measured 2.3 µs +
//! 2 × 2.9 µs = 8.1 µs against 6.6 µs for its RPC-based Raft.
//!
//! Measured here with `pmwire bench remote-latency`'s own server and
//! client (one write outstanding): the volatile RPC is its DISCARD floor,
//! the one-sided persistent write its put + FLUSH, both at the size of
//! one replicated PUT's log entry.

use anyhow::Result;
use pmwire_remote::proto::Guarantee;

use crate::remote::common::{latency_result, ServerThread};
use crate::remote::latency::measure;
use crate::schema::{BenchResult, Skipped};

/// The bench name in results.
pub const BENCH: &str = "smr_dare_bound";

/// A PUT's log entry: the request header, a 16 B key and a 64 B value,
/// rounded to the remote suites' sizes.
const ENTRY_BYTES: u64 = 128;

/// Measures the two latencies over `tls` and adds the bound they imply.
pub fn run(tls: &str, quick: bool, results: &mut Vec<BenchResult>, skipped: &mut Vec<Skipped>) {
    match measure_bound(tls, if quick { 2_000 } else { 20_000 }) {
        Ok(rows) => results.extend(rows),
        Err(e) => skipped.push(Skipped::new(BENCH, tls, &format!("{e:#}"))),
    }
}

fn measure_bound(tls: &str, iters: usize) -> Result<Vec<BenchResult>> {
    let server = ServerThread::start(tls, 64 << 20, 8, 4 << 20)?;
    let mut durable = server.client(tls, Guarantee::Persistence, 32)?;
    let mut visible = server.client(tls, Guarantee::Visibility, 32)?;
    let bench = format!("{BENCH}_{tls}");
    let mut rows = Vec::new();
    let mut p50 = Vec::new();
    for (variant, name) in [("discard_floor", "volatile_rpc"), ("put_flush", "one_sided_persistent_write")] {
        let mut samples = measure(&mut durable, &mut visible, variant, ENTRY_BYTES, iters)?;
        let row = latency_result(&bench, name, ENTRY_BYTES, &mut samples).param("transport", tls).param("iters", iters);
        p50.push(row.get("latency_ns_p50").expect("just set"));
        rows.push(row);
    }
    let bound = p50[0] + 2.0 * p50[1];
    let row = BenchResult::new(&bench, "dare_persistent_bound").size(ENTRY_BYTES).param("transport", tls).param("formula", "volatile_rpc p50 + 2 x one_sided_persistent_write p50").metric("latency_ns_p50", bound);
    rows.push(row);
    Ok(rows)
}
