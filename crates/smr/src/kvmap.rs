//! [`KvMap`]: the put/get/del/cas map, one [`StateMachine`] a replica
//! drives; what `pmwire replica` replicates and SMR1's data operations
//! (PUT, GET, DEL, CAS) reach.
//!
//! An entry is an SMR1 write request, byte for byte as the client sent it
//! (`crate::command`): PUT, DEL or CAS with its session. The map keeps its
//! client sessions ([`Sessions`]) so that a write retried after a lost
//! answer or a leader change is applied once (Raft thesis §6.3); they are
//! the machine's because they must change together with the state they
//! describe (a persistent machine commits both in one step). Anything that
//! is not a checked write is answered BAD_REQUEST and changes nothing,
//! identically on every replica.
//!
//! Deterministic: no clock, no randomness, no iteration over a hash map.
//! Volatile: [`StateMachine::persist_applied`] does nothing and a restart
//! starts from the replica's last snapshot.
//!
//! Snapshot (little-endian, `docs/FORMAT.md`, "Snapshot data"):
//! `b"SMRKVMP1"`, entry count u64, session count u64, then per entry
//! key_len u32, value_len u32, key, value (keys in byte order), then the
//! sessions ([`Sessions::encode`]), then crc32c (u32) of everything before.

use std::collections::BTreeMap;

use crate::command::{Op, RequestView, Response, Status, MAX_KEY_BYTES, MAX_VALUE_BYTES};
use crate::session::{Reader, Sessions};
use crate::smr1::Smr1Machine;
use crate::state::{PersistError, RestoreError, StateMachine};

const SNAPSHOT_MAGIC: &[u8; 8] = b"SMRKVMP1";

/// The key-value map and its sessions.
#[derive(Clone, Debug, Default)]
pub struct KvMap {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    sessions: Sessions,
    applied: u64,
}

/// Two maps are equal when they hold the same keys and sessions (the index
/// each last applied may differ: one restored from a snapshot taken at a
/// membership change says the snapshot's index).
impl PartialEq for KvMap {
    fn eq(&self, other: &KvMap) -> bool {
        self.map == other.map && self.sessions == other.sessions
    }
}

impl Eq for KvMap {}

impl KvMap {
    /// An empty map.
    pub fn new() -> KvMap {
        KvMap::default()
    }

    /// A map of these keys and sessions, as of log index `applied`.
    pub(crate) fn from_parts(map: BTreeMap<Vec<u8>, Vec<u8>>, sessions: Sessions, applied: u64) -> KvMap {
        KvMap { map, sessions, applied }
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

    /// Applies the write `req` at `index` (sessions first).
    fn write(&mut self, index: u64, req: &RequestView<'_>) -> Response {
        if let Some(kept) = self.sessions.check(req.client, req.seq, index) {
            return kept;
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
            _ => unreachable!("only writes: checked by the caller"),
        };
        self.sessions.remember(req.client, req.seq, index, status, value.clone());
        Response { status, leader: 0, index, value }
    }
}

impl StateMachine for KvMap {
    /// The write's answer (`leader` left 0 for the replica to fill).
    type Output = Response;

    fn apply(&mut self, index: u64, data: &[u8]) -> Response {
        assert!(index > self.applied, "entries apply in order");
        self.applied = index;
        match RequestView::parse(data) {
            Ok(req) if req.op.writes() => self.write(index, &req),
            _ => Response { status: Status::BadRequest, leader: 0, index, value: Vec::new() },
        }
    }

    fn persist_applied(&mut self) -> Result<(), PersistError> {
        Ok(())
    }

    fn applied(&self) -> u64 {
        self.applied
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&(self.map.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.sessions.len() as u64).to_le_bytes());
        encode_entries(&self.map, &mut out);
        self.sessions.encode(&mut out);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn restore(&mut self, index: u64, bytes: &[u8]) -> Result<(), RestoreError> {
        let body = checked_body(bytes, 28)?;
        if &body[..8] != SNAPSHOT_MAGIC {
            return Err(RestoreError::Corrupt("magic (not SMRKVMP1: not a put/get/del/cas map)"));
        }
        let mut r = Reader::new(body, 8);
        let (entries, sessions) = (r.u64()?, r.u64()?);
        let map = decode_entries(&mut r, entries)?;
        let sessions = Sessions::decode(&mut r, sessions)?;
        if !r.done() {
            return Err(RestoreError::Corrupt("trailing bytes"));
        }
        *self = KvMap { map, sessions, applied: index };
        Ok(())
    }
}

impl Smr1Machine for KvMap {
    fn apply_write(&mut self, index: u64, request: &[u8]) -> Response {
        StateMachine::apply(self, index, request)
    }

    fn read(&self, key: &[u8]) -> Response {
        match self.get(key) {
            Some(v) => Response { status: Status::Ok, leader: 0, index: 0, value: v.to_vec() },
            None => Response { status: Status::NotFound, leader: 0, index: 0, value: Vec::new() },
        }
    }

