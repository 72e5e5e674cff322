//! Sizes on the command line: `4096`, `64K`, `256M`, `1G` (powers of 1024).

/// Parses a size with an optional K, M, G or T suffix.
pub fn parse(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, shift) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("unknown size suffix in '{text}' (use K, M, G or T)")),
            };
            (&text[..i], shift)
        }
        _ => (text, 0),
    };
    let value: u64 = digits.parse().map_err(|_| format!("'{text}' is not a size"))?;
    value.checked_shl(shift).filter(|v| v >> shift == value).ok_or_else(|| format!("size '{text}' is too large"))
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn parses_suffixes() {
        assert_eq!(parse("4096"), Ok(4096));
        assert_eq!(parse("64K"), Ok(64 << 10));
        assert_eq!(parse("1g"), Ok(1 << 30));
        assert!(parse("1X").is_err());
        assert!(parse("G").is_err());
        assert!(parse("99999999999T").is_err());
    }
}
