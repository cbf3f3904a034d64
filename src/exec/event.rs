//! What the executor records and reads back (docs/exec.md#what-is-written-when,
//! docs/exec.md#crash-safety-and-resume): one event type, written as one line
//! of the events log by exec, read by resume, and handed to every reporter.
//! Nothing names an event by a string literal but the serde attributes here.

use crate::provider::Usage;
use crate::state::attempts::AttemptStatus;
use crate::vocab::Backend;
use crate::vocab::FailureKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One line of `lead-events.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Event {
    /// Recorded (and synced) before the attempt's command may start.
    WorkerDispatched(Dispatched),
    /// The attempt did not complete; a retry, a resumption or the end of the
    /// job follows.
    WorkerFailed(Settled),
    /// The failed attempt is followed by another (docs/exec.md#retries).
    WorkerRetryScheduled(RetryScheduled),
    /// The attempt completed.
    WorkerResultCollected(Settled),
    /// The egress proxy refused one of the attempt's connections
    /// (docs/confinement.md#network); recorded as the attempt settles.
    EgressRefused(EgressRefused),
    /// A stage's audit baseline was written and synced; recorded (and
    /// synced) before the stage's first dispatch, so that a later exec uses
    /// that file or none (docs/audit.md#the-stages-baseline).
    StageSnapshotWritten(StageSnapshot),
}

/// What every event of an attempt carries: when, which plan, which job and
/// attempt, and how it was dispatched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Head {
    pub ts: String,
    #[serde(flatten)]
    pub who: Who,
    pub attempt: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_id: Option<String>,
    pub worker_key: String,
    pub plan_digest: String,
    pub max_attempts: u32,
    pub dispatch_mode: Backend,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded_from: Option<Backend>,
    /// The name of the plan stage the job belongs to (absent in lines of an
    /// older okstra), so that usage adds up per stage in `okstra status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
}

pub use crate::plan::Who;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Dispatched {
    #[serde(flatten)]
    pub head: Head,
    /// How the backend knows the attempt: the wrapper's pid on this machine
    /// (the leader of its process group), a Slurm job id on a cluster.
    #[serde(flatten)]
    pub handle: Handle,
    /// When that process started, in clock ticks since boot
    /// (`/proc/<pid>/stat` field 22), so that a resumed exec never mistakes
    /// a later process that reused the pid for the wrapper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    pub prompt_path: String,
    pub result_path: String,
    /// The wrapper argv exec started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
    /// The attempt's private directory exec named (`--tmp-dir`): the
    /// confined worker's TMPDIR and its CLI's private state are in it.
    /// exec removes it once it settled the attempt, a resumed exec too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_dir: Option<String>,
    /// What each completion path was before the attempt started, so that
    /// only what this attempt wrote counts (docs/exec.md#settling-an-attempt);
    /// absent in lines of an older okstra, where presence alone counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub completion_paths_before: Vec<super::artifacts::PathBefore>,
    /// The git worktree the attempt runs in, made at its base before it
    /// started (docs/worktrees.md#running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<WorktreeUse>,
}

/// A job's git worktree as one attempt used it (docs/worktrees.md#running):
/// where, on which branch, from which base; once settled, the commit its
/// branch got (completed) or where what it left was kept (not completed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorktreeUse {
    pub path: String,
    pub branch: String,
    pub base: String,
    /// The commit on `branch` holding what the attempt changed; absent
    /// where it changed nothing (or has not settled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// `okstra-attempts/<taskKey>/<state key>/<N>`: what an attempt that
    /// did not complete left, kept for inspection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_commit: Option<String>,
}

/// How a backend knows an attempt it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Handle {
    /// A process on this machine: the wrapper's pid.
    Pid { pid: u32 },
    /// A Slurm job.
    #[serde(rename_all = "camelCase")]
    Slurm { slurm_job_id: u64 },
}

impl Handle {
    /// The process on this machine, if the attempt runs here.
    pub fn pid(self) -> Option<u32> {
        match self {
            Handle::Pid { pid } => Some(pid),
            Handle::Slurm { .. } => None,
        }
    }
}

