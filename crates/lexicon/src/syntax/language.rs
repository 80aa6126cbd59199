//! `language`: a BCP 47 language tag (RFC 5646), parsed by its ABNF and
//! then checked for the two "valid tag" rules a parser can see without the
//! IANA registry: no repeated variant and no repeated extension singleton.

use super::text::describe;
use super::{Format, SyntaxError};

fn err(reason: impl Into<String>) -> SyntaxError {
    SyntaxError::new(Format::Language, reason)
}

/// RFC 5646 §2.1 grandfathered tags: whole tags that do not follow the
/// langtag grammar (or predate it) but stay well-formed.
#[rustfmt::skip]
const GRANDFATHERED: [&str; 26] = [
    "en-GB-oed", "i-ami", "i-bnn", "i-default", "i-enochian", "i-hak", "i-klingon", "i-lux",
    "i-mingo", "i-navajo", "i-pwn", "i-tao", "i-tay", "i-tsu", "sgn-BE-FR", "sgn-BE-NL",
    "sgn-CH-DE", "art-lojban", "cel-gaulish", "no-bok", "no-nyn", "zh-guoyu", "zh-hakka",
    "zh-min", "zh-min-nan", "zh-xiang",
];

/// RFC 5646 is case-insensitive, with one atproto narrowing: the primary
/// language subtag must be a lowercase 2-3 letter ISO 639 code (the Lexicon
/// spec says so, and the fixtures reject `JA` and the reserved 4-letter
/// `jaja`). Private use (`x-`/`X-`) and grandfathered tags stay as in the RFC.
pub fn check_language(value: &str) -> Result<(), SyntaxError> {
    if GRANDFATHERED.iter().any(|g| g.eq_ignore_ascii_case(value)) {
        return Ok(());
    }
    let subtags: Vec<&[u8]> = value.as_bytes().split(|&b| b == b'-').collect();
    for (i, subtag) in subtags.iter().enumerate() {
        check_subtag(subtag).map_err(|problem| err(format!("subtag {} {problem}", i + 1)))?;
    }
    let mut p = Parser {
        subtags: &subtags,
        next: 0,
    };
    if p.peek().is_some_and(is_private_use_marker) {
        return p.private_use();
    }
    p.langtag()
}

/// Every subtag, whatever its role, is 1-8 ASCII letters or digits.
fn check_subtag(subtag: &[u8]) -> Result<(), String> {
    if subtag.is_empty() {
        return Err("is empty".into());
    }
    if subtag.len() > 8 {
        return Err("is longer than 8 characters".into());
    }
    match subtag.iter().find(|b| !b.is_ascii_alphanumeric()) {
        Some(&b) => Err(format!("has {}", describe(b))),
        None => Ok(()),
    }
}

struct Parser<'a> {
    subtags: &'a [&'a [u8]],
    next: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a [u8]> {
        self.subtags.get(self.next).copied()
    }

    /// Takes the next subtag if `fits` accepts it.
    fn take_if(&mut self, fits: impl Fn(&[u8]) -> bool) -> Option<&'a [u8]> {
        let subtag = self.peek().filter(|s| fits(s))?;
        self.next += 1;
        Some(subtag)
    }

    /// language ["-" script] ["-" region] *("-" variant) *("-" extension) ["-" privateuse]
    fn langtag(&mut self) -> Result<(), SyntaxError> {
        let primary = self.peek().unwrap_or_default();
        if primary.eq_ignore_ascii_case(b"i") {
            return Err(err(
                "only the registered grandfathered tags may start with 'i-'",
            ));
        }
        if !(2..=3).contains(&primary.len()) || !primary.iter().all(u8::is_ascii_alphabetic) {
            return Err(err("the primary language subtag must be 2 or 3 letters"));
        }
        if !primary.iter().all(u8::is_ascii_lowercase) {
            return Err(err("the primary language subtag must be lowercase"));
        }
        self.next += 1;
        // Up to three extended language subtags (3 letters each).
        for _ in 0..3 {
            if self.take_if(|s| s.len() == 3 && all_alpha(s)).is_none() {
                break;
            }
        }
        self.take_if(|s| s.len() == 4 && all_alpha(s)); // script
        self.take_if(|s| (s.len() == 2 && all_alpha(s)) || (s.len() == 3 && all_digit(s))); // region
        self.variants()?;
        self.extensions()?;
        if self.peek().is_some_and(is_private_use_marker) {
            return self.private_use();
        }
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(err(format!(
                "subtag {} does not fit the language tag grammar at that position",
                self.next + 1
            ))),
        }
    }

    /// 5-8 letters/digits, or a digit and three letters/digits; each once.
    fn variants(&mut self) -> Result<(), SyntaxError> {
        let mut seen: Vec<&[u8]> = Vec::new();
        let is_variant =
            |s: &[u8]| (5..=8).contains(&s.len()) || (s.len() == 4 && s[0].is_ascii_digit());
        while let Some(variant) = self.take_if(is_variant) {
            if seen.iter().any(|v| v.eq_ignore_ascii_case(variant)) {
                return Err(err(format!("variant '{}' appears twice", show(variant))));
            }
            seen.push(variant);
        }
        Ok(())
    }

    /// A singleton (any letter or digit but `x`) and one or more 2-8 char
    /// subtags; each singleton once.
    fn extensions(&mut self) -> Result<(), SyntaxError> {
        let mut seen: Vec<u8> = Vec::new();
        let is_singleton = |s: &[u8]| s.len() == 1 && !is_private_use_marker(s);
        while let Some(singleton) = self.take_if(is_singleton) {
            let key = singleton[0].to_ascii_lowercase();
            if seen.contains(&key) {
                return Err(err(format!("extension '{}' appears twice", key as char)));
            }
            seen.push(key);
            let mut count = 0;
            while self.take_if(|s| s.len() >= 2).is_some() {
                count += 1;
            }
            if count == 0 {
                return Err(err(format!(
                    "extension '{}' needs a subtag of 2-8 characters after it",
                    key as char
                )));
            }
        }
        Ok(())
    }

    /// `x` and one or more 1-8 char subtags, which end the tag.
    fn private_use(&mut self) -> Result<(), SyntaxError> {
        if self.subtags.len() <= self.next + 1 {
            return Err(err("private use 'x' needs at least one subtag after it"));
        }
        Ok(())
    }
}

