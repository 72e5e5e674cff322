//! Fixed-width little-endian fields in byte buffers: how every on-media
//! record is encoded before it is written through [`Media`](crate::Media).
//! Each function panics if the field does not fit in `buf` at `at`.

/// Stores `value` little-endian at `buf[at..at + 2]`.
#[inline]
pub fn put_u16(buf: &mut [u8], at: usize, value: u16) {
    buf[at..at + 2].copy_from_slice(&value.to_le_bytes());
}

/// Stores `value` little-endian at `buf[at..at + 4]`.
#[inline]
pub fn put_u32(buf: &mut [u8], at: usize, value: u32) {
    buf[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

/// Stores `value` little-endian at `buf[at..at + 8]`.
#[inline]
pub fn put_u64(buf: &mut [u8], at: usize, value: u64) {
    buf[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// Loads a little-endian `u16` from `buf[at..at + 2]`.
#[inline]
pub fn get_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(buf[at..at + 2].try_into().unwrap())
}

/// Loads a little-endian `u32` from `buf[at..at + 4]`.
#[inline]
pub fn get_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().unwrap())
}

/// Loads a little-endian `u64` from `buf[at..at + 8]`.
#[inline]
pub fn get_u64(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().unwrap())
}

/// A bounds-checked little-endian cursor over bytes read from the wire or
/// from media: every read checks the bytes left before it takes any (no
/// length from the bytes reaches arithmetic unchecked), and a short read
/// is `None`, which each caller turns into its own typed error.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader of `bytes` from offset `at` (at most their length).
    pub fn new(bytes: &'a [u8], at: usize) -> Reader<'a> {
        assert!(at <= bytes.len());
        Reader { bytes, at }
    }

    /// Bytes not read yet.
    pub fn left(&self) -> u64 {
        (self.bytes.len() - self.at) as u64
    }

    /// The next `n` bytes, if there are that many.
    pub fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        if n > self.left() {
            return None;
        }
        let s = &self.bytes[self.at..self.at + n as usize];
        self.at += n as usize;
        Some(s)
    }

    /// The next u32.
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    /// The next u64.
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    /// True if every byte was read.
    pub fn done(&self) -> bool {
        self.at == self.bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_little_endian() {
        let mut buf = [0u8; 16];
        put_u16(&mut buf, 0, 0x0102);
        put_u32(&mut buf, 2, 0x0304_0506);
        put_u64(&mut buf, 8, 0x0708_090a_0b0c_0d0e);
        assert_eq!(buf[0], 0x02);
        assert_eq!(buf[2], 0x06);
        assert_eq!(get_u16(&buf, 0), 0x0102);
        assert_eq!(get_u32(&buf, 2), 0x0304_0506);
        assert_eq!(get_u64(&buf, 8), 0x0708_090a_0b0c_0d0e);
    }

    #[test]
    fn the_reader_never_reads_past_the_end() {
        let bytes = [1u8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 9];
        let mut r = Reader::new(&bytes, 0);
        assert_eq!(r.u32(), Some(1));
        assert_eq!(r.u64(), Some(2));
        assert_eq!(r.u32(), None, "one byte left");
        assert_eq!(r.take(u64::MAX), None);
        assert_eq!(r.take(1), Some(&[9u8][..]));
        assert!(r.done());
    }
}
