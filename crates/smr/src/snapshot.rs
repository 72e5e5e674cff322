//! A replica's snapshot data: the replica's own part (the members'
//! addresses and the sessions of membership changes) and the machine's
//! ([`crate::state::StateMachine::snapshot`]), in one checksummed record.
//!
//! Format (little-endian, `docs/FORMAT.md`, "Snapshot data"):
//!
//! ```text
//!  0 magic b"SMRSNAP4" | 8 member count u64 | 16 session count u64
//! 24 machine part length u64 | 32 forwarded part length u64
//! 40 members | sessions | forwarded part | machine part | crc32c u32
//! member: id u64 (non-zero) | address length u32 (≤ 255) | 4 zero bytes | address
//! ```
//!
//! The crc32c covers everything before it and is checked before any field
//! is read; every count and length is checked against its bound and the
//! bytes left. The machine part is the machine's own bytes (checksummed
//! again by the machine).
//!
//! The forwarded part is the table of followers' proposals applied in the
//! current term (`crate::forward::Dedup::encode`). `b"SMRSNAP3"` (the same
//! without the forwarded part and its length) is read with an empty table.
//!
//! Compatibility: a pool written before the machine was a seam holds
//! `b"SMRSNAP2"` (or `b"SMRSNAP1"`, without members) snapshots: the
//! put/get/del/cas map, one session table and the members. They are read:
//! the members and sessions become the replica's part, and the map with
//! the same sessions becomes a [`KvMap`] snapshot, which only a `KvMap`
//! restores (any other machine refuses it, and the replica does not start,
//! saying why).

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::command::{MAX_ADDR_BYTES, MAX_MEMBERS};
use crate::forward::Dedup;
use crate::kvmap::{checked_body, decode_entries, KvMap};
use crate::session::{Reader, Sessions};
use crate::state::{RestoreError, StateMachine};

pub mod stream;

const MAGIC: &[u8; 8] = b"SMRSNAP4";
/// Before forwarded proposals (read, never written).
const MAGIC_V3: &[u8; 8] = b"SMRSNAP3";
/// The formats written before the machine was a seam (read, never written).
const MAGIC_V2: &[u8; 8] = b"SMRSNAP2";
const MAGIC_V1: &[u8; 8] = b"SMRSNAP1";

/// The replica's own part of a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaPart {
    /// Addresses of the replicas added by ADD_MEMBER (id → address bytes).
    pub members: BTreeMap<u64, Vec<u8>>,
    /// Sessions of membership changes.
    pub sessions: Sessions,
    /// Followers' proposals applied in the current term (`crate::forward`).
    pub forwarded: Dedup,
}

/// A decoded snapshot: the replica's part and the machine's bytes.
#[derive(Debug)]
pub struct Decoded<'a> {
    /// The replica's part.
    pub replica: ReplicaPart,
    /// What the machine restores from.
    pub machine: Cow<'a, [u8]>,
    /// The snapshot was in a format from before the machine was a seam.
    pub legacy: bool,
}

/// Whether `bytes` is a compaction record of a machine that keeps its own
/// state durably ([`crate::state::StateMachine::keeps_state`]): an
/// SMRSNAP4 snapshot whose machine part is empty (a machine's own
/// snapshot never is: it carries at least its checksum). The replica's part
/// is whole; the machine's state at the index is the machine's own, so
/// such a snapshot restores nothing and is never sent to a peer. Reads
/// only the magic and the length field; [`decode`] checks the rest.
pub fn is_deferred(bytes: &[u8]) -> bool {
    bytes.len() >= 32 && &bytes[..8] == MAGIC && bytes[24..32] == [0; 8]
}

/// The snapshot of `replica` and the machine's `machine` bytes.
pub fn encode(replica: &ReplicaPart, machine: &[u8]) -> Vec<u8> {
    encode_with(replica, |out| out.extend_from_slice(machine))
}

/// The snapshot of `replica` and the machine bytes `machine` appends (its
/// length field is filled in after): the machine's part is written once,
/// in place.
pub fn encode_with(replica: &ReplicaPart, machine: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = record_prefix(replica);
    let machine_at = out.len();
    machine(&mut out);
    finish_record(out, machine_at)
}

