//! `pmwire-bench`: the benchmark suites, their peers, the JSON they write,
//! and the HTML report.
//!
//! The only crate in pmwire that touches a competitor: PMDK is loaded at
//! run time ([`pmdk`]), so everything builds and runs without it and the
//! PMDK rows then say why they did not run.
//!
//! - [`local`]: `pmwire bench local`, single-threaded persistence
//!   benchmarks on one region: copy bandwidth, the non-temporal threshold,
//!   persist latency, counters and registers, log appends.
//! - [`headlines`]: the ratios against the peers, with pass or fail.
//! - [`report`]: any number of result files → `index.html` with SVG plots.
//! - [`remote`]: `pmwire serve` children, the kill -9 crash campaign, and
//!   the remote suites (latency, bulk, log server) over UCX tcp and sm.
//! - [`machine`]: what the numbers were measured on.
//! - [`schema`]: the JSON format.
//! - [`smr`]: the replication benchmark's peers (etcd, Redis + WAIT).
//!
//! ```no_run
//! use pmwire_bench::local::{run, LocalOptions};
//! let report = run(&LocalOptions {
//!     pool: "/dev/shm/pmwire-bench.pool".into(),
//!     size_bytes: 1 << 30,
//!     quick: true,
//!     out_dir: "results".into(),
//!     region: pmem::RegionOptions::default(),
//!     only: Vec::new(),
//! })
//! .unwrap();
//! let index = pmwire_bench::report::write(&[report.json_path.clone()], "report".as_ref()).unwrap();
//! println!("{} headlines; report at {}", report.headlines.len(), index.display());
//! ```
#![deny(missing_docs)]

pub mod copy;
pub mod headlines;
pub mod kv;
pub mod local;
pub mod logbench;
pub mod machine;
pub mod measure;
pub mod persist;
pub mod pmdk;
pub mod remote;
pub mod report;
pub mod schema;
pub mod smr;
mod spawn;
pub mod table;

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What a suite run produced.
#[derive(Clone, Debug)]
pub struct SuiteReport {
    /// The suite (`local`).
    pub suite: String,
    /// The JSON file written.
    pub json_path: PathBuf,
    /// The headline ratios of this run.
    pub headlines: Vec<Headline>,
}

/// A ratio against a named peer, measured in the same run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Headline {
    /// What is compared.
    pub name: String,
    /// The ratio; NaN (`null` in JSON) when it could not be measured.
    #[serde(with = "schema::finite_or_null")]
    pub value: f64,
    /// The target, e.g. `>= 0.95x pmem_memcpy_persist`.
    pub target: String,
    /// Whether the target was met (never when not run).
    pub pass: bool,
    /// The peer and its version, or `not run: <reason>`.
    pub peer: String,
    /// Shown for information: not one of the targets, never counted as
    /// met or missed.
    #[serde(default)]
    pub informational: bool,
}

const NOT_RUN: &str = "not run: ";

impl Headline {
    /// A headline whose peer (or our side) could not run.
    pub fn not_run(name: &str, target: &str, reason: &str) -> Headline {
        Headline {
            name: name.to_string(),
            value: f64::NAN,
            target: target.to_string(),
            pass: false,
            peer: format!("{NOT_RUN}{reason}"),
            informational: false,
        }
    }

    /// Marks the headline as shown for information only.
    pub fn for_information(mut self) -> Headline {
        self.informational = true;
        self
    }

    /// Why it did not run, if it did not.
    pub fn not_run_reason(&self) -> Option<&str> {
        self.peer.strip_prefix(NOT_RUN)
    }
}

/// Prints the headlines as a table to stdout.
pub fn print_headlines(h: &[Headline]) {
    print!("{}", table::headlines_text(h));
}
