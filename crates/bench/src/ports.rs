//! Loopback ports for servers whose addresses must be named before they
//! start (cluster members list each other's), below the kernel's ephemeral
//! range.
//!
//! A port from binding port 0 and releasing it is an ephemeral one: a member
//! started first connects out to its peers from ephemeral ports and can take
//! the port the next member was to listen on (`bind`: address already in use;
//! seen once in a 100-run smr-crash campaign and once in CI). Ports below the
//! range are never handed to outgoing connections. A process-wide cursor
//! keeps two callers on different threads (the tests of one binary) from
//! drawing the same port before either binds it.

use anyhow::{anyhow, Result};
use std::sync::atomic::{AtomicU32, Ordering};

/// Where the next search starts, as an offset into the range; `u32::MAX`
/// until the first call seeds it from the process id.
static CURSOR: AtomicU32 = AtomicU32::new(u32::MAX);

/// `n` distinct loopback ports nothing listens on now, below the ephemeral
/// range (in the 12,000 ports under it).
pub fn listen_ports(n: usize) -> Result<Vec<u16>> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let low: u16 = range.split_whitespace().next().and_then(|p| p.parse().ok()).unwrap_or(32768);
    let (first, last) = (low.saturating_sub(12_000).max(1024), low.saturating_sub(1).max(1025));
    let span = u32::from(last - first) + 1;
    let seed = std::process::id().wrapping_mul(7919) % span;
    let _ = CURSOR.compare_exchange(u32::MAX, seed, Ordering::Relaxed, Ordering::Relaxed);
    let mut picked = Vec::with_capacity(n);
    for _ in 0..span {
        let at = CURSOR.fetch_add(1, Ordering::Relaxed) % span;
        let port = first + at as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() && !picked.contains(&port) {
            picked.push(port);
            if picked.len() == n {
                return Ok(picked);
            }
        }
    }
    Err(anyhow!("no {n} free ports in {first}..={last}"))
}

/// One port, as [`listen_ports`].
pub fn listen_port() -> Result<u16> {
    Ok(listen_ports(1)?[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_differ_across_calls_and_lie_below_the_ephemeral_range() {
        let a = listen_ports(3).unwrap();
        let b = listen_ports(3).unwrap();
        let mut all: Vec<u16> = a.iter().chain(&b).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 6, "{a:?} {b:?}");
        assert!(all.iter().all(|&p| p < 32768 && p >= 1024), "{all:?}");
    }
}
