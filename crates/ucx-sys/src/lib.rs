//! pmwire-ucx-sys (in progress).
