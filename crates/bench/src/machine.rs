//! What a result was measured on: CPU, cores, memory, kernel, the persist
//! strategy chosen at map time, the region and what it survives.
//! Every suite embeds this under `"machine"`, so a number never travels
//! without the hardware that produced it.

use pmem::{CopyIsa, FlushInstruction, Region};
use serde_json::{json, Value};
use std::time::{SystemTime, UNIX_EPOCH};

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn cpuinfo_field(cpuinfo: &str, field: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|line| line.split(':').next().is_some_and(|k| k.trim() == field))
        .and_then(|line| line.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

fn meminfo_bytes(field: &str) -> Option<u64> {
    let text = read("/proc/meminfo")?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn os_name() -> Option<String> {
    let text = read("/etc/os-release")?;
    let line = text.lines().find(|l| l.starts_with("PRETTY_NAME="))?;
    Some(line.trim_start_matches("PRETTY_NAME=").trim_matches('"').to_string())
}

/// CPU flags that matter for persistence, as the kernel reports them.
fn persistence_flags(cpuinfo: &str) -> Vec<String> {
    let flags = cpuinfo_field(cpuinfo, "flags").unwrap_or_default();
    let wanted = ["clflush", "clflushopt", "clwb", "avx2", "avx512f", "movdir64b", "hypervisor"];
    flags.split_whitespace().filter(|f| wanted.contains(f)).map(str::to_string).collect()
}

/// The current UTC time as ISO 8601 (`2025-01-31T12:00:00Z`).
pub fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (date, time) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(date as i64);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", time / 3600, time % 3600 / 60, time % 60)
}

/// A compact UTC stamp for file names (`20250131-120000`).
pub fn utc_stamp() -> String {
    utc_now().replace(['-', ':'], "").replace('T', "-").trim_end_matches('Z').to_string()
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Describes this machine and, when given, the region measured on.
pub fn describe(region: Option<&Region>) -> Value {
    let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
    let logical = cpuinfo.lines().filter(|l| l.starts_with("processor")).count();
    let (flush, isa) = match region {
        Some(r) => (r.persister().instruction, r.copier().isa),
        None => (FlushInstruction::detect(), CopyIsa::detect()),
    };
    let mut value = json!({
        "cpu_model": cpuinfo_field(&cpuinfo, "model name"),
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(logical.max(1)),
        "logical_cpus": logical,
        "llc": read("/sys/devices/system/cpu/cpu0/cache/index3/size"),
        "cpu_flags": persistence_flags(&cpuinfo),
        "memory_bytes": meminfo_bytes("MemTotal:"),
        "kernel": read("/proc/sys/kernel/osrelease"),
        "os": os_name(),
        "flush_instruction": flush.to_string(),
        "copy_isa": isa.to_string(),
        "pmwire_version": env!("CARGO_PKG_VERSION"),
        "date": utc_now(),
    });
    if let Some(region) = region {
        let extra = json!({
            "region_kind": region.kind().to_string(),
            "persistence_domain": region.domain().to_string(),
            "survives_power_loss": region.domain().survives_power_loss(),
            "region_overridden": region.overridden(),
            "region_path": region.path().display().to_string(),
            "region_bytes": pmem::Media::len(region),
            "nt_threshold_bytes": pmem::Media::nt_threshold(region),
            "region": region.describe(),
        });
        value.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_089), (2025, 1, 1));
        assert_eq!(utc_now().len(), 20);
        assert_eq!(utc_stamp().len(), 15);
    }

    #[test]
    fn describes_machine_and_region() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let region = Region::create(dir.path().join("pool"), 1 << 20).unwrap();
        let value = describe(Some(&region));
        assert_eq!(value["region_kind"], "emulated");
        assert_eq!(value["persistence_domain"], "process_only");
        assert_eq!(value["survives_power_loss"], false);
        assert!(value["cores"].as_u64().unwrap() >= 1);
        assert!(value["flush_instruction"].is_string());
        assert!(describe(None).get("region_kind").is_none());
    }
}
