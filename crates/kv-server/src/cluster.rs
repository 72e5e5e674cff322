//! [`ClusterKeyspace`]: the persistent engine as the keyspace of a replicated
//! Redis machine (`pmwire_kv_cluster::RedisMachine`), which owns it across
//! entries and commits it once per batch of applied entries, the applied
//! index with the writes (`MachineKeyspace::commit`).
//!
//! Every keyspace call goes to an [`EngineKeyspace`] made for it over the
//! store (shared with the member's receive loop: [`SharedStore`]) and one
//! [`BatchState`] kept here. A version-1 entry's values are copied from the
//! log entry into the pool; an extent-form entry's pool values
//! (`pmwire_kv_cluster::extent`) are stored by their extents, the bytes
//! where they landed (`set_segment_locs`). Value handles are held until
//! the machine has taken an entry's replies (`end_entry`), or until a commit.
//!
//! The log seam ([`LogHooks`], `docs/FORMAT.md` "Extent-form Redis
//! entries"): each entry in the durable Raft log holds one pool reference
//! per extent it names (`log_held` / `log_dropped`); an entry being built
//! or absorbed holds its buffers by a temporary reference until the next
//! `log_settled`. A follower absorbs a received wire-form entry by copying
//! its values into fresh pool buffers, flushing them in place, and logging
//! the entry naming them (`local_form`); the leader gathers its values for
//! a peer (`wire_form`). Every copy is counted ([`CopyCounters`]).
//!
//! Determinism: a command refused because the pool is full, or a failed
//! commit, depends on this member's pool, not on the log: it is reported
//! as a fault (`take_fault`), and the machine halts at its next persist
//! instead of going on with a state the others do not have. An entry that
//! finds the batch full is undone and run again by the machine after a
//! commit (`batch_full`, `rollback_entry`), or alone in an oversized batch
//! (`allow_oversize`: committed as a chained transaction).

use std::borrow::Cow;
use std::cell::{Ref, RefCell, RefMut};
use std::rc::Rc;

use pmem::Media;
use pmwire_kv::Savepoint;
use pmwire_kv_cluster::copies::CopyCounters;
use pmwire_kv_cluster::extent::{is_extent_form, v1_value_bytes, walk, Arg, ArgHead, ExtEntry, Extent, MAX_REF_EXTENTS};
use pmwire_kv_cluster::{ExtentBytes, LogHooks, MachineKeyspace, PieceValue};
use pmem::Region;
use pmwire_keyspace::store::{Keyspace, StoreError, ValueSource};
use pmwire_kv::Engine;
use pmwire_netio::BufferSource;

use crate::forward::{EngineHost, Forward};
use crate::keyspace::{BatchState, EngineKeyspace};
use crate::store::{Mode, Store};

/// A value argument at least this long travels by its extents; a shorter
/// one is copied into the entry (an extent and a checksum cost 16 B).
pub const MIN_EXTENT_VALUE_BYTES: usize = 16;
/// The segment location of bytes outside the pool.
const NOT_IN_POOL: (u32, u32) = (u32::MAX, 0);

/// The store, shared by the member's receive loop (its [`BufferSource`]:
/// in zero-copy mode the ring's buffers are pool buffers) and the keyspace.
#[derive(Clone)]
pub struct SharedStore(Rc<RefCell<Store>>);

impl SharedStore {
    /// Shares `store`.
    pub fn new(store: Store) -> SharedStore {
        SharedStore(Rc::new(RefCell::new(store)))
    }

