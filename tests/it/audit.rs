//! The mutation audit end to end (docs/spec-format.md#batch-rules,
//! docs/audit.md#the-mutation-audit): real `command` workers run through
//! `okstra plan` + `okstra exec` in temp-dir projects, one test per outcome and
//! per way a worker might try to hide a change.
//!
//! Workers talk to the test through a scratch directory outside the project
//! (`$SCRATCH`), so run counters never show up in the audit.
//!
//! Workers run unconfined (`confinement = "none"`): what is tested here is
//! the audit judging writes that happened, and these workers make the very
//! writes Landlock refuses under the default `auto` (tests/it/confinement.rs
//! shows each of them refused). Unconfined is where the audit alone stands:
//! `none`, a kernel without Landlock, or a write done for a confined worker
//! by a process outside its domain.

use crate::common::*;
use serde_json::Value;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::PathBuf;

/// Every worker script starts with this: counts the run, names the result.
const PRELUDE: &str = r#"set -u
S="$SCRATCH"; K="$OKSTRA_WORKER_KEY"; R="$OKSTRA_RESULT_PATH"
echo "$OKSTRA_ATTEMPT" >> "$S/$K.runs"
"#;

pub(crate) const WRITE_RESULT: &str = "mkdir -p \"$(dirname \"$R\")\" && echo done > \"$R\"\n";

/// A v1 project of unconfined `command` workers reporting through
/// `$SCRATCH`. Unlike tests/it/exec.rs the project has no `results/`
/// directory up front: workers make it.
pub(crate) fn fixture() -> Fx {
    let fx = Fx::new();
    fx.v1()
        .commands()
        .scratch_env()
        .defaults("confinement = \"none\"")
        .prelude(PRELUDE);
    fx
}

/// The settle event of `key`'s only attempt: its mutation audit.
pub(crate) fn audit_of(fx: &Fx, key: &str, ty: &str) -> Value {
    let ev = fx.events_of(ty, key);
    assert_eq!(ev.len(), 1, "one {ty} event for {key}: {ev:?}");
    ev[0]["mutationAudit"].clone()
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

const SUMMARY_KEYS: [&str; 7] = [
    "mutationStatus",
    "changedPaths",
    "attribution",
    "retryAllowed",
    "violations",
    "beforeDigest",
    "afterDigest",
];

/// A blocked verdict: settled `error`, not retried, the violating paths in
/// the reason, on the `worker-failed` event and on the attempt record.
#[track_caller]
pub(crate) fn assert_blocked(fx: &Fx, key: &str, status: &str, paths: &[&str]) -> Value {
    assert_eq!(fx.runs(key), ["1"], "no retry after {status}");
    assert!(fx.events_of("worker-retry-scheduled", key).is_empty());
    let w = fx.worker_row(key);
    assert_eq!(w["status"], "error", "{w}");
    let reason = fx.reason(key);
    assert!(
        reason.contains(&format!("mutation audit {status}")),
        "{reason}"
    );
    let audit = audit_of(fx, key, "worker-failed");
    assert_eq!(audit["mutationStatus"], status, "{audit}");
    assert_eq!(audit["retryAllowed"], false);
    let violations = strs(&audit["violations"]);
    for p in paths {
        assert!(reason.contains(p), "`{p}` not in the reason: {reason}");
        assert!(
            violations.iter().any(|v| v == p),
            "`{p}` not among the violations {violations:?}"
        );
    }
    let attempts = fx.attempts(key);
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0]["changeSummary"], audit, "the attempt record");
    audit
}

// ---- outcomes ------------------------------------------------------------

#[test]
fn outcome_ok_summary_on_event_and_attempt_record() {
    let fx = fixture();
    fx.stages([("only", vec![job("a", WRITE_RESULT)])]).plan();
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    let audit = audit_of(&fx, "a", "worker-result-collected");
    for k in SUMMARY_KEYS {
        assert!(audit.get(k).is_some(), "{k} missing from {audit}");
    }
    assert_eq!(audit["mutationStatus"], "ok");
    assert_eq!(audit["attribution"], "own");
    assert_eq!(audit["retryAllowed"], false);
    assert!(strs(&audit["violations"]).is_empty());
    let changed = strs(&audit["changedPaths"]);
    for p in ["results", "results/a.md", "prompts/a.md.log"] {
        assert!(changed.iter().any(|c| c == p), "{p} in {changed:?}");
    }
    // Orchestrator files are never in the audit.
    assert!(
        !changed.iter().any(|c| c.starts_with("run/")),
        "{changed:?}"
    );
    let before = audit["beforeDigest"].as_str().unwrap();
    let after = audit["afterDigest"].as_str().unwrap();
    assert!(before.starts_with("sha256:") && after.starts_with("sha256:"));
    assert_ne!(before, after, "something changed");
    let attempts = fx.attempts("a");
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["changeSummary"], audit);
}

