//! The bytes of one replicated Redis entry: what a proposer writes into the
//! Raft log and [`crate::RedisMachine`] applies (layout in `docs/FORMAT.md`,
//! "Replicated Redis entries").
//!
//! An entry is a 48-byte header (magic, version, kind, protocol, the
//! proposer's time and seed, counts and lengths), the watched keys of a
//! transaction, the commands as RESP multibulk bytes, and a crc32c of
//! everything before it. [`Entry::decode`] checks the checksum before it
//! reads a field, then every count and length against its bound and against
//! the bytes there are, so a torn or forged entry is refused whole
//! ([`EntryError`]) and nothing of it is interpreted.

use pmem::le;
use pmwire_resp::reply::Protocol;
use thiserror::Error;

/// The first four bytes of every entry: `RKV1`.
pub const MAGIC: [u8; 4] = *b"RKV1";
/// The format version this build writes and reads.
pub const VERSION: u8 = 1;
/// The header's length.
pub const HEADER_BYTES: usize = 48;
/// Most bytes of commands one entry carries (a 512 MiB value and its
/// command fit; the transaction queue's bound is 512 MiB too).
pub const MAX_BODY_BYTES: u64 = 1 << 30;
/// Most commands one transaction entry carries.
pub const MAX_COMMANDS: u32 = 1 << 24;
/// Most watched keys one transaction entry carries.
pub const MAX_WATCHED: u32 = 1 << 16;
/// Longest watched key (Redis's longest key).
pub const MAX_WATCHED_KEY_BYTES: u32 = 512 << 20;
/// Most expired keys or dead chunks one sweep entry may delete.
pub const MAX_SWEEP_BUDGET: u32 = 1 << 20;
/// The fixed part of a watched key's record.
const WATCHED_BYTES: usize = 24;

/// What an entry asks the machine to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One command.
    Command,
    /// A `MULTI`/`EXEC` transaction: its queued commands, run as one
    /// `EXEC` unless a watched key changed.
    Exec,
    /// The leader's expiry sweep and chunk collection, at the entry's time.
    Sweep,
}

impl Kind {
    fn to_byte(self) -> u8 {
        match self {
            Kind::Command => 1,
            Kind::Exec => 2,
            Kind::Sweep => 3,
        }
    }

    fn from_byte(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::Command),
            2 => Some(Kind::Exec),
            3 => Some(Kind::Sweep),
            _ => None,
        }
    }
}

/// What a watched key was when its session watched it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchedState {
    /// Absent (or already expired: watched as absent, as Redis does).
    Absent,
    /// Live, with this deadline if it had one.
    Live(Option<u64>),
}

/// A key a transaction's session watched, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// The key.
    pub key: Vec<u8>,
    /// The applied index of the state WATCH read the key from.
    pub index: u64,
    /// What WATCH saw there.
    pub state: WatchedState,
}

/// A decoded entry, borrowing the command bytes from the entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// What to do.
    pub kind: Kind,
    /// The protocol the proposing client's replies are written in.
    pub protocol: Protocol,
    /// The proposer's time, ms since the Unix epoch.
    pub time_ms: u64,
    /// The proposer's random draw.
    pub seed: u64,
    /// How many commands `commands` holds.
    pub count: u32,
    /// Sweep: most expired keys to delete.
    pub expire_budget: u32,
    /// Sweep: most dead chunks to delete.
    pub garbage_budget: u32,
    /// Exec: the watched keys.
    pub watched: Vec<Watched>,
    /// The commands, RESP multibulk, back to back.
    pub commands: &'a [u8],
}

