//! The storage seam: [`Keyspace`], which the KV server implements over the
//! persistent engine, and [`MemKeyspace`], a `BTreeMap` for tests and a DRAM
//! mode.
//!
//! A key holds one value of a [`Kind`]. Strings are stored raw, so GET can
//! send them from the engine's buffer ([`pmwire_resp::reply::ReplySink::value`]);
//! hashes, sorted sets, lists and sets are one serialized blob per key
//! ([`crate::blob`]), written as [`ValueSource::Owned`], until they grow
//! large: then the key holds a header and the members live in chunks,
//! internal entries of the keyspace ([`Keyspace::has_internal`],
//! [`crate::chunked`]).
//!
//! Contract: every write is visible to the next call (commands later in the
//! same pipeline see it); durability is the caller's job (the server commits
//! a batch before sending its replies). A value handle returned by
//! [`Keyspace::get`] stays readable until the batch's replies are sent, even
//! if the key is overwritten or deleted meanwhile. Keys are ordered by bytes
//! (`memcmp`), which KEYS and SCAN rely on.
//!
//! Expiry: a key may carry a deadline, an absolute time in ms since the
//! Unix epoch, stored with it. The keyspace is given the time
//! ([`Keyspace::now_ms`]: the wall clock, or a test's clock) and a key whose
//! deadline is at or before it is *expired*: never returned by `get` or
//! `scan`, treated as absent by every write (`get` deletes it, as Redis's
//! lazy expiry does), and listed by [`Keyspace::expired`] for the active
//! sweep ([`crate::exec::active_expire`]). [`Keyspace::len`] counts it
//! until it is deleted, as Redis's DBSIZE does.

use pmwire_resp::request::Arg;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a key holds; stored by the engine as one opaque byte ([`Kind::to_byte`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A raw string.
    String,
    /// A hash, as a [`crate::blob`] hash blob.
    Hash,
    /// A sorted set, as a [`crate::blob`] zset blob.
    ZSet,
    /// A list, as a [`crate::blob`] list blob.
    List,
    /// A set, as a [`crate::blob`] set blob.
    Set,
    /// A stream: always a header and nodes ([`crate::stream`]).
    Stream,
}

impl Kind {
    /// The byte the engine stores: 0 string, 1 hash, 2 zset, 3 list, 4 set,
    /// 5 stream.
    pub fn to_byte(self) -> u8 {
        match self {
            Kind::String => 0,
            Kind::Hash => 1,
            Kind::ZSet => 2,
            Kind::List => 3,
            Kind::Set => 4,
            Kind::Stream => 5,
        }
    }

    /// The inverse of [`Kind::to_byte`].
    pub fn from_byte(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::String),
            1 => Some(Kind::Hash),
            2 => Some(Kind::ZSet),
            3 => Some(Kind::List),
            4 => Some(Kind::Set),
            5 => Some(Kind::Stream),
            _ => None,
        }
    }

    /// The name TYPE and SCAN TYPE use.
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Hash => "hash",
            Kind::ZSet => "zset",
            Kind::List => "list",
            Kind::Set => "set",
            Kind::Stream => "stream",
        }
    }
}

/// A stored value: its kind, length, deadline, and the engine's handle to its bytes.
#[derive(Debug, Clone)]
pub struct Stored<V> {
    /// What the key holds.
    pub kind: Kind,
    /// Value length in bytes.
    pub len: u64,
    /// The engine's handle (for [`Keyspace::read`] and reply sinks).
    pub value: V,
    /// When the key expires (ms since the Unix epoch), if it does.
    pub deadline_ms: Option<u64>,
}

/// What a write does to the key's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Keep the live key's deadline (a new key has none): a value changed
    /// in place (APPEND, LPUSH, SET KEEPTTL...).
    Keep,
    /// No deadline: a value replaced (SET, MSET, GETSET, *STORE...).
    Clear,
    /// This deadline, ms since the Unix epoch (SET EX, SETEX, RENAME's
    /// carried TTL...).
    At(u64),
}