/// A snapshot's bytes up to its machine part (whose length field is
/// filled in by [`finish_record`]).
pub fn record_prefix(replica: &ReplicaPart) -> Vec<u8> {
    assert!(replica.members.len() <= MAX_MEMBERS, "members within bound");
    let mut forwarded = Vec::new();
    replica.forwarded.encode(&mut forwarded);
    let mut out = Vec::with_capacity(48 + forwarded.len() + 64 * replica.members.len());
    out.extend_from_slice(MAGIC);
    for n in [replica.members.len() as u64, replica.sessions.len() as u64, 0, forwarded.len() as u64] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    for (id, addr) in &replica.members {
        assert!(addr.len() <= MAX_ADDR_BYTES, "address within bound");
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&(addr.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(addr);
    }
    replica.sessions.encode(&mut out);
    out.extend_from_slice(&forwarded);
    out
}

/// A [`record_prefix`] with the machine's bytes appended from
/// `machine_at` on: its length filled in, the checksum appended.
pub fn finish_record(mut out: Vec<u8>, machine_at: usize) -> Vec<u8> {
    seal_record_length(&mut out, machine_at);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Fills in the machine part's length of a [`record_prefix`] whose
/// machine bytes are appended from `machine_at` on; what is left is the
/// checksum of everything, appended (a record written in parts computes it
/// part by part).
pub fn seal_record_length(out: &mut [u8], machine_at: usize) {
    let machine_len = (out.len() - machine_at) as u64;
    seal_machine_len(out, machine_at, machine_len);
}

/// Fills in the machine part's length of a [`record_prefix`] (at
/// `machine_at` on in `out`, whose machine bytes follow) before they are
/// all there: a record written as its steps come
/// ([`crate::StateMachine::snapshot_len`]).
pub fn seal_machine_len(out: &mut [u8], machine_at: usize, machine_len: u64) {
    assert!(out.len() >= machine_at, "the record's prefix is there");
    // The machine's length is the header's third count.
    out[24..32].copy_from_slice(&machine_len.to_le_bytes());
}

/// Decodes a snapshot (checksum first).
pub fn decode(bytes: &[u8]) -> Result<Decoded<'_>, RestoreError> {
    let body = checked_body(bytes, 28)?;
    match &body[..8] {
        m if m == MAGIC => decode_current(body, true),
        m if m == MAGIC_V3 => decode_current(body, false),
        m if m == MAGIC_V2 || m == MAGIC_V1 => decode_legacy(body, m == MAGIC_V1),
        _ => Err(RestoreError::Corrupt("magic (not SMRSNAP4, nor SMRSNAP3, SMRSNAP2 or SMRSNAP1 of an older pool)")),
    }
}

/// SMRSNAP4 (`with_forwarded`) or SMRSNAP3 (without the forwarded part).
fn decode_current(body: &[u8], with_forwarded: bool) -> Result<Decoded<'_>, RestoreError> {
    let mut r = Reader::new(body, 8);
    let (members, sessions, machine_len) = (r.u64()?, r.u64()?, r.u64()?);
    let forwarded_len = if with_forwarded { r.u64()? } else { 0 };
    let members = decode_members(&mut r, members)?;
    let sessions = Sessions::decode(&mut r, sessions)?;
    let forwarded = match with_forwarded {
        true => {
            let part = r.bytes(usize::try_from(forwarded_len).map_err(|_| RestoreError::Corrupt("forwarded part length"))?)?;
            let mut fr = Reader::new(part, 0);
            let table = Dedup::decode(&mut fr)?;
            if !fr.done() {
                return Err(RestoreError::Corrupt("forwarded part"));
            }
            table
        }
        false => Dedup::default(),
    };
    let machine = r.bytes(usize::try_from(machine_len).map_err(|_| RestoreError::Corrupt("machine part length"))?)?;
    if !r.done() {
        return Err(RestoreError::Corrupt("trailing bytes"));
    }
    Ok(Decoded { replica: ReplicaPart { members, sessions, forwarded }, machine: Cow::Borrowed(machine), legacy: false })
}

/// SMRSNAP2: entry count, session count, member count, entries, sessions,
/// members; SMRSNAP1 the same without members.
fn decode_legacy(body: &[u8], v1: bool) -> Result<Decoded<'static>, RestoreError> {
    let mut r = Reader::new(body, 8);
    let (entries, sessions) = (r.u64()?, r.u64()?);
    let members = if v1 { 0 } else { r.u64()? };
    let map = decode_entries(&mut r, entries)?;
    let sessions = Sessions::decode(&mut r, sessions)?;
    let members = decode_members(&mut r, members)?;
    if !r.done() {
        return Err(RestoreError::Corrupt("trailing bytes"));
    }
    // One table served writes and membership changes alike: both keep it.
    let machine = KvMap::from_parts(map, sessions.clone(), 0).snapshot();
    Ok(Decoded { replica: ReplicaPart { members, sessions, forwarded: Dedup::default() }, machine: Cow::Owned(machine), legacy: true })
}

