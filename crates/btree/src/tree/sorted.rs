//! The sorted path of [`BTree::apply_batch`]: a run of operations whose
//! keys strictly increase is applied **leaf by leaf**. One descent from
//! the root finds the leaf of the run's next key and that leaf's upper
//! bound (the nearest separator to its right on the path); every
//! operation below the bound is merged into the leaf in one pass (runs of
//! the old entries copied whole, new entries between them), giving one
//! new copy of the leaf, or several if it overflows.
//!
//! Copy-on-write as on the per-operation path, with the batch's overlay:
//! - a leaf the batch already wrote is rewritten at its own index (the
//!   durable root cannot reach it), so nothing above it changes; a durable
//!   leaf goes to a free node and is retired;
//! - a new child index is patched into its parent (a fixed-width `u32`);
//!   a parent the batch already wrote is patched in place, a durable one
//!   copied once to a free node (and retired), and so on up to the root;
//! - new leaves of a split add their separators to the parent, repacked;
//!   a parent that overflows splits into pieces of about equal fill, and
//!   so on up; a split root gets new roots above it;
//! - a single sorted batch with free nodes to spare writes its leaves to
//!   the media at once (see `BTree::early_writes_safe`); other nodes are
//!   sealed with their CRC once, when the batch writes them out.
//!
//! Invariants: nothing is changed (tree, overlay, free list, counters but
//! `group_fallbacks`) unless the whole group is applied; a group applied
//! here leaves every non-root node within the fill bounds and uses at most
//! the free nodes it checked for (an upper bound computed from the path's
//! fills before anything is written). A group this path does not handle —
//! a non-root leaf left below `MIN_FILL` (it needs a merge), too few free
//! nodes — goes to the per-operation path, which handles every case
//! (merges, rebalances, root collapses).

use pmem::Media;

use super::{BTree, BatchOp, NodeBuf};
use crate::error::BatchError;
use crate::format::{
    self, pack, put_u16, put_u32, EntryRef, NodeRef, Payload, MAX_HEIGHT, MAX_INTERNAL_ENTRY, MIN_FILL, NODE_BYTES,
    NODE_CAPACITY, NODE_HEADER_BYTES,
};
use crate::value::Value;

/// One stretch of a leaf being rebuilt, in key order.
#[derive(Clone, Copy, Debug)]
enum Seg {
    /// The old leaf's entries `start..end`, bytes unchanged.
    Old(u16, u16),
    /// The new entry of the group's put number `.0`.
    New(u32),
}

/// Reusable state of the sorted path (volatile; meaningless between uses).
#[derive(Default)]
pub(super) struct RunScratch {
    /// The internal nodes from the root down to the leaf's parent: node,
    /// the slot taken, and whether the batch wrote the node (overlay).
    path: Vec<(u32, usize, bool)>,
    /// The leaf's exclusive upper key bound, if it has one.
    hi: Vec<u8>,
    /// The leaf's new entries.
    segs: Vec<Seg>,
    /// Per operation of the group: the old entry it replaced or deleted.
    found: Vec<Option<u16>>,
    /// The leaf's new entries one by one, with their sizes (splits only).
    items: Vec<(Seg, usize)>,
    /// One new leaf's entries (splits only).
    piece: Vec<Seg>,
}

impl std::fmt::Debug for RunScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RunScratch(path of {})", self.path.len())
    }
}

/// What a group does to its leaf (nothing written yet).
#[derive(Debug, Default)]
struct Plan {
    /// Bytes of slots + entries of the merged leaf.
    fill: usize,
    /// Entries of the merged leaf.
    count: usize,
    /// Puts of absent keys.
    inserted: u64,
    /// Deletes of present keys.
    deleted: u64,
    /// Whether any operation changes the leaf.
    changed: bool,
    /// Whether every change is a put over a value of the same length.
    same_lengths: bool,
}

/// The new leaves of a group (packed, CRC not yet set): the first, then
/// the others of a split with their separators.
struct Pieces {
    first: NodeBuf,
    rest: Vec<(Vec<u8>, NodeBuf)>,
}

