//! The walk: lexicon by lexicon, def by def, field by field.

use super::flow::{Flow, canonical, def_flows, display_id};
use super::rules as r;
use super::{Change, Severity};
use crate::catalog::{Catalog, Entry};
use crate::finding::pointer_push;
use crate::schema::{
    Array, Blob, Body, Def, ErrorDef, Message, Object, Params, PermissionSet, Ref, StringType,
    Type, Union,
};
use indexmap::IndexMap;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;

/// When a rule's change breaks compatibility, given the flow at its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    Always,
    Never,
    /// Only where old data is checked against the new schema.
    Inbound,
    /// Only where new data is checked by old software.
    Outbound,
}

impl When {
    fn severity(self, flow: Flow) -> Severity {
        let breaking = match self {
            When::Always => true,
            When::Never => false,
            When::Inbound => flow.contains(Flow::INBOUND),
            When::Outbound => flow.contains(Flow::OUTBOUND),
        };
        if breaking {
            Severity::Breaking
        } else {
            Severity::Safe
        }
    }
}

/// Which document a change points into: the new one, or the old one for
/// things that no longer exist.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Old,
    New,
}

/// The pair of documents being compared. Usually the same NSID on both
/// sides; different when checking whether a renamed ref target is compatible.
#[derive(Clone, Copy)]
struct Cx<'a> {
    old_nsid: &'a str,
    new_nsid: &'a str,
    old_file: &'a str,
    new_file: &'a str,
}

/// The two fields lists (`object` or `params`) being compared.
struct Fields<'a> {
    properties: &'a IndexMap<String, Type>,
    required: &'a [String],
    /// `None` for params, which have no `nullable`.
    nullable: Option<&'a [String]>,
}

struct Differ<'a> {
    old: HashMap<&'a str, &'a Entry>,
    new: HashMap<&'a str, &'a Entry>,
    flows: HashMap<String, Flow>,
    /// Verdicts on (old target, new target, flow) pairs of renamed refs, so
    /// each pair of defs is compared once however often the ref is used.
    renames: HashMap<(String, String, Flow), Result<(), String>>,
    out: Vec<Change>,
}

pub(super) fn run(old: &Catalog, new: &Catalog) -> Vec<Change> {
    let mut d = Differ {
        old: old.entries().map(|e| (e.doc.id.as_str(), e)).collect(),
        new: new.entries().map(|e| (e.doc.id.as_str(), e)).collect(),
        flows: def_flows(old, new),
        renames: HashMap::new(),
        out: Vec::new(),
    };
    let mut nsids: Vec<&str> = d.old.keys().chain(d.new.keys()).copied().collect();
    nsids.sort_unstable();
    nsids.dedup();
    for nsid in nsids {
        match (d.old.get(nsid).copied(), d.new.get(nsid).copied()) {
            (Some(o), Some(n)) => {
                let cx = Cx {
                    old_nsid: nsid,
                    new_nsid: nsid,
                    old_file: &o.file,
                    new_file: &n.file,
                };
                d.compare_docs(cx, o, n);
            }
            (Some(o), None) => d.push(
                nsid,
                &o.file,
                "",
                r::LEXICON_REMOVED,
                Severity::Breaking,
                format!("lexicon '{nsid}' was removed"),
            ),
            (None, Some(n)) => d.push(
                nsid,
                &n.file,
                "",
                r::LEXICON_ADDED,
                Severity::Safe,
                format!("lexicon '{nsid}' was added"),
            ),
            (None, None) => {}
        }
    }
    d.out
}

