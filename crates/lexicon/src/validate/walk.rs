//! The schema-driven walk: each data node is classified once
//! ([`classify`]), then checked against the schema type at its place.
//! Children the schema does not describe are still walked for the data-model
//! rules, so one pass covers everything and the cost stays linear in the
//! size of the data.

use serde_json::{Map, Value};

use super::blob::{self, legacy_blob};
use super::data_model::{Kind, classify, describe};
use super::strings::{check_boolean, check_integer, check_string, count, list, quote};
use super::{Path, Sink, rules};
use crate::catalog::{Catalog, Resolved, split_ref};
use crate::schema::{Array, Def, Type, Union};

/// Schema hops (ref → def, union → variant, unknown → `$type`) allowed on
/// one data node before the walk gives up. Real lexicons need two or three;
/// the bound stops ref loops in a broken catalog without touching the data.
pub(crate) const MAX_HOPS: u8 = 8;

pub(crate) struct Walker<'c> {
    pub catalog: &'c Catalog,
    pub max_depth: usize,
    pub legacy_blobs: bool,
    pub sink: Sink,
}

impl<'c> Walker<'c> {
    /// Reports a container at or past the depth limit; its contents are skipped.
    pub(crate) fn too_deep(&mut self, v: &Value, path: &Path<'_>, depth: usize) -> bool {
        if depth >= self.max_depth && matches!(v, Value::Array(_) | Value::Object(_)) {
            self.sink.report(
                path,
                rules::DEPTH,
                format!(
                    "data is nested deeper than {} levels here; this branch was not checked",
                    self.max_depth
                ),
            );
            true
        } else {
            false
        }
    }

    /// Checks `v`, which sits under `depth` containers, against `ty` as
    /// written in lexicon `from`.
    pub(crate) fn visit(
        &mut self,
        from: &'c str,
        ty: &'c Type,
        v: &Value,
        path: &Path<'_>,
        depth: usize,
    ) {
        if self.too_deep(v, path, depth) {
            return;
        }
        let kind = classify(v, path, &mut self.sink);
        self.dispatch(from, ty, v, kind, path, depth, 0);
    }

    /// Data-model checks only, for values no schema describes.
    pub(crate) fn data(&mut self, v: &Value, path: &Path<'_>, depth: usize) {
        if self.too_deep(v, path, depth) {
            return;
        }
        classify(v, path, &mut self.sink);
        self.children(v, path, depth);
    }

