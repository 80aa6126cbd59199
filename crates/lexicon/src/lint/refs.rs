//! References: `ref` targets, union refs, and `nsid#name` token references
//! in a string's `knownValues` or `enum`.
//!
//! What a reference may point at (spec, `ref`, `union` and `token`):
//! - a `ref` may target objects, records and field types (string, array …),
//!   but not a query, procedure, subscription or permission-set, nor a token
//!   (a token has no data representation);
//! - a union ref must target an object or a record (variants carry `$type`);
//! - a token reference must target a token.
//!
//! A ref to a ref or a union cannot be written: those types are not allowed
//! as named defs, and the parser leaves such defs out (reporting
//! `type-not-allowed`), so a reference to one shows up as `dangling-ref`.

use super::{Cx, kind, names, rules};
use crate::catalog::{ResolveError, split_ref};
use crate::finding::pointer_push;
use crate::schema::{Def, Ref, Type, Union};
use crate::syntax::check_nsid;
use std::collections::HashMap;

pub(super) fn check_ref(cx: &mut Cx, path: &str, r: &Ref) {
    let ref_path = pointer_push(path, "ref");
    let target = r.target.as_str();
    let Some(def) = resolve(cx, &ref_path, target, rules::BAD_REF) else {
        return;
    };
    let why = match def {
        Def::Query(_) | Def::Subscription(_) | Def::Procedure(_) | Def::PermissionSet(_) => {
            "only objects, records and field types (string, array …) can be the target of a ref"
        }
        Def::Type(Type::Token(_)) => {
            "a token has no data representation; name tokens in a string's knownValues instead"
        }
        _ => return,
    };
    let message = format!("ref '{target}' points to {}; {why}", kind(def.type_name()));
    cx.report(&ref_path, rules::REF_TYPE, message);
}

pub(super) fn check_union(cx: &mut Cx, path: &str, u: &Union) {
    let refs_path = pointer_push(path, "refs");
    if u.refs.is_empty() && u.closed {
        cx.report(
            &refs_path,
            rules::EMPTY_CLOSED_UNION,
            "this closed union has no refs, so no value can match it; add refs, or make it open \
             (closed: false)",
        );
        return;
    }
    let id = cx.id();
    // (lexicon, def) → index: `#x`, `<id>#x`, `nsid` and `nsid#main` are
    // spelled differently but name the same defs.
    let mut seen: HashMap<(&str, &str), usize> = HashMap::with_capacity(u.refs.len());
    for (i, target) in u.refs.iter().enumerate() {
        let item_path = pointer_push(&refs_path, &i.to_string());
        if let Ok(key) = split_ref(id, target) {
            if let Some(&first) = seen.get(&key) {
                cx.report(
                    &item_path,
                    rules::DUPLICATE_UNION_REF,
                    format!(
                        "'{target}' names the same def as '{}' at index {first}; list each \
                         variant once",
                        u.refs[first]
                    ),
                );
                continue;
            }
            seen.insert(key, i);
        }
        let Some(def) = resolve(cx, &item_path, target, rules::BAD_UNION_REF) else {
            continue;
        };
        if !matches!(def, Def::Record(_) | Def::Type(Type::Object(_))) {
            let message = format!(
                "union ref '{target}' points to {}; union variants must be objects or records \
                 (each value carries its $type)",
                kind(def.type_name())
            );
            cx.report(&item_path, rules::REF_TYPE, message);
        }
    }
}

/// Does this `knownValues`/`enum` entry read as a token reference? Only the
/// fully qualified `nsid#name` form counts: a bare NSID is as likely a plain
/// value (a collection name, say) as a reference to a token at `main`.
pub(super) fn is_token_ref(value: &str) -> bool {
    value.split_once('#').is_some_and(|(nsid, name)| {
        !nsid.is_empty() && names::is_def_name(name) && check_nsid(nsid).is_ok()
    })
}

/// Resolves a token reference (see [`is_token_ref`]) and reports it when it
/// does not name a token; `list` is `knownValues` or `enum`.
pub(super) fn check_token_ref(cx: &mut Cx, path: &str, value: &str, list: &str) {
    let catalog = cx.catalog;
    match catalog.resolve(cx.id(), value) {
        Ok(resolved) => {
            if !matches!(resolved.def, Def::Type(Type::Token(_))) {
                let message = format!(
                    "{list} entry '{value}' reads as a token reference but points to {}; \
                     reference a def of type 'token', or use a plain value",
                    kind(resolved.def.type_name())
                );
                cx.report(path, rules::REF_TYPE, message);
            }
        }
        Err(e) => report_unresolved(cx, path, value, &e),
    }
}

