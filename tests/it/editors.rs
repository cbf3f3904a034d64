//! The schemas serve editors, checked with the tools editors are built on:
//!
//! - check-jsonschema, an independent draft-07 validator reading TOML and
//!   JSON instances: accepts the example specs, flags a typo and the specs
//!   plan refuses from the spec alone. Skipped, saying so, when it is not
//!   installed, unless REQUIRE_CHECK_JSONSCHEMA is set.
//! - the VS Code JSON language service (npm `vscode-json-languageservice`,
//!   run with node) and Taplo (npm `@taplo/cli`, the engine of Even Better
//!   TOML): each error on its line, hover help rendered as markdown.
//!   Looked for in `target/editor-tools/node_modules` (or the
//!   `node_modules` of OKSTRA_EDITOR_TOOLS); skipped, saying so, when absent,
//!   unless REQUIRE_EDITOR_TOOLS is set. CI installs both and sets it:
//!   `npm install --prefix target/editor-tools vscode-json-languageservice@5.7.2 @taplo/cli@0.7.0`.

use crate::common;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tool() -> Option<&'static str> {
    let found = Command::new("check-jsonschema")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some("check-jsonschema");
    }
    common::missing(
        "REQUIRE_CHECK_JSONSCHEMA",
        "check-jsonschema is not on PATH (pip install check-jsonschema)",
    );
    None
}

