//! `--repeat N`: a suite run N times in a row, each headline reported at
//! its worst value across the runs, so a figure quoted from it is one the
//! machine gives every time, not on a good run.
//!
//! Worst means furthest from the target's direction ([`Goal::worse`]): the
//! lowest value of a `>=` target, the highest of a `<=` one. The worst
//! run's headline is kept whole (its peer text and its floor, measured in
//! the same run as the value), with every run's value in
//! [`Headline::runs`]. The aggregate passes only if every run passed, and
//! is BOUND only if every run that missed was bound by its floor. A
//! headline missing or not run in any run is NOT RUN in the aggregate (the
//! runs it has are still listed). Headlines are matched by name.
//!
//! Each run writes its own suite file as usual; [`run`] then writes one
//! more, `<suite>-worst-of-<N>-<stamp>.json`, with the aggregated
//! headlines, the runs' files in `parameters.run_files`, and no results of
//! its own (they are in the runs' files).

use std::path::Path;

use anyhow::{ensure, Context, Result};

use crate::schema::SuiteFile;
use crate::{Headline, SuiteReport, Verdict};

/// Each headline's worst value across `runs` (one headline list per run).
pub fn worst_of(runs: &[Vec<Headline>]) -> Vec<Headline> {
    assert!(!runs.is_empty(), "worst of no runs");
    let mut names: Vec<&str> = Vec::new();
    for h in runs.iter().flatten() {
        if !names.contains(&h.name.as_str()) {
            names.push(&h.name);
        }
    }
    names.into_iter().map(|name| worst_one(name, runs)).collect()
}

fn worst_one(name: &str, runs: &[Vec<Headline>]) -> Headline {
    let per_run: Vec<Option<&Headline>> = runs.iter().map(|run| run.iter().find(|h| h.name == name)).collect();
    let values: Vec<Option<f64>> = per_run.iter().map(|h| h.map(|h| h.value).filter(|v| v.is_finite())).collect();
    let first = *per_run.iter().flatten().next().expect("the name comes from some run");
    let missing = per_run.iter().enumerate().find(|(_, h)| h.is_none_or(|h| h.verdict() == Verdict::NotRun));
    if let Some((index, h)) = missing {
        let reason = match h {
            Some(h) => h.not_run_reason().unwrap_or("no value").to_string(),
            None => "absent".to_string(),
        };
        let mut out = Headline::not_run(name, &first.target, &format!("run {}: {reason}", index + 1));
        out.informational = first.informational;
        out.goal = first.goal;
        out.runs = values;
        return out;
    }
    let measured: Vec<&Headline> = per_run.iter().flatten().copied().collect();
    // Without a goal (files from before goals existed) the direction is
    // unknown: the first run stands, with every run's value beside it.
    let worst = match first.goal {
        Some(goal) => measured.iter().copied().reduce(|w, h| if goal.worse(h.value, w.value) { h } else { w }).expect("runs"),
        None => first,
    };
    let mut out = worst.clone();
    out.pass = measured.iter().all(|h| h.pass);
    out.bound = !out.pass && !out.informational && measured.iter().all(|h| matches!(h.verdict(), Verdict::Pass | Verdict::Bound));
    out.runs = values;
    out
}

