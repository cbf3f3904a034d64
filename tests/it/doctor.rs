//! `okstra doctor`, run through the real binary on fixture projects with
//! fake agent CLIs on PATH and a fake HOME: one test per finding, each
//! beside the near miss that passes.

use crate::common::*;
use serde_json::{json, Value};

/// A project, a directory of fake CLIs and a fake home.
struct Fx {
    p: Project,
    bin: tempfile::TempDir,
    home: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Fx {
    fn new() -> Fx {
        let p = Project::new();
        let mut m = v1_manifest();
        m["recommendedWorkers"] = json!([]);
        p.write_json("run/run-manifest.json", &m);
        p.write("prompts/a.md", "# a\n");
        p.write("prompts/b.md", "# b\n");
        p.write("prompts/c.md", "# c\n");
        Fx {
            p,
            bin: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
            env: Vec::new(),
        }
    }

    /// A fake `name` on PATH that answers `--version`.
    fn cli(&self, name: &str, version: &str) -> &Self {
        use std::os::unix::fs::PermissionsExt;
        let path = self.bin.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\necho '{version}'\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        self
    }

    /// A file under the fake home.
    fn home_file(&self, rel: &str, text: &str) -> &Self {
        let path = self.home.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        self
    }

    fn set(&mut self, k: &str, v: &str) -> &mut Self {
        self.env.push((k.into(), v.into()));
        self
    }

    /// `okstra doctor ARGS --format json` in a clean environment: the fake
    /// CLIs, `sh`, the fake home, and only the variables set here.
    fn doctor(&self, args: &[&str]) -> Run {
        let path = format!("{}:/usr/bin:/bin", self.bin.path().display());
        let mut cmd = assert_cmd::Command::cargo_bin("okstra").unwrap();
        cmd.current_dir(self.p.root())
            .env_clear()
            .env("PATH", path)
            .env("HOME", self.home.path())
            .env(
                "GEMINI_CLI_SYSTEM_SETTINGS_PATH",
                self.home.path().join("none.json"),
            )
            .arg("doctor")
            .args(args)
            .args(["--format", "json"]);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn with_manifest(&self, args: &[&str]) -> Run {
        let mut all = args.to_vec();
        all.extend(["--manifest", "run/run-manifest.json"]);
        self.doctor(&all)
    }
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
    let fx = Fx::new();
    let run = fx.with_manifest(&[]);
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
    let fx = Fx::new();
    let mut m = v1_manifest();
    m["recommendedWorkers"] = json!(["claude"]);
    fx.p.write_json("run/run-manifest.json", &m);
    fx.home_file(".claude/.credentials.json", CLAUDE_LOGIN);
    let run = fx.with_manifest(&[]);
    assert_eq!(run.code, 2);
    assert_eq!(status(&run, "provider claude"), "fail");
    assert!(detail(&run, "provider claude").contains("npm install -g @anthropic-ai/claude-code"));
    // One that does not answer --version fails too ...
    {
        use std::os::unix::fs::PermissionsExt;
        let c = fx.bin.path().join("claude");
        std::fs::write(&c, "#!/bin/sh\necho 'cannot start' >&2\nexit 3\n").unwrap();
        std::fs::set_permissions(&c, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let run = fx.with_manifest(&[]);
    assert_eq!(status(&run, "provider claude"), "fail");
    assert!(detail(&run, "provider claude").contains("cannot start"));
    // ... and one that answers is fine.
    fx.cli("claude", "2.1.197 (Claude Code)");
    let run = fx.with_manifest(&[]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(detail(&run, "provider claude").contains("2.1.197"));
}

#[test]
fn a_cli_the_run_needs_must_be_logged_in() {
    let mut fx = Fx::new();
    let mut m = v1_manifest();
    m["recommendedWorkers"] = json!(["claude"]);
    fx.p.write_json("run/run-manifest.json", &m);
    fx.cli("claude", "2.1.197 (Claude Code)");
    let run = fx.with_manifest(&[]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert_eq!(status(&run, "login claude"), "fail");
    let d = detail(&run, "login claude");
    assert!(
        d.contains("not logged in") && d.contains("claude auth login"),
        "{d}"
    );
    // A login file, or a key variable, is a login.
    fx.home_file(".claude/.credentials.json", CLAUDE_LOGIN);
    let run = fx.with_manifest(&[]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(detail(&run, "login claude").contains(".credentials.json"));
    std::fs::remove_file(fx.home.path().join(".claude/.credentials.json")).unwrap();
    fx.set("ANTHROPIC_API_KEY", "sk-test");
    assert_eq!(fx.with_manifest(&[]).code, 0);
}

#[test]
fn a_login_that_cannot_be_told_offline_is_a_warning() {
    let mut fx = Fx::new();
    let mut m = v1_manifest();
    m["recommendedWorkers"] = json!(["claude"]);
    fx.p.write_json("run/run-manifest.json", &m);
    fx.cli("claude", "2.1.197 (Claude Code)");
    fx.set("CLAUDE_CODE_USE_BEDROCK", "1");
    let run = fx.with_manifest(&[]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(status(&run, "login claude"), "warn");
    assert!(detail(&run, "login claude").contains("Bedrock"));
}

#[test]
fn a_spec_mode_run_names_the_clis_it_used_in_team_state() {
    // The issue's case: no roster, jobs known only from team-state rows.
    let fx = Fx::new();
    fx.p.write_json(
        "run/team-state.json",
        &json!({"workers": [{"workerId": "cx", "provider": "codex", "status": "completed", "reason": ""}],
                "workerDispatches": [{"workerId": "gm", "provider": "gemini", "attempt": 1, "status": "error"}],
                "agentDispatches": [], "agentResultLinks": []}),
    );
    let run = fx.with_manifest(&[]);
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
    let mut fx = Fx::new();
    fx.p.write("spec.toml", &spec(true));
    fx.cli("claude", "2.1.197 (Claude Code)")
        .cli("codex", "codex-cli 0.171.0");
    fx.home_file(".claude/.credentials.json", CLAUDE_LOGIN);
    let run = fx.with_manifest(&["spec.toml"]);
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
    fx.set("CODEX_API_KEY", "sk-test");
    let run = fx.with_manifest(&["spec.toml"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
}

#[test]
fn a_job_env_that_logs_its_cli_in_counts_for_that_job_only() {
    let fx = Fx::new();
    let mut s = spec(false);
    s.push_str("env = { ANTHROPIC_API_KEY = \"sk-job\" }\n");
    s.push_str("\n[[workers]]\nworkerId = \"cl2\"\nprovider = \"claude\"\nrole = \"analyst\"\npromptPath = \"prompts/c.md\"\nresultPath = \"out/c.md\"\nmodelExecutionValue = \"sonnet\"\n");
    fx.p.write("spec.toml", &s);
    fx.cli("claude", "2.1.197 (Claude Code)");
    let run = fx.with_manifest(&["spec.toml"]);
    assert_eq!(status(&run, "login claude"), "fail");
    let d = detail(&run, "login claude");
    assert!(d.contains("(for cl2)"), "{d}");
    assert!(!d.contains("(for claude"), "{d}");
}

#[test]
fn a_plan_is_checked_for_what_it_uses() {
    let fx = Fx::new();
    fx.p.write("spec.toml", &spec(false));
    assert_eq!(plan_json(&fx.p, "spec.toml").code, 0);
    fx.cli("claude", "2.1.197 (Claude Code)");
    fx.home_file(".claude/.credentials.json", CLAUDE_LOGIN);
    // The plan's manifest is checked without --manifest.
    let run = fx.doctor(&["plan.json"]);
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
    let run = fx.doctor(&["plan.json"]);
    assert_eq!(run.code, 2);
    assert_eq!(status(&run, "plan plan.json"), "fail");
    assert_eq!(run.json()["errors"][0]["code"], "plan/digest-mismatch");
}

#[test]
fn a_spec_without_a_manifest_is_an_error_that_says_so() {
    let fx = Fx::new();
    fx.p.write("spec.toml", &spec(false));
    let run = fx.doctor(&["spec.toml"]);
    assert_eq!(run.code, 2);
    let e = run.error("input/invalid");
    assert_eq!(e["file"], "spec.toml");
    assert!(e["help"].as_str().unwrap().contains("--manifest"), "{e}");
}

#[test]
fn a_file_that_is_neither_plan_nor_spec_is_an_error() {
    let fx = Fx::new();
    let run = fx.doctor(&["run/run-manifest.json"]);
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
    let run = fx.doctor(&["broken.json"]);
    let e = run.error("input/syntax");
    assert_eq!(e["line"], 2, "{e}");
    assert_eq!(
        fx.doctor(&["absent.toml"]).error("input/missing")["file"],
        "absent.toml"
    );
}

#[test]
fn a_spec_that_does_not_plan_shows_each_error_with_its_line() {
    let fx = Fx::new();
    let broken = spec(false).replace(
        "role = \"analyst\"",
        "role = \"analyst\"\nattempt = 0\nbogus = 1",
    );
    fx.p.write("spec.toml", &broken);
    let run = fx.with_manifest(&["spec.toml"]);
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
    let mut fx = Fx::new();
    fx.cli("claude", "2.1.197 (Claude Code)");
    fx.home_file(".claude/.credentials.json", CLAUDE_LOGIN);
    fx.set(okstra::confine::SIMULATE_UNAVAILABLE_ENV, "1");
    fx.p.write(
        "spec.toml",
        &format!("{}confinement = \"required\"\n", spec(false)),
    );
    let run = fx.with_manifest(&["spec.toml"]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    assert_eq!(status(&run, "confinement"), "fail");
    assert!(detail(&run, "confinement").contains("exec/confinement-unavailable"));
    // `auto` runs unconfined there: a warning.
    fx.p.write("spec.toml", &spec(false));
    let run = fx.with_manifest(&["spec.toml"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert_eq!(status(&run, "confinement"), "warn");
    // `none` asks for nothing.
    fx.p.write(
        "spec.toml",
        &format!("{}confinement = \"none\"\n", spec(false)),
    );
    let run = fx.with_manifest(&["spec.toml"]);
    assert_eq!(status(&run, "confinement"), "ok");
    assert!(detail(&run, "confinement").contains("not used"));
}

#[test]
fn pane_jobs_outside_a_multiplexer_warn_that_they_degrade() {
    let fx = Fx::new();
    fx.cli("claude", "2.1.197 (Claude Code)");
    fx.home_file(".claude/.credentials.json", CLAUDE_LOGIN);
    fx.p.write("spec.toml", &spec(false));
    let run = fx.with_manifest(&["spec.toml"]);
    assert!(
        find(&run, "backend pane").is_none(),
        "no pane job, no pane check"
    );
    fx.p.write("spec.toml", &format!("{}backend = \"pane\"\n", spec(false)));
    let run = fx.with_manifest(&["spec.toml"]);
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
    let mut fx = Fx::new();
    fx.cli("claude", "2.1.197 (Claude Code)");
    fx.home_file(".claude/.credentials.json", CLAUDE_LOGIN);
    fx.p.write("spec.toml", &format!("{}backend = \"pane\"\n", spec(false)));
    fx.set("TMUX", &env);
    // The real tmux, found on PATH beside the fake CLIs.
    let run = fx.with_manifest(&["spec.toml"]);
    let _ = tmux(&["kill-server"]);
    assert_eq!(status(&run, "backend pane"), "ok", "{}", run.stdout);
    assert!(detail(&run, "backend pane").contains("tmux"));
}

#[test]
fn a_held_lock_and_unreadable_state_fail() {
    let fx = Fx::new();
    fx.p.write("run/team-state.json", "{}");
    assert_eq!(fx.with_manifest(&[]).code, 0);
    let lock = okstra::fsutil::FileLock::try_acquire(&fx.p.path("run/team-state.json.exec.lock"))
        .unwrap()
        .unwrap();
    let run = fx.with_manifest(&[]);
    assert_eq!(run.code, 2);
    assert_eq!(status(&run, "exec lock"), "fail");
    drop(lock);
    assert_eq!(fx.with_manifest(&[]).code, 0);

    fx.p.write("run/team-state.json", "{\"workers\": 3}");
    let run = fx.with_manifest(&[]);
    assert_eq!(run.code, 2);
    assert_eq!(status(&run, "team-state"), "fail");
    fx.p.write("run/team-state.json", "not json");
    assert_eq!(status(&fx.with_manifest(&[]), "team-state"), "fail");
}

#[test]
fn a_manifest_that_is_missing_or_invalid_fails() {
    let fx = Fx::new();
    let mut m = v1_manifest();
    m["recommendedWorkers"] = json!("w1");
    fx.p.write_json("run/run-manifest.json", &m);
    let run = fx.with_manifest(&[]);
    assert_eq!(run.code, 2);
    assert_eq!(status(&run, "manifest"), "fail");
    let run = fx.doctor(&["--manifest", "nope.json"]);
    assert_eq!(run.code, 2);
    assert!(detail(&run, "manifest").contains("cannot read"));
}

#[test]
fn the_text_report_names_each_fix_and_the_count() {
    let fx = Fx::new();
    fx.p.write("spec.toml", &spec(false));
    let mut cmd = assert_cmd::Command::cargo_bin("okstra").unwrap();
    let out = cmd
        .current_dir(fx.p.root())
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", fx.bin.path().display()))
        .env("HOME", fx.home.path())
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
