//! pmwire-log (in progress).
