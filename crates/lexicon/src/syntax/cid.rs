//! `cid`: a CID in string form (specs/data-model). Lexicon validation is a
//! syntax check, not a decode: the fixtures accept strings such as
//! `z7x3CtScH765HvShXT` that are well-formed multibase but no real CID, so
//! `cid::Cid::try_from` would be too strict here.

use super::text::describe;
use super::{Format, SyntaxError};

/// Shortest CIDv1 string: 4 bytes (version, codec, hash code, zero length)
/// is 7 base32 chars plus the multibase prefix.
const MIN_LEN: usize = 8;
/// Generous for any real hash; keeps junk out.
const MAX_LEN: usize = 256;

fn err(reason: impl Into<String>) -> SyntaxError {
    SyntaxError::new(Format::Cid, reason)
}

/// 8-256 chars: a known multibase prefix, then only chars of that base.
/// CIDv0 (`Qm...`, bare base58 with no prefix) is not allowed in atproto,
/// and falls out here because `Q` is not a multibase prefix.
pub fn check_cid(value: &str) -> Result<(), SyntaxError> {
    let bytes = value.as_bytes();
    if bytes.len() < MIN_LEN {
        return Err(err(format!("shorter than {MIN_LEN} characters")));
    }
    if bytes.len() > MAX_LEN {
        return Err(err(format!("longer than {MAX_LEN} characters")));
    }
    let (prefix, body) = (bytes[0], &bytes[1..]);
    if prefix == b'Q' && body.first() == Some(&b'm') {
        return Err(err("CIDv0 ('Qm...') is not allowed; use CIDv1"));
    }
    let Some((base, in_alphabet)) = multibase(prefix) else {
        return Err(err(format!(
            "{} is not a multibase prefix",
            describe(prefix)
        )));
    };
    match body.iter().find(|&&b| !in_alphabet(b)) {
        Some(&b) => Err(err(format!("has {}, which is not in {base}", describe(b)))),
        None => Ok(()),
    }
}

type Alphabet = fn(u8) -> bool;

/// The multibase encodings (multiformats/multibase table) a CID string can
/// use, by prefix. Padded variants also allow `=`.
fn multibase(prefix: u8) -> Option<(&'static str, Alphabet)> {
    Some(match prefix {
        b'0' => ("base2", |b| matches!(b, b'0' | b'1')),
        b'7' => ("base8", |b| matches!(b, b'0'..=b'7')),
        b'9' => ("base10", |b| b.is_ascii_digit()),
        b'f' => ("base16", |b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        b'F' => ("base16upper", |b| matches!(b, b'0'..=b'9' | b'A'..=b'F')),
        b'b' => ("base32", |b| matches!(b, b'a'..=b'z' | b'2'..=b'7')),
        b'B' => ("base32upper", |b| matches!(b, b'A'..=b'Z' | b'2'..=b'7')),
        b'c' => (
            "base32pad",
            |b| matches!(b, b'a'..=b'z' | b'2'..=b'7' | b'='),
        ),
        b'C' => (
            "base32padupper",
            |b| matches!(b, b'A'..=b'Z' | b'2'..=b'7' | b'='),
        ),
        b'v' => ("base32hex", |b| matches!(b, b'0'..=b'9' | b'a'..=b'v')),
        b'V' => ("base32hexupper", |b| matches!(b, b'0'..=b'9' | b'A'..=b'V')),
        b't' => (
            "base32hexpad",
            |b| matches!(b, b'0'..=b'9' | b'a'..=b'v' | b'='),
        ),
        b'T' => (
            "base32hexpadupper",
            |b| matches!(b, b'0'..=b'9' | b'A'..=b'V' | b'='),
        ),
        b'h' => ("base32z", |b| {
            b"ybndrfg8ejkmcpqxot1uwisza345h769".contains(&b)
        }),
        b'k' => ("base36", |b| matches!(b, b'0'..=b'9' | b'a'..=b'z')),
        b'K' => ("base36upper", |b| matches!(b, b'0'..=b'9' | b'A'..=b'Z')),
        b'z' => ("base58btc", is_base58),
        b'Z' => ("base58flickr", is_base58),
        b'm' => ("base64", |b| {
            b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/')
        }),
        b'M' => ("base64pad", |b| {
            b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')
        }),
        b'u' => ("base64url", |b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_')
        }),
        b'U' => ("base64urlpad", |b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'=')
        }),
        _ => return None,
    })
}

/// Both base58 alphabets (btc and flickr) are the alphanumerics minus
/// `0`, `O`, `I` and `l`; they differ only in order.
fn is_base58(b: u8) -> bool {
    b.is_ascii_alphanumeric() && !matches!(b, b'0' | b'O' | b'I' | b'l')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(value: &str) -> String {
        check_cid(value).unwrap_err().reason
    }

    #[test]
    fn length_limits_are_inclusive() {
        assert!(check_cid("bafkqaaa").is_ok());
        assert_eq!(reason("bafkqaa"), "shorter than 8 characters");
        let at = format!("b{}", "a".repeat(MAX_LEN - 1));
        assert!(check_cid(&at).is_ok());
        assert_eq!(reason(&format!("{at}a")), "longer than 256 characters");
    }

    #[test]
    fn checks_the_alphabet_of_the_prefix() {
        assert_eq!(reason("bafybei1"), "has '1', which is not in base32");
        assert_eq!(reason("zQmbWqx0"), "has '0', which is not in base58btc");
        assert_eq!(reason("f0170122G"), "has 'G', which is not in base16");
        assert!(check_cid("uAXESIA-_").is_ok());
        assert!(check_cid("MAXESIA==").is_ok());
    }

    #[test]
    fn names_a_missing_prefix() {
        assert_eq!(
            reason("QmbWqxBEKC3P8tqsKc98xmWNzrzDtRLMiMPL8wBuTGsMnR"),
            "CIDv0 ('Qm...') is not allowed; use CIDv1"
        );
        assert_eq!(reason("example.com"), "'e' is not a multibase prefix");
        assert_eq!(
            reason(" bafybeigdyrzt5sfp7udm7hu"),
            "a space is not a multibase prefix"
        );
        assert_eq!(
            reason("\u{e9}bafybeigdyrzt"),
            "a non-ASCII character is not a multibase prefix"
        );
    }

    #[test]
    fn real_atproto_cids_pass() {
        // The canonical form: CIDv1, base32, dag-cbor or raw, sha-256.
        assert!(check_cid("bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm").is_ok());
        assert!(check_cid("bafkreibme22gw2h7y2h7tg2fhqotaqjucnbc24deqo72b6mkl2egezxhvy").is_ok());
    }
}
