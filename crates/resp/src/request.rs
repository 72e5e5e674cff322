//! The request codec: RESP multibulk requests (`*N\r\n$len\r\n...`) and inline
//! commands, pipelined, parsed from the connection's unconsumed bytes given as
//! an ordered list of segments (the server receives into fixed buffers, so a
//! request may be split anywhere).
//!
//! The parser is stateless: each call parses from the first unconsumed byte
//! and reports how many bytes whole requests took. An incomplete request at
//! the end consumes nothing and is parsed again when more bytes arrive (its
//! header costs are repeated, its payload is never scanned).
//!
//! Every argument is available two ways: as bytes (borrowed from a segment
//! when it lies in one, gathered into the [`Parsed`] scratch when split) and
//! as locations, [`Piece`]s `(segment, start, len)`, so the server can store a
//! value zero-copy from the buffers it landed in. Inline arguments that were
//! unquoted/unescaped have no locations (their bytes do not exist verbatim).
//! A split argument longer than [`EAGER_GATHER_BYTES`] is gathered only if
//! its bytes are asked for ([`Arg::bytes`]): parsing a 512 MB value received
//! in 262,144 buffers records its pieces and copies nothing.
//!
//! An incomplete request reports a lower bound on the bytes it still needs
//! ([`ParseSummary::wanted`]: through the bulk argument being received, plus
//! the smallest encoding of each argument after it), so a server need not
//! parse it again before that many have arrived, and where its arguments
//! stand ([`ParseSummary::pending`]), so a server that refuses it (too large
//! for its memory) can read and discard the rest of it ([`Skip`]) and keep
//! the connection.
//!
//! Errors follow Redis 7.0's `processMultibulkBuffer`/`processInlineBuffer`
//! exactly, including what Redis does not check (the two bytes after a bulk
//! payload are skipped, not verified). After a [`ProtocolError`] the commands
//! parsed before it are still valid and must be executed; then the server
//! sends [`ProtocolError::reply`] and closes the connection, as Redis does.
//!
//! Invariants: `consumed` never exceeds the input length; pieces of an
//! argument are in stream order, non-empty, and their lengths sum to the
//! argument's length. Locations and gathered offsets are `u32`: the input of
//! one parse and `max_bulk_bytes` are at most `u32::MAX` bytes (asserted), so
//! no length or offset is truncated and no `start + len` overflows.

use std::ops::Range;

/// Redis's `PROTO_INLINE_MAX_SIZE`: the longest inline request, and the
/// longest a `*`/`$` header may go without its `\r`.
pub const INLINE_MAX_BYTES: usize = 64 * 1024;

/// Split arguments up to this long are gathered when parsed; longer ones
/// only when their bytes are asked for.
pub const EAGER_GATHER_BYTES: usize = 4096;

/// The fewest bytes one bulk argument takes (`$0\r\n\r\n`).
const MIN_ARG_BYTES: u64 = 6;
/// Bounds on what a request may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most arguments in one multibulk request (Redis: `INT_MAX`). Larger
    /// counts get `invalid multibulk length`.
    pub max_args: u32,
    /// Longest bulk argument (Redis `proto-max-bulk-len`, 512 MiB by
    /// default). Longer ones get `invalid bulk length`. At most
    /// `u32::MAX`: argument locations are 32-bit ([`Parsed::new`] asserts it).
    pub max_bulk_bytes: u64,
    /// Most commands one [`Parsed::parse`] call returns (the batch bound);
    /// when reached, [`ParseSummary::limited`] is set and the caller parses
    /// again after executing them.
    pub max_commands: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_args: 1024 * 1024, max_bulk_bytes: 512 * 1024 * 1024, max_commands: 1024 }
    }
}

