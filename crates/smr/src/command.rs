//! The client protocol of a replica, and the commands its log carries.
//!
//! A client request is one transport call: the header is [`REQUEST_MAGIC`]
//! (4 bytes), the payload a [`Request`] encoded as below. A write's
//! encoded request is, byte for byte, the data of the log entry that
//! carries it, so what a replica applies is what the client sent (after
//! it was checked). All integers little-endian; layout in `docs/FORMAT.md`
//! ("Replicated state machine").
//!
//! ```text
//! request:  0 op u8 | 1 flags u8 | 2 reserved u16 (0) | 4 key_len u32
//!           8 client u64 | 16 seq u64 | 24 value_len u32 | 28 expect_len u32
//!           32 key | value | expect
//! response: 0 status u8 | 1 flags u8 | 2 reserved u16 (0) | 4 value_len u32
//!           8 leader u64 | 16 index u64 | 24 value
//! ```
//!
//! Membership requests (ADD_MEMBER, REMOVE_MEMBER, PROMOTE_MEMBER,
//! TRANSFER_LEADER) use the same layout: the key is the replica id (8
//! bytes, u64), ADD_MEMBER's value the new replica's address as its
//! transport encodes it ([`crate::node::PeerAddr`]). The three that change
//! the membership carry a session like a write; their encoded request is
//! the context of the conf-change entry that carries them.
//!
//! Invariant: [`Request::decode`] accepts exactly what [`Request::encode`]
//! produces for requests within [`MAX_KEY_BYTES`] and [`MAX_VALUE_BYTES`];
//! every length is checked before it is used.

use pmem::le::{get_u32, get_u64};
use thiserror::Error;

/// The call header of a client request.
pub const REQUEST_MAGIC: [u8; 4] = *b"SMR1";
/// The fixed part of an encoded request.
pub const REQUEST_HEADER_BYTES: usize = 32;
/// The fixed part of an encoded response.
pub const RESPONSE_HEADER_BYTES: usize = 24;
/// Largest key.
pub const MAX_KEY_BYTES: usize = 4096;
/// Largest value (and CAS expectation).
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// Largest replica address (ADD_MEMBER's value).
pub const MAX_ADDR_BYTES: usize = 255;
/// Most members (voters and learners) a STATUS reply lists.
pub const MAX_MEMBERS: usize = 64;
/// A membership request's key: the replica id, u64.
pub const MEMBER_ID_BYTES: usize = 8;

/// What a client asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Set a key's value.
    Put = 1,
    /// Read a key (linearizable, by ReadIndex).
    Get = 2,
    /// Remove a key.
    Del = 3,
    /// Set a key's value if it holds the expected one.
    Cas = 4,
    /// Where the replica stands (any replica answers; no key, no session).
    Status = 5,
    /// Add a replica as a learner (key: its id; value: its address).
    AddMember = 6,
    /// Remove a replica, voter or learner (key: its id). The leader
    /// removing itself hands leadership over first.
    RemoveMember = 7,
    /// Make a caught-up learner a voter (key: its id).
    PromoteMember = 8,
    /// Hand leadership to a voter (key: its id; no session, no log entry).
    TransferLeader = 9,
}

impl Op {
    fn from_u8(v: u8) -> Option<Op> {
        Some(match v {
            1 => Op::Put,
            2 => Op::Get,
            3 => Op::Del,
            4 => Op::Cas,
            5 => Op::Status,
            6 => Op::AddMember,
            7 => Op::RemoveMember,
            8 => Op::PromoteMember,
            9 => Op::TransferLeader,
            _ => return None,
        })
    }

    /// True for the operations that go through the log.
    pub fn writes(self) -> bool {
        matches!(self, Op::Put | Op::Del | Op::Cas)
    }

    /// True for the operations carried by a conf-change entry.
    pub fn changes_membership(self) -> bool {
        matches!(self, Op::AddMember | Op::RemoveMember | Op::PromoteMember)
    }

    /// True for the operations whose key is a replica id.
    pub fn names_member(self) -> bool {
        self.changes_membership() || self == Op::TransferLeader
    }
}

/// CAS flag: the expectation is a value (clear: the key must be absent).
const FLAG_EXPECT: u8 = 1;

/// A client request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// What to do.
    pub op: Op,
    /// The client's session id (non-zero for writes).
    pub client: u64,
    /// The client's request number in its session (writes: 1, 2, ...).
    pub seq: u64,
    /// The key.
    pub key: Vec<u8>,
    /// PUT and CAS: the new value.
    pub value: Vec<u8>,
    /// CAS: the value the key must hold; `None`: the key must be absent.
    pub expect: Option<Vec<u8>>,
}

