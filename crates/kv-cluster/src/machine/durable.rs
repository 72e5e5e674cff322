//! The machine's replication state on a persistent keyspace: the applied
//! index, the time and the write index ([`WriteIndex`]), as internal
//! entries written in the same failure-atomic commit as the batch of
//! applied writes they describe (`docs/FORMAT.md`, "The Redis machine's
//! internal entries").
//!
//! Per batch, a constant number of entries whatever the batch wrote: the
//! state entry `10 'M'` ([`META_KEY`]) and, if the write index changed, one
//! *journal entry*: the batch's ops ([`WriteIndex::journal`]) in the next
//! *slot* `10 'J' slot`. A slot's key is reused: the journal is a ring
//! restarted at slot 0 after each *dump*, which writes the whole table in
//! parts of at most [`PART_BYTES`] (`10 'T' part`) under a header (`10 'D'`)
//! naming the applied index it stands for. The machine dumps instead of
//! journaling when the journal would outgrow the table (or its slot count
//! bound), after a flush (which wiped every internal entry), and at the
//! first commit of a fresh or migrated keyspace. A slot not counted by the
//! state entry is stale (of an earlier dump) and never read; a dump deletes
//! those older than the journal it ends, so they hold at most one journal's
//! bytes.
//!
//! Reading back ([`load`]): the dump, then the state entry's slot count of
//! journal entries replayed in order through [`WriteIndex::replay`] (the
//! same logic as the live table): the table the other members have at the
//! same applied index. Every length, count, checksum and index is checked;
//! a refusal names what failed ([`OpenError::Corrupt`]).
//!
//! A keyspace written by the previous layout (a 32-byte state entry and one
//! `10 'W' key` entry per remembered key) is migrated: read as before, and
//! the first commit dumps the table and deletes the `10 'W'` entries.

use pmwire_keyspace::store::StoreError;

use super::{MachineKeyspace, OpenError, MACHINE_TAG, META_KEY, WRITES_PREFIX};
use crate::track::{Bounds, WriteIndex, MAX_TRACKED_BYTES, MAX_TRACKED_KEYS, MAX_TRACKED_KEY_BYTES, OP_BYTES, OP_WRITE};

/// The write index dump's header (`10 'D'`).
pub const DUMP_KEY: &[u8] = &[MACHINE_TAG, b'D'];
/// The prefix of the dump's parts (`10 'T'` + part number u32 BE).
pub const DUMP_PART_PREFIX: &[u8] = &[MACHINE_TAG, b'T'];
/// The prefix of the journal's slots (`10 'J'` + slot number u32 BE).
pub const JOURNAL_PREFIX: &[u8] = &[MACHINE_TAG, b'J'];
/// Bytes of the state entry: applied index, time, floor, flush, journal slots.
pub const META_BYTES: usize = 40;
/// Bytes of the previous layout's state entry (no slot count).
const LEGACY_META_BYTES: usize = 32;
/// Bytes of the dump header.
const HEADER_BYTES: usize = 48;
/// Most bytes of a dump part (its records are never split).
pub const PART_BYTES: usize = 32 << 10;
/// Bytes of a part before its records (part number, record count).
const PART_HEAD: usize = 8;
/// Bytes of a journal entry before its ops (batch index, dump index, op count).
const SLOT_HEAD: usize = 20;
/// Most journal slots (the ring's size).
pub const MAX_JOURNAL_SLOTS: u32 = 4096;
/// The journal may always grow to this many bytes before a dump.
pub const MIN_JOURNAL_BYTES: u64 = 64 << 10;
/// Most bytes of one batch's ops in a journal entry (more: a dump instead).
pub const MAX_SLOT_OPS_BYTES: usize = 1 << 20;
/// Most bytes of a dump's records: every key at its bound.
const MAX_DUMP_BYTES: u64 = (MAX_TRACKED_KEYS * OP_BYTES + MAX_TRACKED_BYTES) as u64;
/// Most parts of a dump (each but the last holds more than
/// `PART_BYTES - PART_HEAD - 4 - OP_BYTES - MAX_TRACKED_KEY_BYTES` bytes).
pub const MAX_DUMP_PARTS: u32 = 1024;
/// Most bytes of the journal entries a state entry counts.
const MAX_JOURNAL_BYTES: u64 = if MIN_JOURNAL_BYTES > MAX_DUMP_BYTES { MIN_JOURNAL_BYTES } else { MAX_DUMP_BYTES };

const _: () = assert!(MAX_DUMP_PARTS as u64 * (PART_BYTES - PART_HEAD - 4 - OP_BYTES - MAX_TRACKED_KEY_BYTES) as u64 > MAX_DUMP_BYTES);
const _: () = assert!((MAX_SLOT_OPS_BYTES as u64) < MAX_JOURNAL_BYTES);

