//! Redis string and counter histories: SET, GET, INCR, DEL and APPEND on
//! byte keys, checked one key at a time, as [`crate::kv`] checks its map.
//!
//! The sequential model is Redis 7.0's: a key is absent or holds a string;
//! INCR parses it as Redis's `string2ll` does (optional `-`, no leading
//! zero, no `+`, no spaces, within `i64`) and answers an error, changing
//! nothing, if it is not an integer or the result overflows; DEL answers how
//! many keys it removed; APPEND answers the new length. [`Output::from_reply`]
//! reads a RESP reply, so a harness records what a client received as is.

use crate::{judge_per_key, Budget, Judgement, Model, Operation};

/// An operation on one key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Input {
    /// SET key value.
    Set(Vec<u8>),
    /// GET key.
    Get,
    /// INCR key.
    Incr,
    /// DEL key.
    Del,
    /// APPEND key value.
    Append(Vec<u8>),
}

/// What an operation returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// `+OK` (SET).
    Ok,
    /// A bulk string or nil (GET).
    Bulk(Option<Vec<u8>>),
    /// An integer (INCR, DEL, APPEND).
    Int(i64),
    /// An error (INCR of a value that is not an integer, or that overflows).
    Error,
}

impl Output {
    /// Reads one RESP2 or RESP3 reply: `+OK`, `$n` and its bytes, `$-1` or
    /// `_` (nil), `:n`, or `-...`; `None` for anything else or trailing bytes.
    pub fn from_reply(reply: &[u8]) -> Option<Output> {
        let line_end = reply.windows(2).position(|w| w == b"\r\n")?;
        let (head, rest) = (&reply[..line_end], &reply[line_end + 2..]);
        let (&tag, text) = head.split_first()?;
        let number = || std::str::from_utf8(text).ok()?.parse::<i64>().ok();
        match tag {
            b'+' if text == b"OK" && rest.is_empty() => Some(Output::Ok),
            b'-' if rest.is_empty() => Some(Output::Error),
            b':' if rest.is_empty() => number().map(Output::Int),
            b'_' if text.is_empty() && rest.is_empty() => Some(Output::Bulk(None)),
            b'$' if text == b"-1" && rest.is_empty() => Some(Output::Bulk(None)),
            b'$' => {
                let len = usize::try_from(number()?).ok()?;
                let body = rest.get(..len)?;
                (rest.len() == len + 2 && rest.ends_with(b"\r\n")).then(|| Output::Bulk(Some(body.to_vec())))
            }
            _ => None,
        }
    }
}

/// Redis's `string2ll`: the integer `s` spells, if it spells one exactly.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    let (negative, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    match digits {
        [b'0'] if !negative => return Some(0),
        [] | [b'0', ..] => return None,
        _ => {}
    }
    if digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let magnitude: i128 = digits.iter().fold(0i128, |n, &d| n * 10 + i128::from(d - b'0'));
    i64::try_from(if negative { -magnitude } else { magnitude }).ok()
}

/// One operation of a Redis string history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisOp {
    /// The key.
    pub key: Vec<u8>,
    /// When it was called.
    pub call: u64,
    /// When it returned and what; `None` if the caller never learned.
    pub ret: Option<(u64, Output)>,
    /// What was asked.
    pub input: Input,
}

/// The sequential string of one Redis key.
#[derive(Clone, Copy, Debug, Default)]
pub struct RedisString;

impl RedisString {
    /// What `input` does to `state`: the next state and the output.
    pub(crate) fn apply(state: &Option<Vec<u8>>, input: &Input) -> (Option<Vec<u8>>, Output) {
        match input {
            Input::Set(v) => (Some(v.clone()), Output::Ok),
            Input::Get => (state.clone(), Output::Bulk(state.clone())),
            Input::Del => (None, Output::Int(i64::from(state.is_some()))),
            Input::Append(v) => {
                let mut s = state.clone().unwrap_or_default();
                s.extend_from_slice(v);
                let len = i64::try_from(s.len()).expect("a string shorter than i64::MAX");
                (Some(s), Output::Int(len))
            }
            Input::Incr => {
                let current = match state {
                    None => Some(0),
                    Some(v) => parse_i64(v),
                };
                match current.and_then(|n| n.checked_add(1)) {
                    Some(n) => (Some(n.to_string().into_bytes()), Output::Int(n)),
                    None => (state.clone(), Output::Error),
                }
            }
        }
    }
}

impl Model for RedisString {
    type State = Option<Vec<u8>>;
    type Input = Input;
    type Output = Output;

    fn init(&self) -> Self::State {
        None
    }

    fn step(&self, state: &Self::State, input: &Input, output: Option<&Output>) -> Option<Self::State> {
        let (next, expected) = RedisString::apply(state, input);
        match output {
            Some(o) if *o != expected => None,
            _ => Some(next),
        }
    }
}