/// Why a request could not be decoded.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than its fixed part or than its lengths say.
    #[error("request truncated: {0} bytes")]
    Truncated(usize),
    /// Longer than its lengths say.
    #[error("request has {0} trailing bytes")]
    Trailing(usize),
    /// An unknown operation code.
    #[error("unknown operation {0}")]
    UnknownOp(u8),
    /// Reserved bits or bytes set, or a field that does not belong to the
    /// operation.
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    /// A key or value over its bound.
    #[error("{what} of {len} bytes is over the bound of {max}")]
    TooLarge {
        /// Which field.
        what: &'static str,
        /// Its length.
        len: u64,
        /// The bound.
        max: usize,
    },
}


impl Request {
    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        assert!(self.key.len() <= MAX_KEY_BYTES, "key within bound");
        assert!(self.value.len() <= MAX_VALUE_BYTES, "value within bound");
        let expect = self.expect.as_deref().unwrap_or(&[]);
        assert!(expect.len() <= MAX_VALUE_BYTES, "expectation within bound");
        let flags = if self.op == Op::Cas && self.expect.is_some() { FLAG_EXPECT } else { 0 };
        out.push(self.op as u8);
        out.push(flags);
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.client.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&(self.value.len() as u32).to_le_bytes());
        out.extend_from_slice(&(expect.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.value);
        out.extend_from_slice(expect);
    }

    /// The encoding as a new vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(REQUEST_HEADER_BYTES + self.key.len() + self.value.len());
        self.encode(&mut out);
        out
    }

    /// Decodes and checks one request (all of `b`).
    pub fn decode(b: &[u8]) -> Result<Request, DecodeError> {
        let v = RequestView::parse(b)?;
        Ok(Request { op: v.op, client: v.client, seq: v.seq, key: v.key.to_vec(), value: v.value.to_vec(), expect: v.expect.map(<[u8]>::to_vec) })
    }

    /// A membership request (`op` one of [`Op::names_member`]) naming
    /// replica `id`; `addr` is ADD_MEMBER's address (empty otherwise).
    pub fn member(op: Op, client: u64, seq: u64, id: u64, addr: &[u8]) -> Request {
        assert!(op.names_member(), "a membership operation");
        Request { op, client, seq, key: id.to_le_bytes().to_vec(), value: addr.to_vec(), expect: None }
    }

    /// The request as a view (what a replica checks and proposes).
    pub fn view(&self) -> RequestView<'_> {
        RequestView { op: self.op, client: self.client, seq: self.seq, key: &self.key, value: &self.value, expect: self.expect.as_deref() }
    }
}

/// A checked request borrowing its bytes: what a replica needs on the
/// write path, where the bytes themselves become the log entry (no copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestView<'a> {
    /// What to do.
    pub op: Op,
    /// The client's session id.
    pub client: u64,
    /// The request number in the session.
    pub seq: u64,
    /// The key.
    pub key: &'a [u8],
    /// PUT and CAS: the new value.
    pub value: &'a [u8],
    /// CAS: the expected value (`None`: the key must be absent).
    pub expect: Option<&'a [u8]>,
}

impl<'a> RequestView<'a> {
    /// The replica a membership request names (checked by `parse`).
    pub fn member_id(&self) -> Option<u64> {
        self.op.names_member().then(|| get_u64(self.key, 0))
    }

