//! Extent chains (docs/FORMAT.md, "Extent chains"): the extent list of a
//! value too long for a WAL record (a large value received zero-copy into
//! thousands of pool buffers), stored in pool buffers of its own, which a
//! record or tree value names by its first chunk.
//!
//! A chain is one or more *chunks*, one per pool buffer, each at offset 0:
//! a 32 B header — `magic u32 = "XCHN"`, `count u32` (extent words in this
//! chunk), `next u32` (the next chunk's buffer, [`NO_NEXT`] for the last),
//! `seq u32` (the chunk's position, 0 first), `total u64` (extent words of
//! the whole chain), `crc u32` (CRC-32C of the 32 header bytes with this
//! field zero, then the words), `head u32` (the buffer of chunk 0) — then
//! `count` extent words (8 B LE, [`pmwire_log::Extent::pack`]).
//!
//! A chain is written once, before anything durable names it, and never
//! changed: its chunks are flushed when the value is staged, so the
//! commit's data drain covers them before the record naming the chain is
//! appended. Recovery validates every chunk (magic, CRC, position, head,
//! totals, a walk no longer than `total` needs), so a chunk that was not
//! durable when its record was (a bug) is reported as corruption rather
//! than read as extents.
//!
//! Invariants: the chunks hold the list's words in order, each at least
//! one and at most [`chunk_capacity`]; every chunk of a chain is referenced (one pool reference each) by each record and tree
//! value naming the chain.

use pmem::Media;
use pmwire_log::Extent;
use pmwire_pool::Pool;

/// `b"XCHN"` as a little-endian `u32`.
pub const CHAIN_MAGIC: u32 = u32::from_le_bytes(*b"XCHN");
/// Bytes of a chunk header.
pub const CHUNK_HEADER: usize = 32;
/// `next` of a chain's last chunk.
pub const NO_NEXT: u32 = u32::MAX;
/// The most extents one value may have (a 512 MiB value in pieces of 128 B).
pub const MAX_CHAIN_EXTENTS: usize = 1 << 22;

/// Extent words one chunk of a `buf_size`-byte buffer holds.
pub fn chunk_capacity(buf_size: u32) -> usize {
    (buf_size as usize - CHUNK_HEADER) / 8
}

/// The bytes of chunk `seq` of a chain of `total` words whose first chunk is
/// in buffer `head`: the header, then `words`.
pub fn encode_chunk(head: u32, seq: u32, next: u32, total: u64, words: &[Extent]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(CHUNK_HEADER + 8 * words.len());
    bytes.extend(CHAIN_MAGIC.to_le_bytes());
    bytes.extend((words.len() as u32).to_le_bytes());
    bytes.extend(next.to_le_bytes());
    bytes.extend(seq.to_le_bytes());
    bytes.extend(total.to_le_bytes());
    bytes.extend(0u32.to_le_bytes());
    bytes.extend(head.to_le_bytes());
    bytes.extend(words.iter().flat_map(|e| e.pack().to_le_bytes()));
    let crc = crc32c::crc32c(&bytes);
    bytes[24..28].copy_from_slice(&crc.to_le_bytes());
    bytes
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 B"))
}

/// Reads the chain whose first chunk is `head` (an extent naming chunk 0 in
/// its buffer): its extent words, and the extents of its chunks (each holds
/// a reference). Every chunk is validated; an error names what is wrong.
pub fn read_chain<M: Media>(pool: &Pool, media: &M, head: Extent) -> Result<(Vec<Extent>, Vec<Extent>), String> {
    let size = pool.buf_size();
    let per = chunk_capacity(size);
    let mut words = Vec::new();
    let mut chunks = Vec::new();
    let mut buf = head.buf_idx;
    let mut total: Option<u64> = None;
    let mut header = [0u8; CHUNK_HEADER];
    loop {
        let seq = chunks.len() as u32;
        let bad = |why: String| format!("extent chain at buffer {} chunk {seq} (buffer {buf}): {why}", head.buf_idx);
        let probe = Extent { buf_idx: buf, offset: 0, len: CHUNK_HEADER as u16 };
        pool.check_extent(probe).map_err(|e| bad(e.to_string()))?;
        media.read(pool.extent_offset(probe), &mut header);
        if u32_at(&header, 0) != CHAIN_MAGIC {
            return Err(bad("no chunk magic".into()));
        }
        let count = u32_at(&header, 4) as usize;
        let next = u32_at(&header, 8);
        let chunk_total = u64::from_le_bytes(header[16..24].try_into().expect("8 B"));
        if count == 0 || count > per {
            return Err(bad(format!("{count} words (1..={per})")));
        }
        if u32_at(&header, 12) != seq || u32_at(&header, 28) != head.buf_idx {
            return Err(bad("chunk of another chain or position".into()));
        }
        if chunk_total == 0 || chunk_total > MAX_CHAIN_EXTENTS as u64 || total.is_some_and(|t| t != chunk_total) {
            return Err(bad(format!("chain of {chunk_total} words")));
        }
        total = Some(chunk_total);
        let used = Extent { buf_idx: buf, offset: 0, len: (CHUNK_HEADER + 8 * count) as u16 };
        let mut bytes = vec![0u8; used.len as usize];
        media.read(pool.extent_offset(used), &mut bytes);
        let crc = u32_at(&bytes, 24);
        bytes[24..28].fill(0);
        if crc32c::crc32c(&bytes) != crc {
            return Err(bad("checksum mismatch (a chunk that was not durable)".into()));
        }
        words.extend(crate::record::extent_words(&bytes[CHUNK_HEADER..]));
        chunks.push(used);
        let done = words.len() as u64;
        match (next, done.cmp(&chunk_total)) {
            (NO_NEXT, std::cmp::Ordering::Equal) => break,
            (NO_NEXT, _) => return Err(bad(format!("ends after {done} of {chunk_total} words"))),
            (_, std::cmp::Ordering::Less) => buf = next,
            _ => return Err(bad(format!("continues after {done} of {chunk_total} words"))),
        }
    }
    Ok((words, chunks))
}
