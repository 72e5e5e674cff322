//! `pmwire bench local`: single-threaded persistence benchmarks on one
//! region (a tmpfs file by default: emulated persistent memory), each
//! against its peer measured in the same run.
//!
//! Order: open and pre-fault the region, load PMDK (before any other
//! thread exists: it sets `PMEM_IS_PMEM_FORCE=1`), then `copy`,
//! `nt_threshold`, `persist_latency`, `counter`, `log`. The JSON goes to
//! `out_dir/local-<UTC stamp>.json`; the tables and headlines go to
//! stdout; the progress bar to stderr (only when it is a terminal).
//!
//! The pool file is created if missing, and then removed at the end (it
//! holds `size_bytes` of RAM on tmpfs); a pool that existed is left.

use crate::headlines::{self, PeerNames};
use crate::measure::{pin_to_current_cpu, prefault, Progress};
use crate::schema::{BenchResult, Skipped, SuiteFile};
use crate::{copy, logbench, machine, persist, pmdk, table, SuiteReport};
use anyhow::{ensure, Context, Result};
use pmem::{Media, Region};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What `pmwire bench local` was asked to do.
#[derive(Clone, Debug)]
pub struct LocalOptions {
    /// The pool file (a tmpfs path is emulated pmem); created if missing.
    pub pool: PathBuf,
    /// Region size; at least 1 GiB for the real suite, so the copy sweep
    /// exceeds the caches.
    pub size_bytes: u64,
    /// The short run of the newcomer's tour (≈ 30–60 s).
    pub quick: bool,
    /// Where the JSON goes.
    pub out_dir: PathBuf,
    /// Overrides for the region (kind, domain, flush, ISA).
    pub region: pmem::RegionOptions,
    /// Run only these benchmarks (all when empty). Headlines that need a
    /// benchmark left out say so.
    pub only: Vec<LocalBench>,
}

/// The benchmarks of the suite, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalBench {
    /// Copies of 256 B to 128 KiB against PMDK and memcpy.
    Copy,
    /// The non-temporal threshold sweep.
    NtThreshold,
    /// Persist latency, same line vs rotating.
    Latency,
    /// Counters and the register.
    Counter,
    /// Log appends against libpmemlog.
    Log,
}

impl LocalBench {
    /// Every benchmark, in the order they run.
    pub const ALL: [LocalBench; 5] =
        [LocalBench::Copy, LocalBench::NtThreshold, LocalBench::Latency, LocalBench::Counter, LocalBench::Log];

    /// The CLI's name for it.
    pub fn name(self) -> &'static str {
        match self {
            LocalBench::Copy => "copy",
            LocalBench::NtThreshold => "nt-threshold",
            LocalBench::Latency => "latency",
            LocalBench::Counter => "counter",
            LocalBench::Log => "log",
        }
    }

    /// Parses a CLI name ([`name`](Self::name)).
    pub fn parse(name: &str) -> Result<LocalBench, String> {
        LocalBench::ALL.into_iter().find(|b| b.name() == name).ok_or_else(|| {
            let names: Vec<&str> = LocalBench::ALL.iter().map(|b| b.name()).collect();
            format!("unknown benchmark {name:?}; the local suite has {}", names.join(", "))
        })
    }

    /// The `bench` names its results carry.
    pub fn bench_names(self) -> &'static [&'static str] {
        match self {
            LocalBench::Copy => &[copy::COPY],
            LocalBench::NtThreshold => &[copy::NT_THRESHOLD_BENCH, copy::NT_CROSSOVER],
            LocalBench::Latency => &[persist::LATENCY],
            LocalBench::Counter => &[persist::COUNTER],
            LocalBench::Log => &[logbench::LOG],
        }
    }
}


/// How much to measure. [`Plan::quick`] and [`Plan::full`] are the CLI's;
/// tests use [`Plan::tiny`].
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    /// Copy sizes.
    pub copy_sizes: Vec<usize>,
    /// Bytes written per variant per round, per size.
    pub copy_window_bytes: u64,
    /// Timed rounds per size.
    pub copy_rounds: usize,
    /// Threshold sweep sizes.
    pub nt_sizes: Vec<usize>,
    /// Bytes per variant per round in the sweep.
    pub nt_window_bytes: u64,
    /// Timed rounds in the sweep.
    pub nt_rounds: usize,
    /// Individually timed persists per shape (over all rounds).
    pub latency_samples: usize,
    /// Rounds of the latency benchmark.
    pub latency_rounds: usize,
    /// Updates per structure per round.
    pub counter_updates: usize,
    /// Rounds of the counter benchmark.
    pub counter_rounds: usize,
    /// Log entry sizes.
    pub log_sizes: Vec<usize>,
    /// Appends per variant per round, per size.
    pub log_appends: usize,
    /// Rounds of the log benchmark.
    pub log_rounds: usize,
    /// Rounds of the log benchmark at [`LOG_HEADLINE_BYTES`], the size
    /// every log headline reads (at least `log_rounds`).
    pub log_headline_rounds: usize,
    /// Capacity of every log (≥ 2 MiB, libpmemlog's minimum pool).
    pub log_capacity_bytes: u64,
    /// Untimed rounds before the timed ones.
    pub warmup_rounds: usize,
    /// Show the progress bar (on a terminal).
    #[serde(skip)]
    pub progress: bool,
    /// Print the tables to stdout.
    #[serde(skip)]
    pub print: bool,
}

