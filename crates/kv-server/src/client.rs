//! Small blocking clients for tests and the crash campaign: [`RespClient`] (RESP2 requests,
//! replies parsed with `pmwire_resp::client`) and [`HttpClient`] (HTTP/1.1 with
//! `Content-Length` bodies, keep-alive). Both pipeline: write any number of requests, then
//! read the replies in order. Reads and writes time out after 10 s.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use pmwire_resp::client::{encode_request, parse_reply, Value};

const TIMEOUT: Duration = Duration::from_secs(10);

fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

fn bad(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// Reads more bytes into `buf`; EOF is an error.
fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<()> {
    let mut chunk = [0u8; 64 << 10];
    let n = stream.read(&mut chunk)?;
    if n == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"));
    }
    buf.extend_from_slice(&chunk[..n]);
    Ok(())
}

/// A RESP connection.
#[derive(Debug)]
pub struct RespClient {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl RespClient {
    /// Connects.
    pub fn connect(addr: SocketAddr) -> io::Result<RespClient> {
        Ok(RespClient { stream: connect(addr)?, buf: Vec::new() })
    }

    /// Bounds each read (`None`: none).
    pub fn set_read_timeout(&mut self, timeout: Option<std::time::Duration>) -> io::Result<()> {
        self.stream.set_read_timeout(timeout)
    }

    /// The connection's socket (bytes already read and not parsed are dropped).
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    /// Appends one encoded request to `out` (send it with [`RespClient::write_raw`]).
    pub fn encode<A: AsRef<[u8]>>(args: &[A], out: &mut Vec<u8>) {
        encode_request(args, out);
    }

    /// Writes bytes (encoded requests, or anything).
    pub fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Reads the next reply.
    pub fn read_reply(&mut self) -> io::Result<Value> {
        loop {
            match parse_reply(&self.buf).map_err(|e| bad(e.to_string()))? {
                Some((value, len)) => {
                    self.buf.drain(..len);
                    return Ok(value);
                }
                None => fill(&mut self.stream, &mut self.buf)?,
            }
        }
    }

    /// Sends one command and reads its reply.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> io::Result<Value> {
        let mut out = Vec::new();
        encode_request(args, &mut out);
        self.write_raw(&out)?;
        self.read_reply()
    }

    /// GET: the value, or `None` for a nil reply; an error reply is an error.
    pub fn get(&mut self, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        match self.call(&[&b"GET"[..], key])? {
            Value::Bulk(v) => Ok(Some(v)),
            Value::NilBulk | Value::Null => Ok(None),
            other => Err(bad(format!("GET reply {other:?}"))),
        }
    }
}

/// An HTTP response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The server will close the connection.
    pub close: bool,
    /// The body.
    pub body: Vec<u8>,
}

/// An HTTP/1.1 keep-alive connection.
#[derive(Debug)]
pub struct HttpClient {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl HttpClient {
    /// Connects.
    pub fn connect(addr: SocketAddr) -> io::Result<HttpClient> {
        Ok(HttpClient { stream: connect(addr)?, buf: Vec::new() })
    }

    /// Appends one request to `out`.
    pub fn encode(method: &str, path: &str, body: &[u8], out: &mut Vec<u8>) {
        let head = format!("{method} {path} HTTP/1.1\r\nHost: pmwire\r\nContent-Length: {}\r\n\r\n", body.len());
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(body);
    }

    /// Writes bytes (encoded requests, or anything).
    pub fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Sends one request and reads its response.
    pub fn request(&mut self, method: &str, path: &str, body: &[u8]) -> io::Result<HttpResponse> {
        let mut out = Vec::new();
        HttpClient::encode(method, path, body, &mut out);
        self.write_raw(&out)?;
        self.read_response()
    }

    /// Reads the next response.
    pub fn read_response(&mut self) -> io::Result<HttpResponse> {
        loop {
            if let Some((response, len)) = parse_response(&self.buf)? {
                self.buf.drain(..len);
                return Ok(response);
            }
            fill(&mut self.stream, &mut self.buf)?;
        }
    }
}

/// One response at the start of `buf` and its length, or `None` if incomplete.
fn parse_response(buf: &[u8]) -> io::Result<Option<(HttpResponse, usize)>> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| bad("response head is not UTF-8".into()))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("status line {status_line:?}")))?;
    let (mut len, mut close) = (0usize, false);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            len = value.parse().map_err(|_| bad(format!("Content-Length {value:?}")))?;
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        }
    }
    let start = end + 4;
    // Checked: the length is the server's word, and any usize parses.
    let total = start.checked_add(len).ok_or_else(|| bad(format!("Content-Length {len} past the address space")))?;
    if buf.len() < total {
        return Ok(None);
    }
    Ok(Some((HttpResponse { status, close, body: buf[start..total].to_vec() }, total)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_length_near_2_64_is_an_error_not_a_panic() {
        let hostile = b"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551615\r\n\r\nab";
        let err = parse_response(hostile).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        let big = b"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551616\r\n\r\n";
        assert!(parse_response(big).is_err());
        let fine = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab";
        let (response, len) = parse_response(fine).unwrap().unwrap();
        assert_eq!((response.status, &response.body[..], len), (200, &b"ab"[..], fine.len()));
        assert!(parse_response(&fine[..fine.len() - 1]).unwrap().is_none());
    }
}
