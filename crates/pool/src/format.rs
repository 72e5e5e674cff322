//! The pool's header and layout (docs/FORMAT.md, "Buffer pool and KV
//! engine"). Invariants: every field is fixed-width little-endian; the
//! header is 256 B at `base`, sealed by a CRC-32C over `[0, 252)`, written
//! once (last) by `create` and never again; sections and the buffer area
//! start on 4 KB boundaries, in the order the header lists them, without
//! overlap, and the buffer area comes last.

use pmem::le::{get_u32, get_u64, put_u32, put_u64};

use crate::error::{CreateError, OpenError};

/// `b"PMWPPOOL"`: a pool starts here.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PMWPPOOL");
/// Format version this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// A pool's `base`, its sections and its buffer area are multiples of this.
pub const BASE_ALIGN: u64 = 4096;
/// Bytes of the header.
pub const HEADER_BYTES: usize = 256;
/// Sections a header can record.
pub const MAX_SECTIONS: usize = 8;
/// Buffer indices at and above this are never buffers: structures may
/// use them as markers in extent words (the KV engine's record headers).
pub const RESERVED_BUF_IDX: u32 = 0xFF00_0000;
/// PASTE's buffer size (seed 001 §3.2).
pub const DEFAULT_BUF_SIZE: u32 = 2048;
/// The largest buffer: an on-log extent offset has 13 bits.
pub const MAX_BUF_SIZE: u32 = 8192;
const SECTIONS_AT: usize = 48;
const SECTION_BYTES: usize = 24;
const CRC_AT: usize = 252;

/// A region of the pool set aside for a structure (a log, a tree).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Section {
    /// The owner's tag (the structure decides; 0 is not allowed).
    pub tag: u32,
    /// Media offset (absolute, 4 KB aligned).
    pub offset: u64,
    /// Bytes.
    pub bytes: u64,
}

/// What to lay out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Bytes per buffer: a multiple of 64 in `64 ..= 8192` (default 2048).
    pub buf_size: u32,
    /// Number of buffers (`1 ..= RESERVED_BUF_IDX`).
    pub buffers: u32,
    /// `(tag, bytes)` of each section, in order (at most 8, distinct non-zero tags).
    pub sections: Vec<(u32, u64)>,
}

impl PoolConfig {
    /// `buffers` buffers of the default 2 KB and no sections.
    pub fn new(buffers: u32) -> PoolConfig {
        PoolConfig { buf_size: DEFAULT_BUF_SIZE, buffers, sections: Vec::new() }
    }
}

/// Where everything is: computed from a [`PoolConfig`] by `create`, read
/// from the header by `open`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Where the pool starts.
    pub base: u64,
    /// Bytes per buffer.
    pub buf_size: u32,
    /// Number of buffers.
    pub buffers: u32,
    /// Media offset of buffer 0.
    pub buffers_at: u64,
    /// Bytes from `base` to the end of the buffer area.
    pub total_bytes: u64,
    /// The sections, in order.
    pub sections: Vec<Section>,
    /// Random, chosen by `create`: tells this pool from an earlier one at the same place.
    pub nonce: u64,
}

fn align_up(value: u64) -> Option<u64> {
    value.checked_add(BASE_ALIGN - 1).map(|v| v & !(BASE_ALIGN - 1))
}

impl Layout {
    /// Lays out `config` at `base`.
    pub fn new(base: u64, config: &PoolConfig, nonce: u64) -> Result<Layout, CreateError> {
        if !base.is_multiple_of(BASE_ALIGN) {
            return Err(CreateError::Misaligned { base, align: BASE_ALIGN });
        }
        let bad = |why: String| Err(CreateError::BadConfig { why });
        let size = config.buf_size;
        if !(64..=MAX_BUF_SIZE).contains(&size) || !size.is_multiple_of(64) {
            return bad(format!("buffer size {size}: need a multiple of 64 in 64 ..= {MAX_BUF_SIZE}"));
        }
        if config.buffers == 0 || config.buffers > RESERVED_BUF_IDX {
            return bad(format!("{} buffers: need 1 ..= {RESERVED_BUF_IDX}", config.buffers));
        }
        if config.sections.len() > MAX_SECTIONS {
            return bad(format!("{} sections, at most {MAX_SECTIONS}", config.sections.len()));
        }
        // Offsets relative to `base` first: every one is at most `total_bytes`,
        // so once `base + total_bytes` is known to fit, none of the absolute
        // offsets can overflow (section sizes may come from a header on the media).
        let too_big = || CreateError::BadConfig { why: "too big".into() };
        let mut at = BASE_ALIGN;
        let mut sections = Vec::new();
        for (i, &(tag, bytes)) in config.sections.iter().enumerate() {
            if tag == 0 || config.sections[..i].iter().any(|&(t, _)| t == tag) {
                return bad(format!("section tag {tag} zero or repeated"));
            }
            sections.push(Section { tag, offset: at, bytes });
            at = at.checked_add(bytes).and_then(align_up).ok_or_else(too_big)?;
        }
        let buffer_bytes = config.buffers as u64 * size as u64;
        let total_bytes = at.checked_add(buffer_bytes).ok_or_else(too_big)?;
        base.checked_add(total_bytes).ok_or_else(too_big)?;
        sections.iter_mut().for_each(|s| s.offset += base);
        let (buf_size, buffers, buffers_at) = (size, config.buffers, base + at);
        Ok(Layout { base, buf_size, buffers, buffers_at, total_bytes, sections, nonce })
    }

