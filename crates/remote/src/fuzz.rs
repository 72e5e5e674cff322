//! An in-tree fuzzer for the server core and for `pmwire serve`: seeded,
//! structured and mutated requests whose every reply is checked against a
//! model of the pool and its logs, not only for crashes.
//!
//! - `gen` draws requests of every opcode from one seed, aimed at the
//!   model's edges, a fifth of them mutated as bytes.
//! - `model` predicts each reply (status, value, detail, payload) from the
//!   request's bytes as `docs/FORMAT.md` says, in the server's documented
//!   order of checks, and tracks the data area, the directory and each
//!   log's entries, head and tail.
//! - `session` ties them together with the canaries (a 16 KiB data range
//!   and a log that no request the model lets succeed may touch) and the
//!   checkpoint: superblock, directory slots, metadata outside the logs,
//!   the canaries, the whole data area, and every log opened from the
//!   region image, compared with the model.
//! - [`run_core`] drives [`Server::handle`](crate::server::Server::handle)
//!   and its two siblings directly, with four clients holding no right,
//!   READ, WRITE and both (`Server::grant`) plus a never-connected one,
//!   reconnections, restarts on the same pool (`Server::open`), and the
//!   copy engine's completions.
//! - [`run_net`] drives a server over a [`transport::Transport`] with raw
//!   calls (the header and payload as the wire splits them, so malformed
//!   requests reach the server), windows of pipelined requests per
//!   connection; [`ThreadServer`] is `event_loop::serve` on a UCX
//!   transport in a thread (it can grant rights), and `pmwire check fuzz`
//!   also runs it against a `pmwire serve` child process.
//!
//! The model predicts one reply for every request, exactly; nothing is
//! accepted loosely.
//!
//! Invariants:
//! - Every wait is bounded: a reply or completion not seen within
//!   [`HANG_LIMIT`] fails the run as a hang, with the seed.
//! - A failure names the target, the seed, the request number and the
//!   request's bytes; the same seed replays the same requests.

use std::fmt;
use std::time::Duration;

mod direct;
mod gen;
mod model;
mod net;
mod session;

pub use direct::{run_core, CoreServer};
pub use gen::MAX_HEADER_BYTES;
pub use model::{Geometry, HelloPin, Serving};
pub use net::{run_net, run_thread, ucx_config, NetServer, ThreadServer, NET_REGION_BYTES};
pub use session::RIGHTS;

/// Longest any wait for a reply or a copy lasts before the run fails as a hang.
pub const HANG_LIMIT: Duration = Duration::from_secs(10);

/// How a run behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuzzConfig {
    /// The seed every draw comes from.
    pub seed: u64,
    /// Stop after this many requests.
    pub max_requests: u64,
    /// Stop after this long.
    pub max_time: Duration,
    /// Requests between two checkpoints (full comparisons with the model).
    pub checkpoint_every: u64,
    /// Network targets: requests pipelined per window, at most (1..=32).
    pub window: usize,
    /// A planted fault the harness must catch (tests only).
    #[doc(hidden)]
    pub planted: Planted,
}

impl FuzzConfig {
    /// `seed`, bounded by `max_requests` and `max_time`, with the defaults:
    /// a checkpoint every 20,000 requests, windows of up to 16, no
    /// overflowing log specs.
    pub fn new(seed: u64, max_requests: u64, max_time: Duration) -> FuzzConfig {
        FuzzConfig {
            seed,
            max_requests,
            max_time,
            checkpoint_every: 20_000,
            window: 16,
            planted: Planted::None,
        }
    }
}

/// Faults planted in the harness (never in the server) to prove it can fail.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Planted {
    /// Nothing planted.
    #[default]
    None,
    /// One bit of the reply checked `index`-th is flipped before the check.
    AlterReply {
        /// Which reply.
        index: u64,
    },
    /// The model forgets every ATOMIC_WRITE8.
    WrongModel,
    /// A byte of the data canary is overwritten behind the server's back.
    CorruptCanary,
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The target (`core depth 8`, `tcp`, …).
    pub target: String,
    /// The seed.
    pub seed: u64,
    /// Requests sent (set-up included).
    pub requests: u64,
    /// Of which mutated.
    pub mutated: u64,
    /// Of which offloaded writes the model expected to succeed.
    pub offloaded: u64,
    /// Draws thrown away (they would have touched a canary, or hit the
    /// known defect).
    pub rerolled: u64,
    /// Replies by status code (`proto::Status as usize`).
    pub statuses: [u64; 19],
    /// `Ok` replies by opcode code (1..=12; 0 unused).
    pub ok_by_opcode: [u64; 13],
    /// Replies compared with the model.
    pub replies_checked: u64,
    /// Checkpoints passed.
    pub checkpoints: u64,
    /// Times the server was dropped and opened again on its pool (core).
    pub restarts: u64,
    /// Data-area bytes compared at checkpoints.
    pub data_bytes_compared: u64,
    /// Log entries compared at checkpoints.
    pub log_entries_compared: u64,
    /// Wall time.
    pub elapsed: Duration,
}

impl Report {
    /// Requests per second.
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Adds `other`'s counts to this report's.
    pub fn absorb(&mut self, other: &Report) {
        self.requests += other.requests;
        self.mutated += other.mutated;
        self.offloaded += other.offloaded;
        self.rerolled += other.rerolled;
        for (a, b) in self.statuses.iter_mut().zip(other.statuses) {
            *a += b;
        }
        for (a, b) in self.ok_by_opcode.iter_mut().zip(other.ok_by_opcode) {
            *a += b;
        }
        self.replies_checked += other.replies_checked;
        self.checkpoints += other.checkpoints;
        self.restarts += other.restarts;
        self.data_bytes_compared += other.data_bytes_compared;
        self.log_entries_compared += other.log_entries_compared;
        self.elapsed += other.elapsed;
    }
}

/// What went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// A reply differs from the model's.
    Reply,
    /// The server panicked or exited.
    Crash,
    /// No reply or completion within [`HANG_LIMIT`].
    Hang,
    /// A canary changed.
    Canary,
    /// The region (data, directory, logs) differs from the model.
    State,
    /// The run could not start.
    Setup,
    /// The transport failed an operation.
    Transport,
}

/// A failed run: where, with which seed, and what was seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The target.
    pub target: String,
    /// The seed to replay.
    pub seed: u64,
    /// Requests sent when it failed (the failing one is this number, or
    /// within the last window).
    pub request: u64,
    /// What kind of failure.
    pub kind: FailureKind,
    /// The request, what was expected and what came.
    pub detail: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FAIL {}: {:?} at request {} (seed {})\n  {}", self.target, self.kind, self.request, self.seed, self.detail)
    }
}

impl std::error::Error for Failure {}

#[cfg(test)]
mod tests;
