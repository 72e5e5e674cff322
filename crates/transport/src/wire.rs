//! The bytes pmwire-transport itself puts on the wire (documented in
//! `docs/FORMAT.md` ("pmwire-transport wire formats")): the 24-byte prefix of every RPC active
//! message, and the encoded [`RegionDescriptor`]. Also the call window that
//! turns call ids back into caller tokens.
//!
//! Invariants:
//! - All integers are little-endian and fixed-width; nothing is `usize`.
//! - A decoder checks the magic, version and lengths before using a byte,
//!   and never trusts a length to allocate more than the caller's bound.
//! - A call id is `generation << 16 | slot` with `slot < MAX_WINDOW`; a slot's
//!   generation increases each time it is reused, so a late or duplicated
//!   response for an earlier use of the slot is recognised and dropped.
//! - Every message a sender puts on one connection (request, response or
//!   one-way message) carries the next number of that connection's sequence
//!   (`seq`, u32, wrapping); [`InOrder`] hands messages on in that order,
//!   whatever order their data finished arriving in (an eager message
//!   overtakes a rendezvous one in UCX).
//! - A message's `version` byte is the oldest format that reads it:
//!   requests and responses are unchanged since version 2 and say 2, so a
//!   version-2 peer still serves and calls; one-way messages say 3.

use crate::seam::RegionDescriptor;

/// The active-message id pmwire's RPC messages use.
pub const AM_ID: u16 = 0x5077; // "pw"

/// Bytes of framing before the user header in every RPC AM header.
pub const FRAMING_BYTES: usize = 24;

/// First byte of every prefix.
pub const MAGIC: u8 = 0xB7;

/// The newest prefix version this code writes and reads (3: one-way
/// messages, [`Kind::Message`]). Each message says the oldest version that
/// reads it ([`Kind::version`]): 2 for requests and responses, 3 for
/// messages.
pub const VERSION: u8 = 3;

/// The oldest prefix version this code reads (2: `seq` in bytes 12..16).
pub const MIN_VERSION: u8 = 2;

/// Most calls one connection may have in flight (slots are 16 bits wide, but
/// a receiver tracks this many per connection).
pub const MAX_WINDOW: usize = 256;

/// Largest user header the prefix can describe.
pub const MAX_USER_HEADER: usize = u16::MAX as usize;

/// Whether a message asks, answers, or neither.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A request (`call`).
    Request = 1,
    /// A response (`reply`).
    Response = 2,
    /// A one-way message (`send`): no call id (`call` is 0), no answer.
    Message = 3,
}

impl Kind {
    /// The version byte a message of this kind is written with: the oldest
    /// format that reads it.
    pub fn version(self) -> u8 {
        match self {
            Kind::Request | Kind::Response => 2,
            Kind::Message => 3,
        }
    }

    fn decode(byte: u8, version: u8) -> Result<Kind, DecodeError> {
        match byte {
            1 => Ok(Kind::Request),
            2 => Ok(Kind::Response),
            3 if version >= 3 => Ok(Kind::Message),
            _ => Err(DecodeError::Kind),
        }
    }
}

/// The decoded prefix of an RPC message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// Request or response.
    pub kind: Kind,
    /// Bytes of user header that follow the prefix in the AM header.
    pub header_len: u16,
    /// Bytes of payload (the AM data), as the sender declared it.
    pub payload_len: u32,
    /// The sender's number for this message on its connection (wrapping).
    pub seq: u32,
    /// The call id: `generation << 16 | slot`; 0 for a message.
    pub call: u64,
}

/// Why a prefix or descriptor did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the format needs.
    #[error("truncated")]
    Truncated,
    /// Wrong magic byte.
    #[error("bad magic")]
    Magic,
    /// A version this code does not read.
    #[error("unsupported version")]
    Version,
    /// An unknown message kind.
    #[error("unknown kind")]
    Kind,
    /// A length field disagrees with the bytes present or exceeds a bound.
    #[error("bad length")]
    Length,
    /// A message's `call` is not zero.
    #[error("a message's call id is not zero")]
    Reserved,
}

impl Prefix {
    /// Encodes the prefix (the framing, without the user header).
    pub fn encode(&self) -> [u8; FRAMING_BYTES] {
        let mut b = [0u8; FRAMING_BYTES];
        b[0] = MAGIC;
        b[1] = self.kind.version();
        b[2] = self.kind as u8;
        b[3] = 0;
        b[4..6].copy_from_slice(&self.header_len.to_le_bytes());
        b[6..8].copy_from_slice(&0u16.to_le_bytes());
        b[8..12].copy_from_slice(&self.payload_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.call.to_le_bytes());
        b
    }
}

