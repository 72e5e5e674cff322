//! Runs the local suite without the CLI, for development:
//! `cargo run --release -p pmwire-bench --example local -- [--full] [POOL] [OUT_DIR]`.
//! `pmwire bench local` is the real entry point.

use pmwire_bench::local::{run, LocalOptions};

fn main() -> anyhow::Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let full = args.iter().any(|a| a == "--full");
    args.retain(|a| a != "--full");
    let pool = args.first().cloned().unwrap_or_else(|| "/dev/shm/pmwire-bench-example.pool".into());
    let out_dir = args.get(1).cloned().unwrap_or_else(|| "results".into());
    let options = LocalOptions {
        pool: pool.into(),
        size_bytes: 1 << 30,
        quick: !full,
        out_dir: out_dir.into(),
        region: pmem::RegionOptions::default(),
        only: Vec::new(),
    };
    let report = run(&options)?;
    println!("results: {}", report.json_path.display());
    Ok(())
}
