//! The house rules of the source tree, read from the files themselves: the
//! top-level modules of src/ import one another without a cycle, planning
//! (src/compile/) knows nothing of running (`exec`) or of the run's state
//! (`state`), running does not reach into planning, and the command line
//! (src/cli/) is the `okstra` binary's, not the library's.
//!
//! A module is a top-level file or directory of src/ (`src/x.rs` and
//! `src/x/**` are module `x`); an import is a `crate::x` path (also inside a
//! `crate::{..}` group, and `$crate::x` in a macro) or a `super::` path that
//! climbs to the crate root. Comment lines are skipped, and so is a file's
//! rest from its first `#[cfg(test)]`: tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every `.rs` file under src/, named relative to src/ with `/`, and its text.
fn sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    let mut todo = vec![src.clone()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(&src).unwrap();
                let name = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/");
                out.push((name, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// The module path of the file `name` (relative to src/): `exec/run.rs` is
/// `[exec, run]`, `exec/mod.rs` is `[exec]`; the crate roots (lib.rs,
/// main.rs) and the other binaries (bin/) are no module.
fn module_path(name: &str) -> Option<Vec<String>> {
    if matches!(name, "lib.rs" | "main.rs") || name.starts_with("bin/") {
        return None;
    }
    let mut parts: Vec<String> = name
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if parts.len() > 1 && parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    Some(parts)
}

/// The code of a file the rules read: comment lines dropped (and a
/// comment after code, from ` //`), nothing from the first `#[cfg(test)]`.
fn code_of(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            break;
        }
        if trimmed.starts_with("//") || trimmed.starts_with("/*") || trimmed.starts_with('*') {
            continue;
        }
        let code = line.find(" //").map_or(line, |at| &line[..at]);
        out.push((i + 1, code.to_string()));
    }
    out
}

/// The first identifier of `s`, if it starts with one.
fn ident(s: &str) -> Option<&str> {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

/// The top-level modules a file at `module` imports, each with the line
/// that does. Only names in `modules` count (`crate::VERSION` is no module).
fn imports(module: &[String], text: &str, modules: &BTreeSet<String>) -> Vec<(String, usize)> {
    let lines = code_of(text);
    // One string, so that a `crate::{..}` group may span lines; each byte
    // knows its line.
    let mut joined = String::new();
    let mut line_at = Vec::new();
    for (n, l) in &lines {
        joined.push_str(l);
        joined.push('\n');
        line_at.resize(joined.len(), *n);
    }
    let mut found = Vec::new();
    let mut named = |name: &str, at: usize| {
        if modules.contains(name) {
            found.push((name.to_string(), line_at[at]));
        }
    };
    let bytes = joined.as_bytes();
    let word_start =
        |at: usize| at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
    for (at, _) in joined.match_indices("crate::") {
        if !word_start(at) {
            continue;
        }
        let rest = &joined[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The names at the group's top level: `crate::{a, b::c, d::{e}}`.
            let mut depth = 0;
            let mut expect_name = true;
            for (off, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => expect_name = true,
                    c if c.is_whitespace() => {}
                    _ if expect_name && depth == 0 => {
                        if let Some(name) = ident(&group[off..]) {
                            named(name, at);
                        }
                        expect_name = false;
                    }
                    _ => {}
                }
            }
        } else if let Some(name) = ident(rest) {
            named(name, at);
        }
    }
    // `super::super::x` from a module deep enough climbs to the root.
    for (at, _) in joined.match_indices("super::") {
        if !word_start(at) || joined[..at].ends_with("super::") {
            continue;
        }
        let mut rest = &joined[at..];
        let mut climbs = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            climbs += 1;
            rest = r;
        }
        if climbs == module.len() {
            if let Some(name) = ident(rest) {
                named(name, at);
            }
        }
    }
    found
}

/// Who imports whom: `from -> to -> where` (a file and line that does).
type Graph = BTreeMap<String, BTreeMap<String, String>>;

