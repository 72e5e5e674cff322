//! Child servers the suites start: spawn, then wait for the file the
//! server writes once it listens (`pmwire serve --key-file`, `pmwire kv
//! --ready-file`).

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// How long a child may take to write its file.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// Spawns `command` (named `what` in errors) and waits until `file` exists
/// and `parse` accepts its text; returns the child and what `parse` made of
/// it. A stale `file` is removed first. The child is killed if it does not
/// get ready in time; an error if it exits first.
pub(crate) fn spawn_until_ready<T>(
    mut command: Command,
    what: &str,
    file: &Path,
    parse: impl Fn(&str) -> Result<Option<T>>,
) -> Result<(Child, T)> {
    let _ = std::fs::remove_file(file);
    let mut child = command.spawn().with_context(|| format!("starting {what}"))?;
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            if let Some(ready) = parse(&text)? {
                return Ok((child, ready));
            }
        }
        if let Some(status) = child.try_wait()? {
            bail!("{what} exited before it was ready ({status})");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} wrote no {} within {} s", file.display(), READY_WITHIN.as_secs());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
