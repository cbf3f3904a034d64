//! `worktree = "git"` end to end (docs/worktrees.md), in real git
//! repositories: several implementers editing the same file in one stage,
//! each on its own branch with exactly one commit carrying its trailers,
//! while the user's checkout, index and `HEAD` stay byte-identical; a
//! worker that writes outside its worktree is caught and nothing is
//! committed for it; a failed attempt is kept and the retry starts from the
//! base; `worktreeKeep = false`; another run's branch is never overwritten;
//! and an exec killed at each git step resumes without a duplicate or lost
//! commit and without a stale worktree registration.

use crate::common::*;
use serde_json::Value;

/// Edits the one shared file in its worktree (its working directory),
/// then writes its result in the project.
const EDIT: &str = r#"set -eu
printf 'fixed by %s\n' "$OKSTRA_WORKER_KEY" > src/lib.txt
printf 'new file of %s\n' "$OKSTRA_WORKER_KEY" > "src/$OKSTRA_WORKER_KEY.txt"
mkdir -p "$(dirname "$OKSTRA_RESULT_PATH")"
echo done > "$OKSTRA_RESULT_PATH"
"#;

/// A project that is a git repository with one commit holding its spec,
/// prompts, manifest and `src/lib.txt`; what the run writes (results, run
/// state, the plan, `.okstra/`) ignored. `jobs` all run in worktrees.
fn repo_fixture(defaults: &[&str], jobs: Vec<Job>) -> Fx {
    repo_fixture_with(defaults, jobs, |_| {})
}

/// [`repo_fixture`], `setup` run on the fixture before its spec is written.
fn repo_fixture_with(defaults: &[&str], jobs: Vec<Job>, setup: impl FnOnce(&Fx)) -> Fx {
    let fx = Fx::new();
    setup(&fx);
    fx.v1().commands().defaults("worktree = \"git\"");
    for d in defaults {
        fx.defaults(d);
    }
    fx.stage("fix", jobs);
    fx.p.write("src/lib.txt", "broken\n");
    fx.p.write(
        ".gitignore",
        "results/\nrun/*\n!run/run-manifest.json\nplan.json\n.okstra/\nprompts/*.log\nprompts/*.status.json\n",
    );
    commit_project(&fx.root());
    fx.plan();
    fx
}

