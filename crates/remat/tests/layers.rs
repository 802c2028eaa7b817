//! The engine's layers (ARCHITECTURE.md, "Layers"), checked on the sources: each module
//! names only the modules its layer allows, which all sit below it, and no two modules name
//! each other. Code only: comments and doc comments are not dependencies.

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

/// Whether `path` (after `crate::`) is `module` or inside it.
fn under(path: &str, module: &str) -> bool {
    path == module || path.starts_with(&format!("{module}::"))
}

/// The engine's modules, as the layers see them (ARCHITECTURE.md, "Layers"), each with the
/// source it covers (relative to `src/`, a file or a folder) and the modules it may name
/// besides itself. Bottom first; every module names only modules listed before it, so the
/// table itself has no cycle (`the_allowed_imports_have_no_cycle`).
const MODULES: [(&str, &str, &[&str]); 12] = [
    // The bottom utilities: the counting part of the statistics, the plain items of the
    // reports (which the budget fills in), and is_active().
    ("active", "active.rs", &[]),
    ("stats::registry", "stats/registry.rs", &[]),
    ("stats::report", "stats/report.rs", &[]),
    // The graph, the op trait, retrieval, Gradients, the traversal.
    ("graph", "graph", &["active", "stats::registry"]),
    // `src/grads.rs` re-exports graph/grads.rs at Burn's path.
    ("grads", "grads.rs", &["graph"]),
    // A leaf's complete gradient handed out during a pass (NOTE [complete-leaves]).
    ("leaves", "leaves.rs", &["graph", "grads"]),
    // Tensor-free planning: names nothing of the engine.
    ("planner", "planner", &[]),
    // Decisions and the budget's engine side.
    (
        "checkpoint",
        "checkpoint",
        &[
            "active",
            "stats::registry",
            "stats::report",
            "graph",
            "grads",
            "planner",
        ],
    ),
    // The float tensor primitive; it gives backward its hooks.
    (
        "tensor",
        "tensor.rs",
        &[
            "active",
            "stats::registry",
            "graph",
            "grads",
            "leaves",
            "checkpoint",
        ],
    ),
    // The op families and the one recording site.
    (
        "ops",
        "ops",
        &[
            "active",
            "stats::registry",
            "graph",
            "grads",
            "planner",
            "checkpoint",
            "tensor",
        ],
    ),
    // Burn's traits, over the op families.
    (
        "backend",
        "backend",
        &[
            "active",
            "stats::registry",
            "graph",
            "grads",
            "checkpoint",
            "tensor",
            "ops",
        ],
    ),
    // The reports: stats(), saved_values(); they ask the budget what ran.
    (
        "stats",
        "stats/mod.rs",
        &[
            "active",
            "stats::registry",
            "stats::report",
            "graph",
            "grads",
            "planner",
            "checkpoint",
        ],
    ),
];

/// The module a `crate::` path names: its first segment, except that `stats::registry` and
/// the registry's re-exports are the bottom utility, and the crate root's re-exports are
/// their modules'. `None` for a root item this table does not know.
fn module_of(path: &str) -> Option<&'static str> {
    if under(path, "stats::registry") || under(path, "stats::KeepReason") {
        return Some("stats::registry");
    }
    if under(path, "stats::report")
        || under(path, "stats::DroppedValue")
        || under(path, "stats::format_bytes")
    {
        return Some("stats::report");
    }
    if under(path, "is_active") {
        return Some("active");
    }
    let first = path.split("::").next().unwrap_or(path);
    MODULES
        .iter()
        .map(|(name, _, _)| *name)
        .find(|name| *name == first)
}

/// Every module's `crate::` paths, as (module named, `file:line: crate::path`).
fn names_of(module: &str) -> Vec<(Option<&'static str>, String)> {
    let (_, source, _) = MODULES
        .iter()
        .find(|(name, _, _)| *name == module)
        .expect("a module of the table");
    let root = src();
    let mut out = Vec::new();
    for file in sources(&root.join(source)) {
        for (line, path) in crate_paths(&file) {
            let name = file.strip_prefix(&root).unwrap_or(&file).display();
            out.push((
                module_of(&path),
                format!("src/{name}:{line}: crate::{path}"),
            ));
        }
    }
    out
}

#[test]
fn every_module_names_only_what_its_layer_allows() {
    let mut found = Vec::new();
    for (module, _, allowed) in MODULES {
        for (named, at) in names_of(module) {
            let fine = match named {
                Some(named) => named == module || allowed.contains(&named),
                None => false,
            };
            if !fine {
                found.push(format!("{module} (may name {allowed:?}): {at}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "a module names a module its layer does not allow (ARCHITECTURE.md, \"Layers\"; a \
         root item unknown to `module_of` counts too):\n{}",
        found.join("\n")
    );
}

/// The scan covers every source file of the crate but `lib.rs` (crate docs and re-exports,
/// which may name everything).
#[test]
fn the_table_covers_every_source_file() {
    let root = src();
    let covered: Vec<PathBuf> = MODULES
        .iter()
        .flat_map(|(_, source, _)| sources(&root.join(source)))
        .collect();
    let missing: Vec<String> = sources(&root)
        .into_iter()
        .filter(|file| !file.ends_with("lib.rs") && !covered.contains(file))
        .map(|file| file.display().to_string())
        .collect();
    assert!(missing.is_empty(), "sources no module covers: {missing:?}");
}

#[test]
fn the_allowed_imports_have_no_cycle() {
    for (at, (module, _, allowed)) in MODULES.iter().enumerate() {
        for named in *allowed {
            let below = MODULES[..at].iter().any(|(name, _, _)| name == named);
            assert!(below, "{module} may name {named}, which is not below it");
        }
    }
}

/// The module graph the sources make (who names whom) has no two modules naming each other.
#[test]
fn no_two_modules_name_each_other() {
    let mut edges = Vec::new();
    for (module, _, _) in MODULES {
        for (named, _) in names_of(module) {
            if let Some(named) = named
                && named != module
                && !edges.contains(&(module, named))
            {
                edges.push((module, named));
            }
        }
    }
    let mut cycles: Vec<String> = edges
        .iter()
        .filter(|(a, b)| a < b && edges.contains(&(*b, *a)))
        .map(|(a, b)| format!("{a} <-> {b}"))
        .collect();
    cycles.sort();
    assert!(
        cycles.is_empty(),
        "modules that name each other: {cycles:?}"
    );
}

/// The only `unsafe` code is in the distributed hooks, where Burn's contracts require it
/// (ARCHITECTURE.md, "Architecture invariants"); no `unsafe impl Send/Sync` anywhere.
#[test]
fn unsafe_code_is_only_in_the_distributed_hooks() {
    let root = src();
    let mut found = Vec::new();
    let mut in_hooks = 0;
    for file in sources(&root) {
        let text = std::fs::read_to_string(&file).expect("a source file is readable");
        for (n, line) in text.lines().enumerate() {
            let code = line.find("//").map_or(line, |at| &line[..at]);
            let words = code.split(|c: char| !(c.is_alphanumeric() || c == '_'));
            if !words.into_iter().any(|w| w == "unsafe") {
                continue;
            }
            if file.ends_with("backend/distributed.rs") && !code.contains("unsafe impl") {
                in_hooks += 1;
            } else {
                let name = file.strip_prefix(&root).unwrap_or(&file).display();
                found.push(format!("src/{name}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "unsafe code outside the distributed hooks:\n{}",
        found.join("\n")
    );
    // The scan sees the hooks' own blocks (so it would see others).
    assert!(
        in_hooks > 0,
        "no unsafe found in backend/distributed.rs: is the scan broken?"
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
