//! The JUnit XML report of a run (`okstra exec --junit FILE`), in the
//! dialect nextest writes with the same crate (quick-junit), which every CI
//! system reads: one `<testsuite>` per stage, one `<testcase>` per job.
//!
//! A job's status becomes the case's: `completed` passes; `not-run` is
//! skipped; any other end is a `<failure>` (the job ran and did not do its
//! work) or, where the harness failed it rather than the job (interrupted,
//! a launch that failed, a lost attempt, an audit that could not finish),
//! an `<error>`; the reason is the message, the failure kind the type.
//! Earlier failed attempts of the job in this exec are its reruns:
//! `<flakyFailure>` under a case that passed in the end, `<rerunFailure>`
//! under one that did not, each with its reason, duration and log tail.
//! The case's own `<system-out>` is the tail of its last attempt's log.
//!
//! The report is collected from the notices as the run goes, and written
//! once, whole, at the end (an interrupted run ends too), through the one
//! atomic-write path: never a partial file.

use super::{JobReport, Notice, Reporter};
use crate::exec::event::Event;
use crate::paths;
use crate::plan::Plan;
use crate::state::WorkerStatus;
use crate::vocab::FailureKind;
use quick_junit::{
    NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestRerun, TestSuite,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// How much of an attempt's log a case keeps: its end.
pub const LOG_TAIL_BYTES: u64 = 4096;

/// One attempt, as the notices told it.
#[derive(Debug, Clone, Default)]
struct Attempt {
    number: u64,
    started: Option<Instant>,
    log: PathBuf,
    /// The log's length when the attempt was dispatched: what it wrote
    /// starts there (the log is appended to, attempt after attempt).
    log_from: u64,
    took: Option<Duration>,
    /// `None` while it runs; its settled status, reason, failure kind and
    /// exit code once it ended.
    end: Option<End>,
    log_tail: String,
}

#[derive(Debug, Clone)]
struct End {
    completed: bool,
    reason: String,
    failure_kind: Option<FailureKind>,
    exit_code: Option<i32>,
    /// A `worktree = "git"` job's branch and commit (or where its work was
    /// kept), docs/worktrees.md#running.
    worktree: Option<crate::exec::event::WorktreeUse>,
}

/// What the reporter half collects and the writer half writes.
#[derive(Default)]
struct Collected {
    /// Each job's attempts in this exec, by (stage, state key).
    attempts: HashMap<(String, String), Vec<Attempt>>,
    /// Each job's final word, by (stage, state key).
    finished: HashMap<(String, String), JobReport>,
}

/// The reporter to hand the runner; [`JunitReport::write`] writes what it
/// collected.
pub struct Junit {
    state: Rc<RefCell<Collected>>,
    root: PathBuf,
}

/// The writing half: where, and in what order the cases go.
pub struct JunitReport {
    state: Rc<RefCell<Collected>>,
    path: PathBuf,
    name: String,
    /// Stage names and their jobs' state keys, in plan order.
    order: Vec<(String, Vec<String>)>,
    started: Instant,
}

/// A reporter and its writer for `plan`, to be written to `path`.
pub fn junit(
    plan: &Plan,
    order: Vec<(String, Vec<String>)>,
    path: PathBuf,
) -> (Junit, JunitReport) {
    let state = Rc::new(RefCell::new(Collected::default()));
    (
        Junit {
            state: Rc::clone(&state),
            root: PathBuf::from(&plan.project_root),
        },
        JunitReport {
            state,
            path,
            name: format!("okstra {}", plan.run.task_key),
            order,
            started: Instant::now(),
        },
    )
}

impl Reporter for Junit {
    fn notice(&mut self, notice: &Notice) {
        let mut state = self.state.borrow_mut();
        match notice {
            Notice::Recorded { event } => {
                let Some(head) = event.head() else {
                    return;
                };
                let key = (
                    head.stage.clone().unwrap_or_default(),
                    head.worker_key.clone(),
                );
                let attempts = state.attempts.entry(key).or_default();
                match event {
                    Event::WorkerDispatched(d) => {
                        let log = paths::abs_of(
                            &self.root,
                            &crate::plan::sidecar::beside(
                                &d.prompt_path,
                                crate::plan::sidecar::LOG,
                            ),
                        );
                        let log_from = std::fs::metadata(&log).map_or(0, |m| m.len());
                        attempts.retain(|a| a.number != head.attempt);
                        attempts.push(Attempt {
                            number: head.attempt,
                            started: Some(Instant::now()),
                            log,
                            log_from,
                            ..Attempt::default()
                        });
                    }
                    Event::WorkerFailed(s) | Event::WorkerResultCollected(s) => {
                        let completed = matches!(event, Event::WorkerResultCollected(_));
                        let a = match attempts.iter_mut().find(|a| a.number == head.attempt) {
                            Some(a) => a,
                            None => {
                                // Settled from an earlier exec's dispatch.
                                attempts.push(Attempt {
                                    number: head.attempt,
                                    ..Attempt::default()
                                });
                                attempts.last_mut().expect("pushed")
                            }
                        };
                        a.took = a.started.map(|t| t.elapsed());
                        a.log_tail = tail_of(&a.log, a.log_from);
                        a.end = Some(End {
                            completed,
                            reason: s.reason.clone(),
                            failure_kind: s.failure_kind.clone(),
                            exit_code: s.exit_code,
                            worktree: s.worktree.clone(),
                        });
                    }
                    Event::WorkerRetryScheduled(_)
                    | Event::EgressRefused(_)
                    | Event::StageSnapshotWritten(_) => {}
                }
            }
            Notice::Finished { report } => {
                state.finished.insert(
                    (report.stage.clone(), report.key.clone()),
                    (*report).clone(),
                );
            }
            _ => {}
        }
    }
}

/// The end of what `log` gained from `from` on, as text (invalid UTF-8
/// replaced; quick-junit drops what XML cannot hold).
fn tail_of(log: &Path, from: u64) -> String {
    let Ok(mut file) = std::fs::File::open(log) else {
        return String::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    // A log that shrank was rewritten: its end is this attempt's.
    let from = if from > len { 0 } else { from };
    let start = from.max(len.saturating_sub(LOG_TAIL_BYTES));
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    if start > from {
        format!("[... {} earlier bytes of the log]\n{text}", start - from)
    } else {
        text.into_owned()
    }
}

/// The JUnit kind of an attempt that did not complete.
fn kind_of(end: &End) -> NonSuccessKind {
    match &end.failure_kind {
        // The harness, not the job, failed: an `<error>`.
        Some(k) if k.is_harness() => NonSuccessKind::Error,
        _ => NonSuccessKind::Failure,
    }
}

fn rerun_of(a: &Attempt) -> TestRerun {
    let end = a.end.as_ref();
    let mut r = TestRerun::new(end.map_or(NonSuccessKind::Error, kind_of));
    r.set_message(format!(
        "attempt {}: {}",
        a.number,
        end.map_or("did not settle in this exec", |e| e.reason.as_str())
    ));
    if let Some(kind) = end.and_then(|e| e.failure_kind.as_ref()) {
        r.set_type(kind.as_str());
    }
    if let Some(took) = a.took {
        r.set_time(took);
    }
    if !a.log_tail.is_empty() {
        r.set_system_out(a.log_tail.as_str());
    }
    r
}

fn case_of(report: &JobReport, attempts: &[Attempt]) -> TestCase {
    let last = attempts.last();
    let last_end = last.and_then(|a| a.end.as_ref());
    // Every settled attempt before the one that ended the job.
    let earlier: Vec<TestRerun> = attempts
        .iter()
        .filter(|a| a.end.as_ref().is_some_and(|e| !e.completed))
        .filter(|a| {
            report.status == WorkerStatus::Completed || last.is_none_or(|l| l.number != a.number)
        })
        .map(rerun_of)
        .collect();
    let mut status = match report.status {
        WorkerStatus::Completed => TestCaseStatus::success(),
        WorkerStatus::NotRun => {
            let mut s = TestCaseStatus::skipped();
            s.set_message(report.reason.as_str());
            s
        }
        other => {
            let other = other.as_str();
            let kind = last_end.map_or(NonSuccessKind::Failure, kind_of);
            let mut s = TestCaseStatus::non_success(kind);
            s.set_message(report.reason.as_str());
            s.set_type(
                last_end
                    .and_then(|e| e.failure_kind.as_ref())
                    .map_or_else(|| other.to_string(), |k| k.to_string()),
            );
            let mut description = format!(
                "{other} after {} attempt(s): {}",
                report.attempts, report.reason
            );
            if let Some(code) = last_end.and_then(|e| e.exit_code) {
                description.push_str(&format!(" (exit code {code})"));
            }
            s.set_description(description);
            s
        }
    };
    status.add_reruns(earlier);
    let mut case = TestCase::new(report.label.as_str(), status);
    case.set_classname(report.stage.as_str());
    case.set_time(report.duration);
    case.add_property(Property::new("attempts", report.attempts.to_string()));
    case.add_property(Property::new("workerKey", report.key.as_str()));
    case.add_property(Property::new("status", report.status.as_str()));
    if let Some(code) = last_end.and_then(|e| e.exit_code) {
        case.add_property(Property::new("exitCode", code.to_string()));
    }
    if let Some(w) = last_end.and_then(|e| e.worktree.as_ref()) {
        let (branch, commit) = match &w.kept_branch {
            Some(kept) => (kept, &w.kept_commit),
            None => (&w.branch, &w.commit),
        };
        case.add_property(Property::new("worktreeBranch", branch.as_str()));
        if let Some(commit) = commit {
            case.add_property(Property::new("worktreeCommit", commit.as_str()));
        }
    }
    if let Some(tail) = last.map(|a| a.log_tail.as_str()).filter(|t| !t.is_empty()) {
        case.set_system_out(tail);
    }
    case
}

impl JunitReport {
    /// The report as XML; quick-junit's error where it cannot serialise it.
    pub fn to_xml(&self) -> Result<String, quick_junit::SerializeError> {
        let state = self.state.borrow();
        let mut report = Report::new(self.name.as_str());
        report.set_time(self.started.elapsed());
        for (stage, keys) in &self.order {
            let mut suite = TestSuite::new(stage.as_str());
            let mut took = Duration::ZERO;
            for key in keys {
                let at = (stage.clone(), key.clone());
                let Some(job) = state.finished.get(&at) else {
                    continue;
                };
                let attempts = state
                    .attempts
                    .get(&at)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                took += job.duration;
                suite.add_test_case(case_of(job, attempts));
            }
            suite.set_time(took);
            report.add_test_suite(suite);
        }
        report.to_string()
    }

    /// Write the report, whole, through a temporary file renamed into place.
    pub fn write(&self) -> Result<(), crate::diag::Diagnostic> {
        let shown = self.path.display().to_string();
        let fail = |why: String| {
            crate::diag::Diagnostic::new(
                crate::diag::Code::OutputUnwritable,
                format!("cannot write the JUnit report {shown}: {why}"),
            )
            .in_file(shown.clone())
            .help("choose a writable --junit path; the run itself is recorded in its state files")
        };
        let xml = self.to_xml().map_err(|e| fail(e.to_string()))?;
        crate::fsutil::write_atomic(&self.path, xml.as_bytes(), crate::fsutil::Durability::Fsync)
            .map_err(|e| fail(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(status: &str, attempts: u64, reason: &str) -> JobReport {
        JobReport {
            stage: "verify".into(),
            key: "rev".into(),
            label: "rev".into(),
            status: status.parse().expect("a worker status"),
            attempts,
            reason: reason.into(),
            duration: Duration::from_millis(1500),
            usage: None,
        }
    }

    fn attempt(n: u64, completed: bool, kind: Option<&str>) -> Attempt {
        Attempt {
            number: n,
            took: Some(Duration::from_millis(500)),
            end: Some(End {
                completed,
                reason: if completed {
                    String::new()
                } else {
                    format!("why {n}")
                },
                failure_kind: kind.map(FailureKind::from),
                exit_code: Some(if completed { 0 } else { 1 }),
                worktree: None,
            }),
            log_tail: format!("log of {n}"),
            ..Attempt::default()
        }
    }

    #[test]
    fn a_retried_success_is_flaky_and_a_retried_failure_reruns() {
        let case = case_of(
            &report("completed", 2, ""),
            &[
                attempt(1, false, Some("missing-artifact")),
                attempt(2, true, None),
            ],
        );
        let TestCaseStatus::Success { flaky_runs } = &case.status else {
            panic!("{case:?}")
        };
        assert_eq!(flaky_runs.len(), 1);
        assert_eq!(flaky_runs[0].kind, NonSuccessKind::Failure);
        assert_eq!(flaky_runs[0].message.as_deref(), Some("attempt 1: why 1"));
        assert_eq!(flaky_runs[0].system_out.as_deref(), Some("log of 1"));
        assert_eq!(case.system_out.as_deref(), Some("log of 2"));

        let case = case_of(
            &report("error", 2, "why 2"),
            &[
                attempt(1, false, Some("missing-artifact")),
                attempt(2, false, Some("exit")),
            ],
        );
        let TestCaseStatus::NonSuccess {
            kind,
            message,
            reruns,
            ty,
            ..
        } = &case.status
        else {
            panic!("{case:?}")
        };
        assert_eq!(*kind, NonSuccessKind::Failure);
        assert_eq!(message.as_deref(), Some("why 2"));
        assert_eq!(ty.as_deref(), Some("exit"));
        assert_eq!(reruns.runs.len(), 1, "the last attempt is the case itself");
    }

    #[test]
    fn the_harness_failing_is_an_error_and_not_run_is_skipped() {
        let case = case_of(
            &report("error", 1, "interrupted"),
            &[attempt(1, false, Some("interrupted"))],
        );
        assert!(matches!(
            case.status,
            TestCaseStatus::NonSuccess {
                kind: NonSuccessKind::Error,
                ..
            }
        ));
        let case = case_of(
            &report("not-run", 0, "an earlier stage did not complete"),
            &[],
        );
        assert!(matches!(case.status, TestCaseStatus::Skipped { .. }));
    }

    #[test]
    fn a_log_tail_keeps_the_end_of_what_the_attempt_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.md.log");
        std::fs::write(&log, "first attempt\n").unwrap();
        let from = std::fs::metadata(&log).unwrap().len();
        std::fs::write(&log, format!("first attempt\n{}second\n", "x".repeat(5000))).unwrap();
        let tail = tail_of(&log, from);
        assert!(
            tail.starts_with("[... 911 earlier bytes of the log]\n"),
            "{}",
            &tail[..60]
        );
        assert!(tail.ends_with("second\n"));
        assert!(!tail.contains("first"));
        assert_eq!(
            tail_of(&log, 0).len(),
            4096 + "[... 925 earlier bytes of the log]\n".len()
        );
        assert_eq!(tail_of(&dir.path().join("absent"), 0), "");
    }
}