/// A protocol violation. The connection must be closed after the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// No `\r` within 64 KB of a `*` header.
    #[error("Protocol error: too big mbulk count string")]
    TooBigMultibulkCount,
    /// The `*` count is not an integer, or is over `INT_MAX` or `max_args`.
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// No `\r` within 64 KB of a `$` header.
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkCount,
    /// An argument header did not start with `$`.
    #[error("Protocol error: expected '$', got '{}'", printable(*.0))]
    ExpectedDollar(u8),
    /// The `$` length is not an integer, negative, or over `max_bulk_bytes`.
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// An inline request longer than 64 KB without `\n`.
    #[error("Protocol error: too big inline request")]
    TooBigInline,
    /// An inline request with an unterminated quote.
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
}

/// Redis maps `\r` and `\n` in error text to spaces; other bytes go as is.
fn printable(c: u8) -> char {
    match c {
        b'\r' | b'\n' => ' ',
        _ => char::from(c),
    }
}

impl ProtocolError {
    /// The exact error reply Redis sends (`-ERR Protocol error: ...\r\n`).
    pub fn reply(&self) -> Vec<u8> {
        let mut out = b"-ERR ".to_vec();
        match self {
            // Sent as the raw byte, as Redis's `%c` does.
            ProtocolError::ExpectedDollar(c) => {
                out.extend_from_slice(b"Protocol error: expected '$', got '");
                out.push(if *c == b'\r' || *c == b'\n' { b' ' } else { *c });
                out.push(b'\'');
            }
            other => out.extend_from_slice(other.to_string().as_bytes()),
        }
        out.extend_from_slice(b"\r\n");
        out
    }
}

/// Where part of an argument lies: `len` bytes at `start` in segment
/// `segment` of the input given to [`Parsed::parse`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Index into the segment list.
    pub segment: u32,
    /// Byte offset within that segment.
    pub start: u32,
    /// Bytes in this piece (never 0).
    pub len: u32,
}

#[derive(Debug, Clone, Copy)]
enum Bytes {
    Segment { segment: u32, start: u32, len: u32 },
    Gathered { start: u32, len: u32 },
    /// Split, gathered on demand into `Parsed::lazy[slot]` from stream
    /// position `pos`.
    Lazy { slot: u32, pos: u32, len: u32 },
}

#[derive(Debug, Clone, Copy)]
struct ArgMeta {
    bytes: Bytes,
    pieces: (u32, u32),
}

/// What one call to [`Parsed::parse`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseSummary {
    /// Bytes taken by complete requests (including empty ones such as
    /// `*0\r\n` or a blank inline line, which yield no command).
    pub consumed: usize,
    /// Commands parsed (see [`Parsed::request`]).
    pub commands: usize,
    /// A protocol error after the parsed commands: execute those, send
    /// [`ProtocolError::reply`], then close.
    pub error: Option<ProtocolError>,
    /// When the last request is an incomplete multibulk: a lower bound on
    /// the unconsumed bytes it needs (through the bulk argument being
    /// received, then 6 B for each argument after it).
    pub wanted: Option<usize>,
    /// When the last request is an incomplete multibulk: where it stands.
    pub pending: Option<Pending>,
    /// Parsing stopped at [`Limits::max_commands`]: more complete requests
    /// may follow the consumed bytes.
    pub limited: bool,
}

/// Where an incomplete multibulk request stands, from its first byte (the
/// first unconsumed one): `through` bytes are accounted for (its headers and
/// the arguments received, through the end of the one being received if
/// its length is known), and `args_after` whole arguments follow them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// Bytes from the request's start through the last accounted one.
    pub through: u64,
    /// Arguments after those.
    pub args_after: u64,
}

impl Pending {
    /// A lower bound on the request's size in bytes.
    pub fn min_bytes(&self) -> u64 {
        self.through.saturating_add(self.args_after.saturating_mul(MIN_ARG_BYTES))
    }
}

/// Reads and discards the rest of a refused request, as its bytes arrive:
/// `left` bytes, then `args` whole bulk arguments (`$len\r\n` and the
/// payload with its CRLF). Resumable: each call takes what is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skip {
    left: u64,
    args: u64,
    max_bulk_bytes: u64,
}