/// What to store.
#[derive(Debug, Clone)]
pub enum ValueSource<'a> {
    /// A command argument as received: store it zero-copy from its
    /// [`Arg::pieces`] (or copy [`Arg::bytes`] if it has no pieces).
    Arg(Arg<'a>),
    /// Bytes the executor built (blobs, INCR and APPEND results).
    Owned(Vec<u8>),
    /// Bytes the caller holds (a snapshot's value, read where the snapshot
    /// lies): the keyspace copies them into its own storage.
    Borrowed(&'a [u8]),
}

impl ValueSource<'_> {
    /// The bytes to store.
    pub fn bytes(&self) -> &[u8] {
        match self {
            ValueSource::Arg(a) => a.bytes(),
            ValueSource::Owned(v) => v,
            ValueSource::Borrowed(b) => b,
        }
    }
}

/// Sizes the engine accepts; the executor checks them before any write of a
/// command, so a multi-key write is refused whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// Longest key.
    pub max_key_bytes: u64,
    /// Longest value (string or blob).
    pub max_value_bytes: u64,
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits { max_key_bytes: 512 * 1024 * 1024, max_value_bytes: 512 * 1024 * 1024 }
    }
}

/// Why a write was refused. The Display text is the error reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The keyspace is at its configured size (a DRAM keyspace's key limit).
    #[error("OOM command not allowed when used memory > 'maxmemory'.")]
    Full,
    /// The persistent pool has no free buffer left for the write (beyond
    /// those kept for receiving requests).
    #[error("OOM command not allowed: the persistent pool is full")]
    PoolFull,
    /// The command's (or transaction's) writes need more record words than
    /// one failure-atomic commit can hold (a transaction larger than the WAL
    /// keeps its records in pool buffers, up to this many words).
    #[error("OOM command not allowed: its writes need more than the {max} record words one atomic commit can hold")]
    TooLargeToCommit {
        /// The WAL words one commit can hold.
        max: u64,
    },
    /// The value needs more pool extents than one value may have.
    #[error("ERR value needs {extents} pool extents, at most {max}")]
    TooManyExtents {
        /// Extents needed.
        extents: u64,
        /// The most allowed.
        max: u64,
    },
    /// The write could not be made durable (the batch was rolled back).
    #[error("ERR pmwire could not persist: {0}")]
    NotPersisted(String),
    /// The key is over [`StoreLimits::max_key_bytes`].
    #[error("ERR key is too long ({len} bytes, at most {max})")]
    KeyTooLong {
        /// Key length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The value is over [`StoreLimits::max_value_bytes`].
    #[error("ERR value is too long ({len} bytes, at most {max})")]
    ValueTooLong {
        /// Value length.
        len: u64,
        /// The limit.
        max: u64,
    },
}

/// The storage the command executor runs against.
pub trait Keyspace {
    /// A handle to a stored value's bytes; cheap to clone.
    type Value: Clone;

