//! Budgets (docs/exec.md#budgets) with a fake `claude` on PATH that streams
//! claude-like `assistant` events, each reporting 1,000 input tokens, with
//! a pause between: the wrapper stops an attempt past its `budget`, which
//! settles `budget-exceeded` and is not retried; a run's `[budget]` stops
//! new launches (and, with `onBudget = "stop"`, running attempts) and exec
//! exits 1 with `exec/budget`.

use crate::common::*;
use serde_json::{json, Value};

/// A claude that answers `FAKE_ANSWERS` times (default 6), `FAKE_PAUSE`
/// seconds apart, each answer printed twice (two content blocks of one
/// message: counted once), its pid in `$SCRATCH/<key>.pid`; then writes its
/// result and prints the `result` event with the whole.
const FAKE_CLAUDE: &str = r#"#!/bin/sh
K="$OKSTRA_WORKER_KEY"
echo $$ > "$SCRATCH/$K.pid"
sid=""; prev=""
for a in "$@"; do [ "$prev" = --session-id ] && sid="$a"; prev="$a"; done
printf '{"type":"system","subtype":"init","session_id":"%s","model":"sonnet"}\n' "$sid"
n=${FAKE_ANSWERS:-6}; i=1
while [ $i -le $n ]; do
  for block in 1 2; do
    printf '{"type":"assistant","message":{"id":"msg_%s","model":"sonnet","usage":{"input_tokens":1000,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"%s"}\n' "$i" "$sid"
  done
  sleep "${FAKE_PAUSE:-0.3}"
  i=$((i+1))
done
mkdir -p "$(dirname "$OKSTRA_RESULT_PATH")"; echo done > "$OKSTRA_RESULT_PATH"
t=$((n * 1000))
printf '{"type":"result","subtype":"success","is_error":false,"session_id":"%s","usage":{"input_tokens":%s,"output_tokens":%s},"modelUsage":{"sonnet":{"inputTokens":%s,"outputTokens":%s}}}\n' "$sid" "$t" "$n" "$t" "$n"
"#;

/// One answer's worth: 1,000 input tokens and the first output token.
const ONE_ANSWER: u64 = 1001;

fn fixture(jobs: &[&str], extra: &str) -> Fx {
    let fx = Fx::new();
    fx.bin_script("claude", FAKE_CLAUDE);
    let mut m = v1_manifest();
    m["models"] = json!({"sonnet": {"provider": "claude", "modelId": "sonnet", "versionKind": "channel",
        "channelFamily": "sonnet", "pricing": {"input": 3.0, "output": 15.0}}});
    fx.manifest(&m)
        .mkdir("results")
        .defaults("role = \"analyst\"")
        .defaults("provider = \"claude\"")
        .defaults("modelExecutionValue = \"sonnet\"")
        .scratch_env()
        .stage(
            "agents",
            jobs.iter().map(|id| {
                Job::entry(
                    id,
                    format!("[[stages.workers]]\nworkerId = \"{id}\"\npromptPath = \"prompts/{id}.md\"\nresultPath = \"results/{id}.md\"\n{extra}\n"),
                )
            }),
        );
    fx.bin_then(std::env::var_os("PATH").unwrap_or_default())
        .run_env("HOME", fx.home())
        .run_env("OKSTRA_STOP_GRACE_SECONDS", "1");
    fx
}

fn usage(row: &Value) -> u64 {
    row["usage"]["totalTokens"].as_u64().unwrap_or(0)
}

fn alive(pid: &str) -> bool {
    std::path::Path::new(&format!("/proc/{}", pid.trim())).exists()
}