#[test]
fn outcome_failed_no_mutation_retries() {
    // Attempt 1 exits 0 without its result and without touching anything.
    let script = format!("if [ \"$OKSTRA_ATTEMPT\" = 2 ]; then {WRITE_RESULT}fi\nexit 0\n");
    let fx = fixture();
    fx.stages([("only", vec![job("a", script)])]).plan();
    assert_code(&fx.exec(&[]), 0);
    assert_eq!(fx.runs("a"), ["1", "2"]);
    let failed = fx.events_of("worker-failed", "a");
    assert_eq!(failed.len(), 1);
    let audit = &failed[0]["mutationAudit"];
    assert_eq!(audit["mutationStatus"], "failed-no-mutation", "{audit}");
    assert_eq!(audit["retryAllowed"], true);
    assert_eq!(fx.events_of("worker-retry-scheduled", "a").len(), 1);
    let attempts = fx.attempts("a");
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["changeSummary"], *audit);
    assert_eq!(attempts[1]["changeSummary"]["mutationStatus"], "ok");
    assert_eq!(fx.worker_row("a")["status"], "completed");
}

#[test]
fn a_failed_attempt_that_only_made_directories_may_retry() {
    // `mkdir -p` of the result's directory is no content: the retry stands.
    let script = format!(
        "mkdir -p results/deeper\nif [ \"$OKSTRA_ATTEMPT\" = 2 ]; then {WRITE_RESULT}fi\nexit 0\n"
    );
    let fx = fixture();
    fx.stages([("only", vec![job("a", script).result("results/deeper/a.md")])])
        .plan();
    assert_code(&fx.exec(&[]), 0);
    assert_eq!(fx.runs("a"), ["1", "2"]);
    let audit = &fx.events_of("worker-failed", "a")[0]["mutationAudit"];
    assert_eq!(audit["mutationStatus"], "failed-no-mutation", "{audit}");
    let changed = strs(&audit["changedPaths"]);
    assert!(
        changed.contains(&"results/deeper".to_string()),
        "{changed:?}"
    );
    assert_eq!(fx.worker_row("a")["status"], "completed");
}

#[test]
fn a_directory_made_outside_every_policy_is_still_a_violation() {
    let fx = fixture();
    fx.stages([(
        "only",
        vec![job("a", format!("mkdir -p stray/dir\n{WRITE_RESULT}"))],
    )])
    .plan();
    assert_code(&fx.exec(&[]), 1);
    assert_blocked(
        &fx,
        "a",
        "contract-failed-unattributed",
        &["stray", "stray/dir"],
    );
}

#[test]
fn outcome_contract_failed_unattributed() {
    let fx = fixture();
    fx.p.write("README.md", "readme\n");
    fx.stages([(
        "only",
        vec![job("a", format!("echo owned >> README.md\n{WRITE_RESULT}"))],
    )])
    .plan();
    assert_code(&fx.exec(&[]), 1);
    let audit = assert_blocked(&fx, "a", "contract-failed-unattributed", &["README.md"]);
    assert!(
        audit["attribution"]
            .as_str()
            .unwrap()
            .contains("unattributed"),
        "{audit}"
    );
}

#[test]
fn outcome_mutation_present_unresolved() {
    // An implementer edits a planned file, then exits 0 without its result:
    // a missing artifact would retry, but its changes are left behind.
    let fx = fixture();
    fx.p.write("src/lib.rs", "fn a() {}\n");
    fx.stages([(
        "only",
        vec![job("impl", "echo 'fn b() {}' >> src/lib.rs\nexit 0\n").implementer(&["src/**"])],
    )])
    .plan();
    assert_code(&fx.exec(&[]), 1);
    let audit = assert_blocked(&fx, "impl", "mutation-present-unresolved", &["src/lib.rs"]);
    assert_eq!(audit["attribution"], "own");
    assert!(
        fx.reason("impl").contains("results/impl.md"),
        "still names the missing result"
    );
}

#[test]
fn another_jobs_writes_do_not_block_a_retry() {
    // `b` writes its result; `a` fails without changes and retries.
    let a = format!("if [ \"$OKSTRA_ATTEMPT\" = 2 ]; then {WRITE_RESULT}fi\n");
    let fx = fixture();
    fx.stages([("only", vec![job("a", a), job("b", WRITE_RESULT)])])
        .plan();
    assert_code(&fx.exec(&[]), 0);
    assert_eq!(fx.runs("a"), ["1", "2"]);
    let audit = &fx.events_of("worker-failed", "a")[0]["mutationAudit"];
    assert_eq!(audit["mutationStatus"], "failed-no-mutation", "{audit}");
}

// ---- evasions ------------------------------------------------------------

