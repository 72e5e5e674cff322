//! Reply encoding, RESP2 and RESP3, into a [`ReplySink`].
//!
//! The sink receives protocol bytes through [`ReplySink::bytes`] and stored
//! string values through [`ReplySink::value`], a handle the engine gave out,
//! so a server can send a value from the buffer it is stored in (a
//! gather-send part) without copying it. `Vec<u8>` is a sink for tests and
//! for engines whose handles are plain bytes.
//!
//! [`Out`] writes typed replies for one connection's protocol version with
//! Redis 7.0's fallbacks in RESP2: maps become flat arrays, sets arrays,
//! doubles bulk strings (`%.17g`, `inf`, `-inf`), verbatim strings bulk
//! strings, and the RESP3 null `_` becomes `$-1` or `*-1`.

use crate::numbers::format_double;

/// The protocol version of a connection (`HELLO 2` / `HELLO 3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// RESP2, every connection's initial protocol.
    #[default]
    Resp2,
    /// RESP3.
    Resp3,
}

/// Where replies go. `V` is the engine's stored-value handle.
pub trait ReplySink<V> {
    /// Appends protocol bytes.
    fn bytes(&mut self, data: &[u8]);
    /// Appends a stored value's `len` bytes (the bulk header before it and the
    /// `\r\n` after it are sent through [`ReplySink::bytes`]). The handle
    /// stays readable until the replies are sent, even if a later command in
    /// the batch overwrites or deletes the key: the engine must defer freeing.
    fn value(&mut self, value: &V, len: u64);
}

impl<V: AsRef<[u8]>> ReplySink<V> for Vec<u8> {
    fn bytes(&mut self, data: &[u8]) {
        self.extend_from_slice(data);
    }
    fn value(&mut self, value: &V, len: u64) {
        let v = value.as_ref();
        assert!(v.len() as u64 == len);
        self.extend_from_slice(v);
    }
}

/// Typed reply writer over a sink for one protocol version.
pub struct Out<'s, V, S: ReplySink<V> + ?Sized> {
    sink: &'s mut S,
    /// The protocol replies are written in.
    pub protocol: Protocol,
    _v: std::marker::PhantomData<fn(&V)>,
}

impl<'s, V, S: ReplySink<V> + ?Sized> Out<'s, V, S> {
    /// A writer for `protocol` into `sink`.
    pub fn new(sink: &'s mut S, protocol: Protocol) -> Self {
        Out { sink, protocol, _v: std::marker::PhantomData }
    }

    fn header(&mut self, tag: u8, n: i64) {
        let mut buf = [0u8; 24];
        buf[0] = tag;
        let mut len = 1 + write_i64(n, &mut buf[1..]);
        buf[len] = b'\r';
        buf[len + 1] = b'\n';
        len += 2;
        self.sink.bytes(&buf[..len]);
    }

    /// Raw protocol bytes.
    pub fn raw(&mut self, data: &[u8]) {
        self.sink.bytes(data);
    }

    /// `+OK`.
    pub fn ok(&mut self) {
        self.sink.bytes(b"+OK\r\n");
    }

    /// A simple string (`+text`); `text` must hold no `\r` or `\n`.
    pub fn simple(&mut self, text: &[u8]) {
        assert!(!text.contains(&b'\r'));
        assert!(!text.contains(&b'\n'));
        self.sink.bytes(b"+");
        self.sink.bytes(text);
        self.sink.bytes(b"\r\n");
    }