    /// The store.
    pub fn borrow(&self) -> Ref<'_, Store> {
        self.0.borrow()
    }

    /// The store, mutably.
    pub fn borrow_mut(&self) -> RefMut<'_, Store> {
        self.0.borrow_mut()
    }

    /// The pool's free bytes and its buffer area's bytes.
    pub fn pool_room(&self) -> (u64, u64) {
        let st = self.0.borrow();
        let pool = st.engine.pool();
        let size = u64::from(pool.buf_size());
        (u64::from(pool.free_count()) * size, u64::from(pool.buffers()) * size)
    }

    /// The key index's free nodes and all its nodes (`Engine::tree_room`).
    pub fn tree_room(&self) -> (u64, u64) {
        let (free, total) = self.0.borrow().engine.tree_room();
        (free as u64, u64::from(total))
    }

    /// Checkpoints the engine, which releases the buffers of overwritten and
    /// deleted values its WAL still names, then [`SharedStore::pool_room`].
    /// A failed checkpoint keeps the WAL whole; nothing is lost.
    pub fn release_room(&self) -> (u64, u64) {
        {
            let mut st = self.0.borrow_mut();
            let st = &mut *st;
            let _ = st.engine.checkpoint(&mut st.region);
        }
        self.pool_room()
    }

    /// Flushes the lines of `extent` (a value about to be named by a log
    /// entry; [`SharedStore::drain`] before the entry is appended).
    pub fn flush_extent(&self, extent: Extent) {
        let mut st = self.0.borrow_mut();
        let st = &mut *st;
        st.engine.pool().flush_extent(&mut st.region, pool_extent(extent));
    }

    /// The crc32c of the bytes at `extents`, in order.
    pub fn crc_of(&self, extents: &[Extent]) -> u32 {
        let st = self.0.borrow();
        let view = st.view();
        extents.iter().fold(0, |crc, &e| crc32c::crc32c_append(crc, view.bytes(pool_extent(e))))
    }

    /// The bytes at `extents`, gathered.
    pub fn gather(&self, extents: &[Extent]) -> Vec<u8> {
        let st = self.0.borrow();
        let extents: Vec<pmwire_log::Extent> = extents.iter().map(|&e| pool_extent(e)).collect();
        let mut out = Vec::with_capacity(extents.iter().map(|e| e.len as usize).sum());
        st.engine.pool().gather(&st.region, &extents, &mut out);
        out
    }

    /// Takes a reference to each buffer of `bufs`.
    pub fn retain_all(&self, bufs: &[u32]) {
        let mut st = self.0.borrow_mut();
        bufs.iter().for_each(|&b| st.engine.pool_mut().retain(b));
    }

    /// Gives back a reference to each buffer of `bufs`.
    pub fn release_all(&self, bufs: &[u32]) {
        let mut st = self.0.borrow_mut();
        bufs.iter().for_each(|&b| _ = st.engine.pool_mut().release(b));
    }

    /// Waits until the flushed values are durable (before the log entry
    /// naming them is appended: the log's self-validating tail may reach
    /// the media before the log's own fence).
    pub fn drain(&self) {
        self.0.borrow_mut().region.drain();
    }
}

impl BufferSource for SharedStore {
    fn buf_size(&self) -> u32 {
        self.0.borrow().buf_size()
    }

    fn ptr(&self, id: u32) -> *mut u8 {
        self.0.borrow().ptr(id)
    }

    fn alloc(&mut self) -> Option<u32> {
        self.0.borrow_mut().alloc()
    }

    fn retain(&mut self, id: u32) {
        self.0.borrow_mut().retain(id)
    }

    fn release(&mut self, id: u32) {
        self.0.borrow_mut().release(id)
    }
}

fn pool_extent(e: Extent) -> pmwire_log::Extent {
    pmwire_log::Extent { buf_idx: e.buf_idx, offset: e.offset, len: e.len }
}

/// The keyspace behind a replicated Redis machine (module docs): the one
/// forwarding of the executor's calls to the engine (`crate::forward`)
/// over a [`ClusterHost`].
pub type ClusterKeyspace = Forward<ClusterHost>;

