//! [`Engine`]: the KV engine — an extent WAL and a copy-on-write B+tree
//! over pool buffers, with a volatile ordered index for reads.
//!
//! Data flow: the caller *stages* operations (`set_extents`, `set_copy`,
//! `delete`, `clear`, `log_append`); each takes its references and issues
//! the flushes of its bytes at once (no drain) and is applied to the
//! index, so reads in the same batch see it. `commit` then makes the whole
//! batch durable with one drain for the data and one `append_group` (one
//! more drain) for its records, all or nothing. A batch larger than one
//! group (up to the whole WAL) is committed as a *transaction*: a header
//! counting its record words, then the records over as many groups as they
//! need; it is committed when its last group is durable, and recovery
//! discards a transaction whose groups did not all become durable (the
//! uncommitted tail), so a batch of any size is all or nothing. A batch larger than the whole
//! WAL (allowed by `allow_oversize`) is a *chained transaction*: its record words go to an
//! extent chain in pool buffers (`crate::chain`, drained with the data) and the WAL takes two
//! words naming it. A value of more extents than a record carries (256) likewise keeps its
//! extent list in an extent chain that the record and the tree name. A *checkpoint* applies the
//! WAL's net effect to the tree with one `apply_batch` (one root switch),
//! then truncates the WAL.
//!
//! Invariants (checked by [`Engine::check`]):
//! - `index` = the tree's contents, then every committed WAL record, then
//!   every staged record, applied in order (records are blind writes, so
//!   replaying any of them twice changes nothing);
//! - every buffer's count = one per extent of each durable tree value (and
//!   its extent list), one per extent of each committed or staged record
//!   and user-log entry, one for the arena, plus the caller's own
//!   references; a buffer is freed only after the last durable structure
//!   naming it has dropped it durably (root switch, WAL truncation);
//! - the index itself holds no references: each of its values is named by
//!   a retained record or by the tree.

use std::collections::{HashSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use pmem::Media;
use pmwire_btree::{BTree, MAX_KEY_BYTES};
use pmwire_log::{Extent, ExtentLog, MAX_CAPACITY_EXTENTS, MAX_GROUP, MAX_OFFSET};
use pmwire_pool::{Pool, PoolConfig, DEFAULT_BUF_SIZE};

#[path = "checkpoint.rs"]
mod checkpoint;

use crate::chain::{chunk_capacity, encode_chunk, read_chain, MAX_CHAIN_EXTENTS, NO_NEXT};
use crate::error::{CheckpointError, CommitError, CreateError, LogError, OpenError, StageError};
use crate::index::{Deadline, Index};
use crate::record::{
    decode_user_log, decode_wal_with, encode_clear, encode_delete, encode_set, encode_set_chain, encode_txn,
    encode_txn_chain, encode_user_entry, extent_words, TreeValue, WalOp, DEADLINE_BYTES, MAX_ENTRY_EXTENTS,
    MAX_TXN_WORDS, MAX_VALUE_EXTENTS, TAG_TREE, TAG_USER_LOG, TAG_WAL, TXN_WORDS,
};
use crate::small::{Extents, Key};

/// Sizes of a new engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvConfig {
    /// Bytes per pool buffer (512 ..= 8192, a multiple of 64; default 2048).
    pub buf_size: u32,
    /// Pool buffers.
    pub buffers: u32,
    /// Slots of the KV WAL (≥ 64); a checkpoint runs when it is half full.
    pub wal_slots: u64,
    /// Slots of the user log (≥ 16).
    pub log_slots: u64,
    /// Nodes (4 KB) of the B+tree (≥ 16).
    pub tree_nodes: u32,
}

impl KvConfig {
    /// `buffers` 2 KB buffers, a WAL of one slot per buffer (16 Ki to
    /// 1 Mi slots, 8 B each), a 16 Ki-slot user log, and a tree of one
    /// node per 8 buffers (at least 64).
    ///
    /// The WAL's size sets how often the tree is checkpointed (when half
    /// full): each checkpoint rewrites every tree node its keys touch, so
    /// with many keys a larger WAL divides the tree writes per update
    /// (YCSB-A, 100 K keys: 16 Ki slots made checkpoints ~35% of the
    /// server's CPU; redis-benchmark SET over 100 K keys at one slot per 4
    /// buffers, about a fifth). Retained records pin their buffers until
    /// the checkpoint: half a WAL of one-extent SETs (3 words each) pins at
    /// most 1/6 of the pool, and below the checkpoint floor
    /// ([`Engine::set_checkpoint_floor`]) a commit checkpoints early. The
    /// price is recovery, which replays up to half a WAL of records.
    pub fn new(buffers: u32) -> KvConfig {
        let wal_slots = (buffers as u64).clamp(16384, 1 << 20);
        KvConfig { buf_size: DEFAULT_BUF_SIZE, buffers, wal_slots, log_slots: 16384, tree_nodes: (buffers / 8).max(64) }
    }

    fn pool_config(&self) -> PoolConfig {
        let sections = vec![
            (TAG_WAL, ExtentLog::required_size(self.wal_slots)),
            (TAG_USER_LOG, ExtentLog::required_size(self.log_slots)),
            (TAG_TREE, BTree::required_size(self.tree_nodes)),
        ];
        PoolConfig { buf_size: self.buf_size, buffers: self.buffers, sections }
    }

    /// Media bytes (from `base`) the engine needs.
    pub fn required_size(&self) -> Result<u64, CreateError> {
        self.check()?;
        Ok(Pool::required_size(&self.pool_config())?)
    }

    /// The bounds `create` needs; the log sizes are checked before
    /// [`ExtentLog::required_size`] is asked for them.
    fn check(&self) -> Result<(), CreateError> {
        if self.buf_size < 512 || self.wal_slots < 64 || self.log_slots < 16 || self.tree_nodes < 16 {
            return Err(CreateError::BadConfig(format!(
                "{self:?}: need buffers ≥ 512 B, WAL ≥ 64, log ≥ 16, tree ≥ 16"
            )));
        }
        if self.wal_slots > MAX_CAPACITY_EXTENTS || self.log_slots > MAX_CAPACITY_EXTENTS {
            return Err(CreateError::BadConfig(format!("{self:?}: WAL and log need at most 2^60 slots")));
        }
        Ok(())
    }
}

/// Planted bugs for the crash checker's canaries (tests only).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// `commit` appends the records without draining the data first.
    pub skip_data_drain: bool,
    /// An overwrite, delete or clear frees the durable tree's references
    /// on the old value when staged (taken back at the checkpoint).
    pub free_early: bool,
    /// Recovery ignores the WAL records after the checkpoint.
    pub skip_replay: bool,
    /// A deadline's 8 B are written to the arena with ordinary stores,
    /// never flushed: the commit's data drain does not cover them.
    pub unflushed_deadline: bool,
    /// A batch larger than one group is appended as plain groups, without
    /// its transaction header: a crash between two groups keeps the first.
    pub txn_unmarked: bool,
    /// Recovery applies the complete records of an uncommitted transaction
    /// tail (those of the groups that became durable).
    pub apply_uncommitted: bool,
    /// A value's extent chain is written with ordinary stores, never
    /// flushed: the commit's data drain does not cover its chunks.
    pub unflushed_chain: bool,
    /// A checkpoint in slices truncates the WAL to its tail when it ends,
    /// dropping the records committed while it ran.
    pub truncate_to_tail: bool,
}

