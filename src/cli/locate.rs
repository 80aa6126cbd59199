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

/// The positions of what each of `pointers` (RFC 6901) names in `text`,
/// parsing it once: a property where its name starts, an array element
/// where it starts. A pointer that goes past the document (a removed
/// definition, say) lands on the deepest part that exists; text that does
/// not parse puts every pointer on the start.
pub fn locate_all(text: &str, pointers: &[&str]) -> Vec<Position> {
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
    let parsed = parse_to_ast(text, &CollectOptions::default(), &strict).ok();
    let Some(root) = parsed.as_ref().and_then(|p| p.value.as_ref()) else {
        return vec![Position::START; pointers.len()];
    };
    let lines = LineStarts::of(text);
    pointers
        .iter()
        .map(|pointer| lines.position(text, offset_of(root, pointer)))
        .collect()
}

/// The byte offset where `pointer` lands under `root`.
fn offset_of(root: &Value<'_>, pointer: &str) -> usize {
    let mut value = root;
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
    at
}

/// Where each line of a text starts, so an offset finds its line by a
/// binary search instead of a scan from the start.
struct LineStarts(Vec<usize>);

impl LineStarts {
    fn of(text: &str) -> LineStarts {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        LineStarts(starts)
    }

    fn position(&self, text: &str, offset: usize) -> Position {
        let offset = offset.min(text.len());
        let line = self.0.partition_point(|&s| s <= offset) - 1;
        Position {
            line: line + 1,
            column: text[self.0[line]..offset].chars().count() + 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locate(text: &str, pointer: &str) -> Position {
        locate_all(text, &[pointer])[0]
    }

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
