//! Issue 13, "fail closed", the paths part: every path problem is refused
//! at plan time, through the real binary on fixture projects, in spec TOML,
//! spec JSON, roster rows, the manifest, metadata and translator
//! reservations; each refusal beside a near miss that must plan.

use crate::common::*;
use serde_json::{json, Value};
use std::os::unix::fs::symlink;
use std::path::Path;

fn edit_spec(p: &Project, from: &str, to: &str) {
    let text = p.read("spec.toml");
    assert!(text.contains(from), "fixture spec has no `{from}`");
    p.write("spec.toml", &text.replacen(from, to, 1));
}

fn edit_json(p: &Project, rel: &str, f: impl FnOnce(&mut Value)) {
    let mut v = p.read_json(rel);
    f(&mut v);
    p.write_json(rel, &v);
}

/// Plan `spec.toml` and expect a clean plan; returns the plan document.
#[track_caller]
fn planned(p: &Project) -> Value {
    planned_spec(p, "spec.toml")
}

#[track_caller]
fn planned_spec(p: &Project, spec: &str) -> Value {
    let run = plan_json(p, spec);
    assert_eq!(
        run.code, 0,
        "expected a clean plan; stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    let plan = p.read_json("plan.json");
    std::fs::remove_file(p.path("plan.json")).unwrap();
    plan
}

/// The one error of a refused plan: exactly one, with `code`, located in
/// `file` at `pointer` (line and column), with a help line.
#[track_caller]
fn the_error(p: &Project, run: Run, code: &str, file: &str, pointer: &str) -> Value {
    let run = assert_refused(p, run, code);
    assert_eq!(run.codes(), [code], "{}", run.stdout);
    let e = run.error(code);
    assert_eq!(e["file"], file, "{e}");
    assert_eq!(e["pointer"], pointer, "{e}");
    assert!(e["line"].as_u64().is_some(), "no line: {e}");
    assert!(e["column"].as_u64().is_some(), "no column: {e}");
    assert!(e["help"].as_str().is_some_and(|h| !h.is_empty()), "{e}");
    e
}

#[track_caller]
fn spec_error(p: &Project, code: &str, pointer: &str) -> Value {
    the_error(p, plan_json(p, "spec.toml"), code, "spec.toml", pointer)
}

const IMPL: &str = "/stages/0/workers/0";
const IMPL_RESULT: &str = "resultPath = \"results/impl.md\"";

// ---------------------------------------------------------------------------
// path/invalid in a spec

#[test]
fn a_backslash_in_a_result_path_is_refused_not_rewritten() {
    // The report: `..\outside\x.md` was accepted, recorded as
    // `../outside/x.md`, and the worker wrote outside the root.
    let p = v2_project();
    edit_spec(&p, IMPL_RESULT, r"resultPath = '..\outside\x.md'");
    let e = spec_error(&p, "path/invalid", &format!("{IMPL}/resultPath"));
    let line = p.line_of("spec.toml", |l| l.starts_with("resultPath = '..\\"));
    assert_eq!(e["line"], json!(line));
    assert_eq!(e["column"], json!(14));
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains(r"..\outside\x.md") && msg.contains('\\'),
        "{msg}"
    );
    assert!(!p.root().parent().unwrap().join("outside").exists());
    // Near miss: the same file written with `/` inside the root.
    let p = v2_project();
    edit_spec(&p, IMPL_RESULT, "resultPath = 'results/x.md'");
    let plan = planned(&p);
    assert_eq!(plan["stages"][0]["jobs"][0]["resultPath"], "results/x.md");
}

