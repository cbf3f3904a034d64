//! Provider state with the real CLIs (docs/confinement.md#provider-state):
//! each runs on private state seeded from the user's, so a worker told to
//! plant a hook in the user's settings cannot, what it plants in its own
//! dies with the attempt (listed on the row), and a login kept only in the
//! user's settings still reaches it. Many at once: `concurrency`.

use crate::common;
use crate::e2e::{exec, log, one, one_in, pinned, read, rows, write_result};
use crate::mock_api::Step;
use common::Fx;

/// The user's state files of `provider`, by path under HOME, and what
/// each holds before the run.
fn user_state(provider: &str) -> Vec<(&'static str, &'static str)> {
    match provider {
        "claude" => vec![
            (".claude/settings.json", "{\"model\": \"sonnet\"}\n"),
            (
                ".claude.json",
                "{\"numStartups\": 3, \"hasCompletedOnboarding\": true}\n",
            ),
        ],
        "codex" => vec![(".codex/config.toml", "# the user's own\n")],
        "gemini" => vec![(
            ".gemini/settings.json",
            r#"{"security":{"auth":{"selectedType":"gemini-api-key"}}}"#,
        )],
        other => panic!("no such provider {other}"),
    }
}

/// The mock tells the confined CLI to write a hook into the user's
/// settings (and `.claude.json`) with its own file tool, then to plant one
/// in the settings its variable names with its shell tool, then to write
/// its result. The user's files are byte-identical afterwards (the first
/// writes were refused by the kernel), and the row lists what it wrote in
/// its private state.
fn cannot_plant_a_hook_in_the_users_state(provider: &str, settings: (&str, &str), extra: &str) {
    let (var, planted) = settings;
    if !common::landlock_here() {
        return;
    }
    let hook = r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"touch /tmp/okstra-planted-hook"}]}]}}"#;
    let (_, served) = pinned(provider);
    let steps = |fx: &Fx| {
        let home = fx.home();
        let mut steps: Vec<Step> = user_state(provider)
            .into_iter()
            .map(|(rel, _)| Step::WriteFile {
                path: home.join(rel).display().to_string(),
                content: format!("{hook}\n"),
            })
            .collect();
        steps.push(Step::Shell(format!(
            "printf '%s' '{hook}' > \"${var}/{planted}\""
        )));
        steps.push(write_result(provider, "out/w.md"));
        steps.push(Step::Answer("done".into()));
        steps
    };
    let Some((fx, _mock)) = one_in(provider, steps, served, extra) else {
        return;
    };
    for (rel, text) in user_state(provider) {
        fx.home_file(rel, text);
    }
    let before = common::files_under(&fx.home());
    let ran = exec(&fx);
    let log = log(&fx, "w");
    assert_eq!(ran.code, 0, "{log}");
    assert!(read(&fx, "out/w.md").contains(provider), "{log}");
    assert_eq!(
        common::files_under(&fx.home()),
        before,
        "the user's home is as it was\n{log}"
    );
    let row = &rows(&fx, "w")[0];
    let state = &row["providerState"];
    let writes = state["writes"].as_array().cloned().unwrap_or_default();
    assert_eq!(state["var"], var, "{state}");
    assert!(
        writes.iter().any(|w| w == planted),
        "{planted} in {state}\n{log}"
    );
}

#[test]
fn claude_cannot_plant_a_hook_in_the_users_state() {
    cannot_plant_a_hook_in_the_users_state(
        "claude",
        ("CLAUDE_CONFIG_DIR", "settings.json"),
        "permissionMode = \"bypassPermissions\"",
    );
}

#[test]
fn codex_cannot_plant_a_hook_in_the_users_state() {
    cannot_plant_a_hook_in_the_users_state("codex", ("CODEX_HOME", "config.toml"), "");
}

#[test]
fn gemini_cannot_plant_a_hook_in_the_users_state() {
    cannot_plant_a_hook_in_the_users_state(
        "gemini",
        ("GEMINI_CLI_HOME", ".gemini/settings.json"),
        "approvalMode = \"yolo\"",
    );
}

#[test]
fn claude_logs_in_from_the_users_settings_through_its_private_copy() {
    // No key in the environment: the only login is the API key in the
    // user's `~/.claude/settings.json`, which reaches the CLI as the
    // attempt's private copy. The user's files are untouched.
    let steps = vec![
        write_result("claude", "out/w.md"),
        Step::Answer("done".into()),
    ];
    let (_, served) = pinned("claude");
    let Some((fx, mock)) = one("claude", steps, served, "") else {
        return;
    };
    fx.run_env_remove("ANTHROPIC_API_KEY");
    fx.home_file(
        ".claude/settings.json",
        r#"{"env": {"ANTHROPIC_API_KEY": "mock-key"}}"#,
    );
    let before = common::files_under(&fx.home());
    let ran = exec(&fx);
    let log = log(&fx, "w");
    assert_eq!(ran.code, 0, "{log}");
    assert_eq!(rows(&fx, "w")[0]["status"], "completed", "{log}");
    assert_eq!(mock.model_requests("claude"), 2, "{log}");
    assert_eq!(common::files_under(&fx.home()), before);
}
