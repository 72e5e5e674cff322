//! Received payloads, and memory an embedder lends a transport to receive
//! one-way messages into.
//!
//! A [`Payload`] is either the transport's own buffer (`Owned`, to hand
//! back with [`Transport::recycle`](crate::Transport::recycle)) or a slice
//! of lent memory (`Lent`): a [`bytes::Bytes`] into an [`RxArea`] the
//! embedder gave through an [`RxArena`]. A replicated member lends its
//! pool's buffers, so a follower's entries arrive where they will be
//! persisted (seed 001's receive into named persistent buffers): a
//! protobuf message parsed from the `Bytes` shares it (no copy), and the
//! member names the values by their place in its pool.
//!
//! Ownership: each area carries an [`AreaHold`]. The arena keeps one
//! clone; the transport holds one while it receives into the area; every
//! `Bytes` sliced from it holds the area's owner, which holds one more.
//! When [`RxArea::in_use`] is false (only the arena's clone is left) no
//! receive is in flight into the area and no payload refers to it: the
//! arena may take its memory back.

use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::Arc;

use bytes::Bytes;

/// A received message's payload bytes. See the module docs.
#[derive(Debug)]
pub enum Payload {
    /// The transport's own buffer.
    Owned(Vec<u8>),
    /// A slice of memory the embedder lent ([`RxArena`]).
    Lent(Bytes),
}

impl Payload {
    /// The bytes as a `Vec` (a copy for lent memory).
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Payload::Owned(v) => v,
            Payload::Lent(b) => b.to_vec(),
        }
    }

    /// Whether the bytes lie in lent memory.
    pub fn is_lent(&self) -> bool {
        matches!(self, Payload::Lent(_))
    }
}

impl Deref for Payload {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Payload::Owned(v) => v,
            Payload::Lent(b) => b,
        }
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Payload {
        Payload::Owned(v)
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        **self == **other
    }
}

impl Eq for Payload {}

/// Counts the users of one lent area (module docs). Carries nothing.
#[derive(Debug, Default)]
pub struct AreaHold(());

/// Contiguous memory lent to a transport to receive into.
pub struct RxArea {
    ptr: NonNull<u8>,
    len: usize,
    hold: Arc<AreaHold>,
}

impl std::fmt::Debug for RxArea {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxArea").field("ptr", &self.ptr).field("len", &self.len).finish()
    }
}

impl RxArea {
    /// Lends `len` bytes at `ptr`, counted by `hold` (the arena keeps a
    /// clone and takes the memory back only once [`RxArea::in_use`] is
    /// false for it).
    ///
    /// # Safety
    ///
    /// `ptr..ptr + len` must be valid for reads and writes, and nothing
    /// else may write it or hand it out while `hold` has another strong
    /// reference than the arena's. Slices of it may be read (through a
    /// `Bytes`) after the transport is dropped, for as long as they live.
    pub unsafe fn new(ptr: NonNull<u8>, len: usize, hold: Arc<AreaHold>) -> RxArea {
        assert!(len > 0, "an empty area");
        RxArea { ptr, len, hold }
    }

    /// Bytes in the area.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the area is empty (never: [`RxArea::new`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Whether anything but the arena's own clone of `hold` is left.
    pub fn in_use(hold: &Arc<AreaHold>) -> bool {
        Arc::strong_count(hold) > 1
    }

    /// The whole area as `Bytes` sharing it; the receiver slices payloads
    /// out of it. Holds the area until every slice is dropped.
    pub fn share(&self) -> Bytes {
        Bytes::from_owner(AreaOwner { ptr: self.ptr, len: self.len, _hold: self.hold.clone() })
    }
}

/// The owner behind an area's `Bytes`.
struct AreaOwner {
    ptr: NonNull<u8>,
    len: usize,
    _hold: Arc<AreaHold>,
}

// SAFETY: the area is plain memory that `RxArea::new`'s caller keeps valid
// and unwritten by others while the hold lives; a received range is never
// written again while a slice of it lives (the transport receives only
// past what it delivered).
unsafe impl Send for AreaOwner {}
// SAFETY: as above; the owner gives out shared slices only.
unsafe impl Sync for AreaOwner {}

impl AsRef<[u8]> for AreaOwner {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `RxArea::new`'s contract.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

/// Memory an embedder lends a transport for one-way messages
/// ([`Transport::lend_rx`](crate::Transport::lend_rx)).
pub trait RxArena {
    /// An area of at least `min` bytes to receive into, or `None`: the
    /// transport then receives into its own memory, and its payloads are
    /// `Owned`.
    fn area(&mut self, min: usize) -> Option<RxArea>;

    /// The transport moved `bytes` of an unfinished frame into a new area
    /// or its own memory (a copy; nothing to do by default).
    fn carried(&mut self, bytes: usize) {
        let _ = bytes;
    }
}
