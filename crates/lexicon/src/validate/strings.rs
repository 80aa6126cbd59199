//! String and integer constraints: lengths in UTF-8 bytes and in grapheme
//! clusters, enum, const and format; integer ranges.

use unicode_segmentation::UnicodeSegmentation;

use super::{Path, Sink, rules};
use crate::schema::{Boolean, Integer, StringType};
use crate::syntax::Format;

/// Longest value quoted in a message; longer ones are cut with `…`.
const QUOTE_MAX_CHARS: usize = 64;
/// Most enum values listed in a message.
const ENUM_LIST_MAX: usize = 10;

pub(crate) fn check_string(s: &str, ty: &StringType, path: &Path<'_>, sink: &mut Sink) {
    if let Some(c) = &ty.r#const
        && s != c
    {
        sink.report(
            path,
            rules::CONST,
            format!(
                "{} must be {}, found {}",
                path.subject(),
                quote(c),
                quote(s)
            ),
        );
    }
    if let Some(values) = &ty.r#enum
        && !values.iter().any(|v| v == s)
    {
        sink.report(
            path,
            rules::ENUM,
            format!(
                "{} is {}, which is not one of {}",
                path.subject(),
                quote(s),
                list(values.iter().map(|v| quote(v)))
            ),
        );
    }
    let bytes = s.len() as u64;
    if let Some(max) = ty.max_length
        && bytes > max
    {
        sink.report(
            path,
            rules::MAX_LENGTH,
            format!(
                "{} is {} of UTF-8, over the maximum of {max}",
                path.subject(),
                count(bytes, "byte")
            ),
        );
    }
    if let Some(min) = ty.min_length
        && bytes < min
    {
        sink.report(
            path,
            rules::MIN_LENGTH,
            format!(
                "{} is {} of UTF-8, under the minimum of {min}",
                path.subject(),
                count(bytes, "byte")
            ),
        );
    }
    check_graphemes(s, ty.min_graphemes, ty.max_graphemes, path, sink);
    if let Some(name) = &ty.format
        && let Some(format) = Format::from_name(name)
        && let Err(e) = format.check(s)
    {
        sink.report(
            path,
            rules::FORMAT,
            format!("{} {} is {e}", path.subject(), quote(s)),
        );
    }
}

/// Counts graphemes only when cheaper bounds leave the limits in doubt,
/// and stops as soon as the answer is known: a grapheme is at least one
/// code point and a code point at least one byte, so `graphemes <= chars
/// <= bytes`; a text within `max` bytes, or else within `max` code points,
/// cannot be over `max` graphemes.
fn check_graphemes(s: &str, min: Option<u64>, max: Option<u64>, path: &Path<'_>, sink: &mut Sink) {
    if min.is_none() && max.is_none() {
        return;
    }
    let bytes = s.len() as u64;
    let mut chars = None;
    let mut char_count = || *chars.get_or_insert_with(|| s.chars().count() as u64);
    if let Some(max) = max
        && bytes > max
        && char_count() > max
        // Count to one past the limit at most.
        && count_graphemes(s, max.saturating_add(1)) > max
    {
        let n = count_graphemes(s, u64::MAX);
        sink.report(
            path,
            rules::MAX_GRAPHEMES,
            format!(
                "{} is {}, over the maximum of {max}",
                path.subject(),
                count(n, "grapheme")
            ),
        );
    }
    if let Some(min) = min {
        // Only reaching the minimum matters, so stop there; under `min`
        // code points the count itself is wanted, for the message.
        let n = if bytes < min || char_count() < min {
            count_graphemes(s, u64::MAX)
        } else {
            count_graphemes(s, min)
        };
        if n < min {
            sink.report(
                path,
                rules::MIN_GRAPHEMES,
                format!(
                    "{} is {}, under the minimum of {min}",
                    path.subject(),
                    count(n, "grapheme")
                ),
            );
        }
    }
}

