//! [`DualRecord`]: a failure-atomic small record (up to
//! [`MAX_PAYLOAD_BYTES`]) in two checksummed 64 B slots, for state that
//! must change as a whole: Raft's hard state (term, vote, commit), a
//! configuration word pair. `docs/FORMAT.md` ("Dual record") draws the slot
//! and gives the crash analysis.
//!
//! Invariants, kept by every method:
//! - the slot at `base + 64 * newest` holds the newest record, durable,
//!   with sequence `seq`; the other slot holds an older record, nothing
//!   valid, or (only while `store` runs) the record being written;
//! - `store` writes only the slot that does *not* hold the newest record,
//!   and returns only after that slot is flushed and drained, so at most
//!   one slot is ever in flight and the newest durable record is never
//!   overwritten;
//! - nothing read from the media is believed before its CRC-32C, its
//!   reserved bytes and its bounds are checked.

use thiserror::Error;

use crate::le::{get_u32, get_u64, put_u32, put_u64};
use crate::media::Media;
use crate::LINE;

/// Largest payload a record holds.
pub const MAX_PAYLOAD_BYTES: usize = 40;
/// Bytes of one slot (one cache line).
const SLOT_BYTES: usize = LINE;
/// Offset of the payload in a slot.
const PAYLOAD_AT: usize = 16;
/// Offset of the reserved word after the payload.
const RESERVED_AT: usize = PAYLOAD_AT + MAX_PAYLOAD_BYTES;
/// Offset of the CRC; it covers `[0, CRC_AT)`.
const CRC_AT: usize = 60;
/// Domain of the checksum: bytes of another structure never validate.
const DOMAIN: &[u8; 8] = b"PMWDUALR";

/// Planted bugs for the crash checker's canaries. Never set outside tests.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordFaults {
    /// `store` writes its slot and drains, but never flushes it.
    pub skip_flush: bool,
}

/// Why `format` refused. Nothing was written.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RecordFormatError {
    /// `base` is not a multiple of 64 B.
    #[error("dual record base {base} is not a multiple of 64 B")]
    Misaligned {
        /// The offending base.
        base: u64,
    },
    /// The two slots do not fit in the media.
    #[error("dual record at {base} needs 128 B; media has {have} B")]
    OutOfBounds {
        /// Where the record would start.
        base: u64,
        /// The media's size.
        have: u64,
    },
    /// The initial payload is too long.
    #[error("payload of {len} B exceeds the dual record's {MAX_PAYLOAD_BYTES} B")]
    TooLarge {
        /// The payload's length.
        len: usize,
    },
}

/// Why `open` found no record.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RecordOpenError {
    /// `base` is not a multiple of 64 B.
    #[error("dual record base {base} is not a multiple of 64 B")]
    Misaligned {
        /// The offending base.
        base: u64,
    },
    /// The two slots do not fit in the media.
    #[error("dual record at {base} needs 128 B; media has {have} B")]
    OutOfBounds {
        /// Where the record would start.
        base: u64,
        /// The media's size.
        have: u64,
    },
    /// Neither slot holds a valid record (never formatted, or corrupted:
    /// no crash leaves this, since `store` never touches the newest slot).
    #[error("no valid dual record at {base}")]
    NoValidSlot {
        /// Where the record starts.
        base: u64,
    },
    /// Both slots are valid with the same sequence: no sequence of stores
    /// produces this (each store takes the next number), so the media is corrupt.
    #[error("both slots of the dual record at {base} carry sequence {seq}")]
    SameSequence {
        /// Where the record starts.
        base: u64,
        /// The sequence both carry.
        seq: u64,
    },
}

/// Why `store` refused. Nothing was written.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RecordStoreError {
    /// The payload is too long.
    #[error("payload of {len} B exceeds the dual record's {MAX_PAYLOAD_BYTES} B")]
    TooLarge {
        /// The payload's length.
        len: usize,
    },
    /// The sequence is at `u64::MAX` (only a slot planted on the media gets there).
    #[error("dual record sequence exhausted")]
    SequenceExhausted,
}

/// A failure-atomic record of up to [`MAX_PAYLOAD_BYTES`] in two slots.
///
/// ```
/// use pmem::{DualRecord, MemMedia};
/// let mut media = MemMedia::new(4096);
/// let mut hard_state = DualRecord::format(&mut media, 128, &[0; 24]).unwrap();
/// hard_state.store(&mut media, &[1; 24]).unwrap(); // durable on return
/// let reopened = DualRecord::open(&media, 128).unwrap();
/// assert_eq!(reopened.payload(), &[1; 24]);
/// ```
#[derive(Clone, Debug)]
pub struct DualRecord {
    base: u64,
    seq: u64,
    newest: usize,
    len: usize,
    payload: [u8; MAX_PAYLOAD_BYTES],
    faults: RecordFaults,
}

impl DualRecord {
    /// Media bytes a record occupies at its base (two 64 B slots).
    pub const SIZE: u64 = 2 * SLOT_BYTES as u64;

