//! The RESP executor's view of the engine ([`EngineKeyspace`]) and the reply sink over a
//! connection's [`Output`] ([`OutputSink`]).
//!
//! Value handles: `get` takes one pool reference per extent of the value and records it in the
//! batch's *held* list; the service releases the held list at the start of the next batch (or
//! when a connection closes), i.e. after the loop has taken the replies and retained every
//! zero-copy part. So a handle stays readable for the whole batch even when the key is
//! overwritten and `commit` checkpoints and frees the old value's buffers before the loop
//! retains the output (the keyspace contract of `pmwire_keyspace::store`).
//!
//! Writes are staged in the engine; the service commits once per batch, failure-atomically
//! whatever its size (the engine commits a batch larger than one WAL group as a transaction
//! over several). If a command finds the batch full (`StageError::BatchFull`: the WAL's
//! room for one commit), the keyspace says so
//! ([`BatchState::batch_full`]) and the service undoes that command's staging, commits the
//! commands before it (an early commit, at a command boundary: no command is ever split
//! across two commits) and runs it again in the fresh batch. A failed commit marks the batch
//! failed: nothing more is executed and every command after the last early commit is
//! answered with the error (those before it are durable and keep their replies). A command
//! (or EXEC) that finds a fresh batch full too is larger than the WAL: it is refused whole
//! with `-OOM` naming that limit, nothing of it kept.
//!
//! Expiry: the engine stores each key's deadline with its record; the keyspace compares it
//! with `now_ms` (the service's clock, read once per batch). An expired key is invisible:
//! `get` stages its delete (Redis's lazy expiry), `scan` skips it, writes treat it as absent,
//! and the service's active sweep deletes a bounded number per batch.
//!
//! Internal entries (the chunks of large collections, `pmwire_keyspace::chunked`): the engine
//! holds user keys and internal keys in one ordered map, told apart by an escape on the
//! first byte. A user key whose first byte is `FF` is stored as `FF` + the key (`FF FF ...`);
//! an internal key `i` (whose first byte is `00`, `01` or `02`) as `FF` + `i`. So the
//! mapping is injective, user keys keep their byte order, and the internal entries are the
//! one contiguous range `[FF 00, FF FF)`, which `scan` steps over and `len` subtracts. The
//! longest user key is one byte shorter than the engine's longest key.

use std::borrow::Cow;
use std::ops::Bound;
use std::rc::Rc;

use pmwire_btree::MAX_KEY_BYTES;
use pmwire_kv::{Engine, Savepoint, StageError};
use pmwire_log::Extent;
use pmwire_netio::{Output, OutputMark};
use pmwire_keyspace::chunked::{header_len_fits, tombstone_key, value_generation};
use pmwire_keyspace::store::{Expiry, Keyspace, Kind, StoreError, StoreLimits, Stored, ValueSource};
use pmwire_resp::reply::ReplySink;

use crate::store::{PoolView, MAX_VALUE_BYTES};
use pmem::{Media, Region};

/// A stored value's extents, as handed to the executor and the sink: inline for values of
/// up to two extents (no allocation per GET), shared otherwise.
#[derive(Clone, Debug)]
pub enum Handle {
    /// Up to two extents (the count, then the extents).
    Inline(u8, [Extent; 2]),
    /// More.
    Shared(Rc<[Extent]>),
}

impl Handle {
    fn new(extents: &[Extent]) -> Handle {
        match extents {
            [] => Handle::Inline(0, [Extent { buf_idx: 0, offset: 0, len: 0 }; 2]),
            [one] => Handle::Inline(1, [*one; 2]),
            [a, b] => Handle::Inline(2, [*a, *b]),
            many => Handle::Shared(many.into()),
        }
    }
}

impl std::ops::Deref for Handle {
    type Target = [Extent];

    fn deref(&self) -> &[Extent] {
        match self {
            Handle::Inline(n, extents) => &extents[..*n as usize],
            Handle::Shared(extents) => extents,
        }
    }
}

/// The escape byte before internal keys and before user keys that begin with it.
const ESCAPE: u8 = 0xFF;
/// The first stored key of the internal range, and the first after it.
const INTERNAL_LO: &[u8] = &[ESCAPE, 0x00];
const INTERNAL_HI: &[u8] = &[ESCAPE, ESCAPE];

