//! The audit fails closed at exec level (docs/audit.md#the-audit-fails-closed,
//! issue "Fail closed"): a tree the audit cannot walk settles every job it
//! covers `error` with `audit/incomplete`, never `completed`; a baseline that
//! does not read back is never replaced by a fresh walk; okstra's own files
//! changed by a worker are a violation of the stage that changed them; records
//! a worker forged in the events log are not believed by the next exec. Each
//! beside a near miss that must pass.
//!
//! Workers run unconfined (`confinement = "none"`), as in tests/it/audit.rs:
//! these hostile workers make the very writes Landlock refuses under the
//! default `auto`; what is tested is that the audit and exec's own checks
//! judge them where confinement does not stand (`none`, a kernel without
//! Landlock, a write done by a process outside the worker's domain).

use crate::common::*;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// A v1 project of unconfined `command` workers in these stages, planned.
fn fixture(stages: &[(&str, &[(&str, &str)])]) -> Fx {
    let fx = Fx::new();
    fx.v1()
        .commands()
        .defaults("confinement = \"none\"")
        .prelude("mkdir -p results\n");
    for (name, jobs) in stages {
        fx.stage(
            name,
            jobs.iter()
                .map(|(id, script)| job(id, format!("{script}\n"))),
        );
    }
    fx.plan();
    fx
}

const WRITE: &str = "echo done > \"$OKSTRA_RESULT_PATH\"";

