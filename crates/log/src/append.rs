//! [`AppendLog`]: a circular log of variable-length entries in persistent
//! memory, with three ways to record its tail (`docs/FORMAT.md`, "Logs").
//!
//! Positions are *logical* byte positions that never wrap; the physical
//! offset in the entry space is `pos % capacity`. Invariants, kept by every
//! method and re-established by `open`:
//! - `head.pos <= tail_pos` and `tail_pos - head.pos <= capacity`;
//! - an append starts only at `tail_pos <= MAX_POS` with
//!   `next_lsn < MAX_LSN` (else [`AppendError::Exhausted`]), so every
//!   position is at most `MAX_POS + 2 * capacity`, and `open` refuses a
//!   head beyond what appends can reach (`head.pos <= MAX_POS + capacity`,
//!   `head.lsn <= MAX_LSN`); with the capacity bound of
//!   [`LogConfig::validate`], no position arithmetic can overflow;
//! - entries `head.lsn .. next_lsn` lie back to back from `head.pos` to
//!   `tail_pos`, each `config.entry_size(len)` bytes, none crossing the end
//!   of the entry space: an entry that would is preceded by a skip word
//!   (`SKIP_BIT | lsn`) and starts the next lap;
//! - every acknowledged entry is durable, and so is the tail that covers it
//!   (naive, rotating) or its own checksum (self-validating);
//! - `head` is durable in the newer of two checksummed head slots;
//! - `index[i]` is the logical position of entry `head.lsn + i`, and
//!   `index.len() == next_lsn - head.lsn` (built by `open`'s walk, kept by
//!   every append and truncation): reading entry `lsn` is O(1);
//! - self-validating: no free space holds the length/CRC word and payload
//!   of an entry that would validate with an LSN `>= next_lsn`, except
//!   the one append or batch in flight (suffix truncation and recovery
//!   scrub them: `append/suffix.rs`, `append/batch.rs`).
//!
//! Batch append lives in `append/batch.rs`, suffix truncation and
//! restarting the log at another LSN in `append/suffix.rs`.

use std::collections::VecDeque;

use pmem::{Media, NoFlush, RotatingRegister, Rotation, LINE};

use crate::config::{rotation_span, Faults, LogConfig, TailStrategy, MAX_CAPACITY_BYTES, MAX_TAIL_SPAN_BYTES};
use crate::error::{AppendError, CreateError, OpenError, TruncateError};

mod batch;
mod suffix;
use crate::format::{
    self, crc_seed, decode_head, encode_head, entry_header, get_u32, EntryHeader, get_u64, put_u32, put_u64, Head, BASE_ALIGN,
    ENTRY_HEADER_BYTES, HEADER_BLOCK_BYTES, HEADER_LINE_BYTES, HEAD_SLOT_BYTES, MAX_POS, SKIP_BIT,
};
use crate::Lsn;

/// Offsets (from `base`) of the two head slots, each in its own line.
const HEAD_SLOTS: [u64; 2] = [64, 128];
/// Offset (from `base`) of the truncation record (self-validating logs).
const TRUNCATION_RECORD: u64 = 192;
/// Offset (from `base`) of the tail area.
const TAIL_AREA: u64 = HEADER_BLOCK_BYTES;
/// Largest LSN an entry may carry: bit 63 marks skip words.
pub(crate) const MAX_LSN: Lsn = SKIP_BIT - 1;
/// Entries up to this size prefetch every line of the next entry of the
/// same size during their drain; larger ones only its first and last
/// ([`prefetch_entry`]). Measured with `pmwire bench local --only log`.
pub const PREFETCH_AHEAD_MAX: u64 = 1024;
/// Written over the length/CRC word of a possible remnant: its length
/// field (`u32::MAX`) exceeds any payload, so no CRC can make it valid.
const SCRUBBED: u64 = u64::MAX;

/// The live form of the tail.
#[derive(Debug)]
enum Tail {
    Naive { offset: u64 },
    Rotating(RotatingRegister),
    SelfValidating,
}

/// A circular, durable log of byte entries (see the module docs).
#[derive(Debug)]
pub struct AppendLog {
    config: LogConfig,
    base: u64,
    entries: u64,
    seed: u32,
    head: Head,
    head_slot: usize,
    next_lsn: Lsn,
    tail_pos: u64,
    /// `tail_pos % capacity`, kept so that appends never divide.
    tail_phys: u64,
    tail: Tail,
    /// Logical positions of the retained entries (module invariants).
    index: VecDeque<u64>,
}

