//! [`Capture`]: a reply sink for a driver that needs a command's reply as
//! bytes after the command, while the keyspace is borrowed during it (a
//! script's `redis.call`, a replicated machine's entry).

use crate::store::Keyspace;
use pmwire_resp::reply::ReplySink;

/// A sink that keeps protocol bytes and value handles in order, to be
/// joined once the keyspace is free again ([`Capture::finish`]).
#[derive(Debug)]
pub struct Capture<V> {
    bytes: Vec<u8>,
    values: Vec<(usize, V, u64)>,
}

impl<V: Clone> ReplySink<V> for Capture<V> {
    fn bytes(&mut self, data: &[u8]) {
        self.bytes.extend_from_slice(data);
    }

    fn value(&mut self, value: &V, len: u64) {
        self.values.push((self.bytes.len(), value.clone(), len));
    }
}

impl<V> Default for Capture<V> {
    fn default() -> Self {
        Capture { bytes: Vec::new(), values: Vec::new() }
    }
}

impl<V> Capture<V> {
    /// An empty capture.
    pub fn new() -> Self {
        Capture::default()
    }

    /// An empty capture that writes into `bytes` (cleared), so a caller
    /// that captures reply after reply reuses one buffer.
    pub fn reusing(mut bytes: Vec<u8>) -> Self {
        bytes.clear();
        Capture { bytes, values: Vec::new() }
    }

    /// The reply bytes, each value read from `ks` where it was written.
    pub fn finish<K: Keyspace<Value = V>>(self, ks: &K) -> Vec<u8> {
        if self.values.is_empty() {
            return self.bytes;
        }
        let total: u64 = self.values.iter().map(|v| v.2).sum();
        let mut out = Vec::with_capacity(self.bytes.len() + total as usize);
        let mut at = 0;
        for (offset, value, len) in self.values {
            out.extend_from_slice(&self.bytes[at..offset]);
            let before = out.len();
            ks.read(&value, &mut out);
            assert_eq!((out.len() - before) as u64, len, "a value handle's length");
            at = offset;
        }
        out.extend_from_slice(&self.bytes[at..]);
        out
    }
}