/// How the engine stores the user key `key` (escaped if it begins with [`ESCAPE`]).
pub(crate) fn stored_key(key: &[u8]) -> Cow<'_, [u8]> {
    if key.first() == Some(&ESCAPE) {
        let mut k = Vec::with_capacity(key.len() + 1);
        k.push(ESCAPE);
        k.extend_from_slice(key);
        Cow::Owned(k)
    } else {
        Cow::Borrowed(key)
    }
}

/// The user key stored as `stored` (`None` for an internal key).
pub(crate) fn user_key(stored: &[u8]) -> Option<&[u8]> {
    match stored {
        [ESCAPE, ESCAPE, ..] => Some(&stored[1..]),
        [ESCAPE, ..] => None,
        _ => Some(stored),
    }
}

/// How the engine stores the internal key `key`.
pub(crate) fn internal_key(key: &[u8]) -> Vec<u8> {
    assert!(key.first().is_some_and(|&b| b < ESCAPE), "an internal key begins below FF");
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(ESCAPE);
    k.extend_from_slice(key);
    k
}

/// Whether some dead collection generation waits for garbage collection.
pub(crate) fn has_garbage(engine: &Engine) -> bool {
    let tomb = internal_key(&tombstone_key(0)[..1]);
    engine.entries(Bound::Included(&tomb[..])).next().is_some_and(|(k, _)| k.starts_with(&tomb))
}

/// Number of internal entries (O(internal entries)).
pub(crate) fn internal_count(engine: &Engine) -> usize {
    engine.entries(Bound::Included(INTERNAL_LO)).take_while(|(k, _)| *k < INTERNAL_HI).count()
}

/// Where the pieces of a request lie: `(buffer, offset)` of each segment given to the parser.
pub(crate) type Locs<'a> = &'a [(u32, u32)];

/// Batch-wide state the keyspace shares with the service.
#[derive(Debug, Default)]
pub(crate) struct BatchState {
    /// Buffers retained for handles given out in this batch.
    pub held: Vec<u32>,
    /// Keys reads found expired (lazy expiry) since the executor last took them
    /// (`Keyspace::take_expired`: keyspace notifications' `expired`); cleared per batch.
    pub expired_by_reads: Vec<Vec<u8>>,
    /// Something was staged since the last commit.
    pub wrote: bool,
    /// Commits made inside the batch because it outgrew the WAL's room.
    pub early_commits: u64,
    /// A staging call found the batch full: the current command must be undone and run
    /// again after a commit (the service does it, at the command's boundary).
    pub batch_full: bool,
    /// Where the command being executed began staging: a command that fails is rolled back
    /// to it (`Keyspace::abort_command`), so its error reply means nothing of it was stored;
    /// inside EXEC only that command is, its siblings keep their writes (as in Redis).
    pub command_start: Option<Savepoint>,
    /// Where the script being run began staging: a script stopped past its time limit is
    /// rolled back to it (`Keyspace::abort_script`), every command it ran included.
    pub script_start: Option<Savepoint>,
    /// Planted bug (the crash campaign's canary): a script's writes are committed command
    /// by command, so a kill inside a script leaves part of it.
    pub fault_script_commit_per_call: bool,
    /// The batch entry being executed, and how many of its requests came before the
    /// current one.
    pub entry: usize,
    pub entry_requests: usize,
    /// The part of the batch an early commit made durable: its replies are final.
    pub committed: Option<Committed>,
    /// Why the batch could not be persisted (set once; nothing more is executed).
    pub failed: Option<String>,
    /// Commits that wrote and succeeded (ever): a blocked pop served when this was `n` is
    /// durable once it is above `n`.
    pub commits_ok: u64,
    /// Test hook: the `n`-th next commit that has something to write (early ones included)
    /// fails as if the engine refused it; 0: none.
    pub fail_commit: u32,
}

/// Where the durable prefix of a batch ends: in entry `entry`, after its first `requests`
/// requests, whose replies end at `mark`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Committed {
    pub entry: usize,
    pub requests: usize,
    pub mark: OutputMark,
}

impl BatchState {
    /// Commits what is staged, at the boundary before the current request, whose replies
    /// so far end at `mark`: everything before it is then durable and answered as is.
    pub fn commit_early<M: Media>(&mut self, engine: &mut Engine, region: &mut M, mark: OutputMark) -> Result<(), ()> {
        self.early_commits += 1;
        self.commit(engine, region)?;
        self.committed = Some(Committed { entry: self.entry, requests: self.entry_requests, mark });
        Ok(())
    }

