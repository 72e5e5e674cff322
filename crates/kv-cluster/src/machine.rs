//! [`RedisMachine`]: the Redis keyspace as a [`StateMachine`].
//!
//! Every entry runs on a fresh executor ([`Server`]) whose generator is
//! seeded from the entry's seed ([`crate::prf`]) and a fresh session in the
//! entry's protocol, against the keyspace with its time set to the entry's
//! (never below the last entry's: the machine keeps time monotonic). So a
//! command's effect and reply are a function of the state and the entry
//! alone, the same on every member; nothing of an executor outlives its
//! entry (SCAN cursors, counters), so no state lives outside the keyspace
//! and the few fields below, which the snapshot carries.
//!
//! Replicated state: the keyspace (keys of every family with their
//! deadlines, the chunks of large collections, the generation entry with
//! its secret, installed from the first entry's seed), the applied index,
//! the last entry's time, and the [`WriteIndex`] WATCH is decided by.
//!
//! Durability: with a volatile keyspace ([`MachineKeyspace::is_persistent`]
//! false) the machine keeps nothing across a restart; with a persistent one,
//! [`RedisMachine::persist_applied`] writes the applied index, the time and
//! the write index (the batch's journal entry, or a dump: [`durable`]) as
//! internal entries under tag `10` ([`MACHINE_TAG`]) and commits them with
//! the applied writes in one failure-atomic commit
//! ([`MachineKeyspace::commit`]); [`RedisMachine::open`] reads them back. A snapshot is restored into a
//! persistent keyspace over several bounded commits under a durable marker
//! (`restore`, [`RESTORING_KEY`]); a keyspace opened with the marker set
//! claims no applied index ([`RedisMachine::needs_snapshot`]).

use std::cell::RefCell;

use pmwire_keyspace::capture::Capture;
use pmwire_keyspace::chunked::{collect_garbage, install_generation_secret};
use pmwire_keyspace::exec::{active_expire, notify, Flow, Published, Scripts, Server, ServerConfig, Session, Stats, DEFAULT_SCRIPT_BUDGET};
use pmwire_keyspace::store::{Clock, Keyspace, MemKeyspace, StoreError};
use pmwire_resp::reply::{Out, Protocol, ReplySink};
use pmwire_resp::request::{Limits, Parsed, Request};
use pmwire_smr::state::{PersistError, RestoreError, SnapshotCursor, StateMachine};
use thiserror::Error;

use crate::commands::{class, Class};
use crate::copies::CopyCounters;
use crate::entry::{Entry, EntryError, Kind, Watched, WatchedState};
use crate::extent::{is_extent_form, ExtEntry, Extent};
use crate::readonly::ReadOnly;
use crate::track::{recording, Bounds, WriteIndex};
use crate::{prf, snapshot};

/// The reply to an entry whose writes outgrow even an oversized batch.
const TOO_LARGE: &[u8] = b"-OOM command not allowed: its writes need more than one atomic commit can hold\r\n";

/// The first byte of the machine's own internal entries.
pub const MACHINE_TAG: u8 = 0x10;
/// The internal key of the machine's durable state (applied index, time,
/// write floor, flush index, journal slots: five u64 LE; [`durable`]).
pub const META_KEY: &[u8] = &[MACHINE_TAG, b'M'];
/// The prefix of the previous layout's write index entries (`10 'W' key` →
/// index u64 LE): read and deleted when a keyspace is migrated ([`durable`]).
pub const WRITES_PREFIX: &[u8] = &[MACHINE_TAG, b'W'];

