//! `pmwire-netio`: io_uring TCP serving into caller-owned buffers (issue 4).
#![deny(missing_docs)]
