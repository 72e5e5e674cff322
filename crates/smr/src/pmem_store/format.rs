//! Byte layouts of the replica store (`docs/FORMAT.md`, "Replica store"):
//! the superblock, the membership block and its slots, the snapshot slot
//! header, and the encoding of a Raft entry as an append-log payload.
//!
//! Every integer is little-endian and fixed-width. Every decoder checks
//! the checksum first, then each length and count against its bound and
//! every reserved byte against zero, and returns `None` (or an error) on
//! anything off: nothing read from the media is interpreted before that.

use pmem::le::{get_u32, get_u64, put_u32, put_u64};
use raft::eraftpb::{ConfState, Entry, EntryType};

use crate::snapshot::stream::BodyId;

/// `b"PMWREPLS"`: the superblock's magic word.
pub const SUPERBLOCK_MAGIC: u64 = u64::from_le_bytes(*b"PMWREPLS");
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of the superblock (two lines; the area up to 256 is reserved).
pub const SUPERBLOCK_BYTES: usize = 128;
/// Offset of the superblock's CRC; it covers `[0, SUPERBLOCK_CRC_AT)`.
const SUPERBLOCK_CRC_AT: usize = 120;
/// Offset of the hard-state dual record.
pub const HARD_STATE_AT: u64 = 256;
/// Offset of the two membership slots.
pub const CONF_AT: u64 = 512;
/// Offset of the Raft log (an append log; a multiple of 256).
pub const LOG_AT: u64 = 1024;
/// Bytes of one membership slot.
pub const CONF_SLOT_BYTES: u64 = 256;
/// Bytes reserved for a snapshot slot's header; the data follows.
pub const SNAP_HEADER_BYTES: u64 = 512;
/// Bytes of the snapshot header that are written and checksummed.
pub const SNAP_HEADER_USED: usize = 280;
/// Alignment of the snapshot area and of its slots (one XPLine).
pub const AREA_ALIGN: u64 = 256;
/// Most ids in each list of a membership.
pub const MAX_IDS: usize = 7;
/// Bytes of an encoded membership.
pub const CONF_BLOCK_BYTES: usize = 8 + 4 * MAX_IDS * 8;
/// Bytes of an entry payload before its context and data.
pub const ENTRY_HEADER_BYTES: usize = 20;
/// Bytes of the encoded hard state (term, vote, commit).
pub const HARD_STATE_BYTES: usize = 24;

/// Checksum domains: bytes of one structure never validate as another.
const SUPERBLOCK_DOMAIN: &[u8; 8] = b"PMWSUPER";
const CONF_DOMAIN: &[u8; 8] = b"PMWCONFS";
const SNAP_HEADER_DOMAIN: &[u8; 8] = b"PMWSNAPH";
const SNAP_DATA_DOMAIN: &[u8; 8] = b"PMWSNAPD";
const STAGING_DOMAIN: &[u8; 8] = b"PMWSTAGH";
/// Bytes of a staging record; a slot has two, past its snapshot header.
pub const STAGING_RECORD_BYTES: usize = 64;
/// Offset in a slot of its first staging record (the second follows).
pub const STAGING_AT: u64 = 320;

/// Where the areas are, as the superblock records them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// The cluster this store belongs to.
    pub cluster: u64,
    /// The replica this store belongs to.
    pub replica: u64,
    /// Bytes of the append log at [`LOG_AT`].
    pub log_bytes: u64,
    /// Offset of the snapshot area.
    pub snap_at: u64,
    /// Bytes of one snapshot slot (header + data).
    pub snap_slot_bytes: u64,
}

/// Why a superblock was refused (before the identity is compared).
#[derive(Debug, PartialEq, Eq)]
pub enum SuperblockError {
    /// No magic, or a checksum that fails: `format` never finished.
    NotFormatted(&'static str),
    /// A version this build does not read.
    Version(u32),
    /// It checksums but describes an impossible layout.
    Impossible(String),
}

fn domain_crc(domain: &[u8; 8], bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(domain), bytes)
}

