//! Typed errors, one enum per operation. A staging error leaves the engine
//! as it was (nothing staged, no reference taken); a commit error rolls the
//! whole staged batch back (the index as before the batch, its references
//! dropped) and nothing of it is durable.

use thiserror::Error;

pub use pmwire_pool::ExtentError;

/// Why `create` refused.
#[derive(Debug, Error)]
pub enum CreateError {
    /// The configuration is unusable.
    #[error("bad KV configuration: {0}")]
    BadConfig(String),
    /// The pool could not be laid out.
    #[error(transparent)]
    Pool(#[from] pmwire_pool::CreateError),
}

/// Why `open` found no usable engine.
#[derive(Debug, Error)]
pub enum OpenError {
    /// No pool (or an unfinished `create`).
    #[error(transparent)]
    Pool(#[from] pmwire_pool::OpenError),
    /// The pool lacks one of the engine's sections.
    #[error("pool has no section tagged {tag:#x}")]
    MissingSection {
        /// The tag.
        tag: u32,
    },
    /// A log did not open.
    #[error("{which}: {error}")]
    Log {
        /// Which log.
        which: &'static str,
        /// Why.
        error: pmwire_log::OpenError,
    },
    /// The tree did not open.
    #[error(transparent)]
    Tree(#[from] pmwire_btree::OpenError),
    /// A record, value or reference does not decode (a damaged medium or a bug).
    #[error("corrupt: {0}")]
    Corrupt(String),
    /// The WAL ends with an uncommitted transaction, and the checkpoint
    /// that drops it failed (nothing was lost: the next open tries again).
    #[error("discarding the WAL's uncommitted transaction: {0}")]
    DiscardTail(CheckpointError),
}

/// Why an operation could not be staged. Nothing was staged.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum StageError {
    /// The key is longer than 255 B.
    #[error("key of {len} B exceeds the maximum of {max} B")]
    KeyTooLong {
        /// The key's length.
        len: usize,
        /// The longest key.
        max: usize,
    },
    /// The value needs more extents than a record or tree value holds.
    #[error("value of {extents} extents exceeds the maximum of {max}")]
    ValueTooLong {
        /// Extents needed.
        extents: usize,
        /// The most allowed.
        max: usize,
    },
    /// An extent does not name live bytes of the pool.
    #[error(transparent)]
    Extent(#[from] ExtentError),
    /// The batch is full: commit, then stage again (`room` is what is left
    /// of [`crate::Engine::max_batch_words`]; if nothing was staged
    /// before, the operation alone is larger than the WAL).
    #[error("batch full: {needed} more WAL words, {room} left in this batch")]
    BatchFull {
        /// Words the operation needs.
        needed: usize,
        /// Words left.
        room: usize,
    },
    /// No free pool buffer for a copy.
    #[error("pool has no free buffer")]
    PoolFull,
}

/// Why `commit` failed. The staged batch was rolled back.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CommitError {
    /// The WAL was full and the checkpoint that would empty it failed.
    #[error("checkpoint before commit failed: {0}")]
    Checkpoint(#[from] CheckpointError),
    /// A batch larger than the WAL needs pool buffers for its chained
    /// record list, and the pool has too few.
    #[error("the pool has too few free buffers for the record list of a transaction larger than the WAL")]
    PoolFull,
}

/// Why a checkpoint failed. The WAL still holds every record (nothing
/// acknowledged is lost); the tree may already hold some of them, which is
/// harmless (replay is idempotent, docs/FORMAT.md).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CheckpointError {
    /// The tree has too few free nodes even for one operation.
    #[error("tree full: {0}")]
    TreeFull(String),
    /// No free pool buffer for an extent list.
    #[error("pool has no free buffer for an extent list")]
    PoolFull,
}

/// Why a user-log operation failed. Nothing was changed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LogError {
    /// An extent does not name live bytes of the pool.
    #[error(transparent)]
    Extent(#[from] ExtentError),
    /// The entry has too many extents, or the batch or the log is full
    /// (commit, or truncate the log, then try again).
    #[error("user log full: {needed} words needed, {room} free")]
    Full {
        /// Words needed.
        needed: usize,
        /// Words free.
        room: usize,
    },
    /// No free pool buffer for a copy.
    #[error("pool has no free buffer")]
    PoolFull,
    /// `truncate` beyond the committed end.
    #[error("lsn {lsn} beyond the committed end {next}")]
    BeyondEnd {
        /// The LSN asked for.
        lsn: u64,
        /// The next LSN.
        next: u64,
    },
}