const KIB: usize = 1 << 10;
/// The entry size of the log headlines (`headlines.rs`).
pub const LOG_HEADLINE_BYTES: usize = 256;
const MIB: u64 = 1 << 20;

impl Plan {
    /// The newcomer's tour: the whole suite in well under a minute.
    pub fn quick() -> Plan {
        Plan {
            copy_sizes: vec![256, KIB, 4 * KIB, 16 * KIB, 64 * KIB, 128 * KIB],
            copy_window_bytes: 32 * MIB,
            copy_rounds: 21,
            nt_sizes: vec![64, 128, 192, 256, 320, 384, 512, 768, 1024, 1536, 2048],
            nt_window_bytes: 4 * MIB,
            nt_rounds: 21,
            latency_samples: 100_000,
            latency_rounds: 21,
            counter_updates: 50_000,
            counter_rounds: 21,
            log_sizes: vec![64, 256, KIB, 4 * KIB],
            log_appends: 50_000,
            log_rounds: 21,
            // Every log headline reads 256 B: ~1 s more for a steadier median.
            log_headline_rounds: 31,
            log_capacity_bytes: 64 * MIB,
            warmup_rounds: 1,
            progress: true,
            print: true,
        }
    }

    /// The full suite: a few minutes.
    pub fn full() -> Plan {
        Plan {
            copy_window_bytes: 64 * MIB,
            copy_rounds: 51,
            nt_window_bytes: 16 * MIB,
            nt_rounds: 41,
            latency_samples: 1_000_000,
            latency_rounds: 41,
            counter_updates: 100_000,
            counter_rounds: 31,
            log_sizes: vec![64, 128, 256, 512, KIB, 2 * KIB, 4 * KIB],
            log_appends: 100_000,
            log_rounds: 31,
            log_headline_rounds: 31,
            // Five logs side by side must fit the default 1 GiB region.
            log_capacity_bytes: 160 * MIB,
            ..Plan::quick()
        }
    }

    /// A smoke run for tests: every code path, tiny counts, no output.
    pub fn tiny() -> Plan {
        Plan {
            copy_sizes: vec![256, 4 * KIB, 64 * KIB, 128 * KIB],
            copy_window_bytes: MIB,
            copy_rounds: 2,
            nt_sizes: vec![64, 256, 2048],
            nt_window_bytes: 256 << 10,
            nt_rounds: 2,
            latency_samples: 200,
            latency_rounds: 2,
            counter_updates: 100,
            counter_rounds: 2,
            log_sizes: vec![64, 256],
            log_appends: 3_000,
            log_rounds: 2,
            log_headline_rounds: 3,
            log_capacity_bytes: 2 * MIB,
            warmup_rounds: 1,
            progress: false,
            print: false,
        }
    }

    /// Timed rounds of the log benchmark at `size_bytes`.
    pub fn log_rounds_at(&self, size_bytes: usize) -> usize {
        if size_bytes == LOG_HEADLINE_BYTES {
            self.log_headline_rounds.max(self.log_rounds)
        } else {
            self.log_rounds
        }
    }

    /// The plan `pmwire bench local` uses for these options.
    pub fn for_options(options: &LocalOptions) -> Plan {
        if options.quick {
            Plan::quick()
        } else {
            Plan::full()
        }
    }

    /// Progress-bar steps (one per timed variant round) of `bench`.
    fn steps(&self, bench: LocalBench) -> u64 {
        let shapes = 1 + 5 * 2;
        let structures = 1 + persist::NAIVE_CONTROLS + 2 * 12;
        (match bench {
            LocalBench::Copy => self.copy_sizes.len() * 4 * self.copy_rounds,
            LocalBench::NtThreshold => self.nt_sizes.len() * 2 * self.nt_rounds,
            LocalBench::Latency => shapes * self.latency_rounds,
            LocalBench::Counter => structures * self.counter_rounds,
            LocalBench::Log => self.log_sizes.iter().map(|&size| self.log_rounds_at(size)).sum::<usize>() * logbench::VARIANTS,
        }) as u64
    }
}