fn check(schema: &Path, file: &Path) -> (bool, String) {
    let out = Command::new("check-jsonschema")
        .arg("--schemafile")
        .arg(schema)
        .arg(file)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn an_independent_validator_accepts_the_examples_and_flags_a_typo() {
    if tool().is_none() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let schema = root.join("schemas/jobs.schema.json");
    let mut specs = vec![root.join("specs/demo/pipeline.toml")];
    for e in std::fs::read_dir(root.join("specs/examples")).unwrap() {
        specs.push(e.unwrap().path());
    }
    for spec in &specs {
        let (ok, out) = check(&schema, spec);
        assert!(ok, "{}: {out}", spec.display());
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    let text = std::fs::read_to_string(&specs[0]).unwrap().replace(
        "idleTimeoutSeconds = 60",
        "idleTimeoutSeconds = 60\ncolour = 1",
    );
    std::fs::write(&bad, text).unwrap();
    let (ok, out) = check(&schema, &bad);
    assert!(!ok, "a typo must be flagged: {out}");
    assert!(out.contains("colour"), "{out}");
}

#[test]
fn an_independent_validator_accepts_a_plan_okstra_wrote() {
    if tool().is_none() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let out = assert_cmd::Command::cargo_bin("okstra")
        .unwrap()
        .current_dir(root.join("specs/demo"))
        .args([
            "plan",
            "pipeline.toml",
            "--manifest",
            "run-manifest.json",
            "--out",
        ])
        .arg(&plan)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, text) = check(&root.join("schemas/plan.schema.json"), &plan);
    assert!(ok, "{text}");
}

/// A broken TOML spec for each rule the schema carries after `defaults`:
/// (name, spec, whether the schema accepts it). Issue 15's specs first.
const TOML_CASES: &[(&str, &str, bool)] = &[
    (
        "no provider",
        "[[workers]]\nworkerId = \"reviewer\"\nrole = \"analyst\"\npromptPath = \"p.md\"\nresultPath = \"r.md\"\n",
        false,
    ),
    (
        "near: provider from defaults",
        "[defaults]\nprovider = \"codex\"\n\n[[workers]]\nworkerId = \"reviewer\"\nrole = \"analyst\"\npromptPath = \"p.md\"\nresultPath = \"r.md\"\n",
        true,
    ),
    (
        "command without argv",
        "[[workers]]\nworkerId = \"w\"\nprovider = \"command\"\nrole = \"analyst\"\npromptPath = \"p.md\"\nresultPath = \"r.md\"\n",
        false,
    ),
    (
        "near: argv",
        "[[workers]]\nworkerId = \"w\"\nprovider = \"command\"\ncommand = [\"true\"]\nrole = \"analyst\"\npromptPath = \"p.md\"\nresultPath = \"r.md\"\n",
        true,
    ),
    (
        "claude without resultPath",
        "[[workers]]\nworkerId = \"claude\"\nrole = \"analyst\"\npromptPath = \"p.md\"\n",
        false,
    ),
    (
        "near: resultPath",
        "[[workers]]\nworkerId = \"claude\"\nrole = \"analyst\"\npromptPath = \"p.md\"\nresultPath = \"r.md\"\n",
        true,
    ),
    (
        "v2 without its refs",
        "[[workers]]\nschemaVersion = \"2.0\"\nexecutionIdentityVersion = 2\ndutyId = \"analysis\"\nattempt = 1\nprovider = \"codex\"\nrole = \"analyst\"\npromptPath = \"p.md\"\nresultPath = \"r.md\"\n",
        false,
    ),
    (
        "near: v2 refs, version from defaults",
        "[defaults]\nschemaVersion = \"2.0\"\nexecutionIdentityVersion = 2\nattempt = 1\n\n[[workers]]\nparticipantRef = \"p\"\nroleExecutionRef = \"re\"\nexecutionLabel = \"A\"\ndutyId = \"analysis\"\ninvocationRef = \"inv\"\nassignmentRef = \"run/a\"\nprovider = \"codex\"\nrole = \"analyst\"\npromptPath = \"p.md\"\nresultPath = \"r.md\"\n",
        true,
    ),
];

#[test]
fn an_independent_validator_refuses_what_plan_refuses_from_the_spec_alone() {
    if tool().is_none() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let schema = root.join("schemas/jobs.schema.json");
    let dir = tempfile::tempdir().unwrap();
    for (i, (name, text, ok)) in TOML_CASES.iter().enumerate() {
        let file = dir.path().join(format!("case-{i}.toml"));
        std::fs::write(&file, text).unwrap();
        let (valid, out) = check(&schema, &file);
        assert_eq!(valid, *ok, "{name}: {out}");
    }
}

/// The npm packages' directory, or `None` (skipped, saying so) when node
/// or the packages are missing and REQUIRE_EDITOR_TOOLS is not set.
fn editor_tools() -> Option<PathBuf> {
    let base = std::env::var_os("OKSTRA_EDITOR_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/editor-tools"));
    let modules = base.join("node_modules");
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let found = node
        && modules.join("vscode-json-languageservice").is_dir()
        && modules.join("@taplo/cli").is_dir();
    if found {
        return Some(modules);
    }
    common::missing(
        "REQUIRE_EDITOR_TOOLS",
        &format!(
            "node or the editor packages are missing from {} (npm install --prefix target/editor-tools vscode-json-languageservice@5.7.2 @taplo/cli@0.7.0)",
            modules.display()
        ),
    );
    None
}

/// A JSON spec with the same four refusals, a typo, and a near miss; the
/// markers name the line each entry's object opens on.
const BROKEN_JSON: &str = r#"{
  "workers": [
    { "workerId": "reviewer", "role": "analyst",
      "promptPath": "p.md", "resultPath": "out/a.md" },
    { "workerId": "w", "provider": "command", "role": "analyst",
      "promptPath": "p.md", "resultPath": "out/b.md" },
    { "workerId": "claude", "role": "analyst", "promptPath": "p.md" },
    { "schemaVersion": "2.0", "executionIdentityVersion": 2, "dutyId": "analysis",
      "attempt": 1, "provider": "codex", "role": "analyst",
      "promptPath": "p.md", "resultPath": "out/d.md" },
    { "workerId": "codex", "role": "analyst", "promptPath": "p.md",
      "resultPath": "out/e.md", "permissionMode": "plan", "colour": 1 }
  ]
}
"#;

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line holds {needle}"))
}