/// A keyspace a [`RedisMachine`] drives.
pub trait MachineKeyspace: Keyspace {
    /// Sets the time deadlines are compared with, ms since the Unix epoch.
    fn set_now_ms(&mut self, now_ms: u64);
    /// Whether [`MachineKeyspace::commit`] makes writes survive a restart.
    fn is_persistent(&self) -> bool {
        false
    }
    /// Makes every write so far durable in one failure-atomic commit.
    fn commit(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// An entry begins: what [`MachineKeyspace::rollback_entry`] undoes to.
    fn begin_entry(&mut self) {}
    /// Whether a write of the entry found the batch full (more than one
    /// commit holds): the machine undoes the entry, commits what came
    /// before, and runs it again.
    fn batch_full(&self) -> bool {
        false
    }
    /// Undoes every write since [`MachineKeyspace::begin_entry`] and clears
    /// [`MachineKeyspace::batch_full`].
    fn rollback_entry(&mut self) {}
    /// Lets the batch outgrow one commit's room (an entry larger than a
    /// batch runs alone and is committed at once).
    fn allow_oversize(&mut self) {}
    /// A refusal since the last call that does not follow from the log (a
    /// full pool): a member cannot go on past it without diverging.
    fn take_fault(&mut self) -> Option<String> {
        None
    }
    /// The entry's replies are taken: value handles may be released (and
    /// the segment locations of [`MachineKeyspace::set_segment_locs`] are
    /// forgotten).
    fn end_entry(&mut self) {}
    /// The copy counters this keyspace adds to (`None`: not counted).
    fn copies(&self) -> Option<&CopyCounters> {
        None
    }
    /// The bytes at a pool extent an extent-form entry names (`None`: this
    /// keyspace has no pool, or the extent lies outside it).
    fn extent_bytes(&self, _extent: Extent) -> Option<ExtentBytes> {
        None
    }
    /// Where each segment the next command is parsed from lies in the pool
    /// (`(buffer, offset)`, or `None` for bytes outside it): an argument
    /// whose pieces all lie in the pool is stored by its extents.
    fn set_segment_locs(&mut self, _locs: &[Option<(u32, u32)>]) {}
    /// Stores the piece of a streamed value at the internal key `key`. A
    /// keyspace with a pool keeps [`PieceValue::Pool`] by reference; this
    /// default copies it (its extents were lent by
    /// [`MachineKeyspace::extent_bytes`], which a keyspace without a pool
    /// never does).
    fn put_piece(&mut self, key: &[u8], value: PieceValue<'_>) -> Result<(), StoreError> {
        match value {
            PieceValue::Bytes(b) => self.internal_put(key, b),
            PieceValue::Pool(extents) => {
                let mut bytes = Vec::new();
                for &x in extents {
                    let lent = self.extent_bytes(x).ok_or_else(|| StoreError::NotPersisted(format!("extent {x:?} is outside this member's pool")))?;
                    bytes.extend_from_slice(lent.bytes());
                }
                self.internal_put(key, &bytes)
            }
        }
    }
    /// Where the piece at the internal key `key` lies in this member's pool
    /// (`None`: no such piece, or this keyspace has no pool: the machine
    /// reads it with [`Keyspace::internal_get`]).
    fn piece_extents(&mut self, _key: &[u8]) -> Option<Vec<Extent>> {
        None
    }
    /// The log seam (`pmwire_smr::logrefs`), if this keyspace's entries
    /// name its own buffers.
    fn log_hooks(&mut self) -> Option<&mut dyn LogHooks> {
        None
    }
}

/// What a keyspace whose entries name its pool's buffers does at the log
/// seam; [`RedisMachine`] passes the replica's calls through
/// (`pmwire_smr::state::StateMachine`'s hooks of the same names).
pub trait LogHooks {
    /// The entry as sent to a peer, values gathered (`None`: as is).
    fn wire_form(&mut self, data: &[u8]) -> Option<Vec<u8>>;
    /// `data` sent again in the wire form made a moment ago (`None`: as is).
    fn wire_form_again(&mut self, data: &[u8], wire: Option<&[u8]>);
    /// A received entry in this member's local form (`None`: as received).
    fn local_form(&mut self, data: &[u8]) -> Option<Vec<u8>>;
    /// The durable log holds `data`.
    fn log_held(&mut self, data: &[u8]);
    /// `data` left the durable log.
    fn log_dropped(&mut self, data: &[u8]);
    /// Temporary holds may go.
    fn log_settled(&mut self);
    /// The buffers the durable log holds are wanted back
    /// (`StateMachine::log_room_wanted`). False by default.
    fn log_room_wanted(&mut self) -> bool {
        false
    }
}

/// The bytes of a streamed piece ([`MachineKeyspace::put_piece`]).
#[derive(Clone, Copy, Debug)]
pub enum PieceValue<'a> {
    /// Carried in the entry.
    Bytes(&'a [u8]),
    /// In this member's pool, where the entry's extents name them.
    Pool(&'a [Extent]),
}

/// Bytes of a member's pool lent to the machine while it applies an
/// extent-form entry (the log's reference keeps the buffer allocated and
/// unwritten meanwhile).
#[derive(Clone, Copy, Debug)]
pub struct ExtentBytes {
    ptr: *const u8,
    len: usize,
}

impl ExtentBytes {
    /// Lends `len` bytes at `ptr`.
    ///
    /// # Safety
    /// The bytes must stay mapped, initialized and unwritten until the
    /// entry being applied ends ([`MachineKeyspace::end_entry`]).
    pub unsafe fn new(ptr: *const u8, len: usize) -> ExtentBytes {
        ExtentBytes { ptr, len }
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `new`'s contract.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl MachineKeyspace for MemKeyspace {
    fn set_now_ms(&mut self, now_ms: u64) {
        self.set_clock(Clock::Fixed(now_ms));
    }
}

/// What the expiry sweep of a [`Kind::Sweep`] entry did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Expired keys deleted.
    pub expired: usize,
    /// Internal entries of dead collections deleted.
    pub garbage: usize,
    /// More keys were due than the budget allowed.
    pub more: bool,
}

/// What applying one entry answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The reply bytes for the proposing client (RESP, in its protocol):
    /// one reply for a command, EXEC's reply for a transaction; empty for a
    /// sweep or a command that blocked.
    pub reply: Vec<u8>,
    /// Keys a list, sorted set or stream was stored at: the serving member
    /// serves its clients blocked there ([`crate`] docs, "Blocking pops").
    pub ready: Vec<Vec<u8>>,
    /// A blocking command found nothing to pop and changed nothing: its
    /// client waits (the serving member parks it).
    pub blocked: bool,
    /// A blocked XREAD's IDs, each stream's in the command's order, as it
    /// waits beyond them (`$` resolved to the stream's last ID at this
    /// entry): the serving member's next attempt asks beyond these.
    pub xread_from: Option<Vec<(Vec<u8>, pmwire_keyspace::stream::StreamId)>>,
    /// An XREADGROUP that answered an error because one of its streams or
    /// its group is gone: what a client that blocked in it at an earlier
    /// attempt is answered instead (Redis 7.0's `-UNBLOCKED` or `-NOGROUP`
    /// for a waiter, `pmwire_keyspace::exec::Server::xreadgroup_gone`).
    pub unblocked: Option<Vec<u8>>,
    /// A sweep entry's counts.
    pub swept: Option<Swept>,
    /// The entry was refused (the reply is the error); nothing changed.
    pub refused: Option<EntryError>,
    /// The entry was one PUBLISH or SPUBLISH (its channel, and whether a
    /// shard channel): the serving member answers how many of its own
    /// subscribers the message reached, not the machine's 0.
    pub publish_reply: Option<(Vec<u8>, bool)>,
    /// What the entry published, for every member to deliver to its own
    /// subscribers (moved to [`RedisMachine::take_published`]).
    pub published: Vec<Published>,
    /// The entry's MONITOR lines, while the member has monitors (moved to
    /// [`RedisMachine::take_monitor_lines`]).
    pub monitor_lines: Vec<Vec<u8>>,
}

pub mod durable;
pub mod ext;
mod restore;

pub use restore::RESTORING_KEY;

/// A decoded entry of either form.
enum Decoded<'a> {
    /// Version 1: commands as RESP bytes.
    V1(Entry<'a>),
    /// Version 2: one command whose values may be named by pool extents.
    Ext(ExtEntry<'a>),
}

impl Decoded<'_> {
    fn time_ms(&self) -> u64 {
        match self {
            Decoded::V1(e) => e.time_ms,
            Decoded::Ext(e) => e.time_ms,
        }
    }
}

/// What running an entry did, before it is recorded.
struct Ran {
    applied: Applied,
    /// Keys written (with repeats).
    touched: Vec<Vec<u8>>,
    /// A flush ran.
    cleared: bool,
}

/// Why a machine could not be opened on a persistent keyspace.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OpenError {
    /// The machine's internal entries do not decode.
    #[error("the keyspace's replication state is corrupt: {0}")]
    Corrupt(&'static str),
}

/// Why a read was not served.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReadError {
    /// Not a read: it goes through the log.
    #[error("not a read: {0}")]
    NotARead(String),
    /// The command tried to write (a bug in the classification; nothing was written).
    #[error("a read tried to write")]
    WriteAttempted,
}