/// Builds the AM header: prefix, call id, then the user header.
///
/// Layout (little-endian): magic u8, version u8, kind u8, reserved u8,
/// header_len u16, reserved u16, payload_len u32, seq u32, call u64,
/// then `header_len` bytes of user header. 24 bytes of framing in all.
/// A message's `call` must be 0.
pub fn encode_header(
    out: &mut Vec<u8>,
    kind: Kind,
    seq: u32,
    call: u64,
    user_header: &[u8],
    payload_len: usize,
) {
    assert!(user_header.len() <= MAX_USER_HEADER);
    assert!(payload_len <= u32::MAX as usize);
    assert!(kind != Kind::Message || call == 0, "a message has no call id");
    let prefix = Prefix {
        kind,
        header_len: user_header.len() as u16,
        payload_len: payload_len as u32,
        seq,
        call,
    };
    out.clear();
    out.extend_from_slice(&prefix.encode());
    out.extend_from_slice(user_header);
    assert_eq!(out.len(), FRAMING_BYTES + user_header.len());
}

/// Decodes an AM header into its prefix and user header, checking the
/// payload length against what arrived (`data_len`).
pub fn decode_header(am_header: &[u8], data_len: usize) -> Result<(Prefix, &[u8]), DecodeError> {
    let prefix = decode_prefix(am_header)?;
    if am_header.len() != FRAMING_BYTES + prefix.header_len as usize {
        return Err(DecodeError::Length);
    }
    if prefix.payload_len as usize != data_len {
        return Err(DecodeError::Length);
    }
    Ok((prefix, &am_header[FRAMING_BYTES..]))
}

/// Decodes the first [`FRAMING_BYTES`] of `bytes` as a prefix: magic,
/// version, kind, and a message's zero call id. The lengths it declares are
/// the caller's to check (against what arrived, or, on a byte stream, the
/// bounds before reading that many bytes).
pub fn decode_prefix(bytes: &[u8]) -> Result<Prefix, DecodeError> {
    if bytes.len() < FRAMING_BYTES {
        return Err(DecodeError::Truncated);
    }
    if bytes[0] != MAGIC {
        return Err(DecodeError::Magic);
    }
    let version = bytes[1];
    if !(MIN_VERSION..=VERSION).contains(&version) {
        return Err(DecodeError::Version);
    }
    let kind = Kind::decode(bytes[2], version)?;
    let header_len = u16::from_le_bytes([bytes[4], bytes[5]]);
    let payload_len = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    let seq = u32::from_le_bytes(bytes[12..16].try_into().unwrap());
    let call = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    if kind == Kind::Message && call != 0 {
        return Err(DecodeError::Reserved);
    }
    Ok(Prefix {
        kind,
        header_len,
        payload_len,
        seq,
        call,
    })
}

/// Magic of an encoded region descriptor ("PWRD").
pub const DESCRIPTOR_MAGIC: u32 = 0x4452_5750;

/// Bytes before the rkey in an encoded descriptor.
pub const DESCRIPTOR_FIXED_BYTES: usize = 24;

/// Largest packed rkey a descriptor may carry.
pub const MAX_RKEY_BYTES: usize = 4096;

impl RegionDescriptor {
    /// Encodes: magic u32 ("PWRD"), rkey_len u32, addr u64, len u64, rkey bytes.
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.rkey.len() <= MAX_RKEY_BYTES);
        let mut out = Vec::with_capacity(DESCRIPTOR_FIXED_BYTES + self.rkey.len());
        out.extend_from_slice(&DESCRIPTOR_MAGIC.to_le_bytes());
        out.extend_from_slice(&(self.rkey.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.addr.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.rkey);
        out
    }

    /// Decodes what [`RegionDescriptor::encode`] wrote; the whole slice must
    /// be the descriptor.
    pub fn decode(bytes: &[u8]) -> Result<RegionDescriptor, DecodeError> {
        if bytes.len() < DESCRIPTOR_FIXED_BYTES {
            return Err(DecodeError::Truncated);
        }
        if u32::from_le_bytes(bytes[0..4].try_into().unwrap()) != DESCRIPTOR_MAGIC {
            return Err(DecodeError::Magic);
        }
        let rkey_len = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
        if rkey_len > MAX_RKEY_BYTES || bytes.len() != DESCRIPTOR_FIXED_BYTES + rkey_len {
            return Err(DecodeError::Length);
        }
        let addr = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
        let len = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
        if addr.checked_add(len).is_none() {
            return Err(DecodeError::Length);
        }
        Ok(RegionDescriptor {
            addr,
            len,
            rkey: bytes[DESCRIPTOR_FIXED_BYTES..].to_vec(),
        })
    }
}

