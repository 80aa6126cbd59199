//! Where a JSON pointer lands in a JSON file's text, as a line and column,
//! so a finding can be annotated on the right line of a pull request.

use jsonc_parser::ast::Value;
use jsonc_parser::common::Ranged;
use jsonc_parser::{CollectOptions, ParseOptions, parse_to_ast};

/// A place in a text: both 1-based; the column counts Unicode code points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl Position {
    pub const START: Position = Position { line: 1, column: 1 };
}

/// The position of what `pointer` (RFC 6901) names in `text`: a property
/// where its name starts, an array element where it starts. A pointer
/// that goes past the document (a removed definition, say) lands on the
/// deepest part that exists; text that does not parse, on the start.
pub fn locate(text: &str, pointer: &str) -> Position {
    let strict = ParseOptions {
        allow_comments: false,
        allow_loose_object_property_names: false,
        allow_trailing_commas: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        ..ParseOptions::default()
    };
    let Ok(parsed) = parse_to_ast(text, &CollectOptions::default(), &strict) else {
        return Position::START;
    };
    let Some(mut value) = parsed.value.as_ref() else {
        return Position::START;
    };
    let mut at = value.range().start;
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        let next = match value {
            Value::Object(o) => o
                .properties
                .iter()
                .find(|p| p.name.as_str() == token)
                .map(|p| (p.range.start, &p.value)),
            Value::Array(a) => token
                .parse::<usize>()
                .ok()
                .and_then(|i| a.elements.get(i))
                .map(|e| (e.range().start, e)),
            _ => None,
        };
        let Some((start, inner)) = next else { break };
        at = start;
        value = inner;
    }
    position_of(text, at)
}

fn position_of(text: &str, offset: usize) -> Position {
    let before = &text[..offset.min(text.len())];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    Position {
        line: before.matches('\n').count() + 1,
        column: before[line_start..].chars().count() + 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "{\n  \"id\": \"a.b\",\n  \"defs\": {\n    \"main\": {\n      \"type\": \"record\",\n      \"é/~\": [1, {\"x\": 2}]\n    }\n  }\n}\n";

    #[test]
    fn pointers_land_on_their_line_and_column() {
        let at = |p| {
            let Position { line, column } = locate(DOC, p);
            (line, column)
        };
        assert_eq!(at(""), (1, 1));
        assert_eq!(at("/id"), (2, 3));
        assert_eq!(at("/defs/main/type"), (5, 7));
        assert_eq!(at("/defs/main/é~1~0"), (6, 7));
        assert_eq!(at("/defs/main/é~1~0/1/x"), (6, 19));
        // Past the document: the deepest part that exists.
        assert_eq!(at("/defs/gone/type"), (3, 3));
        assert_eq!(locate("{not json", "/a"), Position::START);
    }
}