    /// The header bytes recording this layout, sealed.
    pub fn header(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        put_u64(&mut h, 0, MAGIC);
        put_u32(&mut h, 8, FORMAT_VERSION);
        put_u32(&mut h, 12, self.buf_size);
        put_u32(&mut h, 16, self.buffers);
        put_u32(&mut h, 20, self.sections.len() as u32);
        put_u64(&mut h, 24, self.nonce);
        put_u64(&mut h, 32, self.buffers_at - self.base);
        put_u64(&mut h, 40, self.total_bytes);
        for (i, s) in self.sections.iter().enumerate() {
            let at = SECTIONS_AT + i * SECTION_BYTES;
            put_u32(&mut h, at, s.tag);
            put_u64(&mut h, at + 8, s.offset - self.base);
            put_u64(&mut h, at + 16, s.bytes);
        }
        let crc = crc32c::crc32c(&h[..CRC_AT]);
        put_u32(&mut h, CRC_AT, crc);
        h
    }

    /// Decodes and checks a header read at `base`.
    pub fn from_header(base: u64, h: &[u8; HEADER_BYTES]) -> Result<Layout, OpenError> {
        let found = get_u64(h, 0);
        if found != MAGIC {
            return Err(OpenError::BadMagic { base, found });
        }
        if get_u32(h, CRC_AT) != crc32c::crc32c(&h[..CRC_AT]) {
            return Err(OpenError::HeaderChecksum { base });
        }
        let version = get_u32(h, 8);
        if version != FORMAT_VERSION {
            return Err(OpenError::UnsupportedVersion { found: version, supported: FORMAT_VERSION });
        }
        let count = get_u32(h, 20) as usize;
        if count > MAX_SECTIONS {
            return Err(OpenError::BadConfig { why: format!("{count} sections") });
        }
        let sections = (0..count)
            .map(|i| {
                let at = SECTIONS_AT + i * SECTION_BYTES;
                (get_u32(h, at), get_u64(h, at + 16))
            })
            .collect();
        let config = PoolConfig { buf_size: get_u32(h, 12), buffers: get_u32(h, 16), sections };
        let layout = Layout::new(base, &config, get_u64(h, 24)).map_err(|e| OpenError::BadConfig { why: e.to_string() })?;
        // The header must say exactly what the layout rule gives.
        if layout.header() != *h {
            return Err(OpenError::BadConfig { why: "offsets differ from the layout rule".into() });
        }
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_sections_are_aligned() {
        let config = PoolConfig { buf_size: 2048, buffers: 100, sections: vec![(1, 100), (7, 8192), (3, 1)] };
        let layout = Layout::new(8192, &config, 42).unwrap();
        assert_eq!(layout.sections[0].offset, 8192 + 4096);
        assert_eq!(layout.sections[1].offset, 8192 + 8192);
        assert_eq!(layout.sections[2].offset, 8192 + 16384);
        assert_eq!(layout.buffers_at, 8192 + 20480);
        assert_eq!(layout.total_bytes, 20480 + 100 * 2048);
        assert_eq!(Layout::from_header(8192, &layout.header()).unwrap(), layout);
        let mut torn = layout.header();
        torn[100] ^= 1;
        assert_eq!(Layout::from_header(8192, &torn), Err(OpenError::HeaderChecksum { base: 8192 }));
    }

    #[test]
    fn bad_configs_are_refused() {
        let bad = |buf_size, buffers, sections: Vec<(u32, u64)>| {
            Layout::new(0, &PoolConfig { buf_size, buffers, sections }, 0).is_err()
        };
        assert!(bad(100, 1, vec![]));
        assert!(bad(16384, 1, vec![]));
        assert!(bad(2048, 0, vec![]));
        assert!(bad(2048, RESERVED_BUF_IDX + 1, vec![]));
        assert!(bad(2048, 1, vec![(0, 1)]));
        assert!(bad(2048, 1, vec![(1, 1), (1, 2)]));
        assert!(Layout::new(4, &PoolConfig::new(1), 0).is_err());
    }

    /// A section near 2^64 B puts the buffer area at `base + 2^64 - 4096`:
    /// refused, not overflowed, both when laid out and when read back.
    #[test]
    fn offsets_past_2_64_are_refused() {
        let huge = PoolConfig { buf_size: 64, buffers: 1, sections: vec![(1, u64::MAX - 8192)] };
        assert!(matches!(Layout::new(4096, &huge, 0), Err(CreateError::BadConfig { .. })));
        let near_end = !(BASE_ALIGN - 1);
        assert!(matches!(Layout::new(near_end, &PoolConfig::new(1), 0), Err(CreateError::BadConfig { .. })));
        // The same section in a header sealed with a valid CRC.
        let mut h = [0u8; HEADER_BYTES];
        put_u64(&mut h, 0, MAGIC);
        put_u32(&mut h, 8, FORMAT_VERSION);
        put_u32(&mut h, 12, 64);
        put_u32(&mut h, 16, 1);
        put_u32(&mut h, 20, 1);
        put_u32(&mut h, SECTIONS_AT, 1);
        put_u64(&mut h, SECTIONS_AT + 8, 4096);
        put_u64(&mut h, SECTIONS_AT + 16, u64::MAX - 8192);
        let crc = crc32c::crc32c(&h[..CRC_AT]);
        put_u32(&mut h, CRC_AT, crc);
        assert!(matches!(Layout::from_header(4096, &h), Err(OpenError::BadConfig { .. })));
    }
}