/// The Redis keyspace as a deterministic replicated state machine.
pub struct RedisMachine<K: MachineKeyspace> {
    ks: RefCell<K>,
    config: ServerConfig,
    applied: u64,
    last_time_ms: u64,
    writes: WriteIndex,
    /// Keys made ready without a write (in memory, this member's own).
    signals: crate::signals::Signals,
    /// What the keyspace holds of the write index's entries.
    durable: durable::Layout,
    /// A flush since the last persist wiped the machine's internal entries.
    flushed: bool,
    /// Why the keyspace can no longer follow the log (a full pool, a failed
    /// commit): [`RedisMachine::persist_applied`] reports it and the replica halts.
    fault: Option<String>,
    /// The keyspace holds an interrupted snapshot restore (its marker,
    /// [`RESTORING_KEY`]): no applied index is claimed until a restore ends.
    restoring: bool,
    /// Planted bug (the agreement tests' canary): each entry's generator is
    /// seeded from this member's own randomness, not the entry's seed.
    fault_local_random: bool,
    /// The Lua interpreter and script cache, lent to each entry's executor
    /// ([`Server::swap_scripts`]): a cache of compiled functions named by
    /// their bodies, no replicated state (the bodies are internal entries).
    scripts: Scripts,
    /// INFO commandstats and errorstats of the commands applied, lent to
    /// each entry's executor ([`Server::swap_stats`]) until the member
    /// takes them in ([`RedisMachine::stats_mut`]). Not replicated state.
    stats: Stats,
    /// The member has monitors: each entry's executor records its MONITOR
    /// lines ([`RedisMachine::set_monitoring`]).
    monitoring: bool,
    /// The lines of the entries applied since the member last took them.
    monitor_lines: Vec<Vec<u8>>,
    /// An extent-form command's framing and parse, kept between entries
    /// (cleared by each use): a member applies one per write.
    ext_scratch: Option<(Vec<u8>, Parsed)>,
    /// The embedding member delivers what entries publish
    /// ([`RedisMachine::deliver_publishes`]); off, messages are dropped.
    deliver_publishes: bool,
    /// Messages of applied entries not yet taken ([`RedisMachine::take_published`]).
    published: Vec<Published>,
}

impl<K: MachineKeyspace> std::fmt::Debug for RedisMachine<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisMachine")
            .field("applied", &self.applied)
            .field("last_time_ms", &self.last_time_ms)
            .field("tracked", &self.writes.len())
            .finish()
    }
}

/// The error reply of a refused entry.
fn refusal(e: EntryError) -> Applied {
    let reply = format!("-ERR pmwire: replicated entry refused: {e}\r\n").into_bytes();
    Applied { reply, refused: Some(e), ..Applied::default() }
}

