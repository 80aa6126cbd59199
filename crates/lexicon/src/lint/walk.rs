//! Visits one document in source order and calls the checks for each node.

use super::{Cx, document, limits, mime, names, object, permission, refs, values};
use crate::finding::pointer_push;
use crate::schema::{Body, Def, ErrorDef, Object, Params, Type};
use std::collections::HashSet;

pub(super) fn document(cx: &mut Cx) {
    let doc = &cx.entry.doc;
    document::check_id(cx);
    let mut first_primary = None;
    for (name, def) in &doc.defs {
        let path = pointer_push("/defs", name);
        names::check_def_name(cx, &path, name);
        document::check_primary(cx, &path, name, def, &mut first_primary);
        self::def(cx, &path, def);
    }
}

fn def(cx: &mut Cx, path: &str, def: &Def) {
    match def {
        Def::Record(r) => {
            document::check_record_key(cx, &pointer_push(path, "key"), &r.key);
            object_type(cx, &pointer_push(path, "record"), &r.record);
        }
        Def::Query(q) => {
            opt_params(cx, path, q.parameters.as_ref());
            opt_body(cx, path, "output", q.output.as_ref());
            errors(cx, path, &q.errors);
        }
        Def::Procedure(p) => {
            opt_params(cx, path, p.parameters.as_ref());
            opt_body(cx, path, "input", p.input.as_ref());
            opt_body(cx, path, "output", p.output.as_ref());
            errors(cx, path, &p.errors);
        }
        Def::Subscription(s) => {
            opt_params(cx, path, s.parameters.as_ref());
            if let Some(message) = &s.message {
                let message_path = pointer_push(path, "message");
                ty(
                    cx,
                    &pointer_push(&message_path, "schema"),
                    &message.schema,
                    false,
                );
            }
            errors(cx, path, &s.errors);
        }
        Def::PermissionSet(p) => permission::check(cx, path, p),
        Def::Type(t) => ty(cx, path, t, false),
    }
}

/// Visits a field type; `required` says the enclosing object or params lists
/// it in `required`.
fn ty(cx: &mut Cx, path: &str, t: &Type, required: bool) {
    match t {
        Type::Null(_) | Type::CidLink(_) | Type::Token(_) | Type::Unknown(_) => {}
        Type::Boolean(b) => values::boolean(cx, path, b, required),
        Type::Integer(i) => {
            limits::integer(cx, path, i);
            values::integer(cx, path, i, required);
        }
        Type::String(s) => {
            let format = values::check_format(cx, path, s);
            limits::string(cx, path, s);
            values::string(cx, path, s, format, required);
        }
        Type::Bytes(b) => limits::bytes(cx, path, b),
        Type::Blob(b) => {
            mime::check_accept(cx, path, b);
            limits::blob(cx, path, b);
        }
        Type::Array(a) => {
            limits::array(cx, path, a);
            ty(cx, &pointer_push(path, "items"), &a.items, false);
        }
        Type::Object(o) => object_type(cx, path, o),
        Type::Params(p) => params(cx, path, p),
        Type::Ref(r) => refs::check_ref(cx, path, r),
        Type::Union(u) => refs::check_union(cx, path, u),
    }
}

fn object_type(cx: &mut Cx, path: &str, o: &Object) {
    object::check_lists(cx, path, &o.required, &o.nullable, &o.properties);
    properties(cx, path, &o.required, &o.properties);
}

fn params(cx: &mut Cx, path: &str, p: &Params) {
    object::check_lists(cx, path, &p.required, &[], &p.properties);
    properties(cx, path, &p.required, &p.properties);
}

fn properties(
    cx: &mut Cx,
    path: &str,
    required: &[String],
    properties: &indexmap::IndexMap<String, Type>,
) {
    let required: HashSet<&str> = required.iter().map(String::as_str).collect();
    let props_path = pointer_push(path, "properties");
    for (name, t) in properties {
        let prop_path = pointer_push(&props_path, name);
        names::check_property_name(cx, &prop_path, name);
        ty(cx, &prop_path, t, required.contains(name.as_str()));
    }
}

fn opt_params(cx: &mut Cx, path: &str, p: Option<&Params>) {
    if let Some(p) = p {
        params(cx, &pointer_push(path, "parameters"), p);
    }
}

fn opt_body(cx: &mut Cx, path: &str, key: &str, body: Option<&Body>) {
    let Some(body) = body else { return };
    let body_path = pointer_push(path, key);
    mime::check_encoding(cx, &body_path, body);
    if let Some(schema) = &body.schema {
        ty(cx, &pointer_push(&body_path, "schema"), schema, false);
    }
}

fn errors(cx: &mut Cx, path: &str, errors: &[ErrorDef]) {
    names::check_errors(cx, &pointer_push(path, "errors"), errors);
}