    /// The value at `key`, if it is live (an expired key is deleted, or at
    /// least never returned).
    fn get(&mut self, key: &[u8]) -> Option<Stored<Self::Value>>;
    /// Appends the bytes of `value` to `out`.
    fn read(&self, value: &Self::Value, out: &mut Vec<u8>);
    /// Stores `value` of `kind` at `key`, replacing any value, with the
    /// deadline `expiry` says.
    fn put(&mut self, key: &[u8], kind: Kind, value: ValueSource<'_>, expiry: Expiry) -> Result<(), StoreError>;
    /// Stores `value` of `kind` at `key`, keeping a live key's deadline.
    fn set(&mut self, key: &[u8], kind: Kind, value: ValueSource<'_>) -> Result<(), StoreError> {
        self.put(key, kind, value, Expiry::Keep)
    }
    /// Sets (`Some`) or removes (`None`) the deadline of the live key `key`,
    /// keeping its value; false (nothing written) if there is no such key.
    fn set_deadline(&mut self, key: &[u8], deadline_ms: Option<u64>) -> Result<bool, StoreError>;
    /// Deletes `key`; true if it was live (an expired key is deleted too,
    /// and answers false).
    fn delete(&mut self, key: &[u8]) -> Result<bool, StoreError>;
    /// Visits up to `limit` live keys in byte order, strictly after `after`
    /// (from the first key if `None`); returns how many were visited (fewer
    /// than `limit` means the end was reached). Expired keys are skipped.
    fn scan(&mut self, after: Option<&[u8]>, limit: usize, visit: &mut dyn FnMut(&[u8], Kind)) -> usize;
    /// Number of keys, expired ones not yet deleted included.
    fn len(&self) -> u64;
    /// The time, ms since the Unix epoch, against which deadlines are
    /// compared (the caller's clock: fixed for a batch, or a test's).
    fn now_ms(&self) -> u64;
    /// Up to `limit` expired keys (deadline at or before [`Keyspace::now_ms`]),
    /// earliest deadline first.
    fn expired(&self, limit: usize) -> Vec<Vec<u8>>;
    /// Number of keys with a deadline (INFO's `expires`).
    fn expiring_len(&self) -> u64;
    /// Bytes the keyspace occupies in its store: its values, keys and
    /// index, as the store allocates them (INFO's `used_memory`, and what
    /// `maxmemory` is compared with). A pool-backed store counts whole pool
    /// buffers and index nodes in use; the in-memory one, its keys' and
    /// values' bytes.
    fn used_memory(&self) -> u64;
    /// Whether there are no keys.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Deletes every key.
    fn clear(&mut self) -> Result<(), StoreError>;
    /// The keys found expired (and deleted) by reads since the last call,
    /// in order: Redis's lazy expiry, which keyspace notifications report
    /// as `expired`. A keyspace that keeps no such record returns none
    /// (the active sweep still reports the keys it deletes).
    fn take_expired(&mut self) -> Vec<Vec<u8>> {
        Vec::new()
    }
    /// Sizes accepted.
    fn limits(&self) -> StoreLimits {
        StoreLimits::default()
    }
    /// `key` is made ready for blocked clients without being written (XGROUP
    /// DESTROY: a blocked XREADGROUP on the group is answered NOGROUP, and
    /// Redis 7.0 does not count it a write for WATCH). Nothing to a store; a
    /// recording keyspace reports it ([`crate::recording::Recording::ready`]).
    fn signal_ready(&mut self, _key: &[u8]) {}
    /// A command begins: what it writes from now on can be undone by
    /// [`Keyspace::abort_command`] (a keyspace whose writes cannot fail
    /// part-way needs neither).
    fn begin_command(&mut self) {}
    /// The command began last failed: undo every write it made, so that its
    /// error reply means nothing of it was stored.
    fn abort_command(&mut self) {}
    /// A script begins: what [`Keyspace::abort_script`] undoes to (the
    /// commands it runs each begin and may abort as any command does).
    fn begin_script(&mut self) {}
    /// The script begun last was stopped: undo every write it made.
    fn abort_script(&mut self) {}

    /// Whether this keyspace keeps *internal entries*: a second namespace of
    /// byte keys that no key command sees (not in `get`, `scan`, `len`,
    /// `expired`), written in the same batch as the keys. Large collections
    /// keep their chunks there ([`crate::chunked`]); a keyspace without
    /// them keeps every collection as one blob.
    ///
    /// A keyspace that has them also keeps the generation rule of
    /// [`crate::chunked`]: when a collection value that is a chunked header
    /// of generation `g` is deleted, expires or is overwritten by anything
    /// but a header of generation `g`, it writes the tombstone
    /// [`crate::chunked::tombstone_key`]`(g)`; when a header of generation
    /// `g` is stored, it deletes that tombstone if present.
    fn has_internal(&self) -> bool {
        false
    }
    /// The internal entry at `key`.
    fn internal_get(&mut self, _key: &[u8]) -> Option<Self::Value> {
        None
    }
    /// Whether there is an internal entry at `key` (a keyspace whose
    /// [`Keyspace::internal_get`] takes a reference overrides this to
    /// take none).
    fn internal_exists(&mut self, key: &[u8]) -> bool {
        self.internal_get(key).is_some()
    }
    /// Appends the bytes of the internal entry at `key` to `out`; false
    /// if there is none. Unlike [`Keyspace::internal_get`], it keeps no
    /// value alive past the call (a keyspace whose handles hold buffers
    /// until a commit overrides it), so it suits a look taken outside any
    /// entry, as the leader's sweep check is.
    fn internal_read(&mut self, key: &[u8], out: &mut Vec<u8>) -> bool {
        match self.internal_get(key) {
            Some(v) => {
                self.read(&v, out);
                true
            }
            None => false,
        }
    }
    /// Stores the internal entry `key` (replacing any).
    fn internal_put(&mut self, _key: &[u8], _bytes: &[u8]) -> Result<(), StoreError> {
        Err(StoreError::NotPersisted("this keyspace keeps no internal entries".into()))
    }
    /// Deletes the internal entry `key`; true if there was one.
    fn internal_delete(&mut self, _key: &[u8]) -> Result<bool, StoreError> {
        Ok(false)
    }
    /// Visits up to `limit` internal keys at or after `from`, in byte order;
    /// returns how many were visited.
    fn internal_scan(&mut self, _from: &[u8], _limit: usize, _visit: &mut dyn FnMut(&[u8])) -> usize {
        0
    }
}

/// Where [`MemKeyspace`] reads the time.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The wall clock (what a redis-server next to it reads).
    #[default]
    System,
    /// A fixed time, ms since the Unix epoch, moved only by the test.
    Fixed(u64),
}

