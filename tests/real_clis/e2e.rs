//! The real agent CLIs end to end (issue 17), each through `okstra plan` and
//! `okstra exec`, against a mock of its vendor's API on 127.0.0.1
//! (`tests/real_clis/mock_api.rs`): the agent writes its result with its own tool, the
//! recorded usage is what the mock reported, a served model other than the
//! pinned one is caught, an API error settles `error` with its kind and
//! keeps the usage spent, a refused key settles `credentials-refused` at
//! once, quoting the CLI, a stalled API ends in the idle timeout.
//!
//! Each test needs its CLI, found on PATH or where
//! `scripts/install-agent-clis.sh` puts it (`target/agent-clis`). Without it
//! the test is skipped, saying so on stderr; with `REQUIRE_AGENT_CLIS=1` (as
//! `.ci/run` sets) it fails instead. Every CLI runs with a fresh HOME and
//! TMPDIR, and an environment holding nothing but PATH and what points it at
//! the mock: no credentials, no network.

use crate::common::{self, Fx, Job, Run};
use crate::mock_api::{MockApi, Script, Step, StepBy, Tokens};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The catalog entry each CLI's jobs are pinned to, and its model id.
pub(crate) fn pinned(provider: &str) -> (&'static str, &'static str) {
    match provider {
        "claude" => ("claude-pinned", "claude-sonnet-4-5"),
        "codex" => ("gpt-pinned", "gpt-5"),
        "gemini" => ("gemini-pinned", "gemini-2.5-pro"),
        other => panic!("no such provider {other}"),
    }
}

/// USD per million tokens: input, cached input, cache write, output.
const PRICES: (f64, f64, f64, f64) = (3.0, 0.3, 3.75, 15.0);

fn catalog() -> Value {
    let pricing = json!({"input": PRICES.0, "cachedInput": PRICES.1, "cacheWrite": PRICES.2, "output": PRICES.3});
    let mut models = serde_json::Map::new();
    for (provider, family) in [
        ("claude", "claude-sonnet"),
        ("codex", "gpt"),
        ("gemini", "gemini-pro"),
    ] {
        let (key, id) = pinned(provider);
        models.insert(
            key.into(),
            json!({"provider": provider, "modelId": id, "versionKind": "pinned",
                   "channelFamily": family, "pricing": pricing}),
        );
    }
    Value::Object(models)
}

/// What `tokens` cost at [`PRICES`], as okstra must have priced them.
fn priced(t: &Tokens) -> f64 {
    let dollars = (t.fresh_input as f64 * PRICES.0
        + t.cache_read as f64 * PRICES.1
        + t.cache_write as f64 * PRICES.2
        + (t.output + t.reasoning) as f64 * PRICES.3)
        / 1e6;
    (dollars * 1e9).round() / 1e9
}

/// What each answer of a CLI's script reports: every part its API has.
fn tokens(provider: &str) -> Tokens {
    Tokens {
        fresh_input: 1200,
        cache_read: 300,
        cache_write: if provider == "gemini" { 0 } else { 40 },
        output: 80,
        reasoning: if provider == "claude" { 0 } else { 16 },
    }
}

pub(crate) fn script(provider: &str, steps: Vec<Step>, served: &str) -> Script {
    Script {
        steps,
        served_model: served.into(),
        tokens: tokens(provider),
        step_by: StepBy::Arrival,
        together: None,
    }
}

pub(crate) fn write_result(provider: &str, path: &str) -> Step {
    Step::WriteFile {
        path: path.into(),
        content: format!("written by {provider} through its own tool\n"),
    }
}

/// A worker of the spec: state key, provider, extra TOML lines.
pub(crate) struct Worker<'a> {
    pub key: &'a str,
    pub provider: &'a str,
    pub stage: &'a str,
    pub extra: &'a str,
}

/// One worker `w` of `provider`, its result `out/w.md`, the mock
/// answering with `steps` and naming `served` as the model that served.
pub(crate) fn one(
    provider: &str,
    steps: Vec<Step>,
    served: &str,
    extra: &str,
) -> Option<(Fx, MockApi)> {
    one_in(provider, |_| steps, served, extra)
}

/// [`one`], its steps made knowing the project (its fake HOME).
pub(crate) fn one_in(
    provider: &str,
    steps: impl FnOnce(&Fx) -> Vec<Step>,
    served: &str,
    extra: &str,
) -> Option<(Fx, MockApi)> {
    setup(
        &[Worker {
            key: "w",
            provider,
            stage: "agents",
            extra,
        }],
        |fx| vec![(cli(provider), script(provider, steps(fx), served))],
    )
}