/// When the journal gives way to a dump (tests use small limits to dump often).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalLimits {
    /// Most journal slots (at most [`MAX_JOURNAL_SLOTS`]).
    pub slots: u32,
    /// The journal may always grow to this many bytes (at most
    /// [`MIN_JOURNAL_BYTES`]); past the table's dump size, it is dumped.
    pub min_bytes: u64,
}

impl JournalLimits {
    /// What members use.
    pub const DEFAULT: JournalLimits = JournalLimits { slots: MAX_JOURNAL_SLOTS, min_bytes: MIN_JOURNAL_BYTES };
}

/// What this member's keyspace holds of the write index's entries (local:
/// members dump at different times; the table read back is the same).
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// The applied index the dump stands for.
    dump_index: u64,
    dump_parts: u32,
    /// Journal slots after the dump (the state entry's count).
    slots: u32,
    /// Bytes of those slots' entries.
    journal_bytes: u64,
    /// Slots below this may hold an entry (those at or past `slots` stale).
    slot_keys: u32,
    /// The next commit dumps (a fresh, migrated or flushed keyspace).
    must_dump: bool,
    /// The previous layout's `10 'W'` keys, deleted by the next dump.
    legacy: Vec<Vec<u8>>,
    pub(crate) limits: JournalLimits,
    /// Dumps written since the machine opened (tests).
    pub(crate) dumps: u64,
    /// Internal entries put or deleted, and bytes put, since the machine
    /// opened, the state entry included (tests, measurements).
    pub(crate) written: (u64, u64),
    /// Planted bug (the persistence tests' canary): a journal entry is
    /// written but not counted, so the next batch's overwrites it.
    pub(crate) fault_uncounted_slot: bool,
}

impl Default for Layout {
    /// A fresh keyspace: nothing written yet, the first commit dumps.
    fn default() -> Self {
        Layout {
            dump_index: 0,
            dump_parts: 0,
            slots: 0,
            journal_bytes: 0,
            slot_keys: 0,
            must_dump: true,
            legacy: Vec::new(),
            limits: JournalLimits::DEFAULT,
            dumps: 0,
            written: (0, 0),
            fault_uncounted_slot: false,
        }
    }
}

impl Layout {
    /// Every internal entry was deleted (a flush, a restore's clear): the
    /// next commit dumps.
    pub(crate) fn wiped(&mut self) {
        self.dump_parts = 0;
        self.slots = 0;
        self.journal_bytes = 0;
        self.slot_keys = 0;
        self.must_dump = true;
        self.legacy.clear();
    }

    /// A restore wrote `dump` at `index` after clearing the keyspace.
    pub(crate) fn restored(&mut self, index: u64, dump: &Dump) {
        self.wiped();
        self.dump_index = index;
        self.dump_parts = dump.parts.len() as u32;
        self.must_dump = false;
    }

    /// Journal slots the state entry counts.
    pub(crate) fn slots(&self) -> u32 {
        self.slots
    }

    /// Internal entries put or deleted and bytes put since the machine
    /// opened (the state entry included).
    pub(crate) fn written(&self) -> (u64, u64) {
        self.written
    }

    fn count(&mut self, bytes: usize) {
        self.written.0 += 1;
        self.written.1 += bytes as u64;
    }
}

/// The state entry's bytes (five u64 LE).
pub(crate) fn meta_bytes(applied: u64, time_ms: u64, writes: &WriteIndex, slots: u32) -> Vec<u8> {
    let mut meta = Vec::with_capacity(META_BYTES);
    for w in [applied, time_ms, writes.floor, writes.flush, u64::from(slots)] {
        meta.extend_from_slice(&w.to_le_bytes());
    }
    meta
}

/// `prefix` then `n` big-endian (keys sort by number).
fn numbered(prefix: &[u8], n: u32) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(&n.to_be_bytes());
    key
}

/// A dump part's internal key.
pub(crate) fn part_key(n: u32) -> Vec<u8> {
    numbered(DUMP_PART_PREFIX, n)
}

/// A journal slot's internal key.
fn slot_key(n: u32) -> Vec<u8> {
    numbered(JOURNAL_PREFIX, n)
}

