//! The client side, pure: a request encoder and an incremental reply parser
//! for RESP2 and RESP3 (for load generators and tests).
//!
//! The parser is stateless like the request codec: given the unconsumed
//! received bytes it returns one reply and its length, or `None` if the
//! reply is not complete yet (nothing is consumed). [`reply_len`] finds a
//! reply's end without building it, for load generators that only count.
//!
//! Bounds: nesting at most [`MAX_DEPTH`] levels (an attribute counts as a
//! level for the reply it annotates, so a run of attributes cannot recurse
//! without bound); aggregate and string lengths
//! are checked against the bytes present before any allocation, so a hostile
//! length cannot make the parser allocate more than the input.

/// Deepest nesting of aggregates accepted.
pub const MAX_DEPTH: usize = 64;

/// Appends a RESP multibulk request.
pub fn encode_request<A: AsRef<[u8]>>(args: &[A], out: &mut Vec<u8>) {
    assert!(!args.is_empty());
    push_header(out, b'*', args.len());
    for a in args {
        let a = a.as_ref();
        push_header(out, b'$', a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn push_header(out: &mut Vec<u8>, tag: u8, n: usize) {
    let mut buf = [0u8; 24];
    let len = crate::reply::write_i64(n as i64, &mut buf);
    out.push(tag);
    out.extend_from_slice(&buf[..len]);
    out.extend_from_slice(b"\r\n");
}

/// A reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `+text`
    Simple(Vec<u8>),
    /// `-CODE text` (or RESP3 `!len` blob error)
    Error(Vec<u8>),
    /// `:n`
    Integer(i64),
    /// `$len` bulk string
    Bulk(Vec<u8>),
    /// RESP2 `$-1`
    NilBulk,
    /// RESP2 `*-1`
    NilArray,
    /// RESP3 `_`
    Null,
    /// `*n`
    Array(Vec<Value>),
    /// RESP3 `%n`
    Map(Vec<(Value, Value)>),
    /// RESP3 `~n`
    Set(Vec<Value>),
    /// RESP3 `>n`
    Push(Vec<Value>),
    /// RESP3 `,d`
    Double(f64),
    /// RESP3 `#t` / `#f`
    Boolean(bool),
    /// RESP3 `(n`
    BigNumber(Vec<u8>),
    /// RESP3 `=len` with its 3-byte format
    Verbatim([u8; 3], Vec<u8>),
}

/// A reply stream that is not RESP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// An unknown type byte.
    #[error("unknown reply type byte {0:#04x}")]
    UnknownType(u8),
    /// A length or integer that does not parse.
    #[error("malformed number in reply header")]
    BadNumber,
    /// A string not followed by `\r\n`.
    #[error("bulk string not terminated by CRLF")]
    BadTerminator,
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("reply nested too deeply")]
    TooDeep,
    /// A malformed double, boolean or verbatim string.
    #[error("malformed RESP3 value")]
    BadValue,
}

type Step<T> = Result<Option<(T, usize)>, ReplyError>;

fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let cr = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..cr], at + cr + 2))
}

fn number(s: &[u8]) -> Result<i64, ReplyError> {
    std::str::from_utf8(s).ok().and_then(|t| t.parse().ok()).ok_or(ReplyError::BadNumber)
}

/// Parses one reply at the start of `buf`: the value and its length.
pub fn parse_reply(buf: &[u8]) -> Step<Value> {
    parse_at(buf, 0, 0)
}

/// The length of the reply at the start of `buf`, and whether it is an
/// error, without building it.
pub fn reply_len(buf: &[u8]) -> Result<Option<(usize, bool)>, ReplyError> {
    Ok(skip_at(buf, 0, 0)?.map(|(is_err, end)| (end, is_err)))
}

