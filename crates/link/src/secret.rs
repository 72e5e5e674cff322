//! The cluster's secret: 32 random bytes in a file only its owner may
//! read (`--secret-file`), the key of every link's handshake MACs.
//!
//! A file is refused, with the reason, unless it holds exactly
//! [`SECRET_BYTES`] bytes and no one but its owner may read or write it
//! (mode `0600` or stricter, as ssh demands of a private key): a secret
//! that other users can read is no secret. [`Secret::create`] makes one
//! with `0600` from the OS's random source, and never overwrites.
//! A missing file is an error unless the operator asked for it to be
//! created: a server must not be open by default, and a secret made up
//! silently on one member would never match the others'.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rand::RngCore;

/// Bytes of a secret.
pub const SECRET_BYTES: usize = 32;

/// The cluster's secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; SECRET_BYTES]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Why a secret file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// No such file.
    #[error("{0}: no secret file (make one with --create-secret, or copy the cluster's from another member)")]
    Missing(PathBuf),
    /// The file is readable or writable by others than its owner.
    #[error("{path}: mode {mode:04o} lets other users read or write the cluster's secret; chmod 600 it (and make a new secret if others may have read it)")]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Not exactly [`SECRET_BYTES`] bytes.
    #[error("{path}: holds {len} B, a secret file holds exactly {SECRET_BYTES} random bytes (made by --create-secret, or head -c 32 /dev/urandom)")]
    Length {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
    },
    /// The file exists already (create never overwrites).
    #[error("{0}: exists already; not overwriting a secret")]
    Exists(PathBuf),
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl Secret {
    /// A secret of these bytes (tests, simulations).
    pub fn from_bytes(bytes: [u8; SECRET_BYTES]) -> Secret {
        Secret(bytes)
    }

    /// A fresh secret from the OS's random source.
    pub fn random() -> Secret {
        let mut b = [0u8; SECRET_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut b);
        Secret(b)
    }

    /// The bytes (the MAC key).
    pub(crate) fn bytes(&self) -> &[u8; SECRET_BYTES] {
        &self.0
    }

    /// Reads the secret in `path`, refusing a file others may read.
    pub fn load(path: &Path) -> Result<Secret, SecretError> {
        let io = |source| SecretError::Io { path: path.to_path_buf(), source };
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(SecretError::Missing(path.to_path_buf())),
            Err(e) => return Err(io(e)),
        };
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(SecretError::Exposed { path: path.to_path_buf(), mode });
        }
        if meta.len() != SECRET_BYTES as u64 {
            return Err(SecretError::Length { path: path.to_path_buf(), len: meta.len() });
        }
        let bytes = std::fs::read(path).map_err(io)?;
        let bytes: [u8; SECRET_BYTES] = bytes.try_into().map_err(|b: Vec<u8>| SecretError::Length { path: path.to_path_buf(), len: b.len() as u64 })?;
        Ok(Secret(bytes))
    }

    /// Makes a new secret file at `path` (mode 0600, never overwriting)
    /// and returns the secret.
    pub fn create(path: &Path) -> Result<Secret, SecretError> {
        let secret = Secret::random();
        let mut file = match OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(SecretError::Exists(path.to_path_buf())),
            Err(source) => return Err(SecretError::Io { path: path.to_path_buf(), source }),
        };
        let io = |source| SecretError::Io { path: path.to_path_buf(), source };
        file.write_all(&secret.0).map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok(secret)
    }

    /// [`Secret::load`], or with `create` a new file where there is none;
    /// whether it was created.
    pub fn open(path: &Path, create: bool) -> Result<(Secret, bool), SecretError> {
        match Secret::load(path) {
            Err(SecretError::Missing(_)) if create => match Secret::create(path) {
                Ok(s) => Ok((s, true)),
                // Another member's process made it meanwhile.
                Err(SecretError::Exists(_)) => Ok((Secret::load(path)?, false)),
                Err(e) => Err(e),
            },
            other => other.map(|s| (s, false)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_secret_is_0600_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        let made = Secret::create(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(Secret::load(&path).unwrap(), made);
        assert!(matches!(Secret::create(&path), Err(SecretError::Exists(_))));
        let (again, created) = Secret::open(&path, true).unwrap();
        assert_eq!((again, created), (made, false));
    }

    #[test]
    fn missing_exposed_and_wrong_length_files_are_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        let e = Secret::load(&path).unwrap_err();
        assert!(matches!(e, SecretError::Missing(_)));
        assert!(e.to_string().contains("--create-secret"), "{e}");
        Secret::create(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Secret::load(&path).unwrap_err();
        assert!(matches!(e, SecretError::Exposed { mode: 0o644, .. }), "{e}");
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, b"hunter2\n").unwrap();
        assert!(matches!(Secret::load(&path), Err(SecretError::Length { len: 8, .. })));
        let (_, created) = Secret::open(&dir.path().join("new"), true).unwrap();
        assert!(created);
    }
}