    fn preview(&self, index: u64, request: &[u8]) -> Response {
        self.clone().apply(index, request)
    }
}

/// The body of checksummed `bytes` (all but the trailing crc32c), if at
/// least `min` bytes long and the checksum matches.
pub(crate) fn checked_body(bytes: &[u8], min: usize) -> Result<&[u8], RestoreError> {
    if bytes.len() < min {
        return Err(RestoreError::Corrupt("too short"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(RestoreError::Corrupt("checksum"));
    }
    Ok(body)
}

fn encode_entries(map: &BTreeMap<Vec<u8>, Vec<u8>>, out: &mut Vec<u8>) {
    for (k, v) in map {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(v);
    }
}

/// Reads `count` map entries, each within the key and value bounds.
pub(crate) fn decode_entries(r: &mut Reader<'_>, count: u64) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, RestoreError> {
    let mut map = BTreeMap::new();
    for _ in 0..count {
        let (k, v) = (r.u32()? as usize, r.u32()? as usize);
        if k > MAX_KEY_BYTES || v > MAX_VALUE_BYTES {
            return Err(RestoreError::Corrupt("entry length"));
        }
        let key = r.bytes(k)?.to_vec();
        let value = r.bytes(v)?.to_vec();
        if map.insert(key, value).is_some() {
            return Err(RestoreError::Corrupt("duplicate key"));
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Request;

    fn w(op: Op, client: u64, seq: u64, key: &str, value: &str) -> Vec<u8> {
        Request { op, client, seq, key: key.into(), value: value.into(), expect: None }.to_bytes()
    }

    #[test]
    fn writes_apply_and_a_retry_is_applied_once() {
        let mut m = KvMap::new();
        assert_eq!(m.apply(1, &w(Op::Put, 1, 1, "k", "a")).status, Status::Ok);
        assert_eq!(m.apply(2, &w(Op::Put, 2, 1, "k", "b")).status, Status::Ok);
        // Client 1 retries its first PUT after client 2's: not applied again.
        let retry = m.apply(3, &w(Op::Put, 1, 1, "k", "a"));
        assert_eq!((retry.status, retry.index), (Status::Ok, 1), "the remembered outcome");
        assert_eq!(m.get(b"k"), Some(&b"b"[..]));
        assert_eq!(m.apply(4, &w(Op::Put, 1, 0, "k", "z")).status, Status::BadRequest, "no session: not a checked write");
        assert_eq!(m.apply(5, &w(Op::Del, 1, 2, "k", "")).status, Status::Ok);
        assert_eq!(m.apply(6, &w(Op::Put, 1, 1, "k", "z")).status, Status::Stale);
        assert_eq!(m.get(b"k"), None);
        assert_eq!(m.apply(7, b"junk").status, Status::BadRequest);
        assert_eq!(m.applied(), 7);
    }

    #[test]
    fn cas_swaps_only_from_the_expected_value() {
        let mut m = KvMap::new();
        let cas = |seq, expect: Option<&str>, new: &str| Request { op: Op::Cas, client: 1, seq, key: b"k".to_vec(), value: new.into(), expect: expect.map(Into::into) }.to_bytes();
        assert_eq!(m.apply(1, &cas(1, None, "a")).status, Status::Ok);
        let failed = m.apply(2, &cas(2, None, "b"));
        assert_eq!((failed.status, failed.value.as_slice()), (Status::CasFailed, &b"a"[..]));
        assert_eq!(m.preview(3, &cas(3, Some("a"), "c")).status, Status::Ok, "a preview answers");
        assert_eq!(m.get(b"k"), Some(&b"a"[..]), "and changes nothing");
        assert_eq!(m.apply(3, &cas(3, Some("a"), "c")).status, Status::Ok);
        assert_eq!(m.get(b"k"), Some(&b"c"[..]));
    }

    #[test]
    fn snapshots_round_trip_and_corruption_is_refused() {
        let mut m = KvMap::new();
        for i in 0..50u64 {
            m.apply(i + 1, &w(Op::Put, i % 7 + 1, i + 1, &format!("key{i}"), &"v".repeat(i as usize)));
        }
        let snap = m.snapshot();
        let mut back = KvMap::new();
        back.restore(90, &snap).expect("restores");
        assert_eq!((back.applied(), &back), (90, &m));
        for at in [0, 9, snap.len() / 2, snap.len() - 1] {
            let mut bad = snap.clone();
            bad[at] ^= 1;
            assert!(KvMap::new().restore(1, &bad).is_err(), "flipped byte {at}");
        }
        assert!(back.restore(1, &snap[..snap.len() - 5]).is_err());
        assert_eq!(back.applied(), 90, "a refused snapshot changes nothing");
    }
}
