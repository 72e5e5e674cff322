//! The snapshot of a [`crate::RedisMachine`]: every key of every family
//! with its deadline (expired keys not yet swept included: they are state,
//! DBSIZE counts them), every internal entry of the keyspace but the
//! machine's own (collection chunks, tombstones, the generation entry with
//! its secret), the write index and the machine's fields; checksummed.
//! Layout in `docs/FORMAT.md`, "Replicated Redis entries".
//!
//! [`decode`] checks the checksum first, then every count and length
//! against its bound and the bytes left, the order of keys (strictly
//! increasing: no duplicates) and the fields that must be zero, before
//! anything is stored; [`load`] then replaces the keyspace's contents.
//! Encoding: the keys' heads (key, family, deadline, length) are gathered
//! first, which gives the snapshot's length; then the values follow in
//! steps of a bounded size ([`Encoder`]), which the replica writes into its
//! Raft pool's snapshot slot part by part, and streams to a member chunk
//! by chunk from that slot into the member's staging slot
//! (`pmwire_smr::snapshot::stream`). Decoding borrows: a [`Data`]'s keys
//! and values are slices of the snapshot's bytes, which a member reads
//! where they lie in its Raft pool, so a restore copies each value once,
//! into the keyspace.

use pmem::le;
use pmwire_keyspace::chunked::ChunkConfig;
use pmwire_keyspace::store::{Expiry, Keyspace, Kind, StoreError, ValueSource};
use pmwire_smr::state::RestoreError;

use crate::machine::{MachineKeyspace, MACHINE_TAG};
use crate::track::WriteIndex;

/// The first eight bytes of a snapshot.
pub const MAGIC: [u8; 8] = *b"RKVSNAP1";
/// The fixed part: magic, seven u64 and the five collection limits.
const FIXED_BYTES: usize = 8 + 7 * 8 + 5 * 8;
/// Longest key or internal key in a snapshot.
const MAX_KEY_BYTES: u64 = 512 << 20;
/// Longest value in a snapshot.
const MAX_VALUE_BYTES: u64 = 1 << 30;
/// Keys visited per scan call while encoding.
const PAGE: usize = 1024;

/// The machine's fields a snapshot carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// The applied index.
    pub applied: u64,
    /// The last entry's time.
    pub last_time_ms: u64,
    /// The write index's floor.
    pub floor: u64,
    /// The last flush's index.
    pub flush: u64,
    /// The collection limits (they shape the chunks: members must agree).
    pub limits: [u64; 5],
}

/// One key of a snapshot, borrowed from the snapshot's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key<'a> {
    /// The key.
    pub key: &'a [u8],
    /// Its family.
    pub kind: Kind,
    /// Its deadline.
    pub deadline_ms: Option<u64>,
    /// The stored value (a chunked collection's header).
    pub value: &'a [u8],
}

/// A decoded snapshot, borrowed from its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Data<'a> {
    /// The machine's fields.
    pub state: State,
    /// Keys in byte order.
    pub keys: Vec<Key<'a>>,
    /// Internal entries in byte order.
    pub internal: Vec<(&'a [u8], &'a [u8])>,
    /// The write index's entries, keys in byte order.
    pub tracked: Vec<(Vec<u8>, u64)>,
}

/// The collection limits as snapshot words.
pub fn limits_words(c: &ChunkConfig) -> [u64; 5] {
    [c.max_blob_entries, c.max_blob_bytes, c.bucket_entries, c.list_chunk_entries, c.list_chunk_bytes].map(|v| v as u64)
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Bytes reserved past the snapshot for the record around it.
const RECORD_TAIL_BYTES: usize = 64;

/// What a key costs a step's budget beside its bytes (the lookups).
const KEY_COST_BYTES: usize = 256;

/// Bytes of a key's fixed fields (key length, family, deadline flag,
/// value length, deadline).
const KEY_HEAD_BYTES: usize = 24;
/// Bytes of an internal entry's fixed fields (key length, zero, value
/// length).
const INTERNAL_HEAD_BYTES: usize = 16;

/// The snapshot bytes of `ks` and the machine's fields.
pub fn encode<K: MachineKeyspace>(ks: &mut K, state: &State, writes: &WriteIndex) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(ks, state, writes, &mut out);
    out
}

