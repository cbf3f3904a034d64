//! Roster mode, translator reservations and the exec-time binding gate,
//! run through the real binary on fixture projects: each refusal code
//! triggered beside a near miss, and roster and translator runs end to end
//! (plan, then exec with `command` workers). `okstra doctor` is in
//! tests/it/doctor.rs.

use crate::common::*;
use serde_json::{json, Value};

fn edit_json(p: &Project, rel: &str, f: impl FnOnce(&mut Value)) {
    let mut v = p.read_json(rel);
    f(&mut v);
    p.write_json(rel, &v);
}

fn plan_args(workers: Option<&str>) -> Vec<&str> {
    let mut args = vec![
        "plan",
        "--manifest",
        "run/run-manifest.json",
        "--out",
        "plan.json",
        "--format",
        "json",
    ];
    if let Some(w) = workers {
        args.extend(["--workers", w]);
    }
    args
}

#[track_caller]
fn refused(p: &Project, workers: Option<&str>, code: &str) -> Run {
    assert_refused(p, p.okstra(&plan_args(workers)), code)
}

#[track_caller]
fn planned(p: &Project, workers: Option<&str>) -> Value {
    let run = p.okstra(&plan_args(workers));
    assert_eq!(
        run.code, 0,
        "expected a clean plan; stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    let out = run.json();
    let plan = p.read_json("plan.json");
    std::fs::remove_file(p.path("plan.json")).unwrap();
    json!({"out": out, "plan": plan})
}

fn plan_keys(planned: &Value) -> Vec<String> {
    planned["plan"]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["jobs"].as_array().unwrap().iter())
        .map(|j| j["key"].as_str().unwrap().to_string())
        .collect()
}

fn row(id: &str, provider: &str, role: &str, script: &str) -> Value {
    json!({
        "workerId": id, "provider": provider, "role": role,
        "promptPath": format!("prompts/{id}.md"), "resultPath": format!("results/{id}.md"),
        "modelExecutionValue": "", "status": "not-run", "reason": "",
        "command": ["sh", "-c", script]
    })
}

fn writes(id: &str) -> String {
    format!("mkdir -p results && echo done > results/{id}.md")
}

/// A v1 roster: two command workers, a report-writer and a worker whose
/// provider okstra has no adapter for.
fn roster_project() -> Project {
    let p = Project::new();
    let mut m = v1_manifest();
    m["recommendedWorkers"] = json!(["w1", "w2", "report-writer", "aider"]);
    p.write_json("run/run-manifest.json", &m);
    for id in ["w1", "w2", "report-writer", "aider"] {
        p.write(&format!("prompts/{id}.md"), &format!("# {id}\n"));
    }
    p.write_json(
        "run/team-state.json",
        &json!({"workers": [
            row("w1", "command", "reviewer", &writes("w1")),
            row("w2", "command", "reviewer", &writes("w2")),
            row("report-writer", "command", "report-writer", &writes("report-writer")),
            row("aider", "aider", "reviewer", "true"),
        ], "workerDispatches": [], "agentDispatches": [], "agentResultLinks": []}),
    );
    p
}

