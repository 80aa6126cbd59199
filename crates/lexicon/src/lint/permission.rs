//! bad-permission: the entries of a permission set, and its localized
//! title and detail.
//!
//! Lexicon permission sets know two resources (spec, `permission`):
//! - `repo`: `collection` (required, non-empty, unique NSIDs, no wildcard)
//!   and `action` (unique, each `create`, `update` or `delete`);
//! - `rpc`: `lxm` (required, non-empty NSIDs, or `*`), `aud` (only `*`: a
//!   set may not fix a service DID) and `inheritAud` (boolean); `aud` is
//!   required unless `inheritAud` is true, and `aud` and `lxm` may not both
//!   be `*`.
//!
//! `blob`, `account` and `identity` are permission resources, but not in
//! lexicons: services ignore them there, so they are reported too.

use super::{Cx, rules};
use crate::finding::pointer_push;
use crate::schema::{Permission, PermissionSet};
use crate::syntax::{check_language, check_nsid};
use indexmap::IndexMap;
use serde_json::Value;
use std::collections::HashMap;

const REPO_PARAMS: &[&str] = &["collection", "action"];
const RPC_PARAMS: &[&str] = &["lxm", "aud", "inheritAud"];
const ACTIONS: &[&str] = &["create", "update", "delete"];

pub(super) fn check(cx: &mut Cx, path: &str, set: &PermissionSet) {
    lang_keys(cx, path, "title:lang", &set.title_lang);
    lang_keys(cx, path, "detail:lang", &set.detail_lang);
    let list_path = pointer_push(path, "permissions");
    for (i, permission) in set.permissions.iter().enumerate() {
        entry(cx, &pointer_push(&list_path, &i.to_string()), permission);
    }
}

fn lang_keys(cx: &mut Cx, path: &str, key: &str, map: &IndexMap<String, String>) {
    let map_path = pointer_push(path, key);
    for lang in map.keys() {
        if let Err(e) = check_language(lang) {
            cx.report(
                &pointer_push(&map_path, lang),
                rules::BAD_PERMISSION,
                format!(
                    "'{lang}' in {key} is {e}; keys must be language tags like 'fr' or 'pt-BR'"
                ),
            );
        }
    }
}

fn entry(cx: &mut Cx, path: &str, permission: &Permission) {
    let resource = permission.resource.as_str();
    let allowed = match resource {
        "repo" => REPO_PARAMS,
        "rpc" => RPC_PARAMS,
        _ => {
            let why = if matches!(resource, "blob" | "account" | "identity") {
                format!(
                    "resource '{resource}' is not supported in lexicon permission sets \
                     (services ignore it)"
                )
            } else {
                format!("'{resource}' is not a permission resource")
            };
            cx.report(
                &pointer_push(path, "resource"),
                rules::BAD_PERMISSION,
                format!("{why}; a permission set may grant repo and rpc"),
            );
            return;
        }
    };
    let params = &permission.params;
    for key in params.keys() {
        if !allowed.contains(&key.as_str()) {
            cx.report(
                &pointer_push(path, key),
                rules::BAD_PERMISSION,
                format!(
                    "'{key}' is not a parameter of a {resource} permission (expected: {})",
                    allowed.join(", ")
                ),
            );
        }
    }
    if resource == "repo" {
        repo(cx, path, params);
    } else {
        rpc(cx, path, params);
    }
}

fn repo(cx: &mut Cx, path: &str, params: &IndexMap<String, Value>) {
    match params.get("collection") {
        None => cx.report(
            path,
            rules::BAD_PERMISSION,
            "a repo permission needs 'collection', a list of record NSIDs",
        ),
        Some(value) => {
            let list_path = pointer_push(path, "collection");
            each_unique_string(
                cx,
                &list_path,
                "collection",
                value,
                |cx, item_path, nsid| {
                    if nsid.contains('*') {
                        cx.report(
                        item_path,
                        rules::BAD_PERMISSION,
                        format!(
                            "collection '{nsid}' is a wildcard, which lexicon permission sets do \
                             not support; list each record NSID"
                        ),
                    );
                    } else if let Err(e) = check_nsid(nsid) {
                        cx.report(
                            item_path,
                            rules::BAD_PERMISSION,
                            format!("collection '{nsid}' is {e}; expected a record NSID"),
                        );
                    }
                },
            );
        }
    }
    if let Some(value) = params.get("action") {
        let list_path = pointer_push(path, "action");
        each_unique_string(cx, &list_path, "action", value, |cx, item_path, action| {
            if !ACTIONS.contains(&action) {
                cx.report(
                    item_path,
                    rules::BAD_PERMISSION,
                    format!(
                        "'{action}' is not a repo action; expected {} (case-sensitive)",
                        ACTIONS.join(", ")
                    ),
                );
            }
        });
    }
}

