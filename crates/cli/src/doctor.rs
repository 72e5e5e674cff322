//! `pmwire doctor`: the flush instruction, the copy ISA, and what a path is.

use anyhow::{Context, Result};
use clap::Args;
use pmem::{CopyIsa, FlushInstruction, Region, RegionOptions};
use std::path::{Path, PathBuf};

/// Arguments of `pmwire doctor`.
#[derive(Args)]
pub struct DoctorArgs {
    /// A pool file, or a directory to probe with a temporary file.
    pub path: Option<PathBuf>,
}

/// Prints what this machine and `args.path` offer.
pub fn run(args: &DoctorArgs) -> Result<()> {
    println!("cpu:               {}", cpu_model());
    println!("flush instruction: {} (detected with CPUID)", FlushInstruction::detect());
    println!("copy ISA:          {} (non-temporal stores)", CopyIsa::detect());
    println!("nd regions:        {}", nd_regions());
    println!("io_uring receives: {}", receives());
    if let Some(path) = &args.path {
        let region = probe(path)?;
        println!("path:              {}", path.display());
        println!("  kind:            {}", region.kind());
        println!("  persistence:     {}", region.domain());
        println!("  persist with:    {}", persist_summary(&region));
        let survives = if region.domain().survives_power_loss() { "power loss" } else { "a process crash only" };
        println!("  survives:        {survives}");
    }
    Ok(())
}

/// How netio's receives use pool buffers on this kernel.
fn receives() -> String {
    match pmwire_netio::incremental_supported() {
        Ok(true) => "share buffers (IOU_PBUF_RING_INC): small values pack into pool buffers".into(),
        Ok(false) => "a whole buffer each (no IOU_PBUF_RING_INC before Linux 6.12): each small value received alone holds a pool buffer".into(),
        Err(e) => format!("io_uring unavailable: {e}"),
    }
}

fn persist_summary(region: &Region) -> String {
    match (region.kind(), region.persister().instruction) {
        (pmem::RegionKind::File, FlushInstruction::None) => "msync(MS_SYNC)".to_string(),
        (_, FlushInstruction::None) => "sfence (caches are persistent)".to_string(),
        (_, instruction) => format!("{instruction} + sfence"),
    }
}

/// Maps `path` without changing it, or a temporary file beside or inside it.
fn probe(path: &Path) -> Result<Region> {
    let existing_file = path.metadata().map(|m| !m.is_dir() && m.len() >= 64).unwrap_or(false);
    let is_char_device = {
        use std::os::unix::fs::FileTypeExt;
        path.metadata().map(|m| m.file_type().is_char_device()).unwrap_or(false)
    };
    if existing_file || is_char_device {
        return Region::open(path, RegionOptions::default()).with_context(|| format!("probing {}", path.display()));
    }
    let dir = if path.is_dir() { path.to_path_buf() } else { path.parent().unwrap_or(Path::new(".")).to_path_buf() };
    let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
    let probe = tempfile::Builder::new()
        .prefix(".pmwire-doctor")
        .tempfile_in(&dir)
        .with_context(|| format!("creating a probe file in {}", dir.display()))?;
    Region::create(probe.path(), 4096).with_context(|| format!("probing {}", dir.display()))
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| text.lines().find(|l| l.starts_with("model name")).map(|l| l.to_string()))
        .and_then(|line| line.split_once(':').map(|(_, model)| model.trim().to_string()))
        .unwrap_or_else(|| "unknown".to_string())
}

fn nd_regions() -> String {
    let Ok(entries) = std::fs::read_dir("/sys/bus/nd/devices") else {
        return "none (no persistent memory on this machine)".to_string();
    };
    let regions: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("region"))
        .map(|e| {
            let domain = std::fs::read_to_string(e.path().join("persistence_domain")).unwrap_or_default();
            format!("{} ({})", e.file_name().to_string_lossy(), domain.trim())
        })
        .collect();
    if regions.is_empty() {
        "none (no persistent memory on this machine)".to_string()
    } else {
        regions.join(", ")
    }
}
