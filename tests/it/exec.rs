//! `okstra exec` (docs/exec.md#okstra-exec,
//! docs/providers.md#the-worker-wrapper): the real binary runs fixture shell
//! workers (`provider = "command"`) in temp-dir projects, one test per
//! behaviour.
//!
//! Workers talk to the test through a scratch directory outside the project
//! (`$SCRATCH`), so run counters and marker files are never seen by the
//! mutation audit. Tests synchronise on marker files polled with a deadline,
//! never on fixed sleeps. Workers run under the default confinement (`auto`:
//! Landlock where the kernel has it), the scratch directory granted them by
//! a debug build's test seam; the few that must not be confined say why.

use crate::common::*;
use rustix::process::{Pid, Signal};
use serde_json::Value;
use std::collections::HashSet;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

/// Every worker script starts with this: counts the run, names the result.
const PRELUDE: &str = r#"set -u
S="$SCRATCH"; K="$OKSTRA_WORKER_KEY"; R="$OKSTRA_RESULT_PATH"
echo "$OKSTRA_ATTEMPT" >> "$S/$K.runs"
"#;

/// A wait of at most ~4 s for a file, inside a worker script.
fn wait_in_sh(file: &str) -> String {
    format!(
        "i=0; while [ ! -e \"{file}\" ]; do i=$((i+1)); if [ $i -gt 400 ]; then echo \"gave up waiting for {file}\" >&2; exit 1; fi; sleep 0.01; done\n"
    )
}

const WRITE_RESULT: &str = "echo done > \"$R\"\n";

/// The `extra` of a job that must run unconfined: workers here run under
/// the default `confinement = "auto"`, and a test about something a
/// confined worker cannot do says why it uses this.
const UNCONFINED: &str = "confinement = \"none\"";

/// A v1 project whose spec has the given stages of `command` workers
/// (under the default confinement, reporting through `$SCRATCH`).
fn fixture<'a>(stages: impl IntoIterator<Item = (&'a str, Vec<Job>)>) -> Fx {
    let fx = bare();
    fx.v1()
        .commands()
        .scratch_env()
        .prelude(PRELUDE)
        .stages(stages);
    fx
}

/// An empty project with its `results/` directory, made before the run so
/// the scripts need no `mkdir` (tests/it/audit.rs covers workers that make
/// it themselves).
fn bare() -> Fx {
    let fx = Fx::new();
    fx.mkdir("results");
    fx
}

/// Whether a live (non-zombie) process is in group `pgid`.
fn group_alive(pgid: u32) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .any(|stat| {
            let rest = &stat[stat.rfind(')').unwrap() + 1..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            f[0] != "Z" && f[2].parse::<u32>().ok() == Some(pgid)
        })
}

fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let rest = &stat[stat.rfind(')').unwrap() + 1..];
            rest.split_whitespace().next() != Some("Z")
        }
        Err(_) => false,
    }
}

fn read_pid(path: &Path) -> u32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn sha256_hex(bytes: &[u8]) -> String {
    okstra::canonical::sha256_hex(bytes)
}

// ---------------------------------------------------------------------------

#[test]
fn success() {
    let fx = fixture([("only", vec![job("a", WRITE_RESULT)])]);
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    assert_eq!(fx.runs("a"), ["1"]);
    assert_eq!(fx.p.read("results/a.md"), "done\n");
    let w = fx.worker_row("a");
    assert_eq!(w["status"], "completed");
    let rows = fx.dispatch_rows("a");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["status"], "completed");
    assert_eq!(rows[0]["exitCode"], 0);
    // Confined by default wherever the kernel offers Landlock.
    let here = okstra::confine::offer().applied();
    assert_eq!(rows[0]["confinement"], here, "{:?}", rows[0]);
    let types: Vec<String> = fx
        .events()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        types,
        [
            "stage-snapshot-written",
            "worker-dispatched",
            "worker-result-collected"
        ]
    );
    for e in fx.events().iter().skip(1) {
        assert_eq!(e["workerId"], "a");
        assert_eq!(e["attempt"], 1);
        assert_eq!(e["maxAttempts"], 2);
        assert_eq!(e["dispatchMode"], "cli-wrapper");
        assert!(e["ts"].as_str().unwrap().ends_with('Z'), "{e}");
    }
    assert!(fx.errors().is_empty(), "a clean run logs no error");
    assert!(
        run.stdout.contains("1 of 1 job completed"),
        "{}",
        run.stdout
    );
    // The wrapper's sidecars.
    let status = fx.p.read_json("prompts/a.md.status.json");
    assert_eq!(status["state"], "exited");
    assert_eq!(status["exitCode"], 0);
    assert!(status["duration_ms"].is_u64(), "{status}");
}

#[test]
fn the_wrapper_is_okstra_worker_beside_okstra_and_the_plan_keeps_the_wire_form() {
    // The job's parent is the wrapper; /proc names its executable.
    // Unconfined: Landlock refuses a confined worker a look at a process
    // outside its domain (`/proc/PID/exe` needs ptrace access).
    let script = format!("readlink /proc/$PPID/exe > \"$S/wrapper\"\n{WRITE_RESULT}");
    let fx = fixture([("only", vec![job("a", script).with(UNCONFINED)])]);
    fx.plan();
    let planned = fx.p.read_json("plan.json")["stages"][0]["jobs"][0]["command"].clone();
    assert_eq!(planned[0], "okstra");
    assert_eq!(planned[1], "worker");
    assert_code(&fx.exec(&[]), 0);
    let lean = Path::new(env!("CARGO_BIN_EXE_okstra")).with_file_name("okstra-worker");
    assert_eq!(
        std::fs::read_to_string(fx.scratch("wrapper"))
            .unwrap()
            .trim(),
        lean.canonicalize().unwrap().display().to_string()
    );
}

#[test]
fn retry_after_a_missing_artifact() {
    let script = format!("if [ \"$OKSTRA_ATTEMPT\" = 2 ]; then {WRITE_RESULT}fi\nexit 0\n");
    let fx = fixture([("only", vec![job("a", script)])]);
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    assert_eq!(fx.runs("a"), ["1", "2"]);
    assert_eq!(fx.worker_row("a")["status"], "completed");
    let retries = fx.events_of("worker-retry-scheduled", "a");
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0]["attempt"], 1);
    assert_eq!(retries[0]["nextAttempt"], 2);
    assert_eq!(retries[0]["missingCompletionPaths"][0], "results/a.md");
    let collected = fx.events_of("worker-result-collected", "a");
    assert_eq!(collected.len(), 1);
    assert_eq!(collected[0]["attempt"], 2);
    let rows = fx.dispatch_rows("a");
    let statuses: Vec<(u64, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["attempt"].as_u64().unwrap(),
                r["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(statuses, [(1, "error"), (2, "completed")]);
}

#[test]
fn missing_twice_is_an_error_after_two_attempts() {
    let fx = fixture([("only", vec![job("a", "echo forgot >&2; exit 0\n")])]);
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 1);
    assert_eq!(fx.runs("a"), ["1", "2"], "at most 2 attempts");
    assert_eq!(fx.events_of("worker-retry-scheduled", "a").len(), 1);
    assert_eq!(fx.events_of("worker-failed", "a").len(), 2);
    let w = fx.worker_row("a");
    assert_eq!(w["status"], "error");
    assert!(
        w["reason"].as_str().unwrap().contains("results/a.md"),
        "{w}"
    );
    assert_eq!(fx.errors().len(), 2, "each attempt is in the error log");
}

#[test]
fn nonzero_exit_with_a_valid_audit_sidecar_completes_and_is_logged() {
    let sha = sha256_hex(b"done\n");
    let script = format!(
        "{WRITE_RESULT}printf '{{\"resultSha256\": \"{sha}\"}}' > \"$R.audit.json\"\necho 'wrapper trouble: the tail of stderr' >&2\nexit 3\n"
    );
    let fx = fixture([("only", vec![job("a", script)])]);
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    assert_eq!(fx.runs("a"), ["1"]);
    let w = fx.worker_row("a");
    assert_eq!(w["status"], "completed");
    let row = &fx.dispatch_rows("a")[0];
    assert_eq!(row["status"], "completed");
    assert_eq!(row["exitCode"], 3);
    assert!(
        row["reason"]
            .as_str()
            .unwrap()
            .contains("passed the audit-sidecar contract"),
        "{row}"
    );
    let errors = fx.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = &errors[0];
    assert_eq!(e["exitCode"], 3);
    assert_eq!(e["errorType"], "cli-failure");
    assert_eq!(e["commandKind"], "wrapper");
    assert_eq!(e["agent"], "a-worker");
    assert_eq!(e["taskKey"], "fixture-task");
    assert!(
        e["message"].as_str().unwrap().starts_with("attempt 1: "),
        "{e}"
    );
    assert!(
        e["stderrExcerpt"]
            .as_str()
            .unwrap()
            .contains("wrapper trouble: the tail of stderr"),
        "{e}"
    );
    assert!(e["durationMs"].is_u64(), "{e}");
    let collected = &fx.events_of("worker-result-collected", "a")[0];
    assert_eq!(collected["errorLogAppend"]["ok"], true, "{collected}");
}

