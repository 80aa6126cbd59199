//! Feeds arbitrary bytes to the lexicon front end: JSON → document model →
//! catalog → lint, and validates the same JSON as data against the catalog
//! it just built. Anything may be rejected; nothing may panic.

#![no_main]

use gelstore_lexicon::catalog::Catalog;
use gelstore_lexicon::{lint, validate};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let mut catalog = Catalog::new();
    let _ = catalog.add("fuzz.json", &value);
    let _ = lint::lint(&catalog);
    let _ = validate::validate_record(&catalog, &value, Some("self"));
    if let Some(id) = value.get("id").and_then(|v| v.as_str()) {
        let _ = validate::validate_value(&catalog, id, &value);
    }
});
