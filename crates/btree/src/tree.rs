//! [`BTree`]: a copy-on-write (shadow-paging) B+tree over a [`Media`].
//!
//! An update never writes a node that the durable root reaches. It reads
//! the path from the root to the leaf, builds new copies of every node on
//! it (splitting, merging or rebalancing on the way up) in *free* nodes,
//! makes them durable with one drain, and only then switches the 8 B root
//! word with one failure-atomic persisted store. The replaced nodes return
//! to the free list after the switch.
//!
//! Invariants (checked by [`BTree::verify`]):
//! - keys are strictly increasing in every node and lie within the bounds
//!   their parents' keys give; every leaf is at level 0 and every child is
//!   one level below its parent, so all leaves are at the same depth;
//! - every non-root node holds between `MIN_FILL` and `NODE_CAPACITY`
//!   bytes of slots + entries; an internal root has at least two children;
//! - every node is reached from the root exactly once, or is on the free
//!   list (exactly once), never both: the free list is rebuilt from
//!   reachability by `open`, so no crash leaks or double-allocates a node;
//! - between operations the volatile `root`/`height` equal the root word,
//!   and every node reachable from it is durable.
//!
//! [`BTree::apply_batch`] applies many operations with one root switch:
//! nodes written within the batch live in a volatile overlay (the durable
//! root cannot reach them, so later operations of the batch modify them in
//! place, and a node the batch replaces again goes straight back to the
//! free list); at the end every overlay node is written once, one drain,
//! one root switch. During a batch `root`/`height` are the working tree's;
//! the durable root is kept in the batch state until the switch. Sorted
//! runs of a batch take the leaf-by-leaf path of `sorted.rs`.

use std::collections::{BTreeMap, BTreeSet};

use pmem::Media;

use crate::error::{BatchError, CreateError, DeleteError, InsertError, LookupError, OpenError};
use crate::format::{
    self, expand, fill_of, pack, pack_parts, split_point, EntryRef, NodeRef, Part, Payload, HEADER_BLOCK_BYTES,
    MAX_HEIGHT, MAX_KEY_BYTES, MAX_VALUE_BYTES, MIN_FILL, NODE_BYTES, NODE_CAPACITY, NODE_HEADER_BYTES, ROOT_WORD_AT,
};
use crate::value::Value;

mod sorted;

/// The fewest nodes `create` accepts.
pub const MIN_NODES: u32 = 8;

/// Planted bugs for the crash checker's canaries (tests only).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Switch the root in the same fence as the new nodes (no drain between).
    pub root_before_nodes: bool,
    /// Store new nodes with cached stores and never flush them.
    pub skip_node_flush: bool,
    /// Return replaced nodes to the free list at once, before the switch.
    pub reuse_before_switch: bool,
    /// `open` frees every node but the root instead of walking the tree.
    pub forget_reachability: bool,
}

/// How often the structure-changing paths ran (volatile; for tests and checks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Nodes split in two.
    pub splits: u64,
    /// Underfull nodes merged with a sibling.
    pub merges: u64,
    /// Underfull nodes rebalanced with a sibling (bytes moved, no merge).
    pub rebalances: u64,
    /// Times the root was split (the tree grew a level).
    pub root_splits: u64,
    /// Times a one-child root was removed (the tree shrank a level).
    pub root_collapses: u64,
    /// Batch updates written into a node the batch had already written
    /// (same-length value replaced in place; no new path).
    pub in_place_updates: u64,
    /// Leaves a batch's sorted path rewrote once for all the operations
    /// that fall within them (see [`BTree::apply_batch`]).
    pub leaf_groups: u64,
    /// Groups of operations the sorted path handed to the per-operation
    /// path (a leaf left underfull, too few free nodes for its worst case).
    pub group_fallbacks: u64,
    /// Leaves the sorted path wrote to the media at once (a single sorted
    /// batch with free nodes to spare), not through the overlay.
    pub early_leaves: u64,
}

/// A node written by this operation, as its parent sees it.
struct Piece {
    node: u32,
    /// The separator key for this piece (`None` for the first piece: the
    /// parent keeps the key it had).
    sep: Option<Vec<u8>>,
    fill: usize,
    count: usize,
    level: u32,
    first_child: u32,
}

#[derive(Clone, Copy)]
enum Op<'a> {
    Insert { key: &'a [u8], value: &'a [u8] },
    Delete { key: &'a [u8] },
}

impl<'a> Op<'a> {
    fn key(&self) -> &'a [u8] {
        match *self {
            Op::Insert { key, .. } | Op::Delete { key } => key,
        }
    }
}

#[derive(Default)]
struct OpState {
    /// Nodes the durable root reaches that this operation replaces.
    retired: Vec<u32>,
    /// The key's value before the operation.
    previous: Option<Value>,
}

type NodeBuf = Box<[u8; NODE_BYTES]>;

