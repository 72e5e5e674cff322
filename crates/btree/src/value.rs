//! [`Value`]: what a key maps to — an opaque byte string of at most
//! [`MAX_VALUE_BYTES`] (256 B), held inline in the leaf.
//!
//! The KV layer stores a list of up to 32 PASTE extents in it
//! ([`Value::from_extents`], 8 B each, [`Extent::pack`] little-endian), so a
//! value of up to 64 KB of 2 KB pool buffers needs no indirection; a short
//! value (a counter, a small string) can be stored inline instead. The tree
//! never interprets the bytes.

use std::fmt;
use std::ops::Deref;

use pmwire_log::Extent;

use crate::format::MAX_VALUE_BYTES;

/// Extents a [`Value`] holds at most.
pub const MAX_EXTENTS: usize = MAX_VALUE_BYTES / 8;

/// A value returned by the tree (a fixed buffer: no allocation).
/// Invariant: `len <= MAX_VALUE_BYTES`.
#[derive(Clone, Copy)]
pub struct Value {
    len: u16,
    bytes: [u8; MAX_VALUE_BYTES],
}

impl Value {
    /// A copy of `bytes`; `None` if longer than [`MAX_VALUE_BYTES`].
    pub fn new(bytes: &[u8]) -> Option<Value> {
        if bytes.len() > MAX_VALUE_BYTES {
            return None;
        }
        let mut value = Value { len: bytes.len() as u16, bytes: [0; MAX_VALUE_BYTES] };
        value.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(value)
    }

    /// The value encoding `extents` (8 B each); `None` if more than [`MAX_EXTENTS`].
    pub fn from_extents(extents: &[Extent]) -> Option<Value> {
        if extents.len() > MAX_EXTENTS {
            return None;
        }
        let mut value = Value { len: (extents.len() * 8) as u16, bytes: [0; MAX_VALUE_BYTES] };
        for (chunk, extent) in value.bytes.chunks_exact_mut(8).zip(extents) {
            chunk.copy_from_slice(&extent.pack().to_le_bytes());
        }
        Some(value)
    }

    /// The extents this value encodes; `None` if its length is not a multiple of 8.
    pub fn extents(&self) -> Option<Vec<Extent>> {
        if !self.len().is_multiple_of(8) {
            return None;
        }
        let words = self.as_bytes().chunks_exact(8);
        Some(words.map(|w| Extent::unpack(u64::from_le_bytes(w.try_into().unwrap()))).collect())
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl Deref for Value {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Value {}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Value({:02x?})", self.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_round_trip() {
        let extents: Vec<Extent> = (0..32).map(|i| Extent { buf_idx: i, offset: 3, len: 2048 }).collect();
        let value = Value::from_extents(&extents).unwrap();
        assert_eq!(value.len(), 256);
        assert_eq!(value.extents().unwrap(), extents);
        assert!(Value::from_extents(&[extents[0]; 33]).is_none());
        assert!(Value::new(&[0; 257]).is_none());
        assert_eq!(Value::new(b"abc").unwrap().extents(), None);
    }
}
