//! The plan digest of a 10,000-job plan: sealing (`Plan::compute_digest`,
//! what `okstra plan` pays) and checking the document as read
//! (`plan::digest_problem`, what `okstra exec` and `validate` pay). Run with
//! `cargo bench --bench digest`; prints the best of several runs.

use okstra::plan::{digest_problem, Plan};
use std::time::{Duration, Instant};

// As `okstra plan` runs (src/alloc.rs).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One v2 `command` job as `benches/plan.sh` plans it, `{W}` its worker id.
const JOB: &str = r#"{
 "key": "{W}",
 "identity": {"version": "2", "participantRef": "p-{W}", "roleExecutionRef": "re-{W}",
  "executionLabel": "{W}", "dutyId": "analysis", "invocationRef": "inv-{W}",
  "assignmentRef": "initial/{W}", "attempt": 1},
 "provider": "command", "backend": "cli-wrapper", "role": "analyst", "audience": "analysis",
 "dispatchKind": "initial", "round": 1, "promptPath": "prompts/{W}.md",
 "metadataPath": "prompts/{W}.md.meta.json", "resultPath": "results/{W}.md",
 "workerResultPath": "results/{W}.md", "completionPaths": ["results/{W}.md"],
 "modelExecutionValue": "model-a",
 "invocation": {"invocationId": "inv-{W}", "audience": "analysis", "assignmentRef": "initial/{W}",
  "digests": {
   "assignmentDigest": "sha256:0000000000000000000000000000000000000000000000000000000000000000",
   "catalogDigest": "sha256:0000000000000000000000000000000000000000000000000000000000000000",
   "dutyDigest": "sha256:0000000000000000000000000000000000000000000000000000000000000000",
   "instructionDigest": "sha256:0000000000000000000000000000000000000000000000000000000000000000",
   "promptDigest": "sha256:0000000000000000000000000000000000000000000000000000000000000000"},
  "hostModelValue": null},
 "dispatchId": "inv-{W}:attempt-1",
 "command": ["okstra", "worker", "--project-root", "/tmp/bench", "--provider", "command",
  "--model", "model-a", "--prompt", "prompts/{W}.md", "--result", "results/{W}.md",
  "--worker-result", "results/{W}.md", "--worker-key", "{W}", "--presentation", "quiet",
  "--invocation-metadata", "prompts/{W}.md.meta.json", "--", "true"],
 "providerCommand": ["true"], "takesSessionId": false, "idleTimeoutSeconds": 600,
 "livenessMode": "wrapper-status",
 "writePolicy": {"role": "analyst", "allow": ["prompts/{W}.md.log", "prompts/{W}.md.status.json",
  "results/{W}.md", "results/{W}.md.audit.json", "results/{W}.md.errors.json"],
  "digest": "sha256:08d0b583dc781d97f4965cae65407ffb4fe30f639ab7b89104e1e4e8c93b3fb8"},
 "writeEnforcement": {"mutationAudit": "none"}
}"#;

fn plan(jobs: usize) -> Plan {
    let jobs: Vec<String> = (0..jobs)
        .map(|i| JOB.replace("{W}", &format!("w{i:05}")))
        .collect();
    let mut inputs = Vec::new();
    for i in 0..jobs.len() {
        for (kind, path) in [
            ("prompt", format!("prompts/w{i:05}.md")),
            ("metadata", format!("prompts/w{i:05}.md.meta.json")),
        ] {
            inputs.push(serde_json::json!({"kind": kind, "path": path, "sha256": "0".repeat(64)}));
        }
    }
    let text = format!(
        r#"{{"formatVersion": {}, "okstraVersion": "0", "createdAt": "2026-01-01T00:00:00Z",
        "projectRoot": "/tmp/bench",
        "run": {{"taskKey": "bench", "manifestPath": "run/run-manifest.json",
          "teamStatePath": "run/team-state.json", "leadEventsPath": "run/lead-events.jsonl",
          "errorLogPath": "run/errors.jsonl", "terminalBackend": "cli-wrapper", "mode": "spec"}},
        "inputs": {}, "policy": {{"maxAttempts": 2}},
        "stages": [{{"name": "default", "jobs": [{}]}}]}}"#,
        okstra::plan::FORMAT_VERSION,
        serde_json::Value::from(inputs),
        jobs.join(",")
    );
    let mut plan: Plan = serde_json::from_str(&text).expect("a valid plan");
    plan.seal();
    plan
}

fn best<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            let out = f();
            let d = t.elapsed();
            drop(std::hint::black_box(out));
            d
        })
        .min()
        .unwrap_or_default()
}

fn main() {
    let plan = plan(10_000);
    let doc = serde_json::to_value(&plan).expect("json");
    println!(
        "plan: 10,000 jobs, {} bytes of JSON",
        serde_json::to_string(&doc).map(|s| s.len()).unwrap_or(0)
    );
    assert_eq!(digest_problem(&doc), None);
    let t = best(7, || plan.compute_digest());
    println!("seal (Plan::compute_digest):     {t:?}");
    let t = best(7, || digest_problem(&doc));
    println!("check (digest_problem on a Value): {t:?}");
}
