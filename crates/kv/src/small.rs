//! Compact DRAM forms of the index's keys and extent lists: short ones are
//! stored inline, so the index, the retained WAL records and the undo log
//! take no heap allocation per operation for them, and comparing two keys
//! in the index reads their bytes where they lie (no pointer chase).
//!
//! Invariants: a [`Key`] or [`Extents`] is `Inline` exactly when its
//! length fits the inline capacity (so equal contents have equal forms);
//! ordering and equality are those of the byte (extent) slices.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::ops::Deref;

use pmwire_log::Extent;

/// Key bytes held inline (the key with its length then fills 32 bytes).
const INLINE_KEY_BYTES: usize = 30;
/// Extents held inline (a value received in one buffer, or copied across two).
const INLINE_EXTENTS: usize = 2;

/// A key: inline up to 30 bytes, else boxed.
#[derive(Clone)]
pub(crate) enum Key {
    Inline { len: u8, bytes: [u8; INLINE_KEY_BYTES] },
    Heap(Box<[u8]>),
}

impl Key {
    pub(crate) fn new(key: &[u8]) -> Key {
        if key.len() <= INLINE_KEY_BYTES {
            let mut bytes = [0u8; INLINE_KEY_BYTES];
            bytes[..key.len()].copy_from_slice(key);
            Key::Inline { len: key.len() as u8, bytes }
        } else {
            Key::Heap(key.into())
        }
    }
}

impl Deref for Key {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..*len as usize],
            Key::Heap(bytes) => bytes,
        }
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        **self == **other
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    /// As the byte slice's hash (lookups by `&[u8]` rely on it, through `Borrow`).
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state)
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> Ordering {
        (**self).cmp(&**other)
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

/// A value's extents: inline up to 2, else boxed.
#[derive(Clone)]
pub(crate) enum Extents {
    Inline { len: u8, extents: [Extent; INLINE_EXTENTS] },
    Heap(Box<[Extent]>),
}

impl Extents {
    pub(crate) fn new(extents: &[Extent]) -> Extents {
        if extents.len() <= INLINE_EXTENTS {
            let mut inline = [Extent { buf_idx: 0, offset: 0, len: 0 }; INLINE_EXTENTS];
            inline[..extents.len()].copy_from_slice(extents);
            Extents::Inline { len: extents.len() as u8, extents: inline }
        } else {
            Extents::Heap(extents.into())
        }
    }
}

impl Deref for Extents {
    type Target = [Extent];

    fn deref(&self) -> &[Extent] {
        match self {
            Extents::Inline { len, extents } => &extents[..*len as usize],
            Extents::Heap(extents) => extents,
        }
    }
}

impl PartialEq for Extents {
    fn eq(&self, other: &Extents) -> bool {
        **self == **other
    }
}

impl Eq for Extents {}

impl std::fmt::Debug for Extents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_and_compare_as_their_bytes() {
        let long = vec![b'k'; 31];
        let keys: Vec<&[u8]> = vec![b"", b"a", b"ab", b"b", &long[..30], &long, b"z"];
        for a in &keys {
            for b in &keys {
                let (ka, kb) = (Key::new(a), Key::new(b));
                assert_eq!(ka.cmp(&kb), a.cmp(b), "{a:?} {b:?}");
                assert_eq!(ka == kb, a == b);
                assert_eq!(&*ka, *a);
            }
        }
        assert!(matches!(Key::new(&long[..30]), Key::Inline { .. }));
        assert!(matches!(Key::new(&long), Key::Heap(_)));
        assert_eq!(std::mem::size_of::<Key>(), 32);
    }

    #[test]
    fn extents_round_trip_inline_and_boxed() {
        let all: Vec<Extent> = (0..5).map(|i| Extent { buf_idx: i, offset: i as u16, len: 7 }).collect();
        for n in 0..=all.len() {
            let e = Extents::new(&all[..n]);
            assert_eq!(&*e, &all[..n]);
            assert_eq!(matches!(e, Extents::Inline { .. }), n <= INLINE_EXTENTS);
            assert_eq!(e.clone(), e);
        }
        assert_eq!(std::mem::size_of::<Extents>(), 24);
    }
}
