//! [`Range`]: an ordered scan over a key range.
//!
//! Copy-on-write leaves have no sibling pointers (a pointer into a leaf
//! would force its neighbour to be copied too), so the iterator keeps the
//! path from the root: `stack[d] = (node bytes, index of the child being
//! visited)` for each internal level, and the current leaf with the
//! position of the next entry. Invariant: every key yielded is greater
//! than the one before and within the bounds.

use std::ops::Bound;

use pmem::Media;

use crate::format::{NodeRef, NODE_BYTES};
use crate::tree::BTree;
use crate::value::Value;

type NodeBuf = Box<[u8; NODE_BYTES]>;

/// An iterator over `(key, value)` in key order, from
/// [`BTree::range`] or [`BTree::iter`]. It borrows the tree and its media,
/// so neither changes while it runs.
pub struct Range<'a, M: Media> {
    tree: &'a BTree,
    media: &'a M,
    stack: Vec<(NodeBuf, usize)>,
    leaf: NodeBuf,
    pos: usize,
    end: Bound<Vec<u8>>,
    done: bool,
}

impl BTree {
    /// The entries with keys within `(start, end)`, in order. Bounds may be
    /// of any length.
    pub fn range<'a, M: Media>(&'a self, media: &'a M, start: Bound<&[u8]>, end: Bound<&[u8]>) -> Range<'a, M> {
        let (mut node, height) = self.root();
        let mut stack = Vec::with_capacity(height as usize);
        let mut buf: NodeBuf = Box::new([0; NODE_BYTES]);
        for level in (1..height).rev() {
            self.read_node(media, node, &mut buf);
            let view = NodeRef::new(&buf[..]);
            assert_eq!(view.level(), level, "node {node} at the wrong level");
            let index = match start {
                Bound::Unbounded => 0,
                Bound::Included(key) | Bound::Excluded(key) => view.search_internal(key),
            };
            node = view.child(index);
            stack.push((std::mem::replace(&mut buf, Box::new([0; NODE_BYTES])), index));
        }
        self.read_node(media, node, &mut buf);
        let view = NodeRef::new(&buf[..]);
        assert!(view.is_leaf(), "node {node} is not a leaf");
        let pos = match start {
            Bound::Unbounded => 0,
            Bound::Included(key) => view.search_leaf(key).unwrap_or_else(|i| i),
            Bound::Excluded(key) => view.search_leaf(key).map_or_else(|i| i, |i| i + 1),
        };
        let end = match end {
            Bound::Unbounded => Bound::Unbounded,
            Bound::Included(key) => Bound::Included(key.to_vec()),
            Bound::Excluded(key) => Bound::Excluded(key.to_vec()),
        };
        Range { tree: self, media, stack, leaf: buf, pos, end, done: false }
    }

    /// Every entry, in key order.
    pub fn iter<'a, M: Media>(&'a self, media: &'a M) -> Range<'a, M> {
        self.range(media, Bound::Unbounded, Bound::Unbounded)
    }
}

impl<M: Media> Range<'_, M> {
    /// Moves to the first entry of the next leaf; `false` at the end.
    fn next_leaf(&mut self) -> bool {
        let child = loop {
            let Some((buf, index)) = self.stack.last_mut() else {
                return false;
            };
            let view = NodeRef::new(&buf[..]);
            if *index + 1 < view.count() {
                *index += 1;
                break view.child(*index);
            }
            self.stack.pop();
        };
        let mut node = child;
        loop {
            self.tree.read_node(self.media, node, &mut self.leaf);
            let view = NodeRef::new(&self.leaf[..]);
            if view.is_leaf() {
                break;
            }
            node = view.child(0);
            let buf = std::mem::replace(&mut self.leaf, Box::new([0; NODE_BYTES]));
            self.stack.push((buf, 0));
        }
        self.pos = 0;
        true
    }
}

impl<M: Media> Iterator for Range<'_, M> {
    type Item = (Vec<u8>, Value);

    fn next(&mut self) -> Option<(Vec<u8>, Value)> {
        if self.done {
            return None;
        }
        while self.pos >= NodeRef::new(&self.leaf[..]).count() {
            if !self.next_leaf() {
                self.done = true;
                return None;
            }
        }
        let view = NodeRef::new(&self.leaf[..]);
        let key = view.key(self.pos);
        let within = match &self.end {
            Bound::Unbounded => true,
            Bound::Included(end) => key <= &end[..],
            Bound::Excluded(end) => key < &end[..],
        };
        if !within {
            self.done = true;
            return None;
        }
        let item = (key.to_vec(), Value::new(view.value(self.pos)).expect("value fits"));
        self.pos += 1;
        Some(item)
    }
}
