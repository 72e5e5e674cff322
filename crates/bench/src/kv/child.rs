//! `pmwire kv` as a child process, for the kv and http-wal suites: started
//! on a pool with a mode, its RESP and HTTP addresses read from its ready
//! file, stopped (SIGTERM, then SIGKILL) when dropped.

use anyhow::Result;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::placement::Placement;
use crate::spawn::spawn_until_ready;

/// How `pmwire kv` treats a write (its `--mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvMode {
    /// Received straight into pool buffers; values stored by their extents.
    ZeroCopy,
    /// Received into DRAM, then copied into the pool and persisted.
    Copy,
    /// Acknowledged without persisting (HTTP WAL baseline).
    NoPersist,
}

impl KvMode {
    /// The `--mode` argument, also the variant name stem.
    pub fn arg(self) -> &'static str {
        match self {
            KvMode::ZeroCopy => "zero-copy",
            KvMode::Copy => "copy",
            KvMode::NoPersist => "no-persist",
        }
    }

    /// The variant name in results.
    pub fn variant(self) -> &'static str {
        match self {
            KvMode::ZeroCopy => "pmwire_zero_copy",
            KvMode::Copy => "pmwire_copy",
            KvMode::NoPersist => "pmwire_no_persist",
        }
    }
}

/// A running `pmwire kv`.
pub struct KvChild {
    child: Child,
    /// Its RESP address.
    pub resp: SocketAddr,
    /// Its HTTP address.
    pub http: SocketAddr,
    ready_file: PathBuf,
}

impl KvChild {
    /// Starts `exe kv` on a fresh `pool` of `size` (e.g. `2G`) in `mode`,
    /// placed on `placement`'s server CPU, and waits (≤ 30 s) for its
    /// ready file.
    pub fn start(exe: &Path, pool: &Path, size: &str, mode: KvMode, placement: &Placement) -> Result<KvChild> {
        let _ = std::fs::remove_file(pool);
        KvChild::restart(exe, pool, size, mode, placement)
    }

    /// Starts `exe kv` on `pool` as it is (recovering what it holds).
    pub fn restart(exe: &Path, pool: &Path, size: &str, mode: KvMode, placement: &Placement) -> Result<KvChild> {
        let ready_file = pool.with_extension("ready");
        let mut command = Command::new(exe);
        command.arg("kv").arg("--pool").arg(pool).args(["--size", size, "--mode", mode.arg()]);
        command.args(["--resp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--ready-file"]).arg(&ready_file);
        command.stdout(Stdio::null()).stderr(Stdio::inherit());
        placement.pin_server(&mut command);
        let parse = |text: &str| Ok(address(text, "resp").zip(address(text, "http")));
        let (child, (resp, http)) = spawn_until_ready(command, "pmwire kv", &ready_file, parse)?;
        Ok(KvChild { child, resp, http, ready_file })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for KvChild {
    fn drop(&mut self) {
        // SAFETY: a plain syscall on our own child's pid, reaped below.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                let _ = std::fs::remove_file(&self.ready_file);
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.ready_file);
    }
}

/// The address after `name` on some line of a ready file (`resp 127.0.0.1:6379`,
/// `resp=…`, `resp: …` or JSON `"resp": "…"` all work).
pub fn address(text: &str, name: &str) -> Option<SocketAddr> {
    text.lines().find_map(|line| {
        let at = line.find(name)?;
        let rest = &line[at + name.len()..];
        let rest = rest.trim_start_matches(|c: char| c == '"' || c == ':' || c == '=' || c.is_whitespace());
        let token: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']')).collect();
        token.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_addresses_in_any_of_the_usual_shapes() {
        let want: SocketAddr = "127.0.0.1:4242".parse().unwrap();
        for text in ["resp 127.0.0.1:4242\nhttp 127.0.0.1:1\n", "resp=127.0.0.1:4242", "{\"resp\": \"127.0.0.1:4242\"}", "resp: 127.0.0.1:4242"] {
            assert_eq!(address(text, "resp"), Some(want), "{text}");
        }
        assert_eq!(address("http 127.0.0.1:1", "resp"), None);
        assert_eq!(address("resp not-an-address", "resp"), None);
    }
}
