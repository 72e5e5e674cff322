//! [`CopyCounters`]: value bytes a member copies, per stage of a write's
//! path (issue 26 item 4). Every count is added where the copy is made
//! (or where the code hands bytes to a copy it cannot avoid, named below),
//! never estimated.
//!
//! "Value bytes" are a write command's arguments after its name and first
//! key (a SET's value, HSET's fields and values, `EX 10`'s words); keys
//! and framing are not counted. Stages:
//! - `rx_args`: copied out of the receive buffers into per-argument
//!   vectors (the member's request path);
//! - `entry`: copied into a Raft entry built on this member;
//! - `log`: copied into the Raft log in `P.raft` (the entry's inline value
//!   bytes, when the log appends it);
//! - `received`: copied out of a message from the leader (protobuf's
//!   decoding copies the message into the entry) and, in the extent form,
//!   into this member's pool;
//! - `applied`: copied into the keyspace's pool when the entry is applied
//!   (a value stored by its extents is not copied);
//! - `sent`: copied into messages to followers: a pool value gathered into
//!   the wire form, and the entry's bytes copied by protobuf's encoding into
//!   the message's payload (once per follower per send), and a
//!   follower's forwarded proposal encoded into its message to the leader
//!   (once per proposal). Replication traffic, kept apart from the write's
//!   own path.
//!
//! `writes` counts applied write entries (commands and transactions), the
//! denominator of "per write".

use std::cell::Cell;
use std::rc::Rc;

/// The counts (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Copies {
    /// Write entries applied.
    pub writes: u64,
    /// Copied from receive buffers into argument vectors.
    pub rx_args: u64,
    /// Copied into entries built here.
    pub entry: u64,
    /// Copied into the Raft log.
    pub log: u64,
    /// Copied out of messages from the leader (and into this pool).
    pub received: u64,
    /// Copied into the keyspace on apply.
    pub applied: u64,
    /// Copied into messages to followers (and a follower's to the leader).
    pub sent: u64,
}

impl Copies {
    /// Value bytes copied on a write's own path (every stage but `sent`).
    pub fn path_bytes(&self) -> u64 {
        self.rx_args + self.entry + self.log + self.received + self.applied
    }

    /// `path_bytes` per applied write (0 before any write).
    pub fn path_bytes_per_write(&self) -> f64 {
        if self.writes == 0 {
            return 0.0;
        }
        self.path_bytes() as f64 / self.writes as f64
    }

    /// `sent` per applied write.
    pub fn sent_bytes_per_write(&self) -> f64 {
        if self.writes == 0 {
            return 0.0;
        }
        self.sent as f64 / self.writes as f64
    }

    /// The counts as `INFO` fields (`# Copies`), Redis's `name:value` lines.
    pub fn info(&self, mode: &str) -> String {
        format!(
            "copy_mode:{mode}\r\ncopy_writes:{}\r\ncopy_value_bytes_rx_args:{}\r\ncopy_value_bytes_entry:{}\r\ncopy_value_bytes_raft_log:{}\r\n\
             copy_value_bytes_received:{}\r\ncopy_value_bytes_applied:{}\r\ncopy_value_bytes_path:{}\r\ncopy_value_bytes_per_write:{:.2}\r\n\
             copy_value_bytes_sent:{}\r\ncopy_value_bytes_sent_per_write:{:.2}\r\n",
            self.writes,
            self.rx_args,
            self.entry,
            self.log,
            self.received,
            self.applied,
            self.path_bytes(),
            self.path_bytes_per_write(),
            self.sent,
            self.sent_bytes_per_write(),
        )
    }
}

/// Shared counts: the member, its keyspace and its machine add to one set.
#[derive(Clone, Debug, Default)]
pub struct CopyCounters(Rc<Cell<Copies>>);

impl CopyCounters {
    /// New counters at zero.
    pub fn new() -> CopyCounters {
        CopyCounters::default()
    }

    /// The counts now.
    pub fn get(&self) -> Copies {
        self.0.get()
    }

    /// Adds to the counts.
    pub fn add(&self, f: impl FnOnce(&mut Copies)) {
        let mut c = self.0.get();
        f(&mut c);
        self.0.set(c);
    }
}
