//! The bytes of etcd's JSON gateway, pure: base64, the request, the
//! response head and body, and what a PUT or a status reply says.
//!
//! Invariants: a response is taken only with a `Content-Length` (no
//! chunked bodies; etcd 3.4's gateway sends small replies in one write, so
//! Go's `net/http` sets the length) of at most [`MAX_BODY_BYTES`]; nothing
//! is consumed until a whole response is present.

use anyhow::{anyhow, bail, Context, Result};

/// The largest response body taken.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Headers parsed at most.
const MAX_HEADERS: usize = 32;

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Appends the standard (padded) base64 of `bytes` to `out`.
pub fn base64_append(bytes: &[u8], out: &mut String) {
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
}

/// Appends `POST path` with a JSON `body` to `out`, keep-alive HTTP/1.1.
pub fn append_post(host: &str, path: &str, body: &[u8], out: &mut Vec<u8>) {
    use std::io::Write;
    assert!(path.starts_with('/'), "path {path:?}");
    write!(out, "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len())
        .expect("writing to a Vec");
    out.extend_from_slice(body);
}

/// Appends the JSON body of `/v3/kv/put` for `key` and `value` to `out`.
pub fn append_put_body(key: &[u8], value: &[u8], out: &mut String) {
    out.push_str("{\"key\":\"");
    base64_append(key, out);
    out.push_str("\",\"value\":\"");
    base64_append(value, out);
    out.push_str("\"}");
}

/// A whole response at the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct Response<'a> {
    /// The status code.
    pub status: u16,
    /// The body (`Content-Length` bytes).
    pub body: &'a [u8],
    /// Bytes the head and body take.
    pub len: usize,
}

/// Parses one response at the start of `buf`: `None` if it is not all
/// there yet; an error if it is not HTTP/1.1 with a `Content-Length`.
pub fn parse_response(buf: &[u8]) -> Result<Option<Response<'_>>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Response::new(&mut headers);
    let head_len = match head.parse(buf).map_err(|e| anyhow!("malformed HTTP response head: {e}"))? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return Ok(None),
    };
    let status = head.code.ok_or_else(|| anyhow!("HTTP response without a status"))?;
    let mut length = None;
    for h in head.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            bail!("chunked or encoded response (Transfer-Encoding: {}) not supported", String::from_utf8_lossy(h.value));
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(h.value).context("Content-Length is not text")?;
            let n: usize = text.trim().parse().with_context(|| format!("Content-Length {text:?}"))?;
            if length.is_some_and(|l| l != n) {
                bail!("two different Content-Length headers");
            }
            length = Some(n);
        }
    }
    let length = length.ok_or_else(|| anyhow!("HTTP {status} response without Content-Length"))?;
    if length > MAX_BODY_BYTES {
        bail!("response body of {length} bytes (at most {MAX_BODY_BYTES} taken)");
    }
    let end = head_len + length;
    if buf.len() < end {
        return Ok(None);
    }
    Ok(Some(Response { status, body: &buf[head_len..end], len: end }))
}

/// A gateway integer: uint64 fields come as JSON strings, others as numbers.
fn json_u64(value: &serde_json::Value) -> Option<u64> {
    match value {
        serde_json::Value::String(s) => s.parse().ok(),
        other => other.as_u64(),
    }
}

fn json_body(status: u16, body: &[u8]) -> Result<serde_json::Value> {
    let json: serde_json::Value = serde_json::from_slice(body)
        .with_context(|| format!("HTTP {status} body is not JSON: {:?}", String::from_utf8_lossy(body)))?;
    if status != 200 {
        let message = json.get("message").or_else(|| json.get("error")).and_then(|m| m.as_str()).unwrap_or("");
        bail!("HTTP {status}: {message}");
    }
    Ok(json)
}

/// The revision a `/v3/kv/put` reply reports; an error unless it is a 200
/// with a header carrying a revision.
pub fn check_put_reply(status: u16, body: &[u8]) -> Result<u64> {
    let json = json_body(status, body)?;
    let revision = json.get("header").and_then(|h| h.get("revision")).and_then(json_u64);
    revision.ok_or_else(|| anyhow!("put reply without header.revision: {json}"))
}

