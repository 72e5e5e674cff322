//! The calibration table behind `Method::Auto`: for each message size
//! measured, each method's median latency and throughput; `choose` picks
//! the best allowed method in the size's bucket (seed 004 H3, extended to
//! a per-size hybrid).
//!
//! Buckets: a size belongs to the smallest measured size at or above it
//! (sizes past the largest measured one use the largest). The table is
//! JSON (serde), so a client can measure once and load it later.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::proto::Method;

/// One measured cell: a method at a size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CalibrationPoint {
    /// Message size.
    pub size_bytes: u64,
    /// The concrete method (never `Auto`).
    pub method: Method,
    /// Median latency, one write outstanding.
    pub latency_ns_p50: u64,
    /// Throughput with the window used for bulk writes (bytes per second,
    /// whole numbers so the JSON round-trips exactly).
    pub throughput_bytes_per_s: f64,
}

/// A per-size table of method measurements.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Where it was measured (`UCX_TLS=tcp`, `sm`, …): a table is only valid there.
    pub transport: String,
    /// The cells.
    pub points: Vec<CalibrationPoint>,
}

/// What "best" means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objective {
    /// Lowest median latency.
    Latency,
    /// Highest throughput.
    Throughput,
}

/// Why a table could not be loaded or saved.
#[derive(Debug, Error)]
pub enum CalibrationError {
    /// Reading or writing the file failed.
    #[error("calibration file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The JSON does not parse.
    #[error("calibration JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The table lists `Auto` as a measured method, or is empty.
    #[error("invalid calibration: {0}")]
    Invalid(&'static str),
}

impl Calibration {
    /// The best allowed method for a `size`-byte write, or `None` if no
    /// allowed method was measured.
    pub fn choose(&self, size: u64, objective: Objective, allowed: impl Fn(Method) -> bool) -> Option<Method> {
        let candidates = || self.points.iter().filter(|p| p.method != Method::Auto && allowed(p.method));
        let bucket = candidates()
            .map(|p| p.size_bytes)
            .filter(|&s| s >= size)
            .min()
            .or_else(|| candidates().map(|p| p.size_bytes).max())?;
        let in_bucket = candidates().filter(|p| p.size_bytes == bucket);
        let best = match objective {
            Objective::Latency => in_bucket.min_by_key(|p| p.latency_ns_p50),
            Objective::Throughput => in_bucket.max_by(|a, b| a.throughput_bytes_per_s.total_cmp(&b.throughput_bytes_per_s)),
        };
        best.map(|p| p.method)
    }

    /// Checks the table can be used.
    pub fn validate(&self) -> Result<(), CalibrationError> {
        if self.points.is_empty() {
            return Err(CalibrationError::Invalid("no points"));
        }
        if self.points.iter().any(|p| p.method == Method::Auto) {
            return Err(CalibrationError::Invalid("Auto is not a measured method"));
        }
        Ok(())
    }

    /// The table as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a calibration serializes")
    }

    /// Parses and validates a table.
    pub fn from_json(text: &str) -> Result<Calibration, CalibrationError> {
        let table: Calibration = serde_json::from_str(text)?;
        table.validate()?;
        Ok(table)
    }

    /// Loads a table from `path`.
    pub fn load(path: &Path) -> Result<Calibration, CalibrationError> {
        let io = |source| CalibrationError::Io { path: path.display().to_string(), source };
        Calibration::from_json(&std::fs::read_to_string(path).map_err(io)?)
    }

    /// Saves the table to `path`.
    pub fn save(&self, path: &Path) -> Result<(), CalibrationError> {
        let io = |source| CalibrationError::Io { path: path.display().to_string(), source };
        std::fs::write(path, self.to_json()).map_err(io)
    }
}

/// Collects latency samples while a client measures, and turns them
/// into a [`Calibration`] (medians). I/O-free: the caller times the writes.
#[derive(Debug, Default)]
pub struct CalibrationBuilder {
    latency_ns: BTreeMap<(u64, Method), Vec<u64>>,
    throughput: BTreeMap<(u64, Method), f64>,
}

