//! The heap's on-media format (docs/FORMAT.md, "Transactional heap"): the
//! superblock, the commit record, the applied word, the resync words, the
//! two history slots, and the epoch records of the redo log. Encoding and
//! validating decoding only; no I/O.
//!
//! Invariants: every field is fixed-width little-endian; every record that a
//! crash can tear carries a CRC-32C that is checked before any other field
//! is trusted; decoding never panics on arbitrary bytes (every length and
//! offset read from media goes through checked arithmetic first).

use pmem::crc::crc32c_append;
use pmem::le::{get_u32, get_u64, put_u32, put_u64};

/// `b"PMWMIRTX"`, little-endian: the superblock's first word.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PMWMIRTX");
/// The format version this code writes and reads (1 had no history).
pub const FORMAT_VERSION: u32 = 2;
/// Bytes before the log: superblock, commit record, applied word, resync
/// words, then the two history slots.
pub const HEADER_BYTES: u64 = 768;
/// Where the superblock starts, from the heap's base.
pub const SUPER_AT: u64 = 0;
/// Bytes of the superblock.
pub const SUPER_BYTES: usize = 64;
/// Where the commit record starts, from the heap's base (a line of its own).
pub const COMMIT_AT: u64 = 64;
/// Bytes of the commit record.
pub const COMMIT_BYTES: usize = 32;
/// Where the applied word is, from the heap's base (a line of its own).
pub const APPLIED_AT: u64 = 128;
/// Where the resync word is, from the heap's base (a line of its own): 0,
/// or the transaction a full copy from a primary is bringing the data area
/// to, set durably before the copy's first byte lands and cleared only
/// once the copy is durable and the commit record and applied word name
/// that transaction. While it is set, [`crate::Heap::open`] refuses the
/// heap (it may be torn) and only a backup resumes the copy.
pub const RESYNC_AT: u64 = 192;
/// The resync base word, in the resync word's line: read only while the
/// resync word is set; 0 if the copy is a full one, `base + 1` if it is an
/// incremental copy from transaction `base`. Persisted before the resync
/// word is set.
pub const RESYNC_BASE_AT: u64 = 200;
/// Where the two history slots are, from the heap's base: each holds a
/// [`crate::history::History`] record with a serial; the valid one with
/// the higher serial is the heap's history, and a new one is written into
/// the other, so a torn write leaves the old one.
pub const HISTORY_AT: [u64; 2] = [256, 512];
/// The heap's base, the log's size and the data area's size are multiples of this.
pub const ALIGN: u64 = 256;
/// Bytes of an epoch record's header.
pub const EPOCH_HEADER_BYTES: usize = 24;
/// Bytes of a write entry's header inside an epoch record.
pub const WRITE_HEADER_BYTES: usize = 16;
/// The largest log: positions and epoch bodies are `u32` on media.
pub const MAX_LOG_BYTES: u64 = 1 << 31;
/// The largest data area (256 TiB): offsets are `u64`, but bounded.
pub const MAX_DATA_BYTES: u64 = 1 << 48;

/// The log bytes one write of `len` bytes takes (header + bytes padded to 8).
/// `None` if it cannot fit any log.
pub fn write_entry_bytes(len: u64) -> Option<u64> {
    if len > MAX_LOG_BYTES {
        return None;
    }
    Some(WRITE_HEADER_BYTES as u64 + len.div_ceil(8) * 8)
}

/// The heap's fixed geometry, as the superblock records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Where the heap starts in its medium.
    pub base: u64,
    /// Bytes of the redo log.
    pub log_bytes: u64,
    /// Bytes of the data area.
    pub data_bytes: u64,
}