/// A project whose jobs run real CLIs against one mock API, planned, and
/// the mock (which stops when dropped). okstra runs with an environment of
/// PATH, a fresh HOME and TMPDIR, and each CLI pointed at the mock. `None`
/// (having said why) where a CLI is missing.
pub(crate) fn setup(
    workers: &[Worker],
    scripts: impl FnOnce(&Fx) -> Vec<(&'static str, Script)>,
) -> Option<(Fx, MockApi)> {
    let (fx, mock) = unplanned(workers, scripts)?;
    fx.plan();
    Some((fx, mock))
}

/// [`setup`] before `okstra plan`: the project written, its environment
/// set, so a test can add to it (a git repository) and then plan.
pub(crate) fn unplanned(
    workers: &[Worker],
    scripts: impl FnOnce(&Fx) -> Vec<(&'static str, Script)>,
) -> Option<(Fx, MockApi)> {
    let mut dirs = Vec::new();
    for w in workers {
        dirs.push(common::agent_cli(w.provider)?);
    }
    let fx = Fx::new();
    let root = fx.root();
    // gemini reads its auth type from its settings; the key and the
    // API's address come from the environment.
    fx.home_file(
        ".gemini/settings.json",
        r#"{"security":{"auth":{"selectedType":"gemini-api-key"}}}"#,
    );
    let mock = MockApi::per_cli(&root, scripts(&fx));
    let mut manifest = json!({
        "taskKey": "e2e",
        "teamStatePath": "run/team-state.json",
        "terminalBackend": "cli-wrapper",
        "workflow": {"currentPhase": "implementation"},
        "recommendedWorkers": [],
    });
    manifest["models"] = catalog();
    fx.manifest(&manifest).defaults("role = \"analyst\"");
    let mut stages: Vec<(&str, Vec<Job>)> = Vec::new();
    for w in workers {
        if stages.last().is_none_or(|(name, _)| *name != w.stage) {
            stages.push((w.stage, Vec::new()));
        }
        let (_, model) = pinned(w.provider);
        let mut entry = format!(
            "[[stages.workers]]\nworkerId = \"{key}\"\nprovider = \"{provider}\"\nmodelExecutionValue = \"{model}\"\npromptPath = \"prompts/{key}.md\"\nresultPath = \"out/{key}.md\"\n{extra}\n",
            key = w.key,
            provider = w.provider,
            extra = w.extra,
        );
        if w.provider == "codex" {
            // codex is pointed at an API by its config (PROVIDERS.md).
            entry.push_str(&format!(
                "extraArgs = [\"-c\", \"model_provider=mock\", \"-c\", 'model_providers.mock={{name=\"mock\",base_url=\"{}/v1\",env_key=\"MOCK_KEY\",wire_api=\"responses\"}}']\n",
                mock.url()
            ));
        }
        let prompt = format!("Write out/{}.md with your file-writing tool.\n", w.key);
        let job = Job::entry(w.key, entry).prompt(&prompt);
        stages.last_mut().expect("a stage").1.push(job);
    }
    fx.stages(stages);
    let mut path: Vec<PathBuf> = dirs;
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let url = mock.url();
    fx.clean_env()
        .run_env("PATH", std::env::join_paths(path).unwrap())
        .run_env("HOME", fx.home())
        .run_env("TMPDIR", fx.outside("tmp"))
        .run_env("SOURCE_DATE_EPOCH", "1764460800")
        .run_env("OKSTRA_STOP_GRACE_SECONDS", "2")
        .run_env("ANTHROPIC_BASE_URL", &url)
        .run_env("ANTHROPIC_API_KEY", "mock-key")
        .run_env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .run_env("MOCK_KEY", "mock-key")
        .run_env("GEMINI_API_KEY", "mock-key")
        .run_env("GOOGLE_GEMINI_BASE_URL", &url)
        .run_env("OKSTRA_TEST_MOCK_URL", &url);
    Some((fx, mock))
}

/// `okstra exec plan.json`, its output shown.
pub(crate) fn exec(fx: &Fx) -> Run {
    let ran = fx.exec(&[]);
    eprintln!(
        "okstra exec exited {}\n{}\n{}",
        ran.code, ran.stdout, ran.stderr
    );
    ran
}

/// A file of the project, "" where there is none (yet).
pub(crate) fn read(fx: &Fx, rel: &str) -> String {
    std::fs::read_to_string(fx.root().join(rel)).unwrap_or_default()
}

pub(crate) fn json(fx: &Fx, rel: &str) -> Value {
    serde_json::from_str(&read(fx, rel)).unwrap_or(Value::Null)
}

pub(crate) fn rows(fx: &Fx, key: &str) -> Vec<Value> {
    json(fx, "run/team-state.json")["workerDispatches"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r["workerKey"] == key)
        .collect()
}

fn errors(fx: &Fx) -> Vec<Value> {
    read(fx, "run/errors.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub(crate) fn events(fx: &Fx, ty: &str, key: &str) -> Vec<Value> {
    read(fx, "run/lead-events.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == ty && e["workerKey"] == key)
        .collect()
}

/// The worker's log, shown when an assertion needs it.
pub(crate) fn log(fx: &Fx, key: &str) -> String {
    read(fx, &format!("prompts/{key}.md.log"))
}

pub(crate) fn cli(provider: &str) -> &'static str {
    match provider {
        "claude" => "claude",
        "codex" => "codex",
        "gemini" => "gemini",
        other => panic!("no such provider {other}"),
    }
}

/// Every key of `expected` has its value in `usage`.
#[track_caller]
fn assert_tokens(usage: &Value, expected: &Value, what: &str) {
    for (k, v) in expected.as_object().unwrap() {
        assert_eq!(&usage[k], v, "{what}: {k} in {usage}");
    }
}

// ---------------------------------------------------------------------------
// The agent writes its result with its own tool; usage is the mock's.
// ---------------------------------------------------------------------------

fn writes_its_result_with_its_own_tool(provider: &str, served: &str, tool_sign: &str) {
    let steps = vec![
        write_result(provider, "out/w.md"),
        Step::Answer("done".into()),
    ];
    let Some((fx, mock)) = one(provider, steps, served, "") else {
        return;
    };
    let ran = exec(&fx);
    let log = log(&fx, "w");
    assert_eq!(ran.code, 0, "{log}");
    let rows = rows(&fx, "w");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row["status"], "completed", "{row}\n{log}");
    assert_eq!(
        read(&fx, "out/w.md"),
        format!("written by {provider} through its own tool\n"),
        "the agent wrote its result"
    );
    assert!(
        log.contains(tool_sign),
        "the CLI ran its own tool ({tool_sign}):\n{log}"
    );
    assert_eq!(
        mock.model_requests(provider),
        2,
        "the tool's result went back to the API"
    );

    let spent = mock.spent(provider);
    let usage = &row["usage"];
    assert_tokens(usage, &spent.expected_usage(provider), provider);
    assert_eq!(usage["tokensFrom"], "cli-output");
    assert_eq!(usage["costSource"], "price-table", "{usage}");
    let cost = usage["costUsd"].as_f64().unwrap();
    assert!(
        (cost - priced(&spent)).abs() < 1e-12,
        "{cost} vs {}",
        priced(&spent)
    );
    if provider == "codex" {
        assert!(
            usage.get("model").is_none(),
            "codex names no model: {usage}"
        );
        // Confined (this machine offers Landlock), codex's own bubblewrap
        // sandbox cannot start: the wrapper runs it without one and says so.
        if row["confinement"].as_str().is_some_and(|c| c != "none") {
            let argv = row["cliArgv"].as_array().cloned().unwrap_or_default();
            assert!(
                argv.windows(2)
                    .any(|w| w[0] == "--sandbox" && w[1] == "danger-full-access"),
                "{argv:?}"
            );
            assert!(
                log.contains("cannot start inside okstra's Landlock"),
                "{log}"
            );
        }
    } else {
        assert_eq!(usage["model"], served, "{usage}");
        assert_eq!(row["servedModel"], served);
    }
    let sidecar = json(&fx, "prompts/w.md.status.json");
    assert_eq!(&sidecar["usage"], usage, "the sidecar says the same");
    assert_eq!(sidecar["argv"][0], provider, "{sidecar}");
    assert_eq!(row["cliArgv"], sidecar["argv"]);
    let collected = &events(&fx, "worker-result-collected", "w")[0];
    assert_eq!(&collected["usage"], usage, "the event says the same");
    // Keys without a value are absent, not empty.
    if provider != "claude" {
        assert!(row.get("sessionId").is_none(), "{row}");
    }
    let team = json(&fx, "run/team-state.json");
    for a in team["attempts"].as_array().unwrap() {
        assert!(
            a.get("dispatchId").is_none(),
            "no invocation, no dispatch id: {a}"
        );
    }
}

#[test]
fn claude_writes_its_result_with_its_own_tool() {
    writes_its_result_with_its_own_tool("claude", "claude-sonnet-4-5", r#""name":"Write""#);
}

#[test]
fn codex_writes_its_result_with_its_own_tool() {
    writes_its_result_with_its_own_tool("codex", "gpt-5", r#""type":"file_change""#);
}

#[test]
fn gemini_writes_its_result_with_its_own_tool() {
    writes_its_result_with_its_own_tool("gemini", "gemini-2.5-pro", r#""tool_name":"write_file""#);
}

// ---------------------------------------------------------------------------
// The network: each CLI reaches its mock API only through its door in the
// egress proxy (docs/confinement.md#network).
// ---------------------------------------------------------------------------

/// The CLI, confined with `network = "provider"`, completes a job against
/// its mock through the proxy, while its own shell tool's direct
/// connection to the mock's port is refused: the row's egress names the
/// mock, allowed, with the bytes of every request.
fn reaches_its_api_only_through_the_proxy(provider: &str, extra: &str) {
    if !common::landlock_here() {
        return;
    }
    let direct = "curl -sS --noproxy '*' --max-time 5 \"$OKSTRA_TEST_MOCK_URL/\" > out/direct.txt 2>&1; echo \"exit=$?\" >> out/direct.txt";
    let steps = vec![
        Step::Shell(direct.into()),
        write_result(provider, "out/w.md"),
        Step::Answer("done".into()),
    ];
    let (_, served) = pinned(provider);
    let extra = format!("{extra}\nrole = \"implementer\"\nplannedPaths = [\"out/direct.txt\"]");
    let Some((fx, mock)) = one(provider, steps, served, &extra) else {
        return;
    };
    let ran = exec(&fx);
    let log = log(&fx, "w");
    assert_eq!(ran.code, 0, "{log}");
    assert!(read(&fx, "out/w.md").contains(provider), "{log}");
    let direct = read(&fx, "out/direct.txt");
    assert!(
        direct.contains("exit=7"),
        "the direct connection: {direct}\n{log}"
    );
    let row = &rows(&fx, "w")[0];
    assert_eq!(row["network"], "provider", "{row}");
    let port: u16 = mock.url().rsplit(':').next().unwrap().parse().unwrap();
    let egress = row["egress"].as_array().expect("an egress record");
    let api = egress
        .iter()
        .find(|d| d["host"] == "127.0.0.1" && d["port"] == port)
        .unwrap_or_else(|| panic!("no mock in {egress:?}"));
    assert_eq!(api["allowed"], true, "{api}");
    assert!(api["connections"].as_u64().unwrap() >= 1, "{api}");
    assert!(api["bytesOut"].as_u64().unwrap() > 0, "{api}");
    assert!(api["bytesIn"].as_u64().unwrap() > 0, "{api}");
}

#[test]
fn claude_reaches_its_api_only_through_the_proxy() {
    // Its Bash tool runs unasked only with bypassPermissions (as root too,
    // confined: the wrapper says IS_SANDBOX=1).
    reaches_its_api_only_through_the_proxy("claude", "permissionMode = \"bypassPermissions\"");
}

#[test]
fn codex_reaches_its_api_only_through_the_proxy() {
    reaches_its_api_only_through_the_proxy("codex", "");
}

#[test]
fn gemini_reaches_its_api_only_through_the_proxy() {
    reaches_its_api_only_through_the_proxy("gemini", "approvalMode = \"yolo\"");
}

// ---------------------------------------------------------------------------
// Another model served than the pinned one: the served-model check.
// ---------------------------------------------------------------------------

fn another_served_model_is_caught(provider: &str, served: &str) {
    let steps = vec![
        write_result(provider, "out/w.md"),
        Step::Answer("done".into()),
    ];
    let Some((fx, _mock)) = one(provider, steps, served, "") else {
        return;
    };
    let ran = exec(&fx);
    let log = log(&fx, "w");
    assert_eq!(ran.code, 1, "{log}");
    let rows = rows(&fx, "w");
    assert_eq!(rows.len(), 1, "a mismatch is not retried: {rows:?}");
    let row = &rows[0];
    assert_eq!(row["status"], "error", "{row}");
    assert_eq!(row["exitCode"], 86, "{row}");
    assert_eq!(row["failureKind"], "served-model-mismatch", "{row}");
    assert_eq!(row["servedModel"], served, "{row}");
    let (model_ref, _) = pinned(provider);
    let sidecar = json(&fx, "prompts/w.md.status.json");
    let error = sidecar["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(model_ref) && error.contains(served),
        "{sidecar}"
    );
}

#[test]
fn claude_served_by_another_model_is_caught() {
    another_served_model_is_caught("claude", "claude-opus-4-1");
}

#[test]
fn gemini_served_by_another_model_is_caught() {
    another_served_model_is_caught("gemini", "gemini-2.5-flash");
}

// ---------------------------------------------------------------------------
// An API error: `error` with its kind, the usage spent before it kept.
// ---------------------------------------------------------------------------

fn an_api_error_keeps_the_usage_spent(provider: &str, exit_code: i64, tokens_from: &str) {
    let (_, model) = pinned(provider);
    let steps = vec![write_result(provider, "out/w.md"), Step::Fail(400)];
    let Some((fx, mock)) = one(provider, steps, model, "") else {
        return;
    };
    let ran = exec(&fx);
    let log = log(&fx, "w");
    assert_eq!(ran.code, 1, "{log}");
    assert_eq!(mock.model_requests(provider), 2, "{log}");
    let rows = rows(&fx, "w");
    let row = &rows[0];
    assert_eq!(row["status"], "error", "{row}\n{log}");
    assert_eq!(row["failureKind"], "api-error", "{row}\n{log}");
    assert_eq!(row["exitCode"], exit_code, "{row}");
    // The reason quotes the CLI, which relays the API's words.
    let reason = row["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("{provider} said: \""))
            && reason.contains("the mock API refuses this request"),
        "{reason}"
    );
    // The first answer's tokens were spent; the refusal spent none.
    let spent = mock.spent(provider);
    assert_eq!(spent, tokens(provider));
    assert_tokens(&row["usage"], &spent.expected_usage(provider), provider);
    assert_eq!(row["usage"]["tokensFrom"], tokens_from, "{row}");
    let errors = errors(&fx);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["exitCode"], exit_code);
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .contains("[api-error]"),
        "{}",
        errors[0]
    );
}

#[test]
fn claude_api_error_settles_error_and_keeps_the_usage_spent() {
    an_api_error_keeps_the_usage_spent("claude", 1, "cli-output");
}

#[test]
fn codex_api_error_settles_error_and_keeps_the_usage_spent() {
    // codex prints no usage for a failed turn: it is read from the rollout.
    an_api_error_keeps_the_usage_spent("codex", 1, "session-file");
}

#[test]
fn gemini_api_error_settles_error_and_keeps_the_usage_spent() {
    // gemini exits with the HTTP status modulo 256.
    an_api_error_keeps_the_usage_spent("gemini", 400 % 256, "cli-output");
}

// ---------------------------------------------------------------------------
// A refused key (docs/providers.md#the-worker-wrapper): `credentials-refused`,
// naming the key to check and quoting the CLI, within seconds (claude alone
// would retry for 3 minutes).
// ---------------------------------------------------------------------------

/// The settling the contract allows a refused key
/// (docs/providers.md#the-worker-wrapper: stopped at the CLI's first retry
/// report); not a benchmark.
const REFUSED_WITHIN: Duration = Duration::from_secs(30);

fn a_refused_key_is_said_at_once(provider: &str, step: Step, exit_code: i64, quoted: &str) {
    let (_, model) = pinned(provider);
    // Every request refused, however often the CLI asks.
    let Some((fx, _mock)) = one(provider, vec![step; 30], model, "") else {
        return;
    };
    let started = Instant::now();
    let ran = exec(&fx);
    let took = started.elapsed();
    let log = log(&fx, "w");
    assert_eq!(ran.code, 1, "{log}");
    assert!(took < REFUSED_WITHIN, "settled after {took:?}:\n{log}");
    let rows = rows(&fx, "w");
    assert_eq!(rows.len(), 1, "a refused key is not retried: {rows:?}");
    let row = &rows[0];
    assert_eq!(row["status"], "error", "{row}\n{log}");
    assert_eq!(row["failureKind"], "credentials-refused", "{row}\n{log}");
    assert_eq!(row["exitCode"], exit_code, "{row}");
    let reason = row["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("the API refused the credentials {provider} sent")),
        "{reason}"
    );
    // The key it sent, by the variable that holds it.
    let key = match provider {
        "claude" => "ANTHROPIC_API_KEY is set",
        "codex" => "reads its key from MOCK_KEY",
        _ => "GEMINI_API_KEY from the environment",
    };
    assert!(reason.contains(key), "{reason}");
    assert!(!reason.contains("not logged in"), "{reason}");
    assert!(
        reason.contains(&format!("{provider} said: \"{quoted}")),
        "the CLI's own line: {reason}"
    );
    let sidecar = json(&fx, "prompts/w.md.status.json");
    assert_eq!(sidecar["failureKind"], "credentials-refused", "{sidecar}");
    assert!(
        sidecar["duration_ms"].as_u64().unwrap() < REFUSED_WITHIN.as_millis() as u64,
        "{sidecar}"
    );
    let errors = errors(&fx);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .contains("[credentials-refused]"),
        "{}",
        errors[0]
    );
    eprintln!("{provider}: settled after {took:?}: {reason}");
}

