//! A stage's audit baseline across execs (docs/audit.md#the-stages-baseline):
//! exec records each stage snapshot's digest ahead of the stage's first
//! dispatch, and a resumed exec trusts a stored baseline only as that record
//! vouches. A snapshot deleted, edited or replaced by one of the changed
//! tree before exec dies, or a dispatch with no recorded snapshot, is
//! `audit/incomplete`; a clean resume and an unrecorded snapshot taken
//! before anything of the stage ran are the near misses. Workers run
//! unconfined, as in `audit`: the audit alone stands there.

use crate::audit::{assert_blocked, audit_of, fixture, WRITE_RESULT};
use crate::common::*;
use serde_json::Value;
use std::path::PathBuf;

/// The stage snapshots on disk (okstra's temporaries left out).
fn snapshot_files(fx: &Fx) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fx.p.path("run/snapshots"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'));
    files.sort();
    files
}

/// The run's `stage-snapshot-written` records.
fn snapshot_records(fx: &Fx) -> Vec<Value> {
    let mut records = fx.events();
    records.retain(|e| e["type"] == "stage-snapshot-written");
    records
}

/// A worker's last lines: SIGKILL to exec (its wrapper's parent), its pid
/// noted for the test; the worker itself goes on and exits 0.
const KILL_EXEC: &str = r#"e=$(awk '{print $4}' /proc/$PPID/stat)
echo "$e" > "$S/exec.pid"
kill -9 "$e"
"#;

/// Run exec in the background until its worker kills it.
#[track_caller]
fn exec_killed_by_its_worker(fx: &Fx) {
    use std::os::unix::process::ExitStatusExt;
    let mut child = fx.spawn_exec(&[]);
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "exec was not killed: {status:?}");
    let noted = std::fs::read_to_string(fx.scratch("exec.pid")).unwrap();
    assert_eq!(
        noted.trim(),
        child.id().to_string(),
        "the worker killed exec"
    );
}

/// The resumed exec's verdict on `key`: `audit/incomplete`, said as a
/// diagnostic naming the stage's snapshot and on every record of the
/// attempt, which is not run again. Returns the job's reason.
#[track_caller]
fn assert_incomplete_on_resume(fx: &Fx, key: &str) -> String {
    let run = fx.exec(&["--format", "json"]);
    assert_code(&run, 1);
    let diag = run.error("audit/incomplete");
    let message = diag["message"].as_str().unwrap();
    assert!(message.contains("run/snapshots/"), "{message}");
    let job = &run.json()["jobs"][0];
    assert_eq!(job["status"], "error", "{job}");
    let reason = job["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("audit/incomplete"), "{reason}");
    assert_eq!(fx.runs(key), ["1"], "settled from the first exec's attempt");
    let w = fx.worker_row(key);
    assert_eq!(w["status"], "error", "{w}");
    assert!(w["reason"].as_str().unwrap().contains("audit/incomplete"));
    let rows = fx.dispatch_rows(key);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["failureKind"], "audit-incomplete", "{:?}", rows[0]);
    let failed = fx.events_of("worker-failed", key);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["failureKind"], "audit-incomplete");
    assert!(failed[0].get("mutationAudit").is_none(), "not judged");
    assert!(fx.events_of("worker-result-collected", key).is_empty());
    reason
}

#[test]
fn a_first_exec_records_each_stage_snapshot_with_its_digest_before_the_stage_starts() {
    let fx = fixture();
    fx.stages([
        ("one", vec![job("a", WRITE_RESULT)]),
        ("two", vec![job("b", WRITE_RESULT)]),
    ])
    .plan();
    assert_code(&fx.exec(&[]), 0);
    let files = snapshot_files(&fx);
    let records = snapshot_records(&fx);
    assert_eq!((files.len(), records.len()), (2, 2), "{records:?}");
    let types: Vec<String> = fx
        .events()
        .iter()
        .map(|e| format!("{} {}", e["type"], e["workerKey"]))
        .collect();
    let at = |t: &str| types.iter().position(|x| x.starts_with(t)).unwrap();
    assert!(at("\"stage-snapshot-written") < at("\"worker-dispatched\" \"a\""));
    for (n, (file, record)) in files.iter().zip(&records).enumerate() {
        let rel = file.strip_prefix(fx.p.root()).unwrap().to_str().unwrap();
        assert_eq!(record["path"], rel, "{record}");
        assert_eq!(record["stageNumber"], n + 1);
        let bytes = std::fs::read(file).unwrap();
        assert_eq!(record["sha256"], okstra::canonical::sha256_hex(&bytes));
    }
    assert_eq!(records[1]["stage"], "two");
}