fn graph_of(files: &[(String, String)]) -> Graph {
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|(name, _)| module_path(name))
        .map(|path| path[0].clone())
        .collect();
    let mut graph = Graph::new();
    for (name, text) in files {
        let Some(module) = module_path(name) else {
            continue;
        };
        let from = &module[0];
        let edges = graph.entry(from.clone()).or_default();
        for (to, line) in imports(&module, text, &modules) {
            if &to != from {
                edges
                    .entry(to)
                    .or_insert_with(|| format!("src/{name}:{line}"));
            }
        }
    }
    graph
}

/// A cycle of `graph`, as the modules met along it (the first again at
/// the end), each step with where it is made; `None` if there is none.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        graph: &Graph,
        at: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(from) = path.iter().position(|m| m == at) {
            let mut steps = path[from..].to_vec();
            steps.push(at.to_string());
            return Some(steps);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_string());
        for to in graph.get(at).into_iter().flat_map(|edges| edges.keys()) {
            if let Some(found) = visit(graph, to, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(at.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(graph, m, &mut Vec::new(), &mut done))
}

/// A cycle said with the import that makes each of its steps.
fn said(graph: &Graph, steps: &[String]) -> String {
    let mut out = steps.join(" -> ");
    for pair in steps.windows(2) {
        out.push_str(&format!(
            "\n  {} -> {}: {}",
            pair[0], pair[1], graph[&pair[0]][&pair[1]]
        ));
    }
    out
}

#[test]
fn the_top_level_modules_import_one_another_without_a_cycle() {
    let graph = graph_of(&sources());
    assert!(graph.contains_key("exec") && graph.contains_key("compile"));
    if let Some(steps) = cycle(&graph) {
        panic!("an import cycle: {}", said(&graph, &steps));
    }
}

#[test]
fn planning_knows_nothing_of_running_and_running_does_not_reach_into_planning() {
    let graph = graph_of(&sources());
    let mut wrong = Vec::new();
    for (from, to) in [
        ("compile", "exec"),
        ("compile", "state"),
        ("exec", "compile"),
    ] {
        if let Some(at) = graph.get(from).and_then(|edges| edges.get(to)) {
            wrong.push(format!("{from} imports {to}: {at}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The line of `lib` that declares a `cli` module (`mod cli;`, public or
/// not, or `mod cli {..}`), if one does.
fn declares_cli(lib: &str) -> Option<String> {
    code_of(lib).into_iter().map(|(_, l)| l).find(|l| {
        let words: Vec<&str> = l
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        words.windows(2).any(|w| w == ["mod", "cli"])
    })
}

#[test]
fn the_command_line_is_the_binarys_not_the_librarys() {
    let (_, lib) = sources()
        .into_iter()
        .find(|(name, _)| name == "lib.rs")
        .unwrap();
    let declared = declares_cli(&lib);
    assert!(
        declared.is_none(),
        "src/lib.rs declares the cli module: {declared:?}"
    );
    assert!(declares_cli("pub mod cli;\n").is_some());
    assert!(declares_cli("pub(crate) mod cli;\n").is_some());
    assert!(declares_cli("//! not `mod cli`\npub mod client;\n").is_none());
}

/// The rules above can fail: a graph read from made-up files, with a cycle
/// through a group import, a `super::` climb and a macro's `$crate`.
#[test]
fn a_made_up_cycle_is_found_and_named() {
    let files: Vec<(String, String)> = [
        ("a.rs", "use crate::{b::One, plan};\n"),
        ("b/mod.rs", "// use crate::d; (a comment)\nmod deep;\n"),
        ("b/deep.rs", "fn f() { super::super::c::go() }\n"),
        ("c.rs", "macro_rules! m { () => { $crate::a::x() } }\n"),
        ("d.rs", "#[cfg(test)]\nmod tests { use crate::a; }\n"),
        ("plan.rs", "pub const VERSION: u32 = crate::VERSION;\n"),
        ("lib.rs", "pub mod a;\n"),
    ]
    .iter()
    .map(|(n, t)| (n.to_string(), t.to_string()))
    .collect();
    let graph = graph_of(&files);
    let steps = cycle(&graph).expect("the cycle a -> b -> c -> a");
    assert_eq!(steps, ["a", "b", "c", "a"]);
    let text = said(&graph, &steps);
    assert!(text.contains("b -> c: src/b/deep.rs:1"), "{text}");
    assert!(graph["d"].is_empty(), "a test module's import counted");
    assert!(!graph["b"].contains_key("d"), "a comment counted");
    assert!(graph["plan"].is_empty(), "crate::VERSION is no module");
}

/// A file's product code: its lines up to the first `#[cfg(test)]` at the
/// start of a line that opens a test module (none of a `tests.rs`).
fn product_lines<'a>(name: &str, text: &'a str) -> Vec<&'a str> {
    if name.ends_with("/tests.rs") {
        return Vec::new();
    }
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| w[0] == "#[cfg(test)]" && w[1].trim_start().starts_with("mod "))
        .unwrap_or(lines.len());
    lines[..end].to_vec()
}

/// Each function of the product code longer than `limit` lines, counted
/// from its `fn` line to its closing brace at the same indent, comments
/// and blank lines included: `file:line name (lines)`.
fn long_functions(name: &str, text: &str, limit: usize) -> Vec<String> {
    let lines = product_lines(name, text);
    let mut long = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = &line[..line.len() - line.trim_start().len()];
        let rest = line.trim_start();
        let rest = rest
            .strip_prefix("pub ")
            .or_else(|| rest.strip_prefix("pub(crate) "))
            .or_else(|| rest.strip_prefix("pub(super) "))
            .unwrap_or(rest);
        let rest = rest.strip_prefix("const ").unwrap_or(rest);
        let Some(fn_name) = rest.strip_prefix("fn ").and_then(ident) else {
            i += 1;
            continue;
        };
        // The body opens where the signature ends; a declaration has none.
        let Some(open) = (i..lines.len()).find(|&j| {
            let l = lines[j].trim_end();
            l.ends_with('{') || l.ends_with(';')
        }) else {
            break;
        };
        if lines[open].trim_end().ends_with(';') {
            i = open + 1;
            continue;
        }
        let close = (open + 1..lines.len())
            .find(|&k| lines[k] == format!("{indent}}}"))
            .unwrap_or(lines.len() - 1);
        let n = close - i + 1;
        if n > limit {
            long.push(format!("src/{name}:{} {fn_name} ({n} lines)", i + 1));
        }
        i = close + 1;
    }
    long
}

#[test]
fn no_function_over_80_lines_and_no_file_over_1000_lines_of_product_code() {
    let mut long = Vec::new();
    for (name, text) in sources() {
        let n = product_lines(&name, &text).len();
        if n > 1000 {
            long.push(format!("src/{name}: {n} lines of product code"));
        }
        long.extend(long_functions(&name, &text, 80));
    }
    assert!(long.is_empty(), "over the house's sizes: {long:#?}");
    // The count can fail: a made-up function of 81 lines is found.
    let made_up = format!("fn big() {{\n{}}}\n", "    x();\n".repeat(79));
    assert_eq!(
        long_functions("x.rs", &made_up, 80),
        ["src/x.rs:1 big (81 lines)"]
    );
    assert!(long_functions("x.rs", &made_up, 81).is_empty());
}

#[test]
fn errors_are_strings_only_at_the_edges() {
    // `Result<_, String>` outside the command line: at most 15 (typed
    // errors carry meaning; a string is for a message about to be shown).
    let stringly: Vec<String> = sources()
        .iter()
        .filter(|(name, _)| !name.starts_with("cli/"))
        .flat_map(|(name, text)| {
            text.lines()
                .enumerate()
                .filter(|(_, l)| stringly_result(l))
                .map(move |(i, _)| format!("src/{name}:{}", i + 1))
        })
        .collect();
    assert!(
        stringly.len() <= 15,
        "{} of them: {stringly:#?}",
        stringly.len()
    );
    assert!(stringly_result("fn f() -> Result<u8, String> {"));
    assert!(!stringly_result("fn f() -> Result<Vec<u8>, E> {"));
}

/// Whether `line` holds `Result<X, String>` with no `>` inside X (what
/// `grep -E 'Result<[^>]*, String>'` finds).
fn stringly_result(line: &str) -> bool {
    line.match_indices("Result<").any(|(i, m)| {
        let rest = &line[i + m.len()..];
        let upto = rest.find('>').unwrap_or(rest.len());
        rest[..upto].ends_with(", String") && rest[upto..].starts_with('>')
    })
}