/// Why an entry was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum EntryError {
    /// Shorter than a header and a checksum.
    #[error("entry too short")]
    Short,
    /// The checksum does not match: torn or corrupt.
    #[error("entry checksum mismatch")]
    Checksum,
    /// Not `RKV1`.
    #[error("not a Redis entry")]
    Magic,
    /// A version this build does not read.
    #[error("entry version {0} unknown")]
    Version(u8),
    /// A kind this build does not know.
    #[error("entry kind {0} unknown")]
    Kind(u8),
    /// A protocol other than 2 or 3, or a field that must be zero is not.
    #[error("entry field {0} invalid")]
    Field(&'static str),
    /// A count or length over its bound, or past the entry's end.
    #[error("entry length {0} out of bounds")]
    Bounds(&'static str),
    /// The commands are not exactly `count` RESP requests.
    #[error("entry commands do not parse")]
    Commands,
    /// A command that is not replicated (a connection's or the server's own).
    #[error("command not replicated in an entry")]
    NotReplicated,
}

/// A protocol's byte in the header.
pub(crate) fn protocol_byte(p: Protocol) -> u8 {
    match p {
        Protocol::Resp2 => 2,
        Protocol::Resp3 => 3,
    }
}

impl Entry<'_> {
    /// The entry's bytes (header, watched keys, commands, checksum).
    pub fn encode(&self) -> Vec<u8> {
        self.encode_with(self.commands.len(), |out| out.extend_from_slice(self.commands))
    }

    /// [`Entry::encode`] with the command bytes appended by `write` (which
    /// must append exactly `commands_len` bytes; `self.commands` is not
    /// read): a proposer encodes a client's arguments straight into the
    /// entry instead of into a buffer of their own first.
    pub fn encode_with(&self, commands_len: usize, write: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        assert!(commands_len as u64 <= MAX_BODY_BYTES);
        assert!(self.count <= MAX_COMMANDS);
        assert!(self.watched.len() as u64 <= u64::from(MAX_WATCHED));
        assert!(self.expire_budget <= MAX_SWEEP_BUDGET && self.garbage_budget <= MAX_SWEEP_BUDGET);
        let keys: usize = self.watched.iter().map(|w| WATCHED_BYTES + w.key.len()).sum();
        let mut out = Vec::with_capacity(HEADER_BYTES + keys + commands_len + 4);
        let protocol = if self.kind == Kind::Sweep { 0 } else { protocol_byte(self.protocol) };
        Head { version: VERSION, kind: self.kind.to_byte(), protocol, time_ms: self.time_ms, seed: self.seed }.encode(&mut out);
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&(self.watched.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.expire_budget.to_le_bytes());
        out.extend_from_slice(&self.garbage_budget.to_le_bytes());
        out.extend_from_slice(&(commands_len as u64).to_le_bytes());
        assert_eq!(out.len(), HEADER_BYTES);
        for w in &self.watched {
            assert!(w.key.len() as u64 <= u64::from(MAX_WATCHED_KEY_BYTES));
            out.extend_from_slice(&w.index.to_le_bytes());
            let (state, deadline) = match w.state {
                WatchedState::Absent => (0u8, 0u64),
                WatchedState::Live(None) => (1, 0),
                WatchedState::Live(Some(d)) => (2, d),
            };
            out.extend_from_slice(&[state, 0, 0, 0]);
            out.extend_from_slice(&(w.key.len() as u32).to_le_bytes());
            out.extend_from_slice(&deadline.to_le_bytes());
            out.extend_from_slice(&w.key);
        }
        let before = out.len();
        write(&mut out);
        assert_eq!(out.len() - before, commands_len, "the commands' length written in the header");
        seal(&mut out);
        out
    }
}

/// The header's first 24 bytes, the same in every version (`docs/FORMAT.md`):
/// magic, version, kind, protocol, a reserved zero byte, the proposer's
/// time and random draw. Both entry forms (this module's and
/// [`crate::extent`]'s) write and read them here; each reads its own last
/// 24 header bytes and interprets `kind` and `protocol` itself.
pub(crate) struct Head {
    pub(crate) version: u8,
    pub(crate) kind: u8,
    pub(crate) protocol: u8,
    pub(crate) time_ms: u64,
    pub(crate) seed: u64,
}

