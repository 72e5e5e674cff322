//! The cluster's secret for the replicas a benchmark starts, and its
//! clients' authenticated transports (`pmwire_smr::links`).
//!
//! One secret per benchmark process, in `/dev/shm/pmwire-smr-bench-PID-secret`
//! (mode 0600; removed with the other files of a dead campaign), passed to
//! every replica with `--secret-file`. For a before-and-after comparison
//! with a build that predates links, [`use_legacy_links`] starts replicas
//! without the option and makes the clients' transports unauthenticated.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use anyhow::{anyhow, Result};
use link::{LinkTransport, Secret};
use pmwire_smr::client::SmrClient;
use pmwire_smr::links::client_link;
use transport::{UcxConfig, UcxTransport};

/// A benchmark's client of the cluster.
pub type Client = SmrClient<LinkTransport<UcxTransport>>;

static LEGACY: AtomicBool = AtomicBool::new(false);
static SECRET: OnceLock<Result<(PathBuf, Secret), String>> = OnceLock::new();

/// Replicas come from a build without links: no `--secret-file`, and
/// clients do no handshake. For `smr-crash --replica-exe` only.
pub fn use_legacy_links() {
    LEGACY.store(true, Ordering::Relaxed);
}

/// Whether [`use_legacy_links`] was called.
pub fn legacy_links() -> bool {
    LEGACY.load(Ordering::Relaxed)
}

/// This process's secret file (made on first use) and its secret.
fn secret() -> Result<&'static (PathBuf, Secret)> {
    let made = SECRET.get_or_init(|| {
        let path = PathBuf::from(format!("/dev/shm/pmwire-smr-bench-{}-secret", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Secret::create(&path).map(|s| (path, s)).map_err(|e| e.to_string())
    });
    made.as_ref().map_err(|e| anyhow!("the benchmark's cluster secret: {e}"))
}

/// The arguments that give a replica the secret (none for a legacy build).
pub fn secret_args() -> Result<Vec<OsString>> {
    if legacy_links() {
        return Ok(Vec::new());
    }
    Ok(vec!["--secret-file".into(), secret()?.0.clone().into()])
}

/// A client transport that proves the secret to the replicas.
pub fn client_transport(config: &UcxConfig) -> Result<LinkTransport<UcxTransport>> {
    link_client(UcxTransport::new(config)?)
}

/// `transport` behind a client link that proves the secret to the replicas.
pub fn link_client<T: transport::Transport>(ucx: T) -> Result<LinkTransport<T>> {
    if legacy_links() {
        return Ok(LinkTransport::unauthenticated(ucx, client_link()));
    }
    Ok(LinkTransport::real(ucx, secret()?.1.clone(), client_link()))
}

/// Removes this process's secret file, if it made one (at the end of a
/// campaign or suite; a campaign killed before is cleaned up by the next,
/// as its other files are).
pub fn remove_secret_file() {
    if let Some(Ok((path, _))) = SECRET.get() {
        let _ = std::fs::remove_file(path);
    }
}