#[test]
fn claude_refused_key_is_stopped_at_its_first_retry() {
    // claude reports each retry of the 401 (ten of them, three minutes):
    // it is stopped at the first report.
    a_refused_key_is_said_at_once(
        "claude",
        Step::Fail(401),
        1,
        "api_retry 1 of 10: 401 authentication_failed",
    );
}

#[test]
fn codex_refused_key_is_stopped_at_its_first_retry() {
    a_refused_key_is_said_at_once(
        "codex",
        Step::Fail(401),
        1,
        "Reconnecting... 1/5 (unexpected status 401 Unauthorized: Incorrect API key provided",
    );
}

#[test]
fn gemini_refused_key_401_is_said() {
    // gemini gives up at once, exiting with the status modulo 256.
    a_refused_key_is_said_at_once(
        "gemini",
        Step::Fail(401),
        401 % 256,
        "Request had invalid authentication credentials. (401 UNAUTHENTICATED)",
    );
}

#[test]
fn gemini_invalid_api_key_is_said() {
    // What the Gemini API answers a bad key: 400, API_KEY_INVALID.
    a_refused_key_is_said_at_once(
        "gemini",
        Step::KeyInvalid,
        400 % 256,
        "API key not valid. Please pass a valid API key. (400 INVALID_ARGUMENT, API_KEY_INVALID)",
    );
}