/// One operation of [`BTree::apply_batch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchOp<'a> {
    /// Insert or update `key → value`.
    Put {
        /// The key (≤ 255 B).
        key: &'a [u8],
        /// The value (≤ 256 B).
        value: &'a [u8],
    },
    /// Remove `key` (nothing if absent).
    Delete {
        /// The key.
        key: &'a [u8],
    },
}

impl<'a> BatchOp<'a> {
    /// The operation's key.
    pub fn key(&self) -> &'a [u8] {
        match *self {
            BatchOp::Put { key, .. } | BatchOp::Delete { key } => key,
        }
    }
}

/// The state of a batch in progress (volatile).
#[derive(Default)]
struct Batch {
    /// Nodes written by this batch, not yet on the media, by index.
    overlay: BTreeMap<u32, NodeBuf>,
    /// Durable nodes the batch replaced: free after the root switch.
    retired: Vec<u32>,
    /// Whether the sorted path writes leaves to the media at once (see
    /// `early_writes_safe`).
    early: bool,
    /// Leaves written to the media at once by this batch (free nodes the
    /// durable root cannot reach; durable at the batch's drain).
    written: BTreeSet<u32>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Batch({} new nodes, {} retired)", self.overlay.len(), self.retired.len())
    }
}

/// Node buffers kept for reuse: a batch's overlay returns its buffers
/// here, so the next batch of a similar size allocates (and zeroes, and
/// page-faults in) none. At most 16 MB of DRAM per tree.
const SCRATCH_BUFFERS: usize = 4096;

/// Reusable node buffers (volatile; contents meaningless between uses).
#[derive(Default)]
struct Scratch(Vec<NodeBuf>);

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scratch({} buffers)", self.0.len())
    }
}

/// A persistent B+tree from byte-string keys (≤ 255 B) to [`Value`]s
/// (≤ 256 B). See the module docs for the protocol and invariants.
#[derive(Debug)]
pub struct BTree {
    base: u64,
    node_count: u32,
    root: u32,
    /// Levels: 1 when the root is a leaf.
    height: u32,
    len: u64,
    /// Free nodes; `pop` takes the next to use.
    free: Vec<u32>,
    faults: Faults,
    counters: Counters,
    scratch: Scratch,
    /// Reusable state of the batch's sorted path.
    run: sorted::RunScratch,
    /// `Some` while `apply_batch` runs.
    batch: Option<Batch>,
}

impl BTree {
    /// Media bytes a tree of `nodes` nodes needs at `base`.
    pub fn required_size(nodes: u32) -> u64 {
        HEADER_BLOCK_BYTES + nodes as u64 * NODE_BYTES as u64
    }

    /// The most nodes a tree at `base` can have in `media_bytes`.
    pub fn nodes_for(media_bytes: u64, base: u64) -> u32 {
        let room = media_bytes.saturating_sub(base).saturating_sub(HEADER_BLOCK_BYTES);
        (room / NODE_BYTES as u64).min(u32::MAX as u64) as u32
    }

    /// Formats an empty tree of `nodes` nodes at `base` (a multiple of 256).
    pub fn create<M: Media>(media: &mut M, base: u64, nodes: u32) -> Result<BTree, CreateError> {
        BTree::create_with_faults(media, base, nodes, Faults::default())
    }

    /// `create` with planted bugs (tests only).
    #[doc(hidden)]
    pub fn create_with_faults<M: Media>(
        media: &mut M,
        base: u64,
        nodes: u32,
        faults: Faults,
    ) -> Result<BTree, CreateError> {
        if !base.is_multiple_of(format::BASE_ALIGN) {
            return Err(CreateError::Misaligned { base });
        }
        if nodes < MIN_NODES {
            return Err(CreateError::TooFewNodes { nodes: nodes as u64, min: MIN_NODES as u64 });
        }
        let needed = BTree::required_size(nodes);
        if base.checked_add(needed).is_none_or(|end| end > media.len()) {
            return Err(CreateError::MediaTooSmall { needed, base, have: media.len() });
        }
        // Invalidate an older tree's header first: a crash during create
        // leaves no tree rather than an old header over new nodes.
        media.persist_u64(base, 0);
        let mut buf = [0u8; NODE_BYTES];
        let used = pack(0, &[], &mut buf);
        let at = BTree::node_offset_in(base, 0);
        media.memcpy_persist(at, &buf[..used]);
        media.persist_u64(base + ROOT_WORD_AT, format::root_word(0, 1));
        let line = format::header_line(nodes);
        media.write(base, &line);
        media.persist(base, line.len() as u64);
        let free = (1..nodes).rev().collect();
        let (counters, scratch, run) = (Counters::default(), Scratch::default(), sorted::RunScratch::default());
        Ok(BTree {
            base,
            node_count: nodes,
            root: 0,
            height: 1,
            len: 0,
            free,
            faults,
            counters,
            scratch,
            run,
            batch: None,
        })
    }

    /// Recovers the tree at `base`: reads the root word, walks every
    /// reachable node (checking its CRC, layout and level, and that no
    /// node is reached twice), counts the entries and rebuilds the free
    /// list from what was not reached.
    pub fn open<M: Media>(media: &M, base: u64) -> Result<BTree, OpenError> {
        BTree::open_with_faults(media, base, Faults::default())
    }