fn seal(mut bytes: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// A dump's entries: its parts (`part_key(i)` → `parts[i]`) and header.
pub(crate) struct Dump {
    pub(crate) parts: Vec<Vec<u8>>,
    pub(crate) header: Vec<u8>,
}

/// The table as a dump standing for applied index `index`.
pub(crate) fn dump(writes: &WriteIndex, index: u64) -> Dump {
    let mut parts = Vec::new();
    let mut part = Vec::new();
    let mut count = 0u32;
    let finish = |part: &mut Vec<u8>, count: &mut u32, parts: &mut Vec<Vec<u8>>| {
        let n = parts.len() as u32;
        part[0..4].copy_from_slice(&n.to_le_bytes());
        part[4..8].copy_from_slice(&count.to_le_bytes());
        parts.push(seal(std::mem::take(part)));
        *count = 0;
    };
    for (key, at) in writes.oldest_first() {
        assert!(at <= index, "a remembered write after the dump's index");
        if !part.is_empty() && part.len() + OP_BYTES + key.len() + 4 > PART_BYTES {
            finish(&mut part, &mut count, &mut parts);
        }
        if part.is_empty() {
            part.resize(PART_HEAD, 0);
        }
        part.extend_from_slice(&[OP_WRITE, key.len() as u8]);
        part.extend_from_slice(&at.to_le_bytes());
        part.extend_from_slice(key);
        count += 1;
    }
    if !part.is_empty() {
        finish(&mut part, &mut count, &mut parts);
    }
    assert!(parts.len() <= MAX_DUMP_PARTS as usize);
    let mut header = Vec::with_capacity(HEADER_BYTES);
    for w in [index, writes.floor, writes.flush, writes.key_bytes() as u64] {
        header.extend_from_slice(&w.to_le_bytes());
    }
    for w in [writes.len() as u32, parts.len() as u32, 0] {
        header.extend_from_slice(&w.to_le_bytes());
    }
    Dump { parts, header: seal(header) }
}

/// Bytes the table's dump records take.
fn dump_bytes(writes: &WriteIndex) -> u64 {
    (writes.len() * OP_BYTES + writes.key_bytes()) as u64
}

/// Writes the write index's entries and the state entry for a commit at
/// `applied` (module docs), `flushed` if a flush wiped every internal entry
/// since the last; the journal is emptied.
pub(crate) fn persist<K: MachineKeyspace>(
    ks: &mut K,
    writes: &mut WriteIndex,
    layout: &mut Layout,
    (applied, time_ms): (u64, u64),
    flushed: bool,
) -> Result<(), StoreError> {
    if flushed {
        layout.wiped();
    }
    let ops = writes.journal();
    let slot_bytes = (SLOT_HEAD + ops.len() + 4) as u64;
    let budget = layout.limits.min_bytes.min(MIN_JOURNAL_BYTES).max(dump_bytes(writes));
    let full = layout.slots >= layout.limits.slots.min(MAX_JOURNAL_SLOTS);
    if layout.must_dump || full || ops.len() > MAX_SLOT_OPS_BYTES || layout.journal_bytes + slot_bytes > budget {
        write_dump(ks, writes, layout, applied)?;
    } else if !ops.is_empty() {
        write_slot(ks, writes, layout, applied)?;
    }
    writes.clear_journal();
    layout.count(META_BYTES);
    ks.internal_put(META_KEY, &meta_bytes(applied, time_ms, writes, layout.slots))
}

/// The batch's ops in the next slot.
fn write_slot<K: MachineKeyspace>(ks: &mut K, writes: &WriteIndex, layout: &mut Layout, applied: u64) -> Result<(), StoreError> {
    let ops = writes.journal();
    let count = u32::try_from(writes.journal_ops()).expect("ops of at most MAX_SLOT_OPS_BYTES");
    let mut entry = Vec::with_capacity(SLOT_HEAD + ops.len() + 4);
    entry.extend_from_slice(&applied.to_le_bytes());
    entry.extend_from_slice(&layout.dump_index.to_le_bytes());
    entry.extend_from_slice(&count.to_le_bytes());
    entry.extend_from_slice(ops);
    let entry = seal(entry);
    let n = layout.slots;
    layout.count(entry.len());
    ks.internal_put(&slot_key(n), &entry)?;
    layout.journal_bytes += entry.len() as u64;
    layout.slot_keys = layout.slot_keys.max(n + 1);
    if !layout.fault_uncounted_slot {
        layout.slots += 1;
    }
    Ok(())
}

/// The whole table as a dump at `applied`, in place of the last dump and
/// its journal (whose slots become stale; older stale slots are deleted).
fn write_dump<K: MachineKeyspace>(ks: &mut K, writes: &WriteIndex, layout: &mut Layout, applied: u64) -> Result<(), StoreError> {
    let dump = dump(writes, applied);
    for (n, part) in dump.parts.iter().enumerate() {
        layout.count(part.len());
        ks.internal_put(&part_key(n as u32), part)?;
    }
    for n in dump.parts.len() as u32..layout.dump_parts {
        layout.count(0);
        ks.internal_delete(&part_key(n))?;
    }
    layout.count(dump.header.len());
    ks.internal_put(DUMP_KEY, &dump.header)?;
    for n in layout.slots..layout.slot_keys {
        layout.written.0 += u64::from(ks.internal_delete(&slot_key(n))?);
    }
    for key in std::mem::take(&mut layout.legacy) {
        let mut ikey = WRITES_PREFIX.to_vec();
        ikey.extend_from_slice(&key);
        layout.written.0 += u64::from(ks.internal_delete(&ikey)?);
    }
    layout.slot_keys = layout.slots;
    layout.slots = 0;
    layout.journal_bytes = 0;
    layout.dump_index = applied;
    layout.dump_parts = dump.parts.len() as u32;
    layout.must_dump = false;
    layout.dumps += 1;
    Ok(())
}

/// What [`load`] read back.
pub(crate) struct Loaded {
    pub(crate) applied: u64,
    pub(crate) time_ms: u64,
    pub(crate) writes: WriteIndex,
    pub(crate) layout: Layout,
}

fn corrupt<T>(why: &'static str) -> Result<T, OpenError> {
    Err(OpenError::Corrupt(why))
}

/// The bytes of the internal entry `key`, if present.
fn value<K: MachineKeyspace>(ks: &mut K, key: &[u8]) -> Option<Vec<u8>> {
    let handle = ks.internal_get(key)?;
    let mut bytes = Vec::new();
    ks.read(&handle, &mut bytes);
    Some(bytes)
}

/// The bytes before a checksummed value's crc32c trailer, if it matches.
fn unseal(bytes: &[u8]) -> Option<&[u8]> {
    let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
    (crc32c::crc32c(body).to_le_bytes() == crc).then_some(body)
}

/// u64 LE words of `bytes` (whose length is checked by the caller).
fn words(bytes: &[u8]) -> impl Fn(usize) -> u64 + '_ {
    |i| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"))
}

