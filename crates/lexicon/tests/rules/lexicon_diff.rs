//! Fixture cases for the lexicon breaking-change check: each
//! `fixtures/diff/<case>/{old,new}/` holds a lexicon set laid out by NSID
//! path, and `CASES` lists exactly the changes `diff` must report for it.

use gelstore_lexicon::catalog::Catalog;
use gelstore_lexicon::diff::{Change, Severity, diff, rules};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use Severity::{Breaking, Safe};

type Expected = &'static [(&'static str, Severity, &'static str)];

/// (case folder, expected (rule, severity, path) in report order).
const CASES: &[(&str, Expected)] = &[
    ("lexicon-removed", &[("lexicon-removed", Breaking, "")]),
    ("def-removed", &[("def-removed", Breaking, "/defs/tag")]),
    (
        "def-type-changed",
        &[("def-type-changed", Breaking, "/defs/status/type")],
    ),
    (
        "type-changed",
        &[(
            "type-changed",
            Breaking,
            "/defs/main/record/properties/count/type",
        )],
    ),
    (
        "property-removed",
        &[(
            "property-removed",
            Breaking,
            "/defs/main/record/properties/subtitle",
        )],
    ),
    (
        "required-added",
        &[
            (
                "required-added",
                Breaking,
                "/defs/main/record/properties/title",
            ),
            (
                "required-added",
                Breaking,
                "/defs/main/record/properties/lang",
            ),
        ],
    ),
    (
        "required-removed",
        &[(
            "required-removed",
            Breaking,
            "/defs/main/output/schema/properties/uri",
        )],
    ),
    (
        "nullable-added",
        &[(
            "nullable-added",
            Breaking,
            "/defs/main/output/schema/properties/name",
        )],
    ),
    (
        "nullable-removed",
        &[(
            "nullable-removed",
            Breaking,
            "/defs/main/record/properties/note",
        )],
    ),
    (
        "limit-narrowed",
        &[
            (
                "limit-narrowed",
                Breaking,
                "/defs/main/record/properties/text/maxLength",
            ),
            (
                "limit-narrowed",
                Breaking,
                "/defs/main/record/properties/text/maxGraphemes",
            ),
            (
                "limit-narrowed",
                Breaking,
                "/defs/main/record/properties/count/minimum",
            ),
            (
                "limit-narrowed",
                Breaking,
                "/defs/main/record/properties/count/maximum",
            ),
            (
                "limit-narrowed",
                Breaking,
                "/defs/main/record/properties/tags/maxLength",
            ),
            (
                "limit-narrowed",
                Breaking,
                "/defs/main/record/properties/avatar/maxSize",
            ),
            (
                "limit-narrowed",
                Breaking,
                "/defs/main/record/properties/data/minLength",
            ),
        ],
    ),
    (
        "limit-widened",
        &[
            (
                "limit-widened",
                Breaking,
                "/defs/main/output/schema/properties/bio/maxGraphemes",
            ),
            (
                "limit-widened",
                Breaking,
                "/defs/main/output/schema/properties/items/maxLength",
            ),
        ],
    ),
    (
        "enum-added",
        &[(
            "enum-added",
            Breaking,
            "/defs/main/record/properties/visibility/enum",
        )],
    ),
    (
        "enum-removed",
        &[(
            "enum-removed",
            Breaking,
            "/defs/main/output/schema/properties/state/enum",
        )],
    ),
    (
        "enum-value-added",
        &[(
            "enum-value-added",
            Breaking,
            "/defs/main/output/schema/properties/level/enum",
        )],
    ),
    (
        "enum-value-removed",
        &[(
            "enum-value-removed",
            Breaking,
            "/defs/main/record/properties/mood/enum",
        )],
    ),
    (
        "known-values-to-enum",
        &[(
            "known-values-to-enum",
            Breaking,
            "/defs/main/input/schema/properties/reason/enum",
        )],
    ),
    (
        "const-added",
        &[(
            "const-added",
            Breaking,
            "/defs/main/record/properties/agreed/const",
        )],
    ),
    (
        "const-changed",
        &[(
            "const-changed",
            Breaking,
            "/defs/main/record/properties/version/const",
        )],
    ),
    (
        "const-removed",
        &[(
            "const-removed",
            Breaking,
            "/defs/main/output/schema/properties/kind/const",
        )],
    ),
    (
        "default-changed",
        &[(
            "default-changed",
            Breaking,
            "/defs/main/parameters/properties/limit/default",
        )],
    ),
    (
        "format-added",
        &[(
            "format-added",
            Breaking,
            "/defs/main/record/properties/link/format",
        )],
    ),
    (
        "format-removed",
        &[(
            "format-removed",
            Breaking,
            "/defs/main/output/schema/properties/did/format",
        )],
    ),
    (
        "format-changed",
        &[(
            "format-changed",
            Breaking,
            "/defs/main/record/properties/author/format",
        )],
    ),
    (
        "blob-accept-narrowed",
        &[(
            "blob-accept-narrowed",
            Breaking,
            "/defs/main/record/properties/image/accept",
        )],
    ),
    (
        "blob-accept-widened",
        &[(
            "blob-accept-widened",
            Breaking,
            "/defs/main/record/properties/image/accept",
        )],
    ),
    (
        "ref-changed",
        &[(
            "ref-changed",
            Breaking,
            "/defs/main/record/properties/x/ref",
        )],
    ),
    (
        "union-ref-removed",
        &[(
            "union-ref-removed",
            Breaking,
            "/defs/main/message/schema/refs",
        )],
    ),
    (
        "union-ref-added-closed",
        &[(
            "union-ref-added",
            Breaking,
            "/defs/main/output/schema/properties/item/refs",
        )],
    ),
    (
        "union-closed",
        &[(
            "union-closed",
            Breaking,
            "/defs/main/record/properties/embed/closed",
        )],
    ),
    (
        "union-opened",
        &[(
            "union-opened",
            Breaking,
            "/defs/main/output/schema/properties/item/closed",
        )],
    ),
    (
        "record-key-changed",
        &[("record-key-changed", Breaking, "/defs/main/key")],
    ),
    (
        "body-added",
        &[("body-added", Breaking, "/defs/main/input")],
    ),
    (
        "body-removed",
        &[("body-removed", Breaking, "/defs/main/output")],
    ),
    (
        "body-schema-added",
        &[("body-schema-added", Breaking, "/defs/main/input/schema")],
    ),
    (
        "body-schema-removed",
        &[("body-schema-removed", Breaking, "/defs/main/output/schema")],
    ),
    (
        "encoding-changed",
        &[("encoding-changed", Breaking, "/defs/main/input/encoding")],
    ),
    (
        "error-removed",
        &[("error-removed", Breaking, "/defs/main/errors/1")],
    ),
    (
        "permission-removed",
        &[("permission-removed", Breaking, "/defs/main/permissions/1")],
    ),
    (
        "params-required-added",
        &[(
            "required-added",
            Breaking,
            "/defs/main/parameters/properties/actor",
        )],
    ),
    (
        "input-required-added",
        &[(
            "required-added",
            Breaking,
            "/defs/main/input/schema/properties/createdAt",
        )],
    ),
    (
        "shared-def-narrowed-for-input",
        &[(
            "limit-narrowed",
            Breaking,
            "/defs/label/properties/val/maxLength",
        )],
    ),
    (
        "safe-optional-property",
        &[("property-added", Safe, "/defs/main/record/properties/lang")],
    ),
    (
        "safe-widened-input",
        &[
            (
                "required-removed",
                Safe,
                "/defs/main/input/schema/properties/text",
            ),
            (
                "limit-widened",
                Safe,
                "/defs/main/input/schema/properties/text/minLength",
            ),
            (
                "limit-widened",
                Safe,
                "/defs/main/input/schema/properties/text/maxLength",
            ),
            (
                "enum-value-added",
                Safe,
                "/defs/main/input/schema/properties/kind/enum",
            ),
            (
                "format-changed",
                Safe,
                "/defs/main/input/schema/properties/subject/format",
            ),
            (
                "format-removed",
                Safe,
                "/defs/main/input/schema/properties/link/format",
            ),
            (
                "nullable-added",
                Safe,
                "/defs/main/input/schema/properties/note",
            ),
            (
                "union-opened",
                Safe,
                "/defs/main/input/schema/properties/embed/closed",
            ),
        ],
    ),
    (
        "safe-narrowed-output",
        &[
            (
                "limit-narrowed",
                Safe,
                "/defs/main/output/schema/properties/text/maxLength",
            ),
            (
                "enum-value-removed",
                Safe,
                "/defs/main/output/schema/properties/kind/enum",
            ),
            (
                "nullable-removed",
                Safe,
                "/defs/main/output/schema/properties/note",
            ),
            (
                "required-added",
                Safe,
                "/defs/main/output/schema/properties/cid",
            ),
            (
                "union-closed",
                Safe,
                "/defs/main/output/schema/properties/embed/closed",
            ),
        ],
    ),
    (
        "safe-input-enum-opened",
        &[
            (
                "enum-removed",
                Safe,
                "/defs/main/input/schema/properties/reason/enum",
            ),
            (
                "known-values-changed",
                Safe,
                "/defs/main/input/schema/properties/reason/knownValues",
            ),
        ],
    ),
    (
        "safe-known-values",
        &[(
            "known-values-changed",
            Safe,
            "/defs/main/record/properties/lang/knownValues",
        )],
    ),
    (
        "safe-new-def-and-lexicon",
        &[
            ("lexicon-added", Safe, ""),
            ("def-added", Safe, "/defs/draft"),
        ],
    ),
    (
        "safe-open-union-ref",
        &[
            (
                "union-ref-added",
                Safe,
                "/defs/main/record/properties/embed/refs",
            ),
            ("def-added", Safe, "/defs/video"),
        ],
    ),
    (
        "safe-descriptions",
        &[
            ("description-changed", Safe, "/description"),
            ("description-changed", Safe, "/defs/main/description"),
            ("description-changed", Safe, "/defs/main/output/description"),
            (
                "description-changed",
                Safe,
                "/defs/main/output/schema/properties/uri/description",
            ),
            (
                "description-changed",
                Safe,
                "/defs/main/errors/0/description",
            ),
        ],
    ),
    (
        "safe-optional-param",
        &[
            (
                "limit-widened",
                Safe,
                "/defs/main/parameters/properties/limit/maximum",
            ),
            (
                "property-added",
                Safe,
                "/defs/main/parameters/properties/cursor",
            ),
            (
                "property-removed",
                Safe,
                "/defs/main/parameters/properties/legacy",
            ),
        ],
    ),
    (
        "safe-error-added",
        &[("error-added", Safe, "/defs/main/errors/1")],
    ),
    (
        "safe-ref-renamed",
        &[
            (
                "ref-renamed",
                Safe,
                "/defs/main/record/properties/reply/ref",
            ),
            ("def-added", Safe, "/defs/reply"),
        ],
    ),
    (
        "safe-ref-inlined",
        &[
            ("ref-inlined", Safe, "/defs/main/record/properties/a"),
            ("ref-extracted", Safe, "/defs/main/record/properties/b"),
            ("def-added", Safe, "/defs/coords"),
        ],
    ),
    (
        "safe-defaults",
        &[
            (
                "default-added",
                Safe,
                "/defs/main/record/properties/pinned/default",
            ),
            (
                "default-removed",
                Safe,
                "/defs/main/record/properties/size/default",
            ),
        ],
    ),
    (
        "safe-permission-added",
        &[("permission-added", Safe, "/defs/main/permissions/1")],
    ),
    (
        "safe-output-added",
        &[("body-added", Safe, "/defs/main/output")],
    ),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn load(dir: &Path) -> Catalog {
    let (catalog, findings) =
        Catalog::load_paths(&[dir]).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    assert!(findings.is_empty(), "{}: {findings:#?}", dir.display());
    catalog
}

fn run(case: &str) -> Vec<Change> {
    let dir = root().join("diff").join(case);
    diff(&load(&dir.join("old")), &load(&dir.join("new")))
}

#[test]
fn each_case_reports_exactly_the_expected_changes() {
    let mut failures = Vec::new();
    for (case, expected) in CASES {
        let changes = run(case);
        let got: Vec<(&str, Severity, &str)> = changes
            .iter()
            .map(|c| (c.rule, c.severity, c.path.as_str()))
            .collect();
        if got != *expected {
            let detail: Vec<String> = changes.iter().map(|c| format!("  {c:?}")).collect();
            failures.push(format!(
                "{case}:\n expected {expected:?}\n got\n{}",
                detail.join("\n")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn breaking_cases_break_and_safe_cases_do_not() {
    for (case, expected) in CASES {
        let any_breaking = expected.iter().any(|(_, s, _)| *s == Breaking);
        assert_eq!(
            any_breaking,
            !case.starts_with("safe-"),
            "{case}: name the safe cases safe-*"
        );
    }
}

#[test]
fn changes_point_at_real_places() {
    for (case, _) in CASES {
        for c in run(case) {
            let text = std::fs::read_to_string(&c.file)
                .unwrap_or_else(|e| panic!("{case}: {}: {e}", c.file));
            let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert!(
                doc.pointer(&c.path).is_some(),
                "{case}: {} is not in {}",
                c.path,
                c.file
            );
            assert_eq!(c.to_finding().rule, c.rule);
        }
    }
}

#[test]
fn every_rule_has_a_fixture() {
    let covered: BTreeSet<&str> = CASES
        .iter()
        .flat_map(|(_, e)| e.iter().map(|(rule, _, _)| *rule))
        .collect();
    let missing: Vec<&&str> = rules::ALL
        .iter()
        .filter(|r| !covered.contains(**r))
        .collect();
    assert!(
        missing.is_empty(),
        "rules without a fixture case: {missing:?}"
    );
    for rule in &covered {
        assert!(rules::ALL.contains(rule), "unknown rule {rule}");
    }
}

#[test]
fn every_fixture_folder_is_a_case() {
    let listed: BTreeSet<&str> = CASES.iter().map(|(c, _)| *c).collect();
    assert_eq!(listed.len(), CASES.len(), "duplicate case names");
    for entry in std::fs::read_dir(root().join("diff")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            listed.contains(name.as_str()),
            "fixture {name} is not in CASES"
        );
    }
}

#[test]
fn identical_sets_have_no_changes() {
    let dir = root().join("interop/lexicon/catalog");
    let (old, new) = (load(&dir), load(&dir));
    assert!(old.len() >= 5);
    assert_eq!(diff(&old, &new), []);
    // Each fixture's old and new sets against themselves, too.
    for (case, _) in CASES {
        for side in ["old", "new"] {
            let set = load(&root().join("diff").join(case).join(side));
            assert_eq!(diff(&set, &set), [], "{case}/{side}");
        }
    }
}