/// What one [`Skip::advance`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skipped {
    /// Bytes to consume.
    pub consumed: usize,
    /// The request is wholly skipped.
    pub done: bool,
    /// An argument header after the refused one is malformed: reply and
    /// close, as for a parse.
    pub error: Option<ProtocolError>,
}

impl Skip {
    /// Skips the request `pending` describes (its first byte is the first
    /// unconsumed one), under the bulk limit of `limits`.
    pub fn new(pending: Pending, limits: Limits) -> Skip {
        Skip { left: pending.through, args: pending.args_after, max_bulk_bytes: limits.max_bulk_bytes }
    }

    /// Bytes still to discard before the next header (a lower bound on what
    /// the next call needs to make progress; at least 1).
    pub fn wanted(&self) -> u64 {
        self.left.max(1)
    }

    /// What is left of the request, from the first byte not yet advanced
    /// over: a server may also use a `Skip` to *scan* an incomplete request
    /// as it arrives (each call walking only the new bytes' headers) and
    /// parse it once, when [`Skipped::done`] says it is whole.
    pub fn pending(&self) -> Pending {
        Pending { through: self.left, args_after: self.args }
    }

    /// Discards what `segments` (the unconsumed bytes) hold of the request.
    pub fn advance(&mut self, segments: &[&[u8]]) -> Skipped {
        let mut starts = Vec::with_capacity(segments.len());
        let mut total = 0usize;
        for s in segments {
            starts.push(total);
            total += s.len();
        }
        let st = Stream { segs: segments, starts: &starts, total };
        let mut pos = 0usize;
        let mut scratch = Vec::new();
        let skipped = |consumed, done, error| Skipped { consumed, done, error };
        loop {
            let take = self.left.min((total - pos) as u64);
            pos += take as usize;
            self.left -= take;
            if self.left > 0 {
                return skipped(pos, false, None);
            }
            if self.args == 0 {
                return skipped(pos, true, None);
            }
            let Some(cr) = st.find(pos, b'\r') else {
                let error = (total - pos > INLINE_MAX_BYTES).then_some(ProtocolError::TooBigBulkCount);
                return skipped(pos, false, error);
            };
            if cr + 2 > total {
                return skipped(pos, false, None);
            }
            let head = st.byte(pos);
            if head != b'$' {
                return skipped(pos, false, Some(ProtocolError::ExpectedDollar(head)));
            }
            match st.parse_int(pos + 1, cr, &mut scratch) {
                Some(n) if n >= 0 && (n as u64) <= self.max_bulk_bytes => self.left = n as u64 + 2,
                _ => return skipped(pos, false, Some(ProtocolError::InvalidBulkLength)),
            }
            self.args -= 1;
            pos = cr + 2;
        }
    }
}

/// The parser's output, reused across calls to avoid allocation: commands,
/// their arguments and locations, and the bytes of split arguments.
#[derive(Debug, Default)]
pub struct Parsed {
    limits: Limits,
    seg_starts: Vec<usize>,
    pieces: Vec<Piece>,
    args: Vec<ArgMeta>,
    commands: Vec<Range<u32>>,
    /// Where each command's bytes end in the input (the offset after it).
    ends: Vec<usize>,
    gathered: Vec<u8>,
    /// Long split arguments, gathered when first asked for.
    lazy: Vec<std::cell::OnceCell<Box<[u8]>>>,
    line: Vec<u8>,
    /// Split arguments are never gathered eagerly ([`Parsed::gather_lazily`]).
    lazy_split: bool,
}

/// One parsed command: arguments as bytes and as locations.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    parsed: &'a Parsed,
    segments: &'a [&'a [u8]],
    args: &'a [ArgMeta],
    /// Bytes of the input it was parsed from (after the previous request).
    wire_bytes: usize,
}