/// Where the next entry would go: its LSN, the logical tail and `tail % capacity`.
#[derive(Clone, Copy, Debug)]
struct At {
    lsn: Lsn,
    pos: u64,
    phys: u64,
}

/// Where an entry goes: the physical offset of its skip word (if it
/// wraps), the entry, its physical offset and its size.
type Placement = (Option<u64>, Placed, u64, u64);

/// Where one entry sits.
#[derive(Clone, Copy, Debug)]
struct Placed {
    lsn: Lsn,
    pos: u64,
    len: u64,
}

impl AppendLog {
    /// Media bytes the log needs at `base`: header block, tail area, entry
    /// space. `config` must pass [`LogConfig::validate`] (every path from
    /// a request or the media validates first): its bounds keep the sum
    /// far below 2^64, and this asserts them.
    pub fn required_size(config: &LogConfig) -> u64 {
        assert!(config.capacity <= MAX_CAPACITY_BYTES, "capacity {} of an unvalidated config", config.capacity);
        HEADER_BLOCK_BYTES + tail_area_bytes(config.tail) + config.capacity
    }

    /// Formats a new, empty log at `base` (a multiple of 256) whose first
    /// entry will be LSN 0.
    pub fn create<M: Media>(media: &mut M, base: u64, config: LogConfig) -> Result<AppendLog, CreateError> {
        AppendLog::create_at(media, base, config, 0)
    }

    /// Formats a new, empty log at `base` whose first entry will be LSN
    /// `first` (Raft: 1), which must be below `2^63 - 1`.
    pub fn create_at<M: Media>(
        media: &mut M,
        base: u64,
        config: LogConfig,
        first: Lsn,
    ) -> Result<AppendLog, CreateError> {
        config.validate()?;
        if first >= MAX_LSN {
            return Err(CreateError::BadFirstLsn { first });
        }
        check_create_bounds(media, base, AppendLog::required_size(&config))?;
        let nonce = format::fresh_nonce();
        let seed = crc_seed(nonce);
        let tail = format_tail(media, base, &config);
        let head = Head { lsn: first, pos: 0 };
        for slot in HEAD_SLOTS {
            media.write(base + slot, &encode_head(head, seed));
            media.flush(base + slot, HEAD_SLOT_BYTES as u64);
        }
        media.drain();
        // The header goes last: until it is durable, `open` finds no log.
        media.write(base, &encode_config(&config, nonce));
        media.persist(base, HEADER_LINE_BYTES as u64);
        let entries = base + HEADER_BLOCK_BYTES + tail_area_bytes(config.tail);
        let index = VecDeque::new();
        let (next_lsn, tail_pos, tail_phys) = (first, 0, 0);
        Ok(AppendLog { config, base, entries, seed, head, head_slot: 0, next_lsn, tail_pos, tail_phys, tail, index })
    }

    /// Recovers the log at `base`: reads the header and the head, then
    /// finds the tail (naive, rotating: the persisted tail, checked against
    /// the entries; self-validating: the first invalid entry after the
    /// head, after which the remnants of a torn append are scrubbed, so
    /// `open` may write to the media).
    pub fn open<M: Media>(media: &mut M, base: u64) -> Result<AppendLog, OpenError> {
        AppendLog::open_with_faults(media, base, Faults::default())
    }

    /// `open` with planted recovery bugs (tests only: faults are not stored
    /// in the header, so a crash check passes them again at recovery).
    #[doc(hidden)]
    pub fn open_with_faults<M: Media>(media: &mut M, base: u64, faults: Faults) -> Result<AppendLog, OpenError> {
        let version = format::APPEND_FORMAT_VERSION;
        let line = format::read_header(media, base, format::APPEND_MAGIC, "pmwire append log", version)?;
        let (mut config, nonce) = decode_config(&line)?;
        config.faults = faults;
        let needed = AppendLog::required_size(&config);
        if base.checked_add(needed).is_none_or(|end| end > media.len()) {
            return Err(OpenError::MediaTooSmall { base, have: media.len() });
        }
        let seed = crc_seed(nonce);
        let (head, head_slot) = read_head(media, base, seed)?;
        check_head(&config, head)?;
        let entries = base + HEADER_BLOCK_BYTES + tail_area_bytes(config.tail);
        let tail = live_tail(media, base, &config);
        let tail_phys = head.pos % config.capacity;
        let mut log = AppendLog {
            config,
            base,
            entries,
            seed,
            head,
            head_slot,
            next_lsn: head.lsn,
            tail_pos: head.pos,
            tail_phys,
            tail,
            index: VecDeque::new(),
        };
        let persisted_tail = match &log.tail {
            Tail::Naive { offset } => Some(media.read_u64(*offset)),
            Tail::Rotating(register) => Some(register.get()),
            Tail::SelfValidating => None,
        };
        match persisted_tail {
            Some(tail_pos) => log.walk_to_tail(media, tail_pos)?,
            None => log.recover_self_validating(media, faults)?,
        }
        log.tail_phys = log.tail_pos % log.config.capacity;
        assert!(log.tail_pos >= log.head.pos, "recovered tail below the head");
        assert!(log.tail_pos - log.head.pos <= log.config.capacity, "recovered more than the capacity");
        assert_eq!(log.index.len() as u64, log.next_lsn - log.head.lsn, "index covers the retained entries");
        Ok(log)
    }