#[test]
fn the_vscode_json_language_service_flags_each_entry_and_hovers_markdown() {
    let Some(modules) = editor_tools() else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let schema_path = root.join("schemas/jobs.schema.json");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(&schema_path).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("spec.json");
    std::fs::write(&doc, BROKEN_JSON).unwrap();
    // 0-based, as the language server protocol counts.
    let reviewer = line_of(BROKEN_JSON, "\"reviewer\"");
    let command = line_of(BROKEN_JSON, "\"command\", \"role\"");
    let claude = line_of(BROKEN_JSON, "\"claude\"");
    let v2 = line_of(BROKEN_JSON, "\"2.0\"");
    let near = line_of(BROKEN_JSON, "\"permissionMode\"");
    let key_at = |needle: &str| {
        let l = line_of(BROKEN_JSON, needle);
        format!(
            "{l}:{}",
            BROKEN_JSON.lines().nth(l).unwrap().find(needle).unwrap() + 1
        )
    };
    let hover_key = key_at("\"permissionMode\"");
    let hover_value = key_at("\"plan\"");
    let out = Command::new("node")
        .arg(root.join("tests/it/editors/vscode-json.js"))
        .arg(&modules)
        .arg(&schema_path)
        .arg(&doc)
        .args([&hover_key, &hover_value])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut by_line: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for d in shown["diagnostics"].as_array().unwrap() {
        by_line
            .entry(d["line"].as_u64().unwrap() as usize)
            .or_default()
            .push(d["message"].as_str().unwrap().to_string());
    }
    let missing = |keys: &[&str]| -> Vec<String> {
        keys.iter()
            .map(|k| format!("Missing property \"{k}\"."))
            .collect()
    };
    let mut want: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    want.insert(reviewer, missing(&["provider"]));
    want.insert(command, missing(&["command"]));
    want.insert(claude, missing(&["resultPath"]));
    want.insert(
        v2,
        missing(&[
            "participantRef",
            "roleExecutionRef",
            "executionLabel",
            "invocationRef",
            "assignmentRef",
        ]),
    );
    want.insert(near, vec!["Property colour is not allowed.".to_string()]);
    for (line, messages) in by_line.iter_mut() {
        messages.sort();
        if let Some(w) = want.get_mut(line) {
            w.sort();
        }
    }
    assert_eq!(by_line, want, "{shown:#}");

    // Hover on a key: its title and markdownDescription, backticks kept as
    // markdown code (VS Code escapes a plain `description`).
    let hovers = shown["hovers"].as_array().unwrap();
    let key_hover = hovers[0]["contents"].as_str().unwrap();
    let md = schema["definitions"]["permissionMode"]["markdownDescription"]
        .as_str()
        .unwrap();
    assert!(md.contains('`'), "{md}");
    assert!(key_hover.contains(md), "{key_hover}");
    assert!(!key_hover.contains("\\`"), "backticks escaped: {key_hover}");
    // Hover on a value: the description of that value.
    let value_hover = hovers[1]["contents"].as_str().unwrap();
    let plan_doc = "`plan`: claude plans and changes nothing.";
    assert!(value_hover.contains(plan_doc), "{value_hover}");
}

/// Where Taplo (`taplo lint`) reports each error: `(line, message)`, 1-based.
fn taplo_errors(modules: &Path, schema: &Path, file: &Path) -> (bool, Vec<(usize, String)>) {
    let out = Command::new("node")
        .arg(modules.join("@taplo/cli/dist/cli.js"))
        .args(["lint", "--no-auto-config", "--schema"])
        .arg(format!("file://{}", schema.display()))
        .arg(file)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    let mut found = Vec::new();
    let mut message = String::new();
    let at = format!("{}:", file.display());
    for line in text.lines() {
        if let Some(m) = line.strip_prefix("error: ") {
            message = m.to_string();
        } else if let Some((_, rest)) = line.split_once(at.as_str()) {
            let n: usize = rest.split(':').next().unwrap().parse().unwrap();
            found.push((n, message.clone()));
        }
    }
    (out.status.success(), found)
}