/// Appends [`encode`]'s bytes to `out` in one go.
pub fn encode_into<K: MachineKeyspace>(ks: &mut K, state: &State, writes: &WriteIndex, out: &mut Vec<u8>) {
    let mut e = Encoder::default();
    while !e.step(ks, state, writes, out, usize::MAX) {}
}

/// [`encode`] in steps of a bounded size, so that a member's loop can take
/// a large snapshot over several turns, its heartbeats and acknowledgements
/// flowing between them. The keyspace, the machine's fields and the write
/// index must not change between the steps of one snapshot (the replica
/// applies nothing meanwhile).
///
/// Two passes over the keyspace, a page of keys at a time: the first only
/// sizes the snapshot (each key's value by its stored length; an internal
/// value, whose length only a read tells, is read into one scratch buffer
/// and dropped), the second writes it, each value read straight into the
/// output. So the encoder holds one page of keys, not the keyspace's keys
/// (a first version kept every key's head, and every internal value, in
/// DRAM until the snapshot was written: hundreds of MiB for a keyspace of
/// millions of small keys or a large chunked collection). The output is
/// sized once: a keyspace of hundreds of MiB was copied value by value
/// into buffers of its own, then into an output grown by doubling (even one
/// growth at the end copies the whole output), and the page faults of those
/// fresh buffers were most of the time a member's loop stood still taking
/// it.
#[derive(Default)]
pub struct Encoder {
    phase: Phase,
    /// Where the current phase's scan goes on: the last key visited (the
    /// key phases) or the next internal key to look at (the internal ones).
    after: Option<Vec<u8>>,
    /// Keys scanned and not yet written (the writing phases).
    page: std::collections::VecDeque<Vec<u8>>,
    /// The current phase's scan has reached the end.
    scanned: bool,
    /// Keys and internal entries counted by the sizing pass, and written.
    keys: u64,
    internal: u64,
    written: u64,
    /// An internal value read to learn its length.
    scratch: Vec<u8>,
    /// The snapshot's whole size (known once the sizing pass is done), the
    /// bytes appended so far and their checksum: computed step by step, so
    /// a caller may take each step's bytes away before the next
    /// ([`Encoder::len`]).
    total: usize,
    emitted: usize,
    crc: u32,
}

#[derive(Default, PartialEq, Eq, Debug, Clone, Copy)]
enum Phase {
    /// Sizing: the keys.
    #[default]
    SizeKeys,
    /// Sizing: the internal entries.
    SizeInternal,
    /// Writing the keys with their values.
    Keys,
    /// Writing the internal entries.
    Internal,
    Done,
}

impl Encoder {
    /// Appends about `budget` bytes' worth of the snapshot to `out` (a key
    /// costs [`KEY_COST_BYTES`] beside its bytes); true once the whole
    /// snapshot is there.
    pub fn step<K: MachineKeyspace>(&mut self, ks: &mut K, state: &State, writes: &WriteIndex, out: &mut Vec<u8>, budget: usize) -> bool {
        // Time 0, at which no key is expired (so none is deleted or hidden
        // while the snapshot reads it); the caller sets the time back.
        ks.set_now_ms(0);
        let from = out.len();
        let whole = self.append(ks, state, writes, out, budget, from);
        if !whole {
            self.account(&out[from..]);
        }
        whole
    }

    /// The snapshot's whole length once it is known (after the sizing
    /// pass): from then on each step only appends to its output, so the
    /// bytes of earlier steps may be gone from it.
    pub fn len(&self) -> Option<u64> {
        (!matches!(self.phase, Phase::SizeKeys | Phase::SizeInternal)).then_some(self.total as u64)
    }

    fn account(&mut self, bytes: &[u8]) {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.emitted += bytes.len();
    }