    /// Self-validating recovery: finishes a suffix truncation in progress
    /// (its record bounds the scan), scans to the first invalid entry, then
    /// scrubs what the operation in flight may have left past the tail.
    fn recover_self_validating<M: Media>(&mut self, media: &mut M, faults: Faults) -> Result<(), OpenError> {
        let pending = self.pending_truncation(media)?;
        self.scan_to_tail(media, pending.map_or(MAX_LSN, |t| t.keep_lsn));
        if let Some(truncation) = pending {
            self.finish_truncation(media, truncation)?;
        }
        if !faults.skip_scrub {
            self.scrub_remnants(media);
            self.scrub_batch_window(media);
        }
        Ok(())
    }

    /// Appends `payload` as the next entry and returns its LSN once the
    /// entry is durable. On error nothing is written.
    ///
    /// Always inlined, with everything it calls but the copy, the flushes
    /// and the CRC: out of line, each append paid a call that saves seven
    /// registers and returns its `Result` through memory, and `place`'s
    /// placement came back through the stack (`docs/bench.md`, "Local log").
    /// A self-validating log takes its own branch, which reads neither the
    /// planted faults nor the tail, so nothing is kept on the stack across
    /// the copy and the flushes to decide what to do after the drain.
    #[inline(always)]
    pub fn append<M: Media>(&mut self, media: &mut M, payload: &[u8]) -> Result<Lsn, AppendError> {
        let placement = self.place(payload.len() as u64)?;
        let (_, placed, _, size) = placement;
        if let Tail::SelfValidating = self.tail {
            self.store_entry_and_drain(media, placement, payload, Some(self.seed));
            return Ok(placed.lsn);
        }
        let new_tail = placed.pos + size;
        let faults = self.config.faults;
        if faults.tail_before_entry {
            self.store_tail(media, new_tail, faults);
        }
        self.store_entry_and_drain(media, placement, payload, None);
        if !faults.tail_before_entry {
            self.store_tail(media, new_tail, faults);
        }
        Ok(placed.lsn)
    }

    /// Writes the entry `placement` describes (after its skip word, if it
    /// wraps), prefetches the next one, takes it as appended and drains.
    #[inline(always)]
    fn store_entry_and_drain<M: Media>(&mut self, media: &mut M, placement: Placement, payload: &[u8], seed: Option<u32>) {
        let (skip_at, placed, phys, size) = placement;
        if let Some(skip_phys) = skip_at {
            let at = self.entries + skip_phys;
            media.write_u64(at, SKIP_BIT | placed.lsn);
            media.flush(at, 8);
        }
        self.write_entry_nodrain(media, phys, placed.lsn, payload, seed);
        let next_phys = if phys + size == self.config.capacity { 0 } else { phys + size };
        if next_phys + size <= self.config.capacity {
            prefetch_entry(media, self.entries + next_phys, size);
        }
        // The bookkeeping (index, tail, LSN) before the drain, so that it
        // runs while the lines are written back; nothing reads it before
        // the append returns, and nothing on the media depends on it.
        self.advance(placed.pos, placed.pos + size, next_phys);
        media.drain();
    }

    /// Takes the entry at `pos` as appended: the tail moves to `new_tail`
    /// (`next_phys` physically), the index records `pos`.
    #[inline(always)]
    fn advance(&mut self, pos: u64, new_tail: u64, next_phys: u64) {
        self.index.push_back(pos);
        self.tail_pos = new_tail;
        self.tail_phys = next_phys;
        self.next_lsn += 1;
    }