impl BTree {
    /// Applies `ops` (keys strictly increasing; operation `first` of the
    /// batch onwards) leaf by leaf; pushes their previous values.
    pub(super) fn apply_sorted<M: Media>(
        &mut self,
        media: &mut M,
        ops: &[BatchOp],
        first: usize,
        previous: &mut Vec<Option<Value>>,
    ) -> Result<(), BatchError> {
        let mut start = 0;
        while start < ops.len() {
            let (leaf, end) = self.descend(media, ops, start);
            assert!(end > start, "a group holds its first operation");
            if !self.apply_group(media, leaf, &ops[start..end], previous) {
                self.counters.group_fallbacks += 1;
                self.apply_per_op(media, &ops[start..end], first + start, previous)?;
            }
            start = end;
        }
        Ok(())
    }

    /// Descends to the leaf of `ops[start]`, recording the path; returns
    /// the leaf and the end of the group of operations that fall within it.
    fn descend<M: Media>(&mut self, media: &M, ops: &[BatchOp], start: usize) -> (u32, usize) {
        let key = ops[start].key();
        let mut run = std::mem::take(&mut self.run);
        run.path.clear();
        let mut bounded = false;
        let mut buf = self.take_buf();
        let mut node = self.root;
        for level in (1..self.height).rev() {
            let fresh = self.fresh(node);
            let written = fresh.is_some();
            let view = match fresh {
                Some(bytes) => NodeRef::new(&bytes[..]),
                None => {
                    self.read_node(media, node, &mut buf);
                    NodeRef::new(&buf[..])
                }
            };
            assert_eq!(view.level(), level, "node {node} at the wrong level");
            let slot = view.search_internal(key);
            if slot + 1 < view.count() {
                // A deeper bound is tighter: it replaces the one above.
                run.hi.clear();
                run.hi.extend_from_slice(view.key(slot + 1));
                bounded = true;
            }
            run.path.push((node, slot, written));
            node = view.child(slot);
        }
        self.give_buf(buf);
        let mut end = start + 1;
        while end < ops.len() && (!bounded || ops[end].key() < &run.hi[..]) {
            end += 1;
        }
        self.run = run;
        (node, end)
    }

    /// Applies `group` to `leaf` (every key within its bounds); `false`,
    /// with nothing changed, if the group needs the per-operation path.
    fn apply_group<M: Media>(
        &mut self,
        media: &mut M,
        leaf: u32,
        group: &[BatchOp],
        previous: &mut Vec<Option<Value>>,
    ) -> bool {
        let overlay = &mut self.batch.as_mut().expect("in a batch").overlay;
        let (mut src, written) = match overlay.remove(&leaf) {
            Some(bytes) => (bytes, true),
            None => {
                let mut buf = self.take_buf();
                self.read_node(media, leaf, &mut buf);
                (buf, false)
            }
        };
        let mut run = std::mem::take(&mut self.run);
        let view = NodeRef::new(&src[..]);
        assert_eq!(view.level(), 0, "node {leaf} is not a leaf");
        assert!(view.is_leaf(), "node {leaf} is not a leaf");
        let plan = plan_leaf(view, group, &mut run.segs, &mut run.found);
        let pieces = if !plan.changed || (written && plan.same_lengths) {
            None
        } else {
            match self.leaf_pieces(media, view, group, &plan, &mut run, written) {
                Some(pieces) => Some(pieces),
                None => {
                    self.run = run;
                    self.put_back(leaf, src, written);
                    return false;
                }
            }
        };
        previous.extend(run.found.iter().map(|f| f.map(|i| Value::new(view.value(i as usize)).expect("value fits"))));
        self.len = self.len + plan.inserted - plan.deleted;
        self.counters.leaf_groups += 1;
        match pieces {
            None if plan.changed => {
                let puts = update_in_place(&mut src, group, &run.found);
                self.counters.in_place_updates += puts;
                self.put_back(leaf, src, written);
            }
            None => self.put_back(leaf, src, written),
            Some(pieces) => {
                self.give_buf(src);
                self.install(media, leaf, written, pieces, &run.path);
            }
        }
        self.run = run;
        true
    }

    /// Returns a leaf's buffer where it came from: the overlay, or the scratch.
    fn put_back(&mut self, leaf: u32, buf: NodeBuf, written: bool) {
        if written {
            let overlay = &mut self.batch.as_mut().expect("in a batch").overlay;
            assert!(overlay.insert(leaf, buf).is_none(), "overlay node {leaf} twice");
        } else {
            self.give_buf(buf);
        }
    }

