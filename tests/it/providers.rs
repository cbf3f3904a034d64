//! Agent providers end to end (docs/exec.md#running-a-stage,
//! docs/providers.md#the-worker-wrapper): `okstra exec` runs fake `claude`,
//! `codex` and `gemini` CLIs (one sh script on a temporary PATH) that record
//! their argv and stdin and print what the real CLIs print (PROVIDERS.md):
//! claude's stream-json `system`/`init` event with `model` and `session_id`, an
//! answer naming the model that served and the final `result` with
//! `modelUsage`; codex's `thread.started` and `turn.completed` with usage;
//! gemini's stream-json `init` and `result` with `stats`. The pane backend runs
//! under a real tmux server started by the test.

use crate::common::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

/// One script for the three CLIs, told apart by the name it was run as.
/// `FAKE_MODE` (from the job's env) picks the behaviour; `FAKE_SERVED`
/// overrides the model it reports.
const FAKE_CLI: &str = r#"#!/bin/sh
name=$(basename "$0")
S="$SCRATCH"; K="$OKSTRA_WORKER_KEY"
n=$(cat "$S/$K.count" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$S/$K.count"
: > "$S/$K.$n.argv"
for a in "$@"; do printf '%s\n' "$a" >> "$S/$K.$n.argv"; done
cat > "$S/$K.$n.stdin"
printf '%s\n' "${IS_SANDBOX:-}" > "$S/$K.$n.sandbox"
model=""; sid=""; prev=""
for a in "$@"; do
  case "$prev" in --model|-m) model="$a";; --session-id) sid="$a";; esac
  prev="$a"
done
served="${FAKE_SERVED:-$model}"
# Argument errors come before any structured output.
if [ "${FAKE_MODE:-}" = bad-args ]; then
  case "$name" in
    claude) echo "error: unknown option '--bogus'" >&2; exit 1 ;;
    codex) echo "error: unexpected argument '--bogus' found" >&2; exit 2 ;;
    gemini)
      # As gemini 0.61: the refused argument first, then ~4 KB of usage.
      echo "Unknown arguments: bogus, also-bogus" >&2
      i=0; while [ $i -lt 80 ]; do echo "  --option-$i  what option $i does, at some length" >&2; i=$((i+1)); done
      exit 1 ;;
  esac
fi
if [ "${FAKE_MODE:-}" = root-bypass ]; then
  echo "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons" >&2
  exit 1
fi
# In a tmux pane: which one, and its title and window name.
if [ -n "${TMUX_PANE:-}" ]; then
  tmux display-message -p -t "$TMUX_PANE" '#{pane_title} #{window_name}' >> "$S/pane.txt"
fi
# The opening events, and (claude) the first answer naming the model that served.
case "$name" in
  claude)
    printf '{"type":"system","subtype":"init","cwd":"%s","session_id":"%s","tools":[],"model":"%s","permissionMode":"acceptEdits"}\n' "$PWD" "$sid" "$model"
    printf '{"type":"assistant","message":{"id":"msg_1","model":"%s","usage":{"input_tokens":100,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"%s"}\n' "$served" "$sid" ;;
  codex) printf '{"type":"thread.started","thread_id":"thread-%s-%s"}\n{"type":"turn.started"}\n' "$K" "$n" ;;
  gemini) printf '{"type":"init","timestamp":"2026-01-01T00:00:00Z","session_id":"gem-%s-%s","model":"%s"}\n' "$K" "$n" "$model" ;;
esac
write() { mkdir -p "$(dirname "$OKSTRA_RESULT_PATH")"; echo done > "$OKSTRA_RESULT_PATH"; }
case "${FAKE_MODE:-ok}" in
  ok) write ;;
  refresh)
    # As a CLI that refreshes its login while it works (several times, the
    # last stamp FAKE_STAMP), and is talked into planting a hook and
    # rewriting its settings: all in the state its variable names.
    case "$name" in
      claude) d="$CLAUDE_CONFIG_DIR"; creds="$d/.credentials.json"; settings="$d/settings.json"; other="$d/.claude.json" ;;
      codex) d="$CODEX_HOME"; creds="$d/auth.json"; settings="$d/config.toml"; other="$d/history.jsonl" ;;
      gemini) d="$GEMINI_CLI_HOME/.gemini"; creds="$d/oauth_creds.json"; settings="$d/settings.json"; other="$d/projects.json" ;;
    esac
    for i in 4 3 2 1 0; do
      t=$((FAKE_STAMP - i))
      case "$name" in
        claude) printf '{"claudeAiOauth":{"accessToken":"at-%s","refreshToken":"rt-%s","expiresAt":%s,"scopes":["user:inference"]}}' "$t" "$t" "$t" > "$creds" ;;
        codex) printf '{"tokens":{"access_token":"at-%s","refresh_token":"rt-%s"},"last_refresh":"2026-12-04T10:00:%02dZ"}' "$t" "$t" "$((t % 60))" > "$creds" ;;
        gemini) printf '{"access_token":"at-%s","refresh_token":"rt","expiry_date":%s}' "$t" "$t" > "$creds" ;;
      esac
      sleep 0.01
    done
    echo '{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"touch /tmp/planted"}]}]}}' > "$settings"
    echo '{"planted":true}' > "$other"
    [ "${FAKE_HANG:-}" = 1 ] && [ "$n" -eq 1 ] && { touch "$S/$K.refreshed"; sleep 60; }
    write ;;
  first-forgets) [ "$n" -gt 1 ] && write ;;
  sleep) sleep 30 ;;
  not-logged-in)
    case "$name" in
      claude) echo '{"type":"result","subtype":"success","is_error":true,"result":"Not logged in · Please run /login","total_cost_usd":0,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0},"modelUsage":{}}'; exit 1 ;;
      codex)
        echo '{"type":"error","message":"Missing environment variable: `MOCK_KEY`."}'
        echo '{"type":"turn.failed","error":{"message":"Missing environment variable: `MOCK_KEY`."}}'; exit 1 ;;
      gemini) echo 'Please set an Auth method in your settings.json or specify one of the following environment variables before running: GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, GOOGLE_GENAI_USE_GCA' >&2; exit 41 ;;
    esac ;;
  key-refused)
    # As the real CLIs against an API answering 401 (gemini: 400
    # API_KEY_INVALID): claude and codex report a retry, then keep retrying
    # (claude for 3 minutes) unless stopped.
    case "$name" in
      claude)
        echo '{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":572.1,"error_status":401,"error":"authentication_failed","session_id":"s"}'
        sleep 30
        echo '{"type":"result","subtype":"success","is_error":true,"api_error_status":401,"result":"Invalid API key · Fix external API key"}'; exit 1 ;;
      codex)
        echo '{"type":"error","message":"Reconnecting... 1/5 (unexpected status 401 Unauthorized: Incorrect API key provided: k, url: http://127.0.0.1:9/v1/responses)"}'
        sleep 30; exit 1 ;;
      gemini)
        echo '{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: {\"error\":{\"code\":400,\"message\":\"API key not valid. Please pass a valid API key.\",\"status\":\"INVALID_ARGUMENT\",\"details\":[{\"reason\":\"API_KEY_INVALID\"}]}}]"},"stats":{"total_tokens":0,"input_tokens":0,"output_tokens":0}}'
        exit 144 ;;
    esac ;;
  api-error)
    echo '{"type":"result","subtype":"success","is_error":true,"api_error_status":529,"result":"API Error: overloaded","total_cost_usd":0.001,"modelUsage":{"m":{"inputTokens":50,"outputTokens":5}}}'; exit 1 ;;