/// Counters since create/open (volatile).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Commits that wrote something.
    pub commits: u64,
    /// Checkpoints that applied records.
    pub checkpoints: u64,
    /// Tree batches (root switches) of those checkpoints.
    pub tree_batches: u64,
    /// Slices applied by checkpoints in slices ([`Engine::set_checkpoint_slice`]).
    pub checkpoint_slices: u64,
    /// Automatic checkpoints that failed (the WAL stays full).
    pub checkpoint_failures: u64,
    /// Commits of batches larger than one group (transactions).
    pub transactions: u64,
    /// Uncommitted transaction tails recovery discarded (at open).
    pub discarded_tails: u64,
    /// Extent chains written (values of more extents than a record holds).
    pub chains: u64,
    /// Chunks of those chains.
    pub chain_chunks: u64,
    /// Batches committed as chained transactions (their records in an
    /// extent chain, two words in the WAL).
    pub chained_transactions: u64,
}

/// A value in the index.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stored {
    kind: u8,
    /// Expiry deadline, ms since the Unix epoch.
    deadline: Option<u64>,
    extents: Extents,
    /// The chunks of the extent chain holding `extents` (a value too long
    /// for a record); shared by the records and tree values naming it.
    chain: Option<Chain>,
}

/// An extent chain's chunks, first (the head) first.
type Chain = Arc<[Extent]>;

impl Deadline for Stored {
    fn deadline(&self) -> Option<u64> {
        self.deadline
    }
}

/// A key's value as [`Engine::lookup`] and [`Engine::entries`] give it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The opaque type byte.
    pub kind: u8,
    /// The key's expiry deadline, ms since the Unix epoch (the engine
    /// stores it; what it means is the caller's).
    pub deadline_ms: Option<u64>,
    /// The value's bytes.
    pub extents: &'a [Extent],
}

impl Stored {
    fn entry(&self) -> Entry<'_> {
        Entry { kind: self.kind, deadline_ms: self.deadline, extents: &self.extents }
    }
}

/// How to undo a staged operation in the index.
enum Undo {
    /// The record's key had this value (or none).
    Key(Option<Stored>),
    All(Index<Stored>),
}

/// A WAL record as kept in DRAM until the checkpoint: the operation (as
/// [`WalOp`], with compact extents) and its key's bytes.
struct Record {
    op: RecordOp,
    key: Key,
}

enum RecordOp {
    /// `deadline`: the extent of its 8 B in the pool, and its value;
    /// `chain`: the value's extents are stored in this chain.
    Set {
        key: Extent,
        kind: u8,
        deadline: Option<(Extent, u64)>,
        value: Extents,
        chain: Option<Chain>,
    },
    Delete {
        key: Extent,
    },
    Clear,
}

impl Record {
    /// `chained`: a chained SET's value extents and chunks, read from the pool.
    fn from_wal(op: WalOp, key: &[u8], deadline_ms: Option<u64>, chained: Option<(Vec<Extent>, Chain)>) -> Record {
        let op = match op {
            WalOp::Set { key, kind, deadline, value } => {
                let deadline = deadline.map(|e| (e, deadline_ms.expect("a deadline extent's value")));
                RecordOp::Set { key, kind, deadline, value: Extents::new(&value), chain: None }
            }
            WalOp::SetChain { key, kind, deadline, .. } => {
                let deadline = deadline.map(|e| (e, deadline_ms.expect("a deadline extent's value")));
                let (value, chain) = chained.expect("a chained SET's chain");
                RecordOp::Set { key, kind, deadline, value: Extents::new(&value), chain: Some(chain) }
            }
            WalOp::Delete { key } => RecordOp::Delete { key },
            WalOp::Clear => RecordOp::Clear,
        };
        Record { op, key: Key::new(key) }
    }

    /// Words the record takes in the WAL.
    fn words(&self) -> usize {
        match &self.op {
            RecordOp::Set { deadline, chain: Some(_), .. } => 3 + usize::from(deadline.is_some()),
            RecordOp::Set { value, deadline, chain: None, .. } => 2 + usize::from(deadline.is_some()) + value.len(),
            RecordOp::Delete { .. } => 2,
            RecordOp::Clear => 1,
        }
    }

    /// Every extent naming pool bytes (each holds one buffer reference).
    fn extents(&self) -> impl Iterator<Item = Extent> + '_ {
        let (key, deadline, value, chain) = match &self.op {
            RecordOp::Set { key, deadline, value, chain, .. } => {
                (Some(*key), deadline.map(|d| d.0), &value[..], chain.as_deref().unwrap_or(&[]))
            }
            RecordOp::Delete { key } => (Some(*key), None, &[][..], &[][..]),
            RecordOp::Clear => (None, None, &[][..], &[][..]),
        };
        key.into_iter().chain(deadline).chain(value.iter().copied()).chain(chain.iter().copied())
    }

    fn encode(&self, out: &mut Vec<Extent>) {
        match &self.op {
            RecordOp::Set { key, kind, deadline, chain: Some(chain), .. } => {
                encode_set_chain(*key, *kind, deadline.map(|d| d.0), chain[0], out)
            }
            RecordOp::Set { key, kind, deadline, value, chain: None } => {
                encode_set(*key, *kind, deadline.map(|d| d.0), value, out)
            }
            RecordOp::Delete { key } => encode_delete(*key, out),
            RecordOp::Clear => encode_clear(out),
        }
    }
}

struct Staged {
    record: Record,
    undo: Undo,
}

/// How far a batch was staged (see [`Engine::savepoint`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Savepoint {
    staged: usize,
    staged_words: usize,
    user_staged: usize,
    user_staged_words: usize,
}

/// A user-log entry (committed or staged).
struct UserEntry {
    lsn: u64,
    extents: Vec<Extent>,
}

/// The KV engine. See the module docs.
pub struct Engine {
    pool: Pool,
    wal: ExtentLog,
    user_log: ExtentLog,
    tree: BTree,
    index: Index<Stored>,
    /// Committed records still in the WAL, oldest first.
    records: Vec<Record>,
    staged: Vec<Staged>,
    staged_words: usize,
    user_entries: VecDeque<UserEntry>,
    user_staged: Vec<UserEntry>,
    user_staged_words: usize,
    /// The buffer small copies (keys, copied values, extent lists) are
    /// packed into, and its first unused byte; the arena holds one reference.
    arena: Option<(u32, u32)>,
    /// Flushes were issued since the last drain.
    data_dirty: bool,
    faults: Faults,
    early: Vec<u32>,
    early_keys: HashSet<Vec<u8>>,
    /// `commit` also checkpoints when fewer buffers than this are free
    /// (0: only when the WAL is half full).
    checkpoint_floor: u32,
    /// `commit` also checkpoints once the WAL holds this many words (below
    /// half of it: a shorter checkpoint, more often).
    checkpoint_words: u64,
    /// The WAL words of the batch being committed (kept for its capacity).
    words: Vec<Extent>,
    /// The most words one `append_group` takes (a batch larger than this
    /// is a transaction over several groups).
    group_words: usize,
    /// Test hooks: the most extents a record carries inline (more are
    /// chained), and the most extent words per chain chunk.
    inline_limit: usize,
    chunk_words: usize,
    /// The chunks of the chained transactions the WAL retains (released
    /// after the checkpoint's truncation drops them).
    wal_chains: Vec<Chain>,
    /// The current batch may grow past `max_batch_words` ([`Engine::allow_oversize`]).
    oversize: bool,
    /// Test hook: batches of more words are committed as chained transactions.
    txn_chain_words: usize,
    /// Tree operations one commit applies of a checkpoint in slices (0:
    /// every checkpoint whole, inside one commit).
    checkpoint_slice: usize,
    /// The checkpoint in slices under way.
    pending: Option<checkpoint::Pending>,
    stats: Stats,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Engine({} keys, {} WAL records, {} staged)", self.index.len(), self.records.len(), self.staged.len())
    }
}

