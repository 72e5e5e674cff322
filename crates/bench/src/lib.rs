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
//! - [`ports`]: loopback ports below the ephemeral range, for members
//!   that must name each other before they start.
//! - [`schema`]: the JSON format.
//! - [`repeat`]: `--repeat N`, each headline's worst value across runs.
//! - [`smr`]: the replication benchmark's peers (etcd, Redis + WAIT).
//! - [`mirror`]: `pmwire bench mirror`, seed 002's Transact over the
//!   mirror (SM-RC, SM-OB, SM-DD against NO-SM, over tcp and sm).
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
pub mod kvrep;
pub mod local;
pub mod logbench;
pub mod machine;
pub mod measure;
pub mod mirror;
pub mod mirror_crash;
pub mod mirror_peer;
pub mod persist;
pub mod ports;
pub mod whisper;
pub mod pmdk;
pub mod remote;
pub mod repeat;
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
///
/// Its verdict ([`Headline::verdict`]) is one of pass, FAIL, BOUND (missed,
/// but a floor measured in the same run misses the target too and ours is
/// within the floor's stated fraction: [`Floor`]), NOT RUN, or info.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Headline {
    /// What is compared.
    pub name: String,
    /// The ratio; NaN (`null` in JSON) when it could not be measured. With
    /// several runs ([`repeat`]), the worst of them.
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
    /// The target as a number and a direction (absent in files written
    /// before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<Goal>,
    /// A floor measured in the same run that bounds this ratio here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor: Option<Floor>,
    /// Missed, but bound by [`Headline::floor`]: the floor itself misses the
    /// target and ours is within the floor's fraction. Never with `pass`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bound: bool,
    /// With several runs ([`repeat`]): each run's value in run order
    /// (`null` where a run did not measure it); `value` is the worst.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<Option<f64>>,
    /// The value's unit when it is not a ratio (`ms`, `MB/s`): printed
    /// after the value instead of `x`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

/// A headline's target as a number: `value >= ratio` or `value <= ratio`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Goal {
    /// Higher is better (`>=`); otherwise lower is better (`<=`).
    pub at_least: bool,
    /// The bound.
    pub ratio: f64,
}

impl Goal {
    /// `>= ratio`.
    pub fn at_least(ratio: f64) -> Goal {
        assert!(ratio.is_finite(), "goal {ratio}");
        Goal { at_least: true, ratio }
    }

    /// `<= ratio`.
    pub fn at_most(ratio: f64) -> Goal {
        assert!(ratio.is_finite(), "goal {ratio}");
        Goal { at_least: false, ratio }
    }

    /// Whether `value` meets the goal (never when it is not finite).
    pub fn met(&self, value: f64) -> bool {
        value.is_finite() && if self.at_least { value >= self.ratio } else { value <= self.ratio }
    }

    /// Whether `a` is further from the goal's direction than `b` (lower
    /// when higher is better, higher when lower is better).
    pub fn worse(&self, a: f64, b: f64) -> bool {
        if self.at_least {
            a < b
        } else {
            a > b
        }
    }

    /// Ours relative to a floor, oriented so that higher is better and 1.0
    /// is the floor: `ours / floor` when higher is better, `floor / ours`
    /// when lower is better (both ratios against the same peer).
    pub fn fraction_of_floor(&self, ours: f64, floor: f64) -> f64 {
        if self.at_least {
            ours / floor
        } else {
            floor / ours
        }
    }
}

/// A floor measured in the same run: the best any implementation of this
/// kind could do on this machine (e.g. the persist floor: the same bytes
/// persisted with no log), as a ratio against the headline's peer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Floor {
    /// What the floor is, e.g. `persist floor`.
    pub name: String,
    /// The floor / the headline's peer, in the headline's units.
    #[serde(with = "schema::finite_or_null")]
    pub vs_peer: f64,
    /// Ours as a fraction of the floor, 1.0 = at the floor, higher is
    /// better ([`Goal::fraction_of_floor`]).
    #[serde(with = "schema::finite_or_null")]
    pub ours_of_floor: f64,
    /// The fraction of the floor at and above which a miss is bound by the
    /// floor rather than ours.
    pub within: f64,
}

impl Floor {
    /// `persist floor 1.52x here; ours at 0.93x of it (bound from 0.93x)`.
    pub fn text(&self) -> String {
        format!(
            "{} {}x here; ours at {}x of it (bound from {}x)",
            self.name,
            table::num(self.vs_peer),
            table::num(self.ours_of_floor),
            table::num(self.within)
        )
    }
}

