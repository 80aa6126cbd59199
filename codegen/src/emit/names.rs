//! Rust names for lexicon names: modules (snake case), types and variants
//! (upper camel case), constants (screaming snake case), fields.

/// Words a Rust identifier can not be without `r#`.
const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut",
    "pub", "ref", "return", "static", "struct", "super", "trait", "true", "type", "unsafe", "use",
    "where", "while", "abstract", "become", "box", "do", "final", "macro", "override", "priv",
    "try", "typeof", "unsized", "virtual", "yield",
];

/// Splits a lexicon name into lower-case words: `getThread` → get, thread;
/// `cid-link` → cid, link; `!no-promote` → no, promote; `HTTPServer` → http, server.
pub fn words(name: &str) -> Vec<String> {
    let chars: Vec<char> = name.chars().collect();
    let mut words = Vec::new();
    let mut cur = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_ascii_alphanumeric() {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if c.is_ascii_uppercase() && !cur.is_empty() {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if prev.is_ascii_lowercase()
                || prev.is_ascii_digit()
                || (prev.is_ascii_uppercase() && next_lower)
            {
                words.push(std::mem::take(&mut cur));
            }
        }
        cur.push(c.to_ascii_lowercase());
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// `getThread` → `get_thread`, escaped if it is a keyword.
pub fn snake(name: &str) -> String {
    let s = words(name).join("_");
    let s = if s.is_empty() { "x".to_string() } else { s };
    let s = if s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{s}")
    } else {
        s
    };
    escape(s)
}

/// `getThread` → `GetThread`.
pub fn camel(name: &str) -> String {
    let mut out = String::new();
    for w in words(name) {
        let mut cs = w.chars();
        if let Some(first) = cs.next() {
            out.push(first.to_ascii_uppercase());
            out.extend(cs);
        }
    }
    if out.is_empty() {
        out.push_str("Empty");
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'V');
    }
    if matches!(out.as_str(), "Self" | "Super" | "Crate") {
        out.push('_');
    }
    out
}

/// `reasonSpam` → `REASON_SPAM`.
pub fn screaming(name: &str) -> String {
    let s = words(name).join("_").to_ascii_uppercase();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("V_{s}")
    } else {
        s
    }
}

/// What serde's `rename_all = "camelCase"` makes of a snake-case field name.
pub fn serde_camel(field: &str) -> String {
    let field = field.strip_prefix("r#").unwrap_or(field);
    let mut out = String::new();
    let mut upper = false;
    for c in field.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn escape(s: String) -> String {
    if KEYWORDS.contains(&s.as_str()) {
        format!("r#{s}")
    } else if s == "self" || s == "super" || s == "crate" || s == "Self" {
        format!("{s}_")
    } else {
        s
    }
}

/// A type or variant name for a `knownValues` entry: the part after `#`
/// for token references (`com.x.defs#reasonSpam` → `ReasonSpam`).
pub fn value_variant(value: &str) -> String {
    match value.rsplit_once('#') {
        Some((_, name)) if !name.is_empty() => camel(name),
        _ => camel(value),
    }
}

/// Hands out names in one namespace, adding a suffix on a collision.
#[derive(Default)]
pub struct Names {
    taken: std::collections::BTreeSet<String>,
}

impl Names {
    pub fn reserve(&mut self, name: &str) {
        self.taken.insert(name.to_string());
    }

    /// `wanted`, or `wanted` + `Def`/`2`/`3`… if taken.
    pub fn claim(&mut self, wanted: &str, suffix: &str) -> String {
        let mut name = wanted.to_string();
        if self.taken.contains(&name) {
            name = format!("{wanted}{suffix}");
            let mut n = 2;
            while self.taken.contains(&name) {
                name = format!("{wanted}{suffix}{n}");
                n += 1;
            }
        }
        self.taken.insert(name.clone());
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases() {
        assert_eq!(snake("getThread"), "get_thread");
        assert_eq!(snake("cid-link"), "cid_link");
        assert_eq!(snake("type"), "r#type");
        assert_eq!(snake("ref"), "r#ref");
        assert_eq!(camel("getThread"), "GetThread");
        assert_eq!(camel("!no-promote"), "NoPromote");
        assert_eq!(
            camel("xchacha20poly1305-hkdf-sha256-v1"),
            "Xchacha20poly1305HkdfSha256V1"
        );
        assert_eq!(camel("HTTPServer"), "HttpServer");
        assert_eq!(screaming("reasonSpam"), "REASON_SPAM");
        assert_eq!(serde_camel("cache_read_tokens"), "cacheReadTokens");
        assert_eq!(serde_camel("r#ref"), "ref");
        assert_eq!(
            value_variant("com.atproto.moderation.defs#reasonSpam"),
            "ReasonSpam"
        );
        let mut n = Names::default();
        assert_eq!(n.claim("A", "Def"), "A");
        assert_eq!(n.claim("A", "Def"), "ADef");
        assert_eq!(n.claim("A", "Def"), "ADef2");
    }
}
