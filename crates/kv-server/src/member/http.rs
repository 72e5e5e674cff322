//! HTTP on a member: `POST|PUT /kv/{key}`, `GET /kv/{key}`, `DELETE
//! /kv/{key}` as the single-node server serves them (its parser,
//! `pmwire_netio::http`, and its `Authorization: Bearer <password>` rule
//! when a password is set), on the leader or a follower alike.
//!
//! Each request becomes the RESP command it means (`SET key body`, `GET
//! key`, `DEL key`) on the connection's queue, so it takes the same path:
//! a write is an entry committed on a majority (forwarded by a follower),
//! a GET a linearizable read (ReadIndex). The RESP reply is then said in
//! HTTP: SET's `+OK` is 204; GET's value 200 with the bytes, its nil 404,
//! WRONGTYPE 409; DEL's `:1` 200 and `:0` 404; `-CLUSTERDOWN` 503; another
//! error 500 with its text. Other paths are 404 (the user log, `/log`, is
//! the single-node server's alone), other methods 405; the codec's
//! refusals (400, 413, 431, 501) close the connection.

use std::collections::VecDeque;

use pmwire_netio::http::{self, body_pieces, Method, Parsed};
use pmwire_netio::{ConnId, Input, Reply};
use transport::Transport;

use super::{Member, Slot, MAX_QUEUE};

/// What an HTTP request's RESP reply is translated as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Want {
    /// SET's reply.
    Set,
    /// GET's reply.
    Get,
    /// DEL's reply.
    Del,
    /// The slot already holds the whole HTTP response.
    Raw,
}

/// A connection's HTTP requests in the order of its queue, each with its
/// keep-alive.
pub(super) type Pending = VecDeque<(Want, bool)>;

