//! `okstra validate` runs every rule `okstra plan` runs that needs no
//! manifest, metadata or prompt file (docs/schemas.md#what-the-schemas-check),
//! and the jobs schema never refuses what plan accepts. In a project where
//! every prompt exists and the manifest is a plain v1 one (no metadata, no role
//! executions), nothing but the spec can make plan refuse, so validate and plan
//! must give the same verdict with the same codes; the schema may say less,
//! never more.

use crate::common::*;
use okstra::compile::{self, Ctx, Request};
use okstra::schema::{self, SchemaKind};
use okstra::source::Format;
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

const PROMPTS: [&str; 3] = ["p1.md", "p2.md", "p3.md"];

fn project() -> Project {
    let p = Project::new();
    for prompt in PROMPTS {
        p.write(prompt, "# prompt\n");
    }
    p.write_json(
        "run-manifest.json",
        &json!({"taskKey": "T-1", "teamStatePath": "run/team-state.json"}),
    );
    p
}

/// The codes plan reports (empty: it planned).
fn plan_codes(p: &Project) -> BTreeSet<String> {
    let root = okstra::paths::canonical_root(p.root());
    let req = Request {
        project_root: root,
        manifest: p.path("run-manifest.json"),
        spec: Some(p.path("spec.json")),
        workers: Vec::new(),
        created_at: "2025-01-01T00:00:00Z".into(),
        records: &okstra::state::team_state::RUN_RECORDS,
        plan_out: None,
    };
    match compile::compile(&req) {
        Ok(_) => BTreeSet::new(),
        Err(d) => d.iter().map(|d| d.code.to_string()).collect(),
    }
}

/// The codes validate reports on the spec alone.
fn validate_codes(p: &Project) -> BTreeSet<String> {
    let root = okstra::paths::canonical_root(p.root());
    let mut ctx = Ctx::new(root);
    let path = p.path("spec.json");
    if let Some(mut loaded) = ctx.load(
        "input",
        "spec.json",
        &path,
        okstra::paths::Base::CurrentDir,
        Format::Json,
    ) {
        compile::check_spec_alone(&mut ctx, &mut loaded);
    }
    ctx.diags.iter().map(|d| d.code.to_string()).collect()
}

fn verdicts(spec: &Value) -> (BTreeSet<String>, BTreeSet<String>, bool) {
    let p = project();
    p.write_json("spec.json", spec);
    let schema_ok = schema::validate(SchemaKind::Jobs, spec).is_empty();
    (plan_codes(&p), validate_codes(&p), schema_ok)
}

#[track_caller]
fn same_verdict(spec: Value) -> BTreeSet<String> {
    let (plan, validate, schema_ok) = verdicts(&spec);
    assert_eq!(validate, plan, "validate and plan disagree on\n{spec:#}");
    assert!(
        schema_ok || !plan.is_empty(),
        "the schema refuses a spec plan accepts:\n{spec:#}\n{:?}",
        schema::validate(SchemaKind::Jobs, &spec)
    );
    plan
}

fn worker(extra: Value) -> Value {
    let mut w = json!({"role": "analyst", "promptPath": "p1.md", "resultPath": "out/a.md"});
    for (k, v) in extra.as_object().unwrap() {
        w[k] = v.clone();
    }
    w
}

fn v2(label: &str) -> Value {
    json!({
        "schemaVersion": "2.0", "executionIdentityVersion": 2,
        "participantRef": "p", "roleExecutionRef": "re", "executionLabel": label,
        "dutyId": "analysis", "invocationRef": "inv", "assignmentRef": format!("run/{label}"),
        "attempt": 1, "provider": "codex"
    })
}

