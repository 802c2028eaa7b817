//! The engine's layers (ARCHITECTURE.md, "Layers"), checked on the sources: no file names a
//! file that names it back, directly or around a circle (`no_file_level_cycle`); each module
//! names only the modules its layer allows, which all sit below it; no two modules name each
//! other. Code only: comments, doc comments, string literals and `#[cfg(test)]` items are not
//! dependencies.
//!
//! A dependency is a path the code names: in a `use` tree (grouped and nested braces over
//! several lines, `pub use` re-exports included) or inline, starting at `crate::`, `super::`,
//! `self::`, a child module or a name a `use` bound. It is resolved to the file that defines
//! the item: a path through a re-export (`pub use child::X` in a `mod.rs`, or the crate root's)
//! is a dependency on the file that defines `X`, and the re-export itself is the re-exporting
//! file's dependency on that file. Naming a module only (`use super::exec;`) is no dependency
//! by itself: the paths that go through it are.

use std::collections::{BTreeMap, BTreeSet};
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

/// Every source file of the crate, by its path relative to `src/` (`graph/op.rs`).
fn crate_files() -> BTreeMap<String, String> {
    let root = src();
    sources(&root)
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).expect("a source file is readable");
            (relative(&root, &file), text)
        })
        .collect()
}

/// `file`'s path relative to `root`, with `/` separators.
fn relative(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).unwrap_or(file);
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

// ---------------------------------------------------------------------------------------------
// Reading a file: its code without comments, literals and test items; its paths.

