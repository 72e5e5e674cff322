//! Listening sockets for servers that restart on their ports at once
//! ([`bind_listener`]): the peer listener of [`crate::TcpTransport`] and
//! netio's RESP and HTTP listeners.
//!
//! `std::net::TcpListener::bind` sets `SO_REUSEADDR`, so a killed
//! process's connections still closing on the port (`TIME-WAIT`,
//! `FIN-WAIT`) do not keep the next process out. What it does not cover is
//! a *listening* socket: a process killed -9 whose io_uring held an accept
//! on its listener leaves that listener (and the connections the ring
//! holds) open after the process is gone and reaped, until the kernel's
//! ring teardown, which runs afterwards, closes them (7-44 ms on this VM
//! under load, `crates/cli/tests/kv_restart.rs`). `bind` then fails with
//! `EADDRINUSE`. `SO_REUSEPORT` would let the new listener share the port
//! with the dying one (whose accept queue nobody drains, so connections
//! routed there are lost) and with any live process of the same user bound
//! there by mistake; instead the bind is tried again, every
//! [`REBIND_STEP`], for at most [`REBIND_WAIT`]: a port a live process
//! holds still fails, with the same error, once that time is up.

use std::io;
use std::net::{TcpListener, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How long a bind refused with `EADDRINUSE` is tried again.
pub const REBIND_WAIT: Duration = Duration::from_secs(5);
/// Between two tries.
pub const REBIND_STEP: Duration = Duration::from_millis(10);

/// Binds a listener at `addr` (module docs): `std`'s bind, tried again
/// while the port is in use, up to [`REBIND_WAIT`].
pub fn bind_listener<A: ToSocketAddrs>(addr: A) -> io::Result<TcpListener> {
    bind_within(addr, REBIND_WAIT)
}

/// [`bind_listener`] with another bound on the retries.
pub fn bind_within<A: ToSocketAddrs>(addr: A, wait: Duration) -> io::Result<TcpListener> {
    let start = Instant::now();
    loop {
        match TcpListener::bind(&addr) {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && start.elapsed() < wait => std::thread::sleep(REBIND_STEP),
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_freed_while_waiting_is_taken() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let freer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(held);
        });
        let l = bind_within(addr, Duration::from_secs(30)).expect("bound once the holder let go");
        assert_eq!(l.local_addr().unwrap(), addr);
        freer.join().unwrap();
    }

    #[test]
    fn a_port_held_past_the_wait_is_refused() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let e = bind_within(addr, Duration::from_millis(50)).expect_err("still held");
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    }
}