#[test]
fn nonzero_exit_with_a_bad_audit_sidecar_is_an_error() {
    let zeros = "0".repeat(64);
    let script = format!(
        "{WRITE_RESULT}printf '{{\"resultSha256\": \"{zeros}\"}}' > \"$R.audit.json\"\nexit 3\n"
    );
    let fx = fixture([("only", vec![job("a", script)])]);
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 1);
    assert_eq!(fx.runs("a"), ["1"], "a non-zero exit is not retried");
    let w = fx.worker_row("a");
    assert_eq!(w["status"], "error");
    let reason = w["reason"].as_str().unwrap();
    assert!(reason.contains("audit-sidecar contract"), "{reason}");
    assert!(
        reason.contains("is not the worker result's sha256"),
        "{reason}"
    );
    assert_eq!(fx.errors().len(), 1);
}

#[test]
fn idle_timeout_stops_a_silent_worker() {
    let j = job(
        "a",
        "echo $$ > \"$S/a.pid\"\necho 'waiting for the network'\nexec sleep 30\n",
    );
    let fx = fixture([("only", vec![j.with("idleTimeoutSeconds = 1")])]);
    fx.plan();
    let started = Instant::now();
    let run = fx.exec(&[]);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{run:?}",
        run = run.stderr
    );
    assert_code(&run, 1);
    assert_eq!(fx.runs("a"), ["1"], "a timeout is not retried");
    assert!(
        !pid_alive(read_pid(&fx.scratch("a.pid"))),
        "the worker was stopped"
    );
    let w = fx.worker_row("a");
    assert_eq!(w["status"], "timeout");
    let row = &fx.dispatch_rows("a")[0];
    assert_eq!(row["status"], "timeout");
    assert_eq!(row["exitCode"], 124);
    assert!(
        row["reason"]
            .as_str()
            .unwrap()
            .contains("; its last line: \"waiting for the network\""),
        "the worker's last words: {row}"
    );
    let errors = fx.errors();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["exitCode"], 124);
    let failed = &fx.events_of("worker-failed", "a")[0];
    assert_eq!(failed["exitCode"], 124);
}

/// Nothing of the run's state exists: a refused exec writes nothing.
#[track_caller]
fn assert_nothing_written(fx: &Fx) {
    for f in [
        "run/team-state.json",
        "run/team-state.json.lock",
        "run/team-state.json.exec.lock",
        "run/lead-events.jsonl",
        "run/errors.jsonl",
        "run/snapshots",
        "prompts/a.md.log",
    ] {
        assert!(!fx.p.exists(f), "a refused exec wrote {f}");
    }
    assert!(fx.runs("a").is_empty(), "a refused exec started a worker");
}

#[test]
fn tampered_plan_is_refused() {
    let fx = fixture([("only", vec![job("a", WRITE_RESULT)])]);
    fx.plan();
    let text = fx.p.read("plan.json");
    let tampered = text.replacen(
        "\"idleTimeoutSeconds\": 600",
        "\"idleTimeoutSeconds\": 601",
        1,
    );
    assert_ne!(text, tampered);
    fx.p.write("plan.json", &tampered);
    let run = fx.exec(&["--format", "json"]);
    assert_code(&run, 3);
    assert_eq!(run.codes(), ["plan/digest-mismatch"]);
    assert_nothing_written(&fx);
}

#[test]
fn a_plan_of_another_format_version_is_refused() {
    let fx = fixture([("only", vec![job("a", WRITE_RESULT)])]);
    fx.plan();
    // Re-sealed, so only the version is wrong: the version is judged first.
    let mut plan: Value = fx.p.read_json("plan.json");
    plan["formatVersion"] = serde_json::json!(okstra::plan::FORMAT_VERSION + 1);
    plan.as_object_mut().unwrap().remove("digest");
    let digest = okstra::canonical::digest(&plan);
    plan["digest"] = serde_json::json!(digest);
    fx.p.write_json("plan.json", &plan);
    let run = fx.exec(&["--format", "json"]);
    assert_code(&run, 3);
    assert_eq!(run.codes(), ["plan/version"]);
    assert_nothing_written(&fx);
}

/// An edit of a plan document, for the refusal tests.
type PlanEdit = Box<dyn FnOnce(&mut Value)>;

/// `plan.json` edited by `edit`, re-sealed when `reseal`.
fn edited_plan(fx: &Fx, reseal: bool, edit: impl FnOnce(&mut Value)) {
    let mut plan: Value = fx.p.read_json("plan.json");
    edit(&mut plan);
    if reseal {
        plan.as_object_mut().unwrap().remove("digest");
        let digest = okstra::canonical::digest(&plan);
        plan["digest"] = serde_json::json!(digest);
    }
    fx.p.write_json("plan.json", &plan);
}

#[test]
fn exec_show_and_validate_refuse_a_plan_alike_on_the_raw_document() {
    let fx = fixture([("only", vec![job("a", WRITE_RESULT)])]);
    fx.plan();
    let text = fx.p.read("plan.json");
    let newer = okstra::plan::FORMAT_VERSION + 1;
    let cases: Vec<(&str, bool, PlanEdit)> = vec![
        // A newer okstra's plan, with a key this one does not know: its
        // version is what is wrong, whatever else it holds.
        (
            "plan/version",
            false,
            Box::new(move |p: &mut Value| {
                p["formatVersion"] = serde_json::json!(newer);
                p["somethingNew"] = serde_json::json!({"x": 1});
            }),
        ),
        // A newer okstra's plan whose stages have another shape (read as
        // a stream, the document is still read to its end): its version.
        (
            "plan/version",
            false,
            Box::new(move |p: &mut Value| {
                p["formatVersion"] = serde_json::json!(newer);
                p["stages"] = serde_json::json!({"only": {"jobs": {}}});
            }),
        ),
        (
            "plan/version",
            false,
            Box::new(move |p: &mut Value| {
                p["formatVersion"] = serde_json::json!(newer);
                p["stages"][0]["jobs"] = serde_json::json!("elsewhere");
            }),
        ),
        (
            "plan/version",
            false,
            Box::new(move |p: &mut Value| {
                p["formatVersion"] = serde_json::json!(newer);
                p["stages"] = serde_json::json!([["only"], 3, null]);
            }),
        ),
        // The same shapes in a plan of this format: not a plan.
        (
            "plan/unreadable",
            true,
            Box::new(|p: &mut Value| {
                p["stages"] = serde_json::json!({"only": {"jobs": {}}});
            }),
        ),
        (
            "plan/unreadable",
            true,
            Box::new(|p: &mut Value| {
                p["stages"][0]["jobs"] = serde_json::json!("elsewhere");
            }),
        ),
        (
            "plan/unreadable",
            true,
            Box::new(|p: &mut Value| {
                p["stages"] = serde_json::json!([["only"], 3, null]);
            }),
        ),
        // A key added by hand: an edit, not an unreadable plan.
        (
            "plan/digest-mismatch",
            false,
            Box::new(|p: &mut Value| {
                p["stages"][0]["jobs"][0]["extra"] = serde_json::json!(true);
            }),
        ),
        // The same, re-sealed by someone else's tool: the digest holds, the
        // shape does not.
        (
            "plan/unreadable",
            true,
            Box::new(|p: &mut Value| {
                p["stages"][0]["jobs"][0]["extra"] = serde_json::json!(true);
            }),
        ),
    ];
    for (code, reseal, edit) in cases {
        fx.p.write("plan.json", &text);
        edited_plan(&fx, reseal, edit);
        let run = fx.exec(&["--format", "json"]);
        assert_code(&run, 3);
        assert_eq!(run.codes(), [code], "exec");
        assert_nothing_written(&fx);
        let show = fx.p.okstra(&["show", "plan.json", "--format", "json"]);
        assert_eq!(show.codes(), [code], "show");
        let validate = fx.p.okstra(&[
            "validate",
            "--kind",
            "plan",
            "plan.json",
            "--format",
            "json",
        ]);
        assert_eq!(validate.codes(), [code], "validate");
        // Told a plan by its keys, validate reads it the same way.
        let guessed = fx.p.okstra(&["validate", "plan.json", "--format", "json"]);
        assert_eq!(guessed.codes(), [code], "validate, the kind guessed");
    }
    // Near miss: the plan as written passes all three, read as exec reads
    // it whether validate is told its kind or guesses it.
    fx.p.write("plan.json", &text);
    let validate = fx.p.okstra(&[
        "validate",
        "--kind",
        "plan",
        "plan.json",
        "--format",
        "json",
    ]);
    assert_code(&validate, 0);
    let guessed = fx.p.okstra(&["validate", "plan.json", "--format", "json"]);
    assert_code(&guessed, 0);
    assert_eq!(
        guessed.json()["files"],
        serde_json::json!([{"file": "plan.json", "kind": "plan"}])
    );
    assert_code(&fx.p.okstra(&["show", "plan.json"]), 0);
    assert_code(&fx.exec(&[]), 0);
}