/// One argument of a [`Request`]: its bytes (on demand: a long split
/// argument is gathered only if asked for) and where they lie.
#[derive(Clone, Copy)]
pub struct Arg<'a> {
    request: Request<'a>,
    index: usize,
    /// Its locations in the segments, in order; empty if the bytes are not
    /// in the input verbatim (an inline argument with quotes or escapes).
    pub pieces: &'a [Piece],
}

impl<'a> Arg<'a> {
    /// The argument's bytes (gathered now if it is long and split).
    pub fn bytes(&self) -> &'a [u8] {
        self.request.arg(self.index)
    }

    /// Its length in bytes (gathers nothing).
    pub fn len(&self) -> usize {
        self.request.arg_len(self.index)
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for Arg<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arg").field("len", &self.len()).field("pieces", &self.pieces.len()).finish()
    }
}

impl<'a> Request<'a> {
    /// Number of arguments (at least 1: the command name).
    pub fn len(&self) -> usize {
        self.args.len()
    }

    /// Always false: empty requests yield no command.
    pub fn is_empty(&self) -> bool {
        self.args.is_empty()
    }

    /// Argument `i` as bytes.
    pub fn arg(&self, i: usize) -> &'a [u8] {
        self.arg_bytes(i)
    }

    /// Argument `i`'s length in bytes.
    pub fn arg_len(&self, i: usize) -> usize {
        match self.args[i].bytes {
            Bytes::Segment { len, .. } | Bytes::Gathered { len, .. } | Bytes::Lazy { len, .. } => len as usize,
        }
    }

    fn arg_bytes(&self, i: usize) -> &'a [u8] {
        match self.args[i].bytes {
            Bytes::Segment { segment, start, len } => {
                let s = start as usize;
                &self.segments[segment as usize][s..s + len as usize]
            }
            Bytes::Gathered { start, len } => &self.parsed.gathered[start as usize..(start + len) as usize],
            Bytes::Lazy { slot, pos, len } => self.parsed.lazy[slot as usize].get_or_init(|| {
                let stream = Stream { segs: self.segments, starts: &self.parsed.seg_starts, total: usize::MAX };
                let mut out = Vec::with_capacity(len as usize);
                stream.copy(pos as usize, pos as usize + len as usize, &mut out);
                out.into_boxed_slice()
            }),
        }
    }

    /// Argument `i` with its locations.
    pub fn arg_ref(&self, i: usize) -> Arg<'a> {
        let meta = self.args[i];
        let pieces = &self.parsed.pieces[meta.pieces.0 as usize..meta.pieces.1 as usize];
        Arg { request: *self, index: i, pieces }
    }

    /// How many bytes of input the request took (from the end of the one
    /// before it in the same parse): what Redis's query buffer held of it.
    pub fn wire_bytes(&self) -> usize {
        self.wire_bytes
    }

    /// All arguments as bytes.
    pub fn args(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        (0..self.len()).map(move |i| self.arg(i))
    }
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.args().map(String::from_utf8_lossy)).finish()
    }
}

enum Step {
    Command(usize),
    Empty(usize),
    /// `(stream position accounted through, whole arguments after it)`.
    Incomplete(Option<(usize, u64)>),
    Error(ProtocolError),
}

impl Parsed {
    /// A parser with these limits.
    pub fn new(limits: Limits) -> Self {
        assert!(limits.max_commands > 0);
        assert!(limits.max_bulk_bytes <= u64::from(u32::MAX), "bulk limit {} B: locations are 32-bit", limits.max_bulk_bytes);
        Parsed { limits, ..Parsed::default() }
    }

