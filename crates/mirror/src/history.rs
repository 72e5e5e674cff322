//! A heap's history, and the one function that decides how a backup
//! rejoins its primary (docs/FORMAT.md, "History" and "Rejoin").
//!
//! Every heap carries, durably, a *history*: a random 64-bit id drawn when
//! a primary's heap is formatted (0 for a *blank* backup pool, which has
//! committed nothing and adopts its first primary's history), and a short
//! table of *generations*, like Raft's terms. Generation 0 begins at
//! transaction 0. [`Heap::promote`](crate::Heap::promote) starts a new
//! generation at the promoted pool's last committed transaction `b` (its
//! *fork point*): the new generation's transactions are `b + 1, …`. A
//! generation is named by its number and a random tag (two promotions of
//! the same generation, on two pools, make two different generations).
//!
//! Log matching, as in Raft: within one history, one generation has one
//! writer, so two pools whose transaction `t` is in the same generation
//! hold the same transactions up to `t`. A pool at `t` is therefore a
//! prefix of another's history exactly when the other's table puts `t` in
//! the generation the pool itself puts it in. The table keeps the last
//! [`MAX_GENERATIONS`] generations; a pool behind the oldest one kept can
//! no longer prove it is a prefix, and gets a full copy.
//!
//! [`rejoin_plan`] is the decision, a pure function of the two sides'
//! states: the primary calls it to choose what it sends, the backup calls
//! it on the same inputs to check what it is about to accept.

use pmem::crc::crc32c_append;
use pmem::le::{get_u32, get_u64, put_u32, put_u64};

use crate::backup::HelloError;

/// Generations a history keeps (the oldest is dropped past this).
pub const MAX_GENERATIONS: usize = 8;
/// Bytes of an encoded history (on media, one slot; on the wire, in a hello).
pub const HISTORY_BYTES: usize = 256;
/// Bytes of one generation in an encoded history.
const GENERATION_BYTES: usize = 24;
/// Where the generations start in an encoded history.
const GENERATIONS_AT: usize = 24;

/// One generation: its number, its random tag, and its fork point (its
/// transactions are those after `start`, up to the next generation's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Generation {
    /// 0 for the first, one more at each promotion.
    pub number: u64,
    /// Random (0 for generation 0): tells apart two promotions of one generation.
    pub tag: u64,
    /// The last transaction of the generations before it.
    pub start: u64,
}

/// A heap's history: its id and its last generations, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History {
    id: u64,
    gens: Vec<Generation>,
}

impl History {
    /// A new history `id` (0: blank), in generation 0.
    pub fn new(id: u64) -> History {
        History { id, gens: vec![Generation { number: 0, tag: 0, start: 0 }] }
    }

    /// A new history with a random nonzero id.
    pub fn random() -> History {
        History::new(rand::random::<u64>().max(1))
    }

    /// The history of a blank backup pool: no id yet.
    pub fn blank() -> History {
        History::new(0)
    }

    /// Whether this is a blank pool's (it adopts its first primary's).
    pub fn is_blank(&self) -> bool {
        self.id == 0
    }

    /// The id (0: blank).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The generations kept, oldest first; the last is the current one.
    pub fn generations(&self) -> &[Generation] {
        &self.gens
    }

    /// The current generation.
    pub fn current(&self) -> Generation {
        *self.gens.last().expect("a history has a generation")
    }

    /// The generation transaction `t` (≥ 1) belongs to: the latest whose
    /// fork point is before `t`. `None` for `t` = 0 (the empty state, in
    /// every generation) or when the table no longer goes back that far.
    pub fn generation_of(&self, t: u64) -> Option<Generation> {
        if t == 0 {
            return None;
        }
        self.gens.iter().rev().find(|g| g.start < t).copied()
    }

    /// This history with a new generation (tag `tag`, nonzero) forked at
    /// transaction `at`, the oldest generation dropped if the table is full.
    pub fn fork(&self, at: u64, tag: u64) -> History {
        let mut gens = self.gens.clone();
        if gens.len() == MAX_GENERATIONS {
            gens.remove(0);
        }
        gens.push(Generation { number: self.current().number + 1, tag: tag.max(1), start: at });
        History { id: self.id, gens }
    }