impl CalibrationBuilder {
    /// Records one write's latency.
    pub fn record_latency(&mut self, size_bytes: u64, method: Method, latency_ns: u64) {
        assert!(method != Method::Auto, "Auto is not measured");
        self.latency_ns.entry((size_bytes, method)).or_default().push(latency_ns);
    }

    /// Records a bulk run: `bytes` moved in `elapsed_ns`.
    pub fn record_bulk(&mut self, size_bytes: u64, method: Method, bytes: u64, elapsed_ns: u64) {
        assert!(elapsed_ns > 0, "a bulk run takes time");
        self.throughput.insert((size_bytes, method), bytes as f64 * 1e9 / elapsed_ns as f64);
    }

    /// The table: one point per (size, method) with latency samples;
    /// throughput from a bulk run if recorded, else size / median latency.
    pub fn finish(mut self, transport: &str) -> Calibration {
        let mut points = Vec::with_capacity(self.latency_ns.len());
        for ((size_bytes, method), samples) in &mut self.latency_ns {
            samples.sort_unstable();
            let median = samples[samples.len() / 2].max(1);
            let fallback = *size_bytes as f64 * 1e9 / median as f64;
            let throughput = self.throughput.get(&(*size_bytes, *method)).copied().unwrap_or(fallback);
            points.push(CalibrationPoint {
                size_bytes: *size_bytes,
                method: *method,
                latency_ns_p50: median,
                throughput_bytes_per_s: throughput.round(),
            });
        }
        Calibration { transport: transport.to_string(), points }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A synthetic table: Rpc wins small, read-after-write wins the middle,
    /// offload wins bulk.
    pub(crate) fn synthetic() -> Calibration {
        let mut b = CalibrationBuilder::default();
        let table: [(u64, [u64; 4]); 4] =
            [(64, [3000, 3500, 4200, 2800]), (1024, [3600, 3900, 4400, 3100]), (65536, [40_000, 25_000, 30_000, 32_000]), (131072, [80_000, 45_000, 52_000, 60_000])];
        let methods = [Method::Rpc, Method::RpcOffload, Method::OneSidedFlush, Method::OneSidedReadAfterWrite];
        for (size, lat) in table {
            for (m, l) in methods.iter().zip(lat) {
                for jitter in [0, 100, 7000] {
                    b.record_latency(size, *m, l + jitter);
                }
            }
        }
        b.finish("synthetic")
    }

    #[test]
    fn chooses_the_best_per_bucket() {
        let t = synthetic();
        let any = |_| true;
        assert_eq!(t.choose(64, Objective::Latency, any), Some(Method::OneSidedReadAfterWrite));
        assert_eq!(t.choose(10, Objective::Latency, any), Some(Method::OneSidedReadAfterWrite));
        assert_eq!(t.choose(65, Objective::Latency, any), Some(Method::OneSidedReadAfterWrite), "bucket 1024");
        assert_eq!(t.choose(4096, Objective::Latency, any), Some(Method::RpcOffload), "bucket 64 KiB");
        assert_eq!(t.choose(1 << 20, Objective::Latency, any), Some(Method::RpcOffload), "past the largest");
        assert_eq!(t.choose(131072, Objective::Throughput, any), Some(Method::RpcOffload));
        // Read-after-write only gives visibility on this target: excluded.
        let durable = |m| m != Method::OneSidedReadAfterWrite;
        assert_eq!(t.choose(64, Objective::Latency, durable), Some(Method::Rpc));
        assert_eq!(t.choose(64, Objective::Latency, |_| false), None);
    }

    #[test]
    fn medians_and_json_round_trip() {
        let t = synthetic();
        let p = t.points.iter().find(|p| p.size_bytes == 64 && p.method == Method::Rpc).unwrap();
        assert_eq!(p.latency_ns_p50, 3100);
        let back = Calibration::from_json(&t.to_json()).unwrap();
        assert_eq!(back, t);
        let dir = tempfile::tempdir().unwrap();
        t.save(&dir.path().join("cal.json")).unwrap();
        assert_eq!(Calibration::load(&dir.path().join("cal.json")).unwrap(), t);
        assert!(Calibration::from_json("{\"transport\":\"x\",\"points\":[]}").is_err());
        assert!(Calibration::from_json("not json").is_err());
    }
}