    /// Packs the merged leaf into one node, or several of about equal
    /// fill; `None` (nothing changed) if this path does not handle it.
    fn leaf_pieces<M: Media>(
        &mut self,
        media: &M,
        view: NodeRef,
        group: &[BatchOp],
        plan: &Plan,
        run: &mut RunScratch,
        written: bool,
    ) -> Option<Pieces> {
        let is_root = run.path.is_empty();
        if plan.fill <= NODE_CAPACITY {
            if plan.fill < MIN_FILL && !is_root {
                return None;
            }
            let nodes = if written { 0 } else { 1 + self.durable_on_path(run) };
            if self.free.len() < nodes {
                return None;
            }
            let mut buf = self.take_buf();
            pack_leaf(view, group, &run.segs, plan.count, &mut buf);
            return Some(Pieces { first: buf, rest: Vec::new() });
        }
        let cuts = split_items(view, group, plan, run)?;
        let pieces = cuts.len() - 1;
        let seps: Vec<Vec<u8>> =
            cuts[1..pieces].iter().map(|&at| seg_key(view, group, run.items[at].0).to_vec()).collect();
        let sep_bytes: usize = seps.iter().map(|sep| 2 + 1 + sep.len() + 4).sum();
        let (above, grown) = self.split_cost(media, run, pieces - 1, sep_bytes);
        let nodes = pieces - usize::from(written) + self.durable_on_path(run) + above;
        if self.free.len() < nodes || self.height + grown > MAX_HEIGHT {
            return None;
        }
        let mut bufs = Vec::with_capacity(pieces);
        for window in cuts.windows(2) {
            run.piece.clear();
            run.piece.extend(run.items[window[0]..window[1]].iter().map(|&(seg, _)| seg));
            let mut buf = self.take_buf();
            pack_leaf(view, group, &run.piece, window[1] - window[0], &mut buf);
            bufs.push(buf);
        }
        let mut bufs = bufs.into_iter();
        let first = bufs.next().expect("a split has pieces");
        Some(Pieces { first, rest: seps.into_iter().zip(bufs).collect() })
    }

    /// An upper bound of the new internal nodes (beyond copies of the path)
    /// that `extras` new children of `extra_bytes` bytes of entries cost
    /// the leaf's parent, split in turn, and so on up, and of the levels
    /// the tree grows: each node of the path is sized from its header (the
    /// overlay's or the media's), separators above the parent at their
    /// largest.
    fn split_cost<M: Media>(&self, media: &M, run: &RunScratch, extras: usize, extra_bytes: usize) -> (usize, u32) {
        let pieces_of = |total: usize| if total <= NODE_CAPACITY { 1 } else { total.div_ceil(NODE_CAPACITY * 3 / 4) };
        let (mut extras, mut extra_bytes, mut nodes) = (extras, extra_bytes, 0);
        for &(node, _, _) in run.path.iter().rev() {
            if extras == 0 {
                return (nodes, 0);
            }
            let pieces = pieces_of(self.node_fill(media, node) + extra_bytes);
            nodes += pieces - 1;
            extras = pieces - 1;
            extra_bytes = extras * MAX_INTERNAL_ENTRY;
        }
        // New roots over the old root's pieces, until one node holds them.
        let mut grown = 0;
        while extras > 0 {
            let pieces = pieces_of(2 + 1 + 4 + extra_bytes);
            nodes += pieces;
            grown += 1;
            extras = pieces - 1;
            extra_bytes = extras * MAX_INTERNAL_ENTRY;
        }
        (nodes, grown)
    }

    /// Bytes of slots + entries of `node` (from the overlay or the media).
    fn node_fill<M: Media>(&self, media: &M, node: u32) -> usize {
        if let Some(bytes) = self.fresh(node) {
            return NodeRef::new(&bytes[..]).fill();
        }
        let mut header = [0u8; NODE_HEADER_BYTES];
        media.read(self.node_offset(node), &mut header);
        let used = format::get_u16(&header, 4) as usize;
        assert!((NODE_HEADER_BYTES..=NODE_BYTES).contains(&used), "node {node} used {used}");
        used - NODE_HEADER_BYTES
    }

    /// Internal nodes on the recorded path the batch has not written yet
    /// (each needs a free node if the path is copied).
    fn durable_on_path(&self, run: &RunScratch) -> usize {
        run.path.iter().filter(|&&(_, _, written)| !written).count()
    }