/// The engine behind a replicated Redis machine (module docs), as a host of
/// [`Forward`]: it stores values that lie in the pool by their extents,
/// counts the bytes it copies, and notes refusals that depend on this
/// member's pool.
pub struct ClusterHost {
    store: SharedStore,
    state: BatchState,
    now_ms: u64,
    entry_start: Option<Savepoint>,
    fault: Option<String>,
    /// Where the segments of the command being applied lie (empty: not an
    /// extent-form entry).
    locs: Vec<(u32, u32)>,
    /// Buffers held until the next `log_settled` (entries being built or absorbed).
    temp: Vec<u32>,
    copies: CopyCounters,
    /// Values received from a peer go into the pool by their extents.
    zero_copy: bool,
    /// The buffer small received values are packed into (`absorb`).
    fill: Option<Fill>,
    /// Buffer references the durable log's entries hold, counted since
    /// this process started (`log_held` less `log_dropped`, never below 0:
    /// the references counted at a restart are not in it).
    log_buffers: u64,
}

/// A pool buffer being filled with small received values, one after
/// another: it holds one reference of its own until it is full, and each
/// value one more.
#[derive(Debug)]
struct Fill {
    buf: u32,
    used: usize,
}

/// A received value this long or shorter is packed into a shared buffer;
/// a longer one gets buffers of its own.
const PACK_MAX_BYTES: usize = 1024;

impl std::fmt::Debug for ClusterHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterKeyspace({:?}, now {} ms)", self.store.borrow(), self.now_ms)
    }
}

impl Forward<ClusterHost> {
    /// The keyspace over an opened store; in its [`Mode::ZeroCopy`], values
    /// received from a peer are stored in the pool by their extents.
    pub fn new(store: Store) -> ClusterKeyspace {
        ClusterKeyspace::shared(SharedStore::new(store), CopyCounters::new())
    }

    /// The keyspace over a shared store, adding to `copies`.
    pub fn shared(store: SharedStore, copies: CopyCounters) -> ClusterKeyspace {
        let zero_copy = store.borrow().mode() == Mode::ZeroCopy;
        Forward(ClusterHost { store, state: BatchState::default(), now_ms: 0, entry_start: None, fault: None, locs: Vec::new(), temp: Vec::new(), copies, zero_copy, fill: None, log_buffers: 0 })
    }

    /// The store back, every handle released (what is staged and not
    /// committed is dropped with it, as a crash would).
    pub fn into_store(self) -> Store {
        let ClusterHost { store, mut state, temp, .. } = self.0;
        {
            let mut st = store.borrow_mut();
            state.release_held(&mut st.engine);
            temp.into_iter().for_each(|b| _ = st.engine.pool_mut().release(b));
        }
        Rc::try_unwrap(store.0).ok().expect("the store is no longer shared").into_inner()
    }
}

