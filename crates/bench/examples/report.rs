//! Writes the HTML report for result files, for development:
//! `cargo run --release -p pmwire-bench --example report -- OUT_DIR FILE...`.
//! `pmwire report` is the real entry point.

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let out_dir = args.next().unwrap_or_else(|| "report".into());
    let inputs: Vec<std::path::PathBuf> = args.map(Into::into).collect();
    let index = pmwire_bench::report::write(&inputs, out_dir.as_ref())?;
    println!("report: {}", index.display());
    Ok(())
}