/// The superblock's bytes.
pub fn encode_superblock(sb: &Superblock) -> [u8; SUPERBLOCK_BYTES] {
    let mut b = [0u8; SUPERBLOCK_BYTES];
    put_u64(&mut b, 0, SUPERBLOCK_MAGIC);
    put_u32(&mut b, 8, FORMAT_VERSION);
    put_u64(&mut b, 16, sb.cluster);
    put_u64(&mut b, 24, sb.replica);
    put_u64(&mut b, 32, HARD_STATE_AT);
    put_u64(&mut b, 40, CONF_AT);
    put_u64(&mut b, 48, LOG_AT);
    put_u64(&mut b, 56, sb.log_bytes);
    put_u64(&mut b, 64, sb.snap_at);
    put_u64(&mut b, 72, sb.snap_slot_bytes);
    let crc = domain_crc(SUPERBLOCK_DOMAIN, &b[..SUPERBLOCK_CRC_AT]);
    put_u32(&mut b, SUPERBLOCK_CRC_AT, crc);
    b
}

/// Parses and checks a superblock read from a medium of `media_len` bytes.
pub fn decode_superblock(b: &[u8; SUPERBLOCK_BYTES], media_len: u64) -> Result<Superblock, SuperblockError> {
    if get_u64(b, 0) != SUPERBLOCK_MAGIC {
        return Err(SuperblockError::NotFormatted("no superblock magic"));
    }
    if domain_crc(SUPERBLOCK_DOMAIN, &b[..SUPERBLOCK_CRC_AT]) != get_u32(b, SUPERBLOCK_CRC_AT) {
        return Err(SuperblockError::NotFormatted("superblock checksum mismatch (a format that did not finish)"));
    }
    let version = get_u32(b, 8);
    if version != FORMAT_VERSION {
        return Err(SuperblockError::Version(version));
    }
    let impossible = |why: String| Err(SuperblockError::Impossible(why));
    if get_u32(b, 12) != 0 || get_u32(b, 124) != 0 || b[80..SUPERBLOCK_CRC_AT].iter().any(|&x| x != 0) {
        return impossible("reserved superblock bytes are not zero".into());
    }
    let fixed = [(32, HARD_STATE_AT), (40, CONF_AT), (48, LOG_AT)];
    if let Some((at, want)) = fixed.iter().find(|(at, want)| get_u64(b, *at) != *want) {
        return impossible(format!("area offset at byte {at} is {} (version 1 has {want})", get_u64(b, *at)));
    }
    let sb = Superblock {
        cluster: get_u64(b, 16),
        replica: get_u64(b, 24),
        log_bytes: get_u64(b, 56),
        snap_at: get_u64(b, 64),
        snap_slot_bytes: get_u64(b, 72),
    };
    let log_end = LOG_AT.checked_add(sb.log_bytes);
    if log_end.is_none_or(|end| end > sb.snap_at) || !sb.snap_at.is_multiple_of(AREA_ALIGN) {
        return impossible(format!("log of {} B overlaps the snapshot area at {}", sb.log_bytes, sb.snap_at));
    }
    if sb.snap_slot_bytes < SNAP_HEADER_BYTES || !sb.snap_slot_bytes.is_multiple_of(AREA_ALIGN) {
        return impossible(format!("snapshot slot of {} B", sb.snap_slot_bytes));
    }
    let end = sb.snap_slot_bytes.checked_mul(2).and_then(|two| two.checked_add(sb.snap_at));
    if end.is_none_or(|end| end > media_len) {
        return impossible(format!("snapshot area ends beyond the media of {media_len} B"));
    }
    Ok(sb)
}

/// A membership in [`CONF_BLOCK_BYTES`]: four counts, `auto_leave`, three
/// zero bytes, then voters, learners, outgoing voters and next learners,
/// [`MAX_IDS`] words each, unused words zero. `Err` names a list too long.
pub fn encode_conf(cs: &ConfState) -> Result<[u8; CONF_BLOCK_BYTES], &'static str> {
    let mut b = [0u8; CONF_BLOCK_BYTES];
    let lists = [(&cs.voters, "voters"), (&cs.learners, "learners"), (&cs.voters_outgoing, "outgoing voters"), (&cs.learners_next, "next learners")];
    for (i, (ids, name)) in lists.into_iter().enumerate() {
        if ids.len() > MAX_IDS {
            return Err(name);
        }
        b[i] = ids.len() as u8;
        for (k, id) in ids.iter().enumerate() {
            put_u64(&mut b, 8 + (i * MAX_IDS + k) * 8, *id);
        }
    }
    b[4] = cs.auto_leave as u8;
    Ok(b)
}

