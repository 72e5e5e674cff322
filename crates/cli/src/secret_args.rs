//! `--secret-file` (and, for a server, `--create-secret`): the cluster's
//! secret that every replica, `pmwire smr`, and a mirror's primary and
//! backup prove on each connection ([`link::LinkTransport`]).
//!
//! The option is required: a server must not be open by default. A
//! missing file is an error unless a server is told `--create-secret`,
//! which makes one (32 random bytes, mode 0600) for the operator to copy
//! to the other members; a file other users may read is refused.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use link::Secret;

/// The secret of a server (a replica, a mirror backup).
#[derive(Args, Clone, Debug)]
pub struct ServerSecret {
    /// The cluster's secret: a file of 32 random bytes, mode 0600, the same on every member. Every connection proves
    /// it (HMAC-SHA256 challenge-response; the secret never travels) before anything else is accepted.
    #[arg(long)]
    pub secret_file: PathBuf,
    /// Create --secret-file (32 random bytes, mode 0600) if it does not exist; copy it to the other members.
    #[arg(long)]
    pub create_secret: bool,
}

impl ServerSecret {
    /// The secret (made if asked and missing; said so on stdout).
    pub fn load(&self) -> Result<Secret> {
        let (secret, created) = Secret::open(&self.secret_file, self.create_secret).context("the cluster's secret")?;
        if created {
            println!("created the cluster's secret in {} (mode 0600): copy it to every member and client", self.secret_file.display());
        }
        Ok(secret)
    }
}

/// The secret of a client (`pmwire smr`, a mirror primary).
#[derive(Args, Clone, Debug)]
pub struct ClientSecret {
    /// The cluster's secret (the servers' --secret-file): a file of 32 random bytes, mode 0600.
    #[arg(long)]
    pub secret_file: PathBuf,
}

impl ClientSecret {
    /// The secret.
    pub fn load(&self) -> Result<Secret> {
        Secret::load(&self.secret_file).context("the cluster's secret")
    }
}
