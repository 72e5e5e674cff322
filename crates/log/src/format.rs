//! Byte layouts shared by both logs: header lines, head slots, entry
//! headers and the skip word. `docs/FORMAT.md` ("Logs") draws them.
//!
//! Invariants: every field is fixed-width little-endian; every multi-word
//! record that a crash can tear carries a CRC-32C seeded with the log's
//! nonce and is verified before it is interpreted; the skip word and the
//! extent words are single aligned 8 B stores and need no checksum.

pub use pmem::le::{get_u32, get_u64, put_u32, put_u64};
use pmem::Media;

use crate::error::OpenError;

/// Format version the append log writes and reads. Version 3 (this
/// build) changed the self-validating entry checksum to CRC-32C over the
/// payload's words mixed one by one ([`entry_crc`]): a plain CRC-32C is
/// blind to a torn entry whose stale bytes end in their own CRC-32C.
/// Version 2 added suffix truncation: the truncation record in the header
/// block's spare line, and the rotating tail as an XOR register. Older
/// append logs are refused with `OpenError::UnsupportedVersion`
/// (`docs/FORMAT.md`, "Versions").
pub const APPEND_FORMAT_VERSION: u32 = 3;
/// Format version the extent log writes and reads.
pub const EXTENT_FORMAT_VERSION: u32 = 1;
/// Every structure starts on an XPLine boundary.
pub const BASE_ALIGN: u64 = 256;
/// Bytes of the header block at `base` (header line, head slots, spare).
pub const HEADER_BLOCK_BYTES: u64 = 256;
/// Bytes of the header line proper.
pub const HEADER_LINE_BYTES: usize = 64;
/// Offset (from `base`) of the CRC in a header line; it covers `[0, 60)`.
const HEADER_CRC_AT: usize = 60;
/// Bytes of an entry header: LSN word, length, CRC.
pub const ENTRY_HEADER_BYTES: u64 = 16;
/// Bit 63 of an entry's first word marks a skip word (wrap to the next lap).
pub const SKIP_BIT: u64 = 1 << 63;
/// Largest logical position an append log's head may have, or an append
/// may start at (2^63: centuries of appends at any bandwidth). With the
/// capacity bound, `MAX_POS` plus two capacities fits in a `u64`.
pub const MAX_POS: u64 = 1 << 63;

/// `b"PMWAPLOG"`: an append log starts here.
pub const APPEND_MAGIC: u64 = u64::from_le_bytes(*b"PMWAPLOG");
/// `b"PMWXTLOG"`: an extent log starts here.
pub const EXTENT_MAGIC: u64 = u64::from_le_bytes(*b"PMWXTLOG");

/// The CRC seed of a log: CRC-32C of its nonce. Every checksum of the log
/// continues from it, so bytes of another log instance never validate.
pub fn crc_seed(nonce: u64) -> u32 {
    crc32c::crc32c(&nonce.to_le_bytes())
}

/// A fresh nonce for a new log (std's per-process random keys mixed with the clock).
pub fn fresh_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    hasher.write_u128(now.map(|d| d.as_nanos()).unwrap_or(0));
    hasher.finish()
}

/// Seals a header line: writes the CRC of `[0, 60)` at 60.
pub fn seal_header(line: &mut [u8; HEADER_LINE_BYTES]) {
    let crc = crc32c::crc32c(&line[..HEADER_CRC_AT]);
    put_u32(line, HEADER_CRC_AT, crc);
}

/// Reads the header line at `base` and checks magic, CRC and version
/// (`supported`), in that order.
pub fn read_header<M: Media>(
    media: &M,
    base: u64,
    magic: u64,
    expected: &'static str,
    supported: u32,
) -> Result<[u8; HEADER_LINE_BYTES], OpenError> {
    check_open_bounds(media, base)?;
    let mut line = [0u8; HEADER_LINE_BYTES];
    media.read(base, &mut line);
    let found = get_u64(&line, 0);
    if found != magic {
        return Err(OpenError::BadMagic { base, found, expected });
    }
    let stored = get_u32(&line, HEADER_CRC_AT);
    let computed = crc32c::crc32c(&line[..HEADER_CRC_AT]);
    if stored != computed {
        return Err(OpenError::HeaderChecksum { base, stored, computed });
    }
    let version = get_u32(&line, 8);
    if version != supported {
        return Err(OpenError::UnsupportedVersion { found: version, supported });
    }
    Ok(line)
}