#[test]
fn evasion_file_replaced_by_a_symlink_to_outside_the_allow_list() {
    let fx = fixture();
    fx.p.write("src/a.rs", "fn a() {}\n");
    fx.p.write("secret.txt", "secret\n");
    fx.p.write("src/b.rs", "fn b() {}\n");
    // One link to a project file outside the policy, one to an absolute
    // path outside the project.
    let script = format!(
        "rm src/a.rs && ln -s ../secret.txt src/a.rs\nrm src/b.rs && ln -s \"$S\" src/b.rs\n{WRITE_RESULT}"
    );
    fx.stages([("only", vec![job("impl", script).implementer(&["src/**"])])])
        .plan();
    assert_code(&fx.exec(&[]), 1);
    assert_blocked(
        &fx,
        "impl",
        "contract-failed-unattributed",
        &["src/a.rs", "src/b.rs"],
    );
}

#[test]
fn evasion_write_through_a_symlinked_directory() {
    let fx = fixture();
    fx.p.write("real/keep.txt", "keep\n");
    fx.p.write("src/x.rs", "x\n");
    symlink("../real", fx.p.path("src/link")).unwrap();
    let script =
        format!("echo sneaky > src/link/new.txt\necho changed > src/link/keep.txt\n{WRITE_RESULT}");
    fx.stages([("only", vec![job("impl", script).implementer(&["src/**"])])])
        .plan();
    assert_code(&fx.exec(&[]), 1);
    assert_blocked(
        &fx,
        "impl",
        "contract-failed-unattributed",
        &["real/keep.txt", "real/new.txt"],
    );
}

#[test]
fn evasion_dot_dot_in_a_written_path() {
    let fx = fixture();
    fx.p.write("src/x.rs", "x\n");
    let script = format!("echo sneaky > src/../outside.txt\n{WRITE_RESULT}");
    fx.stages([("only", vec![job("impl", script).implementer(&["src/**"])])])
        .plan();
    assert_code(&fx.exec(&[]), 1);
    assert_blocked(
        &fx,
        "impl",
        "contract-failed-unattributed",
        &["outside.txt"],
    );
}

#[test]
fn evasion_dot_dot_in_planned_paths_does_not_widen_the_policy() {
    // `src/*/..` cannot be resolved without knowing what `*` matched. From
    // the manifest (read as is) the pattern allows nothing rather than
    // `secret.txt`...
    let fx = fixture();
    let mut manifest = v1_manifest();
    manifest["plannedPaths"] = serde_json::json!(["src/*/../../secret.txt", "../secret.txt"]);
    fx.p.write_json("run/run-manifest.json", &manifest);
    fx.p.write("src/sub/x.rs", "x\n");
    fx.p.write("secret.txt", "secret\n");
    let script = format!("echo owned > secret.txt\n{WRITE_RESULT}");
    fx.stages([(
        "only",
        vec![job("impl", script).implementer(&["src/sub/*.rs"])],
    )])
    .plan();
    assert_code(&fx.exec(&[]), 1);
    assert_blocked(&fx, "impl", "contract-failed-unattributed", &["secret.txt"]);
}

#[test]
fn dot_dot_past_a_glob_in_spec_planned_paths_is_refused_at_plan_time() {
    // ...and in a spec it is refused outright, not folded to `secret.txt`.
    let fx = fixture();
    fx.stages([(
        "only",
        vec![job("impl", WRITE_RESULT).implementer(&["src/*/../../secret.txt"])],
    )]);
    let run = plan_json(&fx.p, "spec.toml");
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.codes(), ["path/escapes-root"], "{}", run.stdout);
    assert!(
        run.stdout.contains("src/*/../../secret.txt"),
        "{}",
        run.stdout
    );
}

#[test]
fn dot_dot_escaping_the_root_in_planned_paths_is_refused_at_plan_time() {
    let fx = fixture();
    fx.stages([(
        "only",
        vec![job("impl", WRITE_RESULT).implementer(&["src/../../elsewhere/**"])],
    )]);
    let run = plan_json(&fx.p, "spec.toml");
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.codes().iter().any(|c| c == "path/escapes-root"),
        "{:?}",
        run.codes()
    );
}

#[test]
fn evasion_dot_dot_in_an_out_of_plan_declaration_does_not_widen() {
    let fx = fixture();
    fx.p.write("src/x.rs", "x\n");
    fx.p.write("secret.txt", "secret\n");
    let root = fx.p.root().display().to_string();
    let name =
        fx.p.root()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
    // Declarations that climb out of the project name nothing in it.
    let result = format!(
        r#"{{"implementation":{{"outOfPlanEdits":[{{"file":"../{name}/secret.txt"}},{{"file":"src/../../{name}/secret.txt"}},{{"file":"{root}/../{name}/secret.txt"}}]}}}}"#
    );
    let script = format!(
        "echo owned > secret.txt\nmkdir -p results && cat > \"$R\" <<'EOF'\n{result}\nEOF\n"
    );
    fx.stages([(
        "only",
        vec![job("impl", script)
            .implementer(&["src/**"])
            .result("results/impl.json")],
    )])
    .plan();
    assert_code(&fx.exec(&[]), 1);
    let audit = assert_blocked(&fx, "impl", "contract-failed-unattributed", &["secret.txt"]);
    assert!(strs(&audit["outOfPlanEdits"]).is_empty(), "{audit}");
}