    /// An error reply; `text` includes the code (`ERR ...`, `WRONGTYPE ...`).
    /// `\r` and `\n` are replaced by spaces, as Redis does.
    pub fn error(&mut self, text: &[u8]) {
        self.sink.bytes(b"-");
        if text.iter().any(|&c| c == b'\r' || c == b'\n') {
            let clean: Vec<u8> = text.iter().map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }).collect();
            self.sink.bytes(&clean);
        } else {
            self.sink.bytes(text);
        }
        self.sink.bytes(b"\r\n");
    }

    /// An integer (`:n`).
    pub fn integer(&mut self, n: i64) {
        self.header(b':', n);
    }

    /// A bulk string.
    pub fn bulk(&mut self, data: &[u8]) {
        self.header(b'$', data.len() as i64);
        self.sink.bytes(data);
        self.sink.bytes(b"\r\n");
    }

    /// A stored value as a bulk string, sent from its handle.
    pub fn stored(&mut self, value: &V, len: u64) {
        self.header(b'$', len as i64);
        self.sink.value(value, len);
        self.sink.bytes(b"\r\n");
    }

    /// The null a missing string gives: `$-1` in RESP2, `_` in RESP3.
    pub fn null(&mut self) {
        match self.protocol {
            Protocol::Resp2 => self.sink.bytes(b"$-1\r\n"),
            Protocol::Resp3 => self.sink.bytes(b"_\r\n"),
        }
    }

    /// The null array: `*-1` in RESP2, `_` in RESP3.
    pub fn null_array(&mut self) {
        match self.protocol {
            Protocol::Resp2 => self.sink.bytes(b"*-1\r\n"),
            Protocol::Resp3 => self.sink.bytes(b"_\r\n"),
        }
    }

    /// An array header for `n` elements.
    pub fn array(&mut self, n: usize) {
        self.header(b'*', n as i64);
    }

    /// A push header for `n` elements (RESP3 `>n`; RESP2: an array), what
    /// pub/sub's confirmations and messages are.
    pub fn push(&mut self, n: usize) {
        match self.protocol {
            Protocol::Resp2 => self.header(b'*', n as i64),
            Protocol::Resp3 => self.header(b'>', n as i64),
        }
    }

    /// A map header for `n` pairs (RESP2: an array of `2n`).
    pub fn map(&mut self, n: usize) {
        match self.protocol {
            Protocol::Resp2 => self.header(b'*', 2 * n as i64),
            Protocol::Resp3 => self.header(b'%', n as i64),
        }
    }

    /// A set header for `n` elements (RESP2: an array).
    pub fn set(&mut self, n: usize) {
        match self.protocol {
            Protocol::Resp2 => self.header(b'*', n as i64),
            Protocol::Resp3 => self.header(b'~', n as i64),
        }
    }

    /// A double as Redis 7.0's `addReplyDouble`.
    pub fn double(&mut self, d: f64) {
        let mut text = Vec::with_capacity(32);
        format_double(d, &mut text);
        match self.protocol {
            Protocol::Resp2 => self.bulk(&text),
            Protocol::Resp3 => {
                self.sink.bytes(b",");
                self.sink.bytes(&text);
                self.sink.bytes(b"\r\n");
            }
        }
    }

    /// A verbatim string (RESP3 `=len\r\ntxt:...`; RESP2 a bulk string).
    pub fn verbatim(&mut self, format: &[u8; 3], text: &[u8]) {
        match self.protocol {
            Protocol::Resp2 => self.bulk(text),
            Protocol::Resp3 => {
                self.header(b'=', text.len() as i64 + 4);
                self.sink.bytes(format);
                self.sink.bytes(b":");
                self.sink.bytes(text);
                self.sink.bytes(b"\r\n");
            }
        }
    }
}

/// Writes `n` in decimal into `buf`, returning the length.
pub fn write_i64(n: i64, buf: &mut [u8]) -> usize {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    let mut v = n.unsigned_abs();
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let mut len = 0;
    if n < 0 {
        buf[0] = b'-';
        len = 1;
    }
    let digits = &tmp[i..];
    buf[len..len + digits.len()].copy_from_slice(digits);
    len + digits.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(f: impl Fn(&mut Out<'_, Vec<u8>, Vec<u8>>)) -> (String, String) {
        let mut a: Vec<u8> = Vec::new();
        let mut b: Vec<u8> = Vec::new();
        f(&mut Out::new(&mut a, Protocol::Resp2));
        f(&mut Out::new(&mut b, Protocol::Resp3));
        (String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap())
    }

    #[test]
    fn resp2_and_resp3_encodings() {
        assert_eq!(both(|o| o.null()), ("$-1\r\n".into(), "_\r\n".into()));
        assert_eq!(both(|o| o.null_array()), ("*-1\r\n".into(), "_\r\n".into()));
        assert_eq!(both(|o| o.map(2)), ("*4\r\n".into(), "%2\r\n".into()));
        assert_eq!(both(|o| o.set(2)), ("*2\r\n".into(), "~2\r\n".into()));
        assert_eq!(both(|o| o.double(1.5)), ("$3\r\n1.5\r\n".into(), ",1.5\r\n".into()));
        assert_eq!(both(|o| o.double(f64::INFINITY)), ("$3\r\ninf\r\n".into(), ",inf\r\n".into()));
        assert_eq!(both(|o| o.integer(i64::MIN)), (":-9223372036854775808\r\n".into(), ":-9223372036854775808\r\n".into()));
        assert_eq!(both(|o| o.verbatim(b"txt", b"hi")), ("$2\r\nhi\r\n".into(), "=6\r\ntxt:hi\r\n".into()));
        assert_eq!(both(|o| o.error(b"ERR a\r\nb")), ("-ERR a  b\r\n".into(), "-ERR a  b\r\n".into()));
        let v = vec![b'x'; 3];
        assert_eq!(both(|o| o.stored(&v, 3)), ("$3\r\nxxx\r\n".into(), "$3\r\nxxx\r\n".into()));
    }
}
