//! Repeated, interleaved trials of the kv and http-wal suites, summarised.
//!
//! A suite records one [`BenchResult`] per trial and configuration, with
//! the trial's index in the parameter `trial`. [`aggregate`] folds them
//! into one result per configuration (same bench, variant, size and
//! parameters other than `trial`): every metric becomes its median over
//! the trials; the primary rate (the first metric ending in `_rps`,
//! `_ops_per_s` or `requests_per_s`) also gets `<rate>_min`,
//! `<rate>_max` and the parameter `<rate>_per_trial` with every value.
//! [`paired_ratios`] gives ours / peer trial by trial, the spread a
//! headline quotes beside its ratio of medians. A configuration whose
//! trials measured both sides' busy shares also gets the parameter
//! `bound`: what bounds its median trial (the trial of the median rate;
//! the lower of the two middle ones for an even count), by
//! [`Bound::of`], and `bound_per_trial` with every trial's verdict.

use std::collections::BTreeMap;

use super::bound::{self, Bound};
use crate::measure::Spread;
use crate::schema::BenchResult;
use crate::table;

/// The parameter holding a result's trial index.
pub const TRIAL: &str = "trial";

fn trial_of(result: &BenchResult) -> Option<u64> {
    result.params.get(TRIAL).and_then(|v| v.as_u64())
}

/// What identifies a configuration: everything but the trial index.
fn key_of(result: &BenchResult) -> String {
    let params: BTreeMap<&String, &serde_json::Value> = result.params.iter().filter(|(k, _)| *k != TRIAL).collect();
    format!("{}|{}|{:?}|{}", result.bench, result.variant, result.size_bytes, serde_json::json!(params))
}

/// The rate a result is judged by.
pub fn primary(result: &BenchResult) -> Option<&str> {
    let rate = |k: &&str| k.ends_with("_rps") || k.ends_with("_ops_per_s") || *k == "requests_per_s";
    result.metrics.keys().map(String::as_str).find(rate)
}

/// One result per configuration, in order of first appearance (see the
/// module docs).
pub fn aggregate(trials: &[BenchResult]) -> Vec<BenchResult> {
    let mut groups: BTreeMap<String, Vec<&BenchResult>> = BTreeMap::new();
    let mut order = Vec::new();
    for result in trials {
        let key = key_of(result);
        if !groups.contains_key(&key) {
            order.push(key.clone());
        }
        groups.entry(key).or_default().push(result);
    }
    order.into_iter().map(|key| summarise(&groups[&key])).collect()
}

fn summarise(group: &[&BenchResult]) -> BenchResult {
    let first = group[0];
    let mut out = BenchResult::new(&first.bench, &first.variant);
    out.size_bytes = first.size_bytes;
    for (k, v) in first.params.iter().filter(|(k, _)| *k != TRIAL) {
        out = out.param(k, v.clone());
    }
    out = out.param("trials", group.len() as u64);
    let rate = primary(first).map(str::to_string);
    let mut names: Vec<&String> = group.iter().flat_map(|r| r.metrics.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let mut values: Vec<f64> = group.iter().filter_map(|r| r.get(name)).collect();
        let per_trial = values.clone();
        let spread = Spread::of(&mut values);
        out = out.metric(name, spread.median);
        if rate.as_deref() == Some(name.as_str()) {
            out = out
                .metric(&format!("{name}_min"), spread.min)
                .metric(&format!("{name}_max"), spread.max)
                .param(&format!("{name}_per_trial"), per_trial);
        }
    }
    with_bound(out, group, rate.as_deref())
}

/// Adds the `bound` parameters (see the module docs) if every trial has
/// both busy shares.
fn with_bound(out: BenchResult, group: &[&BenchResult], rate: Option<&str>) -> BenchResult {
    let Some(rate) = rate else { return out };
    let verdicts: Option<Vec<Bound>> = group.iter().map(|r| Bound::of_result(r)).collect();
    let Some(verdicts) = verdicts else { return out };
    let mut by_rate: Vec<(f64, Bound)> = group.iter().map(|r| r.get(rate).unwrap_or(f64::NAN)).zip(verdicts.iter().copied()).collect();
    by_rate.sort_by(|a, b| a.0.total_cmp(&b.0));
    let median = by_rate[(by_rate.len() - 1) / 2].1;
    let names: Vec<&str> = verdicts.iter().map(|b| b.name()).collect();
    out.param(bound::BOUND, median.name()).param("bound_per_trial", names)
}