impl Geometry {
    /// Checks the sizes and alignment; returns what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if !self.base.is_multiple_of(ALIGN) {
            return Err(format!("base {} is not a multiple of {ALIGN}", self.base));
        }
        if self.log_bytes < ALIGN || self.log_bytes > MAX_LOG_BYTES || !self.log_bytes.is_multiple_of(ALIGN) {
            return Err(format!(
                "log of {} B: want a multiple of {ALIGN} in [{ALIGN}, {MAX_LOG_BYTES}]",
                self.log_bytes
            ));
        }
        if self.data_bytes < ALIGN || self.data_bytes > MAX_DATA_BYTES || !self.data_bytes.is_multiple_of(ALIGN) {
            return Err(format!(
                "data area of {} B: want a multiple of {ALIGN} in [{ALIGN}, {MAX_DATA_BYTES}]",
                self.data_bytes
            ));
        }
        self.end().map(|_| ()).ok_or_else(|| "heap does not fit a 64-bit medium".to_string())
    }

    /// Bytes of medium the heap needs from its base.
    pub fn required_size(&self) -> u64 {
        HEADER_BYTES + self.log_bytes + self.data_bytes
    }

    /// One past the heap's last byte, if it fits in a `u64`.
    pub fn end(&self) -> Option<u64> {
        self.base.checked_add(HEADER_BYTES)?.checked_add(self.log_bytes)?.checked_add(self.data_bytes)
    }

    /// Medium offset of the log.
    pub fn log_at(&self) -> u64 {
        self.base + HEADER_BYTES
    }

    /// Medium offset of the data area.
    pub fn data_at(&self) -> u64 {
        self.log_at() + self.log_bytes
    }
}

/// What a superblock says, or why it cannot be read.
#[derive(Debug, PartialEq, Eq)]
pub enum SuperError {
    /// The first word is not [`MAGIC`].
    BadMagic,
    /// The CRC does not match.
    Checksum,
    /// Another format version.
    Version(u32),
}

/// Encodes the superblock of `geometry`.
pub fn encode_super(geometry: &Geometry) -> [u8; SUPER_BYTES] {
    let mut line = [0u8; SUPER_BYTES];
    put_u64(&mut line, 0, MAGIC);
    put_u32(&mut line, 8, FORMAT_VERSION);
    put_u32(&mut line, 12, HEADER_BYTES as u32);
    put_u64(&mut line, 16, geometry.log_bytes);
    put_u64(&mut line, 24, geometry.data_bytes);
    let crc = crc32c_append(0, &line[..60]);
    put_u32(&mut line, 60, crc);
    line
}

/// Decodes a superblock (the geometry is not validated here).
pub fn decode_super(line: &[u8; SUPER_BYTES], base: u64) -> Result<Geometry, SuperError> {
    if get_u64(line, 0) != MAGIC {
        return Err(SuperError::BadMagic);
    }
    if crc32c_append(0, &line[..60]) != get_u32(line, 60) {
        return Err(SuperError::Checksum);
    }
    let version = get_u32(line, 8);
    if version != FORMAT_VERSION || get_u32(line, 12) != HEADER_BYTES as u32 {
        return Err(SuperError::Version(version));
    }
    Ok(Geometry { base, log_bytes: get_u64(line, 16), data_bytes: get_u64(line, 24) })
}

/// The durable statement that transaction `tx` committed, and where its
/// redo records are: the log's first `log_bytes` bytes, `epochs` records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitRecord {
    /// The transaction's number (≥ 1).
    pub tx: u64,
    /// Bytes of its epoch records, from the log's start.
    pub log_bytes: u64,
    /// Its epoch records.
    pub epochs: u32,
}

/// Encodes a commit record.
pub fn encode_commit(record: &CommitRecord) -> [u8; COMMIT_BYTES] {
    let mut bytes = [0u8; COMMIT_BYTES];
    put_u64(&mut bytes, 0, record.tx);
    put_u64(&mut bytes, 8, record.log_bytes);
    put_u32(&mut bytes, 16, record.epochs);
    let crc = crc32c_append(0, &bytes[..28]);
    put_u32(&mut bytes, 28, crc);
    bytes
}