    /// Commits what is staged (if anything). On failure the engine is rolled back and the
    /// batch marked failed.
    pub fn commit<M: Media>(&mut self, engine: &mut Engine, region: &mut M) -> Result<(), ()> {
        if self.failed.is_some() {
            engine.rollback();
            return Err(());
        }
        if !self.wrote {
            return Ok(());
        }
        self.wrote = false;
        let injected = self.fail_commit == 1;
        self.fail_commit = self.fail_commit.saturating_sub(1);
        if injected {
            engine.rollback();
            self.failed = Some("injected commit failure".into());
            return Err(());
        }
        engine.commit(region).map(|()| self.commits_ok += 1).map_err(|e| self.failed = Some(e.to_string()))
    }

    /// Releases every held buffer.
    pub fn release_held(&mut self, engine: &mut Engine) {
        for buf in self.held.drain(..) {
            engine.pool_mut().release(buf);
        }
    }
}

/// The engine as a RESP keyspace, for one connection's input in one batch
/// (on a mapped region; on any medium for the simulation's crash images).
pub(crate) struct EngineKeyspace<'a, M: Media = Region> {
    pub engine: &'a mut Engine,
    pub region: &'a mut M,
    pub state: &'a mut BatchState,
    /// Store arguments by their extents (the ring is the pool).
    pub zero_copy: bool,
    /// Locations of the parser's segments.
    pub locs: Locs<'a>,
    /// Free pool buffers a write must leave (the receive ring's refill): below it, writes
    /// are refused as out of memory, so the loop can always receive the DEL that frees space.
    pub reserve: u32,
    /// The time deadlines are compared with, ms since the Unix epoch.
    pub now_ms: u64,
}

