//! Errors: one enum per operation, each carrying the UCX status (and its
//! name from `ucs_status_string`) where UCX produced it.
//!
//! After an error the transport stays usable unless the error says the
//! connection is gone ([`OpError::Disconnected`]); a failed setup call
//! (context, worker, listener) leaves nothing allocated.

use std::ffi::CStr;
use std::fmt;

use ucx_sys as sys;

/// A `ucs_status_t` that is not `UCS_OK`, printed with UCX's own name for it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Status(pub i8);

impl Status {
    /// UCX's description of the status (`ucs_status_string`).
    pub fn name(self) -> &'static str {
        // SAFETY: ucs_status_string returns a pointer to a static,
        // NUL-terminated string for every value (unknown ones included).
        let s = unsafe { CStr::from_ptr(sys::ucs_status_string(self.0 as sys::ucs_status_t)) };
        s.to_str().unwrap_or("(non-UTF-8 UCX status string)")
    }

    /// The raw code.
    pub fn code(self) -> i8 {
        self.0
    }

    /// `Ok(())` for `UCS_OK`, the status otherwise.
    pub(crate) fn check(status: sys::ucs_status_t) -> Result<(), Status> {
        if status == sys::UCS_OK {
            Ok(())
        } else {
            Err(Status(status))
        }
    }

    /// Whether this is `UCS_ERR_UNSUPPORTED`.
    pub fn is_unsupported(self) -> bool {
        self.0 as sys::ucs_status_t == sys::UCS_ERR_UNSUPPORTED
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (ucs_status_t {})", self.name(), self.0)
    }
}

/// Creating a context, worker or listener failed.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A UCX call failed.
    #[error("{call} failed: {status}")]
    Ucx {
        /// The UCX function.
        call: &'static str,
        /// What it returned.
        status: Status,
    },
    /// A configuration value had an interior NUL byte or was otherwise unusable.
    #[error("bad configuration value {name}={value:?}")]
    BadConfig {
        /// The UCX variable (without `UCX_`).
        name: String,
        /// The value.
        value: String,
    },
    /// The configuration asks for something the worker cannot do.
    #[error("configuration not supported: {0}")]
    Unsupported(String),
    /// A system call failed (the io_uring TCP transport: its ring, eventfd
    /// or listening socket).
    #[error("{call} failed: {source}")]
    Io {
        /// The call.
        call: &'static str,
        /// What it returned.
        source: std::io::Error,
    },
}

/// Opening a connection failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// `ucp_ep_create` (or the in-process equivalent) failed.
    #[error("connect to {addr} failed: {status}")]
    Ucx {
        /// The address.
        addr: String,
        /// What UCX returned.
        status: Status,
    },
    /// No such peer (in-process transport).
    #[error("no peer at {0}")]
    NoPeer(String),
    /// The configured bound on connections is reached.
    #[error("too many connections (bound {0})")]
    TooMany(usize),
    /// The socket could not be made (the io_uring TCP transport).
    #[error("connect to {addr} failed: {source}")]
    Io {
        /// The address.
        addr: String,
        /// What the system returned.
        source: std::io::Error,
    },
}

/// Registering memory failed.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// A UCX call failed.
    #[error("{call} failed: {status}")]
    Ucx {
        /// The UCX function.
        call: &'static str,
        /// What it returned.
        status: Status,
    },
    /// Zero-length or null range.
    #[error("cannot register an empty or null range")]
    Empty,
    /// The configured bound on registrations is reached.
    #[error("too many registered regions (bound {0})")]
    TooMany(usize),
    /// The transport was made with one-sided access off (the default over
    /// UCX; see `UcxConfig::with_one_sided`).
    #[error("one-sided access is off on this transport: nothing can be registered")]
    OneSidedOff,
}

/// Attaching a peer's region (unpacking its remote key) failed.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// `ucp_ep_rkey_unpack` failed.
    #[error("ucp_ep_rkey_unpack failed: {0}")]
    Ucx(Status),
    /// The descriptor bytes are malformed.
    #[error("malformed region descriptor: {0}")]
    Malformed(&'static str),
    /// The connection is not open.
    #[error("connection {0} is not open")]
    NotConnected(u32),
    /// The configured bound on attached regions per connection is reached.
    #[error("too many attached regions on one connection (bound {0})")]
    TooMany(usize),
    /// The transport was made with one-sided access off (the default over
    /// UCX; see `UcxConfig::with_one_sided`).
    #[error("one-sided access is off on this transport")]
    OneSidedOff,
}

/// Why an operation (call, reply, put, get, atomic, flush) did not start or
/// did not complete.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    /// UCX reported a failure.
    #[error("{call} failed: {status}")]
    Ucx {
        /// The UCX function (or "completion" for an asynchronous failure).
        call: &'static str,
        /// What it returned.
        status: Status,
    },
    /// The connection is closed or failed; nothing more will complete on it.
    #[error("connection {0} is disconnected")]
    Disconnected(u32),
    /// The bounded in-flight window of the connection is full: poll for
    /// completions first.
    #[error("in-flight window full ({0} outstanding)")]
    WindowFull(usize),
    /// The transport's bound on outstanding operations is reached.
    #[error("too many outstanding operations (bound {0})")]
    TooManyOps(usize),
    /// A header or payload is larger than the configured bound.
    #[error("{what} of {len} bytes exceeds the bound of {max}")]
    TooLarge {
        /// "header" or "payload".
        what: &'static str,
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The range lies outside the attached remote region.
    #[error("range {offset}+{len} outside the remote region of {region_len} bytes")]
    OutOfBounds {
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// The region's length.
        region_len: u64,
    },
    /// Atomics need an 8-byte aligned offset.
    #[error("atomic offset {0} is not 8-byte aligned")]
    Misaligned(u64),
    /// No such remote region on this connection.
    #[error("unknown remote region {0}")]
    UnknownRegion(u32),
    /// No such request to reply to (already answered, or never seen).
    #[error("unknown request")]
    UnknownRequest,
    /// The transport does not offer the operation.
    #[error("not supported: {0}")]
    Unsupported(&'static str),
}

/// Waiting for events failed.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// A UCX call failed.
    #[error("{call} failed: {status}")]
    Ucx {
        /// The UCX function.
        call: &'static str,
        /// What it returned.
        status: Status,
    },
    /// `poll(2)` failed.
    #[error("poll on the worker's event fd failed: {0}")]
    Poll(std::io::Error),
    /// `io_uring_enter(2)` failed (the io_uring TCP transport).
    #[error("io_uring_enter failed: {0}")]
    Enter(std::io::Error),
}