fn decode_members(r: &mut Reader<'_>, count: u64) -> Result<BTreeMap<u64, Vec<u8>>, RestoreError> {
    if count > MAX_MEMBERS as u64 {
        return Err(RestoreError::Corrupt("member count"));
    }
    let mut members = BTreeMap::new();
    for _ in 0..count {
        let (id, len) = (r.u64()?, r.u32()? as usize);
        if r.u32()? != 0 || len > MAX_ADDR_BYTES || id == 0 {
            return Err(RestoreError::Corrupt("member"));
        }
        if members.insert(id, r.bytes(len)?.to_vec()).is_some() {
            return Err(RestoreError::Corrupt("duplicate member"));
        }
    }
    Ok(members)
}

/// Restores `machine` from a decoded snapshot taken at `index`, saying
/// which format a refusal came from.
pub fn restore_machine<M: StateMachine>(machine: &mut M, index: u64, decoded: &Decoded<'_>) -> Result<(), String> {
    machine.restore(index, &decoded.machine).map_err(|e| {
        if decoded.legacy {
            format!("the snapshot at index {index} is a put/get/del/cas map from a pool written before issue 26 (SMRSNAP2), which this replica's machine does not take: {e}")
        } else {
            format!("the machine refused the snapshot at index {index}: {e}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Op, Request, Status};

    #[test]
    fn snapshots_round_trip_and_corruption_is_refused() {
        let mut replica = ReplicaPart::default();
        replica.members.insert(4, b"127.0.0.1:7004".to_vec());
        replica.sessions.remember(2, 1, 7, Status::Ok, Vec::new());
        let bytes = encode(&replica, b"machine bytes");
        let d = decode(&bytes).expect("decodes");
        assert_eq!((&d.replica, &d.machine[..], d.legacy), (&replica, &b"machine bytes"[..], false));
        for at in [0, 9, 30, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 1;
            assert!(decode(&bad).is_err(), "flipped byte {at}");
        }
        assert!(decode(&bytes[..bytes.len() - 5]).is_err());
    }

    /// What the build before the seam wrote: SMRSNAP2 with a map, one
    /// session table and the members.
    fn legacy_v2() -> Vec<u8> {
        let mut b = b"SMRSNAP2".to_vec();
        for n in [1u64, 1, 1] {
            b.extend_from_slice(&n.to_le_bytes());
        }
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(b"kvv");
        let mut sessions = Sessions::default();
        sessions.remember(9, 3, 5, Status::Ok, Vec::new());
        sessions.encode(&mut b);
        b.extend_from_slice(&4u64.to_le_bytes());
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(b"a:4");
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn a_snapshot_of_a_pool_from_before_the_seam_is_read_into_a_kvmap() {
        let bytes = legacy_v2();
        let d = decode(&bytes).expect("decodes");
        assert!(d.legacy);
        assert_eq!(d.replica.members.get(&4).map(Vec::as_slice), Some(&b"a:4"[..]));
        let mut m = KvMap::new();
        restore_machine(&mut m, 12, &d).expect("a KvMap takes it");
        assert_eq!((m.get(b"k"), m.applied()), (Some(&b"vv"[..]), 12));
        let retry = Request { op: Op::Put, client: 9, seq: 3, key: b"k".to_vec(), value: b"x".to_vec(), expect: None };
        assert_eq!(m.apply(13, &retry.to_bytes()).index, 5, "the session came along: a retry is not applied again");
        assert_eq!(d.replica.sessions.check(9, 3, 0).map(|r| r.index), Some(5));
        let v1 = {
            let mut b = b"SMRSNAP1".to_vec();
            b.extend_from_slice(&[0; 16]);
            let crc = crc32c::crc32c(&b);
            b.extend_from_slice(&crc.to_le_bytes());
            b
        };
        assert!(decode(&v1).expect("SMRSNAP1 decodes").replica.members.is_empty());
    }
}