impl Clock {
    /// The time, ms since the Unix epoch.
    pub fn now_ms(self) -> u64 {
        match self {
            Clock::System => system_now_ms(),
            Clock::Fixed(ms) => ms,
        }
    }
}

/// The wall clock, ms since the Unix epoch (0 before 1970).
pub fn system_now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One key of a [`MemKeyspace`].
#[derive(Debug, Clone)]
struct MemEntry {
    kind: Kind,
    value: Arc<[u8]>,
    deadline_ms: Option<u64>,
}

/// An in-memory keyspace. Values are `Arc<[u8]>`, so a handle outlives an
/// overwrite, as the contract asks. Keys with a deadline are also kept by
/// deadline, for [`Keyspace::expired`].
#[derive(Debug, Default, Clone)]
pub struct MemKeyspace {
    map: BTreeMap<Vec<u8>, MemEntry>,
    expiring: std::collections::BTreeSet<(u64, Vec<u8>)>,
    limits: StoreLimits,
    max_keys: Option<u64>,
    clock: Clock,
    /// Internal entries ([`Keyspace::internal_get`]): collection chunks,
    /// tombstones, the generation counter.
    internal: BTreeMap<Vec<u8>, Arc<[u8]>>,
    /// The state when the running script began ([`Keyspace::begin_script`]):
    /// a copy of the maps (values are shared), O(keys) per script, which
    /// suits the keyspace of tests and models this is.
    script_start: Option<Box<MemState>>,
    /// Keys `get` found expired since [`Keyspace::take_expired`].
    expired_by_reads: Vec<Vec<u8>>,
}

/// What [`MemKeyspace::script_start`] keeps.
type MemState = (BTreeMap<Vec<u8>, MemEntry>, std::collections::BTreeSet<(u64, Vec<u8>)>, BTreeMap<Vec<u8>, Arc<[u8]>>);

impl MemKeyspace {
    /// An empty keyspace without limits beyond Redis's, on the wall clock.
    pub fn new() -> Self {
        MemKeyspace::default()
    }

