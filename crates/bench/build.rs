//! Probes for PMDK with `pkg-config` and passes what it finds to the crate
//! as compile-time environment variables. Nothing is linked: the peer is
//! loaded at run time with `dlopen` (see `src/pmdk.rs`), so the crate
//! builds, and the suite runs, on a machine without PMDK; the PMDK rows
//! then say "not run: libpmem not found".
//!
//! Emitted (each may be absent):
//! - `PMWIRE_LIBPMEM_DIR`, `PMWIRE_LIBPMEM_VERSION`
//! - `PMWIRE_LIBPMEMLOG_DIR`, `PMWIRE_LIBPMEMLOG_VERSION`
//! - `PMWIRE_LIBPMEMOBJ_DIR`, `PMWIRE_LIBPMEMOBJ_VERSION`

use std::process::Command;

fn pkg_config(args: &[&str]) -> Option<String> {
    let output = Command::new("pkg-config").args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    if text.is_empty() {
        None
    } else {
        Some(text.to_string())
    }
}

fn probe(library: &str, prefix: &str) {
    if let Some(dir) = pkg_config(&["--variable=libdir", library]) {
        println!("cargo:rustc-env={prefix}_DIR={dir}");
    }
    if let Some(version) = pkg_config(&["--modversion", library]) {
        println!("cargo:rustc-env={prefix}_VERSION={version}");
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    probe("libpmem", "PMWIRE_LIBPMEM");
    probe("libpmemlog", "PMWIRE_LIBPMEMLOG");
    probe("libpmemobj", "PMWIRE_LIBPMEMOBJ");
}