/// The call slots of one connection: which token each in-flight call (or
/// one-sided operation) belongs to, and which slots unsettled one-way sends
/// hold (they have no token and produce no completion). Bounded by the
/// window; O(1) to take and to free.
pub(crate) struct Window {
    slots: Vec<Slot>,
    free: Vec<u16>,
    in_flight: usize,
}

#[derive(Clone, Copy)]
struct Slot {
    generation: u64,
    held: Held,
}

/// What holds a slot.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    Free,
    /// A call or one-sided operation, with its caller's token.
    Op(u64),
    /// A one-way send until it is settled.
    Send,
}

impl Window {
    pub(crate) fn new(window: usize) -> Window {
        assert!((1..=MAX_WINDOW).contains(&window));
        Window {
            slots: vec![
                Slot {
                    generation: 0,
                    held: Held::Free,
                };
                window
            ],
            free: (0..window as u16).rev().collect(),
            in_flight: 0,
        }
    }

    /// Takes a slot for `token`; returns the call id, or `None` if full.
    pub(crate) fn take(&mut self, token: u64) -> Option<u64> {
        self.hold(Held::Op(token))
    }

    /// Takes a slot for a one-way send; its id, or `None` if full.
    pub(crate) fn take_send(&mut self) -> Option<u64> {
        self.hold(Held::Send)
    }

    fn hold(&mut self, held: Held) -> Option<u64> {
        let slot = self.free.pop()?;
        let s = &mut self.slots[slot as usize];
        assert!(s.held == Held::Free);
        s.generation += 1;
        assert!(s.generation < (1 << 48));
        s.held = held;
        self.in_flight += 1;
        Some(s.generation << 16 | slot as u64)
    }

    /// Frees the slot of `call` if it is still that call's (an operation's,
    /// not a send's); returns its token.
    pub(crate) fn finish(&mut self, call: u64) -> Option<u64> {
        match self.current(call)? {
            Held::Op(token) => {
                self.release(call);
                Some(token)
            }
            Held::Free | Held::Send => None,
        }
    }

    /// Frees the slot of send `call` if it still holds it; whether it did.
    pub(crate) fn finish_send(&mut self, call: u64) -> bool {
        let held = self.current(call) == Some(Held::Send);
        if held {
            self.release(call);
        }
        held
    }

    /// What holds the slot of `call`, if it is still of that generation.
    fn current(&self, call: u64) -> Option<Held> {
        let s = self.slots.get((call & 0xffff) as usize)?;
        (s.generation == call >> 16).then_some(s.held)
    }

    fn release(&mut self, call: u64) {
        let slot = (call & 0xffff) as usize;
        assert!(self.slots[slot].held != Held::Free);
        self.slots[slot].held = Held::Free;
        self.free.push(slot as u16);
        self.in_flight -= 1;
        assert!(self.in_flight <= self.slots.len());
    }

    /// Frees every slot, returning the (call, token) pairs of the operations
    /// in flight (sends' slots are freed silently: they have no completion).
    pub(crate) fn drain(&mut self) -> Vec<(u64, u64)> {
        let mut out = Vec::with_capacity(self.in_flight);
        for slot in 0..self.slots.len() {
            let call = self.slots[slot].generation << 16 | slot as u64;
            if let Some(token) = self.finish(call) {
                out.push((call, token));
            } else {
                self.finish_send(call);
            }
        }
        assert_eq!(self.in_flight, 0);
        out
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Slots free (sends or calls that would be taken now).
    pub(crate) fn free(&self) -> usize {
        self.free.len()
    }
}

/// The receiver's record of which request slots of one peer await a reply:
/// a request for a slot already awaiting one (or out of range) breaks the
/// protocol and is dropped.
pub(crate) struct Answering {
    pending: Vec<Option<u64>>,
}

impl Answering {
    pub(crate) fn new() -> Answering {
        Answering {
            pending: vec![None; MAX_WINDOW],
        }
    }