    /// `open` with planted bugs (tests only).
    #[doc(hidden)]
    pub fn open_with_faults<M: Media>(media: &M, base: u64, faults: Faults) -> Result<BTree, OpenError> {
        let node_count = format::read_header(media, base)?;
        if node_count < MIN_NODES {
            return Err(OpenError::BadConfig { why: format!("{node_count} nodes") });
        }
        if base.checked_add(BTree::required_size(node_count)).is_none_or(|end| end > media.len()) {
            return Err(OpenError::MediaTooSmall { base, have: media.len() });
        }
        let word = media.read_u64(base + ROOT_WORD_AT);
        let (root, height) = format::decode_root(word).ok_or(OpenError::BadRoot { word })?;
        if root >= node_count {
            return Err(OpenError::BadRoot { word });
        }
        let mut tree = BTree {
            base,
            node_count,
            root,
            height,
            len: 0,
            free: Vec::new(),
            faults,
            counters: Counters::default(),
            scratch: Scratch::default(),
            run: sorted::RunScratch::default(),
            batch: None,
        };
        let reached = tree.walk(media)?;
        tree.free = (0..node_count).rev().filter(|&n| !reached[n as usize]).collect();
        if faults.forget_reachability {
            tree.free = (0..node_count).rev().filter(|&n| n != root).collect();
        }
        Ok(tree)
    }

