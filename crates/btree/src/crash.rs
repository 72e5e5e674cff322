//! Crash checks (in progress).
