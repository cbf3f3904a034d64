//! Crash safety (docs/exec.md#crash-safety-and-resume), deterministically:
//! `okstra exec` is killed (SIGKILL, from inside, at a fault point compiled
//! into debug builds only) at every durable write and every launch of a
//! two-stage plan with a retry, one point per run; then exec is run again until
//! the run completes. After each: no recorded row lost, no attempt started
//! twice, every state file parseable, and the run completed.

use crate::common::*;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

/// Every worker notes its start (key and attempt) outside the project.
const PRELUDE: &str = r#"echo "$OKSTRA_WORKER_KEY $OKSTRA_ATTEMPT" >> "$SCRATCH/starts"
"#;

fn fixture(scratch: &Path) -> Project {
    let p = Project::new();
    p.write_json("run/run-manifest.json", &v1_manifest());
    for key in ["impl", "flaky", "ver"] {
        p.write(&format!("prompts/{key}.md"), "# work\n");
    }
    let write = r#"mkdir -p results && echo done > "$OKSTRA_RESULT_PATH""#;
    // flaky's first attempt exits 0 without its result: one retry.
    let flaky = format!(
        r#"if [ "$OKSTRA_ATTEMPT" -ge 2 ] || [ -e "$SCRATCH/flaky.retried" ]; then {write}; else touch "$SCRATCH/flaky.retried"; fi"#
    );
    let worker = |key: &str, script: &str| {
        format!(
            "[[stages.workers]]\nworkerId = \"{key}\"\npromptPath = \"prompts/{key}.md\"\nresultPath = \"results/{key}.md\"\ncommand = [\"sh\", \"-c\", '''\n{PRELUDE}{script}\n''']\n\n"
        )
    };
    let spec = format!(
        "[defaults]\nprovider = \"command\"\nrole = \"analyst\"\n{}\n\n[[stages]]\nname = \"build\"\n\n{}{}[[stages]]\nname = \"check\"\n\n{}",
        scratch_env(scratch),
        worker("impl", write),
        worker("flaky", &flaky),
        worker("ver", write),
    );
    p.write("spec.toml", &spec);
    let run = plan_json(&p, "spec.toml");
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    p
}

/// `okstra exec plan.json --concurrency 1` with extra environment; its
/// exit code, or 128 + the signal that killed it.
fn exec(p: &Project, env: &[(&str, String)]) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_okstra"));
    cmd.current_dir(p.root())
        .env("OKSTRA_STOP_GRACE_SECONDS", "1")
        .env_remove("OKSTRA_FAULT_AT")
        .env_remove("OKSTRA_FAULT_TRACE")
        .args(["exec", "plan.json", "--concurrency", "1"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    let code = out
        .status
        .code()
        .unwrap_or_else(|| 128 + out.status.signal().unwrap_or(0));
    (code, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Every line of a JSON-lines file parses: nothing torn was left behind.
#[track_caller]
fn whole_lines(path: &Path, what: &str) -> Vec<Value> {
    lines(path)
        .iter()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{what}: a torn or broken line ({e}): {l:?}"))
        })
        .collect()
}

/// The invariants of a completed run, whatever crashes it went through.
#[track_caller]
fn check_completed(p: &Project, scratch: &Path, what: &str) {
    let starts = lines(&scratch.join("starts"));
    let unique: BTreeSet<&String> = starts.iter().collect();
    assert_eq!(
        unique.len(),
        starts.len(),
        "{what}: an attempt started twice: {starts:?}"
    );
    let events = whole_lines(&p.path("run/lead-events.jsonl"), what);
    whole_lines(&p.path("run/errors.jsonl"), what);
    let team = p.team();
    for key in ["impl", "flaky", "ver"] {
        assert_eq!(
            p.worker_row(key)["status"],
            "completed",
            "{what}: {key}: {team}"
        );
    }
    // Every dispatch recorded in the log has its row (no lost rows), and
    // each attempt has one row.
    let rows = team["workerDispatches"].as_array().unwrap();
    let mut by_attempt: HashMap<(String, u64), usize> = HashMap::new();
    for r in rows {
        let k = (
            r["workerKey"].as_str().unwrap().to_string(),
            r["attempt"].as_u64().unwrap(),
        );
        *by_attempt.entry(k).or_default() += 1;
    }
    assert!(
        by_attempt.values().all(|&n| n == 1),
        "{what}: {by_attempt:?}"
    );
    for e in events.iter().filter(|e| e["type"] == "worker-dispatched") {
        let k = (
            e["workerKey"].as_str().unwrap().to_string(),
            e["attempt"].as_u64().unwrap(),
        );
        assert!(by_attempt.contains_key(&k), "{what}: no row for {k:?}");
    }
    // The retry happened: flaky completed on a later attempt than its first.
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "worker-retry-scheduled" && e["workerKey"] == "flaky"),
        "{what}: no retry recorded"
    );
}

