//! LZF as Redis 7.0.15 ships it (`src/lzf_c.c`, `src/lzf_d.c`: liblzf 3.6
//! with `HLOG 16`, `VERY_FAST 1`, `ULTRA_FAST 0`, `INIT_HTAB 0`).
//!
//! Hand-written rather than taken from the `lzf` crate: that crate is
//! marked deprecated, and its compressor differs from liblzf's (it never
//! starts a back reference in the last four input bytes, and stops on its
//! own output bound), so its output is not the bytes redis-server writes;
//! DUMP must write those. The compressor here follows `lzf_compress`
//! step for step, output bound included (`out_len`: Redis passes the
//! input length less 4, so a compression that saves fewer bytes fails).
//!
//! One thing of Redis's is not reproduced: its hash table lives on the
//! stack, uninitialised (`INIT_HTAB 0`), so a slot left by an earlier call
//! may offer a back reference a clean table would not (any such reference
//! is still checked byte for byte, so Redis's output is always valid LZF,
//! only not always the same for the same input). This compressor starts
//! from an empty table each time, as Redis does on a fresh stack.
//!
//! The decompressor checks every length and offset against the bytes
//! present and the output expected (`lzf_d.c` with `CHECK_INPUT`): corrupt
//! input is an error, never an out-of-bounds access.

const HLOG: u32 = 16;
const HSIZE: usize = 1 << HLOG;
const MAX_LIT: usize = 1 << 5;
const MAX_OFF: usize = 1 << 13;
const MAX_REF: usize = (1 << 8) + (1 << 3);

fn frst(data: &[u8], at: usize) -> u32 {
    (u32::from(data[at]) << 8) | u32::from(data[at + 1])
}

fn next(v: u32, data: &[u8], at: usize) -> u32 {
    (v << 8) | u32::from(data[at + 2])
}

/// liblzf's `IDX` for `HLOG` 16: `((h >> (3*8 - HLOG)) - h*5) & (HSIZE - 1)`.
fn idx(h: u32) -> usize {
    ((h >> (24 - HLOG)).wrapping_sub(h.wrapping_mul(5)) as usize) & (HSIZE - 1)
}

/// `lzf_compress(input, input.len(), out, out_len)`: the compressed bytes,
/// or `None` where liblzf returns 0 (they would not fit in `out_len`).
pub fn compress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    let in_len = input.len();
    if in_len == 0 || out_len == 0 {
        return None;
    }
    // Slots hold a position plus one (0: empty), as liblzf's offsets from
    // `in_data` with a NULL test: position 0 is never a reference.
    let mut htab = vec![0u32; HSIZE];
    let mut out = vec![0u8; out_len + 1];
    let mut op = 1usize; // start run
    let mut lit = 0usize;
    let mut ip = 0usize;
    if in_len < 2 {
        // FRST reads two bytes; liblzf reads past a 1-byte input here, and
        // then copies it as one literal.
        return finish_literals(input, ip, &mut out, op, lit, out_len);
    }
    let mut hval = frst(input, ip);
    while ip + 2 < in_len {
        hval = next(hval, input, ip);
        let slot = idx(hval);
        let reference = htab[slot] as usize; // position + 1, or 0
        htab[slot] = ip as u32 + 1;
        let matched = reference > 1 && {
            let r = reference - 1;
            let off = ip - r - 1;
            off < MAX_OFF && input[r + 2] == input[ip + 2] && input[r] == input[ip] && input[r + 1] == input[ip + 1]
        };
        if matched {
            let r = reference - 1;
            let off = ip - r - 1;
            let mut len = 2usize;
            let maxlen = (in_len - ip - len).min(MAX_REF);
            if op + 3 + 1 >= out_len && op - usize::from(lit == 0) + 3 + 1 >= out_len {
                return None;
            }
            out[op - lit - 1] = (lit as u8).wrapping_sub(1); // stop run
            op -= usize::from(lit == 0); // undo run if length is zero
            // liblzf's loop: sixteen unchecked steps when `maxlen > 16`
            // (it may end one or two past `maxlen`, on bytes that exist),
            // then one step at a time up to `maxlen`.
            let mut mismatch = false;
            if maxlen > 16 {
                for _ in 0..16 {
                    len += 1;
                    if input[r + len] != input[ip + len] {
                        mismatch = true;
                        break;
                    }
                }
            }
            if !mismatch {
                loop {
                    len += 1;
                    if !(len < maxlen && input[r + len] == input[ip + len]) {
                        break;
                    }
                }
            }
            len -= 2; // len is now #octets - 1
            ip += 1;
            if len < 7 {
                out[op] = ((off >> 8) + (len << 5)) as u8;
                op += 1;
            } else {
                out[op] = ((off >> 8) + (7 << 5)) as u8;
                out[op + 1] = (len - 7) as u8;
                op += 2;
            }
            out[op] = off as u8;
            op += 2; // the offset byte, then start run
            lit = 0;
            ip += len + 1;
            if ip + 2 >= in_len {
                break;
            }
            ip -= 2;
            hval = frst(input, ip);
            hval = next(hval, input, ip);
            htab[idx(hval)] = ip as u32 + 1;
            ip += 1;
            hval = next(hval, input, ip);
            htab[idx(hval)] = ip as u32 + 1;
            ip += 1;
        } else {
            if op >= out_len {
                return None;
            }
            (op, lit) = literal(&mut out, op, lit, input[ip]);
            ip += 1;
        }
    }
    finish_literals(input, ip, &mut out, op, lit, out_len)
}

