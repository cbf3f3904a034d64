use super::*;
use serde_json::{json, Value};

const PLAN: &str = "sha256:aaaa";

fn event(v: Value) -> Event {
    serde_json::from_value(v).expect("an event")
}

fn head(ty: &str, key: &str, attempt: u64, ts: &str, stage: &str) -> Value {
    json!({"type": ty, "ts": ts, "workerId": key, "attempt": attempt, "workerKey": key,
           "planDigest": PLAN, "maxAttempts": 2, "dispatchMode": "cli-wrapper", "stage": stage})
}

fn dispatched(key: &str, attempt: u64, ts: &str, stage: &str) -> Event {
    let mut v = head("worker-dispatched", key, attempt, ts, stage);
    v["pid"] = json!(1);
    v["promptPath"] = json!(format!("prompts/{key}.md"));
    v["resultPath"] = json!(format!("results/{key}.md"));
    event(v)
}

fn settled(
    ty: &str,
    key: &str,
    attempt: u64,
    ts: &str,
    status: &str,
    usage: Option<Value>,
) -> Event {
    let mut v = head(ty, key, attempt, ts, "one");
    v["status"] = json!(status);
    v["reason"] = json!(if status == "completed" { "" } else { "exit 1" });
    if let Some(u) = usage {
        v["usage"] = u;
    }
    event(v)
}

fn usage(input: u64, output: u64, cost: Option<f64>) -> Value {
    let mut u = json!({"inputTokens": input, "outputTokens": output,
                       "totalTokens": input + output, "tokensFrom": "cli-output"});
    if let Some(c) = cost {
        u["costUsd"] = json!(c);
    }
    u
}

fn keys(m: &mut Model) -> Vec<(String, &'static str, u64)> {
    m.jobs()
        .map(|j| (j.key.clone(), j.phase.as_str(), j.attempt))
        .collect()
}

#[test]
fn a_dispatch_runs_and_its_settlement_ends_it() {
    let mut m = Model::default();
    m.apply(&dispatched("a", 1, "2026-01-01T00:00:00Z", "one"));
    assert_eq!(keys(&mut m), [("a".into(), "running", 1)]);
    let job = m.job("a").unwrap();
    assert_eq!(job.prompt.as_deref(), Some("prompts/a.md"));
    assert_eq!(
        job.elapsed(unix_of("2026-01-01T00:00:07Z").unwrap()),
        Some(7)
    );
    m.apply(&settled(
        "worker-result-collected",
        "a",
        1,
        "2026-01-01T00:00:05Z",
        "completed",
        None,
    ));
    assert_eq!(keys(&mut m), [("a".into(), "completed", 1)]);
    assert_eq!(m.job("a").unwrap().elapsed(i64::MAX), Some(5), "to its end");
    assert!(m.totals().settled());
}

#[test]
fn a_retry_shows_then_the_next_attempt_runs() {
    let mut m = Model::default();
    m.apply(&dispatched("a", 1, "2026-01-01T00:00:00Z", "one"));
    m.apply(&settled(
        "worker-failed",
        "a",
        1,
        "2026-01-01T00:00:01Z",
        "error",
        None,
    ));
    let mut retry = head(
        "worker-retry-scheduled",
        "a",
        1,
        "2026-01-01T00:00:01Z",
        "one",
    );
    retry["reason"] = json!("missing results/a.md");
    retry["nextAttempt"] = json!(2);
    m.apply(&event(retry));
    assert_eq!(keys(&mut m), [("a".into(), "retrying", 1)]);
    assert_eq!(m.job("a").unwrap().reason, "missing results/a.md");
    assert!(!m.totals().settled());
    m.apply(&dispatched("a", 2, "2026-01-01T00:00:02Z", "one"));
    assert_eq!(keys(&mut m), [("a".into(), "running", 2)]);
}

#[test]
fn jobs_are_ordered_by_stage_then_as_first_seen() {
    let mut m = Model::default();
    m.apply(&dispatched("c", 1, "2026-01-01T00:00:00Z", "two"));
    m.apply(&dispatched("b", 1, "2026-01-01T00:00:00Z", "one"));
    m.apply(&dispatched("a", 1, "2026-01-01T00:00:00Z", "one"));
    let order = |m: &mut Model| m.jobs().map(|j| j.key.clone()).collect::<Vec<_>>();
    assert_eq!(order(&mut m), ["c", "b", "a"], "stages as first seen");
    // The baselines number the stages: plan order wins.
    for (name, n) in [("one", 1), ("two", 2)] {
        m.apply(&event(
            json!({"type": "stage-snapshot-written", "ts": "2026-01-01T00:00:00Z",
            "planDigest": PLAN, "stage": name, "stageNumber": n, "path": "p", "sha256": "0"}),
        ));
    }
    assert_eq!(order(&mut m), ["b", "a", "c"]);
}

