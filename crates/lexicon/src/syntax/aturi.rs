//! `at-uri`: the restricted AT URI syntax Lexicons use
//! (specs/at-uri-scheme, "Restricted AT URI Syntax").

use super::{Format, SyntaxError, check_did, check_handle, check_nsid, check_record_key};

/// 8 KiB, as for the general AT URI.
const MAX_LEN: usize = 8192;

fn err(reason: impl Into<String>) -> SyntaxError {
    SyntaxError::new(Format::AtUri, reason)
}

/// Wraps the error of a part's own check: "the collection is not a valid nsid: ...".
fn inner(part: &str, e: SyntaxError) -> SyntaxError {
    err(format!(
        "the {part} is not a valid {}: {}",
        e.format, e.reason
    ))
}

/// `at://` AUTHORITY [ `/` COLLECTION [ `/` RKEY ] ]: a DID or handle, then
/// optionally an NSID and a record key. No query, fragment, trailing slash
/// or further path segments.
pub fn check_at_uri(value: &str) -> Result<(), SyntaxError> {
    if value.len() > MAX_LEN {
        return Err(err(format!("longer than {MAX_LEN} characters")));
    }
    let Some(rest) = value.strip_prefix("at://") else {
        return Err(err("does not start with 'at://'"));
    };
    if rest.contains('?') {
        return Err(err("has a query ('?'), which Lexicon at-uris do not allow"));
    }
    if rest.contains('#') {
        return Err(err(
            "has a fragment ('#'), which Lexicon at-uris do not allow",
        ));
    }
    let mut parts = rest.split('/');
    let authority = parts.next().unwrap_or_default();
    let authority_check = if authority.starts_with("did:") {
        check_did(authority)
    } else {
        check_handle(authority)
    };
    authority_check.map_err(|e| inner("authority", e))?;
    if let Some(collection) = parts.next() {
        if collection.is_empty() {
            return Err(err("has an empty path segment (a trailing or double '/')"));
        }
        check_nsid(collection).map_err(|e| inner("collection", e))?;
    }
    if let Some(rkey) = parts.next() {
        if rkey.is_empty() {
            return Err(err("has an empty path segment (a trailing or double '/')"));
        }
        check_record_key(rkey).map_err(|e| inner("record key", e))?;
    }
    if parts.next().is_some() {
        return Err(err(
            "has more than two path segments (collection and record key)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(value: &str) -> String {
        check_at_uri(value).unwrap_err().reason
    }

    #[test]
    fn length_limit_is_inclusive() {
        // The record key caps at 512, so reach 8 KiB through a long handle-free DID.
        let prefix = "at://did:plc:";
        let at = format!("{prefix}{}", "a".repeat(MAX_LEN - prefix.len()));
        assert_eq!(at.len(), MAX_LEN);
        // 8 KiB fits the at-uri limit; the DID itself is over 2 KiB.
        assert_eq!(
            reason(&at),
            "the authority is not a valid did: longer than 2048 characters"
        );
        assert_eq!(reason(&format!("{at}a")), "longer than 8192 characters");
    }

    #[test]
    fn record_key_limit_applies_inside() {
        let base = "at://did:plc:asdf123/com.example.post/";
        assert!(check_at_uri(&format!("{base}{}", "o".repeat(512))).is_ok());
        assert_eq!(
            reason(&format!("{base}{}", "o".repeat(513))),
            "the record key is not a valid record-key: longer than 512 characters"
        );
    }

    #[test]
    fn names_the_broken_part() {
        assert_eq!(reason("AT://did:plc:a"), "does not start with 'at://'");
        assert_eq!(
            reason("at://did:plc:a/"),
            "has an empty path segment (a trailing or double '/')"
        );
        assert_eq!(
            reason("at://a.com//x.y.z"),
            "has an empty path segment (a trailing or double '/')"
        );
        assert_eq!(
            reason("at://a.com/x.y.z/k/more"),
            "has more than two path segments (collection and record key)"
        );
        assert_eq!(
            reason("at://a.com?q"),
            "has a query ('?'), which Lexicon at-uris do not allow"
        );
        assert_eq!(
            reason("at://a.com#f"),
            "has a fragment ('#'), which Lexicon at-uris do not allow"
        );
        assert_eq!(
            reason("at://a.com/x.y.z/%23"),
            "the record key is not a valid record-key: has '%'"
        );
        assert_eq!(
            reason("at://did:plc:a/short/stuff"),
            "the collection is not a valid nsid: needs at least three segments separated by '.'"
        );
        assert_eq!(
            reason("at://name"),
            "the authority is not a valid handle: needs at least two labels separated by '.'"
        );
        assert_eq!(
            reason("at://"),
            "the authority is not a valid handle: label 1 is empty"
        );
    }

    #[test]
    fn accepts_each_depth() {
        for ok in [
            "at://a.com",
            "at://did:web:a.com",
            "at://a.com/com.example.post",
            "at://a.com/com.example.post/self",
        ] {
            assert!(check_at_uri(ok).is_ok(), "{ok}");
        }
    }
}