impl<'a> Differ<'a> {
    fn push(
        &mut self,
        nsid: &str,
        file: &str,
        path: &str,
        rule: &'static str,
        severity: Severity,
        message: String,
    ) {
        self.out.push(Change {
            nsid: nsid.to_string(),
            file: file.to_string(),
            path: path.to_string(),
            severity,
            rule,
            message,
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        cx: Cx<'_>,
        side: Side,
        path: &str,
        rule: &'static str,
        when: When,
        flow: Flow,
        message: String,
    ) {
        let severity = when.severity(flow);
        let message = match (when, severity) {
            (When::Inbound, Severity::Breaking) => {
                format!("{message}; data valid under the old schema may be rejected")
            }
            (When::Outbound, Severity::Breaking) => {
                format!("{message}; software built on the old schema may reject new data")
            }
            (When::Inbound | When::Outbound, Severity::Safe) => {
                format!("{message}; safe here ({})", flow.label())
            }
            _ => message,
        };
        let (nsid, file) = match side {
            Side::Old => (cx.old_nsid, cx.old_file),
            Side::New => (cx.new_nsid, cx.new_file),
        };
        self.push(nsid, file, path, rule, severity, message);
    }

    /// The flow of a named non-primary def; unknown use counts as both ways.
    fn def_flow(&self, nsid: &str, name: &str) -> Flow {
        self.flows
            .get(&format!("{nsid}#{name}"))
            .copied()
            .filter(|f| !f.is_empty())
            .unwrap_or(Flow::BOTH)
    }

    fn compare_docs(&mut self, cx: Cx<'_>, old: &'a Entry, new: &'a Entry) {
        let (o, n) = (&old.doc, &new.doc);
        self.description(
            cx,
            "/description",
            o.description.as_deref(),
            n.description.as_deref(),
        );
        for (name, nd) in &n.defs {
            let path = pointer_push("/defs", name);
            match o.defs.get(name) {
                Some(od) => {
                    let flow = self.def_flow(&n.id, name);
                    self.compare_def(cx, od, nd, &path, flow);
                }
                None => self.emit(
                    cx,
                    Side::New,
                    &path,
                    r::DEF_ADDED,
                    When::Never,
                    Flow::BOTH,
                    format!("def '{name}' ({}) was added", nd.type_name()),
                ),
            }
        }
        for (name, od) in &o.defs {
            if !n.defs.contains_key(name) {
                self.emit(
                    cx,
                    Side::Old,
                    &pointer_push("/defs", name),
                    r::DEF_REMOVED,
                    When::Always,
                    Flow::BOTH,
                    format!("def '{name}' ({}) was removed", od.type_name()),
                );
            }
        }
    }

    /// Compares two defs of the same name; `flow` applies to non-primary
    /// defs (primary ones fix the flow of each of their parts).
    fn compare_def(&mut self, cx: Cx<'_>, old: &Def, new: &Def, path: &str, flow: Flow) {
        if old.type_name() != new.type_name() {
            self.emit(
                cx,
                Side::New,
                &pointer_push(path, "type"),
                r::DEF_TYPE_CHANGED,
                When::Always,
                flow,
                format!(
                    "def type changed from {} to {}",
                    old.type_name(),
                    new.type_name()
                ),
            );
            return;
        }
        if !matches!(new, Def::Type(_)) {
            self.description(
                cx,
                &pointer_push(path, "description"),
                old.description(),
                new.description(),
            );
        }
        match (old, new) {
            (Def::Record(o), Def::Record(n)) => {
                if o.key != n.key {
                    self.emit(
                        cx,
                        Side::New,
                        &pointer_push(path, "key"),
                        r::RECORD_KEY_CHANGED,
                        When::Always,
                        Flow::BOTH,
                        format!(
                            "record key type changed from '{}' to '{}'",
                            o.key.as_string(),
                            n.key.as_string()
                        ),
                    );
                }
                let rp = pointer_push(path, "record");
                self.description(
                    cx,
                    &pointer_push(&rp, "description"),
                    o.record.description.as_deref(),
                    n.record.description.as_deref(),
                );
                self.compare_object(cx, &o.record, &n.record, &rp, Flow::BOTH);
            }
            (Def::Query(o), Def::Query(n)) => {
                self.compare_params(cx, o.parameters.as_ref(), n.parameters.as_ref(), path);
                self.compare_body(cx, "output", o.output.as_ref(), n.output.as_ref(), path);
            }
            (Def::Procedure(o), Def::Procedure(n)) => {
                self.compare_params(cx, o.parameters.as_ref(), n.parameters.as_ref(), path);
                self.compare_body(cx, "input", o.input.as_ref(), n.input.as_ref(), path);
                self.compare_body(cx, "output", o.output.as_ref(), n.output.as_ref(), path);
            }
            (Def::Subscription(o), Def::Subscription(n)) => {
                self.compare_params(cx, o.parameters.as_ref(), n.parameters.as_ref(), path);
                self.compare_message(cx, o.message.as_ref(), n.message.as_ref(), path);
            }
            (Def::PermissionSet(o), Def::PermissionSet(n)) => {
                self.compare_permissions(cx, o, n, path);
            }
            (Def::Type(o), Def::Type(n)) => self.compare_type(cx, o, n, path, flow),
            _ => {}
        }
        self.compare_errors(cx, errors(old), errors(new), path);
    }

    fn description(&mut self, cx: Cx<'_>, path: &str, old: Option<&str>, new: Option<&str>) {
        let message = match (old, new) {
            (a, b) if a == b => return,
            (None, Some(_)) => "description added",
            (Some(_), None) => "description removed",
            _ => "description changed",
        };
        let side = if new.is_some() { Side::New } else { Side::Old };
        self.emit(
            cx,
            side,
            path,
            r::DESCRIPTION_CHANGED,
            When::Never,
            Flow::BOTH,
            message.to_string(),
        );
    }

    fn compare_type(&mut self, cx: Cx<'_>, old: &Type, new: &Type, path: &str, flow: Flow) {
        if old.type_name() != new.type_name() {
            if !self.ref_swapped(cx, old, new, path, flow) {
                self.emit(
                    cx,
                    Side::New,
                    &pointer_push(path, "type"),
                    r::TYPE_CHANGED,
                    When::Always,
                    flow,
                    format!(
                        "type changed from {} to {}",
                        old.type_name(),
                        new.type_name()
                    ),
                );
            }
            return;
        }
        self.description(
            cx,
            &pointer_push(path, "description"),
            old.description(),
            new.description(),
        );
        match (old, new) {
            (Type::Boolean(o), Type::Boolean(n)) => {
                self.value_const(cx, path, o.r#const, n.r#const, flow);
                self.value_default(cx, path, o.default, n.default, flow);
            }
            (Type::Integer(o), Type::Integer(n)) => {
                self.limit_min(cx, path, "minimum", o.minimum, n.minimum, flow);
                self.limit_max(cx, path, "maximum", o.maximum, n.maximum, flow);
                self.value_enum(
                    cx,
                    path,
                    o.r#enum.as_deref(),
                    n.r#enum.as_deref(),
                    false,
                    flow,
                );
                self.value_const(cx, path, o.r#const, n.r#const, flow);
                self.value_default(cx, path, o.default, n.default, flow);
            }
            (Type::String(o), Type::String(n)) => self.compare_string(cx, o, n, path, flow),
            (Type::Bytes(o), Type::Bytes(n)) => {
                self.lengths(
                    cx,
                    path,
                    (o.min_length, o.max_length),
                    (n.min_length, n.max_length),
                    flow,
                );
            }
            (Type::Blob(o), Type::Blob(n)) => self.compare_blob(cx, o, n, path, flow),
            (Type::Array(o), Type::Array(n)) => self.compare_array(cx, o, n, path, flow),
            (Type::Object(o), Type::Object(n)) => self.compare_object(cx, o, n, path, flow),
            (Type::Params(o), Type::Params(n)) => self.compare_fields(
                cx,
                path,
                "parameter",
                params_fields(o),
                params_fields(n),
                flow,
            ),
            (Type::Ref(o), Type::Ref(n)) => self.compare_ref(cx, o, n, path, flow),
            (Type::Union(o), Type::Union(n)) => self.compare_union(cx, o, n, path, flow),
            // null, cid-link, token, unknown: nothing but a description.
            _ => {}
        }
    }

    fn compare_string(
        &mut self,
        cx: Cx<'_>,
        o: &StringType,
        n: &StringType,
        path: &str,
        flow: Flow,
    ) {
        match (o.format.as_deref(), n.format.as_deref()) {
            (None, None) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, Some(b)) => self.emit(
                cx,
                Side::New,
                &pointer_push(path, "format"),
                r::FORMAT_ADDED,
                When::Inbound,
                flow,
                format!("format '{b}' added"),
            ),
            (Some(a), None) => self.emit(
                cx,
                Side::Old,
                &pointer_push(path, "format"),
                r::FORMAT_REMOVED,
                When::Outbound,
                flow,
                format!("format '{a}' removed"),
            ),
            (Some(a), Some(b)) => {
                let when = if format_within(a, b) {
                    When::Outbound
                } else if format_within(b, a) {
                    When::Inbound
                } else {
                    When::Always
                };
                self.emit(
                    cx,
                    Side::New,
                    &pointer_push(path, "format"),
                    r::FORMAT_CHANGED,
                    when,
                    flow,
                    format!("format changed from '{a}' to '{b}'"),
                );
            }
        }
        self.lengths(
            cx,
            path,
            (o.min_length, o.max_length),
            (n.min_length, n.max_length),
            flow,
        );
        self.min_length(
            cx,
            path,
            "minGraphemes",
            o.min_graphemes,
            n.min_graphemes,
            flow,
        );
        self.limit_max(
            cx,
            path,
            "maxGraphemes",
            o.max_graphemes,
            n.max_graphemes,
            flow,
        );
        let to_enum = o.known_values.is_some() && o.r#enum.is_none() && n.r#enum.is_some();
        if to_enum {
            self.emit(
                cx,
                Side::New,
                &pointer_push(path, "enum"),
                r::KNOWN_VALUES_TO_ENUM,
                When::Inbound,
                flow,
                format!(
                    "open knownValues replaced by a closed enum of {}",
                    list(n.r#enum.as_deref().unwrap_or_default())
                ),
            );
        } else {
            self.value_enum(
                cx,
                path,
                o.r#enum.as_deref(),
                n.r#enum.as_deref(),
                n.known_values.is_some(),
                flow,
            );
        }
        if o.known_values != n.known_values && !(to_enum && n.known_values.is_none()) {
            let side = if n.known_values.is_some() {
                Side::New
            } else {
                Side::Old
            };
            let old_kv = o.known_values.as_deref().unwrap_or_default();
            let new_kv = n.known_values.as_deref().unwrap_or_default();
            let added: Vec<&String> = new_kv.iter().filter(|v| !old_kv.contains(v)).collect();
            let removed: Vec<&String> = old_kv.iter().filter(|v| !new_kv.contains(v)).collect();
            let mut parts = Vec::new();
            if !added.is_empty() {
                parts.push(format!("added {}", list(&added)));
            }
            if !removed.is_empty() {
                parts.push(format!("removed {}", list(&removed)));
            }
            if parts.is_empty() {
                parts.push("reordered".to_string());
            }
            self.emit(
                cx,
                side,
                &pointer_push(path, "knownValues"),
                r::KNOWN_VALUES_CHANGED,
                When::Never,
                flow,
                format!("knownValues {}", parts.join(", ")),
            );
        }
        self.value_const(cx, path, o.r#const.as_ref(), n.r#const.as_ref(), flow);
        self.value_default(cx, path, o.default.as_ref(), n.default.as_ref(), flow);
    }

    fn compare_blob(&mut self, cx: Cx<'_>, o: &Blob, n: &Blob, path: &str, flow: Flow) {
        let any = vec!["*/*".to_string()];
        let old_accept = o.accept.as_ref().unwrap_or(&any);
        let new_accept = n.accept.as_ref().unwrap_or(&any);
        let lost: Vec<&String> = old_accept
            .iter()
            .filter(|p| !new_accept.iter().any(|q| mime_covers(q, p)))
            .collect();
        let gained: Vec<&String> = new_accept
            .iter()
            .filter(|q| !old_accept.iter().any(|p| mime_covers(p, q)))
            .collect();
        let accept_path = pointer_push(path, "accept");
        if !lost.is_empty() {
            self.emit(
                cx,
                Side::New,
                &accept_path,
                r::BLOB_ACCEPT_NARROWED,
                When::Inbound,
                flow,
                format!("blob no longer accepts {}", list(&lost)),
            );
        }
        if !gained.is_empty() {
            // With no `accept` left, only the old file names the list.
            let side = if n.accept.is_some() {
                Side::New
            } else {
                Side::Old
            };
            self.emit(
                cx,
                side,
                &accept_path,
                r::BLOB_ACCEPT_WIDENED,
                When::Outbound,
                flow,
                format!("blob now also accepts {}", list(&gained)),
            );
        }
        self.limit_max(cx, path, "maxSize", o.max_size, n.max_size, flow);
    }

    fn compare_array(&mut self, cx: Cx<'_>, o: &Array, n: &Array, path: &str, flow: Flow) {
        self.lengths(
            cx,
            path,
            (o.min_length, o.max_length),
            (n.min_length, n.max_length),
            flow,
        );
        self.compare_type(cx, &o.items, &n.items, &pointer_push(path, "items"), flow);
    }

    fn compare_object(&mut self, cx: Cx<'_>, o: &Object, n: &Object, path: &str, flow: Flow) {
        self.compare_fields(
            cx,
            path,
            "property",
            Fields {
                properties: &o.properties,
                required: &o.required,
                nullable: Some(&o.nullable),
            },
            Fields {
                properties: &n.properties,
                required: &n.required,
                nullable: Some(&n.nullable),
            },
            flow,
        );
    }

    fn compare_params(
        &mut self,
        cx: Cx<'_>,
        old: Option<&Params>,
        new: Option<&Params>,
        def_path: &str,
    ) {
        let path = pointer_push(def_path, "parameters");
        let empty = Params::default();
        let (o, n) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
        self.description(
            cx,
            &pointer_push(&path, "description"),
            o.description.as_deref(),
            n.description.as_deref(),
        );
        self.compare_fields(
            cx,
            &path,
            "parameter",
            params_fields(o),
            params_fields(n),
            Flow::INBOUND,
        );
    }

    fn compare_fields(
        &mut self,
        cx: Cx<'_>,
        path: &str,
        noun: &str,
        old: Fields<'_>,
        new: Fields<'_>,
        flow: Flow,
    ) {
        let props_path = pointer_push(path, "properties");
        let has = |list: &[String], name: &str| list.iter().any(|x| x == name);
        for (name, nt) in new.properties {
            let p = pointer_push(&props_path, name);
            let now_required = has(new.required, name);
            let Some(ot) = old.properties.get(name) else {
                if now_required {
                    self.emit(
                        cx,
                        Side::New,
                        &p,
                        r::REQUIRED_ADDED,
                        When::Inbound,
                        flow,
                        format!("new required {noun} '{name}'"),
                    );
                } else {
                    self.emit(
                        cx,
                        Side::New,
                        &p,
                        r::PROPERTY_ADDED,
                        When::Never,
                        flow,
                        format!("new optional {noun} '{name}'"),
                    );
                }
                continue;
            };
            let was_required = has(old.required, name);
            if now_required && !was_required {
                self.emit(
                    cx,
                    Side::New,
                    &p,
                    r::REQUIRED_ADDED,
                    When::Inbound,
                    flow,
                    format!("{noun} '{name}' is now required"),
                );
            } else if was_required && !now_required {
                self.emit(
                    cx,
                    Side::New,
                    &p,
                    r::REQUIRED_REMOVED,
                    When::Outbound,
                    flow,
                    format!("{noun} '{name}' is no longer required"),
                );
            }
            if let (Some(on), Some(nn)) = (old.nullable, new.nullable) {
                match (has(on, name), has(nn, name)) {
                    (false, true) => self.emit(
                        cx,
                        Side::New,
                        &p,
                        r::NULLABLE_ADDED,
                        When::Outbound,
                        flow,
                        format!("{noun} '{name}' may now be null"),
                    ),
                    (true, false) => self.emit(
                        cx,
                        Side::New,
                        &p,
                        r::NULLABLE_REMOVED,
                        When::Inbound,
                        flow,
                        format!("{noun} '{name}' may no longer be null"),
                    ),
                    _ => {}
                }
            }
            self.compare_type(cx, ot, nt, &p, flow);
        }
        for name in old.properties.keys() {
            if !new.properties.contains_key(name) {
                let was = if has(old.required, name) {
                    "required"
                } else {
                    "optional"
                };
                self.emit(
                    cx,
                    Side::Old,
                    &pointer_push(&props_path, name),
                    r::PROPERTY_REMOVED,
                    When::Outbound,
                    flow,
                    format!("{was} {noun} '{name}' was removed"),
                );
            }
        }
    }

    fn compare_ref(&mut self, cx: Cx<'_>, o: &Ref, n: &Ref, path: &str, flow: Flow) {
        let oc = canonical(cx.old_nsid, &o.target);
        let nc = canonical(cx.new_nsid, &n.target);
        if oc == nc {
            // Same def by name: it is compared once, where it is defined.
            return;
        }
        let (from, to) = (display_id(&oc), display_id(&nc));
        let p = pointer_push(path, "ref");
        match self.renamed_compatible(&oc, &nc, flow) {
            Ok(()) => self.emit(
                cx,
                Side::New,
                &p,
                r::REF_RENAMED,
                When::Never,
                flow,
                format!("ref target renamed from '{from}' to '{to}'; the schemas are compatible"),
            ),
            Err(why) => self.emit(
                cx,
                Side::New,
                &p,
                r::REF_CHANGED,
                When::Always,
                flow,
                format!("ref now points at '{to}' instead of '{from}': {why}"),
            ),
        }
    }

    /// Whether old def `oc` and new def `nc` (canonical names) are
    /// interchangeable behind a `ref` at a place with `flow`.
    fn renamed_compatible(&mut self, oc: &str, nc: &str, flow: Flow) -> Result<(), String> {
        let key = (oc.to_string(), nc.to_string(), flow);
        if let Some(verdict) = self.renames.get(&key) {
            return verdict.clone();
        }
        // Assume compatible while comparing, so recursive defs terminate
        // (a cycle of renamed defs is compatible unless some part differs;
        // that part is what decides the verdict on the way out).
        self.renames.insert(key.clone(), Ok(()));
        let verdict = self.check_renamed(oc, nc, flow);
        self.renames.insert(key, verdict.clone());
        verdict
    }

    fn check_renamed(&mut self, oc: &str, nc: &str, flow: Flow) -> Result<(), String> {
        let Some((o_entry, o_def)) = lookup(&self.old, oc) else {
            return Err(format!("'{}' is not in the old set", display_id(oc)));
        };
        let Some((n_entry, n_def)) = lookup(&self.new, nc) else {
            return Err(format!("'{}' is not in the new set", display_id(nc)));
        };
        if matches!(o_def, Def::Record(_)) || matches!(n_def, Def::Record(_)) {
            return Err("a record carries its NSID as $type, which would change".into());
        }
        let cx = Cx {
            old_nsid: &o_entry.doc.id,
            new_nsid: &n_entry.doc.id,
            old_file: &o_entry.file,
            new_file: &n_entry.file,
        };
        self.first_breaking(|d| d.compare_def(cx, o_def, n_def, "", flow))
    }

    /// Runs a comparison on the side and reports its first breaking change.
    fn first_breaking(&mut self, f: impl FnOnce(&mut Self)) -> Result<(), String> {
        let saved = std::mem::take(&mut self.out);
        f(self);
        let scratch = std::mem::replace(&mut self.out, saved);
        match scratch.iter().find(|c| c.severity == Severity::Breaking) {
            Some(c) if c.path.is_empty() => Err(c.message.clone()),
            Some(c) => Err(format!("at {}: {}", c.path, c.message)),
            None => Ok(()),
        }
    }

    /// A `ref` replaced by an inline schema of the same type, or the reverse:
    /// the data looks the same (a `ref` adds no `$type`), so compare the
    /// schemas. This looks into the referenced def at the use site, but only
    /// where such a swap happened. Returns false when this is not a swap.
    fn ref_swapped(&mut self, cx: Cx<'_>, old: &Type, new: &Type, path: &str, flow: Flow) -> bool {
        let inline = |t: &Type| !matches!(t, Type::Ref(_) | Type::Union(_));
        let (side, rf, inline_t) = match (old, new) {
            (Type::Ref(rf), t) if inline(t) => (Side::Old, rf, t),
            (t, Type::Ref(rf)) if inline(t) => (Side::New, rf, t),
            _ => return false,
        };
        let (nsid, entries) = match side {
            Side::Old => (cx.old_nsid, &self.old),
            Side::New => (cx.new_nsid, &self.new),
        };
        let target = canonical(nsid, &rf.target);
        let Some((entry, Def::Type(rt))) = lookup(entries, &target) else {
            return false;
        };
        if rt.type_name() != inline_t.type_name() {
            return false;
        }
        // Compare the referenced def, read in its own lexicon, with the inline schema.
        let (sub, old_t, new_t, rule) = match side {
            Side::Old => {
                let sub = Cx {
                    old_nsid: &entry.doc.id,
                    old_file: &entry.file,
                    ..cx
                };
                (sub, rt, inline_t, r::REF_INLINED)
            }
            Side::New => {
                let sub = Cx {
                    new_nsid: &entry.doc.id,
                    new_file: &entry.file,
                    ..cx
                };
                (sub, inline_t, rt, r::REF_EXTRACTED)
            }
        };
        let verdict = self.first_breaking(|d| d.compare_type(sub, old_t, new_t, "", flow));
        let target = display_id(&target);
        match (rule, verdict) {
            (_, Err(why)) => self.emit(
                cx,
                Side::New,
                path,
                r::REF_CHANGED,
                When::Always,
                flow,
                format!(
                    "ref to '{target}' swapped for an incompatible inline schema (or back): {why}"
                ),
            ),
            (r::REF_INLINED, Ok(())) => self.emit(
                cx,
                Side::New,
                path,
                rule,
                When::Never,
                flow,
                format!("ref to '{target}' replaced by a compatible inline schema"),
            ),
            (_, Ok(())) => self.emit(
                cx,
                Side::New,
                path,
                rule,
                When::Never,
                flow,
                format!("inline schema moved to def '{target}' and referenced"),
            ),
        }
        true
    }

    fn compare_union(&mut self, cx: Cx<'_>, o: &Union, n: &Union, path: &str, flow: Flow) {
        let ids = |nsid: &str, refs: &[String]| -> Vec<String> {
            let mut out: Vec<String> = Vec::new();
            for r in refs {
                let c = canonical(nsid, r);
                if !out.contains(&c) {
                    out.push(c);
                }
            }
            out
        };
        let old_ids = ids(cx.old_nsid, &o.refs);
        let new_ids = ids(cx.new_nsid, &n.refs);
        let refs_path = pointer_push(path, "refs");
        for id in old_ids.iter().filter(|id| !new_ids.contains(id)) {
            self.emit(
                cx,
                Side::New,
                &refs_path,
                r::UNION_REF_REMOVED,
                When::Always,
                flow,
                format!("union no longer includes '{}'", display_id(id)),
            );
        }
        let when = if o.closed {
            When::Outbound
        } else {
            When::Never
        };
        let kind = if o.closed { "closed" } else { "open" };
        for id in new_ids.iter().filter(|id| !old_ids.contains(id)) {
            self.emit(
                cx,
                Side::New,
                &refs_path,
                r::UNION_REF_ADDED,
                when,
                flow,
                format!("{kind} union now includes '{}'", display_id(id)),
            );
        }
        let closed_path = pointer_push(path, "closed");
        match (o.closed, n.closed) {
            (false, true) => self.emit(
                cx,
                Side::New,
                &closed_path,
                r::UNION_CLOSED,
                When::Inbound,
                flow,
                "open union became closed".into(),
            ),
            (true, false) => self.emit(
                cx,
                Side::Old,
                &closed_path,
                r::UNION_OPENED,
                When::Outbound,
                flow,
                "closed union became open".into(),
            ),
            _ => {}
        }
    }

    fn compare_body(
        &mut self,
        cx: Cx<'_>,
        key: &str,
        old: Option<&Body>,
        new: Option<&Body>,
        def_path: &str,
    ) {
        let path = pointer_push(def_path, key);
        let flow = if key == "input" {
            Flow::INBOUND
        } else {
            Flow::OUTBOUND
        };
        let (o, n) = match (old, new) {
            (None, None) => return,
            (None, Some(_)) => {
                return self.emit(
                    cx,
                    Side::New,
                    &path,
                    r::BODY_ADDED,
                    When::Inbound,
                    flow,
                    format!("{key} body added"),
                );
            }
            (Some(_), None) => {
                return self.emit(
                    cx,
                    Side::Old,
                    &path,
                    r::BODY_REMOVED,
                    When::Always,
                    flow,
                    format!("{key} body removed"),
                );
            }
            (Some(o), Some(n)) => (o, n),
        };
        self.description(
            cx,
            &pointer_push(&path, "description"),
            o.description.as_deref(),
            n.description.as_deref(),
        );
        if o.encoding != n.encoding {
            self.emit(
                cx,
                Side::New,
                &pointer_push(&path, "encoding"),
                r::ENCODING_CHANGED,
                When::Always,
                flow,
                format!(
                    "{key} encoding changed from '{}' to '{}'",
                    o.encoding, n.encoding
                ),
            );
        }
        let schema_path = pointer_push(&path, "schema");
        match (&o.schema, &n.schema) {
            (None, None) => {}
            (None, Some(_)) => self.emit(
                cx,
                Side::New,
                &schema_path,
                r::BODY_SCHEMA_ADDED,
                When::Inbound,
                flow,
                format!("{key} body now has a schema"),
            ),
            (Some(_), None) => self.emit(
                cx,
                Side::Old,
                &schema_path,
                r::BODY_SCHEMA_REMOVED,
                When::Outbound,
                flow,
                format!("{key} body no longer has a schema"),
            ),
            (Some(os), Some(ns)) => self.compare_type(cx, os, ns, &schema_path, flow),
        }
    }

    fn compare_message(
        &mut self,
        cx: Cx<'_>,
        old: Option<&Message>,
        new: Option<&Message>,
        def_path: &str,
    ) {
        let path = pointer_push(def_path, "message");
        let flow = Flow::OUTBOUND;
        match (old, new) {
            (None, None) => {}
            (None, Some(_)) => self.emit(
                cx,
                Side::New,
                &path,
                r::BODY_ADDED,
                When::Inbound,
                flow,
                "subscription message schema added".into(),
            ),
            (Some(_), None) => self.emit(
                cx,
                Side::Old,
                &path,
                r::BODY_REMOVED,
                When::Always,
                flow,
                "subscription message schema removed".into(),
            ),
            (Some(o), Some(n)) => {
                self.description(
                    cx,
                    &pointer_push(&path, "description"),
                    o.description.as_deref(),
                    n.description.as_deref(),
                );
                self.compare_type(
                    cx,
                    &o.schema,
                    &n.schema,
                    &pointer_push(&path, "schema"),
                    flow,
                );
            }
        }
    }

    fn compare_errors(&mut self, cx: Cx<'_>, old: &[ErrorDef], new: &[ErrorDef], def_path: &str) {
        let path = pointer_push(def_path, "errors");
        for (i, e) in new.iter().enumerate() {
            let p = pointer_push(&path, &i.to_string());
            match old.iter().find(|o| o.name == e.name) {
                Some(o) => self.description(
                    cx,
                    &pointer_push(&p, "description"),
                    o.description.as_deref(),
                    e.description.as_deref(),
                ),
                None => self.emit(
                    cx,
                    Side::New,
                    &p,
                    r::ERROR_ADDED,
                    When::Never,
                    Flow::OUTBOUND,
                    format!("error '{}' added", e.name),
                ),
            }
        }
        for (i, e) in old.iter().enumerate() {
            if !new.iter().any(|n| n.name == e.name) {
                self.emit(
                    cx,
                    Side::Old,
                    &pointer_push(&path, &i.to_string()),
                    r::ERROR_REMOVED,
                    When::Always,
                    Flow::OUTBOUND,
                    format!("error '{}' removed; clients may match on it", e.name),
                );
            }
        }
    }

    fn compare_permissions(
        &mut self,
        cx: Cx<'_>,
        o: &PermissionSet,
        n: &PermissionSet,
        path: &str,
    ) {
        self.description(
            cx,
            &pointer_push(path, "title"),
            o.title.as_deref(),
            n.title.as_deref(),
        );
        self.description(
            cx,
            &pointer_push(path, "detail"),
            o.detail.as_deref(),
            n.detail.as_deref(),
        );
        for (key, old_map, new_map) in [
            ("title:lang", &o.title_lang, &n.title_lang),
            ("detail:lang", &o.detail_lang, &n.detail_lang),
        ] {
            let (a, b): (BTreeMap<_, _>, BTreeMap<_, _>) =
                (old_map.iter().collect(), new_map.iter().collect());
            if a != b {
                self.emit(
                    cx,
                    Side::New,
                    &pointer_push(path, key),
                    r::DESCRIPTION_CHANGED,
                    When::Never,
                    Flow::BOTH,
                    format!("{key} changed"),
                );
            }
        }
        let keys = |p: &PermissionSet| -> Vec<String> {
            p.permissions
                .iter()
                .map(|perm| {
                    let params: BTreeMap<_, _> = perm.params.iter().collect();
                    format!(
                        "{} {}",
                        perm.resource,
                        serde_json::to_string(&params).unwrap_or_default()
                    )
                })
                .collect()
        };
        let (old_keys, new_keys) = (keys(o), keys(n));
        let perms = pointer_push(path, "permissions");
        for (i, k) in new_keys.iter().enumerate() {
            if !old_keys.contains(k) {
                self.emit(
                    cx,
                    Side::New,
                    &pointer_push(&perms, &i.to_string()),
                    r::PERMISSION_ADDED,
                    When::Never,
                    Flow::BOTH,
                    format!("permission added: {k}"),
                );
            }
        }
        for (i, k) in old_keys.iter().enumerate() {
            if !new_keys.contains(k) {
                self.emit(
                    cx,
                    Side::Old,
                    &pointer_push(&perms, &i.to_string()),
                    r::PERMISSION_REMOVED,
                    When::Always,
                    Flow::BOTH,
                    format!("permission removed: {k}"),
                );
            }
        }
    }

    /// `minLength`/`maxLength` of strings, bytes and arrays.
    fn lengths(
        &mut self,
        cx: Cx<'_>,
        path: &str,
        (old_min, old_max): (Option<u64>, Option<u64>),
        (new_min, new_max): (Option<u64>, Option<u64>),
        flow: Flow,
    ) {
        self.min_length(cx, path, "minLength", old_min, new_min, flow);
        self.limit_max(cx, path, "maxLength", old_max, new_max, flow);
    }

    /// A minimum length or count, where absent means 0.
    fn min_length(
        &mut self,
        cx: Cx<'_>,
        path: &str,
        key: &str,
        old: Option<u64>,
        new: Option<u64>,
        flow: Flow,
    ) {
        let (a, b) = (old.unwrap_or(0), new.unwrap_or(0));
        if a == b {
            return;
        }
        let side = if new.is_some() { Side::New } else { Side::Old };
        let verb = if b > a { "raised" } else { "lowered" };
        let message = format!("{key} {verb} from {a} to {b}");
        self.limit(cx, side, &pointer_push(path, key), b > a, flow, message);
    }

    fn limit_max<T: Ord + Debug + Copy>(
        &mut self,
        cx: Cx<'_>,
        path: &str,
        key: &str,
        old: Option<T>,
        new: Option<T>,
        flow: Flow,
    ) {
        let (narrowed, side, message) = match (old, new) {
            (None, None) => return,
            (None, Some(b)) => (true, Side::New, format!("{key} {b:?} added")),
            (Some(a), None) => (false, Side::Old, format!("{key} {a:?} removed")),
            (Some(a), Some(b)) if b < a => (
                true,
                Side::New,
                format!("{key} lowered from {a:?} to {b:?}"),
            ),
            (Some(a), Some(b)) if b > a => (
                false,
                Side::New,
                format!("{key} raised from {a:?} to {b:?}"),
            ),
            _ => return,
        };
        self.limit(cx, side, &pointer_push(path, key), narrowed, flow, message);
    }

    fn limit_min<T: Ord + Debug + Copy>(
        &mut self,
        cx: Cx<'_>,
        path: &str,
        key: &str,
        old: Option<T>,
        new: Option<T>,
        flow: Flow,
    ) {
        let (narrowed, side, message) = match (old, new) {
            (None, None) => return,
            (None, Some(b)) => (true, Side::New, format!("{key} {b:?} added")),
            (Some(a), None) => (false, Side::Old, format!("{key} {a:?} removed")),
            (Some(a), Some(b)) if b > a => {
                (true, Side::New, format!("{key} raised from {a:?} to {b:?}"))
            }
            (Some(a), Some(b)) if b < a => (
                false,
                Side::New,
                format!("{key} lowered from {a:?} to {b:?}"),
            ),
            _ => return,
        };
        self.limit(cx, side, &pointer_push(path, key), narrowed, flow, message);
    }

    fn limit(
        &mut self,
        cx: Cx<'_>,
        side: Side,
        path: &str,
        narrowed: bool,
        flow: Flow,
        message: String,
    ) {
        let (rule, when) = if narrowed {
            (r::LIMIT_NARROWED, When::Inbound)
        } else {
            (r::LIMIT_WIDENED, When::Outbound)
        };
        self.emit(cx, side, path, rule, when, flow, message);
    }

    /// `enum` of strings or integers. `new_known` says whether the new
    /// schema offers `knownValues` instead, for the message.
    fn value_enum<T: PartialEq + Debug>(
        &mut self,
        cx: Cx<'_>,
        path: &str,
        old: Option<&[T]>,
        new: Option<&[T]>,
        new_known: bool,
        flow: Flow,
    ) {
        let p = pointer_push(path, "enum");
        match (old, new) {
            (None, None) => {}
            (None, Some(n)) => self.emit(
                cx,
                Side::New,
                &p,
                r::ENUM_ADDED,
                When::Inbound,
                flow,
                format!("enum of {} added", list(n)),
            ),
            (Some(_), None) => {
                let instead = if new_known {
                    " (knownValues instead)"
                } else {
                    ""
                };
                self.emit(
                    cx,
                    Side::Old,
                    &p,
                    r::ENUM_REMOVED,
                    When::Outbound,
                    flow,
                    format!("enum removed{instead}: any value is now allowed"),
                );
            }
            (Some(o), Some(n)) => {
                let removed: Vec<&T> = o.iter().filter(|v| !n.contains(v)).collect();
                let added: Vec<&T> = n.iter().filter(|v| !o.contains(v)).collect();
                if !removed.is_empty() {
                    self.emit(
                        cx,
                        Side::New,
                        &p,
                        r::ENUM_VALUE_REMOVED,
                        When::Inbound,
                        flow,
                        format!("enum no longer allows {}", list(&removed)),
                    );
                }
                if !added.is_empty() {
                    self.emit(
                        cx,
                        Side::New,
                        &p,
                        r::ENUM_VALUE_ADDED,
                        When::Outbound,
                        flow,
                        format!("enum now also allows {}", list(&added)),
                    );
                }
            }
        }
    }

    fn value_const<T: PartialEq + Debug>(
        &mut self,
        cx: Cx<'_>,
        path: &str,
        old: Option<T>,
        new: Option<T>,
        flow: Flow,
    ) {
        let p = pointer_push(path, "const");
        match (old, new) {
            (None, Some(b)) => self.emit(
                cx,
                Side::New,
                &p,
                r::CONST_ADDED,
                When::Inbound,
                flow,
                format!("const {b:?} added"),
            ),
            (Some(a), None) => self.emit(
                cx,
                Side::Old,
                &p,
                r::CONST_REMOVED,
                When::Outbound,
                flow,
                format!("const {a:?} removed"),
            ),
            (Some(a), Some(b)) if a != b => self.emit(
                cx,
                Side::New,
                &p,
                r::CONST_CHANGED,
                When::Always,
                flow,
                format!("const changed from {a:?} to {b:?}"),
            ),
            _ => {}
        }
    }

    fn value_default<T: PartialEq + Debug>(
        &mut self,
        cx: Cx<'_>,
        path: &str,
        old: Option<T>,
        new: Option<T>,
        flow: Flow,
    ) {
        let p = pointer_push(path, "default");
        match (old, new) {
            (None, Some(b)) => self.emit(
                cx,
                Side::New,
                &p,
                r::DEFAULT_ADDED,
                When::Never,
                flow,
                format!("default {b:?} added"),
            ),
            (Some(a), None) => self.emit(
                cx,
                Side::Old,
                &p,
                r::DEFAULT_REMOVED,
                When::Never,
                flow,
                format!("default {a:?} removed"),
            ),
            (Some(a), Some(b)) if a != b => self.emit(
                cx,
                Side::New,
                &p,
                r::DEFAULT_CHANGED,
                When::Always,
                flow,
                format!(
                    "default changed from {a:?} to {b:?}: data that omits the field now means something else"
                ),
            ),
            _ => {}
        }
    }
}

fn errors(d: &Def) -> &[ErrorDef] {
    match d {
        Def::Query(q) => &q.errors,
        Def::Procedure(p) => &p.errors,
        Def::Subscription(s) => &s.errors,
        _ => &[],
    }
}

fn params_fields(p: &Params) -> Fields<'_> {
    Fields {
        properties: &p.properties,
        required: &p.required,
        nullable: None,
    }
}

/// The entry and def a canonical `nsid#name` names, if any.
fn lookup<'a>(entries: &HashMap<&str, &'a Entry>, canonical: &str) -> Option<(&'a Entry, &'a Def)> {
    let (nsid, name) = canonical.split_once('#')?;
    let entry = *entries.get(nsid)?;
    Some((entry, entry.doc.defs.get(name)?))
}

/// Whether every string of format `narrow` is also valid as format `wide`.
fn format_within(narrow: &str, wide: &str) -> bool {
    matches!(
        (narrow, wide),
        ("did" | "handle", "at-identifier") | ("tid" | "nsid", "record-key") | ("at-uri", "uri")
    )
}

/// Whether MIME pattern `wide` admits everything `narrow` admits.
fn mime_covers(wide: &str, narrow: &str) -> bool {
    let (w, n) = (wide.to_ascii_lowercase(), narrow.to_ascii_lowercase());
    if w == "*/*" || w == n {
        return true;
    }
    match w.strip_suffix("/*") {
        Some(major) => n.split_once('/').is_some_and(|(m, _)| m == major),
        None => false,
    }
}

fn list<T: Debug>(values: &[T]) -> String {
    values
        .iter()
        .map(|v| format!("{v:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mime_patterns_cover_what_they_should() {
        assert!(mime_covers("*/*", "image/png"));
        assert!(mime_covers("image/*", "image/png"));
        assert!(mime_covers("image/*", "IMAGE/*"));
        assert!(!mime_covers("image/*", "video/mp4"));
        assert!(!mime_covers("image/png", "image/*"));
        assert!(!mime_covers("image/*", "*/*"));
    }

    #[test]
    fn format_supersets_are_one_way() {
        assert!(format_within("did", "at-identifier"));
        assert!(format_within("handle", "at-identifier"));
        assert!(format_within("tid", "record-key"));
        assert!(!format_within("at-identifier", "did"));
        assert!(!format_within("did", "handle"));
    }

    #[test]
    fn severity_depends_on_flow_only_for_directional_rules() {
        use Severity::{Breaking, Safe};
        for flow in [Flow::INBOUND, Flow::OUTBOUND, Flow::BOTH] {
            assert_eq!(When::Always.severity(flow), Breaking);
            assert_eq!(When::Never.severity(flow), Safe);
        }
        assert_eq!(When::Inbound.severity(Flow::OUTBOUND), Safe);
        assert_eq!(When::Inbound.severity(Flow::BOTH), Breaking);
        assert_eq!(When::Outbound.severity(Flow::INBOUND), Safe);
        assert_eq!(When::Outbound.severity(Flow::BOTH), Breaking);
    }
}
