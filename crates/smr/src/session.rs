//! Client sessions: what makes a retried request apply once (Raft thesis
//! §6.3).
//!
//! A session remembers its client's last sequence number and that
//! request's outcome (status, log index, value). A request whose sequence
//! number is the session's last gets the remembered outcome without being
//! applied again; an older one gets [`Status::Stale`]. At most
//! [`MAX_SESSIONS`] are kept: past that, the one whose last request was
//! applied earliest is dropped (by log index: the same on every replica).
//!
//! Two tables use this type: a [`crate::kvmap::KvMap`]'s, for its writes
//! (kept with the state they describe, so a persistent machine commits
//! them together), and a replica's own, for membership changes.
//!
//! Encoding (inside snapshots, `docs/FORMAT.md`): per session, client u64,
//! seq u64, index u64, status u8, 3 zero bytes, value length u32, value;
//! clients in order.

use std::collections::BTreeMap;

use crate::command::{Response, Status, MAX_VALUE_BYTES};
use crate::state::RestoreError;

/// Sessions kept at most (per table).
pub const MAX_SESSIONS: usize = 4096;

/// A client's session: its last request and that request's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Session {
    seq: u64,
    index: u64,
    status: Status,
    value: Vec<u8>,
}

/// A bounded table of sessions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sessions {
    by_client: BTreeMap<u64, Session>,
    /// Clients by the index of their last request (for eviction).
    by_index: BTreeMap<u64, u64>,
}

impl Sessions {
    /// Sessions held.
    pub fn len(&self) -> usize {
        self.by_client.len()
    }

    /// True if none is held.
    pub fn is_empty(&self) -> bool {
        self.by_client.is_empty()
    }

    /// The outcome kept for `client`'s request `seq` if it is the
    /// session's last (a retry, with the index it was applied at);
    /// [`Status::Stale`] with index `stale_index` if older; `None` if new.
    pub fn check(&self, client: u64, seq: u64, stale_index: u64) -> Option<Response> {
        let s = self.by_client.get(&client)?;
        if seq == s.seq {
            return Some(Response { status: s.status, leader: 0, index: s.index, value: s.value.clone() });
        }
        (seq < s.seq).then(|| Response { status: Status::Stale, leader: 0, index: stale_index, value: Vec::new() })
    }

    /// Remembers `client`'s request `seq`, applied at `index` with this
    /// outcome (one request per log index).
    pub fn remember(&mut self, client: u64, seq: u64, index: u64, status: Status, value: Vec<u8>) {
        assert!(value.len() <= MAX_VALUE_BYTES, "a remembered value within bound");
        if let Some(old) = self.by_client.insert(client, Session { seq, index, status, value }) {
            self.by_index.remove(&old.index);
        }
        let previous = self.by_index.insert(index, client);
        assert!(previous.is_none(), "one request per log index");
        if self.by_client.len() > MAX_SESSIONS {
            let (_, oldest) = self.by_index.pop_first().expect("sessions are indexed");
            self.by_client.remove(&oldest);
        }
        assert_eq!(self.by_client.len(), self.by_index.len());
    }

    /// True if `client` has a session.
    pub fn contains(&self, client: u64) -> bool {
        self.by_client.contains_key(&client)
    }

    /// Appends the encoding of every session (the count is the caller's).
    pub fn encode(&self, out: &mut Vec<u8>) {
        for (client, s) in &self.by_client {
            out.extend_from_slice(&client.to_le_bytes());
            out.extend_from_slice(&s.seq.to_le_bytes());
            out.extend_from_slice(&s.index.to_le_bytes());
            out.extend_from_slice(&[s.status as u8, 0, 0, 0]);
            out.extend_from_slice(&(s.value.len() as u32).to_le_bytes());
            out.extend_from_slice(&s.value);
        }
    }

    /// Reads `count` sessions from `r`, checking every field; refuses more
    /// than [`MAX_SESSIONS`] and duplicates.
    pub fn decode(r: &mut Reader<'_>, count: u64) -> Result<Sessions, RestoreError> {
        let corrupt = RestoreError::Corrupt;
        if count > MAX_SESSIONS as u64 {
            return Err(corrupt("session count"));
        }
        let mut t = Sessions::default();
        for _ in 0..count {
            let (client, seq, index) = (r.u64()?, r.u64()?, r.u64()?);
            let flags = r.bytes(4)?;
            if flags[1..] != [0, 0, 0] {
                return Err(corrupt("session reserved bytes"));
            }
            let status = Status::from_u8(flags[0]).ok_or(corrupt("session status"))?;
            let len = r.u32()? as usize;
            if len > MAX_VALUE_BYTES {
                return Err(corrupt("session value length"));
            }
            let value = r.bytes(len)?.to_vec();
            if t.by_index.insert(index, client).is_some() || t.by_client.insert(client, Session { seq, index, status, value }).is_some() {
                return Err(corrupt("duplicate session"));
            }
        }
        Ok(t)
    }
}

/// Reads fields of a checked snapshot body through [`pmem::le::Reader`],
/// failing on a short one.
pub struct Reader<'a>(pmem::le::Reader<'a>);

impl<'a> Reader<'a> {
    /// A reader of `b` from offset `at`.
    pub fn new(b: &'a [u8], at: usize) -> Reader<'a> {
        Reader(pmem::le::Reader::new(b, at))
    }
    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], RestoreError> {
        self.0.take(n as u64).ok_or(RestoreError::Corrupt("truncated"))
    }
    /// The next u32.
    pub fn u32(&mut self) -> Result<u32, RestoreError> {
        self.0.u32().ok_or(RestoreError::Corrupt("truncated"))
    }
    /// The next u64.
    pub fn u64(&mut self) -> Result<u64, RestoreError> {
        self.0.u64().ok_or(RestoreError::Corrupt("truncated"))
    }
    /// True if every byte was read.
    pub fn done(&self) -> bool {
        self.0.done()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_gets_the_kept_outcome_an_older_one_is_stale_and_the_table_is_bounded() {
        let mut t = Sessions::default();
        t.remember(1, 5, 10, Status::CasFailed, b"cur".to_vec());
        let kept = t.check(1, 5, 99).expect("kept");
        assert_eq!((kept.status, kept.index, kept.value.as_slice()), (Status::CasFailed, 10, &b"cur"[..]));
        assert_eq!(t.check(1, 4, 99).map(|r| (r.status, r.index)), Some((Status::Stale, 99)));
        assert_eq!(t.check(1, 6, 99), None);
        assert_eq!(t.check(2, 1, 99), None);
        for c in 2..=(MAX_SESSIONS as u64 + 1) {
            t.remember(c, 1, 10 + c, Status::Ok, Vec::new());
        }
        assert_eq!(t.len(), MAX_SESSIONS);
        assert!(!t.contains(1), "the session applied earliest went");
        let mut bytes = Vec::new();
        t.encode(&mut bytes);
        let back = Sessions::decode(&mut Reader::new(&bytes, 0), t.len() as u64).expect("decodes");
        assert_eq!(back, t);
        assert!(Sessions::decode(&mut Reader::new(&bytes[..bytes.len() - 1], 0), t.len() as u64).is_err());
    }
}
