//! `pmwire-pool`: the named persistent buffer pool (PASTE's Ppool; issue 4).
#![deny(missing_docs)]
