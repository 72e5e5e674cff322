//! What the event loop hands a [`Service`] once per wake-up, and what the service hands back.
//!
//! A [`Batch`] holds one entry per connection that received new bytes since the last call. An
//! entry's [`Input`] lists all of the connection's unconsumed bytes as ordered [`Segment`]s, each
//! a range of one source buffer (a request may span several). The service answers in the
//! entry's [`Reply`]: how many bytes it consumed (a prefix of the input), the [`Output`] to
//! send, and whether to close the connection once that output is sent.
//!
//! A connection appears in a batch only when new bytes (or its EOF) arrived since the last
//! call, or when the service asked for it ([`Service::wakeups`]), so a service must consume
//! every complete request it is shown unless it parks the connection: a request left
//! unconsumed is shown again only with the next bytes or the service's wake-up. Output is appended, never replaced
//! (earlier parts may still be queued).
//!
//! Invariants:
//! - segments point into buffers the loop holds a reference on for the whole `handle` call;
//!   the slices cannot outlive the `&mut Batch` borrow;
//! - `Reply::consumed` never exceeds the entry's input length (the loop asserts it);
//! - an [`Output`] is an ordered list of [`Part`]s; inline parts index its own byte arena,
//!   buffer parts name a range of a source buffer that the loop retains until it is sent.

use crate::buffers::BufferSource;

/// Identifies one connection for its lifetime (a slot reused later gets a new generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    /// Index of the connection's slot in the server.
    pub slot: u32,
    /// Incremented each time the slot is reused.
    pub generation: u32,
}

/// A contiguous range of received bytes, inside one source buffer.
#[derive(Clone, Copy, Debug)]
pub struct Segment<'a> {
    /// The source buffer holding the bytes.
    pub buf: u32,
    /// Offset of `bytes` inside that buffer.
    pub offset: u32,
    /// The bytes.
    pub bytes: &'a [u8],
}

/// One connection's unconsumed input.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    /// The connection.
    pub conn: ConnId,
    /// Index of the listener the connection was accepted on (the position of its address
    /// in [`crate::Server::bind_all`]; 0 for [`crate::Server::bind`]).
    pub listener: u32,
    /// The peer connected from a loopback address (127.0.0.0/8, ::1, or a
    /// v4-mapped loopback): what Redis's protected mode asks.
    pub peer_loopback: bool,
    /// All unconsumed bytes, in stream order.
    pub segments: &'a [Segment<'a>],
    /// The peer closed its sending side after these bytes: no more will come.
    pub peer_closed: bool,
    /// Output queued for this connection and not sent yet (the peer reads slower than it
    /// was answered): a service that writes to a connection unasked (pub/sub messages)
    /// bounds what it adds by this.
    pub unsent_bytes: usize,
    /// Its addresses and descriptor (CLIENT LIST).
    pub addrs: ConnAddrs,
}

/// A connection's addresses, read once when it was accepted, and its descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnAddrs {
    /// The peer's address, if `getpeername` gave one.
    pub peer: Option<std::net::SocketAddr>,
    /// This side's, if `getsockname` gave one.
    pub local: Option<std::net::SocketAddr>,
    /// The socket's descriptor (-1: none).
    pub fd: i32,
}

impl Input<'_> {
    /// Total number of unconsumed bytes.
    pub fn len_bytes(&self) -> usize {
        self.segments.iter().map(|s| s.bytes.len()).sum()
    }
}

/// One piece of output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// `len` bytes of the output's own arena, from `start`.
    Inline {
        /// Offset in the arena.
        start: u32,
        /// Length in bytes.
        len: u32,
    },
    /// `len` bytes of source buffer `buf` from `offset` (sent zero-copy).
    Buf {
        /// Source buffer id.
        buf: u32,
        /// Offset inside the buffer.
        offset: u32,
        /// Length in bytes.
        len: u32,
    },
}

impl Part {
    /// The part's length in bytes.
    pub fn len(&self) -> u32 {
        match *self {
            Part::Inline { len, .. } | Part::Buf { len, .. } => len,
        }
    }

    /// Whether the part is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Output for one connection: owned bytes and zero-copy ranges of source buffers, in order.
///
/// Writing (`push_bytes`, `push_buf`, `std::io::Write`) appends; the loop sends parts in order.
/// Capacity is kept when an output is cleared, so steady-state serving does not allocate.
#[derive(Debug, Default)]
pub struct Output {
    arena: Vec<u8>,
    parts: Vec<Part>,
    len_bytes: usize,
}

impl Output {
    /// An empty output.
    pub fn new() -> Output {
        Output::default()
    }