/// Extended grapheme clusters in `s`, counting no further than `limit`
/// (at least one: a non-empty text counts 1 whatever the limit).
pub fn count_graphemes(s: &str, limit: u64) -> u64 {
    if s.is_ascii() {
        // In ASCII every character is a cluster of its own, but CR LF,
        // which is one.
        let crlf = s.as_bytes().windows(2).filter(|w| w == b"\r\n").count();
        return ((s.len() - crlf) as u64).min(limit.max(1));
    }
    let mut n = 0;
    for _ in s.graphemes(true) {
        n += 1;
        if n >= limit {
            break;
        }
    }
    n
}

pub(crate) fn check_integer(i: i64, ty: &Integer, path: &Path<'_>, sink: &mut Sink) {
    if let Some(c) = ty.r#const
        && i != c
    {
        sink.report(
            path,
            rules::CONST,
            format!("{} must be {c}, found {i}", path.subject()),
        );
    }
    if let Some(values) = &ty.r#enum
        && !values.contains(&i)
    {
        sink.report(
            path,
            rules::ENUM,
            format!(
                "{} is {i}, which is not one of {}",
                path.subject(),
                list(values.iter().map(i64::to_string))
            ),
        );
    }
    if let Some(min) = ty.minimum
        && i < min
    {
        sink.report(
            path,
            rules::MINIMUM,
            format!("{} is {i}, under the minimum of {min}", path.subject()),
        );
    }
    if let Some(max) = ty.maximum
        && i > max
    {
        sink.report(
            path,
            rules::MAXIMUM,
            format!("{} is {i}, over the maximum of {max}", path.subject()),
        );
    }
}

pub(crate) fn check_boolean(b: bool, ty: &Boolean, path: &Path<'_>, sink: &mut Sink) {
    if let Some(c) = ty.r#const
        && b != c
    {
        sink.report(
            path,
            rules::CONST,
            format!("{} must be {c}, found {b}", path.subject()),
        );
    }
}

/// `1 byte`, `2 bytes`.
pub(crate) fn count(n: u64, unit: &str) -> String {
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

/// `"text"` as JSON would show it, cut to a readable length.
pub(crate) fn quote(s: &str) -> String {
    match s.char_indices().nth(QUOTE_MAX_CHARS) {
        None => format!("{s:?}"),
        Some((cut, _)) => format!("{:?}…", &s[..cut]),
    }
}

/// `a, b or c`, with at most [`ENUM_LIST_MAX`] items shown.
pub(crate) fn list(items: impl ExactSizeIterator<Item = String>) -> String {
    let total = items.len();
    let shown: Vec<String> = items.take(ENUM_LIST_MAX).collect();
    let mut out = shown.join(", ");
    if total > shown.len() {
        out.push_str(&format!(" (and {} more)", total - shown.len()));
    }
    if out.is_empty() {
        out.push_str("(none)");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_extended_grapheme_clusters_with_a_limit() {
        let family = "👩\u{200d}👩\u{200d}👦\u{200d}👦";
        assert_eq!(count_graphemes(family, u64::MAX), 1);
        assert_eq!(count_graphemes("🇩🇪🏳️\u{200d}🌈", u64::MAX), 2);
        assert_eq!(count_graphemes("e\u{301}", u64::MAX), 1);
        assert_eq!(count_graphemes("abcdef", 3), 3);
        assert_eq!(count_graphemes("", 3), 0);
    }

    #[test]
    fn the_ascii_count_is_the_segmenters() {
        for text in ["", "a", "\r\n", "\r\r\n\n", "a\rb\nc\r\nd", "tab\there"] {
            for limit in [0, 1, 2, 3, u64::MAX] {
                let mut n = 0;
                for _ in text.graphemes(true) {
                    n += 1;
                    if n >= limit {
                        break;
                    }
                }
                assert_eq!(count_graphemes(text, limit), n, "{text:?} to {limit}");
            }
        }
    }

    #[test]
    fn quotes_are_cut_on_char_boundaries() {
        assert_eq!(quote("hi"), "\"hi\"");
        let long = "é".repeat(100);
        let q = quote(&long);
        assert!(q.ends_with('…'));
        assert_eq!(q.chars().filter(|&c| c == 'é').count(), QUOTE_MAX_CHARS);
    }
}