/// ours / peer of metric `name`, for each trial in which both have a
/// result with it, trials in ascending order.
pub fn paired_ratios(trials: &[BenchResult], ours: &str, peer: &str, name: &str) -> Vec<f64> {
    paired_ratios_where(trials, ours, peer, name, |_| true)
}

/// [`paired_ratios`] over the results `filter` accepts.
pub fn paired_ratios_where(
    trials: &[BenchResult],
    ours: &str,
    peer: &str,
    name: &str,
    filter: impl Fn(&BenchResult) -> bool,
) -> Vec<f64> {
    let at = |variant: &str, trial: u64| {
        trials
            .iter()
            .filter(|r| r.variant == variant && trial_of(r) == Some(trial) && filter(r))
            .find_map(|r| r.get(name))
    };
    let mut indices: Vec<u64> = trials.iter().filter_map(trial_of).collect();
    indices.sort_unstable();
    indices.dedup();
    indices.into_iter().filter_map(|t| Some(at(ours, t)? / at(peer, t)?)).collect()
}

/// A headline's peer text: the peer, and the per-trial ratios' range.
pub fn describe_peer(peer: &str, paired: &[f64]) -> String {
    if paired.is_empty() {
        return peer.to_string();
    }
    let spread = Spread::of(&mut paired.to_vec());
    format!("{peer} (ratio of medians over {} trials; per-trial ratios {:.2}-{:.2})", paired.len(), spread.min, spread.max)
}

/// [`describe_peer`] followed by what bounds the two rows' rates
/// ([`bound::headline_text`]), if both rows carry a verdict.
pub fn describe_peer_bound(peer: &str, paired: &[f64], rows: (Option<&BenchResult>, Option<&BenchResult>), generator: &str) -> String {
    let text = describe_peer(peer, paired);
    let (ours, theirs) = (rows.0.and_then(Bound::of_row), rows.1.and_then(Bound::of_row));
    match bound::headline_text(ours, theirs, generator) {
        Some(bound) => format!("{text}; {bound}"),
        None => text,
    }
}