    /// An empty keyspace with size limits and at most `max_keys` keys
    /// (beyond which writes of new keys fail with [`StoreError::Full`]).
    pub fn with_limits(limits: StoreLimits, max_keys: Option<u64>) -> Self {
        MemKeyspace { limits, max_keys, ..MemKeyspace::default() }
    }

    /// Reads the time from `clock` from now on.
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    /// Whether `entry` is expired now.
    fn is_expired(&self, entry: &MemEntry) -> bool {
        entry.deadline_ms.is_some_and(|d| d <= self.clock.now_ms())
    }

    /// Removes `key` (live or not); its entry.
    fn remove(&mut self, key: &[u8]) -> Option<MemEntry> {
        let entry = self.map.remove(key)?;
        if let Some(d) = entry.deadline_ms {
            assert!(self.expiring.remove(&(d, key.to_vec())), "an expiring key is in the deadline set");
        }
        Some(entry)
    }

    /// The generation rule ([`Keyspace::has_internal`]) for replacing the
    /// value at `key` (live or expired) by a value whose header generation
    /// is `new_gen` (`None`: a deletion or a value that is no header).
    fn retire(&mut self, key: &[u8], new_gen: Option<u64>) {
        let old_gen = self.map.get(key).and_then(|e| crate::chunked::value_generation(e.kind, &e.value));
        if let Some(g) = old_gen.filter(|&g| Some(g) != new_gen) {
            self.internal.insert(crate::chunked::tombstone_key(g).to_vec(), Arc::from(&[][..]));
        }
        if let Some(n) = new_gen.filter(|&n| Some(n) != old_gen) {
            self.internal.remove(&crate::chunked::tombstone_key(n)[..]);
        }
    }

    /// Deletes `key` if it is expired; its entry if it is live.
    fn live(&mut self, key: &[u8]) -> Option<&MemEntry> {
        let expired = self.is_expired(self.map.get(key)?);
        if expired {
            self.retire(key, None);
            self.remove(key);
            return None;
        }
        self.map.get(key)
    }
}

impl Keyspace for MemKeyspace {
    type Value = Arc<[u8]>;

    fn get(&mut self, key: &[u8]) -> Option<Stored<Arc<[u8]>>> {
        if self.map.get(key).is_some_and(|e| self.is_expired(e)) {
            self.expired_by_reads.push(key.to_vec());
        }
        self.live(key).map(|e| Stored {
            kind: e.kind,
            len: e.value.len() as u64,
            value: e.value.clone(),
            deadline_ms: e.deadline_ms,
        })
    }

    fn read(&self, value: &Arc<[u8]>, out: &mut Vec<u8>) {
        out.extend_from_slice(value);
    }

    fn put(&mut self, key: &[u8], kind: Kind, value: ValueSource<'_>, expiry: Expiry) -> Result<(), StoreError> {
        let bytes = value.bytes();
        if key.len() as u64 > self.limits.max_key_bytes {
            return Err(StoreError::KeyTooLong { len: key.len() as u64, max: self.limits.max_key_bytes });
        }
        if bytes.len() as u64 > self.limits.max_value_bytes {
            return Err(StoreError::ValueTooLong { len: bytes.len() as u64, max: self.limits.max_value_bytes });
        }
        if let Some(max) = self.max_keys {
            if !self.map.contains_key(key) && self.map.len() as u64 >= max {
                return Err(StoreError::Full);
            }
        }
        let value: Arc<[u8]> = match value {
            ValueSource::Owned(v) => v.into(),
            ValueSource::Arg(a) => a.bytes().into(),
            ValueSource::Borrowed(b) => b.into(),
        };
        let old = self.live(key).and_then(|e| e.deadline_ms);
        let deadline_ms = match expiry {
            Expiry::Keep => old,
            Expiry::Clear => None,
            Expiry::At(ms) => Some(ms),
        };
        self.retire(key, crate::chunked::value_generation(kind, &value));
        self.remove(key);
        if let Some(d) = deadline_ms {
            self.expiring.insert((d, key.to_vec()));
        }
        self.map.insert(key.to_vec(), MemEntry { kind, value, deadline_ms });
        Ok(())
    }