impl Engine {
    /// Formats a new engine at `base` (a multiple of 4096): the pool's
    /// header is persisted last, so a crash during `create` leaves no engine.
    pub fn create<M: Media>(media: &mut M, base: u64, config: &KvConfig) -> Result<Engine, CreateError> {
        Engine::create_with_faults(media, base, config, Faults::default())
    }

    /// `create` with planted bugs (tests only).
    #[doc(hidden)]
    pub fn create_with_faults<M: Media>(
        media: &mut M,
        base: u64,
        config: &KvConfig,
        faults: Faults,
    ) -> Result<Engine, CreateError> {
        config.check()?;
        let layout = Pool::begin_create(media, base, &config.pool_config())?;
        let at = |i: usize| layout.sections[i].offset;
        let bad = |e: String| CreateError::BadConfig(e);
        let wal = ExtentLog::create(media, at(0), config.wal_slots).map_err(|e| bad(e.to_string()))?;
        let user_log = ExtentLog::create(media, at(1), config.log_slots).map_err(|e| bad(e.to_string()))?;
        let tree = BTree::create(media, at(2), config.tree_nodes).map_err(|e| bad(e.to_string()))?;
        let pool = Pool::finish_create(media, layout);
        Ok(Engine::assemble(pool, wal, user_log, tree, faults))
    }

    fn assemble(pool: Pool, wal: ExtentLog, user_log: ExtentLog, tree: BTree, faults: Faults) -> Engine {
        let group_words = MAX_GROUP.min(wal.capacity() as usize / 2);
        Engine {
            pool,
            wal,
            user_log,
            tree,
            index: Index::default(),
            records: Vec::new(),
            staged: Vec::new(),
            staged_words: 0,
            user_entries: VecDeque::new(),
            user_staged: Vec::new(),
            user_staged_words: 0,
            arena: None,
            data_dirty: false,
            faults,
            early: Vec::new(),
            early_keys: HashSet::new(),
            checkpoint_floor: 0,
            checkpoint_words: u64::MAX,
            words: Vec::new(),
            group_words,
            inline_limit: usize::MAX,
            chunk_words: usize::MAX,
            wal_chains: Vec::new(),
            oversize: false,
            txn_chain_words: usize::MAX,
            checkpoint_slice: 0,
            pending: None,
            stats: Stats::default(),
        }
    }

    /// Recovers the engine at `base`: opens the pool, the tree and both
    /// logs, builds the index from the tree then replays the WAL, counts
    /// every durable reference, and frees every other buffer.
    pub fn open<M: Media>(media: &mut M, base: u64) -> Result<Engine, OpenError> {
        Engine::open_with_faults(media, base, Faults::default())
    }

    /// `open` with planted bugs (tests only).
    #[doc(hidden)]
    pub fn open_with_faults<M: Media>(media: &mut M, base: u64, faults: Faults) -> Result<Engine, OpenError> {
        Engine::open_with_refs(media, base, faults, &[])
    }

    /// `open`, counting one more durable reference for each of `external`
    /// before the unreferenced buffers are freed: another durable structure
    /// (a replicated log whose entries name values in this pool) holds them.
    pub fn open_with_refs<M: Media>(media: &mut M, base: u64, faults: Faults, external: &[u32]) -> Result<Engine, OpenError> {
        let pool = Pool::open(media, base)?;
        let section = |tag| pool.section(tag).ok_or(OpenError::MissingSection { tag });
        let (wal_at, log_at, tree_at) =
            (section(TAG_WAL)?.offset, section(TAG_USER_LOG)?.offset, section(TAG_TREE)?.offset);
        let tree = BTree::open(media, tree_at)?;
        let wal = ExtentLog::open(media, wal_at).map_err(|error| OpenError::Log { which: "KV WAL", error })?;
        let user_log = ExtentLog::open(media, log_at).map_err(|error| OpenError::Log { which: "user log", error })?;
        let mut engine = Engine::assemble(pool, wal, user_log, tree, faults);
        let uncommitted = engine.recover(media).map_err(OpenError::Corrupt)?;
        for &buf in external {
            engine.pool.recover_ref(buf).map_err(|e| OpenError::Corrupt(format!("an external reference: {e}")))?;
        }
        engine.pool.finish_recovery();
        if uncommitted {
            engine.discard_uncommitted(media).map_err(OpenError::DiscardTail)?;
        }
        Ok(engine)
    }

    /// Drops the WAL's uncommitted transaction tail before anything is
    /// appended after it: a checkpoint of the committed records, whose
    /// truncation (one 8 B persist of the head) also passes the tail; with
    /// no committed record, the truncation alone. A crash before the
    /// truncation finds the same tail, still uncommitted, next time.
    fn discard_uncommitted<M: Media>(&mut self, media: &mut M) -> Result<(), CheckpointError> {
        if self.records.is_empty() {
            let next = self.wal.next_index();
            self.wal.truncate(media, next).expect("truncate to the tail");
        } else {
            self.checkpoint(media)?;
        }
        assert!(self.wal.is_empty(), "the uncommitted tail is gone");
        self.stats.discarded_tails += 1;
        Ok(())
    }

    /// Builds the index and the references from the tree and the WAL;
    /// returns whether the WAL ends with an uncommitted transaction, whose
    /// records are neither applied nor counted (its buffers are free).
    fn recover<M: Media>(&mut self, media: &M) -> Result<bool, String> {
        let values: Vec<(Vec<u8>, pmwire_btree::Value)> = self.tree.iter(media).collect();
        for (key, value) in values {
            let (stored, refs) = self.decode_tree_value(media, &value)?;
            self.recover_refs(&refs)?;
            self.index.insert(&Key::new(&key), stored);
        }
        let mut chains: Vec<Vec<Extent>> = Vec::new();
        let pool = &self.pool;
        let decoded = decode_wal_with(&self.wal.read_all(media), &mut |head| {
            let (words, chunks) = read_chain(pool, media, head)?;
            if chunks[0] != head {
                return Err(format!("chain head {head:?} is not its first chunk {:?}", chunks[0]));
            }
            chains.push(chunks);
            Ok(words)
        })?;
        for chunks in chains {
            self.recover_refs(&chunks)?;
            self.wal_chains.push(chunks.into());
        }
        let uncommitted = decoded.uncommitted.is_some();
        let mut ops = decoded.records;
        if self.faults.apply_uncommitted {
            ops.extend(decoded.uncommitted.into_iter().flat_map(|(_, records)| records));
        }
        for (_, op) in ops {
            let chained = match &op {
                WalOp::SetChain { head, .. } => {
                    let (words, chunks) = read_chain(&self.pool, media, *head)?;
                    if chunks[0] != *head {
                        return Err(format!("chain head {head:?} is not its first chunk {:?}", chunks[0]));
                    }
                    Some((words, Chain::from(chunks)))
                }
                _ => None,
            };
            let mut refs: Vec<Extent> = op.extents().collect();
            if let Some((words, chunks)) = &chained {
                refs.pop(); // the head, counted with its chunks
                refs.extend(words.iter().chain(chunks.iter()));
            }
            self.recover_refs(&refs)?;
            let key = match &op {
                WalOp::Set { key, .. } | WalOp::SetChain { key, .. } | WalOp::Delete { key } => {
                    self.read_bytes(media, *key)
                }
                WalOp::Clear => Vec::new(),
            };
            let deadline = match &op {
                WalOp::Set { deadline: Some(d), .. } | WalOp::SetChain { deadline: Some(d), .. } => {
                    let bytes = self.read_bytes(media, *d);
                    Some(u64::from_le_bytes(bytes.try_into().map_err(|_| format!("deadline extent {d:?}"))?))
                }
                _ => None,
            };
            let record = Record::from_wal(op, &key, deadline, chained);
            if !self.faults.skip_replay {
                apply_to(&mut self.index, &record);
            }
            self.records.push(record);
        }
        for (lsn, extents) in decode_user_log(&self.user_log.read_all(media))? {
            self.recover_refs(&extents)?;
            self.user_entries.push_back(UserEntry { lsn, extents });
        }
        Ok(uncommitted)
    }