/// Each spec-alone refusal beside its near miss, with the codes both give.
#[test]
fn validate_and_plan_agree_case_by_case() {
    let cases: Vec<(&str, Value, &[&str])> = vec![
        // Issue 15's three specs.
        (
            "no provider",
            json!({"workers": [worker(json!({"workerId": "reviewer"}))]}),
            &["identity/missing-field"],
        ),
        (
            "near: implied",
            json!({"workers": [worker(json!({"workerId": "claude"}))]}),
            &[],
        ),
        (
            "no command",
            json!({"workers": [worker(json!({"workerId": "w", "provider": "command"}))]}),
            &["schema/violation"],
        ),
        (
            "near: command",
            json!({"workers": [worker(json!({"workerId": "w", "provider": "command", "command": ["true"]}))]}),
            &[],
        ),
        (
            "no result",
            json!({"workers": [{"workerId": "claude", "role": "analyst", "promptPath": "p1.md"}]}),
            &["schema/violation"],
        ),
        (
            "near: default result",
            json!({"defaults": {"resultPath": "out/a.md"}, "workers": [{"workerId": "claude", "role": "analyst", "promptPath": "p1.md"}]}),
            &[],
        ),
        // A v2 entry missing its refs.
        (
            "v2 without refs",
            json!({"workers": [worker(json!({"schemaVersion": "2.0", "executionIdentityVersion": 2, "dutyId": "analysis", "attempt": 1, "provider": "codex"}))]}),
            &["identity/missing-field"],
        ),
        ("near: v2", json!({"workers": [worker(v2("a"))]}), &[]),
        (
            "bad round",
            json!({"workers": [worker(json!({"workerId": "codex", "dispatchKind": "reverify-r0"}))]}),
            &["rules/reverify-kind"],
        ),
        (
            "near: round",
            json!({"workers": [worker(json!({"workerId": "codex", "dispatchKind": "reverify-r2"}))]}),
            &[],
        ),
        // Batch rules over what the spec says.
        (
            "same key twice",
            json!({"workers": [worker(json!({"workerId": "codex"})), worker(json!({"workerId": "codex", "resultPath": "out/b.md", "promptPath": "p2.md"}))]}),
            &["identity/duplicate"],
        ),
        (
            "same result twice",
            json!({"workers": [worker(json!({"workerId": "codex"})), worker(json!({"workerId": "gemini", "promptPath": "p2.md"}))]}),
            &["rules/write-conflict"],
        ),
        (
            "near: own results",
            json!({"workers": [worker(json!({"workerId": "codex"})), worker(json!({"workerId": "gemini", "promptPath": "p2.md", "resultPath": "out/b.md"}))]}),
            &[],
        ),
        (
            "executor beside verifier",
            json!({"workers": [
            worker(json!({"workerId": "codex", "audience": "implementation-executor"})),
            worker(json!({"workerId": "gemini", "promptPath": "p2.md", "resultPath": "out/b.md", "audience": "implementation-verifier"}))]}),
            &["rules/phase-order"],
        ),
        (
            "near: in stages",
            json!({"stages": [
            {"name": "a", "workers": [worker(json!({"workerId": "codex", "audience": "implementation-executor"}))]},
            {"name": "b", "workers": [worker(json!({"workerId": "gemini", "promptPath": "p2.md", "resultPath": "out/b.md", "audience": "implementation-verifier"}))]}]}),
            &[],
        ),
        (
            "report-writer not alone",
            json!({"workers": [
            worker(json!({"workerId": "codex", "role": "report-writer"})),
            worker(json!({"workerId": "gemini", "promptPath": "p2.md", "resultPath": "out/b.md"}))]}),
            &["rules/report-writer-isolation"],
        ),
        // Where a path lands, judged under the project root.
        (
            "escapes",
            json!({"workers": [worker(json!({"workerId": "codex", "resultPath": "../x.md"}))]}),
            &["path/escapes-root"],
        ),
        (
            "too broad",
            json!({"workers": [worker(json!({"workerId": "codex", "role": "implementer", "worktreePath": "/"}))]}),
            &["path/too-broad"],
        ),
        (
            "spelling",
            json!({"workers": [worker(json!({"workerId": "codex", "resultPath": "a//b.md"}))]}),
            &["path/invalid"],
        ),
    ];
    for (name, spec, want) in cases {
        let got = same_verdict(spec);
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        assert_eq!(got, want, "{name}");
    }
}

/// A plan-only refusal: the prompt file is missing. Validate passes the
/// spec; plan refuses it for the file alone.
#[test]
fn only_files_make_the_difference() {
    let spec =
        json!({"workers": [worker(json!({"workerId": "codex", "promptPath": "absent.md"}))]});
    let (plan, validate, schema_ok) = verdicts(&spec);
    assert!(validate.is_empty() && schema_ok, "{validate:?}");
    assert_eq!(plan, BTreeSet::from(["input/missing".to_string()]));
}

