//! Integration tests of `pmwire-kv-cluster`: one binary, case modules.
mod durable;
mod gen;
mod journal;
mod machines;
mod streams;
mod transactions;
