//! `record-key`: the general ("any") record key syntax (specs/record-key).

use super::text::describe;
use super::{Format, SyntaxError};

const MAX_LEN: usize = 512;

fn err(reason: impl Into<String>) -> SyntaxError {
    SyntaxError::new(Format::RecordKey, reason)
}

/// 1-512 chars of `[A-Za-z0-9._:~-]`, and not `.` or `..` (they would read
/// as path segments in an at-uri).
pub fn check_record_key(value: &str) -> Result<(), SyntaxError> {
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        return Err(err("is empty"));
    }
    if bytes.len() > MAX_LEN {
        return Err(err(format!("longer than {MAX_LEN} characters")));
    }
    if let Some(&b) = bytes.iter().find(|&&b| !is_key_char(b)) {
        return Err(err(format!("has {}", describe(b))));
    }
    if value == "." || value == ".." {
        return Err(err(format!("'{value}' is reserved")));
    }
    Ok(())
}

fn is_key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'~')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(value: &str) -> String {
        check_record_key(value).unwrap_err().reason
    }

    #[test]
    fn length_limits_are_inclusive() {
        assert!(check_record_key("a").is_ok());
        assert!(check_record_key(&"a".repeat(512)).is_ok());
        assert_eq!(reason(&"a".repeat(513)), "longer than 512 characters");
        assert_eq!(reason(""), "is empty");
    }

    #[test]
    fn dots_are_fine_except_alone() {
        assert_eq!(reason("."), "'.' is reserved");
        assert_eq!(reason(".."), "'..' is reserved");
        assert!(check_record_key("...").is_ok());
        assert!(check_record_key(".a").is_ok());
    }

    #[test]
    fn names_the_bad_char() {
        assert_eq!(reason("alpha/beta"), "has '/'");
        assert_eq!(reason("any space"), "has a space");
        assert_eq!(reason("dHJ1ZQ=="), "has '='");
        assert_eq!(reason("k\u{e9}y"), "has a non-ASCII character");
    }
}
