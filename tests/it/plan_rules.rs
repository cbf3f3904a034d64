//! Every error code of docs/errors.md#error-codes, triggered by the real binary
//! on a fixture project, each beside a near miss that must plan cleanly.

use crate::common::*;
use serde_json::{json, Value};

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

#[track_caller]
fn refused(p: &Project, code: &str) -> Run {
    assert_refused(p, plan_json(p, "spec.toml"), code)
}

#[track_caller]
fn planned(p: &Project) {
    let run = plan_json(p, "spec.toml");
    assert_eq!(
        run.code, 0,
        "expected a clean plan; stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    assert!(p.exists("plan.json"));
    std::fs::remove_file(p.path("plan.json")).unwrap();
}

#[test]
fn the_v2_fixture_plans_cleanly() {
    planned(&v2_project());
}

#[test]
fn identity_mixed_versions() {
    let p = v2_project();
    edit_spec(
        &p,
        "participantRef = \"p-impl\"",
        "participantRef = \"p-impl\"\nworkerId = \"x\"",
    );
    let run = refused(&p, "identity/mixed-versions");
    let e = &run.json()["errors"][0];
    assert_eq!(e["file"], "spec.toml");
    assert_eq!(e["worker"], "impl-1");
    // Near miss: a plain v1 entry.
    let p = v1_project(&[("w1", "results/a.md", "")]);
    planned(&p);
}

#[test]
fn identity_mixed_versions_in_metadata() {
    let p = v2_project();
    edit_json(&p, "prompts/impl.md.meta.json", |m| {
        m["schemaVersion"] = json!(1)
    });
    refused(&p, "identity/mixed-versions");
}

#[test]
fn identity_unsupported_version() {
    let p = v2_project();
    edit_spec(
        &p,
        "executionIdentityVersion = 2",
        "executionIdentityVersion = 3",
    );
    refused(&p, "identity/unsupported-version");
}

#[test]
fn identity_bad_attempt_points_at_the_key() {
    let p = v2_project();
    edit_spec(
        &p,
        "attempt = 1\nrole = \"implementer\"",
        "attempt = 0\nrole = \"implementer\"",
    );
    let run = refused(&p, "identity/bad-attempt");
    let e = run.error("identity/bad-attempt");
    let line = p.line_of("spec.toml", |l| l == "attempt = 0");
    assert_eq!(e["line"], json!(line));
    assert_eq!(e["column"], json!(11));
    // The schema also rejects attempt = 0; only the rule's code is reported.
    assert!(
        !run.codes().contains(&"schema/violation".to_string()),
        "{:?}",
        run.codes()
    );
    let p = v2_project();
    edit_spec(
        &p,
        "attempt = 1\nrole = \"implementer\"",
        "attempt = true\nrole = \"implementer\"",
    );
    refused(&p, "identity/bad-attempt");
}

#[test]
fn identity_missing_field() {
    let p = v2_project();
    edit_spec(&p, "executionLabel = \"impl-1\"", "executionLabel = \"\"");
    refused(&p, "identity/missing-field");
}

#[test]
fn identity_no_state_key() {
    let p = v2_project();
    edit_spec(
        &p,
        "assignmentRef = \"initial/impl-1\"",
        "assignmentRef = \"initial/\"",
    );
    refused(&p, "identity/no-state-key");
}

#[test]
fn identity_duplicate_state_key_in_one_stage_but_not_across() {
    let p = v1_project(&[("w1", "results/a.md", ""), ("w1", "results/b.md", "")]);
    refused(&p, "identity/duplicate");
    let p = v1_project(&[("w1", "results/a.md", ""), ("w1", "results/b.md", "second")]);
    planned(&p);
}

#[test]
fn identity_duplicate_dispatch_id() {
    let p = v1_project(&[("w1", "results/a.md", ""), ("w2", "results/b.md", "second")]);
    for w in ["w1", "w2"] {
        p.write_json(
            &format!("prompts/{w}.md.meta.json"),
            &v1_metadata("inv-same"),
        );
    }
    refused(&p, "identity/duplicate");
    p.write_json("prompts/w2.md.meta.json", &v1_metadata("inv-other"));
    planned(&p);
}

#[test]
fn metadata_incomplete_and_invalid() {
    let p = v2_project();
    edit_json(&p, "prompts/impl.md.meta.json", |m| {
        m.as_object_mut().unwrap().remove("digests");
    });
    refused(&p, "metadata/incomplete");
    let p = v2_project();
    edit_json(&p, "prompts/impl.md.meta.json", |m| {
        m["modelAssignment"]["hostModelValue"] = json!(5)
    });
    refused(&p, "metadata/invalid");
    let p = v2_project();
    edit_json(&p, "prompts/impl.md.meta.json", |m| {
        m["modelAssignment"]["hostModelValue"] = json!("host-model")
    });
    planned(&p);
}

#[test]
fn authority_metadata_version() {
    let p = v2_project();
    edit_json(&p, "prompts/impl.md.meta.json", |m| {
        m["schemaVersion"] = json!(1);
        m.as_object_mut()
            .unwrap()
            .remove("executionIdentityVersion");
    });
    refused(&p, "authority/metadata-version");
    let p = v2_project();
    std::fs::remove_file(p.path("prompts/impl.md.meta.json")).unwrap();
    refused(&p, "authority/metadata-version");
}

#[test]
fn authority_invocation_mismatch() {
    let p = v2_project();
    edit_json(&p, "prompts/impl.md.meta.json", |m| {
        m["invocationRef"] = json!("inv-other")
    });
    refused(&p, "authority/invocation-mismatch");
}

#[test]
fn authority_identity_mismatch() {
    let p = v2_project();
    edit_json(&p, "prompts/impl.md.meta.json", |m| m["attempt"] = json!(2));
    refused(&p, "authority/identity-mismatch");
}

#[test]
fn authority_prompt_mismatch() {
    let p = v2_project();
    edit_json(&p, "prompts/impl.md.meta.json", |m| {
        m["prompt"]["path"] = json!("prompts/ver.md")
    });
    refused(&p, "authority/prompt-mismatch");
    // Near miss: the same file written differently still matches.
    let p = v2_project();
    edit_json(&p, "prompts/impl.md.meta.json", |m| {
        m["prompt"]["path"] = json!("./prompts/../prompts/impl.md")
    });
    planned(&p);
}

#[test]
fn authority_role_execution() {
    let p = v2_project();
    edit_json(&p, "run/run-manifest.json", |m| {
        m["roleExecutions"][0]["provider"] = json!("claude")
    });
    refused(&p, "authority/role-execution");
    let p = v2_project();
    edit_spec(
        &p,
        "dutyId = \"implementation-executor\"",
        "dutyId = \"no-such-duty\"",
    );
    edit_json(&p, "prompts/impl.md.meta.json", |m| {
        m["dutyId"] = json!("no-such-duty")
    });
    refused(&p, "authority/role-execution");
    // Near miss: the manifest's duties{} extends the catalog.
    edit_json(&p, "run/run-manifest.json", |m| {
        m["duties"] = json!({"no-such-duty": "implementer"})
    });
    planned(&p);
}

#[test]
fn authority_assignment() {
    let p = v2_project();
    edit_json(&p, "prompts/impl.md.meta.json", |m| {
        m["modelAssignment"]["modelExecutionValue"] = json!("model-b")
    });
    refused(&p, "authority/assignment");
    let p = v2_project();
    edit_json(&p, "prompts/impl.md.meta.json", |m| {
        m["dispatchKind"] = json!("reverify-r1")
    });
    refused(&p, "authority/assignment");
}

#[test]
fn authority_binding() {
    let p = v2_project();
    edit_json(&p, "run/run-manifest.json", |m| {
        m["roleExecutions"][0]["modelSpecDigest"] = json!(format!("sha256:{}", "0".repeat(64)))
    });
    refused(&p, "authority/binding");
    let p = v2_project();
    edit_json(&p, "run/run-manifest.json", |m| {
        m["roleExecutions"][0]["modelRef"] = json!("m-unknown")
    });
    refused(&p, "authority/binding");
}

#[test]
fn rules_translator_needs_reservation() {
    let p = v2_project();
    edit_json(&p, "run/run-manifest.json", |m| {
        m["roleExecutions"][0]["role"] = json!("translator")
    });
    refused(&p, "rules/translator-needs-reservation");
}

#[test]
fn rules_phase_order_names_both_sides() {
    let p = v2_project();
    edit_spec(&p, "[[stages]]\nname = \"verify\"\n\n", "");
    let run = refused(&p, "rules/phase-order");
    let msg = run.error("rules/phase-order")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("executor impl-1") && msg.contains("verifier ver-1"),
        "{msg}"
    );
}

