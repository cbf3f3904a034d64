//! `okstra doctor`, run through the real binary on fixture projects with
//! fake agent CLIs on PATH and a fake HOME: one test per finding, each
//! beside the near miss that passes.

use crate::common::*;
use serde_json::{json, Value};

/// A project, a directory of fake CLIs and a fake home; okstra runs with
/// the fake CLIs, `sh`, the fake home, and only the variables a test sets.
fn fixture() -> Fx {
    let fx = Fx::new();
    let mut m = v1_manifest();
    m["recommendedWorkers"] = json!([]);
    fx.manifest(&m);
    fx.p.write("prompts/a.md", "# a\n");
    fx.p.write("prompts/b.md", "# b\n");
    fx.p.write("prompts/c.md", "# c\n");
    fx.clean_env()
        .bin_then("/usr/bin:/bin")
        .run_env("HOME", fx.home())
        .run_env(
            "GEMINI_CLI_SYSTEM_SETTINGS_PATH",
            fx.home().join("none.json"),
        );
    fx
}

/// A fake `name` on PATH that answers `--version`.
fn cli(fx: &Fx, name: &str, version: &str) {
    fx.bin_script(name, &format!("#!/bin/sh\necho '{version}'\n"));
}

/// `okstra doctor ARGS --format json`.
fn doctor(fx: &Fx, args: &[&str]) -> Run {
    let mut all = vec!["doctor"];
    all.extend_from_slice(args);
    all.extend(["--format", "json"]);
    fx.okstra(&all)
}

fn with_manifest(fx: &Fx, args: &[&str]) -> Run {
    let mut all = args.to_vec();
    all.extend(["--manifest", "run/run-manifest.json"]);
    doctor(fx, &all)
}

/// The check whose name starts with `name`.
fn find(run: &Run, name: &str) -> Option<Value> {
    run.json()["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"].as_str().unwrap().starts_with(name))
        .cloned()
}

#[track_caller]
fn status(run: &Run, name: &str) -> String {
    find(run, name)
        .map(|c| c["status"].as_str().unwrap().to_string())
        .unwrap_or_else(|| format!("(no check `{name}` in {})", run.stdout))
}

#[track_caller]
fn detail(run: &Run, name: &str) -> String {
    find(run, name)
        .map(|c| format!("{} / fix: {}", c["detail"], c["fix"]))
        .unwrap_or_else(|| panic!("no check `{name}` in {}", run.stdout))
}

