//! The replicated state machine: a map of byte keys to byte values, with
//! client sessions so that a retried write is applied once (Raft thesis
//! §6.3).
//!
//! Every replica applies the same committed commands in the same order,
//! so everything here is deterministic: no clock, no randomness, no
//! iteration over a hash map. A session remembers its client's last
//! sequence number and that write's response; a write whose sequence
//! number is the session's last gets the remembered response without
//! being applied again, an older one gets [`Status::Stale`]. At most
//! [`MAX_SESSIONS`] sessions are kept: past that, the one whose last write
//! was applied earliest is dropped (by log index: the same on every
//! replica).
//!
//! It also keeps the address of every replica added through a membership
//! change (id → the address bytes of its ADD_MEMBER request), so that
//! every replica, one restarted with its original peer list or a new one
//! installing a snapshot, can reach it; REMOVE_MEMBER drops it. The
//! membership itself (voters, learners) is raft-rs's `ConfState`, kept
//! by the store; this map only says where members are.
//!
//! Snapshot format (little-endian, `docs/FORMAT.md`): `b"SMRSNAP2"`,
//! entry count u64, session count u64, member count u64, then per entry
//! key_len u32, value_len u32, key, value; per session client u64, seq
//! u64, index u64, status u8, 3 zero bytes, value_len u32, value; per
//! member id u64, addr_len u32, 4 zero bytes, address; then a crc32c
//! (u32) of everything before it. `b"SMRSNAP1"` (no member count, no
//! members) is still read: a snapshot taken before membership changes
//! existed has no member to list.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::command::{Op, RequestView, Response, Status, MAX_ADDR_BYTES, MAX_KEY_BYTES, MAX_MEMBERS, MAX_VALUE_BYTES};

/// Sessions kept at most.
pub const MAX_SESSIONS: usize = 4096;

const SNAPSHOT_MAGIC: &[u8; 8] = b"SMRSNAP2";
/// The format before members were kept (read, never written).
const SNAPSHOT_MAGIC_V1: &[u8; 8] = b"SMRSNAP1";

/// A client's session: its last write and that write's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Session {
    seq: u64,
    index: u64,
    status: Status,
    value: Vec<u8>,
}

/// The key-value map and its sessions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Machine {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    sessions: BTreeMap<u64, Session>,
    /// Sessions by the index of their last write (for eviction).
    by_index: BTreeMap<u64, u64>,
    /// Addresses of the replicas added by membership changes.
    members: BTreeMap<u64, Vec<u8>>,
}

/// Why a snapshot could not be restored.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum RestoreError {
    /// Not a snapshot of this machine, or a bad checksum.
    #[error("snapshot corrupt: {0}")]
    Corrupt(&'static str),
}

