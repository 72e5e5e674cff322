//! pmwire-remote (in progress).
#![deny(missing_docs)]
pub mod proto;