fn bulk_body(buf: &[u8], at: usize, len: i64) -> Result<Option<(&[u8], usize)>, ReplyError> {
    let len = usize::try_from(len).map_err(|_| ReplyError::BadNumber)?;
    let end = at.checked_add(len).ok_or(ReplyError::BadNumber)?;
    if buf.len() < end + 2 {
        return Ok(None);
    }
    if &buf[end..end + 2] != b"\r\n" {
        return Err(ReplyError::BadTerminator);
    }
    Ok(Some((&buf[at..end], end + 2)))
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> Step<Value> {
    if depth > MAX_DEPTH {
        return Err(ReplyError::TooDeep);
    }
    let Some(&tag) = buf.get(at) else { return Ok(None) };
    let Some((head, next)) = line(buf, at + 1) else { return Ok(None) };
    let agg = |n: i64, pairs: bool| -> Step<Vec<Value>> {
        let count = usize::try_from(n).map_err(|_| ReplyError::BadNumber)? * if pairs { 2 } else { 1 };
        // Each element takes at least 3 bytes: never reserve beyond the input.
        let mut items = Vec::with_capacity(count.min((buf.len() - next) / 3));
        let mut p = next;
        for _ in 0..count {
            match parse_at(buf, p, depth + 1)? {
                None => return Ok(None),
                Some((v, e)) => {
                    items.push(v);
                    p = e;
                }
            }
        }
        Ok(Some((items, p)))
    };
    let v = match tag {
        b'+' => Value::Simple(head.to_vec()),
        b'-' => Value::Error(head.to_vec()),
        b':' => Value::Integer(number(head)?),
        b'_' => Value::Null,
        b'#' => match head {
            b"t" => Value::Boolean(true),
            b"f" => Value::Boolean(false),
            _ => return Err(ReplyError::BadValue),
        },
        b',' => Value::Double(parse_double(head)?),
        b'(' => Value::BigNumber(head.to_vec()),
        b'$' | b'!' | b'=' => {
            let n = number(head)?;
            if n == -1 && tag == b'$' {
                return Ok(Some((Value::NilBulk, next)));
            }
            let Some((body, end)) = bulk_body(buf, next, n)? else { return Ok(None) };
            let v = match tag {
                b'$' => Value::Bulk(body.to_vec()),
                b'!' => Value::Error(body.to_vec()),
                _ => {
                    if body.len() < 4 || body[3] != b':' {
                        return Err(ReplyError::BadValue);
                    }
                    Value::Verbatim([body[0], body[1], body[2]], body[4..].to_vec())
                }
            };
            return Ok(Some((v, end)));
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = number(head)?;
            if n == -1 && tag == b'*' {
                return Ok(Some((Value::NilArray, next)));
            }
            let Some((items, end)) = agg(n, tag == b'%' || tag == b'|')? else { return Ok(None) };
            let v = match tag {
                b'*' => Value::Array(items),
                b'~' => Value::Set(items),
                b'>' => Value::Push(items),
                b'%' => Value::Map(pairs(items)),
                _ => {
                    // Attributes annotate the reply that follows: skip them
                    // (one level each: a run of them is bounded too).
                    return parse_at(buf, end, depth + 1);
                }
            };
            return Ok(Some((v, end)));
        }
        other => return Err(ReplyError::UnknownType(other)),
    };
    Ok(Some((v, next)))
}

fn pairs(items: Vec<Value>) -> Vec<(Value, Value)> {
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    out
}

fn parse_double(s: &[u8]) -> Result<f64, ReplyError> {
    match s {
        b"inf" => Ok(f64::INFINITY),
        b"-inf" => Ok(f64::NEG_INFINITY),
        b"nan" => Ok(f64::NAN),
        _ => std::str::from_utf8(s).ok().and_then(|t| t.parse().ok()).ok_or(ReplyError::BadValue),
    }
}

fn skip_at(buf: &[u8], at: usize, depth: usize) -> Step<bool> {
    if depth > MAX_DEPTH {
        return Err(ReplyError::TooDeep);
    }
    let Some(&tag) = buf.get(at) else { return Ok(None) };
    let Some((head, next)) = line(buf, at + 1) else { return Ok(None) };
    match tag {
        b'+' | b':' | b'_' | b'#' | b',' | b'(' => Ok(Some((false, next))),
        b'-' => Ok(Some((true, next))),
        b'$' | b'!' | b'=' => {
            let n = number(head)?;
            if n == -1 && tag == b'$' {
                return Ok(Some((false, next)));
            }
            Ok(bulk_body(buf, next, n)?.map(|(_, end)| (tag == b'!', end)))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = number(head)?;
            if n == -1 && tag == b'*' {
                return Ok(Some((false, next)));
            }
            let count = usize::try_from(n).map_err(|_| ReplyError::BadNumber)? * if tag == b'%' || tag == b'|' { 2 } else { 1 };
            let mut p = next;
            for _ in 0..count {
                match skip_at(buf, p, depth + 1)? {
                    None => return Ok(None),
                    Some((_, e)) => p = e,
                }
            }
            if tag == b'|' {
                return skip_at(buf, p, depth + 1);
            }
            Ok(Some((false, p)))
        }
        other => Err(ReplyError::UnknownType(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_and_parse() {
        let mut out = Vec::new();
        encode_request(&[&b"SET"[..], b"k", b""], &mut out);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
        let r = b"*3\r\n:1\r\n$-1\r\n%1\r\n+a\r\n,1.5\r\n";
        for n in 0..r.len() {
            assert_eq!(parse_reply(&r[..n]), Ok(None));
            assert_eq!(reply_len(&r[..n]), Ok(None));
        }
        let want = Value::Array(vec![
            Value::Integer(1),
            Value::NilBulk,
            Value::Map(vec![(Value::Simple(b"a".to_vec()), Value::Double(1.5))]),
        ]);
        assert_eq!(parse_reply(r), Ok(Some((want, r.len()))));
        assert_eq!(reply_len(r), Ok(Some((r.len(), false))));
        assert_eq!(reply_len(b"-ERR x\r\n"), Ok(Some((8, true))));
        assert_eq!(parse_reply(b"=7\r\ntxt:abc\r\n"), Ok(Some((Value::Verbatim(*b"txt", b"abc".to_vec()), 13))));
        assert_eq!(parse_reply(b"?\r\n"), Err(ReplyError::UnknownType(b'?')));
        assert_eq!(parse_reply(b"$1\r\nab\r\n"), Err(ReplyError::BadTerminator));
        assert_eq!(parse_reply(b"*99999999999\r\n"), Ok(None));
    }

    #[test]
    fn a_run_of_attributes_is_bounded_not_a_stack_overflow() {
        let mut hostile = b"|0\r\n".repeat(200_000);
        hostile.extend_from_slice(b"+OK\r\n");
        assert_eq!(parse_reply(&hostile), Err(ReplyError::TooDeep));
        assert_eq!(reply_len(&hostile), Err(ReplyError::TooDeep));
        let one = b"|1\r\n+key\r\n+val\r\n+OK\r\n";
        assert_eq!(parse_reply(one), Ok(Some((Value::Simple(b"OK".to_vec()), one.len()))));
        assert_eq!(reply_len(one), Ok(Some((one.len(), false))));
    }
}