/// u32 LE at byte `at`.
fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// A persistent keyspace's replication state (module docs), with `bounds`
/// ([`Bounds::REPLICATED`] but in tests).
pub(crate) fn load<K: MachineKeyspace>(ks: &mut K, bounds: Bounds) -> Result<Loaded, OpenError> {
    let Some(meta) = value(ks, META_KEY) else {
        return Ok(Loaded { applied: 0, time_ms: 0, writes: WriteIndex::with_bounds(bounds), layout: Layout::default() });
    };
    match meta.len() {
        META_BYTES => {}
        LEGACY_META_BYTES => return load_legacy(ks, bounds, &meta),
        _ => return corrupt("machine state entry length"),
    }
    let word = words(&meta);
    let (applied, time_ms, floor, flush, slots) = (word(0), word(1), word(2), word(3), word(4));
    if slots > u64::from(MAX_JOURNAL_SLOTS) {
        return corrupt("journal slot count over its bound");
    }
    let (mut writes, mut layout) = load_dump(ks, bounds, applied)?;
    replay_journal(ks, &mut writes, &mut layout, applied, slots as u32)?;
    if writes.floor != floor || writes.flush != flush {
        return corrupt("the write index read back disagrees with the machine state's floor or flush");
    }
    layout.slot_keys = slot_keys(ks)?.max(layout.slots);
    Ok(Loaded { applied, time_ms, writes, layout })
}

/// The table of the dump, and a layout naming it.
fn load_dump<K: MachineKeyspace>(ks: &mut K, bounds: Bounds, applied: u64) -> Result<(WriteIndex, Layout), OpenError> {
    let Some(bytes) = value(ks, DUMP_KEY) else { return corrupt("no write index dump") };
    if bytes.len() != HEADER_BYTES {
        return corrupt("write index dump header length");
    }
    let Some(header) = unseal(&bytes) else { return corrupt("write index dump header checksum") };
    let word = words(header);
    let (index, floor, flush, key_bytes) = (word(0), word(1), word(2), word(3));
    let (keys, parts) = (u32_at(header, 32), u32_at(header, 36));
    if u32_at(header, 40) != 0 {
        return corrupt("write index dump header reserved bytes");
    }
    if index > applied || floor > index || flush > index {
        return corrupt("write index dump past the applied index");
    }
    if keys as usize > bounds.keys || key_bytes > bounds.bytes as u64 || parts > MAX_DUMP_PARTS {
        return corrupt("write index dump over its bounds");
    }
    let mut entries = Vec::with_capacity(keys as usize);
    let mut read_bytes = 0u64;
    for n in 0..parts {
        let Some(part) = value(ks, &part_key(n)) else { return corrupt("a write index dump part missing") };
        read_bytes += read_part(&part, n, index, &mut entries)?;
        if entries.len() > keys as usize {
            return corrupt("write index dump parts hold more keys than its header");
        }
    }
    if entries.len() != keys as usize || read_bytes != key_bytes {
        return corrupt("write index dump parts disagree with its header");
    }
    let Some(writes) = WriteIndex::from_entries_within(bounds, entries, floor, flush) else {
        return corrupt("write index dump repeats a key");
    };
    let layout = Layout { dump_index: index, dump_parts: parts, must_dump: false, ..Layout::default() };
    Ok((writes, layout))
}

