//! `handle`: a DNS hostname with atproto's extra rules (specs/handle).

use super::text::describe;
use super::{Format, SyntaxError};

const MAX_LEN: usize = 253;
const MAX_LABEL: usize = 63;

fn err(reason: impl Into<String>) -> SyntaxError {
    SyntaxError::new(Format::Handle, reason)
}

/// At least two dot-separated labels, at most 253 chars in all, and a
/// top-level label that does not start with a digit (so no IPv4 address).
pub fn check_handle(value: &str) -> Result<(), SyntaxError> {
    let bytes = value.as_bytes();
    if bytes.len() > MAX_LEN {
        return Err(err(format!("longer than {MAX_LEN} characters")));
    }
    let mut count = 0;
    let mut last: &[u8] = &[];
    for (i, label) in bytes.split(|&b| b == b'.').enumerate() {
        check_label(label).map_err(|problem| err(format!("label {} {problem}", i + 1)))?;
        count += 1;
        last = label;
    }
    if count < 2 {
        return Err(err("needs at least two labels separated by '.'"));
    }
    if last.first().is_some_and(u8::is_ascii_digit) {
        return Err(err("the last label starts with a digit"));
    }
    Ok(())
}

/// One DNS label: 1-63 chars of `[A-Za-z0-9-]`, no hyphen at either end.
/// Returns the problem as a predicate phrase ("ends with a hyphen") so the
/// caller can say which label (or NSID segment) it is.
pub(super) fn check_label(label: &[u8]) -> Result<(), String> {
    if label.is_empty() {
        return Err("is empty".into());
    }
    if label.len() > MAX_LABEL {
        return Err(format!("is longer than {MAX_LABEL} characters"));
    }
    if let Some(&b) = label
        .iter()
        .find(|b| !(b.is_ascii_alphanumeric() || **b == b'-'))
    {
        return Err(format!("has {}", describe(b)));
    }
    if label[0] == b'-' {
        return Err("starts with a hyphen".into());
    }
    if label[label.len() - 1] == b'-' {
        return Err("ends with a hyphen".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(value: &str) -> String {
        check_handle(value).unwrap_err().reason
    }

    #[test]
    fn total_length_limit_is_inclusive() {
        // 4 labels of 63 chars + 3 dots = 255 is too long; trim to exactly 253.
        let label = "a".repeat(63);
        let at = format!("{label}.{label}.{label}.{}", "b".repeat(61));
        assert_eq!(at.len(), MAX_LEN);
        assert!(check_handle(&at).is_ok());
        let past = format!("{label}.{label}.{label}.{}", "b".repeat(62));
        assert_eq!(reason(&past), "longer than 253 characters");
    }

    #[test]
    fn label_length_limit_is_inclusive() {
        assert!(check_handle(&format!("{}.test", "a".repeat(63))).is_ok());
        assert_eq!(
            reason(&format!("{}.test", "a".repeat(64))),
            "label 1 is longer than 63 characters"
        );
    }

    #[test]
    fn names_the_broken_label() {
        assert_eq!(reason("john-.test"), "label 1 ends with a hyphen");
        assert_eq!(reason("a.-b.test"), "label 2 starts with a hyphen");
        assert_eq!(reason("john..test"), "label 2 is empty");
        assert_eq!(reason("john.test."), "label 3 is empty");
        assert_eq!(reason("jo_hn.test"), "label 1 has '_'");
        assert_eq!(reason("bücher.test"), "label 1 has a non-ASCII character");
        assert_eq!(reason("john"), "needs at least two labels separated by '.'");
        assert_eq!(reason(""), "label 1 is empty");
        assert_eq!(reason("127.0.0.1"), "the last label starts with a digit");
    }

    #[test]
    fn digits_are_fine_outside_the_tld() {
        assert!(check_handle("8.cn").is_ok());
        assert!(check_handle("a.b1").is_ok());
        assert!(check_handle("1.2.c3").is_ok());
    }
}