    /// Formats a record at `base` (a multiple of 64) holding `payload` at
    /// sequence 1, in slot 0, and clears slot 1; both are durable when it
    /// returns. Formatting is not failure-atomic with respect to bytes of
    /// an older record at `base`: a structure that embeds a record marks
    /// itself formatted only afterwards (as the logs write their header last).
    pub fn format<M: Media>(media: &mut M, base: u64, payload: &[u8]) -> Result<DualRecord, RecordFormatError> {
        if !base.is_multiple_of(SLOT_BYTES as u64) {
            return Err(RecordFormatError::Misaligned { base });
        }
        if base.checked_add(DualRecord::SIZE).is_none_or(|end| end > media.len()) {
            return Err(RecordFormatError::OutOfBounds { base, have: media.len() });
        }
        if payload.len() > MAX_PAYLOAD_BYTES {
            return Err(RecordFormatError::TooLarge { len: payload.len() });
        }
        media.write(base, &encode_slot(1, payload));
        media.write(base + SLOT_BYTES as u64, &[0; SLOT_BYTES]);
        media.persist(base, DualRecord::SIZE);
        Ok(DualRecord::holding(base, 1, 0, payload))
    }

    /// Recovers the record at `base`: the valid slot with the higher sequence.
    pub fn open<M: Media>(media: &M, base: u64) -> Result<DualRecord, RecordOpenError> {
        if !base.is_multiple_of(SLOT_BYTES as u64) {
            return Err(RecordOpenError::Misaligned { base });
        }
        if base.checked_add(DualRecord::SIZE).is_none_or(|end| end > media.len()) {
            return Err(RecordOpenError::OutOfBounds { base, have: media.len() });
        }
        let read = |index: usize| {
            let mut slot = [0u8; SLOT_BYTES];
            media.read(base + (index * SLOT_BYTES) as u64, &mut slot);
            decode_slot(&slot).map(|(seq, len)| (seq, len, slot))
        };
        let newest = match (read(0), read(1)) {
            (None, None) => return Err(RecordOpenError::NoValidSlot { base }),
            (Some(a), Some(b)) if a.0 == b.0 => return Err(RecordOpenError::SameSequence { base, seq: a.0 }),
            (Some(a), Some(b)) if a.0 > b.0 => (0, a),
            (_, Some(b)) => (1, b),
            (Some(a), None) => (0, a),
        };
        let (index, (seq, len, slot)) = newest;
        Ok(DualRecord::holding(base, seq, index, &slot[PAYLOAD_AT..PAYLOAD_AT + len]))
    }

    /// The same record with planted bugs (tests only).
    #[doc(hidden)]
    pub fn with_faults(mut self, faults: RecordFaults) -> DualRecord {
        self.faults = faults;
        self
    }

    /// Durably replaces the payload: writes the slot not holding the newest
    /// record with the next sequence, flushes it and drains, then returns.
    /// A crash before it returns leaves the old payload or the new one.
    pub fn store<M: Media>(&mut self, media: &mut M, payload: &[u8]) -> Result<(), RecordStoreError> {
        if payload.len() > MAX_PAYLOAD_BYTES {
            return Err(RecordStoreError::TooLarge { len: payload.len() });
        }
        let seq = self.seq.checked_add(1).ok_or(RecordStoreError::SequenceExhausted)?;
        let target = 1 - self.newest;
        let at = self.base + (target * SLOT_BYTES) as u64;
        media.write(at, &encode_slot(seq, payload));
        if !self.faults.skip_flush {
            media.flush(at, SLOT_BYTES as u64);
        }
        media.drain();
        self.seq = seq;
        self.newest = target;
        self.remember(payload);
        Ok(())
    }

    /// The newest payload.
    pub fn payload(&self) -> &[u8] {
        &self.payload[..self.len]
    }

    /// The newest record's sequence number (1 after `format`, one more per store).
    pub fn sequence(&self) -> u64 {
        self.seq
    }

    /// Where the record starts in its media.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The live form of a record whose newest slot `newest` holds `payload` at `seq`.
    fn holding(base: u64, seq: u64, newest: usize, payload: &[u8]) -> DualRecord {
        let faults = RecordFaults::default();
        let mut record = DualRecord { base, seq, newest, len: 0, payload: [0; MAX_PAYLOAD_BYTES], faults };
        record.remember(payload);
        record
    }

    fn remember(&mut self, payload: &[u8]) {
        assert!(payload.len() <= MAX_PAYLOAD_BYTES, "payload checked by the caller");
        self.payload = [0; MAX_PAYLOAD_BYTES];
        self.payload[..payload.len()].copy_from_slice(payload);
        self.len = payload.len();
    }
}

/// The CRC of a slot's first 60 bytes, in the record's domain.
fn slot_crc(slot: &[u8; SLOT_BYTES]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(DOMAIN), &slot[..CRC_AT])
}

