//! Runs every crash check of both logs (the correct logs and the planted
//! bugs) and prints image counts and timings.
//!
//! `cargo run --release -p pmwire-log --example log_crash_checks -- [seed]`

fn main() {
    let seed = std::env::args().nth(1).map(|s| s.parse().expect("a seed")).unwrap_or(42);
    let config = pmwire_crashcheck::Config::with_seed(seed);
    for check in pmwire_log::crash::checks() {
        let start = std::time::Instant::now();
        let report = (check.run)(&config);
        let verdict = match (check.planted, report.is_ok()) {
            (false, true) | (true, false) => "ok",
            _ => "WRONG",
        };
        println!(
            "{verdict:<5} {:<58} {:>6.2} s  {} images, {} failures",
            check.name,
            start.elapsed().as_secs_f64(),
            report.images,
            report.failure_count
        );
    }
}
