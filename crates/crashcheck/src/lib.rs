//! pmwire-crashcheck (in progress).