/// Appends dump part `n`'s records (each at most `index`) to `entries`;
/// returns their key bytes.
fn read_part(bytes: &[u8], n: u32, index: u64, entries: &mut Vec<(Vec<u8>, u64)>) -> Result<u64, OpenError> {
    if bytes.len() > PART_BYTES || bytes.len() < PART_HEAD + 4 {
        return corrupt("write index dump part length");
    }
    let Some(part) = unseal(bytes) else { return corrupt("write index dump part checksum") };
    if u32_at(part, 0) != n {
        return corrupt("write index dump part number");
    }
    let count = u32_at(part, 4);
    let mut r = pmem::le::Reader::new(part, PART_HEAD);
    let mut key_bytes = 0u64;
    for _ in 0..count {
        let Some(head) = r.take(2) else { return corrupt("write index dump record cut short") };
        let (op, len) = (head[0], head[1]);
        if op != OP_WRITE || len as usize > MAX_TRACKED_KEY_BYTES {
            return corrupt("write index dump record op or key length");
        }
        let Some(at) = r.u64() else { return corrupt("write index dump record cut short") };
        let Some(key) = r.take(u64::from(len)) else { return corrupt("write index dump record cut short") };
        if at > index {
            return corrupt("write index dump record past the dump's index");
        }
        entries.push((key.to_vec(), at));
        key_bytes += u64::from(len);
    }
    if !r.done() {
        return corrupt("write index dump part trailing bytes");
    }
    Ok(key_bytes)
}

/// Replays journal slots `0..slots` onto the dump's table, in order.
fn replay_journal<K: MachineKeyspace>(
    ks: &mut K,
    writes: &mut WriteIndex,
    layout: &mut Layout,
    applied: u64,
    slots: u32,
) -> Result<(), OpenError> {
    let mut last = layout.dump_index;
    for n in 0..slots {
        let Some(bytes) = value(ks, &slot_key(n)) else { return corrupt("a journal entry missing") };
        layout.journal_bytes += bytes.len() as u64;
        if bytes.len() < SLOT_HEAD + 4 || layout.journal_bytes > MAX_JOURNAL_BYTES {
            return corrupt("journal entry length");
        }
        let Some(entry) = unseal(&bytes) else { return corrupt("journal entry checksum") };
        let word = words(entry);
        let (batch, base, count) = (word(0), word(1), u32_at(entry, 16));
        if base != layout.dump_index {
            return corrupt("a journal entry of another dump");
        }
        if batch <= last || batch > applied {
            return corrupt("journal entries out of log order or past the applied index");
        }
        let replayed = writes.replay(&entry[SLOT_HEAD..], last, batch).map_err(OpenError::Corrupt)?;
        if replayed != u64::from(count) {
            return corrupt("journal entry op count");
        }
        last = batch;
    }
    layout.slots = slots;
    Ok(())
}

/// One past the highest journal slot holding an entry.
fn slot_keys<K: MachineKeyspace>(ks: &mut K) -> Result<u32, OpenError> {
    let keys = scan_prefix(ks, JOURNAL_PREFIX, MAX_JOURNAL_SLOTS as usize);
    let Some(last) = keys.last() else { return Ok(0) };
    if keys.len() > MAX_JOURNAL_SLOTS as usize {
        return corrupt("more journal slots than the ring holds");
    }
    let Ok(n) = <[u8; 4]>::try_from(&last[JOURNAL_PREFIX.len()..]) else { return corrupt("journal slot key length") };
    let n = u32::from_be_bytes(n);
    if n >= MAX_JOURNAL_SLOTS {
        return corrupt("a journal slot past the ring");
    }
    Ok(n + 1)
}

/// Internal keys starting with `prefix`, in byte order, at most `limit` + 1.
fn scan_prefix<K: MachineKeyspace>(ks: &mut K, prefix: &[u8], limit: usize) -> Vec<Vec<u8>> {
    const PAGE: usize = 256;
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut from = prefix.to_vec();
    while keys.len() <= limit {
        let mut page = Vec::new();
        let n = ks.internal_scan(&from, PAGE, &mut |k| page.push(k.to_vec()));
        let full = n == PAGE;
        let before = page.len();
        page.retain(|k| k.starts_with(prefix));
        let ended = !full || page.len() < before;
        if let Some(last) = page.last() {
            from = last.clone();
            from.push(0);
        }
        keys.extend(page);
        if ended {
            break;
        }
    }
    keys.truncate(limit + 1);
    keys
}

