//! Which way data flows through each def: the part of the diff that decides
//! whether a looser or a stricter schema is the dangerous one.

use crate::catalog::{Catalog, split_ref, type_id};
use crate::schema::{Body, Def, Params, Type};
use std::collections::HashMap;

/// The directions data takes through a schema position, as a bit set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Flow(u8);

impl Flow {
    pub const NONE: Flow = Flow(0);
    /// Data written under the old schema is checked against the new one
    /// (XRPC inputs and params: old clients call the upgraded server).
    pub const INBOUND: Flow = Flow(1);
    /// Data written under the new schema is checked by software built on the
    /// old one (XRPC outputs, subscription messages: the upgraded server
    /// answers old clients).
    pub const OUTBOUND: Flow = Flow(2);
    /// Both ways: records, which old and new software write and read, and
    /// defs whose use is unknown.
    pub const BOTH: Flow = Flow(3);

    pub fn contains(self, other: Flow) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    pub fn union(self, other: Flow) -> Flow {
        Flow(self.0 | other.0)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How a message names the places the data flows to.
    pub fn label(self) -> &'static str {
        match self.0 {
            1 => "inbound: inputs/params",
            2 => "outbound: outputs/messages",
            _ => "both ways: records or shared defs",
        }
    }
}

/// `nsid#name` for a reference written inside lexicon `from`; malformed
/// references are kept as written so they still compare by text.
pub(crate) fn canonical(from: &str, reference: &str) -> String {
    match split_ref(from, reference) {
        Ok((nsid, name)) => format!("{nsid}#{name}"),
        Err(_) => reference.to_string(),
    }
}

/// The `$type` a canonical `nsid#name` stands for (`nsid` alone for `main`).
pub(crate) fn display_id(canonical: &str) -> String {
    match canonical.split_once('#') {
        Some((nsid, name)) => type_id(nsid, name),
        None => canonical.to_string(),
    }
}

/// The flow of every non-primary def reachable from a primary def, keyed by
/// canonical `nsid#name`, merged over both catalogs (a def used as an output
/// in the old set and as an input in the new one must satisfy both).
///
/// Each def's flow only grows and has two bits, so each def is re-visited at
/// most twice: linear in the size of the ref graph.
pub(crate) fn def_flows(old: &Catalog, new: &Catalog) -> HashMap<String, Flow> {
    let mut flows = HashMap::new();
    for catalog in [old, new] {
        for (key, flow) in flows_in(catalog) {
            let slot = flows.entry(key).or_insert(Flow::NONE);
            *slot = flow.union(*slot);
        }
    }
    flows
}

fn flows_in(catalog: &Catalog) -> HashMap<String, Flow> {
    let mut prop = Propagation::default();
    for entry in catalog.entries() {
        let nsid = entry.doc.id.as_str();
        for def in entry.doc.defs.values() {
            let mut seed = |t: &Type, flow: Flow| prop.mark_refs(nsid, t, flow);
            match def {
                Def::Record(r) => {
                    for t in r.record.properties.values() {
                        seed(t, Flow::BOTH);
                    }
                }
                Def::Query(q) => {
                    params_refs(q.parameters.as_ref(), &mut seed);
                    body_refs(q.output.as_ref(), Flow::OUTBOUND, &mut seed);
                }
                Def::Procedure(p) => {
                    params_refs(p.parameters.as_ref(), &mut seed);
                    body_refs(p.input.as_ref(), Flow::INBOUND, &mut seed);
                    body_refs(p.output.as_ref(), Flow::OUTBOUND, &mut seed);
                }
                Def::Subscription(s) => {
                    params_refs(s.parameters.as_ref(), &mut seed);
                    if let Some(m) = &s.message {
                        seed(&m.schema, Flow::OUTBOUND);
                    }
                }
                Def::PermissionSet(_) | Def::Type(_) => {}
            }
        }
    }
    while let Some(key) = prop.work.pop() {
        let flow = prop.flows[&key];
        let Some((nsid, name)) = key.split_once('#') else {
            continue;
        };
        if let Some(Def::Type(t)) = catalog.get(nsid).and_then(|d| d.defs.get(name)) {
            prop.mark_refs(nsid, t, flow);
        }
    }
    prop.flows
}

