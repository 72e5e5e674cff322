//! The remote pool: how a server lays out the region it exports, and the
//! crash-consistent directory of its named append logs (`wire.md`, "Remote
//! pool").
//!
//! ```text
//! 0                 superblock (64 B; rest of the first 256 B unused)
//! 256               directory: `dir_slots` slots of 128 B
//! log_base          log area (4 KiB aligned): logs, bump-allocated, 256 B aligned
//! data_base         data area (4 KiB aligned) to the end: what clients read and write
//! ```
//!
//! Invariants:
//! - Clients address only the data area; the superblock, directory and
//!   logs are reachable only through the log opcodes, so no raw write can
//!   corrupt them.
//! - The superblock is written once, last, by `format`; the directory
//!   slots are zeroed and persisted before it.
//! - A slot goes from free (invalid CRC) to valid exactly once, and only
//!   after the log it names is durably created; a slot is never rewritten.
//! - Logs never overlap: a new log starts at the end of the highest valid
//!   slot's log (rounded up to 256 B), which is where recovery allocates
//!   too, so space of a create that crashed before its slot is reused.

use pmem::{Media, Padding};
use pmwire_log::{AppendLog, CreateError, LogConfig, TailStrategy};
use thiserror::Error;

/// Superblock magic (`"PMWRPOOL"`).
pub const POOL_MAGIC: u64 = u64::from_le_bytes(*b"PMWRPOOL");
/// Directory slot magic (`"PMWRLOGD"`).
pub const SLOT_MAGIC: u64 = u64::from_le_bytes(*b"PMWRLOGD");
/// Format version of the superblock and slots.
pub const POOL_VERSION: u32 = 1;
/// Where the directory starts.
pub const DIR_BASE: u64 = 256;
/// Bytes per directory slot (two cache lines).
pub const SLOT_BYTES: u64 = 128;
/// Largest directory.
pub const MAX_DIR_SLOTS: u32 = 4096;
const AREA_ALIGN: u64 = 4096;
const LOG_ALIGN: u64 = 256;
const NAME_AT: usize = 56;
const NAME_BYTES: usize = 64;

/// How to format a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// The id clients name the exported region by.
    pub region_id: u32,
    /// Directory slots (maximum number of logs).
    pub dir_slots: u32,
    /// Bytes reserved for logs; the rest of the region is the data area.
    pub log_area_bytes: u64,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig { region_id: 1, dir_slots: 32, log_area_bytes: 16 << 20 }
    }
}

/// The superblock: the pool's fixed geometry and its access key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// The exported region's id.
    pub region_id: u32,
    /// The access key every request must carry.
    pub key: u64,
    /// Start of the log area.
    pub log_base: u64,
    /// Bytes of the log area.
    pub log_bytes: u64,
    /// Start of the data area.
    pub data_base: u64,
    /// Bytes of the data area.
    pub data_bytes: u64,
    /// Directory slots.
    pub dir_slots: u32,
}

/// One valid directory slot: a named log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSlot {
    /// The log's name (1..=64 bytes).
    pub name: Vec<u8>,
    /// Where the log starts in the region.
    pub base: u64,
    /// `AppendLog::required_size` of its config.
    pub size: u64,
    /// Its shape (faults cleared).
    pub config: LogConfig,
}

/// Planted bugs for the crash checker's canaries. Never set outside tests.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolFaults {
    /// Persist the slot before the log it names is created.
    pub slot_before_log: bool,
    /// Store the slot but never flush it.
    pub skip_slot_flush: bool,
}

/// Why `format` refused. Nothing was written.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FormatError {
    /// The region cannot hold the metadata, the log area and one data page.
    #[error("region of {have} B too small: {needed} B needed")]
    TooSmall {
        /// Bytes needed.
        needed: u64,
        /// The region's size.
        have: u64,
    },
    /// Zero or more than `MAX_DIR_SLOTS` slots.
    #[error("{0} directory slots (allowed 1..=4096)")]
    BadSlots(u32),
}

/// Why `open` found no pool.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PoolOpenError {
    /// No superblock (never formatted, or `format` crashed).
    #[error("no pmwire pool: magic {found:#018x}")]
    NotFormatted {
        /// The first word.
        found: u64,
    },
    /// The superblock's checksum fails (torn or corrupted).
    #[error("superblock checksum mismatch")]
    Checksum,
    /// Another format version.
    #[error("pool format version {0}, this build reads {POOL_VERSION}")]
    Version(u32),
    /// The superblock describes areas outside the region.
    #[error("superblock geometry does not fit the region of {0} B")]
    Geometry(u64),
    /// A valid slot names an impossible log (corruption, not a crash outcome).
    #[error("directory slot {slot} is inconsistent: {why}")]
    BadSlot {
        /// The slot.
        slot: u32,
        /// What is wrong.
        why: &'static str,
    },
}

