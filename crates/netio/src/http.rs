//! An HTTP/1.1 request codec and response encoder that do no I/O.
//!
//! [`Codec::parse`] reads one request from a connection's segment list, starting `at` bytes in.
//! The head is parsed with `httparse`, in place when it lies in one segment, else from a copy
//! of at most `max_head_bytes` in the codec's scratch. The body is never copied: the request
//! names where it starts ([`Body`]: segment index, offset, length) and [`body_pieces`] walks it
//! as `(segment, buffer, offset, bytes)` pieces, so a server can keep it where it landed.
//!
//! Framing: `Content-Length` bodies only (absent means empty); any `Transfer-Encoding` is
//! refused with 501, since the body's end could not be found without decoding. Keep-alive
//! follows HTTP/1.1 (default on, `Connection: close` turns it off) and HTTP/1.0 (default off,
//! `Connection: keep-alive` turns it on). Several requests in one input are parsed one after
//! another (pipelining). Every error is a 4xx/5xx after which the connection must be closed
//! (the next request's start is unknown): malformed 400, body over `max_body_bytes` 413 (found
//! from the head, before the body arrives), head over `max_head_bytes` or too many headers
//! 431, transfer encodings 501.
//!
//! Invariants: `Request::len_bytes() == head_len + body.len`; a complete request's bytes are
//! all present in the segments (`at + len_bytes <= input length`); the scratch never grows past
//! `max_head_bytes`.

use std::io::Write;

use crate::batch::{Output, Segment};

/// Most headers in one request (more is a 431).
pub const MAX_HEADERS: usize = 32;

/// Size limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest request head (request line and headers, with the blank line).
    pub max_head_bytes: usize,
    /// Largest body.
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_head_bytes: 8192, max_body_bytes: 1 << 20 }
    }
}

/// Request method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// GET
    Get,
    /// HEAD
    Head,
    /// POST
    Post,
    /// PUT
    Put,
    /// DELETE
    Delete,
    /// Anything else (see `Request::method_str`).
    Other,
}

/// Why a request was refused; each maps to a status code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// 400: the request is not valid HTTP/1.x.
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    /// 431: the head is larger than allowed, or has too many headers.
    #[error("request head larger than {max} bytes or more than 32 headers")]
    HeadTooLarge {
        /// The limit.
        max: usize,
    },
    /// 413: Content-Length is over the limit.
    #[error("request body of {len} bytes is larger than the limit of {max} bytes")]
    BodyTooLarge {
        /// Content-Length.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// 501: a Transfer-Encoding (e.g. chunked) was sent.
    #[error("Transfer-Encoding (chunked bodies) is not supported: send Content-Length")]
    TransferEncoding,
}

impl HttpError {
    /// The response status.
    pub fn status(&self) -> u16 {
        match self {
            HttpError::Malformed(_) => 400,
            HttpError::HeadTooLarge { .. } => 431,
            HttpError::BodyTooLarge { .. } => 413,
            HttpError::TransferEncoding => 501,
        }
    }
}

/// Where a body starts in the segment list, and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Body {
    /// Index of the segment holding the first body byte.
    pub seg: usize,
    /// Offset of that byte in the segment's `bytes`.
    pub off: usize,
    /// Body length in bytes.
    pub len: usize,
}

/// A parsed request. Method and path borrow the input or the codec's scratch.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The method.
    pub method: Method,
    /// The method as sent.
    pub method_str: &'a str,
    /// The request target.
    pub path: &'a str,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Whether the connection stays open after the response.
    pub keep_alive: bool,
    /// Bytes of the head, including the blank line.
    pub head_len: usize,
    /// The `Authorization` header's value, if sent (the last one).
    pub authorization: Option<&'a [u8]>,
    /// The body.
    pub body: Body,
}

impl Request<'_> {
    /// Bytes of the whole request (head and body).
    pub fn len_bytes(&self) -> usize {
        self.head_len + self.body.len
    }
}

/// The result of one parse.
#[derive(Debug)]
pub enum Parsed<'a> {
    /// More bytes are needed.
    Incomplete,
    /// A whole request (head and body) is present.
    Complete(Request<'a>),
    /// The request is refused; answer with [`write_error`] and close.
    Error(HttpError),
}