/// What every benchmark works with.
pub(crate) struct Ctx<'a> {
    pub region: &'a mut Region,
    pub plan: &'a Plan,
    pub progress: &'a Progress,
    pub results: Vec<BenchResult>,
    pub skipped: Vec<Skipped>,
    /// The next destination offset of the sweeping benchmarks.
    pub cursor: u64,
    /// Where peers put their own pool files (the region's directory).
    pub scratch_dir: PathBuf,
}

/// Runs the suite with the CLI's plan (quick or full); see the module docs.
/// Prints the result tables and the headlines to stdout.
pub fn run(opts: &LocalOptions) -> Result<SuiteReport> {
    run_with(opts, &Plan::for_options(opts))
}

/// Runs the suite with an explicit plan.
pub fn run_with(opts: &LocalOptions, plan: &Plan) -> Result<SuiteReport> {
    let existed = opts.pool.exists();
    let mut options = opts.region.clone();
    options.size = Some(opts.region.size.unwrap_or(opts.size_bytes));
    options.create = true;
    let mut region =
        Region::open(&opts.pool, options).with_context(|| format!("opening the pool {}", opts.pool.display()))?;
    let outcome = run_on(&mut region, opts, plan);
    drop(region);
    if !existed {
        let _ = std::fs::remove_file(&opts.pool);
    }
    outcome
}

fn run_on(region: &mut Region, opts: &LocalOptions, plan: &Plan) -> Result<SuiteReport> {
    ensure!(region.len() >= 4 * MIB, "the region holds {} bytes; the suite needs at least 4 MiB", region.len());
    ensure!(plan.log_capacity_bytes >= pmdk::PMEMLOG_MIN_POOL, "log capacity below libpmemlog's 2 MiB minimum");
    std::fs::create_dir_all(&opts.out_dir).with_context(|| format!("creating {}", opts.out_dir.display()))?;
    // PMDK first, from this (still the only) thread: it sets the environment.
    let peers = pmdk::describe();
    prefault(region);
    // Before pinning: `cores` counts the CPUs this process may use.
    let machine = machine::describe(Some(region));
    let (pinned_cpu, affinity) = pin_to_current_cpu().unzip();
    let selected: Vec<LocalBench> =
        LocalBench::ALL.into_iter().filter(|b| opts.only.is_empty() || opts.only.contains(b)).collect();
    let progress = Progress::new(selected.iter().map(|&b| plan.steps(b)).sum(), plan.progress);
    let scratch_dir = opts.pool.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    let mut ctx =
        Ctx { region, plan, progress: &progress, results: Vec::new(), skipped: Vec::new(), cursor: 0, scratch_dir };
    for bench in LocalBench::ALL {
        if !selected.contains(&bench) {
            for name in bench.bench_names() {
                ctx.skipped.push(Skipped::new(name, "*", "not selected (--only)"));
            }
            continue;
        }
        match bench {
            LocalBench::Copy => copy::run_copy(&mut ctx),
            LocalBench::NtThreshold => copy::run_nt_threshold(&mut ctx),
            LocalBench::Latency => persist::run_latency(&mut ctx),
            LocalBench::Counter => persist::run_counters(&mut ctx),
            LocalBench::Log => logbench::run_log(&mut ctx),
        }
    }
    progress.finish();
    drop(affinity);
    let Ctx { results, skipped, .. } = ctx;
    let headlines = headlines::compute(&results, &skipped, &peer_names());
    let file = SuiteFile {
        suite: "local".into(),
        pmwire_version: env!("CARGO_PKG_VERSION").into(),
        machine,
        parameters: parameters(opts, plan, pinned_cpu),
        peers,
        results,
        skipped,
        headlines: headlines.clone(),
    };
    let json_path = opts.out_dir.join(format!("local-{}.json", machine::utc_stamp()));
    let text = serde_json::to_string_pretty(&file)?;
    std::fs::write(&json_path, text + "\n").with_context(|| format!("writing {}", json_path.display()))?;
    if plan.print {
        print!("{}", table::results_text(&file.results, &file.skipped));
        println!();
        crate::print_headlines(&headlines);
    }
    Ok(SuiteReport { suite: "local".into(), json_path, headlines })
}

