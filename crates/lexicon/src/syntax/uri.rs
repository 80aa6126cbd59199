//! `uri`: any absolute URI by the generic RFC 3986 grammar
//! (specs/lexicon#uri), at most 8 KiB.

use super::text::describe;
use super::{Format, SyntaxError};

const MAX_LEN: usize = 8192;

fn err(reason: impl Into<String>) -> SyntaxError {
    SyntaxError::new(Format::Uri, reason)
}

/// `scheme ":" hier-part ["?" query] ["#" fragment]`, ASCII only, every `%`
/// a two-hex-digit escape. RFC 3986 allows an empty hier-part (`http:`),
/// but the Lexicon fixtures reject a bare scheme, so something must follow.
pub fn check_uri(value: &str) -> Result<(), SyntaxError> {
    let bytes = value.as_bytes();
    if bytes.len() > MAX_LEN {
        return Err(err(format!("longer than {MAX_LEN} characters")));
    }
    let rest = scheme_rest(bytes)?;
    if rest.is_empty() {
        return Err(err("nothing follows the scheme"));
    }
    let (rest, fragment) = split_at_first(rest, b'#');
    let (hier, query) = split_at_first(rest, b'?');
    if let Some(fragment) = fragment {
        check_part(fragment, "fragment", b":@/?")?;
    }
    if let Some(query) = query {
        check_part(query, "query", b":@/?")?;
    }
    let path = match hier.strip_prefix(b"//") {
        Some(after) => {
            let end = after.iter().position(|&b| b == b'/').unwrap_or(after.len());
            check_authority(&after[..end])?;
            &after[end..]
        }
        None => hier,
    };
    check_part(path, "path", b":@/")
}

/// Checks the scheme and returns what follows its `:`.
fn scheme_rest(bytes: &[u8]) -> Result<&[u8], SyntaxError> {
    let is_scheme_char = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.');
    let end = bytes
        .iter()
        .position(|b| !is_scheme_char(b))
        .unwrap_or(bytes.len());
    if bytes.get(end) != Some(&b':') {
        return Err(err("does not start with a scheme and ':' (like 'https:')"));
    }
    match bytes.first() {
        Some(b) if b.is_ascii_alphabetic() => Ok(&bytes[end + 1..]),
        Some(b':') => Err(err("the scheme is empty")),
        _ => Err(err("the scheme must start with a letter")),
    }
}

/// `[userinfo "@"] host [":" port]`; the host may be empty (`file:///x`).
fn check_authority(authority: &[u8]) -> Result<(), SyntaxError> {
    let host_port = match authority.iter().position(|&b| b == b'@') {
        Some(at) => {
            check_part(&authority[..at], "userinfo", b":")?;
            &authority[at + 1..]
        }
        None => authority,
    };
    let (host, port) = if host_port.first() == Some(&b'[') {
        let Some(close) = host_port.iter().position(|&b| b == b']') else {
            return Err(err("the IP literal host has no closing ']'"));
        };
        check_ip_literal(&host_port[1..close])?;
        match &host_port[close + 1..] {
            [] => (&[][..], None),
            [b':', port @ ..] => (&[][..], Some(port)),
            _ => return Err(err("only ':' and a port may follow ']'")),
        }
    } else {
        match host_port.iter().rposition(|&b| b == b':') {
            Some(colon) => (&host_port[..colon], Some(&host_port[colon + 1..])),
            None => (host_port, None),
        }
    };
    check_part(host, "host", b"")?;
    if let Some(&b) = port.and_then(|p| p.iter().find(|b| !b.is_ascii_digit())) {
        return Err(err(format!("the port has {}", describe(b))));
    }
    Ok(())
}

/// The inside of `[...]`: an IPv6 address or `v<hex>.<chars>` (IPvFuture).
fn check_ip_literal(inner: &[u8]) -> Result<(), SyntaxError> {
    if let [b'v' | b'V', rest @ ..] = inner {
        let dot = rest.iter().position(|&b| b == b'.').unwrap_or(0);
        let version_ok = dot > 0 && rest[..dot].iter().all(u8::is_ascii_hexdigit);
        let tail = rest.get(dot + 1..).unwrap_or_default();
        if version_ok
            && !tail.is_empty()
            && tail
                .iter()
                .all(|&b| is_unreserved(b) || is_sub_delim(b) || b == b':')
        {
            return Ok(());
        }
        return Err(err("the IPvFuture host is malformed"));
    }
    if is_ipv6(inner) {
        Ok(())
    } else {
        Err(err("the IP literal host is not a valid IPv6 address"))
    }
}

