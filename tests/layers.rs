//! The layers run one way: a module may use only the modules listed for it
//! in `ALLOWED` (docs/architecture.md shows the same table). This reads
//! every `crate::…` path in `src/` — `use` lines and paths written inline —
//! so a lower layer that reaches up fails here, in `cargo test`.
//!
//! `DEBTS` lists the imports that break the rule today, each with where it
//! should go. The list only shrinks: an entry that no longer occurs fails
//! too, so that whoever removes a debt also removes its line.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Each top-level module of `src/` and the modules it may use (itself is
/// always allowed). `main.rs` and `lib.rs` are the binary edge and the root.
const ALLOWED: &[(&str, &[&str])] = &[
    ("alloc", &[]),
    ("snapshot", &["alloc"]),
    ("scenario", &["alloc", "snapshot"]),
    ("device", &["alloc", "snapshot"]),
    ("probe", &["alloc", "snapshot", "device"]),
    ("serve", &["alloc", "snapshot", "device", "probe"]),
    ("app", &["alloc", "snapshot", "scenario", "device", "probe"]),
    (
        "ui",
        &["alloc", "snapshot", "scenario", "device", "probe", "app"],
    ),
    (
        "shell",
        &[
            "alloc", "snapshot", "scenario", "device", "probe", "app", "ui",
        ],
    ),
    (
        "cli",
        &[
            "alloc", "snapshot", "scenario", "device", "probe", "serve", "app", "ui", "shell",
        ],
    ),
];

/// Known breaks of the rule: (file, module it uses, where the code belongs).
/// None today; a break that must land before it can be fixed goes here,
/// with where it should go, and docs/architecture.md says so too.
const DEBTS: &[(&str, &str, &str)] = &[];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules named by `crate::NAME` in `text`, code only (a
/// line comment's mention does not count).
fn crate_modules(text: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // `use crate::{alloc::X, ui::Y}` names several at once.
            if name.is_empty() && after.starts_with('{') {
                let inner = after[1..].split('}').next().unwrap_or("");
                for part in inner.split(',') {
                    let part = part.trim();
                    let top: String = part
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !top.is_empty() {
                        used.insert(top);
                    }
                }
            } else if !name.is_empty() {
                used.insert(name);
            }
            rest = after;
        }
    }
    used
}

#[test]
fn lower_layers_never_use_higher_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    let known: BTreeSet<&str> = ALLOWED.iter().map(|(m, _)| *m).collect();
    let mut breaks = Vec::new();
    let mut debts_seen = BTreeSet::new();
    for file in &files {
        let relative = file
            .strip_prefix(root)
            .expect("under the root")
            .to_string_lossy()
            .replace('\\', "/");
        let Some(module) = relative
            .strip_prefix("src/")
            .and_then(|r| r.split('/').next())
            .filter(|m| !m.ends_with(".rs"))
        else {
            continue; // main.rs, lib.rs
        };
        let Some((_, allowed)) = ALLOWED.iter().find(|(m, _)| *m == module) else {
            panic!(
                "src/{module}/ is not in the layer table: add it to ALLOWED and docs/architecture.md"
            );
        };
        let text = std::fs::read_to_string(file).expect("source is readable");
        for used in crate_modules(&text) {
            if used == module || !known.contains(used.as_str()) || allowed.contains(&used.as_str())
            {
                continue;
            }
            match DEBTS.iter().find(|(f, m, _)| *f == relative && *m == used) {
                Some(_) => {
                    debts_seen.insert((relative.clone(), used));
                }
                None => breaks.push(format!("{relative} uses crate::{used}")),
            }
        }
    }
    assert!(
        breaks.is_empty(),
        "imports against the layer table (docs/architecture.md):\n  {}",
        breaks.join("\n  ")
    );
    let paid: Vec<String> = DEBTS
        .iter()
        .filter(|(f, m, _)| !debts_seen.contains(&(f.to_string(), m.to_string())))
        .map(|(f, m, _)| format!("{f} -> {m}"))
        .collect();
    assert!(
        paid.is_empty(),
        "these debts are paid: remove them from DEBTS in tests/layers.rs and docs/architecture.md: {paid:?}"
    );
}

#[test]
fn the_reader_of_imports_sees_grouped_and_inline_paths_but_not_comments() {
    let text =
        "use crate::{alloc::X, ui::Y};\nlet a = crate::probe::f();\n// crate::cli is only named\n";
    let found: Vec<String> = crate_modules(text).into_iter().collect();
    assert_eq!(found, ["alloc", "probe", "ui"]);
}
