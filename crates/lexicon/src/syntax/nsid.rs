//! `nsid`: reversed-domain authority plus a camel-case name (specs/nsid).

use super::handle::check_label;
use super::text::describe;
use super::{Format, SyntaxError};

const MAX_LEN: usize = 317;
const MAX_NAME: usize = 63;

fn err(reason: impl Into<String>) -> SyntaxError {
    SyntaxError::new(Format::Nsid, reason)
}

/// At least three segments: domain labels in reverse order (the first, the
/// TLD, must not start with a digit), then a name of letters and digits that
/// starts with a letter.
///
/// The spec also caps the domain authority at 253 chars, but the interop
/// fixtures accept a 287-char NSID whose authority is 283 chars, so only the
/// whole NSID (317) and each segment (63) are capped here.
pub fn check_nsid(value: &str) -> Result<(), SyntaxError> {
    let bytes = value.as_bytes();
    if bytes.len() > MAX_LEN {
        return Err(err(format!("longer than {MAX_LEN} characters")));
    }
    let segments: Vec<&[u8]> = bytes.split(|&b| b == b'.').collect();
    if segments.len() < 3 {
        return Err(err("needs at least three segments separated by '.'"));
    }
    // Safe to index: there are at least three segments.
    let (authority, name) = segments.split_at(segments.len() - 1);
    for (i, label) in authority.iter().enumerate() {
        check_label(label).map_err(|problem| err(format!("segment {} {problem}", i + 1)))?;
    }
    if authority[0].first().is_some_and(u8::is_ascii_digit) {
        return Err(err("segment 1 (the top-level domain) starts with a digit"));
    }
    check_name(name[0])
}

fn check_name(name: &[u8]) -> Result<(), SyntaxError> {
    let Some(&first) = name.first() else {
        return Err(err("the name segment is empty"));
    };
    if name.len() > MAX_NAME {
        return Err(err(format!(
            "the name segment is longer than {MAX_NAME} characters"
        )));
    }
    if let Some(&b) = name.iter().find(|b| !b.is_ascii_alphanumeric()) {
        return Err(err(format!(
            "the name segment has {}; only letters and digits are allowed",
            describe(b)
        )));
    }
    if first.is_ascii_digit() {
        return Err(err("the name segment starts with a digit"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(value: &str) -> String {
        check_nsid(value).unwrap_err().reason
    }

    #[test]
    fn total_length_limit_is_inclusive() {
        // Five 63-char domain labels + "a" name: 5*63 + 5 dots + 1 = 321; trim the last label.
        let label = "a".repeat(63);
        let at = format!("{label}.{label}.{label}.{label}.{}.b", "c".repeat(59));
        assert_eq!(at.len(), MAX_LEN);
        assert!(check_nsid(&at).is_ok());
        let past = format!("{label}.{label}.{label}.{label}.{}.b", "c".repeat(60));
        assert_eq!(reason(&past), "longer than 317 characters");
    }

    #[test]
    fn segment_length_limits_are_inclusive() {
        let s63 = "o".repeat(63);
        let s64 = "o".repeat(64);
        assert!(check_nsid(&format!("com.{s63}.foo")).is_ok());
        assert!(check_nsid(&format!("com.example.{s63}")).is_ok());
        assert_eq!(
            reason(&format!("com.{s64}.foo")),
            "segment 2 is longer than 63 characters"
        );
        assert_eq!(
            reason(&format!("com.example.{s64}")),
            "the name segment is longer than 63 characters"
        );
    }

    #[test]
    fn names_the_broken_segment() {
        assert_eq!(
            reason("com.example"),
            "needs at least three segments separated by '.'"
        );
        assert_eq!(reason(""), "needs at least three segments separated by '.'");
        assert_eq!(reason("one..three"), "segment 2 is empty");
        assert_eq!(reason("com.example-.foo"), "segment 2 ends with a hyphen");
        assert_eq!(
            reason("1.0.0.127.record"),
            "segment 1 (the top-level domain) starts with a digit"
        );
        assert_eq!(
            reason("com.example.fooBar.2"),
            "the name segment starts with a digit"
        );
        assert_eq!(
            reason("a-0.b-1.c-3"),
            "the name segment has '-'; only letters and digits are allowed"
        );
        assert_eq!(reason("com.example."), "the name segment is empty");
        assert_eq!(
            reason("com.exa💩ple.thing"),
            "segment 2 has a non-ASCII character"
        );
    }

    #[test]
    fn digits_are_fine_inside_the_authority_and_name() {
        assert!(check_nsid("cn.8.lex.stuff").is_ok());
        assert!(check_nsid("com.example.f00").is_ok());
    }
}
