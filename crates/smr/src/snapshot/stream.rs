//! A snapshot streamed out of band (as TiKV sends a region's snapshot
//! beside raft-rs's `MsgSnapshot`): raft-rs's message carries the
//! snapshot's metadata and a 48 B [`Descriptor`] naming its body; the
//! body goes before it as [`StreamChunk`]s read from the sender's store
//! as they are sent, and the receiver writes each verified chunk into its
//! store's staging area ([`crate::store::Durable::stage`]). The message
//! is stepped into Raft only once the staging area holds the whole body
//! and its checksum holds; the install then commits the staging area in
//! place. A receiver that holds a verified prefix of a body asks its
//! sender for the rest ([`Resume`]) instead of taking it again from zero.
//! No I/O here: encodings and their checks (`docs/FORMAT.md`, "Snapshot
//! streams").
//!
//! A body is named by [`BodyId`]: the snapshot's index and term, the
//! body's length and its CRC-32C (domain `PMWSNAPD`, the same value the
//! replica store keeps in its snapshot slot header, so a sender never
//! reads a body to name it).

use pmem::le::{get_u32, get_u64, put_u32, put_u64};

/// The body's checksum domain (the replica store's `PMWSNAPD`).
const BODY_DOMAIN: &[u8; 8] = b"PMWSNAPD";
/// The first eight bytes of a descriptor.
pub const DESCRIPTOR_MAGIC: [u8; 8] = *b"SMRSTRM1";
/// Bytes of an encoded descriptor.
pub const DESCRIPTOR_BYTES: usize = 48;
/// Bytes of a stream chunk's header.
pub const STREAM_HEADER_BYTES: usize = 48;
/// Bytes of a resume request.
pub const RESUME_BYTES: usize = 56;

/// A snapshot body's identity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BodyId {
    /// The snapshot's index.
    pub index: u64,
    /// The term of that index.
    pub term: u64,
    /// Bytes of the body.
    pub len: u64,
    /// [`body_crc`] of the body.
    pub crc: u32,
}

impl BodyId {
    /// The identity of `data`, a snapshot at `index`, `term`.
    pub fn of(index: u64, term: u64, data: &[u8]) -> BodyId {
        BodyId { index, term, len: data.len() as u64, crc: body_crc(data) }
    }

    fn put(&self, b: &mut [u8], at: usize) {
        put_u64(b, at, self.index);
        put_u64(b, at + 8, self.term);
        put_u64(b, at + 16, self.len);
        put_u32(b, at + 24, self.crc);
        put_u32(b, at + 28, 0);
    }

    /// The 32 B at `at` (its zero word checked).
    fn get(b: &[u8], at: usize) -> Option<BodyId> {
        (get_u32(b, at + 28) == 0).then(|| BodyId { index: get_u64(b, at), term: get_u64(b, at + 8), len: get_u64(b, at + 16), crc: get_u32(b, at + 24) })
    }
}

/// The checksum a body is named by (CRC-32C over `PMWSNAPD` and the body).
pub fn body_crc(data: &[u8]) -> u32 {
    body_crc_append(body_crc_start(), data)
}

/// The running checksum before any byte of a body.
pub fn body_crc_start() -> u32 {
    crc32c::crc32c(BODY_DOMAIN)
}

/// The running checksum `crc` after `more` bytes of the body.
pub fn body_crc_append(crc: u32, more: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, more)
}

/// What raft-rs's `Snapshot.data` holds for a streamed body.
pub type Descriptor = BodyId;

/// `magic | body (32 B) | crc32c of bytes 0..40 u32 | zero u32`.
pub fn encode_descriptor(body: &BodyId) -> Vec<u8> {
    let mut b = vec![0u8; DESCRIPTOR_BYTES];
    b[..8].copy_from_slice(&DESCRIPTOR_MAGIC);
    body.put(&mut b, 8);
    let crc = crc32c::crc32c(&b[..40]);
    put_u32(&mut b, 40, crc);
    b
}

/// A descriptor, if `data` is one (length, magic, checksum, zero words).
pub fn decode_descriptor(data: &[u8]) -> Option<Descriptor> {
    if data.len() != DESCRIPTOR_BYTES || data[..8] != DESCRIPTOR_MAGIC {
        return None;
    }
    if crc32c::crc32c(&data[..40]) != get_u32(data, 40) || get_u32(data, 44) != 0 {
        return None;
    }
    BodyId::get(data, 8)
}

/// One chunk of a body: bytes `offset..offset + bytes.len()`.
#[derive(Debug, PartialEq, Eq)]
pub struct StreamChunk<'a> {
    /// The body it belongs to.
    pub body: BodyId,
    /// Where its bytes go.
    pub offset: u64,
    /// The sending replica (a resume request goes back to it).
    pub from: u64,
    /// The bytes.
    pub bytes: &'a [u8],
}

/// The checksum of a chunk: its header without the checksum word, then
/// its bytes.
fn chunk_crc(b: &[u8]) -> u32 {
    let head = crc32c::crc32c_append(crc32c::crc32c(&b[..28]), &b[32..STREAM_HEADER_BYTES]);
    crc32c::crc32c_append(head, &b[STREAM_HEADER_BYTES..])
}

/// Encodes a chunk into `buf` (cleared first):
/// `index | term | length | body crc u32 | chunk crc u32 | offset | from | bytes`
/// (the body's zero word is the chunk's checksum here).
pub fn encode_chunk(body: &BodyId, offset: u64, from: u64, bytes: &[u8], buf: &mut Vec<u8>) {
    buf.clear();
    buf.resize(STREAM_HEADER_BYTES, 0);
    buf.extend_from_slice(bytes);
    seal_chunk(body, offset, from, buf);
}