    /// Durably drops every entry below `keep_from` (one head-slot persist).
    /// Keeping from at or below the head does nothing.
    pub fn truncate<M: Media>(&mut self, media: &mut M, keep_from: Lsn) -> Result<(), TruncateError> {
        if keep_from > self.next_lsn {
            return Err(TruncateError::BeyondTail { keep_from, next: self.next_lsn });
        }
        if keep_from <= self.head.lsn {
            return Ok(());
        }
        let pos = self.position(keep_from).unwrap_or(self.tail_pos);
        self.write_head(media, Head { lsn: keep_from, pos });
        Ok(())
    }

    /// Persists `head` in the slot not holding the current head, then
    /// takes it (the index drops the entries below it).
    fn write_head<M: Media>(&mut self, media: &mut M, head: Head) {
        assert!(head.lsn > self.head.lsn, "the head LSN only grows (the larger slot wins)");
        let slot = 1 - self.head_slot;
        let at = self.base + HEAD_SLOTS[slot];
        media.write(at, &encode_head(head, self.seed));
        media.persist(at, HEAD_SLOT_BYTES as u64);
        let dropped = (head.lsn.min(self.next_lsn) - self.head.lsn) as usize;
        self.index.drain(..dropped);
        self.head = head;
        self.head_slot = slot;
    }

    /// LSN of the first retained entry.
    pub fn head(&self) -> Lsn {
        self.head.lsn
    }

    /// LSN the next append will get.
    pub fn next_lsn(&self) -> Lsn {
        self.next_lsn
    }

    /// Number of retained entries.
    pub fn len(&self) -> u64 {
        self.next_lsn - self.head.lsn
    }

    /// Whether no entries are retained.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of entry space not holding retained entries.
    pub fn free_bytes(&self) -> u64 {
        self.config.capacity - (self.tail_pos - self.head.pos)
    }

    /// The log's configuration, as read from the header on `open`.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Where the log starts in its media.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Logical byte positions of the head and the tail (diagnostics).
    pub fn positions(&self) -> (u64, u64) {
        (self.head.pos, self.tail_pos)
    }

    /// Every retained entry, oldest first.
    pub fn read_all<M: Media>(&self, media: &M) -> Vec<(Lsn, Vec<u8>)> {
        self.iter(media).collect()
    }

    /// Iterates over the retained entries, oldest first.
    pub fn iter<'a, M: Media>(&'a self, media: &'a M) -> Entries<'a, M> {
        Entries { cursor: self.cursor(media), media }
    }

    /// Iterates over the retained entries from `from` on (from the head if
    /// `from` is below it; nothing if it is at or past the end).
    pub fn iter_from<'a, M: Media>(&'a self, media: &'a M, from: Lsn) -> Entries<'a, M> {
        let lsn = from.clamp(self.head.lsn, self.next_lsn);
        Entries { cursor: Cursor { log: self, media, lsn }, media }
    }

    /// Reads entry `lsn` into `dst` (cleared first); `false` if it is not
    /// retained. O(1): one index lookup, one header read, the payload copy.
    pub fn read_into<M: Media>(&self, media: &M, lsn: Lsn, dst: &mut Vec<u8>) -> bool {
        match self.placed(media, lsn) {
            Some(placed) => {
                self.read_payload(media, placed, dst);
                true
            }
            None => false,
        }
    }

    /// Absolute media offsets of entry `lsn`'s payload, for reading it in
    /// place; `None` if it is not retained. O(1).
    pub fn payload_range<M: Media>(&self, media: &M, lsn: Lsn) -> Option<std::ops::Range<u64>> {
        let placed = self.placed(media, lsn)?;
        let start = self.entries + placed.pos % self.config.capacity + ENTRY_HEADER_BYTES;
        Some(start..start + placed.len)
    }

    /// Logical position of retained entry `lsn` (from the index).
    fn position(&self, lsn: Lsn) -> Option<u64> {
        let offset = lsn.checked_sub(self.head.lsn)?;
        self.index.get(usize::try_from(offset).ok()?).copied()
    }

    /// Retained entry `lsn`, its length read from its header (trusted:
    /// `open` validated it or this process wrote it; asserted all the same).
    fn placed<M: Media>(&self, media: &M, lsn: Lsn) -> Option<Placed> {
        let pos = self.position(lsn)?;
        let at = self.entries + pos % self.config.capacity;
        let found = media.read_u64(at);
        assert_eq!(found, lsn, "entry {lsn} at position {pos} carries LSN {found}");
        let len = media.read_u64(at + 8) & u64::from(u32::MAX);
        assert!(len <= self.config.max_payload(), "entry {lsn} of {len} B beyond the maximum");
        Some(Placed { lsn, pos, len })
    }