    /// Puts the new leaves in the overlay (the first at `leaf`'s index if
    /// the batch wrote it) and links them in above.
    fn install<M: Media>(
        &mut self,
        media: &mut M,
        leaf: u32,
        written: bool,
        pieces: Pieces,
        path: &[(u32, usize, bool)],
    ) {
        let Pieces { first, rest } = pieces;
        let first_node = if written { leaf } else { self.free.pop().expect("free nodes checked before the group") };
        self.place_leaf(media, first_node, first);
        if !written {
            self.retire_in_batch(leaf);
        }
        if written && rest.is_empty() {
            return;
        }
        self.counters.splits += rest.len() as u64;
        let (seps, bufs): (Vec<Vec<u8>>, Vec<NodeBuf>) = rest.into_iter().unzip();
        let mut extra: Vec<(&[u8], u32)> = Vec::with_capacity(seps.len());
        for (sep, buf) in seps.iter().zip(bufs) {
            let node = self.free.pop().expect("free nodes checked before the group");
            self.place_leaf(media, node, buf);
            extra.push((sep, node));
        }
        self.link_up(media, path, first_node, &extra);
    }

    /// Puts a new leaf in the overlay, or, if the batch writes leaves
    /// early, seals it and writes it to the media at once (while its bytes
    /// are in the cache; its free node is reachable from nothing durable,
    /// and the batch's drain makes it durable before the root switch).
    fn place_leaf<M: Media>(&mut self, media: &mut M, node: u32, mut buf: NodeBuf) {
        if !self.batch.as_ref().expect("in a batch").early {
            self.overlay_insert(node, buf);
            return;
        }
        let used = NodeRef::new(&buf[..]).used();
        let crc = format::node_crc(&buf[..used]);
        put_u32(&mut buf[..], 8, crc);
        self.write_out(media, node, &buf[..used]);
        self.give_buf(buf);
        let batch = self.batch.as_mut().expect("in a batch");
        assert!(batch.written.insert(node), "leaf {node} written twice");
        self.counters.early_leaves += 1;
    }

    /// Adds a node the batch wrote to the overlay.
    fn overlay_insert(&mut self, node: u32, buf: NodeBuf) {
        let overlay = &mut self.batch.as_mut().expect("in a batch").overlay;
        assert!(overlay.insert(node, buf).is_none(), "overlay node {node} twice");
    }

    /// The child at the bottom of `path` is now `first` followed by
    /// `extra` (separator, node) pairs: rewrites its parent (in place if
    /// the batch wrote it, else in a free node; split in pieces if it
    /// overflows) and so on up, or grows new roots above a split root.
    fn link_up<M: Media>(&mut self, media: &M, path: &[(u32, usize, bool)], first: u32, extra: &[(&[u8], u32)]) {
        let Some((&(parent, slot, written), above)) = path.split_last() else {
            if extra.is_empty() {
                self.root = first;
            } else {
                self.grow_root(first, extra);
            }
            return;
        };
        let level = self.height - path.len() as u32;
        if extra.is_empty() {
            if written {
                let overlay = &mut self.batch.as_mut().expect("in a batch").overlay;
                patch_child(overlay.get_mut(&parent).expect("a written parent is in the overlay"), slot, first);
                return;
            }
            let mut buf = self.take_buf();
            self.read_node(media, parent, &mut buf);
            assert_eq!(NodeRef::new(&buf[..]).level(), level, "parent {parent} at the wrong level");
            patch_child(&mut buf, slot, first);
            let node = self.free.pop().expect("free nodes checked before the group");
            self.overlay_insert(node, buf);
            self.retire_in_batch(parent);
            self.link_up(media, above, node, &[]);
            return;
        }
        let (mut first_buf, rest) = self.repack_parent(media, parent, written, slot, first, extra);
        assert_eq!(NodeRef::new(&first_buf[..]).level(), level, "parent {parent} at the wrong level");
        let first_node = if written {
            let overlay = &mut self.batch.as_mut().expect("in a batch").overlay;
            std::mem::swap(overlay.get_mut(&parent).expect("a written parent is in the overlay"), &mut first_buf);
            self.give_buf(first_buf);
            parent
        } else {
            let node = self.free.pop().expect("free nodes checked before the group");
            self.overlay_insert(node, first_buf);
            self.retire_in_batch(parent);
            node
        };
        if written && rest.is_empty() {
            return;
        }
        self.counters.splits += rest.len() as u64;
        let added = self.place_internal(rest);
        let extra: Vec<(&[u8], u32)> = added.iter().map(|(sep, node)| (&sep[..], *node)).collect();
        self.link_up(media, above, first_node, &extra);
    }

