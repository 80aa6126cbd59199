//! Values written into a schema: `default`, `const`, `enum`, `knownValues`,
//! and the string `format` they are checked against.
//!
//! A `default` or `const` must be a value the field itself accepts (inside
//! the enum, the min/max, the byte and grapheme lengths, the format). Enum
//! and knownValues entries are held to the same limits and format; a
//! fully qualified `nsid#name` entry is also resolved as a token reference.

use super::{Cx, refs, rules};
use crate::finding::pointer_push;
use crate::schema::{Boolean, Integer, StringType};
use crate::syntax::Format;
use crate::validate::count_graphemes;
use std::collections::HashMap;
use std::fmt::Display;

pub(super) fn boolean(cx: &mut Cx, path: &str, b: &Boolean, required: bool) {
    const_and_default(cx, path, b.r#const.is_some(), b.default.is_some());
    if required && let Some(default) = b.default {
        default_on_required(cx, path, default);
    }
}

pub(super) fn integer(cx: &mut Cx, path: &str, i: &Integer, required: bool) {
    const_and_default(cx, path, i.r#const.is_some(), i.default.is_some());
    if let Some(values) = &i.r#enum {
        let enum_path = pointer_push(path, "enum");
        if values.is_empty() {
            empty_enum(cx, &enum_path);
        }
        let mut seen: HashMap<i64, usize> = HashMap::with_capacity(values.len());
        for (index, &value) in values.iter().enumerate() {
            let item_path = pointer_push(&enum_path, &index.to_string());
            if let Some(first) = seen.get(&value) {
                duplicate(cx, &item_path, rules::BAD_ENUM, "enum", value, *first);
                continue;
            }
            seen.insert(value, index);
            if let Some(why) = integer_range_violation(i, value) {
                cx.report(
                    &item_path,
                    rules::BAD_ENUM,
                    format!("enum value {value} {why}, so it can never be used"),
                );
            }
        }
    }
    if let Some(value) = i.r#const {
        let why = integer_range_violation(i, value).or_else(|| not_in_int_enum(i, value));
        if let Some(why) = why {
            out_of_range(cx, path, "const", value, &why);
        }
    }
    if let Some(value) = i.default {
        let why = integer_range_violation(i, value).or_else(|| not_in_int_enum(i, value));
        if let Some(why) = why {
            out_of_range(cx, path, "default", value, &why);
        }
        if required {
            default_on_required(cx, path, value);
        }
    }
}

fn integer_range_violation(i: &Integer, value: i64) -> Option<String> {
    match (i.minimum, i.maximum) {
        (Some(min), _) if value < min => Some(format!("is below minimum {min}")),
        (_, Some(max)) if value > max => Some(format!("is above maximum {max}")),
        _ => None,
    }
}

fn not_in_int_enum(i: &Integer, value: i64) -> Option<String> {
    let values = i.r#enum.as_ref()?;
    (!values.contains(&value)).then(|| format!("is not one of the enum values {values:?}"))
}

/// Reports an undefined `format` name; returns the format to check values with.
pub(super) fn check_format(cx: &mut Cx, path: &str, s: &StringType) -> Option<Format> {
    let name = s.format.as_deref()?;
    let format = Format::from_name(name);
    if format.is_none() {
        let known: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
        cx.report(
            &pointer_push(path, "format"),
            rules::INVALID_FORMAT,
            format!(
                "'{name}' is not a string format the spec defines; expected one of: {}",
                known.join(", ")
            ),
        );
    }
    format
}