/// Runs `one` (run index from 0) `repeat` times, then writes the
/// aggregated suite file into `out_dir` and prints its headlines.
pub fn run<F>(suite: &str, repeat: usize, out_dir: &Path, mut one: F) -> Result<SuiteReport>
where
    F: FnMut(usize) -> Result<SuiteReport>,
{
    ensure!(repeat >= 1, "--repeat must be at least 1");
    let mut reports = Vec::with_capacity(repeat);
    for i in 0..repeat {
        if repeat > 1 {
            println!("\n== {suite}: run {} of {repeat} ==", i + 1);
        }
        reports.push(one(i)?);
    }
    if repeat == 1 {
        return Ok(reports.pop().expect("one run"));
    }
    let files: Vec<SuiteFile> = reports
        .iter()
        .map(|r| {
            let text = std::fs::read_to_string(&r.json_path).with_context(|| format!("read {}", r.json_path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("parse {}", r.json_path.display()))
        })
        .collect::<Result<_>>()?;
    let headlines = worst_of(&reports.iter().map(|r| r.headlines.clone()).collect::<Vec<_>>());
    let command = files[0].parameters.get("command").and_then(|c| c.as_str()).unwrap_or(suite).to_string();
    let parameters = serde_json::json!({
        "command": format!("{command} --repeat {repeat}"),
        "repeat": repeat,
        "run_files": reports.iter().map(|r| r.json_path.display().to_string()).collect::<Vec<_>>(),
        "aggregation": "each headline's worst value across the runs (furthest from its target's direction); `runs` holds every run's value",
    });
    let file = SuiteFile {
        suite: suite.to_string(),
        pmwire_version: env!("CARGO_PKG_VERSION").to_string(),
        machine: crate::machine::describe(None),
        parameters,
        peers: files[0].peers.clone(),
        results: Vec::new(),
        skipped: Vec::new(),
        headlines: headlines.clone(),
    };
    let json_path = out_dir.join(format!("{suite}-worst-of-{repeat}-{}.json", crate::machine::utc_stamp()));
    std::fs::write(&json_path, serde_json::to_string_pretty(&file)? + "\n")?;
    println!("\n== {suite}: each headline's worst value across {repeat} runs ==");
    crate::print_headlines(&headlines);
    Ok(SuiteReport { suite: suite.to_string(), json_path, headlines })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Goal;

    fn at_least(name: &str, value: f64) -> Headline {
        Headline::measured(name, value, ">= 2x peer", Goal::at_least(2.0), "peer")
    }

    fn at_most(name: &str, value: f64) -> Headline {
        Headline::measured(name, value, "<= 1.2x peer", Goal::at_most(1.2), "peer")
    }

    #[test]
    fn higher_is_better_keeps_the_lowest() {
        let runs = vec![vec![at_least("h", 2.5)], vec![at_least("h", 1.9)], vec![at_least("h", 3.0)]];
        let w = worst_of(&runs);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].value, 1.9);
        assert!(!w[0].pass, "one run missed");
        assert_eq!(w[0].verdict(), Verdict::Fail);
        assert_eq!(w[0].runs, vec![Some(2.5), Some(1.9), Some(3.0)]);
    }

    #[test]
    fn lower_is_better_keeps_the_highest() {
        let runs = vec![vec![at_most("h", 1.0)], vec![at_most("h", 1.1)], vec![at_most("h", 0.9)]];
        let w = worst_of(&runs);
        assert_eq!(w[0].value, 1.1);
        assert!(w[0].pass, "every run met <= 1.2x");
        assert_eq!(w[0].runs, vec![Some(1.0), Some(1.1), Some(0.9)]);
        let runs = vec![vec![at_most("h", 1.0)], vec![at_most("h", 1.5)]];
        assert_eq!(worst_of(&runs)[0].value, 1.5);
        assert!(!worst_of(&runs)[0].pass);
    }

    #[test]
    fn each_headline_is_aggregated_on_its_own_in_first_seen_order() {
        let runs = vec![
            vec![at_least("a", 2.2), at_most("b", 1.3)],
            vec![at_most("b", 1.0), at_least("a", 2.1)],
        ];
        let w = worst_of(&runs);
        assert_eq!(w.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!((w[0].value, w[0].pass), (2.1, true));
        assert_eq!((w[1].value, w[1].pass), (1.3, false));
    }

    #[test]
    fn a_run_that_did_not_measure_makes_it_not_run() {
        let missing = Headline { goal: Some(Goal::at_least(2.0)), ..Headline::not_run("h", ">= 2x peer", "peer gone") };
        let runs = vec![vec![at_least("h", 2.5)], vec![missing], vec![at_least("h", 2.4)]];
        let w = worst_of(&runs);
        assert_eq!(w[0].verdict(), Verdict::NotRun);
        assert_eq!(w[0].not_run_reason(), Some("run 2: peer gone"));
        assert_eq!(w[0].runs, vec![Some(2.5), None, Some(2.4)]);
        let absent = vec![vec![at_least("h", 2.5)], vec![]];
        assert_eq!(worst_of(&absent)[0].not_run_reason(), Some("run 2: absent"));
    }

    #[test]
    fn the_worst_run_keeps_its_own_floor_and_a_plain_miss_is_never_bound() {
        // Run 1 misses (1.4) but its floor (1.5) misses too and ours is
        // 0.93x of it: bound. Run 2 misses (1.5) while its floor (2.1) met
        // the target: a plain miss.
        let bound = at_least("h", 1.4).with_floor("floor", Some(1.5), 0.9);
        assert_eq!(bound.verdict(), Verdict::Bound);
        let plain = at_least("h", 1.5).with_floor("floor", Some(2.1), 0.9);
        assert_eq!(plain.verdict(), Verdict::Fail);
        let w = worst_of(&[vec![bound.clone()], vec![plain]]);
        assert_eq!(w[0].value, 1.4);
        assert_eq!(w[0].floor.as_ref().unwrap().vs_peer, 1.5, "the worst run's own floor");
        assert_eq!(w[0].verdict(), Verdict::Fail, "one run missed for a reason of ours");
        let w = worst_of(&[vec![bound.clone()], vec![at_least("h", 2.5)]]);
        assert_eq!(w[0].verdict(), Verdict::Bound);
        assert!(!w[0].pass);
    }

    /// A suite run that writes its file as the suites do, with `value`.
    fn fake_run(dir: &Path, run: usize, value: f64) -> Result<SuiteReport> {
        let headlines = vec![at_most("lat", value), at_least("bw", 3.0 - value)];
        let file = SuiteFile {
            suite: "fake".into(),
            pmwire_version: "0".into(),
            machine: serde_json::json!({}),
            parameters: serde_json::json!({"command": "pmwire bench fake --quick"}),
            peers: serde_json::json!({"peer": "1.0"}),
            results: Vec::new(),
            skipped: Vec::new(),
            headlines: headlines.clone(),
        };
        let json_path = dir.join(format!("fake-{run}.json"));
        std::fs::write(&json_path, serde_json::to_string(&file)?)?;
        Ok(SuiteReport { suite: "fake".into(), json_path, headlines })
    }

    #[test]
    fn the_aggregate_file_holds_the_worst_and_every_run() {
        let dir = tempfile::tempdir().unwrap();
        let values = [1.0, 1.3, 1.1];
        let report = run("fake", 3, dir.path(), |i| fake_run(dir.path(), i, values[i])).unwrap();
        assert!(report.json_path.file_name().unwrap().to_str().unwrap().starts_with("fake-worst-of-3-"));
        let file: SuiteFile = serde_json::from_str(&std::fs::read_to_string(&report.json_path).unwrap()).unwrap();
        assert_eq!(file.parameters["command"], "pmwire bench fake --quick --repeat 3");
        assert_eq!(file.parameters["run_files"].as_array().unwrap().len(), 3);
        assert_eq!(file.peers["peer"], "1.0");
        let lat = &file.headlines[0];
        assert_eq!((lat.value, lat.pass), (1.3, false));
        assert_eq!(lat.runs, vec![Some(1.0), Some(1.3), Some(1.1)]);
        let bw = &file.headlines[1];
        assert!((bw.value - 1.7).abs() < 1e-9, "3 - 1.3, the lowest");
        assert!(!bw.pass);
        assert_eq!(report.headlines, file.headlines);
    }

    #[test]
    fn a_single_run_writes_no_aggregate() {
        let dir = tempfile::tempdir().unwrap();
        let report = run("fake", 1, dir.path(), |i| fake_run(dir.path(), i, 1.0)).unwrap();
        assert!(report.json_path.ends_with("fake-0.json"));
        assert!(report.headlines[0].runs.is_empty());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(run("fake", 0, dir.path(), |i| fake_run(dir.path(), i, 1.0)).is_err());
    }

    #[test]
    fn one_run_is_that_run() {
        let w = worst_of(&[vec![at_least("h", 2.5)]]);
        assert_eq!((w[0].value, w[0].pass), (2.5, true));
        assert_eq!(w[0].runs, vec![Some(2.5)]);
    }
}