    /// The next page of keys (`internal`: of internal entries but the
    /// machine's own) into `self.page`; false once the scan has ended.
    fn next_page<K: Keyspace>(&mut self, ks: &mut K, internal: bool) -> bool {
        if self.scanned {
            return false;
        }
        let page = &mut self.page;
        if internal {
            // Internal keys are never empty: the first is at or after `00`.
            let from = self.after.take().unwrap_or_else(|| vec![0u8]);
            let n = ks.internal_scan(&from, PAGE, &mut |k| page.push_back(k.to_vec()));
            match page.back() {
                Some(last) if n >= PAGE => self.after = Some([&last[..], &[0]].concat()),
                _ => self.scanned = true,
            }
            page.retain(|k| k.first() != Some(&MACHINE_TAG));
        } else {
            let n = ks.scan(self.after.as_deref(), PAGE, &mut |k, _| page.push_back(k.to_vec()));
            match page.back() {
                Some(last) if n >= PAGE => self.after = Some(last.clone()),
                _ => self.scanned = true,
            }
        }
        true
    }

    /// Starts the next phase's scan from the beginning.
    fn enter(&mut self, phase: Phase) {
        self.phase = phase;
        self.after = None;
        self.page.clear();
        self.scanned = false;
    }

    fn append<K: MachineKeyspace>(&mut self, ks: &mut K, state: &State, writes: &WriteIndex, out: &mut Vec<u8>, budget: usize, from: usize) -> bool {
        let mut spent = 0usize;
        loop {
            if self.phase == Phase::Done {
                return true;
            }
            if spent >= budget {
                return false;
            }
            let internal = matches!(self.phase, Phase::SizeInternal | Phase::Internal);
            let Some(key) = self.page.pop_front() else {
                if !self.next_page(ks, internal) {
                    match self.phase {
                        Phase::SizeKeys => self.enter(Phase::SizeInternal),
                        Phase::SizeInternal => self.begin_values(state, writes, out, budget),
                        Phase::Keys => {
                            assert_eq!(self.written, self.keys, "the keys written are the keys sized");
                            self.written = 0;
                            self.enter(Phase::Internal);
                        }
                        Phase::Internal => {
                            assert_eq!(self.written, self.internal, "the internal entries written are those sized");
                            self.finish(writes, out, from);
                        }
                        Phase::Done => unreachable!(),
                    }
                }
                continue;
            };
            match self.phase {
                Phase::SizeKeys => {
                    let stored = ks.get(&key).expect("a scanned key is there at time 0");
                    self.total += KEY_HEAD_BYTES + key.len() + stored.len as usize;
                    self.keys += 1;
                    spent = spent.saturating_add(KEY_COST_BYTES);
                }
                Phase::SizeInternal => {
                    self.scratch.clear();
                    assert!(ks.internal_read(&key, &mut self.scratch), "a scanned internal key is there");
                    self.total += INTERNAL_HEAD_BYTES + key.len() + self.scratch.len();
                    self.internal += 1;
                    spent = spent.saturating_add(KEY_COST_BYTES + self.scratch.len());
                }
                Phase::Keys => {
                    let stored = ks.get(&key).expect("a key seen at time 0 is there");
                    put_u32(out, key.len() as u32);
                    out.extend_from_slice(&[stored.kind.to_byte(), u8::from(stored.deadline_ms.is_some()), 0, 0]);
                    put_u64(out, stored.len);
                    put_u64(out, stored.deadline_ms.unwrap_or(0));
                    out.extend_from_slice(&key);
                    let at = out.len();
                    ks.read(&stored.value, out);
                    assert_eq!((out.len() - at) as u64, stored.len, "a value reads back at its stored length");
                    self.written += 1;
                    spent = spent.saturating_add(KEY_COST_BYTES + stored.len as usize);
                }
                Phase::Internal => {
                    put_u32(out, key.len() as u32);
                    put_u32(out, 0);
                    let len_at = out.len();
                    put_u64(out, 0);
                    out.extend_from_slice(&key);
                    let at = out.len();
                    assert!(ks.internal_read(&key, out), "an internal key sized is there");
                    let len = out.len() - at;
                    out[len_at..len_at + 8].copy_from_slice(&(len as u64).to_le_bytes());
                    self.written += 1;
                    spent = spent.saturating_add(KEY_COST_BYTES + len);
                }
                Phase::Done => unreachable!(),
            }
        }
    }