#[test]
fn every_path_key_of_a_spec_entry_is_judged_as_written() {
    // (key line added to the implementer, the pointer of the bad value)
    let cases = [
        (r"promptPath = 'prompts\impl.md'", "promptPath"),
        (r"workerResultPath = 'results\w.md'", "workerResultPath"),
        (
            r"completionPaths = ['results/impl.md', 'results\c.md']",
            "completionPaths/1",
        ),
        (r"worktreePath = 'wt\x'", "worktreePath"),
        (r"plannedPaths = ['src\**']", "plannedPaths/0"),
        (r"auxiliaryRoots = ['scratch\a']", "auxiliaryRoots/0"),
    ];
    for (line, key) in cases {
        let p = v2_project();
        let text = p.read("spec.toml");
        let text = if key == "promptPath" {
            text.replacen("promptPath = \"prompts/impl.md\"", line, 1)
        } else {
            text.replacen(IMPL_RESULT, &format!("{IMPL_RESULT}\n{line}"), 1)
        };
        p.write("spec.toml", &text);
        let e = spec_error(&p, "path/invalid", &format!("{IMPL}/{key}"));
        let at = p.line_of("spec.toml", |l| l == line);
        assert_eq!(e["line"], json!(at), "{key}");
        assert_eq!(e["worker"], "impl-1", "{key}");
    }
    // Near miss: every key, written with `/`.
    let p = v2_project();
    p.write("prompts/other.md", "# other\n");
    edit_spec(
        &p,
        IMPL_RESULT,
        "resultPath = \"results/impl.md\"\nworkerResultPath = 'results/w.md'\ncompletionPaths = ['results/impl.md', 'results/c.md']\nworktreePath = 'wt'\nplannedPaths = ['src/**']\nauxiliaryRoots = ['scratch/']",
    );
    planned(&p);
}

#[test]
fn a_nul_an_empty_segment_and_a_trailing_slash_are_refused() {
    for bad in [
        "resultPath = \"results/a\\u0000b.md\"",
        "resultPath = \"results//impl.md\"",
        "resultPath = \"/tmp//x.md\"",
        "resultPath = \"results/\"",
        "resultPath = \"results/.\"",
        "resultPath = \"  \"",
    ] {
        let p = v2_project();
        edit_spec(&p, IMPL_RESULT, bad);
        spec_error(&p, "path/invalid", &format!("{IMPL}/resultPath"));
    }
    // A result that is an existing directory would count as written before
    // the worker ran.
    let p = v2_project();
    std::fs::create_dir_all(p.path("results/dir")).unwrap();
    edit_spec(&p, IMPL_RESULT, "resultPath = \"results/dir\"");
    spec_error(&p, "path/invalid", &format!("{IMPL}/resultPath"));
    // Near misses: `.` and `..` segments that fold, a directory field's
    // trailing slash, a name with spaces and dots.
    let p = v2_project();
    edit_spec(
        &p,
        IMPL_RESULT,
        "resultPath = \"./results/x/../impl ok...md\"\nauxiliaryRoots = [\"scratch/\"]",
    );
    let plan = planned(&p);
    assert_eq!(
        plan["stages"][0]["jobs"][0]["resultPath"],
        "results/impl ok...md"
    );
}

#[test]
fn a_bad_default_is_one_error_at_the_default() {
    let p = v2_project();
    edit_spec(
        &p,
        "modelExecutionValue = \"model-a\"",
        "modelExecutionValue = \"model-a\"\nworkerResultPath = 'results\\w.md'",
    );
    // Both workers read it; it is reported once, where it is written.
    let e = spec_error(&p, "path/invalid", "/defaults/workerResultPath");
    assert!(e.get("worker").is_none(), "{e}");
}