impl<M: Media> EngineKeyspace<'_, M> {
    /// The live value at `key` (kind, deadline, handle), its buffers held for the batch. An
    /// expired key is deleted (staged; if that fails it stays for the sweep) and not returned.
    pub fn get_held(&mut self, user: &[u8]) -> Option<(u8, Option<u64>, Handle)> {
        let key = stored_key(user);
        let entry = self.engine.lookup(&key)?;
        if entry.deadline_ms.is_some_and(|d| d <= self.now_ms) {
            let deleted = self.retire(&key, None).and_then(|()| self.stage(|engine, region| engine.delete(region, &key)));
            if deleted.is_ok() {
                self.state.expired_by_reads.push(user.to_vec());
            }
            return None;
        }
        let (kind, deadline) = (entry.kind, entry.deadline_ms);
        let handle = Handle::new(entry.extents);
        self.hold(&handle);
        Some((kind, deadline, handle))
    }

    /// The deadline of `key` if it is live: `Some(None)` for a key that does not expire.
    fn live_deadline(&self, key: &[u8]) -> Option<Option<u64>> {
        let entry = self.engine.lookup(&stored_key(key))?;
        match entry.deadline_ms {
            Some(d) if d <= self.now_ms => None,
            deadline => Some(deadline),
        }
    }

    /// The generation of the chunked collection header stored at `stored` (an engine key),
    /// if that is what it holds.
    fn header_generation(&self, stored: &[u8]) -> Option<u64> {
        let entry = self.engine.lookup(stored)?;
        let kind = Kind::from_byte(entry.kind).filter(|&k| k != Kind::String)?;
        let len = entry.extents.iter().map(|e| e.len as usize).sum::<usize>();
        if !header_len_fits(kind, len) {
            return None;
        }
        let mut bytes = Vec::with_capacity(len);
        self.engine.pool().gather(&*self.region, entry.extents, &mut bytes);
        value_generation(kind, &bytes)
    }

    /// The generation rule (`Keyspace::has_internal`) before the value at `stored` (an
    /// engine key) is deleted or replaced by a value whose header generation is `new_gen`:
    /// stages the old generation's tombstone, or lifts the new one's.
    fn retire(&mut self, stored: &[u8], new_gen: Option<u64>) -> Result<(), StoreError> {
        let old_gen = self.header_generation(stored);
        if let Some(g) = old_gen.filter(|&g| Some(g) != new_gen) {
            let tomb = internal_key(&tombstone_key(g));
            self.stage(|engine, region| engine.set_copy(region, &tomb, 0, &[]))?;
        }
        if let Some(n) = new_gen.filter(|&n| Some(n) != old_gen) {
            let tomb = internal_key(&tombstone_key(n));
            if self.engine.lookup(&tomb).is_some() {
                self.stage(|engine, region| engine.delete(region, &tomb))?;
            }
        }
        Ok(())
    }

    /// Holds the buffers of `extents` for the batch.
    pub fn hold(&mut self, extents: &[Extent]) {
        for e in extents {
            self.engine.pool_mut().retain(e.buf_idx);
            self.state.held.push(e.buf_idx);
        }
    }

    /// Runs a staging operation. If the batch is full, flags it ([`BatchState::batch_full`])
    /// for the service, which undoes and reruns the whole command after a commit; the error
    /// returned meanwhile is never answered. Once set, later staging of the command fails
    /// at once.
    pub fn stage<T>(
        &mut self,
        mut op: impl FnMut(&mut Engine, &mut M) -> Result<T, StageError>,
    ) -> Result<T, StoreError> {
        if let Some(why) = &self.state.failed {
            return Err(StoreError::NotPersisted(why.clone()));
        }
        if self.state.batch_full {
            return Err(self.too_large());
        }
        let result = op(self.engine, self.region);
        if let Err(StageError::BatchFull { .. }) = result {
            self.state.batch_full = true;
        }
        match result {
            Ok(value) => {
                self.state.wrote = true;
                Ok(value)
            }
            Err(StageError::KeyTooLong { len, max }) => {
                Err(StoreError::KeyTooLong { len: len as u64, max: max as u64 })
            }
            Err(StageError::ValueTooLong { extents, max }) => {
                Err(StoreError::TooManyExtents { extents: extents as u64, max: max as u64 })
            }
            Err(StageError::BatchFull { .. }) => Err(self.too_large()),
            Err(StageError::PoolFull) => Err(StoreError::PoolFull),
            Err(StageError::Extent(e)) => panic!("a received extent is not live in the pool: {e}"),
        }
    }

    /// The refusal of a command larger than one commit.
    pub fn too_large(&self) -> StoreError {
        StoreError::TooLargeToCommit {
            max: self.engine.max_batch_words().max(pmwire_kv::chain::MAX_CHAIN_EXTENTS) as u64,
        }
    }

    /// Stores a value of `len` bytes found at `extents` (zero-copy when allowed and the value
    /// is not split into more extents than the engine takes), else copies the bytes `gather`
    /// returns; with the deadline `deadline_ms` (`None`: the key does not expire).
    pub fn set_value<'b>(
        &mut self,
        key: &[u8],
        kind: u8,
        deadline_ms: Option<u64>,
        len: usize,
        extents: Option<&[Extent]>,
        gather: impl FnOnce() -> Cow<'b, [u8]>,
    ) -> Result<(), StoreError> {
        self.set_value_gen(key, kind, deadline_ms, len, extents, gather, None)
    }

    /// [`EngineKeyspace::set_value`] of a value that is a chunked collection header of
    /// generation `new_gen` (if `Some`).
    #[allow(clippy::too_many_arguments)]
    fn set_value_gen<'b>(
        &mut self,
        key: &[u8],
        kind: u8,
        deadline_ms: Option<u64>,
        len: usize,
        extents: Option<&[Extent]>,
        gather: impl FnOnce() -> Cow<'b, [u8]>,
        new_gen: Option<u64>,
    ) -> Result<(), StoreError> {
        let limits = self.limits();
        if key.len() as u64 > limits.max_key_bytes {
            return Err(StoreError::KeyTooLong { len: key.len() as u64, max: limits.max_key_bytes });
        }
        if len as u64 > limits.max_value_bytes {
            return Err(StoreError::ValueTooLong { len: len as u64, max: limits.max_value_bytes });
        }
        self.check_room()?;
        let key = stored_key(key);
        self.retire(&key, new_gen)?;
        let max_extents = self.engine.max_value_extents();
        match extents {
            Some(extents) if self.zero_copy && extents.len() <= max_extents => {
                self.stage(|engine, region| engine.set_extents_expiring(region, &key, kind, deadline_ms, extents))
            }
            _ => {
                let bytes = gather();
                self.stage(|engine, region| engine.set_copy_expiring(region, &key, kind, deadline_ms, &bytes))
            }
        }
    }

    /// Refuses a write that would eat into the receive reserve, after a checkpoint has
    /// released what overwritten and deleted values still held (the WAL's records keep their
    /// buffers until then).
    pub fn check_room(&mut self) -> Result<(), StoreError> {
        if self.engine.pool().free_count() >= self.reserve {
            return Ok(());
        }
        let _ = self.engine.checkpoint(self.region); // on failure the WAL keeps every record
        if self.engine.pool().free_count() < self.reserve {
            return Err(StoreError::PoolFull);
        }
        Ok(())
    }

    /// Stores the internal entry `key` by reference to `extents`, bytes already in the pool
    /// (the pieces of a streamed value, `pmwire_kv_cluster::machine::ext`); copied if they
    /// are more than one value may name.
    pub fn internal_put_extents(&mut self, key: &[u8], extents: &[Extent]) -> Result<(), StoreError> {
        self.check_room()?;
        let key = internal_key(key);
        if extents.len() > self.engine.max_value_extents() {
            let mut bytes = Vec::new();
            self.engine.pool().gather(&*self.region, extents, &mut bytes);
            return self.stage(|engine, region| engine.set_copy(region, &key, 0, &bytes));
        }
        self.stage(|engine, region| engine.set_extents_expiring(region, &key, 0, None, extents))
    }

    /// The extents of the internal entry `key`, if there is one.
    pub fn internal_extents(&self, key: &[u8]) -> Option<Vec<Extent>> {
        Some(self.engine.lookup(&internal_key(key))?.extents.to_vec())
    }

    /// Extents of a RESP argument's pieces (`None` if it has none: quoted inline arguments).
    fn arg_extents(&self, pieces: &[pmwire_resp::request::Piece]) -> Option<Vec<Extent>> {
        if pieces.is_empty() || !self.zero_copy {
            return None;
        }
        Some(pieces.iter().map(|p| self.piece_extent(p)).collect())
    }

    /// Where a piece of a RESP argument lies in the pool.
    fn piece_extent(&self, p: &pmwire_resp::request::Piece) -> Extent {
        let (buf, offset) = self.locs[p.segment as usize];
        piece_in_buffer(buf, offset + p.start, p.len)
    }
}