    /// The snapshot is sized: size the output, write the fixed fields.
    fn begin_values(&mut self, state: &State, writes: &WriteIndex, out: &mut Vec<u8>, budget: usize) {
        self.total += FIXED_BYTES + writes.entries().map(|(k, _)| 16 + k.len()).sum::<usize>() + 4;
        self.scratch = Vec::new();
        // Room for what a record puts after the machine's part (the
        // replica's checksum): one growth at the end copies it all. A
        // snapshot taken in steps needs a step's room (its caller takes
        // each step's bytes away, or the output grows by doubling).
        out.reserve_exact(self.total.min(budget) + RECORD_TAIL_BYTES);
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        for w in [state.applied, state.last_time_ms, state.floor, state.flush] {
            put_u64(out, w);
        }
        put_u64(out, self.keys);
        put_u64(out, self.internal);
        put_u64(out, writes.len() as u64);
        state.limits.iter().for_each(|&w| put_u64(out, w));
        assert_eq!(out.len() - start, FIXED_BYTES);
        self.enter(Phase::Keys);
    }

    /// The write index and the checksum.
    fn finish(&mut self, writes: &WriteIndex, out: &mut Vec<u8>, from: usize) {
        for (key, index) in writes.entries() {
            put_u64(out, index);
            put_u32(out, key.len() as u32);
            put_u32(out, 0);
            out.extend_from_slice(key);
        }
        self.account(&out[from..]);
        out.extend_from_slice(&self.crc.to_le_bytes());
        self.emitted += 4;
        assert_eq!(self.emitted, self.total, "the snapshot's size was computed right");
        self.phase = Phase::Done;
    }
}

/// The snapshot's bytes through [`le::Reader`], a short read naming the field.
struct Reader<'a>(le::Reader<'a>);

fn corrupt(what: &'static str) -> RestoreError {
    RestoreError::Corrupt(what)
}

