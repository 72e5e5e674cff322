//! [`BTree::verify`]: every structural invariant of the tree and its
//! allocator, checked against the media (used by tests and the crash
//! checker after every recovery).

use pmem::Media;

use crate::error::VerifyError;
use crate::format::{NodeRef, MIN_FILL, NODE_BYTES, NODE_CAPACITY};
use crate::tree::BTree;

/// What [`BTree::verify`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Levels (1 when the root is a leaf).
    pub height: u32,
    /// Nodes reachable from the root.
    pub nodes: u32,
    /// Leaves.
    pub leaves: u32,
    /// Entries in the leaves.
    pub entries: u64,
    /// Least fill (bytes of slots + entries) of a non-root node, if any.
    pub min_fill: Option<usize>,
}

/// Key bounds of a subtree: `lo <= key < hi`.
struct Bounds<'a> {
    lo: Option<&'a [u8]>,
    hi: Option<&'a [u8]>,
}

impl BTree {
    /// Checks every invariant: node checksums and layout, levels (all
    /// leaves at one depth), keys sorted and within their parents' bounds,
    /// fill bounds, the entry count, and that the free list is exactly the
    /// set of nodes the root does not reach, each once.
    pub fn verify<M: Media>(&self, media: &M) -> Result<TreeStats, VerifyError> {
        let (root, height) = self.root();
        let mut reached = vec![false; self.node_count() as usize];
        let mut stats = TreeStats { height, ..TreeStats::default() };
        let bounds = Bounds { lo: None, hi: None };
        self.verify_node(media, root, height - 1, &bounds, true, &mut reached, &mut stats)?;
        if stats.entries != self.len() {
            return Err(VerifyError {
                node: root,
                why: format!("{} entries, len() says {}", stats.entries, self.len()),
            });
        }
        let mut on_free_list = vec![false; reached.len()];
        for &node in self.free_list() {
            let fail = |why: &str| Err(VerifyError { node, why: why.to_string() });
            if node >= self.node_count() {
                return fail("free node out of range");
            }
            if std::mem::replace(&mut on_free_list[node as usize], true) {
                return fail("on the free list twice");
            }
            if reached[node as usize] {
                return fail("both free and reachable");
            }
        }
        if let Some(node) = (0..self.node_count()).find(|&n| !reached[n as usize] && !on_free_list[n as usize]) {
            return Err(VerifyError { node, why: "leaked: neither free nor reachable".into() });
        }
        Ok(stats)
    }

    #[allow(clippy::too_many_arguments)]
    fn verify_node<M: Media>(
        &self,
        media: &M,
        node: u32,
        level: u32,
        bounds: &Bounds,
        is_root: bool,
        reached: &mut [bool],
        stats: &mut TreeStats,
    ) -> Result<(), VerifyError> {
        let fail = |why: String| Err(VerifyError { node, why });
        if node >= self.node_count() || std::mem::replace(&mut reached[node as usize], true) {
            return fail("out of range or reached twice".into());
        }
        let mut buf = Box::new([0u8; NODE_BYTES]);
        self.read_node(media, node, &mut buf);
        let view = NodeRef::new(&buf[..]);
        if let Err(why) = view.validate() {
            return fail(why);
        }
        if view.level() != level {
            return fail(format!("level {}, expected {level}", view.level()));
        }
        stats.nodes += 1;
        if !is_root {
            if view.fill() < MIN_FILL || view.fill() > NODE_CAPACITY {
                return fail(format!("fill {} outside {MIN_FILL}..={NODE_CAPACITY}", view.fill()));
            }
            stats.min_fill = Some(stats.min_fill.map_or(view.fill(), |m| m.min(view.fill())));
        }
        let first_key = if view.is_leaf() { 0 } else { 1 };
        for i in first_key..view.count() {
            let key = view.key(i);
            if i > first_key && view.key(i - 1) >= key {
                return fail(format!("keys {i} and {} out of order", i - 1));
            }
            if bounds.lo.is_some_and(|lo| key < lo) || bounds.hi.is_some_and(|hi| key >= hi) {
                return fail(format!("key {i} outside its parent's bounds"));
            }
        }
        if view.is_leaf() {
            stats.leaves += 1;
            stats.entries += view.count() as u64;
            return Ok(());
        }
        if view.count() < 2 || !view.key(0).is_empty() {
            return fail(format!("internal node with {} children, first key {:?}", view.count(), view.key(0)));
        }
        for i in 0..view.count() {
            let lo = if i == 0 { bounds.lo } else { Some(view.key(i)) };
            let hi = if i + 1 < view.count() { Some(view.key(i + 1)) } else { bounds.hi };
            self.verify_node(media, view.child(i), level - 1, &Bounds { lo, hi }, false, reached, stats)?;
        }
        Ok(())
    }
}
