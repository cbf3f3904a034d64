//! The documentation the code points into. Comments cite the rule they
//! follow as a path into docs/ with its heading's anchor
//! (`docs/exec.md#settling-an-attempt`): every such citation, and every link
//! of the README and docs/, must land on a heading that exists, and nothing
//! may cite the contract the repository does not hold.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir` (relative to the root), recursively, sorted.
fn files_under(dir: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root().join(dir)];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The files under `dirs` that are text (data files skipped), each named
/// relative to the root.
fn texts(dirs: &[&str]) -> Vec<(String, String)> {
    dirs.iter()
        .flat_map(|d| files_under(d))
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            let name = p.strip_prefix(root()).unwrap_or(&p).display().to_string();
            Some((name, text))
        })
        .collect()
}

/// GitHub's anchor for a heading: lowercased, every character but letters,
/// digits, spaces, `-` and `_` dropped, each space made `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown document's headings (not those in code
/// blocks), a repeated one with GitHub's `-1`, `-2`.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if fenced || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = anchor(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_')
}

/// Every `docs/<file>.md#<anchor>` in `text`, with its line number. A path
/// without an anchor is not a citation (tests name `docs/x.md` as data).
fn citations(text: &str) -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut from = 0;
        while let Some(at) = line[from..].find("docs/").map(|i| from + i) {
            from = at + "docs/".len();
            // A path's own `docs/`, not a part of a longer one or a URL.
            if line[..at]
                .chars()
                .next_back()
                .is_some_and(|c| is_name_char(c) || matches!(c, '/' | '.'))
            {
                continue;
            }
            let rest = &line[from..];
            let name_len = rest.find(|c| !is_name_char(c)).unwrap_or(rest.len());
            let Some(after) = rest[name_len..].strip_prefix(".md") else {
                continue;
            };
            let Some(a) = after.strip_prefix('#') else {
                continue;
            };
            let anchor = &a[..a.find(|c| !is_name_char(c)).unwrap_or(a.len())];
            if !anchor.is_empty() {
                out.push((n + 1, format!("{}.md", &rest[..name_len]), anchor.into()));
            }
        }
    }
    out
}

/// The anchors of every page of docs/, by file name.
fn docs_anchors() -> HashMap<String, BTreeSet<String>> {
    files_under("docs")
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, anchors(&std::fs::read_to_string(&p).unwrap()))
        })
        .collect()
}

/// What is wrong with the docs citations of `text`, one line each.
fn broken_citations(
    name: &str,
    text: &str,
    docs: &HashMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (line, file, anchor) in citations(text) {
        match docs.get(&file) {
            None => out.push(format!("{name}:{line}: docs/{file} does not exist")),
            Some(have) if !have.contains(&anchor) => out.push(format!(
                "{name}:{line}: docs/{file} has no heading #{anchor}"
            )),
            Some(_) => {}
        }
    }
    out
}

/// The contract okstra was built from is not in the repository; its
/// citations became docs/ paths, and none may come back.
#[test]
fn no_comment_cites_the_contract_the_repository_does_not_hold() {
    let sign = '\u{a7}';
    let mut found = Vec::new();
    for (path, text) in texts(&["src", "schemas"]) {
        for (n, line) in text.lines().enumerate() {
            let cites = line.contains("SPEC.md")
                || line.contains(&format!("SPEC {sign}"))
                || line.contains(&format!("SPEC{sign}"))
                || line
                    .match_indices("SPEC ")
                    .any(|(i, _)| line[i + 5..].starts_with(|c: char| c.is_ascii_digit()));
            if cites {
                found.push(format!("{path}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cite the docs/ section instead (docs/<file>.md#<anchor>):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_docs_citation_names_a_heading_that_exists() {
    let docs = docs_anchors();
    let mut broken = Vec::new();
    let mut cited = 0;
    for (path, text) in texts(&["src", "schemas", "tests", "benches", "specs", "fuzz/src"]) {
        cited += citations(&text).len();
        broken.extend(broken_citations(&path, &text, &docs));
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
    // The scan finds what it is meant to find.
    assert!(cited > 100, "only {cited} docs citations found");
}

/// Near misses: a citation of a heading or page that is not there is
/// caught; the same citation of one that is passes.
#[test]
fn a_citation_of_a_missing_heading_or_page_is_caught() {
    let docs = docs_anchors();
    let good = concat!("/// Settled (docs/", "exec.md#settling-an-attempt).\n");
    assert_eq!(broken_citations("a.rs", good, &docs), Vec::<String>::new());
    let bad_anchor = concat!("/// Settled (docs/", "exec.md#settling-an-attempts).\n");
    assert_eq!(
        broken_citations("a.rs", bad_anchor, &docs),
        ["a.rs:1: docs/exec.md has no heading #settling-an-attempts"]
    );
    let bad_page = concat!("// x\n// see docs/", "exec2.md#settling-an-attempt\n");
    assert_eq!(
        broken_citations("a.rs", bad_page, &docs),
        ["a.rs:2: docs/exec2.md does not exist"]
    );
    // Not a citation of this repository's docs: a URL's or a longer path's,
    // or a path with no anchor.
    let other = concat!(
        "// https://x.org/docs/",
        "a.md#b and benches/docs/",
        "c.md#d, docs/",
        "x.md\n"
    );
    assert_eq!(broken_citations("a.rs", other, &docs), Vec::<String>::new());
}

#[test]
fn headings_become_githubs_anchors() {
    for (heading, want) in [
        (" The worker's environment", "the-workers-environment"),
        (" Inside .git", "inside-git"),
        (" `okstra doctor`", "okstra-doctor"),
        (" What `okstra plan` checks", "what-okstra-plan-checks"),
        (" okstra's own files", "okstras-own-files"),
        (" Exit codes: 0-4, and 130", "exit-codes-0-4-and-130"),
        (" snake_case stays", "snake_case-stays"),
    ] {
        assert_eq!(anchor(heading), want, "{heading:?}");
    }
    let doc = "# A\n\n```sh\n# not a heading\n```\n## A\n#nospace\n### B c\n";
    assert_eq!(
        anchors(doc),
        ["a", "a-1", "b-c"].map(String::from).into_iter().collect()
    );
}

/// Every relative link of the README, CONTRIBUTING.md and docs/ lands on a
/// file that exists and, for a page, on one of its headings.
#[test]
fn every_link_of_the_readme_and_docs_lands() {
    let mut pages: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md"]
        .iter()
        .map(|p| root().join(p))
        .collect();
    pages.extend(
        files_under("docs")
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    let mut broken = Vec::new();
    let mut links = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let mut fenced = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            }
            if fenced {
                continue;
            }
            for (at, _) in line.match_indices("](") {
                let rest = &line[at + 2..];
                let target = &rest[..rest.find(')').unwrap_or(rest.len())];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                links += 1;
                let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
                let dest = if file.is_empty() {
                    page.clone()
                } else {
                    page.parent().unwrap().join(file)
                };
                let name = page.strip_prefix(root()).unwrap_or(page).display();
                let place = format!("{name}:{}: {target}", n + 1);
                if !dest.exists() {
                    broken.push(format!("{place}: no such file"));
                } else if !anchor.is_empty() {
                    let have = anchors(&std::fs::read_to_string(&dest).unwrap());
                    if !have.contains(anchor) {
                        broken.push(format!("{place}: no such heading"));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
    assert!(links > 30, "only {links} links found");
}
