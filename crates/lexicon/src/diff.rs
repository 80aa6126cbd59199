//! Breaking-change check: compares two versions of a lexicon set and
//! classifies every change as [`Severity::Breaking`] or [`Severity::Safe`].
//!
//! # The principle
//!
//! The atproto Lexicon spec ("Lexicon Evolution") asks that *all old data
//! stay valid under the updated lexicon, and new data be valid under the old
//! one*: new fields must be optional, non-optional fields may not be
//! removed, types may not change, fields may not be renamed, unions may gain
//! types but never lose them, and closed unions may not change at all.
//! Anything bigger needs a new NSID.
//!
//! Which half of that principle a change can violate depends on which way
//! the data flows at the place that changed:
//!
//! | Place | Flow | Who is hurt by a change |
//! |---|---|---|
//! | XRPC `parameters`, procedure `input` | **inbound** | the upgraded server validates requests from *old clients*: a **stricter** schema breaks |
//! | XRPC `output`, subscription `message` | **outbound** | *old clients* validate responses from the upgraded server: a **looser** schema breaks |
//! | `record` | **both** | records are written and read by old and new software alike: **either** breaks |
//! | named defs (`#view`, `*.defs`) | flow of every place that refs them, followed transitively through both the old and the new set; a def nothing in the set refers to counts as **both** | |
//!
//! So raising an output's `maxLength` is breaking (an old client with the
//! old limit rejects the longer value) while raising an input's is safe, and
//! the reverse for lowering. Records take the strict reading of the spec:
//! loosening a record constraint is breaking too — the atproto guide says so
//! plainly ("loosening a constraint will cause old software to fail
//! validation for new data"), and an AppView still on the old lexicon would
//! drop the new records. We assume the lexicon's authority upgrades its
//! servers first; new clients calling old servers are not considered.
//!
//! # Rules
//!
//! "In" = breaking where the flow includes inbound, "Out" = where it includes
//! outbound; records are both, so both columns apply to them. Constants and
//! finer notes are in [`rules`].
//!
//! | Change | Rule | Breaking |
//! |---|---|---|
//! | lexicon / def removed | `lexicon-removed`, `def-removed` | always |
//! | lexicon / def added | `lexicon-added`, `def-added` | never |
//! | def type changed | `def-type-changed` | always |
//! | property / items / body schema type changed | `type-changed` | always |
//! | description, title, detail changed | `description-changed` | never |
//! | new optional property or param | `property-added` | never |
//! | property or param removed | `property-removed` | Out |
//! | new required property/param, or optional → required | `required-added` | In |
//! | required → optional | `required-removed` | Out |
//! | `nullable` added / removed | `nullable-added` / `nullable-removed` | Out / In |
//! | max lowered or added, min raised or added | `limit-narrowed` | In |
//! | max raised or removed, min lowered or removed | `limit-widened` | Out |
//! | `enum` added / removed | `enum-added` / `enum-removed` | In / Out |
//! | enum value removed / added | `enum-value-removed` / `enum-value-added` | In / Out |
//! | `knownValues` changed | `known-values-changed` | never |
//! | `knownValues` → `enum` | `known-values-to-enum` | In |
//! | `const` added / removed / changed | `const-added` / `const-removed` / `const-changed` | In / Out / always |
//! | `default` changed / added / removed | `default-changed` / `default-added` / `default-removed` | always / never / never |
//! | `format` added / removed | `format-added` / `format-removed` | In / Out |
//! | `format` changed | `format-changed` | always (Out if to a superset like `did` → `at-identifier`, In if to a subset) |
//! | blob `accept` narrowed / widened | `blob-accept-narrowed` / `blob-accept-widened` | In / Out |
//! | `ref` target changed to an incompatible def, or to/from a record | `ref-changed` | always |
//! | `ref` target renamed, schemas compatible | `ref-renamed` | never |
//! | `ref` ↔ compatible inline schema | `ref-inlined` / `ref-extracted` | never |
//! | union ref removed | `union-ref-removed` | always |
//! | union ref added | `union-ref-added` | never if the old union was open, Out if closed |
//! | open → closed / closed → open | `union-closed` / `union-opened` | In / Out |
//! | record key type changed | `record-key-changed` | always |
//! | input/output/message added / removed | `body-added` / `body-removed` | In / always |
//! | body `schema` added / removed | `body-schema-added` / `body-schema-removed` | In / Out |
//! | body `encoding` changed | `encoding-changed` | always |
//! | error name added / removed | `error-added` / `error-removed` | never / always |
//! | permission added / removed (permission sets) | `permission-added` / `permission-removed` | never / always |
//!
//! ## Decisions
//!
//! * **Removing a property** is breaking wherever data flows outbound,
//!   records included, *even if it was optional*. Validation alone would
//!   allow it (unexpected fields are ignored, and a missing optional field is
//!   fine), but readers built on the old schema lose a field they display or
//!   act on, existing records keep carrying it, and a freed name can later be
//!   re-added with another type, which the spec warns makes existing data
//!   invalid. The spec's advice is to keep the field and mark it deprecated.
//!   For inputs and params it is safe: old clients' extra field is ignored.
//! * **Union refs removed** are breaking in every direction: the spec says
//!   unions can gain types but not lose them, and consumers of a subscription
//!   silently stop receiving a frame type they handle.
//! * **`default` changed** is breaking although validation ignores defaults:
//!   data that omits the field (all old data, if the field is new-ish) now
//!   means something else.
//! * **Refs are followed by name.** A def is compared once, at its own path,
//!   with the merged flow of all its uses; a use site only checks that it
//!   still refers to the same def (`nsid`, `nsid#main` and `#main` are the
//!   same). When a `ref` points at a differently named def, the two defs are
//!   compared once per (old, new, flow) triple to decide between
//!   `ref-renamed` and `ref-changed`; union refs are `$type`s in the data, so
//!   renaming one is a removal plus an addition.
//! * `revision` is not compared; it labels a change rather than being one.
//!
//! Output is deterministic: lexicons in NSID order, then defs and fields in
//! document order, removals after additions.