#[test]
fn an_unreadable_plan_is_refused() {
    let fx = fixture([("only", vec![job("a", WRITE_RESULT)])]);
    fx.plan();
    let text = fx.p.read("plan.json");
    fx.p.write("plan.json", &text[..text.len() / 2]);
    let run = fx.exec(&["--format", "json"]);
    assert_code(&run, 3);
    assert_eq!(run.codes(), ["plan/unreadable"]);
    assert_nothing_written(&fx);
    // Near miss: the whole plan runs.
    fx.p.write("plan.json", &text);
    assert_code(&fx.exec(&[]), 0);
}

#[test]
fn stale_input_is_refused_naming_the_file() {
    let fx = fixture([("only", vec![job("a", WRITE_RESULT), job("b", WRITE_RESULT)])]);
    fx.plan();
    fx.p.write("prompts/b.md", "# work, edited after planning\n");
    let run = fx.exec(&["--format", "json"]);
    assert_code(&run, 3);
    assert_eq!(run.codes(), ["plan/stale"]);
    let e = &run.json()["errors"][0];
    assert!(
        e["message"].as_str().unwrap().contains("prompts/b.md"),
        "{e}"
    );
    assert_nothing_written(&fx);
    // Text output names it too.
    let run = fx.exec(&[]);
    assert_code(&run, 3);
    assert!(run.stderr.contains("plan/stale"), "{}", run.stderr);
    assert!(run.stderr.contains("prompts/b.md"), "{}", run.stderr);
}

#[test]
fn an_unreadable_team_state_refuses_the_run_and_is_kept() {
    let fx = fixture([("only", vec![job("a", WRITE_RESULT)])]);
    fx.plan();
    fx.p.write("run/team-state.json", "{ not json");
    let run = fx.exec(&["--format", "json"]);
    assert_code(&run, 2);
    assert_eq!(run.codes(), ["exec/state"]);
    assert_eq!(
        fx.p.read("run/team-state.json"),
        "{ not json",
        "never overwritten"
    );
    for f in [
        "run/team-state.json.lock",
        "run/team-state.json.exec.lock",
        "run/lead-events.jsonl",
        "prompts/a.md.log",
    ] {
        assert!(!fx.p.exists(f), "a refused exec wrote {f}");
    }
    assert!(fx.runs("a").is_empty());
    // JSON of another shape is refused alike (exec checks it by streaming
    // it, not by reading it whole), the file kept as it was.
    for text in [
        "[]",
        "{\"workers\": {}}",
        "{\"workerDispatches\": [], \"attempts\": 3}",
        "{\"workers\": []} trailing",
        "{\"workers\": [1e400]}",
    ] {
        fx.p.write("run/team-state.json", text);
        let run = fx.exec(&["--format", "json"]);
        assert_code(&run, 2);
        assert_eq!(run.codes(), ["exec/state"], "{text}");
        assert_eq!(fx.p.read("run/team-state.json"), text, "never overwritten");
        assert!(!fx.p.exists("run/lead-events.jsonl"), "{text}");
    }
    assert!(fx.runs("a").is_empty());
    // Near miss: an empty file reads as a fresh team-state.
    fx.p.write("run/team-state.json", "");
    assert_code(&fx.exec(&[]), 0);
}

#[test]
fn a_team_state_put_back_from_before_the_run_gets_its_rows_from_the_log() {
    // The issue's lost rows: exec recorded results in the events log and
    // died before its last team-state write. Putting back the team-state of
    // before the run is that state; the next exec restores every row from
    // the log and runs nothing again.
    let fx = fixture([
        (
            "first",
            vec![job("a", WRITE_RESULT), job("b", WRITE_RESULT)],
        ),
        ("second", vec![job("c", WRITE_RESULT)]),
    ]);
    fx.plan();
    assert!(!fx.p.exists("run/team-state.json"));
    assert_code(&fx.exec(&[]), 0);
    let rows = |team: &Value| team["workerDispatches"].as_array().map_or(0, Vec::len);
    assert_eq!(rows(&fx.team()), 3);
    std::fs::remove_file(fx.p.path("run/team-state.json")).unwrap();

    let run = fx.exec(&[]);
    assert_code(&run, 0);
    assert!(
        run.stderr
            .contains("behind the events log for 3 jobs: rows restored"),
        "{}",
        run.stderr
    );
    for key in ["a", "b", "c"] {
        assert_eq!(fx.runs(key), ["1"], "{key} ran again");
        assert_eq!(fx.worker_row(key)["status"], "completed", "{key}");
    }
    assert_eq!(rows(&fx.team()), 3);
    // Near miss: with team-state in step, nothing is said or restored.
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    assert!(!run.stderr.contains("rows restored"), "{}", run.stderr);
}