/// Writes the header of a chunk whose bytes already follow its header's
/// place in `buf` (the sender reads them from its store straight there).
pub fn seal_chunk(body: &BodyId, offset: u64, from: u64, buf: &mut [u8]) {
    assert!(buf.len() >= STREAM_HEADER_BYTES, "room for the header");
    body.put(buf, 0);
    put_u64(buf, 32, offset);
    put_u64(buf, 40, from);
    let crc = chunk_crc(buf);
    put_u32(buf, 28, crc);
}

/// Why a chunk was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum ChunkError {
    /// Shorter than its header, or its checksum fails.
    Torn,
    /// Its bytes lie past its body's end.
    PastEnd,
}

/// Decodes a chunk: the checksum first, then its bounds.
pub fn decode_chunk(b: &[u8]) -> Result<StreamChunk<'_>, ChunkError> {
    if b.len() < STREAM_HEADER_BYTES || chunk_crc(b) != get_u32(b, 28) {
        return Err(ChunkError::Torn);
    }
    let body = BodyId { index: get_u64(b, 0), term: get_u64(b, 8), len: get_u64(b, 16), crc: get_u32(b, 24) };
    let (offset, from, bytes) = (get_u64(b, 32), get_u64(b, 40), &b[STREAM_HEADER_BYTES..]);
    match offset.checked_add(bytes.len() as u64) {
        Some(end) if end <= body.len => Ok(StreamChunk { body, offset, from, bytes }),
        _ => Err(ChunkError::PastEnd),
    }
}

/// A receiver's request for the rest of a body from `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resume {
    /// The body.
    pub body: BodyId,
    /// The asking replica.
    pub from: u64,
    /// Bytes it holds verified (the sender goes on from here).
    pub offset: u64,
}

impl Resume {
    /// `body (32 B) | from u64 | offset u64 | crc32c of bytes 0..48 u32 | zero u32`.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; RESUME_BYTES];
        self.body.put(&mut b, 0);
        put_u64(&mut b, 32, self.from);
        put_u64(&mut b, 40, self.offset);
        let crc = crc32c::crc32c(&b[..48]);
        put_u32(&mut b, 48, crc);
        b
    }

    /// Decodes a request (checksum, zero words, offset within the body).
    pub fn decode(b: &[u8]) -> Option<Resume> {
        if b.len() != RESUME_BYTES || crc32c::crc32c(&b[..48]) != get_u32(b, 48) || get_u32(b, 52) != 0 {
            return None;
        }
        let body = BodyId::get(b, 0)?;
        let (from, offset) = (get_u64(b, 32), get_u64(b, 40));
        (offset <= body.len).then_some(Resume { body, from, offset })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body() -> BodyId {
        BodyId::of(70, 3, b"snapshot body bytes")
    }

    #[test]
    fn the_running_checksum_is_the_whole_one() {
        let data = b"snapshot body bytes, in pieces";
        let mut crc = body_crc_start();
        for part in data.chunks(7) {
            crc = body_crc_append(crc, part);
        }
        assert_eq!(crc, body_crc(data));
        assert_ne!(body_crc(data), crc32c::crc32c(data), "the domain is part of it");
    }

    #[test]
    fn descriptors_round_trip_and_anything_else_is_not_one() {
        let d = encode_descriptor(&body());
        assert_eq!(decode_descriptor(&d), Some(body()));
        for at in [0, 8, 20, 39, 40, 44] {
            let mut bad = d.clone();
            bad[at] ^= 1;
            assert_eq!(decode_descriptor(&bad), None, "flipped byte {at}");
        }
        assert_eq!(decode_descriptor(&d[..47]), None);
        assert_eq!(decode_descriptor(b"SMRSNAP4 a whole snapshot body"), None);
    }

    #[test]
    fn chunks_round_trip_and_a_flipped_bit_or_an_overrun_is_refused() {
        let b = body();
        let mut buf = Vec::new();
        encode_chunk(&b, 5, 1, b"body ", &mut buf);
        assert_eq!(decode_chunk(&buf), Ok(StreamChunk { body: b, offset: 5, from: 1, bytes: b"body " }));
        for at in [0, 16, 24, 28, 32, 40, 47, 48, buf.len() - 1] {
            let mut bad = buf.clone();
            bad[at] ^= 1;
            assert_eq!(decode_chunk(&bad), Err(ChunkError::Torn), "flipped byte {at}");
        }
        encode_chunk(&b, b.len - 2, 1, b"abc", &mut buf);
        assert_eq!(decode_chunk(&buf), Err(ChunkError::PastEnd));
        encode_chunk(&b, u64::MAX, 1, b"abc", &mut buf);
        assert_eq!(decode_chunk(&buf), Err(ChunkError::PastEnd), "an offset that overflows");
        assert_eq!(decode_chunk(&buf[..40]), Err(ChunkError::Torn));
    }

    #[test]
    fn resume_requests_round_trip_and_are_bounded() {
        let r = Resume { body: body(), from: 4, offset: 9 };
        assert_eq!(Resume::decode(&r.encode()), Some(r));
        let mut bad = r.encode();
        bad[41] ^= 1;
        assert_eq!(Resume::decode(&bad), None);
        let past = Resume { offset: body().len + 1, ..r };
        assert_eq!(Resume::decode(&past.encode()), None, "an offset past the body");
    }
}