    /// The bytes: id, `serial` (which of a pool's two slots was written
    /// last; 0 on the wire), count, the generations, zeroes, and a CRC-32C
    /// over the rest (docs/FORMAT.md, "History").
    pub fn encode(&self, serial: u64) -> [u8; HISTORY_BYTES] {
        let mut b = [0u8; HISTORY_BYTES];
        put_u64(&mut b, 0, self.id);
        put_u64(&mut b, 8, serial);
        put_u32(&mut b, 16, self.gens.len() as u32);
        for (i, g) in self.gens.iter().enumerate() {
            let at = GENERATIONS_AT + i * GENERATION_BYTES;
            put_u64(&mut b, at, g.number);
            put_u64(&mut b, at + 8, g.tag);
            put_u64(&mut b, at + 16, g.start);
        }
        let crc = crc32c_append(0, &b[..HISTORY_BYTES - 4]);
        put_u32(&mut b, HISTORY_BYTES - 4, crc);
        b
    }

    /// Decodes and checks a history and its serial: the CRC first, then
    /// the count, the numbers (consecutive), the fork points (never
    /// decreasing; generation 0 at 0) and the zeroes.
    pub fn decode(b: &[u8]) -> Result<(History, u64), String> {
        if b.len() != HISTORY_BYTES {
            return Err(format!("history of {} B, want {HISTORY_BYTES}", b.len()));
        }
        if crc32c_append(0, &b[..HISTORY_BYTES - 4]) != get_u32(b, HISTORY_BYTES - 4) {
            return Err("history checksum mismatch".to_string());
        }
        let count = get_u32(b, 16) as usize;
        if count == 0 || count > MAX_GENERATIONS || get_u32(b, 20) != 0 {
            return Err(format!("history of {count} generations, want 1 to {MAX_GENERATIONS}"));
        }
        let gens: Vec<Generation> = (0..count)
            .map(|i| {
                let at = GENERATIONS_AT + i * GENERATION_BYTES;
                Generation { number: get_u64(b, at), tag: get_u64(b, at + 8), start: get_u64(b, at + 16) }
            })
            .collect();
        for pair in gens.windows(2) {
            if pair[0].number.checked_add(1) != Some(pair[1].number) || pair[1].start < pair[0].start {
                return Err(format!("generations {:?} and {:?} out of order", pair[0], pair[1]));
            }
        }
        if gens[0].number == 0 && gens[0].start != 0 {
            return Err(format!("generation 0 forked at {}", gens[0].start));
        }
        let tail = GENERATIONS_AT + count * GENERATION_BYTES;
        if b[tail..HISTORY_BYTES - 4].iter().any(|&x| x != 0) {
            return Err("history has bytes past its generations".to_string());
        }
        Ok((History { id: get_u64(b, 0), gens }, get_u64(b, 8)))
    }
}

/// An unfinished resynchronisation copy on a backup's pool (its resync
/// word is set), as the pool's hello answer says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resync {
    /// None: the pool holds its last committed transaction.
    None,
    /// A full copy was cut short: the data area may be anything.
    Full,
    /// An incremental copy from transaction `base` was cut short: every
    /// block is at `base` or at the copy's target.
    Incremental {
        /// The transaction the copy started from.
        base: u64,
    },
}

/// What a backup tells its primary in its hello answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackupState {
    /// Its history's id (0: blank).
    pub id: u64,
    /// Its current generation's number.
    pub generation: u64,
    /// Its last committed transaction (its applied word).
    pub last: u64,
    /// The generation (number, tag) its history puts `last` in (or an
    /// unfinished incremental copy's base), if known.
    pub last_gen: Option<(u64, u64)>,
    /// An unfinished copy.
    pub resync: Resync,
    /// CRC-32C of its data area (0 unless `last` is the primary's).
    pub data_crc: u32,
}

impl BackupState {
    /// The state of a pool with `history` at `last` (`last_gen` is that of
    /// an unfinished incremental copy's base, where the pool's untouched
    /// blocks are).
    pub fn of(history: &History, last: u64, resync: Resync, data_crc: u32) -> BackupState {
        let at = match resync {
            Resync::Incremental { base } => base,
            _ => last,
        };
        let last_gen = history.generation_of(at).map(|g| (g.number, g.tag));
        BackupState { id: history.id(), generation: history.current().number, last, last_gen, resync, data_crc }
    }
}