fn rpc(cx: &mut Cx, path: &str, params: &IndexMap<String, Value>) {
    let mut any_method = false;
    match params.get("lxm") {
        None => cx.report(
            path,
            rules::BAD_PERMISSION,
            "an rpc permission needs 'lxm', a list of endpoint NSIDs (or '*')",
        ),
        Some(value) => {
            let list_path = pointer_push(path, "lxm");
            each_unique_string(cx, &list_path, "lxm", value, |cx, item_path, lxm| {
                if lxm == "*" {
                    any_method = true;
                } else if let Err(e) = check_nsid(lxm) {
                    cx.report(
                        item_path,
                        rules::BAD_PERMISSION,
                        format!("lxm '{lxm}' is {e}; expected an endpoint NSID or '*'"),
                    );
                }
            });
        }
    }
    let inherit = match params.get("inheritAud") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            cx.report(
                &pointer_push(path, "inheritAud"),
                rules::BAD_PERMISSION,
                "inheritAud must be a boolean",
            );
            false
        }
    };
    let aud_path = pointer_push(path, "aud");
    match params.get("aud") {
        None if !inherit => cx.report(
            path,
            rules::BAD_PERMISSION,
            "an rpc permission needs aud: '*' or inheritAud: true",
        ),
        None => {}
        Some(Value::String(aud)) if aud == "*" && any_method => cx.report(
            &aud_path,
            rules::BAD_PERMISSION,
            "aud and lxm are both '*'; at most one of them may be a wildcard",
        ),
        Some(Value::String(aud)) if aud == "*" => {}
        Some(Value::String(aud)) => cx.report(
            &aud_path,
            rules::BAD_PERMISSION,
            format!(
                "aud '{aud}' fixes a service, which permission sets may not do; use aud: '*', \
                 or leave it out and set inheritAud: true"
            ),
        ),
        Some(_) => cx.report(
            &aud_path,
            rules::BAD_PERMISSION,
            "aud must be the string '*'",
        ),
    }
}

/// Calls `check` with the path and value of each string of a list
/// parameter, in order; reports a value that is not a list, an empty list,
/// entries that are not strings, and duplicates (which are not checked).
fn each_unique_string(
    cx: &mut Cx,
    path: &str,
    key: &str,
    value: &Value,
    mut check: impl FnMut(&mut Cx, &str, &str),
) {
    let Some(items) = value.as_array() else {
        cx.report(
            path,
            rules::BAD_PERMISSION,
            format!("'{key}' must be a list of strings"),
        );
        return;
    };
    if items.is_empty() {
        let message = if key == "action" {
            "'action' is empty, so no operation is allowed; list actions, or leave 'action' out \
             to allow all of them"
                .to_string()
        } else {
            format!("'{key}' is empty; list at least one value")
        };
        cx.report(path, rules::BAD_PERMISSION, message);
    }
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let item_path = pointer_push(path, &i.to_string());
        let Some(s) = item.as_str() else {
            cx.report(
                &item_path,
                rules::BAD_PERMISSION,
                format!("'{key}' entries must be strings"),
            );
            continue;
        };
        if let Some(first) = seen.get(s) {
            cx.report(
                &item_path,
                rules::BAD_PERMISSION,
                format!("'{s}' is already listed in {key} at index {first}; list it once"),
            );
            continue;
        }
        seen.insert(s, i);
        check(cx, &item_path, s);
    }
}
