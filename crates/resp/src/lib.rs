//! `pmwire-resp`: the Redis protocol, with no I/O (issue 4).
#![deny(missing_docs)]

pub mod blob;
pub mod client;
pub mod exec;
pub mod glob;
pub mod inline;
pub mod keyspace;
pub mod numbers;
pub mod reply;
pub mod request;
pub mod ycsb;