/// Whether the member that sent this `/v3/maintenance/status` reply is the
/// leader (`header.member_id == leader`).
pub fn status_is_leader(status: u16, body: &[u8]) -> Result<bool> {
    let json = json_body(status, body)?;
    let member = json.get("header").and_then(|h| h.get("member_id")).and_then(json_u64);
    let member = member.ok_or_else(|| anyhow!("status reply without header.member_id: {json}"))?;
    // No leader yet: the field is absent or 0.
    Ok(json.get("leader").and_then(json_u64).is_some_and(|leader| leader == member))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PUT_REPLY: &[u8] = b"HTTP/1.1 200 OK\r\n\
Access-Control-Allow-Origin: *\r\n\
Content-Type: application/json\r\n\
Grpc-Metadata-Content-Type: application/grpc\r\n\
Date: Tue, 24 Nov 2026 23:02:56 GMT\r\n\
Content-Length: 114\r\n\r\n\
{\"header\":{\"cluster_id\":\"15118495548433857066\",\"member_id\":\"13668033151171901709\",\"revision\":\"2\",\"raft_term\":\"2\"}}";

    const STATUS_REPLY: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 258\r\n\r\n\
{\"header\":{\"cluster_id\":\"15118495548433857066\",\"member_id\":\"13668033151171901709\",\"revision\":\"2\",\"raft_term\":\"2\"},\
\"version\":\"3.4.23\",\"dbSize\":\"36864\",\"leader\":\"13668033151171901709\",\"raftIndex\":\"6\",\"raftTerm\":\"2\",\
\"raftAppliedIndex\":\"6\",\"dbSizeInUse\":\"24576\"}";

    const BAD_REQUEST: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: 62\r\n\r\n\
{\"error\":\"unexpected EOF\",\"message\":\"unexpected EOF\",\"code\":3}";

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (plain, coded) in [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("foobar", "Zm9vYmFy")] {
            let mut out = String::new();
            base64_append(plain.as_bytes(), &mut out);
            assert_eq!(out, coded, "{plain:?}");
        }
        let mut body = String::new();
        append_put_body(b"foo", b"bar", &mut body);
        assert_eq!(body, r#"{"key":"Zm9v","value":"YmFy"}"#);
    }

    #[test]
    fn a_request_has_its_length() {
        let mut out = Vec::new();
        append_post("127.0.0.1:2379", "/v3/kv/put", b"{}", &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("POST /v3/kv/put HTTP/1.1\r\nHost: 127.0.0.1:2379\r\n"), "{text}");
        assert!(text.ends_with("Content-Length: 2\r\n\r\n{}"), "{text}");
    }

    #[test]
    fn parses_an_etcd_put_reply_and_its_revision() {
        let r = parse_response(PUT_REPLY).unwrap().unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.len, PUT_REPLY.len());
        assert_eq!(check_put_reply(r.status, r.body).unwrap(), 2);
    }

    #[test]
    fn incomplete_responses_are_not_taken() {
        for cut in [0, 10, 40, PUT_REPLY.len() - 1] {
            assert_eq!(parse_response(&PUT_REPLY[..cut]).unwrap(), None, "cut at {cut}");
        }
        let mut two = PUT_REPLY.to_vec();
        two.extend_from_slice(PUT_REPLY);
        assert_eq!(parse_response(&two).unwrap().unwrap().len, PUT_REPLY.len(), "one response at a time");
    }

    #[test]
    fn finds_the_leader_in_a_status_reply() {
        let r = parse_response(STATUS_REPLY).unwrap().unwrap();
        assert!(status_is_leader(r.status, r.body).unwrap());
        let follower = br#"{"header":{"member_id":"1"},"leader":"2"}"#;
        assert!(!status_is_leader(200, follower).unwrap());
        assert!(!status_is_leader(200, br#"{"header":{"member_id":"1"}}"#).unwrap(), "no leader yet");
    }

    #[test]
    fn bad_replies_fail() {
        let r = parse_response(BAD_REQUEST).unwrap().unwrap();
        assert_eq!(r.status, 400);
        let e = check_put_reply(r.status, r.body).unwrap_err().to_string();
        assert!(e.contains("400") && e.contains("unexpected EOF"), "{e}");
        assert!(check_put_reply(200, b"{\"header\":{}}").is_err(), "no revision");
        assert!(check_put_reply(200, b"not json").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}").is_err(), "no length");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").is_err());
        assert!(parse_response(b"SSH-2.0-OpenSSH\r\n\r\n").is_err(), "not HTTP");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n").is_err(), "too long");
    }
}
