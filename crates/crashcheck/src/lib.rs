//! `pmwire-crashcheck`: every state a crash could leave persistent memory in.
//!
//! A workload runs on a [`TracedMedia`], which records each store, flush and
//! fence. [`explore`] replays the trace and, at every crash point (just
//! before each fence, and at the end), builds crash images the hardware
//! could leave, then calls the structure's checker on each.
//!
//! # The crash model
//! - Only aligned 8 B words are failure-atomic. Each word has a *floor*
//!   (its value known to be durable) and a *history* of values stored since.
//! - A store appends to the word's history. A flush captures, for every word
//!   of each 64 B line it covers, the history so far; the next fence makes
//!   the captured value the new floor. A non-temporal store is captured at
//!   once. A value stored after a flush is not covered by that flush.
//! - At a crash, every word independently holds its floor or any value of
//!   its history (a superset of cache-line eviction in any order, and of
//!   torn multi-word writes).
//!
//! At a point with few possible images all are enumerated; otherwise
//! [`Config::samples`] images are drawn with a seeded generator from four
//! strategies: both extremes (nothing / everything pending reached media),
//! independent words, whole lines at a random moment of their history, and
//! a global prefix in program order. A failure names the seed and the crash
//! point; the same seed replays the same images.
//!
//! [`CrashState`] folds a trace as it runs and draws one image at a time
//! from the same model, for a long-running harness (the replication
//! simulation crashes a replica's medium into such an image).
//!
//! [`TracedMedia`]: pmem::trace::TracedMedia
#![deny(missing_docs)]

pub mod checks;
mod replay;

pub use replay::{explore, Config, CrashImage, CrashState, Failure, Report};

/// One named crash check, as each persistent structure's `crash::checks()`
/// lists them for `pmwire check`: the correct structure first, then its
/// planted bugs, which the checker must catch.
#[derive(Clone, Copy, Debug)]
pub struct Check {
    /// What is checked.
    pub name: &'static str,
    /// Whether this is a planted bug the checker must catch.
    pub planted: bool,
    /// Runs the check.
    pub run: fn(&Config) -> Report,
}

/// Asserts that a structure's check list has `planted` planted bugs and
/// names every check once (each crate's registry test).
pub fn assert_registry(checks: &[Check], planted: usize) {
    assert_eq!(checks.iter().filter(|c| c.planted).count(), planted, "planted checks");
    let mut names: Vec<_> = checks.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), checks.len(), "a check name repeats");
}