impl ClusterHost {
    /// The store.
    pub fn store(&self) -> Ref<'_, Store> {
        self.store.borrow()
    }

    /// The shared store.
    pub fn shared_store(&self) -> &SharedStore {
        &self.store
    }

    /// The copy counters.
    pub fn copy_counters(&self) -> &CopyCounters {
        &self.copies
    }

    /// Holds the buffers of `extents` until the next `log_settled` (an
    /// entry naming them is being proposed).
    pub fn hold_until_settled(&mut self, extents: &[Extent]) {
        let mut st = self.store.borrow_mut();
        for e in extents {
            st.engine.pool_mut().retain(e.buf_idx);
            self.temp.push(e.buf_idx);
        }
    }

    /// Test hook: the `nth` next commit that has something to write fails
    /// as if the engine refused it (a crash between two commits, once the
    /// keyspace is dropped).
    #[doc(hidden)]
    pub fn fail_commit(&mut self, nth: u32) {
        self.state.fail_commit = nth;
    }

    /// Buffers held for entries not yet settled (tests).
    pub fn unsettled(&self) -> usize {
        self.temp.len()
    }

    /// Buffer references held for handles until the next commit (tests).
    pub fn held(&self) -> usize {
        self.state.held.len()
    }

    /// Runs `f` on an engine keyspace (`zero_copy`: arguments whose pieces
    /// lie in the pool, per `locs`, are stored by their extents).
    fn with_ks<R>(&mut self, zero_copy: bool, f: impl FnOnce(&mut EngineKeyspace<'_>) -> R) -> R {
        let mut st = self.store.borrow_mut();
        let st = &mut *st;
        let reserve = u32::from(st.sizing.ring_entries);
        let mut ks = EngineKeyspace {
            engine: &mut st.engine,
            region: &mut st.region,
            state: &mut self.state,
            zero_copy,
            locs: if zero_copy { &self.locs } else { &[] },
            reserve,
            now_ms: self.now_ms,
        };
        f(&mut ks)
    }

    /// An engine keyspace call that stores nothing by its extents.
    fn ks<R>(&mut self, f: impl FnOnce(&mut EngineKeyspace<'_>) -> R) -> R {
        self.with_ks(false, f)
    }

    /// Notes a refusal that depends on this member's pool.
    fn watch<T>(&mut self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(e @ (StoreError::PoolFull | StoreError::NotPersisted(_) | StoreError::Full)) = &result {
            self.fault.get_or_insert(e.to_string());
        }
        result
    }

    /// Whether every piece of `arg` lies in the pool (an extent-form
    /// entry's value, per `locs`).
    fn in_pool(&self, pieces: &[pmwire_resp::request::Piece]) -> bool {
        !pieces.is_empty() && pieces.iter().all(|p| self.locs.get(p.segment as usize).is_some_and(|&l| l != NOT_IN_POOL))
    }

    /// Where `bytes` lie in the pool's buffer area, if they do: the first
    /// buffer and the offset in it. Only a payload received into lent pool
    /// memory (`crate::rx_arena`) does.
    fn pool_place(&self, bytes: &[u8]) -> Option<(u32, usize)> {
        let st = self.store.borrow();
        if st.heap.is_some() {
            return None;
        }
        let pool = st.engine.pool();
        let size = pool.buf_size() as usize;
        let start = st.ptr(0) as usize;
        let end = start + pool.buffers() as usize * size;
        let at = bytes.as_ptr() as usize;
        if at < start || at.checked_add(bytes.len()).is_none_or(|e| e > end) {
            return None;
        }
        Some((((at - start) / size) as u32, (at - start) % size))
    }

    /// A received value that lies in the pool (module `crate::rx_arena`),
    /// named where it is: flushed in place (durable at the next drain, the
    /// Raft log's append), its buffers held until the log holds the entry.
    /// `None` if it does not lie in the pool.
    fn in_place(&mut self, bytes: &[u8]) -> Option<Arg<'static>> {
        let (first, offset) = self.pool_place(bytes)?;
        let mut st = self.store.borrow_mut();
        let st = &mut *st;
        let arg = place_value(st.engine.pool_mut(), &mut st.region, first, offset, bytes)?;
        if let Arg::Pool { extents, .. } = &arg {
            self.temp.extend(extents.iter().map(|e| e.buf_idx));
        }
        Some(arg)
    }

    /// A received entry's values copied into fresh pool buffers, flushed in
    /// place, as the pool arguments of its local form (`None`: the pool is
    /// too short of free buffers; nothing held).
    ///
    /// A small value (at most [`PACK_MAX_BYTES`]) is packed after the
    /// previous one into a shared buffer: given a 2 KiB buffer each, 16 B
    /// values filled a follower's pool a hundred times faster than the
    /// leader's, whose values share the buffers they were received into,
    /// and the leader's room check (its own pool) let a pipelined load fill
    /// the followers' pools until their machines halted.
    fn absorb(&mut self, bytes: &[u8]) -> Option<Arg<'static>> {
        let mut st = self.store.borrow_mut();
        let st = &mut *st;
        let size = st.engine.pool().buf_size() as usize;
        if bytes.len() <= PACK_MAX_BYTES.min(size) {
            let pool = st.engine.pool_mut();
            if !self.fill.as_ref().is_some_and(|f| f.used + bytes.len() <= size) {
                if pool.free_count() < u32::from(st.sizing.ring_entries) + 1 {
                    return None;
                }
                if let Some(full) = self.fill.take() {
                    pool.release(full.buf);
                }
                self.fill = Some(Fill { buf: pool.alloc().expect("counted free above"), used: 0 });
            }
            let f = self.fill.as_mut().expect("a buffer to fill");
            let e = Extent { buf_idx: f.buf, offset: f.used as u16, len: bytes.len() as u16 };
            st.region.write(pool.extent_offset(pool_extent(e)), bytes);
            pool.flush_extent(&mut st.region, pool_extent(e));
            pool.retain(f.buf);
            f.used += bytes.len();
            self.temp.push(f.buf);
            return Some(Arg::Pool { len: bytes.len() as u32, crc: crc32c::crc32c(bytes), extents: vec![e] });
        }
        let need = bytes.len().div_ceil(size);
        if need as u32 > MAX_REF_EXTENTS || st.engine.pool().free_count() < u32::from(st.sizing.ring_entries) + need as u32 {
            return None;
        }
        let arg = absorb_value(st.engine.pool_mut(), &mut st.region, bytes).expect("counted free above");
        if let Arg::Pool { extents, .. } = &arg {
            self.temp.extend(extents.iter().map(|e| e.buf_idx));
        }
        Some(arg)
    }
}