#[test]
fn evasion_new_file_in_a_new_directory() {
    let fx = fixture();
    let script = format!("mkdir -p hidden/deep && echo x > hidden/deep/f.txt\n{WRITE_RESULT}");
    fx.stages([("only", vec![job("a", script)])]).plan();
    assert_code(&fx.exec(&[]), 1);
    assert_blocked(
        &fx,
        "a",
        "contract-failed-unattributed",
        &["hidden", "hidden/deep", "hidden/deep/f.txt"],
    );
}

#[test]
fn evasion_deleted_file() {
    let fx = fixture();
    fx.p.write("keep.txt", "keep\n");
    fx.p.write("dir/inner.txt", "inner\n");
    let script = format!("rm keep.txt\nrm -r dir\n{WRITE_RESULT}");
    fx.stages([("only", vec![job("a", script)])]).plan();
    assert_code(&fx.exec(&[]), 1);
    let audit = assert_blocked(
        &fx,
        "a",
        "contract-failed-unattributed",
        &["keep.txt", "dir", "dir/inner.txt"],
    );
    assert!(!fx.p.exists("keep.txt"));
    assert!(strs(&audit["changedPaths"]).contains(&"keep.txt".to_string()));
}

#[test]
fn evasion_mode_change_made_executable() {
    let fx = fixture();
    fx.p.write("run.sh", "echo hi\n");
    let script = format!("chmod +x run.sh\n{WRITE_RESULT}");
    fx.stages([("only", vec![job("a", script)])]).plan();
    assert_code(&fx.exec(&[]), 1);
    assert_blocked(&fx, "a", "contract-failed-unattributed", &["run.sh"]);
    let mode = std::fs::metadata(fx.p.path("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_ne!(mode & 0o111, 0, "the worker did make it executable");
}

#[test]
fn evasion_mode_change_of_an_old_file() {
    // Past the racy window the snapshot holds no hash: stat alone decides.
    let fx = fixture();
    fx.p.write("run.sh", "echo hi\n");
    set_times(&fx.p.path("run.sh"), 1_600_000_000);
    let script = format!("chmod +x run.sh\n{WRITE_RESULT}");
    fx.stages([("only", vec![job("a", script)])]).plan();
    assert_code(&fx.exec(&[]), 1);
    assert_blocked(&fx, "a", "contract-failed-unattributed", &["run.sh"]);
}

/// Set `p`'s access and modification times to `secs` after the epoch.
fn set_times(p: &std::path::Path, secs: u64) {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    let times = std::fs::FileTimes::new().set_accessed(t).set_modified(t);
    std::fs::File::open(p).unwrap().set_times(times).unwrap();
}

#[test]
fn evasion_file_renamed_out_of_an_allowed_path() {
    let fx = fixture();
    fx.p.write("src/a.rs", "fn a() {}\n");
    let script = format!("mkdir -p elsewhere && mv src/a.rs elsewhere/a.rs\n{WRITE_RESULT}");
    fx.stages([("only", vec![job("impl", script).implementer(&["src/**"])])])
        .plan();
    assert_code(&fx.exec(&[]), 1);
    let audit = assert_blocked(
        &fx,
        "impl",
        "contract-failed-unattributed",
        &["elsewhere", "elsewhere/a.rs"],
    );
    // Deleting `src/a.rs` itself was allowed; the reason does not blame it.
    assert!(!strs(&audit["violations"]).contains(&"src/a.rs".to_string()));
    assert!(strs(&audit["changedPaths"]).contains(&"src/a.rs".to_string()));
}

#[test]
fn evasion_touch_back_the_mtime_after_a_same_size_rewrite() {
    let fx = fixture();
    fx.p.write("config.txt", "value=1\n");
    set_times(&fx.p.path("config.txt"), 1_600_000_000);
    let script =
        format!("echo value=2 > config.txt && touch -d @1600000000 config.txt\n{WRITE_RESULT}");
    fx.stages([("only", vec![job("a", script)])]).plan();
    assert_code(&fx.exec(&[]), 1);
    assert_blocked(&fx, "a", "contract-failed-unattributed", &["config.txt"]);
}

// ---- declared out-of-plan edits ------------------------------------------

#[test]
fn declared_out_of_plan_edits_are_allowed_and_recorded() {
    let fx = fixture();
    fx.p.write("src/x.rs", "x\n");
    fx.p.write("docs/guide.md", "guide\n");
    let result =
        r#"{"implementation":{"outOfPlanEdits":[{"file":"docs/guide.md","reason":"a typo"}]}}"#;
    let script = format!(
        "echo y >> src/x.rs\necho fixed >> docs/guide.md\nmkdir -p results && echo '{result}' > \"$R\"\n"
    );
    fx.stages([(
        "only",
        vec![job("impl", script)
            .implementer(&["src/**"])
            .result("results/impl.json")],
    )])
    .plan();
    assert_code(&fx.exec(&[]), 0);
    let audit = audit_of(&fx, "impl", "worker-result-collected");
    assert_eq!(audit["mutationStatus"], "ok", "{audit}");
    assert_eq!(strs(&audit["outOfPlanEdits"]), ["docs/guide.md"]);
    assert!(
        audit["attribution"]
            .as_str()
            .unwrap()
            .contains("out-of-plan"),
        "{audit}"
    );
    assert_eq!(fx.attempts("impl")[0]["changeSummary"], audit);
}

#[test]
fn an_undeclared_edit_next_to_a_declared_one_is_a_violation() {
    let fx = fixture();
    fx.p.write("docs/guide.md", "guide\n");
    fx.p.write("docs/other.md", "other\n");
    let result = r#"{"implementation":{"outOfPlanEdits":[{"file":"docs/guide.md"}]}}"#;
    let script = format!(
        "echo a >> docs/guide.md\necho b >> docs/other.md\nmkdir -p results && echo '{result}' > \"$R\"\n"
    );
    fx.stages([(
        "only",
        vec![job("impl", script)
            .implementer(&["src/**"])
            .result("results/impl.json")],
    )])
    .plan();
    assert_code(&fx.exec(&[]), 1);
    let audit = assert_blocked(
        &fx,
        "impl",
        "contract-failed-unattributed",
        &["docs/other.md"],
    );
    assert_eq!(strs(&audit["violations"]), ["docs/other.md"]);
    assert_eq!(strs(&audit["outOfPlanEdits"]), ["docs/guide.md"]);
}

#[test]
fn only_implementers_may_declare_out_of_plan_edits() {
    let fx = fixture();
    fx.p.write("docs/guide.md", "guide\n");
    let result = r#"{"implementation":{"outOfPlanEdits":[{"file":"docs/guide.md"}]}}"#;
    let script = format!("echo a >> docs/guide.md\nmkdir -p results && echo '{result}' > \"$R\"\n");
    fx.stages([("only", vec![job("a", script).result("results/a.json")])])
        .plan();
    assert_code(&fx.exec(&[]), 1);
    assert_blocked(&fx, "a", "contract-failed-unattributed", &["docs/guide.md"]);
}

// ---- worktrees outside the project ---------------------------------------

#[test]
fn a_worktree_outside_the_project_is_audited_too() {
    let wt = tempfile::tempdir().unwrap();
    let wt_path = std::fs::canonicalize(wt.path()).unwrap();
    std::fs::write(wt_path.join("lib.rs"), "fn a() {}\n").unwrap();
    let fx = fixture();
    let w = wt_path.display().to_string();
    let script = format!("echo 'fn b() {{}}' >> \"{w}/lib.rs\"\n{WRITE_RESULT}");
    fx.stages([(
        "only",
        vec![job("impl", script)
            .implementer(&[])
            .with(&format!("worktreePath = \"{w}\""))],
    )])
    .plan();
    assert_code(&fx.exec(&[]), 0);
    let audit = audit_of(&fx, "impl", "worker-result-collected");
    assert_eq!(audit["mutationStatus"], "ok", "{audit}");
    let changed = strs(&audit["changedPaths"]);
    assert!(changed.contains(&format!("{w}/lib.rs")), "{changed:?}");
}

#[test]
fn a_later_stage_writing_an_earlier_worktree_is_caught() {
    let wt = tempfile::tempdir().unwrap();
    let wt_path = std::fs::canonicalize(wt.path()).unwrap();
    std::fs::write(wt_path.join("lib.rs"), "fn a() {}\n").unwrap();
    let fx = fixture();
    let w = wt_path.display().to_string();
    let analyst = format!("echo gone >> \"{w}/lib.rs\"\n{WRITE_RESULT}");
    fx.stages([
        (
            "implement",
            vec![job("impl", WRITE_RESULT)
                .implementer(&[])
                .with(&format!("worktreePath = \"{w}\""))],
        ),
        ("review", vec![job("a", analyst)]),
    ])
    .plan();
    assert_code(&fx.exec(&[]), 1);
    assert_eq!(fx.worker_row("impl")["status"], "completed");
    assert_blocked(
        &fx,
        "a",
        "contract-failed-unattributed",
        &[&format!("{w}/lib.rs")],
    );
}

// ---- evasions of the walk itself (issue 13) ---------------------------------

/// `depth` nested directories `name/name/...` below `dir`, made one
/// `mkdirat` at a time: the path runs far past PATH_MAX.
fn make_deep(dir: &std::path::Path, depth: usize, name: &str) {
    use rustix::fs::{mkdirat, openat, Mode, OFlags, CWD};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    std::fs::create_dir_all(dir).unwrap();
    let mut fd = openat(CWD, dir, flags, Mode::empty()).unwrap();
    for _ in 0..depth {
        mkdirat(&fd, name, Mode::from_raw_mode(0o755)).unwrap();
        fd = openat(&fd, name, flags, Mode::empty()).unwrap();
    }
}

/// `rm -rf`, for trees deeper than std's recursive `remove_dir_all` can
/// take on a test thread's stack (the temp dir is removed that way).
fn remove_deep(p: &std::path::Path) {
    let ok = std::process::Command::new("rm")
        .arg("-rf")
        .arg(p)
        .status()
        .unwrap();
    assert!(ok.success());
}

/// A worker line that goes `depth` levels down `name/` one `chdir` at a
/// time (sh's `cd` resolves a whole path and stops at PATH_MAX) and runs
/// `then` there.
fn perl_deep(depth: usize, name: &str, mkdir: bool, then: &str) -> String {
    let mk = if mkdir {
        format!("mkdir \"{name}\"; ")
    } else {
        String::new()
    };
    format!("perl -e 'for (1..{depth}) {{ {mk}chdir \"{name}\" or die \"chdir: $!\" }} {then}'\n")
}

#[test]
fn evasion_a_path_past_path_max_under_an_allowed_directory_does_not_hide_an_outside_write() {
    let fx = fixture();
    fx.p.write("src/lib.rs", "fn a() {}\n");
    fx.p.write("README.md", "readme\n");
    let long = "x".repeat(250);
    let script = format!(
        "echo owned >> README.md\ncd src && {}cd ..\n{WRITE_RESULT}",
        perl_deep(20, &long, true, "open F, \">f.rs\" or die; print F \"x\";")
    );
    fx.stages([("only", vec![job("impl", script).implementer(&["src/**"])])])
        .plan();
    let run = fx.exec(&[]);
    assert_code(&run, 1);
    let audit = assert_blocked(&fx, "impl", "contract-failed-unattributed", &["README.md"]);
    assert_eq!(strs(&audit["violations"]), ["README.md"]);
    let changed = strs(&audit["changedPaths"]);
    assert!(
        changed
            .iter()
            .any(|p| p.len() > 5000 && p.ends_with("/f.rs")),
        "the long path is audited (and allowed)"
    );
    remove_deep(&fx.p.path("src"));
}

#[test]
fn near_miss_a_path_past_path_max_under_an_allowed_directory_alone_completes() {
    let fx = fixture();
    fx.p.write("src/lib.rs", "fn a() {}\n");
    let long = "x".repeat(250);
    let script = format!(
        "cd src && {}cd ..\n{WRITE_RESULT}",
        perl_deep(20, &long, true, "open F, \">f.rs\" or die; print F \"x\";")
    );
    fx.stages([("only", vec![job("impl", script).implementer(&["src/**"])])])
        .plan();
    assert_code(&fx.exec(&[]), 0);
    let audit = audit_of(&fx, "impl", "worker-result-collected");
    assert_eq!(audit["mutationStatus"], "ok", "{audit}");
    remove_deep(&fx.p.path("src"));
}

#[test]
fn evasion_a_file_name_that_is_not_utf8_is_caught_and_shown_escaped() {
    let fx = fixture();
    let script = format!("echo x > \"$(printf 'bad\\377name')\"\n{WRITE_RESULT}");
    fx.stages([("only", vec![job("a", script)])]).plan();
    assert_code(&fx.exec(&[]), 1);
    assert_blocked(&fx, "a", "contract-failed-unattributed", &["bad\\xffname"]);
}

#[test]
fn near_miss_a_file_name_that_is_not_utf8_inside_the_policy_is_allowed() {
    let fx = fixture();
    fx.p.write("src/lib.rs", "fn a() {}\n");
    let script = format!("echo x > \"src/$(printf 'ok\\376')\"\n{WRITE_RESULT}");
    fx.stages([("only", vec![job("impl", script).implementer(&["src/**"])])])
        .plan();
    assert_code(&fx.exec(&[]), 0);
    let audit = audit_of(&fx, "impl", "worker-result-collected");
    assert_eq!(audit["mutationStatus"], "ok", "{audit}");
    assert!(strs(&audit["changedPaths"]).contains(&"src/ok\\xfe".to_string()));
}

#[test]
fn a_name_that_is_not_utf8_does_not_leave_the_next_stage_unaudited() {
    let fx = fixture();
    fx.p.write("src/lib.rs", "fn a() {}\n");
    fx.p.write("README.md", "readme\n");
    let first = format!("echo x > \"src/$(printf 'n\\377')\"\n{WRITE_RESULT}");
    let second = format!("echo owned >> README.md\n{WRITE_RESULT}");
    fx.stages([
        (
            "implement",
            vec![job("impl", first).implementer(&["src/**"])],
        ),
        ("review", vec![job("a", second)]),
    ])
    .plan();
    assert_code(&fx.exec(&[]), 1);
    assert_eq!(fx.worker_row("impl")["status"], "completed");
    assert_blocked(&fx, "a", "contract-failed-unattributed", &["README.md"]);
}

#[test]
fn evasion_a_change_inside_a_directory_whose_name_is_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    for (touch, code) in [(true, 1), (false, 0)] {
        let fx = fixture();
        let dir = fx.p.path("").join(std::ffi::OsStr::from_bytes(b"d\x80ir"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("inside.txt"), "old\n").unwrap();
        let edit = if touch {
            "echo owned >> \"$(printf 'd\\200ir')/inside.txt\"\n"
        } else {
            // Near miss: read, not written.
            "cat \"$(printf 'd\\200ir')/inside.txt\" > /dev/null\n"
        };
        fx.stages([("only", vec![job("a", format!("{edit}{WRITE_RESULT}"))])])
            .plan();
        assert_code(&fx.exec(&[]), code);
        if touch {
            assert_blocked(
                &fx,
                "a",
                "contract-failed-unattributed",
                &["d\\x80ir/inside.txt"],
            );
        }
    }
}

#[test]
fn evasion_a_change_at_the_bottom_of_five_thousand_nested_directories() {
    let fx = fixture();
    make_deep(&fx.p.path("deep"), 5000, "d");
    let script = format!(
        "cd deep && {}cd ..\n{WRITE_RESULT}",
        perl_deep(5000, "d", false, "open F, \">f\" or die; print F \"x\";")
    );
    fx.stages([("only", vec![job("a", script)])]).plan();
    let run = fx.exec(&[]);
    assert_code(&run, 1);
    let bottom = format!("deep/{}f", "d/".repeat(5000));
    assert_blocked(&fx, "a", "contract-failed-unattributed", &[&bottom]);
    // A later exec of the same plan does not crash on the tree either.
    assert_code(&fx.exec(&[]), 1);
    remove_deep(&fx.p.path("deep"));
}

fn git_in(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(["-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The fixture project as a git repository with one commit, a submodule's
/// git directory and a linked worktree `w`.
fn git_fixture() -> Fx {
    let fx = fixture();
    fx.p.write("a.txt", "a\n");
    let root = fx.p.path("");
    git_in(&root, &["init", "-q", "-b", "main"]);
    git_in(&root, &["add", "a.txt"]);
    git_in(&root, &["commit", "-qm", "one"]);
    git_in(&root, &["init", "-q", "--bare", ".git/modules/sub"]);
    git_in(&root, &["worktree", "add", "-q", "--detach", "w"]);
    fx
}

#[test]
fn evasion_writes_to_what_git_executes_or_reads_as_configuration() {
    let fx = git_fixture();
    let writes = [
        ".git/hooks/pre-commit",
        ".git/config",
        ".git/modules/sub/hooks/post-checkout",
        ".git/modules/sub/config",
        ".git/worktrees/w/config",
    ];
    let mut script = String::new();
    for w in writes {
        script.push_str(&format!(
            "printf '[core]\\n\\tfsmonitor = \"$S/evil\"\\n' >> {w}\n"
        ));
    }
    script.push_str(WRITE_RESULT);
    fx.stages([("only", vec![job("a", script)])]).plan();
    assert_code(&fx.exec(&[]), 1);
    assert_blocked(&fx, "a", "contract-failed-unattributed", &writes);
}

#[test]
fn near_miss_a_plain_commit_by_a_worker_whose_policy_allows_it() {
    let fx = git_fixture();
    let script = format!(
        "echo more >> a.txt\ngit -c user.name=w -c user.email=w@w -c commit.gpgsign=false commit -qam two\ngit status --porcelain > /dev/null\n{WRITE_RESULT}"
    );
    fx.stages([(
        "only",
        vec![job("impl", script).implementer(&["a.txt", ".git/refs/heads/**"])],
    )])
    .plan();
    assert_code(&fx.exec(&[]), 0);
    let audit = audit_of(&fx, "impl", "worker-result-collected");
    assert_eq!(audit["mutationStatus"], "ok", "{audit}");
    let changed = strs(&audit["changedPaths"]);
    assert!(
        changed.contains(&".git/refs/heads/main".to_string()),
        "{changed:?}"
    );
    // The index, objects and logs the commit wrote are not audited.
    assert!(
        !changed
            .iter()
            .any(|p| p.starts_with(".git/") && !p.starts_with(".git/refs/")),
        "{changed:?}"
    );
}

#[test]
fn a_stale_temporary_of_an_own_file_does_not_fail_the_stage() {
    // What an exec killed between writing team-state's temporary and
    // renaming it leaves behind, appearing mid-stage.
    let fx = fixture();
    let script = format!("echo '{{half' > run/.team-state.json.123.abc.tmp\n{WRITE_RESULT}");
    fx.stages([("only", vec![job("a", script)])]).plan();
    assert_code(&fx.exec(&[]), 0);
    let audit = audit_of(&fx, "a", "worker-result-collected");
    assert_eq!(audit["mutationStatus"], "ok", "{audit}");
}

#[test]
fn near_miss_a_file_shaped_almost_like_an_own_temporary_is_a_change() {
    let fx = fixture();
    let script = format!("echo evil > run/.team-state.json.123.abc.tmp.sh\n{WRITE_RESULT}");
    fx.stages([("only", vec![job("a", script)])]).plan();
    assert_code(&fx.exec(&[]), 1);
    assert_blocked(
        &fx,
        "a",
        "contract-failed-unattributed",
        &["run/.team-state.json.123.abc.tmp.sh"],
    );
}

// ---- the stage snapshot and resume ---------------------------------------

#[test]
fn a_resumed_exec_compares_against_the_stored_stage_snapshot() {
    // The worker writes a stray file, then blocks. okstra is killed with
    // SIGKILL between the snapshot and the settle; the worker finishes on
    // its own. The resumed exec must judge against the snapshot taken before
    // the stray file existed, not a fresh one that would include it.
    let fx = fixture();
    let script = format!(
        "echo sneaky > stray.txt\n{WRITE_RESULT}touch \"$S/a.started\"\ni=0; while [ ! -e \"$S/release\" ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 1; sleep 0.01; done\n"
    );
    fx.stages([("only", vec![job("a", script)])]).plan();
    let mut child = fx.spawn_exec(&[]);
    wait_for("a to write and block", 10, || {
        fx.scratch("a.started").exists()
    });
    // The stage snapshot is on disk before the first attempt starts.
    let snaps: Vec<PathBuf> = std::fs::read_dir(fx.p.path("run/snapshots"))
        .expect("run/snapshots")
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(snaps.len(), 1, "{snaps:?}");
    let stored = okstra::audit::Snapshot::from_json(&std::fs::read(&snaps[0]).unwrap()).unwrap();
    let top: Vec<String> = stored
        .listing("")
        .unwrap()
        .iter()
        .map(|e| String::from_utf8(e.name.clone()).unwrap())
        .collect();
    assert!(!top.contains(&"stray.txt".to_string()), "{top:?}");
    assert!(!top.contains(&"results".to_string()), "{top:?}");
    child.kill().unwrap();
    let _ = child.wait();
    std::fs::write(fx.scratch("release"), "").unwrap();
    let run = fx.exec(&[]);
    assert_code(&run, 1);
    assert_eq!(fx.runs("a"), ["1"], "adopted, not run again");
    let audit = assert_blocked(&fx, "a", "contract-failed-unattributed", &["stray.txt"]);
    assert_eq!(
        audit["beforeDigest"], stored.digest,
        "compared against the stored snapshot"
    );
}

// ---- plan time: rules/write-conflict -------------------------------------

#[track_caller]
fn plan_codes(fx: &Fx) -> (i32, Vec<String>, String) {
    let run = plan_json(&fx.p, "spec.toml");
    let codes = if run.code == 0 {
        Vec::new()
    } else {
        run.codes()
    };
    (run.code, codes, run.stdout)
}

#[test]
fn overlapping_policies_in_one_stage_are_refused_at_plan_time() {
    let fx = fixture();
    fx.stages([(
        "only",
        vec![
            job("one", WRITE_RESULT).implementer(&["src/**"]),
            job("two", WRITE_RESULT).implementer(&["src/lib/*.rs"]),
        ],
    )]);
    let (code, codes, out) = plan_codes(&fx);
    assert_eq!(code, 2, "{out}");
    assert_eq!(codes, ["rules/write-conflict"], "{out}");
    assert!(out.contains("`one`") || out.contains("one"), "{out}");
    assert!(out.contains("src/lib/*.rs"), "{out}");
    assert!(!fx.p.exists("plan.json"));
}

#[test]
fn a_shared_result_path_is_a_write_conflict() {
    let fx = fixture();
    fx.stages([(
        "only",
        vec![
            job("one", WRITE_RESULT).result("results/shared.md"),
            job("two", WRITE_RESULT).result("results/shared.md"),
        ],
    )]);
    let (code, codes, out) = plan_codes(&fx);
    assert_eq!(code, 2, "{out}");
    assert!(
        codes.iter().all(|c| c == "rules/write-conflict"),
        "{codes:?}"
    );
    assert!(out.contains("results/shared.md"), "{out}");
}

#[test]
fn near_misses_plan_cleanly() {
    // `src/**` and `srcx/**` share a byte prefix, not a directory; the same
    // overlapping policies in different stages never run together.
    let fx = fixture();
    fx.stages([
        (
            "first",
            vec![
                job("one", WRITE_RESULT).implementer(&["src/**"]),
                job("two", WRITE_RESULT).implementer(&["srcx/**", "src.rs"]),
            ],
        ),
        (
            "second",
            vec![job("three", WRITE_RESULT).implementer(&["src/lib/*.rs"])],
        ),
    ]);
    let (code, codes, out) = plan_codes(&fx);
    assert_eq!(code, 0, "{codes:?} {out}");
}
