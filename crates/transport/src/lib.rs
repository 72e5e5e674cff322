//! pmwire-transport (in progress).