esac
# The final usage event, as each CLI prints it (PROVIDERS.md).
case "$name" in
  claude) printf '{"type":"result","subtype":"success","is_error":false,"session_id":"%s","total_cost_usd":0.0123,"usage":{"input_tokens":100,"cache_creation_input_tokens":10,"cache_read_input_tokens":30,"output_tokens":20},"modelUsage":{"%s":{"inputTokens":100,"outputTokens":20,"cacheReadInputTokens":30,"cacheCreationInputTokens":10,"costUSD":0.0123}}}\n' "$sid" "$model" ;;
  codex) echo '{"type":"turn.completed","usage":{"input_tokens":200,"cached_input_tokens":50,"cache_write_input_tokens":0,"output_tokens":40,"reasoning_output_tokens":8}}' ;;
  gemini) printf '{"type":"result","timestamp":"t","status":"success","stats":{"total_tokens":330,"input_tokens":250,"output_tokens":60,"cached":20,"input":230,"duration_ms":1,"tool_calls":0,"models":{"%s":{"total_tokens":330,"input_tokens":250,"output_tokens":60,"cached":20,"input":230}}}}\n' "$served" ;;
esac
exit 0
"#;

/// A catalog: a claude channel, a gemini pinned model, a codex pinned model.
fn manifest(terminal_backend: &str) -> Value {
    let mut m = v1_manifest();
    m["terminalBackend"] = json!(terminal_backend);
    m["models"] = json!({
        "sonnet": {"provider": "claude", "modelId": "sonnet", "versionKind": "channel", "channelFamily": "claude-sonnet"},
        "gem-pro": {"provider": "gemini", "modelId": "gemini-2.5-pro", "versionKind": "pinned", "channelFamily": "gemini-pro"},
        "gpt": {"provider": "codex", "modelId": "gpt-5", "versionKind": "pinned", "channelFamily": "gpt",
                "pricing": {"input": 1.25, "cachedInput": 0.125, "output": 10}}
    });
    m
}

/// A worker entry; `extra` is more TOML for it.
pub(crate) fn worker(id: &str, provider: &str, model: &str, extra: &str) -> String {
    format!(
        "[[stages.workers]]\nworkerId = \"{id}\"\nprovider = \"{provider}\"\nmodelExecutionValue = \"{model}\"\npromptPath = \"prompts/{id}.md\"\nresultPath = \"results/{id}.md\"\n{extra}\n"
    )
}

/// A project of `workers` (TOML entries) in one stage, planned, with fake
/// `claude`, `codex` and `gemini` first on okstra's PATH, `SCRATCH` in its
/// environment (reaching the fake CLIs through exec's environment, which a
/// pane's launcher restores; confined, in a debug build, they may write it)
/// and a fake HOME (the providers' state directories a confined worker may
/// write, `~/.claude`, ..., are made there, not in the real home).
pub(crate) fn fixture(terminal_backend: &str, workers: &[String]) -> Fx {
    let fx = Fx::new();
    fx.bin_script("fake-cli", FAKE_CLI);
    for name in ["claude", "codex", "gemini"] {
        std::os::unix::fs::symlink(fx.bin().join("fake-cli"), fx.bin().join(name)).unwrap();
    }
    fx.manifest(&manifest(terminal_backend))
        .mkdir("results")
        .mkdir("wt")
        .mkdir("aux")
        .defaults("role = \"analyst\"")
        .stage(
            "agents",
            workers.iter().map(|w| {
                let id = w
                    .lines()
                    .find_map(|l| l.strip_prefix("workerId = \""))
                    .unwrap()
                    .trim_end_matches('"');
                Job::entry(id, w.as_str()).prompt(&format!("# prompt of {id}\n"))
            }),
        )
        .plan();
    fx.bin_then(std::env::var_os("PATH").unwrap_or_default())
        .run_env("SCRATCH", fx.scratch_dir())
        .run_env(okstra::confine::TEST_ALSO_WRITABLE_ENV, fx.scratch_dir())
        .run_env("HOME", fx.home())
        .run_env_remove("TMUX")
        .run_env_remove("TMUX_PANE")
        .run_env_remove("CMUX_WORKSPACE_ID")
        .run_env_remove("CMUX_SOCKET_PATH");
    fx
}