impl Head {
    /// Appends the 24 bytes.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[self.version, self.kind, self.protocol, 0]);
        out.extend_from_slice(&self.time_ms.to_le_bytes());
        out.extend_from_slice(&self.seed.to_le_bytes());
        assert_eq!(out.len() - start, 24);
    }

    /// Checks `bytes`' trailing crc32c before reading anything, then the
    /// magic, `version` and the reserved byte; the head, and a reader at
    /// the header's byte 24 over the checksummed bytes.
    pub(crate) fn decode(bytes: &[u8], version: u8) -> Result<(Head, Reader<'_>), EntryError> {
        if bytes.len() < HEADER_BYTES + 4 {
            return Err(EntryError::Short);
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err(EntryError::Checksum);
        }
        let mut r = Reader(le::Reader::new(body, 0));
        let head = r.take(8, "header")?;
        if head[..4] != MAGIC {
            return Err(EntryError::Magic);
        }
        if head[4] != version {
            return Err(EntryError::Version(head[4]));
        }
        if head[7] != 0 {
            return Err(EntryError::Field("reserved"));
        }
        let (kind, protocol) = (head[5], head[6]);
        let time_ms = r.u64("time")?;
        let seed = r.u64("seed")?;
        Ok((Head { version, kind, protocol, time_ms, seed }, r))
    }
}

