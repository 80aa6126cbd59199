//! Helpers shared by the integration tests that read the CC0 interop
//! fixtures in `fixtures/interop/`.
#![allow(dead_code)] // each test crate uses its own subset

use serde_json::Value;
use std::path::PathBuf;

/// The path of a file under `fixtures/interop/`.
pub fn interop_path(rel: &str) -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "fixtures/interop", rel]
        .iter()
        .collect()
}

/// The cases of an interop JSON fixture file (a top-level array).
pub fn interop_cases(rel: &str) -> Vec<Value> {
    let path = interop_path(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    match serde_json::from_str(&text) {
        Ok(Value::Array(cases)) => cases,
        other => panic!("{}: expected a JSON array, got {other:?}", path.display()),
    }
}

/// A string field every case of a fixture has.
pub fn str_field<'a>(case: &'a Value, key: &str) -> &'a str {
    case.get(key)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string {key:?} in {case}"))
}