impl Machine {
    /// An empty map.
    pub fn new() -> Machine {
        Machine::default()
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.map.get(key).map(Vec::as_slice)
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if no key is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The addresses of the replicas added by membership changes.
    pub fn members(&self) -> &BTreeMap<u64, Vec<u8>> {
        &self.members
    }

    /// The response kept for `client`'s request `seq`, if it is the
    /// session's last (a retry); [`Status::Stale`] if older.
    pub fn remembered(&self, client: u64, seq: u64) -> Option<Response> {
        let s = self.sessions.get(&client)?;
        if seq == s.seq {
            return Some(Response { status: s.status, leader: 0, index: s.index, value: s.value.clone() });
        }
        (seq < s.seq).then(|| Response { status: Status::Stale, leader: 0, index: 0, value: Vec::new() })
    }

    /// Applies the membership request `req` carried by the conf change at
    /// `index`: `outcome` is what applying it to the membership gave (a
    /// refusal's status and value); on success ADD_MEMBER records the
    /// address and REMOVE_MEMBER drops it. Remembered in the session.
    pub fn apply_member(&mut self, index: u64, req: &RequestView<'_>, outcome: (Status, Vec<u8>)) -> Response {
        assert!(req.op.changes_membership(), "a membership request");
        let id = req.member_id().expect("a membership request names a replica");
        let (status, value) = outcome;
        if status == Status::Ok {
            match req.op {
                Op::AddMember => {
                    assert!(req.value.len() <= MAX_ADDR_BYTES, "checked by parse");
                    self.members.insert(id, req.value.to_vec());
                }
                Op::RemoveMember => {
                    self.members.remove(&id);
                }
                _ => {}
            }
        }
        self.remember(req.client, Session { seq: req.seq, index, status, value: value.clone() });
        Response { status, leader: 0, index, value }
    }

    /// Applies the committed write `req` at log `index` and returns its
    /// response (`leader` left 0 for the caller to fill).
    pub fn apply(&mut self, index: u64, req: &RequestView<'_>) -> Response {
        assert!(req.op.writes(), "only writes are in the log");
        if let Some(s) = self.sessions.get(&req.client) {
            if req.seq == s.seq {
                return Response { status: s.status, leader: 0, index: s.index, value: s.value.clone() };
            }
            if req.seq < s.seq {
                return Response { status: Status::Stale, leader: 0, index, value: Vec::new() };
            }
        }
        let (status, value) = match req.op {
            Op::Put => {
                self.map.insert(req.key.to_vec(), req.value.to_vec());
                (Status::Ok, Vec::new())
            }
            Op::Del => {
                self.map.remove(req.key);
                (Status::Ok, Vec::new())
            }
            Op::Cas => {
                let current = self.map.get(req.key).map(Vec::as_slice);
                if current == req.expect {
                    self.map.insert(req.key.to_vec(), req.value.to_vec());
                    (Status::Ok, Vec::new())
                } else {
                    (Status::CasFailed, current.map(<[u8]>::to_vec).unwrap_or_default())
                }
            }
            _ => unreachable!("only writes, checked above"),
        };
        self.remember(req.client, Session { seq: req.seq, index, status, value: value.clone() });
        Response { status, leader: 0, index, value }
    }

    fn remember(&mut self, client: u64, session: Session) {
        if let Some(old) = self.sessions.insert(client, session.clone()) {
            self.by_index.remove(&old.index);
        }
        let previous = self.by_index.insert(session.index, client);
        assert!(previous.is_none(), "one write per log index");
        if self.sessions.len() > MAX_SESSIONS {
            let (_, oldest) = self.by_index.pop_first().expect("sessions are indexed");
            self.sessions.remove(&oldest);
        }
        assert_eq!(self.sessions.len(), self.by_index.len());
    }

    /// The snapshot of the map and its sessions.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&(self.map.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.sessions.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.members.len() as u64).to_le_bytes());
        for (k, v) in &self.map {
            out.extend_from_slice(&(k.len() as u32).to_le_bytes());
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(k);
            out.extend_from_slice(v);
        }
        for (client, s) in &self.sessions {
            out.extend_from_slice(&client.to_le_bytes());
            out.extend_from_slice(&s.seq.to_le_bytes());
            out.extend_from_slice(&s.index.to_le_bytes());
            out.extend_from_slice(&[s.status as u8, 0, 0, 0]);
            out.extend_from_slice(&(s.value.len() as u32).to_le_bytes());
            out.extend_from_slice(&s.value);
        }
        for (id, addr) in &self.members {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&(addr.len() as u32).to_le_bytes());
            out.extend_from_slice(&[0; 4]);
            out.extend_from_slice(addr);
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// The machine a [`snapshot`](Machine::snapshot) holds; checks the
    /// checksum first, then every length.
    pub fn restore(bytes: &[u8]) -> Result<Machine, RestoreError> {
        let corrupt = RestoreError::Corrupt;
        if bytes.len() < 28 {
            return Err(corrupt("too short"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err(corrupt("checksum"));
        }
        let v1 = &body[..8] == SNAPSHOT_MAGIC_V1;
        if &body[..8] != SNAPSHOT_MAGIC && !v1 {
            return Err(corrupt("magic (neither SMRSNAP2 nor SMRSNAP1)"));
        }
        let mut r = Reader { b: body, at: 8 };
        let (entries, sessions) = (r.u64()?, r.u64()?);
        let members = if v1 { 0 } else { r.u64()? };
        if members > MAX_MEMBERS as u64 {
            return Err(corrupt("member count"));
        }
        let mut m = Machine::new();
        for _ in 0..entries {
            let (k, v) = (r.u32()? as usize, r.u32()? as usize);
            if k > MAX_KEY_BYTES || v > MAX_VALUE_BYTES {
                return Err(corrupt("entry length"));
            }
            let key = r.bytes(k)?.to_vec();
            let value = r.bytes(v)?.to_vec();
            m.map.insert(key, value);
        }
        for _ in 0..sessions {
            let (client, seq, index) = (r.u64()?, r.u64()?, r.u64()?);
            let flags = r.bytes(4)?;
            let status = Status::from_u8(flags[0]).ok_or(corrupt("session status"))?;
            let len = r.u32()? as usize;
            if len > MAX_VALUE_BYTES {
                return Err(corrupt("session value length"));
            }
            let value = r.bytes(len)?.to_vec();
            if m.by_index.insert(index, client).is_some() || m.sessions.insert(client, Session { seq, index, status, value }).is_some() {
                return Err(corrupt("duplicate session"));
            }
        }
        for _ in 0..members {
            let (id, len) = (r.u64()?, r.u32()? as usize);
            if r.u32()? != 0 || len > MAX_ADDR_BYTES || id == 0 {
                return Err(corrupt("member"));
            }
            let addr = r.bytes(len)?.to_vec();
            if m.members.insert(id, addr).is_some() {
                return Err(corrupt("duplicate member"));
            }
        }
        if r.at != body.len() {
            return Err(corrupt("trailing bytes"));
        }
        Ok(m)
    }
}

/// Reads fields of a checked snapshot body, failing on a short one.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], RestoreError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or(RestoreError::Corrupt("truncated"))?;
        let out = &self.b[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u32(&mut self) -> Result<u32, RestoreError> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, RestoreError> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().expect("8 bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Request;

    fn w(op: Op, client: u64, seq: u64, key: &str, value: &str) -> Request {
        Request { op, client, seq, key: key.into(), value: value.into(), expect: None }
    }

    #[test]
    fn writes_apply_and_a_retry_is_applied_once() {
        let mut m = Machine::new();
        assert_eq!(m.apply(1, &w(Op::Put, 1, 1, "k", "a").view()).status, Status::Ok);
        assert_eq!(m.apply(2, &w(Op::Put, 2, 1, "k", "b").view()).status, Status::Ok);
        // Client 1 retries its first PUT after client 2's: not applied again.
        let retry = m.apply(3, &w(Op::Put, 1, 1, "k", "a").view());
        assert_eq!((retry.status, retry.index), (Status::Ok, 1), "the remembered outcome");
        assert_eq!(m.get(b"k"), Some(&b"b"[..]));
        assert_eq!(m.apply(4, &w(Op::Put, 1, 0, "k", "z").view()).status, Status::Stale);
        assert_eq!(m.apply(5, &w(Op::Del, 1, 2, "k", "").view()).status, Status::Ok);
        assert_eq!(m.get(b"k"), None);
    }

    #[test]
    fn cas_swaps_only_from_the_expected_value() {
        let mut m = Machine::new();
        let cas = |seq, expect: Option<&str>, new: &str| Request { op: Op::Cas, client: 1, seq, key: b"k".to_vec(), value: new.into(), expect: expect.map(Into::into) };
        assert_eq!(m.apply(1, &cas(1, None, "a").view()).status, Status::Ok);
        let failed = m.apply(2, &cas(2, None, "b").view());
        assert_eq!((failed.status, failed.value.as_slice()), (Status::CasFailed, &b"a"[..]));
        assert_eq!(m.apply(3, &cas(3, Some("a"), "c").view()).status, Status::Ok);
        assert_eq!(m.get(b"k"), Some(&b"c"[..]));
    }

    #[test]
    fn sessions_are_bounded_oldest_first() {
        let mut m = Machine::new();
        for c in 1..=(MAX_SESSIONS as u64 + 1) {
            m.apply(c, &w(Op::Put, c, 1, "k", "v").view());
        }
        assert_eq!(m.sessions.len(), MAX_SESSIONS);
        assert!(!m.sessions.contains_key(&1), "the session written first went");
    }

    #[test]
    fn snapshots_round_trip_and_corruption_is_refused() {
        let mut m = Machine::new();
        for i in 0..50u64 {
            m.apply(i + 1, &w(Op::Put, i % 7 + 1, i + 1, &format!("key{i}"), &"v".repeat(i as usize)).view());
        }
        let snap = m.snapshot();
        assert_eq!(Machine::restore(&snap), Ok(m));
        for at in [0, 9, snap.len() / 2, snap.len() - 1] {
            let mut bad = snap.clone();
            bad[at] ^= 1;
            assert!(Machine::restore(&bad).is_err(), "flipped byte {at}");
        }
        assert!(Machine::restore(&snap[..snap.len() - 5]).is_err());
    }

    #[test]
    fn members_are_kept_in_the_snapshot_and_a_version_1_snapshot_is_read() {
        let mut m = Machine::new();
        m.apply(1, &w(Op::Put, 1, 1, "k", "v").view());
        let v1 = {
            // What the previous build wrote: SMRSNAP1, no member count.
            let mut b = b"SMRSNAP1".to_vec();
            b.extend_from_slice(&0u64.to_le_bytes());
            b.extend_from_slice(&0u64.to_le_bytes());
            b.extend_from_slice(&crc32c::crc32c(&b).to_le_bytes());
            b
        };
        assert_eq!(Machine::restore(&v1), Ok(Machine::new()));
        let add = Request::member(Op::AddMember, 2, 1, 4, b"127.0.0.1:7004");
        assert_eq!(m.apply_member(2, &add.view(), (Status::Ok, vec![])).status, Status::Ok);
        assert_eq!(m.members().get(&4).map(Vec::as_slice), Some(&b"127.0.0.1:7004"[..]));
        assert_eq!(m.remembered(2, 1).map(|r| (r.status, r.index)), Some((Status::Ok, 2)), "a retry gets the kept outcome");
        let restored = Machine::restore(&m.snapshot()).expect("restores");
        assert_eq!(restored, m);
        let remove = Request::member(Op::RemoveMember, 2, 2, 4, b"");
        m.apply_member(3, &remove.view(), (Status::Ok, vec![]));
        assert!(m.members().is_empty());
        let refused = Request::member(Op::RemoveMember, 2, 3, 9, b"");
        assert_eq!(m.apply_member(4, &refused.view(), (Status::Refused, vec![8])).status, Status::Refused);
        assert_eq!(m.remembered(2, 3).map(|r| r.status), Some(Status::Refused));
    }
}
