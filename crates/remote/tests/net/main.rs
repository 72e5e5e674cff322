//! The server loop and the client over the network seam, end to end: one
//! test binary with case modules (raft-rs `harness/tests` style). Each case
//! runs over the in-process transport, UCX tcp and UCX shared memory, with
//! the server on its own thread (listener on 127.0.0.1:0 for UCX).

mod bad_input;
mod cases;
mod fuzz;
mod harness;
mod hostile;