/// enum, knownValues, const and default of a string; `format` is the
/// string's format when the spec defines it.
pub(super) fn string(
    cx: &mut Cx,
    path: &str,
    s: &StringType,
    format: Option<Format>,
    required: bool,
) {
    const_and_default(cx, path, s.r#const.is_some(), s.default.is_some());
    if let Some(values) = &s.r#enum {
        let enum_path = pointer_push(path, "enum");
        if s.known_values.is_some() {
            cx.report(
                &enum_path,
                rules::BAD_ENUM,
                "a string has both enum (a closed set) and knownValues (an open set); keep one",
            );
        }
        if values.is_empty() {
            empty_enum(cx, &enum_path);
        }
        string_list(cx, &enum_path, s, format, values, "enum", rules::BAD_ENUM);
    }
    if let Some(values) = &s.known_values {
        let list_path = pointer_push(path, "knownValues");
        string_list(
            cx,
            &list_path,
            s,
            format,
            values,
            "knownValues",
            rules::BAD_KNOWN_VALUES,
        );
    }
    if let Some(value) = &s.r#const
        && let Some(why) = string_violation(s, format, value).or_else(|| not_in_str_enum(s, value))
    {
        out_of_range(cx, path, "const", format!("'{value}'"), &why);
    }
    if let Some(value) = &s.default {
        if let Some(why) = string_violation(s, format, value).or_else(|| not_in_str_enum(s, value))
        {
            out_of_range(cx, path, "default", format!("'{value}'"), &why);
        }
        if required {
            default_on_required(cx, path, format!("'{value}'"));
        }
    }
}

/// The entries of `enum` or `knownValues` (named `list`).
fn string_list(
    cx: &mut Cx,
    list_path: &str,
    s: &StringType,
    format: Option<Format>,
    values: &[String],
    list: &str,
    rule: &'static str,
) {
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(values.len());
    for (index, value) in values.iter().enumerate() {
        let item_path = pointer_push(list_path, &index.to_string());
        if let Some(first) = seen.get(value.as_str()) {
            duplicate(cx, &item_path, rule, list, format!("'{value}'"), *first);
            continue;
        }
        seen.insert(value, index);
        if value.is_empty() && rule == rules::BAD_KNOWN_VALUES {
            cx.report(
                &item_path,
                rule,
                "knownValues entry is an empty string; list only meaningful values",
            );
        } else if value.starts_with('#') {
            cx.report(
                &item_path,
                rule,
                format!(
                    "{list} entry '{value}' reads as a local token reference, but values hold it \
                     literally; write the full reference '{}{value}'",
                    cx.id()
                ),
            );
        } else if let Some(why) = string_violation(s, format, value) {
            cx.report(
                &item_path,
                rule,
                format!("{list} entry '{value}' {why}, so no valid value can equal it"),
            );
        } else if refs::is_token_ref(value) {
            refs::check_token_ref(cx, &item_path, value, list);
        }
    }
}

/// Why `value` is not a value of string type `s` (lengths, graphemes,
/// format), if it is not; the enum is checked separately.
fn string_violation(s: &StringType, format: Option<Format>, value: &str) -> Option<String> {
    let bytes = value.len() as u64;
    if let Some(min) = s.min_length
        && bytes < min
    {
        return Some(format!(
            "is {} long, below minLength {min}",
            count(bytes, "byte")
        ));
    }
    if let Some(max) = s.max_length
        && bytes > max
    {
        return Some(format!(
            "is {} long, above maxLength {max}",
            count(bytes, "byte")
        ));
    }
    if s.min_graphemes.is_some() || s.max_graphemes.is_some() {
        let graphemes = count_graphemes(value, u64::MAX);
        if let Some(min) = s.min_graphemes
            && graphemes < min
        {
            return Some(format!(
                "is {} long, below minGraphemes {min}",
                count(graphemes, "grapheme")
            ));
        }
        if let Some(max) = s.max_graphemes
            && graphemes > max
        {
            return Some(format!(
                "is {} long, above maxGraphemes {max}",
                count(graphemes, "grapheme")
            ));
        }
    }
    if let Some(format) = format
        && let Err(e) = format.check(value)
    {
        return Some(format!("is {e}"));
    }
    None
}