/// What the primary brings to the decision.
#[derive(Clone, Copy, Debug)]
pub struct PrimaryState<'a> {
    /// Its history.
    pub history: &'a History,
    /// Its durable last transaction (the one its hello names).
    pub last: u64,
    /// The transaction after which its DRAM tracking of written blocks is
    /// complete (it restarted there), if it tracks.
    pub tracked_since: Option<u64>,
    /// CRC-32C of its data area.
    pub data_crc: u32,
    /// The highest transaction whose commit it sent and then abandoned
    /// since it opened its heap (0: none).
    pub abandoned_to: u64,
}

/// How a backup rejoins its primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// The backup holds the primary's state: the stream starts at once.
    Stream,
    /// The backup is at `from` in the primary's history, which the
    /// primary's tracking covers: only the blocks written after `from`.
    Incremental {
        /// The backup's transaction the copy starts from.
        from: u64,
    },
    /// The whole data area.
    FullCopy,
    /// No stream: why.
    Refuse(HelloError),
}

impl Plan {
    /// The code a hello answer's `count` carries: 0 stream, 1 full copy,
    /// 2 incremental, 3 refused.
    pub fn code(&self) -> u32 {
        match self {
            Plan::Stream => 0,
            Plan::FullCopy => 1,
            Plan::Incremental { .. } => 2,
            Plan::Refuse(_) => 3,
        }
    }

    /// The short name: `stream`, `incremental`, `full copy`, `refuse`.
    pub fn name(&self) -> &'static str {
        match self {
            Plan::Stream => "stream",
            Plan::Incremental { .. } => "incremental",
            Plan::FullCopy => "full copy",
            Plan::Refuse(_) => "refuse",
        }
    }
}

