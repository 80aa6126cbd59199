//! `required` and `nullable` lists of objects and params: every name is a
//! property, and no name is listed twice.

use super::{Cx, rules};
use crate::finding::pointer_push;
use crate::schema::Type;
use indexmap::IndexMap;
use std::collections::HashMap;

pub(super) fn check_lists(
    cx: &mut Cx,
    path: &str,
    required: &[String],
    nullable: &[String],
    properties: &IndexMap<String, Type>,
) {
    check_list(
        cx,
        path,
        "required",
        rules::BAD_REQUIRED,
        required,
        properties,
    );
    check_list(
        cx,
        path,
        "nullable",
        rules::BAD_NULLABLE,
        nullable,
        properties,
    );
}

fn check_list(
    cx: &mut Cx,
    path: &str,
    key: &str,
    rule: &'static str,
    names: &[String],
    properties: &IndexMap<String, Type>,
) {
    let list_path = pointer_push(path, key);
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let item_path = pointer_push(&list_path, &i.to_string());
        if let Some(first) = seen.get(name.as_str()) {
            cx.report(
                &item_path,
                rule,
                format!("'{name}' is already listed in {key} at index {first}; list it once"),
            );
            continue;
        }
        seen.insert(name, i);
        if !properties.contains_key(name) {
            cx.report(
                &item_path,
                rule,
                format!(
                    "'{name}' is listed in {key}, but there is no property '{name}'; fix the \
                     name or add the property"
                ),
            );
        }
    }
}
