//! Running `pmwire serve` and reaching it: the key file it writes, a child
//! process wrapper, and UCX configurations shared by the remote suites.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use transport::UcxConfig;

use crate::spawn::spawn_until_ready;

/// What `pmwire serve --key-file` writes once it listens (JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyFile {
    /// The region id clients present.
    pub region_id: u32,
    /// The access key clients present.
    pub key: u64,
    /// The bound listener address.
    pub addr: String,
}

impl KeyFile {
    /// Writes the file atomically (a temporary file, then rename).
    pub fn write(&self, path: &Path) -> Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_string(self)?).with_context(|| format!("write {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))?;
        Ok(())
    }

    /// The listener address.
    pub fn socket(&self) -> Result<SocketAddr> {
        self.addr.parse().with_context(|| format!("bad address {}", self.addr))
    }
}

/// The UCX configuration for `tls` (`tcp` or `sm`); loopback addresses use
/// the `lo` device only. `one_sided` turns one-sided access on
/// ([`UcxConfig::with_one_sided`]): over tcp and sm a peer then reaches the
/// whole process, so only the benchmarks (one machine, their own peers)
/// and an operator's `pmwire serve --one-sided` ask for it.
pub fn ucx_config(tls: &str, loopback: bool, one_sided: bool) -> Result<UcxConfig> {
    let config = match tls {
        "tcp" => UcxConfig::tls("tcp"),
        "sm" => UcxConfig::shared_memory(),
        other => bail!("unknown transport '{other}' (tcp, sm)"),
    };
    let config = if loopback { config.with_var("NET_DEVICES", "lo") } else { config };
    Ok(if one_sided { config.with_one_sided() } else { config })
}

/// A `pmwire serve` child process.
pub struct ServeChild {
    child: Child,
    /// What it wrote to its key file.
    pub keys: KeyFile,
}

impl ServeChild {
    /// Starts `exe serve` on `pool` (with `--one-sided` if asked) and waits
    /// (≤ 30 s) for its key file.
    pub fn start(exe: &Path, pool: &Path, size: &str, tls: &str, copy_engine: usize, one_sided: bool, key_file: &Path) -> Result<ServeChild> {
        let mut cmd = Command::new(exe);
        cmd.args(["serve", "--pool"]).arg(pool);
        cmd.args(["--size", size, "--listen", "127.0.0.1:0", "--tls", tls, "--copy-engine", &copy_engine.to_string()]);
        if one_sided {
            cmd.arg("--one-sided");
        }
        cmd.arg("--key-file").arg(key_file).stdout(Stdio::null()).stderr(Stdio::inherit());
        let parse = |text: &str| serde_json::from_str::<KeyFile>(text).map(Some).context("key file");
        let (child, keys) = spawn_until_ready(cmd, "pmwire serve", key_file, parse)?;
        Ok(ServeChild { child, keys })
    }

    /// kill -9, and reap.
    pub fn kill9(mut self) -> Result<()> {
        self.child.kill().context("kill -9")?;
        self.child.wait().context("reap")?;
        Ok(())
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How the child ended, if it has (reaped; never blocks).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh path under /dev/shm for this process.
pub fn shm_path(name: &str) -> PathBuf {
    PathBuf::from(format!("/dev/shm/pmwire-{}-{name}", std::process::id()))
}