/// An HTTP response.
pub(super) fn response(status: u16, keep: bool, body: &[u8]) -> Vec<u8> {
    let conn = if keep { "keep-alive" } else { "close" };
    let kind = if body.is_empty() { "" } else { "Content-Type: text/plain\r\n" };
    let mut out = format!("HTTP/1.1 {status} {}\r\n{kind}Content-Length: {}\r\nConnection: {conn}\r\n\r\n", http::reason(status), body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

/// The HTTP response for a RESP `reply` to a request wanting `want`.
pub(super) fn translate(want: Want, keep: bool, reply: &[u8]) -> Vec<u8> {
    if want == Want::Raw {
        return reply.to_vec();
    }
    if let Some(text) = reply.strip_prefix(b"-") {
        let text = text.strip_suffix(b"\r\n").unwrap_or(text);
        let status = match text {
            t if t.starts_with(b"CLUSTERDOWN") => 503,
            t if t.starts_with(b"WRONGTYPE") => 409,
            t if t.starts_with(b"OOM") => 507,
            _ => 500,
        };
        let mut body = text.to_vec();
        body.push(b'\n');
        return response(status, keep, &body);
    }
    match want {
        Want::Set => response(204, keep, b""),
        Want::Del => response(if reply.starts_with(b":0") { 404 } else { 200 }, keep, b""),
        Want::Get => match bulk(reply) {
            Some(value) => {
                let mut out = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n", value.len(), if keep { "keep-alive" } else { "close" }).into_bytes();
                out.extend_from_slice(value);
                out
            }
            None => response(404, keep, b""),
        },
        Want::Raw => unreachable!("handled first"),
    }
}

/// A RESP bulk string's bytes (`None` for nil or anything else).
fn bulk(reply: &[u8]) -> Option<&[u8]> {
    let rest = reply.strip_prefix(b"$")?;
    let nl = rest.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(&rest[..nl]).ok()?.parse().ok()?;
    rest.get(nl + 2..nl + 2 + len)
}

impl<T: Transport<Addr = std::net::SocketAddr>> Member<T> {
    /// Parses what an HTTP connection sent and queues its requests.
    pub(super) fn http_input(&mut self, input: &Input<'_>, reply: &mut Reply) {
        let id = input.conn;
        self.conn(id).http.get_or_insert_with(VecDeque::new);
        let total = input.len_bytes();
        let mut at = 0;
        while at < total && self.conns[&id].backlog() < MAX_QUEUE && !self.conns[&id].close_after_flush {
            match self.codec.parse(input.segments, at) {
                Parsed::Incomplete => {
                    reply.wanted = self.codec.incomplete_len().unwrap_or(0);
                    break;
                }
                Parsed::Error(e) => {
                    let body = format!("{e}\n");
                    self.http_push(id, Want::Raw, false, Slot::Ready(response(e.status(), false, body.as_bytes())));
                    self.conn(id).close_after_flush = true;
                    at = total;
                }
                Parsed::Complete(req) => {
                    let keep = req.keep_alive;
                    let len = req.len_bytes();
                    let mut body = Vec::with_capacity(req.body.len);
                    body_pieces(input.segments, &req.body).for_each(|p| body.extend_from_slice(p.bytes));
                    let (method, path, authorized) = (req.method, req.path.to_string(), super::super::service::bearer_ok(self.local.config().requirepass.as_deref(), req.authorization));
                    self.http_request(id, method, &path, authorized, keep, body);
                    at += len;
                    if !keep {
                        self.conn(id).close_after_flush = true;
                        at = total;
                    }
                }
            }
        }
        let conn = self.conn(id);
        reply.held = at < total && conn.backlog() >= MAX_QUEUE && !conn.close_after_flush;
        reply.consumed = at;
    }

    fn http_push(&mut self, id: ConnId, want: Want, keep: bool, slot: Slot) {
        let conn = self.conn(id);
        conn.http.get_or_insert_with(VecDeque::new).push_back((want, keep));
        conn.push(slot);
    }

    /// One request: refused here, or the RESP command it means.
    fn http_request(&mut self, id: ConnId, method: Method, path: &str, authorized: bool, keep: bool, body: Vec<u8>) {
        if !authorized {
            let b = b"a password is set: send Authorization: Bearer <password>\n";
            let conn = if keep { "keep-alive" } else { "close" };
            let mut r = format!("HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"pmwire\"\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: {conn}\r\n\r\n", b.len()).into_bytes();
            r.extend_from_slice(b);
            return self.http_push(id, Want::Raw, keep, Slot::Ready(r));
        }
        let Some(key) = path.strip_prefix("/kv/").filter(|k| !k.is_empty()) else {
            return self.http_push(id, Want::Raw, keep, Slot::Ready(response(404, keep, b"")));
        };
        let key = key.as_bytes().to_vec();
        let (want, args) = match method {
            Method::Post | Method::Put => (Want::Set, vec![b"SET".to_vec(), key, body]),
            Method::Get => (Want::Get, vec![b"GET".to_vec(), key]),
            Method::Delete => (Want::Del, vec![b"DEL".to_vec(), key]),
            _ => return self.http_push(id, Want::Raw, keep, Slot::Ready(response(405, keep, b""))),
        };
        self.conn(id).http.get_or_insert_with(VecDeque::new).push_back((want, keep));
        self.by_class(id, args);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_replies_say_what_http_says() {
        assert!(translate(Want::Set, true, b"+OK\r\n").starts_with(b"HTTP/1.1 204 "));
        let got = translate(Want::Get, true, b"$3\r\nabc\r\n");
        assert!(got.starts_with(b"HTTP/1.1 200 ") && got.ends_with(b"\r\n\r\nabc"), "{}", String::from_utf8_lossy(&got));
        assert!(translate(Want::Get, false, b"$-1\r\n").starts_with(b"HTTP/1.1 404 "));
        assert!(translate(Want::Get, true, b"-WRONGTYPE Operation\r\n").starts_with(b"HTTP/1.1 409 "));
        assert!(translate(Want::Del, true, b":1\r\n").starts_with(b"HTTP/1.1 200 "));
        assert!(translate(Want::Del, true, b":0\r\n").starts_with(b"HTTP/1.1 404 "));
        assert!(translate(Want::Set, true, b"-CLUSTERDOWN The cluster is down: x\r\n").starts_with(b"HTTP/1.1 503 "));
        assert!(translate(Want::Set, true, b"-ERR no\r\n").starts_with(b"HTTP/1.1 500 "));
    }
}
