//! One process per pool: an exclusive, non-blocking `flock` on a file
//! beside (or being) the pool, held for as long as the returned file is
//! open, and released by the kernel when the process dies (kill -9
//! included), so a restart never finds a stale lock.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds it.
    #[error("{0} is locked by another process")]
    Held(std::path::PathBuf),
    /// The file could not be opened.
    #[error("open {0}: {1}")]
    Open(std::path::PathBuf, std::io::Error),
}

/// Locks `path` for this process (made if `create` and missing; never
/// truncated); the lock lasts as long as the returned file is open.
pub fn lock_file(path: &Path, create: bool) -> Result<File, LockError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
        .map_err(|e| LockError::Open(path.to_path_buf(), e))?;
    // SAFETY: flock on an fd we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(LockError::Held(path.to_path_buf()));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_closes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool.lock");
        assert!(matches!(lock_file(&path, false), Err(LockError::Open(..))), "not made unless asked");
        let first = lock_file(&path, true).unwrap();
        assert!(matches!(lock_file(&path, true), Err(LockError::Held(_))));
        drop(first);
        lock_file(&path, false).unwrap();
    }
}