    /// Checks one encoded request (all of `b`) and borrows its fields.
    pub fn parse(b: &'a [u8]) -> Result<RequestView<'a>, DecodeError> {
        if b.len() < REQUEST_HEADER_BYTES {
            return Err(DecodeError::Truncated(b.len()));
        }
        let op = Op::from_u8(b[0]).ok_or(DecodeError::UnknownOp(b[0]))?;
        let flags = b[1];
        if flags & !FLAG_EXPECT != 0 || (flags != 0 && op != Op::Cas) {
            return Err(DecodeError::Malformed("flags"));
        }
        if b[2] != 0 || b[3] != 0 {
            return Err(DecodeError::Malformed("reserved bytes"));
        }
        let (key_len, value_len, expect_len) = (get_u32(b, 4), get_u32(b, 24), get_u32(b, 28));
        let bound = |what, len: u32, max| if len as usize > max { Err(DecodeError::TooLarge { what, len: len.into(), max }) } else { Ok(len as usize) };
        let key_len = bound("key", key_len, MAX_KEY_BYTES)?;
        let value_len = bound("value", value_len, MAX_VALUE_BYTES)?;
        let expect_len = bound("expectation", expect_len, MAX_VALUE_BYTES)?;
        let body = key_len + value_len + expect_len; // each ≤ 1 MiB: no overflow
        let want = REQUEST_HEADER_BYTES + body;
        if b.len() < want {
            return Err(DecodeError::Truncated(b.len()));
        }
        if b.len() > want {
            return Err(DecodeError::Trailing(b.len() - want));
        }
        let has_value = matches!(op, Op::Put | Op::Cas | Op::AddMember);
        if !has_value && value_len != 0 {
            return Err(DecodeError::Malformed("a value on an operation without one"));
        }
        if op == Op::Status && key_len != 0 {
            return Err(DecodeError::Malformed("a key on STATUS"));
        }
        if flags & FLAG_EXPECT == 0 && expect_len != 0 {
            return Err(DecodeError::Malformed("an expectation without its flag"));
        }
        let (client, seq) = (get_u64(b, 8), get_u64(b, 16));
        if (op.writes() || op.changes_membership()) && (client == 0 || seq == 0) {
            return Err(DecodeError::Malformed("a write without a session (client and seq non-zero)"));
        }
        if op.names_member() {
            if key_len != MEMBER_ID_BYTES || get_u64(b, REQUEST_HEADER_BYTES) == 0 {
                return Err(DecodeError::Malformed("a membership request's key is a non-zero replica id (u64)"));
            }
            if op == Op::AddMember && (value_len == 0 || value_len > MAX_ADDR_BYTES) {
                return Err(DecodeError::Malformed("ADD_MEMBER's value is an address of 1 to 255 bytes"));
            }
        }
        let key_end = REQUEST_HEADER_BYTES + key_len;
        let value_end = key_end + value_len;
        let expect = (flags & FLAG_EXPECT != 0).then(|| &b[value_end..want]);
        Ok(RequestView { op, client, seq, key: &b[REQUEST_HEADER_BYTES..key_end], value: &b[key_end..value_end], expect })
    }
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// Done (PUT, DEL, a CAS that swapped, a GET that found the key).
    Ok = 0,
    /// GET: the key is absent.
    NotFound = 1,
    /// CAS: the key did not hold the expectation (the value holds the
    /// current value, if any).
    CasFailed = 2,
    /// This replica is not the leader; `leader` names the one it knows (0:
    /// none known). Not applied: retry there.
    NotLeader = 3,
    /// The request could not be decoded; not applied.
    BadRequest = 4,
    /// The request's sequence number is older than the session's last:
    /// its outcome is no longer kept. Not applied now.
    Stale = 5,
    /// Leadership changed before the request was known to be committed:
    /// it may or may not be applied; retry with the same sequence number
    /// (the session applies it once).
    Retry = 6,
    /// A membership request was refused; the value is a [`Refused`]
    /// (reason code and message). Nothing changed.
    Refused = 7,
}

impl Status {
    /// The status of a byte, if known.
    pub fn from_u8(v: u8) -> Option<Status> {
        Some(match v {
            0 => Status::Ok,
            1 => Status::NotFound,
            2 => Status::CasFailed,
            3 => Status::NotLeader,
            4 => Status::BadRequest,
            5 => Status::Stale,
            6 => Status::Retry,
            7 => Status::Refused,
            _ => return None,
        })
    }
}

/// A replica's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// How it ended.
    pub status: Status,
    /// The leader this replica knows (0: none); set on every response.
    pub leader: u64,
    /// The log index the write was applied at, or the read index a GET
    /// was served at (0 if neither).
    pub index: u64,
    /// GET: the value; failed CAS: the current value.
    pub value: Vec<u8>,
}