    /// Appends a copy of `bytes`.
    pub fn push_bytes(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let start = self.arena.len();
        self.arena.extend_from_slice(bytes);
        assert!(self.arena.len() <= u32::MAX as usize, "output arena over 4 GiB");
        self.len_bytes += bytes.len();
        if let Some(Part::Inline { start: s, len }) = self.parts.last_mut() {
            if (*s + *len) as usize == start {
                *len += bytes.len() as u32;
                return;
            }
        }
        self.parts.push(Part::Inline { start: start as u32, len: bytes.len() as u32 });
    }

    /// Appends `len` bytes of source buffer `buf` from `offset`, to be sent without a copy.
    /// The loop retains the buffer when the reply is taken and releases it once sent.
    pub fn push_buf(&mut self, buf: u32, offset: u32, len: u32) {
        if len == 0 {
            return;
        }
        self.len_bytes += len as usize;
        self.parts.push(Part::Buf { buf, offset, len });
    }

    /// The output's current end, to [`Output::truncate`] back to (e.g. to replace staged
    /// replies with errors when their batch could not be persisted).
    pub fn mark(&self) -> OutputMark {
        let last_inline = match self.parts.last() {
            Some(Part::Inline { len, .. }) => Some(*len),
            _ => None,
        };
        OutputMark { parts: self.parts.len(), arena: self.arena.len(), len_bytes: self.len_bytes, last_inline }
    }

    /// Drops everything appended since `mark` was taken on this output (nothing else may
    /// have been removed meanwhile). Buffer parts hold no reference until the loop takes the
    /// reply, so dropping them releases nothing.
    pub fn truncate(&mut self, mark: OutputMark) {
        assert!(mark.parts <= self.parts.len(), "mark beyond the output");
        assert!(mark.arena <= self.arena.len(), "mark beyond the arena");
        self.parts.truncate(mark.parts);
        self.arena.truncate(mark.arena);
        self.len_bytes = mark.len_bytes;
        if let (Some(Part::Inline { len, .. }), Some(was)) = (self.parts.last_mut(), mark.last_inline) {
            *len = was; // push_bytes may have grown the last inline part since the mark
        }
    }

    /// Total bytes queued.
    pub fn len_bytes(&self) -> usize {
        self.len_bytes
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The parts, in order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The bytes of an inline part.
    pub fn inline_bytes(&self, start: u32, len: u32) -> &[u8] {
        &self.arena[start as usize..(start + len) as usize]
    }

    /// Empties the output, keeping its capacity. Buffer parts are not released here.
    pub(crate) fn clear(&mut self) {
        self.arena.clear();
        self.parts.clear();
        self.len_bytes = 0;
    }

    /// Flattens the output into bytes (for tests and debugging); reads buffer parts via `src`.
    pub fn to_vec<S: BufferSource>(&self, src: &S) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len_bytes);
        for p in &self.parts {
            match *p {
                Part::Inline { start, len } => v.extend_from_slice(self.inline_bytes(start, len)),
                Part::Buf { buf, offset, len } => {
                    assert!(offset as u64 + len as u64 <= src.buf_size() as u64);
                    // SAFETY: in bounds of a buffer the caller keeps alive.
                    let s = unsafe { std::slice::from_raw_parts(src.ptr(buf).add(offset as usize), len as usize) };
                    v.extend_from_slice(s);
                }
            }
        }
        v
    }
}

/// A position in an [`Output`] (see [`Output::mark`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputMark {
    parts: usize,
    arena: usize,
    len_bytes: usize,
    last_inline: Option<u32>,
}

impl std::io::Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.push_bytes(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The service's answer for one connection.
#[derive(Debug, Default)]
pub struct Reply {
    /// Bytes of the input consumed (a prefix); their buffers are released by the loop unless
    /// the service retained them.
    pub consumed: usize,
    /// Output to append to the connection's send queue.
    pub output: Output,
    /// Close the connection once all queued output is sent; unread input is discarded.
    pub close: bool,
    /// Close the connection at once, unsent output dropped (a peer that reads too slowly for
    /// what it is sent: a pub/sub subscriber past its output limit).
    pub abort: bool,
    /// Unconsumed bytes the service needs before it can make progress on this connection
    /// (0: any new byte). The loop does not hand the connection to the service again before it
    /// holds that many (or the peer closed), and lets it hold that many even beyond
    /// [`crate::Config::max_rx_bytes`]: a receive grant for a large request, which the service
    /// sizes against its memory. A lower bound is safe; more than the request needs stalls it.
    pub wanted: usize,
    /// The service holds this connection's input for now: it consumes no more until it wakes
    /// the connection ([`crate::Service::wakeups`]), for example while too many of its requests
    /// are unanswered. Reading pauses at [`crate::Config::max_rx_bytes`] as for any connection
    /// (TCP pushes back on the peer), but a held connection is not closed for reaching it.
    pub held: bool,
}

#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) conn: ConnId,
    pub(crate) listener: u32,
    pub(crate) peer_loopback: bool,
    pub(crate) seg_start: usize,
    pub(crate) seg_end: usize,
    pub(crate) peer_closed: bool,
    pub(crate) unsent_bytes: usize,
    pub(crate) addrs: ConnAddrs,
    pub(crate) len_bytes: usize,
    /// Output parts already queued before this batch (to find the new ones).
    pub(crate) parts_before: usize,
    pub(crate) reply: Reply,
}