/// Parses an entry's commands: exactly `count` requests, every byte used,
/// none a session command.
fn parse_commands(entry: &Entry<'_>) -> Result<Parsed, EntryError> {
    if entry.commands.len() as u64 > u64::from(u32::MAX) {
        return Err(EntryError::Bounds("body length"));
    }
    let limits = Limits { max_commands: u32::MAX, ..Limits::default() };
    let mut parsed = Parsed::new(limits);
    let segments: [&[u8]; 1] = [entry.commands];
    let summary = parsed.parse(&segments);
    if summary.error.is_some() || summary.consumed != entry.commands.len() || summary.commands != entry.count as usize {
        return Err(EntryError::Commands);
    }
    parsed.forget_pieces();
    for i in 0..summary.commands {
        let req = parsed.request(&segments, i);
        if class(req.arg(0)) == Class::Session {
            return Err(EntryError::NotReplicated);
        }
    }
    Ok(parsed)
}

/// The RESP encoding of the argument-less command `word`.
fn control(word: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::new();
    pmwire_resp::client::encode_request(&[word], &mut bytes);
    bytes
}

impl RedisMachine<MemKeyspace> {
    /// A volatile machine on an empty [`MemKeyspace`].
    pub fn in_memory(config: ServerConfig) -> Self {
        RedisMachine::open(MemKeyspace::new(), config).expect("an empty keyspace opens")
    }
}

impl<K: MachineKeyspace> RedisMachine<K> {
    /// A machine over `ks`, executing with `config` (every member must use
    /// the same [`ServerConfig::collections`]: they shape the stored state).
    /// A persistent keyspace's replication state is read back.
    pub fn open(mut ks: K, config: ServerConfig) -> Result<Self, OpenError> {
        let restoring = ks.is_persistent() && ks.internal_get(RESTORING_KEY).is_some();
        let durable::Loaded { applied, time_ms: last_time_ms, mut writes, layout } = if ks.is_persistent() && !restoring {
            durable::load(&mut ks, Bounds::REPLICATED)?
        } else {
            durable::Loaded { applied: 0, time_ms: 0, writes: WriteIndex::default(), layout: durable::Layout::default() }
        };
        writes.set_persistent(ks.is_persistent());
        ks.set_now_ms(last_time_ms);
        // The reads above may hold value handles: none is needed any more.
        ks.end_entry();
        Ok(RedisMachine {
            ks: RefCell::new(ks),
            config,
            applied,
            last_time_ms,
            writes,
            durable: layout,
            flushed: false,
            signals: crate::signals::Signals::default(),
            fault: None,
            restoring,
            fault_local_random: false,
            scripts: Scripts::default(),
            stats: Stats::default(),
            monitoring: false,
            monitor_lines: Vec::new(),
            ext_scratch: None,
            deliver_publishes: false,
            published: Vec::new(),
        })
    }
}

impl<K: MachineKeyspace> RedisMachine<K> {
    /// Plants the canary's bug: draws from this member's own randomness.
    #[doc(hidden)]
    pub fn plant_local_random(&mut self) {
        self.fault_local_random = true;
    }

    /// Plants the persistence canary's bug: a batch's journal entry is
    /// written but not counted ([`durable`]), so the next one overwrites it.
    #[doc(hidden)]
    pub fn plant_uncounted_journal_entry(&mut self) {
        self.durable.fault_uncounted_slot = true;
    }

    /// Dumps the write index after fewer journal entries or bytes (tests:
    /// many dumps in a short run).
    #[doc(hidden)]
    pub fn set_journal_limits(&mut self, limits: durable::JournalLimits) {
        self.durable.limits = limits;
    }

    /// Journal entries the keyspace holds after the write index's last dump
    /// (tests).
    #[doc(hidden)]
    pub fn journal_entries(&self) -> u32 {
        self.durable.slots()
    }

    /// Internal entries the write index and state entry put or deleted,
    /// and bytes put, since the machine opened (tests, measurements).
    #[doc(hidden)]
    pub fn write_index_written(&self) -> (u64, u64) {
        self.durable.written()
    }

    /// Write index dumps this machine wrote since it opened (tests).
    #[doc(hidden)]
    pub fn write_index_dumps(&self) -> u64 {
        self.durable.dumps
    }

    /// The time of the last applied entry, ms since the Unix epoch: a new
    /// leader proposes no time below it ([`crate::Proposer::observe`]).
    pub fn last_time_ms(&self) -> u64 {
        self.last_time_ms
    }

    /// The keyspace (tests, the serving member's INFO).
    pub fn keyspace(&mut self) -> &mut K {
        self.ks.get_mut()
    }

    /// The keyspace back, as it is (the simulation's crash takes it).
    pub fn into_keyspace(self) -> K {
        self.ks.into_inner()
    }

    /// The write index WATCH is decided by.
    pub fn writes(&self) -> &WriteIndex {
        &self.writes
    }

    /// Keys made ready without a write, by the entries this member applied
    /// (its parked clients are attempted again after them too).
    pub fn signals(&self) -> &crate::signals::Signals {
        &self.signals
    }

    /// Keeps what applied entries publish for [`RedisMachine::take_published`]
    /// (an embedding member that delivers it to its own subscribers).
    pub fn deliver_publishes(&mut self) {
        self.deliver_publishes = true;
    }