    fn recover_refs(&mut self, extents: &[Extent]) -> Result<(), String> {
        for &extent in extents {
            self.pool.check_extent(extent).map_err(|e| format!("{extent:?}: {e}"))?;
            self.pool.recover_ref(extent.buf_idx).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// The index value and the references (extents, and the extent list
    /// of an indirect value) of a tree value.
    fn decode_tree_value<M: Media>(&self, media: &M, bytes: &[u8]) -> Result<(Stored, Vec<Extent>), String> {
        match TreeValue::decode(bytes)? {
            TreeValue::Direct { kind, deadline, extents } => {
                Ok((Stored { kind, deadline, extents: Extents::new(&extents), chain: None }, extents))
            }
            TreeValue::Chain { kind, deadline, head } => {
                let (extents, chunks) = read_chain(&self.pool, media, head)?;
                if chunks[0] != head {
                    return Err(format!("chain head {head:?} is not its first chunk {:?}", chunks[0]));
                }
                let mut refs = extents.clone();
                refs.extend_from_slice(&chunks);
                Ok((Stored { kind, deadline, extents: Extents::new(&extents), chain: Some(chunks.into()) }, refs))
            }
            TreeValue::Indirect { kind, deadline, list } => {
                self.pool.check_extent(list).map_err(|e| format!("extent list {list:?}: {e}"))?;
                let extents = extent_words(&self.read_bytes(media, list));
                let mut refs = extents.clone();
                refs.push(list);
                Ok((Stored { kind, deadline, extents: Extents::new(&extents), chain: None }, refs))
            }
        }
    }

    fn read_bytes<M: Media>(&self, media: &M, extent: Extent) -> Vec<u8> {
        let mut out = Vec::with_capacity(extent.len as usize);
        self.pool.gather(media, &[extent], &mut out);
        out
    }

    // ----- reads -----

    /// The kind and extents of `key` (staged operations included). The
    /// extents stay valid until the next mutating call; retain their
    /// buffers (`pool_mut().retain`) to hold them longer, e.g. for a
    /// zero-copy send.
    pub fn get(&self, key: &[u8]) -> Option<(u8, &[Extent])> {
        self.index.get(key).map(|s| (s.kind, &s.extents[..]))
    }

    /// As [`Engine::get`], with the key's deadline.
    pub fn lookup(&self, key: &[u8]) -> Option<Entry<'_>> {
        self.index.get(key).map(Stored::entry)
    }

    /// Entries with keys after `start`, in key order, with their deadlines.
    pub fn entries<'a>(&'a self, start: Bound<&[u8]>) -> impl Iterator<Item = (&'a [u8], Entry<'a>)> + 'a {
        self.index.range(start).map(|(k, s)| (k, s.entry()))
    }

    /// Keys whose deadline is at or before `now_ms` (staged operations
    /// included), earliest deadline first: what an expiry sweep deletes.
    pub fn expired(&self, now_ms: u64) -> impl Iterator<Item = &[u8]> + '_ {
        self.index.expired(now_ms)
    }

    /// The earliest deadline of any key (staged operations included), ms.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.index.next_deadline_ms()
    }

    /// Keys with a deadline (staged operations included).
    pub fn expiring_len(&self) -> usize {
        self.index.expiring_len()
    }

    /// Appends the value of `key` to `out`; returns its kind.
    pub fn get_bytes<M: Media>(&self, media: &M, key: &[u8], out: &mut Vec<u8>) -> Option<u8> {
        let stored = self.index.get(key)?;
        self.pool.gather(media, &stored.extents, out);
        Some(stored.kind)
    }

    /// The value's length in bytes.
    pub fn value_len(&self, key: &[u8]) -> Option<usize> {
        self.index.get(key).map(|s| s.extents.iter().map(|e| e.len as usize).sum())
    }

    /// Entries with keys after `start`, in key order (KEYS, SCAN with the
    /// last key returned as the cursor: `Bound::Excluded(cursor)`).
    pub fn range<'a>(&'a self, start: Bound<&[u8]>) -> impl Iterator<Item = (&'a [u8], u8, &'a [Extent])> + 'a {
        self.index.range(start).map(|(k, s)| (k, s.kind, &s.extents[..]))
    }

    /// Keys (staged operations included).
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The B+tree's free nodes and all its nodes. Keys reach the tree at
    /// checkpoints; a checkpoint that needs more nodes than are free fails
    /// ("tree full") and the WAL keeps its records.
    pub fn tree_room(&self) -> (usize, u32) {
        (self.tree.free_nodes(), self.tree.node_count())
    }

    /// The buffer pool (for offsets, gathering bytes).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The buffer pool, to allocate receive buffers and hold references.
    pub fn pool_mut(&mut self) -> &mut Pool {
        &mut self.pool
    }

    /// Makes `commit` checkpoint also when fewer than `free_buffers` pool
    /// buffers are free (and the WAL holds at least a group's worth of
    /// words), so that the buffers retained records pin are released
    /// before the pool runs short, not only when the WAL is half full.
    pub fn set_checkpoint_floor(&mut self, free_buffers: u32) {
        self.checkpoint_floor = free_buffers;
    }

    /// Makes `commit` checkpoint also once the WAL holds `words` words, not
    /// only when it is half full. A checkpoint's time grows with the
    /// records it applies (each rewrites the tree nodes its keys touch), so
    /// this bounds how long one commit can take, at the price of more tree
    /// writes per update: a replicated member, which must answer its peers
    /// within an election timeout, checkpoints in shorter steps
    /// (`docs/bench.md`, "A member's loop under load").
    pub fn set_checkpoint_words(&mut self, words: u64) {
        assert!(words >= self.group_words as u64, "at least a group's worth of words");
        self.checkpoint_words = words;
    }

    /// Makes `commit` checkpoint in slices: a checkpoint the WAL's fill
    /// starts ([`Engine::set_checkpoint_words`]) is applied to the tree at
    /// most `ops` operations per commit (and at least twice the records
    /// the commit added, so it ends), each slice its own root switch, and
    /// the WAL is truncated to where it began once the last slice is in:
    /// no commit holds the loop for a whole checkpoint, and a checkpoint
    /// can cover more records (more updates per tree node written). A
    /// commit that finds the WAL three-quarters full, short of room or the
    /// pool short of free buffers finishes it at once. 0 (the default):
    /// every checkpoint whole, inside one commit.
    pub fn set_checkpoint_slice(&mut self, ops: usize) {
        self.checkpoint_slice = ops;
    }

    /// Whether a checkpoint in slices is under way.
    pub fn checkpoint_under_way(&self) -> bool {
        self.pending.is_some()
    }

    /// Counters since create/open.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Extents a value may have (`set_extents`), and so the largest copied
    /// value is about this many buffers.
    /// A value of more extents than a record carries inline
    /// ([`Engine::inline_extents`]) is stored with its extent list in an
    /// extent chain of pool buffers.
    pub fn max_value_extents(&self) -> usize {
        MAX_CHAIN_EXTENTS
    }

    /// The most extents a WAL record carries inline; a value of more has
    /// its extent list written to an extent chain the record names.
    pub fn inline_extents(&self) -> usize {
        // A SET with a deadline takes a header, its key and its deadline.
        let inline = MAX_VALUE_EXTENTS.min(self.pool.buf_size() as usize / 8).min(self.max_batch_words() - 3);
        inline.min(self.inline_limit)
    }

    /// Extent words per chunk of an extent chain.
    fn chunk_words(&self) -> usize {
        chunk_capacity(self.pool.buf_size()).min(self.chunk_words)
    }

    /// Chains values of more than `inline` extents, `chunk_words` words a
    /// chunk (tests: small chains over several chunks).
    #[doc(hidden)]
    pub fn set_chain_limits(&mut self, inline: usize, chunk_words: usize) {
        assert!(inline >= 1 && chunk_words >= 1, "chain limits {inline}, {chunk_words}");
        self.inline_limit = inline;
        self.chunk_words = chunk_words;
    }

    /// Pool buffers an extent chain of `extents` words takes (0 if the
    /// value's extents fit a record).
    pub fn chain_buffers(&self, extents: usize) -> usize {
        if extents <= self.inline_extents() {
            0
        } else {
            extents.div_ceil(self.chunk_words())
        }
    }

    /// WAL words one batch may take: all of the WAL but a transaction
    /// header (a batch larger than a group is committed as a transaction,
    /// after a checkpoint has emptied the WAL if need be).
    pub fn max_batch_words(&self) -> usize {
        (self.wal.capacity() as usize - TXN_WORDS).min(MAX_TXN_WORDS)
    }

    /// Lets the batch being staged grow past [`Engine::max_batch_words`],
    /// up to 2^22 record words: it is then committed as a *chained
    /// transaction* — its record words written to an extent chain in the
    /// pool (drained with the data), two words in the WAL — so one command
    /// larger than the WAL is bounded by the pool, not the WAL. Until the
    /// next commit or full rollback.
    pub fn allow_oversize(&mut self) {
        self.oversize = true;
    }

    /// Commits batches of more than `words` record words as chained
    /// transactions (tests: small chained transactions).
    #[doc(hidden)]
    pub fn set_txn_chain_words(&mut self, words: usize) {
        self.txn_chain_words = words;
    }

    /// Record words the batch may take now.
    fn batch_limit(&self) -> usize {
        if self.oversize {
            MAX_CHAIN_EXTENTS.max(self.max_batch_words())
        } else {
            self.max_batch_words()
        }
    }

    /// WAL words staged in the current batch.
    pub fn staged_words(&self) -> usize {
        self.staged_words
    }

    /// Limits one `append_group` to `words` words (at least 8, at most the
    /// default), so that tests can make small batches span groups.
    #[doc(hidden)]
    pub fn set_group_words(&mut self, words: usize) {
        assert!(words >= 8, "a group of {words} words");
        assert!(words <= MAX_GROUP.min(self.wal.capacity() as usize / 2), "a group of {words} words");
        self.group_words = words;
    }

    /// WAL records committed and not yet checkpointed.
    pub fn wal_records(&self) -> usize {
        self.records.len()
    }
}