    /// Absolute offset of the entry space in the media.
    pub(crate) fn entries_offset(&self) -> u64 {
        self.entries
    }

    fn cursor<'a, M: Media>(&'a self, media: &'a M) -> Cursor<'a, M> {
        Cursor { log: self, media, lsn: self.head.lsn }
    }

    fn read_payload<M: Media>(&self, media: &M, placed: Placed, dst: &mut Vec<u8>) {
        dst.clear();
        dst.resize(placed.len as usize, 0);
        media.read(self.entries + placed.pos % self.config.capacity + ENTRY_HEADER_BYTES, dst);
    }

    /// Decides where the next entry of `len` payload bytes goes: the
    /// physical offset of a skip word (if it must wrap), the entry, its
    /// physical offset and its size. No divisions: this is the hot path.
    #[inline(always)]
    fn place(&self, len: u64) -> Result<Placement, AppendError> {
        self.place_at(At { lsn: self.next_lsn, pos: self.tail_pos, phys: self.tail_phys }, len)
    }

    /// [`place`](Self::place) with the tail at `at` (a batch plans its
    /// entries with it before writing any).
    #[inline(always)]
    fn place_at(&self, at: At, len: u64) -> Result<Placement, AppendError> {
        let max = self.config.max_payload();
        if len > max {
            return Err(AppendError::TooLarge { len, max });
        }
        // Unreachable by appending (2^63 entries or bytes), but a head
        // slot on the media may start the log close to either limit.
        if at.lsn >= MAX_LSN || at.pos > MAX_POS {
            return Err(AppendError::Exhausted { next_lsn: at.lsn, tail_pos: at.pos });
        }
        let capacity = self.config.capacity;
        let size = self.config.entry_size(len);
        let phys = at.phys;
        let waste = if phys + size > capacity { capacity - phys } else { 0 };
        let free = capacity - (at.pos - self.head.pos);
        if waste + size > free {
            return Err(AppendError::Full { needed: waste + size, free });
        }
        let skip = (waste > 0).then_some(phys);
        let pos = at.pos + waste;
        let entry_phys = if waste > 0 { 0 } else { phys };
        debug_assert_eq!(pos % capacity, entry_phys);
        assert!(entry_phys + size <= capacity, "entry crosses the end of the ring");
        assert!(pos & (self.config.padding.align() as u64 - 1) == 0, "entry misaligned");
        Ok((skip, Placed { lsn: at.lsn, pos, len }, entry_phys, size))
    }

    /// Stores header and payload; durable at the next drain.
    #[inline(always)]
    fn write_entry_nodrain<M: Media>(&self, media: &mut M, phys: u64, lsn: Lsn, payload: &[u8], seed: Option<u32>) {
        store_entry_nodrain(media, self.entries + phys, payload, || entry_header(lsn, payload, seed));
    }

    /// Persists the naive or rotating tail (or, with a planted fault, only stores it).
    #[inline]
    fn store_tail<M: Media>(&mut self, media: &mut M, value: u64, faults: Faults) {
        match &mut self.tail {
            Tail::Naive { offset } if faults.skip_tail_flush => media.write_u64(*offset, value),
            Tail::Naive { offset } => media.persist_u64(*offset, value),
            Tail::Rotating(register) if faults.skip_tail_flush => register.set(&mut NoFlush(media), value),
            Tail::Rotating(register) => register.set(media, value),
            Tail::SelfValidating => unreachable!("a self-validating log has no tail word"),
        }
    }

    /// Naive/rotating recovery: walks the entries from the head to the
    /// persisted tail, which must land exactly on an entry boundary.
    fn walk_to_tail<M: Media>(&mut self, media: &M, tail_pos: u64) -> Result<(), OpenError> {
        let capacity = self.config.capacity;
        let corrupt = |pos, lsn, why: String| OpenError::Corrupt { pos, lsn, why };
        if tail_pos < self.head.pos || tail_pos - self.head.pos > capacity {
            let why = format!("tail {tail_pos} outside [head {}, head + capacity {capacity}]", self.head.pos);
            return Err(corrupt(tail_pos, self.head.lsn, why));
        }
        while self.tail_pos < tail_pos {
            let (lsn, pos) = (self.next_lsn, self.tail_pos);
            let Some(placed) = self.entry_at(media, lsn, pos, tail_pos, false) else {
                return Err(corrupt(pos, lsn, "no valid entry header below the persisted tail".into()));
            };
            let end = placed.pos + self.config.entry_size(placed.len);
            self.advance(placed.pos, end, 0);
        }
        if self.tail_pos != tail_pos {
            let why = format!("persisted tail {tail_pos} falls inside an entry");
            return Err(corrupt(self.tail_pos, self.next_lsn, why));
        }
        Ok(())
    }

