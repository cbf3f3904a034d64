//! The `slurm` backend against a real Slurm (docs/slurm.md#running-on-slurm):
//! the real binary runs fixture projects whose jobs are Slurm batch jobs.
//!
//! A cluster is needed: `scripts/slurm-cluster.sh up` (as root) starts a
//! one-node one and prints the `SLURM_CONF` that points at it; these tests
//! use `$SLURM_CONF`, else the script's default configuration where it
//! exists. Where no cluster answers, each test says it skipped, unless
//! REQUIRE_SLURM is set (`.ci/run` starts the cluster and sets it): then it
//! fails.
//!
//! As in tests/it/exec.rs, workers talk to the test through a scratch
//! directory outside the project, and tests wait on marker files with a
//! deadline, never on fixed sleeps.

use crate::common::*;
use rustix::process::Signal;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The configuration of the cluster to test against, if one answers.
fn cluster() -> Option<PathBuf> {
    let conf = std::env::var_os("SLURM_CONF")
        .map(PathBuf::from)
        .or_else(|| {
            let dir = std::env::var_os("OKSTRA_SLURM_DIR")
                .map_or_else(|| PathBuf::from("/tmp/okstra-slurm"), PathBuf::from);
            Some(dir.join("slurm.conf")).filter(|c| c.exists())
        });
    let answers = conf.as_ref().is_some_and(|conf| {
        Command::new("sinfo")
            .args(["-h", "-o", "%T"])
            .env("SLURM_CONF", conf)
            .output()
            .is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
    });
    if answers {
        return conf;
    }
    missing(
        "REQUIRE_SLURM",
        &format!("no Slurm cluster answers at {conf:?} (as root: eval \"$(scripts/slurm-cluster.sh up)\", then run the tests again)"),
    );
    None
}

/// Every worker script starts with this: counts the run, names the result.
const PRELUDE: &str = r#"set -u
S="$SCRATCH"; K="$OKSTRA_WORKER_KEY"; R="$OKSTRA_RESULT_PATH"
echo "$OKSTRA_ATTEMPT" >> "$S/$K.runs"
"#;

const WRITE_RESULT: &str = "echo done > \"$R\"\n";

/// A wait of at most `secs` for a scratch file, inside a worker script.
fn wait_in_sh(file: &str, secs: u32) -> String {
    format!(
        "i=0; while [ ! -e \"$S/{file}\" ]; do i=$((i+1)); if [ $i -gt {} ]; then echo \"gave up waiting for {file}\" >&2; exit 1; fi; sleep 0.05; done\n",
        secs * 20
    )
}

/// A worker of a fixture: its id, its script, and more spec lines.
type Worker<'a> = (&'a str, String, &'a str);

/// A project of `command` workers on Slurm (the cluster of `conf`), in
/// stages of `(id, script, extra spec lines)` workers. Workers report
/// through a scratch directory outside the project, which the debug build's
/// test seam lets a confined worker write.
fn fixture(conf: &Path, stages: &[(&str, Vec<Worker>)]) -> Fx {
    let fx = Fx::new();
    fx.mkdir("results")
        .v1()
        .commands()
        .defaults("backend = \"slurm\"")
        .defaults("slurm = { timeLimit = \"5\" }")
        .scratch_env()
        .prelude(PRELUDE)
        .run_env("SLURM_CONF", conf);
    for (name, jobs) in stages {
        fx.stage(
            name,
            jobs.iter()
                .map(|(id, script, extra)| job(id, script.as_str()).with(extra)),
        );
    }
    fx
}

/// `okstra exec plan.json` in the background, its output in `LOG.stdout`
/// and `LOG.stderr` in scratch.
fn spawn_exec(fx: &Fx, log: &str) -> Child {
    fx.spawn(&["exec", "plan.json"], log)
}

fn touch(fx: &Fx, name: &str) {
    std::fs::write(fx.scratch(name), "").unwrap();
}

/// The Slurm job ids the events log recorded for `key`, in order.
fn job_ids(fx: &Fx, key: &str) -> Vec<u64> {
    if !fx.p.exists("run/lead-events.jsonl") {
        return Vec::new();
    }
    fx.events_of("worker-dispatched", key)
        .iter()
        .map(|e| e["slurmJobId"].as_u64().expect("a Slurm job id"))
        .collect()
}