/// The bytes an engine's keyspace occupies in its pool (INFO's `used_memory`, what
/// `maxmemory` is compared with): every pool buffer referenced, whole (a value held by
/// extents keeps its buffer; the receive ring's lent buffers and those a connection holds now
/// are counted too: about 2 MiB on an idle server, a baseline as Redis's `used_memory` has),
/// and every index node in use.
pub(crate) fn used_memory(engine: &Engine) -> u64 {
    let pool = engine.pool();
    let buffers = u64::from(pool.buffers() - pool.free_count());
    let (free_nodes, nodes) = engine.tree_room();
    let used_nodes = u64::from(nodes).saturating_sub(free_nodes as u64);
    buffers * u64::from(pool.buf_size()) + used_nodes * pmwire_btree::NODE_BYTES as u64
}

impl<M: Media> Keyspace for EngineKeyspace<'_, M> {
    type Value = Handle;

    fn get(&mut self, key: &[u8]) -> Option<Stored<Handle>> {
        let (kind, deadline_ms, handle) = self.get_held(key)?;
        let len = handle.iter().map(|e| e.len as u64).sum();
        Some(Stored { kind: Kind::from_byte(kind).unwrap_or(Kind::String), len, value: handle, deadline_ms })
    }

    fn read(&self, value: &Handle, out: &mut Vec<u8>) {
        self.engine.pool().gather(&*self.region, value, out);
    }

    fn put(&mut self, key: &[u8], kind: Kind, value: ValueSource<'_>, expiry: Expiry) -> Result<(), StoreError> {
        let deadline = match expiry {
            Expiry::Keep => self.live_deadline(key).flatten(),
            Expiry::Clear => None,
            Expiry::At(ms) => Some(ms),
        };
        match value {
            ValueSource::Arg(arg) if self.zero_copy && (1..=4).contains(&arg.pieces.len()) => {
                // The common case without an allocation: a value in at most four pieces.
                let mut extents = [Extent { buf_idx: 0, offset: 0, len: 0 }; 4];
                for (e, p) in extents.iter_mut().zip(arg.pieces) {
                    *e = self.piece_extent(p);
                }
                let extents = &extents[..arg.pieces.len()];
                let len = arg.len();
                self.set_value(key, kind.to_byte(), deadline, len, Some(extents), || Cow::Borrowed(arg.bytes()))
            }
            ValueSource::Arg(arg) => {
                let extents = self.arg_extents(arg.pieces);
                let len = arg.len();
                self.set_value(key, kind.to_byte(), deadline, len, extents.as_deref(), || Cow::Borrowed(arg.bytes()))
            }
            // Owned or borrowed: bytes without extents, copied.
            value => {
                let bytes = value.bytes();
                let new_gen = value_generation(kind, bytes);
                self.set_value_gen(key, kind.to_byte(), deadline, bytes.len(), None, || Cow::Borrowed(bytes), new_gen)
            }
        }
    }

    fn set_deadline(&mut self, key: &[u8], deadline_ms: Option<u64>) -> Result<bool, StoreError> {
        if self.live_deadline(key).is_none() {
            return Ok(false);
        }
        self.check_room()?;
        let key = stored_key(key);
        self.stage(|engine, region| engine.set_deadline(region, &key, deadline_ms))
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        let live = self.live_deadline(key).is_some();
        let key = stored_key(key);
        self.retire(&key, None)?;
        let found = self.stage(|engine, region| engine.delete(region, &key))?;
        Ok(found && live)
    }

    fn scan(&mut self, after: Option<&[u8]>, limit: usize, visit: &mut dyn FnMut(&[u8], Kind)) -> usize {
        let after = after.map(stored_key);
        let now = self.now_ms;
        let mut n = 0;
        // User keys below the internal range, then those above it (escaped).
        let below = match &after {
            Some(a) if &a[..] >= INTERNAL_LO => None,
            Some(a) => Some(Bound::Excluded(&a[..])),
            None => Some(Bound::Unbounded),
        };
        if let Some(start) = below {
            let live = self.engine.entries(start).take_while(|(k, _)| *k < INTERNAL_LO);
            for (key, entry) in live.filter(|(_, e)| e.deadline_ms.is_none_or(|d| d > now)).take(limit) {
                visit(key, Kind::from_byte(entry.kind).unwrap_or(Kind::String));
                n += 1;
            }
        }
        let above = match &after {
            Some(a) if &a[..] >= INTERNAL_HI => Bound::Excluded(&a[..]),
            _ => Bound::Included(INTERNAL_HI),
        };
        let live = self.engine.entries(above).filter(|(_, e)| e.deadline_ms.is_none_or(|d| d > now));
        for (key, entry) in live.take(limit - n) {
            let key = user_key(key).expect("above the internal range");
            visit(key, Kind::from_byte(entry.kind).unwrap_or(Kind::String));
            n += 1;
        }
        n
    }

    fn len(&self) -> u64 {
        user_len(self.engine)
    }

    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    fn expired(&self, limit: usize) -> Vec<Vec<u8>> {
        expired_keys(self.engine, self.now_ms, limit)
    }

    fn expiring_len(&self) -> u64 {
        self.engine.expiring_len() as u64
    }

    fn used_memory(&self) -> u64 {
        used_memory(self.engine)
    }

    fn take_expired(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.state.expired_by_reads)
    }

    fn clear(&mut self) -> Result<(), StoreError> {
        self.stage(|engine, region| engine.clear(region))
    }

    fn begin_command(&mut self) {
        if self.state.fault_script_commit_per_call && self.state.script_start.is_some() {
            // The planted bug: what the script staged so far is made durable on its own.
            let _ = self.state.commit(self.engine, self.region);
            self.state.script_start = Some(self.engine.savepoint());
            // Widened so that a kill at a random moment lands between two of these commits
            // (a wide group's script then lasts 40 ms): the canary's catch must not be luck.
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        self.state.command_start = Some(self.engine.savepoint());
    }

    fn abort_command(&mut self) {
        if let Some(start) = self.state.command_start.take() {
            self.engine.rollback_to(start);
        }
    }

    fn begin_script(&mut self) {
        self.state.script_start = Some(self.engine.savepoint());
    }

    fn abort_script(&mut self) {
        if let Some(start) = self.state.script_start.take() {
            self.engine.rollback_to(start);
        }
    }

    fn limits(&self) -> StoreLimits {
        engine_limits(self.engine)
    }

    fn has_internal(&self) -> bool {
        true
    }

    fn internal_get(&mut self, key: &[u8]) -> Option<Handle> {
        let entry = self.engine.lookup(&internal_key(key))?;
        let handle = Handle::new(entry.extents);
        self.hold(&handle);
        Some(handle)
    }

    fn internal_exists(&mut self, key: &[u8]) -> bool {
        self.engine.lookup(&internal_key(key)).is_some()
    }

    fn internal_read(&mut self, key: &[u8], out: &mut Vec<u8>) -> bool {
        // Read at once: nothing frees the buffers before this returns.
        let Some(entry) = self.engine.lookup(&internal_key(key)) else { return false };
        self.read(&Handle::new(entry.extents), out);
        true
    }

    fn internal_put(&mut self, key: &[u8], bytes: &[u8]) -> Result<(), StoreError> {
        if bytes.len() as u64 > self.limits().max_value_bytes {
            return Err(StoreError::ValueTooLong { len: bytes.len() as u64, max: self.limits().max_value_bytes });
        }
        self.check_room()?;
        let key = internal_key(key);
        self.stage(|engine, region| engine.set_copy(region, &key, 0, bytes))
    }

    fn internal_delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        let key = internal_key(key);
        if self.engine.lookup(&key).is_none() {
            return Ok(false);
        }
        self.stage(|engine, region| engine.delete(region, &key))
    }

    fn internal_scan(&mut self, from: &[u8], limit: usize, visit: &mut dyn FnMut(&[u8])) -> usize {
        let from = internal_key(from);
        let mut n = 0;
        let inside = self.engine.entries(Bound::Included(&from[..])).take_while(|(k, _)| *k < INTERNAL_HI);
        for (key, _) in inside.take(limit) {
            visit(&key[1..]);
            n += 1;
        }
        n
    }
}