    /// Puts the split pieces of an internal node in free overlay nodes;
    /// returns their (separator, node) pairs.
    fn place_internal(&mut self, pieces: Vec<(Vec<u8>, NodeBuf)>) -> Vec<(Vec<u8>, u32)> {
        let mut placed = Vec::with_capacity(pieces.len());
        for (sep, buf) in pieces {
            let node = self.free.pop().expect("free nodes checked before the group");
            self.overlay_insert(node, buf);
            placed.push((sep, node));
        }
        placed
    }

    /// `parent` with child `slot` replaced by `first` and the `extra`
    /// children inserted after it: one node, or pieces of about equal fill
    /// if it overflows (the first, then the others with their separators).
    fn repack_parent<M: Media>(
        &mut self,
        media: &M,
        parent: u32,
        written: bool,
        slot: usize,
        first: u32,
        extra: &[(&[u8], u32)],
    ) -> (NodeBuf, Vec<(Vec<u8>, NodeBuf)>) {
        let mut old = self.take_buf();
        match self.fresh(parent) {
            Some(bytes) => old.copy_from_slice(&bytes[..]),
            None => self.read_node(media, parent, &mut old),
        }
        assert_eq!(self.fresh(parent).is_some(), written, "parent {parent}'s overlay state");
        let view = NodeRef::new(&old[..]);
        let mut entries = Vec::with_capacity(view.count() + extra.len());
        entries.extend((0..slot).map(|i| view.entry(i)));
        entries.push(EntryRef { key: view.key(slot), payload: Payload::Child(first) });
        entries.extend(extra.iter().map(|&(key, node)| EntryRef { key, payload: Payload::Child(node) }));
        entries.extend((slot + 1..view.count()).map(|i| view.entry(i)));
        let pieces = self.pack_internal(view.level(), &entries);
        drop(entries);
        self.give_buf(old);
        pieces
    }

    /// Packs internal `entries` (entry 0 stands for −∞) at `level` into one
    /// node, or into pieces of about equal fill, at most three quarters of
    /// a node each (each piece's entry 0 keyed −∞, its old key the piece's
    /// separator).
    fn pack_internal(&mut self, level: u32, entries: &[EntryRef]) -> (NodeBuf, Vec<(Vec<u8>, NodeBuf)>) {
        assert!(level > 0, "internal nodes are above the leaves");
        let sizes: Vec<usize> = entries.iter().map(EntryRef::size).collect();
        let cuts = even_cuts(&sizes, NODE_CAPACITY);
        let mut pieces = Vec::with_capacity(cuts.len() - 1);
        for window in cuts.windows(2) {
            let piece = &entries[window[0]..window[1]];
            // The −∞ entry's key is stored empty: the fill bounds count it so.
            let fill = format::fill_of(piece) - piece[0].key.len();
            assert!(fill <= NODE_CAPACITY, "internal piece of {fill} B");
            assert!(cuts.len() == 2 || fill >= MIN_FILL, "internal piece of {fill} B");
            let mut buf = self.take_buf();
            pack(level, piece, &mut buf);
            pieces.push((piece[0].key.to_vec(), buf));
        }
        let mut pieces = pieces.into_iter();
        let (_, first) = pieces.next().expect("at least one piece");
        (first, pieces.collect())
    }

    /// New roots above the root's pieces: `first` and the `extra`
    /// (separator, node) pairs as children, split again if they overflow.
    fn grow_root(&mut self, first: u32, extra: &[(&[u8], u32)]) {
        let mut entries = vec![EntryRef { key: b"", payload: Payload::Child(first) }];
        entries.extend(extra.iter().map(|&(key, node)| EntryRef { key, payload: Payload::Child(node) }));
        let (buf, rest) = self.pack_internal(self.height, &entries);
        drop(entries);
        let node = self.free.pop().expect("free nodes checked before the group");
        self.overlay_insert(node, buf);
        self.height += 1;
        assert!(self.height <= MAX_HEIGHT, "height {}", self.height);
        self.counters.root_splits += 1;
        if rest.is_empty() {
            self.root = node;
            return;
        }
        self.counters.splits += rest.len() as u64;
        let added = self.place_internal(rest);
        let extra: Vec<(&[u8], u32)> = added.iter().map(|(sep, node)| (&sep[..], *node)).collect();
        self.grow_root(node, &extra);
    }

