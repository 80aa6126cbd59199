//! `lex diff --base REV`: a lexicon set as committed at a git revision,
//! read with `git ls-tree` and `git show` (no checkout, the work tree is
//! left alone).

use std::path::Path;
use std::process::Command;

use gelstore_lexicon::catalog::Catalog;

fn git(dir: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

/// The lexicons under `path` (a file or folder of the work tree) as
/// revision `rev` has them; files are named `REV:path` in findings.
pub fn catalog_at(rev: &str, path: &Path) -> Result<Catalog, String> {
    if rev.starts_with('-') {
        return Err(format!("{rev:?} is not a revision"));
    }
    let abs =
        std::fs::canonicalize(path).map_err(|e| format!("cannot find {}: {e}", path.display()))?;
    let dir = if abs.is_dir() {
        abs.clone()
    } else {
        abs.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    let top = String::from_utf8(git(&dir, &["rev-parse", "--show-toplevel"])?)
        .map_err(|e| e.to_string())?;
    let top = Path::new(top.trim());
    let rel = abs
        .strip_prefix(top)
        .map_err(|_| format!("{} is not inside {}", path.display(), top.display()))?
        .to_string_lossy()
        .into_owned();
    let listed = git(
        top,
        &[
            "ls-tree",
            "-r",
            "--name-only",
            "-z",
            rev,
            "--",
            if rel.is_empty() { "." } else { &rel },
        ],
    )?;
    let mut catalog = Catalog::new();
    let mut files: Vec<&str> = listed
        .split(|&b| b == 0)
        .filter_map(|f| std::str::from_utf8(f).ok())
        .filter(|f| f.ends_with(".json"))
        .collect();
    files.sort_unstable();
    for file in files {
        let bytes = git(top, &["show", &format!("{rev}:{file}")])?;
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| format!("{rev}:{file} is not JSON: {e}"))?;
        catalog.add(&format!("{rev}:{file}"), &value);
    }
    Ok(catalog)
}
