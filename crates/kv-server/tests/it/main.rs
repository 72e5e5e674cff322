//! Integration tests of pmwire-kv-server over emulated (/dev/shm) pools: one binary, case
//! modules.

mod big;
mod blocking;
mod cluster;
mod clients;
mod common;
mod http;
mod notify;
mod pubsub;
mod queues;
mod resp;
mod redispy;
mod restart;
mod tools;