/// Decodes a commit record: `None` if its CRC fails (never written, or
/// torn) or it names transaction 0.
pub fn decode_commit(bytes: &[u8; COMMIT_BYTES]) -> Option<CommitRecord> {
    if crc32c_append(0, &bytes[..28]) != get_u32(bytes, 28) {
        return None;
    }
    let record = CommitRecord { tx: get_u64(bytes, 0), log_bytes: get_u64(bytes, 8), epochs: get_u32(bytes, 16) };
    (record.tx != 0).then_some(record)
}

/// Starts an epoch record at the end of `buf`: reserves its header.
pub fn begin_epoch(buf: &mut Vec<u8>) {
    buf.extend_from_slice(&[0u8; EPOCH_HEADER_BYTES]);
}

/// Appends one write entry (data-area `offset`, `bytes`) to `buf`; returns
/// where its bytes start in `buf`.
pub fn push_write(buf: &mut Vec<u8>, offset: u64, bytes: &[u8]) -> usize {
    let len = u32::try_from(bytes.len()).expect("write length bounded by the log");
    let mut header = [0u8; WRITE_HEADER_BYTES];
    put_u64(&mut header, 0, offset);
    put_u32(&mut header, 8, len);
    buf.extend_from_slice(&header);
    let at = buf.len();
    buf.extend_from_slice(bytes);
    buf.resize(buf.len() + (8 - bytes.len() % 8) % 8, 0);
    at
}

/// Fills in the header of the epoch record `record` (header reserved by
/// [`begin_epoch`], then its write entries): transaction, index, writes,
/// and the CRC over the header's fields and the body.
pub fn seal_epoch(record: &mut [u8], tx: u64, index: u32, writes: u32) {
    let body = u32::try_from(record.len() - EPOCH_HEADER_BYTES).expect("epoch bounded by the log");
    put_u64(record, 0, tx);
    put_u32(record, 8, index);
    put_u32(record, 12, writes);
    put_u32(record, 16, body);
    let crc = crc32c_append(crc32c_append(0, &record[..20]), &record[EPOCH_HEADER_BYTES..]);
    put_u32(record, 20, crc);
}

/// One write of an epoch record: where in the data area, and where its
/// bytes are in the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteRef {
    /// Data-area offset.
    pub offset: u64,
    /// Where the bytes start in the record.
    pub at: usize,
    /// How many bytes.
    pub len: usize,
}

/// A validated epoch record's header fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochHeader {
    /// The transaction.
    pub tx: u64,
    /// The epoch's index in its transaction (0, 1, …).
    pub index: u32,
    /// Its writes.
    pub writes: u32,
    /// Bytes of the whole record (header + body).
    pub record_bytes: usize,
}

/// Validates the epoch record at the start of `bytes` (which may run on
/// past it) against a data area of `data_bytes`, and lists its writes.
/// Every check happens before anything is trusted: the CRC first, then
/// each entry inside the body and inside the data area.
pub fn parse_epoch(bytes: &[u8], data_bytes: u64) -> Result<(EpochHeader, Vec<WriteRef>), String> {
    if bytes.len() < EPOCH_HEADER_BYTES {
        return Err(format!("{} B left: no room for an epoch header", bytes.len()));
    }
    let body = get_u32(bytes, 16) as usize;
    let record_bytes = EPOCH_HEADER_BYTES.checked_add(body).filter(|&n| n <= bytes.len());
    let record_bytes = record_bytes.ok_or_else(|| format!("epoch body of {body} B runs past the committed log"))?;
    let crc = crc32c_append(crc32c_append(0, &bytes[..20]), &bytes[EPOCH_HEADER_BYTES..record_bytes]);
    if crc != get_u32(bytes, 20) {
        return Err("epoch checksum mismatch".to_string());
    }
    let header =
        EpochHeader { tx: get_u64(bytes, 0), index: get_u32(bytes, 8), writes: get_u32(bytes, 12), record_bytes };
    let mut writes = Vec::new();
    let mut at = EPOCH_HEADER_BYTES;
    while at < record_bytes {
        let entry = parse_write(&bytes[..record_bytes], at, data_bytes)?;
        at = entry.at + entry.len.div_ceil(8) * 8;
        writes.push(entry);
    }
    if writes.len() != header.writes as usize {
        return Err(format!("epoch says {} writes, holds {}", header.writes, writes.len()));
    }
    Ok((header, writes))
}

