//! One problem found in a lexicon, a record or a lexicon change.

use serde::Serialize;
use std::fmt;

/// A problem at one place: `file` is the document (or input) it was found in,
/// `path` a JSON pointer into it (`/defs/main/record/properties/text`), `rule`
/// a stable kebab-case identifier a CI user can grep for, `message` a sentence
/// for a person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    #[serde(skip)]
    pub file: String,
    pub path: String,
    pub message: String,
    pub rule: &'static str,
}

impl Finding {
    pub fn new(
        file: impl Into<String>,
        path: impl Into<String>,
        rule: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            file: file.into(),
            path: path.into(),
            rule,
            message: message.into(),
        }
    }
}

/// `FILE:/json/path: message [rule]`, the line format of every `lex` command.
impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(
            f,
            "{}:{}: {} [{}]",
            self.file, path, self.message, self.rule
        )
    }
}

/// Appends one reference token to a JSON pointer, escaping `~` and `/` (RFC 6901).
pub fn pointer_push(base: &str, token: &str) -> String {
    let mut out = String::with_capacity(base.len() + token.len() + 1);
    out.push_str(base);
    out.push('/');
    for c in token.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_escapes_tilde_and_slash() {
        assert_eq!(pointer_push("/defs", "a/b~c"), "/defs/a~1b~0c");
        assert_eq!(pointer_push("", "main"), "/main");
    }

    #[test]
    fn display_is_file_path_message_rule() {
        let f = Finding::new("x.json", "", "schema", "bad");
        assert_eq!(f.to_string(), "x.json:/: bad [schema]");
    }
}