/// Resolves `target` in the document's catalog, reporting why it does not:
/// a malformed reference as `malformed_rule`, an unknown lexicon or def.
fn resolve<'c>(
    cx: &mut Cx<'c>,
    path: &str,
    target: &str,
    malformed_rule: &'static str,
) -> Option<&'c Def> {
    let id = cx.id();
    let catalog = cx.catalog;
    let (nsid, _) = match split_ref(id, target) {
        Ok(parts) => parts,
        Err(_) => {
            cx.report(
                path,
                malformed_rule,
                format!(
                    "'{target}' is not a reference; expected #name (a def in this lexicon), \
                     nsid (its main def) or nsid#name"
                ),
            );
            return None;
        }
    };
    if !target.starts_with('#')
        && let Err(e) = check_nsid(nsid)
    {
        cx.report(
            path,
            malformed_rule,
            format!(
                "'{target}' is not a reference: '{nsid}' is {e}; expected #name, nsid or \
                 nsid#name"
            ),
        );
        return None;
    }
    match catalog.resolve(id, target) {
        // The resolution borrows `target`, which lives only for this call;
        // the def itself lives as long as the catalog, so fetch it from there.
        Ok(resolved) => catalog.get(resolved.nsid)?.defs.get(resolved.name),
        Err(e) => {
            report_unresolved(cx, path, target, &e);
            None
        }
    }
}

fn report_unresolved(cx: &mut Cx, path: &str, target: &str, e: &ResolveError) {
    match e {
        ResolveError::UnknownLexicon(nsid) => cx.report(
            path,
            rules::UNRESOLVED_LEXICON,
            format!(
                "'{target}' refers to lexicon '{nsid}', which is not in the catalog; add it, or \
                 allow {} for external lexicons",
                rules::UNRESOLVED_LEXICON
            ),
        ),
        ResolveError::UnknownDef { nsid, name } => cx.report(
            path,
            rules::DANGLING_REF,
            format!(
                "'{target}' refers to def '{name}' of lexicon '{nsid}', which has no such def; \
                 fix the name or add the def"
            ),
        ),
        ResolveError::Malformed(_) => cx.report(
            path,
            rules::BAD_REF,
            format!("'{target}' is not a reference; expected #name, nsid or nsid#name"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lint::test_support::lint_docs;
    use serde_json::json;

    #[test]
    fn only_qualified_nsid_fragments_read_as_token_refs() {
        assert!(is_token_ref("com.example.defs#tag"));
        for plain in [
            "com.example.defs",
            "#tag",
            "not an nsid#tag",
            "com.example.defs#bad-name",
            "a#b",
            "com.example.defs#",
            "https://example.com/page#section",
        ] {
            assert!(!is_token_ref(plain), "{plain}");
        }
    }

    #[test]
    fn a_ref_to_a_def_the_parser_left_out_is_dangling() {
        // A ref def is not allowed (type-not-allowed while loading), so a
        // ref-to-ref chain ends at a def the catalog does not have.
        let mut catalog = crate::catalog::Catalog::new();
        let structural = catalog.add(
            "com/example/chain.json",
            &json!({"lexicon": 1, "id": "com.example.chain", "defs": {
                "main": {"type": "object", "properties": {"a": {"type": "ref", "ref": "#alias"}}},
                "alias": {"type": "ref", "ref": "#main"}
            }}),
        );
        assert_eq!(structural.len(), 1);
        let found: Vec<_> = crate::lint::lint(&catalog)
            .into_iter()
            .map(|f| (f.path, f.rule))
            .collect();
        assert_eq!(
            found,
            [(
                "/defs/main/properties/a/ref".to_string(),
                rules::DANGLING_REF
            )]
        );
    }

    #[test]
    fn resolution_crosses_documents_in_either_load_order() {
        let user = json!({"lexicon": 1, "id": "com.example.user", "defs": {
            "main": {"type": "object", "properties": {
                "v": {"type": "union", "refs": ["com.example.defs#view"]}
            }}
        }});
        let defs = json!({"lexicon": 1, "id": "com.example.defs", "defs": {
            "view": {"type": "object", "properties": {}}
        }});
        for docs in [
            [
                ("com/example/user.json", user.clone()),
                ("com/example/defs.json", defs.clone()),
            ],
            [
                ("com/example/defs.json", defs.clone()),
                ("com/example/user.json", user.clone()),
            ],
        ] {
            assert!(lint_docs(&docs).is_empty());
        }
    }
}