/// "1 byte", "3 bytes".
fn count(n: u64, unit: &str) -> String {
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

fn not_in_str_enum(s: &StringType, value: &str) -> Option<String> {
    let values = s.r#enum.as_ref()?;
    (!values.iter().any(|v| v == value)).then(|| "is not one of the enum values".to_string())
}

fn const_and_default(cx: &mut Cx, path: &str, has_const: bool, has_default: bool) {
    if has_const && has_default {
        cx.report(
            path,
            rules::CONST_AND_DEFAULT,
            "both const and default are given, but the spec makes them exclusive; a const field \
             always holds its const, so drop the default",
        );
    }
}

fn empty_enum(cx: &mut Cx, enum_path: &str) {
    cx.report(
        enum_path,
        rules::BAD_ENUM,
        "enum is empty, so no value is allowed; list the allowed values or remove enum",
    );
}

fn duplicate(
    cx: &mut Cx,
    path: &str,
    rule: &'static str,
    list: &str,
    value: impl Display,
    first: usize,
) {
    cx.report(
        path,
        rule,
        format!("{list} lists {value} again (first at index {first}); list each value once"),
    );
}

/// default-out-of-range or const-out-of-range for `key` (`default`/`const`).
fn out_of_range(cx: &mut Cx, path: &str, key: &str, value: impl Display, why: &str) {
    let rule = if key == "const" {
        rules::CONST_OUT_OF_RANGE
    } else {
        rules::DEFAULT_OUT_OF_RANGE
    };
    cx.report(
        &pointer_push(path, key),
        rule,
        format!("{key} {value} {why}, so the field can never hold it"),
    );
}

fn default_on_required(cx: &mut Cx, path: &str, value: impl Display) {
    cx.report(
        &pointer_push(path, "default"),
        rules::DEFAULT_ON_REQUIRED,
        format!(
            "this property is required, so its default {value} never applies; drop the default \
             or make the property optional"
        ),
    );
}

#[cfg(test)]
mod tests {
    use crate::lint::rules;
    use crate::lint::test_support::lint_one;
    use serde_json::{Value, json};

    fn field(field: Value) -> Vec<(String, &'static str)> {
        lint_one(json!({"lexicon": 1, "id": "com.example.values", "defs": {"f": field}}))
    }

    #[test]
    fn graphemes_count_clusters_not_code_points() {
        // One family emoji is 7 code points and 25 bytes, but one grapheme.
        let family = "👨‍👩‍👧‍👦";
        assert!(field(json!({"type": "string", "maxGraphemes": 1, "default": family})).is_empty());
        assert_eq!(
            field(json!({"type": "string", "maxLength": 24, "default": family})),
            [("/defs/f/default".into(), rules::DEFAULT_OUT_OF_RANGE)]
        );
    }

    #[test]
    fn const_checks_enum_and_range() {
        assert_eq!(
            field(json!({"type": "integer", "enum": [1, 2], "const": 3})),
            [("/defs/f/const".into(), rules::CONST_OUT_OF_RANGE)]
        );
        assert_eq!(
            field(json!({"type": "string", "enum": ["a", "b"], "const": "c"})),
            [("/defs/f/const".into(), rules::CONST_OUT_OF_RANGE)]
        );
        assert!(field(json!({"type": "integer", "minimum": 0, "const": 0})).is_empty());
    }

    #[test]
    fn default_on_required_only_for_required_properties() {
        let found = field(json!({"type": "object", "required": ["a"], "properties": {
            "a": {"type": "boolean", "default": false},
            "b": {"type": "boolean", "default": false}
        }}));
        assert_eq!(
            found,
            [(
                "/defs/f/properties/a/default".into(),
                rules::DEFAULT_ON_REQUIRED
            )]
        );
    }

    #[test]
    fn a_duplicate_is_reported_once_not_also_checked_again() {
        assert_eq!(
            field(json!({"type": "string", "maxLength": 1, "knownValues": ["long", "long"]})),
            [
                ("/defs/f/knownValues/0".into(), rules::BAD_KNOWN_VALUES),
                ("/defs/f/knownValues/1".into(), rules::BAD_KNOWN_VALUES),
            ]
        );
    }
}