/// `text` with comments (line, block, doc), the insides of string and char literals and every
/// `#[cfg(test)]` item blanked out; line breaks stay, so offsets keep their line numbers.
fn code_of(text: &str) -> Vec<char> {
    let src: Vec<char> = text.chars().collect();
    let mut out = src.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from..to.min(src.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < src.len() {
        let next = src.get(i + 1).copied();
        if src[i] == '/' && next == Some('/') {
            let end = (i..src.len())
                .find(|&j| src[j] == '\n')
                .unwrap_or(src.len());
            blank(&mut out, i, end);
            i = end;
        } else if src[i] == '/' && next == Some('*') {
            let (mut depth, mut j) = (1, i + 2);
            while j < src.len() && depth > 0 {
                if src[j] == '/' && src.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if src[j] == '*' && src.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if src[i] == 'r'
            && (i == 0 || !ident(src[i - 1]) || src[i - 1] == 'b')
            && matches!(next, Some('"' | '#'))
        {
            // A raw string `r#"..."#` (or a raw identifier `r#name`, left as it is).
            let hashes = src[i + 1..].iter().take_while(|&&c| c == '#').count();
            if src.get(i + 1 + hashes) != Some(&'"') {
                i += 1;
                continue;
            }
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let start = i + 2 + hashes;
            let end = (start..src.len())
                .find(|&j| src[j..].starts_with(&close))
                .unwrap_or(src.len());
            blank(&mut out, start, end);
            i = end + close.len();
        } else if src[i] == '"' {
            let mut j = i + 1;
            while j < src.len() && src[j] != '"' {
                j += if src[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i + 1, j);
            i = j + 1;
        } else if src[i] == '\'' {
            // A char literal ('x', '\n', '\u{1F600}'), not a lifetime ('a).
            let end = if next == Some('\\') {
                (i + 2..src.len()).find(|&j| src[j] == '\'')
            } else if src.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    blank(&mut out, i + 1, end);
                    i = end + 1;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    blank_test_items(&mut out);
    out
}

/// Blanks each `#[cfg(test)]` item: up to its first `;`, or through the block its first `{`
/// opens (a `mod tests { .. }`, a test-only function or statement).
fn blank_test_items(code: &mut [char]) {
    let attribute: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + attribute.len() <= code.len() {
        if !code[i..].starts_with(&attribute) {
            i += 1;
            continue;
        }
        let mut j = i + attribute.len();
        while j < code.len() && code[j] != ';' && code[j] != '{' {
            j += 1;
        }
        if j < code.len() && code[j] == '{' {
            let mut depth = 0;
            while j < code.len() {
                match code[j] {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                j += 1;
            }
        }
        let end = (j + 1).min(code.len());
        for c in &mut code[i..end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = end;
    }
}

/// A token of code: an identifier (or keyword) or one punctuation mark (`::` is one), with
/// its line.
#[derive(Clone, Debug, PartialEq)]
struct Token {
    text: String,
    line: usize,
}

fn tokens(code: &[char]) -> Vec<Token> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < code.len() {
        let c = code[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < code.len() && (code[i].is_alphanumeric() || code[i] == '_') {
                i += 1;
            }
            let text: String = code[start..i].iter().collect();
            out.push(Token { text, line });
        } else if c == ':' && code.get(i + 1) == Some(&':') {
            out.push(Token {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                text: c.to_string(),
                line,
            });
            i += 1;
        }
    }
    out
}

fn is_ident(text: &str) -> bool {
    text.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// One leaf of a `use` tree: the path as written (`super::op::Values`), the name it binds
/// (`Values`, or its alias; `None` for a glob or `as _`), whether it is a re-export
/// (`pub`, `pub(crate)`, `pub(super)`) and its line.
#[derive(Clone, Debug, PartialEq)]
struct UseLeaf {
    path: Vec<String>,
    binds: Option<String>,
    glob: bool,
    reexport: bool,
    line: usize,
}

/// What a file's code names: the leaves of its `use` trees, its inline paths of two or more
/// segments (as written, with their lines) and the child modules it declares.
#[derive(Debug, Default)]
struct Scan {
    uses: Vec<UseLeaf>,
    inline: Vec<(usize, Vec<String>)>,
    children: Vec<String>,
}

fn scan(text: &str) -> Scan {
    let toks = tokens(&code_of(text));
    let mut scan = Scan::default();
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i].text;
        let prev = i.checked_sub(1).map(|p| toks[p].text.as_str());
        if t == "use" && toks.get(i + 1).is_some_and(|n| n.text != "<") && prev != Some("+") {
            let reexport = prev == Some("pub")
                || (prev == Some(")")
                    && i >= 4
                    && toks[i - 4].text == "pub"
                    && toks[i - 3].text == "(");
            let end = (i..toks.len())
                .find(|&j| toks[j].text == ";")
                .unwrap_or(toks.len());
            use_tree(&toks[i + 1..end], &[], reexport, &mut scan.uses);
            i = end + 1;
        } else if t == "mod"
            && toks
                .get(i + 2)
                .is_some_and(|n| n.text == ";" || n.text == "{")
            && toks.get(i + 1).is_some_and(|n| is_ident(&n.text))
        {
            scan.children.push(toks[i + 1].text.clone());
            i += 2;
        } else if is_ident(t)
            && prev != Some("::")
            && toks.get(i + 1).is_some_and(|n| n.text == "::")
        {
            let line = toks[i].line;
            let mut path = vec![t.clone()];
            let mut j = i + 1;
            while toks.get(j).is_some_and(|n| n.text == "::")
                && toks.get(j + 1).is_some_and(|n| is_ident(&n.text))
            {
                path.push(toks[j + 1].text.clone());
                j += 2;
            }
            if path.len() > 1 {
                scan.inline.push((line, path));
            }
            i = j;
        } else {
            i += 1;
        }
    }
    scan
}

/// The leaves of the `use` tree `toks` (after `use`, before `;`) under `prefix`.
fn use_tree(toks: &[Token], prefix: &[String], reexport: bool, out: &mut Vec<UseLeaf>) {
    // Split at the commas outside braces.
    let mut depth = 0;
    let mut start = 0;
    let mut items = Vec::new();
    for (k, t) in toks.iter().enumerate() {
        match t.text.as_str() {
            "{" => depth += 1,
            "}" => depth -= 1,
            "," if depth == 0 => {
                items.push(&toks[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    items.push(&toks[start..]);
    for item in items.into_iter().filter(|item| !item.is_empty()) {
        let mut path = prefix.to_vec();
        let mut k = 0;
        // A leading `::` (an extern crate path) adds nothing.
        while k < item.len() {
            let text = item[k].text.as_str();
            if text == "::" {
                k += 1;
            } else if text == "{" {
                let inner = &item[k + 1..item.len() - 1];
                use_tree(inner, &path, reexport, out);
                break;
            } else if text == "*" {
                out.push(UseLeaf {
                    path: path.clone(),
                    binds: None,
                    glob: true,
                    reexport,
                    line: item[k].line,
                });
                break;
            } else if is_ident(text) {
                let line = item[k].line;
                let last = text.to_string();
                let more = item.get(k + 1).is_some_and(|n| n.text == "::");
                if more {
                    path.push(last);
                    k += 1;
                    continue;
                }
                let alias = (item.get(k + 1).is_some_and(|n| n.text == "as"))
                    .then(|| item.get(k + 2).map(|n| n.text.clone()))
                    .flatten();
                let binds = match alias.as_deref() {
                    Some("_") => None,
                    Some(alias) => Some(alias.to_string()),
                    None if last == "self" => path.last().cloned(),
                    None => Some(last.clone()),
                };
                if last != "self" {
                    path.push(last);
                }
                out.push(UseLeaf {
                    path: path.clone(),
                    binds,
                    glob: false,
                    reexport,
                    line,
                });
                break;
            } else {
                k += 1;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Resolving paths to files: the file-level graph.

/// A file's module path: `graph/op.rs` is `graph::op`, `graph/mod.rs` is `graph`, `lib.rs`
/// the crate root.
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// One dependency: `from` names what `to` defines, at `line`, by `path` (as written).
#[derive(Clone, Debug, PartialEq)]
struct Edge {
    from: String,
    to: String,
    line: usize,
    path: String,
}

/// A crate's files, scanned, with the file of each module.
struct Crate {
    modules: BTreeMap<Vec<String>, String>,
    scans: BTreeMap<String, Scan>,
}

/// How deep re-exports and `use` bindings are followed (a guard against a loop of them).
const MAX_HOPS: usize = 16;

impl Crate {
    /// `files`: each source file's text by its path relative to `src/`.
    fn new(files: &BTreeMap<String, String>) -> Self {
        Crate {
            modules: files
                .keys()
                .map(|rel| (module_path(rel), rel.clone()))
                .collect(),
            scans: files
                .iter()
                .map(|(rel, text)| (rel.clone(), scan(text)))
                .collect(),
        }
    }

    /// The `use` leaf of `file` that binds `name`.
    fn binding(&self, file: &str, name: &str) -> Option<&UseLeaf> {
        self.scans[file]
            .uses
            .iter()
            .find(|leaf| leaf.binds.as_deref() == Some(name))
    }

    /// `path`, as written in `file`, from the crate root; `None` for another crate's path
    /// (or a name the file does not bind).
    fn absolute(&self, file: &str, path: &[String], hops: usize) -> Option<Vec<String>> {
        let here = module_path(file);
        let first = path.first()?;
        let (base, rest) = match first.as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (here, &path[1..]),
            "super" => {
                let ups = path.iter().take_while(|s| *s == "super").count();
                let keep = here.len().checked_sub(ups)?;
                (here[..keep].to_vec(), &path[ups..])
            }
            name => {
                let mut child = here.clone();
                child.push(name.to_string());
                if self.modules.contains_key(&child) {
                    (child, &path[1..])
                } else {
                    let leaf = self.binding(file, name).filter(|_| hops < MAX_HOPS)?;
                    (self.absolute(file, &leaf.path, hops + 1)?, &path[1..])
                }
            }
        };
        let mut out = base;
        out.extend(rest.iter().cloned());
        Some(out)
    }

    /// The file that defines what the absolute `path` names, and whether `path` names a
    /// module only; `None` for another crate's item re-exported here. A name a module's file
    /// binds by `use` (a re-export, or a private import its children see) is followed to the
    /// file that defines it.
    fn locate(&self, path: &[String], hops: usize) -> Option<(String, bool)> {
        let mut module: Vec<String> = Vec::new();
        for (at, segment) in path.iter().enumerate() {
            let file = &self.modules[&module];
            let mut child = module.clone();
            child.push(segment.clone());
            let last = at + 1 == path.len();
            // A module, unless it is the last segment and its parent also binds the name
            // (`pub use stats::stats` at the root: `crate::stats` is then also a function).
            if self.modules.contains_key(&child) && !(last && self.binding(file, segment).is_some())
            {
                module = child;
                continue;
            }
            return match self.binding(file, segment) {
                Some(leaf) if hops < MAX_HOPS => {
                    let mut target = self.absolute(file, &leaf.path, hops + 1)?;
                    target.extend(path[at + 1..].iter().cloned());
                    self.locate(&target, hops + 1)
                }
                _ => Some((file.clone(), false)),
            };
        }
        Some((self.modules[&module].clone(), true))
    }

    /// Every dependency of `file` on another file of the crate, one per file named (its first
    /// line).
    fn edges_of(&self, file: &str) -> Vec<Edge> {
        let scan = &self.scans[file];
        let mut named: Vec<(usize, &[String], bool)> = scan
            .uses
            .iter()
            .map(|leaf| (leaf.line, leaf.path.as_slice(), leaf.glob))
            .collect();
        named.extend(
            scan.inline
                .iter()
                .map(|(line, path)| (*line, path.as_slice(), false)),
        );
        named.sort_by_key(|(line, _, _)| *line);
        let mut out: Vec<Edge> = Vec::new();
        for (line, path, glob) in named {
            let Some(absolute) = self.absolute(file, path, 0) else {
                continue;
            };
            let Some((to, module_only)) = self.locate(&absolute, 0) else {
                continue;
            };
            if (module_only && !glob) || to == file || out.iter().any(|e| e.to == to) {
                continue;
            }
            out.push(Edge {
                from: file.to_string(),
                to,
                line,
                path: path.join("::"),
            });
        }
        out
    }

    fn edges(&self) -> Vec<Edge> {
        self.scans
            .keys()
            .flat_map(|file| self.edges_of(file))
            .collect()
    }
}

/// The groups of files that name each other around a circle (strongly connected, two or
/// more files), each with one circle through its first file, as edges.
fn cycles(edges: &[Edge]) -> Vec<(Vec<String>, Vec<Edge>)> {
    let mut next: BTreeMap<&str, Vec<&Edge>> = BTreeMap::new();
    for edge in edges {
        next.entry(edge.from.as_str()).or_default().push(edge);
    }
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(file) = stack.pop() {
            for edge in next.get(file.as_str()).into_iter().flatten() {
                if seen.insert(edge.to.clone()) {
                    stack.push(edge.to.clone());
                }
            }
        }
        seen
    };
    let files: BTreeSet<&str> = edges.iter().map(|e| e.from.as_str()).collect();
    let reached: BTreeMap<&str, BTreeSet<String>> = files.iter().map(|f| (*f, reach(f))).collect();
    let mut grouped = BTreeSet::new();
    let mut out = Vec::new();
    for file in &files {
        if grouped.contains(*file) || !reached[file].contains(*file) {
            continue;
        }
        let group: Vec<String> = reached[file]
            .iter()
            .filter(|other| {
                reached
                    .get(other.as_str())
                    .is_some_and(|r| r.contains(*file))
            })
            .cloned()
            .collect();
        grouped.extend(group.iter().cloned());
        // The shortest circle from `file` back to it, inside the group.
        let mut came: BTreeMap<String, &Edge> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([file.to_string()]);
        'search: while let Some(at) = queue.pop_front() {
            for edge in next.get(at.as_str()).into_iter().flatten() {
                if !group.contains(&edge.to) || came.contains_key(&edge.to) {
                    continue;
                }
                came.insert(edge.to.clone(), edge);
                if edge.to == *file {
                    break 'search;
                }
                queue.push_back(edge.to.clone());
            }
        }
        let mut circle = Vec::new();
        let mut at = file.to_string();
        while let Some(edge) = came.get(&at) {
            circle.push((*edge).clone());
            at = edge.from.clone();
            if at == *file {
                break;
            }
        }
        circle.reverse();
        out.push((group, circle));
    }
    out
}

/// The crate's file-level graph.
fn crate_edges() -> Vec<Edge> {
    Crate::new(&crate_files()).edges()
}

/// No file names, directly or through others, a file that names it back: each file can be
/// read knowing only the files below it. A `mod.rs` that re-exports its children depends on
/// them, so it defines nothing its children use.
#[test]
fn no_file_level_cycle() {
    let edges = crate_edges();
    let step = |e: &Edge| format!("  src/{}:{}: {} -> src/{}", e.from, e.line, e.path, e.to);
    let found: Vec<String> = cycles(&edges)
        .into_iter()
        .map(|(group, circle)| {
            let around: Vec<String> = circle.iter().map(step).collect();
            let inside: Vec<String> = edges
                .iter()
                .filter(|e| group.contains(&e.from) && group.contains(&e.to))
                .map(step)
                .collect();
            format!(
                "files {group:?}, around:\n{}\nall their edges among them:\n{}",
                around.join("\n"),
                inside.join("\n")
            )
        })
        .collect();
    assert!(
        found.is_empty(),
        "files that name each other around a circle (ARCHITECTURE.md, \"Layers\"):\n{}",
        found.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// The modules' layers.

/// The engine's modules, as the layers see them (ARCHITECTURE.md, "Layers"), each with the
/// source it covers (relative to `src/`, a file or a folder) and the modules it may name
/// besides itself. Bottom first; every module names only modules listed before it, so the
/// table itself has no cycle (`the_allowed_imports_have_no_cycle`).
const MODULES: [(&str, &str, &[&str]); 12] = [
    // The bottom utilities: the counters (the graph counts what it keeps), the plain items
    // of the reports (which the budget fills in), and is_active().
    ("active", "active.rs", &[]),
    ("counters", "counters.rs", &[]),
    ("report_items", "report_items.rs", &[]),
    // The graph, the op trait, retrieval, Gradients, the traversal.
    ("graph", "graph", &["active", "counters"]),
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
            "counters",
            "report_items",
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
            "counters",
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
            "counters",
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
            "counters",
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
        "stats.rs",
        &[
            "active",
            "counters",
            "report_items",
            "graph",
            "grads",
            "planner",
            "checkpoint",
        ],
    ),
];

/// The table's module that covers `file` (relative to `src/`); `None` for `lib.rs`.
fn module_of(file: &str) -> Option<&'static str> {
    MODULES
        .iter()
        .find(|(_, source, _)| {
            file == *source
                || file
                    .strip_prefix(source)
                    .is_some_and(|r| r.starts_with('/'))
        })
        .map(|(name, _, _)| *name)
}

/// The modules' dependencies, as (module, module named, `file:line: path -> file`).
fn module_edges() -> Vec<(&'static str, Option<&'static str>, String)> {
    crate_edges()
        .into_iter()
        .filter_map(|e| {
            let from = module_of(&e.from)?;
            let at = format!("src/{}:{}: {} -> src/{}", e.from, e.line, e.path, e.to);
            Some((from, module_of(&e.to), at))
        })
        .collect()
}

#[test]
fn every_module_names_only_what_its_layer_allows() {
    let mut found = Vec::new();
    for (module, named, at) in module_edges() {
        let (_, _, allowed) = MODULES
            .iter()
            .find(|(name, _, _)| *name == module)
            .expect("a module of the table");
        let fine = named.is_some_and(|named| named == module || allowed.contains(&named));
        if !fine {
            found.push(format!("{module} (may name {allowed:?}): {at}"));
        }
    }
    assert!(
        found.is_empty(),
        "a module names a module its layer does not allow (ARCHITECTURE.md, \"Layers\"; \
         naming an item `lib.rs` defines counts too):\n{}",
        found.join("\n")
    );
}

/// The scan covers every source file of the crate but `lib.rs` (crate docs and re-exports,
/// which may name everything).
#[test]
fn the_table_covers_every_source_file() {
    let missing: Vec<String> = crate_files()
        .into_keys()
        .filter(|file| file != "lib.rs" && module_of(file).is_none())
        .collect();
    assert!(missing.is_empty(), "sources no module covers: {missing:?}");
    for (name, source, _) in MODULES {
        assert!(src().join(source).exists(), "{name}: no src/{source}");
    }
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
    for (module, named, _) in module_edges() {
        if let Some(named) = named
            && named != module
            && !edges.contains(&(module, named))
        {
            edges.push((module, named));
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

/// The parser itself: grouped imports over several lines with nested braces, aliases,
/// `super::`, `self::` and child paths, re-exports; comments, doc comments, strings and test
/// items name nothing.
#[test]
fn the_parser_reads_use_trees_and_inline_paths() {
    let text = "//! Docs naming crate::ops.\n\
        mod child;\n\
        pub(crate) use child::{Item, deep::{Inner as Alias, self}};\n\
        use crate::{\n    graph::{Node,\n        op::Rule},\n    stats::*,\n};\n\
        pub use super::up::Thing;\n\
        fn f() { let s = \"crate::backend\"; let c = '{'; // crate::planner\n\
        self::local(); crate::tensor::make::<u8>(); child::run(); Alias::new(); }\n\
        #[cfg(test)]\nmod tests { use crate::leaves::X; fn g() { crate::active::y(); } }\n\
        /* crate::leaves */ fn h<'a>(x: &'a str) { super::sibling::call(x); }\n";
    let scan = scan(text);
    let leaves: Vec<(String, Option<&str>, bool, bool, usize)> = scan
        .uses
        .iter()
        .map(|l| {
            (
                l.path.join("::"),
                l.binds.as_deref(),
                l.glob,
                l.reexport,
                l.line,
            )
        })
        .collect();
    assert_eq!(
        leaves,
        [
            ("child::Item".to_string(), Some("Item"), false, true, 3),
            (
                "child::deep::Inner".to_string(),
                Some("Alias"),
                false,
                true,
                3
            ),
            ("child::deep".to_string(), Some("deep"), false, true, 3),
            (
                "crate::graph::Node".to_string(),
                Some("Node"),
                false,
                false,
                5
            ),
            (
                "crate::graph::op::Rule".to_string(),
                Some("Rule"),
                false,
                false,
                6
            ),
            ("crate::stats".to_string(), None, true, false, 7),
            (
                "super::up::Thing".to_string(),
                Some("Thing"),
                false,
                true,
                9
            ),
        ]
    );
    let inline: Vec<(usize, String)> = scan
        .inline
        .iter()
        .map(|(line, path)| (*line, path.join("::")))
        .collect();
    assert_eq!(
        inline,
        [
            (11, "self::local".to_string()),
            (11, "crate::tensor::make".to_string()),
            (11, "child::run".to_string()),
            (11, "Alias::new".to_string()),
            (14, "super::sibling::call".to_string()),
        ]
    );
    assert_eq!(scan.children, ["child"]);
}

/// Resolution: a path through a `mod.rs`'s re-export is a dependency on the file that
/// defines the item, the re-export is the `mod.rs`'s dependency on it, and naming a module
/// alone is none; so a `mod.rs` that re-exports a child's item another child uses makes no
/// cycle, while one that defines an item its re-exported child uses does.
#[test]
fn a_path_through_a_reexport_names_the_defining_file() {
    let files: BTreeMap<String, String> = [
        ("lib.rs", "mod a;\nmod b;\npub use a::Thing;\n"),
        (
            "a/mod.rs",
            "mod item;\nmod user;\npub use item::Thing;\npub struct Own;\n",
        ),
        ("a/item.rs", "pub struct Thing;\n"),
        (
            "a/user.rs",
            "use super::{\n    Thing,\n};\nfn f() { let _ = super::Own; }\n",
        ),
        (
            "b.rs",
            "use crate::a;\nfn g() { let _ = a::Thing; let _ = crate::Thing; }\n",
        ),
    ]
    .into_iter()
    .map(|(file, text)| (file.to_string(), text.to_string()))
    .collect();
    let edges: Vec<(String, String, usize)> = Crate::new(&files)
        .edges()
        .into_iter()
        .map(|e| (e.from, e.to, e.line))
        .collect();
    let edge = |from: &str, to: &str, line| (from.to_string(), to.to_string(), line);
    assert_eq!(
        edges,
        [
            edge("a/mod.rs", "a/item.rs", 3),
            edge("a/user.rs", "a/item.rs", 2),
            edge("a/user.rs", "a/mod.rs", 4),
            edge("b.rs", "a/item.rs", 2),
            edge("lib.rs", "a/item.rs", 3),
        ]
    );
    assert!(cycles(&edges_of(&files)).is_empty());
    // `a/mod.rs` re-exporting `user.rs`, which names `Own` defined in `a/mod.rs`: a circle.
    let mut files = files;
    files.insert(
        "a/mod.rs".into(),
        "mod item;\nmod user;\npub use item::Thing;\npub use user::f;\npub struct Own;\n".into(),
    );
    let found = cycles(&edges_of(&files));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, ["a/mod.rs", "a/user.rs"]);
    let circle: Vec<(&str, usize)> = found[0]
        .1
        .iter()
        .map(|e| (e.from.as_str(), e.line))
        .collect();
    assert_eq!(circle, [("a/mod.rs", 4), ("a/user.rs", 4)]);
}

fn edges_of(files: &BTreeMap<String, String>) -> Vec<Edge> {
    Crate::new(files).edges()
}