/// A slot: `seq | len | 0 | payload (zero-padded to 40 B) | 0 | crc`.
fn encode_slot(seq: u64, payload: &[u8]) -> [u8; SLOT_BYTES] {
    assert!(seq >= 1, "sequence 0 marks no record");
    assert!(payload.len() <= MAX_PAYLOAD_BYTES, "payload checked by the caller");
    let mut slot = [0u8; SLOT_BYTES];
    put_u64(&mut slot, 0, seq);
    put_u32(&mut slot, 8, payload.len() as u32);
    slot[PAYLOAD_AT..PAYLOAD_AT + payload.len()].copy_from_slice(payload);
    let crc = slot_crc(&slot);
    put_u32(&mut slot, CRC_AT, crc);
    debug_assert_eq!(decode_slot(&slot), Some((seq, payload.len())));
    slot
}

/// `(seq, len)` of a valid slot: CRC first, then every field and the
/// reserved and padding bytes; `None` if anything is off (torn, never written).
fn decode_slot(slot: &[u8; SLOT_BYTES]) -> Option<(u64, usize)> {
    if slot_crc(slot) != get_u32(slot, CRC_AT) {
        return None;
    }
    let seq = get_u64(slot, 0);
    let len = get_u32(slot, 8) as usize;
    if seq == 0 || len > MAX_PAYLOAD_BYTES || get_u32(slot, 12) != 0 || get_u32(slot, RESERVED_AT) != 0 {
        return None;
    }
    if slot[PAYLOAD_AT + len..RESERVED_AT].iter().any(|&b| b != 0) {
        return None;
    }
    Some((seq, len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::MemMedia;

    #[test]
    fn stores_alternate_slots_and_reopen_finds_the_newest() {
        let mut media = MemMedia::new(512);
        let mut record = DualRecord::format(&mut media, 64, b"zero").unwrap();
        for i in 0u8..5 {
            let payload = vec![i; i as usize * 9];
            record.store(&mut media, &payload).unwrap();
            assert_eq!(record.sequence(), 2 + i as u64);
            let reopened = DualRecord::open(&media, 64).unwrap();
            assert_eq!(reopened.payload(), &payload[..]);
            assert_eq!(reopened.sequence(), record.sequence());
        }
        // Storing after a reopen keeps going from the newest.
        let mut reopened = DualRecord::open(&media, 64).unwrap();
        reopened.store(&mut media, b"after").unwrap();
        assert_eq!(DualRecord::open(&media, 64).unwrap().payload(), b"after");
    }

    #[test]
    fn torn_slot_falls_back_to_the_other() {
        let mut media = MemMedia::new(256);
        let mut record = DualRecord::format(&mut media, 0, b"old").unwrap();
        record.store(&mut media, b"new").unwrap(); // slot 1
        media.write_u64(64 + 16, 0xdead); // tear the payload of slot 1
        let reopened = DualRecord::open(&media, 0).unwrap();
        assert_eq!(reopened.payload(), b"old");
        assert_eq!(reopened.sequence(), 1);
    }

    #[test]
    fn refuses_bad_arguments_and_media() {
        let mut media = MemMedia::new(256);
        assert_eq!(DualRecord::format(&mut media, 8, b"").unwrap_err(), RecordFormatError::Misaligned { base: 8 });
        let out = RecordFormatError::OutOfBounds { base: 192, have: 256 };
        assert_eq!(DualRecord::format(&mut media, 192, b"").unwrap_err(), out);
        assert_eq!(DualRecord::format(&mut media, 0, &[0; 41]).unwrap_err(), RecordFormatError::TooLarge { len: 41 });
        assert_eq!(DualRecord::open(&media, 0).unwrap_err(), RecordOpenError::NoValidSlot { base: 0 });
        let mut record = DualRecord::format(&mut media, 0, &[7; 40]).unwrap();
        assert_eq!(record.store(&mut media, &[0; 41]), Err(RecordStoreError::TooLarge { len: 41 }));
        // A copy of slot 0 into slot 1 has the same sequence: corrupt, not guessed.
        let mut slot = [0u8; 64];
        media.read(0, &mut slot);
        media.write(64, &slot);
        assert_eq!(DualRecord::open(&media, 0).unwrap_err(), RecordOpenError::SameSequence { base: 0, seq: 1 });
    }

    #[test]
    fn nonzero_padding_or_reserved_bytes_invalidate_a_slot() {
        let mut slot = encode_slot(3, b"abc");
        assert_eq!(decode_slot(&slot), Some((3, 3)));
        slot[PAYLOAD_AT + 3] = 1;
        let crc = slot_crc(&slot);
        put_u32(&mut slot, CRC_AT, crc);
        assert_eq!(decode_slot(&slot), None);
        let mut zero_seq = encode_slot(1, b"");
        put_u64(&mut zero_seq, 0, 0);
        let crc = slot_crc(&zero_seq);
        put_u32(&mut zero_seq, CRC_AT, crc);
        assert_eq!(decode_slot(&zero_seq), None);
    }

    #[test]
    fn exhausted_sequence_is_refused() {
        let mut media = MemMedia::new(128);
        DualRecord::format(&mut media, 0, b"x").unwrap();
        media.write(0, &encode_slot(u64::MAX, b"x"));
        let mut record = DualRecord::open(&media, 0).unwrap();
        assert_eq!(record.store(&mut media, b"y"), Err(RecordStoreError::SequenceExhausted));
    }
}
