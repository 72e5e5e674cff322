//! pmwire-remote (in progress).
