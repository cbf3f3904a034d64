//! `worktree = "git"` planned by the real binary on a fixture project that
//! is a real git repository (docs/worktrees.md#planning): each job's
//! worktree, branch and base; the dirty-tree check and its near misses;
//! bases that name no commit; and the wrapper's `--workdir`.

use crate::common::*;
use serde_json::Value;
use std::process::Command;

/// Three `command` implementers in one stage, each in a git worktree and
/// each planning `src/lib.rs`; `extra`, one more line for each.
fn three_implementers(extra: &str) -> Fx {
    let fx = Fx::new();
    fx.v1().commands();
    fx.p.write("src/lib.rs", "pub fn one() {}\n");
    let jobs = ["a", "b", "c"].map(|id| {
        let j = job(id, "true")
            .implementer(&["src/lib.rs"])
            .with("worktree = \"git\"");
        if extra.is_empty() {
            j
        } else {
            j.with(extra)
        }
    });
    fx.stage("edit", jobs);
    fx
}

/// The project made a repository holding everything it has, committed.
fn commit_all(fx: &Fx) -> String {
    commit_project(fx.p.root())
}

/// `okstra plan spec.toml` in the fixture's environment, JSON out.
fn plan(fx: &Fx) -> Run {
    fx.okstra(&PLAN)
}

const PLAN: [&str; 8] = [
    "plan",
    "spec.toml",
    "--manifest",
    "run/run-manifest.json",
    "--out",
    "plan.json",
    "--format",
    "json",
];

fn jobs(fx: &Fx) -> Vec<Value> {
    let plan = fx.p.read_json("plan.json");
    plan["stages"][0]["jobs"].as_array().unwrap().clone()
}