    /// Retires a node the batch replaced: free after the switch if
    /// durable, at once if the batch wrote it to the media.
    fn retire_in_batch(&mut self, node: u32) {
        let batch = self.batch.as_mut().expect("in a batch");
        assert!(!batch.overlay.contains_key(&node), "node {node} is in the overlay");
        if batch.written.remove(&node) || self.faults.reuse_before_switch {
            self.free.push(node);
        } else {
            batch.retired.push(node);
        }
    }
}

/// Merges `group` into the leaf `view`: fills `segs` (the new entries in
/// order) and `found` (per operation, the old entry it replaces or
/// deletes), and sizes the result.
fn plan_leaf(view: NodeRef, group: &[BatchOp], segs: &mut Vec<Seg>, found: &mut Vec<Option<u16>>) -> Plan {
    segs.clear();
    found.clear();
    let count = view.count();
    let mut plan = Plan { same_lengths: true, ..Plan::default() };
    let old_run = |segs: &mut Vec<Seg>, plan: &mut Plan, start: usize, end: usize| {
        if start < end {
            segs.push(Seg::Old(start as u16, end as u16));
            plan.fill += 2 * (end - start) + view.entry_end(end - 1) - view.entry_at(start);
            plan.count += end - start;
        }
    };
    let mut pos = 0;
    for (k, op) in group.iter().enumerate() {
        let hit = view.search_leaf_from(pos, op.key());
        let (Ok(at) | Err(at)) = hit;
        old_run(segs, &mut plan, pos, at);
        found.push(hit.ok().map(|i| i as u16));
        match (*op, hit) {
            (BatchOp::Put { key, value }, hit) => {
                segs.push(Seg::New(k as u32));
                plan.fill += 2 + 1 + key.len() + 2 + value.len();
                plan.count += 1;
                plan.changed = true;
                match hit {
                    Ok(i) => plan.same_lengths &= view.value(i).len() == value.len(),
                    Err(_) => {
                        plan.inserted += 1;
                        plan.same_lengths = false;
                    }
                }
            }
            (BatchOp::Delete { .. }, Ok(_)) => {
                plan.deleted += 1;
                plan.changed = true;
                plan.same_lengths = false;
            }
            (BatchOp::Delete { .. }, Err(_)) => {}
        }
        pos = if hit.is_ok() { at + 1 } else { at };
    }
    old_run(segs, &mut plan, pos, count);
    plan
}

/// Overwrites the values of a leaf the batch wrote, every change a put
/// over a value of the same length (the CRC is sealed at write-out);
/// returns the puts.
fn update_in_place(bytes: &mut NodeBuf, group: &[BatchOp], found: &[Option<u16>]) -> u64 {
    let mut puts = 0;
    for (op, found) in group.iter().zip(found) {
        if let BatchOp::Put { value, .. } = *op {
            let index = found.expect("a same-length update replaces an entry");
            let range = NodeRef::new(&bytes[..]).value_range(index as usize);
            assert_eq!(range.len(), value.len(), "a same-length update");
            bytes[range].copy_from_slice(value);
            puts += 1;
        }
    }
    puts
}

/// Points child `slot` of the internal node `bytes` at `child`.
fn patch_child(bytes: &mut NodeBuf, slot: usize, child: u32) {
    let view = NodeRef::new(&bytes[..]);
    assert!(!view.is_leaf(), "patching a child into a leaf");
    assert!(slot < view.count(), "slot {slot} of {}", view.count());
    let at = view.child_at(slot);
    put_u32(&mut bytes[..], at, child);
}

