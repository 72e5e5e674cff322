//! Runs `pmwire model <experiment>` until the CLI wires it:
//! `cargo run --release -p pmwire-model --example model -- all [out_dir]`.

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "all".into());
    let out = std::path::PathBuf::from(args.next().unwrap_or_else(|| "results".into()));
    let start = std::time::Instant::now();
    let findings = pmwire_model::experiments::run(&name, &out)?;
    let ok = findings.iter().filter(|f| f.within_tolerance).count();
    println!("{ok}/{} findings within tolerance; {:.1} s", findings.len(), start.elapsed().as_secs_f64());
    Ok(())
}