#[test]
fn workers_that_ignore_sigterm_stop_within_one_grace_period() {
    // Four workers trap SIGTERM; with a 2 s grace, stopping them one after
    // another would take 8 s. Together it takes about one grace period.
    let stubborn = "trap '' TERM\ntouch \"$S/$K.started\"\nwhile :; do sleep 0.05; done\n";
    let fx = fixture([(
        "only",
        ["a", "b", "c", "d"]
            .iter()
            .map(|k| job(k, stubborn))
            .collect(),
    )]);
    fx.plan();
    let err = std::fs::File::create(fx.scratch("exec.stderr")).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_okstra"))
        .current_dir(fx.p.root())
        .env("OKSTRA_STOP_GRACE_SECONDS", "2")
        .args(["exec", "plan.json"])
        .stdout(std::process::Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    wait_for("every worker to start", 10, || {
        ["a", "b", "c", "d"]
            .iter()
            .all(|k| fx.scratch(&format!("{k}.started")).exists())
    });
    let started = Instant::now();
    signal(child.id(), Signal::INT);
    let code = wait_child(&mut child, 20);
    let took = started.elapsed();
    assert_eq!(code, 130);
    assert!(
        took >= Duration::from_secs(2),
        "SIGKILL came before the grace: {took:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "stopping was serial: {took:?}"
    );
    for key in ["a", "b", "c", "d"] {
        let pgid = fx.events_of("worker-dispatched", key)[0]["pid"]
            .as_u64()
            .unwrap() as u32;
        assert!(!group_alive(pgid), "{key} lingers");
        assert_eq!(fx.dispatch_rows(key)[0]["reason"], "interrupted");
    }
}

#[test]
fn what_a_worker_leaves_in_its_group_goes_when_its_wrapper_ends() {
    // One worker leaves a process behind in the background; the other's
    // wrapper is killed with kill -9 while the worker runs on. Neither is
    // left running once exec has seen its wrapper end. (A process that
    // leaves the group, `setsid`, is the audit's: tests/it/fail_closed.rs.)
    let left = "sleep 60 &\necho $! > \"$S/$K.bg\"\n".to_string() + WRITE_RESULT;
    let orphaned = "echo $$ > \"$S/$K.bg\"\nwhile :; do sleep 0.05; done\n";
    let fx = fixture([("only", vec![job("a", left), job("b", orphaned)])]);
    fx.plan();
    let mut child = fx.spawn_exec(&[]);
    // Its pid written, not just its file made: the kill that follows ends
    // the worker's shell too, maybe between the two.
    wait_for("b to start", 10, || {
        std::fs::read_to_string(fx.scratch("b.bg")).is_ok_and(|t| t.ends_with('\n'))
    });
    let status = fx.p.read_json("prompts/b.md.status.json");
    signal(status["wrapperPid"].as_u64().unwrap() as u32, Signal::KILL);
    assert_eq!(wait_child(&mut child, 20), 1);
    assert_eq!(fx.worker_row("a")["status"], "completed");
    assert_eq!(fx.worker_row("b")["status"], "error");
    for key in ["a", "b"] {
        let pid = read_pid(&fx.scratch(&format!("{key}.bg")));
        wait_for(&format!("{key}'s leftover to go"), 5, || !pid_alive(pid));
    }
}

#[test]
fn locked_run_is_refused() {
    let fx = fixture([("only", vec![job("a", WRITE_RESULT)])]);
    fx.plan();
    std::fs::create_dir_all(fx.p.path("run")).unwrap();
    let lock = std::fs::File::create(fx.p.path("run/team-state.json.exec.lock")).unwrap();
    lock.try_lock().unwrap();
    let run = fx.exec(&["--format", "json"]);
    assert_code(&run, 4);
    assert_eq!(run.codes(), ["exec/locked"]);
    // The holder is named: this test's own process.
    let message = run.json()["errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains(&format!("pid {}", std::process::id())),
        "{message}"
    );
    assert!(fx.runs("a").is_empty());
    assert!(!fx.p.exists("run/team-state.json"));
    assert!(!fx.p.exists("run/lead-events.jsonl"));
    // Released, the same plan runs.
    drop(lock);
    assert_code(&fx.exec(&[]), 0);
}

#[test]
fn a_team_state_lock_held_too_long_stops_the_run_naming_the_holder() {
    // The lead (here: this test) holds the team-state lock and does not let
    // go: exec waits a bounded time, then stops, saying who holds it. Once
    // released, exec finishes the run.
    let fx = fixture([("only", vec![job("a", WRITE_RESULT)])]);
    fx.plan();
    std::fs::create_dir_all(fx.p.path("run")).unwrap();
    let lock = std::fs::File::create(fx.p.path("run/team-state.json.lock")).unwrap();
    lock.try_lock().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_okstra"))
        .current_dir(fx.p.root())
        .env("OKSTRA_LOCK_TIMEOUT_SECONDS", "1")
        .args(["exec", "plan.json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("team-state.json.lock"), "{stderr}");
    assert!(
        stderr.contains(&format!("pid {}", std::process::id())),
        "{stderr}"
    );
    drop(lock);
    assert_code(&fx.exec(&[]), 0);
    assert_eq!(fx.worker_row("a")["status"], "completed");
}

/// A worker that notes its pid and start, then blocks, until `go` exists in
/// the scratch directory: from then on (a resumed run) it writes its
/// result at once.
fn blocks_until_go() -> String {
    format!(
        "if [ -e \"$S/go\" ]; then {}; exit 0; fi\necho $$ > \"$S/$K.pid\"\ntouch \"$S/$K.started\"\nexec sleep 30\n",
        WRITE_RESULT.trim_end()
    )
}

/// SIGTERM to a background exec: it must exit 130, all of the plan's
/// `jobs` in its summary and none completed.
#[track_caller]
fn interrupt(fx: &Fx, child: &mut Child, jobs: usize) {
    signal(child.id(), Signal::TERM);
    let code = wait_child(child, 5);
    let stderr = std::fs::read_to_string(fx.scratch("exec.stderr")).unwrap();
    assert_eq!(code, 130, "{stderr}");
    let stdout = std::fs::read_to_string(fx.scratch("exec.stdout")).unwrap();
    assert!(
        stdout.contains(&format!("0 of {jobs} jobs completed (interrupted)")),
        "{stdout}"
    );
}

#[test]
fn sigterm_stops_every_worker_and_settles_them_interrupted() {
    // The first attempts block; the resumed run's write their results.
    let fx = fixture([
        (
            "first",
            vec![job("a", blocks_until_go()), job("b", blocks_until_go())],
        ),
        ("second", vec![job("c", WRITE_RESULT)]),
    ]);
    fx.plan();
    let mut child = fx.spawn_exec(&[]);
    wait_for("both workers to start", 5, || {
        fx.scratch("a.started").exists() && fx.scratch("b.started").exists()
    });
    let started = Instant::now();
    // Every job of the plan is in the summary.
    interrupt(&fx, &mut child, 3);
    assert!(started.elapsed() < Duration::from_secs(4));
    for key in ["a", "b"] {
        let dispatched = &fx.events_of("worker-dispatched", key)[0];
        let pgid = dispatched["pid"].as_u64().unwrap() as u32;
        assert!(!group_alive(pgid), "{key}'s process group is still alive");
        assert!(!pid_alive(read_pid(&fx.scratch(&format!("{key}.pid")))));
        let rows = fx.dispatch_rows(key);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0]["status"], "error");
        assert_eq!(rows[0]["reason"], "interrupted");
        let w = fx.worker_row(key);
        assert_eq!(w["status"], "error");
        assert_eq!(w["reason"], "interrupted");
        assert_eq!(fx.runs(key), ["1"], "an interrupted attempt is not retried");
    }
    assert!(fx.runs("c").is_empty(), "the next stage never starts");
    // The next exec resumes both interrupted attempts (outside the retry
    // limit) and finishes the run.
    std::fs::write(fx.scratch("go"), "").unwrap();
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    for key in ["a", "b"] {
        assert_eq!(fx.runs(key), ["1", "2"], "{key}");
        assert_eq!(fx.worker_row(key)["status"], "completed", "{key}");
    }
    assert_eq!(fx.runs("c"), ["1"]);
}

#[test]
fn attempts_waiting_at_their_gates_when_interrupted_start_as_the_same_attempts_next_time() {
    // One slot: a runs and blocks; b and c are recorded beforehand and wait
    // at their gates for the slot. Interrupted, exec stops a and lets b and
    // c go without their workers ever running; the next exec starts them
    // as the attempts that were recorded, and resumes a as a new one.
    let fx = fixture([(
        "only",
        vec![
            job("a", blocks_until_go()),
            job("b", WRITE_RESULT),
            job("c", WRITE_RESULT),
        ],
    )]);
    fx.plan();
    let mut child = fx.spawn_exec(&["--concurrency", "1"]);
    wait_for("a to start", 5, || fx.scratch("a.started").exists());
    interrupt(&fx, &mut child, 3);
    for key in ["b", "c"] {
        let recorded = fx.events_of("worker-dispatched", key);
        assert_eq!(recorded.len(), 1, "{key} waited at its gate, recorded");
        let pid = recorded[0]["pid"].as_u64().unwrap() as u32;
        wait_for("the wrapper to leave its closed gate", 5, || {
            !pid_alive(pid)
        });
        assert!(fx.runs(key).is_empty(), "{key} never ran");
        assert!(fx.events_of("worker-failed", key).is_empty(), "{key}");
    }
    std::fs::write(fx.scratch("go"), "").unwrap();
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    assert_eq!(fx.runs("a"), ["1", "2"]);
    for key in ["b", "c"] {
        assert_eq!(fx.runs(key), ["1"], "{key} started once, as attempt 1");
        assert_eq!(fx.events_of("worker-dispatched", key).len(), 2, "{key}");
        assert_eq!(fx.worker_row(key)["status"], "completed", "{key}");
    }
}

#[test]
fn kill_9_then_resume_runs_nothing_twice() {
    // Stage one: `a` completes, `b` blocks until released. Stage two: `c`.
    let blocked = format!(
        "touch \"$S/b.started\"\n{}{WRITE_RESULT}",
        wait_in_sh("$S/release")
    );
    let fx = fixture([
        ("first", vec![job("a", WRITE_RESULT), job("b", blocked)]),
        ("second", vec![job("c", WRITE_RESULT)]),
    ]);
    fx.plan();
    let mut child = fx.spawn_exec(&[]);
    // `a` has exited (its wrapper recorded so) while `b` still runs: the
    // stage's round is not settled yet, so resume must adopt `a` from its
    // status sidecar rather than run it again.
    wait_for("a to finish and b to start", 5, || {
        fx.scratch("b.started").exists()
            && fx.p.exists("prompts/a.md.status.json")
            && fx.p.read_json("prompts/a.md.status.json")["state"] == "exited"
    });
    signal(child.id(), Signal::KILL);
    assert_eq!(wait_child(&mut child, 5), 128 + Signal::KILL.as_raw());
    // Every state file is parseable after the kill.
    let _ = fx.events();
    if fx.p.exists("run/team-state.json") {
        let _ = fx.team();
    }
    // The orphaned worker finishes on its own; resume adopts it.
    std::fs::write(fx.scratch("release"), "").unwrap();
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    assert_eq!(
        fx.runs("a"),
        ["1"],
        "a completed before the kill: not run again"
    );
    assert_eq!(fx.runs("b"), ["1"], "the orphan is adopted, not re-run");
    assert_eq!(fx.runs("c"), ["1"]);
    for key in ["a", "b", "c"] {
        assert_eq!(fx.worker_row(key)["status"], "completed", "{key}");
        assert_eq!(fx.events_of("worker-dispatched", key).len(), 1, "{key}");
    }
    // One dispatch row per (worker, attempt).
    let rows = fx.team()["workerDispatches"].as_array().unwrap().clone();
    let keys: Vec<String> = rows
        .iter()
        .map(|r| format!("{}#{}", r["workerKey"], r["attempt"]))
        .collect();
    let unique: HashSet<&String> = keys.iter().collect();
    assert_eq!(
        unique.len(),
        keys.len(),
        "duplicate dispatch rows: {keys:?}"
    );
    assert_eq!(keys.len(), 3, "{keys:?}");
    let b = &fx.dispatch_rows("b")[0];
    assert_eq!(b["status"], "completed", "{b}");
}

#[test]
fn kill_9_then_resume_v2_keeps_dispatch_ids_unique() {
    // Stage `implement` completes; stage `verify` blocks until released.
    let ver = format!(
        "touch \"$S/ver.started\"\n{}{WRITE_RESULT}",
        wait_in_sh("$S/release")
    );
    let fx = v2_fx(WRITE_RESULT, &ver);
    fx.plan();
    let mut child = fx.spawn_exec(&[]);
    wait_for("the verifier to start", 5, || {
        fx.scratch("ver.started").exists()
    });
    signal(child.id(), Signal::KILL);
    assert_eq!(wait_child(&mut child, 5), 128 + Signal::KILL.as_raw());
    std::fs::write(fx.scratch("release"), "").unwrap();
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    assert_eq!(
        fx.runs("impl-1"),
        ["1"],
        "completed before the kill: not run again"
    );
    assert_eq!(fx.runs("ver-1"), ["1"], "the orphan is adopted, not re-run");
    let ids: Vec<String> = fx.team()["workerDispatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["dispatchId"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(ids, ["inv-impl:attempt-1", "inv-ver:attempt-1"]);
    assert_eq!(fx.dispatch_rows("ver-1")[0]["status"], "completed");
}

/// The v2 fixture spec with these worker scripts and $SCRATCH in the env.
fn v2_spec(fx: &Fx, impl_script: &str, ver_script: &str) -> String {
    let spec = V2_SPEC.replacen(
        "modelExecutionValue = \"model-a\"\n",
        &format!(
            "modelExecutionValue = \"model-a\"\n{}\n",
            scratch_env(&fx.scratch_dir())
        ),
        1,
    );
    let impl_cmd =
        "command = [\"sh\", \"-c\", \"mkdir -p results && echo done > results/impl.md\"]";
    let ver_cmd = "command = [\"sh\", \"-c\", \"mkdir -p results && echo ok > results/ver.md\"]";
    assert!(spec.contains(impl_cmd) && spec.contains(ver_cmd));
    spec.replacen(
        impl_cmd,
        &format!("command = [\"sh\", \"-c\", '''\n{PRELUDE}{impl_script}''']"),
        1,
    )
    .replacen(
        ver_cmd,
        &format!("command = [\"sh\", \"-c\", '''\n{PRELUDE}{ver_script}''']"),
        1,
    )
}

fn v2_fx(impl_script: &str, ver_script: &str) -> Fx {
    let fx = bare();
    let v2 = v2_project();
    for f in [
        "run/run-manifest.json",
        "prompts/impl.md",
        "prompts/ver.md",
        "prompts/impl.md.meta.json",
        "prompts/ver.md.meta.json",
    ] {
        fx.p.write(f, &v2.read(f));
    }
    fx.p.write("spec.toml", &v2_spec(&fx, impl_script, ver_script));
    fx
}

#[test]
fn v2_dispatch_ids_per_attempt() {
    let record = "echo \"$OKSTRA_DISPATCH_ID\" >> \"$S/$K.ids\"\n";
    let impl_script = format!("{record}if [ \"$OKSTRA_ATTEMPT\" = 2 ]; then {WRITE_RESULT}fi\n");
    let ver_script = format!("{record}{WRITE_RESULT}");
    let fx = v2_fx(&impl_script, &ver_script);
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    assert_eq!(fx.runs("impl-1"), ["1", "2"]);
    let seen = std::fs::read_to_string(fx.scratch("impl-1.ids")).unwrap();
    assert_eq!(seen, "inv-impl:attempt-1\ninv-impl:attempt-2\n");
    let seen = std::fs::read_to_string(fx.scratch("ver-1.ids")).unwrap();
    assert_eq!(seen, "inv-ver:attempt-1\n");
    let rows = fx.team()["workerDispatches"].as_array().unwrap().clone();
    let got: Vec<(String, u64, String)> = rows
        .iter()
        .map(|r| {
            (
                r["dispatchId"].as_str().unwrap().to_string(),
                r["attempt"].as_u64().unwrap(),
                r["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("inv-impl:attempt-1".to_string(), 1, "error".to_string()),
            ("inv-impl:attempt-2".to_string(), 2, "completed".to_string()),
            ("inv-ver:attempt-1".to_string(), 1, "completed".to_string()),
        ]
    );
    for r in &rows {
        assert_eq!(r["schemaVersion"], "2.0", "{r}");
        assert_eq!(r["executionIdentityVersion"], 2, "{r}");
        assert!(r.get("workerId").is_none(), "a v2 row has no workerId: {r}");
    }
    let retry = &fx.events_of("worker-retry-scheduled", "impl-1")[0];
    assert_eq!(retry["dispatchId"], "inv-impl:attempt-1");
    let collected = &fx.events_of("worker-result-collected", "impl-1")[0];
    assert_eq!(collected["dispatchId"], "inv-impl:attempt-2");
    assert_eq!(collected["participantRef"], "p-impl");
}

#[test]
fn a_failed_stage_stops_the_pipeline() {
    let fx = fixture([
        ("first", vec![job("a", "echo broken >&2; exit 1\n")]),
        ("second", vec![job("b", WRITE_RESULT)]),
    ]);
    fx.plan();
    let run = fx.exec(&["--format", "json"]);
    assert_code(&run, 1);
    assert!(fx.runs("b").is_empty(), "the later stage never runs");
    let doc = run.json();
    assert_eq!(doc["ok"], false);
    let jobs = doc["jobs"].as_array().unwrap();
    let status = |k: &str| {
        jobs.iter()
            .find(|j| j["key"] == k)
            .map(|j| j["status"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(status("a"), "error");
    assert_eq!(status("b"), "not-run");
    assert_eq!(fx.events_of("worker-dispatched", "b").len(), 0);
}

/// Each worker marks itself ready, then needs to see the other's mark.
fn rendezvous(me: &str, other: &str) -> String {
    format!(
        "touch \"$S/{me}.ready\"\n{}{WRITE_RESULT}",
        wait_in_sh(&format!("$S/{other}.ready"))
    )
}

#[test]
fn jobs_of_a_stage_run_concurrently() {
    let fx = fixture([(
        "only",
        vec![
            job("a", rendezvous("a", "b")),
            job("b", rendezvous("b", "a")),
        ],
    )]);
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    assert_eq!(fx.runs("a"), ["1"]);
    assert_eq!(fx.runs("b"), ["1"]);
}

#[test]
fn concurrency_1_runs_jobs_one_at_a_time() {
    // Each worker logs its start and end, and looks (briefly) for the
    // other's start mark: under --concurrency 1 it must never see it.
    let one = |me: &str, other: &str| {
        format!(
            "echo \"start {me}\" >> \"$S/order\"\ntouch \"$S/{me}.ready\"\n\
             i=0; while [ $i -lt 30 ]; do [ -e \"$S/{other}.ready\" ] && [ ! -e \"$S/{other}.done\" ] && echo {me} >> \"$S/overlap\"; i=$((i+1)); sleep 0.01; done\n\
             {WRITE_RESULT}touch \"$S/{me}.done\"\necho \"end {me}\" >> \"$S/order\"\n"
        )
    };
    let fx = fixture([(
        "only",
        vec![job("a", one("a", "b")), job("b", one("b", "a"))],
    )]);
    fx.plan();
    let run = fx.exec(&["--concurrency", "1"]);
    assert_code(&run, 0);
    assert!(!fx.scratch("overlap").exists(), "two workers overlapped");
    let order = std::fs::read_to_string(fx.scratch("order")).unwrap();
    let lines: Vec<&str> = order.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(
        lines == ["start a", "end a", "start b", "end b"]
            || lines == ["start b", "end b", "start a", "end a"],
        "{lines:?}"
    );
}

#[test]
fn json_summary() {
    // Stage names out of alphabetical order: the summary keeps plan order.
    let fx = fixture([
        ("second", vec![job("a", WRITE_RESULT)]),
        (
            "first",
            vec![job(
                "b",
                format!("if [ \"$OKSTRA_ATTEMPT\" = 2 ]; then {WRITE_RESULT}fi\n"),
            )],
        ),
    ]);
    fx.plan();
    let run = fx.exec(&["--format", "json"]);
    assert_code(&run, 0);
    let doc = run.json();
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["interrupted"], false);
    let jobs = doc["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0]["key"], "a");
    assert_eq!(jobs[0]["stage"], "second");
    assert_eq!(jobs[0]["status"], "completed");
    assert_eq!(jobs[0]["attempts"], 1);
    assert_eq!(jobs[1]["key"], "b");
    assert_eq!(jobs[1]["stage"], "first");
    assert_eq!(jobs[1]["attempts"], 2);
    assert!(jobs[1]["durationMs"].is_u64());
    // Progress goes to stderr, never into the JSON: one object a line.
    let dispatched = run
        .stderr
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .any(|n| n["event"]["type"] == "worker-dispatched" && n["event"]["workerKey"] == "a");
    assert!(dispatched, "{}", run.stderr);
}

#[test]
fn a_write_outside_the_policy_fails_the_audit_without_retry() {
    // Unconfined: the kernel would refuse the stray write, and this is
    // about what exec does with the audit's finding.
    let fx = fixture([(
        "only",
        vec![job("a", format!("echo sneaky > stray.txt\n{WRITE_RESULT}")).with(UNCONFINED)],
    )]);
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 1);
    assert_eq!(fx.runs("a"), ["1"]);
    let w = fx.worker_row("a");
    assert_eq!(w["status"], "error");
    let reason = w["reason"].as_str().unwrap();
    assert!(reason.contains("contract-failed-unattributed"), "{reason}");
    assert!(reason.contains("stray.txt"), "{reason}");
    let failed = &fx.events_of("worker-failed", "a")[0];
    assert_eq!(
        failed["mutationAudit"]["mutationStatus"],
        "contract-failed-unattributed"
    );
    assert_eq!(failed["mutationAudit"]["retryAllowed"], false);
    assert!(fx.events_of("worker-retry-scheduled", "a").is_empty());
}

#[test]
fn a_stray_write_blocks_the_retry_of_a_missing_artifact() {
    // Without the stray file this attempt would be retried (exit 0, result
    // missing); the audit forbids it. Unconfined: the kernel would refuse
    // the stray write.
    let fx = fixture([(
        "only",
        vec![job("a", "echo sneaky > stray.txt\nexit 0\n").with(UNCONFINED)],
    )]);
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 1);
    assert_eq!(fx.runs("a"), ["1"]);
    let reason = fx.worker_row("a")["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("stray.txt"), "{reason}");
    assert!(fx.events_of("worker-retry-scheduled", "a").is_empty());
}

#[test]
fn run_plans_and_executes_in_one_command() {
    let fx = fixture([
        ("build", vec![job("a", WRITE_RESULT)]),
        ("check", vec![job("b", WRITE_RESULT)]),
    ]);
    let run =
        fx.p.okstra(&["run", "spec.toml", "--manifest", "run/run-manifest.json"]);
    assert_code(&run, 0);
    assert!(!fx.p.exists("plan.json"), "run plans to a temp file");
    assert_eq!(fx.runs("a"), ["1"]);
    assert_eq!(fx.runs("b"), ["1"]);
    assert!(
        run.stdout.contains("2 of 2 jobs completed"),
        "{}",
        run.stdout
    );
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines[1].starts_with("build") && lines[2].starts_with("check"),
        "{lines:?}"
    );
}

#[test]
fn a_worker_whose_log_grows_is_not_idle() {
    // Output every 0.2 s for ~1.6 s, past a 1 s idle timeout.
    let j = job(
        "a",
        format!(
            "i=0; while [ $i -lt 8 ]; do echo tick $i; i=$((i+1)); sleep 0.2; done\n{WRITE_RESULT}"
        ),
    );
    let fx = fixture([("only", vec![j.with("idleTimeoutSeconds = 1")])]);
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    assert_eq!(fx.worker_row("a")["status"], "completed");
    assert!(fx.p.read("prompts/a.md.log").contains("tick 7"));
}

#[test]
fn kill_9_of_executor_and_worker_then_resume_settles_the_orphan() {
    // Both okstra and the worker's whole group die: resume finds a status
    // sidecar that never recorded an exit, settles the attempt as lost
    // (resumable: no fault of the worker) and starts a new one at once.
    let block = format!(
        "touch \"$S/a.started\"\n{}{WRITE_RESULT}",
        wait_in_sh("$S/release")
    );
    let fx = fixture([("only", vec![job("a", block)])]);
    fx.plan();
    let mut child = fx.spawn_exec(&[]);
    wait_for("a to start", 5, || fx.scratch("a.started").exists());
    let pgid = fx.events_of("worker-dispatched", "a")[0]["pid"]
        .as_u64()
        .unwrap() as u32;
    signal(child.id(), Signal::KILL);
    wait_child(&mut child, 5);
    let _ = rustix::process::kill_process_group(Pid::from_raw(pgid as i32).unwrap(), Signal::KILL);
    wait_for("the worker group to die", 5, || !group_alive(pgid));
    std::fs::write(fx.scratch("release"), "").unwrap();
    let run = fx.exec(&["--format", "json"]);
    assert_code(&run, 0);
    assert_eq!(fx.runs("a"), ["1", "2"]);
    let rows = fx.dispatch_rows("a");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["status"], "error", "{}", rows[0]);
    assert_eq!(rows[0]["resumable"], true, "{}", rows[0]);
    assert!(
        rows[0]["reason"]
            .as_str()
            .unwrap()
            .contains("without recording an exit code"),
        "{}",
        rows[0]
    );
    assert_eq!(rows[1]["status"], "completed", "{}", rows[1]);
    assert_eq!(fx.worker_row("a")["status"], "completed");
    // A third exec sees the completion and starts nothing.
    let again = fx.exec(&[]);
    assert_code(&again, 0);
    assert_eq!(fx.runs("a"), ["1", "2"]);
    assert_eq!(fx.events_of("worker-dispatched", "a").len(), 2);
}

#[test]
fn a_new_plan_of_the_same_workers_runs_afresh_and_keeps_the_old_records() {
    let fx = fixture([("only", vec![job("a", WRITE_RESULT)])]);
    fx.plan();
    assert_code(&fx.exec(&[]), 0);
    // A changed prompt makes a new plan; its attempt 1 is another record.
    fx.p.write("prompts/a.md", "# work, revised\n");
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    assert_eq!(fx.runs("a"), ["1", "1"]);
    let state = fx.p.read_json("run/team-state.json");
    let attempts = state["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_ne!(attempts[0]["planDigest"], attempts[1]["planDigest"]);
    assert!(attempts.iter().all(|a| a["status"] == "completed"));
}

#[test]
fn status_reads_team_state_and_names_an_unreadable_one() {
    let fx = fixture([("only", vec![job("a", WRITE_RESULT)])]);
    fx.plan();
    assert_code(&fx.exec(&[]), 0);
    let run = fx.p.okstra(STATUS_JSON);
    assert_code(&run, 0);
    let report = run.json();
    assert_eq!(report["workers"][0]["status"], "completed");
    // The rows as team-state holds them, every field.
    let state = fx.p.read_json("run/team-state.json");
    assert_eq!(report["workers"], state["workers"]);
    assert_eq!(report["dispatches"], state["workerDispatches"]);
    assert_eq!(report["teamStatePath"], "run/team-state.json");
    let text =
        fx.p.okstra(&["status", "--manifest", "run/run-manifest.json"]);
    assert!(
        text.stdout.contains("1 of 1 worker completed"),
        "{}",
        text.stdout
    );
    fx.p.write("run/team-state.json", "{ not json");
    let run = fx.p.okstra(STATUS_JSON);
    assert_ne!(run.code, 0);
    assert_eq!(run.codes(), ["exec/state"]);
    // The near miss: a blank team-state is a run not started, no refusal.
    fx.p.write("run/team-state.json", " \n");
    let blank =
        fx.p.okstra(&["status", "--manifest", "run/run-manifest.json"]);
    assert_code(&blank, 0);
    assert!(
        blank.stdout.contains("0 of 0 workers completed"),
        "{}",
        blank.stdout
    );
}

/// Three one-line jobs a, b, c (each with `extra` in its entry) run one at a
/// time; where in exec's report a's result was collected and c let go (c
/// may be recorded earlier, waiting at its gate for a slot: the report
/// says "dispatched" when it is let through).
fn settle_order(extra: &str) -> (usize, usize) {
    let fx = fixture([(
        "only",
        ["a", "b", "c"]
            .into_iter()
            .map(|id| job(id, WRITE_RESULT).with(extra))
            .collect(),
    )]);
    fx.plan();
    let run = fx.exec(&["--concurrency", "1"]);
    assert_code(&run, 0);
    let report = format!("{}{}", run.stdout, run.stderr);
    let index = |what: &str| {
        report
            .lines()
            .position(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no line with {what:?} in the report:\n{report}"))
    };
    (index("a completed (attempt 1)"), index("dispatched c "))
}

#[test]
fn without_an_audit_an_attempt_settles_while_the_others_run() {
    // a is settled as soon as b took its slot, long before c starts.
    let (a_collected, c_dispatched) = settle_order("mutationAudit = \"none\"");
    assert!(
        a_collected < c_dispatched,
        "{a_collected} vs {c_dispatched}"
    );
}

#[test]
fn with_the_batch_audit_the_round_settles_after_it_ended() {
    // The compare needs the whole batch done: nothing settles before c ran.
    let (a_collected, c_dispatched) = settle_order("");
    assert!(
        c_dispatched < a_collected,
        "{a_collected} vs {c_dispatched}"
    );
}

#[test]
fn a_launch_failure_stops_and_settles_the_whole_batch() {
    // Two slots. a starts first and runs until the end; ten quick jobs
    // f0..f9 then pass through the other slot. exec keeps a few attempts
    // recorded at their gates beyond its slots (at most 8), so the first
    // batch is a and some of the f's, and b, which cannot be started (its
    // log path is a directory), comes in a later batch, while a runs.
    // a, still running, is stopped and waited for; b and c never start;
    // a, b and c settle `error` naming the failure. Each f completed, or
    // (started in b's batch, or just before) was stopped with a.
    let fillers: Vec<String> = (0..10).map(|n| format!("f{n}")).collect();
    let mut jobs = vec![job(
        "a",
        format!(
            "touch \"$S/a.started\"\n{}{WRITE_RESULT}",
            wait_in_sh("$S/never")
        ),
    )];
    for f in &fillers {
        jobs.push(job(
            f,
            format!("{}{WRITE_RESULT}", wait_in_sh("$S/a.started")),
        ));
    }
    jobs.push(job("b", WRITE_RESULT));
    jobs.push(job("c", WRITE_RESULT));
    let fx = fixture([("only", jobs)]);
    fx.plan();
    std::fs::create_dir_all(fx.p.path("prompts/b.md.log")).unwrap();
    let run = fx.exec(&["--concurrency", "2"]);
    assert_code(&run, 1);
    let failed = |key: &str| {
        let w = fx.worker_row(key);
        let reason = w["reason"].as_str().unwrap_or_default();
        w["status"] == "error" && reason.contains("launch failed for b")
    };
    for key in ["a", "b", "c"] {
        assert!(failed(key), "{key}: {}", fx.worker_row(key));
    }
    for f in &fillers {
        let completed = fx.worker_row(f)["status"] == "completed";
        assert!(completed || failed(f), "{f}: {}", fx.worker_row(f));
    }
    let dispatched = fx.events_of("worker-dispatched", "a");
    assert_eq!(dispatched.len(), 1, "a was started");
    let pid = dispatched[0]["pid"].as_u64().unwrap() as u32;
    assert!(!pid_alive(pid), "a's wrapper was stopped and waited for");
    for key in ["b", "c"] {
        assert!(fx.runs(key).is_empty(), "{key} never ran");
        assert!(fx.events_of("worker-dispatched", key).is_empty(), "{key}");
    }
    // Nothing of a failed launch is lost for good: with b's log path
    // repaired, the next exec runs what did not complete.
    std::fs::remove_dir(fx.p.path("prompts/b.md.log")).unwrap();
    std::fs::write(fx.scratch("never"), "").unwrap();
    let again = fx.exec(&[]);
    assert_code(&again, 0);
    assert_eq!(fx.runs("a"), ["1", "2"], "a's stopped attempt is resumed");
    for key in fillers.iter().map(String::as_str).chain(["b", "c"]) {
        assert_eq!(fx.worker_row(key)["status"], "completed", "{key}");
    }
    assert_eq!(fx.runs("b"), ["1"]);
    assert_eq!(fx.runs("c"), ["1"]);
}

#[test]
fn a_launch_failure_in_a_batch_starts_none_of_it() {
    // a, b and c start as one batch: b cannot, so none of them is let go.
    let fx = fixture([(
        "only",
        vec![
            job("a", WRITE_RESULT),
            job("b", WRITE_RESULT),
            job("c", WRITE_RESULT),
        ],
    )]);
    fx.plan();
    std::fs::create_dir_all(fx.p.path("prompts/b.md.log")).unwrap();
    let run = fx.exec(&[]);
    assert_code(&run, 1);
    for key in ["a", "b", "c"] {
        assert!(fx.runs(key).is_empty(), "{key} ran");
        assert!(fx.events_of("worker-dispatched", key).is_empty(), "{key}");
        assert_eq!(fx.worker_row(key)["status"], "error", "{key}");
    }
}

#[test]
fn wrapper_slots_run_attempt_after_attempt_each_with_its_own_log_and_environment() {
    // Under --concurrency 1, twelve jobs of one environment are run by a
    // few wrapper slots (the one running and those held ready), each slot
    // running several; b, of an environment of its own, by a slot of its
    // own. Each log holds only its own attempt's output, each worker sees
    // only its job's environment, and what a worker leaves in its process
    // group is gone before the next attempt starts.
    let fx = bare();
    fx.v1().commands().scratch_env().prelude(PRELUDE);
    let scratch = fx.scratch_dir().display().to_string();
    let seam = okstra::confine::TEST_ALSO_WRITABLE_ENV;
    let script = |extra: &str| {
        format!("echo \"output of $K\"\necho \"FOO=${{FOO:-unset}}\" > \"$S/$K.env\"\n{extra}{WRITE_RESULT}")
    };
    // Through /proc, not alive as a zombie (nobody may reap it at once): a
    // confined worker may not signal outside its domain, so `kill -0`
    // would say nothing.
    let check_a = "if [ -e \"$S/a.bg\" ]; then st=$(awk '{print $3}' \"/proc/$(cat \"$S/a.bg\")/stat\" 2>/dev/null); if [ -n \"$st\" ] && [ \"$st\" != Z ]; then echo \"$K\" >> \"$S/saw-a-leftover\"; fi; fi\n";
    let mut jobs = vec![
        job("a", script("sleep 60 &\necho $! > \"$S/$K.bg\"\n")),
        job("b", script(check_a)).with(&format!(
            "env = {{ SCRATCH = \"{scratch}\", {seam} = \"{scratch}\", FOO = \"only-b\" }}"
        )),
    ];
    let same: Vec<String> = (0..11).map(|i| format!("n{i:02}")).collect();
    jobs.extend(same.iter().map(|id| job(id, script(check_a))));
    fx.stage("only", jobs);
    fx.plan();
    let run = fx.exec(&["--concurrency", "1"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let wrapper = |key: &str| {
        fx.p.read_json(&format!("prompts/{key}.md.status.json"))["wrapperPid"]
            .as_u64()
            .unwrap()
    };
    let slots: HashSet<u64> = same
        .iter()
        .map(|id| wrapper(id))
        .chain([wrapper("a")])
        .collect();
    assert!(
        slots.len() < same.len(),
        "slots ran several attempts each: {slots:?}"
    );
    assert!(
        !slots.contains(&wrapper("b")),
        "b's environment is its own slot's"
    );
    for key in ["a", "b"]
        .into_iter()
        .chain(same.iter().map(String::as_str))
    {
        let dispatched = fx.events_of("worker-dispatched", key);
        assert_eq!(
            dispatched[0]["pid"].as_u64().unwrap(),
            wrapper(key),
            "the dispatch names the slot"
        );
        let log = std::fs::read_to_string(fx.p.path(&format!("prompts/{key}.md.log"))).unwrap();
        assert_eq!(log.matches("output of").count(), 1, "{key}'s log: {log}");
        assert!(
            log.contains(&format!("output of {key}")),
            "{key}'s log: {log}"
        );
        let env = std::fs::read_to_string(fx.scratch(&format!("{key}.env"))).unwrap();
        let want = if key == "b" {
            "FOO=only-b\n"
        } else {
            "FOO=unset\n"
        };
        assert_eq!(env, want, "{key}");
    }
    assert_eq!(
        lines_of(&fx.scratch("saw-a-leftover")),
        Vec::<String>::new(),
        "a's background process outlived its attempt"
    );
    assert!(!pid_alive(read_pid(&fx.scratch("a.bg"))));
}

#[test]
fn a_wrapper_killed_mid_attempt_fails_that_attempt_and_a_new_one_runs_the_next() {
    // a's wrapper slot is killed while a's worker runs on; under
    // --concurrency 1 the jobs after it still run, in the slots exec keeps,
    // and a's worker is stopped with its slot.
    let looping = "echo $$ > \"$S/$K.bg\"\nwhile :; do sleep 0.05; done\n";
    let mut jobs = vec![job("a", looping)];
    let ids: Vec<String> = (0..6).map(|i| format!("n{i}")).collect();
    jobs.extend(ids.iter().map(|id| job(id, WRITE_RESULT)));
    let fx = fixture([("only", jobs)]);
    fx.plan();
    let mut child = fx.spawn_exec(&["--concurrency", "1"]);
    wait_for("a to start", 10, || {
        std::fs::read_to_string(fx.scratch("a.bg")).is_ok_and(|t| t.ends_with('\n'))
    });
    let status = fx.p.read_json("prompts/a.md.status.json");
    let slot = status["wrapperPid"].as_u64().unwrap() as u32;
    signal(slot, Signal::KILL);
    assert_eq!(wait_child(&mut child, 20), 1);
    assert_eq!(fx.worker_row("a")["status"], "error");
    for id in &ids {
        assert_eq!(fx.worker_row(id)["status"], "completed", "{id}");
        let pid = fx.events_of("worker-dispatched", id)[0]["pid"]
            .as_u64()
            .unwrap();
        assert_ne!(pid, u64::from(slot), "{id} ran in the killed slot");
    }
    let pid = read_pid(&fx.scratch("a.bg"));
    wait_for("a's worker to go", 5, || !pid_alive(pid));
}

#[test]
fn a_worker_whose_slot_died_before_reporting_it_is_found_and_stopped() {
    // The slot dies (a test seam: as kill -9 would stop it) after starting
    // the worker and before reporting its pid: exec finds the worker by the
    // mark in its environment and stops its group, leftovers and all.
    let looping = "sleep 60 &\necho $! > \"$S/$K.left\"\necho $$ > \"$S/$K.bg\"\nwhile :; do sleep 0.05; done\n";
    let fx = bare();
    fx.p.write_json("run/run-manifest.json", &v1_manifest());
    fx.p.write("prompts/a.md", "# work\n");
    let env = scratch_env(&fx.scratch_dir())
        .replace(" }", ", OKSTRA_FAULT_DIE = \"slot-before-pid-report\" }");
    fx.p.write(
        "spec.toml",
        &format!(
            "[[workers]]\nworkerId = \"a\"\nprovider = \"command\"\nrole = \"analyst\"\npromptPath = \"prompts/a.md\"\nresultPath = \"results/a.md\"\n{env}\ncommand = [\"sh\", \"-c\", '''\n{PRELUDE}{looping}''']\n"
        ),
    );
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 1);
    assert_eq!(fx.worker_row("a")["status"], "error");
    // Whatever of the attempt started (its scratch directory in its
    // environment marks it, however far it got) is gone.
    let mark = format!("SCRATCH={}", fx.scratch_dir().display());
    let of_the_attempt = || -> Vec<u32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| pid_alive(pid))
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == mark.as_bytes()))
            })
            .collect()
    };
    wait_for("the attempt's processes to go", 5, || {
        of_the_attempt().is_empty()
    });
}

// --- A completion path counts only if this attempt wrote it
// (docs/exec.md#settling-an-attempt) ---

/// A result file left by an earlier run, its mtime an hour back.
fn leave_old_result(fx: &Fx, key: &str) {
    let path = fx.p.path(&format!("results/{key}.md"));
    std::fs::write(&path, "old\n").unwrap();
    let past = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(past)
        .unwrap();
}

fn reasons(fx: &Fx, key: &str) -> Vec<(u64, String, String)> {
    fx.dispatch_rows(key)
        .iter()
        .map(|r| {
            (
                r["attempt"].as_u64().unwrap(),
                r["status"].as_str().unwrap().to_string(),
                r["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn the_demo_run_twice_in_one_directory_judges_each_attempt_by_its_own_writes() {
    let p = Project::new();
    copy_demo(p.root());
    // As a person runs it: each run's plan has its own creation time, so
    // the second is a new plan, not the first one continued.
    let run = |created: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_okstra"))
            .current_dir(p.root())
            .env("SOURCE_DATE_EPOCH", created)
            .args(["run", "pipeline.toml", "--manifest", "run-manifest.json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    run("1764460800");
    assert!(p.exists("out/results/reviewer.md"));
    // Run again: the reviewer's first attempt again writes nothing, and the
    // result the first run left does not stand in for it.
    let again = run("1764547200");
    assert!(
        again.contains(
            "reviewer error (attempt 1): required worker artifact was not produced: out/results/reviewer.md: unchanged since before attempt 1 (left by an earlier run)"
        ),
        "{again}"
    );
    assert!(again.contains("reviewer completed (attempt 2)"), "{again}");
    let events = p.events(".okstra/run/lead-events.jsonl");
    let of = |ty: &str, key: &str| {
        events
            .iter()
            .filter(|e| e["type"] == ty && e["workerKey"] == key)
            .collect::<Vec<_>>()
    };
    let failed = of("worker-failed", "reviewer");
    assert_eq!(failed.len(), 2, "attempt 1 of each run: {failed:?}");
    assert_eq!(
        failed[1]["missingCompletionPaths"],
        serde_json::json!(["out/results/reviewer.md"])
    );
    // The implementer and the verifier rewrote theirs: each completed at once.
    for key in ["implementer", "verifier"] {
        assert!(of("worker-failed", key).is_empty(), "{key}");
        assert_eq!(of("worker-result-collected", key).len(), 2, "{key}");
    }
}

#[test]
fn a_leftover_result_never_completes_an_attempt_that_did_not_write_it() {
    let fx = fixture([("only", vec![job("a", "exit 0\n")])]);
    leave_old_result(&fx, "a");
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 1);
    assert_eq!(fx.runs("a"), ["1", "2"], "retried like any missing path");
    let rows = reasons(&fx, "a");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows[0]
            .2
            .ends_with("results/a.md: unchanged since before attempt 1 (left by an earlier run)"),
        "{rows:?}"
    );
    assert!(
        rows[1].2.ends_with(
            "results/a.md: unchanged since before attempt 2 (left by an earlier attempt or run)"
        ),
        "{rows:?}"
    );
    assert_eq!(fx.worker_row("a")["status"], "error");
    // The write-ahead record holds what the path was before each attempt.
    let dispatched = fx.events_of("worker-dispatched", "a");
    let before = &dispatched[0]["completionPathsBefore"][0];
    assert_eq!(before["path"], "results/a.md");
    assert_eq!(before["file"]["size"], 4);
    assert_eq!(before["file"]["sha256"], sha256_hex(b"old\n"));
}

#[test]
fn unchanged_bytes_put_back_under_their_old_mtime_are_still_missing() {
    // The worker rewrites the same bytes and then `touch -r`s the old mtime
    // back: nothing tells its file from the one left before it.
    let script =
        "touch -r \"$R\" \"$S/ref\"; printf 'old\\n' > \"$R\"; touch -r \"$S/ref\" \"$R\"\n";
    let fx = fixture([("only", vec![job("a", script)])]);
    leave_old_result(&fx, "a");
    fx.plan();
    assert_code(&fx.exec(&[]), 1);
    let rows = reasons(&fx, "a");
    assert!(
        rows.iter()
            .all(|r| r.1 == "error" && r.2.contains("unchanged since before attempt")),
        "{rows:?}"
    );
}

#[test]
fn an_identical_rewrite_or_a_rename_over_a_leftover_counts() {
    // The near misses: the same bytes written again (a new mtime), and the
    // same bytes renamed into place under the old mtime (a new inode).
    let rewrite = "printf 'old\\n' > \"$R\"\n";
    let rename = "printf 'old\\n' > \"$R.tmp\"; touch -r \"$R\" \"$R.tmp\"; mv \"$R.tmp\" \"$R\"\n";
    let fx = fixture([("only", vec![job("a", rewrite), job("b", rename)])]);
    leave_old_result(&fx, "a");
    leave_old_result(&fx, "b");
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    for key in ["a", "b"] {
        assert_eq!(fx.runs(key), ["1"], "{key}");
        assert_eq!(reasons(&fx, key)[0].1, "completed", "{key}");
    }
}

/// A worker that says it started, waits for the test, then (maybe) writes.
fn waits_then(then: &str) -> String {
    format!(
        "touch \"$S/$K.started.$OKSTRA_ATTEMPT\"\n{}{then}exit 0\n",
        wait_in_sh("$S/release")
    )
}

/// Kill exec while attempt 1 of `a` runs, let the worker finish, resume.
fn kill_exec_mid_attempt_then_resume(fx: &Fx) -> Run {
    fx.plan();
    let mut child = fx.spawn_exec(&[]);
    wait_for("a to start", 5, || fx.scratch("a.started.1").exists());
    signal(child.id(), Signal::KILL);
    wait_child(&mut child, 5);
    std::fs::write(fx.scratch("release"), "").unwrap();
    let sidecar = "prompts/a.md.status.json";
    wait_for("the orphan to finish", 10, || {
        fx.p.exists(sidecar) && fx.p.read_json(sidecar)["state"] == "exited"
    });
    fx.exec(&[])
}

#[test]
fn a_resumed_exec_judges_a_leftover_by_the_record_made_before_the_kill() {
    // Attempt 1 writes nothing; exec dies while it runs. The exec that
    // settles it after the fact compares with the recorded state, not with
    // what the path is when it looks: missing, and the retry writes it.
    let script = waits_then("if [ \"$OKSTRA_ATTEMPT\" = 2 ]; then echo new > \"$R\"; fi\n");
    let fx = fixture([("only", vec![job("a", script)])]);
    leave_old_result(&fx, "a");
    let run = kill_exec_mid_attempt_then_resume(&fx);
    assert_code(&run, 0);
    assert_eq!(fx.runs("a"), ["1", "2"]);
    let rows = reasons(&fx, "a");
    assert!(
        rows[0].2.contains("unchanged since before attempt 1"),
        "{rows:?}"
    );
    assert_eq!(rows[1].1, "completed", "{rows:?}");
}

#[test]
fn a_resumed_exec_counts_what_the_attempt_wrote_while_no_exec_watched() {
    // The near miss: the orphan writes the same bytes; that counts.
    let script = waits_then("printf 'old\\n' > \"$R\"\n");
    let fx = fixture([("only", vec![job("a", script)])]);
    leave_old_result(&fx, "a");
    let run = kill_exec_mid_attempt_then_resume(&fx);
    assert_code(&run, 0);
    assert_eq!(fx.runs("a"), ["1"]);
    assert_eq!(reasons(&fx, "a")[0].1, "completed");
}
