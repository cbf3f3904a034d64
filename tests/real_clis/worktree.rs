//! A real agent CLI as a `worktree = "git"` worker (docs/worktrees.md),
//! against the mock API: in a git repository, the mock has it edit a
//! tracked file with its own file tool through a path relative to its
//! working directory (its worktree) and write its result (in the project)
//! as the prompt asks. Its branch then holds exactly one commit past the
//! plan's base, that edit and nothing of the CLI's own, with the trailers
//! of the attempt (the served model, the mock's tokens); the user's
//! checkout is byte-identical; the row names the branch and the commit.
//! claude confined and not; codex and gemini confined.

use crate::common::{self, checkout, git, trailer, Fx};
use crate::e2e::{cli, exec, log, pinned, read, rows, script, unplanned, write_result, Worker};
use crate::mock_api::{MockApi, Step};
use serde_json::{json, Value};
use std::path::Path;

/// What the file tool of `provider` is told, step by step, to turn
/// `src/lib.txt` from "broken" into "fixed by <provider>", naming it
/// relative to the CLI's working directory.
fn edit_relative(provider: &str) -> Vec<Step> {
    let fixed = format!("fixed by {provider}");
    match provider {
        // claude's Edit refuses a file its Read has not read first.
        "claude" => vec![
            Step::Tool {
                name: "Read".into(),
                input: json!({"file_path": "src/lib.txt"}),
            },
            Step::Tool {
                name: "Edit".into(),
                input: json!({"file_path": "src/lib.txt", "old_string": "broken", "new_string": fixed}),
            },
        ],
        // codex edits through apply_patch, run by its shell tool.
        "codex" => vec![Step::Tool {
            name: "exec_command".into(),
            input: json!({"cmd": format!(
                "apply_patch <<'PATCH'\n*** Begin Patch\n*** Update File: src/lib.txt\n@@\n-broken\n+{fixed}\n*** End Patch\nPATCH\n"
            )}),
        }],
        "gemini" => vec![Step::Tool {
            name: "replace".into(),
            input: json!({"file_path": "src/lib.txt", "instruction": "fix it",
                          "old_string": "broken", "new_string": fixed}),
        }],
        other => panic!("no worktree script for {other}"),
    }
}

/// A git repository holding the project (spec, prompts, manifest and a
/// tracked `src/lib.txt`), what the run writes ignored, planned with one
/// worker `w` of `provider` in a worktree (`extra`: more of its lines).
fn repo(provider: &str, extra: &str) -> Option<(Fx, MockApi)> {
    let (_, served) = pinned(provider);
    let extra = format!(
        "worktree = \"git\"\nrole = \"implementer\"\nplannedPaths = [\"src/lib.txt\"]\n{extra}"
    );
    let workers = [Worker {
        key: "w",
        provider,
        stage: "agents",
        extra: &extra,
    }];
    let (fx, mock) = unplanned(&workers, |fx| {
        let mut steps = edit_relative(provider);
        // The result is in the project, not the worktree: its absolute
        // path (a relative one would land in the worktree).
        let result = fx.root().join("out/w.md").display().to_string();
        steps.push(write_result(provider, &result));
        steps.push(Step::Answer("done".into()));
        vec![(cli(provider), script(provider, steps, served))]
    })?;
    fx.p.write("src/lib.txt", "broken\n");
    fx.p.write(
        ".gitignore",
        "out/\nrun/*\n!run/run-manifest.json\nplan.json\n.okstra/\nprompts/*.log\nprompts/*.status.json\n",
    );
    common::commit_project(&fx.root());
    fx.plan();
    Some((fx, mock))
}

/// Every file in `dir` git does not track, ignored ones too: what the CLI
/// left in its worktree besides its edit.
fn untracked(dir: &Path) -> Vec<String> {
    git(
        dir,
        &[
            "status",
            "--porcelain=v1",
            "--ignored",
            "--untracked-files=all",
        ],
    )
    .lines()
    .map(str::to_string)
    .collect()
}

