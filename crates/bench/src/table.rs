//! Plain-text tables for the terminal: results pivoted by size, and the
//! headlines. No colours, so the output reads the same in a log file.

use crate::schema::{BenchResult, Skipped};
use crate::{Floor, Headline, Verdict};
use std::fmt::Write;

/// Renders rows as left-aligned columns separated by two spaces.
pub fn render(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row.iter().enumerate().map(|(c, cell)| format!("{cell:<w$}", w = widths[c])).collect();
        writeln!(out, "{}", line.join("  ").trim_end()).unwrap();
    }
    out
}

/// `4096` → `4 KiB`.
pub fn human_bytes(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

/// A number with about three significant digits.
pub fn num(value: f64) -> String {
    if !value.is_finite() {
        return "-".into();
    }
    let magnitude = value.abs();
    if magnitude >= 100.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else if magnitude >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

/// The metric shown in a bench's summary table.
pub fn primary_metric(results: &[&BenchResult]) -> Option<String> {
    for preferred in ["mops_per_s", "gb_per_s", "latency_ns_p50", "crossover_bytes"] {
        if results.iter().any(|r| r.metrics.contains_key(preferred)) {
            return Some(preferred.to_string());
        }
    }
    results.iter().flat_map(|r| r.metrics.keys()).next().cloned()
}

fn benches(results: &[BenchResult]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in results {
        if !names.contains(&r.bench) {
            names.push(r.bench.clone());
        }
    }
    names
}

fn variants(results: &[&BenchResult]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in results {
        if !names.contains(&r.variant) {
            names.push(r.variant.clone());
        }
    }
    names
}

/// A bench with sizes: one row per size, one column per variant.
fn pivot(results: &[&BenchResult], metric: &str) -> String {
    let columns = variants(results);
    let mut sizes: Vec<u64> = results.iter().filter_map(|r| r.size_bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut rows = vec![std::iter::once("size".to_string()).chain(columns.iter().cloned()).collect::<Vec<_>>()];
    for size in sizes {
        let mut row = vec![human_bytes(size)];
        for variant in &columns {
            let cell = results
                .iter()
                .find(|r| r.size_bytes == Some(size) && &r.variant == variant)
                .and_then(|r| r.get(metric))
                .map_or("-".to_string(), num);
            row.push(cell);
        }
        rows.push(row);
    }
    render(&rows)
}

/// A metric's value: a `_count` as a whole number, others as [`num`].
fn metric_text(metric: &str, value: f64) -> String {
    if metric.ends_with("_count") && value.is_finite() && value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        num(value)
    }
}

/// A bench without sizes: one row per variant, one column per metric.
fn listing(results: &[&BenchResult]) -> String {
    let mut metrics: Vec<String> = Vec::new();
    for r in results {
        for key in r.metrics.keys() {
            if !metrics.contains(key) && !key.ends_with("_min") && !key.ends_with("_max") {
                metrics.push(key.clone());
            }
        }
    }
    let mut rows = vec![std::iter::once("variant".to_string()).chain(metrics.iter().cloned()).collect::<Vec<_>>()];
    for r in results {
        let mut row = vec![r.variant.clone()];
        row.extend(metrics.iter().map(|m| r.get(m).map_or("-".to_string(), |v| metric_text(m, v))));
        rows.push(row);
    }
    render(&rows)
}

/// Every bench as a table, then what was skipped.
pub fn results_text(results: &[BenchResult], skipped: &[Skipped]) -> String {
    let mut out = String::new();
    for bench in benches(results) {
        let group: Vec<&BenchResult> = results.iter().filter(|r| r.bench == bench).collect();
        if group.iter().all(|r| r.size_bytes.is_some()) {
            let metric = primary_metric(&group).unwrap_or_default();
            writeln!(out, "\n{bench} ({metric}, median of rounds)").unwrap();
            out.push_str(&pivot(&group, &metric));
        } else {
            writeln!(out, "\n{bench}").unwrap();
            out.push_str(&listing(&group));
        }
    }
    if !skipped.is_empty() {
        writeln!(out, "\nnot run").unwrap();
        for s in skipped {
            writeln!(out, "  {}/{}: {}", s.bench, s.variant, s.reason).unwrap();
        }
    }
    out
}

/// The headline table. A `floor here` column appears when a headline
/// carries a floor measured in the same run, a `runs` column when the
/// headlines aggregate several runs (the value is then the worst).
pub fn headlines_text(headlines: &[Headline]) -> String {
    if headlines.is_empty() {
        return String::new();
    }
    let floors = headlines.iter().any(|h| h.floor.is_some());
    let runs = headlines.iter().any(|h| !h.runs.is_empty());
    let mut header: Vec<String> = ["headline", "value", "target", "result", "peer"].map(String::from).to_vec();
    if floors {
        header.push("floor here".into());
    }
    if runs {
        header.push("runs (value = worst)".into());
    }
    let mut rows = vec![header];
    for h in headlines {
        let verdict = h.verdict();
        let value = if verdict == Verdict::NotRun { "-".to_string() } else { h.value_text() };
        let mut row = vec![h.name.clone(), value, h.target.clone(), verdict.label().to_string(), h.peer.clone()];
        if floors {
            row.push(h.floor.as_ref().map_or("-".to_string(), Floor::text));
        }
        if runs {
            row.push(h.runs.iter().map(|v| v.map_or("-".to_string(), num)).collect::<Vec<_>>().join(" / "));
        }
        rows.push(row);
    }
    render(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_print_as_whole_numbers_and_no_headlines_print_nothing() {
        let r =
            BenchResult::new("b", "v").metric("lost_count", 0.0).metric("runs_count", 100.0).metric("gb_per_s", 2.0);
        let text = listing(&[&r]);
        let row = text.lines().nth(1).unwrap().split_whitespace().collect::<Vec<_>>();
        assert_eq!(row, ["v", "2.00", "0", "100"], "{text}");
        assert_eq!(headlines_text(&[]), "");
    }

    #[test]
    fn informational_headlines_are_neither_pass_nor_fail() {
        let target = Headline { peer: "peer".into(), ..Headline::not_run("x", ">= 2x", "r") };
        let met = Headline { name: "met".into(), value: 3.0, pass: true, ..target.clone() };
        let info = Headline { name: "info".into(), value: 0.5, ..target }.for_information();
        let text = headlines_text(&[met, info]);
        let row = |name: &str| text.lines().find(|l| l.starts_with(name)).unwrap().to_string();
        assert!(row("met").contains("pass"), "{text}");
        assert!(row("info").contains("info"), "{text}");
        assert!(!row("info").contains("FAIL"), "{text}");
    }

    #[test]
    fn a_measurement_prints_its_unit_and_a_ratio_its_x() {
        let ms = Headline::measured("failover (ms)", 34.9081, "<= 1000 ms", crate::Goal::at_most(1000.0), "one run").in_unit("ms").for_information();
        let ratio = Headline::measured("ratio", 1.5, "<= 2x", crate::Goal::at_most(2.0), "peer");
        let text = headlines_text(&[ms, ratio]);
        let row = |name: &str| text.lines().find(|l| l.starts_with(name)).unwrap().to_string();
        assert!(row("failover").contains("34.908 ms"), "{text}");
        assert!(!row("failover").contains("34.908x"), "{text}");
        assert!(row("ratio").contains("1.500x"), "{text}");
    }

    #[test]
    fn a_bound_headline_shows_its_floor_and_says_bound() {
        let goal = crate::Goal::at_least(2.0);
        let bound = Headline::measured("log", 1.42, ">= 2x", goal, "libpmemlog").with_floor("persist floor", Some(1.52), 0.93);
        let plain = Headline::measured("copy", 0.9, ">= 2x", goal, "pmdk");
        let text = headlines_text(&[bound, plain]);
        let row = |name: &str| text.lines().find(|l| l.starts_with(name)).unwrap().to_string();
        assert!(row("log").contains("BOUND"), "{text}");
        assert!(row("log").contains("persist floor 1.52x here; ours at 0.934x of it (bound from 0.930x)"), "{text}");
        assert!(row("copy").contains("FAIL"), "{text}");
        assert!(text.lines().next().unwrap().contains("floor here"), "{text}");
        assert!(!text.contains("runs"), "{text}");
    }

    #[test]
    fn tables_line_up() {
        let results = vec![
            BenchResult::new("copy", "a").size(256).metric("gb_per_s", 1.234),
            BenchResult::new("copy", "b").size(256).metric("gb_per_s", 12.5),
            BenchResult::new("copy", "a").size(4096).metric("gb_per_s", 123.4),
            BenchResult::new("counter", "naive").metric("mops_per_s", 5.0).metric("mops_per_s_min", 4.0),
        ];
        let text = results_text(&results, &[Skipped::new("copy", "c", "why")]);
        assert!(text.contains("size   a     b"), "{text}");
        assert!(text.contains("4 KiB  123   -"), "{text}");
        assert!(text.contains("naive    5.00"), "{text}");
        assert!(!text.contains("mops_per_s_min"));
        assert!(text.contains("copy/c: why"));
        let h = vec![Headline::not_run("x", ">= 1x", "gone")];
        assert!(headlines_text(&h).contains("NOT RUN"));
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(256), "256 B");
        assert_eq!(human_bytes(1536), "1536 B");
        assert_eq!(human_bytes(128 << 10), "128 KiB");
        assert_eq!(human_bytes(1 << 30), "1 GiB");
    }
}