/// Applies one record to an index.
fn apply_to(index: &mut Index<Stored>, record: &Record) {
    match &record.op {
        RecordOp::Set { kind, deadline, value, chain, .. } => {
            let stored =
                Stored { kind: *kind, deadline: deadline.map(|d| d.1), extents: value.clone(), chain: chain.clone() };
            index.insert(&record.key, stored);
        }
        RecordOp::Delete { .. } => {
            index.remove(&record.key);
        }
        RecordOp::Clear => index.clear(),
    }
}

// ----- staging and commit -----
impl Engine {
    /// Stages `key → (kind, value)` where the value's bytes already sit in
    /// pool buffers the caller holds (zero-copy): the engine takes its own
    /// reference on each extent's buffer and flushes its lines (no drain).
    pub fn set_extents<M: Media>(
        &mut self,
        media: &mut M,
        key: &[u8],
        kind: u8,
        value: &[Extent],
    ) -> Result<(), StageError> {
        self.set_extents_expiring(media, key, kind, None, value)
    }

    /// [`Engine::set_extents`] with the key's expiry deadline (ms since the
    /// Unix epoch; `None`: none), stored in the same record.
    pub fn set_extents_expiring<M: Media>(
        &mut self,
        media: &mut M,
        key: &[u8],
        kind: u8,
        deadline_ms: Option<u64>,
        value: &[Extent],
    ) -> Result<(), StageError> {
        self.check_set(key, value.len(), deadline_ms.is_some())?;
        for &extent in value {
            self.pool.check_live_extent(extent)?;
            assert!(extent.offset <= MAX_OFFSET, "a live extent lies inside a buffer of ≤ 8 KB");
        }
        let (key_extent, deadline) = self.copy_key(media, key, deadline_ms).ok_or(StageError::PoolFull)?;
        let chain = match self.chain_buffers(value.len()) {
            0 => None,
            _ => match self.write_chain(media, value) {
                Some(chain) => Some(chain),
                None => {
                    self.pool.release(key_extent.buf_idx);
                    deadline.iter().for_each(|d| _ = self.pool.release(d.0.buf_idx));
                    return Err(StageError::PoolFull);
                }
            },
        };
        for &extent in value {
            self.pool.retain(extent.buf_idx);
            self.pool.flush_extent(media, extent);
            self.data_dirty = true;
        }
        self.stage_set(media, key, kind, key_extent, deadline, Extents::new(value), chain);
        Ok(())
    }

    /// Writes `value`'s extent list as an extent chain in fresh pool
    /// buffers (flushed, durable at the next drain); the chunks hold one
    /// reference each. `None` (nothing held) if the pool ran out.
    fn write_chain<M: Media>(&mut self, media: &mut M, value: &[Extent]) -> Option<Chain> {
        let per = self.chunk_words();
        let n = value.len().div_ceil(per);
        let mut bufs = Vec::with_capacity(n);
        for _ in 0..n {
            match self.pool.alloc() {
                Some(buf) => bufs.push(buf),
                None => {
                    bufs.iter().for_each(|&b| _ = self.pool.release(b));
                    return None;
                }
            }
        }
        let mut chunks = Vec::with_capacity(n);
        for (i, words) in value.chunks(per).enumerate() {
            let next = bufs.get(i + 1).copied().unwrap_or(NO_NEXT);
            let bytes = encode_chunk(bufs[0], i as u32, next, value.len() as u64, words);
            let extent = Extent { buf_idx: bufs[i], offset: 0, len: bytes.len() as u16 };
            let at = self.pool.extent_offset(extent);
            if self.faults.unflushed_chain {
                // Planted bug: the bytes reach the media only if the cache evicts them.
                media.write(at, &bytes);
            } else {
                media.memcpy_nodrain(at, &bytes);
            }
            chunks.push(extent);
        }
        self.data_dirty = true;
        self.stats.chains += 1;
        self.stats.chain_chunks += n as u64;
        Some(chunks.into())
    }

