//! `pmwire-kv-cluster`: the Redis keyspace as a deterministic replicated
//! state machine (issue 26, items 1 and 3).
//!
//! A member that serves a client turns each write (or transaction) into an
//! entry ([`Proposer`]; format in [`entry`] and `docs/FORMAT.md`, "Replicated
//! Redis entries"), Raft orders the entries, and every member applies them
//! with [`RedisMachine`], the [`pmwire_smr::state::StateMachine`] over a
//! [`pmwire_resp`] keyspace. Reads are served outside the log by
//! [`RedisMachine::read`], which never writes.
//!
//! | module | owns |
//! |---|---|
//! | [`entry`] | the entry's bytes: encode, bounded and checked decode |
//! | [`extent`] | extent-form entries: a command whose values are named by their pool extents |
//! | [`copies`] | counters of value bytes copied per stage ([`copies::CopyCounters`]) |
//! | [`proposer`] | the leader's stamp: monotonic time, a fresh seed |
//! | [`machine`] | [`RedisMachine`]: apply, persist, snapshot, restore; [`MachineKeyspace`] |
//! | [`commands`] | which commands are replicated, read, or the session's own |
//! | [`track`] | the keys an entry wrote; the index of each key's last write (WATCH) |
//! | [`readonly`] | the read-only keyspace view reads run through |
//! | [`snapshot`] | the snapshot's bytes |
//! | [`prf`] | SipHash-2-4: an entry's seed into the generator's seed and the secret |
//! | `sim` (feature `sim`) | [`RedisMachine`] in `pmwire_smr::sim`: random commands of every family, per-key histories |
//!
//! # Determinism
//! What a command does depends only on the state and the entry:
//! - **Time.** The keyspace's time is the entry's (the proposer's clock,
//!   never below the last entry's: the proposer keeps it monotonic and the
//!   machine takes the larger of the two). A key is expired when its
//!   deadline is at or before that time. Lazy expiry inside an applied
//!   write therefore deletes the same keys everywhere; otherwise an expired
//!   key is removed only by a [`entry::Kind::Sweep`] entry that the leader
//!   proposes when [`RedisMachine::sweep_due`] says so, which also collects
//!   the chunks of deleted collections (both bounded per entry).
//! - **Chance.** SPOP, SRANDMEMBER, HRANDFIELD, ZRANDMEMBER and RANDOMKEY
//!   draw from the executor's generator, seeded per entry from the
//!   leader's random seed. The leader's draw decides, and every member
//!   makes the same choice: this is the same as replicating the effect
//!   (the popped member, the chosen key) because a draw's outcome is a
//!   function of the generator's output and the state the command sees,
//!   both identical on every member (the state by induction over the log;
//!   the iteration orders the commands use are the keyspace's byte order and
//!   the blobs' stored order, never a hash map's). No command's choice
//!   depends on anything else, so there is no case where the effect would
//!   have to be replicated instead.
//! - **Generations.** A chunked collection's generation hashes its members
//!   into buckets; it is drawn from a counter and a secret in the keyspace
//!   ([`pmwire_keyspace::chunked::next_generation`]). The secret is installed by
//!   the first entry from its seed ([`pmwire_keyspace::chunked::install_generation_secret`]),
//!   is replicated state (in the snapshot), survives FLUSHALL
//!   ([`track::recording`]) and is never shown to a client.
//! - **Nothing else outlives an entry**: each runs on a fresh executor and
//!   session (SCAN cursors, counters and the generator start anew).
//!
//! # WATCH
//! WATCH is served by the member the client is connected to:
//! [`RedisMachine::watch`] records, per key, the applied index of the state
//! it read and whether the key was live there (and its deadline). EXEC
//! becomes one [`entry::Kind::Exec`] entry carrying those records. The
//! machine keeps, per key, the index of its last write ([`track::WriteIndex`]),
//! and aborts the EXEC (the null array, nothing run) identically on every
//! member if any watched key was written after its watch's index, flushed
//! while it was live, or was live with a deadline at or before the EXEC
//! entry's time — Redis 7.0's rules (`touchWatchedKey`,
//! `isWatchedKeyExpired`). Bound: the last writes of 65,536 keys (8 MiB of
//! keys) are remembered; a key forgotten counts as written at the highest
//! index forgotten, so a WATCH that has seen more than 65,536 other keys
//! written before its EXEC may abort without cause (the client retries, as
//! after any abort), and a changed key always aborts.
//!
//! # Blocking pops
//! A blocking command in its own entry runs as on one node: a list (sorted
//! set, stream) holding what it waits for serves it at once; otherwise it
//! changes nothing and answers [`Applied::blocked`], and the serving member
//! parks the client (waiters are the serving member's, not replicated).
//! Every entry reports the keys a list, sorted set or stream was stored at
//! ([`Applied::ready`]) and the machine remembers each key's last write and
//! the last flush ([`RedisMachine::writes`]), and, in memory, the keys made
//! ready without a write (XGROUP DESTROY; [`RedisMachine::signals`]); once
//! one of a parked client's keys is written or signalled (or the keyspace
//! flushed) past the entry of its last attempt, the serving member proposes
//! the command again, which serves it or blocks again. An XREADGROUP proposed again after its stream or group
//! went answers its own NOGROUP error; [`Applied::unblocked`] carries what
//! Redis answers a blocked client then (`-UNBLOCKED the stream key no
//! longer exists`, or the waiter's NOGROUP). Inside a transaction or a
//! script a blocking command never waits (Redis's rule), as here.
//!
//! # Durability
//! A volatile keyspace ([`pmwire_keyspace::store::MemKeyspace`]) starts
//! empty or from a snapshot. A persistent one (the engine's,
//! `pmwire_kv_server::cluster::ClusterKeyspace`) commits the applied index,
//! the last entry's time and the write index with the applied writes in
//! one failure-atomic commit ([`machine`]'s docs), and halts the machine
//! (an error from `persist_applied`) on a refusal that depends on the
//! member rather than the log, such as a full pool.
//!
//! # Example
//! ```
//! use pmwire_kv_cluster::{Proposer, RedisMachine};
//! use pmwire_keyspace::exec::ServerConfig;
//! use pmwire_resp::reply::Protocol;
//! use pmwire_smr::state::StateMachine;
//!
//! let mut leader = Proposer::with_key(7);
//! let (mut a, mut b) = (RedisMachine::in_memory(ServerConfig::default()), RedisMachine::in_memory(ServerConfig::default()));
//! let entries = [
//!     leader.command(1_000, Protocol::Resp2, &["SADD", "s", "x", "y", "z"]),
//!     leader.command(1_001, Protocol::Resp2, &["SPOP", "s"]),
//!     leader.command(1_002, Protocol::Resp2, &["SET", "k", "v", "PX", "10"]),
//!     leader.sweep(1_050, 100, 100),
//! ];
//! for (i, e) in entries.iter().enumerate() {
//!     let (ra, rb) = (a.apply(i as u64 + 1, e), b.apply(i as u64 + 1, e));
//!     assert_eq!(ra, rb, "the same reply on every member");
//! }
//! assert_eq!(a.snapshot(), b.snapshot(), "the same state, byte for byte");
//! ```
#![deny(missing_docs)]

pub mod commands;
pub mod copies;
pub mod entry;
pub mod extent;
#[cfg(feature = "sim")]
pub mod gen;
pub mod machine;
pub mod prf;
pub mod proposer;
pub mod readonly;
pub mod signals;
#[cfg(feature = "sim")]
pub mod sim;
pub mod snapshot;
pub mod track;

pub use entry::{EntryError, Watched, WatchedState};
pub use machine::{Applied, ExtentBytes, LogHooks, MachineKeyspace, OpenError, PieceValue, ReadError, RedisMachine, Swept};
pub use proposer::Proposer;