impl<'a> Reader<'a> {
    fn left(&self) -> u64 {
        self.0.left()
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], RestoreError> {
        self.0.take(n).ok_or(corrupt(what))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, RestoreError> {
        self.0.u32().ok_or(corrupt(what))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, RestoreError> {
        self.0.u64().ok_or(corrupt(what))
    }

    /// A count of records of at least `min` bytes each, checked against the bytes left.
    fn count(&mut self, min: u64, what: &'static str) -> Result<u64, RestoreError> {
        let n = self.u64(what)?;
        if n.checked_mul(min).is_none_or(|need| need > self.left()) {
            return Err(corrupt(what));
        }
        Ok(n)
    }

    fn bytes(&mut self, len: u64, max: u64, what: &'static str) -> Result<&'a [u8], RestoreError> {
        if len > max {
            return Err(corrupt(what));
        }
        self.take(len, what)
    }
}

/// Decodes and checks a snapshot (module docs); stores nothing.
pub fn decode(bytes: &[u8]) -> Result<Data<'_>, RestoreError> {
    if bytes.len() < FIXED_BYTES + 4 {
        return Err(corrupt("snapshot too short"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(corrupt("snapshot checksum mismatch"));
    }
    let mut r = Reader(le::Reader::new(body, 0));
    if r.take(8, "magic")? != MAGIC {
        return Err(corrupt("not a Redis machine snapshot"));
    }
    let (applied, last_time_ms, floor, flush) = (r.u64("applied")?, r.u64("time")?, r.u64("floor")?, r.u64("flush")?);
    let key_count = r.count(24, "key count")?;
    let internal_count = r.count(16, "internal count")?;
    let tracked_count = r.count(16, "tracked count")?;
    let mut limits = [0u64; 5];
    for w in &mut limits {
        *w = r.u64("limits")?;
    }
    let state = State { applied, last_time_ms, floor, flush, limits };
    let mut keys: Vec<Key> = Vec::with_capacity(key_count as usize);
    for _ in 0..key_count {
        let k = read_key(&mut r)?;
        if keys.last().is_some_and(|p| p.key >= k.key) {
            return Err(corrupt("keys out of order"));
        }
        keys.push(k);
    }
    let mut internal: Vec<(&[u8], &[u8])> = Vec::with_capacity(internal_count as usize);
    for _ in 0..internal_count {
        let e = read_internal(&mut r)?;
        if internal.last().is_some_and(|p| p.0 >= e.0) {
            return Err(corrupt("internal keys out of order"));
        }
        internal.push(e);
    }
    let mut tracked: Vec<(Vec<u8>, u64)> = Vec::with_capacity(tracked_count as usize);
    for _ in 0..tracked_count {
        let index = r.u64("tracked index")?;
        let len = r.u32("tracked key length")?;
        if r.u32("tracked reserved")? != 0 || index > applied {
            return Err(corrupt("tracked write fields"));
        }
        let key = r.bytes(u64::from(len), MAX_KEY_BYTES, "tracked key")?;
        if tracked.last().is_some_and(|(last, _)| last.as_slice() >= key) {
            return Err(corrupt("tracked keys out of order"));
        }
        tracked.push((key.to_vec(), index));
    }
    if r.left() != 0 {
        return Err(corrupt("trailing bytes"));
    }
    Ok(Data { state, keys, internal, tracked })
}

fn read_key<'a>(r: &mut Reader<'a>) -> Result<Key<'a>, RestoreError> {
    let key_len = r.u32("key length")?;
    let flags = r.take(4, "key flags")?;
    let kind = Kind::from_byte(flags[0]).ok_or(corrupt("key kind"))?;
    if flags[1] > 1 || flags[2..] != [0, 0] {
        return Err(corrupt("key flags"));
    }
    let value_len = r.u64("value length")?;
    let deadline = r.u64("deadline")?;
    let deadline_ms = match (flags[1], deadline) {
        (0, 0) => None,
        (1, d) if d > 0 => Some(d),
        _ => return Err(corrupt("key deadline")),
    };
    let key = r.bytes(u64::from(key_len), MAX_KEY_BYTES, "key")?;
    let value = r.bytes(value_len, MAX_VALUE_BYTES, "value")?;
    Ok(Key { key, kind, deadline_ms, value })
}

fn read_internal<'a>(r: &mut Reader<'a>) -> Result<(&'a [u8], &'a [u8]), RestoreError> {
    let key_len = r.u32("internal key length")?;
    if r.u32("internal reserved")? != 0 {
        return Err(corrupt("internal reserved"));
    }
    let value_len = r.u64("internal value length")?;
    let key = r.bytes(u64::from(key_len), MAX_KEY_BYTES, "internal key")?;
    // The keyspace's internal keys begin below FF; the machine's own are never in a snapshot.
    if key.first().is_none_or(|&b| b == 0xFF || b == MACHINE_TAG) {
        return Err(corrupt("internal key"));
    }
    let value = r.bytes(value_len, MAX_VALUE_BYTES, "internal value")?;
    Ok((key, value))
}

/// Replaces the contents of `ks` by the snapshot's (at time 0, so that no
/// key is expired while it is stored; the caller sets the time).
pub fn load<K: MachineKeyspace>(ks: &mut K, data: &Data<'_>) -> Result<(), StoreError> {
    ks.set_now_ms(0);
    ks.clear()?;
    for k in &data.keys {
        let expiry = k.deadline_ms.map_or(Expiry::Clear, Expiry::At);
        ks.put(k.key, k.kind, ValueSource::Borrowed(k.value), expiry)?;
    }
    for (key, value) in &data.internal {
        ks.internal_put(key, value)?;
    }
    Ok(())
}

/// Issue 26 item 6, part 3: how long a member's loop is held by taking a
/// snapshot of N MiB of keyspace (`Replica::maybe_compact`: the machine's
/// snapshot, the replica's record around it, the store's write into its
/// slot). A measurement, not a check: ignored, printed, never asserted
/// (`cargo test --release -p pmwire-kv-cluster --lib snapshot_take_stall -- --ignored --nocapture`,
/// `PMWIRE_STALL_MIB=16,64,256`).
#[cfg(test)]
mod tests {
    use pmwire_keyspace::chunked::ChunkConfig;
    use pmwire_keyspace::exec::ServerConfig;
    use pmwire_resp::reply::Protocol;
    use pmwire_smr::state::StateMachine;

    use crate::{Proposer, RedisMachine};