/// The request parser. It keeps no state between calls except its scratch space.
#[derive(Debug)]
pub struct Codec {
    limits: Limits,
    scratch: Vec<u8>,
    /// After an `Incomplete` parse whose head was whole: the request's size.
    incomplete_len: Option<usize>,
}

struct Head<'b> {
    method_str: &'b str,
    path: &'b str,
    minor_version: u8,
    keep_alive: bool,
    content_length: u64,
    authorization: Option<&'b [u8]>,
}

fn method_of(m: &str) -> Method {
    match m {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        _ => Method::Other,
    }
}

fn parse_content_length(v: &[u8]) -> Result<u64, HttpError> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err(HttpError::Malformed("bad Content-Length"));
    }
    Ok(v.iter().fold(0u64, |n, d| n * 10 + (d - b'0') as u64))
}

fn analyze<'b>(req: &httparse::Request<'_, 'b>) -> Result<Head<'b>, HttpError> {
    let method_str = req.method.ok_or(HttpError::Malformed("no method"))?;
    let path = req.path.ok_or(HttpError::Malformed("no path"))?;
    let minor_version = req.version.ok_or(HttpError::Malformed("no version"))?;
    let (mut close, mut keep) = (false, false);
    let mut content_length: Option<u64> = None;
    let mut authorization = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = parse_content_length(h.value)?;
            if content_length.is_some_and(|m| m != n) {
                return Err(HttpError::Malformed("conflicting Content-Length headers"));
            }
            content_length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(HttpError::TransferEncoding);
        } else if h.name.eq_ignore_ascii_case("authorization") {
            authorization = Some(h.value);
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let t = token.trim_ascii();
                close |= t.eq_ignore_ascii_case(b"close");
                keep |= t.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    let keep_alive = if minor_version >= 1 { !close } else { keep && !close };
    Ok(Head { method_str, path, minor_version, keep_alive, content_length: content_length.unwrap_or(0), authorization })
}

/// Segment index and offset of byte `at` of the input; `None` if `at` is at or past the end.
fn locate(segs: &[Segment<'_>], mut at: usize) -> Option<(usize, usize)> {
    for (i, s) in segs.iter().enumerate() {
        if at < s.bytes.len() {
            return Some((i, at));
        }
        at -= s.bytes.len();
    }
    None
}

enum HeadParse<'b> {
    Partial,
    Done(usize, Head<'b>),
}

fn parse_head<'b>(bytes: &'b [u8], limits: &Limits) -> Result<HeadParse<'b>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(bytes) {
        Ok(httparse::Status::Complete(n)) if n > limits.max_head_bytes => {
            Err(HttpError::HeadTooLarge { max: limits.max_head_bytes })
        }
        Ok(httparse::Status::Complete(n)) => Ok(HeadParse::Done(n, analyze(&req)?)),
        Ok(httparse::Status::Partial) => Ok(HeadParse::Partial),
        Err(httparse::Error::TooManyHeaders) => Err(HttpError::HeadTooLarge { max: limits.max_head_bytes }),
        Err(httparse::Error::Version) => Err(HttpError::Malformed("bad HTTP version")),
        Err(httparse::Error::Token) | Err(httparse::Error::Status) => Err(HttpError::Malformed("bad request line")),
        Err(_) => Err(HttpError::Malformed("bad header")),
    }
}

impl Codec {
    /// A codec with these limits (the scratch is allocated once, `max_head_bytes` long).
    pub fn new(limits: Limits) -> Codec {
        assert!(limits.max_head_bytes >= 16, "max_head_bytes too small for any request");
        Codec { limits, scratch: Vec::with_capacity(limits.max_head_bytes), incomplete_len: None }
    }

