//! Validates arbitrary JSON as a record against the chat.gel.assistant
//! lexicons (the real catalog, loaded once). Must never panic, whatever the
//! depth, size or shape of the input.

#![no_main]

use gelstore_lexicon::catalog::Catalog;
use gelstore_lexicon::validate;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../lexicons");
        Catalog::load_paths(&[dir]).expect("lexicons load").0
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let _ = validate::validate_record(catalog(), &value, Some("3lbqzdw5pzk22.r0"));
    for def in ["chat.gel.assistant.defs#plainContent", "chat.gel.assistant.subscribeReply#message"] {
        let _ = validate::validate_value(catalog(), def, &value);
    }
});