/// `extra` empty: confined (`auto`, where the kernel offers it).
fn edits_in_its_worktree_and_okstra_commits_it(provider: &str, extra: &str) {
    if extra.is_empty() && !common::landlock_here() {
        return;
    }
    let (_, served) = pinned(provider);
    let Some((fx, mock)) = repo(provider, extra) else {
        return;
    };
    let root = fx.root();
    let before = checkout(&root);
    let base = git(&root, &["rev-parse", "HEAD"]);
    let ran = exec(&fx);
    let log = log(&fx, "w");
    assert_eq!(ran.code, 0, "{log}");
    assert_eq!(checkout(&root), before, "the user's checkout moved\n{log}");
    assert_eq!(read(&fx, "src/lib.txt"), "broken\n", "{log}");
    assert!(read(&fx, "out/w.md").contains(provider), "{log}");

    let plan: Value = serde_json::from_str(&read(&fx, "plan.json")).unwrap();
    let digest = plan["digest"].as_str().unwrap().to_string();
    let g = &plan["stages"][0]["jobs"][0]["gitWorktree"];
    assert_eq!(g["base"], base.as_str(), "{g}");
    let branch = "okstra/e2e/w";
    assert_eq!(g["branch"], branch, "{g}");
    let tip = git(&root, &["rev-parse", &format!("refs/heads/{branch}")]);
    assert_eq!(
        git(&root, &["rev-list", "--count", &format!("{base}..{tip}")]),
        "1",
        "exactly one commit past the base\n{log}"
    );
    assert_eq!(git(&root, &["rev-parse", &format!("{tip}^")]), base);
    assert_eq!(
        git(&root, &["diff", "--name-status", &base, &tip]),
        "M\tsrc/lib.txt",
        "the edit and nothing else\n{log}"
    );
    assert_eq!(
        git(&root, &["show", &format!("{tip}:src/lib.txt")]),
        format!("fixed by {provider}")
    );

    let row = &rows(&fx, "w")[0];
    assert_eq!(row["status"], "completed", "{row}");
    let confined = row["confinement"].as_str().unwrap_or("none") != "none";
    assert_eq!(confined, extra.is_empty(), "{row}");
    // The CLI may write its result's folder, in the project.
    let out = root.join("out").display().to_string();
    let argv: Vec<String> = serde_json::from_value(row["cliArgv"].clone()).unwrap();
    let granted = match provider {
        "claude" => vec![format!("--add-dir={out}")],
        "codex" => vec!["--add-dir".into(), out],
        _ => vec![format!("--include-directories={out}")],
    };
    assert!(
        argv.windows(granted.len()).any(|w| w == granted),
        "{granted:?} in {argv:?}"
    );
    assert_eq!(row["worktreeBranch"], branch, "{row}");
    assert_eq!(row["worktreeCommit"], tip.as_str(), "{row}");
    assert_eq!(trailer(&root, &tip, "Okstra-Task"), "e2e");
    assert_eq!(trailer(&root, &tip, "Okstra-Plan-Digest"), digest);
    assert_eq!(
        trailer(&root, &tip, "Okstra-Dispatch-Id"),
        format!(
            "{}/w/attempt-1",
            &digest.trim_start_matches("sha256:")[..16]
        )
    );
    // codex names no model: the planned one.
    assert_eq!(trailer(&root, &tip, "Okstra-Model"), served);
    if provider != "codex" {
        assert_eq!(row["servedModel"], served, "{row}");
    }
    let spent = mock.spent(provider).expected_usage(provider);
    let usage = &row["usage"];
    for k in ["inputTokens", "outputTokens", "totalTokens"] {
        assert_eq!(usage[k], spent[k], "{k}: {usage}");
    }
    assert_eq!(
        trailer(&root, &tip, "Okstra-Usage"),
        format!(
            "input={} output={} total={} costUsd={:.6}",
            spent["inputTokens"],
            spent["outputTokens"],
            spent["totalTokens"],
            usage["costUsd"].as_f64().unwrap()
        )
    );

    // The worktree is kept at the commit; what the CLI left there that git
    // does not track (ignored files too) is said, for docs/worktrees.md.
    let wt = root.join(".okstra/worktrees/e2e/w");
    assert_eq!(git(&wt, &["rev-parse", "HEAD"]), tip);
    // claude and codex ran git in the worktree (whose git directory is
    // under the project's `.git/worktrees/`) and saw its branch, clean at
    // the base; gemini names its workspace: the worktree and the result's
    // folder.
    let first = mock
        .requests()
        .into_iter()
        .find(|r| r.method == "POST")
        .expect("a model request")
        .body
        .to_string();
    let seen = match provider {
        "claude" => format!(
            r"Current branch: {branch}\n\nMain branch (you will usually use this for PRs): main\n\nStatus:\n(clean)"
        ),
        "gemini" => format!(
            r"- **Workspace Directories:**\n  - {}\n  - {}\n",
            wt.display(),
            root.join("out").display()
        ),
        _ => format!(
            r#"\"workspaces\":{{\"{}\":{{\"latest_git_commit_hash\":\"{base}\",\"has_changes\":false}}}}"#,
            wt.display()
        ),
    };
    assert!(first.contains(&seen), "{seen} in {first}");
    let left = untracked(&wt);
    eprintln!(
        "{provider} (confinement {}): left in its worktree: {left:?}",
        row["confinement"]
    );
    assert_eq!(left, Vec::<String>::new(), "{log}");
}

#[test]
fn claude_edits_in_its_worktree_and_okstra_commits_it() {
    edits_in_its_worktree_and_okstra_commits_it("claude", "");
}

#[test]
fn claude_unconfined_edits_in_its_worktree_and_okstra_commits_it() {
    edits_in_its_worktree_and_okstra_commits_it("claude", "confinement = \"none\"");
}

#[test]
fn codex_edits_in_its_worktree_and_okstra_commits_it() {
    edits_in_its_worktree_and_okstra_commits_it("codex", "");
}

#[test]
fn gemini_edits_in_its_worktree_and_okstra_commits_it() {
    edits_in_its_worktree_and_okstra_commits_it("gemini", "");
}
