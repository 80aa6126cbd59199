//! MST keys: validity, height (layer) and shared prefixes.

use sha2::{Digest, Sha256};

use super::error::MstError;

/// Longest allowed key, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// The height (layer) of a key: the number of leading zero bits of the
/// SHA-256 of its bytes, divided by two and rounded down (fanout 4).
///
/// Defined for any byte string, including ones [`check_key`] rejects. The
/// result is at most 128.
pub fn key_height(key: &[u8]) -> u8 {
    let digest = Sha256::digest(key);
    let mut zeros = 0u32;
    for byte in digest.iter() {
        zeros += byte.leading_zeros();
        if *byte != 0 {
            break;
        }
    }
    // At most 256 / 2 = 128, which fits in a u8.
    (zeros / 2) as u8
}

/// Number of leading bytes `a` and `b` have in common.
pub fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Checks that `key` is a valid MST key, as the reference implementation
/// does: at most [`MAX_KEY_LEN`] bytes, exactly one `/` with a non-empty
/// part on each side, and otherwise only `A-Z a-z 0-9 _ ~ - : .`.
///
/// This is the structural MST rule, not full repo-path validation: the
/// collection part need not be a valid NSID (the interop keys such as
/// `A0/123456` are not), and the record key part may be `.` or `..`.
pub fn check_key(key: &str) -> Result<(), MstError> {
    let reason = if key.len() > MAX_KEY_LEN {
        "longer than 1024 bytes"
    } else if let Some(bad) = key.bytes().find(|b| *b != b'/' && !is_key_char(*b)) {
        if bad.is_ascii() {
            "contains a character outside A-Z a-z 0-9 _ ~ - : ."
        } else {
            "contains a non-ASCII character"
        }
    } else {
        match key.split_once('/') {
            None => "has no '/'",
            Some((_, rest)) if rest.contains('/') => "has more than one '/'",
            Some(("", _)) => "has an empty collection part",
            Some((_, "")) => "has an empty record key part",
            Some(_) => return Ok(()),
        }
    };
    Err(MstError::InvalidKey {
        key: shorten(key),
        reason,
    })
}

fn is_key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'~' | b'-' | b':' | b'.')
}

/// A key for an error message: at most 100 characters.
pub(super) fn shorten(key: &str) -> String {
    const MAX: usize = 100;
    match key.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &key[..cut]),
        None => key.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heights_from_the_spec() {
        assert_eq!(key_height(b"2653ae71"), 0);
        assert_eq!(key_height(b"blue"), 1);
        assert_eq!(key_height(b"app.bsky.feed.post/454397e440ec"), 4);
        assert_eq!(key_height(b"app.bsky.feed.post/9adeb165882c"), 8);
    }

    #[test]
    fn prefix_lengths() {
        assert_eq!(common_prefix_len(b"abcde", b"abc1"), 3);
        assert_eq!(common_prefix_len(b"", b"abc"), 0);
        assert_eq!(common_prefix_len(b"abc", b"abc"), 3);
    }

    #[test]
    fn allowed_keys() {
        for key in [
            "coll/rkey",
            "coll/pre:fix",
            "com.example/rkey",
            "A0/123456",
            "a/~_-.:",
            "app.bsky.feed.post/3jqfcqzm3fo2j",
        ] {
            check_key(key).unwrap_or_else(|e| panic!("{key}: {e}"));
        }
        let long = format!("c/{}", "a".repeat(MAX_KEY_LEN - 2));
        check_key(&long).unwrap();
    }

    #[test]
    fn rejected_keys() {
        let too_long = format!("c/{}", "a".repeat(MAX_KEY_LEN - 1));
        for key in [
            "",
            "asdf",
            "nested/collection/asdf",
            "coll/",
            "/rkey",
            "coll/jalapeño",
            "coll/coöperative",
            "coll/abc\0",
            "coll/$",
            "coll/%",
            "coll/(",
            "coll/+",
            "coll/=",
            "coll/@",
            "coll/ ",
            "coll/#",
            "coll/\"",
            too_long.as_str(),
        ] {
            assert!(
                matches!(check_key(key), Err(MstError::InvalidKey { .. })),
                "{key:?} accepted"
            );
        }
    }
}
