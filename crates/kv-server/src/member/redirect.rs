//! `--redirect moved`: a follower answers a write or a linearizable read
//! with `-MOVED <slot> <leader's RESP address>` instead of forwarding it
//! (Redis Cluster's redirect; the slot is the key's CRC16 hash slot, as a
//! cluster client computes it, 0 for a command without a key).

/// Redis Cluster's hash slot of `key`: CRC16 (XMODEM) of the key, or of
/// its `{hash tag}` if it has a non-empty one, modulo 16384.
pub fn keyslot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let close = key[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &key[open + 1..open + 1 + close])
    });
    crc16(tagged.unwrap_or(key)) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::keyslot;

    #[test]
    fn slots_are_redis_clusters() {
        // Redis Cluster specification's examples.
        assert_eq!(keyslot(b"123456789"), 12739);
        assert_eq!(keyslot(b"{user1000}.following"), keyslot(b"{user1000}.followers"));
        assert_eq!(keyslot(b"foo{}{bar}"), keyslot(b"foo{}{bar}"));
        assert_eq!(keyslot(b"{}x"), keyslot(b"{}x"));
        assert_eq!(keyslot(b"foo{{bar}}"), keyslot(b"{bar"));
    }
}