/// What a headline says about its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Met.
    Pass,
    /// Missed, and not because of a measured floor.
    Fail,
    /// Missed, but the floor measured in the same run misses it too and
    /// ours is within the floor's fraction: this machine cannot meet it.
    Bound,
    /// A side did not run.
    NotRun,
    /// Shown for information only.
    Info,
}

impl Verdict {
    /// As the tables print it.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "FAIL",
            Verdict::Bound => "BOUND",
            Verdict::NotRun => "NOT RUN",
            Verdict::Info => "info",
        }
    }
}

/// How many of a suite's target headlines (not information) passed, were
/// bound by a floor, failed, or did not run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Met.
    pub pass: usize,
    /// Bound by a floor measured in the same run.
    pub bound: usize,
    /// Missed.
    pub fail: usize,
    /// Not run.
    pub not_run: usize,
}

impl Tally {
    /// Counts `headlines`.
    pub fn of(headlines: &[Headline]) -> Tally {
        let mut t = Tally::default();
        for h in headlines {
            match h.verdict() {
                Verdict::Pass => t.pass += 1,
                Verdict::Bound => t.bound += 1,
                Verdict::Fail => t.fail += 1,
                Verdict::NotRun => t.not_run += 1,
                Verdict::Info => {}
            }
        }
        t
    }

    /// Targets counted.
    pub fn targets(&self) -> usize {
        self.pass + self.bound + self.fail + self.not_run
    }

    /// `3 of 4 headlines met their targets, 1 bound by this machine's floor, 0 failed, 0 not run`.
    pub fn text(&self) -> String {
        format!(
            "{} of {} headlines met their targets, {} bound by this machine's floor, {} failed, {} not run",
            self.pass,
            self.targets(),
            self.bound,
            self.fail,
            self.not_run
        )
    }
}

const NOT_RUN: &str = "not run: ";

impl Headline {
    /// A measured ratio against `goal`: passes when the goal is met.
    pub fn measured(name: &str, value: f64, target: &str, goal: Goal, peer: &str) -> Headline {
        Headline {
            name: name.to_string(),
            value,
            target: target.to_string(),
            pass: goal.met(value),
            peer: peer.to_string(),
            informational: false,
            goal: Some(goal),
            floor: None,
            bound: false,
            runs: Vec::new(),
            unit: None,
        }
    }

    /// A headline whose peer (or our side) could not run.
    pub fn not_run(name: &str, target: &str, reason: &str) -> Headline {
        Headline {
            name: name.to_string(),
            value: f64::NAN,
            target: target.to_string(),
            pass: false,
            peer: format!("{NOT_RUN}{reason}"),
            informational: false,
            goal: None,
            floor: None,
            bound: false,
            runs: Vec::new(),
            unit: None,
        }
    }

    /// Prints the value in `unit` (a measurement, not a ratio).
    pub fn in_unit(mut self, unit: &str) -> Headline {
        self.unit = Some(unit.to_string());
        self
    }

    /// The value as printed: `1.234x` for a ratio, `34.908 ms` with a unit.
    pub fn value_text(&self) -> String {
        match &self.unit {
            Some(unit) => format!("{:.3} {unit}", self.value),
            None => format!("{:.3}x", self.value),
        }
    }

    /// Marks the headline as shown for information only.
    pub fn for_information(mut self) -> Headline {
        self.informational = true;
        self.bound = false;
        self
    }

    /// Attaches the floor `name` measured in the same run, as its ratio
    /// against this headline's peer (`None`: the floor did not run, and the
    /// headline stays as it is). The headline is bound by it when it missed
    /// its goal, the floor misses the goal too, and ours is at least
    /// `within` of the floor ([`Goal::fraction_of_floor`]).
    pub fn with_floor(mut self, name: &str, floor_vs_peer: Option<f64>, within: f64) -> Headline {
        assert!(within > 0.0 && within.is_finite(), "within {within}");
        let (Some(goal), Some(vs_peer)) = (self.goal, floor_vs_peer.filter(|v| v.is_finite() && *v > 0.0)) else {
            return self;
        };
        let ours_of_floor = goal.fraction_of_floor(self.value, vs_peer);
        self.floor = Some(Floor { name: name.to_string(), vs_peer, ours_of_floor, within });
        self.bound = self.is_bound_by_floor();
        self
    }