    /// Records an arriving request; false if it must be dropped.
    pub(crate) fn arrive(&mut self, call: u64) -> bool {
        let slot = (call & 0xffff) as usize;
        match self.pending.get_mut(slot) {
            Some(p @ None) => {
                *p = Some(call);
                true
            }
            _ => false,
        }
    }

    /// Records a reply; false if no such request awaits one.
    pub(crate) fn answer(&mut self, call: u64) -> bool {
        let slot = (call & 0xffff) as usize;
        match self.pending.get_mut(slot) {
            Some(p) if *p == Some(call) => {
                *p = None;
                true
            }
            _ => false,
        }
    }
}

/// How far ahead of the next message to hand on an arriving one may be.
/// A peer has at most [`MAX_WINDOW`] requests unanswered (later ones break
/// the protocol) and we at most [`MAX_WINDOW`] calls awaiting responses, so
/// an honest peer stays within twice that; further is a protocol violation.
pub const MAX_REORDER: usize = 2 * MAX_WINDOW;

/// Why an arriving message's `seq` breaks the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OrderViolation {
    /// Already handed on, or further ahead than [`MAX_REORDER`].
    OutOfRange,
    /// A message with this number is already here.
    Duplicate,
}

/// The receiving side of one connection's message order: the sender numbers
/// its messages (`seq`), and [`InOrder::pop`] hands them on in that order,
/// holding back any that became ready before an earlier one (a small eager
/// message behind a large rendezvous one). Bounded by [`MAX_REORDER`].
pub(crate) struct InOrder<T> {
    /// The number of the message [`InOrder::pop`] hands on next.
    next: u32,
    /// `slots[i]` is message `next + i`.
    slots: std::collections::VecDeque<Arrived<T>>,
}

enum Arrived<T> {
    /// Not here yet.
    Missing,
    /// Announced; its data is still being received.
    Receiving,
    /// Whole (or failed), waiting for its turn.
    Ready(T),
}

impl<T> InOrder<T> {
    pub(crate) fn new() -> InOrder<T> {
        InOrder {
            next: 0,
            slots: std::collections::VecDeque::new(),
        }
    }

    /// Records that message `seq` arrived and its data is being received.
    pub(crate) fn arrive(&mut self, seq: u32) -> Result<(), OrderViolation> {
        let ahead = seq.wrapping_sub(self.next) as usize;
        if ahead >= MAX_REORDER {
            return Err(OrderViolation::OutOfRange);
        }
        while self.slots.len() <= ahead {
            self.slots.push_back(Arrived::Missing);
        }
        let slot = &mut self.slots[ahead];
        if !matches!(slot, Arrived::Missing) {
            return Err(OrderViolation::Duplicate);
        }
        *slot = Arrived::Receiving;
        Ok(())
    }

    /// Message `seq` arrived whole: `Ok(true)` if it is the next one and
    /// nothing waits (hand it on now: the common case, nothing recorded);
    /// otherwise it is recorded as [`InOrder::arrive`] does, and the caller
    /// makes it [`ready`](InOrder::ready).
    pub(crate) fn pass(&mut self, seq: u32) -> Result<bool, OrderViolation> {
        if self.slots.is_empty() && seq == self.next {
            self.next = self.next.wrapping_add(1);
            return Ok(true);
        }
        self.arrive(seq).map(|()| false)
    }

    /// Message `seq` (announced with [`InOrder::arrive`]) is whole.
    pub(crate) fn ready(&mut self, seq: u32, message: T) {
        let ahead = seq.wrapping_sub(self.next) as usize;
        let slot = self.slots.get_mut(ahead).expect("ready after arrive");
        assert!(matches!(slot, Arrived::Receiving), "message {seq} made ready twice");
        *slot = Arrived::Ready(message);
    }