/// Checks `history` key by key, each key's search within `budget`.
pub fn judge(history: &[RedisOp], budget: Budget) -> Judgement {
    let ops = history.iter().map(|op| (op.key.as_slice(), Operation { call: op.call, ret: op.ret.clone(), input: op.input.clone() }));
    judge_per_key(&RedisString, ops, budget)
}

/// The first key whose sub-history is not proven linearizable within the
/// default [`Budget`] (not linearizable, or undecided), if any.
pub fn first_violation(history: &[RedisOp]) -> Option<Vec<u8>> {
    judge(history, Budget::default()).first_unproven()
}

/// True if the whole history is proven linearizable.
pub fn linearizable(history: &[RedisOp]) -> bool {
    first_violation(history).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(key: &str, call: u64, ret: Option<(u64, Output)>, input: Input) -> RedisOp {
        RedisOp { key: key.as_bytes().to_vec(), call, ret, input }
    }

    #[test]
    fn parses_as_string2ll() {
        for (s, want) in [
            ("0", Some(0)),
            ("-1", Some(-1)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-0", None),
            ("01", None),
            ("+1", None),
            (" 1", None),
            ("", None),
            ("-", None),
            ("1a", None),
        ] {
            assert_eq!(parse_i64(s.as_bytes()), want, "{s:?}");
        }
    }

    #[test]
    fn reads_replies() {
        assert_eq!(Output::from_reply(b"+OK\r\n"), Some(Output::Ok));
        assert_eq!(Output::from_reply(b"$3\r\nabc\r\n"), Some(Output::Bulk(Some(b"abc".to_vec()))));
        assert_eq!(Output::from_reply(b"$0\r\n\r\n"), Some(Output::Bulk(Some(Vec::new()))));
        assert_eq!(Output::from_reply(b"$-1\r\n"), Some(Output::Bulk(None)));
        assert_eq!(Output::from_reply(b"_\r\n"), Some(Output::Bulk(None)));
        assert_eq!(Output::from_reply(b":-7\r\n"), Some(Output::Int(-7)));
        assert_eq!(Output::from_reply(b"-ERR value is not an integer or out of range\r\n"), Some(Output::Error));
        for bad in [&b"$3\r\nab\r\n"[..], b"$3\r\nabcd\r\n", b":1\r\n:2\r\n", b"*0\r\n", b"+OK", b""] {
            assert_eq!(Output::from_reply(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn counters_are_exact() {
        // Two INCRs that overlap may answer 1 and 2 in either order, never 1 and 1.
        let good = [
            op("n", 0, Some((10, Output::Int(2))), Input::Incr),
            op("n", 1, Some((9, Output::Int(1))), Input::Incr),
            op("n", 11, Some((12, Output::Bulk(Some(b"2".to_vec())))), Input::Get),
        ];
        assert!(linearizable(&good));
        let lost =
            [op("n", 0, Some((10, Output::Int(1))), Input::Incr), op("n", 1, Some((9, Output::Int(1))), Input::Incr)];
        assert_eq!(first_violation(&lost), Some(b"n".to_vec()));
        // An INCR whose client never learned may or may not have happened.
        let pending = [
            op("n", 0, None, Input::Incr),
            op("n", 5, Some((6, Output::Bulk(Some(b"1".to_vec())))), Input::Get),
            op("n", 7, Some((8, Output::Int(2))), Input::Incr),
        ];
        assert!(linearizable(&pending));
    }

    #[test]
    fn strings_appends_deletes_and_errors() {
        let h = [
            op("s", 0, Some((1, Output::Ok)), Input::Set(b"ab".to_vec())),
            op("s", 2, Some((3, Output::Int(3))), Input::Append(b"c".to_vec())),
            op("s", 4, Some((5, Output::Error)), Input::Incr),
            op("s", 6, Some((7, Output::Bulk(Some(b"abc".to_vec())))), Input::Get),
            op("s", 8, Some((9, Output::Int(1))), Input::Del),
            op("s", 10, Some((11, Output::Int(0))), Input::Del),
            op("t", 0, Some((1, Output::Int(2))), Input::Append(b"xy".to_vec())),
        ];
        assert!(linearizable(&h));
        // A DEL that answered 1 on an absent key is no Redis history.
        let bad = [op("u", 0, Some((1, Output::Int(1))), Input::Del)];
        assert!(!linearizable(&bad));
        // INCR at i64::MAX fails and keeps the value.
        let max = [
            op("m", 0, Some((1, Output::Ok)), Input::Set(i64::MAX.to_string().into_bytes())),
            op("m", 2, Some((3, Output::Error)), Input::Incr),
            op("m", 4, Some((5, Output::Bulk(Some(i64::MAX.to_string().into_bytes())))), Input::Get),
        ];
        assert!(linearizable(&max));
    }
}