impl std::fmt::Display for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Handle::Pid { pid } => write!(f, "pid {pid}"),
            Handle::Slurm { slurm_job_id } => write!(f, "Slurm job {slurm_job_id}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settled {
    #[serde(flatten)]
    pub head: Head,
    pub status: AttemptStatus,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrapper_exit_code: Option<i32>,
    #[serde(default)]
    pub missing_completion_paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli_session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_kind: Option<FailureKind>,
    /// The exact argv the wrapper started (the provider CLI's, or a
    /// `command` job's), from its status sidecar.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cli_argv: Vec<String>,
    /// What the attempt spent, from its status sidecar, where the CLI said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The kernel confinement the worker ran under, from its status
    /// sidecar: `landlock-abi<N>` or `none`
    /// (docs/confinement.md#kernel-confinement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confinement: Option<String>,
    /// The network the confined worker had: `provider`, `none` or `open`
    /// (docs/confinement.md#network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::vocab::NetworkMode>,
    /// Where the worker's connections through the egress proxy went
    /// (docs/confinement.md#network), one entry per destination.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<crate::egress::Destination>,
    /// What the attempt wrote in its CLI's private state (none of it
    /// reached the user's), and what became of a login it refreshed
    /// (docs/confinement.md#provider-state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_state: Option<crate::provider::state::Report>,
    /// The attempt ended because exec was interrupted or died, not by its
    /// own doing: the next exec starts a new attempt that does not count
    /// against the retry limit (docs/exec.md#crash-safety-and-resume).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resumable: bool,
    /// The change summary of the mutation audit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutation_audit: Option<Value>,
    /// How appending the error-log record went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_log_append: Option<Value>,
    /// The attempt's git worktree and what became of its changes
    /// (docs/worktrees.md#running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<WorktreeUse>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryScheduled {
    #[serde(flatten)]
    pub head: Head,
    #[serde(default)]
    pub missing_completion_paths: Vec<String>,
    pub reason: String,
    pub next_attempt: u64,
}

/// A connection the egress proxy refused an attempt's worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressRefused {
    #[serde(flatten)]
    pub head: Head,
    pub host: String,
    pub port: u16,
    /// Why, in one sentence.
    pub reason: String,
}

/// Where a stage's audit baseline was written, and what it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StageSnapshot {
    pub ts: String,
    pub plan_digest: String,
    /// The stage's name.
    pub stage: String,
    /// Its place in the plan, from 1.
    pub stage_number: usize,
    /// The snapshot file, project-relative.
    pub path: String,
    /// sha256 of the file's bytes, 64 lowercase hex digits.
    pub sha256: String,
}

impl Event {
    /// Who and which attempt an event of a job is about; `None` for a
    /// record of the stage as a whole.
    pub fn head(&self) -> Option<&Head> {
        match self {
            Event::WorkerDispatched(d) => Some(&d.head),
            Event::WorkerFailed(s) | Event::WorkerResultCollected(s) => Some(&s.head),
            Event::WorkerRetryScheduled(r) => Some(&r.head),
            Event::EgressRefused(r) => Some(&r.head),
            Event::StageSnapshotWritten(_) => None,
        }
    }

    /// The plan the record belongs to.
    pub fn plan_digest(&self) -> &str {
        match self {
            Event::StageSnapshotWritten(s) => &s.plan_digest,
            _ => self.head().map_or("", |h| &h.plan_digest),
        }
    }