    /// This parser gathers no split argument until its bytes are asked for
    /// (a caller that stores arguments by their pieces copies nothing).
    pub fn gather_lazily(mut self) -> Self {
        self.lazy_split = true;
        self
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Forgets the previous results (keeping the capacity).
    fn clear(&mut self) {
        self.pieces.clear();
        self.args.clear();
        self.commands.clear();
        self.ends.clear();
        self.gathered.clear();
        self.lazy.clear();
        self.seg_starts.clear();
    }

    /// Parses as many whole requests as `segments` hold, replacing the
    /// previous call's results.
    pub fn parse(&mut self, segments: &[&[u8]]) -> ParseSummary {
        self.clear();
        let mut starts = std::mem::take(&mut self.seg_starts);
        // A long value's many segments (a 512 MiB one arrives in 262,144)
        // each start a location and at least one piece: reserved at once,
        // not grown by doubling (a no-op once the capacity is there).
        starts.reserve(segments.len());
        self.pieces.reserve(segments.len());
        let mut total = 0usize;
        for s in segments {
            starts.push(total);
            total += s.len();
        }
        assert!(total <= u32::MAX as usize, "input of {total} B: locations are 32-bit");
        let stream = Stream { segs: segments, starts: &starts, total };
        let mut pos = 0usize;
        let mut summary =
            ParseSummary { consumed: 0, commands: 0, error: None, wanted: None, pending: None, limited: false };
        while pos < total {
            if self.commands.len() >= self.limits.max_commands as usize {
                summary.limited = true;
                break;
            }
            let first_arg = self.args.len() as u32;
            let step = if stream.byte(pos) == b'*' {
                self.multibulk(&stream, pos)
            } else {
                self.inline(&stream, pos)
            };
            match step {
                Step::Command(next) => {
                    self.commands.push(first_arg..self.args.len() as u32);
                    self.ends.push(next);
                    pos = next;
                }
                Step::Empty(next) => pos = next,
                Step::Incomplete(pending) => {
                    self.truncate_args(first_arg);
                    summary.pending =
                        pending.map(|(through, args_after)| Pending { through: (through - pos) as u64, args_after });
                    summary.wanted = summary.pending.map(|p| usize::try_from(p.min_bytes()).unwrap_or(usize::MAX));
                    break;
                }
                Step::Error(e) => {
                    self.truncate_args(first_arg);
                    summary.error = Some(e);
                    break;
                }
            }
        }
        assert!(pos <= total);
        self.seg_starts = starts;
        summary.consumed = pos;
        summary.commands = self.commands.len();
        summary
    }

    /// Replaces the previous results with one command whose arguments lie
    /// back to back in one segment, argument `i` ending at `ends[i]`: a
    /// request the server builds itself (a script's `redis.call`), read
    /// with `request(&[bytes], 0)` where `bytes` is that segment. Held to
    /// the limits a parse applies: `false` (and no command) if there are
    /// more than `max_args` arguments, one is longer than `max_bulk_bytes`,
    /// or the segment is past the 32-bit locations.
    pub fn set_command(&mut self, ends: &[usize]) -> bool {
        self.clear();
        let total = ends.last().copied().unwrap_or(0);
        if ends.is_empty() || ends.len() > self.limits.max_args as usize || total > u32::MAX as usize {
            return false;
        }
        let mut start = 0usize;
        for &end in ends {
            if end < start || (end - start) as u64 > self.limits.max_bulk_bytes {
                self.args.clear();
                return false;
            }
            self.args.push(ArgMeta { bytes: Bytes::Segment { segment: 0, start: start as u32, len: (end - start) as u32 }, pieces: (0, 0) });
            start = end;
        }
        self.seg_starts.push(0);
        self.commands.push(0..self.args.len() as u32);
        self.ends.push(total);
        true
    }

    fn truncate_args(&mut self, first_arg: u32) {
        if let Some(meta) = self.args.get(first_arg as usize) {
            self.pieces.truncate(meta.pieces.0 as usize);
            if let Bytes::Gathered { start, .. } = meta.bytes {
                self.gathered.truncate(start as usize);
            }
            if let Some(slot) = self.args[first_arg as usize..].iter().find_map(|a| match a.bytes {
                Bytes::Lazy { slot, .. } => Some(slot),
                _ => None,
            }) {
                self.lazy.truncate(slot as usize);
            }
        }
        self.args.truncate(first_arg as usize);
    }

    /// Command `i` of the last parse; `segments` must be the same list.
    pub fn request<'a>(&'a self, segments: &'a [&'a [u8]], i: usize) -> Request<'a> {
        let r = self.commands[i].clone();
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Request { parsed: self, segments, args: &self.args[r.start as usize..r.end as usize], wire_bytes: self.ends[i] - start }
    }

    /// Where command `i` of the last parse ends: the bytes to consume to
    /// take it and everything before it (a request that blocks is consumed
    /// alone, the pipeline behind it left for later).
    pub fn command_end(&self, i: usize) -> usize {
        self.ends[i]
    }

    /// Drops the locations of the last parse's arguments (their bytes
    /// stay): for input that is not where the caller's locations point, such
    /// as a transaction's queued commands replayed from a copy.
    pub fn forget_pieces(&mut self) {
        self.pieces.clear();
        self.args.iter_mut().for_each(|a| a.pieces = (0, 0));
    }

    /// Number of commands from the last parse.
    pub fn len(&self) -> usize {
        self.commands.len()
    }

    /// Whether the last parse found no command.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    fn multibulk(&mut self, st: &Stream<'_>, pos: usize) -> Step {
        let Some(cr) = st.find(pos, b'\r') else {
            return if st.total - pos > INLINE_MAX_BYTES {
                Step::Error(ProtocolError::TooBigMultibulkCount)
            } else {
                Step::Incomplete(None)
            };
        };
        if cr + 2 > st.total {
            return Step::Incomplete(None);
        }
        let count = match st.parse_int(pos + 1, cr, &mut self.line) {
            Some(n) if n <= i64::from(i32::MAX) && n <= i64::from(self.limits.max_args) => n,
            _ => return Step::Error(ProtocolError::InvalidMultibulkLength),
        };
        let mut p = cr + 2;
        if count <= 0 {
            return Step::Empty(p);
        }
        for i in 0..count {
            let here = Step::Incomplete(Some((p, (count - i) as u64)));
            if p >= st.total {
                return here;
            }
            let Some(cr) = st.find(p, b'\r') else {
                return if st.total - p > INLINE_MAX_BYTES { Step::Error(ProtocolError::TooBigBulkCount) } else { here };
            };
            if cr + 2 > st.total {
                return here;
            }
            let head = st.byte(p);
            if head != b'$' {
                return Step::Error(ProtocolError::ExpectedDollar(head));
            }
            let len = match st.parse_int(p + 1, cr, &mut self.line) {
                Some(n) if n >= 0 && (n as u64) <= self.limits.max_bulk_bytes => n as usize,
                _ => return Step::Error(ProtocolError::InvalidBulkLength),
            };
            let data = cr + 2;
            let end = data + len;
            if end + 2 > st.total {
                return Step::Incomplete(Some((end + 2, (count - i - 1) as u64)));
            }
            self.push_located(st, data, len);
            p = end + 2;
        }
        Step::Command(p)
    }

    fn inline(&mut self, st: &Stream<'_>, pos: usize) -> Step {
        let Some(nl) = st.find(pos, b'\n') else {
            return if st.total - pos > INLINE_MAX_BYTES {
                Step::Error(ProtocolError::TooBigInline)
            } else {
                Step::Incomplete(None)
            };
        };
        let mut end = nl;
        if nl > pos && st.byte(nl - 1) == b'\r' {
            end -= 1;
        }
        self.line.clear();
        st.copy(pos, end, &mut self.line);
        let line = std::mem::take(&mut self.line);
        let mut tokens = Vec::new();
        let ok = crate::inline::split_args(&line, &mut tokens);
        let step = if !ok {
            Step::Error(ProtocolError::UnbalancedQuotes)
        } else {
            for t in &tokens {
                match t {
                    crate::inline::Token::Verbatim(r) => {
                        self.push_located(st, pos + r.start, r.len());
                    }
                    crate::inline::Token::Unescaped(bytes) => self.push_gathered(bytes),
                }
            }
            if tokens.is_empty() { Step::Empty(nl + 1) } else { Step::Command(nl + 1) }
        };
        self.line = line;
        step
    }

    fn push_gathered(&mut self, bytes: &[u8]) {
        let start = self.gathered.len() as u32;
        self.gathered.extend_from_slice(bytes);
        let p = self.pieces.len() as u32;
        let bytes = Bytes::Gathered { start, len: bytes.len() as u32 };
        self.args.push(ArgMeta { bytes, pieces: (p, p) });
    }

    fn push_located(&mut self, st: &Stream<'_>, start: usize, len: usize) {
        let first_piece = self.pieces.len() as u32;
        let mut at = start;
        let mut left = len;
        let mut seg = st.segment_of(start);
        while left > 0 {
            let off = at - st.starts[seg];
            let take = (st.segs[seg].len() - off).min(left);
            if take > 0 {
                self.pieces.push(Piece { segment: seg as u32, start: off as u32, len: take as u32 });
            }
            at += take;
            left -= take;
            seg += 1;
        }
        let pieces = (first_piece, self.pieces.len() as u32);
        let bytes = if pieces.1 - pieces.0 <= 1 {
            let (segment, start) = match self.pieces.get(first_piece as usize) {
                Some(p) if pieces.1 > pieces.0 => (p.segment, p.start),
                _ => (0, 0),
            };
            Bytes::Segment { segment, start, len: len as u32 }
        } else if len <= EAGER_GATHER_BYTES && !self.lazy_split {
            let g = self.gathered.len() as u32;
            st.copy(start, start + len, &mut self.gathered);
            Bytes::Gathered { start: g, len: len as u32 }
        } else {
            self.lazy.push(std::cell::OnceCell::new());
            Bytes::Lazy { slot: self.lazy.len() as u32 - 1, pos: start as u32, len: len as u32 }
        };
        self.args.push(ArgMeta { bytes, pieces });
    }
}