#[test]
fn three_implementers_of_the_same_file_each_get_a_worktree_at_head() {
    let fx = three_implementers("");
    let head = commit_all(&fx);
    let run = plan(&fx);
    assert_code(&run, 0);
    let planned = jobs(&fx);
    assert_eq!(planned.len(), 3);
    for (job, id) in planned.iter().zip(["a", "b", "c"]) {
        let wt = format!(".okstra/worktrees/fixture-task/{id}");
        assert_eq!(job["worktreePath"], wt.as_str());
        let g = &job["gitWorktree"];
        assert_eq!(g["branch"], format!("okstra/fixture-task/{id}"));
        assert_eq!(g["base"], head.as_str());
        assert_eq!(g["baseFrom"], "head");
        assert_eq!(g["keep"], true);
        // Its worktree, not the checkout's `src/lib.rs`.
        let allow: Vec<&str> = job["writePolicy"]["allow"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(allow.contains(&format!("{wt}/**").as_str()), "{allow:?}");
        assert!(!allow.contains(&"src/lib.rs"), "{allow:?}");
        // The wrapper works there; its results stay the project's.
        let command: Vec<&str> = job["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let at = command.iter().position(|a| *a == "--workdir").unwrap();
        assert_eq!(command[at + 1], wt);
        assert!(command.contains(&format!("results/{id}.md").as_str()));
    }
    // The review names the branch and its base.
    let shown = fx.p.okstra(&["show", "plan.json"]);
    assert_code(&shown, 0);
    assert!(
        shown.stdout.contains(&format!(
            "branch    okstra/fixture-task/a  from {} (head)",
            &head[..12]
        )),
        "{}",
        shown.stdout
    );
    // Near miss: the same three in the checkout conflict.
    let text = fx.p.read("spec.toml").replace("worktree = \"git\"\n", "");
    fx.p.write("spec.toml", &text);
    std::fs::remove_file(fx.p.path("plan.json")).unwrap();
    let run = plan(&fx);
    assert_code(&run, 2);
    assert!(run.codes().contains(&"rules/write-conflict".to_string()));
}

/// An unstaged change to a tracked file and an untracked file.
fn dirty(fx: &Fx) {
    fx.p.write("src/lib.rs", "pub fn one() {}\npub fn two() {}\n");
    fx.p.write("notes.txt", "to do\n");
}

#[test]
fn a_dirty_checkout_is_refused_naming_each_change() {
    let fx = three_implementers("");
    commit_all(&fx);
    dirty(&fx);
    let run = plan(&fx);
    assert_code(&run, 3);
    assert_eq!(run.codes(), ["plan/dirty-tree"], "one diagnostic");
    let e = run.error("plan/dirty-tree");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("notes.txt") && message.contains("src/lib.rs"),
        "{message}"
    );
    assert_eq!(e["pointer"], "/stages/0/workers/0/worktree");
    assert!(e["help"]
        .as_str()
        .unwrap()
        .contains("worktreeBase = \"index\""));
    assert!(
        !fx.p.exists("plan.json"),
        "a refused plan writes no plan file"
    );
    // The text form says where.
    let text =
        fx.p.okstra(&["plan", "spec.toml", "--manifest", "run/run-manifest.json"]);
    assert_code(&text, 3);
    assert!(text.stderr.contains("plan/dirty-tree"), "{}", text.stderr);
}

#[test]
fn a_dirty_checkout_planned_on_its_index_is_a_commit_on_head() {
    let fx = three_implementers("worktreeBase = \"index\"");
    let head = commit_all(&fx);
    dirty(&fx);
    git(fx.p.root(), &["add", "src/lib.rs"]);
    let run = plan(&fx);
    assert_code(&run, 0);
    let planned = jobs(&fx);
    let base = planned[0]["gitWorktree"]["base"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(base, head);
    assert_eq!(git(fx.p.root(), &["rev-parse", &format!("{base}^")]), head);
    assert!(git(fx.p.root(), &["show", &format!("{base}:src/lib.rs")]).contains("two"));
    for job in &planned {
        assert_eq!(job["gitWorktree"]["base"], base.as_str());
        assert_eq!(job["gitWorktree"]["baseFrom"], "index");
    }
    // Nothing of the user's moved: the change is still staged, HEAD is HEAD.
    assert_eq!(git(fx.p.root(), &["rev-parse", "HEAD"]), head);
    assert_eq!(
        git(fx.p.root(), &["diff", "--cached", "--name-only"]),
        "src/lib.rs"
    );
    // A named commit is not judged against the checkout either.
    let text =
        fx.p.read("spec.toml")
            .replace("worktreeBase = \"index\"", "worktreeBase = \"main\"");
    fx.p.write("spec.toml", &text);
    assert_code(&plan(&fx), 0);
    assert_eq!(jobs(&fx)[0]["gitWorktree"]["base"], head.as_str());
    assert_eq!(jobs(&fx)[0]["gitWorktree"]["baseFrom"], "main");
}

#[test]
fn a_base_that_names_no_commit_is_refused_once() {
    let fx = three_implementers("worktreeBase = \"no-such-ref\"");
    commit_all(&fx);
    let run = plan(&fx);
    assert_code(&run, 3);
    assert_eq!(run.codes(), ["plan/worktree-base"], "one cause, one report");
    let e = run.error("plan/worktree-base");
    assert_eq!(e["pointer"], "/stages/0/workers/0/worktreeBase");
    assert!(e["message"].as_str().unwrap().contains("no-such-ref"));
    assert!(!fx.p.exists("plan.json"));

    // No repository at all.
    let fx = three_implementers("");
    let run = plan(&fx);
    assert_code(&run, 3);
    assert_eq!(run.codes(), ["plan/worktree-base"]);
    let e = run.error("plan/worktree-base");
    assert_eq!(e["pointer"], "/stages/0/workers/0/worktree");
    assert!(e["help"].as_str().unwrap().contains("git init"));

    // A repository with no commit yet.
    git(fx.p.root(), &["init", "-q"]);
    let run = plan(&fx);
    assert_code(&run, 3);
    assert_eq!(run.codes(), ["plan/worktree-base"]);
}

#[test]
fn the_worktree_keys_that_do_not_go_together_are_refused() {
    let fx = three_implementers("worktreePath = \"wt\"");
    commit_all(&fx);
    let run = plan(&fx);
    assert_code(&run, 2);
    let e = run.error("schema/violation");
    assert_eq!(e["pointer"], "/stages/0/workers/0/worktreePath");
    assert!(e["help"].as_str().unwrap().contains("drop `worktreePath`"));

    let fx = Fx::new();
    fx.v1().commands().defaults("worktreeKeep = false");
    fx.stage("one", [job("a", "true")]);
    let run = plan(&fx);
    assert_code(&run, 2);
    let e = run.error("schema/violation");
    assert_eq!(e["pointer"], "/defaults/worktreeKeep");
    assert!(e["message"]
        .as_str()
        .unwrap()
        .contains("no `worktree = \"git\"`"));
    // `okstra validate` says the same of the spec alone.
    let v = fx.p.okstra(&[
        "validate",
        "spec.toml",
        "--kind",
        "jobs",
        "--format",
        "json",
    ]);
    assert_eq!(
        v.error("schema/violation")["pointer"],
        "/defaults/worktreeKeep"
    );
}

#[test]
fn replanning_over_a_first_plan_and_its_results_is_not_dirty() {
    let fx = three_implementers("");
    commit_all(&fx);
    assert_code(&plan(&fx), 0);
    // What a run leaves in the project: results, sidecars, the run's
    // records, okstra's own directory.
    for id in ["a", "b", "c"] {
        fx.p.write(&format!("results/{id}.md"), "done\n");
        fx.p.write(&format!("prompts/{id}.md.log"), "log\n");
        fx.p.write(&format!("prompts/{id}.md.status.json"), "{}\n");
    }
    fx.p.write("run/lead-events.jsonl", "");
    fx.p.write(".okstra/worktrees/fixture-task/a/src/lib.rs", "x\n");
    let run = plan(&fx);
    assert_code(&run, 0);
    // Near miss: one file of the user's among them is still seen.
    fx.p.write("results/notes.md", "mine\n");
    let run = plan(&fx);
    assert_code(&run, 3);
    let message = run.error("plan/dirty-tree")["message"].to_string();
    assert!(message.contains("results/notes.md"), "{message}");
    assert!(!message.contains("results/a.md"), "{message}");
}

#[test]
fn a_project_below_the_top_of_its_repository_is_judged_there() {
    let fx = three_implementers("");
    let top = fx.outside("repo");
    // The repository's top is above the project: move the project in.
    let project = top.join("app");
    std::fs::rename(fx.p.root(), &project).unwrap();
    git(&top, &["init", "-q", "-b", "main"]);
    git(&top, &["add", "-A"]);
    git(&top, &["commit", "-q", "-m", "fixture"]);
    let run_in = |args: &[&str]| {
        let mut cmd = fx.command(args);
        cmd.current_dir(&project);
        crate::common::run(cmd)
    };
    assert_code(&run_in(&PLAN), 0);
    std::fs::write(top.join("elsewhere.txt"), "x").unwrap();
    let run = run_in(&PLAN);
    assert_code(&run, 3);
    let message = run.error("plan/dirty-tree")["message"].to_string();
    assert!(message.contains("elsewhere.txt"), "{message}");
    assert!(!message.contains("plan.json"), "{message}");
    // Put the project back for the fixture to clean up.
    std::fs::rename(&project, fx.p.root()).unwrap();
}

#[test]
fn git_runs_a_fixed_number_of_times_however_many_jobs_ask() {
    let calls = |n: usize, worktrees: bool| {
        let fx = Fx::new();
        fx.v1().commands();
        if worktrees {
            fx.defaults("worktree = \"git\"");
        }
        let jobs: Vec<_> = (0..n).map(|i| job(&format!("w{i}"), "true")).collect();
        fx.stage("one", jobs);
        commit_all(&fx);
        let log = fx.scratch("git-calls");
        let real = String::from_utf8(
            Command::new("sh")
                .args(["-c", "command -v git"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        fx.bin_script(
            "git",
            &format!(
                "#!/bin/sh\necho x >> '{}'\nexec '{}' \"$@\"\n",
                log.display(),
                real.trim()
            ),
        );
        fx.bin_then(std::env::var_os("PATH").unwrap());
        assert_code(&plan(&fx), 0);
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let few = calls(2, true);
    assert!(few > 0);
    assert_eq!(calls(40, true), few);
    // A run without a git worktree runs no git at all.
    assert_eq!(calls(2, false), 0);
}

#[test]
fn the_wrapper_works_in_its_workdir_and_names_it() {
    let p = Project::new();
    p.write("prompts/w.md", "the prompt\n");
    std::fs::create_dir_all(p.path("results")).unwrap();
    std::fs::create_dir_all(p.path(".okstra/worktrees/t/w")).unwrap();
    let root = p.root().canonicalize().unwrap();
    let wrapper = |workdir: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_okstra"))
            .arg("worker")
            .arg("--project-root")
            .arg(&root)
            .args(["--workdir", workdir])
            .args(["--provider", "command", "--prompt", "prompts/w.md"])
            .args(["--result", "results/w.md", "--worker-result", "results/w.md"])
            .args(["--worker-key", "w", "--", "sh", "-c"])
            .arg(r#"{ pwd -P; echo "$OKSTRA_WORKTREE"; echo "$OKSTRA_PROJECT_ROOT"; } > "$OKSTRA_RESULT_PATH""#)
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap();
        out.status.code()
    };
    assert_eq!(wrapper(".okstra/worktrees/t/w"), Some(0));
    let wt = root.join(".okstra/worktrees/t/w").display().to_string();
    let lines: Vec<String> = p.read("results/w.md").lines().map(String::from).collect();
    assert_eq!(lines, [wt.clone(), wt, root.display().to_string()]);
    // A working directory that is not there starts nothing.
    std::fs::remove_file(p.path("results/w.md")).unwrap();
    assert_eq!(wrapper("missing"), Some(2));
    assert!(!p.exists("results/w.md"));
}