/// Parses a membership block; `None` if a count, flag or reserved byte is off.
pub fn decode_conf(b: &[u8]) -> Option<ConfState> {
    assert_eq!(b.len(), CONF_BLOCK_BYTES, "a whole membership block");
    if b[4] > 1 || b[5..8].iter().any(|&x| x != 0) {
        return None;
    }
    let mut lists: [Vec<u64>; 4] = Default::default();
    for (i, list) in lists.iter_mut().enumerate() {
        let count = b[i] as usize;
        if count > MAX_IDS {
            return None;
        }
        for k in 0..MAX_IDS {
            let id = get_u64(b, 8 + (i * MAX_IDS + k) * 8);
            match k < count {
                true => list.push(id),
                false if id != 0 => return None,
                false => {}
            }
        }
    }
    let [voters, learners, voters_outgoing, learners_next] = lists;
    Some(ConfState { voters, learners, voters_outgoing, learners_next, auto_leave: b[4] == 1, ..Default::default() })
}

/// A membership slot: `seq | as_of | membership block | crc | 0`.
pub fn encode_conf_slot(seq: u64, as_of: u64, conf: &[u8; CONF_BLOCK_BYTES]) -> [u8; CONF_SLOT_BYTES as usize] {
    assert!(seq >= 1, "sequence 0 marks no slot");
    let mut b = [0u8; CONF_SLOT_BYTES as usize];
    put_u64(&mut b, 0, seq);
    put_u64(&mut b, 8, as_of);
    b[16..16 + CONF_BLOCK_BYTES].copy_from_slice(conf);
    let crc = domain_crc(CONF_DOMAIN, &b[..248]);
    put_u32(&mut b, 248, crc);
    b
}

/// `(seq, as_of, membership)` of a valid membership slot.
pub fn decode_conf_slot(b: &[u8; CONF_SLOT_BYTES as usize]) -> Option<(u64, u64, ConfState)> {
    if domain_crc(CONF_DOMAIN, &b[..248]) != get_u32(b, 248) || get_u32(b, 252) != 0 {
        return None;
    }
    let seq = get_u64(b, 0);
    if seq == 0 {
        return None;
    }
    Some((seq, get_u64(b, 8), decode_conf(&b[16..16 + CONF_BLOCK_BYTES])?))
}

/// How a snapshot got into its slot, which decides how `open` finishes
/// the operation a crash interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Taken locally ([`crate::store::Durable::compact`]): the log keeps
    /// the entries after it.
    Compact = 1,
    /// Received from the leader ([`crate::store::Durable::install_snapshot`]):
    /// the log restarts after it.
    Install = 2,
}

/// A snapshot slot's header, as read back.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapHeader {
    /// Sequence: the newer valid slot wins.
    pub seq: u64,
    /// The snapshot's last index.
    pub index: u64,
    /// The term of that index.
    pub term: u64,
    /// Bytes of data after the header.
    pub data_len: u64,
    /// CRC-32C of the data (domain `PMWSNAPD`).
    pub data_crc: u32,
    /// How it got there.
    pub origin: Origin,
    /// Membership at `index`.
    pub conf: ConfState,
}

/// The CRC a snapshot's data carries.
pub fn snap_data_crc(data: &[u8]) -> u32 {
    domain_crc(SNAP_DATA_DOMAIN, data)
}

/// The written part of a snapshot header:
/// `seq | index | term | data_len | data_crc | origin | membership | crc | 0`.
pub fn encode_snap_header(h: &SnapHeader, conf: &[u8; CONF_BLOCK_BYTES]) -> [u8; SNAP_HEADER_USED] {
    assert!(h.seq >= 1, "sequence 0 marks no slot");
    let mut b = [0u8; SNAP_HEADER_USED];
    put_u64(&mut b, 0, h.seq);
    put_u64(&mut b, 8, h.index);
    put_u64(&mut b, 16, h.term);
    put_u64(&mut b, 24, h.data_len);
    put_u32(&mut b, 32, h.data_crc);
    put_u32(&mut b, 36, h.origin as u32);
    b[40..40 + CONF_BLOCK_BYTES].copy_from_slice(conf);
    let crc = domain_crc(SNAP_HEADER_DOMAIN, &b[..272]);
    put_u32(&mut b, 272, crc);
    b
}