    /// After [`Codec::parse`] returned [`Parsed::Incomplete`]: the whole request's size in
    /// bytes (head and body) if its head was complete, so that a server can wait for (and
    /// grant room for) exactly that many; `None` if the head itself is incomplete.
    pub fn incomplete_len(&self) -> Option<usize> {
        self.incomplete_len
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Parses the request that starts `at` bytes into `segs`.
    pub fn parse<'a>(&'a mut self, segs: &'a [Segment<'a>], at: usize) -> Parsed<'a> {
        self.incomplete_len = None;
        let Some((si, off)) = locate(segs, at) else { return Parsed::Incomplete };
        let avail: usize = segs[si..].iter().map(|s| s.bytes.len()).sum::<usize>() - off;
        let first = &segs[si].bytes[off..];
        let limits = self.limits;
        let (head_len, head) = match parse_head(first, &limits) {
            Err(e) => return Parsed::Error(e),
            Ok(HeadParse::Done(n, h)) => (n, h),
            Ok(HeadParse::Partial) if first.len() == avail => {
                return too_large_or_incomplete(avail, &limits);
            }
            Ok(HeadParse::Partial) => {
                // The head may span segments: copy at most max_head_bytes of it.
                self.scratch.clear();
                let want = avail.min(limits.max_head_bytes);
                self.scratch.extend_from_slice(&first[..first.len().min(want)]);
                for s in &segs[si + 1..] {
                    let room = want - self.scratch.len();
                    if room == 0 {
                        break;
                    }
                    self.scratch.extend_from_slice(&s.bytes[..s.bytes.len().min(room)]);
                }
                match parse_head(&self.scratch, &limits) {
                    Err(e) => return Parsed::Error(e),
                    Ok(HeadParse::Done(n, h)) => (n, h),
                    Ok(HeadParse::Partial) => return too_large_or_incomplete(avail, &limits),
                }
            }
        };
        if head.content_length > limits.max_body_bytes as u64 {
            return Parsed::Error(HttpError::BodyTooLarge { len: head.content_length, max: limits.max_body_bytes });
        }
        let body_len = head.content_length as usize;
        if avail < head_len + body_len {
            self.incomplete_len = Some(head_len + body_len);
            return Parsed::Incomplete;
        }
        let (bseg, boff) = match locate(&segs[si..], off + head_len) {
            Some((i, o)) => (si + i, o),
            None => (segs.len(), 0), // empty body at the very end of the input
        };
        Parsed::Complete(Request {
            method: method_of(head.method_str),
            method_str: head.method_str,
            path: head.path,
            minor_version: head.minor_version,
            keep_alive: head.keep_alive,
            head_len,
            authorization: head.authorization,
            body: Body { seg: bseg, off: boff, len: body_len },
        })
    }
}

fn too_large_or_incomplete(avail: usize, limits: &Limits) -> Parsed<'static> {
    if avail >= limits.max_head_bytes {
        Parsed::Error(HttpError::HeadTooLarge { max: limits.max_head_bytes })
    } else {
        Parsed::Incomplete
    }
}

/// One contiguous piece of a body.
#[derive(Clone, Copy, Debug)]
pub struct Piece<'a> {
    /// Index of the segment.
    pub seg: usize,
    /// Source buffer holding the bytes.
    pub buf: u32,
    /// Offset of the bytes in that buffer.
    pub offset: u32,
    /// The bytes.
    pub bytes: &'a [u8],
}

/// Iterator over a body's pieces, in order.
#[derive(Clone, Debug)]
pub struct BodyPieces<'a> {
    segs: &'a [Segment<'a>],
    seg: usize,
    off: usize,
    left: usize,
}

impl<'a> Iterator for BodyPieces<'a> {
    type Item = Piece<'a>;

    fn next(&mut self) -> Option<Piece<'a>> {
        if self.left == 0 {
            return None;
        }
        // Skip empty segments (the server never makes them; hand-built inputs may).
        while self.segs[self.seg].bytes.len() == self.off {
            self.seg += 1;
            self.off = 0;
        }
        let s = &self.segs[self.seg];
        let n = (s.bytes.len() - self.off).min(self.left);
        let p = Piece {
            seg: self.seg,
            buf: s.buf,
            offset: s.offset + self.off as u32,
            bytes: &s.bytes[self.off..self.off + n],
        };
        self.left -= n;
        self.seg += 1;
        self.off = 0;
        Some(p)
    }
}