    /// Visits every node reachable from the root; returns which were reached.
    fn walk<M: Media>(&mut self, media: &M) -> Result<Vec<bool>, OpenError> {
        let mut reached = vec![false; self.node_count as usize];
        let mut stack = vec![(self.root, self.height - 1)];
        let mut buf: NodeBuf = Box::new([0; NODE_BYTES]);
        while let Some((node, level)) = stack.pop() {
            let corrupt = |why: String| OpenError::Corrupt { node, why };
            if node >= self.node_count {
                return Err(corrupt(format!("index beyond {} nodes", self.node_count)));
            }
            if std::mem::replace(&mut reached[node as usize], true) {
                return Err(corrupt("reached twice".into()));
            }
            self.read_node(media, node, &mut buf);
            let view = NodeRef::new(&buf[..]);
            view.validate().map_err(corrupt)?;
            if view.level() != level {
                return Err(corrupt(format!("level {}, expected {level}", view.level())));
            }
            if view.is_leaf() {
                self.len += view.count() as u64;
            } else {
                if view.count() == 0 {
                    return Err(corrupt("internal node without children".into()));
                }
                stack.extend((0..view.count()).map(|i| (view.child(i), level - 1)));
            }
        }
        Ok(reached)
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the tree holds no key.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Levels of nodes (1 when the root is a leaf).
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Nodes in the tree's node area.
    pub fn node_count(&self) -> u32 {
        self.node_count
    }

    /// Nodes on the free list.
    pub fn free_nodes(&self) -> usize {
        self.free.len()
    }

    /// Where the tree starts in its media.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// How often splits, merges and rebalances ran since create/open.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The free list (for the checker).
    pub(crate) fn free_list(&self) -> &[u32] {
        &self.free
    }

    /// The root node and height (for iterators and the checker).
    pub(crate) fn root(&self) -> (u32, u32) {
        (self.root, self.height)
    }

    /// Media offset of node `node`.
    pub fn node_offset(&self, node: u32) -> u64 {
        assert!(node < self.node_count, "node {node} beyond {}", self.node_count);
        BTree::node_offset_in(self.base, node)
    }

    fn node_offset_in(base: u64, node: u32) -> u64 {
        base + HEADER_BLOCK_BYTES + node as u64 * NODE_BYTES as u64
    }

    /// Reads node `node`'s used bytes into `buf` (the rest is stale).
    /// A `used` field out of range reads the whole node; `validate` rejects it.
    pub(crate) fn read_node<M: Media>(&self, media: &M, node: u32, buf: &mut [u8; NODE_BYTES]) {
        let at = self.node_offset(node);
        media.read(at, &mut buf[..NODE_HEADER_BYTES]);
        let used = format::get_u16(&buf[..], 4) as usize;
        let used = if (NODE_HEADER_BYTES..=NODE_BYTES).contains(&used) { used } else { NODE_BYTES };
        media.read(at + NODE_HEADER_BYTES as u64, &mut buf[NODE_HEADER_BYTES..used]);
    }

    fn load<M: Media>(&mut self, media: &M, node: u32, level: u32) -> NodeBuf {
        let mut buf = self.take_buf();
        match self.batch.as_ref().and_then(|b| b.overlay.get(&node)) {
            Some(fresh) => buf.copy_from_slice(&fresh[..]),
            None => self.read_node(media, node, &mut buf),
        }
        let view = NodeRef::new(&buf[..]);
        assert_eq!(view.level(), level, "node {node} at the wrong level");
        assert!(view.used() <= NODE_BYTES, "node {node} overflows");
        buf
    }

    /// The value stored under `key`.
    pub fn get<M: Media>(&self, media: &M, key: &[u8]) -> Result<Option<Value>, LookupError> {
        if key.len() > MAX_KEY_BYTES {
            return Err(LookupError::KeyTooLong { len: key.len(), max: MAX_KEY_BYTES });
        }
        let mut buf = [0u8; NODE_BYTES];
        let mut node = self.root;
        for level in (0..self.height).rev() {
            self.read_node(media, node, &mut buf);
            let view = NodeRef::new(&buf);
            assert_eq!(view.level(), level, "node {node} at the wrong level");
            if view.is_leaf() {
                return Ok(view.search_leaf(key).ok().map(|i| Value::new(view.value(i)).expect("value fits")));
            }
            node = view.child(view.search_internal(key));
        }
        unreachable!("the tree's height ends at a leaf")
    }

    /// Inserts or updates `key → value`, durably; returns the previous
    /// value. When this returns, the change survives any crash.
    pub fn insert<M: Media>(&mut self, media: &mut M, key: &[u8], value: &[u8]) -> Result<Option<Value>, InsertError> {
        if key.len() > MAX_KEY_BYTES {
            return Err(InsertError::KeyTooLong { len: key.len(), max: MAX_KEY_BYTES });
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(InsertError::ValueTooLong { len: value.len(), max: MAX_VALUE_BYTES });
        }
        let needed = self.nodes_needed();
        if self.free.len() < needed {
            return Err(InsertError::Full { needed, free: self.free.len() });
        }
        let previous = self.apply(media, Op::Insert { key, value });
        self.len += previous.is_none() as u64;
        Ok(previous)
    }

    /// Removes `key`, durably; returns its value (`None`, and nothing
    /// written, if it was absent).
    pub fn delete<M: Media>(&mut self, media: &mut M, key: &[u8]) -> Result<Option<Value>, DeleteError> {
        if key.len() > MAX_KEY_BYTES {
            return Err(DeleteError::KeyTooLong { len: key.len(), max: MAX_KEY_BYTES });
        }
        let needed = self.nodes_needed();
        if self.free.len() < needed {
            return Err(DeleteError::Full { needed, free: self.free.len() });
        }
        let previous = self.apply(media, Op::Delete { key });
        self.len -= previous.is_some() as u64;
        Ok(previous)
    }

    /// The worst case of one operation: two new nodes per level (a split,
    /// or a merged/rebalanced pair) and a new root.
    fn nodes_needed(&self) -> usize {
        2 * self.height as usize + 1
    }

    /// Copies the path, then commits: drain, switch the root, free the old path.
    fn apply<M: Media>(&mut self, media: &mut M, op: Op) -> Option<Value> {
        let mut state = OpState::default();
        let free_before = self.free.len();
        let pieces = self.modify(media, self.root, self.height - 1, op, &mut state)?;
        let (mut root, mut height) = (pieces[0].node, self.height);
        if pieces.len() == 2 {
            let sep = pieces[1].sep.as_deref().expect("a split piece has a separator");
            let entries = [
                EntryRef { key: b"", payload: Payload::Child(pieces[0].node) },
                EntryRef { key: sep, payload: Payload::Child(pieces[1].node) },
            ];
            root = self.write_node(media, self.height, &entries, None).node;
            height += 1;
            self.counters.root_splits += 1;
        } else if pieces[0].level > 0 && pieces[0].count == 1 {
            // A root with one child: the child becomes the root. The
            // one-child node was never reachable, so it is free at once.
            self.free_fresh(root);
            root = pieces[0].first_child;
            height -= 1;
            self.counters.root_collapses += 1;
        }
        assert!(height >= 1, "height {height}");
        assert!(height <= MAX_HEIGHT, "height {height}");
        assert!(
            free_before.saturating_sub(self.free.len()) <= self.nodes_needed(),
            "operation used more nodes than reserved"
        );
        match self.batch.as_mut() {
            Some(batch) => {
                batch.retired.append(&mut state.retired);
                self.root = root;
                self.height = height;
            }
            None => {
                self.commit(media, root, height);
                self.free.append(&mut state.retired);
            }
        }
        state.previous
    }

    /// Makes the new nodes durable, then switches the root word.
    fn commit<M: Media>(&mut self, media: &mut M, root: u32, height: u32) {
        let word = format::root_word(root, height);
        if !self.faults.root_before_nodes {
            media.drain();
        }
        media.persist_u64(self.base + ROOT_WORD_AT, word);
        self.root = root;
        self.height = height;
    }

    /// Copies the subtree path under `node` with `op` applied; `None` if
    /// nothing changes (a delete of an absent key).
    fn modify<M: Media>(
        &mut self,
        media: &mut M,
        node: u32,
        level: u32,
        op: Op,
        state: &mut OpState,
    ) -> Option<Vec<Piece>> {
        if level == 0 {
            if let Some(previous) = self.update_fresh_leaf(node, op) {
                self.counters.in_place_updates += 1;
                state.previous = Some(previous);
                return Some(vec![self.unchanged_piece(node)]);
            }
            let buf = self.load(media, node, level);
            let view = NodeRef::new(&buf[..]);
            let count = view.count();
            let found = view.search_leaf(op.key());
            if let Ok(i) = found {
                state.previous = Some(Value::new(view.value(i)).expect("value fits"));
            }
            let parts = match (op, found) {
                (Op::Insert { key, value }, found) => {
                    let (before, after) = found.map_or_else(|i| (i, i), |i| (i, i + 1));
                    let entry = EntryRef { key, payload: Payload::Value(value) };
                    vec![Part::Run(view, 0..before), Part::One(entry), Part::Run(view, after..count)]
                }
                (Op::Delete { .. }, Ok(i)) => {
                    vec![Part::Run(view, 0..i), Part::Run(view, i + 1..count)]
                }
                (Op::Delete { .. }, Err(_)) => return None,
            };
            self.retire(node, state);
            let pieces = self.write_parts(media, 0, &parts);
            drop(parts);
            self.give_buf(buf);
            return Some(pieces);
        }
        // Route without copying a node this batch already wrote; the
        // recursion below never changes this node's bytes.
        let (loaded, slot, child) = match self.fresh(node) {
            Some(bytes) => {
                let view = NodeRef::new(&bytes[..]);
                let slot = view.search_internal(op.key());
                (None, slot, view.child(slot))
            }
            None => {
                let buf = self.load(media, node, level);
                let view = NodeRef::new(&buf[..]);
                let slot = view.search_internal(op.key());
                let child = view.child(slot);
                (Some(buf), slot, child)
            }
        };
        let pieces = self.modify(media, child, level - 1, op, state)?;
        if loaded.is_none() && pieces.len() == 1 && pieces[0].node == child && pieces[0].fill >= MIN_FILL {
            // The child was rewritten in place (a node of this batch keeps
            // its index): this node, also the batch's, needs no new copy.
            return Some(vec![self.unchanged_piece(node)]);
        }
        let buf = match loaded {
            Some(buf) => buf,
            None => self.load(media, node, level),
        };
        let view = NodeRef::new(&buf[..]);
        let count = view.count();
        self.retire(node, state);
        let (first, last, pieces) = if pieces.len() == 1 && pieces[0].fill < MIN_FILL {
            assert!(count >= 2, "an internal node with one child");
            let sibling = if slot + 1 < count { slot + 1 } else { slot - 1 };
            let pair = self.rejoin(media, &view, slot, sibling, &pieces[0], state);
            (slot.min(sibling), slot.max(sibling), pair)
        } else {
            (slot, slot, pieces)
        };
        let mut parts = vec![Part::Run(view, 0..first)];
        for (k, piece) in pieces.iter().enumerate() {
            let key =
                if k == 0 { view.key(first) } else { piece.sep.as_deref().expect("a split piece has a separator") };
            parts.push(Part::One(EntryRef { key, payload: Payload::Child(piece.node) }));
        }
        parts.push(Part::Run(view, last + 1..count));
        let written = self.write_parts(media, level, &parts);
        drop(parts);
        self.give_buf(buf);
        Some(written)
    }

    /// During a batch: the bytes of `node` if the batch wrote it (it is in
    /// the overlay, reachable from nothing durable).
    fn fresh(&self, node: u32) -> Option<&NodeBuf> {
        self.batch.as_ref().and_then(|b| b.overlay.get(&node))
    }

    /// `node`, written by this batch and left as it is, as its parent sees it.
    fn unchanged_piece(&self, node: u32) -> Piece {
        let view = NodeRef::new(&self.fresh(node).expect("an overlay node")[..]);
        let first_child = if view.is_leaf() || view.count() == 0 { u32::MAX } else { view.child(0) };
        Piece { node, sep: None, fill: view.fill(), count: view.count(), level: view.level(), first_child }
    }

    /// During a batch, an insert that replaces a value of the same length
    /// in a leaf the batch already wrote: overwrites the value's bytes in
    /// the overlay copy (no new node, so no new path; the node's CRC is
    /// resealed when the batch writes it out); returns the old value.
    /// `None` (nothing done) in any other case.
    fn update_fresh_leaf(&mut self, node: u32, op: Op) -> Option<Value> {
        let Op::Insert { key, value } = op else { return None };
        let bytes = self.batch.as_mut()?.overlay.get_mut(&node)?;
        let view = NodeRef::new(&bytes[..]);
        assert!(view.is_leaf(), "node {node} is not a leaf");
        let index = view.search_leaf(key).ok()?;
        let range = view.value_range(index);
        if range.len() != value.len() {
            return None;
        }
        let previous = Value::new(&bytes[range.clone()]).expect("value fits");
        // The CRC is resealed once, when the batch writes its nodes out.
        bytes[range].copy_from_slice(value);
        Some(previous)
    }

    /// Joins the underfull `piece` (the new copy of child `slot` of
    /// `parent`) with child `sibling`: one merged node if they fit, else
    /// two rebalanced ones.
    fn rejoin<M: Media>(
        &mut self,
        media: &mut M,
        parent: &NodeRef,
        slot: usize,
        sibling: usize,
        piece: &Piece,
        state: &mut OpState,
    ) -> Vec<Piece> {
        let level = piece.level;
        let own_buf = self.load(media, piece.node, level);
        // The piece was written by this operation and is reachable from
        // nothing durable: it can be reused at once.
        self.free_fresh(piece.node);
        let other_node = parent.child(sibling);
        let other_buf = self.load(media, other_node, level);
        self.retire(other_node, state);
        let (own, other) = (NodeRef::new(&own_buf[..]), NodeRef::new(&other_buf[..]));
        let (left, right, right_slot) = if slot < sibling { (own, other, sibling) } else { (other, own, slot) };
        let mut parts = vec![Part::Run(left, 0..left.count())];
        if level > 0 {
            // The right node's −∞ entry takes the parent's separator.
            let entry = EntryRef { key: parent.key(right_slot), payload: right.entry(0).payload };
            parts.extend([Part::One(entry), Part::Run(right, 1..right.count())]);
        } else {
            parts.push(Part::Run(right, 0..right.count()));
        }
        let pair = self.write_parts(media, level, &parts);
        if pair.len() == 1 {
            self.counters.merges += 1;
        } else {
            self.counters.rebalances += 1;
            self.counters.splits -= 1;
        }
        drop(parts);
        self.give_buf(own_buf);
        self.give_buf(other_buf);
        pair
    }

    /// Writes `parts` as one node (the common case: runs copied whole), or
    /// as two of about half the bytes each.
    fn write_parts<M: Media>(&mut self, media: &mut M, level: u32, parts: &[Part]) -> Vec<Piece> {
        if parts.iter().map(Part::size).sum::<usize>() <= NODE_CAPACITY {
            let mut buf = self.take_buf();
            let used = pack_parts(level, parts, &mut buf);
            let piece = self.store(media, level, &buf[..used], None);
            self.give_buf(buf);
            return vec![piece];
        }
        let entries = expand(parts);
        let cut = split_point(&entries).expect("entries that overflow a node split");
        self.counters.splits += 1;
        let sep = entries[cut].key.to_vec();
        assert!(!sep.is_empty() || level == 0, "an internal separator is never −∞");
        let left = self.write_node(media, level, &entries[..cut], None);
        let right = self.write_node(media, level, &entries[cut..], Some(sep));
        vec![left, right]
    }

    /// Packs `entries` into a fresh node and stores it.
    fn write_node<M: Media>(&mut self, media: &mut M, level: u32, entries: &[EntryRef], sep: Option<Vec<u8>>) -> Piece {
        let mut buf = self.take_buf();
        let used = pack(level, entries, &mut buf);
        let stripped = if level > 0 { entries[0].key.len() } else { 0 };
        assert_eq!(used - NODE_HEADER_BYTES, fill_of(entries) - stripped, "packed size");
        let piece = self.store(media, level, &buf[..used], sep);
        self.give_buf(buf);
        piece
    }

    /// Stores packed node `bytes` in a free node (durable at the next drain).
    fn store<M: Media>(&mut self, media: &mut M, level: u32, bytes: &[u8], sep: Option<Vec<u8>>) -> Piece {
        let node = self.free.pop().expect("free nodes reserved before the operation");
        let view = NodeRef::new(bytes);
        assert_eq!(view.used(), bytes.len(), "packed size");
        assert!(bytes.len() <= NODE_BYTES, "node overflow");
        assert_eq!(view.level(), level, "packed level");
        if let Some(batch) = self.batch.as_mut() {
            let mut fresh = self.scratch.0.pop().unwrap_or_else(|| Box::new([0; NODE_BYTES]));
            fresh[..bytes.len()].copy_from_slice(bytes);
            if let Some(old) = batch.overlay.insert(node, fresh) {
                self.give_buf(old);
            }
        } else {
            self.write_out(media, node, bytes);
        }
        let first_child = if view.is_leaf() || view.count() == 0 { u32::MAX } else { view.child(0) };
        Piece { node, sep, fill: view.fill(), count: view.count(), level, first_child }
    }

    fn take_buf(&mut self) -> NodeBuf {
        self.scratch.0.pop().unwrap_or_else(|| Box::new([0; NODE_BYTES]))
    }

    fn give_buf(&mut self, buf: NodeBuf) {
        if self.scratch.0.len() < SCRATCH_BUFFERS {
            self.scratch.0.push(buf);
        }
    }

    /// Stores node bytes on the media (durable at the next drain).
    fn write_out<M: Media>(&self, media: &mut M, node: u32, bytes: &[u8]) {
        let at = self.node_offset(node);
        if self.faults.skip_node_flush {
            media.write(at, bytes);
        } else {
            media.memcpy_nodrain(at, bytes);
        }
    }

    /// Frees `node`, written by the operation (or batch) in progress and
    /// reachable from nothing durable.
    fn free_fresh(&mut self, node: u32) {
        if let Some(old) = self.batch.as_mut().and_then(|b| b.overlay.remove(&node)) {
            self.give_buf(old);
        }
        self.free.push(node);
    }

    /// Notes that `node` is replaced: a durable node is retired until the
    /// root switch; a node the current batch wrote is free at once.
    fn retire(&mut self, node: u32, state: &mut OpState) {
        if self.batch.as_ref().is_some_and(|b| b.overlay.contains_key(&node)) {
            self.free_fresh(node);
            return;
        }
        if self.batch.as_mut().is_some_and(|b| b.written.remove(&node)) {
            // Written by this batch straight to the media: reachable from
            // nothing durable, so free at once.
            self.free.push(node);
            return;
        }
        if self.faults.reuse_before_switch {
            self.free.push(node);
        } else {
            state.retired.push(node);
        }
    }
}

impl BTree {
    /// Applies `ops` in order (after removing every key first, if `clear`)
    /// with **one** root switch: two drains for the whole batch, and every
    /// node the batch touches written once. Returns each operation's
    /// previous value *in the working tree* (so a key repeated within the
    /// batch sees its earlier value). All or nothing: on an error nothing
    /// was written and the tree is as it was. When this returns `Ok`, the
    /// batch survives any crash; a crash during it leaves the old tree or
    /// the new one.
    ///
    /// Any operations are accepted, in any order. Each maximal run of
    /// operations with strictly increasing keys (a checkpoint's whole
    /// batch, for one) takes the *sorted path*: one descent per leaf, every
    /// operation within the leaf's key bounds merged into it in one pass
    /// (one new copy of the leaf, or several if it splits, parents split in
    /// turn), its parents copied once per batch and patched in place after.
    /// A leaf group that would leave a leaf underfull (a merge) or whose
    /// worst case exceeds the free nodes is applied operation by operation
    /// instead, as [`BTree::insert`] would, within the batch. A batch that
    /// is one sorted run, on a tree with free nodes to spare, writes its
    /// new leaves to the media as it makes them (`Full` is then impossible,
    /// so "nothing written" still holds).
    pub fn apply_batch<M: Media>(
        &mut self,
        media: &mut M,
        clear: bool,
        ops: &[BatchOp],
    ) -> Result<Vec<Option<Value>>, BatchError> {
        self.apply_batch_with(media, clear, ops, false)
    }