/// Everything that arrived in one wake-up of the loop, one entry per connection.
///
/// Only the loop (and [`drive`]) make batches: with no public constructor and no `Default`, a
/// service cannot move a batch out of its `&mut Batch` and keep its segments past the call.
#[derive(Debug)]
pub struct Batch {
    pub(crate) entries: Vec<Entry>,
    /// Segments of all entries. The `'static` is internal only: the slices are valid while the
    /// loop holds its references (during `handle`), and are handed out re-borrowed for the
    /// lifetime of `&self`, never longer. The vector is cleared before any buffer is released.
    pub(crate) segs: Vec<Segment<'static>>,
    /// Entries used in the current call (the vector keeps older ones for their capacity).
    pub(crate) used: usize,
}

impl Batch {
    pub(crate) fn new() -> Batch {
        Batch { entries: Vec::new(), segs: Vec::new(), used: 0 }
    }

    /// Number of connections in this batch.
    pub fn len(&self) -> usize {
        self.used
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// Entry `i`'s input.
    pub fn input(&self, i: usize) -> Input<'_> {
        assert!(i < self.used, "batch entry {i} out of range");
        let e = &self.entries[i];
        Input {
            conn: e.conn,
            listener: e.listener,
            peer_loopback: e.peer_loopback,
            segments: &self.segs[e.seg_start..e.seg_end],
            peer_closed: e.peer_closed,
            unsent_bytes: e.unsent_bytes,
            addrs: e.addrs,
        }
    }

    /// Entry `i`'s reply, to fill in.
    pub fn reply(&mut self, i: usize) -> &mut Reply {
        assert!(i < self.used, "batch entry {i} out of range");
        &mut self.entries[i].reply
    }

    /// Entry `i`'s input and reply at once.
    pub fn split(&mut self, i: usize) -> (Input<'_>, &mut Reply) {
        assert!(i < self.used, "batch entry {i} out of range");
        let e = &mut self.entries[i];
        let input = Input {
            conn: e.conn,
            listener: e.listener,
            peer_loopback: e.peer_loopback,
            segments: &self.segs[e.seg_start..e.seg_end],
            peer_closed: e.peer_closed,
            unsent_bytes: e.unsent_bytes,
            addrs: e.addrs,
        };
        (input, &mut e.reply)
    }
}

/// Application logic driven by the server's loop: called once per wake-up with everything
/// that arrived (PASTE A.2: handle, persist and drain the whole batch, then reply).
pub trait Service<S: BufferSource> {
    /// Consumes input and queues output for every entry of `batch`. A service that keeps
    /// received bytes past this call (e.g. a stored value) `retain`s their buffers in `bufs`
    /// and later `release`s exactly those references.
    fn handle(&mut self, batch: &mut Batch, bufs: &mut S);

    /// Connection `conn` is closed and all its buffers returned (default: nothing).
    fn closed(&mut self, conn: ConnId, bufs: &mut S) {
        let _ = (conn, bufs);
    }

    /// Asked after every `handle` and every wake-up of the loop: the connections to show
    /// again at once although no new bytes came for them (pushed to `wake`: e.g. a parked
    /// request that can now be answered; they are shown even with no unconsumed input), and
    /// the instant at which the service wants to be asked again (the loop's timer wakes it
    /// then, with no busy waiting; `None`: no deadline). Default: neither.
    fn wakeups(&mut self, wake: &mut Vec<ConnId>) -> Option<std::time::Instant> {
        let _ = wake;
        None
    }

    /// Asked last before the loop blocks: what else should wake it. A service that drives
    /// another source of events from the same thread (a network transport's peers, beside the
    /// loop's own clients: `transport::Transport::event_fd`) arms it here and returns its fd,
    /// which the loop then waits on with its sockets (one poll request, re-armed after it
    /// fires); [`Watch::Ready`] when that source has events already (the loop then does not
    /// block). The service does that source's work in [`Service::wakeups`], which the loop
    /// calls after every wake-up. Default: nothing.
    fn watch(&mut self) -> Watch {
        Watch::Nothing
    }

    /// Limits on connections the service sets at run time (asked at each accept and each
    /// tick, so a change applies at once). Default: none.
    fn limits(&self) -> ConnLimits {
        ConnLimits::default()
    }

