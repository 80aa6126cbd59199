//! Small byte helpers shared by the checks. Everything works on bytes, so a
//! non-ASCII input can never split a char and panic.

/// Names a byte for an error reason: `'@'`, `a space`, `a non-ASCII character`.
pub(super) fn describe(byte: u8) -> String {
    match byte {
        b' ' => "a space".to_string(),
        b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => "whitespace".to_string(),
        0x21..=0x7e => format!("'{}'", byte as char),
        0x80..=0xff => "a non-ASCII character".to_string(),
        _ => "a control character".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_bytes() {
        assert_eq!(describe(b'@'), "'@'");
        assert_eq!(describe(b' '), "a space");
        assert_eq!(describe(b'\n'), "whitespace");
        assert_eq!(describe(0xf0), "a non-ASCII character");
        assert_eq!(describe(0), "a control character");
    }
}