    /// Stages `key → (kind, bytes)`, copying the bytes into pool buffers
    /// (non-temporal or flushed stores, no drain).
    pub fn set_copy<M: Media>(&mut self, media: &mut M, key: &[u8], kind: u8, bytes: &[u8]) -> Result<(), StageError> {
        self.set_copy_expiring(media, key, kind, None, bytes)
    }

    /// [`Engine::set_copy`] with the key's expiry deadline.
    pub fn set_copy_expiring<M: Media>(
        &mut self,
        media: &mut M,
        key: &[u8],
        kind: u8,
        deadline_ms: Option<u64>,
        bytes: &[u8],
    ) -> Result<(), StageError> {
        let size = self.pool.buf_size() as usize;
        let max = self.max_value_extents();
        if bytes.len() > (max - 1) * size {
            return Err(StageError::ValueTooLong { extents: bytes.len().div_ceil(size) + 1, max });
        }
        self.check_set(key, bytes.len().div_ceil(size) + 1, deadline_ms.is_some())?;
        let (key_extent, deadline) = self.copy_key(media, key, deadline_ms).ok_or(StageError::PoolFull)?;
        let release_key = |engine: &mut Engine| {
            engine.pool.release(key_extent.buf_idx);
            deadline.iter().for_each(|d| _ = engine.pool.release(d.0.buf_idx));
        };
        let Some(value) = self.copy_in(media, bytes, false) else {
            release_key(self);
            return Err(StageError::PoolFull);
        };
        let chain = match self.chain_buffers(value.len()) {
            0 => None,
            _ => match self.write_chain(media, &value) {
                Some(chain) => Some(chain),
                None => {
                    value.iter().for_each(|e| _ = self.pool.release(e.buf_idx));
                    release_key(self);
                    return Err(StageError::PoolFull);
                }
            },
        };
        self.stage_set(media, key, kind, key_extent, deadline, Extents::new(&value), chain);
        Ok(())
    }

    /// Stages a new deadline (`None`: none) for `key`'s value, which is
    /// kept: a SET record naming the same extents. `false` (and nothing
    /// staged) if the key is absent.
    pub fn set_deadline<M: Media>(
        &mut self,
        media: &mut M,
        key: &[u8],
        deadline_ms: Option<u64>,
    ) -> Result<bool, StageError> {
        let Some(stored) = self.index.get(key) else { return Ok(false) };
        let (kind, extents, chain) = (stored.kind, stored.extents.clone(), stored.chain.clone());
        self.check_set(key, extents.len(), deadline_ms.is_some())?;
        let (key_extent, deadline) = self.copy_key(media, key, deadline_ms).ok_or(StageError::PoolFull)?;
        // The value's bytes (and its chain) are already flushed (committed,
        // or staged in this batch); the new record names the same chain.
        extents.iter().chain(chain.iter().flat_map(|c| c.iter())).for_each(|e| self.pool.retain(e.buf_idx));
        self.stage_set(media, key, kind, key_extent, deadline, extents, chain);
        Ok(true)
    }

    fn check_set(&self, key: &[u8], extents: usize, deadline: bool) -> Result<(), StageError> {
        if key.len() > MAX_KEY_BYTES {
            return Err(StageError::KeyTooLong { len: key.len(), max: MAX_KEY_BYTES });
        }
        let max = self.max_value_extents();
        if extents > max {
            return Err(StageError::ValueTooLong { extents, max });
        }
        let value_words = if extents > self.inline_extents() { 1 } else { extents };
        self.check_room(2 + usize::from(deadline) + value_words)
    }

    /// Copies a key, and its deadline's 8 B if any, into the arena (each
    /// extent holding a reference). `None`, nothing held, if the pool ran out.
    fn copy_key<M: Media>(
        &mut self,
        media: &mut M,
        key: &[u8],
        deadline_ms: Option<u64>,
    ) -> Option<(Extent, Option<(Extent, u64)>)> {
        let key_extent = self.copy_in_whole(media, key)?;
        let Some(ms) = deadline_ms else { return Some((key_extent, None)) };
        if self.arena_room(DEADLINE_BYTES as u32).is_none() {
            self.pool.release(key_extent.buf_idx);
            return None;
        }
        let extent = if self.faults.unflushed_deadline {
            // Planted bug: the bytes reach the media only if the cache evicts them.
            let extent = self.arena_put(media, &[]);
            let extent = Extent { len: DEADLINE_BYTES as u16, ..extent };
            media.write(self.pool.extent_offset(extent), &ms.to_le_bytes());
            let (buf, used) = self.arena.expect("arena_room first");
            self.arena = Some((buf, (used + DEADLINE_BYTES as u32).min(self.pool.buf_size())));
            extent
        } else {
            self.arena_put(media, &ms.to_le_bytes())
        };
        assert_eq!(extent.len as usize, DEADLINE_BYTES);
        Some((key_extent, Some((extent, ms))))
    }

    fn check_room(&self, needed: usize) -> Result<(), StageError> {
        let room = self.batch_limit() - self.staged_words;
        if needed > room {
            return Err(StageError::BatchFull { needed, room });
        }
        Ok(())
    }

    fn stage_set<M: Media>(
        &mut self,
        media: &M,
        key: &[u8],
        kind: u8,
        key_extent: Extent,
        deadline: Option<(Extent, u64)>,
        value: Extents,
        chain: Option<Chain>,
    ) {
        self.free_early(media, Some(key));
        let op = RecordOp::Set { key: key_extent, kind, deadline, value: value.clone(), chain: chain.clone() };
        let record = Record { op, key: Key::new(key) };
        let stored = Stored { kind, deadline: deadline.map(|d| d.1), extents: value, chain };
        let previous = self.index.insert(&record.key, stored);
        self.push_staged(record, Undo::Key(previous));
    }

    /// Stages the removal of `key`; `false` (and nothing staged) if absent.
    pub fn delete<M: Media>(&mut self, media: &mut M, key: &[u8]) -> Result<bool, StageError> {
        if key.len() > MAX_KEY_BYTES || !self.index.contains_key(key) {
            return Ok(false);
        }
        self.check_room(2)?;
        let key_extent = self.copy_in_whole(media, key).ok_or(StageError::PoolFull)?;
        self.free_early(media, Some(key));
        let previous = self.index.remove(key);
        let record = Record { op: RecordOp::Delete { key: key_extent }, key: Key::new(key) };
        self.push_staged(record, Undo::Key(previous));
        Ok(true)
    }

    /// Stages the removal of every key (FLUSHDB).
    pub fn clear<M: Media>(&mut self, media: &mut M) -> Result<(), StageError> {
        self.check_room(1)?;
        self.free_early(media, None);
        let previous = std::mem::take(&mut self.index);
        self.push_staged(Record { op: RecordOp::Clear, key: Key::new(b"") }, Undo::All(previous));
        Ok(())
    }

    fn push_staged(&mut self, record: Record, undo: Undo) {
        self.staged_words += record.words();
        assert!(self.staged_words <= self.batch_limit(), "staged beyond the batch limit");
        self.staged.push(Staged { record, undo });
    }