#[test]
fn an_attempt_past_its_budget_is_stopped_and_not_retried() {
    let fx = fixture(&["w"], "budget = { maxTokens = 2500 }");
    fx.plan();
    let ran = fx.exec(&[]);
    assert_eq!(ran.code, 1, "{}\n{}", ran.stdout, ran.stderr);
    let rows = fx.dispatch_rows("w");
    assert_eq!(rows.len(), 1, "not retried: {rows:?}");
    let row = &rows[0];
    assert_eq!(row["status"], "error", "{row}");
    assert_eq!(row["failureKind"], "budget-exceeded", "{row}");
    assert_eq!(row["exitCode"], 87, "{row}");
    let reason = row["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("maxTokens 2500"), "{reason}");
    // Stopped within one answer past the limit: each answer counted once
    // although printed twice.
    let spent = usage(row);
    assert!(spent > 2500 && spent <= 2500 + ONE_ANSWER, "{row}");
    assert_eq!(row["usage"]["costSource"], "price-table", "{row}");
    assert!(
        !fx.root().join("results/w.md").exists(),
        "it never finished"
    );
    let pid = std::fs::read_to_string(fx.scratch("w.pid")).unwrap();
    assert!(!alive(&pid), "its process is gone");
    let sidecar: Value = serde_json::from_str(
        &std::fs::read_to_string(fx.root().join("prompts/w.md.status.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(sidecar["failureKind"], "budget-exceeded");
    assert_eq!(sidecar["usage"], row["usage"], "the sidecar says the same");
}

#[test]
fn a_running_attempts_sidecar_holds_its_usage_so_far() {
    let fx = fixture(&["w"], "");
    fx.run_env("FAKE_PAUSE", "1").run_env("FAKE_ANSWERS", "4");
    fx.plan();
    let mut child = fx.spawn_exec(&[]);
    let sidecar = fx.root().join("prompts/w.md.status.json");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut seen = Vec::new();
    while std::time::Instant::now() < deadline {
        if let Ok(doc) = std::fs::read_to_string(&sidecar) {
            if let Ok(v) = serde_json::from_str::<Value>(&doc) {
                if v["state"] == "running" {
                    seen.push(usage(&v));
                }
            }
        }
        if seen.iter().any(|&t| t >= 2 * ONE_ANSWER) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.wait();
    assert!(
        seen.iter().any(|&t| t >= 2 * ONE_ANSWER),
        "usage grew on the running sidecar: {seen:?}"
    );
    assert_eq!(fx.dispatch_rows("w")[0]["status"], "completed");
}

#[test]
fn a_run_budget_starts_nothing_new_and_fails_the_run() {
    let fx = fixture(&["a", "b", "c"], "");
    fx.run_env("FAKE_ANSWERS", "1").run_env("FAKE_PAUSE", "0");
    fx.table("[budget]\nmaxTokens = 1500");
    fx.plan();
    let ran = fx.exec(&["--concurrency", "1"]);
    let out = format!("{}\n{}", ran.stdout, ran.stderr);
    assert_eq!(ran.code, 1, "{out}");
    assert!(out.contains("exec/budget"), "{out}");
    assert!(out.contains("maxTokens 1500"), "{out}");
    for k in ["a", "b"] {
        assert_eq!(fx.worker_row(k)["status"], "completed", "{out}");
    }
    // c may have been recorded and held at its gate (docs/exec.md#crash-safety-and-resume):
    // it never went through, and the summary says why.
    let c = ran.stdout.lines().find(|l| l.contains(" c ")).unwrap_or("");
    assert!(c.contains("not-run") && c.contains("budget"), "{out}");
    assert!(!fx.scratch("c.pid").exists(), "c never started");
}

#[test]
fn on_budget_stop_stops_the_running_attempts() {
    let fx = fixture(&["a", "b"], "");
    fx.table("[budget]\nmaxTokens = 2500\nonBudget = \"stop\"");
    fx.plan();
    let ran = fx.exec(&[]);
    let out = format!("{}\n{}", ran.stdout, ran.stderr);
    assert_eq!(ran.code, 1, "{out}");
    assert!(out.contains("exec/budget"), "{out}");
    for k in ["a", "b"] {
        let row = &fx.dispatch_rows(k)[0];
        assert_eq!(row["status"], "error", "{row}");
        assert_eq!(row["failureKind"], "budget-exceeded", "{row}");
        assert_eq!(fx.dispatch_rows(k).len(), 1, "not retried");
        let pid = std::fs::read_to_string(fx.scratch(&format!("{k}.pid"))).unwrap();
        assert!(!alive(&pid), "{k}'s process is gone");
    }
}
