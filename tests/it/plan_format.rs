//! The plan document's format is the wire: a plan written before the job's
//! vocabulary was typed (provider, backend, role, audience, dispatch kind,
//! mutation audit) reads into the typed plan and writes back byte for byte.
//! The fixtures were written by `okstra plan` before that change.

use okstra::plan::{digest_problem, Plan};
use serde_json::Value;

const EVERY_WORD: &str = include_str!("fixtures/plans/every-word.json");
const V2_PIPELINE: &str = include_str!("fixtures/plans/v2-pipeline.json");

fn round_trip(text: &str) -> Plan {
    let plan: Plan = serde_json::from_str(text).expect("the fixture reads as a plan");
    assert_eq!(
        plan.to_text(),
        text,
        "the plan must write back byte for byte"
    );
    let doc: Value = serde_json::from_str(text).unwrap();
    assert_eq!(digest_problem(&doc), None);
    assert_eq!(plan.compute_digest(), plan.digest);
    plan
}

#[test]
fn a_plan_using_every_word_round_trips_byte_for_byte() {
    let plan = round_trip(EVERY_WORD);
    let words = |f: fn(&Value) -> Value| -> Vec<String> {
        let doc = serde_json::to_value(&plan).unwrap();
        let mut out: Vec<String> = doc["stages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["jobs"].as_array().unwrap().iter().map(f))
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        out.sort();
        out.dedup();
        out
    };
    // The fixture covers each closed vocabulary and the open ones' shapes.
    assert_eq!(
        words(|j| j["provider"].clone()),
        ["claude", "codex", "command", "gemini"]
    );
    assert_eq!(words(|j| j["backend"].clone()), ["cli-wrapper", "pane"]);
    assert_eq!(
        words(|j| j["writeEnforcement"]["mutationAudit"].clone()),
        ["batch", "none"]
    );
    assert_eq!(
        words(|j| j["dispatchKind"].clone()),
        ["follow-up", "initial", "reverify-r01", "reverify-r2"]
    );
    assert_eq!(
        words(|j| j["role"].clone()),
        [
            "analyst",
            "implementer",
            "leader",
            "report-writer",
            "verifier"
        ]
    );
    assert_eq!(
        words(|j| j["audience"].clone()),
        ["implementation-executor", "implementation-verifier"]
    );
    let rounds: Vec<u64> = plan.jobs().map(|j| j.round).collect();
    assert_eq!(rounds, [1, 2, 1, 1, 1]);
    assert!(plan.jobs().all(|j| j.round == j.dispatch_kind.round()));
}

#[test]
fn a_v2_plan_round_trips_byte_for_byte() {
    round_trip(V2_PIPELINE);
}
