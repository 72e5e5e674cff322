//! The cluster's secret for the replicas a benchmark starts, and its
//! clients' authenticated transports (`pmwire_smr::links`).
//!
//! One secret per benchmark process, in `/dev/shm/pmwire-smr-bench-PID-secret`
//! (mode 0600; removed with the other files of a dead campaign), passed to
//! every replica with `--secret-file`. Suites and campaigns hold it
//! ([`hold_secret`]) while they run; the file goes when the last holder of
//! the process lets go. (A campaign that removed it at its end, while a
//! suite of the same test binary still ran, made that suite's next member
//! or client prove a new secret that its running cluster refused.) For a
//! before-and-after comparison with a build that predates links,
//! [`use_legacy_links`] starts replicas without the option and makes the
//! clients' transports unauthenticated.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use anyhow::{anyhow, Result};
use link::{LinkTransport, Secret};
use pmwire_smr::client::SmrClient;
use pmwire_smr::links::client_link;
use transport::{UcxConfig, UcxTransport};

/// A benchmark's client of the cluster.
pub type Client = SmrClient<LinkTransport<UcxTransport>>;

static LEGACY: AtomicBool = AtomicBool::new(false);
/// This process's secret, and how many [`SecretHold`]s keep it.
static SECRET: Mutex<Held> = Mutex::new(Held { holders: 0, made: None });

struct Held {
    holders: usize,
    /// The secret file and secret, while the file exists (the last hold
    /// removes it; the next suite of the same process, as in the tour,
    /// makes a new one).
    made: Option<(PathBuf, Secret)>,
}

/// Replicas come from a build without links: no `--secret-file`, and
/// clients do no handshake. For `smr-crash --replica-exe` only.
pub fn use_legacy_links() {
    LEGACY.store(true, Ordering::Relaxed);
}

/// Whether [`use_legacy_links`] was called.
pub fn legacy_links() -> bool {
    LEGACY.load(Ordering::Relaxed)
}

/// This process's secret file (made on first use, or again after
/// the last [`SecretHold`] dropped) and its secret.
fn secret() -> Result<(PathBuf, Secret)> {
    let mut held = SECRET.lock().expect("the secret's lock");
    if let Some(made) = held.made.as_ref() {
        return Ok(made.clone());
    }
    let path = PathBuf::from(format!("/dev/shm/pmwire-smr-bench-{}-secret", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let secret = Secret::create(&path).map_err(|e| anyhow!("the benchmark's cluster secret: {e}"))?;
    held.made = Some((path.clone(), secret.clone()));
    Ok((path, secret))
}

/// The arguments that give a replica the secret (none for a legacy build).
pub fn secret_args() -> Result<Vec<OsString>> {
    if legacy_links() {
        return Ok(Vec::new());
    }
    Ok(vec!["--secret-file".into(), secret()?.0.into()])
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
    Ok(LinkTransport::real(ucx, secret()?.1, client_link()))
}

/// The secret kept for a suite or campaign: while any hold lives, every
/// member and client of this process proves the same secret.
#[must_use = "the secret may be removed as soon as the hold is dropped"]
pub struct SecretHold(());

/// Holds this process's secret until the returned value drops; the last
/// hold to drop removes the secret file (a campaign killed before is
/// cleaned up by the next, as its other files are).
pub fn hold_secret() -> SecretHold {
    SECRET.lock().expect("the secret's lock").holders += 1;
    SecretHold(())
}

impl Drop for SecretHold {
    fn drop(&mut self) {
        let mut held = SECRET.lock().expect("the secret's lock");
        held.holders -= 1;
        if held.holders == 0 {
            if let Some((path, _)) = held.made.take() {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_outlives_a_hold_while_another_holds_it() {
        let suite = hold_secret();
        let campaign = hold_secret();
        let (path, _) = secret().unwrap();
        drop(campaign);
        assert!(path.exists(), "a campaign's end removed the secret a suite still holds");
        assert_eq!(secret().unwrap().0, path);
        drop(suite);
        assert!(!path.exists(), "the last hold leaves the secret file behind");
    }
}
