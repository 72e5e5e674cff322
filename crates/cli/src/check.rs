//! `pmwire check`: runs the crash-state checker over every persistent
//! structure, and over planted bugs that it must catch; `pmwire check fuzz`
//! runs the fuzzer instead (`fuzz_cmd`).

use anyhow::Result;
use clap::{Args, Subcommand};
use pmwire_crashcheck::{checks, Config, Report};
use pmwire_remote::crash::check_directory;

/// Arguments of `pmwire check`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct CheckArgs {
    /// Another check than the crash-state checker.
    #[command(subcommand)]
    pub command: Option<CheckCommand>,
    /// Seed of the crash-image sampler (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Fewer samples per crash point.
    #[arg(long)]
    pub quick: bool,
}

/// The checks `pmwire check` runs besides the crash-state checker.
#[derive(Subcommand)]
pub enum CheckCommand {
    /// Fuzz the remote server core and `pmwire serve` (tcp, sm) with seeded,
    /// structured and mutated requests checked against a model of the pool.
    Fuzz(crate::fuzz_cmd::FuzzArgs),
    /// Simulate replicated clusters from seeds (faults, crashes, partitions)
    /// and check every history for linearizability; planted bugs must be caught.
    Smr(crate::smr_check::SmrCheckArgs),
}

/// One row: a structure and what the checker found.
struct Row {
    name: String,
    expect_failures: bool,
    report: Report,
}

/// Runs every check and prints a table; returns whether every structure
/// passed and every planted bug was caught.
pub fn run(args: &CheckArgs) -> Result<bool> {
    let mut config = args.seed.map(Config::with_seed).unwrap_or_default();
    if args.quick {
        config.samples = 16;
    }
    let rows = rows(&config);
    let width = rows.iter().map(|row| row.name.len()).max().unwrap_or(0).max("structure".len());
    println!("{:<width$} {:>8} {:>10} {:>9}  verdict", "structure", "points", "images", "failures");
    let mut all_ok = true;
    for row in &rows {
        let caught = !row.report.is_ok();
        let ok = caught == row.expect_failures;
        all_ok &= ok;
        let verdict = match (row.expect_failures, caught) {
            (false, false) => "ok",
            (false, true) => "FAILED",
            (true, true) => "planted bug caught",
            (true, false) => "PLANTED BUG MISSED",
        };
        println!(
            "{:<width$} {:>8} {:>10} {:>9}  {verdict}",
            row.name, row.report.crash_points, row.report.images, row.report.failure_count
        );
        if !ok {
            println!("    {}", row.report.describe().replace('\n', "\n    "));
        }
    }
    println!("seed {} (replay with --seed {})", config.seed, config.seed);
    Ok(all_ok)
}

fn rows(config: &Config) -> Vec<Row> {
    let mut rows = vec![
        row("naive counter", false, checks::check_naive_counter(config)),
        row("rotating counter 10 x 256 B", false, checks::check_rotating_counter(10, 256, config)),
        row("rotating counter 16 x 256 B", false, checks::check_rotating_counter(16, 256, config)),
        row("rotating register 10 x 256 B", false, checks::check_rotating_register(10, 256, config)),
        row("planted: register chunk never flushed", true, checks::check_planted_unflushed_register(config)),
        row("dual record", false, checks::check_dual_record(Default::default(), config)),
        row("planted: dual record never flushed", true, checks::check_planted_unflushed_record(config)),
    ];
    let structures = [
        pmwire_log::crash::checks(),
        pmwire_btree::crash::checks(),
        pmwire_pool::crash::checks(),
        pmwire_kv::crash::checks(),
        pmwire_smr::pmem_store::crash::checks(),
        pmwire_mirror::crash::checks(),
        pmwire_kv_server::crash_zc::checks(),
    ];
    rows.extend(structures.into_iter().flatten().map(|check| row(check.name, check.planted, (check.run)(config))));
    rows.extend(remote_rows(config));
    rows
}

fn row(name: &str, expect_failures: bool, report: Report) -> Row {
    Row { name: name.to_string(), expect_failures, report }
}

fn remote_rows(config: &Config) -> Vec<Row> {
    use pmwire_remote::pool::PoolFaults;
    let planted = |slot_before_log, skip_slot_flush| PoolFaults { slot_before_log, skip_slot_flush };
    vec![
        row("remote pool: log directory", false, check_directory(PoolFaults::default(), config)),
        row("planted: directory slot before its log", true, check_directory(planted(true, false), config)),
        row("planted: directory slot never flushed", true, check_directory(planted(false, true), config)),
    ]
}