/// The segments seen as one logical byte stream.
struct Stream<'a> {
    segs: &'a [&'a [u8]],
    starts: &'a [usize],
    total: usize,
}

impl Stream<'_> {
    fn segment_of(&self, pos: usize) -> usize {
        // The last segment starting at or before pos that is non-empty there.
        let mut i = self.starts.partition_point(|&s| s <= pos).saturating_sub(1);
        while i + 1 < self.segs.len() && pos >= self.starts[i] + self.segs[i].len() {
            i += 1;
        }
        i
    }

    fn byte(&self, pos: usize) -> u8 {
        let s = self.segment_of(pos);
        self.segs[s][pos - self.starts[s]]
    }

    fn find(&self, from: usize, needle: u8) -> Option<usize> {
        if from >= self.total {
            return None;
        }
        let mut seg = self.segment_of(from);
        let mut off = from - self.starts[seg];
        while seg < self.segs.len() {
            if let Some(i) = self.segs[seg][off..].iter().position(|&b| b == needle) {
                return Some(self.starts[seg] + off + i);
            }
            seg += 1;
            off = 0;
        }
        None
    }

    fn copy(&self, from: usize, to: usize, out: &mut Vec<u8>) {
        if from >= to {
            return;
        }
        let mut seg = self.segment_of(from);
        let mut at = from;
        while at < to {
            let off = at - self.starts[seg];
            let take = (self.segs[seg].len() - off).min(to - at);
            out.extend_from_slice(&self.segs[seg][off..off + take]);
            at += take;
            seg += 1;
        }
    }

    /// `string2ll` over `[from, to)`; headers longer than 20 bytes are not
    /// integers.
    fn parse_int(&self, from: usize, to: usize, scratch: &mut Vec<u8>) -> Option<i64> {
        if to < from || to - from > 20 {
            return None;
        }
        scratch.clear();
        self.copy(from, to, scratch);
        crate::numbers::parse_i64(scratch)
    }
}

#[cfg(test)]
mod tests;