/// Decides how a backup in `backup`'s state rejoins a primary in
/// `primary`'s (docs/FORMAT.md, "Rejoin"):
/// - a torn pool (a copy cut short) holds nothing worth keeping: an
///   incremental copy again from the same base if the base is still a
///   prefix of the primary's history and its tracking covers it, else a
///   full copy; never refused, never streamed;
/// - a pool of another history is refused (a blank pool, or any pool at
///   transaction 0 that was never promoted, holds the empty state, every
///   history's prefix, and adopts the primary's);
/// - a pool in a newer generation than the primary's current one is
///   refused: the primary is stale (the pool was promoted past it);
/// - a pool whose last transaction is not in the same generation in both
///   histories has diverged (an old primary that committed what the
///   promoted backup never had, or a transaction past the fork point of a
///   generation it never saw), or is older than the primary's table:
///   a full copy, never incremental;
/// - on the primary's history: ahead of the primary is refused (it holds
///   transactions the primary never committed durably), unless by no more
///   than the primary says it sent and abandoned since it opened its heap
///   (a commit whose answer was lost): a full copy; equal streams if
///   the data's CRCs agree and is refused otherwise; behind gets an
///   incremental copy if the primary's tracking covers it, else a full one.
pub fn rejoin_plan(primary: &PrimaryState<'_>, backup: &BackupState) -> Plan {
    let torn = backup.resync != Resync::None;
    let at = match backup.resync {
        Resync::Full => return Plan::FullCopy,
        Resync::Incremental { base } => base,
        Resync::None => backup.last,
    };
    let history = primary.history;
    // A pool never committed to nor promoted holds the empty state, the
    // prefix of every history: it adopts the primary's.
    let empty = at == 0 && backup.generation == 0 && !torn;
    if backup.id == 0 || empty {
        if at != 0 {
            return if torn { Plan::FullCopy } else { Plan::Refuse(HelloError::BlankWithData { last: at }) };
        }
    } else if backup.id != history.id() {
        if torn {
            return Plan::FullCopy;
        }
        return Plan::Refuse(HelloError::OtherHeap { backup: backup.id, primary: history.id() });
    } else if !torn && backup.generation > history.current().number {
        return Plan::Refuse(HelloError::StalePrimary { backup: backup.generation, primary: history.current().number });
    }
    let prefix = at == 0
        || match (backup.last_gen, history.generation_of(at)) {
            (Some(ours), Some(theirs)) => ours == (theirs.number, theirs.tag),
            _ => false,
        };
    if !prefix {
        return Plan::FullCopy;
    }
    if at > primary.last {
        // Ahead by transactions this primary sent and abandoned (the
        // backup committed one and its answer was lost): they were never
        // acknowledged, so the primary's state replaces them.
        return if torn || at <= primary.abandoned_to {
            Plan::FullCopy
        } else {
            Plan::Refuse(HelloError::Ahead { backup: at, primary: primary.last })
        };
    }
    if at == primary.last && !torn {
        if backup.data_crc == primary.data_crc {
            return Plan::Stream;
        }
        return Plan::Refuse(HelloError::OtherData { tx: at, backup: backup.data_crc, primary: primary.data_crc });
    }
    match primary.tracked_since {
        Some(since) if since <= at && at < primary.last => Plan::Incremental { from: at },
        _ => Plan::FullCopy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: u64 = 0xfeed;

    /// A history forked at each of `forks`, tags 100, 101, …
    fn history(forks: &[u64]) -> History {
        forks.iter().enumerate().fold(History::new(ID), |h, (i, &at)| h.fork(at, 100 + i as u64))
    }

    fn primary(history: &History, last: u64, tracked_since: Option<u64>) -> PrimaryState<'_> {
        PrimaryState { history, last, tracked_since, data_crc: 7, abandoned_to: 0 }
    }

    fn backup(history: &History, last: u64) -> BackupState {
        BackupState::of(history, last, Resync::None, 7)
    }

    #[test]
    fn histories_round_trip_and_reject_every_flip() {
        let h = history(&[10, 10, 25]);
        assert_eq!(History::decode(&h.encode(5)).unwrap(), (h.clone(), 5));
        assert_eq!(h.current(), Generation { number: 3, tag: 102, start: 25 });
        let bytes = h.encode(0);
        for i in 0..HISTORY_BYTES {
            let mut bad = bytes;
            bad[i] ^= 0x10;
            assert!(History::decode(&bad).is_err(), "flip at {i} accepted");
        }
        assert!(History::decode(&[0u8; HISTORY_BYTES]).is_err(), "zeroes are no history");
        assert!(History::decode(&bytes[..100]).is_err());
    }

    #[test]
    fn the_table_keeps_the_last_generations() {
        let forks: Vec<u64> = (1..=20).map(|i| i * 5).collect();
        let h = history(&forks);
        assert_eq!(h.generations().len(), MAX_GENERATIONS);
        assert_eq!(h.current().number, 20);
        assert_eq!(History::decode(&h.encode(1)).unwrap().0, h);
        // Transaction 3 was in generation 0, no longer kept.
        assert_eq!(h.generation_of(3), None);
        assert_eq!(h.generation_of(100).unwrap().number, 19);
        assert_eq!(h.generation_of(101).unwrap().number, 20);
        assert_eq!(h.generation_of(0), None);
    }

    #[test]
    fn generations_split_transactions_at_their_fork_points() {
        let h = history(&[10, 10, 25]);
        let numbers: Vec<u64> = [1, 10, 11, 25, 26, 1000].iter().map(|&t| h.generation_of(t).unwrap().number).collect();
        assert_eq!(numbers, [0, 0, 2, 2, 3, 3], "generation 1 forked at 10 and was forked again before a commit");
    }

    #[test]
    fn plan_equal_streams() {
        let h = history(&[4]);
        assert_eq!(rejoin_plan(&primary(&h, 9, Some(0)), &backup(&h, 9)), Plan::Stream);
        // A backup still in generation 0 at the fork point: same prefix.
        let old = History::new(ID);
        assert_eq!(rejoin_plan(&primary(&h, 4, None), &backup(&old, 4)), Plan::Stream);
        // Blank at 0, primary at 0.
        assert_eq!(rejoin_plan(&primary(&h, 0, None), &backup(&History::blank(), 0)), Plan::Stream);
    }

    #[test]
    fn plan_equal_with_other_bytes_is_refused() {
        let h = History::new(ID);
        let b = BackupState { data_crc: 8, ..backup(&h, 9) };
        let plan = rejoin_plan(&primary(&h, 9, Some(0)), &b);
        assert_eq!(plan, Plan::Refuse(HelloError::OtherData { tx: 9, backup: 8, primary: 7 }));
    }

    #[test]
    fn plan_behind_is_incremental_when_tracked_else_full() {
        let h = history(&[4]);
        let old = History::new(ID);
        assert_eq!(rejoin_plan(&primary(&h, 30, Some(2)), &backup(&h, 20)), Plan::Incremental { from: 20 });
        assert_eq!(rejoin_plan(&primary(&h, 30, Some(20)), &backup(&h, 20)), Plan::Incremental { from: 20 });
        assert_eq!(rejoin_plan(&primary(&h, 30, Some(21)), &backup(&h, 20)), Plan::FullCopy, "restarted since");
        assert_eq!(rejoin_plan(&primary(&h, 30, None), &backup(&h, 20)), Plan::FullCopy, "no tracking");
        // In generation 0 before the fork point: a prefix.
        assert_eq!(rejoin_plan(&primary(&h, 30, Some(0)), &backup(&old, 3)), Plan::Incremental { from: 3 });
        // Blank: the empty prefix of every history.
        let blank = History::blank();
        assert_eq!(rejoin_plan(&primary(&h, 30, Some(0)), &backup(&blank, 0)), Plan::Incremental { from: 0 });
        assert_eq!(rejoin_plan(&primary(&h, 30, Some(1)), &backup(&blank, 0)), Plan::FullCopy);
        // Any pool never committed to nor promoted holds the empty state.
        let other_zero = History::new(ID + 1);
        assert_eq!(rejoin_plan(&primary(&h, 30, Some(0)), &backup(&other_zero, 0)), Plan::Incremental { from: 0 });
        assert_eq!(rejoin_plan(&primary(&h, 0, Some(0)), &backup(&other_zero, 0)), Plan::Stream);
        let promoted_zero = History::new(ID + 1).fork(0, 3);
        let plan = rejoin_plan(&primary(&h, 30, Some(0)), &backup(&promoted_zero, 0));
        assert!(matches!(plan, Plan::Refuse(HelloError::OtherHeap { .. })), "{plan:?}");
    }

    #[test]
    fn plan_diverged_is_a_full_copy_never_incremental() {
        // The promoted backup forked generation 1 at 4; the old primary
        // committed 5 in generation 0, which the promoted pool never had.
        let promoted = history(&[4]);
        let old_primary = History::new(ID);
        let plan = rejoin_plan(&primary(&promoted, 30, Some(0)), &backup(&old_primary, 5));
        assert_eq!(plan, Plan::FullCopy);
        // Even at the primary's very transaction number, and ahead of it.
        assert_eq!(rejoin_plan(&primary(&promoted, 5, Some(0)), &backup(&old_primary, 5)), Plan::FullCopy);
        assert_eq!(rejoin_plan(&primary(&promoted, 4, Some(0)), &backup(&old_primary, 9)), Plan::FullCopy);
        // A sibling promotion of the same generation (another tag).
        let sibling = History::new(ID).fork(4, 999);
        let plan = rejoin_plan(&primary(&promoted, 30, Some(0)), &backup(&sibling, 8));
        assert_eq!(plan, Plan::FullCopy);
        // A backup in a generation that forked earlier than its position:
        // it holds 12 in generation 1 (forked at 4), the primary's history
        // forked generation 2 at 10, so its 12 is in generation 2.
        let primary_history = promoted.fork(10, 7);
        let plan = rejoin_plan(&primary(&primary_history, 30, Some(0)), &backup(&promoted, 12));
        assert_eq!(plan, Plan::FullCopy);
        // Behind the generations the primary keeps: no proof of a prefix.
        let long = history(&(1..=12).map(|i| i * 10).collect::<Vec<_>>());
        assert_eq!(rejoin_plan(&primary(&long, 500, Some(0)), &backup(&History::new(ID), 3)), Plan::FullCopy);
    }

    #[test]
    fn plan_ahead_in_the_primary_generation_is_refused() {
        let h = history(&[4]);
        let plan = rejoin_plan(&primary(&h, 9, Some(0)), &backup(&h, 11));
        assert_eq!(plan, Plan::Refuse(HelloError::Ahead { backup: 11, primary: 9 }));
        assert!(plan_text(&plan).contains("ahead"));
        // Ahead by what this primary sent and abandoned: a full copy
        // replaces it; ahead past that is still refused.
        let abandoned = |to| PrimaryState { abandoned_to: to, ..primary(&h, 9, Some(0)) };
        assert_eq!(rejoin_plan(&abandoned(11), &backup(&h, 11)), Plan::FullCopy);
        assert_eq!(rejoin_plan(&abandoned(12), &backup(&h, 11)), Plan::FullCopy);
        assert_eq!(rejoin_plan(&abandoned(10), &backup(&h, 11)), Plan::Refuse(HelloError::Ahead { backup: 11, primary: 9 }));
    }

    #[test]
    fn plan_another_heap_is_refused_with_the_reason() {
        let h = History::new(ID);
        let other = History::new(ID + 1);
        let plan = rejoin_plan(&primary(&h, 9, Some(0)), &backup(&other, 9));
        assert_eq!(plan, Plan::Refuse(HelloError::OtherHeap { backup: ID + 1, primary: ID }));
        assert!(plan_text(&plan).contains("another heap"), "{}", plan_text(&plan));
        let plan = rejoin_plan(&primary(&h, 9, Some(0)), &backup(&History::blank(), 3));
        assert_eq!(plan, Plan::Refuse(HelloError::BlankWithData { last: 3 }));
    }

    #[test]
    fn plan_a_stale_primary_is_refused() {
        let old = History::new(ID);
        let promoted = history(&[4]);
        let plan = rejoin_plan(&primary(&old, 4, Some(0)), &backup(&promoted, 4));
        assert_eq!(plan, Plan::Refuse(HelloError::StalePrimary { backup: 1, primary: 0 }));
        assert!(plan_text(&plan).contains("newer generation"), "{}", plan_text(&plan));
    }

    #[test]
    fn plan_torn_pools_are_copied_again_never_refused_nor_streamed() {
        let h = history(&[4]);
        let full = BackupState { resync: Resync::Full, ..backup(&h, 9) };
        assert_eq!(rejoin_plan(&primary(&h, 30, Some(0)), &full), Plan::FullCopy);
        let other = BackupState { resync: Resync::Full, ..backup(&History::new(ID + 1), 9) };
        assert_eq!(rejoin_plan(&primary(&h, 30, Some(0)), &other), Plan::FullCopy);
        let inc = BackupState { resync: Resync::Incremental { base: 9 }, ..backup(&h, 9) };
        assert_eq!(rejoin_plan(&primary(&h, 30, Some(0)), &inc), Plan::Incremental { from: 9 });
        assert_eq!(rejoin_plan(&primary(&h, 30, Some(10)), &inc), Plan::FullCopy, "no longer tracked");
        assert_eq!(rejoin_plan(&primary(&h, 9, Some(0)), &inc), Plan::FullCopy, "never streamed");
        assert_eq!(rejoin_plan(&primary(&h, 8, Some(0)), &inc), Plan::FullCopy, "never refused as ahead");
        let other_inc = BackupState { resync: Resync::Incremental { base: 9 }, ..backup(&History::new(ID + 1), 9) };
        assert_eq!(rejoin_plan(&primary(&h, 30, Some(0)), &other_inc), Plan::FullCopy);
        let blank_inc = BackupState { resync: Resync::Incremental { base: 0 }, ..backup(&History::blank(), 0) };
        assert_eq!(rejoin_plan(&primary(&h, 30, Some(0)), &blank_inc), Plan::Incremental { from: 0 });
        let stale = BackupState { resync: Resync::Incremental { base: 3 }, ..backup(&history(&[4, 5]), 3) };
        assert_eq!(rejoin_plan(&primary(&h, 30, Some(0)), &stale), Plan::Incremental { from: 3 });
    }

    fn plan_text(plan: &Plan) -> String {
        match plan {
            Plan::Refuse(e) => e.to_string(),
            other => format!("{other:?}"),
        }
    }
}