#[derive(Default)]
struct Propagation {
    flows: HashMap<String, Flow>,
    /// Defs whose flow grew and whose own refs must be revisited.
    work: Vec<String>,
}

impl Propagation {
    fn mark_refs(&mut self, nsid: &str, t: &Type, flow: Flow) {
        let mut refs = Vec::new();
        refs_in(t, &mut refs);
        for r in refs {
            let key = canonical(nsid, r);
            let slot = self.flows.entry(key.clone()).or_insert(Flow::NONE);
            let grown = slot.union(flow);
            if grown != *slot {
                *slot = grown;
                self.work.push(key);
            }
        }
    }
}

fn params_refs(params: Option<&Params>, seed: &mut impl FnMut(&Type, Flow)) {
    for t in params.iter().flat_map(|p| p.properties.values()) {
        seed(t, Flow::INBOUND);
    }
}

fn body_refs(body: Option<&Body>, flow: Flow, seed: &mut impl FnMut(&Type, Flow)) {
    if let Some(schema) = body.and_then(|b| b.schema.as_ref()) {
        seed(schema, flow);
    }
}

/// Every reference written directly in `t` (not through other defs).
pub(crate) fn refs_in<'a>(t: &'a Type, out: &mut Vec<&'a str>) {
    match t {
        Type::Ref(r) => out.push(&r.target),
        Type::Union(u) => out.extend(u.refs.iter().map(String::as_str)),
        Type::Array(a) => refs_in(&a.items, out),
        Type::Object(o) => o.properties.values().for_each(|p| refs_in(p, out)),
        Type::Params(p) => p.properties.values().for_each(|p| refs_in(p, out)),
        Type::Null(_)
        | Type::Boolean(_)
        | Type::Integer(_)
        | Type::String(_)
        | Type::Bytes(_)
        | Type::CidLink(_)
        | Type::Blob(_)
        | Type::Token(_)
        | Type::Unknown(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flows_follow_refs_transitively_and_merge() {
        let mut c = Catalog::new();
        c.add(
            "q.json",
            &json!({"lexicon": 1, "id": "com.example.get", "defs": {
                "main": {"type": "query", "output": {"encoding": "application/json",
                    "schema": {"type": "ref", "ref": "com.example.defs#view"}}}
            }}),
        );
        c.add(
            "p.json",
            &json!({"lexicon": 1, "id": "com.example.put", "defs": {
                "main": {"type": "procedure", "input": {"encoding": "application/json",
                    "schema": {"type": "object", "properties": {
                        "x": {"type": "ref", "ref": "com.example.defs#inner"}}}}}
            }}),
        );
        c.add(
            "d.json",
            &json!({"lexicon": 1, "id": "com.example.defs", "defs": {
                "view": {"type": "object", "properties": {
                    "a": {"type": "array", "items": {"type": "union", "refs": ["#inner"]}}}},
                "inner": {"type": "object", "properties": {}},
                "lonely": {"type": "object", "properties": {}}
            }}),
        );
        let f = def_flows(&c, &Catalog::new());
        assert_eq!(f["com.example.defs#view"], Flow::OUTBOUND);
        assert_eq!(f["com.example.defs#inner"], Flow::BOTH);
        assert!(!f.contains_key("com.example.defs#lonely"));
    }

    #[test]
    fn canonical_treats_main_spellings_alike() {
        assert_eq!(canonical("a.b.c", "#main"), "a.b.c#main");
        assert_eq!(canonical("x.y.z", "a.b.c"), "a.b.c#main");
        assert_eq!(canonical("x.y.z", "a.b.c#main"), "a.b.c#main");
        assert_eq!(display_id("a.b.c#main"), "a.b.c");
        assert_eq!(display_id("a.b.c#v"), "a.b.c#v");
    }
}
