//! The mirror's seam: what a transaction hands to whoever replicates it.
//!
//! A [`Tx`](crate::Tx) calls its [`EpochSink`] in program order: each
//! sealed epoch (at [`ofence`](crate::Tx::ofence), at a
//! [`dfence`](crate::Tx::dfence), and the last one at commit) as an
//! [`Epoch`], byte for byte the redo record the primary writes to its own
//! log; then `dfence` at each durability fence; then `commit` once the
//! primary's log is durable and before its commit record is written; or
//! `abort`. These are exactly the events seed 002's strategies put on the
//! wire (§5, Table 1): SM-RC makes each epoch durable before the next,
//! SM-OB sends epochs with an ordering marker between them and waits at
//! commit, SM-DD sends them in one ordered stream and waits at commit.
//! The sink decides how; the transaction only promises the order.
//!
//! [`NoMirror`] is NO-SM: it does nothing. [`Recorder`] keeps every event,
//! for tests and simulations.

use crate::format::{parse_epoch, EpochHeader, WriteRef};

/// A sink's error: the transaction that saw it fails with [`TxError::Sink`](crate::TxError::Sink).
pub type SinkError = Box<dyn std::error::Error + Send + Sync>;

/// One sealed epoch of a transaction: its writes, in order, and the exact
/// redo record the primary logged for it.
#[derive(Clone, Copy, Debug)]
pub struct Epoch<'a> {
    header: EpochHeader,
    log_offset: u64,
    record: &'a [u8],
}