    /// Self-validating recovery: accepts entries from the head, below LSN
    /// `stop`, while each carries the next LSN and a matching checksum.
    fn scan_to_tail<M: Media>(&mut self, media: &M, stop: Lsn) {
        let limit = self.head.pos + self.config.capacity;
        let verify = !self.config.faults.skip_checksum;
        while self.next_lsn < stop {
            let Some(placed) = self.entry_at(media, self.next_lsn, self.tail_pos, limit, verify) else { break };
            let end = placed.pos + self.config.entry_size(placed.len);
            self.advance(placed.pos, end, 0);
        }
    }

    /// Self-validating recovery, second half: the scrub. The append in
    /// flight at the crash wrote LSN `next_lsn` at the tail or, after a
    /// skip word, at the start of the next lap; it was not taken, but all
    /// of it but one word may be there. A later append of the same LSN to
    /// the same place rewrites the LSN word with the same value, so a crash
    /// could revive the old entry. Recovery therefore overwrites the
    /// length/CRC word at both places with [`SCRUBBED`] (a length no entry
    /// has): only a new append's own length/CRC word can make an entry
    /// there valid again. Idempotent; only free space is written.
    fn scrub_remnants<M: Media>(&self, media: &mut M) {
        let capacity = self.config.capacity;
        let phys = self.tail_pos % capacity;
        let free_end = self.head.pos + capacity;
        let at_tail = phys + ENTRY_HEADER_BYTES <= capacity && self.tail_pos + ENTRY_HEADER_BYTES <= free_end;
        let next_lap = self.tail_pos + (capacity - phys);
        let at_lap = phys != 0 && next_lap + ENTRY_HEADER_BYTES <= free_end;
        let mut dirty = false;
        for (wanted, phys) in [(at_tail, phys), (at_lap, 0)] {
            let word = self.entries + phys + 8;
            if wanted && media.read_u64(word) != SCRUBBED {
                media.write_u64(word, SCRUBBED);
                media.flush(word, 8);
                dirty = true;
            }
        }
        if dirty {
            media.drain();
        }
    }

    /// The entry `lsn` if it starts at `pos` (or, after a skip word at
    /// `pos`, at the next lap) and ends by `limit`; with `verify`, only if
    /// its checksum matches.
    fn entry_at<M: Media>(&self, media: &M, lsn: Lsn, pos: u64, limit: u64, verify: bool) -> Option<Placed> {
        // No append writes an LSN at or above MAX_LSN; `open` bounded `pos`.
        if lsn >= MAX_LSN {
            return None;
        }
        assert!(pos <= MAX_POS + 2 * self.config.capacity, "entry position {pos} beyond the bounded range");
        let capacity = self.config.capacity;
        let phys = pos % capacity;
        let pos = if media.read_u64(self.entries + phys) == SKIP_BIT | lsn { pos + capacity - phys } else { pos };
        let phys = pos % capacity;
        if phys + ENTRY_HEADER_BYTES > capacity {
            return None;
        }
        let mut header = [0u8; ENTRY_HEADER_BYTES as usize];
        media.read(self.entries + phys, &mut header);
        let len = get_u32(&header, 8) as u64;
        if get_u64(&header, 0) != lsn || len > self.config.max_payload() {
            return None;
        }
        let end = pos.checked_add(self.config.entry_size(len))?;
        if end > limit || phys + (end - pos) > capacity {
            return None;
        }
        if verify && !self.checksum_matches(media, &header, self.entries + phys + ENTRY_HEADER_BYTES, len) {
            return None;
        }
        Some(Placed { lsn, pos, len })
    }

    /// Whether the checksum in `header` ([`format::entry_crc`]) covers it
    /// and the `len` payload bytes at `at`.
    fn checksum_matches<M: Media>(&self, media: &M, header: &[u8], at: u64, len: u64) -> bool {
        let mut payload = vec![0u8; len as usize];
        media.read(at, &mut payload);
        let crc = format::entry_crc(self.seed, get_u64(header, 0), get_u32(header, 8), &payload);
        crc == get_u32(header, 12)
    }
}

/// Walks retained entries through the index (trusted: `open` validated them).
struct Cursor<'a, M: Media> {
    log: &'a AppendLog,
    media: &'a M,
    lsn: Lsn,
}