#[test]
fn codex_without_its_key_says_which_variable_to_set() {
    // The near miss of a refused key: no key at all (its model provider's
    // variable unset) is `not-logged-in`, and says what to set.
    let (_, model) = pinned("codex");
    let Some((fx, mock)) = one("codex", vec![], model, "") else {
        return;
    };
    let spec = read(&fx, "spec.toml").replace("MOCK_KEY", "OKSTRA_UNSET_KEY");
    fx.p.write("spec.toml", &spec);
    let plan = fx.okstra(&[
        "plan",
        "spec.toml",
        "--manifest",
        "run/run-manifest.json",
        "--out",
        "plan.json",
    ]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let ran = exec(&fx);
    let log = log(&fx, "w");
    assert_eq!(ran.code, 1, "{log}");
    assert_eq!(mock.model_requests("codex"), 0, "{log}");
    let row = &rows(&fx, "w")[0];
    assert_eq!(row["failureKind"], "not-logged-in", "{row}\n{log}");
    let reason = row["reason"].as_str().unwrap();
    assert!(
        reason.contains("set OKSTRA_UNSET_KEY in the environment okstra runs in"),
        "{reason}"
    );
    assert!(
        reason.contains("codex said: \"Missing environment variable: `OKSTRA_UNSET_KEY`.\""),
        "{reason}"
    );
}

// ---------------------------------------------------------------------------
// A stalled API: the worker's log stops growing, the idle timeout ends it.
// ---------------------------------------------------------------------------

fn a_stalled_api_ends_in_the_idle_timeout(provider: &str) {
    let (_, model) = pinned(provider);
    let Some((fx, mock)) = one(
        provider,
        vec![Step::Stall],
        model,
        "idleTimeoutSeconds = 15",
    ) else {
        return;
    };
    let started = Instant::now();
    let ran = exec(&fx);
    let log = log(&fx, "w");
    assert!(started.elapsed() < Duration::from_secs(90), "{log}");
    assert_eq!(ran.code, 1, "{log}");
    assert_eq!(
        mock.model_requests(provider),
        1,
        "it stalled at the API: {log}"
    );
    let row = &rows(&fx, "w")[0];
    assert_eq!(row["status"], "timeout", "{row}");
    assert_eq!(row["exitCode"], 124, "{row}");
    assert_eq!(row["failureKind"], "timeout", "{row}");
    let sidecar = json(&fx, "prompts/w.md.status.json");
    assert_eq!(sidecar["exitCode"], 124, "{sidecar}");
    assert_eq!(sidecar["failureKind"], "timeout", "{sidecar}");
    let errors = errors(&fx);
    assert_eq!(errors[0]["exitCode"], 124, "{errors:?}");
}

#[test]
fn claude_stalled_api_ends_in_the_idle_timeout() {
    a_stalled_api_ends_in_the_idle_timeout("claude");
}

#[test]
fn codex_stalled_api_ends_in_the_idle_timeout() {
    a_stalled_api_ends_in_the_idle_timeout("codex");
}

#[test]
fn gemini_stalled_api_ends_in_the_idle_timeout() {
    a_stalled_api_ends_in_the_idle_timeout("gemini");
}

// ---------------------------------------------------------------------------
// Diagnostics of a refused command line (issue 15), from the real CLIs.
// ---------------------------------------------------------------------------

fn a_refused_argument_is_named(provider: &str, exit_code: i64, named: &str) {
    let (_, model) = pinned(provider);
    let extra = if provider == "codex" {
        // codex's jobs carry the mock's config in extraArgs: add to it.
        ""
    } else {
        "extraArgs = [\"--okstra-bogus-flag\"]"
    };
    let Some((fx, mock)) = one(provider, vec![], model, extra) else {
        return;
    };
    if provider == "codex" {
        let spec = read(&fx, "spec.toml")
            .replace("extraArgs = [", "extraArgs = [\"--okstra-bogus-flag\", ");
        fx.p.write("spec.toml", &spec);
        let plan = fx.okstra(&[
            "plan",
            "spec.toml",
            "--manifest",
            "run/run-manifest.json",
            "--out",
            "plan.json",
        ]);
        assert_eq!(plan.code, 0, "{}", plan.stderr);
    }
    let ran = exec(&fx);
    let log = log(&fx, "w");
    assert_eq!(ran.code, 1, "{log}");
    assert_eq!(
        mock.model_requests(provider),
        0,
        "refused before any request"
    );
    let row = &rows(&fx, "w")[0];
    assert_eq!(row["failureKind"], "argument-error", "{row}\n{log}");
    assert_eq!(row["exitCode"], exit_code, "{row}");
    let reason = row["reason"].as_str().unwrap();
    assert!(
        reason.contains(named),
        "the reason names the argument: {reason}"
    );
    let ran_argv = row["cliArgv"].as_array().unwrap();
    assert_eq!(ran_argv[0], provider);
    assert!(ran_argv.contains(&json!("--okstra-bogus-flag")), "{row}");
    let excerpt = errors(&fx)[0]["stderrExcerpt"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(excerpt.contains(named), "the error log keeps it: {excerpt}");
}

#[test]
fn claude_refusing_an_argument_names_it() {
    a_refused_argument_is_named("claude", 1, "--okstra-bogus-flag");
}

#[test]
fn codex_refusing_an_argument_names_it() {
    a_refused_argument_is_named("codex", 2, "--okstra-bogus-flag");
}

#[test]
fn gemini_refusing_an_argument_names_it() {
    // gemini names it first, then prints 4 KB of usage text.
    a_refused_argument_is_named("gemini", 1, "Unknown arguments: okstra-bogus-flag");
}

#[test]
fn claude_bypass_permissions_as_root_unsandboxed_says_so() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: claude refuses bypassPermissions only as root");
        return;
    }
    // Unconfined: a confined claude is told it runs in a sandbox.
    let extra = "permissionMode = \"bypassPermissions\"\nconfinement = \"none\"";
    let Some((fx, _mock)) = one("claude", vec![], "claude-sonnet-4-5", extra) else {
        return;
    };
    let ran = exec(&fx);
    let log = log(&fx, "w");
    assert_eq!(ran.code, 1, "{log}");
    let row = &rows(&fx, "w")[0];
    assert_eq!(row["failureKind"], "argument-error", "{row}\n{log}");
    let reason = row["reason"].as_str().unwrap();
    assert!(reason.contains("cannot be used with root"), "{reason}");
    assert!(reason.contains("IS_SANDBOX=1"), "{reason}");
}

