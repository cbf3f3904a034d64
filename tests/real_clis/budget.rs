//! Budgets against the real CLIs (docs/exec.md#budgets): the mock reports
//! 50,000 prompt tokens per answer over several tool-use steps (each a
//! one-second shell command), so that claude and codex cross a worker's
//! `budget` mid-run: the wrapper stops each within one usage report of the
//! limit, it settles `budget-exceeded` and is not retried. claude reports
//! each answer's usage in its stream; `codex exec` prints its usage only at
//! the end of its one turn, so its rollout is read as it grows (a
//! `token_count` record after each response). gemini reports only at its
//! end: its budget is checked then.

use crate::e2e::{exec, log, pinned, rows, setup, Worker};
use crate::mock_api::{Script, Step, StepBy, Tokens};

/// What each answer reports: large, so a few answers cross the budget.
const PER_ANSWER: Tokens = Tokens {
    fresh_input: 50_000,
    cache_read: 0,
    cache_write: 0,
    output: 100,
    reasoning: 0,
};
const MAX_TOKENS: u64 = 120_000;

fn stopped_past_its_budget(provider: &'static str) {
    let (_, model) = pinned(provider);
    let mut steps: Vec<Step> = (0..6).map(|_| Step::Shell("sleep 1".into())).collect();
    steps.push(Step::Answer("done".into()));
    let extra = format!("budget = {{ maxTokens = {MAX_TOKENS} }}");
    let Some((fx, mock)) = setup(
        &[Worker {
            key: "w",
            provider,
            stage: "agents",
            extra: &extra,
        }],
        |_| {
            vec![(
                provider,
                Script {
                    steps,
                    served_model: model.into(),
                    tokens: PER_ANSWER,
                    step_by: StepBy::Arrival,
                    together: None,
                },
            )]
        },
    ) else {
        return;
    };
    let ran = exec(&fx);
    let log = log(&fx, "w");
    assert_eq!(ran.code, 1, "{log}");
    let rows = rows(&fx, "w");
    assert_eq!(rows.len(), 1, "not retried: {rows:?}");
    let row = &rows[0];
    assert_eq!(row["status"], "error", "{row}\n{log}");
    assert_eq!(row["failureKind"], "budget-exceeded", "{row}\n{log}");
    assert_eq!(row["exitCode"], 87, "{row}");
    let spent = row["usage"]["totalTokens"].as_u64().unwrap_or(0);
    let one_report = PER_ANSWER.fresh_input + PER_ANSWER.output;
    assert!(
        spent > MAX_TOKENS && spent <= MAX_TOKENS + one_report,
        "recorded {spent}: within one report of {MAX_TOKENS}\n{row}"
    );
    let requests = mock.model_requests(provider);
    assert!(
        requests < 7,
        "stopped mid-run: {requests} model requests\n{log}"
    );
    eprintln!("{provider}: stopped after {requests} model requests, {spent} tokens recorded");
}

#[test]
fn claude_past_its_budget_is_stopped_mid_run() {
    stopped_past_its_budget("claude");
}

#[test]
fn codex_past_its_budget_is_stopped_mid_run() {
    stopped_past_its_budget("codex");
}

/// A run's `[budget]` against real claude workers in three stages, each
/// writing its result over two answers (100,200 tokens): the second starts
/// under the budget and finishes past it, the third never starts, and exec
/// exits 1 naming the budget; the recorded spend is at most the budget
/// plus one worker's answers.
#[test]
fn claude_run_budget_stops_new_launches() {
    use crate::e2e::{read, unplanned, write_result};
    let (_, model) = pinned("claude");
    let workers: Vec<Worker> = ["a", "b", "c"]
        .iter()
        .map(|k| Worker {
            key: k,
            provider: "claude",
            stage: k,
            extra: "",
        })
        .collect();
    let steps = vec![
        write_result("claude", crate::mock_api::RESULT),
        Step::Answer("done".into()),
    ];
    let Some((fx, _mock)) = unplanned(&workers, |_| {
        vec![(
            "claude",
            Script {
                steps,
                served_model: model.into(),
                tokens: PER_ANSWER,
                step_by: StepBy::Conversation,
                together: None,
            },
        )]
    }) else {
        return;
    };
    fx.table("[budget]\nmaxTokens = 150000");
    fx.plan();
    let ran = exec(&fx);
    let out = format!("{}\n{}", ran.stdout, ran.stderr);
    assert_eq!(ran.code, 1, "{out}");
    assert!(
        out.contains("exec/budget") && out.contains("maxTokens 150000"),
        "{out}"
    );
    for k in ["a", "b"] {
        assert_eq!(rows(&fx, k)[0]["status"], "completed", "{out}");
    }
    assert!(rows(&fx, "c").is_empty(), "c never dispatched: {out}");
    assert_eq!(read(&fx, "out/c.md"), "", "c never ran");
    let spent: u64 = ["a", "b"]
        .iter()
        .map(|k| {
            rows(&fx, k)[0]["usage"]["totalTokens"]
                .as_u64()
                .unwrap_or(0)
        })
        .sum();
    assert!(spent > 150_000 && spent <= 150_000 + 2 * 50_100, "{spent}");
}
