//! Links the system libucx (ucp, uct, ucs) found by pkg-config. The bindings
//! themselves are committed (src/bindings.rs, made by regenerate.sh), so a
//! build needs no libclang.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // pkg-config's `ucx` module names -lucp -luct -lucs -lucm; 1.13 is the
    // version the committed bindings were generated from and tested with.
    let ucx = match pkg_config::Config::new().atleast_version("1.13").probe("ucx") {
        Ok(lib) => lib,
        Err(e) => panic!(
            "pmwire-ucx-sys needs the UCX development files (>= 1.13) and pkg-config: \
             `apt-get install libucx-dev pkg-config` ({e})"
        ),
    };
    // The one hand-written C: UCX's log handler (src/log.c).
    println!("cargo:rerun-if-changed=src/log.c");
    cc::Build::new().file("src/log.c").includes(&ucx.include_paths).warnings(true).compile("pmwire_ucx_log");
}
