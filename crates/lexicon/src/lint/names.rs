//! Names: defs, properties and XRPC errors.
//!
//! The Lexicon spec gives no grammar for names, so the rules follow what
//! names are used for. A def name becomes the `#fragment` of references and
//! of `$type` values, so it takes the character set of an NSID name segment
//! (as the style guide asks): an ASCII letter, then ASCII letters and digits,
//! at most 63. Property names are only held to what the data model forbids:
//! they may not be empty, and `$` starts names reserved for the protocol
//! (`$type`, `$link`, `$bytes`). Other names (`cid-link`, `snake_case`) are
//! allowed, as the style guide allows exceptions for existing schemas.
//! Error names must be non-empty and free of whitespace (the spec's words).

use super::{Cx, rules};
use crate::finding::pointer_push;
use crate::schema::ErrorDef;
use std::collections::HashMap;

/// Longest def name: the longest NSID name segment.
const MAX_DEF_NAME: usize = 63;

/// An NSID-style name: ASCII letter, then ASCII letters and digits, 1-63.
pub(super) fn is_def_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= MAX_DEF_NAME
        && bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric())
}

pub(super) fn check_def_name(cx: &mut Cx, path: &str, name: &str) {
    if is_def_name(name) {
        return;
    }
    let why = if name.is_empty() {
        "is empty".to_string()
    } else if name.len() > MAX_DEF_NAME {
        format!("is {} characters long", name.len())
    } else {
        format!("'{name}' has characters outside the allowed set")
    };
    cx.report(
        path,
        rules::BAD_DEF_NAME,
        format!(
            "def name {why}; a def name becomes the #fragment of references and $type values, \
             so it must be an ASCII letter followed by ASCII letters and digits (at most \
             {MAX_DEF_NAME}), like 'replyRef'"
        ),
    );
}

pub(super) fn check_property_name(cx: &mut Cx, path: &str, name: &str) {
    if name.is_empty() {
        cx.report(
            path,
            rules::BAD_DEF_NAME,
            "a property name must not be empty; use a lowerCamelCase name like 'createdAt'",
        );
    } else if name.starts_with('$') {
        cx.report(
            path,
            rules::BAD_DEF_NAME,
            format!(
                "property name '{name}' starts with '$', which the data model reserves for \
                 protocol fields ($type, $link, $bytes); rename it without the '$'"
            ),
        );
    }
}

/// duplicate-error and bad-error-name over an endpoint's `errors` list.
pub(super) fn check_errors(cx: &mut Cx, path: &str, errors: &[ErrorDef]) {
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(errors.len());
    for (i, error) in errors.iter().enumerate() {
        let name_path = pointer_push(&pointer_push(path, &i.to_string()), "name");
        let name = error.name.as_str();
        if name.is_empty() || name.chars().any(char::is_whitespace) {
            cx.report(
                &name_path,
                rules::BAD_ERROR_NAME,
                format!(
                    "error name '{name}' must be non-empty and contain no whitespace; use an \
                     UpperCamelCase name like 'RecordNotFound'"
                ),
            );
        }
        if let Some(first) = seen.get(name) {
            cx.report(
                &name_path,
                rules::DUPLICATE_ERROR,
                format!("error '{name}' is already listed at index {first}; list each error once"),
            );
        } else {
            seen.insert(name, i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lint::test_support::lint_one;
    use serde_json::json;

    #[test]
    fn def_names_follow_nsid_name_segments() {
        for good in ["main", "replyRef", "v2", "a", &"a".repeat(63)] {
            assert!(is_def_name(good), "{good}");
        }
        for bad in [
            "",
            "2fa",
            "reply-ref",
            "reply_ref",
            "#main",
            "naïve",
            "a b",
            &"a".repeat(64),
        ] {
            assert!(!is_def_name(bad), "{bad}");
        }
    }

    #[test]
    fn property_names_only_reject_empty_and_dollar() {
        let found = lint_one(json!({"lexicon": 1, "id": "com.example.names", "defs": {
            "thing": {"type": "object", "properties": {
                "cid-link": {"type": "boolean"},
                "snake_case": {"type": "boolean"},
                "": {"type": "boolean"},
                "$type": {"type": "string"},
                "a$": {"type": "boolean"}
            }}
        }}));
        assert_eq!(
            found,
            [
                ("/defs/thing/properties/".to_string(), rules::BAD_DEF_NAME),
                (
                    "/defs/thing/properties/$type".to_string(),
                    rules::BAD_DEF_NAME
                ),
            ]
        );
    }

    #[test]
    fn a_bad_and_duplicate_error_name_reports_both() {
        let found = lint_one(json!({"lexicon": 1, "id": "com.example.getThing", "defs": {
            "main": {"type": "query", "errors": [
                {"name": "Not Found"}, {"name": "Not Found"}, {"name": "Gone"}
            ]}
        }}));
        assert_eq!(
            found,
            [
                (
                    "/defs/main/errors/0/name".to_string(),
                    rules::BAD_ERROR_NAME
                ),
                (
                    "/defs/main/errors/1/name".to_string(),
                    rules::BAD_ERROR_NAME
                ),
                (
                    "/defs/main/errors/1/name".to_string(),
                    rules::DUPLICATE_ERROR
                ),
            ]
        );
    }
}