/// The pieces of `body` in `segs` (the same segments it was parsed from).
pub fn body_pieces<'a>(segs: &'a [Segment<'a>], body: &Body) -> BodyPieces<'a> {
    BodyPieces { segs, seg: body.seg, off: body.off, left: body.len }
}

/// The reason phrase of a status code.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Writes a response head announcing `content_length` body bytes; the caller appends the body
/// (bytes, or source buffer ranges with `Output::push_buf`).
pub fn write_head(out: &mut Output, status: u16, keep_alive: bool, content_length: usize, content_type: Option<&str>) {
    assert!((100..1000).contains(&status), "status {status} out of range");
    let conn = if keep_alive { "keep-alive" } else { "close" };
    // Writing to an Output cannot fail.
    let _ = write!(out, "HTTP/1.1 {status} {}\r\nConnection: {conn}\r\n", reason(status));
    // 1xx, 204 and 304 responses have no body and must not announce one (RFC 9110 §8.6).
    if status >= 200 && status != 204 && status != 304 {
        let _ = write!(out, "Content-Length: {content_length}\r\n");
    } else {
        assert_eq!(content_length, 0, "status {status} has no body");
    }
    if let Some(ct) = content_type {
        let _ = write!(out, "Content-Type: {ct}\r\n");
    }
    out.push_bytes(b"\r\n");
}

/// Writes a whole response with an owned body.
pub fn write_response(out: &mut Output, status: u16, keep_alive: bool, content_type: Option<&str>, body: &[u8]) {
    write_head(out, status, keep_alive, body.len(), content_type);
    out.push_bytes(body);
}

/// Writes the response for `err` (plain text, `Connection: close`); close after sending it.
pub fn write_error(out: &mut Output, err: &HttpError) {
    let mut msg = [0u8; 160];
    let mut cur = std::io::Cursor::new(&mut msg[..]);
    let _ = writeln!(cur, "{err}");
    let n = cur.position() as usize;
    write_response(out, err.status(), false, Some("text/plain"), &msg[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffers::HeapBuffers;

    fn segs_of<'a>(parts: &[&'a [u8]]) -> Vec<Segment<'a>> {
        parts.iter().enumerate().map(|(i, b)| Segment { buf: i as u32, offset: 0, bytes: b }).collect()
    }

    fn body_bytes(segs: &[Segment<'_>], b: &Body) -> Vec<u8> {
        body_pieces(segs, b).flat_map(|p| p.bytes.iter().copied()).collect()
    }

    const REQ: &[u8] = b"POST /k1 HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world";

    #[test]
    fn whole_request_in_one_segment() {
        let mut c = Codec::new(Limits::default());
        let segs = segs_of(&[REQ]);
        let Parsed::Complete(r) = c.parse(&segs, 0) else { panic!() };
        assert_eq!(r.method, Method::Post);
        assert_eq!(r.path, "/k1");
        assert!(r.keep_alive);
        assert_eq!(r.len_bytes(), REQ.len());
        assert_eq!(body_bytes(&segs, &r.body), b"hello world");
    }

    #[test]
    fn split_at_every_position_into_two_and_three_segments() {
        let mut c = Codec::new(Limits::default());
        let two = [REQ, REQ].concat();
        for i in 0..=two.len() {
            let segs = segs_of(&[&two[..i], &two[i..]]);
            let mut at = 0;
            for _ in 0..2 {
                let Parsed::Complete(r) = c.parse(&segs, at) else { panic!("split at {i}") };
                assert_eq!(r.path, "/k1");
                let len = r.len_bytes();
                let body = r.body;
                assert_eq!(body_bytes(&segs, &body), b"hello world", "split at {i}");
                at += len;
            }
            assert!(matches!(c.parse(&segs, at), Parsed::Incomplete));
            for j in i..=two.len() {
                let segs = segs_of(&[&two[..i], &two[i..j], &two[j..]]);
                let Parsed::Complete(r) = c.parse(&segs, 0) else { panic!("split at {i},{j}") };
                let (len, body) = (r.len_bytes(), r.body);
                assert_eq!(body_bytes(&segs, &body), b"hello world");
                let Parsed::Complete(r) = c.parse(&segs, len) else { panic!("second at {i},{j}") };
                let body = r.body;
                assert_eq!(body_bytes(&segs, &body), b"hello world");
            }
        }
    }

    #[test]
    fn every_prefix_is_incomplete() {
        let mut c = Codec::new(Limits::default());
        for i in 0..REQ.len() {
            let segs = segs_of(&[&REQ[..i]]);
            assert!(matches!(c.parse(&segs, 0), Parsed::Incomplete), "prefix {i}");
            // Once the head is whole, the request's size is known.
            let head = REQ.len() - 11;
            assert_eq!(c.incomplete_len(), (i >= head).then_some(REQ.len()), "prefix {i}");
        }
    }

    #[test]
    fn keep_alive_rules() {
        let mut c = Codec::new(Limits::default());
        let cases: [(&[u8], bool); 5] = [
            (b"GET / HTTP/1.1\r\n\r\n", true),
            (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
            (b"GET / HTTP/1.1\r\nConnection: upgrade, close\r\n\r\n", false),
        ];
        for (req, ka) in cases {
            let segs = segs_of(&[req]);
            let Parsed::Complete(r) = c.parse(&segs, 0) else { panic!() };
            assert_eq!(r.keep_alive, ka, "{}", String::from_utf8_lossy(req));
            assert_eq!(r.body.len, 0);
        }
    }

    fn error_of(c: &mut Codec, parts: &[&[u8]]) -> HttpError {
        let segs = segs_of(parts);
        match c.parse(&segs, 0) {
            Parsed::Error(e) => e,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn errors_map_to_statuses() {
        let mut c = Codec::new(Limits { max_head_bytes: 256, max_body_bytes: 100 });
        assert_eq!(error_of(&mut c, &[b"GET / HTTP/1.1\r\nContent-Length: 101\r\n\r\n"]).status(), 413);
        assert_eq!(error_of(&mut c, &[b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"]).status(), 501);
        assert_eq!(error_of(&mut c, &[b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"]).status(), 400);
        assert_eq!(
            error_of(&mut c, &[b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"]).status(),
            400
        );
        assert_eq!(error_of(&mut c, &[b"GE T / HTTP/1.1\r\n\r\n"]).status(), 400);
        assert_eq!(error_of(&mut c, &[b"GET / HTTP/2.0\r\n\r\n"]).status(), 400);
        let long = vec![b'a'; 300];
        // An unterminated head as long as the limit, in one segment and across two.
        assert_eq!(error_of(&mut c, &[b"GET /", &long]).status(), 431);
        assert_eq!(error_of(&mut c, &[b"GET /", &long[..100], &long[100..]]).status(), 431);
        // A complete head over the limit.
        let mut big = b"GET /".to_vec();
        big.extend_from_slice(&long);
        big.extend_from_slice(b" HTTP/1.1\r\n\r\n");
        assert_eq!(error_of(&mut c, &[&big]).status(), 431);
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..40 {
            many.extend_from_slice(format!("h{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        let mut c2 = Codec::new(Limits { max_head_bytes: 4096, max_body_bytes: 100 });
        assert_eq!(error_of(&mut c2, &[&many]).status(), 431);
        // At the body limit exactly: fine.
        let mut ok = b"PUT /x HTTP/1.1\r\nContent-Length: 100\r\n\r\n".to_vec();
        ok.extend_from_slice(&[7u8; 100]);
        let segs = segs_of(&[&ok]);
        assert!(matches!(c.parse(&segs, 0), Parsed::Complete(_)));
    }

    /// Content-Lengths at and past 2^64: refused from the head, before any
    /// arithmetic with them (19 digits at most, so the fold cannot overflow).
    #[test]
    fn hostile_content_lengths_are_refused() {
        let mut c = Codec::new(Limits { max_head_bytes: 256, max_body_bytes: 100 });
        for (len, status) in [
            ("9999999999999999999", 413),
            ("18446744073709551615", 400),
            ("18446744073709551616", 400),
            ("99999999999999999999999", 400),
            ("-1", 400),
            ("+5", 400),
        ] {
            let req = format!("PUT /x HTTP/1.1\r\nContent-Length: {len}\r\n\r\n");
            assert_eq!(error_of(&mut c, &[req.as_bytes()]).status(), status, "Content-Length: {len}");
        }
        let err = error_of(&mut c, &[b"PUT /x HTTP/1.1\r\nContent-Length: 9999999999999999999\r\n\r\n"]);
        assert_eq!(err, HttpError::BodyTooLarge { len: 9_999_999_999_999_999_999, max: 100 });
    }

    #[test]
    fn encoder_writes_heads_and_errors() {
        let bufs = HeapBuffers::new(1, 64);
        let mut out = Output::new();
        write_response(&mut out, 200, true, None, b"abc");
        assert_eq!(out.to_vec(&bufs), b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabc");
        let mut out = Output::new();
        write_error(&mut out, &HttpError::BodyTooLarge { len: 5, max: 4 });
        let text = String::from_utf8(out.to_vec(&bufs)).unwrap();
        assert!(text.starts_with("HTTP/1.1 413 Content Too Large\r\n"), "{text}");
        assert!(text.contains("Connection: close\r\n"));
        assert!(text.ends_with("larger than the limit of 4 bytes\n"), "{text}");
    }
}