/// One line per configuration: `label` parameter (or the size), server,
/// median, min, max, trials, the server's CPU per request, the
/// generator's, both sides' busy shares and what bounds the rate, where
/// measured.
pub fn spread_table(results: &[BenchResult], label: &str) -> String {
    let header = [
        "configuration",
        "server",
        "median/s",
        "min",
        "max",
        "trials",
        "server CPU us/req",
        "gen CPU us/req",
        "gen busy",
        "server busy",
        "bound (median trial)",
        "other load",
    ];
    let mut rows = vec![header.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for r in results {
        let Some(name) = primary(r) else { continue };
        let get = |m: &str| r.get(m).map(table::num).unwrap_or_else(|| "-".into());
        let percent = |m: &str| r.get(m).map(|v| format!("{:.0}%", v * 100.0)).unwrap_or_else(|| "-".into());
        let what = match r.params.get(label) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) => format!("{label} {v}"),
            None => String::new(),
        };
        let size = r.size_bytes.map(table::human_bytes).unwrap_or_default();
        rows.push(vec![
            format!("{size} {what}").trim().to_string(),
            r.variant.clone(),
            get(name),
            get(&format!("{name}_min")),
            get(&format!("{name}_max")),
            r.params.get("trials").map(|v| v.to_string()).unwrap_or_default(),
            get("server_cpu_us_per_request"),
            get(bound::GENERATOR_CPU),
            percent(bound::GENERATOR_BUSY),
            percent(bound::SERVER_BUSY),
            Bound::of_row(r).map(Bound::name).unwrap_or("-").to_string(),
            percent("other_processes_cpu_share"),
        ]);
    }
    table::render(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(variant: &str, t: u64, rps: f64) -> BenchResult {
        BenchResult::new("kv", variant).size(1024).param("test", "SET").param(TRIAL, t).metric("set_rps", rps).metric("latency_ms_p50", rps / 1000.0)
    }

    #[test]
    fn medians_and_spread_per_configuration() {
        let trials = vec![
            trial("ours", 0, 100.0),
            trial("peer", 0, 50.0),
            trial("ours", 1, 300.0),
            trial("peer", 1, 100.0),
            trial("ours", 2, 200.0),
            trial("peer", 2, 400.0),
        ];
        let results = aggregate(&trials);
        assert_eq!(results.len(), 2);
        let ours = &results[0];
        assert_eq!(ours.variant, "ours");
        assert_eq!(ours.get("set_rps"), Some(200.0));
        assert_eq!(ours.get("set_rps_min"), Some(100.0));
        assert_eq!(ours.get("set_rps_max"), Some(300.0));
        assert_eq!(ours.get("latency_ms_p50"), Some(0.2));
        assert_eq!(ours.get("latency_ms_p50_min"), None, "only the rate gets a spread");
        assert_eq!(ours.params.get("trials"), Some(&3u64.into()));
        assert_eq!(ours.params.get(TRIAL), None);
        assert_eq!(ours.params.get("set_rps_per_trial"), Some(&serde_json::json!([100.0, 300.0, 200.0])));
        assert_eq!(paired_ratios(&trials, "ours", "peer", "set_rps"), vec![2.0, 3.0, 0.5]);
        let text = describe_peer("peer", &[2.0, 3.0, 0.5]);
        assert!(text.contains("3 trials") && text.contains("0.50-3.00"), "{text}");
    }

    fn busy(t: u64, rps: f64, generator: f64, server: f64) -> BenchResult {
        trial("ours", t, rps).metric(bound::GENERATOR_BUSY, generator).metric(bound::SERVER_BUSY, server)
    }

    #[test]
    fn a_row_is_bound_as_its_median_trial() {
        // The median rate (200) is trial 2's, generator-bound; the others are server-bound.
        let trials = vec![busy(0, 100.0, 0.5, 0.99), busy(1, 300.0, 0.6, 0.98), busy(2, 200.0, 0.99, 0.8)];
        let row = &aggregate(&trials)[0];
        assert_eq!(Bound::of_row(row), Some(Bound::Generator));
        assert_eq!(row.params.get("bound_per_trial"), Some(&serde_json::json!(["server-bound", "server-bound", "generator-bound"])));
        assert_eq!(row.get(bound::GENERATOR_BUSY), Some(0.6), "the shares themselves are medians");
        // Even count: the lower middle trial (100 of 100, 300).
        let row = &aggregate(&trials[..2])[0];
        assert_eq!(Bound::of_row(row), Some(Bound::Server));
        // A trial without the shares: no verdict.
        let row = &aggregate(&[busy(0, 1.0, 1.0, 0.1), trial("ours", 1, 2.0)])[0];
        assert_eq!(Bound::of_row(row), None);
        assert!(spread_table(&aggregate(&trials), "test").contains("generator-bound"));
    }

    #[test]
    fn headline_peer_text_names_the_bound() {
        let generator = aggregate(&[busy(0, 1.0, 0.99, 0.8)]);
        let text = describe_peer_bound("redis", &[1.0], (generator.first(), generator.first()), "redis-benchmark");
        assert!(text.starts_with("redis (ratio of medians over 1 trials"), "{text}");
        assert!(text.ends_with("; generator-bound in both: the ratio measures redis-benchmark, not the servers"), "{text}");
        assert_eq!(describe_peer_bound("redis", &[], (None, generator.first()), "x"), "redis");
    }

    #[test]
    fn requests_per_second_is_a_rate() {
        let r = BenchResult::new("http-wal", "ours").metric("gb_per_s", 1.0).metric("requests_per_s", 2.0);
        assert_eq!(primary(&r), Some("requests_per_s"));
        assert_eq!(primary(&BenchResult::new("x", "y").metric("gb_per_s", 1.0)), None);
    }

    #[test]
    fn different_parameters_are_different_configurations() {
        let a = trial("ours", 0, 1.0).param("connections", 1u64);
        let b = trial("ours", 0, 2.0).param("connections", 50u64);
        assert_eq!(aggregate(&[a.clone(), b.clone()]).len(), 2);
        let pairs = paired_ratios_where(&[a, b], "ours", "ours", "set_rps", |r| r.params.get("connections") == Some(&50u64.into()));
        assert_eq!(pairs, vec![1.0]);
    }

    #[test]
    fn a_trial_missing_one_side_is_not_paired() {
        let trials = vec![trial("ours", 0, 100.0), trial("ours", 1, 100.0), trial("peer", 1, 50.0)];
        assert_eq!(paired_ratios(&trials, "ours", "peer", "set_rps"), vec![2.0]);
    }
}
