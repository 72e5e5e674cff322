//! `pmwire-kv`: the key-value engine (issue 4).
#![deny(missing_docs)]