/// Appends the crc32c of everything in `out`: an entry's last field.
pub(crate) fn seal(out: &mut Vec<u8>) {
    let crc = crc32c::crc32c(out);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// An entry's bytes through [`le::Reader`], a short read naming the field.
pub(crate) struct Reader<'a>(pub(crate) le::Reader<'a>);

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], EntryError> {
        self.0.take(n).ok_or(EntryError::Bounds(what))
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, EntryError> {
        self.0.u32().ok_or(EntryError::Bounds(what))
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, EntryError> {
        self.0.u64().ok_or(EntryError::Bounds(what))
    }
}

impl<'a> Entry<'a> {
    /// Decodes and checks `bytes`: checksum first, then the header's fields,
    /// then every length against its bound and the bytes left. The
    /// commands are not parsed here (the machine parses them).
    pub fn decode(bytes: &'a [u8]) -> Result<Entry<'a>, EntryError> {
        let (head, mut r) = Head::decode(bytes, VERSION)?;
        let kind = Kind::from_byte(head.kind).ok_or(EntryError::Kind(head.kind))?;
        let protocol = match (kind, head.protocol) {
            (Kind::Sweep, 0) => Protocol::Resp2,
            (Kind::Command | Kind::Exec, 2) => Protocol::Resp2,
            (Kind::Command | Kind::Exec, 3) => Protocol::Resp3,
            _ => return Err(EntryError::Field("protocol")),
        };
        let (time_ms, seed) = (head.time_ms, head.seed);
        let count = r.u32("count")?;
        let watched_count = r.u32("watched count")?;
        let expire_budget = r.u32("expire budget")?;
        let garbage_budget = r.u32("garbage budget")?;
        let body_len = r.u64("body length")?;
        check_counts(kind, count, watched_count, expire_budget, garbage_budget, body_len)?;
        let mut watched = Vec::with_capacity(watched_count.min(1024) as usize);
        for _ in 0..watched_count {
            watched.push(read_watched(&mut r)?);
        }
        let commands = r.take(body_len, "commands")?;
        if !r.0.done() {
            return Err(EntryError::Bounds("trailing bytes"));
        }
        Ok(Entry { kind, protocol, time_ms, seed, count, expire_budget, garbage_budget, watched, commands })
    }
}

/// The counts a kind allows.
fn check_counts(kind: Kind, count: u32, watched: u32, expire: u32, garbage: u32, body: u64) -> Result<(), EntryError> {
    if body > MAX_BODY_BYTES {
        return Err(EntryError::Bounds("body length"));
    }
    if watched > MAX_WATCHED {
        return Err(EntryError::Bounds("watched count"));
    }
    let ok = match kind {
        Kind::Command => count == 1 && watched == 0 && expire == 0 && garbage == 0,
        Kind::Exec => count <= MAX_COMMANDS && expire == 0 && garbage == 0,
        Kind::Sweep => {
            count == 0 && watched == 0 && body == 0 && expire <= MAX_SWEEP_BUDGET && garbage <= MAX_SWEEP_BUDGET
        }
    };
    if !ok {
        return Err(EntryError::Bounds("counts for the kind"));
    }
    Ok(())
}

fn read_watched(r: &mut Reader<'_>) -> Result<Watched, EntryError> {
    let index = r.u64("watched index")?;
    let flags = r.take(4, "watched state")?;
    if flags[1..] != [0, 0, 0] {
        return Err(EntryError::Field("watched reserved"));
    }
    let key_len = r.u32("watched key length")?;
    let deadline = r.u64("watched deadline")?;
    let state = match (flags[0], deadline) {
        (0, 0) => WatchedState::Absent,
        (1, 0) => WatchedState::Live(None),
        (2, d) if d > 0 => WatchedState::Live(Some(d)),
        _ => return Err(EntryError::Field("watched state")),
    };
    if key_len > MAX_WATCHED_KEY_BYTES {
        return Err(EntryError::Bounds("watched key length"));
    }
    let key = r.take(u64::from(key_len), "watched key")?.to_vec();
    Ok(Watched { key, index, state })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut cmds = Vec::new();
        pmwire_resp::client::encode_request(&[&b"SET"[..], b"k", b"v"], &mut cmds);
        pmwire_resp::client::encode_request(&[&b"INCR"[..], b"n"], &mut cmds);
        let watched = vec![
            Watched { key: b"k".to_vec(), index: 7, state: WatchedState::Live(Some(99)) },
            Watched { key: b"n".to_vec(), index: 9, state: WatchedState::Absent },
        ];
        let e = Entry {
            kind: Kind::Exec,
            protocol: Protocol::Resp3,
            time_ms: 1234,
            seed: 42,
            count: 2,
            expire_budget: 0,
            garbage_budget: 0,
            watched,
            commands: &cmds,
        };
        e.encode()
    }

    #[test]
    fn round_trips() {
        let bytes = sample();
        let e = Entry::decode(&bytes).unwrap();
        assert_eq!(e.kind, Kind::Exec);
        assert_eq!(e.protocol, Protocol::Resp3);
        assert_eq!((e.time_ms, e.seed, e.count), (1234, 42, 2));
        assert_eq!(e.watched[0].state, WatchedState::Live(Some(99)));
        assert_eq!(e.watched[1].index, 9);
        assert_eq!(e.encode(), bytes);
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_refused() {
        refuses_flips_and_cuts(&sample(), |b| Entry::decode(b).is_err());
    }

    /// `refused(bytes)` for every one-bit flip and every cut of `bytes`.
    pub(crate) fn refuses_flips_and_cuts(bytes: &[u8], refused: impl Fn(&[u8]) -> bool) {
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.to_vec();
            b[i / 8] ^= 1 << (i % 8);
            assert!(refused(&b), "bit {i}");
        }
        for n in 0..bytes.len() {
            assert!(refused(&bytes[..n]), "cut at {n}");
        }
    }

    /// `b` with its checksum made right again.
    pub(crate) fn reseal(mut b: Vec<u8>) -> Vec<u8> {
        let n = b.len() - 4;
        let crc = crc32c::crc32c(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Fields checked after the checksum: a well-checksummed entry with a bad field.
    #[test]
    fn bad_fields_with_good_checksums_are_refused() {
        let bytes = sample();
        let mut cases: Vec<(usize, u8, EntryError)> = vec![
            (0, b'X', EntryError::Magic),
            (4, 2, EntryError::Version(2)),
            (5, 9, EntryError::Kind(9)),
            (6, 4, EntryError::Field("protocol")),
            (7, 1, EntryError::Field("reserved")),
        ];
        // The body length one more than there is.
        cases.push((40, bytes[40] + 1, EntryError::Bounds("commands")));
        for (at, v, want) in cases {
            let mut b = bytes.clone();
            b[at] = v;
            assert_eq!(Entry::decode(&reseal(b)), Err(want), "byte {at}");
        }
        let mut huge = bytes.clone();
        huge[28..32].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Entry::decode(&reseal(huge)), Err(EntryError::Bounds("watched count")));
    }
}