#[test]
fn a_stage_snapshot_deleted_before_exec_dies_is_audit_incomplete_never_a_fresh_baseline() {
    // The worker writes outside its policy, deletes the stage's baseline
    // and kills exec. A fresh walk on resume would take the stray file in
    // and let the job complete.
    let fx = fixture();
    let script =
        format!("echo sneaky > stray.txt\nrm -f run/snapshots/*.json\n{WRITE_RESULT}{KILL_EXEC}");
    fx.stages([("only", vec![job("a", script)])]).plan();
    exec_killed_by_its_worker(&fx);
    assert!(snapshot_files(&fx).is_empty());
    let reason = assert_incomplete_on_resume(&fx, "a");
    assert!(reason.contains("missing"), "{reason}");
    assert!(snapshot_files(&fx).is_empty(), "no fresh baseline taken");
    assert_eq!(snapshot_records(&fx).len(), 1, "none recorded anew");
}

#[test]
fn a_stage_snapshot_edited_before_exec_dies_is_audit_incomplete() {
    // One byte the tree digest does not cover: the document still reads as
    // a snapshot, and its own digest still holds.
    let fx = fixture();
    let edit =
        r#"sed -i "s/\"takenAtNs\":\([0-9]*\)[0-9],/\"takenAtNs\":\1,/" run/snapshots/*.json"#;
    let script = format!("echo sneaky > stray.txt\n{edit}\n{WRITE_RESULT}{KILL_EXEC}");
    fx.stages([("only", vec![job("a", script)])]).plan();
    exec_killed_by_its_worker(&fx);
    let file = &snapshot_files(&fx)[0];
    let edited = okstra::audit::Snapshot::from_json(&std::fs::read(file).unwrap());
    assert!(
        edited.is_ok(),
        "the edited snapshot still reads: {edited:?}"
    );
    let reason = assert_incomplete_on_resume(&fx, "a");
    assert!(reason.contains("changed since exec wrote it"), "{reason}");
}