    /// `apply_batch` with every operation on the per-operation path (the
    /// code before the sorted path; for comparisons in tests and benches).
    #[doc(hidden)]
    pub fn apply_batch_per_op<M: Media>(
        &mut self,
        media: &mut M,
        clear: bool,
        ops: &[BatchOp],
    ) -> Result<Vec<Option<Value>>, BatchError> {
        self.apply_batch_with(media, clear, ops, true)
    }

    fn apply_batch_with<M: Media>(
        &mut self,
        media: &mut M,
        clear: bool,
        ops: &[BatchOp],
        per_op: bool,
    ) -> Result<Vec<Option<Value>>, BatchError> {
        assert!(self.batch.is_none(), "batches do not nest");
        check_batch(ops)?;
        let saved = (self.root, self.height, self.len, self.free.clone());
        self.batch = Some(Batch::default());
        let result = self.run_batch(media, clear, ops, per_op);
        let batch = self.batch.take().expect("batch state");
        let previous = match result {
            Ok(previous) => previous,
            Err(error) => {
                // `early_writes_safe` ruled out an error before any leaf went to the media.
                assert!(!batch.early, "a batch that writes leaves early was refused: {error}");
                (self.root, self.height, self.len, self.free) = saved;
                return Err(error);
            }
        };
        if batch.overlay.is_empty() && batch.retired.is_empty() && batch.written.is_empty() {
            assert_eq!((self.root, self.height), (saved.0, saved.1), "a batch that wrote nothing kept its root");
            return Ok(previous);
        }
        let mut batch = batch;
        for (&node, bytes) in batch.overlay.iter_mut() {
            let used = NodeRef::new(&bytes[..]).used();
            assert!((NODE_HEADER_BYTES..=NODE_BYTES).contains(&used), "overlay node {node} used {used}");
            // In-place updates left the CRC stale.
            let crc = format::node_crc(&bytes[..used]);
            format::put_u32(&mut bytes[..], 8, crc);
            self.write_out(media, node, &bytes[..used]);
        }
        self.commit(media, self.root, self.height);
        let Batch { overlay, mut retired, .. } = batch;
        overlay.into_values().for_each(|buf| self.give_buf(buf));
        self.free.append(&mut retired);
        Ok(previous)
    }