/// Why a log could not be created. Nothing durable changed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LogCreateError {
    /// A log of this name exists.
    #[error("a log named {0:?} exists")]
    Exists(String),
    /// The name is empty or longer than 64 bytes.
    #[error("log name of {0} B (allowed 1..=64)")]
    BadName(usize),
    /// Every directory slot is taken.
    #[error("directory full ({0} logs)")]
    DirectoryFull(u32),
    /// The log area has no room for the log.
    #[error("log area full: {needed} B needed, {free} B free")]
    NoSpace {
        /// Bytes the log needs.
        needed: u64,
        /// Bytes free in the log area.
        free: u64,
    },
    /// The config is invalid.
    #[error("bad log config: {0}")]
    Config(#[from] CreateError),
}

/// The pool's live state: superblock and directory.
#[derive(Debug)]
pub struct Pool {
    sb: Superblock,
    slots: Vec<Option<LogSlot>>,
}

fn crc_of(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

impl Pool {
    /// Formats `media` as an empty pool with a fresh random access key.
    pub fn format<M: Media>(media: &mut M, config: PoolConfig) -> Result<Pool, FormatError> {
        Pool::format_with_key(media, config, rand::random())
    }

    /// [`format`](Pool::format) with a chosen key (tests, reproducible set-ups).
    pub fn format_with_key<M: Media>(media: &mut M, config: PoolConfig, key: u64) -> Result<Pool, FormatError> {
        if config.dir_slots == 0 || config.dir_slots > MAX_DIR_SLOTS {
            return Err(FormatError::BadSlots(config.dir_slots));
        }
        let dir_end = DIR_BASE + config.dir_slots as u64 * SLOT_BYTES;
        let log_base = dir_end.next_multiple_of(AREA_ALIGN);
        // Checked, not saturated: a log area near 2^64 B is refused, not rounded.
        let data_base = log_base.checked_add(config.log_area_bytes).and_then(|end| end.checked_next_multiple_of(AREA_ALIGN));
        let Some(needed) = data_base.and_then(|base| base.checked_add(AREA_ALIGN)).filter(|&n| n <= media.len()) else {
            let needed = log_base.saturating_add(config.log_area_bytes).saturating_add(AREA_ALIGN);
            return Err(FormatError::TooSmall { needed, have: media.len() });
        };
        let data_base = needed - AREA_ALIGN;
        let sb = Superblock {
            region_id: config.region_id,
            key,
            log_base,
            log_bytes: data_base - log_base,
            data_base,
            data_bytes: media.len() - data_base,
            dir_slots: config.dir_slots,
        };
        let zero = [0u8; SLOT_BYTES as usize];
        for slot in 0..config.dir_slots {
            media.write(slot_offset(slot), &zero);
        }
        media.flush(DIR_BASE, dir_end - DIR_BASE);
        media.drain();
        media.write(0, &encode_superblock(&sb));
        media.persist(0, 64);
        Ok(Pool { sb, slots: vec![None; config.dir_slots as usize] })
    }

    /// Reads the superblock and every valid directory slot.
    pub fn open<M: Media>(media: &M) -> Result<Pool, PoolOpenError> {
        let sb = read_superblock(media)?;
        let mut slots = Vec::with_capacity(sb.dir_slots as usize);
        let mut raw = [0u8; SLOT_BYTES as usize];
        for slot in 0..sb.dir_slots {
            media.read(slot_offset(slot), &mut raw);
            let decoded = decode_slot(&raw);
            if let Some(s) = &decoded {
                check_slot(&sb, slot, s)?;
            }
            slots.push(decoded);
        }
        let pool = Pool { sb, slots };
        pool.check_disjoint()?;
        Ok(pool)
    }

    /// The superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// The log in directory slot `id`, if valid.
    pub fn slot(&self, id: u32) -> Option<&LogSlot> {
        self.slots.get(id as usize).and_then(|s| s.as_ref())
    }

    /// Every valid slot with its id.
    pub fn logs(&self) -> impl Iterator<Item = (u32, &LogSlot)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (i as u32, s)))
    }

    /// The id of the log named `name`.
    pub fn find(&self, name: &[u8]) -> Option<u32> {
        self.logs().find(|(_, s)| s.name == name).map(|(i, _)| i)
    }

    /// Where the next log would start.
    fn next_free(&self) -> u64 {
        let end = self.logs().map(|(_, s)| s.base + s.size).max().unwrap_or(self.sb.log_base);
        end.next_multiple_of(LOG_ALIGN)
    }

    /// Creates a log named `name` in the log area and records it in the
    /// directory; returns its id (the slot) and the open log. The log is
    /// durably created before its slot is written (module invariants).
    pub fn create_log<M: Media>(
        &mut self,
        media: &mut M,
        name: &[u8],
        config: LogConfig,
    ) -> Result<(u32, AppendLog), LogCreateError> {
        self.create_log_with_faults(media, name, config, PoolFaults::default())
    }

    /// [`create_log`](Pool::create_log) with planted bugs (tests only).
    #[doc(hidden)]
    pub fn create_log_with_faults<M: Media>(
        &mut self,
        media: &mut M,
        name: &[u8],
        mut config: LogConfig,
        faults: PoolFaults,
    ) -> Result<(u32, AppendLog), LogCreateError> {
        if name.is_empty() || name.len() > NAME_BYTES {
            return Err(LogCreateError::BadName(name.len()));
        }
        if self.find(name).is_some() {
            return Err(LogCreateError::Exists(String::from_utf8_lossy(name).into_owned()));
        }
        config.faults = Default::default();
        config.validate()?;
        let slot = self.slots.iter().position(|s| s.is_none());
        let slot = slot.ok_or(LogCreateError::DirectoryFull(self.sb.dir_slots))? as u32;
        let base = self.next_free();
        let size = AppendLog::required_size(&config);
        let area_end = self.sb.log_base + self.sb.log_bytes;
        if base.checked_add(size).is_none_or(|end| end > area_end) {
            return Err(LogCreateError::NoSpace { needed: size, free: area_end.saturating_sub(base) });
        }
        let entry = LogSlot { name: name.to_vec(), base, size, config };
        let raw = encode_slot(&entry);
        let at = slot_offset(slot);
        if faults.slot_before_log {
            media.write(at, &raw);
            media.persist(at, SLOT_BYTES);
        }
        let log = AppendLog::create(media, base, config)?;
        if !faults.slot_before_log {
            media.write(at, &raw);
            if faults.skip_slot_flush {
                media.drain();
            } else {
                media.persist(at, SLOT_BYTES);
            }
        }
        self.slots[slot as usize] = Some(entry);
        Ok((slot, log))
    }

    fn check_disjoint(&self) -> Result<(), PoolOpenError> {
        let mut spans: Vec<(u64, u64, u32)> = self.logs().map(|(i, s)| (s.base, s.base + s.size, i)).collect();
        spans.sort_unstable();
        for pair in spans.windows(2) {
            if pair[0].1 > pair[1].0 {
                return Err(PoolOpenError::BadSlot { slot: pair[1].2, why: "log overlaps another" });
            }
        }
        Ok(())
    }
}