#[test]
fn taplo_puts_each_error_on_its_entry() {
    let Some(modules) = editor_tools() else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let schema = root.join("schemas/jobs.schema.json");
    let dir = tempfile::tempdir().unwrap();
    // Every case of TOML_CASES as one spec's entries, each its own table;
    // `defaults` of the near misses left out, so those that needed them
    // are refused here too.
    let text = "[defaults]\nrole = \"analyst\"\n\n[[workers]]\nworkerId = \"reviewer\"\npromptPath = \"p.md\"\nresultPath = \"out/a.md\"\n\n[[workers]]\nworkerId = \"w\"\nprovider = \"command\"\npromptPath = \"p.md\"\nresultPath = \"out/b.md\"\n\n[[workers]]\nworkerId = \"claude\"\npromptPath = \"p.md\"\n\n[[workers]]\nschemaVersion = \"2.0\"\nexecutionIdentityVersion = 2\ndutyId = \"analysis\"\nattempt = 1\nprovider = \"codex\"\npromptPath = \"p.md\"\nresultPath = \"out/d.md\"\ndispatchKind = \"reverify-r0\"\n\n[[workers]]\nworkerId = \"codex\"\npromptPath = \"p.md\"\nresultPath = \"out/e.md\"\n";
    let file = dir.path().join("spec.toml");
    std::fs::write(&file, text).unwrap();
    let (ok, errors) = taplo_errors(&modules, &schema, &file);
    assert!(!ok);
    // 1-based table spans: each `[[workers]]` to the line before the next.
    let headers: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| *l == "[[workers]]")
        .map(|(i, _)| i + 1)
        .collect();
    let table_of = |line: usize| headers.iter().rposition(|h| *h <= line).unwrap();
    // Taplo marks an object's error on every key of its table: the first
    // mark of each message is the table's header.
    let mut first: BTreeMap<String, usize> = BTreeMap::new();
    for (line, message) in &errors {
        let e = first.entry(message.clone()).or_insert(*line);
        *e = (*e).min(*line);
    }
    let in_table = |table: usize| -> Vec<String> {
        let mut v: Vec<String> = errors
            .iter()
            .filter(|(l, _)| table_of(*l) == table)
            .map(|(_, m)| m.clone())
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let required = |k: &str| format!("\"{k}\" is a required property");
    assert_eq!(in_table(0), [required("provider")], "{errors:?}");
    assert_eq!(first[&required("provider")], headers[0]);
    assert_eq!(in_table(1), [required("command")], "{errors:?}");
    assert_eq!(first[&required("command")], headers[1]);
    assert_eq!(in_table(2), [required("resultPath")], "{errors:?}");
    assert_eq!(first[&required("resultPath")], headers[2]);
    let mut v2: Vec<String> = [
        "assignmentRef",
        "executionLabel",
        "invocationRef",
        "participantRef",
        "roleExecutionRef",
    ]
    .map(required)
    .to_vec();
    let reverify = line_of(text, "reverify-r0") + 1;
    let round = errors
        .iter()
        .find(|(_, m)| m.contains("reverify-r0"))
        .unwrap_or_else(|| panic!("{errors:?}"));
    assert_eq!(round.0, reverify);
    v2.push(round.1.clone());
    v2.sort();
    assert_eq!(in_table(3), v2, "{errors:?}");
    assert_eq!(first[&required("participantRef")], headers[3]);
    // The near miss is clean.
    assert!(in_table(4).is_empty(), "{errors:?}");
}

/// The spec `okstra init` writes, with a worker of every provider, in a
/// fresh project `dir`; its path, and the schema its `#:schema` line names
/// (resolved from the spec's directory, as editors resolve it).
fn init_spec(dir: &Path) -> (PathBuf, PathBuf) {
    let out = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .args(["init", "--provider", "claude", "--provider", "codex"])
        .args(["--provider", "gemini", "--provider", "command"])
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spec = dir.join("okstra.toml");
    let text = std::fs::read_to_string(&spec).unwrap();
    let first = text.lines().next().unwrap();
    let target = first
        .strip_prefix("#:schema ")
        .unwrap_or_else(|| panic!("the first line is no schema directive: {first}"));
    let schema = dir.join(target);
    assert!(schema.is_file(), "{} is not written", schema.display());
    (spec, schema)
}