    /// Missed, measured, a target, and the floor explains the miss.
    fn is_bound_by_floor(&self) -> bool {
        let (Some(goal), Some(floor)) = (self.goal, &self.floor) else {
            return false;
        };
        let missed = !self.pass && !self.informational && self.value.is_finite();
        missed && !goal.met(floor.vs_peer) && floor.ours_of_floor >= floor.within
    }

    /// Why it did not run, if it did not.
    pub fn not_run_reason(&self) -> Option<&str> {
        self.peer.strip_prefix(NOT_RUN)
    }

    /// Pass, FAIL, BOUND, NOT RUN or info.
    pub fn verdict(&self) -> Verdict {
        if self.not_run_reason().is_some() || !self.value.is_finite() {
            Verdict::NotRun
        } else if self.informational {
            Verdict::Info
        } else if self.pass {
            Verdict::Pass
        } else if self.bound {
            Verdict::Bound
        } else {
            Verdict::Fail
        }
    }
}

/// Prints the headlines as a table to stdout.
pub fn print_headlines(h: &[Headline]) {
    print!("{}", table::headlines_text(h));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lower_is_better_floor_is_oriented_so_higher_is_better() {
        // pmwire 130 us, floor 110 us, peer 500 us: ours 0.26x, floor 0.22x
        // against a target of <= 0.1x.
        let h = Headline::measured("smr", 0.26, "<= 0.1x", Goal::at_most(0.1), "etcd").with_floor("floor", Some(0.22), 0.8);
        let floor = h.floor.as_ref().unwrap();
        assert!((floor.ours_of_floor - 0.22 / 0.26).abs() < 1e-12);
        assert_eq!(h.verdict(), Verdict::Bound);
        let h = Headline::measured("smr", 0.30, "<= 0.1x", Goal::at_most(0.1), "etcd").with_floor("floor", Some(0.22), 0.8);
        assert_eq!(h.verdict(), Verdict::Fail, "0.73 of the floor");
    }

    #[test]
    fn a_floor_never_changes_a_pass_a_not_run_or_information() {
        let pass = Headline::measured("h", 2.1, ">= 2x", Goal::at_least(2.0), "p").with_floor("f", Some(1.5), 0.5);
        assert_eq!(pass.verdict(), Verdict::Pass);
        assert!(!pass.bound);
        let missing = Headline { goal: Some(Goal::at_least(2.0)), ..Headline::not_run("h", ">= 2x", "gone") }.with_floor("f", Some(1.5), 0.5);
        assert_eq!(missing.verdict(), Verdict::NotRun);
        let info = Headline::measured("h", 1.4, ">= 2x", Goal::at_least(2.0), "p").with_floor("f", Some(1.5), 0.9).for_information();
        assert_eq!(info.verdict(), Verdict::Info);
        assert!(!info.bound);
        let no_floor = Headline::measured("h", 1.4, ">= 2x", Goal::at_least(2.0), "p").with_floor("f", None, 0.9);
        assert!(no_floor.floor.is_none());
        assert_eq!(no_floor.verdict(), Verdict::Fail);
    }

    #[test]
    fn the_tally_counts_bound_apart_from_pass_and_fail() {
        let goal = Goal::at_least(2.0);
        let headlines = vec![
            Headline::measured("a", 2.5, ">= 2x", goal, "p"),
            Headline::measured("b", 1.4, ">= 2x", goal, "p").with_floor("f", Some(1.5), 0.9),
            Headline::measured("c", 1.0, ">= 2x", goal, "p"),
            Headline::not_run("d", ">= 2x", "gone"),
            Headline::measured("e", 1.0, ">= 2x", goal, "p").for_information(),
        ];
        let t = Tally::of(&headlines);
        assert_eq!(t, Tally { pass: 1, bound: 1, fail: 1, not_run: 1 });
        assert_eq!(t.text(), "1 of 4 headlines met their targets, 1 bound by this machine's floor, 1 failed, 1 not run");
    }

    #[test]
    fn old_headlines_read_without_the_new_fields() {
        let old = r#"{"name": "a", "value": 1.2, "target": ">= 1x", "pass": true, "peer": "p"}"#;
        let h: Headline = serde_json::from_str(old).unwrap();
        assert_eq!((h.goal, h.floor.is_none(), h.bound, h.runs.is_empty()), (None, true, false, true));
        assert_eq!(h.verdict(), Verdict::Pass);
        let text = serde_json::to_string(&h).unwrap();
        assert!(!text.contains("floor") && !text.contains("bound") && !text.contains("runs"), "{text}");
    }
}
