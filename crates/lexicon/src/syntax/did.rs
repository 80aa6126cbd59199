//! `did`: generic DID syntax as atproto restricts it (specs/did).

use super::text::describe;
use super::{Format, SyntaxError};

/// atproto's hard limit on a DID (2 KiB).
const MAX_LEN: usize = 2048;

fn err(reason: impl Into<String>) -> SyntaxError {
    SyntaxError::new(Format::Did, reason)
}

/// `did:` + lowercase method + `:` + identifier of `[A-Za-z0-9._:%-]`, where
/// every `%` starts a two-hex-digit escape and the last char is not `:`.
pub fn check_did(value: &str) -> Result<(), SyntaxError> {
    let bytes = value.as_bytes();
    if bytes.len() > MAX_LEN {
        return Err(err(format!("longer than {MAX_LEN} characters")));
    }
    let Some(rest) = bytes.strip_prefix(b"did:") else {
        return Err(err("does not start with lowercase 'did:'"));
    };
    let Some(colon) = rest.iter().position(|&b| b == b':') else {
        return Err(err("has no ':' after the method"));
    };
    let (method, id) = (&rest[..colon], &rest[colon + 1..]);
    if method.is_empty() {
        return Err(err("the method is empty"));
    }
    if let Some(&b) = method.iter().find(|b| !b.is_ascii_lowercase()) {
        return Err(err(format!(
            "the method has {}; only lowercase letters are allowed",
            describe(b)
        )));
    }
    check_identifier(id)
}

fn check_identifier(id: &[u8]) -> Result<(), SyntaxError> {
    let Some(&last) = id.last() else {
        return Err(err("the identifier after the method is empty"));
    };
    let mut i = 0;
    while i < id.len() {
        match id[i] {
            b'%' => {
                let hex = id.get(i + 1..i + 3);
                if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                    return Err(err("'%' is not followed by two hex digits"));
                }
                i += 3;
            }
            b if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-') => i += 1,
            b => return Err(err(format!("the identifier has {}", describe(b)))),
        }
    }
    if last == b':' {
        return Err(err("ends with ':'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(value: &str) -> String {
        check_did(value).unwrap_err().reason
    }

    #[test]
    fn length_limit_is_inclusive() {
        let prefix = "did:plc:";
        let at = format!("{prefix}{}", "a".repeat(MAX_LEN - prefix.len()));
        assert_eq!(at.len(), MAX_LEN);
        assert!(check_did(&at).is_ok());
        let past = format!("{at}a");
        assert_eq!(reason(&past), "longer than 2048 characters");
    }

    #[test]
    fn percent_escapes_need_two_hex_digits() {
        assert!(check_did("did:web:localhost%3A1234").is_ok());
        assert!(check_did("did:web:localhost%3a1234").is_ok());
        for bad in [
            "did:web:a%",
            "did:web:a%3",
            "did:web:a%zz",
            "did:web:a%%41",
            "did:web:%G0",
        ] {
            assert_eq!(
                reason(bad),
                "'%' is not followed by two hex digits",
                "{bad}"
            );
        }
    }

    #[test]
    fn names_the_broken_part() {
        assert_eq!(reason("did::val"), "the method is empty");
        assert_eq!(
            reason("did:m1:val"),
            "the method has '1'; only lowercase letters are allowed"
        );
        assert_eq!(reason("did:method"), "has no ':' after the method");
        assert_eq!(reason("did:method:a b"), "the identifier has a space");
        assert_eq!(
            reason("did:method:a💩"),
            "the identifier has a non-ASCII character"
        );
        assert_eq!(reason("did:method:val:"), "ends with ':'");
        assert_eq!(
            reason("Did:method:val"),
            "does not start with lowercase 'did:'"
        );
        assert_eq!(reason(""), "does not start with lowercase 'did:'");
    }

    #[test]
    fn colons_inside_the_identifier_are_fine() {
        assert!(check_did("did:method::::val").is_ok());
        assert!(check_did("did:method::.").is_ok());
    }
}
