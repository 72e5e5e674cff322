//! pmwire-model (in progress).