    fn run_batch<M: Media>(
        &mut self,
        media: &mut M,
        clear: bool,
        ops: &[BatchOp],
        per_op: bool,
    ) -> Result<Vec<Option<Value>>, BatchError> {
        if clear {
            if self.free.is_empty() {
                return Err(BatchError::Full { index: 0, needed: 1, free: 0 });
            }
            self.clear_in_batch(media);
        }
        let mut previous = Vec::with_capacity(ops.len());
        if per_op {
            self.apply_per_op(media, ops, 0, &mut previous)?;
            return Ok(previous);
        }
        let mut start = 0;
        while start < ops.len() {
            let increasing = ops[start..].windows(2).take_while(|w| w[0].key() < w[1].key()).count();
            let end = start + 1 + increasing;
            if start == 0 && end == ops.len() {
                self.batch.as_mut().expect("in a batch").early = self.early_writes_safe(ops);
            }
            self.apply_sorted(media, &ops[start..end], start, &mut previous)?;
            start = end;
        }
        assert_eq!(previous.len(), ops.len(), "one previous value per operation");
        Ok(previous)
    }

    /// Applies `ops` (operation `first` of the batch onwards) one by one,
    /// each as `insert`/`delete` would but within the batch; pushes their
    /// previous values.
    fn apply_per_op<M: Media>(
        &mut self,
        media: &mut M,
        ops: &[BatchOp],
        first: usize,
        previous: &mut Vec<Option<Value>>,
    ) -> Result<(), BatchError> {
        for (offset, op) in ops.iter().enumerate() {
            let needed = self.nodes_needed();
            if self.free.len() < needed {
                return Err(BatchError::Full { index: first + offset, needed, free: self.free.len() });
            }
            let value = match *op {
                BatchOp::Put { key, value } => {
                    let old = self.apply(media, Op::Insert { key, value });
                    self.len += old.is_none() as u64;
                    old
                }
                BatchOp::Delete { key } => {
                    let old = self.apply(media, Op::Delete { key });
                    self.len -= old.is_some() as u64;
                    old
                }
            };
            previous.push(value);
        }
        Ok(())
    }