#[test]
fn validate_refuses_what_plan_refuses_from_the_spec_alone() {
    let p = v2_project();
    edit_spec(&p, IMPL_RESULT, r"resultPath = 'a\b.md'");
    let run = p.okstra(&[
        "validate",
        "spec.toml",
        "--kind",
        "jobs",
        "--format",
        "json",
    ]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert_eq!(run.codes(), ["path/invalid"], "{}", run.stdout);
    let p = v2_project();
    let run = p.okstra(&["validate", "spec.toml", "--kind", "jobs"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

/// The v2 fixture spec as JSON.
fn json_spec(p: &Project) -> Value {
    let doc: toml::Value = toml::from_str(V2_SPEC).unwrap();
    let doc = serde_json::to_value(doc).unwrap();
    p.write_json("spec.json", &doc);
    doc
}

#[test]
fn a_json_spec_is_judged_the_same_and_located() {
    let p = v2_project();
    let mut doc = json_spec(&p);
    doc["stages"][0]["workers"][0]["resultPath"] = json!("..\\outside\\x.md");
    p.write_json("spec.json", &doc);
    let run = plan_json(&p, "spec.json");
    let e = the_error(
        &p,
        run,
        "path/invalid",
        "spec.json",
        &format!("{IMPL}/resultPath"),
    );
    let line = p.line_of("spec.json", |l| l.contains("outside"));
    assert_eq!(e["line"], json!(line));
    // Near miss.
    let p = v2_project();
    json_spec(&p);
    planned_spec(&p, "spec.json");
}

// ---------------------------------------------------------------------------
// path/invalid in roster rows, the manifest, metadata and reservations

fn roster_project(result: &str) -> Project {
    let p = Project::new();
    let mut m = v1_manifest();
    m["recommendedWorkers"] = json!(["w1"]);
    p.write_json("run/run-manifest.json", &m);
    p.write("prompts/w1.md", "# w1\n");
    p.write_json(
        "run/team-state.json",
        &json!({"workers": [{
            "workerId": "w1", "provider": "command", "role": "reviewer",
            "promptPath": "prompts/w1.md", "resultPath": result,
            "modelExecutionValue": "", "status": "not-run", "reason": "",
            "command": ["true"]
        }], "workerDispatches": [], "agentDispatches": [], "agentResultLinks": []}),
    );
    p
}

fn roster_plan(p: &Project) -> Run {
    p.okstra(&[
        "plan",
        "--manifest",
        "run/run-manifest.json",
        "--out",
        "plan.json",
        "--format",
        "json",
    ])
}

#[test]
fn a_roster_row_path_is_judged_as_written() {
    let p = roster_project("..\\outside\\x.md");
    let run = roster_plan(&p);
    the_error(
        &p,
        run,
        "path/invalid",
        "run/team-state.json",
        "/workers/0/resultPath",
    );
    // Near miss.
    let p = roster_project("results/w1.md");
    let run = roster_plan(&p);
    assert_eq!(run.code, 0, "{}", run.stdout);
}

#[test]
fn every_manifest_path_is_judged_as_written() {
    for pointer in [
        "/teamStatePath",
        "/leadEventsPath",
        "/errorLogPath",
        "/activeRunContextPath",
        "/agentContract/invocationReservationRootPath",
    ] {
        let p = v2_project();
        edit_json(&p, "run/run-manifest.json", |m| {
            if pointer.starts_with("/agentContract") {
                m["agentContract"] = json!({"invocationReservationRootPath": "run\\res"});
            } else {
                m[&pointer[1..]] = json!("run\\x.json");
            }
        });
        the_error(
            &p,
            plan_json(&p, "spec.toml"),
            "path/invalid",
            "run/run-manifest.json",
            pointer,
        );
    }
    // Near miss: the same fields written with `/`.
    let p = v2_project();
    edit_json(&p, "run/run-manifest.json", |m| {
        m["leadEventsPath"] = json!("run/events.jsonl");
        m["errorLogPath"] = json!("run/errors.jsonl");
        m["activeRunContextPath"] = json!("run/context.json");
        m["agentContract"] = json!({"invocationReservationRootPath": "run/res/"});
    });
    let plan = planned(&p);
    assert_eq!(plan["run"]["leadEventsPath"], "run/events.jsonl");
}

#[test]
fn a_manifest_planned_path_is_judged_as_written() {
    let p = v2_project();
    edit_json(&p, "run/run-manifest.json", |m| {
        m["plannedPaths"] = json!(["src//x.rs"])
    });
    the_error(
        &p,
        plan_json(&p, "spec.toml"),
        "path/invalid",
        "run/run-manifest.json",
        "/plannedPaths/0",
    );
    let p = v2_project();
    edit_json(&p, "run/run-manifest.json", |m| {
        m["plannedPaths"] = json!(["src/**"])
    });
    planned(&p);
}

#[test]
fn the_metadata_prompt_path_is_judged_as_written() {
    let p = v2_project();
    edit_json(&p, "prompts/impl.md.meta.json", |m| {
        m["prompt"]["path"] = json!("prompts\\impl.md")
    });
    // Only `path/invalid`: nothing compares a refused path.
    the_error(
        &p,
        plan_json(&p, "spec.toml"),
        "path/invalid",
        "prompts/impl.md.meta.json",
        "/prompt/path",
    );
}

const TR_PROMPT: &str =
    "# translate\n**Result Path:** results/tr.md\n**Worker Result Path:** results/tr-worker.md\n";

fn translator_project() -> Project {
    let p = v2_project();
    edit_json(&p, "run/run-manifest.json", |m| {
        m["invocationAssignments"] = json!({"translator": {
            "provider": "command", "modelExecutionValue": "model-a", "runner": "cli-wrapper",
            "command": ["true"]
        }});
        m["agentContract"] = json!({"invocationReservationRootPath": "run/reservations"});
    });
    p.write("prompts/tr.md", TR_PROMPT);
    let mut meta = v2_metadata(
        "prompts/tr.md",
        "p-tr",
        "re-tr",
        "tr-1",
        "translator",
        "inv-tr",
        "translator",
    );
    meta["assignmentRef"] = json!("translator");
    meta["dispatchKind"] = json!("translator");
    p.write_json("prompts/tr.md.meta.json", &meta);
    p.write_json(
        "run/reservations/tr-1.json",
        &json!({
            "schemaVersion": "2.0", "executionIdentityVersion": 2, "invocationId": "inv-tr",
            "assignmentRef": "translator", "audience": "translator", "dispatchKind": "translator",
            "promptPath": "prompts/tr.md", "metadataPath": "prompts/tr.md.meta.json",
            "invocationRef": "inv-tr", "participantRef": "p-tr", "roleExecutionRef": "re-tr",
            "dutyId": "translator", "attempt": 1
        }),
    );
    p
}

fn translator_plan(p: &Project) -> Run {
    p.okstra(&[
        "plan",
        "--manifest",
        "run/run-manifest.json",
        "--workers",
        "translator",
        "--out",
        "plan.json",
        "--format",
        "json",
    ])
}

#[test]
fn translator_reservation_and_prompt_header_paths_are_judged_as_written() {
    let p = translator_project();
    edit_json(&p, "run/reservations/tr-1.json", |r| {
        r["metadataPath"] = json!("prompts\\tr.md.meta.json")
    });
    the_error(
        &p,
        translator_plan(&p),
        "path/invalid",
        "run/reservations/tr-1.json",
        "/metadataPath",
    );
    // A header path is located at its line of the prompt.
    let p = translator_project();
    p.write(
        "prompts/tr.md",
        "# translate\n**Result Path:** ..\\outside\\tr.md\n**Worker Result Path:** results/tr-worker.md\n",
    );
    let run = assert_refused(&p, translator_plan(&p), "path/invalid");
    assert_eq!(run.codes(), ["path/invalid"], "{}", run.stdout);
    let e = run.error("path/invalid");
    assert_eq!(e["file"], "prompts/tr.md");
    assert_eq!(e["line"], json!(2));
    let p = translator_project();
    p.write(
        "prompts/tr.md",
        "**Result Path:** ../outside.md\n**Worker Result Path:** results/tr-worker.md\n",
    );
    let run = assert_refused(&p, translator_plan(&p), "path/escapes-root");
    assert_eq!(run.error("path/escapes-root")["line"], json!(1));
    // Near miss: the fixture as is.
    let p = translator_project();
    let run = translator_plan(&p);
    assert_eq!(run.code, 0, "{}", run.stdout);
}

// ---------------------------------------------------------------------------
// path/too-broad

#[test]
fn write_scopes_never_name_the_root_of_everything() {
    let p = v2_project();
    let parent = p
        .root()
        .canonicalize()
        .unwrap()
        .parent()
        .unwrap()
        .to_owned();
    let parent = parent.to_str().unwrap().to_string();
    for (line, key) in [
        ("worktreePath = '/'".to_string(), "worktreePath"),
        ("worktreePath = '/tmp/..'".to_string(), "worktreePath"),
        (
            "worktreePath = '/proc/self/cwd'".to_string(),
            "worktreePath",
        ),
        (format!("worktreePath = '{parent}'"), "worktreePath"),
        (
            "auxiliaryRoots = ['/sys/kernel']".to_string(),
            "auxiliaryRoots/0",
        ),
        (
            "auxiliaryRoots = ['/dev/shm/']".to_string(),
            "auxiliaryRoots/0",
        ),
    ] {
        let p = v2_project();
        edit_spec(&p, IMPL_RESULT, &format!("{IMPL_RESULT}\n{line}"));
        spec_error(&p, "path/too-broad", &format!("{IMPL}/{key}"));
    }
    // Through a link, judged where it lands.
    let outside = tempfile::tempdir().unwrap();
    symlink("/", outside.path().join("slash")).unwrap();
    let p = v2_project();
    let via = outside.path().join("slash");
    edit_spec(
        &p,
        IMPL_RESULT,
        &format!("{IMPL_RESULT}\nworktreePath = '{}'", via.display()),
    );
    spec_error(&p, "path/too-broad", &format!("{IMPL}/worktreePath"));
    // Near miss: a worktree beside the project, and directories whose names
    // merely start like a kernel interface's.
    let p = v2_project();
    let wt = outside.path().join("wt");
    edit_spec(
        &p,
        IMPL_RESULT,
        &format!(
            "{IMPL_RESULT}\nworktreePath = '{}'\nauxiliaryRoots = ['/devices-not-dev', 'scratch']",
            wt.display()
        ),
    );
    let plan = planned(&p);
    let real_wt = outside.path().canonicalize().unwrap().join("wt");
    assert_eq!(
        plan["stages"][0]["jobs"][0]["worktreePath"],
        json!(real_wt.to_str().unwrap())
    );
}

// ---------------------------------------------------------------------------
// aliases through symlinked directories

/// A v1 spec of `command` workers: (workerId, resultPath, stage).
fn v1_spec(p: &Project, workers: &[(&str, &str, &str)]) {
    p.write_json("run/run-manifest.json", &v1_manifest());
    let mut spec = String::new();
    let mut last = "";
    for (id, result, stage) in workers {
        p.write(&format!("prompts/{id}.md"), "# work\n");
        if *stage != last {
            spec.push_str(&format!("[[stages]]\nname = \"{stage}\"\n\n"));
            last = stage;
        }
        spec.push_str(&format!(
            "[[stages.workers]]\nworkerId = \"{id}\"\nprovider = \"command\"\nrole = \"analyst\"\npromptPath = \"prompts/{id}.md\"\nresultPath = \"{result}\"\ncommand = [\"sh\", \"-c\", \"echo done > {result}\"]\n\n"
        ));
    }
    p.write("spec.toml", &spec);
}

fn aliased() -> Project {
    let p = Project::new();
    std::fs::create_dir_all(p.path("out")).unwrap();
    symlink("out", p.path("alias")).unwrap();
    p
}

#[test]
fn two_spellings_of_one_file_conflict() {
    let p = aliased();
    v1_spec(
        &p,
        &[("w1", "out/r.md", "one"), ("w2", "alias/r.md", "one")],
    );
    let run = assert_refused(&p, plan_json(&p, "spec.toml"), "rules/write-conflict");
    assert!(run.stdout.contains("out/r.md"), "{}", run.stdout);
    // Near miss: in two stages they plan, and the plan records the real path.
    let p = aliased();
    v1_spec(
        &p,
        &[("w1", "out/r.md", "one"), ("w2", "alias/r.md", "two")],
    );
    let plan = planned(&p);
    assert_eq!(plan["stages"][1]["jobs"][0]["resultPath"], "out/r.md");
    assert!(plan["stages"][1]["jobs"][0]["writePolicy"]["allow"]
        .as_array()
        .unwrap()
        .contains(&json!("out/r.md")));
}

#[test]
fn a_result_through_a_symlinked_directory_is_the_jobs_own_at_exec() {
    // The report: the job's own result, written through `alias`, was
    // flagged as a violation of its policy.
    let p = aliased();
    v1_spec(&p, &[("w1", "alias/r.md", "one")]);
    let run = plan_json(&p, "spec.toml");
    assert_eq!(run.code, 0, "{}", run.stdout);
    let run = p.okstra(&["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(p.read("out/r.md"), "done\n");
    assert_eq!(p.worker_row("w1")["status"], "completed");
}

#[test]
fn a_symlink_out_of_the_root_is_an_escape() {
    let outside = tempfile::tempdir().unwrap();
    let p = Project::new();
    symlink(outside.path(), p.path("link")).unwrap();
    v1_spec(&p, &[("w1", "link/r.md", "one")]);
    let run = assert_refused(&p, plan_json(&p, "spec.toml"), "path/escapes-root");
    assert_eq!(run.codes(), ["path/escapes-root"]);
    // Near miss: a link that stays inside.
    let p = aliased();
    v1_spec(&p, &[("w1", "alias/r.md", "one")]);
    planned(&p);
}

// ---------------------------------------------------------------------------
// a project root whose name is not UTF-8

#[test]
fn a_project_root_that_is_not_utf8_is_refused_not_made_lossy() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let p = v2_project();
    let odd = p.path("").join(OsStr::from_bytes(b"root-\xff"));
    std::fs::create_dir(&odd).unwrap();
    for entry in ["run", "prompts", "spec.toml"] {
        std::fs::rename(p.path(entry), odd.join(entry)).unwrap();
    }
    let plan = |root: &Path| {
        let out = assert_cmd::Command::cargo_bin("okstra")
            .unwrap()
            .current_dir(root)
            .args(["plan", "spec.toml", "--manifest", "run/run-manifest.json"])
            .args([
                "--out",
                "plan.json",
                "--format",
                "json",
                "--project-root",
                ".",
            ])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code(), stdout)
    };
    let (code, stdout) = plan(&odd);
    assert_eq!(code, Some(2), "{stdout}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["errors"][0]["code"], "input/invalid", "{stdout}");
    assert!(doc["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("UTF-8"));
    assert!(!odd.join("plan.json").exists());
    // Near miss: a UTF-8 name with a space and an accent.
    let fine = p.path("root é x");
    std::fs::rename(&odd, &fine).unwrap();
    let (code, stdout) = plan(&fine);
    assert_eq!(code, Some(0), "{stdout}");
}

// ---------------------------------------------------------------------------
// env

#[test]
fn env_names_and_values_are_judged_at_plan_time() {
    for (env, at_key) in [
        (r#"env = { "A=B" = "x" }"#, "A=B"),
        (r#"env = { "" = "x" }"#, ""),
        (r#"env = { "1A" = "x" }"#, "1A"),
        (r#"env = { "A-B" = "x" }"#, "A-B"),
        (r#"env = { "A\u0000B" = "x" }"#, "A\u{0}B"),
        (r#"env = { A = "x\u0000y" }"#, "A"),
    ] {
        let p = v2_project();
        edit_spec(&p, IMPL_RESULT, &format!("{IMPL_RESULT}\n{env}"));
        let pointer = format!("{IMPL}/env/{at_key}");
        let e = spec_error(&p, "schema/violation", &pointer);
        let line = p.line_of("spec.toml", |l| l == env);
        assert_eq!(e["line"], json!(line), "{env}");
        assert_eq!(e["worker"], "impl-1", "{env}");
    }
    // Near miss: portable names, any value without NUL, in the defaults too.
    let p = v2_project();
    edit_spec(
        &p,
        IMPL_RESULT,
        &format!("{IMPL_RESULT}\nenv = {{ MY_VAR = \"a=b c\", _A1 = \"\" }}"),
    );
    edit_spec(
        &p,
        "modelExecutionValue = \"model-a\"",
        "modelExecutionValue = \"model-a\"\nenv = { PATH = \"/usr/bin:/bin\" }",
    );
    planned(&p);
}

#[test]
fn env_in_a_json_spec_and_in_validate() {
    let p = v2_project();
    let mut doc = json_spec(&p);
    doc["defaults"]["env"] = json!({"A=B": "x"});
    p.write_json("spec.json", &doc);
    the_error(
        &p,
        plan_json(&p, "spec.json"),
        "schema/violation",
        "spec.json",
        "/defaults/env/A=B",
    );
    let run = p.okstra(&[
        "validate",
        "spec.json",
        "--kind",
        "jobs",
        "--format",
        "json",
    ]);
    assert_eq!(run.code, 2);
    assert_eq!(run.codes(), ["schema/violation"], "{}", run.stdout);
}
