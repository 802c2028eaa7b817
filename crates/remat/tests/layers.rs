//! The engine's layers (ARCHITECTURE.md, "Layers"), checked on the sources: a module names
//! only the layers below it. Code only: comments and doc comments are not dependencies.

use std::path::{Path, PathBuf};

/// The crate's `src/`.
fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The `.rs` files under `path` (a file or a folder), recursively.
fn sources(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let mut out = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("the crate's sources are readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    assert!(!out.is_empty(), "no sources under {}", path.display());
    out
}

/// Every `crate::...` path the code of `file` names, as (line number, path after
/// `crate::`); a group `crate::{a::b, c}` gives one path per member.
fn crate_paths(file: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(file).expect("a source file is readable");
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().last();
            rest = &rest[at + "crate::".len()..];
            // `remat_crate::`, say, is not this crate.
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for member in group[..end].split(',') {
                    let member = member.trim();
                    if !member.is_empty() {
                        out.push((n + 1, member.to_string()));
                    }
                }
                rest = &group[end..];
            } else {
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len());
                out.push((n + 1, rest[..end].trim_end_matches(':').to_string()));
                rest = &rest[end..];
            }
        }
    }
    out
}

/// The paths under `layer` (relative to `src/`) that name something `allowed` does not
/// allow, as `file:line: crate::path` lines.
fn violations(layer: &str, allowed: impl Fn(&str) -> bool) -> Vec<String> {
    let root = src();
    let mut out = Vec::new();
    for file in sources(&root.join(layer)) {
        for (line, path) in crate_paths(&file) {
            if !allowed(&path) {
                let name = file.strip_prefix(&root).unwrap_or(&file).display();
                out.push(format!("src/{name}:{line}: crate::{path}"));
            }
        }
    }
    out
}

/// Whether `path` (after `crate::`) is `module` or inside it.
fn under(path: &str, module: &str) -> bool {
    path == module || path.starts_with(&format!("{module}::"))
}

/// The bottom utilities every layer may use: they name nothing else of the crate.
const BOTTOM: [&str; 2] = ["stats::registry", "active"];

#[test]
fn the_bottom_utilities_name_nothing_else() {
    let mut found = violations("stats/registry.rs", |p| under(p, "stats::registry"));
    found.extend(violations("active.rs", |p| under(p, "active")));
    assert!(
        found.is_empty(),
        "bottom utilities import upward:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_graph_names_only_itself_and_the_bottom_utilities() {
    let found = violations("graph", |p| {
        under(p, "graph") || BOTTOM.iter().any(|m| under(p, m))
    });
    assert!(
        found.is_empty(),
        "graph/ imports a layer above it (it may name only graph and {BOTTOM:?}):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_planner_names_nothing_of_the_engine() {
    let found = violations("planner", |p| under(p, "planner"));
    assert!(
        found.is_empty(),
        "planner/ names the engine (it sees no tensor and no node):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_decisions_name_no_recording_backend_or_tensor() {
    let found = violations("checkpoint", |p| {
        !["ops", "backend", "tensor"].iter().any(|m| under(p, m))
    });
    assert!(
        found.is_empty(),
        "checkpoint/ imports the recording layer or above:\n{}",
        found.join("\n")
    );
}

/// The scanner itself: it finds plain paths and group members, and skips comments.
#[test]
fn the_scanner_finds_paths_and_groups() {
    let dir = std::env::temp_dir().join(format!("remat-layers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let file = dir.join("probe.rs");
    std::fs::write(
        &file,
        "use crate::graph::Node;\nuse crate::{ops::record, tensor};\n// crate::backend\n\
         let x = crate::checkpoint::budget::f(); // crate::planner\n",
    )
    .expect("a temporary file");
    let paths: Vec<String> = crate_paths(&file).into_iter().map(|(_, p)| p).collect();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(
        paths,
        [
            "graph::Node",
            "ops::record",
            "tensor",
            "checkpoint::budget::f"
        ]
    );
}