/// Checks that a header block fits at an aligned `base`.
fn check_open_bounds<M: Media>(media: &M, base: u64) -> Result<(), OpenError> {
    if !base.is_multiple_of(BASE_ALIGN) {
        return Err(OpenError::Misaligned { base });
    }
    let fits = base.checked_add(HEADER_BLOCK_BYTES).is_some_and(|end| end <= media.len());
    if !fits {
        return Err(OpenError::MediaTooSmall { base, have: media.len() });
    }
    Ok(())
}

/// A persisted head: the first retained entry and where it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// LSN of the first retained entry.
    pub lsn: u64,
    /// Logical byte position of that entry (never wraps; physical is `pos % capacity`).
    pub pos: u64,
}

/// Bytes of a head slot record (LSN, position, CRC, reserved).
pub const HEAD_SLOT_BYTES: usize = 24;

/// Encodes a head slot: `lsn | pos | crc(seed; lsn, pos) | 0`.
pub fn encode_head(head: Head, seed: u32) -> [u8; HEAD_SLOT_BYTES] {
    let mut slot = [0u8; HEAD_SLOT_BYTES];
    put_u64(&mut slot, 0, head.lsn);
    put_u64(&mut slot, 8, head.pos);
    let crc = crc32c::crc32c_append(seed, &slot[..16]);
    put_u32(&mut slot, 16, crc);
    slot
}

/// Decodes a head slot, or `None` when its CRC fails (torn or never written).
pub fn decode_head(slot: &[u8; HEAD_SLOT_BYTES], seed: u32) -> Option<Head> {
    let crc = crc32c::crc32c_append(seed, &slot[..16]);
    if crc != get_u32(slot, 16) || get_u32(slot, 20) != 0 {
        return None;
    }
    Some(Head { lsn: get_u64(slot, 0), pos: get_u64(slot, 8) })
}

/// `b"PMWSUFTR"`: a suffix truncation of a self-validating log is in progress.
pub const TRUNCATION_MAGIC: u64 = u64::from_le_bytes(*b"PMWSUFTR");
/// Bytes of a truncation record (magic, three words, CRC, reserved).
pub const TRUNCATION_RECORD_BYTES: usize = 40;

/// A suffix truncation in progress: entries from `keep_lsn` on, which
/// start at `keep_pos`, are dropped, and `[keep_pos, end_pos)` is to be
/// scrubbed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// The first dropped LSN: the log's next LSN once done.
    pub keep_lsn: u64,
    /// Its logical position: the log's tail once done.
    pub keep_pos: u64,
    /// The tail before the truncation: the end of the dropped entries.
    pub end_pos: u64,
}

/// Encodes a truncation record: `magic | keep_lsn | keep_pos | end_pos | crc(seed; [0, 32)) | 0`.
pub fn encode_truncation(truncation: Truncation, seed: u32) -> [u8; TRUNCATION_RECORD_BYTES] {
    let mut record = [0u8; TRUNCATION_RECORD_BYTES];
    put_u64(&mut record, 0, TRUNCATION_MAGIC);
    put_u64(&mut record, 8, truncation.keep_lsn);
    put_u64(&mut record, 16, truncation.keep_pos);
    put_u64(&mut record, 24, truncation.end_pos);
    let crc = crc32c::crc32c_append(seed, &record[..32]);
    put_u32(&mut record, 32, crc);
    record
}

/// Decodes a truncation record, or `None` if none is in progress (magic
/// cleared, torn, never written, another log's).
pub fn decode_truncation(record: &[u8; TRUNCATION_RECORD_BYTES], seed: u32) -> Option<Truncation> {
    if get_u64(record, 0) != TRUNCATION_MAGIC {
        return None;
    }
    let crc = crc32c::crc32c_append(seed, &record[..32]);
    if crc != get_u32(record, 32) || get_u32(record, 36) != 0 {
        return None;
    }
    Some(Truncation { keep_lsn: get_u64(record, 8), keep_pos: get_u64(record, 16), end_pos: get_u64(record, 24) })
}

/// An entry header: `lsn | len | crc`.
pub type EntryHeader = [u8; ENTRY_HEADER_BYTES as usize];