#[test]
fn rules_phase_order_across_stages() {
    let p = v2_project();
    let text = p.read("spec.toml");
    let (head, rest) = text.split_once("[[stages]]\nname = \"implement\"").unwrap();
    let (implement, verify) = rest.split_once("[[stages]]\nname = \"verify\"").unwrap();
    p.write("spec.toml", &format!("{head}[[stages]]\nname = \"verify\"{verify}\n[[stages]]\nname = \"implement\"{implement}"));
    refused(&p, "rules/phase-order");
}

#[test]
fn rules_report_writer_isolation() {
    let p = v1_project(&[
        ("report-writer", "results/r.md", ""),
        ("w1", "results/a.md", ""),
    ]);
    refused(&p, "rules/report-writer-isolation");
    let p = v1_project(&[
        ("w1", "results/a.md", ""),
        ("report-writer", "results/r.md", "last"),
    ]);
    planned(&p);
    let p = v1_project(&[
        ("report-writer", "results/r.md", ""),
        ("w1", "results/a.md", "later"),
    ]);
    refused(&p, "rules/report-writer-isolation");
}

#[test]
fn rules_write_conflict() {
    let p = v1_project(&[("w1", "results/same.md", ""), ("w2", "results/same.md", "")]);
    let run = refused(&p, "rules/write-conflict");
    assert!(run.stdout.contains("results/same.md"));
    let p = v1_project(&[
        ("w1", "results/same.md", ""),
        ("w2", "results/same.md", "later"),
    ]);
    planned(&p);
}

