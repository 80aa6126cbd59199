//! Records: the `$type` names a record lexicon, the record key fits the
//! record's key scheme, and the body validates against the record object.

use serde_json::Value;

use super::data_model::{Kind, classify, describe};
use super::strings::quote;
use super::walk::Walker;
use super::{Path, rules};
use crate::schema::{Def, RecordKey};
use crate::syntax::Format;

pub(crate) fn record(w: &mut Walker<'_>, value: &Value, rkey: Option<&str>) {
    let root = Path::Root;
    let mut key_scheme = None;
    if w.too_deep(value, &root, 0) {
        if let Some(rkey) = rkey {
            check_rkey(w, rkey, None);
        }
        return;
    }
    let kind = classify(value, &root, &mut w.sink);
    let Kind::Object(map) = kind else {
        w.sink.report(
            &root,
            rules::TYPE,
            format!("a record must be an object, found {}", describe(value)),
        );
        w.children(value, &root, 0);
        if let Some(rkey) = rkey {
            check_rkey(w, rkey, None);
        }
        return;
    };
    let type_path = root.key("$type");
    let mut schema = None;
    match map.get("$type") {
        Some(Value::String(t)) if !t.is_empty() => match w.resolve_data_type(t) {
            Some(resolved) => match resolved.def {
                Def::Record(rec) => {
                    key_scheme = Some(&rec.key);
                    schema = Some((resolved.nsid, rec));
                }
                other => w.sink.report(
                    &type_path,
                    rules::RECORD_TYPE,
                    format!(
                        "$type {} names a {} definition, not a record",
                        quote(t),
                        other.type_name()
                    ),
                ),
            },
            None => w.sink.report(
                &type_path,
                rules::UNKNOWN_TYPE,
                format!("$type {} is not a record type in the catalog", quote(t)),
            ),
        },
        // A malformed $type was reported by `classify`.
        Some(_) => {}
        None => w.sink.report(
            &type_path,
            rules::REQUIRED,
            "a record must have a $type naming its lexicon",
        ),
    }
    if let Some(rkey) = rkey {
        check_rkey(w, rkey, key_scheme);
    }
    match schema {
        Some((nsid, rec)) => w.object(
            nsid,
            &rec.record.properties,
            &rec.record.required,
            &rec.record.nullable,
            map,
            &root,
            0,
        ),
        None => w.children(value, &root, 0),
    }
}

/// Every key must have record-key syntax; then the record's scheme applies.
/// The key is not part of the data, so findings point at the root.
fn check_rkey(w: &mut Walker<'_>, rkey: &str, scheme: Option<&RecordKey>) {
    let root = Path::Root;
    if let Err(e) = Format::RecordKey.check(rkey) {
        w.sink.report(
            &root,
            rules::RECORD_KEY,
            format!("record key {} is {e}", quote(rkey)),
        );
        return;
    }
    let result = match scheme {
        None | Some(RecordKey::Any) => Ok(()),
        Some(RecordKey::Tid) => Format::Tid.check(rkey).map_err(|e| e.to_string()),
        Some(RecordKey::Nsid) => Format::Nsid.check(rkey).map_err(|e| e.to_string()),
        Some(RecordKey::Literal(expected)) if rkey == expected => Ok(()),
        Some(RecordKey::Literal(expected)) => Err(format!(
            "not the only key this collection allows ({})",
            quote(expected)
        )),
    };
    if let Err(reason) = result {
        w.sink.report(
            &root,
            rules::RECORD_KEY,
            format!("record key {} is {reason}", quote(rkey)),
        );
    }
}
