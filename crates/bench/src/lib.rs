//! pmwire-bench (in progress).
