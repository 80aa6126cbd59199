//! The project's lexicon files, compiled in, and their catalog.
//!
//! A program that writes `chat.gel.assistant.*` records hands this catalog
//! to the repository (`Repository::with_lexicons`), so that every record of
//! these collections is validated before it is stored, whatever the working
//! directory.

use std::sync::{Arc, LazyLock};

use gelstore_lexicon::catalog::Catalog;
use serde_json::Value;

macro_rules! lexicon {
    ($file:literal) => {
        (
            $file,
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../lexicons/chat/gel/assistant/",
                $file
            )),
        )
    };
}

/// The lexicon files compiled in, as (file name, JSON text).
pub const LEXICON_FILES: &[(&str, &str)] = &[
    lexicon!("answerApproval.json"),
    lexicon!("chat.json"),
    lexicon!("defs.json"),
    lexicon!("device.json"),
    lexicon!("getThread.json"),
    lexicon!("keyWrap.json"),
    lexicon!("listApprovals.json"),
    lexicon!("membership.json"),
    lexicon!("message.json"),
    lexicon!("settings.json"),
    lexicon!("subscribeReply.json"),
];

static CATALOG: LazyLock<Arc<Catalog>> = LazyLock::new(|| {
    let mut catalog = Catalog::new();
    for (file, text) in LEXICON_FILES {
        // The files are checked by `lex lint` in CI; a file that does not
        // parse simply contributes nothing here.
        if let Ok(value) = serde_json::from_str::<Value>(text) {
            catalog.add(&format!("lexicons/chat/gel/assistant/{file}"), &value);
        }
    }
    Arc::new(catalog)
});

/// The catalog of the `chat.gel.assistant` lexicons (built once, shared).
pub fn lexicons() -> Arc<Catalog> {
    CATALOG.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lexicon_file_is_compiled_in() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../lexicons/chat/gel/assistant"
        );
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect();
        on_disk.sort();
        let compiled: Vec<&str> = LEXICON_FILES.iter().map(|(f, _)| *f).collect();
        assert_eq!(on_disk, compiled, "update LEXICON_FILES");
        for (file, _) in LEXICON_FILES {
            let nsid = format!("chat.gel.assistant.{}", file.trim_end_matches(".json"));
            assert!(lexicons().get(&nsid).is_some(), "{nsid} did not load");
        }
    }
}