/// The argv of `key`'s `n`th run of a fake CLI.
fn argv(fx: &Fx, key: &str, n: u32) -> Vec<String> {
    std::fs::read_to_string(fx.scratch(&format!("{key}.{n}.argv")))
        .unwrap_or_else(|e| panic!("{key} run {n} recorded no argv: {e}"))
        .lines()
        .map(str::to_string)
        .collect()
}

/// What `key`'s `n`th run of a fake CLI read on its input.
fn stdin(fx: &Fx, key: &str, n: u32) -> String {
    std::fs::read_to_string(fx.scratch(&format!("{key}.{n}.stdin"))).unwrap()
}

/// `key`'s lead events.
fn key_events(fx: &Fx, key: &str) -> Vec<Value> {
    fx.events()
        .into_iter()
        .filter(|e| e["workerKey"] == key)
        .collect()
}

/// `key`'s error-log records.
fn key_errors(fx: &Fx, key: &str) -> Vec<Value> {
    fx.errors()
        .into_iter()
        .filter(|e| e["agent"] == format!("{key}-worker"))
        .collect()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// `flag value` appears as adjacent arguments.
fn has_pair(argv: &[String], flag: &str, value: &str) -> bool {
    argv.windows(2).any(|w| w[0] == flag && w[1] == value)
}

#[test]
fn claude_argv_prompt_and_a_fresh_session_id_per_attempt() {
    let fx = fixture(
        "cli-wrapper",
        &[worker(
            "cl",
            "claude",
            "sonnet",
            "worktreePath = \"wt\"\nauxiliaryRoots = [\"aux\"]\nenv = { FAKE_MODE = \"first-forgets\", FAKE_SERVED = \"claude-sonnet-4-5-20250929\" }",
        )],
    );
    let run = fx.exec(&[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let root = fx.root();
    let mut sessions = Vec::new();
    for n in [1, 2] {
        let argv = argv(&fx, "cl", n);
        assert_eq!(argv[..1], strings(&["-p"]), "{argv:?}");
        assert!(has_pair(&argv, "--model", "sonnet"), "{argv:?}");
        assert!(has_pair(&argv, "--output-format", "stream-json"));
        assert!(argv.contains(&"--verbose".to_string()));
        assert!(has_pair(&argv, "--permission-mode", "acceptEdits"));
        let adds: Vec<&String> = argv.iter().filter(|a| a.starts_with("--add-dir")).collect();
        assert_eq!(
            adds,
            [
                &format!("--add-dir={}/wt", root.display()),
                &format!("--add-dir={}/aux", root.display())
            ],
            "one --add-dir= per write-scope directory besides the root"
        );
        let i = argv.iter().position(|a| a == "--session-id").unwrap();
        let sid = argv[i + 1].clone();
        assert!(uuid::Uuid::parse_str(&sid).is_ok(), "{sid}");
        sessions.push(sid);
        assert_eq!(
            stdin(&fx, "cl", n),
            "# prompt of cl\n",
            "the prompt on stdin"
        );
    }
    assert_ne!(sessions[0], sessions[1], "a fresh session id per attempt");
    // Confined by default where the kernel offers Landlock: claude is told
    // it is in a sandbox. Confined or not, it runs on private state: nothing
    // of claude's is made in this test's HOME.
    let confined = okstra::confine::offer().applied() != "none";
    let sandbox = std::fs::read_to_string(fx.scratch_dir().join("cl.1.sandbox")).unwrap();
    assert_eq!(sandbox.trim() == "1", confined, "IS_SANDBOX={sandbox}");
    assert!(!fx.home().join(".claude").exists());
    let rows = fx.dispatch_rows("cl");
    assert_eq!(rows.len(), 2, "{rows:?}");
    for (row, sid) in rows.iter().zip(&sessions) {
        assert_eq!(row["providerState"]["var"], "CLAUDE_CONFIG_DIR", "{row}");
        assert_eq!(&row["sessionId"], sid, "{row}");
        // The CLI echoes the id okstra gave it.
        assert_eq!(&row["cliSessionId"], sid, "{row}");
        assert_eq!(row["servedModel"], "claude-sonnet-4-5-20250929");
    }
    assert_eq!(rows[1]["status"], "completed");
    let collected: Vec<Value> = key_events(&fx, "cl")
        .into_iter()
        .filter(|e| e["type"] == "worker-result-collected")
        .collect();
    assert_eq!(collected[0]["servedModel"], "claude-sonnet-4-5-20250929");
    assert_eq!(collected[0]["cliSessionId"], sessions[1].as_str());
}

#[test]
fn codex_and_gemini_argv_and_stdin() {
    let scope = "worktreePath = \"wt\"\nauxiliaryRoots = [\"aux\"]";
    let fx = fixture(
        "cli-wrapper",
        &[
            worker("cx", "codex", "gpt-5", scope),
            worker("gm", "gemini", "gemini-2.5-pro", scope),
        ],
    );
    let run = fx.exec(&[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let root = fx.root();
    let r = root.display().to_string();
    let wt = format!("{r}/wt");
    let aux = format!("{r}/aux");

    // Confined (the default `auto`, where the kernel offers Landlock), codex
    // runs without its own sandbox, which cannot start inside okstra's.
    let confined = matches!(
        okstra::confine::offer(),
        okstra::confine::Offer::Landlock { .. }
    );
    let sandbox = if confined {
        "danger-full-access"
    } else {
        "workspace-write"
    };
    let codex = argv(&fx, "cx", 1);
    assert_eq!(
        codex,
        strings(&[
            "exec",
            "-m",
            "gpt-5",
            "-C",
            &r,
            "--sandbox",
            sandbox,
            "--json",
            "--skip-git-repo-check",
            "--add-dir",
            &wt,
            "--add-dir",
            &aux,
            "-",
        ])
    );
    assert_eq!(stdin(&fx, "cx", 1), "# prompt of cx\n");
    let row = &fx.dispatch_rows("cx")[0];
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(row["cliSessionId"], "thread-cx-1");
    assert!(
        row.get("sessionId").is_none(),
        "codex takes no okstra session id: {row}"
    );
    assert!(row.get("servedModel").is_none(), "codex reports no model");

    let gemini = argv(&fx, "gm", 1);
    assert_eq!(
        gemini,
        strings(&[
            "-m",
            "gemini-2.5-pro",
            "--approval-mode",
            "auto_edit",
            "--skip-trust",
            "--output-format",
            "stream-json",
            &format!("--include-directories={wt},{aux}"),
        ])
    );
    assert_eq!(stdin(&fx, "gm", 1), "# prompt of gm\n");
    let row = &fx.dispatch_rows("gm")[0];
    assert_eq!(row["status"], "completed", "{row}");
    // Pinned and served exactly: passes.
    assert_eq!(row["servedModel"], "gemini-2.5-pro");
    assert_eq!(row["cliSessionId"], "gem-gm-1");
}

#[test]
fn spec_options_reach_the_cli() {
    let fx = fixture(
        "cli-wrapper",
        &[
            worker(
                "cl",
                "claude",
                "sonnet",
                "permissionMode = \"plan\"\nextraArgs = [\"--max-turns\", \"3\"]",
            ),
            // Unconfined: confined, codex runs without a sandbox of its own
            // whatever the spec says (codex_and_gemini_argv_and_stdin).
            worker(
                "cx",
                "codex",
                "gpt-5",
                "sandboxMode = \"read-only\"\nconfinement = \"none\"",
            ),
            worker("gm", "gemini", "gemini-2.5-pro", "approvalMode = \"yolo\""),
        ],
    );
    let run = fx.exec(&[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let cl = argv(&fx, "cl", 1);
    assert!(has_pair(&cl, "--permission-mode", "plan"), "{cl:?}");
    assert!(has_pair(&cl, "--max-turns", "3"), "{cl:?}");
    assert!(has_pair(&argv(&fx, "cx", 1), "--sandbox", "read-only"));
    let gm = argv(&fx, "gm", 1);
    assert!(has_pair(&gm, "--approval-mode", "yolo"), "{gm:?}");
    assert!(gm.contains(&"--skip-trust".to_string()));
}

#[test]
fn served_model_mismatch_is_never_completed() {
    let fx = fixture(
        "cli-wrapper",
        &[
            // A channel selection served by another family.
            worker(
                "cl",
                "claude",
                "sonnet",
                "env = { FAKE_SERVED = \"claude-opus-4-1\" }",
            ),
            // A pinned selection served by another version.
            worker(
                "gm",
                "gemini",
                "gemini-2.5-pro",
                "env = { FAKE_SERVED = \"gemini-2.5-flash\" }",
            ),
        ],
    );
    let run = fx.exec(&[]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    for (key, served) in [("cl", "claude-opus-4-1"), ("gm", "gemini-2.5-flash")] {
        let rows = fx.dispatch_rows(key);
        assert_eq!(rows.len(), 1, "a mismatch is not retried: {rows:?}");
        let row = &rows[0];
        assert_eq!(row["status"], "error", "{row}");
        assert_eq!(row["exitCode"], 86, "{row}");
        assert_eq!(row["servedModel"], served);
        assert_eq!(row["failureKind"], "served-model-mismatch");
        let reason = row["reason"].as_str().unwrap();
        assert!(reason.contains("served"), "{reason}");
        assert_eq!(fx.worker_row(key)["status"], "error");
        assert!(key_events(&fx, key)
            .iter()
            .all(|e| e["type"] != "worker-result-collected"));
        let errors = key_errors(&fx, key);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0]["exitCode"], 86);
        assert!(
            errors[0]["message"]
                .as_str()
                .unwrap()
                .contains("served-model-mismatch"),
            "{}",
            errors[0]
        );
        let status = fx.p.read_json(&format!("prompts/{key}.md.status.json"));
        assert_eq!(status["exitCode"], 86);
        assert!(
            status["error"].as_str().unwrap().contains(served),
            "{status}"
        );
    }
}

#[test]
fn wall_clock_timeout_stops_a_cli_that_never_ends() {
    let fx = fixture(
        "cli-wrapper",
        &[worker(
            "cx",
            "codex",
            "gpt-5",
            "timeoutSeconds = 1\nenv = { FAKE_MODE = \"sleep\" }",
        )],
    );
    let started = Instant::now();
    let run = fx.exec(&[]);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let row = &fx.dispatch_rows("cx")[0];
    assert_eq!(row["status"], "timeout", "{row}");
    assert_eq!(row["exitCode"], 124);
    assert!(
        row["reason"].as_str().unwrap().contains("wall-clock"),
        "{row}"
    );
    assert_eq!(fx.worker_row("cx")["status"], "timeout");
    let errors = key_errors(&fx, "cx");
    assert_eq!(errors[0]["exitCode"], 124);
    assert!(errors[0]["message"]
        .as_str()
        .unwrap()
        .contains("timeoutSeconds"));
}

#[test]
fn failure_kinds_are_told_apart_in_the_error_log() {
    let fx = fixture(
        "cli-wrapper",
        &[
            worker(
                "c1",
                "claude",
                "sonnet",
                "env = { FAKE_MODE = \"not-logged-in\" }",
            ),
            worker(
                "c2",
                "claude",
                "sonnet",
                "env = { FAKE_MODE = \"bad-args\" }",
            ),
            worker(
                "c3",
                "claude",
                "sonnet",
                "env = { FAKE_MODE = \"api-error\" }",
            ),
            worker("x1", "codex", "gpt-5", "env = { FAKE_MODE = \"bad-args\" }"),
            worker(
                "x2",
                "codex",
                "gpt-5",
                "env = { FAKE_MODE = \"not-logged-in\" }",
            ),
            worker(
                "g1",
                "gemini",
                "gemini-2.5-pro",
                "env = { FAKE_MODE = \"not-logged-in\" }",
            ),
            worker(
                "g2",
                "gemini",
                "gemini-2.5-pro",
                "env = { FAKE_MODE = \"bad-args\" }",
            ),
        ],
    );
    let run = fx.exec(&[]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    for (key, code, kind) in [
        ("c1", 1, "not-logged-in"),
        ("c2", 1, "argument-error"),
        ("c3", 1, "api-error"),
        ("x1", 2, "argument-error"),
        ("x2", 1, "not-logged-in"),
        ("g1", 41, "not-logged-in"),
        ("g2", 1, "argument-error"),
    ] {
        let row = &fx.dispatch_rows(key)[0];
        assert_eq!(row["status"], "error", "{key}: {row}");
        assert_eq!(row["exitCode"], code, "{key}: {row}");
        assert_eq!(row["failureKind"], kind, "{key}: {row}");
        let errors = key_errors(&fx, key);
        assert_eq!(errors.len(), 1, "{key}: {errors:?}");
        let message = errors[0]["message"].as_str().unwrap();
        assert!(
            message.starts_with("attempt 1: ") && message.contains(&format!("[{kind}]")),
            "{key}: {message}"
        );
        // And the wrapper said so in the log, which the excerpt carries.
        let log = fx.p.read(&format!("prompts/{key}.md.log"));
        assert!(log.contains(kind), "{key}: {log}");
    }
    // A missing login says how to log in, quoting the CLI.
    for (key, fix, said) in [
        (
            "c1",
            "claude auth login",
            "Not logged in · Please run /login",
        ),
        (
            "x2",
            "codex login",
            "Missing environment variable: `MOCK_KEY`.",
        ),
        ("g1", "GEMINI_API_KEY", "Please set an Auth method"),
    ] {
        let reason = fx.dispatch_rows(key)[0]["reason"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(reason.contains("is not logged in"), "{key}: {reason}");
        assert!(reason.contains(fix), "{key}: {reason}");
        assert!(
            reason.contains(&format!("said: \"{said}")),
            "{key}: {reason}"
        );
    }
}

#[test]
fn a_refused_key_is_its_own_kind_and_a_retry_of_it_is_stopped() {
    let fx = fixture(
        "cli-wrapper",
        &[
            worker(
                "c1",
                "claude",
                "sonnet",
                "env = { FAKE_MODE = \"key-refused\" }",
            ),
            worker(
                "x1",
                "codex",
                "gpt-5",
                "env = { FAKE_MODE = \"key-refused\" }",
            ),
            worker(
                "g1",
                "gemini",
                "gemini-2.5-pro",
                "env = { FAKE_MODE = \"key-refused\" }",
            ),
        ],
    );
    let started = Instant::now();
    let run = fx.exec(&[]);
    // The fakes would retry for 30 s: stopped at their first retry report.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{}",
        run.stdout
    );
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    for (key, code, said) in [
        ("c1", 1, "api_retry 1 of 10: 401 authentication_failed"),
        (
            "x1",
            1,
            "Reconnecting... 1/5 (unexpected status 401 Unauthorized: Incorrect API key provided: k,",
        ),
        (
            "g1",
            144,
            "API key not valid. Please pass a valid API key. (400 INVALID_ARGUMENT, API_KEY_INVALID)",
        ),
    ] {
        let row = &fx.dispatch_rows(key)[0];
        assert_eq!(row["status"], "error", "{key}: {row}");
        assert_eq!(row["exitCode"], code, "{key}: {row}");
        assert_eq!(row["failureKind"], "credentials-refused", "{key}: {row}");
        let reason = row["reason"].as_str().unwrap();
        assert!(
            reason.contains("the API refused the credentials") && !reason.contains("not logged in"),
            "{key}: {reason}"
        );
        assert!(reason.contains(&format!("said: \"{said}")), "{key}: {reason}");
        let errors = key_errors(&fx, key);
        assert!(
            errors[0]["message"]
                .as_str()
                .unwrap()
                .contains("[credentials-refused]"),
            "{key}: {errors:?}"
        );
    }
    // The stopped CLI's own code is kept beside the wrapper's.
    let sidecar = fx.p.read_json("prompts/c1.md.status.json");
    assert_eq!(sidecar["exitCode"], 1, "{sidecar}");
    assert!(sidecar["childExitCode"].is_i64(), "{sidecar}");
}

#[test]
fn every_attempt_records_the_argv_it_ran() {
    let fx = fixture(
        "cli-wrapper",
        &[
            worker("cl", "claude", "sonnet", ""),
            worker("cx", "codex", "gpt-5", ""),
            worker("gm", "gemini", "gemini-2.5-pro", ""),
        ],
    );
    let run = fx.exec(&[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    for (key, program) in [("cl", "claude"), ("cx", "codex"), ("gm", "gemini")] {
        // What the CLI itself received, program name first.
        let mut ran = vec![program.to_string()];
        ran.extend(argv(&fx, key, 1));
        let status = fx.p.read_json(&format!("prompts/{key}.md.status.json"));
        assert_eq!(status["argv"], json!(ran), "{key}: the sidecar");
        let row = &fx.dispatch_rows(key)[0];
        assert_eq!(row["cliArgv"], json!(ran), "{key}: the dispatch row");
        assert!(
            row["argv"]
                .as_array()
                .unwrap()
                .contains(&json!("--provider")),
            "{key}: the wrapper's own argv stays: {row}"
        );
        let collected = &fx.p.events_of("worker-result-collected", key)[0];
        assert_eq!(collected["cliArgv"], json!(ran), "{key}: the event");
    }
    // A failure records it as well (here the CLI refused it).
    let fx = fixture(
        "cli-wrapper",
        &[worker(
            "cx",
            "codex",
            "gpt-5",
            "env = { FAKE_MODE = \"bad-args\" }",
        )],
    );
    assert_eq!(fx.exec(&[]).code, 1);
    let row = &fx.dispatch_rows("cx")[0];
    assert_eq!(row["cliArgv"][0], "codex", "{row}");
    assert_eq!(row["failureKind"], "argument-error");
}

#[test]
fn usage_of_each_provider_on_the_sidecar_the_row_and_the_event() {
    let fx = fixture(
        "cli-wrapper",
        &[
            worker(
                "cl",
                "claude",
                "sonnet",
                "env = { FAKE_SERVED = \"claude-sonnet-4-5-20250929\" }",
            ),
            worker("cx", "codex", "gpt-5", ""),
            worker("gm", "gemini", "gemini-2.5-pro", ""),
        ],
    );
    let run = fx.exec(&[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let expected = [
        // claude: modelUsage, cache outside its input; its own estimate.
        (
            "cl",
            json!({"inputTokens": 140, "cachedInputTokens": 30, "cacheWriteTokens": 10,
                   "outputTokens": 20, "totalTokens": 160, "model": "claude-sonnet-4-5-20250929",
                   "costUsd": 0.0123, "costSource": "cli-estimate", "tokensFrom": "cli-output"}),
        ),
        // codex: no cost of its own; the catalog prices gpt.
        // 150 fresh at 1.25, 50 cached at 0.125, 40 out at 10 per million.
        (
            "cx",
            json!({"inputTokens": 200, "cachedInputTokens": 50, "cacheWriteTokens": 0,
                   "outputTokens": 40, "reasoningTokens": 8, "totalTokens": 240,
                   "costUsd": 0.00059375, "costSource": "price-table", "tokensFrom": "cli-output"}),
        ),
        // gemini: thoughts are output; no pricing in the catalog: no cost.
        (
            "gm",
            json!({"inputTokens": 250, "cachedInputTokens": 20, "outputTokens": 80,
                   "reasoningTokens": 20, "totalTokens": 330, "model": "gemini-2.5-pro",
                   "tokensFrom": "cli-output"}),
        ),
    ];
    for (key, usage) in &expected {
        let status = fx.p.read_json(&format!("prompts/{key}.md.status.json"));
        assert_eq!(&status["usage"], usage, "{key}: the sidecar");
        let row = &fx.dispatch_rows(key)[0];
        assert_eq!(&row["usage"], usage, "{key}: the dispatch row");
        assert_eq!(row["stage"], "agents", "{key}");
        let collected = &fx.p.events_of("worker-result-collected", key)[0];
        assert_eq!(&collected["usage"], usage, "{key}: the event");
    }

    // The exec summary, as JSON, and the text table's columns.
    let json_run = fx.p.okstra(STATUS_JSON);
    assert_eq!(json_run.code, 0, "{}", json_run.stderr);
    let doc = json_run.json();
    assert_eq!(doc["usage"]["run"]["totalTokens"], 730, "{doc}");
    assert_eq!(doc["usage"]["run"]["attempts"], 3);
    assert_eq!(doc["usage"]["run"]["costUsd"], 0.01289375);
    assert_eq!(doc["usage"]["run"]["unpricedAttempts"], 1, "gemini's");
    assert_eq!(doc["usage"]["workers"]["cx"]["totalTokens"], 240);
    assert_eq!(doc["usage"]["stages"][0]["stage"], "agents");
    let text =
        fx.p.okstra(&["status", "--manifest", "run/run-manifest.json"]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    let out = &text.stdout;
    assert!(out.contains("tokens") && out.contains("cost"), "{out}");
    let line = |start: &str| {
        out.lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no line {start:?} in:\n{out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(line("cl ").contains("160 $0.0123"), "{out}");
    assert!(line("gm ").contains("330 ?"), "{out}");
    assert!(
        line("(run)").starts_with(
            "(run) 3 730 590 (cached 100, cache write 10) 140 (reasoning 28) $0.0129+?"
        ),
        "{out}"
    );
}

#[test]
fn the_exec_summary_carries_each_jobs_usage() {
    let fx = fixture(
        "cli-wrapper",
        &[
            worker("cx", "codex", "gpt-5", ""),
            worker(
                "cl",
                "claude",
                "sonnet",
                "env = { FAKE_MODE = \"first-forgets\" }",
            ),
        ],
    );
    let mut cmd = fx.command(&["exec", "plan.json"]);
    cmd.args(["--format", "json"]);
    let run = run(cmd);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let doc: Value = serde_json::from_str(&run.stdout).unwrap();
    let job = |key: &str| {
        doc["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["key"] == key)
            .cloned()
            .unwrap()
    };
    assert_eq!(job("cx")["usage"]["totalTokens"], 240, "{doc}");
    // Both attempts of the retried job count.
    assert_eq!(job("cl")["usage"]["attempts"], 2, "{doc}");
    assert_eq!(job("cl")["usage"]["totalTokens"], 320, "{doc}");
    assert_eq!(doc["usage"]["totalTokens"], 560, "{doc}");
    let text = fx.command(&["exec", "plan.json"]).output().unwrap();
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(
        out.contains("tokens") && out.contains("spent 560 tokens"),
        "{out}"
    );
}

#[test]
fn an_idle_worker_reads_124_and_timeout_on_every_record() {
    let fx = fixture(
        "cli-wrapper",
        &[worker(
            "cl",
            "claude",
            "sonnet",
            "idleTimeoutSeconds = 1\nenv = { FAKE_MODE = \"sleep\" }",
        )],
    );
    let started = Instant::now();
    let run = fx.exec(&[]);
    assert!(started.elapsed() < Duration::from_secs(25));
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let status = fx.p.read_json("prompts/cl.md.status.json");
    assert_eq!(status["exitCode"], 124, "{status}");
    assert_eq!(status["failureKind"], "timeout", "{status}");
    let row = &fx.dispatch_rows("cl")[0];
    assert_eq!(row["status"], "timeout", "{row}");
    assert_eq!(row["exitCode"], 124, "{row}");
    assert_eq!(row["failureKind"], "timeout", "{row}");
    let errors = key_errors(&fx, "cl");
    assert_eq!(errors[0]["exitCode"], 124, "{errors:?}");
    assert!(errors[0]["message"].as_str().unwrap().contains("idle"));
}

#[test]
fn an_argument_error_names_the_argument_and_the_excerpt_keeps_both_ends() {
    let fx = fixture(
        "cli-wrapper",
        &[
            worker(
                "gm",
                "gemini",
                "gemini-2.5-pro",
                "env = { FAKE_MODE = \"bad-args\" }",
            ),
            worker(
                "cl",
                "claude",
                "sonnet",
                "env = { FAKE_MODE = \"bad-args\" }",
            ),
            worker("cx", "codex", "gpt-5", "env = { FAKE_MODE = \"bad-args\" }"),
        ],
    );
    assert_eq!(fx.exec(&[]).code, 1);
    for (key, refused) in [
        ("gm", "Unknown arguments: bogus, also-bogus"),
        ("cl", "error: unknown option '--bogus'"),
        ("cx", "error: unexpected argument '--bogus' found"),
    ] {
        let row = &fx.dispatch_rows(key)[0];
        assert_eq!(row["failureKind"], "argument-error", "{key}: {row}");
        let reason = row["reason"].as_str().unwrap();
        assert!(
            reason.contains(&format!("refused its arguments: {refused}")),
            "{key}: {reason}"
        );
        let errors = key_errors(&fx, key);
        assert!(
            errors[0]["message"].as_str().unwrap().contains(refused),
            "{key}"
        );
    }
    // gemini's refusal comes before 4 KB of usage text: the excerpt keeps
    // the head that names it and the tail where the wrapper said why.
    let excerpt = key_errors(&fx, "gm")[0]["stderrExcerpt"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(excerpt.starts_with("Unknown arguments: bogus"), "{excerpt}");
    assert!(excerpt.contains('…'), "{excerpt}");
    assert!(
        excerpt.trim_end().ends_with("and the CLI version)"),
        "{excerpt}"
    );
    let line = std::fs::read_to_string(fx.p.path("run/errors.jsonl")).unwrap();
    assert!(line.lines().all(|l| l.len() < 4096));
}

#[test]
fn claude_refusing_bypass_permissions_as_root_says_how_to_get_past_it() {
    let fx = fixture(
        "cli-wrapper",
        &[worker(
            "cl",
            "claude",
            "sonnet",
            "permissionMode = \"bypassPermissions\"\nenv = { FAKE_MODE = \"root-bypass\" }",
        )],
    );
    assert_eq!(fx.exec(&[]).code, 1);
    let row = &fx.dispatch_rows("cl")[0];
    assert_eq!(row["failureKind"], "argument-error", "{row}");
    let reason = row["reason"].as_str().unwrap();
    assert!(reason.contains("cannot be used with root"), "{reason}");
    assert!(reason.contains("IS_SANDBOX=1"), "{reason}");
    assert!(!reason.contains("missing results/cl.md;") || reason.contains("IS_SANDBOX"));
}

#[test]
fn keys_without_a_value_are_absent_not_empty() {
    let fx = fixture(
        "cli-wrapper",
        &[
            worker("cx", "codex", "gpt-5", ""),
            worker("gm", "gemini", "gemini-2.5-pro", ""),
        ],
    );
    assert_eq!(fx.exec(&[]).code, 0);
    let team = fx.p.team();
    for row in team["workerDispatches"].as_array().unwrap() {
        assert!(row.get("sessionId").is_none(), "{row}");
        assert!(row.get("dispatchId").is_none(), "v1, no invocation: {row}");
    }
    let attempts = team["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    for a in attempts {
        assert!(a.get("dispatchId").is_none(), "{a}");
    }
    for e in fx.p.run_events() {
        assert!(
            e.get("sessionId").is_none() && e.get("dispatchId").is_none(),
            "{e}"
        );
    }
}

// ---------------------------------------------------------------------------
// The pane backend
// ---------------------------------------------------------------------------

#[test]
fn pane_jobs_degrade_to_cli_wrapper_outside_a_multiplexer() {
    let fx = fixture("pane", &[worker("cl", "claude", "sonnet", "")]);
    let plan = fx.p.read_json("plan.json");
    assert_eq!(plan["stages"][0]["jobs"][0]["backend"], "pane");
    let run = fx.exec(&[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("degradedFrom"), "{}", run.stderr);
    let row = &fx.dispatch_rows("cl")[0];
    assert_eq!(row["backend"], "cli-wrapper", "{row}");
    assert_eq!(row["degradedFrom"], "pane", "{row}");
    assert_eq!(row["status"], "completed");
    let events = key_events(&fx, "cl");
    assert!(!events.is_empty());
    for e in events {
        assert_eq!(e["dispatchMode"], "cli-wrapper", "{e}");
        assert_eq!(e["degradedFrom"], "pane", "{e}");
    }
}

/// A tmux server on its own socket, killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start() -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            missing(
                "REQUIRE_TMUX",
                "tmux is not installed (.ci/run installs it)",
            );
            return None;
        }
        let socket = format!("okstra-test-{}", uuid::Uuid::new_v4());
        let t = Tmux { socket };
        let ok = t
            .cmd(&["new-session", "-d", "-s", "okstra", "-x", "200", "-y", "50"])
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux new-session failed");
        Some(t)
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]).args(args).env_remove("TMUX");
        c
    }

    fn out(&self, args: &[&str]) -> String {
        let out = self.cmd(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).status();
    }
}

#[test]
fn pane_jobs_run_in_a_tmux_window_titled_with_the_worker() {
    let Some(tmux) = Tmux::start() else {
        return;
    };
    // What `$TMUX` and `$TMUX_PANE` say inside the session's first pane.
    let tmux_env = tmux.out(&[
        "display-message",
        "-p",
        "-t",
        "okstra",
        "#{socket_path},#{pid},#{session_id}",
    ]);
    let pane = tmux.out(&["display-message", "-p", "-t", "okstra", "#{pane_id}"]);
    // The fake CLI asks the tmux server about its pane, through tmux's unix
    // socket: a confined worker's network (unix sockets included) is opened
    // for it (docs/confinement.md#network).
    let fx = fixture(
        "pane",
        &[worker(
            "cl",
            "claude",
            "sonnet",
            "env = { FAKE_MODE = \"first-forgets\" }\nnetwork = \"open\"",
        )],
    );
    let probe = fx.scratch_dir().join("pane.txt");
    let mut cmd = fx.command(&["exec", "plan.json"]);
    cmd.env("TMUX", &tmux_env).env("TMUX_PANE", &pane);
    let run = run(cmd);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("tmux"), "{}", run.stderr);

    let rows = fx.dispatch_rows("cl");
    assert_eq!(rows.len(), 2, "a retry in a pane too: {rows:?}");
    for row in &rows {
        assert_eq!(row["backend"], "pane", "{row}");
        assert!(row.get("degradedFrom").is_none(), "{row}");
    }
    assert_eq!(rows[1]["status"], "completed");
    assert_ne!(rows[0]["sessionId"], rows[1]["sessionId"]);
    assert_eq!(rows[1]["cliSessionId"], rows[1]["sessionId"]);
    for e in key_events(&fx, "cl") {
        assert_eq!(e["dispatchMode"], "pane", "{e}");
    }
    // It ran in a pane of that tmux server, titled `<workerId>-worker`.
    let seen = std::fs::read_to_string(&probe).unwrap();
    assert_eq!(
        seen.lines().collect::<Vec<_>>(),
        ["cl-worker cl-worker", "cl-worker cl-worker"],
        "{seen}"
    );
    // The log was written (teed from the pane) and the prompt delivered.
    assert!(fx
        .p
        .read("prompts/cl.md.log")
        .contains("\"subtype\":\"init\""));
    assert_eq!(stdin(&fx, "cl", 2), "# prompt of cl\n");
}

#[test]
fn a_pane_worker_that_never_ends_is_stopped_at_its_wall_clock() {
    let Some(tmux) = Tmux::start() else {
        return;
    };
    let tmux_env = tmux.out(&[
        "display-message",
        "-p",
        "-t",
        "okstra",
        "#{socket_path},#{pid},#{session_id}",
    ]);
    let fx = fixture(
        "pane",
        &[worker(
            "cx",
            "codex",
            "gpt-5",
            "timeoutSeconds = 1\nenv = { FAKE_MODE = \"sleep\" }",
        )],
    );
    let mut cmd = fx.command(&["exec", "plan.json"]);
    cmd.env("TMUX", &tmux_env);
    let started = Instant::now();
    let run = run(cmd);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let row = &fx.dispatch_rows("cx")[0];
    assert_eq!(row["backend"], "pane");
    assert_eq!(row["status"], "timeout", "{row}");
    // The pane is gone with its worker.
    let deadline = Instant::now() + Duration::from_secs(5);
    while tmux
        .out(&["list-windows", "-a", "-F", "#{window_name}"])
        .contains("cx-worker")
    {
        assert!(Instant::now() < deadline, "the worker's window stayed");
        std::thread::sleep(Duration::from_millis(50));
    }
}