    /// Planted bug: drops the durable tree's references on `key`'s tree
    /// value (every value if `None`) now, before any checkpoint.
    fn free_early<M: Media>(&mut self, media: &M, key: Option<&[u8]>) {
        if !self.faults.free_early {
            return;
        }
        let values: Vec<(Vec<u8>, pmwire_btree::Value)> = match key {
            Some(key) => self.tree.get(media, key).unwrap().map(|v| (key.to_vec(), v)).into_iter().collect(),
            None => self.tree.iter(media).collect(),
        };
        for (key, value) in values {
            if self.early_keys.insert(key) {
                let (stored, _) = self.decode_tree_value(media, &value).expect("tree value");
                for &extent in stored.extents.iter() {
                    self.pool.release(extent.buf_idx);
                    self.early.push(extent.buf_idx);
                }
            }
        }
    }

    /// Copies `bytes` (at most a buffer) into the arena as one extent,
    /// durable at the next drain; the extent holds a reference for the
    /// caller. `None` (nothing held) if the pool ran out.
    fn copy_in_whole<M: Media>(&mut self, media: &mut M, bytes: &[u8]) -> Option<Extent> {
        assert!(bytes.len() <= self.pool.buf_size() as usize, "{} B do not fit one buffer", bytes.len());
        self.arena_room((bytes.len() as u32).max(1))?;
        Some(self.arena_put(media, bytes))
    }

    /// Copies `bytes` into arena buffers, durable at the next drain; one
    /// extent if `whole` (the bytes must fit one buffer), else as many as
    /// needed. Each extent holds a reference for the caller. `None` (and
    /// nothing held) if the pool ran out.
    fn copy_in<M: Media>(&mut self, media: &mut M, bytes: &[u8], whole: bool) -> Option<Vec<Extent>> {
        let size = self.pool.buf_size();
        let mut out = Vec::new();
        let mut rest = bytes;
        while out.is_empty() && whole || !rest.is_empty() {
            let need = if whole { rest.len() as u32 } else { 1 };
            assert!(need <= size, "{need} B do not fit one buffer");
            let Some(used) = self.arena_room(need.max(1)) else {
                out.iter().for_each(|e: &Extent| _ = self.pool.release(e.buf_idx));
                return None;
            };
            let n = rest.len().min((size - used) as usize);
            out.push(self.arena_put(media, &rest[..n]));
            rest = &rest[n..];
        }
        Some(out)
    }

    /// Ensures the arena has `need` free bytes; returns its first free byte.
    fn arena_room(&mut self, need: u32) -> Option<u32> {
        let size = self.pool.buf_size();
        if let Some((_, used)) = self.arena {
            if size - used >= need {
                return Some(used);
            }
        }
        let buf = self.pool.alloc()?;
        if let Some((old, _)) = self.arena.replace((buf, 0)) {
            self.pool.release(old);
        }
        Some(0)
    }

    fn arena_put<M: Media>(&mut self, media: &mut M, bytes: &[u8]) -> Extent {
        let (buf, used) = self.arena.expect("arena_room first");
        let extent = Extent { buf_idx: buf, offset: used as u16, len: bytes.len() as u16 };
        if !bytes.is_empty() {
            media.memcpy_nodrain(self.pool.extent_offset(extent), bytes);
            self.data_dirty = true;
        }
        self.pool.retain(buf);
        let next = (used + bytes.len() as u32).next_multiple_of(8).min(self.pool.buf_size());
        self.arena = Some((buf, next));
        extent
    }

    /// Makes every staged operation durable, then returns: one drain for
    /// the data, one `append_group` of all the batch's records (and one for
    /// the user log's entries, if any). A batch larger than a group is a
    /// transaction over several groups, committed by the last one.
    /// Checkpoints first if the WAL lacks room, and after if it is half
    /// full. On error the batch is rolled back.
    pub fn commit<M: Media>(&mut self, media: &mut M) -> Result<(), CommitError> {
        if self.staged.is_empty() && self.user_staged.is_empty() {
            return Ok(());
        }
        let chained = self.staged_words > self.max_batch_words() || self.staged_words > self.txn_chain_words;
        let transaction = !chained && self.staged_words > self.group_words;
        let needed = match (chained, transaction) {
            (true, _) => TXN_WORDS,
            (false, true) => self.staged_words + TXN_WORDS,
            (false, false) => self.staged_words,
        };
        if needed as u64 > self.wal.free() {
            if let Err(error) = self.checkpoint(media) {
                self.rollback();
                return Err(error.into());
            }
        }
        let mut chain = None;
        if chained {
            // The batch's record words go to an extent chain, covered by the data drain.
            let mut words = std::mem::take(&mut self.words);
            words.clear();
            self.staged.iter().for_each(|s| s.record.encode(&mut words));
            chain = self.write_chain(media, &words);
            self.words = words;
            if chain.is_none() {
                self.rollback();
                return Err(CommitError::PoolFull);
            }
        }
        if self.data_dirty && !self.faults.skip_data_drain {
            media.drain();
        }
        self.data_dirty = false;
        if let Some(chain) = chain {
            let mut header = Vec::with_capacity(TXN_WORDS);
            encode_txn_chain(chain[0], &mut header);
            self.wal.append_group(media, &header).expect("a chained transaction fits the WAL after a checkpoint");
            self.wal_chains.push(chain);
            self.stats.chained_transactions += 1;
        } else if !self.staged.is_empty() {
            let mut words = std::mem::take(&mut self.words);
            words.clear();
            if transaction && !self.faults.txn_unmarked {
                encode_txn(self.staged_words, &mut words);
            }
            self.staged.iter().for_each(|s| s.record.encode(&mut words));
            let header = if transaction && !self.faults.txn_unmarked { TXN_WORDS } else { 0 };
            assert_eq!(words.len(), self.staged_words + header, "staged words");
            // The groups in order, each drained before the next: the
            // transaction is committed when its last group is durable.
            for group in words.chunks(self.group_words) {
                self.wal.append_group(media, group).expect("a batch fits the WAL after a checkpoint");
            }
            self.stats.transactions += u64::from(transaction);
            self.words = words;
        }
        if !self.user_staged.is_empty() {
            let mut words = Vec::with_capacity(self.user_staged_words);
            self.user_staged.iter().for_each(|e| encode_user_entry(&e.extents, &mut words));
            assert_eq!(self.user_staged[0].lsn, self.user_log.next_index(), "staged LSNs");
            self.user_log.append_group(media, &words).expect("user entries checked against the log's room");
        }
        let added = self.staged.len();
        self.records.extend(self.staged.drain(..).map(|s| s.record));
        self.user_entries.extend(self.user_staged.drain(..));
        (self.staged_words, self.user_staged_words) = (0, 0);
        self.oversize = false;
        self.stats.commits += 1;
        let half_full = self.wal.len() * 2 >= self.wal.capacity() || self.wal.len() >= self.checkpoint_words;
        // Retained records pin their buffers: under memory pressure a
        // checkpoint frees them (not for a handful of records, which would
        // rewrite tree nodes for little).
        // A chained transaction takes two words, however many buffers its records pin.
        let pressed = self.pool.free_count() < self.checkpoint_floor
            && (self.wal.len() >= self.group_words as u64 || !self.wal_chains.is_empty());
        let crowded = self.wal.len() * 4 >= self.wal.capacity() * 3;
        let result = if self.checkpoint_slice > 0 && !pressed && !crowded && (half_full || self.pending.is_some()) {
            let budget = self.checkpoint_slice.max(2 * added);
            self.checkpoint_slice_step(media, budget)
        } else if half_full || pressed || (crowded && self.pending.is_some()) {
            self.checkpoint(media)
        } else {
            Ok(())
        };
        if result.is_err() {
            self.stats.checkpoint_failures += 1;
        }
        Ok(())
    }