    /// Whether connection `conn`, idle past [`ConnLimits::idle_timeout`], may be closed
    /// (default: yes).
    fn idle_closable(&self, conn: ConnId) -> bool {
        let _ = conn;
        true
    }
}

/// Limits a service sets on its connections ([`Service::limits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// Most open connections (Redis's `maxclients`); one over it is refused as one over
    /// [`crate::Config::max_connections`] is (sent the listener's reject reply, closed).
    pub max_clients: u32,
    /// Connections that neither received nor sent a byte for longer than this are closed
    /// (Redis's `timeout`; checked every 500 ms); `None`: never.
    pub idle_timeout: Option<std::time::Duration>,
}

impl Default for ConnLimits {
    fn default() -> ConnLimits {
        ConnLimits { max_clients: u32::MAX, idle_timeout: None }
    }
}

/// What the loop waits on besides its sockets ([`Service::watch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watch {
    /// Nothing else.
    Nothing,
    /// Something is ready now: do not block.
    Ready,
    /// Wake when this fd is readable.
    Fd(std::os::fd::RawFd),
}

/// Runs `service` once over `inputs` without a server (for unit tests of services): builds a
/// batch, calls `handle`, and returns one reply per input. Unlike the loop, it neither retains
/// zero-copy parts nor releases consumed buffers: the caller checks the replies.
pub fn drive<S: BufferSource, V: Service<S>>(service: &mut V, bufs: &mut S, inputs: &[Input<'_>]) -> Vec<Reply> {
    let mut batch = Batch::new();
    for input in inputs {
        let seg_start = batch.segs.len();
        for s in input.segments {
            // SAFETY: the extended lifetime never leaves this function: `segs` is cleared
            // before it returns, and the service only sees the batch by `&mut` during `handle`
            // (it cannot move it out: `Batch` has no public constructor or `Default`).
            let bytes: &'static [u8] = unsafe { std::mem::transmute::<&[u8], &'static [u8]>(s.bytes) };
            batch.segs.push(Segment { buf: s.buf, offset: s.offset, bytes });
        }
        batch.entries.push(Entry {
            conn: input.conn,
            listener: input.listener,
            peer_loopback: input.peer_loopback,
            seg_start,
            seg_end: batch.segs.len(),
            peer_closed: input.peer_closed,
            unsent_bytes: input.unsent_bytes,
            addrs: input.addrs,
            len_bytes: input.len_bytes(),
            parts_before: 0,
            reply: Reply::default(),
        });
    }
    batch.used = batch.entries.len();
    service.handle(&mut batch, bufs);
    batch.segs.clear();
    batch
        .entries
        .into_iter()
        .map(|e| {
            assert!(e.reply.consumed <= e.len_bytes, "service consumed more than its input");
            e.reply
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffers::HeapBuffers;
    use crate::echo::HttpEcho;

    #[test]
    fn truncate_returns_to_the_mark() {
        let mut out = Output::new();
        out.push_bytes(b"+OK\r\n");
        let mark = out.mark();
        out.push_bytes(b"$5\r\n"); // merged into the first inline part
        out.push_buf(3, 10, 5);
        out.push_bytes(b"\r\n");
        assert_eq!(out.parts().len(), 3);
        out.truncate(mark);
        assert_eq!(out.parts(), &[Part::Inline { start: 0, len: 5 }]);
        assert_eq!(out.len_bytes(), 5);
        out.push_bytes(b"-ERR x\r\n");
        let bufs = HeapBuffers::new(1, 64);
        assert_eq!(out.to_vec(&bufs), b"+OK\r\n-ERR x\r\n");
        let empty = Output::new();
        let at_start = empty.mark();
        out.truncate(Output::new().mark());
        assert!(out.is_empty());
        assert_eq!(at_start, empty.mark());
    }

    #[test]
    fn drive_runs_a_service_without_sockets() {
        let mut bufs = HeapBuffers::new(2, 64);
        let mut echo = HttpEcho::default();
        let req = b"POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\n";
        let segs = [Segment { buf: 0, offset: 0, bytes: &req[..30] }, Segment { buf: 1, offset: 0, bytes: &req[30..] }];
        let input = Input { conn: ConnId { slot: 0, generation: 0 }, listener: 0, peer_loopback: true, segments: &segs, peer_closed: false, unsent_bytes: 0, addrs: ConnAddrs::default() };
        let replies = drive(&mut echo, &mut bufs, &[input]);
        // The POST is answered (its body named zero-copy), the partial GET left unconsumed.
        assert_eq!(replies[0].consumed, 44);
        assert!(!replies[0].close);
        assert!(replies[0].output.parts().iter().any(|p| matches!(p, Part::Buf { .. })));
    }
}