    /// The event as one line of the log.
    pub fn line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The least a test needs of a record: attempt `attempt` of `key`,
/// dispatched to the wrapper whose pid is `pid`, under plan
/// `sha256:plan`.
#[cfg(test)]
impl Dispatched {
    pub(crate) fn sample(key: &str, attempt: u64, pid: u32) -> Dispatched {
        Dispatched {
            head: Head::sample(key, attempt),
            handle: Handle::Pid { pid },
            pid_start: None,
            session_id: None,
            prompt_path: "p".into(),
            result_path: "r".into(),
            argv: vec![],
            tmp_dir: None,
            completion_paths_before: vec![],
            worktree: None,
        }
    }
}

#[cfg(test)]
impl Head {
    pub(crate) fn sample(key: &str, attempt: u64) -> Head {
        Head {
            ts: "t".into(),
            who: Who::default(),
            attempt,
            dispatch_id: None,
            worker_key: key.into(),
            plan_digest: "sha256:plan".into(),
            max_attempts: 2,
            dispatch_mode: crate::vocab::Backend::CliWrapper,
            degraded_from: None,
            stage: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head() -> Head {
        Head {
            ts: "2026-12-01T00:00:00Z".into(),
            who: Who {
                worker_id: Some("a".into()),
                ..Who::default()
            },
            attempt: 1,
            dispatch_id: None,
            worker_key: "a".into(),
            plan_digest: "sha256:0".into(),
            max_attempts: 2,
            dispatch_mode: Backend::CliWrapper,
            degraded_from: None,
            stage: None,
        }
    }

    #[test]
    fn type_and_ts_lead_the_line_and_it_reads_back() {
        let e = Event::WorkerDispatched(Dispatched {
            head: head(),
            handle: Handle::Pid { pid: 42 },
            pid_start: Some(7),
            session_id: None,
            prompt_path: "p.md".into(),
            result_path: "r.md".into(),
            argv: vec![],
            tmp_dir: None,
            completion_paths_before: vec![],
            worktree: None,
        });
        let line = e.line();
        assert!(
            line.starts_with(r#"{"type":"worker-dispatched","ts":"2026-12-01T00:00:00Z","workerId":"a","attempt":1,"#),
            "{line}"
        );
        assert!(!line.contains("sessionId"), "absent, not empty: {line}");
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), e);
    }

    #[test]
    fn each_kind_has_its_wire_name() {
        let settled = Settled {
            head: head(),
            status: AttemptStatus::Error,
            reason: "interrupted".into(),
            exit_code: None,
            wrapper_exit_code: None,
            missing_completion_paths: vec![],
            served_model: None,
            cli_session_id: None,
            failure_kind: Some(FailureKind::Interrupted),
            cli_argv: vec![],
            usage: None,
            confinement: None,
            network: None,
            egress: Vec::new(),
            provider_state: None,
            resumable: true,
            mutation_audit: None,
            error_log_append: None,
            worktree: None,
        };
        let retry = RetryScheduled {
            head: head(),
            missing_completion_paths: vec!["r.md".into()],
            reason: "missing".into(),
            next_attempt: 2,
        };
        for (e, name) in [
            (Event::WorkerFailed(settled.clone()), "worker-failed"),
            (
                Event::WorkerResultCollected(settled),
                "worker-result-collected",
            ),
            (Event::WorkerRetryScheduled(retry), "worker-retry-scheduled"),
            (
                Event::StageSnapshotWritten(StageSnapshot {
                    ts: "t".into(),
                    plan_digest: "sha256:0".into(),
                    stage: "build".into(),
                    stage_number: 1,
                    path: "run/snapshots/0-stage-1.json".into(),
                    sha256: "0".repeat(64),
                }),
                "stage-snapshot-written",
            ),
        ] {
            let v: Value = serde_json::from_str(&e.line()).unwrap();
            assert_eq!(v["type"], name);
            assert_eq!(serde_json::from_value::<Event>(v).unwrap(), e);
        }
    }

    #[test]
    fn a_line_of_another_writer_or_an_older_okstra_still_reads() {
        // Extra keys are ignored; a v2 identity reads back.
        let line = r#"{"type":"worker-failed","ts":"t","schemaVersion":"2.0","executionIdentityVersion":2,"participantRef":"p","attempt":2,"dispatchId":"inv:attempt-2","workerKey":"k","planDigest":"d","maxAttempts":2,"dispatchMode":"pane","degradedFrom":"pane","status":"error","reason":"x","exitCode":1,"sessionId":"","somethingNew":[1]}"#;
        let e: Event = serde_json::from_str(line).unwrap();
        let head = e.head().unwrap();
        assert_eq!(head.attempt, 2);
        assert_eq!(head.who.participant_ref.as_deref(), Some("p"));
    }
}
