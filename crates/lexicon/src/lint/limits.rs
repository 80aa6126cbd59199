//! contradicting-limits: lower bounds above upper bounds, and limits that
//! admit no value at all.

use super::{Cx, rules};
use crate::finding::pointer_push;
use crate::schema::{Array, Blob, Bytes, Integer, StringType};
use std::fmt::Display;

/// Reports `min_key` when `min > max`; `unit` names what is counted.
fn pair<T: PartialOrd + Display>(
    cx: &mut Cx,
    path: &str,
    (min_key, min): (&str, Option<T>),
    (max_key, max): (&str, Option<T>),
    why: &str,
) {
    if let (Some(min), Some(max)) = (min, max)
        && min > max
    {
        cx.report(
            &pointer_push(path, min_key),
            rules::CONTRADICTING_LIMITS,
            format!(
                "{min_key} {min} is greater than {max_key} {max}{why}, so no value fits; \
                 lower {min_key} or raise {max_key}"
            ),
        );
    }
}

pub(super) fn string(cx: &mut Cx, path: &str, s: &StringType) {
    pair(
        cx,
        path,
        ("minLength", s.min_length),
        ("maxLength", s.max_length),
        "",
    );
    pair(
        cx,
        path,
        ("minGraphemes", s.min_graphemes),
        ("maxGraphemes", s.max_graphemes),
        "",
    );
    pair(
        cx,
        path,
        ("minGraphemes", s.min_graphemes),
        ("maxLength", s.max_length),
        " (maxLength counts UTF-8 bytes and every grapheme takes at least one)",
    );
}

pub(super) fn integer(cx: &mut Cx, path: &str, i: &Integer) {
    pair(cx, path, ("minimum", i.minimum), ("maximum", i.maximum), "");
}

pub(super) fn bytes(cx: &mut Cx, path: &str, b: &Bytes) {
    pair(
        cx,
        path,
        ("minLength", b.min_length),
        ("maxLength", b.max_length),
        "",
    );
}

pub(super) fn array(cx: &mut Cx, path: &str, a: &Array) {
    pair(
        cx,
        path,
        ("minLength", a.min_length),
        ("maxLength", a.max_length),
        "",
    );
}

pub(super) fn blob(cx: &mut Cx, path: &str, b: &Blob) {
    if b.max_size == Some(0) {
        cx.report(
            &pointer_push(path, "maxSize"),
            rules::CONTRADICTING_LIMITS,
            "maxSize 0 admits no blob (a blob's size is at least 1 byte); raise it or remove it",
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::lint::rules;
    use crate::lint::test_support::lint_one;
    use serde_json::json;

    fn limits(field: serde_json::Value) -> Vec<(String, &'static str)> {
        lint_one(json!({"lexicon": 1, "id": "com.example.limits", "defs": {"f": field}}))
    }

    #[test]
    fn equal_bounds_are_fine_and_inverted_ones_are_not() {
        assert!(limits(json!({"type": "integer", "minimum": 3, "maximum": 3})).is_empty());
        assert!(limits(json!({"type": "integer", "minimum": -3, "maximum": -5})).len() == 1);
        assert!(limits(json!({"type": "bytes", "minLength": 0, "maxLength": 0})).is_empty());
    }

    #[test]
    fn min_graphemes_cannot_exceed_max_bytes() {
        // 3 graphemes need at least 3 bytes, so maxLength 2 leaves no value.
        assert_eq!(
            limits(json!({"type": "string", "minGraphemes": 3, "maxLength": 2})),
            [("/defs/f/minGraphemes".into(), rules::CONTRADICTING_LIMITS)]
        );
        // But a grapheme can take many bytes: minLength above maxGraphemes is fine.
        assert!(limits(json!({"type": "string", "minLength": 40, "maxGraphemes": 2})).is_empty());
    }
}