impl Response {
    /// The encoding as a new vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode(&mut out);
        out
    }

    /// Bytes of the encoding.
    pub fn encoded_len(&self) -> usize {
        RESPONSE_HEADER_BYTES + self.value.len()
    }

    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        assert!(self.value.len() <= MAX_VALUE_BYTES, "value within bound");
        out.push(self.status as u8);
        out.push(0);
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&(self.value.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.leader.to_le_bytes());
        out.extend_from_slice(&self.index.to_le_bytes());
        out.extend_from_slice(&self.value);
    }

    /// Decodes and checks one response.
    pub fn decode(b: &[u8]) -> Result<Response, DecodeError> {
        if b.len() < RESPONSE_HEADER_BYTES {
            return Err(DecodeError::Truncated(b.len()));
        }
        let status = Status::from_u8(b[0]).ok_or(DecodeError::Malformed("status"))?;
        if b[1] != 0 || b[2] != 0 || b[3] != 0 {
            return Err(DecodeError::Malformed("reserved bytes"));
        }
        let len = get_u32(b, 4) as usize;
        if len > MAX_VALUE_BYTES {
            return Err(DecodeError::TooLarge { what: "value", len: len as u64, max: MAX_VALUE_BYTES });
        }
        if b.len() != RESPONSE_HEADER_BYTES + len {
            return Err(if b.len() < RESPONSE_HEADER_BYTES + len { DecodeError::Truncated(b.len()) } else { DecodeError::Trailing(b.len() - RESPONSE_HEADER_BYTES - len) });
        }
        Ok(Response { status, leader: get_u64(b, 8), index: get_u64(b, 16), value: b[RESPONSE_HEADER_BYTES..].to_vec() })
    }
}

/// Why a membership request was refused (the first byte of a
/// [`Status::Refused`] value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Refusal {
    /// ADD_MEMBER of an id that is a voter, or a learner at another
    /// address; PROMOTE_MEMBER of a voter.
    Exists = 1,
    /// The id is not a member (REMOVE, PROMOTE, TRANSFER).
    Unknown = 2,
    /// Removing it would leave no voter.
    LastVoter = 3,
    /// TRANSFER_LEADER to a learner.
    NotVoter = 4,
    /// Another membership change is in the log and not yet applied.
    Pending = 5,
    /// PROMOTE_MEMBER of a learner that has not caught up yet (retry).
    CatchingUp = 6,
    /// ADD_MEMBER of an address another member has.
    AddressInUse = 7,
    /// raft-rs refused the change when it was applied.
    Rejected = 8,
    /// The leader could not hand over leadership within an election
    /// timeout (the target did not catch up or is down).
    TransferFailed = 9,
}

impl Refusal {
    fn from_u8(v: u8) -> Option<Refusal> {
        Some(match v {
            1 => Refusal::Exists,
            2 => Refusal::Unknown,
            3 => Refusal::LastVoter,
            4 => Refusal::NotVoter,
            5 => Refusal::Pending,
            6 => Refusal::CatchingUp,
            7 => Refusal::AddressInUse,
            8 => Refusal::Rejected,
            9 => Refusal::TransferFailed,
            _ => return None,
        })
    }
}

/// The value of a [`Status::Refused`] response: the reason (u8), then a
/// message for a person (UTF-8, the rest of the value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// Why.
    pub reason: Refusal,
    /// What to tell the user.
    pub message: String,
}

impl Refused {
    /// A refusal for `reason`, explained by `message`.
    pub fn new(reason: Refusal, message: impl Into<String>) -> Refused {
        Refused { reason, message: message.into() }
    }

    /// The encoding (the response's value).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![self.reason as u8];
        let msg = self.message.as_bytes();
        out.extend_from_slice(&msg[..msg.len().min(1024)]);
        out
    }

    /// Decodes a refusal.
    pub fn decode(b: &[u8]) -> Result<Refused, DecodeError> {
        let (&code, msg) = b.split_first().ok_or(DecodeError::Truncated(0))?;
        let reason = Refusal::from_u8(code).ok_or(DecodeError::Malformed("refusal reason"))?;
        Ok(Refused { reason, message: String::from_utf8_lossy(msg).into_owned() })
    }
}

/// A member as STATUS lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Replica id.
    pub id: u64,
    /// A learner (receives the log, does not vote) rather than a voter.
    pub learner: bool,
    /// Its address as the answering replica knows it (empty: unknown, or
    /// the answering replica itself).
    pub addr: Vec<u8>,
}