    fn set_deadline(&mut self, key: &[u8], deadline_ms: Option<u64>) -> Result<bool, StoreError> {
        if self.live(key).is_none() {
            return Ok(false);
        }
        let mut entry = self.remove(key).expect("live");
        entry.deadline_ms = deadline_ms;
        if let Some(d) = deadline_ms {
            self.expiring.insert((d, key.to_vec()));
        }
        self.map.insert(key.to_vec(), entry);
        Ok(true)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        let live = self.live(key).is_some();
        self.retire(key, None);
        self.remove(key);
        Ok(live)
    }

    fn scan(&mut self, after: Option<&[u8]>, limit: usize, visit: &mut dyn FnMut(&[u8], Kind)) -> usize {
        use std::ops::Bound;
        let lower = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        let now = self.clock.now_ms();
        let live =
            self.map.range::<[u8], _>((lower, Bound::Unbounded)).filter(|(_, e)| e.deadline_ms.is_none_or(|d| d > now));
        let mut n = 0;
        for (k, e) in live.take(limit) {
            visit(k, e.kind);
            n += 1;
        }
        n
    }

    fn len(&self) -> u64 {
        self.map.len() as u64
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn expired(&self, limit: usize) -> Vec<Vec<u8>> {
        let now = self.clock.now_ms();
        self.expiring.iter().take_while(|(d, _)| *d <= now).take(limit).map(|(_, k)| k.clone()).collect()
    }

    fn expiring_len(&self) -> u64 {
        self.expiring.len() as u64
    }

    /// Keys, values and internal entries, byte for byte (O(keys): this is
    /// the keyspace of tests and models).
    fn used_memory(&self) -> u64 {
        let user: usize = self.map.iter().map(|(k, e)| k.len() + e.value.len()).sum();
        let internal: usize = self.internal.iter().map(|(k, v)| k.len() + v.len()).sum();
        (user + internal) as u64
    }

    fn take_expired(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.expired_by_reads)
    }

    fn begin_script(&mut self) {
        self.script_start = Some(Box::new((self.map.clone(), self.expiring.clone(), self.internal.clone())));
    }

    fn abort_script(&mut self) {
        if let Some(state) = self.script_start.take() {
            (self.map, self.expiring, self.internal) = *state;
        }
    }

    fn clear(&mut self) -> Result<(), StoreError> {
        self.map.clear();
        self.expiring.clear();
        self.internal.clear();
        Ok(())
    }

    fn limits(&self) -> StoreLimits {
        self.limits
    }

    fn has_internal(&self) -> bool {
        true
    }

    fn internal_get(&mut self, key: &[u8]) -> Option<Arc<[u8]>> {
        self.internal.get(key).cloned()
    }

    fn internal_put(&mut self, key: &[u8], bytes: &[u8]) -> Result<(), StoreError> {
        self.internal.insert(key.to_vec(), Arc::from(bytes));
        Ok(())
    }

    fn internal_delete(&mut self, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.internal.remove(key).is_some())
    }

    fn internal_scan(&mut self, from: &[u8], limit: usize, visit: &mut dyn FnMut(&[u8])) -> usize {
        let mut n = 0;
        let range = (std::ops::Bound::Included(from), std::ops::Bound::Unbounded);
        for k in self.internal.range::<[u8], _>(range).map(|(k, _)| k).take(limit) {
            visit(k);
            n += 1;
        }
        n
    }
}

impl MemKeyspace {
    /// Number of internal entries (tests: garbage collected to nothing).
    pub fn internal_len(&self) -> usize {
        self.internal.len()
    }
}