/// A valid header (its data not yet checked) whose data fits in `data_max` bytes.
pub fn decode_snap_header(b: &[u8; SNAP_HEADER_USED], data_max: u64) -> Option<SnapHeader> {
    if domain_crc(SNAP_HEADER_DOMAIN, &b[..272]) != get_u32(b, 272) || get_u32(b, 276) != 0 {
        return None;
    }
    let origin = match get_u32(b, 36) {
        1 => Origin::Compact,
        2 => Origin::Install,
        _ => return None,
    };
    let (seq, data_len) = (get_u64(b, 0), get_u64(b, 24));
    if seq == 0 || data_len > data_max {
        return None;
    }
    let conf = decode_conf(&b[40..40 + CONF_BLOCK_BYTES])?;
    Some(SnapHeader { seq, index: get_u64(b, 8), term: get_u64(b, 16), data_len, data_crc: get_u32(b, 32), origin, conf })
}

/// The running CRC of a snapshot's data before any byte (domain `PMWSNAPD`).
pub fn snap_data_crc_start() -> u32 {
    crc32c::crc32c(SNAP_DATA_DOMAIN)
}

/// A staging record: the body being received into the slot and the bytes
/// of it held durably, under a sequence (the newer valid one of the
/// slot's two records counts).
/// `seq | index | term | length | body crc u32 | zero u32 | held | zero u64 | crc u32 | zero u32`.
pub fn encode_staging(seq: u64, body: &BodyId, held: u64) -> [u8; STAGING_RECORD_BYTES] {
    assert!(seq >= 1, "sequence 0 marks no record");
    assert!(held <= body.len, "a prefix of the body");
    let mut b = [0u8; STAGING_RECORD_BYTES];
    put_u64(&mut b, 0, seq);
    put_u64(&mut b, 8, body.index);
    put_u64(&mut b, 16, body.term);
    put_u64(&mut b, 24, body.len);
    put_u32(&mut b, 32, body.crc);
    put_u64(&mut b, 40, held);
    let crc = domain_crc(STAGING_DOMAIN, &b[..56]);
    put_u32(&mut b, 56, crc);
    b
}

/// A valid staging record (sequence, body, bytes held) whose body fits
/// in `data_max` bytes.
pub fn decode_staging(b: &[u8; STAGING_RECORD_BYTES], data_max: u64) -> Option<(u64, BodyId, u64)> {
    if domain_crc(STAGING_DOMAIN, &b[..56]) != get_u32(b, 56) {
        return None;
    }
    if get_u32(b, 36) != 0 || get_u64(b, 48) != 0 || get_u32(b, 60) != 0 {
        return None;
    }
    let (seq, held) = (get_u64(b, 0), get_u64(b, 40));
    let body = BodyId { index: get_u64(b, 8), term: get_u64(b, 16), len: get_u64(b, 24), crc: get_u32(b, 32) };
    (seq >= 1 && body.len <= data_max && held <= body.len).then_some((seq, body, held))
}

/// Hard state as the dual record's 24 B payload.
pub fn encode_hard_state(term: u64, vote: u64, commit: u64) -> [u8; HARD_STATE_BYTES] {
    let mut b = [0u8; HARD_STATE_BYTES];
    put_u64(&mut b, 0, term);
    put_u64(&mut b, 8, vote);
    put_u64(&mut b, 16, commit);
    b
}

/// `(term, vote, commit)` from a dual record's payload.
pub fn decode_hard_state(b: &[u8]) -> Option<(u64, u64, u64)> {
    (b.len() == HARD_STATE_BYTES).then(|| (get_u64(b, 0), get_u64(b, 8), get_u64(b, 16)))
}

/// An entry as a log payload (its index is the LSN):
/// `term u64 | type u8 | flags u8 | 0 u16 | context_len u32 | data_len u32 | context | data`.
/// `None` if the context or the data exceeds `u32::MAX` bytes.
pub fn encode_entry(e: &Entry, out: &mut Vec<u8>) -> Option<()> {
    let context_len = u32::try_from(e.context.len()).ok()?;
    let data_len = u32::try_from(e.data.len()).ok()?;
    out.clear();
    out.resize(ENTRY_HEADER_BYTES, 0);
    put_u64(out, 0, e.term);
    out[8] = e.entry_type as u8;
    out[9] = e.sync_log as u8;
    put_u32(out, 12, context_len);
    put_u32(out, 16, data_len);
    out.extend_from_slice(&e.context);
    out.extend_from_slice(&e.data);
    Some(())
}

/// The term of an entry whose payload is `len` bytes and begins with
/// `header`, if that header is well-formed (`open` checks every entry
/// this way without copying its data).
pub fn entry_term(header: &[u8], len: u64) -> Option<u64> {
    check_entry(header, len).map(|_| get_u64(header, 0))
}

