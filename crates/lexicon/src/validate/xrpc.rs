//! XRPC: query parameters, request and response bodies, and subscription
//! messages, each checked against the method's main definition.

use std::collections::HashSet;

use serde_json::{Map, Number, Value};

use super::data_model::classify;
use super::strings::quote;
use super::walk::{Walker, ref_matches};
use super::{Path, rules};
use crate::catalog::{Catalog, Resolved, split_ref};
use crate::schema::{Body, Def, Params, Type};

/// Which body of a method to check.
#[derive(Clone, Copy)]
pub(crate) enum Side {
    Input,
    Output,
}

/// Finds the method `nsid` (its `main` def), or reports why not.
fn method<'c>(w: &mut Walker<'c>, nsid: &str) -> Option<Resolved<'c>> {
    match w.resolve_data_type(nsid) {
        Some(r) => Some(r),
        None => {
            w.sink.report(
                &Path::Root,
                rules::UNKNOWN_TYPE,
                format!("{} is not a method in the catalog", quote(nsid)),
            );
            None
        }
    }
}

fn wrong_kind(w: &mut Walker<'_>, r: &Resolved<'_>, wanted: &str) {
    w.sink.report(
        &Path::Root,
        rules::DEF_KIND,
        format!("{r} is a {} definition, not {wanted}", r.def.type_name()),
    );
}

fn params_of(def: &Def) -> Option<Option<&Params>> {
    match def {
        Def::Query(q) => Some(q.parameters.as_ref()),
        Def::Procedure(p) => Some(p.parameters.as_ref()),
        Def::Subscription(s) => Some(s.parameters.as_ref()),
        _ => None,
    }
}

const NO_PARAMS: &[String] = &[];

pub(crate) fn params(w: &mut Walker<'_>, nsid: &str, map: &Map<String, Value>) {
    let Some(r) = method(w, nsid) else {
        return;
    };
    let Some(params) = params_of(r.def) else {
        wrong_kind(w, &r, "a query, procedure or subscription");
        return;
    };
    let root = Path::Root;
    match params {
        Some(p) => w.object(r.nsid, &p.properties, &p.required, NO_PARAMS, map, &root, 0),
        // No declared parameters: extra ones are allowed, like extra fields.
        None => {
            for (k, v) in map {
                w.data(v, &root.key(k), 1);
            }
        }
    }
}

pub(crate) fn body(w: &mut Walker<'_>, nsid: &str, side: Side, value: &Value) {
    let Some(r) = method(w, nsid) else {
        return;
    };
    let body: Option<&Body> = match (side, r.def) {
        (Side::Input, Def::Procedure(p)) => p.input.as_ref(),
        (Side::Output, Def::Procedure(p)) => p.output.as_ref(),
        (Side::Output, Def::Query(q)) => q.output.as_ref(),
        (Side::Input, _) => {
            wrong_kind(w, &r, "a procedure");
            return;
        }
        (Side::Output, _) => {
            wrong_kind(w, &r, "a query or procedure");
            return;
        }
    };
    let root = Path::Root;
    let Some(body) = body else {
        let what = match side {
            Side::Input => "an input",
            Side::Output => "an output",
        };
        w.sink
            .report(&root, rules::BODY, format!("{r} declares no {what} body"));
        return;
    };
    match &body.schema {
        Some(schema) => w.visit(r.nsid, schema, value, &root, 0),
        // A non-JSON body (`encoding` only): nothing to check the value against.
        None => w.data(value, &root, 0),
    }
}

fn message_schema<'c>(w: &mut Walker<'c>, nsid: &str) -> Option<(&'c str, &'c Type)> {
    let r = method(w, nsid)?;
    let Def::Subscription(s) = r.def else {
        wrong_kind(w, &r, "a subscription");
        return None;
    };
    match &s.message {
        Some(m) => Some((r.nsid, &m.schema)),
        None => {
            w.sink.report(
                &Path::Root,
                rules::BODY,
                format!("{r} declares no message schema"),
            );
            None
        }
    }
}

