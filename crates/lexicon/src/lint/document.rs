//! Document-level rules: the id is an NSID and matches the file path; primary
//! types are `main` and alone; a literal record key is a valid record key.

use super::{Cx, kind, rules};
use crate::schema::{Def, RecordKey};
use crate::syntax::{self, check_nsid};

pub(super) fn check_id(cx: &mut Cx) {
    let id = cx.id();
    if let Err(e) = check_nsid(id) {
        cx.report(
            "/id",
            rules::INVALID_ID,
            format!("lexicon id '{id}' is {e}; expected an NSID like com.example.fooBar"),
        );
        // Without a valid id there is no layout to compare the path with.
        return;
    }
    let file = cx.entry.file.as_str();
    if !id_path_matches(file, id) {
        cx.report(
            "/id",
            rules::ID_PATH,
            format!(
                "lexicon id '{id}' does not match the file path '{file}': expected it to end in {}",
                expected_tail(id)
            ),
        );
    }
}

/// `com/example/fooBar.json` for `com.example.fooBar`.
fn expected_tail(id: &str) -> String {
    format!("{}.json", id.replace('.', "/"))
}

/// Does `file` end with the id's segments as folders plus `<name>.json`?
/// Compares whole path components (either separator), so
/// `xcom/example/foo.json` does not match `com.example.foo`.
pub(super) fn id_path_matches(file: &str, id: &str) -> bool {
    let mut components = file.rsplit(['/', '\\']);
    let mut segments = id.rsplit('.');
    let (Some(file_name), Some(name)) = (components.next(), segments.next()) else {
        return false;
    };
    if file_name.strip_suffix(".json") != Some(name) {
        return false;
    }
    segments.all(|segment| components.next() == Some(segment))
}

/// primary-not-main and multiple-primary for one def; `first` remembers the
/// first primary def of the document.
pub(super) fn check_primary<'a>(
    cx: &mut Cx,
    path: &str,
    name: &'a str,
    def: &Def,
    first: &mut Option<&'a str>,
) {
    if !def.is_primary() {
        return;
    }
    let type_name = def.type_name();
    if name != "main" {
        cx.report(
            path,
            rules::PRIMARY_NOT_MAIN,
            format!(
                "def '{name}' is {}, a primary type, so it must be the def named 'main'",
                kind(type_name)
            ),
        );
    }
    match first {
        Some(first) => cx.report(
            path,
            rules::MULTIPLE_PRIMARY,
            format!(
                "def '{name}' ({type_name}) is a second primary def after '{first}'; a lexicon \
                 file holds at most one record, query, procedure, subscription or \
                 permission-set, so move it to a lexicon of its own"
            ),
        ),
        None => *first = Some(name),
    }
}

pub(super) fn check_record_key(cx: &mut Cx, path: &str, key: &RecordKey) {
    if let RecordKey::Literal(value) = key
        && let Err(e) = syntax::check_record_key(value)
    {
        cx.report(
            path,
            rules::BAD_RECORD_KEY,
            format!(
                "'literal:{value}' fixes the record key to '{value}', which is {e}; expected \
                 1-512 characters of A-Z a-z 0-9 . - _ : ~ (not '.' or '..')"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_path_compares_whole_components() {
        let id = "chat.gel.assistant.defs";
        assert!(id_path_matches("lexicons/chat/gel/assistant/defs.json", id));
        assert!(id_path_matches("chat/gel/assistant/defs.json", id));
        assert!(id_path_matches(r"C:\lex\chat\gel\assistant\defs.json", id));
        assert!(!id_path_matches(
            "lexicons/xchat/gel/assistant/defs.json",
            id
        ));
        assert!(!id_path_matches("gel/assistant/defs.json", id));
        assert!(!id_path_matches("chat/gel/assistant/defs.JSON", id));
        assert!(!id_path_matches("chat/gel/assistant.defs.json", id));
        assert!(!id_path_matches("chat/gel/assistant/defs.json.bak", id));
        assert!(!id_path_matches("", id));
    }
}
