//! Splitting an inline request line into arguments, as Redis's
//! `sdssplitargs`: white space separates, `"..."` takes `\n \r \t \b \a \\
//! \" \xHH` escapes, `'...'` takes `\'`, a closing quote must be followed by
//! white space or the end, and a NUL byte ends the line.
//!
//! Invariant: a [`Token::Verbatim`] range lies within the line and its bytes
//! are the argument exactly (no quote was involved).

use crate::numbers::is_c_space;
use std::ops::Range;

/// One argument of an inline line.
#[derive(Debug, PartialEq, Eq)]
pub enum Token {
    /// The argument is these bytes of the line, unchanged.
    Verbatim(Range<usize>),
    /// The argument after removing quotes and escapes.
    Unescaped(Vec<u8>),
}

/// Splits `line` into `out`; false on unbalanced quotes (Redis then replies
/// `Protocol error: unbalanced quotes in request`).
pub fn split_args(line: &[u8], out: &mut Vec<Token>) -> bool {
    out.clear();
    let line = match line.iter().position(|&b| b == 0) {
        Some(n) => &line[..n],
        None => line,
    };
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let mut p = 0usize;
    loop {
        while p < line.len() && is_c_space(line[p]) {
            p += 1;
        }
        if p >= line.len() {
            return true;
        }
        let start = p;
        let mut current = Vec::new();
        let (mut in_dq, mut in_sq, mut quoted) = (false, false, false);
        loop {
            let c = at(p);
            if in_dq {
                if c == b'\\' && at(p + 1) == b'x' && at(p + 2).is_ascii_hexdigit() && at(p + 3).is_ascii_hexdigit() {
                    let hex = |d: u8| (d as char).to_digit(16).unwrap_or(0) as u8;
                    current.push(hex(at(p + 2)) * 16 + hex(at(p + 3)));
                    p += 3;
                } else if c == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    current.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    if at(p + 1) != 0 && !is_c_space(at(p + 1)) {
                        return false;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return false;
                } else {
                    current.push(c);
                }
            } else if in_sq {
                if c == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    current.push(b'\'');
                } else if c == b'\'' {
                    if at(p + 1) != 0 && !is_c_space(at(p + 1)) {
                        return false;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return false;
                } else {
                    current.push(c);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => {
                        let end = p;
                        if c != 0 {
                            p += 1;
                        }
                        if !quoted {
                            out.push(Token::Verbatim(start..end));
                            current.clear();
                        }
                        break;
                    }
                    b'"' => {
                        in_dq = true;
                        quoted = true;
                    }
                    b'\'' => {
                        in_sq = true;
                        quoted = true;
                    }
                    _ => current.push(c),
                }
            }
            if at(p) != 0 {
                p += 1;
            }
        }
        if quoted {
            out.push(Token::Unescaped(current));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(line: &[u8]) -> Option<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        if !split_args(line, &mut out) {
            return None;
        }
        Some(
            out.into_iter()
                .map(|t| match t {
                    Token::Verbatim(r) => line[r].to_vec(),
                    Token::Unescaped(v) => v,
                })
                .collect(),
        )
    }

    #[test]
    fn sdssplitargs_cases() {
        assert_eq!(split(b"set a b"), Some(vec![b"set".to_vec(), b"a".to_vec(), b"b".to_vec()]));
        assert_eq!(split(b"  ping  "), Some(vec![b"ping".to_vec()]));
        assert_eq!(split(b"set \"a b\" 'c d'"), Some(vec![b"set".to_vec(), b"a b".to_vec(), b"c d".to_vec()]));
        assert_eq!(split(b"echo \"\\x41\\n\""), Some(vec![b"echo".to_vec(), b"A\n".to_vec()]));
        assert_eq!(split(b"echo 'it\\'s'"), Some(vec![b"echo".to_vec(), b"it's".to_vec()]));
        assert_eq!(split(b"echo a\"b c\""), Some(vec![b"echo".to_vec(), b"ab c".to_vec()]));
        assert_eq!(split(b"echo \"abc"), None);
        assert_eq!(split(b"echo \"abc\"d"), None);
        assert_eq!(split(b"echo 'abc"), None);
        assert_eq!(split(b""), Some(vec![]));
        assert_eq!(split(b"a\0b"), Some(vec![b"a".to_vec()]));
        assert_eq!(split(b"a\x0bb"), Some(vec![b"a\x0bb".to_vec()]));
    }
}