impl<M: Media> Iterator for Cursor<'_, M> {
    type Item = Placed;

    fn next(&mut self) -> Option<Placed> {
        let placed = self.log.placed(self.media, self.lsn)?;
        self.lsn += 1;
        Some(placed)
    }
}

/// Iterator over `(lsn, payload)` of the retained entries; see [`AppendLog::iter`].
pub struct Entries<'a, M: Media> {
    cursor: Cursor<'a, M>,
    media: &'a M,
}

impl<M: Media> Iterator for Entries<'_, M> {
    type Item = (Lsn, Vec<u8>);

    fn next(&mut self) -> Option<(Lsn, Vec<u8>)> {
        let placed = self.cursor.next()?;
        let mut payload = Vec::new();
        self.cursor.log.read_payload(self.media, placed, &mut payload);
        Some((placed.lsn, payload))
    }
}


/// Bytes of the tail area for `tail`, rounded up to whole XPLines (at
/// most `MAX_TAIL_SPAN_BYTES` rounded up, for a validated config).
fn tail_area_bytes(tail: TailStrategy) -> u64 {
    match tail {
        TailStrategy::Naive => BASE_ALIGN,
        TailStrategy::Rotating { blocks, stride } => {
            let span = rotation_span(blocks.max(1), stride);
            assert!(span <= MAX_TAIL_SPAN_BYTES, "rotating tail of {blocks} x {stride} B in an unvalidated config");
            span.div_ceil(BASE_ALIGN) * BASE_ALIGN
        }
        TailStrategy::SelfValidating => 0,
    }
}

/// Checks a head read from the media against the bounds the log's
/// arithmetic relies on (module invariants): a head slot checksums with
/// the log's seed, but that does not make its values possible.
fn check_head(config: &LogConfig, head: Head) -> Result<(), OpenError> {
    let corrupt = |why: &str| Err(OpenError::Corrupt { pos: head.pos, lsn: head.lsn, why: why.into() });
    if head.lsn > MAX_LSN {
        return corrupt("head LSN above 2^63 - 1");
    }
    if head.pos > MAX_POS + config.capacity {
        return corrupt("head position above 2^63 + capacity");
    }
    if !head.pos.is_multiple_of(config.padding.align() as u64) {
        return corrupt("head position not a multiple of the entry alignment");
    }
    Ok(())
}

/// The rotation of a rotating tail at `base`.
fn rotation(base: u64, blocks: u32, stride: u32) -> Rotation {
    Rotation::new(base + TAIL_AREA, blocks, stride)
}

/// Checks alignment and size before `create` writes anything.
pub(crate) fn check_create_bounds<M: Media>(media: &M, base: u64, needed: u64) -> Result<(), CreateError> {
    if !base.is_multiple_of(BASE_ALIGN) {
        return Err(CreateError::Misaligned { base, align: BASE_ALIGN });
    }
    if base.checked_add(needed).is_none_or(|end| end > media.len()) {
        return Err(CreateError::MediaTooSmall { needed, base, have: media.len() });
    }
    Ok(())
}

/// Formats the tail area (flushed; the caller drains) and returns the live tail.
fn format_tail<M: Media>(media: &mut M, base: u64, config: &LogConfig) -> Tail {
    match config.tail {
        TailStrategy::Naive => {
            let offset = base + TAIL_AREA;
            media.write_u64(offset, 0);
            media.flush(offset, 8);
            Tail::Naive { offset }
        }
        TailStrategy::Rotating { blocks, stride } => {
            Tail::Rotating(RotatingRegister::create(media, rotation(base, blocks, stride)))
        }
        TailStrategy::SelfValidating => Tail::SelfValidating,
    }
}

/// The live tail of an existing log (the value is read by `open`).
fn live_tail<M: Media>(media: &M, base: u64, config: &LogConfig) -> Tail {
    match config.tail {
        TailStrategy::Naive => Tail::Naive { offset: base + TAIL_AREA },
        TailStrategy::Rotating { blocks, stride } => {
            Tail::Rotating(RotatingRegister::recover(media, rotation(base, blocks, stride)))
        }
        TailStrategy::SelfValidating => Tail::SelfValidating,
    }
}