/// The user's keys in the engine (its internal entries left out).
pub(crate) fn user_len(engine: &Engine) -> u64 {
    (engine.len() - internal_count(engine)) as u64
}

/// Up to `limit` user keys whose deadline is `now_ms` or before.
pub(crate) fn expired_keys(engine: &Engine, now_ms: u64, limit: usize) -> Vec<Vec<u8>> {
    engine.expired(now_ms).filter_map(user_key).take(limit).map(<[u8]>::to_vec).collect()
}

/// The sizes the engine takes, as the executor checks them.
pub(crate) fn engine_limits(engine: &Engine) -> StoreLimits {
    let buf_size = engine.pool().buf_size() as u64;
    let copied = (engine.max_value_extents() as u64 - 1).saturating_mul(buf_size);
    // One byte of the engine's longest key is kept for the escape.
    StoreLimits { max_key_bytes: MAX_KEY_BYTES as u64 - 1, max_value_bytes: copied.min(MAX_VALUE_BYTES as u64) }
}

/// Replies into a connection's output: protocol bytes copied, stored values sent from their
/// pool buffers (`push_buf` per extent) when the ring is the pool, copied otherwise.
pub(crate) struct OutputSink<'a> {
    pub out: &'a mut Output,
    pub view: PoolView,
    pub zero_copy: bool,
}