// ---------------------------------------------------------------------------
// A three-provider run: `okstra status` adds usage up per worker, stage, run.
// ---------------------------------------------------------------------------

#[test]
fn a_three_provider_run_adds_up_in_okstra_status() {
    let workers = [
        Worker {
            key: "drafter",
            provider: "claude",
            stage: "draft",
            extra: "",
        },
        Worker {
            key: "reviewer",
            provider: "codex",
            stage: "review",
            extra: "",
        },
        Worker {
            key: "checker",
            provider: "gemini",
            stage: "review",
            extra: "",
        },
    ];
    let Some((fx, mock)) = setup(&workers, |_| {
        workers
            .iter()
            .map(|w| {
                let (_, model) = pinned(w.provider);
                let steps = vec![
                    write_result(w.provider, &format!("out/{}.md", w.key)),
                    Step::Answer("done".into()),
                ];
                (cli(w.provider), script(w.provider, steps, model))
            })
            .collect()
    }) else {
        return;
    };
    let ran = exec(&fx);
    assert_eq!(
        ran.code,
        0,
        "{}",
        log(&fx, "drafter") + &log(&fx, "reviewer") + &log(&fx, "checker")
    );
    assert!(
        ran.stdout.contains("tokens") && ran.stdout.contains("spent"),
        "{}",
        ran.stdout
    );
    let status = fx.okstra(&["status", "--manifest", "run/run-manifest.json"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    // For docs/providers.md#what-each-worker-spent: the run's status as a
    // person reads it.
    eprintln!("--- okstra status ---\n{}", status.stdout);
    let doc = fx.okstra(common::STATUS_JSON);
    let usage = serde_json::from_str::<Value>(&doc.stdout).unwrap()["usage"].clone();
    let sum = |ps: &[&str]| -> Tokens {
        let mut t = Tokens::default();
        for p in ps {
            let s = mock.spent(p);
            t.fresh_input += s.fresh_input;
            t.cache_read += s.cache_read;
            t.cache_write += s.cache_write;
            t.output += s.output;
            t.reasoning += s.reasoning;
        }
        t
    };
    let total = |t: &Tokens| t.fresh_input + t.cache_read + t.cache_write + t.output + t.reasoning;
    let stages: Vec<(String, u64)> = usage["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["stage"].as_str().unwrap().to_string(),
                s["totalTokens"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        stages,
        [
            ("draft".to_string(), total(&sum(&["claude"]))),
            ("review".to_string(), total(&sum(&["codex", "gemini"]))),
        ],
        "{usage}"
    );
    let all = sum(&["claude", "codex", "gemini"]);
    assert_eq!(usage["run"]["totalTokens"], total(&all));
    assert_eq!(usage["run"]["attempts"], 3);
    assert_eq!(
        usage["run"]["unpricedAttempts"], 0,
        "the catalog prices all three"
    );
    let cost = usage["run"]["costUsd"].as_f64().unwrap();
    let expected = priced(&sum(&["claude"])) + priced(&sum(&["codex"])) + priced(&sum(&["gemini"]));
    assert!((cost - expected).abs() < 1e-9, "{cost} vs {expected}");
    for (key, provider) in [
        ("drafter", "claude"),
        ("reviewer", "codex"),
        ("checker", "gemini"),
    ] {
        assert_eq!(
            usage["workers"][key]["totalTokens"],
            total(&mock.spent(provider)),
            "{key}"
        );
    }
    let text = status.stdout;
    for needle in ["tokens", "cost", "draft", "review", "(run)"] {
        assert!(text.contains(needle), "{needle}:\n{text}");
    }
}

// ---------------------------------------------------------------------------
// Confinement (docs/confinement.md#kernel-confinement): a tool call writing
// outside the job's policy fails in the agent; the tree is unchanged.
// ---------------------------------------------------------------------------

#[test]
fn claude_confined_cannot_write_outside_its_policy() {
    if !common::landlock_here() {
        return;
    }
    let steps = vec![
        // Inside the project (claude's own permission check lets it pass),
        // outside the job's write policy: the kernel refuses it.
        write_result("claude", "elsewhere/planted.md"),
        write_result("claude", "out/w.md"),
        Step::Answer("done".into()),
    ];
    let Some((fx, mock)) = one(
        "claude",
        steps,
        "claude-sonnet-4-5",
        "confinement = \"required\"",
    ) else {
        return;
    };
    let ran = exec(&fx);
    let log = log(&fx, "w");
    assert_eq!(ran.code, 0, "{log}");
    assert!(
        !fx.root().join("elsewhere").join("planted.md").exists(),
        "the tree is unchanged"
    );
    // The agent's tool reported the refusal back to the API.
    let refused = mock.requests().iter().any(|r| {
        r.body["messages"].as_array().is_some_and(|ms| {
            ms.iter().any(|m| {
                m["content"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "tool_result" && c["is_error"] == true)
                })
            })
        })
    });
    assert!(refused, "the Write tool failed in the agent:\n{log}");
    assert_eq!(rows(&fx, "w")[0]["status"], "completed");
}