/// `spec` with an unknown key in its `[defaults]`: the line it is on
/// (1-based), and the text.
fn with_typo(spec: &str) -> (usize, String) {
    let text = spec.replacen(
        "idleTimeoutSeconds = 600\n",
        "idleTimeoutSeconds = 600\ncolour = 1\n",
        1,
    );
    (line_of(&text, "colour = 1") + 1, text)
}

/// Taplo (Even Better TOML) follows the `#:schema` line of the spec init
/// writes to the schema init wrote beside it: the spec is clean, a typo in
/// it is flagged on its line, and (the near miss that shows the directive
/// is what is followed) the same typo passes without the line.
#[test]
fn taplo_follows_the_schema_line_of_the_spec_init_writes() {
    let Some(modules) = editor_tools() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (spec, _) = init_spec(dir.path());
    let cli = modules.join("@taplo/cli/dist/cli.js");
    let lint = |file: &Path| {
        let out = Command::new("node")
            .arg(&cli)
            .args(["lint", "--no-auto-config"])
            .arg(file)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).to_string()
            + &String::from_utf8_lossy(&out.stdout);
        (out.status.success(), text)
    };
    let (ok, text) = lint(&spec);
    assert!(ok, "the spec init wrote: {text}");
    let written = std::fs::read_to_string(&spec).unwrap();
    let (line, typo) = with_typo(&written);
    let bad = dir.path().join("typo.toml");
    std::fs::write(&bad, &typo).unwrap();
    let (ok, text) = lint(&bad);
    assert!(!ok, "a typo must be flagged: {text}");
    assert!(
        text.contains(&format!("typo.toml:{line}:1")) && text.contains("'colour' was unexpected"),
        "{text}"
    );
    let undirected = typo.split_once('\n').unwrap().1;
    std::fs::write(&bad, undirected).unwrap();
    let (ok, text) = lint(&bad);
    assert!(ok, "without the directive, taplo has no schema: {text}");
}

/// The VS Code JSON language service, given the schema the spec's
/// `#:schema` line names, finds nothing to flag in the spec init wrote
/// (read as JSON, as okstra reads TOML and JSON alike), flags a typo on
/// its line, and shows each key's documentation on hover.
#[test]
fn the_vscode_json_service_accepts_the_spec_init_writes() {
    let Some(modules) = editor_tools() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (spec, schema_path) = init_spec(dir.path());
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(&schema_path).unwrap()).unwrap();
    let as_json = |toml_text: &str| {
        let doc: toml::Table = toml::from_str(toml_text).unwrap();
        serde_json::to_string_pretty(&doc).unwrap()
    };
    let show = |json_text: &str, hover: Option<String>| -> Value {
        let doc = dir.path().join("spec.json");
        std::fs::write(&doc, json_text).unwrap();
        let out = Command::new("node")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/editors/vscode-json.js"))
            .arg(&modules)
            .arg(&schema_path)
            .arg(&doc)
            .args(hover)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let written = std::fs::read_to_string(&spec).unwrap();
    let clean = as_json(&written);
    let key = line_of(&clean, "\"idleTimeoutSeconds\"");
    let at = format!(
        "{key}:{}",
        clean.lines().nth(key).unwrap().find('"').unwrap() + 1
    );
    let shown = show(&clean, Some(at));
    assert_eq!(shown["diagnostics"], serde_json::json!([]), "{shown:#}");
    let md = schema["definitions"]["idleTimeoutSeconds"]["markdownDescription"]
        .as_str()
        .unwrap();
    let hover = shown["hovers"][0]["contents"].as_str().unwrap_or_default();
    assert!(hover.contains(md), "{hover}");
    let (_, typo) = with_typo(&written);
    let bad = as_json(&typo);
    let shown = show(&bad, None);
    let flagged: Vec<(u64, &str)> = shown["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["line"].as_u64().unwrap(), d["message"].as_str().unwrap()))
        .collect();
    assert_eq!(
        flagged,
        [(
            line_of(&bad, "\"colour\"") as u64,
            "Property colour is not allowed."
        )],
        "{shown:#}"
    );
}
