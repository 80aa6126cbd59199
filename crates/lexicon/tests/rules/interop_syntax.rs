//! Runs every line of the atproto interop syntax fixtures
//! (`fixtures/interop/syntax/*.txt`, CC0) through the format checks.
//!
//! File rules from `fixtures/interop/INVENTORY.md`: split on `\n` only, skip
//! empty lines and lines starting with `#`, never trim (leading and trailing
//! spaces are test cases).

use std::path::PathBuf;

use gelstore_lexicon::syntax::Format;

/// Fixture file stem for each format.
const STEMS: [(Format, &str); 11] = [
    (Format::AtIdentifier, "atidentifier"),
    (Format::AtUri, "aturi"),
    (Format::Cid, "cid"),
    (Format::Datetime, "datetime"),
    (Format::Did, "did"),
    (Format::Handle, "handle"),
    (Format::Language, "language"),
    (Format::Nsid, "nsid"),
    (Format::RecordKey, "recordkey"),
    (Format::Tid, "tid"),
    (Format::Uri, "uri"),
];

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/interop/syntax")
}

/// The cases of one fixture file as (line number, text), or `None` if the
/// file does not exist (not every format has a `parse_invalid` file).
fn cases(file: &str) -> Option<Vec<(usize, String)>> {
    let text = std::fs::read_to_string(fixture_dir().join(file)).ok()?;
    let cases = text
        .split('\n')
        .enumerate()
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
        .map(|(i, line)| (i + 1, line.to_string()))
        .collect();
    Some(cases)
}

/// Shows a case so leading/trailing spaces and long lines stay readable.
fn show(line: &str) -> String {
    let shown: String = line.chars().take(80).collect();
    let more = line.chars().count().saturating_sub(80);
    if more > 0 {
        format!("{shown:?}... ({more} more chars)")
    } else {
        format!("{shown:?}")
    }
}

#[test]
fn every_format_has_fixtures() {
    assert_eq!(STEMS.len(), Format::ALL.len());
    for format in Format::ALL {
        let (_, stem) = STEMS
            .iter()
            .find(|(f, _)| *f == format)
            .expect("stem for every format");
        for kind in ["valid", "invalid"] {
            let file = format!("{stem}_syntax_{kind}.txt");
            let found = cases(&file).unwrap_or_default();
            assert!(!found.is_empty(), "{file} is missing or has no cases");
        }
    }
}

#[test]
fn interop_syntax_fixtures() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (format, stem) in STEMS {
        let files = [
            (format!("{stem}_syntax_valid.txt"), true),
            (format!("{stem}_syntax_invalid.txt"), false),
            (format!("{stem}_parse_invalid.txt"), false),
        ];
        for (file, want_ok) in files {
            for (line_no, case) in cases(&file).unwrap_or_default() {
                checked += 1;
                match (format.check(&case), want_ok) {
                    (Ok(()), false) => {
                        failures.push(format!("{file}:{line_no}: accepted {}", show(&case)))
                    }
                    (Err(e), true) => {
                        failures.push(format!("{file}:{line_no}: rejected {} ({e})", show(&case)))
                    }
                    _ => {}
                }
            }
        }
    }
    assert!(
        checked > 500,
        "only {checked} fixture cases found; is the fixture path right?"
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} fixture cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// No check may panic. Feeds every format every fixture line, each
/// char-boundary prefix of the shorter lines, and some hostile inputs.
#[test]
fn no_check_panics() {
    let mut inputs: Vec<String> = [
        "",
        "-",
        ".",
        ":",
        "%",
        "%%",
        "[",
        "]",
        "@",
        "#",
        "?",
        "/",
        "//",
        "at://",
        "did:",
        "did::",
        "x-",
        "Z",
        "T",
        "\0",
        "\u{feff}",
        "💩",
        "é.com",
        "0000-00-00T00:00:00Z",
        "http://[",
        "http://[v",
        "http://[v.]",
        "http://[::",
        "at://did:a:b/%",
        "b",
        "Qm",
    ]
    .map(String::from)
    .into();
    inputs.push("a".repeat(100_000));
    inputs.push("💩".repeat(10_000));
    inputs.push(format!("did:a:{}", "%".repeat(5_000)));
    for file in std::fs::read_dir(fixture_dir())
        .expect("fixture dir")
        .flatten()
    {
        let text = std::fs::read_to_string(file.path()).unwrap_or_default();
        for line in text.split('\n').filter(|l| l.len() <= 300) {
            let cuts = line.char_indices().map(|(i, _)| i).chain([line.len()]);
            inputs.extend(cuts.map(|i| line[..i].to_string()));
        }
    }
    for input in &inputs {
        for format in Format::ALL {
            let _ = format.check(input);
        }
    }
}