/// A value copied into fresh pool buffers and flushed in place (durable at
/// the next drain: the Raft log's append), as a pool argument; each buffer
/// holds one reference, the caller's (`None`: the pool ran out; nothing held).
pub fn absorb_value<M: Media>(pool: &mut pmwire_pool::Pool, media: &mut M, bytes: &[u8]) -> Option<Arg<'static>> {
    let size = pool.buf_size() as usize;
    let mut extents = Vec::with_capacity(bytes.len().div_ceil(size));
    for chunk in bytes.chunks(size) {
        let Some(buf) = pool.alloc() else {
            extents.iter().for_each(|e: &Extent| _ = pool.release(e.buf_idx));
            return None;
        };
        let e = Extent { buf_idx: buf, offset: 0, len: chunk.len() as u16 };
        media.write(pool.extent_offset(pool_extent(e)), chunk);
        pool.flush_extent(media, pool_extent(e));
        extents.push(e);
    }
    Some(Arg::Pool { len: bytes.len() as u32, crc: crc32c::crc32c(bytes), extents })
}

/// A value that lies in the pool from `offset` in buffer `first` on (a
/// message received into lent buffers, `crate::rx_arena`), named where it
/// is: its extents split at buffer ends, flushed in place (durable at the
/// next drain: the Raft log's append), one reference taken per extent (the
/// caller's; the lent area holds every buffer it spans meanwhile).
/// `None`: it spans more buffers than an entry names; nothing held.
pub fn place_value<M: Media>(pool: &mut pmwire_pool::Pool, media: &mut M, first: u32, offset: usize, bytes: &[u8]) -> Option<Arg<'static>> {
    let size = pool.buf_size() as usize;
    assert!(offset < size, "an offset inside the buffer");
    let mut extents = Vec::new();
    let (mut buf, mut off, mut left) = (first, offset, bytes.len());
    while left > 0 {
        let len = left.min(size - off);
        extents.push(Extent { buf_idx: buf, offset: off as u16, len: len as u16 });
        left -= len;
        buf += 1;
        off = 0;
    }
    if extents.is_empty() || extents.len() as u32 > MAX_REF_EXTENTS {
        return None;
    }
    for &e in &extents {
        pool.retain(e.buf_idx);
        pool.flush_extent(media, pool_extent(e));
    }
    Some(Arg::Pool { len: bytes.len() as u32, crc: crc32c::crc32c(bytes), extents })
}

