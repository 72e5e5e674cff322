//! The model's errors: one enum, since every operation fails the same few ways.

use thiserror::Error;

/// Why the model refused to run.
#[derive(Debug, Error)]
pub enum ModelError {
    /// A parameter breaks an invariant of [`crate::Params`].
    #[error("parameter {name}: {why}")]
    BadParameter {
        /// The parameter.
        name: &'static str,
        /// What is wrong.
        why: String,
    },
    /// No experiment has this name.
    #[error("unknown experiment {0:?}; try one of {list} or all", list = crate::experiments::NAMES.join(", "))]
    UnknownExperiment(String),
    /// A trace is longer than [`crate::cpu::MAX_TRACE_OPS`].
    #[error("trace of {ops} operations exceeds the limit of {limit}")]
    TraceTooLong {
        /// Its length.
        ops: usize,
        /// The limit.
        limit: usize,
    },
    /// Recording a log trace failed.
    #[error("recording the {tail} log trace: {why}")]
    Recording {
        /// The tail strategy.
        tail: &'static str,
        /// The log's error.
        why: String,
    },
}
