//! The primary's side of the mirror stream, with no I/O: which messages
//! each [`EpochSink`](crate::EpochSink) event becomes under a strategy,
//! and whether an answer keeps the promise it was asked for. The network
//! sink ([`crate::Mirror`]) sends what this plans; the crash checks feed
//! it straight into a [`crate::Backup`].
//!
//! What each strategy sends (seed 002 §5, Table 1):
//!
//! | event | SM-RC | SM-OB | SM-DD |
//! |---|---|---|---|
//! | epoch | `Epoch`, then a `Flush` call | `Epoch`, then `Ofence` | `Epoch` |
//! | dfence | nothing (every epoch is already durable) | `Dfence` call | `Sentinel` call |
//! | commit | `Commit` call | `Commit` call | `Commit` call |
//! | abort | `Abort` | `Abort` | `Abort` |
//!
//! So SM-RC waits a round trip per epoch, and SM-OB and SM-DD wait only at
//! a durability fence and at commit. Invariant: the count a fence or a
//! commit carries is the number of epochs of its transaction planned
//! before it.

use crate::sink::{Committed, Epoch};
use crate::wire::{encode, Header, Hello, Kind, Strategy, HEADER_BYTES};

/// One message to send: its header, whether it carries the epoch's
/// record as its payload, and whether it is a call (then its answer must
/// come, and pass [`StreamCore::check`], before the sink returns).
#[derive(Clone, Copy, Debug)]
pub struct Planned {
    /// The header bytes.
    pub header: [u8; HEADER_BYTES],
    /// What it is.
    pub kind: Kind,
    /// The transaction.
    pub tx: u64,
    /// The epochs of `tx` planned before it (fences, commit).
    pub count: u32,
    /// Its payload is the epoch's record.
    pub with_record: bool,
}

/// Plans the messages of one primary's stream.
#[derive(Clone, Debug)]
pub struct StreamCore {
    strategy: Strategy,
    tx: u64,
    epochs: u32,
}

/// An answer that does not keep its promise: the backup is broken, or a
/// message was lost.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// The backup refused.
    #[error("the backup refused {kind:?} of transaction {tx}: {reason}")]
    Refused {
        /// What was asked.
        kind: Kind,
        /// The transaction.
        tx: u64,
        /// The backup's reason.
        reason: String,
    },
    /// The answer is not for what was asked, or counts other epochs.
    #[error("the backup answered {kind:?} of transaction {tx} with {got}")]
    Mismatch {
        /// What was asked.
        kind: Kind,
        /// The transaction.
        tx: u64,
        /// What came back.
        got: String,
    },
}

impl StreamCore {
    /// A stream under `strategy` (not NO-SM).
    pub fn new(strategy: Strategy) -> StreamCore {
        assert_ne!(strategy, Strategy::NoSm, "NO-SM has no stream");
        StreamCore { strategy, tx: 0, epochs: 0 }
    }

    /// The strategy.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The hello: header and payload.
    pub fn hello(&self, last_committed: u64, hello: &Hello) -> ([u8; HEADER_BYTES], [u8; crate::wire::HELLO_BYTES]) {
        let payload = hello.encode();
        (encode(Kind::Hello, self.strategy, 0, last_committed, 0, &payload), payload)
    }

    fn planned(&self, kind: Kind, value: u64, count: u32) -> Planned {
        let header = encode(kind, Strategy::NoSm, self.tx, value, count, &[]);
        Planned { header, kind, tx: self.tx, count, with_record: false }
    }

    fn enter(&mut self, tx: u64) {
        if tx != self.tx {
            self.tx = tx;
            self.epochs = 0;
        }
    }

    /// An epoch: what to send, in order.
    pub fn epoch(&mut self, epoch: &Epoch<'_>, out: &mut Vec<Planned>) {
        self.enter(epoch.tx());
        assert_eq!(epoch.index(), self.epochs, "epochs arrive in order");
        let header = encode(Kind::Epoch, Strategy::NoSm, self.tx, epoch.log_offset(), epoch.index(), epoch.record());
        out.push(Planned { header, kind: Kind::Epoch, tx: self.tx, count: self.epochs, with_record: true });
        self.epochs += 1;
        match self.strategy {
            Strategy::SmRc => out.push(self.planned(Kind::Flush, 0, self.epochs)),
            Strategy::SmOb => out.push(self.planned(Kind::Ofence, 0, self.epochs)),
            Strategy::SmDd | Strategy::NoSm => {}
        }
    }

    /// A durability fence.
    pub fn dfence(&mut self, tx: u64, out: &mut Vec<Planned>) {
        self.enter(tx);
        match self.strategy {
            Strategy::SmOb => out.push(self.planned(Kind::Dfence, 0, self.epochs)),
            Strategy::SmDd => out.push(self.planned(Kind::Sentinel, 0, self.epochs)),
            Strategy::SmRc | Strategy::NoSm => {}
        }
    }

    /// A commit.
    pub fn commit(&mut self, commit: &Committed, out: &mut Vec<Planned>) {
        self.enter(commit.tx);
        assert_eq!(commit.epochs, self.epochs, "every epoch was planned before the commit");
        out.push(self.planned(Kind::Commit, commit.log_bytes, commit.epochs));
    }

    /// An abort.
    pub fn abort(&mut self, tx: u64, out: &mut Vec<Planned>) {
        self.enter(tx);
        out.push(self.planned(Kind::Abort, 0, self.epochs));
    }

    /// Checks the answer (decoded `header`, `payload`) to the call `asked`.
    pub fn check(asked: &Planned, header: &Header, payload: &[u8]) -> Result<(), AnswerError> {
        let (kind, tx) = (asked.kind, asked.tx);
        match header.kind {
            Kind::Refused => {
                let reason = String::from_utf8_lossy(payload).into_owned();
                Err(AnswerError::Refused { kind, tx, reason })
            }
            Kind::Ack => {
                let value_ok = match kind {
                    Kind::Commit | Kind::CopyDone => header.value == tx,
                    Kind::Sentinel => header.value == u64::from(asked.count),
                    _ => true,
                };
                // A hello's answer carries the rejoin plan's code.
                let count_ok = header.count == asked.count
                    || (kind == Kind::Hello && header.count <= crate::wire::INCREMENTAL_NEEDED);
                if header.tx == tx && count_ok && value_ok {
                    return Ok(());
                }
                let got = format!("transaction {} count {} value {}", header.tx, header.count, header.value);
                Err(AnswerError::Mismatch { kind, tx, got })
            }
            other => Err(AnswerError::Mismatch { kind, tx, got: format!("{other:?}") }),
        }
    }
}