/// Validates the write entry at `at` of `record`.
fn parse_write(record: &[u8], at: usize, data_bytes: u64) -> Result<WriteRef, String> {
    if record.len() - at < WRITE_HEADER_BYTES {
        return Err(format!("write entry at {at} is cut off"));
    }
    let offset = get_u64(record, at);
    let len = get_u32(record, at + 8) as usize;
    let start = at + WRITE_HEADER_BYTES;
    let padded = len.div_ceil(8) * 8;
    if padded > record.len() - start {
        return Err(format!("write of {len} B at entry {at} runs past its epoch"));
    }
    if offset.checked_add(len as u64).is_none_or(|end| end > data_bytes) {
        return Err(format!("write [{offset}, +{len}) outside the data area of {data_bytes} B"));
    }
    Ok(WriteRef { offset, at: start, len })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tx: u64, index: u32, writes: &[(u64, &[u8])]) -> Vec<u8> {
        let mut buf = Vec::new();
        begin_epoch(&mut buf);
        for (offset, bytes) in writes {
            push_write(&mut buf, *offset, bytes);
        }
        seal_epoch(&mut buf, tx, index, writes.len() as u32);
        buf
    }

    #[test]
    fn epoch_round_trips() {
        let buf = record(7, 2, &[(0, b"abc"), (100, &[9; 16]), (40, b"")]);
        assert_eq!(buf.len(), 24 + 16 + 8 + 16 + 16 + 16);
        let (header, writes) = parse_epoch(&buf, 256).unwrap();
        assert_eq!((header.tx, header.index, header.writes, header.record_bytes), (7, 2, 3, buf.len()));
        assert_eq!(&buf[writes[0].at..writes[0].at + writes[0].len], b"abc");
        assert_eq!(writes[1].offset, 100);
        assert_eq!(writes[2].len, 0);
    }

    #[test]
    fn every_torn_or_flipped_byte_is_rejected() {
        let buf = record(3, 0, &[(8, b"hello world")]);
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x40;
            assert!(parse_epoch(&bad, 256).is_err(), "flip at {i} accepted");
        }
        assert!(parse_epoch(&buf[..buf.len() - 8], 256).is_err(), "cut record accepted");
    }

    #[test]
    fn writes_outside_the_data_area_are_rejected() {
        let buf = record(3, 0, &[(250, b"1234567")]);
        assert!(parse_epoch(&buf, 256).is_err());
        let buf = record(3, 0, &[(u64::MAX - 2, b"1234567")]);
        assert!(parse_epoch(&buf, 256).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        let mut state = 0x1234_5678_9abc_def0u64;
        for _ in 0..2000 {
            let len = (state % 200) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (state >> 56) as u8
                })
                .collect();
            let _ = parse_epoch(&bytes, 1 << 20);
        }
    }

    #[test]
    fn commit_record_round_trips_and_rejects_torn() {
        let rec = CommitRecord { tx: 9, log_bytes: 640, epochs: 3 };
        let bytes = encode_commit(&rec);
        assert_eq!(decode_commit(&bytes), Some(rec));
        let mut torn = bytes;
        torn[8..16].copy_from_slice(&encode_commit(&CommitRecord { tx: 9, log_bytes: 1, epochs: 3 })[8..16]);
        assert_eq!(decode_commit(&torn), None);
        assert_eq!(decode_commit(&[0; COMMIT_BYTES]), None);
    }

    #[test]
    fn superblock_round_trips() {
        let geometry = Geometry { base: 512, log_bytes: 4096, data_bytes: 8192 };
        let line = encode_super(&geometry);
        assert_eq!(decode_super(&line, 512), Ok(geometry));
        let mut bad = line;
        bad[20] ^= 1;
        assert_eq!(decode_super(&bad, 512), Err(SuperError::Checksum));
        assert_eq!(decode_super(&[0; SUPER_BYTES], 0), Err(SuperError::BadMagic));
    }
}
