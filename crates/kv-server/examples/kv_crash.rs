//! The kill -9 campaign against `pmwire kv`, at any scale:
//! `cargo run --release -p pmwire-kv-server --example kv_crash -- PMWIRE_EXE [RUNS] [SEED] [MAX_LOAD_MS]`.

use std::time::Duration;

use pmwire_kv_server::crash::{run, CrashOptions};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let exe = args.get(1).expect("usage: kv_crash PMWIRE_EXE [RUNS] [SEED] [MAX_LOAD_MS]").into();
    let runs = args.get(2).map_or(100, |s| s.parse().expect("runs"));
    let seed = args.get(3).map_or(std::process::id() as u64, |s| s.parse().expect("seed"));
    let max_load = Duration::from_millis(args.get(4).map_or(100, |s| s.parse().expect("max load ms")));
    println!("kill -9 campaign: {runs} runs, seed {seed}, load up to {max_load:?} per run");
    let started = std::time::Instant::now();
    match run(&CrashOptions { runs, seed, exe, max_load }) {
        Ok(report) => println!("{report:?} in {:.1} s", started.elapsed().as_secs_f64()),
        Err(e) => {
            eprintln!("FAILED: {e:#}");
            std::process::exit(1);
        }
    }
}