fn is_private_use_marker(subtag: &[u8]) -> bool {
    subtag.eq_ignore_ascii_case(b"x")
}

fn all_alpha(s: &[u8]) -> bool {
    s.iter().all(u8::is_ascii_alphabetic)
}

fn all_digit(s: &[u8]) -> bool {
    s.iter().all(u8::is_ascii_digit)
}

/// Subtags are checked ASCII before parsing, so this is lossless.
fn show(subtag: &[u8]) -> String {
    String::from_utf8_lossy(subtag).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(value: &str) -> String {
        check_language(value).unwrap_err().reason
    }

    #[test]
    fn accepts_each_part_of_the_grammar() {
        for ok in [
            "zh-yue",              // extlang
            "zh-cmn-Hans-CN",      // extlang, script, region
            "de-CH-1901",          // digit-led variant
            "sl-rozaj-biske-1994", // several variants
            "en-a-bbb-x-a-ccc",    // singleton inside private use is not an extension
            "x-whatever",          // private use alone
            "EN-gb-OED",           // grandfathered, any case
            "en-US-u-islamcal",
            "es-419",
        ] {
            assert!(check_language(ok).is_ok(), "{ok}: {:?}", check_language(ok));
        }
    }

    #[test]
    fn subtag_length_limit_is_inclusive() {
        assert!(check_language("en-abcdefgh").is_ok());
        assert_eq!(
            reason("en-abcdefghi"),
            "subtag 2 is longer than 8 characters"
        );
        assert!(check_language("x-abcdefgh").is_ok());
        assert_eq!(
            reason("x-abcdefghi"),
            "subtag 2 is longer than 8 characters"
        );
    }

    #[test]
    fn names_the_problem() {
        assert_eq!(reason("ja-"), "subtag 2 is empty");
        assert_eq!(reason(""), "subtag 1 is empty");
        assert_eq!(
            reason("JA"),
            "the primary language subtag must be lowercase"
        );
        assert_eq!(
            reason("jaja"),
            "the primary language subtag must be 2 or 3 letters"
        );
        assert_eq!(
            reason("i-foo"),
            "only the registered grandfathered tags may start with 'i-'"
        );
        assert_eq!(reason("en_US"), "subtag 1 has '_'");
        assert_eq!(
            reason("de-419-DE"),
            "subtag 3 does not fit the language tag grammar at that position"
        );
        assert_eq!(
            reason("en-a"),
            "extension 'a' needs a subtag of 2-8 characters after it"
        );
        assert_eq!(
            reason("en-x"),
            "private use 'x' needs at least one subtag after it"
        );
        assert_eq!(reason("fr-ç"), "subtag 2 has a non-ASCII character");
    }

    #[test]
    fn rejects_repeats_case_insensitively() {
        assert_eq!(reason("de-DE-1901-1901"), "variant '1901' appears twice");
        assert_eq!(reason("en-rozaj-ROZAJ"), "variant 'ROZAJ' appears twice");
        assert_eq!(
            reason("en-u-co-phonebk-U-ca-buddhist"),
            "extension 'u' appears twice"
        );
        // Repeats inside private use are not checked: its subtags are opaque.
        assert!(check_language("en-x-foo-foo").is_ok());
    }
}