/// The log's references for an extent-form entry: one per extent, taken
/// (`hold`) when the durable log holds it, given back when it leaves.
/// Returns the entry's inline value bytes (`ExtEntry::inline_value_bytes`).
/// The entry is walked by its heads (`extent::walk`): it is this member's
/// own, checked when it was logged.
pub fn entry_refs(pool: &mut pmwire_pool::Pool, data: &[u8], hold: bool) -> (u64, u64) {
    let (mut inline, mut buffers) = (0u64, 0u64);
    let walked = walk(data, |i, head| {
        inline += head.inline_value_bytes(i);
        for buf in head.buffers() {
            buffers += 1;
            if hold {
                pool.retain(buf);
            } else {
                pool.release(buf);
            }
        }
    });
    assert!(walked, "this member logged the entry");
    (inline, buffers)
}

/// Value bytes protobuf's encoding copies when it sends `data` as it is
/// (an entry of the old form, or of the extent form with no pool argument).
fn sent_as_is(data: &[u8]) -> u64 {
    if !is_extent_form(data) {
        return v1_value_bytes(data);
    }
    let mut inline = 0u64;
    walk(data, |i, head| inline += head.inline_value_bytes(i));
    inline
}

impl LogHooks for ClusterHost {
    fn wire_form_again(&mut self, data: &[u8], wire: Option<&[u8]>) {
        // protobuf's encoding copies the values again; nothing is gathered.
        let values = sent_as_is(wire.unwrap_or(data));
        self.copies.add(|c| c.sent += values);
    }

    fn wire_form(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        if !is_extent_form(data) {
            // protobuf's encoding copies the entry, values and all.
            let values = v1_value_bytes(data);
            self.copies.add(|c| c.sent += values);
            return None;
        }
        // No pool argument (small values): sent as logged, copied once by
        // protobuf's encoding; not decoded and encoded again.
        let (mut pooled, mut inline) = (false, 0u64);
        let walked = walk(data, |i, head| {
            pooled |= matches!(head, ArgHead::Pool { .. });
            inline += head.inline_value_bytes(i);
        });
        if walked && !pooled {
            self.copies.add(|c| c.sent += inline);
            return None;
        }
        let e = ExtEntry::decode(data).ok()?;
        let st = self.store.borrow();
        let view = st.view();
        let mut args = Vec::with_capacity(e.args.len());
        let mut gathered = 0u64;
        for a in e.args {
            args.push(match a {
                Arg::Pool { len, extents, .. } => {
                    let mut bytes = Vec::with_capacity(len as usize);
                    for x in extents {
                        bytes.extend_from_slice(view.bytes(pool_extent(x)));
                    }
                    gathered += u64::from(len);
                    Arg::Inline(Cow::Owned(bytes))
                }
                inline => inline,
            });
        }
        let wire = ExtEntry { args, ..e };
        // Gathered into the wire form, then copied again by protobuf's encoding.
        let values = 2 * gathered + wire.inline_value_bytes() - gathered;
        self.copies.add(|c| c.sent += values);
        Some(wire.encode())
    }

    fn local_form(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        // protobuf's decoding copied the message into the entry, unless the
        // message was received into the pool (`crate::rx_arena`) and the
        // entry shares it (then the log's append is its first copy).
        let in_pool = self.pool_place(data).is_some();
        if !is_extent_form(data) {
            let values = if in_pool { 0 } else { v1_value_bytes(data) };
            self.copies.add(|c| c.received += values);
            return None;
        }
        // Nothing to absorb (no value large enough): logged as received,
        // not decoded and encoded again.
        let (mut large, mut inline) = (false, 0u64);
        let walked = walk(data, |i, head| {
            let value = head.inline_value_bytes(i);
            inline += value;
            large |= value >= MIN_EXTENT_VALUE_BYTES as u64;
        });
        if walked && !(large && self.zero_copy) {
            let copied = if in_pool { 0 } else { inline };
            self.copies.add(|c| c.received += copied);
            return None;
        }
        let e = ExtEntry::decode(data).ok()?;
        let mut copied = if in_pool { 0 } else { e.inline_value_bytes() };
        if !self.zero_copy {
            self.copies.add(|c| c.received += copied);
            return None;
        }
        let mut args = Vec::with_capacity(e.args.len());
        for (i, a) in e.args.iter().enumerate() {
            let local = match a {
                Arg::Inline(b) if i >= 2 && b.len() >= MIN_EXTENT_VALUE_BYTES => match in_pool.then(|| self.in_place(b)).flatten() {
                    Some(arg) => Some(arg),
                    None => {
                        let absorbed = self.absorb(b);
                        if absorbed.is_some() {
                            copied += b.len() as u64;
                        }
                        absorbed
                    }
                },
                _ => None,
            };
            if let (None, Arg::Inline(b), true) = (&local, a, in_pool && i >= 2) {
                // Kept inline: the local form's encoding copies it (from a
                // message in the pool, nothing had copied it before).
                copied += b.len() as u64;
            }
            args.push(local.unwrap_or_else(|| a.clone()));
        }
        self.copies.add(|c| c.received += copied);
        // The values are durable before the entry naming them can be: the
        // Raft log's tail validates itself, so its lines may reach the
        // media before its own fence (the crash checker found this).
        self.store.borrow_mut().region.drain();
        Some(ExtEntry { args, ..e }.encode())
    }