/// Builds an entry header. `seed` is `Some` for self-validating logs,
/// whose CRC covers the LSN, the length and the payload.
///
/// Always inlined, so that the header is built in registers and stored
/// straight to the media by its caller: returned from a call, the 16 B
/// come back through a stack slot written by two 8 B stores, and the
/// caller's 16 B load of that slot cannot be forwarded from them; it
/// waits for every older store to commit, the payload's included.
#[inline(always)]
pub fn entry_header(lsn: u64, payload: &[u8], seed: Option<u32>) -> EntryHeader {
    let len = payload.len() as u32;
    let crc = match seed {
        Some(seed) => entry_crc(seed, lsn, len, payload),
        None => 0,
    };
    // Built in registers (lsn | len | crc, little-endian): no narrow stores
    // to a stack buffer that a wide load would then have to wait for.
    let high = u64::from(len) | u64::from(crc) << 32;
    (u128::from(lsn) | u128::from(high) << 64).to_le_bytes()
}

/// The entry checksum (format version 3): the CRC-32C (seeded) of
/// `lsn | len`, then of the payload taken as little-endian 8 B words (the
/// last zero-padded), each mixed by [`mix_word`] first. Out of line,
/// returning in a register.
///
/// Why mixed: CRC-32C is linear, and `CRC(M ‖ CRC(M))` is the same for
/// every `M` of a length, so a plain CRC-32C over a payload that ends in
/// its own CRC-32C (a Raft entry naming pool extents does) cannot tell it
/// from any other such payload of that length: a torn re-append that left
/// the new header and the old sealed bytes validated (`docs/FORMAT.md`,
/// "Entry checksum"). The mix is an odd multiply and a shift, not linear
/// over GF(2), so no layout of the payload cancels it.
#[inline(never)]
pub(crate) fn entry_crc(seed: u32, lsn: u64, len: u32, payload: &[u8]) -> u32 {
    const CHUNK: usize = 512;
    let mut crc = pmem::crc::crc32c_append_parts(seed, lsn, len, &[]);
    let mut mixed = [0u8; CHUNK];
    for chunk in payload.chunks(CHUNK) {
        let mut n = 0;
        for word in chunk.chunks(8) {
            let mut bytes = [0u8; 8];
            bytes[..word.len()].copy_from_slice(word);
            mixed[n..n + 8].copy_from_slice(&mix_word(u64::from_le_bytes(bytes)).to_le_bytes());
            n += 8;
        }
        crc = pmem::crc::crc32c_append(crc, &mixed[..n]);
    }
    crc
}

/// One payload word as the entry checksum takes it: multiplied by an odd
/// constant (a bijection), then its high half folded down.
#[inline(always)]
pub(crate) fn mix_word(word: u64) -> u64 {
    let x = word.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 29)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_slot_round_trips_and_rejects_tears() {
        let seed = crc_seed(42);
        let slot = encode_head(Head { lsn: 7, pos: 4096 }, seed);
        assert_eq!(decode_head(&slot, seed), Some(Head { lsn: 7, pos: 4096 }));
        let mut torn = slot;
        torn[8..16].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(decode_head(&torn, seed), None);
        assert_eq!(decode_head(&slot, crc_seed(43)), None);
        assert_eq!(decode_head(&[0; HEAD_SLOT_BYTES], seed), None);
    }

    #[test]
    fn truncation_record_round_trips_and_rejects_tears() {
        let seed = crc_seed(9);
        let truncation = Truncation { keep_lsn: 5, keep_pos: 320, end_pos: 1024 };
        let record = encode_truncation(truncation, seed);
        assert_eq!(decode_truncation(&record, seed), Some(truncation));
        assert_eq!(decode_truncation(&record, crc_seed(10)), None);
        let mut torn = record;
        torn[24..32].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(decode_truncation(&torn, seed), None);
        let mut cleared = record;
        cleared[..8].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(decode_truncation(&cleared, seed), None);
        assert_eq!(decode_truncation(&[0; TRUNCATION_RECORD_BYTES], seed), None);
    }

    #[test]
    fn magics_differ() {
        assert_ne!(APPEND_MAGIC, EXTENT_MAGIC);
        assert_eq!(APPEND_MAGIC & SKIP_BIT, 0);
    }
}
