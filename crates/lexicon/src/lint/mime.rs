//! MIME types: blob `accept` entries and XRPC body `encoding`s.
//!
//! A MIME type here is `type/subtype`, each part an RFC 6838 restricted name
//! (a letter or digit, then letters, digits and `! # $ & - ^ _ . +`, at most
//! 127), compared case-insensitively. Patterns are `type/*` and `*/*`; the
//! spec rules out partial globs (`text/ht*`) and a bare `*`. Parameters
//! (`; charset=…`) are not part of a lexicon MIME type.

use super::{Cx, rules};
use crate::finding::pointer_push;
use crate::schema::{Blob, Body};
use std::collections::HashMap;

/// Checks a MIME type or pattern, saying what is wrong.
pub(super) fn check_mime_pattern(s: &str) -> Result<(), String> {
    if s == "*/*" {
        return Ok(());
    }
    if s == "*" {
        return Err("a bare '*' is not supported; use */* to accept any type".into());
    }
    let Some((kind, subtype)) = s.split_once('/') else {
        return Err("expected type/subtype, like image/png".into());
    };
    if kind == "*" {
        return Err("only */* may have a wildcard type; use */* or type/subtype".into());
    }
    check_name(kind, "type")?;
    if subtype == "*" {
        return Ok(());
    }
    if subtype.contains('*') {
        return Err(
            "partial wildcards like 'text/ht*' are not supported; use type/* or an exact type"
                .into(),
        );
    }
    check_name(subtype, "subtype")
}

fn check_name(name: &str, what: &str) -> Result<(), String> {
    let mut bytes = name.bytes();
    let Some(first) = bytes.next() else {
        return Err(format!("the {what} is empty"));
    };
    if name.len() > 127 {
        return Err(format!("the {what} is longer than 127 characters"));
    }
    if !first.is_ascii_alphanumeric() {
        return Err(format!(
            "the {what} '{name}' must start with a letter or digit"
        ));
    }
    if let Some(bad) = name.chars().find(|&c| {
        !(c.is_ascii_alphanumeric()
            || matches!(c, '!' | '#' | '$' | '&' | '-' | '^' | '_' | '.' | '+'))
    }) {
        return Err(format!("the {what} '{name}' contains '{bad}'"));
    }
    Ok(())
}

pub(super) fn check_accept(cx: &mut Cx, path: &str, blob: &Blob) {
    let Some(accept) = &blob.accept else { return };
    let accept_path = pointer_push(path, "accept");
    if accept.is_empty() {
        cx.report(
            &accept_path,
            rules::BAD_ACCEPT,
            "accept is empty, so no blob is accepted; list MIME types, or remove accept to allow \
             any type",
        );
        return;
    }
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(accept.len());
    for (i, entry) in accept.iter().enumerate() {
        let entry_path = pointer_push(&accept_path, &i.to_string());
        if let Err(why) = check_mime_pattern(entry) {
            cx.report(
                &entry_path,
                rules::BAD_ACCEPT,
                format!("accept entry '{entry}' is not a MIME type or pattern: {why}"),
            );
            continue;
        }
        let key = entry.to_ascii_lowercase();
        if let Some(first) = seen.get(&key) {
            cx.report(
                &entry_path,
                rules::BAD_ACCEPT,
                format!("'{entry}' is already accepted at index {first}; list it once"),
            );
        } else {
            seen.insert(key, i);
        }
    }
}

pub(super) fn check_encoding(cx: &mut Cx, path: &str, body: &Body) {
    let encoding = body.encoding.as_str();
    // A missing or empty encoding is a structural finding of the parser.
    if encoding.is_empty() {
        return;
    }
    let encoding_path = pointer_push(path, "encoding");
    if let Err(why) = check_mime_pattern(encoding) {
        cx.report(
            &encoding_path,
            rules::BAD_ENCODING,
            format!("encoding '{encoding}' is not a MIME type: {why}"),
        );
    } else if body.schema.is_some() && !encoding.eq_ignore_ascii_case("application/json") {
        cx.report(
            &encoding_path,
            rules::BAD_ENCODING,
            format!(
                "this body has a schema, which describes JSON, but its encoding is \
                 '{encoding}'; use application/json, or drop the schema for a non-JSON body"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_types_and_the_two_patterns() {
        for good in [
            "*/*",
            "image/*",
            "image/png",
            "application/vnd.ipld.car",
            "application/ld+json",
            "Text/Plain",
            "video/x-matroska",
        ] {
            assert_eq!(check_mime_pattern(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn rejects_globs_and_malformed_types() {
        for bad in [
            "*",
            "",
            "image",
            "image/",
            "/png",
            "*/png",
            "text/ht*",
            "text/*html",
            "image/png; q=1",
            "image/png/x",
            " image/png",
            "-x/y",
            "imäge/png",
        ] {
            assert!(check_mime_pattern(bad).is_err(), "{bad}");
        }
    }
}