    /// Data-model checks on the children of an already classified node.
    pub(crate) fn children(&mut self, v: &Value, path: &Path<'_>, depth: usize) {
        match v {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.data(item, &path.index(i), depth + 1);
                }
            }
            Value::Object(map) => {
                for (k, child) in map {
                    self.data(child, &path.key(k), depth + 1);
                }
            }
            _ => {}
        }
    }

    fn mismatch(&mut self, expected: &str, v: &Value, path: &Path<'_>, depth: usize) {
        self.sink.report(
            path,
            rules::TYPE,
            format!(
                "{} must be {expected}, found {}",
                path.subject(),
                describe(v)
            ),
        );
        self.children(v, path, depth);
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn dispatch(
        &mut self,
        from: &'c str,
        ty: &'c Type,
        v: &Value,
        kind: Kind<'_>,
        path: &Path<'_>,
        depth: usize,
        hops: u8,
    ) {
        match (ty, kind) {
            (Type::Null(_), Kind::Null) => {}
            (Type::Boolean(t), Kind::Bool(b)) => check_boolean(b, t, path, &mut self.sink),
            (Type::Integer(t), Kind::Int(i)) => check_integer(i, t, path, &mut self.sink),
            // The float or overflow is the finding; no second one for the type.
            (Type::Integer(_), Kind::BadNumber) => {}
            (Type::String(t), Kind::Str(s)) => check_string(s, t, path, &mut self.sink),
            (Type::Bytes(t), Kind::Bytes(len)) => {
                if let Some(len) = len {
                    blob::check_bytes_length(len, t, path, &mut self.sink);
                }
                self.children(v, path, depth);
            }
            (Type::CidLink(_), Kind::Link) => self.children(v, path, depth),
            (Type::Blob(t), Kind::Blob(b)) => {
                blob::check_blob(t, b, path, &mut self.sink);
                self.children(v, path, depth);
            }
            (Type::Blob(t), Kind::Object(map)) if legacy_blob(map) => {
                if self.legacy_blobs {
                    blob::check_legacy_blob(t, map, path, &mut self.sink);
                    self.children(v, path, depth);
                } else {
                    self.mismatch(
                        "a blob (legacy {cid, mimeType} blobs are refused here)",
                        v,
                        path,
                        depth,
                    );
                }
            }
            (Type::Array(t), Kind::Array(items)) => self.array(from, t, items, path, depth),
            (Type::Object(t), Kind::Object(map)) => {
                self.object(
                    from,
                    &t.properties,
                    &t.required,
                    &t.nullable,
                    map,
                    path,
                    depth,
                );
            }
            (Type::Params(t), Kind::Object(map)) => {
                self.object(from, &t.properties, &t.required, &[], map, path, depth);
            }
            (Type::Ref(r), _) => self.reference(from, &r.target, v, kind, path, depth, hops),
            (Type::Union(u), _) => self.union(from, u, v, kind, path, depth, hops),
            (Type::Unknown(_), _) => self.unknown(v, kind, path, depth, hops),
            (Type::Token(_), _) => {
                self.sink.report(
                    path,
                    rules::DEF_KIND,
                    format!(
                        "{} is declared as an inline token, which data can not match; \
                         tokens are only named definitions",
                        path.subject()
                    ),
                );
                self.children(v, path, depth);
            }
            (ty, _) => self.mismatch(expected(ty), v, path, depth),
        }
    }

    fn array(
        &mut self,
        from: &'c str,
        t: &'c Array,
        items: &[Value],
        path: &Path<'_>,
        depth: usize,
    ) {
        let n = items.len() as u64;
        if let Some(max) = t.max_length
            && n > max
        {
            self.sink.report(
                path,
                rules::ARRAY_LENGTH,
                format!(
                    "{} has {}, over the maximum of {max}",
                    path.subject(),
                    count(n, "item")
                ),
            );
        }
        if let Some(min) = t.min_length
            && n < min
        {
            self.sink.report(
                path,
                rules::ARRAY_LENGTH,
                format!(
                    "{} has {}, under the minimum of {min}",
                    path.subject(),
                    count(n, "item")
                ),
            );
        }
        for (i, item) in items.iter().enumerate() {
            self.visit(from, &t.items, item, &path.index(i), depth + 1);
        }
    }

    /// The fields of an object (or params): missing required fields first,
    /// then every field in document order. Fields the schema does not
    /// declare are allowed (forward compatibility) and get the data-model
    /// checks only.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn object(
        &mut self,
        from: &'c str,
        properties: &'c indexmap::IndexMap<String, Type>,
        required: &'c [String],
        nullable: &'c [String],
        map: &Map<String, Value>,
        path: &Path<'_>,
        depth: usize,
    ) {
        for name in required {
            if !map.contains_key(name) {
                self.sink.report(
                    &path.key(name),
                    rules::REQUIRED,
                    format!("required field {} is missing", quote(name)),
                );
            }
        }
        for (k, child) in map {
            let child_path = path.key(k);
            match properties.get(k.as_str()) {
                Some(t) => {
                    if child.is_null() && !matches!(t, Type::Null(_)) {
                        if !nullable.iter().any(|n| n == k) {
                            self.sink.report(
                                &child_path,
                                rules::NULLABLE,
                                format!("{k} is null, but the schema does not list it as nullable"),
                            );
                        }
                        continue;
                    }
                    self.visit(from, t, child, &child_path, depth + 1);
                }
                None => self.data(child, &child_path, depth + 1),
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reference(
        &mut self,
        from: &'c str,
        target: &'c str,
        v: &Value,
        kind: Kind<'_>,
        path: &Path<'_>,
        depth: usize,
        hops: u8,
    ) {
        if hops >= MAX_HOPS {
            self.sink.report(
                path,
                rules::REF_CYCLE,
                format!(
                    "{}: the schema's references loop (or chain more than {MAX_HOPS} deep) \
                     at {target}; the value was not checked against it",
                    path.subject()
                ),
            );
            self.children(v, path, depth);
            return;
        }
        match self.catalog.resolve(from, target) {
            Ok(resolved) => self.def(resolved, v, kind, path, depth, hops + 1),
            Err(e) => {
                self.sink.report(
                    path,
                    rules::UNRESOLVED_REF,
                    format!(
                        "{} could not be checked: the schema's reference {target} does not \
                         resolve ({e})",
                        path.subject()
                    ),
                );
                self.children(v, path, depth);
            }
        }
    }

    /// Checks a node against a named definition.
    pub(crate) fn def(
        &mut self,
        resolved: Resolved<'c>,
        v: &Value,
        kind: Kind<'_>,
        path: &Path<'_>,
        depth: usize,
        hops: u8,
    ) {
        match resolved.def {
            Def::Record(rec) => match kind {
                Kind::Object(map) => self.object(
                    resolved.nsid,
                    &rec.record.properties,
                    &rec.record.required,
                    &rec.record.nullable,
                    map,
                    path,
                    depth,
                ),
                _ => self.mismatch("an object", v, path, depth),
            },
            Def::Type(Type::Token(_)) => {
                let matches =
                    matches!(kind, Kind::Str(s) if is_type_id(s, resolved.nsid, resolved.name));
                if !matches {
                    let id = resolved.type_id();
                    let found = match kind {
                        Kind::Str(s) => quote(s),
                        _ => describe(v).to_string(),
                    };
                    self.sink.report(
                        path,
                        rules::TOKEN,
                        format!(
                            "{} must be the token {}, found {found}",
                            path.subject(),
                            quote(&id)
                        ),
                    );
                    self.children(v, path, depth);
                }
            }
            Def::Type(t) => self.dispatch(resolved.nsid, t, v, kind, path, depth, hops),
            other => {
                self.sink.report(
                    path,
                    rules::DEF_KIND,
                    format!(
                        "{} refers to {resolved}, a {} definition, which data can not be checked against",
                        path.subject(),
                        other.type_name()
                    ),
                );
                self.children(v, path, depth);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn union(
        &mut self,
        from: &'c str,
        u: &'c Union,
        v: &Value,
        kind: Kind<'_>,
        path: &Path<'_>,
        depth: usize,
        hops: u8,
    ) {
        let Kind::Object(map) = kind else {
            self.sink.report(
                path,
                rules::UNION_TYPE,
                format!(
                    "{} must be an object with a $type (one of {}), found {}",
                    path.subject(),
                    list(u.refs.iter().map(|r| qualified(from, r))),
                    describe(v)
                ),
            );
            self.children(v, path, depth);
            return;
        };
        let t = match map.get("$type") {
            Some(Value::String(t)) if !t.is_empty() => t.as_str(),
            Some(_) => {
                // A malformed $type was reported when the node was classified.
                self.children(v, path, depth);
                return;
            }
            None => {
                self.sink.report(
                    path,
                    rules::UNION_TYPE,
                    format!(
                        "{} has no $type; a union value must name its type (one of {})",
                        path.subject(),
                        list(u.refs.iter().map(|r| qualified(from, r)))
                    ),
                );
                self.children(v, path, depth);
                return;
            }
        };
        if let Some(r) = u.refs.iter().find(|r| ref_matches(from, r, t)) {
            self.reference(from, r, v, kind, path, depth, hops);
        } else if u.closed {
            self.sink.report(
                path,
                rules::CLOSED_UNION,
                format!(
                    "$type {} is not one of the closed union's types: {}",
                    quote(t),
                    list(u.refs.iter().map(|r| qualified(from, r)))
                ),
            );
            self.children(v, path, depth);
        } else {
            self.known_type(t, v, kind, path, depth, hops);
        }
    }

    /// `unknown` holds any object. One that names a type the catalog knows
    /// (an object or record def) is checked against it; anything else gets
    /// the data-model checks only.
    fn unknown(&mut self, v: &Value, kind: Kind<'_>, path: &Path<'_>, depth: usize, hops: u8) {
        match kind {
            Kind::Object(map) => match map.get("$type") {
                Some(Value::String(t)) if !t.is_empty() => {
                    self.known_type(t, v, kind, path, depth, hops)
                }
                _ => self.children(v, path, depth),
            },
            _ => self.mismatch("an object", v, path, depth),
        }
    }

    /// Open unions and `unknown`: check against `$type` when the catalog
    /// has it as an object or record; accept it unchecked otherwise.
    fn known_type(
        &mut self,
        t: &str,
        v: &Value,
        kind: Kind<'_>,
        path: &Path<'_>,
        depth: usize,
        hops: u8,
    ) {
        if hops < MAX_HOPS
            && let Some(resolved) = self.resolve_data_type(t)
            && matches!(resolved.def, Def::Record(_) | Def::Type(Type::Object(_)))
        {
            self.def(resolved, v, kind, path, depth, hops + 1);
        } else {
            self.children(v, path, depth);
        }
    }

    /// Looks up a `$type` found in data (`nsid` or `nsid#name`), borrowing
    /// the result from the catalog rather than from the data.
    pub(crate) fn resolve_data_type(&self, t: &str) -> Option<Resolved<'c>> {
        let (nsid, name) = split_ref("", t).ok()?;
        let doc = self.catalog.get(nsid)?;
        let (name, def) = doc.defs.get_key_value(name)?;
        Some(Resolved {
            nsid: &doc.id,
            name,
            def,
        })
    }
}

/// True when `$type` value `t` names the def `reference` (as written in
/// lexicon `from`) points to; `nsid` and `nsid#main` are the same type.
pub(crate) fn ref_matches(from: &str, reference: &str, t: &str) -> bool {
    match (split_ref(from, reference), split_ref("", t)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// A union ref as a `$type` would spell it: `#x` becomes `nsid#x`.
fn qualified(from: &str, reference: &str) -> String {
    if reference.starts_with('#') {
        format!("{from}{reference}")
    } else {
        reference.to_string()
    }
}

/// True when `s` is the type id of def `name` in lexicon `nsid`.
fn is_type_id(s: &str, nsid: &str, name: &str) -> bool {
    match s.strip_prefix(nsid) {
        Some("") => name == "main",
        Some(rest) => rest.strip_prefix('#') == Some(name),
        None => false,
    }
}

/// "an integer", "a string" … for type mismatch messages.
fn expected(ty: &Type) -> &'static str {
    match ty {
        Type::Null(_) => "null",
        Type::Boolean(_) => "a boolean",
        Type::Integer(_) => "an integer",
        Type::String(_) => "a string",
        Type::Bytes(_) => "bytes ({\"$bytes\": base64})",
        Type::CidLink(_) => "a cid-link ({\"$link\": cid})",
        Type::Blob(_) => "a blob",
        Type::Array(_) => "an array",
        Type::Object(_) | Type::Params(_) => "an object",
        Type::Token(_) => "a token",
        Type::Ref(_) => "a referenced value",
        Type::Union(_) => "a union variant",
        Type::Unknown(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn main_and_bare_nsid_are_the_same_type() {
        assert!(ref_matches("a.b.c", "#x", "a.b.c#x"));
        assert!(ref_matches("a.b.c", "d.e.f", "d.e.f#main"));
        assert!(ref_matches("a.b.c", "d.e.f#main", "d.e.f"));
        assert!(!ref_matches("a.b.c", "#x", "#x"));
        assert!(!ref_matches("a.b.c", "#x", "a.b.c#y"));
        assert!(is_type_id("a.b.c#tok", "a.b.c", "tok"));
        assert!(is_type_id("a.b.c", "a.b.c", "main"));
        assert!(!is_type_id("a.b.cd#tok", "a.b.c", "tok"));
        assert!(!is_type_id("a.b.c#to", "a.b.c", "tok"));
    }
}