impl<'a> Epoch<'a> {
    /// Validates `record` (an epoch record, as a backup might receive it)
    /// against a data area of `data_bytes`, written at `log_offset` of the log.
    pub fn parse(record: &'a [u8], log_offset: u64, data_bytes: u64) -> Result<Epoch<'a>, String> {
        let (header, _) = parse_epoch(record, data_bytes)?;
        if header.record_bytes != record.len() {
            return Err(format!("{} B after the epoch record", record.len() - header.record_bytes));
        }
        Ok(Epoch { header, log_offset, record })
    }

    /// An epoch this crate has just sealed (no second CRC pass).
    pub(crate) fn sealed(header: EpochHeader, log_offset: u64, record: &'a [u8]) -> Epoch<'a> {
        debug_assert_eq!(header.record_bytes, record.len());
        Epoch { header, log_offset, record }
    }

    /// The transaction.
    pub fn tx(&self) -> u64 {
        self.header.tx
    }

    /// The epoch's index in its transaction (0, 1, …).
    pub fn index(&self) -> u32 {
        self.header.index
    }

    /// Its number of writes.
    pub fn write_count(&self) -> u32 {
        self.header.writes
    }

    /// Where the record sits in the log (bytes from the log's start).
    pub fn log_offset(&self) -> u64 {
        self.log_offset
    }

    /// The record's bytes (header, entries), as on the primary's media.
    pub fn record(&self) -> &'a [u8] {
        self.record
    }

    /// The writes, in order: data-area offset and bytes.
    pub fn writes(&self) -> impl Iterator<Item = (u64, &'a [u8])> + 'a {
        let record = self.record;
        let (_, writes) = parse_epoch(record, u64::MAX).expect("an Epoch holds a validated record");
        writes.into_iter().map(move |WriteRef { offset, at, len }| (offset, &record[at..at + len]))
    }
}

/// What a commit covered: handed to the sink and returned to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Committed {
    /// The transaction's number.
    pub tx: u64,
    /// Its epochs (0 for a transaction that wrote nothing).
    pub epochs: u32,
    /// Its writes.
    pub writes: u32,
    /// Bytes of redo log it used.
    pub log_bytes: u64,
}

/// Receives a transaction's epochs and fences, in order. A later network
/// mirror implements it; [`NoMirror`] is the local baseline.
pub trait EpochSink {
    /// The next sealed epoch of transaction `epoch.tx()`. Epochs of a
    /// transaction arrive in index order, and a transaction's epochs all
    /// arrive before its `commit` or `abort`.
    fn epoch(&mut self, epoch: &Epoch<'_>) -> Result<(), SinkError>;

    /// Durability fence: every epoch handed over so far must be durable on
    /// the sink's side before this returns.
    fn dfence(&mut self, tx: u64) -> Result<(), SinkError>;

    /// The transaction commits. Called once its epochs are durable in the
    /// primary's log and before the primary's commit record is written; when
    /// it returns `Ok`, the sink must hold the transaction durably committed.
    /// On `Err` the primary abandons the transaction (it was never
    /// acknowledged).
    fn commit(&mut self, commit: &Committed) -> Result<(), SinkError>;

    /// The transaction was abandoned: its epochs must never be applied.
    fn abort(&mut self, tx: u64);
}

impl<S: EpochSink + ?Sized> EpochSink for &mut S {
    fn epoch(&mut self, epoch: &Epoch<'_>) -> Result<(), SinkError> {
        (**self).epoch(epoch)
    }
    fn dfence(&mut self, tx: u64) -> Result<(), SinkError> {
        (**self).dfence(tx)
    }
    fn commit(&mut self, commit: &Committed) -> Result<(), SinkError> {
        (**self).commit(commit)
    }
    fn abort(&mut self, tx: u64) {
        (**self).abort(tx)
    }
}

/// NO-SM: no mirror; every call returns at once.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMirror;

impl EpochSink for NoMirror {
    fn epoch(&mut self, _epoch: &Epoch<'_>) -> Result<(), SinkError> {
        Ok(())
    }
    fn dfence(&mut self, _tx: u64) -> Result<(), SinkError> {
        Ok(())
    }
    fn commit(&mut self, _commit: &Committed) -> Result<(), SinkError> {
        Ok(())
    }
    fn abort(&mut self, _tx: u64) {}
}

/// One event a [`Recorder`] saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkEvent {
    /// An epoch: its transaction, index, log offset and record bytes.
    Epoch {
        /// The transaction.
        tx: u64,
        /// The epoch's index.
        index: u32,
        /// Where it sits in the log.
        log_offset: u64,
        /// The record.
        record: Vec<u8>,
    },
    /// A durability fence.
    Dfence(u64),
    /// A commit.
    Commit(Committed),
    /// An abort.
    Abort(u64),
}

/// A sink that keeps every event; `fail_commits` makes `commit` fail and
/// `fail_after_epochs` makes every epoch after that many fail (to test a
/// mirror that is gone).
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    /// What was seen, in order.
    pub events: Vec<SinkEvent>,
    /// Whether `commit` fails.
    pub fail_commits: bool,
    /// Epochs accepted before every later one fails.
    pub fail_after_epochs: Option<usize>,
}

impl EpochSink for Recorder {
    fn epoch(&mut self, epoch: &Epoch<'_>) -> Result<(), SinkError> {
        let seen = self.events.iter().filter(|e| matches!(e, SinkEvent::Epoch { .. })).count();
        if self.fail_after_epochs.is_some_and(|limit| seen >= limit) {
            return Err("recorder set to fail epochs".into());
        }
        let record = epoch.record().to_vec();
        self.events.push(SinkEvent::Epoch {
            tx: epoch.tx(),
            index: epoch.index(),
            log_offset: epoch.log_offset(),
            record,
        });
        Ok(())
    }
    fn dfence(&mut self, tx: u64) -> Result<(), SinkError> {
        self.events.push(SinkEvent::Dfence(tx));
        Ok(())
    }
    fn commit(&mut self, commit: &Committed) -> Result<(), SinkError> {
        if self.fail_commits {
            return Err("recorder set to fail commits".into());
        }
        self.events.push(SinkEvent::Commit(*commit));
        Ok(())
    }
    fn abort(&mut self, tx: u64) {
        self.events.push(SinkEvent::Abort(tx));
    }
}
