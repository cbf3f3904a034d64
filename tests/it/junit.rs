//! `okstra exec --junit FILE` (and `okstra run --junit`): the report is read
//! back with a JUnit parser (quick-junit's reader, the format nextest
//! writes): a suite per stage, a case per job, retries as reruns, written
//! whole at the end, interrupted runs too; and `--format json` progress as
//! JSON lines on stderr.

use crate::common::*;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus};
use std::time::{Duration, Instant};

/// The README's demo, copied into a temp dir.
fn demo() -> Project {
    let p = Project::new();
    copy_demo(p.root());
    p
}

fn read_report(p: &Project, rel: &str) -> Report {
    let xml = p.read(rel);
    Report::deserialize_from_str(&xml).unwrap_or_else(|e| panic!("not JUnit ({e}):\n{xml}"))
}

fn case<'a>(report: &'a Report, suite: &str, name: &str) -> &'a TestCase {
    report
        .test_suites
        .iter()
        .find(|s| s.name.as_str() == suite)
        .unwrap_or_else(|| panic!("no suite {suite}"))
        .test_cases
        .iter()
        .find(|c| c.name.as_str() == name)
        .unwrap_or_else(|| panic!("no case {name} in {suite}"))
}

fn property<'a>(c: &'a TestCase, name: &str) -> &'a str {
    c.properties
        .iter()
        .find(|p| p.name.as_str() == name)
        .map(|p| p.value.as_str())
        .unwrap_or_else(|| panic!("no property {name}"))
}