/// Appends literal `byte` at `op` to the run of `lit` before it, closing the
/// run (its length byte) when it is full: the new `op` and run length.
fn literal(out: &mut [u8], op: usize, lit: usize, byte: u8) -> (usize, usize) {
    out[op] = byte;
    let (mut op, mut lit) = (op + 1, lit + 1);
    if lit == MAX_LIT {
        out[op - lit - 1] = (lit as u8).wrapping_sub(1);
        lit = 0;
        op += 1;
    }
    (op, lit)
}

/// The tail of `lzf_compress`: the last input bytes as literals.
fn finish_literals(input: &[u8], mut ip: usize, out: &mut Vec<u8>, mut op: usize, mut lit: usize, out_len: usize) -> Option<Vec<u8>> {
    if op + 3 > out_len {
        return None;
    }
    out.resize(out_len + 3 + MAX_LIT, 0);
    while ip < input.len() {
        (op, lit) = literal(out, op, lit, input[ip]);
        ip += 1;
    }
    out[op - lit - 1] = (lit as u8).wrapping_sub(1); // end run
    op -= usize::from(lit == 0);
    out.truncate(op);
    Some(std::mem::take(out))
}

/// `lzf_decompress` into exactly `expected` bytes: `None` if the input is
/// corrupt or does not expand to exactly that length.
pub fn decompress(input: &[u8], expected: usize) -> Option<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(expected.min(input.len().saturating_mul(MAX_REF + 2)));
    let mut ip = 0usize;
    while ip < input.len() {
        let ctrl = usize::from(input[ip]);
        ip += 1;
        if ctrl < (1 << 5) {
            let n = ctrl + 1;
            if out.len() + n > expected {
                return None;
            }
            out.extend_from_slice(input.get(ip..ip + n)?);
            ip += n;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += usize::from(*input.get(ip)?);
                ip += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + usize::from(*input.get(ip)?) + 1;
            ip += 1;
            len += 2;
            if out.len() + len > expected || back > out.len() {
                return None;
            }
            let from = out.len() - back;
            for i in 0..len {
                let b = out[from + i];
                out.push(b);
            }
        }
    }
    (out.len() == expected).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_does_not_save() {
        let text = b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        let c = compress(text, text.len() - 4).expect("repetitive text compresses");
        assert!(c.len() < 10);
        assert_eq!(decompress(&c, text.len()).as_deref(), Some(&text[..]));
        let mixed: Vec<u8> = (0..5000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8 ^ (i % 7) as u8).collect();
        if let Some(c) = compress(&mixed, mixed.len() - 4) {
            assert_eq!(decompress(&c, mixed.len()), Some(mixed.clone()));
        }
        let noise: Vec<u8> = (0..64u32).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
        assert_eq!(compress(&noise, noise.len() - 4), None, "incompressible input does not fit");
    }

    #[test]
    fn redis_bytes_for_a_known_input() {
        // redis-server 7.0.15: SET k to 200 a's; DUMP k is
        // 00 c3 09 40 c8 <these 9 bytes> <footer>.
        let input = vec![b'a'; 200];
        let c = compress(&input, 196).unwrap();
        assert_eq!(c, [0x01, 0x61, 0x61, 0xe0, 0xbb, 0x00, 0x01, 0x61, 0x61]);
    }

    #[test]
    fn corrupt_input_is_refused() {
        assert_eq!(decompress(&[0x05, b'a'], 6), None, "a literal past the end");
        assert_eq!(decompress(&[0x00, b'a', 0x20, 0x05], 4), None, "a back reference before the start");
        assert_eq!(decompress(&[0x00, b'a', 0xe0], 10), None, "a truncated long reference");
        assert_eq!(decompress(&[0x00, b'a'], 2), None, "shorter than expected");
        assert_eq!(decompress(&[0x01, b'a', b'b'], 1), None, "longer than expected");
        assert_eq!(decompress(&[0x00, b'a', 0x20, 0x00], 4).as_deref(), Some(&b"aaaa"[..]));
    }
}