#[test]
fn rules_reverify_kind() {
    let p = v1_project(&[("w1", "results/a.md", "")]);
    let text = p.read("spec.toml").replace(
        "role = \"analyst\"",
        "role = \"analyst\"\ndispatchKind = \"reverify-r0\"",
    );
    p.write("spec.toml", &text);
    refused(&p, "rules/reverify-kind");
    p.write("spec.toml", &text.replace("reverify-r0", "reverify-r2"));
    planned(&p);
}

#[test]
fn path_escapes_root() {
    let p = v2_project();
    edit_spec(
        &p,
        "resultPath = \"results/impl.md\"",
        "resultPath = \"../outside.md\"",
    );
    refused(&p, "path/escapes-root");
}

#[test]
fn schema_violation_unknown_key_with_suggestion() {
    let p = v2_project();
    edit_spec(
        &p,
        "resultPath = \"results/impl.md\"",
        "resultPath = \"results/impl.md\"\nresultPth = \"x\"",
    );
    let run = refused(&p, "schema/violation");
    let e = run.error("schema/violation");
    let line = p.line_of("spec.toml", |l| l.starts_with("resultPth"));
    assert_eq!(e["line"], json!(line));
}

#[test]
fn roster_unknown_worker_in_spec_mode() {
    let p = v2_project();
    let run = p.okstra(&[
        "plan",
        "spec.toml",
        "--manifest",
        "run/run-manifest.json",
        "--out",
        "plan.json",
        "--format",
        "json",
        "--workers",
        "impl-1,nobody",
    ]);
    assert_eq!(run.code, 2);
    assert_eq!(run.codes(), vec!["roster/unknown-worker"]);
    let run = p.okstra(&[
        "plan",
        "spec.toml",
        "--manifest",
        "run/run-manifest.json",
        "--out",
        "plan.json",
        "--format",
        "json",
        "--workers",
        "impl-1",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

#[test]
fn input_syntax_and_missing() {
    let p = v2_project();
    p.write("spec.toml", "[[stages]\nname = 1\n");
    let run = refused(&p, "input/syntax");
    assert_eq!(run.json()["errors"][0]["line"], json!(1));
    let p = v2_project();
    edit_spec(
        &p,
        "promptPath = \"prompts/impl.md\"",
        "promptPath = \"prompts/nope.md\"",
    );
    refused(&p, "input/missing");
}

#[test]
fn every_error_of_every_input_is_reported_at_once() {
    let p = v2_project();
    edit_spec(
        &p,
        "attempt = 1\nrole = \"implementer\"",
        "attempt = 0\nrole = \"implementer\"",
    );
    edit_spec(
        &p,
        "resultPath = \"results/ver.md\"",
        "resultPath = \"../x.md\"",
    );
    let run = refused(&p, "identity/bad-attempt");
    assert!(
        run.codes().contains(&"path/escapes-root".to_string()),
        "{:?}",
        run.codes()
    );
}

#[test]
fn plan_stages_malformed_conformance() {
    let p = Project::new();
    p.write_json(
        "impl-plan.json",
        &json!({"implementationPlanning": {"stages": [
            {"stage": 1, "conformanceTests": "<task_root>/t.sh (requires=[db])"},
            {"stage": 2, "conformanceTests": "t.sh (requires=[gpu])"}
        ]}}),
    );
    let run = p.okstra(&[
        "validate",
        "--kind",
        "implementation-plan",
        "impl-plan.json",
        "--format",
        "json",
    ]);
    assert_eq!(run.code, 2);
    let e = &run.json()["errors"][0];
    assert_eq!(e["code"], "plan-stages/malformed-conformance");
    assert_eq!(
        e["pointer"],
        "/implementationPlanning/stages/1/conformanceTests"
    );
    assert!(e["message"].as_str().unwrap().contains("stage 2"));
    p.write_json("ok.json", &json!({"implementationPlanning": {"stages": [{"stage": 1, "conformanceTests": "t.sh (requires=[db, io])"}, {"stage": 2}]}}));
    let run = p.okstra(&["validate", "--kind", "implementation-plan", "ok.json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

fn v1_metadata(inv: &str) -> Value {
    json!({
        "schemaVersion": 1, "invocationId": inv, "audience": "analysis", "assignmentRef": "initial/x",
        "dispatchKind": "initial", "prompt": {"path": "x"},
        "digests": {"catalogDigest": "c", "assignmentDigest": "a", "dutyDigest": "d", "instructionDigest": "i", "promptDigest": "p"},
        "modelAssignment": {"modelExecutionValue": "", "hostModelValue": null}
    })
}

/// A v1 project: (workerId, resultPath, stage name ("" = the first stage)).
fn v1_project(workers: &[(&str, &str, &str)]) -> Project {
    let p = Project::new();
    p.write_json("run/run-manifest.json", &v1_manifest());
    let mut stages: Vec<(String, Vec<String>)> = Vec::new();
    for (id, result, stage) in workers {
        let stage = if stage.is_empty() { "first" } else { stage };
        p.write(&format!("prompts/{id}.md"), "# work\n");
        let entry = format!(
            "[[stages.workers]]\nworkerId = \"{id}\"\nprovider = \"command\"\nrole = \"{}\"\npromptPath = \"prompts/{id}.md\"\nresultPath = \"{result}\"\ncommand = [\"true\"]\n",
            if *id == "report-writer" { "report-writer" } else { "analyst" }
        );
        match stages.iter_mut().find(|(n, _)| n == stage) {
            Some((_, list)) => list.push(entry),
            None => stages.push((stage.to_string(), vec![entry])),
        }
    }
    let mut spec = String::new();
    for (name, entries) in stages {
        spec.push_str(&format!("[[stages]]\nname = \"{name}\"\n\n"));
        for e in entries {
            spec.push_str(&e);
            spec.push('\n');
        }
    }
    p.write("spec.toml", &spec);
    p
}

#[test]
fn network_bad_rule_beside_hosts_that_are_rules() {
    let p = v2_project();
    let label = "executionLabel = \"impl-1\"";
    edit_spec(
        &p,
        label,
        &format!("{label}\nnetwork = {{ allow = [\"pypi.org\", \"https://api.example.com/v1\"] }}"),
    );
    let run = refused(&p, "network/bad-rule");
    assert!(
        run.stdout.contains("https://api.example.com/v1"),
        "{}",
        run.stdout
    );
    let p = v2_project();
    edit_spec(
        &p,
        label,
        &format!(
            "{label}\nnetwork = {{ allow = [\"pypi.org\", \"*.example.com\", \"10.0.0.1:8080\"] }}"
        ),
    );
    planned(&p);
}