/// The cluster the fixture runs on.
fn conf(fx: &Fx) -> std::ffi::OsString {
    fx.run_env_of("SLURM_CONF").expect("a Slurm fixture")
}

/// Slurm's state of a job (`squeue -t all`), or "" once it forgot it.
fn state(fx: &Fx, id: u64) -> String {
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-j", &id.to_string(), "-o", "%T"])
        .env("SLURM_CONF", conf(fx))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn scancel(fx: &Fx, id: u64) {
    let ok = Command::new("scancel")
        .arg(id.to_string())
        .env("SLURM_CONF", conf(fx))
        .status()
        .unwrap()
        .success();
    assert!(ok, "scancel {id}");
}

/// Slurm states of jobs that no longer run.
fn ended(state: &str) -> bool {
    matches!(
        state,
        "" | "COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT" | "NODE_FAIL" | "OUT_OF_MEMORY"
    )
}

fn dispatch_rows(p: &Project, key: &str) -> Vec<Value> {
    p.dispatch_rows(key)
}

// ---------------------------------------------------------------------------

#[test]
fn the_demo_pipeline_runs_on_slurm_with_its_retry() {
    let Some(conf) = cluster() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("demo");
    copy_demo(&root);
    let spec = std::fs::read_to_string(root.join("pipeline.toml")).unwrap();
    let spec = spec.replace(
        "idleTimeoutSeconds = 60\n",
        "idleTimeoutSeconds = 60\nbackend = \"slurm\"\nslurm = { timeLimit = \"5\" }\n",
    );
    std::fs::write(root.join("pipeline.toml"), spec).unwrap();
    let out = assert_cmd::Command::cargo_bin("okstra")
        .unwrap()
        .current_dir(&root)
        .env("SLURM_CONF", &conf)
        .args(["run", "pipeline.toml", "--manifest", "run-manifest.json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("backend slurm"),
        "the review names the backend: {stderr}"
    );
    let team: Value =
        serde_json::from_slice(&std::fs::read(root.join(".okstra/run/team-state.json")).unwrap())
            .unwrap();
    let rows = team["workerDispatches"].as_array().unwrap();
    let attempts = |key: &str| {
        rows.iter()
            .filter(|r| r["workerKey"] == key)
            .map(|r| {
                assert_eq!(r["backend"], "slurm");
                (
                    r["attempt"].as_u64().unwrap(),
                    r["status"].as_str().unwrap().to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(attempts("implementer"), [(1, "completed".into())]);
    assert_eq!(attempts("verifier"), [(1, "completed".into())]);
    assert_eq!(
        attempts("reviewer"),
        [(1, "error".into()), (2, "completed".into())],
        "the reviewer's retry"
    );
    let ids: Vec<u64> = rows
        .iter()
        .map(|r| r["slurmJobId"].as_u64().unwrap())
        .collect();
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "one Slurm job per attempt: {ids:?}");
    assert!(std::fs::read_to_string(root.join("out/greeting.txt")).is_ok());
}

#[test]
fn a_failing_job_settles_error_with_its_exit_code() {
    let Some(conf) = cluster() else { return };
    let fx = fixture(
        &conf,
        &[(
            "main",
            vec![("bad", "echo broken >&2; exit 3\n".into(), "")],
        )],
    );
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 1);
    let rows = dispatch_rows(&fx.p, "bad");
    assert_eq!(rows.len(), 1, "a failure is not retried: {rows:?}");
    assert_eq!(rows[0]["status"], "error");
    assert_eq!(rows[0]["exitCode"], 3);
    assert_eq!(rows[0]["failureKind"], "exit");
    assert!(rows[0]["slurmJobId"].as_u64().is_some());
    assert!(fx.p.read("prompts/bad.md.log").contains("broken"));
    let errors = fx.p.run_errors();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["exitCode"], 3);
    assert_eq!(
        state(&fx, rows[0]["slurmJobId"].as_u64().unwrap()),
        "FAILED"
    );
}

#[test]
fn an_idle_job_times_out_and_its_slurm_job_ends() {
    let Some(conf) = cluster() else { return };
    let fx = fixture(
        &conf,
        &[(
            "main",
            vec![(
                "quiet",
                "echo one line, then silence; sleep 120\n".into(),
                "idleTimeoutSeconds = 2\n",
            )],
        )],
    );
    fx.plan();
    let started = Instant::now();
    let run = fx.exec(&[]);
    assert_code(&run, 1);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "stopped long before its sleep ends"
    );
    let rows = dispatch_rows(&fx.p, "quiet");
    assert_eq!(rows[0]["status"], "timeout");
    assert_eq!(rows[0]["exitCode"], 124);
    assert_eq!(rows[0]["failureKind"], "timeout");
    let id = rows[0]["slurmJobId"].as_u64().unwrap();
    assert!(ended(&state(&fx, id)), "job {id} is {}", state(&fx, id));
}

#[test]
fn ctrl_c_cancels_every_slurm_job_and_the_next_exec_finishes() {
    let Some(conf) = cluster() else { return };
    let block = |id: &str| {
        format!(
            "touch \"$S/{id}.started\"\nif [ ! -e \"$S/go\" ]; then sleep 120; fi\n{WRITE_RESULT}"
        )
    };
    let fx = fixture(
        &conf,
        &[(
            "main",
            vec![
                ("a", block("a"), ""),
                ("b", format!("trap '' TERM\n{}", block("b")), ""),
                ("c", block("c"), ""),
            ],
        )],
    );
    fx.plan();
    let mut child = spawn_exec(&fx, "first");
    // Workers can start before exec's first team-state flush, which status
    // reads: wait for both.
    wait_for(
        "every worker to start on its node, and team-state",
        60,
        || {
            ["a", "b", "c"]
                .iter()
                .all(|k| fx.scratch(&format!("{k}.started")).exists())
                && fx.p.exists("run/team-state.json")
                && ["a", "b", "c"]
                    .iter()
                    .all(|k| !fx.dispatch_rows(k).is_empty())
        },
    );
    // While they run, status shows each one's Slurm job and state.
    let status = fx.okstra(&["status", "--manifest", "run/run-manifest.json"]);
    assert_code(&status, 0);
    for k in ["a", "b", "c"] {
        let id = job_ids(&fx, k)[0];
        assert!(
            status.stdout.contains(&format!("{id} RUNNING")),
            "{k}: {}",
            status.stdout
        );
    }
    let json = fx.okstra(STATUS_JSON);
    assert_code(&json, 0);
    let report = json.json();
    let rows = report["dispatches"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{report}");
    assert!(
        rows.iter().all(|r| r["slurmState"] == "RUNNING"),
        "{report}"
    );
    signal(child.id(), Signal::INT);
    assert_eq!(wait_child(&mut child, 60), 130);
    for k in ["a", "b", "c"] {
        let id = job_ids(&fx, k)[0];
        assert!(
            ended(&state(&fx, id)),
            "{k}: job {id} is {}",
            state(&fx, id)
        );
        let row = &dispatch_rows(&fx.p, k)[0];
        assert_eq!(row["reason"], "interrupted");
        assert_eq!(row["resumable"], true);
    }
    touch(&fx, "go");
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    for k in ["a", "b", "c"] {
        assert_eq!(fx.runs(k), ["1", "2"], "{k}: the next exec ran attempt 2");
    }
}

#[test]
fn exec_killed_mid_stage_resumes_by_reattaching_and_runs_nothing_twice() {
    let Some(conf) = cluster() else { return };
    let block = |id: &str| {
        format!(
            "touch \"$S/{id}.started\"\n{}{WRITE_RESULT}",
            wait_in_sh("go", 60)
        )
    };
    let fx = fixture(
        &conf,
        &[
            ("first", vec![("a", block("a"), ""), ("b", block("b"), "")]),
            ("second", vec![("c", WRITE_RESULT.into(), "")]),
        ],
    );
    fx.plan();
    let mut child = spawn_exec(&fx, "first");
    wait_for("both workers to start", 60, || {
        fx.scratch("a.started").exists() && fx.scratch("b.started").exists()
    });
    signal(child.id(), Signal::KILL);
    wait_child(&mut child, 10);
    let ids = [job_ids(&fx, "a")[0], job_ids(&fx, "b")[0]];
    // The second exec finds both still running and watches them; only then
    // may they finish.
    let mut child = spawn_exec(&fx, "second");
    wait_for("the second exec to re-attach", 30, || {
        let err = std::fs::read_to_string(fx.scratch("second.stderr")).unwrap_or_default();
        ids.iter()
            .all(|id| err.contains(&format!("still runs (Slurm job {id}); watching it")))
    });
    touch(&fx, "go");
    assert_eq!(wait_child(&mut child, 60), 0);
    for k in ["a", "b", "c"] {
        assert_eq!(fx.runs(k), ["1"], "{k} ran once");
        assert_eq!(
            fx.p.events_of("worker-dispatched", k).len(),
            1,
            "{k} was dispatched once"
        );
        assert_eq!(dispatch_rows(&fx.p, k)[0]["status"], "completed");
    }
    assert_eq!(
        job_ids(&fx, "a"),
        [ids[0]],
        "re-attached to the recorded job"
    );
}

#[test]
fn a_job_cancelled_from_outside_is_resumable_and_the_next_exec_completes() {
    let Some(conf) = cluster() else { return };
    let fx = fixture(&conf,
        &[(
            "main",
            vec![
                (
                    "victim",
                    format!(
                        "touch \"$S/victim.started\"\nif [ ! -e \"$S/go\" ]; then sleep 120 || exit 1; fi\n{WRITE_RESULT}"
                    ),
                    "",
                ),
                ("bystander", WRITE_RESULT.into(), ""),
            ],
        )],
    );
    fx.plan();
    // (`|| exit 1`: Slurm signals every process of the job, not all at the
    // same instant; a shell whose sleep died first would go on and finish.)
    let mut child = spawn_exec(&fx, "first");
    wait_for("the victim to start", 60, || {
        fx.scratch("victim.started").exists()
    });
    let id = job_ids(&fx, "victim")[0];
    scancel(&fx, id);
    assert_eq!(wait_child(&mut child, 60), 1);
    let row = &dispatch_rows(&fx.p, "victim")[0];
    assert_eq!(row["status"], "error");
    assert_eq!(row["failureKind"], "cancelled");
    assert_eq!(row["resumable"], true);
    assert!(
        row["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("Slurm job {id} was cancelled")),
        "{row}"
    );
    assert_eq!(dispatch_rows(&fx.p, "bystander")[0]["status"], "completed");
    touch(&fx, "go");
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    assert_eq!(fx.runs("victim"), ["1", "2"]);
    assert_eq!(fx.runs("bystander"), ["1"]);
    let rows = dispatch_rows(&fx.p, "victim");
    assert_eq!(rows[1]["status"], "completed");
    assert_ne!(rows[1]["slurmJobId"], rows[0]["slurmJobId"]);
}

#[test]
fn a_partition_that_does_not_exist_is_named_by_doctor_and_exec() {
    let Some(conf) = cluster() else { return };
    let fx = fixture(
        &conf,
        &[(
            "main",
            vec![(
                "w",
                WRITE_RESULT.into(),
                "slurm = { partition = \"no-such-partition\" }\n",
            )],
        )],
    );
    fx.plan();
    let doctor = fx.okstra(&["doctor", "plan.json", "--format", "json"]);
    assert_code(&doctor, 2);
    let checks = doctor.json()["checks"].as_array().unwrap().clone();
    let bad = checks
        .iter()
        .find(|c| c["name"] == "slurm partition no-such-partition")
        .unwrap_or_else(|| panic!("{}", doctor.stdout));
    assert_eq!(bad["status"], "fail");
    let detail = bad["detail"].as_str().unwrap();
    assert!(
        detail.contains("w (/stages/0/jobs/0/slurm/partition)"),
        "names the worker and where: {detail}"
    );
    let run = fx.exec(&[]);
    assert_code(&run, 1);
    let row = &fx.p.worker_row("w");
    assert!(
        row["reason"]
            .as_str()
            .unwrap()
            .contains("invalid partition"),
        "{row}"
    );
    assert_eq!(fx.runs("w"), Vec::<String>::new(), "nothing ran");
}

#[test]
fn doctor_probes_the_cluster_for_a_slurm_plan() {
    let Some(conf) = cluster() else { return };
    let fx = fixture(&conf, &[("main", vec![("w", WRITE_RESULT.into(), "")])]);
    fx.plan();
    let doctor = fx.okstra(&["doctor", "plan.json", "--format", "json"]);
    let checks = doctor.json()["checks"].as_array().unwrap().clone();
    let named = |prefix: &str| {
        checks
            .iter()
            .find(|c| c["name"].as_str().unwrap().starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} check: {}", doctor.stdout))
            .clone()
    };
    assert_eq!(named("slurm sbatch")["status"], "ok");
    assert_eq!(named("slurm partition")["status"], "ok");
    let probe = named("slurm node sees the project");
    assert_eq!(probe["status"], "ok", "{probe}");
    assert_code(&doctor, 0);
    // The probe's file is gone again.
    let left: Vec<_> = std::fs::read_dir(fx.p.root())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".okstra-doctor-probe")
        })
        .collect();
    assert!(left.is_empty());
}

#[test]
fn exec_killed_at_each_launch_point_loses_nothing_runs_nothing_twice_and_leaves_no_held_job() {
    let Some(conf) = cluster() else { return };
    let make = || {
        let fx = fixture(
            &conf,
            &[
                (
                    "first",
                    vec![
                        ("a", WRITE_RESULT.into(), ""),
                        (
                            "flaky",
                            format!("[ \"$OKSTRA_ATTEMPT\" = 1 ] || {WRITE_RESULT}"),
                            "",
                        ),
                    ],
                ),
                ("second", vec![("c", WRITE_RESULT.into(), "")]),
            ],
        );
        fx.plan();
        fx
    };
    let exec_with = |fx: &Fx, env: &[(&str, String)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_okstra"));
        cmd.current_dir(fx.p.root())
            .env("SLURM_CONF", &conf)
            .env("OKSTRA_STOP_GRACE_SECONDS", "1")
            .args(["exec", "plan.json"]);
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
    };
    // The launch points a clean run passes, in order.
    let fx = make();
    let trace = fx.scratch("trace");
    let (code, err) = exec_with(&fx, &[("OKSTRA_FAULT_TRACE", trace.display().to_string())]);
    assert_eq!(code, 0, "{err}");
    let points: Vec<(u64, String)> = lines_of(&trace)
        .iter()
        .filter_map(|l| {
            let (n, name) = l.split_once(' ')?;
            Some((n.parse().ok()?, name.to_string()))
        })
        .filter(|(_, name)| matches!(name.as_str(), "spawn" | "dispatch-commit" | "release"))
        .collect();
    assert!(points.len() >= 9, "{points:?}");
    for (n, name) in points {
        let what = format!("killed at point {n} ({name})");
        let fx = make();
        let (code, err) = exec_with(&fx, &[("OKSTRA_FAULT_AT", n.to_string())]);
        assert_eq!(code, 128 + 9, "{what}: {err}");
        let mut resumes = 0;
        loop {
            let (code, err) = exec_with(&fx, &[]);
            resumes += 1;
            if code == 0 {
                break;
            }
            assert!(resumes < 3, "{what}: resume {resumes} exited {code}\n{err}");
        }
        // Each attempt ran at most once, and each job's last one completed.
        for k in ["a", "flaky", "c"] {
            let runs = fx.runs(k);
            let mut distinct = runs.clone();
            distinct.dedup();
            assert_eq!(runs, distinct, "{what}: {k} ran an attempt twice: {runs:?}");
            assert_eq!(fx.p.worker_row(k)["status"], "completed", "{what}: {k}");
        }
        assert_eq!(fx.runs("flaky").len(), 2, "{what}: flaky's retry");
        // No held job of this plan is left in the queue.
        let digest = fx.p.read_json("plan.json")["digest"]
            .as_str()
            .unwrap()
            .trim_start_matches("sha256:")[..12]
            .to_string();
        let out = Command::new("squeue")
            .args(["--me", "-h", "-t", "PENDING", "-o", "%j"])
            .env("SLURM_CONF", &conf)
            .output()
            .unwrap();
        let held: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(&digest))
            .map(str::to_string)
            .collect();
        assert!(held.is_empty(), "{what}: jobs left pending: {held:?}");
    }
}

#[test]
fn time_in_the_queue_is_not_idleness() {
    let Some(conf) = cluster() else { return };
    // Slurm holds the job back 3 s (`--begin`), three times its idle
    // timeout; the idle clock starts when the job does.
    let fx = fixture(
        &conf,
        &[(
            "main",
            vec![(
                "late",
                format!("echo started\n{WRITE_RESULT}"),
                "idleTimeoutSeconds = 1\nslurm = { extraArgs = [\"--begin=now+3\"] }\n",
            )],
        )],
    );
    fx.plan();
    let run = fx.exec(&[]);
    assert_code(&run, 0);
    assert_eq!(fx.runs("late"), ["1"]);
}