fn worker_row(p: &Project, id: &str) -> Value {
    p.read_json("run/team-state.json")["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["workerId"] == id)
        .cloned()
        .unwrap_or(Value::Null)
}

#[test]
fn roster_default_selection_and_skips_on_pristine_rows() {
    let p = roster_project();
    // A row someone already gave a reason keeps it.
    edit_json(&p, "run/team-state.json", |t| {
        t["workers"][3]["reason"] = json!("lead: not this run")
    });
    let got = planned(&p, None);
    assert_eq!(plan_keys(&got), ["w1", "w2"]);
    assert_eq!(got["plan"]["run"]["mode"], "roster");
    // Team-state is not a plan input (exec writes it).
    assert!(got["plan"]["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i["kind"] != "team-state"));
    let skipped = got["out"]["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2);
    assert_eq!(skipped[0]["worker"], "report-writer");
    assert_eq!(skipped[0]["recorded"], true);
    assert_eq!(skipped[1]["worker"], "aider");
    assert_eq!(skipped[1]["recorded"], false);
    let rw = worker_row(&p, "report-writer");
    assert_eq!(rw["status"], "not-run");
    assert!(rw["reason"].as_str().unwrap().contains("runs alone"));
    assert_eq!(worker_row(&p, "aider")["reason"], "lead: not this run");
    assert_eq!(worker_row(&p, "w1")["reason"], "");
}

#[test]
fn roster_empty() {
    let p = roster_project();
    edit_json(&p, "run/run-manifest.json", |m| {
        m["recommendedWorkers"] = json!([])
    });
    let run = refused(&p, None, "roster/empty");
    assert_eq!(run.json()["errors"][0]["file"], "run/run-manifest.json");
    // Near miss: one worker in the roster.
    edit_json(&p, "run/run-manifest.json", |m| {
        m["recommendedWorkers"] = json!(["w1"])
    });
    assert_eq!(plan_keys(&planned(&p, None)), ["w1"]);
}

#[test]
fn roster_unknown_workers_are_each_named_and_nothing_is_written() {
    let p = roster_project();
    let before = p.read("run/team-state.json");
    let run = refused(&p, Some("w1,nope,zip"), "roster/unknown-worker");
    let msg = run.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("nope") && msg.contains("zip") && !msg.contains("w1"),
        "{msg}"
    );
    assert_eq!(
        p.read("run/team-state.json"),
        before,
        "a refused plan writes nothing"
    );
    // Near miss: named workers of the roster, no skips recorded.
    let got = planned(&p, Some("w2,w1"));
    assert_eq!(plan_keys(&got), ["w1", "w2"]);
    assert_eq!(got["out"]["skipped"], json!([]));
    assert_eq!(p.read("run/team-state.json"), before);
}

#[test]
fn roster_report_writer_only_alone() {
    let p = roster_project();
    assert_eq!(
        plan_keys(&planned(&p, Some("report-writer"))),
        ["report-writer"]
    );
    refused(
        &p,
        Some("w1,report-writer"),
        "rules/report-writer-isolation",
    );
}

#[test]
fn roster_refusals_of_rows() {
    let p = roster_project();
    // Named explicitly, a provider without an adapter is refused.
    refused(&p, Some("aider"), "input/invalid");
    // A row the job builder refuses: its prompt is missing. No skip is
    // recorded by a refused plan.
    std::fs::remove_file(p.path("prompts/w2.md")).unwrap();
    let run = refused(&p, None, "input/missing");
    assert_eq!(run.json()["errors"][0]["file"], "run/team-state.json");
    assert_eq!(worker_row(&p, "report-writer")["reason"], "");
    // A recommended worker without a row.
    let p = roster_project();
    edit_json(&p, "run/run-manifest.json", |m| {
        m["recommendedWorkers"] = json!(["w1", "ghost"])
    });
    let run = refused(&p, None, "input/missing");
    assert!(run.stdout.contains("ghost"));
}

#[test]
fn roster_end_to_end() {
    let p = roster_project();
    let run = p.okstra(&[
        "plan",
        "--manifest",
        "run/run-manifest.json",
        "--out",
        "plan.json",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("skipped report-writer"));
    let run = p.okstra(&["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let jobs = run.json()["jobs"].as_array().unwrap().clone();
    assert_eq!(jobs.len(), 2);
    assert!(jobs.iter().all(|j| j["status"] == "completed"));
    assert_eq!(worker_row(&p, "w1")["status"], "completed");
    assert_eq!(worker_row(&p, "w2")["status"], "completed");
    assert_eq!(worker_row(&p, "report-writer")["status"], "not-run");
    // Then the report-writer, alone.
    let run = p.okstra(&plan_args(Some("report-writer")));
    assert_eq!(run.code, 0, "{}", run.stdout);
    let run = p.okstra(&["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(worker_row(&p, "report-writer")["status"], "completed");
}

#[test]
fn served_model_mismatch_exit_is_never_completed() {
    let p = roster_project();
    edit_json(&p, "run/team-state.json", |t| {
        t["workers"][0]["command"] = json!(["sh", "-c", format!("{}; exit 86", writes("w1"))])
    });
    let run = p.okstra(&plan_args(Some("w1")));
    assert_eq!(run.code, 0, "{}", run.stdout);
    let run = p.okstra(&["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let job = &run.json()["jobs"][0];
    assert_eq!(job["status"], "error");
    assert_eq!(job["attempts"], 1, "a served-model mismatch is not retried");
    assert!(job["reason"].as_str().unwrap().contains("different model"));
}

// ---------------------------------------------------------------- translator

const TR_PROMPT: &str =
    "# translate\n**Result Path:** results/tr.md\n**Worker Result Path:** results/tr-worker.md\n";

fn reservation() -> Value {
    json!({
        "schemaVersion": "2.0", "executionIdentityVersion": 2, "invocationId": "inv-tr",
        "assignmentRef": "translator", "audience": "translator", "dispatchKind": "translator",
        "promptPath": "prompts/tr.md", "metadataPath": "prompts/tr.md.meta.json",
        "invocationRef": "inv-tr", "participantRef": "p-tr", "roleExecutionRef": "re-tr",
        "dutyId": "translator", "attempt": 1
    })
}

fn translator_project() -> Project {
    let p = v2_project();
    edit_json(&p, "run/run-manifest.json", |m| {
        m["invocationAssignments"] = json!({"translator": {
            "provider": "command", "modelExecutionValue": "model-a", "runner": "cli-wrapper",
            "command": ["sh", "-c", "mkdir -p results && echo t > results/tr.md && echo w > results/tr-worker.md"]
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
    p.write_json("run/reservations/tr-1.json", &reservation());
    p
}

const TR: Option<&str> = Some("translator");

#[test]
fn translator_plans_from_its_reservation() {
    let p = translator_project();
    let got = planned(&p, TR);
    assert_eq!(plan_keys(&got), ["translator"]);
    let plan = &got["plan"];
    assert_eq!(plan["run"]["mode"], "translator");
    let inputs = plan["inputs"].as_array().unwrap();
    assert!(inputs
        .iter()
        .any(|i| i["kind"] == "reservation" && i["path"] == "run/reservations/tr-1.json"));
    let job = &plan["stages"][0]["jobs"][0];
    assert_eq!(job["resultPath"], "results/tr.md");
    assert_eq!(job["workerResultPath"], "results/tr-worker.md");
    assert_eq!(job["dispatchId"], "inv-tr:attempt-1");
    assert_eq!(job["role"], "translator");
}

#[test]
fn translator_no_canonical_execution() {
    let p = translator_project();
    edit_json(&p, "run/run-manifest.json", |m| {
        m["invocationAssignments"]["translator"]["runner"] = json!("pane")
    });
    refused(&p, TR, "translator/no-canonical-execution");
    let p = translator_project();
    edit_json(&p, "run/run-manifest.json", |m| {
        m["roleExecutions"][2]["binding"]["resolvedExecutionValue"] = json!("model-b")
    });
    refused(&p, TR, "translator/no-canonical-execution");
    // Near miss: the fixture as is.
    planned(&translator_project(), TR);
}

#[test]
fn translator_reservation_count() {
    // Two candidates.
    let p = translator_project();
    let mut second = reservation();
    second["invocationId"] = json!("inv-tr-2");
    p.write_json("run/reservations/tr-2.json", &second);
    let run = refused(&p, TR, "translator/reservation-count");
    assert!(run.stdout.contains("tr-2.json"));
    // Near miss: the second has an extra key, so it is no candidate.
    second["note"] = json!("draft");
    p.write_json("run/reservations/tr-2.json", &second);
    planned(&p, TR);
    // None: the only reservation was already dispatched.
    let p = translator_project();
    p.write_json(
        "run/team-state.json",
        &json!({"workers": [], "workerDispatches": [{"dispatchId": "inv-tr:attempt-1"}]}),
    );
    refused(&p, TR, "translator/reservation-count");
    // None: no reservation root in the manifest.
    let p = translator_project();
    edit_json(&p, "run/run-manifest.json", |m| {
        m.as_object_mut().unwrap().remove("agentContract");
    });
    refused(&p, TR, "translator/reservation-count");
}

#[test]
fn translator_metadata_path() {
    let p = translator_project();
    edit_json(&p, "run/reservations/tr-1.json", |r| {
        r["metadataPath"] = json!("prompts/tr.meta.json")
    });
    let run = refused(&p, TR, "translator/metadata-path");
    assert_eq!(
        run.json()["errors"][0]["file"],
        "run/reservations/tr-1.json"
    );
    // Near miss: the same file written differently.
    edit_json(&p, "run/reservations/tr-1.json", |r| {
        r["metadataPath"] = json!("./prompts/../prompts/tr.md.meta.json")
    });
    planned(&p, TR);
}

#[test]
fn translator_reservation_mismatch() {
    let p = translator_project();
    edit_json(&p, "prompts/tr.md.meta.json", |m| {
        m["invocationRef"] = json!("inv-other")
    });
    let run = refused(&p, TR, "translator/reservation-mismatch");
    assert!(run.stdout.contains("invocationRef"));
    // Near miss: the metadata carries more than the reservation restates.
    let p = translator_project();
    edit_json(&p, "prompts/tr.md.meta.json", |m| {
        m["digests"]["extraDigest"] = json!("x")
    });
    planned(&p, TR);
}

#[test]
fn translator_prompt_headers() {
    let p = translator_project();
    p.write(
        "prompts/tr.md",
        "# translate\n**Result Path:** results/tr.md\n",
    );
    refused(&p, TR, "translator/prompt-headers");
    p.write(
        "prompts/tr.md",
        "**Result Path:** results/tr.md\n**Worker Result Path:** ./results/tr.md\n",
    );
    refused(&p, TR, "translator/prompt-headers");
    p.write(
        "prompts/tr.md",
        &format!("{TR_PROMPT}**Worker Result Path:** results/x.md\n"),
    );
    refused(&p, TR, "translator/prompt-headers");
    // Near miss: other bold lines do not count.
    p.write(
        "prompts/tr.md",
        &format!("{TR_PROMPT}**Result Paths:** x\n"),
    );
    planned(&p, TR);
}

#[test]
fn translator_in_a_spec_still_needs_its_reservation() {
    // The reservation path is the only way in: the same translator written
    // as a spec entry stays refused.
    let p = translator_project();
    p.write(
        "tr.toml",
        r#"[[workers]]
provider = "command"
schemaVersion = "2.0"
executionIdentityVersion = 2
participantRef = "p-tr"
roleExecutionRef = "re-tr"
executionLabel = "tr-1"
dutyId = "translator"
invocationRef = "inv-tr"
assignmentRef = "translator"
attempt = 1
role = "translator"
dispatchKind = "translator"
promptPath = "prompts/tr.md"
resultPath = "results/tr.md"
modelExecutionValue = "model-a"
command = ["true"]
"#,
    );
    let run = plan_json(&p, "tr.toml");
    assert_eq!(run.code, 2);
    assert!(run
        .codes()
        .contains(&"rules/translator-needs-reservation".to_string()));
}

#[test]
fn translator_end_to_end_status_lives_on_its_dispatch_row() {
    let p = translator_project();
    let run = p.okstra(&plan_args(TR));
    assert_eq!(run.code, 0, "{}", run.stdout);
    let run = p.okstra(&["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let team = p.read_json("run/team-state.json");
    assert!(
        team["workers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["workerId"] != "translator"),
        "a translator has no workers[] row: {team}"
    );
    let rows: Vec<&Value> = team["workerDispatches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["dispatchId"] == "inv-tr:attempt-1")
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], "completed");
    assert_eq!(rows[0]["executionLabel"], "tr-1");
    // The reservation is spent: planning it again finds no candidate.
    std::fs::remove_file(p.path("plan.json")).unwrap();
    refused(&p, TR, "translator/reservation-count");
}

// ------------------------------------------------------- exec binding gate

#[test]
fn exec_refuses_a_job_whose_binding_changed_mid_run() {
    let p = v2_project();
    // The implementer re-binds the verifier's role execution while it runs
    // (standing in for the lead, so unconfined: a confined worker cannot
    // write the manifest).
    let spec = p.read("spec.toml").replacen(
        "command = [\"sh\", \"-c\", \"mkdir -p results && echo done > results/impl.md\"]",
        "command = [\"sh\", \"-c\", \"mkdir -p results && echo done > results/impl.md && sed -i 's/sha256:/sha256:0/' run/run-manifest.json\"]\nconfinement = \"none\"",
        1,
    );
    p.write("spec.toml", &spec);
    let run = plan_json(&p, "spec.toml");
    assert_eq!(run.code, 0, "{}", run.stdout);
    let run = p.okstra(&["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    let out = run.json();
    assert_eq!(out["errors"][0]["code"], "exec/binding-changed");
    assert_eq!(out["errors"][0]["worker"], "ver-1");
    assert_eq!(out["jobs"][0]["status"], "completed");
    assert_eq!(out["jobs"][1]["status"], "not-run");
    assert!(out["jobs"][1]["reason"]
        .as_str()
        .unwrap()
        .contains("exec/binding-changed"));
    assert!(
        !p.exists("prompts/ver.md.log"),
        "the refused job never started"
    );
    let ver = p.read_json("run/team-state.json")["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["workerId"] == "ver-1")
        .cloned()
        .unwrap();
    assert_eq!(ver["status"], "not-run");
}

#[test]
fn exec_binding_gate_near_miss_manifest_edit_outside_bindings() {
    // A manifest edit that leaves every binding whole does not stop a job.
    let p = v2_project();
    let spec = p.read("spec.toml").replacen(
        "command = [\"sh\", \"-c\", \"mkdir -p results && echo done > results/impl.md\"]",
        "command = [\"sh\", \"-c\", \"mkdir -p results && echo done > results/impl.md && sed -i 's/fixture-task/fixture-task-2/' run/run-manifest.json\"]\nconfinement = \"none\"",
        1,
    );
    p.write("spec.toml", &spec);
    assert_eq!(plan_json(&p, "spec.toml").code, 0);
    let run = p.okstra(&["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
}

#[test]
fn exec_refuses_a_plan_whose_binding_changed_before_it_started() {
    let p = v2_project();
    assert_eq!(plan_json(&p, "spec.toml").code, 0);
    edit_json(&p, "run/run-manifest.json", |m| {
        m["models"]["m1"]["modelId"] = json!("model-b")
    });
    let run = p.okstra(&["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    let codes = run.codes();
    assert!(
        codes.contains(&"exec/binding-changed".to_string()),
        "{codes:?}"
    );
    assert!(codes.contains(&"plan/stale".to_string()), "{codes:?}");
    assert!(
        !p.exists("run/team-state.json"),
        "a refused exec writes nothing"
    );
    assert!(!p.exists("prompts/impl.md.log"));
}