/// The plan's job `key`.
fn planned(fx: &Fx, key: &str) -> Value {
    let plan = fx.p.read_json("plan.json");
    plan["stages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["jobs"].as_array().unwrap().iter())
        .find(|j| j["key"] == key)
        .unwrap()
        .clone()
}

#[test]
fn three_implementers_edit_one_file_each_on_its_own_branch() {
    let jobs = ["a", "b", "c"]
        .iter()
        .map(|id| job(id, EDIT).implementer(&["src/**"]))
        .collect();
    let fx = repo_fixture(&["confinement = \"auto\""], jobs);
    let root = fx.root();
    let before = checkout(&root);
    let head = git(&root, &["rev-parse", "HEAD"]);
    let run = fx.exec(&["--format", "json", "--junit", "run/junit.xml"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(checkout(&root), before, "the user's checkout moved");
    let junit = fx.p.read("run/junit.xml");
    let status = fx.okstra(&[
        "status",
        "--manifest",
        "run/run-manifest.json",
        "--format",
        "json",
    ]);
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    let digest = fx.p.read_json("plan.json")["digest"]
        .as_str()
        .unwrap()
        .to_string();
    for id in ["a", "b", "c"] {
        let g = planned(&fx, id)["gitWorktree"].clone();
        assert_eq!(g["base"], head.as_str());
        let branch = g["branch"].as_str().unwrap();
        assert_eq!(branch, format!("okstra/fixture-task/{id}"));
        let tip = git(&root, &["rev-parse", &format!("refs/heads/{branch}")]);
        assert_eq!(
            git(&root, &["rev-list", "--count", &format!("{head}..{tip}")]),
            "1",
            "{id}: exactly one commit on its branch"
        );
        assert_eq!(
            git(&root, &["show", &format!("{tip}:src/lib.txt")]),
            format!("fixed by {id}")
        );
        let mut changed: Vec<String> = git(&root, &["diff", "--name-only", &head, &tip])
            .lines()
            .map(str::to_string)
            .collect();
        changed.sort();
        assert_eq!(
            changed,
            [format!("src/{id}.txt"), "src/lib.txt".to_string()]
        );
        assert_eq!(trailer(&root, &tip, "Okstra-Plan-Digest"), digest);
        assert_eq!(trailer(&root, &tip, "Okstra-Task"), "fixture-task");
        let row = &fx.dispatch_rows(id)[0];
        let id_trailer = trailer(&root, &tip, "Okstra-Dispatch-Id");
        assert!(
            id_trailer.ends_with(&format!("/{id}/attempt-1")),
            "{id_trailer}"
        );
        assert_eq!(row["worktreeBranch"], branch);
        assert_eq!(row["worktreeCommit"], tip.as_str());
        let shown = status["dispatches"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["workerKey"] == *id)
            .unwrap();
        assert_eq!(shown["worktreeBranch"], branch);
        assert_eq!(shown["worktreeCommit"], tip.as_str());
        assert!(
            junit.contains(&format!(
                r#"<property name="worktreeBranch" value="{branch}"/>"#
            )) && junit.contains(&format!(
                r#"<property name="worktreeCommit" value="{tip}"/>"#
            )),
            "{junit}"
        );
        // okstra's identity: the repository sets none.
        assert_eq!(
            git(&root, &["show", "-s", "--format=%an <%ae>", &tip]),
            "okstra <okstra@localhost>"
        );
        let dispatched = &fx.events_of("worker-dispatched", id)[0];
        assert_eq!(dispatched["worktree"]["branch"], branch);
        assert_eq!(dispatched["worktree"]["base"], head.as_str());
    }
    // Kept (the default): three worktrees registered, each clean at its
    // commit, under .okstra/worktrees/.
    let list = git(&root, &["worktree", "list", "--porcelain"]);
    assert_eq!(
        list.matches(".okstra/worktrees/fixture-task/").count(),
        3,
        "{list}"
    );
    let status = fx.okstra(&["status", "--manifest", "run/run-manifest.json"]);
    assert!(
        status.stdout.contains("okstra/fixture-task/b"),
        "{}",
        status.stdout
    );
}

#[test]
fn a_worker_writing_outside_its_worktree_is_caught_and_nothing_is_committed() {
    // Unconfined, so the write lands and the audit must see it: one worker
    // writes the user's checkout, one a hook into the user's .git.
    let into_checkout = format!("echo pwned > \"$OKSTRA_PROJECT_ROOT/src/lib.txt\"\n{EDIT}");
    let into_git =
        format!("echo 'echo pwned' > \"$OKSTRA_PROJECT_ROOT/.git/hooks/post-commit\"\n{EDIT}");
    let jobs = vec![
        job("tree", into_checkout).implementer(&["src/**"]),
        job("hook", into_git).implementer(&["src/**"]),
    ];
    let fx = repo_fixture(&["confinement = \"none\""], jobs);
    let root = fx.root();
    let head = git(&root, &["rev-parse", "HEAD"]);
    let run = fx.exec(&["--format", "json"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    for (id, wrote) in [("tree", "src/lib.txt"), ("hook", ".git/hooks/post-commit")] {
        let row = fx.worker_row(id);
        assert_ne!(row["status"], "completed", "{id}: {row}");
        let reason = fx.reason(id);
        assert!(
            reason.contains("contract-failed-unattributed") && reason.contains(wrote),
            "{id}: {reason}"
        );
        let branch = format!("okstra/fixture-task/{id}");
        assert_eq!(
            git(&root, &["rev-parse", &format!("refs/heads/{branch}")]),
            head,
            "{id}: nothing committed on its branch"
        );
        // What it left is kept for inspection, not committed.
        let kept = git(
            &root,
            &[
                "for-each-ref",
                "--format=%(refname)",
                &format!("refs/heads/okstra-attempts/fixture-task/{id}/"),
            ],
        );
        assert!(
            kept.contains(&format!("okstra-attempts/fixture-task/{id}/1")),
            "{id}: {kept}"
        );
    }
}

#[test]
fn a_confined_worker_cannot_write_the_checkout_or_git_and_gets_no_commit() {
    let escape = "echo pwned > \"$OKSTRA_PROJECT_ROOT/src/lib.txt\" || echo refused-tree >> \"$SCRATCH/notes\"\n\
         echo x > \"$OKSTRA_PROJECT_ROOT/.git/hooks/post-commit\" || echo refused-git >> \"$SCRATCH/notes\"\n\
         exit 3\n";
    let jobs = vec![job("esc", escape).implementer(&["src/**"])];
    let fx = repo_fixture_with(&["confinement = \"required\""], jobs, |fx| {
        fx.scratch_env();
    });
    let root = fx.root();
    let before = checkout(&root);
    let head = git(&root, &["rev-parse", "HEAD"]);
    let run = fx.exec(&["--format", "json"]);
    if run.stderr.contains("exec/confinement-unavailable") {
        eprintln!("SKIPPED: this kernel has no Landlock");
        assert!(std::env::var_os("REQUIRE_LANDLOCK").is_none());
        return;
    }
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let notes = std::fs::read_to_string(fx.scratch("notes")).unwrap_or_default();
    assert!(
        notes.contains("refused-tree") && notes.contains("refused-git"),
        "{notes}"
    );
    assert_eq!(checkout(&root), before);
    assert_eq!(
        git(&root, &["rev-parse", "refs/heads/okstra/fixture-task/esc"]),
        head
    );
}

#[test]
fn a_failed_attempt_is_kept_and_the_retry_starts_from_the_base() {
    // Attempt 1 leaves a mess and exits 0 without its result (a retry
    // follows, docs/exec.md#retries); attempt 2 must not see the mess.
    let script = r#"set -eu
if [ "$OKSTRA_ATTEMPT" = 1 ]; then
  echo mess > src/lib.txt; echo junk > junk.txt; exit 0
fi
test "$(cat src/lib.txt)" = broken
test ! -e junk.txt
echo second > src/lib.txt
mkdir -p "$(dirname "$OKSTRA_RESULT_PATH")"; echo done > "$OKSTRA_RESULT_PATH"
"#;
    let fx = repo_fixture(&[], vec![job("w", script).implementer(&["src/**"])]);
    let root = fx.root();
    let head = git(&root, &["rev-parse", "HEAD"]);
    let run = fx.exec(&["--format", "json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let kept = git(
        &root,
        &["rev-parse", "refs/heads/okstra-attempts/fixture-task/w/1"],
    );
    assert_eq!(git(&root, &["show", &format!("{kept}:junk.txt")]), "junk");
    assert_eq!(
        git(&root, &["show", &format!("{kept}:src/lib.txt")]),
        "mess"
    );
    let tip = git(&root, &["rev-parse", "refs/heads/okstra/fixture-task/w"]);
    assert_eq!(
        git(&root, &["rev-list", "--count", &format!("{head}..{tip}")]),
        "1"
    );
    assert_eq!(
        git(&root, &["show", &format!("{tip}:src/lib.txt")]),
        "second"
    );
    let rows = fx.dispatch_rows("w");
    assert_eq!(
        rows[0]["worktreeKeptBranch"],
        "okstra-attempts/fixture-task/w/1"
    );
    assert_eq!(rows[0]["worktreeKeptCommit"], kept.as_str());
    assert_eq!(rows[1]["worktreeCommit"], tip.as_str());
}

#[test]
fn keep_false_removes_the_worktree_once_committed_and_leaves_no_registration() {
    let fx = repo_fixture(
        &["worktreeKeep = false"],
        vec![job("w", EDIT).implementer(&["src/**"])],
    );
    let root = fx.root();
    let run = fx.exec(&["--format", "json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(!root.join(".okstra/worktrees/fixture-task/w").exists());
    let list = git(&root, &["worktree", "list", "--porcelain"]);
    assert!(!list.contains(".okstra/worktrees"), "{list}");
    let tip = git(&root, &["rev-parse", "refs/heads/okstra/fixture-task/w"]);
    assert_eq!(
        git(&root, &["show", &format!("{tip}:src/lib.txt")]),
        "fixed by w"
    );
    // The commit was recorded before the worktree went.
    let collected = &fx.events_of("worker-result-collected", "w")[0];
    assert_eq!(collected["worktree"]["commit"], tip.as_str());

    // What a `git worktree remove` killed after the directory went leaves:
    // its registration (here without its `gitdir`, which `git worktree
    // list` does not show, nor `prune` remove while it is locked). exec
    // again removes it, though the directory is gone.
    let admin = root.join(".git/worktrees/w");
    std::fs::create_dir_all(&admin).unwrap();
    std::fs::write(admin.join("locked"), "initializing").unwrap();
    std::fs::write(admin.join("commondir"), "../..\n").unwrap();
    let again = fx.exec(&[]);
    assert_eq!(again.code, 0, "{}\n{}", again.stdout, again.stderr);
    assert!(!admin.exists(), "the registration left by a killed remove");
    assert_eq!(
        git(&root, &["worktree", "prune", "--dry-run", "-v"]),
        "",
        "nothing left to prune"
    );
}

#[test]
fn another_runs_branch_is_never_overwritten() {
    let fx = repo_fixture(&[], vec![job("w", EDIT).implementer(&["src/**"])]);
    let root = fx.root();
    // A branch of the same name with a commit of its own.
    git(&root, &["branch", "okstra/fixture-task/w"]);
    git(
        &root,
        &[
            "worktree",
            "add",
            "-q",
            &fx.outside("elsewhere").join("wt").display().to_string(),
            "okstra/fixture-task/w",
        ],
    );
    let wt = fx.outside("elsewhere").join("wt");
    std::fs::write(wt.join("src/lib.txt"), "theirs\n").unwrap();
    git(
        &wt,
        &[
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@e",
            "commit",
            "-qam",
            "theirs",
        ],
    );
    let theirs = git(&root, &["rev-parse", "refs/heads/okstra/fixture-task/w"]);
    let run = fx.exec(&["--format", "json"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("exec/worktree") || run.stderr.contains("exec/worktree"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    assert!(
        fx.reason("w").contains("exec/worktree"),
        "{}",
        fx.reason("w")
    );
    assert_eq!(
        git(&root, &["rev-parse", "refs/heads/okstra/fixture-task/w"]),
        theirs
    );
}

/// Attempt 1 of `flaky` edits its worktree, then exits 0 without its
/// result (a retry follows); attempt 2 must start from the base.
const FLAKY: &str = r#"set -eu
if [ "$OKSTRA_ATTEMPT" = 1 ]; then echo mess > src/lib.txt; exit 0; fi
test "$(cat src/lib.txt)" = broken
printf 'fixed by %s\n' "$OKSTRA_WORKER_KEY" > src/lib.txt
mkdir -p "$(dirname "$OKSTRA_RESULT_PATH")"; echo done > "$OKSTRA_RESULT_PATH"
"#;

/// The crash fixture: `keep` (its worktree kept) and `drop`
/// (`worktreeKeep = false`) edit and complete, `flaky` fails once.
fn crash_fixture() -> Fx {
    repo_fixture(
        &[],
        vec![
            job("keep", EDIT).implementer(&["src/**"]),
            job("drop", EDIT)
                .implementer(&["src/**"])
                .with("worktreeKeep = false"),
            job("flaky", FLAKY).implementer(&["src/**"]),
        ],
    )
}

/// `okstra exec plan.json --concurrency 1` with `env`; its exit code, or
/// 128 + the signal that killed it.
fn exec_with(fx: &Fx, env: &[(&str, String)]) -> (i32, String) {
    use std::os::unix::process::ExitStatusExt;
    let mut cmd = fx.command(&["exec", "plan.json", "--concurrency", "1"]);
    cmd.env("OKSTRA_STOP_GRACE_SECONDS", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
    let code = out
        .status
        .code()
        .unwrap_or_else(|| 128 + out.status.signal().unwrap_or(0));
    (code, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// After a run that completed, however often it was killed: one commit per
/// branch, holding the job's edit; flaky's first attempt kept once; no
/// worktree registration git would prune; `drop`'s worktree gone; the
/// user's checkout as it was.
#[track_caller]
fn check_commits(fx: &Fx, before: &[String], what: &str) {
    let root = fx.root();
    let head = git(&root, &["rev-parse", "HEAD"]);
    for id in ["keep", "drop", "flaky"] {
        let tip = git(
            &root,
            &["rev-parse", &format!("refs/heads/okstra/fixture-task/{id}")],
        );
        assert_eq!(
            git(&root, &["rev-list", "--count", &format!("{head}..{tip}")]),
            "1",
            "{what}: {id} has one commit"
        );
        assert_eq!(
            git(&root, &["show", &format!("{tip}:src/lib.txt")]),
            format!("fixed by {id}"),
            "{what}: {id}"
        );
        let collected = fx.events_of("worker-result-collected", id);
        assert_eq!(collected.len(), 1, "{what}: {id} collected once");
        assert_eq!(
            collected[0]["worktree"]["commit"],
            tip.as_str(),
            "{what}: {id}"
        );
    }
    let kept = git(
        &root,
        &[
            "for-each-ref",
            "--format=%(refname)",
            "refs/heads/okstra-attempts/",
        ],
    );
    assert_eq!(
        kept, "refs/heads/okstra-attempts/fixture-task/flaky/1",
        "{what}"
    );
    let list = git(&root, &["worktree", "list", "--porcelain"]);
    assert!(!list.contains("prunable"), "{what}: {list}");
    assert!(!list.contains("locked"), "{what}: {list}");
    assert!(!list.contains("fixture-task/drop"), "{what}: {list}");
    assert_eq!(
        list.matches(".okstra/worktrees/fixture-task/").count(),
        2,
        "{what}: {list}"
    );
    assert!(
        !root.join(".okstra/worktrees/fixture-task/drop").exists(),
        "{what}"
    );
    assert_eq!(checkout(&root), before, "{what}: the user's checkout moved");
}

#[test]
fn an_exec_killed_at_every_point_of_a_worktree_run_never_commits_twice_or_loses_one() {
    let fx = crash_fixture();
    let before = checkout(&fx.root());
    let trace = fx.scratch("trace");
    let (code, err) = exec_with(&fx, &[("OKSTRA_FAULT_TRACE", trace.display().to_string())]);
    assert_eq!(code, 0, "{err}");
    check_commits(&fx, &before, "the clean run");
    let points: Vec<String> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| l.split_once(' ').map_or(l, |(_, n)| n).to_string())
        .collect();
    for kind in [
        "worktree-add",
        "worktree-checkout",
        "worktree-settle",
        "worktree-commit",
        "worktree-commit-ref",
        "worktree-keep-ref",
        "worktree-keep-reset",
    ] {
        assert!(
            points.iter().any(|p| p == kind),
            "{kind} not reached: {points:?}"
        );
    }
    for n in 1..=points.len() {
        let fx = crash_fixture();
        let before = checkout(&fx.root());
        let what = format!("killed at point {n} ({})", points[n - 1]);
        let (code, err) = exec_with(&fx, &[("OKSTRA_FAULT_AT", n.to_string())]);
        assert!(code == 128 + 9 || code == 0, "{what}: exit {code}\n{err}");
        let mut resumes = 0;
        loop {
            let (code, err) = exec_with(&fx, &[]);
            resumes += 1;
            if code == 0 {
                break;
            }
            assert!(resumes < 4, "{what}: resume {resumes} exited {code}\n{err}");
        }
        check_commits(&fx, &before, &what);
    }
    println!(
        "worktree crash test: killed exec at each of {} fault points; every run completed",
        points.len()
    );
}

/// A stage that did not complete (a job refused: its worktree holds
/// changes okstra did not make) keeps its `worktreeKeep = false` worktrees
/// until it does: the exec that runs the refused job again judges it
/// against the stage's recorded baseline, which holds their registrations.
/// Found by `benches/crash.py --worktrees` (there the refusal was a git an
/// exec killed alone left running).
#[test]
fn a_stage_run_again_after_a_refused_job_completes_with_its_keep_false_worktrees() {
    let fx = repo_fixture(
        &[],
        vec![
            job("drop", EDIT)
                .implementer(&["src/**"])
                .with("worktreeKeep = false"),
            job("w", EDIT).implementer(&["src/**"]),
        ],
    );
    let root = fx.root();
    let wt = root.join(".okstra/worktrees/fixture-task/w");
    git(&root, &["branch", "okstra/fixture-task/w"]);
    git(
        &root,
        &[
            "worktree",
            "add",
            "-q",
            &wt.display().to_string(),
            "okstra/fixture-task/w",
        ],
    );
    std::fs::write(wt.join("src/stray.txt"), "not okstra's\n").unwrap();
    let run = fx.exec(&[]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        fx.reason("w").contains("exec/worktree"),
        "{}",
        fx.reason("w")
    );
    assert!(root.join(".okstra/worktrees/fixture-task/drop").exists());
    // Moved away, as the refusal says.
    std::fs::remove_file(wt.join("src/stray.txt")).unwrap();
    let run = fx.exec(&[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(!root.join(".okstra/worktrees/fixture-task/drop").exists());
    for id in ["drop", "w"] {
        let tip = git(&root, &["rev-parse", &format!("okstra/fixture-task/{id}")]);
        assert_eq!(
            git(&root, &["show", &format!("{tip}:src/lib.txt")]),
            format!("fixed by {id}")
        );
    }
    let list = git(&root, &["worktree", "list", "--porcelain"]);
    assert!(!list.contains("fixture-task/drop"), "{list}");
}

#[test]
fn a_worktree_made_after_its_stages_recorded_baseline_is_not_a_change_of_the_tree() {
    // `w` is refused (another run's branch) while `a` runs: the stage's
    // baseline is recorded without w's worktree. Once the branch is
    // deleted as the refusal says, the next exec makes w's worktree and
    // registration after that baseline: okstra's own, so neither job is
    // failed for it.
    let fx = repo_fixture(
        &[],
        vec![
            job("a", EDIT).implementer(&["src/**"]),
            job("w", EDIT).implementer(&["src/**"]),
        ],
    );
    let root = fx.root();
    let tree = git(&root, &["rev-parse", "HEAD^{tree}"]);
    let theirs = git(
        &root,
        &[
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@e",
            "commit-tree",
            &tree,
            "-p",
            "HEAD",
            "-m",
            "theirs",
        ],
    );
    git(
        &root,
        &["update-ref", "refs/heads/okstra/fixture-task/w", &theirs],
    );
    let run = fx.exec(&[]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(fx.worker_row("a")["status"], "completed");
    assert!(
        fx.reason("w").contains("exec/worktree"),
        "{}",
        fx.reason("w")
    );
    git(&root, &["branch", "-D", "okstra/fixture-task/w"]);
    let run = fx.exec(&[]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let head = git(&root, &["rev-parse", "HEAD"]);
    for id in ["a", "w"] {
        let tip = git(
            &root,
            &["rev-parse", &format!("refs/heads/okstra/fixture-task/{id}")],
        );
        assert_eq!(
            git(&root, &["rev-list", "--count", &format!("{head}..{tip}")]),
            "1"
        );
    }
}