    /// The next message in the sender's order, if it is whole.
    pub(crate) fn pop(&mut self) -> Option<T> {
        if !matches!(self.slots.front(), Some(Arrived::Ready(_))) {
            return None;
        }
        let Some(Arrived::Ready(message)) = self.slots.pop_front() else {
            unreachable!("checked above")
        };
        self.next = self.next.wrapping_add(1);
        Some(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_damage() {
        let mut h = Vec::new();
        encode_header(&mut h, Kind::Request, 0xfeed_0001, 7 << 16 | 3, b"hello", 100);
        assert_eq!(h.len(), FRAMING_BYTES + 5);
        let (p, user) = decode_header(&h, 100).unwrap();
        assert_eq!(p.kind, Kind::Request);
        assert_eq!(p.seq, 0xfeed_0001);
        assert_eq!(p.call, 7 << 16 | 3);
        assert_eq!(user, b"hello");
        assert_eq!(decode_header(&h, 99), Err(DecodeError::Length));
        assert_eq!(
            decode_header(&h[..FRAMING_BYTES + 4], 100),
            Err(DecodeError::Length)
        );
        assert_eq!(decode_header(&h[..10], 100), Err(DecodeError::Truncated));
        let mut bad = h.clone();
        bad[0] ^= 1;
        assert_eq!(decode_header(&bad, 100), Err(DecodeError::Magic));
        let mut bad = h.clone();
        bad[1] = 9;
        assert_eq!(decode_header(&bad, 100), Err(DecodeError::Version));
        let mut bad = h;
        bad[2] = 3;
        assert_eq!(decode_header(&bad, 100), Err(DecodeError::Kind));
    }

    #[test]
    fn messages_say_version_3_and_requests_and_responses_still_say_2() {
        let mut h = Vec::new();
        encode_header(&mut h, Kind::Message, 9, 0, b"raft", 4096);
        assert_eq!(h[1], 3);
        let (p, user) = decode_header(&h, 4096).unwrap();
        assert_eq!((p.kind, p.seq, p.call), (Kind::Message, 9, 0));
        assert_eq!(user, b"raft");
        // A version-2 peer's view: kind 3 is unknown in version 2.
        let mut v2 = h.clone();
        v2[1] = 2;
        assert_eq!(decode_header(&v2, 4096), Err(DecodeError::Kind));
        let mut called = h.clone();
        called[16] = 1;
        assert_eq!(decode_header(&called, 4096), Err(DecodeError::Reserved));
        for kind in [Kind::Request, Kind::Response] {
            encode_header(&mut h, kind, 1, 1 << 16, b"", 0);
            assert_eq!(h[1], 2, "{kind:?} is written as version 2, readable by version-2 peers");
            assert_eq!(decode_header(&h, 0).unwrap().0.kind, kind);
            let mut v3 = h.clone();
            v3[1] = 3;
            assert_eq!(decode_header(&v3, 0).unwrap().0.kind, kind, "version 3 reads it too");
        }
        for version in [0, 1, 4] {
            let mut bad = h.clone();
            bad[1] = version;
            assert_eq!(decode_header(&bad, 0), Err(DecodeError::Version));
        }
        let mut bad = h;
        bad[1] = 3;
        bad[2] = 4;
        assert_eq!(decode_header(&bad, 0), Err(DecodeError::Kind));
    }

    #[test]
    fn window_sends_hold_slots_without_tokens() {
        let mut w = Window::new(3);
        let op = w.take(7).unwrap();
        let send = w.take_send().unwrap();
        let other = w.take_send().unwrap();
        assert!(w.take(8).is_none(), "sends count against the window");
        assert!(w.take_send().is_none());
        assert_eq!(w.in_flight, 3);
        assert_eq!(w.finish(send), None, "a response naming a send's slot frees nothing");
        assert!(!w.finish_send(op), "a send's release never frees an operation");
        assert!(w.finish_send(send));
        assert!(!w.finish_send(send), "released once");
        assert_eq!(w.in_flight, 2);
        assert_eq!(w.drain(), vec![(op, 7)], "only operations complete; sends go silently");
        assert_eq!(w.in_flight, 0);
        assert!(!w.finish_send(other), "drained");
    }

    #[test]
    fn descriptor_round_trips_and_rejects_damage() {
        let d = RegionDescriptor {
            addr: 0x7f00_0000_1000,
            len: 1 << 20,
            rkey: vec![1, 2, 3, 4, 5],
        };
        let bytes = d.encode();
        assert_eq!(bytes.len(), DESCRIPTOR_FIXED_BYTES + 5);
        assert_eq!(RegionDescriptor::decode(&bytes).unwrap(), d);
        assert_eq!(
            RegionDescriptor::decode(&bytes[..bytes.len() - 1]),
            Err(DecodeError::Length)
        );
        assert_eq!(
            RegionDescriptor::decode(&bytes[..8]),
            Err(DecodeError::Truncated)
        );
        let mut bad = bytes.clone();
        bad[0] ^= 1;
        assert_eq!(RegionDescriptor::decode(&bad), Err(DecodeError::Magic));
        let mut bad = bytes;
        bad[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(RegionDescriptor::decode(&bad), Err(DecodeError::Length));
    }

    #[test]
    fn window_is_bounded_and_rejects_stale_ids() {
        let mut w = Window::new(2);
        let a = w.take(10).unwrap();
        let b = w.take(11).unwrap();
        assert!(w.take(12).is_none());
        assert_eq!(w.finish(a), Some(10));
        assert_eq!(w.finish(a), None, "a duplicate response is dropped");
        let c = w.take(13).unwrap();
        assert_eq!(c & 0xffff, a & 0xffff, "the slot is reused");
        assert_eq!(w.finish(a), None, "a stale id for a reused slot is dropped");
        let mut left = w.drain();
        left.sort();
        assert_eq!(left.iter().map(|x| x.1).collect::<Vec<_>>(), {
            let mut v = vec![11, 13];
            v.sort_by_key(|t| if *t == 11 { b } else { c });
            v
        });
        assert_eq!(w.in_flight, 0);
    }

    #[test]
    fn answering_drops_protocol_violations() {
        let mut a = Answering::new();
        assert!(a.arrive(1 << 16 | 5));
        assert!(!a.arrive(2 << 16 | 5), "slot 5 already awaits a reply");
        assert!(!a.arrive(1 << 16 | MAX_WINDOW as u64), "slot out of range");
        assert!(!a.answer(2 << 16 | 5));
        assert!(a.answer(1 << 16 | 5));
        assert!(!a.answer(1 << 16 | 5), "answered once");
    }

    #[test]
    fn in_order_holds_back_what_overtook_an_earlier_message() {
        let mut order = InOrder::new();
        order.arrive(0).unwrap(); // a rendezvous message, still receiving
        order.arrive(1).unwrap();
        order.ready(1, "small");
        assert_eq!(order.pop(), None, "message 1 waits for message 0");
        order.ready(0, "large");
        assert_eq!(order.pop(), Some("large"));
        assert_eq!(order.pop(), Some("small"));
        assert_eq!(order.pop(), None);
        // Arrivals out of order (2 before ... none missing after) and a gap.
        order.arrive(3).unwrap();
        order.ready(3, "three");
        assert_eq!(order.pop(), None, "message 2 has not arrived");
        order.arrive(2).unwrap();
        order.ready(2, "two");
        assert_eq!(order.pop(), Some("two"));
        assert_eq!(order.pop(), Some("three"));
    }

    #[test]
    fn in_order_refuses_duplicates_old_numbers_and_runaways() {
        let mut order = InOrder::new();
        order.arrive(0).unwrap();
        assert_eq!(order.arrive(0), Err(OrderViolation::Duplicate));
        order.ready(0, ());
        assert_eq!(order.pop(), Some(()));
        assert_eq!(order.arrive(0), Err(OrderViolation::OutOfRange), "already handed on");
        assert_eq!(order.arrive(MAX_REORDER as u32 + 1), Err(OrderViolation::OutOfRange));
        order.arrive(MAX_REORDER as u32).unwrap();
    }

    #[test]
    fn in_order_hands_on_at_once_only_the_next_message_with_nothing_waiting() {
        let mut order = InOrder::new();
        assert_eq!(order.pass(0), Ok(true));
        assert_eq!(order.pass(1), Ok(true));
        order.arrive(2).unwrap(); // a rendezvous message, receiving
        assert_eq!(order.pass(3), Ok(false), "3 waits behind 2");
        order.ready(3, "three");
        assert_eq!(order.pass(3), Err(OrderViolation::Duplicate));
        assert_eq!(order.pass(1), Err(OrderViolation::OutOfRange), "already handed on");
        order.ready(2, "two");
        assert_eq!(order.pop(), Some("two"));
        assert_eq!(order.pop(), Some("three"));
        assert_eq!(order.pass(4), Ok(true), "nothing waits again");
    }

    #[test]
    fn in_order_wraps_around_u32() {
        let mut order = InOrder::new();
        order.next = u32::MAX - 1;
        for seq in [u32::MAX, u32::MAX - 1, 0, 1] {
            order.arrive(seq).unwrap();
        }
        for seq in [1, 0, u32::MAX, u32::MAX - 1] {
            order.ready(seq, seq);
        }
        let got: Vec<u32> = std::iter::from_fn(|| order.pop()).collect();
        assert_eq!(got, [u32::MAX - 1, u32::MAX, 0, 1]);
    }
}