    /// Whether the sorted path may write leaves to the media at once during
    /// a batch of `ops` (one sorted run: each leaf is written once) without
    /// breaking "on `Full` nothing was written": true only if the free
    /// nodes cover everything the batch could ever hold, so that `Full`
    /// cannot happen. A batch holds at most the durable nodes it retires
    /// (≤ `durable`), the nodes of the working tree, and one operation's
    /// transient nodes (≤ `2·MAX_HEIGHT + 1`). Every non-root node is at
    /// least `MIN_FILL` full, a quarter of a node: the leaves hold at most
    /// the durable leaves' bytes (≤ `durable · NODE_CAPACITY`) plus every
    /// put's entry, so there are at most `bytes / MIN_FILL + 1` of them, and
    /// internal nodes (≥ 4 children each, since an internal entry is at
    /// most 262 B) add at most a third of that plus one per level.
    fn early_writes_safe(&self, ops: &[BatchOp]) -> bool {
        let durable = (self.node_count as usize - self.free.len()) as u64;
        let put_bytes: u64 = ops
            .iter()
            .map(|op| match *op {
                BatchOp::Put { key, value } => (2 + 1 + key.len() + 2 + value.len()) as u64,
                BatchOp::Delete { .. } => 0,
            })
            .sum();
        let leaves = (durable * NODE_CAPACITY as u64 + put_bytes) / MIN_FILL as u64 + 1;
        let working = leaves + leaves.div_ceil(3) + MAX_HEIGHT as u64;
        let bound = durable + working + 2 * MAX_HEIGHT as u64 + 1;
        self.free.len() as u64 >= bound
    }

