//! The JSON a suite writes: one file per run.
//!
//! ```text
//! { "suite": "local", "pmwire_version": "0.1.0",
//!   "machine": {...}, "parameters": {...}, "peers": {...},
//!   "results": [ {"bench": "copy", "variant": "memcpy", "size_bytes": 4096,
//!                 "gb_per_s": 9.1, "gb_per_s_min": 8.7, ...}, ... ],
//!   "skipped": [ {"bench": "copy", "variant": "pmdk_memcpy_persist", "reason": "libpmem not found"} ],
//!   "headlines": [ {"name": ..., "value": 1.02, "target": ..., "pass": true, "peer": ...} ] }
//! ```
//!
//! A result's metrics are its top-level numeric fields other than
//! `size_bytes`; each name ends with its unit (`gb_per_s`, `mops_per_s`,
//! `latency_ns_p99`, `crossover_bytes`). Parameters that are not the x axis
//! go in the optional `params` object. A metric is always finite; a variant
//! that could not run has no result, but an entry in `skipped`.

use crate::Headline;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One measured point: a benchmark, a variant, maybe a size, and metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    /// The benchmark (`copy`, `counter`, `log`, ...).
    pub bench: String,
    /// The variant measured (`memcpy`, `pmdk_memcpy_persist`, ...).
    pub variant: String,
    /// The transfer or entry size, when the benchmark sweeps sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// Other parameters (not plotted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, serde_json::Value>,
    /// Metrics, each named with its unit last.
    #[serde(flatten)]
    pub metrics: BTreeMap<String, f64>,
}

impl BenchResult {
    /// A result with no metrics yet.
    pub fn new(bench: &str, variant: &str) -> BenchResult {
        BenchResult {
            bench: bench.to_string(),
            variant: variant.to_string(),
            size_bytes: None,
            params: BTreeMap::new(),
            metrics: BTreeMap::new(),
        }
    }

    /// Sets the size.
    pub fn size(mut self, size_bytes: u64) -> BenchResult {
        self.size_bytes = Some(size_bytes);
        self
    }

    /// Adds a metric; it must be finite.
    pub fn metric(mut self, name: &str, value: f64) -> BenchResult {
        assert!(value.is_finite(), "metric {name} of {}/{} is {value}", self.bench, self.variant);
        assert!(name != "size_bytes" && name != "params", "reserved metric name {name}");
        self.metrics.insert(name.to_string(), value);
        self
    }

    /// Adds a parameter.
    pub fn param(mut self, name: &str, value: impl Into<serde_json::Value>) -> BenchResult {
        self.params.insert(name.to_string(), value.into());
        self
    }

    /// A metric by name.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.metrics.get(name).copied()
    }
}

/// A variant that could not run, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// The benchmark.
    pub bench: String,
    /// The variant.
    pub variant: String,
    /// Why (e.g. "libpmem not found").
    pub reason: String,
}

impl Skipped {
    /// A skipped variant.
    pub fn new(bench: &str, variant: &str, reason: &str) -> Skipped {
        Skipped { bench: bench.to_string(), variant: variant.to_string(), reason: reason.to_string() }
    }
}

/// The whole file a suite writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SuiteFile {
    /// The suite (`local`).
    pub suite: String,
    /// The pmwire version that ran it.
    pub pmwire_version: String,
    /// [`crate::machine::describe`].
    pub machine: serde_json::Value,
    /// The plan: sizes, rounds, region size, the command.
    pub parameters: serde_json::Value,
    /// Peers: versions, paths, status.
    #[serde(default)]
    pub peers: serde_json::Value,
    /// Every measured point.
    pub results: Vec<BenchResult>,
    /// Every variant that did not run.
    #[serde(default)]
    pub skipped: Vec<Skipped>,
    /// The headline ratios.
    pub headlines: Vec<Headline>,
}

/// Serde for a headline value: a non-finite value (not run) is `null`.
pub(crate) mod finite_or_null {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
        if value.is_finite() {
            serializer.serialize_f64(*value)
        } else {
            serializer.serialize_none()
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(deserializer)?.unwrap_or(f64::NAN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SuiteFile {
        SuiteFile {
            suite: "local".into(),
            pmwire_version: "0.1.0".into(),
            machine: serde_json::json!({"cpu_model": "test cpu", "cores": 2}),
            parameters: serde_json::json!({"quick": true}),
            peers: serde_json::json!({"libpmem": {"status": "loaded"}}),
            results: vec![
                BenchResult::new("copy", "memcpy").size(4096).metric("gb_per_s", 9.5).metric("gb_per_s_min", 9.0),
                BenchResult::new("counter", "rotating_10x256")
                    .metric("mops_per_s", 12.25)
                    .param("blocks", 10)
                    .param("stride_bytes", 256),
            ],
            skipped: vec![Skipped::new("copy", "pmdk_memcpy_persist", "libpmem not found")],
            headlines: vec![
                Headline::measured("ok", 1.5, ">= 1x", crate::Goal::at_least(1.0), "x"),
                Headline::not_run("missing", ">= 2x y", "libpmem not found"),
            ],
        }
    }

    #[test]
    fn suite_file_round_trips_through_json() {
        let file = sample();
        let text = serde_json::to_string_pretty(&file).unwrap();
        let back: SuiteFile = serde_json::from_str(&text).unwrap();
        assert_eq!(back.results, file.results);
        assert_eq!(back.skipped, file.skipped);
        assert_eq!(back.headlines[0], file.headlines[0]);
        assert!(back.headlines[1].value.is_nan());
        assert_eq!(back.headlines[1].not_run_reason(), Some("libpmem not found"));
        assert!(!back.headlines[1].pass);
    }

    #[test]
    fn metrics_are_top_level_fields_with_units() {
        let value = serde_json::to_value(sample()).unwrap();
        let first = &value["results"][0];
        assert_eq!(first["bench"], "copy");
        assert_eq!(first["size_bytes"], 4096);
        assert_eq!(first["gb_per_s"], 9.5);
        assert!(first.get("params").is_none());
        let second = &value["results"][1];
        assert!(second.get("size_bytes").is_none());
        assert_eq!(second["params"]["blocks"], 10);
        assert!(value["headlines"][1]["value"].is_null());
    }

    #[test]
    #[should_panic(expected = "is NaN")]
    fn non_finite_metrics_are_refused() {
        let _ = BenchResult::new("copy", "memcpy").metric("gb_per_s", f64::NAN);
    }
}