impl OutputSink<'_> {
    /// Appends a stored value's bytes.
    pub fn value_extents(&mut self, extents: &[Extent]) {
        for &e in extents {
            if self.zero_copy {
                self.out.push_buf(e.buf_idx, e.offset as u32, e.len as u32);
            } else {
                self.out.push_bytes(self.view.bytes(e));
            }
        }
    }
}

impl ReplySink<Handle> for OutputSink<'_> {
    fn bytes(&mut self, data: &[u8]) {
        self.out.push_bytes(data);
    }

    fn value(&mut self, value: &Handle, len: u64) {
        assert_eq!(value.iter().map(|e| e.len as u64).sum::<u64>(), len, "value handle length");
        self.value_extents(value);
    }
}

/// The extent of `len` received bytes at `offset` in pool buffer `buf`. A
/// received piece never leaves its buffer, and buffers are at most
/// `pmwire_pool::MAX_BUF_SIZE` (8 KiB), so both fit the extent's 16-bit
/// fields: asserted rather than truncated.
pub(crate) fn piece_in_buffer(buf: u32, offset: u32, len: u32) -> Extent {
    let within = offset.checked_add(len).is_some_and(|end| end <= pmwire_pool::MAX_BUF_SIZE);
    assert!(within, "received piece [{offset}, +{len}) outside a pool buffer");
    Extent { buf_idx: buf, offset: offset as u16, len: len as u16 }
}