    fn log_held(&mut self, data: &[u8]) {
        if !is_extent_form(data) {
            let values = v1_value_bytes(data);
            self.copies.add(|c| c.log += values);
            return;
        }
        let (inline, buffers) = entry_refs(self.store.borrow_mut().engine.pool_mut(), data, true);
        self.log_buffers += buffers;
        self.copies.add(|c| c.log += inline);
    }

    fn log_dropped(&mut self, data: &[u8]) {
        if !is_extent_form(data) {
            return;
        }
        let (_, buffers) = entry_refs(self.store.borrow_mut().engine.pool_mut(), data, false);
        self.log_buffers = self.log_buffers.saturating_sub(buffers);
    }

    /// Below half the pool free, with the log holding at least a sixteenth
    /// of the pool: its entries' buffers are wanted back, so the replica
    /// compacts (a value deleted or overwritten keeps its buffer for as
    /// long as a log entry names it: a FLUSHALL of a full pool freed
    /// nothing until the next routine compaction, thousands of entries
    /// later, which the refused writes never came to). The bound on what
    /// the log holds keeps a pool legitimately more than half full from
    /// compacting every turn.
    fn log_room_wanted(&mut self) -> bool {
        let st = self.store.0.borrow();
        let pool = st.engine.pool();
        let (free, total) = (u64::from(pool.free_count()), u64::from(pool.buffers()));
        free < total / 2 && self.log_buffers >= total / 16
    }

    fn log_settled(&mut self) {
        if self.temp.is_empty() {
            return;
        }
        let mut st = self.store.borrow_mut();
        for b in self.temp.drain(..) {
            st.engine.pool_mut().release(b);
        }
    }
}

impl MachineKeyspace for ClusterKeyspace {
    fn set_now_ms(&mut self, now_ms: u64) {
        self.0.now_ms = now_ms;
    }

    fn is_persistent(&self) -> bool {
        true
    }

    fn commit(&mut self) -> Result<(), String> {
        let mut st = self.0.store.borrow_mut();
        let st = &mut *st;
        let result = self.0.state.commit(&mut st.engine, &mut st.region);
        self.0.state.release_held(&mut st.engine);
        result.map_err(|()| self.0.state.failed.clone().unwrap_or_else(|| "commit failed".into()))
    }

    fn begin_entry(&mut self) {
        self.0.entry_start = Some(self.0.store.borrow().engine.savepoint());
    }

    fn batch_full(&self) -> bool {
        self.0.state.batch_full
    }

    fn rollback_entry(&mut self) {
        let start = self.0.entry_start.take().expect("an entry began");
        self.0.store.borrow_mut().engine.rollback_to(start);
        self.0.state.batch_full = false;
    }

    fn allow_oversize(&mut self) {
        self.0.store.borrow_mut().engine.allow_oversize();
    }