/// `okstra exec plan.json --format json`, as root without the capabilities
/// that let root read any directory (so a `chmod 000` directory is as
/// unreadable to exec as it is to anyone else).
fn exec_without_dac(fx: &Fx) -> Run {
    let setpriv = [
        "setpriv",
        "--bounding-set=-dac_override,-dac_read_search",
        "--inh-caps=-dac_override,-dac_read_search",
        "--",
    ];
    let out = fx
        .command_via(&setpriv, &["exec", "plan.json", "--format", "json"])
        .output()
        .expect("setpriv (util-linux)");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
fn an_unreadable_directory_makes_the_audit_incomplete_and_nothing_starts() {
    let fx = fixture(&[("only", &[("a", WRITE)])]);
    std::fs::create_dir_all(fx.p.path("locked")).unwrap();
    std::fs::write(fx.p.path("locked/secret.txt"), "x").unwrap();
    std::fs::set_permissions(fx.p.path("locked"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let run = if is_root() {
        exec_without_dac(&fx)
    } else {
        fx.okstra(&["exec", "plan.json", "--format", "json"])
    };
    std::fs::set_permissions(fx.p.path("locked"), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.codes().contains(&"audit/incomplete".to_string()),
        "{}",
        run.stdout
    );
    let job = &run.json()["jobs"][0];
    assert_eq!(job["status"], "error", "{job}");
    let reason = job["reason"].as_str().unwrap();
    assert!(
        reason.contains("audit/incomplete") && reason.contains("locked"),
        "{reason}"
    );
    assert!(
        !fx.p.exists("results/a.md"),
        "a job started in a tree the audit cannot vouch for"
    );
    // Near miss: readable again, the run completes.
    let again = fx.okstra(&["exec", "plan.json"]);
    assert_eq!(again.code, 0, "{}\n{}", again.stdout, again.stderr);
}

#[test]
fn a_worker_that_hides_a_write_behind_an_unreadable_directory_is_never_completed() {
    let script = format!(
        "{WRITE}\necho sneaky > stray.txt\nmkdir -p hide && echo x > hide/y && chmod 000 hide"
    );
    let fx = fixture(&[("only", &[("a", script.as_str())])]);
    let run = if is_root() {
        exec_without_dac(&fx)
    } else {
        fx.okstra(&["exec", "plan.json", "--format", "json"])
    };
    let _ = std::fs::set_permissions(fx.p.path("hide"), std::fs::Permissions::from_mode(0o755));
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let job = &run.json()["jobs"][0];
    assert_eq!(job["status"], "error", "{job}");
    assert!(
        job["reason"].as_str().unwrap().contains("audit/incomplete"),
        "{job}"
    );
}

#[test]
fn a_baseline_that_does_not_read_back_is_never_replaced_by_a_fresh_walk() {
    // The first exec takes stage 1's baseline and is killed while its
    // worker runs; the baseline is then corrupted.
    let slow = "sleep 1; echo done > \"$OKSTRA_RESULT_PATH\"";
    let fx = fixture(&[("only", &[("a", slow)])]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .current_dir(fx.p.root())
        .args(["exec", "plan.json"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Once the worker was dispatched, its stage's baseline is whole.
    let events = fx.p.path("run/lead-events.jsonl");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(&events)
        .unwrap_or_default()
        .contains("worker-dispatched")
    {
        assert!(std::time::Instant::now() < deadline, "nothing dispatched");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    let sidecar = std::fs::read_dir(fx.p.path("run/snapshots"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .expect("the stage's baseline");
    std::fs::write(&sidecar, "{\"version\": 1, \"broken\": true}").unwrap();
    let run = fx.okstra(&["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.codes().contains(&"audit/incomplete".to_string()),
        "{}",
        run.stdout
    );
    let job = &run.json()["jobs"][0];
    assert_eq!(job["status"], "error", "{job}");
    let reason = job["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("audit/incomplete") && reason.contains("changed since exec wrote it"),
        "{reason}"
    );
}

/// A stage-1 worker that appends to one of okstra's own files.
fn tamper_case(rel: &str, line: &str) {
    let script =
        format!("{WRITE}\nmkdir -p \"$(dirname {rel})\"\nprintf '%s\\n' '{line}' >> {rel}");
    let fx = fixture(&[("only", &[("a", script.as_str())])]);
    let run = fx.okstra(&["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.code, 1, "{rel}: {}\n{}", run.stdout, run.stderr);
    let job = &run.json()["jobs"][0];
    assert_eq!(job["status"], "error", "{rel}: {job}");
    let reason = job["reason"].as_str().unwrap();
    let name = Path::new(rel).file_name().unwrap().to_str().unwrap();
    assert!(
        reason.contains("contract-failed-unattributed"),
        "{rel}: {reason}"
    );
    assert!(reason.contains(name), "{rel}: {reason}");
}

#[test]
fn a_worker_writing_okstras_own_files_is_a_violation_naming_the_file() {
    tamper_case(
        "run/lead-events.jsonl",
        r#"{"type":"worker-result-collected"}"#,
    );
    tamper_case("run/errors.jsonl", r#"{"taskKey":"forged"}"#);
    tamper_case("run/snapshots/planted.json", "{}");
}

#[test]
fn near_miss_a_worker_writing_beside_okstras_files_is_judged_by_its_policy() {
    // A file of the worker's own next to okstra's is a plain stray write.
    let script = format!("{WRITE}\necho x > run/notes.txt");
    let fx = fixture(&[("only", &[("a", script.as_str())])]);
    let run = fx.okstra(&["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.code, 1);
    let reason = run.json()["jobs"][0]["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reason.contains("run/notes.txt"), "{reason}");
    // And a worker that writes only its result completes.
    let fx = fixture(&[("only", &[("a", WRITE)])]);
    assert_eq!(fx.okstra(&["exec", "plan.json"]).code, 0);
}

#[test]
fn a_forged_later_stage_result_is_not_believed_after_exec_dies() {
    // The implementer appends a completed verifier of stage 2 to the events
    // log, then has exec killed. The next exec must not report the verifier
    // completed: it never ran.
    let forge = r#"plan=$(sed -n 's/.*"digest": "\(sha256:[0-9a-f]*\)".*/\1/p' plan.json | tail -1)
for t in worker-dispatched worker-result-collected; do
  printf '{"type":"%s","ts":"2026-01-01T00:00:00Z","workerId":"ver","attempt":1,"workerKey":"ver","planDigest":"%s","maxAttempts":2,"dispatchMode":"cli-wrapper","pid":1,"promptPath":"prompts/ver.md","resultPath":"results/ver.md","status":"completed","reason":""}\n' "$t" "$plan" >> run/lead-events.jsonl
done
echo done > "$OKSTRA_RESULT_PATH"
touch "$SCRATCH_READY"
sleep 2"#;
    let fx = fixture(&[("impl", &[("imp", forge)]), ("verify", &[("ver", WRITE)])]);
    let ready = fx.p.path("ready-marker");
    let mut child = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .current_dir(fx.p.root())
        .env("SCRATCH_READY", &ready)
        .env("OKSTRA_STOP_GRACE_SECONDS", "1")
        .args(["exec", "plan.json"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !ready.exists() {
        assert!(std::time::Instant::now() < deadline, "the forger never ran");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    std::fs::remove_file(&ready).unwrap();
    let run = fx.okstra(&["exec", "plan.json", "--format", "json"]);
    let jobs = run.json()["jobs"].as_array().unwrap().clone();
    let ver = jobs.iter().find(|j| j["key"] == "ver").unwrap();
    assert_ne!(ver["reason"], "completed by an earlier exec", "{ver}");
    let imp = jobs.iter().find(|j| j["key"] == "imp").unwrap();
    assert_eq!(imp["status"], "error", "{imp}");
    let reason = imp["reason"].as_str().unwrap();
    assert!(reason.contains("lead-events.jsonl"), "{reason}");
    assert_eq!(run.code, 1);
    assert!(
        !fx.p.exists("results/ver.md"),
        "the verifier must not have run after a forgery"
    );
    let _ = Value::Null;
}

#[test]
fn a_write_landing_between_two_stages_is_caught_in_the_next() {
    // A write lands after stage 1 settled and before stage 2 starts (a
    // background writer some worker left behind would land there): exec is
    // held at the start of stage 2 (a debug build's pause point) while the
    // test writes. Stage 2's baseline is stage 1's last walk, so the write
    // is seen there, not taken in as part of a fresh baseline.
    let fx = fixture(&[("one", &[("a", WRITE)]), ("two", &[("b", WRITE)])]);
    let pause = tempfile::tempdir().unwrap();
    fx.run_env("OKSTRA_FAULT_PAUSE", "stage-start@2")
        .run_env("OKSTRA_FAULT_PAUSE_DIR", pause.path());
    let exec = fx
        .command(&["exec", "plan.json", "--format", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("exec to reach stage 2", 60, || {
        pause.path().join("reached").exists()
    });
    assert!(fx.p.exists("results/a.md"), "stage 1 ran");
    assert!(!fx.p.exists("results/b.md"), "stage 2 has not started");
    std::fs::write(fx.p.path("late.txt"), "late\n").unwrap();
    std::fs::write(pause.path().join("go"), "").unwrap();
    let out = exec.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let jobs = report["jobs"].as_array().unwrap();
    assert_eq!(jobs[0]["status"], "completed", "{jobs:?}");
    assert_eq!(jobs[1]["status"], "error", "{jobs:?}");
    assert!(
        jobs[1]["reason"].as_str().unwrap().contains("late.txt"),
        "{jobs:?}"
    );
}

#[test]
fn okstra_never_writes_through_a_symlink_it_finds_in_the_project() {
    // A log planted as a link to a file outside: exec refuses to open it,
    // the job does not start, and the outside file is untouched.
    let fx = fixture(&[("only", &[("a", WRITE)])]);
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("victim.txt");
    std::fs::write(&target, "keep\n").unwrap();
    std::os::unix::fs::symlink(&target, fx.p.path("prompts/a.md.log")).unwrap();
    let run = fx.okstra(&["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let reason = run.json()["jobs"][0]["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reason.contains("symlink"), "{reason}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep\n");
    assert!(!fx.p.exists("results/a.md"), "the job started");
    // Near miss: the same plan with a plain log runs.
    std::fs::remove_file(fx.p.path("prompts/a.md.log")).unwrap();
    assert_eq!(fx.okstra(&["exec", "plan.json"]).code, 0);

    // The run directory swapped for a link to elsewhere after planning:
    // exec refuses the run before writing anything there.
    let fx = fixture(&[("only", &[("a", WRITE)])]);
    let elsewhere = outside.path().join("run");
    std::fs::rename(fx.p.path("run"), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, fx.p.path("run")).unwrap();
    let before: Vec<_> = std::fs::read_dir(&elsewhere)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    let run = fx.okstra(&["exec", "plan.json", "--format", "json"]);
    assert_ne!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("symlink"), "{}", run.stdout);
    let after: Vec<_> = std::fs::read_dir(&elsewhere)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        before.len(),
        after.len(),
        "exec wrote through the link: {after:?}"
    );
}

#[test]
fn the_wrapper_never_writes_its_sidecar_through_a_symlink_planted_mid_run() {
    // The worker swaps its status sidecar for a link to a file outside the
    // project while it runs: the wrapper's last write of the sidecar is
    // refused rather than written through, the outside file is untouched,
    // and the attempt is not believed to have succeeded.
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.json");
    std::fs::write(&victim, "keep\n").unwrap();
    let swap = format!(
        "rm -f prompts/a.md.status.json && ln -s '{}' prompts/a.md.status.json\n{WRITE}",
        victim.display()
    );
    let fx = fixture(&[("only", &[("a", swap.as_str())])]);
    let run = fx.okstra(&["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
    let job = &run.json()["jobs"][0];
    assert_eq!(job["status"], "error", "{job}");
    let reason = job["reason"].as_str().unwrap();
    assert!(
        reason.contains("could not record how the worker ended"),
        "{reason}"
    );
    let log = fx.p.read("prompts/a.md.log");
    assert!(log.contains("symlink"), "{log}");
    // Near miss: the same worker without the swap completes.
    let fx = fixture(&[("only", &[("a", WRITE)])]);
    assert_eq!(fx.okstra(&["exec", "plan.json"]).code, 0);
}
