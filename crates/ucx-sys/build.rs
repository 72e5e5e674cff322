//! Links the system libucx (ucp, uct, ucs) found by pkg-config. The bindings
//! themselves are committed (src/bindings.rs, made by regenerate.sh), so a
//! build needs no libclang.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // pkg-config's `ucx` module names -lucp -luct -lucs -lucm; 1.13 is the
    // version the committed bindings were generated from and tested with.
    if let Err(e) = pkg_config::Config::new()
        .atleast_version("1.13")
        .probe("ucx")
    {
        panic!(
            "pmwire-ucx-sys needs the UCX development files (>= 1.13) and pkg-config: \
             `apt-get install libucx-dev pkg-config` ({e})"
        );
    }
}
