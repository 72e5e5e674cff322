//! `pmwire report`: any number of result files (any suite) → one HTML page
//! with inline SVG plots, the machines, and the headline tables.
//!
//! The reader is generic: it needs only `suite`, `results[]` with `bench`
//! and `variant`, and numeric metric fields. Results are grouped by suite
//! and bench; each metric gets one plot with one series per variant (and
//! per input file, when several files hold the same suite). When every
//! point of a group has `size_bytes`, x is the size on a log2 axis and
//! `<metric>_min`/`<metric>_max`, when present, are drawn as whiskers;
//! otherwise each variant is one horizontal bar.
//!
//! Text in the SVG is emitted as `<text>` elements (plotters' SVG backend
//! without the `ttf` feature), so no font files or fontconfig are needed;
//! the viewer's `sans-serif` renders it.

use crate::table::{human_bytes, num};
use crate::{Floor, Headline, Verdict};
use anyhow::{bail, Context, Result};
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

const WIDTH: u32 = 860;
const LEGEND_WIDTH: u32 = 240;
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One input file.
struct Input {
    label: String,
    value: Value,
}

/// One point of one series.
#[derive(Clone, Debug)]
struct Point {
    series: String,
    size: Option<u64>,
    y: f64,
    whisker: Option<(f64, f64)>,
}

/// Results of one bench of one suite, by metric.
#[derive(Default)]
struct Group {
    metrics: BTreeMap<String, Vec<Point>>,
    skipped: Vec<String>,
}

fn load(path: &Path) -> Result<Input> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value = serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if !value.get("results").is_some_and(Value::is_array) {
        bail!("{} has no \"results\" array: not a pmwire result file", path.display());
    }
    let label = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(Input { label, value })
}

fn suite_of(input: &Input) -> String {
    input.value.get("suite").and_then(Value::as_str).unwrap_or("unknown").to_string()
}

fn is_whisker(key: &str) -> bool {
    key.ends_with("_min") || key.ends_with("_max")
}

/// Groups every result of every input by (suite, bench).
fn group(inputs: &[Input]) -> BTreeMap<(String, String), Group> {
    let mut per_suite: BTreeMap<String, usize> = BTreeMap::new();
    for input in inputs {
        *per_suite.entry(suite_of(input)).or_default() += 1;
    }
    let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
    for input in inputs {
        let suite = suite_of(input);
        let several = per_suite[&suite] > 1;
        for result in input.value["results"].as_array().into_iter().flatten() {
            let Some(object) = result.as_object() else { continue };
            let bench = object.get("bench").and_then(Value::as_str).unwrap_or("unknown").to_string();
            let variant = object.get("variant").and_then(Value::as_str).unwrap_or("default");
            let series = if several { format!("{variant} ({})", input.label) } else { variant.to_string() };
            let size = object.get("size_bytes").and_then(Value::as_u64);
            let group = groups.entry((suite.clone(), bench)).or_default();
            for (key, value) in object {
                let Some(y) = value.as_f64() else { continue };
                if key == "size_bytes" || is_whisker(key) || !y.is_finite() {
                    continue;
                }
                let low = object.get(&format!("{key}_min")).and_then(Value::as_f64);
                let high = object.get(&format!("{key}_max")).and_then(Value::as_f64);
                let whisker = low.zip(high);
                group.metrics.entry(key.clone()).or_default().push(Point { series: series.clone(), size, y, whisker });
            }
        }
        for skipped in input.value.get("skipped").and_then(Value::as_array).into_iter().flatten() {
            let bench = skipped.get("bench").and_then(Value::as_str).unwrap_or("unknown").to_string();
            let variant = skipped.get("variant").and_then(Value::as_str).unwrap_or("?");
            let reason = skipped.get("reason").and_then(Value::as_str).unwrap_or("?");
            groups.entry((suite.clone(), bench)).or_default().skipped.push(format!("{variant}: {reason}"));
        }
    }
    groups
}

fn series_names(points: &[Point]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in points {
        if !names.contains(&p.series) {
            names.push(p.series.clone());
        }
    }
    names
}

fn color(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw_legend(area: &Area<'_>, names: &[String]) -> Result<()> {
    let font = ("sans-serif", 13).into_font().color(&BLACK);
    for (i, name) in names.iter().enumerate() {
        let y = 40 + 20 * i as i32;
        let style = color(i).stroke_width(3);
        area.draw(&PathElement::new(vec![(8, y), (32, y)], style)).map_err(plot_error)?;
        area.draw(&Text::new(name.clone(), (38, y - 7), font.clone())).map_err(plot_error)?;
    }
    Ok(())
}

fn plot_error<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("plotting: {e:?}")
}