#[test]
fn the_demo_run_reports_a_case_per_job_and_the_retry() {
    let p = demo();
    let run = p.okstra(&[
        "run",
        "pipeline.toml",
        "--manifest",
        "run-manifest.json",
        "--junit",
        "reports/junit.xml",
    ]);
    // The report's directory must exist: it is refused before anything runs.
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("error[output/unwritable]"),
        "{}",
        run.stderr
    );
    assert!(!p.exists(".okstra"), "nothing ran");

    let run = p.okstra(&[
        "run",
        "pipeline.toml",
        "--manifest",
        "run-manifest.json",
        "--junit",
        "junit.xml",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let report = read_report(&p, "junit.xml");
    assert_eq!(report.tests, 3);
    assert_eq!((report.failures, report.errors), (0, 0));
    let suites: Vec<(&str, usize)> = report
        .test_suites
        .iter()
        .map(|s| (s.name.as_str(), s.test_cases.len()))
        .collect();
    assert_eq!(suites, [("implement", 1), ("verify", 2)]);

    let implementer = case(&report, "implement", "implementer");
    assert!(
        matches!(&implementer.status, TestCaseStatus::Success { flaky_runs } if flaky_runs.is_empty())
    );
    assert_eq!(implementer.classname.as_deref(), Some("implement"));
    assert_eq!(property(implementer, "attempts"), "1");
    assert!(implementer.time.is_some());
    assert!(implementer
        .system_out
        .as_deref()
        .unwrap()
        .contains("implementer: done"));

    // The reviewer's first attempt exits without its result; the second
    // writes it: a pass with its failed attempt as a flaky run.
    let reviewer = case(&report, "verify", "reviewer");
    assert_eq!(property(reviewer, "attempts"), "2");
    let TestCaseStatus::Success { flaky_runs } = &reviewer.status else {
        panic!("{reviewer:?}")
    };
    assert_eq!(flaky_runs.len(), 1);
    let retry = &flaky_runs[0];
    assert_eq!(retry.kind, NonSuccessKind::Failure);
    assert!(
        retry.message.as_deref().unwrap().starts_with("attempt 1: "),
        "{retry:?}"
    );
    assert!(retry
        .message
        .as_deref()
        .unwrap()
        .contains("out/results/reviewer.md"));
    assert_eq!(retry.ty.as_deref(), Some("missing-artifact"));
    assert!(retry
        .system_out
        .as_deref()
        .unwrap()
        .contains("attempt 1 exits without"));
    // Each attempt's log tail is its own.
    let out = reviewer.system_out.as_deref().unwrap();
    assert!(
        out.contains("wrote the result on attempt 2") && !out.contains("attempt 1"),
        "{out}"
    );
    assert!(matches!(
        case(&report, "verify", "verifier").status,
        TestCaseStatus::Success { .. }
    ));
}

const FAILING: &str = r#"[defaults]
provider = "command"
confinement = "none"

[[stages]]
name = "first"

[[stages.workers]]
workerId = "bad"
role = "analyst"
promptPath = "prompts/bad.md"
resultPath = "out/bad.md"
command = ["sh", "-c", "echo about to fail; echo 'it broke' >&2; exit 3"]

[[stages.workers]]
workerId = "forgetful"
role = "analyst"
promptPath = "prompts/forgetful.md"
resultPath = "out/forgetful.md"
command = ["sh", "-c", "echo attempt $OKSTRA_ATTEMPT forgot"]

[[stages]]
name = "second"

[[stages.workers]]
workerId = "later"
role = "analyst"
promptPath = "prompts/later.md"
resultPath = "out/later.md"
command = ["sh", "-c", "mkdir -p out && echo ok > out/later.md"]
"#;

fn failing_project() -> Project {
    let p = Project::new();
    p.write_json("run/run-manifest.json", &v1_manifest());
    for id in ["bad", "forgetful", "later"] {
        p.write(&format!("prompts/{id}.md"), "# go\n");
    }
    p.write("spec.toml", FAILING);
    assert_eq!(plan_json(&p, "spec.toml").code, 0);
    p
}

#[test]
fn failures_reruns_and_skips_are_told_apart() {
    let p = failing_project();
    let run = p.okstra(&["exec", "plan.json", "--junit", "junit.xml"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let report = read_report(&p, "junit.xml");
    assert_eq!(report.tests, 3);
    assert_eq!(report.failures, 2);

    let bad = case(&report, "first", "bad");
    let TestCaseStatus::NonSuccess {
        kind,
        message,
        ty,
        description,
        reruns,
    } = &bad.status
    else {
        panic!("{bad:?}")
    };
    assert_eq!(*kind, NonSuccessKind::Failure);
    assert!(message.as_deref().unwrap().contains('3'), "{message:?}");
    assert_eq!(ty.as_deref(), Some("exit"));
    assert!(
        description.as_deref().unwrap().contains("exit code 3"),
        "{description:?}"
    );
    assert!(reruns.runs.is_empty(), "a failed exit is not retried");
    assert_eq!(property(bad, "exitCode"), "3");
    let log = bad.system_out.as_deref().unwrap();
    assert!(
        log.contains("about to fail") && log.contains("it broke"),
        "{log}"
    );

    // Retried once and still without its result: the first attempt is a rerun.
    let forgetful = case(&report, "first", "forgetful");
    let TestCaseStatus::NonSuccess { reruns, .. } = &forgetful.status else {
        panic!("{forgetful:?}")
    };
    assert_eq!(reruns.runs.len(), 1);
    assert!(reruns.runs[0]
        .system_out
        .as_deref()
        .unwrap()
        .contains("attempt 1 forgot"));
    assert!(forgetful
        .system_out
        .as_deref()
        .unwrap()
        .contains("attempt 2 forgot"));
    let xml = p.read("junit.xml");
    assert!(xml.contains("<rerunFailure"), "{xml}");

    // A later stage never started: skipped, with the reason.
    let later = case(&report, "second", "later");
    let TestCaseStatus::Skipped { message, .. } = &later.status else {
        panic!("{later:?}")
    };
    assert!(
        message.as_deref().unwrap().contains("earlier stage"),
        "{message:?}"
    );
    assert_eq!(report.test_suites[1].skipped, 1);
}

#[test]
fn an_interrupted_run_still_writes_its_report_whole() {
    let fx = Fx::new();
    let p = &fx.p;
    let scratch = fx.scratch_dir();
    fx.v1();
    p.write("prompts/slow.md", "# wait\n");
    p.write(
        "spec.toml",
        &format!(
            "[[workers]]\nworkerId = \"slow\"\nprovider = \"command\"\nconfinement = \"none\"\nrole = \"analyst\"\npromptPath = \"prompts/slow.md\"\nresultPath = \"out/slow.md\"\ncommand = [\"sh\", \"-c\", \"touch {0}/started; echo waiting; sleep 60\"]\n",
            scratch.display()
        ),
    );
    assert_eq!(plan_json(p, "spec.toml").code, 0);
    let mut child = fx.spawn_exec(&["--junit", "junit.xml"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !scratch.join("started").exists() {
        assert!(Instant::now() < deadline, "the worker never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!p.exists("junit.xml"), "written at the end, not before");
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let report = read_report(p, "junit.xml");
    let slow = case(&report, "main", "slow");
    let TestCaseStatus::NonSuccess { kind, ty, .. } = &slow.status else {
        panic!("{slow:?}")
    };
    assert_eq!(*kind, NonSuccessKind::Error, "the harness stopped it");
    assert_eq!(ty.as_deref(), Some("interrupted"));
    // No temporary file is left beside it.
    let left: Vec<_> = std::fs::read_dir(p.root())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("junit") && n != "junit.xml")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn json_progress_is_one_object_a_line_on_stderr() {
    let p = demo();
    let run = p.okstra(&[
        "run",
        "pipeline.toml",
        "--manifest",
        "run-manifest.json",
        "--format",
        "json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let summary = run.json();
    assert_eq!(summary["ok"], true);
    assert_eq!(summary["jobs"].as_array().unwrap().len(), 3);
    let notices: Vec<serde_json::Value> = run
        .stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let kinds: Vec<&str> = notices
        .iter()
        .filter_map(|n| n["notice"].as_str())
        .collect();
    assert!(kinds.contains(&"stage-started"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == "finished").count(),
        3,
        "{kinds:?}"
    );
    assert!(
        notices
            .iter()
            .any(|n| n["event"]["type"] == "worker-retry-scheduled"),
        "the retry is in the stream"
    );
}