pub(crate) fn message(w: &mut Walker<'_>, nsid: &str, value: &Value) {
    if let Some((from, schema)) = message_schema(w, nsid) {
        w.visit(from, schema, value, &Path::Root, 0);
    }
}

/// A frame body whose type comes from the frame header (`t`, e.g.
/// `#commit`) rather than from a `$type` in the body.
pub(crate) fn message_of_type(w: &mut Walker<'_>, nsid: &str, t: &str, value: &Value) {
    let Some((from, schema)) = message_schema(w, nsid) else {
        return;
    };
    let root = Path::Root;
    let Type::Union(u) = schema else {
        w.visit(from, schema, value, &root, 0);
        return;
    };
    if w.too_deep(value, &root, 0) {
        return;
    }
    // Normalise the header type (`#commit` is local to the method).
    let full = match split_ref(from, t) {
        Ok((n, "main")) => n.to_string(),
        Ok((n, name)) => format!("{n}#{name}"),
        Err(e) => {
            w.sink.report(
                &root,
                rules::UNION_TYPE,
                format!("message type {} is not a type reference: {e}", quote(t)),
            );
            w.data(value, &root, 0);
            return;
        }
    };
    let kind = classify(value, &root, &mut w.sink);
    if let Some(r) = u.refs.iter().find(|r| ref_matches(from, r, &full)) {
        w.reference(from, r, value, kind, &root, 0, 0);
    } else if u.closed {
        w.sink.report(
            &root,
            rules::CLOSED_UNION,
            format!(
                "message type {} is not one of the closed union's types",
                quote(t)
            ),
        );
        w.children(value, &root, 0);
    } else {
        match w.resolve_data_type(&full) {
            Some(resolved)
                if matches!(resolved.def, Def::Record(_) | Def::Type(Type::Object(_))) =>
            {
                w.def(resolved, value, kind, &root, 0, 1)
            }
            _ => w.children(value, &root, 0),
        }
    }
}

/// Turns query-string pairs into JSON values by the declared parameter
/// types (see [`super::coerce_query_params`]).
pub(crate) fn coerce<'a>(
    catalog: &Catalog,
    nsid: &str,
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Map<String, Value> {
    let params = split_ref("", nsid)
        .ok()
        .and_then(|(n, name)| catalog.get(n)?.defs.get(name))
        .and_then(params_of)
        .flatten();
    let mut out = Map::new();
    // Keys whose value is a list: declared arrays, and scalars given twice.
    let mut lists: HashSet<String> = HashSet::new();
    for (key, raw) in pairs {
        let ty = params.and_then(|p| p.properties.get(key));
        let (value, declared_list) = match ty {
            Some(Type::Array(a)) => (coerce_one(&a.items, raw), true),
            Some(t) => (coerce_one(t, raw), false),
            None => (Value::String(raw.to_string()), false),
        };
        if lists.contains(key) {
            if let Some(Value::Array(items)) = out.get_mut(key) {
                items.push(value);
            }
        } else if declared_list {
            lists.insert(key.to_string());
            out.insert(key.to_string(), Value::Array(vec![value]));
        } else if let Some(existing) = out.get_mut(key) {
            // A scalar given twice becomes a list, which validation reports.
            let first = existing.take();
            *existing = Value::Array(vec![first, value]);
            lists.insert(key.to_string());
        } else {
            out.insert(key.to_string(), value);
        }
    }
    out
}

/// Strings that do not parse as the declared type stay strings, so
/// validation reports them with the rest.
fn coerce_one(ty: &Type, raw: &str) -> Value {
    match ty {
        Type::Integer(_) => raw
            .parse::<i64>()
            .map(|i| Value::Number(Number::from(i)))
            .unwrap_or_else(|_| Value::String(raw.to_string())),
        Type::Boolean(_) => match raw {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => Value::String(raw.to_string()),
        },
        Type::Unknown(_) => {
            serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
        }
        _ => Value::String(raw.to_string()),
    }
}
