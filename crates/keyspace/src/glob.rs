//! Glob matching with Redis's `stringmatchlen` semantics (KEYS, SCAN MATCH,
//! CONFIG GET): `*`, `?`, `[abc]`, `[^a]`, `[a-z]` (ends in either order),
//! `\x` escapes; an unterminated `[` class ends at the pattern's end; bytes
//! compare as C `char` (signed) inside ranges, as Redis does on x86-64.
//!
//! Invariant: the recursion on `*` is cut short as in Redis 7.0.9+
//! (`skipLongerMatches`), so matching is polynomial, not exponential.

/// Whether `string` matches the glob `pattern`.
pub fn matches(pattern: &[u8], string: &[u8]) -> bool {
    let mut skip_longer = false;
    match_impl(pattern, string, &mut skip_longer)
}

fn at(p: &[u8], i: usize) -> u8 {
    p.get(i).copied().unwrap_or(0)
}

fn match_impl(pattern: &[u8], string: &[u8], skip_longer: &mut bool) -> bool {
    let (mut p, mut s) = (0usize, 0usize);
    while p < pattern.len() && s < string.len() {
        match pattern[p] {
            b'*' => {
                while p + 1 < pattern.len() && pattern[p + 1] == b'*' {
                    p += 1;
                }
                if p + 1 == pattern.len() {
                    return true;
                }
                while s < string.len() {
                    if match_impl(&pattern[p + 1..], &string[s..], skip_longer) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    s += 1;
                }
                *skip_longer = true;
                return false;
            }
            b'?' => s += 1,
            b'[' => {
                p += 1;
                let negate = at(pattern, p) == b'^';
                if negate {
                    p += 1;
                }
                let c = string[s];
                let mut matched = false;
                loop {
                    let remaining = pattern.len().saturating_sub(p);
                    if at(pattern, p) == b'\\' && remaining >= 2 {
                        p += 1;
                        matched |= pattern[p] == c;
                    } else if at(pattern, p) == b']' && remaining > 0 {
                        break;
                    } else if remaining == 0 {
                        p -= 1;
                        break;
                    } else if remaining >= 3 && pattern[p + 1] == b'-' {
                        let (mut lo, mut hi) = (pattern[p] as i8, pattern[p + 2] as i8);
                        if lo > hi {
                            std::mem::swap(&mut lo, &mut hi);
                        }
                        p += 2;
                        let ci = c as i8;
                        matched |= ci >= lo && ci <= hi;
                    } else {
                        matched |= pattern[p] == c;
                    }
                    p += 1;
                }
                if negate {
                    matched = !matched;
                }
                if !matched {
                    return false;
                }
                s += 1;
            }
            other => {
                let mut lit = other;
                if other == b'\\' && pattern.len() - p >= 2 {
                    p += 1;
                    lit = pattern[p];
                }
                if lit != string[s] {
                    return false;
                }
                s += 1;
            }
        }
        p += 1;
        if s == string.len() {
            while p < pattern.len() && pattern[p] == b'*' {
                p += 1;
            }
            break;
        }
    }
    p == pattern.len() && s == string.len()
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_glob_cases() {
        assert!(matches(b"*", b"anything"));
        assert!(matches(b"h?llo", b"hello"));
        assert!(matches(b"h*llo", b"heeeello"));
        assert!(matches(b"h[ae]llo", b"hallo"));
        assert!(!matches(b"h[ae]llo", b"hillo"));
        assert!(matches(b"h[^e]llo", b"hallo"));
        assert!(!matches(b"h[^e]llo", b"hello"));
        assert!(matches(b"h[a-b]llo", b"hbllo"));
        assert!(matches(b"h[b-a]llo", b"hallo"));
        assert!(matches(b"h\\*llo", b"h*llo"));
        assert!(!matches(b"h\\*llo", b"hello"));
        assert!(matches(b"a*", b"a"));
        assert!(matches(b"a**", b"a"));
        assert!(!matches(b"a?", b"a"));
        assert!(matches(b"[abc", b"a"));
        assert!(matches(b"*b", b"aab"));
        assert!(!matches(b"", b"a"));
        assert!(matches(b"", b""));
        assert!(!matches(b"a*a*a*a*a*a*a*a*a*b", &[b'a'; 60]));
    }
}