    /// The member's `notify-keyspace-events` ([`pmwire_keyspace::exec::notify`]
    /// flags): the entries it applies from now on report their keyspace
    /// events among [`RedisMachine::take_published`]'s messages. The
    /// setting is each member's own and changes only messages, never state.
    pub fn set_notify_keyspace_events(&mut self, flags: u16) {
        self.config.notify_keyspace_events = flags;
    }

    /// The statistics of the commands applied since the embedding member
    /// last took them in (`Server::absorb_stats`, which resets them).
    pub fn stats_mut(&mut self) -> &mut Stats {
        &mut self.stats
    }

    /// Whether the member has MONITOR sessions: while it has, each entry
    /// applied records its lines (`log:<index>` as their address).
    pub fn set_monitoring(&mut self, on: bool) {
        self.monitoring = on;
    }

    /// The MONITOR lines of the entries applied since the last call, in
    /// log order.
    pub fn take_monitor_lines(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.monitor_lines)
    }

    /// The messages entries applied since the last call published, in log
    /// order: this member's subscribers are to get them (pub/sub is not
    /// durable: a member that restarts delivers what it applies after).
    pub fn take_published(&mut self) -> Vec<Published> {
        std::mem::take(&mut self.published)
    }

    /// Whether a sweep entry would find work at `now_ms`: an expired key,
    /// or a dead collection's chunks. The leader proposes one then.
    pub fn sweep_due(&mut self, now_ms: u64) -> bool {
        let ks = self.ks.get_mut();
        ks.set_now_ms(now_ms.max(self.last_time_ms));
        let due = !ks.expired(1).is_empty() || has_tombstone(ks) || ext::has_garbage(ks, now_ms);
        ks.set_now_ms(self.last_time_ms);
        due
    }

    /// What WATCH records for `key` on this member: the applied index and
    /// whether the key is live at `now_ms` (and its deadline). Changes
    /// nothing.
    pub fn watch(&mut self, key: &[u8], now_ms: u64) -> Watched {
        let (applied, restore) = (self.applied, self.last_time_ms);
        let mut ro = ReadOnly::new(self.ks.get_mut(), now_ms, restore);
        let state = match ro.get(key) {
            Some(s) => WatchedState::Live(s.deadline_ms),
            None => WatchedState::Absent,
        };
        Watched { key: key.to_vec(), index: applied, state }
    }

    /// Serves a read outside the log: `req` (a [`Class::Read`] command) runs
    /// with the member's own `server` and `session` against the applied
    /// state at `now_ms`, through [`ReadOnly`]. A write is refused before
    /// it runs; the keyspace is never written. Value handles the reply puts
    /// in `sink` stay readable until [`MachineKeyspace::end_entry`] or the
    /// next commit (the caller sends the reply first). Call it outside
    /// MULTI (a session in MULTI queues the command instead).
    pub fn read<S>(
        &mut self,
        server: &mut Server,
        session: &mut Session,
        now_ms: u64,
        req: &Request<'_>,
        sink: &mut S,
    ) -> Result<Flow, ReadError>
    where
        S: ReplySink<K::Value> + ?Sized,
    {
        if class(req.arg(0)) != Class::Read {
            return Err(ReadError::NotARead(String::from_utf8_lossy(req.arg(0)).into_owned()));
        }
        let restore = self.last_time_ms;
        let mut ro = ReadOnly::new(self.ks.get_mut(), now_ms, restore);
        let flow = server.execute(session, &mut ro, req, sink);
        if ro.attempts() > 0 {
            return Err(ReadError::WriteAttempted);
        }
        Ok(flow)
    }

    /// Runs a decoded entry at `time_ms`; what it wrote is returned, not yet
    /// recorded (the entry may be undone and run again).
    fn run(&mut self, index: u64, entry: &Entry<'_>, time_ms: u64) -> Result<Ran, EntryError> {
        if entry.kind == Kind::Sweep {
            return Ok(Ran { applied: self.sweep(entry, time_ms), touched: Vec::new(), cleared: false });
        }
        let parsed = parse_commands(entry)?;
        let segments: [&[u8]; 1] = [entry.commands];
        let dirty = entry.kind == Kind::Exec && self.writes_since_watch(entry, time_ms);
        Ok(self.run_parsed(index, (entry.kind, entry.seed, entry.protocol), dirty, time_ms, &parsed, &segments))
    }

    /// Runs the parsed commands of an entry (its kind, seed and protocol)
    /// over `segments`.
    fn run_parsed(&mut self, index: u64, (kind, seed, protocol): (Kind, u64, Protocol), dirty: bool, time_ms: u64, parsed: &Parsed, segments: &[&[u8]]) -> Ran {
        let ks = self.ks.get_mut();
        ks.set_now_ms(time_ms);
        if let Err(e) = install_generation_secret(ks, prf::derive(seed, prf::SECRET)) {
            return Ran { applied: store_failed(e, protocol), touched: Vec::new(), cleared: false };
        }
        let mut random_seed = prf::derive(seed, prf::RNG);
        if self.fault_local_random {
            random_seed = std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), index);
        }
        let mut server = Server::new(ServerConfig { random_seed, script_budget: Some(DEFAULT_SCRIPT_BUDGET), ..self.config.clone() });
        server.record_publishes();
        server.swap_scripts(&mut self.scripts);
        server.swap_stats(&mut self.stats);
        let mut session = server.open_session();
        session.protocol = protocol;
        if self.monitoring {
            server.record_monitor_lines(&session, format!("log:{index}"));
        }
        let mut rec = recording(ks);
        let mut capture = Capture::new();
        let mut applied = Applied::default();
        if kind == Kind::Command {
            let flow = server.execute(&mut session, &mut rec, &parsed.request(segments, 0), &mut capture);
            assert!(flow != Flow::Close, "QUIT is a session command");
            if flow == Flow::Block {
                applied.xread_from = server.blocked_xread_ids(&session);
                server.unblock(&mut session);
                applied.blocked = true;
            } else {
                // An XREADGROUP whose stream or group is gone answered its own
                // error (it could not run); a waiter is answered Redis's.
                let req = parsed.request(segments, 0);
                if req.arg(0).eq_ignore_ascii_case(b"xreadgroup") {
                    let args: Vec<&[u8]> = req.args().collect();
                    applied.unblocked = Server::xreadgroup_gone(&mut rec, &args);
                }
                let shard = req.arg(0).eq_ignore_ascii_case(b"spublish");
                if (shard || req.arg(0).eq_ignore_ascii_case(b"publish")) && req.len() == 3 {
                    applied.publish_reply = Some((req.arg(1).to_vec(), shard));
                }
            }
        } else if dirty {
            Out::<K::Value, _>::new(&mut capture, protocol).null_array();
        } else {
            exec(&mut server, &mut session, &mut rec, parsed, segments, &mut capture);
        }
        server.swap_scripts(&mut self.scripts);
        server.swap_stats(&mut self.stats);
        applied.published = server.take_published();
        applied.monitor_lines = server.take_monitor_lines();
        let (touched, ready, cleared) = (rec.touched, rec.ready, rec.cleared);
        applied.reply = capture.finish(&*ks);
        applied.ready = ready;
        applied.ready.sort_unstable();
        applied.ready.dedup();
        Ran { applied, touched, cleared }
    }

    /// Runs a decoded entry (at most three times: once more after
    /// committing what came before if the batch was full, once more alone
    /// in an oversized batch), then records what it wrote. Returns its
    /// output and whether it must be committed at once (it ran oversized).
    fn apply_entry(&mut self, index: u64, entry: &Decoded<'_>) -> (Applied, bool) {
        let time_ms = entry.time_ms().max(self.last_time_ms);
        for attempt in 0..3 {
            self.ks.get_mut().begin_entry();
            let result = match entry {
                Decoded::V1(e) => self.run(index, e, time_ms),
                Decoded::Ext(e) => self.run_ext(index, e, time_ms),
            };
            if self.ks.get_mut().batch_full() {
                self.ks.get_mut().rollback_entry();
                match attempt {
                    0 => {
                        if let Err(e) = self.commit_applied() {
                            self.fault.get_or_insert(e.0);
                        }
                    }
                    1 => self.ks.get_mut().allow_oversize(),
                    _ => {
                        // Larger than one atomic commit holds (a chained transaction's fixed
                        // bound, the same on every member): refused whole, as a single node
                        // refuses it; nothing of it is kept (a script's loop of writes, a
                        // transaction of huge values).
                        return (Applied { reply: TOO_LARGE.to_vec(), ..Applied::default() }, false);
                    }
                }
                continue;
            }
            if let Some(why) = self.ks.get_mut().take_fault() {
                self.fault.get_or_insert(format!("entry {index}: {why}"));
            }
            return match result {
                Ok(mut ran) => {
                    let published = std::mem::take(&mut ran.applied.published);
                    if self.deliver_publishes {
                        self.published.extend(published);
                    }
                    self.monitor_lines.append(&mut ran.applied.monitor_lines);
                    for key in &ran.touched {
                        self.writes.record(key, index);
                    }
                    for key in ran.applied.ready.iter().filter(|k| !ran.touched.contains(k)) {
                        self.signals.record(key, index);
                    }
                    if ran.cleared {
                        self.writes.record_flush(index);
                        self.flushed = true;
                    }
                    self.last_time_ms = time_ms;
                    (ran.applied, attempt == 2)
                }
                Err(e) => (refusal(e), false),
            };
        }
        (Applied { reply: b"-ERR pmwire: the entry could not be stored\r\n".to_vec(), ..Applied::default() }, false)
    }

    /// WATCH's rule: whether a key the transaction watched changed since
    /// its WATCH: written after the watch's index, flushed while it was
    /// live, or live then and expired by `time_ms` (crate docs, "WATCH").
    fn writes_since_watch(&self, entry: &Entry<'_>, time_ms: u64) -> bool {
        entry.watched.iter().any(|w| {
            let written = self.writes.last_write(&w.key) > w.index;
            let flushed = matches!(w.state, WatchedState::Live(_)) && self.writes.flush > w.index;
            let expired = matches!(w.state, WatchedState::Live(Some(d)) if d <= time_ms);
            written || flushed || expired
        })
    }

    /// A sweep entry: expired keys, then dead chunks, within its budgets.
    fn sweep(&mut self, entry: &Entry<'_>, time_ms: u64) -> Applied {
        let ks = self.ks.get_mut();
        ks.set_now_ms(time_ms);
        ks.begin_command();
        // This member's subscribers get `expired` for each key the sweep
        // deletes if its `notify-keyspace-events` asks (every member applies
        // the sweep, so each publishes to its own).
        let mut notifier = (self.config.notify_keyspace_events & notify::EXPIRED != 0).then(|| {
            let mut server = Server::new(self.config.clone());
            server.record_publishes();
            server
        });
        let budget = entry.expire_budget as usize;
        let expired = match notifier.as_mut() {
            Some(server) => server.active_expire(ks, budget),
            None => active_expire(ks, budget),
        };
        let result = expired.and_then(|s| {
            let mut garbage =
                if entry.garbage_budget > 0 { collect_garbage(ks, entry.garbage_budget as usize)? } else { 0 };
            if entry.garbage_budget as usize > garbage {
                garbage += ext::collect_pieces(ks, time_ms, entry.garbage_budget as usize - garbage)?;
            }
            Ok(Swept { expired: s.deleted, garbage, more: s.more })
        });
        match result {
            Ok(swept) => {
                let published = notifier.map(|mut s| s.take_published()).unwrap_or_default();
                Applied { swept: Some(swept), published, ..Applied::default() }
            }
            Err(e) => {
                ks.abort_command();
                store_failed(e, Protocol::Resp2)
            }
        }
    }
}