/// A line plot over sizes (log2 x).
fn size_plot(caption: &str, metric: &str, points: &[Point]) -> Result<String> {
    let names = series_names(points);
    let height = 420u32.max(60 + 20 * names.len() as u32);
    let log2 = |size: u64| (size.max(1) as f64).log2();
    let xs: Vec<f64> = points.iter().filter_map(|p| p.size).map(log2).collect();
    let (x_min, x_max) = xs.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    let y_max = points.iter().map(|p| p.whisker.map_or(p.y, |w| w.1.max(p.y))).fold(0.0, f64::max);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let (plot, legend) = root.split_horizontally(WIDTH - LEGEND_WIDTH);
        let mut chart = ChartBuilder::on(&plot)
            .caption(caption, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((x_min - 0.3)..(x_max + 0.3), 0.0..(y_max * 1.1).max(1e-9))
            .map_err(plot_error)?;
        let steps = (x_max - x_min).round() as usize + 1;
        chart
            .configure_mesh()
            .label_style(("sans-serif", 12))
            .axis_desc_style(("sans-serif", 12))
            .light_line_style(TRANSPARENT)
            .x_labels(steps.clamp(2, 24))
            .x_label_formatter(&|x| {
                if (x - x.round()).abs() < 1e-6 && *x >= 0.0 {
                    human_bytes(2f64.powf(x.round()) as u64)
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| num(*y))
            .x_desc("size (log2 scale)")
            .y_desc(metric)
            .draw()
            .map_err(plot_error)?;
        for (i, name) in names.iter().enumerate() {
            let mut series: Vec<&Point> = points.iter().filter(|p| &p.series == name && p.size.is_some()).collect();
            series.sort_by_key(|p| p.size);
            let line: Vec<(f64, f64)> = series.iter().map(|p| (log2(p.size.unwrap()), p.y)).collect();
            let style = color(i).stroke_width(2);
            chart.draw_series(LineSeries::new(line.clone(), style)).map_err(plot_error)?;
            chart.draw_series(line.iter().map(|&(x, y)| Circle::new((x, y), 3, color(i).filled()))).map_err(plot_error)?;
            // Offset each series' whiskers a little so they do not hide each other.
            let nudge = (i as f64 - (names.len() as f64 - 1.0) / 2.0) * 0.03;
            let whiskers = series.iter().filter_map(|p| {
                let x = log2(p.size.unwrap()) + nudge;
                p.whisker.map(|(low, high)| PathElement::new(vec![(x, low), (x, high)], color(i).mix(0.5).stroke_width(2)))
            });
            chart.draw_series(whiskers).map_err(plot_error)?;
        }
        draw_legend(&legend, &names)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// A colour index per name: names that differ only in a numeric suffix
/// (`rotating_4x64`, `rotating_16x256`) share one.
fn families(names: &[String]) -> Vec<usize> {
    let family = |name: &str| match name.rsplit_once('_') {
        Some((head, tail)) if tail.starts_with(|c: char| c.is_ascii_digit()) => head.to_string(),
        _ => name.to_string(),
    };
    let mut seen: Vec<String> = Vec::new();
    names
        .iter()
        .map(|n| {
            let f = family(n);
            seen.iter().position(|s| *s == f).unwrap_or_else(|| {
                seen.push(f);
                seen.len() - 1
            })
        })
        .collect()
}

/// One horizontal bar per series (no sizes).
fn bar_plot(caption: &str, metric: &str, points: &[Point]) -> Result<String> {
    let mut names = series_names(points);
    names.reverse(); // plotters counts bars from the bottom; list them top-down
    let values: Vec<f64> =
        names.iter().map(|n| points.iter().filter(|p| &p.series == n).map(|p| p.y).fold(0.0, f64::max)).collect();
    let families = families(&names);
    let x_max = values.iter().copied().fold(0.0, f64::max);
    let label_width = 12 + 7 * names.iter().map(|n| n.chars().count()).max().unwrap_or(4) as u32;
    let height = 90 + 22 * names.len() as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(label_width.min(WIDTH / 2))
            .build_cartesian_2d(0.0..(x_max * 1.15).max(1e-9), (0..names.len()).into_segmented())
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .label_style(("sans-serif", 12))
            .axis_desc_style(("sans-serif", 12))
            .light_line_style(TRANSPARENT)
            .disable_y_mesh()
            .y_labels(names.len().max(1))
            .y_label_formatter(&|segment| match segment {
                SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .x_label_formatter(&|x| num(*x))
            .x_desc(metric)
            .draw()
            .map_err(plot_error)?;
        let bars = values.iter().enumerate().map(|(i, &v)| {
            let mut bar = Rectangle::new(
                [(0.0, SegmentValue::Exact(i)), (v, SegmentValue::Exact(i + 1))],
                color(families[i]).mix(0.85).filled(),
            );
            bar.set_margin(3, 3, 0, 0);
            bar
        });
        chart.draw_series(bars).map_err(plot_error)?;
        let font = ("sans-serif", 12).into_font();
        let labels = values.iter().enumerate().map(|(i, &v)| {
            Text::new(format!(" {}", num(v)), (v, SegmentValue::CenterOf(i)), font.clone())
        });
        chart.draw_series(labels).map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// Escapes text for HTML.
fn esc(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn machine_table(machine: &Value) -> String {
    let mut html = String::from("<table class=\"kv\">\n");
    if let Some(object) = machine.as_object() {
        for (key, value) in object {
            writeln!(html, "<tr><th>{}</th><td>{}</td></tr>", esc(key), esc(&value_text(value))).unwrap();
        }
    }
    html.push_str("</table>\n");
    html
}

/// The headline table. A headline is read as [`Headline`] (old files lack
/// its newer fields, which default), so the verdict is the terminal's.
fn headline_table(headlines: &Value) -> String {
    let Some(list) = headlines.as_array().filter(|l| !l.is_empty()) else {
        return String::new();
    };
    let mut html = String::from(
        "<table class=\"headlines\">\n<tr><th>headline</th><th>value</th><th>target</th><th>result</th><th>peer</th><th>floor here</th><th>runs</th></tr>\n",
    );
    for h in list {
        let Ok(h) = serde_json::from_value::<Headline>(h.clone()) else {
            let name = h.get("name").map(value_text).unwrap_or_default();
            writeln!(html, "<tr><td>{}</td><td colspan=\"6\">unreadable headline</td></tr>", esc(&name)).unwrap();
            continue;
        };
        let verdict = h.verdict();
        let class = match verdict {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Bound => "bound",
            Verdict::NotRun => "notrun",
            Verdict::Info => "info",
        };
        let value = if verdict == Verdict::NotRun { "-".to_string() } else { format!("{:.3}x", h.value) };
        let floor = h.floor.as_ref().map_or(String::new(), Floor::text);
        let runs = h.runs.iter().map(|v| v.map_or("-".to_string(), num)).collect::<Vec<_>>().join(" / ");
        writeln!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&h.name),
            esc(&value),
            esc(&h.target),
            verdict.label(),
            esc(&h.peer),
            esc(&floor),
            esc(&runs)
        )
        .unwrap();
    }
    html.push_str("</table>\n");
    html
}

const STYLE: &str = "body{font-family:sans-serif;max-width:900px;margin:2em auto;color:#222}\
table{border-collapse:collapse;margin:0.5em 0 1.5em}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:90%}\
th{background:#f4f4f4}.pass{color:#070}.fail{color:#b00;font-weight:bold}.bound{color:#a40;font-weight:bold}.notrun{color:#a60}.info{color:#555}\
svg{display:block;margin:0.5em 0 1.5em}";

/// Reads `inputs`, writes `out_dir/index.html`, returns its path.
pub fn write(inputs: &[PathBuf], out_dir: &Path) -> Result<PathBuf> {
    if inputs.is_empty() {
        bail!("no result files given");
    }
    let inputs: Vec<Input> = inputs.iter().map(|p| load(p)).collect::<Result<_>>()?;
    let mut html = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>pmwire benchmark report</title>\
         <style>{STYLE}</style></head><body>\n<h1>pmwire benchmark report</h1>\n<p>Generated {} from {} file(s).</p>\n",
        crate::machine::utc_now(),
        inputs.len()
    );
    for input in &inputs {
        let command = input.value.pointer("/parameters/command").map(value_text).unwrap_or_default();
        writeln!(html, "<h2>{} — {}</h2>", esc(&suite_of(input)), esc(&input.label)).unwrap();
        if !command.is_empty() {
            writeln!(html, "<p>Reproduce: <code>{}</code></p>", esc(&command)).unwrap();
        }
        html.push_str(&headline_table(input.value.get("headlines").unwrap_or(&Value::Null)));
        writeln!(html, "<details><summary>machine</summary>").unwrap();
        html.push_str(&machine_table(input.value.get("machine").unwrap_or(&Value::Null)));
        writeln!(html, "</details>").unwrap();
    }
    for ((suite, bench), group) in group(&inputs) {
        writeln!(html, "<h2>{} / {}</h2>", esc(&suite), esc(&bench)).unwrap();
        for (metric, points) in &group.metrics {
            let caption = format!("{suite} / {bench}: {metric}");
            let svg = if points.iter().all(|p| p.size.is_some()) {
                size_plot(&caption, metric, points)?
            } else {
                bar_plot(&caption, metric, points)?
            };
            html.push_str(&svg);
            html.push('\n');
        }
        if !group.skipped.is_empty() {
            html.push_str("<p>Not run:</p><ul>\n");
            for line in &group.skipped {
                writeln!(html, "<li>{}</li>", esc(line)).unwrap();
            }
            html.push_str("</ul>\n");
        }
    }
    html.push_str("</body></html>\n");
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let index = out_dir.join("index.html");
    std::fs::write(&index, html).with_context(|| format!("writing {}", index.display()))?;
    Ok(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synthetic(dir: &Path, name: &str, suite: &str) -> PathBuf {
        let value = serde_json::json!({
            "suite": suite,
            "machine": {"cpu_model": "Test <CPU>", "cores": 2},
            "parameters": {"command": "pmwire bench local --quick"},
            "results": [
                {"bench": "copy", "variant": "memcpy", "size_bytes": 256, "gb_per_s": 5.0, "gb_per_s_min": 4.0, "gb_per_s_max": 6.0},
                {"bench": "copy", "variant": "memcpy", "size_bytes": 4096, "gb_per_s": 9.0},
                {"bench": "copy", "variant": "ours", "size_bytes": 256, "gb_per_s": 3.0},
                {"bench": "copy", "variant": "ours", "size_bytes": 4096, "gb_per_s": 8.0},
                {"bench": "counter", "variant": "naive", "mops_per_s": 2.0, "params": {"blocks": 1}},
                {"bench": "counter", "variant": "rotating_10x256", "mops_per_s": 3.5, "note": "text is ignored"}
            ],
            "skipped": [{"bench": "copy", "variant": "pmdk", "reason": "libpmem not found"}],
            "headlines": [
                {"name": "a", "value": 1.2, "target": ">= 1x", "pass": true, "peer": "p"},
                {"name": "b", "value": null, "target": ">= 2x", "pass": false, "peer": "not run: gone"},
                {"name": "c", "value": 1.42, "target": ">= 2x", "pass": false, "peer": "p", "goal": {"at_least": true, "ratio": 2.0},
                 "floor": {"name": "persist floor", "vs_peer": 1.52, "ours_of_floor": 0.934, "within": 0.93}, "bound": true,
                 "runs": [1.5, 1.42, null]}
            ]
        });
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_string(&value).unwrap()).unwrap();
        path
    }

    #[test]
    fn writes_html_with_svg_plots() {
        let dir = tempfile::tempdir().unwrap();
        let input = synthetic(dir.path(), "local-1.json", "local");
        let index = write(&[input], &dir.path().join("report")).unwrap();
        let html = std::fs::read_to_string(&index).unwrap();
        assert!(html.contains("<svg"), "no svg");
        assert_eq!(html.matches("<svg").count(), 2, "one plot per (bench, metric)");
        assert!(html.contains("<text"), "text is drawn as SVG text");
        assert!(html.contains("local / copy: gb_per_s"));
        assert!(html.contains("rotating_10x256"));
        assert!(html.contains("Test &lt;CPU&gt;"));
        assert!(html.contains("NOT RUN"));
        assert!(html.contains("<td class=\"bound\">BOUND</td>"), "a floor-bound miss");
        assert!(html.contains("persist floor 1.52x here; ours at 0.934x of it (bound from 0.930x)"));
        assert!(html.contains("1.50 / 1.42 / -"), "each run's value");
        assert!(html.contains("<td class=\"pass\">pass</td>"), "an old headline without the new fields");
        assert!(html.contains("pmdk: libpmem not found"));
        assert!(html.contains("4 KiB"), "log2 size labels");
    }

    #[test]
    fn several_files_of_one_suite_get_labelled_series() {
        let dir = tempfile::tempdir().unwrap();
        let a = synthetic(dir.path(), "run-a.json", "local");
        let b = synthetic(dir.path(), "run-b.json", "local");
        let c = synthetic(dir.path(), "net.json", "remote");
        let index = write(&[a, b, c], &dir.path().join("r")).unwrap();
        let html = std::fs::read_to_string(index).unwrap();
        assert!(html.contains("memcpy (run-a)"));
        assert!(html.contains("memcpy (run-b)"));
        assert!(html.contains("remote / copy"));
    }

    #[test]
    fn variants_of_one_family_share_a_colour() {
        let names: Vec<String> = ["naive", "rotating_4x64", "rotating_16x256", "register_2x64", "same_line"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(families(&names), vec![0, 1, 1, 2, 3]);
    }

    #[test]
    fn refuses_files_without_results() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        std::fs::write(&path, "{\"suite\": \"x\"}").unwrap();
        assert!(write(&[path], dir.path()).is_err());
        assert!(write(&[], dir.path()).is_err());
    }
}
