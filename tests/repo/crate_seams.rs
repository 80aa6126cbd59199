//! The workspace's library crates pull in only what their part needs: the
//! lexicon compiler, the data model, the keys, the generated types and the
//! seal carry no storage engine, HTTP, async runtime or CLI; the
//! repository and its store carry the engines but no server or client.
//! Read from `cargo tree` (the lock file, offline), so a dependency added
//! to the wrong crate fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Crates that belong to the binary's server, client and CLI layers.
const NETWORK_AND_CLI: &[&str] = &[
    "axum",
    "hyper",
    "reqwest",
    "tokio",
    "clap",
    "rmcp",
    "hickory-resolver",
    "atrium-api",
];
/// The storage engines.
const ENGINES: &[&str] = &["sled", "redb"];

/// Every package in `krate`'s normal (non-dev, non-build) dependency tree.
fn dependencies(krate: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
            krate,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {krate}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

fn assert_none_of(krate: &str, deps: &BTreeSet<String>, banned: &[&str]) {
    let found: Vec<&&str> = banned.iter().filter(|b| deps.contains(**b)).collect();
    assert!(found.is_empty(), "{krate} depends on {found:?}");
}

#[test]
fn the_libraries_below_the_binary_carry_only_their_own_dependencies() {
    // One `cargo tree` per crate; each is read by several checks below.
    let tree: BTreeMap<&str, BTreeSet<String>> = [
        "gelstore-lexicon",
        "gelstore-codegen",
        "gelstore-model",
        "gelstore-crypto",
        "gelstore-types",
        "gelstore-seal",
        "gelstore-store",
        "gelstore-repo",
        "gelstore",
    ]
    .into_iter()
    .map(|krate| (krate, dependencies(krate)))
    .collect();
    for (krate, deps) in &tree {
        assert!(deps.contains(*krate), "{krate}: {deps:?}");
    }
    for krate in [
        "gelstore-lexicon",
        "gelstore-codegen",
        "gelstore-model",
        "gelstore-crypto",
        "gelstore-types",
        "gelstore-seal",
    ] {
        assert_none_of(krate, &tree[krate], NETWORK_AND_CLI);
        assert_none_of(krate, &tree[krate], ENGINES);
    }
    for krate in ["gelstore-store", "gelstore-repo"] {
        let deps = &tree[krate];
        assert!(deps.contains("redb") && deps.contains("sled"), "{krate}");
        assert_none_of(krate, deps, NETWORK_AND_CLI);
    }
    // The validator stands alone, and nothing at run time needs the compiler.
    let others: Vec<&String> = tree["gelstore-lexicon"]
        .iter()
        .filter(|d| d.starts_with("gelstore-") && *d != "gelstore-lexicon")
        .collect();
    assert!(others.is_empty(), "gelstore-lexicon depends on {others:?}");
    for krate in ["gelstore-repo", "gelstore-types", "gelstore-seal"] {
        assert_none_of(krate, &tree[krate], &["gelstore-codegen"]);
    }
    // The seal does not pull in the repository or its store.
    let seal = &tree["gelstore-seal"];
    assert_none_of("gelstore-seal", seal, &["gelstore-repo", "gelstore-store"]);
    // And the check itself can fail: the binary has them all.
    for dep in NETWORK_AND_CLI.iter().chain(ENGINES) {
        assert!(tree["gelstore"].contains(*dep), "gelstore lacks {dep}");
    }
}