/// EXEC of a transaction entry's commands: MULTI, each queued (their
/// `+QUEUED` replies dropped), then EXEC, whose reply is the entry's.
fn exec<K: Keyspace, S: ReplySink<K::Value>>(
    server: &mut Server,
    session: &mut Session,
    ks: &mut K,
    parsed: &Parsed,
    segments: &[&[u8]],
    sink: &mut S,
) {
    let mut scratch = Capture::<K::Value>::new();
    run_control(server, session, ks, b"MULTI", &mut scratch);
    for i in 0..parsed.len() {
        server.execute(session, ks, &parsed.request(segments, i), &mut scratch);
    }
    run_control(server, session, ks, b"EXEC", sink);
}

/// Runs the argument-less command `word` (MULTI, EXEC).
fn run_control<K: Keyspace, S: ReplySink<K::Value>>(
    server: &mut Server,
    session: &mut Session,
    ks: &mut K,
    word: &[u8],
    sink: &mut S,
) {
    let bytes = control(word);
    let mut parsed = Parsed::new(Limits::default());
    let segments: [&[u8]; 1] = [&bytes];
    assert_eq!(parsed.parse(&segments).commands, 1);
    server.execute(session, ks, &parsed.request(&segments, 0), sink);
}

/// The reply of an entry whose store refused a write the machine makes
/// itself (nothing of the entry is kept).
fn store_failed(e: StoreError, protocol: Protocol) -> Applied {
    let mut reply = Vec::new();
    Out::<std::sync::Arc<[u8]>, _>::new(&mut reply, protocol).error(e.to_string().as_bytes());
    Applied { reply, ..Applied::default() }
}