/// The key a leaf entry of `seg` starts with.
fn seg_key<'a>(view: NodeRef<'a>, group: &[BatchOp<'a>], seg: Seg) -> &'a [u8] {
    match seg {
        Seg::Old(start, _) => view.key(start as usize),
        Seg::New(k) => group[k as usize].key(),
    }
}

/// Cuts an overflowing merged leaf into pieces of about equal fill, at
/// most three quarters of a node each: fills `run.items` with the entries
/// one by one and returns the cut indices (`0`, …, `items.len()`); `None`
/// if a piece would leave the fill bounds.
fn split_items(view: NodeRef, group: &[BatchOp], plan: &Plan, run: &mut RunScratch) -> Option<Vec<usize>> {
    run.items.clear();
    for &seg in &run.segs {
        match seg {
            Seg::Old(start, end) => run.items.extend((start..end).map(|i| {
                let i = i as usize;
                (Seg::Old(i as u16, i as u16 + 1), 2 + view.entry_end(i) - view.entry_at(i))
            })),
            Seg::New(k) => {
                let BatchOp::Put { key, value } = group[k as usize] else { unreachable!("a new entry is a put") };
                run.items.push((seg, 2 + 1 + key.len() + 2 + value.len()));
            }
        }
    }
    let sizes: Vec<usize> = run.items.iter().map(|&(_, size)| size).collect();
    let cuts = even_cuts(&sizes, 0);
    assert_eq!(sizes.iter().sum::<usize>(), plan.fill, "the items add up to the plan");
    let fits = cuts.windows(2).all(|w| {
        let fill: usize = run.items[w[0]..w[1]].iter().map(|&(_, size)| size).sum();
        w[1] > w[0] && (MIN_FILL..=NODE_CAPACITY).contains(&fill)
    });
    fits.then_some(cuts)
}

/// Cuts entries of `sizes` bytes into pieces of about equal fill: one if
/// they fit `one_piece_max` bytes, else the fewest of at most three
/// quarters of a node each (at least two). Returns the cut indices (`0`,
/// …, `sizes.len()`); every piece holds at least one entry.
fn even_cuts(sizes: &[usize], one_piece_max: usize) -> Vec<usize> {
    let total: usize = sizes.iter().sum();
    if total <= one_piece_max {
        return vec![0, sizes.len()];
    }
    let pieces = total.div_ceil(NODE_CAPACITY * 3 / 4).max(2).min(sizes.len());
    let mut cuts = vec![0];
    let mut sum = 0;
    for (at, &size) in sizes.iter().enumerate() {
        let piece = cuts.len() - 1;
        // Close the piece before an entry that crosses its share of the bytes.
        if piece + 1 < pieces
            && at > *cuts.last().expect("cuts start at 0")
            && sum + size > total * (piece + 1) / pieces
        {
            cuts.push(at);
        }
        sum += size;
    }
    cuts.push(sizes.len());
    cuts
}

/// Packs a leaf of `count` entries from `segs` into `out`: a run of old
/// entries is one copy (slots shifted), a new entry is written out. The
/// CRC field is left zero: the batch seals every node at write-out.
fn pack_leaf(view: NodeRef, group: &[BatchOp], segs: &[Seg], count: usize, out: &mut NodeBuf) -> usize {
    let mut slot = NODE_HEADER_BYTES;
    let mut at = NODE_HEADER_BYTES + 2 * count;
    assert!(at <= NODE_BYTES, "{count} slots overflow a node");
    let bytes = view.bytes();
    for &seg in segs {
        match seg {
            Seg::Old(start, end) => {
                let (start, end) = (start as usize, end as usize);
                let (from, to) = (view.entry_at(start), view.entry_end(end - 1));
                assert!(at + to - from <= NODE_BYTES, "node overflow while packing");
                for i in start..end {
                    put_u16(&mut out[..], slot, (view.entry_at(i) - from + at) as u16);
                    slot += 2;
                }
                out[at..at + to - from].copy_from_slice(&bytes[from..to]);
                at += to - from;
            }
            Seg::New(k) => {
                let BatchOp::Put { key, value } = group[k as usize] else { unreachable!("a new entry is a put") };
                assert!(at + 3 + key.len() + value.len() <= NODE_BYTES, "node overflow while packing");
                put_u16(&mut out[..], slot, at as u16);
                slot += 2;
                out[at] = key.len() as u8;
                out[at + 1..at + 1 + key.len()].copy_from_slice(key);
                at += 1 + key.len();
                put_u16(&mut out[..], at, value.len() as u16);
                out[at + 2..at + 2 + value.len()].copy_from_slice(value);
                at += 2 + value.len();
            }
        }
    }
    assert_eq!(slot, NODE_HEADER_BYTES + 2 * count, "slots written");
    format::put_header(out, 0, count, at);
    at
}