#[test]
fn a_stage_snapshot_replaced_by_one_of_the_changed_tree_is_audit_incomplete() {
    // The worker's stray write, then exec killed; the baseline is then
    // rewritten as a true snapshot of the tree holding the stray file
    // (which an unconfined worker could as well make). Trusted, it would
    // show no change at all.
    let fx = fixture();
    let script = format!("echo sneaky > stray.txt\n{WRITE_RESULT}{KILL_EXEC}");
    fx.stages([("only", vec![job("a", script)])]).plan();
    exec_killed_by_its_worker(&fx);
    wait_for("the wrapper to record its exit", 10, || {
        std::fs::read_to_string(fx.p.path("prompts/a.md.status.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| v["exitCode"].is_i64())
    });
    let root = fx.root();
    let exclude: Vec<PathBuf> = [
        "run/run-manifest.json",
        "run/team-state.json",
        "run/team-state.json.lock",
        "run/team-state.json.exec.lock",
        "run/lead-events.jsonl",
        "run/.lead-events.jsonl.lock",
        "run/errors.jsonl",
        "run/snapshots",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    let roots = [root.clone()];
    let opts = okstra::audit::SnapshotOptions {
        roots: &roots,
        project_root: &root,
        exclude: &exclude,
    };
    let forged = okstra::audit::snapshot(&opts).unwrap();
    assert!(forged.entry("stray.txt").is_some());
    let unseen = okstra::audit::compare(&forged, &opts)
        .unwrap()
        .changes
        .changed;
    assert!(
        unseen.is_empty(),
        "the forgery hides every change: {unseen:?}"
    );
    std::fs::write(&snapshot_files(&fx)[0], forged.to_json()).unwrap();
    let reason = assert_incomplete_on_resume(&fx, "a");
    assert!(reason.contains("changed since exec wrote it"), "{reason}");
}

#[test]
fn near_miss_a_kill_and_resume_with_the_snapshot_untouched_completes_ok() {
    let fx = fixture();
    let script = format!("{WRITE_RESULT}{KILL_EXEC}");
    fx.stages([("only", vec![job("a", script)])]).plan();
    exec_killed_by_its_worker(&fx);
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    assert_eq!(fx.runs("a"), ["1"], "adopted, not run again");
    let audit = audit_of(&fx, "a", "worker-result-collected");
    assert_eq!(audit["mutationStatus"], "ok", "{audit}");
    assert_eq!(
        snapshot_records(&fx).len(),
        1,
        "read back, not recorded anew"
    );
}

#[test]
fn a_snapshot_without_its_record_is_replaced_while_nothing_of_the_stage_ran() {
    // Exec killed between writing the stage's baseline and recording it:
    // nothing of the stage was dispatched, so the unrecorded file (here
    // also garbled, as anyone could have left it) is not read, and a fresh
    // baseline is taken, recorded and used.
    let fx = fixture();
    let script = format!("echo sneaky > stray.txt\n{WRITE_RESULT}");
    fx.stages([("only", vec![job("a", script)])]).plan();
    let pause = tempfile::tempdir().unwrap();
    fx.run_env("OKSTRA_FAULT_PAUSE", "snapshot-record@1")
        .run_env("OKSTRA_FAULT_PAUSE_DIR", pause.path());
    let mut child = fx.spawn_exec(&[]);
    wait_for("exec to write the snapshot", 30, || {
        pause.path().join("reached").exists()
    });
    child.kill().unwrap();
    let _ = child.wait();
    fx.run_env_remove("OKSTRA_FAULT_PAUSE")
        .run_env_remove("OKSTRA_FAULT_PAUSE_DIR");
    let files = snapshot_files(&fx);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(snapshot_records(&fx).is_empty());
    assert!(fx.events_of("worker-dispatched", "a").is_empty());
    std::fs::write(&files[0], "{\"not\": \"a snapshot\"}").unwrap();
    let run = fx.exec(&["--format", "json"]);
    assert_code(&run, 1);
    // The job ran on the fresh baseline, which caught its stray write.
    assert_blocked(&fx, "a", "contract-failed-unattributed", &["stray.txt"]);
    let records = snapshot_records(&fx);
    assert_eq!(records.len(), 1, "{records:?}");
    let bytes = std::fs::read(&files[0]).unwrap();
    assert_eq!(records[0]["sha256"], okstra::canonical::sha256_hex(&bytes));
}

#[test]
fn a_dispatch_with_no_recorded_snapshot_is_audit_incomplete() {
    // The events log names a dispatch of the stage but no baseline (cut
    // out of the log, or written by an okstra before the records): the tree
    // may hold the worker's changes, so no fresh walk may stand in.
    let fx = fixture();
    let script = format!(
        "{WRITE_RESULT}touch \"$S/a.started\"\ni=0; while [ ! -e \"$S/release\" ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 1; sleep 0.01; done\n"
    );
    fx.stages([("only", vec![job("a", script)])]).plan();
    let mut child = fx.spawn_exec(&[]);
    wait_for("a to start", 10, || fx.scratch("a.started").exists());
    child.kill().unwrap();
    let _ = child.wait();
    let log = fx.p.path("run/lead-events.jsonl");
    let kept: String = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| !l.contains("stage-snapshot-written"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&log, kept).unwrap();
    std::fs::write(fx.scratch("release"), "").unwrap();
    let reason = assert_incomplete_on_resume(&fx, "a");
    assert!(reason.contains("none was recorded"), "{reason}");
}
