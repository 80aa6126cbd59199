//! Every lint rule against its folder of deliberately broken lexicons in
//! `fixtures/lint/<rule-name>/`.
//!
//! Each folder is a small catalog laid out by NSID (`com/example/foo.json`
//! for `com.example.foo`, so `id-path` stays quiet where it is not under
//! test), holding broken cases next to near misses that must stay clean.
//! Its `expected.txt` lists, one per line and in report order, every
//! finding the folder must produce, structural or lint:
//!
//! ```text
//! # comment
//! com/example/foo.json /defs/main/ref dangling-ref
//! ```
//!
//! (file relative to the folder, JSON pointer, rule; pointers with spaces
//! cannot be written here, so the fixtures avoid them).

use gelstore_lexicon::catalog::Catalog;
use gelstore_lexicon::lint::{ALL_RULES, lint};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/lint")
}

fn folders() -> BTreeSet<String> {
    std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

fn expected(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("expected.txt"))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join("expected.txt").display()));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// Loads and lints one folder; findings as `expected.txt` lines.
fn actual(dir: &Path) -> Vec<String> {
    let (catalog, mut findings) = Catalog::load_paths(&[dir]).unwrap();
    findings.extend(lint(&catalog));
    let prefix = dir.display().to_string();
    findings
        .iter()
        .map(|f| {
            assert!(!f.message.is_empty(), "{f:?} has no message");
            let file = f
                .file
                .strip_prefix(&prefix)
                .unwrap_or(&f.file)
                .trim_start_matches(['/', '\\'])
                .replace('\\', "/");
            format!("{file} {} {}", f.path, f.rule)
        })
        .collect()
}

#[test]
fn every_rule_has_a_fixture_folder_and_every_folder_a_rule() {
    let folders = folders();
    let rules: BTreeSet<String> = ALL_RULES.iter().map(|(r, _)| r.to_string()).collect();
    let missing: Vec<_> = rules.difference(&folders).collect();
    let stray: Vec<_> = folders.difference(&rules).collect();
    assert!(
        missing.is_empty(),
        "rules without a fixtures/lint/<rule>/ folder: {missing:?}"
    );
    assert!(
        stray.is_empty(),
        "fixture folders that name no rule: {stray:?}"
    );
}

#[test]
fn each_folder_gives_exactly_its_expected_findings() {
    let mut failures = Vec::new();
    for rule in folders() {
        let dir = fixtures().join(&rule);
        let expected = expected(&dir);
        let actual = actual(&dir);
        if !expected
            .iter()
            .any(|line| line.rsplit(' ').next() == Some(rule.as_str()))
        {
            failures.push(format!("{rule}: expected.txt never names the rule itself"));
        }
        if expected != actual {
            failures.push(format!(
                "{rule}: findings differ from expected.txt\n--- expected\n{}\n--- actual\n{}",
                expected.join("\n"),
                actual.join("\n")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn findings_are_deterministic() {
    for rule in folders() {
        let dir = fixtures().join(&rule);
        assert_eq!(actual(&dir), actual(&dir), "{rule}");
    }
}