#[test]
fn totals_add_settled_attempts_and_running_ones_so_far() {
    let mut m = Model::default();
    let t = "2026-01-01T00:00:00Z";
    m.apply(&dispatched("a", 1, t, "one"));
    m.apply(&settled(
        "worker-failed",
        "a",
        1,
        t,
        "error",
        Some(usage(100, 20, Some(0.5))),
    ));
    m.apply(&dispatched("a", 2, t, "one"));
    m.apply(&settled(
        "worker-result-collected",
        "a",
        2,
        t,
        "completed",
        Some(usage(1000, 200, None)),
    ));
    m.apply(&dispatched("b", 1, t, "two"));
    let live: Usage = serde_json::from_value(usage(10, 5, Some(0.25))).unwrap();
    m.set_live("b", 1, Some(live.clone()), false);
    m.set_live("a", 2, Some(live), false); // settled: ignored
    let totals = m.totals();
    assert_eq!(totals.counts_text(true), "2 jobs: 1 running, 1 completed");
    assert_eq!(
        totals.counts_text(false),
        "2 jobs: 1 unsettled, 1 completed"
    );
    assert_eq!((totals.stages[0].jobs, totals.stages[0].completed), (1, 1));
    let one = totals.stages[0].spent.clone().unwrap();
    assert_eq!((one.attempts, one.total_tokens), (2, 1320));
    assert_eq!(one.cost_text(), "$0.5000+?", "one attempt had no cost");
    let two = totals.stages[1].spent.clone().unwrap();
    assert_eq!((two.total_tokens, two.cost_text()), (15, "$0.2500".into()));
    assert_eq!((totals.run.jobs, totals.run.completed), (2, 1));
    let run = totals.run.spent.unwrap();
    assert_eq!((run.attempts, run.total_tokens), (3, 1335));
    assert_eq!(m.job("a").unwrap().spent().unwrap().tokens_text(), "1320");
    m.set_live("b", 1, None, true);
    assert_eq!(
        m.job("b").unwrap().phase,
        Phase::Exited,
        "ended, not settled"
    );
}

#[test]
fn a_settlement_recorded_twice_counts_once() {
    let mut m = Model::default();
    let t = "2026-01-01T00:00:00Z";
    let done = settled(
        "worker-result-collected",
        "a",
        1,
        t,
        "completed",
        Some(usage(1, 1, None)),
    );
    m.apply(&dispatched("a", 1, t, "one"));
    m.apply(&done);
    m.apply(&done);
    assert_eq!(m.totals().run.spent.unwrap().attempts, 1);
}

#[test]
fn team_state_adds_the_jobs_no_event_names() {
    let mut m = Model::default();
    m.apply(&dispatched("a", 1, "2026-01-01T00:00:00Z", "one"));
    m.adopt_workers([
        WorkerRow {
            key: "a",
            label: "a",
            stage: Some("one"),
            status: WorkerStatus::NotRun,
            reason: "",
        },
        WorkerRow {
            key: "z",
            label: "z",
            stage: None,
            status: WorkerStatus::NotRun,
            reason: "stage one did not complete",
        },
    ]);
    assert_eq!(
        keys(&mut m),
        [("a".into(), "running", 1), ("z".into(), "not-run", 0)],
        "the events know a better than team-state"
    );
}

#[test]
fn a_new_plan_for_the_same_job_starts_it_afresh() {
    let mut m = Model::default();
    let t = "2026-01-01T00:00:00Z";
    m.apply(&dispatched("a", 1, t, "one"));
    m.apply(&settled(
        "worker-failed",
        "a",
        1,
        t,
        "error",
        Some(usage(5, 5, None)),
    ));
    let mut again = head("worker-dispatched", "a", 1, t, "one");
    again["planDigest"] = json!("sha256:bbbb");
    again["pid"] = json!(2);
    again["promptPath"] = json!("p");
    again["resultPath"] = json!("r");
    m.apply(&event(again));
    assert_eq!(m.plan_digest, "sha256:bbbb");
    assert_eq!(keys(&mut m), [("a".into(), "running", 1)]);
    assert!(
        m.totals().run.spent.is_none(),
        "the old plan's usage is not this run's"
    );
}
