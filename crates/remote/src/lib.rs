//! pmwire-remote (in progress).
#![deny(missing_docs)]
pub mod calibration;
pub mod client;
pub mod copy_engine;
pub mod crash;
pub mod event_loop;
pub mod pool;
pub mod proto;
pub mod server;