/// The previous layout: a 32-byte state entry and one `10 'W' key` entry
/// (the key's last write, u64) per remembered key.
fn load_legacy<K: MachineKeyspace>(ks: &mut K, bounds: Bounds, meta: &[u8]) -> Result<Loaded, OpenError> {
    let word = words(meta);
    let (applied, time_ms, floor, flush) = (word(0), word(1), word(2), word(3));
    let keys = scan_prefix(ks, WRITES_PREFIX, MAX_TRACKED_KEYS);
    if keys.len() > MAX_TRACKED_KEYS {
        return corrupt("write index over its bounds");
    }
    let mut entries = Vec::with_capacity(keys.len());
    for k in &keys {
        let Some(b) = value(ks, k) else { return corrupt("write index entry vanished") };
        let Ok(b) = <[u8; 8]>::try_from(&b[..]) else { return corrupt("write index entry length") };
        let index = u64::from_le_bytes(b);
        if index > applied {
            return corrupt("a write after the applied index");
        }
        entries.push((k[WRITES_PREFIX.len()..].to_vec(), index));
    }
    let legacy = entries.iter().map(|(k, _)| k.clone()).collect();
    let Some(writes) = WriteIndex::from_entries_within(bounds, entries, floor, flush) else {
        return corrupt("write index over its bounds");
    };
    let layout = Layout { legacy, slot_keys: slot_keys(ks)?, ..Layout::default() };
    Ok(Loaded { applied, time_ms, writes, layout })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::track::OP_FLUSH;
    use pmwire_keyspace::store::{Keyspace, MemKeyspace};

    /// SplitMix64: the tests' deterministic draws.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) % n
        }
    }

    const SMALL: Bounds = Bounds { keys: 40, bytes: 300 };
    const LIMITS: JournalLimits = JournalLimits { slots: 7, min_bytes: 200 };

    /// A member's write index over a keyspace holding its entries.
    struct Member {
        ks: MemKeyspace,
        writes: WriteIndex,
        layout: Layout,
        applied: u64,
        dumps: u32,
    }

    impl Member {
        fn new(fault: bool) -> Member {
            let mut writes = WriteIndex::with_bounds(SMALL);
            writes.set_persistent(true);
            let layout = Layout { limits: LIMITS, fault_uncounted_slot: fault, ..Layout::default() };
            Member { ks: MemKeyspace::new(), writes, layout, applied: 0, dumps: 0 }
        }

        /// One batch of up to `n` entries of random writes (a flush wipes
        /// the internal entries, as a keyspace's clear does), committed.
        fn batch(&mut self, rng: &mut Rng, n: u64) {
            let mut flushed = false;
            for _ in 0..rng.below(n) {
                self.applied += 1;
                for _ in 0..rng.below(4) {
                    match rng.below(60) {
                        0 => {
                            self.ks.clear().unwrap();
                            self.writes.record_flush(self.applied);
                            flushed = true;
                        }
                        1 => self.writes.record(&[b'L'; MAX_TRACKED_KEY_BYTES + 1], self.applied),
                        _ => {
                            let key: Vec<u8> = (0..rng.below(9)).map(|_| b'a' + rng.below(6) as u8).collect();
                            self.writes.record(&key, self.applied);
                        }
                    }
                }
            }
            let before = self.layout.dump_index;
            persist(&mut self.ks, &mut self.writes, &mut self.layout, (self.applied, 7 * self.applied), flushed).unwrap();
            self.dumps += u32::from(self.layout.dump_index != before);
        }

        fn reopen(&mut self) -> Result<Loaded, OpenError> {
            load(&mut self.ks, SMALL)
        }
    }

    #[test]
    fn a_restart_after_many_batches_and_dumps_reads_back_the_live_table() {
        for seed in 0..30 {
            let mut rng = Rng(seed);
            let mut m = Member::new(false);
            for batch in 0..400 {
                m.batch(&mut rng, 6);
                let back = m.reopen().unwrap_or_else(|e| panic!("seed {seed} batch {batch}: {e}"));
                assert_eq!(back.writes, m.writes, "seed {seed} batch {batch}: the same table");
                assert_eq!(back.writes.oldest_first(), m.writes.oldest_first(), "the same eviction order");
                assert_eq!((back.applied, back.time_ms), (m.applied, 7 * m.applied));
                assert_eq!(back.layout.slots, m.layout.slots);
                assert!(m.layout.slots <= LIMITS.slots);
                let stale = scan_prefix(&mut m.ks, JOURNAL_PREFIX, 1000).len() as u32;
                assert!(stale <= 2 * LIMITS.slots, "seed {seed}: {stale} slot keys: stale ones are deleted");
            }
            assert!(m.dumps >= 20, "seed {seed}: {} dumps", m.dumps);
            assert!(m.writes.floor > 0, "seed {seed}: keys were forgotten");
        }
    }

    #[test]
    fn the_restart_check_catches_a_journal_entry_left_uncounted() {
        let mut caught = 0;
        for seed in 0..10 {
            let mut rng = Rng(seed);
            let mut m = Member::new(true);
            for _ in 0..100 {
                m.batch(&mut rng, 6);
                if m.reopen().map_or(true, |back| back.writes != m.writes) {
                    caught += 1;
                    break;
                }
            }
        }
        assert_eq!(caught, 10, "every seed's restart differs from its live table");
    }

    /// A member with a dump and a few journal entries.
    fn written() -> Member {
        let mut rng = Rng(99);
        let mut m = Member::new(false);
        m.layout.limits = JournalLimits { slots: 100, min_bytes: 1 << 16 };
        for _ in 0..5 {
            m.batch(&mut rng, 6);
        }
        assert!(m.layout.slots >= 3, "{} journal entries", m.layout.slots);
        assert!(m.layout.dump_parts >= 1);
        m.reopen().expect("intact");
        m
    }

    fn get(m: &mut Member, key: &[u8]) -> Vec<u8> {
        value(&mut m.ks, key).expect("present")
    }

    /// Rewrites a checksummed entry with `edit` applied to its body.
    fn reseal(m: &mut Member, key: &[u8], edit: impl FnOnce(&mut Vec<u8>)) {
        let mut body = get(m, key);
        body.truncate(body.len() - 4);
        edit(&mut body);
        m.ks.internal_put(key, &seal(body)).unwrap();
    }

    #[test]
    fn a_corrupt_entry_is_refused_with_its_reason() {
        type Tamper = Box<dyn Fn(&mut Member)>;
        let cases: Vec<(Tamper, &str)> = vec![
            (Box::new(|m| {
                let mut b = get(m, &slot_key(1));
                b[SLOT_HEAD] ^= 1;
                m.ks.internal_put(&slot_key(1), &b).unwrap();
            }), "journal entry checksum"),
            (Box::new(|m| _ = m.ks.internal_delete(&slot_key(1)).unwrap()), "a journal entry missing"),
            (Box::new(|m| reseal(m, &slot_key(2), |b| b[8] ^= 1)), "a journal entry of another dump"),
            (Box::new(|m| reseal(m, &slot_key(2), |b| b[16] += 1)), "journal entry op count"),
            (Box::new(|m| reseal(m, &slot_key(2), |b| b[0..8].copy_from_slice(&0u64.to_le_bytes()))), "journal entries out of log order or past the applied index"),
            (Box::new(|m| reseal(m, &slot_key(0), |b| b[SLOT_HEAD] = 9)), "an unknown journal op"),
            (Box::new(|m| reseal(m, &slot_key(0), |b| b.truncate(b.len() - 1))), "a journal op's key cut short"),
            (Box::new(|m| m.ks.internal_put(&slot_key(0), &[1, 2, 3]).unwrap()), "journal entry length"),
            (Box::new(|m| _ = m.ks.internal_delete(&part_key(0)).unwrap()), "a write index dump part missing"),
            (Box::new(|m| reseal(m, &part_key(0), |b| b[0] = 5)), "write index dump part number"),
            (Box::new(|m| reseal(m, &part_key(0), |b| b[4] += 1)), "write index dump record cut short"),
            (Box::new(|m| reseal(m, &part_key(0), |b| b.push(0))), "write index dump part trailing bytes"),
            (Box::new(|m| reseal(m, &part_key(0), |b| b[PART_HEAD] = OP_FLUSH)), "write index dump record op or key length"),
            (Box::new(|m| reseal(m, &part_key(0), |b| b[PART_HEAD + 9] = 0xFF)), "write index dump record past the dump's index"),
            (Box::new(|m| _ = m.ks.internal_delete(DUMP_KEY).unwrap()), "no write index dump"),
            (Box::new(|m| reseal(m, DUMP_KEY, |b| b[36] += 1)), "a write index dump part missing"),
            (Box::new(|m| reseal(m, DUMP_KEY, |b| b[32] += 1)), "write index dump parts disagree with its header"),
            (Box::new(|m| reseal(m, DUMP_KEY, |b| b[40] = 1)), "write index dump header reserved bytes"),
            (Box::new(|m| reseal(m, DUMP_KEY, |b| b[32..36].copy_from_slice(&1000u32.to_le_bytes()))), "write index dump over its bounds"),
            (Box::new(|m| reseal(m, DUMP_KEY, |b| b[7] = 0xFF)), "write index dump past the applied index"),
            (Box::new(|m| {
                let mut b = get(m, DUMP_KEY);
                b[0] ^= 1;
                m.ks.internal_put(DUMP_KEY, &b).unwrap();
            }), "write index dump header checksum"),
            (Box::new(|m| {
                let mut b = get(m, META_KEY);
                b[24] ^= 1;
                m.ks.internal_put(META_KEY, &b).unwrap();
            }), "the write index read back disagrees with the machine state's floor or flush"),
            (Box::new(|m| {
                let mut b = get(m, META_KEY);
                b[32] += 1;
                m.ks.internal_put(META_KEY, &b).unwrap();
            }), "a journal entry missing"),
            (Box::new(|m| {
                let mut b = get(m, META_KEY);
                b[33] = 0xFF;
                m.ks.internal_put(META_KEY, &b).unwrap();
            }), "journal slot count over its bound"),
            (Box::new(|m| m.ks.internal_put(META_KEY, &[0; 39]).unwrap()), "machine state entry length"),
        ];
        for (tamper, why) in cases {
            let mut m = written();
            tamper(&mut m);
            assert_eq!(m.reopen().err(), Some(OpenError::Corrupt(why)));
        }
    }

    #[test]
    fn the_previous_layout_is_read_and_replaced_at_the_first_commit() {
        let mut rng = Rng(5);
        let mut m = Member::new(false);
        for _ in 0..30 {
            m.batch(&mut rng, 6);
        }
        // The same table in the previous layout: `10 'W' key` entries and a 32-byte state entry.
        let mut old = MemKeyspace::new();
        for (key, at) in m.writes.entries() {
            old.internal_put(&[WRITES_PREFIX, key].concat(), &at.to_le_bytes()).unwrap();
        }
        let meta = meta_bytes(m.applied, 5, &m.writes, 0);
        old.internal_put(META_KEY, &meta[..LEGACY_META_BYTES]).unwrap();
        let loaded = load(&mut old, SMALL).expect("the previous layout is read");
        assert_eq!(loaded.writes, m.writes);
        assert_eq!((loaded.applied, loaded.time_ms), (m.applied, 5));
        let (mut writes, mut layout) = (loaded.writes, loaded.layout);
        writes.set_persistent(true);
        persist(&mut old, &mut writes, &mut layout, (m.applied, 5), false).unwrap();
        assert!(scan_prefix(&mut old, WRITES_PREFIX, 10).is_empty(), "the previous layout's entries are deleted");
        assert_eq!(get(&mut Member { ks: old.clone(), ..Member::new(false) }, META_KEY).len(), META_BYTES);
        assert_eq!(load(&mut old, SMALL).unwrap().writes, m.writes, "and read back in the new one");
        old.internal_put(&[WRITES_PREFIX, b"k"].concat(), &[1, 2]).unwrap();
        old.internal_put(META_KEY, &meta[..LEGACY_META_BYTES]).unwrap();
        assert_eq!(load(&mut old, SMALL).err(), Some(OpenError::Corrupt("write index entry length")));
    }

    /// The measurement of `docs/bench.md` ("WATCH's write index per
    /// batch"): 200,000 SETs of random keys out of 100,000 in batches of
    /// 32, with the members' bounds: the internal entries written per SET,
    /// against the previous layout's one per recorded key and one per
    /// forgotten key (counted on the model), plus the state entry per batch.
    #[test]
    fn the_write_index_costs_a_few_entries_per_batch_not_per_key() {
        let mut rng = Rng(42);
        let mut writes = WriteIndex::default();
        writes.set_persistent(true);
        let mut model = crate::track::model_for_tests(Bounds::REPLICATED);
        let (mut layout, mut ks) = (Layout::default(), MemKeyspace::new());
        let (sets, batch) = (200_000u64, 32u64);
        let (mut previous, mut forgotten) = (0u64, 0usize);
        for i in 1..=sets {
            let key = format!("key:{:012}", rng.below(100_000)).into_bytes();
            writes.record(&key, i);
            let before = model.by_key.len() + usize::from(!model.by_key.contains_key(&key));
            model.record(&key, i);
            forgotten += before - model.by_key.len();
            previous += 1;
            if i % batch == 0 {
                persist(&mut ks, &mut writes, &mut layout, (i, i), false).unwrap();
                previous += 1;
            }
        }
        previous += forgotten as u64;
        let (entries, bytes) = layout.written();
        let per_set = entries as f64 / sets as f64;
        let before = previous as f64 / sets as f64;
        println!(
            "write index entries per SET: {per_set:.3} ({bytes} bytes, {:.1} B/SET, {} dumps); previous layout: {before:.3}",
            bytes as f64 / sets as f64,
            layout.dumps
        );
        assert!(per_set < 0.1, "{per_set} entries per SET");
        assert!(before > 1.1, "the previous layout: {before} entries per SET");
        assert_eq!(load(&mut ks, Bounds::REPLICATED).unwrap().writes, writes);
    }

    #[test]
    fn a_dump_of_the_largest_table_fits_its_bounds() {
        let mut w = WriteIndex::default();
        for i in 0..MAX_TRACKED_KEYS as u64 * 2 {
            let mut key = vec![b'k'; MAX_TRACKED_KEY_BYTES];
            key[..8].copy_from_slice(&i.to_le_bytes());
            w.record(&key, i + 1);
        }
        let d = dump(&w, u64::MAX);
        assert!(d.parts.len() <= MAX_DUMP_PARTS as usize, "{} parts", d.parts.len());
        assert!(d.parts.iter().all(|p| p.len() <= PART_BYTES));
        assert!(dump_bytes(&w) <= MAX_DUMP_BYTES);
    }
}
