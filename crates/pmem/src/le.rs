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
}
