//! `tid`: timestamp identifier, 13 chars of base32-sortable (specs/tid).

use super::text::describe;
use super::{Format, SyntaxError};

const LEN: usize = 13;

fn err(reason: impl Into<String>) -> SyntaxError {
    SyntaxError::new(Format::Tid, reason)
}

/// Exactly 13 chars of `234567abcdefghijklmnopqrstuvwxyz`. The first char
/// carries the top bit of the 64-bit value, which must be zero, so it is
/// limited to the first half of the alphabet (`2`-`7`, `a`-`j`).
pub fn check_tid(value: &str) -> Result<(), SyntaxError> {
    let bytes = value.as_bytes();
    if bytes.len() != LEN {
        return Err(err(format!("must be exactly {LEN} characters")));
    }
    if let Some(&b) = bytes.iter().find(|&&b| !is_base32_sortable(b)) {
        return Err(err(format!(
            "has {}; only '2'-'7' and lowercase 'a'-'z' are allowed",
            describe(b)
        )));
    }
    if !matches!(bytes[0], b'2'..=b'7' | b'a'..=b'j') {
        return Err(err(
            "the first character sets the high bit; it must be '2'-'7' or 'a'-'j'",
        ));
    }
    Ok(())
}

fn is_base32_sortable(b: u8) -> bool {
    matches!(b, b'2'..=b'7' | b'a'..=b'z')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(value: &str) -> String {
        check_tid(value).unwrap_err().reason
    }

    #[test]
    fn first_char_boundary() {
        assert!(check_tid("jzzzzzzzzzzzz").is_ok());
        assert!(check_tid("2222222222222").is_ok());
        assert!(reason("kzzzzzzzzzzzz").starts_with("the first character sets the high bit"));
    }

    #[test]
    fn length_must_be_exact() {
        assert_eq!(reason("3jzfcijpj2z2"), "must be exactly 13 characters");
        assert_eq!(reason("3jzfcijpj2z2aa"), "must be exactly 13 characters");
        assert_eq!(reason(""), "must be exactly 13 characters");
    }

    #[test]
    fn rejects_chars_outside_the_alphabet() {
        assert!(reason("3jzfcijpj2z21").starts_with("has '1'"));
        assert!(reason("3JZFCIJPJ2Z2A").starts_with("has 'J'"));
        // 13 bytes, but one char is non-ASCII.
        assert!(reason("3jzfcijpj2z\u{e9}").starts_with("has a non-ASCII character"));
    }
}
