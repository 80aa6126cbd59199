//! Blob and bytes constraints: `maxSize`, `accept` MIME patterns, the legacy
//! `{cid, mimeType}` blob, and decoded byte lengths.

use serde_json::{Map, Value};

use super::data_model::{BlobRef, check_link, describe};
use super::strings::{count, list, quote};
use super::{Path, Sink, rules};
use crate::schema::{Blob, Bytes};

pub(crate) fn check_blob(t: &Blob, b: BlobRef<'_>, path: &Path<'_>, sink: &mut Sink) {
    if let (Some(max), Some(size)) = (t.max_size, b.size)
        && size as u64 > max
    {
        sink.report(
            path,
            rules::BLOB_SIZE,
            format!(
                "{} is a blob of {}, over the maximum of {max}",
                path.subject(),
                count(size as u64, "byte")
            ),
        );
    }
    if let Some(mime) = b.mime_type {
        check_accept(t, mime, path, sink);
    }
}

/// The deprecated blob form: no `$type`, a string `cid` and a `mimeType`.
pub(crate) fn legacy_blob(map: &Map<String, Value>) -> bool {
    !map.contains_key("$type") && map.contains_key("cid") && map.contains_key("mimeType")
}

/// A legacy blob has no size, so `maxSize` can not be checked; the spec
/// asks implementations not to fail on them.
pub(crate) fn check_legacy_blob(
    t: &Blob,
    map: &Map<String, Value>,
    path: &Path<'_>,
    sink: &mut Sink,
) {
    match map.get("cid") {
        Some(Value::String(cid)) => {
            if let Err(reason) = check_link(cid) {
                sink.report(
                    &path.key("cid"),
                    rules::DATA_MODEL,
                    format!("legacy blob cid {reason}"),
                );
            }
        }
        other => sink.report(
            &path.key("cid"),
            rules::DATA_MODEL,
            format!(
                "legacy blob cid must be a CID string, found {}",
                other.map_or("nothing", describe)
            ),
        ),
    }
    match map.get("mimeType") {
        Some(Value::String(mime)) if !mime.is_empty() => check_accept(t, mime, path, sink),
        other => sink.report(
            &path.key("mimeType"),
            rules::DATA_MODEL,
            format!(
                "blob mimeType must be a non-empty string, found {}",
                other.map_or("nothing", describe)
            ),
        ),
    }
}

fn check_accept(t: &Blob, mime: &str, path: &Path<'_>, sink: &mut Sink) {
    let Some(accept) = &t.accept else { return };
    // An empty list restricts nothing, as in the reference implementations.
    if accept.is_empty() || accept.iter().any(|p| mime_accepted(p, mime)) {
        return;
    }
    sink.report(
        path,
        rules::BLOB_ACCEPT,
        format!(
            "{} has MIME type {}, which is not accepted (accepted: {})",
            path.subject(),
            quote(mime),
            list(accept.iter().cloned())
        ),
    );
}

/// `*/*` accepts anything, `image/*` any `image/…` type, anything else must
/// match exactly. MIME types compare case-insensitively and parameters
/// (`; charset=…`) are ignored.
pub fn mime_accepted(pattern: &str, mime: &str) -> bool {
    let essence = mime.split(';').next().unwrap_or("").trim();
    if pattern == "*/*" {
        return true;
    }
    match pattern.strip_suffix("/*") {
        Some(prefix) => essence
            .split_once('/')
            .is_some_and(|(top, sub)| !sub.is_empty() && top.eq_ignore_ascii_case(prefix)),
        None => pattern.eq_ignore_ascii_case(essence),
    }
}

pub(crate) fn check_bytes_length(len: u64, t: &Bytes, path: &Path<'_>, sink: &mut Sink) {
    if let Some(max) = t.max_length
        && len > max
    {
        sink.report(
            path,
            rules::BYTES_LENGTH,
            format!(
                "{} is {}, over the maximum of {max}",
                path.subject(),
                count(len, "byte")
            ),
        );
    }
    if let Some(min) = t.min_length
        && len < min
    {
        sink.report(
            path,
            rules::BYTES_LENGTH,
            format!(
                "{} is {}, under the minimum of {min}",
                path.subject(),
                count(len, "byte")
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mime_patterns() {
        assert!(mime_accepted("*/*", "application/octet-stream"));
        assert!(mime_accepted("image/*", "image/png"));
        assert!(mime_accepted("image/*", "IMAGE/PNG"));
        assert!(mime_accepted("image/png", "image/png; q=1"));
        assert!(!mime_accepted("image/*", "image/"));
        assert!(!mime_accepted("image/*", "imagex/png"));
        assert!(!mime_accepted("image/*", "text/plain"));
        assert!(!mime_accepted("image/png", "image/jpeg"));
        assert!(!mime_accepted("image/*", "image"));
    }
}