fn pick<T: Clone + std::fmt::Debug + 'static>(items: Vec<T>) -> impl Strategy<Value = T> {
    prop::sample::select(items)
}

/// One key's value, or absent (`Value::Null` stands for absent).
fn opt(key: &'static str, values: Vec<Value>) -> impl Strategy<Value = (&'static str, Value)> {
    let mut all = vec![Value::Null];
    all.extend(values);
    pick(all).prop_map(move |v| (key, v))
}

fn entry_strategy() -> impl Strategy<Value = Map<String, Value>> {
    (
        (
            opt(
                "workerId",
                vec![
                    json!("claude"),
                    json!("codex"),
                    json!("reviewer"),
                    json!("report-writer"),
                ],
            ),
            opt("schemaVersion", vec![json!("2.0"), json!(1)]),
            opt("executionIdentityVersion", vec![json!(2), json!(3)]),
            opt("participantRef", vec![json!("p")]),
            opt("executionLabel", vec![json!("L1"), json!("L2")]),
            opt(
                "assignmentRef",
                vec![json!("run/a"), json!("run/b"), json!("run/")],
            ),
            opt("attempt", vec![json!(1), json!(0)]),
            any::<bool>(),
        ),
        (
            opt(
                "provider",
                vec![json!("claude"), json!("codex"), json!("command")],
            ),
            opt("command", vec![json!(["true"])]),
            opt(
                "role",
                vec![
                    json!("analyst"),
                    json!("implementer"),
                    json!("verifier"),
                    json!("report-writer"),
                    json!("leader"),
                ],
            ),
            opt(
                "audience",
                vec![
                    json!("implementation-executor"),
                    json!("implementation-verifier"),
                ],
            ),
            opt("promptPath", PROMPTS.iter().map(|p| json!(p)).collect()),
            opt(
                "resultPath",
                vec![
                    json!("out/a.md"),
                    json!("out/b.md"),
                    json!("out/c.md"),
                    json!("a//b.md"),
                    json!("../up.md"),
                ],
            ),
            opt(
                "dispatchKind",
                vec![json!("initial"), json!("reverify-r0"), json!("reverify-r2")],
            ),
            opt("plannedPaths", vec![json!(["out/**"])]),
        ),
    )
        .prop_map(|(a, b)| {
            let (w, s, e, pr, l, ar, at, rest_of_v2) = a;
            let mut m = Map::new();
            for (k, v) in [w, s, e, pr, l, ar, at] {
                if !v.is_null() {
                    m.insert(k.into(), v);
                }
            }
            if rest_of_v2 {
                for k in ["roleExecutionRef", "invocationRef", "dutyId"] {
                    m.insert(k.into(), json!("x"));
                }
            }
            let (p, c, r, au, pp, rp, dk, pl) = b;
            for (k, v) in [p, c, r, au, pp, rp, dk, pl] {
                if !v.is_null() {
                    m.insert(k.into(), v);
                }
            }
            m
        })
}

fn defaults_strategy() -> impl Strategy<Value = Map<String, Value>> {
    (
        opt("provider", vec![json!("codex"), json!("command")]),
        opt("role", vec![json!("analyst")]),
        opt("resultPath", vec![json!("out/d.md")]),
        opt("promptPath", vec![json!("p3.md")]),
        opt("command", vec![json!(["true"])]),
        opt("schemaVersion", vec![json!("2.0")]),
        opt("executionIdentityVersion", vec![json!(2)]),
        opt("attempt", vec![json!(1)]),
    )
        .prop_map(|(a, b, c, d, e, f, g, h)| {
            [a, b, c, d, e, f, g, h]
                .into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.to_string(), v))
                .collect()
        })
}