/// RFC 3986 IPv6address: eight 16-bit hex groups (the last two may be a
/// dotted IPv4 address), with at most one `::` standing for missing groups.
fn is_ipv6(text: &[u8]) -> bool {
    let (head, tail, compressed) = match text.windows(2).position(|w| w == b"::") {
        Some(i) => (&text[..i], &text[i + 2..], true),
        None => (text, &[][..], false),
    };
    let groups = |part: &[u8]| -> Option<usize> {
        if part.is_empty() {
            return Some(0);
        }
        let pieces: Vec<&[u8]> = part.split(|&b| b == b':').collect();
        let mut count = 0;
        for (i, piece) in pieces.iter().enumerate() {
            if i + 1 == pieces.len() && piece.contains(&b'.') {
                count += if is_ipv4(piece) { 2 } else { return None };
            } else if (1..=4).contains(&piece.len()) && piece.iter().all(u8::is_ascii_hexdigit) {
                count += 1;
            } else {
                return None;
            }
        }
        Some(count)
    };
    // An IPv4 tail is only allowed at the very end.
    let head_groups = if compressed && head.contains(&b'.') {
        None
    } else {
        groups(head)
    };
    match (head_groups, groups(tail)) {
        (Some(h), Some(t)) if compressed => h + t <= 7,
        (Some(h), _) => h == 8,
        _ => false,
    }
}

fn is_ipv4(text: &[u8]) -> bool {
    let octets: Vec<&[u8]> = text.split(|&b| b == b'.').collect();
    octets.len() == 4
        && octets.iter().all(|o| {
            (1..=3).contains(&o.len())
                && o.iter().all(u8::is_ascii_digit)
                && (o.len() == 1 || o[0] != b'0')
                && o.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0')) <= 255
        })
}

/// Every byte is unreserved, a sub-delim, one of `extra`, or a `%XX` escape.
fn check_part(part: &[u8], name: &str, extra: &[u8]) -> Result<(), SyntaxError> {
    let mut i = 0;
    while let Some(&b) = part.get(i) {
        if b == b'%' {
            let hex = part.get(i + 1..i + 3);
            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                return Err(err(format!(
                    "in the {name}, '%' is not followed by two hex digits"
                )));
            }
            i += 3;
        } else if is_unreserved(b) || is_sub_delim(b) || extra.contains(&b) {
            i += 1;
        } else {
            return Err(err(format!("the {name} has {}", describe(b))));
        }
    }
    Ok(())
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn is_sub_delim(b: u8) -> bool {
    matches!(
        b,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
    )
}

/// Splits at the first `sep`: (before, Some(after)) or (all, None).
fn split_at_first(bytes: &[u8], sep: u8) -> (&[u8], Option<&[u8]>) {
    match bytes.iter().position(|&b| b == sep) {
        Some(i) => (&bytes[..i], Some(&bytes[i + 1..])),
        None => (bytes, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(value: &str) -> String {
        check_uri(value).unwrap_err().reason
    }

    #[test]
    fn length_limit_is_inclusive() {
        let prefix = "https://example.com/";
        let at = format!("{prefix}{}", "x".repeat(MAX_LEN - prefix.len()));
        assert!(check_uri(&at).is_ok());
        assert_eq!(reason(&format!("{at}x")), "longer than 8192 characters");
    }

    #[test]
    fn accepts_the_generic_forms() {
        for ok in [
            "file:///etc/hosts",
            "mailto:someone@example.com",
            "urn:isbn:0451450523",
            "https://user:pw@example.com:8080/a/b;c?d=e&f#g/h?i",
            "http://[::1]:80/",
            "http://[2001:db8::7]/c=GB?objectClass?one",
            "http://[::ffff:192.0.2.128]/",
            "http://[1:2:3:4:5:6:7:8]/",
            "http://[v7.fe80::a+en1]/",
            "ipfs://bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi",
            "foo:?only-a-query",
            "a+b-c.d:x",
        ] {
            assert!(check_uri(ok).is_ok(), "{ok}: {:?}", check_uri(ok));
        }
    }

    #[test]
    fn names_the_broken_part() {
        assert_eq!(reason("http:"), "nothing follows the scheme");
        assert_eq!(
            reason("//example.com"),
            "does not start with a scheme and ':' (like 'https:')"
        );
        assert_eq!(reason("://example.com"), "the scheme is empty");
        assert_eq!(
            reason("1http://example.com"),
            "the scheme must start with a letter"
        );
        assert_eq!(reason("https://exa mple.com"), "the host has a space");
        assert_eq!(reason("https://example.com/a b"), "the path has a space");
        assert_eq!(reason("https://example.com/?q=<x>"), "the query has '<'");
        assert_eq!(reason("https://example.com/#a#b"), "the fragment has '#'");
        assert_eq!(reason("https://example.com:8o/"), "the port has 'o'");
        assert_eq!(
            reason("https://example.com/%zz"),
            "in the path, '%' is not followed by two hex digits"
        );
        assert_eq!(
            reason("https://example.com/caf\u{e9}"),
            "the path has a non-ASCII character"
        );
        assert_eq!(reason("https://a@b@c/"), "the host has '@'");
    }

    #[test]
    fn ip_literals_are_checked() {
        for bad in [
            "http://[::1",
            "http://[1:2:3:4:5:6:7:8:9]/",
            "http://[1::2::3]/",
            "http://[::256.1.1.1]/",
            "http://[g::1]/",
        ] {
            assert!(check_uri(bad).is_err(), "{bad}");
        }
        assert_eq!(
            reason("http://[::1]x/"),
            "only ':' and a port may follow ']'"
        );
    }
}