fn names(run: &Run) -> Vec<String> {
    run.json()["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

/// A v1 spec with a claude job, and a codex job when `codex`.
fn spec(codex: bool) -> String {
    let mut s = String::from(
        "[[workers]]\nworkerId = \"claude\"\nrole = \"analyst\"\npromptPath = \"prompts/a.md\"\nresultPath = \"out/a.md\"\nmodelExecutionValue = \"sonnet\"\n",
    );
    if codex {
        s.push_str("\n[[workers]]\nworkerId = \"cx\"\nprovider = \"codex\"\nrole = \"analyst\"\npromptPath = \"prompts/b.md\"\nresultPath = \"out/b.md\"\nmodelExecutionValue = \"gpt-5\"\n");
    }
    s
}

const CLAUDE_LOGIN: &str =
    r#"{"claudeAiOauth":{"accessToken":"a","refreshToken":"r","scopes":["user:inference"]}}"#;

#[test]
fn all_is_well_for_a_run_of_command_jobs_with_no_cli_installed() {
    let fx = fixture();
    let run = with_manifest(&fx, &[]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(run.json()["ok"], true);
    for name in [
        "schemas",
        "manifest",
        "team-state",
        "exec lock",
        "run directory",
    ] {
        assert_eq!(status(&run, name), "ok", "{name}: {}", run.stdout);
    }
    // Nothing of the run names claude: missing and not logged in warn.
    assert_eq!(status(&run, "provider claude"), "warn");
    assert_eq!(status(&run, "login claude"), "warn");
    assert!(detail(&run, "provider claude").contains("give doctor the plan or spec"));
}

#[test]
fn a_cli_the_roster_needs_must_be_on_path_and_answer() {
    let fx = fixture();
    let mut m = v1_manifest();
    m["recommendedWorkers"] = json!(["claude"]);
    fx.p.write_json("run/run-manifest.json", &m);
    fx.home_file(".claude/.credentials.json", CLAUDE_LOGIN);
    let run = with_manifest(&fx, &[]);
    assert_eq!(run.code, 2);
    assert_eq!(status(&run, "provider claude"), "fail");
    assert!(detail(&run, "provider claude").contains("npm install -g @anthropic-ai/claude-code"));
    // One that does not answer --version fails too ...
    fx.bin_script("claude", "#!/bin/sh\necho 'cannot start' >&2\nexit 3\n");
    let run = with_manifest(&fx, &[]);
    assert_eq!(status(&run, "provider claude"), "fail");
    assert!(detail(&run, "provider claude").contains("cannot start"));
    // ... and one that answers is fine.
    cli(&fx, "claude", "2.1.197 (Claude Code)");
    let run = with_manifest(&fx, &[]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(detail(&run, "provider claude").contains("2.1.197"));
}

#[test]
fn a_cli_the_run_needs_must_be_logged_in() {
    let fx = fixture();
    let mut m = v1_manifest();
    m["recommendedWorkers"] = json!(["claude"]);
    fx.p.write_json("run/run-manifest.json", &m);
    cli(&fx, "claude", "2.1.197 (Claude Code)");
    let run = with_manifest(&fx, &[]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert_eq!(status(&run, "login claude"), "fail");
    let d = detail(&run, "login claude");
    assert!(
        d.contains("not logged in") && d.contains("claude auth login"),
        "{d}"
    );
    // A login file, or a key variable, is a login.
    fx.home_file(".claude/.credentials.json", CLAUDE_LOGIN);
    let run = with_manifest(&fx, &[]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(detail(&run, "login claude").contains(".credentials.json"));
    std::fs::remove_file(fx.home().join(".claude/.credentials.json")).unwrap();
    fx.run_env("ANTHROPIC_API_KEY", "sk-test");
    assert_eq!(with_manifest(&fx, &[]).code, 0);
}

#[test]
fn a_login_that_cannot_be_told_offline_is_a_warning() {
    let fx = fixture();
    let mut m = v1_manifest();
    m["recommendedWorkers"] = json!(["claude"]);
    fx.p.write_json("run/run-manifest.json", &m);
    cli(&fx, "claude", "2.1.197 (Claude Code)");
    fx.run_env("CLAUDE_CODE_USE_BEDROCK", "1");
    let run = with_manifest(&fx, &[]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(status(&run, "login claude"), "warn");
    assert!(detail(&run, "login claude").contains("Bedrock"));
}

#[test]
fn a_spec_mode_run_names_the_clis_it_used_in_team_state() {
    // The issue's case: no roster, jobs known only from team-state rows.
    let fx = fixture();
    fx.p.write_json(
        "run/team-state.json",
        &json!({"workers": [{"workerId": "cx", "provider": "codex", "status": "completed", "reason": ""}],
                "workerDispatches": [{"workerId": "gm", "provider": "gemini", "attempt": 1, "status": "error"}],
                "agentDispatches": [], "agentResultLinks": []}),
    );
    let run = with_manifest(&fx, &[]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    for cli in ["codex", "gemini"] {
        assert_eq!(
            status(&run, &format!("provider {cli}")),
            "fail",
            "{}",
            run.stdout
        );
        assert!(!detail(&run, &format!("provider {cli}")).contains("no job"));
    }
    assert_eq!(status(&run, "provider claude"), "warn");
}

#[test]
fn a_spec_is_planned_in_memory_and_exactly_its_providers_are_checked() {
    let fx = fixture();
    fx.p.write("spec.toml", &spec(true));
    cli(&fx, "claude", "2.1.197 (Claude Code)");
    cli(&fx, "codex", "codex-cli 0.171.0");
    fx.home_file(".claude/.credentials.json", CLAUDE_LOGIN);
    let run = with_manifest(&fx, &["spec.toml"]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert_eq!(status(&run, "spec spec.toml"), "ok");
    assert!(detail(&run, "spec spec.toml").contains("2 jobs"));
    assert_eq!(status(&run, "login claude"), "ok");
    assert_eq!(status(&run, "login codex"), "fail");
    // gemini is not used: not checked at all.
    assert!(
        !names(&run).iter().any(|n| n.contains("gemini")),
        "{:?}",
        names(&run)
    );
    assert!(!fx.p.exists("plan.json"), "doctor writes no plan");
    assert!(!fx.p.exists("run/team-state.json"), "nor state");
    // codex logged in by the variable it reads.
    fx.run_env("CODEX_API_KEY", "sk-test");
    let run = with_manifest(&fx, &["spec.toml"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
}

#[test]
fn a_job_env_that_logs_its_cli_in_counts_for_that_job_only() {
    let fx = fixture();
    let mut s = spec(false);
    s.push_str("env = { ANTHROPIC_API_KEY = \"sk-job\" }\n");
    s.push_str("\n[[workers]]\nworkerId = \"cl2\"\nprovider = \"claude\"\nrole = \"analyst\"\npromptPath = \"prompts/c.md\"\nresultPath = \"out/c.md\"\nmodelExecutionValue = \"sonnet\"\n");
    fx.p.write("spec.toml", &s);
    cli(&fx, "claude", "2.1.197 (Claude Code)");
    let run = with_manifest(&fx, &["spec.toml"]);
    assert_eq!(status(&run, "login claude"), "fail");
    let d = detail(&run, "login claude");
    assert!(d.contains("(for cl2)"), "{d}");
    assert!(!d.contains("(for claude"), "{d}");
}

#[test]
fn a_plan_is_checked_for_what_it_uses() {
    let fx = fixture();
    fx.p.write("spec.toml", &spec(false));
    assert_eq!(plan_json(&fx.p, "spec.toml").code, 0);
    cli(&fx, "claude", "2.1.197 (Claude Code)");
    fx.home_file(".claude/.credentials.json", CLAUDE_LOGIN);
    // The plan's manifest is checked without --manifest.
    let run = doctor(&fx, &["plan.json"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(status(&run, "plan plan.json"), "ok");
    assert_eq!(status(&run, "manifest"), "ok");
    assert_eq!(status(&run, "login claude"), "ok");
    assert!(!names(&run)
        .iter()
        .any(|n| n.contains("codex") || n.contains("gemini")));
    // An edited plan is refused with its code.
    let text = fx.p.read("plan.json").replacen("sonnet", "opus", 1);
    fx.p.write("plan.json", &text);
    let run = doctor(&fx, &["plan.json"]);
    assert_eq!(run.code, 2);
    assert_eq!(status(&run, "plan plan.json"), "fail");
    assert_eq!(run.json()["errors"][0]["code"], "plan/digest-mismatch");
}

#[test]
fn a_spec_without_a_manifest_is_an_error_that_says_so() {
    let fx = fixture();
    fx.p.write("spec.toml", &spec(false));
    let run = doctor(&fx, &["spec.toml"]);
    assert_eq!(run.code, 2);
    let e = run.error("input/invalid");
    assert_eq!(e["file"], "spec.toml");
    assert!(e["help"].as_str().unwrap().contains("--manifest"), "{e}");
}

#[test]
fn a_file_that_is_neither_plan_nor_spec_is_an_error() {
    let fx = fixture();
    let run = doctor(&fx, &["run/run-manifest.json"]);
    assert_eq!(run.code, 2);
    let e = run.error("input/invalid");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("neither a plan nor a job spec"),
        "{e}"
    );
    assert!(e["help"].as_str().is_some());
    // A broken JSON file says where it breaks; a missing one that it is.
    fx.p.write("broken.json", "{\n  \"workers\": [,]\n}\n");
    let run = doctor(&fx, &["broken.json"]);
    let e = run.error("input/syntax");
    assert_eq!(e["line"], 2, "{e}");
    assert_eq!(
        doctor(&fx, &["absent.toml"]).error("input/missing")["file"],
        "absent.toml"
    );
}

#[test]
fn a_spec_that_does_not_plan_shows_each_error_with_its_line() {
    let fx = fixture();
    let broken = spec(false).replace(
        "role = \"analyst\"",
        "role = \"analyst\"\nattempt = 0\nbogus = 1",
    );
    fx.p.write("spec.toml", &broken);
    let run = with_manifest(&fx, &["spec.toml"]);
    assert_eq!(run.code, 2);
    assert_eq!(status(&run, "spec spec.toml"), "fail");
    let errors = run.json()["errors"].as_array().unwrap().clone();
    assert!(!errors.is_empty());
    for e in &errors {
        assert_eq!(e["file"], "spec.toml", "{e}");
        assert!(e["line"].as_u64().is_some(), "{e}");
    }
}

#[test]
fn required_confinement_where_there_is_none_fails() {
    let fx = fixture();
    cli(&fx, "claude", "2.1.197 (Claude Code)");
    fx.home_file(".claude/.credentials.json", CLAUDE_LOGIN);
    fx.run_env(okstra::confine::SIMULATE_UNAVAILABLE_ENV, "1");
    fx.p.write(
        "spec.toml",
        &format!("{}confinement = \"required\"\n", spec(false)),
    );
    let run = with_manifest(&fx, &["spec.toml"]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert_eq!(status(&run, "confinement"), "fail");
    assert!(detail(&run, "confinement").contains("exec/confinement-unavailable"));
    // `auto` runs unconfined there: a warning.
    fx.p.write("spec.toml", &spec(false));
    let run = with_manifest(&fx, &["spec.toml"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(status(&run, "confinement"), "warn");
    // `none` asks for nothing.
    fx.p.write(
        "spec.toml",
        &format!("{}confinement = \"none\"\n", spec(false)),
    );
    let run = with_manifest(&fx, &["spec.toml"]);
    assert_eq!(status(&run, "confinement"), "ok");
    assert!(detail(&run, "confinement").contains("not used"));
}

#[test]
fn pane_jobs_outside_a_multiplexer_warn_that_they_degrade() {
    let fx = fixture();
    cli(&fx, "claude", "2.1.197 (Claude Code)");
    fx.home_file(".claude/.credentials.json", CLAUDE_LOGIN);
    fx.p.write("spec.toml", &spec(false));
    let run = with_manifest(&fx, &["spec.toml"]);
    assert!(
        find(&run, "backend pane").is_none(),
        "no pane job, no pane check"
    );
    fx.p.write("spec.toml", &format!("{}backend = \"pane\"\n", spec(false)));
    let run = with_manifest(&fx, &["spec.toml"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(status(&run, "backend pane"), "warn");
    assert!(detail(&run, "backend pane").contains("degradedFrom"));
}

#[test]
fn pane_jobs_inside_tmux_are_fine() {
    if std::process::Command::new("tmux")
        .arg("-V")
        .output()
        .is_err()
    {
        missing(
            "REQUIRE_TMUX",
            "tmux is not installed (.ci/run installs it)",
        );
        return;
    }
    let socket = format!("okstra-doctor-{}", std::process::id());
    let tmux = |args: &[&str]| {
        std::process::Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .env_remove("TMUX")
            .output()
            .unwrap()
    };
    assert!(tmux(&["new-session", "-d", "-s", "doc"]).status.success());
    let env = String::from_utf8_lossy(
        &tmux(&[
            "display-message",
            "-p",
            "-t",
            "doc",
            "#{socket_path},#{pid},#{session_id}",
        ])
        .stdout,
    )
    .trim()
    .to_string();
    let fx = fixture();
    cli(&fx, "claude", "2.1.197 (Claude Code)");
    fx.home_file(".claude/.credentials.json", CLAUDE_LOGIN);
    fx.p.write("spec.toml", &format!("{}backend = \"pane\"\n", spec(false)));
    fx.run_env("TMUX", &env);
    // The real tmux, found on PATH beside the fake CLIs.
    let run = with_manifest(&fx, &["spec.toml"]);
    let _ = tmux(&["kill-server"]);
    assert_eq!(status(&run, "backend pane"), "ok", "{}", run.stdout);
    assert!(detail(&run, "backend pane").contains("tmux"));
}

#[test]
fn a_held_lock_and_unreadable_state_fail() {
    let fx = fixture();
    fx.p.write("run/team-state.json", "{}");
    assert_eq!(with_manifest(&fx, &[]).code, 0);
    let lock = okstra::fsutil::FileLock::try_acquire(&fx.p.path("run/team-state.json.exec.lock"))
        .unwrap()
        .unwrap();
    let run = with_manifest(&fx, &[]);
    assert_eq!(run.code, 2);
    assert_eq!(status(&run, "exec lock"), "fail");
    drop(lock);
    assert_eq!(with_manifest(&fx, &[]).code, 0);

    fx.p.write("run/team-state.json", "{\"workers\": 3}");
    let run = with_manifest(&fx, &[]);
    assert_eq!(run.code, 2);
    assert_eq!(status(&run, "team-state"), "fail");
    fx.p.write("run/team-state.json", "not json");
    assert_eq!(status(&with_manifest(&fx, &[]), "team-state"), "fail");
}

#[test]
fn a_manifest_that_is_missing_or_invalid_fails() {
    let fx = fixture();
    let mut m = v1_manifest();
    m["recommendedWorkers"] = json!("w1");
    fx.p.write_json("run/run-manifest.json", &m);
    let run = with_manifest(&fx, &[]);
    assert_eq!(run.code, 2);
    assert_eq!(status(&run, "manifest"), "fail");
    let run = doctor(&fx, &["--manifest", "nope.json"]);
    assert_eq!(run.code, 2);
    assert!(detail(&run, "manifest").contains("cannot read"));
}

#[test]
fn the_text_report_names_each_fix_and_the_count() {
    let fx = fixture();
    fx.p.write("spec.toml", &spec(false));
    let mut cmd = assert_cmd::Command::cargo_bin("okstra").unwrap();
    let out = cmd
        .current_dir(fx.p.root())
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", fx.bin().display()))
        .env("HOME", fx.home())
        .args(["doctor", "spec.toml", "--manifest", "run/run-manifest.json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2));
    assert!(text.contains("FAIL  provider claude"), "{text}");
    assert!(text.contains("FAIL  login claude: not logged in"), "{text}");
    assert!(text.contains("      fix: "), "{text}");
    assert!(text.ends_with("2 problems found\n"), "{text}");
}

#[test]
fn a_cli_state_that_cannot_be_seeded_fails_the_run_that_needs_it() {
    // Each attempt runs on private state seeded from the user's
    // (docs/confinement.md#provider-state); a seed that cannot be copied
    // would refuse every attempt, so doctor says so first.
    let fx = fixture();
    let mut m = v1_manifest();
    m["recommendedWorkers"] = json!(["claude"]);
    fx.p.write_json("run/run-manifest.json", &m);
    cli(&fx, "claude", "2.1.197 (Claude Code)");
    fx.run_env("ANTHROPIC_API_KEY", "sk-test");
    fx.home_file(".claude/settings.json", "{}");
    fx.home_file(".claude.json", "{}");
    let run = with_manifest(&fx, &[]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(status(&run, "state claude"), "ok");
    let d = detail(&run, "state claude");
    assert!(
        d.contains("CLAUDE_CONFIG_DIR")
            && d.contains("settings.json")
            && d.contains(".claude.json"),
        "{d}"
    );
    // A link that resolves to itself cannot be read.
    std::fs::remove_file(fx.home().join(".claude/settings.json")).unwrap();
    std::os::unix::fs::symlink("settings.json", fx.home().join(".claude/settings.json")).unwrap();
    let run = with_manifest(&fx, &[]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert_eq!(status(&run, "state claude"), "fail");
    let d = detail(&run, "state claude");
    assert!(
        d.contains("settings.json") && d.contains("confinement-failed"),
        "{d}"
    );
}