fn spec_strategy() -> impl Strategy<Value = Value> {
    (
        defaults_strategy(),
        prop::collection::vec(prop::collection::vec(entry_strategy(), 1..3), 1..3),
        any::<bool>(),
    )
        .prop_map(|(defaults, stages, pipeline)| {
            let mut spec = Map::new();
            if !defaults.is_empty() {
                spec.insert("defaults".into(), Value::Object(defaults));
            }
            if pipeline {
                let stages: Vec<Value> = stages
                    .into_iter()
                    .enumerate()
                    .map(|(i, w)| json!({"name": format!("s{i}"), "workers": w}))
                    .collect();
                spec.insert("stages".into(), Value::Array(stages));
            } else {
                let all: Vec<Value> = stages.into_iter().flatten().map(Value::Object).collect();
                spec.insert("workers".into(), Value::Array(all));
            }
            Value::Object(spec)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Random specs, broken in the ways a person breaks them: validate and
    /// plan give the same codes, and the schema refuses only what plan
    /// refuses.
    #[test]
    fn validate_and_plan_agree_on_random_specs(spec in spec_strategy()) {
        let (plan, validate, schema_ok) = verdicts(&spec);
        prop_assert_eq!(&validate, &plan, "spec:\n{:#}", spec);
        prop_assert!(schema_ok || !plan.is_empty(), "the schema refuses a spec plan accepts:\n{:#}\n{:?}",
            spec, schema::validate(SchemaKind::Jobs, &spec));
    }
}

/// Validate's errors come in the order a reader meets them, in text and
/// JSON alike, though the rules find them in another (identity before the
/// schema).
#[test]
fn validate_reports_in_line_order() {
    let p = project();
    p.write(
        "spec.toml",
        "[[workers]]\nworkerId = \"codex\"\ncolour = 1\nrole = \"analyst\"\npromptPath = \"p1.md\"\nresultPath = \"out/a.md\"\n\n[[workers]]\nrole = \"analyst\"\npromptPath = \"p2.md\"\nresultPath = \"out/b.md\"\nprovider = \"codex\"\nattempt = 0\n",
    );
    let run = p.okstra(&["validate", "spec.toml", "--format", "json"]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    let lines: Vec<u64> = run.json()["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["line"].as_u64().unwrap())
        .collect();
    assert!(lines.len() >= 2, "{}", run.stdout);
    assert!(lines.windows(2).all(|w| w[0] <= w[1]), "{lines:?}");
    assert_eq!(lines[0], 3, "{}", run.stdout);
    let text = p.okstra(&["validate", "spec.toml"]);
    let shown: Vec<usize> = text
        .stderr
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("--> spec.toml:"))
        .map(|rest| rest.split(':').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(shown.len(), lines.len(), "{}", text.stderr);
    assert!(shown.windows(2).all(|w| w[0] <= w[1]), "{shown:?}");
}

/// Editors find a file's schema through `$schema`: team-state keeps the
/// key through exec's rewrites and validates with it; a plan cannot carry
/// one, since its digest covers every key
/// (docs/schemas.md#pointing-an-editor-at-them).
#[test]
fn team_state_keeps_its_schema_key_and_a_plan_refuses_one() {
    let p = project();
    p.write_json(
        "spec.json",
        &json!({"workers": [worker(json!({"workerId": "w", "provider": "command",
            "command": ["sh", "-c", "mkdir -p out && echo ok > out/a.md"]}))]}),
    );
    p.write_json(
        "run/team-state.json",
        &json!({"$schema": "../schemas/team-state.schema.json", "workers": []}),
    );
    let plan = p.okstra(&[
        "plan",
        "spec.json",
        "--manifest",
        "run-manifest.json",
        "--out",
        "plan.json",
    ]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let exec = p.okstra(&["exec", "plan.json"]);
    assert_eq!(exec.code, 0, "{}", exec.stderr);
    let team = p.read_json("run/team-state.json");
    assert_eq!(team["$schema"], "../schemas/team-state.schema.json");
    assert!(
        team["workers"].as_array().is_some_and(|w| !w.is_empty()),
        "{team:#}"
    );
    let check = p.okstra(&["validate", "--kind", "team-state", "run/team-state.json"]);
    assert_eq!(check.code, 0, "{}", check.stderr);

    let mut edited = p.read_json("plan.json");
    edited["$schema"] = json!("./schemas/plan.schema.json");
    p.write_json("plan.json", &edited);
    let show = p.okstra(&["show", "plan.json", "--format", "json"]);
    assert_eq!(show.codes(), ["plan/digest-mismatch"], "{}", show.stdout);
}
