//! The CC0 interop lexicon fixtures (`fixtures/interop/lexicon/`) through
//! parsing and lint: valid documents give no finding, invalid ones at least
//! the finding that names their problem, and the example catalog lints clean
//! but for what its layout and one external ref make inevitable.

use gelstore_lexicon::Finding;
use gelstore_lexicon::catalog::Catalog;
use gelstore_lexicon::lint::{lint, rules};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn lexicon_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/interop/lexicon")
}

/// `(name, lexicon)` cases of a `lexicon-*.json` file.
fn cases(file: &str) -> Vec<(String, Value)> {
    let text = std::fs::read_to_string(lexicon_dir().join(file)).unwrap();
    let cases: Vec<Value> = serde_json::from_str(&text).unwrap();
    cases
        .into_iter()
        .map(|case| {
            let name = case["name"].as_str().unwrap().to_string();
            (name, case["lexicon"].clone())
        })
        .collect()
}

/// Parses and lints one document in a catalog of its own, filed under its id
/// (`com/example/foo.json`) so that `id-path` only fires for a bad id.
fn check_alone(lexicon: &Value) -> Vec<Finding> {
    let file = match lexicon["id"].as_str() {
        Some(id) => format!("{}.json", id.replace('.', "/")),
        None => "lexicon.json".to_string(),
    };
    let mut catalog = Catalog::new();
    let mut findings = catalog.add(&file, lexicon);
    findings.extend(lint(&catalog));
    findings
}

#[test]
fn valid_lexicons_give_no_findings() {
    let cases = cases("lexicon-valid.json");
    assert_eq!(cases.len(), 3);
    for (name, lexicon) in cases {
        let findings = check_alone(&lexicon);
        assert!(findings.is_empty(), "{name}: {findings:#?}");
    }
}

#[test]
fn invalid_lexicons_give_the_finding_that_names_their_problem() {
    let cases = cases("lexicon-invalid.json");
    assert_eq!(cases.len(), 7);
    for (name, lexicon) in cases {
        let expected = match name.as_str() {
            "invalid lexicon field" | "invalid id field" | "record missing type object" => "schema",
            "invalid NSID" => rules::INVALID_ID,
            "defined unknown" | "defined ref" => "type-not-allowed",
            "non-main primary" => rules::PRIMARY_NOT_MAIN,
            other => panic!("new invalid case '{other}': say which rule catches it"),
        };
        let findings = check_alone(&lexicon);
        assert!(
            findings.iter().any(|f| f.rule == expected),
            "{name}: expected a {expected} finding, got {findings:#?}"
        );
    }
}

#[test]
fn example_catalog_lints_clean_but_for_layout_and_the_external_ref() {
    let dir = lexicon_dir().join("catalog");
    let (catalog, structural) = Catalog::load_paths(&[&dir]).unwrap();
    assert!(structural.is_empty(), "{structural:#?}");
    assert_eq!(catalog.len(), 5);

    let found: Vec<(String, String, &str)> = lint(&catalog)
        .into_iter()
        .map(|f| {
            let file = Path::new(&f.file)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (file, f.path, f.rule)
        })
        .collect();
    let mut expected: Vec<(String, String, &str)> = Vec::new();
    for file in [
        "permission-set.json",
        "procedure.json",
        "query.json",
        "record.json",
        "subscription.json",
    ] {
        // The files are named by type, not laid out by id.
        expected.push((file.into(), "/id".into(), rules::ID_PATH));
        if file == "procedure.json" {
            // app.bsky.actor.defs is not part of this catalog.
            expected.push((
                file.into(),
                "/defs/main/input/schema/properties/preferences/ref".into(),
                rules::UNRESOLVED_LEXICON,
            ));
        }
    }
    assert_eq!(found, expected);
}