    /// A machine's snapshot written in place after other bytes (as the
    /// replica's record puts it) is the same snapshot, internal values
    /// (chunked collections) and deadlines included.
    #[test]
    fn a_snapshot_written_in_place_is_the_same_snapshot() {
        let mut m = RedisMachine::in_memory(ServerConfig { collections: ChunkConfig::tiny(), ..ServerConfig::default() });
        let mut p = Proposer::with_key(3);
        let mut index = 0;
        let mut run = |m: &mut RedisMachine<_>, args: &[&[u8]]| {
            index += 1;
            let e = p.command(1_000 + index, Protocol::Resp2, &args.iter().map(|a| a.to_vec()).collect::<Vec<_>>());
            m.apply(index, &e);
        };
        for i in 0..40u32 {
            run(&mut m, &[b"SET", format!("s{i}").as_bytes(), &vec![b'a' + (i % 26) as u8; i as usize * 37]]);
            run(&mut m, &[b"HSET", b"h", format!("f{i}").as_bytes(), format!("v{i}").as_bytes()]);
            run(&mut m, &[b"RPUSH", b"l", format!("e{i}").as_bytes()]);
        }
        run(&mut m, &[b"SET", b"t", b"x", b"PX", b"100000"]);
        let whole = m.snapshot();
        let mut out = b"replica part".to_vec();
        m.snapshot_into(&mut out);
        assert_eq!(&out[..12], b"replica part");
        assert_eq!(&out[12..], &whole[..]);
        let data = super::decode(&whole).expect("decodes");
        assert_eq!(data.keys.len(), 43, "40 strings, a hash, a list and a key with a deadline");
        assert!(!data.internal.is_empty(), "tiny chunks make the collections internal entries");
        assert!(data.keys.iter().any(|k| k.key == b"t" && k.deadline_ms.is_some()));
        assert!(data.keys.iter().any(|k| k.key == b"s39" && k.value == vec![b'a' + 13; 39 * 37]));
    }
}

#[cfg(test)]
mod stall {
    use std::time::Instant;

    use pmem::MemMedia;
    use pmwire_keyspace::exec::ServerConfig;
    use pmwire_log::{LogConfig, TailStrategy};
    use pmwire_resp::reply::Protocol;
    use pmwire_smr::pmem_store::PmemDurable;
    use pmwire_smr::snapshot::ReplicaPart;
    use pmwire_smr::state::StateMachine;
    use pmwire_smr::store::Durable;
    use raft::eraftpb::SnapshotMetadata;

    use crate::{Proposer, RedisMachine};

    #[test]
    #[ignore]
    fn snapshot_take_stall() {
        let sizes = std::env::var("PMWIRE_STALL_MIB").unwrap_or_else(|_| "16,64,256".into());
        for mib in sizes.split(',').filter_map(|s| s.trim().parse::<u64>().ok()) {
            let mut m = RedisMachine::in_memory(ServerConfig::default());
            let mut p = Proposer::with_key(7);
            let value = vec![b'v'; 64 << 10];
            for i in 0..mib * 16 {
                let e = p.command(1_000, Protocol::Resp2, &[b"SET".to_vec(), format!("k{i}").into_bytes(), value.clone()]);
                m.apply(i + 1, &e);
            }
            let log = LogConfig::new(1 << 20, TailStrategy::SelfValidating);
            let size = PmemDurable::<MemMedia>::required_size(&log, (mib << 20) + (8 << 20));
            let mut store = PmemDurable::format(MemMedia::new(size as usize), 1, 1, &[1], log).expect("format");
            // The member's path: the machine writes into the record.
            let t0 = Instant::now();
            let record = pmwire_smr::snapshot::encode_with(&ReplicaPart::default(), |out| m.snapshot_into(out));
            let t1 = Instant::now();
            let mut meta = SnapshotMetadata { index: mib * 16, term: 1, ..Default::default() };
            meta.mut_conf_state().voters = vec![1];
            store.install_snapshot(&meta, &record).expect("into the slot");
            let t2 = Instant::now();
            let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
            println!(
                "{mib} MiB keyspace ({} B record): record with the machine's snapshot in place {:.1} ms, store slot {:.1} ms, stall {:.1} ms",
                record.len(),
                ms(t0, t1),
                ms(t1, t2),
                ms(t0, t2)
            );
        }
    }
}