/// Whether a dead collection generation waits for collection.
fn has_tombstone<K: Keyspace>(ks: &mut K) -> bool {
    let tomb = pmwire_keyspace::chunked::tombstone_key(0);
    let mut found = false;
    ks.internal_scan(&tomb[..1], 1, &mut |k| found = pmwire_keyspace::chunked::key_generation(k).is_some_and(|(t, _)| t));
    found
}

impl<K: MachineKeyspace> RedisMachine<K> {
    /// Commits the entries applied so far with the replication state, on a
    /// persistent keyspace (nothing on a volatile one).
    fn commit_applied(&mut self) -> Result<(), PersistError> {
        if !self.ks.get_mut().is_persistent() {
            return Ok(());
        }
        // The machine's own entries join a batch that may already be as large as one
        // commit holds (an entry found it full): they may take it past that.
        self.ks.get_mut().allow_oversize();
        self.write_durable().map_err(|e| PersistError(e.to_string()))?;
        self.ks.get_mut().commit().map_err(PersistError)
    }

    /// Writes the replication state as internal entries (persistent
    /// keyspaces): the state entry and the write index's journal entry or
    /// dump ([`durable`]).
    fn write_durable(&mut self) -> Result<(), StoreError> {
        let flushed = std::mem::take(&mut self.flushed);
        let state = (self.applied, self.last_time_ms);
        durable::persist(self.ks.get_mut(), &mut self.writes, &mut self.durable, state, flushed)
    }
}

impl<K: MachineKeyspace> StateMachine for RedisMachine<K> {
    type Output = Applied;