mod compare;
mod flow;
pub mod rules;

use crate::catalog::Catalog;
use crate::finding::Finding;
use serde::Serialize;
use std::fmt;

/// Whether a change keeps old and new software and data compatible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Old data, clients or servers may stop working.
    Breaking,
    /// Compatible under the lexicon evolution rules.
    Safe,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Breaking => "breaking",
            Severity::Safe => "safe",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One difference between the old and the new lexicon set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The lexicon it is in.
    pub nsid: String,
    /// The new file, or the old one when the thing changed no longer exists.
    pub file: String,
    /// JSON pointer into that file, e.g.
    /// `/defs/main/record/properties/text/maxLength`; empty for a whole lexicon.
    pub path: String,
    pub severity: Severity,
    /// One of [`rules`], e.g. `limit-narrowed`.
    pub rule: &'static str,
    pub message: String,
}

impl Change {
    pub fn is_breaking(&self) -> bool {
        self.severity == Severity::Breaking
    }

    /// The change as a [`Finding`], its severity leading the message.
    pub fn to_finding(&self) -> Finding {
        Finding::new(
            &self.file,
            &self.path,
            self.rule,
            format!("{}: {}", self.severity, self.message),
        )
    }
}

/// Every change from `old` to `new`, in a deterministic order (see the
/// module docs). Cost is linear in the size of both sets: each def is
/// compared once, never again at the places that refer to it.
pub fn diff(old: &Catalog, new: &Catalog) -> Vec<Change> {
    compare::run(old, new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn catalog(docs: &[Value]) -> Catalog {
        let mut c = Catalog::new();
        for (i, d) in docs.iter().enumerate() {
            let findings = c.add(&format!("{i}.json"), d);
            assert!(findings.is_empty(), "{findings:?}");
        }
        c
    }

    /// (rule, severity, path) of each change.
    fn summary(old: &[Value], new: &[Value]) -> Vec<(&'static str, Severity, String)> {
        diff(&catalog(old), &catalog(new))
            .into_iter()
            .map(|c| (c.rule, c.severity, c.path))
            .collect()
    }

    fn lex(id: &str, defs: Value) -> Value {
        json!({"lexicon": 1, "id": id, "defs": defs})
    }

    fn string(max: u64) -> Value {
        json!({"type": "string", "maxLength": max})
    }

    fn query_output(props: Value) -> Value {
        json!({"main": {"type": "query", "output": {"encoding": "application/json",
            "schema": {"type": "object", "properties": props}}}})
    }

    fn procedure_input(props: Value) -> Value {
        json!({"main": {"type": "procedure", "input": {"encoding": "application/json",
            "schema": {"type": "object", "properties": props}}}})
    }

    use Severity::{Breaking, Safe};
    use rules as r;

    #[test]
    fn limits_break_inputs_when_narrowed_and_outputs_when_widened() {
        let path = "/defs/main/input/schema/properties/t/maxLength";
        let input = |n| {
            [lex(
                "com.example.put",
                procedure_input(json!({"t": string(n)})),
            )]
        };
        assert_eq!(
            summary(&input(100), &input(200)),
            [(r::LIMIT_WIDENED, Safe, path.into())]
        );
        assert_eq!(
            summary(&input(200), &input(100)),
            [(r::LIMIT_NARROWED, Breaking, path.into())]
        );

        let path = "/defs/main/output/schema/properties/t/maxLength";
        let output = |n| {
            [lex(
                "com.example.get",
                query_output(json!({"t": string(n)})),
            )]
        };
        assert_eq!(
            summary(&output(100), &output(200)),
            [(r::LIMIT_WIDENED, Breaking, path.into())]
        );
        assert_eq!(
            summary(&output(200), &output(100)),
            [(r::LIMIT_NARROWED, Safe, path.into())]
        );
    }

    #[test]
    fn required_and_nullable_follow_direction() {
        let out = |req: Value, nullable: Value| {
            [lex(
                "com.example.get",
                json!({"main": {"type": "query", "output": {"encoding": "application/json",
                    "schema": {"type": "object", "required": req, "nullable": nullable,
                        "properties": {"a": {"type": "string"}}}}}}),
            )]
        };
        let p = "/defs/main/output/schema/properties/a";
        // Output: a field becoming required or non-null is safe; the reverse breaks.
        assert_eq!(
            summary(&out(json!([]), json!(["a"])), &out(json!(["a"]), json!([]))),
            [
                (r::REQUIRED_ADDED, Safe, p.into()),
                (r::NULLABLE_REMOVED, Safe, p.into())
            ]
        );
        assert_eq!(
            summary(&out(json!(["a"]), json!([])), &out(json!([]), json!(["a"]))),
            [
                (r::REQUIRED_REMOVED, Breaking, p.into()),
                (r::NULLABLE_ADDED, Breaking, p.into())
            ]
        );
        // A removed property: safe from an input, breaking from an output.
        let inp = |props| [lex("com.example.put", procedure_input(props))];
        assert_eq!(
            summary(&inp(json!({"a": {"type": "string"}})), &inp(json!({}))),
            [(
                r::PROPERTY_REMOVED,
                Safe,
                "/defs/main/input/schema/properties/a".into()
            )]
        );
    }

    #[test]
    fn shared_def_takes_the_flow_of_all_its_uses_and_is_reported_once() {
        let users = [
            lex(
                "com.example.get",
                json!({"main": {"type": "query", "output": {"encoding": "application/json",
                    "schema": {"type": "ref", "ref": "com.example.defs#thing"}}}}),
            ),
            lex(
                "com.example.list",
                json!({"main": {"type": "query", "output": {"encoding": "application/json",
                    "schema": {"type": "object", "properties": {"items": {"type": "array",
                        "items": {"type": "ref", "ref": "com.example.defs#thing"}}}}}}}),
            ),
        ];
        let defs = |max| {
            lex(
                "com.example.defs",
                json!({"thing": {"type": "object", "properties": {"t": string(max)}}}),
            )
        };
        let with = |max| {
            let mut v = users.to_vec();
            v.push(defs(max));
            v
        };
        let path = "/defs/thing/properties/t/maxLength";
        // Output-only def: narrowing is safe, once, at the def.
        assert_eq!(
            summary(&with(200), &with(100)),
            [(r::LIMIT_NARROWED, Safe, path.into())]
        );
        // Also used by an input now: narrowing breaks that input.
        let mut new = with(100);
        new.push(lex(
            "com.example.put",
            procedure_input(json!({"x": {"type": "ref", "ref": "com.example.defs#thing"}})),
        ));
        let got = summary(&with(200), &new);
        assert!(
            got.contains(&(r::LIMIT_NARROWED, Breaking, path.into())),
            "{got:?}"
        );
        // Nothing in the set uses it: counted as both ways.
        assert_eq!(
            summary(&[defs(200)], &[defs(100)]),
            [(r::LIMIT_NARROWED, Breaking, path.into())]
        );
        assert_eq!(
            summary(&[defs(100)], &[defs(200)]),
            [(r::LIMIT_WIDENED, Breaking, path.into())]
        );
    }

    #[test]
    fn main_spellings_are_the_same_ref() {
        let rec = |target: &str, union_ref: &str| {
            [
                lex(
                    "com.example.post",
                    json!({"main": {"type": "record", "key": "tid", "record": {"type": "object",
                    "properties": {
                        "a": {"type": "ref", "ref": target},
                        "b": {"type": "union", "refs": [union_ref]}
                    }}}}),
                ),
                lex(
                    "com.example.thing",
                    json!({"main": {"type": "object", "properties": {}}}),
                ),
            ]
        };
        let base = rec("com.example.thing", "com.example.thing");
        for (t, u) in [
            ("com.example.thing#main", "com.example.thing#main"),
            ("com.example.thing", "com.example.thing#main"),
        ] {
            assert_eq!(summary(&base, &rec(t, u)), [], "{t} {u}");
        }
        // `#main` inside the lexicon itself is `nsid#main` too.
        let local = |target: &str| {
            [lex(
                "com.example.tree",
                json!({"main": {"type": "object", "properties": {
                    "child": {"type": "ref", "ref": target}}}}),
            )]
        };
        assert_eq!(summary(&local("#main"), &local("com.example.tree")), []);
    }

    fn renamed(old_name: &str, new_name: &str, new_max: u64) -> (Vec<Value>, Vec<Value>) {
        let doc = |name: &str, max: u64| {
            lex(
                "com.example.post",
                json!({
                    "main": {"type": "record", "key": "tid", "record": {"type": "object",
                        "properties": {"x": {"type": "ref", "ref": format!("#{name}")}}}},
                    name: {"type": "object", "properties": {
                        "t": string(max),
                        "next": {"type": "ref", "ref": format!("#{name}")}
                    }}
                }),
            )
        };
        (vec![doc(old_name, 100)], vec![doc(new_name, new_max)])
    }

    #[test]
    fn ref_renamed_to_an_equivalent_def_is_safe_even_when_recursive() {
        let (old, new) = renamed("part", "piece", 100);
        assert_eq!(
            summary(&old, &new),
            [
                (
                    r::REF_RENAMED,
                    Safe,
                    "/defs/main/record/properties/x/ref".into()
                ),
                (r::DEF_ADDED, Safe, "/defs/piece".into()),
                (r::DEF_REMOVED, Breaking, "/defs/part".into()),
            ]
        );
    }

    #[test]
    fn ref_renamed_to_an_incompatible_def_breaks_and_says_why() {
        let (old, new) = renamed("part", "piece", 50);
        let changes = diff(&catalog(&old), &catalog(&new));
        assert_eq!(changes[0].rule, r::REF_CHANGED);
        assert_eq!(changes[0].severity, Breaking);
        assert!(
            changes[0].message.contains("/properties/t/maxLength"),
            "{}",
            changes[0].message
        );
    }

    #[test]
    fn ref_to_a_renamed_record_breaks() {
        let docs = |target: &str| {
            vec![
                lex(
                    "com.example.holder",
                    json!({"main": {"type": "object", "properties": {
                        "r": {"type": "ref", "ref": target}}}}),
                ),
                lex(
                    "com.example.a",
                    json!({"main": {"type": "record", "key": "tid",
                        "record": {"type": "object", "properties": {}}}}),
                ),
                lex(
                    "com.example.b",
                    json!({"main": {"type": "record", "key": "tid",
                        "record": {"type": "object", "properties": {}}}}),
                ),
            ]
        };
        assert_eq!(
            summary(&docs("com.example.a"), &docs("com.example.b")),
            [(
                r::REF_CHANGED,
                Breaking,
                "/defs/main/properties/r/ref".into()
            )]
        );
    }

    #[test]
    fn union_refs_are_type_ids_so_a_rename_is_remove_plus_add() {
        let doc = |name: &str| {
            vec![lex(
                "com.example.post",
                json!({
                    "main": {"type": "record", "key": "tid", "record": {"type": "object",
                        "properties": {"u": {"type": "union", "refs": [format!("#{name}")]}}}},
                    name: {"type": "object", "properties": {}}
                }),
            )]
        };
        let got = summary(&doc("a"), &doc("b"));
        let p = "/defs/main/record/properties/u/refs".to_string();
        assert_eq!(got[0], (r::UNION_REF_REMOVED, Breaking, p.clone()));
        assert_eq!(got[1], (r::UNION_REF_ADDED, Safe, p));
    }

    #[test]
    fn removed_things_point_into_the_old_file() {
        let old = catalog(&[lex(
            "com.example.x",
            json!({"a": {"type": "token"}, "b": {"type": "token"}}),
        )]);
        let mut new = Catalog::new();
        new.add(
            "new/x.json",
            &lex("com.example.x", json!({"a": {"type": "token"}})),
        );
        let changes = diff(&old, &new);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].file, "0.json");
        assert_eq!(changes[0].path, "/defs/b");
        assert_eq!(
            changes[0].to_finding().to_string(),
            "0.json:/defs/b: breaking: def 'b' (token) was removed [def-removed]"
        );
    }

    #[test]
    fn order_is_by_nsid_whatever_the_load_order() {
        let a = lex("com.example.a", json!({"x": {"type": "token"}}));
        let b = lex("com.example.b", json!({"x": {"type": "token"}}));
        let forward = diff(&catalog(&[]), &catalog(&[a.clone(), b.clone()]));
        let backward = diff(&catalog(&[]), &catalog(&[b, a]));
        let nsids = |c: &[Change]| c.iter().map(|c| c.nsid.clone()).collect::<Vec<_>>();
        assert_eq!(nsids(&forward), ["com.example.a", "com.example.b"]);
        assert_eq!(nsids(&forward), nsids(&backward));
    }

    #[test]
    fn subscription_messages_are_outbound() {
        let sub = |refs: Value, closed: bool| {
            [lex(
                "com.example.subscribe",
                json!({
                    "main": {"type": "subscription", "message": {"schema":
                        {"type": "union", "refs": refs, "closed": closed}}},
                    "commit": {"type": "object", "properties": {"seq": {"type": "integer"}}},
                    "info": {"type": "object", "properties": {"seq": {"type": "integer"}}}
                }),
            )]
        };
        let p = "/defs/main/message/schema/refs".to_string();
        // Old consumers of a closed message union reject a new frame type.
        assert_eq!(
            summary(
                &sub(json!(["#commit"]), true),
                &sub(json!(["#commit", "#info"]), true)
            ),
            [(r::UNION_REF_ADDED, Breaking, p.clone())]
        );
        assert_eq!(
            summary(
                &sub(json!(["#commit"]), false),
                &sub(json!(["#commit", "#info"]), false)
            ),
            [(r::UNION_REF_ADDED, Safe, p)]
        );
        // Frame defs are outbound: a looser frame breaks, a stricter one does not.
        let frame = |max: u64| {
            [lex(
                "com.example.subscribe",
                json!({
                    "main": {"type": "subscription", "message": {"schema":
                        {"type": "union", "refs": ["#commit"]}}},
                    "commit": {"type": "object", "properties": {"repo": string(max)}}
                }),
            )]
        };
        let p = "/defs/commit/properties/repo/maxLength".to_string();
        assert_eq!(
            summary(&frame(100), &frame(200)),
            [(r::LIMIT_WIDENED, Breaking, p.clone())]
        );
        assert_eq!(
            summary(&frame(200), &frame(100)),
            [(r::LIMIT_NARROWED, Safe, p)]
        );
    }

    #[test]
    fn ref_swapped_for_an_incompatible_inline_schema_breaks() {
        let doc = |a: Value| {
            [lex(
                "com.example.post",
                json!({
                    "main": {"type": "record", "key": "tid", "record": {"type": "object",
                        "properties": {"a": a}}},
                    "point": {"type": "object", "properties": {"x": {"type": "integer"}}}
                }),
            )]
        };
        let inline = json!({"type": "object", "required": ["x"],
            "properties": {"x": {"type": "integer"}}});
        let by_ref = json!({"type": "ref", "ref": "#point"});
        let p = "/defs/main/record/properties/a".to_string();
        assert_eq!(
            summary(&doc(by_ref.clone()), &doc(inline.clone())),
            [(r::REF_CHANGED, Breaking, p.clone())]
        );
        // And the other way: dropping `required` by extracting to #point.
        assert_eq!(
            summary(&doc(inline), &doc(by_ref)),
            [(r::REF_CHANGED, Breaking, p)]
        );
        // A ref to a def of another type is just a type change.
        let string_ref = json!({"type": "string"});
        assert_eq!(
            summary(
                &doc(json!({"type": "ref", "ref": "#point"})),
                &doc(string_ref)
            ),
            [(
                r::TYPE_CHANGED,
                Breaking,
                "/defs/main/record/properties/a/type".into()
            )]
        );
    }

    #[test]
    fn dropped_accept_list_widens_and_points_into_the_old_file() {
        let doc = |blob: Value| {
            [lex(
                "com.example.post",
                json!({"main": {"type": "record", "key": "tid", "record": {"type": "object",
                    "properties": {"img": blob}}}}),
            )]
        };
        let mut new = Catalog::new();
        new.add("new.json", &doc(json!({"type": "blob"}))[0]);
        let changes = diff(
            &catalog(&doc(json!({"type": "blob", "accept": ["image/png"]}))),
            &new,
        );
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].file, "0.json");
        assert_eq!(changes[0].path, "/defs/main/record/properties/img/accept");
        assert_eq!(changes[0].rule, r::BLOB_ACCEPT_WIDENED);
        assert_eq!(changes[0].severity, Breaking);
        assert!(
            changes[0].message.contains("\"*/*\""),
            "{}",
            changes[0].message
        );
    }

    #[test]
    fn every_rule_is_kebab_case_and_unique() {
        let mut seen = std::collections::HashSet::new();
        for rule in rules::ALL {
            assert!(
                rule.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
                "{rule}"
            );
            assert!(seen.insert(rule), "duplicate {rule}");
        }
    }
}