fn slot_offset(slot: u32) -> u64 {
    DIR_BASE + slot as u64 * SLOT_BYTES
}

fn encode_superblock(sb: &Superblock) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[0..8].copy_from_slice(&POOL_MAGIC.to_le_bytes());
    b[8..12].copy_from_slice(&POOL_VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&sb.region_id.to_le_bytes());
    b[16..24].copy_from_slice(&sb.key.to_le_bytes());
    b[24..32].copy_from_slice(&sb.log_base.to_le_bytes());
    b[32..40].copy_from_slice(&sb.log_bytes.to_le_bytes());
    b[40..48].copy_from_slice(&sb.data_base.to_le_bytes());
    b[48..52].copy_from_slice(&sb.dir_slots.to_le_bytes());
    let crc = crc_of(&b[..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
    b
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn read_superblock<M: Media>(media: &M) -> Result<Superblock, PoolOpenError> {
    if media.len() < 64 {
        return Err(PoolOpenError::Geometry(media.len()));
    }
    let mut b = [0u8; 64];
    media.read(0, &mut b);
    let found = u64_at(&b, 0);
    if found != POOL_MAGIC {
        return Err(PoolOpenError::NotFormatted { found });
    }
    if crc_of(&b[..60]) != u32_at(&b, 60) {
        return Err(PoolOpenError::Checksum);
    }
    if u32_at(&b, 8) != POOL_VERSION {
        return Err(PoolOpenError::Version(u32_at(&b, 8)));
    }
    let (log_base, log_bytes, data_base) = (u64_at(&b, 24), u64_at(&b, 32), u64_at(&b, 40));
    let dir_slots = u32_at(&b, 48);
    let len = media.len();
    let dir_end = DIR_BASE + dir_slots as u64 * SLOT_BYTES;
    let fits = (1..=MAX_DIR_SLOTS).contains(&dir_slots)
        && log_base >= dir_end
        && log_base.checked_add(log_bytes) == Some(data_base)
        && data_base < len
        && u32_at(&b, 52) == 0;
    if !fits {
        return Err(PoolOpenError::Geometry(len));
    }
    let sb = Superblock {
        region_id: u32_at(&b, 12),
        key: u64_at(&b, 16),
        log_base,
        log_bytes,
        data_base,
        data_bytes: len - data_base,
        dir_slots,
    };
    Ok(sb)
}

fn padding_code(padding: Padding) -> u32 {
    padding.align() as u32
}

fn encode_slot(s: &LogSlot) -> [u8; SLOT_BYTES as usize] {
    let mut b = [0u8; SLOT_BYTES as usize];
    let (code, blocks, stride) = match s.config.tail {
        TailStrategy::Naive => (0u32, 0, 0),
        TailStrategy::Rotating { blocks, stride } => (1, blocks, stride),
        TailStrategy::SelfValidating => (2, 0, 0),
    };
    b[0..8].copy_from_slice(&SLOT_MAGIC.to_le_bytes());
    b[8..16].copy_from_slice(&s.base.to_le_bytes());
    b[16..24].copy_from_slice(&s.size.to_le_bytes());
    b[24..32].copy_from_slice(&s.config.capacity.to_le_bytes());
    b[32..36].copy_from_slice(&code.to_le_bytes());
    b[36..40].copy_from_slice(&blocks.to_le_bytes());
    b[40..44].copy_from_slice(&stride.to_le_bytes());
    b[44..48].copy_from_slice(&padding_code(s.config.padding).to_le_bytes());
    b[48..52].copy_from_slice(&(s.name.len() as u32).to_le_bytes());
    b[NAME_AT..NAME_AT + s.name.len()].copy_from_slice(&s.name);
    let crc = crc_of(&b[..124]);
    b[124..128].copy_from_slice(&crc.to_le_bytes());
    b
}

/// A slot's log config from its codes, if they are valid.
pub fn log_config_from_codes(capacity: u64, tail: u32, blocks: u32, stride: u32, align: u32) -> Option<LogConfig> {
    let tail = match tail {
        0 => TailStrategy::Naive,
        1 => TailStrategy::Rotating { blocks, stride },
        2 => TailStrategy::SelfValidating,
        _ => return None,
    };
    if tail != (TailStrategy::Rotating { blocks, stride }) && (blocks != 0 || stride != 0) {
        return None;
    }
    let padding = match align {
        8 => Padding::None,
        64 => Padding::Line,
        256 => Padding::XpLine,
        _ => return None,
    };
    let config = LogConfig::new(capacity, tail).with_padding(padding);
    config.validate().ok().map(|_| config)
}

/// A slot is valid iff magic and CRC match and its fields decode.
fn decode_slot(b: &[u8; SLOT_BYTES as usize]) -> Option<LogSlot> {
    if u64_at(b, 0) != SLOT_MAGIC || crc_of(&b[..124]) != u32_at(b, 124) {
        return None;
    }
    let name_len = u32_at(b, 48) as usize;
    if name_len == 0 || name_len > NAME_BYTES || u32_at(b, 52) != 0 || u32_at(b, 120) != 0 {
        return None;
    }
    let config = log_config_from_codes(u64_at(b, 24), u32_at(b, 32), u32_at(b, 36), u32_at(b, 40), u32_at(b, 44))?;
    Some(LogSlot { name: b[NAME_AT..NAME_AT + name_len].to_vec(), base: u64_at(b, 8), size: u64_at(b, 16), config })
}

fn check_slot(sb: &Superblock, slot: u32, s: &LogSlot) -> Result<(), PoolOpenError> {
    let bad = |why| Err(PoolOpenError::BadSlot { slot, why });
    if s.size != AppendLog::required_size(&s.config) {
        return bad("size disagrees with the config");
    }
    if !s.base.is_multiple_of(LOG_ALIGN) || s.base < sb.log_base {
        return bad("base outside the log area or misaligned");
    }
    if s.base.checked_add(s.size).is_none_or(|end| end > sb.log_base + sb.log_bytes) {
        return bad("log runs past the log area");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem::MemMedia;

    #[test]
    fn format_open_create_reopen() {
        let mut media = MemMedia::new(1 << 20);
        let config = PoolConfig { region_id: 9, dir_slots: 4, log_area_bytes: 64 << 10 };
        let pool = Pool::format_with_key(&mut media, config, 77).unwrap();
        let sb = *pool.superblock();
        assert_eq!((sb.region_id, sb.key, sb.log_base), (9, 77, 4096));
        assert_eq!(sb.data_base % 4096, 0);
        assert_eq!(sb.data_base + sb.data_bytes, 1 << 20);
        let mut pool = Pool::open(&media).unwrap();
        assert_eq!(*pool.superblock(), sb);
        let log_config = LogConfig::new(4096, TailStrategy::SelfValidating).with_padding(Padding::Line);
        let (id, mut log) = pool.create_log(&mut media, b"a", log_config).unwrap();
        log.append(&mut media, b"entry").unwrap();
        let rotating = LogConfig::new(8192, TailStrategy::ROTATING_PAPER);
        let (id2, _) = pool.create_log(&mut media, b"b", rotating).unwrap();
        assert_eq!((id, id2), (0, 1));
        assert_eq!(pool.create_log(&mut media, b"a", log_config).unwrap_err(), LogCreateError::Exists("a".into()));
        assert!(matches!(pool.create_log(&mut media, &[b'x'; 65], log_config), Err(LogCreateError::BadName(65))));
        let huge = LogConfig::new(1 << 20, TailStrategy::Naive);
        assert!(matches!(pool.create_log(&mut media, b"c", huge), Err(LogCreateError::NoSpace { .. })));
        let pool = Pool::open(&media).unwrap();
        assert_eq!(pool.find(b"b"), Some(1));
        let a = pool.slot(0).unwrap();
        assert_eq!(a.config, log_config);
        let log = AppendLog::open(&mut media, a.base).unwrap();
        assert_eq!(log.read_all(&media), vec![(0, b"entry".to_vec())]);
        assert!(pool.slot(1).unwrap().base >= a.base + a.size);
    }

    #[test]
    fn overflowing_log_capacities_are_refused() {
        let mut media = MemMedia::new(1 << 20);
        let config = PoolConfig { region_id: 9, dir_slots: 4, log_area_bytes: 64 << 10 };
        let mut pool = Pool::format_with_key(&mut media, config, 77).unwrap();
        let before = media.bytes().to_vec();
        let specs = [
            LogConfig::new(0xffff_ffff_ffff_ff00, TailStrategy::SelfValidating).with_padding(Padding::XpLine),
            LogConfig::new(0xffff_ffff_ffff_ffc0, TailStrategy::Rotating { blocks: 4, stride: 64 }),
        ];
        for log_config in specs {
            let err = pool.create_log(&mut media, b"huge", log_config).unwrap_err();
            assert!(matches!(err, LogCreateError::Config(CreateError::BadCapacity { .. })), "{err:?}");
        }
        assert!(media.bytes() == &before[..], "a refused create wrote");
        assert!(pool.create_log(&mut media, b"huge", LogConfig::new(4096, TailStrategy::Naive)).is_ok());
    }

    #[test]
    fn bad_superblocks_are_refused() {
        let mut media = MemMedia::new(64 << 10);
        assert!(matches!(Pool::open(&media), Err(PoolOpenError::NotFormatted { found: 0 })));
        let config = PoolConfig { region_id: 1, dir_slots: 2, log_area_bytes: 8192 };
        Pool::format(&mut media, config).unwrap();
        media.write(20, &[1]);
        assert_eq!(Pool::open(&media).unwrap_err(), PoolOpenError::Checksum);
        let tiny = PoolConfig { log_area_bytes: 1 << 20, ..config };
        assert!(matches!(Pool::format(&mut MemMedia::new(64 << 10), tiny), Err(FormatError::TooSmall { .. })));
        for log_area_bytes in [u64::MAX, u64::MAX - 8192] {
            let huge = PoolConfig { log_area_bytes, ..config };
            assert!(matches!(Pool::format(&mut MemMedia::new(64 << 10), huge), Err(FormatError::TooSmall { .. })));
        }
        assert_eq!(Pool::format(&mut media, PoolConfig { dir_slots: 0, ..config }).unwrap_err(), FormatError::BadSlots(0));
    }
}