    fn apply(&mut self, index: u64, data: &[u8]) -> Applied {
        assert!(index > self.applied, "entry {index} applied after {}", self.applied);
        if self.restoring {
            self.fault.get_or_insert(format!("entry {index} applied to an interrupted snapshot restore"));
        }
        let decoded = if is_extent_form(data) { ExtEntry::decode(data).map(Decoded::Ext) } else { Entry::decode(data).map(Decoded::V1) };
        let (out, commit_now) = match decoded {
            Err(e) => (refusal(e), false),
            Ok(entry) => {
                let write = !matches!(&entry, Decoded::V1(e) if e.kind == Kind::Sweep);
                if let Some(c) = self.ks.get_mut().copies().filter(|_| write) {
                    c.add(|c| c.writes += 1);
                }
                self.apply_entry(index, &entry)
            }
        };
        self.applied = index;
        let ks = self.ks.get_mut();
        ks.set_now_ms(self.last_time_ms);
        ks.end_entry();
        if commit_now {
            if let Err(e) = self.commit_applied() {
                self.fault.get_or_insert(e.0);
            }
        }
        out
    }

    fn persist_applied(&mut self) -> Result<(), PersistError> {
        if let Some(why) = &self.fault {
            return Err(PersistError(why.clone()));
        }
        self.commit_applied()
    }

    fn applied(&self) -> u64 {
        self.applied
    }

    /// A persistent keyspace holds the state and its applied index
    /// (committed by [`StateMachine::persist_applied`]): compaction needs
    /// no copy of it.
    fn keeps_state(&self) -> bool {
        self.ks.borrow().is_persistent()
    }

    fn tracks_log(&self) -> bool {
        self.ks.borrow_mut().log_hooks().is_some()
    }

    fn accepts_from_peer(&self, data: &[u8]) -> bool {
        crate::extent::acceptable_from_peer(data)
    }

    fn wire_form(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        self.ks.get_mut().log_hooks()?.wire_form(data)
    }

    fn wire_form_again(&mut self, data: &[u8], wire: Option<&[u8]>) {
        if let Some(hooks) = self.ks.get_mut().log_hooks() {
            hooks.wire_form_again(data, wire);
        }
    }

    fn wire_len(&self) -> pmwire_smr::state::WireLen {
        crate::extent::wire_len
    }

    fn local_form(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        self.ks.get_mut().log_hooks()?.local_form(data)
    }

    fn log_held(&mut self, data: &[u8]) {
        if let Some(h) = self.ks.get_mut().log_hooks() {
            h.log_held(data);
        }
    }

    fn log_dropped(&mut self, data: &[u8]) {
        if let Some(h) = self.ks.get_mut().log_hooks() {
            h.log_dropped(data);
        }
    }

    fn log_settled(&mut self) {
        if let Some(h) = self.ks.get_mut().log_hooks() {
            h.log_settled();
        }
    }

    fn log_room_wanted(&self) -> bool {
        self.ks.borrow_mut().log_hooks().is_some_and(|h| h.log_room_wanted())
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.snapshot_into(&mut out);
        out
    }

    fn snapshot_into(&self, out: &mut Vec<u8>) {
        let mut cursor = None;
        while !self.snapshot_step(&mut cursor, out, usize::MAX) {}
    }

    fn snapshot_step(&self, cursor: &mut SnapshotCursor, out: &mut Vec<u8>, budget: usize) -> bool {
        let encoder = cursor.get_or_insert_with(|| Box::new(snapshot::Encoder::default()));
        let encoder = encoder.downcast_mut::<snapshot::Encoder>().expect("a cursor this machine made");
        let mut ks = self.ks.borrow_mut();
        let state = snapshot::State {
            applied: self.applied,
            last_time_ms: self.last_time_ms,
            floor: self.writes.floor,
            flush: self.writes.flush,
            limits: snapshot::limits_words(&self.config.collections),
        };
        let whole = encoder.step(&mut *ks, &state, &self.writes, out, budget);
        ks.set_now_ms(self.last_time_ms);
        whole
    }

    fn snapshot_len(&self, cursor: &SnapshotCursor) -> Option<u64> {
        cursor.as_ref()?.downcast_ref::<snapshot::Encoder>()?.len()
    }

    fn restore(&mut self, index: u64, bytes: &[u8]) -> Result<(), RestoreError> {
        let mut data = snapshot::decode(bytes)?;
        // A replica labels a snapshot with its own applied index, which is
        // past the machine's when the last entries were not the machine's
        // (a new leader's empty entry, a membership change): the state is
        // the same at both. A snapshot from past `index` is no such state.
        if data.state.applied > index {
            return Err(RestoreError::Corrupt("snapshot index past its metadata"));
        }
        if data.state.limits != snapshot::limits_words(&self.config.collections) {
            return Err(RestoreError::Corrupt("collection limits differ from this member's"));
        }
        let mut writes = WriteIndex::from_entries(std::mem::take(&mut data.tracked), data.state.floor, data.state.flush)
            .ok_or(RestoreError::Corrupt("write index over its bounds"))?;
        if self.ks.get_mut().is_persistent() {
            self.load_in_commits(index, &data, &writes)?;
        } else {
            snapshot::load(self.ks.get_mut(), &data).map_err(|e| RestoreError::Store(e.to_string()))?;
        }
        writes.set_persistent(self.ks.get_mut().is_persistent());
        self.writes = writes;
        self.signals.reset(index);
        self.flushed = false;
        self.applied = index;
        self.last_time_ms = data.state.last_time_ms;
        self.ks.get_mut().set_now_ms(self.last_time_ms);
        Ok(())
    }
}