    /// Retires every node of the working tree and starts an empty leaf.
    fn clear_in_batch<M: Media>(&mut self, media: &mut M) {
        let mut stack = vec![(self.root, self.height - 1)];
        let mut state = OpState::default();
        while let Some((node, level)) = stack.pop() {
            if level > 0 {
                let buf = self.load(media, node, level);
                let view = NodeRef::new(&buf[..]);
                stack.extend((0..view.count()).map(|i| (view.child(i), level - 1)));
                self.give_buf(buf);
            }
            self.retire(node, &mut state);
        }
        let mut buf = self.take_buf();
        let used = pack(0, &[], &mut buf);
        let piece = self.store(media, 0, &buf[..used], None);
        self.give_buf(buf);
        let batch = self.batch.as_mut().expect("in a batch");
        batch.retired.append(&mut state.retired);
        (self.root, self.height, self.len) = (piece.node, 1, 0);
    }
}

/// Refuses a batch with a key or value too long, naming the operation.
fn check_batch(ops: &[BatchOp]) -> Result<(), BatchError> {
    for (index, op) in ops.iter().enumerate() {
        let (key, value) = match *op {
            BatchOp::Put { key, value } => (key, value),
            BatchOp::Delete { key } => (key, &[][..]),
        };
        if key.len() > MAX_KEY_BYTES {
            return Err(BatchError::KeyTooLong { index, len: key.len(), max: MAX_KEY_BYTES });
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(BatchError::ValueTooLong { index, len: value.len(), max: MAX_VALUE_BYTES });
        }
    }
    Ok(())
}
