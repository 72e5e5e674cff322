//! `pmwire-resp`: the Redis protocol, with no I/O (issue 4).
#![deny(missing_docs)]

pub mod glob;
pub mod inline;
pub mod numbers;
pub mod request;