/// The entry at `index` from its payload, if well-formed.
pub fn decode_entry(index: u64, payload: &[u8]) -> Option<Entry> {
    if payload.len() < ENTRY_HEADER_BYTES {
        return None;
    }
    let (entry_type, context_len) = check_entry(&payload[..ENTRY_HEADER_BYTES], payload.len() as u64)?;
    let context = &payload[ENTRY_HEADER_BYTES..ENTRY_HEADER_BYTES + context_len];
    let data = &payload[ENTRY_HEADER_BYTES + context_len..];
    Some(Entry {
        entry_type,
        term: get_u64(payload, 0),
        index,
        context: context.to_vec().into(),
        data: data.to_vec().into(),
        sync_log: payload[9] == 1,
        ..Default::default()
    })
}

/// The type and context length of a well-formed entry header for a
/// payload of `len` bytes: the type is known, the flags and reserved
/// bytes are clear, and the two lengths add up to exactly the payload.
fn check_entry(header: &[u8], len: u64) -> Option<(EntryType, usize)> {
    if header.len() != ENTRY_HEADER_BYTES || len < ENTRY_HEADER_BYTES as u64 {
        return None;
    }
    if header[9] > 1 || header[10] != 0 || header[11] != 0 {
        return None;
    }
    let entry_type = match header[8] {
        0 => EntryType::EntryNormal,
        1 => EntryType::EntryConfChange,
        2 => EntryType::EntryConfChangeV2,
        _ => return None,
    };
    let context_len = get_u32(header, 12) as u64;
    let data_len = get_u32(header, 16) as u64;
    if ENTRY_HEADER_BYTES as u64 + context_len + data_len != len {
        return None;
    }
    Some((entry_type, context_len as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_malformed_ones_are_refused() {
        let e = Entry {
            entry_type: EntryType::EntryConfChangeV2,
            term: 7,
            index: 99,
            context: b"ctx".to_vec().into(),
            data: b"payload".to_vec().into(),
            sync_log: true,
            ..Default::default()
        };
        let mut buf = Vec::new();
        encode_entry(&e, &mut buf).unwrap();
        assert_eq!(buf.len(), ENTRY_HEADER_BYTES + 10);
        assert_eq!(decode_entry(99, &buf), Some(e));
        assert_eq!(entry_term(&buf[..ENTRY_HEADER_BYTES], buf.len() as u64), Some(7));
        let mut bad_type = buf.clone();
        bad_type[8] = 3;
        assert_eq!(decode_entry(99, &bad_type), None);
        let mut bad_len = buf.clone();
        put_u32(&mut bad_len, 16, 8);
        assert_eq!(decode_entry(99, &bad_len), None, "lengths must add up to the payload");
        assert_eq!(decode_entry(99, &buf[..19]), None, "shorter than the header");
    }

    #[test]
    fn memberships_round_trip_and_are_bounded() {
        let cs = ConfState { voters: vec![1, 2, 3], learners: vec![9], auto_leave: true, ..Default::default() };
        let block = encode_conf(&cs).unwrap();
        assert_eq!(decode_conf(&block), Some(cs));
        let big = ConfState { learners: (1..=8).collect(), ..Default::default() };
        assert_eq!(encode_conf(&big), Err("learners"));
        let mut block = encode_conf(&ConfState { voters: vec![1], ..Default::default() }).unwrap();
        put_u64(&mut block, 16, 5); // an unused voter word
        assert_eq!(decode_conf(&block), None);
        let mut slot = encode_conf_slot(3, 10, &encode_conf(&ConfState::default()).unwrap());
        assert!(decode_conf_slot(&slot).is_some());
        slot[20] ^= 1;
        assert_eq!(decode_conf_slot(&slot), None, "checksum first");
    }

    #[test]
    fn superblock_round_trips_and_checks_its_layout() {
        let sb = Superblock { cluster: 7, replica: 2, log_bytes: 4096 + 512, snap_at: 6144, snap_slot_bytes: 1024 };
        let bytes = encode_superblock(&sb);
        assert_eq!(decode_superblock(&bytes, 8192), Ok(sb));
        assert!(matches!(decode_superblock(&bytes, 8191), Err(SuperblockError::Impossible(_))));
        let mut torn = bytes;
        torn[70] ^= 1;
        assert!(matches!(decode_superblock(&torn, 8192), Err(SuperblockError::NotFormatted(_))));
        assert!(matches!(decode_superblock(&[0; SUPERBLOCK_BYTES], 8192), Err(SuperblockError::NotFormatted(_))));
    }
}