    /// Discards every staged operation: the index is as before the batch
    /// and the batch's references are dropped.
    pub fn rollback(&mut self) {
        self.rollback_to(Savepoint::default());
        self.oversize = false;
    }

    /// The point the staged batch has reached, to undo what is staged
    /// after it ([`Engine::rollback_to`]): a front end stages one command
    /// at a time and must never split one across two commits.
    pub fn savepoint(&self) -> Savepoint {
        Savepoint {
            staged: self.staged.len(),
            staged_words: self.staged_words,
            user_staged: self.user_staged.len(),
            user_staged_words: self.user_staged_words,
        }
    }

    /// Discards what was staged after `savepoint` (taken in this batch):
    /// the index is as it was then, and those operations' references are
    /// dropped. What was staged before stays staged.
    pub fn rollback_to(&mut self, savepoint: Savepoint) {
        assert!(savepoint.staged <= self.staged.len(), "a savepoint from an earlier batch");
        assert!(savepoint.user_staged <= self.user_staged.len(), "a savepoint from an earlier batch");
        while self.staged.len() > savepoint.staged {
            let Staged { record, undo } = self.staged.pop().expect("above the savepoint");
            record.extents().for_each(|e| _ = self.pool.release(e.buf_idx));
            match undo {
                Undo::Key(Some(previous)) => _ = self.index.insert(&record.key, previous),
                Undo::Key(None) => _ = self.index.remove(&record.key),
                Undo::All(previous) => self.index = previous,
            }
        }
        for entry in self.user_staged.drain(savepoint.user_staged..) {
            entry.extents.iter().for_each(|e| _ = self.pool.release(e.buf_idx));
        }
        (self.staged_words, self.user_staged_words) = (savepoint.staged_words, savepoint.user_staged_words);
    }
}

// ----- the user log -----
impl Engine {
    /// Stages a user-log entry naming bytes already in pool buffers the
    /// caller holds (zero-copy; references taken, lines flushed). Durable
    /// at the next `commit`; returns its LSN (increasing, not consecutive).
    pub fn log_append<M: Media>(&mut self, media: &mut M, extents: &[Extent]) -> Result<u64, LogError> {
        self.check_log_room(extents.len())?;
        for &extent in extents {
            self.pool.check_live_extent(extent)?;
        }
        for &extent in extents {
            self.pool.retain(extent.buf_idx);
            self.pool.flush_extent(media, extent);
            self.data_dirty = true;
        }
        Ok(self.stage_entry(extents.to_vec()))
    }

    /// Stages a user-log entry of `bytes`, copied into pool buffers.
    pub fn log_append_copy<M: Media>(&mut self, media: &mut M, bytes: &[u8]) -> Result<u64, LogError> {
        self.check_log_room(bytes.len().div_ceil(self.pool.buf_size() as usize) + 1)?;
        let extents = self.copy_in(media, bytes, false).ok_or(LogError::PoolFull)?;
        Ok(self.stage_entry(extents))
    }

    fn check_log_room(&self, extents: usize) -> Result<(), LogError> {
        let room = MAX_GROUP.min(self.user_log.free() as usize) - self.user_staged_words;
        if extents > MAX_ENTRY_EXTENTS || 1 + extents > room {
            return Err(LogError::Full { needed: 1 + extents, room });
        }
        Ok(())
    }

    fn stage_entry(&mut self, extents: Vec<Extent>) -> u64 {
        let lsn = self.user_log.next_index() + self.user_staged_words as u64;
        self.user_staged_words += 1 + extents.len();
        self.user_staged.push(UserEntry { lsn, extents });
        lsn
    }

    /// Committed user-log entries with LSN ≥ `from`, oldest first.
    pub fn log_read(&self, from: u64) -> impl Iterator<Item = (u64, &[Extent])> + '_ {
        self.user_entries.iter().filter(move |e| e.lsn >= from).map(|e| (e.lsn, &e.extents[..]))
    }

    /// The LSN the next committed entry will get (after the staged ones).
    pub fn log_next_lsn(&self) -> u64 {
        self.user_log.next_index() + self.user_staged_words as u64
    }

    /// Durably drops every committed entry with LSN < `lsn`, then releases
    /// their buffers. Durable when it returns.
    pub fn log_truncate<M: Media>(&mut self, media: &mut M, lsn: u64) -> Result<(), LogError> {
        let next = self.user_log.next_index();
        if lsn > next {
            return Err(LogError::BeyondEnd { lsn, next });
        }
        let keep_from = self.user_entries.iter().find(|e| e.lsn >= lsn).map_or(next, |e| e.lsn);
        self.user_log.truncate(media, keep_from).expect("keep_from ≤ next");
        while self.user_entries.front().is_some_and(|e| e.lsn < keep_from) {
            let entry = self.user_entries.pop_front().expect("front");
            entry.extents.iter().for_each(|e| _ = self.pool.release(e.buf_idx));
        }
        Ok(())
    }
}

// ----- invariants -----
impl Engine {
    /// Checks every invariant against the media, with no caller
    /// references outstanding: the tree verifies; the index equals the
    /// tree's contents with the committed and staged records replayed;
    /// every buffer's count is exactly the references the tree, the
    /// records, the user log and the arena hold (none leaked, none free
    /// while referenced); the free list is exactly the buffers at 0.
    pub fn check<M: Media>(&self, media: &M) -> Result<(), String> {
        self.tree.verify(media).map_err(|e| format!("tree: {e}"))?;
        self.pool.check().map_err(|e| format!("pool: {e}"))?;
        let mut expected = vec![0u32; self.pool.buffers() as usize];
        let mut count = |e: Extent| expected[e.buf_idx as usize] += 1;
        let mut index = Index::default();
        for (key, value) in self.tree.iter(media) {
            let (stored, refs) = self.decode_tree_value(media, &value)?;
            refs.into_iter().for_each(&mut count);
            index.insert(&Key::new(&key), stored);
        }
        for record in self.records.iter().chain(self.staged.iter().map(|s| &s.record)) {
            record.extents().for_each(&mut count);
            apply_to(&mut index, record);
        }
        for entry in self.user_entries.iter().chain(&self.user_staged) {
            entry.extents.iter().copied().for_each(&mut count);
        }
        if let Some((buf_idx, _)) = self.arena {
            count(Extent { buf_idx, offset: 0, len: 0 });
        }
        self.wal_chains.iter().flat_map(|c| c.iter().copied()).for_each(&mut count);
        if let Some(pending) = &self.pending {
            pending.held().for_each(&mut count);
        }
        if index != self.index {
            return Err(format!(
                "index ({} keys) differs from tree + WAL replay ({} keys)",
                self.index.len(),
                index.len()
            ));
        }
        for (buf_idx, &want) in expected.iter().enumerate() {
            let have = self.pool.refcount(buf_idx as u32);
            if have != want {
                return Err(format!("buffer {buf_idx}: count {have}, referenced {want} times"));
            }
        }
        Ok(())
    }
}