/// A replica's STATUS, the value of its response: 56 bytes (id u64, role
/// u8 (0 follower, 1 candidate, 2 leader, 3 pre-candidate) and 7 zero
/// bytes, term u64, leader u64, last index u64, commit u64, applied u64),
/// then the membership it has applied: member count u32, 4 zero bytes,
/// and per member id u64, kind u8 (0 voter, 1 learner), 3 zero bytes,
/// address length u32, address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusValue {
    /// Replica id.
    pub id: u64,
    /// 0 follower, 1 candidate, 2 leader, 3 pre-candidate.
    pub role: u8,
    /// Term.
    pub term: u64,
    /// The leader it knows (0: none).
    pub leader: u64,
    /// Last log index.
    pub last_index: u64,
    /// Commit index.
    pub commit: u64,
    /// Applied index.
    pub applied: u64,
    /// Voters and learners, by id (at most [`MAX_MEMBERS`]).
    pub members: Vec<Member>,
}

/// Bytes of the fixed part of an encoded [`StatusValue`].
pub const STATUS_BYTES: usize = 56;

impl StatusValue {
    /// The role's name.
    pub fn role_name(&self) -> &'static str {
        match self.role {
            0 => "follower",
            1 => "candidate",
            2 => "leader",
            3 => "pre-candidate",
            _ => "unknown",
        }
    }

    /// The voters' ids.
    pub fn voters(&self) -> Vec<u64> {
        self.members.iter().filter(|m| !m.learner).map(|m| m.id).collect()
    }

    /// The learners' ids.
    pub fn learners(&self) -> Vec<u64> {
        self.members.iter().filter(|m| m.learner).map(|m| m.id).collect()
    }

    /// The encoding.
    pub fn to_bytes(&self) -> Vec<u8> {
        assert!(self.members.len() <= MAX_MEMBERS, "members within bound");
        let mut out = Vec::with_capacity(STATUS_BYTES + 8 + self.members.len() * 24);
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&[self.role, 0, 0, 0, 0, 0, 0, 0]);
        for v in [self.term, self.leader, self.last_index, self.commit, self.applied] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(self.members.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        for m in &self.members {
            assert!(m.addr.len() <= MAX_ADDR_BYTES, "address within bound");
            out.extend_from_slice(&m.id.to_le_bytes());
            out.extend_from_slice(&[m.learner as u8, 0, 0, 0]);
            out.extend_from_slice(&(m.addr.len() as u32).to_le_bytes());
            out.extend_from_slice(&m.addr);
        }
        out
    }

    /// Decodes and checks one.
    pub fn decode(b: &[u8]) -> Result<StatusValue, DecodeError> {
        if b.len() < STATUS_BYTES + 8 {
            return Err(DecodeError::Truncated(b.len()));
        }
        if b[8] > 3 || b[9..16].iter().any(|&x| x != 0) {
            return Err(DecodeError::Malformed("status role"));
        }
        let count = get_u32(b, STATUS_BYTES) as usize;
        if count > MAX_MEMBERS || get_u32(b, STATUS_BYTES + 4) != 0 {
            return Err(DecodeError::Malformed("status member count"));
        }
        let mut members = Vec::with_capacity(count);
        let mut at = STATUS_BYTES + 8;
        for _ in 0..count {
            if b.len() < at + 16 {
                return Err(DecodeError::Truncated(b.len()));
            }
            if b[at + 8] > 1 || b[at + 9..at + 12].iter().any(|&x| x != 0) {
                return Err(DecodeError::Malformed("status member kind"));
            }
            let len = get_u32(b, at + 12) as usize;
            if len > MAX_ADDR_BYTES || b.len() < at + 16 + len {
                return Err(DecodeError::Malformed("status member address"));
            }
            members.push(Member { id: get_u64(b, at), learner: b[at + 8] == 1, addr: b[at + 16..at + 16 + len].to_vec() });
            at += 16 + len;
        }
        if at != b.len() {
            return Err(DecodeError::Trailing(b.len() - at));
        }
        Ok(StatusValue { id: get_u64(b, 0), role: b[8], term: get_u64(b, 16), leader: get_u64(b, 24), last_index: get_u64(b, 32), commit: get_u64(b, 40), applied: get_u64(b, 48), members })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put() -> Request {
        Request { op: Op::Put, client: 7, seq: 1, key: b"key".to_vec(), value: b"value".to_vec(), expect: None }
    }

    #[test]
    fn requests_round_trip() {
        let cas = Request { op: Op::Cas, client: 1, seq: 9, key: b"k".to_vec(), value: b"new".to_vec(), expect: Some(b"old".to_vec()) };
        let cas_absent = Request { expect: None, ..cas.clone() };
        let get = Request { op: Op::Get, client: 0, seq: 0, key: b"k".to_vec(), value: vec![], expect: None };
        for r in [put(), cas, cas_absent, get] {
            assert_eq!(Request::decode(&r.to_bytes()), Ok(r));
        }
    }

    #[test]
    fn bad_requests_are_refused_with_their_reason() {
        let good = put().to_bytes();
        assert_eq!(Request::decode(&good[..10]), Err(DecodeError::Truncated(10)));
        assert_eq!(Request::decode(&good[..good.len() - 1]), Err(DecodeError::Truncated(good.len() - 1)));
        let mut long = good.clone();
        long.push(0);
        assert_eq!(Request::decode(&long), Err(DecodeError::Trailing(1)));
        let mut op = good.clone();
        op[0] = 99;
        assert_eq!(Request::decode(&op), Err(DecodeError::UnknownOp(99)));
        let mut flags = good.clone();
        flags[1] = 1;
        assert!(matches!(Request::decode(&flags), Err(DecodeError::Malformed(_))), "an expectation flag on PUT");
        let mut huge = good.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Request::decode(&huge), Err(DecodeError::TooLarge { what: "key", .. })));
        let mut no_session = good.clone();
        no_session[8..16].copy_from_slice(&0u64.to_le_bytes());
        assert!(matches!(Request::decode(&no_session), Err(DecodeError::Malformed(_))));
    }

    #[test]
    fn membership_requests_round_trip_and_bad_ones_are_refused() {
        let add = Request::member(Op::AddMember, 5, 1, 4, b"127.0.0.1:7004");
        let transfer = Request::member(Op::TransferLeader, 0, 0, 2, b"");
        for r in [add.clone(), Request::member(Op::RemoveMember, 5, 2, 3, b""), Request::member(Op::PromoteMember, 5, 3, 4, b""), transfer] {
            let bytes = r.to_bytes();
            assert_eq!(Request::decode(&bytes), Ok(r.clone()));
            assert_eq!(RequestView::parse(&bytes).unwrap().member_id(), Some(u64::from_le_bytes(r.key[..].try_into().unwrap())));
        }
        let no_addr = Request { value: vec![], ..add.clone() };
        assert!(matches!(Request::decode(&no_addr.to_bytes()), Err(DecodeError::Malformed(_))));
        let short_key = Request { key: vec![4], ..add.clone() };
        assert!(matches!(Request::decode(&short_key.to_bytes()), Err(DecodeError::Malformed(_))));
        let zero_id = Request { key: 0u64.to_le_bytes().to_vec(), ..add.clone() };
        assert!(matches!(Request::decode(&zero_id.to_bytes()), Err(DecodeError::Malformed(_))));
        let no_session = Request { client: 0, ..add };
        assert!(matches!(Request::decode(&no_session.to_bytes()), Err(DecodeError::Malformed(_))));
        let remove_with_value = Request::member(Op::RemoveMember, 5, 2, 3, b"x");
        assert!(matches!(Request::decode(&remove_with_value.to_bytes()), Err(DecodeError::Malformed(_))));
    }

    #[test]
    fn status_round_trips_and_a_bad_role_is_refused() {
        let members = vec![Member { id: 1, learner: false, addr: b"127.0.0.1:7001".to_vec() }, Member { id: 4, learner: true, addr: vec![] }];
        let st = StatusValue { id: 2, role: 2, term: 7, leader: 2, last_index: 90, commit: 89, applied: 88, members };
        assert_eq!(StatusValue::decode(&st.to_bytes()), Ok(st.clone()));
        let mut bad = st.to_bytes();
        bad[8] = 9;
        assert!(StatusValue::decode(&bad).is_err());
        assert!(StatusValue::decode(&bad[..10]).is_err());
        let req = Request { op: Op::Status, client: 0, seq: 0, key: vec![], value: vec![], expect: None };
        assert_eq!(Request::decode(&req.to_bytes()), Ok(req));
    }

    #[test]
    fn responses_round_trip_and_bad_ones_are_refused() {
        let refused = Refused::new(Refusal::Pending, "a change at index 9 is not applied");
        assert_eq!(Refused::decode(&refused.to_bytes()), Ok(refused));
        assert!(Refused::decode(&[0]).is_err());
        let r = Response { status: Status::CasFailed, leader: 3, index: 42, value: b"cur".to_vec() };
        let b = r.to_bytes();
        assert_eq!(Response::decode(&b), Ok(r));
        assert!(Response::decode(&b[..b.len() - 1]).is_err());
        let mut s = b.clone();
        s[0] = 77;
        assert!(Response::decode(&s).is_err());
    }
}