    fn take_fault(&mut self) -> Option<String> {
        self.0.fault.take()
    }

    fn end_entry(&mut self) {
        self.0.entry_start = None;
        self.0.locs.clear();
        self.0.state.release_held(&mut self.0.store.borrow_mut().engine);
    }

    fn copies(&self) -> Option<&CopyCounters> {
        Some(&self.0.copies)
    }

    fn extent_bytes(&self, extent: Extent) -> Option<ExtentBytes> {
        let st = self.0.store.borrow();
        let e = pool_extent(extent);
        st.engine.pool().check_live_extent(e).ok()?;
        let view = st.view();
        let bytes = view.bytes(e);
        // SAFETY: the buffer is live (checked) and referenced by the log
        // entry being applied, which holds it until the entry leaves the
        // log, or by a streamed piece's internal entry, which holds it
        // until a checkpoint after its deletion (never inside an entry);
        // nothing writes a referenced buffer, and the mapping outlives the
        // keyspace.
        Some(unsafe { ExtentBytes::new(bytes.as_ptr(), bytes.len()) })
    }

    fn put_piece(&mut self, key: &[u8], value: PieceValue<'_>) -> Result<(), StoreError> {
        let result = match value {
            PieceValue::Pool(x) => {
                let x: Vec<pmwire_log::Extent> = x.iter().map(|&e| pool_extent(e)).collect();
                self.0.ks(|k| k.internal_put_extents(key, &x))
            }
            PieceValue::Bytes(bytes) => self.0.ks(|k| k.internal_put(key, bytes)),
        };
        self.0.watch(result)
    }

    fn piece_extents(&mut self, key: &[u8]) -> Option<Vec<Extent>> {
        let x = self.0.ks(|k| k.internal_extents(key))?;
        Some(x.into_iter().map(|e| Extent { buf_idx: e.buf_idx, offset: e.offset, len: e.len }).collect())
    }

    fn set_segment_locs(&mut self, locs: &[Option<(u32, u32)>]) {
        self.0.locs.clear();
        self.0.locs.extend(locs.iter().map(|l| l.unwrap_or(NOT_IN_POOL)));
    }

    fn log_hooks(&mut self) -> Option<&mut dyn LogHooks> {
        Some(self)
    }
}

impl LogHooks for Forward<ClusterHost> {
    fn log_room_wanted(&mut self) -> bool {
        self.0.log_room_wanted()
    }

    fn wire_form(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        self.0.wire_form(data)
    }

    fn wire_form_again(&mut self, data: &[u8], wire: Option<&[u8]>) {
        self.0.wire_form_again(data, wire)
    }

    fn local_form(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        self.0.local_form(data)
    }

    fn log_held(&mut self, data: &[u8]) {
        self.0.log_held(data)
    }

    fn log_dropped(&mut self, data: &[u8]) {
        self.0.log_dropped(data)
    }

    fn log_settled(&mut self) {
        self.0.log_settled()
    }
}

impl EngineHost for ClusterHost {
    type Media = Region;

    fn lend<R>(&mut self, f: impl FnOnce(&mut EngineKeyspace<'_>) -> R) -> R {
        self.with_ks(false, f)
    }

    fn lend_put<R>(&mut self, by_extents: bool, f: impl FnOnce(&mut EngineKeyspace<'_>) -> R) -> R {
        self.with_ks(by_extents, f)
    }

    fn put_by_extents(&mut self, value: &ValueSource<'_>) -> bool {
        let by_extents = matches!(value, ValueSource::Arg(a) if self.in_pool(a.pieces));
        if let ValueSource::Arg(a) = value {
            if !by_extents {
                let n = a.len() as u64;
                self.copies.add(|c| c.applied += n);
            }
        }
        by_extents
    }

    fn peek<R>(&self, f: impl FnOnce(&Engine, &Region) -> R) -> R {
        let st = self.store.borrow();
        f(&st.engine, &st.region)
    }

    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    fn wrote<T>(&mut self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        self.watch(result)
    }
}