/// Reads both head slots; the valid one with the larger LSN wins.
fn read_head<M: Media>(media: &M, base: u64, seed: u32) -> Result<(Head, usize), OpenError> {
    let mut best: Option<(Head, usize)> = None;
    for (index, slot) in HEAD_SLOTS.iter().enumerate() {
        let mut bytes = [0u8; HEAD_SLOT_BYTES];
        media.read(base + slot, &mut bytes);
        if let Some(head) = decode_head(&bytes, seed) {
            if best.is_none_or(|(b, _)| head.lsn > b.lsn) {
                best = Some((head, index));
            }
        }
    }
    best.ok_or(OpenError::BadHead)
}

/// The header line of an append log.
fn encode_config(config: &LogConfig, nonce: u64) -> [u8; HEADER_LINE_BYTES] {
    let mut line = [0u8; HEADER_LINE_BYTES];
    put_u64(&mut line, 0, format::APPEND_MAGIC);
    put_u32(&mut line, 8, format::APPEND_FORMAT_VERSION);
    put_u32(&mut line, 12, config.tail.code());
    put_u64(&mut line, 16, config.capacity);
    put_u32(&mut line, 24, config.padding.align() as u32);
    let (blocks, stride) = match config.tail {
        TailStrategy::Rotating { blocks, stride } => (blocks, stride),
        _ => (0, 0),
    };
    put_u32(&mut line, 28, blocks);
    put_u32(&mut line, 32, stride);
    put_u64(&mut line, 40, nonce);
    format::seal_header(&mut line);
    line
}

/// Parses a checksummed header line back into a config and the nonce.
fn decode_config(line: &[u8; HEADER_LINE_BYTES]) -> Result<(LogConfig, u64), OpenError> {
    let bad = |why: String| OpenError::BadConfig { why };
    let tail = match get_u32(line, 12) {
        0 => TailStrategy::Naive,
        1 => TailStrategy::Rotating { blocks: get_u32(line, 28), stride: get_u32(line, 32) },
        2 => TailStrategy::SelfValidating,
        code => return Err(bad(format!("unknown tail strategy {code}"))),
    };
    let padding = match get_u32(line, 24) {
        8 => pmem::Padding::None,
        64 => pmem::Padding::Line,
        256 => pmem::Padding::XpLine,
        align => return Err(bad(format!("unknown padding alignment {align}"))),
    };
    let config = LogConfig::new(get_u64(line, 16), tail).with_padding(padding);
    config.validate().map_err(|e| bad(e.to_string()))?;
    Ok((config, get_u64(line, 40)))
}

/// Stores one entry, `header()` then `payload`, at `at`, and flushes its
/// lines; durable at the next drain. The log's write path, public so that
/// a benchmark can measure the same stores and flushes with no log around
/// them (`pmwire bench local`'s `persist_floor`).
///
/// The payload past the header's last cache line starts on a line
/// boundary: it goes out first (streamed above the media's threshold), and
/// `header` (the checksum) is computed while those lines drain. Then the
/// header and the payload bytes that share its line are stored, and that
/// line is flushed once. Nothing is durable before the caller's drain, so
/// the order within the entry does not matter for recovery.
#[inline(always)]
pub fn store_entry_nodrain<M: Media>(media: &mut M, at: u64, payload: &[u8], header: impl FnOnce() -> EntryHeader) {
    let header_end = at + ENTRY_HEADER_BYTES;
    let line = LINE as u64;
    let shared = ((line - header_end % line) % line).min(payload.len() as u64) as usize;
    if shared < payload.len() {
        media.memcpy_nodrain(header_end + shared as u64, &payload[shared..]);
    }
    let header = header();
    // Straight to the media, no staging buffer: fewer stores in flight
    // behind the previous append's drain.
    media.write(at, &header);
    if shared > 0 {
        media.write(header_end, &payload[..shared]);
    }
    media.flush(at, ENTRY_HEADER_BYTES + shared as u64);
}

/// Fetches for writing the lines that an entry of `size` bytes at `at`
/// will store to with ordinary stores: all of them up to
/// [`PREFETCH_AHEAD_MAX`], else only the first line (the header) and the
/// last (the payload's partial tail), since the lines between are streamed
/// with non-temporal stores, which a cached line would only slow down.
/// The log calls it for the next entry between an entry's stores and its
/// drain, so the fetch overlaps the wait (a hint: nothing on media
/// changes). Public for the same reason as [`store_entry_nodrain`].
#[inline]
pub fn prefetch_entry<M: Media>(media: &M, at: u64, size: u64) {
    if size <= PREFETCH_AHEAD_MAX {
        media.prefetch_write(at, size);
    } else {
        media.prefetch_write(at, 1);
        media.prefetch_write(at + size - 1, 1);
    }
}