#[test]
fn a_crash_at_every_fault_point_loses_nothing_and_runs_nothing_twice() {
    // The points a clean run passes, in order.
    let scratch = tempfile::tempdir().unwrap();
    let p = fixture(scratch.path());
    let trace = scratch.path().join("trace");
    let (code, err) = exec(&p, &[("OKSTRA_FAULT_TRACE", trace.display().to_string())]);
    assert_eq!(code, 0, "{err}");
    check_completed(&p, scratch.path(), "the clean run");
    let points: Vec<String> = lines(&trace)
        .iter()
        .map(|l| {
            l.split_once(' ')
                .map(|(_, n)| n.to_string())
                .unwrap_or_default()
        })
        .collect();
    let kinds: BTreeSet<&String> = points.iter().collect();
    assert!(
        [
            "spawn",
            "dispatch-commit",
            "release",
            "journal-sync",
            "settle-commit",
            "atomic-rename",
            "snapshot-write",
            "snapshot-record"
        ]
        .iter()
        .all(|k| kinds.contains(&k.to_string())),
        "{kinds:?}"
    );

    for n in 1..=points.len() {
        let scratch = tempfile::tempdir().unwrap();
        let p = fixture(scratch.path());
        let what = format!("killed at point {n} ({})", points[n - 1]);
        let (code, err) = exec(&p, &[("OKSTRA_FAULT_AT", n.to_string())]);
        assert!(code == 128 + 9 || code == 0, "{what}: exit {code}\n{err}");
        let mut resumes = 0;
        loop {
            let (code, err) = exec(&p, &[]);
            resumes += 1;
            if code == 0 {
                break;
            }
            assert!(resumes < 4, "{what}: resume {resumes} exited {code}\n{err}");
        }
        check_completed(&p, scratch.path(), &what);
    }
    println!(
        "crash test: killed exec at each of {} fault points ({} kinds: {}); every run completed",
        points.len(),
        kinds.len(),
        kinds
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
}

#[test]
fn a_dispatch_the_disk_cannot_make_durable_starts_nothing_and_a_later_exec_completes() {
    // Every fdatasync fails (EIO, injected), as a failing disk's would: the
    // first batch's records are written but never durable, so none of its
    // attempts may start.
    let scratch = tempfile::tempdir().unwrap();
    let p = fixture(scratch.path());
    let (code, err) = exec(&p, &[("OKSTRA_FAULT_FAIL", "journal-sync".to_string())]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("cannot record the dispatch") && err.contains("lead-events.jsonl"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        lines(&scratch.path().join("starts")),
        Vec::<String>::new(),
        "an attempt started before its record was durable"
    );
    whole_lines(&p.path("run/lead-events.jsonl"), "after the failed sync");
    let (code, err) = exec(&p, &[]);
    assert_eq!(code, 0, "{err}");
    check_completed(&p, scratch.path(), "resumed after the failed sync");
}