fn peer_names() -> PeerNames {
    let mut names = PeerNames::default();
    if let Ok(lib) = pmdk::libpmem() {
        names.libpmem = format!("PMDK libpmem {} pmem_memcpy_persist", lib.version());
    }
    if let Ok(lib) = pmdk::libpmemlog() {
        names.libpmemlog = format!("PMDK libpmemlog {} pmemlog_append", lib.version());
    }
    names
}

fn parameters(opts: &LocalOptions, plan: &Plan, pinned_cpu: Option<usize>) -> serde_json::Value {
    let command = if opts.quick { "pmwire bench local --quick" } else { "pmwire bench local" };
    serde_json::json!({
        "command": command,
        "quick": opts.quick,
        "pool": opts.pool.display().to_string(),
        "size_bytes": opts.size_bytes,
        "threads": 1,
        "pinned_cpu": pinned_cpu,
        "only": opts.only.iter().map(|b| b.name()).collect::<Vec<_>>(),
        "plan": plan,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the tiny plan on a 16 MiB pool in a fresh tmpfs directory.
    fn tiny_run(only: Vec<LocalBench>) -> (SuiteReport, SuiteFile, LocalOptions) {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap().keep();
        let opts = LocalOptions {
            pool: dir.join("pool"),
            size_bytes: 16 * MIB,
            quick: true,
            out_dir: dir.join("out"),
            region: pmem::RegionOptions::default(),
            only,
        };
        let report = run_with(&opts, &Plan::tiny()).unwrap();
        let file: SuiteFile = serde_json::from_str(&std::fs::read_to_string(&report.json_path).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        (report, file, opts)
    }

    #[test]
    fn smoke_run_of_every_benchmark() {
        let (report, file, opts) = tiny_run(Vec::new());
        assert!(!opts.pool.exists(), "a pool the suite created is removed");
        assert_eq!(file.suite, "local");
        assert_eq!(file.machine["region_kind"], "emulated");
        let has = |bench: &str, variant: &str| file.results.iter().any(|r| r.bench == bench && r.variant == variant);
        assert!(has(copy::COPY, copy::MEMCPY));
        assert!(has(copy::COPY, copy::OURS));
        assert!(has(copy::NT_THRESHOLD_BENCH, copy::NT));
        assert!(has(copy::NT_CROSSOVER, "pmdk_default"));
        assert!(has(persist::LATENCY, persist::SAME_LINE));
        assert!(has(persist::LATENCY, "rotate_16x256"));
        assert!(has(persist::COUNTER, "register_10x256"));
        assert!(has(logbench::LOG, logbench::TAIL_NAIVE));
        assert!(has(logbench::LOG, logbench::TAIL_ROTATING));
        assert!(has(logbench::LOG, logbench::TAIL_SELF_VALIDATING));
        assert!(has(logbench::LOG, logbench::TAIL_SELF_VALIDATING_PAD64));
        assert!(has(logbench::LOG, logbench::PERSIST_FLOOR));
        let pmdk_ok = pmdk::libpmem().is_ok();
        assert_eq!(has(copy::COPY, copy::PMDK), pmdk_ok);
        assert_eq!(has(logbench::LOG, logbench::PMEMLOG), pmdk::libpmemlog().is_ok());
        for r in &file.results {
            assert!(r.metrics.values().all(|v| v.is_finite()), "{r:?}");
        }
        for r in file.results.iter().filter(|r| r.bench == logbench::LOG) {
            let share = r.get("on_cpu_share").unwrap();
            assert!(share > 0.0 && share <= 1.0, "{r:?}");
            assert!(r.get("wall_mops_per_s").unwrap() > 0.0, "{r:?}");
            let rounds = Plan::tiny().log_rounds_at(r.size_bytes.unwrap() as usize) as u64;
            assert_eq!(r.params["rounds"], rounds, "{r:?}");
        }
        assert_eq!(Plan::tiny().log_rounds_at(LOG_HEADLINE_BYTES), 3, "the headline size gets its own rounds");
        assert_eq!(Plan::tiny().log_rounds_at(64), 2);
        assert_eq!(file.headlines.len(), 9);
        assert_eq!(report.headlines.len(), 9);
    }

    #[test]
    fn only_runs_the_selected_benchmarks_and_headlines_say_why() {
        let (_, file, _) = tiny_run(vec![LocalBench::Log]);
        assert!(file.results.iter().all(|r| r.bench == logbench::LOG), "only log results");
        assert!(file.results.iter().any(|r| r.variant == logbench::TAIL_SELF_VALIDATING));
        let copy_headline = &file.headlines[0];
        assert!(!copy_headline.pass);
        assert!(copy_headline.peer.contains("not selected"), "{copy_headline:?}");
    }
}
